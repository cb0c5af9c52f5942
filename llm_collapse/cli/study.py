"""Command line: ``python -m llm_collapse.study STUDY_DIR --questions FILE``.

Builds ``STUDY_DIR/report.md`` and ``report.html`` from the comparison runs under ``STUDY_DIR`` (one folder per
run) and the questions file (`llm_collapse.reporting.study`). Bad input prints one line and exits 2; nothing
is written.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from llm_collapse.errors import UserError
from llm_collapse.utils.commands import ArgumentParser, run_command, say, setup_logging
from llm_collapse.utils.paths import PROJECT_ROOT, check_writable_dir, display_path

QUESTIONS_FILE = "questions.yaml"
PROJECT_QUESTIONS = PROJECT_ROOT / "experiments" / "study" / QUESTIONS_FILE
"""The project's own questions: the default only where the package runs from its checkout."""


PROG = "python -m llm_collapse.study"


def main(argv: Sequence[str] | None = None, *, prog: str = PROG) -> int:
    """Runs the command; ``prog`` names it in usage and errors as invoked (``llm-collapse study``)."""
    parser = ArgumentParser(prog=prog, description="Question-by-question report over several runs.")
    parser.add_argument(
        "study_dir", type=Path, metavar="STUDY_DIR", help="folder holding one run folder per ablation"
    )
    parser.add_argument(
        "--questions",
        type=Path,
        metavar="FILE",
        help=f"the questions file (default: STUDY_DIR/{QUESTIONS_FILE}; in the project's checkout, its "
        f"experiments/study/{QUESTIONS_FILE})",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress (INFO)")
    args = parser.parse_args(argv)
    setup_logging(logging.INFO if args.verbose else logging.WARNING)
    return run_command(lambda: _study(args))


def _study(args) -> int:
    from llm_collapse.reporting.study import build_study

    check_writable_dir(args.study_dir, what="STUDY_DIR")
    questions = args.questions or _default_questions(args.study_dir)
    out = build_study(args.study_dir, questions)  # StudyError (a UserError) for bad input
    say(f"wrote {out['md']} and {out['html']}")
    return 0


def _default_questions(study_dir: Path) -> Path:
    """``STUDY_DIR/questions.yaml``, else the project's (a checkout); refused in one line where neither is."""
    for path in (study_dir / QUESTIONS_FILE, PROJECT_QUESTIONS):
        if path.is_file():
            return path
    raise UserError(
        f"no questions file: {display_path(study_dir / QUESTIONS_FILE)} does not exist; write one there or "
        "pass --questions FILE (its format: the module docstring of llm_collapse.reporting.study)"
    )
