"""LongEmbed's context extension for absolute-position encoders (BERT): grouped, recurrent and interpolated
positions (Zhu et al. 2024, dwzhu-pku/LongEmbed at 033dc4a; the chunked average is `llm_collapse.interventions.pcw`).

With L0 the trained length (512 on minilm), n a text's own token count and s the extension factor of LongEmbed's
Table 6 (512 -> 1024 / 2048 / 4096: s = 2 / 4 / 8), texts are read up to S x L0 tokens where ``base`` truncates at
the position table, and a text longer than L0 reads its position p from the table as:

=======================  =================================================================================
``ape-gp:S[:L0]``        grouped: row p // ceil(n / L0)
``ape-rp:S[:L0]``        recurrent: row p mod L0
``ape-pi:S[:L0]``        interpolated: position p / s, linear between rows floor(p / s) and the next one
=======================  =================================================================================

Texts of at most L0 tokens read the table as the model does (GP and RP are the identity there; PI is switched).

What LongEmbed did, and where (``src/``):

- ``encoder_model.get_position_ids``: ``group`` is ``pid // ceil(L / L0)`` and ``recurrent`` ``pid % L0``, with L
  the padded batch length (batches padded to a multiple of 8) and L0 hard-coded (512, 4096 for Mistral); the ids
  go to the model as ``position_ids``. ``RetrievalModel.__init__`` re-registers the BERT embeddings'
  ``token_type_ids`` buffer as zeros of ``encode_max_length``, which the model slices by position.
  ``create_batch_dict`` truncates at ``encode_max_length`` (S x L0).
- PI for APE (paper §4, Appendix B): pid -> pid / s with the table stretched s times, E_t[i s] = E_o[i] and linear
  in between; original positions up to L0. Its code (``pos_mode="interpolate"``: ids times s when L <= L0, else
  unchanged) runs on E5-Base-4k, whose stretched table is stored in the checkpoint: the stretching of an
  untuned BERT table is not in the repository.
- ``scripts/run_long_embed.sh`` runs ``group``, ``recur`` and ``interpolate`` with ``--use_xformers``, whose BERT
  attention (``model_utils.replace_with_xformers``) multiplies the queries by max(1, ln n / ln 512), n the row's
  own token count: the paper's attention scaling, "used by default for all tested models" (Appendix B).

Where ours differs:

- n is each text's own token count, not the padded batch length, so batching never changes an embedding
  (LongEmbed's GP factor and PI switch moved with a text's batch mates).
- GP follows the code's per-length factor ceil(n / L0), not the paper's fixed pid // s: the two agree for texts
  of S x L0 tokens, and the code's factor is what ran.
- PI computes E_o interpolated at p / s on the fly instead of storing a stretched table (the same numbers). The
  last s - 1 positions of S x L0 (p / s past L0 - 1) have no right neighbour in the paper's formula; they keep
  row L0 - 1.
- ``ape-*`` change positions only, so a run separates them from the temperature: LongEmbed's runs as executed are
  ``ape-gp:S+tempscale-log`` (etc.; `TempScaleLog` is the same per-text factor, L0 = 512 on minilm).
- S only sets the token cap for GP and RP (their rules need no factor): Table 6 gives one s for all four methods.
- Not reproduced: fp16 autocast (rounding only).

Mechanism: the embeddings module's ``position_embeddings`` is swapped for `PerTextPositions`, which looks the
original table up (the model's own module, so short texts are bit-identical) and applies the rule to the rows
of longer texts, whose lengths come from the attention mask (`captured_inputs`); the ``position_ids`` and
``token_type_ids`` buffers BertEmbeddings slices by position are swapped for copies extended to the cap. Every
original object goes back on exit. Texts past the cap are truncated by the embedder (`Intervention.token_cap`).
The model itself still gets the backend's position ids 0..n-1: given ids that do not step by 1 and no attention
mask, transformers 5 reads them as packed sequences and masks attention between the "sequences"
(``masking_utils.find_packed_sequence_indices``), so remapping inside the table is also the safe seam.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn

from llm_collapse.interventions.attention import captured_inputs, patched_attributes
from llm_collapse.interventions.base import (
    Intervention,
    InterventionError,
    ModelContext,
    NotApplicable,
    VLLMSettings,
    check_base_length,
    check_positive_finite,
    format_number,
    not_on_vllm,
    trained_length,
)
from llm_collapse.interventions.rope import rotary_modules

__all__ = [
    "AbsoluteExtension",
    "GroupedPositions",
    "InterpolatedPositions",
    "PerTextPositions",
    "RecurrentPositions",
    "absolute_position_embeddings",
]

Rule = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""(positions (k, L), lengths (k,)) of the texts longer than L0 -> their position embeddings (k, L, H)."""


