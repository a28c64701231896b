"""support_tsw: against POT's exact W1 on each tree's path metric, and the distance contract.

support_tsw is not in the shared contract suite (tests/test_contract.py): that suite
differentiates in the points, and this distance is differentiable in the weights only
(points are placed on tree nodes). Its contract properties are checked here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _oracle import tree_w1

import tsw

F64 = torch.float64


def _data(N=9, M=7, d=2, seed=0, batch=None, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    lead = () if batch is None else (batch,)
    X = torch.randn(*lead, N, d, generator=g, dtype=F64)
    Y = torch.randn(*lead, M, d, generator=g, dtype=F64) + 0.5
    a = torch.rand(*lead, N, generator=g, dtype=F64) + 0.1
    b = torch.rand(*lead, M, generator=g, dtype=F64) + 0.1
    a, b = a / a.sum(-1, keepdim=True), b / b.sum(-1, keepdim=True)
    return tuple(t.to(dtype) for t in (X, Y, a, b))


def _leaf_of(tree, S, Z):
    """The leaf of the support row equal to each row of Z (a loop over the rows)."""
    return torch.tensor([int(tree.leaves[int((z == S).all(-1).nonzero()[0])]) for z in Z])


def _oracle(trees, X, Y, a, b):
    """Mean over the trees of ot.emd2 on the path metric, points matched to leaves by rows."""
    S = trees.support
    vals = []
    for tree in trees:
        mu = torch.zeros(tree.n_nodes, dtype=F64).index_add_(0, _leaf_of(tree, S, X), a.double())
        nu = torch.zeros(tree.n_nodes, dtype=F64).index_add_(0, _leaf_of(tree, S, Y), b.double())
        vals.append(tree_w1(tree, mu.numpy(), nu.numpy()))
    return float(np.mean(vals))


@pytest.mark.parametrize(
    "kw",
    [
        {"tree": "quadtree"},
        {"tree": "quadtree", "max_depth": 2},
        {"tree": "cluster", "n_clusters": 3, "depth": 2},
        {"tree": "cluster", "method": "kmeans", "depth": 3},
    ],
)
@pytest.mark.parametrize("d", [2, 12])
def test_value_equals_emd_on_each_tree(kw, d):
    X, Y, a, b = _data(d=d, seed=d)
    a, b = 3 * a, 3 * b  # unnormalised equal totals
    v, log = tsw.support_tsw(X, Y, a, b, n_trees=3, seed=1, log=True, **kw)
    trees = log["trees"]
    assert len(trees) == 3
    # built on the distinct points of the union
    assert trees.n_points == len(torch.unique(torch.cat([X, Y]), dim=0))
    assert abs(float(v) - _oracle(trees, X, Y, a, b)) <= 1e-10
    torch.testing.assert_close(v, log["per_tree"].mean())
    # the same trees given back give the same value (placement on leaves)
    torch.testing.assert_close(tsw.support_tsw(X, Y, a, b, trees=trees), v, rtol=1e-14, atol=0)
    # and equal the builder's trees for the same seed
    union = torch.unique(torch.cat([X, Y]), dim=0)
    if kw["tree"] == "quadtree":
        again = tsw.sample_quadtrees(union, 3, max_depth=kw.get("max_depth"), seed=1)
    else:
        opts = {k: kw[k] for k in ("n_clusters", "depth", "method") if k in kw}
        again = tsw.sample_cluster_trees(union, 3, seed=1, **opts)
    assert all(torch.equal(s.parents, t.parents) for s, t in zip(again, trees, strict=True))


def test_explicit_trees_on_a_larger_support():
    X, Y, a, b = _data(N=6, M=5, d=3, seed=2)
    Z = torch.cat([X, Y, torch.randn(20, 3, dtype=F64)])
    for trees in (
        tsw.sample_quadtrees(Z, n_trees=3, seed=0),
        tsw.sample_cluster_trees(Z, n_trees=3, n_clusters=3, depth=2, seed=0),
    ):
        v = tsw.support_tsw(X, Y, a, b, trees=trees)
        assert abs(float(v) - _oracle(trees, X, Y, a, b)) <= 1e-10
        # equals the (1, 1) entry of pairwise_tsw on histograms over Z
        h = torch.zeros(1, len(Z), dtype=F64)
        k = torch.zeros(1, len(Z), dtype=F64)
        h[0, :6], k[0, 6:11] = a, b
        torch.testing.assert_close(tsw.pairwise_tsw(h, k, trees=trees)[0, 0], v)


def test_one_set_of_trees_for_a_whole_batch():
    Xb, Yb, ab, bb = _data(N=6, M=5, d=3, seed=12, batch=3)
    Z = torch.cat([Xb.reshape(-1, 3), Yb.reshape(-1, 3), torch.randn(10, 3, dtype=F64)])
    for trees in (
        tsw.sample_quadtrees(Z, n_trees=3, seed=0),
        tsw.sample_cluster_trees(Z, n_trees=3, n_clusters=3, depth=2, seed=0),
    ):
        v, log = tsw.support_tsw(Xb, Yb, ab, bb, trees=trees, log=True)
        assert v.shape == (3,)
        assert all(t is trees for t in log["trees"])
        for i in range(3):
            assert abs(float(v[i]) - _oracle(trees, Xb[i], Yb[i], ab[i], bb[i])) <= 1e-10


@pytest.mark.parametrize("tree", ["quadtree", "cluster"])
def test_identity_symmetry_and_triangle(tree):
    X, Y, a, b = _data(seed=3)
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(0))
    kw = {"tree": tree, "n_trees": 4, "depth": 3}
    assert float(tsw.support_tsw(X, X[perm], a, a[perm], seed=0, **kw)) == 0.0
    v = tsw.support_tsw(X, Y, a, b, seed=1, **kw)
    assert float(v) > 0
    # the trees are built on the union as a set: the same trees either way
    torch.testing.assert_close(tsw.support_tsw(Y, X, b, a, seed=1, **kw), v, rtol=1e-14, atol=0)
    # the triangle inequality with trees shared by the three pairs
    W, _, c, _ = _data(seed=4)
    union = torch.cat([X, Y, W])
    build = tsw.sample_quadtrees if tree == "quadtree" else tsw.sample_cluster_trees
    trees = build(union, 4, seed=2)
    xy = tsw.support_tsw(X, Y, a, b, trees=trees)
    xw = tsw.support_tsw(X, W, a, c, trees=trees)
    wy = tsw.support_tsw(W, Y, c, b, trees=trees)
    assert float(xy) <= float(xw + wy) + 1e-12


def test_seed_generator_and_global_rng():
    X, Y, a, b = _data(seed=5)
    v = tsw.support_tsw(X, Y, a, b, seed=3)
    assert torch.equal(v, tsw.support_tsw(X, Y, a, b, seed=3))
    assert not torch.equal(v, tsw.support_tsw(X, Y, a, b, seed=4))
    assert torch.equal(v, tsw.support_tsw(X, Y, a, b, generator=torch.Generator().manual_seed(3)))
    state = torch.get_rng_state()
    u1, u2 = tsw.support_tsw(X, Y, a, b), tsw.support_tsw(X, Y, a, b)
    assert not torch.equal(u1, u2)
    assert torch.equal(state, torch.get_rng_state())


@pytest.mark.parametrize("tree", ["quadtree", "cluster"])
def test_dtype_device_batch_and_numpy(tree, device):
    X, Y, a, b = (t.to(device) for t in _data(seed=6))
    values = {}
    for dt in (torch.float32, torch.float64):
        v = tsw.support_tsw(X.to(dt), Y.to(dt), a.to(dt), b.to(dt), tree=tree, seed=3)
        assert (v.dtype, v.device, v.shape) == (dt, X.device, ())
        values[dt] = v
    torch.testing.assert_close(values[torch.float32].double(), values[F64], rtol=1e-5, atol=1e-6)
    Xb, Yb, ab, bb = (t.to(device) for t in _data(N=6, M=8, batch=3, seed=7))
    for weights in ((ab, bb), (None, None)):
        batched, log = tsw.support_tsw(Xb, Yb, *weights, tree=tree, seed=2, log=True)
        loop = torch.stack(
            [
                tsw.support_tsw(
                    Xb[i], Yb[i], *(w if w is None else w[i] for w in weights), tree=tree, seed=2
                )
                for i in range(3)
            ]
        )
        torch.testing.assert_close(batched, loop, rtol=1e-14, atol=0)
        assert isinstance(log["trees"], tuple)
        assert len(log["trees"]) == 3
        assert log["per_tree"].shape == (3, 10)
    # per-item explicit trees
    same = tsw.support_tsw(Xb, Yb, trees=log["trees"])  # the last batched call: unweighted
    torch.testing.assert_close(same, batched)
    out = tsw.support_tsw(X.cpu().numpy(), Y.cpu().numpy(), tree=tree, seed=0)
    assert isinstance(out, np.generic)


def test_weights_n_not_m_and_duplicates():
    X, Y, a, b = _data(N=5, M=8, seed=8)
    v = tsw.support_tsw(X, Y, a, b, seed=0)
    assert v.shape == ()
    # a duplicated atom at half weight: the same trees (built on distinct points)
    X2 = torch.cat([X, X[2:3]])
    a2 = torch.cat([a, a[2:3] / 2])
    a2[2] = a[2] / 2
    torch.testing.assert_close(tsw.support_tsw(X2, Y, a2, b, seed=0), v, rtol=1e-14, atol=1e-16)
    # uniform weights by default
    u = torch.full((5,), 0.2, dtype=F64)
    w = torch.full((8,), 1 / 8, dtype=F64)
    torch.testing.assert_close(tsw.support_tsw(X, Y, seed=0), tsw.support_tsw(X, Y, u, w, seed=0))


def test_gradients_in_the_weights():
    X, Y, a0, b0 = _data(N=5, M=4, seed=9)
    trees = tsw.sample_cluster_trees(torch.cat([X, Y]), 3, n_clusters=2, depth=2, seed=0)

    def f(u, v):
        return tsw.support_tsw(X, Y, a0 + u - u.mean(), b0 + v - v.mean(), trees=trees)

    u = torch.zeros(5, dtype=F64, requires_grad=True)
    v = torch.zeros(4, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(f, (u, v))
    assert torch.autograd.gradgradcheck(f, (u, v))

    def g(a, b):  # built trees, validation off: the value off the simplex too
        return tsw.support_tsw(X, Y, a, b, n_trees=2, seed=1, validate=False)

    a, b = a0.clone().requires_grad_(), b0.clone().requires_grad_()
    assert torch.autograd.gradcheck(g, (a, b))


def test_errors():
    X, Y, a, b = _data(seed=10)
    with pytest.raises(ValueError, match="a and b must have equal total mass"):
        tsw.support_tsw(X, Y, a, 2 * b)
    with pytest.raises(ValueError, match="differentiable in the weights a and b only"):
        tsw.support_tsw(X.requires_grad_(), Y)
    X = X.detach()
    with pytest.raises(ValueError, match="X_s contains NaN"):
        tsw.support_tsw(torch.full_like(X, float("nan")), Y)
    with pytest.raises(ValueError, match=r"a must have shape \(N,\)"):
        tsw.support_tsw(X, Y, a[:3], b)
    with pytest.raises(ValueError, match="tree must be one of"):
        tsw.support_tsw(X, Y, tree="octree")
    with pytest.raises(ValueError, match="depth must be an int >= 1; got 0"):
        tsw.support_tsw(X, Y, tree="cluster", depth=0)
    with pytest.raises(ValueError, match=r"n_clusters must be an int >= 2 .*got 0"):
        tsw.support_tsw(X, Y, tree="cluster", n_clusters=0)
    with pytest.raises(ValueError, match="n_trees must be an int >= 1; got 0"):
        tsw.support_tsw(X, Y, n_trees=0)
    trees3 = tsw.sample_quadtrees(torch.randn(5, 3, dtype=F64), seed=0)
    with pytest.raises(ValueError, match="trees must be built on points of dimension d = 2"):
        tsw.support_tsw(X, Y, trees=trees3)
    trees = tsw.sample_quadtrees(torch.cat([X, Y]), seed=0)
    with pytest.raises(ValueError, match="trees must have the dtype and device of X_s"):
        tsw.support_tsw(X.float(), Y.float(), trees=trees)
    with pytest.raises(TypeError, match="trees must be None, a SupportTrees"):
        tsw.support_tsw(X, Y, trees="quadtree")
    Xb, Yb, _, _ = _data(batch=2, seed=11)
    with pytest.raises(ValueError, match=r"one per batch item \(B = 2\); got a sequence of 1"):
        tsw.support_tsw(Xb, Yb, trees=[trees])
