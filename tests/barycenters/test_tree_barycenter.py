"""tsw.tree_barycenter against the exact minimum of its linear program (scipy's HiGHS),
POT's exact W1 on the tree metric, and the weighted median."""

from __future__ import annotations

import numpy as np
import ot
import pytest
import torch

import tsw
from benchmarks.barycenters import tree_lp as _lp
from tsw.support._embedding import edge_matrix

F64 = torch.float64
#: the default stopping rule: a certified relative duality gap
STOP = 1e-3


def _objective(M, x, A, w):
    return float((w[:, None] * np.abs(M @ x - A @ M.T)).sum())


def _path_metric(tree) -> np.ndarray:
    """The tree's path lengths between the support points, walking up to the common ancestor."""
    parents, lengths = tree.parents.tolist(), tree.edge_lengths.tolist()
    leaves = tree.leaves.tolist()
    n = len(leaves)
    D = np.zeros((n, n))
    for i in range(n):
        up, v, d = {}, leaves[i], 0.0
        while v >= 0:
            up[v] = d
            d, v = d + lengths[v], parents[v]
        for j in range(n):
            v, d = leaves[j], 0.0
            while v not in up:
                d, v = d + lengths[v], parents[v]
            D[i, j] = d + up[v]
    return D


def _problem(seed, n=25, K=6, T=1):
    rng = np.random.default_rng(seed)
    X = torch.tensor(rng.normal(size=(n, 2)))
    trees = tsw.sample_quadtrees(X, n_trees=T, seed=seed)
    A = rng.dirichlet(np.full(n, 0.3), size=K)
    w = rng.dirichlet(np.ones(K))
    return trees, A, w


@pytest.mark.parametrize(("seed", "T"), [(0, 1), (1, 3), (2, 5)])
def test_certified_gap_against_the_lp_on_many_problems(seed, T):
    """16 random problems a tree: lower bound <= LP minimum <= value <= minimum / (1 - gap)."""
    rng = np.random.default_rng(seed)
    n, K, P = 25, 6, 16
    trees = tsw.sample_quadtrees(torch.tensor(rng.normal(size=(n, 2))), n_trees=T, seed=seed)
    A = rng.dirichlet(np.full(n, 0.3), size=(P, K))
    w = rng.dirichlet(np.ones(K), size=P)
    M = edge_matrix(trees).to_dense().numpy()
    x, log = tsw.tree_barycenter(A, trees, w, log=True)
    assert isinstance(x, np.ndarray)
    assert x.shape == (P, n)
    assert np.all(x >= 0)
    np.testing.assert_allclose(x.sum(1), 1, atol=1e-12)
    for p in range(P):
        exact = _lp(M, A[p], w[p])
        value = _objective(M, x[p], A[p], w[p])
        assert abs(float(log["value"][p]) - value) <= 1e-10 * value
        assert float(log["lower_bound"][p]) <= exact * (1 + 1e-9)
        assert exact * (1 - 1e-9) <= value <= exact / (1 - STOP)
        assert float(log["gap"][p]) <= STOP
    objective = log["objective"]
    assert objective.shape[1] == P
    assert np.all(np.diff(objective, axis=0) <= 0)  # the best objective so far
    assert np.all(np.diff(log["lower_bounds"], axis=0) >= 0)


@pytest.mark.parametrize("T", [1, 3])
def test_a_histogram_of_weight_one_half_or_more_is_the_barycenter(T):
    """Weights (0.079, 0.921): the heavier histogram is every edge's weighted median."""
    rng = np.random.default_rng(0)
    trees = tsw.sample_quadtrees(torch.tensor(rng.normal(size=(7, 2))), n_trees=T, seed=0)
    A = rng.dirichlet(np.full(7, 0.5), size=2)
    w = np.array([0.079, 0.921])
    M = edge_matrix(trees).to_dense().numpy()
    x, log = tsw.tree_barycenter(A, trees, w, log=True)
    np.testing.assert_array_equal(x, A[1])
    assert _objective(M, x, A, w) <= _lp(M, A, w) * (1 + 1e-12)
    assert log["gap"] == 0
    # three histograms, one of weight exactly 1/2
    B = np.concatenate([A, rng.dirichlet(np.ones(7), size=1)])
    x = tsw.tree_barycenter(B, trees, np.array([0.2, 0.3, 0.5]))
    w3 = np.array([0.2, 0.3, 0.5])
    assert _objective(M, x, B, w3) <= _lp(M, B, w3) * (1 + 1e-12)


def test_value_is_the_weighted_w1_on_the_trees_metric_pot():
    """The objective is sum_k w_k (1/T) sum_t W1 on tree t's path metric (ot.emd2)."""
    trees, A, w = _problem(3, K=4, T=3)
    x, log = tsw.tree_barycenter(A, trees, w, log=True)
    costs = [np.mean([ot.emd2(x, a, _path_metric(tree)) for tree in trees]) for a in A]
    assert abs(float(log["value"]) - float(np.dot(w, costs))) <= 1e-10 * float(log["value"])


