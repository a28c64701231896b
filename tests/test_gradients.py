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
def test_products_backward_equals_autograd_of_the_matmul(rows_batch, points_batch):
    """``Products`` (a written-out contiguous backward) against torch's own matmul graph.

    Every batch layout of the rows and the points: shared rows, batched rows against one
    item's points (whose gradient is summed over the rows' batch), with random upstream
    gradients; gradcheck on top.
    """
    from tsw.core._gradients import Products

    g = torch.Generator().manual_seed(rows_batch * 10 + points_batch)
    rows = torch.randn(rows_batch, 5, 4, generator=g, dtype=F64, requires_grad=True)
    Y = torch.randn(points_batch, 6, 4, generator=g, dtype=F64, requires_grad=True)
    w = torch.randn(max(rows_batch, points_batch), 5, 6, generator=g, dtype=F64)

    prods = Products.apply(rows, Y)
    got = torch.autograd.grad((prods * w).sum(), (rows, Y))
    ref = rows @ Y.transpose(-1, -2)
    torch.testing.assert_close(prods, ref, rtol=1e-13, atol=1e-13)
    want = torch.autograd.grad((ref * w).sum(), (rows, Y))
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(Products.apply, (rows, Y))


def test_centre_moves_points_and_trees_together():
    """``centre`` translates points and trees by the mean root; coordinates do not move.

    Independent reference: ``<z - x_tau, theta>`` and ``|z - c|^2`` written out on the
    untranslated points, for concurrent and chained trees, shared and batched.
    """
    from tsw.core._validation import check_measures
    from tsw.euclidean._lines import centre, project

    g = torch.Generator().manual_seed(0)
    X = torch.randn(2, 7, 5, generator=g, dtype=F64) + 40.0
    Y = torch.randn(2, 6, 5, generator=g, dtype=F64) + 40.5
    measures = check_measures(X, Y, None, None)
    center = torch.full((5,), 40.0, dtype=F64)
    shared = tsw.sample_concurrent_lines(5, n_trees=3, n_lines=2, center=center, seed=1, dtype=F64)
    batched = tsw.ConcurrentLines(
        torch.stack([shared.roots, shared.roots + 1.0]), shared.directions, validate=False
    )
    chains = tsw.sample_chain_lines(5, n_trees=3, n_lines=2, center=center, seed=2, dtype=F64)
    Z = torch.cat([X, Y], dim=1)
    for trees in (shared, batched, chains):
        moved_measures, moved = centre(measures, trees)
        roots = trees.roots if trees.roots.ndim == 3 else trees.roots[None]
        c = roots.mean(dim=-2, keepdim=True)  # (B|1, 1, d)
        torch.testing.assert_close(moved_measures.X_s, X - c, rtol=0, atol=1e-12)
        assert moved_measures.sq is not None
        sq = torch.cat(moved_measures.sq, dim=-1)
        torch.testing.assert_close(sq, ((Z - c) ** 2).sum(-1), rtol=1e-12, atol=1e-10)
        sources = trees.sources if trees.sources.ndim == 4 else trees.sources[None]
        dirs = trees.directions if trees.directions.ndim == 4 else trees.directions[None]
        expected = torch.einsum("bnd,btkd->btkn", Z, dirs) - (dirs * sources).sum(-1)[..., None]
        coords, _ = project(measures, trees, distances=False)
        torch.testing.assert_close(coords, expected, rtol=1e-12, atol=1e-10)
        again, _ = project(moved_measures, moved, distances=False)  # already centred: as is
        torch.testing.assert_close(again, expected, rtol=1e-12, atol=1e-10)
