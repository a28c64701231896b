"""Flowtree: a feasible plan between exact W1 (ot.emd2) and the quadtree's W1 (scipy paths)."""

from __future__ import annotations

import numpy as np
import ot
import pytest
import scipy.spatial.distance as ssd
import torch
from _oracle import tree_w1

import tsw
from tsw.support._flowtree import flowtree, pairwise_flowtree

F64 = torch.float64


def _cloud(n, d, seed, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=F64) + shift


def _weights(n, seed, total=1.0):
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(n, generator=g, dtype=F64) + 0.1
    return w * total / w.sum()


def _cost(X, Y, metric="euclidean", p=2):
    kw = {"p": p} if metric == "minkowski" else {}
    return ssd.cdist(np.asarray(X), np.asarray(Y), metric=metric, **kw)


def _exact(X, Y, a, b, metric="euclidean", p=2):
    return float(ot.emd2(a.numpy(), b.numpy(), _cost(X, Y, metric, p)))


@pytest.mark.parametrize("d", [1, 2, 3, 8])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_between_exact_w1_and_the_quadtree_value(d, seed):
    N, M = 17, 23
    X, Y = _cloud(N, d, seed), _cloud(M, d, seed + 100, shift=0.5)
    a, b = _weights(N, seed, 2.5), _weights(M, seed + 1, 2.5)  # unnormalised totals
    plan, cost, log = flowtree(X, Y, a, b, seed=seed, dense=True, log=True)
    exact = _exact(X, Y, a, b)
    tree = log["trees"][0][0]
    leaves = tree.leaves.numpy()
    mu = np.zeros(tree.n_nodes)
    nu = np.zeros(tree.n_nodes)
    np.add.at(mu, leaves[:N], a.numpy())
    np.add.at(nu, leaves[N:], b.numpy())
    tree_value = tree_w1(tree, mu, nu)
    assert exact - 1e-10 <= float(cost) <= tree_value + 1e-10
    # a coupling of a and b whose cost is the returned cost
    torch.testing.assert_close(plan.sum(1), a, rtol=0, atol=1e-13)
    torch.testing.assert_close(plan.sum(0), b, rtol=0, atol=1e-13)
    assert bool((plan >= 0).all())
    assert abs(float((plan.numpy() * _cost(X, Y)).sum()) - float(cost)) <= 1e-12
    # and an optimal plan of the tree metric: its tree cost is the tree value
    D = _tree_metric_between(tree, leaves[:N], leaves[N:])
    assert abs(float((plan.numpy() * D).sum()) - tree_value) <= 1e-9 * max(1.0, tree_value)


def _tree_metric_between(tree, nodes_s, nodes_t):
    from _oracle import path_metric

    return path_metric(tree)[np.ix_(nodes_s, nodes_t)]


def test_exact_when_every_plan_is_the_same():
    """One source point: every coupling is the same, so Flowtree is exact W1."""
    X = _cloud(1, 3, 0)
    Y = _cloud(9, 3, 1)
    b = _weights(9, 2)
    plan, cost = flowtree(X, Y, None, b, seed=0, dense=True)
    assert abs(float(cost) - _exact(X, Y, torch.ones(1, dtype=F64), b)) <= 1e-12
    torch.testing.assert_close(plan[0], b, rtol=0, atol=1e-15)


@pytest.mark.parametrize("seed", range(4))
def test_exact_on_separated_pairs_in_1d(seed):
    """Pairs (x, x + 1e-3) a unit apart: the tree matches each pair, the exact plan."""
    centres = torch.arange(8, dtype=F64)[:, None] * 1.0
    X = centres + 0.2
    Y = centres + 0.2 + 1e-3 * torch.rand(8, 1, generator=torch.Generator().manual_seed(seed))
    perm = torch.randperm(8, generator=torch.Generator().manual_seed(seed + 10))
    a = _weights(8, seed)
    plan, cost = flowtree(X, Y[perm], a, a[perm], seed=seed, dense=True)
    exact = _exact(X, Y[perm], a, a[perm])
    assert abs(float(cost) - exact) <= 1e-12
    expected = torch.zeros(8, 8, dtype=F64)
    expected[perm, torch.arange(8)] = a[perm]
    torch.testing.assert_close(plan, expected, rtol=0, atol=1e-15)


