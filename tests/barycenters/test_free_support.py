"""tsw.free_support_barycenter against exact W2 (ot.emd2) and closed forms."""

from __future__ import annotations

import math

import numpy as np
import ot
import pytest
import torch

import tsw
from tsw.barycenters._free_support import DISTANCES, SPHERE_DISTANCES

F64 = torch.float64


@pytest.fixture(autouse=True)
def _one_thread():
    """Small problems: torch's thread pool costs more than it gives on a loaded machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _gauss(n, d, mean, std, seed, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return std * torch.randn(n, d, generator=g, dtype=dtype) + torch.as_tensor(mean, dtype=dtype)


def _w2sq(X, Y):
    """Exact squared W2 between uniform clouds (POT's network simplex)."""
    X, Y = np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64)
    return float(ot.emd2([], [], ot.dist(X, Y)))


def _spread(X):
    """The isotropic standard deviation sqrt(E|x - m|^2 / d)."""
    return float(((X - X.mean(0)) ** 2).sum(1).mean().div(X.shape[1]).sqrt())


def test_one_measure_is_itself_sw():
    """SW_2: from a far start the support becomes the measure (exact W2 below 1e-8)."""
    Y = _gauss(80, 2, [0.0, 0.0], 1.0, 0)
    X0 = _gauss(80, 2, [2.0, -1.0], 2.0, 1)
    X = tsw.free_support_barycenter([Y], X_init=X0, numItermax=200, seed=0)
    assert _w2sq(X, Y) < 1e-8 * _w2sq(X0, Y)


@pytest.mark.parametrize("name", ["db_tsw", "tsw_sl"])
def test_one_measure_is_itself_tree_sliced(name):
    """Tree-sliced W1 objectives: to 3% of the start's squared W2 (the steps' jitter)."""
    Y = _gauss(60, 2, [0.0, 0.0], 1.0, 0)
    X0 = _gauss(60, 2, [2.0, -1.0], 2.0, 1)
    X = tsw.free_support_barycenter(
        [Y], X_init=X0, distance=name, n_trees=20, numItermax=60, seed=0
    )
    assert _w2sq(X, Y) < 0.03 * _w2sq(X0, Y)


def test_two_gaussians_follow_the_w2_barycenter():
    """Isotropic Gaussians: the SW_2 barycenter is the W2 one, N(w m1 + ..., (w s1 + ...)^2 I).

    The mean is exact for SW_2 (its mean term splits off), up to the Monte-Carlo jitter;
    the spread is compared with the closed form evaluated on the samples' spreads, with a
    tolerance of 4 standard errors of the mean over seeds plus 2% for the finite samples
    (the barycenter of 300-point clouds is not exactly Gaussian).
    """
    w = torch.tensor([0.3, 0.7], dtype=F64)
    Y1 = _gauss(300, 2, [-3.0, 0.0], 1.0, 0)
    Y2 = _gauss(300, 2, [3.0, 1.0], 2.0, 1)
    mean = w[0] * Y1.mean(0) + w[1] * Y2.mean(0)
    spread = float(w[0]) * _spread(Y1) + float(w[1]) * _spread(Y2)
    means, spreads = [], []
    for seed in range(4):
        X = tsw.free_support_barycenter([Y1, Y2], weights=w, numItermax=60, seed=seed)
        means.append(X.mean(0))
        spreads.append(_spread(X))
    means_t, spreads_t = torch.stack(means), torch.tensor(spreads)
    se_mean = means_t.std(0).max() / 2
    assert float((means_t.mean(0) - mean).abs().max()) < 4 * float(se_mean) + 1e-3
    se = float(spreads_t.std()) / 2
    assert abs(float(spreads_t.mean()) - spread) < 4 * se + 0.02 * spread


