"""``tsw.euclidean._lines``: the geometry of lines that the Euclidean methods share.

Point-to-line, point-to-point and radial distances against residuals formed from
scratch; the squared norms and coordinates of points translated on the fly by the
trees' mean root (``centered``), against the points translated by hand; gradients in
the trees (roots, sources, directions) through that translation; an empty batch.
"""

from __future__ import annotations

import pytest
import torch
from _reference import assert_close

import tsw
import tsw.euclidean._lines as engine
from tsw import ConcurrentLines

F64 = torch.float64


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


@pytest.mark.parametrize(("points_batch", "shift_batch"), [(1, 1), (3, 1), (3, 3), (1, 3)])
def test_squared_norm_with_shift(monkeypatch, points_batch, shift_batch):
    """``_SquaredNorm(Y, shift)`` = ``|Y - shift|^2``, in chunks of 3 atoms, with gradcheck."""
    from tsw.core import _gradients
    from tsw.euclidean._lines import _SquaredNorm

    monkeypatch.setattr(_gradients, "_chunks", lambda m, d: range(0, m, 3))
    g = torch.Generator().manual_seed(points_batch * 10 + shift_batch)
    Y = torch.randn(points_batch, 8, 5, generator=g, dtype=F64, requires_grad=True)
    shift = 20.0 + torch.randn(shift_batch, 1, 5, generator=g, dtype=F64)
    got = _SquaredNorm.apply(Y, shift)
    torch.testing.assert_close(got, ((Y - shift) ** 2).sum(-1), rtol=1e-13, atol=1e-10)
    assert torch.autograd.gradcheck(lambda y: _SquaredNorm.apply(y, shift), (Y,))


