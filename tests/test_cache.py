"""The on-disk embedding cache: keys, hits, resume after a crash, corrupt shards, atomic writes."""

from __future__ import annotations

import logging
import os
import shutil

import numpy as np
import pytest

import llm_collapse
from llm_collapse import cache as cache_mod
from llm_collapse.cache import (
    EmbeddingCache,
    cache_for,
    cache_key,
    encode_cached,
    key_digest,
    text_hash,
)

WORDS = "the quick brown fox jumps over a lazy dog while seven old owls watch from the barn".split()
# 17 distinct texts of different lengths: with batch_size=3 that is 6 batches.
TEXTS = [" ".join(WORDS[(i * 3) % len(WORDS) :] + WORDS[: (i * 5) % 11]) + f" #{i}" for i in range(17)]
BATCH = 3


def _load(path, **kwargs):
    return llm_collapse.load_embedder("mistral", path=path, **{"dtype": "fp32", **kwargs})


@pytest.fixture
def embedder(tiny_e5_dir):
    return _load(tiny_e5_dir)


def _count_rows(monkeypatch, embedder, *, fail_after: int | None = None) -> list[int]:
    """Wraps ``backend.forward``; returns the list of batch sizes it saw (raises after ``fail_after`` calls)."""
    real = embedder.backend.forward
    rows: list[int] = []

    def forward(input_ids, attention_mask, **kwargs):
        if fail_after is not None and len(rows) >= fail_after:
            raise RuntimeError("simulated crash")
        rows.append(int(input_ids.shape[0]))
        return real(input_ids, attention_mask, **kwargs)

    monkeypatch.setattr(embedder.backend, "forward", forward)
    return rows


def _shard_files(cache: EmbeddingCache) -> list[str]:
    return sorted(p.name for p in cache.shard_dir.iterdir()) if cache.shard_dir.is_dir() else []


def test_second_call_embeds_nothing_and_returns_identical_arrays(embedder, tmp_path, monkeypatch, caplog):
    cache = cache_for(embedder, root=tmp_path)
    assert cache.directory.parent == tmp_path / "embeddings"
    assert cache.directory.name == key_digest(cache_key(embedder))[:20]
    rows = _count_rows(monkeypatch, embedder)
    with caplog.at_level(logging.INFO, logger="llm_collapse.cache"):
        first = encode_cached(embedder, TEXTS, cache=cache, batch_size=BATCH)
    assert sum(rows) == len(TEXTS) and len(rows) >= 5
    assert "cache: 0 hits, 17 to embed" in caplog.text
    assert first.dtype == np.float32 and first.shape == (len(TEXTS), embedder.dim)
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, rtol=1e-5)
    assert len(_shard_files(cache)) == len(rows)  # one shard per batch
    assert (cache.directory / "key.json").is_file()

    rows.clear()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="llm_collapse.cache"):
        second = encode_cached(embedder, TEXTS, cache=cache, batch_size=BATCH)
    assert rows == []
    assert "cache: 17 hits, 0 to embed" in caplog.text
    assert np.array_equal(first, second)

    # A fresh process (new cache object, same folder) reads the shards back.
    third = encode_cached(embedder, TEXTS, cache=cache_for(embedder, root=tmp_path), batch_size=BATCH)
    assert rows == [] and np.array_equal(first, third)

    # Same batches as a plain encode, so the vectors are bit-identical to it.
    assert np.array_equal(first, embedder.encode(TEXTS, batch_size=BATCH))


def test_duplicates_embedded_once_and_subsets_hit(embedder, tmp_path, monkeypatch):
    cache = cache_for(embedder, root=tmp_path)
    rows = _count_rows(monkeypatch, embedder)
    texts = [TEXTS[0], TEXTS[1], TEXTS[0], TEXTS[2], TEXTS[1]]
    out = encode_cached(embedder, texts, cache=cache, batch_size=BATCH)
    assert sum(rows) == 3
    assert np.array_equal(out[0], out[2]) and np.array_equal(out[1], out[4])
    np.testing.assert_allclose(out, embedder.encode(texts), atol=1e-5)
    rows.clear()
    out2 = encode_cached(embedder, [TEXTS[2], TEXTS[3], TEXTS[0]], cache=cache)
    assert sum(rows) == 1
    assert np.array_equal(out2[0], out[3]) and np.array_equal(out2[2], out[0])
    empty = encode_cached(embedder, [], cache=cache)
    assert empty.shape == (0, embedder.dim) and empty.dtype == np.float32


