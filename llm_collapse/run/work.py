"""What one text costs each model of a run, for the progress line's ETA (`llm_collapse.utils.progress`).

Decisions:

* Work is forward FLOPs (`FlopModel.from_config`, the plan's and the benchmark's formula), so a slow model
  after a fast one, or 32k-token texts after 512-token ones, no longer make a text-counting ETA off by hours.
* A text's tokens are estimated from its characters at the run's own ratio (`RunInputs.chars_per_token`:
  characters over reference-tokenizer tokens of its texts): the progress line must price texts it has not
  tokenized yet, and the ETA divides work left by work done, so a ratio that is off for one model scales both
  alike. An absolute-position model reads at most its position table (the run truncates there).
* Echo reads its text twice (`text_copies`). Interventions are not priced (window:off, PCW's chunks): the ETA
  re-measures its rate as it goes.
* Anything that cannot be read without loading the model (a config this FLOP formula does not know) gives
  None for the whole run: the ETA then counts texts, as before, rather than mixing units.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from llm_collapse.adapters import resolve_spec
from llm_collapse.backends.weights import load_config
from llm_collapse.models import position_table
from llm_collapse.models.flops import FlopModel
from llm_collapse.run.config import CompareConfig
from llm_collapse.run.models import model_weights

logger = logging.getLogger(__name__)

TextCost = Callable[[int], float]
"""Characters of a text -> estimated forward FLOPs of embedding it."""


def text_costs(config: CompareConfig, chars_per_token: float) -> dict[str, TextCost] | None:
    """Each model's `TextCost` from its config (no weights are loaded, no GGUF converted), or None where one
    model's config cannot be priced."""
    costs = {}
    for name in config.models:
        try:
            costs[name] = _text_cost(name, config, chars_per_token)
        except Exception as err:  # noqa: BLE001 - an ETA is not worth failing a run for
            logger.debug("%s: the ETA counts texts (its FLOPs are not known before it loads: %s)", name, err)
            return None
    return costs


def _text_cost(name: str, config: CompareConfig, chars_per_token: float) -> TextCost:
    spec, _ = resolve_spec(name)
    model_config = load_config(model_weights(name, config, convert=False))
    flops = FlopModel.from_config(model_config)
    flops = replace(flops, causal=flops.causal and spec.causal)  # gte-Qwen2, NV-Embed run bidirectionally
    cap = position_table(model_config)
    copies = spec.input_format.text_copies

    def cost(chars: int) -> float:
        tokens = max(int(chars / chars_per_token), 1)
        return flops.flops(copies * (tokens if cap is None else min(tokens, cap)))

    return cost
