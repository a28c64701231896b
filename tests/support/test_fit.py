"""Fitted edge lengths: tree metrics recovered, scipy's nnls and scikit-learn's Lasso matched."""

from __future__ import annotations

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