def absolute_position_embeddings(model: nn.Module, slug: str, context: ModelContext) -> nn.Module:
    """The one BERT-style embeddings module of ``model``: a ``position_embeddings`` table read from position 0
    and a ``position_ids`` buffer. Raises `NotApplicable` on a RoPE model or any other layout."""
    if rotary_modules(model):
        raise NotApplicable(
            f"{slug} extends absolute position embeddings (BERT); {context.name} has rotary positions: use "
            "longembed-ntk, longembed-se or longembed-pi there"
        )
    found = [
        module
        for module in model.modules()
        if isinstance(getattr(module, "position_embeddings", None), nn.Embedding)
        and isinstance(getattr(module, "position_ids", None), torch.Tensor)
    ]
    if len(found) != 1:
        raise NotApplicable(
            f"{slug} needs one BERT-style absolute position table (embeddings.position_embeddings); "
            f"{context.name} has {len(found)}"
        )
    if found[0].position_embeddings.padding_idx is not None:
        raise NotApplicable(
            f"{slug}: {context.name}'s positions start after a padding index (RoBERTa layout); only tables read "
            "from position 0 (BERT) are supported"
        )
    return found[0]


MAX_FACTOR = 256
"""The largest S: S x L0 with BERT's 512 positions is 131,072 tokens, four times the longest length measured here."""
MAX_TOKEN_CAP = 262_144
"""The largest S x L0 (an explicit L0): the position buffers are extended to it before the first forward."""


class AbsoluteExtension(Intervention):
    """Base of the extension methods: the factor S, L0, the token cap S x L0 and the applicability check.

    Args:
        factor: s >= 1 (LongEmbed Table 6: 2, 4, 8 for 1024, 2048, 4096 tokens from 512).
        base_length: L0; None: the model's trained length (`trained_length`: 512 on minilm).
    """

    kind = "extension"
    method = ""

    def __init__(self, factor: float, base_length: float | None = None) -> None:
        self.factor = check_positive_finite(f"{self.method} factor S", factor, minimum=1.0, inclusive=True)
        self.base_length = check_base_length(base_length)
        cap = self.factor * (self.base_length or 1)
        if self.factor > MAX_FACTOR or cap > MAX_TOKEN_CAP:
            raise InterventionError(
                f"{self.method}:{format_number(self.factor)}: S x L0 tokens is the cap this method extends the "
                f"model's position buffers to; S must be at most {MAX_FACTOR} and S x L0 at most {MAX_TOKEN_CAP:,} "
                f"(8x the 32k this package measures; LongEmbed reads 2-8x), e.g. {self.method}:8"
            )

    @property
    def slug(self) -> str:
        length = "" if self.base_length is None else f"-o{self.base_length}"
        return f"{self.method}-{format_number(self.factor)}{length}"

    def params(self) -> dict:
        return {
            "method": self.method,
            "factor": self.factor,
            "L0": self.base_length if self.base_length is not None else "model trained length",
            "token_cap": "S x L0",
        }

    def base(self, config, context: ModelContext) -> int:
        """L0 on this model."""
        return self.base_length if self.base_length is not None else trained_length(config, context)

    def token_cap(self, config, context: ModelContext) -> int:
        """S x L0 tokens (LongEmbed's ``encode_max_length``), rounded down."""
        return int(self.factor * self.base(config, context))

    def table(self, model: nn.Module, context: ModelContext) -> tuple[nn.Module, int]:
        """The embeddings module and L0, checked against its position table."""
        embeddings = absolute_position_embeddings(model, self.slug, context)
        base, rows = self.base(model.config, context), embeddings.position_embeddings.num_embeddings
        if base > rows:
            raise InterventionError(
                f"{self.slug}: L0={base} exceeds {context.name}'s {rows} position embeddings; give L0 <= {rows}"
            )
        return embeddings, base

    def vllm_settings(self, config, context: ModelContext) -> VLLMSettings:
        raise not_on_vllm(self.slug, "it changes how each text reads the position table")


