"""What "left as it was" compares in the tests of refusals: a folder tree's paths, files with size and mtime."""

from __future__ import annotations

from pathlib import Path


def file_tree(*roots: Path) -> dict[str, tuple[int, int] | None]:
    """Every path under ``roots`` (``None`` for a folder, ``(size, mtime_ns)`` for a file).

    Folder mtimes are left out: the writability probes create and remove a file in them.
    """
    found: dict[str, tuple[int, int] | None] = {}
    for root in roots:
        if root.exists():
            for path in [root, *root.rglob("*")]:
                info = path.lstat()
                found[str(path)] = None if path.is_dir() else (info.st_size, info.st_mtime_ns)
    return found
