"""SelfExtend (Jin et al. 2024, "LLM Maybe LongLM"), as LongEmbed applies it to embedding models.

Definition (causal, the reference)
    Two position maps share one attention. Within a neighbour window ``w`` a query at position i and a key at
    position j (j <= i) see their normal relative distance ``i - j``. Farther away (``i - j >= w``) both use grouped
    positions with group size ``g``: the query sits at ``i // g + (w - w // g)``, the key at ``j // g``, so grouped
    distances continue where the window ends and then grow g times slower. Per (i, j) pair the logit comes from the
    neighbour map when ``i - j < w`` and from the grouped map otherwise; softmax runs over the merged row. With every
    distance below ``w`` (in particular any input of at most ``w`` tokens) the model is unchanged.

    Distances are taken between the *position ids* the model receives (the backend derives them from the attention
    mask), not between tensor indices, so left and right padding give the same result.

Mechanism: re-rotating already-rotated q and k
    The intervention never re-implements a model's forward. It routes every attention module through a registered
    attention function (`routed_attention`). That function receives q and k already rotated by RoPE at their true
    positions. Rotations compose, ``R(new) x = R(new - pos) R(pos) x``, so the grouped q/k are obtained by a pure
    rotation by ``new - pos`` (cos/sin built here from the layer's ``inv_freq``, without the rotary
    ``attention_scaling``, which is already inside q and k). ``inv_freq`` is located at enter time: the rotary
    module of the (sub-)model that holds the attention module (``rotary_emb.inv_freq``, or Gemma 3's per-layer-type
    ``{layer_type}_inv_freq``), and is read at call time so that dynamic RoPE updates are seen. At enter time the
    rotation is also checked numerically against the model file's own ``apply_rotary_pos_emb`` (transformers'
    ``q * cos + rotate_half(q) * sin`` with ``emb = cat(freqs, freqs)``); an unknown convention raises.

    Everything else follows the model's eager attention: the ``scaling`` argument the module passes (so TempScale,
    which changes ``module.scaling``, composes), Gemma 2's logit softcap (applied to the merged logits, before the
    mask), the mask the model built (boolean or additive; sliding windows stay exactly as the mask encodes them; with
    no mask, causal when the module is causal), softmax in float32, grouped-query heads sharing their key/value head.
    Logits are computed in float32.

Bidirectional models (LongEmbed's E5-RoPE rule)
    For a non-causal backbone (NV-Embed, E5-RoPE) keys after the query (j > i) use the mirrored rule of
    LongEmbed's ``e5rope_self_extend_forward`` (``src/self_extend_patch.py``; the LongLM reference is
    causal-only): neighbour logit when ``j - i < w``, otherwise grouped with the shift on the *key* side (key at
    ``j // g + (w - w // g)``, query at ``i // g``, its ``apply_grouped_rotary_pos_emb_upper``; merged as
    ``tril(lower) + triu(upper, 1)``). The grouped relative distance is then symmetric:
    ``|i//g - j//g| + (w - w//g)`` on both sides. The rule is applied wherever the mask lets a query see a later
    key; a causal model's mask never does, so causal models get exactly the reference.

Memory and speed
    Queries are processed in chunks of at most 1024 rows (fewer when ``batch * heads * keys`` is large), so logits
    take O(L x chunk) memory per layer, never O(L^2) at once. Each chunk's logits are computed only over the
    span of keys that some pair of the chunk may attend to (the causal past; a sliding-window layer's band), which
    is exact: the keys left out would get probability 0. On an 8k text of gemma3-270m (15 of its 18 layers slide
    over 512 keys) all keys took 2.27x the time of the span (`experiments/bench_selfextend.py`). The grouped
    logits of a chunk are only computed when some unmasked pair of that chunk lies beyond the window.

Composition
    SelfExtend is a ``"rope"`` intervention (it changes positions): `Stack` refuses it together with another RoPE
    intervention. It replaces the attention computation, so an intervention that wraps the attention function must
    be entered *after* it: `Stack` enters it first whatever the spec order; entering SelfExtend on an already
    routed model (nested ``intervene`` blocks the other way round) raises.

    vLLM cannot express it (`SelfExtend.vllm_settings` raises `NotApplicable`): it computes attention itself.

Reference settings (LongEmbed, Zhu et al. 2024, Appendix B Table 6; trained length 4096)
    e5-mistral: (g, w) = (3, 2048) for 8k, (5, 1024) for 16k, (9, 512) for 32k. E5-RoPE-Base (512 -> 1k/2k/4k):
    (3, 256), (5, 128), (9, 64). ``selfextend:G:W`` is the bare rule. LongEmbed's patches also switch grouping
    off below the trained length L0 (Mistral: sequences of at most 4096 tokens; E5-RoPE: fewer than 512), scale
    the queries by a log factor and run without Mistral's sliding window: the ``longembed-se:G:W`` preset
    (`llm_collapse.interventions.longembed`) adds those, using ``min_length`` here for the switch.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import sys
from collections.abc import Iterator

import torch
from torch import nn

from llm_collapse.interventions.attention import (
    attention_modules,
    call_positions,
    captured_inputs,
    routed_attention,
)
from llm_collapse.interventions.base import (
    Intervention,
    InterventionError,
    ModelContext,
    NotApplicable,
    VLLMSettings,
    not_on_vllm,
)
from llm_collapse.metrics.attention import attendable, mask_allows, mask_rows

__all__ = ["SelfExtend"]

_MAX_QUERY_CHUNK = 1024
# Most logits per chunk tensor (float32): 2**26 elements = 256 MiB.
_MAX_CHUNK_ELEMENTS = 1 << 26
_ROUTED_PREFIX = "llm_collapse_"


class SelfExtend(Intervention):
    """SelfExtend with group size ``g`` and neighbour window ``w`` (see the module docstring).

    Args:
        group_size: g >= 1 (g = 1 leaves every position unchanged).
        window: w >= 1 tokens of normal relative positions.
        min_length: Texts with fewer tokens (their own count, not the padded batch length) keep plain
            attention; None: grouping applies to every text (LongEmbed's switch-off rule, for its presets).
    """

    kind = "rope"
    replaces_attention = True

    def __init__(self, group_size: int, window: int, *, min_length: int | None = None) -> None:
        self.group_size = _check_int("group_size", group_size)
        self.window = _check_int("window", window)
        self.min_length = None if min_length is None else _check_int("min_length", min_length)

    @property
    def slug(self) -> str:
        since = "" if self.min_length is None else f"-from{self.min_length}"
        return f"selfextend-g{self.group_size}-w{self.window}{since}"

    def params(self) -> dict:
        params = {"group_size": self.group_size, "window": self.window}
        if self.min_length is not None:
            params["min_length"] = self.min_length
        return params

    def length_free_up_to(self, model: nn.Module, context: ModelContext) -> int | None:
        """``min_length - 1`` under the switch (shorter texts keep plain attention), else None: grouping reads
        position ids only, so a prefix's states are the long input's."""
        return None if self.min_length is None else self.min_length - 1

    def vllm_settings(self, config, context: ModelContext) -> VLLMSettings:
        raise not_on_vllm(self.slug, "it computes attention itself (grouped and neighbour logits)")

    @contextlib.contextmanager
    def _apply(self, model: nn.Module, context: ModelContext) -> Iterator[None]:
        name = (
            context.name
            if context.name != ModelContext().name
            else getattr(model.config, "model_type", "model")
        )
        sources = _inv_freq_sources(model, name)
        _check_not_routed(model)
        _check_rotation_convention(model, sources)

        def wrap(original, module):
            source = sources.get(id(module))
            if source is None:  # not an attention module seen at enter time: leave it alone
                return original
            return functools.partial(
                _selfextend_attention,
                inv_freq_source=source,
                group_size=self.group_size,
                window=self.window,
                captured=captured,
                min_length=self.min_length,
            )

        with (
            captured_inputs(model) as captured,
            routed_attention(model, wrap, tag="selfextend", tensor_masks=True),
        ):
            yield


def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InterventionError(f"{name}={value!r} is not allowed; {name} must be an integer >= 1")
    if int(value) < 1:
        raise InterventionError(f"{name}={value!r} is not allowed; {name} must be an integer >= 1")
    return int(value)


# ----------------------------------------------------------------------------- enter-time discovery


def _rotary_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Modules holding RoPE inverse frequencies: ``inv_freq`` or per-layer-type ``<type>_inv_freq`` buffers."""
    found = []
    for name, module in model.named_modules():
        buffers = [b for b, _ in module.named_buffers(recurse=False)]
        if any(
            b == "inv_freq" or (b.endswith("_inv_freq") and not b.endswith("original_inv_freq"))
            for b in buffers
        ):
            found.append((name, module))
    return found


def _inv_freq_sources(model: nn.Module, model_name: str) -> dict[int, tuple[nn.Module, str]]:
    """Maps each attention module (by id) to (rotary module, name of its inv_freq buffer)."""
    modules = attention_modules(model)
    rotaries = _rotary_modules(model)
    if not rotaries:
        raise NotApplicable(f"selfextend needs a RoPE model; {model_name} uses absolute positions")
    if not modules:
        raise InterventionError(
            f"selfextend: {model_name} has no attention module with a `scaling` attribute"
        )
    sources: dict[int, tuple[nn.Module, str]] = {}
    for name, module in modules:
        # The rotary module of the innermost (sub-)model containing this attention module.
        owners = [(rname, rotary) for rname, rotary in rotaries if _contains(_parent(rname), name)]
        if not owners:
            raise InterventionError(f"selfextend: no rotary embedding found for attention module {name!r}")
        _, rotary = max(owners, key=lambda item: len(item[0]))
        layer_type = getattr(module, "layer_type", None)
        config_types = getattr(module.config, "layer_types", None)
        if layer_type is None and config_types is not None and getattr(module, "layer_idx", None) is not None:
            layer_type = config_types[module.layer_idx]
        if layer_type is not None and isinstance(
            getattr(rotary, f"{layer_type}_inv_freq", None), torch.Tensor
        ):
            sources[id(module)] = (rotary, f"{layer_type}_inv_freq")
        elif isinstance(getattr(rotary, "inv_freq", None), torch.Tensor):
            sources[id(module)] = (rotary, "inv_freq")
        else:
            raise InterventionError(
                f"selfextend: cannot find the inverse frequencies of attention module {name!r} "
                f"(layer type {layer_type!r}) on {type(rotary).__name__}"
            )
    return sources


def _parent(name: str) -> str:
    return name.rpartition(".")[0]


def _contains(prefix: str, name: str) -> bool:
    return prefix == "" or name == prefix or name.startswith(prefix + ".")


def _check_not_routed(model: nn.Module) -> None:
    for _, module in attention_modules(model):
        implementation = module.config._attn_implementation
        if implementation.startswith(_ROUTED_PREFIX):
            raise InterventionError(
                f"selfextend replaces the attention computation, but attention is already routed through "
                f"{implementation!r}; apply selfextend first (earlier in the Stack)"
            )


def _check_rotation_convention(model: nn.Module, sources: dict[int, tuple[nn.Module, str]]) -> None:
    """Checks `_rotate` against each model file's own ``apply_rotary_pos_emb`` on a random vector."""
    checked: set[type] = set()
    for _, module in attention_modules(model):
        cls = type(module)
        if cls in checked or id(module) not in sources:
            continue
        checked.add(cls)
        apply_rope = getattr(sys.modules[cls.__module__], "apply_rotary_pos_emb", None)
        if apply_rope is None:
            raise InterventionError(
                f"selfextend: cannot verify the RoPE convention of {cls.__name__} "
                f"({cls.__module__} has no apply_rotary_pos_emb)"
            )
        rotary, attribute = sources[id(module)]
        inv_freq = getattr(rotary, attribute).detach().float().cpu()
        head_dim = int(getattr(module, "head_dim", 2 * inv_freq.numel()))
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(1, 1, 3, head_dim, generator=generator)
        positions = torch.tensor([[0.0, 5.0, 17.0]])
        freqs = positions[..., None] * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)  # (1, 3, rot)
        try:
            expected, _ = apply_rope(x, x, emb.cos(), emb.sin())
        except Exception as error:  # noqa: BLE001 - any failure means an unknown convention
            raise InterventionError(
                f"selfextend: cannot verify the RoPE convention of {cls.__name__}: {type(error).__name__}: {error}"
            ) from None
        if not torch.allclose(_rotate(x, positions, inv_freq), expected, atol=1e-5, rtol=1e-5):
            raise InterventionError(
                f"selfextend: {cls.__name__} uses a RoPE convention other than rotate_half; not supported"
            )


