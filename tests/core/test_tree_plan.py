"""``tsw.tree_plan``, ``tsw.tree_wasserstein`` on data-sized trees, and ``match_on_tree``.

Plans and costs against ``ot.emd`` / ``ot.emd2`` on the tree path metric computed by
scipy's shortest paths (an independent metric); the compiled kernels
(``tsw.core._numba_trees``) against the NumPy/Python fallback, entry for entry; deep
paths (no recursion), invalid parent arrays, and numpy/list inputs.
"""

from __future__ import annotations

import itertools

import _reference as ref
import numpy as np
import ot
import pytest
import torch
from _reference import assert_close, random_tree

import tsw
from tsw.core import _kernels
from tsw.core import tree_plan as tree_plan_module
from tsw.core import tree_wasserstein as tw_module
from tsw.core.tree_plan import match_on_tree

F64 = torch.float64


def masses(rng, shape, total=1.0, keep=0.6):
    """Non-negative masses on all nodes (internal ones too), some zero, a given total."""
    w = rng.random(shape) * (rng.random(shape) < keep)
    w[..., 0] += 0.1
    return total * w / w.sum(-1, keepdims=True)


@pytest.fixture(params=["compiled", "fallback"])
def path(request, monkeypatch):
    """Run a test on the compiled kernels, then on the fallback."""
    if request.param == "compiled":
        if not _kernels.warm_up():
            pytest.skip("the compiled kernels are disabled (TSW_NUMBA=0) or absent")
    else:
        monkeypatch.setattr(_kernels, "trees_usable", lambda: False)
    return request.param


@pytest.mark.parametrize("seed", range(10))
def test_plan_and_cost_equal_emd_on_the_path_metric(seed, path):
    rng = np.random.default_rng(seed)
    V = int(rng.integers(2, 40))
    parents = random_tree(rng, V)
    lengths = rng.random(V) * (rng.random(V) > 0.2)
    total = float(rng.uniform(0.5, 3.0))  # unnormalised, equal totals
    ms, mt = masses(rng, V, total), masses(rng, V, total)
    D = ref.tree_metric_from_parents(parents, lengths)
    plan, cost = tsw.tree_plan(parents, lengths, ms, mt)  # numpy in: scipy and numpy out
    P = plan.toarray()
    assert isinstance(cost, np.floating | np.ndarray)
    assert np.shape(cost) == ()
    assert plan.nnz <= 2 * V - 1
    assert (P >= 0).all()
    assert_close(P.sum(1), ms)
    assert_close(P.sum(0), mt)
    exact = ot.emd2(ms, mt, D)
    assert_close(cost, exact)
    assert_close((P * D).sum(), exact)
    assert_close(cost, (P * D).sum())
    assert_close(tsw.tree_wasserstein(parents, lengths, ms, mt), exact)
    # every entry moves mass between the nodes ot.emd could: the plan's cost is optimal,
    # and an emd plan has the same marginals
    assert_close(ot.emd(ms, mt, D).sum(0), mt)


@pytest.mark.parametrize("lead", [(3,), (2, 3)])
def test_batched_masses_and_lengths(lead, path):
    rng = np.random.default_rng(7)
    V = 17
    parents = random_tree(rng, V)
    lengths = rng.random((*lead, V))
    ms, mt = masses(rng, (*lead, V)), masses(rng, (*lead, V))
    plan, cost = tsw.tree_plan(
        torch.as_tensor(parents), torch.tensor(lengths), torch.tensor(ms), torch.tensor(mt)
    )
    assert plan.shape == (*lead, V, V)
    assert cost.shape == lead
    assert cost.dtype == F64
    full, cost_dense = tsw.tree_plan(
        parents, torch.tensor(lengths), torch.tensor(ms), torch.tensor(mt), dense=True
    )
    assert_close(plan.to_dense(), full)
    assert_close(cost_dense, cost)
    values = tsw.tree_wasserstein(parents, lengths, ms, mt)
    assert isinstance(values, np.ndarray)
    assert values.shape == lead
    for idx in np.ndindex(*lead):
        D = ref.tree_metric_from_parents(parents, lengths[idx])
        exact = ot.emd2(ms[idx], mt[idx], D)
        assert_close(cost[idx], exact)
        assert_close((full[idx].numpy() * D).sum(), exact)
        assert_close(values[idx], exact)


