"""STSW (``tsw.sphere._stsw``): exactness against POT's LP, golden values, gradients.

The oracle is independent of the library: the split is recomputed in numpy with the
textbook formulas (arccos of cosines, explicit tangent vectors), and the spherical star
tree metric is written out directly (rays of length pi glued only at the root:
``|t_a - t_b|`` on one ray, ``t_a + t_b`` across rays) and solved by ``ot.emd2``.
``stsw_unif`` against a brute-force quadrature of the uniform measure. Then the
invariances, degenerate points, the one sort per tree, float32 and peak memory, the
checks of the trees and options, and (slow) gradient flows on S^2.
"""

from __future__ import annotations

import math

import numpy as np
import ot
import pytest
import torch
from _reference import lit, star_sobolev

import tsw
from benchmarks._memory import peak_growth
from tsw import SphericalTrees

F64 = torch.float64


def uniform(n, batch=None, dtype=F64):
    shape = (n,) if batch is None else (batch, n)
    return torch.full(shape, 1 / n, dtype=dtype)


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


def as_torch(*arrays):
    return tuple(torch.tensor(x, dtype=F64) for x in arrays)


def reference_split(P, root, dirs, delta):
    """Geodesic coordinate and split of points P (n, D) on one tree, textbook formulas."""
    c = np.clip(P @ root, -1.0, 1.0)
    t = np.arccos(c)
    u = unit(P - c[:, None] * root)
    phi = np.arccos(np.clip(u @ dirs.T, -1.0, 1.0))  # (n, k)
    beta = np.sin(t)[:, None] * phi
    e = np.exp(-delta * (beta - beta.min(1, keepdims=True)))
    return t, e / e.sum(1, keepdims=True)


def spherical_star_emd(X, Y, a, b, root, dirs, delta):
    """W1 on the explicit spherical star tree metric (ot.emd2)."""
    ts, As = reference_split(X, root, dirs, delta)
    tt, At = reference_split(Y, root, dirs, delta)
    k = dirs.shape[0]
    ray_s, pos_s = np.repeat(np.arange(k), len(ts)), np.tile(ts, k)
    ray_t, pos_t = np.repeat(np.arange(k), len(tt)), np.tile(tt, k)
    ms = (As * a[:, None]).T.reshape(-1)
    mt = (At * b[:, None]).T.reshape(-1)
    same_ray = ray_s[:, None] == ray_t[None, :]
    cost = np.where(
        same_ray, np.abs(pos_s[:, None] - pos_t[None, :]), pos_s[:, None] + pos_t[None, :]
    )
    return ot.emd2(ms, mt * ms.sum() / mt.sum(), cost)


@pytest.mark.parametrize("D", [3, 4, 6])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6])
def test_p1_equals_emd_on_spherical_star_tree(D, k):
    rng = np.random.default_rng(100 * D + k)
    for case in range(3):
        N, M = int(rng.integers(1, 9)), int(rng.integers(2, 9))
        if N == M:
            M += 1
        X, Y, a, b = random_case(rng, D, N, M)
        trees = tsw.sample_spherical_trees(D, n_trees=1, n_lines=k, seed=10 * k + case, dtype=F64)
        delta = float(rng.uniform(0.5, 6.0))
        expected = spherical_star_emd(
            X, Y, a, b, trees.roots[0].numpy(), trees.directions[0].numpy(), delta
        )
        value = tsw.stsw(*as_torch(X, Y, a, b), trees=trees, delta=delta)
        assert abs(value.item() - expected) <= 1e-10, (D, k, case, value.item(), expected)


