"""Clustering trees: against POT's exact W1 on scipy's path metric and a looped oracle."""

from __future__ import annotations

import numpy as np
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


def _below(tree):
    """The support points under each cluster (a dict, from the leaves' root paths)."""
    below = {}
    par = tree.parents
    for i, leaf in enumerate(tree.leaves.tolist()):
        v = int(par[leaf])
        while v >= 0:
            below.setdefault(v, []).append(i)
            v = int(par[v])
    return below


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
    below = _below(tree)
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
    for k in (0, 1):  # one cluster a node: a path, refused
        with pytest.raises(ValueError, match=rf"n_clusters must be an int >= 2 .*path\); got {k}"):
            tsw.sample_cluster_trees(X, n_clusters=k)
        with pytest.raises(ValueError, match=rf"n_clusters must be an int >= 2 .*got {k}"):
            tsw.support_tsw(X, X + 1, tree="cluster", n_clusters=k)
    with pytest.raises(TypeError, match="n_clusters must be an int >= 2; got float"):
        tsw.sample_cluster_trees(X, n_clusters=2.0)
    with pytest.raises(ValueError, match="method must be one of"):
        tsw.sample_cluster_trees(X, method="means")
    with pytest.raises(ValueError, match=r"support must have shape \(n, d\)"):
        tsw.sample_cluster_trees(X[None])
    bad = X.clone()
    bad[0, 0] = float("inf")
    with pytest.raises(ValueError, match="support contains NaN or Inf"):
        tsw.sample_cluster_trees(bad)


# --------------------------------------------------------------------------- range


def _scaled_cases():
    # (dtype, scales): the data's scale moved far from 1, where the squared distances
    # underflow to 0 or overflow to Inf; 2^-664 and 2^532 are exact powers of two
    return [
        (torch.float64, [1e-200, 1e160, 2.0**-664, 2.0**532, 1e300]),
        (torch.float32, [1e-30, 1e20, 2.0**-100, 2.0**66, 1e36]),
    ]


@pytest.mark.parametrize("method", ["farthest", "kmeans"])
@pytest.mark.parametrize(("dt", "scales"), _scaled_cases())
def test_values_at_any_representable_scale(method, dt, scales):
    """support_tsw, pairwise_tsw and the placement at data x1e-200 .. x1e300 (float64),
    x1e-30 .. x1e36 (float32): the scale-1 values times the scale, and ot.emd2 on the
    scaled tree's path metric."""
    X = _points(30, 5, seed=11)
    Y = _points(25, 5, seed=12) + 0.5
    H = torch.rand(4, 30, generator=torch.Generator().manual_seed(1), dtype=F64)
    H = (H / H.sum(1, keepdim=True)).to(dt)
    kw = {"n_clusters": 3, "depth": 3, "method": method}
    rtol = 1e-12 if dt == torch.float64 else 1e-5
    kw_tsw = {"tree": "cluster", "n_trees": 2, "seed": 0, **kw}
    v1 = float(tsw.support_tsw(X.to(dt), Y.to(dt), **kw_tsw))
    t1 = tsw.sample_cluster_trees(X.to(dt), n_trees=2, seed=0, **kw)
    p1 = tsw.pairwise_tsw(H, trees=t1).double()
    for s in scales:
        Xs, Ys = (X * s).to(dt), (Y * s).to(dt)
        v = float(tsw.support_tsw(Xs, Ys, **kw_tsw))
        assert v == pytest.approx(v1 * s, rel=rtol, abs=0)
        trees = tsw.sample_cluster_trees(Xs, n_trees=2, seed=0, **kw)
        for a, b in zip(trees, t1, strict=True):
            assert torch.equal(a.parents, b.parents)
            torch.testing.assert_close(
                a.edge_lengths.double(), b.edge_lengths.double() * s, rtol=rtol, atol=0
            )
        P = tsw.pairwise_tsw(H, trees=trees).double()
        torch.testing.assert_close(P, p1 * s, rtol=rtol, atol=0)
        # the pair (0, 1) on the first tree, against POT on scipy's path metric (in units
        # of s: ot.emd2 loses its optimum on costs near 1e-20 and below)
        tree = trees[0]
        mu = torch.zeros(tree.n_nodes, dtype=F64).index_add_(0, tree.leaves, H[0].double())
        nu = torch.zeros(tree.n_nodes, dtype=F64).index_add_(0, tree.leaves, H[1].double())
        unit = tree.replace(edge_lengths=tree.edge_lengths.double() / s)
        one = tsw.pairwise_tsw(H[:2], trees=tsw.SupportTrees(Xs, trees.trees[:1], "cluster"))
        expected = s * tree_w1(unit, mu.numpy(), nu.numpy())
        assert float(one[0, 1]) == pytest.approx(expected, rel=rtol, abs=0)
        # the placement takes the build's path at every scale
        assert torch.equal(trees.place(Xs), torch.stack([t.leaves for t in trees]))
        assert torch.equal(trees.place(Ys), t1.place(Y.to(dt)))


