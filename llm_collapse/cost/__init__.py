"""What work costs, below both the runs and the benchmark: this machine's measured matmul rate (`rate`), the
GPU planning estimate (`estimate`) and the timing helpers (`timing`). The FLOP formula they use is the model
layer's (`llm_collapse.models.flops`), so the adapters' published dimensions can read it without importing this.

``run/plan.py`` (``compare --dry-run``) and ``bench/`` read these; nothing here imports ``run`` or ``bench``
(the GPU estimate takes a run's config as an argument and reads the task registry).
"""

from __future__ import annotations
