r"""Splitting maps: how the mass of a point is shared among the lines of a tree.

A splitting map sends a point :math:`y` (and the tree :math:`\mathcal L`) to a vector
:math:`\alpha(y, \mathcal L)` of the simplex :math:`\Delta_{k-1}`; the point puts mass
:math:`a_y \alpha_l(y)` on line :math:`l` (spec 1.5).

* :func:`uniform_split`: :math:`\alpha_l = 1/k` (TSW-SL baseline of later papers).
* :func:`constant_split`: one vector :math:`\alpha \in \Delta_{k-1}` for every point
  (TSW-SL, Tran et al. 2025).
* :func:`distance_split`: :math:`\alpha_l = \mathrm{softmax}_l(-\delta\, d(y, l))`,
  closer lines get more mass (Db-TSW). E(d)-invariant; ``delta = 0`` is uniform.

A point-independent split (the first two) leaves every line balanced: no mass
crosses a root, and TSW-SL reduces to an :math:`\alpha`-weighted sliced
:math:`W_1` over the tree's lines. Only point-dependent splits make the tree
structure matter.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor

from tsw.core import _kernels
from tsw.core._safe import LineDistance
from tsw.core._validation import check_finite, check_tensor, sphere_tol

__all__ = ["check_alpha", "constant_split", "distance_split", "split_masses", "uniform_split"]


def uniform_split(n_lines: int, like: Tensor) -> Tensor:
    """Uniform split ``1/k``, as a (k, 1) tensor broadcasting over points."""
    return torch.full((n_lines, 1), 1.0 / n_lines, dtype=like.dtype, device=like.device)


def check_alpha(alpha: Tensor, n_trees: int, n_lines: int, like: Tensor, validate: bool) -> Tensor:
    """Validate a constant splitting vector of shape (k,) or (T, k) on the simplex.

    Its sums must be 1 to :func:`~tsw.core._validation.sphere_tol` (1e-6 in float64,
    1.2e-4 in float32), so that a vector written in float32 passes in float64.
    """
    check_tensor(alpha, "alpha")
    if alpha.device != like.device or alpha.dtype != like.dtype:
        raise ValueError(
            f"alpha must have the dtype and device of X_s ({like.dtype} on {like.device}); "
            f"got {alpha.dtype} on {alpha.device}"
        )
    if alpha.shape not in ((n_lines,), (n_trees, n_lines)):
        raise ValueError(
            f"alpha must have shape (k,) = ({n_lines},) or (T, k) = ({n_trees}, {n_lines}); "
            f"got alpha.shape={tuple(alpha.shape)}"
        )
    if validate:
        check_finite(alpha, "alpha")
        if bool((alpha < 0).any()):
            raise ValueError("alpha must lie on the simplex (non-negative entries summing to 1)")
        # sphere_tol: a vector normalised in float32 and cast to float64 passes
        if bool(((alpha.sum(-1) - 1).abs() > sphere_tol(alpha.dtype)).any()):
            raise ValueError(
                "alpha must lie on the simplex (non-negative entries summing to 1); got a sum "
                f"of {alpha.sum(-1).reshape(-1)[0].item():.10g}"
            )
    return alpha


def constant_split(alpha: Tensor) -> Tensor:
    """Constant split: ``alpha`` of shape (k,) or (T, k) as (..., k, 1)."""
    return alpha.unsqueeze(-1)


def distance_split(distances: Tensor, delta: float) -> Tensor:
    r"""Distance-based split :math:`\mathrm{softmax}_l(-\delta\, d(y, l))` over lines.

    Parameters
    ----------
    distances : Tensor of shape (..., k, n)
        Distance of each of ``n`` points to each of the ``k`` lines of a tree.
    delta : float
        Inverse temperature; ``0`` gives the uniform split, larger values send more
        mass to the nearest line.

    Returns
    -------
    Tensor of shape (..., k, n)
        Non-negative, summing to one over the line axis.
    """
    if delta == 0:
        return torch.full_like(distances, 1.0 / distances.shape[-2])
    return torch.softmax(distances * (-delta), dim=-2)


def split_masses(
    w: Tensor,
    delta: float,
    *,
    distances: Tensor | None = None,
    line: tuple[Tensor, Tensor] | None = None,
    signed: Tensor | None = None,
) -> Tensor:
    r"""Masses on the lines: :func:`distance_split` times the signed masses ``w``.

    Parameters
    ----------
    w : Tensor of shape (B, n)
        Signed masses of the atoms.
    delta : float
        Inverse temperature of :func:`distance_split`.
    distances : Tensor of shape (B, T, k, n), optional
        Distance of each atom to each line.
    line : (sq, t), optional
        Instead of ``distances``: ``sq`` (B, T, 1, n) the squared distance of each atom to
        its tree's root and ``t`` (B, T, k, n) its coordinates on the lines, whose
        distances are ``LineDistance``'s ``sqrt(max(sq - t^2, 0))``.
    signed : Tensor of shape (B, T, k, n), optional
        Instead of ``distances``: signed distances (in the plane, the coordinates along
        the lines' normals), whose absolute values are the distances (gradient
        ``sign(signed)``, 0 on a line).

    Returns
    -------
    Tensor of shape (B, T, k, n)
        :math:`\mathrm{softmax}_l(-\delta\, d_l)\, w`.

    Notes
    -----
    On the CPU with Numba (:mod:`tsw.core._kernels`), for ``delta != 0`` and weights
    that need no gradient, the forward and the backward passes are each one compiled
    loop per tree (:class:`~tsw.core._kernels.DistanceSplit`), the distances of ``line``
    and ``signed`` included; otherwise autograd runs through the torch operators. Both
    give the same values and gradients up to rounding.
    """
    given = [x is not None for x in (distances, line, signed)]
    if sum(given) != 1:
        raise TypeError("split_masses takes exactly one of distances=, line= and signed=")
    if line is not None:
        return split_by_form(w, delta, line[0], line[1], _kernels.LINE)
    if signed is not None:
        return split_by_form(w, delta, None, signed, _kernels.SIGNED)
    return split_by_form(w, delta, None, cast(Tensor, distances), _kernels.DISTANCES)


def split_by_form(w: Tensor, delta: float, sq: Tensor | None, t: Tensor, mode: int) -> Tensor:
    """:func:`split_masses` with its distances given as ``(sq, t, mode)``.

    ``mode`` is ``tsw.core._kernels.LINE`` (``sq`` and the coordinates ``t``, as
    ``line=``), ``SIGNED`` (``t`` as ``signed=``, ``sq`` None) or ``DISTANCES`` (``t`` as
    ``distances=``, ``sq`` None): the form :class:`~tsw.core._kernels.DistanceSplit` and
    :class:`~tsw.core._kernels.SplitLineCost` take.
    """
    if delta != 0 and not w.requires_grad and _kernels.usable(t, w):
        return _kernels.DistanceSplit.apply(sq, t, w, delta, mode)
    if mode == _kernels.LINE:
        dist: Tensor = LineDistance.apply(sq, t)
    else:
        dist = t.abs() if mode == _kernels.SIGNED else t
    return distance_split(dist, delta) * w[:, None, None, :]