# ----------------------------------------------------------------------------- attention


def _rotate(x: torch.Tensor, shift: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Pure RoPE rotation of ``x`` (B, H, L, d) by ``shift`` (B, L) positions (rotate_half convention).

    Only the first ``2 * len(inv_freq)`` dimensions rotate (partial rotary); no attention scaling is applied.
    """
    rot = 2 * inv_freq.numel()
    angles = shift.to(torch.float32)[..., None] * inv_freq.to(
        device=x.device, dtype=torch.float32
    )  # (B, L, rot/2)
    emb = torch.cat((angles, angles), dim=-1)[:, None]  # (B, 1, L, rot)
    x_rot = x[..., :rot]
    half = rot // 2
    rotated_half = torch.cat((-x_rot[..., half:], x_rot[..., :half]), dim=-1)
    out = x_rot * emb.cos() + rotated_half * emb.sin()
    if rot == x.shape[-1]:
        return out
    return torch.cat((out, x[..., rot:]), dim=-1)


def _key_span(allowed: torch.Tensor) -> slice:
    """The contiguous keys ``[first, last + 1)`` that some pair of a chunk may attend to (``allowed``: (B, 1, c, L));
    all keys when none may. A padding row that may attend to nothing gets its uniform softmax over the span instead
    of all keys; no real token reads it."""
    columns = allowed.any(dim=(0, 1, 2)).nonzero()
    if columns.numel() == 0:
        return slice(0, allowed.shape[-1])
    return slice(int(columns[0]), int(columns[-1]) + 1)


def _selfextend_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *,
    inv_freq_source: tuple[nn.Module, str],
    group_size: int,
    window: int,
    captured: dict,
    min_length: int | None = None,
    scaling: float | None = None,
    dropout: float = 0.0,
    softcap: float | None = None,
    sliding_window: int | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """SelfExtend attention with the signature of transformers' attention functions.

    Long because it follows the reference implementation's one function step by step (neighbour and grouped
    positions, the merge by distance, softcap, masks), so it can be read against it line by line.

    Args:
        module: The calling attention module.
        query: (B, H, L, d), rotated at the true positions.
        key: (B, H_kv, L, d), rotated at the true positions.
        value: (B, H_kv, L, d).
        attention_mask: (B, 1, L, L) boolean (True = attend) or additive float; (B, L) key padding; or None.
        inv_freq_source: (rotary module, name of its inverse-frequency buffer), read at call time.
        group_size: g.
        window: w.
        captured: `captured_inputs`' state: the ``position_ids`` the model was given (fallback when the module
            passes none) and each text's token count.
        min_length: Rows (texts) with fewer tokens keep plain attention; None: none do.
        scaling: Logit scale the module passes (``module.scaling``; TempScale changes it).
        dropout: Attention dropout (applied only in training mode).
        softcap: Gemma 2's logit softcap ``c``: ``tanh(x / c) * c`` on the merged logits, before the mask.
        sliding_window: Used only when no 4D mask is given (a 4D mask already encodes the window).
        is_causal: Overrides ``module.is_causal``; used only when no 4D mask is given.
        **kwargs: ``position_ids`` (B, L) and whatever else the module passes (ignored).

    Returns:
        ``(output (B, L, H, d), None)`` like ``eager_attention_forward`` (no attention weights).
    """
    batch, heads, q_len, head_dim = query.shape
    kv_heads, k_len = key.shape[1], key.shape[2]
    if q_len != k_len:
        raise InterventionError(
            f"selfextend supports full-sequence forward passes only (no KV cache); got {q_len} queries "
            f"and {k_len} keys"
        )
    if heads % kv_heads:
        raise InterventionError(
            f"selfextend: {heads} query heads are not a multiple of {kv_heads} key/value heads"
        )
    if scaling is None:
        scaling = float(getattr(module, "scaling", head_dim**-0.5))
    causal = getattr(module, "is_causal", True) if is_causal is None else bool(is_causal)
    rotary, attribute = inv_freq_source
    inv_freq = getattr(rotary, attribute)
    device = query.device
    n_rep = heads // kv_heads

    pos = call_positions(kwargs, captured, batch, k_len, device)  # (B, L)
    grouping = None  # (B, 1, 1, 1): rows long enough for grouping (min_length)
    if min_length is not None:
        lengths = captured.get("lengths")
        if lengths is None or lengths.shape[0] != batch:
            lengths = torch.full((batch,), k_len, device=device)
        grouping = (lengths.to(device) >= min_length).view(batch, 1, 1, 1)
    shift = window - window // group_size
    group = torch.div(pos, group_size, rounding_mode="floor")
    q = query.float()
    k = key.float()
    k_far = _rotate(k, group - pos, inv_freq)  # key at j // g

    def grouped(t: torch.Tensor) -> torch.Tensor:  # (B, H, c, d) -> (B, H_kv, n_rep, c, d)
        return t.view(batch, kv_heads, n_rep, t.shape[2], t.shape[3])

    k_t = k.transpose(-1, -2)[:, :, None]  # (B, H_kv, 1, d, L)
    k_far_t = k_far.transpose(-1, -2)[:, :, None]
    v = value[:, :, None]  # (B, H_kv, 1, L, d)
    mask_4d = attention_mask is not None and attention_mask.dim() == 4
    output = torch.empty(batch, heads, q_len, value.shape[-1], dtype=value.dtype, device=device)
    chunk = max(1, min(_MAX_QUERY_CHUNK, _MAX_CHUNK_ELEMENTS // max(1, batch * heads * k_len)))

    for start in range(0, q_len, chunk):
        rows = slice(start, min(start + chunk, q_len))
        c = rows.stop - rows.start
        if mask_4d:
            mask = mask_rows(attention_mask, rows)[..., :k_len].to(device)
            allowed = mask_allows(mask)
        else:
            mask = None
            allowed = attendable(
                k_len,
                rows,
                causal=causal,
                sliding_window=sliding_window,
                key_mask=attention_mask,
                device=device,
            )
        keys = _key_span(allowed)
        n_keys = keys.stop - keys.start
        allowed = allowed[..., keys]
        if mask is not None:
            mask = mask[..., keys]
        distance = (pos[:, rows, None] - pos[:, None, keys])[:, None]  # (B, 1, c, k): query pos - key pos
        far_lower = (distance >= window) & allowed
        far_upper = (distance <= -window) & allowed
        if grouping is not None:
            far_lower, far_upper = far_lower & grouping, far_upper & grouping

        logits = torch.matmul(grouped(q[:, :, rows]), k_t[..., keys]).view(batch, heads, c, n_keys) * scaling
        # Grouped logits: for j <= i the query sits at i // g + (w - w // g); for j > i (mirrored rule) the shift
        # moves to the key side, which for the logit is the same as the query at i // g - (w - w // g).
        for far_pairs, query_shift in ((far_lower, shift), (far_upper, -shift)):
            if far_pairs.any():
                q_far = _rotate(q[:, :, rows], (group + query_shift - pos)[:, rows], inv_freq)
                far = torch.matmul(grouped(q_far), k_far_t[..., keys]).view(batch, heads, c, n_keys) * scaling
                logits = torch.where(far_pairs, far, logits)
                del q_far, far
        if softcap is not None:
            logits = torch.tanh(logits / softcap) * softcap
        if mask is not None and mask.dtype != torch.bool:
            logits = logits + mask.to(torch.float32)
        else:
            logits = logits.masked_fill(~allowed, torch.finfo(torch.float32).min)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32).to(value.dtype)
        del logits
        probs = nn.functional.dropout(probs, p=dropout, training=module.training)
        # (B, H_kv, n_rep, c, d)
        out = torch.matmul(probs.view(batch, kv_heads, n_rep, c, n_keys), v[..., keys, :])
        output[:, :, rows] = out.view(batch, heads, c, -1)
    return output.transpose(1, 2).contiguous(), None
