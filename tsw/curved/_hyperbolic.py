r"""The geometry of hyperbolic space :math:`\mathbb H^d`, in the Lorentz and Poincare models.

Models
------
* Lorentz (hyperboloid): points ``(..., d+1)`` of :math:`\{x : \langle x, x\rangle_L = -1,
  x_0 > 0\}`, :math:`\langle x, y\rangle_L = -x_0 y_0 + \sum_{i \ge 1} x_i y_i`, origin
  :math:`o = (1, 0, \dots, 0)`.
* Poincare ball: points ``(..., d)`` of the open unit ball, :math:`y = x_{1:} / (1 + x_0)`,
  inverse :math:`x = (1 + |y|^2, 2y) / (1 - |y|^2)`.

Every computation here runs on the *spatial coordinates* :math:`z = x_{1:} \in \mathbb R^d`
of the hyperboloid (:func:`to_spatial`): ``z`` determines the point
(:math:`x_0 = \sqrt{1 + |z|^2}`), is exact in both models (from the ball,
:math:`z = 2y / ((1 - |y|)(1 + |y|))`, with no cancellation near the boundary) and its
norm is :math:`\sinh r` for the distance :math:`r` from the origin. A Lorentz point's
given :math:`x_0` is checked against :math:`\sqrt{1 + |z|^2}` (to :func:`hyperbolic_tol`)
and then not read: the values and gradients are those of the point of the hyperboloid
above ``z`` (its gradient with respect to :math:`x_0` is 0, and the Riemannian gradient,
:func:`riemannian_gradient`, is the same for every extension off the hyperboloid).

Accuracy
--------
The naive formulas lose everything far from the origin: :math:`\operatorname{arctanh}
(\langle x_{1:}, \theta\rangle / x_0)` and :math:`\log(x_0 - \langle x_{1:},
\theta\rangle)` cancel when the point lies near the geodesic of :math:`\theta` (their
arguments' absolute error is about :math:`\epsilon x_0^2` relative to the result), and
``arccosh`` of :math:`-\langle x, y\rangle_L` near 1 resolves distances only to
:math:`\sqrt\epsilon`. Here

* the projections' gap :math:`x_0 - \langle z, \theta\rangle` is formed as
  :math:`1/(x_0 + |z|) + |z_\perp|^2 / (|z| + \langle z, \theta\rangle)`, with
  :math:`z_\perp` the part of ``z`` orthogonal to :math:`\theta`, wherever it is below
  :data:`GAP_THRESHOLD` times :math:`x_0` (the few (direction, point) pairs far out and
  near the direction's geodesic; elsewhere the plain difference is accurate to
  :math:`10^3 d\,\epsilon` relative);
* distances use the half-angle form of the hyperbolic law of cosines,
  :math:`\sinh^2(\rho/2) = \sinh^2((r_x - r_y)/2) + \sinh r_x \sinh r_y
  \sin^2(\varphi/2)` (radii :math:`r` and the angle :math:`\varphi` at the origin), whose
  terms are all non-negative.

Both give the exact value for spatial coordinates within a few units in the last place
of the given ones (backward stable), at any distance from the origin that the dtype can
hold: :func:`check_range` raises beyond :func:`max_radius` (43.6 in float32, 354 in
float64), where :math:`|z|^2` would overflow. Far out, that is all any representation
offers: rounding ``z`` (of size :math:`\sinh r`) moves a point by up to :math:`\epsilon
\sinh r` across the geodesics through the origin (1e-3 at ``r = 30`` in float64), while
its distance from the origin stays exact to :math:`\epsilon`. The Poincare ball holds
points only up to about 16.6 (float32) or 37.4 (float64) from the origin: beyond,
:math:`|y|` rounds to 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from tsw.core._safe import SafeSqrt
from tsw.core._validation import check_choice, check_finite, sphere_tol

__all__ = [
    "GAP_THRESHOLD",
    "MODELS",
    "check_hyperbolic",
    "check_lorentz",
    "check_model",
    "check_poincare",
    "check_range",
    "distance",
    "distance_matrix",
    "exp0",
    "exp_map",
    "from_spatial",
    "geodesic_coordinates",
    "geodesic_from_products",
    "horospherical_coordinates",
    "horospherical_from_products",
    "hyperbolic_tol",
    "log_map",
    "lorentz_centroid",
    "lorentz_to_poincare",
    "max_radius",
    "minkowski_inner",
    "origin",
    "poincare_to_lorentz",
    "project_tangent",
    "radius",
    "riemannian_gradient",
    "spatial_coordinates",
    "to_spatial",
    "transport0",
    "wrapped_normal",
]

#: the two models, in the order of the docs
MODELS = ("lorentz", "poincare")
#: a (direction, point) pair whose gap :math:`x_0 - |\langle z, \theta\rangle|` is below
#: this fraction of :math:`x_0` has it recomputed from the orthogonal part of ``z``
#: (see the module's docstring); above, the plain difference loses at most
#: ``d * eps / GAP_THRESHOLD`` relative
GAP_THRESHOLD = 2.0**-10


def check_model(value: object, name: str = "model") -> str:
    """Return ``value`` if it is ``"lorentz"`` or ``"poincare"``, else raise naming both."""
    return check_choice(value, name, MODELS)


def hyperbolic_tol(dtype: torch.dtype) -> float:
    r"""Return the largest accepted relative error of a Lorentz point's :math:`x_0`.

    The error is :math:`|x_0 - \sqrt{1 + |x_{1:}|^2}| / x_0`;

    :func:`~tsw.core._validation.sphere_tol`: 1e-6 in float64, 1.2e-4 in float32 (points
    computed in float32 and cast to float64 pass; points never put on the hyperboloid do
    not).
    """
    return sphere_tol(dtype)


def max_radius(dtype: torch.dtype) -> float:
    r"""Return the largest distance from the origin :func:`check_range` accepts in ``dtype``.

    :math:`\operatorname{asinh}(\sqrt{\max} / 4)`: 43.67 in float32, 354.1 in float64.
    """
    return math.asinh(_max_norm(dtype))


def _max_norm(dtype: torch.dtype) -> float:
    """Return the largest accepted ``|z|`` in ``dtype``: its square, times 16, stays finite."""
    return math.sqrt(torch.finfo(dtype).max) / 4


def _width(X: Tensor, name: str, least: int, what: str) -> None:
    if X.dim() < 1 or X.shape[-1] < least:
        raise ValueError(
            f"{name} must have {what} along its last axis; got {name}.shape={tuple(X.shape)}"
        )


def check_lorentz(X: Tensor, name: str, *, validate: bool = True) -> Tensor:
    r"""Check that the rows of ``X`` (..., d+1) are points of the hyperboloid; return ``X``.

    ``d + 1 >= 2`` is always checked. With ``validate`` (a value check): finite entries,
    the upper sheet (:math:`x_0 > 0`) and :math:`|x_0 - \sqrt{1 + |x_{1:}|^2}| \le`
    :func:`hyperbolic_tol` times :math:`\sqrt{1 + |x_{1:}|^2}`; then :func:`check_range`.
    """
    _width(X, name, 2, "d+1 >= 2 coordinates (x_0, x_1, ..., x_d) of the hyperboloid")
    if not validate or X.numel() == 0:
        return X
    check_finite(X, name)
    x = X.detach()
    x0 = x[..., 0]
    if bool((x0 <= 0).any()):
        raise ValueError(
            f"{name} must lie on the upper sheet of the hyperboloid (x_0 > 0); got a row with "
            f"x_0 = {x0.min().item():.6g}"
        )
    check_range(x[..., 1:], name)
    s = torch.linalg.vector_norm(x[..., 1:], dim=-1)
    h = torch.hypot(torch.ones_like(s), s)
    err = ((x0 - h).abs() / h).reshape(-1)
    tol = hyperbolic_tol(X.dtype)
    if bool((err > tol).any()):
        at = int(err.argmax())
        raise ValueError(
            f"{name} must lie on the hyperboloid <x, x>_L = -1 (x_0 = sqrt(1 + |x_1:|^2) up to "
            f"a relative {tol:.1e} in {X.dtype}); got a row with x_0 = "
            f"{x0.reshape(-1)[at].item():.10g} where sqrt(1 + |x_1:|^2) = "
            f"{h.reshape(-1)[at].item():.10g}"
        )
    return X


def check_poincare(X: Tensor, name: str, *, validate: bool = True) -> Tensor:
    r"""Check that the rows of ``X`` (..., d) lie in the open unit ball; return ``X``.

    ``d >= 1`` is always checked. With ``validate`` (a value check): finite entries and
    ``|y| < 1`` (the boundary is at infinite distance: a row of norm 1 or more is no
    point of the ball, whatever the rounding that put it there). The ball's points are
    within :func:`max_radius` in every dtype (:math:`|z| \le 2 / \epsilon`), so no range
    check is needed.
    """
    _width(X, name, 1, "d >= 1 coordinates of the Poincare ball")
    if not validate or X.numel() == 0:
        return X
    check_finite(X, name)
    norms = torch.linalg.vector_norm(X.detach(), dim=-1)
    if bool((norms >= 1).any()):
        raise ValueError(
            f"{name} must lie in the open unit ball of the Poincare model (|y| < 1); got a "
            f"row of norm {norms.max().item():.10g}. A point on or beyond the boundary is at "
            "infinite distance: use the Lorentz model for points farther out than the "
            "ball resolves in this dtype"
        )
    return X


def check_hyperbolic(X: Tensor, name: str, model: str, *, validate: bool = True) -> Tensor:
    """:func:`check_lorentz` or :func:`check_poincare`, by ``model``."""
    check = check_lorentz if check_model(model) == "lorentz" else check_poincare
    return check(X, name, validate=bool(validate))


def check_range(Z: Tensor, name: str) -> None:
    """Raise ``ValueError`` if a point of spatial coordinates ``Z`` is beyond :func:`max_radius`.

    A value check on the spatial coordinates (:func:`to_spatial`): beyond, ``|z|^2``
    overflows (and with it the coordinates and distances).
    """
    if Z.numel() == 0:
        return
    top = torch.linalg.vector_norm(Z.detach(), dim=-1).max().item()
    limit = _max_norm(Z.dtype)
    if not top <= limit:
        wider = "; use torch.float64" if Z.dtype != torch.float64 else ""
        raise ValueError(
            f"{name} has a point at hyperbolic distance {math.asinh(top):.6g} from the origin: "
            f"in {Z.dtype} points farther than {max_radius(Z.dtype):.4g} cannot be computed "
            f"with (|x_1:|^2 overflows){wider}"
        )


def _one_minus_sq(norm: Tensor) -> Tensor:
    """``1 - |y|^2`` as ``(1 - |y|)(1 + |y|)``: no cancellation near the boundary."""
    return (1 - norm) * (1 + norm)


def to_spatial(X: Tensor, model: str) -> Tensor:
    r"""Return the spatial coordinates :math:`z = x_{1:}` (..., d) of hyperbolic points.

    Lorentz: the last ``d`` coordinates. Poincare: :math:`2y / ((1 - |y|)(1 + |y|))`.
    ``|z| = sinh r`` at distance ``r`` from the origin.
    """
    if check_model(model) == "lorentz":
        return X[..., 1:]
    norm = SafeSqrt.apply((X * X).sum(-1, keepdim=True))
    return 2 * X / _one_minus_sq(norm)


#: :func:`to_spatial` under the name the methods read it by
spatial_coordinates = to_spatial


def from_spatial(Z: Tensor, model: str) -> Tensor:
    r"""Return the points of spatial coordinates ``Z`` (..., d) in ``model``.

    Lorentz: :math:`(\sqrt{1 + |z|^2}, z)`. Poincare: :math:`z / (1 + \sqrt{1 + |z|^2})`;
    where that rounds onto the boundary (beyond about 16.6 from the origin in float32,
    37.4 in float64) a ``ValueError`` says so.
    """
    x0 = torch.sqrt(1 + (Z * Z).sum(-1, keepdim=True))
    if check_model(model) == "lorentz":
        return torch.cat([x0, Z], dim=-1)
    Y = Z / (1 + x0)
    if Y.numel() and bool((torch.linalg.vector_norm(Y.detach(), dim=-1) >= 1).any()):
        r = math.asinh(torch.linalg.vector_norm(Z.detach(), dim=-1).max().item())
        raise ValueError(
            f"a point at distance {r:.6g} from the origin rounds onto the boundary of the "
            f"Poincare ball in {Z.dtype}: the ball cannot hold it; use the Lorentz model"
            + (" or torch.float64" if Z.dtype != torch.float64 else "")
        )
    return Y


def lorentz_to_poincare(X: Tensor) -> Tensor:
    r"""Map hyperboloid points (..., d+1) into the Poincare ball: :math:`x_{1:} / (1 + x_0)`.

    :math:`x_0` is taken as :math:`\sqrt{1 + |x_{1:}|^2}` (:func:`from_spatial`).
    """
    return from_spatial(X[..., 1:], "poincare")


def poincare_to_lorentz(Y: Tensor) -> Tensor:
    r"""Map points of the Poincare ball (..., d) onto the hyperboloid.

    :math:`(1 + |y|^2, 2y) / (1 - |y|^2)`, with :math:`1 - |y|^2 = (1 - |y|)(1 + |y|)`.
    """
    norm = SafeSqrt.apply((Y * Y).sum(-1, keepdim=True))
    den = _one_minus_sq(norm)
    return torch.cat([(1 + norm * norm) / den, 2 * Y / den], dim=-1)


def origin(
    dim: int,
    model: str = "lorentz",
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""Return the origin of :math:`\mathbb H^{dim}`: ``(1, 0, ..., 0)`` or ``0`` (Poincare)."""
    width = dim + 1 if check_model(model) == "lorentz" else dim
    o = torch.zeros(width, dtype=dtype, device=device)
    if model == "lorentz":
        o[0] = 1
    return o