def test_no_cache_is_plain_encode(embedder, tmp_path):
    out = encode_cached(embedder, TEXTS, cache=None, batch_size=BATCH)
    assert np.array_equal(out, embedder.encode(TEXTS, batch_size=BATCH))


def test_key_changes_with_what_changes_a_vector(tiny_e5_dir, tmp_path):
    base = _load(tiny_e5_dir)
    key = cache_key(base)
    for field in ("name", "hub_id", "weights", "weights_fingerprint", "backend", "dtype", "quantization"):
        assert field in key
    for field in ("pooling", "input_format", "max_length", "interventions", "intervention_params"):
        assert field in key
    for field in ("sliding_window", "rope_parameters", "transformers", "device_type"):
        assert field in key
    assert "device" not in key
    assert "model.safetensors" in key["weights_fingerprint"]
    assert "sha256" in key["weights_fingerprint"]["model.safetensors"]  # tiny file: hashed
    digest = key_digest(key)

    # Stable across loads of the same model.
    again = _load(tiny_e5_dir)
    assert key_digest(cache_key(again)) == digest
    assert cache_for(again, root=tmp_path).directory == cache_for(base, root=tmp_path).directory

    assert key_digest(cache_key(_load(tiny_e5_dir, dtype="bf16"))) != digest
    assert key_digest(cache_key(_load(tiny_e5_dir, max_length=64))) != digest
    assert key_digest(cache_key(_load(tiny_e5_dir, pooling="mean"))) != digest
    with base.intervene("tempscale:0.8"):
        inside = cache_key(base)
        inside_cache = cache_for(base, root=tmp_path)
    assert key_digest(inside) != digest
    assert inside["interventions"] == "tempscale-0.8"
    assert inside["intervention_params"][0]["tau"] == 0.8
    with base.intervene("tempscale:0.9"):
        assert key_digest(cache_key(base)) not in {digest, key_digest(inside)}
    assert key_digest(cache_key(base)) == digest  # restored after the block
    assert key_digest(cache_key(_load(tiny_e5_dir, interventions="tempscale:0.8"))) == key_digest(inside)

    # A cache made inside the block refuses to serve the embedder outside it.
    with pytest.raises(ValueError, match="another embedder state"):
        encode_cached(base, TEXTS[:2], cache=inside_cache)

    # Changing a weight file's bytes (same size) changes the fingerprint; hidden files do not count.
    copy = tmp_path / "copy"
    shutil.copytree(tiny_e5_dir, copy)
    before = cache_mod.weights_fingerprint(copy)
    assert before == cache_mod.weights_fingerprint(tiny_e5_dir)
    (copy / ".partial.safetensors").write_bytes(b"x")
    assert cache_mod.weights_fingerprint(copy) == before
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (copy / "model.safetensors").write_bytes(bytes(data))
    after = cache_mod.weights_fingerprint(copy)
    assert after["model.safetensors"]["size"] == before["model.safetensors"]["size"]
    assert after["model.safetensors"]["sha256"] != before["model.safetensors"]["sha256"]


