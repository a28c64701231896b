"""GHSW and HHSW (``tsw.ghsw``, ``tsw.hhsw``) against the textbook coordinates and POT.

The references are independent of the library's coordinates: ``arctanh(<x_1:, theta> /
x_0)`` and ``-log(x_0 - <x_1:, theta>)`` (or the ball's Busemann function) evaluated
directly, and ``ot.wasserstein_1d`` on them; far from the origin, where those formulas
round to Inf or NaN, mpmath at 80 digits.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import ot
import pytest
import torch

import tsw
from tsw.curved import _hyperbolic as hyp

F64 = torch.float64
FUNCTIONS = [pytest.param(tsw.ghsw, id="ghsw"), pytest.param(tsw.hhsw, id="hhsw")]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _data(N=12, M=9, d=3, seed=0, spread=1.0, batch=None):
    g = _gen(seed)
    lead = () if batch is None else (batch,)
    X = hyp.exp0(spread * torch.randn(*lead, N, d, generator=g, dtype=F64))
    Y = hyp.exp0(spread * torch.randn(*lead, M, d, generator=g, dtype=F64) + 0.4)
    a = torch.rand(*lead, N, generator=g, dtype=F64) + 0.1
    b = torch.rand(*lead, M, generator=g, dtype=F64) + 0.1
    # unnormalised, equal totals
    return X, Y, 2.5 * a / a.sum(-1, keepdim=True), 2.5 * b / b.sum(-1, keepdim=True)


def _textbook(fn, X: torch.Tensor, theta: torch.Tensor) -> np.ndarray:
    """The coordinates (L, n) by the papers' formulas, in numpy."""
    x = X.numpy()
    u = x[:, 1:] @ theta.numpy()  # (n, L)
    if fn is tsw.ghsw:
        return np.arctanh(u / x[:, :1]).T
    return -np.log(x[:, :1] - u).T


def _reference(fn, X, Y, a, b, theta, p):
    cx, cy = _textbook(fn, X, theta), _textbook(fn, Y, theta)
    costs = [
        ot.wasserstein_1d(cx[k], cy[k], a.numpy() / a.sum().item(), b.numpy() / b.sum().item(), p=p)
        for k in range(theta.shape[1])
    ]
    return (a.sum().item() * np.mean(costs)) ** (1 / p)


@pytest.mark.parametrize("fn", FUNCTIONS)
@pytest.mark.parametrize("p", [1.0, 2.0, 3.5])
def test_values_equal_pot_on_the_textbook_coordinates(fn, p):
    X, Y, a, b = _data()
    theta = tsw.sample_projections(3, 8, seed=1, dtype=F64)
    value = fn(X, Y, a, b, projections=theta, p=p)
    assert abs(float(value) - _reference(fn, X, Y, a, b, theta, p)) < 1e-10
    power = fn(X, Y, a, b, projections=theta, p=p, power=True)
    assert abs(float(power) - _reference(fn, X, Y, a, b, theta, p) ** p) < 1e-10