def test_translates_give_the_shape_at_the_mean_shift():
    """Translates of one shape: the shape translated by the weighted mean of the shifts."""
    S = _gauss(50, 2, [0.0, 0.0], 1.0, 3)
    shifts = torch.tensor([[0.0, 0.0], [4.0, 0.0], [0.0, 3.0]], dtype=F64)
    w = torch.tensor([0.5, 0.25, 0.25], dtype=F64)
    Ys = [S + s for s in shifts]
    X = tsw.free_support_barycenter(Ys, weights=w, numItermax=80, seed=0)
    target = S + w @ shifts
    assert _w2sq(X, target) < 1e-3 * _spread(S) ** 2


def test_unequal_sizes_and_weights():
    Y1 = _gauss(40, 3, [0.0, 0.0, 0.0], 1.0, 0)
    Y2 = _gauss(70, 3, [2.0, 0.0, 0.0], 1.0, 1)
    a2 = torch.rand(70, generator=torch.Generator().manual_seed(2), dtype=F64)
    a2 = a2 / a2.sum()
    a1 = torch.full((40,), 1 / 40, dtype=F64)
    X = tsw.free_support_barycenter([Y1, Y2], [a1, a2], n_points=30, seed=0)
    assert X.shape == (30, 3)
    expected = 0.5 * Y1.mean(0) + 0.5 * (a2 @ Y2)
    assert float((X.mean(0) - expected).abs().max()) < 0.1


@pytest.mark.parametrize("name", ["stsw", pytest.param("ssw", marks=pytest.mark.slow)])
def test_sphere_points_stay_on_the_sphere(name):
    g = torch.Generator().manual_seed(0)
    Y1 = torch.randn(40, 3, generator=g, dtype=F64) * 0.3 + torch.tensor([0.0, 0.0, 1.0], dtype=F64)
    Y2 = torch.randn(40, 3, generator=g, dtype=F64) * 0.3 + torch.tensor([1.0, 0.0, 0.0], dtype=F64)
    Ys = [Y / Y.norm(dim=1, keepdim=True) for Y in (Y1, Y2)]
    X0 = torch.randn(40, 3, generator=g, dtype=F64) * 0.3 + torch.tensor([0.0, 1.0, 1.0], dtype=F64)
    X0 = X0 / X0.norm(dim=1, keepdim=True)  # a start off the bisector
    X, log = tsw.free_support_barycenter(
        Ys, X_init=X0, distance=name, numItermax=30, seed=0, log=True
    )
    assert torch.allclose(X.norm(dim=1), torch.ones(40, dtype=F64), atol=1e-12)
    # the barycenter sits between the two caps: its mean direction near their bisector
    m = X.mean(0) / X.mean(0).norm()
    bisector = torch.tensor([1.0, 0.0, 1.0], dtype=F64) / math.sqrt(2)
    assert float(m @ bisector) > 0.95
    assert log["objective"][-1] < log["objective"][0]
    with pytest.raises(ValueError, match="unit sphere"):
        tsw.free_support_barycenter([2 * Ys[0]], distance=name)


def test_numpy_in_numpy_out_and_dtype():
    Y = _gauss(30, 2, [0.0, 0.0], 1.0, 0, dtype=torch.float32).numpy()
    X = tsw.free_support_barycenter([Y, Y + 1], numItermax=5, seed=0)
    assert isinstance(X, np.ndarray)
    assert X.dtype == np.float32
    assert X.shape == (30, 2)
    X, log = tsw.free_support_barycenter(np.stack([Y, Y + 1]), numItermax=5, seed=0, log=True)
    assert isinstance(X, np.ndarray)
    assert isinstance(log["costs"], np.ndarray)
    Xt = tsw.free_support_barycenter([torch.from_numpy(Y)], numItermax=3, seed=0)
    assert isinstance(Xt, torch.Tensor)
    assert Xt.dtype == torch.float32


def test_seeds_reproduce():
    Ys = [_gauss(30, 2, [0.0, 0.0], 1.0, 0), _gauss(30, 2, [2.0, 0.0], 1.0, 1)]
    X1 = tsw.free_support_barycenter(Ys, numItermax=10, seed=5, distance="db_tsw", n_trees=5)
    X2 = tsw.free_support_barycenter(Ys, numItermax=10, seed=5, distance="db_tsw", n_trees=5)
    X3 = tsw.free_support_barycenter(Ys, numItermax=10, seed=6, distance="db_tsw", n_trees=5)
    assert torch.equal(X1, X2)
    assert not torch.equal(X1, X3)
    gen = torch.Generator().manual_seed(5)
    X4 = tsw.free_support_barycenter(Ys, numItermax=10, generator=gen, distance="db_tsw", n_trees=5)
    assert X4.shape == X1.shape