@pytest.mark.parametrize("D", [3, 5])
@pytest.mark.parametrize("p", [1.5, 2.0])
def test_p_greater_than_one_is_the_sobolev_sum(D, p):
    """p > 1: the Sobolev transport sum, edge by edge on each ray (numpy oracle)."""
    rng = np.random.default_rng(int(10 * p) + D)
    X, Y, a, b = random_case(rng, D, 5, 7)
    trees = tsw.sample_spherical_trees(D, n_trees=3, n_lines=4, seed=1, dtype=F64)
    total = 0.0
    for tau in range(3):
        root, dirs = trees.roots[tau].numpy(), trees.directions[tau].numpy()
        ts, As = reference_split(X, root, dirs, 2.0)
        tt, At = reference_split(Y, root, dirs, 2.0)
        coords = np.tile(np.concatenate([ts, tt]), (4, 1))
        masses = np.concatenate([(As * a[:, None]).T, -(At * b[:, None]).T], axis=1)
        total += star_sobolev(coords, masses, p)
    value = tsw.stsw(*as_torch(X, Y, a, b), trees=trees, p=p)
    assert value.item() == pytest.approx((total / 3) ** (1 / p), rel=1e-12)


def g3_trees(dtype=F64, D=3):
    e = torch.eye(D, dtype=dtype)
    return e, SphericalTrees(e[2:3], e[None, :2])


@pytest.mark.parametrize("D", [3, 4])  # the S^2 path and the general one
def test_golden_g3_ideal_value(D):
    """Spec 8, G3: root e3, rays e1 and e2, X = {e1}, Y = {e2}, delta = 2."""
    e, trees = g3_trees(D=D)
    s = 1 / (1 + math.exp(-math.pi))
    ideal_p1 = math.pi * abs(2 * s - 1)  # 2.8813190...
    assert ideal_p1 == pytest.approx(2.8813190, abs=1e-7)
    assert tsw.stsw(e[:1], e[1:2], trees=trees).item() == pytest.approx(ideal_p1, abs=1e-13)
    # p = 2: both rays carry |2s - 1| over [0, pi/2]: sqrt(pi) |2s - 1| = 1.6256102 (the
    # official code, with its arccos clamp, gives 1.6252115)
    ideal_p2 = math.sqrt(math.pi) * abs(2 * s - 1)
    assert ideal_p2 == pytest.approx(1.6256102, abs=1e-7)
    value = tsw.stsw(e[:1], e[1:2], trees=trees, p=2)
    assert value.item() == pytest.approx(ideal_p2, abs=1e-13)
    # float32: no clamp bias either
    e32, trees32 = g3_trees(torch.float32, D)
    assert tsw.stsw(e32[:1], e32[1:2], trees=trees32).item() == pytest.approx(ideal_p1, abs=1e-6)


@pytest.mark.parametrize("D", [3, 4])
def test_golden_g3_gradients(D):
    """Finite gradients at G3, where the distance has kinks, lie between the one-sided
    derivatives (Clarke subgradients).

    X = e1 sits on ray 1 (turning it towards +-e2 changes its angle to the ray as |h|)
    and at the coordinate of Y (moving it towards the root e3 crosses Y's coordinate).
    """
    e, trees = g3_trees(D=D)
    X = e[:1].clone().requires_grad_()
    Y = e[1:2].clone().requires_grad_()
    value = tsw.stsw(X, Y, trees=trees)
    gx, gy = torch.autograd.grad(value, (X, Y))
    assert bool(torch.isfinite(gx).all() and torch.isfinite(gy).all())

    def f(v, h):
        return tsw.stsw((math.cos(h) * e[0] + math.sin(h) * v)[None], e[1:2], trees=trees)

    # (h well above sqrt(eps): the general formulas resolve angles to ~1e-8 near a ray)
    h = 1e-5
    s = 1 / (1 + math.exp(-math.pi))
    for v, right_exact, left_exact in ((e[2], 3 - 4 * s, -1.0), (e[1], None, 0.0)):
        right = ((f(v, h) - value) / h).item()
        left = ((value - f(v, -h)) / h).item()
        if right_exact is not None:  # towards the root: (pi/2 - h) |2s - 1| x 2 + h
            assert right == pytest.approx(right_exact, abs=1e-4)
        assert left == pytest.approx(left_exact, abs=1e-4)
        g = (gx[0] @ v).item()
        assert min(left, right) - 1e-4 <= g <= max(left, right) + 1e-4, (g, left, right)


