"""Probes that read task information out of embeddings: a kNN label probe and retrieval scores.

All similarities are cosines computed in float64 after re-normalising rows (``collapse.normalize_rows``).

kNN label probe (leave-one-out)::

    N_k(i)  = the k rows j != i with the largest cos(x_i, x_j)
    yhat_i  = argmax_c |{j in N_k(i) : y_j = c}|
    acc     = (1/n) sum_i [yhat_i = y_i]

Leave-one-group-out variant (``knn_correct(..., groups=g)``, the cross-length probe's pool): the candidates
of i are the rows of other groups, ``N_k(i)`` = the k rows j with g_j != g_i and the largest cosine. A group
is a source document, so a text never votes through another cut of its own document.

Retrieval (query q, documents ranked by cosine, rank r = 1, 2, ...; R_q = relevant documents)::

    acc@k   = (1/|Q|) sum_q [some d in R_q has rank <= k]        (acc@1 = top-1 accuracy = nDCG@1 if |R_q| = 1)
    nDCG@k  = DCG@k / IDCG@k,  DCG@k = sum_{r <= k} rel_r / log2(r + 1),
              IDCG@k = sum_{r <= min(k, |R_q|)} 1 / log2(r + 1)   (binary relevance)
    mrr     = (1/|Q|) sum_q 1 / (rank of the best-ranked relevant document)   (no cut-off)

Decisions and gotchas:

- Deterministic ties. Equal similarities are ordered by the lower row / document index first (stable
  sort of the negated similarities). A tied kNN vote goes to the tied class whose first member
  appears earliest in that neighbour order, i.e. the class of the nearest neighbour among the tied ones.
  Only bitwise-equal similarities tie: the BLAS product may round one cosine differently at different
  output positions (seen: bitwise-identical unit rows scoring 0.9999999999999999 and 1.0 against the same
  query), so duplicated texts are not guaranteed to come out in index order.
- The kNN probe needs >= 2 classes and n > k (so every item has k other neighbours); otherwise NaN and
  a warning. With groups, every item needs k rows outside its own group, else NaN and a warning. Chance level is about the majority-class share, not 1/n_classes, for unbalanced labels.
- Queries with an empty relevant set are dropped (with a warning); relevant indices outside
  [0, m) raise ``ValueError``.
- ``knn_neighbours`` returns the neighbour lists themselves (for ``hubness``); it raises where
  ``knn_correct`` warns and returns None, since it has no label to fall back on.
- Similarity matrices are formed in row chunks of ``chunk_size``, so memory stays O(chunk_size n).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import numpy as np

from llm_collapse.metrics.collapse import normalize_rows

logger = logging.getLogger(__name__)


def _vote(neigh_labels: np.ndarray, n_classes: int) -> np.ndarray:
    """(c, k) neighbour class ids in neighbour order -> (c,) majority class, ties to the earliest class."""
    c, k = neigh_labels.shape
    rows = np.arange(c)
    counts = np.zeros((c, n_classes), dtype=np.int64)  # (c, C)
    first_pos = np.full((c, n_classes), k, dtype=np.int64)  # (c, C), k = absent
    for j in range(k - 1, -1, -1):
        counts[rows, neigh_labels[:, j]] += 1
        first_pos[rows, neigh_labels[:, j]] = j
    return np.argmax(counts * (k + 1) - first_pos, axis=1)


def knn_correct(
    X: np.ndarray,
    labels: Sequence | np.ndarray,
    k: int = 10,
    chunk_size: int = 2048,
    label: str | None = None,
    groups: Sequence | np.ndarray | None = None,
    neighbours: np.ndarray | None = None,
) -> np.ndarray | None:
    """Leave-one-out k-nearest-neighbour correctness per item, cosine similarity and majority vote.

    Args:
        X: (n, d) embeddings.
        labels: (n,) class labels (any hashable, sortable values).
        k: Neighbours per item (the item itself excluded).
        chunk_size: Query rows per similarity block.
        label: Group name for warnings.
        groups: (n,) group ids (e.g. source document ids); an item's neighbours then exclude its whole
            group, not only itself. None = every item its own group (plain leave-one-out).
        neighbours: The (n, k) lists `knn_neighbours` gave for the same X, k and groups, so a caller that
            also needs them searches once; None = search here.

    Returns:
        (n,) 0/1 ints: whether each item's vote equals its label; None if < 2 classes, n <= k, or (with
        groups) some item has fewer than k rows outside its group.
    """
    U = normalize_rows(X)  # (n, d)
    y = np.asarray(labels)
    n = U.shape[0]
    if y.shape != (n,):
        raise ValueError(f"labels must have shape ({n},), got {y.shape}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    g_ids = np.arange(n) if groups is None else group_ids(groups, n)  # (n,)
    classes, y_ids = np.unique(y, return_inverse=True)
    if classes.size < 2 or n <= k:
        logger.warning(
            "knn_label_accuracy needs >= 2 classes and n > k = %d but group %r has %d classes, n = %d; "
            "returning NaN",
            k,
            label,
            classes.size,
            n,
        )
        return None
    candidates = n - np.bincount(g_ids)[g_ids]  # (n,) rows outside each item's group
    if candidates.min() < k:
        logger.warning(
            "knn_label_accuracy of %r: an item has only %d neighbours outside its own group (k = %d); "
            "returning NaN",
            label,
            int(candidates.min()),
            k,
        )
        return None
    if neighbours is not None and np.shape(neighbours) != (n, k):
        raise ValueError(f"neighbours must have shape (n, k) = ({n}, {k}), got {np.shape(neighbours)}")
    order = (
        _neighbour_order(U, g_ids, k, chunk_size) if neighbours is None else np.asarray(neighbours)
    )  # (n, k)
    return (_vote(y_ids[order], classes.size) == y_ids).astype(int)


def knn_neighbours(
    X: np.ndarray, k: int, groups: Sequence | np.ndarray | None = None, chunk_size: int = 2048
) -> np.ndarray:
    """The k nearest neighbours of every row by cosine, nearest first (the ordering `knn_correct` votes on).

    Args:
        X: (n, d) embeddings.
        k: Neighbours per item.
        groups: (n,) group ids; an item's candidates exclude its whole group. None = only itself.
        chunk_size: Query rows per similarity block.

    Returns:
        (n, k) int64 row indices; row i lists ``N_k(i)`` by decreasing cosine, ties to the lower index.

    Raises:
        ValueError: If k < 1 or some item has fewer than k rows outside its group (n <= k without groups).
    """
    U = normalize_rows(X)  # (n, d)
    n = U.shape[0]
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    g_ids = np.arange(n) if groups is None else group_ids(groups, n)  # (n,)
    fewest = int((n - np.bincount(g_ids)[g_ids]).min()) if n else 0
    if n == 0 or fewest < k:
        raise ValueError(
            f"every item needs >= k = {k} candidates outside its own group; the fewest is {fewest}"
        )
    return _neighbour_order(U, g_ids, k, chunk_size)


def _neighbour_order(U: np.ndarray, g_ids: np.ndarray, k: int, chunk_size: int) -> np.ndarray:
    """(n, d) unit rows, (n,) group ids -> (n, k) nearest rows of other groups, ties to the lower index."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    n = U.shape[0]
    order = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, chunk_size):
        stop = min(start + chunk_size, n)
        sims = U[start:stop] @ U.T  # (c, n)
        sims[g_ids[start:stop, None] == g_ids[None, :]] = -np.inf  # exclude self (and its group)
        order[start:stop] = np.argsort(-sims, axis=1, kind="stable")[:, :k]  # (c, k), ties -> lower index
    return order


