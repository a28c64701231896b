"""Calls written for POT run on tsw after a rename, and give POT's values.

The patterns of POT's gallery (the variance of SW against the number of projections, a
gradient flow in torch, SSW on the sphere and to the uniform measure), of a GeomLoss-style
flow with a loss module and of an SWAE training step: positional counts, numpy counts and
seeds, float32 points with POT's float64 weights, numpy everywhere in the log.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tsw

ot = pytest.importorskip("ot")


def _gaussians(n: int = 200, d: int = 2, seed: int = 0):
    rng = np.random.RandomState(seed)
    xs = rng.multivariate_normal(np.zeros(d), np.eye(d), n)
    xt = rng.multivariate_normal(np.ones(d), [[1.0, -0.8], [-0.8, 1.0]] if d == 2 else np.eye(d), n)
    return xs, xt


def test_variance_over_the_number_of_projections():
    """POT's ``plot_variance``: numpy points, uniform float64 weights, counts from
    ``np.logspace(..., dtype=int)``, positional ``n_projections``; on POT's projections the
    value is POT's."""
    xs, xt = _gaussians()
    a, b = np.ones(len(xs)) / len(xs), np.ones(len(xt)) / len(xt)
    for n_projections in np.logspace(0, 2, 4, dtype=int):
        P = ot.sliced.get_random_projections(2, n_projections, seed=3)
        got = tsw.sw(xs, xt, a, b, n_projections, 2, P)
        want = ot.sliced_wasserstein_distance(xs, xt, a, b, n_projections, 2, P)
        assert isinstance(got, np.floating)
        assert abs(got - want) <= 1e-10 * max(1.0, want)
        drawn = tsw.sw(xs, xt, a, b, n_projections, seed=3)
        assert drawn == tsw.sw(xs, xt, a, b, int(n_projections), seed=3)


def test_float32_points_take_float64_weights():
    xs, xt = (x.astype(np.float32) for x in _gaussians(50))
    a, b = np.ones(50) / 50, np.ones(50) / 50  # POT's default dtype
    got = tsw.sw(xs, xt, a, b, 20, seed=0)
    assert got.dtype == np.float32
    assert got == tsw.sw(xs, xt, a.astype(np.float32), b.astype(np.float32), 20, seed=0)


def test_seed_as_numpy_random_state_or_generator():
    """A numpy RandomState or Generator seeds the draws deterministically (POT takes a
    RandomState); a torch.Generator belongs in generator=."""
    xs, xt = _gaussians(40)
    first = tsw.sw(xs, xt, n_projections=10, seed=np.random.RandomState(7))
    again = tsw.sw(xs, xt, n_projections=10, seed=np.random.RandomState(7))
    assert first == again
    assert tsw.sw(xs, xt, seed=np.random.default_rng(7)) == tsw.sw(
        xs, xt, seed=np.random.default_rng(7)
    )
    with pytest.raises(TypeError, match="pass it as generator= instead"):
        tsw.sw(xs, xt, seed=torch.Generator())


def test_counts_take_numpy_and_torch_integers():
    X, Y = (torch.from_numpy(x) for x in _gaussians(30))
    want = tsw.db_tsw(X, Y, n_trees=5, n_lines=3, seed=0)
    assert tsw.db_tsw(X, Y, n_trees=np.int64(5), n_lines=torch.tensor(3), seed=0) == want
    loss = tsw.nn.DbTSWLoss(n_trees=np.int32(5), n_lines=np.int64(3), seed=0, resample=False)
    assert torch.isfinite(loss(X, Y))
    for bad in (np.float64(5.0), torch.tensor(5.0), True):
        with pytest.raises(TypeError, match="n_trees must be an int >= 1"):
            tsw.db_tsw(X, Y, n_trees=bad)


def test_numpy_in_gives_numpy_in_the_log():
    xs, xt = _gaussians(30)
    for fn in (tsw.sw, tsw.db_tsw, tsw.tsw_sl):
        value, log = fn(xs, xt, seed=0, log=True)
        assert isinstance(value, np.floating)
        for key, entry in log.items():
            parts = entry.values() if isinstance(entry, dict) else [entry]
            assert all(isinstance(x, np.ndarray | np.floating) for x in parts), (fn, key)
    value, log = tsw.db_tsw(xs, xt, n_trees=4, seed=0, log=True)
    assert tsw.db_tsw(xs, xt, trees=tsw.ConcurrentLines(**log["trees"])) == value