def test_log_and_pot_keys():
    Ys = [_gauss(30, 2, [0.0, 0.0], 1.0, 0), _gauss(30, 2, [3.0, 0.0], 1.0, 1)]
    _X, log = tsw.free_support_barycenter(Ys, numItermax=30, seed=0, log=True)
    assert log["n_iter"] == len(log["objective"]) == len(log["displacement_square_norms"])
    assert log["costs"].shape == (log["n_iter"], 2)
    assert log["objective"][-1] < log["objective"][0]
    assert 1.5 < log["gain"] < 2.5  # Bonneel's step in d = 2: gain d


def test_fairness_evens_the_distances():
    """MFSWB: the penalty shrinks the spread of the exact W2 distances to the marginals."""
    Ys = [
        _gauss(60, 2, [0.0, 0.0], 0.5, 0),
        _gauss(60, 2, [4.0, 0.0], 0.5, 1),
        _gauss(60, 2, [0.0, 8.0], 0.5, 2),
    ]
    w = torch.tensor([0.8, 0.1, 0.1], dtype=F64)

    def spread(X):
        d = [math.sqrt(_w2sq(X, Y)) for Y in Ys]
        return np.mean([abs(a - b) for i, a in enumerate(d) for b in d[i + 1 :]])

    plain = tsw.free_support_barycenter(Ys, weights=w, numItermax=40, seed=0)
    fair = tsw.free_support_barycenter(Ys, weights=w, numItermax=40, seed=0, fairness=1.0)
    assert spread(fair) < 0.5 * spread(plain)


def test_objective_is_the_documented_penalised_sum():
    """The logged F is sum_k w_k C_k + fairness * 2 / (K (K - 1)) * sum_{i<j} |C_i - C_j|."""
    Ys = [_gauss(30, 2, [4.0 * k, 0.0], 1.0, k) for k in range(3)]
    w = torch.tensor([0.5, 0.3, 0.2], dtype=F64)
    _X, log = tsw.free_support_barycenter(
        Ys, weights=w, numItermax=5, seed=0, fairness=0.7, log=True
    )
    C = log["costs"].numpy()
    pairs = [abs(C[:, i] - C[:, j]) for i in range(3) for j in range(i + 1, 3)]
    expected = C @ w.numpy() + 0.7 * 2 / (3 * 2) * np.sum(pairs, axis=0)
    np.testing.assert_allclose(log["objective"], expected, rtol=1e-12)


def test_callable_distance():
    Ys = [_gauss(30, 2, [0.0, 0.0], 1.0, 0), _gauss(30, 2, [2.0, 0.0], 1.0, 1)]

    def cost(X, Y, b, a, generator=None):
        return tsw.sw(X, Y, b, a, n_projections=20, power=True, generator=generator)

    X = tsw.free_support_barycenter(Ys, distance=cost, numItermax=30, seed=0)
    assert float((X.mean(0) - 0.5 * (Ys[0].mean(0) + Ys[1].mean(0))).abs().max()) < 0.1


def test_verbose_prints_or_shows_a_bar(capsys):
    Ys = [_gauss(20, 2, [0.0, 0.0], 1.0, 0)]
    tsw.free_support_barycenter(Ys, X_init=Ys[0] + 1, numItermax=3, seed=0, verbose=True)
    captured = capsys.readouterr()
    assert "free_support_barycenter" in captured.out + captured.err  # tqdm's bar or the lines


