"""llm_collapse: measure and intervene on length collapse in LLM-based text embedders.

Public API::

    import llm_collapse as lc
    lc.list_embedders()
    lc.register_embedder("my_model.yaml")  # a spec as data (llm_collapse.adapters.spec_file)
    embedder = lc.load_embedder("minilm")
    vectors = embedder.encode(["a text", "another"])  # (2, 384) float32, unit norm
"""

from __future__ import annotations

from llm_collapse.adapters import EmbedderSpec, list_embedders, register_embedder
from llm_collapse.embedder import Embedder
from llm_collapse.load import load_embedder

__version__ = "0.1.0"

__all__ = ["Embedder", "EmbedderSpec", "__version__", "list_embedders", "load_embedder", "register_embedder"]
