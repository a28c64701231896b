"""The papers' comparison rows: TS-Sobolev, MaxTSW-SL, LCV-SW, EB-SW and RP-SW.

Every value is compared with an independent computation: TS-Sobolev with its edge sum
on the explicit tree (``tests/_reference.py``'s tree of a line system, subtree lengths
read off that tree, the weights integrated numerically by ``scipy.integrate.quad``);
the sliced variants with :func:`tsw.sw` on the same directions, a large-L SW and
exact 1-D transport; MaxTSW-SL with TSW-SL on random trees of the same shape and with
the exact max-SW_1 of a planar problem (a fine grid of angles). The whole distance
contract runs on their entries in ``tests/test_contract.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.integrate import quad

import tsw
from tests._reference import line_system_tree, subtree_members

F64 = torch.float64


# --------------------------------------------------------------------------- TS-Sobolev


def _star_masses(X, w, roots, dirs, delta):
    """Coordinates (k, n) and masses (k, n) of one tree, from the geometry written out."""
    z = X - roots  # (n, d)
    coords = dirs @ z.T  # (k, n)
    foot = coords[..., None] * dirs[:, None, :]  # (k, n, d): the feet on the lines
    dist = torch.linalg.vector_norm(z[None] - foot, dim=-1)
    alpha = torch.softmax(-delta * dist, dim=0)
    return coords, alpha * w


def sobolev_reference(coords, signed, p):
    """Σ_e β_e |mass beyond e|^p on the explicit tree of concurrent lines.

    The tree is cut to the paths from the root to the atoms of non-zero mass; λ(Γ(v)) is
    the total length of the cut tree below node v; β_v integrates (1 + λ + s)^(1 - p)
    over the edge from v to its parent, numerically.
    """
    parents, lengths, atom_nodes = line_system_tree(coords)
    mass = np.zeros(len(parents))
    np.add.at(mass, atom_nodes.reshape(-1), np.asarray(signed, float).reshape(-1))
    members = subtree_members(parents)
    spanned = [any(mass[u] != 0 for u in members[v]) for v in range(len(parents))]
    total = 0.0
    for v, below in enumerate(members):
        if parents[v] == -1 or not spanned[v]:
            continue
        lam = sum(lengths[u] for u in below if u != v and spanned[u])
        beta, _ = quad(lambda s, lam=lam: (1 + lam + s) ** (1 - p), 0.0, lengths[v])
        total += beta * abs(mass[below].sum()) ** p
    return total


def _problem(seed, N=5, M=4, d=3, T=2, k=3, zero=False):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, d, generator=g, dtype=F64)
    Y = 0.7 * torch.randn(M, d, generator=g, dtype=F64) + 0.5
    a = torch.rand(N, generator=g, dtype=F64) + 0.1
    b = torch.rand(M, generator=g, dtype=F64) + 0.1
    if zero:
        a[1] = 0.0
    a, b = a / a.sum(), b / b.sum()
    trees = tsw.sample_concurrent_lines(d, n_trees=T, n_lines=k, std=0.5, seed=seed, dtype=F64)
    return X, Y, a, b, trees


@pytest.mark.parametrize(
    ("p", "delta", "seed"),
    [(2.0, 2.0, 0), (3.0, 0.5, 1), (1.5, 0.0, 2), (2.5, 1.0, 3), (1.0, 2.0, 4), (2.0, 2.0, 5)],
)
def test_ts_sobolev_equals_its_edge_sum_on_explicit_trees(p, delta, seed):
    X, Y, a, b, trees = _problem(seed, zero=seed == 5)
    _, info = tsw.ts_sobolev(X, Y, a, b, trees=trees, delta=delta, p=p, power=True, log=True)
    for t in range(trees.n_trees):
        roots, dirs = trees.roots[t], trees.directions[t]
        cx, mx = _star_masses(X, a, roots, dirs, delta)
        cy, my = _star_masses(Y, b, roots, dirs, delta)
        coords = torch.cat([cx, cy], -1).numpy()
        signed = torch.cat([mx, -my], -1).numpy()
        expected = sobolev_reference(coords, signed, p)
        assert float(info["per_tree"][t]) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_ts_sobolev_reproduces_the_authors_self_test():
    """Their two lines along (1, 1) and (2, -1), root 0, delta = -1: 0.426344 (p = 2) and
    0.349254 (p = 3) to their tolerance 1e-5 (float32), and the edge sum in float64.

    The public function takes ``delta >= 0`` (as Db-TSW does), so the self-test's
    negative delta runs through the method's own projection and closed form."""
    from tsw.core._validation import check_measures
    from tsw.euclidean._db_tsw import db_projection
    from tsw.euclidean._ts_sobolev import sobolev_cost

    for dtype in (torch.float32, F64):
        th = torch.tensor([[[1.0, 1.0], [2.0, -1.0]]], dtype=dtype)
        th = th / torch.linalg.vector_norm(th, dim=-1, keepdim=True)
        trees = tsw.ConcurrentLines(torch.zeros(1, 2, dtype=dtype), th)
        X = torch.tensor([[2.0, 0.0], [4.0, 0.0]], dtype=dtype)
        Y = torch.tensor([[2.0, 1.0], [6.0, 0.0]], dtype=dtype)
        measures = check_measures(X, Y, None, None)
        for p, published in ((2, 0.426344), (3, 0.349254)):
            cost = sobolev_cost(db_projection(measures, trees, -1.0), float(p))
            value = float(cost.mean()) ** (1 / p)
            assert abs(value - published) <= 1e-5
            if dtype == F64:
                half = torch.full((2,), 0.5, dtype=F64)
                cx, mx = _star_masses(X, half, trees.roots[0], th[0], -1)
                cy, my = _star_masses(Y, half, trees.roots[0], th[0], -1)
                ref = sobolev_reference(
                    torch.cat([cx, cy], -1).numpy(), torch.cat([mx, -my], -1).numpy(), p
                )
                assert value == pytest.approx(ref ** (1 / p), rel=1e-12)


