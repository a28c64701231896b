"""``tsw.core.trees``: the tree containers and the samplers of trees and projections.

The containers' checks (shapes, types, unit and tangent directions, chains attached to
the previous line), the samplers' arguments and laws, and ``orthogonal=True``:
orthonormal directions in the samplers (D D^T = I inside every tree, P_j^T P_j = I
inside every block of d projections, against a non-vacuous i.i.d. control) and in the
distances that draw with them: each distance called with ``orthogonal=True, seed=s``
equals the same distance on the explicit directions the public sampler draws from that
seed, and differs from ``orthogonal=False``.
"""

from __future__ import annotations

import math

import pytest
import torch
from _reference import lit
from conftest import assert_close

import tsw
from tsw import ChainLines, ConcurrentLines, SphericalTrees

F64 = torch.float64


def data(d, seed=0, batch=None):
    g = torch.Generator().manual_seed(seed)
    lead = () if batch is None else (batch,)
    X = torch.randn(*lead, 9, d, generator=g, dtype=F64)
    Y = 0.7 * torch.randn(*lead, 6, d, generator=g, dtype=F64) + 0.5
    return X, Y


def concurrent(T=3, k=2, d=3, dtype=F64):
    return tsw.sample_concurrent_lines(d, n_trees=T, n_lines=k, seed=0, dtype=dtype)


def chain(T=3, k=2, d=3, dtype=F64):
    return tsw.sample_chain_lines(d, n_trees=T, n_lines=k, seed=0, dtype=dtype)


# --------------------------------------------------------------------------- containers


def test_tree_container_shapes():
    dirs = concurrent().directions  # (3, 2, 3)
    with pytest.raises(
        ValueError, match=lit("roots must have shape (T, d) or (B, T, d) matching directions")
    ):
        ConcurrentLines(torch.zeros(4, 3, dtype=F64), dirs)
    with pytest.raises(
        ValueError, match=lit("roots must have shape (T, d) or (B, T, d) matching directions")
    ):
        ConcurrentLines(torch.zeros(3, 2, dtype=F64), dirs)
    with pytest.raises(
        ValueError, match=lit("directions must have shape (T, k, d) or (B, T, k, d)")
    ):
        ConcurrentLines(torch.zeros(3, 3, dtype=F64), dirs[:, 0])
    with pytest.raises(ValueError, match=lit("sources must have the shape of directions")):
        ChainLines(torch.zeros(3, 3, 3, dtype=F64), dirs)
    batched = torch.stack([dirs, dirs])  # (2, 3, 2, 3)
    with pytest.raises(ValueError, match=lit("matching directions")):
        ConcurrentLines(torch.zeros(5, 3, 3, dtype=F64), batched)


def test_tree_container_types():
    dirs = concurrent().directions
    with pytest.raises(TypeError, match=lit("roots must be a torch.Tensor; got list")):
        ConcurrentLines([[0.0] * 3] * 3, dirs)
    # numpy arrays are taken as tensors (numpy calls report their trees as arrays)
    assert torch.equal(ConcurrentLines(torch.zeros(3, 3, dtype=F64), dirs.numpy()).directions, dirs)
    with pytest.raises(ValueError, match=lit("roots and directions must share dtype and device")):
        ConcurrentLines(torch.zeros(3, 3), dirs)
    with pytest.raises(
        TypeError, match=lit("sources must have dtype torch.float32 or torch.float64")
    ):
        ChainLines(torch.zeros(3, 2, 3, dtype=torch.int64), dirs)


def test_tree_container_nonfinite():
    dirs = concurrent().directions
    roots = torch.zeros(3, 3, dtype=F64)
    roots[1, 2] = math.nan
    with pytest.raises(ValueError, match=lit("roots contains NaN or Inf values")):
        ConcurrentLines(roots, dirs)
    src = torch.zeros(3, 2, 3, dtype=F64)
    src[0, 0, 0] = math.inf
    with pytest.raises(ValueError, match=lit("sources contains NaN or Inf values")):
        ChainLines(src, dirs)


