"""GGUF conversion under concurrency: two real processes, the rename race, stale and half-written folders.

The GGUF is a tiny random llama (one layer, width 16, a 56-token sentencepiece-style vocabulary) written
with ``gguf.GGUFWriter``; transformers' GGUF loader reads it, so the conversion is the real one and takes
well under a second (the two subprocesses spend their time importing transformers).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from llm_collapse.backends import gguf as gguf_mod
from llm_collapse.backends.gguf import converted_gguf_dir, file_sha256, find_converted
from llm_collapse.utils.procs import host_tag, pid_state


def write_tiny_llama_gguf(path: Path, *, seed: int = 0) -> Path:
    """A float32 llama GGUF that ``AutoModel`` / ``AutoTokenizer.from_pretrained(gguf_file=...)`` load."""
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(seed)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = ["<unk>", "<s>", "</s>", *letters, "\u2581", *("\u2581" + c for c in letters)]
    size, hidden, inner, heads = len(vocab), 16, 32, 2
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(64)
    writer.add_embedding_length(hidden)
    writer.add_block_count(1)
    writer.add_feed_forward_length(inner)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(size)
    writer.add_tokenizer_model("llama")  # sentencepiece: merges are derived from the scores
    writer.add_token_list(vocab)
    writer.add_token_scores([0.0, 0.0, 0.0] + [-float(i) for i in range(size - 3)])
    writer.add_token_types([2, 3, 3] + [1] * (size - 3))  # unknown, control, control, normal...
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)

    def tensor(name: str, shape: tuple[int, ...]) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    tensor("token_embd.weight", (size, hidden))
    for name in ("attn_norm", "ffn_norm"):
        writer.add_tensor(f"blk.0.{name}.weight", np.ones(hidden, dtype=np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        tensor(f"blk.0.{name}.weight", (hidden, hidden))
    tensor("blk.0.ffn_gate.weight", (inner, hidden))
    tensor("blk.0.ffn_up.weight", (inner, hidden))
    tensor("blk.0.ffn_down.weight", (hidden, inner))
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama-f32.gguf")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("LLM_COLLAPSE_CACHE", str(root))
    return root


def _fake_convert(tmp: Path, gguf_path: Path, sha256: str) -> None:
    (tmp / "config.json").write_text('{"model_type": "llama"}\n')
    (tmp / "SOURCE").write_text(f"{gguf_path.name}\nsha256 {sha256}\n")


def _temp_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "converted").glob(f"{gguf_mod.TEMP_PREFIX}*"))


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert pid_state(child.pid) == "dead"
    return child.pid


def _age(path: Path, seconds: float) -> None:
    when = time.time() - seconds
    for item in [path, *path.rglob("*")]:
        os.utime(item, (when, when))


# Each subprocess imports everything, says it is ready, waits for "go", then converts. The conversion step
# sleeps after writing, so whichever process locks second finds the lock taken and has to wait.
CHILD = textwrap.dedent(
    """
    import logging, sys, time
    from pathlib import Path

    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    from transformers import AutoModel, AutoTokenizer  # noqa: F401  (both processes start converting warm)
    from llm_collapse.backends import gguf

    real = gguf._convert_into

    def slow(tmp, gguf_path, sha256):
        real(tmp, gguf_path, sha256)
        time.sleep(2.0)

    gguf._convert_into = slow
    Path(sys.argv[2]).touch()
    while not Path(sys.argv[3]).exists():
        time.sleep(0.005)
    print(gguf.converted_gguf_dir(sys.argv[1]))
    """
)


def test_two_processes_convert_once_and_share_the_folder(tiny_gguf, tmp_path):
    root = tmp_path / "cache"
    env = {**os.environ, "LLM_COLLAPSE_CACHE": str(root), "HF_HUB_OFFLINE": "1"}
    env["TOKENIZERS_PARALLELISM"] = "false"
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{i}" for i in range(2)]
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tiny_gguf), str(flag), str(go)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for flag in ready
    ]
    try:
        deadline = time.monotonic() + 120
        while not all(flag.exists() for flag in ready):
            assert all(child.poll() is None for child in children), [c.communicate() for c in children]
            assert time.monotonic() < deadline, "the subprocesses never got ready"
            time.sleep(0.02)
        go.touch()
        results = [child.communicate(timeout=120) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    logs = "".join(err for _, err in results)
    assert [child.returncode for child in children] == [0, 0], logs
    printed = {out.strip().splitlines()[-1] for out, _ in results}
    target = root / "converted" / file_sha256(tiny_gguf)[:32]
    assert printed == {str(target)}
    assert logs.count("Converting tiny-llama-f32.gguf") == 1, logs  # the lock avoided duplicate work
    assert logs.count("Waiting for another process converting tiny-llama-f32.gguf") == 1, logs
    assert "converted by another process" in logs
    assert (target / "config.json").is_file() and (target / "model.safetensors").is_file()
    assert _temp_dirs(root) == []

    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(target)
    assert type(model).__name__ == "LlamaModel" and model.config.hidden_size == 16
    assert not hasattr(model.config, "quantization_config")
    assert AutoTokenizer.from_pretrained(target)("a b").input_ids[0] == 1  # BOS from the GGUF metadata


def test_rename_race_returns_the_winners_folder(tiny_gguf, cache_dir, monkeypatch, caplog):
    # No lock here (as on a file system without locking): a second process finishes first, mid-conversion.
    monkeypatch.setattr(gguf_mod, "_lock", lambda handle, path, what: None)
    real = gguf_mod._convert_into
    target = cache_dir / "converted" / file_sha256(tiny_gguf)[:32]

    def convert_and_lose(tmp, gguf_path, sha256):
        real(tmp, gguf_path, sha256)
        shutil.copytree(tmp, target)  # the winner renames its folder into place first
        (target / "WINNER").write_text("other process\n")

    monkeypatch.setattr(gguf_mod, "_convert_into", convert_and_lose)
    with caplog.at_level(logging.INFO, logger="llm_collapse.backends.gguf"):
        assert converted_gguf_dir(tiny_gguf) == target
    assert (target / "WINNER").is_file()  # the loser kept the winner's folder
    assert "converted by another process meanwhile" in caplog.text
    assert _temp_dirs(cache_dir) == []

    # Later calls return the folder without converting.
    monkeypatch.setattr(gguf_mod, "_convert_into", lambda *args: pytest.fail("converted twice"))
    assert converted_gguf_dir(tiny_gguf) == target


def test_failed_rename_without_a_winner_raises_and_cleans_up(tiny_gguf, cache_dir, monkeypatch):
    monkeypatch.setattr(gguf_mod, "_convert_into", _fake_convert)

    def no_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(gguf_mod.os, "replace", no_replace)
    with pytest.raises(OSError, match="disk full"):
        converted_gguf_dir(tiny_gguf)
    monkeypatch.undo()
    assert _temp_dirs(cache_dir) == []
    assert not (cache_dir / "converted" / file_sha256(tiny_gguf)[:32]).exists()


def test_stale_temp_folders_are_removed_and_live_ones_kept(tiny_gguf, cache_dir, monkeypatch, caplog):
    monkeypatch.setattr(gguf_mod, "_convert_into", _fake_convert)
    converted = cache_dir / "converted"
    converted.mkdir(parents=True)
    host, other = host_tag(), "f" * 32
    digest = file_sha256(tiny_gguf)[:32]
    names = {
        "dead_pid": f".tmp-{other}-{host}-{_dead_pid()}-0badc0de",
        "own_pid": f".tmp-{other}-{host}-{os.getpid()}-00000001",
        "live_pid": f".tmp-{other}-{host}-{os.getppid()}-00000002",
        "same_file": f".tmp-{digest}-{host}-{os.getppid()}-00000003",  # its lock is ours: stale
        "other_host_fresh": f".tmp-{other}-elsewhere-1-00000004",
        "other_host_old": f".tmp-{other}-elsewhere-2-00000005",
        "old_style_fresh": ".tmp-k3j4h5g6",
        "old_style_old": ".tmp-a1b2c3d4",
    }
    for name in names.values():
        (converted / name).mkdir()
        (converted / name / "model.safetensors").write_bytes(b"\0" * 64)
    for key in ("other_host_old", "old_style_old"):
        _age(converted / names[key], 2 * gguf_mod.STALE_AFTER_S)
    _age(converted / names["live_pid"], 2 * gguf_mod.STALE_AFTER_S)  # alive wins over age
    (converted / ".tmp-a-file").write_text("not a folder\n")

    with caplog.at_level(logging.WARNING, logger="llm_collapse.backends.gguf"):
        target = converted_gguf_dir(tiny_gguf)
    assert (target / "config.json").is_file()
    left = set(_temp_dirs(cache_dir))
    kept = {"own_pid", "live_pid", "other_host_fresh", "old_style_fresh"}
    assert left == {names[k] for k in kept} | {".tmp-a-file"}
    for key in set(names) - kept:
        assert names[key] in caplog.text
    assert (
        "is gone" in caplog.text
        and "holds its file's conversion lock" in caplog.text
        and "unchanged for 2.0 h" in caplog.text
    )


def test_half_written_target_is_converted_again(tiny_gguf, cache_dir, monkeypatch, caplog):
    monkeypatch.setattr(gguf_mod, "_convert_into", _fake_convert)
    target = cache_dir / "converted" / file_sha256(tiny_gguf)[:32]
    target.mkdir(parents=True)
    (target / "model.safetensors").write_bytes(b"half")  # an old version died here, before config.json
    assert find_converted(tiny_gguf) is None
    with caplog.at_level(logging.WARNING, logger="llm_collapse.backends.gguf"):
        assert converted_gguf_dir(tiny_gguf) == target
    assert (target / "config.json").is_file() and not (target / "model.safetensors").exists()
    assert "has no config.json" in caplog.text
    assert find_converted(tiny_gguf) == target
    assert _temp_dirs(cache_dir) == []


def test_conversion_logs_the_time_it_took(tiny_gguf, cache_dir, monkeypatch, caplog):
    """The first load says how long the conversion took, measured (a fake clock moves 78.4 s meanwhile)."""
    now = [500.0]

    def slow_convert(tmp, gguf_path, sha256):
        _fake_convert(tmp, gguf_path, sha256)
        now[0] += 78.4

    monkeypatch.setattr(gguf_mod, "_convert_into", slow_convert)
    clock = SimpleNamespace(perf_counter=lambda: now[0], time=time.time, sleep=time.sleep)
    monkeypatch.setattr(gguf_mod, "time", clock)  # this module's clock only
    with caplog.at_level(logging.INFO, logger="llm_collapse.backends.gguf"):
        target = converted_gguf_dir(tiny_gguf)
        converted_gguf_dir(tiny_gguf)  # converted already: nothing to time
    assert caplog.text.count("Converted tiny-llama-f32.gguf in 78 s; later loads read") == 1
    assert f"later loads read {target} in about a second" in caplog.text


def test_the_gguf_tensor_bar_is_silent_in_redirected_logs(capsys):
    """transformers' GGUF tensor bar (plain tqdm) draws nothing when stderr is not a terminal, and is restored."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    from llm_collapse.backends.gguf import _quiet_tensor_bar

    original = gguf_utils.tqdm
    with _quiet_tensor_bar():
        assert list(gguf_utils.tqdm(range(3), desc="Converting")) == [0, 1, 2]
    assert gguf_utils.tqdm is original
    assert "Converting" not in capsys.readouterr().err
    list(gguf_utils.tqdm(range(3), desc="Converting", file=sys.stderr))  # the control: the bar itself draws
    assert "Converting" in capsys.readouterr().err


def test_file_sha256_is_read_once_per_file_version(tmp_path, monkeypatch):
    """A GGUF given as a path is hashed once per process (a run resolves it several times), and again when the
    file changes: the digest is hashlib's of the bytes either way."""
    import hashlib
    import os

    from llm_collapse.backends import gguf

    path = tmp_path / "model.gguf"
    path.write_bytes(b"first version")
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k))
    assert gguf.file_sha256(path) == gguf.file_sha256(path) == hashlib.sha256(b"first version").hexdigest()
    assert opened.count(str(path.resolve())) == 1
    path.write_bytes(b"the second, longer version")
    os.utime(path, ns=(1, 1))
    assert gguf.file_sha256(path) == hashlib.sha256(b"the second, longer version").hexdigest()
