r"""How many trees: the Monte-Carlo error of a tree-sliced value, read from a pilot run.

Every tree-sliced (and sliced) value is the mean of ``T`` i.i.d. per-tree costs
:math:`c_1, \dots, c_T` of mean :math:`\mu` and standard deviation :math:`\sigma`, or its
``1/p`` root. Its standard error is :math:`\sigma / \sqrt T` for the mean (``power=True``)
and, by the delta method (as ``log["std_error"]``), :math:`\sigma / (p\, \mu^{1 - 1/p}
\sqrt T)` for the root :math:`\mu^{1/p}`. Relative to the value both read

.. math::

    \frac{\mathrm{se}}{\mathrm{value}} = \frac{\sigma}{q\, \mu \sqrt T}, \qquad
    q = 1 \text{ with } \texttt{power}, \quad q = p \text{ otherwise},

so a target relative error :math:`r` needs :math:`T = \lceil (\sigma / (q \mu r))^2
\rceil` trees. :func:`trees_needed` estimates :math:`\sigma / \mu` from the per-tree costs
of a pilot call (``log=True``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tsw.core._validation import check_bool, check_p

__all__ = ["trees_needed"]

#: the most trees :func:`trees_needed` answers (beyond, the target is out of reach)
MAX_TREES = 1e15


def trees_needed(
    per_tree: Tensor | np.ndarray | Mapping[str, Any],
    rel_std_error: float = 0.01,
    *,
    p: float = 1,
    power: bool = False,
) -> int:
    r"""Return the number of trees for a target relative standard error, from a pilot run.

    .. math::

        T = \Big\lceil \Big(\frac{\hat\sigma}{q\, \hat\mu\, r}\Big)^2 \Big\rceil,
        \qquad q = p \ (\text{the } 1/p \text{ root}), \quad q = 1 \ (\texttt{power}),

    with :math:`\hat\mu` and :math:`\hat\sigma` (``ddof=1``) the mean and standard
    deviation of the pilot's per-tree costs and :math:`r` = ``rel_std_error``: the
    standard error of the value, relative to the value, is :math:`\hat\sigma / (q \hat\mu
    \sqrt T)` (the delta method through the root, as ``log["std_error"]``). The same
    holds for the directions of the sliced baselines (``log["per_tree"]`` of ``tsw.sw``).

    Parameters
    ----------
    per_tree : Tensor or ndarray of shape (T,) or (B, T), or the ``log`` dict
        The pilot's per-tree costs, ``log["per_tree"]`` of a call with ``log=True`` and
        the default ``sampling="iid"`` (or that ``log`` itself); ``T >= 2``.
    rel_std_error : float, default 0.01
        Target standard error relative to the value, ``> 0`` (0.01: 1%).
    p : float, default 1
        The ``p`` of the pilot call (the per-tree costs are :math:`ST_p^p` or
        :math:`W_p^p`).
    power : bool, default False
        ``True`` if the value used is the ``p``-th power (``power=True``): no root.

    Returns
    -------
    int
        Trees (or directions) needed, at least 1; for a batch, the most any item needs.
        The count is for i.i.d. trees of the same shape (``n_lines``), data and options
        as the pilot; ``sampling="orthogonal"`` or ``"qmc"`` reach the target with fewer
        (``python -m benchmarks.variance`` measures how many fewer).

    Raises
    ------
    TypeError
        If ``per_tree`` is not a tensor, an array or a mapping with ``"per_tree"``.
    ValueError
        If it has fewer than 2 trees or a non-finite value, if its mean is not positive
        (a zero value has no relative error), or if ``rel_std_error`` is not positive.

    Notes
    -----
    The estimate of :math:`\sigma / \mu` from a pilot of :math:`T_0` trees has a relative
    error of about :math:`1 / \sqrt{2 T_0}` (for roughly Gaussian costs), so the
    prediction of ``T`` one of about :math:`2 / \sqrt{2 T_0}`: a pilot of 50 trees
    predicts ``T`` to about 20% (``tests/test_monte_carlo.py`` checks the prediction
    against the spread over 200 seeds).

    Examples
    --------
    >>> import torch, tsw
    >>> g = torch.Generator().manual_seed(0)
    >>> X, Y = torch.randn(200, 16, generator=g), torch.randn(200, 16, generator=g) + 0.5
    >>> _, log = tsw.db_tsw(X, Y, n_trees=50, seed=0, log=True)  # a pilot of 50 trees
    >>> T = tsw.trees_needed(log, rel_std_error=0.005)  # trees for a 0.5% standard error
    >>> value, log = tsw.db_tsw(X, Y, n_trees=T, seed=1, log=True)
    >>> bool(log["std_error"] / value < 0.006)
    True
    """
    if isinstance(per_tree, Mapping):
        if "per_tree" not in per_tree:
            raise TypeError(
                'per_tree must be a tensor, an array or a log dict with a "per_tree" key; '
                f"got a mapping with keys {sorted(per_tree)}"
            )
        per_tree = per_tree["per_tree"]
    if isinstance(per_tree, np.ndarray):
        per_tree = torch.from_numpy(np.asarray(per_tree, dtype=np.float64))
    if not isinstance(per_tree, Tensor):
        raise TypeError(
            "per_tree must be a tensor or array of shape (T,) or (B, T), or a log dict; got "
            f"{type(per_tree).__name__}"
        )
    c = per_tree.detach().to(torch.float64)
    if c.ndim not in (1, 2) or c.shape[-1] < 2:
        raise ValueError(
            "per_tree must have shape (T,) or (B, T) with T >= 2 trees; got "
            f"per_tree.shape={tuple(c.shape)}"
        )
    if not bool(torch.isfinite(c).all()):
        raise ValueError("per_tree contains NaN or Inf values")
    if isinstance(rel_std_error, bool) or not isinstance(rel_std_error, int | float):
        raise TypeError(
            f"rel_std_error must be a positive float; got {type(rel_std_error).__name__}"
        )
    if not (math.isfinite(rel_std_error) and rel_std_error > 0):
        raise ValueError(f"rel_std_error must be a positive float; got {rel_std_error}")
    p = check_p(p)
    q = 1.0 if check_bool(power, "power") else p
    mean = c.mean(-1)
    if not bool((mean > 0).all()):
        raise ValueError(
            "per_tree must have a positive mean (a zero value has no relative error); got "
            f"mean {float(mean.min()):.3g}"
        )
    ratio = c.std(-1, correction=1) / (q * mean * rel_std_error)
    trees = float((ratio**2).max()) * (1 - 1e-12)
    if not math.isfinite(trees) or trees > MAX_TREES:
        raise ValueError(
            f"rel_std_error={rel_std_error:g} would take more than {MAX_TREES:.0e} trees for "
            f"this pilot (relative spread of the per-tree costs "
            f"{float(ratio.max()) * rel_std_error:.3g}); "
            "ask for a larger rel_std_error"
        )
    return max(1, math.ceil(trees))
