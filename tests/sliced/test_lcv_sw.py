"""LCV-SW and UCV-SW (``tsw.sliced._lcv_sw``): the estimate against its formula, and its law.

The pooled estimate against numpy loops on given directions; each direction's cost and
the plain mean against POT (``ot.sliced_wasserstein_distance`` on the same projections);
the variates below / above each direction's W_2^2; their closed-form means over the
sphere against Monte Carlo; unbiasedness and variance against SW at a large L (POT); no
correction where the variate does not vary.

The distance's shared properties run in ``test_contract.py``; its second derivatives in
``test_second_order.py``.
"""

from __future__ import annotations

import math

import numpy as np
import ot
import pytest
import torch

import tsw
from tsw.core._validation import check_measures
from tsw.sliced._lcv_sw import gaussian_variate

F64 = torch.float64


def clouds(seed=0, N=60, M=50, d=5):
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


def lcv_by_hand(X, Y, theta, p, variate, coefficient="pooled"):
    """The estimate from numpy loops: costs by sorting, moments by their definition."""
    X, Y, theta = X.numpy(), Y.numpy(), theta.numpy()
    d, L = theta.shape
    m1, m2 = X.mean(0), Y.mean(0)
    W, G = np.zeros(L), np.zeros(L)
    for ell in range(L):
        t = theta[:, ell]
        x, y = np.sort(X @ t), np.sort(Y @ t)  # equal sizes: the sorted atoms pair up
        W[ell] = np.mean(np.abs(x - y) ** p)
        G[ell] = (t @ (m1 - m2)) ** 2
        if variate == "upper":
            G[ell] += np.mean(((X - m1) @ t) ** 2) + np.mean(((Y - m2) @ t) ** 2)
    EG = np.sum((m1 - m2) ** 2) / d
    if variate == "upper":
        EG += (np.sum((X - m1) ** 2) / len(X) + np.sum((Y - m2) ** 2) / len(Y)) / d
    D = G - EG
    if coefficient == "pooled":
        alpha = np.mean((W - W.mean()) * D) / np.mean(D**2)
        return W.mean() - alpha * D.mean()
    terms = []
    for ell in range(L):  # each direction corrected with the others' coefficient
        rest = np.arange(L) != ell
        Wr, Dr = W[rest], D[rest]
        alpha = np.mean((Wr - Wr.mean()) * Dr) / np.mean(Dr**2)
        terms.append(W[ell] - alpha * D[ell])
    return float(np.mean(terms))


@pytest.mark.parametrize("coefficient", ["pooled", "leave_one_out"])
@pytest.mark.parametrize("variate", ["lower", "upper"])
def test_on_given_directions_it_equals_its_formula(variate, coefficient):
    X, Y = clouds(1, N=40, M=40)
    theta = tsw.sample_projections(5, 9, seed=3, dtype=F64)
    for p in (2, 1.5):
        got = tsw.lcv_sw(
            X, Y, projections=theta, p=p, variate=variate, coefficient=coefficient, power=True
        )
        expected = lcv_by_hand(X, Y, theta, p, variate, coefficient)
        assert float(got) == pytest.approx(expected, rel=1e-10)


def test_the_log_reports_pots_costs_and_the_corrected_terms():
    X, Y = clouds(3, N=30, M=20)
    theta = tsw.sample_projections(5, 11, seed=4, dtype=F64)
    value, log = tsw.lcv_sw(X, Y, projections=theta, log=True, power=True)
    np.testing.assert_allclose(log["projected_emds"].numpy(), pot_costs(X, Y, theta), rtol=1e-12)
    assert torch.equal(log["projections"], theta)
    torch.testing.assert_close(log["per_tree"].mean(), value)


def test_the_variates_bound_each_directions_w2():
    """The lower variate is below, the upper one above, each direction's W_2^2 (POT's)."""
    X, Y = clouds(2)
    theta = tsw.sample_projections(5, 200, seed=0, dtype=F64)
    W = pot_costs(X, Y, theta)
    measures = check_measures(X, Y, None, None)
    lower, _ = gaussian_variate(measures, theta, "lower")
    upper, _ = gaussian_variate(measures, theta, "upper")
    assert bool((lower[0].numpy() <= W + 1e-12).all())
    assert bool((upper[0].numpy() + 1e-12 >= W).all())


