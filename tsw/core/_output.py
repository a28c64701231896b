r"""What a distance returns: the value from its per-slice costs, and the log.

A method's function returns an :class:`Evaluation` (its per-slice costs and the slices);
:func:`finish` makes the value the caller receives: the mean over the slices, its
``1/p`` root (unless ``power``), unbatched when the inputs were, numpy for numpy inputs,
and with ``log=True`` the pair ``(value, log)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import numpy as np
import torch
from torch import Tensor

from tsw.core._problem import to_numpy
from tsw.core._ranges import check_powers
from tsw.core._safe import safe_root

if TYPE_CHECKING:
    from tsw.core._problem import Problem

__all__ = ["Evaluation", "Result", "Value", "finish", "std_error"]

#: What a distance returns: a tensor, or for numpy inputs a numpy array (a numpy scalar
#: when unbatched); with ``log=True``, the pair ``(value, log)``.
Value: TypeAlias = Tensor | np.ndarray | np.generic
Result: TypeAlias = Value | tuple[Value, dict[str, Any]]


class Evaluation(NamedTuple):
    """The per-slice costs of a call, before the mean and the root.

    Attributes
    ----------
    per_slice : Tensor of shape (B, T)
        The cost of every slice (no root).
    slices : object
        The slices used (trees or directions), reported as ``log["trees"]``.
    projections : Tensor, optional
        The directions of a sliced baseline, reported under POT's keys
        ``log["projections"]`` (and its costs as ``log["projected_emds"]``).
    extra : mapping of str to Tensor, optional
        More log entries, each a (B, ...) tensor unbatched and converted as
        ``per_slice`` is; they replace the entries of the same name. A method whose
        value averages transformed costs (control variates, importance weights) reports
        the plain per-direction costs here as ``projected_emds``.
    scale : Tensor of shape (B,), optional
        The costs were computed from the masses divided by ``scale`` (costs of degree
        ``p`` in the masses, :func:`~tsw.core._driver.evaluate`): the value is ``scale``
        times the root of their mean, and the true per-slice costs ``scale ** p`` times
        ``per_slice``.
    """

    per_slice: Tensor
    slices: Any = None
    projections: Tensor | None = None
    extra: Mapping[str, Tensor] | None = None
    scale: Tensor | None = None


def std_error(per_slice: Tensor, mean: Tensor, p: float, power: bool) -> Tensor:
    """Return the Monte-Carlo standard error of the value from (B, T) per-slice costs.

    The standard error of the mean over the slices, ``std(ddof=1) / sqrt(T)`` (NaN for
    one slice), carried through the ``1/p`` root by the delta method.
    """
    T = per_slice.shape[-1]
    if T < 2:
        return torch.full_like(mean, math.nan)
    se = per_slice.std(-1, correction=1) / math.sqrt(T)
    if power or p == 1:
        return se
    # d/dm m^(1/p) = m^(1/p - 1) / p, and se = 0 when every slice costs 0
    scale = torch.where(mean > 0, mean, torch.ones_like(mean)).pow(1 / p - 1) / p
    return torch.where(mean > 0, se * scale, torch.zeros_like(se))


def _numpy_log(value: Any) -> Any:
    """Numpy arrays for the tensors of a log entry (tree containers field by field)."""
    if isinstance(value, Tensor):
        return to_numpy(value)
    if isinstance(value, tuple):
        return tuple(_numpy_log(v) for v in value)
    to = getattr(value, "numpy", None)
    return to() if callable(to) else value


def finish(problem: Problem, evaluation: Evaluation) -> Result:
    r"""Return the value from the per-slice costs, unbatched if the input was.

    ``(mean over slices) ** (1/p)`` with a zero subgradient at 0, or the mean itself
    with ``power``; with ``validate``, a mean that left the dtype's range raises
    (:func:`~tsw.core._ranges.check_powers`). With ``log``, ``(value, log)``:
    ``per_tree`` (differentiable), ``trees`` (the slices), ``std_error`` (detached),
    POT's ``projections`` and ``projected_emds`` for the sliced baselines, and the
    evaluation's ``extra`` entries.
    """
    per_slice, p, scale = evaluation.per_slice, problem.p, evaluation.scale
    mean = per_slice.mean(-1)
    if problem.validate:
        check_powers(problem.measures, p, mean, problem.power, per_slice)
    value = mean if problem.power else safe_root(mean, p)
    # the costs of masses divided by scale, of degree p in them: the value's factor
    factor = None if scale is None else scale**p if problem.power else scale
    if factor is not None:
        value = value * factor
    batched = problem.measures.batched

    def unbatch(t: Tensor) -> Any:
        t = t if batched else t[0]
        return to_numpy(t) if problem.numpy else t

    if not problem.log:
        return unbatch(value)
    se = std_error(per_slice.detach(), mean.detach(), p, problem.power)
    if scale is not None and factor is not None:
        se, per_slice = se * factor, per_slice * (scale**p).unsqueeze(-1)
    info: dict[str, Any] = {
        "per_tree": unbatch(per_slice),
        "trees": _numpy_log(evaluation.slices) if problem.numpy else evaluation.slices,
        "std_error": unbatch(se),
    }
    if evaluation.projections is not None:
        proj = evaluation.projections
        info["projections"] = to_numpy(proj) if problem.numpy else proj
        info["projected_emds"] = info["per_tree"]
    for key, entry in (evaluation.extra or {}).items():
        info[key] = unbatch(entry)
    return unbatch(value), info
