"""SpatialSTSW (``tsw.sphere._spatial_stsw``): STSW after an injective map (spec 4.4)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import tsw
from tsw.sphere import sphere_lift

F64 = torch.float64


def unit(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(*shape, generator=g, dtype=F64), dim=-1)


def lift_numpy(y, eps=1e-6):
    """The map of spec 4.4 written independently."""
    y = np.asarray(y, dtype=np.float64)
    phi = np.pi * (y.mean(-1, keepdims=True) + 1 + eps) / (2 + 2 * eps)
    return np.concatenate([np.cos(phi), np.sin(phi) * y], axis=-1)


@pytest.mark.parametrize("dim", [3, 4, 6])
def test_lift_is_an_injective_map_into_the_next_sphere(dim):
    y = unit(50, dim)
    z = sphere_lift(y)
    assert z.shape == (50, dim + 1)
    torch.testing.assert_close(z.norm(dim=-1), torch.ones(50, dtype=F64), rtol=0, atol=1e-14)
    np.testing.assert_allclose(z.numpy(), lift_numpy(y.numpy()), rtol=0, atol=1e-15)
    # inverse: y = z[1:] / sin(phi), with sin(phi) = |z[1:]| > 0
    back = z[:, 1:] / z[:, 1:].norm(dim=-1, keepdim=True)
    torch.testing.assert_close(back, y, rtol=0, atol=1e-14)
    assert bool((z[:, 1:].norm(dim=-1) > math.sin(math.pi / 2 * (1 - 1 / math.sqrt(dim)))).all())


@pytest.mark.parametrize("p", [1, 2])
def test_equals_stsw_on_independently_mapped_points_with_the_same_trees(p):
    X, Y = unit(17, 3, seed=1), unit(11, 3, seed=2)
    a = torch.rand(17, dtype=F64, generator=torch.Generator().manual_seed(3))
    a = a / a.sum()
    trees = tsw.sample_spherical_trees(4, n_trees=7, n_lines=4, seed=0, dtype=F64)
    hX = torch.from_numpy(lift_numpy(X.numpy()))
    hY = torch.from_numpy(lift_numpy(Y.numpy()))
    expected = tsw.stsw(hX, hY, a, None, trees=trees, p=p)
    got = tsw.spatial_stsw(X, Y, a, None, trees=trees, p=p)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-14)


def test_seed_batching_module_and_callable_mapping():
    X, Y = unit(3, 9, 3, seed=4), unit(3, 8, 3, seed=5)
    batched = tsw.spatial_stsw(X, Y, n_trees=20, seed=1)
    looped = torch.stack([tsw.spatial_stsw(X[i], Y[i], n_trees=20, seed=1) for i in range(3)])
    torch.testing.assert_close(batched, looped)
    loss = tsw.nn.SpatialSTSWLoss(n_trees=20, seed=1, resample=False, reduction="none")
    torch.testing.assert_close(
        loss(X, Y), tsw.spatial_stsw(X, Y, n_trees=20, seed=loss._fixed_seed)
    )
    # the identity map gives plain STSW
    torch.testing.assert_close(
        tsw.spatial_stsw(X, Y, mapping=lambda t: t, n_trees=20, seed=2),
        tsw.stsw(X, Y, n_trees=20, seed=2),
    )


def test_gradients_are_finite_and_nonzero():
    X = unit(12, 3, seed=6).requires_grad_(True)
    tsw.spatial_stsw(X, unit(10, 3, seed=7), n_trees=10, seed=0).backward()
    assert torch.isfinite(X.grad).all()
    assert X.grad.abs().sum() > 0


def test_bad_inputs():
    X, Y = unit(5, 3), unit(4, 3, seed=1)
    with pytest.raises(ValueError, match="mapping must be 'lift' or a callable; got 'pow'"):
        tsw.spatial_stsw(X, Y, mapping="pow")
    with pytest.raises(TypeError, match="mapping must be 'lift' or a callable; got int"):
        tsw.spatial_stsw(X, Y, mapping=3)
    with pytest.raises(ValueError, match="X_s"):
        tsw.spatial_stsw(2 * X, Y)
    # a map that leaves the sphere is caught by STSW's check on its output
    with pytest.raises(ValueError, match="X_s"):
        tsw.spatial_stsw(X, Y, mapping=lambda t: 2 * t)
    # renormalize projects the inputs first
    torch.testing.assert_close(
        tsw.spatial_stsw(2 * X, Y, renormalize=True, n_trees=5, seed=0),
        tsw.spatial_stsw(X, Y, n_trees=5, seed=0),
    )
