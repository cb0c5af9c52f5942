"""The transformers/Accelerate backend: load a base model (never an LM head) and return token states.

Decisions:
- ``AutoModel`` loads the *base* model, so no logits are ever computed (Gemma 3's 262k-vocabulary head
  would need 34 GB at 32k tokens); a ``*ForCausalLM`` checkpoint's ``lm_head`` is simply not loaded.
- Any weight the checkpoint lacks is an error: embeddings from randomly initialised weights are never
  produced. Extra weights (the unused LM head of a causal checkpoint) are allowed and logged.
- ``device_map="auto"`` shards over all GPUs when there is more than one; bitsandbytes quantization
  (``"nf4"``, ``"int8"``) works on CPU as well as CUDA.
- Position ids are computed from the attention mask, so left padding gives the same positions as right
  padding (matters for absolute-position models such as BERT).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import transformers
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import llm_collapse.backends.banded_attention  # noqa: F401  (registers attn_implementation="banded")
import llm_collapse.backends.chunked_attention  # noqa: F401  (registers attn_implementation="chunked")
import llm_collapse.backends.fused_attention  # noqa: F401  (registers attn_implementation="fused")
from llm_collapse.adapters.inputs import EncodedText
from llm_collapse.adapters.spec import EmbedderSpec
from llm_collapse.backends import QUANTIZATIONS
from llm_collapse.backends.attention_direction import set_attention_direction
from llm_collapse.backends.base import Backend, ForwardOutput
from llm_collapse.backends.device import dtype_name
from llm_collapse.backends.weights import WeightsLocation
from llm_collapse.interventions.base import ModelContext, Stack
from llm_collapse.interventions.rope import rotary_modules
from llm_collapse.models import text_config
from llm_collapse.utils.optional import require

logger = logging.getLogger(__name__)

MIXES_ROWS: dict[str, str] = {
    "int8": (
        "bitsandbytes LLM.int8 splits off, per forward, every activation column in which any token exceeds its "
        "outlier threshold (6.0), so a text's states depend on the other tokens of the forward (batch mates, "
        "and the tokens after a shared prefix)"
    ),
}
"""`Backend.mixes_rows` by quantization. nf4 quantizes weights only (activations stay in the compute dtype),
so its rows stay independent; measured on the tiny Gemma 3: 1 - cosine 4e-5 between an int8 text embedded
alone and in a batch of three (nf4: 1e-7, float rounding), 7e-5 for a 16-token prefix alone vs shared."""


BNB_CAST_LOGGER = "bitsandbytes.autograd._functions"
"""bitsandbytes logs "MatMul8bitLt: inputs will be cast from ... to float16" at WARNING on every int8 matmul
(15,120 lines in one quant32k log); `_FirstOfEach` keeps the first of each."""


class _FirstOfEach(logging.Filter):
    """Passes each distinct message template once, drops its repeats."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = str(record.msg)
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


def _log_bnb_cast_once() -> None:
    cast_logger = logging.getLogger(BNB_CAST_LOGGER)
    if not any(isinstance(f, _FirstOfEach) for f in cast_logger.filters):
        cast_logger.addFilter(_FirstOfEach())


