"""Gradients that an op adds straight into the driver's accumulator.

When the driver evaluates the slices in blocks under grad mode
(``tsw.core._driver._BlockCosts``), each block's gradient with respect to the supports
is formed during the forward pass and summed over the blocks. Summed as
``total[i0:i1] += g``, every block writes a fresh (n, d) gradient and reads it back:
at N = 1e6, d = 128 (one thread, float32) the projections' backward product took
137 ms and the addition 125 ms, where ``total.addmm_(g.T, rows)`` took 115 ms.

So the driver marks each block's leaf support with :func:`route_into` (the view of the
accumulator that the block's gradient belongs to), and an op whose gradient with respect
to that exact tensor is a product (:class:`Products`, the projections of the
Euclidean tree distances and of SW) asks
:func:`routed` in its forward pass and, in its backward pass, adds its gradient into the
view and returns ``None`` for it. Every other op's gradient still reaches the driver
through autograd and is added as before, so an op that ignores the mark stays correct.

The mark is an attribute of the one tensor object the driver made: a view, a
translation or any other tensor computed from the leaf carries no mark, so only an op
that reads the leaf itself routes its gradient. Nothing is routed under
``torch.compile`` (the driver does not mark leaves there either).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["Products", "products", "route_into", "routed", "translated"]

_ATTRIBUTE = "_tsw_gradient_into"


def route_into(leaf: Tensor, into: Tensor) -> None:
    """Mark ``leaf``: ops that support it add their gradient for ``leaf`` into ``into``.

    ``into`` has ``leaf``'s shape. The caller must read the gradients accumulated in
    ``into`` besides those autograd returns for ``leaf``.
    """
    if into.shape != leaf.shape:  # not reached: the driver passes the leaf's own rows
        raise ValueError(
            f"route_into: into must have the leaf's shape {tuple(leaf.shape)}; "
            f"got {tuple(into.shape)}"
        )
    setattr(leaf, _ATTRIBUTE, into)


def routed(t: Tensor) -> Tensor | None:
    """Return the accumulator view ``t``'s gradient goes into, if ``t`` is a marked leaf."""
    if torch.compiler.is_compiling() or not t.requires_grad:
        return None
    return getattr(t, _ATTRIBUTE, None)


#: elements of (atoms x d) translated at a time by :func:`translated` (a few MiB, so
#: that a chunk is still in cache when the product reads it)
TRANSLATE_CHUNK_ELEMENTS = 2**20


