"""Issue 46, after the device call: the JUnit XML and env.json of `cuda_suite.sh` as reports/bench/cuda_suite.json.

Usage: python .ci/device/summarize.py FILES_AT [--out reports/bench/cuda_suite.json]

Per suite (``gpu``: ``pytest -m gpu``; ``default``: the default suite with CUDA visible): tests, passed, failed,
errors, skipped, the failures by test id and the skips grouped by reason, with the machine's GPU and versions.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

SUITES = {"gpu": "pytest -m gpu", "default": "pytest (default markers) -n 8"}


def suite_summary(path: Path) -> dict:
    """Counts, failures and skip reasons of one JUnit XML file."""
    cases = ET.parse(path).getroot().iter("testcase")
    counts = collections.Counter()
    failures, skips = [], collections.Counter()
    for case in cases:
        test_id = f"{case.get('classname')}::{case.get('name')}"
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        counts["tests"] += 1
        if outcome is None:
            counts["passed"] += 1
        elif outcome.tag == "skipped":
            counts["skipped"] += 1
            skips[(outcome.get("message") or "").strip()] += 1
        else:
            counts["failed" if outcome.tag == "failure" else "errors"] += 1
            failures.append({"test": test_id, "message": (outcome.get("message") or "")[:300]})
    return {
        **{key: counts[key] for key in ("tests", "passed", "failed", "errors", "skipped")},
        "failures": failures,
        "skips": [{"reason": reason, "count": n} for reason, n in skips.most_common()],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files_at", type=Path, help="the folder holding env.json, gpu.xml and default.xml")
    parser.add_argument("--out", type=Path, default=Path("reports/bench/cuda_suite.json"))
    args = parser.parse_args(argv)
    missing = [n for n in ("env.json", "gpu.xml", "default.xml") if not (args.files_at / n).is_file()]
    if missing:
        print(
            f"summarize: {args.files_at} lacks {', '.join(missing)}; pass the device call's files_at",
            file=sys.stderr,
        )
        return 2
    env = json.loads((args.files_at / "env.json").read_text())
    summary = {
        "machine": env,
        "command": "bash .ci/device/cuda_suite.sh (carry .whl from .ci/device/wheels.sh; slim_tree.sh on)",
        "suites": {
            name: {"command": command, **suite_summary(args.files_at / f"{name}.xml")}
            for name, command in SUITES.items()
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    for name, suite in summary["suites"].items():
        print(
            f"{name}: {suite['passed']}/{suite['tests']} passed, {suite['failed']} failed, "
            f"{suite['errors']} errors, {suite['skipped']} skipped"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
