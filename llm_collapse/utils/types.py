"""Whether a value read from a user's or a run's file has the type a dataclass field declares.

The one check behind `CompareConfig`'s YAML values (`llm_collapse.run.config.check_types`), ``run.json``'s
typed fields (`llm_collapse.records.record`) and embedder spec files (`llm_collapse.adapters.spec_file`): field
annotations are strings (``from __future__ import annotations``), so it reads those. Strict on purpose: a bool is not an int, ``"8"`` is not an int.
"""

from __future__ import annotations

from typing import Any


def matches(value: Any, annotation: str) -> bool:
    """Whether ``value`` has the type an annotation names: ``str``, ``int`` (not a bool), ``bool``, ``float``
    (an int too), ``dict...``, ``list[str]``, ``list[int]``, ``list[float]`` (ints too), ``list[dict]``,
    ``Any``, and unions of them with ``| None``."""
    parts = _top_level_union(annotation)
    if len(parts) > 1:
        return any(matches(value, part) for part in parts)
    checks = {
        "None": lambda v: v is None,
        "Any": lambda v: True,
        "str": lambda v: isinstance(v, str),
        "bool": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "list[str]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "list[int]": lambda v: (
            isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
        ),
        "list[float]": lambda v: (
            isinstance(v, list) and all(isinstance(x, int | float) and not isinstance(x, bool) for x in v)
        ),
        "list[dict]": lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v),
    }
    if annotation in checks:
        return checks[annotation](value)
    if annotation.startswith("dict"):
        if not isinstance(value, dict):
            return False
        if annotation.startswith("dict[str, "):
            inner = annotation.removeprefix("dict[str, ").removesuffix("]")
            return all(isinstance(k, str) and matches(v, inner) for k, v in value.items())
        return True
    raise ValueError(f"matches: unsupported annotation {annotation!r}")


def _top_level_union(annotation: str) -> list[str]:
    """``"dict[str, list[str] | int] | None"`` -> ``["dict[str, list[str] | int]", "None"]``."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(annotation):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth == 0 and annotation.startswith(" | ", i):
            parts.append(annotation[start:i])
            start = i + 3
    return [*parts, annotation[start:]]
