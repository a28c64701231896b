"""Transport plans against independent computations (float64, 1e-10 unless said).

The expected values come from outside the library: POT 0.9.7's sliced plans
(``ot.sliced``) on the same projections, POT's exact LP (``ot.emd``, ``ot.emd2``) on
explicit tree metrics built in ``_reference`` (scipy's shortest paths), ``ot.dist`` for
the costs in R^d, and dense formulas differentiated by autograd for the gradients. The
library only receives the same inputs.

Sections: 1 POT's sliced plans, 2 the exact plan on a rooted tree, 3 optimal plans on
systems of lines, 4 the expected tree-sliced plan, 5 SWGG, 6 the barycentric map.
"""

from __future__ import annotations

import _reference as ref
import numpy as np
import ot
import pytest
import torch
from _reference import TOL, assert_close, unit_rows, weights

import tsw
from tsw.core._plans import line_system_plan
from tsw.core._validation import check_measures
from tsw.core.splits import LineSplit
from tsw.euclidean._db_tsw import db_projection
from tsw.euclidean._tsw_sl import constant_split_projection

F64 = torch.float64
METRICS = [("sqeuclidean", 2), ("euclidean", 2), ("cityblock", 1), ("minkowski", 3)]


def dense(plan, shape=None):
    """Any plan (dense or sparse, torch, numpy or scipy) as a float64 numpy array."""
    if isinstance(plan, list):
        return np.stack([dense(p) for p in plan])
    if isinstance(plan, torch.Tensor):
        plan = plan.to_dense() if plan.is_sparse else plan
        return plan.detach().cpu().double().numpy()
    if hasattr(plan, "toarray"):
        return plan.toarray().astype(np.float64)
    return np.asarray(plan, dtype=np.float64)


def pot_dense(pt, n, m):
    """POT's per-projection plan (data, rows, cols) as an (n, m) array (duplicates summed)."""
    out = np.zeros((n, m))
    np.add.at(out, (np.asarray(pt.rows), np.asarray(pt.cols)), np.asarray(pt.data))
    return out


def sliced_problem(rng, case, d=3, L=6):
    """Points, weights and unit projections (d, L) for the three kinds of plans."""
    if case == "permutation":  # 8 atoms: POT 0.9.7 sees a permutation (eight 1/8 sum to 1)
        n = m = 8
        a = b = None
    else:
        n, m = (7, 7) if case == "weighted" else (6, 9)
        a, b = weights(rng, n), weights(rng, m)
    X = rng.normal(size=(n, d))
    Y = rng.normal(size=(m, d)) + 0.5
    P = unit_rows(rng, L, d).T.copy()
    return X, Y, a, b, P


def uniform(n):
    return np.full(n, 1.0 / n)


# --------------------------------------------------------------------------- 1 sliced plans


def test_pot_doctest_values():
    x = np.array([[3.0, 3.0], [1.0, 1.0]])
    y = np.array([[2.0, 2.5], [3.0, 2.0]])
    P = np.eye(2)
    plan, cost = tsw.min_sliced_transport_plan(x, y, projections=P)
    assert_close(plan, [[0.0, 0.5], [0.5, 0.0]])
    assert cost == pytest.approx(2.125, abs=1e-15)
    assert isinstance(cost, np.floating)
    plan, cost = tsw.expected_sliced_plan(x, y, projections=P)
    assert_close(plan, np.full((2, 2), 0.25))
    assert cost == pytest.approx(2.625, abs=1e-15)
    plan, cost = tsw.expected_sliced_plan(
        torch.tensor(x), torch.tensor(y), projections=torch.eye(2, dtype=F64)
    )
    assert isinstance(plan, torch.Tensor)
    assert plan.dtype == F64
    assert float(cost) == pytest.approx(2.625, abs=1e-15)


@pytest.mark.parametrize("case", ["permutation", "weighted", "sizes"])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_sliced_plans_equal_pots(case, kind):
    rng = np.random.default_rng(1)
    X, Y, a, b, P = sliced_problem(rng, case)
    ref_plans, ref_costs = ot.sliced.sliced_plans(X, Y, a, b, projections=P)
    args = (X, Y, a, b)
    if kind == "torch":
        args = tuple(None if v is None else torch.tensor(v) for v in args)
        P = torch.tensor(P)
    plans, costs = tsw.sliced_plans(*args, projections=P)
    assert len(plans) == P.shape[1]
    M = ot.dist(X, Y)
    n, m = M.shape
    for k, pt in enumerate(plans):
        expected = pot_dense(ref_plans[k], n, m)
        assert_close(pot_dense(pt, n, m), expected)
        # the cost of this plan in R^d, from ot.dist
        assert_close(costs[k], (expected * M).sum())
    if case == "permutation":  # POT 0.9.7's costs are right for permutations only
        assert len(ref_plans[0].data) == len(plans[0].data) == n
        assert_close(costs, ref_costs)


@pytest.mark.parametrize(("metric", "p"), METRICS)
def test_metrics_equal_pots_costs(metric, p):
    rng = np.random.default_rng(2)
    X, Y, a, b, P = sliced_problem(rng, "permutation")
    _, expected = ot.sliced.sliced_plans(X, Y, metric=metric, p=p, projections=P)
    _, costs = tsw.sliced_plans(X, Y, metric=metric, p=p, projections=P)
    assert_close(costs, expected)
    rng = np.random.default_rng(3)
    X, Y, a, b, P = sliced_problem(rng, "sizes")
    plans, costs = tsw.sliced_plans(X, Y, a, b, metric=metric, p=p, projections=P)
    M = ot.dist(X, Y, metric=metric, p=p)
    for k, pt in enumerate(plans):
        assert_close(costs[k], (pot_dense(pt, *M.shape) * M).sum())


