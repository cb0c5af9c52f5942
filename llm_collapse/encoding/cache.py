"""On-disk embedding cache: runs that stop half-way resume where they stopped.

Layout::

    <root>/embeddings/<sha256(canonical key)[:20]>/
        key.json               # the key, written once, for humans (and checked against on reuse)
        shards/<stamp>.npz     # one file per `EmbeddingCache.put`: ``hashes`` (n,) str, ``vectors`` (n, d) float32

``root`` defaults to `llm_collapse.utils.paths.cache_root` (``$LLM_COLLAPSE_CACHE``). What names the folder
and a text's entry is `llm_collapse.encoding.keys`; `llm_collapse.encoding.cached` embeds through a cache.
The store only looks vectors up and puts them.

Decisions:

- Every `put` writes one new shard: a temp file in ``shards/`` (named ``.<stamp>.<host>.npz.tmp``, which
  loading never reads as a shard; ``<stamp>`` is ``<time_ns>-<pid>-<random>``), fsync, ``os.replace`` to
  ``<stamp>.npz``, fsync of the folder. A reader therefore sees a whole shard or none. Several processes may
  append to one cache at once (shard names are unique per process).
- Shards are read lazily, once, into an in-memory index (hash -> row of a read-only array); shard names
  sort by creation time, so a later shard's vector wins for a hash written twice (``overwrite=True``).
- Any unusable shard is a miss: recompute, replace, warn once. A final-named shard that cannot be read
  (truncated, not an ``.npz``, wrong fields or dtypes), holds a NaN or inf, or has another vector width
  than the embedder's (`llm_collapse.encoding.cached.cache_for` passes ``dim``) is skipped and removed with one warning, so its texts
  are embedded again and written to a new shard, and the next run does not warn again. Since shards only
  ever appear under their final name by an atomic rename, a final-named shard that fails to read is
  really broken, never one being written; a shard that vanishes while being read (another process's
  `compact`) is skipped silently. Row norms are not checked: `put` stores whatever vectors it is given.
  Without a known ``dim`` (``EmbeddingCache(directory)``) the first shard read sets the width, and a shard
  of another width is skipped with a warning but kept (nothing says which one is wrong).
- `put` stores only finite rows (a NaN or inf row is logged and left out, so it is embedded again next
  time instead of poisoning the cache); a `put` whose width differs from the cache's is a programming
  error and raises ``ValueError``.
- Temp files are removed only when stale: written on this host by a process that is gone, or (written on
  another host, or named by an older version without the host) unchanged for `STALE_TEMP_S` (one hour). A
  temp file of a live process on this host is never touched, whatever its age (a reused PID keeps one
  until that process exits), and one that is not stale is skipped without a warning.
- ``shards`` that is not a folder (a file, a broken link) is removed with a warning; everything is a miss.
- A folder that may not be written (permissions, a read-only file system) makes the cache read-only for
  the rest of the process, with one warning: vectors are computed and returned, only not stored. A full
  disk is a one-line `llm_collapse.errors.DiskFullError` instead (a rerun after freeing space resumes).
- ``key.json`` that differs from the key or cannot be read (compared on the first `get` or `put`): if the
  folder is named after this key (as `cache_for` names it: the folder *is* this key's), the file was
  edited or damaged, so the shards already there are removed and it is rewritten with the next shard
  (whoever edited the folder may have copied foreign vectors in; recomputing is cheaper than trusting
  them), with one warning. A readable, different ``key.json`` in
  a folder that is not named after this key is another key's folder: ``ValueError``, nothing is mixed.
  A missing ``key.json`` is trusted (it is written before the first shard; ``key=None`` caches write none).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llm_collapse.errors import disk_full
from llm_collapse.utils.files import atomic_write
from llm_collapse.utils.procs import host_tag, pid_state, remove_path

logger = logging.getLogger(__name__)
KEY_DIGITS = 20
READ_ONLY_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})

SHARD_SUFFIX = ".npz"
TEMP_SUFFIX = ".npz.tmp"
STALE_TEMP_S = 3600.0
_TEMP_NAME = re.compile(r"\.(?P<ns>\d+)-(?P<pid>\d+)-[0-9a-f]+(?:\.(?P<host>.+))?" + re.escape(TEMP_SUFFIX))


# -------------------------------------------------------------------------------------------- cache


class EmbeddingCache:
    """Append-only store of float32 vectors by text hash, one ``.npz`` shard per `put`.

    Args:
        directory: The cache folder (created on the first `put`).
        key: What the vectors depend on, as plain JSON data (`llm_collapse.encoding.keys.cache_key`); written
            to ``key.json`` on the first `put`, and compared with an existing ``key.json`` on the first `get`
            or `put` (see the module docstring for a mismatch). Making a cache reads nothing.
        dim: Expected vector width (shards of another width are removed); taken from the first shard or
            `put` when None.
    """

    def __init__(self, directory: str | Path, *, key: dict | None = None, dim: int | None = None) -> None:
        self.directory = Path(directory)
        self.key = key
        self.dim = dim
        self._dim_given = dim is not None
        self._rows: dict[str, tuple[np.ndarray, int]] = {}
        self._loaded: set[str] = set()
        self._load_done = False
        self.read_only = False  # set by the first write that the folder refuses (permissions, read-only fs)
        self._key_checked = key is None  # key.json is compared on the first get or put
        self._key_file_stale = False  # set where key.json held another key in this key's folder

    @property
    def shard_dir(self) -> Path:
        return self.directory / "shards"

    def __len__(self) -> int:
        self._ensure_loaded()
        return len(self._rows)

    def __contains__(self, text_hash: object) -> bool:
        self._ensure_loaded()
        return text_hash in self._rows

    def __repr__(self) -> str:
        return f"EmbeddingCache({str(self.directory)!r}, dim={self.dim})"

    def get(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """The cached vectors (read-only float32 rows) of those ``hashes`` that are present."""
        self._ensure_loaded()
        out: dict[str, np.ndarray] = {}
        for h in hashes:
            if (hit := self._rows.get(h)) is not None:
                array, row = hit
                out[h] = array[row]
        return out

    def put(self, hashes: Sequence[str], vectors: np.ndarray) -> Path | None:
        """Writes ``vectors`` (n, d) under ``hashes`` as one new shard, atomically; returns its path."""
        hashes = [str(h) for h in hashes]
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[0] != len(hashes):
            raise ValueError(
                f"put needs an (n, d) array for n={len(hashes)} hashes, got shape {vectors.shape}"
            )
        if not hashes:
            return None
        self._ensure_loaded()
        self._check_dim(vectors.shape[1], "put")
        vectors = np.array(vectors, dtype=np.float32, order="C", copy=True)  # the index keeps it read-only
        finite = np.isfinite(vectors).all(axis=1)
        if not finite.all():
            logger.warning(
                "cache: not storing %d of %d vectors with NaN or inf values (they are embedded again next time)",
                int((~finite).sum()),
                len(hashes),
            )
            hashes = [h for h, ok in zip(hashes, finite.tolist(), strict=True) if ok]
            vectors = np.ascontiguousarray(vectors[finite])
            if not hashes:
                return None
        self._index(np.array(hashes), vectors)  # served from memory also where the folder is read-only
        final = None if self.read_only else self._write_shard(hashes, vectors)
        if final is not None:
            self._loaded.add(final.name)
        return final

    def _write_shard(self, hashes: list[str], vectors: np.ndarray) -> Path | None:
        """One new shard; None (and read-only from now on, one warning) where the folder may not be written."""
        try:
            self._usable_shard_dir()
            self.shard_dir.mkdir(parents=True, exist_ok=True)
            self._write_key_file()
            stamp = f"{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            final = self.shard_dir / f"{stamp}{SHARD_SUFFIX}"
            atomic_write(
                final,
                lambda tmp: _save_shard(tmp, hashes, vectors),
                tmp=self.shard_dir / f".{stamp}.{host_tag()}{TEMP_SUFFIX}",
                durable=True,  # other processes read the folder while this one writes
            )
        except OSError as err:
            if (full := disk_full(err, self.directory.parent.parent, "the cache folder")) is not None:
                raise full from None
            if err.errno not in READ_ONLY_ERRNOS:
                raise
            self.read_only = True
            logger.warning(
                "cache: %s cannot be written (%s); embeddings are computed but no longer cached in this run "
                "(make the folder writable to cache them)",
                self.shard_dir,
                err.strerror,
            )
            return None
        return final

    def reload(self) -> None:
        """Reads shards written since the last load (by other processes, say)."""
        self._load_done = False
        self._ensure_loaded()

    def compact(self) -> Path | None:
        """Rewrites every loaded vector into one shard and removes the shards it replaces."""
        self.reload()
        if not self._rows:
            return None
        old = sorted(self._loaded)
        hashes = list(self._rows)
        vectors = np.stack([array[row] for array, row in self._rows.values()])
        new = self.put(hashes, vectors)
        for name in old:
            _remove_quietly(self.shard_dir / name)
            self._loaded.discard(name)
        return new

    # -- internals

    def _ensure_loaded(self) -> None:
        if not self._key_checked:
            self._check_key_file()
            self._key_checked = True
        if self._load_done:
            return
        if self._usable_shard_dir():
            for path in sorted(self.shard_dir.iterdir()):
                name = path.name
                if name.endswith(TEMP_SUFFIX):
                    if (reason := _stale_temp_reason(path)) is not None:
                        logger.warning(
                            "cache: removing stale temp file %s (an interrupted write; %s)", path, reason
                        )
                        _remove_quietly(path)
                    continue
                if not name.endswith(SHARD_SUFFIX) or name.startswith(".") or name in self._loaded:
                    continue
                self._loaded.add(name)
                try:
                    hashes, vectors = _read_shard(path)
                except FileNotFoundError:
                    logger.debug("cache: shard %s vanished while being read (compacted?)", path)
                    continue
                except Exception as err:  # truncated zip, missing member, wrong dtypes...
                    self._drop_shard(path, f"unreadable: {type(err).__name__}: {err}")
                    continue
                if not np.isfinite(vectors).all():
                    self._drop_shard(path, "it holds NaN or inf values")
                    continue
                if self.dim is not None and vectors.shape[1] != self.dim:
                    problem = f"its vectors have width {vectors.shape[1]}, this cache's have width {self.dim}"
                    if self._dim_given:
                        self._drop_shard(path, problem)
                    else:
                        logger.warning("cache: skipping shard %s (%s)", path, problem)
                    continue
                self._check_dim(vectors.shape[1], f"shard {path}")
                self._index(hashes, vectors)
        self._load_done = True

    def _drop_shard(self, path: Path, problem: str) -> None:
        logger.warning("cache: removing unusable shard %s (%s); its texts are embedded again", path, problem)
        _remove_quietly(path)

    def _usable_shard_dir(self) -> bool:
        """True when ``shards/`` is a folder; anything else in its place is removed (with a warning)."""
        shard_dir = self.shard_dir
        if shard_dir.is_dir():
            return True
        if shard_dir.exists() or shard_dir.is_symlink():
            logger.warning("cache: %s is not a folder; removing it (every text is a miss)", shard_dir)
            remove_path(shard_dir)
        return False

    def _index(self, hashes: np.ndarray, vectors: np.ndarray) -> None:
        vectors.setflags(write=False)
        for row, h in enumerate(hashes.tolist()):
            self._rows[h] = (vectors, row)

    def _check_dim(self, dim: int, where: str) -> None:
        if self.dim is None:
            self.dim = int(dim)
        elif int(dim) != self.dim:
            raise ValueError(
                f"cache {self.directory}: {where} has vectors of width {dim}, but this cache holds width "
                f"{self.dim}; the key does not describe the embedder (or the folder was edited)"
            )

    def _check_key_file(self) -> None:
        """Compares ``key.json`` with the key; repairs it or raises (see the module docstring)."""
        path = self.directory / "key.json"
        if not (path.exists() or path.is_symlink()):
            return
        try:
            existing = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            existing, problem = None, f"cannot be read ({type(err).__name__}: {err})"
        else:
            if canonical_json(existing) == canonical_json(self.key):
                return
            fields = set(existing) | set(self.key) if isinstance(existing, dict) else set(self.key)
            differing = sorted(
                k
                for k in fields
                if not isinstance(existing, dict)
                or canonical_json(existing.get(k)) != canonical_json(self.key.get(k))
            )
            problem = f"holds a different key (fields {differing})"
        if existing is not None and self.directory.name != key_digest(self.key)[:KEY_DIGITS]:
            raise ValueError(f"{path} {problem}; refusing to mix vectors")
        shards = sorted(self.shard_dir.glob(f"*{SHARD_SUFFIX}")) if self.shard_dir.is_dir() else []
        logger.warning(
            "cache: %s %s, but the folder is this key's; removing the %d shards there and rewriting it with the next "
            "shard (they cannot be trusted; their texts are embedded again)",
            path,
            problem,
            len(shards),
        )
        for shard in shards:
            _remove_quietly(shard)
        self._key_file_stale = True  # rewritten with the next shard

    def _write_key_file(self) -> None:
        if self.key is None:
            return
        path = self.directory / "key.json"
        if path.exists() and not self._key_file_stale:
            return
        if path.is_dir() and not path.is_symlink():
            remove_path(path)
        text = json.dumps(self.key, indent=2, sort_keys=True) + "\n"
        atomic_write(
            path,
            lambda tmp: Path(tmp).write_text(text),
            tmp=self.directory / f".key-{uuid.uuid4().hex[:8]}.json.tmp",
        )
        self._key_file_stale = False


# ------------------------------------------------------------------------------------------ helpers


def _save_shard(tmp: str, hashes: list[str], vectors: np.ndarray) -> None:
    with open(tmp, "wb") as handle:  # a handle: np.savez would append ".npz" to the temp file's name
        np.savez(handle, hashes=np.array(hashes, dtype=str), vectors=vectors)


def _read_shard(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(hashes, vectors)`` of a shard; raises when it cannot be read or has the wrong fields or dtypes."""
    with np.load(path, allow_pickle=False) as data:
        hashes = np.asarray(data["hashes"])
        vectors = np.asarray(data["vectors"])
    if hashes.dtype.kind != "U" or hashes.ndim != 1:
        raise ValueError(f"hashes has dtype {hashes.dtype} and shape {hashes.shape}")
    if vectors.dtype != np.float32 or vectors.ndim != 2 or len(vectors) != len(hashes):
        raise ValueError(
            f"vectors has dtype {vectors.dtype} and shape {vectors.shape} for {len(hashes)} hashes"
        )
    return hashes, vectors


def _stale_temp_reason(path: Path) -> str | None:
    """Why the temp file ``path`` is stale, or None while its writer may still rename it."""
    parsed = _TEMP_NAME.fullmatch(path.name)
    if parsed is not None and parsed["host"] == host_tag():
        pid = int(parsed["pid"])
        state = "alive" if pid == os.getpid() else pid_state(pid)  # another thread of ours may be writing
        if state == "dead":
            return f"process {pid} is gone"
        if state == "alive":
            return None
    try:
        idle = time.time() - path.stat().st_mtime
    except OSError:
        return None  # renamed or removed meanwhile
    return f"unchanged for {idle / 3600:.1f} h" if idle > STALE_TEMP_S else None


def _remove_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def key_digest(key: dict) -> str:
    """sha256 (hex) of ``key`` as canonical JSON (sorted keys, no whitespace)."""
    return hashlib.sha256(canonical_json(key).encode("utf-8")).hexdigest()


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