def test_identical_measures_cost_zero_and_shared_points_stay_separate():
    X = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0], [3.0, 1.0]], dtype=F64)
    a = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64)
    plan, cost = flowtree(X, X, a, a, seed=0, dense=True)
    assert float(cost) == 0.0
    # duplicates share a cell, yet each source point is a point of its own
    torch.testing.assert_close(plan.sum(1), a, rtol=0, atol=1e-15)
    torch.testing.assert_close(plan[2:, 2:], torch.diag(a[2:]), rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    ("metric", "p"), [("euclidean", 2), ("sqeuclidean", 2), ("cityblock", 1), ("minkowski", 3)]
)
def test_metrics_charge_the_true_ground_cost(metric, p):
    X, Y = _cloud(11, 3, 0), _cloud(13, 3, 1)
    plan, cost = flowtree(X, Y, metric=metric, p=p, seed=0, dense=True)
    C = _cost(X, Y, metric, p)
    assert abs(float((plan.numpy() * C).sum()) - float(cost)) <= 1e-12 * max(1.0, float(cost))
    assert (
        float(cost)
        >= _exact(
            X,
            Y,
            torch.full((11,), 1 / 11, dtype=F64),
            torch.full((13,), 1 / 13, dtype=F64),
            metric,
            p,
        )
        - 1e-12
    )


def test_sparse_numpy_and_float32_forms():
    X, Y = _cloud(9, 2, 0), _cloud(7, 2, 1)
    dense, cost = flowtree(X, Y, seed=3, dense=True)
    sparse, cost_s = flowtree(X, Y, seed=3)
    assert sparse.is_sparse
    assert sparse.is_coalesced()
    torch.testing.assert_close(sparse.to_dense(), dense, rtol=0, atol=0)
    assert float(cost_s) == float(cost)
    plan_np, cost_np = flowtree(X.numpy(), Y.numpy(), seed=3)
    assert isinstance(cost_np, np.floating)
    assert cost_np.dtype == np.float64
    np.testing.assert_allclose(plan_np.toarray(), dense.numpy(), rtol=0, atol=0)
    dense_np, _ = flowtree(X.numpy(), Y.numpy(), seed=3, dense=True)
    assert isinstance(dense_np, np.ndarray)
    plan32, cost32 = flowtree(X.float(), Y.float(), seed=3, dense=True)
    assert plan32.dtype == cost32.dtype == torch.float32
    assert abs(float(cost32) - float(cost)) <= 1e-5


def test_seeded_and_several_trees_average():
    X, Y = _cloud(15, 2, 0), _cloud(15, 2, 1)
    p1, c1 = flowtree(X, Y, seed=5, dense=True)
    p2, c2 = flowtree(X, Y, seed=5, dense=True)
    assert torch.equal(p1, p2)
    assert float(c1) == float(c2)
    plan, cost, log = flowtree(X, Y, n_trees=4, seed=5, dense=True, log=True)
    assert log["per_tree"].shape == (4,)
    assert abs(float(cost) - float(log["per_tree"].mean())) <= 1e-14
    # the mean plan is a coupling, and its cost is the mean of the trees' costs
    assert abs(float((plan.numpy() * _cost(X, Y)).sum()) - float(cost)) <= 1e-12
    # given trees: the same plans as the trees drawn on the union
    trees = log["trees"][0]
    plan_g, cost_g = flowtree(X, Y, trees=trees, dense=True)
    torch.testing.assert_close(plan_g, plan, rtol=0, atol=1e-15)
    assert abs(float(cost_g) - float(cost)) <= 1e-14


def test_given_trees_place_new_points():
    support = _cloud(40, 2, 0)
    trees = tsw.sample_quadtrees(support, n_trees=2, seed=1)
    X, Y = _cloud(6, 2, 5), _cloud(8, 2, 6)
    plan, cost = flowtree(X, Y, trees=trees, dense=True)
    torch.testing.assert_close(plan.sum(0), torch.full((8,), 1 / 8, dtype=F64))
    assert float(cost) >= _exact(X, Y, plan.sum(1), plan.sum(0)) - 1e-12