def test_min_sliced_plan_equals_pots_for_permutations():
    rng = np.random.default_rng(4)
    X, Y, _, _, P = sliced_problem(rng, "permutation", L=10)
    plan, cost, log = tsw.min_sliced_transport_plan(X, Y, projections=P, log=True)
    eplan, ecost, elog = ot.sliced.min_sliced_transport_plan(X, Y, projections=P, log=True)
    assert_close(plan, eplan)
    assert_close(cost, ecost)
    for key in ("costs", "min_projection", "X_min_projection", "Y_min_projection"):
        assert_close(log[key], elog[key])


@pytest.mark.parametrize("case", ["weighted", "sizes"])
def test_min_sliced_plan_is_the_least_costly_projection_plan(case):
    """Where POT 0.9.7's costs are wrong (not a permutation), compare with its plans' true costs."""
    rng = np.random.default_rng(5)
    X, Y, a, b, P = sliced_problem(rng, case, L=12)
    ref_plans, _ = ot.sliced.sliced_plans(X, Y, a, b, projections=P)
    M = ot.dist(X, Y)
    true = np.array([(pot_dense(pt, *M.shape) * M).sum() for pt in ref_plans])
    plan, cost = tsw.min_sliced_transport_plan(X, Y, a, b, projections=P)
    assert_close(cost, true.min())
    assert_close(plan, pot_dense(ref_plans[int(true.argmin())], *M.shape))
    assert_close(plan.sum(1), a)
    assert_close(plan.sum(0), b)


@pytest.mark.parametrize(
    ("case", "beta"),
    [("permutation", 0.0), ("permutation", 1.5), ("weighted", 0.0), ("sizes", 0.0)],
)
def test_expected_sliced_plan_equals_pots(case, beta):
    rng = np.random.default_rng(6)
    X, Y, a, b, P = sliced_problem(rng, case)
    eplan, ecost = ot.sliced.expected_sliced_plan(X, Y, a, b, projections=P, beta=beta)
    plan, cost = tsw.expected_sliced_plan(X, Y, a, b, projections=P, beta=beta)
    assert_close(plan, eplan)
    assert_close(cost, ecost)
    assert_close(cost, (plan * ot.dist(X, Y)).sum())
    splan, scost = tsw.expected_sliced_plan(X, Y, a, b, projections=P, beta=beta, dense=False)
    assert type(splan).__name__.startswith("coo")
    assert_close(splan.toarray(), eplan)
    assert_close(scost, ecost)


def test_expected_sliced_plan_softmin_weights_use_true_costs():
    rng = np.random.default_rng(7)
    X, Y, a, b, P = sliced_problem(rng, "sizes", L=5)
    ref_plans, _ = ot.sliced.sliced_plans(X, Y, a, b, projections=P)
    M = ot.dist(X, Y)
    plans = [pot_dense(pt, *M.shape) for pt in ref_plans]
    true = np.array([(q * M).sum() for q in plans])
    w = np.exp(-2.0 * (true - true.min()))
    w /= w.sum()
    plan, cost, log = tsw.expected_sliced_plan(X, Y, a, b, projections=P, beta=2.0, log=True)
    assert_close(plan, sum(wk * q for wk, q in zip(w, plans, strict=True)))
    assert_close(cost, (w * true).sum())
    assert_close(log["weights"], w)
    assert_close(log["costs"], true)


def test_sparse_plans_have_at_most_n_plus_m_minus_1_entries_per_slice():
    rng = np.random.default_rng(8)
    X, Y, a, b, P = sliced_problem(rng, "sizes", L=7)
    X, Y, a, b, P = (torch.tensor(v) for v in (X, Y, a, b, P))
    plan, _ = tsw.min_sliced_transport_plan(X, Y, a, b, projections=P, dense=False)
    assert plan.is_sparse
    assert plan.is_coalesced()
    assert plan._nnz() <= 6 + 9 - 1
    plan, _ = tsw.expected_sliced_plan(X, Y, a, b, projections=P, dense=False)
    assert plan._nnz() <= 7 * (6 + 9 - 1)
    assert bool((plan.values() > 0).all())
    dplan, _ = tsw.expected_sliced_plan(X, Y, a, b, projections=P)
    assert_close(plan.to_dense(), dplan)


@pytest.mark.parametrize("fn", ["min", "expected"])
@pytest.mark.parametrize("per_item", [False, True])
def test_batched_equals_a_loop(fn, per_item):
    rng = np.random.default_rng(9)
    B, n, m, d, L = 3, 5, 8, 3, 6
    X = torch.tensor(rng.normal(size=(B, n, d)))
    Y = torch.tensor(rng.normal(size=(B, m, d)))
    a, b = torch.tensor(weights(rng, (B, n))), torch.tensor(weights(rng, (B, m)))
    shape = (B, L, d) if per_item else (L, d)
    P = torch.tensor(rng.normal(size=shape))
    P = (P / P.norm(dim=-1, keepdim=True)).mT.contiguous()
    f = tsw.min_sliced_transport_plan if fn == "min" else tsw.expected_sliced_plan
    for sparse in (False, True):
        plan, cost = f(X, Y, a, b, projections=P, dense=not sparse)
        for i in range(B):
            one, c = f(X[i], Y[i], a[i], b[i], projections=P[i] if per_item else P)
            assert_close(dense(plan)[i], one)
            assert_close(cost[i], c)
    plans, costs = tsw.sliced_plans(X, Y, a, b, projections=P)
    assert plans[0].rows.shape == (B, n + m - 1)
    assert costs.shape == (B, L)
    planl, _ = f(X.numpy(), Y.numpy(), a.numpy(), b.numpy(), projections=P.numpy(), dense=False)
    assert isinstance(planl, list)
    assert len(planl) == B


