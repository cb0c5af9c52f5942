"""What a command costs besides the embedding forwards, for ``--dry-run``'s whole-command estimate.

The FLOP count (`llm_collapse.run.plan`) prices the forwards only; a small run spends most of its time elsewhere
(issue 64: a minilm run estimated at 0.7 min took 101.5 s, 40 s of it startup, inputs and the report). Each
part here is either measured in the planning process itself or scaled from a committed measurement:

* startup: this process's own age when the plan starts (Python, imports, reading the corpus: what the run does
  before its inputs), measured;
* inputs: the plan builds the run's inputs exactly as the run does, and times it;
* loading: the weights on disk at `LOAD_S_PER_GB`;
* GGUF conversion, when a model's converted copy is not cached yet, at `GGUF_CONVERSION_S_PER_MB`;
* the report: `REPORT_FIXED_S` plus `REPORT_S_PER_ROOT_CELL` times the square root of its model x method x task x
  length cells.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

LOAD_S_PER_GB = 3.0
"""Seconds to load a model per GB of weights on disk: gemma3-270m's converted 1.1 GB folder loaded in 3.26 s
(median of 34 committed study runs, run.json ``wall_time_s["load:gemma3-270m"]``), minilm's 88 MB in 0.23 s
(median of 14); 2-core Intel Xeon with AMX."""

GGUF_CONVERSION_S_PER_MB = 0.32
"""Seconds per MB of a GGUF file to convert it once into a transformers folder: 50-80 s for Gemma 3 270M's
253 MB file (docs/install.md), the upper end."""

REPORT_FIXED_S = 1.0
REPORT_S_PER_ROOT_CELL = 1.0
"""The report: ~1 s of imports, then ~1 s x sqrt(model x method x task x length cells). Built in one warm process
(`experiments/bench_report_time.py`, imports done) five committed study runs of 9-144 cells took 2.6-11.7 s and
the default and small runs 10.8 and 4.7 s (2-core Intel Xeon with AMX, quiet); this estimate is 0.88-1.54x of
those times, highest on the smallest runs, where the imports it adds weigh most. The first guess (15 s + 1 s
per model x task, from rebuilds beside a run) was 3-4x too long for a small run. `python -m
llm_collapse.bench.whole_command` checks the sum."""


@dataclass(frozen=True)
class Part:
    """One part of the whole command's time: its name, seconds, and how it was found."""

    name: str
    seconds: float
    how: str


def process_age() -> float | None:
    """Seconds since this process started (psutil, which accelerate installs), or None where unknown."""
    try:
        import psutil

        return max(time.time() - psutil.Process().create_time(), 0.0)
    except Exception:  # noqa: BLE001 - an estimate without this part is still an estimate
        return None


def folder_gb(path: Path) -> float:
    """GB of the files under ``path`` (a model folder; a single file: its size)."""
    if path.is_file():
        return path.stat().st_size / 1e9
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e9


def load_part(sizes: dict[str, float]) -> Part:
    """Loading every model of the run, ``sizes``: model -> GB on disk."""
    gb = sum(sizes.values())
    return Part(
        "loading", LOAD_S_PER_GB * gb, f"{len(sizes)} model(s), {gb:.2f} GB at {LOAD_S_PER_GB:g} s/GB"
    )


def conversion_part(gguf_mb: dict[str, float]) -> Part | None:
    """The one-time GGUF conversion of the models whose converted copy is not cached (model -> GGUF MB)."""
    if not gguf_mb:
        return None
    seconds = GGUF_CONVERSION_S_PER_MB * sum(gguf_mb.values())
    return Part("GGUF conversion", seconds, f"{', '.join(gguf_mb)}, once (then cached)")


def report_part(cells: int, *, report: bool) -> Part | None:
    """The report of a run of ``cells`` model x method x task x length cells (None with ``--no-report``)."""
    if not report:
        return None
    seconds = REPORT_FIXED_S + REPORT_S_PER_ROOT_CELL * math.sqrt(cells)
    return Part("report", seconds, f"{cells} model x method x task x length cells")


def whole_command_line(parts: list[Part | None], embedding_s: float) -> str:
    """The plan's last line: the whole command, then each part."""
    kept = [p for p in parts if p is not None]
    total = embedding_s + sum(p.seconds for p in kept)
    said = "; ".join(f"{p.name} ~{_clock(p.seconds)} ({p.how})" for p in kept)
    return f"whole command ~{_clock(total)}: embedding ~{_clock(embedding_s)}; {said}"


def _clock(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