def test_errors():
    Y = _gauss(20, 2, [0.0, 0.0], 1.0, 0)
    fsb = tsw.free_support_barycenter
    with pytest.raises(ValueError, match="K >= 1"):
        fsb([])
    with pytest.raises(ValueError, match="same dimension"):
        fsb([Y, _gauss(20, 3, [0.0] * 3, 1.0, 1)])
    with pytest.raises(ValueError, match="sum to one"):
        fsb([Y], [torch.full((20,), 0.1, dtype=F64)])
    with pytest.raises(ValueError, match="one weight vector per measure"):
        fsb([Y, Y], [torch.full((20,), 0.05, dtype=F64)])
    with pytest.raises(ValueError, match=r"shape \(20,\)"):
        fsb([Y], [torch.full((10,), 0.1, dtype=F64)])
    with pytest.raises(ValueError, match="weights must sum to one"):
        fsb([Y, Y], weights=torch.tensor([0.5, 0.6], dtype=F64))
    bad = Y.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        fsb([Y, bad])
    with pytest.raises(ValueError, match=r"'sw'.*'db_tsw'.*'stsw'"):
        fsb([Y], distance="wasserstein")
    with pytest.raises(TypeError, match="set by the barycenter"):
        fsb([Y], power=True)
    with pytest.raises(TypeError, match="numpy"):
        fsb([Y, Y.numpy()])
    with pytest.raises(ValueError, match=r"X_init must have shape \(n, 2\)"):
        fsb([Y], X_init=torch.zeros(5, 3, dtype=F64))
    with pytest.raises(ValueError, match="n_points=4 disagrees"):
        fsb([Y], X_init=torch.zeros(5, 2, dtype=F64), n_points=4)
    with pytest.raises(ValueError, match="lr"):
        fsb([Y], lr=0)
    with pytest.raises(ValueError, match="fairness"):
        fsb([Y], fairness=-1.0)
    with pytest.raises(TypeError, match="list"):
        fsb(5)


@pytest.mark.parametrize("name", sorted(DISTANCES))
def test_every_named_distance_runs(name):
    """Each name drives the steps: a finite support, kept on the sphere where the distance lives."""
    sphere = name in SPHERE_DISTANCES
    g = torch.Generator().manual_seed(0)
    Y = torch.randn(16, 3, generator=g, dtype=F64)
    X0 = torch.randn(16, 3, generator=g, dtype=F64) + 3
    if sphere:
        Y = Y + torch.tensor([0.0, 0.0, 3.0], dtype=F64)
        Y = Y / Y.norm(dim=1, keepdim=True)
        X0 = X0 / X0.norm(dim=1, keepdim=True)
    opts = {"radius": 1.0} if name == "circular_tsw" else {}
    if name in ("max_sw", "max_tsw_sl"):
        opts["n_iter"] = 5
    X, log = tsw.free_support_barycenter(
        [Y], X_init=X0, distance=name, numItermax=3, seed=0, log=True, **opts
    )
    assert X.shape == X0.shape
    assert torch.isfinite(X).all()
    assert log["gain"] > 0
    if sphere:
        assert torch.allclose(X.norm(dim=1), torch.ones(16, dtype=F64), atol=1e-12)


def test_few_directions_in_high_dimension_warn_and_the_default_is_stable():
    g = torch.Generator().manual_seed(0)
    Y = torch.randn(40, 64, generator=g, dtype=F64)
    X0 = torch.randn(40, 64, generator=g, dtype=F64) + 1
    _, log = tsw.free_support_barycenter([Y], X_init=X0, numItermax=10, seed=0, log=True)
    assert log["objective"][-1] < 0.1 * log["objective"][0]  # 64 directions: one frame
    with pytest.warns(UserWarning, match="n_projections=10 < d/2"):
        tsw.free_support_barycenter([Y], X_init=X0, numItermax=1, seed=0, n_projections=10)