@pytest.mark.parametrize(("metric", "p"), METRICS)
def test_cost_gradient_holds_the_plan_fixed(metric, p):
    """The gradient of sum_ij P_ij c(x_i, y_j) with P held fixed, from the dense formula."""
    rng = np.random.default_rng(10)
    X0, Y0, a, b, P = sliced_problem(rng, "sizes")
    X = torch.tensor(X0, requires_grad=True)
    Y = torch.tensor(Y0, requires_grad=True)
    a, b, P = torch.tensor(a), torch.tensor(b), torch.tensor(P)
    plan, cost = tsw.expected_sliced_plan(X, Y, a, b, projections=P, metric=metric, p=p)
    gx, gy = torch.autograd.grad(cost, (X, Y))
    Xr, Yr = torch.tensor(X0, requires_grad=True), torch.tensor(Y0, requires_grad=True)
    diff = (Xr[:, None, :] - Yr[None, :, :]).abs()
    C = diff.square().sum(-1) if metric == "sqeuclidean" else diff.pow(p).sum(-1).pow(1 / p)
    ex, ey = torch.autograd.grad((plan.detach() * C).sum(), (Xr, Yr))
    assert_close(gx, ex.numpy())
    assert_close(gy, ey.numpy())
    _, c2 = tsw.min_sliced_transport_plan(X, Y, a, b, projections=P, metric=metric, p=p)
    assert torch.autograd.grad(c2, X)[0].shape == X.shape


def test_gradient_is_finite_between_a_measure_and_itself():
    X = torch.tensor(np.random.default_rng(11).normal(size=(6, 3)), requires_grad=True)
    for metric in ("euclidean", "minkowski"):
        _, cost = tsw.expected_sliced_plan(X, X, n_projections=4, seed=0, metric=metric, p=3)
        (g,) = torch.autograd.grad(cost, X)
        assert float(cost.detach()) == 0  # these metrics gather the differences
        assert bool(torch.isfinite(g).all())
        assert float(g.abs().max()) == 0


def test_seed_generator_and_dtype():
    rng = np.random.default_rng(12)
    X, Y = (torch.tensor(rng.normal(size=(9, 4)), dtype=torch.float32) for _ in range(2))
    p1, c1 = tsw.expected_sliced_plan(X, Y, n_projections=5, seed=3)
    p2, c2 = tsw.expected_sliced_plan(X, Y, n_projections=5, seed=3)
    assert torch.equal(p1, p2)
    assert torch.equal(c1, c2)
    assert p1.dtype == torch.float32
    assert c1.dtype == torch.float32
    _, _, log = tsw.expected_sliced_plan(X, Y, n_projections=5, seed=3, log=True)
    assert torch.equal(log["projections"], tsw.sample_projections(4, 5, seed=3))
    state = torch.random.get_rng_state()
    tsw.expected_sliced_plan(X, Y, n_projections=5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(state, torch.random.get_rng_state())


def test_identity_plan_between_a_measure_and_itself():
    rng = np.random.default_rng(13)
    X = torch.tensor(rng.normal(size=(8, 3)))
    a = torch.tensor(weights(rng, 8))
    plan, cost = tsw.expected_sliced_plan(X, X, a, a, n_projections=6, seed=0)
    assert_close(plan, np.diag(a.numpy()), tol=1e-15)
    # small squared Euclidean costs are read from a Gram matrix on the CPU: 0 to rounding
    assert abs(float(cost)) <= 1e-14


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "n_projections must be given"),
        ({"n_projections": 0}, "n_projections must be an int >= 1"),
        ({"n_projections": 3, "metric": "cosine"}, "metric must be one of"),
        ({"n_projections": 3, "metric": "minkowski", "p": 0.5}, "p must be a finite real"),
        ({"n_projections": 3, "beta": -1.0}, "beta must be a finite real number >= 0"),
        ({"projections": torch.ones(2, 3, dtype=F64)}, r"projections must have shape \(d, L\)"),
        ({"n_projections": 3, "batch_size": 0}, "batch_size must be an int >= 1"),
        ({"n_projections": 3, "dense": "yes"}, "dense must be True or False"),
    ],
)
def test_bad_options_raise(kwargs, match):
    X = torch.zeros(4, 3, dtype=F64)
    with pytest.raises((TypeError, ValueError), match=match):
        tsw.expected_sliced_plan(X, X + 1, **kwargs)


def test_bad_measures_raise():
    X = torch.zeros(4, 3, dtype=F64)
    with pytest.raises(ValueError, match="a and b must have equal total mass"):
        tsw.sliced_plans(X, X, torch.ones(4, dtype=F64), None, n_projections=2)
    with pytest.raises(TypeError, match="X_t must be a numpy array like X_s"):
        tsw.min_sliced_transport_plan(X.numpy(), X, n_projections=2)


# --------------------------------------------------------------------------- 2 rooted trees


def random_tree(rng, V, zero_edges=0.2):
    """A random rooted tree with nodes in random order, lengths with some zeros."""
    parents = np.array([-1] + [int(rng.integers(0, v)) for v in range(1, V)])
    perm = rng.permutation(V)
    relabelled = np.full(V, -1)
    for v in range(V):
        if parents[v] >= 0:
            relabelled[perm[v]] = perm[parents[v]]
    lengths = rng.random(V) * (rng.random(V) >= zero_edges)
    return relabelled, lengths