def test_cost_gradient_is_the_flow_on_each_edge(path):
    rng = np.random.default_rng(8)
    V = 25
    parents = random_tree(rng, V)
    lengths = torch.tensor(rng.random(V), requires_grad=True)
    ms, mt = (torch.tensor(masses(rng, V)) for _ in range(2))
    _, cost = tsw.tree_plan(parents, lengths, ms, mt)
    (g,) = torch.autograd.grad(cost, lengths)
    (want,) = torch.autograd.grad(tsw.tree_wasserstein(parents, lengths, ms, mt), lengths)
    assert_close(g, want)  # |mu(subtree) - nu(subtree)| on every edge, 0 at the root


def test_compiled_and_fallback_give_the_same_entries(monkeypatch):
    if not _kernels.warm_up():
        pytest.skip("the compiled kernels are disabled (TSW_NUMBA=0) or absent")
    rng = np.random.default_rng(9)
    for V in (1, 2, 3, 60, 3000):
        parents = random_tree(rng, V)
        if V % 2:  # masses on a grid: exact ties between pieces, empty nodes
            ms, mt = (rng.multinomial(2 * V, np.full(V, 1 / V)) / (2 * V) for _ in range(2))
        else:
            ms, mt = masses(rng, V), masses(rng, V)
        pre, end, status = _kernels.tree_euler_tour(parents)
        pre2, end2, status2 = tw_module._euler_tour_numpy(parents)
        assert status == status2 == -1
        np.testing.assert_array_equal(pre, pre2)
        np.testing.assert_array_equal(end, end2)
        got = _kernels.tree_match(end, ms[pre], mt[pre])
        up = tw_module.preorder_parents(parents, pre)
        want = tree_plan_module._match_python(end, up, ms[pre], mt[pre])
        for a, b in zip(got[:3], want[:3], strict=True):  # the same entries
            np.testing.assert_array_equal(a, b)
        # the flows, summed bottom up in another order (one pass; doubling jumps)
        np.testing.assert_allclose(got[3], want[3], rtol=1e-13, atol=1e-15)
        lengths = rng.random(V)
        compiled = tsw.tree_plan(parents, lengths, ms, mt), match_on_tree(parents, ms, mt)
        value = tsw.tree_wasserstein(parents, lengths, ms, mt, p=1.5)
        with monkeypatch.context() as mp:
            mp.setattr(_kernels, "trees_usable", lambda: False)
            fallback = tsw.tree_plan(parents, lengths, ms, mt), match_on_tree(parents, ms, mt)
            value2 = tsw.tree_wasserstein(parents, lengths, ms, mt, p=1.5)
        np.testing.assert_array_equal(compiled[0][0].toarray(), fallback[0][0].toarray())
        assert_close(compiled[0][1], fallback[0][1], tol=1e-14)
        for a, b in zip(compiled[1], fallback[1], strict=True):
            np.testing.assert_array_equal(a, b)
        assert_close(value, value2, tol=1e-14)


def test_match_on_tree_entries(path):
    rng = np.random.default_rng(10)
    V = 30
    parents = random_tree(rng, V)
    ms, mt = masses(rng, V), masses(rng, V)
    rows, cols, vals = match_on_tree(parents, ms, mt)
    assert rows.dtype == cols.dtype == np.int64
    assert vals.dtype == np.float64
    assert len(vals) <= 2 * V - 1
    assert (vals > 0).all()
    assert len(set(zip(rows.tolist(), cols.tolist(), strict=True))) == len(rows)  # no repeats
    P = np.zeros((V, V))
    np.add.at(P, (rows, cols), vals)
    assert_close(P.sum(1), ms)
    assert_close(P.sum(0), mt)
    lengths = rng.random(V)
    D = ref.tree_metric_from_parents(parents, lengths)
    assert_close((P * D).sum(), ot.emd2(ms, mt, D))
    plan, _ = tsw.tree_plan(parents, lengths, ms, mt, dense=True)
    assert_close(P, plan)
    with pytest.raises(ValueError, match=r"mass_s and mass_t must have shape \(V,\) with V=30"):
        match_on_tree(parents, ms[:-1], mt)


@pytest.mark.parametrize("V", [100_000])
def test_a_deep_path(V, path):
    """A chain of 1e5 nodes in reversed labels: no recursion, the closed form on a line."""
    rng = np.random.default_rng(11)
    parents = np.append(np.arange(1, V), -1)  # node V - 1 is the root; i hangs from i + 1
    lengths = rng.random(V)
    ms, mt = masses(rng, V), masses(rng, V)
    # on a path the subtree of node i is {0, ..., i}: W1 = sum_i w_i |sum_{j <= i} (ms - mt)|
    exact = float((lengths[:-1] * np.abs(np.cumsum(ms - mt)[:-1])).sum())
    assert_close(tsw.tree_wasserstein(parents, lengths, ms, mt), exact)
    plan, cost = tsw.tree_plan(parents, lengths, ms, mt)
    assert_close(cost, exact)
    assert plan.nnz <= 2 * V - 1
    assert_close(np.asarray(plan.sum(1)).ravel(), ms)


