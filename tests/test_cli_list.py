"""``llm-collapse list`` and ``llm-collapse --version`` (issue 45): what a run accepts, from the registries."""

from __future__ import annotations

import re
from importlib.metadata import version

import pytest

from llm_collapse.adapters import list_embedders
from llm_collapse.cli import main
from llm_collapse.data import CORPORA
from llm_collapse.interventions.parse import METHODS
from llm_collapse.tasks.registry import TASKS


def _names(capsys, what: str) -> list[str]:
    assert main(["list", what]) == 0
    lines = capsys.readouterr().out.splitlines()
    if what == "models":  # a table: its first line is the header
        lines = lines[1:]
    return [line.split()[0] for line in lines]


def test_list_names_what_the_registries_hold(capsys):
    assert _names(capsys, "models") == [*list_embedders(), "echo:<model>", "st:<folder>", "hf:<folder>"]
    assert [re.split(r"[:|\[]", usage)[0] for usage in _names(capsys, "methods")] == METHODS.names()
    assert _names(capsys, "tasks") == list(TASKS)
    assert _names(capsys, "corpora") == [*CORPORA.names(), "folder:PATH"]


def test_version_and_bad_choice(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"llm-collapse {version('llm-collapse')}"
    with pytest.raises(SystemExit) as exit_:
        main(["list", "nope"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "invalid choice: 'nope'" in err and len(err.splitlines()) == 1


def test_every_method_has_its_usage_and_a_description(capsys):
    """Each method's line shows its argument syntax (from the grammar table) and says what it does."""
    assert main(["list", "methods"]) == 0
    lines = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())
    assert lines["tempscale:TAU[:after][:TYPE]"].startswith("constant temperature")
    assert lines["ntk:THETA"] == "RoPE base override (ntk:1e5)"
    assert all(text.strip() and "``" not in text for text in lines.values())


def test_a_closed_pipe_ends_the_command_without_a_traceback():
    """``llm-collapse list methods | head -1``: the reader leaves early; the command exits 1, stderr stays empty."""
    import subprocess
    import sys

    body = (
        "import sys\nfrom llm_collapse.utils.commands import run_command\n"
        "def body():\n    raise BrokenPipeError\n"
        "sys.exit(run_command(body))"
    )
    result = subprocess.run([sys.executable, "-c", body], capture_output=True, text=True)
    assert result.returncode == 1 and result.stderr == ""
