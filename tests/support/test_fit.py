"""Fitted edge lengths: tree metrics recovered, scipy's nnls and scikit-learn's Lasso matched."""

from __future__ import annotations

import math
import sys

import numpy as np
import ot
import pytest
import scipy.spatial.distance as ssd
import torch
from _oracle import path_metric
from scipy.optimize import nnls
from scipy.stats import spearmanr

import tsw
from tsw.support._fit import fit_edge_lengths
from tsw.support._trees import SupportTree, SupportTrees

F64 = torch.float64


def _cloud(n, d, seed):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=F64)


def _root_paths(tree):
    """(n, V) indicator of the edges on each support point's root path (a naive climb)."""
    par = tree.parents.tolist()
    out = np.zeros((tree.leaves.shape[0], len(par)))
    for i, v in enumerate(tree.leaves.tolist()):
        while par[v] >= 0:
            out[i, v] = 1.0
            v = par[v]
    return out


def _design(tree):
    """All pairs i < j: the path indicators (the symmetric difference of root paths)."""
    A = _root_paths(tree)
    i, j = np.triu_indices(A.shape[0], k=1)
    return np.abs(A[i] - A[j]), i, j


def _leaf_metric(tree):
    leaves = tree.leaves.numpy()
    return path_metric(tree)[np.ix_(leaves, leaves)]


def test_star_lengths_recovered():
    """A star whose leaves' distances are w_i + w_j: the fit returns w exactly."""
    w = torch.tensor([0.0, 0.5, 1.0, 2.0, 0.25, 3.0], dtype=F64)
    n = 5
    parents = torch.tensor([-1, 0, 0, 0, 0, 0])
    tree = SupportTree(parents, torch.ones(6, dtype=F64), torch.arange(1, 6), (parents >= 0).long())
    # the star metric embeds isometrically in l1: point i at w_i on its own axis
    X = torch.diag(w[1:])
    trees = SupportTrees(X, (tree,), "cluster")
    fitted = fit_edge_lengths(trees, lam=0.0, metric="cityblock")
    torch.testing.assert_close(fitted.trees[0].edge_lengths, w, rtol=0, atol=1e-10)
    assert fitted.trees[0].parents is tree.parents
    assert n == trees.n_points


@pytest.mark.parametrize("d", [2, 5])
def test_a_tree_metric_is_recovered_on_a_quadtree(d):
    """Ground distances that are a tree metric of the quadtree: the fit reproduces them."""
    X = _cloud(30, d, d)
    trees = tsw.sample_quadtrees(X, seed=d)
    tree = trees.trees[0]
    g = torch.Generator().manual_seed(1)
    truth = torch.rand(tree.n_nodes, generator=g, dtype=F64) + 0.1
    # l1 coordinates whose cityblock distances are the path lengths for `truth`
    coords = torch.from_numpy(_root_paths(tree)) * truth
    fitted = fit_edge_lengths(trees, support=coords, lam=0.0, metric="cityblock")
    expected = _leaf_metric(tree.replace(edge_lengths=torch.where(tree.parents < 0, 0.0, truth)))
    np.testing.assert_allclose(_leaf_metric(fitted.trees[0]), expected, rtol=0, atol=1e-9)


@pytest.mark.parametrize("seed", [0, 1])
def test_lam_zero_matches_scipy_nnls(seed):
    X = _cloud(25, 3, seed)
    trees = tsw.sample_quadtrees(X, seed=seed)
    tree = trees.trees[0]
    Z, i, j = _design(tree)
    dist = ssd.cdist(X.numpy(), X.numpy())[i, j]
    s = dist.max()
    w_ref, _ = nnls(Z, dist / s, maxiter=50 * Z.shape[1])
    w = fit_edge_lengths(trees, lam=0.0).trees[0].edge_lengths.numpy() / s
    assert bool((w >= 0).all())
    # the fitted path lengths are unique (the columns need not be independent)
    np.testing.assert_allclose(Z @ w, Z @ w_ref, rtol=0, atol=1e-8)
    obj = lambda v: np.sum((Z @ v - dist / s) ** 2)  # noqa: E731
    assert obj(w) <= obj(w_ref) * (1 + 1e-10) + 1e-14


