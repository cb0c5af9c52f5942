"""The socm task's per-text token clouds: read from one forward's token states, kept on disk beside the embedding
cache so that a long run that stops resumes at the next document instead of the next run.

A text's `CloudParts` are what its clouds are built from: the pooled tokens themselves where they are fewer than
the width (the cross-Gram route keeps them), else their streamed moments; the input's first token where pooling
leaves it out; the seeded fixed-size subsample; the split-half null's value. `TextClouds` are built from parts
by the same code whether the parts are fresh or read back, so a rerun's rows equal the first run's bit for bit (a
resumed run's to rounding: a text forwarded after the stop may share its batch with other texts than before).

Decisions:

- The store is ``<embedding cache folder>/socm/<digest of the task's options>/<text hash>.npz``: the embedding
  cache's key already holds everything that changes a token state (model, weights, dtype, intervention, ...);
  the digest adds the subsample size, the seed, the pooling rule and this format's version.
- One file per text, written to a temporary name and renamed (a reader sees a whole file or none), right after
  the forward that read it, so a kill loses at most the document being embedded. A file that cannot be read is
  a miss: removed with one warning and recomputed. A folder that refuses writes (permissions, read-only) turns
  the store off for the process with one warning; the rows are still computed.
- Sizes: a text of n >= d tokens stores d x d float64 moments (3.3 MB at gemma3-270m's d = 640); shorter ones
  their n x d float32 tokens.
"""

from __future__ import annotations

import io
import logging
import math
import os
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llm_collapse.encoding.cache import key_digest
from llm_collapse.encoding.keys import text_hash

logger = logging.getLogger(__name__)

CHUNK = 4096
"""Tokens per chunk of a text's streamed moments (float64: 4096 x d x 8 bytes at a time)."""
STORE_FORMAT = 1


@dataclass
class TextClouds:
    """One text's clouds: its pooled tokens, with the input's first token where pooling leaves it out, a
    fixed-size subsample, and the split-half null's terms."""

    cloud: object
    with_first: object | None
    subsample: object
    split_half: float


@dataclass
class CloudParts:
    """What one text's `TextClouds` are built from (module docstring); ``refused``: its mean token is near zero."""

    tokens: np.ndarray | None  # (n, d) float32 where n < d
    moments: object | None  # `TokenMoments` where n >= d
    first: np.ndarray | None  # (1, d) float32 where pooling leaves the first input token out
    subsample: np.ndarray  # (k, d) float32
    split_half: float
    refused: bool = False

    def clouds(self) -> TextClouds:
        """The text's clouds; raises `MeanTooSmall` where it has no unit-mean scale."""
        from llm_collapse.metrics.socm import MeanTooSmall, TextCloud

        if self.refused:
            raise MeanTooSmall("a near-zero mean token")
        moments = self.moments if self.moments is not None else _moments_of(self.tokens)
        cloud = TextCloud.of_moments(moments, self.tokens)
        with_first = None if self.first is None else TextCloud.of_moments(moments.copy().add(self.first))
        return TextClouds(cloud, with_first, TextCloud.of(self.subsample), self.split_half)


