"""Second-order collapse under mean pooling (SOCM; Hara et al., "Why Mean Pooling Works", arXiv 2604.27398, ACL
2026): token clouds that differ in shape but pool to nearby points. Pure arrays, float64 throughout.

Per text, from the states of its real tokens, (n, d):

- the unit-mean step divides every token by the norm of the text's mean token (one scalar per text), so the
  mean-pooled vector has norm 1;
- mu is the mean (norm 1) and Sigma the population covariance (centred, divided by n), d x d;
- the token concentration c = tr Sigma (the tokens' mean squared distance to their mean over |mean|^2).

Per pair of texts: d_mu = |mu_x - mu_y|^2 / 4 (in [0, 1]); d_sigma = BW^2(Sigma_x, Sigma_y) / 4 with the squared
Bures-Wasserstein distance BW^2(A, B) = tr A + tr B - 2 tr((A^1/2 B A^1/2)^1/2); SOCM = (1 - d_mu) d_sigma, higher
= more collapse. Since BW^2 <= tr A + tr B, SOCM <= (c_x + c_y) / 4.

Decisions and gotchas:

- Two routes to tr((A^1/2 B A^1/2)^1/2), equal in exact arithmetic (tests hold them to each other): the eigh route
  (A^1/2 from eigh, eigenvalues clamped at 0; then the eigenvalues of the symmetric sandwich, clamped at 0), and
  the cross-Gram route, the nuclear norm |U V^T|_* of the n_x x n_y matrix with U = the centred unit-mean tokens /
  sqrt(n_x): the fast path when both texts have fewer tokens than d (no d x d matrix at all).
- No 1e-9 I jitter (the authors' code adds it): the routes then agree to rounding. BW^2 is clamped at 0 (rounding
  of identical clouds); d_sigma above 1 is possible and is counted, never clipped (`PairTerms.d_sigma`).
- The moments of a long text are streamed (`TokenMoments`: chunks merged by Chan, Golub and LeVeque's pairwise
  update of count, mean and centred sum of outer products), never as sum(x x^T) / n - mu mu^T, which cancels
  badly exactly when c is small; a 32k-token text never needs its states in memory at once.
- A text whose mean token is near zero against its tokens' own norm (`ZERO_MEAN`) has no unit-mean scale: it is
  refused (`MeanTooSmall`), so that the caller counts it and leaves it out instead of emitting garbage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

ZERO_MEAN = 1e-6
"""Smallest |mean token| / rms token norm a text may have: below it the unit-mean step divides by ~0."""


class MeanTooSmall(ValueError):
    """A text's mean token is (near) zero, so its unit-mean scale is undefined."""


class PairTerms(NamedTuple):
    """The three numbers of a pair: d_mu, d_sigma (may exceed 1: counted, not clipped) and SOCM."""

    d_mu: float
    d_sigma: float
    socm: float


class TokenMoments:
    """Count, mean and centred sum of outer products of a text's token states, added chunk by chunk in float64."""

    def __init__(self, dim: int) -> None:
        self.n = 0
        self.mean = np.zeros(dim)
        self.m2 = np.zeros((dim, dim))
        self._square_norms = 0.0  # sum of squared token norms, for the near-zero-mean check

    def add(self, states: np.ndarray) -> TokenMoments:
        """Adds a chunk of tokens, (m, d); returns self."""
        chunk = np.asarray(states, dtype=np.float64)
        if chunk.ndim != 2 or chunk.shape[1] != self.mean.shape[0]:
            raise ValueError(f"token states must have shape (m, {self.mean.shape[0]}), got {chunk.shape}")
        m = chunk.shape[0]
        if m == 0:
            return self
        mean = chunk.mean(axis=0)
        centred = chunk - mean
        total = self.n + m
        delta = mean - self.mean
        self.m2 += centred.T @ centred + np.outer(delta, delta) * (self.n * m / total)
        self.mean += delta * (m / total)
        self.n = total
        self._square_norms += float(np.einsum("ij,ij->", chunk, chunk))
        return self

    def copy(self) -> TokenMoments:
        """An independent copy (a variant that adds tokens to the same text)."""
        other = TokenMoments(self.mean.shape[0])
        other.n, other.mean, other.m2 = self.n, self.mean.copy(), self.m2.copy()
        other._square_norms = self._square_norms
        return other

    def state(self) -> dict[str, np.ndarray]:
        """The arrays `of_state` makes these moments again from (a store's)."""
        return {
            "n": np.int64(self.n),
            "mean": self.mean,
            "m2": self.m2,
            "square_norms": np.float64(self._square_norms),
        }

    @classmethod
    def of_state(cls, state: dict[str, np.ndarray]) -> TokenMoments:
        """The moments `state` gave."""
        mean, m2 = np.asarray(state["mean"], dtype=np.float64), np.asarray(state["m2"], dtype=np.float64)
        if mean.ndim != 1 or m2.shape != (mean.shape[0],) * 2:
            raise ValueError(f"moments of shapes {mean.shape} and {m2.shape}")
        moments = cls(mean.shape[0])
        moments.n, moments.mean, moments.m2 = int(state["n"]), mean.copy(), m2.copy()
        moments._square_norms = float(state["square_norms"])
        return moments

    @property
    def covariance(self) -> np.ndarray:
        """The population covariance (divided by n), symmetrised."""
        if self.n == 0:
            raise ValueError("no tokens added")
        cov = self.m2 / self.n
        return (cov + cov.T) / 2

    def scale(self) -> float:
        """|mean token|, refused (`MeanTooSmall`) where it is below `ZERO_MEAN` x the tokens' rms norm."""
        norm = float(np.linalg.norm(self.mean))
        rms = math.sqrt(self._square_norms / self.n) if self.n else 0.0
        if not norm > ZERO_MEAN * rms:
            raise MeanTooSmall(
                f"mean token norm {norm:.3g} against rms token norm {rms:.3g}: no unit-mean scale"
            )
        return norm


