"""`MTEBEncoder`: runs any llm_collapse `Embedder`, with or without interventions, under ``mteb`` 2.x.

Usage::

    import mteb
    from llm_collapse.mteb_adapter import MTEBEncoder

    embedder = llm_collapse.load_embedder("mistral")
    tasks = mteb.get_tasks(tasks=["SciFact"])
    cache = mteb.ResultCache("results/mteb")
    for method in (None, "tempscale:0.8", "ntk:1e5"):  # one loaded model, several methods
        mteb.evaluate(MTEBEncoder(embedder, interventions=method), tasks, cache=cache)

What mteb 2.26 asks of a model (``mteb.models.models_protocols.EncoderProtocol``): ``encode(inputs:
DataLoader[BatchedInput], *, task_metadata, hf_split, hf_subset, prompt_type=None, **encode_kwargs)``,
``similarity``, ``similarity_pairwise`` and an ``mteb_model_meta`` attribute (a ``ModelMeta``; ``mteb.evaluate``
reads it once, before running, to name the result folder). Retrieval tasks wrap such an encoder in their own
search wrapper as long as the object has no ``index``/``search`` methods, so this class deliberately has none.

Decisions and gotchas:

* Prompt type -> ``kind``: ``query`` -> ``"query"``, ``document`` (``"passage"`` in older code) -> ``"document"``.
  ``None`` (symmetric tasks: STS, clustering, classification, pair classification, bitext) -> ``"query"`` on
  both sides, as the e5-mistral / NV-Embed cards prescribe for symmetric tasks (documents are embedded bare).
* Instruction (only for ``kind="query"`` and only when the embedder's input format takes one; other embedders
  get none): first ``instructions[task_name]`` given to the constructor, then the task metadata's own ``prompt``
  (a string, or its ``"query"`` entry), then the task metadata's ``description``. The description is the most
  specific text mteb holds for every task, unlike the generic per-task-type ``abstask_prompt``; pass
  ``instructions=`` to reproduce a model card's exact instruction set.
* Texts are the batches' ``"text"`` field, exactly as mteb prepared them: retrieval corpora arrive as
  ``title + " " + text`` (mteb's ``_corpus_to_dict``), instruction-retrieval queries as ``query + " " +
  instruction`` and conversations flattened to one string. Using mteb's strings keeps scores comparable with
  other mteb models. Batches without ``"text"`` (image/audio tasks) raise a ValueError.
* Batch size: ``mteb.evaluate`` always sets ``encode_kwargs["batch_size"]`` (32 unless given), which would
  override the ``batch_size`` the embedder was loaded with; it only sizes mteb's DataLoader here. The embedder's
  own ``batch_size`` and token budget decide the forward passes unless ``MTEBEncoder(batch_size=...)`` is set.
* ``encode_kwargs["precision"]`` other than float32 is refused: the embeddings are always float32 and mteb would
  otherwise file the results under another output dtype.
* Interventions given to the adapter are applied with ``embedder.intervene`` for the duration of each
  ``encode`` call only, so several adapters can share one loaded model and the model is restored (including
  after an error) between calls. Interventions applied at load time stay on and are part of the name.
* ``mteb_model_meta.name`` is ``"llm-collapse/<embedder>"`` plus ``"--<slug>"`` when interventions are active
  (e.g. ``llm-collapse/mistral--tempscale-0.8``), so result folders of different methods never collide; the
  revision is a hash of ``Embedder.describe()`` (weights, dtype, max length, pooling, input format...), so
  a changed setting does not silently reuse cached results.
* mteb is imported lazily: this module imports without it and the first use names ``pip install mteb``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from llm_collapse.interventions import Stack, parse_interventions

if TYPE_CHECKING:
    from llm_collapse.embedder import Embedder

logger = logging.getLogger(__name__)

MODEL_PREFIX = "llm-collapse"
_FLOAT32_PRECISIONS = (None, "float32", "fp32", "float")
_KIND_BY_PROMPT_TYPE = {"query": "query", "document": "document", "passage": "document"}


def require_mteb():
    """Imports mteb 2.x or raises a one-line ImportError saying how to install it."""
    try:
        import mteb
    except ImportError as err:
        raise ImportError(
            f"evaluating with mteb needs the 'mteb' package (>=2): pip install mteb ({err})"
        ) from None
    major = str(getattr(mteb, "__version__", "2")).split(".")[0]
    if major.isdigit() and int(major) < 2:
        raise ImportError(
            f"llm_collapse.mteb_adapter needs mteb>=2, found {mteb.__version__}: pip install -U mteb"
        )
    return mteb


class MTEBEncoder:
    """An mteb 2.x encoder (``EncoderProtocol``) backed by an llm_collapse `Embedder`.

    Args:
        embedder: A loaded embedder (`llm_collapse.load_embedder`).
        interventions: Applied for the duration of each ``encode`` call (``"tempscale:0.8"``, objects, or a
            list; see `llm_collapse.interventions.parse_interventions`); None evaluates the model as loaded.
        instructions: Query instructions by mteb task name; overrides the task metadata (see module docstring).
        batch_size: Most texts per forward pass; None uses the embedder's own (mteb's batch size is ignored).

    Raises:
        llm_collapse.interventions.InterventionError: ``interventions`` does not parse or clashes with the
            interventions already applied to ``embedder``.
        ImportError: mteb (>=2) is not installed.
    """

    def __init__(
        self,
        embedder: Embedder,
        *,
        interventions=None,
        instructions: dict[str, str] | None = None,
        batch_size: int | None = None,
    ) -> None:
        require_mteb()
        if instructions is not None and (
            not isinstance(instructions, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in instructions.items())
        ):
            raise TypeError("instructions must be a dict mapping mteb task names to instruction strings")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be a positive integer or None, got {batch_size!r}")
        self.embedder = embedder
        self.stack: Stack = parse_interventions(interventions)
        Stack([*self._persistent_parts(), *self.stack.parts])  # one RoPE / window change, checked now
        self.instructions = dict(instructions or {})
        self.batch_size = batch_size
        self._meta_override = None

    @classmethod
    def from_name(cls, name: str, **kwargs: Any) -> MTEBEncoder:
        """Loads an embedder with `llm_collapse.load_embedder` and wraps it.

        Args:
            name: Registry name or alias (``"mistral"``, ``"minilm"``...).
            **kwargs: The class's ``interventions``, ``instructions`` and ``batch_size`` (per-encode
                interventions; load-time ones go to the loader); the rest is passed to
                `llm_collapse.load_embedder` (``path=``, ``dtype=``, ``max_length=``...).

        Returns:
            The adapter.
        """
        from llm_collapse.load import load_embedder

        require_mteb()  # fail before loading weights
        own = {
            key: kwargs.pop(key) for key in ("interventions", "instructions", "batch_size") if key in kwargs
        }
        return cls(load_embedder(name, **kwargs), **own)

    # ----------------------------------------------------------------------------------------- identity
    @property
    def interventions(self) -> str:
        """Slug of everything active while encoding: load-time interventions plus this adapter's."""
        outer, own = self.embedder.interventions, self.stack.slug
        if own == "base":
            return outer
        return own if outer == "base" else f"{outer}+{own}"

    @property
    def model_name(self) -> str:
        """The mteb model name, ``llm-collapse/<embedder>[--<interventions>]``."""
        name = f"{MODEL_PREFIX}/{self.embedder.name}".replace(" ", "_")
        slug = self.interventions
        return name if slug == "base" else f"{name}--{slug}"

    @property
    def revision(self) -> str:
        """Hash of the embedder's settings (`Embedder.describe`, without the device and interventions)."""
        describe = {
            k: v
            for k, v in self.embedder.describe().items()
            if k not in ("interventions", "intervention_params", "device")
        }
        blob = json.dumps(describe, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    @property
    def mteb_model_meta(self):
        """The ``mteb.ModelMeta`` mteb files results under (recomputed unless a wrapper assigned one)."""
        if self._meta_override is not None:
            return self._meta_override

        spec = self.embedder.spec
        return model_meta_for(
            spec,
            loader=None,
            name=self.model_name,
            revision=self.revision,
            n_parameters=sum(p.numel() for p in self.embedder.model.parameters()),
            max_tokens=self.embedder.max_length,
            embed_dim=self.embedder.dim,
            use_instructions=self.takes_instruction,
            experiment_kwargs=None,
            citation=None,
            contacts=None,
        )

    @mteb_model_meta.setter
    def mteb_model_meta(self, meta) -> None:
        # mteb's own wrappers (e.g. compression) assign a modified copy; keep it rather than fail.
        self._meta_override = meta

    @property
    def takes_instruction(self) -> bool:
        """Whether the embedder's query format has an instruction slot."""
        return bool(getattr(self.embedder.spec.input_format, "takes_instruction", False))

    # ----------------------------------------------------------------------------------------- encoding
    def instruction_for(self, task_metadata, kind: str) -> str | None:
        """The instruction passed to `Embedder.encode` for one task and kind (None for documents).

        Args:
            task_metadata: The mteb ``TaskMetadata`` (``name``, ``prompt``, ``description`` are read).
            kind: ``"query"`` or ``"document"``.

        Returns:
            ``instructions[task name]``, else the metadata's prompt (its ``"query"`` entry for a dict), else its
            description; None for documents or an embedder without an instruction slot.
        """
        if kind != "query" or not self.takes_instruction:
            return None
        name = getattr(task_metadata, "name", None)
        if name in self.instructions:
            return self.instructions[name]
        prompt = getattr(task_metadata, "prompt", None)
        if isinstance(prompt, dict):
            prompt = prompt.get("query")
        if isinstance(prompt, str) and prompt.strip():
            return prompt.strip()
        description = getattr(task_metadata, "description", None)
        if isinstance(description, str) and description.strip():
            return description.strip()
        return None

    def encode(
        self,
        inputs: Iterable[dict[str, Any]],
        *,
        task_metadata,
        hf_split: str,
        hf_subset: str,
        prompt_type=None,
        **kwargs: Any,
    ) -> np.ndarray:
        """Embeds the ``"text"`` of every batch of an mteb DataLoader.

        Args:
            inputs: ``DataLoader[BatchedInput]`` (any iterable of dicts with a ``"text"`` list works).
            task_metadata: The task's ``TaskMetadata`` (name, prompt and description pick the instruction).
            hf_split: The split being evaluated (logged only).
            hf_subset: The subset being evaluated (logged only).
            prompt_type: ``PromptType.query``/``"query"``, ``PromptType.document``/``"document"`` or None
                (symmetric task: embedded as queries).
            **kwargs: mteb's encode kwargs: ``show_progress_bar`` is honoured, ``batch_size`` is ignored (see
                the module docstring), ``precision`` must be float32.

        Returns:
            (n, d) float32 array of unit vectors, in the DataLoader's order.

        Raises:
            ValueError: A batch has no ``"text"``, a text is not a string, the prompt type is unknown or a
                non-float32 precision is requested.
        """
        kind = _kind(prompt_type)
        precision = kwargs.pop("precision", None)
        if precision not in _FLOAT32_PRECISIONS:
            raise ValueError(f"precision={precision!r} is not supported; llm_collapse embeddings are float32")
        show_progress_bar = kwargs.pop("show_progress_bar", None)
        kwargs.pop("batch_size", None)
        if kwargs:
            logger.debug("ignoring encode kwargs %s", sorted(kwargs))
        texts = _collect_texts(inputs)
        instruction = self.instruction_for(task_metadata, kind)
        task_name = getattr(task_metadata, "name", "?")
        logger.info(
            "%s on %s/%s/%s: %d %s texts, instruction=%r",
            self.model_name,
            task_name,
            hf_subset,
            hf_split,
            len(texts),
            kind,
            instruction,
        )
        if not texts:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        with contextlib.ExitStack() as active:
            if self.stack.parts:
                active.enter_context(self.embedder.intervene(self.stack))
            vectors = self.embedder.encode(
                texts,
                kind=kind,
                instruction=instruction,
                batch_size=self.batch_size,
                show_progress_bar=show_progress_bar,
            )
        return np.asarray(vectors, dtype=np.float32)

    def similarity(self, embeddings1, embeddings2):
        """Cosine similarity matrix (mteb's ``cos_sim``; the vectors are unit length, so also the dot product).

        Args:
            embeddings1: (n, d) or (d,) array or tensor.
            embeddings2: (m, d) or (d,) array or tensor.

        Returns:
            (n, m) torch tensor.
        """
        from mteb.similarity_functions import cos_sim

        return cos_sim(embeddings1, embeddings2)

    def similarity_pairwise(self, embeddings1, embeddings2):
        """Cosine similarity of each row pair.

        Args:
            embeddings1: (n, d) array or tensor.
            embeddings2: (n, d) array or tensor.

        Returns:
            (n,) torch tensor.
        """
        from mteb.similarity_functions import pairwise_cos_sim

        return pairwise_cos_sim(embeddings1, embeddings2)

    def __repr__(self) -> str:
        return f"MTEBEncoder({self.model_name!r}, revision={self.revision!r})"

    def _persistent_parts(self) -> list:
        """Interventions already applied to the embedder (at load time or by an enclosing ``intervene``)."""
        # Embedder keeps them private; read them only to reject a clash at construction rather than mid-run.
        return [p for stack in getattr(self.embedder, "_active", []) for p in stack.parts]


def _kind(prompt_type) -> str:
    if prompt_type is None:
        return "query"
    value = getattr(prompt_type, "value", prompt_type)
    if value not in _KIND_BY_PROMPT_TYPE:
        raise ValueError(f"unknown prompt_type {prompt_type!r}; expected query, document or None")
    return _KIND_BY_PROMPT_TYPE[value]


def _collect_texts(inputs: Iterable[dict[str, Any]]) -> list[str]:
    texts: list[str] = []
    for batch in inputs:
        if "text" not in batch:
            raise ValueError(
                f"mteb batch has no 'text' field (keys: {sorted(batch)}); llm_collapse embedders are text-only"
            )
        column = batch["text"]
        column = [column] if isinstance(column, str) else list(column)
        for text in column:
            if not isinstance(text, str):
                raise ValueError(f"mteb batch text #{len(texts)} is {type(text).__name__}, expected str")
            texts.append(text)
    return texts


def model_meta_for(spec, **fields):
    """An `mteb.ModelMeta` for an embedder spec: the fields every entry of this package shares, then ``fields``
    (name, revision, loader, sizes...), which win."""
    from mteb.models.model_meta import ModelMeta

    shared = dict(
        release_date=None,
        languages=None,
        n_parameters=None,
        memory_usage_mb=None,
        embed_dim=None,
        license=None,
        open_weights=True,
        public_training_code=None,
        public_training_data=None,
        framework=["PyTorch", "Transformers"],
        reference=f"https://huggingface.co/{spec.hub_id}" if spec.hub_id else None,
        similarity_fn_name="cosine",
        training_datasets=None,
        adapted_from=spec.hub_id,
        modalities=["text"],
    )
    return ModelMeta(**{**shared, **fields})