def test_batched_items_are_couplings():
    X, Y = _cloud(30, 2, 0).view(3, 10, 2), _cloud(36, 2, 1).view(3, 12, 2)
    plan, cost = flowtree(X, Y, seed=0, dense=True)
    assert plan.shape == (3, 10, 12)
    assert cost.shape == (3,)
    for i in range(3):
        torch.testing.assert_close(plan[i].sum(1), torch.full((10,), 0.1, dtype=F64))
        assert abs(float((plan[i].numpy() * _cost(X[i], Y[i])).sum()) - float(cost[i])) <= 1e-12
    sparse, _ = flowtree(X, Y, seed=0)
    torch.testing.assert_close(sparse.to_dense(), plan, rtol=0, atol=0)


def test_cost_gradient_holds_the_plan_fixed():
    X = _cloud(6, 2, 0).requires_grad_()
    Y = _cloud(5, 2, 1).requires_grad_()
    plan, cost = flowtree(X, Y, seed=0, dense=True)
    cost.backward()
    diff = X.detach()[:, None] - Y.detach()[None]
    unit = diff / diff.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(X.grad, (plan[..., None] * unit).sum(1))
    torch.testing.assert_close(Y.grad, -(plan[..., None] * unit).sum(0))


def test_flowtree_errors():
    X, Y = _cloud(4, 2, 0), _cloud(5, 2, 1)
    with pytest.raises(TypeError, match=r"trees must be a tsw\.SupportTrees"):
        flowtree(X, Y, trees="quadtree")
    trees = tsw.sample_quadtrees(X, seed=0)
    with pytest.raises(ValueError, match="n_trees sets the drawn quadtrees"):
        flowtree(X, Y, trees=trees, n_trees=2)
    with pytest.raises(ValueError, match="trees must live in the points' dimension"):
        flowtree(_cloud(4, 3, 0), _cloud(5, 3, 1), trees=trees)
    with pytest.raises(ValueError, match="metric"):
        flowtree(X, Y, metric="cosine")
    with pytest.raises(ValueError, match="equal"):
        flowtree(X, Y, torch.ones(4, dtype=F64), torch.ones(5, dtype=F64))
    with pytest.raises(TypeError, match="X_t"):
        flowtree(X, Y.numpy())
    with pytest.raises(ValueError, match="n_trees"):
        flowtree(X, Y, n_trees=0)
    with pytest.raises(TypeError, match="dense"):
        flowtree(X, Y, dense="yes")


# --------------------------------------------------------------------------- pairwise


def _hists(k, n, seed, zero=0.5):
    g = torch.Generator().manual_seed(seed)
    h = torch.rand(k, n, generator=g, dtype=F64) * (torch.rand(k, n, generator=g) > zero)
    h[:, 0] += 0.01  # no empty histogram
    return h / h.sum(1, keepdim=True)


@pytest.mark.parametrize("d", [1, 2, 5])
def test_pairwise_between_exact_and_the_tree_value(d):
    support = _cloud(25, d, d)
    trees = tsw.sample_quadtrees(support, n_trees=2, seed=d)
    hs, ht = _hists(3, 25, 0), _hists(4, 25, 1)
    out = pairwise_flowtree(hs, ht, trees=trees)
    assert out.shape == (3, 4)
    C = _cost(support, support)
    for i in range(3):
        for j in range(4):
            exact = float(ot.emd2(hs[i].numpy(), ht[j].numpy(), C))
            upper = np.mean([tree_w1(t, _on_nodes(t, hs[i]), _on_nodes(t, ht[j])) for t in trees])
            assert exact - 1e-10 <= float(out[i, j]) <= upper + 1e-10


def _on_nodes(tree, h):
    mass = np.zeros(tree.n_nodes)
    np.add.at(mass, tree.leaves.numpy(), h.numpy())
    return mass


def test_pairwise_exact_from_a_dirac_and_zero_on_itself():
    support = _cloud(30, 3, 0)
    trees = tsw.sample_quadtrees(support, n_trees=3, seed=0)
    hists = _hists(5, 30, 2)
    dirac = torch.zeros(30, dtype=F64)
    dirac[7] = 1.0
    out = pairwise_flowtree(dirac, hists, trees=trees)
    assert out.shape == (5,)
    expected = hists.numpy() @ _cost(support[7:8], support)[0]
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-13, atol=0)
    diag = torch.diagonal(pairwise_flowtree(hists, trees=trees))
    assert float(diag.abs().max()) <= 1e-15


