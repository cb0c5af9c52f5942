"""Every committed run under reports/ rebuilds into the same report.md (tables and text) with today's code: a
refactor that changes a committed table fails here. Figures are not compared (matplotlib versions move them), so
the runs' reports are built with their figures planned, not drawn (`report_markdown`; that planning names the
same figures as drawing is tested in tests/reporting/test_reporting.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPORTS = Path(__file__).resolve().parents[2] / "reports"
RUNS = sorted(p.parent for p in REPORTS.glob("*/*/results.parquet"))


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_committed_run_report_rebuilds_identically(run):
    pytest.importorskip("seaborn")
    from llm_collapse.reporting.build import report_markdown
    from llm_collapse.reporting.frames import load_runs

    assert report_markdown(load_runs([run]), run) == (run / "report.md").read_text()


def test_committed_study_report_rebuilds_identically(tmp_path):
    """reports/study/report.{md,html} are what `python -m llm_collapse.study reports/study` makes from the
    committed runs and experiments/study/questions.yaml, and every figure the HTML links is committed."""
    import re

    from llm_collapse.reporting.study import build_study

    study = REPORTS / "study"
    copy = tmp_path / "study"
    shutil.copytree(study, copy, ignore=shutil.ignore_patterns("report.md", "report.html", "answers.csv"))
    out = build_study(copy, REPORTS.parent / "experiments" / "study" / "questions.yaml")

    def rebuilt(kind: str) -> str:  # the report names its root in the rebuild command
        return out[kind].read_text().replace(copy.as_posix(), "reports/study")

    assert rebuilt("md") == (study / "report.md").read_text()
    assert (
        rebuilt("csv") == (study / "answers.csv").read_text()
    )  # every number of the answers, from today's code
    page = (study / "report.html").read_text()
    assert rebuilt("html") == page
    srcs = re.findall(r'<img src="([^"]+)"', page)
    assert srcs and all((study / src).is_file() for src in srcs)


RETRIEVAL_TASKS = {"passkey", "needle"}
SAME_DOCUMENTS = ("models", "backend", "corpus", "dtype", "seed", "design", "prefix_docs", "retrieval_docs", "retrieval_queries", "retrieval_pool")  # fmt: skip


def _retrieval_runs_by_documents() -> dict[tuple, list[Path]]:
    """Committed retrieval runs grouped by task and the config fields that fix its documents and queries (the
    task is the key's last item): each length draws from its own seed, so runs in one group embed the same
    documents wherever their lengths overlap."""
    import json

    groups: dict[tuple, list[Path]] = {}
    for run in RUNS:
        config = json.loads((run / "run.json").read_text())["config"]
        if set(config["tasks"]) <= RETRIEVAL_TASKS:
            fields = tuple(json.dumps(config.get(field), sort_keys=True) for field in SAME_DOCUMENTS)
            for task in config["tasks"]:
                groups.setdefault((*fields, task), []).append(run)
    return {key: runs for key, runs in groups.items() if len(runs) > 1}


def test_runs_on_the_same_documents_agree_on_base():
    """Base's retrieval rows are reproducible across runs: retrieval16k_rope and retrieval32k_tau computed base
    on an empty cache, and where their lengths overlap retrieval32k's they must match it exactly."""
    import itertools

    import pandas as pd

    groups = _retrieval_runs_by_documents()
    names = {run.name for runs in groups.values() for run in runs}
    assert {"retrieval32k", "retrieval16k_rope", "retrieval32k_tau"} <= names
    keys = ["model", "task", "corpus", "length", "depth", "metric"]
    compared: set[str] = set()  # a run alone at its length (retrieval4k) has nothing to agree with
    for key, runs in groups.items():
        frames = {}
        for run in runs:
            rows = pd.read_parquet(run / "results.parquet")
            rows = rows[(rows["task"] == key[-1]) & (rows["method"] == "base") & rows["metric"].isin(["acc@1", "ndcg@10"])]  # fmt: skip
            frames[run.name] = rows.set_index(keys)[["value", "n"]].sort_index()
        for a, b in itertools.combinations(frames, 2):
            common = frames[a].index.intersection(frames[b].index)
            if len(common):
                compared |= {a, b}
                pd.testing.assert_frame_equal(frames[b].loc[common], frames[a].loc[common], check_exact=True, obj=f"{b} vs {a}")  # fmt: skip
    assert {"retrieval32k", "retrieval16k_rope", "retrieval32k_tau"} <= compared, sorted(compared)


RUN_JSONS = sorted(REPORTS.glob("**/run.json"))


@pytest.mark.parametrize("path", RUN_JSONS, ids=[str(p.parent.relative_to(REPORTS)) for p in RUN_JSONS])
def test_every_committed_run_id_is_recomputed_from_its_stored_config(path):
    """A run's folder is found again by its id (a resumed run, ``report --recompute``), so the id today's code
    computes from the stored config must be the stored one: a change to the run-id rules that would orphan a
    committed run fails here. reports/study/echo, pooling_last and rope stored ``design: null`` from before the
    prefix design; they ran the bins design (their ``inputs.design``), which their configs now say."""
    import json

    from llm_collapse.run.config import CompareConfig

    record = json.loads(path.read_text())
    assert CompareConfig.from_values(record["config"]).run_id() == record["run_id"]