def test_exact_under_powers_of_two():
    """A power-of-two scale changes nothing but the units: the lengths are bit for bit
    the scale-1 ones times it."""
    X = _points(40, 6, seed=13)
    for method in ("farthest", "kmeans"):
        base = tsw.sample_cluster_trees(X, n_trees=2, n_clusters=3, depth=3, method=method, seed=2)
        for j in (-1000, -300, 300, 1000):
            trees = tsw.sample_cluster_trees(
                X * 2.0**j, n_trees=2, n_clusters=3, depth=3, method=method, seed=2
            )
            for a, b in zip(trees, base, strict=True):
                assert torch.equal(a.parents, b.parents)
                assert torch.equal(a.edge_lengths, b.edge_lengths * 2.0**j)
                assert torch.equal(a.centers, b.centers * 2.0**j)


def test_lengths_exact_for_tiny_offsets_beside_large_coordinates():
    """An edge whose ends differ by 1e-200 next to coordinates near 1 has length 1e-200
    (the sum of squares reads 0 there)."""
    X = torch.tensor([[1.0, 0.0], [1.0, 1e-200], [-1.0, 0.0]], dtype=F64)
    tree = tsw.sample_cluster_trees(X, n_clusters=3, depth=1, seed=0)[0]
    D = torch.tensor(_oracle_leaf_metric(tree))
    assert float(D[0, 1]) == pytest.approx(1e-200, rel=1e-12, abs=0)
    assert float(D[0, 2]) == pytest.approx(2.0, rel=1e-12, abs=0)


def _oracle_leaf_metric(tree):
    from _oracle import path_metric

    leaves = tree.leaves.numpy()
    return path_metric(tree)[leaves][:, leaves]


def test_overflowing_path_lengths_raise_a_range_error():
    ok = torch.tensor([[-1.5e38, 0.0], [1.5e38, 0.0], [0.0, 1.0]])
    trees = tsw.sample_cluster_trees(ok, seed=0)
    D = tsw.pairwise_tsw(torch.eye(3), trees=trees)
    torch.testing.assert_close(D[0, 1], torch.tensor(3e38), rtol=1e-6, atol=0)
    big = torch.tensor([[-2.5e38, 0.0], [2.5e38, 0.0], [0.0, 1.0]])
    msg = r"support has entries of magnitude up to 2.5e\+38: in torch.float32 the path lengths"
    with pytest.raises(ValueError, match=msg + r".*or use torch.float64"):
        tsw.sample_cluster_trees(big, seed=0)
    with pytest.raises(ValueError, match=msg):
        tsw.support_tsw(big, big.flip(0), tree="cluster", seed=0)
    with pytest.raises(ValueError, match=r"in torch\.float64 the path lengths"):
        tsw.sample_cluster_trees(big.double() * 6e269, seed=0)  # up to 1.5e308


