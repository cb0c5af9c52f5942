"""What ``llm-collapse report --recompute RUN`` runs on: the run's record and config, and each model as its
adapter and tokenizer, without weights (the runner's `recompute_comparison` drives it).

`replay_embedder` builds an `Embedder` whose backend (`TokenizerOnly`) holds the checkpoint's tokenizer and
its config (``config.json``: what an intervention's token cap reads) and no model. `Embedder.tokenize` then gives
the run's exact model inputs at the run's ``max_length`` (read from run.json: the truncation counts and the
collapse task's token counts), and the vectors come from the run's saved embeddings through
`llm_collapse.tasks.base.TaskContext` (`llm_collapse.records.saved_embeddings`).
Interventions change nothing here (there is no model), so entering a method succeeds, except one that
run.json records as not applicable to the model: that one is refused again with the recorded reason, and the
recompute's rows, notes and contrasts are the run's.

Tasks that run the model itself (`llm_collapse.tasks.task.Task.vectors_only` False: layerwise hidden
states, quantized variants) cannot be rebuilt from vectors: such a run is refused up front, in one line.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_collapse.adapters import EmbedderSpec, resolve_spec
from llm_collapse.backends.hf import load_tokenizer
from llm_collapse.embedder import Embedder
from llm_collapse.errors import UserError
from llm_collapse.interventions import NotApplicable, Stack
from llm_collapse.records.record import ModelRecord, RunRecord, whole_number
from llm_collapse.records.saved_embeddings import EMBEDDINGS_FILE
from llm_collapse.run.config import CompareConfig
from llm_collapse.run.models import model_weights
from llm_collapse.tasks.registry import TASKS
from llm_collapse.utils.logs import held_logs

logger = logging.getLogger(__name__)


class RecomputeError(UserError, ValueError):
    """A run that ``--recompute`` cannot rebuild; the message says why and what to do instead."""


@dataclass
class TokenizerOnly:
    """`Embedder`'s backend in a recompute: the tokenizer and config, and interventions that change nothing.

    Only what `Embedder.tokenize` and `Embedder.intervene` read is here; anything that would run the model
    fails (no such attribute), which the up-front refusal of model-running tasks keeps from happening.

    Attributes:
        config: The transformers config of the checkpoint (`model_config`), as loading would read it.
        refused: Model-side method slug -> why run.json says it was not applicable to this model.
    """

    spec: EmbedderSpec
    tokenizer: Any
    config: Any
    refused: dict[str, str] = field(default_factory=dict)
    name: str = "saved-embeddings"

    @contextlib.contextmanager
    def intervene(self, stack: Stack, context) -> Iterator[None]:
        if stack.slug in self.refused:
            raise NotApplicable(self.refused[stack.slug])
        yield


def recomputable_run(run_dir: Path) -> tuple[RunRecord, CompareConfig]:
    """The run's record and its config (``out`` = ``run_dir``), or a one-line `UserError` saying why it cannot be
    recomputed: no run.json, no saved embeddings, a config this version refuses, a task that needs the model."""
    record = RunRecord.read(run_dir)  # RunRecordError for an unreadable one
    if record is None:
        raise RecomputeError(
            f"{run_dir} holds no run.json; give a run directory written by llm-collapse compare"
        )
    if not (run_dir / EMBEDDINGS_FILE).is_file():
        raise RecomputeError(f"run {run_dir} has no saved embeddings; rerun it with --save-embeddings")
    if not record.embeddings:
        raise RecomputeError(
            f"{run_dir / EMBEDDINGS_FILE} is not this run's: its run.json records no saved embeddings (an earlier "
            "run into the folder left it); rerun the run with --save-embeddings"
        )
    _check_relative_paths(record.config, run_dir)
    with held_logs():
        config = CompareConfig.from_sources({**record.config, "out": str(run_dir)})
    needs_model = [task for task in config.tasks if not TASKS[task].vectors_only]
    if needs_model:
        raise RecomputeError(
            f"run {run_dir}: task(s) {', '.join(needs_model)} run the model itself, not only its vectors, so "
            "--recompute cannot rebuild them; rerun the run instead"
        )
    if record.run_id and config.run_id() != record.run_id:
        raise RecomputeError(
            f"{run_dir}/run.json's config gives run id {config.run_id()}, not the run's {record.run_id}: it was "
            "edited (lengths, methods, ...) or written by an older version; rerun the run instead"
        )
    return record, config


def _check_relative_paths(config: dict, run_dir: Path) -> None:
    """run.json keeps paths as the run was given them; a relative one resolves against today's working directory.
    Said in a warning where it exists there, refused in one line where it does not."""
    paths = [str(p) for p in (config.get("model_paths") or {}).values() if isinstance(p, str)]
    paths += [str(p) for p in (config.get("embedder_specs") or []) if isinstance(p, str)]
    corpus = config.get("corpus")
    if isinstance(corpus, str) and corpus.startswith("folder:"):
        paths.append(corpus[len("folder:") :])
    for path in paths:
        if Path(path).expanduser().is_absolute():
            continue
        if not Path(path).exists():
            raise RecomputeError(
                f"{run_dir}/run.json names the relative path {path!r}, which does not exist from {Path.cwd()}; run "
                "--recompute from the folder the run was started in"
            )
        logger.warning(
            "run.json's relative path %r resolves against the working directory %s", path, Path.cwd()
        )


def replay_embedder(name: str, config: CompareConfig, record: ModelRecord) -> Embedder:
    """Model ``name`` as its adapter and tokenizer at the run's ``max_length``; no weights are read."""
    spec, _ = resolve_spec(name)
    max_length = whole_number(record.max_length)
    if max_length is None:
        raise RecomputeError(
            f"run.json records no max_length for {name}, so its texts cannot be tokenized as the run did; "
            "rerun the run instead"
        )
    refused = {
        method.model_stack.slug: record.not_applicable[method.text]
        for method in config.parsed_methods()
        if method.text in record.not_applicable
    }
    directory = model_weights(name, config).directory
    backend = TokenizerOnly(spec, load_tokenizer(directory), model_config(spec, directory), refused)
    return Embedder(spec, backend, max_length=max_length)


def model_config(spec: EmbedderSpec, directory: Path):
    """The checkpoint's transformers config, read from ``config.json`` without the weights (NV-Embed-v2's own
    class: it is not registered with transformers)."""
    if spec.loader == "nv-embed":
        from llm_collapse.models.nv_embed import NVEmbedConfig

        return NVEmbedConfig.from_pretrained(directory)
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(directory, trust_remote_code=False)