class HFBackend(Backend):
    """Loads ``spec`` from ``weights`` with transformers and runs batches through it (a `Backend` that returns
    token states; interventions act on its torch module).

    Args:
        spec: The embedder spec (loader, accepted architectures, attention implementation).
        weights: Resolved local folder.
        device: Target device; with several CUDA devices the model is sharded with ``device_map="auto"``.
        dtype: Compute dtype (bitsandbytes uses it as the compute dtype).
        quantization: None, ``"nf4"`` or ``"int8"`` (bitsandbytes).
    """

    name = "hf"
    returns_pooled = False
    mixes_rows: str
    spec: EmbedderSpec
    weights: WeightsLocation
    dtype: torch.dtype
    tokenizer: Any

    def __init__(
        self,
        spec: EmbedderSpec,
        weights: WeightsLocation,
        *,
        device: torch.device,
        dtype: torch.dtype,
        quantization: str | None = None,
    ) -> None:
        check_transformers_version(spec)
        self.spec, self.weights, self.dtype, self.quantization = spec, weights, dtype, quantization
        self.mixes_rows = MIXES_ROWS.get(quantization or "", "")
        checkpoint_type = model_type(weights.directory)
        if spec.architectures and checkpoint_type not in spec.architectures:
            raise ValueError(
                f"The checkpoint at {weights.directory} is a {checkpoint_type!r} model; {spec.name!r} expects "
                f"{' or '.join(map(repr, spec.architectures))}. Check path= or pick another embedder."
            )
        self.tokenizer = load_tokenizer(weights.directory)
        kwargs = {
            "dtype": dtype,
            "attn_implementation": spec.attn_implementation,
            "output_loading_info": True,
        }
        if quantization is not None:
            # NV-Embed's latent-attention pooler stays in full precision: only the backbone is quantized.
            skip = ["latent_attention_model"] if spec.loader == "nv-embed" else None
            kwargs["quantization_config"] = _bnb_config(quantization, dtype, skip_modules=skip)
        if device.type == "cuda" and torch.cuda.device_count() > 1 and device.index is None:
            kwargs["device_map"] = "auto"
        else:
            kwargs["device_map"] = {"": str(device)}
        if spec.loader == "nv-embed":
            from llm_collapse.models.nv_embed import load_nv_embed

            model = load_nv_embed(
                weights.directory, **{k: v for k, v in kwargs.items() if k != "output_loading_info"}
            )
        else:
            model, info = transformers.AutoModel.from_pretrained(weights.directory, **kwargs)
            _check_loading(weights.directory, info)
            set_attention_direction(model, spec.attention)  # gte-Qwen2: trained bidirectionally
        model.eval()
        if hasattr(model.config, "use_cache"):
            model.config.use_cache = False
        self.model = model
        self.input_device = next(model.parameters()).device

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def max_positions(self) -> int | None:
        return getattr(text_config(self.model.config), "max_position_embeddings", None)

    @property
    def has_rope(self) -> bool:
        """Whether the model has a rotary-embedding module built from its config."""
        return bool(rotary_modules(self.model))

    @property
    def config(self):
        """The model's own config (the window intervention patches it in place while active)."""
        return self.model.config

    @property
    def torch_model(self) -> torch.nn.Module:
        return self.model

    @torch.inference_mode()
    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, output_hidden_states: bool = False
    ) -> ForwardOutput:
        input_ids = input_ids.to(self.input_device)
        attention_mask = attention_mask.to(self.input_device)
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, L)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            output_hidden_states=output_hidden_states,
        )
        return ForwardOutput(out.last_hidden_state, out.hidden_states if output_hidden_states else None)

    def embed(self, items: Sequence[EncodedText], *, pooling: str) -> torch.Tensor:
        """Not this backend's path: it returns token states (`forward`) and `Embedder` pools them."""
        raise NotImplementedError("backend='hf' returns token states (forward); Embedder pools them itself")

    def intervene(self, stack: Stack, context: ModelContext) -> contextlib.AbstractContextManager:
        """Enters the intervention objects on the torch module (each restores it exactly on exit)."""
        return stack.apply(self.model, context)

    def describe(self) -> dict:
        config = self.model.config
        return {
            "backend": self.name,
            "weights": self.weights.describe(),
            "dtype": dtype_name(self.dtype),
            "quantization": self.quantization,
            "device": str(self.input_device),
            "attn_implementation": getattr(config, "_attn_implementation", self.spec.attn_implementation),
            "model_type": config.model_type,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            # only where set, so every other cache key stays as it was (vectors batched before this was known)
            **({"one_text_per_forward": True} if self.mixes_rows else {}),
        }


def check_transformers_version(spec: EmbedderSpec) -> None:
    """Refuses a transformers version the adapter was not built and tested for."""
    version = Version(transformers.__version__)
    if version not in SpecifierSet(spec.transformers, prereleases=True):
        raise RuntimeError(
            f"{spec.name!r} supports transformers {spec.transformers}, but {version} is installed; "
            f"install a supported version: pip install 'transformers{spec.transformers}'"
        )


def model_type(directory: Path) -> str:
    """The checkpoint's ``model_type`` from its ``config.json`` (``"unknown"`` when absent)."""
    config = json.loads((directory / "config.json").read_text())
    return str(config.get("model_type", "unknown"))


def load_tokenizer(directory: Path, *, gguf_file: Path | None = None):
    """The checkpoint's tokenizer (``gguf_file``: read from an unconverted GGUF, as ``--dry-run`` does)."""
    extra = {"gguf_file": gguf_file.name} if gguf_file is not None else {}
    # Never run a checkpoint's own code (NV-Embed-v2's config carries an auto_map to remote code).
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory, trust_remote_code=False, **extra)
    # Lengths are capped by the adapter, not by the tokenizer: silence "sequence longer than" warnings.
    tokenizer.model_max_length = 1 << 30
    return tokenizer


def _bnb_config(quantization: str, dtype: torch.dtype, *, skip_modules: list[str] | None = None):
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"Unknown quantization {quantization!r}; allowed: None, {', '.join(QUANTIZATIONS)}")
    require("bitsandbytes", extra="quant", purpose=f"quantization={quantization!r}")
    if quantization == "nf4":
        return transformers.BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=dtype,
            bnb_4bit_use_double_quant=True,
            llm_int8_skip_modules=skip_modules,
        )
    _log_bnb_cast_once()
    return transformers.BitsAndBytesConfig(load_in_8bit=True, llm_int8_skip_modules=skip_modules)


def _check_loading(directory: Path, info: dict) -> None:
    missing = sorted(info.get("missing_keys") or [])
    mismatched = sorted(str(k) for k in info.get("mismatched_keys") or [])
    if missing or mismatched:
        raise ValueError(
            f"The checkpoint at {directory} does not provide every weight the model needs "
            f"(missing: {missing[:5]}{'...' if len(missing) > 5 else ''}, size mismatches: {mismatched[:5]}); "
            "refusing to embed with randomly initialised weights"
        )
    if unexpected := info.get("unexpected_keys"):
        logger.info(
            "Ignoring %d checkpoint weights the base model does not use (e.g. %s)",
            len(unexpected),
            sorted(unexpected)[0],
        )