def sparse_masses(rng, V, keep=0.6):
    w = rng.random(V) * (rng.random(V) < keep)
    w[rng.integers(V)] += 0.1
    return w / w.sum()


@pytest.mark.parametrize("seed", range(8))
def test_tree_plan_is_optimal_for_the_tree_metric(seed):
    rng = np.random.default_rng(100 + seed)
    V = int(rng.integers(1, 40))
    parents, lengths = random_tree(rng, V)
    ms, mt = sparse_masses(rng, V), sparse_masses(rng, V)
    plan, cost = tsw.tree_plan(parents, torch.tensor(lengths), torch.tensor(ms), torch.tensor(mt))
    assert plan.is_sparse
    assert plan._nnz() <= 2 * V - 1
    P = dense(plan)
    D = ref.tree_metric_from_parents(parents, lengths)
    assert_close(cost, (P * D).sum())
    assert_close(P.sum(1), ms)
    assert_close(P.sum(0), mt)
    assert bool((P >= 0).all())
    assert_close((P * D).sum(), ot.emd2(ms, mt, D))
    expected = tsw.tree_wasserstein(
        parents, torch.tensor(lengths), torch.tensor(ms), torch.tensor(mt)
    )
    assert_close((P * D).sum(), float(expected))


def test_tree_plan_batched_numpy_and_identity():
    rng = np.random.default_rng(120)
    parents, lengths = random_tree(rng, 15)
    ms = np.stack([[sparse_masses(rng, 15) for _ in range(3)] for _ in range(2)])  # (2, 3, V)
    mt = np.stack([[sparse_masses(rng, 15) for _ in range(3)] for _ in range(2)])
    plan, _ = tsw.tree_plan(parents, torch.tensor(lengths), torch.tensor(ms), torch.tensor(mt))
    assert plan.shape == (2, 3, 15, 15)
    full, cost = tsw.tree_plan(
        parents, torch.tensor(lengths), torch.tensor(ms), torch.tensor(mt), dense=True
    )
    assert cost.shape == (2, 3)
    assert_close(plan.to_dense(), full.numpy())
    D = ref.tree_metric_from_parents(parents, lengths)
    for i in range(2):
        for j in range(3):
            one, c = tsw.tree_plan(parents, lengths, ms[i, j], mt[i, j])  # numpy: scipy
            assert_close(one.toarray(), full[i, j].numpy())
            assert_close((one.toarray() * D).sum(), ot.emd2(ms[i, j], mt[i, j], D))
            assert_close(c, ot.emd2(ms[i, j], mt[i, j], D))
            assert_close(cost[i, j], c)
    same, _ = tsw.tree_plan(parents, lengths, ms[0, 0], ms[0, 0], dense=True)
    assert_close(same, np.diag(ms[0, 0]), tol=1e-15)


def test_tree_plan_on_a_long_path_and_a_star():
    rng = np.random.default_rng(121)
    V = 300
    path = np.arange(-1, V - 1)
    star = np.array([-1] + [0] * (V - 1))
    for parents in (path, star):
        lengths = rng.random(V)
        ms, mt = sparse_masses(rng, V), sparse_masses(rng, V)
        P = dense(tsw.tree_plan(parents, lengths, ms, mt)[0])
        D = ref.tree_metric_from_parents(parents, lengths)
        assert_close((P * D).sum(), ot.emd2(ms, mt, D))
        assert_close(P.sum(1), ms)


@pytest.mark.parametrize(
    ("parents", "ms", "mt", "match"),
    [
        ([-1, -1, 0], [0.5, 0.5, 0], [0, 0.5, 0.5], "exactly one root"),
        ([-1, 2, 1], [0.5, 0.5, 0], [0, 0.5, 0.5], "must describe a tree"),
        ([-1, 0, 0], [0.5, 0.5, 0], [0, 0.5, 0.6], "equal total mass"),
        ([-1, 0, 0], [1.5, -0.5, 0], [0, 0.5, 0.5], "mass_s must be non-negative"),
        ([-1, 0], [0.5, 0.5, 0], [0, 0.5, 0.5], r"shape \(\.\.\., V\) with V=2"),
        ([-1.0, 0.0, 0.0], [0.5, 0.5, 0], [0, 0.5, 0.5], "parents must hold integers"),
    ],
)
def test_tree_plan_bad_input_raises(parents, ms, mt, match):
    with pytest.raises((TypeError, ValueError), match=match):
        tsw.tree_plan(
            parents,
            torch.ones(3, dtype=F64),
            torch.tensor(ms, dtype=F64),
            torch.tensor(mt, dtype=F64),
        )


# --------------------------------------------------------------------------- 3 line systems


def split_masses(proj):
    """A projection's masses (B, T, k, n), split where the closed form would split them."""
    masses = proj.masses
    masses = masses.masses() if isinstance(masses, LineSplit) else masses
    return masses.expand(proj.coords.shape)


def atom_level(plan, k, N, M):
    """Atom-level plan (k N, k M), sources and targets flattened line-major."""
    out = np.zeros((k * N, k * M))
    np.add.at(
        out,
        ((plan.line_s * N + plan.rows).numpy(), (plan.line_t * M + plan.cols).numpy()),
        plan.mass.numpy(),
    )
    return out