def group_ids(groups: Sequence | np.ndarray, n: int) -> np.ndarray:
    """(n,) group values -> (n,) int ids."""
    g = np.asarray(groups)
    if g.shape != (n,):
        raise ValueError(f"groups must have shape ({n},), got {g.shape}")
    return np.unique(g, return_inverse=True)[1].reshape(n)


def knn_label_accuracy(X: np.ndarray, labels: Sequence | np.ndarray, **options) -> float:
    """Leave-one-out kNN accuracy: the mean of `knn_correct` (``options`` are its ``k``, ``chunk_size``,
    ``label``); NaN if < 2 classes or n <= k."""
    correct = knn_correct(X, labels, **options)
    return float("nan") if correct is None else float(correct.mean())


def _relevance_sets(relevant: Sequence[Iterable[int] | int], n_queries: int, n_docs: int) -> list[set[int]]:
    """Normalise ``relevant`` to one set of document indices per query, validating the indices."""
    if len(relevant) != n_queries:
        raise ValueError(f"relevant has {len(relevant)} entries for {n_queries} queries")
    sets = [{int(r)} if np.isscalar(r) else {int(i) for i in r} for r in relevant]
    for q, s in enumerate(sets):
        if any(i < 0 or i >= n_docs for i in s):
            raise ValueError(f"query {q}: relevant index out of range [0, {n_docs}): {sorted(s)}")
    return sets


