"""Gradients that an op adds straight into the driver's accumulator.

When the driver evaluates the slices in blocks under grad mode
(``tsw.core._blocks._BlockCosts``), each block's gradient with respect to the supports
is formed during the forward pass and summed over the blocks. Summed as
``total[i0:i1] += g``, every block writes a fresh (n, d) gradient and reads it back:
at N = 1e6, d = 128 (one thread, float32) the projections' backward product took
137 ms and the addition 125 ms, where ``total.addmm_(g.T, rows)`` took 115 ms.

So the driver marks each block's leaf support with :func:`route_into` (the view of the
accumulator that the block's gradient belongs to), and an op whose gradient with respect
to that exact tensor it can add in place (:class:`Products`, the projections of the
Euclidean tree distances and of SW; the squared norms of the front end,
``tsw.euclidean._lines._SquaredNorm``, whose leaves mark the whole accumulators) asks
:func:`routed` in its forward pass and, in its backward pass, adds its gradient into the
view and returns ``None`` for it. Every other op's gradient still reaches the driver
through autograd and is added as before, so an op that ignores the mark stays correct.

The mark is an attribute of the one tensor object the driver made: a view, a
translation or any other tensor computed from the leaf carries no mark, so only an op
that reads the leaf itself routes its gradient. Nothing is routed under
``torch.compile`` (the driver does not mark leaves there either).
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor

from tsw.core._safe import broadcast_shape

__all__ = [
    "Products",
    "grouped_products",
    "products",
    "route_into",
    "routed",
    "spans",
    "translated",
    "unbroadcast",
]

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
    """``rows_g @ (Y - shift)^T - bias_g`` for groups of rows and supports, one output a group.

    ``Products.apply(shift, G, rows_1..rows_G, bias_1..bias_G, Y_1..Y_S)``: ``rows_g``
    (B|1, R_g, d), ``bias_g`` (B|1, R_g) or None, the supports ``Y_i`` (B|1, m_i, d) and
    ``shift`` (B|1, 1, d) or None (detached: it gets no gradient). Returns ``G`` tensors
    (B, R_g, n), ``n = sum m_i``: the supports side by side in the columns, each written
    in place by its own product, so that no concatenation is formed forward (nor, for
    the groups, backward: a group per consumer, e.g. the coordinates on the lines and
    the cross-product rows of :func:`tsw.euclidean._lines.offsets`, each contiguous).
    The bias (a per-row offset such as ``<x_tau, theta_l>``) is subtracted from each
    chunk of columns as it is written.

    Autograd's own backward of this product gives the gradient of ``Y`` as a transposed
    (d, m) matrix, whose strided accumulation with the points' other gradients cost
    more than the matmul itself at d = 3072. Here it is ``g^T @ rows``, contiguous,
    summed over the rows' batch when the points are one item's (below
    ``NARROW_MAX_DIM`` on the CPU, the transposed product ``(rows^T g)^T``,
    :func:`_points_gradient`). A group whose output gets no gradient costs nothing
    backward.

    With a ``shift`` (the translation of :func:`tsw.euclidean._lines.centered`), the
    translated points are formed a chunk of atoms at a time (:func:`translated`) and
    multiplied into the product's columns, so that no translated (B, m, d) copy of the
    points exists: at N = 6.5e6, d = 128 the two supports' copies held 6.2 GiB. The
    gradient of ``Y`` does not involve the shift; that of ``rows`` reads the translated
    chunks again.

    When ``Y`` is a block's support marked by the driver (:func:`route_into`), the
    gradient of ``Y`` is added into the driver's accumulator (``addmm_``, ``baddbmm_``
    for batches; :func:`_add_points_gradient`) and not returned: no fresh (m, d)
    gradient is written and read back (below ``NARROW_MAX_DIM``, only a small one).
    """

    @staticmethod
    def forward(ctx, shift: Tensor | None, groups: int, *tensors: Tensor | None):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        rows = cast("list[Tensor]", list(tensors[:groups]))
        biases, supports = tensors[groups : 2 * groups], cast("list[Tensor]", tensors[2 * groups :])
        ctx.save_for_backward(shift, *tensors)
        ctx.groups = groups
        ctx.set_materialize_grads(False)
        batches = [t.shape[:1] for t in (*rows, *biases, *supports, shift) if t is not None]
        B = broadcast_shape(*batches)[0]
        # batched rows for one item's points would need their sum: returned instead
        intos = [routed(Y) for Y in supports]
        ctx.intos = [
            into if into is not None and all(r.shape[0] in (1, Y.shape[0]) for r in rows) else None
            for into, Y in zip(intos, supports, strict=True)
        ]
        n = sum(Y.shape[1] for Y in supports)
        if torch.compiler.is_compiling():  # traced: no out= into column slices
            return tuple(
                _traced_products(r, bias, supports, shift, B)
                for r, bias in zip(rows, biases, strict=True)
            )
        outs = [r.new_empty(B, r.shape[1], n) for r in rows]
        start = 0
        for Y in supports:
            m, d = Y.shape[1], Y.shape[2]
            for i, j in spans(m, d, shift):
                part = translated(Y, shift, i, j)
                cols = slice(start + i, start + j)
                for r, bias, out in zip(rows, biases, outs, strict=True):
                    if B == 1:  # into the columns of the output (BLAS takes its row stride)
                        block = torch.mm(r[0], part[0].T, out=out[0, :, cols]).unsqueeze(0)
                    else:
                        block = out[:, :, cols]
                        block.copy_(torch.matmul(r, part.transpose(-1, -2)))
                    if bias is not None:
                        block.sub_(bias.unsqueeze(-1))
            start += m
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads: Tensor | None):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        shift, *tensors = ctx.saved_tensors
        G = ctx.groups
        rows, biases, supports = tensors[:G], tensors[G : 2 * G], tensors[2 * G :]
        needs = ctx.needs_input_grad[2:]
        used = [(g, r) for g, r in zip(grads, rows, strict=True) if g is not None]
        grad_supports: list[Tensor | None] = []
        start = 0
        for index, (Y, into) in enumerate(zip(supports, ctx.intos, strict=True)):
            cols = slice(start, start + Y.shape[1])
            start += Y.shape[1]
            grad_Y: Tensor | None = None
            if into is not None:
                for g, r in used:
                    _add_points_gradient(into, g[..., cols], r)
            elif needs[2 * G + index] and used:
                # one buffer that owns its storage (not a view of a product): every
                # group adds into it, and autograd adds the points' other gradients
                # into it in place (the squared norms' in centre)
                total = Y.new_zeros(Y.shape)
                for g, r in used:
                    _add_points_gradient(total, g[..., cols], r)
                grad_Y = total
            grad_supports.append(grad_Y)
        grad_rows: list[Tensor | None] = [None] * G
        grad_biases: list[Tensor | None] = [None] * G
        for index, (grad, r, bias) in enumerate(zip(grads, rows, biases, strict=True)):
            if grad is None:
                continue
            if needs[index]:
                grad_rows[index] = unbroadcast(_rows_gradient(grad, supports, shift), r)
            if bias is not None and needs[G + index]:
                grad_biases[index] = unbroadcast(-grad.sum(-1), bias)
        return None, None, *grad_rows, *grad_biases, *grad_supports


def spans(m: int, d: int, shift: Tensor | None) -> list[tuple[int, int]]:
    """Return the spans ``[i, j)`` of atoms read at a time (:func:`_chunks`; one unshifted)."""
    if shift is None:
        return [(0, m)] if m else []
    step = _chunks(m, d).step
    return [(i, min(i + step, m)) for i in _chunks(m, d)]


def _traced_products(
    rows: Tensor, bias: Tensor | None, supports: list[Tensor], shift: Tensor | None, B: int
) -> Tensor:
    """One group of :class:`Products`' forward as concatenated blocks (under ``torch.compile``)."""
    blocks = [
        torch.matmul(rows, translated(Y, shift, i, j).transpose(-1, -2))
        for Y in supports
        for i, j in spans(Y.shape[1], Y.shape[2], shift)
    ]
    out = torch.cat(blocks, dim=-1) if blocks else rows.new_zeros(B, rows.shape[1], 0)
    if bias is not None:
        out = out - bias.unsqueeze(-1)
    return out.expand(B, -1, -1).contiguous()


