"""RP-SW (``tsw.sliced._rp_sw``): SW along directions between random pairs of atoms.

The value is SW (POT) along the directions it reports, batched too; every direction is
the normalised difference of an atom of each measure, drawn from the weights (brute
force over all pairs); the power spherical perturbation's mean cosine is its closed
form; a bad ``kappa`` raises naming it.

The distance's shared properties run in ``test_contract.py``; its second derivatives
(with given directions; refused with drawn ones) in ``test_second_order.py``.
"""

from __future__ import annotations

import math

import numpy as np
import ot
import pytest
import torch

import tsw

F64 = torch.float64


def clouds(seed=0, N=30, M=25, d=4):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, d, generator=g, dtype=F64)
    Y = 1.5 * torch.randn(M, d, generator=g, dtype=F64) + 1.0
    return X, Y


def pot_sw(X, Y, theta, a=None, b=None, p=2):
    a = None if a is None else a.numpy()
    b = None if b is None else b.numpy()
    return ot.sliced_wasserstein_distance(
        X.numpy(), Y.numpy(), a, b, projections=theta.numpy(), p=p
    )


@pytest.mark.parametrize("kappa", [None, 20.0])
def test_it_is_sw_along_its_reported_directions(kappa):
    X, Y = clouds(8)
    value, info = tsw.rp_sw(X, Y, n_projections=16, kappa=kappa, seed=0, log=True)
    assert info["projections"].shape == (4, 16)
    assert float(value) == pytest.approx(pot_sw(X, Y, info["projections"]), rel=1e-12)
    Xb, Yb = torch.stack([X, X + 1]), torch.stack([Y, 2 * Y])
    value, info = tsw.rp_sw(Xb, Yb, n_projections=16, kappa=kappa, seed=0, log=True)
    assert info["projections"].shape == (2, 4, 16)
    for i in range(2):
        expected = pot_sw(Xb[i], Yb[i], info["projections"][i])
        assert float(value[i]) == pytest.approx(expected, rel=1e-12)


def test_the_directions_are_pairs_of_atoms_drawn_from_the_weights():
    X, Y = clouds(9, N=12, M=10, d=3)
    a = torch.rand(12, dtype=F64, generator=torch.Generator().manual_seed(0)) + 0.1
    a[3] = 0.0  # never drawn
    a = a / a.sum()
    value, info = tsw.rp_sw(X, Y, a, None, n_projections=200, seed=1, log=True)
    theta = info["projections"].T  # (L, d)
    pairs = X[:, None, :] - Y[None, :, :]  # (N, M, d)
    unit = pairs / torch.linalg.vector_norm(pairs, dim=-1, keepdim=True)
    err = torch.cdist(theta, unit.reshape(-1, 3)).reshape(200, 12, 10)
    best = err.reshape(200, -1).min(-1)
    assert float(best.values.max()) < 1e-7  # cdist's own rounding
    used = {int(i) // 10 for i in best.indices}
    assert 3 not in used
    assert len(used) >= 8
    assert float(value) == pytest.approx(pot_sw(X, Y, info["projections"], a), rel=1e-12)


def test_the_power_spherical_mean_cosine():
    """E<x, mu> = kappa / (d - 1 + kappa) for the power spherical law (De Cao and Aziz)."""
    from tsw.core._random import resolve_sampler
    from tsw.sliced._rp_sw import power_spherical

    rng = resolve_sampler(0, None, dtype=F64, device=torch.device("cpu"))
    for d, kappa in ((2, 0.5), (3, 10.0), (8, 50.0)):
        loc = torch.nn.functional.normalize(torch.randn(1, d, dtype=F64), dim=-1)
        x = power_spherical(loc.expand(20_000, d), kappa, rng)
        cos = (x * loc).sum(-1)
        assert float(torch.linalg.vector_norm(x, dim=-1).sub(1).abs().max()) < 1e-12
        expected = kappa / (d - 1 + kappa)
        assert abs(float(cos.mean()) - expected) < 4 * float(cos.std()) / math.sqrt(20_000)


def test_given_projections_give_sw():
    X, Y = clouds(10)
    theta = tsw.sample_projections(4, 9, seed=3, dtype=F64)
    got = tsw.rp_sw(X, Y, projections=theta, p=1)
    assert float(got) == pytest.approx(pot_sw(X, Y, theta, p=1), rel=1e-12)
    assert np.isfinite(float(got))


def test_a_bad_kappa_names_the_argument_and_the_value():
    X = torch.zeros(3, 2)
    with pytest.raises(
        ValueError, match=r"kappa must be None or a finite real number > 0; got 0\.0"
    ):
        tsw.rp_sw(X, X + 1, kappa=0.0, seed=0)
    with pytest.raises(TypeError, match="kappa must be None or a real number > 0; got str"):
        tsw.rp_sw(X, X + 1, kappa="50", seed=0)
    with pytest.raises(ValueError, match="kappa must be None or a finite real number > 0; got inf"):
        tsw.nn.RPSWLoss(kappa=math.inf)
