"""``python -m llm_collapse.estimate``: expected GPU time and memory of a comparison (`llm_collapse.cli.estimate`)."""

from __future__ import annotations

import sys

from llm_collapse.cli.estimate import main

if __name__ == "__main__":
    sys.exit(main())