def check_line_plan(cs, ct, ms, mt, attachments=None):
    """Marginals and cost of line_system_plan against ot.emd2 on the explicit metric."""
    k, N = cs.shape
    M = ct.shape[1]
    plan = line_system_plan(cs, ct, ms, mt, star=attachments is None)
    P = atom_level(plan, k, N, M)
    assert_close(P.sum(1), ms.reshape(-1).numpy())
    assert_close(P.sum(0), mt.reshape(-1).numpy())
    D = ref.line_system_metric(torch.cat([cs, ct], dim=1).numpy(), attachments)
    n = N + M
    sel_s = [line * n + j for line in range(k) for j in range(N)]
    sel_t = [line * n + N + j for line in range(k) for j in range(M)]
    cost = (P * D[np.ix_(sel_s, sel_t)]).sum()
    given = (np.ascontiguousarray(v.numpy()) for v in (cs, ct, ms, mt))
    assert_close(cost, ref.emd_on_lines(*given, attachments))
    return plan


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("delta", [0.0, 2.0, 20.0])
def test_star_plan_is_optimal_for_the_tree_metric(seed, delta):
    """Db-TSW's split on one star: every line unbalanced, the roots' excesses coupled."""
    rng = np.random.default_rng(200 + seed)
    d, k, N, M = 3, int(rng.integers(1, 5)), int(rng.integers(1, 7)), int(rng.integers(1, 7))
    X, Y = rng.normal(size=(N, d)), rng.normal(size=(M, d)) + 0.7
    a, b = weights(rng, N, 0.2), weights(rng, M, 0.2)
    m = check_measures(*(torch.tensor(v) for v in (X, Y, a, b)))
    trees = tsw.ConcurrentLines(
        torch.tensor(rng.normal(size=(1, d))), torch.tensor(unit_rows(rng, k, d))[None]
    )
    proj = db_projection(m, trees, delta)
    coords, masses = proj.coords[0, 0], split_masses(proj)[0, 0]
    check_line_plan(coords[:, :N], coords[:, N:], masses[:, :N], -masses[:, N:])


@pytest.mark.parametrize("seed", range(4))
def test_chain_plan_is_optimal_for_the_tree_metric(seed):
    """TSW-SL's constant split on a chain: every line balances."""
    rng = np.random.default_rng(220 + seed)
    d, k, N, M = 2, 3, 5, 4
    X, Y = rng.normal(size=(N, d)), rng.normal(size=(M, d)) + 0.7
    a, b = weights(rng, N), weights(rng, M)
    m = check_measures(*(torch.tensor(v) for v in (X, Y, a, b)))
    dirs = unit_rows(rng, k, d)
    sources = np.zeros((k, d))
    for i in range(1, k):
        sources[i] = sources[i - 1] + rng.uniform(-1.5, 1.5) * dirs[i - 1]
    trees = tsw.ChainLines(torch.tensor(sources)[None], torch.tensor(dirs)[None])
    alpha = torch.tensor(weights(rng, k)).view(k, 1)
    proj = constant_split_projection(m, trees, alpha)
    coords, masses = proj.coords[0, 0], split_masses(proj)[0, 0]
    check_line_plan(
        coords[:, :N], coords[:, N:], masses[:, :N], -masses[:, N:], trees.attachments[0].numpy()
    )


# --------------------------------------------------------------------------- 4 tree-sliced


def tree_problem(seed, N=9, M=7, d=3):
    rng = np.random.default_rng(seed)
    X, Y = rng.normal(size=(N, d)), rng.normal(size=(M, d)) + 0.8
    return [torch.tensor(v) for v in (X, Y, weights(rng, N), weights(rng, M))]


@pytest.mark.parametrize("method", ["db_tsw", "tsw_sl"])
def test_tree_sliced_plan_marginals_and_cost(method):
    X, Y, a, b = tree_problem(300)
    plan, cost, log = tsw.expected_tree_sliced_plan(
        X, Y, a, b, method=method, n_trees=12, n_lines=3, seed=1, log=True
    )
    assert_close(plan.sum(1), a.numpy())
    assert_close(plan.sum(0), b.numpy())
    M = ot.dist(X.numpy(), Y.numpy())
    assert_close(cost, (plan.numpy() * M).sum())
    assert_close(log["per_tree"].mean(), float(cost))
    # an upper bound of the exact optimal transport cost
    assert float(cost) >= ot.emd2(a.numpy(), b.numpy(), M) - TOL
    splan, scost = tsw.expected_tree_sliced_plan(
        X, Y, a, b, method=method, n_trees=12, n_lines=3, seed=1, dense=False
    )
    assert splan.is_sparse
    assert splan.is_coalesced()
    assert_close(splan.to_dense(), plan.numpy())
    assert_close(scost, float(cost))


def test_each_tree_plan_costs_the_tree_w1_of_db_tsw():
    """The lifted plans come from plans whose tree cost is Db-TSW's value on each tree."""
    X, Y, a, b = tree_problem(301)
    m = check_measures(X, Y, a, b)
    trees = tsw.sample_concurrent_lines(
        3, n_trees=5, n_lines=3, seed=2, dtype=F64, center=torch.zeros(3, dtype=F64)
    )
    proj = db_projection(m, trees, 2.0)
    coords, masses = proj.coords[0], split_masses(proj)[0]
    N = X.shape[0]
    _, log = tsw.db_tsw(X, Y, a, b, trees=trees, p=1.0, log=True)
    for t in range(5):
        c, ms_ = coords[t], masses[t]
        plan = line_system_plan(c[:, :N], c[:, N:], ms_[:, :N], -ms_[:, N:], star=True)
        # the star metric: |t - t'| on one line, |t| + |t'| across lines
        cs, ct = c[:, :N][plan.line_s, plan.rows], c[:, N:][plan.line_t, plan.cols]
        same = plan.line_s == plan.line_t
        dist = torch.where(same, (cs - ct).abs(), cs.abs() + ct.abs())
        assert_close((plan.mass * dist).sum(), float(log["per_tree"][t]))