def test_the_variates_means_over_the_sphere():
    X, Y = clouds(4)
    measures = check_measures(X, Y, None, None)
    theta = tsw.sample_projections(5, 200_000, seed=1, dtype=F64)
    for variate in ("lower", "upper"):
        G, mean = gaussian_variate(measures, theta, variate)
        se = float(G.std() / math.sqrt(G.shape[-1]))
        assert abs(float(G.mean() - mean)) < 4 * se


def test_unbiased_with_less_variance_than_sw():
    """Mean of 400 independent estimates at L = 10 against SW_2^2 at L = 5e4 (POT);
    variance against SW's on the same directions. The estimates are one batched call:
    400 copies of the pair, each with its own 10 directions."""
    X, Y = clouds(0)
    big = tsw.sample_projections(5, 50_000, seed=99, dtype=F64)
    W = pot_costs(X, Y, big)
    truth, truth_se = float(W.mean()), float(W.std(ddof=1) / math.sqrt(W.size))
    R, L = 400, 10
    theta = tsw.sample_projections(5, R * L, seed=5, dtype=F64).T.reshape(R, L, 5).mT
    Xb, Yb = X.expand(R, -1, -1), Y.expand(R, -1, -1)
    plain = np.array([pot_costs(X, Y, theta[r]).mean() for r in range(R)])
    for coefficient in ("leave_one_out", "pooled"):
        lcv = tsw.lcv_sw(Xb, Yb, projections=theta, power=True, coefficient=coefficient)
        se = float(lcv.std() / math.sqrt(R))
        # leave-one-out: exactly unbiased; pooled: its O(1/L) bias is within 1.5 %
        slack = 0 if coefficient == "leave_one_out" else 0.015 * truth
        assert abs(float(lcv.mean()) - truth) < 4 * math.hypot(se, truth_se) + slack
        assert float(lcv.var()) < 0.5 * float(plain.var(ddof=1))
    assert abs(plain.mean() - truth) < 4 * math.hypot(plain.std() / math.sqrt(R), truth_se)


def test_without_a_varying_variate_it_is_sw():
    """d = 1 (G is constant) and identical means (the lower G is 0): SW (POT), not noise."""
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(20, 1, generator=g, dtype=F64), torch.randn(15, 1, generator=g, dtype=F64)
    value, log = tsw.lcv_sw(X, Y, n_projections=6, seed=0, log=True)
    assert float(value) == pytest.approx(
        math.sqrt(pot_costs(X, Y, log["projections"]).mean()), rel=1e-12
    )
    # the same mean exactly (integer points summing to 0, 16 atoms: exact weighted
    # means), another spread
    X2 = torch.randint(-5, 6, (16, 3), generator=g).to(F64)
    X2[-1] -= X2.sum(0)
    Y2 = 3 * X2
    theta = tsw.sample_projections(3, 8, seed=1, dtype=F64)
    assert float(tsw.lcv_sw(X2, Y2, projections=theta)) == pytest.approx(
        math.sqrt(pot_costs(X2, Y2, theta).mean()), rel=1e-12
    )


def test_a_negative_estimate_has_a_zero_root_with_a_zero_gradient():
    """The corrected mean can fall below 0 (three directions, leave-one-out coefficients):
    the power form returns the estimate itself, the root form 0 with a zero gradient."""
    g = torch.Generator().manual_seed(46)
    X = torch.randn(6, 2, generator=g, dtype=F64)
    Y = 0.3 * torch.randn(6, 2, generator=g, dtype=F64) + torch.tensor([2.0, 0.0], dtype=F64)
    theta = tsw.sample_projections(2, 3, seed=61, dtype=F64)
    kwargs = {"projections": theta, "variate": "upper", "coefficient": "leave_one_out"}
    estimate = tsw.lcv_sw(X, Y, power=True, **kwargs)
    expected = lcv_by_hand(X, Y, theta, 2, "upper", "leave_one_out")
    assert expected < 0
    assert float(estimate) == pytest.approx(expected, rel=1e-10)
    Xg = X.clone().requires_grad_()
    root, log = tsw.lcv_sw(Xg, Y, log=True, **kwargs)
    assert float(root.detach()) == 0.0
    assert float(log["per_tree"].detach().abs().max()) == 0.0
    (grad,) = torch.autograd.grad(root, Xg)
    assert float(grad.abs().max()) == 0.0


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("variate", "middle", "variate must be one of 'lower', 'upper'; got 'middle'"),
        ("coefficient", "loo", "coefficient must be one of 'pooled', 'leave_one_out'; got 'loo'"),
    ],
)
def test_bad_options_name_the_argument_and_the_value(option, value, message):
    X = torch.zeros(3, 2)
    with pytest.raises(ValueError, match=message):
        tsw.lcv_sw(X, X + 1, seed=0, **{option: value})
    with pytest.raises(ValueError, match=message):
        tsw.nn.LCVSWLoss(**{option: value})


