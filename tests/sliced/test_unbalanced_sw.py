"""partial_sw and unbalanced_sw (``tsw.sliced._unbalanced_sw``): unequal masses against POT.

partial_sw is checked against POT's exact partial LP (``ot.partial.partial_wasserstein2``
on the one-dimensional cost matrix of each slice), which is independent of the 1-D
solver the function wraps. unbalanced_sw is checked against POT's own
``ot.unbalanced.sliced_unbalanced_ot`` (same projections) and, with hard marginals,
against :func:`tsw.sw`.
"""

from __future__ import annotations

import math
import re

import numpy as np
import ot
import pytest
import torch
from _reference import data

import tsw

F64 = torch.float64


def cloud(seed, N=7, M=5, d=3, batch=None):
    g = torch.Generator().manual_seed(seed)
    lead = () if batch is None else (batch,)
    X = torch.randn(*lead, N, d, generator=g, dtype=F64)
    Y = 0.8 * torch.randn(*lead, M, d, generator=g, dtype=F64) + 0.5
    return X, Y


# --------------------------------------------------------------------------- partial_sw


def partial_lp(X, Y, P, k, p):
    """(mean over slices of the exact partial LP with atoms of mass 1/k) ** (1/p)."""
    costs = []
    for theta in P.T.numpy():
        u, v = X.numpy() @ theta, Y.numpy() @ theta
        C = np.abs(u[:, None] - v[None, :]) ** p
        n, m = len(u), len(v)
        # integer masses (exact totals), then atoms of mass 1/k
        costs.append(ot.partial.partial_wasserstein2(np.ones(n), np.ones(m), C, m=k) / k)
    return np.mean(costs) ** (1 / p)


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("seed", range(4))
def test_partial_sw_equals_partial_lp(seed, p):
    N, M = [(7, 5), (4, 9), (6, 6), (3, 8)][seed]
    X, Y = cloud(seed, N, M)
    P = tsw.sample_projections(3, 6, seed=seed, dtype=F64)
    for k in range(1, min(N, M) + 1):
        got = tsw.partial_sw(X, Y, n_transported=k, projections=P, p=p)
        np.testing.assert_allclose(float(got), partial_lp(X, Y, P, k, p), rtol=1e-10)


def test_partial_sw_full_transport_equals_sw_and_batches():
    X, Y = cloud(10, 6, 6, batch=3)
    P = tsw.sample_projections(3, 8, seed=1, dtype=F64)
    torch.testing.assert_close(tsw.partial_sw(X, Y, projections=P), tsw.sw(X, Y, projections=P))
    # batched = loop, with per-item projections too
    Pb = torch.stack([tsw.sample_projections(3, 8, seed=s, dtype=F64) for s in range(3)])
    got = tsw.partial_sw(X, Y[:, :4], n_transported=3, projections=Pb)
    loop = [tsw.partial_sw(X[i], Y[i, :4], n_transported=3, projections=Pb[i]) for i in range(3)]
    torch.testing.assert_close(got, torch.stack(loop))
    # seeds: same seed, same value; float32 follows
    v = tsw.partial_sw(X[0], Y[0], n_transported=4, seed=3)
    assert torch.equal(v, tsw.partial_sw(X[0], Y[0], n_transported=4, seed=3))
    v32 = tsw.partial_sw(X[0].float(), Y[0].float(), n_transported=4, seed=3)
    assert v32.dtype == torch.float32
    torch.testing.assert_close(v32.double(), v, rtol=1e-5, atol=1e-6)


def test_partial_sw_ignores_an_outlier_and_gradcheck():
    X, Y = cloud(11, 6, 5)
    X_out = torch.cat([X, torch.full((1, 3), 50.0, dtype=F64)])
    P = tsw.sample_projections(3, 5, seed=2, dtype=F64)
    # transporting 5 atoms: the far outlier is never selected
    torch.testing.assert_close(
        tsw.partial_sw(X_out, Y, n_transported=5, projections=P),
        tsw.partial_sw(X, Y, n_transported=5, projections=P),
    )
    Xg, Yg = X.clone().requires_grad_(), Y.clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, y: tsw.partial_sw(x, y, n_transported=4, projections=P), (Xg, Yg)
    )


