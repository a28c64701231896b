r"""The barycentric map of a transport plan: each source point to the mean of its targets.

:func:`barycentric_map` (re-exported by :mod:`tsw`) reads any plan the plan functions
return: a dense tensor or numpy array, a torch sparse COO tensor, a scipy sparse matrix
(or a list of them for batched numpy plans).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from tsw.core._validation import check_bool, check_tensor

__all__ = ["barycentric_map"]


def _is_scipy_sparse(x: object) -> bool:
    return hasattr(x, "tocsr") and hasattr(x, "shape") and not isinstance(x, np.ndarray | Tensor)


def barycentric_map(
    plan: Any, X_t: Any, *, X_s: Any = None, validate: bool = True
) -> Tensor | np.ndarray:
    r"""Map each source point to the mean of its targets under a plan (barycentric map).

    .. math::

        T(x_i) = \frac{\sum_j P_{ij}\, y_j}{\sum_j P_{ij}},

    where the denominator is the source weight :math:`a_i` for a plan with marginals
    ``a`` and ``b``. For an optimal plan of the squared Euclidean cost this is the
    usual estimate of the Monge map (Ferradans et al. 2014, [Ferradans2014]_); with a
    sliced or tree-sliced plan it maps each point to the mean of the targets that plan
    sends it to (colour transfer, registration, domain adaptation).

    Parameters
    ----------
    plan : Tensor or ndarray of shape (N, M) or (B, N, M), torch sparse COO, or scipy sparse
        A plan, as returned by the plan functions (dense or sparse; a list of scipy
        matrices for batched numpy plans).
    X_t : Tensor or ndarray of shape (M, d) or (B, M, d)
        The target points.
    X_s : Tensor or ndarray of shape (N, d) or (B, N, d), optional
        The source points: a row of the plan with no mass then maps its point to
        itself. Without it such a row raises (with ``validate``).
    validate : bool, default True
        Check for rows without mass (a device synchronisation).

    Returns
    -------
    Tensor or ndarray of shape (N, d) or (B, N, d)
        numpy for numpy (or scipy) plans. Differentiable with respect to ``X_t`` (and the
        dense plan's values).

    Raises
    ------
    TypeError
        For a plan or points of another kind.
    ValueError
        For shapes that do not fit, or (``validate``) a row without mass and no ``X_s``.

    References
    ----------
    .. [Ferradans2014] S. Ferradans, N. Papadakis, G. Peyré, J.-F. Aujol. Regularized
       discrete optimal transport. SIAM Journal on Imaging Sciences, 2014.

    Examples
    --------
    >>> import torch, tsw
    >>> plan = torch.tensor([[0.25, 0.25], [0.0, 0.5]])
    >>> tsw.barycentric_map(plan, torch.tensor([[0.0, 0.0], [2.0, 0.0]]))
    tensor([[1., 0.],
            [2., 0.]])
    """
    validate = check_bool(validate, "validate")
    if isinstance(plan, list):
        if not plan:
            raise ValueError("plan must be a non-empty list of scipy sparse matrices")
        Y = np.asarray(X_t)
        if Y.ndim != 3 or Y.shape[0] != len(plan):
            raise ValueError(
                f"X_t must have shape (B, M, d) with B={len(plan)} for a list of plans; got "
                f"X_t.shape={tuple(Y.shape)}"
            )
        Xs = X_s
        if Xs is not None:
            _numpy_source(Xs, None, 0)  # a numpy array; each item's shape is checked below
            if Xs.ndim != 3 or Xs.shape[0] != len(plan):
                raise ValueError(
                    f"barycentric_map: X_s must have shape (B, N, d) with B={len(plan)} for a "
                    f"list of plans; got X_s.shape={tuple(Xs.shape)}"
                )
        return np.stack(
            [
                barycentric_map(p, Y[i], X_s=None if Xs is None else Xs[i], validate=validate)
                for i, p in enumerate(plan)
            ]
        )
    if _is_scipy_sparse(plan) or isinstance(plan, np.ndarray):
        return _numpy_barycentric_map(plan, X_t, X_s, validate)
    if not isinstance(plan, Tensor):
        raise TypeError(
            "plan must be a torch.Tensor (dense or sparse COO), a numpy array, a scipy sparse "
            f"matrix or a list of them; got {type(plan).__name__}"
        )
    return _torch_barycentric_map(plan, X_t, X_s, validate)


def _numpy_barycentric_map(plan: Any, X_t: Any, X_s: Any, validate: bool) -> np.ndarray:
    """:func:`barycentric_map` of a numpy array or a scipy sparse matrix."""
    if not isinstance(X_t, np.ndarray):
        raise TypeError(
            f"X_t must be a numpy array for a numpy or scipy plan; got {type(X_t).__name__}"
        )
    sparse = _is_scipy_sparse(plan)
    P = plan.tocsr() if sparse else plan
    if P.ndim == 2 and X_t.ndim == 2 and P.shape[1] == X_t.shape[0]:
        moved = np.asarray(P @ X_t)
        mass = np.asarray(P.sum(axis=1)).reshape(-1, 1)
    elif not sparse and P.ndim == 3 and X_t.ndim == 3 and P.shape[::2] == X_t.shape[:2]:
        moved = P @ X_t
        mass = P.sum(-1, keepdims=True)
    else:
        raise ValueError(
            "plan (N, M) or (B, N, M) and X_t (M, d) or (B, M, d) must agree on M (and "
            f"B); got plan.shape={tuple(P.shape)} and X_t.shape={tuple(X_t.shape)}"
        )
    empty = mass == 0
    if X_s is not None:
        X_s = _numpy_source(X_s, moved.shape[:-1], moved.shape[-1])
        return np.where(empty, X_s, moved / np.where(empty, 1, mass))
    if empty.any():
        _no_mass(validate, empty)
    return moved / mass


def _numpy_source(X_s: Any, lead: tuple[int, ...] | None, d: int) -> np.ndarray:
    """``X_s`` of a numpy or scipy plan, checked: a numpy array of shape (*lead, d).

    ``lead`` None checks the type alone.
    """
    if not isinstance(X_s, np.ndarray):
        raise TypeError(
            "barycentric_map: X_s must be a numpy array for a numpy or scipy plan; got "
            f"{type(X_s).__name__}"
        )
    if lead is not None and X_s.shape != (*lead, d):
        raise ValueError(
            f"barycentric_map: X_s must have shape {(*lead, d)} (one row per row of the plan); "
            f"got X_s.shape={tuple(X_s.shape)}"
        )
    return X_s


def _torch_barycentric_map(plan: Tensor, X_t: Any, X_s: Any, validate: bool) -> Tensor:
    """:func:`barycentric_map` of a dense or sparse COO tensor."""
    X_t = check_tensor(X_t, "X_t")
    dims_ok = plan.dim() in (2, 3) and X_t.dim() == plan.dim() and plan.shape[-1] == X_t.shape[-2]
    if not dims_ok or (plan.dim() == 3 and plan.shape[0] != X_t.shape[0]):
        raise ValueError(
            "plan (N, M) or (B, N, M) and X_t (M, d) or (B, M, d) must agree on M (and B); "
            f"got plan.shape={tuple(plan.shape)} and X_t.shape={tuple(X_t.shape)}"
        )
    if plan.dtype != X_t.dtype or plan.device != X_t.device:
        raise ValueError(
            f"plan must have the dtype and device of X_t ({X_t.dtype} on {X_t.device}); got "
            f"{plan.dtype} on {plan.device}"
        )
    if plan.is_sparse:
        moved = torch.sparse.mm(plan, X_t) if plan.dim() == 2 else torch.bmm(plan, X_t)
        mass = torch.sparse.sum(plan, dim=-1).to_dense().unsqueeze(-1)
    else:
        moved = plan @ X_t
        mass = plan.sum(-1, keepdim=True)
    empty = mass == 0
    if X_s is not None:
        X_s = check_tensor(X_s, "X_s")
        if X_s.shape != moved.shape:
            raise ValueError(
                f"X_s must have shape {tuple(moved.shape)} (one row per row of the plan); got "
                f"X_s.shape={tuple(X_s.shape)}"
            )
        return torch.where(empty, X_s, moved / torch.where(empty, torch.ones_like(mass), mass))
    if validate and bool(empty.any()):
        _no_mass(validate, empty)
    return moved / mass


def _no_mass(validate: bool, empty: Any) -> None:
    if validate:
        flags = empty.detach().cpu().numpy() if isinstance(empty, Tensor) else np.asarray(empty)
        rows = np.flatnonzero(flags.reshape(-1))
        raise ValueError(
            f"plan has rows without mass (the first at flat row {int(rows[0])}): their image "
            "is undefined; pass X_s to map those points to themselves"
        )
