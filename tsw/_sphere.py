r"""Geometry of spherical trees (STSW): geodesic coordinates and tangent angles.

For a spherical tree with root :math:`x` and unit tangent directions :math:`v_1, \dots,
v_k` (:class:`tsw.SphericalTrees`), a point :math:`y` of :math:`\mathbb S^d` has

* the coordinate :math:`t(y) = \angle(x, y) \in [0, \pi]`, shared by all rays;
* the tangent angles :math:`\varphi_i(y) = \angle(u(y), v_i) \in [0, \pi]`, with
  :math:`u(y) \propto y - \langle x, y\rangle x` the direction in which the geodesic from
  :math:`x` to :math:`y` leaves :math:`x`;
* :math:`\beta_i(y) = \sin t(y)\, \varphi_i(y)`, the quantity the STSW split compares
  across rays (spec 5.3; the official code writes :math:`\varphi_i` as
  :math:`\arccos\langle v_i, u(y)\rangle` with the argument clamped to
  :math:`[-1 + 10^{-6}, 1 - 10^{-6}]`).

No arccos and no clamp are used here: every angle is ``atan2`` of the two components of
a vector in a plane, which is exact to rounding (an arccos of a cosine near 1 is not),
and has a finite (sub)gradient at degenerate points. The functions depend on ``y`` only
through ``y / |y|``.

* ``d + 1 = 3`` (:math:`\mathbb S^2`): the coordinates ``(a0, a1, a2)`` of ``y`` in an
  orthonormal frame ``(x, e1, e2)`` of each tree give :math:`t = \mathrm{atan2}(\rho,
  a_0)` with :math:`\rho = |(a_1, a_2)|`, the tangent polar angle :math:`\theta =
  \mathrm{atan2}(a_2, a_1)` and :math:`\varphi_i = |\theta - \theta_i|` wrapped to
  :math:`[0, \pi]`: exact everywhere, one (T, n) ``atan2`` per tree.
* other dimensions: :math:`t = \mathrm{atan2}(\sqrt{|y|^2 - \langle x, y\rangle^2},
  \langle x, y\rangle)` and :math:`\varphi_i = \mathrm{atan2}(q_i, \langle v_i, y\rangle)`
  with :math:`q_i^2 = |y|^2 - \langle x, y\rangle^2 - \langle v_i, y\rangle^2` the squared
  distance from ``y`` to the plane of ray ``i``, without a (T, k, n, d) tensor. These Gram
  identities lose relative accuracy when the quantity under the root is small: within
  about :math:`\sqrt{\epsilon}` of :math:`\pm x` or of the plane of a ray, the angles are
  resolved to about :math:`\sqrt{\epsilon}` (1.5e-8 in float64, 3e-4 in float32);
  elsewhere they are exact to rounding.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tsw._engine import _batched, _LineDistance
from tsw.trees import SphericalTrees

__all__ = ["spherical_project"]


class _Polar(torch.autograd.Function):
    """``(hypot(x, y), atan2(y, x))`` with a zero (sub)gradient at the origin.

    torch's ``hypot`` and ``atan2`` give NaN gradients at ``(0, 0)``; here the gradient
    is ``(x, y) / r`` for the radius and ``(-y, x) / r^2`` for the angle, taken as 0 where
    ``r = 0``. Products ``r * f(angle)`` then have bounded gradients near the origin.
    """

    @staticmethod
    def forward(ctx, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        r = torch.hypot(x, y)
        ctx.save_for_backward(x, y, r)
        ctx.set_materialize_grads(False)
        return r, torch.atan2(y, x)

    @staticmethod
    def backward(ctx, g_r: Tensor | None, g_th: Tensor | None):
        x, y, r = ctx.saved_tensors
        tiny = torch.finfo(r.dtype).tiny
        inv = r / (r * r + tiny)  # 1 / r, and 0 at r = 0
        gx = torch.zeros_like(x) if g_r is None else g_r * x * inv
        gy = torch.zeros_like(y) if g_r is None else g_r * y * inv
        if g_th is not None:
            h = g_th * inv * inv
            gx = gx - h * y
            gy = gy + h * x
        return gx, gy


def _frames(trees: SphericalTrees) -> tuple[Tensor, Tensor]:
    """Orthonormal frames ``(x, e1, e2)`` of the trees on S^2 and the rays' angles.

    Returns ``frames`` (..., T, 3, 3) and ``theta`` (..., T, k), the polar angle of each
    direction in the tangent frame ``(e1, e2)``.
    """
    x, v = trees.roots, trees.directions
    e1 = v[..., 0, :] - (v[..., 0, :] * x).sum(-1, keepdim=True) * x
    e1 = e1 / torch.linalg.vector_norm(e1, dim=-1, keepdim=True)
    e2 = torch.linalg.cross(x, e1, dim=-1)
    frames = torch.stack([x, e1, e2], dim=-2)
    theta = torch.atan2((v * e2.unsqueeze(-2)).sum(-1), (v * e1.unsqueeze(-2)).sum(-1))
    return frames, theta


def spherical_project(
    Z: Tensor, trees: SphericalTrees, *, angles: bool = True
) -> tuple[Tensor, Tensor | None]:
    r"""Geodesic coordinates and :math:`\beta_i = \sin t \cdot \varphi_i` of points.

    Parameters
    ----------
    Z : Tensor of shape (B, n, d+1)
        Points (non-zero; only their directions matter).
    trees : SphericalTrees
        ``T`` trees of ``k`` rays, shared or with batch size ``B``.
    angles : bool, default True
        Also compute ``beta`` (``None`` otherwise).

    Returns
    -------
    t : Tensor of shape (B, T, n)
        :math:`\angle(x_\tau, z) \in [0, \pi]`.
    beta : Tensor of shape (B, T, k, n) or None
        :math:`\sin t \cdot \angle(u(z), v_{\tau i}) \in [0, \pi]`.
    """
    B, n, D = Z.shape
    Zt = Z.transpose(-1, -2)
    if D == 3:
        frames, theta = _frames(trees)
        frames, theta = _batched(frames, 3), _batched(theta, 2)  # (B|1, T, 3, 3), (B|1, T, k)
        T = frames.shape[-3]
        A = torch.matmul(frames.reshape(frames.shape[0], 3 * T, 3), Zt).reshape(B, T, 3, n)
        rho, polar = _Polar.apply(A[..., 1, :], A[..., 2, :])  # (B, T, n)
        t = torch.atan2(rho, A[..., 0, :])
        if not angles:
            return t, None
        # wrapped |polar - theta_i| in [0, pi]: pi - |pi - |difference||
        diff = polar.unsqueeze(-2) - theta.unsqueeze(-1)
        phi = math.pi - (math.pi - diff.abs()).abs()
        beta = (rho * _inv_norm(Z)).unsqueeze(-2) * phi
        return t, beta
    roots = _batched(trees.roots, 2)  # (B|1, T, D)
    c = torch.matmul(roots, Zt)  # (B, T, n)
    sq = (Z * Z).sum(-1).unsqueeze(-2)  # (B, 1, n)
    s = _LineDistance.apply(sq, c)  # distance to the axis: |z - <x, z> x|
    t = torch.atan2(s, c)
    if not angles:
        return t, None
    dirs = _batched(trees.directions, 3)  # (B|1, T, k, D)
    T, k = dirs.shape[-3], dirs.shape[-2]
    w = torch.matmul(dirs.reshape(dirs.shape[0], T * k, D), Zt).reshape(B, T, k, n)
    q = _LineDistance.apply((sq - c * c).unsqueeze(-2), w)  # distance to the ray's plane
    r, phi = _Polar.apply(w, q)  # r = |z - <x, z> x| again, consistent with phi
    beta = r * phi * _inv_norm(Z).unsqueeze(-2)
    return t, beta


def _inv_norm(Z: Tensor) -> Tensor:
    """``1 / |z|`` of shape (B, 1, n)."""
    return torch.linalg.vector_norm(Z, dim=-1).reciprocal().unsqueeze(-2)