class _PositionRule(AbsoluteExtension):
    """GP, RP and PI: the table is read through `rule` for texts longer than L0."""

    def rule(self, table: nn.Embedding, base: int) -> Rule:
        raise NotImplementedError

    @contextlib.contextmanager
    def _apply(self, model: nn.Module, context: ModelContext) -> Iterator[None]:
        embeddings, base = self.table(model, context)
        table = embeddings.position_embeddings
        size = max(self.token_cap(model.config, context), table.num_embeddings)
        swaps = []
        for name in ("position_ids", "token_type_ids"):  # BertEmbeddings slices both by position
            buffer = getattr(embeddings, name, None)
            if isinstance(buffer, torch.Tensor) and buffer.shape[-1] < size:
                swaps.append((embeddings, name, _extended(buffer, size, arange=name == "position_ids")))
        with captured_inputs(model) as state:
            positions = PerTextPositions(table, self.rule(table, base), state, base)
            with patched_attributes([*swaps, (embeddings, "position_embeddings", positions)]):
                yield


def _extended(buffer: torch.Tensor, size: int, *, arange: bool) -> torch.Tensor:
    """A (1, size) copy of a (1, rows) buffer: positions 0..size-1, or the token types padded with type 0."""
    if arange:
        return torch.arange(size, dtype=buffer.dtype, device=buffer.device).expand((1, -1))
    tail = buffer.new_zeros((*buffer.shape[:-1], size - buffer.shape[-1]))
    return torch.cat([buffer, tail], dim=-1)


class PerTextPositions(nn.Module):
    """The model's position table for texts of at most ``base`` tokens, ``rule`` for longer ones.

    Lengths are each text's own (the attention mask, `captured_inputs`), never the padded width.
    """

    def __init__(self, table: nn.Embedding, rule: Rule, state: dict, base: int) -> None:
        super().__init__()
        self.table = table
        self.rule = rule
        self.state = state
        self.base = base

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        lengths = self.state.get("lengths")
        if lengths is None or (lengths.shape[0] != position_ids.shape[0] and position_ids.shape[0] != 1):
            lengths = torch.full((position_ids.shape[0],), position_ids.shape[1])
        lengths = lengths.to(position_ids.device)
        position_ids = position_ids.expand(lengths.shape[0], -1)
        # Rows of short texts in a batch wider than the table: only their padding can pass its end.
        out = self.table(position_ids.clamp(max=self.table.num_embeddings - 1))
        longer = lengths > self.base
        if bool(longer.any()):
            out[longer] = self.rule(position_ids[longer], lengths[longer]).to(out.dtype)
        return out


class GroupedPositions(_PositionRule):
    """``ape-gp:S[:L0]``: position p of a text of n > L0 tokens reads row p // ceil(n / L0)."""

    method = "ape-gp"

    def length_free_up_to(self, model: nn.Module, context: ModelContext) -> int | None:
        return self.base(model.config, context)  # the group size grows with n past L0

    def rule(self, table: nn.Embedding, base: int) -> Rule:
        def grouped(positions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            group = torch.div(lengths + base - 1, base, rounding_mode="floor")  # ceil(n / L0)
            return table((positions // group[:, None]).clamp(max=base - 1))  # the clamp reaches padding only

        return grouped


class RecurrentPositions(_PositionRule):
    """``ape-rp:S[:L0]``: position p reads row p mod L0 (the identity below L0, so no switch is needed)."""

    method = "ape-rp"

    def rule(self, table: nn.Embedding, base: int) -> Rule:
        return lambda positions, lengths: table(positions % base)


class InterpolatedPositions(_PositionRule):
    """``ape-pi:S[:L0]``: a text of n > L0 tokens reads position p / s, linear between the two rows around it;
    shorter texts keep their positions (LongEmbed, Appendix B)."""

    method = "ape-pi"

    def params(self) -> dict:
        return {**super().params(), "original_positions_up_to": "L0", "past_row_L0-1": "row L0-1"}

    def length_free_up_to(self, model: nn.Module, context: ModelContext) -> int | None:
        return self.base(model.config, context)

    def rule(self, table: nn.Embedding, base: int) -> Rule:
        factor = self.factor

        def interpolated(positions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            scaled = positions.double() / factor
            low = scaled.floor().long().clamp(max=base - 1)
            high = (low + 1).clamp(max=base - 1)
            weight = (
                torch.where(high > low, scaled - low, 0.0).float().unsqueeze(-1)
            )  # past row L0 - 1: that row
            return table(low).float() * (1 - weight) + table(high).float() * weight

        return interpolated
