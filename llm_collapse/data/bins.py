"""Token-length bins and deterministic length-binned sampling of corpus texts.

Decisions and gotchas:

* Lengths are **token counts under a given tokenizer, without special tokens**
  (``add_special_tokens=False``): BOS/EOS and instruction prompts are the embedder's business and
  differ between models. A comparison of models must use the SAME texts, so bin once under one named
  reference tokenizer (recorded in :attr:`BinnedText.tokenizer`) and record each model's own counts
  with :func:`count_tokens`.
* Bins are half-open ``[lo, hi)``. :func:`log2_bins` gives ``[128, 256) ... [16384, 32768)`` with
  target = lower edge (pass ``hi=65536`` for a 32768 bin); :func:`linear_bins` gives TempScale's
  100-token bins ``[0, 100) ... [400, 500)`` (only bins wholly below ``hi``) with target = midpoint.
* ``mode="whole"`` puts each document in the bin its full length falls in. ``mode="span"`` cuts texts
  of about the target length: for documents with several paragraphs (sotu), spans of whole
  paragraphs that first reach the target and stay below ``hi`` (non-overlapping within a document);
  for single-paragraph documents (movie reviews, KJV chapters) the prefix of exactly ``target``
  tokens, cut at a character offset so no text is re-decoded. Spans are estimated from per-paragraph
  counts and then verified by counting the joined text.
* Sampling is deterministic for a seed: each bin uses its own ``random.Random`` seeded by
  ``(seed, bin label, mode)`` and draws documents round-robin, so one document does not fill a bin.
* Short bins log a warning naming the bin; a target longer than every text is said once per corpus
  and bin (and the bin stays empty); an empty corpus logs one warning and returns nothing.
* Why a bin stayed empty (`empty_bin`, for a run's one-line refusal): no document reaches its target, or
  every run of whole paragraphs steps over ``[lo, hi)`` (long paragraphs: a run below the target plus the next
  paragraph is already past ``hi``); the second names the nearest runs below and above, counted exactly.
"""

from __future__ import annotations

import bisect
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from llm_collapse.data.corpora import Document, paragraphs

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

Mode = Literal["span", "whole"]


PREFIX_BIN = "prefix:"
"""Bin labels of the prefix design start with it (``prefix:<L>``, `llm_collapse.data.prefixes`)."""


@dataclass(frozen=True)
class LengthBin:
    """A half-open token-length bin ``[lo, hi)`` and the length ``span`` mode aims for."""

    lo: int
    hi: int
    target: int

    @property
    def label(self) -> str:
        return f"[{self.lo},{self.hi})"

    def contains(self, n_tokens: int) -> bool:
        return self.lo <= n_tokens < self.hi


@dataclass(frozen=True)
class BinnedText:
    """One sampled text.

    Attributes:
        text: The text (a whole document, a paragraph span or a token prefix).
        bin: Bin label, e.g. ``"[256,512)"``.
        target_tokens: The bin's target length.
        n_tokens: Token count of ``text`` under the reference tokenizer (no special tokens).
        doc_id: Id of the source document.
        labels: The source document's labels.
        source: Corpus name.
        tokenizer: Name of the reference tokenizer.
        span: Paragraphs ``[start, end)`` (span mode), tokens ``[0, target)`` (prefix) or ``None``.
    """

    text: str
    bin: str
    target_tokens: int
    n_tokens: int
    doc_id: str
    labels: dict[str, str] = field(default_factory=dict)
    source: str = ""
    tokenizer: str = ""
    span: tuple[int, int] | None = None

    @property
    def item_id(self) -> str:
        """Its id in the per-item results (``items.parquet``): the document under the prefix design (the same
        item at every length, ``span`` = the length's token prefix), else the document and paragraph span."""
        if self.span is None or self.bin.startswith(PREFIX_BIN):
            return self.doc_id
        return f"{self.doc_id}:{self.span[0]}-{self.span[1]}"


def log2_bins(lo: int = 128, hi: int = 32768) -> list[LengthBin]:
    """Doubling bins between edges ``lo, 2 lo, ..., hi``; target is each lower edge."""
    edges = [lo]
    while edges[-1] * 2 <= hi:
        edges.append(edges[-1] * 2)
    return [LengthBin(a, b, a) for a, b in zip(edges, edges[1:], strict=False)]


