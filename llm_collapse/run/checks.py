"""The value checks of a `CompareConfig`: every value that needs no file, model or package, each check a
function of the config raising a one-line `ConfigError`, in the order `CompareConfig.validate` runs them (the
first problem of a command line is the one reported). A task's options are checked by the task
(`llm_collapse.tasks.task.Options.validate`); environment checks are `llm_collapse.run.preflight`'s."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from llm_collapse.adapters import ECHO_PREFIX, resolve_spec
from llm_collapse.adapters.folder import FOLDER_PREFIXES
from llm_collapse.adapters.spec import POOLINGS
from llm_collapse.backends import BACKENDS, QUANTIZATIONS
from llm_collapse.errors import ConfigError
from llm_collapse.records.saved_embeddings import EMBEDDING_DTYPES
from llm_collapse.tasks.registry import TASKS

CompareConfig = Any
"""A `llm_collapse.run.config.CompareConfig` (that module imports this one, so it is not imported here)."""
DESIGNS: tuple[str | None, ...] = (None, "bins", "prefix")  # None: prefix where the corpus allows, else bins
DEVICES = "auto, cpu, cuda, cuda:N or mps"
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:(0|[1-9][0-9]{0,2}))?")  # ASCII digits, no leading zero, < 1000


def valid_device(text: object) -> bool:
    """Whether ``text`` is a --device value (`DEVICES`); ``cuda:00``, ``cuda:٣`` or a 20-digit index are not."""
    return isinstance(text, str) and _DEVICE.fullmatch(text) is not None


def check_models(config: CompareConfig) -> None:
    """Every model resolves and is named once; ``reference_model`` and ``model_paths`` name models of the run."""
    canonical = {}
    for name in config.models:
        try:
            spec, _ = resolve_spec(name)  # UnknownNameError with a suggestion
        except ValueError as err:
            raise ConfigError(str(err)) from None
        key = model_key(name, spec.name)
        if key in canonical:
            raise ConfigError(
                f"--models names {spec.name!r} twice ({canonical[key]!r} and {name!r}); list each once"
            )
        canonical[key] = name
    if config.reference_model is not None and config.reference_model not in config.models:
        raise ConfigError(
            f"--reference-model {config.reference_model!r} is not in --models {config.models}; name one of them "
            "(the others are compared with it) or leave it unset"
        )
    if config.reference_model is not None and len(config.models) < 2:
        raise ConfigError(
            f"--reference-model compares the other --models with {config.reference_model!r}, but there is no "
            "other; add a model or leave it unset"
        )
    for path_name in config.model_paths:
        if path_name not in config.models:
            raise ConfigError(f"--model-path names {path_name!r}, which is not in --models {config.models}")


def check_methods(config: CompareConfig) -> dict[str, str]:
    """Every method parses (`InterventionError` naming the parameter) and is listed once; returns each
    method's slug by its text."""
    slugs: dict[str, str] = {}
    for method in config.parsed_methods():  # InterventionError naming the parameter
        if method.slug in slugs:
            raise ConfigError(
                f"--methods {slugs[method.slug]!r} and {method.text!r} are the same intervention "
                f"({method.slug}); list it once"
            )
        slugs[method.slug] = method.text
    return {method: slug for slug, method in slugs.items()}


def check_tasks_and_corpus(config: CompareConfig) -> None:
    """Known tasks (each named once: `CompareConfig` refuses a repeat); a corpus of the registry or
    ``folder:PATH``; lengths of at least 8 tokens."""
    for task in config.tasks:
        if task not in TASKS:
            raise ConfigError(f"Unknown task {task!r}; available: {', '.join(TASKS)}")
    from llm_collapse.data import CORPORA

    if config.corpus.startswith("folder:"):
        if not config.corpus.removeprefix("folder:").strip():
            raise ConfigError("--corpus folder: needs a path, e.g. --corpus folder:/data/my_texts")
    else:
        CORPORA.get(config.corpus)
    if not config.lengths or any(n < 8 for n in config.lengths):
        raise ConfigError(f"--lengths must be integers >= 8, got {config.lengths}")


