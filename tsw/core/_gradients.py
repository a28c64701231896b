"""Gradients that an op adds straight into the driver's accumulator.

When the driver evaluates the slices in blocks under grad mode
(``tsw.core._driver._BlockCosts``), each block's gradient with respect to the supports
is formed during the forward pass and summed over the blocks. Summed as
``total[i0:i1] += g``, every block writes a fresh (n, d) gradient and reads it back:
at N = 1e6, d = 128 (one thread, float32) the projections' backward product took
137 ms and the addition 125 ms, where ``total.addmm_(g.T, rows)`` took 115 ms.

So the driver marks each block's leaf support with :func:`route_into` (the view of the
accumulator that the block's gradient belongs to), and an op whose gradient with respect
to that exact tensor is a product (``tsw.euclidean._lines._Products``) asks
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

__all__ = ["route_into", "routed"]

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
