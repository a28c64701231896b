"""``tsw.core._gradients``: products of points and directions with a written-out backward.

``Products`` (one or several groups of rows, a shift subtracted on the fly, in chunks of
atoms) against autograd through the plain matmuls, gradcheck, and the marks that route
a support's gradient into the driver's sums.
"""

from __future__ import annotations

import pytest
import torch

import tsw.core._gradients as gradients

F64 = torch.float64


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
    gradcheck (at d = 3, where it is cheap).
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
    if used == "both" and d == 3:  # finite differences at d = 3; above, the comparison
        # with autograd's graph of the matmuls covers the other branch to rounding
        assert torch.autograd.gradcheck(
            lambda *x: grouped_products(x[3:], [(x[0], x[2]), (x[1], None)], shift), leaves
        )


def test_gradient_marks_stay_on_their_tensor():
    # a mark belongs to the one tensor the driver made: views, translations and
    # detached copies carry none, nor does a tensor that needs no gradient
    leaf = torch.zeros(4, 3, requires_grad=True)
    into = torch.zeros(4, 3)
    gradients.route_into(leaf, into)
    assert gradients.routed(leaf) is into
    assert gradients.routed(leaf[1:]) is None
    assert gradients.routed(leaf - 1) is None
    assert gradients.routed(leaf.detach()) is None
    with pytest.raises(ValueError, match=r"into must have the leaf's shape \(4, 3\); got \(3, 3\)"):
        gradients.route_into(leaf, torch.zeros(3, 3))
