"""Intervals and equivalence tests for paired outcomes, and the one-word reading of a paired contrast.

Wilson score interval of one proportion (k of n, z = Phi^-1(1 - alpha/2), no continuity correction)::

    (p + z^2/(2n) -+ z sqrt(p(1-p)/n + z^2/(4n^2))) / (1 + z^2/n),   p = k/n

Newcombe's paired difference (Newcombe 1998, Statist. Med. 17:2635-2650, method 10). Paired 0/1 vectors a,
b of n items give the table e = #(1,1), f = #(1,0), g = #(0,1), h = #(0,0); the difference is
``theta = mean(a) - mean(b) = (f - g)/n`` with marginals p1 = (e+f)/n, p2 = (e+g)/n and their Wilson
limits (l1, u1), (l2, u2) at the same alpha::

    L = theta - sqrt((p1-l1)^2 - 2 phi (p1-l1)(u2-p2) + (u2-p2)^2)
    U = theta + sqrt((u1-p1)^2 - 2 phi (u1-p1)(p2-l2) + (p2-l2)^2)
    phi = C / sqrt((e+f)(g+h)(e+g)(f+h)),  C = eh - fg if eh - fg <= 0 else max(eh - fg - n/2, 0)

and phi = 0 when a margin total is 0 (the correlation is undefined; the limits then reduce to the
independent square-and-add of the two Wilson intervals).

Decisions and gotchas:

- The ``n/2`` shift of phi's numerator is part of method 10 as published, not an optional extra: the
  paper's Table III method-10 limits (18 rows as transcribed in public code, ratesci's tests among them;
  the primary PDF was not available here) are reproduced only with it, e.g. (e, f, g, h) = (20, 12, 2,
  16) -> [0.0562, 0.3292] (plain phi: [0.0618, 0.3242]) and (27, 0, 0, 27) -> [-0.0351, 0.0351] (plain
  phi = 1: the degenerate [0, 0]). Fagerland, Lydersen & Laake (2014, Statist. Med. 33:2850) and ratesci
  use the same phi. The Wilson limits themselves carry no continuity correction.
- Newcombe's limits are not the inversion of the exact McNemar test: with 4 of 4 discordant items one way
  in 20 pairs, (7, 4, 0, 9), they are [+0.0001, 0.371] while the exact McNemar p is 0.125. `verdict`
  therefore calls a contrast "different" only when the interval and the test agree.
- TOST (Schuirmann 1987): equivalence within +-margin is shown at level alpha when both one-sided tests
  (H0: delta <= -margin, H0: delta >= +margin) reject at alpha, i.e. when the (1 - 2 alpha) interval lies
  inside (-margin, margin). For 0/1 pairs this interval-inclusion form is used with Newcombe's interval,
  and its p-value is the inversion of the interval family (`tost_newcombe_p`): the least alpha at which
  the (1 - 2 alpha) interval lies inside, so ``p <= alpha`` exactly when the interval test says
  equivalent (Newcombe's intervals nest as alpha grows: checked on 1,500 random tables; the bisection
  relies on it). The level is approximate, as the interval's coverage is, and liberal when
  few items carry every discordant pair one way: at a true difference equal to the margin 0.1 with
  (p11, p10, p01, p00) = (0.4, 0.1, 0, 0.5), P(equivalent) is 0.119 at n = 20 (0.080 at 40, 0.058 at
  100; exact enumeration), against 0.05 nominal. Identical runs of 16 items already read "equivalent
  within +-0.1" (90% limits +-0.095). Read an equivalence of a few dozen paired queries with that in mind.
- Margins are declared, not estimated: each metric's `MetricInfo.margin`, where its task declares it
  (`llm_collapse.tasks.registry.margin_for`), overridable per metric from the config.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

log = logging.getLogger(__name__)

_NAN = float("nan")


@dataclass(frozen=True)
class TostResult:
    """An equivalence test: the point, its (1 - 2 alpha) interval, the TOST p-value (NaN where none)."""

    point: float
    low: float
    high: float
    p_value: float
    margin: float
    equivalent: bool


def _check_alpha(alpha: float, upper: float = 1.0) -> float:
    if not (isinstance(alpha, (int, float)) and 0 < alpha < upper):
        raise ValueError(f"alpha must be a number in (0, {upper:g}), got {alpha!r}")
    return float(alpha)


def check_margin(margin: object, name: str = "margin") -> float:
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 < margin < math.inf:
        raise ValueError(f"{name} must be a positive finite number, got {margin!r}")
    return float(margin)


def wilson_interval(successes: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """(1 - alpha) Wilson score interval for ``successes`` of ``n``; NaN for n = 0.

    scipy's ``binomtest(...).proportion_ci(method="wilson")`` (no continuity correction, limits clipped
    to [0, 1]). Generalises the 95%-only ``llm_collapse.tasks.base.wilson_interval``.
    """
    alpha = _check_alpha(alpha)
    if not (isinstance(successes, (int, np.integer)) and isinstance(n, (int, np.integer))):
        raise ValueError(f"successes and n must be integers, got {successes!r} and {n!r}")
    if not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return _NAN, _NAN
    ci = sps.binomtest(int(successes), int(n)).proportion_ci(confidence_level=1 - alpha, method="wilson")
    return float(ci.low), float(ci.high)


def paired_counts(
    a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray
) -> tuple[int, int, int, int]:
    """The paired table (e, f, g, h) = #(1,1), #(1,0), #(0,1), #(0,0) of two 0/1 vectors."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"paired outcomes need two 1-D vectors of one length, got {a.shape} and {b.shape}")
    if not (np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all()):
        raise ValueError("paired proportions need 0/1 outcomes")
    a1, b1 = a == 1, b == 1
    return int((a1 & b1).sum()), int((a1 & ~b1).sum()), int((~a1 & b1).sum()), int((~a1 & ~b1).sum())


