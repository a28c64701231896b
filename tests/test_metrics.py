"""tsw.metrics against independent computations: scipy's assignment solver, 1-D closed
forms, scipy's von Mises-Fisher density, angles known in closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tsw import datasets, metrics

optimize = pytest.importorskip("scipy.optimize")
stats = pytest.importorskip("scipy.stats")
special = pytest.importorskip("scipy.special")


def _assignment_cost(C: np.ndarray) -> float:
    """Optimal cost of uniform measures of equal size: a permutation (Birkhoff)."""
    rows, cols = optimize.linear_sum_assignment(C)
    return float(C[rows, cols].mean())


@pytest.mark.parametrize("p", [1.0, 1.5, 2.0, 3.0])
def test_wasserstein_equals_the_optimal_assignment(p):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(40, 3, generator=g, dtype=torch.float64)
    Y = torch.randn(40, 3, generator=g, dtype=torch.float64) + 0.5
    C = torch.cdist(X, Y).numpy() ** p
    expected = _assignment_cost(C)
    assert metrics.wasserstein(X, Y, p=p, power=True) == pytest.approx(expected, rel=1e-10)
    assert metrics.wasserstein(X, Y, p=p) == pytest.approx(expected ** (1 / p), rel=1e-10)
    # numpy and float32 inputs give the float64 value of the same points
    assert metrics.wasserstein(X.numpy(), Y.numpy(), p=p) == pytest.approx(expected ** (1 / p))
    assert metrics.wasserstein(X.float(), Y.float(), p=p) == pytest.approx(
        expected ** (1 / p), rel=1e-5
    )


def test_wasserstein_weighted_one_dimensional_closed_forms():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(30, generator=g).double(), torch.randn(20, generator=g).double() * 2
    a, b = torch.rand(30, generator=g).double(), torch.rand(20, generator=g).double()
    a, b = a / a.sum(), b / b.sum()
    w1 = stats.wasserstein_distance(x.numpy(), y.numpy(), a.numpy(), b.numpy())
    assert metrics.wasserstein(x[:, None], y[:, None], a, b, p=1) == pytest.approx(w1, rel=1e-10)
    # W_2^2 in 1-D: the integral over t in (0, 1) of the squared difference of quantiles
    xs, ia = torch.sort(x)
    ys, ib = torch.sort(y)
    ca, cb = a[ia].cumsum(0), b[ib].cumsum(0)
    knots = torch.unique(torch.cat([ca, cb, torch.zeros(1).double()]).clamp(0, 1))
    mids = (knots[1:] + knots[:-1]) / 2
    qa = xs[torch.searchsorted(ca, mids).clamp(max=29)]
    qb = ys[torch.searchsorted(cb, mids).clamp(max=19)]
    w2sq = float(((qa - qb) ** 2 * knots.diff()).sum())
    assert metrics.wasserstein(x[:, None], y[:, None], a, b, power=True) == pytest.approx(
        w2sq, rel=1e-10
    )


def test_wasserstein_translation():
    X = torch.randn(10, 2, generator=torch.Generator().manual_seed(0))
    assert metrics.wasserstein(X, X + torch.tensor([3.0, 4.0]), p=1) == pytest.approx(5.0, rel=1e-6)
    assert metrics.wasserstein(X, X) == 0.0


def test_geodesic_wasserstein_equals_the_optimal_assignment_on_s2_and_s3():
    for dim in (3, 4):
        g = torch.Generator().manual_seed(dim)
        X = torch.nn.functional.normalize(torch.randn(30, dim, generator=g).double(), dim=1)
        Y = torch.nn.functional.normalize(torch.randn(30, dim, generator=g).double(), dim=1)
        angles = np.arccos(np.clip(X.numpy() @ Y.numpy().T, -1, 1))  # generic: no clamp issue
        for p in (1.0, 2.0):
            expected = _assignment_cost(angles**p)
            value = metrics.geodesic_wasserstein(X, Y, p=p, power=True)
            assert value == pytest.approx(expected, rel=1e-10)


def test_geodesic_distance_is_exact_at_tiny_and_antipodal_angles():
    for theta in (1e-9, 1e-4, 1.0, math.pi - 1e-6):
        x = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
        y = torch.tensor([[math.cos(theta), math.sin(theta), 0.0]], dtype=torch.float64)
        assert metrics.geodesic_wasserstein(x, y) == pytest.approx(theta, rel=1e-9)
        assert metrics.geodesic_wasserstein(x, y, p=1) == pytest.approx(theta, rel=1e-9)


@pytest.mark.parametrize("kappa", [0.3, 10.0, 50.0, 800.0])
def test_vmf_mixture_nll_equals_scipy_density(kappa):
    X = datasets.make_vmf_mixture(20, 30.0, seed=0)
    means = datasets.icosahedron()
    w = torch.linspace(1.0, 2.0, 12, dtype=torch.float64)
    logpdf = np.stack(
        [stats.vonmises_fisher(m.numpy(), kappa).logpdf(X.numpy()) for m in means], axis=1
    )
    for weights in (None, w):
        wn = np.full(12, 1 / 12) if weights is None else (weights / weights.sum()).numpy()
        expected = -float(np.mean(special.logsumexp(logpdf + np.log(wn), axis=1)))
        value = metrics.vmf_mixture_nll(X, means, kappa, weights)
        assert value == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_vmf_nll_of_a_tiny_concentration_is_the_uniform_density():
    X = datasets.make_vmf_mixture(3, 10.0, seed=0)
    value = metrics.vmf_mixture_nll(X, datasets.icosahedron(), 1e-8)
    assert value == pytest.approx(math.log(4 * math.pi), rel=1e-6)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda: metrics.wasserstein(torch.ones(2, 3, 2), torch.ones(2, 3, 2)),
            ValueError,
            "one pair",
        ),
        (
            lambda: metrics.wasserstein(torch.ones(3, 2), torch.ones(3, 3)),
            ValueError,
            "same feature",
        ),
        (
            lambda: metrics.wasserstein(torch.ones(3, 2), torch.ones(3, 2), torch.ones(3), None),
            ValueError,
            "equal total mass",
        ),
        (lambda: metrics.wasserstein([[0.0]], [[1.0]]), TypeError, "X_s must be a torch.Tensor"),
        (
            lambda: metrics.wasserstein(torch.ones(3, 2), torch.ones(3, 2), p=0.5),
            ValueError,
            "p must",
        ),
        (
            lambda: metrics.wasserstein(np.ones((3, 2), dtype=np.int64), np.ones((3, 2))),
            TypeError,
            "X_s must have dtype",
        ),
        (
            lambda: metrics.geodesic_wasserstein(torch.ones(3, 3), torch.ones(3, 3)),
            ValueError,
            "X_s must lie on the unit sphere",
        ),
        (
            lambda: metrics.vmf_mixture_nll(torch.ones(3, 4), torch.ones(2, 4), 1.0),
            ValueError,
            r"X must have shape \(n, 3\)",
        ),
        (
            lambda: metrics.vmf_mixture_nll(torch.ones(3, 3), torch.ones(2, 3), -1.0),
            ValueError,
            "kappa must be",
        ),
        (
            lambda: metrics.vmf_mixture_nll(torch.ones(3, 3), torch.ones(2, 3), 1.0, torch.ones(3)),
            ValueError,
            r"weights must have shape \(K,\)",
        ),
    ],
)
def test_bad_arguments_raise_naming_them(call, error, match):
    with pytest.raises(error, match=match):
        call()