@pytest.mark.parametrize("scale", [1e-6, 1e-3, 1e3, 1e6])
def test_the_stopping_rule_is_scale_free(scale):
    """Translates at any scale: the same steps, the same stop, the shape at the mean shift."""
    S = _gauss(50, 2, [0.0, 0.0], 1.0, 3)
    shifts = torch.tensor([[0.0, 0.0], [4.0, 0.0], [0.0, 3.0]], dtype=F64)
    w = torch.tensor([0.5, 0.25, 0.25], dtype=F64)
    X1, log1 = tsw.free_support_barycenter([S + s for s in shifts], weights=w, seed=0, log=True)
    Ys = [(S + s) * scale for s in shifts]
    X, log = tsw.free_support_barycenter(Ys, weights=w, seed=0, log=True)
    assert log["n_iter"] == log1["n_iter"] < 100  # stopped by the rule, not numItermax
    assert torch.allclose(X / scale, X1, rtol=1e-9, atol=1e-9)
    target = (S + w @ shifts) * scale
    assert _w2sq(X, target) < 1e-8 * scale**2 * _spread(S) ** 2


def _pot(Ys, weights=None, X_init=None):
    a = [np.full(len(Y), 1 / len(Y)) for Y in Ys]
    return ot.lp.free_support_barycenter(
        [Y.numpy() for Y in Ys], a, X_init, weights=None if weights is None else weights.numpy()
    )


def test_one_atom_is_pot_s_mean():
    Ys = [_gauss(40, 2, [0.0, 0.0], 1.0, 0), _gauss(30, 2, [3.0, 1.0], 2.0, 1)]
    w = torch.tensor([0.3, 0.7], dtype=F64)
    X = tsw.free_support_barycenter(Ys, weights=w, n_points=1, seed=0)
    expected = _pot(Ys, w, np.zeros((1, 2)))
    np.testing.assert_allclose(X.numpy(), expected, rtol=0, atol=1e-10)


def test_a_start_of_identical_atoms_reaches_pot_s_barycenter():
    """Affine images of one cloud: the SW_2 barycenter is the W2 one (POT's)."""
    S = _gauss(50, 2, [0.0, 0.0], 1.0, 3)
    Ys = [S, 2 * S + 3]
    w = torch.tensor([0.3, 0.7], dtype=F64)
    X = tsw.free_support_barycenter(Ys, X_init=torch.zeros(50, 2, dtype=F64), weights=w, seed=0)
    expected = _pot(Ys, w, np.zeros((50, 2)))
    assert _w2sq(X, expected) < 1e-10 * _spread(S) ** 2


def test_one_point_measures_give_pot_s_weighted_midpoint():
    Ys = [torch.tensor([[0.0, 1.0]], dtype=F64), torch.tensor([[4.0, -1.0]], dtype=F64)]
    Ys.append(torch.tensor([[1.0, 5.0]], dtype=F64))
    w = torch.tensor([0.5, 0.25, 0.25], dtype=F64)
    X = tsw.free_support_barycenter(Ys, weights=w, seed=0)
    np.testing.assert_allclose(X.numpy(), _pot(Ys, w, np.zeros((1, 2))), rtol=0, atol=1e-10)
    np.testing.assert_allclose(X.numpy(), [[1.25, 1.5]], rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", ["db_tsw", "tsw_sl", "ts_sobolev", "max_sw"])
def test_degenerate_starts_run_for_tree_sliced_distances(name):
    S = _gauss(20, 2, [0.0, 0.0], 1.0, 3)
    for kwargs in (
        {"measures_locations": [S, S + 3], "n_points": 1},
        {"measures_locations": [S, S + 3], "X_init": torch.zeros(20, 2, dtype=F64)},
        {"measures_locations": [S[:1], S[1:2]]},
    ):
        X, log = tsw.free_support_barycenter(**kwargs, distance=name, numItermax=5, log=True)
        assert torch.isfinite(X).all()
        assert log["gain"] > 0


def _matched(X, Y, b, a):
    """A deterministic cost: sum_i b_i |x_i - y_i|^2 (atoms matched by index)."""
    return (b * ((X - Y) ** 2).sum(-1)).sum()


def test_one_step_with_fairness_is_the_documented_step():
    """x_i <- x_i - lr gain / (1 + 2 lam) grad_i F / (2 b_i), F = sum w C + lam * pairs."""
    g = torch.Generator().manual_seed(0)
    Ys = [torch.randn(6, 2, generator=g, dtype=F64) + 3 * k for k in range(4)]
    X0 = torch.randn(6, 2, generator=g, dtype=F64)
    b = torch.rand(6, generator=g, dtype=F64) + 0.1
    b = b / b.sum()
    w = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=F64)
    lam, lr = 0.7, 0.8
    X, log = tsw.free_support_barycenter(
        Ys,
        X_init=X0,
        b=b,
        weights=w,
        distance=_matched,
        fairness=lam,
        lr=lr,
        numItermax=1,
        log=True,
    )
    assert abs(log["gain"] - 1) < 1e-12  # the matched cost's slope: a step of 1 undoes a move
    x, y, bn, wn = X0.numpy(), [Y.numpy() for Y in Ys], b.numpy(), w.numpy()
    C = [float((bn * ((x - yk) ** 2).sum(1)).sum()) for yk in y]
    grads = [2 * bn[:, None] * (x - yk) for yk in y]  # d C_k / d x
    grad = sum(wk * gk for wk, gk in zip(wn, grads, strict=True))
    pairs = [(i, j) for i in range(4) for j in range(i + 1, 4)]
    grad = grad + lam * 2 / (4 * 3) * sum(
        np.sign(C[i] - C[j]) * (grads[i] - grads[j]) for i, j in pairs
    )
    expected = x - lr * 1.0 / (1 + 2 * lam) * grad / (2 * bn[:, None])
    np.testing.assert_allclose(X.numpy(), expected, rtol=0, atol=1e-12)


