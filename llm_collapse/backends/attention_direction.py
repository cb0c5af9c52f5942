"""Running a decoder checkpoint bidirectionally through transformers' own seams (``EmbedderSpec.attention``).

Why two switches
    transformers 5 builds a decoder's mask with ``masking_utils.create_causal_mask``, which returns a padding-only
    (bidirectional) mask when the config says ``is_causal=False``. Without padding that mask is skipped (None) and
    the attention function (sdpa, and the package's ``banded``/``chunked``/SelfExtend functions) falls back to the
    module's own ``is_causal`` flag. So the config *and* every attention module must say non-causal; with only
    the config, an unpadded batch would run causally and a padded one bidirectionally. (gte-Qwen2's published
    remote code had exactly that split: its sdpa path defaulted to ``is_causal=True`` when no mask was built, fixed
    for the 1.5B model in huggingface.co/Alibaba-NLP/gte-Qwen2-1.5B-instruct commit 2c527fb.)

Decisions
    - Applied once, right after loading, to the loaded module (and to the meta-device model ``--dry-run`` asks about
      prefix sharing); nothing is registered globally, and `llm_collapse.encoding.prefix` reads the same flags to refuse
      prefix sharing for such a model.
    - No sliding window is touched: the checkpoints that need this (Qwen2 with ``use_sliding_window: false``) have
      none; a spec file asking for it on a windowed model keeps the window, now two-sided.
"""

from __future__ import annotations

import logging

from torch import nn

from llm_collapse.models import text_config
from llm_collapse.models.structure import attention_modules

logger = logging.getLogger(__name__)


def set_attention_direction(model: nn.Module, attention: str) -> None:
    """Makes ``model`` attend bidirectionally when ``attention == "bidirectional"``; ``"causal"`` leaves it as is.

    Raises:
        ValueError: ``attention`` is neither, or the model has no attention module to switch.
    """
    if attention == "causal":
        return
    if attention != "bidirectional":
        raise ValueError(f"Unknown attention {attention!r}; allowed: causal, bidirectional")
    modules = attention_modules(model)
    if not modules:
        raise ValueError("attention='bidirectional' found no attention module with a 'scaling' to switch")
    config = text_config(model.config)
    config.is_causal = False
    model.config.is_causal = False
    for _, module in modules:
        module.is_causal = False
    logger.info("attention switched to bidirectional in %d layers", len(modules))
