"""The hyperbolic geometry (``tsw.curved._hyperbolic``) against closed forms and mpmath.

The closed forms (``arccosh(-<x, y>_L)``, the ball's distance, Mobius addition, the
naive ``arctanh`` and ``log`` coordinates) are the references where they are well
conditioned; mpmath at 80 digits is the reference far from the origin, where they are not.
"""

from __future__ import annotations

import math

import mpmath as mp
import pytest
import torch

from tsw.curved import _hyperbolic as hyp

F64 = torch.float64


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _unit(d: int, g: torch.Generator, n: int | None = None) -> torch.Tensor:
    v = torch.randn(d if n is None else (n, d), generator=g, dtype=F64)
    return v / torch.linalg.vector_norm(v, dim=-1, keepdim=True)


def _points(n: int, d: int, g: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    """Lorentz points at distances up to about ``3 * scale`` from the origin."""
    return hyp.exp0(scale * torch.randn(n, d, generator=g, dtype=F64))


# ------------------------------------------------------------------ mpmath references

mp.mp.dps = 80


def _mp_vec(z: torch.Tensor) -> list:
    return [mp.mpf(float(v)) for v in z]


def _mp_x0(z: list) -> mp.mpf:
    return mp.sqrt(1 + sum(v * v for v in z))


def _mp_coords(z: torch.Tensor, theta: torch.Tensor) -> tuple[float, float]:
    """Exact GHSW and HHSW coordinates of the point of spatial coordinates ``z``."""
    zz, tt = _mp_vec(z), _mp_vec(theta)
    norm = mp.sqrt(sum(v * v for v in tt))
    u = sum(a * b for a, b in zip(zz, tt, strict=True)) / norm
    x0 = _mp_x0(zz)
    return float(mp.atanh(u / x0)), float(-mp.log(x0 - u))


def _mp_distance(z1: torch.Tensor, z2: torch.Tensor) -> float:
    a, b = _mp_vec(z1), _mp_vec(z2)
    c2 = -((_mp_x0(a) - _mp_x0(b)) ** 2) + sum((p - q) ** 2 for p, q in zip(a, b, strict=True))
    return float(2 * mp.asinh(mp.sqrt(max(c2, 0)) / 2))


# --------------------------------------------------------------------------- models


def test_conversions_invert_each_other_and_land_on_the_manifolds():
    X = _points(50, 3, _gen())
    Y = hyp.lorentz_to_poincare(X)
    assert bool((torch.linalg.vector_norm(Y, dim=-1) < 1).all())
    torch.testing.assert_close(hyp.poincare_to_lorentz(Y), X, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(hyp.minkowski_inner(X, X), -torch.ones(50, dtype=F64))
    # the textbook map x_1: / (1 + x_0)
    torch.testing.assert_close(Y, X[:, 1:] / (1 + X[:, :1]), rtol=1e-14, atol=1e-15)
    torch.testing.assert_close(hyp.to_spatial(Y, "poincare"), X[:, 1:], rtol=1e-13, atol=1e-13)


def test_origin_in_both_models():
    assert hyp.origin(3).tolist() == [1.0, 0.0, 0.0, 0.0]
    assert hyp.origin(2, "poincare").tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="model must be one of 'lorentz', 'poincare'"):
        hyp.origin(2, "klein")


# ------------------------------------------------------------------------ distances


def test_distance_equals_the_closed_forms_of_both_models():
    g = _gen(1)
    X, Y = _points(40, 4, g), _points(40, 4, g)
    lorentz = torch.arccosh(-hyp.minkowski_inner(X, Y))
    torch.testing.assert_close(hyp.distance(X, Y, "lorentz"), lorentz, rtol=1e-12, atol=1e-12)
    P, Q = hyp.lorentz_to_poincare(X), hyp.lorentz_to_poincare(Y)
    ball = torch.arccosh(
        1 + 2 * ((P - Q) ** 2).sum(-1) / ((1 - (P * P).sum(-1)) * (1 - (Q * Q).sum(-1)))
    )
    torch.testing.assert_close(hyp.distance(P, Q, "poincare"), ball, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(hyp.radius(X, "lorentz"), torch.arccosh(X[:, 0]))


def test_distance_matrix_equals_the_pairwise_distances():
    g = _gen(2)
    X, Y = _points(7, 3, g), _points(5, 3, g)
    D = hyp.distance_matrix(X, Y, "lorentz")
    torch.testing.assert_close(D, hyp.distance(X[:, None], Y[None], "lorentz"), rtol=0, atol=1e-14)
    P, Q = hyp.lorentz_to_poincare(X), hyp.lorentz_to_poincare(Y)
    torch.testing.assert_close(hyp.distance_matrix(P, Q, "poincare"), D, rtol=1e-12, atol=1e-12)
    assert hyp.distance_matrix(X, X, "lorentz").diagonal().abs().max() == 0


@pytest.mark.parametrize("r", [0.0, 0.5, 5.0, 20.0, 100.0, 340.0])
@pytest.mark.parametrize("sep", [1e-12, 1e-6, 1.0, 10.0])
def test_distance_near_and_far_against_mpmath(r, sep):
    """Exact for the given (rounded) points: errors within rounding of their coordinates."""
    g = _gen(3)
    z1 = math.sinh(r) * _unit(3, g)
    w = _unit(3, g) * sep
    x1 = hyp.from_spatial(z1, "lorentz")
    x2 = hyp.wrapped_normal(x1, torch.eye(3, dtype=F64), 1, generator=_gen(4))[0]
    x2 = hyp.exp_map(x1, hyp.transport0(x1, w), "lorentz") if r < 30 else x2
    ref = _mp_distance(x1[1:], x2[1:])
    got = hyp.distance(x1, x2, "lorentz").item()
    # rounding of coordinates of size x_0 moves a point by up to eps x_0 across the geodesics
    assert abs(got - ref) <= 8 * 2.2e-16 * (1 + float(x1[0])) + 1e-15 * ref
    assert math.isfinite(got)


# ------------------------------------------------------------- exponential, logarithm


def test_exp0_walks_unit_speed_geodesics_in_both_models():
    g = _gen(5)
    v = torch.randn(30, 3, generator=g, dtype=F64) * 2
    norms = torch.linalg.vector_norm(v, dim=-1)
    for model in ("lorentz", "poincare"):
        o = hyp.origin(3, model, dtype=F64)
        torch.testing.assert_close(hyp.distance(o, hyp.exp0(v, model), model), norms)
    # the textbook forms (cosh t, sinh t theta) and tanh(t/2) theta
    theta = v / norms[:, None]
    torch.testing.assert_close(
        hyp.exp0(v), torch.cat([torch.cosh(norms)[:, None], torch.sinh(norms)[:, None] * theta], 1)
    )
    torch.testing.assert_close(hyp.exp0(v, "poincare"), torch.tanh(norms / 2)[:, None] * theta)


def _mobius_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    xy, x2, y2 = (
        (x * y).sum(-1, keepdim=True),
        (x * x).sum(-1, keepdim=True),
        (y * y).sum(-1, keepdim=True),
    )
    return ((1 + 2 * xy + y2) * x + (1 - x2) * y) / (1 + 2 * xy + x2 * y2)


def test_poincare_exp_equals_mobius_addition():
    """exp_y(v) = y (+) tanh(lambda_y |v| / 2) v / |v| (Ganea et al. 2018)."""
    g = _gen(6)
    Y = hyp.lorentz_to_poincare(_points(20, 3, g))
    V = torch.randn(20, 3, generator=g, dtype=F64) * 0.3
    lam = 2 / (1 - (Y * Y).sum(-1, keepdim=True))
    n = torch.linalg.vector_norm(V, dim=-1, keepdim=True)
    ref = _mobius_add(Y, torch.tanh(lam * n / 2) * V / n)
    torch.testing.assert_close(hyp.exp_map(Y, V, "poincare"), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("model", ["lorentz", "poincare"])
def test_log_inverts_exp_and_measures_the_distance(model):
    g = _gen(7)
    X, Y = _points(25, 3, g), _points(25, 3, g)
    if model == "poincare":
        X, Y = hyp.lorentz_to_poincare(X), hyp.lorentz_to_poincare(Y)
    V = hyp.log_map(X, Y, model)
    torch.testing.assert_close(hyp.exp_map(X, V, model), Y, rtol=1e-10, atol=1e-10)
    if model == "lorentz":
        torch.testing.assert_close(
            hyp.minkowski_inner(X, V), torch.zeros(25, dtype=F64), atol=1e-10, rtol=0
        )
        length = torch.sqrt(hyp.minkowski_inner(V, V))
    else:
        length = 2 * torch.linalg.vector_norm(V, dim=-1) / (1 - (X * X).sum(-1))
    torch.testing.assert_close(length, hyp.distance(X, Y, model), rtol=1e-10, atol=1e-12)


def test_exp_map_of_a_tangent_step_far_out_keeps_its_length():
    """The step's length is not lost to the cancellation of |v_1:|^2 - v_0^2 far out (which
    at r = 20 in float64 leaves |v|_L^2 = 0.25 +- 3); the end point is exact to the rounding
    of its coordinates (up to eps x_0 = 5e-8 across the geodesics there)."""
    g = _gen(8)
    for r in (10.0, 20.0):
        x = hyp.from_spatial(math.sinh(r) * _unit(3, g), "lorentz")
        w = _unit(3, g) * 0.5
        z = hyp._step(
            x[1:],
            w - (w @ x[1:]) / x[1:].norm() ** 2 * x[1:],
            (w @ x[1:]) / x[1:].norm() * x[0],
            "v",
        )
        y = hyp.from_spatial(z, "lorentz")
        assert abs(_mp_distance(x[1:], y[1:]) - 0.5) < 4 * 2.2e-16 * float(x[0])


def test_transport0_is_an_isometry_onto_the_tangent_space():
    g = _gen(9)
    X = _points(10, 3, g)
    V = torch.randn(10, 3, generator=g, dtype=F64)
    W = hyp.transport0(X, V)
    torch.testing.assert_close(
        hyp.minkowski_inner(X, W), torch.zeros(10, dtype=F64), atol=1e-12, rtol=0
    )
    torch.testing.assert_close(hyp.minkowski_inner(W, W), (V * V).sum(-1))


def test_wrapped_normal_puts_each_draw_at_the_length_of_its_tangent_draw():
    mean = hyp.exp0(torch.tensor([1.5, -0.5], dtype=F64))
    cov = torch.tensor([[0.3, 0.1], [0.1, 0.2]], dtype=F64)
    X = hyp.wrapped_normal(mean, cov, 50, generator=_gen(10))
    v = torch.randn(50, 2, generator=_gen(10), dtype=F64) @ torch.linalg.cholesky(cov).T
    torch.testing.assert_close(
        hyp.distance(X, mean, "lorentz"), torch.linalg.vector_norm(v, dim=-1)
    )
    torch.testing.assert_close(hyp.minkowski_inner(X, X), -torch.ones(50, dtype=F64))
    Y = hyp.wrapped_normal(
        hyp.lorentz_to_poincare(mean), cov, 50, model="poincare", generator=_gen(10)
    )
    torch.testing.assert_close(Y, hyp.lorentz_to_poincare(X))


def test_riemannian_gradient_matches_a_directional_derivative():
    """<grad f, v>_x = d/dt f(exp_x(t v)) at t = 0, for tangent v, in both models."""
    g = _gen(11)
    x = _points(1, 3, g)[0]
    target = _points(1, 3, g)[0]
    for model in ("lorentz", "poincare"):
        p = x if model == "lorentz" else hyp.lorentz_to_poincare(x)
        q = target if model == "lorentz" else hyp.lorentz_to_poincare(target)
        p = p.clone().requires_grad_(True)
        f = hyp.distance(p, q, model) ** 2
        (egrad,) = torch.autograd.grad(f, p)
        rgrad = hyp.riemannian_gradient(p.detach(), egrad, model)
        # the Riemannian gradient of d^2/2 is -log_x(y): of d^2, twice that
        torch.testing.assert_close(
            rgrad, -2 * hyp.log_map(p.detach(), q, model), rtol=1e-9, atol=1e-9
        )


# ---------------------------------------------------------------------- coordinates


def test_coordinates_equal_the_naive_formulas_where_they_are_accurate():
    g = _gen(12)
    X = _points(60, 4, g)
    theta = _unit(4, g, 9).T  # (d, L)
    ghsw = torch.atanh((X[:, 1:] @ theta) / X[:, :1]).T
    hhsw = -torch.log(X[:, :1] - X[:, 1:] @ theta).T
    torch.testing.assert_close(hyp.geodesic_coordinates(X, theta), ghsw, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        hyp.horospherical_coordinates(X, theta), hhsw, rtol=1e-12, atol=1e-12
    )
    P = hyp.lorentz_to_poincare(X)
    torch.testing.assert_close(
        hyp.geodesic_coordinates(P, theta, "poincare"), ghsw, rtol=1e-12, atol=1e-12
    )
    busemann = torch.log(((theta.T[:, None] - P[None]) ** 2).sum(-1) / (1 - (P * P).sum(-1)))
    torch.testing.assert_close(
        hyp.horospherical_coordinates(P, theta, "poincare"), -busemann, rtol=1e-12, atol=1e-12
    )


def test_coordinates_of_points_on_the_geodesic_are_their_parameter():
    g = _gen(13)
    theta = _unit(3, g)
    # up to |t| = 15, where rounding z (of size sinh t) moves the point off the geodesic by
    # under 1e-9 and its coordinate by under 1e-18 (farther out: the mpmath test below)
    t = torch.linspace(-15, 15, 13, dtype=F64)
    X = hyp.exp0(t[:, None] * theta)
    torch.testing.assert_close(
        hyp.geodesic_coordinates(X, theta[:, None])[0], t, rtol=1e-13, atol=1e-13
    )
    torch.testing.assert_close(
        hyp.horospherical_coordinates(X, theta[:, None])[0], t, rtol=1e-13, atol=1e-13
    )


def test_geodesic_coordinate_is_the_nearest_point_of_the_geodesic():
    """Independent of the formula: the distance to gamma(s) is smallest at s = t."""
    g = _gen(14)
    X = _points(20, 3, g)
    theta = _unit(3, g)
    t = hyp.geodesic_coordinates(X, theta[:, None])[0]
    for delta in (1e-3, -1e-3):
        near = hyp.distance(X, hyp.exp0(t[:, None] * theta), "lorentz")
        off = hyp.distance(X, hyp.exp0((t + delta)[:, None] * theta), "lorentz")
        assert bool((off > near).all())


def test_horospherical_coordinate_is_minus_the_busemann_limit():
    """-B(x) = -lim_T (d(x, gamma(T)) - T), the limit taken at T = 60 in mpmath."""
    g = _gen(15)
    X = _points(5, 3, g)
    theta = _unit(3, g)
    got = hyp.horospherical_coordinates(X, theta[:, None])[0]
    T = mp.mpf(60)
    gamma = [mp.sinh(T) * mp.mpf(float(c)) for c in theta / theta.norm()]
    for x, value in zip(X, got, strict=True):
        z = _mp_vec(x[1:])
        ip = _mp_x0(z) * mp.cosh(T) - sum(a * b for a, b in zip(z, gamma, strict=True))
        assert abs(-(mp.acosh(ip) - T) - float(value)) < 1e-12


@pytest.mark.parametrize("r", [5.0, 20.0, 40.0, 300.0])
@pytest.mark.parametrize("tilt", [0.0, 1e-9, 1e-5, 1e-2])
def test_coordinates_far_out_are_finite_and_accurate(dtype, r, tilt):
    """Where arctanh(<x, theta> / x_0) rounds to Inf or NaN: finite, and exact for inputs
    within rounding (the error is at most that of moving z by a few ulps across the geodesic)."""
    if r > hyp.max_radius(dtype):
        pytest.skip("beyond the dtype's range (tested to raise below)")
    g = _gen(16)
    theta = _unit(3, g)
    z = (math.sinh(r) * (theta + tilt * torch.randn(3, generator=g, dtype=F64))).to(dtype)
    X = hyp.from_spatial(z, "lorentz")[None]
    th = theta[:, None].to(dtype)
    gh = hyp.geodesic_coordinates(X, th).item()
    hh = hyp.horospherical_coordinates(X, th).item()
    g_ref, h_ref = _mp_coords(z, th[:, 0])
    assert math.isfinite(gh)
    assert math.isfinite(hh)
    eps = torch.finfo(dtype).eps
    # sensitivity of the coordinates to moving z by eps |z| across the geodesic
    perp2 = max(float(((z.double() - (z.double() @ theta) * theta) ** 2).sum()), 0.0)
    bound = 20 * eps * (1 + abs(h_ref)) + 8 * eps * math.sinh(r) * (
        math.sqrt(perp2) + eps * math.sinh(r)
    ) / (1 + perp2)
    assert abs(hh - h_ref) <= bound
    assert abs(gh - g_ref) <= bound


def test_coordinates_and_distances_have_finite_gradients_at_the_origin_and_far_out():
    g = _gen(17)
    theta = _unit(3, g)
    for r in (0.0, 30.0):
        z = (math.sinh(r) * theta).requires_grad_(True)
        X = hyp.from_spatial(z, "lorentz")[None]
        total = hyp.geodesic_coordinates(X, theta[:, None]).sum()
        total = total + hyp.horospherical_coordinates(X, theta[:, None]).sum()
        total = total + hyp.distance(X[0], hyp.origin(3, dtype=F64), "lorentz")
        total = total + hyp.distance(X[0], X[0].detach(), "lorentz")
        (grad,) = torch.autograd.grad(total, z)
        assert bool(torch.isfinite(grad).all())


def test_gradcheck_of_coordinates_and_distances():
    g = _gen(18)
    Z = (0.7 * torch.randn(6, 3, generator=g, dtype=F64)).requires_grad_(True)
    theta = _unit(3, g, 4).T

    def f(Z):
        X = hyp.from_spatial(Z, "lorentz")
        return (
            hyp.geodesic_coordinates(X, theta),
            hyp.horospherical_coordinates(hyp.from_spatial(Z, "poincare"), theta, "poincare"),
            hyp.distance(X[:3], X[3:], "lorentz"),
        )

    assert torch.autograd.gradcheck(f, (Z,))
    assert torch.autograd.gradgradcheck(f, (Z,))


# ----------------------------------------------------------------------- bad input


def test_points_off_the_hyperboloid_raise_naming_the_argument():
    X = _points(5, 3, _gen(19))
    hyp.check_lorentz(X, "X_s")
    off = X.clone()
    off[2, 0] *= 1 + 1e-3
    with pytest.raises(ValueError, match=r"X_s must lie on the hyperboloid"):
        hyp.check_lorentz(off, "X_s")
    hyp.check_lorentz(X * (1 + 1e-8), "X_s")  # within the tolerance
    with pytest.raises(ValueError, match=r"X_t must lie on the upper sheet"):
        hyp.check_lorentz(-X, "X_t")
    nan = X.clone()
    nan[0, 1] = math.nan
    with pytest.raises(ValueError, match="X_s"):
        hyp.check_lorentz(nan, "X_s")
    with pytest.raises(ValueError, match=r"d\+1 >= 2"):
        hyp.check_lorentz(X[:, :1], "X_s")
    hyp.check_lorentz(off, "X_s", validate=False)  # the value checks only


def test_points_outside_the_ball_raise_naming_the_argument():
    Y = hyp.lorentz_to_poincare(_points(5, 3, _gen(20)))
    hyp.check_poincare(Y, "X_s")
    out = Y.clone()
    out[1] = out[1] / out[1].norm() * 1.0001
    with pytest.raises(ValueError, match=r"X_s must lie in the open unit ball.*norm 1"):
        hyp.check_poincare(out, "X_s")


def test_points_beyond_the_dtypes_range_raise(dtype):
    r = hyp.max_radius(dtype) + 1
    z = torch.tensor([math.sinh(r) / 2, 0.0], dtype=torch.float64)
    X = torch.cat([torch.tensor([math.cosh(r) / 2], dtype=torch.float64), z]).to(dtype)
    with pytest.raises(ValueError, match=r"X_s has a point at hyperbolic distance .* farther than"):
        hyp.check_lorentz(X[None], "X_s")


def test_a_point_the_ball_cannot_hold_raises_on_conversion():
    with pytest.raises(ValueError, match="rounds onto the boundary of the Poincare ball"):
        hyp.lorentz_to_poincare(hyp.exp0(torch.tensor([[40.0, 0.0]], dtype=F64)))


def test_an_overflowing_or_nan_step_raises():
    x = hyp.origin(2, dtype=F64)
    with pytest.raises(ValueError, match="the exponential map would overflow"):
        hyp.exp_map(x, torch.tensor([0.0, 400.0, 0.0], dtype=F64), "lorentz")
    with pytest.raises(ValueError, match="v must be finite"):
        hyp.exp_map(x, torch.tensor([0.0, math.nan, 0.0], dtype=F64), "lorentz")
