"""`RunRecord`: every field the runner writes is typed and coerced once when run.json is read (issue 42)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from llm_collapse.records.record import InputsRecord, ModelRecord, RunRecord

REPO = Path(__file__).resolve().parents[2]
COMMITTED = sorted(REPO.glob("reports/**/run.json"))


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name)
def test_every_committed_run_json_reads_typed_and_writes_back_the_same(path, caplog):
    data = json.loads(path.read_text())
    with caplog.at_level(logging.WARNING, logger="llm_collapse.records.record"):
        record = RunRecord.from_json(data, source=str(path))
    assert caplog.records == []
    assert isinstance(record.inputs, InputsRecord) and all(
        isinstance(m, ModelRecord) for m in record.models.values()
    )
    assert json.loads(json.dumps(record.to_json(), default=str)) == data
    assert record.settings.seed == data["config"]["seed"]


def test_committed_typed_fields_are_read_as_attributes():
    record = RunRecord.read(REPO / "reports/study/yarn32k")
    model = next(iter(record.models.values()))
    assert model.controls and all(isinstance(v, str) for v in model.controls.values())
    assert model.prefix_sharing and "extra" not in json.dumps(record.to_json()["models"])
    assert record.inputs.design == "prefix" and record.inputs.prefix_docs == 32
    assert all(isinstance(n, int) for counts in record.inputs.retrieval.values() for n in counts.values())


def test_a_field_of_the_wrong_type_reads_as_its_default_and_bad_entries_are_dropped(caplog):
    data = {
        "config": {"seed": "3", "retrieval_docs": 2.5},
        "inputs": {"design": 7, "prefix_docs": 12, "retrieval": {"passkey": {"256": 24, "512": "many"}}},
        "models": {
            "m": {"truncated": {"base": 2, "ntk": "x"}, "controls": ["not", "a", "mapping"], "future": 1},
            "n": "not a mapping",
        },
    }
    with caplog.at_level(logging.WARNING, logger="llm_collapse.records.record"):
        record = RunRecord.from_json(data, source="run.json")
    assert record.settings.seed == 3 and record.settings.retrieval_docs is None  # "3" is a whole number
    assert record.inputs.design is None and record.inputs.prefix_docs == 12
    assert record.inputs.retrieval == {"passkey": {"256": 24}}
    assert record.models["m"].truncated == {"base": 2} and record.models["m"].controls == {}
    assert record.models["m"].extra == {"future": 1} and record.models["n"] == ModelRecord()
    assert len(caplog.records) == 5  # design, retrieval entry, truncated entry, controls, model n


@pytest.mark.parametrize(
    ("value", "annotation", "expected"),
    [
        (3, "int", True), (True, "int", False), ("3", "int", False), (None, "int | None", True),
        ([1, 2], "list[int]", True), ([1, True], "list[int]", False), (["a"], "list[str] | None", True),
        ({"a": ["x"], "b": 2}, "dict[str, list[str] | int]", True), ({"a": 2.5}, "dict[str, list[str] | int]", False),
        ({1: "x"}, "dict[str, str]", False), ({"a": {"b": 1}}, "dict[str, dict[str, int]]", True),
        (None, "dict[str, list[str] | int] | None", True), ({}, "dict[str, Any]", True), (1.5, "float", True),
    ],
)  # fmt: skip
def test_matches_reads_field_annotations(value, annotation, expected):
    from llm_collapse.utils.types import matches

    assert matches(value, annotation) is expected
