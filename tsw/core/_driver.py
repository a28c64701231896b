r"""The driver: one pipeline behind every distance of :mod:`tsw`.

A distance is three things:

1. how its slices are drawn (:mod:`tsw.core._slices`, :mod:`tsw.core.trees`);
2. a *projection*: the validated measures and a block of slices mapped to a
   :class:`Projection`, the coordinates of the atoms on every line of every tree, their
   signed masses and the attachment structure;
3. a closed form turning a projection into one cost per slice (:func:`closed_form`, or
   a method's own, such as POT's circle solver for SSW).

Everything else is here, written once: validation of the measures and of ``p``, the
seeding contract, explicit-or-drawn slices, batching, the mean over the slices, the
``1/p`` root (with a zero subgradient at 0), dtype and device, and unbatching. A method
module holds its mathematics only; its public function reads::

    problem = Problem.of(X_s, X_t, a, b, p=p, seed=seed, generator=generator,
                         validate=validate)
    trees = resolve_trees(problem.measures, trees, ..., rng=problem.rng)  # checked or drawn
    return problem.evaluate(my_projection, trees)

``ARCHITECTURE.md`` at the repository root walks through adding a distance.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple, TypeAlias

import numpy as np
import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from tsw.core._random import Sampler, resolve_sampler
from tsw.core._safe import safe_root
from tsw.core._validation import (
    Measures,
    check_bool,
    check_measure,
    check_measures,
    check_p,
    check_positive_int,
)
from tsw.core.tree_wasserstein import line_cost, line_system_cost
from tsw.core.wasserstein_1d import wasserstein_1d

__all__ = [
    "CHAIN",
    "LINE",
    "RAYS",
    "STAR",
    "Problem",
    "Projection",
    "closed_form",
    "driver_options",
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
        Coordinate of each of the ``n = N + M`` atoms (source first) on each line of
        each slice; size 1 on the line axis when all lines of a tree share it (sorted
        once per tree).
    masses : Tensor broadcastable to (B, T, k, n); (B, 1|T, n) for ``LINE``
        Signed masses (source minus target) on each line; for ``LINE`` the
        non-negative weights, the first ``n_source`` atoms being the source.
    structure : {"star", "chain", "rays", "line"}
        How the lines of a slice are glued (see the module constants).
    attachments : Tensor of shape (B|1, T, k), optional
        ``CHAIN`` only: where line ``i`` starts on line ``i - 1``.
    n_source : int
        ``LINE`` only: the number of source atoms.
    """

    coords: Tensor
    masses: Tensor
    structure: str = STAR
    attachments: Tensor | None = None
    n_source: int = 0


#: What a distance returns: a tensor, or for numpy inputs a numpy array (a numpy scalar
#: when unbatched); with ``log=True``, the pair ``(value, log)``.
Value: TypeAlias = Tensor | np.ndarray | np.generic
Result: TypeAlias = Value | tuple[Value, dict[str, Any]]


def from_numpy(x: object, name: str) -> object:
    """Convert a numpy array to a tensor of its float dtype (no gradient); pass the rest.

    Only float32 and float64 arrays are accepted, as for tensors.
    """
    if not isinstance(x, np.ndarray):
        return x
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(
            f"{name} must have dtype float32 or float64 (a numpy array or a tensor); got a "
            f"numpy array of dtype {x.dtype}"
        )
    return torch.from_numpy(np.ascontiguousarray(x))


def _check_same_kind(numpy: bool, *named: tuple[object, str]) -> None:
    """Raise unless every given input is a numpy array (``numpy``) or none is."""
    for x, name in named:
        if isinstance(x, np.ndarray) != numpy and isinstance(x, np.ndarray | Tensor):
            kind = "a numpy array" if numpy else "a torch.Tensor"
            raise TypeError(
                f"{name} must be {kind} like X_s (all inputs tensors, or all numpy arrays); "
                f"got {type(x).__name__}"
            )


def to_numpy(t: Tensor) -> np.ndarray:
    """Return a detached CPU copy as numpy: a numpy scalar for a 0-d tensor."""
    out = t.detach().cpu().numpy()
    return out[()] if out.ndim == 0 else out


#: working memory allowed for one block of slices when ``chunk_size="auto"``
MEMORY_BUDGET = 2 * 2**30
#: working elements per (line x atom) of a block, forward and backward: measured about
#: 54 bytes (13.5 float32 elements) for Db-TSW at d = 64; rounded up
WORK_ELEMENTS_PER_LINE_POINT = 16


