"""Exactness across methods, and of the oracles themselves (float64, 1e-10).

Each method's values against its oracles (exact LPs by POT's ``ot.emd2`` on explicit
tree metrics, Sobolev sums written edge by edge, POT's one-dimensional and sliced
distances) are in its own file: ``core/test_tree_wasserstein.py`` and
``core/test_wasserstein_1d.py`` for the closed forms, ``euclidean/``, ``sphere/`` and
``sliced/`` for the distances, with the shared problems and oracles in ``_reference.py``.
Here: the reduction that every tree estimator shares (trees of one line are the
sliced 1-D W1, for Db-TSW and TSW-SL on concurrent lines and chains), and the oracles
checked against one another (the explicit tree against the graph metric and the edge
formula; the two Sobolev sums).
"""

from __future__ import annotations

import _reference as ref
import numpy as np
import ot
import pytest
from _reference import (
    assert_close,
    distinct_sizes,
    random_line_system,
    random_problem,
    star_trees,
    t64,
)

import tsw


def concurrent(roots, dirs):
    return tsw.ConcurrentLines(t64(roots), t64(dirs))


def chains(sources, dirs):
    return tsw.ChainLines(t64(sources), t64(dirs))


@pytest.mark.parametrize("estimator", ["db_tsw", "tsw_sl_concurrent", "tsw_sl_chain"])
@pytest.mark.parametrize("seed", range(3))
def test_one_line_is_1d_w1(seed, estimator):
    rng = np.random.default_rng(7100 + seed)
    T, d = 5, seed + 2
    X, Y, a, b = random_problem(rng, d, *distinct_sizes(rng), zero_prob=0.2)
    roots, dirs = star_trees(rng, T, 1, d)
    proj = dirs[:, 0, :]  # (T, d)
    expected = np.mean(ot.wasserstein_1d(X @ proj.T, Y @ proj.T, a, b, p=1))
    args = (t64(X), t64(Y), t64(a), t64(b))
    if estimator == "db_tsw":
        got = tsw.db_tsw(*args, trees=concurrent(roots, dirs), delta=2.0)
    elif estimator == "tsw_sl_concurrent":
        got = tsw.tsw_sl(*args, trees=concurrent(roots, dirs))
    else:
        got = tsw.tsw_sl(*args, trees=chains(roots[:, None], dirs))
    assert_close(got, expected)


class TestOracles:
    """The two Sobolev oracles and the two tree-metric constructions agree."""

    @pytest.mark.parametrize("seed", range(4))
    def test_explicit_tree_matches_graph_metric_and_edge_formula(self, seed):
        rng = np.random.default_rng(9000 + seed)
        coords, masses, att = random_line_system(rng, 1, 3, 5, ties=seed % 2 == 1)
        for attachments in (None, att[0]):
            parents, lengths, atoms = ref.line_system_tree(coords[0], attachments)
            D = ref.tree_metric_from_parents(parents, lengths)[np.ix_(atoms.ravel(), atoms.ravel())]
            np.testing.assert_allclose(
                D, ref.line_system_metric(coords[0], attachments), atol=1e-12
            )
        for p in (1, 2):
            np.testing.assert_allclose(
                ref.line_system_sobolev(coords[0], masses[0], None, p),
                ref.star_sobolev(coords[0], masses[0], p),
                atol=1e-12,
            )