def test_ts_sobolev_at_p1_is_db_tsw_and_continuous_in_p():
    g = torch.Generator().manual_seed(3)
    X, Y = torch.randn(30, 4, generator=g, dtype=F64), torch.randn(20, 4, generator=g, dtype=F64)
    ref = tsw.db_tsw(X, Y, n_trees=16, n_lines=3, delta=1.5, seed=7)
    assert torch.equal(tsw.ts_sobolev(X, Y, n_trees=16, n_lines=3, delta=1.5, p=1, seed=7), ref)
    # the Sobolev closed form itself (p just above 1) tends to Db-TSW's tree W1
    near = tsw.ts_sobolev(X, Y, n_trees=16, n_lines=3, delta=1.5, p=1 + 1e-9, seed=7)
    assert float(near) == pytest.approx(float(ref), rel=1e-7)


def test_ts_sobolev_zero_weight_atom_far_away_changes_nothing():
    """The tree is cut at the outermost atom of non-zero mass: a far atom of zero weight
    is not part of the measure and does not lengthen the tree."""
    X, Y, a, b, trees = _problem(8)
    far = torch.cat([X, torch.full((1, 3), 50.0, dtype=F64)])
    a0 = torch.cat([a, torch.zeros(1, dtype=F64)])
    v = tsw.ts_sobolev(X, Y, a, b, trees=trees)
    assert float(tsw.ts_sobolev(far, Y, a0, b, trees=trees)) == pytest.approx(float(v), rel=1e-13)


def test_ts_sobolev_triangle_fails_with_shared_trees():
    """Each pair cuts the tree at its own span: a third measure with a tiny far atom makes
    both of its sides small (the reason the contract claims no triangle inequality)."""
    trees = tsw.ConcurrentLines(torch.zeros(1, 1, dtype=F64), torch.ones(1, 1, 1, dtype=F64))
    mu, nu = torch.tensor([[1.0]], dtype=F64), torch.tensor([[2.0]], dtype=F64)
    xi = torch.tensor([[1.0], [2.0], [1e4]], dtype=F64)
    w = torch.tensor([(1 - 1e-3) / 2, (1 - 1e-3) / 2, 1e-3], dtype=F64)
    d12 = tsw.ts_sobolev(mu, nu, trees=trees)
    via = tsw.ts_sobolev(mu, xi, None, w, trees=trees) + tsw.ts_sobolev(
        xi, nu, w, None, trees=trees
    )
    # by hand: the tree [0, 2]; only the edge [1, 2] carries mass (1), with nothing below
    # it: beta = log(1 + 1 / (1 + 0)), so d(mu, nu) = sqrt(log 2)
    assert float(d12) == pytest.approx(math.sqrt(math.log(2.0)), rel=1e-14)
    assert float(via) < 0.1 * float(d12)