def test_pairwise_forms():
    support = _cloud(12, 2, 0)
    trees = tsw.sample_quadtrees(support, seed=0)
    hs, ht = _hists(2, 12, 0), _hists(3, 12, 1)
    full = pairwise_flowtree(hs, ht, trees=trees)
    np_out = pairwise_flowtree(hs.numpy(), ht.numpy(), trees=trees)
    assert isinstance(np_out, np.ndarray)
    np.testing.assert_allclose(np_out, full.numpy(), rtol=0, atol=0)
    assert pairwise_flowtree(hs[0], ht, trees=trees).shape == (3,)
    assert pairwise_flowtree(hs, ht[1], trees=trees).shape == (2,)
    assert pairwise_flowtree(hs[0], ht[1], trees=trees).shape == ()
    out32 = pairwise_flowtree(hs.float(), ht.float(), trees=trees.to(dtype=torch.float32))
    assert out32.dtype == torch.float32
    # unnormalised equal totals
    torch.testing.assert_close(pairwise_flowtree(3 * hs, 3 * ht, trees=trees), 3 * full)
    sq = pairwise_flowtree(hs, ht, trees=trees, metric="sqeuclidean")
    assert bool((sq > 0).all())


def test_pairwise_errors():
    support = _cloud(6, 2, 0)
    trees = tsw.sample_quadtrees(support, seed=0)
    h = _hists(2, 6, 0)
    with pytest.raises(TypeError, match=r"trees must be a tsw\.SupportTrees"):
        pairwise_flowtree(h, h, trees=support)
    with pytest.raises(ValueError, match=r"hists_t must have shape \(n,\) or \(m, n\) with n=6"):
        pairwise_flowtree(h, h[:, :5], trees=trees)
    with pytest.raises(ValueError, match="hists_s and hists_t must have equal total mass"):
        pairwise_flowtree(h, 2 * h, trees=trees)
    with pytest.raises(ValueError, match="positive total mass"):
        pairwise_flowtree(0 * h, 0 * h, trees=trees)
    zeros = pairwise_flowtree(0 * h, 0 * h, trees=trees, validate=False)
    assert float(zeros.abs().max()) == 0.0  # unchecked empty histograms: nothing moves
    with pytest.raises(ValueError, match="negative"):
        pairwise_flowtree(h - 0.5, h - 0.5, trees=trees)
    with pytest.raises(TypeError, match="both be numpy arrays or both torch tensors"):
        pairwise_flowtree(h, h.numpy(), trees=trees)
    with pytest.raises(TypeError, match="hists_t must have the same dtype as hists_s"):
        pairwise_flowtree(h, h.float(), trees=trees)


# --------------------------------------------------------------------------- the matching


def _entries(rows, cols, vals):
    return sorted(
        zip(
            np.asarray(rows).tolist(),
            np.asarray(cols).tolist(),
            np.asarray(vals).tolist(),
            strict=True,
        )
    )


def _tree_plan_entries(par, cells, ms, mt):
    """The independent matching: tsw.tree_plan's on the tree with each point a leaf."""
    from tsw.core.tree_plan import match_on_tree

    V = par.shape[0]
    zeros = np.zeros(V)
    rows, cols, vals = match_on_tree(
        np.concatenate([par, cells]), np.concatenate([zeros, ms]), np.concatenate([zeros, mt])
    )
    return rows - V, cols - V, vals