@pytest.mark.parametrize("D", [3, 5])
@pytest.mark.parametrize("reflect", [False, True])
def test_joint_rotation_invariance(D, reflect, dtype):
    """O(d+1): rotating (or reflecting) data, roots and directions together."""
    rng = np.random.default_rng(D + 2 * reflect)
    X, Y, a, b = random_case(rng, D, 8, 11)
    Q, R = np.linalg.qr(rng.normal(size=(D, D)))
    Q = Q * np.sign(np.diag(R))
    if (np.linalg.det(Q) < 0) != reflect:
        Q[:, 0] = -Q[:, 0]
    assert (np.linalg.det(Q) < 0) == reflect
    X, Y, a, b, Q = (torch.tensor(z, dtype=dtype) for z in (X, Y, a, b, Q))
    trees = tsw.sample_spherical_trees(D, n_trees=30, n_lines=5, seed=4, dtype=dtype)
    moved = SphericalTrees(trees.roots @ Q.T, trees.directions @ Q.T)
    base = tsw.stsw(X, Y, a, b, trees=trees, delta=3.0)
    rotated = tsw.stsw(X @ Q.T, Y @ Q.T, a, b, trees=moved, delta=3.0)
    tol = 1e-12 if dtype == F64 else 1e-5
    torch.testing.assert_close(rotated, base, rtol=tol, atol=tol)
    # not vacuous: rotating the data alone changes the value
    assert not torch.allclose(tsw.stsw(X @ Q.T, Y @ Q.T, a, b, trees=trees), base, rtol=1e-3)


def degenerate_setup(D):
    e = torch.eye(D, dtype=F64)
    trees = SphericalTrees(
        torch.stack([e[2], e[0]]), torch.stack([e[:2], torch.stack([e[1], -e[2]])])
    )
    # roots, antipodes, points on rays, on the antipode of a ray's plane, duplicates
    P = torch.stack([e[2], -e[2], e[0], e[1], -e[0], e[0], (e[0] + e[2]) / math.sqrt(2)])
    return trees, P


@pytest.mark.parametrize("D", [3, 4])
def test_finite_gradients_at_roots_antipodes_rays_and_coincident_points(D):
    trees, P = degenerate_setup(D)
    rng = np.random.default_rng(0)
    Y = torch.tensor(unit(rng.normal(size=(5, D))), dtype=F64)
    for xs, xt in ((P, Y), (P, P.clone()), (P, P.flip(0)), (P[:3], P[3:])):
        xs, xt = xs.clone().requires_grad_(), xt.clone().requires_grad_()
        for p in (1, 2):
            value = tsw.stsw(xs, xt, trees=trees, p=p)
            assert bool(torch.isfinite(value))
            for g in torch.autograd.grad(value, (xs, xt)):
                assert bool(torch.isfinite(g).all())


@pytest.mark.parametrize("D", [3, 4])
def test_gradcheck_generic_points(D):
    rng = np.random.default_rng(D)
    X, Y, a, b = as_torch(*random_case(rng, D, 4, 3))
    trees = tsw.sample_spherical_trees(D, n_trees=3, n_lines=3, seed=0, dtype=F64)

    def f(X_s, X_t, w_s):
        w = a + (w_s - w_s.mean())
        return tsw.stsw(X_s, X_t, w, b, trees=trees, p=1.5, renormalize=True)

    args = (X.requires_grad_(), Y.requires_grad_(), torch.zeros(4, dtype=F64, requires_grad=True))
    assert torch.autograd.gradcheck(f, args)


