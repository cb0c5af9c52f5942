"""``llm-collapse list models|methods|tasks|corpora``: the names a run accepts, one line each (as ``lm_eval
--tasks list`` does), so nobody needs the source to find them."""

from __future__ import annotations

from collections.abc import Sequence

from llm_collapse.utils.commands import ArgumentParser, run_command, say

PROG = "llm-collapse list"
WHAT = ("models", "methods", "tasks", "corpora")


def _parser(prog: str) -> ArgumentParser:
    parser = ArgumentParser(
        prog=prog, description="List the models, methods, tasks or corpora a run accepts."
    )
    parser.add_argument("what", choices=WHAT, help="what to list")
    return parser


def main(argv: Sequence[str] | None = None, *, prog: str = PROG) -> int:
    """Prints one line per name; exit 2 (one line) for anything but the four choices."""
    args = _parser(prog).parse_args(argv)
    return run_command(lambda: _list(args.what))


def _list(what: str) -> int:
    lines = _lines(what)
    width = max(len(name) for name, _ in lines) + 2
    for name, text in lines:
        say(f"{name:<{width}}{text}".rstrip())
    return 0


def _lines(what: str) -> list[tuple[str, str]]:
    if what == "models":
        from llm_collapse.adapters import list_embedders, resolve_spec

        lines = [(name, resolve_spec(name)[0].description) for name in list_embedders()]
        return [
            *lines,
            ("echo:<model>", "echo embeddings of any causal decoder (name or path)"),
            ("st:<folder>", "a sentence-transformers folder (its pooling, max_seq_length and prompts)"),
            ("hf:<folder>", "a Hugging Face model folder (pooled as sentence-transformers would)"),
        ]
    if what == "methods":
        from llm_collapse.interventions.parse import method_usages

        return list(method_usages().values())
    if what == "tasks":
        from llm_collapse.tasks.registry import TASKS

        return [(name, spec.title) for name, spec in TASKS.items() if spec.runner is not None]
    from llm_collapse.data import CORPORA

    lines = [(name, CORPORA.get(name).description) for name in CORPORA.names()]
    return [*lines, ("folder:PATH", 'your own texts: .txt files, or .jsonl lines {"text", "id", "labels"}')]
