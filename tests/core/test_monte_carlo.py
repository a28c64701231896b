"""Monte-Carlo quality: ``trees_needed``, ``sampling=``, ``center="median"``, path directions.

* ``trees_needed`` is checked against the spread of the value over 200 seeds at the
  number of trees it predicts from a pilot run (not against its own formula).
* ``sampling="orthogonal"`` / ``"qmc"``: each tree must keep the law of an i.i.d. tree.
  That is checked on the directions themselves against closed-form moments of the
  uniform law (E[theta theta^T] = I / d; two independent uniform directions have
  E[<theta_1, theta_2>^2] = 1 / d, an orthonormal pair 0), and on the values: their mean
  over seeds agrees with a 10000-tree i.i.d. estimate, whose sampler is checked against
  ``ot.emd2`` in the method files. The stratification is checked exactly (rows of
  one frame are orthonormal), and the variance must drop.
* ``center="median"`` against scipy's minimiser of the Fermat-Weber objective.
* (slow) the variance of the estimators falls like 1 / L.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

import tsw
from tsw.core._slices import geometric_median
from tsw.core._validation import check_measures

F64 = torch.float64


def data(d=5, n=30, m=25, seed=0, shift=0.7):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=F64)
    Y = 0.6 * torch.randn(m, d, generator=g, dtype=F64) + shift
    return X, Y


# --------------------------------------------------------------------------- trees_needed


@pytest.mark.parametrize(
    ("p", "power"),
    [
        (1, False),
        # through the 1/p root (the delta method, as log["std_error"], whose calibration
        # test_driver_options checks by default) and for the power: 200 seeds each
        pytest.param(2, False, marks=pytest.mark.slow),
        pytest.param(2, True, marks=pytest.mark.slow),
    ],
)
def test_trees_needed_meets_its_target_over_seeds(p, power):
    """From a 100-tree pilot, the predicted T gives the target relative spread over seeds."""
    X, Y = data()
    target = 0.03
    _, pilot = tsw.db_tsw(X, Y, n_trees=100, n_lines=3, p=p, power=power, seed=10**6, log=True)
    T = tsw.trees_needed(pilot, rel_std_error=target, p=p, power=power)
    assert 20 < T < 1000
    values = [
        float(tsw.db_tsw(X, Y, n_trees=T, n_lines=3, p=p, power=power, seed=s)) for s in range(200)
    ]
    rel = float(np.std(values, ddof=1) / np.mean(values))
    # pilot of 100: T to ~15% (the rel. spread to ~7%); 200 seeds: the spread to ~5%
    assert 0.75 < rel / target < 1.3, (T, rel)


def test_trees_needed_formula_and_inputs():
    c = torch.tensor([1.0, 3.0, 2.0, 2.0], dtype=F64)  # mean 2, std sqrt(2/3)
    ratio = math.sqrt(2 / 3) / 2
    assert tsw.trees_needed(c, 0.1) == math.ceil((ratio / 0.1) ** 2)
    assert tsw.trees_needed(c, 0.1, p=2) == math.ceil((ratio / 0.2) ** 2)
    assert tsw.trees_needed(c, 0.1, p=2, power=True) == math.ceil((ratio / 0.1) ** 2)
    assert tsw.trees_needed(c.numpy(), 0.1) == tsw.trees_needed({"per_tree": c}, 0.1)
    batch = torch.stack([c, torch.tensor([1.0, 1.1, 0.9, 1.0], dtype=F64)])
    assert tsw.trees_needed(batch, 0.1) == tsw.trees_needed(c, 0.1)  # the most any item needs
    assert tsw.trees_needed(torch.ones(3), 0.01) == 1


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((torch.ones(1),), ValueError, "T >= 2"),
        ((torch.zeros(4),), ValueError, "positive mean"),
        ((torch.tensor([1.0, float("nan")]),), ValueError, "NaN"),
        ((torch.ones(3), 0.0), ValueError, "rel_std_error"),
        ((torch.ones(3), "1%"), TypeError, "rel_std_error"),
        (([1.0, 2.0],), TypeError, "per_tree must be"),
        (({"trees": None},), TypeError, "per_tree"),
    ],
)
def test_trees_needed_rejects_bad_input(args, error, match):
    with pytest.raises(error, match=match):
        tsw.trees_needed(*args)


# --------------------------------------------------------------------------- sampling


SAMPLINGS = ["orthogonal", "qmc"]


def cross_moment(D):
    """Mean of <theta_1, theta_2>^2 over trees (lines 0 and 1 of each tree)."""
    return float(((D[:, 0] * D[:, 1]).sum(-1) ** 2).mean())


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_each_tree_keeps_the_iid_law(sampling):
    """Uniform marginals, independent lines within a tree (orthonormal with orthogonal)."""
    d, T = 6, 4000
    trees = tsw.sample_concurrent_lines(
        d, n_trees=T, n_lines=2, sampling=sampling, seed=1, dtype=F64
    )
    D = trees.directions
    assert float((torch.linalg.vector_norm(D, dim=-1) - 1).abs().max()) < 1e-12
    second = torch.einsum("tli,tlj->ij", D, D) / (2 * T)
    assert float((second - torch.eye(d, dtype=F64) / d).abs().max()) < 0.01
    assert abs(cross_moment(D) - 1 / d) < 0.01  # independent lines: 1/d (orthonormal: 0)
    offsets = (trees.roots - 0) / 0.1  # centre 0, std 0.1
    assert float((offsets.T @ offsets / T - torch.eye(d, dtype=F64)).abs().max()) < 0.1
    ortho = tsw.sample_concurrent_lines(
        d, n_trees=T, n_lines=2, orthogonal=True, sampling=sampling, seed=1, dtype=F64
    )
    assert cross_moment(ortho.directions) < 1e-20


@pytest.mark.parametrize(("d", "T", "k"), [(8, 20, 3), (5, 5, 1), (16, 40, 4)])
def test_orthogonal_sampling_stratifies_across_trees(d, T, k):
    D = tsw.sample_concurrent_lines(
        d, n_trees=T, n_lines=k, sampling="orthogonal", seed=2, dtype=F64
    ).directions
    eye = torch.eye(d, dtype=F64)
    for start in range(0, T - d + 1, d):  # line l of a block of d trees: one frame
        for line in range(k):
            block = D[start : start + d, line]
            assert float((block @ block.T - eye).abs().max()) < 1e-12
    per = d // k  # with orthogonal=True: d // k trees make one frame
    Do = tsw.sample_concurrent_lines(
        d, n_trees=T, n_lines=k, orthogonal=True, sampling="orthogonal", seed=2, dtype=F64
    ).directions
    rows = Do[:per].reshape(per * k, d)
    assert float((rows @ rows.T - torch.eye(per * k, dtype=F64)).abs().max()) < 1e-12
    # control: i.i.d. trees are not stratified
    iid = tsw.sample_concurrent_lines(d, n_trees=T, n_lines=k, seed=2, dtype=F64).directions
    block = iid[:d, 0]
    assert float((block @ block.T - eye).abs().max()) > 1e-3
    P = tsw.sample_projections(d, 2 * d, sampling="orthogonal", seed=2, dtype=F64)
    assert float((P[:, :d].T @ P[:, :d] - eye).abs().max()) < 1e-12
    assert torch.equal(P, tsw.sample_projections(d, 2 * d, orthogonal=True, seed=2, dtype=F64))


def _sphere(*Z):
    return [torch.nn.functional.normalize(z, dim=-1) for z in Z]


#: the lines' sampler (with the frames cut into trees of orthonormal lines) and the
#: spherical one run by default; the same samplers through other distances with -m slow
#: (150 seeds each; each tree's law is checked directly by the tests above)
_SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(
            lambda X, Y, n, **o: tsw.db_tsw(X, Y, n_trees=n, n_lines=3, p=2, power=True, **o),
            id="db_tsw",
            marks=_SLOW,
        ),
        pytest.param(
            lambda X, Y, n, **o: tsw.db_tsw(X, Y, n_trees=n, n_lines=3, orthogonal=True, **o),
            id="db_tsw_orth",
        ),
        pytest.param(
            lambda X, Y, n, **o: tsw.tsw_sl(X, Y, n_trees=n, n_lines=3, **o),
            id="tsw_sl_chain",
            marks=_SLOW,
        ),
        pytest.param(
            lambda X, Y, n, **o: tsw.sw(X, Y, n_projections=n, power=True, **o),
            id="sw",
            marks=_SLOW,
        ),
        pytest.param(lambda X, Y, n, **o: tsw.stsw(*_sphere(X, Y), n_trees=n, **o), id="stsw"),
    ],
)
def test_sampling_keeps_the_estimate_unbiased(call):
    """Mean over 150 seeds of 8 slices within 4 standard errors of a 10000-slice i.i.d. value.

    ``p = 1`` values (and ``power``) are means over slices, so the reference is one i.i.d.
    call with many slices; its own standard error enters the tolerance.
    """
    X, Y = data()
    ref, log = call(X, Y, 10000, seed=10**6, log=True)
    ref, ref_se = float(ref), float(log["std_error"])
    for sampling in SAMPLINGS:
        values = np.array([float(call(X, Y, 8, sampling=sampling, seed=s)) for s in range(150)])
        se = math.hypot(values.std(ddof=1) / math.sqrt(len(values)), ref_se)
        assert abs(values.mean() - ref) < 4 * se, (sampling, values.mean(), ref, se)


def test_orthogonal_sampling_cuts_the_variance():
    """d = 16, 64 trees of 4 lines: the stratified trees' variance is several times lower."""
    X, Y = data(d=16, n=40, m=40, shift=0.3)
    cv = {}
    for sampling in ("iid", "orthogonal"):
        v = np.array(
            [float(tsw.db_tsw(X, Y, n_trees=64, sampling=sampling, seed=s)) for s in range(100)]
        )
        cv[sampling] = v.std(ddof=1) / v.mean()
    assert (cv["iid"] / cv["orthogonal"]) ** 2 > 2.5, cv
    # log["std_error"] assumes independent trees: it overstates the stratified error
    value, log = tsw.db_tsw(X, Y, n_trees=64, sampling="orthogonal", seed=0, log=True)
    assert float(log["std_error"] / value) > 1.5 * cv["orthogonal"]