# --------------------------------------------------------------------------- duplicates


@pytest.mark.parametrize("d", [1, 3, 40])
def test_first_copies_against_a_loop(d):
    """The first equal row of each row: copies, -0.0 beside 0.0, and rows that differ
    from another in one coordinate only (each coordinate in turn)."""
    from tsw.support._cluster import first_copies

    base = _points(1, d, seed=15)[0]
    rows = [base.clone() for _ in range(d)]
    for j in range(d):
        rows[j][j] += 1e-9  # one coordinate apart from the base
    rows += [base, rows[0].clone(), base.clone(), torch.zeros(d), -torch.zeros(d)]
    X = torch.stack(rows + [_points(30, d, seed=16)[i] for i in range(30)])
    X = X[torch.randperm(X.shape[0], generator=torch.Generator().manual_seed(0))]
    expected = [next(j for j in range(len(X)) if bool((X[j] == X[i]).all())) for i in range(len(X))]
    assert first_copies(X).tolist() == expected
    assert len(set(expected)) == len(X) - 3


@pytest.mark.parametrize("method", ["farthest", "kmeans"])
def test_repeated_points_share_a_leaf(method):
    """Copies of a point are one point of the measure: W1 between histograms that put the
    same mass on either copy is 0, as ot.emd2 on the ground metric gives."""
    X = _points(12, 3, seed=14)
    dup = torch.cat([X, X[:3], X[:1]])  # rows 12, 13, 14 copy 0, 1, 2; row 15 copies 0
    first = torch.tensor([*range(12), 0, 1, 2, 0])
    trees = tsw.sample_cluster_trees(dup, n_trees=3, n_clusters=2, depth=2, method=method, seed=0)
    for tree in trees:
        assert torch.equal(tree.leaves, tree.leaves[first])
        assert torch.equal(tree.centers[tree.leaves], dup)
    H = torch.zeros(2, 16, dtype=F64)
    H[0, 0], H[1, 12] = 1.0, 1.0  # one point, either copy
    assert float(tsw.pairwise_tsw(H, trees=trees)[0, 1]) == 0.0
    g = torch.Generator().manual_seed(3)
    A = torch.rand(3, 16, generator=g, dtype=F64)
    A = A / A.sum(1, keepdim=True)
    merged = torch.zeros(3, 16, dtype=F64).index_add_(1, first, A)  # every copy on its first
    torch.testing.assert_close(
        tsw.pairwise_tsw(A, trees=trees), tsw.pairwise_tsw(merged, trees=trees), rtol=1e-13, atol=0
    )
    import ot
    import scipy.spatial.distance as ssd

    C = ssd.cdist(dup.numpy(), dup.numpy())
    assert ot.emd2(H[0].numpy(), H[1].numpy(), C) == 0.0


# --------------------------------------------------------------------------- a reference


def _nearest_by_hand(pts, C):
    """Each point's nearest centre, the first on ties."""
    return ((pts[:, None] - C[None]) ** 2).sum(-1).argmin(1)


def _lloyd_by_hand(pts, C, steps=5):
    """Lloyd's steps: every point to its nearest centre, each centre to its points' mean
    (an empty cluster keeps its centre)."""
    for _ in range(steps):
        lab = _nearest_by_hand(pts, C)
        C = np.array([pts[lab == j].mean(0) if (lab == j).any() else C[j] for j in range(len(C))])
    return C


