"""Command line: ``python -m llm_collapse.report RUN_DIR [RUN_DIR ...] [--out DIR]``.

Writes report.md, report.html (self-contained) and figures/ for one run (default output: the run directory)
or several merged runs (``--out`` required). Bad input (missing directory, missing results.parquet, schema
mismatch, ``--out`` missing when merging or not a directory) prints exactly one line to stderr and exits 2;
nothing is written. Logging goes to stderr at WARNING (``-v``: INFO). This module is the only place in the
reporting code that prints.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

BAD_INPUT = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m llm_collapse.report",
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


def _say(line: str, *, error: bool = False) -> None:
    """The only output of the reporting code (T201 allowed here: this is the CLI)."""
    print(line, file=sys.stderr if error else sys.stdout)  # noqa: T201


def _fail(message: str) -> int:
    _say(f"error: {message}", error=True)
    return BAD_INPUT


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI.

    Args:
        argv: Arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit code: 0 on success, 2 for bad input, 1 when the ``reports`` extra is missing.
    """
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if len(args.run_dirs) > 1 and args.out is None:
        return _fail("--out is required when merging several run directories")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        return _fail(f"{args.out}: --out is not a directory")
    out = args.out if args.out is not None else args.run_dirs[0]
    try:
        from llm_collapse.reporting.frames import SchemaError, load_runs
    except ImportError as err:
        _say(
            f"error: reports need the 'reports' extra: pip install 'llm-collapse[reports]' ({err})",
            error=True,
        )
        return 1
    try:
        data = load_runs(args.run_dirs)
    except SchemaError as err:
        return _fail(str(err))
    from llm_collapse.reporting.build import write_report

    files = write_report(data, out)
    n_figures = sum(1 for key in files if key.startswith("figures/"))
    _say(f"wrote {files['report.md']}")
    _say(f"wrote {files['report.html']}")
    _say(f"wrote {n_figures} figures under {files['report.md'].parent / 'figures'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