def slice_counts(slices: Any) -> tuple[int, int] | None:
    """Count ``(slices, lines per slice)`` of trees or (..., d, L) directions; else None."""
    if isinstance(slices, Tensor):
        return slices.shape[-1], 1
    if hasattr(slices, "narrow"):
        return slices.n_trees, slices.n_lines
    return None


def narrow_slices(slices: Any, start: int, stop: int) -> Any:
    """Slices ``start`` to ``stop - 1`` of tree systems or (..., d, L) directions."""
    if isinstance(slices, Tensor):
        return slices[..., start:stop]
    return slices.narrow(start, stop)


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
    bit-identical coordinates and ``d(mu, mu) = 0`` exactly.
    """
    coords = torch.cat([torch.matmul(Y_s, directions), torch.matmul(Y_t, directions)], dim=-2)
    return coords.transpose(-1, -2)


def closed_form(projection: Projection, p: float) -> Tensor:
    r"""Cost per slice :math:`\sum_e w_e |\Delta_e|^p` (no root), shape (B, T).

    Trees (``STAR``, ``CHAIN``, ``RAYS``): the tree Wasserstein-1 distance at ``p = 1``,
    the Sobolev transport :math:`ST_p^p` above (:func:`tsw.line_system_cost`). ``LINE``:
    the one-dimensional :math:`W_p^p` (:func:`tsw.wasserstein_1d`).
    """
    c, m = projection.coords, projection.masses
    if projection.structure == LINE:
        n = projection.n_source
        return wasserstein_1d(c[..., :n], c[..., n:], m[..., :n], m[..., n:], p)
    if projection.structure == RAYS:
        return line_cost(c, m, p, rays=True).sum(-1)
    if projection.structure == CHAIN:
        return line_system_cost(c, m, projection.attachments, p)
    return line_system_cost(c, m, None, p)


#: the documentation of the options every distance takes from the driver, inserted into
#: each public function's Parameters section by :func:`driver_options`
DRIVER_OPTIONS_DOC = """\
power : bool, default False
    Return the ``p``-th power of the value, the mean over the slices of the per-slice
    costs, without the ``1/p`` root: the usual training objective (``SW_2^2`` in SWAE
    and SW generators). Its gradient stays bounded where the two measures meet; the
    root's is unbounded there for ``p > 1``. Both forms are equal at ``p = 1``.
