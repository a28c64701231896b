"""``tsw.sphere._geometry``: STSW's coordinates and split on spherical trees.

The written-out split on S^2 (``_AngularSplitMasses``) against the spec's formula written
from scratch with arccos and autograd, batched and shared trees, and gradcheck; the
planar path of S^2 against the general formulas (S^2 embedded in R^4).
"""

from __future__ import annotations

import numpy as np
import torch

import tsw
from tsw import SphericalTrees
from tsw.core.splits import _AngularSplitMasses

F64 = torch.float64


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


def test_planar_and_general_paths_agree():
    """S^2 embedded in R^4 (last coordinate 0) goes through the general formulas."""
    rng = np.random.default_rng(3)
    X, Y, a, b = random_case(rng, 3, 9, 6)
    trees = tsw.sample_spherical_trees(3, n_trees=20, n_lines=4, seed=2, dtype=F64)
    pad = torch.nn.functional.pad
    trees4 = SphericalTrees(pad(trees.roots, (0, 1)), pad(trees.directions, (0, 1)))
    Xt, Yt, at, bt = as_torch(X, Y, a, b)
    Xt.requires_grad_()
    X4 = pad(Xt, (0, 1))
    v3 = tsw.stsw(Xt, Yt, at, bt, trees=trees)
    v4 = tsw.stsw(X4, pad(Yt, (0, 1)), at, bt, trees=trees4)
    torch.testing.assert_close(v3, v4, rtol=1e-12, atol=1e-14)
    g3 = torch.autograd.grad(v3, Xt)[0]
    g4 = torch.autograd.grad(v4, Xt)[0]
    torch.testing.assert_close(g3, g4, rtol=1e-9, atol=1e-12)


def test_written_out_split_on_s2_equals_autograd():
    """On S^2 the split is one written-out function (_AngularSplitMasses). Its coordinates,
    masses and gradients (points, weights) equal the spec's formula written here
    from scratch with arccos and autograd: t = arccos<x, z>, u the unit tangent of z at x,
    phi_i = arccos<u, v_i>, masses softmax_i(-delta sin(t) phi_i) w; batched and shared
    trees; and it passes gradcheck."""
    from tsw.sphere import _geometry as geo

    def spec(Z, w, roots, dirs):  # Z (B, n, 3), roots (B|1, T, 3), dirs (B|1, T, k, 3)
        roots = roots if roots.dim() == 3 else roots[None]
        dirs = dirs if dirs.dim() == 4 else dirs[None]
        Z = Z / torch.linalg.vector_norm(Z, dim=-1, keepdim=True)  # only directions matter
        c = torch.einsum("btd,bnd->btn", roots, Z)  # (B, T, n)
        u = Z[:, None] - c[..., None] * roots[:, :, None]  # (B, T, n, 3)
        u = u / torch.linalg.vector_norm(u, dim=-1, keepdim=True)
        phi = torch.arccos(torch.einsum("btkd,btnd->btkn", dirs, u).clamp(-1, 1))
        t = torch.arccos(c.clamp(-1, 1))
        return t, torch.softmax(-1.7 * torch.sin(t)[:, :, None] * phi, dim=-2) * w[:, None, None]

    g = torch.Generator().manual_seed(4)
    for B, batched_trees in ((1, False), (3, False), (3, True)):
        Z = torch.nn.functional.normalize(torch.randn(B, 9, 3, generator=g, dtype=F64), dim=-1)
        w = torch.randn(B, 9, generator=g, dtype=F64)
        trees = tsw.sample_spherical_trees(3, n_trees=4, n_lines=5, seed=B, dtype=F64)
        if batched_trees:  # one tree system per item
            draws = [
                tsw.sample_spherical_trees(3, n_trees=4, n_lines=5, seed=s, dtype=F64)
                for s in range(B)
            ]
            trees = tsw.SphericalTrees(
                torch.stack([t.roots for t in draws]), torch.stack([t.directions for t in draws])
            )
        roots = trees.roots.clone().requires_grad_()
        dirs = trees.directions.clone().requires_grad_()
        Zg, wg = Z.clone().requires_grad_(), w.clone().requires_grad_()

        def both(Zg=Zg, wg=wg, roots=roots, dirs=dirs):
            t_rees = tsw.SphericalTrees(roots, dirs, validate=False)
            t1, m1 = geo.spherical_split(Zg, wg, t_rees, 1.7)
            return t1, m1, *spec(Zg, wg, roots, dirs)

        t1, m1, t2, m2 = both()
        torch.testing.assert_close(t1, t2, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(m1, m2, rtol=1e-11, atol=1e-12)
        weight = torch.randn(m1.shape, generator=g, dtype=F64)
        # trees: the two formulas differ off the unit/tangent constraints, so only the
        # points and weights are compared here; gradcheck below covers the rays' angles
        inputs = (Zg, wg)
        g1 = torch.autograd.grad((m1 * weight).sum(), inputs)
        g2 = torch.autograd.grad((m2 * weight).sum(), inputs)
        for a, b in zip(g1, g2, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    polar = (torch.rand(2, 3, 6, generator=g, dtype=F64) * 2 - 1) * 3.0
    theta = (torch.rand(1, 3, 4, generator=g, dtype=F64) * 2 - 1) * 3.0
    scale = torch.rand(2, 3, 6, generator=g, dtype=F64) + 0.1
    w = torch.randn(2, 6, generator=g, dtype=F64)
    args = [x.clone().requires_grad_() for x in (polar, theta, scale, w)]
    assert torch.autograd.gradcheck(lambda *xs: _AngularSplitMasses.apply(*xs, 0.8), args)
