"""Geometry of Euclidean tree systems: coordinates of points on lines, distances to lines.

Given points and a tree system (:mod:`tsw.core.trees`), compute the line coordinates
(one matmul) and, for point-dependent splits, the point-to-line distances without the
(T, k, n, d) tensor. Shared by TSW-SL, Db-TSW, CircularTSW, SpatialTSW and PartialTSW.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from tsw.core._safe import LineDistance, SafeSqrt
from tsw.core._slices import with_batch_axis
from tsw.core.trees import ConcurrentLines, TreeSystem

#: Up to this dimension the point-to-line residual is formed explicitly
#: (O(T k n d) memory, exact in floating point); above it the identity
#: ``|z|^2 - <z, theta>^2`` is used on centred data (O(T k n) memory).
EXPLICIT_RESIDUAL_MAX_DIM = 3


class Offsets(NamedTuple):
    """Where the points sit relative to the roots of concurrent lines.

    Attributes
    ----------
    coords : Tensor of shape (B, T, k, n)
        ``s = <z - x_tau, theta_l>``, the linear coordinate on each line.
    dirs : Tensor of shape (B|1, T, k, d)
        The line directions.
    rel : Tensor of shape (B, T, n, d) or None
        ``z - x_tau`` formed explicitly (``d <= EXPLICIT_RESIDUAL_MAX_DIM``).
    sq : Tensor of shape (B, T, 1, n) or None
        ``|z - x_tau|^2`` from centred data (above that dimension).
    """

    coords: Tensor
    dirs: Tensor
    rel: Tensor | None
    sq: Tensor | None


def _line_coordinates(Z: Tensor, dirs: Tensor, sources: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``<z - source_l, theta_l>`` for every line, on data centred on the mean root.

    ``dirs`` (B|1, T, k, d), ``sources`` (B|1, T, k|1, d) with the root at index 0 of the
    line axis. Centring on the mean root is translation-invariant and keeps expanded
    squares well conditioned when the data sit far from the origin.

    Returns
    -------
    coords : Tensor of shape (B, T, k, n)
    Zc : Tensor of shape (B, n, d)
        The centred points.
    c0 : Tensor of shape (B|1, 1, d)
        The (detached) centre.
    """
    c0 = sources[..., 0, :].detach().mean(dim=-2, keepdim=True)  # (B|1, 1, d)
    Zc = Z - c0
    B, n, d = Z.shape
    T, k = dirs.shape[-3], dirs.shape[-2]
    if dirs.shape[0] == 1 and B == 1:
        # a plain 2-D mm: the backward of a batch-of-1 matmul is several times slower
        # for large d (measured 3.8x its forward at d = 3072)
        proj = torch.mm(dirs.reshape(T * k, d), Zc[0].T).unsqueeze(0)
    else:
        proj = torch.matmul(dirs.reshape(dirs.shape[0], T * k, d), Zc.transpose(-1, -2))
    offset = (dirs * (sources - c0.unsqueeze(-2))).sum(-1).unsqueeze(-1)
    return proj.reshape(B, T, k, n) - offset, Zc, c0


def offsets(Z: Tensor, trees: ConcurrentLines) -> Offsets:
    """Linear coordinates of points on concurrent lines and what distances need.

    Parameters
    ----------
    Z : Tensor of shape (B, n, d)
        Points.
    trees : ConcurrentLines
        ``T`` trees of ``k`` lines, shared or with batch size ``B``.

    Returns
    -------
    Offsets
        No (T, k, n, d) tensor is formed above ``d = EXPLICIT_RESIDUAL_MAX_DIM``.
    """
    dirs = with_batch_axis(trees.directions, 3)  # (B|1, T, k, d)
    roots = with_batch_axis(trees.roots, 2)  # (B|1, T, d)
    coords, Zc, c0 = _line_coordinates(Z, dirs, roots.unsqueeze(-2))
    Rc = roots - c0  # (B|1, T, d)
    d = Z.shape[-1]
    if d <= EXPLICIT_RESIDUAL_MAX_DIM:
        return Offsets(coords, dirs, Zc.unsqueeze(1) - Rc.unsqueeze(-2), None)
    sq = (
        (Zc * Zc).sum(-1).unsqueeze(1)
        - 2 * torch.matmul(Rc, Zc.transpose(-1, -2))
        + (Rc * Rc).sum(-1).unsqueeze(-1)
    )  # (B, T, n) = |z - x_tau|^2
    return Offsets(coords, dirs, None, sq.unsqueeze(2))


def line_distance(off: Offsets) -> Tensor:
    """Distance of every point to every line, shape (B, T, k, n)."""
    if off.rel is not None:
        return point_distance(off, off.coords)
    return LineDistance.apply(off.sq, off.coords)


def point_distance(off: Offsets, u: Tensor | float) -> Tensor:
    """``|(z - x_tau) - u theta_l|``: distance to the point at coordinate ``u`` of line l.

    ``u`` is a number or a tensor broadcastable to (B, T, k, n); the result has shape
    (B, T, k, n). Above ``d = EXPLICIT_RESIDUAL_MAX_DIM`` it is
    ``sqrt(|z - x|^2 - 2 u s + u^2)``, resolved to about ``sqrt(eps) |z - x|`` near 0,
    with a zero subgradient at 0.
    """
    if off.rel is not None:
        u = torch.as_tensor(u, dtype=off.rel.dtype, device=off.rel.device)
        u = u.unsqueeze(-1) if u.ndim else u
        resid = off.rel.unsqueeze(2) - u * off.dirs.unsqueeze(-2)  # (B, T, k, n, d)
        return torch.linalg.vector_norm(resid, dim=-1)
    if isinstance(u, Tensor):
        q = torch.addcmul(off.sq, off.coords, u, value=-2).addcmul_(u, u)
    else:
        q = off.sq - (2 * u) * off.coords + u * u
    return SafeSqrt.apply(q)


def radial_distance(off: Offsets) -> Tensor:
    """``|z - x_tau|``, the same on every line of a tree: shape (B, T, 1, n)."""
    if off.rel is not None:
        return torch.linalg.vector_norm(off.rel, dim=-1).unsqueeze(2)
    return SafeSqrt.apply(off.sq)


def project(Z: Tensor, trees: TreeSystem, *, distances: bool) -> tuple[Tensor, Tensor | None]:
    """Coordinates of points on every line, and optionally distances to the lines.

    Parameters
    ----------
    Z : Tensor of shape (B, n, d)
        Points.
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
        off = offsets(Z, trees)
        return off.coords, line_distance(off)
    dirs = with_batch_axis(trees.directions, 3)  # (B|1, T, k, d)
    if isinstance(trees, ConcurrentLines):
        sources = with_batch_axis(trees.roots, 2).unsqueeze(-2)  # (B|1, T, 1, d)
    else:
        sources = with_batch_axis(trees.sources, 3)  # (B|1, T, k, d)
    coords, _, _ = _line_coordinates(Z, dirs, sources)
    return coords, None