@pytest.mark.parametrize(
    ("parents", "match"),
    [
        ([-1, 2, 1], "must describe a tree"),  # a cycle
        ([-1, 0, 1, 4, 3], "only 3 of 5 nodes"),  # a cycle apart from the root
        ([-1, -1, 0], "exactly one root"),
        ([0, 1, 2], "exactly one root"),  # no root (all cycles)
        ([-1, 0, 3], r"parents\[2\]=3"),
        ([-1, 0, -2], r"parents\[2\]=-2"),
        ([[-1, 0, 0]], r"parents must have shape \(V,\)"),
    ],
)
def test_invalid_parents_raise(parents, match, path):
    V = np.asarray(parents).size
    ms = np.full(V, 1.0 / V)
    for fn in (tsw.tree_plan, tsw.tree_wasserstein):
        with pytest.raises(ValueError, match="parents") as info:
            fn(parents, np.ones(V), ms, ms)
        assert info.match(match)
    with pytest.raises(ValueError, match=match):
        match_on_tree(np.asarray(parents), ms, ms)


def test_inputs_of_every_kind():
    parents = [-1, 0, 0, 1]
    lengths, ms, mt = [0.0, 1.0, 2.0, 0.5], [0.25] * 4, [0.1, 0.2, 0.3, 0.4]
    D = ref.tree_metric_from_parents(parents, lengths)
    exact = ot.emd2(np.array(ms), np.array(mt), D)
    for fn in (tsw.tree_wasserstein, lambda *a: tsw.tree_plan(*a)[1]):
        lists = fn(parents, lengths, ms, mt)  # lists: float64 numpy
        assert isinstance(lists, np.floating | np.ndarray)
        assert lists.dtype == np.float64
        assert_close(lists, exact)
        as32 = fn(np.array(parents), lengths, np.float32(ms), np.float32(mt))  # numpy out
        assert isinstance(as32, np.floating | np.ndarray)
        assert as32.dtype == np.float32
        tensors = fn(torch.tensor(parents), lengths, torch.tensor(ms), torch.tensor(mt))
        assert isinstance(tensors, torch.Tensor)
        assert tensors.dtype == torch.float32
        assert_close(tensors, exact, tol=1e-6)
        with pytest.raises(TypeError, match="all torch tensors or all numpy arrays"):
            fn(parents, np.array(lengths), torch.tensor(ms, dtype=F64), mt)
    plan, cost = tsw.tree_plan(parents, lengths, ms, mt, dense=True)
    assert isinstance(plan, np.ndarray)
    assert plan.dtype == np.float64
    assert_close((plan * D).sum(), cost)


# --------------------------------------------------------------------------- small subtrees


@pytest.mark.parametrize("labels", list(itertools.permutations((1, 2, 3))))
def test_a_small_subtree_keeps_its_mass(labels, path):
    """A mass of 2^-70 on an edge of 2^70 beside masses 1: the exact value is 3.

    A star: source 1 at leaf ``a`` (edge 1) and 2^-70 at leaf ``b`` (edge 2^70), target 1
    at leaf ``c`` (edge 1) and 2^-70 at the root, so the totals are equal as real numbers.
    Every optimal plan moves 1 across ``a``'s and ``c``'s edges and 2^-70 across ``b``'s:
    ``1 + 1 + 2^-70 2^70 = 3``, exactly (a hand value). Subtree masses read as differences
    of prefix sums in pre-order lose the 2^-70 under a prefix of 1 and gave 2 for the
    distance in some labellings and for the plan's cost in others.
    """
    a, b, c = labels
    tiny = 2.0**-70
    parents, lengths = [-1, 0, 0, 0], np.zeros(4)
    ms, mt = np.zeros(4), np.zeros(4)
    lengths[[a, b, c]] = 1.0, 2.0**70, 1.0
    ms[a], ms[b], mt[c], mt[0] = 1.0, tiny, 1.0, tiny
    assert tsw.tree_wasserstein(parents, lengths, ms, mt) == 3.0
    plan, cost = tsw.tree_plan(parents, lengths, ms, mt, dense=True)
    assert cost == 3.0
    D = ref.tree_metric_from_parents(parents, lengths)
    assert (plan * D).sum() == 3.0  # the plan's own cost
    # float32: 2^-26 on an edge of 2^20 beside masses 1 (1 + 2^-26 is 1 in float32)
    lengths32 = torch.zeros(4)
    lengths32[[a, b, c]] = torch.tensor([0.5, 2.0**20, 0.5])
    ms32, mt32 = torch.zeros(4), torch.zeros(4)
    ms32[a], ms32[b], mt32[c], mt32[0] = 1.0, 2.0**-26, 1.0, 2.0**-26
    want = 1.0 + 2.0**-6  # 0.5 + 0.5 + 2^-26 2^20, exact in float32
    assert tsw.tree_wasserstein(parents, lengths32, ms32, mt32).item() == want
    assert tsw.tree_plan(parents, lengths32, ms32, mt32)[1].item() == want