@pytest.mark.parametrize("sampling", ["iid", *SAMPLINGS])
def test_sampling_is_seeded(sampling):
    X, Y = data()
    a = tsw.db_tsw(X, Y, n_trees=10, sampling=sampling, seed=4)
    assert torch.equal(a, tsw.db_tsw(X, Y, n_trees=10, sampling=sampling, seed=4))
    assert not torch.equal(a, tsw.db_tsw(X, Y, n_trees=10, sampling=sampling, seed=5))
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    t1 = tsw.sample_spherical_trees(4, n_trees=5, n_lines=2, sampling=sampling, generator=g1)
    t2 = tsw.sample_spherical_trees(4, n_trees=5, n_lines=2, sampling=sampling, generator=g2)
    assert torch.equal(t1.directions, t2.directions)
    # the same seed gives the same trees in float32 and float64
    t32 = tsw.sample_concurrent_lines(5, n_trees=6, n_lines=2, sampling=sampling, seed=3)
    t64 = tsw.sample_concurrent_lines(5, n_trees=6, n_lines=2, sampling=sampling, seed=3, dtype=F64)
    torch.testing.assert_close(t32.directions.double(), t64.directions, rtol=0, atol=1e-6)


def test_spherical_sampling_gives_unit_tangent_rays():
    for sampling in SAMPLINGS:
        trees = tsw.sample_spherical_trees(5, n_trees=12, n_lines=3, sampling=sampling, seed=0)
        assert trees.roots.shape == (12, 5)
        assert trees.directions.shape == (12, 3, 5)
        tsw.SphericalTrees(trees.roots, trees.directions)  # validates unit and tangent


