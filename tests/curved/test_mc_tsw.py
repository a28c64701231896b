"""MC-TSW (``tsw.curved._mc_tsw``): exactness against POT's LP, oracles, gradients, checks.

The oracle is independent of the library: each tree's projection is recomputed in numpy
with textbook formulas (``arccos`` of cosines on a sphere, ``arccosh`` of Lorentz products
on a hyperboloid, explicit residual vectors in Euclidean space), themselves checked
against a brute-force minimisation of the distance along each ray's geodesic; the star
metric of the rays is written out (``|t_a - t_b|`` on one ray, ``t_a + t_b`` across) and
solved by ``ot.emd2``. Then the reductions (a uniform split is the 1-D W1 of the distances
to the root, ``ot.wasserstein_1d``; one sphere factor with a uniform split is STSW's),
the product's isometries, gradients, bad input and the loss module.
"""

from __future__ import annotations

import math

import numpy as np
import ot
import pytest
import torch
from _reference import emd_on_rays, star_sobolev
from scipy.optimize import minimize_scalar

import tsw
from tsw import MixedCurvatureTrees
from tsw.curved._mc_tsw import mc_projection
from tsw.curved._product import check_components, factors_of, ray_factors

F64 = torch.float64
MIXED = (("euclidean", 2), ("sphere", 2), ("hyperbolic", 2))


# --------------------------------------------------------------------------- data


def lorentz(x, y):
    return -x[..., 0] * y[..., 0] + (x[..., 1:] * y[..., 1:]).sum(-1)


def product_points(rng, components, n, spread=1.0, shift=0.0):
    """``n`` points of the product (numpy), Gaussian-like in each factor."""
    cols = []
    for kind, d in components:
        if kind == "euclidean":
            cols.append(spread * rng.normal(size=(n, d)) + shift)
        elif kind == "sphere":
            z = rng.normal(size=(n, d + 1))
            z[:, 0] += 2 * shift
            cols.append(z / np.linalg.norm(z, axis=-1, keepdims=True))
        else:
            u = spread * rng.normal(size=(n, d)) + shift
            cols.append(np.concatenate([np.sqrt(1 + (u * u).sum(-1, keepdims=True)), u], -1))
    return np.concatenate(cols, axis=-1)


def weights(rng, n, total=1.0):
    w = rng.random(n) + 0.1
    return total * w / w.sum()


def t64(*arrays):
    return tuple(torch.as_tensor(np.asarray(x), dtype=F64) for x in arrays)


def project(measures, trees, factors, **kw):
    """The library's projection on explicit trees (what the driver hands a block)."""
    own = ray_factors(trees.directions, factors).cpu()
    return mc_projection(measures, (trees, own), factors=factors, **kw)


def draw_trees(components, T, k, seed, center=None, std=0.7):
    """Trees from the library's sampler (the inputs of the oracle, not what it checks)."""
    c = None if center is None else torch.as_tensor(center, dtype=F64)
    return tsw.sample_mixed_curvature_trees(
        components, n_trees=T, n_lines=k, center=c, std=std, seed=seed, dtype=F64
    )


# --------------------------------------------------------------------------- oracle


def factor_distance(kind, z, x):
    """Geodesic distance between rows ``z`` (n, w) and the point ``x`` (w,), textbook form."""
    if kind == "euclidean":
        return np.linalg.norm(z - x, axis=-1)
    if kind == "sphere":
        return np.arccos(np.clip(z @ x, -1.0, 1.0))
    return np.arccosh(np.maximum(-lorentz(z, x[None]), 1.0))


def geodesic_distance(kind, z, x, v, split):
    """Distance from rows ``z`` to the geodesic (or the ray) through ``x`` along ``v``.

    Textbook closed forms: the residual of the orthogonal projection on the line; the
    angle between ``z`` and the plane of the great circle; ``cosh g = sqrt(<z, x>_L^2 -
    <z, v>_L^2)`` on the hyperboloid. For the ray, the root (or, on a sphere, the nearer
    end) where the foot of the perpendicular falls behind it.
    """
    if kind == "euclidean":
        s = (z - x) @ v
        g = np.linalg.norm(z - x - s[:, None] * v, axis=-1)
    elif kind == "sphere":
        s = z @ v
        g = np.arccos(np.clip(np.hypot(z @ x, s), -1.0, 1.0))
    else:
        s = lorentz(z, v[None])
        g = np.arccosh(np.maximum(np.sqrt(np.maximum(lorentz(z, x[None]) ** 2 - s**2, 0)), 1.0))
    if split == "geodesic":
        return g
    d = factor_distance(kind, z, x)
    if kind == "sphere":
        d = np.minimum(d, np.pi - d)
    return np.where(s >= 0, g, d)


