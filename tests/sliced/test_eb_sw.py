"""EB-SW (``tsw.sliced._eb_sw``): the importance-weighted estimate against POT's costs.

On given directions the value equals the self-normalised importance-weighted mean of
POT's per-direction costs (``ot.sliced_wasserstein_distance``'s log) for both energies;
it is never below SW (POT) on the same directions; the gradient is the authors' (the
weights held fixed), checked against POT's torch backend; equal measures give 0.

The distance's shared properties run in ``test_contract.py``; its second derivatives
(exact in the power form, refused under the root) in ``test_second_order.py``.
"""

from __future__ import annotations

import numpy as np
import ot
import pytest
import torch

import tsw

F64 = torch.float64


def clouds(seed=0, N=30, M=20, d=4):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, d, generator=g, dtype=F64)
    Y = 1.5 * torch.randn(M, d, generator=g, dtype=F64) + 1.0
    return X, Y


def pot_costs(X, Y, theta, p=2):
    """Per-direction W_p^p from POT on the given (d, L) directions."""
    _, log = ot.sliced_wasserstein_distance(
        X.numpy(), Y.numpy(), projections=theta.numpy(), p=p, log=True
    )
    return np.asarray(log["projected_emds"])


ENERGIES = {"exp": np.exp, "identity": lambda x: x}


@pytest.mark.parametrize("energy", sorted(ENERGIES))
@pytest.mark.parametrize("p", [1, 2])
def test_it_is_the_importance_weighted_mean_of_the_costs(energy, p):
    X, Y = clouds(6, N=25, M=18, d=3)
    theta = tsw.sample_projections(3, 15, seed=2, dtype=F64)
    W = pot_costs(X, Y, theta, p)
    f = ENERGIES[energy](W)
    w = f / f.sum()
    value, log = tsw.eb_sw(X, Y, projections=theta, p=p, energy=energy, power=True, log=True)
    assert float(value) == pytest.approx(float((w * W).sum()), rel=1e-12)
    np.testing.assert_allclose(log["weights"].numpy(), w, rtol=1e-12)
    np.testing.assert_allclose(log["projected_emds"].numpy(), W, rtol=1e-12)
    root = tsw.eb_sw(X, Y, projections=theta, p=p, energy=energy)
    assert float(root) == pytest.approx(float((w * W).sum()) ** (1 / p), rel=1e-12)


def test_it_is_at_least_sw_on_the_same_directions():
    for seed in range(5):
        X, Y = clouds(seed)
        theta = tsw.sample_projections(4, 25, seed=seed, dtype=F64)
        base = np.sqrt(pot_costs(X, Y, theta).mean())
        for energy in ENERGIES:
            assert float(tsw.eb_sw(X, Y, projections=theta, energy=energy)) >= base - 1e-12
    Xb = torch.stack([clouds(s)[0] for s in range(3)])
    Yb = torch.stack([clouds(s)[1] for s in range(3)])
    theta = tsw.sample_projections(4, 25, seed=9, dtype=F64)
    got = tsw.eb_sw(Xb, Yb, projections=theta)
    for i in range(3):
        assert float(got[i]) >= np.sqrt(pot_costs(Xb[i], Yb[i], theta).mean()) - 1e-12


def test_the_gradient_holds_the_weights_fixed():
    """The authors' gradient, sum_l w_l grad W_l with w detached, computed with POT's torch
    backend (its own sort and quantile functions, differentiated by autograd)."""
    X, Y = clouds(6, N=25, M=25, d=3)
    theta = tsw.sample_projections(3, 15, seed=2, dtype=F64)
    Xg = X.clone().requires_grad_()
    (grad,) = torch.autograd.grad(tsw.eb_sw(Xg, Y, projections=theta, power=True), Xg)
    Xr = X.clone().requires_grad_()
    W = ot.wasserstein_1d(Xr @ theta, Y @ theta, p=2)  # (L,): W_2^2 per direction
    w = torch.softmax(W.detach(), 0)
    (ref,) = torch.autograd.grad((w * W).sum(), Xr)
    torch.testing.assert_close(grad, ref, rtol=1e-10, atol=1e-12)


def test_equal_measures_give_zero_with_the_identity_energy():
    X, _ = clouds(7, N=10, M=10, d=3)
    assert float(tsw.eb_sw(X, X.clone(), n_projections=5, seed=0, energy="identity")) == 0.0


def test_a_bad_energy_names_the_argument_and_the_value():
    X = torch.zeros(3, 2)
    message = "energy must be one of 'exp', 'identity'; got 'log'"
    with pytest.raises(ValueError, match=message):
        tsw.eb_sw(X, X + 1, energy="log", seed=0)
    with pytest.raises(ValueError, match=message):
        tsw.nn.EBSWLoss(energy="log")
