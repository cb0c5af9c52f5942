"""Embedder specs as data files (YAML or JSON): a new checkpoint without editing `llm_collapse.adapters.catalog`.

A file holds one mapping; only ``name`` and ``pooling`` are required (JSON takes the same keys)::

    name: my-qwen3                     # letters, digits, '.', '_', '-'; not an already registered name
    path: ./checkpoints/my-qwen3       # local model folder, relative to this file (or hub_id: org/model)
    architectures: [qwen3]             # accepted config.json model_type values (one string works too)
    query_template: "Instruct: {instruction}\\nQuery:{text}"
    document_template: "{text}"
    eos: exactly-one                   # tokenizer | exactly-one | as-text
    eos_token: "<|endoftext|>"         # the token eos appends (default: the tokenizer's EOS)
    pool_span: all                     # all | skip-bos | skip-instruction
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
      ``8192.0`` or ``"8192"`` is not an integer; ``true`` is not a string.
    - The file describes a template embedder (prompt template + EOS policy + pool span), the same
      `EmbedderSpec` / `TemplateFormat` the built-in specs use, so interventions, the prefix sweep, the cache and
      the report treat it like a built-in model. Echo on a local decoder needs no file (``echo:/path``).
    - The built-in specs stay in Python (`catalog.py`), where each field sits next to its model-card comment.
    - ``path`` is resolved against the file's folder and must exist when the file is read; ``--model-path`` /
      ``path=`` still override it, as for built-in models.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from llm_collapse.adapters.inputs import TemplateFormat
from llm_collapse.adapters.spec import ATTENTIONS, EmbedderSpec
from llm_collapse.errors import UserError
from llm_collapse.pooling import POOLINGS

EOS_POLICIES: tuple[str, ...] = ("tokenizer", "exactly-one", "as-text")
POOL_SPANS: tuple[str, ...] = ("all", "skip-bos", "skip-instruction")
ATTN_IMPLEMENTATIONS: tuple[str, ...] = (
    "sdpa", "eager", "banded", "chunked", "flash_attention_2", "flash_attention_3", "flex_attention",
)  # fmt: skip
SUFFIXES: tuple[str, ...] = (".yaml", ".yml", ".json")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_ALIAS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")  # hub ids ("org/model") are fine as aliases
_REQUIRED = ("name", "pooling")
_OPTIONAL = (
    "hub_id", "path", "architectures", "query_template", "document_template", "eos", "eos_token", "pool_span",
    "attention", "attn_implementation", "max_length", "trained_length", "default_instruction", "transformers",
    "description", "aliases",
)  # fmt: skip
KEYS: tuple[str, ...] = _REQUIRED + _OPTIONAL


class SpecError(UserError, ValueError):
    """An embedder spec that cannot be used; the message is one line (what, what is allowed, how to fix)."""


def load_spec_file(path: str | Path) -> EmbedderSpec:
    """Reads and validates one spec file (``.yaml``, ``.yml`` or ``.json``); raises a one-line `SpecError`."""
    file = Path(path).expanduser()
    if file.suffix.lower() not in SUFFIXES:
        raise SpecError(f"embedder spec {str(path)!r} must be a {', '.join(SUFFIXES)} file")
    if not file.is_file():
        raise SpecError(
            f"embedder spec {str(path)!r} does not exist (or is not a file); give a YAML or JSON file"
        )
    try:
        text = file.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(
            f"embedder spec {str(path)!r} is not UTF-8 text (byte {err.start}); save it as UTF-8"
        ) from None
    data = _parse(text, json_file=file.suffix.lower() == ".json", where=str(path))
    return spec_from_mapping(data, where=str(path), base_dir=file.resolve().parent)


def spec_from_mapping(data: object, *, where: str, base_dir: Path | None = None) -> EmbedderSpec:
    """Validates a spec mapping (a file's content, or a dict passed to `register_embedder`).

    Args:
        data: The mapping of spec keys (see the module docstring).
        where: What to name in error messages (the file, or ``register_embedder``).
        base_dir: Folder a relative ``path`` is resolved against (the file's; default the working directory).
    """
    if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
        raise SpecError(f"embedder spec {where}: must hold a mapping of key: value, e.g. 'name: my-model'")
    check = _Checker(where, dict(data))
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise SpecError(f"embedder spec {where}: unknown keys {unknown}; allowed: {', '.join(KEYS)}")
    for key in _REQUIRED:
        if key not in data:
            raise SpecError(
                f"embedder spec {where}: '{key}' is missing; add it (e.g. {key}: {_EXAMPLES[key]})"
            )
    name = check.pattern("name", _NAME, "letters, digits, '.', '_' or '-', starting with a letter or digit")
    fmt = TemplateFormat(
        query_template=check.template("query_template", "{text}"),
        document_template=check.template("document_template", "{text}"),
        eos=check.choice("eos", EOS_POLICIES, "tokenizer"),
        pool_span=check.choice("pool_span", POOL_SPANS, "all"),
        eos_token=check.text("eos_token"),
    )
    return EmbedderSpec(
        name=name,
        hub_id=check.text("hub_id"),
        source=check.source(base_dir),
        input_format=fmt,
        pooling=check.choice("pooling", POOLINGS, None),
        architectures=check.names("architectures", _NAME),
        attention=check.choice("attention", ATTENTIONS, "causal"),
        attn_implementation=check.choice("attn_implementation", ATTN_IMPLEMENTATIONS, "sdpa"),
        max_length=check.length("max_length"),
        trained_length=check.length("trained_length"),
        default_instruction=check.text("default_instruction"),
        transformers=check.specifier("transformers"),
        aliases=check.names("aliases", _ALIAS),
        description=check.text("description") or f"{name} (from {where})",
    )


_EXAMPLES = {"name": "my-model", "pooling": "last"}


def _parse(text: str, *, json_file: bool, where: str) -> object:
    if json_file:
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise SpecError(
                f"embedder spec {where!r} is not valid JSON at line {err.lineno}, column {err.colno}: {err.msg}"
            ) from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise SpecError(f"embedder spec {where!r} is not valid YAML{at}: {problem}") from None


class _Checker:
    """Reads one key at a time and raises `SpecError` naming the file, the key and the value."""

    def __init__(self, where: str, data: dict) -> None:
        self.where, self.data = where, data

    def fail(self, key: str, must: str) -> SpecError:
        return SpecError(f"embedder spec {self.where}: {key}: {self.data.get(key)!r} must be {must}")

    def text(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise self.fail(key, "a non-empty string (or null)")
        return value

    def pattern(self, key: str, regex: re.Pattern, what: str) -> str:
        value = self.data.get(key)
        if not isinstance(value, str) or not regex.fullmatch(value):
            raise self.fail(key, f"a string of {what}")
        return value

    def choice(self, key: str, allowed: tuple[str, ...], default: str | None) -> str:
        value = self.data.get(key, default)
        if value not in allowed:
            raise self.fail(key, f"one of {', '.join(allowed)}")
        return value

    def length(self, key: str) -> int | None:
        value = self.data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 2):
            raise self.fail(key, "an integer >= 2 (or null)")
        return value

    def names(self, key: str, regex: re.Pattern) -> tuple[str, ...]:
        value = self.data.get(key, [])
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(v, str) and regex.fullmatch(v) for v in values):
            raise self.fail(key, "a list of names (letters, digits, '.', '_', '-'), e.g. [qwen3]")
        return tuple(values)

    def template(self, key: str, default: str) -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str):
            raise self.fail(key, "a string with {text} once, e.g. 'Instruct: {instruction}\\nQuery: {text}'")
        try:
            parts = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(value) if f is not None]
        except ValueError as err:
            raise self.fail(key, f"a valid template ({err}; write a literal brace as {{{{ or }}}})") from None
        fields = [f for f, _, _ in parts]
        plain = all(not spec and conv is None for _, spec, conv in parts)
        if fields.count("text") != 1 or not set(fields) <= {"text", "instruction"} or not plain:
            raise self.fail(key, "a template with {text} exactly once and no field but {instruction}")
        return value

    def specifier(self, key: str) -> str:
        value = self.data.get(key, EmbedderSpec.transformers)
        try:
            SpecifierSet(value)
        except (InvalidSpecifier, TypeError):
            raise self.fail(key, "a version specifier, e.g. '>=5.19,<6'") from None
        return value

    def source(self, base_dir: Path | None) -> str:
        path = self.text("path")
        if path is None:
            return "hub"
        folder = Path(path).expanduser()
        if not folder.is_absolute():
            folder = (base_dir or Path.cwd()) / folder
        if not (folder / "config.json").is_file():
            raise self.fail("path", f"a model folder with a config.json ({folder} has none)")
        return f"path:{folder.resolve()}"