def newcombe_from_counts(e: int, f: int, g: int, h: int, alpha: float = 0.05) -> tuple[float, float, float]:
    """`newcombe_paired_interval` from the paired table (e, f, g, h) (n > 0)."""
    n = e + f + g + h
    p1, p2 = (e + f) / n, (e + g) / n
    l1, u1 = wilson_interval(e + f, n, alpha)
    l2, u2 = wilson_interval(e + g, n, alpha)
    margin_product = (e + f) * (g + h) * (e + g) * (f + h)
    numerator = e * h - f * g
    if numerator > 0:
        numerator = max(numerator - n / 2, 0.0)
    phi = numerator / math.sqrt(margin_product) if margin_product > 0 else 0.0
    # |phi| <= 1 keeps both radicands >= 0; max() only absorbs rounding at phi = 1.
    lower = math.sqrt(max((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0))
    upper = math.sqrt(max((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0.0))
    theta = (f - g) / n
    return theta, max(-1.0, theta - lower), min(1.0, theta + upper)


def newcombe_paired_interval(
    a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, alpha: float = 0.05
) -> tuple[float, float, float]:
    """``(point, low, high)``: Newcombe's (1998) method-10 interval for ``mean(a) - mean(b)`` of paired 0/1.

    See the module docstring for the formula and the continuity-corrected phi it uses. All NaN for
    empty inputs (logged).
    """
    alpha = _check_alpha(alpha)
    e, f, g, h = paired_counts(a, b)
    if e + f + g + h == 0:
        log.warning("newcombe_paired_interval: no paired items; the interval is NaN")
        return _NAN, _NAN, _NAN
    return newcombe_from_counts(e, f, g, h, alpha)


def tost_paired_mean(d: Sequence[float] | np.ndarray, margin: float, alpha: float = 0.05) -> TostResult:
    """TOST for the mean of continuous paired differences ``d`` against +-``margin``.

    Two one-sided t-tests with n - 1 degrees of freedom, ``t_lo = (mean + margin)/se`` (H0: mean <=
    -margin) and ``t_hi = (mean - margin)/se`` (H0: mean >= margin), se = sd(d, ddof=1)/sqrt(n); the
    p-value is the larger of the two (as statsmodels' ``ttost_paired``) and ``equivalent`` is p < alpha,
    the same as the (1 - 2 alpha) t interval ``mean -+ t_{1-alpha, n-1} se`` lying inside (-margin,
    margin). With zero spread (se = 0) p is 0 when the mean lies strictly inside the margins, else 1.
    Fewer than 2 differences give NaNs and ``equivalent=False`` (logged).
    """
    margin, alpha = check_margin(margin), _check_alpha(alpha, 0.5)
    d = np.asarray(d, dtype=np.float64)
    if d.ndim != 1 or not np.isfinite(d).all():
        raise ValueError(f"d must be a 1-D vector of finite differences, got shape {d.shape}")
    n = d.shape[0]
    if n < 2:
        log.warning("tost_paired_mean: %d difference(s), need >= 2; the test is NaN", n)
        return TostResult(float(d.mean()) if n else _NAN, _NAN, _NAN, _NAN, margin, False)
    mean, se = float(d.mean()), float(d.std(ddof=1) / math.sqrt(n))
    if se == 0:
        p = 0.0 if -margin < mean < margin else 1.0
        return TostResult(mean, mean, mean, p, margin, p < alpha)
    df = n - 1
    p = max(float(sps.t.sf((mean + margin) / se, df)), float(sps.t.cdf((mean - margin) / se, df)))
    half = float(sps.t.ppf(1 - alpha, df)) * se
    return TostResult(mean, mean - half, mean + half, p, margin, p < alpha)


def tost_paired_proportions(
    a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, margin: float, alpha: float = 0.05
) -> TostResult:
    """Equivalence of two paired 0/1 accuracies within +-``margin``, by interval inclusion.

    ``equivalent`` when the (1 - 2 alpha) Newcombe interval (`newcombe_paired_interval` at ``2 alpha``)
    lies inside (-margin, margin): the interval-inclusion form of TOST at level alpha. ``p_value`` is the
    inversion of that test (`tost_newcombe_p`), so ``p_value < alpha`` agrees with ``equivalent``.
    """
    margin, alpha = check_margin(margin), _check_alpha(alpha, 0.5)
    point, low, high = newcombe_paired_interval(a, b, alpha=2 * alpha)
    p = tost_newcombe_p(paired_counts(a, b), margin)
    return TostResult(point, low, high, p, margin, bool(low > -margin and high < margin))


def tost_newcombe_p(counts: tuple[int, int, int, int], margin: float, tol: float = 1e-10) -> float:
    """TOST p-value of a paired 0/1 difference against +-``margin``, inverting Newcombe's interval (module
    docstring): the least alpha in (0, 0.5) at which the (1 - 2 alpha) interval of the table ``counts`` =
    (e, f, g, h) lies inside (-margin, margin), by bisection to ``tol``; 1.0 where no alpha does (the
    difference is not strictly inside the margins), NaN for an empty table."""
    margin = check_margin(margin)
    e, f, g, h = (int(c) for c in counts)
    n = e + f + g + h
    if n == 0:
        return _NAN
    if not -margin < (f - g) / n < margin:
        return 1.0

    def inside(alpha: float) -> bool:
        _, low, high = newcombe_from_counts(e, f, g, h, 2 * alpha)
        return low > -margin and high < margin

    lo, hi = 0.0, 0.5  # inside(hi) holds in the limit (the interval shrinks to the point); inside(lo) never
    if inside(1e-12):
        return 1e-12
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if inside(mid) else (mid, hi)
    return hi


def verdict(
    ci_low: float, ci_high: float, difference_p: float, equivalence: TostResult | None, alpha: float = 0.05
) -> str:
    """The reading of a paired contrast: "different", "equivalent within ±m" or "inconclusive".

    "different": the (1 - alpha) interval excludes 0 *and* the difference test rejects (p <= alpha); when
    they disagree (e.g. a Newcombe or bootstrap interval excludes 0 but the exact McNemar p does not
    reject) nothing is claimed. "equivalent within ±m": ``equivalence.equivalent`` (TOST rejects).
    Both at once (a small but significant difference inside the margin) reads "different (within ±m)":
    the difference is real and smaller than the margin, and a reader must not see "equivalent" alone.
    Anything else, NaNs and ``equivalence=None`` (no margin declared) included, is "inconclusive".
    m is ``equivalence.margin`` written with ``:g`` (0.01, 0.1).
    ``alpha`` must be the difference test's level (after any Holm adjustment of ``difference_p``).
    """
    alpha = _check_alpha(alpha)
    excludes_zero = bool(ci_low > 0 or ci_high < 0)
    different = excludes_zero and bool(difference_p <= alpha)
    equivalent = equivalence is not None and equivalence.equivalent
    margin = f"±{equivalence.margin:g}" if equivalence is not None else ""
    if different and equivalent:
        return f"different (within {margin})"
    if different:
        return "different"
    if equivalent:
        return f"equivalent within {margin}"
    return "inconclusive"
