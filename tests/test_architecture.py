"""The package's contracts stay explicit: no import cycles (module- or function-level), no private names
imported across modules, no ``getattr`` probes of backends, no dispatch on class names (issues 12, 42)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "llm_collapse"


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere: at module level and inside functions (a
    function-level import is a cycle too, only one that fails later, when the function first runs)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.add(child if child in modules else base)
    # importing a module runs its packages' __init__ first: those are edges too
    for module in list(found):
        parts = module.split(".")
        found.update(".".join(parts[:i]) for i in range(2, len(parts)))
    return {m for m in found if m in modules and m != name}


def import_cycles(package: Path = PACKAGE) -> list[list[str]]:
    """Every import cycle among the package's modules (depth-first; a module importing its own package
    is how packages load, not a cycle)."""
    modules = _modules(package)
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if node.startswith(nxt + "."):
                continue
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    return cycles


def test_no_import_cycles():
    cycles = import_cycles()
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_a_cycle_through_function_level_imports_is_found(tmp_path):
    """The check above would miss what it exists for if it read module-level imports only."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pkg.sub.b import g\n    return g\n")
    (package / "sub" / "b.py").write_text("def g():\n    from pkg import a\n    return a\n")
    assert import_cycles(package) == [["pkg.a", "pkg.sub.b", "pkg.a"]]
    (package / "sub" / "b.py").write_text("def g():\n    return 1\n")
    assert import_cycles(package) == []


MODEL_LAYERS = (
    "embedder",
    "load",
    "backends",
    "adapters",
    "interventions",
    "encoding",
    "models.nv_embed",
)


@pytest.mark.parametrize(
    ("lower", "upper"),
    [("llm_collapse.cost", "llm_collapse.run"), ("llm_collapse.cost", "llm_collapse.bench"),
     ("llm_collapse.run", "llm_collapse.bench"), ("llm_collapse.tasks", "llm_collapse.run"),
     ("llm_collapse.tasks", "llm_collapse.cost"),
     ("llm_collapse.records", "llm_collapse.run"), ("llm_collapse.reporting", "llm_collapse.run"),
     ("llm_collapse.bench", "llm_collapse.cli"), ("llm_collapse.encoding", "llm_collapse.embedder"),
     ("llm_collapse.interventions", "llm_collapse.encoding"),
     *(("llm_collapse.metrics", f"llm_collapse.{layer}") for layer in (*MODEL_LAYERS, "tasks", "run"))],
)  # fmt: skip
def test_layers_import_only_downwards(lower, upper):
    """cost/ lies below both run/ and bench/; run/ does not reach into bench/; tasks see a cell and its settings,
    never the run; the run's files (records/) are below the run and its reports; metrics are pure arrays and
    import nothing that loads or drives a model (any import, any level); the encoding road takes the embedder as
    an argument and never imports it, and an intervention says how an input is read, never runs the road."""
    hits = [
        f"{name} imports {target}"
        for name, path in MODULES.items()
        if name == lower or name.startswith(lower + ".")
        for target in sorted(_imports(name, path, MODULES))
        if target == upper or target.startswith(upper + ".")
    ]
    assert not hits, "\n".join(hits)


def _folder(module: str) -> str:
    """The folder (or top-level module) a module belongs to: ``llm_collapse.run.config`` -> ``run``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_no_two_folders_import_each_other():
    """Layers, not tangles: where folder A imports folder B (any module, any level), B imports nothing of A."""
    edges: dict[tuple[str, str], str] = {}
    for name, path in MODULES.items():
        for target in _imports(name, path, MODULES):
            pair = (_folder(name), _folder(target))
            if pair[0] != pair[1] and target != "llm_collapse":
                edges.setdefault(pair, f"{name} imports {target}")
    two_way = [f"{edges[a, b]}; {edges[b, a]}" for a, b in sorted(edges) if a < b and (b, a) in edges]
    assert not two_way, "\n".join(two_way)


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


def test_test_modules_have_unique_basenames():
    """The tests folders have no __init__.py, so pytest imports each test module by its basename: two of one
    name cannot be collected in one session (the second is an import-file-mismatch error)."""
    names = [path.name for path in (PACKAGE.parent / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
