"""``python -m llm_collapse.study``: question-by-question report over several runs (`llm_collapse.cli.study`)."""

from __future__ import annotations

import sys

from llm_collapse.cli.study import main

if __name__ == "__main__":
    sys.exit(main())
