"""Prefix sharing: one forward of the longest input gives the embedding of every token-prefix of it.

Why it is exact
    In a causal decoder the state at position t depends only on tokens 0..t (sliding-window layers are still
    causal: they see a subset of the past), and the backend's position ids are 0..n-1 for any unpadded
    input. So the states of ``ids[:n]`` are the first n states of ``ids``, and a pooling that reads only
    positions inside the prefix (mean over the pool mask, or the last pooled position) gives the prefix's
    embedding from the long forward. Numbers agree with separate forwards to float rounding.

When it is not (`prefix_sharing` says which, and why)
    - Echo prompting (the pooled span is a second copy that follows the whole first copy).
    - Bidirectional attention (NV-Embed's backbone, BERT): every state reads later tokens.
    - Anything appended after the text: e5's exactly-one EOS, NV-Embed's EOS-as-text, a template with text
      after ``{text}``, or a tokenizer that adds special tokens after the text (BERT's [SEP]).
    - A backend whose forward mixes rows (`Backend.mixes_rows`: bitsandbytes int8 picks outlier columns over
      every token of the forward, later ones included), or one that pools itself (vLLM: no token states).
    - Length-dependent position handling: an active intervention that says so
      (`Intervention.length_free_up_to` is not None: dynamic NTK rescales RoPE by the input length;
      ``tempscale-log``, PI with ``keep_trained``, SelfExtend with ``min_length`` and the LongEmbed presets
      built from them read the text's length), or a model config whose RoPE type is ``dynamic`` or
      ``longrope``. Each intervention declares this itself, so one built directly from its class is judged
      the same as one parsed from a slug.
    Static RoPE changes (NTK base, YaRN, PI), SelfExtend (a function of position ids only), constant
    temperatures and switching the sliding window off keep sharing exact. So do ``tempscale-log`` and the
    LongEmbed presets among inputs of at most L0 tokens, where their factor is 1 and their switches are off:
    `PrefixSharing.limit` says up to which length, and longer inputs run alone.

Decisions
    - One predicate, `prefix_sharing`, takes every fact as an argument (spec, model, tokenizer, interventions,
      the backend's refusal), so a plan can ask it of a meta-device model and `Embedder.prefix_sharing` of
      the loaded one; callers read `PrefixSharing.ok` (every length) or ``.limit``.
    - Prefix means are computed as one (K, L) pool-mask matrix times the (L, H) states in float32, the same
      arithmetic as `llm_collapse.encoding.pooling.mean_pool`, rather than as differences of cumulative sums (no
      cancellation error at 32k positions; K x L floats of extra memory).
    - Each prefix gets the pool mask its own encoding would get (`TemplateFormat` rules), not a slice of the
      long input's mask (`TemplateFormat.pool_mask`): under ``pool_span="skip-bos"`` a one-token ``[BOS]``
      input pools its BOS.
    - `sharing_groups` detects prefixes on the exact model inputs (``embedder.tokenize``:
      template, special tokens, truncation), so a text prefix that tokenises differently at its cut is not
      shared, and truncated texts share when their truncated inputs are prefixes. Detection sorts the
      inputs lexicographically: a sequence is a prefix of some other one iff it is a prefix of its sorted
      successor, so grouping costs one sort, also when many inputs share a long instruction prompt.
    - Sharing is automatic: the encoding plan (`llm_collapse.encoding.plan`, so ``encode``,
      ``encode_cached`` and the MTEB wrapper) asks `sharing_groups` and plans its batches over the group
      roots, texts that share nothing being roots of one; roots keep the usual pooling, the other members
      are pooled from their root's row by `pool_prefixes` (`shared_rows`). Off where hidden states are asked for (they would be the root's, not the text's),
      for a backend that pools itself (vLLM), with ``Embedder.share_prefixes = False`` or
      ``encode(..., share_prefixes=False)``, and whenever no input is a prefix of another (then batches
      are exactly the unshared ones).
    - A prefix matches its root only to float rounding (a different matmul shape), as a different batch
      composition would; duplicates (equal inputs) are pooled once and get identical vectors.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from llm_collapse.adapters.inputs import EncodedText, Kind, TemplateFormat
from llm_collapse.encoding.forward import EmbeddedBatch
from llm_collapse.encoding.pooling import last_token_pool
from llm_collapse.interventions.attention import attention_modules
from llm_collapse.interventions.base import Intervention, ModelContext

logger = logging.getLogger(__name__)

__all__ = [
    "LENGTH_DEPENDENT_ROPE_TYPES",
    "PrefixSharing",
    "embed_prefixes",
    "encode_with_prefix_sharing",
    "pool_prefixes",
    "prefix_groups",
    "prefix_sharing",
    "shared_rows",
    "sharing_groups",
]

LENGTH_DEPENDENT_ROPE_TYPES: tuple[str, ...] = ("dynamic", "longrope")
"""RoPE types that rescale with the input length (``longrope`` switches factors past the trained length)."""

_POOLINGS: tuple[str, ...] = ("mean", "last")
_PROBE = "prefix sharing probe"


@dataclass(frozen=True)
class PrefixSharing:
    """Up to which input length prefixes of one input can be read from its forward (`prefix_sharing`).

    Attributes:
        limit: The longest input that may root a prefix group: None for any length, 0 for none.
        reason: Why not beyond ``limit``, one line; ``""`` when ``limit`` is None.
    """

    limit: int | None
    reason: str = ""

    @property
    def ok(self) -> bool:
        """Exact at every length (a positive ``limit`` still lets short inputs share)."""
        return self.limit is None


def prefix_sharing(
    spec,
    model,
    tokenizer,
    parts: Sequence[Intervention],
    context: ModelContext,
    *,
    kind: Kind = "document",
    backend_reason: str = "",
) -> PrefixSharing:
    """Whether, and up to which input length, prefixes of one input can be embedded from its forward.

    The backend's refusal comes first, then the format and the model, then each active intervention's
    `Intervention.length_free_up_to`: one that acts the same on every input of at most L0 tokens (LongEmbed's
    log factor and switches) keeps sharing exact among those inputs; longer ones run alone.

    Args:
        spec: The `EmbedderSpec` (format, pooling, loader).
        model: The torch model (its config and attention modules are read; a meta-device model will do); not
            touched for echo, NV-Embed or a ``backend_reason``, so None will do there.
        tokenizer: The model's tokenizer (special tokens appended after the text).
        parts: The active interventions (`Stack.parts`).
        context: The model's `ModelContext` (the trained length L0 defaults to).
        kind: ``"document"`` or ``"query"``: the template that applies.
        backend_reason: Why the backend cannot share (`Backend.mixes_rows`, a backend that pools itself), or
            ``""``; `Embedder.prefix_sharing` passes it.
    """
    reason = backend_reason or _refusal(spec, model, tokenizer, kind)
    if reason:
        return PrefixSharing(0, reason)
    bounds = [(p.length_free_up_to(model, context), p.slug) for p in parts]
    known = [(limit, slug) for limit, slug in bounds if limit is not None]
    if not known:
        return PrefixSharing(None)
    limit, slug = min(known)
    reason = f"intervention {slug!r} depends on the input length"
    return PrefixSharing(limit, f"{reason} above {limit} tokens") if limit > 0 else PrefixSharing(0, reason)


def embed_prefixes(
    embedder,
    token_ids_or_text: str | EncodedText | Sequence[int],
    lengths: Sequence[int],
    *,
    kind: Kind = "document",
    instruction: str | None = None,
) -> np.ndarray:
    """Embeddings of the first ``n`` model-input tokens for each ``n`` in ``lengths``, from one forward.

    Args:
        embedder: A loaded `Embedder` whose `Embedder.prefix_sharing` is ``ok``.
        token_ids_or_text: A text (encoded with ``embedder.tokenize``: template, special tokens, truncation at
            ``max_length``), an `EncodedText`, or model input ids (special tokens included, as the model reads
            them).
        lengths: Prefix lengths in model-input tokens (a leading BOS counts), each in ``1..len(input)``; any
            order, repeats allowed.
        kind: Template kind for a text, and for the pool masks.
        instruction: Query instruction for a text (``kind="query"``).

    Returns:
        ``(len(lengths), d)`` float32 unit vectors, row k equal (to rounding) to ``embedder.encode`` of an input
        that tokenises to the first ``lengths[k]`` ids.

    Raises:
        ValueError: Sharing is not exact for this embedder (the reason is given), or a length is out of range.
    """
    sharing = embedder.prefix_sharing(kind)
    if not sharing.ok:
        raise ValueError(f"{embedder.name}: prefixes cannot share one forward: {sharing.reason}")
    if isinstance(token_ids_or_text, str):
        encoded = embedder.tokenize([token_ids_or_text], kind=kind, instruction=instruction)[0]
        if encoded.truncated:
            logger.warning("%s: text truncated to max_length=%d tokens", embedder.name, embedder.max_length)
        ids = list(encoded.input_ids)
    elif isinstance(token_ids_or_text, EncodedText):
        ids = list(token_ids_or_text.input_ids)
    else:
        ids = [int(i) for i in token_ids_or_text]
    lengths = [_check_length(n, len(ids)) for n in lengths]
    if not lengths:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    fmt = embedder.spec.input_format
    template_prefix = fmt.format("", kind=kind, instruction=instruction)[0]
    longest = max(lengths)
    masks = torch.zeros(len(lengths), longest)  # (K, L) pool mask of each prefix, as its own encoding has it
    for row, n in enumerate(lengths):
        masks[row, :n] = torch.tensor(
            fmt.pool_mask(embedder.tokenizer, ids[:n], template_prefix), dtype=torch.float32
        )
    input_ids = torch.tensor([ids[:longest]])  # (1, L)
    states = embedder.backend.forward(input_ids, torch.ones_like(input_ids)).last_hidden_state[0]  # (L, H)
    return _normalised(_pool_rows(states, masks, embedder.spec.pooling))


def prefix_groups(sequences: Sequence[Sequence[int]]) -> dict[int, list[int]]:
    """Groups sequences under a longest one that each is a prefix of.

    Args:
        sequences: Token id sequences.

    Returns:
        ``{root: members}``: every index appears in exactly one member list; each member is a prefix of (or
        equal to) its root, the root is a member of its own group, and members are in input order.
    """
    keys = [tuple(s) for s in sequences]
    order = sorted(range(len(keys)), key=lambda i: (keys[i], i))
    root = list(range(len(keys)))
    # Backwards through the sorted order: a prefix of anything is a prefix of its sorted successor, whose root
    # (found already) extends the successor and therefore the prefix too.
    for position in range(len(order) - 2, -1, -1):
        this, successor = order[position], order[position + 1]
        if keys[successor][: len(keys[this])] == keys[this]:
            root[this] = root[successor]
    groups: dict[int, list[int]] = {}
    for index in range(len(keys)):
        groups.setdefault(root[index], []).append(index)
    return groups


def sharing_groups(
    name: str, sharing: PrefixSharing, encoded: Sequence[EncodedText]
) -> dict[int, list[int]] | None:
    """The prefix groups of ``encoded`` when sharing is exact and saves a forward, else None.

    What the encoding plan asks before planning batches: the keys are the inputs to run, each member is read
    from its root's forward. Under a `PrefixSharing.limit` only inputs up to it are grouped; longer ones are
    their own roots. Logs the reason for no sharing at DEBUG and the saving at INFO.

    Args:
        name: The embedder's name, for the log.
        sharing: `Embedder.prefix_sharing` for the kind the inputs were encoded with.
        encoded: The model inputs (``embedder.tokenize``).

    Returns:
        ``{root: members}`` as `prefix_groups` returns it, or None.
    """
    limit = sharing.limit
    if limit == 0:
        logger.debug("%s: no prefix sharing (%s); encoding every text separately", name, sharing.reason)
        return None
    if limit is not None:
        logger.debug(
            "%s: no prefix sharing (%s); inputs of at most %d tokens share", name, sharing.reason, limit
        )
    short = [i for i, e in enumerate(encoded) if limit is None or len(e) <= limit]
    groups = {
        short[root]: [short[m] for m in members]
        for root, members in prefix_groups([encoded[i].input_ids for i in short]).items()
    }
    groups.update({i: [i] for i in sorted(set(range(len(encoded))) - set(short))})
    if len(groups) == len(encoded):
        return None
    logger.info(
        "%s: prefix sharing saved %d of %d forwards (%d tokens run instead of %d): those texts' inputs are "
        "token prefixes of (or equal to) another input",
        name,
        len(encoded) - len(groups),
        len(encoded),
        sum(len(encoded[root]) for root in groups),
        sum(len(e) for e in encoded),
    )
    return groups


def pool_prefixes(
    states: torch.Tensor,
    offset: int,
    members: Sequence[EncodedText],
    pooling: str,
    *,
    max_elements: int = 1 << 24,
) -> torch.Tensor:
    """Unit vectors of inputs that are prefixes of the one whose states are ``states``.

    Members of equal length are one row (same ids, hence the same pool mask), so duplicates get identical
    vectors and at most ``W`` rows are pooled; the (K, W) masks are built in chunks of ``max_elements``.

    Args:
        states: (W, H) states of one batch row.
        offset: Position of the input's first token in the row (the left padding).
        members: The prefixes' `EncodedText`s (each at most ``W - offset`` long).
        pooling: ``"mean"`` or ``"last"``.
        max_elements: Most mask entries built at once.

    Returns:
        (len(members), H) float32 CPU tensor of unit vectors, in ``members`` order.
    """
    width = states.shape[0]
    by_length: dict[int, EncodedText] = {}
    for member in members:
        by_length.setdefault(len(member), member)
    lengths = sorted(by_length)
    step = max(1, max_elements // max(width, 1))
    pooled = []
    for start in range(0, len(lengths), step):
        chunk = lengths[start : start + step]
        masks = torch.zeros(len(chunk), width)  # (K, W)
        for row, n in enumerate(chunk):
            masks[row, offset : offset + n] = torch.tensor(by_length[n].pool_mask, dtype=torch.float32)
        pooled.append(_pool_rows(states, masks, pooling))
    row_of = {n: row for row, n in enumerate(lengths)}
    rows = torch.cat(pooled)[[row_of[len(m)] for m in members]]
    return torch.nn.functional.normalize(rows, p=2, dim=-1).cpu()


def shared_rows(
    batch: EmbeddedBatch,
    states: torch.Tensor,
    groups: dict[int, list[int]],
    encoded: list[EncodedText],
    *,
    padding_side: str,
    pooling: str,
    max_tokens_per_batch: int,
) -> Iterator[EmbeddedBatch]:
    """Every text read from one forward of the roots in ``batch``: a root and its equal inputs take the root's
    row, shorter members are pooled from its ``states`` (`pool_prefixes`). Rows of ``attention_mask`` and
    ``pool_mask`` mark each text's positions in its root's row (left padding included); a yield has at most
    ``max(len(batch.indices), max_tokens_per_batch // width)`` rows."""
    width = batch.attention_mask.shape[1]
    indices: list[int] = []
    vectors: list[torch.Tensor] = []
    spans: list[tuple[int, EncodedText]] = []  # (offset, input) of each row
    for row, root in enumerate(batch.indices):
        offset = width - len(encoded[root]) if padding_side == "left" else 0
        shorter = [m for m in groups[root] if len(encoded[m]) < len(encoded[root])]
        pooled = {}
        if shorter:
            rows = pool_prefixes(states[row], offset, [encoded[m] for m in shorter], pooling)
            pooled = dict(zip(shorter, rows, strict=True))
        for member in groups[root]:
            indices.append(member)
            vectors.append(pooled.get(member, batch.embeddings[row]))
            spans.append((offset, encoded[member]))
    step = max(len(batch.indices), max_tokens_per_batch // max(width, 1))
    for start in range(0, len(indices), step):
        chunk = slice(start, start + step)
        attention = torch.zeros((len(spans[chunk]), width), dtype=torch.long)
        pool_mask = torch.zeros_like(attention)
        for row, (offset, item) in enumerate(spans[chunk]):
            attention[row, offset : offset + len(item)] = 1
            pool_mask[row, offset : offset + len(item)] = torch.tensor(item.pool_mask)
        yield EmbeddedBatch(
            indices[chunk],
            torch.stack(vectors[chunk]),
            [item for _, item in spans[chunk]],
            attention,
            pool_mask,
        )


def encode_with_prefix_sharing(embedder, texts: Sequence[str], **options) -> np.ndarray:
    """``embedder.encode(texts, **options, share_prefixes=True)``: shares even where ``embedder.share_prefixes``
    is off; where `Embedder.prefix_sharing` refuses, separate forwards (the reason is logged at DEBUG).

    Kept as the explicit entry point; `Embedder.encode` shares by default. ``options`` are those of
    `Embedder.encode` (``kind``, ``instruction``, ``batch_size``, ``show_progress_bar``).
    """
    return embedder.encode(texts, **options, share_prefixes=True)


# ----------------------------------------------------------------------------- helpers


def _refusal(spec, model, tokenizer, kind: Kind) -> str:
    """Why the format or the model rules sharing out at any length, or ``""``."""
    fmt = spec.input_format
    if not isinstance(fmt, TemplateFormat):
        return (
            f"{type(fmt).__name__} input: echo pools a second copy of the text that follows the whole first "
            "copy, so a prefix's input is not a prefix of the long input"
        )
    if spec.loader == "nv-embed":
        return "NV-Embed's backbone attends bidirectionally (every state reads later tokens)"
    causal, why = _is_causal(model)
    if not causal:
        return why
    if spec.pooling not in _POOLINGS:
        return f"pooling {spec.pooling!r} is not one of {_POOLINGS}"
    if fmt.eos == "exactly-one":
        return "the format appends exactly one EOS after the (truncated) text"
    if fmt.eos == "as-text":
        return "the format appends the EOS token to the text"
    template = fmt.query_template if kind == "query" else fmt.document_template
    tail = template.partition("{text}")[2]
    if tail:
        return f"the {kind} template puts {tail!r} after the text"
    suffix = _special_suffix(tokenizer)
    if suffix:
        return f"the tokenizer appends special tokens {suffix} after the text"
    if bad := sorted(_rope_types(model) & set(LENGTH_DEPENDENT_ROPE_TYPES)):
        return f"RoPE type {bad[0]!r} rescales positions with the input length"
    return ""


def _is_causal(model: torch.nn.Module) -> tuple[bool, str]:
    """All self-attention modules causal (``is_causal`` True) and no config marked bidirectional."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(config, "is_causal", True) is False or getattr(config, "use_bidirectional_attention", False):
        return False, "the model attends bidirectionally (config is_causal=False)"
    modules = attention_modules(model)
    if not modules:
        return False, "no attention module found to check causality"
    bidirectional = [name for name, module in modules if getattr(module, "is_causal", None) is not True]
    if bidirectional:
        return (
            False,
            f"attention is bidirectional ({bidirectional[0]}.is_causal is not True): states read later tokens",
        )
    return True, ""


def _special_suffix(tokenizer) -> list[str]:
    """Special tokens the tokenizer appends after the text (e.g. ``['</s>']`` or ``['[SEP]']``)."""
    plain = tokenizer(_PROBE, add_special_tokens=False)["input_ids"]
    full = tokenizer(_PROBE, add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return tokenizer.convert_ids_to_tokens(full[start + len(plain) :])
    return ["<unknown: the text does not tokenise to a contiguous span>"]


def _rope_types(model: torch.nn.Module) -> set[str]:
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    found: set[str] = set()
    for value in [rope, *rope.values()] if isinstance(rope, dict) else []:
        if isinstance(value, dict) and isinstance(value.get("rope_type", value.get("type")), str):
            found.add(value.get("rope_type", value.get("type")))
    return found


def _check_length(n, available: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= int(n) <= available:
        raise ValueError(f"prefix length {n!r} is not an integer in 1..{available} (the input's length)")
    return int(n)


def _pool_rows(states: torch.Tensor, masks: torch.Tensor, pooling: str) -> torch.Tensor:
    """(L, H) states, (K, L) pool masks -> (K, H) float32, as `llm_collapse.encoding.pooling.pool` would per row."""
    masks = masks.to(states.device)
    if pooling == "last":
        return last_token_pool(states.expand(masks.shape[0], -1, -1), masks)  # expand is a view
    total = masks @ states.float()  # (K, H)
    return total / masks.sum(dim=1, keepdim=True).clamp(min=1.0)


def _normalised(pooled: torch.Tensor) -> np.ndarray:
    return torch.nn.functional.normalize(pooled, p=2, dim=-1).cpu().numpy().astype(np.float32, copy=False)
