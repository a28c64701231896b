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
    from tsw.core._gradients import products

    g = torch.Generator().manual_seed(rows_batch * 10 + points_batch)
    rows = torch.randn(rows_batch, 5, 4, generator=g, dtype=F64, requires_grad=True)
    Y = torch.randn(points_batch, 6, 4, generator=g, dtype=F64, requires_grad=True)
    w = torch.randn(max(rows_batch, points_batch), 5, 6, generator=g, dtype=F64)

    prods = products((Y,), rows)
    got = torch.autograd.grad((prods * w).sum(), (rows, Y))
    ref = rows @ Y.transpose(-1, -2)
    torch.testing.assert_close(prods, ref, rtol=1e-13, atol=1e-13)
    want = torch.autograd.grad((ref * w).sum(), (rows, Y))
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(lambda r, y: products((y,), r), (rows, Y))


@pytest.mark.parametrize(
    ("rows_batch", "points_batch", "shift_batch"),
    [(1, 1, 1), (1, 3, 1), (3, 3, 3), (3, 1, 3), (1, 1, 3), (3, 3, 1)],
)
@pytest.mark.parametrize("chunk", [None, 3])
def test_products_with_shift_equal_the_translated_matmul(
    monkeypatch, rows_batch, points_batch, shift_batch, chunk
):
    """``Products(rows, Y, shift)`` against torch's graph of ``rows @ (Y - shift)^T``.

    The translation is formed a chunk of atoms at a time (``chunk`` atoms: several
    chunks and a short last one, or one chunk): value, both gradients (the shift is
    detached, so ``Y``'s gradient is that of the untranslated product) and gradcheck,
    for every batch layout of the rows, the points and the shift.
    """
    from tsw.core import _gradients
    from tsw.core._gradients import products

    if chunk is not None:  # chunks of 3 atoms (the real ones: at least 1024)
        monkeypatch.setattr(_gradients, "_chunks", lambda m, d: range(0, m, chunk))
    g = torch.Generator().manual_seed(rows_batch * 100 + points_batch * 10 + shift_batch)
    rows = torch.randn(rows_batch, 5, 4, generator=g, dtype=F64, requires_grad=True)
    Y = torch.randn(points_batch, 7, 4, generator=g, dtype=F64, requires_grad=True)
    shift = 30.0 + torch.randn(shift_batch, 1, 4, generator=g, dtype=F64)
    B = max(rows_batch, points_batch, shift_batch)
    w = torch.randn(B, 5, 7, generator=g, dtype=F64)

    prods = products((Y,), rows, shift)
    got = torch.autograd.grad((prods * w).sum(), (rows, Y))
    ref = rows @ (Y - shift).transpose(-1, -2)
    torch.testing.assert_close(prods, ref, rtol=1e-13, atol=1e-12)
    want = torch.autograd.grad((ref * w).sum(), (rows, Y))
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-11)
    assert torch.autograd.gradcheck(lambda r, y: products((y,), r, shift), (rows, Y))


