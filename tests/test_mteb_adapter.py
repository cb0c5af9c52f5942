"""`MTEBEncoder` under mteb 2.x, offline: a tiny in-memory retrieval task and a tiny random e5-mistral."""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import pytest

mteb = pytest.importorskip("mteb")

from datasets import Dataset  # noqa: E402
from mteb._create_dataloaders import create_dataloader  # noqa: E402
from mteb.abstasks.retrieval import AbsTaskRetrieval  # noqa: E402
from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData  # noqa: E402
from mteb.abstasks.task_metadata import TaskMetadata  # noqa: E402
from mteb.models.models_protocols import EncoderProtocol, SearchProtocol  # noqa: E402
from mteb.types import PromptType  # noqa: E402

import llm_collapse as lc  # noqa: E402
from llm_collapse import mteb_adapter  # noqa: E402
from llm_collapse.interventions import InterventionError  # noqa: E402
from llm_collapse.mteb_adapter import MTEBEncoder, require_mteb  # noqa: E402

TASK_NAME = "LlmCollapseTinyRetrieval"
DESCRIPTION = "Given a question about an animal, retrieve the passage that answers it."
CORPUS = [
    {"id": "d1", "title": "Cats", "text": "Cats sleep for most of the day and hunt at dusk."},
    {"id": "d2", "title": "Dogs", "text": "Dogs were domesticated from wolves thousands of years ago."},
    {"id": "d3", "title": "", "text": "Owls can turn their heads almost all the way around."},
    {"id": "d4", "title": "Whales", "text": "Blue whales are the largest animals that have ever lived " * 3},
    {"id": "d5", "title": "Ants", "text": "Ant colonies divide work among queens, workers and soldiers."},
]
QUERIES = [
    {"id": "q1", "text": "How long do cats sleep?"},
    {"id": "q2", "text": "Where do dogs come from?"},
    {"id": "q3", "text": "Which animal is the largest ever?"},
]
QRELS = {"q1": {"d1": 1}, "q2": {"d2": 1}, "q3": {"d4": 1}}
RANKING_METRICS = ("ndcg_at_", "map_at_", "recall_at_", "precision_at_", "mrr_at_")


class TinyRetrieval(AbsTaskRetrieval):
    """Five documents (one without a title), three queries, in memory."""

    metadata = TaskMetadata(
        name=TASK_NAME,
        description=DESCRIPTION,
        reference="https://github.com/embeddings-benchmark/mteb",
        dataset={"path": "NA", "revision": "NA"},
        type="Retrieval",
        category="t2t",
        modalities=["text"],
        eval_splits=["test"],
        eval_langs=["eng-Latn"],
        main_score="ndcg_at_10",
        date=("2024-01-01", "2024-01-02"),
        domains=[],
        task_subtypes=[],
        license="cc-by-4.0",
        annotations_creators="derived",
        dialect=["Written"],
        sample_creation="found",
        bibtex_citation="",
    )

    def load_data(self, num_proc=None, **kwargs) -> None:
        split = RetrievalSplitData(
            corpus=Dataset.from_list(CORPUS),
            queries=Dataset.from_list(QUERIES),
            relevant_docs=QRELS,
            top_ranked=None,
        )
        self.dataset = {"default": {"test": split}}
        self.data_loaded = True


@pytest.fixture(scope="module")
def embedder(tiny_e5_dir):
    return lc.load_embedder("mistral", path=tiny_e5_dir, dtype="fp32")


@pytest.fixture(scope="module")
def evaluated(embedder, tmp_path_factory):
    """Base and tempscale:0.8 runs of the same loaded model through ``mteb.evaluate``, sharing one result cache.

    The default ``overwrite_strategy="only-missing"`` would skip the second run (and write no predictions) if the
    two adapters were filed under the same model name.
    """
    root = tmp_path_factory.mktemp("mteb")
    cache = mteb.ResultCache(cache_path=root / "cache")
    out = {}
    for label, interventions in (("base", None), ("tempscale", "tempscale:0.8")):
        adapter = MTEBEncoder(embedder, interventions=interventions)
        result = mteb.evaluate(
            adapter,
            TinyRetrieval(),
            cache=cache,
            co2_tracker=False,
            show_progress_bar=False,
            prediction_folder=root / label,
        )
        predictions = json.loads((root / label / f"{TASK_NAME}_predictions.json").read_text())
        out[label] = (adapter, result, predictions["default"]["test"])
    return root, out


