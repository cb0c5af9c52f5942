"""Is the process that left a file behind still running? Used to clean up after killed writers (converted
GGUF temp folders, cache temp files) and to tell a dead run from a live one (the run marker)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
from pathlib import Path


def pid_state(pid: int) -> str:
    """``"alive"``, ``"dead"`` or ``"unknown"`` for a process of this host (Windows: ``os.kill`` would kill it)."""
    if os.name == "nt" or pid <= 0:
        return "unknown"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "dead"
    except PermissionError:
        return "alive"  # exists, owned by someone else
    except OSError:
        return "unknown"
    return "alive"


def host_tag() -> str:
    """This host's name as written into file names: letters, digits and dots only (dashes separate fields)."""
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "unknown"


def remove_path(path: Path) -> None:
    """Removes a file, link or folder tree; errors are ignored (the next run tries again)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()
