r"""Projections and the closed form that turns one into a cost per slice.

A method's projection maps the measures and a block of slices to a :class:`Projection`:
the coordinates of the atoms on every line of every slice, their signed masses (or the
masses before a split that the closed form performs, :class:`~tsw.core.splits.LineSplit`
and :class:`~tsw.core.splits.AngularSplit`), and how the lines are glued
(:data:`STAR`, :data:`CHAIN`, :data:`RAYS` or :data:`LINE`). :func:`closed_form` then
gives one cost per slice: the tree :math:`W_1` (or the Sobolev transport
:math:`ST_p^p` for ``p > 1``) on a tree, the one-dimensional :math:`W_p^p` on a line.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from tsw.core._gradients import products
from tsw.core._validation import Measures
from tsw.core.splits import AngularSplit, LineSplit, angular_split_cost, split_line_cost
from tsw.core.tree_wasserstein import line_cost, system_cost
from tsw.core.wasserstein_1d import quantile_cost

__all__ = [
    "CHAIN",
    "LINE",
    "RAYS",
    "STAR",
    "Projection",
    "atoms",
    "closed_form",
    "line_coordinates",
    "signed_masses",
]

#: concurrent lines through one root: every line rooted at its coordinate 0
STAR = "star"
#: chained lines: line ``i`` hangs from line ``i - 1`` at ``attachments[..., i]``
CHAIN = "chain"
#: rays leaving one root (coordinates >= 0), sharing their coordinates (spherical trees)
RAYS = "rays"
#: one line per slice, the 1-D Wasserstein-p distance (sliced baselines)
LINE = "line"


class Projection(NamedTuple):
    r"""The measures projected on a block of ``T`` slices.

    Attributes
    ----------
    coords : Tensor of shape (B, T, k, n) or (B, T, 1, n); (B, T, n) for ``LINE``
        and for ``RAYS`` with an :class:`~tsw.core.splits.AngularSplit`.
        Coordinate of each of the ``n = N + M`` atoms (source first) on each line of
        each slice; size 1 on the line axis when all lines of a tree share it (sorted
        once per tree).
    masses : Tensor broadcastable to (B, T, k, n), LineSplit or AngularSplit
        Signed masses (source minus target) on each line; for ``LINE`` the non-negative
        weights (B, 1|T, n), the first ``n_source`` atoms being the source. A
        :class:`~tsw.core.splits.LineSplit` (``STAR``) or
        :class:`~tsw.core.splits.AngularSplit` (``RAYS``) leaves the split to the
        closed form.
    structure : {"star", "chain", "rays", "line"}
        How the lines of a slice are glued (see the module constants).
    attachments : Tensor of shape (B|1, T, k), optional
        ``CHAIN`` only: where line ``i`` starts on line ``i - 1``.
    n_source : int
        ``LINE`` only: the number of source atoms.
    """

    coords: Tensor
    masses: Tensor | LineSplit | AngularSplit
    structure: str = STAR
    attachments: Tensor | None = None
    n_source: int = 0


def signed_masses(measures: Measures) -> Tensor:
    """Return ``(a, -b)``, shape (B, N + M): the signed masses of the atoms ``cat(X_s, X_t)``."""
    return torch.cat([measures.a, -measures.b], dim=-1)


def atoms(measures: Measures) -> Tensor:
    """``cat(X_s, X_t)`` of shape (B, N + M, d): the atoms, source first."""
    return torch.cat([measures.X_s, measures.X_t], dim=-2)


def line_coordinates(Y_s: Tensor, Y_t: Tensor, directions: Tensor) -> Tensor:
    """``<y, theta_l>`` of both supports, (..., L, N + M), for a ``LINE`` projection.

    ``Y_s`` (..., N, d), ``Y_t`` (..., M, d), ``directions`` (d, L) or (..., d, L). The
    supports are multiplied separately, so that identical points of the two measures get
    bit-identical coordinates and ``d(mu, mu) = 0`` exactly. For (B, n, d) supports they
    are :func:`~tsw.core._gradients.products` (contiguous (B, L, n) coordinates, a
    contiguous gradient of the points, added straight into the driver's sums in
    blocks); other shapes (S3W's (B, R, n, d)) take ``matmul``.
    """
    if Y_s.dim() == 3 and Y_t.dim() == 3 and directions.dim() in (2, 3):
        rows = directions.mT if directions.dim() == 3 else directions.T.unsqueeze(0)
        return products((Y_s, Y_t), rows)
    coords = torch.cat([torch.matmul(Y_s, directions), torch.matmul(Y_t, directions)], dim=-2)
    return coords.transpose(-1, -2)


def closed_form(projection: Projection, p: float) -> Tensor:
    r"""Cost per slice :math:`\sum_e w_e |\Delta_e|^p` (no root), shape (B, T).

    Trees (``STAR``, ``CHAIN``, ``RAYS``): the tree Wasserstein-1 distance at ``p = 1``,
    the Sobolev transport :math:`ST_p^p` above (:func:`tsw.line_system_cost`). ``LINE``:
    the one-dimensional :math:`W_p^p` (:func:`tsw.wasserstein_1d`).
    """
    c, m = projection.coords, projection.masses
    if isinstance(m, LineSplit):
        return split_line_cost(c, m, p)
    if isinstance(m, AngularSplit):
        return angular_split_cost(c, m, p)
    if projection.structure == LINE:
        n = projection.n_source
        return quantile_cost(c[..., :n], c[..., n:], m[..., :n], m[..., n:], p)
    if projection.structure == RAYS:
        return line_cost(c, m, p, rays=True).sum(-1)
    if projection.structure == CHAIN:
        return system_cost(c, m, projection.attachments, p)
    return system_cost(c, m, None, p)
