"""``tsw.core.tree_wasserstein``: the closed forms on rooted trees and on line systems.

``tree_wasserstein`` on random rooted trees against ``ot.emd2`` on the tree metric built
by scipy's shortest paths (p = 1) and the Sobolev sum written from explicit subtrees
(p > 1); ``line_system_cost`` (stars and chains of lines, ties, atoms at attachment
points) against EMD on the explicit line-system tree, with both implementations of the
line cost; gradcheck, upstream gradients, and the error of every bad argument.
"""

from __future__ import annotations

import math
from unittest import mock

import _reference as ref
import numpy as np
import ot
import pytest
import torch
from _reference import (
    assert_close,
    distinct_sizes,
    lit,
    random_line_system,
    random_tree,
    t64,
    weights,
)
from conftest import tolerances

import tsw

F64 = torch.float64


def random_tree_problem(rng, batch_shape):
    V = int(rng.integers(2, 13))
    parents = random_tree(rng, V)
    lengths = rng.uniform(0.0, 2.0, size=V) * (rng.random(V) > 0.15)  # some zero edges
    total = rng.uniform(0.5, 2.0)
    ms = total * weights(rng, (*batch_shape, V), zero_prob=0.3)
    mt = total * weights(rng, (*batch_shape, V), zero_prob=0.3)
    return parents, lengths, ms, mt


BATCH_SHAPES = [(), (3,), (2, 3)]


class TestTreeWasserstein:
    @pytest.mark.parametrize("seed", range(24))
    def test_p1_equals_emd_on_tree_metric(self, seed):
        rng = np.random.default_rng(seed)
        parents, lengths, ms, mt = random_tree_problem(rng, BATCH_SHAPES[seed % 3])
        par = torch.as_tensor(parents) if seed % 2 else parents.tolist()
        got = tsw.tree_wasserstein(par, t64(lengths), t64(ms), t64(mt), p=1)
        D = ref.tree_metric_from_parents(parents, lengths)
        expected = [
            ot.emd2(s, t, D)
            for s, t in zip(ms.reshape(-1, len(parents)), mt.reshape(-1, len(parents)), strict=True)
        ]
        assert_close(got, np.reshape(expected, ms.shape[:-1]))

    def test_batched_edge_lengths(self):
        rng = np.random.default_rng(100)
        parents, _, ms, mt = random_tree_problem(rng, (4,))
        lengths = rng.uniform(0.0, 2.0, size=ms.shape)
        got = tsw.tree_wasserstein(parents, t64(lengths), t64(ms), t64(mt), p=1)
        expected = [
            ot.emd2(s, t, ref.tree_metric_from_parents(parents, w))
            for s, t, w in zip(ms, mt, lengths, strict=True)
        ]
        assert_close(got, expected)

    @pytest.mark.parametrize("p", [2, 3, 1.5])
    @pytest.mark.parametrize("seed", range(8))
    def test_p_gt_1_equals_sobolev(self, seed, p):
        rng = np.random.default_rng(1000 + seed)
        parents, lengths, ms, mt = random_tree_problem(rng, BATCH_SHAPES[seed % 3])
        got = tsw.tree_wasserstein(parents, t64(lengths), t64(ms), t64(mt), p=p)
        V = len(parents)
        expected = [
            ref.sobolev_cost_on_tree(parents, lengths, s - t, p) ** (1 / p)
            for s, t in zip(ms.reshape(-1, V), mt.reshape(-1, V), strict=True)
        ]
        assert_close(got, np.reshape(expected, ms.shape[:-1]))

    @pytest.mark.parametrize("p", [1, 2])
    def test_gradcheck_masses_and_lengths(self, p):
        rng = np.random.default_rng(7)
        parents = random_tree(rng, 7)
        lengths = t64(rng.uniform(0.5, 2.0, 7)).requires_grad_()
        ms = t64(weights(rng, (7,)) + 0.05).requires_grad_()
        mt = t64(weights(rng, (7,)) + 0.05).requires_grad_()

        def f(s, t, w):
            return tsw.tree_wasserstein(parents, w, s, t, p=p, validate=False)

        assert torch.autograd.gradcheck(f, (ms, mt, lengths))


