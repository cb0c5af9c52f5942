"""The tests behind the reports' readings, with Holm's correction across each family.

A reading ("more collapse", "better") is printed only for a change that survives Holm's correction at 5%
across every test of its family (a run report's table; a question of the study); any other change reads
"equivalent within ±m" or "inconclusive" (``n.s.`` for a metric without a margin). Each change is a
`llm_collapse.metrics.contrasts.Contrast`, whose procedure follows from the row (that module's table):

- **paired row** (``*_vs_base``, ``*_vs_shortest``, ``*_vs_base_vs_shortest``, ``*_vs_reference``,
  ``*_vs_control``: the same items on both sides), as `llm_collapse.reporting.reread` left it on loading:
  a paired t row (continuous per-item values: t interval and t-based TOST), a McNemar row (0/1 outcomes:
  Newcombe's interval; its TOST inverts it where the paired table is known), a sign-flip row (0/1
  differences of differences), a ``jackknife t`` row (set-level, `MetricInfo.set_level`: the t(n - 1) test on
  the delete-one jackknife's standard error; rows stored before 2026-12-08 held its normal interval and no
  p-value, so ``se = (high - low) / (2 x 1.96)``; before 2026-12-06 the pairwise cosine's was a percentile
  bootstrap), or a ``paired Wald`` row (any other stored interval without a p-value: ``z = value / se``).
- **proportions on different items** (Acc@1 at two lengths of the bins design, or unpaired tasks):
  Fisher's exact test on the counts (value x n successes of n).
- **other metrics on different items** (or on the same items where the run stored no paired row, e.g. layerwise
  methods against base; conservative there): Wald from the two intervals taken as independent,
  ``z = delta / sqrt(se1^2 + se2^2)``.
- no interval and no counts: untested, never read.

Equivalence: where a change does not survive and its metric has a margin m (`margin_for`: the run's
``margins``, else the defaults), its TOST p (`Contrast.equivalence_p`) is Holm-adjusted across the family's
equivalence tests (a family of its own) and the cell reads "equivalent within ±m" when it survives at 5%. A
Contrast without a standard error or paired table (older or unpaired rows) takes each side's standard error
from that side of its 95% interval (approximate, like the Wald tests).

Intervals are unadjusted 95% intervals; p-values are Holm-adjusted. Decisions: one family per table in a run
report (a reader scans a table as one claim set) and per question in the study; Holm rather than Bonferroni
(uniformly more powerful, same guarantee); tests are recomputed from the loaded rows, so reports of earlier
runs get them too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy import stats as sps

from llm_collapse.metrics.contrasts import (
    JACKKNIFE_T,
    Contrast,
    binary_from_counts,
    jackknife_from_interval,
    t_from_p,
)
from llm_collapse.metrics.stats import holm_adjust
from llm_collapse.reporting.reread import COUNT_COLUMNS
from llm_collapse.tasks.registry import VS_INTERACTION, margin_for, metric_info

ALPHA = 0.05
_Z = float(sps.norm.ppf(0.975))

KINDS: dict[str, str] = {
    "McNemar": "exact McNemar test on the paired items (interval: Newcombe's)",
    "paired t": "paired t-test on the per-item differences (t interval)",
    "sign-flip": "exact sign-flip test on the per-item differences of differences (0/1 outcomes; t interval)",
    "Welch t": "Welch's t-test of the per-item method - base differences between two lengths' other texts "
    "(--design bins; Welch-Satterthwaite df)",
    "jackknife t": "t-test with n - 1 df on the delete-one jackknife's standard error (set-level statistics: the "
    "pairwise cosine, the distance to a length's own centroid, the spread and offset, SOCM's pair means; rows stored "
    "before 2026-12-08 without a p-value: the standard error from their normal interval, for the pairwise cosine "
    "before 2026-12-06 a percentile bootstrap's)",
    "paired Wald": "Wald test from the paired 95% interval (a stored row without a p-value or per-item data)",
    "TOST": "two one-sided tests against ±margin (equivalence; Holm across the family's equivalence tests): "
    "t-based for per-item differences, Newcombe's interval inverted for paired 0/1, else z from the interval",
    "Fisher": "Fisher's exact test on the two counts (different items)",
    "Wald": "Wald test from the two 95% intervals taken as independent (different items; conservative for the "
    "same items where the run stored no paired row)",
}
"""Short name of each test (as printed in cells) -> its legend line."""


def _float(row: pd.Series, key: str) -> float:
    value = row.get(key, math.nan)
    return math.nan if value is None else float(value)


def _se(row: pd.Series) -> float:
    low, high = float(row["ci_low"]), float(row["ci_high"])
    return (high - low) / (2 * _Z) if math.isfinite(low) and math.isfinite(high) else math.nan


def _wald(delta: float, se: float, kind: str, n: int = 0) -> Contrast | None:
    if not (math.isfinite(delta) and math.isfinite(se)):
        return None
    low, high = delta - _Z * se, delta + _Z * se
    if se == 0:
        return Contrast(delta, low, high, n, kind, 1.0 if delta == 0 else 0.0)
    return Contrast(delta, low, high, n, kind, float(2 * sps.norm.sf(abs(delta) / se)))


def paired_test(row: pd.Series) -> Contrast | None:
    """The test of one paired contrast row (module docstring)."""
    value, n = float(row["value"]), int(row.get("n", 0))
    low, high = float(row["ci_low"]), float(row["ci_high"])
    p = float(row.get("p_value", math.nan))
    counts = [_float(row, key) for key in COUNT_COLUMNS]
    if all(math.isfinite(c) for c in counts):
        return binary_from_counts(tuple(int(c) for c in counts))
    metric = str(row.get("metric", ""))
    quantity = metric_info(metric.split("_vs_", 1)[0])
    if math.isfinite(p):
        continuous = not quantity.proportion
        paired = JACKKNIFE_T if quantity.set_level else "paired t"
        kind = paired if continuous else "sign-flip" if metric.endswith(VS_INTERACTION) else "McNemar"
        named = row.get("test")  # a test the metric does not imply (`reread`: Welch's), else "" or absent
        kind = named if isinstance(named, str) and named else kind
        se, df = _float(row, "se"), _float(row, "df")
        if math.isfinite(se):  # read on loading (`llm_collapse.reporting.reread`)
            return Contrast(value, low, high, n, kind, p, se, df if math.isfinite(df) else math.inf)
        if continuous:
            return replace(t_from_p(value, p, n, low, high), test=kind)
        return Contrast(value, low, high, n, kind, p)
    if quantity.set_level:  # stored before 2026-12-08 and not read again (`reread`)
        return jackknife_from_interval(value, low, high, n)
    return _wald(value, _se(row), "paired Wald", n)


def unpaired_test(metric: str, a: pd.Series, b: pd.Series) -> Contrast | None:
    """The test of ``b - a`` for two rows on different items (module docstring)."""
    if metric_info(metric).proportion:
        na, nb = int(a["n"]), int(b["n"])
        if na > 0 and nb > 0 and math.isfinite(float(a["value"])) and math.isfinite(float(b["value"])):
            ka, kb = round(float(a["value"]) * na), round(float(b["value"]) * nb)
            table = [[ka, na - ka], [kb, nb - kb]]
            delta = float(b["value"]) - float(a["value"])
            wald = _wald(delta, math.hypot(_se(a), _se(b)), "Fisher")
            interval = (wald.low, wald.high) if wald is not None else (math.nan, math.nan)
            return Contrast(delta, *interval, na + nb, "Fisher", float(sps.fisher_exact(table).pvalue))
        return None
    delta = float(b["value"]) - float(a["value"])
    return _wald(delta, math.hypot(_se(a), _se(b)), "Wald", int(a["n"]) + int(b["n"]))


def change_test(
    metric: str, start: pd.Series, end: pd.Series, paired: pd.DataFrame, suffix: str
) -> Contrast | None:
    """The test of ``end - start``: the run's paired row ``<metric><suffix>`` at ``end``'s length when there
    is exactly one among ``paired`` (``_vs_shortest``: against the cell's shortest length, which is
    ``start``; ``_vs_base``: against base), else `unpaired_test`."""
    match = paired[(paired["metric"] == metric + suffix) & (paired["length"] == int(end["length"]))]
    return paired_test(match.iloc[0]) if len(match) == 1 else unpaired_test(metric, start, end)


@dataclass(frozen=True)
class Verdict:
    """How one change of a table reads after Holm's correction (module docstring).

    ``kind``: ``survives`` (``p`` is its Holm p), ``equivalent`` (``q``: the Holm p of its equivalence test
    within ±``margin``), ``inconclusive`` (does not survive; its metric has a margin), ``n.s.`` (no margin) or
    ``untested``.
    """

    kind: str
    p: float = math.nan
    margin: float | None = None
    q: float = math.nan


def equivalence_testable(metric: str, test: Contrast) -> bool:
    """Whether ``test`` can place a change of ``metric`` within a margin. Not a 0/1 metric's zero-width interval
    without its paired table: the paired bootstrap that runs before 2026-12-05 stored gives [0, 0] whenever no
    item is discordant, which says nothing about how far apart two accuracies on a few items may be (0 of 24
    discordant still allows a 12% discordance rate); Newcombe's interval, stored since, is never zero-width."""
    return test.counts is not None or not (
        metric_info(metric.split("_vs_", 1)[0]).proportion and test.low == test.high
    )