@pytest.mark.parametrize("lam", [1e-3, 1e-2])
def test_lasso_matches_scikit_learn(lam):
    from sklearn.linear_model import Lasso

    X = _cloud(25, 2, 3)
    trees = tsw.sample_quadtrees(X, seed=3)
    Z, i, j = _design(trees.trees[0])
    dist = ssd.cdist(X.numpy(), X.numpy())[i, j]
    s = dist.max()
    model = Lasso(alpha=lam, positive=True, fit_intercept=False, tol=1e-14, max_iter=10**6)
    w_ref = model.fit(Z, dist / s).coef_
    w = fit_edge_lengths(trees, lam=lam).trees[0].edge_lengths.numpy() / s
    obj = lambda v: np.sum((Z @ v - dist / s) ** 2) / (2 * len(dist)) + lam * v.sum()  # noqa: E731
    assert obj(w) <= obj(w_ref) + 1e-10
    np.testing.assert_allclose(Z @ w, Z @ w_ref, rtol=0, atol=1e-5)


def test_sampled_pairs_are_seeded():
    X = _cloud(40, 3, 0)
    trees = tsw.sample_quadtrees(X, n_trees=2, seed=0)
    a = fit_edge_lengths(trees, n_pairs=300, seed=7)
    b = fit_edge_lengths(trees, n_pairs=300, seed=7)
    c = fit_edge_lengths(trees, n_pairs=300, seed=8)
    for ta, tb in zip(a.trees, b.trees, strict=True):
        assert torch.equal(ta.edge_lengths, tb.edge_lengths)
    assert not torch.equal(a.trees[0].edge_lengths, c.trees[0].edge_lengths)
    assert a.n_trees == 2


def test_fitted_trees_come_closer_to_exact_w1():
    """Relative error and rank correlation of the tree-sliced value against ot.emd2."""
    X = _cloud(60, 2, 4)
    trees = tsw.sample_quadtrees(X, n_trees=2, seed=4)
    fitted = fit_edge_lengths(trees, seed=0)
    g = torch.Generator().manual_seed(5)
    H = torch.rand(16, 60, generator=g, dtype=F64) * (torch.rand(16, 60, generator=g) > 0.7)
    H = (H + 1e-3) / (H + 1e-3).sum(1, keepdim=True)
    C = ssd.cdist(X.numpy(), X.numpy())
    i, j = np.triu_indices(16, k=1)
    exact = np.array([ot.emd2(H[a].numpy(), H[b].numpy(), C) for a, b in zip(i, j, strict=True)])
    before = tsw.pairwise_tsw(H, trees=trees).numpy()[i, j]
    after = tsw.pairwise_tsw(H, trees=fitted).numpy()[i, j]
    err_before = np.mean(np.abs(before - exact) / exact)
    err_after = np.mean(np.abs(after - exact) / exact)
    assert err_after < 0.5 * err_before
    assert spearmanr(after, exact)[0] >= spearmanr(before, exact)[0] - 0.02


def test_dtype_numpy_support_and_errors():
    X = _cloud(10, 2, 0)
    trees = tsw.sample_quadtrees(X.float(), seed=0)
    fitted = fit_edge_lengths(trees, support=X.numpy())
    assert fitted.trees[0].edge_lengths.dtype == torch.float32
    assert float(fitted.trees[0].edge_lengths[trees.trees[0].parents < 0].abs().sum()) == 0.0
    with pytest.raises(TypeError, match=r"trees must be a tsw\.SupportTrees"):
        fit_edge_lengths(X)
    with pytest.raises(ValueError, match="support must have shape"):
        fit_edge_lengths(trees, support=X[:5])
    with pytest.raises(ValueError, match="lam"):
        fit_edge_lengths(trees, lam=-1.0)
    with pytest.raises(ValueError, match="n_pairs"):
        fit_edge_lengths(trees, n_pairs=0)
    with pytest.raises(ValueError, match="metric"):
        fit_edge_lengths(trees, metric="cosine")
    with pytest.raises(ValueError, match="NaN or Inf"):
        fit_edge_lengths(trees, support=X.numpy() * np.inf)
    one = tsw.sample_quadtrees(X[:1], seed=0)
    with pytest.raises(ValueError, match="at least 2 support points"):
        fit_edge_lengths(one)


