"""Clustering trees: against POT's exact W1 on scipy's path metric and a looped oracle."""

from __future__ import annotations

import pytest
import torch
from _oracle import tree_w1

import tsw

F64 = torch.float64


def _points(n, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=F64)


@pytest.mark.parametrize("method", ["farthest", "kmeans"])
@pytest.mark.parametrize(("d", "k", "L"), [(2, 4, 5), (16, 3, 2), (40, 4, 3)])
def test_cluster_tree_w1_equals_emd_on_the_path_metric(method, d, k, L):
    X = _points(40, d, seed=d)
    trees = tsw.sample_cluster_trees(X, n_trees=2, n_clusters=k, depth=L, method=method, seed=1)
    g = torch.Generator().manual_seed(2)
    for tree in trees:
        a = torch.rand(40, generator=g, dtype=F64)
        b = torch.rand(40, generator=g, dtype=F64) * (torch.rand(40, generator=g) > 0.5)
        b = b * a.sum() / b.sum()
        mu = torch.zeros(tree.n_nodes, dtype=F64).index_add_(0, tree.leaves, a)
        nu = torch.zeros(tree.n_nodes, dtype=F64).index_add_(0, tree.leaves, b)
        value = tsw.tree_wasserstein(tree.parents, tree.edge_lengths, mu, nu)
        expected = tree_w1(tree, mu.numpy(), nu.numpy())
        assert abs(float(value) - expected) <= 1e-10 * max(1.0, expected)


def _children(tree, v):
    return (tree.parents == v).nonzero().squeeze(-1).tolist()


@pytest.mark.parametrize("method", ["farthest", "kmeans"])
def test_structure_and_nearest_centre_assignment(method):
    X = _points(120, 5, seed=3)
    k, L = 3, 3
    tree = tsw.sample_cluster_trees(X, n_clusters=k, depth=L, method=method, seed=4)[0]
    n, V = 120, tree.n_nodes
    C = tree.centers
    torch.testing.assert_close(C[0], X.mean(0), rtol=0, atol=1e-15)
    # edge lengths: distances between the centres of a node and its parent
    par = tree.parents
    lengths = torch.linalg.vector_norm(C[1:] - C[par[1:]], dim=-1)
    torch.testing.assert_close(tree.edge_lengths[1:], lengths, rtol=1e-14, atol=1e-15)
    # the leaves: one per support point, its centre the point, one level below a cluster
    assert torch.equal(tree.leaves, torch.arange(V - n, V))
    assert torch.equal(C[tree.leaves], X)
    assert int(tree.depth[: V - n].max()) <= L
    assert torch.equal(tree.depth[1:], tree.depth[par[1:]] + 1)
    clusters = V - n
    below = {}  # the support points under each cluster
    for i in range(n):
        v = int(par[tree.leaves[i]])
        while v >= 0:
            below.setdefault(v, []).append(i)
            v = int(par[v])
    for v in range(clusters):
        kids = [c for c in _children(tree, v) if c < clusters]
        assert len(kids) <= k
        if not kids:
            continue
        assert len(kids) >= 2 or method == "kmeans"
        # every point of v goes to its nearest child centre (ties to the first)
        pts = X[below[v]]
        dist = torch.cdist(pts, C[kids])
        chosen = [next(c for c in kids if i in below.get(c, [])) for i in below[v]]
        nearest = [kids[j] for j in dist.argmin(1).tolist()]
        assert chosen == nearest
        if method == "farthest":  # the centres are support points of v
            for c in kids:
                assert bool((X[below[v]] == C[c]).all(-1).any())


def test_farthest_point_centres():
    """Gonzalez: each next centre is a point farthest from the centres chosen before."""
    X = _points(60, 4, seed=5)
    tree = tsw.sample_cluster_trees(X, n_clusters=4, depth=1, seed=6)[0]
    kids = _children(tree, 0)[:4]
    kids = [c for c in kids if c < tree.n_nodes - 60]
    C = tree.centers[kids]
    for j in range(1, len(kids)):
        mind = torch.cdist(X, C[:j]).min(1).values
        assert float(torch.cdist(C[j : j + 1], C[:j]).min()) == pytest.approx(float(mind.max()))