def unbroadcast(grad: Tensor, like: Tensor) -> Tensor:
    """Sum ``grad`` over the batch axis that ``like`` (batch 1) was broadcast along."""
    return grad.sum(0, keepdim=True) if like.shape[0] == 1 and grad.shape[0] != 1 else grad


def _rows_gradient(g: Tensor, supports: list[Tensor], shift: Tensor | None) -> Tensor:
    """``g @ (Y - shift)`` over the supports' columns of ``g`` (B, R, n): shape (B, R, d)."""
    total: Tensor | None = None
    start = 0
    for Y in supports:
        for i, j in spans(Y.shape[1], Y.shape[2], shift):
            part = torch.matmul(g[..., start + i : start + j], translated(Y, shift, i, j))
            total = part if total is None else total.add_(part)
        start += Y.shape[1]
    if total is None:  # no atoms
        return g.new_zeros(*g.shape[:-1], supports[0].shape[-1])
    return total


def _add_points_gradient(into: Tensor, g: Tensor, rows: Tensor) -> None:
    """``into += g^T @ rows`` (the driver's accumulator (B|1, m, d)), summed over ``g``'s batch.

    Above ``NARROW_MAX_DIM`` with matching batches, the product is accumulated in place
    (``addmm_`` / ``baddbmm_``); otherwise :func:`_points_gradient`'s (small) result is added.
    """
    if _narrow(rows) or into.shape[0] != g.shape[0]:  # or one item's points, batched by the shift
        into.add_(unbroadcast(_points_gradient(g, rows), into))
    elif into.shape[0] == 1:
        into[0].addmm_(g[0].T, rows[0])
    else:
        into.baddbmm_(g.transpose(-1, -2), rows.expand(into.shape[0], -1, -1))


