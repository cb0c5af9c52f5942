"""Native re-implementations of embedding models whose published remote code does not run on transformers 5.

Each module here builds on transformers' own classes (so ``from_pretrained`` keeps sharding, dtype, device maps and
quantisation) and never executes code from a checkpoint folder. ``nv_embed`` holds nvidia/NV-Embed-v2; ``flops``
is the one FLOP formula of a transformer config (`FlopModel`); ``structure`` finds a model's layers.
"""

from __future__ import annotations

BIDIRECTIONAL_MODEL_TYPES = frozenset(
    {
        "bert",
        "roberta",
        "xlm-roberta",
        "distilbert",
        "mpnet",
        "electra",
        "deberta",
        "deberta-v2",
        "modernbert",
        "nomic_bert",
        "new",  # Alibaba-NLP's gte "NewModel"
    }
)
"""config.json ``model_type`` values whose attention is bidirectional (every other type counts as causal); the
FLOP model and the vLLM backend read this one set. A decoder run bidirectionally says so in its spec instead
(``attention="bidirectional"``: gte-Qwen2, NV-Embed-v2)."""


ABSOLUTE_POSITION_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "distilbert", "mpnet", "electra"})
"""config.json ``model_type`` values with a learned absolute position table: they read at most
``max_position_embeddings`` tokens (the run truncates there). ModernBERT, nomic-bert and gte's NewModel are
encoders with rotary positions; DeBERTa's are relative."""


def position_table(config_json: dict) -> int | None:
    """The most tokens a model reads, for a config.json dict whose text model has an absolute position table;
    None for rotary or relative positions (no table caps the input)."""
    text = config_json.get("text_config") or config_json
    if text.get("model_type") not in ABSOLUTE_POSITION_TYPES or not text.get("max_position_embeddings"):
        return None
    return int(text["max_position_embeddings"])


def text_config(config):
    """The language model's config inside ``config``: ``get_text_config()`` where the config has it (every
    transformers config; wrappers such as NV-Embed-v2's return their ``text_config``), else ``config`` itself
    (a plain namespace in tests)."""
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config