def _random_matching_problem(seed):
    """A tree (quadtree or cluster tree, some with shared cells), points and masses."""
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(2, 40)), int(rng.integers(1, 4))
    X = torch.as_tensor(rng.normal(size=(n, d)))
    if seed % 5 == 4:  # duplicates: several points on one cell
        X[n // 2 :] = X[: n - n // 2].clone()
    if seed % 3 == 0:
        trees = tsw.sample_cluster_trees(X, 1, n_clusters=3, depth=2, seed=seed)
    else:
        trees = tsw.sample_quadtrees(X, 1, max_depth=[None, 2, 4][seed % 3], seed=seed)
    tree = trees[0]
    total = float(rng.uniform(0.1, 10.0))  # unnormalised equal totals
    ms = rng.random(n) * (rng.random(n) < 0.6)
    mt = rng.random(n) * (rng.random(n) < 0.6)
    ms[0] += 0.1
    mt[-1] += 0.1
    return tree, total * ms / ms.sum(), total * mt / mt.sum(), total


@pytest.mark.parametrize("seed", range(40))
def test_matching_is_tree_plans_on_the_points_leaves(seed, monkeypatch):
    """Entry for entry tsw.tree_plan's matching (every point its own leaf), compiled or not.

    The sweep keeps what reaches the root unmatched (the rounding gap of the totals,
    at most a few ulps here) as one more entry, where tree_plan's matching leaves it out:
    tree_plan's entries are all there, bit for bit, and the others are that gap.
    """
    from tsw.core import _kernels
    from tsw.support._flowmatch import match_points, matching_order, tree_arrays

    tree, ms, mt, total = _random_matching_problem(seed)
    par, depth = tree_arrays(tree.parents)
    cells = tree.leaves.numpy()
    expected = _entries(*_tree_plan_entries(par, cells, ms, mt))
    order = np.argsort(matching_order(par, cells))
    results = []
    for compiled in (True, False):
        with monkeypatch.context() as mp:
            if not compiled:
                mp.setattr(_kernels, "trees_usable", lambda: False)
            elif not _kernels.warm_up():
                continue
            r, c, v = match_points(cells[order], ms[order], mt[order], par, depth, 1e-13)
            results.append((order[r], order[c], v))
    got = _entries(*results[0])
    if len(results) == 2:  # the kernel and the fallback: the same entries in the same order
        for a, b in zip(results[0], results[1], strict=True):
            assert np.array_equal(a, b)
    rest = list(got)
    for entry in expected:
        rest.remove(entry)  # raises if missing
    assert len(rest) <= 1
    assert all(m <= 1e-13 * total for _, _, m in rest)
    # a coupling of the masses: marginals to rounding
    plan = np.zeros((ms.size, mt.size))
    np.add.at(plan, (results[0][0], results[0][1]), results[0][2])
    np.testing.assert_allclose(plan.sum(1), ms, rtol=0, atol=1e-14 * total)
    np.testing.assert_allclose(plan.sum(0), mt, rtol=0, atol=1e-14 * total)


def test_order_puts_a_nodes_points_before_its_subtrees():
    """Hand-checked: root 0 with children 1 and 2, node 3 under 1; points on 0, 1, 3, 2."""
    from tsw.support._flowmatch import matching_order

    par = np.array([-1, 0, 0, 1])
    cells = np.array([3, 0, 1, 2, 1])
    # pre-order, a node's children in decreasing label (points first, the last first):
    # 0: point 1; then node 2: point 3; then node 1: point 4, point 2, node 3: point 0
    assert matching_order(par, cells).argsort().tolist() == [1, 3, 4, 2, 0]


def _star_support():
    """Three points on a line: a source 1 at 0, a source 1e-20 at 1e20, a target 1 at 1."""
    return torch.tensor([[0.0], [1e20], [1.0]], dtype=F64)


def test_a_tiny_mass_far_away_is_moved():
    """A mass of 1e-20 at distance 1e20 contributes 1e-20 (1e20 - 1), i.e. 1: the cost is 2.

    The target's 1 and the first source's 1 share the quadtree's finest cell (52 levels of
    a root cell of side 2e20 cannot separate 0 and 1), where they meet first: the tiny
    mass reaches the root unmatched, as the rounding gap of the totals 1 + 1e-20 and 1.
    Left out, the value was 1 and the plan's first marginal lost the tiny mass. (POT's
    ot.emd2 on these masses gives 1 as well: the reference is the hand value.)
    """
    support = _star_support()
    trees = tsw.sample_quadtrees(support, seed=0)
    s = torch.tensor([1.0, 1e-20, 0.0], dtype=F64)
    t = torch.tensor([0.0, 0.0, 1.0], dtype=F64)
    hand = 1.0 * 1.0 + 1e-20 * (1e20 - 1.0)
    assert float(pairwise_flowtree(s, t, trees=trees)) == hand
    assert float(pairwise_flowtree(t, s, trees=trees)) == hand
    X, Y = support[:2], support[2:]
    a, b = s[:2], t[2:]
    plan, cost = flowtree(X, Y, a, b, seed=0, dense=True)
    assert float(cost) == hand
    assert torch.equal(plan.sum(1), a)  # the tiny mass is in the plan, exactly
    assert torch.equal(plan.sum(0), b)


@pytest.mark.parametrize("kind", ["quadtree", "cluster"])
def test_one_set_is_exactly_symmetric_with_a_zero_diagonal(kind):
    support = _cloud(50, 3, 4)
    if kind == "quadtree":
        trees = tsw.sample_quadtrees(support, n_trees=3, seed=1)
    else:
        trees = tsw.sample_cluster_trees(support, n_trees=3, n_clusters=3, depth=3, seed=1)
    h = _hists(9, 50, 5)
    S = pairwise_flowtree(h, trees=trees)
    assert torch.equal(S, S.T)
    assert bool((S.diagonal() == 0).all())
    torch.testing.assert_close(S, pairwise_flowtree(h, h.clone(), trees=trees), rtol=1e-14, atol=0)


def test_histograms_requiring_grad_are_refused():
    support = _cloud(8, 2, 0)
    trees = tsw.sample_quadtrees(support, seed=0)
    h = _hists(2, 8, 0).requires_grad_()
    with pytest.raises(ValueError, match=r"pairwise_flowtree is not differentiable.*hists_s"):
        pairwise_flowtree(h, trees=trees)
    with pytest.raises(ValueError, match="hists_t with requires_grad=True"):
        pairwise_flowtree(h.detach(), h, trees=trees)
    with torch.no_grad():  # nothing to record: computed
        assert pairwise_flowtree(h, trees=trees).shape == (2, 2)


def test_verbose_shows_the_rows_of_every_tree(capsys, monkeypatch):
    import tsw.core._progress as progress

    support = _cloud(20, 2, 0)
    trees = tsw.sample_quadtrees(support, n_trees=2, seed=0)
    h = _hists(4, 20, 1)
    quiet = pairwise_flowtree(h, trees=trees)
    assert capsys.readouterr() == ("", "")
    # without tqdm, a printed line: the rows done over the trees' rows
    monkeypatch.setitem(__import__("sys").modules, "tqdm.auto", None)
    assert progress.Progress(True, 1, "x")._bar is None
    loud = pairwise_flowtree(h, trees=trees, verbose=True)
    assert "pairwise_flowtree: 8/8 row" in capsys.readouterr().out
    assert torch.equal(quiet, loud)


def test_flowtree_costs_on_prepared_trees():
    """Chosen rows, per-tree costs and a pickled preparation give the matrix's entries."""
    import pickle

    from tsw.support._flowmatch import FlowtreeTrees, csr, flowtree_costs

    support = _cloud(30, 2, 3)
    trees = tsw.sample_quadtrees(support, n_trees=3, seed=2)
    hs, ht = _hists(5, 30, 6), _hists(7, 30, 7)
    full = pairwise_flowtree(hs, ht, trees=trees).numpy()
    prepared = pickle.loads(pickle.dumps(FlowtreeTrees.of(trees)))
    s, t = csr(hs.numpy()), csr(ht.numpy())
    np.testing.assert_allclose(flowtree_costs(prepared, s, t), full, rtol=1e-15, atol=0)
    rows = np.array([4, 1])
    np.testing.assert_allclose(flowtree_costs(prepared, s, t, rows=rows), full[rows], rtol=1e-15)
    per = flowtree_costs(prepared, s, t, per_tree=True)
    assert per.shape == (3, 5, 7)
    np.testing.assert_allclose(per.mean(0), full, rtol=1e-14)
    for i, tree in enumerate(trees):  # each tree's cost is one tree's Flowtree
        one = tsw.SupportTrees(trees.support, (tree,), trees.kind)
        np.testing.assert_allclose(per[i], pairwise_flowtree(hs, ht, trees=one), rtol=1e-15)
    with pytest.raises(ValueError, match="rows= only with a second set"):
        flowtree_costs(prepared, s, rows=rows)
