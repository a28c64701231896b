"""SSW (``tsw.sliced._ssw``): values against POT's circle OT and the exact LP, options.

``ssw`` and ``ssw_unif`` against POT (and the LP on the circle), the direction of the
gradient flow, the checks of the great circles (NaN, zero, skewed frames raise; without
validation no hang), and a point at a pole of a circle.
"""

from __future__ import annotations

import math

import numpy as np
import ot
import pytest
import torch
from _reference import data, lit

import tsw

F64 = torch.float64


def on_sphere(*shape, dtype=F64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(*shape, generator=g, dtype=F64), dim=-1).to(
        dtype
    )


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def random_case(rng, D, N, M):
    X = unit(rng.normal(size=(N, D)))
    Y = unit(rng.normal(size=(M, D)))
    a = rng.random(N) + 0.1
    b = rng.random(M) + 0.1
    return X, Y, a / a.sum(), b / b.sum()


@pytest.mark.parametrize("p", [1, 2, 1.5])
def test_ssw_matches_pot(p, dtype):
    rng = np.random.default_rng(int(2 * p))
    X, Y, a, b = (torch.tensor(z, dtype=dtype) for z in random_case(rng, 4, 9, 6))
    P = tsw.sample_sphere_projections(4, 20, seed=3, dtype=dtype)
    expected = ot.sliced_wasserstein_sphere(
        X.double(), Y.double(), a.double(), b.double(), projections=P.double(), n_projections=20,
        p=p,
    )  # fmt: skip
    value = tsw.ssw(X, Y, a, b, projections=P, p=p)
    assert value.dtype == dtype
    tol = 1e-12 if dtype == F64 else 1e-5
    assert value.item() == pytest.approx(expected.item(), rel=tol, abs=tol)
    # seeded projections: POT's layout, Haar-random orthonormal 2-frames
    P = tsw.sample_sphere_projections(4, 500, seed=0, dtype=F64)
    torch.testing.assert_close(P.transpose(-1, -2) @ P, torch.eye(2, dtype=F64).expand(500, 2, 2))


def test_ssw_unif_matches_pot_and_the_exact_lp():
    rng = np.random.default_rng(4)
    X, _, a, _ = random_case(rng, 3, 12, 2)
    Xt = torch.tensor(X)
    P = tsw.sample_sphere_projections(3, 25, seed=1, dtype=F64)
    expected = ot.sliced_wasserstein_sphere_unif(Xt, projections=P, n_projections=25)
    assert tsw.ssw_unif(Xt, projections=P).item() == pytest.approx(expected.item(), rel=1e-12)
    # weighted: POT 0.9.7 sorts positions without their weights; compare, great circle
    # by great circle, with POT's circle solver (binary search, weights sorted along)
    # against a fine uniform grid
    grid = (np.arange(20000) + 0.5) / 20000
    costs = []
    for frame in P.numpy():
        xp = X @ frame
        pos = (np.arctan2(-xp[:, 1], -xp[:, 0]) + np.pi) / (2 * np.pi)
        costs.append(ot.binary_search_circle(pos, grid, a, None, p=2)[0])
    value = tsw.ssw_unif(Xt, torch.tensor(a), projections=P).item()
    assert value == pytest.approx(np.sqrt(np.mean(costs)), rel=1e-4)
    wrong = ot.sliced_wasserstein_sphere_unif(Xt, torch.tensor(a), projections=P, n_projections=25)
    assert abs(wrong.item() - value) > 1e-3  # the POT defect this function avoids


def test_ssw_gradient_flow_direction():
    """-grad SSW_2 points from the source towards the target (a sanity check of the wrap)."""
    e = torch.eye(3, dtype=F64)
    X = torch.nn.functional.normalize(e[0] + 0.1 * e[1], dim=-1)[None].requires_grad_()
    value = tsw.ssw(X, e[1:2], n_projections=200, seed=0)
    (g,) = torch.autograd.grad(value, X)
    assert float(g[0] @ e[1]) < 0


# --------------------------------------------------------------------------- checks of the options