def test_hhsw_in_the_ball_equals_the_balls_busemann_function():
    """B(y) = log(|theta - y|^2 / (1 - |y|^2)) (Bonet et al.'s Poincare form)."""
    X, Y, a, b = _data(seed=2)
    P, Q = hyp.lorentz_to_poincare(X), hyp.lorentz_to_poincare(Y)
    theta = tsw.sample_projections(3, 5, seed=3, dtype=F64)

    def busemann(Z):
        z = Z.numpy()
        diff = ((theta.numpy().T[:, None, :] - z[None]) ** 2).sum(-1)
        return np.log(diff / (1 - (z * z).sum(-1)))

    bx, by = busemann(P), busemann(Q)
    ref = np.mean(
        [ot.wasserstein_1d(bx[k], by[k], a.numpy() / 2.5, b.numpy() / 2.5, p=2) for k in range(5)]
    )
    value = tsw.hhsw(P, Q, a, b, projections=theta, model="poincare")
    assert abs(float(value) - math.sqrt(2.5 * ref)) < 1e-10


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_poincare_equals_lorentz(fn):
    X, Y, a, b = _data(seed=4, spread=2.0)
    P, Q = hyp.lorentz_to_poincare(X), hyp.lorentz_to_poincare(Y)
    for kw in ({"seed": 0}, {"projections": tsw.sample_projections(3, 6, seed=5, dtype=F64)}):
        lorentz = fn(X, Y, a, b, **kw)
        poincare = fn(P, Q, a, b, model="poincare", **kw)
        torch.testing.assert_close(poincare, lorentz, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_the_directions_are_those_of_sw(fn):
    X, Y, _, _ = _data(seed=6)
    _, log = fn(X, Y, n_projections=7, seed=3, log=True)
    torch.testing.assert_close(log["projections"], tsw.sample_projections(3, 7, seed=3, dtype=F64))
    assert log["projected_emds"].shape == (7,)
    # log["trees"] passed back recomputes the value
    torch.testing.assert_close(
        fn(X, Y, projections=log["trees"]), fn(X, Y, n_projections=7, seed=3)
    )


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_identical_measures_give_exactly_zero(fn, dtype):
    """Bit-identical coordinates for the two supports: the vectorised arctanh / log round an
    element differently by its position in the buffer, so each support is evaluated apart
    (also on the general path of the pairs far out near a direction's geodesic)."""
    g = _gen(25)
    theta = tsw.sample_projections(2, 20, seed=26, dtype=dtype)
    far = hyp.from_spatial(math.sinh(12.0) * theta[:, :3].T.double(), "lorentz").to(dtype)
    X = torch.cat([hyp.exp0(torch.randn(10, 2, generator=g, dtype=F64)).to(dtype), far])
    for model, points in (("lorentz", X), ("poincare", hyp.lorentz_to_poincare(X))):
        assert float(fn(points, points.clone(), projections=theta, model=model)) == 0.0
        assert float(fn(points, points.clone(), n_projections=7, seed=1, model=model)) == 0.0


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_rotations_about_the_origin_with_the_directions(fn):
    X, Y, a, b = _data(seed=7)
    theta = tsw.sample_projections(3, 6, seed=8, dtype=F64)
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=_gen(9), dtype=F64))
    R = torch.block_diag(torch.ones(1, 1, dtype=F64), q)  # fixes the origin
    base = fn(X, Y, a, b, projections=theta)
    torch.testing.assert_close(fn(X @ R.T, Y @ R.T, a, b, projections=q @ theta), base)
    assert not torch.allclose(fn(X @ R.T, Y @ R.T, a, b, projections=theta), base, rtol=1e-4)


def _boost(s: float) -> torch.Tensor:
    """A Lorentz boost of rapidity ``s`` along the first spatial axis of H^3 (an isometry)."""
    B = torch.eye(4, dtype=F64)
    B[0, 0] = B[1, 1] = math.cosh(s)
    B[0, 1] = B[1, 0] = math.sinh(s)
    return B


def test_hhsw_is_invariant_under_boosts_with_the_directions_at_infinity():
    """B_theta(g x) = B_theta'(x) + const, theta' the direction of g^-1 (1, theta)."""
    X, Y, a, b = _data(seed=10)
    theta = tsw.sample_projections(3, 5, seed=11, dtype=F64)
    g = _boost(0.7)
    ideal = torch.cat([torch.ones(1, 5, dtype=F64), theta])  # (1, theta) for each direction
    back = torch.linalg.solve(g, ideal)
    theta_back = back[1:] / back[:1]
    base = tsw.hhsw(X, Y, a, b, projections=theta_back)
    moved = tsw.hhsw(X @ g.T, Y @ g.T, a, b, projections=theta)
    torch.testing.assert_close(moved, base, rtol=1e-10, atol=1e-12)
    # GHSW's geodesics through the origin do not move along: no such invariance
    g_base = tsw.ghsw(X, Y, a, b, projections=theta_back)
    assert not torch.allclose(tsw.ghsw(X @ g.T, Y @ g.T, a, b, projections=theta), g_base)


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_batched_equals_looped_and_per_item_directions(fn):
    X, Y, a, b = _data(N=6, M=6, batch=3, seed=12)
    theta = tsw.sample_projections(3, 5, seed=13, dtype=F64)
    batched = fn(X, Y, a, b, projections=theta)
    loop = torch.stack([fn(X[i], Y[i], a[i], b[i], projections=theta) for i in range(3)])
    torch.testing.assert_close(batched, loop)
    per = torch.stack([tsw.sample_projections(3, 4, seed=20 + i, dtype=F64) for i in range(3)])
    batched = fn(X, Y, a, b, projections=per)
    loop = torch.stack([fn(X[i], Y[i], a[i], b[i], projections=per[i]) for i in range(3)])
    torch.testing.assert_close(batched, loop)


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_blocks_do_not_change_value_or_gradient(fn):
    X, Y, a, b = _data(N=40, M=30, seed=14)
    grads = []
    values = []
    for chunk in (None, 3):
        Xg = X.clone().requires_grad_(True)
        v = fn(Xg, Y, a, b, n_projections=10, seed=1, chunk_size=chunk)
        values.append(v)
        grads.append(torch.autograd.grad(v, Xg)[0])
    torch.testing.assert_close(values[0], values[1])
    torch.testing.assert_close(grads[0], grads[1])