def test_bad_sampling_raises():
    X, Y = data()
    with pytest.raises(ValueError, match="sampling must be one of"):
        tsw.db_tsw(X, Y, sampling="sobol")
    with pytest.raises(ValueError, match="sampling must be one of"):
        tsw.sample_projections(3, 4, sampling=None)
    with pytest.raises(ValueError, match=r'orthogonal=True.*sampling="qmc"'):
        tsw.sw(X, Y, orthogonal=True, sampling="qmc")
    with pytest.raises(ValueError, match="dimension at most 21201"):
        tsw.sample_projections(21202, 2, sampling="qmc")


def test_losses_take_sampling_and_center():
    """The modules pass sampling and center on: each equals its function with them."""
    X, Y = data()
    Xg = X.clone().requires_grad_(True)
    kw = {"n_trees": 10, "sampling": "orthogonal", "center": "median"}
    loss = tsw.nn.DbTSWLoss(**kw, seed=0)
    value = loss(Xg, Y)
    value.backward()
    assert bool(torch.isfinite(Xg.grad).all())
    assert torch.equal(value.detach(), tsw.db_tsw(X, Y, **kw, seed=0))
    assert not torch.equal(value.detach(), tsw.db_tsw(X, Y, n_trees=10, seed=0))
    sw = tsw.nn.SWLoss(n_projections=5, sampling="qmc", seed=1)
    assert "sampling" in sw.options
    assert torch.equal(sw(X, Y), tsw.sw(X, Y, n_projections=5, sampling="qmc", seed=1))


