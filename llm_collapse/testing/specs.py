"""One spec per intervention kind, with parameters small enough to change a tiny checkpoint's output.

Shared by the CPU matrix (`tests/interventions/test_interventions.py`) and the CUDA-vs-CPU check (`tests/test_gpu.py`), so a new
intervention is added to both by adding it here. ``window:off`` is not in the list: it only changes models with
a sliding window, so each test adds it where it applies.
"""

from __future__ import annotations

__all__ = ["INTERVENTION_MATRIX"]

INTERVENTION_MATRIX: tuple[str, ...] = (
    "tempscale:0.6",
    "tempscale-log:4",
    "ntk:1e5",
    "dynamic:4:8",
    "yarn:8:8",
    "yarn:8:8:af1",
    "pi:4",
    "selfextend:2:4",
)