def test_tree_wasserstein_power_and_safe_root():
    lengths = torch.tensor([0.0, 1.0, 2.0], dtype=F64)
    mu = torch.tensor([0.0, 0.5, 0.5], dtype=F64, requires_grad=True)
    nu = torch.tensor([0.0, 1.0, 0.0], dtype=F64)
    power = tsw.tree_wasserstein([-1, 0, 0], lengths, mu, nu, p=2, power=True)
    assert float(power.detach()) == pytest.approx(1 * 0.25 + 2 * 0.25)
    # at identical measures the root's subgradient is 0, not NaN
    tsw.tree_wasserstein([-1, 0, 0], lengths, mu, mu.detach(), p=2).backward()
    assert torch.equal(mu.grad, torch.zeros(3, dtype=F64))


def test_tree_wasserstein_sobolev_gradient_is_finite_where_the_measures_meet():
    mu = torch.tensor([0.0, 0.5, 0.5], dtype=F64, requires_grad=True)
    lengths = torch.tensor([0.0, 1.0, 2.0], dtype=F64)
    tsw.tree_wasserstein([-1, 0, 0], lengths, mu, mu.detach(), p=2).backward()
    assert torch.equal(mu.grad, torch.zeros(3, dtype=F64))
    # away from the meeting point, the gradient of (sum w |d|^2)^(1/2) by hand
    mu = torch.tensor([0.0, 0.7, 0.3], dtype=F64, requires_grad=True)
    nu = torch.tensor([0.0, 0.5, 0.5], dtype=F64)
    tsw.tree_wasserstein([-1, 0, 0], lengths, mu, nu, p=2).backward()
    diff = (mu - nu).detach()
    value = math.sqrt(float((lengths * diff**2).sum()))
    torch.testing.assert_close(mu.grad, lengths * diff / value)


# --------------------------------------------------------------------------- line systems


def emd_signed(coords, masses, attachments):
    """EMD between the positive and negative parts of signed masses on a line system."""
    return ref.emd_on_lines(
        coords, coords, np.clip(masses, 0, None), np.clip(-masses, 0, None), attachments
    )


@pytest.mark.usefixtures("line_kernel")
class TestLineSystemCost:
    @pytest.mark.parametrize("ties", [False, True])
    @pytest.mark.parametrize("structure", ["star", "chain"])
    @pytest.mark.parametrize("seed", range(10))
    def test_p1_equals_emd(self, seed, structure, ties):
        rng = np.random.default_rng(2000 + seed)
        k = seed % 5 + 1
        n, m = distinct_sizes(rng)  # source / target atoms, both signed
        coords, masses, att = random_line_system(rng, 2, k, n + m, ties)
        chain = structure == "chain"
        got = tsw.line_system_cost(t64(coords), t64(masses), t64(att) if chain else None, p=1)
        expected = [
            emd_signed(c, w, a if chain else None)
            for c, w, a in zip(coords, masses, att, strict=True)
        ]
        assert_close(got, expected)

    @pytest.mark.parametrize("p", [2, 3])
    @pytest.mark.parametrize("structure", ["star", "chain"])
    @pytest.mark.parametrize("seed", range(4))
    def test_p_gt_1_equals_sobolev(self, seed, structure, p):
        rng = np.random.default_rng(2100 + seed)
        k, n = seed % 5 + 1, int(rng.integers(2, 10))
        coords, masses, att = random_line_system(rng, 2, k, n, ties=seed % 2 == 1)
        chain = structure == "chain"
        got = tsw.line_system_cost(t64(coords), t64(masses), t64(att) if chain else None, p=p)
        expected = [
            ref.line_system_sobolev(c, w, a if chain else None, p)
            for c, w, a in zip(coords, masses, att, strict=True)
        ]
        assert_close(got, expected)

    @pytest.mark.parametrize("p", [1, 2])
    @pytest.mark.parametrize("structure", ["star", "chain"])
    def test_gradcheck(self, structure, p):
        rng = np.random.default_rng(2200)
        coords, masses, att = random_line_system(rng, 1, 3, 5, ties=False)
        inputs = [t64(coords[0]).requires_grad_(), t64(masses[0]).requires_grad_()]
        if structure == "chain":
            inputs.append(t64(att[0]).requires_grad_())
        assert torch.autograd.gradcheck(lambda *xs: tsw.line_system_cost(*xs, p=p), inputs)