def test_max_sw_sampling_spreads_its_starting_directions():
    """n_iter=0 keeps the best of the n_init directions tsw.sample_projections(sampling=) draws."""
    X, Y = data(d=3, n=9, m=8)
    default = tsw.max_sw(X, Y, n_iter=2, n_init=7, seed=5)
    assert torch.equal(tsw.max_sw(X, Y, n_iter=2, n_init=7, sampling="iid", seed=5), default)
    values = {}
    for sampling in ("iid", "orthogonal", "qmc"):
        P = tsw.sample_projections(3, 7, sampling=sampling, seed=5, dtype=F64)
        per_direction = torch.stack([tsw.sw(X, Y, projections=P[:, [j]]) for j in range(7)])
        value, log = tsw.max_sw(X, Y, n_iter=0, n_init=7, sampling=sampling, seed=5, log=True)
        assert torch.equal(log["projections"][0], P[:, [int(per_direction.argmax())]])  # (B, d, 1)
        torch.testing.assert_close(value, per_direction.max(), rtol=1e-14, atol=0)
        values[sampling] = value
        assert bool(torch.isfinite(tsw.max_sw(X, Y, n_iter=2, n_init=7, sampling=sampling, seed=5)))
    assert not torch.equal(values["orthogonal"], values["iid"])
    assert not torch.equal(values["qmc"], values["iid"])
    frames = tsw.sample_projections(3, 6, sampling="orthogonal", seed=5, dtype=F64)
    for block in (frames[:, :3], frames[:, 3:]):
        torch.testing.assert_close(block.T @ block, torch.eye(3, dtype=F64), rtol=0, atol=1e-12)
    for bad in ("sobol", None):
        with pytest.raises(ValueError, match="sampling must be one of"):
            tsw.max_sw(X, Y, n_iter=0, n_init=2, sampling=bad)
        with pytest.raises(ValueError, match="sampling must be one of"):
            tsw.nn.MaxSWLoss(sampling=bad)
    loss = tsw.nn.MaxSWLoss(n_iter=2, n_init=7, sampling="orthogonal", seed=5)
    assert loss.options["sampling"] == "orthogonal"
    expected = tsw.max_sw(X, Y, n_iter=2, n_init=7, sampling="orthogonal", seed=5)
    assert torch.equal(loss(X, Y), expected)


