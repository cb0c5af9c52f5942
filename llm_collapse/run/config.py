"""`CompareConfig`: what a comparison run does. Precedence: command line > YAML file > defaults.

The defaults are the embedded default run: the models that install offline, base + TempScale + one RoPE
baseline, on sotu and passkey, sized for a 2-core CPU in about 10 minutes. All validation happens in
`CompareConfig.validate`, so a bad value fails before any model is loaded.

Each field's ``help`` is the flag's help text (`llm_collapse.run.arguments.add_arguments` adds its default
once: the value, or the field's ``default`` text where the value is None); this module imports no torch, so
``llm-collapse compare --help`` stays fast.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from llm_collapse.adapters import ECHO_PREFIX, register_embedder, resolve_spec
from llm_collapse.adapters.folder import FOLDER_PREFIXES
from llm_collapse.adapters.spec import POOLINGS
from llm_collapse.backends import BACKENDS, QUANTIZATIONS
from llm_collapse.data.synthetic import MAX_DOCUMENTS
from llm_collapse.errors import UserError
from llm_collapse.interventions import Method, parse_method
from llm_collapse.records.claims import check_claims
from llm_collapse.records.saved_embeddings import EMBEDDING_DTYPES
from llm_collapse.tasks.registry import KNN_NEIGHBOURS as KNN_K
from llm_collapse.tasks.registry import PLACED_FOLDS, RUNNABLE, binned_tasks, tasks_with
from llm_collapse.tasks.settings import PLACED_DEPTHS, PLACED_PROBES, TaskSettings
from llm_collapse.utils.types import matches
from llm_collapse.utils.yamlfile import read_yaml_mapping, short_repr, type_name

TASKS: list[str] = RUNNABLE  # the registry's list: a task registered later is accepted too
DESIGNS: tuple[str | None, ...] = (None, "bins", "prefix")  # None: prefix where the corpus allows, else bins
DEFAULT_LABELS = {"sotu": "party", "movie_reviews": "sentiment", "kjv": "testament"}
LABEL_TASKS = ("knn", "placed")  # the tasks that read --label
PLACED_FILLER = ("kjv", "sotu")  # the placed task's default filler corpus, and the one when --corpus is kjv
# Options that enter run_id only when set (see run_id); design "bins" counts as unset (it was the default
# before 2026-12-05, so those runs keep their id) and an unset design enters as "auto".
_HASHED_IF_SET: tuple[str, ...] = (
    "pooling",
    "design",
    "prefix_docs",
    "quants",
    "embedder_specs",
    "retrieval_pool",
    "reference_model",
    "controls",
    "claims",
    "placed_filler",
    "placed_depths",
    "placed_probes",
)

# where the run goes, how its report reads it, what it keeps besides results, where it computes: not what it
# computes (`CompareConfig.run_id`)
_NOT_HASHED = ("out", "margins", "save_embeddings", "device", "limit")  # limit: its caps are hashed
DEVICES = "auto, cpu, cuda, cuda:N or mps"
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:(0|[1-9][0-9]{0,2}))?")  # ASCII digits, no leading zero, < 1000


def valid_device(text: object) -> bool:
    """Whether ``text`` is a --device value (`DEVICES`); ``cuda:00``, ``cuda:٣`` or a 20-digit index are not."""
    return isinstance(text, str) and _DEVICE.fullmatch(text) is not None


class ConfigError(UserError, ValueError):
    """A configuration value that is not allowed; the message is one line."""


@dataclass
class CompareConfig:
    """One comparison run: models x methods x tasks x lengths."""

    models: list[str] = field(
        default_factory=lambda: ["minilm", "gemma3-270m", "echo-gemma3-270m"],
        metadata={
            "help": "embedders, comma-separated; llm-collapse list models names them; echo:<model> wraps "
            "any causal decoder, st:FOLDER reads a sentence-transformers folder, hf:FOLDER a Hugging Face one"
        },
    )
    embedder_specs: list[str] | None = field(
        default=None,
        metadata={
            "help": "embedder spec file (YAML/JSON; format in llm_collapse.adapters.spec_file) registered before "
            "--models is read, so its names can be used there; repeat the flag for several"
        },
    )
    methods: list[str] = field(
        default_factory=lambda: ["base", "tempscale:0.8", "ntk:4e6"],
        metadata={
            "help": "interventions, comma-separated, e.g. base,tempscale:0.8,ntk:1e5,yarn:8,yarn:8:af1; "
            "llm-collapse list methods names them"
        },
    )
    tasks: list[str] = field(
        default_factory=lambda: ["collapse", "passkey"],
        metadata={"help": f"comma-separated, of {', '.join(TASKS)}"},
    )
    corpus: str = field(
        default="sotu", metadata={"help": "text source of collapse, knn and layerwise"}
    )  # `add_arguments` appends the registered corpora
    lengths: list[int] = field(
        default_factory=lambda: [64, 128, 256, 512],
        metadata={
            "help": "token-length targets, comma-separated (bins [t, 1.1 t) for collapse; passkey/needle "
            "document lengths)"
        },
    )
    backend: str = field(default="hf", metadata={"help": " or ".join(BACKENDS)})
    dtype: str | None = field(
        default=None,
        metadata={
            "help": "auto (bf16 on AMX CPUs and bf16 GPUs, else fp32), bf16, fp16 or fp32",
            "default": "auto",
        },
    )
    device: str = field(
        default="auto",
        metadata={
            "help": f"where models run: {DEVICES} (auto: CUDA where present, else CPU); not part of the run id, "
            "so a run resumed on another device keeps its folder"
        },
    )
    quant: str | None = field(
        default=None,
        metadata={"help": f"bitsandbytes quantization: {' or '.join(QUANTIZATIONS)}", "default": "none"},
    )
    quants: list[str] | None = field(
        default=None,
        metadata={
            "help": "variants the quantization task compares with the unquantized model, comma-separated, of "
            f"{', '.join(QUANTIZATIONS)}",
            "default": "all of them",
        },
    )
    pooling: str | None = field(
        default=None,
        metadata={
            "help": f"override every model's pooling: {' or '.join(POOLINGS)}",
            "default": "each model's own",
        },
    )
    model_paths: dict[str, str] = field(
        default_factory=dict,
        metadata={"help": "load model NAME from a local folder or .gguf file; repeat the flag for several"},
    )
    max_per_bin: int = field(default=24, metadata={"help": "texts per length bin (collapse, knn, layerwise)"})
    design: str | None = field(
        default=None,
        metadata={
            "help": "prefix (the first L tokens of the same documents at every length: paired across lengths) "
            "or bins (different texts per length bin)",
            "default": "prefix where the corpus gives the documents, else bins",
        },
    )
    prefix_docs: int | None = field(
        default=None, metadata={"help": "documents of the prefix design", "default": "--max-per-bin"}
    )
    retrieval_docs: int = field(
        default=20, metadata={"help": "passkey/needle candidates per length (LongEmbed: 100)"}
    )
    retrieval_queries: int = field(
        default=10, metadata={"help": "passkey/needle queries per length (LongEmbed: 50)"}
    )
    retrieval_pool: int | None = field(
        default=None,
        metadata={
            "help": "candidates per query: each length's documents are split into pools of this many and a "
            "query ranks its own pool, so chance is 1/pool at every --retrieval-docs",
            "default": "all documents of the length, as LongEmbed",
        },
    )
    layerwise_per_bin: int = field(default=8, metadata={"help": "texts per bin for the per-layer analysis"})
    limit: int | None = field(
        default=None,
        metadata={
            "help": "a quick look: at most N texts per length in every task (caps --max-per-bin, --prefix-docs, "
            "--retrieval-docs, --retrieval-queries and --layerwise-per-bin; the report says so)",
            "default": "no cap",
        },
    )
    label: str | None = field(
        default=None,
        metadata={
            "help": "document label for the kNN probe",
            "default": ", ".join(f"{label} for {corpus}" for corpus, label in DEFAULT_LABELS.items()),
        },
    )
    placed_filler: str | None = field(
        default=None,
        metadata={
            "help": "corpus whose sentences surround the placed task's passages (its label must not be in them)",
            "default": f"{PLACED_FILLER[0]}, or {PLACED_FILLER[1]} when --corpus is {PLACED_FILLER[0]}",
        },
    )
    placed_depths: list[float] | None = field(
        default=None,
        metadata={
            "help": "where the placed task's passage sits in its filler, comma-separated, 0 (first) .. 1 (last)",
            "default": ",".join(map(str, PLACED_DEPTHS)),
        },
    )
    placed_probes: list[str] | None = field(
        default=None,
        metadata={
            "help": f"the placed task's label probes, comma-separated, of {', '.join(PLACED_PROBES)}",
            "default": ",".join(PLACED_PROBES),
        },
    )
    reference_model: str | None = field(
        default=None,
        metadata={
            "help": "one of --models that every other model is compared with, method by method, paired over "
            "the same items (*_vs_reference rows: echo against classical on the same texts and queries)"
        },
    )
    controls: dict[str, str] = field(
        default_factory=dict,
        metadata={
            "help": "METHOD=CONTROL pairs of --methods: each method is also compared with its matched control, "
            "paired over the same items (*_vs_control rows: YaRN against its temperature alone); repeat "
            "the flag for several"
        },
    )
    margins: dict[str, float] = field(
        default_factory=dict,
        metadata={
            "help": "METRIC=MARGIN equivalence margins for the report's readings (a change that is not "
            "significant reads 'equivalent within ±MARGIN' when two one-sided tests reject, else "
            "'inconclusive'); overrides the defaults of llm_collapse.metrics.proportions.DEFAULT_MARGINS; "
            "repeat the flag for several"
        },
    )
    claims: list[dict] = field(
        default_factory=list,
        metadata={
            "help": "claims the run tests, declared before it runs (--config only: a list of {claim, metric, "
            "method, length, asks, margin, margin_reason}); run.json records them and the report opens with "
            "their verdicts (llm_collapse.records.claims)",
            "yaml_only": True,
        },
    )
    batch_size: int = field(default=16, metadata={"help": "most texts per forward pass"})
    seed: int = field(default=0, metadata={"help": "sampling and generation seed"})
    save_embeddings: str | None = field(
        default=None,
        metadata={
            "help": "keep every vector the tasks embed in embeddings.npz in --out, as "
            f"{' or '.join(EMBEDDING_DTYPES)} (a bare flag: {EMBEDDING_DTYPES[0]}; float32 makes --recompute "
            "exact), so that 'llm-collapse report --recompute RUN' rebuilds every metric without the model",
            "default": "not kept",
        },
    )
    out: str = field(default="reports/default", metadata={"help": "run directory"})

    # --- resolution and validation --------------------------------------------------------------------

    def validate(self) -> CompareConfig:
        """Checks every value that needs no file, model or package; raises a one-line `UserError`.

        The checks run in this order, so the first problem of a command line is the one reported. Environment
        checks (paths, writable folders, installed backends, corpus contents) are in
        `llm_collapse.run.preflight`, which runs before any model loads.
        """
        check_types(vars(self), source="configuration")
        self._apply_limit()
        self._register_spec_files()
        for name in ("models", "methods", "tasks"):
            if not getattr(self, name):
                raise ConfigError(f"--{name} is empty; name at least one (e.g. --{name} {_EXAMPLES[name]})")
        self._validate_models()
        slug_of = self._validate_methods()
        self._validate_controls(slug_of)
        self._validate_margins()
        self.claims = check_claims(
            self.claims, models=self.models, slug_of=slug_of, tasks=self.tasks, lengths=self.lengths,
            error=ConfigError,
        )  # fmt: skip
        self._validate_tasks_and_corpus()
        self._validate_runtime()
        self._validate_sizes()
        self.lengths = sorted(set(self.lengths))
        return self

    def _register_spec_files(self) -> None:
        """Registers each ``--embedder-spec`` file (`llm_collapse.adapters.register_embedder`), so the models it
        defines resolve in the checks that follow; a bad file is a `SpecError`, one line naming the file, the
        key and what is allowed. Registering the same file again is a no-op."""
        for spec_file in self.embedder_specs or []:
            register_embedder(spec_file)

    def _validate_models(self) -> None:
        """Every model resolves and is named once; ``reference_model`` and ``model_paths`` name models of the run."""
        canonical = {}
        for name in self.models:
            try:
                spec, _ = resolve_spec(name)  # UnknownNameError with a suggestion
            except ValueError as err:
                raise ConfigError(str(err)) from None
            key = _model_key(name, spec.name)
            if key in canonical:
                raise ConfigError(
                    f"--models names {spec.name!r} twice ({canonical[key]!r} and {name!r}); list each once"
                )
            canonical[key] = name
        if self.reference_model is not None and self.reference_model not in self.models:
            raise ConfigError(
                f"--reference-model {self.reference_model!r} is not in --models {self.models}; name one of them "
                "(the others are compared with it) or leave it unset"
            )
        if self.reference_model is not None and len(self.models) < 2:
            raise ConfigError(
                f"--reference-model compares the other --models with {self.reference_model!r}, but there is no "
                "other; add a model or leave it unset"
            )
        for path_name in self.model_paths:
            if path_name not in self.models:
                raise ConfigError(f"--model-path names {path_name!r}, which is not in --models {self.models}")

    def _validate_methods(self) -> dict[str, str]:
        """Every method parses (`InterventionError` naming the parameter) and is listed once; returns each
        method's slug by its text."""
        slugs: dict[str, str] = {}
        for method in self.parsed_methods():  # InterventionError naming the parameter
            if method.slug in slugs:
                raise ConfigError(
                    f"--methods {slugs[method.slug]!r} and {method.text!r} are the same intervention "
                    f"({method.slug}); list it once"
                )
            slugs[method.slug] = method.text
        return {method: slug for slug, method in slugs.items()}

    def _validate_tasks_and_corpus(self) -> None:
        """Known tasks, each once; a corpus of the registry or ``folder:PATH``; lengths of at least 8 tokens."""
        for task in self.tasks:
            if task not in TASKS:
                raise ConfigError(f"Unknown task {task!r}; available: {', '.join(TASKS)}")
        if len(set(self.tasks)) < len(self.tasks):
            raise ConfigError(f"--tasks lists a task twice ({','.join(self.tasks)}); list each once")
        from llm_collapse.data import CORPORA

        if self.corpus.startswith("folder:"):
            if not self.corpus.removeprefix("folder:").strip():
                raise ConfigError("--corpus folder: needs a path, e.g. --corpus folder:/data/my_texts")
        else:
            CORPORA.get(self.corpus)
        if not self.lengths or any(n < 8 for n in self.lengths):
            raise ConfigError(f"--lengths must be integers >= 8, got {self.lengths}")

    def _validate_runtime(self) -> None:
        """Backend, dtype, device, quantization and pooling are values the package knows."""
        if self.backend not in BACKENDS:
            raise ConfigError(f"Unknown backend {self.backend!r}; available: {', '.join(BACKENDS)}")
        from llm_collapse.backends.device import DTYPE_NAMES  # imports torch: not at module level

        if self.dtype is not None and self.dtype not in DTYPE_NAMES:
            raise ConfigError(f"Unknown --dtype {self.dtype!r}; allowed: {', '.join(DTYPE_NAMES)}")
        if not valid_device(self.device):
            raise ConfigError(
                f"Unknown --device {self.device!r}; allowed: {DEVICES} (N: the GPU's index), e.g. --device cpu"
            )
        if self.quant is not None and self.quant not in QUANTIZATIONS:
            raise ConfigError(f"Unknown --quant {self.quant!r}; allowed: {', '.join(QUANTIZATIONS)}")
        self._validate_quants()
        if self.pooling is not None and self.pooling not in POOLINGS:
            raise ConfigError(f"Unknown --pooling {self.pooling!r}; allowed: {', '.join(POOLINGS)}")

    def _validate_sizes(self) -> None:
        """Counts, the design, the seed and the retrieval pools; the output folder and saved-vector dtype."""
        for name in ("max_per_bin", "retrieval_docs", "retrieval_queries", "layerwise_per_bin", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.design not in DESIGNS:
            raise ConfigError(f"Unknown --design {self.design!r}; allowed: bins, prefix")
        if self.prefix_docs is not None and self.prefix_docs < 1:
            raise ConfigError(f"--prefix-docs must be >= 1, got {self.prefix_docs}")
        if self.prefix_docs is not None and self.design == "bins":
            raise ConfigError(
                "--prefix-docs applies to --design prefix only; drop --design bins or --prefix-docs"
            )
        if self.seed < 0:
            raise ConfigError(f"--seed must be >= 0, got {self.seed}; e.g. --seed 0")
        if self.retrieval_queries > self.retrieval_docs:
            raise ConfigError("--retrieval-queries must be <= --retrieval-docs")
        self._validate_task_options()
        if self.retrieval_pool is not None and (
            self.retrieval_pool < 2 or self.retrieval_docs % self.retrieval_pool
        ):
            raise ConfigError(
                f"--retrieval-pool must be >= 2 and divide --retrieval-docs ({self.retrieval_docs}), got "
                f"{self.retrieval_pool}; e.g. --retrieval-docs 96 --retrieval-pool 24"
            )
        if not self.out.strip():
            raise ConfigError("--out is empty; give a run folder, e.g. --out reports/my_run")
        if self.save_embeddings not in (None, *EMBEDDING_DTYPES):
            raise ConfigError(
                f"--save-embeddings {self.save_embeddings!r} is not one of {', '.join(EMBEDDING_DTYPES)}; "
                "e.g. --save-embeddings float32 (or the bare flag: float16)"
            )

    def _validate_task_options(self) -> None:
        """Options that belong to one kind of task: refused without it (they would change the run id and
        nothing else), and checked against what the task can do with them."""
        retrieval_tasks = tasks_with(reads_corpus=False)  # they generate their own documents and queries
        retrieval = sorted(retrieval_tasks & set(self.tasks))
        if self.retrieval_pool is not None and not retrieval:
            raise ConfigError(
                f"--retrieval-pool applies to the retrieval tasks ({', '.join(sorted(retrieval_tasks))}) only; "
                "add one to --tasks or drop --retrieval-pool"
            )
        if self.label is not None and not set(LABEL_TASKS) & set(self.tasks):
            raise ConfigError(
                f"--label applies to --tasks {' or '.join(LABEL_TASKS)} only; add one to --tasks or drop --label"
            )
        for task in retrieval:
            limit = MAX_DOCUMENTS.get(task)
            if limit is not None and self.retrieval_docs > limit:
                raise ConfigError(
                    f"--retrieval-docs {self.retrieval_docs} is more than task {task!r} can generate "
                    f"({limit} documents per length); use --retrieval-docs <= {limit}"
                )
        if retrieval and self.retrieval_pool is None and self.retrieval_docs < 2:
            raise ConfigError(
                f"--retrieval-docs {self.retrieval_docs} leaves each query a single candidate, so Acc@1 is always 1; "
                "use --retrieval-docs >= 2"
            )
        self._validate_posthoc()
        self._validate_placed()
        for task in sorted(set(LABEL_TASKS) & set(self.tasks)):
            if self.knn_label is None:
                raise ConfigError(
                    f"the {task} task needs --label for corpus {self.corpus!r} (sotu: party, movie_reviews: "
                    "sentiment)"
                )
        if "knn" in self.tasks:
            per_length = self.prefix_docs or self.max_per_bin
            if per_length <= KNN_K:
                flag = "--prefix-docs" if self.prefix_docs else "--max-per-bin"
                raise ConfigError(
                    f"{flag} {per_length} is too few texts per length for the kNN probe: each text needs "
                    f"k = {KNN_K} neighbours of its own length; use {flag} >= {KNN_K + 1}"
                )

    def _validate_placed(self) -> None:
        """The placed task's options: only with it; depths in [0, 1] and probes known, each once; a filler corpus
        other than --corpus; enough passages per length for the probes' folds and neighbours."""
        options = ("placed_filler", "placed_depths", "placed_probes")
        if "placed" not in self.tasks:
            for name in options:
                if getattr(self, name) is not None:
                    flag = "--" + name.replace("_", "-")
                    raise ConfigError(
                        f"{flag} applies to --tasks placed only; add placed to --tasks or drop {flag}"
                    )
            return
        depths = self.placed_depths
        if depths is not None and (
            not depths or len(set(depths)) < len(depths) or any(not 0 <= d <= 1 for d in depths)
        ):
            raise ConfigError(
                f"--placed-depths must be distinct numbers in [0, 1] (0: the passage first, 1: last), got {depths}"
            )
        probes = self.placed_probes
        if probes is not None and (
            not probes or len(set(probes)) < len(probes) or set(probes) - set(PLACED_PROBES)
        ):
            raise ConfigError(
                f"--placed-probes must name each of {', '.join(PLACED_PROBES)} at most once, got {probes}"
            )
        from llm_collapse.data import CORPORA

        filler = self.filler_corpus
        if not filler.startswith("folder:"):
            CORPORA.get(filler)
        if filler == self.corpus:
            raise ConfigError(
                f"--placed-filler {filler} is the passages' own corpus, so the filler would carry the label; "
                f"choose another corpus, e.g. --placed-filler {PLACED_FILLER[self.corpus == PLACED_FILLER[0]]}"
            )
        least = 2 * max(PLACED_FOLDS, KNN_K + 1)  # two labels: folds of each, and k neighbours of a length
        if self.max_per_bin < least:
            raise ConfigError(
                f"--max-per-bin {self.max_per_bin} is too few passages per length for the placed task's probes "
                f"({PLACED_FOLDS} folds of each label, k = {KNN_K} neighbours); use --max-per-bin >= {least}"
            )

    def _validate_posthoc(self) -> None:
        """A post-hoc method (`llm_collapse.interventions.posthoc`) needs enough texts per length to fit."""
        from llm_collapse.interventions.posthoc import MIN_ITEMS

        per_length = self.prefix_docs or self.max_per_bin
        flag = "--prefix-docs" if self.prefix_docs else "--max-per-bin"
        for method in self.parsed_methods():
            posthoc = method.posthoc
            if posthoc is not None and per_length < MIN_ITEMS[posthoc.name]:
                raise ConfigError(
                    f"--methods {method.text!r}: {posthoc.slug} needs at least {MIN_ITEMS[posthoc.name]} texts per "
                    f"length to fit, {flag} gives {per_length}; use {flag} >= {MIN_ITEMS[posthoc.name]}"
                )

    def _validate_margins(self) -> None:
        """Each ``margins`` key is a metric a task writes and each value a positive finite number."""
        from llm_collapse.tasks.registry import METRICS

        for metric, margin in self.margins.items():
            if metric not in METRICS or "_vs_" in metric:
                raise ConfigError(
                    f"--margin {metric}={margin}: {metric!r} is not a metric a task writes; name one of "
                    "llm_collapse.tasks.registry.METRICS, e.g. pairwise_cosine or acc@1"
                )
            if not 0 < margin < math.inf:
                raise ConfigError(
                    f"--margin {metric}={margin}: a margin must be a positive number on the metric's scale, "
                    f"e.g. --margin {metric}=0.01"
                )

    def _validate_controls(self, slug_of: dict[str, str]) -> None:
        """Each ``controls`` pair names two different --methods (``slug_of``: method -> its slug), neither of
        them base (every method already has its ``*_vs_base`` rows)."""
        for method, control in self.controls.items():
            for name in (method, control):
                if name not in slug_of:
                    raise ConfigError(
                        f"--control {method}={control}: {name!r} is not in --methods {self.methods}; add it "
                        "there or drop the pair"
                    )
            if slug_of[method] == slug_of[control]:
                raise ConfigError(f"--control {method}={control} pairs a method with itself; name another")
            if "base" in (slug_of[method], slug_of[control]):
                raise ConfigError(
                    f"--control {method}={control}: every method is already paired with base (`*_vs_base`); "
                    "name two non-base methods"
                )

    def _validate_quants(self) -> None:
        """``quants`` belongs to the quantization task, which needs base, hf and an unquantized reference;
        unset, it becomes every quantization when the task is asked for."""
        if "quantization" not in self.tasks:
            if self.quants is not None:
                raise ConfigError(
                    "--quants applies to --tasks quantization only; add that task or drop --quants"
                )
            return
        if self.quants is None:
            self.quants = list(QUANTIZATIONS)
        if not self.quants:
            raise ConfigError(f"--quants is empty; name at least one of {', '.join(QUANTIZATIONS)}")
        for quant in self.quants:
            if quant not in QUANTIZATIONS:
                raise ConfigError(f"Unknown --quants entry {quant!r}; allowed: {', '.join(QUANTIZATIONS)}")
        if len(set(self.quants)) < len(self.quants):
            raise ConfigError(
                f"--quants lists a quantization twice ({','.join(self.quants)}); list each once"
            )
        if self.quant is not None:
            raise ConfigError(
                f"--tasks quantization compares --quants with the unquantized model, but --quant {self.quant} "
                "quantizes it; drop --quant"
            )
        if self.backend != "hf":
            raise ConfigError(
                f"--tasks quantization loads bitsandbytes variants, which backend {self.backend!r} cannot; "
                "use --backend hf"
            )
        if all(method.slug != "base" for method in self.parsed_methods()):
            raise ConfigError(
                "--tasks quantization measures the model without interventions; add base to --methods"
            )

    @property
    def knn_label(self) -> str | None:
        return self.label or DEFAULT_LABELS.get(self.corpus)

    @property
    def filler_corpus(self) -> str:
        """The placed task's filler corpus: ``placed_filler``, or the default (`PLACED_FILLER`)."""
        if self.placed_filler is not None:
            return self.placed_filler
        return PLACED_FILLER[1] if self.corpus == PLACED_FILLER[0] else PLACED_FILLER[0]

    def parsed_methods(self) -> list[Method]:
        """``methods`` as typed values (`llm_collapse.interventions.parse_method`, the one parse of a method's
        text): the run, its plan, checks and estimate read these."""
        return [parse_method(method) for method in self.methods]

    def task_settings(self) -> TaskSettings:
        """What the tasks read of this configuration."""
        return TaskSettings(
            corpus=self.corpus,
            seed=self.seed,
            batch_size=self.batch_size,
            tasks=tuple(self.tasks),
            knn_label=self.knn_label,
            retrieval_pool=self.retrieval_pool,
            layerwise_per_bin=self.layerwise_per_bin,
            quants=tuple(self.quants or ()),
            placed_probes=tuple(self.placed_probes or PLACED_PROBES),
        )

    def _apply_limit(self) -> None:
        """``--limit N`` caps every count of texts per length at N (the capped counts define the run)."""
        if self.limit is None:
            return
        if self.limit < 2:
            raise ConfigError(f"--limit must be >= 2 (texts per length), got {self.limit}; e.g. --limit 8")
        self.max_per_bin = min(self.max_per_bin, self.limit)
        self.prefix_docs = None if self.prefix_docs is None else min(self.prefix_docs, self.limit)
        self.retrieval_docs = min(self.retrieval_docs, self.limit)
        self.retrieval_queries = min(self.retrieval_queries, self.retrieval_docs)
        self.layerwise_per_bin = min(self.layerwise_per_bin, self.limit)

    def run_id(self) -> str:
        """Hash of everything that defines the results (not where they go).

        Options added later (`_HASHED_IF_SET`) count only when set: older runs keep their id. ``device`` is not
        hashed: a device changes the numbers only by rounding, like a batch composition, so the same run on
        another device is the same run (resumed in the same folder); the embedding cache keeps devices apart
        (`llm_collapse.encoding.keys.cache_key` holds the device type), so a resumed run never mixes vectors of two
        device types, and run.json records the device it ran on.
        """
        unset = (None, "bins", {})
        data = {
            k: v
            for k, v in asdict(self).items()
            if k not in _NOT_HASHED
            and not (k in _HASHED_IF_SET and (v in unset or (k == "claims" and not v)))
        }
        if self.design is None and binned_tasks() & set(self.tasks):
            data["design"] = "auto"  # prefix where the corpus allows (`llm_collapse.run.inputs`)
        if "embedder_specs" in data:  # what a spec file says defines the results, not where it lies
            data["embedder_specs"] = [_file_digest(path) for path in data["embedder_specs"]]
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        return asdict(self)

    # --- construction -----------------------------------------------------------------------------------

    @classmethod
    def from_values(cls, values: dict) -> CompareConfig:
        """The config of a flat mapping of option names to values (a run.json's ``config``), not validated."""
        return cls(**values)

    @classmethod
    def from_sources(cls, cli: dict, yaml_path: str | None = None) -> CompareConfig:
        """Defaults, overridden by the YAML file, overridden by command-line values that were given."""
        values = asdict(cls())
        if yaml_path:
            values.update(_read_yaml(yaml_path))
        values.update({k: v for k, v in cli.items() if v is not None})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown configuration keys {unknown}; allowed: {sorted(known)}")
        check_types(values, source=f"--config {yaml_path!r}" if yaml_path else "configuration")
        return cls(**values).validate()


def _model_key(name: str, spec_name: str) -> str:
    """What makes two --models entries the same model: the catalog name, or for a folder (st:, hf:, echo:PATH) its
    kind and resolved path, so ``st:DIR``, ``st:DIR/`` and a symlink to DIR are one model."""
    for prefix in (*FOLDER_PREFIXES, ECHO_PREFIX):
        if name.lower().startswith(prefix) and Path(name[len(prefix) :]).expanduser().exists():
            return prefix + str(Path(name[len(prefix) :]).expanduser().resolve())
    return spec_name


def _file_digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).expanduser().read_bytes()).hexdigest()
    except OSError:
        return path


