"""`python -m llm_collapse.study`: question-by-question tables read back from the runs' results."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from llm_collapse import study
from llm_collapse.reporting.study import StudyError, build_study
from llm_collapse.reporting.synthetic_runs import write_synthetic_run

# A 1x1 PNG: the study only links figures the run report drew.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c63000100000500010d0a2db40000000049454e44ae426082"
)
QUESTIONS = """
title: Synthetic study
intro: For tests only.
questions:
  - id: collapse
    title: Does it collapse?
    run: sweep
    command: python -m llm_collapse.compare --config x.yaml
    metrics: [collapse/pairwise_cosine, passkey/acc@1]
    methods: [base, tempscale-0.8]
    baseline: base
    figures: [collapse-pairwise-cosine-synthetic.png]
    reading: Words only.
  - id: layers
    title: Per layer
    run: sweep
    command: python -m llm_collapse.compare --config y.yaml
    metrics: [layerwise/hf_ratio]
    models: [synth-decoder]
    methods: [base]
    layers: [first, last]
  - id: depths
    title: By depth
    run: sweep
    command: python -m llm_collapse.compare --config y.yaml
    metrics: [passkey/acc@1, collapse/pairwise_cosine]
    methods: [base]
    by_depth: [passkey]
"""


@pytest.fixture()
def study_root(tmp_path):
    run = write_synthetic_run(tmp_path / "sweep")
    (run / "figures").mkdir()
    (run / "figures" / "collapse-pairwise-cosine-synthetic.png").write_bytes(PNG)
    (tmp_path / "questions.yaml").write_text(QUESTIONS)
    return tmp_path


def test_tables_quote_the_results(study_root):
    out = build_study(study_root, study_root / "questions.yaml")
    text = out["md"].read_text()
    results = pd.read_parquet(study_root / "sweep" / "results.parquet")
    row = results[
        (results["model"] == "synth-encoder")
        & (results["method"] == "tempscale-0.8")
        & (results["metric"] == "pairwise_cosine")
        & (results["length"] == 2048)
    ].iloc[0]
    assert f"{row['value']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]" in text
    base = results[
        (results["model"] == "synth-encoder")
        & (results["method"] == "base")
        & (results["metric"] == "pairwise_cosine")
        & (results["length"] == 2048)
    ].iloc[0]
    assert f"{row['value'] - base['value']:+.3f}" in text  # the gap to the baseline at the longest length
    cells = results[(results["model"] == "synth-encoder") & (results["method"] == "tempscale-0.8")
                    & (results["metric"] == "pairwise_cosine")].sort_values("length")  # fmt: skip
    n = str(cells["n"].iloc[0]) if cells["n"].nunique() == 1 else f"{cells['n'].min()}–{cells['n'].max()}"
    first = cells.iloc[0]
    # the n column (items per length) sits before the shortest length's cell
    assert f"| synth-encoder | `tempscale:0.8` | {n} | {first['value']:.3f} [{first['ci_low']:.3f}," in text
    assert "tempscale:0.9" not in text.split("## Q2")[0]  # method filter
    assert "## Q2. Per layer" in text and "| synth-decoder | `base` | 0 |" in text
    assert "sweep/figures/collapse-pairwise-cosine-synthetic.png" in text
    q3 = text.split("## Q3")[1]
    assert "| position |" in q3 and "depth 0." in q3  # passkey split by depth, collapse not
    assert q3.count("| synth-encoder | `base` |") == 1 + q3.count("| synth-encoder | `base` | depth")
    page = out["html"].read_text()
    assert "data:image/png;base64," not in page  # the study links its runs' figures, it does not inline them
    srcs = re.findall(r'<img src="([^"]+)"', page)
    assert srcs == ["sweep/figures/collapse-pairwise-cosine-synthetic.png"]
    assert all((study_root / src).is_file() for src in srcs)


def test_bad_input_is_one_line_and_writes_nothing(study_root, capsys):
    (study_root / "bad.yaml").write_text(
        QUESTIONS.replace(
            "run: sweep\n    command: python -m llm_collapse.compare --config y.yaml",
            "run: missing\n    command: c",
        )
    )
    assert study.main([str(study_root), "--questions", str(study_root / "bad.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "missing" in err
    assert not (study_root / "report.md").exists()
    with pytest.raises(StudyError, match="tiny random"):
        write_synthetic_run(study_root / "tiny", tiny_random=True)
        (study_root / "t.yaml").write_text(QUESTIONS.replace("run: sweep", "run: tiny"))
        build_study(study_root, study_root / "t.yaml")


def test_n_column_states_one_count_or_the_range():
    from llm_collapse.reporting.study import _n_text

    assert _n_text([{"n": 32}, {"n": 32}]) == "32"
    assert _n_text([{"n": 96}, {"n": 24}, {"n": 48}]) == "24–96"  # retrieval2k vs 32k document counts
    assert _n_text([]) == "—"


def test_layers_may_differ_per_model(study_root):
    """``layers`` as a mapping picks each model's own layers; a model missing from it is an error, not skipped."""
    per_model = QUESTIONS.replace(
        "    models: [synth-decoder]\n    methods: [base]\n    layers: [first, last]",
        "    methods: [base]\n    layers: {synth-decoder: [first], synth-encoder: [last, 1]}",
    )
    (study_root / "per_model.yaml").write_text(per_model)
    text = build_study(study_root, study_root / "per_model.yaml")["md"].read_text().split("## Q2")[1]
    text = text.split("## Q3")[0]
    results = pd.read_parquet(study_root / "sweep" / "results.parquet")
    encoder_layers, decoder_layers = (
        sorted(int(x) for x in results[results["model"] == model]["layer"].dropna().unique())
        for model in ("synth-encoder", "synth-decoder")
    )
    assert f"| synth-decoder | `base` | {decoder_layers[0]} |" in text
    assert f"| synth-decoder | `base` | {decoder_layers[-1]} |" not in text
    assert (
        f"| synth-encoder | `base` | {encoder_layers[-1]} |" in text
        and "| synth-encoder | `base` | 1 |" in text
    )
    assert f"| synth-encoder | `base` | {encoder_layers[0]} |" not in text
    (study_root / "missing.yaml").write_text(per_model.replace(", synth-encoder: [last, 1]", ""))
    with pytest.raises(
        StudyError, match="model 'synth-encoder' has no entry in the question's layers mapping"
    ):
        build_study(study_root, study_root / "missing.yaml")


