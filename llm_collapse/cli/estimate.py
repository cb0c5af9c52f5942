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

from llm_collapse.cli.common import ArgumentParser, run_command, say, setup_logging
from llm_collapse.cost.estimate import (
    DEFAULT_GPU_GIB,
    DEFAULT_HBM_TBS,
    DEFAULT_OVERHEAD_GIB,
    DEFAULT_TFLOPS,
    Assumptions,
    estimate,
    to_markdown,
)
from llm_collapse.run.config import CompareConfig, add_arguments, cli_values
from llm_collapse.utils.files import write_text
from llm_collapse.utils.paths import check_writable_file

PROG = "python -m llm_collapse.estimate"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog=prog,
        description="Expected GPU time and peak memory of a comparison, by counting (estimates, not "
        "measurements). Exit codes: 0 done, 2 bad input (one line).",
    )
    add_arguments(parser)
    parser.add_argument("--config", help="YAML file of a comparison (what compare --config reads)")
    parser.add_argument(
        "--tflops",
        type=float,
        default=DEFAULT_TFLOPS,
        help=f"sustained bf16 TFLOP/s assumed (default: {DEFAULT_TFLOPS:g})",
    )
    parser.add_argument(
        "--hbm-tbs",
        type=float,
        default=DEFAULT_HBM_TBS,
        help=f"sustained HBM TB/s assumed (default: {DEFAULT_HBM_TBS:g})",
    )
    parser.add_argument(
        "--gpu-gib",
        type=float,
        default=DEFAULT_GPU_GIB,
        help=f"GPU memory in GiB to check against (default: {DEFAULT_GPU_GIB:g})",
    )
    parser.add_argument(
        "--overhead-gib",
        type=float,
        default=DEFAULT_OVERHEAD_GIB,
        help=f"fixed memory overhead in GiB (default: {DEFAULT_OVERHEAD_GIB:g})",
    )
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