log : bool, default False
    Return ``(value, log)``. ``log["per_tree"]``, shape (T,) or (B, T), holds the
    per-slice costs (differentiable): their mean, to the power ``1/p`` unless ``power``,
    is the value. ``log["trees"]`` holds the slices used (pass them back as explicit
    slices to recompute the value). ``log["std_error"]`` is the Monte-Carlo standard
    error of the returned value: the standard error of the mean over the slices,
    ``std(per_tree, ddof=1) / sqrt(T)`` (NaN for one slice), carried through the
    ``1/p`` root by the delta method, ``se / (p * mean^(1 - 1/p))`` (0 when the mean
    is 0); detached. Inputs given as numpy arrays (float32 or float64, no gradient) give
    numpy outputs: a numpy scalar (an array for batched inputs), numpy in ``log``."""

#: the memory option of the tree distances and SW
CHUNK_DOC = """\
chunk_size : int, "auto" or None, default "auto"
    Trees (directions for SW) evaluated at once. ``None``: all at once. An int: blocks
    of that many, each projected under activation checkpointing, so that the peak
    working memory is that of one block (the backward pass recomputes each block's
    forward: about one more forward pass of time). ``"auto"``: the largest block whose
    working memory, estimated at 16 elements per (line x atom), stays under 2 GiB;
    problems below that (e.g. 1000 lines x 1e5 atoms in float32 is 6.4 GB: 4 blocks)
    run in one block as with ``None``. Values and gradients do not depend on it (up to
    rounding). On Linux, glibc keeps the freed memory of earlier blocks in its heap
    unless ``MALLOC_MMAP_THRESHOLD_`` is set (e.g. to 65536) or another allocator is
    used, so the resident size can exceed the live memory."""

#: the extra keys of the sliced baselines, with POT's meaning
SLICED_LOG_DOC = """\
    Sliced baselines also give POT's keys: ``log["projections"]``, the directions
    used, and ``log["projected_emds"]``, the per-direction costs (``W_p^p``, as
    ``log["per_tree"]``)."""


def driver_options(sliced: bool = False, chunked: bool = False) -> Callable[[Callable], Callable]:
    """Insert :data:`DRIVER_OPTIONS_DOC` into a function's numpydoc Parameters section.

    Written once here, documented in every distance (and in the loss modules built from
    them, which read the function's Parameters); ``chunked`` adds :data:`CHUNK_DOC`.
    """
    text = DRIVER_OPTIONS_DOC + ("\n" + SLICED_LOG_DOC if sliced else "")
    text += "\n" + CHUNK_DOC if chunked else ""
    block = "".join(f"    {line}\n" if line else "\n" for line in text.splitlines())

    def decorate(fn: Callable) -> Callable:
        doc = fn.__doc__ or ""
        marker = "\n\n    Returns\n    -------\n"
        if marker not in doc:
            raise ValueError(f"{fn.__name__}'s docstring has no Returns section")
        fn.__doc__ = doc.replace(marker, "\n" + block + marker[1:], 1)
        return fn

    return decorate


@dataclasses.dataclass(frozen=True)
class Problem:
    """A validated call: measures in batched form, ``p``, the randomness and the options.

    Build it with :meth:`of` (two measures) or :meth:`of_one` (a measure against a fixed
    reference, such as the uniform measure on the sphere); methods that transform the
    measures (a map, a normalisation) use :meth:`replace`.
    """

    measures: Measures
    p: float
    rng: Sampler
    validate: bool
    power: bool = False
    log: bool = False
    numpy: bool = False
    chunk_size: int | str | None = "auto"

    @classmethod
    def of(
        cls,
        X_s: object,
        X_t: object,
        a: Tensor | None,
        b: Tensor | None,
        *,
        p: object,
        seed: int | None,
        generator: torch.Generator | None,
        validate: bool,
        balanced: bool = True,
        power: bool = False,
        log: bool = False,
        chunk_size: int | str | None = "auto",
    ) -> Problem:
        """Validate two measures, ``p``, the randomness and the driver's options.

        numpy inputs are converted to tensors (no gradient); the value is then returned
        as numpy (see :meth:`finish`).
        """
        numpy = isinstance(X_s, np.ndarray)
        _check_same_kind(numpy, (X_t, "X_t"), (a, "a"), (b, "b"))
        tensors = [from_numpy(x, n) for x, n in ((X_s, "X_s"), (X_t, "X_t"), (a, "a"), (b, "b"))]
        measures = check_measures(*tensors, balanced=balanced, validate=validate)
        return cls._build(measures, p, seed, generator, validate, power, log, numpy, chunk_size)

    @classmethod
    def of_one(
        cls,
        X_s: object,
        a: Tensor | None,
        *,
        p: object,
        seed: int | None,
        generator: torch.Generator | None,
        validate: bool,
        power: bool = False,
        log: bool = False,
        chunk_size: int | str | None = "auto",
    ) -> Problem:
        """Validate one measure; ``measures.X_t`` and ``measures.b`` are then empty."""
        numpy = isinstance(X_s, np.ndarray)
        _check_same_kind(numpy, (a, "a"))
        X, w, batched = check_measure(from_numpy(X_s, "X_s"), from_numpy(a, "a"), validate=validate)
        measures = Measures(X, X[..., :0, :], w, w[..., :0], batched)
        return cls._build(measures, p, seed, generator, validate, power, log, numpy, chunk_size)

    @classmethod
    def _build(
        cls,
        measures: Measures,
        p: object,
        seed: int | None,
        generator: torch.Generator | None,
        validate: bool,
        power: bool,
        log: bool,
        numpy: bool,
        chunk_size: int | str | None,
    ) -> Problem:
        p = check_p(p)
        power, log = check_bool(power, "power"), check_bool(log, "log")
        if chunk_size is not None and chunk_size != "auto":
            check_positive_int(chunk_size, "chunk_size")
        X = measures.X_s
        rng = resolve_sampler(seed, generator, dtype=X.dtype, device=X.device)
        return cls(measures, p, rng, validate, power, log, numpy, chunk_size)

    def replace(self, **changes: Any) -> Problem:
        """Return a copy with some fields replaced (e.g. mapped or spherical measures)."""
        return dataclasses.replace(self, **changes)

    def evaluate(
        self,
        project: Callable[[Measures, Any], Projection],
        slices: Any,
        cost: Callable[[Projection, float], Tensor] = closed_form,
        *,
        projections: Tensor | None = None,
        narrow: Callable[[Any, int, int], Any] | None = None,
    ) -> Result:
        """Project, apply the closed form, and finish (see :meth:`finish`).

        With a ``chunk_size`` smaller than the number of slices, blocks of slices are
        projected one at a time under activation checkpointing: no block's
        intermediates outlive its forward pass, and the backward pass recomputes each
        block alone, so the peak working memory is that of one block (at the price of
        a second forward pass). ``narrow(slices, start, stop)`` cuts a block (tree
        containers and (d, L) directions by default).
        """
        per_slice = self._per_slice(project, slices, cost, narrow)
        return self.finish(per_slice, slices, projections)

    def _per_slice(
        self,
        project: Callable[[Measures, Any], Projection],
        slices: Any,
        cost: Callable[[Projection, float], Tensor],
        narrow: Callable[[Any, int, int], Any] | None,
    ) -> Tensor:
        def run(block: Any) -> Tensor:
            return cost(project(self.measures, block), self.p)

        counts = slice_counts(slices if narrow is None else slices[0])
        if counts is None:  # slices that are not cut into blocks (S3W's rotations)
            return run(slices)
        T, k = counts
        chunk = self.chunk_trees(T, k)
        if chunk >= T:
            return run(slices)
        narrow = narrow_slices if narrow is None else narrow
        needs_grad = torch.is_grad_enabled() and any(
            t.requires_grad for t in self.measures if isinstance(t, Tensor)
        )
        parts = []
        for start in range(0, T, chunk):
            block = narrow(slices, start, min(start + chunk, T))
            if needs_grad:
                part = checkpoint(run, block, use_reentrant=False, preserve_rng_state=False)
            else:
                part = run(block)
            parts.append(part)
        return torch.cat(parts, dim=-1)

    def chunk_trees(self, n_slices: int, lines_per_slice: int) -> int:
        """Slices per block: ``chunk_size``, or (``"auto"``) the most within the budget."""
        if self.chunk_size is None:
            return n_slices
        if isinstance(self.chunk_size, int):  # checked >= 1 by Problem.of
            return self.chunk_size
        X = self.measures.X_s
        n = X.shape[0] * (X.shape[-2] + self.measures.X_t.shape[-2])
        per_slice = WORK_ELEMENTS_PER_LINE_POINT * X.element_size() * lines_per_slice * n
        return max(1, min(n_slices, MEMORY_BUDGET // max(per_slice, 1)))

    def finish(
        self, per_slice: Tensor, slices: Any = None, projections: Tensor | None = None
    ) -> Result:
        r"""Return the value from (B, T) per-slice costs, unbatched if the input was.

        ``(mean over slices) ** (1/p)`` with a zero subgradient at 0, or the mean itself
        with ``power``. With ``log``, ``(value, log)`` (see :data:`DRIVER_OPTIONS_DOC`);
        ``projections`` adds POT's keys of the sliced baselines.
        """
        mean = per_slice.mean(-1)
        value = mean if self.power else safe_root(mean, self.p)
        batched = self.measures.batched

        def unbatch(t: Tensor) -> Value:
            t = t if batched else t[0]
            return to_numpy(t) if self.numpy else t

        if not self.log:
            return unbatch(value)
        info: dict[str, Any] = {
            "per_tree": unbatch(per_slice),
            "trees": slices,
            "std_error": unbatch(self._std_error(per_slice.detach(), mean.detach())),
        }
        if projections is not None:
            info["projections"] = to_numpy(projections) if self.numpy else projections
            info["projected_emds"] = info["per_tree"]
        return unbatch(value), info

    def _std_error(self, per_slice: Tensor, mean: Tensor) -> Tensor:
        """Return the standard error of the value: of the mean over slices, through the root."""
        T = per_slice.shape[-1]
        if T < 2:
            return torch.full_like(mean, math.nan)
        se = per_slice.std(-1, correction=1) / math.sqrt(T)
        if self.power or self.p == 1:
            return se
        # d/dm m^(1/p) = m^(1/p - 1) / p, and se = 0 when every slice costs 0
        scale = torch.where(mean > 0, mean, torch.ones_like(mean)).pow(1 / self.p - 1) / self.p
        return torch.where(mean > 0, se * scale, torch.zeros_like(se))
