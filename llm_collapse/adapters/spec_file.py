"""Embedder specs as data files (YAML or JSON): a new checkpoint without editing `llm_collapse.adapters.catalog`.

A file holds one mapping; only ``name`` and ``pooling`` are required, ``pooling`` not when ``path`` is a
sentence-transformers folder (see Decisions; JSON takes the same keys)::

    name: my-qwen3                     # letters, digits, '.', '_', '-'; not an already registered name
    path: ./checkpoints/my-qwen3       # local model folder, relative to this file (or hub_id: org/model)
    architectures: [qwen3]             # accepted config.json model_type values (one string works too)
    query_template: "Instruct: {instruction}\\nQuery:{text}"
    document_template: "{text}"
    eos: exactly-one                   # tokenizer | exactly-one | as-text
    eos_token: "<|endoftext|>"         # the token eos appends (default: the tokenizer's EOS)
    pool_span: all                     # all | skip-bos | skip-instruction | first
    pooling: last                      # last | mean
    attention: causal                  # causal | bidirectional
    attn_implementation: sdpa          # sdpa | eager | banded | chunked | flash_attention_2 | flex_attention
    max_length: 8192                   # default token cap per text (null: the model's positions)
    trained_length: 32768              # where RoPE baselines extend from (null: max_position_embeddings)
    default_instruction: Given a web search query, retrieve relevant passages that answer the query
    description: one line for list_embedders()
    aliases: [my-qwen]

Decisions
    - Strict, like every other input: unknown keys, wrong types and values outside the allowed sets are refused
      with one `SpecError` line naming the file, the key, the value, what is allowed and how to fix it. YAML's
      ``8192.0`` or ``"8192"`` is not an integer; ``true`` is not a string. Types are checked by the package's
      one type check (`llm_collapse.utils.types.matches`), the file is read by its one YAML/JSON reader
      (`llm_collapse.utils.yamlfile`), and each key's rule (type, default, what is allowed) is one row of `_RULES`.
    - The file describes a template embedder (prompt template + EOS policy + pool span), the same
      `EmbedderSpec` / `TemplateFormat` the built-in specs use, so interventions, the prefix sweep, the cache and
      the report treat it like a built-in model. Echo on a local decoder needs no file (``echo:/path``).
    - The built-in specs stay in Python (`catalog.py`), where each field sits next to its model-card comment.
    - ``path`` is resolved against the file's folder and must exist when the file is read; ``--model-path`` /
      ``path=`` still override it, as for built-in models.
    - A ``path`` that is a sentence-transformers folder (it has ``modules.json``) supplies every key the file
      leaves out: pooling and pool span, ``max_length`` (``max_seq_length``) and the prompts as templates, and
      ``path`` becomes its transformer folder (`llm_collapse.adapters.folder.st_keys`; ``pooling`` is then not
      required). Keys the file gives win. ``st:PATH`` is the same without a file.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from llm_collapse.adapters.folder import st_keys
from llm_collapse.adapters.inputs import TemplateFormat
from llm_collapse.adapters.spec import ATTENTIONS, POOLINGS, EmbedderSpec
from llm_collapse.errors import UserError
from llm_collapse.utils.types import matches
from llm_collapse.utils.yamlfile import read_yaml_mapping, short_repr

EOS_POLICIES: tuple[str, ...] = ("tokenizer", "exactly-one", "as-text")
POOL_SPANS: tuple[str, ...] = ("all", "skip-bos", "skip-instruction", "first")
ATTN_IMPLEMENTATIONS: tuple[str, ...] = (
    "sdpa", "eager", "banded", "chunked", "flash_attention_2", "flash_attention_3", "flex_attention",
)  # fmt: skip
SUFFIXES: tuple[str, ...] = (".yaml", ".yml", ".json")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_ALIAS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")  # hub ids ("org/model") are fine as aliases
_REQUIRED = ("name", "pooling")
_EXAMPLES = {"name": "my-model", "pooling": "last"}


class SpecError(UserError, ValueError):
    """An embedder spec that cannot be used; the message is one line (what, what is allowed, how to fix)."""


def _one_of(allowed: tuple[str, ...]) -> tuple[str, Callable[[Any], bool]]:
    return f"one of {', '.join(allowed)}", lambda value: value in allowed


def _names(regex: re.Pattern) -> Callable[[Any], bool]:
    return lambda value: all(regex.fullmatch(v) for v in ([value] if isinstance(value, str) else value))


def _is_specifier(value: str) -> bool:
    try:
        SpecifierSet(value)
    except InvalidSpecifier:
        return False
    return True


def _nonblank(value: str | None) -> bool:
    return value is None or bool(value.strip())


def _at_least_2(value: int | None) -> bool:
    return value is None or value >= 2


_TEXT = ("a non-empty string (or null)", _nonblank)
_LENGTH = ("an integer >= 2 (or null)", _at_least_2)
_TEMPLATE = ("a string with {text} once, e.g. 'Instruct: {instruction}\\nQuery: {text}'", None)
_RULES: dict[str, tuple[str, Any, str, Callable[[Any], bool] | None]] = {
    # key: (type, checked by `matches`; default; what a value must be; what else it must pass)
    "name": ("str", None, "a string of letters, digits, '.', '_' or '-', starting with a letter or digit",
             _NAME.fullmatch),
    "hub_id": ("str | None", None, *_TEXT),
    "path": ("str | None", None, *_TEXT),
    "architectures": ("list[str] | str", [], "a list of names (letters, digits, '.', '_', '-'), e.g. [qwen3]",
                      _names(_NAME)),
    "query_template": ("str", "{text}", *_TEMPLATE),
    "document_template": ("str", "{text}", *_TEMPLATE),
    "eos": ("str", "tokenizer", *_one_of(EOS_POLICIES)),
    "eos_token": ("str | None", None, *_TEXT),
    "pool_span": ("str", "all", *_one_of(POOL_SPANS)),
    "pooling": ("str", None, *_one_of(POOLINGS)),
    "attention": ("str", "causal", *_one_of(ATTENTIONS)),
    "attn_implementation": ("str", "sdpa", *_one_of(ATTN_IMPLEMENTATIONS)),
    "max_length": ("int | None", None, *_LENGTH),
    "trained_length": ("int | None", None, *_LENGTH),
    "default_instruction": ("str | None", None, *_TEXT),
    "transformers": ("str", EmbedderSpec.transformers, "a version specifier, e.g. '>=5.19,<6'", _is_specifier),
    "description": ("str | None", None, *_TEXT),
    "aliases": ("list[str] | str", [], "a list of names (letters, digits, '.', '_', '-', '/'), e.g. [org/model]",
                _names(_ALIAS)),
}  # fmt: skip
KEYS: tuple[str, ...] = tuple(_RULES)


def load_spec_file(path: str | Path) -> EmbedderSpec:
    """Reads and validates one spec file (``.yaml``, ``.yml`` or ``.json``); raises a one-line `SpecError`."""
    file = Path(path).expanduser()
    if file.suffix.lower() not in SUFFIXES:
        raise SpecError(f"embedder spec {str(path)!r} must be a {', '.join(SUFFIXES)} file")
    data = read_yaml_mapping(
        file,
        what=f"embedder spec {str(path)!r}",
        example="key: value, e.g. 'name: my-model'",
        error=SpecError,
    )
    return spec_from_mapping(data, where=str(path), base_dir=file.resolve().parent)


def spec_from_mapping(
    data: object, *, where: str, base_dir: Path | None = None, read_folder: bool = True
) -> EmbedderSpec:
    """Validates a spec mapping (a file's content, or a dict passed to `register_embedder`).

    Args:
        data: The mapping of spec keys (see the module docstring).
        where: What to name in error messages (the file, or ``register_embedder``).
        base_dir: Folder a relative ``path`` is resolved against (the file's; default the working directory).
        read_folder: Fill the keys ``data`` leaves out from a sentence-transformers ``path`` (False: ``data`` is
            complete, as `llm_collapse.adapters.folder_spec` builds it).
    """
    if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
        raise SpecError(f"embedder spec {where}: must hold a mapping of key: value, e.g. 'name: my-model'")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise SpecError(f"embedder spec {where}: unknown keys {unknown}; allowed: {', '.join(KEYS)}")
    if read_folder:
        data = _with_folder_defaults(data, base_dir)
    for key in _REQUIRED:
        if key not in data:
            raise SpecError(
                f"embedder spec {where}: '{key}' is missing; add it (e.g. {key}: {_EXAMPLES[key]})"
            )
    values = {}
    for key, (annotation, default, must, test) in _RULES.items():
        value = data.get(key, default)
        if not matches(value, annotation) or (test is not None and not test(value)):
            raise _wrong(where, key, value, must)
        values[key] = value
    for key in ("query_template", "document_template"):
        if (must := _template_problem(values[key])) is not None:
            raise _wrong(where, key, values[key], must)
    return EmbedderSpec(
        **{key: values[key] for key in _AS_IS},
        source=_source(values["path"], base_dir, where),
        input_format=TemplateFormat(**{key: values[key] for key in _FORMAT}),
        architectures=_listed(values["architectures"]),
        aliases=_listed(values["aliases"]),
        description=values["description"] or f"{values['name']} (from {where})",
    )


_AS_IS = ("name", "hub_id", "pooling", "attention", "attn_implementation", "max_length", "trained_length",
          "default_instruction", "transformers")  # fmt: skip
"""Keys that are `EmbedderSpec` fields of the same name and value."""
_FORMAT = ("query_template", "document_template", "eos", "pool_span", "eos_token")
"""Keys that are `TemplateFormat` fields of the same name and value."""


def _with_folder_defaults(data: Mapping, base_dir: Path | None) -> Mapping:
    """``data`` with the keys it leaves out read from ``path`` when that is a sentence-transformers folder."""
    path = data.get("path")
    if not isinstance(path, str) or not path.strip():
        return data
    folder = Path(path).expanduser()
    if not folder.is_absolute():
        folder = (base_dir or Path.cwd()) / folder
    if not (folder / "modules.json").is_file():
        return data
    keys = st_keys(folder)
    return {**keys, **data, "path": keys["path"]}


def _listed(value: str | list[str]) -> tuple[str, ...]:
    """One name (a string) or a list of names, as a tuple."""
    return (value,) if isinstance(value, str) else tuple(value)


def _wrong(where: str, key: str, value: object, must: str) -> SpecError:
    return SpecError(f"embedder spec {where}: {key}: {short_repr(value)} must be {must}")


def _template_problem(template: str) -> str | None:
    """What a template must be when it is not a plain one with ``{text}`` once (else None)."""
    try:
        parts = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(template) if f is not None]
    except ValueError as err:
        return f"a valid template ({err}; write a literal brace as {{{{ or }}}})"
    fields = [f for f, _, _ in parts]
    plain = all(not spec and conv is None for _, spec, conv in parts)
    if fields.count("text") != 1 or not set(fields) <= {"text", "instruction"} or not plain:
        return "a template with {text} exactly once and no field but {instruction}"
    return None


def _source(path: str | None, base_dir: Path | None, where: str) -> str:
    """``"hub"``, or ``"path:<folder>"`` for ``path`` resolved against ``base_dir``; the folder must hold a model."""
    if path is None:
        return "hub"
    folder = Path(path).expanduser()
    if not folder.is_absolute():
        folder = (base_dir or Path.cwd()) / folder
    if not (folder / "config.json").is_file():
        raise _wrong(where, "path", path, f"a model folder with a config.json ({folder} has none)")
    return f"path:{folder.resolve()}"
