"""``python -m llm_collapse.compare``: models x interventions x tasks x lengths -> results and a report.

Usage::

    python -m llm_collapse.compare                      # the embedded default (offline models, ~10 min on 2 CPU cores)
    python -m llm_collapse.compare --models mistral,nv-embed --methods base,tempscale:0.8,ntk:1e5,yarn:8 \\
        --tasks collapse,passkey --lengths 512,4096,32768 --model-path mistral=/models/e5 --out reports/gpu
    python -m llm_collapse.compare --config experiments/gpu_7b.yaml --dry-run
    torchrun --nproc_per_node 2 -m llm_collapse.compare ...   # or: accelerate launch -m llm_collapse.compare ...

Flags override the YAML file, which overrides the defaults; the resolved configuration is saved in run.json.
Exit codes: 0 done, 2 bad input (one line on stderr, nothing written).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from llm_collapse.config import CompareConfig, ConfigError, add_arguments, cli_values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m llm_collapse.compare", description=__doc__.split("\n\n")[0]
    )
    add_arguments(parser)
    parser.add_argument("--config", help="YAML file with any of the options above")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace another run in --out and recompute embeddings"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan (texts, tokens, estimated time) and exit"
    )
    parser.add_argument("--no-report", action="store_true", help="write results and run.json only")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for noisy in ("transformers", "huggingface_hub", "urllib3", "httpx", "matplotlib", "PIL"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from llm_collapse.interventions import InterventionError
    from llm_collapse.registry import UnknownNameError
    from llm_collapse.runner import RunDirectoryError, run_comparison

    try:
        config = CompareConfig.from_sources(cli_values(args), args.config)
        if args.dry_run:
            from llm_collapse.plan import describe_plan

            print(describe_plan(config))
            return 0
        out = run_comparison(config, overwrite=args.overwrite, report=not args.no_report)
    except (ConfigError, InterventionError, UnknownNameError, RunDirectoryError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if os.environ.get("RANK", "0") == "0":  # under torchrun/accelerate only rank 0 writes and reports
        print(f"results: {out / 'results.parquet'}")
        if not args.no_report:
            print(f"report:  {out / 'report.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
