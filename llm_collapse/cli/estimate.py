"""``python -m llm_collapse.estimate``: expected GPU time and peak memory of a comparison, by counting.

Usage::

    python -m llm_collapse.estimate --config experiments/gpu_7b.yaml --tflops 400 --gpu-gib 80
    python -m llm_collapse.estimate --config experiments/gpu_7b.yaml --markdown reports/gpu_7b/estimate.md

Estimates, not measurements (see `llm_collapse.cost.estimate`). Exit codes: 0 done, 2 bad input (one line).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from llm_collapse.cost.estimate import (
    DEFAULT_GPU_GIB,
    DEFAULT_HBM_TBS,
    DEFAULT_OVERHEAD_GIB,
    DEFAULT_TFLOPS,
    Assumptions,
    estimate,
    to_markdown,
)
from llm_collapse.run.arguments import add_arguments, cli_values
from llm_collapse.run.config import CompareConfig
from llm_collapse.utils.commands import ArgumentParser, run_command, say, setup_logging
from llm_collapse.utils.files import write_text
from llm_collapse.utils.paths import check_writable_file

PROG = "python -m llm_collapse.estimate"


ASSUMPTION_FLAGS = (
    ("--tflops", DEFAULT_TFLOPS, "sustained bf16 TFLOP/s assumed"),
    ("--hbm-tbs", DEFAULT_HBM_TBS, "sustained HBM TB/s assumed"),
    ("--gpu-gib", DEFAULT_GPU_GIB, "GPU memory in GiB to check against"),
    ("--overhead-gib", DEFAULT_OVERHEAD_GIB, "fixed memory overhead in GiB"),
)


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog=prog,
        description="Expected GPU time and peak memory of a comparison, by counting (estimates, not "
        "measurements). Exit codes: 0 done, 2 bad input (one line).",
    )
    add_arguments(parser)
    parser.add_argument("--config", help="YAML file of a comparison (what compare --config reads)")
    for flag, default, what in ASSUMPTION_FLAGS:
        parser.add_argument(flag, type=float, default=default, help=f"{what} (default: {default:g})")
    parser.add_argument(
        "--softcap-attention",
        default="fused",
        help="how bge-gemma2's exact softcap runs: fused (flex attention, what a CUDA run uses) or chunked (the "
        "fallback) (default: %(default)s)",
    )
    parser.add_argument("--markdown", metavar="PATH", help="also write the table to this markdown file")
    return parser


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """Runs the command; ``prog`` names it in usage and errors as invoked (``llm-collapse estimate``)."""
    args = build_parser(prog).parse_args(argv)
    setup_logging(logging.WARNING)
    return run_command(lambda: _estimate(args))


def _estimate(args: argparse.Namespace) -> int:
    config = CompareConfig.from_sources(cli_values(args), args.config)
    if args.markdown:
        check_writable_file(args.markdown, what="--markdown")
    assumptions = Assumptions(
        args.tflops, args.hbm_tbs, args.gpu_gib, args.overhead_gib, args.softcap_attention
    )
    text = to_markdown(estimate(config, assumptions))
    say(text.rstrip("\n"))
    if args.markdown:
        write_text(text, Path(args.markdown))
        say(f"wrote {args.markdown}")
    return 0
