"""tsw.tree_barycenter against the exact minimum of its linear program (scipy's HiGHS)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import sparse
from scipy.optimize import linprog

import tsw
from tsw.support._embedding import edge_matrix

F64 = torch.float64
#: the relative gap to the exact minimum the default 1500 mirror-descent steps reach on
#: these small trees (measured: 1e-5 to 4e-3; a subgradient method converges slowly)
GAP = 5e-3


def _lp(M: np.ndarray, A: np.ndarray, w: np.ndarray) -> float:
    """min_x sum_k w_k ||M (x - a_k)||_1 on the simplex, with s_ke >= |M (x - a_k)|_e."""
    E, n = M.shape
    K = A.shape[0]
    C = A @ M.T
    cost = np.concatenate([np.zeros(n), np.repeat(w, E)])
    MM = sparse.vstack([sparse.csr_matrix(M)] * K)
    eye = sparse.identity(K * E, format="csr")
    A_ub = sparse.vstack([sparse.hstack([MM, -eye]), sparse.hstack([-MM, -eye])])
    b_ub = np.concatenate([C.reshape(-1), -C.reshape(-1)])
    A_eq = sparse.hstack([sparse.csr_matrix(np.ones((1, n))), sparse.csr_matrix((1, K * E))])
    res = linprog(cost, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=[1.0], method="highs")
    assert res.status == 0
    return float(res.fun)


def _objective(M, x, A, w):
    return float((w[:, None] * np.abs(M @ x - A @ M.T)).sum())


def _problem(seed, n=25, K=6, T=1):
    rng = np.random.default_rng(seed)
    X = torch.tensor(rng.normal(size=(n, 2)))
    trees = tsw.sample_quadtrees(X, n_trees=T, seed=seed)
    A = rng.dirichlet(np.full(n, 0.3), size=K)
    w = rng.dirichlet(np.ones(K))
    return trees, A, w


@pytest.mark.parametrize(("seed", "T"), [(0, 1), (1, 1), (2, 3), (3, 5)])
def test_objective_within_gap_of_the_lp_minimum(seed, T):
    trees, A, w = _problem(seed, T=T)
    M = edge_matrix(trees).to_dense().numpy()
    exact = _lp(M, A, w)
    x, log = tsw.tree_barycenter(A, trees, w, log=True)
    assert isinstance(x, np.ndarray)
    assert x.shape == (A.shape[1],)
    assert abs(x.sum() - 1) < 1e-12
    assert (x >= 0).all()
    value = _objective(M, x, A, w)
    assert exact - 1e-9 <= value <= exact * (1 + GAP)
    assert abs(float(log["value"]) - value) < 1e-9 * value
    assert np.all(np.diff(log["objective"]) <= 0)  # the best objective so far


def test_objective_equals_the_tree_sliced_distances():
    """The objective is the weighted sum of the tree-sliced distances (tsw.pairwise_tsw)."""
    trees, A, w = _problem(4, T=3)
    x, log = tsw.tree_barycenter(torch.tensor(A), trees, torch.tensor(w), log=True)
    d = tsw.pairwise_tsw(x[None], torch.tensor(A), trees=trees)[0]
    assert torch.isclose(log["value"], (torch.tensor(w) * d).sum(), rtol=1e-10)


def test_one_histogram_is_itself():
    trees, A, _ = _problem(5, K=1)
    x = tsw.tree_barycenter(torch.tensor(A), trees)
    assert torch.equal(x, torch.tensor(A[0]))


def test_weighted_median_on_a_path():
    support = torch.tensor([[0.0], [1.0], [2.0], [3.0]], dtype=F64)
    trees = tsw.sample_quadtrees(support, n_trees=1, seed=0)
    eye = torch.eye(4, dtype=F64)
    x = tsw.tree_barycenter(eye[[0, 3]], trees, torch.tensor([0.2, 0.8], dtype=F64))
    assert torch.allclose(x, eye[3], atol=1e-6)


def test_batched_problems_match_one_by_one():
    trees, A, w = _problem(6, K=5)
    _, B, v = _problem(7, K=5)
    H = torch.tensor(np.stack([A, B]))
    W = torch.tensor(np.stack([w, v]))
    xs, log = tsw.tree_barycenter(H, trees, W, numItermax=300, stopThr=0, log=True)
    assert xs.shape == (2, A.shape[1])
    assert log["objective"].shape[1] == 2
    for p in range(2):
        _, one = tsw.tree_barycenter(H[p], trees, W[p], numItermax=300, stopThr=0, log=True)
        assert abs(float(one["value"]) - float(log["value"][p])) <= 1e-10 * float(one["value"])
    # a problem with fewer histograms pads with zero weights
    W0 = W.clone()
    W0[1] = torch.tensor([0.5, 0.5, 0, 0, 0], dtype=F64)
    _, pad = tsw.tree_barycenter(H, trees, W0, log=True)
    _, two = tsw.tree_barycenter(H[1, :2], trees, log=True)
    assert abs(float(pad["value"][1]) - float(two["value"])) <= 1e-3 * float(two["value"])


def test_float32_and_shared_weights():
    trees, A, _w = _problem(8)
    trees32 = tsw.sample_quadtrees(trees.support.float(), n_trees=1, seed=8)
    x = tsw.tree_barycenter(torch.tensor(A, dtype=torch.float32), trees32)
    assert x.dtype == torch.float32
    assert abs(float(x.sum()) - 1) < 1e-5


def test_errors():
    trees, A, w = _problem(9)
    At = torch.tensor(A)
    with pytest.raises(TypeError, match="SupportTrees"):
        tsw.tree_barycenter(At, "tree")
    with pytest.raises(ValueError, match=r"shape \(K, n\)"):
        tsw.tree_barycenter(At[:, :5], trees)
    with pytest.raises(ValueError, match=r"shape \(K, n\)"):
        tsw.tree_barycenter(At[:0], trees)
    with pytest.raises(ValueError, match="sum to one"):
        tsw.tree_barycenter(2 * At, trees)
    bad = At.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        tsw.tree_barycenter(bad, trees)
    with pytest.raises(ValueError, match="non-negative"):
        tsw.tree_barycenter(At - At.max(), trees)
    with pytest.raises(ValueError, match="weights must sum to one"):
        tsw.tree_barycenter(At, trees, torch.full((A.shape[0],), 0.5, dtype=F64))
    with pytest.raises(ValueError, match="weights must have shape"):
        tsw.tree_barycenter(At, trees, torch.tensor([1.0], dtype=F64))
    with pytest.raises(TypeError, match="dtype"):
        tsw.tree_barycenter(At.float(), trees)
    with pytest.raises(TypeError, match="numpy"):
        tsw.tree_barycenter(A, trees, torch.tensor(w))