def test_value_depends_only_on_directions():
    """validate=False: points off the sphere act as y / |y| (documented)."""
    rng = np.random.default_rng(5)
    X, Y, a, b = as_torch(*random_case(rng, 4, 6, 5))
    scale = torch.tensor(rng.uniform(0.5, 3.0, size=(6, 1)), dtype=F64)
    base = tsw.stsw(X, Y, a, b, seed=0)
    torch.testing.assert_close(tsw.stsw(X * scale, Y, a, b, seed=0, validate=False), base)
    torch.testing.assert_close(tsw.stsw(X * scale, Y, a, b, seed=0, renormalize=True), base)


@pytest.mark.parametrize("numba", ["wait", "0"])
def test_one_sort_per_tree(monkeypatch, numba):
    """The rays of a tree share their coordinate: one sort of a (B, T, n) coordinate tensor.

    The sorts are counted because "one sort per tree" is the documented cost of ``stsw``
    (its docstring), a performance property no value can show.

    With the compiled kernels the split and the closed form run together
    (tsw.core.splits._SplitRayCost, which sorts (B, T, n)); with torch operators the
    closed form sorts the (B, T, 1, n) coordinates its rays share.
    """
    import tsw.core._kernel_loading as loading
    import tsw.core._kernels as kernels
    import tsw.core.splits as splits_module
    import tsw.core.tree_wasserstein as closed_form

    monkeypatch.setenv("TSW_NUMBA", numba)
    # a fresh load of the kernels in this mode (nothing compiled, nothing ready)
    monkeypatch.setattr(kernels, "_compiled", {})
    monkeypatch.setattr(loading, "_ready", set())
    monkeypatch.setattr(loading, "_pending", {})
    monkeypatch.setattr(loading, "_failed", False)
    shapes = []
    sort = torch.sort

    def spying(module, name):
        original = getattr(module, name)

        def spy(x, *args, **kwargs):
            shapes.append(tuple(x.shape))
            return original(x, *args, **kwargs)

        monkeypatch.setattr(module, name, spy)

    spying(closed_form, "sort_last")
    spying(closed_form, "argsort_last")
    spying(splits_module, "argsort_last")

    def other(x, *args, **kwargs):  # any sort outside the closed form's
        shapes.append(("torch.sort", *x.shape))
        return sort(x, *args, **kwargs)

    monkeypatch.setattr(torch, "sort", other)
    X = torch.nn.functional.normalize(torch.randn(7, 3, dtype=F64), dim=-1)
    tsw.stsw(X, X.flip(0)[:5], n_trees=4, n_lines=6, seed=0)
    compiled = numba == "wait" and kernels.usable(X)
    assert shapes == [(1, 4, 12) if compiled else (1, 4, 1, 12)]


def test_uniform_split_delta_zero():
    """delta = 0 gives every ray mass 1/k: the tree cost is the 1-D W1 of the
    geodesic distances to the root (no mass crosses the root)."""
    rng = np.random.default_rng(6)
    X, Y, a, b = random_case(rng, 3, 6, 9)
    trees = tsw.sample_spherical_trees(3, n_trees=5, n_lines=3, seed=0, dtype=F64)
    expected = np.mean(
        [
            ot.wasserstein_1d(
                np.arccos(np.clip(X @ r, -1, 1)), np.arccos(np.clip(Y @ r, -1, 1)), a, b, p=1
            )
            for r in trees.roots.numpy()
        ]
    )
    value = tsw.stsw(*as_torch(X, Y, a, b), trees=trees, delta=0.0)
    assert value.item() == pytest.approx(expected, rel=1e-12)


def test_batched_trees_and_batched_data():
    rng = np.random.default_rng(7)
    X = torch.tensor(unit(rng.normal(size=(3, 6, 4))), dtype=F64)
    Y = torch.tensor(unit(rng.normal(size=(3, 5, 4))), dtype=F64)
    per_item = [
        tsw.sample_spherical_trees(4, n_trees=4, n_lines=3, seed=i, dtype=F64) for i in range(3)
    ]
    batched = SphericalTrees(
        torch.stack([t.roots for t in per_item]), torch.stack([t.directions for t in per_item])
    )
    assert batched.batch_size == 3
    value = tsw.stsw(X, Y, trees=batched)
    loop = torch.stack([tsw.stsw(X[i], Y[i], trees=per_item[i]) for i in range(3)])
    torch.testing.assert_close(value, loop)