@pytest.mark.parametrize("delta", [-1.0, -1e-300, math.inf, -math.inf, math.nan])
def test_ts_sobolev_rejects_a_negative_or_non_finite_delta(delta):
    X = torch.zeros(2, 2)
    message = rf"delta must be a finite real number >= 0; got {delta}"
    with pytest.raises(ValueError, match=message):
        tsw.ts_sobolev(X, X + 1, delta=delta, n_trees=2, seed=0)
    with pytest.raises(ValueError, match=message):  # the loss module runs the same check
        tsw.nn.TSSobolevLoss(delta=delta)
    loss = tsw.nn.TSSobolevLoss(n_trees=2, seed=0)
    with pytest.raises(ValueError, match=message):
        loss.delta = delta


@pytest.mark.parametrize(
    ("option", "value", "error", "message"),
    [
        ("delta", "2", TypeError, "delta must be a real number >= 0; got str"),
        ("p", 0.5, ValueError, "p must be a finite real number >= 1; got 0.5"),
        ("n_trees", 0, ValueError, "n_trees must be an int >= 1; got 0"),
        ("n_lines", 1.5, TypeError, "n_lines must be an int >= 1; got float"),
        ("directions", "x", ValueError, "directions must be one of 'uniform', 'paths'; got 'x'"),
        ("sampling", "y", ValueError, "sampling must be one of 'iid', 'orthogonal', 'qmc'"),
        ("root_std", -1.0, ValueError, "root_std must be a finite real number >= 0; got -1.0"),
        ("orthogonal", 1, TypeError, "orthogonal must be True or False; got int"),
        ("center", "mode", ValueError, "center must be .* got 'mode'"),
        ("trees", 5, TypeError, "trees must be ConcurrentLines; got int"),
    ],
)
def test_ts_sobolev_bad_options_name_the_argument_and_the_value(option, value, error, message):
    X = torch.zeros(2, 2)
    with pytest.raises(error, match=message):
        tsw.ts_sobolev(X, X + 1, **{"n_trees": 2, "seed": 0, option: value})


# --------------------------------------------------------------------------- LCV-SW


def _clouds(seed=0, N=60, M=50, d=5, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, d, generator=g, dtype=dtype)
    Y = 1.5 * torch.randn(M, d, generator=g, dtype=dtype) + 1.0
    return X, Y


def _lcv_by_hand(X, Y, theta, p, variate):
    """The pooled estimate from numpy loops: costs by sorting, moments by their definition."""
    X, Y, theta = X.numpy(), Y.numpy(), theta.numpy()
    d, L = theta.shape
    m1, m2 = X.mean(0), Y.mean(0)
    W, G = np.zeros(L), np.zeros(L)
    for ell in range(L):
        t = theta[:, ell]
        x, y = np.sort(X @ t), np.sort(Y @ t)
        q = np.linspace(0, 1, 2001)[1:-1]  # quantile functions on a fine grid: equal sizes
        assert len(x) == len(y)
        W[ell] = np.mean(np.abs(x - y) ** p)
        G[ell] = (t @ (m1 - m2)) ** 2
        if variate == "upper":
            G[ell] += np.mean(((X - m1) @ t) ** 2) + np.mean(((Y - m2) @ t) ** 2)
        del q
    EG = np.sum((m1 - m2) ** 2) / d
    if variate == "upper":
        EG += (np.sum((X - m1) ** 2) / len(X) + np.sum((Y - m2) ** 2) / len(Y)) / d
    D = G - EG
    alpha = np.mean((W - W.mean()) * D) / np.mean(D**2)
    return W.mean() - alpha * D.mean()


@pytest.mark.parametrize("variate", ["lower", "upper"])
def test_lcv_sw_on_given_directions_equals_its_formula(variate):
    X, Y = _clouds(1, N=40, M=40)
    theta = tsw.sample_projections(5, 9, seed=3, dtype=F64)
    for p in (2, 1.5):
        got = tsw.lcv_sw(X, Y, projections=theta, p=p, variate=variate, power=True)
        assert float(got) == pytest.approx(_lcv_by_hand(X, Y, theta, p, variate), rel=1e-10)


def test_lcv_sw_variates_bound_the_projected_w2():
    """The lower variate is below, the upper one above, each direction's W_2^2."""
    from tsw.core._validation import check_measures
    from tsw.sliced._lcv_sw import gaussian_variate

    X, Y = _clouds(2)
    theta = tsw.sample_projections(5, 200, seed=0, dtype=F64)
    _, info = tsw.sw(X, Y, projections=theta, p=2, log=True)
    W = info["per_tree"]
    measures = check_measures(X, Y, None, None)
    lower, _ = gaussian_variate(measures, theta, "lower")
    upper, _ = gaussian_variate(measures, theta, "upper")
    assert bool((lower[0] <= W + 1e-12).all())
    assert bool((upper[0] + 1e-12 >= W).all())


