"""``python -m llm_collapse.bench.throughput``: the ``--dry-run`` embedding estimate against a real run of the same config.

Since the plan times a replica of each model's layers (`llm_collapse.cost.forward_rate`) it checks that rate;
with ``LLM_COLLAPSE_PLAN_GFLOPS`` unset and no replica possible it checks the fallback, the matmul benchmark x
`llm_collapse.cost.rate.FORWARD_EFFICIENCY` (docs/performance.md records the numbers it gave before replicas).
The whole command, startup to report, is `llm_collapse.bench.whole_command`'s.
"""

from __future__ import annotations

import logging
import os


def main(argv: list[str] | None = None) -> int:
    """Estimate vs measurement: the ``--dry-run`` estimate and a real run of the same prefix-design config.

    ``python -m llm_collapse.bench.throughput [--model gemma3-270m] [--dtype bf16]``: for lengths 1024/4096
    and 2048/8192 (2 documents, base, collapse), prints the estimated and the measured seconds of the
    embedding work (run.json ``wall_time_s``) and their ratio. A private cache (under a temp folder) makes
    every embedding real; the GGUF conversion of the user cache is reused.
    """
    import argparse
    import json
    import tempfile
    from pathlib import Path

    from llm_collapse.run.config import CompareConfig
    from llm_collapse.run.plan import plan
    from llm_collapse.run.runner import run_comparison
    from llm_collapse.utils.commands import run_command, say, setup_logging
    from llm_collapse.utils.paths import cache_root

    parser = argparse.ArgumentParser(prog="python -m llm_collapse.bench.throughput", description=main.__doc__)
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--dtype", default=None, help="default: the run default (auto)")
    args = parser.parse_args(argv)
    setup_logging(logging.INFO)

    def measure() -> int:
        converted = cache_root() / "converted"
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "cache").mkdir()
            if converted.is_dir():
                (Path(tmp) / "cache" / "converted").symlink_to(converted)
            os.environ["LLM_COLLAPSE_CACHE"] = str(Path(tmp) / "cache")
            say("lengths      estimate_s  measured_s  estimate/measured")
            for lengths in ([1024, 4096], [2048, 8192]):
                out = Path(tmp) / "-".join(map(str, lengths))
                config = CompareConfig.from_sources(
                    dict(models=[args.model], methods=["base"], tasks=["collapse"], design="prefix",
                         prefix_docs=2, lengths=lengths, out=str(out), dtype=args.dtype)
                )  # fmt: skip
                estimate = plan(config)[1]
                run_comparison(config, report=False)
                measured = json.loads((out / "run.json").read_text())["wall_time_s"][
                    f"{args.model}:base:collapse"
                ]
                say(f"{lengths!s:12} {estimate:10.1f}  {measured:10.1f}  {estimate / measured:.2f}")
        return 0

    return run_command(measure)


if __name__ == "__main__":
    raise SystemExit(main())