def test_non_unit_directions():
    dirs = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]]], dtype=F64)
    with pytest.raises(
        ValueError,
        match=lit(
            "directions must have unit-norm rows (last dimension) (norm 1 up to 1.0e-06 in "
            "torch.float64); got one of norm 2"
        ),
    ):
        ConcurrentLines(torch.zeros(1, 3, dtype=F64), dirs)
    # one tolerance for every direction check: a float32-normalised direction passes in
    # float64, as explicit projections do, and an error of 1e-5 does not
    f32 = torch.nn.functional.normalize(torch.tensor([[[0.3, 0.7, 0.1]]]), dim=-1).double()
    ConcurrentLines(torch.zeros(1, 3, dtype=F64), f32)
    with pytest.raises(ValueError, match=lit("directions must have unit-norm rows")):
        ConcurrentLines(torch.zeros(1, 3, dtype=F64), f32 * (1 + 1e-5))
    with pytest.raises(ValueError, match=lit("directions must have unit-norm rows")):
        ChainLines(torch.zeros(1, 2, 3, dtype=F64), dirs)
    zero = torch.zeros(1, 1, 3, dtype=F64)
    with pytest.raises(ValueError, match=lit("directions must have unit-norm rows")):
        ConcurrentLines(torch.zeros(1, 3, dtype=F64), zero)


def test_chain_source_off_previous_line():
    dirs = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], dtype=F64)
    on = torch.tensor([[[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]]], dtype=F64)
    assert ChainLines(on, dirs).attachments.tolist() == [[0.0, 2.0]]
    off = torch.tensor([[[0.0, 0.0, 0.0], [2.0, 0.1, 0.0]]], dtype=F64)
    with pytest.raises(ValueError, match=lit("sources[..., i, :] must lie on line i-1")):
        ChainLines(off, dirs)
    with pytest.raises(
        ValueError, match=lit("got a source at distance 0.1 from the previous line")
    ):
        ChainLines(off, dirs)


@pytest.mark.parametrize(
    "make",
    [
        lambda: ConcurrentLines(torch.zeros(0, 3), torch.zeros(0, 2, 3)),
        lambda: ConcurrentLines(torch.zeros(2, 3), torch.zeros(2, 0, 3)),
        lambda: ChainLines(torch.zeros(0, 2, 3), torch.zeros(0, 2, 3)),
        lambda: tsw.SphericalTrees(torch.zeros(0, 3), torch.zeros(0, 2, 3)),
    ],
)
def test_empty_tree_containers_raise(make):
    with pytest.raises(ValueError, match=lit("with T, k, d >= 1")):
        make()


def test_spherical_tree_container():
    e = torch.eye(3, dtype=F64)
    roots, dirs = e[2:3], e[None, :2]
    assert tsw.SphericalTrees(roots, dirs).n_lines == 2
    with pytest.raises(ValueError, match=lit("roots must have unit-norm rows")):
        tsw.SphericalTrees(2 * roots, dirs)
    with pytest.raises(ValueError, match=lit("directions must have unit-norm rows")):
        tsw.SphericalTrees(roots, 2 * dirs)
    with pytest.raises(
        ValueError, match=lit("directions must be tangent at their root (orthogonal to roots)")
    ):
        tsw.SphericalTrees(e[:1], dirs)
    with pytest.raises(ValueError, match=lit("roots must have shape (T, d+1) or (B, T, d+1)")):
        tsw.SphericalTrees(e[:2], dirs)
    with pytest.raises(ValueError, match=lit("spherical trees need an ambient dimension d+1 >= 2")):
        tsw.SphericalTrees(torch.ones(1, 1, dtype=F64), torch.ones(1, 1, 1, dtype=F64))
    with pytest.raises(TypeError, match=lit("roots must be a torch.Tensor; got list")):
        tsw.SphericalTrees([[0.0, 0.0, 1.0]], dirs)
    with pytest.raises(ValueError, match=lit("roots contains NaN or Inf")):
        tsw.SphericalTrees(roots * math.nan, dirs)
    # validate=False skips the value checks only
    tsw.SphericalTrees(e[:1], 2 * dirs, validate=False)
    with pytest.raises(ValueError, match=lit("roots must have shape")):
        tsw.SphericalTrees(e[:2], dirs, validate=False)