def cloud_parts(text: str, states, mask, *, tokens: int, seed: int, pooling: str) -> CloudParts:
    """One text's parts from its span's last-layer states (n_input, d) and pool mask (`Embedder.observe_tokens`).

    A last-token-pooled model pools one token, which has no cloud: its cloud is every input token but the first."""
    import torch

    from llm_collapse.metrics.socm import MeanTooSmall, TextCloud, TokenMoments, cloud_terms

    if pooling == "last":
        mask = torch.ones_like(mask)
        mask[:1] = False
    pooled = states[mask]
    n, dim = pooled.shape
    short = n < dim  # the tokens are kept (`CloudParts.clouds` makes their moments), else only their moments
    rng = np.random.default_rng([seed, zlib.crc32(text.encode("utf-8"))])
    first = None
    if mask.numel() and not bool(mask[0]) and n:  # pooling leaves the first input token out
        first = states[:1].float().cpu().numpy()
    chosen = np.sort(rng.choice(n, size=min(tokens, n), replace=False))
    subsample = _rows(pooled, chosen).float().cpu().numpy()
    order = rng.permutation(n)
    refused, split = False, math.nan
    if n >= 4:
        halves = [
            _moments(pooled, TokenMoments(dim), order[part]) for part in (slice(0, n // 2), slice(n // 2, n))
        ]
        try:
            split = cloud_terms(*(TextCloud.of_moments(h) for h in halves)).socm
        except MeanTooSmall:
            refused = True
    return CloudParts(
        tokens=pooled.float().cpu().numpy() if short else None,
        moments=None if short else _moments(pooled, TokenMoments(dim)),
        first=first,
        subsample=subsample,
        split_half=split,
        refused=refused,
    )


def _moments(pooled, moments, rows: np.ndarray | None = None):
    """``moments`` with ``pooled``'s tokens added (``rows`` of them), CHUNK at a time in float64."""
    count = pooled.shape[0] if rows is None else len(rows)
    for start in range(0, count, CHUNK):
        part = slice(start, start + CHUNK)
        chunk = pooled[part] if rows is None else _rows(pooled, rows[part])
        moments.add(chunk.double().cpu().numpy())
    return moments


def _moments_of(tokens: np.ndarray):
    """`_moments` of a float32 array: the same chunks, the same float64 values as from the states themselves."""
    from llm_collapse.metrics.socm import TokenMoments

    moments = TokenMoments(tokens.shape[1])
    for start in range(0, tokens.shape[0], CHUNK):
        moments.add(tokens[start : start + CHUNK].astype(np.float64))
    return moments


def _rows(states, rows: np.ndarray):
    """``states[rows]`` with the index on the states' device."""
    import torch

    return states[torch.as_tensor(rows, device=states.device)]


class CloudStore:
    """Each text's `CloudParts` on disk, by text hash (module docstring)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.writable = True

    @classmethod
    def beside(cls, cache_directory: str | Path, *, tokens: int, seed: int, pooling: str) -> CloudStore:
        """The store of these options beside the embedding cache folder ``cache_directory``."""
        options = {"format": STORE_FORMAT, "chunk": CHUNK, "tokens": tokens, "seed": seed, "pooling": pooling}
        return cls(Path(cache_directory) / "socm" / key_digest(options)[:20])

    def _path(self, text: str) -> Path:
        return self.directory / f"{text_hash(text, 'document', None)}.npz"

    def get(self, text: str) -> CloudParts | None:
        """The text's parts, or None (not stored, or unreadable: then removed with a warning)."""
        path = self._path(text)
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                return _parts_of(dict(data))
        except Exception as error:  # noqa: BLE001 -- any unreadable file is a miss, recomputed
            logger.warning("socm: unreadable stored cloud %s (%s): recomputed", path, error)
            path.unlink(missing_ok=True)
            return None

    def put(self, text: str, parts: CloudParts) -> None:
        """Stores the text's parts (atomically); a folder that refuses writes turns the store off, once."""
        if not self.writable:
            return
        path = self._path(text)
        tmp = path.with_name(f".{uuid.uuid4().hex}.npz.tmp")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            buffer = io.BytesIO()
            np.savez(buffer, **_arrays_of(parts))
            with open(tmp, "wb") as handle:
                handle.write(buffer.getvalue())
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except OSError as error:
            tmp.unlink(missing_ok=True)
            self.writable = False
            logger.warning(
                "socm: cannot store token clouds in %s (%s): a stopped run recomputes them",
                self.directory,
                error,
            )


def _arrays_of(parts: CloudParts) -> dict[str, np.ndarray]:
    arrays = {
        "split_half": np.float64(parts.split_half),
        "refused": np.bool_(parts.refused),
        "subsample": parts.subsample,
    }
    if parts.tokens is not None:
        arrays["tokens"] = parts.tokens
    if parts.moments is not None:
        state = parts.moments.state()
        arrays |= {f"moments_{name}": np.asarray(value) for name, value in state.items()}
    if parts.first is not None:
        arrays["first"] = parts.first
    return arrays


def _parts_of(arrays: dict[str, np.ndarray]) -> CloudParts:
    from llm_collapse.metrics.socm import TokenMoments

    moments = None
    if "moments_mean" in arrays:
        moments = TokenMoments.of_state(
            {k.removeprefix("moments_"): v for k, v in arrays.items() if k.startswith("moments_")}
        )
    tokens = arrays.get("tokens")
    if (tokens is None) == (moments is None):
        raise ValueError("a stored cloud holds either tokens or moments")
    return CloudParts(
        tokens,
        moments,
        arrays.get("first"),
        arrays["subsample"],
        float(arrays["split_half"]),
        bool(arrays["refused"]),
    )