def test_stopThr_zero_runs_every_iteration_towards_the_exact_minimum():
    trees, A, w = _problem(4, T=3)
    M = edge_matrix(trees).to_dense().numpy()
    x, log = tsw.tree_barycenter(A, trees, w, numItermax=1500, stopThr=0, log=True)
    assert log["n_iter"] == 1500 or log["gap"] == 0
    exact = _lp(M, A, w)
    assert _objective(M, x, A, w) <= exact * (1 + 1e-6)
    assert float(log["gap"]) <= 1e-4


def test_scale_free_in_the_masses_and_the_lengths():
    """Masses x 1e6 and support x 1e-3: the same barycenter, the objective scaled."""
    trees, A, w = _problem(5, T=3)
    x, log = tsw.tree_barycenter(A, trees, w, log=True)
    support = trees.support * 1e-3
    small = tsw.sample_quadtrees(support, n_trees=3, seed=5)
    assert torch.allclose(small[0].edge_lengths, trees[0].edge_lengths * 1e-3)
    for H, tr, mass, length in ((A * 1e6, trees, 1e6, 1.0), (A, small, 1.0, 1e-3)):
        xs, ls = tsw.tree_barycenter(H, tr, w, log=True)
        np.testing.assert_allclose(xs / mass, x, rtol=1e-6, atol=1e-12)
        assert ls["n_iter"] == log["n_iter"]
        np.testing.assert_allclose(ls["value"], log["value"] * mass * length, rtol=1e-8)


def test_one_histogram_is_itself():
    trees, A, _ = _problem(5, K=1)
    x, log = tsw.tree_barycenter(torch.tensor(A), trees, log=True)
    assert torch.equal(x, torch.tensor(A[0]))
    assert log["n_iter"] == 0


def test_weighted_median_on_a_path():
    support = torch.tensor([[0.0], [1.0], [2.0], [3.0]], dtype=F64)
    trees = tsw.sample_quadtrees(support, n_trees=1, seed=0)
    eye = torch.eye(4, dtype=F64)
    x = tsw.tree_barycenter(eye[[0, 3]], trees, torch.tensor([0.2, 0.8], dtype=F64))
    assert torch.equal(x, eye[3])
    # three point masses, uniform weights: the median point, found by the iterations
    x, log = tsw.tree_barycenter(eye[[0, 1, 3]], trees, log=True)
    assert log["n_iter"] > 0
    assert torch.allclose(x, eye[1], atol=1e-6)


def test_objective_equals_the_tree_sliced_distances():
    """The objective is the weighted sum of the tree-sliced distances (tsw.pairwise_tsw)."""
    trees, A, w = _problem(4, T=3)
    x, log = tsw.tree_barycenter(torch.tensor(A), trees, torch.tensor(w), log=True)
    d = tsw.pairwise_tsw(x[None], torch.tensor(A), trees=trees)[0]
    assert torch.isclose(log["value"], (torch.tensor(w) * d).sum(), rtol=1e-10)


def test_batched_problems_match_one_by_one_and_padding():
    trees, A, w = _problem(6, K=5)
    _, B, v = _problem(7, K=5)
    H = torch.tensor(np.stack([A, B]))
    W = torch.tensor(np.stack([w, v]))
    xs, log = tsw.tree_barycenter(H, trees, W, numItermax=320, stopThr=0, log=True)
    assert xs.shape == (2, A.shape[1])
    assert log["objective"].shape == (21, 2)
    for p in range(2):
        x, one = tsw.tree_barycenter(H[p], trees, W[p], numItermax=320, stopThr=0, log=True)
        assert torch.allclose(x, xs[p], rtol=0, atol=1e-12)
        assert abs(float(one["value"]) - float(log["value"][p])) <= 1e-10 * float(one["value"])
    # a problem with fewer histograms pads with rows of zeros of weight zero
    H0, W0 = H.clone(), W.clone()
    H0[1, 3:] = 0
    W0[1] = torch.tensor([0.3, 0.25, 0.45, 0, 0], dtype=F64)
    x0, pad = tsw.tree_barycenter(H0, trees, W0, log=True)
    x1, _ = tsw.tree_barycenter(H[1, :3], trees, W0[1, :3], log=True)
    M = edge_matrix(trees).to_dense().numpy()
    exact = _lp(M, H[1, :3].numpy(), W0[1, :3].numpy())
    for x in (x0[1], x1):
        assert _objective(M, x.numpy(), H[1, :3].numpy(), W0[1, :3].numpy()) <= exact / (1 - STOP)
    assert float(pad["lower_bound"][1]) <= exact * (1 + 1e-9)


