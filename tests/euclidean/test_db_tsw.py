"""Db-TSW (``tsw.euclidean._db_tsw``): exact values against ``ot.emd2``, and its options.

One tree (the distance-based split for delta from 0 to 10, d from 2 to 12 on both sides
of the explicit-residual dimension, orthonormal lines, zero weights) against EMD on the
explicit star; several trees, batches and p > 1 against the Sobolev sum edge by edge,
tree by tree in ``log["per_tree"]``; the spec's golden values G1; delta = 0 is
concurrent TSW-SL; gradcheck above d = 3; explicit trees must be concurrent lines.

The distance's shared properties (metric, invariances, weights, batches, seeds,
gradients at degenerate inputs) run in ``test_contract.py``; its compiled kernels
against the torch operators in ``core/test_kernels.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _reference import (
    assert_close,
    distinct_sizes,
    lit,
    mean_root,
    random_problem,
    star_oracle,
    star_trees,
    t64,
)

import tsw

F64 = torch.float64


def concurrent(roots, dirs):
    return tsw.ConcurrentLines(t64(roots), t64(dirs))


#: the point-to-line distance of the split is a residual norm formed explicitly up to
#: d = 3 and an identity above (tsw's EXPLICIT_RESIDUAL_MAX_DIM): both sides are covered
DB_DIMS = [2, 3, 4, 5, 9, 12]


class TestDbTswOneTree:
    @pytest.mark.parametrize("p", [1, 2])
    def test_zero_padding_leaves_value_and_gradients_unchanged(self, p):
        """Data and trees in R^2, zero-padded into R^D for D = 2, ..., 12: the same
        problem, hence the same value and gradients (zero in the padded coordinates),
        whichever point-to-line algorithm a dimension D uses. A fault in either branch
        (or in the switch between them) breaks the equality at some D."""
        rng = np.random.default_rng([3100, p])
        X, Y, a, b = random_problem(rng, 2, 6, 5)
        roots, dirs = star_trees(rng, 3, 3, 2)
        values, grads = [], []
        for D in range(2, 13):

            def pad(A, D=D):
                A = t64(A)
                return torch.cat([A, A.new_zeros(*A.shape[:-1], D - A.shape[-1])], -1)

            trees = tsw.ConcurrentLines(pad(roots), pad(dirs))
            Xs = pad(X).requires_grad_()
            v = tsw.db_tsw(Xs, pad(Y), t64(a), t64(b), trees=trees, delta=1.5, p=p)
            (g,) = torch.autograd.grad(v, Xs)
            assert float(g[:, 2:].abs().sum()) <= 1e-12
            values.append(v.detach())
            grads.append(g[:, :2])
        for D, (v, g) in enumerate(zip(values, grads, strict=True), start=2):
            assert_close(v, values[0])
            torch.testing.assert_close(g, grads[0], rtol=1e-9, atol=1e-12, msg=f"D={D}")

    @pytest.mark.parametrize("delta", [0.0, 0.5, 1.0, 2.0, 10.0])
    @pytest.mark.parametrize("d", DB_DIMS)
    def test_equals_emd_on_star(self, d, delta):
        rng = np.random.default_rng([3000, d, int(10 * delta)])
        for case in range(4):
            k = case + 1
            orthogonal = case % 2 == 1 and k <= d
            n, m = distinct_sizes(rng)
            X, Y, a, b = random_problem(rng, d, n, m, zero_prob=0.2 * (case == 3))
            roots, dirs = star_trees(rng, 1, k, d, orthogonal)
            got = tsw.db_tsw(
                t64(X), t64(Y), t64(a), t64(b), trees=concurrent(roots, dirs), delta=delta, p=1
            )
            expected = star_oracle(X, Y, a, b, roots[0], dirs[0], delta=delta)
            assert_close(got, expected)


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("seed", range(3))
def test_several_trees_and_p(seed, p):
    rng = np.random.default_rng(5000 + seed)
    T, k, d, delta = 4, seed + 2, 3 + seed, [0.0, 1.0, 5.0][seed]
    n, m = distinct_sizes(rng, 2)
    X, Y, a, b = random_problem(rng, d, n, m)
    roots, dirs = star_trees(rng, T, k, d, orthogonal=seed == 1)
    got = tsw.db_tsw(
        t64(X), t64(Y), t64(a), t64(b), trees=concurrent(roots, dirs), delta=delta, p=p
    )
    per_tree = [
        star_oracle(X, Y, a, b, r, th, p=p, delta=delta) for r, th in zip(roots, dirs, strict=True)
    ]
    assert_close(got, mean_root(per_tree, p))


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("shared_trees", [True, False])
def test_several_trees_batched(shared_trees, p):
    rng = np.random.default_rng(5100)
    B, T, k, d, n, m, delta = 3, 3, 3, 4, 5, 7, 2.0
    probs = [random_problem(rng, d, n, m) for _ in range(B)]
    X, Y, a, b = (np.stack(z) for z in zip(*probs, strict=True))
    roots, dirs = star_trees(rng, T if shared_trees else B * T, k, d)
    if shared_trees:
        per_item = [(roots, dirs)] * B
    else:
        roots, dirs = roots.reshape(B, T, d), dirs.reshape(B, T, k, d)
        per_item = list(zip(roots, dirs, strict=True))
    trees = concurrent(roots, dirs)
    got = tsw.db_tsw(t64(X), t64(Y), t64(a), t64(b), trees=trees, delta=delta, p=p)
    expected = [
        mean_root(
            [
                star_oracle(X[i], Y[i], a[i], b[i], r, th, p=p, delta=delta)
                for r, th in zip(*per_item[i], strict=True)
            ],
            p,
        )
        for i in range(B)
    ]
    assert_close(got, expected)


@pytest.mark.parametrize("p", [1, 2])
def test_per_tree_log_equals_the_oracle(p):
    rng = np.random.default_rng(9000 + p)
    n, m = distinct_sizes(rng)
    X, Y, a, b = random_problem(rng, 4, n, m)
    roots, dirs = star_trees(rng, 3, 3, 4)
    args = (t64(X), t64(Y), t64(a), t64(b))
    value, log = tsw.db_tsw(*args, trees=concurrent(roots, dirs), delta=1.5, p=p, log=True)
    expected = [star_oracle(X, Y, a, b, roots[i], dirs[i], delta=1.5, p=p) for i in range(3)]
    assert_close(log["per_tree"], expected)
    assert_close(value, mean_root(np.array(expected), p))
    power = tsw.db_tsw(*args, trees=concurrent(roots, dirs), delta=1.5, p=p, power=True)
    assert_close(power, np.mean(expected))
    assert log["trees"].n_trees == 3


# ------------------------------------------------------------------------ golden values, reductions


class TestGoldenG1:
    """Spec section 8, G1: d=2, root 0, theta = (e1, e2), X = {(1, 0)}, Y = {(0, 2)}."""

    X = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    Y = torch.tensor([[0.0, 2.0]], dtype=torch.float64)

    def trees(self):
        return tsw.ConcurrentLines(
            torch.zeros(1, 2, dtype=torch.float64), torch.eye(2, dtype=torch.float64)[None]
        )

    @pytest.mark.parametrize(("p", "expected"), [(1, 1.5), (2, math.sqrt(0.75))])
    def test_uniform_split(self, p, expected):
        assert_close(tsw.db_tsw(self.X, self.Y, trees=self.trees(), delta=0.0, p=p), expected)
        assert_close(tsw.tsw_sl(self.X, self.Y, trees=self.trees(), p=p), expected)

    @pytest.mark.parametrize(("p", "expected"), [(1, 2.4926527346), (2, 1.4443177042)])
    def test_distance_split_delta_1(self, p, expected):
        a, b = 1 / (1 + math.exp(-1)), 1 / (1 + math.exp(-2))
        exact = a + 2 * b if p == 1 else math.sqrt(a**2 + 2 * b**2)
        assert abs(exact - expected) < 1e-10  # the spec's rounded value
        assert_close(tsw.db_tsw(self.X, self.Y, trees=self.trees(), delta=1.0, p=p), exact)


@pytest.mark.parametrize("p", [1, 2])
def test_delta_0_is_concurrent_tsw_sl(p):
    rng = np.random.default_rng(7000)
    X, Y, a, b = random_problem(rng, 4, 6, 9)
    trees = concurrent(*star_trees(rng, 5, 3, 4))
    args = (t64(X), t64(Y), t64(a), t64(b))
    assert_close(
        tsw.db_tsw(*args, trees=trees, delta=0.0, p=p), tsw.tsw_sl(*args, trees=trees, p=p)
    )


# --------------------------------------------------------------------------- gradients above d = 3


def problem(d, seed, N=5, M=4):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, d, generator=g, dtype=F64)
    Y = 0.8 * torch.randn(M, d, generator=g, dtype=F64) + 0.5
    a = torch.rand(N, generator=g, dtype=F64) + 0.2
    b = torch.rand(M, generator=g, dtype=F64) + 0.2
    return X, Y, a / a.sum(), b / b.sum()


@pytest.mark.parametrize("d", [5, 16])
@pytest.mark.parametrize(
    ("delta", "p", "orthogonal"), [(2.0, 1, False), (5.0, 2, True), (0.5, 1.5, False)]
)
def test_gradcheck_above_the_explicit_residual_dimension(d, delta, p, orthogonal):
    X, Y, a0, b0 = problem(d, seed=d)
    center = 0.5 * (a0 @ X + b0 @ Y)
    trees = tsw.sample_concurrent_lines(
        d, n_trees=4, n_lines=3, center=center, std=0.5, orthogonal=orthogonal, seed=d, dtype=F64
    )
    # away from ties: distinct line coordinates of all points on every line
    Z = torch.cat([X, Y])
    coords = torch.einsum("nd,tkd->tkn", Z, trees.directions)
    gaps = coords.sort(-1).values.diff(dim=-1)
    assert float(gaps.min()) > 1e-3

    def f(X_s, X_t, u, v):
        return tsw.db_tsw(
            X_s, X_t, a0 + (u - u.mean()), b0 + (v - v.mean()), trees=trees, delta=delta, p=p
        )

    u = torch.zeros(5, dtype=F64, requires_grad=True)
    v = torch.zeros(4, dtype=F64, requires_grad=True)
    leaves = (X.clone().requires_grad_(), Y.clone().requires_grad_(), u, v)
    assert torch.autograd.gradcheck(f, leaves, fast_mode=True)
    # the gradient is not trivially zero in either the points or the weights
    grads = torch.autograd.grad(f(*leaves), leaves)
    assert all(float(g.abs().max()) > 1e-6 for g in grads)


# --------------------------------------------------------------------------- checks of the options


def test_rejects_chain_trees():
    X, Y, _, _ = problem(3, 0)
    chain = tsw.sample_chain_lines(3, n_trees=3, n_lines=2, seed=0, dtype=F64)
    with pytest.raises(TypeError, match=lit("trees must be ConcurrentLines; got ChainLines")):
        tsw.db_tsw(X, Y, trees=chain)