@pytest.mark.usefixtures("line_kernel")
@pytest.mark.parametrize("chain", [False, True])
@pytest.mark.parametrize("p", [1.0, 2.0, 1.5])
def test_line_system_cost_backward(chain, p):
    """The custom autograd Function: gradcheck and upstream-gradient scaling."""
    g = torch.Generator().manual_seed(int(10 * p) + chain)
    coords = torch.randn(4, 3, 6, generator=g, dtype=F64, requires_grad=True)
    masses = torch.randn(4, 3, 6, generator=g, dtype=F64, requires_grad=True)
    att = torch.randn(4, 3, generator=g, dtype=F64) if chain else None

    def f(c, m):
        return tsw.line_system_cost(c, m, att, p)

    assert torch.autograd.gradcheck(f, (coords, masses))
    out = f(coords, masses)
    assert out.shape == (4,)
    up = torch.tensor([3.0, -2.0, 0.0, 0.25], dtype=F64)
    gv = torch.autograd.grad(out, (coords, masses), grad_outputs=up)
    loop = [torch.zeros_like(coords), torch.zeros_like(masses)]
    for i in range(4):
        gi = torch.autograd.grad(f(coords, masses)[i], (coords, masses))
        loop[0] += up[i] * gi[0]
        loop[1] += up[i] * gi[1]
    for u, v in zip(gv, loop, strict=True):
        torch.testing.assert_close(u, v, **tolerances(F64))


@pytest.mark.usefixtures("line_kernel")
@pytest.mark.parametrize("p", [1.0, 2.0, 1.5])
def test_shared_coordinates_equal_expanded_ones(p):
    """One sort for rows sharing coordinates: same values and gradients as k sorts."""
    from tsw.core.tree_wasserstein import line_cost

    g = torch.Generator().manual_seed(int(10 * p))
    c = torch.randn(3, 1, 7, generator=g, dtype=F64, requires_grad=True)
    m = torch.randn(3, 4, 7, generator=g, dtype=F64, requires_grad=True)
    up = torch.randn(3, 4, generator=g, dtype=F64)
    shared = line_cost(c, m, p)
    expanded = line_cost(c.expand(3, 4, 7), m, p)
    torch.testing.assert_close(shared, expanded, rtol=1e-13, atol=1e-13)
    for u, v in zip(
        torch.autograd.grad(shared, (c, m), up),
        torch.autograd.grad(expanded, (c, m), up),
        strict=True,
    ):
        torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(lambda c, m: line_cost(c, m, p), (c, m))
    # rays (coordinates >= 0): every ray's cost is the independent Sobolev sum
    ca = c.detach().abs()
    for i in range(3):
        for line in range(4):
            expected = ref.star_sobolev(ca[i].numpy(), m[i, line : line + 1].detach().numpy(), p)
            assert_close(line_cost(ca, m, p)[i, line], expected)


# --------------------------------------------------------------------------- small masses far out