def test_lcv_sw_variate_means_over_the_sphere():
    from tsw.core._validation import check_measures
    from tsw.sliced._lcv_sw import gaussian_variate

    X, Y = _clouds(4)
    measures = check_measures(X, Y, None, None)
    theta = tsw.sample_projections(5, 200_000, seed=1, dtype=F64)
    for variate in ("lower", "upper"):
        G, mean = gaussian_variate(measures, theta, variate)
        se = float(G.std() / math.sqrt(G.shape[-1]))
        assert abs(float(G.mean() - mean)) < 4 * se


def test_lcv_sw_is_unbiased_with_less_variance_than_sw():
    """Mean of 400 independent estimates at L = 10 against SW_2^2 at L = 5e4; variance
    against SW's on the same directions. The estimates are one batched call: 400 copies
    of the pair, each with its own 10 directions."""
    X, Y = _clouds(0)
    truth, info = tsw.sw(X, Y, n_projections=50_000, seed=99, power=True, log=True)
    truth, truth_se = float(truth), float(info["std_error"])
    R, L = 400, 10
    theta = tsw.sample_projections(5, R * L, seed=5, dtype=F64).T.reshape(R, L, 5).mT
    Xb, Yb = X.expand(R, -1, -1), Y.expand(R, -1, -1)
    sw = tsw.sw(Xb, Yb, projections=theta, power=True)
    for coefficient in ("leave_one_out", "pooled"):
        lcv = tsw.lcv_sw(Xb, Yb, projections=theta, power=True, coefficient=coefficient)
        se = float(lcv.std() / math.sqrt(R))
        # leave-one-out: exactly unbiased; pooled: its O(1/L) bias is within 1.5 %
        slack = 0 if coefficient == "leave_one_out" else 0.015 * truth
        assert abs(float(lcv.mean()) - truth) < 4 * math.hypot(se, truth_se) + slack
        assert float(lcv.var()) < 0.5 * float(sw.var())
    assert abs(float(sw.mean()) - truth) < 4 * math.hypot(float(sw.std()) / math.sqrt(R), truth_se)


def test_lcv_sw_without_a_varying_variate_is_sw():
    """d = 1 (G is constant) and identical means (the lower G is 0): SW, not noise."""
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(20, 1, generator=g, dtype=F64), torch.randn(15, 1, generator=g, dtype=F64)
    assert float(tsw.lcv_sw(X, Y, n_projections=6, seed=0)) == pytest.approx(
        float(tsw.sw(X, Y, n_projections=6, seed=0)), rel=1e-12
    )
    # the same mean exactly (integer points summing to 0, 16 atoms: exact weighted
    # means), another spread
    X2 = torch.randint(-5, 6, (16, 3), generator=g).to(F64)
    X2[-1] -= X2.sum(0)
    Y2 = 3 * X2
    theta = tsw.sample_projections(3, 8, seed=1, dtype=F64)
    assert float(tsw.lcv_sw(X2, Y2, projections=theta)) == pytest.approx(
        float(tsw.sw(X2, Y2, projections=theta)), rel=1e-12
    )


# --------------------------------------------------------------------------- EB-SW


def test_eb_sw_is_at_least_sw_on_the_same_directions():
    for seed in range(5):
        X, Y = _clouds(seed, N=30, M=20, d=4)
        theta = tsw.sample_projections(4, 25, seed=seed, dtype=F64)
        base = tsw.sw(X, Y, projections=theta)
        for energy in ("exp", "identity"):
            assert float(tsw.eb_sw(X, Y, projections=theta, energy=energy)) >= float(base) - 1e-12
    Xb, Yb = (
        torch.stack([_clouds(s, 30, 20, 4)[0] for s in range(3)]),
        torch.stack([_clouds(s, 30, 20, 4)[1] for s in range(3)]),
    )
    theta = tsw.sample_projections(4, 25, seed=9, dtype=F64)
    assert bool((tsw.eb_sw(Xb, Yb, projections=theta) >= tsw.sw(Xb, Yb, projections=theta)).all())