def holm_verdicts(
    changes: list[tuple[str, float, Contrast | None]], margins: Mapping[str, float] | None = None
) -> list[Verdict]:
    """`Verdict` per ``(metric, delta, test)`` of one family: Holm across the changes' tests, then, for the ones
    that do not survive and whose metric has a margin, Holm across their equivalence tests (a family of its
    own). ``margins`` maps a metric to its margin; the defaults fill in the rest (`margin_for`)."""
    adjusted = holm_adjust([t.p if t is not None else np.nan for _, _, t in changes])
    margin_of = [
        margin_for(metric, margins) if test is not None and not p <= ALPHA else None
        for (metric, _, test), p in zip(changes, adjusted, strict=True)
    ]
    equivalence = holm_adjust(
        [
            test.equivalence_p(m) if m is not None and equivalence_testable(metric, test) else np.nan
            for (metric, _, test), m in zip(changes, margin_of, strict=True)
        ]
    )
    out = []
    for (_, _, test), p, m, q in zip(changes, adjusted, margin_of, equivalence, strict=True):
        if test is None or not math.isfinite(p):
            out.append(Verdict("untested"))
        elif p <= ALPHA:
            out.append(Verdict("survives", p))
        elif m is not None and q <= ALPHA:
            out.append(Verdict("equivalent", p, m, q))
        else:
            out.append(Verdict("n.s." if m is None else "inconclusive", p, m))
    return out