def brute_geodesic_distance(kind, z, x, v, split):
    """The same distance by minimising ``d(z, gamma(s))`` over ``s`` numerically."""

    def point(s):
        if kind == "euclidean":
            return x + s * v
        if kind == "sphere":
            return math.cos(s) * x + math.sin(s) * v
        return math.cosh(s) * x + math.sinh(s) * v

    out = []
    for row in z:

        def f(s, row=row):
            return float(factor_distance(kind, row[None], point(s))[0])

        if kind == "sphere":
            hi = math.pi if split == "ray" else 2 * math.pi
            grid = np.linspace(0.0, hi, 721)
            s0 = grid[np.argmin([f(s) for s in grid])]
            lo, up = max(0.0, s0 - hi / 360), min(hi, s0 + hi / 360)
        else:
            lo, up = (0.0 if split == "ray" else -30.0), 30.0
        best = minimize_scalar(f, bounds=(lo, up), method="bounded", options={"xatol": 1e-12})
        ends = [f(lo), f(up)] if split == "ray" else []
        out.append(min([best.fun, *ends]))
    return np.array(out)


def project_one_tree(P, root, dirs, components, delta, split, distance=geodesic_distance):
    """Coordinates t (n,) and split (n, k) of the rows of ``P`` on one tree."""
    factors = factors_of(check_components(components))
    per = [factor_distance(f.kind, P[:, f.start : f.stop], root[f.start : f.stop]) for f in factors]
    sq = np.stack(per, -1) ** 2  # (n, m)
    t = np.sqrt(sq.sum(-1))
    D = np.zeros((P.shape[0], dirs.shape[0]))
    for i, v in enumerate(dirs):
        j = [int(np.any(v[f.start : f.stop] != 0)) for f in factors].index(1)
        f = factors[j]
        g = distance(
            f.kind, P[:, f.start : f.stop], root[f.start : f.stop], v[f.start : f.stop], split
        )
        D[:, i] = np.sqrt(sq.sum(-1) - sq[:, j] + g**2)
    e = np.exp(-delta * (D - D.min(1, keepdims=True)))
    return t, e / e.sum(1, keepdims=True)


def oracle(X, Y, a, b, trees, components, delta=1.0, split="geodesic", p=1):
    """Mean over the trees of the exact W1 (p = 1, ``ot.emd2``) or the Sobolev sum."""
    R, V = trees.roots.numpy(), trees.directions.numpy()
    costs = []
    for root, dirs in zip(R, V, strict=True):
        ts, As = project_one_tree(X, root, dirs, components, delta, split)
        tt, At = project_one_tree(Y, root, dirs, components, delta, split)
        k = dirs.shape[0]
        if p == 1:
            cs, ct = np.tile(ts, (k, 1)), np.tile(tt, (k, 1))
            costs.append(emd_on_rays(cs, ct, (As * a[:, None]).T, (At * b[:, None]).T))
        else:
            coords = np.tile(np.concatenate([ts, tt]), (k, 1))
            masses = np.concatenate([(As * a[:, None]).T, -(At * b[:, None]).T], axis=1)
            costs.append(star_sobolev(coords, masses, p))
    return float(np.mean(costs)) ** (1 / p)


# --------------------------------------------------------------------------- exactness

CASES = [
    (MIXED, "geodesic", 1.0),
    (MIXED, "ray", 2.5),
    ((("hyperbolic", 3),), "geodesic", 1.0),
    ((("hyperbolic", 2),), "ray", 3.0),
    ((("sphere", 2),), "geodesic", 2.0),
    ((("sphere", 3),), "ray", 1.0),
    ((("euclidean", 3),), "geodesic", 1.0),
    ((("euclidean", 1), ("hyperbolic", 1), ("hyperbolic", 2), ("sphere", 1)), "geodesic", 0.5),
]


@pytest.mark.parametrize(("components", "split", "delta"), CASES)
def test_value_equals_emd_on_the_tree_system(components, split, delta):
    rng = np.random.default_rng(len(components) + int(10 * delta))
    N, M = 7, 5
    X = product_points(rng, components, N)
    Y = product_points(rng, components, M, shift=0.4)
    a, b = weights(rng, N, 2.0), weights(rng, M, 2.0)  # equal totals, not 1
    trees = draw_trees(components, 3, 4, seed=3)
    kw = {"components": components, "delta": delta, "split": split, "trees": trees}
    value = tsw.mc_tsw(*t64(X, Y, a, b), **kw)
    expected = oracle(X, Y, a, b, trees, components, delta, split)
    assert abs(float(value) - expected) <= 1e-9 * max(1.0, expected)
    # per tree, through the log
    _, log = tsw.mc_tsw(*t64(X, Y, a, b), **kw, log=True)
    for tau in range(3):
        one = MixedCurvatureTrees(trees.roots[tau : tau + 1], trees.directions[tau : tau + 1])
        ref = oracle(X, Y, a, b, one, components, delta, split)
        assert abs(float(log["per_tree"][tau]) - ref) <= 1e-9 * max(1.0, ref)