def test_sliced_gradient_flow_in_torch():
    """POT's ``plot_sliced_wass_grad_flow_pytorch``: SW_2 between torch points that
    require grad, positional ``n_projections``; value and gradient equal POT's torch
    backend on the same projections."""
    xs, xt = _gaussians(60)
    P = ot.sliced.get_random_projections(2, 30, seed=1)
    x = torch.tensor(xs, requires_grad=True)
    y = torch.tensor(xt)
    value = tsw.sw(x, y, None, None, 30, 2, torch.from_numpy(P))
    (grad,) = torch.autograd.grad(value, x)
    x_pot = torch.tensor(xs, requires_grad=True)
    want = ot.sliced_wasserstein_distance(x_pot, y, None, None, 30, 2, torch.from_numpy(P))
    (grad_pot,) = torch.autograd.grad(want, x_pot)
    torch.testing.assert_close(value, want, rtol=1e-10, atol=0)
    torch.testing.assert_close(grad, grad_pot, rtol=1e-9, atol=1e-12)


def _on_sphere(n: int, seed: int) -> np.ndarray:
    x = np.random.RandomState(seed).randn(n, 3)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_spherical_sliced_as_pot_calls_it():
    """POT's ``plot_variance_ssw``: ``ssw(xs, xt, a, b, n_projections, seed=...)`` in POT's
    order; on POT's great circles the value is POT's."""
    xs, xt = _on_sphere(40, 0), _on_sphere(50, 1)
    a, b = np.ones(40) / 40, np.ones(50) / 50
    rng = np.random.RandomState(2)
    Z = rng.randn(3, 2 * 10)
    P = np.stack([np.linalg.qr(Z[:, 2 * i : 2 * i + 2])[0] for i in range(10)])
    got = tsw.ssw(xs, xt, a, b, 10, 2, P)
    want = ot.sliced_wasserstein_sphere(xs, xt, a, b, 10, 2, P)
    assert abs(got - want) <= 1e-10 * max(1.0, want)
    assert tsw.ssw(xs, xt, a, b, 10, seed=0) == tsw.ssw(xs, xt, a, b, 10, seed=0)


def test_spherical_sliced_to_uniform_in_torch():
    """POT's ``plot_ssw_unif_torch``: ``ssw_unif(x, a, n_projections, seed=...)`` on torch
    points that require grad; on POT's great circles the value is POT's."""
    x = torch.tensor(_on_sphere(60, 3), requires_grad=True)
    rng = np.random.RandomState(4)
    Z = rng.randn(3, 2 * 20)
    P = torch.from_numpy(np.stack([np.linalg.qr(Z[:, 2 * i : 2 * i + 2])[0] for i in range(20)]))
    value = tsw.ssw_unif(x, None, 20, P)
    want = ot.sliced_wasserstein_sphere_unif(x.detach(), None, 20, P)
    torch.testing.assert_close(value.detach(), want, rtol=1e-10, atol=0)
    value.backward()
    assert torch.isfinite(x.grad).all()
    assert tsw.ssw_unif(x, None, 20, seed=5) == tsw.ssw_unif(x, None, 20, seed=5)


def test_flow_with_a_loss_module():
    """A GeomLoss-style flow: a loss module, its gradient by ``torch.autograd.grad``,
    steps scaled by the number of points; the distance to the target falls."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(100, 2, generator=g, dtype=torch.float64)
    y = torch.randn(120, 2, generator=g, dtype=torch.float64) + 3
    loss = tsw.nn.SWLoss(n_projections=np.int64(50), p=2, seed=0)
    start = float(tsw.sw(x, y, seed=1, n_projections=200))
    for _ in range(30):
        x.requires_grad_(True)
        (grad,) = torch.autograd.grad(loss(x, y), [x])
        x = (x - 0.5 * len(x) * grad).detach()
    assert float(tsw.sw(x, y, seed=1, n_projections=200)) < 0.5 * start


def test_swae_step():
    """An SWAE step: SW_2^2 (``power=True``) between a batch of latent codes and prior
    samples, a numpy count and a numpy RandomState seed; the encoder gets a gradient."""
    g = torch.Generator().manual_seed(0)
    encoder = torch.nn.Linear(8, 2)
    codes = encoder(torch.randn(32, 8, generator=g))
    prior = torch.randn(32, 2, generator=g)
    rng = np.random.RandomState(0)
    value = tsw.sw(codes, prior, n_projections=np.int64(50), power=True, seed=rng)
    value.backward()
    assert encoder.weight.grad is not None
    assert torch.isfinite(encoder.weight.grad).all()


def test_meta_tensors_pass_the_default_validation():
    X, Y = torch.empty(30, 3, device="meta"), torch.empty(20, 3, device="meta")
    for value in (tsw.sw(X, Y, seed=0), tsw.db_tsw(X, Y, seed=0), tsw.stsw_unif(X, seed=0)):
        assert value.device.type == "meta"
        assert value.shape == ()
    with pytest.raises(ValueError, match="needs values"):
        tsw.ssw(X, Y, seed=0)
