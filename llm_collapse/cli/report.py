"""Command line: ``python -m llm_collapse.report RUN_DIR [RUN_DIR ...] [--out DIR]``, or ``--recompute RUN_DIR``.

Writes report.md, report.html (self-contained) and figures/ for one run (default output: the run directory)
or several merged runs (``--out`` required). Bad input (missing directory, missing results.parquet, schema
mismatch, ``--out`` missing when merging or not a directory) (including an unwritable ``--out``) prints exactly one line to stderr and exits 2;
nothing is written. Logging goes to stderr at WARNING (``-v``: INFO). This module is the only place in the
reporting code that prints.

``--recompute RUN_DIR`` first rebuilds the run's results.parquet/csv and items.parquet from its saved embeddings
(a run made with ``--save-embeddings``), loading no model (`llm_collapse.run.runner.recompute_comparison`), then
its report. A run without saved embeddings, or with a task that runs the model itself, is refused the same way.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from pathlib import Path

from llm_collapse.errors import UserError, disk_full
from llm_collapse.records.results import REPORT_FILES
from llm_collapse.utils.commands import ArgumentParser, run_command, say, setup_logging
from llm_collapse.utils.paths import check_replaceable, check_writable_dir

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
    parser.add_argument(
        "--recompute",
        action="store_true",
        help="first recompute every metric of RUN_DIR from its saved embeddings (a run made with "
        "--save-embeddings), loading no model, and rewrite its results",
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
    if args.recompute:
        return _recompute(args)
    if len(args.run_dirs) > 1 and args.out is None:
        raise UserError("--out is required when merging several run directories")
    out = check_writable_dir(args.out if args.out is not None else args.run_dirs[0], what="--out")
    check_replaceable(out, what="--out", names=REPORT_FILES)  # (figures/ is always checked)
    try:
        from llm_collapse.reporting.frames import load_runs
    except ImportError as err:
        raise UserError(
            f"reports need the 'reports' extra: pip install 'llm-collapse[reports]' ({err})"
        ) from None
    from llm_collapse.reporting.build import write_report

    with _claimed([*args.run_dirs, out]):  # no compare may replace a run while its report is read and written
        data = load_runs(args.run_dirs)  # SchemaError (a UserError) for bad input
        try:
            files = write_report(data, out)  # atomic: a failure leaves out as it was
        except OSError as err:
            if (full := disk_full(err, out, "--out")) is not None:
                raise full from None
            raise
    n_figures = sum(1 for key in files if key.startswith("figures/"))
    say(f"wrote {files['report.md']}")
    say(f"wrote {files['report.html']}")
    say(f"wrote {n_figures} figures under {files['report.md'].parent / 'figures'}")
    return 0


@contextlib.contextmanager
def _claimed(folders: Sequence[Path]):
    """Holds every run folder read and the output folder as `llm_collapse.run.directory.claim_run_dir` does for
    compare: a run started on one of them while the report is built is refused, and a report started while a run
    writes one is refused in one line. A folder keeps the run its marker names (nothing is replaced)."""
    from llm_collapse.reporting.build import remove_stale_staging
    from llm_collapse.run.directory import claim_run_dir, read_marker

    seen: set[Path] = set()
    with contextlib.ExitStack() as held:
        inputs = {folder.resolve() for folder in folders[:-1]}
        for i, folder in enumerate(folders):
            key = folder.resolve()
            output = i == len(folders) - 1 and key not in inputs  # a separate --out is created when missing
            if (
                key in seen
                or (folder.exists() and not folder.is_dir())
                or (not output and not folder.is_dir())
            ):
                continue  # a missing run folder is load_runs' refusal
            seen.add(key)
            marker = read_marker(folder) if folder.is_dir() else None
            run_id = str(marker.get("run_id")) if marker and marker.get("run_id") else "report"
            held.enter_context(claim_run_dir(folder, run_id, overwrite=True))
        remove_stale_staging(folders[-1])  # a report killed by SIGTERM left its staging folder here
        yield


def _recompute(args) -> int:
    """``--recompute RUN_DIR``: the run's results from its saved embeddings, then its report, in place."""
    if len(args.run_dirs) > 1 or args.out is not None:
        raise UserError(
            "--recompute rewrites one run directory in place; give exactly one RUN_DIR and no --out"
        )
    run_dir = check_writable_dir(args.run_dirs[0], what="RUN_DIR")
    check_replaceable(run_dir, what="RUN_DIR")
    from llm_collapse.run.runner import recompute_comparison

    recompute_comparison(run_dir)
    say(f"recomputed {run_dir / 'results.parquet'} from {run_dir / 'embeddings.npz'}")
    say(f"report:  {run_dir / 'report.html'}")
    return 0
