"""`CompareConfig`'s command line: one flag per field and per registered task option (`add_arguments`), and the
flags' words back into values (`cli_values`: comma lists, repeated ``KEY=VALUE`` flags, numbers), each problem
one `ConfigError` line.

A task's options get a ``--help`` section of their own, generated from their `Options` class when the parser is
built, so a task registered before that (from outside the package too) has its flags there. The YAML file and
the defaults need none of this: `CompareConfig.from_sources` merges the values this returns with them (flags >
YAML > defaults).
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from llm_collapse.records.saved_embeddings import EMBEDDING_DTYPES
from llm_collapse.run.config import CompareConfig, ConfigError
from llm_collapse.tasks.registry import TASKS, DeclaredOption, option_fields

_REPEATED_FLAGS = {
    "model_paths": ("--model-path", "NAME=PATH"),
    "controls": ("--control", "METHOD=CONTROL"),
    "margins": ("--margin", "METRIC=MARGIN"),
    "embedder_specs": ("--embedder-spec", "FILE"),
}
"""Mapping and list fields given one value per flag, the flag named in the singular."""


GROUPS: dict[str, tuple[str, ...]] = {
    "what to compare": ("models", "embedder_specs", "methods", "tasks", "corpus", "lengths"),
    "how models run": ("backend", "dtype", "device", "quant", "pooling", "model_paths", "batch_size"),
    "texts and sizes": ("max_per_bin", "design", "prefix_docs", "limit", "seed"),
    "paired comparisons": ("reference_model", "controls", "margins", "claims"),
    "output": ("save_embeddings", "out"),
}  # fmt: skip
"""The ``--help`` sections of the run's fields, each field in one (a test checks every field is placed); the
tasks' options follow, a section per `Options` class (`task_sections`)."""


def task_sections() -> dict[str, list[DeclaredOption]]:
    """The task options' ``--help`` sections: one per `Options` class, in registry order, titled by its ``title``
    and the tasks that have it; an option several classes declare (``label``) sits in its first's."""
    sections: dict[str, list[DeclaredOption]] = {}
    for option in option_fields().values():
        owner = option.classes[0]
        tasks = [name for name, task in TASKS.items() if task.options is owner]
        sections.setdefault(f"{owner.title} (--tasks {', '.join(tasks)})", []).append(option)
    return sections


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per config field and task option (default None, so unset flags fall through to YAML and
    defaults), in the ``--help`` sections of `GROUPS`, then `task_sections`."""
    sections = {title: parser.add_argument_group(title) for title in GROUPS}
    group_of = {name: sections[title] for title, names in GROUPS.items() for name in names}
    for f in fields(CompareConfig):
        if f.metadata.get("yaml_only"):
            continue
        _add(group_of[f.name], f, _help(f))
    for title, options in task_sections().items():
        group = parser.add_argument_group(title)
        for option in options:
            _add(group, option.field, _help(option.field, option.default()))


def _add(group, f, help_text: str) -> None:
    """The flag of field ``f``: repeated for the mappings and lists of `_REPEATED_FLAGS`, an int where the field is
    one, else the words as given (`cli_values` parses them)."""
    flag = "--" + f.name.replace("_", "-")
    if f.name in _REPEATED_FLAGS:
        repeated, metavar = _REPEATED_FLAGS[f.name]
        group.add_argument(repeated, dest=f.name, action="append", metavar=metavar, help=help_text)
    elif f.name == "save_embeddings":
        group.add_argument(flag, nargs="?", const=EMBEDDING_DTYPES[0], metavar="DTYPE", help=help_text)
    elif f.type in ("int", "int | None"):
        group.add_argument(flag, type=int, help=help_text)
    else:
        group.add_argument(flag, help=help_text)


def _help(f, default: object = None) -> str:
    """The field's help, its choices where they live in a registry, and its default once: the field's
    ``default`` text, else its value (``default``, or the config's; none for an unset mapping or list)."""
    text = f.metadata.get("help", "")
    if f.name == "corpus":  # the registries are read here, when a parser is built, not when this module loads
        from llm_collapse.data import CORPORA

        text += f": {', '.join(CORPORA.names())} or folder:PATH (your own .txt files or .jsonl lines)"
    if f.name == "tasks":
        text += f", of {', '.join(TASKS)}"
    if default is None and f.name in _CORE:
        default = getattr(CompareConfig(), f.name)
    shown = f.metadata.get("default") or _default_text(default)
    return f"{text} (default: {shown})" if shown else text


_CORE = {f.name for f in fields(CompareConfig)}


def _default_text(default: object) -> str:
    if default is None or default == {}:
        return ""
    return ",".join(map(str, default)) if isinstance(default, list | dict) else str(default)


def cli_values(namespace: argparse.Namespace) -> dict:
    """Parses list- and number-valued flags by their field's type and the repeated ``KEY=VALUE`` flags; leaves
    unset flags as None."""
    types = {f.name: f.type for f in fields(CompareConfig)} | {
        n: o.field.type for n, o in option_fields().items()
    }
    values = {name: getattr(namespace, name, None) for name in types}
    for name, kind in types.items():
        text, flag = values[name], "--" + name.replace("_", "-")
        if text is None or name in _REPEATED_FLAGS:
            continue
        if name == "tasks" or kind in ("list[str]", "list[str] | None"):
            values[name] = [x.strip() for x in text.split(",") if x.strip()]
        elif kind == "list[int]":
            try:
                values[name] = [int(x) for x in text.split(",")]
            except ValueError:
                raise ConfigError(f"{flag} must be comma-separated integers, got {text!r}") from None
        elif kind in ("list[float]", "list[float] | None"):
            shape = "comma-separated numbers, e.g. 0,0.5,1"
            values[name] = [_number(x, f"{flag} {text}", shape) for x in text.split(",")]
    if values["model_paths"] is not None:
        values["model_paths"] = _pairs(
            values["model_paths"], "--model-path", "NAME=PATH, e.g. mistral=/models/e5"
        )
    if values["controls"] is not None:
        values["controls"] = _pairs(
            values["controls"], "--control", "METHOD=CONTROL, e.g. yarn:8=tempscale:0.68534:full_attention"
        )
    if values["margins"] is not None:
        shape = "METRIC=MARGIN, e.g. acc@1=0.05"
        values["margins"] = {
            metric: _number(text, f"--margin {metric}={text}", shape)
            for metric, text in _pairs(values["margins"], "--margin", shape).items()
        }
    return values


def _number(text: str, where: str, shape: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{where}: {text!r} is not a number; give {shape}") from None


def _pairs(items: list[str], flag: str, shape: str) -> dict[str, str]:
    """``KEY=VALUE`` flags (repeated) -> a mapping; a malformed or repeated key is one `ConfigError` line."""
    pairs: dict[str, str] = {}
    for item in items:
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not key or not value:
            raise ConfigError(f"{flag} {item!r} must look like {shape}")
        if key in pairs:
            raise ConfigError(f"{flag} names {key!r} twice ({pairs[key]!r} and {value!r}); give it once")
        pairs[key] = value
    return pairs