def test_text_hash_depends_on_kind_and_effective_instruction(embedder, tmp_path, monkeypatch):
    default = embedder.spec.default_instruction
    assert text_hash("a", "query", default) != text_hash("a", "document", None)
    assert text_hash("a", "query", default) != text_hash("a", "query", "Retrieve code")
    assert text_hash("a", "query", default) != text_hash("b", "query", default)
    assert text_hash("a", "query", default) == text_hash("a", "query", default)

    cache = cache_for(embedder, root=tmp_path)
    rows = _count_rows(monkeypatch, embedder)
    texts = TEXTS[:4]
    docs = encode_cached(embedder, texts, kind="document", cache=cache)
    assert sum(rows) == 4
    queries = encode_cached(embedder, texts, kind="query", cache=cache)
    assert sum(rows) == 8
    assert not np.array_equal(docs, queries)
    # None and the default instruction are the same effective instruction: all hits.
    explicit = encode_cached(embedder, texts, kind="query", instruction=default, cache=cache)
    assert sum(rows) == 8 and np.array_equal(explicit, queries)
    other = encode_cached(embedder, texts, kind="query", instruction="Retrieve code", cache=cache)
    assert sum(rows) == 12
    np.testing.assert_allclose(
        other, embedder.encode(texts, kind="query", instruction="Retrieve code"), atol=1e-5
    )
    with pytest.raises(ValueError, match="applies to kind='query' only"):
        encode_cached(embedder, texts, kind="document", instruction="x", cache=cache)


def test_resume_after_crash(embedder, tmp_path, monkeypatch):
    reference = encode_cached(
        embedder, TEXTS, cache=cache_for(embedder, root=tmp_path / "clean"), batch_size=BATCH
    )

    root = tmp_path / "crashy"
    crashing = _count_rows(monkeypatch, embedder, fail_after=2)
    with pytest.raises(RuntimeError, match="simulated crash"):
        encode_cached(embedder, TEXTS, cache=cache_for(embedder, root=root), batch_size=BATCH)
    assert crashing == [BATCH, BATCH]
    monkeypatch.undo()

    cache = cache_for(embedder, root=root)  # a new run: reads what the crashed one wrote
    cached = len(cache)
    assert cached == 2 * BATCH
    rows = _count_rows(monkeypatch, embedder)
    resumed = encode_cached(embedder, TEXTS, cache=cache, batch_size=BATCH)
    assert sum(rows) == len(TEXTS) - cached
    assert np.array_equal(resumed, reference)
    assert len(cache_for(embedder, root=root)) == len(TEXTS)