# --------------------------------------------------------------------------- samplers


def test_samplers_take_the_dimension_first_and_counts_by_name():
    # a call in (n_trees, n_lines, dim) order fails loudly, not reinterpreted
    for sampler in (
        tsw.sample_concurrent_lines,
        tsw.sample_chain_lines,
        tsw.sample_spherical_trees,
    ):
        with pytest.raises(TypeError, match="positional argument"):
            sampler(250, 4, 64)
    trees = tsw.sample_concurrent_lines(5, n_trees=3, n_lines=2, seed=0)
    assert (trees.n_trees, trees.n_lines, trees.dim) == (3, 2, 5)
    assert tsw.sample_projections(5, 7, seed=0).shape == (5, 7)


def test_sampler_counts():
    with pytest.raises(ValueError, match=lit("n_trees must be an int >= 1; got 0")):
        tsw.sample_concurrent_lines(3, n_trees=0, n_lines=2)
    with pytest.raises(ValueError, match=lit("n_lines must be an int >= 1; got 0")):
        tsw.sample_chain_lines(3, n_trees=2, n_lines=0)
    with pytest.raises(TypeError, match=lit("dim must be an int >= 1; got float")):
        tsw.sample_concurrent_lines(3.0, n_trees=2, n_lines=2)
    with pytest.raises(ValueError, match=lit("n_projections must be an int >= 1; got 0")):
        tsw.sample_projections(3, 0)


def test_spherical_sampler_arguments():
    with pytest.raises(ValueError, match=lit("spherical trees need dim = d+1 >= 2; got dim=1")):
        tsw.sample_spherical_trees(1, n_trees=2, n_lines=2)
    with pytest.raises(ValueError, match=lit("n_trees must be an int >= 1; got 0")):
        tsw.sample_spherical_trees(3, n_trees=0, n_lines=2)
    with pytest.raises(ValueError, match=lit("great circles need dim = d+1 >= 2; got dim=1")):
        tsw.sample_sphere_projections(1, 4)
    with pytest.raises(ValueError, match=lit("pass at most one of seed and generator")):
        tsw.sample_spherical_trees(3, n_trees=2, n_lines=2, seed=0, generator=torch.Generator())


def test_spherical_sampler_law_and_seeding(device):
    trees = tsw.sample_spherical_trees(5, n_trees=500, n_lines=4, seed=3, dtype=F64, device=device)
    assert trees.roots.shape == (500, 5)
    assert trees.directions.shape == (500, 4, 5)
    assert trees.roots.device == device
    torch.testing.assert_close(trees.roots.norm(dim=-1), torch.ones(500, dtype=F64, device=device))
    torch.testing.assert_close(
        trees.directions.norm(dim=-1), torch.ones(500, 4, dtype=F64, device=device)
    )
    cos = (trees.directions * trees.roots.unsqueeze(-2)).sum(-1)
    assert float(cos.abs().max()) < 1e-14
    # uniform roots: mean near 0, second moment near I / D
    assert float(trees.roots.mean(0).abs().max()) < 0.15
    # the same seed gives the same trees in float32 and float64, on every device
    t32 = tsw.sample_spherical_trees(5, n_trees=500, n_lines=4, seed=3, dtype=torch.float32)
    torch.testing.assert_close(t32.roots.double(), trees.roots.cpu(), rtol=0, atol=1e-7)
    g = torch.Generator().manual_seed(3)
    tg = tsw.sample_spherical_trees(5, n_trees=500, n_lines=4, generator=g, dtype=F64)
    assert torch.equal(tg.directions, trees.directions.cpu())
    # float32 trees pass their own validation
    SphericalTrees(t32.roots, t32.directions)


# --------------------------------------------------------------------------- orthogonal=True


def gram_defect(D):
    """max |D D^T - I| over the trailing (k, d) matrices of D (rows are directions)."""
    eye = torch.eye(D.shape[-2], dtype=D.dtype)
    return float((D @ D.transpose(-1, -2) - eye).abs().max())


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
