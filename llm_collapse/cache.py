"""On-disk embedding cache: runs that stop half-way resume where they stopped.

Layout::

    <root>/embeddings/<sha256(canonical key)[:20]>/
        key.json               # the key, written once, for humans (and checked against on reuse)
        shards/<stamp>.npz     # one file per `EmbeddingCache.put`: ``hashes`` (n,) str, ``vectors`` (n, d) float32

``root`` defaults to `llm_collapse.utils.paths.cache_root` (``$LLM_COLLAPSE_CACHE``).

Decisions:

- The folder key (`cache_key`) is `Embedder.describe` (everything that changes a vector: name, hub id,
  resolved weights location and revision, backend, dtype, quantization, attention implementation, pooling,
  input format with its templates and EOS policy, default instruction, max_length, intervention slug and
  parameters, sliding window, RoPE parameters, transformers and torch versions) plus a fingerprint of the
  files in the weights folder, the embedder's padding side and this cache's format version. The device
  string is replaced by the device *type*: ``cuda:0`` and ``cuda:1`` give the same vectors, CPU and CUDA
  kernels do not (bit for bit), and cached vectors are meant to be exactly what ``encode`` returns.
- The fingerprint lists every weight, config and tokenizer file (``*.safetensors``, ``*.bin``, ``*.pt``,
  ``*.pth``, ``*.gguf``, ``*.json``, ``*.model``, ``*.txt``; hidden files and folders skipped) with its
  size and, below 64 MB, its sha256; larger files contribute their mtime instead (hashing 15 GB on every run
  would cost minutes). Editing a weight file in place therefore changes the key.
- A text's cache entry (`text_hash`) is the sha256 of ``(kind, effective instruction, text)``. The
  effective instruction is `Embedder.resolve_instruction`'s resolution, so ``instruction=None`` and the card's
  default instruction share entries, and documents (which never take an instruction) all use ``None``.
- Every `put` writes one new shard: a temp file in ``shards/`` (named ``.<stamp>.<host>.npz.tmp``, which
  loading never reads as a shard; ``<stamp>`` is ``<time_ns>-<pid>-<random>``), fsync, ``os.replace`` to
  ``<stamp>.npz``, fsync of the folder. A reader therefore sees a whole shard or none. Several processes may
  append to one cache at once (shard names are unique per process).
- Shards are read lazily, once, into an in-memory index (hash -> row of a read-only array); shard names
  sort by creation time, so a later shard's vector wins for a hash written twice (``overwrite=True``).
- Any unusable shard is a miss: recompute, replace, warn once. A final-named shard that cannot be read
  (truncated, not an ``.npz``, wrong fields or dtypes), holds a NaN or inf, or has another vector width
  than the embedder's (`cache_for` passes ``dim``) is skipped and removed with one warning, so its texts
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
- ``key.json`` that differs from the key or cannot be read: if the folder is named after this key (as
  `cache_for` names it: the folder *is* this key's), the file was edited or damaged, so it is rewritten
  and the shards already there are removed (whoever edited the folder may have copied foreign vectors
  in; recomputing is cheaper than trusting them), with one warning. A readable, different ``key.json`` in
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

from llm_collapse.adapters.inputs import Kind
from llm_collapse.embedder import Embedder, as_text_list
from llm_collapse.errors import disk_full
from llm_collapse.utils.files import atomic_write
from llm_collapse.utils.paths import cache_root
from llm_collapse.utils.procs import host_tag, pid_state, remove_path

logger = logging.getLogger(__name__)
READ_ONLY_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})

CACHE_FORMAT = 1
KEY_DIGITS = 20
SHARD_SUFFIX = ".npz"
TEMP_SUFFIX = ".npz.tmp"
FINGERPRINT_PATTERNS: tuple[str, ...] = (
    "*.safetensors",
    "*.bin",
    "*.pt",
    "*.pth",
    "*.gguf",
    "*.json",
    "*.model",
    "*.txt",
)
SHA256_BELOW_BYTES = 64 * 1024 * 1024
STALE_TEMP_S = 3600.0
_TEMP_NAME = re.compile(r"\.(?P<ns>\d+)-(?P<pid>\d+)-[0-9a-f]+(?:\.(?P<host>.+))?" + re.escape(TEMP_SUFFIX))

# (resolved path, size, mtime_ns) -> sha256, so repeated keys do not re-read the same files.
_SHA256_MEMO: dict[tuple[str, int, int], str] = {}


# --------------------------------------------------------------------------------------------- keys


def cache_key(embedder: Embedder) -> dict:
    """Everything that changes ``embedder``'s vectors, as plain JSON-able data (see the module docstring).

    Compute it where the vectors are computed: inside an ``embedder.intervene(...)`` block the key carries
    the intervention, outside it does not.
    """
    key = _jsonable(embedder.describe())
    device = str(key.pop("device", "") or "")
    key["device_type"] = device.split(":", 1)[0] or None
    key["padding_side"] = getattr(embedder, "padding_side", None)
    weights = key.get("weights") or {}
    directory = weights.get("directory") if isinstance(weights, dict) else None
    key["weights_fingerprint"] = weights_fingerprint(directory) if directory else None
    key["cache_format"] = CACHE_FORMAT
    return key


def key_digest(key: dict) -> str:
    """sha256 (hex) of ``key`` as canonical JSON (sorted keys, no whitespace)."""
    return hashlib.sha256(_canonical_json(key).encode("utf-8")).hexdigest()


def weights_fingerprint(directory: str | Path) -> dict[str, dict]:
    """``{relative path: {"size", "sha256" | "mtime_ns"}}`` for the weight, config and tokenizer files."""
    directory = Path(directory)
    if not directory.is_dir():
        return {}
    files: set[Path] = set()
    for pattern in FINGERPRINT_PATTERNS:
        files.update(directory.rglob(pattern))
    out: dict[str, dict] = {}
    for path in sorted(files):
        relative = path.relative_to(directory)
        if any(part.startswith(".") for part in relative.parts):
            continue
        try:
            stat = path.stat()  # follows the HF cache's symlinks to the blobs
        except OSError:
            continue
        if not path.is_file():
            continue
        entry: dict[str, Any] = {"size": stat.st_size}
        if stat.st_size < SHA256_BELOW_BYTES:
            entry["sha256"] = _file_sha256(path, stat)
        else:
            entry["mtime_ns"] = stat.st_mtime_ns
        out[relative.as_posix()] = entry
    return out


def text_hash(text: str, kind: str, instruction: str | None) -> str:
    """sha256 (hex) of one text as embedded: ``kind`` and the *effective* instruction (already resolved,
    e.g. with ``embedder.resolve_instruction(kind, instruction)``; `encode_cached` does this) are part of it."""
    payload = json.dumps([kind, instruction, text], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8", errors="surrogatepass")).hexdigest()


def cache_for(embedder: Embedder, root: str | Path | None = None) -> EmbeddingCache:
    """The cache for ``embedder`` as it is now (interventions included): ``<root>/embeddings/<key>/``."""
    key = cache_key(embedder)
    root = Path(root).expanduser() if root is not None else cache_root()
    directory = root / "embeddings" / key_digest(key)[:KEY_DIGITS]
    return EmbeddingCache(directory, key=key, dim=embedder.dim)


# -------------------------------------------------------------------------------------------- cache


class EmbeddingCache:
    """Append-only store of float32 vectors by text hash, one ``.npz`` shard per `put`.

    Args:
        directory: The cache folder (created on the first `put`).
        key: What the vectors depend on; written to ``key.json`` on the first `put`, and compared with an
            existing ``key.json`` (see the module docstring for a mismatch).
        dim: Expected vector width (shards of another width are removed); taken from the first shard or
            `put` when None.
    """

    def __init__(self, directory: str | Path, *, key: dict | None = None, dim: int | None = None) -> None:
        self.directory = Path(directory)
        self.key = _jsonable(key) if key is not None else None
        self.dim = dim
        self._dim_given = dim is not None
        self._rows: dict[str, tuple[np.ndarray, int]] = {}
        self._loaded: set[str] = set()
        self._load_done = False
        self.read_only = False  # set by the first write that the folder refuses (permissions, read-only fs)
        if self.key is not None:
            self._check_key_file()

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
        final = None if self.read_only else self._write_shard(hashes, vectors)
        if final is not None:
            self._loaded.add(final.name)
        self._index(np.array(hashes), vectors)
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
            if _canonical_json(existing) == _canonical_json(self.key):
                return
            fields = set(existing) | set(self.key) if isinstance(existing, dict) else set(self.key)
            differing = sorted(
                k
                for k in fields
                if not isinstance(existing, dict)
                or _canonical_json(existing.get(k)) != _canonical_json(self.key.get(k))
            )
            problem = f"holds a different key (fields {differing})"
        if existing is not None and self.directory.name != key_digest(self.key)[:KEY_DIGITS]:
            raise ValueError(f"{path} {problem}; refusing to mix vectors")
        shards = sorted(self.shard_dir.glob(f"*{SHARD_SUFFIX}")) if self.shard_dir.is_dir() else []
        logger.warning(
            "cache: %s %s, but the folder is this key's; rewriting it and removing the %d shards there "
            "(they cannot be trusted; their texts are embedded again)",
            path,
            problem,
            len(shards),
        )
        for shard in shards:
            _remove_quietly(shard)
        self._write_key_file(replace=True)

    def _write_key_file(self, *, replace: bool = False) -> None:
        if self.key is None:
            return
        path = self.directory / "key.json"
        if path.exists() and not replace:
            return
        if path.is_dir() and not path.is_symlink():
            remove_path(path)
        text = json.dumps(self.key, indent=2, sort_keys=True) + "\n"
        atomic_write(
            path,
            lambda tmp: Path(tmp).write_text(text),
            tmp=self.directory / f".key-{uuid.uuid4().hex[:8]}.json.tmp",
        )


# -------------------------------------------------------------------------------------------- encode


def encode_cached(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    kind: Kind = "document",
    instruction: str | None = None,
    cache: EmbeddingCache | None,
    batch_size: int | None = None,
    show_progress_bar: bool | None = None,
    overwrite: bool = False,
) -> np.ndarray:
    """`Embedder.encode` through ``cache``: only texts not cached yet are embedded.

    Identical texts in ``texts`` are embedded once. Each finished batch is written to the cache at once, so
    a run killed half-way loses at most the batch in flight. With ``cache=None`` nothing is read or written
    (texts are still de-duplicated); with ``overwrite=True`` every text is embedded again and re-written.

    Args:
        embedder: The embedder, in the state (interventions) the cache was made for.
        texts: A list of strings.
        kind: ``"query"`` or ``"document"``, as in `Embedder.encode`.
        instruction: Query instruction, as in `Embedder.encode` (None means the card's default).
        cache: From `cache_for` (its key must match the embedder now, else ``ValueError``), or None.
        batch_size: Most texts per batch.
        show_progress_bar: As in `Embedder.encode`.
        overwrite: Embed and store every text even when cached.

    Returns:
        (n, d) float32 array of unit vectors in input order: what ``embedder.encode`` returns. Bit-identical
        when ``texts`` has no duplicates and the cached texts were embedded in the same batches.
    """
    texts = as_text_list(texts)
    effective = embedder.resolve_instruction(kind, instruction)
    if cache is not None and cache.key is not None:
        now = cache_key(embedder)
        if _canonical_json(now) != _canonical_json(cache.key):
            differing = sorted(
                k
                for k in set(now) | set(cache.key)
                if _canonical_json(now.get(k)) != _canonical_json(cache.key.get(k))
            )
            raise ValueError(
                f"cache {cache.directory} was made for another embedder state (differs in {differing}); "
                "call cache_for(embedder) where the vectors are computed, e.g. inside the intervene() block"
            )
    hashes = [text_hash(text, kind, effective) for text in texts]
    first: dict[str, int] = {}
    for index, h in enumerate(hashes):
        first.setdefault(h, index)
    found = {} if cache is None or overwrite else cache.get(list(first))
    missing = [h for h in first if h not in found]
    if cache is not None:
        logger.info(
            "cache: %d hits, %d to embed%s",
            len(found),
            len(missing),
            f" ({len(texts) - len(first)} duplicate texts)" if len(texts) > len(first) else "",
        )
    vectors: dict[str, np.ndarray] = dict(found)
    if missing:
        batches = embedder.iter_batches(
            [texts[first[h]] for h in missing],
            kind=kind,
            instruction=instruction,
            batch_size=batch_size,
            show_progress_bar=show_progress_bar,
        )
        for batch in batches:
            batch_hashes = [missing[i] for i in batch.indices]
            batch_vectors = batch.embeddings.numpy().astype(np.float32, copy=False)
            if cache is not None:
                cache.put(batch_hashes, batch_vectors)
            vectors.update(zip(batch_hashes, batch_vectors, strict=True))
    out = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    for index, h in enumerate(hashes):
        out[index] = vectors[h]
    return out


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


def _file_sha256(path: Path, stat: os.stat_result) -> str:
    memo_key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if (digest := _SHA256_MEMO.get(memo_key)) is None:
        sha = hashlib.sha256()
        with path.open("rb") as handle:
            while block := handle.read(1 << 22):
                sha.update(block)
        digest = _SHA256_MEMO[memo_key] = sha.hexdigest()
    return digest


def _jsonable(value: Any) -> Any:
    """Plain JSON data: dicts with str keys, lists, str, int, float, bool, None (others become str)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_jsonable(v) for v in value), key=_canonical_json)
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    return str(value)


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