def test_placement():
    X = _points(80, 6, seed=7)
    for method in ("farthest", "kmeans"):
        trees = tsw.sample_cluster_trees(X, n_trees=3, n_clusters=3, depth=3, method=method, seed=8)
        assert torch.equal(trees.place(X), torch.stack([t.leaves for t in trees]))
        Y = _points(20, 6, seed=9)
        nodes = trees.place(Y)
        for tree, row in zip(trees, nodes, strict=True):
            clusters = tree.n_nodes - 80
            for y, v in zip(Y, row.tolist(), strict=True):
                u = 0  # the nearest child centre, level by level
                while True:
                    kids = [c for c in _children(tree, u) if c < clusters]
                    if not kids:
                        break
                    u = kids[int(torch.cdist(y[None], tree.centers[kids]).argmin())]
                assert v == u
    # a point equal to a support point lands on its leaf even in another order
    perm = torch.randperm(80, generator=torch.Generator().manual_seed(0))
    assert torch.equal(trees.place(X[perm]), torch.stack([t.leaves[perm] for t in trees]))


def test_degenerate_supports():
    X = _points(5, 3)
    same = tsw.sample_cluster_trees(X[:1].repeat(6, 1), depth=3, seed=0)[0]
    assert same.n_nodes == 7  # the root and six leaves at distance 0
    assert float(same.edge_lengths.max()) <= 1e-15  # the mean of equal points, rounded
    small = tsw.sample_cluster_trees(X, n_clusters=8, depth=4, seed=0)[0]
    assert torch.equal(small.centers[small.leaves], X)
    dup = torch.cat([X, X[:2]])
    t = tsw.sample_cluster_trees(dup, n_trees=2, depth=2, seed=0)
    assert torch.equal(t.place(dup)[:, 5:], t.place(dup)[:, :2])  # the first copy's leaf


def test_seeding_contract_and_dtype():
    X = _points(50, 8)
    a = tsw.sample_cluster_trees(X, n_trees=2, seed=5)
    b = tsw.sample_cluster_trees(X, n_trees=2, generator=torch.Generator().manual_seed(5))
    for s, t in zip(a, b, strict=True):
        assert torch.equal(s.centers, t.centers)
        assert torch.equal(s.parents, t.parents)
    c = tsw.sample_cluster_trees(X, n_trees=2, seed=6)
    assert not all(torch.equal(s.parents, t.parents) for s, t in zip(a, c, strict=True))
    state = torch.get_rng_state()
    tsw.sample_cluster_trees(X)
    assert torch.equal(state, torch.get_rng_state())
    f = tsw.sample_cluster_trees(X.float(), n_trees=2, seed=5)
    assert f[0].centers.dtype == torch.float32
    assert torch.equal(f[0].parents, a[0].parents)
    assert isinstance(tsw.sample_cluster_trees(X.numpy(), seed=0).support, torch.Tensor)


def test_errors():
    X = _points(10, 3)
    with pytest.raises(ValueError, match="depth must be an int >= 1; got 0"):
        tsw.sample_cluster_trees(X, depth=0)
    with pytest.raises(ValueError, match="n_clusters must be an int >= 1; got 0"):
        tsw.sample_cluster_trees(X, n_clusters=0)
    with pytest.raises(ValueError, match="method must be one of"):
        tsw.sample_cluster_trees(X, method="means")
    with pytest.raises(ValueError, match=r"support must have shape \(n, d\)"):
        tsw.sample_cluster_trees(X[None])
    bad = X.clone()
    bad[0, 0] = float("inf")
    with pytest.raises(ValueError, match="support contains NaN or Inf"):
        tsw.sample_cluster_trees(bad)