# --------------------------------------------------------------------------- edges


def _scale_cases():
    return [
        (torch.float64, [1e-200, 1e160, 1e300, 2.0**-700, 2.0**900], 1e-9),
        (torch.float32, [1e-30, 1e20, 1e36, 2.0**-100, 2.0**110], 1e-5),
    ]


@pytest.mark.parametrize("metric", ["euclidean", "cityblock"])
@pytest.mark.parametrize(("dt", "scales", "rtol"), _scale_cases())
def test_fit_at_any_representable_scale(metric, dt, scales, rtol):
    """Data x1e-200 .. x1e300 (float64), x1e-30 .. x1e36 (float32): the scale-1 lengths
    times the scale (bit for bit under a power of two), where the squared distances
    underflow to 0 (all lengths read 0) or overflow (Inf)."""
    X = _cloud(25, 3, 6) * 0.1
    base_trees = tsw.sample_quadtrees(X.to(dt), n_trees=2, seed=0)
    base = fit_edge_lengths(base_trees, metric=metric, n_pairs=200, seed=1)
    for s in scales:
        trees = tsw.sample_quadtrees((X * s).to(dt), n_trees=2, seed=0)
        fitted = fit_edge_lengths(trees, metric=metric, n_pairs=200, seed=1)
        for a, b in zip(fitted.trees, base.trees, strict=True):
            assert float(a.edge_lengths.max()) > 0
            if math.log2(s).is_integer():
                assert torch.equal(a.edge_lengths, b.edge_lengths * s)
            else:
                torch.testing.assert_close(
                    a.edge_lengths.double(), b.edge_lengths.double() * s, rtol=rtol, atol=0
                )


def test_fitted_costs_out_of_range_raise():
    X = _cloud(10, 2, 7)
    with pytest.raises(
        ValueError, match=r"torch\.float64 the fitted lengths .*'sqeuclidean'.* overflow to Inf"
    ):
        fit_edge_lengths(tsw.sample_quadtrees(X * 1e160, seed=0), metric="sqeuclidean")
    with pytest.raises(
        ValueError, match=r"torch\.float64 the fitted lengths .* all underflow to 0"
    ):
        fit_edge_lengths(tsw.sample_quadtrees(X * 1e-200, seed=0), metric="sqeuclidean")
    msg = r"torch\.float32 the fitted lengths .* overflow to Inf. Rescale .* or use torch\.float64"
    with pytest.raises(ValueError, match=msg):
        fit_edge_lengths(tsw.sample_quadtrees((X * 1e20).float(), seed=0), metric="sqeuclidean")
    # representable: squared distances of data x1e-100 in float64
    small = fit_edge_lengths(tsw.sample_quadtrees(X * 1e-100, seed=0), metric="sqeuclidean")
    unit = fit_edge_lengths(tsw.sample_quadtrees(X, seed=0), metric="sqeuclidean")
    torch.testing.assert_close(
        small.trees[0].edge_lengths, unit.trees[0].edge_lengths * 1e-200, rtol=1e-9, atol=0
    )


def _minkowski(u, v, p):
    """(sum |u - v|^p)^(1/p) in 60-digit decimal arithmetic (no underflow)."""
    from decimal import Decimal, localcontext

    with localcontext() as ctx:
        ctx.prec = 60
        total = sum(
            abs(Decimal(float(a)) - Decimal(float(b))) ** int(p) for a, b in zip(u, v, strict=True)
        )
        return float(total ** (Decimal(1) / Decimal(int(p))))


