"""CircularTSW (``tsw.euclidean._circular_tsw``): exact values, the compat form, numerics.

Per-tree values (r > 0 and r = 0, both splits) are exact LPs (``ot.emd2``) on the
explicit metric of the star of rays, written from its definition in
``_reference.ray_star_metric``, with the ray coordinates and the splits recomputed in
numpy; the compat option against the published formula. Then the one sort per tree of
r = 0, the two numerical paths (explicit residuals and the expanded-square identity),
degenerate points, float32, the scaling of radius and delta, and the checks of
``radius``, ``split`` and ``compat``.
"""

from __future__ import annotations

import math

import _reference as ref
import numpy as np
import pytest
import torch
from _reference import assert_close, data, lit, t64, unit_rows, weights
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

    The sorts are counted because "one sort per tree" at r = 0 is the documented cost of
    ``circular_tsw`` (its docstring), a performance property no value can show.

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


# --------------------------------------------------------------------------- checks of the options


@pytest.mark.parametrize("radius", [-1.0, -1e-12, math.inf, math.nan])
def test_radius_out_of_range(radius):
    X, Y = data()
    msg = lit("radius must be a finite real number >= 0; got")
    with pytest.raises(ValueError, match=msg):
        tsw.circular_tsw(X, Y, radius=radius)
    with pytest.raises(ValueError, match=msg):
        tsw.nn.CircularTSWLoss(radius=radius)(X, Y)


@pytest.mark.parametrize("radius", ["1", None, True, torch.tensor(1.0)])
def test_radius_not_a_number(radius):
    X, Y = data()
    with pytest.raises(TypeError, match=lit("radius must be a real number >= 0; got")):
        tsw.circular_tsw(X, Y, radius=radius)


def test_radius_is_required():
    X, Y = data()
    with pytest.raises(TypeError, match="radius"):
        tsw.circular_tsw(X, Y)
    with pytest.raises(TypeError, match="radius"):
        tsw.nn.CircularTSWLoss()


@pytest.mark.parametrize("split", ["distance", "Image", None, ""])
def test_bad_circular_split(split):
    X, Y = data()
    with pytest.raises(
        ValueError, match=lit(f"split must be one of 'image', 'line'; got {split!r}")
    ):
        tsw.circular_tsw(X, Y, radius=0.0, split=split)


@pytest.mark.parametrize("compat", [1, "yes", None])
def test_circular_compat_must_be_bool(compat):
    X, Y = data()
    with pytest.raises(TypeError, match=lit("compat must be True or False; got")):
        tsw.circular_tsw(X, Y, radius=0.0, compat=compat)


def test_circular_delta_and_trees():
    X, Y = data()
    with pytest.raises(ValueError, match=lit("delta must be a finite real number >= 0; got -1")):
        tsw.circular_tsw(X, Y, radius=0.0, delta=-1.0)
    with pytest.raises(TypeError, match=lit("trees must be ConcurrentLines; got ChainLines")):
        tsw.circular_tsw(
            X,
            Y,
            radius=0.0,
            trees=tsw.sample_chain_lines(3, n_trees=3, n_lines=2, seed=0, dtype=F64),
        )
    with pytest.raises(ValueError, match=lit("trees must live in the dimension of the data, d=3")):
        tsw.circular_tsw(
            X,
            Y,
            radius=0.0,
            trees=tsw.sample_concurrent_lines(2, n_trees=3, n_lines=2, seed=0, dtype=F64),
        )
