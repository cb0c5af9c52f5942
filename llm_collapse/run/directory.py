"""A comparison's output folder and its marker file, ``.llm_collapse_run.json``.

The marker says which run the folder holds (``run_id``, the resolved config) and in which state:

- ``running``: written once every input check has passed and the inputs are built (with pid and host);
- ``complete``: results, run.json and the report are in place;
- ``failed`` / ``interrupted``: the run died; the folder never blocks the corrected command.

Rules (`check_run_dir`, which writes nothing, so ``--dry-run`` gives the real run's answer):

- the same run (same ``run_id``) may always continue: that is how a killed run resumes;
- a different, complete run (or a marker written before states existed) needs ``--overwrite``;
- a different run that failed, was interrupted, or whose process is gone (SIGKILL) is replaced silently;
- a different run whose process is alive on this host is never clobbered, even with ``--overwrite``
  (one still running on another host sharing the folder needs ``--overwrite``: its process cannot be checked);
- a non-empty folder without a marker needs ``--overwrite``.

`open_run_dir` removes the folder again when a run that found it absent or empty dies before writing
anything but the marker, so a failed first attempt leaves ``--out`` as it was.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from llm_collapse.errors import UserError
from llm_collapse.run.results import write_json
from llm_collapse.utils.paths import check_writable_dir
from llm_collapse.utils.procs import host_tag, pid_state

logger = logging.getLogger(__name__)

MARKER = ".llm_collapse_run.json"
RUNNING, COMPLETE, FAILED, INTERRUPTED = "running", "complete", "failed", "interrupted"


class RunDirectoryError(UserError, ValueError):
    """The output folder holds a different run (or cannot be used)."""


def read_marker(out: Path) -> dict | None:
    """The marker's content; None without a marker; ``{"state": "failed"}`` for an unreadable one."""
    path = Path(out) / MARKER
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError("not a mapping")
    except (OSError, ValueError) as err:
        logger.warning("%s is unreadable (%s); treating it as a failed run", path, err)
        return {"state": FAILED}
    return data


def check_run_dir(out: str | Path, run_id: str, *, overwrite: bool) -> Path:
    """Raises `RunDirectoryError`/`OutputError` when ``out`` cannot take run ``run_id``; writes nothing."""
    out = check_writable_dir(out, what="--out")
    marker = read_marker(out)
    if marker is None:
        if out.is_dir() and any(out.iterdir()) and not overwrite:
            raise RunDirectoryError(
                f"{out} is not empty and holds no llm_collapse run; pass --overwrite or choose another --out"
            )
        return out
    previous, state = marker.get("run_id"), marker.get("state", COMPLETE)
    if previous == run_id:
        return out
    alive = state == RUNNING and _alive(marker)
    if alive is True:
        raise RunDirectoryError(
            f"{out} is being written by another run ({previous}, process {marker.get('pid')}); "
            "wait for it to finish or choose another --out"
        )
    if (state == COMPLETE or alive is None) and not overwrite:
        raise RunDirectoryError(
            f"{out} holds a different run ({previous}); choose another --out, remove the folder to run from the "
            "embedding cache, or pass --overwrite to replace it and recompute every embedding"
        )
    if state != COMPLETE:
        logger.info("%s: replacing run %s, which did not finish (%s)", out, previous, state)
    return out


@contextlib.contextmanager
def open_run_dir(out: str | Path, run_id: str, config: dict) -> Iterator[Path]:
    """Marks ``out`` as holding run ``run_id`` while the block runs; ``complete`` or failed afterwards."""
    out = Path(out)
    fresh = not out.exists() or not any(out.iterdir())
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    record = {"run_id": run_id, "config": config, "pid": os.getpid(), "host": host_tag()}
    write_json({**record, "state": RUNNING}, out / MARKER)
    try:
        yield out
    except BaseException as err:
        if fresh and {p.name for p in out.iterdir()} <= {MARKER}:
            (out / MARKER).unlink(missing_ok=True)
            if created:
                with contextlib.suppress(OSError):
                    out.rmdir()
        else:
            state = INTERRUPTED if isinstance(err, KeyboardInterrupt) else FAILED
            with contextlib.suppress(OSError):
                write_json({**record, "state": state, "error": type(err).__name__}, out / MARKER)
        raise
    write_json({**record, "state": COMPLETE}, out / MARKER)


def _alive(marker: dict) -> bool | None:
    """Whether the marker's process still runs; None when it ran on another host (cannot be checked)."""
    pid = marker.get("pid")
    if not isinstance(pid, int) or pid == os.getpid():
        return False
    if marker.get("host") != host_tag():
        return None
    return pid_state(pid) != "dead"
