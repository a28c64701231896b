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

import functools
import math

import numpy as np
import torch
from torch import Tensor

from tsw.core._angles import S2Angles, inv_norm
from tsw.core._random import Sampler
from tsw.core._safe import LineDistance
from tsw.core._slices import with_batch_axis
from tsw.core._sort import sort_last
from tsw.core.splits import angular_split_masses, split_masses
from tsw.core.trees import SphericalTrees

__all__ = [
    "s2_angles",
    "spherical_project",
    "spherical_split",
    "uniform_projection",
]


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
    def backward(ctx, g_r: Tensor | None, g_th: Tensor | None):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
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


def s2_angles(Z: Tensor, trees: SphericalTrees) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Return ``t``, the tangent polar angles, the rays' angles and ``sin t`` on S^2.

    Shapes (B, T, n), (B, T, n), (B|1, T, k) and (B, T, n), from one (3T, 3) x (3, n)
    product (:class:`tsw.core._angles.S2Angles`); ``sin t = rho / |z|``.
    """
    frames, theta = _frames(trees)
    # (B|1, T, 3, 3) and (B|1, T, k)
    frames, theta = with_batch_axis(frames, 3), with_batch_axis(theta, 2)
    t, polar, scale = S2Angles.apply(Z, frames)
    return t, polar, theta, scale


def spherical_split(
    Z: Tensor, w: Tensor, trees: SphericalTrees, delta: float
) -> tuple[Tensor, Tensor]:
    r"""Return geodesic coordinates and STSW's split masses of points.

    ``Z`` (B, n, d+1) the points, ``w`` (B, n) their signed masses, ``delta > 0``.
    Returns ``t`` (B, T, n) as :func:`spherical_project` and the masses
    :math:`\mathrm{softmax}_i(-\delta \beta_i)\, w` (B, T, k, n). On S^2 one written-out
    function forms the wrapped angles, the softmax and the masses
    (:func:`tsw.core.splits.angular_split_masses`); elsewhere :func:`spherical_project`'s
    ``beta`` goes through :func:`tsw.core.splits.split_masses`.
    """
    if Z.shape[-1] == 3:
        t, polar, theta, scale = s2_angles(Z, trees)
        return t, angular_split_masses(polar, theta, scale, w, delta)
    t, beta = spherical_project(Z, trees, angles=True)
    if beta is None:  # not reached: angles=True
        raise RuntimeError("spherical_project returned no angles")
    return t, split_masses(w, delta, distances=beta)


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
        t, polar, theta, scale = s2_angles(Z, trees)
        if not angles:
            return t, None
        # wrapped |polar - theta_i| in [0, pi]: pi - |pi - |difference||
        diff = polar.unsqueeze(-2) - theta.unsqueeze(-1)
        phi = math.pi - (math.pi - diff.abs()).abs()
        return t, scale.unsqueeze(-2) * phi
    roots = with_batch_axis(trees.roots, 2)  # (B|1, T, D)
    c = torch.matmul(roots, Zt)  # (B, T, n)
    sq = (Z * Z).sum(-1).unsqueeze(-2)  # (B, 1, n)
    s = LineDistance.apply(sq, c)  # distance to the axis: |z - <x, z> x|
    t = torch.atan2(s, c)
    if not angles:
        return t, None
    dirs = with_batch_axis(trees.directions, 3)  # (B|1, T, k, D)
    T, k = dirs.shape[-3], dirs.shape[-2]
    w = torch.matmul(dirs.reshape(dirs.shape[0], T * k, D), Zt).reshape(B, T, k, n)
    q = LineDistance.apply((sq - c * c).unsqueeze(-2), w)  # distance to the ray's plane
    r, phi = _Polar.apply(w, q)  # r = |z - <x, z> x| again, consistent with phi
    beta = r * phi * inv_norm(Z).unsqueeze(-2)
    return t, beta


# --------------------------------------------------------------------------- uniform measure


@functools.lru_cache(maxsize=32)
def _polar_grid(n_grid: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Cell midpoints of [0, pi] and the uniform measure's mass in each cell.

    Under the uniform law on the sphere of R^dim the angle to a fixed point has density
    proportional to ``sin(t)^(dim - 2)``; each cell's mass is integrated with 8-point
    Gauss-Legendre (exact to rounding for this smooth integrand).
    """
    edges = np.linspace(0.0, np.pi, n_grid + 1)
    x, w = np.polynomial.legendre.leggauss(8)
    half = 0.5 * (edges[1:] - edges[:-1])
    nodes = (edges[:-1] + half)[:, None] + half[:, None] * x[None, :]
    mass = (np.sin(nodes) ** (dim - 2) * w[None, :]).sum(1) * half
    return edges[:-1] + half, mass / mass.sum()


