"""orthogonal=True: orthonormal directions in the samplers and in the distances using them.

The samplers are checked directly (D D^T = I inside every tree, P_j^T P_j = I inside
every block of d projections), against a non-vacuous control (the i.i.d. draw is not
orthonormal). Each distance called with ``orthogonal=True, seed=s`` must equal the same
distance on explicit directions drawn by the public sampler from the same seed (verified
orthonormal here) and differ from ``orthogonal=False``: a distance that ignores the flag,
or a sampler that ignores it, fails.
"""

from __future__ import annotations

import pytest
import torch
from conftest import assert_close

import tsw

F64 = torch.float64


def gram_defect(D):
    """max |D D^T - I| over the trailing (k, d) matrices of D (rows are directions)."""
    eye = torch.eye(D.shape[-2], dtype=D.dtype)
    return float((D @ D.transpose(-1, -2) - eye).abs().max())


def data(d, seed=0, batch=None):
    g = torch.Generator().manual_seed(seed)
    lead = () if batch is None else (batch,)
    X = torch.randn(*lead, 9, d, generator=g, dtype=F64)
    Y = 0.7 * torch.randn(*lead, 6, d, generator=g, dtype=F64) + 0.5
    return X, Y


@pytest.mark.parametrize(("T", "k", "d"), [(6, 3, 3), (5, 2, 7), (4, 4, 16), (3, 1, 2)])
def test_concurrent_lines_sampler_orthonormal_frames(T, k, d):
    trees = tsw.sample_concurrent_lines(d, n_trees=T, n_lines=k, orthogonal=True, seed=3, dtype=F64)
    assert trees.directions.shape == (T, k, d)
    assert gram_defect(trees.directions) < 1e-12
    # batched centre: batched roots, the same orthonormal frames
    center = torch.zeros(2, d, dtype=F64)
    batched = tsw.sample_concurrent_lines(
        d, n_trees=T, n_lines=k, center=center, orthogonal=True, seed=3
    )
    assert gram_defect(batched.directions) < 1e-12
    # float32 too
    t32 = tsw.sample_concurrent_lines(
        d, n_trees=T, n_lines=k, orthogonal=True, seed=3, dtype=torch.float32
    )
    assert gram_defect(t32.directions.double()) < 1e-5
    if k > 1:  # control: i.i.d. directions are not orthonormal
        iid = tsw.sample_concurrent_lines(
            d, n_trees=T, n_lines=k, orthogonal=False, seed=3, dtype=F64
        )
        assert gram_defect(iid.directions) > 1e-3


@pytest.mark.parametrize(("d", "L"), [(3, 12), (3, 10), (5, 5), (16, 20), (4, 2)])
def test_projection_sampler_orthonormal_blocks(d, L):
    """Blocks of d consecutive columns (the last one possibly shorter) are orthonormal."""
    P = tsw.sample_projections(d, L, orthogonal=True, seed=4, dtype=F64)
    assert P.shape == (d, L)
    for j in range(0, L, d):
        block = P[:, j : j + d].T  # rows: the block's directions
        assert gram_defect(block) < 1e-12, j
    iid = tsw.sample_projections(d, L, orthogonal=False, seed=4, dtype=F64)
    assert gram_defect(iid[:, :d].T) > 1e-3


def _trees(T, k, d, center, seed):
    trees = tsw.sample_concurrent_lines(
        d, n_trees=T, n_lines=k, center=center, std=0.1, orthogonal=True, seed=seed, dtype=F64
    )
    assert gram_defect(trees.directions) < 1e-12
    return trees


TREE_DISTANCES = {
    "db_tsw": lambda *args, **kw: tsw.db_tsw(*args, **kw),
    "partial_tsw": lambda *args, **kw: tsw.partial_tsw(*args, mass_t=0.7, **kw),
    "spatial_tsw[pow]": lambda *args, **kw: tsw.spatial_tsw(*args, mapping="pow", **kw),
    "DbTSWLoss": lambda X, Y, **kw: tsw.nn.DbTSWLoss(**kw, resample=True)(X, Y),
    "SpatialTSWLoss": lambda X, Y, **kw: tsw.nn.SpatialTSWLoss(**kw, resample=True)(X, Y),
}


@pytest.mark.parametrize("name", list(TREE_DISTANCES))
@pytest.mark.parametrize(("k", "d"), [(3, 3), (2, 5)])
def test_tree_distances_use_orthonormal_directions(name, k, d):
    """orthogonal=True with a seed equals the explicit orthonormal trees of that seed.

    ``mapping="pow"`` keeps d_theta = d, so the same centre and trees apply to
    SpatialTSW. A module with ``resample=True`` and ``seed=s`` draws its first trees from
    ``Generator().manual_seed(s)``, which is what ``seed=s`` means for the sampler.
    """
    f = TREE_DISTANCES[name]
    X, Y = data(d, seed=k)
    T, seed = 7, 11
    center = torch.full((d,), 0.2, dtype=F64)
    kw = {"n_trees": T, "n_lines": k, "center": center, "seed": seed}
    value = f(X, Y, orthogonal=True, **kw)
    trees = _trees(T, k, d, center, seed)
    if name.endswith("Loss"):  # modules take no trees: compare with the function
        fn = tsw.db_tsw if name == "DbTSWLoss" else tsw.spatial_tsw
        expected = fn(X, Y, trees=trees)
    else:
        expected = f(X, Y, trees=trees)
    assert_close(value, expected)
    assert not torch.allclose(value, f(X, Y, orthogonal=False, **kw), rtol=1e-6)


SLICED = {
    "sw": lambda *args, **kw: tsw.sw(*args, **kw),
    "partial_sw": lambda *args, **kw: tsw.partial_sw(*args, n_transported=5, **kw),
    "unbalanced_sw": lambda *args, **kw: tsw.unbalanced_sw(*args, reg_m=0.5, mass_t=1.2, **kw),
}


@pytest.mark.parametrize("name", list(SLICED))
@pytest.mark.parametrize(("d", "L"), [(3, 9), (5, 7)])
def test_sliced_distances_use_orthonormal_projections(name, d, L):
    f = SLICED[name]
    X, Y = data(d, seed=L)
    value = f(X, Y, n_projections=L, orthogonal=True, seed=5)
    P = tsw.sample_projections(d, L, orthogonal=True, seed=5, dtype=F64)
    for j in range(0, L, d):
        assert gram_defect(P[:, j : j + d].T) < 1e-12
    assert_close(value, f(X, Y, projections=P))
    assert not torch.allclose(value, f(X, Y, n_projections=L, orthogonal=False, seed=5))


def test_sw_loss_uses_orthonormal_projections():
    X, Y = data(4, seed=1)
    loss = tsw.nn.SWLoss(n_projections=8, orthogonal=True, seed=2, resample=True)
    P = tsw.sample_projections(4, 8, orthogonal=True, seed=2, dtype=F64)
    assert_close(loss(X, Y), tsw.sw(X, Y, projections=P))