@pytest.mark.parametrize("p", [2, 1.5])
def test_p_above_one_is_the_sobolev_transport_on_the_rays(p):
    rng = np.random.default_rng(7)
    X = product_points(rng, MIXED, 6)
    Y = product_points(rng, MIXED, 8, shift=0.3)
    a, b = weights(rng, 6), weights(rng, 8)
    trees = draw_trees(MIXED, 2, 3, seed=1)
    value = tsw.mc_tsw(*t64(X, Y, a, b), components=MIXED, trees=trees, p=p, delta=2.0)
    expected = oracle(X, Y, a, b, trees, MIXED, 2.0, p=p)
    assert abs(float(value) - expected) <= 1e-10 * max(1.0, expected)


@pytest.mark.parametrize(("components", "split"), [(c, s) for c, s, _ in CASES])
def test_split_distances_against_brute_force_minimisation(components, split):
    """The oracle's closed forms and the library's split, against a numerical minimum."""
    rng = np.random.default_rng(11)
    P = product_points(rng, components, 6, spread=1.5)
    trees = draw_trees(components, 2, 3, seed=5)
    R, V = trees.roots.numpy(), trees.directions.numpy()
    X = torch.as_tensor(P, dtype=F64)
    measures = tsw.core._validation.Measures(
        X[None], X[None, :0], torch.full((1, 6), 1 / 6, dtype=F64), X.new_zeros(1, 0), True
    )
    factors = factors_of(check_components(components))
    got = project(measures, trees, factors, delta=1.3, split=split)
    for tau in range(2):
        t, alpha = project_one_tree(P, R[tau], V[tau], components, 1.3, split)
        t_b, alpha_b = project_one_tree(
            P, R[tau], V[tau], components, 1.3, split, distance=brute_geodesic_distance
        )
        np.testing.assert_allclose(alpha, alpha_b, atol=1e-7)
        np.testing.assert_allclose(t, t_b, atol=0)
        np.testing.assert_allclose(got.coords[0, tau, 0].numpy(), t, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got.masses[0, tau].numpy(), alpha.T / 6, rtol=1e-10, atol=1e-13)


def test_uniform_split_is_the_1d_w1_of_the_distances_to_the_root():
    rng = np.random.default_rng(2)
    X, Y = product_points(rng, MIXED, 9), product_points(rng, MIXED, 6, shift=0.5)
    a, b = weights(rng, 9), weights(rng, 6)
    trees = draw_trees(MIXED, 4, 3, seed=9)
    value = tsw.mc_tsw(*t64(X, Y, a, b), components=MIXED, trees=trees, delta=0.0)
    per = []
    for root in trees.roots.numpy():
        ts = project_one_tree(X, root, trees.directions.numpy()[0], MIXED, 0.0, "geodesic")[0]
        tt = project_one_tree(Y, root, trees.directions.numpy()[0], MIXED, 0.0, "geodesic")[0]
        per.append(ot.wasserstein_1d(ts, tt, a, b, p=1))
    assert abs(float(value) - np.mean(per)) <= 1e-10


def test_one_sphere_factor_with_a_uniform_split_is_stsw():
    """The same spherical trees (root, tangent rays), the same coordinate: the same value."""
    rng = np.random.default_rng(4)
    comp = (("sphere", 3),)
    X, Y = product_points(rng, comp, 8), product_points(rng, comp, 5, shift=0.5)
    a, b = weights(rng, 8), weights(rng, 5)
    sph = tsw.sample_spherical_trees(4, n_trees=6, n_lines=3, seed=0, dtype=F64)
    mixed = MixedCurvatureTrees(sph.roots, sph.directions)
    ours = tsw.mc_tsw(*t64(X, Y, a, b), components=comp, trees=mixed, delta=0.0)
    theirs = tsw.stsw(*t64(X, Y, a, b), trees=sph, delta=0.0)
    assert abs(float(ours) - float(theirs)) <= 1e-12


# --------------------------------------------------------------------------- invariances


