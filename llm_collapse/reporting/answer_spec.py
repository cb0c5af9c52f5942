"""What a study answer (or a run's declared claim) cites: the `Answer` record and the questions file's ``answer`` rows.

An ``answer`` row names the paired row that tests a claim (run, model, method, ``task/<paired metric>``, length,
optionally layer and depth), the direction that means "yes" (``asks``) and optionally the equivalence ``margin``
with its ``margin_reason`` (`llm_collapse.records.claims.read_claim` checks them). Two more kinds read what no stored
row holds, from the runs' ``items.parquet`` (`llm_collapse.reporting.item_contrasts`):

- ``sweep: {parameter: tau, identity: 1, values: {tempscale-0.5: 0.5, ...}}`` in place of ``method``: the
  claim about a method with a parameter, read at every value the run swept. It becomes one ``value`` answer
  per method (the stored row; ``asks`` as written below the identity value, the opposite above it) and one
  ``trend`` answer: the change of the row's quantity per unit decrease of the parameter (least squares over the
  values), read in the direction ``asks``.
- ``versus: {run, model, method}``: the row minus the same row of another run, model or method of the same
  items (last-token against mean pooling on the same texts), per item.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llm_collapse.records.claims import read_claim
from llm_collapse.reporting.names import method_cell
from llm_collapse.reporting.tables import length_text

ANSWER_KEYS = ("claim", "run", "model", "method", "metric", "length", "asks")
OPTIONAL_KEYS = ("layer", "depth", "margin", "margin_reason")
EXAMPLE = (
    "e.g. {claim: collapse at 32k, run: tau32k, model: gemma3-270m, method: base, metric: "
    "collapse/global_centroid_distance_vs_shortest, length: 32768, asks: more collapse, margin: 0.01, "
    "margin_reason: ...}"
)
OPPOSITE = {"more collapse": "less collapse", "less collapse": "more collapse", "better": "worse", "worse": "better",
            "more drift": "less drift", "less drift": "more drift", "higher": "lower", "lower": "higher"}  # fmt: skip
KINDS = ("row", "value", "trend", "versus")
"""``row``: a stored paired row; ``value``: the stored row of one value of a sweep; ``trend``: the sweep's trend;
``versus``: a row minus another run's, model's or method's, computed per item."""


@dataclass(frozen=True)
class Answer:
    """The row (or the computation over rows) that answers one claim (module docstring)."""

    claim: str
    run: str
    model: str
    method: str
    task: str
    metric: str
    length: int
    asks: str
    layer: int | None = None
    depth: float | None = None
    margin: float | None = None
    margin_reason: str = ""
    kind: str = "row"
    parameter: str = ""  # the swept parameter's name (value and trend answers)
    sweep: tuple[
        tuple[str, float], ...
    ] = ()  # (method, value) of every value (trend answers); the one (value)
    versus: tuple[str, str, str] | None = None  # (run, model, method) subtracted (versus answers)
    sweep_claim: str = ""  # the claim of the sweep a value or trend answer belongs to

    @property
    def label(self) -> str:
        """How the row is cited: ``run: model / method, task/metric @length`` (and ``layer k``, ``depth d``)."""
        where = "" if self.layer is None else f" layer {self.layer}"
        where += "" if self.depth is None else f" depth {self.depth:g}"
        return (
            f"{self.run}: {self.model} / {method_cell(self.method)}, `{self.task}/{self.metric}`{where} "
            f"{length_text(self.length)}"
        )

    @property
    def reads_items(self) -> bool:
        """Whether the answer is computed from items.parquet (no stored row holds it)."""
        return self.kind in ("trend", "versus")

    def matches(self, claim: dict) -> bool:
        """Whether a run's declared claim (run.json ``config.claims``) is this answer: the same row, direction and
        margin. Only a stored row can be declared by its run."""
        return (
            self.kind in ("row", "value")
            and claim.get("metric") == f"{self.task}/{self.metric}"
            and claim.get("model") == self.model
            and claim.get("method") == self.method
            and claim.get("length") == self.length
            and claim.get("asks") == self.asks
            and claim.get("layer") == self.layer
            and (claim.get("depth") is None if self.depth is None else claim.get("depth") == self.depth)
            and claim.get("margin") == self.margin
        )