def test_the_average_over_the_second_half_includes_its_first_iterate():
    """lr = 1/2 on a matched cost: X_k = Y + 2^-k (X_0 - Y); six steps average X_4..X_6."""
    g = torch.Generator().manual_seed(1)
    Y, X0 = torch.randn(5, 2, generator=g, dtype=F64), torch.randn(5, 2, generator=g, dtype=F64)
    X = tsw.free_support_barycenter(
        [Y], X_init=X0, distance=_matched, lr=0.5, numItermax=6, stopThr=0
    )
    factor = (0.5**4 + 0.5**5 + 0.5**6) / 3
    assert torch.allclose(X, Y + factor * (X0 - Y), rtol=0, atol=1e-13)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_initial_atoms_are_drawn_without_replacement_when_just_enough(seed):
    """One measure of n atoms and n points: the start is a permutation of its atoms."""
    Y = _gauss(40, 2, [0.0, 0.0], 1.0, seed)
    X = tsw.free_support_barycenter([Y], numItermax=0, seed=seed)
    assert torch.equal(torch.sort(X[:, 0]).values, torch.sort(Y[:, 0]).values)
    assert torch.equal(torch.unique(X, dim=0), torch.unique(Y, dim=0))


def test_the_initial_atoms_follow_the_weights_of_the_measures():
    """Weights (0.1, 0.9); the first measure's mass: 0.9 on 5 atoms, 0.1 on 45, 0 on 50."""
    Y1 = _gauss(100, 2, [0.0, 0.0], 1.0, 0)
    Y2 = _gauss(100, 2, [50.0, 0.0], 1.0, 1)
    a1 = torch.zeros(100, dtype=F64)
    a1[:5] = 0.9 / 5
    a1[5:50] = 0.1 / 45
    a2 = torch.full((100,), 1 / 100, dtype=F64)
    w = torch.tensor([0.1, 0.9], dtype=F64)
    first = heavy = 0
    for seed in range(10):
        X = tsw.free_support_barycenter(
            [Y1, Y2], [a1, a2], weights=w, n_points=20, numItermax=0, seed=seed
        )
        from1 = X[:, 0] < 25
        first += int(from1.sum())
        # every atom of the first measure is one of its 50 atoms of positive mass
        d = (X[from1, None] - Y1[None]).abs().sum(-1)
        assert bool((d.min(1).values == 0).all())
        assert bool((d.argmin(1) < 50).all())
        heavy += int((d.argmin(1) < 5).sum())
    assert 8 <= first <= 35  # 10% of 200 draws (without replacement: about 21)
    assert heavy >= 0.5 * first  # 90% of the first measure's mass (10% of its atoms)