def test_the_issue_star_with_a_rounded_total(path):
    """Masses (1, 1e-20 on an edge of 1e20, 1 + 1e-20): the closed form gives 3.0.

    ``1 + 1e-20`` is 1.0 in float64, so the target holds the rounded total; the tree
    formula sum_e w_e |mu(subtree) - nu(subtree)| is 1 + 1e20 1e-20 + 1 = 3 in every
    labelling (it gave 2.0 in the labellings whose tiny leaf comes after a prefix of 1).
    """
    for a, b, c in [(1, 2, 3), (2, 1, 3), (3, 2, 1), (1, 3, 2)]:
        parents, lengths = [-1, 0, 0, 0], np.zeros(4)
        ms, mt = np.zeros(4), np.zeros(4)
        lengths[[a, b, c]] = 1.0, 1e20, 1.0
        ms[a], ms[b], mt[c] = 1.0, 1e-20, 1.0 + 1e-20
        assert tsw.tree_wasserstein(parents, lengths, ms, mt) == 3.0


@pytest.mark.parametrize("seed", range(8))
def test_masses_of_many_scales_against_rational_arithmetic(seed, path):
    """Masses on a grid of 2^-10 and leaves of 2^-80 to 2^-77 on edges of 2^77: exact values.

    Every node's mass is a float64 number and the totals are equal as real numbers; the
    reference sums the subtrees in rational arithmetic. A small leaf's mass read as a
    difference of prefix sums of order 1 is off by up to 2^-53, which its edge of 2^77
    multiplies; summed bottom up, only its ancestors' sums round (to 1e-16 of their own).
    """
    rng = np.random.default_rng(100 + seed)
    V, k = 30, 6
    parents = random_tree(rng, V)
    ms = rng.integers(0, 1024, V) * (rng.random(V) < 0.5) / 1024
    mt = rng.integers(0, 1024, V) * (rng.random(V) < 0.5) / 1024
    root = int(np.flatnonzero(parents < 0)[0])
    gap = ms.sum() - mt.sum()  # exact: multiples of 2^-10
    ms[root], mt[root] = ms[root] + max(-gap, 0.0), mt[root] + max(gap, 0.0)
    tiny = rng.integers(1, 8, k) * 2.0**-80
    # k small sources on edges of 2^77 and k small targets on edges of 1, hung anywhere
    parents = np.concatenate([parents, rng.integers(0, V, 2 * k)])
    ms = np.concatenate([ms, tiny, np.zeros(k)])
    mt = np.concatenate([mt, np.zeros(k), tiny])
    lengths = np.concatenate([rng.integers(1, 64, V) / 16, np.full(k, 2.0**77), np.ones(k)])
    perm = rng.permutation(V + 2 * k)  # the small leaves anywhere in the labels
    inv = np.argsort(perm)
    parents = np.where(parents[perm] >= 0, inv[np.maximum(parents[perm], 0)], -1)
    lengths, ms, mt = lengths[perm], ms[perm], mt[perm]
    exact = float(ref.sobolev_cost_exact(parents, lengths, ms - mt))
    assert_close(tsw.tree_wasserstein(parents, lengths, ms, mt), exact, tol=1e-14)
    plan, cost = tsw.tree_plan(parents, lengths, ms, mt, dense=True)
    assert_close(cost, exact, tol=1e-14)
    D = ref.tree_metric_from_parents(parents, lengths)
    assert_close((plan * D).sum(), exact, tol=1e-14)