@functools.lru_cache(maxsize=32)
def _chebyshev_matrix(n_nodes: int, n_grid: int) -> tuple[np.ndarray, np.ndarray]:
    """Chebyshev points (first kind) on [0, 1] and an interpolation matrix.

    The barycentric formula (Berrut & Trefethen 2004) maps values at the points to
    values at ``sin`` of the cell midpoints of :func:`_polar_grid`.
    """
    j = np.arange(n_nodes)
    x = np.cos(np.pi * (2 * j + 1) / (2 * n_nodes))
    bw = (-1.0) ** j * np.sin(np.pi * (2 * j + 1) / (2 * n_nodes))
    xt = 2 * np.sin((np.arange(n_grid) + 0.5) * np.pi / n_grid) - 1
    diff = xt[:, None] - x[None, :]
    exact = np.isclose(diff, 0.0, atol=0.0)
    diff[exact] = 1.0
    M = bw / diff
    M /= M.sum(1, keepdims=True)
    rows = exact.any(1)
    M[rows] = exact[rows].astype(float)
    return (x + 1) / 2, M


def _tangent_nodes(trees: SphericalTrees, n_quad: int, sampler: Sampler) -> tuple[Tensor, Tensor]:
    """Quadrature of the uniform law of tangent directions u at each root.

    Returns the angles ``phi`` (..., T, k, Q) between the rays and the nodes ``u``, and
    the node weights (..., T, 1, Q) (summing to 1).

    * d+1 = 3: the tangent directions form a circle, on which every angle to a ray is
      piecewise linear with breakpoints at the rays and their opposites; Gauss-Legendre
      with 8 nodes on each of the 2k arcs between breakpoints integrates the smooth
      split on every arc (``n_quad`` is ignored).
    * d+1 = 2: the two tangent directions, weight 1/2 each.
    * d+1 >= 4: ``n_quad`` directions in antithetic pairs (u, -u): a scrambled Sobol
      sequence (seeded from ``sampler``) mapped to Gaussian vectors, projected on each
      tangent space and normalised. Randomised quasi-Monte Carlo: each node is uniform
      on the tangent sphere, and the nodes cover it far more evenly than independent
      draws (measured: 10x less bias than i.i.d. nodes for the same count).
    """
    D = trees.dim
    v = trees.directions
    dt = torch.float64
    if D == 3:
        _, theta = _frames(trees.to(dt))  # (..., T, k)
        brk = torch.cat([theta, torch.remainder(theta, 2 * math.pi) - math.pi], dim=-1)
        brk = sort_last(torch.remainder(brk, 2 * math.pi))[0]  # (..., T, 2k)
        nxt = torch.cat([brk[..., 1:], brk[..., :1] + 2 * math.pi], dim=-1)
        xg, wg = (
            torch.as_tensor(a, dtype=dt, device=brk.device)
            for a in np.polynomial.legendre.leggauss(8)
        )
        length = (nxt - brk).unsqueeze(-1)  # (..., T, 2k, 1)
        nodes = (brk.unsqueeze(-1) + 0.5 * length * (xg + 1)).flatten(-2)  # (..., T, Q)
        weights = (0.5 * length * wg / (2 * math.pi)).flatten(-2).unsqueeze(-2)
        diff = nodes.unsqueeze(-2) - theta.unsqueeze(-1)  # (..., T, k, Q)
        phi = math.pi - (math.pi - torch.remainder(diff, 2 * math.pi)).abs()
        return phi, weights
    roots = trees.roots.to(dt)
    if D == 2:
        tangent = torch.stack([-roots[..., 1], roots[..., 0]], dim=-1)
        u = torch.stack([tangent, -tangent], dim=-2)  # (..., T, 2, 2)
    else:
        half = max(1, n_quad // 2)
        gen = sampler.generator
        seed = int(torch.randint(0, 2**62, (1,), generator=gen, device=gen.device))
        sobol = torch.quasirandom.SobolEngine(D, scramble=True, seed=seed).draw(half, dtype=dt)
        eps = torch.finfo(dt).eps
        z = math.sqrt(2.0) * torch.erfinv(2 * sobol.clamp(eps, 1 - eps) - 1)  # (Q/2, D)
        z = z.to(roots.device)
        g = z - torch.matmul(roots, z.T).unsqueeze(-1) * roots.unsqueeze(-2)  # (..., T, Q/2, D)
        g = g / torch.linalg.vector_norm(g, dim=-1, keepdim=True)
        u = torch.cat([g, -g], dim=-2)  # (..., T, Q, D)
    cos = torch.matmul(v.to(dt), u.transpose(-1, -2)).clamp(-1.0, 1.0)  # (..., T, k, Q)
    weights = torch.full((*cos.shape[:-2], 1, cos.shape[-1]), 1 / cos.shape[-1], dtype=dt)
    return torch.arccos(cos), weights.to(cos.device)


def uniform_projection(
    trees: SphericalTrees, delta: float, n_grid: int, n_quad: int, sampler: Sampler
) -> tuple[Tensor, Tensor]:
    r"""Project the uniform measure on the sphere on each spherical tree.

    A uniform point is :math:`y = \cos t\, x + \sin t\, u` with :math:`t` of density
    :math:`\propto \sin^{d-1} t` on :math:`[0, \pi]` and :math:`u` uniform on the unit
    sphere of the tangent space, independent. Ray ``i`` therefore receives the density
    :math:`\propto \sin^{d-1}(t)\, A_i(\sin t)` with
    :math:`A_i(s) = \mathbb E_u[\mathrm{softmax}_i(-\delta s \angle(u, v_i))]`.
    The masses are those of ``n_grid`` equal cells of :math:`[0, \pi]`, put at the cell
    midpoints; :math:`A_i` is computed by the tangent quadrature of :func:`_tangent_nodes`
    at Chebyshev points of :math:`s \in [0, 1]` and interpolated (spectrally accurate:
    :math:`A_i` is analytic in :math:`s`; the number of points grows with ``delta``).

    Returns
    -------
    coords : Tensor of shape (G,)
        Cell midpoints.
    masses : Tensor of shape (..., T, k, G)
        Non-negative, each tree's total is 1; dtype and device of the trees.
    """
    dtype, device = trees.directions.dtype, trees.directions.device
    k = trees.n_lines
    mid, cell = _polar_grid(n_grid, trees.dim)
    coords = torch.as_tensor(mid, dtype=dtype, device=device)
    cell_t = torch.as_tensor(cell, dtype=torch.float64, device=device)
    batch = trees.directions.shape[:-2]
    if delta == 0 or k == 1:
        masses = (cell_t / k).expand(*batch, k, n_grid)
        return coords, masses.to(dtype)
    phi, weights = _tangent_nodes(trees, n_quad, sampler)  # (..., T, k, Q), (..., T, 1, Q)
    s_targets = np.sin(mid)
    n_cheb = math.ceil(16 + 3.5 * delta)
    if n_cheb >= n_grid:
        s_nodes, M = s_targets, None
    else:
        s_nodes, M = _chebyshev_matrix(n_cheb, n_grid)
    s = torch.as_tensor(s_nodes, dtype=torch.float64, device=device)
    logits = phi.unsqueeze(-3) * (-delta * s).view(-1, 1, 1)  # (..., T, S, k, Q)
    A = (torch.softmax(logits, dim=-2) * weights.unsqueeze(-3)).sum(-1)  # (..., T, S, k)
    if M is not None:
        A = torch.matmul(torch.as_tensor(M, dtype=torch.float64, device=device), A)
    masses = A.transpose(-1, -2) * cell_t  # (..., T, k, G)
    return coords, masses.to(dtype)
