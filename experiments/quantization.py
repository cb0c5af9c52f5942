"""Quantization drift (study Q6): ``python -m llm_collapse.compare --config experiments/quantization.yaml``.

Usage::

    python experiments/quantization.py          # minilm + gemma3-270m -> reports/study/quantization
    python experiments/quantization.py --models minilm --lengths 64 --max-per-bin 4 --out /tmp/quant

Arguments are `llm_collapse.compare` flags and override the YAML file. The quantization task
(`llm_collapse.tasks.quantization`) holds the code; this script only names the configuration.
"""

from __future__ import annotations

import sys
from pathlib import Path

from llm_collapse.cli.compare import main as compare

CONFIG = Path(__file__).with_name("quantization.yaml")


def main(argv: list[str] | None = None) -> int:
    return compare(["--config", str(CONFIG), *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