@pytest.mark.parametrize("p", [1, 2])
def test_tree_wasserstein_gradients_on_both_paths(p, path):
    """gradcheck and gradgradcheck through the subtree sums, batched masses.

    Compiled: two functions, each the other's transpose (subtree sums bottom up, path
    sums top down); fallback: torch operations. At p = 1 the masses' gradient against
    its formula written from the tree metric: ``dC/dm_u = sum_v w_v sign(mu(v) - nu(v))``
    over the nodes ``v != root`` on the path from ``u`` to the root.
    """
    rng = np.random.default_rng(12)
    V = 9
    parents = random_tree(rng, V)
    lengths = torch.tensor(rng.uniform(0.5, 2.0, V), requires_grad=True)
    # generic masses (no subtree balanced: p = 1 has a kink there), unequal totals
    ms = torch.tensor(rng.uniform(0.1, 1.0, (2, V)), requires_grad=True)
    mt = torch.tensor(rng.uniform(0.1, 1.0, (2, V)), requires_grad=True)

    def f(s, t, w):
        return tsw.tree_wasserstein(parents, w, s, t, p=p, validate=False)

    assert torch.autograd.gradcheck(f, (ms, mt, lengths))
    assert torch.autograd.gradgradcheck(f, (ms, mt, lengths))
    if p == 1:
        (g,) = torch.autograd.grad(f(ms, mt, lengths).sum(), ms)
        hops = ref.tree_metric_from_parents(parents, np.ones(V))
        root = int(np.flatnonzero(parents < 0)[0])
        # v is on u's path to the root iff d(u, v) + d(v, root) = d(u, root)
        above = hops[:, :, None] + hops[None, :, root, None] == hops[:, root, None, None]
        above = above[..., 0]  # above[u, v]
        diff = (ms - mt).detach().numpy()
        sub = diff @ above  # sub[b, v]: the mass of v's subtree
        w = lengths.detach().numpy() * (np.arange(V) != root)
        assert_close(g, (np.sign(sub) * w) @ above.T)


@pytest.mark.parametrize("which", ["mass_s", "mass_t", "both"])
def test_the_cost_is_differentiable_in_the_masses(which, path):
    """The plan is optimal, so its cost is the tree W1 of the masses: its gradient there.

    Only the masses require grad (the cost gave torch's generic "does not require grad").
    Checked against central differences of the cost along perturbations that keep the
    totals equal (the plan recomputed at each point), and the gradient of ``mass_t`` is
    minus that of ``mass_s``.
    """
    rng = np.random.default_rng(13)
    V = 12
    parents = random_tree(rng, V)
    lengths = torch.tensor(rng.uniform(0.5, 2.0, V))
    ms0 = torch.tensor(rng.uniform(0.2, 1.0, V))
    mt0 = torch.tensor(rng.uniform(0.2, 1.0, V))
    mt0 *= ms0.sum() / mt0.sum()
    ms = ms0.clone().requires_grad_(which in ("mass_s", "both"))
    mt = mt0.clone().requires_grad_(which in ("mass_t", "both"))
    _, cost = tsw.tree_plan(parents, lengths, ms, mt)
    wanted = [x for x in (ms, mt) if x.requires_grad]
    grads = torch.autograd.grad(cost, wanted)
    for _ in range(4):
        v = torch.tensor(rng.normal(size=V))
        v -= v.mean()  # the totals stay equal
        eps = 1e-6
        for x0, x, g in zip((ms0, mt0), (ms, mt), (grads[0], grads[-1]), strict=True):
            if not x.requires_grad:
                continue
            up, down = x0 + eps * v, x0 - eps * v
            args = ((up, mt0), (down, mt0)) if x is ms else ((ms0, up), (ms0, down))
            fd = (
                tsw.tree_plan(parents, lengths, *args[0])[1]
                - tsw.tree_plan(parents, lengths, *args[1])[1]
            ) / (2 * eps)
            assert_close(float((g * v).sum()), float(fd), tol=1e-7)
    if which == "both":
        assert_close(grads[1], -grads[0])


@pytest.mark.parametrize(
    "parents", [[], np.array([]), np.array([], dtype=np.int64), torch.tensor([])]
)
def test_an_empty_tree_is_named(parents):
    """``parents=[]`` reads as floats: the message names the empty tree, not the dtype."""
    for fn in (tsw.tree_plan, tsw.tree_wasserstein):
        with pytest.raises(ValueError, match=r"parents is empty: a tree has at least one node"):
            fn(parents, [], [], [])
    with pytest.raises(
        ValueError, match=r"parents must have shape \(V,\) with V >= 1; got shape \(1, 0\)"
    ):
        tsw.tree_wasserstein([[]], [], [], [])
