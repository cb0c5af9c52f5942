"""What work costs, below both the runs and the benchmark: the FLOP model (`flops`), this machine's measured
matmul rate (`rate`), the GPU planning estimate (`estimate`) and the timing helpers (`timing`).

``run/plan.py`` (``compare --dry-run``) and ``bench/`` read these; nothing here imports ``run`` or ``bench``
(the GPU estimate takes a run's config as an argument and reads the task registry).
"""

from __future__ import annotations