def test_leftover_temp_and_truncated_shard_are_skipped(embedder, tmp_path, monkeypatch, caplog):
    cache = cache_for(embedder, root=tmp_path)
    reference = encode_cached(embedder, TEXTS, cache=cache, batch_size=BATCH)
    shards = sorted(cache.shard_dir.glob("*.npz"))
    victim = shards[1]
    data = victim.read_bytes()
    lost = len(np.load(victim)["hashes"])
    (cache.shard_dir / f".leftover{cache_mod.TEMP_SUFFIX}").write_bytes(data[: len(data) // 3])
    victim.write_bytes(data[: len(data) // 2])  # as if truncated by a disk problem
    (cache.shard_dir / "not-a-zip.npz").write_bytes(b"garbage")

    fresh = cache_for(embedder, root=tmp_path)
    with caplog.at_level(logging.WARNING, logger="llm_collapse.cache"):
        assert len(fresh) == len(TEXTS) - lost
    assert "leftover temp file" in caplog.text and ".leftover" in caplog.text
    assert f"unreadable shard {victim}" in caplog.text and "not-a-zip.npz" in caplog.text

    rows = _count_rows(monkeypatch, embedder)
    again = encode_cached(embedder, TEXTS, cache=fresh, batch_size=BATCH)
    assert sum(rows) == lost
    np.testing.assert_allclose(again, reference, atol=1e-6)


def test_crash_during_put_leaves_no_partial_shard(embedder, tmp_path, monkeypatch, caplog):
    cache = cache_for(embedder, root=tmp_path)
    vectors = np.eye(3, embedder.dim, dtype=np.float32)
    hashes = [text_hash(t, "document", None) for t in ("x", "y", "z")]

    def boom(_fd):
        raise OSError("disk died mid-write")

    # The bytes are written but the process dies before fsync/rename, without a chance to clean up.
    monkeypatch.setattr(cache_mod.os, "fsync", boom)
    monkeypatch.setattr(cache_mod, "_remove_quietly", lambda path: None)
    with pytest.raises(OSError, match="disk died"):
        cache.put(hashes, vectors)
    monkeypatch.undo()
    names = _shard_files(cache)
    assert names and all(n.endswith(cache_mod.TEMP_SUFFIX) for n in names)
    assert not list(cache.shard_dir.glob("*.npz"))
    with caplog.at_level(logging.WARNING, logger="llm_collapse.cache"):
        assert cache_for(embedder, root=tmp_path).get(hashes) == {}
    assert "leftover temp file" in caplog.text

    # A failed rename cleans its temp file up.
    def no_replace(src, dst):
        raise OSError("rename failed")

    monkeypatch.setattr(cache_mod.os, "replace", no_replace)
    before = set(_shard_files(cache))
    with pytest.raises(OSError, match="rename failed"):
        cache.put(hashes, vectors)
    monkeypatch.undo()
    assert set(_shard_files(cache)) == before

    # The next put succeeds and is visible to a new reader.
    cache.put(hashes, vectors)
    got = cache_for(embedder, root=tmp_path).get(hashes)
    assert set(got) == set(hashes)
    assert np.array_equal(np.stack([got[h] for h in hashes]), vectors)


def test_overwrite_recomputes_everything(embedder, tmp_path, monkeypatch):
    cache = cache_for(embedder, root=tmp_path)
    first = encode_cached(embedder, TEXTS, cache=cache, batch_size=BATCH)
    rows = _count_rows(monkeypatch, embedder)
    second = encode_cached(embedder, TEXTS, cache=cache, batch_size=BATCH, overwrite=True)
    assert sum(rows) == len(TEXTS)
    assert np.array_equal(first, second)
    # The newest shard wins on reload.
    fresh = cache_for(embedder, root=tmp_path)
    assert len(fresh) == len(TEXTS)
    newest = sorted(fresh.shard_dir.glob("*.npz"))[-1]
    with np.load(newest) as data:
        h = str(data["hashes"][0])
        assert np.array_equal(fresh.get([h])[h], data["vectors"][0])


def test_dimension_mismatch_raises(embedder, tmp_path):
    cache = cache_for(embedder, root=tmp_path)
    with pytest.raises(ValueError, match="width"):
        cache.put(["a"], np.ones((1, embedder.dim + 1), dtype=np.float32))
    with pytest.raises(ValueError, match="shape"):
        cache.put(["a", "b"], np.ones((1, embedder.dim), dtype=np.float32))
    # A foreign shard of another width in the folder is an error, not a silent mix.
    EmbeddingCache(cache.directory).put(["b"], np.ones((1, embedder.dim + 2), dtype=np.float32))
    with pytest.raises(ValueError, match="width"):
        len(cache_for(embedder, root=tmp_path))


def test_key_file_mismatch_and_compact(embedder, tmp_path):
    cache = cache_for(embedder, root=tmp_path)
    out = encode_cached(embedder, TEXTS, cache=cache, batch_size=BATCH)
    with pytest.raises(ValueError, match="different key"):
        EmbeddingCache(cache.directory, key={"name": "other"})
    merged = cache.compact()
    assert _shard_files(cache) == [merged.name]
    again = encode_cached(embedder, TEXTS, cache=cache_for(embedder, root=tmp_path), batch_size=BATCH)
    assert np.array_equal(out, again)


def test_default_root_is_cache_root(embedder, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(tmp_path / "env-root"))
    assert cache_for(embedder).directory.parent == tmp_path / "env-root" / "embeddings"


def test_large_weight_files_are_fingerprinted_by_size_and_mtime(tiny_e5_dir, tmp_path, monkeypatch):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_e5_dir, copy)
    monkeypatch.setattr(cache_mod, "SHA256_BELOW_BYTES", 1)  # every file counts as large
    before = cache_mod.weights_fingerprint(copy)["model.safetensors"]
    assert set(before) == {"size", "mtime_ns"}
    weights = copy / "model.safetensors"
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert cache_mod.weights_fingerprint(copy)["model.safetensors"] != before
