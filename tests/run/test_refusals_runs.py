"""Issue 41, the run-level cases: each bad value is one ``error:`` line (exit 2) with nothing written, two runs
never share an ``--out``, a full disk or an unwritable cache folder never ends in a traceback, and a report
survives a metric that has no value."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llm_collapse.cli.report import main as report_main
from llm_collapse.encoding.cache import EmbeddingCache
from llm_collapse.reporting import build_report
from llm_collapse.reporting.figures import make_figures
from llm_collapse.reporting.frames import load_runs
from llm_collapse.reporting.synthetic_runs import write_synthetic_run
from llm_collapse.run.directory import LOCK, MARKER
from llm_collapse.testing.cli import compare_argv
from llm_collapse.testing.trees import file_tree

pytestmark = pytest.mark.usefixtures("private_cache", "needs_sotu")


RUN = dict(
    tiny="mistral",
    methods="base",
    tasks="collapse",
    lengths=[32],
    max_per_bin=4,
    batch_size=4,
    dtype="fp32",
    no_report=True,
)


def _command(tiny_dir, out: Path, **flags) -> list[str]:
    """`RUN` with ``flags`` as the command line of a process of its own (the tiny checkpoint by --model-path)."""
    run = {key: value for key, value in (RUN | flags).items() if key != "tiny"}
    argv = compare_argv(out, models="mistral", model_path={"mistral": tiny_dir("mistral")}, **run)
    return [sys.executable, "-m", "llm_collapse.compare", *argv]


def _refused(run_compare, capsys, roots: list[Path], message: str, out: Path, **flags) -> str:
    before = file_tree(*roots)
    assert run_compare(out, **flags) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err, err
    assert len(err.splitlines()) == 1, err
    assert file_tree(*roots) == before
    return err


# ------------------------------------------------------------------ values refused before any work


@pytest.mark.parametrize("dry_run", [False, True])
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (dict(seed=-1), "--seed must be >= 0, got -1"),
        (dict(tasks="needle", retrieval_docs=101, retrieval_queries=5),
         "--retrieval-docs 101 is more than task 'needle' can generate (100 documents per length); "
         "use --retrieval-docs <= 100"),
        (dict(tasks="passkey", retrieval_docs=901, retrieval_queries=5), "--retrieval-docs <= 900"),
        (dict(tasks="passkey", lengths=[8, 64]), "use lengths >= "),
        (dict(tasks="needle", lengths=[16, 64]), "length 16 is too short for needle"),
        (dict(tasks="position", lengths=[8, 64]), "length 8 is too short for position"),
        (dict(tasks="passkey", retrieval_docs=1, retrieval_queries=1),
         "leaves each query a single candidate, so Acc@1 is always 1; use --retrieval-docs >= 2"),
        (dict(tasks="knn"), "--max-per-bin 4 is too few texts per length for the kNN probe"),
        (dict(tasks="knn", design="prefix", prefix_docs=5), "use --prefix-docs >= 6"),
        (dict(label="party"), "--label applies to --tasks knn or placed only"),
        (dict(retrieval_pool=2), "--retrieval-pool applies to the retrieval tasks"),
    ],
)  # fmt: skip
def test_bad_value_is_one_line_and_writes_nothing(run_compare, tmp_path, capsys, extra, message, dry_run):
    out = tmp_path / "run"
    _refused(run_compare, capsys, [out, tmp_path / "cache"], message, out, **RUN | extra, dry_run=dry_run)
    assert not out.exists()


def test_the_smallest_knn_sample_named_in_the_refusal_runs(run_compare, tmp_path):
    out = tmp_path / "run"
    assert run_compare(out, **RUN | dict(tasks="knn", max_per_bin=6)) == 0
    rows = pd.read_parquet(out / "results.parquet")
    assert rows.loc[rows["metric"] == "knn_accuracy", "value"].notna().all()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_per_bin: 4\nmax-per-bin: 6\n", "sets max_per_bin twice (as 'max_per_bin' and 'max-per-bin')"),
        ("seed: 1\nmodels: [minilm]\nseed: 2\n", "sets 'seed' twice (lines 1 and 3); keep one of them"),
    ],
)
def test_a_yaml_key_given_twice_is_refused(run_compare, tmp_path, capsys, text, message):
    config = tmp_path / "run.yaml"
    config.write_text(text)
    out = tmp_path / "run"
    _refused(run_compare, capsys, [out], message, out, **RUN, config=config)


def test_a_refusal_prints_no_warning_before_its_line(tiny_dir, tmp_path):
    """The corpus sampler warns about a bin it leaves empty; the refusal of that length is the only line
    (a real process: the warning would go to stderr through logging's handler). A small folder corpus keeps
    the token counting short."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"doc{i}.txt").write_text(" ".join(f"word{j}" for j in range(400 + 50 * i)))
    env = {**os.environ, "LLM_COLLAPSE_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    for dry_run in (False, True):
        command = _command(
            tiny_dir, tmp_path / "run", corpus=f"folder:{corpus}", lengths=[32, 90000], dry_run=dry_run
        )
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: --lengths 90000:"), done.stderr
        assert done.stdout == ""
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------ two runs on one --out


def _compare_process(tiny_dir, out: Path, lengths: list[int], env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        _command(tiny_dir, out, lengths=lengths, max_per_bin=24, batch_size=2),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_two_different_runs_started_a_second_apart_never_share_an_out(tiny_dir, tmp_path, private_cache):
    """Whichever claims the folder first runs to the end; the other is refused in one line naming its process,
    and the folder holds the winner's complete run (before, both exited 0 and the first's results were lost)."""
    env = {**os.environ, "LLM_COLLAPSE_CACHE": str(private_cache), "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "run"
    first = _compare_process(tiny_dir, out, [32, 64, 128], env)
    time.sleep(1.0)
    second = _compare_process(tiny_dir, out, [32, 64], env)
    results = [(p, *p.communicate(timeout=600)) for p in (first, second)]
    codes = sorted(p.returncode for p, _, _ in results)
    assert codes == [0, 2], [(p.returncode, err) for p, _, err in results]
    winner = next(p for p, _, _ in results if p.returncode == 0)
    _, _, refusal = next(r for r in results if r[0].returncode == 2)
    lines = refusal.strip().splitlines()
    assert len(lines) == 1 and "is being written by another run" in lines[0], refusal
    assert f"process {winner.pid})" in lines[0]
    marker = json.loads((out / MARKER).read_text())
    assert marker["state"] == "complete" and marker["pid"] == winner.pid
    lengths = json.loads((out / "run.json").read_text())["config"]["lengths"]
    assert lengths == ([32, 64, 128] if winner is first else [32, 64])
    assert not (out / LOCK).exists()


def test_a_run_holding_the_out_refuses_another_with_its_pid(
    run_compare, tiny_dir, tmp_path, private_cache, capsys
):
    """Deterministic half of the race above: once the first run has claimed --out (its lock file appears),
    a different run is refused, in --dry-run too, and the first still finishes."""
    env = {**os.environ, "LLM_COLLAPSE_CACHE": str(private_cache), "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "run"
    first = _compare_process(tiny_dir, out, [32, 64, 128, 256], env)
    deadline = time.monotonic() + 120
    while not (out / LOCK).exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        for dry_run in (False, True):
            assert run_compare(out, **RUN | dict(lengths=[64], dry_run=dry_run)) == 2
            err = capsys.readouterr().err.strip()
            assert err == (
                f"error: {out} is being written by another run ({_lock_run_id(out)}, process {first.pid}); "
                "wait for it to finish or choose another --out"
            )
    finally:
        _, stderr = first.communicate(timeout=600)
    assert first.returncode == 0, stderr
    assert json.loads((out / MARKER).read_text())["state"] == "complete"


def _lock_run_id(out: Path) -> str:
    with contextlib.suppress(OSError, ValueError):
        return json.loads((out / LOCK).read_text())["run_id"]
    return "?"


# ------------------------------------------------------------------ a full disk, an unwritable cache folder


@contextlib.contextmanager
def _small_tmpfs(path: Path, size: str = "2m"):
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(folder: Path) -> Path:
    """Writes one file until the file system has no space left; returns it (remove it to free the space)."""
    filler = folder / "filler.bin"
    with open(filler, "wb") as handle:
        with contextlib.suppress(OSError):
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
    with contextlib.suppress(OSError):  # the last partial block
        with open(filler, "ab") as handle:
            while True:
                handle.write(b"\0")
                handle.flush()
    return filler


@pytest.mark.parametrize("full", ["cache", "out"])
def test_a_full_disk_is_one_line_and_the_rerun_resumes(run_compare, tmp_path, monkeypatch, capsys, full):
    with _small_tmpfs(tmp_path / "disk") as disk:
        cache = disk / "cache" if full == "cache" else tmp_path / "cache"
        out = disk / "run" if full == "out" else tmp_path / "run"
        (disk / "cache").mkdir()
        monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(cache))
        filler = _fill(disk)
        flags = RUN | dict(lengths=[32, 64])
        assert run_compare(out, **flags) == 2
        err = capsys.readouterr().err.strip()  # found mid-run: after the model loaded (its progress bar)
        folder = "the cache folder" if full == "cache" else "the folder"
        assert "Traceback" not in err and err.count("error:") == 1, err
        last = err.splitlines()[-1]
        assert last.startswith(f"error: {folder} ") and "is on a full file system" in last, err
        assert "rerun the same command" in last
        assert not out.exists()  # nothing left behind, not even an empty folder
        assert [p for p in cache.rglob("*") if p.is_file()] == [] or full == "out"
        filler.unlink()
        assert run_compare(out, **flags) == 0
        resumed = pd.read_parquet(out / "results.parquet")
    monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(tmp_path / "fresh-cache"))
    assert run_compare(tmp_path / "reference", **flags) == 0
    pd.testing.assert_frame_equal(resumed, pd.read_parquet(tmp_path / "reference" / "results.parquet"))


@contextlib.contextmanager
def _unwritable(folder: Path):
    """Makes ``folder`` refuse new files, also for root (``chattr +i``); skips where that cannot be done."""
    if os.geteuid() == 0:
        done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True)
        undo = ["chattr", "-i", str(folder)]
    else:
        folder.chmod(0o555)
        done, undo = subprocess.CompletedProcess([], 0), ["chmod", "755", str(folder)]
    probe = folder / "probe"
    try:
        if done.returncode != 0:
            pytest.skip(f"cannot make {folder} unwritable here: {done.stderr.decode().strip()}")
        try:
            probe.touch()
        except OSError:
            yield folder
        else:
            probe.unlink()
            pytest.skip(f"{folder} is still writable")
    finally:
        subprocess.run(undo, check=False)


def test_an_unwritable_shards_folder_is_read_only_with_one_warning(tmp_path, caplog):
    cache = EmbeddingCache(tmp_path / "key", dim=3)
    first = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert cache.put(["a", "b"], first) is not None
    with _unwritable(cache.shard_dir):
        with caplog.at_level("WARNING", logger="llm_collapse.encoding"):
            assert cache.put(["c"], first[:1] + 10) is None
            assert cache.put(["d"], first[:1] + 20) is None
        warnings = [r for r in caplog.records if "cannot be written" in r.getMessage()]
        assert len(warnings) == 1 and str(cache.shard_dir) in warnings[0].getMessage()
        assert cache.read_only
        np.testing.assert_array_equal(cache.get(["c"])["c"], first[0] + 10)  # still served in this process
    assert sorted(EmbeddingCache(tmp_path / "key", dim=3).get(["a", "b", "c", "d"])) == ["a", "b"]


def test_a_run_on_a_cache_with_an_unwritable_shards_folder_finishes(run_compare, tmp_path, private_cache):
    """Before, a read-only ``shards/`` inside a writable cache crashed mid-run with PermissionError."""
    assert run_compare(tmp_path / "first", **RUN) == 0
    (shards,) = private_cache.rglob("shards")
    with _unwritable(shards):
        assert run_compare(tmp_path / "run", **RUN | dict(lengths=[32, 64])) == 0
    assert run_compare(tmp_path / "reference", **RUN | dict(lengths=[32, 64], overwrite=True)) == 0
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "run" / "results.parquet"),
        pd.read_parquet(tmp_path / "reference" / "results.parquet"),
    )


