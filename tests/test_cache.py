"""The on-disk embedding cache: keys, hits, resume after a crash, atomic writes, and every unusable shard
(unreadable, NaN, wrong width, damaged key.json, ``shards`` not a folder, stale temp files) as a miss."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from llm_collapse.encoding import cache as cache_mod
from llm_collapse.encoding import keys as keys_mod
from llm_collapse.encoding.cache import EmbeddingCache, key_digest
from llm_collapse.encoding.cached import cache_for, encode_cached
from llm_collapse.encoding.keys import cache_key, text_hash
from llm_collapse.utils import files as files_mod
from llm_collapse.utils.procs import host_tag, pid_state

WORDS = "the quick brown fox jumps over a lazy dog while seven old owls watch from the barn".split()
# 17 distinct texts of different lengths: with batch_size=3 that is 6 batches.
TEXTS = [" ".join(WORDS[(i * 3) % len(WORDS) :] + WORDS[: (i * 5) % 11]) + f" #{i}" for i in range(17)]
BATCH = 3


@pytest.fixture
def embedder(tiny_embedder):
    return tiny_embedder("mistral")


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


def _clean_run(embedder, tmp_path):
    return encode_cached(
        embedder, TEXTS, cache=cache_for(embedder, root=tmp_path / "clean"), batch_size=BATCH
    )


def _recover(embedder, root, monkeypatch, caplog) -> tuple[np.ndarray, int, list[str]]:
    """Two runs on ``root`` (new cache objects, as new processes): returns the first run's vectors, how many
    texts it embedded and its warnings, after checking the second run embeds and warns about nothing."""
    rows = _count_rows(monkeypatch, embedder)

    def run() -> tuple[np.ndarray, list[str]]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="llm_collapse.encoding"):
            out = encode_cached(embedder, TEXTS, cache=cache_for(embedder, root=root), batch_size=BATCH)
        return out, [r.getMessage() for r in caplog.records if r.name.startswith("llm_collapse.encoding")]

    first, warnings = run()
    embedded = sum(rows)
    second, again = run()
    assert again == [], "the second run warned again"
    assert sum(rows) == embedded, "the second run embedded again"
    assert np.array_equal(first, second)
    return first, embedded, warnings


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert pid_state(child.pid) == "dead"
    return child.pid


def test_second_call_embeds_nothing_and_returns_identical_arrays(embedder, tmp_path, monkeypatch, caplog):
    cache = cache_for(embedder, root=tmp_path)
    assert cache.directory.parent == tmp_path / "embeddings"
    assert cache.directory.name == key_digest(cache_key(embedder))[:20]
    rows = _count_rows(monkeypatch, embedder)
    with caplog.at_level(logging.INFO, logger="llm_collapse.encoding"):
        first = encode_cached(embedder, TEXTS, cache=cache, batch_size=BATCH)
    assert sum(rows) == len(TEXTS) and len(rows) >= 5
    assert "cache: 0 hits, 17 to embed" in caplog.text
    assert first.dtype == np.float32 and first.shape == (len(TEXTS), embedder.dim)
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, rtol=1e-5)
    assert len(_shard_files(cache)) == len(rows)  # one shard per batch
    assert (cache.directory / "key.json").is_file()

    rows.clear()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="llm_collapse.encoding"):
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


def test_key_changes_with_what_changes_a_vector(tiny_embedder, tiny_dir, tmp_path):
    base = tiny_embedder("mistral")
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
    again = tiny_embedder("mistral")
    assert key_digest(cache_key(again)) == digest
    assert cache_for(again, root=tmp_path).directory == cache_for(base, root=tmp_path).directory

    assert key_digest(cache_key(tiny_embedder("mistral", dtype="bf16"))) != digest
    assert key_digest(cache_key(tiny_embedder("mistral", max_length=64))) != digest
    assert key_digest(cache_key(tiny_embedder("mistral", pooling="mean"))) != digest
    with base.intervene("tempscale:0.8"):
        inside = cache_key(base)
        inside_cache = cache_for(base, root=tmp_path)
    assert key_digest(inside) != digest
    assert inside["interventions"] == "tempscale-0.8"
    assert inside["intervention_params"][0]["tau"] == 0.8
    with base.intervene("tempscale:0.9"):
        assert key_digest(cache_key(base)) not in {digest, key_digest(inside)}
    assert key_digest(cache_key(base)) == digest  # restored after the block
    loaded_inside = tiny_embedder("mistral", interventions="tempscale:0.8")
    assert key_digest(cache_key(loaded_inside)) == key_digest(inside)

    # A cache made inside the block refuses to serve the embedder outside it.
    with pytest.raises(ValueError, match="another embedder state"):
        encode_cached(base, TEXTS[:2], cache=inside_cache)

    # Changing a weight file's bytes (same size) changes the fingerprint; hidden files do not count.
    copy = tmp_path / "copy"
    shutil.copytree(tiny_dir("mistral"), copy)
    before = keys_mod.weights_fingerprint(copy)
    assert before == keys_mod.weights_fingerprint(tiny_dir("mistral"))
    (copy / ".partial.safetensors").write_bytes(b"x")
    assert keys_mod.weights_fingerprint(copy) == before
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (copy / "model.safetensors").write_bytes(bytes(data))
    after = keys_mod.weights_fingerprint(copy)
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


def test_unreadable_shards_are_recomputed_removed_and_warned_once(embedder, tmp_path, monkeypatch, caplog):
    reference = _clean_run(embedder, tmp_path)
    root = tmp_path / "broken"
    cache = cache_for(embedder, root=root)
    encode_cached(embedder, TEXTS, cache=cache, batch_size=BATCH)
    shards = sorted(cache.shard_dir.glob("*.npz"))
    victim, wrong_dtype = shards[1], shards[3]
    data = victim.read_bytes()
    lost = len(np.load(victim)["hashes"]) + len(np.load(wrong_dtype)["hashes"])
    victim.write_bytes(data[: len(data) // 2])  # as if truncated by a disk problem
    with np.load(wrong_dtype) as shard:
        np.savez(wrong_dtype, hashes=shard["hashes"], vectors=shard["vectors"].astype(np.float64))
    (cache.shard_dir / "not-a-zip.npz").write_bytes(b"garbage")

    out, embedded, warnings = _recover(embedder, root, monkeypatch, caplog)
    assert embedded == lost
    np.testing.assert_allclose(out, reference, atol=1e-6)
    assert len(warnings) == 3 and all("removing unusable shard" in w for w in warnings)
    assert any(str(victim) in w for w in warnings) and any("not-a-zip.npz" in w for w in warnings)
    assert any("float64" in w for w in warnings)
    assert not victim.exists() and not wrong_dtype.exists()
    assert not (cache.shard_dir / "not-a-zip.npz").exists()


def test_crash_during_put_leaves_no_partial_shard(embedder, tmp_path, monkeypatch, caplog):
    cache = cache_for(embedder, root=tmp_path)
    vectors = np.eye(3, embedder.dim, dtype=np.float32)
    hashes = [text_hash(t, "document", None) for t in ("x", "y", "z")]

    def boom(_fd):
        raise OSError("disk died mid-write")

    # The bytes are written but the process dies before fsync/rename, without a chance to clean up.
    monkeypatch.setattr(cache_mod.os, "fsync", boom)
    monkeypatch.setattr(files_mod, "_discard", lambda path: None)
    with pytest.raises(OSError, match="disk died"):
        cache.put(hashes, vectors)
    monkeypatch.undo()
    names = _shard_files(cache)
    assert names and all(n.endswith(cache_mod.TEMP_SUFFIX) for n in names)
    assert not list(cache.shard_dir.glob("*.npz"))
    # The temp file's writer (this process) is alive, so a reader leaves it alone, without a warning.
    with caplog.at_level(logging.WARNING, logger="llm_collapse.encoding"):
        assert cache_for(embedder, root=tmp_path).get(hashes) == {}
    assert caplog.text == "" and _shard_files(cache) == names

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


def test_dimension_mismatch_in_put_raises(embedder, tmp_path):
    cache = cache_for(embedder, root=tmp_path)
    with pytest.raises(ValueError, match="width"):
        cache.put(["a"], np.ones((1, embedder.dim + 1), dtype=np.float32))
    with pytest.raises(ValueError, match="shape"):
        cache.put(["a", "b"], np.ones((1, embedder.dim), dtype=np.float32))


def test_wrong_width_shard_is_recomputed_and_removed(embedder, tmp_path, monkeypatch, caplog):
    reference = _clean_run(embedder, tmp_path)
    root = tmp_path / "wide"
    cache = cache_for(embedder, root=root)
    encode_cached(embedder, TEXTS, cache=cache, batch_size=BATCH)
    victim = sorted(cache.shard_dir.glob("*.npz"))[2]
    with np.load(victim) as shard:
        hashes = shard["hashes"]
    wide = np.full((len(hashes), embedder.dim + 2), (embedder.dim + 2) ** -0.5, dtype=np.float32)
    np.savez(victim, hashes=hashes, vectors=wide)

    out, embedded, warnings = _recover(embedder, root, monkeypatch, caplog)
    assert embedded == len(hashes)
    np.testing.assert_allclose(out, reference, atol=1e-6)
    assert len(warnings) == 1 and "width" in warnings[0] and str(victim) in warnings[0]
    assert not victim.exists()

    # Without a known width (no embedder) nothing says which width is wrong: skipped, kept, not raised.
    foreign = cache.shard_dir / "zz-foreign.npz"  # sorts after the others: read last
    np.savez(foreign, hashes=np.array(["b"]), vectors=np.ones((1, embedder.dim + 2), dtype=np.float32))
    bare = EmbeddingCache(cache.directory)
    with caplog.at_level(logging.WARNING, logger="llm_collapse.encoding"):
        assert len(bare) == len(TEXTS) and bare.dim == embedder.dim
    assert f"skipping shard {foreign}" in caplog.text and foreign.exists()


def test_key_file_mismatch_and_compact(embedder, tmp_path):
    cache = cache_for(embedder, root=tmp_path)
    out = encode_cached(embedder, TEXTS, cache=cache, batch_size=BATCH)
    other = EmbeddingCache(cache.directory, key={"name": "other"})  # key.json is compared on first use
    with pytest.raises(ValueError, match="different key"):
        other.get(["a"])
    merged = cache.compact()
    assert _shard_files(cache) == [merged.name]
    again = encode_cached(embedder, TEXTS, cache=cache_for(embedder, root=tmp_path), batch_size=BATCH)
    assert np.array_equal(out, again)


def test_nan_shard_is_recomputed_and_removed(embedder, tmp_path, monkeypatch, caplog):
    reference = _clean_run(embedder, tmp_path)
    root = tmp_path / "nan"
    cache = cache_for(embedder, root=root)
    encode_cached(embedder, TEXTS, cache=cache, batch_size=BATCH)
    victim = sorted(cache.shard_dir.glob("*.npz"))[1]
    with np.load(victim) as shard:
        hashes, vectors = shard["hashes"], shard["vectors"].copy()
    vectors[1, 0] = np.nan
    vectors[2, 3] = np.inf
    np.savez(victim, hashes=hashes, vectors=vectors)

    out, embedded, warnings = _recover(embedder, root, monkeypatch, caplog)
    assert embedded == len(hashes)  # the whole shard, its finite rows too: it cannot be trusted
    np.testing.assert_allclose(out, reference, atol=1e-6)
    assert len(warnings) == 1 and "NaN or inf" in warnings[0] and str(victim) in warnings[0]
    assert not victim.exists()


def test_put_leaves_non_finite_rows_out(embedder, tmp_path, caplog):
    cache = cache_for(embedder, root=tmp_path)
    vectors = np.eye(3, embedder.dim, dtype=np.float32)
    vectors[1, 0] = np.nan
    with caplog.at_level(logging.WARNING, logger="llm_collapse.encoding"):
        shard = cache.put(["x", "y", "z"], vectors)
    assert "not storing 1 of 3 vectors" in caplog.text
    with np.load(shard) as data:
        assert data["hashes"].tolist() == ["x", "z"]
    fresh = cache_for(embedder, root=tmp_path)
    assert set(fresh.get(["x", "y", "z"])) == {"x", "z"}
    assert cache.put(["y"], vectors[1:2]) is None


@pytest.mark.parametrize("damage", ["edited", "unreadable"])
def test_damaged_key_file_is_rewritten_and_its_shards_dropped(
    embedder, tmp_path, monkeypatch, caplog, damage
):
    reference = _clean_run(embedder, tmp_path)
    root = tmp_path / "keyed"
    cache = cache_for(embedder, root=root)
    encode_cached(embedder, TEXTS, cache=cache, batch_size=BATCH)
    key_file = cache.directory / "key.json"
    if damage == "edited":
        key_file.write_text(json.dumps({**cache.key, "max_length": 7}))
    else:
        key_file.write_text('{"name": "trunc')

    out, embedded, warnings = _recover(embedder, root, monkeypatch, caplog)
    assert embedded == len(TEXTS)  # the shards there are not trusted
    np.testing.assert_allclose(out, reference, atol=1e-6)
    assert len(warnings) == 1 and str(key_file) in warnings[0]
    assert ("different key (fields ['max_length'])" if damage == "edited" else "cannot be read") in warnings[
        0
    ]
    assert json.loads(key_file.read_text()) == cache_key(embedder)


def test_shards_that_is_a_file_is_replaced(embedder, tmp_path, monkeypatch, caplog):
    reference = _clean_run(embedder, tmp_path)
    root = tmp_path / "flat"
    cache = cache_for(embedder, root=root)
    encode_cached(embedder, TEXTS, cache=cache, batch_size=BATCH)
    shutil.rmtree(cache.shard_dir)
    cache.shard_dir.write_text("not a folder\n")

    out, embedded, warnings = _recover(embedder, root, monkeypatch, caplog)
    assert embedded == len(TEXTS)
    np.testing.assert_allclose(out, reference, atol=1e-6)
    assert len(warnings) == 1 and "is not a folder" in warnings[0]
    assert cache.shard_dir.is_dir()


def test_stale_temp_files_are_removed_and_live_ones_kept(embedder, tmp_path, monkeypatch, caplog):
    reference = _clean_run(embedder, tmp_path)
    root = tmp_path / "killed"
    cache = cache_for(embedder, root=root)
    encode_cached(embedder, TEXTS, cache=cache, batch_size=BATCH)
    # A writer killed between writing and renaming: its shard exists only as a temp file.
    victim = sorted(cache.shard_dir.glob("*.npz"))[1]
    lost = len(np.load(victim)["hashes"])
    host, dead = host_tag(), _dead_pid()
    data = victim.read_bytes()
    victim.unlink()

    def temp(pid, *, host=host, age=0.0, name=None):
        path = cache.shard_dir / (
            name or f".{time.time_ns():020d}-{pid}-0000abcd.{host}{cache_mod.TEMP_SUFFIX}"
        )
        path.write_bytes(data)
        when = time.time() - age
        os.utime(path, (when, when))
        return path

    hour = cache_mod.STALE_TEMP_S
    stale = {
        "dead writer": temp(dead),
        "old, other host": temp(dead, host="elsewhere", age=2 * hour),
        "old, no host": temp(dead, name=f".leftover{cache_mod.TEMP_SUFFIX}", age=2 * hour),
    }
    kept = {
        "live writer": temp(os.getppid(), age=2 * hour),  # alive wins over age
        "this process": temp(os.getpid()),
        "fresh, other host": temp(dead, host="elsewhere"),
        "fresh, no host": temp(dead, name=f".fresh{cache_mod.TEMP_SUFFIX}"),
    }

    out, embedded, warnings = _recover(embedder, root, monkeypatch, caplog)
    assert embedded == lost
    np.testing.assert_allclose(out, reference, atol=1e-6)
    assert len(warnings) == len(stale) and all("removing stale temp file" in w for w in warnings)
    for path in stale.values():
        assert not path.exists() and any(str(path) in w for w in warnings)
    assert all(path.exists() for path in kept.values())
    assert any(f"process {dead} is gone" in w for w in warnings)


def test_default_root_is_cache_root(embedder, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(tmp_path / "env-root"))
    assert cache_for(embedder).directory.parent == tmp_path / "env-root" / "embeddings"


def test_large_weight_files_are_fingerprinted_by_size_and_mtime(tiny_dir, tmp_path, monkeypatch):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_dir("mistral"), copy)
    monkeypatch.setattr(keys_mod, "SHA256_BELOW_BYTES", 1)  # every file counts as large
    before = keys_mod.weights_fingerprint(copy)["model.safetensors"]
    assert set(before) == {"size", "mtime_ns"}
    weights = copy / "model.safetensors"
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert keys_mod.weights_fingerprint(copy)["model.safetensors"] != before