def boost(d, phi, seed):
    """A Lorentz transformation of R^(d+1): a rotation of the space part, then a boost."""
    g = np.random.default_rng(seed)
    n = g.normal(size=d)
    n /= np.linalg.norm(n)
    L = np.eye(d + 1)
    L[0, 0] = math.cosh(phi)
    L[0, 1:] = L[1:, 0] = math.sinh(phi) * n
    L[1:, 1:] += (math.cosh(phi) - 1) * np.outer(n, n)
    q, _ = np.linalg.qr(g.normal(size=(d, d)))
    rot = np.eye(d + 1)
    rot[1:, 1:] = q
    return L @ rot


def isometry(components, seed):
    """A block-diagonal isometry of the product (linear part, translation)."""
    g = np.random.default_rng(seed)
    blocks, shift = [], []
    for kind, d in components:
        if kind == "hyperbolic":
            blocks.append(boost(d, 0.7, seed))
            shift.append(np.zeros(d + 1))
        else:
            w = d if kind == "euclidean" else d + 1
            q, _ = np.linalg.qr(g.normal(size=(w, w)))
            blocks.append(q)
            shift.append(g.normal(size=w) if kind == "euclidean" else np.zeros(w))
    D = sum(b.shape[0] for b in blocks)
    A, i = np.zeros((D, D)), 0
    for blk in blocks:
        A[i : i + blk.shape[0], i : i + blk.shape[0]] = blk
        i += blk.shape[0]
    return A, np.concatenate(shift)


@pytest.mark.parametrize("split", ["geodesic", "ray"])
def test_invariant_under_isometries_of_the_product_moving_the_trees(split):
    rng = np.random.default_rng(8)
    X, Y = product_points(rng, MIXED, 7), product_points(rng, MIXED, 6, shift=0.3)
    a, b = weights(rng, 7), weights(rng, 6)
    trees = draw_trees(MIXED, 5, 4, seed=2)
    A, s = isometry(MIXED, 3)
    At = torch.as_tensor(A)
    moved = MixedCurvatureTrees(trees.roots @ At.T + torch.as_tensor(s), trees.directions @ At.T)
    kw = {"components": MIXED, "split": split, "delta": 1.5}
    before = tsw.mc_tsw(*t64(X, Y, a, b), trees=trees, **kw)
    after = tsw.mc_tsw(*t64(X @ A.T + s, Y @ A.T + s, a, b), trees=moved, **kw)
    torch.testing.assert_close(after, before, rtol=1e-10, atol=1e-12)


def test_euclidean_translation_with_the_default_centre_is_exact_per_seed():
    """The roots follow the detached mean: translating the Euclidean factor changes nothing."""
    rng = np.random.default_rng(1)
    X, Y = product_points(rng, MIXED, 7), product_points(rng, MIXED, 6, shift=0.3)
    s = np.zeros(X.shape[1])
    s[:2] = [5.0, -3.0]
    v0 = tsw.mc_tsw(*t64(X, Y), components=MIXED, seed=4, n_trees=20)
    v1 = tsw.mc_tsw(*t64(X + s, Y + s), components=MIXED, seed=4, n_trees=20)
    torch.testing.assert_close(v1, v0, rtol=1e-9, atol=1e-12)


def test_default_centre_of_the_curved_factors_is_on_them_and_equivariant():
    from tsw.core._validation import Measures
    from tsw.curved._product import product_center

    rng = np.random.default_rng(3)
    factors = factors_of(MIXED)
    X, Y = product_points(rng, MIXED, 7), product_points(rng, MIXED, 6, shift=0.3)
    a, b = weights(rng, 7), weights(rng, 6)
    A, s = isometry(MIXED, 5)

    def center(X, Y):
        m = Measures(*(t[None] for t in t64(X, Y, a, b)), batched=False)
        return product_center("mean", m, factors, True).numpy()

    c = center(X, Y)
    np.testing.assert_allclose(np.linalg.norm(c[2:5]), 1.0, rtol=1e-14)
    np.testing.assert_allclose(lorentz(c[5:], c[5:]), -1.0, rtol=1e-13)
    np.testing.assert_allclose(center(X @ A.T + s, Y @ A.T + s), A @ c + s, atol=1e-12)


# --------------------------------------------------------------------------- driver options


def test_batch_equals_loop_with_per_item_centres():
    rng = np.random.default_rng(5)
    Xs = np.stack([product_points(rng, MIXED, 6, shift=i / 2) for i in range(3)])
    Ys = np.stack([product_points(rng, MIXED, 5, shift=0.2) for _ in range(3)])
    X, Y = t64(Xs, Ys)
    batched = tsw.mc_tsw(X, Y, components=MIXED, seed=1, n_trees=12)
    looped = torch.stack(
        [tsw.mc_tsw(X[i], Y[i], components=MIXED, seed=1, n_trees=12) for i in range(3)]
    )
    torch.testing.assert_close(batched, looped, rtol=1e-12, atol=1e-14)


