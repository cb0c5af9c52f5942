"""`CompareConfig`'s command line: one flag per field (`add_arguments`) and the flags' words back into field
values (`cli_values`: comma lists, repeated ``KEY=VALUE`` flags, numbers), each problem one `ConfigError` line.

The YAML file and the defaults need none of this: `CompareConfig.from_sources` merges the values this returns
with them (flags > YAML > defaults).
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from llm_collapse.records.saved_embeddings import EMBEDDING_DTYPES
from llm_collapse.run.config import CompareConfig, ConfigError

_REPEATED_FLAGS = {
    "model_paths": ("--model-path", "NAME=PATH"),
    "controls": ("--control", "METHOD=CONTROL"),
    "margins": ("--margin", "METRIC=MARGIN"),
    "embedder_specs": ("--embedder-spec", "FILE"),
}
"""Mapping and list fields given one value per flag, the flag named in the singular."""


GROUPS: dict[str, tuple[str, ...]] = {
    "what to compare": ("models", "embedder_specs", "methods", "tasks", "corpus", "lengths"),
    "how models run": ("backend", "dtype", "device", "quant", "quants", "pooling", "model_paths", "batch_size"),
    "texts and sizes": ("max_per_bin", "design", "prefix_docs", "retrieval_docs", "retrieval_queries",
                        "retrieval_pool", "layerwise_per_bin", "label", "placed_filler", "placed_depths",
                        "placed_probes", "limit", "seed"),
    "paired comparisons": ("reference_model", "controls", "margins", "claims"),
    "output": ("save_embeddings", "out"),
}  # fmt: skip
"""The ``--help`` sections, each field in one (a test checks every field is placed)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per config field (default None, so unset flags fall through to YAML and defaults), in the
    ``--help`` sections of `GROUPS`."""
    sections = {title: parser.add_argument_group(title) for title in GROUPS}
    group_of = {name: sections[title] for title, names in GROUPS.items() for name in names}
    for f in fields(CompareConfig):
        if f.metadata.get("yaml_only"):
            continue
        group = group_of[f.name]
        flag = "--" + f.name.replace("_", "-")
        help_text = _help(f)
        if f.name in _REPEATED_FLAGS:
            repeated, metavar = _REPEATED_FLAGS[f.name]
            group.add_argument(repeated, dest=f.name, action="append", metavar=metavar, help=help_text)
        elif f.name == "quant":
            group.add_argument(flag, dest=f.name, help=help_text)
        elif f.name == "save_embeddings":
            group.add_argument(flag, nargs="?", const=EMBEDDING_DTYPES[0], metavar="DTYPE", help=help_text)
        elif f.type in ("int", "int | None"):
            group.add_argument(flag, type=int, help=help_text)
        else:
            group.add_argument(flag, help=help_text)


def _help(f) -> str:
    """The field's help, its choices where they live in a registry, and its default once: the field's
    ``default`` text, else its value (none for an unset mapping or list)."""
    text = f.metadata.get("help", "")
    if f.name == "corpus":  # the registry is read here, when a parser is built, not when this module loads
        from llm_collapse.data import CORPORA

        text += f": {', '.join(CORPORA.names())} or folder:PATH (your own .txt files or .jsonl lines)"
    default = f.metadata.get("default", _default_text(f))
    return f"{text} (default: {default})" if default else text


def _default_text(f) -> str:
    default = CompareConfig().__getattribute__(f.name)
    if default is None or default == {}:
        return ""
    return ",".join(map(str, default)) if isinstance(default, list) else str(default)


def cli_values(namespace: argparse.Namespace) -> dict:
    """Parses list- and mapping-valued flags; leaves unset flags as None."""
    values = {f.name: getattr(namespace, f.name, None) for f in fields(CompareConfig)}
    for name in ("models", "methods", "tasks", "quants", "placed_probes"):
        if values[name] is not None:
            values[name] = [x.strip() for x in values[name].split(",") if x.strip()]
    if values["lengths"] is not None:
        try:
            values["lengths"] = [int(x) for x in values["lengths"].split(",")]
        except ValueError:
            raise ConfigError(
                f"--lengths must be comma-separated integers, got {values['lengths']!r}"
            ) from None
    if values["placed_depths"] is not None:
        shape = "comma-separated numbers in [0, 1], e.g. 0,0.5,1"
        values["placed_depths"] = [
            _number(x, f"--placed-depths {values['placed_depths']}", shape)
            for x in values["placed_depths"].split(",")
        ]
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