def test_equal_totals_are_compared_relatively():
    trees, A, w = _problem(8, K=3)
    M = edge_matrix(trees).to_dense().numpy()
    H = 1e6 * A
    H[1] *= 1 + 1e-14  # totals 1e6 and 1e6 + 1e-8
    x, log = tsw.tree_barycenter(H, trees, w, log=True)
    assert abs(x.sum() - 1e6) < 1e-3
    exact = _lp(M, A, w) * 1e6
    assert exact * (1 - 1e-9) <= float(log["value"]) <= exact / (1 - STOP)
    tiny = np.stack([A[0] * 1e-14, A[1] * 2e-14])
    named = r"hists\[0\] of total 1e-14 and hists\[1\] of total 2e-14"
    with pytest.raises(ValueError, match=named):
        tsw.tree_barycenter(tiny, trees)
    with pytest.raises(ValueError, match=r"hists\[1, 2\] of total"):
        tsw.tree_barycenter(np.stack([A, A * [[1], [1], [1.01]]]), trees)
    # tiny equal totals are a scale like any other
    x = tsw.tree_barycenter(A * 1e-14, trees, w)
    assert abs(x.sum() - 1e-14) < 1e-26


def test_a_zero_row_of_positive_weight_is_named():
    trees, A, _ = _problem(9, K=3)
    Z = A.copy()
    Z[2] = 0
    with pytest.raises(ValueError, match=r"hists\[2\] has total mass 0 but weight 0.3333"):
        tsw.tree_barycenter(Z, trees)
    with pytest.raises(ValueError, match=r"hists\[1, 2\] has total mass 0"):
        tsw.tree_barycenter(np.stack([A, Z]), trees)
    x = tsw.tree_barycenter(Z, trees, np.array([0.5, 0.5, 0.0]))  # padding: not read
    assert torch.allclose(
        torch.tensor(x), torch.tensor(tsw.tree_barycenter(A[:2], trees)), atol=1e-12
    )


def test_float32_and_shared_weights():
    trees, A, _w = _problem(8)
    trees32 = tsw.sample_quadtrees(trees.support.float(), n_trees=1, seed=8)
    x, log = tsw.tree_barycenter(torch.tensor(A, dtype=torch.float32), trees32, log=True)
    assert x.dtype == torch.float32
    assert log["value"].dtype == torch.float32
    assert abs(float(x.sum()) - 1) < 1e-5
    x64 = tsw.tree_barycenter(A, trees)
    M = edge_matrix(trees).to_dense().numpy()
    v32, v64 = (_objective(M, np.asarray(v, dtype=np.float64), A, _w * 0 + 1 / 6) for v in (x, x64))
    assert abs(v32 - v64) <= 2e-3 * v64


def test_a_run_that_stops_early_warns_with_its_gap():
    trees, A, w = _problem(10, T=3)
    with pytest.warns(UserWarning, match=r"numItermax=16 iterations at a relative duality gap"):
        tsw.tree_barycenter(A, trees, w, numItermax=16, stopThr=1e-9)


def test_verbose_shows_a_bar(capsys):
    trees, A, w = _problem(11)
    tsw.tree_barycenter(A, trees, w, verbose=True, numItermax=64, stopThr=0)
    captured = capsys.readouterr()
    assert "tree_barycenter" in captured.out + captured.err  # tqdm's bar or the lines


def test_errors():
    trees, A, w = _problem(9)
    At = torch.tensor(A)
    with pytest.raises(TypeError, match="SupportTrees"):
        tsw.tree_barycenter(At, "tree")
    with pytest.raises(ValueError, match=r"shape \(K, n\)"):
        tsw.tree_barycenter(At[:, :5], trees)
    with pytest.raises(ValueError, match=r"shape \(K, n\)"):
        tsw.tree_barycenter(At[:0], trees)
    with pytest.raises(ValueError, match=r"equal total masses.*hists\[0\].*hists\[1\]"):
        tsw.tree_barycenter(At * torch.arange(1, 7, dtype=F64)[:, None], trees)
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
    with pytest.raises(ValueError, match=r"hists requires grad.*hists.detach\(\)"):
        tsw.tree_barycenter(At.clone().requires_grad_(True), trees)
    with pytest.raises(ValueError, match="weights requires grad"):
        tsw.tree_barycenter(At, trees, torch.tensor(w).requires_grad_(True))
    with pytest.raises(ValueError, match="stopThr"):
        tsw.tree_barycenter(At, trees, stopThr=-1.0)
    with pytest.raises(TypeError, match="verbose"):
        tsw.tree_barycenter(At, trees, verbose="yes")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_gives_the_cpu_barycenter_within_the_gap():
    trees, A, w = _problem(12, T=3)
    _, log = tsw.tree_barycenter(torch.tensor(A), trees, torch.tensor(w), log=True)
    cuda_trees = trees.to("cuda")
    xc, logc = tsw.tree_barycenter(
        torch.tensor(A).cuda(), cuda_trees, torch.tensor(w).cuda(), log=True
    )
    assert xc.device.type == "cuda"
    M = edge_matrix(trees).to_dense().numpy()
    exact = _lp(M, A, w)
    assert float(logc["lower_bound"]) <= exact * (1 + 1e-9)
    assert _objective(M, xc.cpu().numpy(), A, w) <= exact / (1 - STOP)
    assert abs(float(logc["value"]) - float(log["value"])) <= STOP * float(log["value"])