# --------------------------------------------------------------------------- uniform measure


def uniform_side_oracle(X, a, root, dirs, delta, n_t=4000, n_u=20000, seed=0):
    """Per-tree STSW_1 to the uniform measure, by brute-force quadrature in numpy.

    The uniform law is written in polar coordinates about the root: t with density
    proportional to sin(t)^(D-2), u uniform on the tangent sphere (an angle grid on S^2,
    Gaussian samples otherwise). On every ray, the suffix mass of each measure beyond t
    is integrated on a fine grid and the transport cost is the integral of the absolute
    difference of the two suffix masses (the closed form of W1 on a ray).
    """
    D = X.shape[1]
    t = (np.arange(n_t) + 0.5) * np.pi / n_t
    dens = np.sin(t) ** (D - 2)
    dens /= dens.sum()
    e1 = dirs[0] - (dirs[0] @ root) * root
    e1 /= np.linalg.norm(e1)
    if D == 3:
        e2 = np.cross(root, e1)
        th = (np.arange(3600) + 0.5) * 2 * np.pi / 3600
        u = np.cos(th)[:, None] * e1 + np.sin(th)[:, None] * e2
    else:
        g = np.random.default_rng(seed).normal(size=(n_u, D))
        g -= (g @ root)[:, None] * root
        u = unit(np.concatenate([g, -g]))
    phi = np.arccos(np.clip(u @ dirs.T, -1, 1))  # (n_u, k)
    A = np.zeros((n_t, dirs.shape[0]))
    for j in range(0, n_t, 200):
        z = -delta * np.sin(t[j : j + 200])[:, None, None] * phi[None]
        z = np.exp(z - z.max(-1, keepdims=True))
        A[j : j + 200] = (z / z.sum(-1, keepdims=True)).mean(1)
    nu = dens[:, None] * A  # (n_t, k): uniform mass per cell and ray
    ts, As = reference_split(X, root, dirs, delta)
    cost = 0.0
    for i in range(dirs.shape[0]):
        suffix_nu = np.cumsum(nu[::-1, i])[::-1]
        suffix_mu = np.array([(a * As[:, i])[ts >= s].sum() for s in t])
        cost += np.abs(suffix_mu - suffix_nu).sum() * np.pi / n_t
    return cost


@pytest.mark.parametrize(
    "D",
    [3, pytest.param(4, marks=pytest.mark.slow)],  # S^3: a 30 s numpy quadrature
)
def test_stsw_unif_matches_a_brute_force_quadrature(D):
    rng = np.random.default_rng(D)
    X, _, a, _ = random_case(rng, D, 7, 2)
    X = unit(X + np.eye(D)[0])  # not uniform
    trees = tsw.sample_spherical_trees(D, n_trees=2, n_lines=3, seed=5, dtype=F64)
    n_u, n_t = (20000, 4000) if D == 3 else (8000, 2000)
    expected = np.mean(
        [
            uniform_side_oracle(
                X, a, trees.roots[i].numpy(), trees.directions[i].numpy(), 2.0, n_t, n_u
            )
            for i in range(2)
        ]
    )
    value = tsw.stsw_unif(*as_torch(X, a), trees=trees, n_grid=1024, n_quad=4096, seed=0)
    # S^2: quadrature errors ~1e-5; S^3: 4e4 random tangent directions in the oracle
    assert value.item() == pytest.approx(expected, rel=3e-4 if D == 3 else 3e-3)