def check_runtime(config: CompareConfig) -> None:
    """Backend, dtype, device, quantization and pooling are values the package knows."""
    if config.backend not in BACKENDS:
        raise ConfigError(f"Unknown backend {config.backend!r}; available: {', '.join(BACKENDS)}")
    from llm_collapse.backends.device import DTYPE_NAMES  # imports torch: not at module level

    if config.dtype is not None and config.dtype not in DTYPE_NAMES:
        raise ConfigError(f"Unknown --dtype {config.dtype!r}; allowed: {', '.join(DTYPE_NAMES)}")
    if not valid_device(config.device):
        raise ConfigError(
            f"Unknown --device {config.device!r}; allowed: {DEVICES} (N: the GPU's index), e.g. --device cpu"
        )
    if config.quant is not None and config.quant not in QUANTIZATIONS:
        raise ConfigError(f"Unknown --quant {config.quant!r}; allowed: {', '.join(QUANTIZATIONS)}")
    if config.pooling is not None and config.pooling not in POOLINGS:
        raise ConfigError(f"Unknown --pooling {config.pooling!r}; allowed: {', '.join(POOLINGS)}")


def check_sizes(config: CompareConfig) -> None:
    """Counts, the design and the seed."""
    for name in ("max_per_bin", "batch_size"):
        if getattr(config, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(config, name)}")
    if config.design not in DESIGNS:
        raise ConfigError(f"Unknown --design {config.design!r}; allowed: bins, prefix")
    if config.prefix_docs is not None and config.prefix_docs < 1:
        raise ConfigError(f"--prefix-docs must be >= 1, got {config.prefix_docs}")
    if config.prefix_docs is not None and config.design == "bins":
        raise ConfigError(
            "--prefix-docs applies to --design prefix only; drop --design bins or --prefix-docs"
        )
    if config.seed < 0:
        raise ConfigError(f"--seed must be >= 0, got {config.seed}; e.g. --seed 0")


def check_output(config: CompareConfig) -> None:
    """An output folder, and a dtype of saved vectors the package writes."""
    if not config.out.strip():
        raise ConfigError("--out is empty; give a run folder, e.g. --out reports/my_run")
    if config.save_embeddings not in (None, *EMBEDDING_DTYPES):
        raise ConfigError(
            f"--save-embeddings {config.save_embeddings!r} is not one of {', '.join(EMBEDDING_DTYPES)}; "
            "e.g. --save-embeddings float32 (or the bare flag: float16)"
        )


def check_posthoc(config: CompareConfig) -> None:
    """A post-hoc method (`llm_collapse.interventions.posthoc`) needs enough texts per length to fit."""
    from llm_collapse.interventions.posthoc import MIN_ITEMS

    for method in config.parsed_methods():
        posthoc = method.posthoc
        if posthoc is not None and config.per_length < MIN_ITEMS[posthoc.name]:
            flag, least = config.per_length_flag, MIN_ITEMS[posthoc.name]
            raise ConfigError(
                f"--methods {method.text!r}: {posthoc.slug} needs at least {least} texts per "
                f"length to fit, {flag} gives {config.per_length}; use {flag} >= {least}"
            )


def check_margins(config: CompareConfig) -> None:
    """Each ``margins`` key is a metric a task writes and each value a positive finite number."""
    from llm_collapse.tasks.registry import METRICS

    for metric, margin in config.margins.items():
        if metric not in METRICS or "_vs_" in metric:
            raise ConfigError(
                f"--margin {metric}={margin}: {metric!r} is not a metric a task writes; name one of "
                "llm_collapse.tasks.registry.METRICS, e.g. pairwise_cosine or acc@1"
            )
        if not 0 < margin < math.inf:
            raise ConfigError(
                f"--margin {metric}={margin}: a margin must be a positive number on the metric's scale, "
                f"e.g. --margin {metric}=0.01"
            )


def check_controls(config: CompareConfig, slug_of: dict[str, str]) -> None:
    """Each ``controls`` pair names two different --methods (``slug_of``: method -> its slug), neither of
    them base (every method already has its ``*_vs_base`` rows)."""
    for method, control in config.controls.items():
        for name in (method, control):
            if name not in slug_of:
                raise ConfigError(
                    f"--control {method}={control}: {name!r} is not in --methods {config.methods}; add it "
                    "there or drop the pair"
                )
        if slug_of[method] == slug_of[control]:
            raise ConfigError(f"--control {method}={control} pairs a method with itself; name another")
        if "base" in (slug_of[method], slug_of[control]):
            raise ConfigError(
                f"--control {method}={control}: every method is already paired with base (`*_vs_base`); "
                "name two non-base methods"
            )


def model_key(name: str, spec_name: str) -> str:
    """What makes two --models entries the same model: the catalog name, or for a folder (st:, hf:, echo:PATH) its
    kind and resolved path, so ``st:DIR``, ``st:DIR/`` and a symlink to DIR are one model."""
    for prefix in (*FOLDER_PREFIXES, ECHO_PREFIX):
        if name.lower().startswith(prefix) and Path(name[len(prefix) :]).expanduser().exists():
            return prefix + str(Path(name[len(prefix) :]).expanduser().resolve())
    return spec_name