@pytest.mark.parametrize("p", [3, 400])
def test_minkowski_costs_at_large_p_match_decimal_arithmetic(p):
    """At p = 400 the p-th powers of differences below 0.17 underflow in float64: a third
    of the costs read 0. The fit at lam = 0 equals scipy's nnls on costs computed in
    decimal arithmetic."""
    X = _cloud(20, 3, 8) * 0.1
    trees = tsw.sample_quadtrees(X, seed=2)
    Z, i, j = _design(trees.trees[0])
    dist = np.array([_minkowski(X[a], X[b], p) for a, b in zip(i, j, strict=True)])
    assert dist.min() > 0
    s = dist.max()
    w_ref, _ = nnls(Z, dist / s, maxiter=50 * Z.shape[1])
    w = fit_edge_lengths(trees, lam=0.0, metric="minkowski", p=p).trees[0].edge_lengths.numpy()
    np.testing.assert_allclose(Z @ w, Z @ w_ref * s, rtol=0, atol=1e-8 * s)


def test_sampled_pairs_are_distinct_and_uniform(monkeypatch):
    """The pairs that fit_edge_lengths fits: never (i, i); every ordered pair i != j,
    (i, i + 1) and (i + 1, i) included, about equally often (chi-square)."""
    from scipy.stats import chisquare

    import tsw.support._fit as fit_module

    seen = []

    class Recording(fit_module.Paths):
        def __init__(self, tree, leaves, pairs):
            seen.append(pairs.copy())
            super().__init__(tree, leaves, pairs)

    monkeypatch.setattr(fit_module, "Paths", Recording)
    # the solver is not under test here: lengths 0 (the pairs are recorded before it)
    monkeypatch.setattr(
        fit_module, "nonnegative_lasso", lambda Z, *a, **k: (torch.zeros(Z.V, dtype=F64), 0)
    )
    n = 12  # 66 pairs i < j: 65 are drawn per tree
    trees = tsw.sample_quadtrees(_cloud(n, 2, 9), n_trees=300, seed=0)
    fit_module.fit_edge_lengths(trees, n_pairs=65, seed=3)
    pairs = np.concatenate(seen)
    assert pairs.shape == (300 * 65, 2)
    assert not (pairs[:, 0] == pairs[:, 1]).any()
    counts = np.zeros((n, n))
    np.add.at(counts, (pairs[:, 0], pairs[:, 1]), 1)
    off = counts[~np.eye(n, dtype=bool)]
    assert off.min() > 0  # every ordered pair occurs, neighbours included
    assert all(counts[i, i + 1] > 0 and counts[i + 1, i] > 0 for i in range(n - 1))
    assert chisquare(off).pvalue > 1e-3
    # at most n_pairs pairs in all: every pair i < j once, no randomness
    seen.clear()
    fit_module.fit_edge_lengths(trees, n_pairs=66)
    expected = [(a, b) for a in range(n) for b in range(a + 1, n)]
    assert [tuple(r) for r in seen[0].tolist()] == expected


def test_verbose_shows_the_progress_over_the_trees(capsys, monkeypatch):
    trees = tsw.sample_quadtrees(_cloud(15, 2, 10), n_trees=3, seed=0)
    fit_edge_lengths(trees, seed=0)
    assert capsys.readouterr() == ("", "")
    fit_edge_lengths(trees, seed=0, verbose=True)  # tqdm's bar, or printed lines
    captured = capsys.readouterr()
    assert "fit_edge_lengths" in captured.out + captured.err
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # no tqdm: a line a tree
    fit_edge_lengths(trees, seed=0, verbose=True)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(",")[0] for line in lines] == [
        f"fit_edge_lengths: {t}/3 tree" for t in (1, 2, 3)
    ]
    assert all("iterations" in line for line in lines)
    with pytest.raises(TypeError, match="verbose must be True or False; got str"):
        fit_edge_lengths(trees, verbose="yes")