@pytest.mark.parametrize("d", [3, 20])  # the points' gradient below and above NARROW_MAX_DIM
@pytest.mark.parametrize(
    ("rows_batch", "points_batch", "shift_batch"), [(1, 1, 1), (1, 3, 3), (3, 1, 3)]
)
@pytest.mark.parametrize("used", ["both", "first", "second"])
def test_grouped_products_equal_the_concatenated_matmuls(
    monkeypatch, d, rows_batch, points_batch, shift_batch, used
):
    """``grouped_products``: two groups of rows (one with a bias), two supports, in chunks.

    Against torch's graph of ``cat_i(rows_g @ (Y_i - shift)^T) - bias_g``: the values, the
    gradients of both supports, both groups of rows and the bias, with an upstream
    gradient on both outputs or on one only (the other output then gets none), and
    gradcheck.
    """
    from tsw.core import _gradients
    from tsw.core._gradients import grouped_products

    monkeypatch.setattr(_gradients, "_chunks", lambda m, d: range(0, m, 3))
    g = torch.Generator().manual_seed(d + rows_batch * 10 + points_batch)
    r1 = torch.randn(rows_batch, 4, d, generator=g, dtype=F64, requires_grad=True)
    r2 = torch.randn(rows_batch, 6, d, generator=g, dtype=F64, requires_grad=True)
    bias = torch.randn(rows_batch, 4, generator=g, dtype=F64, requires_grad=True)
    Y1 = torch.randn(points_batch, 7, d, generator=g, dtype=F64, requires_grad=True)
    Y2 = torch.randn(points_batch, 5, d, generator=g, dtype=F64, requires_grad=True)
    shift = 10.0 + torch.randn(shift_batch, 1, d, generator=g, dtype=F64)
    B = max(rows_batch, points_batch, shift_batch)
    w1, w2 = (torch.randn(B, R, 12, generator=g, dtype=F64) for R in (4, 6))
    leaves = (r1, r2, bias, Y1, Y2)

    def loss(outs):
        return (outs[0] * w1).sum() * (used != "second") + (outs[1] * w2).sum() * (used != "first")

    got = grouped_products((Y1, Y2), [(r1, bias), (r2, None)], shift)
    want = [
        torch.cat([r @ (Y - shift).transpose(-1, -2) for Y in (Y1, Y2)], dim=-1) for r in (r1, r2)
    ]
    want[0] = want[0] - bias.unsqueeze(-1)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape == (B, b.shape[1], 12)
        assert a.is_contiguous()
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-12)
    grads = torch.autograd.grad(loss(got), leaves, allow_unused=True)
    expected = torch.autograd.grad(loss(want), leaves, allow_unused=True)
    for a, b in zip(grads, expected, strict=True):
        if b is None or not bool(b.any()):  # no gradient through an unused group
            assert a is None or not bool(a.any())
            continue
        assert a is not None
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-11)
    if used == "both":
        assert torch.autograd.gradcheck(
            lambda *x: grouped_products(x[3:], [(x[0], x[2]), (x[1], None)], shift), leaves
        )


@pytest.mark.parametrize(("points_batch", "shift_batch"), [(1, 1), (3, 1), (3, 3), (1, 3)])
def test_squared_norm_with_shift(monkeypatch, points_batch, shift_batch):
    """``_SquaredNorm(Y, shift)`` = ``|Y - shift|^2``, in chunks of 3 atoms, with gradcheck."""
    from tsw.core import _gradients
    from tsw.euclidean._lines import _SquaredNorm

    monkeypatch.setattr(_gradients, "_chunks", lambda m, d: range(0, m, 3))
    g = torch.Generator().manual_seed(points_batch * 10 + shift_batch)
    Y = torch.randn(points_batch, 8, 5, generator=g, dtype=F64, requires_grad=True)
    shift = 20.0 + torch.randn(shift_batch, 1, 5, generator=g, dtype=F64)
    got = _SquaredNorm.apply(Y, shift)
    torch.testing.assert_close(got, ((Y - shift) ** 2).sum(-1), rtol=1e-13, atol=1e-10)
    assert torch.autograd.gradcheck(lambda y: _SquaredNorm.apply(y, shift), (Y,))


