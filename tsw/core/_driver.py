r"""The driver: a problem's slices projected, transported and collected, once for all methods.

A distance is three things:

1. how its slices are drawn (:mod:`tsw.core._slices`, :mod:`tsw.core.trees`);
2. a *projection*: the validated measures and a block of slices mapped to a
   :class:`~tsw.core._projection.Projection`;
3. a closed form turning a projection into one cost per slice
   (:func:`~tsw.core._projection.closed_form`, or a method's own).

:func:`evaluate` runs them on a :class:`~tsw.core._problem.Problem`: the range check,
the slices shared among the ranks of a process group, the blocks of
:func:`~tsw.core._blocks.plan_blocks`, and the per-slice costs collected into an
:class:`~tsw.core._output.Evaluation`. A method's function reads::

    @distance(chunked=True)
    def my_distance(problem, /, *, n_trees=None, ..., **options):
        trees = resolve_trees(problem.measures, trees, ..., rng=problem.rng)
        return evaluate(problem, my_projection, trees)

``ARCHITECTURE.md`` at the repository root walks through adding a distance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

from torch import Tensor

from tsw.core._blocks import (
    Block,
    narrow_slices,
    plan_blocks,
    run_blocks,
    shared_by_items,
    slice_counts,
)
from tsw.core._distributed import (
    Group,
    all_tensors,
    check_agree,
    gather_slices,
    sum_gradients,
)
from tsw.core._output import Evaluation
from tsw.core._problem import Problem
from tsw.core._projection import LINE, Projection, closed_form
from tsw.core._ranges import check_range, power_of_two
from tsw.core._validation import Measures
from tsw.core.splits import AngularSplit, LineSplit
from tsw.core.tree_wasserstein import runs_compiled

__all__ = ["Front", "evaluate"]

#: What a method's own projection returns when it brings its own closed form too
P = TypeVar("P")

#: A front end of :func:`evaluate`: ``(measures, slices) -> (measures, slices)``, applied
#: once per call before the blocks (see :func:`tsw.euclidean._lines.centered`).
Front = Callable[[Measures, Any], tuple[Measures, Any]]


@overload
def evaluate(
    problem: Problem,
    project: Callable[[Measures, Any], Projection],
    slices: Any,
    cost: Callable[[Projection, float], Tensor] = ...,
    *,
    projections: Tensor | None = None,
    narrow: Callable[[Any, int, int], Any] | None = None,
    front: Front | None = None,
) -> Evaluation: ...


@overload
def evaluate(
    problem: Problem,
    project: Callable[[Measures, Any], P],
    slices: Any,
    cost: Callable[[P, float], Tensor],
    *,
    projections: Tensor | None = None,
    narrow: Callable[[Any, int, int], Any] | None = None,
    front: Front | None = None,
) -> Evaluation: ...


def evaluate(
    problem: Problem,
    project: Callable[[Measures, Any], Any],
    slices: Any,
    cost: Callable[[Any, float], Tensor] = closed_form,
    *,
    projections: Tensor | None = None,
    narrow: Callable[[Any, int, int], Any] | None = None,
    front: Front | None = None,
) -> Evaluation:
    """Project the measures on the slices, apply the closed form, collect the costs.

    The slices are evaluated in the blocks of :func:`~tsw.core._blocks.plan_blocks`: no
    block's graph outlives it, so the peak working memory is that of one block.
    ``narrow(slices, start, stop)`` cuts a block (tree containers and (d, L) directions
    by default). ``front(measures, slices)``, once per call before the blocks, may
    return translated measures and slices that every block reads
    (:func:`tsw.euclidean._lines.centered`). A method whose projection is not a
    :class:`~tsw.core._projection.Projection` passes the ``cost`` that reads it.
    ``projections`` are reported under POT's log keys (the sliced baselines).

    On trees at ``p > 1`` the cost of a slice is of degree ``p`` in the masses (the
    masses' differences are raised to the power ``p``): tiny or huge masses (totals of
    1e-30 in float32) would underflow to 0 or overflow there although the value (of
    degree 1) is representable. Their projections' masses are therefore divided by
    ``s``, the power of two nearest to the source's total mass (exact), and the
    evaluation carries ``s`` as its ``scale`` (:func:`~tsw.core._output.finish`
    multiplies the root by it). A method's own ``cost`` on trees must then be of degree
    ``p`` in the masses too (TS-Sobolev's and the published circular form are; the
    partial method's price term reads shapes of total 1, whose scale is 1).
    """
    if problem.validate:
        check_range(problem.measures)
    p = problem.p
    scale = None if p == 1 else power_of_two(problem.measures.a.sum(-1))  # (B,)
    scaled = False

    def run(measures: Measures, block: Any) -> Tensor:
        nonlocal scaled
        projection = project(measures, block)
        if (
            isinstance(projection, Projection)
            and projection.structure != LINE
            and scale is not None
        ):
            # the block's own items' scales: a block may hold some of the items only
            projection = _divide_masses(projection, power_of_two(measures.a.sum(-1)))
            scaled = True
        return cost(projection, p)

    counts = slice_counts(slices if narrow is None else slices[0])
    narrow = narrow_slices if narrow is None else narrow
    if problem.group is not None:
        per_slice = _distributed(problem.group, problem, run, slices, counts, narrow, front)
    elif counts is None:  # slices that are not cut into blocks (S3W's rotations)
        per_slice = run(problem.measures, slices)
    else:
        blocks = _plan(problem, problem.measures, counts, slices)
        per_slice = run_blocks(run, problem.measures, slices, blocks, narrow, front)
    return Evaluation(per_slice, slices, projections, scale=scale if scaled else None)


def _divide_masses(projection: Projection, scale: Tensor) -> Projection:
    """Return the projection with its masses divided by ``scale`` (B,), a power of two."""

    def div(m: Tensor) -> Tensor:
        return m / scale.view(-1, *(1,) * (m.dim() - 1)) if m.dim() else m / scale

    m = projection.masses
    if isinstance(m, LineSplit):
        m = m._replace(w=div(m.w))
    elif isinstance(m, AngularSplit):
        extra = None if m.extra is None else (m.extra[0], div(m.extra[1]))
        m = m._replace(w=div(m.w), extra=extra)
    else:
        m = div(m)
    return projection._replace(masses=m)


def _plan(
    problem: Problem, measures: Measures, counts: tuple[int, int], slices: Any
) -> list[Block]:
    """Plan the blocks of ``counts`` slices of ``measures`` (:func:`plan_blocks`, sizes only)."""
    X = measures.X_s
    inputs = tuple(measures[:4])
    return plan_blocks(
        items=X.shape[0],
        slices=counts[0],
        lines=counts[1],
        atoms=X.shape[-2] + measures.X_t.shape[-2],
        dim=X.shape[-1],
        element_size=X.element_size(),
        chunk_size=problem.chunk_size,
        cpu=X.device.type == "cpu",
        compiled=not isinstance(slices, Tensor) and runs_compiled(X, problem.p),
        shared=shared_by_items(inputs, slices),
    )


def _distributed(
    group: Group,
    problem: Problem,
    run: Callable[[Measures, Any], Tensor],
    slices: Any,
    counts: tuple[int, int] | None,
    narrow: Callable[[Any, int, int], Any],
    front: Front | None,
) -> Tensor:
    """Evaluate this rank's share of the slices; gather every rank's costs."""
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
    measures = problem.measures
    device = measures.X_s.device
    if group.gather:
        check_agree(group, device, slices=slices)
    else:
        check_agree(group, device, measures=tuple(measures[:4]), slices=slices)
    if any(t.requires_grad for t in all_tensors(slices)):
        raise ValueError(
            "process_group: explicit slices that require grad are not supported (each "
            "rank would get only its share of their gradient); detach them"
        )
    lo, hi = group.share(T)
    X_s, X_t, a, b, batched = measures[:5]
    X_s, X_t, a, b = (sum_gradients(t, group) for t in (X_s, X_t, a, b))
    shared = Measures(X_s, X_t, a, b, batched)
    share = narrow(slices, lo, hi)
    blocks = _plan(problem, shared, (hi - lo, counts[1]), share)
    part = run_blocks(run, shared, share, blocks, narrow, front)
    return gather_slices(part, group, T)
