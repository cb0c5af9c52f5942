"""Help and usage of every command (issue 45): usage and errors name the program as it was invoked, each
default is printed once, no reST backticks, and ``--corpus`` lists the corpora and ``folder:PATH``."""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import sys

import pytest

from llm_collapse.cli import COMMANDS, command_module, main
from llm_collapse.data import CORPORA

# the commands that also run as ``python -m llm_collapse.<command>``
MODULE_COMMANDS = [c for c in COMMANDS if importlib.util.find_spec(f"llm_collapse.{c}") is not None]


def _help(capsys, argv: list[str], run=main) -> str:
    with pytest.raises(SystemExit) as exit_:
        run(argv)
    assert exit_.value.code == 0
    return capsys.readouterr().out


def _entries(text: str) -> dict[str, str]:
    """Each option's help entry of an argparse help text, by its first flag, lines joined."""
    entries: dict[str, str] = {}
    flag = None
    for line in text.splitlines():
        if re.match(r"^  \S", line):
            flag = line.split()[0].rstrip(",")
            entries[flag] = line
        elif flag is not None and line.startswith("    "):
            entries[flag] += " " + line.strip()
        else:
            flag = None
    return entries


@pytest.mark.parametrize("command", COMMANDS)
def test_usage_and_errors_name_the_console_command(command, capsys):
    assert _help(capsys, [command, "--help"]).startswith(f"usage: llm-collapse {command} ")
    with pytest.raises(SystemExit) as exit_:
        main([command, "--no-such-flag"])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: ") and err.endswith(f"(see llm-collapse {command} --help)")


@pytest.mark.parametrize("command", MODULE_COMMANDS)
def test_usage_names_the_module_when_run_as_one(command, capsys):
    run = importlib.import_module(command_module(command)).main
    assert _help(capsys, ["--help"], run).startswith(f"usage: python -m llm_collapse.{command} ")


def test_python_dash_m_prints_its_own_name():
    done = subprocess.run(
        [sys.executable, "-m", "llm_collapse.compare", "--no-such-flag"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().endswith("(see python -m llm_collapse.compare --help)")


@pytest.mark.parametrize("command", COMMANDS)
def test_each_default_is_printed_once_and_no_backticks(command, capsys):
    text = _help(capsys, [command, "--help"])
    assert "`" not in text
    for flag, entry in _entries(text).items():
        assert len(re.findall(r"(?<!/)\bdefault\b", entry)) <= 1, entry  # not reports/default
        assert "(default: None)" not in entry and "(default: {})" not in entry, flag


def test_compare_help_shows_the_config_defaults(capsys):
    entries = _entries(_help(capsys, ["compare", "--help"]))
    assert entries["--models"].endswith("(default: minilm,gemma3-270m,echo-gemma3-270m)")
    assert entries["--max-per-bin"].endswith("(default: 24)")
    assert entries["--dtype"].endswith("(default: auto)")
    assert entries["--device"].endswith("(default: auto)")
    assert entries["--design"].endswith("(default: prefix where the corpus gives the documents, else bins)")
    assert "default" not in entries["--model-path"]  # an empty mapping has nothing to show


def test_corpus_help_lists_every_corpus_and_folder(capsys):
    entry = _entries(_help(capsys, ["compare", "--help"]))["--corpus"]
    assert all(re.search(rf"[ :]{re.escape(name)}[, ]", entry) for name in CORPORA.names()), entry
    assert "folder:PATH" in entry


def test_compare_help_is_in_sections_with_two_examples(capsys):
    """Issue 64: every configuration flag sits in one section of --help (a task's options in its own, issue 74),
    and the help ends with two examples kept line for line."""
    from dataclasses import fields

    from llm_collapse.run.arguments import GROUPS, task_sections
    from llm_collapse.run.config import CompareConfig
    from llm_collapse.tasks.registry import option_fields

    placed = [name for names in GROUPS.values() for name in names]
    placed += [option.field.name for options in task_sections().values() for option in options]
    expected = [f.name for f in fields(CompareConfig)] + list(option_fields())
    assert sorted(placed) == sorted(expected) and len(set(placed)) == len(placed)
    text = _help(capsys, ["compare", "--help"])
    sections = [line.rstrip(":") for line in text.splitlines() if re.fullmatch(r"[a-zA-Z(][^ ].*:", line)]
    assert sections == ["options", "the command", *GROUPS, *task_sections(), "examples"]
    assert "the retrieval tasks (--tasks passkey, needle, passkey-start, needle-start, position)" in sections
    examples = text.split("examples:", 1)[1].strip().splitlines()
    assert len(examples) == 2 and all(line.strip().startswith("llm-collapse compare --") for line in examples)
    assert text.startswith("usage: llm-collapse compare [--config FILE] [--dry-run] [options]\n")