def retrieval_scores(
    query_emb: np.ndarray,
    doc_emb: np.ndarray,
    relevant: Sequence[Iterable[int] | int],
    ks: Sequence[int] = (1, 10),
    chunk_size: int = 1024,
) -> dict[str, float]:
    """Cosine retrieval of documents for each query, scored against binary relevance.

    Args:
        query_emb: (q, d) query embeddings.
        doc_emb: (m, d) document embeddings.
        relevant: Per query, a set (any iterable) of relevant document indices or one index.
        ks: Cut-offs for ``acc@k`` and ``ndcg@k``.
        chunk_size: Queries per similarity block.

    Returns:
        ``{"acc@k": ..., "ndcg@k": ... for k in ks, "mrr": ..., "n_queries": ...}`` (means over the
        queries with >= 1 relevant document; NaN when there are none).
    """
    Q = normalize_rows(query_emb)  # (q, d)
    D = normalize_rows(doc_emb)  # (m, d)
    if Q.shape[1] != D.shape[1]:
        raise ValueError(f"query dim {Q.shape[1]} != document dim {D.shape[1]}")
    m = D.shape[0]
    sets = _relevance_sets(relevant, Q.shape[0], m)
    keep = np.array([len(s) > 0 for s in sets], dtype=bool)
    if not keep.all():
        logger.warning("retrieval_scores: dropping %d queries without relevant documents", int((~keep).sum()))
    Q, sets = Q[keep], [s for s in sets if s]
    ks = tuple(int(k) for k in ks)
    discounts = 1.0 / np.log2(np.arange(2, m + 2))  # (m,) 1/log2(r+1), r = 1..m
    ideal = np.cumsum(discounts)  # (m,) IDCG for |R| = 1..m relevant
    per_query: dict[str, list[np.ndarray]] = {f"{name}@{k}": [] for k in ks for name in ("acc", "ndcg")}
    per_query["mrr"] = []
    for start in range(0, Q.shape[0], chunk_size):
        block = sets[start : start + chunk_size]
        rel = np.zeros((len(block), m), dtype=bool)  # (c, m)
        for row, s in enumerate(block):
            rel[row, list(s)] = True
        order = np.argsort(-(Q[start : start + chunk_size] @ D.T), axis=1, kind="stable")  # (c, m)
        ranked = np.take_along_axis(rel, order, axis=1)  # (c, m) relevance in rank order
        first = ranked.argmax(axis=1)  # (c,) 0-based rank of the best relevant document
        per_query["mrr"].append(1.0 / (first + 1))
        n_rel = rel.sum(axis=1)  # (c,)
        for k in ks:
            kk = min(k, m)
            per_query[f"acc@{k}"].append((first < k).astype(np.float64))
            dcg = ranked[:, :kk] @ discounts[:kk]  # (c,)
            per_query[f"ndcg@{k}"].append(dcg / ideal[np.minimum(n_rel, kk) - 1])
    out = {key: float(np.concatenate(v).mean()) if v else float("nan") for key, v in per_query.items()}
    out["n_queries"] = float(Q.shape[0])
    return out