def lcv_weighted_by_hand(X, Y, a, b, theta, p, variate):
    """The pooled estimate in float64 numpy for weighted measures of equal totals.

    Each direction's cost is POT's ``wasserstein_1d`` on the weights as given (a cost of
    degree 1 in the masses); the Gaussian moments are those of the normalised weights.
    """
    X, Y, a, b, theta = (np.asarray(t, dtype=np.float64) for t in (X, Y, a, b, theta))
    d, L = theta.shape
    u, v = a / a.sum(), b / b.sum()
    m1, m2 = u @ X, v @ Y
    W, G = np.zeros(L), np.zeros(L)
    for ell in range(L):
        t = theta[:, ell]
        W[ell] = a.sum() * float(ot.wasserstein_1d(X @ t, Y @ t, u, v, p=p))
        G[ell] = (t @ (m1 - m2)) ** 2
        if variate == "upper":
            G[ell] += u @ ((X - m1) @ t) ** 2 + v @ ((Y - m2) @ t) ** 2
    EG = np.sum((m1 - m2) ** 2) / d
    if variate == "upper":
        EG += (u @ np.sum((X - m1) ** 2, 1) + v @ np.sum((Y - m2) ** 2, 1)) / d
    D = G - EG
    alpha = np.mean((W - W.mean()) * D) / np.mean(D**2)
    return W.mean() - alpha * D.mean()


@pytest.mark.parametrize("total", [3.0, 0.25])
@pytest.mark.parametrize("variate", ["lower", "upper"])
def test_weights_of_equal_totals_other_than_one(variate, total):
    """The Gaussian moments are those of the normalised weights (numpy reference)."""
    X, Y = clouds(5, N=12, M=9, d=4)
    g = torch.Generator().manual_seed(2)
    a = torch.rand(12, generator=g, dtype=F64) + 0.2
    b = torch.rand(9, generator=g, dtype=F64) + 0.2
    a, b = total * a / a.sum(), total * b / b.sum()
    theta = tsw.sample_projections(4, 15, seed=7, dtype=F64)
    for p in (2.0, 1.5):
        got = tsw.lcv_sw(X, Y, a, b, projections=theta, p=p, variate=variate, power=True)
        want = lcv_weighted_by_hand(X, Y, a, b, theta, p, variate)
        assert float(got) == pytest.approx(want, rel=1e-10)


@pytest.mark.parametrize("scale", [1e15, 1e-15])
@pytest.mark.parametrize("variate", ["lower", "upper"])
def test_float32_at_extreme_data_scales_keeps_the_control_variate(variate, scale):
    """float32 data times 1e15 or 1e-15 (inside the range checks): the estimate is
    ``scale`` times the float64 numpy estimate at scale 1 (degree 1 of the root in the
    data), not plain SW (the squares of its variances overflowed or underflowed)."""
    X, Y = clouds(1, N=40, M=40)
    theta = tsw.sample_projections(5, 20, seed=3, dtype=F64)
    want = lcv_by_hand(X, Y, theta, 2, variate) ** 0.5
    plain = math.sqrt(pot_costs(X, Y, theta).mean())
    assert abs(want - plain) > 1e-3 * want  # the correction matters here
    Xf, Yf = (X * scale).float(), (Y * scale).float()
    got = tsw.lcv_sw(Xf, Yf, projections=theta.float(), variate=variate)
    assert float(got) / scale == pytest.approx(want, rel=1e-4)


def test_means_equal_to_rounding_give_no_correction():
    """Two centred clouds whose means differ by rounding only (about 1e-17, against
    points of magnitude 3): the lower variate is noise, so the estimate is SW's (POT),
    as for exactly equal means."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(40, 3, generator=g, dtype=F64)
    Y = 1.7 * torch.randn(40, 3, generator=g, dtype=F64)
    X, Y = X - X.mean(0), Y - Y.mean(0)
    gap = float((X.mean(0) - Y.mean(0)).abs().max())
    assert 0 < gap < 1e-15
    theta = tsw.sample_projections(3, 10, seed=1, dtype=F64)
    got = tsw.lcv_sw(X, Y, projections=theta)
    assert float(got) == pytest.approx(math.sqrt(pot_costs(X, Y, theta).mean()), rel=1e-12)
