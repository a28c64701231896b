"""``tsw.riemannian_step`` against the textbook exponential maps and Riemannian gradients."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
import scipy.linalg as sl
import torch

import tsw
from tsw.curved import _hyperbolic as hyp
from tsw.curved import _spd as spd

F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_euclidean_and_sphere_steps():
    g = _gen(0)
    X, G = torch.randn(5, 3, generator=g, dtype=F64), torch.randn(5, 3, generator=g, dtype=F64)
    torch.testing.assert_close(tsw.riemannian_step(X, G, 0.1, manifold="euclidean"), X - 0.1 * G)
    S = torch.nn.functional.normalize(X, dim=-1)
    moved = tsw.riemannian_step(S, G, 0.3, manifold="sphere")
    tangent = G - (G * S).sum(-1, keepdim=True) * S
    n = 0.3 * tangent.norm(dim=-1, keepdim=True)
    ref = torch.cos(n) * S - torch.sin(n) * tangent / tangent.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(moved, ref)
    # the geodesic distance moved is lr |tangent gradient|
    angle = torch.arccos((moved * S).sum(-1).clamp(-1, 1))
    torch.testing.assert_close(angle, n[:, 0])
    assert torch.equal(tsw.riemannian_step(S, torch.zeros_like(S), 0.3, manifold="sphere"), S)


def _target_loss(model):
    target = hyp.exp0(torch.tensor([[0.3, -0.7, 1.1]], dtype=F64), model)

    def f(X):
        return (hyp.distance(X, target, model) ** 2).sum()

    return f


def test_lorentz_step_is_the_textbook_exponential_of_the_riemannian_gradient():
    X = hyp.exp0(torch.randn(6, 3, generator=_gen(1), dtype=F64))
    Xg = X.clone().requires_grad_(True)
    f = _target_loss("lorentz")
    (G,) = torch.autograd.grad(f(Xg), Xg)
    moved = tsw.riemannian_step(X, G, 0.2, manifold="lorentz")
    # textbook: h = J G projected onto the tangent space, exp_x(v) = cosh|v| x + sinh|v| v/|v|
    h = torch.cat([-G[:, :1], G[:, 1:]], dim=1)
    v = -0.2 * (h + hyp.minkowski_inner(X, h)[:, None] * X)
    n = torch.sqrt(hyp.minkowski_inner(v, v))[:, None]
    ref = torch.cosh(n) * X + torch.sinh(n) * v / n
    # (the textbook form cancels to about eps x_0^2 here: x_0 up to 30)
    torch.testing.assert_close(moved, ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(hyp.minkowski_inner(moved, moved), -torch.ones(6, dtype=F64))
    # for d(x, t)^2 the Riemannian gradient is -2 log_x(t): a step of 1/2 lands on t
    target = hyp.exp0(torch.tensor([[0.3, -0.7, 1.1]], dtype=F64))
    torch.testing.assert_close(
        tsw.riemannian_step(X, G, 0.5, manifold="lorentz"), target.expand(6, 4)
    )


def _mobius_add(x, y):
    xy, x2, y2 = (
        (x * y).sum(-1, keepdim=True),
        (x * x).sum(-1, keepdim=True),
        (y * y).sum(-1, keepdim=True),
    )
    return ((1 + 2 * xy + y2) * x + (1 - x2) * y) / (1 + 2 * xy + x2 * y2)


def test_poincare_step_is_the_mobius_exponential_and_agrees_with_lorentz():
    X = hyp.exp0(torch.randn(6, 3, generator=_gen(2), dtype=F64))
    P = hyp.lorentz_to_poincare(X)
    Pg = P.clone().requires_grad_(True)
    (G,) = torch.autograd.grad(_target_loss("poincare")(Pg), Pg)
    moved = tsw.riemannian_step(P, G, 0.2, manifold="poincare")
    q = 1 - (P * P).sum(-1, keepdim=True)
    v = -0.2 * q**2 / 4 * G
    lam = 2 / q
    n = v.norm(dim=-1, keepdim=True)
    ref = _mobius_add(P, torch.tanh(lam * n / 2) * v / n)
    torch.testing.assert_close(moved, ref, rtol=1e-11, atol=1e-12)
    # the same loss in the two models: the same step
    Xg = X.clone().requires_grad_(True)
    (GL,) = torch.autograd.grad(_target_loss("lorentz")(Xg), Xg)
    lorentz = tsw.riemannian_step(X, GL, 0.2, manifold="lorentz")
    torch.testing.assert_close(hyp.lorentz_to_poincare(lorentz), moved, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("model", ["lorentz", "poincare"])
def test_steps_far_from_the_origin_keep_their_length(model):
    """At r = 15 (Poincare) or 25 (Lorentz), where |v_1:|^2 - v_0^2 cancels to nothing in
    float64, the step moves its Riemannian length lr |grad f| (mpmath)."""
    mp.mp.dps = 60
    r = 25.0 if model == "lorentz" else 15.0
    theta = torch.tensor([0.6, 0.8, 0.0], dtype=F64)
    X = hyp.exp0(r * theta[None], model)
    rgrad = torch.tensor([[0.3, -0.5, 0.2]], dtype=F64)  # a unit-free direction in R^3
    # the Euclidean gradient of f(x) = <w, log_0 ...>: any G; its Riemannian norm by the model
    if model == "lorentz":
        G = torch.cat([torch.zeros(1, 1, dtype=F64), rgrad], dim=1)
        z = X[:, 1:]
        norm2 = (rgrad**2).sum() + (z @ rgrad.T).squeeze() ** 2  # g^T (I + z z^T) g
    else:
        G = rgrad
        q = 1 - (X * X).sum()
        norm2 = (q / 2) ** 2 * (rgrad**2).sum()
    lr = 0.1 / math.sqrt(float(norm2))  # a step of Riemannian length 0.1
    moved = tsw.riemannian_step(X, G, lr, manifold=model)
    z1 = hyp.to_spatial(X, model)[0]
    z2 = hyp.to_spatial(moved, model)[0]
    a, b = [mp.mpf(float(v)) for v in z1], [mp.mpf(float(v)) for v in z2]
    x0, y0 = mp.sqrt(1 + sum(v * v for v in a)), mp.sqrt(1 + sum(v * v for v in b))
    c2 = -((x0 - y0) ** 2) + sum((p - q) ** 2 for p, q in zip(a, b, strict=True))
    assert abs(float(2 * mp.asinh(mp.sqrt(c2) / 2)) - 0.1) < 1e-6


def test_spd_affine_step_is_the_textbook_exponential():
    g = _gen(3)
    M = torch.randn(4, 3, 3, generator=g, dtype=F64)
    X = M @ M.mT + 0.3 * torch.eye(3, dtype=F64)
    G = spd.symmetrize(torch.randn(4, 3, 3, generator=g, dtype=F64))
    moved = tsw.riemannian_step(X, G, 0.1, manifold="spd_affine")
    ref = []
    for x, gg in zip(X.numpy(), G.numpy(), strict=True):
        r = np.real(sl.sqrtm(x))
        ref.append(r @ sl.expm(-0.1 * r @ gg @ r) @ r)
    np.testing.assert_allclose(moved.numpy(), np.stack(ref), rtol=1e-10, atol=1e-11)
    torch.testing.assert_close(moved, spd.spd_exp_map(X, -0.1 * X @ G @ X, "affine"))


def test_spd_log_step_is_gradient_descent_on_the_logarithm():
    """exp(log X - lr grad_Y f(exp Y)): the gradient in Y by autograd through matrix_exp."""
    g = _gen(4)
    M = torch.randn(3, 3, 3, generator=g, dtype=F64)
    X = M @ M.mT + 0.3 * torch.eye(3, dtype=F64)
    W = spd.symmetrize(torch.randn(3, 3, 3, generator=g, dtype=F64))

    def f(X):
        return (X * W).sum() + (X @ X).diagonal(dim1=-2, dim2=-1).sum()

    Xg = X.clone().requires_grad_(True)
    (G,) = torch.autograd.grad(f(Xg), Xg)
    moved = tsw.riemannian_step(X, G, 0.05, manifold="spd_log")
    Y = torch.from_numpy(np.stack([sl.logm(x).real for x in X.numpy()])).requires_grad_(True)
    (GY,) = torch.autograd.grad(f(torch.linalg.matrix_exp(Y)), Y)
    ref = torch.linalg.matrix_exp(Y.detach() - 0.05 * spd.symmetrize(GY))
    torch.testing.assert_close(moved, ref, rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize(
    ("fn", "manifold", "make"),
    [
        (tsw.hhsw, "lorentz", lambda v: hyp.exp0(v)),
        (tsw.ghsw, "poincare", lambda v: hyp.exp0(v, "poincare")),
    ],
)
def test_a_gradient_flow_decreases_the_distance(fn, manifold, make):
    g = _gen(5)
    Y = make(0.3 * torch.randn(60, 2, generator=g, dtype=F64) + 1.0)
    X = make(0.3 * torch.randn(60, 2, generator=g, dtype=F64))
    model = "lorentz" if manifold == "lorentz" else "poincare"
    start = float(fn(X, Y, seed=0, model=model))
    lr = 20.0 if manifold == "lorentz" else 60.0
    for it in range(40):
        X = X.requires_grad_(True)
        (G,) = torch.autograd.grad(fn(X, Y, seed=it, power=True, model=model), X)
        X = tsw.riemannian_step(X.detach(), G, lr, manifold=manifold)
    assert float(fn(X, Y, seed=0, model=model)) < start / 4


def test_an_spd_flow_decreases_the_distance():
    g = _gen(6)
    M = torch.randn(40, 2, 2, generator=g, dtype=F64)
    Y = 2 * (M @ M.mT / 2 + 0.5 * torch.eye(2, dtype=F64))
    M = torch.randn(40, 2, 2, generator=g, dtype=F64)
    X = M @ M.mT / 2 + 0.5 * torch.eye(2, dtype=F64)
    for fn, manifold in ((tsw.spdsw, "spd_log"), (tsw.hspdsw, "spd_affine")):
        Z = X.clone()
        start = float(fn(Z, Y, seed=0))
        for it in range(40):
            Z = Z.requires_grad_(True)
            (G,) = torch.autograd.grad(fn(Z, Y, seed=it, power=True), Z)
            Z = tsw.riemannian_step(Z.detach(), G, 20.0, manifold=manifold)
        assert float(fn(Z, Y, seed=0)) < start / 4, fn.__name__


def test_bad_input_raises():
    X = torch.zeros(3, 2, dtype=F64)
    with pytest.raises(ValueError, match=r"grad must have the shape of x \(3, 2\)"):
        tsw.riemannian_step(X, torch.zeros(3, 3, dtype=F64), 0.1, manifold="euclidean")
    with pytest.raises(ValueError, match="lr must be a finite non-negative number; got -1"):
        tsw.riemannian_step(X, X, -1, manifold="euclidean")
    with pytest.raises(ValueError, match=r"manifold must be one of 'euclidean', 'sphere'"):
        tsw.riemannian_step(X, X, 0.1, manifold="hyperbolic")
    with pytest.raises(TypeError, match=r"x must be a torch\.Tensor"):
        tsw.riemannian_step(X.numpy(), X, 0.1, manifold="euclidean")
    o = hyp.origin(2, dtype=F64)[None]
    with pytest.raises(ValueError, match="the exponential map would overflow"):
        tsw.riemannian_step(o, torch.tensor([[0.0, 1.0, 0.0]], dtype=F64), 1e3, manifold="lorentz")


def test_a_poincare_step_beyond_what_the_ball_holds_raises():
    """float32 holds the ball's points up to about 16.6 from the origin: a step to 20 raises
    (it would otherwise round onto the boundary, at infinite distance)."""
    y = hyp.exp0(torch.tensor([[15.0, 0.0]]), "poincare")
    (lam,) = 2 / (1 - (y * y).sum(-1))
    G = -torch.tensor([[1.0, 0.0]])  # outwards; the step's Riemannian length is lr |g| / lam
    with pytest.raises(ValueError, match="rounds onto the boundary of the Poincare ball"):
        tsw.riemannian_step(y, G, float(5.0 * lam), manifold="poincare")
    moved = tsw.riemannian_step(y, G, float(0.5 * lam), manifold="poincare")
    assert float(moved.norm()) < 1
    assert abs(float(hyp.radius(moved, "poincare")) - 15.5) < 0.05


@pytest.mark.parametrize("manifold", ["spd_affine", "spd_log"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_an_spd_step_whose_exponential_overflows_or_underflows_raises(manifold, sign):
    """A step whose matrix exponential leaves the dtype raises instead of returning Inf/NaN
    (or a singular matrix); a shorter step along the same gradient stays SPD."""
    X = torch.diag(torch.tensor([1.0, 2.0], dtype=F64)).expand(3, 2, 2).clone()
    G = sign * torch.tensor([[1.0, 0.3], [0.3, -2.0]], dtype=F64).expand(3, 2, 2)
    with pytest.raises(ValueError, match="the step leaves the SPD matrices of dtype"):
        tsw.riemannian_step(X, G, 1e3, manifold=manifold)
    moved = tsw.riemannian_step(X, G, 1.0, manifold=manifold)
    assert bool(torch.isfinite(moved).all())
    assert float(torch.linalg.eigvalsh(moved).min()) > 0
