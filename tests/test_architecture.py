"""The package's contracts stay explicit: no module-level import cycles, no private names imported across
modules, no ``getattr`` probes of backends, no dispatch on class names (issue 12)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "llm_collapse"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _module_level_imports(name: str, path: Path) -> set[str]:
    """llm_collapse modules imported at module level (not inside functions): the edges of the import graph."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.add(child if child in MODULES else base)
    # importing a module runs its packages' __init__ first: those are edges too
    for module in list(found):
        parts = module.split(".")
        found.update(".".join(parts[:i]) for i in range(2, len(parts)))
    return {m for m in found if m in MODULES and m != name}


def test_no_module_level_import_cycles():
    graph = {name: _module_level_imports(name, path) for name, path in MODULES.items()}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if node.startswith(nxt + "."):
                continue  # a module importing its own package: how packages load
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def _sources() -> list[tuple[str, str]]:
    return [(name, path.read_text()) for name, path in MODULES.items()]


@pytest.mark.parametrize(
    ("pattern", "what"),
    [
        (r"getattr\((self\.)?(hf|backend|embedder\.backend)\b", "a getattr probe of a backend"),
        (r"type\([^)]*\)\.__name__\s*(==|!=|in)", "dispatch on a class name"),
        (r"\"[A-Z][A-Za-z]+\" (not )?in str\(err", "dispatch on an error message"),
    ],
)
def test_no_implicit_contracts(pattern, what):
    hits = [
        f"{name}:{number}: {line.strip()}"
        for name, text in _sources()
        for number, line in enumerate(text.splitlines(), start=1)
        if re.search(pattern, line)
    ]
    assert not hits, f"{what}:\n" + "\n".join(hits)


def test_no_private_names_imported_across_modules():
    hits = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("llm_collapse"):
                private = [
                    a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")
                ]
                if private:
                    hits.append(f"{name}: from {node.module} import {', '.join(private)}")
    assert not hits, "\n".join(hits)
