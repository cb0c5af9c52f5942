from __future__ import annotations

import pytest

import llm_collapse as lc
from llm_collapse.adapters import resolve_spec
from llm_collapse.registry import Registry, UnknownNameError


def test_list_embedders_has_every_issue_name():
    assert {
        "mistral",
        "nv-embed",
        "bge-gemma2",
        "echo-mistral",
        "minilm",
        "gemma3-270m",
        "echo-gemma3-270m",
    } <= set(lc.list_embedders())


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("intfloat/e5-mistral-7b-instruct", "mistral"),
        ("E5-Mistral", "mistral"),
        ("nvidia/NV-Embed-v2", "nv-embed"),
        ("BAAI/bge-multilingual-gemma2", "bge-gemma2"),
        ("all-MiniLM-L6-v2", "minilm"),
    ],
)
def test_aliases_resolve(alias, canonical):
    assert resolve_spec(alias)[0].name == canonical


def test_unknown_name_is_one_line_with_suggestion_and_names():
    with pytest.raises(UnknownNameError) as info:
        resolve_spec("mistrl")
    message = str(info.value)
    assert "\n" not in message
    assert "Did you mean 'mistral'?" in message
    assert "nv-embed" in message and "minilm" in message


def test_echo_prefix_wraps_registered_decoder_hub_id_or_path(tmp_path):
    spec, path = resolve_spec("echo:gemma3-270m")
    assert spec.name == "echo:gemma3-270m" and spec.source.startswith("pypi:") and path is None
    assert type(spec.input_format).__name__ == "EchoFormat" and spec.pooling == "mean"
    spec, path = resolve_spec("echo:Qwen/Qwen2-0.5B")
    assert spec.hub_id == "Qwen/Qwen2-0.5B" and path is None
    spec, path = resolve_spec(f"echo:{tmp_path}")
    assert path == tmp_path and spec.hub_id is None


@pytest.mark.parametrize("name", ["echo:minilm", "echo:nv-embed", "echo:"])
def test_echo_refuses_non_decoders(name):
    with pytest.raises(ValueError):
        resolve_spec(name)


def test_registry_rejects_duplicate_alias():
    registry: Registry[int] = Registry("thing")
    registry.register("a", 1, aliases=("b",))
    with pytest.raises(ValueError, match="already registered"):
        registry.register("c", 2, aliases=("B",))
