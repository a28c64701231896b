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

import contextlib
import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple, TypeAlias, TypeVar, overload

import numpy as np
import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from tsw.core import _kernels
from tsw.core._distributed import (
    Group,
    all_tensors,
    check_agree,
    check_group,
    gather_points,
    gather_slices,
    shared_seed,
    sum_gradients,
)
from tsw.core._gradients import products, route_into
from tsw.core._random import Sampler, resolve_sampler
from tsw.core._safe import safe_root
from tsw.core._validation import (
    Measures,
    check_bool,
    check_chunk_size,
    check_measure,
    check_measures,
    check_p,
    check_range,
)
from tsw.core.tree_wasserstein import line_cost, system_cost
from tsw.core.wasserstein_1d import quantile_cost

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


#: What a method's own projection returns when it brings its own closed form too (STSW's
#: angles before the split, :class:`tsw.sphere._geometry.SplitRays`)
P = TypeVar("P")

#: A front end of :meth:`Problem.evaluate`: ``(measures, slices) -> (measures, slices)``,
#: applied once per call before the blocks (see :func:`tsw.euclidean._lines.centre`).
Front: TypeAlias = Callable[[Measures, Any], tuple[Measures, Any]]

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
#: on the CPU, ``chunk_size="auto"`` also caps a block at about this many (line x atom)
#: elements, so that a block's passes run in cache: measured forward + backward of Db-TSW
#: (float32, one thread, ratios to the unblocked call in one run): 1.39x faster at
#: N = 2000, d = 64 (64-tree blocks, 1.0e6 elements) and 1.47x at N = 1e4, d = 128
#: (25-tree blocks, 2.0e6 elements); blocks of 1 tree were slower than no blocks
CACHE_BLOCK_ELEMENTS = 2**20
#: the same cap where the closed form runs as compiled loops (:mod:`tsw.core._kernels`:
#: trees on the CPU, float32/float64, p in {1, 2}, Numba installed). Those loops stream
#: each row once, so cache-sized blocks gain nothing and small blocks only add their
#: per-block work (the product, the leaves' set-up, about 3 ms a block at N = 2000,
#: d = 64). What bounds it is glibc's malloc: a block's largest array (the permutation,
#: 8 bytes an element, 16 MiB at this cap) stays under 32 MiB, the largest dynamic mmap
#: threshold, so that its memory is reused from block to block and call to call instead
#: of being mapped afresh. (A problem of up to twice the cap runs as one block rather
#: than two, so its permutation may reach 32 MiB; a block of ``d / 3`` lines, the least
#: a block takes, or of one tree across all items of a batch with batched trees, may
#: exceed the cap.) Measured on Db-TSW, float32, one thread, 250 x 4, side by side
#: in one process, default malloc, time against 2^24 elements: 0.64 (N = 1e4, d = 2),
#: 0.73 (d = 64; 176491 page faults a call at 2^24, 2004 here), 0.83 (d = 784), 0.82
#: (N = 5e4, d = 64); with page faults ruled out (``MALLOC_MMAP_THRESHOLD_=1073741824
#: MALLOC_TRIM_THRESHOLD_=4294967296``) 1.01 at N = 1e4, d = 64. A batch of 16 x 200
#: points (5 items a block instead of all 16) went from 1.34x to 0.97x the time of a
#: loop over its items (2^22 elements: 0.63-0.82 against 2^24, more page faults)
COMPILED_BLOCK_ELEMENTS = 2**21
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
    if projection.structure == LINE:
        n = projection.n_source
        return quantile_cost(c[..., :n], c[..., n:], m[..., :n], m[..., n:], p)
    if projection.structure == RAYS:
        return line_cost(c, m, p, rays=True).sum(-1)
    if projection.structure == CHAIN:
        return system_cost(c, m, projection.attachments, p)
    return system_cost(c, m, None, p)


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
    of that many. ``"auto"``: blocks whose working memory, estimated at 16 elements per
    (line x atom), stays under 2 GiB (1000 lines x 1e5 atoms in float32, 6.4 GB, runs in
    4 blocks), and on the CPU also blocks of about 2^20 (line x atom) elements, at least
    ``d / 3`` lines, whose passes run in cache (faster than one block: measured
    1.2-1.45x at N = 2000 and 1e4, within noise at 1e5); where the closed form runs as
    compiled loops (trees, p in {1, 2}, Numba installed) the blocks go up to 2^21
    elements instead, since those loops gain nothing from cache-sized blocks, and blocks
    of that size are reused from call to call by glibc's malloc instead of being mapped
    afresh (2^24 was 1.2-1.6x slower under the default malloc, from page faults); small
    batched problems then run a few whole items at a time. Under grad mode each block's
    gradient is formed during the forward pass and its graph freed, so the peak working
    memory is that of one block and no forward is recomputed (a block that closes over
    other tensors requiring grad, such as a learnable ``alpha``, is checkpointed
    instead, at about one more forward pass). Values and gradients do not depend on it
    (up to rounding). On Linux, glibc keeps much of the freed memory of earlier blocks
    in its heap unless ``MALLOC_MMAP_THRESHOLD_`` is set low (e.g. to 65536) or another
    allocator is used, so the resident size can exceed the live memory; what it gives
    back at the top of its heap the next call faults in again (the README's "CPU
    training on Linux")."""

#: the ``torch.distributed`` options of the tree distances and SW
DISTRIBUTED_DOC = """\
process_group : torch.distributed.ProcessGroup, optional
    Evaluate the value with the ranks of this group (e.g.
    ``torch.distributed.group.WORLD``): the slices are split into one contiguous share
    per rank and the per-slice costs gathered, so that every rank returns the value one
    process computes, and the gradients one process computes (summed over the ranks
    where the measures are projected). Every rank must call with the same arguments
    (checked); ``seed=None`` then draws one seed on the first rank for all. The number
    of slices must be at least the group's size. See :mod:`tsw.core._distributed`.
gather : bool, default False
    With ``process_group``: the inputs are this rank's shards (points and, if given,
    weights; shards may differ in size), and the distance is between the unions of the
    shards (uniform weights over the union when ``a``/``b`` are not given). Each
    shard's gradient is its rows of the single-process gradient. Under
    ``DistributedDataParallel``, which averages the parameter gradients over the
    ranks, multiply such a loss by the world size to get the single-process gradient
    of the parameters (each rank's parameters see only its shard's part)."""

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
    text += "\n" + CHUNK_DOC + "\n" + DISTRIBUTED_DOC if chunked else ""
    block = "".join(f"    {line}\n" if line else "\n" for line in text.splitlines())

    def decorate(fn: Callable) -> Callable:
        doc = fn.__doc__ or ""
        marker = "\n\n    Returns\n    -------\n"
        if marker not in doc:
            raise ValueError(f"{fn.__name__}'s docstring has no Returns section")
        fn.__doc__ = doc.replace(marker, "\n" + block + marker[1:], 1)
        return without_autocast(fn)

    return decorate


#: device types whose autocast state is read (``torch.is_autocast_enabled(kind)``)
AUTOCAST_KINDS = ("cpu", "cuda", "xpu", "mps")
LOW_PRECISION = (torch.float16, torch.bfloat16)


def _autocast_kinds() -> list[str]:
    kinds = []
    for kind in AUTOCAST_KINDS:
        try:
            if torch.is_autocast_enabled(kind):
                kinds.append(kind)
        except (TypeError, RuntimeError):  # a torch without that device type
            continue
    return kinds


def without_autocast(fn: Callable) -> Callable:
    """Run ``fn`` outside ``torch.autocast``, in the inputs' precision.

    Under autocast, matrix products would run in float16 / bfloat16: coordinates lose
    their accuracy, and the dtype of the value would change. Inside an autocast region
    the distances therefore disable it, take float16 / bfloat16 tensor arguments (such
    as a generator's autocast output) as float32 (a differentiable cast), and return
    float32 or float64 values. Outside autocast nothing changes: half precision raises.
    """

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        kinds = _autocast_kinds()
        if not kinds:
            return fn(*args, **kwargs)

        def up(x: Any) -> Any:
            if isinstance(x, Tensor) and x.dtype in LOW_PRECISION:
                return x.float()
            return x

        args = tuple(up(x) for x in args)
        kwargs = {k: up(v) for k, v in kwargs.items()}
        with contextlib.ExitStack() as stack:
            for kind in kinds:
                stack.enter_context(torch.autocast(kind, enabled=False))
            return fn(*args, **kwargs)

    return run


def _external_leaves(out: Tensor, own: set[int]) -> bool:
    """Whether ``out``'s graph reaches a tensor requiring grad other than ``own`` leaves."""
    seen, stack = set(), [out.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        variable = getattr(fn, "variable", None)
        if variable is not None and id(variable) not in own:
            return True
        stack.extend(nxt for nxt, _ in fn.next_functions)
    return False


def _rows(inputs: tuple[Tensor, ...], i0: int, i1: int) -> tuple[Tensor, ...]:
    """Batch items ``i0`` to ``i1 - 1`` of every input (all of them when that is all)."""
    if i0 == 0 and i1 == inputs[0].shape[0]:
        return inputs
    return tuple(x[i0:i1] for x in inputs)


def _unbatched(slices: Any) -> bool:
    """Whether the slices are shared by every batch item (no batch axis of their own)."""
    if isinstance(slices, tuple):
        return all(_unbatched(s) for s in slices)
    if isinstance(slices, Tensor):
        return slices.dim() <= 2
    return getattr(slices, "batch_size", None) is None


def _assemble(parts: list[Tensor], blocks: list[tuple[int, int, int, int]]) -> Tensor:
    """(B, T) costs from the per-block (i1 - i0, t1 - t0) costs in row-major order."""
    rows: list[list[Tensor]] = []
    last = None
    for part, (i0, i1, _, _) in zip(parts, blocks, strict=True):
        if (i0, i1) != last:
            rows.append([])
            last = (i0, i1)
        rows[-1].append(part)
    return torch.cat([torch.cat(r, dim=-1) if len(r) > 1 else r[0] for r in rows], dim=0)


class _BlockCosts(torch.autograd.Function):
    r"""Per-slice costs of blocks of items and slices, each block's gradient formed at once.

    For each block, the forward pass computes its costs ``c_t`` and, at once, the
    gradient of :math:`\sum_{t \in \text{block}} c_t` with respect to the measures
    (accumulated over the blocks), then frees the block's graph. The block's leaves are
    marked (:func:`tsw.core._gradients.route_into`) so that the projections add their
    gradient into the accumulators directly; autograd returns the rest. The front end
    (the centring and the squared norms of :func:`tsw.euclidean._lines.centre`) runs
    here too, once, on marked leaves of the whole measures, and its backward runs once
    after the blocks, so that the squared norms add their gradient into the same
    accumulators: the points' gradient exists once (2.40x one support of peak growth
    at N = 2e5, d = 128, two blocks, against 3.27x when autograd added a second one
    after the call). The usual upstream
    gradient is the same for every slice of a batch item (the value is a function of
    the mean over slices), so the backward pass only scales the accumulated gradient
    item by item (in place: the accumulated sums are handed to autograd). An upstream
    gradient that differs across slices (a loss built from ``log["per_tree"]``), or a
    second backward pass through a retained graph, recomputes each block's forward and
    backward instead.

    ``apply`` returns ``None`` when the front end or the first block reaches tensors
    that require grad other than the measures (closed over by the projection): the caller then falls
    back to activation checkpointing, which differentiates through them too.
    """

    @staticmethod
    def _leaves(inputs, needs, i0, i1):
        return tuple(
            x.detach().requires_grad_(n) for x, n in zip(_rows(inputs, i0, i1), needs, strict=True)
        )

    @staticmethod
    def _sums(block, blocks, prepare, inputs, needs, upstream=None):
        """Every block's costs and the gradients of their sums, accumulated over the blocks.

        ``prepare(inputs)`` (the front end) runs first, once, on leaves of the inputs:
        it returns the tensors every block reads besides the inputs (the squared norms)
        and the blocks' context (the shift and the slices). Their gradients, summed over
        the blocks, go back through its graph at the end; its ops may add into the
        accumulators too (:class:`tsw.euclidean._lines._SquaredNorm`). ``upstream``
        (B, T) weighs the costs (all ones when None). Returns the detached per-block
        costs and one accumulator per input (None where no gradient is needed), or
        None when the front end or the first block reaches tensors that require grad
        other than its leaves. The same blocks, in the same order, give bit-identical
        sums.
        """
        # the accumulators the projections add their gradients into (route_into)
        route = not torch.compiler.is_compiling()
        sums = [x.new_zeros(x.shape) if n else None for x, n in zip(inputs, needs, strict=True)]
        with torch.enable_grad():
            full = _BlockCosts._leaves(inputs, needs, 0, inputs[0].shape[0])
            if route:
                for x, total in zip(full, sums, strict=True):
                    if total is not None:
                        route_into(x, total)
            extra, context = prepare(full)
        own = {id(x) for x in full}
        if any(e.requires_grad and _external_leaves(e, own) for e in extra):
            return None
        extra_needs = [e.requires_grad for e in extra]
        extra_sums = [
            e.new_zeros(e.shape) if n else None for e, n in zip(extra, extra_needs, strict=True)
        ]
        every = (*inputs, *(e.detach() for e in extra))
        every_needs = (*needs, *extra_needs)
        every_sums = [*sums, *extra_sums]
        parts = []
        for b, (i0, i1, t0, t1) in enumerate(blocks):
            with torch.enable_grad():
                local = _BlockCosts._leaves(every, every_needs, i0, i1)
                if route:
                    for x, total in zip(local, sums, strict=False):  # the inputs' leaves
                        if total is not None:
                            route_into(x, total[i0:i1])
                part = block(local, i0, i1, t0, t1, context)
                if b == 0 and _external_leaves(part, {id(x) for x in local}):
                    return None
                wrt = [x for x, n in zip(local, every_needs, strict=True) if n]
                weights = torch.ones_like(part) if upstream is None else upstream[i0:i1, t0:t1]
                grads = iter(torch.autograd.grad(part, wrt, weights, allow_unused=True))
            for total in every_sums:
                if total is not None and (g := next(grads)) is not None:
                    total[i0:i1] += g
            parts.append(part.detach())
        # the front end's backward, once: its ops add into the accumulators or return
        wanted = [(e, t) for e, t in zip(extra, extra_sums, strict=True) if t is not None]
        wrt = [x for x, n in zip(full, needs, strict=True) if n]
        if wanted and wrt:
            grads = iter(
                torch.autograd.grad(
                    [e for e, _ in wanted], wrt, [t for _, t in wanted], allow_unused=True
                )
            )
            for total in sums:
                if total is not None and (g := next(grads)) is not None:
                    total += g
        return parts, sums

    @staticmethod
    def forward(
        ctx: Any,
        block: Callable,
        blocks: list[tuple[int, int, int, int]],
        prepare: Callable,
        *inputs: Tensor,
    ):
        needs = ctx.needs_input_grad[3:]
        done = _BlockCosts._sums(block, blocks, prepare, inputs, needs)
        if done is None:
            return None
        parts, ctx.summed = done
        ctx.block, ctx.blocks, ctx.prepare = block, blocks, prepare
        ctx.save_for_backward(*inputs)
        return _assemble(parts, blocks)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, g: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        inputs = ctx.saved_tensors
        needs = ctx.needs_input_grad[3:]
        B = g.shape[0]
        per_item = g[..., :1]
        # the mean's backward divides its expanded gradient by T, so it arrives dense
        # (measured strides (T, 1)): comparing is the only test (one sync per backward)
        constant = torch.equal(g, per_item.expand_as(g))
        # the sums are scaled in place and handed over (no second (n, d) gradient at the
        # peak); a second backward through a retained graph finds none and forms them
        # again, bit-identical (gradcheck's reentrancy test)
        summed, ctx.summed = ctx.summed, None
        if constant and all(x.shape[0] == B for x, n in zip(inputs, needs, strict=True) if n):
            if summed is None:
                summed = _BlockCosts._again(ctx, inputs, needs)
            out: list[Tensor | None] = []
            for x, s in zip(inputs, summed, strict=True):
                out.append(None if s is None else s.mul_(per_item.view(B, *([1] * (x.dim() - 1)))))
            return (None, None, None, *out)
        return (None, None, None, *_BlockCosts._again(ctx, inputs, needs, g))

    @staticmethod
    def _again(ctx: Any, inputs, needs, upstream=None) -> list[Tensor | None]:
        """Form the accumulated gradients of the forward's blocks again (in backward)."""
        done = _BlockCosts._sums(ctx.block, ctx.blocks, ctx.prepare, inputs, needs, upstream)
        if done is None:  # not reached: the forward pass checked the first block
            raise RuntimeError("a block's graph reaches tensors other than its leaves")
        return done[1]


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
    group: Group | None = None

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
        process_group: object = None,
        gather: bool = False,
    ) -> Problem:
        """Validate two measures, ``p``, the randomness and the driver's options.

        numpy inputs are converted to tensors (no gradient); the value is then returned
        as numpy (see :meth:`finish`). With ``gather`` the inputs are this rank's shards:
        each is validated, then the unions are gathered and validated
        (:mod:`tsw.core._distributed`).
        """
        numpy = isinstance(X_s, np.ndarray)
        _check_same_kind(numpy, (X_t, "X_t"), (a, "a"), (b, "b"))
        Xs, Xt, wa, wb = (
            from_numpy(x, n) for x, n in ((X_s, "X_s"), (X_t, "X_t"), (a, "a"), (b, "b"))
        )
        group = check_group(process_group, gather)
        if group is not None and group.gather:
            check_measures(Xs, Xt, wa, wb, balanced=False, validate=validate)  # the shards
            Xs, Xt, wa, wb = gather_points(
                [(Xs, -2, "X_s"), (Xt, -2, "X_t"), (wa, -1, "a"), (wb, -1, "b")], group
            )
        measures = check_measures(Xs, Xt, wa, wb, balanced=balanced, validate=validate)
        return cls._build(
            measures, p, seed, generator, validate, power, log, numpy, chunk_size, group
        )

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
        process_group: object = None,
        gather: bool = False,
    ) -> Problem:
        """Validate one measure; ``measures.X_t`` and ``measures.b`` are then empty."""
        numpy = isinstance(X_s, np.ndarray)
        _check_same_kind(numpy, (a, "a"))
        Xs, wa = from_numpy(X_s, "X_s"), from_numpy(a, "a")
        group = check_group(process_group, gather)
        if group is not None and group.gather:
            check_measure(Xs, wa, validate=validate)  # the shard
            Xs, wa = gather_points([(Xs, -2, "X_s"), (wa, -1, "a")], group)
        X, w, batched = check_measure(Xs, wa, validate=validate)
        measures = Measures(X, X[..., :0, :], w, w[..., :0], batched)
        return cls._build(
            measures, p, seed, generator, validate, power, log, numpy, chunk_size, group
        )

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
        group: Group | None = None,
    ) -> Problem:
        p = check_p(p)
        validate = check_bool(validate, "validate")
        power, log = check_bool(power, "power"), check_bool(log, "log")
        check_chunk_size(chunk_size)
        X = measures.X_s
        if group is not None and seed is None and generator is None:
            seed = shared_seed(group, X.device)  # the ranks must draw the same slices
        rng = resolve_sampler(seed, generator, dtype=X.dtype, device=X.device)
        return cls(measures, p, rng, validate, power, log, numpy, chunk_size, group)

    def replace(self, **changes: Any) -> Problem:
        """Return a copy with some fields replaced (e.g. mapped or spherical measures)."""
        return dataclasses.replace(self, **changes)

    @overload
    def evaluate(
        self,
        project: Callable[[Measures, Any], Projection],
        slices: Any,
        cost: Callable[[Projection, float], Tensor] = ...,
        *,
        projections: Tensor | None = None,
        narrow: Callable[[Any, int, int], Any] | None = None,
        front: Front | None = None,
    ) -> Result: ...

    @overload
    def evaluate(
        self,
        project: Callable[[Measures, Any], P],
        slices: Any,
        cost: Callable[[P, float], Tensor],
        *,
        projections: Tensor | None = None,
        narrow: Callable[[Any, int, int], Any] | None = None,
        front: Front | None = None,
    ) -> Result: ...

    def evaluate(
        self,
        project: Callable[[Measures, Any], Any],
        slices: Any,
        cost: Callable[[Any, float], Tensor] = closed_form,
        *,
        projections: Tensor | None = None,
        narrow: Callable[[Any, int, int], Any] | None = None,
        front: Front | None = None,
    ) -> Result:
        """Project, apply the closed form, and finish (see :meth:`finish`).

        The slices are evaluated in the blocks of :meth:`plan_blocks` (see
        :meth:`_blocks` and ``chunk_size`` in :data:`CHUNK_DOC`): no block's graph
        outlives it, so the peak working memory is that of one block.
        ``narrow(slices, start, stop)`` cuts a block (tree containers and (d, L)
        directions by default). ``front(measures, slices)``, once per call before the
        blocks (differentiated once), may return translated measures and slices that
        every block reads, with what it computed once in ``measures.sq``
        (:func:`tsw.euclidean._lines.centre`). A method whose projection is not a
        :class:`Projection` (a type of its own) passes the ``cost`` that reads it.
        """
        self.check_range()
        per_slice = self._per_slice(project, slices, cost, narrow, front)
        return self.finish(per_slice, slices, projections)

    def check_range(self) -> None:
        """With ``validate``, raise if the supports' magnitude would overflow or underflow.

        See :func:`~tsw.core._validation.check_range`; called by :meth:`evaluate` and by
        the methods that compute their costs without it.
        """
        if self.validate:
            check_range(self.measures, self.p)

    def _per_slice(
        self,
        project: Callable[[Measures, Any], Any],
        slices: Any,
        cost: Callable[[Any, float], Tensor],
        narrow: Callable[[Any, int, int], Any] | None,
        front: Front | None = None,
    ) -> Tensor:
        def run(measures: Measures, block: Any) -> Tensor:
            return cost(project(measures, block), self.p)

        counts = slice_counts(slices if narrow is None else slices[0])
        narrow = narrow_slices if narrow is None else narrow
        if self.group is not None:
            return self._distributed(run, slices, counts, narrow, front)
        if counts is None:  # slices that are not cut into blocks (S3W's rotations)
            return run(self.measures, slices)
        return self._blocks(run, self.measures, slices, counts, narrow, front)

    def _blocks(
        self, run, measures: Measures, slices, counts, narrow, front: Front | None = None
    ) -> Tensor:
        """All ``counts[0]`` slices, in the blocks of :meth:`plan_blocks`.

        ``front`` first maps the measures and the slices once (see :meth:`evaluate`);
        its ``measures.sq`` travel with the supports as inputs of every block.
        Under grad mode the blocks go through :class:`_BlockCosts`, which forms each
        block's gradient during the forward pass (no block's graph outlives it, and no
        forward is recomputed) and runs the front end itself, on the leaves whose
        gradients it accumulates; or, when a block depends on other tensors that
        require grad (a learnable split, a tensor mass), through activation
        checkpointing.
        """
        batched = measures.batched

        def prepare(tensors: tuple[Tensor, ...]) -> tuple[tuple[Tensor, ...], tuple[Any, Any]]:
            """Run the front end on the supports and masses: ``(sq, (shift, slices))``."""
            X_s, X_t, a, b = tensors
            mapped, moved = Measures(X_s, X_t, a, b, batched), slices
            if front is not None:
                mapped, moved = front(mapped, moved)
            return tuple(mapped.sq or ()), (mapped.shift, moved)

        def block(
            tensors: tuple[Tensor, ...], i0: int, i1: int, t0: int, t1: int, context: Any
        ) -> Tensor:
            X_s, X_t, a, b, *sq = tensors
            shift, moved = context  # shift detached, (B|1, 1, d): the items' rows where batched
            shift = shift if shift is None or shift.shape[0] == 1 else shift[i0:i1]
            pair = (sq[0], sq[1]) if sq else None
            local = Measures(X_s, X_t, a, b, batched, pair, shift)
            return run(local, narrow(moved, t0, t1))

        inputs = tuple(measures[:4])
        blocks = self.plan_blocks(counts, inputs, slices)
        needs = [torch.is_grad_enabled() and t.requires_grad for t in inputs]
        if len(blocks) > 1 and any(needs) and not any(t.requires_grad for t in all_tensors(slices)):
            out = _BlockCosts.apply(block, blocks, prepare, *inputs)
            if out is not None:
                return out
        sq, context = prepare(inputs)
        if len(blocks) == 1:
            shift, moved = context
            pair = (sq[0], sq[1]) if sq else None
            return run(Measures(*measures[:4], batched, pair, shift), moved)
        inputs += sq
        if not any(needs):
            parts = [block(_rows(inputs, b[0], b[1]), *b, context) for b in blocks]
            return _assemble(parts, blocks)
        parts = [
            checkpoint(
                block,
                _rows(inputs, b[0], b[1]),
                *b,
                context,
                use_reentrant=False,
                preserve_rng_state=False,
            )
            for b in blocks
        ]
        return _assemble(parts, blocks)

    def _distributed(self, run, slices, counts, narrow, front: Front | None = None) -> Tensor:
        """Evaluate this rank's share of the slices; gather every rank's costs."""
        group = self.group
        if group is None:  # not reached: called with a group only
            raise RuntimeError("_distributed needs a process group")
        if counts is None:
            raise ValueError("process_group: this method's slices cannot be split across ranks")
        T = counts[0]
        if group.size > T:
            raise ValueError(
                f"process_group: the number of slices ({T}) must be at least the number of "
                f"ranks ({group.size})"
            )
        # the measures first: drawn roots depend on them, so differing data differ there
        # too; gathered unions are the same on every rank by construction
        device = self.measures.X_s.device
        if group.gather:
            check_agree(group, device, slices=slices)
        else:
            check_agree(group, device, measures=tuple(self.measures[:4]), slices=slices)
        if any(t.requires_grad for t in all_tensors(slices)):
            raise ValueError(
                "process_group: explicit slices that require grad are not supported (each "
                "rank would get only its share of their gradient); detach them"
            )
        lo, hi = group.share(T)
        X_s, X_t, a, b, batched = self.measures[:5]
        X_s, X_t, a, b = (sum_gradients(t, group) for t in (X_s, X_t, a, b))
        shared = Measures(X_s, X_t, a, b, batched)
        share = narrow(slices, lo, hi)
        part = self._blocks(run, shared, share, (hi - lo, counts[1]), narrow, front)
        return gather_slices(part, group, T)

    def plan_blocks(
        self, counts: tuple[int, int], inputs: tuple[Tensor, ...], slices: Any
    ) -> list[tuple[int, int, int, int]]:
        """Blocks ``(i0, i1, t0, t1)`` of batch items and slices, in row-major order.

        ``chunk_size=None``: one block. An int: blocks of that many slices, every item
        at once. ``"auto"``: blocks under :data:`MEMORY_BUDGET`; on the CPU also under
        :meth:`cache_elements` (line x atom) elements, grouping whole batch items
        when one item's slices fit (so a batch of small problems runs item by item in
        cache) and cutting one item's slices otherwise. Items are only grouped when the
        slices are shared by the batch (not batched trees).
        """
        T, k = counts
        B = inputs[0].shape[0]
        if self.chunk_size is None:
            return [(0, B, 0, T)]
        if isinstance(self.chunk_size, int):  # checked >= 1 by Problem.of
            c = self.chunk_size
            return [(0, B, t, min(t + c, T)) for t in range(0, T, c)]
        X = inputs[0]
        atoms = X.shape[-2] + self.measures.X_t.shape[-2]
        per_tree = WORK_ELEMENTS_PER_LINE_POINT * X.element_size() * k * atoms
        memory_trees = max(1, MEMORY_BUDGET // max(B * per_tree, 1))
        if X.device.type != "cpu":
            return [(0, B, t, min(t + memory_trees, T)) for t in range(0, T, memory_trees)]
        # each block also pays O(atoms x d) (the product, its gradient and their sum; the
        # centring too where no front end did it once): at least d / 3 lines a block keep
        # that a small share (measured best at 40 lines for d = 128, N = 1e5, where
        # 8-line blocks were 3.6x slower than 40-line ones, before the front end)
        min_trees = -(-X.shape[-1] // (3 * k))
        cache = self.cache_elements(X, slices)
        item = T * k * atoms  # elements of one item's slices
        if B * item <= 2 * cache and memory_trees >= T:
            return [(0, B, 0, T)]
        shared = not any(x.shape[0] != B for x in inputs) and _unbatched(slices)
        if not shared:
            trees = max(min_trees, cache // max(B * k * atoms, 1))
            trees = max(1, min(memory_trees, trees))
            return [(0, B, t, min(t + trees, T)) for t in range(0, T, trees)]
        if item <= cache and per_tree * T <= MEMORY_BUDGET:
            per = max(1, min(cache // item, MEMORY_BUDGET // (per_tree * T)))
            return [(i, min(i + per, B), 0, T) for i in range(0, B, per)]
        trees = max(min_trees, cache // (k * atoms))
        trees = max(1, min(trees, MEMORY_BUDGET // per_tree))
        return [(i, i + 1, t, min(t + trees, T)) for i in range(B) for t in range(0, T, trees)]

    def cache_elements(self, X: Tensor, slices: Any) -> int:
        """Return the CPU cap on a block's (line x atom) elements (``chunk_size="auto"``).

        :data:`COMPILED_BLOCK_ELEMENTS` for trees whose closed form runs compiled
        (:func:`tsw.core._kernels.usable`), :data:`CACHE_BLOCK_ELEMENTS` otherwise (the
        torch operators, and SW's directions, whose one-dimensional cost is not compiled).
        """
        compiled = not isinstance(slices, Tensor) and _kernels.usable(X, p=self.p)
        return COMPILED_BLOCK_ELEMENTS if compiled else CACHE_BLOCK_ELEMENTS

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