@dataclass(frozen=True)
class TextCloud:
    """One text's unit-mean token cloud: mu (d,), Sigma (d, d), n, and, for a short text, its centred unit-mean
    tokens / sqrt(n) (the cross-Gram route's U); `of` and `of_moments` make it."""

    mu: np.ndarray
    sigma: np.ndarray
    n: int
    tokens: np.ndarray | None = None
    _root: list = field(default_factory=list, compare=False, repr=False)

    @classmethod
    def of(cls, states: np.ndarray) -> TextCloud:
        """The cloud of one text's real-token states, (n, d); keeps the tokens where n < d."""
        x = np.asarray(states, dtype=np.float64)
        moments = TokenMoments(x.shape[1]).add(x)
        return cls.of_moments(moments, x if x.shape[0] < x.shape[1] else None)

    @classmethod
    def of_moments(cls, moments: TokenMoments, states: np.ndarray | None = None) -> TextCloud:
        """The cloud of streamed moments; ``states`` (n, d), where given, enable the cross-Gram route."""
        scale = moments.scale()
        tokens = None
        if states is not None:
            tokens = (np.asarray(states, dtype=np.float64) - moments.mean) / (scale * math.sqrt(moments.n))
        return cls(moments.mean / scale, moments.covariance / scale**2, moments.n, tokens)

    @property
    def concentration(self) -> float:
        """c = tr Sigma after the unit-mean step."""
        return float(np.trace(self.sigma))

    def root(self) -> np.ndarray:
        """Sigma^1/2 (eigh, eigenvalues clamped at 0), computed once."""
        if not self._root:
            values, vectors = np.linalg.eigh(self.sigma)
            self._root.append((vectors * np.sqrt(np.clip(values, 0.0, None))) @ vectors.T)
        return self._root[0]


def bures_wasserstein_sq(a: np.ndarray, b: np.ndarray) -> float:
    """BW^2(A, B) = tr A + tr B - 2 tr((A^1/2 B A^1/2)^1/2) of two covariance matrices, by eigh, clamped at 0."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    values, vectors = np.linalg.eigh((a + a.T) / 2)
    root = (vectors * np.sqrt(np.clip(values, 0.0, None))) @ vectors.T
    return max(0.0, float(np.trace(a) + np.trace(b)) - 2.0 * _root_trace(root, (b + b.T) / 2))


def _root_trace(root_a: np.ndarray, b: np.ndarray) -> float:
    """tr((A^1/2 B A^1/2)^1/2) from A^1/2."""
    sandwich = root_a @ b @ root_a
    return float(np.sqrt(np.clip(np.linalg.eigvalsh((sandwich + sandwich.T) / 2), 0.0, None)).sum())


def cloud_terms(x: TextCloud, y: TextCloud) -> PairTerms:
    """d_mu, d_sigma and SOCM of two clouds: the cross-Gram route where both kept their tokens, else eigh."""
    if x.tokens is not None and y.tokens is not None:
        cross = float(np.linalg.svd(x.tokens @ y.tokens.T, compute_uv=False).sum())
    else:
        cross = _root_trace(x.root(), y.sigma)
    bw = max(0.0, x.concentration + y.concentration - 2.0 * cross)
    d_mu = float(np.sum((x.mu - y.mu) ** 2)) / 4
    d_sigma = bw / 4
    return PairTerms(d_mu, d_sigma, (1.0 - d_mu) * d_sigma)


def pair_terms(x: np.ndarray, y: np.ndarray) -> PairTerms:
    """(d_mu, d_sigma, SOCM) of two texts' real-token states, (n_x, d) and (n_y, d).

    Raises:
        MeanTooSmall: A text's mean token is (near) zero.
    """
    return cloud_terms(TextCloud.of(x), TextCloud.of(y))


def concentration(x: np.ndarray) -> float:
    """The token concentration c = tr Sigma of one text's real-token states (n, d) after the unit-mean step.

    Raises:
        MeanTooSmall: Its mean token is (near) zero.
    """
    return TextCloud.of(x).concentration