def linear_bins(step: int = 100, hi: int = 512) -> list[LengthBin]:
    """Bins ``[0, step), [step, 2 step), ...`` lying wholly below ``hi``; target is the midpoint."""
    return [LengthBin(a, a + step, a + step // 2) for a in range(0, hi - step + 1, step)]


def target_bins(targets: Sequence[int], tolerance: float = 0.1) -> list[LengthBin]:
    """One bin per target length ``t``: ``[t, t (1 + tolerance))``, target ``t``."""
    return [LengthBin(t, max(t + 1, int(t * (1 + tolerance))), t) for t in targets]


def tokenizer_name(tokenizer: PreTrainedTokenizerBase) -> str:
    """``name_or_path`` of a tokenizer, or its class name when it has none."""
    return getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__


def count_tokens(
    texts: Sequence[str], tokenizer: PreTrainedTokenizerBase, *, batch_size: int = 256
) -> list[int]:
    """Token counts without special tokens (no truncation, no length warnings).

    Args:
        texts: The texts.
        tokenizer: A transformers tokenizer.
        batch_size: Texts per tokenizer call.

    Returns:
        One count per text.
    """
    counts: list[int] = []
    for start in range(0, len(texts), batch_size):
        batch = list(texts[start : start + batch_size])
        enc = tokenizer(batch, add_special_tokens=False, verbose=False, return_attention_mask=False)
        counts.extend(len(ids) for ids in enc["input_ids"])
    return counts


def token_prefix(text: str, n_tokens: int, tokenizer: PreTrainedTokenizerBase) -> str:
    """The prefix of ``text`` covering its first ``n_tokens`` tokens (cut at a character offset)."""
    return token_prefixes(text, [n_tokens], tokenizer)[0]


def token_prefixes(text: str, lengths: Sequence[int], tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """`token_prefix` for several lengths from one tokenisation of ``text`` (a 32k text is tokenised once)."""
    if getattr(tokenizer, "is_fast", False):
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        offsets = enc["offset_mapping"]
        return [text if n >= len(offsets) else text[: offsets[n - 1][1]] for n in lengths]
    ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
    return [tokenizer.decode(ids[:n]) for n in lengths]


class ParagraphCounts:
    """A document prepared for span sampling: paragraphs and estimated cumulative token counts."""

    def __init__(self, doc: Document, paras: list[str], counts: list[int], sep: int) -> None:
        self.doc, self.paras = doc, paras
        self.cum = [0]  # cum[k] = tokens of paragraphs[:k] + sep * k; span i..j ~ cum[j] - cum[i] - sep
        for n in counts:
            self.cum.append(self.cum[-1] + n + sep)
        self.sep = sep
        self.total = self.cum[-1] - sep if paras else 0

    def span_end(self, start: int, target: int) -> int | None:
        """Smallest end whose estimated span from ``start`` reaches ``target`` (None if none)."""
        end = bisect.bisect_left(self.cum, target + self.cum[start] + self.sep, lo=start + 1)
        return end if end < len(self.cum) else None


def paragraph_counts(
    documents: Sequence[Document], tokenizer: PreTrainedTokenizerBase
) -> list[ParagraphCounts]:
    """Each document's paragraphs with estimated cumulative token counts (one tokenizer call for all)."""
    split = [paragraphs(d.text) for d in documents]
    split = [p if len(p) > 1 else [d.text] for p, d in zip(split, documents, strict=True)]
    flat = count_tokens([p for paras in split for p in paras], tokenizer)
    sep = count_tokens(["a\n\na"], tokenizer)[0] - 2 * count_tokens(["a"], tokenizer)[0]
    out, pos = [], 0
    for doc, paras in zip(documents, split, strict=True):
        out.append(ParagraphCounts(doc, paras, flat[pos : pos + len(paras)], max(sep, 0)))
        pos += len(paras)
    return out


def paragraph_spans(text: str, tokenizer: PreTrainedTokenizerBase, target_tokens: int) -> list[str]:
    """Cuts a text into consecutive spans of whole paragraphs, each reaching ``target_tokens``.

    Spans do not overlap; a trailing remainder shorter than the target is dropped. A paragraph longer
    than the target is a span on its own.

    Args:
        text: Blank-line separated paragraphs.
        tokenizer: Counts tokens (no special tokens).
        target_tokens: Minimum span length.

    Returns:
        The spans, paragraphs joined by a blank line.
    """
    doc = paragraph_counts([Document(text, "")], tokenizer)[0]
    spans, start = [], 0
    while (found := _grow(doc, start, target_tokens, None, tokenizer)) is not None:
        spans.append(found[0])
        start = found[2]
    return spans


def _grow(
    d: ParagraphCounts, start: int, target: int, hi: int | None, tokenizer: PreTrainedTokenizerBase
) -> tuple[str, int, int] | None:
    """(text, n_tokens, end) of the paragraph span from ``start`` reaching ``target`` tokens."""
    end = d.span_end(start, target)
    if end is None:
        return None
    text = "\n\n".join(d.paras[start:end])
    n = count_tokens([text], tokenizer)[0]
    while n < target and end < len(d.paras):  # the estimate fell short: add paragraphs
        end += 1
        text = "\n\n".join(d.paras[start:end])
        n = count_tokens([text], tokenizer)[0]
    if n < target or (hi is not None and n >= hi):
        return None
    return text, n, end


def sample_length_binned(
    documents: Sequence[Document],
    tokenizer: PreTrainedTokenizerBase,
    bins: Sequence[LengthBin | int],
    *,
    per_bin: int,
    seed: int = 0,
    mode: Mode = "span",
    corpus: str | None = None,
) -> list[BinnedText]:
    """Samples up to ``per_bin`` texts per length bin, deterministically for a seed.

    Args:
        documents: The corpus.
        tokenizer: The reference tokenizer that defines lengths for every model of a comparison.
        bins: Length bins; a plain int ``t`` means ``target_bins([t])[0]``.
        per_bin: Texts wanted per bin; a bin that cannot be filled logs a warning naming it.
        seed: Sampling seed.
        mode: ``"span"`` (cut texts of each bin's target length) or ``"whole"`` (whole documents).
        corpus: Name used in warnings (default: the first document's source).

    Returns:
        The texts, bin by bin in the order of ``bins``.
    """
    resolved = [b if isinstance(b, LengthBin) else target_bins([b])[0] for b in bins]
    if mode not in ("span", "whole"):
        raise ValueError(f"Unknown mode {mode!r}; valid modes are 'span' and 'whole'.")
    if not documents:
        logger.warning("corpus %r is empty: no texts for bins %s", corpus or "", [b.label for b in resolved])
        return []
    corpus = corpus or documents[0].source
    name = tokenizer_name(tokenizer)
    if mode == "whole":
        counts = count_tokens([d.text for d in documents], tokenizer)
        longest = max(counts)
    else:
        prepared = paragraph_counts(documents, tokenizer)
        longest = max(d.total for d in prepared)
    out: list[BinnedText] = []
    for b in resolved:
        need = b.lo if mode == "whole" else b.target
        if longest < max(need, 1):
            logger.warning(
                "corpus %r, bin %s: %d tokens requested but the longest text has %d; bin left empty",
                corpus, b.label, need, longest,
            )  # fmt: skip
            continue
        rng = random.Random(f"{seed}|{b.label}|{mode}")
        if mode == "whole":
            members = [i for i, n in enumerate(counts) if b.contains(n)]
            rng.shuffle(members)
            picked = [
                _record(documents[i], b, documents[i].text, counts[i], name, None) for i in members[:per_bin]
            ]
        else:
            picked = _sample_spans(prepared, b, per_bin, rng, tokenizer, name)
        if len(picked) < per_bin:
            logger.warning(
                "corpus %r, bin %s: only %d of %d requested texts", corpus, b.label, len(picked), per_bin
            )
        out.extend(picked)
    return out


@dataclass(frozen=True)
class EmptyBin:
    """Why span sampling found no text for a bin (`empty_bin`).

    Attributes:
        bin: The bin.
        longest: Tokens of the corpus's longest document.
        below: Tokens of the longest run of whole paragraphs (within one document) short of the bin's target,
            None when there is none.
        above: Tokens of the shortest run at or past the bin's top, None when there is none.
    """

    bin: LengthBin
    longest: int
    below: int | None = None
    above: int | None = None

    @property
    def too_long(self) -> bool:
        """No document reaches the target (a text of this design lies within one document)."""
        return self.longest < self.bin.target

    def describe(self) -> str:
        """The cause in words (no fix: the caller knows which options it has)."""
        if self.too_long:
            return f"no document reaches {self.bin.target} tokens (longest document: {self.longest} tokens)"
        nearest = " and ".join(str(n) for n in (self.below, self.above) if n is not None)
        return (
            f"its documents are long enough (longest: {self.longest} tokens), but a text of the bins design is "
            f"a run of whole paragraphs within one document, and none falls in the bin {self.bin.label}"
            + (f" (the nearest: {nearest} tokens)" if nearest else "")
        )


def empty_bin(
    documents: Sequence[Document], tokenizer: PreTrainedTokenizerBase, b: LengthBin | int
) -> EmptyBin:
    """Why `sample_length_binned` (``mode="span"``) finds no text for bin ``b`` in ``documents``.

    A single-paragraph document that reaches the target always gives one (its token prefix), so a bin is
    empty either because no document reaches the target or because the documents' paragraph runs step over
    it. Runs are found as the sampler finds them (each start paragraph's shortest run reaching the target,
    and the run one paragraph shorter), and the two nearest are counted exactly.
    """
    b = b if isinstance(b, LengthBin) else target_bins([b])[0]
    longest = max(count_tokens([d.text for d in documents], tokenizer), default=0)
    if longest < b.target:
        return EmptyBin(b, longest)
    below: tuple[int, ParagraphCounts, int, int] | None = None  # (estimate, document, start, end)
    above: tuple[int, ParagraphCounts, int, int] | None = None
    for d in paragraph_counts(documents, tokenizer):
        if len(d.paras) < 2:
            continue
        for start in range(len(d.paras)):
            end = d.span_end(start, b.target)
            # the longest run from ``start`` short of the target: one paragraph less than the first reaching it
            short = end - 1 if end is not None else len(d.paras)
            if short > start:
                estimate = d.cum[short] - d.cum[start] - d.sep
                if below is None or estimate > below[0]:
                    below = (estimate, d, start, short)
            if end is not None:
                estimate = d.cum[end] - d.cum[start] - d.sep
                if above is None or estimate < above[0]:
                    above = (estimate, d, start, end)
    exact = [
        None if run is None else count_tokens(["\n\n".join(run[1].paras[run[2] : run[3]])], tokenizer)[0]
        for run in (below, above)
    ]
    return EmptyBin(b, longest, *exact)


def _record(
    doc: Document, b: LengthBin, text: str, n: int, name: str, span: tuple[int, int] | None
) -> BinnedText:
    return BinnedText(text, b.label, b.target, n, doc.doc_id, dict(doc.labels), doc.source, name, span)


def _sample_spans(
    prepared: list[ParagraphCounts],
    b: LengthBin,
    per_bin: int,
    rng: random.Random,
    tokenizer: PreTrainedTokenizerBase,
    name: str,
) -> list[BinnedText]:
    """Round-robin over shuffled documents; each turn takes one new non-overlapping span."""
    queues: dict[int, list[int]] = {}
    for i, d in enumerate(prepared):
        if len(d.paras) > 1:
            starts = [s for s in range(len(d.paras)) if d.span_end(s, b.target) is not None]
        else:
            starts = [0] if d.total >= b.target else []
        rng.shuffle(starts)
        if starts:
            queues[i] = starts
    order = list(queues)
    rng.shuffle(order)
    taken: dict[int, list[tuple[int, int]]] = {}
    out: list[BinnedText] = []
    while queues and len(out) < per_bin:
        for i in order:
            if i in queues and len(out) < per_bin:
                record = _next_span(prepared[i], queues[i], taken.setdefault(i, []), b, tokenizer, name)
                if record is not None:
                    out.append(record)
                if not queues[i]:
                    del queues[i]
    return out


def _next_span(
    d: ParagraphCounts,
    starts: list[int],
    taken: list[tuple[int, int]],
    b: LengthBin,
    tokenizer: PreTrainedTokenizerBase,
    name: str,
) -> BinnedText | None:
    while starts:
        start = starts.pop()
        if len(d.paras) == 1:
            text = token_prefix(d.paras[0], b.target, tokenizer)
            n, span = count_tokens([text], tokenizer)[0], (0, b.target)
        else:
            found = _grow(d, start, b.target, b.hi, tokenizer)
            if found is None:
                continue
            text, n, end = found
            span = (start, end)
            if any(s < end and start < e for s, e in taken):
                continue
        if b.contains(n):
            taken.append(span)
            return _record(d.doc, b, text, n, name, span)
    return None