def _dataloader(task, prompt_type):
    split = task.dataset["default"]["test"]
    data = split["queries"] if prompt_type == PromptType.query else split["corpus"]
    return create_dataloader(data, task_metadata=task.metadata, prompt_type=prompt_type, batch_size=2)


def _encode(adapter, task, prompt_type, **kwargs):
    loader = _dataloader(task, prompt_type)
    return adapter.encode(
        loader,
        task_metadata=task.metadata,
        hf_split="test",
        hf_subset="default",
        prompt_type=prompt_type,
        **kwargs,
    )


@pytest.fixture(scope="module")
def task():
    task = TinyRetrieval()
    task.load_data()
    return task


def test_adapter_satisfies_mteb_protocol_and_names_results_by_intervention(embedder):
    base, scaled = MTEBEncoder(embedder), MTEBEncoder(embedder, interventions="tempscale:0.8")
    assert isinstance(base, EncoderProtocol)
    assert not isinstance(base, SearchProtocol)  # so retrieval wraps it in mteb's own search
    meta, scaled_meta = base.mteb_model_meta, scaled.mteb_model_meta
    assert meta.name == "llm-collapse/mistral"
    assert scaled_meta.name == "llm-collapse/mistral--tempscale-0.8"
    assert meta.model_name_as_path() != scaled_meta.model_name_as_path()
    assert meta.revision == scaled_meta.revision == base.revision
    assert meta.embed_dim == embedder.dim and meta.max_tokens == embedder.max_length
    assert meta.similarity_fn_name.value == "cosine" and meta.use_instructions is True

    a = np.eye(3, 4, dtype=np.float32)
    b = np.eye(2, 4, dtype=np.float32)
    assert np.allclose(np.asarray(base.similarity(a, b)), a @ b.T)
    assert np.allclose(np.asarray(base.similarity_pairwise(a[:2], b)), [1.0, 1.0])


def test_mteb_evaluate_offline_scores_and_result_folders(evaluated, embedder):
    root, runs = evaluated
    for label, (adapter, result, _) in runs.items():
        assert not result.exceptions, label
        (task_result,) = result.task_results
        (scores,) = task_result.scores["test"]
        assert 0.0 <= scores["main_score"] <= 1.0
        ranking = {k: v for k, v in scores.items() if k.startswith(RANKING_METRICS)}
        assert ranking and all(0.0 <= v <= 1.0 for v in ranking.values()), label
        meta = adapter.mteb_model_meta
        folder = root / "cache" / "results" / meta.model_name_as_path() / meta.revision
        assert (folder / f"{TASK_NAME}.json").is_file(), label
    base_predictions, scaled_predictions = runs["base"][2], runs["tempscale"][2]
    assert base_predictions.keys() == scaled_predictions.keys() == QRELS.keys()
    differences = [
        abs(base_predictions[q][d] - scaled_predictions[q][d])
        for q in base_predictions
        for d in base_predictions[q]
    ]
    assert max(differences) > 1e-6  # the intervention changed the similarity scores
    assert embedder.interventions == "base"


