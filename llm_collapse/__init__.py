"""llm_collapse: measure and intervene on length collapse in LLM-based text embedders.

Public API::

    import llm_collapse as lc
    lc.list_embedders()
    lc.register_embedder("my_model.yaml")  # a spec as data (llm_collapse.adapters.spec_file)
    embedder = lc.load_embedder("minilm")
    vectors = embedder.encode(["a text", "another"])  # (2, 384) float32, unit norm

Decision: the names above load on first use (PEP 562 ``__getattr__``), so ``import llm_collapse`` (and with it
every ``llm-collapse COMMAND --help``) imports neither torch nor transformers; ``lc.load_embedder`` and
``from llm_collapse import Embedder`` work as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llm_collapse.adapters import EmbedderSpec, list_embedders, register_embedder
    from llm_collapse.embedder import Embedder
    from llm_collapse.load import load_embedder

__version__ = "0.1.0"

# public name -> the module that defines it, imported when the name is first asked for
_LAZY = {
    "Embedder": "llm_collapse.embedder",
    "EmbedderSpec": "llm_collapse.adapters",
    "list_embedders": "llm_collapse.adapters",
    "load_embedder": "llm_collapse.load",
    "register_embedder": "llm_collapse.adapters",
}

__all__ = ["Embedder", "EmbedderSpec", "__version__", "list_embedders", "load_embedder", "register_embedder"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'llm_collapse' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