def test_translation_on_the_fly_equals_points_translated_by_hand(monkeypatch):
    """The front end subtracts the trees' mean root from the points a chunk of atoms at a
    time (chunks of 64 here, so that five chunks run); values and gradients equal those
    of the points and trees translated by hand beforehand (to rounding: translation
    invariance with explicit trees). Data far from the origin (offset 50) would show a
    translation left out of a chunk or of a gradient."""
    from tsw.core import _gradients

    monkeypatch.setattr(_gradients, "_chunks", lambda m, d: range(0, m, 64))
    g = torch.Generator().manual_seed(0)
    X = torch.randn(300, 6, generator=g, dtype=F64) + 50.0
    Y = torch.randn(250, 6, generator=g, dtype=F64) + 50.5
    trees = tsw.sample_concurrent_lines(
        6, n_trees=4, n_lines=3, center=torch.full((6,), 50.0, dtype=F64), seed=0, dtype=F64
    )
    Xs = X.clone().requires_grad_(True)
    value = tsw.db_tsw(Xs, Y, trees=trees)
    value.backward()
    shift = torch.full((6,), 50.0, dtype=F64)
    moved = tsw.ConcurrentLines(trees.roots - shift, trees.directions)
    X0 = (X - shift).requires_grad_(True)
    ref = tsw.db_tsw(X0, Y - shift, trees=moved)
    ref.backward()
    torch.testing.assert_close(value, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(Xs.grad, X0.grad, rtol=1e-10, atol=1e-12)


def test_centered_moves_points_and_trees_together():
    """``centered`` translates points and trees by the mean root; coordinates do not move.

    Independent reference: ``<z - x_tau, theta>`` and ``|z - c|^2`` written out on the
    untranslated points, for concurrent and chained trees, shared and batched.
    """
    from tsw.core._validation import check_measures
    from tsw.euclidean._lines import centered, project

    g = torch.Generator().manual_seed(0)
    X = torch.randn(2, 7, 5, generator=g, dtype=F64) + 40.0
    Y = torch.randn(2, 6, 5, generator=g, dtype=F64) + 40.5
    measures = check_measures(X, Y, None, None)
    center = torch.full((5,), 40.0, dtype=F64)
    shared = tsw.sample_concurrent_lines(5, n_trees=3, n_lines=2, center=center, seed=1, dtype=F64)
    batched = tsw.ConcurrentLines(
        torch.stack([shared.roots, shared.roots + 1.0]), shared.directions, validate=False
    )
    chains = tsw.sample_chain_lines(5, n_trees=3, n_lines=2, center=center, seed=2, dtype=F64)
    Z = torch.cat([X, Y], dim=1)
    for trees in (shared, batched, chains):
        moved_measures, moved = centered(measures, trees)
        roots = trees.roots if trees.roots.ndim == 3 else trees.roots[None]
        c = roots.mean(dim=-2, keepdim=True)  # (B|1, 1, d)
        # translated on the fly: the supports stay as given, the centre travels as shift
        assert moved_measures.X_s is measures.X_s
        assert moved_measures.X_t is measures.X_t
        assert moved_measures.shift is not None
        assert not moved_measures.shift.requires_grad
        torch.testing.assert_close(moved_measures.shift, c, rtol=0, atol=1e-12)
        assert moved_measures.sq is not None
        sq = torch.cat(moved_measures.sq, dim=-1)
        torch.testing.assert_close(sq, ((Z - c) ** 2).sum(-1), rtol=1e-12, atol=1e-10)
        sources = trees.sources if trees.sources.ndim == 4 else trees.sources[None]
        dirs = trees.directions if trees.directions.ndim == 4 else trees.directions[None]
        expected = torch.einsum("bnd,btkd->btkn", Z, dirs) - (dirs * sources).sum(-1)[..., None]
        coords, _ = project(measures, trees, distances=False)
        torch.testing.assert_close(coords, expected, rtol=1e-12, atol=1e-10)
        again, _ = project(moved_measures, moved, distances=False)  # already centred: as is
        torch.testing.assert_close(again, expected, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("d", [2, 5])
@pytest.mark.parametrize("chunk_size", [None, 1])
@pytest.mark.parametrize("method", ["db_tsw", "tsw_sl", "tsw_sl_chain", "circular_tsw"])
def test_gradcheck_in_the_trees_with_translation_on_the_fly(method, chunk_size, d):
    """Finite differences w.r.t. the points, the roots (sources) and the directions.

    The front end translates the points by the trees' detached mean root on the fly,
    in every product (:func:`tsw.euclidean._lines.centered`); learnable trees then take
    the translated rows' gradient (``Products``' gradient of the rows), in one block and
    in one-tree blocks (checkpointed: the trees require grad). Data sit away from the
    origin (offset 3), so a translation left out of a gradient would show.
    """
    g = torch.Generator().manual_seed(d)
    X = torch.randn(7, d, generator=g, dtype=F64) + 3.0
    Y = torch.randn(6, d, generator=g, dtype=F64) + 3.5
    chain = method == "tsw_sl_chain"
    base = (
        torch.randn(3, 2, d, generator=g, dtype=F64)
        if chain
        else torch.randn(3, d, generator=g, dtype=F64)
    )
    base = (base + 3.0).requires_grad_(True)
    dirs = torch.randn(3, 2, d, generator=g, dtype=F64).requires_grad_(True)

    def f(x, r, u):
        u = u / u.norm(dim=-1, keepdim=True)
        if chain:
            trees = tsw.ChainLines(r, u, validate=False)
            return tsw.tsw_sl(x, Y, trees=trees, chunk_size=chunk_size)
        trees = tsw.ConcurrentLines(r, u, validate=False)
        if method == "circular_tsw":
            return tsw.circular_tsw(x, Y, radius=0.3, trees=trees, chunk_size=chunk_size)
        return getattr(tsw, method)(x, Y, trees=trees, chunk_size=chunk_size)

    assert torch.autograd.gradcheck(f, (X.requires_grad_(True), base, dirs))


@pytest.mark.parametrize("d", [2, 5])
@pytest.mark.parametrize(
    "call",
    [
        lambda X, Y: tsw.db_tsw(X, Y, n_trees=3, seed=0),
        lambda X, Y: tsw.circular_tsw(X, Y, radius=0.1, n_trees=3, seed=0),
        lambda X, Y: tsw.tsw_sl(X, Y, n_trees=3, seed=0),
        lambda X, Y: tsw.partial_tsw(X, Y, mass_t=0.8, n_trees=3, seed=0),
    ],
    ids=["db_tsw", "circular_tsw", "tsw_sl", "partial_tsw"],
)
def test_empty_batch_through_the_front_end(call, d):
    """A batch of zero items gives zero values (the centre's broadcast keeps B = 0)."""
    X, Y = torch.zeros(0, 5, d, dtype=F64), torch.zeros(0, 6, d, dtype=F64)
    value = call(X, Y)
    assert value.shape == (0,)