def test_partial_sw_validation():
    X, Y = cloud(12)
    w = torch.full((7,), 1 / 7, dtype=F64)
    with pytest.raises(ValueError, match=re.escape("partial_sw supports atoms of equal unit mass")):
        tsw.partial_sw(X, Y, w)
    with pytest.raises(ValueError, match=re.escape("pass b=None; got weights")):
        tsw.partial_sw(X, Y, None, torch.ones(5, dtype=F64))
    with pytest.raises(ValueError, match=re.escape("n_transported must be <= min(N, M) = 5")):
        tsw.partial_sw(X, Y, n_transported=6)
    with pytest.raises(ValueError, match=re.escape("n_transported must be an int >= 1; got 0")):
        tsw.partial_sw(X, Y, n_transported=0)
    with pytest.raises(ValueError, match=re.escape("p must be a finite real number >= 1")):
        tsw.partial_sw(X, Y, p=0.5)
    # POT truncates a non-integer p (its selection is then not optimal): refused here
    with pytest.raises(ValueError, match=re.escape("partial_sw needs an integer p")):
        tsw.partial_sw(X, Y, p=1.5)
    with pytest.raises(ValueError, match=re.escape("projections must have shape (d, L) with d=3")):
        tsw.partial_sw(X, Y, projections=torch.ones(2, 4, dtype=F64))


# --------------------------------------------------------------------------- unbalanced_sw


@pytest.mark.parametrize("reg_m", [0.5, (0.3, 2.0), 5.0])
@pytest.mark.parametrize("masses", [(1.0, 1.0), (1.0, 1.4), (0.6, 0.2)])
@pytest.mark.parametrize("p", [1, 2])
def test_unbalanced_sw_equals_pot(masses, reg_m, p):
    """Value ** p equals POT's SUOT with weights a_hat * mass_s and b_hat * mass_t."""
    X, Y = cloud(20)
    g = torch.Generator().manual_seed(21)
    a, b = torch.rand(7, generator=g, dtype=F64) + 0.1, torch.rand(5, generator=g, dtype=F64)
    P = tsw.sample_projections(3, 9, seed=4, dtype=F64)
    got = tsw.unbalanced_sw(
        X, Y, 3 * a, b, mass_s=masses[0], mass_t=masses[1], reg_m=reg_m, projections=P, p=p
    )
    wa, wb = masses[0] * a / a.sum(), masses[1] * b / b.sum()
    expected = ot.unbalanced.sliced_unbalanced_ot(X, Y, reg_m, wa, wb, projections=P, p=p)
    # per slice, POT's Frank-Wolfe objective, or the empty plan's where it costs less
    # (10 FW steps can cost more than transporting nothing: rho_1 m_s + rho_2 m_t)
    r1, r2 = reg_m if isinstance(reg_m, tuple) else (reg_m, reg_m)
    *_, log = ot.unbalanced.uot_1d(X @ P, Y @ P, reg_m, wa, wb, p, log=True)
    per_slice = log["total_cost"].clamp(max=r1 * masses[0] + r2 * masses[1])
    torch.testing.assert_close(log["total_cost"].mean(), expected, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(got**p, per_slice.mean(), rtol=1e-12, atol=1e-14)


def test_unbalanced_sw_semi_relaxed_per_slice():
    """One hard marginal: each slice gets its own KL (POT 0.9.7 adds the sum over slices)."""
    X, Y = cloud(22)
    P = tsw.sample_projections(3, 6, seed=5, dtype=F64)
    a, b = torch.full((7,), 1 / 7, dtype=F64), torch.full((5,), 1.3 / 5, dtype=F64)
    _, pb, _, log = ot.unbalanced.uot_1d(X @ P, Y @ P, (math.inf, 0.4), a, b, 2, log=True)
    kl = (pb * torch.log(pb / b[:, None]) - pb + b[:, None]).sum(0)  # per slice
    expected = (log["linear_cost"] + 0.4 * kl).mean()
    got = tsw.unbalanced_sw(X, Y, mass_t=1.3, reg_m=(math.inf, 0.4), projections=P)
    torch.testing.assert_close(got**2, expected, rtol=1e-12, atol=1e-14)


def test_unbalanced_sw_hard_marginals_equal_sw_and_gradients():
    X, Y = cloud(23)
    P = tsw.sample_projections(3, 7, seed=6, dtype=F64)
    for p in (1, 2):
        torch.testing.assert_close(
            tsw.unbalanced_sw(X, Y, reg_m=math.inf, projections=P, p=p),
            tsw.sw(X, Y, projections=P, p=p),
        )
    # hard marginals: the value is exact, so its gradient is too
    Xg = X.clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x: tsw.unbalanced_sw(x, Y, reg_m=math.inf, projections=P), (Xg,)
    )
    # soft marginals: POT never writes into the caller's graph; masses get gradients
    m_t = torch.tensor(1.3, dtype=F64, requires_grad=True)
    v = tsw.unbalanced_sw(Xg, Y, mass_t=m_t, reg_m=0.5, projections=P)
    assert Xg.grad is None  # nothing leaked during the forward pass
    gx, gm = torch.autograd.grad(v, (Xg, m_t))
    assert bool(torch.isfinite(gx).all())
    assert float(gx.abs().max()) > 0
    assert float(gm) != 0
    with torch.no_grad():  # POT's solver needs autograd internally
        torch.testing.assert_close(
            tsw.unbalanced_sw(X, Y, mass_t=1.3, reg_m=0.5, projections=P), v.detach()
        )