def _reference_tree(X, k, depth, method, seed):
    """The documented clustering tree, built node by node in NumPy (float64).

    Independent of the library's level-at-once code; only the random stream is shared:
    at each level, one uniform draw per node being split (in node order) from a
    generator seeded like ``generator=torch.Generator().manual_seed(seed)``, which picks
    the node's first centre among its points in increasing order. Returns the parents,
    depths, centres (V, d) and leaves, clusters numbered level by level, the children of
    a node in the order of their centres.
    """
    gen = torch.Generator().manual_seed(seed)
    n = X.shape[0]
    parents, depths, centres, members = [-1], [0], [X.mean(0)], [np.arange(n)]
    deepest = np.zeros(n, dtype=np.int64)
    frontier = [0]
    for level in range(1, depth + 1):
        if not frontier:
            break
        u = torch.rand(len(frontier), generator=gen, dtype=F64).numpy()
        new = []
        for g, v in enumerate(frontier):
            P = members[v]
            pts = X[P]
            if len(np.unique(pts, axis=0)) < 2:  # all its points coincide: not split
                continue
            C = [pts[min(int(u[g] * len(P)), len(P) - 1)]]
            mind = ((pts - C[0]) ** 2).sum(1)
            while len(C) < k and mind.max() > 0:  # Gonzalez: a farthest point, the first
                C.append(pts[int(np.flatnonzero(mind == mind.max())[0])])
                mind = np.minimum(mind, ((pts - C[-1]) ** 2).sum(1))
            C = np.array(C)
            if method == "kmeans":
                C = _lloyd_by_hand(pts, C)
            lab = _nearest_by_hand(pts, C)
            for j in range(len(C)):
                if (lab == j).any():
                    parents.append(v)
                    depths.append(level)
                    centres.append(C[j])
                    members.append(P[lab == j])
                    deepest[P[lab == j]] = len(parents) - 1
                    new.append(len(parents) - 1)
        frontier = new
    V = len(parents)
    first = np.array([int(np.flatnonzero((X[i] == X).all(1))[0]) for i in range(n)])
    return (
        np.array(parents + deepest.tolist()),
        np.array(depths + [depths[c] + 1 for c in deepest]),
        np.concatenate([np.array(centres), X]),
        V + first,
    )


def _check_against_reference(X, k, depth, method, seed, rtol=1e-12):
    tree = tsw.sample_cluster_trees(
        X, n_clusters=k, depth=depth, method=method, generator=torch.Generator().manual_seed(seed)
    )[0]
    parents, depths, centres, leaves = _reference_tree(X.double().numpy(), k, depth, method, seed)
    np.testing.assert_array_equal(tree.parents.numpy(), parents)
    np.testing.assert_array_equal(tree.depth.numpy(), depths)
    np.testing.assert_array_equal(tree.leaves.numpy(), leaves)
    np.testing.assert_allclose(tree.centers.double().numpy(), centres, rtol=rtol, atol=rtol)
    lengths = np.linalg.norm(centres[1:] - centres[parents[1:]], axis=1)
    np.testing.assert_allclose(
        tree.edge_lengths[1:].double().numpy(), lengths, rtol=rtol, atol=rtol
    )
    return tree


@pytest.mark.parametrize("method", ["farthest", "kmeans"])
@pytest.mark.parametrize(("n", "d", "k", "L"), [(60, 2, 3, 3), (80, 40, 4, 3), (50, 5, 2, 5)])
def test_trees_equal_a_node_by_node_reference(method, n, d, k, L):
    """Every parent, depth, leaf, centre and length, against the documented algorithm
    built node by node (d = 40: Lloyd's steps compare the centres through one matrix
    product at the top levels)."""
    for seed in (0, 1):
        _check_against_reference(_points(n, d, seed=seed + 20), k, L, method, seed)


def _lattice():
    """A 5 x 5 grid with some points twice: equal distances everywhere."""
    i, j = np.meshgrid(np.arange(5), np.arange(5), indexing="ij")
    G = np.stack([i.ravel(), j.ravel()], 1).astype(float)
    return torch.from_numpy(np.concatenate([G, G[[0, 7, 24]]]))