def test_eb_sw_equals_its_importance_weighted_mean_and_gradient():
    X, Y = _clouds(6, N=25, M=25, d=3)
    theta = tsw.sample_projections(3, 15, seed=2, dtype=F64)
    _, info = tsw.sw(X, Y, projections=theta, p=2, log=True)
    W = info["per_tree"].detach().numpy()
    for energy, f in (("exp", np.exp), ("identity", lambda x: x)):
        w = f(W) / f(W).sum()
        got = tsw.eb_sw(X, Y, projections=theta, energy=energy, power=True)
        assert float(got) == pytest.approx(float((w * W).sum()), rel=1e-12)
    # the authors' gradient: the weights held fixed, sum_l w_l grad W_l
    Xg = X.clone().requires_grad_()
    (grad,) = torch.autograd.grad(tsw.eb_sw(Xg, Y, projections=theta, power=True), Xg)
    w = torch.softmax(torch.as_tensor(W), 0)
    Xr = X.clone().requires_grad_()
    _, info = tsw.sw(Xr, Y, projections=theta, p=2, log=True)
    (ref,) = torch.autograd.grad((w * info["per_tree"]).sum(), Xr)
    torch.testing.assert_close(grad, ref, rtol=1e-10, atol=1e-12)


def test_eb_sw_identity_energy_of_equal_measures_is_zero():
    X, _ = _clouds(7, N=10, M=10, d=3)
    assert float(tsw.eb_sw(X, X.clone(), n_projections=5, seed=0, energy="identity")) == 0.0


# --------------------------------------------------------------------------- RP-SW


@pytest.mark.parametrize("kappa", [None, 20.0])
def test_rp_sw_is_sw_along_its_reported_directions(kappa):
    X, Y = _clouds(8, N=30, M=25, d=4)
    value, info = tsw.rp_sw(X, Y, n_projections=16, kappa=kappa, seed=0, log=True)
    assert torch.equal(value, tsw.sw(X, Y, projections=info["projections"]))
    Xb, Yb = torch.stack([X, X + 1]), torch.stack([Y, 2 * Y])
    value, info = tsw.rp_sw(Xb, Yb, n_projections=16, kappa=kappa, seed=0, log=True)
    assert info["projections"].shape == (2, 4, 16)
    assert torch.equal(value, tsw.sw(Xb, Yb, projections=info["projections"]))


def test_rp_sw_directions_are_pairs_of_atoms_drawn_from_the_weights():
    X, Y = _clouds(9, N=12, M=10, d=3)
    a = torch.rand(12, dtype=F64) + 0.1
    a[3] = 0.0  # never drawn
    a = a / a.sum()
    _, info = tsw.rp_sw(X, Y, a, None, n_projections=200, seed=1, log=True)
    theta = info["projections"].T  # (L, d)
    pairs = X[:, None, :] - Y[None, :, :]  # (N, M, d)
    unit = pairs / torch.linalg.vector_norm(pairs, dim=-1, keepdim=True)
    err = torch.cdist(theta, unit.reshape(-1, 3)).reshape(200, 12, 10)
    best = err.reshape(200, -1).min(-1)
    assert float(best.values.max()) < 1e-7  # cdist's own rounding
    used = {int(i) // 10 for i in best.indices}
    assert 3 not in used
    assert len(used) >= 8


def test_power_spherical_cosine_has_its_mean():
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


def test_rp_sw_rejects_a_bad_kappa():
    X = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="kappa must be None or a finite real number > 0"):
        tsw.rp_sw(X, X + 1, kappa=0.0, seed=0)
    with pytest.raises(TypeError, match="kappa must be None or a real number > 0"):
        tsw.rp_sw(X, X + 1, kappa="50", seed=0)


# --------------------------------------------------------------------------- MaxTSW-SL


def _max_sw1_planar(X, Y, n=20001):
    """Exact max-SW_1 of planar clouds: a fine grid of angles (W_1 is Lipschitz in theta)."""
    angles = torch.linspace(0, math.pi, n, dtype=F64)
    grid = torch.stack([angles.cos(), angles.sin()])
    _, info = tsw.sw(X, Y, projections=grid, p=1, log=True)
    return float(info["per_tree"].max())


