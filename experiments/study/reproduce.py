"""Reruns one study run from an empty embedding cache and compares its numbers with the committed ones.

Usage: python experiments/study/reproduce.py minilm [--precision 3]
Runs `python -m llm_collapse.compare --config experiments/study/<name>.yaml` into a temporary folder with a
temporary cache (LLM_COLLAPSE_CACHE), then compares every value and CI bound of results.csv with
reports/study/<name>/results.csv rounded to the printed precision (3 decimals in the reports). Exit 0 when
every number agrees at that precision, 1 otherwise (the differing rows are printed).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

KEYS = ["model", "method", "task", "corpus", "length", "depth", "layer", "metric"]
NUMBERS = ["value", "ci_low", "ci_high"]


def compare(committed: Path, rerun: Path, precision: int) -> pd.DataFrame:
    """Rows whose value or CI differs at ``precision`` decimals (or that exist on one side only)."""
    a, b = (pd.read_csv(p / "results.csv") for p in (committed, rerun))
    merged = a.merge(b, on=KEYS, how="outer", suffixes=("_committed", "_rerun"), indicator=True)
    differs = merged["_merge"] != "both"
    for column in NUMBERS:
        left, right = (
            merged[f"{column}_committed"].round(precision),
            merged[f"{column}_rerun"].round(precision),
        )
        differs |= ~((left == right) | (left.isna() & right.isna()))
    return merged[differs]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="a config in experiments/study/ (without .yaml)")
    parser.add_argument("--precision", type=int, default=3, help="decimals compared (default: 3)")
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[2]
    config, committed = root / f"experiments/study/{args.name}.yaml", root / f"reports/study/{args.name}"
    if not config.is_file() or not (committed / "results.csv").is_file():
        print(f"error: no config {config} or no committed run {committed}; name one of experiments/study/*.yaml "
              "that has a committed run", file=sys.stderr)  # fmt: skip
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "LLM_COLLAPSE_CACHE": str(Path(tmp) / "cache")}
        out = Path(tmp) / "run"
        command = [sys.executable, "-m", "llm_collapse.compare", "--config", str(config), "--out", str(out),
                   "--no-report"]  # fmt: skip
        subprocess.run(command, check=True, env=env, cwd=root)
        differing = compare(committed, out, args.precision)
        total = len(pd.read_csv(committed / "results.csv"))
    if len(differing):
        print(differing.to_string(max_rows=40))
        print(f"{len(differing)} of {total} rows differ at {args.precision} decimals")
        return 1
    print(f"all {total} rows of reports/study/{args.name} reproduced at {args.precision} decimals")
    return 0


if __name__ == "__main__":
    sys.exit(main())
