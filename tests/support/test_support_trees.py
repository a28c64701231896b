"""Quadtrees and the tree containers: against scipy's path metrics and POT's exact W1."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _oracle import path_metric, tree_w1

import tsw

F64 = torch.float64


def _points(n, d, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=F64).to(dtype)


@pytest.mark.parametrize("d", [1, 2, 3, 40])
def test_quadtree_w1_equals_emd_on_the_path_metric(d):
    X = _points(30, d, seed=d)
    trees = tsw.sample_quadtrees(X, n_trees=3, seed=d)
    g = torch.Generator().manual_seed(1)
    for tree in trees:
        V = tree.n_nodes
        # masses on the leaves (support points), unnormalised equal totals
        a = torch.rand(30, generator=g, dtype=F64)
        b = torch.rand(30, generator=g, dtype=F64)
        b = b * a.sum() / b.sum()
        mu = torch.zeros(V, dtype=F64).index_add_(0, tree.leaves, a)
        nu = torch.zeros(V, dtype=F64).index_add_(0, tree.leaves, b)
        value = tsw.tree_wasserstein(tree.parents, tree.edge_lengths, mu, nu)
        expected = tree_w1(tree, mu.numpy(), nu.numpy())
        assert abs(float(value) - expected) <= 1e-10 * max(1.0, expected)


@pytest.mark.parametrize("d", [1, 2, 5, 64])
def test_quadtree_metric_dominates_the_euclidean_one(d):
    X = _points(60, d, seed=3)
    E = (X[:, None] - X[None]).norm(dim=-1).numpy()
    for tree in tsw.sample_quadtrees(X, n_trees=4, seed=0):
        D = path_metric(tree)
        leaves = tree.leaves.numpy()
        P = D[np.ix_(leaves, leaves)]
        assert (P >= E * (1 - 1e-12)).all()
        assert len(set(leaves.tolist())) == 60  # distinct points: distinct leaves


def test_quadtree_structure():
    X = _points(200, 3, seed=4)
    tree = tsw.sample_quadtrees(X, seed=1)[0]
    par, depth = tree.parents, tree.depth
    assert par[0] == -1
    assert (par[1:] >= 0).all()
    assert (par[1:] < torch.arange(1, len(par))).all()
    assert torch.equal(depth[1:], depth[par[1:]] + 1)
    side = float(tree.side) * 0.5 ** depth[1:].double()
    torch.testing.assert_close(tree.edge_lengths[1:], side * 3**0.5, rtol=1e-15, atol=0)
    assert tree.edge_lengths[0] == 0
    # every leaf holds one point, and each point's leaf cell at its depth holds no other
    assert len(tree.leaves.unique()) == 200
    q = torch.floor((X - tree.origin) / tree.side * 2.0 ** depth[tree.leaves][:, None])
    parent_q = torch.floor(q / 2)
    for i in range(0, 200, 20):  # the parent cell of a leaf holds another point
        lev = int(depth[tree.leaves[i]])
        others = torch.floor((X - tree.origin) / tree.side * 2.0 ** (lev - 1))
        assert int((others == parent_q[i]).all(-1).sum()) >= 2
    # the root cell contains the support
    u = (X - tree.origin) / tree.side
    assert bool(((u >= 0) & (u < 1)).all())
    assert bool((tree.shift >= 0).all())
    assert bool((tree.shift < float(tree.side) / 2).all())


@pytest.mark.parametrize("d", [2, 40])
def test_cells_hold_their_points(d):
    X = _points(100, d, seed=8)
    tree = tsw.sample_quadtrees(X, seed=2)[0]
    cells = tree.cells()
    assert cells.shape == (tree.n_nodes, d)
    assert not cells[0].any()
    # every support point lies in the cell of its leaf and of each ancestor
    for i in range(0, 100, 9):
        v = int(tree.leaves[i])
        while v >= 0:
            scale = 2.0 ** int(tree.depth[v]) / tree.side
            assert torch.equal(torch.floor((X[i] - tree.origin) * scale).long(), cells[v])
            v = int(tree.parents[v])
    with pytest.raises(ValueError, match="defined for quadtrees"):
        tsw.sample_cluster_trees(X, seed=0)[0].cells()


def test_placement_gives_the_support_points_their_leaves_and_cells_to_others():
    X = _points(100, 2, seed=5)
    trees = tsw.sample_quadtrees(X, n_trees=3, seed=2)
    assert torch.equal(trees.place(X), torch.stack([t.leaves for t in trees]))
    Y = _points(50, 2, seed=6) * 1.5
    nodes = trees.place(Y)
    for tree, row in zip(trees, nodes, strict=True):
        for y, v in zip(Y, row, strict=True):
            v = int(v)
            # the placed cell contains y; no child of it does
            lev = int(tree.depth[v])
            u = (y - tree.origin) / tree.side
            if v == 0:
                continue
            cell = torch.floor(u * 2.0**lev)
            leaf_points = X[tree.leaves == v] if (tree.leaves == v).any() else None
            anc = v
            while anc > 0 and leaf_points is None:
                anc = int(tree.parents[anc])
            # y shares v's cell with the support points below v
            below = [i for i in range(100) if _is_below(tree, int(tree.leaves[i]), v)]
            assert below
            qb = torch.floor((X[below] - tree.origin) / tree.side * 2.0**lev)
            assert bool((qb == cell).all())
            # and no child cell of v holds y
            children = (tree.parents == v).nonzero().squeeze(-1)
            child_cell = torch.floor(u * 2.0 ** (lev + 1))
            for c in children.tolist():
                below_c = [i for i in below if _is_below(tree, int(tree.leaves[i]), c)]
                qc = torch.floor((X[below_c[0]] - tree.origin) / tree.side * 2.0 ** (lev + 1))
                assert not bool((qc == child_cell).all())


def _is_below(tree, node, top):
    while node >= 0:
        if node == top:
            return True
        node = int(tree.parents[node])
    return False


def test_points_outside_the_root_cell_land_on_the_root():
    X = _points(20, 2)
    trees = tsw.sample_quadtrees(X, seed=0)
    far = X.abs().max() * 10 + torch.ones(3, 2, dtype=F64)
    assert torch.equal(trees.place(far), torch.zeros(1, 3, dtype=torch.long))


def test_duplicates_share_a_leaf_and_max_depth_bounds_the_tree():
    X = _points(40, 2, seed=7)
    Xd = torch.cat([X, X[:5]])
    tree = tsw.sample_quadtrees(Xd, seed=3)[0]
    assert torch.equal(tree.leaves[40:], tree.leaves[:5])
    shallow = tsw.sample_quadtrees(X, seed=3, max_depth=2)[0]
    assert int(shallow.depth.max()) <= 2
    one = tsw.sample_quadtrees(X[:1].repeat(4, 1), seed=0)[0]
    assert one.n_nodes == 1
    assert torch.equal(one.leaves, torch.zeros(4, dtype=torch.long))


def test_seeding_contract():
    X = _points(50, 3)
    a = tsw.sample_quadtrees(X, n_trees=2, seed=5)
    b = tsw.sample_quadtrees(X, n_trees=2, seed=5)
    c = tsw.sample_quadtrees(X, n_trees=2, generator=torch.Generator().manual_seed(5))
    for s, t, u in zip(a, b, c, strict=True):
        assert torch.equal(s.shift, t.shift)
        assert torch.equal(s.shift, u.shift)
        assert torch.equal(s.parents, t.parents)
        assert torch.equal(s.leaves, u.leaves)
    assert not torch.equal(a[0].shift, tsw.sample_quadtrees(X, n_trees=2, seed=6)[0].shift)
    assert not torch.equal(a[0].shift, a[1].shift)
    state = torch.get_rng_state()
    tsw.sample_quadtrees(X)
    assert torch.equal(state, torch.get_rng_state())
    # float32 data: the same draws (shifts up to the data's rounding), the same trees
    f = tsw.sample_quadtrees(X.float(), n_trees=2, seed=5)
    torch.testing.assert_close(f[0].shift, a[0].shift, rtol=1e-6, atol=0)
    assert torch.equal(f[0].parents, a[0].parents)
    assert f[0].edge_lengths.dtype == torch.float32
    with pytest.raises(ValueError, match="at most one of seed and generator"):
        tsw.sample_quadtrees(X, seed=1, generator=torch.Generator())


def test_numpy_support_and_container():
    X = _points(30, 2)
    trees = tsw.sample_quadtrees(X.numpy(), n_trees=3, seed=0)
    assert isinstance(trees.support, torch.Tensor)
    assert (len(trees), trees.n_trees, trees.n_points, trees.dim) == (3, 3, 30, 2)
    assert [t.n_nodes for t in trees] == [trees[i].n_nodes for i in range(3)]
    t32 = trees.to(dtype=torch.float32)
    assert t32.support.dtype == torch.float32
    assert t32[0].edge_lengths.dtype == torch.float32
    assert t32[0].origin.dtype == F64
    assert t32[0].parents.dtype == torch.long
    new = trees.with_edge_lengths([2 * t.edge_lengths for t in trees])
    assert torch.equal(new[1].edge_lengths, 2 * trees[1].edge_lengths)
    assert torch.equal(new[1].parents, trees[1].parents)


def test_errors():
    X = _points(10, 2)
    with pytest.raises(ValueError, match=r"support must have shape \(n, d\)"):
        tsw.sample_quadtrees(X[0])
    with pytest.raises(ValueError, match=r"support must have shape \(n, d\)"):
        tsw.sample_quadtrees(X[None])
    bad = X.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(ValueError, match="support contains NaN"):
        tsw.sample_quadtrees(bad)
    with pytest.raises(ValueError, match="n_trees must be an int >= 1; got 0"):
        tsw.sample_quadtrees(X, 0)
    with pytest.raises(ValueError, match="max_depth must be an int >= 1; got 0"):
        tsw.sample_quadtrees(X, max_depth=0)
    with pytest.raises(TypeError, match=r"support must have dtype torch\.float32"):
        tsw.sample_quadtrees(X.long())
    trees = tsw.sample_quadtrees(X, n_trees=2, seed=0)
    with pytest.raises(ValueError, match="X must have d = 2 columns"):
        trees.place(torch.zeros(3, 3, dtype=F64))
    with pytest.raises(TypeError, match="X must have the same dtype"):
        trees.place(X.float())
    with pytest.raises(ValueError, match="sequence of 2 tensors"):
        trees.with_edge_lengths([trees[0].edge_lengths])
    with pytest.raises(ValueError, match=r"edge_lengths\[1\] must have shape"):
        trees.with_edge_lengths([trees[0].edge_lengths, trees[0].edge_lengths[:1]])
    with pytest.raises(ValueError, match=r"edge_lengths\[0\] must be non-negative"):
        trees.with_edge_lengths([-t.edge_lengths - 1 for t in trees])


def test_repr_is_a_summary():
    """The containers print their sizes, not every tensor (a dataclass's default repr printed
    the parents, lengths and leaves of every tree)."""
    X = torch.randn(300, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    trees = tsw.sample_quadtrees(X, n_trees=2, seed=0)
    text = repr(trees)
    assert text.startswith("SupportTrees(kind='quadtree', n_trees=2, n_points=300, dim=3")
    assert len(text) < 200
    assert "tensor" not in text
    assert repr(trees[0]).startswith("SupportTree(quadtree, n_nodes=")
    assert "cluster tree" in repr(tsw.sample_cluster_trees(X, seed=0)[0])


def test_a_support_requiring_grad_is_read_without_its_graph():
    """No warning about converting a tensor that requires grad; the same trees."""
    import warnings

    X = torch.randn(30, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    plain = tsw.sample_quadtrees(X, n_trees=2, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trees = tsw.sample_quadtrees(X.clone().requires_grad_(), n_trees=2, seed=4)
    assert not trees.support.requires_grad
    assert torch.equal(trees.support, X)
    for a, b in zip(trees, plain, strict=True):
        assert torch.equal(a.parents, b.parents)
        assert torch.equal(a.leaves, b.leaves)
        assert torch.equal(a.edge_lengths, b.edge_lengths)