def test_per_item_trees_whose_rays_take_other_factors_equal_a_loop():
    """Batched explicit trees, each item's rays in other factors: item by item."""
    rng = np.random.default_rng(9)
    X = np.stack([product_points(rng, MIXED, 6) for _ in range(2)])
    Y = np.stack([product_points(rng, MIXED, 5, shift=0.3) for _ in range(2)])
    items = [draw_trees(MIXED, 3, 4, seed=s) for s in (1, 2)]
    own = [ray_factors(t.directions, factors_of(MIXED)) for t in items]
    assert not torch.equal(own[0], own[1])
    batched = MixedCurvatureTrees(
        torch.stack([t.roots for t in items]), torch.stack([t.directions for t in items])
    )
    for split in ("geodesic", "ray"):
        kw = {"components": MIXED, "split": split, "delta": 1.5}
        got = tsw.mc_tsw(*t64(X, Y), trees=batched, **kw)
        loop = [tsw.mc_tsw(*t64(X[i], Y[i]), trees=items[i], **kw) for i in range(2)]
        torch.testing.assert_close(got, torch.stack(loop), rtol=1e-12, atol=1e-14)


def test_logged_trees_give_the_value_again_and_numpy_round_trip():
    rng = np.random.default_rng(6)
    X, Y = product_points(rng, MIXED, 6), product_points(rng, MIXED, 5, shift=0.2)
    value, log = tsw.mc_tsw(X, Y, components=MIXED, seed=0, n_trees=10, log=True)
    assert isinstance(value, np.floating | float)
    trees = MixedCurvatureTrees(**log["trees"])
    again = tsw.mc_tsw(X, Y, components=MIXED, trees=trees)
    assert again == pytest.approx(value, rel=1e-12)


def test_float32_agrees_with_float64():
    rng = np.random.default_rng(12)
    X, Y = product_points(rng, MIXED, 30), product_points(rng, MIXED, 20, shift=0.3)
    v64 = tsw.mc_tsw(*t64(X, Y), components=MIXED, seed=0, n_trees=30)
    v32 = tsw.mc_tsw(*(t.float() for t in t64(X, Y)), components=MIXED, seed=0, n_trees=30)
    assert v32.dtype == torch.float32
    assert abs(float(v32) - float(v64)) <= 1e-4 * float(v64)