def test_front_end_holds_no_translated_copy(monkeypatch):
    """The front end translates a chunk at a time: no (n, d) translated copy is made.

    Every subtraction of the centre from the points (``translated``) covers at most one
    chunk of atoms, and the values and gradients equal those on points translated by
    hand beforehand (to rounding: translation invariance with explicit trees).
    """
    from tsw.core import _gradients

    sizes = []
    original = _gradients.translated

    def spy(Y, shift, i, j):
        part = original(Y, shift, i, j)
        sizes.append(part.shape[-2])
        return part

    monkeypatch.setattr(_gradients, "translated", spy)
    monkeypatch.setattr("tsw.euclidean._lines.translated", spy)
    # the real chunks: 2^20 elements, at least 1024 atoms
    assert _gradients._chunks(5000, 128).step == 8192
    assert _gradients._chunks(5000, 3072).step == 1024
    monkeypatch.setattr(_gradients, "_chunks", lambda m, d: range(0, m, 64))
    g = torch.Generator().manual_seed(0)
    X = torch.randn(300, 6, generator=g, dtype=F64) + 50.0
    Y = torch.randn(250, 6, generator=g, dtype=F64) + 50.5
    trees = tsw.sample_concurrent_lines(
        6, n_trees=4, n_lines=3, center=torch.full((6,), 50.0, dtype=F64), seed=0, dtype=F64
    )
    Xs = X.clone().requires_grad_(True)
    value = tsw.db_tsw(Xs, Y, trees=trees)
    value.backward()
    assert sizes
    assert max(sizes) == 64
    shift = torch.full((6,), 50.0, dtype=F64)
    moved = tsw.ConcurrentLines(trees.roots - shift, trees.directions)
    X0 = (X - shift).requires_grad_(True)
    sizes.clear()
    ref = tsw.db_tsw(X0, Y - shift, trees=moved)
    ref.backward()
    torch.testing.assert_close(value, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(Xs.grad, X0.grad, rtol=1e-10, atol=1e-12)


def test_centered_moves_points_and_trees_together():
    """``centered`` translates points and trees by the mean root; coordinates do not move.

    Independent reference: ``<z - x_tau, theta>`` and ``|z - c|^2`` written out on the
    untranslated points, for concurrent and chained trees, shared and batched.
    """
    from tsw.core._validation import check_measures
    from tsw.euclidean._lines import centered, project

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
        moved_measures, moved = centered(measures, trees)
        roots = trees.roots if trees.roots.ndim == 3 else trees.roots[None]
        c = roots.mean(dim=-2, keepdim=True)  # (B|1, 1, d)
        # translated on the fly: the supports stay as given, the centre travels as shift
        assert moved_measures.X_s is measures.X_s
        assert moved_measures.X_t is measures.X_t
        assert moved_measures.shift is not None
        assert not moved_measures.shift.requires_grad
        torch.testing.assert_close(moved_measures.shift, c, rtol=0, atol=1e-12)
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


@pytest.mark.parametrize("d", [2, 5])
@pytest.mark.parametrize("chunk_size", [None, 1])
@pytest.mark.parametrize("method", ["db_tsw", "tsw_sl", "tsw_sl_chain", "circular_tsw"])
def test_gradcheck_in_the_trees_with_translation_on_the_fly(method, chunk_size, d):
    """Finite differences w.r.t. the points, the roots (sources) and the directions.

    The front end translates the points by the trees' detached mean root on the fly,
    in every product (:func:`tsw.euclidean._lines.centered`); learnable trees then take
    the translated rows' gradient (``Products``' gradient of the rows), in one block and
    in one-tree blocks (checkpointed: the trees require grad). Data sit away from the
    origin (offset 3), so a translation left out of a gradient would show.
    """
    g = torch.Generator().manual_seed(d)
    X = torch.randn(7, d, generator=g, dtype=F64) + 3.0
    Y = torch.randn(6, d, generator=g, dtype=F64) + 3.5
    chain = method == "tsw_sl_chain"
    base = (
        torch.randn(3, 2, d, generator=g, dtype=F64)
        if chain
        else torch.randn(3, d, generator=g, dtype=F64)
    )
    base = (base + 3.0).requires_grad_(True)
    dirs = torch.randn(3, 2, d, generator=g, dtype=F64).requires_grad_(True)

    def f(x, r, u):
        u = u / u.norm(dim=-1, keepdim=True)
        if chain:
            trees = tsw.ChainLines(r, u, validate=False)
            return tsw.tsw_sl(x, Y, trees=trees, chunk_size=chunk_size)
        trees = tsw.ConcurrentLines(r, u, validate=False)
        if method == "circular_tsw":
            return tsw.circular_tsw(x, Y, radius=0.3, trees=trees, chunk_size=chunk_size)
        return getattr(tsw, method)(x, Y, trees=trees, chunk_size=chunk_size)

    assert torch.autograd.gradcheck(f, (X.requires_grad_(True), base, dirs))
