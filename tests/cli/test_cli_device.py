"""``--device`` (issue 45): a bad value is one line and exit 2 before any model loads, a device this machine
lacks is refused the same way, the device is not part of the run id, and it reaches model loading."""

from __future__ import annotations

import json

import pytest
import torch

import llm_collapse
import llm_collapse.run.runner as runner
from llm_collapse.backends.device import missing_device
from llm_collapse.cli import main
from llm_collapse.run.config import CompareConfig

pytestmark = pytest.mark.usefixtures("private_cache")


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded for a bad --device")

    monkeypatch.setattr(runner, "load_for_run", refuse)


def _refused(capsys, *argv: str) -> str:
    assert main(["compare", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("device", ["gpu", "cuda:", "cuda:x", "CPU", "cpu,cuda", ""])
def test_a_bad_device_is_one_line_before_anything_runs(device, tmp_path, capsys, no_model_load):
    out = tmp_path / "run"
    err = _refused(capsys, "--device", device, "--out", str(out))
    assert err == (
        f"error: Unknown --device {device!r}; allowed: auto, cpu, cuda, cuda:N or mps (N: the GPU's index), "
        "e.g. --device cpu"
    )
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal of CUDA on a machine without it")
@pytest.mark.parametrize("extra", [[], ["--dry-run"]])
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_on_a_machine_without_it_is_refused_before_any_model_loads(
    device, extra, tmp_path, capsys, no_model_load
):
    out = tmp_path / "run"
    err = _refused(capsys, "--device", device, "--out", str(out), *extra)
    assert err == (
        f"error: --device {device}: CUDA is not available on this machine; use --device cpu (or auto: CUDA "
        "where present, else CPU)"
    )
    assert not out.exists()


def test_a_gpu_index_past_the_machine_s_gpus_is_missing(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert missing_device(torch.device("cuda")) is None
    assert missing_device(torch.device("cuda:1")) is None
    assert missing_device(torch.device("cuda:2")) == "this machine has 2 CUDA device(s), cuda:0 to cuda:1"
    assert missing_device(torch.device("cpu")) is None


def test_the_device_is_not_part_of_the_run_id():
    """Only rounding depends on the device (`CompareConfig.run_id`); a config for a GPU validates anywhere, so
    ``estimate`` reads it on a CPU machine."""
    base = CompareConfig().validate().run_id()
    assert CompareConfig(device="cpu").validate().run_id() == base
    assert CompareConfig(device="cuda:1").validate().run_id() == base
    assert CompareConfig(seed=1).validate().run_id() != base  # the id does see what defines the results


@pytest.mark.usefixtures("needs_sotu")
def test_the_device_reaches_model_loading_and_run_json(run_compare, tmp_path, monkeypatch):
    real = llm_collapse.load_embedder
    devices = []

    def spy(*args, **kwargs):
        devices.append(kwargs.get("device"))
        return real(*args, **kwargs)

    monkeypatch.setattr(llm_collapse, "load_embedder", spy)
    out = tmp_path / "run"
    flags = dict(methods="base", tasks="collapse", lengths=32, max_per_bin=4, batch_size=4, dtype="fp32")
    assert run_compare(out, tiny="mistral", device="cpu", no_report=True, **flags) == 0
    record = json.loads((out / "run.json").read_text())
    assert devices == ["cpu"]
    assert record["config"]["device"] == "cpu"
    assert record["models"]["mistral"]["describe"]["device"] == "cpu"