@pytest.mark.parametrize("method", ["db_tsw", "tsw_sl"])
def test_one_tree_of_one_line_is_the_1d_optimal_plan(method):
    X, Y, a, b = tree_problem(302)
    theta = torch.tensor([[0.6, -0.48, 0.64]], dtype=F64)
    if method == "db_tsw":
        trees = tsw.ConcurrentLines(torch.tensor([[0.3, 0.1, -0.2]], dtype=F64), theta[None])
    else:
        trees = tsw.ChainLines(torch.tensor([[[0.3, 0.1, -0.2]]], dtype=F64), theta[None])
    plan, _cost = tsw.expected_tree_sliced_plan(X, Y, a, b, method=method, trees=trees)
    ref_plans, _ = ot.sliced.sliced_plans(
        X.numpy(), Y.numpy(), a.numpy(), b.numpy(), projections=theta.T.numpy()
    )
    assert_close(plan, pot_dense(ref_plans[0], *plan.shape))


@pytest.mark.parametrize("method", ["db_tsw", "tsw_sl"])
def test_identity_plan_between_a_measure_and_itself_on_trees(method):
    X, _, a, _ = tree_problem(303)
    plan, cost = tsw.expected_tree_sliced_plan(
        X, X, a, a, method=method, n_trees=10, n_lines=4, seed=0
    )
    assert_close(plan, np.diag(a.numpy()), tol=1e-15)
    # small squared Euclidean costs are read from a Gram matrix on the CPU: 0 to rounding
    assert abs(float(cost)) <= 1e-14
    Xb, ab = torch.stack([X, X.flip(0)]), torch.stack([a, a.flip(0)])
    plans, costs = tsw.expected_tree_sliced_plan(Xb, Xb, ab, ab, method=method, n_trees=6, seed=0)
    assert_close(plans[1], np.diag(ab[1].numpy()), tol=1e-15)
    assert costs.shape == (2,)


def test_tsw_sl_plan_is_the_alpha_weighted_plans_of_its_lines():
    """A constant split balances every line: the mean of the lines' 1-D plans, by POT."""
    X, Y, a, b = tree_problem(304)
    alpha = torch.tensor([0.5, 0.3, 0.2], dtype=F64)
    plan, _, log = tsw.expected_tree_sliced_plan(
        X, Y, a, b, method="tsw_sl", n_trees=4, n_lines=3, alpha=alpha, seed=5, log=True
    )
    dirs = log["trees"].directions.reshape(-1, 3)  # (T k, d)
    ref_plans, _ = ot.sliced.sliced_plans(
        X.numpy(), Y.numpy(), a.numpy(), b.numpy(), projections=dirs.T.numpy()
    )
    w = alpha.repeat(4).numpy() / 4
    expected = sum(wk * pot_dense(pt, *plan.shape) for wk, pt in zip(w, ref_plans, strict=True))
    assert_close(plan, expected)


def test_tree_sliced_plan_uses_the_methods_trees():
    X, Y, a, b = tree_problem(305)
    _, _, log = tsw.expected_tree_sliced_plan(X, Y, a, b, n_trees=7, n_lines=3, seed=4, log=True)
    _, dlog = tsw.db_tsw(X, Y, a, b, n_trees=7, n_lines=3, seed=4, log=True)
    assert torch.equal(log["trees"].roots, dlog["trees"].roots)
    assert torch.equal(log["trees"].directions, dlog["trees"].directions)
    _, _, log = tsw.expected_tree_sliced_plan(
        X, Y, a, b, method="tsw_sl", n_trees=7, seed=4, log=True
    )
    _, slog = tsw.tsw_sl(X, Y, a, b, n_trees=7, seed=4, log=True)
    assert torch.equal(log["trees"].sources, slog["trees"].sources)


def test_tree_sliced_plan_numpy_batched_and_gradient():
    X, Y, _a, _b = tree_problem(306)
    plan, cost = tsw.expected_tree_sliced_plan(X.numpy(), Y.numpy(), n_trees=5, seed=0, dense=False)
    assert type(plan).__name__.startswith("coo")
    assert isinstance(cost, np.floating)
    Xb = torch.stack([X, X + 1]).requires_grad_(True)
    Yb = torch.stack([Y, Y - 1])
    plans, costs = tsw.expected_tree_sliced_plan(Xb, Yb, n_trees=5, seed=0)
    for i in range(2):
        one, c = tsw.expected_tree_sliced_plan(Xb[i].detach(), Yb[i], n_trees=5, seed=0)
        assert_close(plans[i], one.numpy())
        assert_close(costs[i], float(c))
    (g,) = torch.autograd.grad(costs.sum(), Xb)
    Xr = Xb.detach().clone().requires_grad_(True)
    C = (Xr[:, :, None, :] - Yb[:, None, :, :]).square().sum(-1)
    (e,) = torch.autograd.grad((plans.detach() * C).sum(), Xr)
    assert_close(g, e.numpy())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"method": "sw"}, "method must be one of"),
        ({"method": "tsw_sl", "delta": 1.0}, "delta is an option of method='db_tsw'"),
        ({"alpha": torch.ones(4, dtype=F64) / 4}, "alpha is an option of method='tsw_sl'"),
        ({"delta": -1.0}, "delta must be a finite real number >= 0"),
        ({"method": "tsw_sl", "tree": "star"}, "tree must be one of"),
        ({"metric": "cosine"}, "metric must be one of"),
        ({"n_trees": 0}, "n_trees must be an int >= 1"),
        (
            {"trees": tsw.sample_chain_lines(3, n_trees=2, n_lines=2, dtype=F64)},
            "trees must be ConcurrentLines",
        ),
    ],
)
def test_tree_sliced_plan_bad_options_raise(kwargs, match):
    X, Y, a, b = tree_problem(307)
    with pytest.raises((TypeError, ValueError), match=match):
        tsw.expected_tree_sliced_plan(X, Y, a, b, **kwargs)