def test_ssw_projections_and_options():
    X, Y = on_sphere(5, 3), on_sphere(4, 3, seed=1)
    with pytest.raises(
        ValueError, match=lit("projections must have shape (L, d+1, 2) with d+1=3; got")
    ):
        tsw.ssw(X, Y, projections=torch.zeros(4, 3, 3, dtype=F64))
    with pytest.raises(ValueError, match=lit("projections must have the dtype and device of X_s")):
        tsw.ssw(X, Y, projections=tsw.sample_sphere_projections(3, 4))
    with pytest.raises(TypeError, match=lit("projections must be a torch.Tensor; got list")):
        tsw.ssw_unif(X, projections=[[0.0]])
    with pytest.raises(ValueError, match=lit("n_projections must be an int >= 1; got 0")):
        tsw.ssw(X, Y, n_projections=0)
    with pytest.raises(ValueError, match=lit("p must be a finite real number >= 1; got 0.5")):
        tsw.ssw(X, Y, p=0.5)
    with pytest.raises(
        TypeError, match=lit("generator must be a torch.Generator or None; got int")
    ):
        tsw.ssw(X, Y, generator=0)


CIRCLES = [
    ("ssw", lambda X, Y, **kw: tsw.ssw(X, Y, **kw)),
    ("ssw_unif", lambda X, Y, **kw: tsw.ssw_unif(X, **kw)),
]


def sphere_data(N=12, M=9, dtype=F64):
    X, Y = data(N, M, 3, dtype=dtype)
    return torch.nn.functional.normalize(X, dim=-1), torch.nn.functional.normalize(Y, dim=-1)


@pytest.mark.parametrize(("name", "f"), CIRCLES)
@pytest.mark.parametrize("kind", ["nan", "inf", "zero", "scaled", "skew"])
def test_circle_frames_are_value_checked(name, f, kind):
    """NaN, zero, scaled or skewed frames raise (POT's binary search would loop forever on
    NaN or zero frames, and skewed ones would pass silently)."""
    X, Y = sphere_data()
    P = tsw.sample_sphere_projections(3, 6, seed=0, dtype=F64)
    if kind == "nan":
        P[0, 0, 0] = math.nan
    elif kind == "inf":
        P[2, 1, 1] = math.inf
    elif kind == "zero":
        P = torch.zeros_like(P)
    elif kind == "scaled":
        P = 2 * P
    else:
        P[..., 1] = P[..., 0]
    message = "contains NaN or Inf" if kind in ("nan", "inf") else "must have orthonormal columns"
    with pytest.raises(ValueError, match=lit(f"projections {message}")):
        f(X, Y, projections=P, p=2) if name == "ssw" else f(X, Y, projections=P)


def test_ssw_without_validation_never_hangs_on_bad_frames():
    X, Y = sphere_data()
    P = tsw.sample_sphere_projections(3, 6, seed=0, dtype=F64)
    P[0, 0, 0] = math.nan
    assert math.isnan(float(tsw.ssw(X, Y, projections=P, validate=False)))
    value = tsw.ssw(X, Y, projections=torch.zeros_like(P), validate=False)
    assert math.isfinite(float(value))


def test_ssw_point_at_a_pole_of_a_circle():
    """U^T x = 0: POT's own projection gives 0/0 and its p > 1 search never ends."""
    import numpy as np
    import ot

    X = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], dtype=F64)
    Y = torch.tensor([[0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]], dtype=F64)
    P = torch.eye(3, dtype=F64)[None, :, :2]  # the circle of the (e1, e2) plane
    for p in (1, 2):
        got = tsw.ssw(X, Y, projections=P, p=p, power=True)
        # positions atan2(y, x) / 2pi by hand: the pole (e3) at 0 (the convention), e1 at
        # 0, e2 at 0.25, -e1 at 0.5
        u, v = np.array([[0.0], [0.0]]), np.array([[0.25], [0.5]])
        want = ot.wasserstein_circle(u, v, p=p)[0]
        assert abs(float(got) - want) < 1e-12