def test_unbalanced_sw_batch_and_validation():
    X, Y = cloud(24, batch=2)
    got = tsw.unbalanced_sw(X, Y, mass_t=torch.tensor([1.0, 2.0], dtype=F64), seed=0)
    loop = [tsw.unbalanced_sw(X[i], Y[i], mass_t=float(i + 1), seed=0) for i in range(2)]
    torch.testing.assert_close(got, torch.stack(loop))
    for bad in (0.0, -1.0, math.nan, (1.0,), "1", True):
        with pytest.raises(ValueError, match=re.escape("reg_m must be a real number > 0")):
            tsw.unbalanced_sw(X[0], Y[0], reg_m=bad)
    with pytest.raises(ValueError, match=re.escape("mass_t must be a finite real number >= 0")):
        tsw.unbalanced_sw(X[0], Y[0], mass_t=-1.0)
    with pytest.raises(ValueError, match=re.escape("n_iter must be an int >= 1; got 0")):
        tsw.unbalanced_sw(X[0], Y[0], n_iter=0)


def _extreme_data():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(12, 3, generator=g, dtype=F64)
    Y = torch.randn(9, 3, generator=g, dtype=F64) + 0.7
    return X, Y


@pytest.mark.parametrize(
    "kwargs", [{}, {"mass_s": 0.0}, {"reg_m": 1e-3}, {"p": 8}, {"scale": 10.0}, {"scale": 1e3}]
)
def test_unbalanced_sw_stays_finite_and_below_the_empty_plan(kwargs):
    """Zero mass, a tiny marginal penalty, a large p, far-away points: POT's Frank-Wolfe
    iterates leave the range (NaN, or values far above the empty plan's cost); the value
    stays finite and at most the cost of transporting nothing."""
    X, Y = _extreme_data()
    kwargs = dict(kwargs)
    scale = kwargs.pop("scale", 1.0)
    p = kwargs.get("p", 2)
    rho = kwargs.get("reg_m", 1.0)
    m_s = kwargs.get("mass_s", 1.0)
    P = tsw.sample_projections(3, 5, seed=0, dtype=F64)
    value = tsw.unbalanced_sw(scale * X, scale * Y, projections=P, **kwargs)
    # transporting nothing costs rho (m_s + m_t): an upper bound of every slice's UOT
    bound = (rho * (m_s + 1.0)) ** (1 / p)
    assert math.isfinite(float(value))
    assert 0 <= float(value) <= bound * (1 + 1e-12)
    if m_s == 0:  # nothing to transport: exactly the KL of destroying the target
        assert abs(float(value) - (rho * 1.0) ** (1 / p)) < 1e-12
    # per slice: POT's Frank-Wolfe objective where finite and below the empty plan
    if not kwargs:
        *_, log = ot.unbalanced.uot_1d(scale * X @ P, scale * Y @ P, rho, p=p, log=True)
        cost = log["total_cost"]
        want = torch.where(torch.isfinite(cost) & (cost <= 2 * rho), cost, 2 * rho).mean()
        torch.testing.assert_close(value**p, want, rtol=1e-12, atol=1e-14)