def test_chunks_do_not_change_the_value_or_gradient():
    rng = np.random.default_rng(13)
    X, Y = t64(product_points(rng, MIXED, 8), product_points(rng, MIXED, 7, shift=0.4))
    out = []
    for chunk in (None, 3):
        Xg = X.clone().requires_grad_()
        v = tsw.mc_tsw(Xg, Y, components=MIXED, seed=2, n_trees=10, chunk_size=chunk)
        v.backward()
        out.append((v.detach(), Xg.grad))
    torch.testing.assert_close(out[0][0], out[1][0], rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(out[0][1], out[1][1], rtol=1e-10, atol=1e-13)


# --------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("split", ["geodesic", "ray"])
def test_gradcheck_and_gradgradcheck(split):
    rng = np.random.default_rng(14)
    X, Y = t64(product_points(rng, MIXED, 4), product_points(rng, MIXED, 3, shift=0.4))
    a, b = t64(weights(rng, 4), weights(rng, 3))
    trees = draw_trees(MIXED, 2, 3, seed=6)
    kw = {"components": MIXED, "trees": trees, "split": split, "delta": 1.5, "validate": False}

    def f(X, Y, a, b):  # masses moved along a zero-sum direction keep equal totals
        return tsw.mc_tsw(X, Y, a - a.mean() + 1 / 4, b - b.mean() + 1 / 3, **kw)

    inputs = tuple(t.clone().requires_grad_() for t in (X, Y, a, b))
    assert torch.autograd.gradcheck(f, inputs, atol=1e-6)
    assert torch.autograd.gradgradcheck(f, inputs, atol=1e-5)


def test_finite_gradients_at_degenerate_points():
    """Points at a root, on a ray's geodesic, at a sphere root's antipode; equal measures."""
    trees = draw_trees(MIXED, 2, 3, seed=7)
    R, V = trees.roots, trees.directions
    on_ray = R[0].clone()
    j = int(torch.nonzero(V[0, 0]).min())  # the first ray's factor: move along it
    f = next(f for f in factors_of(MIXED) if f.start <= j < f.stop)
    x, v = R[0, f.start : f.stop], V[0, 0, f.start : f.stop]
    on_ray[f.start : f.stop] = {
        "euclidean": x + 0.8 * v,
        "sphere": math.cos(0.8) * x + math.sin(0.8) * v,
        "hyperbolic": math.cosh(0.8) * x + math.sinh(0.8) * v,
    }[f.kind]
    antipode = R[1].clone()
    antipode[2:5] = -antipode[2:5]
    X = torch.stack([R[0], on_ray, antipode, R[1]])
    for Y in (X.clone(), X[:2].clone()):
        Xg = X.clone().requires_grad_()
        for split in ("geodesic", "ray"):
            Xg.grad = None
            value = tsw.mc_tsw(Xg, Y, components=MIXED, trees=trees, split=split)
            value.backward()
            assert torch.isfinite(value)
            assert torch.isfinite(Xg.grad).all()


# --------------------------------------------------------------------------- numerics


def test_far_from_a_root_at_the_origin_the_coordinates_are_exact():
    """Points at distance 15 from the origin (x_0 ~ 1.6e6): arcosh of x_0, to rounding."""
    mpmath = pytest.importorskip("mpmath")
    comp = (("hyperbolic", 2),)
    rng = np.random.default_rng(15)
    u = rng.normal(size=(5, 2))
    u = 15.0 * u / np.linalg.norm(u, axis=-1, keepdims=True)  # geodesic radius 15
    r = np.linalg.norm(u, axis=-1, keepdims=True)
    P = np.concatenate([np.cosh(r), np.sinh(r) * u / r], -1)
    trees = MixedCurvatureTrees(
        torch.tensor([[1.0, 0.0, 0.0]], dtype=F64), torch.tensor([[[0.0, 1.0, 0.0]]], dtype=F64)
    )
    measures = tsw.core._validation.Measures(
        torch.tensor(P)[None],
        torch.zeros(1, 0, 3, dtype=F64),
        torch.full((1, 5), 0.2, dtype=F64),
        torch.zeros(1, 0, dtype=F64),
        True,
    )
    got = project(measures, trees, factors_of(comp), delta=1.0, split="geodesic")
    with mpmath.workdps(40):
        exact = [float(mpmath.acosh(mpmath.mpf(float(p0)))) for p0 in P[:, 0]]
    np.testing.assert_allclose(got.coords[0, 0, 0].numpy(), exact, rtol=1e-13)
    assert torch.isfinite(got.masses).all()


def test_points_far_out_give_finite_values_and_gradients_in_float32():
    comp = (("hyperbolic", 2),)
    rng = np.random.default_rng(16)
    X = product_points(rng, comp, 20, spread=6.0)  # x_0 up to ~1e6
    Y = product_points(rng, comp, 20, spread=6.0, shift=1.0)
    Xg = torch.tensor(X, dtype=torch.float32, requires_grad=True)
    v = tsw.mc_tsw(Xg, torch.tensor(Y, dtype=torch.float32), components=comp, seed=0)
    v.backward()
    assert torch.isfinite(v)
    assert torch.isfinite(Xg.grad).all()


# --------------------------------------------------------------------------- bad input


def _good():
    rng = np.random.default_rng(0)
    return t64(product_points(rng, MIXED, 5), product_points(rng, MIXED, 4))


@pytest.mark.parametrize(
    ("components", "match"),
    [
        ((("euclidean", 2), ("sphere", 2), ("hyperbolic", 1)), "components must add up"),
        ((("euclidean", 2), ("sphere", 2), ("hyperbolic", 3)), "components must add up"),
        ((("euclidean", 2), ("torus", 2), ("hyperbolic", 2)), "components\\[1\\] names an unknown"),
        ((("euclidean", 0), ("sphere", 2), ("hyperbolic", 2)), "components\\[0\\].*int >= 1"),
        ((("euclidean", 2.0), ("sphere", 2), ("hyperbolic", 2)), "components\\[0\\].*int >= 1"),
        ((("euclidean", True), ("sphere", 2), ("hyperbolic", 2)), "components\\[0\\].*int >= 1"),
        ("euclidean", "components must be a non-empty sequence"),
        ((), "components must be a non-empty sequence"),
        ((("euclidean",),), "components must be a non-empty sequence"),
    ],
)
def test_bad_components_raise_naming_them(components, match):
    X, Y = _good()
    with pytest.raises(ValueError, match=match):
        tsw.mc_tsw(X, Y, components=components)


def test_components_are_required():
    X, Y = _good()
    with pytest.raises(TypeError, match="components"):
        tsw.mc_tsw(X, Y)


def test_points_off_their_factor_raise_naming_the_argument_and_factor():
    X, Y = _good()
    off = X.clone()
    off[1, 2:5] *= 1.1  # off the sphere
    with pytest.raises(ValueError, match=r"X_s in factor 1 \(sphere S\^2, columns 2:5\)"):
        tsw.mc_tsw(off, Y, components=MIXED)
    off = Y.clone()
    off[0, 5] += 0.05  # off the hyperboloid
    with pytest.raises(ValueError, match=r"X_t in factor 2 \(hyperbolic H\^2.*hyperboloid"):
        tsw.mc_tsw(X, off, components=MIXED)
    low = X.clone()
    low[0, 5] = -low[0, 5]  # the lower sheet
    with pytest.raises(ValueError, match="X_s in factor 2"):
        tsw.mc_tsw(low, Y, components=MIXED)
    # without validation, no check (and no error)
    assert torch.isfinite(tsw.mc_tsw(off.abs(), Y, components=MIXED, validate=False, seed=0))


def test_bad_options_raise_naming_them():
    X, Y = _good()
    with pytest.raises(ValueError, match="split must be one of"):
        tsw.mc_tsw(X, Y, components=MIXED, split="line")
    with pytest.raises(ValueError, match='center must be "mean", "origin"'):
        tsw.mc_tsw(X, Y, components=MIXED, center="median")
    with pytest.raises(ValueError, match="center must have shape"):
        tsw.mc_tsw(X, Y, components=MIXED, center=torch.zeros(3, dtype=F64))
    with pytest.raises(ValueError, match="center in factor 1"):
        tsw.mc_tsw(X, Y, components=MIXED, center=torch.zeros(8, dtype=F64))
    with pytest.raises(ValueError, match="delta"):
        tsw.mc_tsw(X, Y, components=MIXED, delta=-1.0)


def test_bad_trees_raise_naming_them():
    X, Y = _good()
    trees = draw_trees(MIXED, 2, 3, seed=0)
    R, V = trees.roots, trees.directions

    def call(roots, dirs):
        return tsw.mc_tsw(X, Y, components=MIXED, trees=MixedCurvatureTrees(roots, dirs))

    two = V.clone()
    two[0, 0] = V[0, 0] + V[0, 1] if not torch.equal(V[0, 0].ne(0), V[0, 1].ne(0)) else V[0, 0]
    two[0, 0, 0] = 1.0  # a Euclidean column too
    two[0, 0, 5:] = torch.tensor([1.0, 0.0, 0.0], dtype=F64)
    with pytest.raises(ValueError, match="exactly one factor"):
        call(R, two)
    zero = V.clone()
    zero[1, 2] = 0
    with pytest.raises(ValueError, match="exactly one factor"):
        call(R, zero)
    long = V.clone() * 1.5
    with pytest.raises(ValueError, match="must be unit vectors"):
        call(R, long)
    off = R.clone()
    off[0, 5] += 1.0
    with pytest.raises(ValueError, match=r"trees\.roots in factor 2"):
        call(off, V)
    # a sphere or hyperbolic direction that is not tangent at its root
    bent = V.clone()
    where = torch.nonzero(V[..., 2:].ne(0).any(-1))[0]
    tau, i = int(where[0]), int(where[1])
    kind = 2 if bool(V[tau, i, 2:5].ne(0).any()) else 5
    w = bent[tau, i, kind : kind + 3]
    bent[tau, i, kind : kind + 3] = torch.nn.functional.normalize(
        w + 0.3 * R[tau, kind : kind + 3], dim=0
    )
    with pytest.raises(ValueError, match=r"tangent|unit"):
        call(R, bent)
    narrow = MixedCurvatureTrees(R[..., :7], V[..., :7])
    with pytest.raises(ValueError, match="dimension of the data"):
        tsw.mc_tsw(X, Y, components=MIXED, trees=narrow)
    with pytest.raises(ValueError, match="n_lines=2 disagrees"):
        tsw.mc_tsw(X, Y, components=MIXED, trees=trees, n_lines=2)


# --------------------------------------------------------------------------- loss module


def test_loss_module_equals_the_function_and_checks_at_construction():
    X, Y = _good()
    loss = tsw.nn.MCTSWLoss(components=MIXED, n_trees=10, seed=3, resample=False)
    torch.testing.assert_close(
        loss(X, Y), tsw.mc_tsw(X, Y, components=MIXED, n_trees=10, seed=3), rtol=0, atol=0
    )
    with pytest.raises(ValueError, match="unknown factor"):
        tsw.nn.MCTSWLoss(components=[("torus", 2)])
    with pytest.raises(TypeError, match="components"):
        tsw.nn.MCTSWLoss()


# --------------------------------------------------------------------------- written-out gradients


def _gram_inputs(kind, seed):
    """Gram quantities of generic atoms, with degenerate ones appended: at a root, on a
    geodesic, at a sphere root's antipode, at a great circle's pole."""
    g = torch.Generator().manual_seed(seed)
    n = 12
    t2 = 4 + torch.rand(1, 3, n, generator=g, dtype=F64)
    if kind == "sphere":
        z = torch.nn.functional.normalize(torch.randn(1, 3, n, 3, generator=g, dtype=F64), dim=-1)
        z[0, :, -4] = torch.tensor([1.0, 0, 0])  # the root e0
        z[0, :, -3] = torch.tensor([-1.0, 0, 0])  # its antipode
        z[0, :, -2] = torch.tensor([0.6, 0.8, 0])  # on the great circle of e1
        z[0, :, -1] = torch.tensor([0.0, 0, 1])  # a pole of that circle
        C, S, Nz = z[..., 0], z[..., 1], (z * z).sum(-1)
    elif kind == "hyperbolic":
        u = torch.randn(1, 3, n, 2, generator=g, dtype=F64)
        u[0, :, -2] = 0  # the root (the origin)
        u[0, :, -1] = torch.tensor([0.7, 0])  # on the geodesic of e1
        x0 = (1 + (u * u).sum(-1)).sqrt()
        C, S, Nz = -x0, u[..., 0], torch.ones_like(x0)
    else:
        C = torch.zeros(1, 3, n, dtype=F64)
        S = torch.randn(1, 3, n, generator=g, dtype=F64)
        S[0, :, -1] = 0
        Nz = C
    return t2, S, C, Nz


@pytest.mark.parametrize("kind", ["euclidean", "sphere", "hyperbolic"])
@pytest.mark.parametrize("flat", [False, True])
def test_written_out_ray_gradient_equals_the_torch_operations(kind, flat):
    """_RayDistance's backward against autograd through _group_distance, degenerate atoms too."""
    from tsw.curved._mc_tsw import _group_distance, _RayDistance

    t2, S, C, Nz = _gram_inputs(kind, 3)
    weight = torch.rand(S.shape, generator=torch.Generator().manual_seed(4), dtype=F64)
    grads = []
    for fused in (True, False):
        leaves = [x.clone().requires_grad_() for x in (t2, S, C, Nz)]
        if fused:  # ray i of tree i, in factor i (per-tree t2, per-factor |z|^2)
            ids = torch.arange(3)
            D = _RayDistance.apply(*leaves, ids, ids, kind, flat)
        else:
            D = _group_distance(kind, flat, "geodesic", *leaves)
        if fused:
            value = D
        else:
            torch.testing.assert_close(D.detach(), value.detach(), rtol=1e-13, atol=1e-14)
        grads.append(torch.autograd.grad((D * weight).sum(), leaves, allow_unused=True))
    for a, b in zip(*grads, strict=True):
        if a is None or b is None:
            assert a is None or not a.any()
            assert b is None or not b.any()
        else:
            assert torch.isfinite(a).all()
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_written_out_root_gradient_equals_the_torch_operations():
    from tsw.curved._mc_tsw import _root_reference, _RootDistance

    kinds = ("euclidean", "sphere", "hyperbolic")
    parts = [_gram_inputs(kind, 5) for kind in kinds]
    C = torch.stack([p[2] for p in parts], dim=2)  # (1, 3, m, n)
    Nz = torch.stack([p[3][:, 0] for p in parts], dim=1)  # (1, m, n)
    Nz[:, 0] = 2.0  # a Euclidean |z|^2
    Nr = torch.rand(1, 3, 3, generator=torch.Generator().manual_seed(6), dtype=F64) + 1
    g = torch.Generator().manual_seed(7)
    weight = torch.rand(1, 3, C.shape[-1], generator=g, dtype=F64)
    weight_others = torch.rand(1, 3, 3, C.shape[-1], generator=g, dtype=F64)
    grads, values = [], []
    for fn in (lambda *x: _RootDistance.apply(*x, kinds), lambda *x: _root_reference(*x, kinds)):
        leaves = [x.clone().requires_grad_() for x in (C, Nz, Nr)]
        t2, others = fn(*leaves)
        values.append((t2.detach(), others.detach()))
        loss = (t2 * weight).sum() + (others * weight_others).sum()
        grads.append(torch.autograd.grad(loss, leaves))
    for a, b in zip(*values, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-14)
    for a, b in zip(*grads, strict=True):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
