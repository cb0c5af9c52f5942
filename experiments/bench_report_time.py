"""Times building a run's report in one warm process, against the plan's report estimate.

``python experiments/bench_report_time.py reports/study/placed_gemma reports/study/minilm ...``: each run folder
is copied to a temporary folder (nothing committed changes) and its report built there with `build_report`,
after one untimed build so that imports are done. Prints seconds, the run's model x method x task x length
cells and `llm_collapse.run.overheads.report_part`'s estimate for them, with the ratio. The calibration of
``REPORT_FIXED_S`` and ``REPORT_S_PER_ROOT_CELL`` came from this script on seven committed runs. Quote the
times with the CPU kind; other processes on the machine distort them.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import time
from pathlib import Path

from llm_collapse.records.record import RunRecord
from llm_collapse.reporting import build_report
from llm_collapse.run.overheads import report_part


def cells(run_dir: Path) -> int:
    """The run's model x method x task x length cells, from its run.json config, as the plan counts them."""
    config = RunRecord.read(run_dir).config
    counts = [len(config[key] or ()) for key in ("models", "methods", "tasks")]
    return counts[0] * counts[1] * counts[2] * max(len(config.get("lengths") or ()), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="committed run folders (with run.json)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="report-time-") as tmp:
        copies = []
        for run in args.runs:
            copy = Path(tmp) / run.name
            shutil.copytree(run, copy)
            copies.append(copy)
        build_report([copies[0]], copies[0])  # imports and first-use costs, untimed
        print("| run | cells | seconds | estimate | estimate/measured |")  # noqa: T201
        print("|---|---:|---:|---:|---:|")  # noqa: T201
        for run, copy in zip(args.runs, copies, strict=True):
            start = time.perf_counter()
            build_report([copy], copy)
            seconds = time.perf_counter() - start
            n = cells(copy)
            estimate = report_part(n, report=True).seconds
            print(f"| {run} | {n} | {seconds:.1f} | {estimate:.1f} | {estimate / seconds:.2f} |")  # noqa: T201


if __name__ == "__main__":
    main()
