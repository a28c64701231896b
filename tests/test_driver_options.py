"""The options every distance takes from the driver: ``power``, ``log``, numpy in and out."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _curved import hyperbolic, lifted, poincare, spd
from _mixed import mc_tsw as lifted_mc_tsw
from _public import NOT_DISTANCES

import tsw

F64 = torch.float64


def _data(d=3, n=12, m=9, seed=0, sphere=False):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=F64)
    Y = torch.randn(m, d, generator=g, dtype=F64) + 0.7
    if sphere:
        X, Y = torch.nn.functional.normalize(X, dim=-1), torch.nn.functional.normalize(Y, dim=-1)
    return X, Y


#: (name, call(X, Y, **options), p, sphere, one measure, sliced)
CALLS = [
    ("tsw_sl", lambda X, Y, **o: tsw.tsw_sl(X, Y, n_trees=6, n_lines=3, **o), 1, False, False),
    ("db_tsw", lambda X, Y, **o: tsw.db_tsw(X, Y, n_trees=6, p=2, **o), 2, False, False),
    (
        "circular_tsw",
        lambda X, Y, **o: tsw.circular_tsw(X, Y, radius=0.1, n_trees=6, **o),
        1,
        False,
        False,
    ),
    (
        "spatial_tsw",
        lambda X, Y, **o: tsw.spatial_tsw(X, Y, n_trees=6, p=1.5, **o),
        1.5,
        False,
        False,
    ),
    (
        "partial_tsw",
        lambda X, Y, **o: tsw.partial_tsw(X, Y, mass_t=0.8, n_trees=6, **o),
        1,
        False,
        False,
    ),
    ("sw", lambda X, Y, **o: tsw.sw(X, Y, n_projections=7, **o), 2, False, True),
    ("max_sw", lambda X, Y, **o: tsw.max_sw(X, Y, n_iter=3, **o), 2, False, True),
    ("stsw", lambda X, Y, **o: tsw.stsw(X, Y, n_trees=6, p=2, **o), 2, True, False),
    ("stsw_unif", lambda X, Y, **o: tsw.stsw_unif(X, n_trees=6, **o), 1, True, False),
    ("spatial_stsw", lambda X, Y, **o: tsw.spatial_stsw(X, Y, n_trees=6, **o), 1, True, False),
    ("ssw", lambda X, Y, **o: tsw.ssw(X, Y, n_projections=5, **o), 2, True, True),
    ("ssw_unif", lambda X, Y, **o: tsw.ssw_unif(X, n_projections=5, **o), 2, True, True),
    ("s3w", lambda X, Y, **o: tsw.s3w(X, Y, n_projections=5, n_rotations=2, **o), 2, True, True),
    ("s3w_unif", lambda X, Y, **o: tsw.s3w_unif(X, n_samples=50, **o), 2, True, True),
    ("partial_sw", lambda X, Y, **o: tsw.partial_sw(X, Y, n_projections=5, **o), 2, False, True),
    (
        "unbalanced_sw",
        lambda X, Y, **o: tsw.unbalanced_sw(X, Y, n_projections=5, **o),
        2,
        False,
        True,
    ),
    ("ts_sobolev", lambda X, Y, **o: tsw.ts_sobolev(X, Y, n_trees=6, p=2, **o), 2, False, False),
    (
        "max_tsw_sl",
        lambda X, Y, **o: tsw.max_tsw_sl(X, Y, n_trees=2, n_iter=3, **o),
        1,
        False,
        False,
    ),
    ("rp_sw", lambda X, Y, **o: tsw.rp_sw(X, Y, n_projections=7, **o), 2, False, True),
    # LCV-SW and EB-SW average corrected / reweighted terms (per_tree), while their
    # projected_emds are POT's plain per-direction costs: not "sliced" in this test's sense
    ("lcv_sw", lambda X, Y, **o: tsw.lcv_sw(X, Y, n_projections=7, **o), 2, False, False),
    ("eb_sw", lambda X, Y, **o: tsw.eb_sw(X, Y, n_projections=7, **o), 2, False, False),
    ("support_tsw", lambda X, Y, **o: tsw.support_tsw(X, Y, n_trees=6, **o), 1, False, False),
    # on R^1 x S^1 x H^1, the data lifted (tests/_mixed.py)
    ("mc_tsw", lambda X, Y, **o: lifted_mc_tsw(X, Y, n_trees=6, p=2, **o), 2, False, False),
    # on H^3 and SPD(2), the data lifted (tests/_curved.py)
    ("ghsw", lifted(tsw.ghsw, hyperbolic, n_projections=7), 2, False, True),
    ("hhsw", lifted(tsw.hhsw, poincare, n_projections=7, model="poincare", p=1), 1, False, True),
    ("spdsw", lifted(tsw.spdsw, spd, n_projections=7), 2, False, True),
    ("hspdsw", lifted(tsw.hspdsw, spd, n_projections=7, p=1.5), 1.5, False, True),
]
IDS = [c[0] for c in CALLS]


def test_every_distance_is_listed():
    listed = {c[0] for c in CALLS}
    distances = {n for n in tsw.__all__ if callable(getattr(tsw, n)) and n[0].islower()}
    # everything else public (samplers, plans, tree builders, barycenters): tests/_public.py;
    # support_tsw is listed there (the contract suite differentiates in the points) and here
    not_distances = NOT_DISTANCES - listed
    assert distances - not_distances == listed


@pytest.mark.parametrize(("name", "call", "p", "sphere", "sliced"), CALLS, ids=IDS)
def test_power_and_log(name, call, p, sphere, sliced):
    X, Y = _data(sphere=sphere)
    value = call(X, Y, seed=1)
    power = call(X, Y, seed=1, power=True)
    torch.testing.assert_close(power, value**p, rtol=1e-12, atol=1e-14)
    logged, log = call(X, Y, seed=1, log=True)
    assert torch.equal(logged, value)
    per_tree = log["per_tree"]
    assert per_tree.ndim == 1
    torch.testing.assert_close(per_tree.mean() ** (1 / p), value, rtol=1e-12, atol=1e-14)
    se = log["std_error"]
    assert se.shape == ()
    assert not se.requires_grad
    if per_tree.shape[0] == 1:  # max_sw: one direction, no spread to estimate
        assert math.isnan(float(se))
    else:
        assert bool(torch.isfinite(se))
        assert se >= 0
    assert log["trees"] is not None
    if sliced:
        assert torch.equal(log["projected_emds"], per_tree)
        assert log["projections"] is not None
    # batched: (B, T) per-tree values, (B,) errors
    Xb, Yb = torch.stack([X, X.flip(0)]), torch.stack([Y, Y])
    _, logb = call(Xb, Yb, seed=1, log=True)
    assert logb["per_tree"].shape[0] == 2
    assert logb["std_error"].shape == (2,)


@pytest.mark.parametrize(
    ("fn", "key"),
    [
        (lambda X, Y, **o: tsw.db_tsw(X, Y, n_trees=5, **o), "trees"),
        (lambda X, Y, **o: tsw.tsw_sl(X, Y, n_trees=5, **o), "trees"),
        (lambda X, Y, **o: tsw.sw(X, Y, n_projections=5, **o), "projections"),
    ],
)
def test_logged_slices_recompute_the_value(fn, key):
    X, Y = _data(d=4)
    value, log = fn(X, Y, log=True)  # entropy: the logged slices are the only record
    assert torch.equal(fn(X, Y, **{key: log["trees"]}), value)


def test_per_tree_is_differentiable():
    X, Y = _data()
    X.requires_grad_(True)
    _, log = tsw.db_tsw(X, Y, n_trees=4, seed=0, log=True)
    log["per_tree"][1].backward()
    single = tsw.db_tsw(X.detach().requires_grad_(True), Y, n_trees=4, seed=0, log=True)
    assert bool(torch.isfinite(X.grad).all())
    assert single[1]["per_tree"].shape == (4,)


@pytest.mark.parametrize(
    ("p", "power"),
    [
        (2, False),  # through the root: the delta method
        pytest.param(1, False, marks=pytest.mark.slow),
        pytest.param(2, True, marks=pytest.mark.slow),
    ],
)
def test_std_error_is_calibrated(p, power):
    """The reported standard error matches the spread of the value over many seeds."""
    X, Y = _data(d=5, n=20, m=15)
    values, errors = [], []
    for seed in range(300):
        v, log = tsw.db_tsw(X, Y, n_trees=20, n_lines=3, p=p, power=power, seed=seed, log=True)
        values.append(float(v))
        errors.append(float(log["std_error"]))
    spread = float(np.std(values, ddof=1))
    reported = float(np.mean(errors))
    # 300 draws: the sample std is within about 8% of the truth (2 sigma)
    assert 0.8 < reported / spread < 1.25, (reported, spread)


def test_std_error_of_one_tree_is_nan_and_zero_when_all_trees_cost_zero():
    X, Y = _data()
    _, log = tsw.db_tsw(X, Y, n_trees=1, seed=0, log=True)
    assert math.isnan(float(log["std_error"]))
    _, log = tsw.db_tsw(X, X, n_trees=5, p=2, seed=0, log=True)
    assert float(log["std_error"]) == 0.0


def test_power_gradient_bounded_where_the_measures_meet():
    """At Y = X + 1e-9 noise the root form's gradient blows up (p = 2), the power form's not.

    The power (Sobolev ST_2^2) has a gradient of the order of the squared point masses,
    (1/N)^2 per edge; the root divides it by sqrt(cost), which vanishes with the gap.
    """
    g = torch.Generator().manual_seed(3)
    X = torch.randn(50, 6, generator=g, dtype=F64)
    Y = X + 1e-9 * torch.randn(50, 6, generator=g, dtype=F64)
    grads = {}
    for power in (False, True):
        Xs = X.clone().requires_grad_(True)
        tsw.db_tsw(Xs, Y, n_trees=50, p=2, seed=0, power=power).backward()
        grads[power] = float(Xs.grad.norm())
    assert grads[True] < 0.1 / 50
    assert grads[False] > 1e3 * grads[True]


def test_loss_modules_take_power():
    X, Y = _data()
    loss = tsw.nn.SWLoss(n_projections=7, seed=0, power=True, resample=False)
    assert torch.equal(loss(X, Y), tsw.sw(X, Y, n_projections=7, power=True, seed=loss._fixed_seed))


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_power_and_log_must_be_bools(bad):
    X, Y = _data()
    for option in ("power", "log"):
        with pytest.raises(TypeError, match=option):
            tsw.db_tsw(X, Y, n_trees=2, **{option: bad})


@pytest.mark.parametrize(("name", "call", "p", "sphere", "sliced"), CALLS, ids=IDS)
@pytest.mark.parametrize("np_dtype", [np.float32, np.float64])
def test_numpy_in_numpy_out(name, call, p, sphere, sliced, np_dtype):
    X, Y = _data(sphere=sphere)
    Xn, Yn = X.numpy().astype(np_dtype), Y.numpy().astype(np_dtype)
    value = call(Xn, Yn, seed=2)
    assert isinstance(value, np.floating)
    assert value.dtype == np_dtype
    expected = call(torch.from_numpy(Xn), torch.from_numpy(Yn), seed=2)
    assert value == expected.item()
    batched = call(np.stack([Xn, Xn]), np.stack([Yn, Yn]), seed=2)
    assert isinstance(batched, np.ndarray)
    assert batched.shape == (2,)
    _, log = call(Xn, Yn, seed=2, log=True)
    assert isinstance(log["per_tree"], np.ndarray)


def test_numpy_integer_arrays_raise_naming_the_argument():
    X = np.zeros((3, 2), dtype=np.int64)
    with pytest.raises(TypeError, match=r"X_s must have dtype float32 or float64.*int64"):
        tsw.db_tsw(X, X.astype(np.float64))
    with pytest.raises(TypeError, match="b must have dtype float32 or float64"):
        tsw.sw(X.astype(np.float64), X.astype(np.float64), None, np.ones(3, dtype=np.int32))