# -------------------------------------------------------------------- far out, near the boundary


def _mp_coordinate(fn, z, theta):
    zz = [mp.mpf(float(v)) for v in z]
    tt = [mp.mpf(float(v)) for v in theta]
    norm = mp.sqrt(sum(v * v for v in tt))
    u = sum(x * t for x, t in zip(zz, tt, strict=True)) / norm
    x0 = mp.sqrt(1 + sum(v * v for v in zz))
    return float(mp.atanh(u / x0)) if fn is tsw.ghsw else float(-mp.log(x0 - u))


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_points_far_out_along_the_directions_keep_exact_values(fn):
    """At r = 25-30 on (or within 1e-9 rad of) the directions' geodesics the textbook
    coordinates round to Inf or NaN; the values equal those of the exact coordinates."""
    mp.mp.dps = 80
    g = _gen(15)
    theta = tsw.sample_projections(3, 3, seed=16, dtype=F64)
    t = torch.tensor([25.0, 27.0, 30.0, 26.0], dtype=F64)
    tilt = 1e-9 * torch.randn(4, 3, generator=g, dtype=F64)
    Z = torch.sinh(t)[:, None] * (theta[:, [0, 1, 2, 0]].T + tilt)
    X = hyp.from_spatial(Z, "lorentz")
    Y = hyp.exp0(torch.randn(3, 3, generator=g, dtype=F64))
    with np.errstate(divide="ignore", invalid="ignore"):
        naive = torch.from_numpy(_textbook(fn, X, theta))
    assert not bool(torch.isfinite(naive).all())  # the textbook form fails here
    value = fn(X, Y, projections=theta, p=1)
    cx = np.array([[_mp_coordinate(fn, z, theta[:, k]) for z in Z] for k in range(3)])
    cy = _textbook(fn, Y, theta)
    ref = np.mean([ot.wasserstein_1d(cx[k], cy[k], p=1) for k in range(3)])
    assert math.isfinite(float(value))
    assert abs(float(value) - ref) < 1e-9 * ref


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_points_near_the_balls_boundary(fn):
    """|y| = 1 - 1e-12 (r = 28.3) in float64: finite, equal to the hyperboloid's value."""
    g = _gen(17)
    theta = tsw.sample_projections(2, 4, seed=18, dtype=F64)
    direction = theta[:, :2].T
    P = (1 - 1e-12) * direction
    P = torch.cat([P, 0.5 * torch.randn(3, 2, generator=g, dtype=F64).tanh()])
    Q = 0.3 * torch.randn(4, 2, generator=g, dtype=F64).tanh()
    value = fn(P, Q, projections=theta, model="poincare")
    lorentz = fn(hyp.poincare_to_lorentz(P), hyp.poincare_to_lorentz(Q), projections=theta)
    assert math.isfinite(float(value))
    torch.testing.assert_close(value, lorentz, rtol=1e-12, atol=0)


# ------------------------------------------------------------------------------ gradients


