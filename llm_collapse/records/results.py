"""Tidy results: one row per (model, method, task, corpus, length, depth, layer, metric), and run files.

A run directory holds ``results.parquet`` and ``results.csv`` (the same rows), ``items.parquet`` (what each
row is a mean of, per item: `llm_collapse.tasks.items`), ``run.json`` (resolved
config, versions, git commit, hardware, wall time per stage, per-model settings and truncations, notes) and
the report. Files are written to a temporary name and renamed into place, so a failure leaves no
half-written file.
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from llm_collapse.utils.files import atomic_write
from llm_collapse.utils.optional import package_version

COLUMNS: tuple[str, ...] = (
    "model", "method", "task", "corpus", "length", "depth", "layer", "metric", "value", "ci_low", "ci_high", "n",
    "p_value",
)  # fmt: skip
OPTIONAL_COLUMNS: dict[str, float] = {"p_value": math.nan}
"""Columns added after runs were committed, with the value an older run's rows read as."""


def result_row(
    *,
    model: str,
    method: str,
    task: str,
    corpus: str,
    length: int,
    metric: str,
    value: float,
    ci: tuple[float, float] = (math.nan, math.nan),
    n: int = 0,
    depth: float = math.nan,
    layer: float = math.nan,
    p_value: float = math.nan,
) -> dict:
    """One tidy row; NaN (never 0) for a missing value, interval or test (``p_value``: paired contrasts of
    0/1 outcomes carry the exact McNemar p-value, `llm_collapse.metrics.stats.mcnemar_exact_p`)."""
    return {
        "model": model, "method": method, "task": task, "corpus": corpus, "length": int(length),
        "depth": float(depth), "layer": float(layer), "metric": metric, "value": float(value),
        "ci_low": float(ci[0]), "ci_high": float(ci[1]), "n": int(n), "p_value": float(p_value),
    }  # fmt: skip


@dataclass(frozen=True)
class CellKey:
    """What every row of one (model, method) cell carries: the model, the method's slug and the corpus."""

    model: str
    method: str
    corpus: str

    def fields(self) -> dict[str, str]:
        """The three as `result_row` keywords."""
        return {"model": self.model, "method": self.method, "corpus": self.corpus}

    def __str__(self) -> str:
        return f"{self.model}/{self.method}"


def write_results(rows: Iterable[dict], out_dir: Path) -> None:
    """Writes ``results.parquet`` and ``results.csv`` atomically."""
    import pandas as pd

    frame = pd.DataFrame(list(rows), columns=list(COLUMNS))
    frame = frame.sort_values(
        ["model", "method", "task", "length", "depth", "layer", "metric"], kind="stable"
    )
    atomic_write(out_dir / "results.parquet", lambda path: frame.to_parquet(path, index=False))
    atomic_write(out_dir / "results.csv", lambda path: frame.to_csv(path, index=False, float_format="%.6g"))


def write_items(rows: list[dict], out_dir: Path) -> None:
    """Writes ``items.parquet`` (`llm_collapse.tasks.items`: one row per item of every bin) atomically; a run
    without per-item rows writes none, and an older one is removed so it never outlives its results."""
    import pandas as pd

    path = out_dir / ITEMS_FILE
    if not rows:
        path.unlink(missing_ok=True)
        return
    frame = pd.DataFrame(rows)
    frame = frame[[*ITEM_KEYS, *sorted(set(frame.columns) - set(ITEM_KEYS))]]
    frame = frame.sort_values(["model", "method", "task", "length", "depth", "layer"], kind="stable")
    atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False))


ITEMS_FILE = "items.parquet"
ITEM_KEYS: tuple[str, ...] = ("model", "method", "task", "corpus", "length", "depth", "layer", "item")
"""The columns of ``items.parquet`` that name an item's row; every other column is a per-item quantity."""
REPORT_FILES: tuple[str, ...] = ("report.md", "report.html", "answers.csv", "figures")


def remove_report(out_dir: Path) -> None:
    """Removes a run folder's report (report.md, report.html, figures/), so none outlives its results."""
    for name in REPORT_FILES:
        path = Path(out_dir) / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def environment() -> dict:
    """Package versions, git commit and hardware, for run.json."""
    import torch

    from llm_collapse.backends.device import cpu_kind

    packages = ("llm-collapse", "torch", "transformers", "accelerate", "tokenizers", "numpy", "pandas",
                "bitsandbytes", "vllm")  # fmt: skip
    versions = {package: package_version(package) for package in packages}
    return {
        "versions": versions,
        "git_commit": _git_commit(),
        "hardware": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            **cpu_kind(),
            "torch_threads": torch.get_num_threads(),
            "cuda": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        },
    }


def _git_commit() -> str | None:
    try:
        root = Path(__file__).resolve().parents[1]
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        return (
            out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "") if out.returncode == 0 else None
        )
    except (OSError, subprocess.SubprocessError):
        return None
