"""tsw.datasets: the generators' distributions (against closed-form CDFs), seeding, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tsw import datasets

stats = pytest.importorskip("scipy.stats")

GENERATORS = {
    "25gaussians": lambda **kw: datasets.make_25gaussians(200, **kw),
    "swissroll": lambda **kw: datasets.make_swiss_roll(200, **kw),
    "gaussian": lambda **kw: datasets.make_gaussian(200, 7, **kw),
    "vmf": lambda **kw: datasets.sample_vmf(torch.tensor([0.0, 0.0, 1.0]), 5.0, 200, **kw),
    "vmf_mixture": lambda **kw: datasets.make_vmf_mixture(10, **kw),
    "torus": lambda **kw: datasets.torus_surface(200, **kw),
    "outliers": lambda **kw: datasets.make_torus_with_outliers(200, **kw).target,
}


@pytest.mark.parametrize("name", GENERATORS)
def test_seed_dtype_device_and_generator(name):
    make = GENERATORS[name]
    X64 = make(seed=3, dtype=torch.float64)
    X32 = make(seed=3, dtype=torch.float32, device="cpu")
    assert X64.dtype == torch.float64
    assert X32.dtype == torch.float32
    assert torch.equal(X32, X64.float())  # drawn in float64, then cast
    assert torch.equal(make(seed=3, dtype=torch.float64), X64)
    assert torch.equal(make(generator=torch.Generator().manual_seed(3), dtype=torch.float64), X64)
    assert not torch.equal(make(seed=4, dtype=torch.float64), X64)
    assert not torch.equal(make(dtype=torch.float64), make(dtype=torch.float64))  # entropy


def test_25gaussians_clusters():
    n = 25 * 40
    Y = datasets.make_25gaussians(n, seed=0)
    grid = torch.arange(-2.0, 3.0, dtype=torch.float64)
    centres = 2 * torch.cartesian_prod(grid, grid) / 2.828
    d = torch.cdist(Y, centres)
    nearest = d.argmin(1)
    assert torch.equal(torch.bincount(nearest, minlength=25), torch.full((25,), 40))
    # noise std 0.05 / 2.828 per coordinate: the squared distance / sigma^2 is chi^2(2)
    r2 = d.min(1).values ** 2 / (0.05 / 2.828) ** 2
    assert stats.kstest(r2.numpy(), stats.chi2(2).cdf).pvalue > 1e-3
    assert datasets.make_25gaussians(110, seed=0).shape == (110, 2)  # not a multiple of 25
    assert datasets.make_25gaussians(7, seed=0).shape == (7, 2)


def test_swiss_roll_is_a_spiral_in_the_unit_square():
    Y = datasets.make_swiss_roll(2000, seed=0)
    assert float(Y.abs().max()) == 1.0
    # t (cos t, sin t) / s: the radius equals the angle up to the common scale s
    r = Y.norm(dim=1)
    t = r / r.max() * 4.5 * math.pi  # the largest t is close to 4.5 pi
    assert torch.allclose(Y / r[:, None], torch.stack([t.cos(), t.sin()], 1), atol=0.05)
    u = (r / r.max() * 4.5 * math.pi / (1.5 * math.pi) - 1) / 2  # t = 1.5 pi (1 + 2u)
    assert stats.kstest(u.numpy(), "uniform", args=(0, 1.001)).pvalue > 1e-3


def test_gaussian_mean_and_covariance():
    Y = datasets.make_gaussian(20_000, 4, seed=0)
    mu = torch.rand(4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert torch.allclose(Y.mean(0), mu, atol=0.05)
    assert torch.allclose(torch.cov(Y.T), torch.eye(4, dtype=torch.float64), atol=0.05)


def test_icosahedron():
    V = datasets.icosahedron()
    assert V.shape == (12, 3)
    G = V @ V.T
    assert torch.allclose(G.diagonal(), torch.ones(12, dtype=G.dtype))
    off = G - 2 * torch.eye(12, dtype=G.dtype)  # 5 nearest neighbours at the angle arccos(1/sqrt 5)
    assert torch.allclose(off.max(1).values, torch.full((12,), 5**-0.5, dtype=G.dtype))
    assert torch.equal((off > 0.4).sum(1), torch.full((12,), 5))


@pytest.mark.parametrize("kappa", [0.5, 5.0, 50.0])
def test_vmf_cosine_follows_its_cdf_and_the_tangent_is_uniform(kappa):
    mu = torch.nn.functional.normalize(torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64), dim=0)
    X = datasets.sample_vmf(mu, kappa, 4000, seed=1)
    assert torch.allclose(X.norm(dim=1), torch.ones(4000, dtype=X.dtype))
    w = (X @ mu).numpy()

    def cdf(t):  # (e^{k w} - e^{-k}) / (e^k - e^{-k}), written to avoid overflow
        return np.expm1(kappa * (t + 1)) / np.expm1(2 * kappa)

    assert stats.kstest(w, cdf).pvalue > 1e-3
    e1 = torch.nn.functional.normalize(
        torch.linalg.cross(mu, torch.tensor([0.0, 0, 1]).double()), dim=0
    )
    e2 = torch.linalg.cross(mu, e1)
    phi = torch.atan2(X @ e2, X @ e1).numpy()
    assert stats.kstest(phi, "uniform", args=(-math.pi, 2 * math.pi)).pvalue > 1e-3


def test_vmf_mixture_components_in_order():
    Y = datasets.make_vmf_mixture(100, 200.0, seed=0)
    assert Y.shape == (1200, 3)
    nearest = (Y @ datasets.icosahedron().T).argmax(1)
    assert torch.equal(nearest, torch.arange(12).repeat_interleave(100))
    means = torch.tensor([[0.0, 0, 1], [0, 0, -1]])
    Z = datasets.make_vmf_mixture(5, 100.0, means=means, seed=0, dtype=torch.float32)
    assert Z.shape == (10, 3)
    assert bool((Z[:5, 2] > 0.9).all())
    assert bool((Z[5:, 2] < -0.9).all())


def test_torus_is_uniform_on_the_surface():
    R, r = datasets.RING, datasets.TUBE
    P = datasets.torus_surface(5000, seed=0)
    assert float(datasets.distance_to_torus(P).max()) < 1e-12
    rho = P[:, :2].norm(dim=1)
    v = torch.atan2(P[:, 2] / r, (rho - R) / r).remainder(2 * math.pi).numpy()
    # the area element is (R + r cos v) du dv: F(v) = (R v + r sin v) / (2 pi R)
    assert stats.kstest(v, lambda t: (R * t + r * np.sin(t)) / (2 * math.pi * R)).pvalue > 1e-3
    u = torch.atan2(P[:, 1], P[:, 0]).numpy()
    assert stats.kstest(u, "uniform", args=(-math.pi, 2 * math.pi)).pvalue > 1e-3


def test_torus_with_outliers():
    data = datasets.make_torus_with_outliers(200, 0.07, seed=0)
    assert data.source.shape == (200, 3)
    assert data.target.shape == (214, 3)
    assert data.outliers.shape == (14, 3)
    assert torch.equal(data.target[200:], data.outliers)
    assert float(datasets.distance_to_torus(data.target[:200]).max()) < 1e-12
    assert float(data.outliers.abs().max()) <= 0.6 * 0.19
    centre = torch.tensor([0.0, 0.03, 0.0], dtype=torch.float64)
    assert torch.allclose((data.source - centre).norm(dim=1), torch.full((200,), 0.06).double())
    assert datasets.make_torus_with_outliers(50, 0.0, seed=0).outliers.shape == (0, 3)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: datasets.make_25gaussians(0), ValueError, "n must be an int >= 1; got 0"),
        (lambda: datasets.make_swiss_roll(2.5), TypeError, "n must be an int"),
        (lambda: datasets.make_gaussian(5, 0), ValueError, "dim must be an int >= 1"),
        (lambda: datasets.make_25gaussians(5, std=-1.0), ValueError, "std must be"),
        (lambda: datasets.make_25gaussians(5, dtype=torch.int64), TypeError, "dtype must be"),
        (
            lambda: datasets.make_25gaussians(5, seed=0, generator=torch.Generator()),
            ValueError,
            "at most one",
        ),
        (lambda: datasets.make_25gaussians(5, seed="0"), TypeError, "seed must be an int"),
        (lambda: datasets.make_25gaussians(5, generator=0), TypeError, "generator must be"),
        (
            lambda: datasets.sample_vmf(torch.ones(3), 1.0, 5),
            ValueError,
            "mean must be a unit vector",
        ),
        (lambda: datasets.sample_vmf(torch.ones(4) / 2, 1.0, 5), ValueError, r"shape \(3,\)"),
        (
            lambda: datasets.sample_vmf(torch.tensor([0.0, 0, 1]), 0.0, 5),
            ValueError,
            "kappa must be",
        ),
        (
            lambda: datasets.make_vmf_mixture(5, means=torch.ones(2)),
            ValueError,
            r"means must have shape \(K, 3\)",
        ),
        (lambda: datasets.torus_surface(5, ring=0.1, tube=0.2), ValueError, "tube must be smaller"),
        (
            lambda: datasets.distance_to_torus(torch.ones(4, 2)),
            ValueError,
            r"P must have shape \(n, 3\)",
        ),
        (
            lambda: datasets.make_torus_with_outliers(5, -0.1),
            ValueError,
            "outlier_fraction must be",
        ),
    ],
)
def test_bad_arguments_raise_naming_them(call, error, match):
    with pytest.raises(error, match=match):
        call()
