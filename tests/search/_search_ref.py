"""Independent references for the search tests: corpora, exact W1 by POT, tree W1 by POT."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import ot
from scipy.spatial.distance import cdist

sys.path.append(str(Path(__file__).resolve().parents[1] / "support"))
from _oracle import path_metric  # tests/support: scipy's shortest paths

__all__ = ["brute_force", "corpus", "exact_w1", "topk", "tsw_oracle"]

CDIST = {"euclidean": "euclidean", "sqeuclidean": "sqeuclidean", "cityblock": "cityblock"}


def corpus(n_docs, seed, n_words=150, dim=3, topics=5, length=(4, 14)):
    """A small bag-of-words corpus: word vectors (n_words, dim), histograms, topics."""
    rng = np.random.default_rng(seed)
    centres = 3.0 * rng.standard_normal((topics, dim))
    home = rng.integers(0, topics, n_words)
    words = centres[home] + rng.standard_normal((n_words, dim))
    labels = rng.integers(0, topics, n_docs)
    H = np.zeros((n_docs, n_words))
    for i in range(n_docs):
        own = np.flatnonzero(home == labels[i])
        size = int(rng.integers(length[0], length[1] + 1))
        pick = np.where(
            rng.random(size) < 0.7, rng.choice(own, size), rng.integers(0, n_words, size)
        )
        np.add.at(H[i], pick, 1.0)
    return words, H / H.sum(1, keepdims=True), labels


def exact_w1(support: np.ndarray, q: np.ndarray, x: np.ndarray, metric: str = "euclidean") -> float:
    """W1 between two histograms on their supports: ot.emd2 on scipy's cost matrix."""
    a, b = np.flatnonzero(q), np.flatnonzero(x)
    M = cdist(support[a], support[b], CDIST[metric])
    return float(ot.emd2(q[a], x[b], M))


def brute_force(support, Q, H, metric="euclidean") -> np.ndarray:
    """The (q, N) exact W1 matrix, pair by pair."""
    return np.array([[exact_w1(support, q, x, metric) for x in H] for q in Q])


def tsw_oracle(trees, Q, H) -> np.ndarray:
    """The (q, N) tree-sliced W: the mean over the trees of ot.emd2 on each path metric."""
    out = np.zeros((len(Q), len(H)))
    for tree in trees:
        P = path_metric(tree)[np.ix_(tree.leaves.numpy(), tree.leaves.numpy())]
        for i, q in enumerate(Q):
            a = np.flatnonzero(q)
            for j, x in enumerate(H):
                b = np.flatnonzero(x)
                out[i, j] += ot.emd2(q[a], x[b], P[np.ix_(a, b)])
    return out / len(trees)


def topk(D: np.ndarray, k: int) -> np.ndarray:
    """Row numbers of the k smallest per row, ties by row number."""
    return np.argsort(D, axis=1, kind="stable")[:, :k]
