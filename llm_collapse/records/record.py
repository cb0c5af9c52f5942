"""`RunRecord`: what ``run.json`` holds, written by the runner and read by the reporting code, in one place.

Every field the runner writes is a typed field here, coerced once when the file is read, so the reporting
code reads attributes and never re-validates. Reading is tolerant by design: a report must never crash on
the metadata of an old or hand-edited run. A field (or a mapping's entry) of the wrong type reads as its
default (logged), unknown top-level keys are kept in ``extra`` and unknown per-model keys in
`ModelRecord.extra`, so writing a read record gives back the file. Only a file that is not a JSON object
is an error.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from llm_collapse.errors import UserError
from llm_collapse.utils.files import write_json
from llm_collapse.utils.types import matches

logger = logging.getLogger(__name__)

RUN_FILE = "run.json"


class RunRecordError(UserError, ValueError):
    """A run.json that cannot be read at all (not JSON, not an object)."""


@dataclass
class ModelRecord:
    """One model's entry in ``run.json``.

    Attributes:
        describe: `Embedder.describe` (dtype, attention, max_length, sliding window, RoPE, interventions...).
        tiny_random: Random weights from `llm_collapse.testing` (code-path checks, never findings).
        truncated: Distinct texts truncated per method slug (runs before 2026-12-05 counted a text once per task).
        token_caps: Method slug -> its tokens per text where a method reads longer texts than ``max_length``
            (`llm_collapse.interventions.absolute`, PCW); the others truncate at ``max_length``.
        not_applicable: Why a method (or ``method:task``) could not apply.
        oom_retries: Out-of-memory retries per method: what each halving did (a count in hand-made records).
        n_texts: Distinct texts the model embedded per method.
        controls: Method slug -> the slug of its matched control (``*_vs_control`` rows).
        prefix_sharing: Method slug -> how its nested lengths were embedded (the prefix design, ``-start``).
        variants: The quantization task's variants: `Embedder.describe` and load/embed seconds each.
        extra: Further keys (written by older or newer versions), kept as they are.
    """

    describe: dict[str, Any] = field(default_factory=dict)
    tiny_random: bool = False
    truncated: dict[str, int] = field(default_factory=dict)
    token_caps: dict[str, int] = field(default_factory=dict)
    not_applicable: dict[str, str] = field(default_factory=dict)
    oom_retries: dict[str, list[str] | int] = field(default_factory=dict)
    n_texts: int | None = None
    controls: dict[str, str] = field(default_factory=dict)
    prefix_sharing: dict[str, str] = field(default_factory=dict)
    variants: dict[str, dict] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def sliding_window(self) -> int | None:
        """The model's sliding window as it ran (``describe``), or None."""
        return whole_number(self.describe.get("sliding_window"))

    @property
    def max_length(self) -> Any:
        return self.describe.get("max_length")


@dataclass
class InputsRecord:
    """What the run embedded (`llm_collapse.tasks.inputs.RunInputs.describe`).

    Attributes:
        reference_tokenizer: The tokenizer lengths were cut under (the first model's).
        design: ``"bins"`` or ``"prefix"``.
        prefix_docs: Documents of the prefix design.
        prefix_docs_concatenated: How many of them joined consecutive corpus documents.
        texts_per_length: Length (as written: a string) -> texts.
        retrieval: Retrieval task -> length (a string) -> candidate documents per query.
        extra: Further keys, kept as they are.
    """

    reference_tokenizer: str | None = None
    design: str | None = None
    prefix_docs: int | None = None
    prefix_docs_concatenated: int | None = None
    texts_per_length: dict[str, int] = field(default_factory=dict)
    retrieval: dict[str, dict[str, int]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, data: Any, *, source: str = "inputs") -> InputsRecord:
        """The record of a mapping (`RunInputs.describe`, or run.json's ``inputs``), every field coerced."""
        return _read(cls, data, source)


@dataclass(frozen=True)
class RunSettings:
    """The resolved config's values the report states, read once from ``config`` (None when absent)."""

    seed: int | None = None
    retrieval_docs: int | None = None
    retrieval_queries: int | None = None
    retrieval_pool: int | None = None

    @classmethod
    def of(cls, config: dict[str, Any]) -> RunSettings:
        return cls(**{f.name: whole_number(config.get(f.name)) for f in fields(cls)})


