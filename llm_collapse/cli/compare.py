"""``python -m llm_collapse.compare``: models x interventions x tasks x lengths -> results and a report.

Usage::

    python -m llm_collapse.compare                      # the embedded default (offline models, ~10 min on 2 CPU cores)
    python -m llm_collapse.compare --models mistral,nv-embed --methods base,tempscale:0.8,ntk:1e5,yarn:8 \\
        --tasks collapse,passkey --lengths 512,4096,32768 --model-path mistral=/models/e5 --out reports/gpu
    python -m llm_collapse.compare --config experiments/gpu_7b.yaml --dry-run
    torchrun --nproc_per_node 2 -m llm_collapse.compare ...   # or: accelerate launch -m llm_collapse.compare ...

Flags override the YAML file, which overrides the defaults; the resolved configuration is saved in run.json.
Exit codes: 0 done; 2 bad input (one line on stderr; checked before any model loads, nothing written);
130 interrupted (rerun the same command to resume from the embedding cache).
"""

from __future__ import annotations

import argparse
import logging
import os

from llm_collapse.run.arguments import add_arguments, cli_values
from llm_collapse.run.config import CompareConfig
from llm_collapse.utils.commands import ArgumentParser, run_command, say, setup_logging, status_line
from llm_collapse.utils.logs import held_logs

PROG = "python -m llm_collapse.compare"
DESCRIPTION = (
    "Models x interventions x tasks x lengths -> results and a report. Flags override the --config file, which "
    "overrides the defaults. Exit codes: 0 done; 2 bad input (one line, checked before any model loads, nothing "
    "written); 130 interrupted (rerun the same command to resume from the embedding cache)."
)


EXAMPLES = f"""examples:

  {PROG} --models minilm --methods base,tempscale:0.8 --tasks collapse,knn --dry-run
  {PROG} --config experiments/study/minilm.yaml --out reports/minilm"""


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog=prog,
        usage="%(prog)s [--config FILE] [--dry-run] [options]",
        description=DESCRIPTION,
        epilog=EXAMPLES.replace(PROG, prog),
    )
    command = parser.add_argument_group("the command")
    command.add_argument("--config", help="YAML file with any of the options below")
    command.add_argument(
        "--dry-run", action="store_true", help="print the plan (texts, tokens, estimated time) and exit"
    )
    command.add_argument(
        "--overwrite", action="store_true", help="replace another run in --out and recompute embeddings"
    )
    command.add_argument("--no-report", action="store_true", help="write results and run.json only")
    command.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    """Runs the command; ``prog`` names it in usage and errors as invoked (``llm-collapse compare``)."""
    args = build_parser(prog).parse_args(argv)
    setup_logging(logging.DEBUG if args.verbose else logging.INFO, timestamps=True)
    return run_command(lambda: _compare(args))


def _compare(args: argparse.Namespace) -> int:
    from llm_collapse.run.runner import run_comparison

    with held_logs():  # a refusal is one line: no warning about the inputs it refuses
        config = CompareConfig.from_sources(cli_values(args), args.config)
    if args.dry_run:
        from llm_collapse.run.plan import describe_plan
        from llm_collapse.run.preflight import preflight

        with held_logs(), status_line() as show:  # on a terminal: what it is doing, cleared before any line
            # as the run would, but models without weights are planned from the catalog
            documents = preflight(config, overwrite=args.overwrite, report=not args.no_report, plan_only=True)
            plan = describe_plan(
                config,
                documents,
                report=not args.no_report,
                step=lambda doing: show(f"planning: {doing} ..."),
            )
        say(plan)
        return 0
    out = run_comparison(config, overwrite=args.overwrite, report=not args.no_report)
    if os.environ.get("RANK", "0") == "0":  # under torchrun/accelerate only rank 0 writes and reports
        say(f"results: {out / 'results.parquet'}")
        if not args.no_report:
            say(f"report:  {out / 'report.html'}")
    return 0
