"""issue 41 items 7 and 8 and the report usage line.

Each bad input is refused with exit code 2 and exactly one ``error: ...`` line on stderr that says what was
wrong, what is allowed and how to fix it, and nothing is written: item 7, a folder corpus's ``.jsonl`` record
of the wrong shape (named by file and line, before any text reaches a tokenizer); item 8, a malformed study
questions file (read like ``compare --config``: `llm_collapse.utils.yamlfile`); and the console script's
commands name themselves as invoked (``llm-collapse report``), not as ``python -m llm_collapse.report``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_collapse import data
from llm_collapse.cli import COMMANDS, command_module
from llm_collapse.cli import main as console_main
from llm_collapse.cli.study import main as study_main
from llm_collapse.reporting.study import StudyError, load_questions
from llm_collapse.testing.trees import file_tree

REPO = Path(__file__).resolve().parents[2]
LONG = " ".join(f"word{i} and some more text" for i in range(60))  # well past --lengths 32 tokens


def _exit_code(call, *args) -> int:
    """The exit code of a command: returned, or raised as SystemExit (argparse's usage errors)."""
    try:
        return call(*args)
    except SystemExit as done:
        return done.code


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    return lines[0]


# ------------------------------------------------------------------------ item 7: folder corpora, .jsonl

BAD_RECORDS = [
    (
        '{"text": "x", "labels": ["a", "b"]}',
        "'labels' is a JSON array; it must be an object of label name ->",
    ),
    (
        '{"text": "a \\ud800 b"}',
        "'text' holds a lone surrogate escape ('\\ud800'); text must be valid Unicode",
    ),
    ('{"text": "x", "labels": {"topic": "a\\udfff"}}', "label 'topic' holds a lone surrogate escape"),
    ('{"text": "x", "id": "\\ud800"}', "'id' holds a lone surrogate escape"),
    ('{"text": 5}', "'text' is a JSON number; it must be a string"),
    ('{"text": ["a"]}', "'text' is a JSON array; it must be a string"),
    ('{"text": "x", "labels": {"topic": {"a": 1}}}', "label 'topic' is a JSON object; a label value must be"),
    ('{"text": "x", "labels": {"topic": ["a"]}}', "label 'topic' is a JSON array; a label value must be"),
    ('{"text": "x", "labels": "sports"}', "'labels' is a JSON string; it must be an object"),
    ('{"text": "x", "id": {"n": 1}}', "'id' is a JSON object; it must be a string or an integer"),
    ('{"text": "x", "id": true}', "'id' is a JSON boolean; it must be a string or an integer"),
    ('["text", "x"]', "a JSON array; each line must be one object like"),
    ('{"body": "x"}', "no 'text' key; each line must be one object like"),
    ("{not json}", "not JSON (Expecting property name enclosed in double quotes at column 2)"),
]


def _folder(tmp_path: Path, bad_line: str) -> Path:
    """A folder corpus whose only fault is line 2 of ``c.jsonl``."""
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text(LONG, encoding="utf-8")
    good = json.dumps({"text": LONG, "labels": {"topic": "a"}})
    (folder / "c.jsonl").write_text(f"{good}\n{bad_line}\n{good}\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize(("bad_line", "message"), BAD_RECORDS)
def test_bad_jsonl_record_is_named_by_file_and_line(tmp_path, bad_line, message):
    folder = _folder(tmp_path, bad_line)
    with pytest.raises(data.CorpusReadError) as info:
        data.load_corpus(f"folder:{folder}")
    text = str(info.value)
    assert text.startswith(f"{folder / 'c.jsonl'}:2: bad jsonl record: ") and message in text, text
    assert "\n" not in text


@pytest.mark.parametrize(
    ("bad_line", "message"), [BAD_RECORDS[0], BAD_RECORDS[1], BAD_RECORDS[4], BAD_RECORDS[6]]
)
def test_compare_refuses_a_bad_jsonl_record_in_one_line(
    run_compare, tmp_path, capsys, private_cache, bad_line, message
):
    """Through ``compare --dry-run``: the list-valued ``labels`` was an AttributeError and the lone surrogate a
    TypeError in the tokenizer, neither naming the file."""
    folder = _folder(tmp_path, bad_line)
    out = tmp_path / "run"
    flags = dict(
        tiny="mistral", methods="base", tasks="collapse", lengths=[32], max_per_bin=4, dtype="fp32",
        corpus=f"folder:{folder}", no_report=True, dry_run=True,
    )  # fmt: skip
    before = file_tree(tmp_path)
    assert run_compare(out, **flags) == 2
    line = _one_error_line(capsys)
    assert "c.jsonl:2: bad jsonl record: " in line and message in line, line
    assert file_tree(tmp_path) == before
    assert not out.exists()


def test_jsonl_values_that_are_allowed(tmp_path):
    """Numbers and booleans are label strings, a null label value means no such label, an integer id is kept
    as a string; records are split at ``\\n`` only, so a raw U+2028 inside a string neither splits a record
    nor shifts the line numbers; a BOM before the first record and an escaped surrogate pair are fine."""
    rows = [
        '{"text": "one", "id": 7, "labels": {"n": 3, "x": 1.5, "ok": true, "gone": null}}',
        '{"text": "two\u2028lines", "labels": null}',
        '{"text": "smile \\ud83d\\ude00"}',
    ]
    (tmp_path / "c.jsonl").write_text("\ufeff" + "\r\n".join(rows) + "\n", encoding="utf-8")
    docs = data.load_corpus(f"folder:{tmp_path}")
    assert [d.doc_id for d in docs] == ["7", "c.jsonl:2", "c.jsonl:3"]
    assert docs[0].labels == {"n": "3", "x": "1.5", "ok": "True"}
    assert docs[1].text == "two lines" and docs[1].labels == {}
    assert docs[2].text == "smile \U0001f600"


# ----------------------------------------------------------------------- item 8: the study questions file

QUESTION = "questions:\n  - id: q1\n    title: T\n    run: sweep\n    command: c\n    metrics: [collapse/x]\n"
BAD_QUESTIONS = [
    (b"- id: q1\n- id: q2\n", "must hold a mapping of title, intro and questions, e.g. 'questions: ["),
    (b"questions: [{id: q1\n", "is not valid YAML at line 2, column 1: while parsing a flow mapping"),
    (b"questions: 5\n", "value questions: 5 (int) must be a list of questions"),
    (b"questions:\n  - just a string\n", "question 1 is 'just a string' (str), not a mapping"),
    (b"questions: &q [*q]\n", "(list), not a mapping"),  # a list holding itself
    (b"questions: []\n", "has no questions; list them under 'questions:'"),
    (b"", "has no questions"),
    (QUESTION.encode() + b"    runs: 3\n", "question 1 has unknown keys ['runs']; allowed: id, title, run,"),
    (
        b"runs: 3\n" + QUESTION.encode(),
        "has unknown keys ['runs']; allowed: title, intro, takeaway, questions",
    ),
    (b"title: [1]\n" + QUESTION.encode(), "value title: [1] (list) must be a string"),
    (QUESTION.replace("id: q1", "id: 1").encode(), "value id: 1 (int) must be a non-empty string"),
    (QUESTION.replace("    command: c\n", "").encode(), "question 1 lacks the key 'command'"),
    (QUESTION.replace("[collapse/x]", "collapse/x").encode(), "value metrics: 'collapse/x' (str) must be"),
    (QUESTION.replace("[collapse/x]", "[collapse]").encode(), "list of 'task/metric' strings"),
    (QUESTION.encode() + b"    models: minilm\n", "value models: 'minilm' (str) must be a list of strings"),
    (QUESTION.encode() + b"    baseline: [base]\n", "value baseline: ['base'] (list) must be a string"),
    (QUESTION.encode() + b"    layers: [top]\n", "value layers: ['top'] (list) must be a list of first,"),
    (QUESTION.encode() + b"    layers: {m: 3}\n", "value layers['m']: 3 (int) must be a list of first"),
    (b"title: caf\xe9\n" + QUESTION.encode(), "is not UTF-8 text (byte 10); save it as UTF-8"),
    (b"title: !!python/object:os.system x\n" + QUESTION.encode(), "is not plain YAML at line 1, column 8"),
    (b"title: !!python/object/apply:os.system [id]\n" + QUESTION.encode(), "(no !!python tags)"),
    (b'title: "a\\ud800"\n' + QUESTION.encode(), "holds a lone surrogate escape ('\\ud800')"),
    (
        b"title: a\x07b\n" + QUESTION.encode(),
        "holds a character YAML does not allow (#x7) at line 1, column 9",
    ),
]


@pytest.mark.parametrize(("content", "message"), BAD_QUESTIONS)
def test_malformed_questions_file_is_one_line(tmp_path, capsys, content, message):
    """Each was a traceback (or, for ``title: [1]`` and ``models: minilm``, a silently wrong report)."""
    root = tmp_path / "study"
    (root / "sweep").mkdir(parents=True)
    questions = tmp_path / "questions.yaml"
    questions.write_bytes(content)
    before = file_tree(tmp_path)
    assert study_main([str(root), "--questions", str(questions)]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"error: questions file {str(questions)!r}") and message in line, line
    assert file_tree(tmp_path) == before
    with pytest.raises(StudyError):
        load_questions(questions)


def test_questions_that_are_allowed(tmp_path):
    """The base question of the cases above is valid; so is the project's own questions file."""
    questions = tmp_path / "questions.yaml"
    questions.write_text(QUESTION + "    layers: {m: [first, 5, '-1']}\n    models:\n")
    title, intro, (question,) = load_questions(questions)
    assert (title, intro, question.metrics, question.models) == ("Study", "", (("collapse", "x"),), ())
    assert question.layers == {"m": ("first", "5", "-1")}
    assert load_questions(REPO / "experiments" / "study" / "questions.yaml")[2]


def test_missing_questions_file_is_one_line(tmp_path, capsys):
    assert study_main([str(tmp_path), "--questions", str(tmp_path / "nope.yaml")]) == 2
    assert "does not exist (or is not a file); give the path of a YAML file" in _one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []


def test_questions_default_to_the_study_folder_then_the_checkout(tmp_path, capsys, monkeypatch):
    """Issue 64: ``--questions`` defaults to STUDY_DIR/questions.yaml (outside the checkout too), else the
    project's own file; where neither is, one line and nothing written."""
    import llm_collapse.cli.study as study_cli

    assert "default: STUDY_DIR/questions.yaml" in " ".join(_help(capsys).split())
    monkeypatch.setattr(study_cli, "PROJECT_QUESTIONS", tmp_path / "not-a-checkout" / "questions.yaml")
    assert study_main([str(tmp_path)]) == 2
    line = _one_error_line(capsys)
    assert line.startswith("error: no questions file: ") and "pass --questions FILE" in line, line
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "questions.yaml").write_text("questions: 3\n")  # found, and read as the questions
    assert study_main([str(tmp_path)]) == 2
    assert _one_error_line(capsys).startswith(f"error: questions file {str(tmp_path / 'questions.yaml')!r}")


def _help(capsys) -> str:
    assert _exit_code(study_main, ["--help"]) == 0
    return capsys.readouterr().out


# --------------------------------------------------------------------- the commands name themselves


def test_report_without_arguments_names_the_console_command(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _exit_code(console_main, ["report"]) == 2
    line = _one_error_line(capsys)
    assert line == "error: the following arguments are required: RUN_DIR (see llm-collapse report --help)"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_names_itself_as_invoked(tmp_path, capsys, monkeypatch, command):
    """``llm-collapse COMMAND`` in usage errors and ``--help``; ``python -m llm_collapse.COMMAND`` run directly."""
    import importlib

    monkeypatch.chdir(tmp_path)
    assert _exit_code(console_main, [command, "--no-such-flag"]) == 2
    assert f"(see llm-collapse {command} --help)" in _one_error_line(capsys)
    assert _exit_code(console_main, [command, "--help"]) == 0
    assert capsys.readouterr().out.startswith(f"usage: llm-collapse {command} ")
    if command == "list":  # no `python -m llm_collapse.list`: a module `list` would shadow the builtin
        return
    module = importlib.import_module(command_module(command))
    assert _exit_code(module.main, ["--no-such-flag"]) == 2
    assert f"(see python -m llm_collapse.{command} --help)" in _one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []


def test_console_script_without_a_command_is_one_line(capsys):
    assert console_main([]) == 2
    line = _one_error_line(capsys)
    assert "no command given" in line and "compare, report, study, estimate, bench" in line
    assert console_main(["nosuch"]) == 2
    assert "unknown command 'nosuch'" in _one_error_line(capsys)
    assert console_main(["--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: llm-collapse COMMAND")