def _read_yaml(path: str) -> dict:
    """The YAML file's mapping with ``-`` in keys read as ``_``; every problem is one `ConfigError` line."""
    data = read_yaml_mapping(
        path, what=f"--config {path!r}", example="option: value, e.g. 'models: [minilm]'", error=ConfigError
    )
    values: dict = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name in values:
            spelled = " and ".join(repr(k) for k in data if k.replace("-", "_") == name)
            raise ConfigError(f"--config {path!r} sets {name} twice (as {spelled}); keep one of them")
        values[name] = value
    return values


def check_types(values: dict, *, source: str) -> None:
    """Raises `ConfigError` for the first value whose type differs from its `CompareConfig` field.

    Strict on purpose (`llm_collapse.utils.types.matches`): YAML's ``8.5``, ``true`` or ``"8"`` are not
    silently coerced to integers, a bare string is not a list (``models: minilm`` must be ``models:
    [minilm]``), and a list of names holds no empty string.
    """
    for f in fields(CompareConfig):
        if f.name not in values:
            continue
        value = values[f.name]
        empty_name = isinstance(value, list) and any(isinstance(x, str) and not x.strip() for x in value)
        if not matches(value, f.type) or empty_name:
            raise ConfigError(
                f"{source} value {f.name}: {short_repr(value)} ({type_name(value)}) must be {_MUST[f.type]}"
            )


_MUST = {
    "list[str]": "a list of strings, e.g. [a, b]",
    "list[int]": "a list of integers, e.g. [64, 128]",
    "list[float] | None": "a list of numbers, e.g. [0, 0.5, 1] (or null for the default)",
    "int": "an integer",
    "list[str] | None": "a list of strings, e.g. [a, b] (or null for the default)",
    "int | None": "an integer (or null for the default)",
    "str": "a string",
    "str | None": "a string (or null for the default)",
    "dict[str, str]": "a mapping of strings, e.g. {name: path} or {method: control}",
    "dict[str, float]": "a mapping of metric names to numbers, e.g. {pairwise_cosine: 0.01}",
    "list[dict]": "a list of mappings, one per claim (llm_collapse.records.claims)",
}
_EXAMPLES = {"models": "minilm", "methods": "base", "tasks": "collapse"}
