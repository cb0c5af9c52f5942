"""``python -m llm_collapse.compare``: models x interventions x tasks x lengths -> results and a report (`llm_collapse.cli.compare`)."""

from __future__ import annotations

import sys

from llm_collapse.cli.compare import main

if __name__ == "__main__":
    sys.exit(main())