def test_figures_may_come_from_an_extra_run(study_root):
    """``run/name`` embeds a figure of one of the question's extra runs; any other run is a one-line error."""
    other = write_synthetic_run(study_root / "other")
    (other / "figures").mkdir()
    (other / "figures" / "other-figure.png").write_bytes(PNG)
    extra = QUESTIONS.replace(
        "    figures: [collapse-pairwise-cosine-synthetic.png]",
        "    extra_runs: [other]\n    figures: [collapse-pairwise-cosine-synthetic.png, other/other-figure.png]",
    )
    (study_root / "extra.yaml").write_text(extra)
    text = build_study(study_root, study_root / "extra.yaml")["md"].read_text()
    assert "](other/figures/other-figure.png)" in text
    assert "](sweep/figures/collapse-pairwise-cosine-synthetic.png)" in text
    (study_root / "stranger.yaml").write_text(extra.replace("    extra_runs: [other]\n", ""))
    with pytest.raises(StudyError, match="names run 'other', which is not among the question's runs"):
        build_study(study_root, study_root / "stranger.yaml")


@pytest.mark.parametrize(("field", "typo"), [("methods", "tempscale-0.08"), ("models", "synth-decodr")])
def test_a_method_or_model_in_no_run_is_an_error_not_a_silent_filter(study_root, field, typo):
    listed = "methods: [base, tempscale-0.8]" if field == "methods" else "models: [synth-decoder]"
    (study_root / "typo.yaml").write_text(QUESTIONS.replace(listed, listed[:-1] + f", {typo}]", 1))
    with pytest.raises(StudyError, match=rf"{field} \['{typo}'\] appear in none of its runs"):
        build_study(study_root, study_root / "typo.yaml")


def test_a_commands_table_and_figure_are_shown_as_they_are(study_root):
    """``outputs``: a CSV under the study root (the SOCM comparator's) renders as a table after the metric
    tables, its numbers as written, and a PNG as a figure; a missing one is a one-line error."""
    (study_root / "comparator.csv").write_text("model,avg_socm,source\nours,0.4210,ours\npaper,0.313,paper\n")
    (study_root / "layers").mkdir()
    (study_root / "layers" / "concentration.png").write_bytes(PNG)
    outputs = "    outputs: [comparator.csv, layers/concentration.png]\n    reading: Words only."
    (study_root / "outputs.yaml").write_text(QUESTIONS.replace("    reading: Words only.", outputs))
    md = build_study(study_root, study_root / "outputs.yaml")["md"].read_text()
    assert "`comparator.csv`:" in md and "| ours | 0.4210 | ours |" in md and "| paper | 0.313 | paper |" in md
    assert "](layers/concentration.png)" in md
    (study_root / "comparator.csv").unlink()
    with pytest.raises(StudyError, match="output .*comparator.csv' is not a .csv or .png file here"):
        build_study(study_root, study_root / "outputs.yaml")
