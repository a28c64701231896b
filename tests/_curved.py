"""Generic R^d data lifted onto hyperbolic space and onto SPD matrices, for the shared suites.

The suites (contract, driver options, tracing, losses) draw generic points of R^d. Here
they are carried onto the manifolds by smooth injective maps written independently of
the library's geometry:

* :func:`hyperbolic`: :math:`v \\mapsto (\\cosh|v|, \\sinh|v|\\, v/|v|)` on the hyperboloid, or
  :math:`\\tanh(|v|/2)\\, v/|v|` in the Poincare ball (the point at distance |v| in the
  direction of v); it commutes with the rotations about the origin;
* :func:`spd`: :math:`v \\mapsto \\exp(S(v))`, ``S(v)`` the symmetric n x n matrix whose
  half-vectorisation (upper triangle, off-diagonal entries times sqrt 2) is ``v`` padded
  with zeros to n(n+1)/2; so SPDSW of the lifted data is SW of the padded data.

NaN and Inf go through (as NaN or Inf entries), so that the suites' checks of non-finite
input see them.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

import tsw


def _tensor(X):
    return torch.as_tensor(X) if isinstance(X, np.ndarray) else X


def _back(X, like):
    return X.numpy() if isinstance(like, np.ndarray) else X


def hyperbolic(X, model: str = "lorentz"):
    """R^d -> H^d: the point at distance |v| from the origin in the direction of v."""
    V = _tensor(X)
    n = torch.linalg.vector_norm(V, dim=-1, keepdim=True)
    unit = torch.where(n > 0, V / torch.where(n > 0, n, 1), 0)
    if model == "lorentz":
        out = torch.cat([torch.cosh(n), torch.sinh(n) * unit], dim=-1)
    else:
        out = torch.tanh(n / 2) * unit
    return _back(out, X)


def side(d: int) -> int:
    """The size n of the matrices of :func:`spd` for data of width d: n(n+1)/2 >= d."""
    return math.ceil((math.sqrt(8 * d + 1) - 1) / 2)


def spd(X):
    """R^d -> SPD(n): exp of the symmetric matrix of half-vectorisation v (padded)."""
    V = _tensor(X)
    d = V.shape[-1]
    n = side(d)
    rows, cols = torch.triu_indices(n, n)
    S = V.new_zeros(*V.shape[:-1], n, n)
    scale = torch.where(rows == cols, 1.0, 1 / math.sqrt(2)).to(V.dtype)
    S[..., rows[:d], cols[:d]] = V * scale[:d]
    S = S + S.mT - torch.diag_embed(S.diagonal(dim1=-2, dim2=-1))
    return _back(torch.linalg.matrix_exp(S), X)


def lifted(fn, lift, **fixed):
    """``fn`` of the lifted data, ``fixed`` options added (a contract entry's function)."""

    def call(X_s, X_t, a=None, b=None, **kw):
        return fn(lift(X_s), lift(X_t), a, b, **fixed, **kw)

    call.__name__ = fn.__name__
    return call


def lifted_module(cls, lift, **fixed):
    """A loss module as a function of the lifted data: a fixed draw, no reduction."""

    def call(X_s, X_t, a=None, b=None, *, seed=None, validate=True, **kw):
        loss = cls(**fixed, **kw, seed=seed, resample=False, validate=validate, reduction="none")
        return loss(lift(X_s), lift(X_t), a, b)

    return call


def poincare(X):
    return hyperbolic(X, "poincare")


#: the lift of each curved distance's data, and its fixed options
LIFTS = {
    "ghsw": (hyperbolic, {}),
    "hhsw": (hyperbolic, {}),
    "spdsw": (spd, {}),
    "hspdsw": (spd, {}),
}


def spd_projections(d: int, n_projections: int, **kw) -> Tensor:
    """SPD directions for data of width d (matrices of :func:`side`)."""
    return tsw.sample_spd_projections(side(d), n_projections, **kw)
