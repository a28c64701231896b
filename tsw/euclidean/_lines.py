"""Geometry of Euclidean tree systems: coordinates of points on lines, distances to lines.

Given points and a tree system (:mod:`tsw.core.trees`), compute the line coordinates
(one matmul) and, for point-dependent splits, the point-to-line distances without the
(T, k, n, d) tensor. Shared by TSW-SL, Db-TSW, CircularTSW, SpatialTSW and PartialTSW.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, TypeVar, cast, overload

import torch
from torch import Tensor

from tsw.core._gradients import grouped_products, routed, spans, translated, unbroadcast
from tsw.core._safe import LineDistance, SafeSqrt, broadcast_shape
from tsw.core._slices import with_batch_axis
from tsw.core._validation import Measures
from tsw.core.splits import LineSplit, SplitForm
from tsw.core.trees import ChainLines, ConcurrentLines, TreeSystem

#: Up to this dimension the point-to-line distance is the norm of the cross product
#: ``theta x (z - x)``, whose ``d - 1`` (d = 2) or 3 (d = 3) coordinates come from the
#: same pass over the points as the line coordinates (a second group of rows of
#: :func:`~tsw.core._gradients.grouped_products`; O(T k n d) memory, no cancellation); above it
#: the identity ``|z|^2 - <z, theta>^2`` is used on centered data (O(T k n) memory).
EXPLICIT_RESIDUAL_MAX_DIM = 3

#: the Euclidean tree systems that :func:`centered` translates (it returns the same type)
Trees = TypeVar("Trees", bound=TreeSystem)


class Offsets(NamedTuple):
    """Where the points sit relative to the roots of concurrent lines.

    Attributes
    ----------
    coords : Tensor of shape (B, T, k, n)
        ``s = <z - x_tau, theta_l>``, the linear coordinate on each line.
    dirs : Tensor of shape (B|1, T, k, d)
        The line directions.
    perp : Tensor of shape (B, T, k, r, n) or None
        ``d <= EXPLICIT_RESIDUAL_MAX_DIM``: the coordinates of ``theta_l x (z - x_tau)``
        (:func:`cross_rows`; ``r = 1`` in the plane, 3 in space, 0 on a line). For a
        unit ``theta_l`` their norm is the distance to line l, and
        ``|(z - x_tau) - u theta_l|^2 = (s - u)^2 + |perp|^2`` without cancellation.
    sq : Tensor of shape (B, T, 1, n) or None
        ``|z - x_tau|^2`` from centered data (above that dimension).
    """

    coords: Tensor
    dirs: Tensor
    perp: Tensor | None
    sq: Tensor | None


class _SquaredNorm(torch.autograd.Function):
    """``|y - shift|^2`` along the last axis: a reduction forward, ``2 (y - shift) g`` backward.

    ``Y`` (B|1, m, d), ``shift`` (B|1, 1, d), detached. The translated points are formed
    a chunk of atoms at a time (:func:`~tsw.core._gradients.translated`), so that no
    translated copy of ``Y`` is held. The backward forms its (B, m, d) gradient in one
    pass; when ``Y`` is a leaf that the driver marked (the front end inside
    ``tsw.core._blocks._BlockCosts``, :func:`~tsw.core._gradients.route_into`), it adds
    the gradient into the driver's accumulator a chunk at a time instead and returns
    none, so that the points' gradient exists once (at N = 1e7, d = 128 a fresh
    gradient held 4.8 GiB).
    """

    @staticmethod
    def forward(ctx, Y: Tensor, shift: Tensor) -> Tensor:
        ctx.save_for_backward(Y, shift)
        ctx.into = routed(Y)
        m, d = Y.shape[1], Y.shape[2]
        out = Y.new_empty(broadcast_shape(Y.shape[:1], shift.shape[:1])[0], m)
        for i, j in spans(m, d, shift):
            out[:, i:j] = torch.linalg.vector_norm(translated(Y, shift, i, j), dim=-1).square_()
        return out

    @staticmethod
    def backward(ctx, g: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        Y, shift = ctx.saved_tensors
        into = ctx.into
        if into is None:
            grad = torch.sub(Y, shift).mul_((2 * g).unsqueeze(-1))
            return unbroadcast(grad, Y), None
        for i, j in spans(Y.shape[1], Y.shape[2], shift):
            part = torch.sub(Y[:, i:j], shift).mul_((2 * g[:, i:j]).unsqueeze(-1))
            into[:, i:j] += unbroadcast(part, into)
        return None, None


def centered(measures: Measures, trees: Trees) -> tuple[Measures, Trees]:
    r"""Translate the points and the trees by the trees' mean root; square the points.

    Every Euclidean projection reads centered points (:func:`offsets` and
    :func:`project` call this, which does nothing to measures already centered). The
    points are translated on the fly: the measures keep their supports and carry the
    center as ``shift``, which the products (:func:`~tsw.core._gradients.products`) and
    the squared norms subtract a chunk of atoms at a time, so no translated (n, d) copy
    is held (measured at N = 6.5e6, d = 128, 2 x 4 trees, one thread: the peak went
    from 19.21 to 13.01 GiB, and N = 1e7 fits in 19.76 GiB). As
    the front end of the Euclidean tree distances (``evaluate(..., front=centered)``)
    it runs once per call:
    the value is unchanged (the coordinates on the lines and the distances to them are
    translation-invariant), and the driver's blocks of trees then read centered points
    and their squared norms ``|z - c|^2`` (``measures.sq``) instead of centering and
    squaring the (n, d) points in every block: when the memory budget cuts blocks of
    one or two trees (N = 4e6, d = 128), those passes were most of a block. The center
    ``c`` (detached, per item for batched trees) is the mean root of all the trees, so
    that the expanded squares stay well conditioned for data far from the origin.
    """
    if measures.sq is not None:
        return measures, trees
    c = with_batch_axis(trees.roots, 2).detach().mean(dim=-2, keepdim=True)  # (B|1, 1, d)
    sq = (_SquaredNorm.apply(measures.X_s, c), _SquaredNorm.apply(measures.X_t, c))
    if isinstance(trees, ConcurrentLines):
        shift = c if trees.roots.ndim == 3 else c[0]
        moved: TreeSystem = ConcurrentLines(trees.roots - shift, trees.directions, validate=False)
    else:
        shift = c.unsqueeze(-2) if trees.sources.ndim == 4 else c
        moved = ChainLines(trees.sources - shift, trees.directions, validate=False)
    return measures._replace(sq=sq, shift=c), cast(Trees, moved)


def _line_coordinates(
    supports: tuple[Tensor, ...],
    dirs: Tensor,
    sources: Tensor,
    roots: Tensor | None = None,
    shift: Tensor | None = None,
    normals: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """``<z - source_l, theta_l>`` for every line, of points and trees moved by :func:`centered`.

    ``supports`` (B, n_i, d) each, ``dirs`` (B|1, T, k, d), ``sources`` (B|1, T, k|1, d);
    ``shift`` (B|1, 1, d): the center the points are translated by on the fly (``z``
    above is the translated point). The offsets ``<source_l, theta_l>`` are subtracted
    inside the product (:func:`~tsw.core._gradients.grouped_products`). One of, optionally:
    ``roots`` (B|1, T, d) adds ``<z, x_tau>``; ``normals`` (B|1, T, k, r, d) adds
    ``<z - source_l, normal>`` for each of the ``r`` rows of every line.

    Returns
    -------
    coords : Tensor of shape (B, T, k, n)
    extra : Tensor of shape (B, T, n) (``roots``), (B, T, k, r, n) (``normals``) or None
    """
    T, k, d = dirs.shape[-3], dirs.shape[-2], dirs.shape[-1]
    Bd = dirs.shape[0]
    offset = (dirs * sources).sum(-1).flatten(-2)  # (B|1, Tk)
    groups: list[tuple[Tensor, Tensor | None]] = [(dirs.reshape(Bd, T * k, d), offset)]
    if roots is not None:
        groups.append((roots, None))
    elif normals is not None:
        rows = normals.flatten(-4, -2)  # (B|1, T k r, d)
        bias = (normals * sources.unsqueeze(-2)).sum(-1).flatten(-3)
        groups.append((rows, bias))
    # one product per group, each contiguous: no split (whose backward concatenates)
    outs = grouped_products(supports, groups, shift)
    B, n = outs[0].shape[0], outs[0].shape[-1]
    coords = outs[0].view(B, T, k, n)
    if normals is not None:
        return coords, outs[1].view(B, T, k, normals.shape[-2], n)
    return coords, (outs[1] if roots is not None else None)


def offsets(measures: Measures, trees: ConcurrentLines) -> Offsets:
    """Linear coordinates of the atoms on concurrent lines and what distances need.

    Parameters
    ----------
    measures : Measures
        Validated measures; the atoms are ``cat(X_s, X_t)``, source first.
    trees : ConcurrentLines
        ``T`` trees of ``k`` lines, shared or with batch size ``B``.

    Returns
    -------
    Offsets
        No (T, k, n, d) tensor is formed above ``d = EXPLICIT_RESIDUAL_MAX_DIM``.
    """
    measures, trees = centered(measures, trees)  # nothing to do after the driver's front end
    dirs = with_batch_axis(trees.directions, 3)  # (B|1, T, k, d)
    roots = with_batch_axis(trees.roots, 2)  # (B|1, T, d)
    d = dirs.shape[-1]
    supports = (measures.X_s, measures.X_t)
    sources = roots.unsqueeze(-2)
    if d <= EXPLICIT_RESIDUAL_MAX_DIM:
        # the cross-product rows: a second group of rows of the same product
        normals = cross_rows(dirs)  # (B|1, T, k, r, d)
        coords, perp = _line_coordinates(
            supports, dirs, sources, shift=measures.shift, normals=normals
        )
        return Offsets(coords, dirs, perp, None)  # perp (B, T, k, r, n)
    coords, zr = _line_coordinates(supports, dirs, sources, roots, measures.shift)
    # |z - x_tau|^2 = |z|^2 - 2 <z, x_tau> + |x_tau|^2 on centered data, shape (B, T, n)
    # (center gave the squared norms, and the roots a product)
    zsq = torch.cat(cast(tuple[Tensor, Tensor], measures.sq), dim=-1)
    zr = cast(Tensor, zr)
    sq = zsq.unsqueeze(1) - 2 * zr + (roots * roots).sum(-1).unsqueeze(-1)
    return Offsets(coords, dirs, None, sq.unsqueeze(2))


def cross_rows(dirs: Tensor) -> Tensor:
    r"""Rows ``R`` with ``R z = theta x z`` for directions in dimension ``d <= 3``.

    ``dirs`` (..., d) gives (..., r, d): in the plane the one row ``(-theta_2, theta_1)``
    (the normal), in space the three rows of the cross-product matrix
    :math:`[\theta]_\times`, on a line none. For a unit ``theta``,
    ``|R z| = |z - <z, theta> theta|``, the distance of ``z`` to the line spanned by
    ``theta``: a norm of linear coordinates, exact where the identity
    ``|z|^2 - <z, theta>^2`` cancels, and smooth in ``theta``.
    """
    d = dirs.shape[-1]
    if d == 1:
        return dirs.new_zeros(*dirs.shape[:-1], 0, 1)
    if d == 2:
        return torch.stack([-dirs[..., 1], dirs[..., 0]], dim=-1).unsqueeze(-2)
    if d == 3:
        t1, t2, t3 = dirs.unbind(-1)
        zero = torch.zeros_like(t1)
        return torch.stack(
            [
                torch.stack([zero, -t3, t2], dim=-1),
                torch.stack([t3, zero, -t1], dim=-1),
                torch.stack([-t2, t1, zero], dim=-1),
            ],
            dim=-2,
        )
    raise ValueError(f"cross_rows takes directions of dimension 1, 2 or 3; got d = {d}")


def _perp_sq(perp: Tensor) -> Tensor | None:
    """``|theta x (z - x)|^2`` of shape (B, T, k, n), or None on a line (``r = 0``)."""
    if perp.shape[-2] == 0:
        return None
    return perp[..., 0, :].square() if perp.shape[-2] == 1 else perp.square().sum(-2)


def line_distance(off: Offsets) -> Tensor:
    """Distance of every point to every line, shape (B, T, k, n)."""
    if off.perp is not None:
        if off.perp.shape[-2] == 1:  # the plane: |<z - x, normal>|, subgradient 0 on it
            return off.perp.squeeze(-2).abs()  # a view: no zero-filled backward
        q = _perp_sq(off.perp)
        return torch.zeros_like(off.coords) if q is None else SafeSqrt.apply(q)
    return LineDistance.apply(off.sq, off.coords)


def split_form(off: Offsets) -> tuple[Tensor | None, Tensor, SplitForm]:
    """Return the distances to the lines in the :class:`~tsw.core.splits.SplitForm` they have.

    ``(sq, coords, COORDINATES)`` above ``d = 3`` (``|z - x|^2`` and the coordinates),
    ``(None, the coordinates along the normals, SIGNED)`` in the plane, and ``(None, the
    distances, DISTANCES)`` in space and on a line (:func:`line_distance`): the
    arguments of :func:`~tsw.core.splits.split_by_form` after ``(w, delta)``.
    """
    if off.sq is not None:
        return off.sq, off.coords, SplitForm.COORDINATES
    if off.perp is not None and off.perp.shape[-2] == 1:
        return None, off.perp.squeeze(-2), SplitForm.SIGNED
    return None, line_distance(off), SplitForm.DISTANCES


def line_split(w: Tensor, delta: float, off: Offsets) -> LineSplit:
    """Return the signed masses ``w`` (B, n) before their split over the lines by distance.

    A :class:`~tsw.core.splits.LineSplit` with the distances in the form the compiled
    split takes them (:func:`split_form`): the closed form splits and transports it
    (:meth:`~tsw.core.splits.LineSplit.masses` gives the masses (B, T, k, n)).
    """
    return LineSplit(w, delta, *split_form(off))


def point_distance(off: Offsets, u: Tensor | float) -> Tensor:
    """``|(z - x_tau) - u theta_l|``: distance to the point at coordinate ``u`` of line l.

    ``u`` is a number or a tensor broadcastable to (B, T, k, n); the result has shape
    (B, T, k, n). Above ``d = EXPLICIT_RESIDUAL_MAX_DIM`` it is
    ``sqrt(|z - x|^2 - 2 u s + u^2)``, resolved to about ``sqrt(eps) |z - x|`` near 0,
    with a zero subgradient at 0.
    """
    if off.perp is not None:  # (s - u)^2 + |theta x (z - x)|^2, no cancellation
        along = off.coords - u
        q, perp_sq = along.square(), _perp_sq(off.perp)
        return SafeSqrt.apply(q if perp_sq is None else q.add_(perp_sq))
    sq = cast(Tensor, off.sq)  # an Offsets holds perp or sq
    if isinstance(u, Tensor):
        q = torch.addcmul(sq, off.coords, u, value=-2).addcmul_(u, u)
    else:
        q = sq - (2 * u) * off.coords + u * u
    return SafeSqrt.apply(q)


def radial_distance(off: Offsets) -> Tensor:
    """``|z - x_tau|``, the same on every line of a tree: shape (B, T, 1, n)."""
    if off.perp is not None:  # from line 0: s_0^2 + |theta_0 x (z - x)|^2
        q, perp_sq = off.coords[:, :, :1].square(), _perp_sq(off.perp[:, :, :1])
        return SafeSqrt.apply(q if perp_sq is None else q + perp_sq)
    return SafeSqrt.apply(off.sq)


@overload
def project(
    measures: Measures, trees: TreeSystem, *, distances: Literal[True]
) -> tuple[Tensor, Tensor]: ...


@overload
def project(
    measures: Measures, trees: TreeSystem, *, distances: Literal[False]
) -> tuple[Tensor, None]: ...


def project(
    measures: Measures, trees: TreeSystem, *, distances: bool
) -> tuple[Tensor, Tensor | None]:
    """Coordinates of the atoms on every line, and optionally distances to the lines.

    Parameters
    ----------
    measures : Measures
        Validated measures; the atoms are ``cat(X_s, X_t)``, source first.
    trees : ConcurrentLines or ChainLines
        ``T`` trees of ``k`` lines, shared or with batch size ``B``.
    distances : bool
        Also return the Euclidean distance of each point to each line (concurrent
        lines only).

    Returns
    -------
    coords : Tensor of shape (B, T, k, n)
        ``<z - source_l, theta_l>``.
    dist : Tensor of shape (B, T, k, n) or None
    """
    if distances:
        if not isinstance(trees, ConcurrentLines):
            raise TypeError("point-to-line distances are implemented for ConcurrentLines only")
        off = offsets(measures, trees)
        return off.coords, line_distance(off)
    measures, trees = centered(measures, trees)  # nothing to do after the driver's front end
    dirs = with_batch_axis(trees.directions, 3)  # (B|1, T, k, d)
    if isinstance(trees, ConcurrentLines):
        sources = with_batch_axis(trees.roots, 2).unsqueeze(-2)  # (B|1, T, 1, d)
    else:
        sources = with_batch_axis(trees.sources, 3)  # (B|1, T, k, d)
    supports = (measures.X_s, measures.X_t)
    coords, _ = _line_coordinates(supports, dirs, sources, shift=measures.shift)
    return coords, None
