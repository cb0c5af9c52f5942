"""Saved embeddings (``--save-embeddings``): every vector a run's tasks encode, in ``embeddings.npz`` beside its
results, so that ``llm-collapse report --recompute RUN`` rebuilds every metric without loading a model.

Decisions:

- A vector is keyed by its model, the model's interventions (`Embedder.interventions`, the method slug without
  its post-hoc part) and the text's `llm_collapse.encoding.keys.text_hash` (its kind and effective instruction are in
  the hash, as in the cache). A post-hoc method (``posthoc:center``) transforms base's vectors inside
  `llm_collapse.tasks.base.TaskContext`, so its cells store and read base's vectors, once, and a recompute
  fits its transform again like every other metric.
- Vectors are kept as the model returned them, cast to ``float16`` (the default: half the size; a recompute
  then matches the run within float16's rounding) or ``float32`` (a recompute reproduces the run exactly).
  They are not normalised again after the cast.
- The file holds, per (model, slug) group ``i``, ``hashes_i`` ((n,) ``S64``: the hex digests) and ``vectors_i``
  ((n, d)), and ``groups``: the groups as JSON ``[[model, slug], ...]``. No pickles. It is written once, at the
  end of the run, atomically (`llm_collapse.utils.files.atomic_write`); vectors are held in memory until then
  (n texts x d x 2 bytes per model and method: 80 MB for 2000 texts, 4096 dims, 5 methods).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from llm_collapse.errors import UserError
from llm_collapse.utils.files import atomic_write

logger = logging.getLogger(__name__)

EMBEDDINGS_FILE = "embeddings.npz"
EMBEDDING_DTYPES: tuple[str, ...] = ("float16", "float32")
"""The values of ``save_embeddings``; the first is what a bare ``--save-embeddings`` means."""


class SavedEmbeddingsError(UserError, ValueError):
    """A run's embeddings.npz is missing, unreadable, or lacks a vector a recompute needs."""