def test_max_tsw_sl_beats_random_trees_of_its_shape_and_reaches_max_sw1():
    X, Y = _clouds(10, N=40, M=30, d=2)
    value, info = tsw.max_tsw_sl(X, Y, n_lines=4, seed=0, log=True)
    # random chain trees of the same shape (1 tree x 4 lines): TSW-SL never exceeds it
    randoms = [float(tsw.tsw_sl(X, Y, n_trees=1, n_lines=4, seed=s)) for s in range(40)]
    assert float(value) >= max(randoms)
    # with the uniform split at p = 1 the maximum is max-SW_1 (every line on the best one)
    best = _max_sw1_planar(X, Y)
    assert float(value) <= best * (1 + 1e-7)  # the grid's resolution
    assert float(value) == pytest.approx(best, rel=1e-6)
    # the final trees reproduce the value, and keep the drawn roots and attachments
    trees = info["trees"]
    assert torch.equal(tsw.tsw_sl(X, Y, trees=trees), value)
    centre = (X.mean(0) + Y.mean(0)) / 2  # the weighted mean of both measures
    start = tsw.sample_chain_lines(2, n_trees=1, n_lines=4, center=centre, seed=0, dtype=F64)
    tsw.ChainLines(trees.sources, trees.directions)  # sources on the previous lines
    torch.testing.assert_close(trees.roots, start.roots)
    torch.testing.assert_close(trees.attachments, start.attachments)


def test_max_tsw_sl_without_steps_is_tsw_sl_and_never_decreases():
    X, Y = _clouds(11, N=30, M=30, d=3)
    for tree in ("chain", "concurrent"):
        kw = {"n_trees": 2, "n_lines": 3, "tree": tree, "seed": 4}
        assert torch.equal(tsw.max_tsw_sl(X, Y, n_iter=0, **kw), tsw.tsw_sl(X, Y, **kw))
        values = [float(tsw.max_tsw_sl(X, Y, n_iter=n, lr=0.05, **kw)) for n in (0, 3, 15)]
        assert values == sorted(values)


def test_tsw_sl_does_not_depend_on_roots_or_attachments():
    """Why MaxTSW-SL moves the directions only: with a constant split the sources'
    gradient vanishes (no mass crosses a root or an attachment)."""
    X, Y = _clouds(12, N=20, M=15, d=3)
    trees = tsw.sample_chain_lines(3, n_trees=2, n_lines=4, std=1.0, seed=0, dtype=F64)
    sources = trees.sources.clone().requires_grad_()
    value = tsw.tsw_sl(X, Y, trees=tsw.ChainLines(sources, trees.directions), p=2)
    (grad,) = torch.autograd.grad(value, sources)
    assert float(grad.abs().max()) < 1e-12


@pytest.mark.parametrize("fn", [tsw.max_sw, tsw.max_tsw_sl], ids=["max_sw", "max_tsw_sl"])
@pytest.mark.parametrize("precision", [torch.float32, F64])
@pytest.mark.parametrize("p", [1, 2])
def test_a_zero_weight_atom_without_validation_changes_nothing(fn, precision, p):
    """A reported NaN: max_sw / max_tsw_sl with a zero-weight atom and validate=False.
    The value is finite and, with the other atoms' gradients, equals the fixed-slice
    distance on the returned slice without the atom (SW on max-SW's direction, TSW-SL on
    the final trees); the atom's own gradient is 0. Without the atom the same seed gives
    the same value (to float32 rounding of the ascent)."""
    X, Y = _clouds(13, N=7, M=5, d=3, dtype=precision)
    a = torch.rand(7, generator=torch.Generator().manual_seed(1), dtype=precision) + 0.1
    a[2] = 0.0
    a = a / a.sum()
    keep = torch.arange(7) != 2
    kwargs = {"seed": 0, "p": p, "n_iter": 30, "lr": 0.05}
    Xg = X.clone().requires_grad_()
    value, info = fn(Xg, Y, a, None, validate=False, log=True, **kwargs)
    (grad,) = torch.autograd.grad(value, Xg)
    assert torch.isfinite(value)
    assert torch.isfinite(grad).all()
    assert float(grad[2].abs().max()) == 0.0
    Xr = X[keep].clone().requires_grad_()
    if fn is tsw.max_sw:
        direction = info["projections"][0]  # max_sw logs (B, d, 1), batched or not
        fixed = tsw.sw(Xr, Y, a[keep], None, projections=direction, p=p)
    else:
        fixed = tsw.tsw_sl(Xr, Y, a[keep], None, trees=info["trees"], p=p)
    (grad_fixed,) = torch.autograd.grad(fixed, Xr)
    tol = {"rtol": 1e-5, "atol": 1e-6} if precision == torch.float32 else {}
    torch.testing.assert_close(value, fixed, **tol)
    torch.testing.assert_close(grad[keep], grad_fixed, **tol)
    torch.testing.assert_close(value, fn(X[keep], Y, a[keep], None, **kwargs), **tol)
