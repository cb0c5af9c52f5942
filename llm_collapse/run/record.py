"""`RunRecord`: what ``run.json`` holds, written by the runner and read by the reporting code, in one place.

Reading is tolerant by design: a report must never crash on the metadata of an old or hand-edited run. A
field of the wrong type reads as its default (logged once per field), unknown top-level keys are kept in
``extra`` and unknown per-model keys in `ModelRecord.extra`, so writing a read record gives back the file.
Only a file that is not a JSON object is an error.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from llm_collapse.errors import UserError
from llm_collapse.utils.files import write_json

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
        truncated: Texts truncated per method slug.
        not_applicable: Why a method (or ``method:task``) could not apply.
        oom_retries: Out-of-memory batch halvings per method.
        n_texts: Distinct texts the model embedded per method.
        extra: Further keys a task recorded (quantization: ``variants``, ``lengths``, ``inputs``).
    """

    describe: dict[str, Any] = field(default_factory=dict)
    tiny_random: bool = False
    truncated: dict[str, int] = field(default_factory=dict)
    not_applicable: dict[str, str] = field(default_factory=dict)
    oom_retries: dict[str, int] = field(default_factory=dict)
    n_texts: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


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
    inputs: dict[str, Any] = field(default_factory=dict)
    models: dict[str, ModelRecord] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def model(self, name: str) -> ModelRecord:
        """The entry of model ``name`` (an empty one when the run has none)."""
        return self.models.get(name) or ModelRecord()

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("models", "extra")}
        data["models"] = {name: _model_json(record) for name, record in self.models.items()}
        return {**self.extra, **data}

    def write(self, out_dir: Path | str) -> Path:
        path = Path(out_dir) / RUN_FILE
        write_json(self.to_json(), path)
        return path

    @classmethod
    def from_json(cls, data: dict[str, Any], *, source: str = RUN_FILE) -> RunRecord:
        known = {f.name for f in fields(cls)} - {"extra"}
        values = {k: _typed(cls, k, data[k], source) for k in known - {"models"} if k in data}
        models = data.get("models", {})
        if not isinstance(models, dict):
            _wrong(source, "models", models)
            models = {}
        values["models"] = {
            str(name): _model_record(entry, f"{source} models.{name}") for name, entry in models.items()
        }
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


def _model_json(record: ModelRecord) -> dict[str, Any]:
    data = {f.name: getattr(record, f.name) for f in fields(record) if f.name != "extra"}
    if record.n_texts is None:
        del data["n_texts"]
    return {**record.extra, **data}


def _model_record(entry: Any, source: str) -> ModelRecord:
    if not isinstance(entry, dict):
        _wrong(source, "(entry)", entry)
        return ModelRecord()
    known = {f.name for f in fields(ModelRecord)} - {"extra"}
    values = {k: _typed(ModelRecord, k, entry[k], source) for k in known if k in entry}
    return ModelRecord(**values, extra={k: v for k, v in entry.items() if k not in known})


_CHECKS = {
    "str": lambda v: isinstance(v, str),
    "str | None": lambda v: v is None or isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "int | None": lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
    "list[str]": lambda v: isinstance(v, list),
}


def _typed(cls, name: str, value: Any, source: str) -> Any:
    """``value`` when it has the field's type (any dict for dict fields), else the field's default."""
    spec = next(f for f in fields(cls) if f.name == name)
    check = _CHECKS.get(spec.type, lambda v: isinstance(v, dict))
    if check(value):
        return value
    _wrong(source, name, value)
    return spec.default_factory() if callable(spec.default_factory) else spec.default


def _wrong(source: str, name: str, value: Any) -> None:
    logger.warning("%s: %s has the wrong type (%s); read as its default", source, name, type(value).__name__)
