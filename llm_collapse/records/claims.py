"""Claims a run declares before it runs (config ``claims``), and the checks every claim and study answer share.

A claim names the paired row that tests it and the direction that means "yes", fixed before the data exist::

    claims:
      - claim: tau 0.9 shrinks the fall of the paper's distance from 64 to 8k tokens
        metric: collapse/global_centroid_distance_vs_base_vs_shortest   # task/<paired metric>
        method: tempscale:0.9                                            # as in --methods
        length: 8192
        asks: less collapse                                              # one of ASKS
        margin: 0.01                                                     # optional: equivalence within ±margin
        margin_reason: a tenth of base's fall to 8k in the pilot         # required with a margin
        # optional: model (required with several --models), depth (0 start .. 1 end), layer, family

``compare`` checks every claim against the run (its task, method, length and model are the run's) before any
work, records the normalised claims in run.json (methods as their slugs), and the run report opens with their
verdicts (`llm_collapse.reporting.study_summary`), each claim's family its ``family`` (default ``claims``).
The claims enter the run id: a run is the test of the claims it started with, so adding one later makes
another run (`llm_collapse.run.config.CompareConfig.run_id`).

Decision: "declared" means the run's config held the claim when the run started; run.json's ``git_commit`` and
``started`` are the audit trail (the embedding cache makes a rerun cheap, so nothing here can prove a claim was
not written after an earlier run was read; the commit history can).
"""

from __future__ import annotations

import math

from llm_collapse.utils.yamlfile import short_repr

ASKS = ("more collapse", "less collapse", "better", "worse", "more drift", "less drift", "higher", "lower")
"""The directions a claim may ask for (``higher``/``lower`` for metrics without a collapse or quality direction)."""
CLAIM_KEYS = ("claim", "metric", "method", "length", "asks")
CLAIM_OPTIONAL = ("model", "depth", "layer", "margin", "margin_reason", "family")
EXAMPLE = (
    "e.g. {claim: tau 0.9 shrinks the fall to 8k, metric: collapse/global_centroid_distance_vs_base_vs_shortest, "
    "method: tempscale:0.9, length: 8192, asks: less collapse, margin: 0.01, margin_reason: ...}"
)


def read_claim(
    value: object,
    where: str,
    error: type[Exception],
    *,
    required: tuple[str, ...] = CLAIM_KEYS,
    optional: tuple[str, ...] = CLAIM_OPTIONAL,
    example: str = EXAMPLE,
) -> dict:
    """One claim mapping, checked key by key; every problem is one ``error`` line naming ``where``.

    Returns the mapping with ``task`` and ``metric`` split, ``depth`` a float, ``margin`` a float, the reason's
    whitespace collapsed, and every optional key present (None where absent).
    """
    if (
        not isinstance(value, dict)
        or not set(required) <= set(value)
        or not set(value) <= {*required, *optional}
    ):
        raise error(
            f"{where} must be a mapping with exactly the keys {', '.join(required)} (and optionally "
            f"{', '.join(optional)}), {example}"
        )
    strings = [k for k in (*required, "model", "family") if k in value and k != "length"]
    if not all(isinstance(value[k], str) and value[k].strip() for k in strings):
        raise error(f"{where}: {', '.join(strings)} must be non-empty strings, {example}")
    task, _, metric = value["metric"].partition("/")
    if not (task and metric and "_vs_" in metric):
        raise error(f"{where} metric {short_repr(value['metric'])} must be 'task/<paired metric>', {example}")
    if isinstance(value["length"], bool) or not isinstance(value["length"], int) or value["length"] < 1:
        raise error(f"{where} length {short_repr(value['length'])} must be a positive integer, {example}")
    if value["asks"] not in ASKS:
        raise error(f"{where} asks {short_repr(value['asks'])} is not one of {', '.join(ASKS)}")
    layer = value.get("layer")
    if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int) or layer < 0):
        raise error(
            f"{where} layer {short_repr(layer)} must be a non-negative integer (a layer index), {example}"
        )
    depth = value.get("depth")
    if depth is not None and (
        isinstance(depth, bool) or not isinstance(depth, int | float) or not 0 <= depth <= 1
    ):
        raise error(
            f"{where} depth {short_repr(depth)} must be a number from 0 (start) to 1 (end), {example}"
        )
    margin, reason = value.get("margin"), value.get("margin_reason")
    if margin is not None and (
        isinstance(margin, bool) or not isinstance(margin, int | float) or not 0 < margin < math.inf
    ):
        raise error(
            f"{where} margin {short_repr(margin)} must be a positive number on the metric's scale, {example}"
        )
    if (margin is None) != (reason is None) or (
        reason is not None and not (isinstance(reason, str) and reason.strip())
    ):
        raise error(
            f"{where}: a margin needs its margin_reason (a non-empty string) and a reason its margin, {example}"
        )
    out = {key: value.get(key) for key in (*required, *optional)}
    out.update(
        task=task,
        metric=metric,
        depth=None if depth is None else float(depth),
        margin=None if margin is None else float(margin),
        margin_reason=None if reason is None else " ".join(reason.split()),
    )
    return out


def check_claims(claims: list, *, models: list[str], slug_of: dict[str, str], tasks: list[str],
                 lengths: list[int], error: type[Exception]) -> list[dict]:  # fmt: skip
    """The config's ``claims`` checked against the run and normalised for run.json (module docstring).

    ``slug_of`` maps each --methods entry to its slug; a claim may name either. Returns one mapping per claim with
    ``metric`` as ``task/<paired metric>``, ``method`` its slug and ``model`` filled in.
    """
    out, seen = [], set()
    slugs = set(slug_of.values())
    for i, value in enumerate(claims, start=1):
        where = f"claims item {i}"
        claim = read_claim(value, where, error)
        method = slug_of.get(claim["method"], claim["method"])
        if method not in slugs:
            raise error(
                f"{where} method {short_repr(claim['method'])} is not in --methods {list(slug_of)}; name one of them"
            )
        if claim["task"] not in tasks:
            raise error(
                f"{where} metric {claim['task']}/{claim['metric']}: task {short_repr(claim['task'])} is not in --tasks {tasks}"
            )
        if claim["length"] not in lengths:
            raise error(f"{where} length {claim['length']} is not in --lengths {lengths}; name one of them")
        model = claim["model"]
        if model is None and len(models) != 1:
            raise error(f"{where} needs a model: the run has several --models {models}")
        model = model or models[0]
        if model not in models:
            raise error(f"{where} model {short_repr(model)} is not in --models {models}")
        normalised = {
            "claim": " ".join(claim["claim"].split()), "metric": f"{claim['task']}/{claim['metric']}",
            "model": model, "method": method, "length": claim["length"], "asks": claim["asks"],
            "depth": claim["depth"], "layer": claim["layer"], "margin": claim["margin"],
            "margin_reason": claim["margin_reason"], "family": claim["family"] or "claims",
        }  # fmt: skip
        key = tuple(normalised[k] for k in ("metric", "model", "method", "length", "depth", "layer"))
        if key in seen:
            raise error(f"{where} tests the same row as an earlier claim; keep one claim per row")
        seen.add(key)
        out.append(normalised)
    return out