@pytest.mark.parametrize("fn", FUNCTIONS)
@pytest.mark.parametrize("model", ["lorentz", "poincare"])
def test_gradcheck_and_gradgradcheck(fn, model):
    X, Y, a, b = _data(N=5, M=4, seed=19)
    if model == "poincare":
        X, Y = hyp.lorentz_to_poincare(X), hyp.lorentz_to_poincare(Y)
    theta = tsw.sample_projections(3, 4, seed=20, dtype=F64)

    def f(X, Y, a, b):
        # validate=False: finite differences step off the hyperboloid (its x_0 is not read)
        return fn(X, Y, a, b, projections=theta, model=model, validate=False)

    inputs = tuple(t.clone().requires_grad_(True) for t in (X, Y))
    assert torch.autograd.gradcheck(lambda X, Y: f(X, Y, a, b), inputs)
    assert torch.autograd.gradgradcheck(lambda X, Y: f(X, Y, a, b), inputs)


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_finite_gradients_at_the_origin_identical_and_far_points(fn):
    theta = tsw.sample_projections(3, 6, seed=21, dtype=F64)
    far = hyp.from_spatial(math.sinh(30.0) * theta[:, :2].T, "lorentz")
    X = torch.cat([hyp.origin(3, dtype=F64)[None], far, hyp.exp0(torch.ones(1, 3, dtype=F64))])
    for Y in (X.clone(), hyp.exp0(torch.zeros(2, 3, dtype=F64))):
        Xg = X.clone().requires_grad_(True)
        value = fn(Xg, Y, projections=theta)
        (grad,) = torch.autograd.grad(value, Xg)
        assert bool(torch.isfinite(grad).all())
        assert bool(torch.isfinite(value))


def test_loss_modules_equal_the_functions():
    X, Y, a, b = _data(batch=2, seed=22)
    for cls, fn in ((tsw.nn.GHSWLoss, tsw.ghsw), (tsw.nn.HHSWLoss, tsw.hhsw)):
        loss = cls(n_projections=9, p=1, seed=4, resample=False, reduction="none")
        torch.testing.assert_close(loss(X, Y, a, b), fn(X, Y, a, b, n_projections=9, p=1, seed=4))
        ball = cls(model="poincare", seed=4, resample=False)
        P, Q = hyp.lorentz_to_poincare(X), hyp.lorentz_to_poincare(Y)
        torch.testing.assert_close(ball(P, Q), fn(X, Y, seed=4).mean())


def test_numpy_in_numpy_out():
    X, Y, _, _ = _data(seed=23)
    value = tsw.hhsw(X.numpy(), Y.numpy(), seed=0)
    assert isinstance(value, np.floating)
    assert abs(float(value) - float(tsw.hhsw(X, Y, seed=0))) < 1e-15


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_bad_points_raise_naming_the_argument(fn):
    X, Y, _, _ = _data(seed=24)
    off = X.clone()
    off[0, 0] += 0.5
    with pytest.raises(ValueError, match="X_s must lie on the hyperboloid"):
        fn(off, Y, seed=0)
    with pytest.raises(ValueError, match="X_t must lie on the upper sheet"):
        fn(X, -Y, seed=0)
    P = hyp.lorentz_to_poincare(X)
    with pytest.raises(ValueError, match="X_t must lie in the open unit ball"):
        fn(P, 2 * P, seed=0, model="poincare")
    with pytest.raises(ValueError, match="model must be one of 'lorentz', 'poincare'; got 'klein'"):
        fn(X, Y, seed=0, model="klein")
    # Lorentz points read as Poincare points are outside the ball
    with pytest.raises(ValueError, match="X_s must lie in the open unit ball"):
        fn(X, Y, seed=0, model="poincare")
    with pytest.raises(ValueError, match=r"projections must have shape \(d, L\) with d=3"):
        fn(X, Y, projections=torch.ones(4, 2, dtype=F64) / 2)
    with pytest.raises(ValueError, match="projections must have unit-norm columns"):
        fn(X, Y, projections=torch.ones(3, 2, dtype=F64))
    far = hyp.from_spatial(torch.tensor([[1e19, 0.0, 0.0]]), "lorentz")  # float32, r = 44.4
    with pytest.raises(ValueError, match=r"X_s has a point at hyperbolic distance 44.4"):
        fn(far, Y.float(), seed=0)