@pytest.mark.parametrize("method", ["farthest", "kmeans"])
def test_ties_go_to_the_earlier_centre_on_a_lattice(method):
    """A point equidistant from two centres goes to the earlier one, and the first
    farthest point is the next centre: exact ties on an integer grid."""
    X = _lattice()
    ties = 0
    for seed in range(6):
        for k, L in ((2, 3), (3, 2), (4, 3)):
            tree = _check_against_reference(X, k, L, method, seed)
            # the ties are there: some point is equidistant from two children of its node
            clusters = tree.n_nodes - X.shape[0]
            below = _below(tree)
            for v in range(clusters):
                kids = [c for c in _children(tree, v) if c < clusters]
                if len(kids) < 2:
                    continue
                D = ((X[below[v]][:, None] - tree.centers[kids][None]) ** 2).sum(-1)
                ties += int((D.min(1, keepdim=True).values == D).sum(1).gt(1).sum())
    assert ties > (50 if method == "farthest" else 0), ties


@pytest.mark.parametrize("method", ["farthest", "kmeans"])
def test_kmeans_and_farthest_in_float32_far_from_the_origin(method):
    """Data far from the origin in float32: the same clusters as the reference in float64
    (Lloyd's matrix product is formed about each node's first centre, not the origin)."""
    g = torch.Generator().manual_seed(5)
    for offset, spread in ((1000.0, 1.0), (100.0, 0.01)):
        X = (torch.randn(200, 40, generator=g, dtype=F64) * spread + offset).float()
        _check_against_reference(X, 4, 2, method, 3, rtol=1e-6 * offset)


@pytest.mark.parametrize("method", ["farthest", "kmeans"])
def test_a_node_is_split_by_its_own_spread(method):
    """Five distinct points and eight clusters: five singleton children, not split again;
    a node of equal points beside one of distinct points stays a leaf's parent."""
    X = _points(5, 3, seed=30)
    dup = torch.cat([X, X[[1, 1, 4]]])
    for Z in (X, dup):
        tree = tsw.sample_cluster_trees(Z, n_clusters=8, depth=3, method=method, seed=0)[0]
        n = Z.shape[0]
        clusters = tree.n_nodes - n
        assert clusters == 6  # the root and five children
        kids = _children(tree, 0)[:5]
        assert kids == [1, 2, 3, 4, 5]
        # each child holds one distinct point, as its centre
        got = sorted(map(tuple, tree.centers[kids].tolist()))
        assert got == sorted(map(tuple, X.tolist()))
        for i in range(n):
            v = int(tree.parents[tree.leaves[i]])
            assert torch.equal(tree.centers[v], Z[i])
            assert float(tree.edge_lengths[tree.leaves[i]]) == 0.0
    # two nodes: one of three copies, one of three distinct points
    Y = torch.tensor([[0.0, 0.0]] * 3 + [[10.0, 0.0], [10.0, 1.0], [10.0, 3.0]], dtype=F64)
    for seed in range(4):
        tree = tsw.sample_cluster_trees(Y, n_clusters=2, depth=2, method=method, seed=seed)[0]
        clusters = tree.n_nodes - 6
        top = [c for c in _children(tree, 0) if c < clusters]
        assert len(top) == 2
        copies = next(c for c in top if torch.equal(tree.centers[c], Y[0]))
        other = next(c for c in top if c != copies)
        assert not [c for c in _children(tree, copies) if c < clusters]
        assert len([c for c in _children(tree, other) if c < clusters]) == 2
        _check_against_reference(Y, 2, 2, method, seed)


