"""Reruns study runs from an empty embedding cache and compares their numbers with the committed ones.

Usage: python experiments/study/reproduce.py minilm_items minilm_reviews [--precision 3]
Runs `python -m llm_collapse.compare --config experiments/study/<name>.yaml` into a temporary folder with a
temporary cache (LLM_COLLAPSE_CACHE, empty, one per run), then compares every value and CI bound of
results.csv with reports/study/<name>/results.csv, and every per-item number of items.parquet with the
committed one where the run has it, rounded to the printed precision (3 decimals in the reports); the sample
sizes `n` must agree exactly. Exit 0 when every number of every run agrees at that precision, 1 otherwise
(the differing rows are printed).
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
ITEM_KEYS = ["model", "method", "task", "corpus", "length", "depth", "layer", "item"]


def compare(committed: Path, rerun: Path, precision: int) -> pd.DataFrame:
    """Rows of results.csv whose value or CI differs at ``precision`` decimals, whose n differs, or that exist
    on one side only."""
    a, b = (pd.read_csv(p / "results.csv") for p in (committed, rerun))
    return _differing(a, b, KEYS, NUMBERS, precision, exact=["n"])


def compare_items(committed: Path, rerun: Path, precision: int) -> pd.DataFrame:
    """Rows of items.parquet whose numbers differ at ``precision`` decimals (or exist on one side only)."""
    a, b = (pd.read_parquet(p / "items.parquet") for p in (committed, rerun))
    numbers = [c for c in a.columns if c not in ITEM_KEYS and pd.api.types.is_numeric_dtype(a[c])]
    return _differing(a, b, ITEM_KEYS, numbers, precision, exact=[])


def _differing(
    a: pd.DataFrame, b: pd.DataFrame, keys: list[str], numbers: list[str], precision: int, exact: list[str]
) -> pd.DataFrame:
    merged = a.merge(b, on=keys, how="outer", suffixes=("_committed", "_rerun"), indicator=True)
    differs = merged["_merge"] != "both"
    for column in numbers + exact:
        left, right = merged[f"{column}_committed"], merged[f"{column}_rerun"]
        if column not in exact:
            left, right = left.round(precision), right.round(precision)
        differs |= ~((left == right) | (left.isna() & right.isna()))
    return merged[differs]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", help="configs in experiments/study/ (without .yaml)")
    parser.add_argument("--precision", type=int, default=3, help="decimals compared (default: 3)")
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[2]
    for name in args.names:  # every name checked before any run starts
        if (
            not (root / f"experiments/study/{name}.yaml").is_file()
            or not (root / f"reports/study/{name}/results.csv").is_file()
        ):
            print(f"error: no config experiments/study/{name}.yaml or no committed run reports/study/{name}; "
                  "name configs in experiments/study/ that have a committed run", file=sys.stderr)  # fmt: skip
            return 2
    failed = [name for name in args.names if not reproduce(root, name, args.precision)]
    return 1 if failed else 0


def reproduce(root: Path, name: str, precision: int) -> bool:
    """Reruns ``name`` from an empty cache; prints what agrees (or the differing rows); True when all agree."""
    committed = root / f"reports/study/{name}"
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "LLM_COLLAPSE_CACHE": str(Path(tmp) / "cache")}
        out = Path(tmp) / "run"
        command = [sys.executable, "-m", "llm_collapse.compare", "--config", f"experiments/study/{name}.yaml",
                   "--out", str(out), "--no-report"]  # fmt: skip
        subprocess.run(command, check=True, env=env, cwd=root)
        checks = [
            ("results.csv", compare(committed, out, precision), len(pd.read_csv(committed / "results.csv")))
        ]
        if (committed / "items.parquet").is_file():
            items = len(pd.read_parquet(committed / "items.parquet"))
            checks.append(("items.parquet", compare_items(committed, out, precision), items))
    for file, differing, total in checks:
        if len(differing):
            print(differing.to_string(max_rows=40))
            print(
                f"{len(differing)} of {total} rows of reports/study/{name}/{file} differ at {precision} decimals"
            )
        else:
            print(f"all {total} rows of reports/study/{name}/{file} reproduced at {precision} decimals")
    return not any(len(differing) for _, differing, _ in checks)


if __name__ == "__main__":
    sys.exit(main())