#: below this dimension the CPU gradient of the points is formed as ``(rows^T g)^T``
#: (a (d, m) product, then a small transpose); ``g^T rows`` ran 5-11x slower there
#: (MKL, one thread, R = 1250 rows: 6.8 against 0.8 ms at m = 2000, d = 2; 155 against 14 ms
#: at m = 2e4) and 1.1-1.5x faster from d = 16 up
NARROW_MAX_DIM = 15


def _narrow(Y: Tensor) -> bool:
    """Whether the points' gradient takes the transposed product (CPU, ``d <= NARROW_MAX_DIM``)."""
    return Y.device.type == "cpu" and Y.shape[-1] <= NARROW_MAX_DIM


def _points_gradient(g: Tensor, rows: Tensor) -> Tensor:
    """``g^T @ rows``, contiguous (B, m, d), for ``g`` (B, R, m) and ``rows`` (B|1, R, d)."""
    if _narrow(rows):
        return torch.matmul(rows.transpose(-1, -2), g).transpose(-1, -2).contiguous()
    if rows.shape[0] == 1 and g.shape[0] == 1:
        return torch.mm(g[0].T, rows[0]).unsqueeze(0)
    return torch.matmul(g.transpose(-1, -2), rows)


def products(
    supports: tuple[Tensor, ...],
    rows: Tensor,
    shift: Tensor | None = None,
    bias: Tensor | None = None,
) -> Tensor:
    """``<z - shift, row> - bias`` for every row and every point of every support, (B, R, n).

    ``supports`` are (B|1, n_i, d) point sets, ``rows`` (B|1, R, d), ``shift``
    (B|1, 1, d) or None, ``bias`` (B|1, R) or None; ``n = sum n_i``. One
    :class:`Products` (:func:`grouped_products` with one group): a support that needs
    no gradient (a fixed target) costs no backward matmul, identical points of the two
    measures get bit-identical coordinates (so ``d(mu, mu) = 0`` exactly), no (B, n, d)
    tensor is concatenated or translated, and in the driver's blocks each support's
    gradient goes into its sums.
    """
    return grouped_products(supports, [(rows, bias)], shift)[0]


def grouped_products(
    supports: tuple[Tensor, ...],
    groups: list[tuple[Tensor, Tensor | None]],
    shift: Tensor | None = None,
) -> tuple[Tensor, ...]:
    """:func:`products` for several groups ``(rows_g, bias_g)`` of rows: one tensor a group.

    Each output (B, R_g, n) is contiguous and gets its own gradient, so that consumers
    of different groups need no split of one product (whose backward concatenates the
    gradients) and a group without a gradient costs no backward product.
    """
    rows = [r for r, _ in groups]
    biases = [b for _, b in groups]
    return Products.apply(shift, len(groups), *rows, *biases, *supports)
