"""Command line: ``python -m llm_collapse.report RUN_DIR [RUN_DIR ...] [--out DIR]``.

Writes report.md, report.html (self-contained) and figures/ for one run (default output: the run directory)
or several merged runs (``--out`` required). Bad input (missing directory, missing results.parquet, schema
mismatch, ``--out`` missing when merging or not a directory) (including an unwritable ``--out``) prints exactly one line to stderr and exits 2;
nothing is written. Logging goes to stderr at WARNING (``-v``: INFO). This module is the only place in the
reporting code that prints.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from llm_collapse.cli.common import ArgumentParser, run_command, say, setup_logging
from llm_collapse.errors import UserError
from llm_collapse.utils.paths import check_writable_dir

PROG = "python -m llm_collapse.report"


def _parser(prog: str) -> ArgumentParser:
    parser = ArgumentParser(
        prog=prog,
        description="Build report.md, report.html and figures/ from one or more run directories.",
    )
    parser.add_argument(
        "run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="run directory (results.parquet, run.json)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default: the run directory; required when merging)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress (INFO)")
    return parser


def main(argv: Sequence[str] | None = None, *, prog: str = PROG) -> int:
    """Run the CLI.

    Args:
        argv: Arguments without the program name (default: ``sys.argv[1:]``).
        prog: The command as invoked, named in usage and errors (``llm-collapse report`` from the console script).

    Returns:
        The exit code: 0 on success, 2 for bad input (a missing ``reports`` extra included), 130 on Ctrl-C.
    """
    args = _parser(prog).parse_args(argv)
    setup_logging(logging.INFO if args.verbose else logging.WARNING)
    return run_command(lambda: _report(args))


def _report(args) -> int:
    if len(args.run_dirs) > 1 and args.out is None:
        raise UserError("--out is required when merging several run directories")
    out = check_writable_dir(args.out if args.out is not None else args.run_dirs[0], what="--out")
    try:
        from llm_collapse.reporting.frames import load_runs
    except ImportError as err:
        raise UserError(
            f"reports need the 'reports' extra: pip install 'llm-collapse[reports]' ({err})"
        ) from None
    data = load_runs(args.run_dirs)  # SchemaError (a UserError) for bad input
    from llm_collapse.reporting.build import write_report

    files = write_report(data, out)
    n_figures = sum(1 for key in files if key.startswith("figures/"))
    say(f"wrote {files['report.md']}")
    say(f"wrote {files['report.html']}")
    say(f"wrote {n_figures} figures under {files['report.md'].parent / 'figures'}")
    return 0
