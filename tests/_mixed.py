"""Generic R^d data lifted onto a product of factors, for the suites across the package.

The suites (contract, driver options, tracing, losses) draw generic points of R^d; the
mixed-curvature distance takes points of a product of Euclidean, spherical and hyperbolic
factors. ``lift`` maps R^d (d >= 3) smoothly and injectively on bounded sets onto
R^1 x S^1 x H^(d-2) (width d + 2): the first coordinate as it is, the second as an angle
on the circle, the others as the spatial coordinates of the hyperboloid. A distance
composed with it keeps every property that does not move the points (zero, symmetry,
triangle inequality, weights, batches, seeds, gradients).
"""

from __future__ import annotations

import torch
from torch import Tensor

import tsw

#: the smallest data width ``lift`` takes
MIN_DIM = 3


def components(d: int) -> list[tuple[str, int]]:
    """The factors of ``lift`` for data of width ``d``."""
    return [("euclidean", 1), ("sphere", 1), ("hyperbolic", d - 2)]


def lift(X: Tensor) -> Tensor:
    """R^d -> R^1 x S^1 x H^(d-2), shape (..., d + 2); numpy arrays are lifted too."""
    if not isinstance(X, Tensor):
        return lift(torch.as_tensor(X)).numpy()
    z = X[..., 2:]
    h0 = torch.sqrt(1 + (z * z).sum(-1, keepdim=True))
    angle = X[..., 1:2]
    return torch.cat([X[..., :1], torch.cos(angle), torch.sin(angle), h0, z], dim=-1)


def mc_tsw(X_s, X_t, a=None, b=None, **kw):
    """:func:`tsw.mc_tsw` of the lifted data (the components read from the width)."""
    return tsw.mc_tsw(lift(X_s), lift(X_t), a, b, components=components(X_s.shape[-1]), **kw)


def mc_tsw_module(X_s, X_t, a=None, b=None, *, seed=None, validate=True, **kw):
    """:class:`tsw.nn.MCTSWLoss` as a function on Euclidean data (one factor of their width).

    A fixed draw from ``seed``, no batch reduction (the contract suite's module calls);
    ``components`` in ``kw`` is replaced by ``[("euclidean", d)]`` for data of width ``d``.
    """
    kw = {**kw, "components": (("euclidean", X_s.shape[-1]),)}
    loss = tsw.nn.MCTSWLoss(**kw, seed=seed, resample=False, validate=validate, reduction="none")
    return loss(X_s, X_t, a, b)
