"""Several processes or GPUs: each embeds its share of the texts into the shared cache, rank 0 reports.

Launch with ``accelerate launch -m llm_collapse.compare ...`` (GPUs) or, on one CPU machine, ``torchrun
--nproc_per_node 2 -m llm_collapse.compare ...`` (accelerate's CPU launcher starts only one process without
MPI). Every rank builds the same inputs (deterministic for the seed), embeds ``texts[rank::world]`` of every
model x method into the on-disk cache (shard files are unique per process, so concurrent writers are safe),
then all ranks meet at a barrier and rank 0 runs the ordinary single-process comparison, which now finds
every embedding cached. Results therefore equal a single-process run's up to batch-composition rounding.
"""

from __future__ import annotations

import logging
import os

from llm_collapse.encoding.cached import cache_for, encode_cached
from llm_collapse.interventions import InterventionError
from llm_collapse.run.config import CompareConfig
from llm_collapse.run.models import load_for_run
from llm_collapse.tasks.inputs import RunInputs

logger = logging.getLogger(__name__)


def world(device: str | None = None):
    """accelerate's ``PartialState`` when launched by torchrun/accelerate with several processes, else None.

    ``device`` is the run's ``--device``: ``cpu`` keeps every rank on the CPU (gloo) on a machine with GPUs;
    otherwise the ranks take the GPUs when there are any (accelerate gives each rank its own)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from accelerate import PartialState

    return PartialState(cpu=on_cpu(device))


def on_cpu(device: str | None) -> bool:
    """Whether the ranks of a run on ``device`` (``--device``; None or ``auto``: the GPUs if any) use the CPU."""
    from llm_collapse.backends.device import resolve_device

    return resolve_device(device).type == "cpu"


def embed_share(config: CompareConfig, inputs: RunInputs, state, *, overwrite: bool = False) -> int:
    """Embeds this process's share (`split_between_processes`) of every text of the run into the cache;
    returns how many texts it embedded."""
    done = 0
    for model_name in config.models:
        embedder = load_for_run(model_name, config)
        documents, queries = inputs.documents(), inputs.queries()
        for method in config.methods:
            try:
                with embedder.intervene(method):
                    cache = cache_for(embedder)
                    for kind, texts in (("document", documents), ("query", queries)):
                        with state.split_between_processes(sorted(set(texts))) as share:
                            encode_cached(
                                embedder,
                                share,
                                kind=kind,
                                cache=cache,
                                batch_size=config.batch_size,
                                overwrite=overwrite,
                            )
                        done += len(share)
            except InterventionError:
                continue  # the main process records it as not applicable
    logger.info("rank %d/%d embedded %d texts", state.process_index, state.num_processes, done)
    return done
