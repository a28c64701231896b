r"""Injective maps applied to the supports before a tree-sliced distance (SpatialTSW).

If :math:`h` is injective and continuous, a metric :math:`D` on measures gives the
metric :math:`D(h_\#\mu, h_\#\nu)` (Tran et al., ICML 2025, Thm 4.3 and 5.3). Built-in
maps, acting on the last axis of a tensor:

* :func:`pow_map`: :math:`h(y) = y + \beta\,y^{\circ m}` coordinate-wise, ``m`` odd and
  :math:`\beta \ge 0`: strictly increasing in every coordinate, so injective;
  :math:`d_\theta = d`.
* :func:`poly_map`: all monomials of total degree ``m`` (odd), in the order of
  ``itertools.combinations_with_replacement``; injective because the pure powers
  :math:`y_i^m` determine :math:`y`; :math:`d_\theta = \binom{d+m-1}{m}`
  (:func:`poly_dim`).

Any callable (a function or a ``torch.nn.Module``) from (..., d) to (..., d_theta)
works too; its injectivity is the caller's responsibility (for instance
:math:`h(y) = (y, \varphi(y))` is injective for any :math:`\varphi`).

:func:`map_measures` applies a map to validated measures and checks what it returns;
it is the shared step of every "map, then slice" distance (:func:`tsw.spatial_tsw`,
and a spherical map before STSW).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import cast

import torch
from torch import Tensor

from tsw.core._validation import (
    Measures,
    check_finite,
    check_nonnegative_float,
)

__all__ = ["BUILTIN", "map_measures", "poly_dim", "poly_map", "pow_map", "resolve_mapping"]

#: Names of the built-in maps.
BUILTIN = ("pow", "poly")
DEFAULT_DEGREE = 3
DEFAULT_BETA = 1.0


def check_odd_degree(degree: object) -> int:
    """Return ``degree`` if it is an odd int >= 1, else raise."""
    if isinstance(degree, bool) or not isinstance(degree, int):
        raise TypeError(f"degree must be an odd int >= 1; got {type(degree).__name__}")
    if degree < 1 or degree % 2 == 0:
        raise ValueError(
            f"degree must be an odd int >= 1 (an even degree is not injective: h(-y) = "
            f"h(y)); got {degree}"
        )
    return degree


def pow_map(X: Tensor, degree: int = DEFAULT_DEGREE, beta: float = DEFAULT_BETA) -> Tensor:
    r"""Coordinate-wise odd power map :math:`h(y) = y + \beta\, y^{\circ m}`.

    Parameters
    ----------
    X : Tensor of shape (..., d)
    degree : int, default 3
        ``m``, odd.
    beta : float, default 1.0
        ``>= 0`` (the published code's ``pow_beta``).

    Returns
    -------
    Tensor of shape (..., d)

    Examples
    --------
    >>> import torch
    >>> from tsw.euclidean.mappings import pow_map
    >>> pow_map(torch.tensor([-1.0, 0.0, 2.0]))
    tensor([-2.,  0., 10.])
    """
    degree = check_odd_degree(degree)
    beta = check_nonnegative_float(beta, "beta")
    return X + beta * X.pow(degree)


def poly_dim(dim: int, degree: int) -> int:
    """Return the number of monomials of total degree ``degree`` in ``dim`` variables."""
    return math.comb(dim + degree - 1, degree)


def _monomials(dim: int, degree: int, device: torch.device) -> Tensor:
    """Index tuples (i_1 <= ... <= i_m) of the monomials, shape (d_theta, m)."""
    combos = list(itertools.combinations_with_replacement(range(dim), degree))
    return torch.tensor(combos, dtype=torch.long, device=device).reshape(len(combos), degree)


def poly_map(X: Tensor, degree: int = DEFAULT_DEGREE) -> Tensor:
    r"""All monomials of total degree ``m`` of the coordinates.

    Parameters
    ----------
    X : Tensor of shape (..., d)
    degree : int, default 3
        ``m``, odd; ``m = 1`` is the identity.

    Returns
    -------
    Tensor of shape (..., C(d + m - 1, m))
        :math:`\prod_j y_{i_j}` for every :math:`i_1 \le \dots \le i_m`, in
        lexicographic order.

    Examples
    --------
    >>> import torch
    >>> from tsw.euclidean.mappings import poly_map
    >>> poly_map(torch.tensor([2.0, -1.0]))  # y1^3, y1^2 y2, y1 y2^2, y2^3
    tensor([ 8., -4.,  2., -1.])
    """
    degree = check_odd_degree(degree)
    idx = _monomials(X.shape[-1], degree, X.device)
    out = X[..., idx[:, 0]]
    for j in range(1, degree):
        out = out * X[..., idx[:, j]]
    return out


def resolve_mapping(
    mapping: object, degree: int | None = None, beta: float | None = None
) -> Callable[[Tensor], Tensor]:
    """Return the map to apply: a built-in one by name, or the given callable.

    Parameters
    ----------
    mapping : {"pow", "poly"} or callable
        A built-in name, or any callable (``torch.nn.Module`` included) mapping a
        tensor of shape (..., d) to (..., d_theta).
    degree, beta : optional
        Options of the built-in maps (defaults 3 and 1.0); ``beta`` for ``"pow"``
        only. Giving one with a callable raises.

    Raises
    ------
    TypeError, ValueError
        For an unknown name or a non-callable, options that do not apply, an even or
        non-positive ``degree``, a negative ``beta``.
    """
    if isinstance(mapping, str):
        if mapping not in BUILTIN:
            raise ValueError(
                "mapping must be 'pow', 'poly' or a callable (e.g. a torch.nn.Module); "
                f"got {mapping!r}"
            )
        deg = check_odd_degree(DEFAULT_DEGREE if degree is None else degree)
        if mapping == "poly":
            if beta is not None:
                raise ValueError(f"beta applies to mapping='pow' only; got beta={beta!r}")
            return lambda X: poly_map(X, deg)
        b = check_nonnegative_float(DEFAULT_BETA if beta is None else beta, "beta")
        return lambda X: pow_map(X, deg, b)
    if not callable(mapping):
        raise TypeError(
            "mapping must be 'pow', 'poly' or a callable (e.g. a torch.nn.Module); got "
            f"{type(mapping).__name__}"
        )
    for name, value in (("degree", degree), ("beta", beta)):
        if value is not None:
            raise ValueError(
                f"{name} applies to the built-in mappings only; got {name}={value!r} with a "
                "callable mapping"
            )
    # a callable's output is checked where it is applied (map_measures)
    return cast(Callable[[Tensor], Tensor], mapping)


def _apply(h: Callable[[Tensor], Tensor], X: Tensor, name: str, batched: bool) -> Tensor:
    out = h(X if batched else X[0])
    label = f"mapping({name})"
    if not isinstance(out, Tensor):
        raise TypeError(f"{label} must return a torch.Tensor; got {type(out).__name__}")
    if out.dtype != X.dtype:
        raise TypeError(f"{label} must keep the dtype of {name} ({X.dtype}); got {out.dtype}")
    if out.device != X.device:
        raise ValueError(
            f"{label} must stay on the device of {name} ({X.device}); got {out.device}"
        )
    lead = tuple(X.shape[:-1]) if batched else tuple(X.shape[1:-1])
    if tuple(out.shape[:-1]) != lead or out.ndim != len(lead) + 1 or out.shape[-1] == 0:
        form = "(B, N, d_theta)" if batched else "(N, d_theta)"
        raise ValueError(
            f"{label} must have shape {form} with leading dimensions {lead} and d_theta >= 1; "
            f"got shape {tuple(out.shape)}"
        )
    return out if batched else out.unsqueeze(0)


def map_measures(measures: Measures, h: Callable[[Tensor], Tensor], validate: bool) -> Measures:
    """Apply ``h`` to both supports of validated measures and check its output.

    ``h`` is called on each support as the user passed it: (N, d) for unbatched
    measures, (B, N, d) for batched ones. It must return a tensor of the same dtype
    and device with the same leading dimensions and one last dimension ``d_theta``
    for both measures; with ``validate`` its values must be finite.

    Returns
    -------
    Measures
        The mapped supports with the original weights.
    """
    HX = _apply(h, measures.X_s, "X_s", measures.batched)
    HY = _apply(h, measures.X_t, "X_t", measures.batched)
    if HX.shape[-1] != HY.shape[-1]:
        raise ValueError(
            "mapping(X_s) and mapping(X_t) must have the same last dimension d_theta; got "
            f"{HX.shape[-1]} and {HY.shape[-1]}"
        )
    if validate:
        check_finite(HX, "mapping(X_s)")
        check_finite(HY, "mapping(X_t)")
    return Measures(HX, HY, measures.a, measures.b, measures.batched)