def parse_answers(value: object, where: str, error: type[Exception]) -> tuple[Answer, ...]:
    """A question's ``answer``: one mapping or a list of them; a sweep becomes its value and trend answers."""
    items = value if isinstance(value, list) else [value]
    out: list[Answer] = []
    for i, item in enumerate(items, start=1):
        at = f"{where} answer {i}"
        if isinstance(item, dict) and "sweep" in item:
            out += _sweep(item, at, error)
        elif isinstance(item, dict) and "versus" in item:
            out.append(_versus(item, at, error))
        else:
            out.append(parse_answer(item, at, error))
    return tuple(out)


def parse_answer(value: object, where: str, error: type[Exception]) -> Answer:
    """One ``answer`` mapping (`llm_collapse.records.claims.read_claim` with the cited run and model); every problem
    is one ``error`` line naming ``where``."""
    claim = read_claim(
        value, f"{where} answer", error, required=ANSWER_KEYS, optional=OPTIONAL_KEYS, example=EXAMPLE
    )
    fields = (
        "claim",
        "run",
        "model",
        "method",
        "task",
        "metric",
        "length",
        "asks",
        "layer",
        "depth",
        "margin",
    )
    return Answer(**{key: claim[key] for key in fields}, margin_reason=claim["margin_reason"] or "")


def answers_of_run(run: str, claims: list) -> list[tuple[str, str, Answer]]:
    """``(question, family, answer)`` per claim a run declared (run.json ``config.claims``, normalised by
    `llm_collapse.records.claims.check_claims`); the question column is the claim's family."""
    out = []
    for claim in claims:
        task, _, metric = claim["metric"].partition("/")
        fields = {
            key: claim.get(key) for key in ("claim", "model", "method", "length", "asks", "layer", "depth")
        }
        answer = Answer(**fields, run=run, task=task, metric=metric, margin=claim.get("margin"),
                        margin_reason=claim.get("margin_reason") or "")  # fmt: skip
        family = claim.get("family") or "claims"
        out.append((family, family, answer))
    return out


def _sweep(item: dict, where: str, error: type[Exception]) -> list[Answer]:
    sweep = item["sweep"]
    example = "e.g. sweep: {parameter: tau, identity: 1, values: {tempscale-0.5: 0.5, tempscale-1.1: 1.1}}"
    values = sweep.get("values") if isinstance(sweep, dict) else None
    if (
        not isinstance(sweep, dict)
        or set(sweep) != {"parameter", "identity", "values"}
        or not (isinstance(sweep["parameter"], str) and sweep["parameter"].strip())
        or not _number(sweep["identity"])
        or not isinstance(values, dict)
        or len(values) < 2
        or not all(isinstance(m, str) and _number(v) for m, v in values.items())
        or len(set(values.values())) < 2
        or float(sweep["identity"]) in {float(v) for v in values.values()}
        or "method" in item
    ):
        raise error(
            f"{where} sweep must be a mapping of parameter, identity and >= 2 values (method: value, not all equal, "
            f"none the identity value) in place of method, {example}"
        )
    rest = {k: v for k, v in item.items() if k != "sweep"}
    name, identity = sweep["parameter"], float(sweep["identity"])
    first = parse_answer({**rest, "method": next(iter(values))}, where, error)
    out = []
    for method, number in values.items():
        asks = first.asks if number < identity else OPPOSITE[first.asks]
        claim = f"{first.claim} ({name} {number:g})"
        out.append(replace(first, claim=claim, method=method, asks=asks, kind="value", parameter=name,
                           sweep=((method, float(number)),), sweep_claim=first.claim))  # fmt: skip
    pairs = tuple((method, float(number)) for method, number in values.items())
    claim = f"{first.claim}: trend per unit decrease of {name}, over {', '.join(f'{v:g}' for _, v in pairs)}"
    out.append(
        replace(first, claim=claim, kind="trend", parameter=name, sweep=pairs, sweep_claim=first.claim)
    )
    return out


def _versus(item: dict, where: str, error: type[Exception]) -> Answer:
    other = item["versus"]
    if (
        not isinstance(other, dict)
        or set(other) != {"run", "model", "method"}
        or not all(isinstance(v, str) and v.strip() for v in other.values())
    ):
        raise error(f"{where} versus must be a mapping of run, model and method (the row subtracted), e.g. "
                    "versus: {run: tau32k_below1, model: gemma3-270m, method: base}")  # fmt: skip
    answer = parse_answer({k: v for k, v in item.items() if k != "versus"}, where, error)
    return replace(answer, kind="versus", versus=(other["run"], other["model"], other["method"]))


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
