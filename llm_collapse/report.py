"""``python -m llm_collapse.report``: rebuild or merge reports (`llm_collapse.cli.report`)."""

from __future__ import annotations

import sys

from llm_collapse.cli.report import main

if __name__ == "__main__":
    sys.exit(main())