# --------------------------------------------------------------------------- 5 SWGG


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("weighted", [False, True])
def test_swgg_is_never_worse_than_min_pivot_over_its_starting_directions(seed, weighted):
    rng = np.random.default_rng(400 + seed)
    N, M, d = (40, 40, 6) if not weighted else (30, 45, 6)
    X, Y = rng.normal(size=(N, d)), 0.7 * rng.normal(size=(M, d)) + 1
    a, b = (weights(rng, N), weights(rng, M)) if weighted else (None, None)
    P = unit_rows(rng, 8, d).T.copy()
    _, start = tsw.min_sliced_transport_plan(X, Y, a, b, projections=P)
    plan, cost, log = tsw.swgg(X, Y, a, b, projections=P, n_iter=30, seed=seed, log=True)
    assert cost <= start + 1e-12
    assert_close(log["initial_cost"], start)
    assert_close(cost, log["costs"].min())
    assert_close(cost, (plan * ot.dist(X, Y)).sum())
    assert_close(plan.sum(1), uniform(N) if a is None else a)
    assert_close(plan.sum(0), uniform(M) if b is None else b)
    direction = log["projection"]
    ref_plans, _ = ot.sliced.sliced_plans(X, Y, a, b, projections=direction[:, None])
    assert_close(plan, pot_dense(ref_plans[0], N, M))


def test_swgg_descends_below_min_pivot_and_stays_above_exact_ot():
    rng = np.random.default_rng(410)
    X, Y = rng.normal(size=(80, 10)), 0.5 * rng.normal(size=(80, 10)) + 1
    _, start = tsw.min_sliced_transport_plan(X, Y, n_projections=10, seed=0)
    _, cost = tsw.swgg(X, Y, n_projections=10, n_iter=40, seed=0)
    exact = ot.emd2(uniform(80), uniform(80), ot.dist(X, Y))
    assert exact < cost < start


def test_swgg_without_steps_is_min_pivot_and_batches():
    rng = np.random.default_rng(411)
    X = torch.tensor(rng.normal(size=(2, 12, 3)))
    Y = torch.tensor(rng.normal(size=(2, 12, 3)))
    P = torch.tensor(unit_rows(rng, 5, 3).T.copy())
    plan, cost = tsw.swgg(X, Y, projections=P, n_iter=0)
    eplan, ecost = tsw.min_sliced_transport_plan(X, Y, projections=P)
    assert_close(plan, eplan.numpy())
    assert_close(cost, ecost.numpy())
    _, cost = tsw.swgg(X, Y, projections=P, n_iter=5, seed=1)
    assert cost.shape == (2,)
    assert bool((cost <= ecost + 1e-12).all())


# --------------------------------------------------------------------------- 6 barycentric map


def test_barycentric_map_of_every_kind_of_plan():
    rng = np.random.default_rng(500)
    X, Y, a, b = (v.numpy() for v in tree_problem(500, N=6, M=5))
    P = ot.emd(a, b, ot.dist(X, Y))
    expected = (P @ Y) / a[:, None]
    assert_close(tsw.barycentric_map(P, Y), expected)
    assert_close(tsw.barycentric_map(torch.tensor(P), torch.tensor(Y)), expected)
    assert_close(tsw.barycentric_map(torch.tensor(P).to_sparse(), torch.tensor(Y)), expected)
    splan, _ = tsw.expected_sliced_plan(X, Y, a, b, n_projections=4, seed=0, dense=False)
    dplan, _ = tsw.expected_sliced_plan(X, Y, a, b, n_projections=4, seed=0)
    assert_close(tsw.barycentric_map(splan, Y), (dplan @ Y) / a[:, None])
    Pb = np.stack([P, P])
    assert_close(tsw.barycentric_map(Pb, np.stack([Y, Y]))[1], expected)
    assert_close(
        tsw.barycentric_map(torch.tensor(Pb).to_sparse(), torch.tensor(np.stack([Y, Y])))[0],
        expected,
    )
    del rng


def test_barycentric_map_rows_without_mass():
    P = torch.tensor([[0.5, 0.0], [0.0, 0.0], [0.0, 0.5]], dtype=F64)
    Y = torch.tensor([[1.0, 1.0], [2.0, 2.0]], dtype=F64)
    with pytest.raises(ValueError, match="rows without mass"):
        tsw.barycentric_map(P, Y)
    X = torch.full((3, 2), 7.0, dtype=F64)
    assert_close(tsw.barycentric_map(P, Y, X_s=X), [[1.0, 1.0], [7.0, 7.0], [2.0, 2.0]])
    with pytest.raises(ValueError, match="must agree on M"):
        tsw.barycentric_map(P, Y[:1])
    with pytest.raises(TypeError, match=r"plan must be a torch\.Tensor"):
        tsw.barycentric_map("plan", Y)


# --------------------------------------------------------------------------- 7 benchmark