@pytest.mark.usefixtures("line_kernel")
def test_a_small_mass_far_out_on_a_line_keeps_its_cost():
    """Hand values: 2^-70 at 2^70 beside a mass 1 nearer the root.

    Star: line 0 holds +1 at -1 and +2^-70 at 2^70, line 1 holds -1 at 1 and -2^-70 at
    0.5: the edges carry 1 (length 1), 2^-70 (length 2^70), 1 + 2^-70 (length 0.5) and 1
    (length 0.5), 3 + 2^-71 in all, 3.0 in float64. A suffix read as ``total - P`` lost
    the 2^-70 (the line's total rounds to 1) and gave 2.0. Rays: +1 at 1 and +2^-70 at
    2^70 cost 1 + 2^-70 + (2^70 - 1) 2^-70 = 2 exactly (it gave 1.0). A chain whose second
    line holds 2^-70 in all, hung at 2^70 on the first line (which holds 1): 1 + 1 = 2
    (the mass below the attachment, a sum less the line's own total, was 0 and gave 1.0).
    """
    tiny, far = 2.0**-70, 2.0**70
    coords = torch.tensor([[-1.0, far], [1.0, 0.5]], dtype=F64)
    masses = torch.tensor([[1.0, tiny], [-1.0, -tiny]], dtype=F64)
    assert tsw.line_system_cost(coords, masses).item() == 3.0
    from tsw.core.tree_wasserstein import line_cost

    ray = line_cost(
        torch.tensor([1.0, far], dtype=F64), torch.tensor([1.0, tiny], dtype=F64), rays=True
    )
    assert ray.item() == 2.0
    chain = tsw.line_system_cost(
        torch.tensor([[-1.0], [1.0]], dtype=F64),
        torch.tensor([[1.0], [tiny]], dtype=F64),
        torch.tensor([0.0, far], dtype=F64),
    )
    assert chain.item() == 1.0 + (far * tiny + 1.0 * tiny)  # 1 + the 2^-70 carried 2^70 + 1
    # float32: 2^-26 at 2^20 beside 1 (1 + 2^-26 is 1 in float32): 1 + 2^-6 + 0.5 (1 +
    # 2^-26) + 0.5, which rounds to 2 + 2^-6 in float32 (the old sums gave 2.0)
    c32, m32 = coords.float(), masses.float()
    c32[0, 1], m32[0, 1], m32[1, 1] = 2.0**20, 2.0**-26, -(2.0**-26)
    assert tsw.line_system_cost(c32, m32).item() == 2.0 + 2.0**-6


def adversarial_line_system(rng, k, n, p):
    """Signed masses on a grid of 2^-10 and a few of about 2^-60 on coordinates of about
    2^(60 p - 3), which their p-th powers cross; coordinates on a grid of 2^-4,
    attachments on the grid or far out. Every value is a float64 number."""
    coords = rng.integers(-48, 48, (k, n)) / 16
    masses = rng.integers(-1024, 1024, (k, n)) * (rng.random((k, n)) < 0.7) / 1024
    far = rng.random((k, n)) < 0.25
    sign = rng.choice([-1.0, 1.0], (2, far.sum()))
    coords[far] = sign[0] * rng.integers(1, 4, far.sum()) * 2.0 ** (60 * p - 3)
    masses[far] = sign[1] * rng.integers(1, 8, far.sum()) * 2.0**-60
    att = rng.integers(-48, 48, k) / 16
    att[rng.random(k) < 0.3] = 2.0 ** (60 * p - 3)
    return coords, masses, att


@pytest.mark.usefixtures("line_kernel")
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("structure", ["star", "chain"])
@pytest.mark.parametrize("seed", range(6))
def test_masses_of_many_scales_on_lines_against_rational_arithmetic(seed, structure, p):
    """``line_system_cost`` against the explicit tree's sum in rational arithmetic.

    Small masses far out beside masses of order 1 nearer the root, on stars and chains
    (lines need not balance, nor the system): the masses beyond the edges, summed from
    the far ends, keep the small ones, whose long edges then count as much as the rest.
    """
    rng = np.random.default_rng(2300 + seed)
    k, n = int(rng.integers(2, 5)), int(rng.integers(3, 8))
    coords, masses, att = adversarial_line_system(rng, k, n, p)
    chain = structure == "chain"
    got = tsw.line_system_cost(t64(coords), t64(masses), t64(att) if chain else None, p=p)
    exact = float(ref.line_system_exact(coords, masses, att if chain else None, p))
    assert_close(got, exact, tol=1e-14)


