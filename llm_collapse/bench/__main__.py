"""``python -m llm_collapse.bench`` (and its ``--worker`` subprocesses)."""

from __future__ import annotations

import sys

from llm_collapse.bench.cli import main

sys.exit(main())
