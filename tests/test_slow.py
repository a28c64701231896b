"""Slow tests (``python -m pytest -m slow``): Monte-Carlo behaviour and gradient flows."""

from __future__ import annotations

import numpy as np
import ot
import pytest
import torch

import tsw

pytestmark = pytest.mark.slow


def _clouds(seed=0, n=60, d=3):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    Y = torch.randn(n + 7, d, generator=g, dtype=torch.float64) * 0.7 + 0.8
    return X, Y


@pytest.mark.parametrize(
    "fn",
    [
        lambda X, Y, L, s: tsw.db_tsw(X, Y, n_trees=L, n_lines=4, seed=s, center=torch.zeros(3)),
        lambda X, Y, L, s: tsw.tsw_sl(X, Y, n_trees=L, n_lines=4, seed=s),
        lambda X, Y, L, s: tsw.sw(X, Y, n_projections=L, seed=s, p=1),
    ],
    ids=["db_tsw", "tsw_sl", "sw1"],
)
def test_monte_carlo_variance_falls_like_one_over_L(fn):
    """Var of the estimator with 4L trees is about a quarter of that with L trees."""
    X, Y = _clouds()
    small = torch.stack([fn(X, Y, 10, s) for s in range(300)])
    large = torch.stack([fn(X, Y, 40, s) for s in range(300, 600)])
    ratio = (small.var() / large.var()).item()
    assert 2.5 < ratio < 6.5, ratio
    # unbiased: the means agree within a few standard errors
    se = (small.var() / 300 + large.var() / 300).sqrt()
    assert abs(small.mean() - large.mean()) < 4 * se


def _w2sq(X, Y):
    n, m = len(X), len(Y)
    return ot.emd2(np.full(n, 1 / n), np.full(m, 1 / m), ot.dist(X.numpy(), Y.numpy()))


@pytest.mark.parametrize(
    "loss",
    [
        tsw.nn.DbTSWLoss(n_trees=25, n_lines=4, delta=1.0, seed=0),
        tsw.nn.TSWSLLoss(n_trees=25, n_lines=4, seed=0),
        tsw.nn.SWLoss(n_projections=100, seed=0),
        tsw.nn.MaxSWLoss(n_iter=10, seed=0),
    ],
    ids=["db_tsw", "tsw_sl", "sw", "max_sw"],
)
def test_gradient_flow_lowers_exact_w2(loss):
    """A few hundred Adam steps on the loss move a cloud onto a target."""
    g = torch.Generator().manual_seed(0)
    Y = torch.randn(80, 2, generator=g, dtype=torch.float64) * 0.5 + torch.tensor([2.0, -1.0])
    X = torch.randn(80, 2, generator=g, dtype=torch.float64).requires_grad_(True)
    start = _w2sq(X.detach(), Y)
    opt = torch.optim.Adam([X], lr=2e-2)
    for _ in range(400):
        opt.zero_grad()
        loss(X, Y).backward()
        opt.step()
    end = _w2sq(X.detach(), Y)
    assert end < 0.02 * start, (start, end)


# --------------------------------------------------------------------------- the sphere


def _vmf_mixture_s2(n_per, kappa, seed):
    """Samples of 12 von Mises-Fisher components on S^2 centred on an icosahedron's vertices
    (the STSW gradient-flow target), by the exact inverse CDF of <x, mu> on S^2."""
    g = torch.Generator().manual_seed(seed)
    phi = (1 + 5**0.5) / 2
    verts = torch.tensor(
        [[0, s1, s2 * phi] for s1 in (-1, 1) for s2 in (-1, 1)]
        + [[s1, s2 * phi, 0] for s1 in (-1, 1) for s2 in (-1, 1)]
        + [[s2 * phi, 0, s1] for s1 in (-1, 1) for s2 in (-1, 1)],
        dtype=torch.float64,
    )
    mu = torch.nn.functional.normalize(verts, dim=-1).repeat_interleave(n_per, 0)
    u = torch.rand(mu.shape[0], generator=g, dtype=torch.float64)
    w = 1 + torch.log(u + (1 - u) * np.exp(-2 * kappa)) / kappa
    v = torch.randn(mu.shape, generator=g, dtype=torch.float64)
    v = torch.nn.functional.normalize(v - (v * mu).sum(-1, keepdim=True) * mu, dim=-1)
    return w[:, None] * mu + (1 - w[:, None] ** 2).clamp_min(0).sqrt() * v


def _geodesic_w2sq(X, Y):
    cost = np.arccos(np.clip(X.numpy() @ Y.numpy().T, -1, 1)) ** 2
    n, m = len(X), len(Y)
    return ot.emd2(np.full(n, 1 / n), np.full(m, 1 / m), cost)


@pytest.mark.parametrize(
    "loss",
    [
        tsw.nn.STSWLoss(n_trees=200, n_lines=5, seed=0),
        tsw.nn.STSWLoss(n_trees=200, n_lines=5, p=2, seed=0),
    ],
    ids=["stsw", "stsw_p2"],
)
def test_spherical_gradient_flow_towards_a_vmf_mixture(loss):
    """Adam on the points, renormalised after each step, lowers the exact geodesic W2."""
    Y = _vmf_mixture_s2(25, 50.0, seed=0)  # 300 target points
    g = torch.Generator().manual_seed(1)
    X = torch.nn.functional.normalize(torch.randn(300, 3, generator=g, dtype=torch.float64), dim=-1)
    X.requires_grad_(True)
    start = _geodesic_w2sq(X.detach(), Y)
    opt = torch.optim.Adam([X], lr=1e-2)
    for _ in range(300):
        opt.zero_grad()
        loss(X, Y).backward()
        opt.step()
        with torch.no_grad():
            X /= X.norm(dim=-1, keepdim=True)
    end = _geodesic_w2sq(X.detach(), Y)
    assert end < 0.1 * start, (start, end)


def test_spherical_flow_to_uniform_lowers_stsw_unif():
    """A clustered cloud spreads out under STSW to the uniform measure."""
    g = torch.Generator().manual_seed(2)
    X = torch.randn(300, 3, generator=g, dtype=torch.float64) * 0.3 + torch.tensor([0, 0, 1.0])
    X = torch.nn.functional.normalize(X, dim=-1).requires_grad_(True)
    loss = tsw.nn.STSWUnifLoss(n_trees=100, seed=0)
    start = tsw.stsw_unif(X.detach(), seed=123).item()
    opt = torch.optim.Adam([X], lr=1e-2)
    for _ in range(300):
        opt.zero_grad()
        loss(X).backward()
        opt.step()
        with torch.no_grad():
            X /= X.norm(dim=-1, keepdim=True)
    end = tsw.stsw_unif(X.detach(), seed=123).item()
    assert end < 0.2 * start, (start, end)