def test_stsw_unif_grid_convergence_and_sample_agreement():
    """n_grid: errors fall like 1/n_grid^2; a large uniform sample agrees within its noise."""
    rng = np.random.default_rng(11)
    X, _, a, _ = random_case(rng, 3, 40, 2)
    X, a = as_torch(unit(X + np.array([0.0, 0.0, 1.5])), a)
    trees = tsw.sample_spherical_trees(3, n_trees=10, n_lines=4, seed=2, dtype=F64)
    vals = [tsw.stsw_unif(X, a, trees=trees, n_grid=G).item() for G in (64, 256, 1024, 4096)]
    errors = [abs(v - vals[-1]) for v in vals[:-1]]
    assert errors[0] > 4 * errors[1] > 16 * errors[2] * 0.5
    assert errors[1] < 1e-4 * vals[-1]
    g = torch.Generator().manual_seed(0)
    samples = [
        tsw.stsw(X, torch.nn.functional.normalize(torch.randn(40000, 3, generator=g, dtype=F64),
                 dim=-1), a, trees=trees).item()
        for _ in range(4)
    ]  # fmt: skip
    assert np.mean(samples) == pytest.approx(vals[-1], abs=4e-3)


def test_stsw_unif_is_small_for_uniform_data():
    """Nearly zero for a quasi-uniform point set (spherical Fibonacci), decreasing in N."""

    def fibonacci(n):
        i = np.arange(n) + 0.5
        z = 1 - 2 * i / n
        r = np.sqrt(1 - z * z)
        phi = np.pi * (3 - np.sqrt(5)) * i
        return torch.tensor(np.stack([r * np.cos(phi), r * np.sin(phi), z], 1), dtype=F64)

    values = [tsw.stsw_unif(fibonacci(n), seed=0).item() for n in (100, 1000, 10000)]
    assert values[0] > 4 * values[1] > 16 * values[2]
    assert values[2] < 2e-3
    # the default grid (n_grid = max(256, N)) resolves even this super-uniform set
    fine = tsw.stsw_unif(fibonacci(1000), seed=0, n_grid=8192).item()
    assert values[1] == pytest.approx(fine, rel=0.02)
    clustered = torch.nn.functional.normalize(fibonacci(1000) + torch.tensor([0, 0, 2.0]), dim=-1)
    assert tsw.stsw_unif(clustered, seed=0).item() > 100 * values[1]


def test_stsw_unif_quadrature_converges_in_higher_dimension():
    rng = np.random.default_rng(12)
    X, _, a, _ = random_case(rng, 6, 50, 2)
    X, a = as_torch(unit(X + np.eye(6)[0]), a)
    trees = tsw.sample_spherical_trees(6, n_trees=20, n_lines=5, seed=0, dtype=F64)
    ref = tsw.stsw_unif(X, a, trees=trees, n_quad=8192, seed=0).item()
    v = [tsw.stsw_unif(X, a, trees=trees, n_quad=128, seed=s).item() for s in range(4)]
    assert abs(np.mean(v) - ref) < 5e-3 * ref


# --------------------------------------------------------------------------- precision, memory


@pytest.mark.parametrize("D", [3, 8])
def test_float32_matches_float64(D):
    """Relative error of value and gradient at most 1e-4 in float32 (2000 points)."""
    g = torch.Generator().manual_seed(D)
    X = torch.nn.functional.normalize(torch.randn(1000, D, generator=g, dtype=F64), dim=-1)
    Y = torch.nn.functional.normalize(torch.randn(1000, D, generator=g, dtype=F64) + 1, dim=-1)
    trees = tsw.sample_spherical_trees(D, n_trees=50, n_lines=5, seed=0, dtype=F64)
    out = {}
    for dt in (torch.float32, F64):
        Xs = X.to(dt).requires_grad_()
        v = tsw.stsw(Xs, Y.to(dt), trees=trees.to(dt), p=2)
        out[dt] = (v.item(), torch.autograd.grad(v, Xs)[0].double())
    (v32, g32), (v64, g64) = out[torch.float32], out[F64]
    assert abs(v32 - v64) / v64 < 1e-4
    assert (g32 - g64).norm() / g64.norm() < 1e-4


