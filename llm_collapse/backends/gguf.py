"""GGUF checkpoints: dequantize once with transformers, keep a safetensors copy in the cache.

transformers dequantizes GGUF to full precision on every load (about 30 s for Gemma 3 270M, plus 15 s for
the tokenizer), and ``save_pretrained`` refuses a GGUF-loaded model. So the first load copies the
dequantized state dict into a fresh model of the same class and saves it (with the tokenizer) under
``<cache>/converted/<sha256 of the file>/``; later loads read that folder in about a second. Writes go to a
temporary folder that is renamed into place, so an interrupted conversion leaves nothing half-written.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

from llm_collapse.utils.paths import cache_root

logger = logging.getLogger(__name__)


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def converted_gguf_dir(gguf_path: str | Path, *, sha256: str | None = None) -> Path:
    """Returns a safetensors folder for ``gguf_path``, converting it on first use."""
    gguf_path = Path(gguf_path)
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {gguf_path}")
    sha256 = sha256 or file_sha256(gguf_path)
    target = cache_root() / "converted" / sha256[:32]
    if (target / "config.json").is_file():
        return target
    logger.info("Converting %s to safetensors in %s (once; about 30-60 s)", gguf_path.name, target)
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    loaded = AutoModel.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    config = loaded.config
    # The copy must not look GGUF-quantized, or from_pretrained would route it back through the GGUF loader.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = type(loaded)(config)
    fresh.load_state_dict(loaded.state_dict(), strict=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
    try:
        fresh.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "SOURCE").write_text(f"{gguf_path.name}\nsha256 {sha256}\n")
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