@pytest.mark.slow  # about 8 s: imports and the figures
def test_benchmark_quick(tmp_path, capsys):
    """``python -m benchmarks.plans --quick``: every plan, a cost ratio >= 1 where exact."""
    import json

    from benchmarks import plans

    assert plans.main(["--quick", "--out", str(tmp_path)]) == 0
    assert "tsw.tree_plan on random trees" in capsys.readouterr().out
    rows = json.loads((tmp_path / "plans.json").read_text())["rows"]
    assert {r["plan"] for r in rows} >= set(plans.PLANS)
    assert all(r["cost / exact"] >= 1 - 1e-9 for r in rows if r.get("cost / exact"))
    assert all("time / pot" in r for r in rows if r["plan"] in plans.POT)
    assert (tmp_path / "plans_cost.png").stat().st_size > 0


def test_the_torch_path_of_other_devices_gives_the_same_plans(monkeypatch):
    """Off the CPU the entries are built by torch, not NumPy: forced here on the CPU."""
    import tsw.core._plans as plans_module

    rng = np.random.default_rng(600)
    X, Y, a, b, P = (torch.tensor(v) for v in sliced_problem(rng, "sizes"))
    Xg = X.clone().requires_grad_(True)
    want = [
        tsw.expected_sliced_plan(Xg, Y, a, b, projections=P, dense=dense) for dense in (True, False)
    ]
    (want_grad,) = torch.autograd.grad(want[0][1], Xg)
    trees = tsw.expected_tree_sliced_plan(X, Y, a, b, n_trees=4, n_lines=3, seed=0, dense=False)
    tree_want, _ = tsw.tree_plan(
        [-1, 0, 0, 1], torch.ones(4, dtype=F64), a[:4] / a[:4].sum(), b[:4] / b[:4].sum()
    )
    monkeypatch.setattr(plans_module, "_numpy_side", lambda *xs: False)
    Xg = X.clone().requires_grad_(True)
    for is_dense, (plan, cost) in zip((True, False), want, strict=True):
        got, c = tsw.expected_sliced_plan(Xg, Y, a, b, projections=P, dense=is_dense)
        assert_close(dense(got), dense(plan))
        assert_close(c, float(cost.detach()))
    (grad,) = torch.autograd.grad(tsw.expected_sliced_plan(Xg, Y, a, b, projections=P)[1], Xg)
    assert_close(grad, want_grad.numpy())
    got = tsw.expected_tree_sliced_plan(X, Y, a, b, n_trees=4, n_lines=3, seed=0, dense=False)
    assert_close(dense(got[0]), dense(trees[0]))
    assert_close(got[1], float(trees[1]))
    got, _ = tsw.tree_plan(
        [-1, 0, 0, 1], torch.ones(4, dtype=F64), a[:4] / a[:4].sum(), b[:4] / b[:4].sum()
    )
    assert_close(dense(got), dense(tree_want))
    _, cost = tsw.sliced_plans(X, Y, a, b, projections=P, metric="minkowski", p=3)
    assert cost.shape == (P.shape[1],)


@pytest.mark.slow  # about 10 s: the images, the nearest colours and the figure
def test_colour_transfer_plans_quick(tmp_path, capsys):
    import json

    from benchmarks import colour_transfer

    assert colour_transfer.main(["--mode", "plans", "--quick", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "colour_transfer_plans.json").read_text())["rows"]
    assert rows[0]["plan"] == "exact (ot.emd)"
    assert all(r["cost / exact"] >= 1 - 1e-9 for r in rows)
    assert (tmp_path / "colour_transfer_plans.png").stat().st_size > 0
    assert "Colour transfer" in capsys.readouterr().out


def test_swgg_surrogate_gradient_equals_its_dense_formula():
    """The module's formula, with midpoints averaged over brute-force interval overlaps."""
    from tsw.sliced._swgg import _plan_along, _surrogate_grad

    rng = np.random.default_rng(420)
    N, M, d, R, smoothing = 7, 9, 3, 3, 0.4
    X, Y = rng.normal(size=(N, d)), rng.normal(size=(M, d)) + 0.5
    a, b = weights(rng, N), weights(rng, M)
    theta = unit_rows(rng, 1, d)[0]
    noise = (rng.normal(size=(1, R, N)), rng.normal(size=(1, R, M)))
    args = [torch.tensor(v)[None] for v in (X, Y, a[None], b[None], theta)]
    entries = _plan_along(args[0], args[1], args[2], args[3], args[4])
    got = _surrogate_grad(*args, entries, smoothing, tuple(torch.tensor(z) for z in noise))

    def quantile_plan(cs, ct):
        """POT's 1-D plan, its entries in quantile order with their intervals."""
        G = ot.emd_1d(cs, ct, a, b)
        i, j = np.nonzero(G > 0)
        order = np.lexsort((np.argsort(np.argsort(ct))[j], np.argsort(np.argsort(cs))[i]))
        i, j, w = i[order], j[order], G[i[order], j[order]]
        upper = np.cumsum(w)
        return i, j, w, upper - w, upper

    cs, ct = X @ theta, Y @ theta
    i, j, w, lo, hi = quantile_plan(cs, ct)
    mid = (X[i] + Y[j]) / 2
    spread = np.concatenate([cs, ct]).std(ddof=1)
    blurred = np.zeros_like(mid)
    for r in range(R):
        pi, pj, _, plo, phi = quantile_plan(
            cs + smoothing * spread * noise[0][0, r], ct + smoothing * spread * noise[1][0, r]
        )
        overlap = np.clip(np.minimum(hi[:, None], phi) - np.maximum(lo[:, None], plo), 0, None)
        blurred += overlap @ ((X[pi] + Y[pj]) / 2) / R
    diff = mid - blurred / w[:, None]
    expected = -8 * (w * (diff @ theta)) @ mid - 8 * (w * (mid @ theta)) @ diff
    assert_close(got[0], expected)