def read_changes(
    changes: list[tuple[str, float, Contrast | None, int]],
    judge,
    margins: Mapping[str, float] | None = None,
) -> list[str]:
    """Cells for a table's changes, Holm-adjusted together; the ones that do not survive get the equivalence
    reading where their metric has a margin (module docstring; `holm_verdicts`).

    Args:
        changes: ``(metric, delta, test or None, digits)`` per cell.
        judge: ``(metric, delta) -> words`` (more/less collapse, better/worse).
        margins: The runs' margin overrides (`ReportData.margins`); the defaults fill in the rest.

    Returns:
        ``+0.123 (more collapse; Fisher, Holm p=0.003)`` for a change that survives ("higher"/"lower"
        for a metric without a direction); for one that does not, ``+0.002 (equivalent within ±0.01;
        TOST, Holm p=0.004)``, ``+0.012 (inconclusive; Wald, Holm p=0.41)``, or ``n.s.`` in place of
        "inconclusive" where the metric has no margin; ``+0.012 (untested)`` without a test.
    """
    verdicts = holm_verdicts([(metric, delta, test) for metric, delta, test, _ in changes], margins)
    cells = []
    for (metric, delta, test, digits), verdict in zip(changes, verdicts, strict=True):
        number = f"{delta:+.{digits}f}" if math.isfinite(delta) else "n/a"
        if verdict.kind == "untested":
            cells.append(f"{number} (untested)")
        elif verdict.kind == "survives":
            words = judge(metric, delta) or ("higher" if delta > 0 else "lower")
            cells.append(f"{number} ({words}; {test.test}, Holm p{p_text(verdict.p)})")
        elif verdict.kind == "equivalent":
            cells.append(f"{number} (equivalent within ±{verdict.margin:g}; TOST, Holm p{p_text(verdict.q)})")
        else:
            cells.append(f"{number} ({verdict.kind}; {test.test}, Holm p{p_text(verdict.p)})")
    return cells


