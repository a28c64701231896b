"""Finite-difference gradients of Db-TSW above d = 3.

Up to d = 3 the point-to-line distance of the split is a residual norm formed
explicitly; above, an identity that forms no (T, k, n, d) tensor (and has its own
backward). The contract's gradchecks run at d = 3 only; these run the other branch
(d = 5 and d = 16), with respect to the points and to zero-sum weight perturbations, in
float64 with frozen trees and generic points (no ties among the line coordinates, no
point on a line).
"""

from __future__ import annotations

import pytest
import torch

import tsw

F64 = torch.float64


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
def test_db_tsw_gradcheck_above_the_explicit_residual_dimension(d, delta, p, orthogonal):
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


@pytest.mark.parametrize(("rows_batch", "points_batch"), [(1, 1), (1, 3), (3, 3), (3, 1)])
def test_centred_products_backward_equals_autograd_of_the_formula(rows_batch, points_batch):
    """The fused products and squared norms against autograd of ``(Y - c0)`` written out.

    ``_CentredProducts`` writes the gradient of ``Y`` in place (``addmm``/``baddbmm``);
    the reference is torch's own graph of a subtraction, a product and a squared norm,
    with both outputs weighted by random upstream gradients, for every batch layout of
    the rows and the points (shared rows, batched rows against one item's points).
    """
    from tsw.euclidean._lines import _CentredProducts

    g = torch.Generator().manual_seed(rows_batch * 10 + points_batch)
    rows = torch.randn(rows_batch, 5, 4, generator=g, dtype=F64, requires_grad=True)
    Y = torch.randn(points_batch, 6, 4, generator=g, dtype=F64, requires_grad=True)
    c0 = torch.randn(1, 1, 4, generator=g, dtype=F64)
    B = max(rows_batch, points_batch)
    w_prods = torch.randn(B, 5, 6, generator=g, dtype=F64)
    w_sq = torch.randn(points_batch, 6, generator=g, dtype=F64)

    prods, sq = _CentredProducts.apply(rows, Y, c0)
    got = torch.autograd.grad((prods * w_prods).sum() + (sq * w_sq).sum(), (rows, Y))
    Yc = Y - c0
    ref_prods, ref_sq = rows @ Yc.transpose(-1, -2), (Yc * Yc).sum(-1)
    torch.testing.assert_close(prods, ref_prods, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(sq, ref_sq, rtol=1e-13, atol=1e-13)
    want = torch.autograd.grad((ref_prods * w_prods).sum() + (ref_sq * w_sq).sum(), (rows, Y))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    # each output alone (the other's gradient is then zero or absent)
    assert torch.autograd.gradcheck(lambda r, y: _CentredProducts.apply(r, y, c0)[0], (rows, Y))
    assert torch.autograd.gradcheck(lambda r, y: _CentredProducts.apply(r, y, c0)[1], (rows, Y))
