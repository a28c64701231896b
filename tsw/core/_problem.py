"""The problem a distance solves: validated measures, ``p``, the random stream, the options.

A :class:`Problem` is a plain value. :func:`build` makes one from a call's arguments
(numpy arrays converted, the measures validated, the seed resolved); the method's
function then reads it, and :func:`tsw.core._driver.evaluate` runs it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tsw.core._distributed import Group, check_group, gather_points, shared_seed
from tsw.core._random import Sampler, Seed, resolve_sampler
from tsw.core._validation import Measures, check_measure, check_measures, check_p

__all__ = ["Problem", "build", "from_numpy", "to_numpy"]


@dataclasses.dataclass(frozen=True)
class Problem:
    """A validated call: measures in batched form, ``p``, the randomness and the options.

    Attributes
    ----------
    measures : Measures
        Batched measures (an empty target for a distance to a reference measure).
    p : float
        The exponent.
    rng : Sampler
        The random stream: every draw of the call comes from it, in a fixed order.
    validate, power, log : bool
        The shared options of the same names.
    numpy : bool
        The inputs were numpy arrays: the outputs are too.
    chunk_size : int, "auto" or None
        Slices evaluated at once (:func:`tsw.core._blocks.plan_blocks`).
    group : Group or None
        The ranks that share the slices (``process_group=``).
    weighted : (bool, bool)
        Whether ``a`` and ``b`` were given (else uniform).
    """

    measures: Measures
    p: float
    rng: Sampler
    validate: bool = True
    power: bool = False
    log: bool = False
    numpy: bool = False
    chunk_size: int | str | None = "auto"
    group: Group | None = None
    weighted: tuple[bool, bool] = (False, False)

    def replace(self, **changes: Any) -> Problem:
        """Return a copy with some fields replaced (e.g. mapped or spherical measures)."""
        return dataclasses.replace(self, **changes)


def from_numpy(x: object, name: str, dtype: np.dtype | None = None) -> object:
    """Convert a numpy array to a tensor of its float dtype (no gradient); pass the rest.

    Only float32 and float64 arrays are accepted, as for tensors. ``dtype`` (the points'
    dtype, for weights) casts a float array of the other precision to it, as POT's numpy
    calls mix float32 points with float64 weights.
    """
    if not isinstance(x, np.ndarray):
        return x
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(
            f"{name} must have dtype float32 or float64 (a numpy array or a tensor); got a "
            f"numpy array of dtype {x.dtype}"
        )
    if dtype is not None and x.dtype != dtype:
        x = x.astype(dtype)
    x = np.ascontiguousarray(x)
    if not x.flags.writeable:  # torch.from_numpy warns about read-only arrays
        x = x.copy()
    return torch.from_numpy(x)


def to_numpy(t: Tensor) -> np.ndarray:
    """Return a detached CPU copy as numpy: a numpy scalar for a 0-d tensor."""
    out = t.detach().cpu().numpy()
    return out[()] if out.ndim == 0 else out


def _check_same_kind(numpy: bool, *named: tuple[object, str]) -> None:
    """Raise unless every given input is a numpy array (``numpy``) or none is."""
    for x, name in named:
        if isinstance(x, np.ndarray) != numpy and isinstance(x, np.ndarray | Tensor):
            kind = "a numpy array" if numpy else "a torch.Tensor"
            raise TypeError(
                f"{name} must be {kind} like X_s (all inputs tensors, or all numpy arrays); "
                f"got {type(x).__name__}"
            )


def build(
    X_s: object,
    X_t: object,
    a: object,
    b: object,
    *,
    one_measure: bool = False,
    balanced: bool = True,
    p: object,
    seed: Seed = None,
    generator: torch.Generator | None = None,
    validate: bool = True,
    power: bool = False,
    log: bool = False,
    chunk_size: int | str | None = "auto",
    process_group: object = None,
    gather: bool = False,
) -> Problem:
    """Validate the measures and build the :class:`Problem` of a call.

    numpy inputs are converted to tensors (no gradient), and the value is then returned
    as numpy. ``one_measure``: ``X_t`` and ``b`` are not given, and the measures' target
    is empty (a distance to a reference measure). With ``gather`` the inputs are this
    rank's shards: each is validated, then the unions are gathered and validated
    (:mod:`tsw.core._distributed`). The options are checked by the caller
    (:func:`tsw.core._api.distance`). On the ``meta`` device, which holds no values,
    the value checks are skipped.
    """
    if not isinstance(X_s, np.ndarray | Tensor):
        raise TypeError(
            "X_s must be a torch.Tensor or a numpy array of shape (N, d) or (B, N, d); got "
            f"{type(X_s).__name__}"
        )
    numpy = isinstance(X_s, np.ndarray)
    _check_same_kind(numpy, (X_t, "X_t"), (a, "a"), (b, "b"))
    if isinstance(X_s, Tensor) and X_s.device.type == "meta":
        validate = False  # no values to check: shapes, dtypes and devices are checked
    Xs = from_numpy(X_s, "X_s")
    dtype = X_s.dtype if isinstance(X_s, np.ndarray) else None
    Xt = from_numpy(X_t, "X_t")
    wa, wb = from_numpy(a, "a", dtype), from_numpy(b, "b", dtype)
    group = check_group(process_group, gather)
    if one_measure:
        if group is not None and group.gather:
            check_measure(Xs, wa, validate=validate)  # the shard
            Xs, wa = gather_points([(Xs, -2, "X_s"), (wa, -1, "a")], group)
        X, w, batched = check_measure(Xs, wa, validate=validate)
        measures = Measures(X, X[..., :0, :], w, w[..., :0], batched)
    else:
        if group is not None and group.gather:
            check_measures(Xs, Xt, wa, wb, balanced=False, validate=validate)  # the shards
            Xs, Xt, wa, wb = gather_points(
                [(Xs, -2, "X_s"), (Xt, -2, "X_t"), (wa, -1, "a"), (wb, -1, "b")], group
            )
        measures = check_measures(Xs, Xt, wa, wb, balanced=balanced, validate=validate)
    X = measures.X_s
    if group is not None and seed is None and generator is None:
        seed = shared_seed(group, X.device)  # the ranks must draw the same slices
    rng = resolve_sampler(seed, generator, dtype=X.dtype, device=X.device)
    weighted = (a is not None, b is not None)
    return Problem(
        measures, check_p(p), rng, validate, power, log, numpy, chunk_size, group, weighted
    )