def _chunks(m: int, d: int) -> range:
    """Return the starts of the chunks of ``m`` atoms in ``d`` dimensions (:func:`translated`)."""
    return range(0, m, max(1024, TRANSLATE_CHUNK_ELEMENTS // max(d, 1)))


def translated(Y: Tensor, shift: Tensor | None, i: int, j: int) -> Tensor:
    """Atoms ``i`` to ``j - 1`` of ``Y`` (B|1, m, d), minus ``shift`` (B|1, 1, d) if given."""
    part = Y[:, i:j]
    return part if shift is None else part - shift


class Products(torch.autograd.Function):
    """``rows @ (Y - shift)^T`` of shape (B, R, m), with the gradient of ``Y`` contiguous.

    ``rows`` (B|1, R, d), ``Y`` (B|1, m, d), ``shift`` (B|1, 1, d) or None (detached: it
    gets no gradient). Autograd's own backward of this product
    gives the gradient of ``Y`` as a transposed (d, m) matrix, whose strided
    accumulation with the points' other gradients cost more than the matmul itself at
    d = 3072. Here it is ``g^T @ rows``, contiguous, summed over the rows' batch when
    the points are one item's.

    With a ``shift`` (the translation of :func:`tsw.euclidean._lines.centre`), the
    translated points are formed a chunk of atoms at a time (:func:`translated`) and
    multiplied into the product's columns, so that no translated (B, m, d) copy of the
    points exists: at N = 6.5e6, d = 128 the two supports' copies held 6.2 GiB. The
    gradient of ``Y`` does not involve the shift; that of ``rows`` reads the translated
    chunks again.

    When ``Y`` is a block's support marked by the driver
    (:func:`route_into`), the gradient of ``Y`` is added into the
    driver's accumulator with one ``addmm_`` (``baddbmm_`` for batches) and not
    returned: no fresh (m, d) gradient is written and read back.
    """

    @staticmethod
    def forward(ctx, rows: Tensor, Y: Tensor, shift: Tensor | None = None) -> Tensor:
        ctx.save_for_backward(rows, Y, shift)
        into = routed(Y)
        # batched rows for one item's points would need their sum: returned instead
        ctx.into = into if into is not None and rows.shape[0] in (1, Y.shape[0]) else None
        if shift is None:
            if rows.shape[0] == 1 and Y.shape[0] == 1:  # a plain 2-D mm
                return torch.mm(rows[0], Y[0].T).unsqueeze(0)
            return torch.matmul(rows, Y.transpose(-1, -2))
        m, d = Y.shape[1], Y.shape[2]
        B = torch.broadcast_shapes(rows.shape[:1], Y.shape[:1], shift.shape[:1])[0]
        out = rows.new_empty(B, rows.shape[1], m)
        step = _chunks(m, d).step
        for i in _chunks(m, d):
            part = translated(Y, shift, i, i + step)
            if B == 1:  # into the columns of the output (BLAS takes its row stride)
                torch.mm(rows[0], part[0].T, out=out[0, :, i : i + step])
            else:
                out[:, :, i : i + step] = torch.matmul(rows, part.transpose(-1, -2))
        return out

    @staticmethod
    def backward(ctx, g: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        rows, Y, shift = ctx.saved_tensors
        grad_rows = grad_Y = None
        into = ctx.into
        if into is not None:
            if into.shape[0] == 1 and g.shape[0] == 1:
                into[0].addmm_(g[0].T, rows[0])
            elif into.shape[0] == 1:  # one item's points, batched by the shift
                into[0].add_(torch.matmul(g.transpose(-1, -2), rows).sum(0))
            else:
                into.baddbmm_(g.transpose(-1, -2), rows.expand(into.shape[0], -1, -1))
        elif ctx.needs_input_grad[1]:
            if rows.shape[0] == 1 and g.shape[0] == 1:
                grad_Y = torch.mm(g[0].T, rows[0]).unsqueeze(0)
            else:
                grad_Y = torch.matmul(g.transpose(-1, -2), rows)
                if Y.shape[0] == 1 and grad_Y.shape[0] != 1:  # batched rows, one item
                    grad_Y = grad_Y.sum(0, keepdim=True)
        if ctx.needs_input_grad[0]:
            if shift is None:
                grad_rows = torch.matmul(g, Y)
            else:
                m, d = Y.shape[1], Y.shape[2]
                step = _chunks(m, d).step
                grad_rows = torch.matmul(g[..., :0], Y[:, :0])  # zeros, batch broadcast
                for i in _chunks(m, d):
                    part = translated(Y, shift, i, i + step)
                    grad_rows = grad_rows.add_(torch.matmul(g[..., i : i + step], part))
            if rows.shape[0] == 1 and grad_rows.shape[0] != 1:
                grad_rows = grad_rows.sum(0, keepdim=True)
        return grad_rows, grad_Y, None


def products(supports: tuple[Tensor, ...], rows: Tensor, shift: Tensor | None = None) -> Tensor:
    """``<z - shift, row>`` for every row and every point of every support, shape (B, R, n).

    ``supports`` are (B|1, n_i, d) point sets, ``rows`` (B|1, R, d), ``shift``
    (B|1, 1, d) or None; ``n = sum n_i``.
    One :class:`Products` per support: a support that needs no gradient (a fixed
    target) costs no backward matmul, identical points of the two measures get
    bit-identical coordinates (so ``d(mu, mu) = 0`` exactly), no (B, n, d) tensor is
    concatenated or translated, and in the driver's blocks each support's gradient goes
    into its sums.
    """
    return torch.cat([Products.apply(rows, Y, shift) for Y in supports], dim=-1)