def _stsw_step(D: int):
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    X = torch.nn.functional.normalize(torch.randn(1000, D, generator=g), dim=-1)
    Y = torch.nn.functional.normalize(torch.randn(1000, D, generator=g), dim=-1)
    trees = tsw.sample_spherical_trees(D, n_trees=50, n_lines=4, seed=0)
    X.requires_grad_(True)
    return lambda: tsw.stsw(X, Y, trees=trees, validate=False).backward()


def test_peak_memory_does_not_scale_with_tknd():
    """At d+1 = 1024, a (T, k, n, d+1) float32 tensor would take 1.6 GB.

    Measured with the kernel's resettable high-water mark (``ru_maxrss`` would start at
    the pytest parent's peak in the spawned child, and could not fail).
    """
    growth_mib = peak_growth(_stsw_step, 1024)
    assert growth_mib < 150, f"peak RSS grew by {growth_mib:.0f} MiB"


# --------------------------------------------------------------------------- checks of the options


def test_stsw_trees_type_dimension_and_counts():
    X, Y = on_sphere(5, 3), on_sphere(4, 3, seed=1)
    with pytest.raises(TypeError, match=lit("trees must be SphericalTrees; got ConcurrentLines")):
        tsw.stsw(X, Y, trees=tsw.sample_concurrent_lines(3, n_trees=2, n_lines=2, dtype=F64))
    with pytest.raises(ValueError, match=lit("trees must live in the dimension of the data, d=3")):
        tsw.stsw(X, Y, trees=tsw.sample_spherical_trees(4, n_trees=2, n_lines=2, dtype=F64))
    with pytest.raises(ValueError, match=lit("trees must have the dtype and device of X_s")):
        tsw.stsw(X, Y, trees=tsw.sample_spherical_trees(3, n_trees=2, n_lines=2))
    with pytest.raises(ValueError, match=lit("n_lines=3 disagrees with the explicit trees")):
        tsw.stsw(
            X, Y, n_lines=3, trees=tsw.sample_spherical_trees(3, n_trees=2, n_lines=2, dtype=F64)
        )
    for name in ("n_trees", "n_lines"):
        with pytest.raises(ValueError, match=lit(f"{name} must be an int >= 1; got 0")):
            tsw.stsw(X, Y, **{name: 0})
        with pytest.raises(ValueError, match=lit(f"{name} must be an int >= 1; got 0")):
            tsw.stsw_unif(X, **{name: 0})
    with pytest.raises(ValueError, match=lit("delta must be a finite real number >= 0; got -1")):
        tsw.stsw(X, Y, delta=-1)
    with pytest.raises(ValueError, match=lit("p must be a finite real number >= 1; got 0.5")):
        tsw.stsw_unif(X, p=0.5)


def test_stsw_unif_arguments():
    X = on_sphere(5, 3)
    for name in ("n_grid", "n_quad"):
        with pytest.raises(ValueError, match=lit(f"{name} must be an int >= 1; got 0")):
            tsw.stsw_unif(X, **{name: 0})
        with pytest.raises(TypeError, match=lit(f"{name} must be an int >= 1; got float")):
            tsw.stsw_unif(X, **{name: 8.0})
    with pytest.raises(
        TypeError, match=r"X_s must be a torch\.Tensor or a numpy array .*; got list"
    ):
        tsw.stsw_unif(X.tolist())
    with pytest.raises(ValueError, match=lit("a must have shape (N,) = (5,)")):
        tsw.stsw_unif(X, uniform(4))
    with pytest.raises(ValueError, match=lit("a must be non-negative")):
        tsw.stsw_unif(X, torch.tensor([0.5, -0.1, 0.2, 0.2, 0.2], dtype=F64))
    with pytest.raises(ValueError, match=lit("X_s must have shape (N, d) or (B, N, d)")):
        tsw.ssw_unif(X[0])
    with pytest.raises(
        TypeError,
        match=lit("seed must be an int, a numpy RandomState or Generator, or None; got str"),
    ):
        tsw.stsw_unif(X, seed="0")


