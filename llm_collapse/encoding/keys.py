"""What identifies a vector in the embedding cache: the embedder's state (the folder key) and the text.

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
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from llm_collapse.encoding.cache import KEY_DIGITS, canonical_json, key_digest
from llm_collapse.utils.paths import cache_root

CACHE_FORMAT = 1
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

# (resolved path, size, mtime_ns) -> sha256, so repeated keys do not re-read the same files.
_SHA256_MEMO: dict[tuple[str, int, int], str] = {}


def cache_key(embedder) -> dict:
    """Everything that changes ``embedder``'s vectors, as plain JSON-able data (see the module docstring).

    Compute it where the vectors are computed: inside an ``embedder.intervene(...)`` block the key carries
    the intervention, outside it does not.
    """
    key = jsonable(embedder.describe())
    device = str(key.pop("device", "") or "")
    key["device_type"] = device.split(":", 1)[0] or None
    key["padding_side"] = getattr(embedder, "padding_side", None)
    weights = key.get("weights") or {}
    directory = weights.get("directory") if isinstance(weights, dict) else None
    key["weights_fingerprint"] = weights_fingerprint(directory) if directory else None
    key["cache_format"] = CACHE_FORMAT
    return key


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
    e.g. with ``embedder.resolve_instruction(kind, instruction)``; `text_hashes` does this) are part of it."""
    payload = json.dumps([kind, instruction, text], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8", errors="surrogatepass")).hexdigest()


def _file_sha256(path: Path, stat: os.stat_result) -> str:
    memo_key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if (digest := _SHA256_MEMO.get(memo_key)) is None:
        sha = hashlib.sha256()
        with path.open("rb") as handle:
            while block := handle.read(1 << 22):
                sha.update(block)
        digest = _SHA256_MEMO[memo_key] = sha.hexdigest()
    return digest


def jsonable(value: Any) -> Any:
    """Plain JSON data: dicts with str keys, lists, str, int, float, bool, None (others become str)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((jsonable(v) for v in value), key=canonical_json)
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    return str(value)


def text_hashes(texts: list[str], kind: str, instruction: str | None) -> list[str]:
    """`text_hash` of each text (``instruction`` already resolved)."""
    return [text_hash(text, kind, instruction) for text in texts]


def cache_dir(key: dict, root: str | Path | None = None) -> Path:
    """``<root>/embeddings/<key digest>/``: the folder of ``key``'s vectors (``root``: `cache_root` when None)."""
    root = Path(root).expanduser() if root is not None else cache_root()
    return root / "embeddings" / key_digest(key)[:KEY_DIGITS]


def key_difference(key: dict, other: dict) -> list[str]:
    """The fields in which two keys (plain JSON data, as `cache_key` gives) differ; empty when they are equal."""
    return sorted(k for k in set(key) | set(other) if key.get(k) != other.get(k))