# ------------------------------------------------------------------ a metric with no value


def _with_empty_metric(run: Path, metric: str) -> Path:
    path = run / "results.parquet"
    rows = pd.read_parquet(path)
    assert (rows["metric"] == metric).any()
    rows.loc[rows["metric"] == metric, ["value", "ci_low", "ci_high"]] = np.nan
    rows.to_parquet(path, index=False)
    return run


def test_a_metric_nan_at_every_length_is_left_out_and_named(tmp_path):
    run = _with_empty_metric(write_synthetic_run(tmp_path / "run", tasks=("collapse", "knn")), "knn_accuracy")
    files = build_report([run], tmp_path / "report")
    assert not any("knn-accuracy" in name for name in files)  # neither its figure nor its sweep
    assert "figures/collapse-values-synthetic.png" in files
    planned = make_figures(load_runs([run]), tmp_path / "planned", draw=False)
    assert planned and not any("knn_accuracy" in figure.metrics for figure in planned)  # not drawn in a group
    text = (tmp_path / "report" / "report.md").read_text()
    assert (
        "`knn_accuracy` on synthetic is NaN at every length, so it is left out of the figures and tables"
        in text
    )
    assert "more than k = 5 labelled texts per length" in text
    assert "| knn_accuracy" not in text and "knn_accuracy @" not in text


def test_a_run_with_every_value_nan_is_refused_by_the_report(tmp_path, capsys):
    run = write_synthetic_run(tmp_path / "run", tasks=("knn",))
    rows = pd.read_parquet(run / "results.parquet")
    rows[["value", "ci_low", "ci_high"]] = np.nan
    rows.to_parquet(run / "results.parquet", index=False)
    assert report_main([str(run), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "every result is NaN" in err, err
    assert not (tmp_path / "report").exists()
