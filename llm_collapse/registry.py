"""A small name -> object registry with aliases and "did you mean" errors.

Used for embedders now and for interventions, corpora and metrics later. Lookups are case-insensitive;
duplicate names or aliases are a programming error and raise at registration time.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import Generic, TypeVar

from llm_collapse.errors import UserError

T = TypeVar("T")


class UnknownNameError(UserError, KeyError):
    """Raised for a name that is not registered; ``str()`` is the plain one-line message."""

    def __str__(self) -> str:
        return str(self.args[0])


class Registry(Generic[T]):
    """Maps canonical names (and aliases) to registered objects.

    Args:
        kind: What is registered ("embedder", "intervention", ...); used in error messages.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._aliases: dict[str, str] = {}

    def register(self, name: str, item: T, *, aliases: tuple[str, ...] = ()) -> T:
        for key in (name, *aliases):
            if key.lower() in self._aliases:
                raise ValueError(f"{self.kind} name {key!r} is already registered")
        self._items[name] = item
        for key in (name, *aliases):
            self._aliases[key.lower()] = name
        return item

    def canonical(self, name: str) -> str:
        """The canonical name for ``name`` or an alias of it; raises UnknownNameError with suggestions."""
        try:
            return self._aliases[name.lower()]
        except KeyError:
            raise UnknownNameError(self.unknown_message(name)) from None

    def get(self, name: str) -> T:
        return self._items[self.canonical(name)]

    def unknown_message(self, name: str) -> str:
        close = difflib.get_close_matches(name.lower(), list(self._aliases), n=1)
        hint = f" Did you mean {self._aliases[close[0]]!r}?" if close else ""
        return f"Unknown {self.kind} {name!r}.{hint} Available: {', '.join(self.names())}."

    def names(self) -> list[str]:
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._aliases

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)
