r"""Monotone Riemannian ascent on unit spheres: the maximisers of the Max distances.

:func:`tsw.max_sw` moves one direction per item and :func:`tsw.max_tsw_sl` the ``k``
directions of every tree; both take the steps of :func:`sphere_ascent` on measures
read through :func:`detached`. Every group of directions (one direction, or one tree's
lines) ascends on its own: each direction takes a step of angle :math:`\eta` along the
great circle of its tangent gradient (the Riemannian gradient of the group's cost on
the sphere), and the group keeps the step only if its cost increases; :math:`\eta`
starts at ``lr``, grows by 1.5 (up to 1 radian) after a kept step and halves after a
refused one. The ascent is therefore monotone and free of the data's scale: the
gradient's direction is formed from the gradient divided by its largest entry, and the
callers divide the masses by their total (costs of degree ``p`` in the masses, as the
trees' at ``p > 1``, would otherwise overflow or underflow with them).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from tsw.core._ranges import power_of_two
from tsw.core._safe import recordable
from tsw.core._validation import Measures

__all__ = ["detached", "sphere_ascent"]


def detached(measures: Measures) -> Measures:
    """Return the measures detached, their masses divided by their total (a power of two).

    Clones of inference tensors, which autograd cannot record. The ascent's costs are
    then those of masses of total about 1 (the same ascent: any positive scale of a
    cost gives the same steps), whose p-th powers stay in the dtype's range for totals
    of 1e-30 or 1e30 in float32.
    """
    scale = power_of_two(measures.a.detach().sum(-1, keepdim=True))  # (B, 1)
    return Measures(
        recordable(measures.X_s),
        recordable(measures.X_t),
        recordable(measures.a) / scale,
        recordable(measures.b) / scale,
        measures.batched,
    )


def sphere_ascent(
    cost: Callable[[Tensor], Tensor],
    theta: Tensor,
    best: Tensor,
    *,
    n_iter: int,
    lr: float,
    group_dims: int = 1,
) -> Tensor:
    """Return unit directions ``theta`` (..., d) moved uphill for ``cost``, detached.

    ``cost(theta)`` gives one value per group of directions: ``theta.shape[:-group_dims]``
    (``group_dims = 1``: every direction alone; 2: the lines of a tree together).
    ``best`` holds the values at the start. Autograd is enabled for the tangent
    gradients, whatever the mode of the caller. The steps depend on the gradient's
    direction only, and the acceptance on the order of the costs: any positive scale
    of ``cost`` gives the same ascent.
    """
    eta = torch.full_like(best, lr)
    grow = (...,) + (None,) * group_dims  # a value per group, broadcast to its directions
    for _ in range(n_iter):
        with torch.enable_grad():
            th = theta.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(cost(th).sum(), th)
        with torch.no_grad():
            # the gradient divided by its largest entry first: its norm neither overflows
            # (costs of 1e30 in float32: squares of 1e60) nor underflows (1e-30), so the
            # step's direction does not depend on the data's or the masses' scale
            top = grad.abs().amax(-1, keepdim=True)
            grad = grad / torch.where(top > 0, top, torch.ones_like(top))
            tangent = grad - (grad * theta).sum(-1, keepdim=True) * theta
            norm = torch.linalg.vector_norm(tangent, dim=-1, keepdim=True)
            step = tangent / norm.clamp_min(torch.finfo(norm.dtype).tiny)
            e = eta[grow]
            cand = torch.cos(e) * theta + torch.sin(e) * step  # geodesic step
            # back onto the sphere: near the maximum the tangent is a difference of
            # nearly equal vectors, and its rounding along theta would lengthen the
            # direction, a step the ascent would accept (the costs grow with the length)
            cand = cand / torch.linalg.vector_norm(cand, dim=-1, keepdim=True)
            value = cost(cand)
            # a NaN (non-finite data under validate=False, e.g. at a point of zero mass,
            # whose cost is finite but whose gradient is not) is taken, not refused: the
            # result is then NaN rather than the value at the start
            better = (value > best) | value.isnan()
            theta = torch.where(better[grow], cand, theta)
            best = torch.where(better, value, best)
            eta = torch.where(better, (1.5 * eta).clamp_max(1.0), 0.5 * eta)
    return theta.detach()