def test_the_fused_split_keeps_a_small_mass_far_out():
    """Db-TSW's split and line cost in one kernel, against rational arithmetic on the
    split masses: a point far out (2^60, split evenly) with a small mass (2^-60) beside
    points of mass about 1 nearer the root, on each of two lines."""
    from tsw.core import _kernels
    from tsw.core.splits import LineSplit, SplitForm, split_line_cost

    if not _kernels.warm_up():
        pytest.skip("the compiled kernels are disabled (TSW_NUMBA=0) or absent")
    x = torch.tensor([[[[-1.0, 2.0**60, 0.5], [0.5, 2.0**60, -1.0]]]], dtype=F64)
    dist = torch.tensor([[[[0.0, 0.0, 10.0], [10.0, 0.0, 0.0]]]], dtype=F64)
    w = torch.tensor([[1.0, 2.0**-60, -1.0]], dtype=F64)
    split = LineSplit(w, 1.0, None, dist, SplitForm.DISTANCES)
    exact = float(ref.line_system_exact(x[0, 0], split.masses()[0, 0], None, 1))
    assert exact > 2.5  # 1 + 1 near the root, 2 x 2^-61 carried over 2^60
    assert_close(split_line_cost(x, split, 1.0), [[exact]], tol=1e-14)
    with mock.patch.object(_kernels, "usable", return_value=False):
        assert_close(split_line_cost(x, split, 1.0), [[exact]], tol=1e-14)


# -------------------------------------------------------------------------- checks of the arguments


def tw_args(V=4):
    lengths = torch.ones(V, dtype=F64)
    ms = torch.full((V,), 1 / V, dtype=F64)
    mt = torch.zeros(V, dtype=F64)
    mt[0] = 1.0
    return lengths, ms, mt


def test_tree_wasserstein_roots():
    lengths, ms, mt = tw_args(3)
    with pytest.raises(
        ValueError, match=lit("parents must contain exactly one root (entry -1); got 0 roots")
    ):
        tsw.tree_wasserstein([1, 2, 0], lengths, ms, mt)
    with pytest.raises(
        ValueError, match=lit("parents must contain exactly one root (entry -1); got 2 roots")
    ):
        tsw.tree_wasserstein([-1, 0, -1], lengths, ms, mt)


def test_tree_wasserstein_cycle():
    lengths, ms, mt = tw_args(4)
    with pytest.raises(
        ValueError,
        match=lit("parents must describe a tree (connected, acyclic); only 2 of 4 nodes"),
    ):
        tsw.tree_wasserstein([-1, 0, 3, 2], lengths, ms, mt)
    with pytest.raises(ValueError, match=lit("parents must describe a tree")):
        tsw.tree_wasserstein(torch.tensor([-1, 2, 1, 1]), lengths, ms, mt)
    # a self-loop is a cycle too
    with pytest.raises(ValueError, match=lit("parents must describe a tree")):
        tsw.tree_wasserstein([-1, 0, 2, 0], lengths, ms, mt)


@pytest.mark.parametrize(
    ("parents", "bad"),
    [
        ([-1, 0, 7, 0], "parents[2]=7"),
        ([-1, 0, -2, 0], "parents[2]=-2"),
        ([-1, 4, 0, 0], "parents[1]=4"),
    ],
)
def test_tree_wasserstein_index_out_of_range(parents, bad):
    lengths, ms, mt = tw_args(4)
    with pytest.raises(
        ValueError, match=lit(f"parents entries must be -1 or node indices in [0, 4); got {bad}")
    ):
        tsw.tree_wasserstein(parents, lengths, ms, mt)


def test_tree_wasserstein_float_parents():
    lengths, ms, mt = tw_args(3)
    with pytest.raises(TypeError, match=lit("parents must hold integers; got dtype torch.float32")):
        tsw.tree_wasserstein(torch.tensor([-1.0, 0.0, 0.0]), lengths, ms, mt)
    with pytest.raises(TypeError, match=lit("parents must hold integers; got float64")):
        tsw.tree_wasserstein([-1.0, 0.0, 0.0], lengths, ms, mt)
    with pytest.raises(TypeError, match=lit("parents must hold integers; got dtype torch.bool")):
        tsw.tree_wasserstein(torch.tensor([True, False, False]), lengths, ms, mt)