def test_embeddings_equal_embedder_encode_with_kind_and_instruction(embedder, task):
    adapter = MTEBEncoder(embedder)
    queries = _encode(adapter, task, PromptType.query, batch_size=1, show_progress_bar=False)
    expected = embedder.encode([q["text"] for q in QUERIES], kind="query", instruction=DESCRIPTION)
    assert queries.dtype == np.float32 and queries.shape == (len(QUERIES), embedder.dim)
    np.testing.assert_array_equal(queries, expected)

    documents = _encode(adapter, task, PromptType.document)
    texts = [f"{d['title']} {d['text']}".strip() for d in CORPUS]  # mteb joins title and text
    np.testing.assert_array_equal(documents, embedder.encode(texts, kind="document"))

    symmetric = _encode(adapter, task, None)  # symmetric tasks: both sides are instructed queries
    bare = [d["text"] for d in CORPUS]  # without a prompt type mteb passes the "text" column as it is
    np.testing.assert_array_equal(symmetric, embedder.encode(bare, kind="query", instruction=DESCRIPTION))


def test_interventions_apply_only_during_encode(embedder, task, monkeypatch):
    base = _encode(MTEBEncoder(embedder), task, PromptType.document)
    scaled_adapter = MTEBEncoder(embedder, interventions="tempscale:0.8")
    seen = []
    original = embedder.encode

    def spy(*args, **kwargs):
        seen.append(embedder.interventions)
        return original(*args, **kwargs)

    monkeypatch.setattr(embedder, "encode", spy)
    scaled = _encode(scaled_adapter, task, PromptType.document)
    monkeypatch.undo()
    assert seen == ["tempscale-0.8"]
    assert embedder.interventions == "base"
    assert not np.allclose(base, scaled, atol=1e-5)
    with embedder.intervene("tempscale:0.8"):
        np.testing.assert_array_equal(
            scaled, embedder.encode([f"{d['title']} {d['text']}".strip() for d in CORPUS])
        )
    np.testing.assert_array_equal(base, _encode(MTEBEncoder(embedder), task, PromptType.document))


def test_load_time_interventions_join_the_name_and_clashes_fail_early(embedder):
    embedder.apply_interventions("ntk:1e5")
    try:
        adapter = MTEBEncoder(embedder, interventions="tempscale:0.8")
        assert adapter.mteb_model_meta.name == "llm-collapse/mistral--ntk-theta1e5+tempscale-0.8"
        with pytest.raises(InterventionError):
            MTEBEncoder(embedder, interventions="yarn:2")
    finally:
        embedder.clear_interventions()
    assert embedder.interventions == "base"


def test_instruction_sources_in_order(embedder):
    metadata = TinyRetrieval.metadata
    adapter = MTEBEncoder(embedder, instructions={TASK_NAME: "Find the animal passage"})
    assert adapter.instruction_for(metadata, "query") == "Find the animal passage"
    assert adapter.instruction_for(metadata, "document") is None
    plain = MTEBEncoder(embedder)
    assert plain.instruction_for(metadata, "query") == DESCRIPTION
    with_prompt = metadata.model_copy(update={"prompt": {"query": "Retrieve the animal fact"}})
    assert plain.instruction_for(with_prompt, "query") == "Retrieve the animal fact"


def test_bad_inputs_fail_with_clear_errors(embedder, task):
    adapter = MTEBEncoder(embedder)
    with pytest.raises(ValueError, match="precision"):
        _encode(adapter, task, PromptType.query, precision="int8")
    with pytest.raises(ValueError, match="no 'text'"):
        adapter.encode([{"image": [1]}], task_metadata=task.metadata, hf_split="test", hf_subset="default")
    with pytest.raises(ValueError, match="prompt_type"):
        adapter.encode(
            [{"text": ["a"]}], task_metadata=task.metadata, hf_split="t", hf_subset="d", prompt_type="x"
        )
    with pytest.raises(InterventionError):
        MTEBEncoder(embedder, interventions="no-such-method:1")


def test_module_imports_without_mteb_and_hints_at_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mteb", None)  # what an environment without mteb looks like
    spec = importlib.util.spec_from_file_location("_mteb_adapter_without_mteb", mteb_adapter.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # importing the module needs no mteb
    with pytest.raises(ImportError, match="pip install mteb"):
        module.MTEBEncoder(object())
    with pytest.raises(ImportError, match="pip install mteb"):
        require_mteb()