# --------------------------------------------------------------------------- gradient flows (slow)


def _vmf_mixture_s2(n_per, kappa, seed):
    """Samples of 12 von Mises-Fisher components on S^2 centred on an icosahedron's vertices
    (the STSW gradient-flow target), by the exact inverse CDF of <x, mu> on S^2."""
    g = torch.Generator().manual_seed(seed)
    phi = (1 + 5**0.5) / 2
    verts = torch.tensor(
        [[0, s1, s2 * phi] for s1 in (-1, 1) for s2 in (-1, 1)]
        + [[s1, s2 * phi, 0] for s1 in (-1, 1) for s2 in (-1, 1)]
        + [[s2 * phi, 0, s1] for s1 in (-1, 1) for s2 in (-1, 1)],
        dtype=torch.float64,
    )
    mu = torch.nn.functional.normalize(verts, dim=-1).repeat_interleave(n_per, 0)
    u = torch.rand(mu.shape[0], generator=g, dtype=torch.float64)
    w = 1 + torch.log(u + (1 - u) * np.exp(-2 * kappa)) / kappa
    v = torch.randn(mu.shape, generator=g, dtype=torch.float64)
    v = torch.nn.functional.normalize(v - (v * mu).sum(-1, keepdim=True) * mu, dim=-1)
    return w[:, None] * mu + (1 - w[:, None] ** 2).clamp_min(0).sqrt() * v


def _geodesic_w2sq(X, Y):
    cost = np.arccos(np.clip(X.numpy() @ Y.numpy().T, -1, 1)) ** 2
    n, m = len(X), len(Y)
    return ot.emd2(np.full(n, 1 / n), np.full(m, 1 / m), cost)


@pytest.mark.slow
@pytest.mark.parametrize(
    "loss",
    [
        tsw.nn.STSWLoss(n_trees=200, n_lines=5, seed=0),
        tsw.nn.STSWLoss(n_trees=200, n_lines=5, p=2, seed=0),
    ],
    ids=["stsw", "stsw_p2"],
)
def test_spherical_gradient_flow_towards_a_vmf_mixture(loss):
    """Adam on the points, renormalised after each step, lowers the exact geodesic W2."""
    Y = _vmf_mixture_s2(25, 50.0, seed=0)  # 300 target points
    g = torch.Generator().manual_seed(1)
    X = torch.nn.functional.normalize(torch.randn(300, 3, generator=g, dtype=torch.float64), dim=-1)
    X.requires_grad_(True)
    start = _geodesic_w2sq(X.detach(), Y)
    opt = torch.optim.Adam([X], lr=1e-2)
    for _ in range(300):
        opt.zero_grad()
        loss(X, Y).backward()
        opt.step()
        with torch.no_grad():
            X /= X.norm(dim=-1, keepdim=True)
    end = _geodesic_w2sq(X.detach(), Y)
    assert end < 0.1 * start, (start, end)


@pytest.mark.slow
def test_spherical_flow_to_uniform_lowers_stsw_unif():
    """A clustered cloud spreads out under STSW to the uniform measure."""
    g = torch.Generator().manual_seed(2)
    X = torch.randn(300, 3, generator=g, dtype=torch.float64) * 0.3 + torch.tensor([0, 0, 1.0])
    X = torch.nn.functional.normalize(X, dim=-1).requires_grad_(True)
    loss = tsw.nn.STSWUnifLoss(n_trees=100, seed=0)
    start = tsw.stsw_unif(X.detach(), seed=123).item()
    opt = torch.optim.Adam([X], lr=1e-2)
    for _ in range(300):
        opt.zero_grad()
        loss(X).backward()
        opt.step()
        with torch.no_grad():
            X /= X.norm(dim=-1, keepdim=True)
    end = tsw.stsw_unif(X.detach(), seed=123).item()
    assert end < 0.2 * start, (start, end)
