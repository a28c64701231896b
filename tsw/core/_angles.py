r"""Angles of points of S^2 in the frames of spherical trees (STSW), with a compiled backward.

For a tree with root :math:`x` and an orthonormal frame ``(x, e1, e2)``, a point
:math:`z` has the geodesic coordinate :math:`t = \angle(x, z)` and the polar angle of its
tangent direction in ``(e1, e2)``. :class:`S2Angles` computes both from one product of
the frames and the points, with a written-out backward: one compiled loop per tree on the
CPU (:func:`tsw.core._kernels.s2_angles_backward`), the same formulas in torch operators
elsewhere (measured: STSW's forward + backward took 1.2-1.5x the time with the torch
backward, N = 500-1e4, 200 trees x 5 rays, float32, one thread).
"""

from __future__ import annotations

import torch
from torch import Tensor

from tsw.core import _kernels
from tsw.core._pinning import current, pinned
from tsw.core._safe import SafeSqrt
from tsw.core._twice import building_graph, graph_backward

__all__ = ["S2Angles", "inv_norm"]


class S2Angles(torch.autograd.Function):
    r"""``t``, the tangent polar angles and ``sin t`` (B, T, n) of points on S^2.

    ``Z`` (B, n, 3) the points, ``frames`` (B|1, T, 3, 3) the trees' orthonormal frames
    ``(x, e1, e2)``. With ``A = frames Z^T`` (one (3T, 3) x (3, n) product per item) and
    :math:`\rho = |(A_1, A_2)|`: :math:`t = \mathrm{atan2}(\rho, A_0)`,
    :math:`\theta = \mathrm{atan2}(A_2, A_1)` and :math:`\sin t = \rho / |z|`.

    The backward pass is written out: with :math:`r^2 = A_0^2 + \rho^2`,
    :math:`\partial t / \partial A_0 = -\rho / r^2`,
    :math:`\partial t / \partial \rho = A_0 / r^2`, and through
    :math:`(\rho, \theta)` the gradient ``(A_1, A_2) / rho`` and
    ``(-A_2, A_1) / rho^2`` of the polar map, with ``1 / rho`` taken as 0 where
    ``rho = 0`` (a point at the root or its antipode: a zero subgradient, as there). One
    compiled loop per tree on the CPU (:func:`tsw.core._kernels.s2_angles_backward`), the
    same formulas in torch operators elsewhere; autograd's graph of the same operations
    made about 25 passes over (B, T, n).
    """

    @staticmethod
    def forward(ctx, Z: Tensor, frames: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        B, n, _ = Z.shape
        T = frames.shape[-3]
        A = torch.matmul(frames.reshape(frames.shape[0], 3 * T, 3), Z.transpose(-1, -2))
        A = A.reshape(B, T, 3, n)
        rho = torch.hypot(A[:, :, 1], A[:, :, 2])
        polar = torch.atan2(A[:, :, 2], A[:, :, 1])
        t = torch.atan2(rho, A[:, :, 0])
        inv = inv_norm(Z)  # (B, 1, n)
        ctx.save_for_backward(Z, frames, A, rho, inv)
        with pinned(current()) as ctx.kernels:  # the backward's choice of the kernels, made now
            _kernels.usable(A, rho, inv)
        return t, polar, rho * inv

    @staticmethod
    def backward(ctx, gt: Tensor, gpolar: Tensor, gscale: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        Z, frames, A, rho, inv = ctx.saved_tensors
        if building_graph():  # create_graph: the same gradient, with its own graph
            needs = ctx.needs_input_grad[:2]
            return tuple(graph_backward(angles_graph, (Z, frames), needs, (gt, gpolar, gscale)))
        B, T, _, n = A.shape
        with pinned(ctx.kernels):
            compiled = _kernels.usable(A, rho, inv, gt, gpolar, gscale)
        if compiled:
            gA, gq = _kernels.s2_angles_backward(A, rho, inv, gt, gpolar, gscale)
        else:
            gA, gq = _s2_angles_backward(A, rho, inv, gt, gpolar, gscale)
        grad_Z = grad_frames = None
        F = frames.reshape(frames.shape[0], 3 * T, 3)
        if ctx.needs_input_grad[0]:
            # (B, 3, n) transposed to (B, n, 3): 0.14x the time of the product in that order
            grad_Z = torch.matmul(F.transpose(-1, -2), gA.reshape(B, 3 * T, n)).transpose(-1, -2)
            ginv = gq.sum(1, keepdim=True)  # (B, 1, n): the gradient of 1 / |z|
            grad_Z.sub_(Z * (ginv * inv * inv * inv).transpose(-1, -2))
        if ctx.needs_input_grad[1]:
            grad_frames = torch.matmul(gA.reshape(B, 3 * T, n), Z).reshape(B, T, 3, 3)
            if frames.shape[0] != B:
                grad_frames = grad_frames.sum(0, keepdim=True)
        return grad_Z, grad_frames


def _s2_angles_backward(
    A: Tensor, rho: Tensor, inv: Tensor, gt: Tensor, gpolar: Tensor, gscale: Tensor
) -> tuple[Tensor, Tensor]:
    """:class:`S2Angles`' backward to ``A`` (B, T, 3, n), and ``gscale * rho`` (B, T, n)."""
    a0, a1, a2 = A.unbind(-2)
    tiny = torch.finfo(rho.dtype).tiny
    ir = rho / (rho * rho + tiny)  # 1 / rho, and 0 at rho = 0
    r2 = a0 * a0 + rho * rho
    grho = gt * a0 / r2 + gscale * inv
    h = gpolar * ir * ir
    gA = torch.stack([-gt * rho / r2, grho * a1 * ir - h * a2, grho * a2 * ir + h * a1], dim=-2)
    return gA, gscale * rho


def angles_graph(Z: Tensor, frames: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """:class:`S2Angles` in torch operations, with its zero subgradients at ``rho = 0``."""
    B, n, _ = Z.shape
    T = frames.shape[-3]
    A = torch.matmul(frames.reshape(frames.shape[0], 3 * T, 3), Z.transpose(-1, -2))
    a0, a1, a2 = A.reshape(B, T, 3, n).unbind(-2)
    rho = SafeSqrt.apply(a1 * a1 + a2 * a2)
    pole = rho == 0  # the root or its antipode: no tangent direction
    polar = torch.atan2(torch.where(pole, 0.0, a2), torch.where(pole, 1.0, a1))
    return torch.atan2(rho, a0), polar, rho * inv_norm(Z)


def inv_norm(Z: Tensor) -> Tensor:
    """``1 / |z|`` of shape (B, 1, n)."""
    return torch.linalg.vector_norm(Z, dim=-1).reciprocal().unsqueeze(-2)