def mark_survivors(rows: list[pd.Series]) -> list[bool]:
    """Which paired contrast rows (each a test of its own: ``value`` = the paired difference) are non-zero
    after Holm's correction across ``rows``."""
    adjusted = holm_adjust([t.p if (t := paired_test(r)) is not None else np.nan for r in rows])
    return [bool(math.isfinite(p) and p <= ALPHA) for p in adjusted]


def p_text(p: float) -> str:
    return "<0.001" if p < 0.001 else f"={p:.3f}"


def legend(kinds: set[str], equivalence: bool = False, tests: int | None = None) -> str:
    """One sentence naming the tests a table used (``equivalence``: some cell has an equivalence reading;
    ``tests``: how many the table's family holds)."""
    rule, names = legend_parts(kinds, equivalence, tests)
    return f"{rule} Tests: " + "; ".join(names) + "."


def legend_parts(
    kinds: set[str], equivalence: bool = False, tests: int | None = None
) -> tuple[str, list[str]]:
    """`legend` as its reading rule and one line per test (``name: what it is``), for a list."""
    otherwise = (
        "otherwise 'equivalent within ±m' where the equivalence test (TOST) against the metric's margin m "
        "survives Holm across the table's equivalence tests, else 'inconclusive' (n.s. for a metric without "
        "a margin)"
        if equivalence
        else "otherwise n.s. (not significant, which is not 'no difference')"
    )
    family = f" (this table's family: {tests} tests)" if tests else ""
    rule = (
        "Readings (more/less collapse, better/worse; higher/lower without a direction) are printed only where "
        f"the change survives Holm's correction at {ALPHA:g} across all tests of the table{family}; {otherwise}. "
        "Intervals are unadjusted 95% intervals; p-values are Holm-adjusted."
    )
    return rule, [f"{name}: {KINDS[name]}" for name in KINDS if name in kinds]


def table_legend(rows, *, parts: bool = False) -> str | tuple[str, list[str]] | None:
    """`legend` for the tests a rendered table's cells name (``parts``: as `legend_parts`), or None when it
    names none."""
    cells = [cell for row in rows for cell in row]
    kinds = kinds_used(cells)
    equivalence = any(
        isinstance(c, str) and ("(equivalent within" in c or "(inconclusive;" in c) for c in cells
    )
    if not kinds:
        return None
    tests = sum(isinstance(c, str) and ", Holm p" in c for c in cells)
    return legend_parts(kinds, equivalence, tests) if parts else legend(kinds, equivalence, tests)


def kinds_used(cells: list[str]) -> set[str]:
    """The test names that occur in rendered cells (for `legend`)."""
    return {name for name in KINDS if any(f"; {name}, Holm" in c for c in cells)}
