"""What a run writes and every reader reads: the tidy result rows and run files (`results`), run.json
(`record`: `RunRecord`, `ModelRecord`), the vectors ``--save-embeddings`` keeps (`saved_embeddings`) and the claims a
config declares before its run (`claims`).

Below both the run that writes these files and the reports that read them (and the tasks that make the rows),
so none of those imports another to reach a file format.
"""

from __future__ import annotations
