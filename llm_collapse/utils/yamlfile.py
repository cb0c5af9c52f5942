"""A user's YAML file read into a mapping; every problem is one `UserError` line naming the file, where and the fix.

Shared by everything that reads a user's YAML (the study's ``--questions``, ``compare``/``estimate --config``,
embedder spec files). Decisions:

* ``yaml.safe_load`` only: a tag that would build a Python object (``!!python/object:os.system``) is refused,
  never run.
* The bytes are decoded as UTF-8 here, not by PyYAML, so a bad byte is reported by its offset with the fix
  (save the file as UTF-8) instead of PyYAML's multi-line reader error.
* A string holding a lone surrogate (``"\\ud800"`` in a double-quoted scalar: YAML accepts the escape) is
  refused here too, since it would fail much later, when text is tokenized or written.
* An empty file (or one of comments only) is an empty mapping.
* A key given twice in one mapping is refused with both lines (PyYAML would keep the last silently).
* A ``.json`` file is read as JSON (JSON's own errors and positions; a key given twice is refused there too),
  under the same rules.
"""

from __future__ import annotations

import functools
import json
import reprlib
from pathlib import Path
from typing import Any

from llm_collapse.errors import UserError

__all__ = ["read_yaml_mapping", "type_name"]


def read_yaml_mapping(
    path: str | Path, *, what: str, example: str, error: type[UserError] = UserError
) -> dict[str, Any]:
    """The file's top-level mapping (string keys); anything else raises ``error`` with a one-line message.

    Args:
        path: The YAML file (one named ``*.json`` is read as JSON).
        what: How messages name the file, e.g. ``"--config 'run.yaml'"``.
        example: What the mapping holds, for the message when the top level is not one, e.g.
            ``"option: value, e.g. 'models: [minilm]'"``.
        error: The `UserError` subclass raised.

    Returns:
        The mapping (``{}`` for an empty file).
    """
    file = Path(path)
    json_file = file.suffix.lower() == ".json"
    if not file.is_file():
        kind = "JSON" if json_file else "YAML"
        raise error(f"{what} does not exist (or is not a file); give the path of a {kind} file")
    try:
        raw = file.read_bytes()
    except OSError as err:
        raise error(f"{what} cannot be read ({err.strerror or err}); check its permissions") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(f"{what} is not UTF-8 text (byte {err.start}); save it as UTF-8") from None
    try:
        data = _load_json(text, what, error) if json_file else _load_yaml(text, what, error)
    except _DuplicateKey as err:
        raise error(f"{what} {err.problem}; keep one of them") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise error(f"{what} must hold a mapping of {example}")
    if (bad := _lone_surrogate(data)) is not None:
        raise error(
            f"{what} holds a lone surrogate escape ({bad!r}), which is not valid Unicode; text must be "
            "valid Unicode: remove the escape or write the character itself"
        )
    return data


def _load_yaml(text: str, what: str, error: type[UserError]) -> Any:
    import yaml

    try:
        return yaml.load(text, Loader=_loader())  # noqa: S506 - a SafeLoader that also refuses duplicate keys
    except yaml.reader.ReaderError as err:
        line, column = _line_column(text, err.position)
        raise error(
            f"{what} holds a character YAML does not allow (#x{err.character:x}) at line {line}, column "
            f"{column}; remove it"
        ) from None
    except yaml.constructor.ConstructorError as err:
        raise error(
            f"{what} is not plain YAML{_where(err)}: {err.problem}; only mappings, lists, strings, numbers, "
            "booleans and null are read (no !!python tags)"
        ) from None
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or type(err).__name__
        context = getattr(err, "context", None)  # "while parsing a flow sequence", ...
        problem = f"{context}, {problem}" if context else problem
        raise error(f"{what} is not valid YAML{_where(err)}: {problem}") from None


def _load_json(text: str, what: str, error: type[UserError]) -> Any:
    def unique(pairs: list[tuple[str, Any]]) -> dict:
        data: dict = {}
        for key, value in pairs:
            if key in data:
                raise _DuplicateKey(f"sets {key!r} twice")
            data[key] = value
        return data

    try:
        return json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as err:
        raise error(f"{what} is not valid JSON at line {err.lineno}, column {err.colno}: {err.msg}") from None


class _DuplicateKey(Exception):
    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


@functools.cache
def _loader() -> type:
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last silently)."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen: dict = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark.line + 1)
                except TypeError:  # an unhashable key: SafeLoader's own error says so
                    break
                if first != key_node.start_mark.line + 1:
                    raise _DuplicateKey(
                        f"sets {key!r} twice (lines {first} and {key_node.start_mark.line + 1})"
                    )
            return super().construct_mapping(node, deep=deep)

    return Loader


def type_name(value: object) -> str:
    """YAML's name for a value's type in messages (``null`` for None, else the Python type)."""
    return "null" if value is None else type(value).__name__


def _where(err) -> str:
    mark = getattr(err, "problem_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _line_column(text: str, position: int) -> tuple[int, int]:
    before = text[:position]
    return before.count("\n") + 1, position - (before.rfind("\n") + 1) + 1


def _lone_surrogate(data: object) -> str | None:
    """A lone surrogate found in any string (key or value) of ``data``, or None.

    Walked with a stack and a seen set: YAML anchors can make a list that contains itself.
    """
    stack, seen = [data], set()
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as err:
                return value[err.start : err.end]
        elif isinstance(value, (dict, list, set)) and id(value) not in seen:
            seen.add(id(value))
            stack.extend([*value.keys(), *value.values()] if isinstance(value, dict) else list(value))
    return None


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict = 2, 4, 4, 4
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 60, 60, 40


def short_repr(value: object) -> str:
    """``repr`` of a value read from a user's file, bounded for a one-line refusal: nested and long values are cut
    (``[[...], ...]``), so a YAML alias bomb (a small file that expands to gigabytes) is quoted in a few dozen
    characters without being expanded."""
    return _SHORT.repr(value)
