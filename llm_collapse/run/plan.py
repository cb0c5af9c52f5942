"""``--dry-run``: what a comparison would embed, how many tokens, and a rough time estimate.

The estimate counts forward FLOPs from each model's config with `FlopModel.from_config` (the package's
one FLOP formula, `llm_collapse.bench`: 2 x linear parameters per token, plus 4 x attention channels per
attended (query, key) pair, causal and sliding-window aware) and divides by a nominal throughput:
``LLM_COLLAPSE_PLAN_GFLOPS`` (default 150 GFLOP/s, about what bf16 transformers reaches on the 2-core AMX
CPU this project is developed on; a GPU is 100x more). It is a planning aid, not a measurement.
"""

from __future__ import annotations

import json
import os

from llm_collapse.adapters import resolve_spec
from llm_collapse.adapters.echo import EchoFormat
from llm_collapse.backends.weights import load_config, resolve_weights
from llm_collapse.bench.flops import FlopModel
from llm_collapse.data import Document
from llm_collapse.data.bins import count_tokens
from llm_collapse.run.config import CompareConfig


def describe_plan(config: CompareConfig, documents: list[Document] | None = None) -> str:
    """The plan as text. Reads tokenizers and configs only: nothing is written, no GGUF is converted."""
    from llm_collapse.backends.hf import load_tokenizer
    from llm_collapse.run.inputs import build_inputs

    specs = {name: resolve_spec(name) for name in config.models}
    weights = {
        name: resolve_weights(
            spec.name, spec.hub_id, spec.source, config.model_paths.get(name) or implied, convert=False
        )
        for name, (spec, implied) in specs.items()
    }
    first = config.models[0]
    tokenizer = load_tokenizer(weights[first].directory, gguf_file=weights[first].gguf_file)
    inputs = build_inputs(config, tokenizer, documents)
    texts = [t.text for t in inputs.binned]
    for tasks in inputs.retrieval.values():
        for task in tasks:
            texts += list(task.documents) + list(task.queries)
    tokens = sum(count_tokens(texts, tokenizer)) if texts else 0
    gflops = float(os.environ.get("LLM_COLLAPSE_PLAN_GFLOPS", 150))
    lines = [
        f"run id {config.run_id()} -> {config.out}",
        f"models {config.models}; methods {config.methods}; tasks {config.tasks}; corpus {config.corpus}; lengths {config.lengths}",
        f"inputs: {json.dumps(inputs.describe())}",
        f"{len(texts)} distinct texts, {tokens} tokens under {first}'s tokenizer, per model and method",
    ]
    total = 0.0
    for name, (spec, _) in specs.items():
        config_json = load_config(weights[name])
        per_pass = _flops(config_json, texts, tokenizer, echo=isinstance(spec.input_format, EchoFormat))
        seconds = per_pass * len(config.methods) / (gflops * 1e9)
        total += seconds
        lines.append(
            f"  {name}: ~{per_pass / 1e12:.2f} TFLOP per method, ~{seconds / 60:.1f} min for {len(config.methods)} methods"
        )
    lines.append(
        f"estimated total ~{total / 60:.1f} min at {gflops:g} GFLOP/s (cached embeddings are not recomputed)"
    )
    return "\n".join(lines)


def _flops(config: dict, texts: list[str], tokenizer, *, echo: bool) -> float:
    """Forward FLOPs of ``texts`` (echo: each text twice, the template's few tokens left out)."""
    counter = FlopModel.from_config(config)
    return sum(counter.flops(2 * n if echo else n) for n in count_tokens(texts, tokenizer))