@dataclass
class RunRecord:
    """The content of ``run.json`` (see the module docstring for how it is read)."""

    run_id: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)
    git_commit: str | None = None
    hardware: dict[str, Any] = field(default_factory=dict)
    started: str | None = None
    finished: str | None = None
    wall_time_s: dict[str, float] = field(default_factory=dict)
    inputs: InputsRecord = field(default_factory=InputsRecord)
    models: dict[str, ModelRecord] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    embeddings: dict[str, Any] = field(default_factory=dict)
    """``--save-embeddings``: the file, dtype, vector count and bytes (`SavedEmbeddings.write`), and after
    ``report --recompute`` when and by which code the results were rebuilt (``recomputed``); absent otherwise."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def settings(self) -> RunSettings:
        """Typed values of ``config`` (seed, retrieval sizes)."""
        return RunSettings.of(self.config)

    def model(self, name: str) -> ModelRecord:
        """The entry of model ``name`` (an empty one when the run has none)."""
        return self.models.get(name) or ModelRecord()

    def to_json(self) -> dict[str, Any]:
        data = {
            f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("models", "inputs", "extra")
        }
        data["inputs"] = _written(self.inputs, omit_none=True)
        data["models"] = {name: _written(record) for name, record in self.models.items()}
        if not self.embeddings:  # files stay as they were before it existed
            del data["embeddings"]
        return {**self.extra, **data}

    def write(self, out_dir: Path | str) -> Path:
        path = Path(out_dir) / RUN_FILE
        write_json(self.to_json(), path)
        return path

    @classmethod
    def from_json(cls, data: dict[str, Any], *, source: str = RUN_FILE) -> RunRecord:
        known = {f.name for f in fields(cls)} - {"extra"}
        values = {k: _typed(cls, k, data[k], source) for k in known - {"models", "inputs"} if k in data}
        models = data.get("models", {})
        if not isinstance(models, dict):
            _wrong(source, "models", models)
            models = {}
        values["models"] = {
            str(name): _read(ModelRecord, entry, f"{source} models.{name}") for name, entry in models.items()
        }
        values["inputs"] = InputsRecord.of(data.get("inputs", {}), source=f"{source} inputs")
        return cls(**values, extra={k: v for k, v in data.items() if k not in known})

    @classmethod
    def read(cls, run_dir: Path | str) -> RunRecord | None:
        """The run's record; None when it has no run.json.

        Raises:
            RunRecordError: run.json is unreadable or not a JSON object.
        """
        path = Path(run_dir) / RUN_FILE
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise RunRecordError(f"{path}: unreadable ({err})") from None
        if not isinstance(data, dict):
            raise RunRecordError(f"{path}: expected a JSON object")
        return cls.from_json(data, source=str(path))


def whole_number(value: Any) -> int | None:
    """``value`` as an int when it is a whole number (bools excluded; ``"8"`` and ``8.0`` count), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return int(number) if math.isfinite(number) and number.is_integer() else None


# ModelRecord fields left out of the file while empty (or None): files stay as they were before they existed.
_OPTIONAL = ("n_texts", "controls", "prefix_sharing", "variants", "token_caps")


def _written(record, *, omit_none: bool = False) -> dict[str, Any]:
    """A record as its mapping: unknown keys kept, optional fields only when set."""
    data = {f.name: getattr(record, f.name) for f in fields(record) if f.name != "extra"}
    for name in list(data):
        if (name in _OPTIONAL and data[name] in (None, {})) or (omit_none and data[name] is None):
            del data[name]
    return {**record.extra, **data}


def _read(cls, entry: Any, source: str):
    """A `ModelRecord` / `InputsRecord` from its mapping, every field coerced (`_typed`)."""
    if not isinstance(entry, dict):
        _wrong(source, "(entry)", entry)
        return cls()
    known = {f.name for f in fields(cls)} - {"extra"}
    values = {k: _typed(cls, k, entry[k], source) for k in known if k in entry}
    return cls(**values, extra={k: v for k, v in entry.items() if k not in known})


def _typed(cls, name: str, value: Any, source: str) -> Any:
    """``value`` when it has the field's type, else the field's default (logged). A mapping's entries are
    checked one by one, nested mappings too: an entry of the wrong type is dropped (logged), the rest kept."""
    spec = next(f for f in fields(cls) if f.name == name)
    try:
        kept, dropped = _coerce(value, str(spec.type))
    except TypeError:
        _wrong(source, name, value)
        return spec.default_factory() if callable(spec.default_factory) else spec.default
    if dropped:
        logger.warning("%s: %s holds entries of the wrong type; they are left out", source, name)
    return kept


def _coerce(value: Any, annotation: str) -> tuple[Any, bool]:
    """``(value kept, whether an entry was dropped)``; `TypeError` when ``value`` itself does not match."""
    if annotation.startswith("dict[str, ") and annotation != "dict[str, Any]":
        if not isinstance(value, dict):
            raise TypeError(annotation)
        inner = annotation.removeprefix("dict[str, ").removesuffix("]")
        kept, dropped = {}, False
        for key, entry in value.items():
            try:
                kept[str(key)], inner_dropped = _coerce(entry, inner)
            except TypeError:
                dropped = True
                continue
            dropped |= inner_dropped
        return kept, dropped
    if not matches(value, annotation):
        raise TypeError(annotation)
    return value, False


def _wrong(source: str, name: str, value: Any) -> None:
    logger.warning("%s: %s has the wrong type (%s); read as its default", source, name, type(value).__name__)