def test_unbalanced_sw_empty_plan_gradients():
    """On the empty plan the value is rho (m_s + m_t): its gradient in the masses is rho."""
    X, Y = _extreme_data()
    mass = torch.tensor(0.0, dtype=F64, requires_grad=True)
    value = tsw.unbalanced_sw(X, Y, mass_s=mass, n_projections=4, seed=0, power=True)
    value.backward()
    torch.testing.assert_close(value.detach(), torch.tensor(1.0, dtype=F64))
    assert math.isfinite(float(mass.grad))


# --------------------------------------------------------------------------- sampling=


UNEQUAL_MASS = {
    "partial_sw": lambda X, Y, **kw: tsw.partial_sw(X, Y, n_transported=4, **kw),
    "unbalanced_sw": lambda X, Y, **kw: tsw.unbalanced_sw(X, Y, mass_t=1.3, reg_m=0.5, **kw),
}


def _orthonormal_blocks(P, d):
    """Assert the columns of P (d, L) come in blocks of d orthonormal ones (the last cut)."""
    for start in range(0, P.shape[-1], d):
        block = P[:, start : start + d]
        eye = torch.eye(block.shape[-1], dtype=P.dtype)
        torch.testing.assert_close(block.T @ block, eye, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", sorted(UNEQUAL_MASS))
def test_unequal_mass_sampling_draws_sample_projections(name):
    """seed + sampling draws tsw.sample_projections(d, L, seed=, sampling=), as tsw.sw."""
    fn = UNEQUAL_MASS[name]
    X, Y = cloud(31)
    default = fn(X, Y, n_projections=7, seed=3)
    assert torch.equal(fn(X, Y, n_projections=7, sampling="iid", seed=3), default)
    values = {}
    for sampling in ("iid", "orthogonal", "qmc"):
        P = tsw.sample_projections(3, 7, sampling=sampling, seed=3, dtype=F64)
        value, log = fn(X, Y, n_projections=7, sampling=sampling, seed=3, log=True)
        assert torch.equal(log["projections"], P)
        assert torch.equal(value, fn(X, Y, projections=P))
        assert bool(torch.isfinite(value))
        values[sampling] = value
    assert not torch.equal(values["orthogonal"], values["iid"])
    assert not torch.equal(values["qmc"], values["iid"])
    # orthogonal=True is sampling="orthogonal": blocks of orthonormal directions (3 + 3 + 1)
    _, log = fn(X, Y, n_projections=7, orthogonal=True, seed=3, log=True)
    assert torch.equal(
        log["projections"], tsw.sample_projections(3, 7, orthogonal=True, seed=3, dtype=F64)
    )
    _orthonormal_blocks(log["projections"], 3)


@pytest.mark.parametrize("name", sorted(UNEQUAL_MASS))
def test_unequal_mass_bad_sampling_raises(name):
    fn = UNEQUAL_MASS[name]
    X, Y = cloud(32)
    for bad in ("sobol", None, 1):
        with pytest.raises(ValueError, match="sampling must be one of"):
            fn(X, Y, n_projections=3, sampling=bad, seed=0)
    with pytest.raises(ValueError, match=r'orthogonal=True.*sampling="qmc"'):
        fn(X, Y, n_projections=3, orthogonal=True, sampling="qmc", seed=0)


def test_unbalanced_sw_under_inference_mode():
    X, Y = data(12, 9, 3)
    want = tsw.unbalanced_sw(X, Y, n_projections=5, seed=0)
    with torch.inference_mode():
        assert torch.equal(tsw.unbalanced_sw(X, Y, n_projections=5, seed=0), want)