# --------------------------------------------------------------------------- roots


def test_geometric_median_minimises_the_fermat_weber_objective():
    X, Y = data(d=4, n=15, m=10)
    g = torch.Generator().manual_seed(1)
    a = torch.rand(15, generator=g, dtype=F64) + 0.1
    b = torch.rand(10, generator=g, dtype=F64) + 0.1
    b = b * a.sum() / b.sum()
    Z = torch.cat([X, Y]).numpy()
    w = torch.cat([a, b]).numpy()

    def objective(z):
        return float((w * np.linalg.norm(Z - z, axis=1)).sum())

    ref = minimize(
        objective,
        Z.mean(0),
        method="Nelder-Mead",
        options={"xatol": 1e-10, "fatol": 1e-14, "maxiter": 20000, "maxfev": 40000},
    ).x
    med = geometric_median(check_measures(X, Y, a, b))[0].numpy()
    assert objective(med) <= objective(ref) + 1e-9
    np.testing.assert_allclose(med, ref, atol=1e-4)


def test_median_centre_is_robust_and_used():
    X, Y = data(d=3)
    Y_out = torch.cat([Y, torch.full((3, 3), 100.0, dtype=F64)])  # 3 far outliers
    median = geometric_median(check_measures(X, Y_out))[0]
    mean = torch.cat([X, Y_out]).mean(0)
    assert float(median.norm()) < 1.5 < float(mean.norm())
    _, log = tsw.db_tsw(X, Y_out, n_trees=5, center="median", root_std=0.0, seed=0, log=True)
    torch.testing.assert_close(log["trees"].roots, median.expand(5, 3))
    v = tsw.db_tsw(X, Y, seed=0)
    assert torch.equal(v, tsw.db_tsw(X, Y, center=None, seed=0))  # "mean" is the default
    assert torch.equal(v, tsw.db_tsw(X, Y, center="mean", seed=0))
    with pytest.raises(ValueError, match='center must be "mean", "median"'):
        tsw.db_tsw(X, Y, center="medoid")


def test_median_of_a_batch_is_per_item_and_detached():
    X, Y = data(d=3)
    Xb = torch.stack([X, X + 5.0]).requires_grad_(True)
    Yb = torch.stack([Y, Y + 5.0])
    med = geometric_median(check_measures(Xb, Yb))
    assert not med.requires_grad
    torch.testing.assert_close(med[1] - med[0], torch.full((3,), 5.0, dtype=F64))


# --------------------------------------------------------------------------- FW-TSW* paths


def test_path_directions_join_atoms_of_the_two_measures():
    X, Y = data(d=4, n=6, m=5)
    _, log = tsw.db_tsw(X, Y, n_trees=20, n_lines=3, directions="paths", seed=0, log=True)
    D = log["trees"].directions.reshape(-1, 4)
    diffs = X[:, None, :] - Y[None, :, :]
    diffs = diffs / diffs.norm(dim=-1, keepdim=True)
    # every direction is one of the N x M normalised differences
    gap = (D[:, None, None, :] - diffs[None]).norm(dim=-1).amin(dim=(1, 2))
    assert float(gap.max()) < 1e-12
    Xb, Yb = torch.stack([X, 2 * X]), torch.stack([Y, Y])
    vb = tsw.db_tsw(Xb, Yb, n_trees=20, directions="paths", seed=0)
    v1 = tsw.db_tsw(2 * X, Y, n_trees=20, directions="paths", seed=0)
    torch.testing.assert_close(vb[1], v1)
    with pytest.raises(ValueError, match="orthogonal=False"):
        tsw.db_tsw(X, Y, directions="paths", orthogonal=True)
    with pytest.raises(ValueError, match="directions must be one of"):
        tsw.db_tsw(X, Y, directions="data")


def _clouds(seed=0, n=60, d=3):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    Y = torch.randn(n + 7, d, generator=g, dtype=torch.float64) * 0.7 + 0.8
    return X, Y


@pytest.mark.slow
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