def test_tree_wasserstein_parents_shape():
    lengths, ms, mt = tw_args(3)
    with pytest.raises(ValueError, match=lit("parents is empty: a tree has at least one node")):
        tsw.tree_wasserstein(torch.zeros(0, dtype=torch.long), lengths[:0], ms[:0], mt[:0])
    with pytest.raises(ValueError, match=lit("parents must have shape (V,) with V >= 1")):
        tsw.tree_wasserstein([[-1, 0, 0]], lengths, ms, mt)


def test_tree_wasserstein_mass_shapes():
    lengths, ms, mt = tw_args(3)
    with pytest.raises(
        ValueError, match=lit("mass_s and mass_t must have the same shape (..., V) with V=3")
    ):
        tsw.tree_wasserstein([-1, 0, 0], lengths, ms, mt[:2])
    with pytest.raises(
        ValueError, match=lit("mass_s and mass_t must have the same shape (..., V) with V=4")
    ):
        tsw.tree_wasserstein([-1, 0, 0, 1], torch.ones(4, dtype=F64), ms, mt)
    with pytest.raises(
        ValueError, match=lit("edge_lengths must have shape (V,) or (..., V) with V=3")
    ):
        tsw.tree_wasserstein([-1, 0, 0], lengths[:2], ms, mt)


def test_tree_wasserstein_values():
    lengths, ms, mt = tw_args(3)
    with pytest.raises(
        ValueError, match=lit("edge_lengths must be non-negative; got a minimum of -1")
    ):
        tsw.tree_wasserstein([-1, 0, 0], torch.tensor([0.0, 1.0, -1.0], dtype=F64), ms, mt)
    with pytest.raises(ValueError, match=lit("mass_s must be non-negative")):
        tsw.tree_wasserstein([-1, 0, 0], lengths, torch.tensor([1.5, -0.5, 0.0], dtype=F64), mt)
    with pytest.raises(ValueError, match=lit("mass_s and mass_t must have equal total mass")):
        tsw.tree_wasserstein([-1, 0, 0], lengths, ms, 2 * mt)
    with pytest.raises(ValueError, match=lit("mass_t contains NaN or Inf values")):
        tsw.tree_wasserstein([-1, 0, 0], lengths, ms, torch.tensor([math.nan, 0, 0], dtype=F64))
    with pytest.raises(ValueError, match=lit("p must be a finite real number >= 1; got 0.5")):
        tsw.tree_wasserstein([-1, 0, 0], lengths, ms, mt, p=0.5)


def test_tree_wasserstein_types():
    lengths, ms, mt = tw_args(3)
    with pytest.raises(TypeError, match="all torch tensors or all numpy arrays"):
        tsw.tree_wasserstein([-1, 0, 0], lengths, ms.numpy(), mt)
    with pytest.raises(TypeError, match="mass_s must be a list of real numbers"):
        tsw.tree_wasserstein([-1, 0, 0], lengths, ["a", 1, 2], mt)
    with pytest.raises(TypeError, match=lit("edge_lengths must have the same dtype as mass_s")):
        tsw.tree_wasserstein([-1, 0, 0], lengths.float(), ms, mt)
    with pytest.raises(TypeError, match=lit("mass_t must have the same dtype as mass_s")):
        tsw.tree_wasserstein([-1, 0, 0], lengths, ms, mt.float())


def test_validate_false_skips_tree_wasserstein_value_checks():
    lengths, ms, mt = tw_args(3)
    neg = torch.tensor([1.5, -0.5, 0.0], dtype=F64)
    value = tsw.tree_wasserstein([-1, 0, 0], lengths, neg, mt, validate=False)
    assert torch.isfinite(value)
    # structure checks stay on
    with pytest.raises(ValueError, match="exactly one root"):
        tsw.tree_wasserstein([0, 0, 0], lengths, ms, mt, validate=False)