def test_documented_defaults_are_the_signature_and_the_behaviour():
    """``depth`` 5 and ``n_clusters`` 4, as documented: a tree on enough points reaches
    five levels of clusters with at most four children each, and equals one built with
    those values passed."""
    import inspect
    import re

    for fn in (tsw.sample_cluster_trees, tsw.support_tsw):
        params = inspect.signature(fn).parameters
        assert params["depth"].default == 5
        assert params["n_clusters"].default == 4
        assert params["method"].default == "farthest"
    doc = tsw.sample_cluster_trees.__doc__
    assert re.search(r"depth : int, default 5\n", doc)
    assert re.search(r"n_clusters : int, default 4\n", doc)
    assert "(4), levels (5)" in " ".join(tsw.support_tsw.__doc__.split())
    X = _points(3000, 3, seed=31)
    tree = tsw.sample_cluster_trees(X, seed=0)[0]
    clusters = tree.n_nodes - 3000
    assert int(tree.depth[:clusters].max()) == 5
    assert int(torch.bincount(tree.parents[1:clusters]).max()) == 4
    same = tsw.sample_cluster_trees(X, n_clusters=4, depth=5, method="farthest", seed=0)[0]
    assert torch.equal(tree.parents, same.parents)
    v = tsw.support_tsw(X[:1500], X[1500:], tree="cluster", n_trees=2, seed=0)
    w = tsw.support_tsw(
        X[:1500], X[1500:], tree="cluster", n_trees=2, n_clusters=4, depth=5, seed=0
    )
    assert float(v) == float(w)
    assert float(v) != float(
        tsw.support_tsw(X[:1500], X[1500:], tree="cluster", n_trees=2, depth=4, seed=0)
    )


def test_huge_n_clusters_is_one_child_per_distinct_point():
    """n_clusters far above the number of points: as many children as distinct points
    (the same tree as n_clusters = n), in well under a second."""
    import time

    X = _points(50, 3, seed=32)
    for method in ("farthest", "kmeans"):
        t0 = time.perf_counter()
        big = tsw.sample_cluster_trees(X, n_clusters=10**9, depth=3, method=method, seed=0)[0]
        assert time.perf_counter() - t0 < 5.0
        ref = tsw.sample_cluster_trees(X, n_clusters=50, depth=3, method=method, seed=0)[0]
        assert torch.equal(big.parents, ref.parents)
        assert torch.equal(big.centers, ref.centers)
        assert big.n_nodes == 1 + 50 + 50


@pytest.mark.parametrize("d", [2, 8])
def test_lloyd_steps_by_hand_with_an_empty_cluster(d):
    """Lloyd's steps within two groups at once, from centres that leave one cluster
    empty (it keeps its centre): against the steps computed by hand (d = 8: through
    the matrix product, d = 2: through the differences)."""
    from tsw.support._cluster import LLOYD_STEPS, _lloyd

    g = torch.Generator().manual_seed(40)
    X = torch.randn(30, d, generator=g, dtype=F64)
    group = torch.tensor([0] * 12 + [1] * 18)
    C = torch.randn(2, 3, d, generator=g, dtype=F64)
    C[1, 2] = 50.0  # far from every point: empty at every step
    got = _lloyd(X, group, C.clone(), LLOYD_STEPS)
    for grp in (0, 1):
        c = _lloyd_by_hand(X[group == grp].numpy(), C[grp].numpy())
        np.testing.assert_allclose(got[grp].numpy(), c, rtol=1e-13, atol=1e-13)
    assert torch.equal(got[1, 2], torch.full((d,), 50.0, dtype=F64))


@pytest.mark.parametrize("d", [3, 40])
def test_kmeans_root_split_equals_scikit_learn(d):
    """The root's clusters with method="kmeans" are scikit-learn's KMeans (Lloyd, 5
    iterations) from the farthest-point centres of the same seed."""
    from sklearn.cluster import KMeans

    X = _points(200, d, seed=41)
    for seed in range(3):
        far = tsw.sample_cluster_trees(X, n_clusters=4, depth=1, seed=seed)[0]
        km = tsw.sample_cluster_trees(X, n_clusters=4, depth=1, method="kmeans", seed=seed)[0]
        init = far.centers[1:5].numpy()
        ref = KMeans(4, init=init, n_init=1, max_iter=5, tol=0.0, algorithm="lloyd").fit(X.numpy())
        np.testing.assert_allclose(
            km.centers[1:5].numpy(), ref.cluster_centers_, rtol=0, atol=1e-12
        )
        np.testing.assert_array_equal(km.parents[km.leaves].numpy() - 1, ref.labels_)
