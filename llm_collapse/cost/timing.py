"""Timing helpers: wall/CPU seconds with machine contention (`timed`), RSS polling and peak RSS."""

from __future__ import annotations

import contextlib
import os
import resource
import threading
import time
from collections.abc import Iterator
from pathlib import Path


def cpu_ticks() -> tuple[float, float] | None:
    """(busy, steal) CPU seconds of the whole machine since boot, from ``/proc/stat`` (None elsewhere)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq) / tick, steal / tick


def sync_device(device: str) -> None:
    """Waits for queued CUDA work when ``device`` is a CUDA device (a no-op on the CPU), so a clock read after it
    covers the kernels."""
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize()


@contextlib.contextmanager
def timed(record: dict) -> Iterator[None]:
    """Wall and process CPU seconds, and how busy the rest of the machine was meanwhile.

    ``other_cores``: CPU seconds used by other processes per wall second (machine busy time from
    ``/proc/stat`` minus this process's CPU time); ``steal_cores``: the same for hypervisor steal. On a
    2-core machine anything above ~0.2 means the timed side competed for the cores.
    """
    ticks, wall, cpu = cpu_ticks(), time.perf_counter(), time.process_time()
    record["loadavg_before"] = os.getloadavg()[0]
    yield
    record["seconds"] = time.perf_counter() - wall
    record["cpu_seconds"] = time.process_time() - cpu
    record["loadavg_after"] = os.getloadavg()[0]
    after = cpu_ticks()
    if ticks is not None and after is not None:
        seconds = max(record["seconds"], 1e-9)
        record["other_cores"] = max(0.0, after[0] - ticks[0] - record["cpu_seconds"]) / seconds
        record["steal_cores"] = (after[1] - ticks[1]) / seconds
    else:
        record["other_cores"] = record["steal_cores"] = None


class RssPoller:
    """Polls the RSS of this process (and its children, for vLLM's workers) every ``interval`` seconds."""

    def __init__(self, interval: float = 0.005, *, children: bool = False) -> None:
        import psutil

        self.process, self.children, self.interval = psutil.Process(), children, interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        total = self.process.memory_info().rss
        if self.children:
            for child in self.process.children(recursive=True):
                with contextlib.suppress(Exception):
                    total += child.memory_info().rss
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            self._stop.wait(self.interval)

    def __enter__(self) -> RssPoller:
        self.peak = self.rss()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())


def maxrss_bytes() -> int:
    """Peak RSS of this process so far (``ru_maxrss``), in bytes."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux
