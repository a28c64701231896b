"""Nonlinear projections: CircularTSW (r > 0 and r = 0) and SpatialTSW.

Exactness against independent computations (float64, 1e-10): per-tree values are exact
LPs (``ot.emd2``) on the explicit metric of the star of rays, written from its
definition in ``_reference.ray_star_metric``, with the ray coordinates and the splits
recomputed in numpy; SpatialTSW is compared with Db-TSW on points mapped in numpy.
Then the shared sort of r = 0, the two numerical paths (explicit residuals and the
expanded-square identity), degenerate points, the invariances the maps allow, and the
learnable map.
"""

from __future__ import annotations

import itertools
import math

import _reference as ref
import numpy as np
import pytest
import torch
from _reference import assert_close, t64, unit_rows, weights
from torch.overrides import TorchFunctionMode

import tsw
import tsw.euclidean._lines as engine
from tsw import ConcurrentLines
from tsw.core._sort import argsort_last, sort_last

F64 = torch.float64


# --------------------------------------------------------------------------- helpers


def problem(rng, d, zero_prob=0.0):
    n = int(rng.integers(1, 8))
    m = int(rng.choice([v for v in range(1, 9) if v != n]))
    X = rng.normal(size=(n, d))
    Y = 0.8 * rng.normal(size=(m, d)) + rng.normal(size=d)
    return X, Y, weights(rng, n, zero_prob), weights(rng, m, zero_prob)


def softmax_over_lines(D, delta):
    logits = -delta * D
    e = np.exp(logits - logits.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def circular_geometry(Z, root, dirs, radius, split, delta):
    """Ray coordinates (k, n) and split (k, n) of points Z (n, d), from the definitions."""
    k = dirs.shape[0]
    rel = Z - root  # (n, d)
    coords = np.stack([np.linalg.norm(rel - radius * th, axis=1) for th in dirs])
    if delta == 0:
        return coords, np.full_like(coords, 1.0 / k)
    if split == "image":  # distance to the point at coordinate t_l on line l
        pairs = zip(coords, dirs, strict=True)
        D = np.stack([np.linalg.norm(rel - t[:, None] * th, axis=1) for t, th in pairs])
    else:  # distance to line l
        D = np.stack([np.linalg.norm(rel - np.outer(rel @ th, th), axis=1) for th in dirs])
    return coords, softmax_over_lines(D, delta)


def circular_oracle(X, Y, a, b, root, dirs, *, radius, split, delta, p=1):
    """Per-tree cost: EMD on the star of rays (p = 1), else the Sobolev sum edge by edge."""
    cx, sx = circular_geometry(X, root, dirs, radius, split, delta)
    cy, sy = circular_geometry(Y, root, dirs, radius, split, delta)
    if p == 1:
        return ref.emd_on_rays(cx, cy, a * sx, b * sy)
    coords = np.concatenate([cx, cy], 1)
    signed = np.concatenate([a * sx, -(b * sy)], 1)
    return ref.star_sobolev(coords, signed, p)


# --------------------------------------------------------------------------- circular: exactness

RADII = [0.0, 0.4, 2.0]
SPLITS = ["image", "line"]


class TestCircularOneTree:
    @pytest.mark.parametrize("radius", RADII)
    @pytest.mark.parametrize("split", SPLITS)
    def test_equals_emd_on_the_star_of_rays(self, radius, split):
        rng = np.random.default_rng(int(10 * radius) + 100 * (split == "line"))
        for case in range(8):
            d = [1, 2, 3, 5][case % 4]  # d = 5: the expanded-square path
            k = [1, 2, 3, 4][(case // 2) % 4]
            delta = [0.0, 0.7, 2.0, 10.0][case % 4]
            X, Y, a, b = problem(rng, d, zero_prob=0.2 if case % 3 == 0 else 0.0)
            root, dirs = rng.normal(size=d) * 0.5, unit_rows(rng, k, d)
            expected = circular_oracle(
                X, Y, a, b, root, dirs, radius=radius, split=split, delta=delta
            )
            trees = ConcurrentLines(t64(root[None]), t64(dirs[None]))
            value = tsw.circular_tsw(
                t64(X), t64(Y), t64(a), t64(b), radius=radius, split=split, delta=delta, trees=trees
            )
            assert_close(value, expected)

    @pytest.mark.parametrize("radius", [0.0, 1.0])
    def test_one_ray_spec_example(self, radius):
        """Spec 4.3: source at distance 1, target at distance 3 on one ray: W1 = 2.

        The published code pairs each edge with the prefix mass and returns 1 here
        (min of the two coordinates).
        """
        ray = ConcurrentLines(torch.zeros(1, 1, dtype=F64), torch.ones(1, 1, 1, dtype=F64))
        x = torch.tensor([[1.0 + radius]], dtype=F64)  # |x - 0 - r| = 1
        y = torch.tensor([[3.0 + radius]], dtype=F64)  # |y - 0 - r| = 3
        for split in SPLITS:
            v = tsw.circular_tsw(x, y, radius=radius, split=split, trees=ray)
            assert_close(v, 2.0)
            assert_close(tsw.circular_tsw(y, x, radius=radius, split=split, trees=ray), 2.0)
        # the star metric of one ray, directly
        assert_close(ref.emd_on_rays([[1.0]], [[3.0]], [[1.0]], [[1.0]]), 2.0)

    def test_two_rays_through_the_root(self):
        """r = 0, delta large: each atom on the ray pointing at it; mass crosses the root."""
        dirs = torch.eye(2, dtype=F64)[None]
        trees = ConcurrentLines(torch.zeros(1, 2, dtype=F64), dirs)
        x = torch.tensor([[1.0, 0.0]], dtype=F64)
        y = torch.tensor([[0.0, 3.0]], dtype=F64)
        v = tsw.circular_tsw(x, y, radius=0.0, delta=200.0, trees=trees)
        assert_close(v, 4.0)  # 1 to the root, 3 out along the other ray
        # the distance-to-line split would put x's mass on line 0 too (distance 0)
        v_line = tsw.circular_tsw(x, y, radius=0.0, delta=200.0, split="line", trees=trees)
        assert_close(v_line, 4.0)


class TestCircularSeveralTrees:
    @pytest.mark.parametrize("p", [1.0, 2.0, 1.5])
    @pytest.mark.parametrize("radius", [0.0, 0.8])
    def test_mean_over_trees(self, p, radius):
        rng = np.random.default_rng(int(10 * p + radius))
        d, T, k = 3, 4, 3
        X, Y, a, b = problem(rng, d)
        roots = rng.normal(size=(T, d))
        dirs = np.stack([unit_rows(rng, k, d) for _ in range(T)])
        for split in SPLITS:
            per_tree = [
                circular_oracle(
                    X, Y, a, b, roots[i], dirs[i], radius=radius, split=split, delta=1.5, p=p
                )
                for i in range(T)
            ]
            value = tsw.circular_tsw(
                t64(X),
                t64(Y),
                t64(a),
                t64(b),
                radius=radius,
                delta=1.5,
                p=p,
                split=split,
                trees=ConcurrentLines(t64(roots), t64(dirs)),
            )
            assert_close(value, np.mean(per_tree) ** (1 / p))

    def test_batched_trees_and_measures(self):
        rng = np.random.default_rng(7)
        d, T, k, B = 2, 3, 2, 2
        Xs, Ys = rng.normal(size=(B, 5, d)), rng.normal(size=(B, 6, d)) + 1
        a = np.stack([weights(rng, 5) for _ in range(B)])
        b = np.stack([weights(rng, 6) for _ in range(B)])
        roots = rng.normal(size=(B, T, d))
        dirs = np.stack([[unit_rows(rng, k, d) for _ in range(T)] for _ in range(B)])
        value = tsw.circular_tsw(
            t64(Xs),
            t64(Ys),
            t64(a),
            t64(b),
            radius=0.3,
            trees=ConcurrentLines(t64(roots), t64(dirs)),
        )
        expected = [
            np.mean(
                [
                    circular_oracle(
                        Xs[i],
                        Ys[i],
                        a[i],
                        b[i],
                        roots[i, j],
                        dirs[i, j],
                        radius=0.3,
                        split="image",
                        delta=2.0,
                    )
                    for j in range(T)
                ]
            )
            for i in range(B)
        ]
        assert_close(value, expected)


# --------------------------------------------------------------------------- circular: compat


def published_tree_cost(X, Y, a, b, root, dirs, *, radius, delta, p):
    """Spec 4.3's description of the published closed form, for one tree (numpy).

    Edge [c_(j-1), c_(j)] (c_(0) = 0) is paired with the prefix mass P_j (defect 1);
    for r = 0 only line 0's masses enter (defect 2). Image split.
    """
    cx, sx = circular_geometry(X, root, dirs, radius, "image", delta)
    cy, sy = circular_geometry(Y, root, dirs, radius, "image", delta)
    coords = np.concatenate([cx, cy], 1)
    signed = np.concatenate([a * sx, -(b * sy)], 1)
    lines = [0] if radius == 0 else range(len(dirs))
    total = 0.0
    for line in lines:
        order = np.argsort(coords[line], kind="stable")
        c, m = coords[line][order], signed[line][order]
        total += np.sum(np.diff(np.concatenate([[0.0], c])) * np.abs(np.cumsum(m)) ** p)
    return total


class TestCompat:
    def test_spec_example_and_two_diracs(self):
        """The published value of two Diracs on one ray is min(t_x, t_y), not |t_x - t_y|."""
        ray = ConcurrentLines(torch.zeros(1, 1, dtype=F64), torch.ones(1, 1, 1, dtype=F64))
        for tx, ty in ((1.0, 3.0), (3.0, 1.0), (0.5, 2.5)):
            for radius in (0.0, 1.0):  # |y - 0 - r| = t for y = t + r on the ray
                x = torch.tensor([[tx + radius]], dtype=F64)
                y = torch.tensor([[ty + radius]], dtype=F64)
                kw = {"radius": radius, "trees": ray}
                assert_close(tsw.circular_tsw(x, y, compat=True, **kw), min(tx, ty))
                assert_close(tsw.circular_tsw(x, y, **kw), abs(tx - ty))

    @pytest.mark.parametrize("radius", [0.0, 0.6])
    @pytest.mark.parametrize("p", [1, 2])
    def test_equals_the_described_published_formula(self, radius, p):
        rng = np.random.default_rng(int(10 * radius) + p)
        d, T, k = 3, 3, 3
        X, Y, a, b = problem(rng, d)
        roots, dirs = rng.normal(size=(T, d)), np.stack([unit_rows(rng, k, d) for _ in range(T)])
        for delta in (0.0, 2.0):
            per_tree = [
                published_tree_cost(X, Y, a, b, roots[i], dirs[i], radius=radius, delta=delta, p=p)
                for i in range(T)
            ]
            trees = ConcurrentLines(t64(roots), t64(dirs))
            kw = {"radius": radius, "delta": delta, "p": p, "trees": trees}
            value = tsw.circular_tsw(t64(X), t64(Y), t64(a), t64(b), compat=True, **kw)
            assert_close(value, np.mean(per_tree) ** (1 / p))
            correct = tsw.circular_tsw(t64(X), t64(Y), t64(a), t64(b), **kw)
            assert abs(float(value) - float(correct)) > 1e-3  # the defects matter

    def test_batched_and_differentiable(self):
        X, Y = torch.randn(2, 6, 3, dtype=F64), torch.randn(2, 5, 3, dtype=F64)
        Xg = X.clone().requires_grad_()
        v = tsw.circular_tsw(Xg, Y, radius=0.0, n_trees=4, seed=0, compat=True)
        loop = [
            tsw.circular_tsw(X[i], Y[i], radius=0.0, n_trees=4, seed=0, compat=True)
            for i in range(2)
        ]
        assert_close(v, torch.stack(loop).numpy())
        v.sum().backward()
        assert bool(torch.isfinite(Xg.grad).all())


# --------------------------------------------------------------------------- circular: numerics


class _SortRecorder(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.sort, torch.Tensor.sort):
            self.shapes.append(tuple(args[0].shape))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("d", [2, 6])
def test_radius_zero_sorts_once_per_tree(d, monkeypatch):
    """r = 0: the only sort is of the (B, T, 1, n) radial coordinates; r > 0 sorts (B, T, k, n).

    Sorts are counted where the closed form takes them (``sort_last``, NumPy's on the
    CPU, or ``argsort_last`` with the compiled kernels) and at ``torch.sort``, which
    both call elsewhere.
    """
    import tsw.core.tree_wasserstein as closed_form

    X, Y = torch.randn(9, d, dtype=F64), torch.randn(7, d, dtype=F64)
    for radius, k_sorted in ((0.0, 1), (0.5, 4)):
        shapes = []

        def recorded(x, shapes=shapes):
            shapes.append(tuple(x.shape))
            return sort_last(x)

        def recorded_arg(x, compact=False, shapes=shapes):  # the compiled kernels' sort
            shapes.append(tuple(x.shape))
            return argsort_last(x, compact)

        monkeypatch.setattr(closed_form, "sort_last", recorded)
        monkeypatch.setattr(closed_form, "argsort_last", recorded_arg)
        rec = _SortRecorder()
        with rec:
            value = tsw.circular_tsw(X, Y, radius=radius, n_trees=5, n_lines=4, seed=0)
        assert shapes == [(1, 5, k_sorted, 16)], shapes
        assert rec.shapes == [], rec.shapes  # no other sort on the CPU
        assert torch.isfinite(value)
        Xg = X.clone().requires_grad_()
        shapes.clear()
        with rec:
            tsw.circular_tsw(Xg, Y, radius=radius, n_trees=5, n_lines=4, seed=0).backward()
        assert shapes == [(1, 5, k_sorted, 16)], shapes  # the backward does not re-sort
        assert rec.shapes == [], rec.shapes


@pytest.mark.parametrize("radius", [0.0, 0.7])
@pytest.mark.parametrize("split", SPLITS)
def test_explicit_and_expanded_paths_agree(radius, split, monkeypatch):
    """d <= 3 forms residuals explicitly; above, |z|^2, <z, theta> and r are combined."""
    g = torch.Generator().manual_seed(3)
    X = torch.randn(6, 3, generator=g, dtype=F64, requires_grad=True)
    Y = torch.randn(5, 3, generator=g, dtype=F64) + 0.5
    trees = tsw.sample_concurrent_lines(3, n_trees=4, n_lines=3, std=0.5, seed=1, dtype=F64)
    kw = {"radius": radius, "split": split, "trees": trees}
    v1 = tsw.circular_tsw(X, Y, **kw)
    (g1,) = torch.autograd.grad(v1, X)
    monkeypatch.setattr(engine, "EXPLICIT_RESIDUAL_MAX_DIM", 0)
    v2 = tsw.circular_tsw(X, Y, **kw)
    (g2,) = torch.autograd.grad(v2, X)
    assert_close(v2, float(v1.detach()))
    assert_close(g2, g1.numpy(), tol=1e-8)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_low_dimension_distances_are_residual_norms(d):
    """Up to d = 3 the distances come from cross-product coordinates; here each is the
    norm of the residual ``z - x - u theta`` formed explicitly (and its gradient that
    of the explicit norm), for points on and off the lines."""
    g = torch.Generator().manual_seed(d)
    X = torch.randn(5, d, generator=g, dtype=F64)
    Y = torch.randn(4, d, generator=g, dtype=F64) + 0.5
    roots = torch.randn(3, d, generator=g, dtype=F64)
    dirs = torch.nn.functional.normalize(torch.randn(3, 2, d, generator=g, dtype=F64), dim=-1)
    Y[0] = roots[1] + 0.7 * dirs[1, 0]  # a target atom on a line
    trees = ConcurrentLines(roots, dirs)
    Xs = X.clone().requires_grad_()
    off = engine.offsets(tsw.core._validation.check_measures(Xs, Y, None, None), trees)
    u = torch.rand(1, 3, 2, 9, generator=g, dtype=F64)
    got = (engine.line_distance(off), engine.point_distance(off, u), engine.radial_distance(off))
    Z = torch.cat([Xs, Y])  # (n, d): the residuals from scratch
    rel = Z[None, None] - roots[:, None, None]  # (T, 1, n, d)
    s = (rel * dirs[:, :, None]).sum(-1)  # (T, k, n)
    want = (
        torch.linalg.vector_norm(rel - s[..., None] * dirs[:, :, None], dim=-1),
        torch.linalg.vector_norm(rel - u[0, ..., None] * dirs[:, :, None], dim=-1),
        torch.linalg.vector_norm(rel, dim=-1),
    )
    for a, b in zip(got, want, strict=True):
        assert_close(a[0].expand_as(b), b.detach().numpy(), tol=1e-12)
    assert float(got[0][0, 1, 0, 5].detach()) <= 1e-15  # the atom on line 0 of tree 1
    w = torch.rand(3, 2, 9, generator=g, dtype=F64)
    w[1, 0, 5] = 0  # the norm's gradient on the line is 0/0 in the explicit form
    for a, b in zip(got, want, strict=True):
        (gb,) = torch.autograd.grad((b * w[:, : b.shape[1]]).sum(), Xs, retain_graph=True)
        if not a.requires_grad:  # on a line (d = 1) every point lies on every line
            assert d == 1
            assert float(gb.abs().max()) == 0
            continue
        (ga,) = torch.autograd.grad((a[0] * w[:, : a.shape[2]]).sum(), Xs, retain_graph=True)
        assert_close(ga, gb.numpy(), tol=1e-12)


@pytest.mark.parametrize("explicit", [True, False])
@pytest.mark.parametrize("split", SPLITS)
def test_finite_gradients_at_ray_origins(explicit, split, monkeypatch):
    """Atoms at the root (r = 0) or at x + r theta_l (t_l = 0): finite (sub)gradients."""
    if not explicit:
        monkeypatch.setattr(engine, "EXPLICIT_RESIDUAL_MAX_DIM", 0)
    eye = torch.eye(3, dtype=F64)
    trees = ConcurrentLines(torch.zeros(2, 3, dtype=F64), torch.stack([eye, -eye]))
    for radius in (0.0, 1.0):
        P = torch.cat([torch.zeros(1, 3, dtype=F64), radius * eye, -radius * eye, eye])
        Q = torch.randn(4, 3, dtype=F64, generator=torch.Generator().manual_seed(0))
        for xs, xt in ((P, Q), (P, P.clone()), (P, P.flip(0))):
            xs, xt = xs.clone().requires_grad_(), xt.clone().requires_grad_()
            v = tsw.circular_tsw(xs, xt, radius=radius, split=split, trees=trees)
            assert torch.isfinite(v)
            for grad in torch.autograd.grad(v, (xs, xt)):
                assert bool(torch.isfinite(grad).all())


def test_float32_high_dimension():
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(40, 16, generator=g, dtype=F64), torch.randn(30, 16, generator=g, dtype=F64)
    for radius in (0.0, 0.5):
        v64 = tsw.circular_tsw(X, Y + 0.3, radius=radius, seed=2)
        v32 = tsw.circular_tsw(X.float(), (Y + 0.3).float(), radius=radius, seed=2)
        torch.testing.assert_close(v32.double(), v64, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("c", [3.0, 0.2])
def test_scaling_acts_on_radius_and_delta(split, c):
    """d(c mu, c nu; c trees, c r, delta / c) = c d(mu, nu) for p = 1; not with r fixed."""
    g = torch.Generator().manual_seed(1)
    X, Y = torch.randn(7, 3, generator=g, dtype=F64), torch.randn(5, 3, generator=g, dtype=F64)
    trees = tsw.sample_concurrent_lines(3, n_trees=6, n_lines=3, std=0.5, seed=0, dtype=F64)
    scaled = ConcurrentLines(c * trees.roots, trees.directions)
    base = tsw.circular_tsw(X, Y, radius=0.6, delta=2.0, split=split, trees=trees)
    v = tsw.circular_tsw(c * X, c * Y, radius=0.6 * c, delta=2.0 / c, split=split, trees=scaled)
    assert_close(v, c * float(base))
    fixed_r = tsw.circular_tsw(c * X, c * Y, radius=0.6, delta=2.0 / c, split=split, trees=scaled)
    assert abs(float(fixed_r) - c * float(base)) > 1e-6


# --------------------------------------------------------------------------- line_cost sharing


@pytest.mark.usefixtures("line_kernel")
@pytest.mark.parametrize("p", [1.0, 2.0, 1.5])
def test_shared_coordinates_equal_expanded_ones(p):
    """One sort for rows sharing coordinates: same values and gradients as k sorts."""
    from tsw.core.tree_wasserstein import line_cost

    g = torch.Generator().manual_seed(int(10 * p))
    c = torch.randn(3, 1, 7, generator=g, dtype=F64, requires_grad=True)
    m = torch.randn(3, 4, 7, generator=g, dtype=F64, requires_grad=True)
    up = torch.randn(3, 4, generator=g, dtype=F64)
    shared = line_cost(c, m, p)
    expanded = line_cost(c.expand(3, 4, 7), m, p)
    torch.testing.assert_close(shared, expanded, rtol=1e-13, atol=1e-13)
    for u, v in zip(
        torch.autograd.grad(shared, (c, m), up),
        torch.autograd.grad(expanded, (c, m), up),
        strict=True,
    ):
        torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(lambda c, m: line_cost(c, m, p), (c, m))
    # rays (coordinates >= 0): every ray's cost is the independent Sobolev sum
    ca = c.detach().abs()
    for i in range(3):
        for line in range(4):
            expected = ref.star_sobolev(ca[i].numpy(), m[i, line : line + 1].detach().numpy(), p)
            assert_close(line_cost(ca, m, p)[i, line], expected)


# --------------------------------------------------------------------------- spatial: exactness


def np_pow(X, degree, beta):
    return X + beta * X**degree


def np_poly(X, degree):
    """Monomials x^alpha for every exponent vector |alpha| = degree (any fixed order)."""
    d = X.shape[-1]
    exps = [e for e in itertools.product(range(degree + 1), repeat=d) if sum(e) == degree]
    return np.stack([np.prod(X ** np.array(e), axis=-1) for e in exps], axis=-1), exps


def test_poly_map_is_the_set_of_monomials():
    rng = np.random.default_rng(0)
    for d, degree in ((1, 3), (2, 3), (3, 1), (3, 3), (4, 5)):
        X = rng.normal(size=(6, d))
        out = tsw.mappings.poly_map(t64(X), degree).numpy()
        expected, exps = np_poly(X, degree)
        assert out.shape == (6, math.comb(d + degree - 1, degree)) == expected.shape
        assert tsw.mappings.poly_dim(d, degree) == len(exps)
        # the same monomials, up to the order of the columns
        np.testing.assert_allclose(np.sort(out, axis=1), np.sort(expected, axis=1), rtol=1e-12)
    X = rng.normal(size=(4, 3))
    np.testing.assert_allclose(tsw.mappings.poly_map(t64(X), 1).numpy(), X)  # degree 1: identity
    np.testing.assert_allclose(tsw.mappings.pow_map(t64(X), 5, 0.5).numpy(), np_pow(X, 5, 0.5))


class _Graph(torch.nn.Module):
    """h(y) = (y, phi(y)): injective for any phi."""

    def __init__(self, d, width=5, seed=0):
        super().__init__()
        torch.manual_seed(seed)  # test-local parameters; the library never reads this RNG
        self.phi = torch.nn.Sequential(
            torch.nn.Linear(d, width), torch.nn.Tanh(), torch.nn.Linear(width, 2)
        ).double()

    def forward(self, Z):
        return torch.cat([Z, self.phi(Z)], dim=-1)


SPATIAL_CASES = [
    ("pow", 3, 1.0),
    ("pow", 5, 0.25),
    ("pow", 1, 0.0),
    ("poly", 3, None),
    ("poly", 1, None),
    ("graph", None, None),
]


@pytest.mark.parametrize(("mapping", "degree", "beta"), SPATIAL_CASES)
@pytest.mark.parametrize("batched", [False, True])
def test_spatial_equals_db_tsw_on_mapped_points(mapping, degree, beta, batched):
    rng = np.random.default_rng(3)
    d, lead = 3, ((2,) if batched else ())
    X = rng.normal(size=(*lead, 6, d))
    Y = rng.normal(size=(*lead, 4, d)) + 0.5
    a = rng.random(size=(*lead, 6)) + 0.1
    b = rng.random(size=(*lead, 4)) + 0.1
    a, b = a / a.sum(-1, keepdims=True), b / b.sum(-1, keepdims=True)
    if mapping == "pow":
        HX, HY, opts = np_pow(X, degree, beta), np_pow(Y, degree, beta), {"beta": beta}
        opts["degree"] = degree
    elif mapping == "poly":
        HX, HY, opts = np_poly(X, degree)[0], np_poly(Y, degree)[0], {"degree": degree}
    else:
        h = _Graph(d)
        with torch.no_grad():
            HX, HY = h(t64(X)).numpy(), h(t64(Y)).numpy()
        opts = {"mapping": h}
    opts = {"mapping": mapping, **opts} if mapping != "graph" else opts
    d_theta = HX.shape[-1]
    # the same explicit trees in d_theta; columns of "poly" in the library's order
    if mapping == "poly":
        HX = tsw.mappings.poly_map(t64(X), degree).numpy()
        HY = tsw.mappings.poly_map(t64(Y), degree).numpy()
    trees = tsw.sample_concurrent_lines(d_theta, n_trees=5, n_lines=3, std=0.7, seed=4, dtype=F64)
    for rand in ({"trees": trees}, {"seed": 8}):
        value = tsw.spatial_tsw(t64(X), t64(Y), t64(a), t64(b), delta=1.5, **opts, **rand)
        expected = tsw.db_tsw(t64(HX), t64(HY), t64(a), t64(b), delta=1.5, **rand)
        assert value.shape == lead
        assert_close(value, expected.numpy())
    # sampled roots are centred on the weighted mean of the mapped points
    w_mean = (a[..., None] * HX).sum(-2) + (b[..., None] * HY).sum(-2)
    centred = tsw.spatial_tsw(
        t64(X), t64(Y), t64(a), t64(b), delta=1.5, seed=8, center=t64(w_mean / 2), **opts
    )
    default = tsw.spatial_tsw(t64(X), t64(Y), t64(a), t64(b), delta=1.5, seed=8, **opts)
    assert_close(centred, default.detach().numpy())


def test_spatial_poly_order_does_not_matter_in_law():
    """Reordering the monomials is an orthogonal map of R^d_theta: explicit trees moved
    by it give the same value, so the library's column order is immaterial."""
    rng = np.random.default_rng(5)
    X, Y = rng.normal(size=(5, 2)), rng.normal(size=(7, 2))
    mine = tsw.mappings.poly_map(t64(X), 3).numpy()
    other, _ = np_poly(X, 3)
    perm = [int(np.argmin(np.abs(mine - other[:, [j]]).sum(0))) for j in range(other.shape[1])]
    np.testing.assert_allclose(mine[:, perm], other, rtol=1e-12)
    trees = tsw.sample_concurrent_lines(4, n_trees=4, n_lines=3, seed=0, dtype=F64)
    moved = ConcurrentLines(trees.roots[:, perm], trees.directions[..., perm])
    v = tsw.spatial_tsw(t64(X), t64(Y), mapping="poly", trees=trees)
    w = tsw.db_tsw(t64(other), t64(np_poly(Y, 3)[0]), trees=moved)
    assert_close(v, float(w))


# --------------------------------------------------------------------------- spatial: invariances


def _signed_permutation(d, seed):
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(d, generator=g)
    signs = torch.where(torch.rand(d, generator=g) < 0.5, -1.0, 1.0).to(F64)
    signs[0] = -1.0  # at least one flip
    return torch.eye(d, dtype=F64)[perm] * signs[:, None]  # y -> S y


def _induced_on_monomials(S, degree):
    """The signed permutation S' of R^d_theta with poly(S y) = S' poly(y)."""
    d = S.shape[0]
    combos = list(itertools.combinations_with_replacement(range(d), degree))
    index = {c: i for i, c in enumerate(combos)}
    src = S.abs().argmax(1)  # (S y)_i = sign_i y_src[i]
    sign = S[torch.arange(d), src]
    out = torch.zeros(len(combos), len(combos), dtype=F64)
    for i, c in enumerate(combos):
        out[i, index[tuple(sorted(int(src[j]) for j in c))]] = math.prod(float(sign[j]) for j in c)
    return out


@pytest.mark.parametrize("mapping", ["pow", "poly"])
@pytest.mark.parametrize("seed", [0, 1])
def test_spatial_signed_permutation_invariance(mapping, seed):
    """h(S y) = S' h(y) for signed permutations S: value unchanged with trees moved by S'.

    Rotations do not commute with the maps: moving data and trees by a generic rotation
    changes the value (SpatialTSW is not rigid-motion invariant).
    """
    g = torch.Generator().manual_seed(seed)
    X, Y = torch.randn(6, 3, generator=g, dtype=F64), torch.randn(5, 3, generator=g, dtype=F64)
    S = _signed_permutation(3, seed)
    Sh = S if mapping == "pow" else _induced_on_monomials(S, 3)
    torch.testing.assert_close(
        tsw.mappings.poly_map(X @ S.T, 3) if mapping == "poly" else tsw.mappings.pow_map(X @ S.T),
        (tsw.mappings.poly_map(X, 3) if mapping == "poly" else tsw.mappings.pow_map(X)) @ Sh.T,
    )
    d_theta = Sh.shape[0]
    trees = tsw.sample_concurrent_lines(
        d_theta, n_trees=6, n_lines=3, std=0.5, seed=seed, dtype=F64
    )
    moved = ConcurrentLines(trees.roots @ Sh.T, trees.directions @ Sh.T)
    base = tsw.spatial_tsw(X, Y, mapping=mapping, trees=trees)
    assert_close(tsw.spatial_tsw(X @ S.T, Y @ S.T, mapping=mapping, trees=moved), float(base))
    if mapping == "pow":
        q, _ = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=F64))
        rotated = ConcurrentLines(trees.roots @ q.T, trees.directions @ q.T)
        other = tsw.spatial_tsw(X @ q.T, Y @ q.T, mapping=mapping, trees=rotated)
        assert abs(float(other) - float(base)) > 1e-6


# --------------------------------------------------------------------------- learnable mapping


def test_learnable_mapping_receives_gradients_and_trains():
    h = _Graph(2, seed=1)
    loss = tsw.nn.SpatialTSWLoss(mapping=h, n_trees=20, n_lines=3, seed=0, resample=False)
    assert loss.mapping is h
    params = list(loss.parameters())
    assert len(params) == 4
    assert all(p1 is p2 for p1, p2 in zip(params, h.parameters(), strict=True))
    # the mapping's parameters, and the loss's random stream (resumed on loading)
    assert set(loss.state_dict()) == {f"mapping.{k}" for k in h.state_dict()} | {"_extra_state"}
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(30, 2, generator=g, dtype=F64), torch.randn(25, 2, generator=g, dtype=F64)
    value = loss(X, Y + 1)
    value.backward()
    for prm in h.parameters():
        assert prm.grad is not None
        assert bool(torch.isfinite(prm.grad).all())
    assert float(h.phi[0].weight.grad.abs().sum()) > 0
    # ascent on the map (the max-projection use): a few steps increase the distance
    opt = torch.optim.SGD(h.parameters(), lr=0.5)
    before = float(value.detach())
    for _ in range(5):
        opt.zero_grad()
        (-loss(X, Y + 1)).backward()
        opt.step()
    assert float(loss(X, Y + 1).detach()) > before
    # the function with the same map and draw gives the same value
    same = tsw.spatial_tsw(X, Y + 1, mapping=h, n_trees=20, n_lines=3, seed=loss._fixed_seed)
    assert torch.equal(loss(X, Y + 1), same)


def test_spatial_loss_with_a_builtin_or_function_registers_nothing():
    assert list(tsw.nn.SpatialTSWLoss(mapping="poly").parameters()) == []
    loss = tsw.nn.SpatialTSWLoss(mapping=lambda Z: Z**3 + Z)
    assert list(loss.parameters()) == []
    assert "mapping" not in dict(loss.named_children())
