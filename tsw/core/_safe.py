"""Elementwise primitives with finite (sub)gradients at their singular points.

Shared by every geometry of :mod:`tsw`: the ``1/p`` root of a cost that can be 0, square
roots of squared distances that can be 0 or slightly negative after rounding, and the
distance to a line from ``|z|^2`` and ``<z, theta>``.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["LineDistance", "SafeSqrt", "broadcast_shape", "recordable", "safe_root"]


def broadcast_shape(*shapes: tuple[int, ...]) -> torch.Size:
    """Return the broadcast of ``shapes`` (``torch.broadcast_shapes`` in plain Python).

    ``torch.broadcast_shapes`` imports ``torch._refs`` and sympy at its first call in a
    process (0.4-1.4 s), which would fall on the first distance call. Sizes are read as
    ints (under ``torch.jit.trace`` they are 0-d tensors, equal ones hashing apart).
    """
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(int(d) for d in s) for s in shapes]
    out = []
    for dims in zip(*padded, strict=True):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return torch.Size(out)


def safe_root(x: Tensor, p: float) -> Tensor:
    """``x ** (1/p)`` for ``x >= 0`` with a zero (sub)gradient at ``x = 0``; NaN stays NaN."""
    if p == 1.0:
        return x
    zero = x == 0
    return torch.where(zero, torch.zeros_like(x), torch.where(zero, 1, x).pow(1.0 / p))


class SafeSqrt(torch.autograd.Function):
    """``sqrt(max(q, 0))`` with a zero (sub)gradient where the result is 0."""

    @staticmethod
    def forward(ctx, q: Tensor) -> Tensor:
        out = q.clamp_min(0).sqrt_()
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        (out,) = ctx.saved_tensors
        tiny = torch.full((), torch.finfo(out.dtype).tiny, dtype=out.dtype, device=out.device)
        if torch.is_grad_enabled():  # create_graph: out of place, so that autograd records it
            return 0.5 * grad * out / (out * out + tiny)
        r = torch.addcmul(tiny, out, out)
        return torch.div(out, r, out=r).mul_(grad).mul_(0.5)


def line_distance_values(sq: Tensor, t: Tensor) -> Tensor:
    """``sqrt(max(sq - t^2, 0))``, untracked: :class:`LineDistance`'s forward."""
    return torch.addcmul(sq, t, t, value=-1).clamp_min_(0).sqrt_()


class LineDistance(torch.autograd.Function):
    """``sqrt(max(sq - t^2, 0))``: distance to a line from ``|z - x|^2`` and ``t``.

    The backward pass divides by the distance only where it is positive and gives a
    zero (sub)gradient on the line itself, without any large boolean temporaries.
    """

    @staticmethod
    def forward(ctx, sq: Tensor, t: Tensor) -> Tensor:
        dist = line_distance_values(sq, t)
        ctx.save_for_backward(t, dist)
        return dist

    @staticmethod
    def backward(ctx, grad: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        t, dist = ctx.saved_tensors
        # grad / dist, and 0 where dist == 0: dist / (dist^2 + tiny) in two passes
        tiny = torch.full((), torch.finfo(dist.dtype).tiny, dtype=dist.dtype, device=dist.device)
        graph = torch.is_grad_enabled()  # create_graph: out of place, recorded by autograd
        if graph:
            r = dist / (dist * dist + tiny) * grad
        else:
            r = torch.addcmul(tiny, dist, dist)
            r = torch.div(dist, r, out=r).mul_(grad)
        grad_sq = grad_t = None
        if ctx.needs_input_grad[0]:
            grad_sq = 0.5 * r.sum(-2, keepdim=True) if r.shape[-2] > 1 else 0.5 * r
        if ctx.needs_input_grad[1]:
            grad_t = -(r * t) if graph else r.mul_(t).neg_()
        return grad_sq, grad_t


def recordable(t: Tensor) -> Tensor:
    """Detach ``t``, copying an inference tensor so that autograd can record it."""
    return t.detach().clone() if t.is_inference() else t.detach()