def minkowski_inner(x: Tensor, y: Tensor) -> Tensor:
    r""":math:`\langle x, y\rangle_L = -x_0 y_0 + \sum_{i \ge 1} x_i y_i`, over the last axis."""
    return (x[..., 1:] * y[..., 1:]).sum(-1) - x[..., 0] * y[..., 0]


def radius(X: Tensor, model: str) -> Tensor:
    r"""Distance from the origin, :math:`\operatorname{asinh}|z|`, exact to rounding of ``z``."""
    Z = to_spatial(X, model)
    return torch.asinh(SafeSqrt.apply((Z * Z).sum(-1)))


def _polar(Z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(|z|, asinh |z|, z / |z|)`` with the direction 0 at the origin (finite gradients)."""
    s = SafeSqrt.apply((Z * Z).sum(-1))
    tiny = torch.finfo(Z.dtype).tiny
    return s, torch.asinh(s), Z / s.clamp_min(tiny).unsqueeze(-1)


def _half_angle(s_x: Tensor, r_x: Tensor, s_y: Tensor, r_y: Tensor, chord2: Tensor) -> Tensor:
    r"""Return the distance from the radii and the squared chord of the directions.

    ``chord2`` is :math:`|\hat z_x - \hat z_y|^2`, ``s`` the :math:`\sinh` of the radii.
    """
    a = torch.sinh((r_x - r_y) / 2)
    return 2 * torch.asinh(SafeSqrt.apply(a * a + s_x * s_y * chord2 / 4))


def distance(x: Tensor, y: Tensor, model: str) -> Tensor:
    r"""Geodesic distance between hyperbolic points, broadcast over the leading axes.

    .. math::

        \rho(x, y) = 2 \operatorname{asinh}\sqrt{\sinh^2\frac{r_x - r_y}{2}
            + \sinh r_x \sinh r_y \sin^2\frac{\varphi}{2}},

    with :math:`r` the distances from the origin and :math:`\varphi` the angle between the
    points seen from it; equal to :math:`\operatorname{arccosh}(-\langle x, y\rangle_L)`
    and, in the ball, to :math:`\operatorname{arccosh}(1 + 2|x - y|^2 / ((1 - |x|^2)(1 -
    |y|^2)))`, but accurate to rounding for near and far points alike. Zero (sub)gradient
    at ``x = y``.
    """
    s_x, r_x, u_x = _polar(to_spatial(x, model))
    s_y, r_y, u_y = _polar(to_spatial(y, model))
    chord = u_x - u_y
    return _half_angle(s_x, r_x, s_y, r_y, (chord * chord).sum(-1))


def distance_matrix(X: Tensor, Y: Tensor, model: str) -> Tensor:
    """Pairwise geodesic distances (..., N, M) between the rows of ``X`` and ``Y``.

    :func:`distance`'s formula; the chords between directions are exact differences
    (``torch.cdist`` without the matrix-product shortcut, which would cancel for near
    points).
    """
    s_x, r_x, u_x = _polar(to_spatial(X, model))
    s_y, r_y, u_y = _polar(to_spatial(Y, model))
    chord = torch.cdist(u_x, u_y, compute_mode="donot_use_mm_for_euclid_dist")
    return _half_angle(
        s_x.unsqueeze(-1), r_x.unsqueeze(-1), s_y.unsqueeze(-2), r_y.unsqueeze(-2), chord * chord
    )


def project_tangent(x: Tensor, v: Tensor) -> Tensor:
    r"""Project ``v`` (..., d+1) onto the tangent space of the hyperboloid at ``x``.

    :math:`v + \langle x, v\rangle_L x`.
    """
    return v + minkowski_inner(x, v).unsqueeze(-1) * x


def _sinhc(n: Tensor) -> Tensor:
    """``sinh(n) / n``, 1 at 0, with finite gradients there."""
    small = n < 1e-4
    safe = torch.where(small, torch.ones_like(n), n)
    return torch.where(small, 1 + n * n / 6, torch.sinh(safe) / safe)


def _check_step(n: Tensor, name: str) -> None:
    """Raise if a geodesic step of length ``n`` overflows the dtype (a value check)."""
    if n.numel() == 0:
        return
    top = n.detach().max().item()
    if math.isnan(top):
        raise ValueError(f"{name} must be finite; got NaN")
    if not top <= max_radius(n.dtype):
        raise ValueError(
            f"{name} has a tangent vector of length {top:.6g}: the exponential map would "
            f"overflow in {n.dtype} (lengths up to {max_radius(n.dtype):.4g}); take smaller steps"
        )


def _frame(z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(|z|, sqrt(1 + |z|^2), z / |z|)``, the direction 0 at the origin (finite gradients)."""
    s = SafeSqrt.apply((z * z).sum(-1))
    unit = z / s.clamp_min(torch.finfo(z.dtype).tiny).unsqueeze(-1)
    return s, torch.sqrt(1 + s * s), unit


def _step(z: Tensor, perp: Tensor, rad: Tensor, name: str) -> Tensor:
    r"""Return the spatial part of :math:`\exp_x(v)`, ``v`` of spatial part ``perp + rad z / |z|``.

    ``perp`` (..., d) orthogonal to ``z``, ``rad`` (...,): :math:`|v|_L^2 = |perp|^2 +
    rad^2 / x_0^2` then has no cancellation (as :math:`|v_{1:}|^2 - v_0^2` has far from
    the origin, where a tangent vector's radial part is :math:`x_0` times larger in
    ambient coordinates than its length), and the end point is :math:`\cosh(n) z +
    \sinh(n) v_{1:} / n`.
    """
    s, x0, unit = _frame(z)
    n = SafeSqrt.apply((perp * perp).sum(-1) + (rad / x0) ** 2)
    _check_step(n, name)
    along = s * torch.cosh(n) + _sinhc(n) * rad
    return along.unsqueeze(-1) * unit + _sinhc(n).unsqueeze(-1) * perp


def _spatial_exp(z: Tensor, w: Tensor, name: str) -> Tensor:
    """Return :func:`_step` for the tangent vector of spatial part ``w`` at the point ``z``."""
    _, _, unit = _frame(z)
    a = (unit * w).sum(-1)
    return _step(z, w - a.unsqueeze(-1) * unit, a, name)


def _poincare_differential(y: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Return the spatial coordinates of ``y`` and the image of ``v`` under their differential."""
    q = (y * y).sum(-1, keepdim=True)
    den = _one_minus_sq(SafeSqrt.apply(q))
    yv = (y * v).sum(-1, keepdim=True)
    return 2 * y / den, 2 * v / den + 4 * y * yv / den**2


def exp_map(x: Tensor, v: Tensor, model: str) -> Tensor:
    r"""Exponential map: the point at the end of the geodesic from ``x`` with velocity ``v``.

    Lorentz: ``x`` and ``v`` of shape (..., d+1), ``v`` tangent at ``x``
    (:math:`\langle x, v\rangle_L = 0`); as for points, a tangent vector is read from its
    spatial part (:math:`v_0 = \langle x_{1:}, v_{1:}\rangle / x_0` is not read), and the
    result is :math:`\cosh(|v|_L) x + \sinh(|v|_L) v / |v|_L` with its :math:`x_0`
    recomputed from its spatial part, so that iterated steps stay on the hyperboloid.
    Poincare: ``y`` and ``v`` of shape (..., d), ``v`` a vector of :math:`\mathbb R^d`
    at ``y`` (of Riemannian length :math:`2|v| / (1 - |y|^2)`), computed through the
    hyperboloid. A step of length beyond :func:`max_radius`, or NaN, raises. Far from the
    origin a tangent vector's ambient coordinates are ill-conditioned (its radial part is
    :math:`x_0` times larger there than its length, so rounding them changes the length
    by about :math:`\epsilon x_0^2 |v|`): :func:`tsw.riemannian_step` and
    :func:`wrapped_normal` form their steps from the radial and orthogonal parts instead.
    """
    if check_model(model) == "lorentz":
        return from_spatial(_spatial_exp(x[..., 1:], v[..., 1:], "v"), "lorentz")
    z, w = _poincare_differential(x, v)
    return from_spatial(_spatial_exp(z, w, "v"), "poincare")


def exp0(v: Tensor, model: str = "lorentz") -> Tensor:
    r"""Return the point at distance :math:`|v|` from the origin in the direction :math:`v / |v|`.

    ``v`` (..., d): the unit-speed geodesic :math:`\gamma_\theta(t) = \cosh(t) o + \sinh(t)
    (0, \theta)` at :math:`t = |v|`, :math:`\theta = v / |v|` (the geodesics the GHSW
    coordinates measure along), in ``model``: :math:`(\cosh|v|, \sinh|v|\,\theta)` or
    :math:`\tanh(|v|/2)\,\theta`.
    """
    n = SafeSqrt.apply((v * v).sum(-1))
    _check_step(n, "v")
    return from_spatial(_sinhc(n).unsqueeze(-1) * v, model)


def log_map(x: Tensor, y: Tensor, model: str) -> Tensor:
    r"""Return the tangent vector at ``x`` whose exponential is ``y`` (the logarithm map).

    Lorentz: :math:`\rho\,(y - \cosh(\rho) x) / \sinh\rho` with :math:`\rho` the distance
    (:func:`distance`), shape (..., d+1). Poincare: the same vector carried back to the
    ball by the differential of :math:`z \mapsto z / (1 + \sqrt{1 + |z|^2})`, shape (..., d).
    """
    model = check_model(model)
    zx, zy = to_spatial(x, model), to_spatial(y, model)
    rho = distance(x, y, model)
    w = (zy - torch.cosh(rho).unsqueeze(-1) * zx) / _sinhc(rho).unsqueeze(-1)
    x0 = torch.sqrt(1 + (zx * zx).sum(-1, keepdim=True))
    if model == "lorentz":
        return torch.cat([(zx * w).sum(-1, keepdim=True) / x0, w], dim=-1)
    w0 = (zx * w).sum(-1, keepdim=True) / x0  # the tangent vector's x_0 component
    return w / (1 + x0) - zx * w0 / (1 + x0) ** 2


def transport0(x: Tensor, v: Tensor) -> Tensor:
    r"""Return the parallel transport of ``v`` from the origin to ``x`` (Lorentz).

    ``x`` (..., d+1) on the hyperboloid; ``v`` a tangent vector at the origin, as its
    spatial part (..., d) or as (..., d+1) with :math:`v_0 = 0` (not read). Returns
    :math:`(0, v) + \frac{\langle x_{1:}, v\rangle}{1 + x_0}(o + x)`, shape (..., d+1),
    tangent at ``x``. Far from the origin its radial part is :math:`x_0` times that of
    ``v``: :func:`wrapped_normal` takes the exponential of it without forming it.
    """
    if v.shape[-1] == x.shape[-1]:
        v = v[..., 1:]
    coef = (x[..., 1:] * v).sum(-1, keepdim=True) / (1 + x[..., :1])
    w = torch.cat([torch.zeros_like(v[..., :1]), v], dim=-1)
    o = torch.zeros_like(x)
    o[..., 0] = 1
    return w + coef * (o + x)


def lorentz_centroid(X: Tensor, weights: Tensor | None = None) -> Tensor:
    r"""Return the Lorentzian centroid of the rows of ``X`` (..., n, d+1) (Law et al. 2019).

    :math:`m = s / \sqrt{-\langle s, s\rangle_L}`, :math:`s = \sum_i w_i x_i` (uniform
    weights by default): the point minimising the weighted sum of squared Lorentzian
    distances :math:`-2 - 2\langle m, x_i\rangle_L`. Shape (..., d+1).
    """
    s = X.mean(dim=-2) if weights is None else (weights.unsqueeze(-1) * X).sum(-2)
    return s / SafeSqrt.apply(-minkowski_inner(s, s)).unsqueeze(-1)


def wrapped_normal(
    mean: Tensor,
    cov: Tensor,
    n: int,
    *,
    model: str = "lorentz",
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""Draw ``n`` points of the wrapped normal distribution (Nagano et al., ICML 2019).

    :math:`v \sim \mathcal N(0, \Sigma)` in the tangent space at the origin, carried to
    ``mean`` by parallel transport (:func:`transport0`) and mapped by the exponential map
    there. ``mean`` (d+1) on the hyperboloid (or (d) in the ball with
    ``model="poincare"``), ``cov`` (d, d) symmetric positive definite; returns (n, d+1)
    (or (n, d)). Draws come from ``generator`` (a fresh one when None), never from the
    global RNG.
    """
    model = check_model(model)
    mu = mean if model == "lorentz" else poincare_to_lorentz(mean)
    d = mu.shape[-1] - 1
    if cov.shape != (d, d):
        raise ValueError(f"cov must have shape ({d}, {d}) for d = {d}; got {tuple(cov.shape)}")
    gen = generator
    if gen is None:
        gen = torch.Generator(device=mu.device)
        gen.seed()
    chol = torch.linalg.cholesky(cov)
    g = torch.randn(n, d, generator=gen, dtype=mu.dtype, device=mu.device)
    v = g @ chol.T
    # the transported vector's radial part is x_0 times v's (transport0): passed apart
    z = mu[1:].expand(n, d)
    _, x0, unit = _frame(z)
    a = (unit * v).sum(-1)
    return from_spatial(_step(z, v - a.unsqueeze(-1) * unit, x0 * a, "cov"), model)


def riemannian_gradient(x: Tensor, grad: Tensor, model: str) -> Tensor:
    r"""Return the Riemannian gradient at ``x`` of a function of Euclidean gradient ``grad``.

    Lorentz: :math:`h + \langle x, h\rangle_L x` with :math:`h = (-g_0, g_{1:})` (the
    Minkowski gradient projected onto the tangent space; the same for every extension of
    the function off the hyperboloid). Poincare: :math:`\frac{(1 - |y|^2)^2}{4} g`.
    """
    if check_model(model) == "lorentz":
        h = torch.cat([-grad[..., :1], grad[..., 1:]], dim=-1)
        return project_tangent(x, h)
    norm = SafeSqrt.apply((x * x).sum(-1, keepdim=True))
    return _one_minus_sq(norm) ** 2 / 4 * grad


# ------------------------------------------------------------ the projections' coordinates


def _gaps(
    u: Tensor,
    q: Tensor,
    x0: Tensor,
    supports: tuple[Tensor, ...],
    directions: Tensor,
    flagged: Tensor,
) -> tuple[tuple[Tensor, ...], Tensor, Tensor]:
    r""":math:`x_0 - |u|` for the flagged (direction, point) pairs, from the orthogonal part.

    ``u`` (B, L, n) the products :math:`\langle z, \theta\rangle`, ``q`` and ``x0``
    (B, 1, n) the squared norms and :math:`\sqrt{1 + q}`, ``supports`` (B, n_i, d) whose
    points, concatenated, are the ``n``, ``directions`` (d, L) or (B, d, L) unit columns,
    ``flagged`` (B, L, n) boolean. Returns the flagged indices, :math:`x_0 + |u|` and the
    gap :math:`1/(x_0 + |z|) + |z - u\theta|^2 / (|z| + |u|)` there.
    """
    idx = flagged.nonzero(as_tuple=True)
    b, slot, i = idx
    Z = supports[0] if len(supports) == 1 else torch.cat(supports, dim=-2)
    z = Z[b, i]  # (K, d)
    theta = directions[:, slot].T if directions.dim() == 2 else directions[b, :, slot]
    uu = u[idx]
    perp = z - uu.unsqueeze(-1) * theta
    r2 = (perp * perp).sum(-1)
    top = x0[b, 0, i]
    s = torch.sqrt(q[b, 0, i])  # far from the origin: no zero to differentiate at
    a = uu.abs()
    return idx, top + a, 1 / (top + s) + r2 / (s + a)


def _products(Z: Tensor, directions: Tensor) -> Tensor:
    """``<z, theta_l>`` of every point and direction, (B, L, n)."""
    return torch.matmul(directions.mT if directions.dim() == 3 else directions.T, Z.mT)


def _apart(fn: Callable[[Tensor], Tensor], x: Tensor, split: int) -> Tensor:
    """``fn(x)`` evaluated on ``x[..., :split]`` and ``x[..., split:]`` apart, then joined.

    The vectorised kernels of ``atanh``, ``log`` and ``log1p`` may round an element by one
    unit in the last place differently depending on where it falls in the buffer (the
    vectorised body or the scalar tail): evaluated apart, identical measures get
    bit-identical coordinates, and ``d(mu, mu) = 0`` exactly.
    """
    return torch.cat([fn(x[..., :split]), fn(x[..., split:])], dim=-1)


def _apart_flat(fn: Callable[[Tensor], Tensor], x: Tensor, first: Tensor) -> Tensor:
    """:func:`_apart` for a flat ``x`` whose entries ``first`` (a mask) come from the source."""
    out = torch.zeros_like(x)
    out[first] = fn(x[first])
    out[~first] = fn(x[~first])
    return out


class _Coordinates(torch.autograd.Function):
    r"""GHSW's or HHSW's coordinates from ``u`` (B, L, n) and ``q`` (B, 1, n), fused.

    With :math:`w = u / x_0` and :math:`x_0 = \sqrt{1 + q}`: :math:`\operatorname{arctanh}
    w` (geodesic) or :math:`-\tfrac12 \log(1 + q) - \log(1 - w)` (horospherical), and
    whether a pair lies within :data:`GAP_THRESHOLD` of the boundary of the formula's
    accuracy (``|w|`` or ``w`` at least ``1 - GAP_THRESHOLD``; the caller then takes the
    general path). The first ``split`` atoms (the source) and the others are evaluated
    apart (:func:`_apart`). The backward pass forms
    :math:`\partial t / \partial u = 1 / (x_0 (1 - w^2))` and :math:`\partial t /
    \partial q = -w / (2 x_0^2 (1 - w^2))` (geodesic), or :math:`1 / (x_0 (1 - w))` and
    :math:`-1 / (2 x_0^2 (1 - w))` (horospherical), in a few in-place passes over the
    (B, L, n) tensors, fewer than autograd's composition of the same operations; under
    ``create_graph`` the same formulas run out of place, so that they are differentiated
    again.
    """

    @staticmethod
    def forward(
        ctx: Any, u: Tensor, q: Tensor, horospherical: bool, split: int
    ) -> tuple[Tensor, Tensor]:
        inv = 1 / torch.sqrt(1 + q)  # correctly rounded: no dependence on the position
        t = u * inv
        low, high = torch.aminmax(t) if t.numel() else (t.new_zeros(()), t.new_zeros(()))
        edge = 1 - GAP_THRESHOLD
        parts = (t[..., :split], t[..., split:])
        if horospherical:
            flagged = high >= edge
            for part in parts:
                part.neg_().log1p_().neg_()
            t.sub_(0.5 * _apart(torch.log1p, q, split))
        else:
            flagged = (high >= edge) | (low <= -edge)
            for part in parts:
                part.atanh_()
        ctx.horospherical = horospherical
        ctx.save_for_backward(u, q)
        ctx.mark_non_differentiable(flagged)
        return t, flagged

    @staticmethod
    def backward(ctx: Any, g: Tensor, _: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        u, q = ctx.saved_tensors
        inv = 1 / torch.sqrt(1 + q)
        w = u * inv
        twice = torch.is_grad_enabled()  # create_graph: out of place, recorded
        if ctx.horospherical:
            r = g / (1 - w) if twice else torch.div(g, w.neg_().add_(1))
            grad_q = -0.5 * r.sum(-2, keepdim=True) * inv * inv
        else:
            if twice:
                r = g / (1 - w * w)
            else:
                r = torch.mul(w, w).neg_().add_(1)
                r = torch.div(g, r, out=r)
            grad_q = -0.5 * (r * w).sum(-2, keepdim=True) * inv * inv
        grad_u = r * inv if twice else r.mul_(inv)
        return grad_u, grad_q, None, None


def _split(supports: tuple[Tensor, ...]) -> int:
    """Return the number of source atoms among the supports' (all of a lone support)."""
    return supports[0].shape[-2]


def geodesic_from_products(
    u: Tensor, q: Tensor, supports: tuple[Tensor, ...], directions: Tensor
) -> Tensor:
    r"""Return GHSW's coordinates from the products ``u`` (B, L, n) and squared norms ``q``.

    :math:`\operatorname{arctanh}(u / x_0)`, :math:`x_0 = \sqrt{1 + q}`, and, for the
    pairs with :math:`1 - |u| / x_0 \le` :data:`GAP_THRESHOLD`, :math:`\operatorname{sign}
    (u) \tfrac12 \log((x_0 + |u|) / g)` with the gap ``g`` of :func:`_gaps`. ``q`` is
    (B, 1, n); the ``supports`` (B, n_i, d), whose points are the ``n`` in order, and the
    ``directions`` (unit columns) are read for those pairs only.
    """
    split = _split(supports)
    t, flagged = _Coordinates.apply(u, q, False, split)
    if not bool(flagged):
        return t
    x0 = torch.sqrt(1 + q)
    w = u / x0
    flagged = w.detach().abs() >= 1 - GAP_THRESHOLD
    # the flagged pairs' arctanh (of |w| near or, rounded, above 1) is replaced: it is
    # taken at 0 so that neither it nor its unused gradient is Inf or NaN
    t = _apart(torch.atanh, torch.where(flagged, 0, w), split)
    idx, plus, gap = _gaps(u, q, x0, supports, directions, flagged)
    first = idx[2] < split
    logs = _apart_flat(torch.log, plus, first) - _apart_flat(torch.log, gap, first)
    return t.index_put(idx, torch.sign(u[idx]) * 0.5 * logs)


def horospherical_from_products(
    u: Tensor, q: Tensor, supports: tuple[Tensor, ...], directions: Tensor
) -> Tensor:
    r"""Return HHSW's coordinates from the products ``u`` (B, L, n) and squared norms ``q``.

    :math:`-\log(x_0 - u) = -\tfrac12 \log(1 + q) - \log(1 - u / x_0)`, and, for the pairs
    with :math:`1 - u / x_0 \le` :data:`GAP_THRESHOLD`, :math:`-\log g` with the gap ``g``
    of :func:`_gaps`; the arguments as for :func:`geodesic_from_products`.
    """
    split = _split(supports)
    t, flagged = _Coordinates.apply(u, q, True, split)
    if not bool(flagged):
        return t
    x0 = torch.sqrt(1 + q)
    w = u / x0
    flagged = w.detach() >= 1 - GAP_THRESHOLD
    safe = -torch.where(flagged, 0, w)
    t = -0.5 * _apart(torch.log1p, q, split) - _apart(torch.log1p, safe, split)
    idx, _, gap = _gaps(u, q, x0, supports, directions, flagged)
    return t.index_put(idx, -_apart_flat(torch.log, gap, idx[2] < split))


def _coordinates(
    kind: Callable[[Tensor, Tensor, tuple[Tensor, ...], Tensor], Tensor],
    X: Tensor,
    directions: Tensor,
    model: str,
) -> Tensor:
    """Return ``kind``'s coordinates (L, n) or (B, L, n) of the points ``X`` (n, D) or (B, n, D)."""
    Z = to_spatial(X, model)
    batched = Z.dim() == 3
    Z = Z if batched else Z.unsqueeze(0)
    directions = directions / torch.linalg.vector_norm(directions, dim=-2, keepdim=True)
    q = (Z * Z).sum(-1).unsqueeze(-2)
    t = kind(_products(Z, directions), q, (Z,), directions)
    return t if batched else t[0]


def geodesic_coordinates(X: Tensor, directions: Tensor, model: str = "lorentz") -> Tensor:
    r"""Signed distances from the origin of the geodesic projections of ``X`` (GHSW).

    ``X`` (n, D) or (B, n, D) points of ``model``, ``directions`` (d, L) or (B, d, L):
    unit vectors :math:`\theta` of the tangent space at the origin (normalised here).
    Returns (L, n) or (B, L, n): the coordinate :math:`t` of the point of the geodesic
    :math:`\gamma_\theta(t) = \cosh(t) o + \sinh(t)(0, \theta)` nearest to ``x``,
    :math:`t = \operatorname{arctanh}(\langle x_{1:}, \theta\rangle / x_0)` (Bonet et al.
    2023), accurate far from the origin too (see the module's docstring).
    """
    return _coordinates(geodesic_from_products, X, directions, model)


def horospherical_coordinates(X: Tensor, directions: Tensor, model: str = "lorentz") -> Tensor:
    r"""Minus the Busemann functions of ``X`` for the directions (HHSW).

    As :func:`geodesic_coordinates`; the coordinate is :math:`-B_\theta(x) = -\log(x_0 -
    \langle x_{1:}, \theta\rangle)`, equal to ``t`` on :math:`\gamma_\theta(t)`: the
    point of the geodesic on the same horosphere as ``x``.
    """
    return _coordinates(horospherical_from_products, X, directions, model)