class SavedEmbeddings:
    """Vectors by (model, slug) group and text hash: collected during a run, or read back for a recompute.

    Args:
        dtype: One of `EMBEDDING_DTYPES`: how the vectors are stored.
        source: The file they were read from (None while collecting); a recompute serves vectors only from a
            read file (`replaying`).
    """

    def __init__(self, dtype: str, *, source: Path | None = None) -> None:
        if dtype not in EMBEDDING_DTYPES:
            raise SavedEmbeddingsError(
                f"save_embeddings {dtype!r} is not one of {', '.join(EMBEDDING_DTYPES)}"
            )
        self.dtype = dtype
        self.source = source
        self.groups: dict[tuple[str, str], dict[str, np.ndarray]] = {}

    @property
    def replaying(self) -> bool:
        """Whether these vectors were read from a run (served to a recompute) rather than being collected."""
        return self.source is not None

    def __len__(self) -> int:
        return sum(len(group) for group in self.groups.values())

    def add(self, model: str, slug: str, hashes: list[str], vectors: np.ndarray) -> None:
        """Keeps ``vectors`` (n, d) under ``hashes``; a text seen before keeps its first vector."""
        group = self.groups.setdefault((model, slug), {})
        cast = np.asarray(vectors).astype(self.dtype)
        for h, row in zip(hashes, cast, strict=True):
            group.setdefault(h, row)

    def get(self, model: str, slug: str, hashes: list[str]) -> np.ndarray:
        """(n, d) float32 vectors of ``hashes``; `SavedEmbeddingsError` naming what is missing."""
        group = self.groups.get((model, slug), {})
        missing = sum(h not in group for h in hashes)
        if missing:
            raise SavedEmbeddingsError(
                f"{self.source} has no vector for {missing} of {len(hashes)} texts of {model} x {slug}; the "
                "run's embeddings do not match its run.json (rerun it with --save-embeddings)"
            )
        return np.stack([group[h] for h in hashes]).astype(np.float32)

    def write(self, run_dir: Path) -> dict:
        """Writes `EMBEDDINGS_FILE` into ``run_dir`` (atomically); returns what run.json records of it."""
        path = Path(run_dir) / EMBEDDINGS_FILE
        arrays: dict[str, np.ndarray] = {"groups": np.array(json.dumps([list(key) for key in self.groups]))}
        for i, group in enumerate(self.groups.values()):
            arrays[f"hashes_{i}"] = np.array(list(group), dtype="S64")
            arrays[f"vectors_{i}"] = np.stack(list(group.values()))
        atomic_write(path, lambda tmp: _save(tmp, arrays))
        logger.info("wrote %d %s vectors to %s", len(self), self.dtype, path)
        return {
            "file": EMBEDDINGS_FILE,
            "dtype": self.dtype,
            "vectors": len(self),
            "bytes": path.stat().st_size,
        }

    @classmethod
    def read(cls, path: Path) -> SavedEmbeddings:
        """The vectors of a run's `EMBEDDINGS_FILE`; `SavedEmbeddingsError` (one line) when it cannot be read or
        holds what no run writes (`_check_group`): a damaged file is data, so any failure to parse it is that
        error (numpy raises a dozen kinds on flipped bytes), never a traceback."""
        fix = "rerun the run with --save-embeddings"
        try:
            with np.load(path, allow_pickle=False) as data:
                keys = json.loads(str(data["groups"]))
                if not isinstance(keys, list) or not all(
                    isinstance(k, list) and len(k) == 2 and all(isinstance(x, str) for x in k) for k in keys
                ):
                    raise ValueError("its groups entry is not a list of [model, method] pairs")
                groups = {
                    (model, slug): _check_group(
                        data[f"hashes_{i}"], data[f"vectors_{i}"], f"{model} x {slug}"
                    )
                    for i, (model, slug) in enumerate(keys)
                }
        except Exception as err:  # noqa: BLE001 -- any parse failure of a damaged file is the one-line refusal
            raise SavedEmbeddingsError(
                f"{path} cannot be read ({type(err).__name__}: {str(err)[:200]}); {fix}"
            ) from None
        widths: dict[str, set[int]] = {}
        for (model, _), group in groups.items():
            widths.setdefault(model, set()).update(len(row) for row in group.values())
        if any(len(w) > 1 for w in widths.values()):
            raise SavedEmbeddingsError(
                f"{path} holds vectors of several widths for one model ({widths}); {fix}"
            )
        dtypes = {str(row.dtype) for group in groups.values() for row in group.values()}
        if len(dtypes) > 1 or not dtypes <= set(EMBEDDING_DTYPES):
            raise SavedEmbeddingsError(
                f"{path} holds vectors of dtype {', '.join(sorted(dtypes))}, not one of {', '.join(EMBEDDING_DTYPES)}; "
                f"{fix}"
            )
        saved = cls(dtypes.pop() if dtypes else EMBEDDING_DTYPES[0], source=Path(path))
        saved.groups = groups
        return saved


def _check_group(hashes: np.ndarray, vectors: np.ndarray, label: str) -> dict[str, np.ndarray]:
    """One group's vectors by text hash, checked as the cache checks its shards: a 2-D array with one row per
    hash, every value finite and no zero vector (``ValueError`` naming the group otherwise)."""
    if hashes.ndim != 1 or vectors.ndim != 2 or len(hashes) != len(vectors) or vectors.shape[1] == 0:
        raise ValueError(f"{label}: {vectors.shape} vectors for {hashes.shape} hashes, not one row per text")
    if vectors.dtype.kind != "f" or not np.isfinite(vectors).all():
        raise ValueError(f"{label}: vectors that are not finite floats")
    if not np.all(np.linalg.norm(vectors.astype(np.float32), axis=1) > 0):
        raise ValueError(f"{label}: a zero vector (no run writes one: every vector is unit length)")
    return dict(zip(hashes.astype(str).tolist(), vectors, strict=True))


def _save(tmp: str, arrays: dict[str, np.ndarray]) -> None:
    with open(tmp, "wb") as handle:  # a handle: np.savez would append ".npz" to the temp file's name
        np.savez(handle, **arrays)
