"""``llm-collapse list`` and ``llm-collapse --version`` (issue 45): what a run accepts, from the registries."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from llm_collapse.adapters import list_embedders
from llm_collapse.cli import main
from llm_collapse.data import CORPORA
from llm_collapse.interventions.parse import METHODS
from llm_collapse.tasks.registry import RUNNABLE


def _names(capsys, what: str) -> list[str]:
    assert main(["list", what]) == 0
    return [line.split()[0] for line in capsys.readouterr().out.splitlines()]


def test_list_names_what_the_registries_hold(capsys):
    assert _names(capsys, "models") == [*list_embedders(), "echo:<model>"]
    assert _names(capsys, "methods") == METHODS.names()
    assert _names(capsys, "tasks") == [t for t in RUNNABLE]
    assert _names(capsys, "corpora") == [*CORPORA.names(), "folder:PATH"]


def test_version_and_bad_choice(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"llm-collapse {version('llm-collapse')}"
    with pytest.raises(SystemExit) as exit_:
        main(["list", "nope"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "invalid choice: 'nope'" in err and len(err.splitlines()) == 1
