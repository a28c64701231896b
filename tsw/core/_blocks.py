"""Slices evaluated in blocks: the plan, and the blocks' autograd function.

The slices of a call (and the items of a batch) are evaluated in blocks, so that the
peak working memory is one block's and, on the CPU, a block's passes run in cache.
:func:`plan_blocks` cuts them, a pure function of the sizes; :func:`run_blocks` evaluates
them: under grad mode through :class:`_BlockCosts`, which forms each block's gradient
during the forward pass and frees its graph, so that no forward is recomputed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from tsw.core._distributed import all_tensors
from tsw.core._gradients import route_into
from tsw.core._pinning import current, pinned
from tsw.core._twice import building_graph, graph_backward
from tsw.core._validation import Measures

__all__ = ["Block", "narrow_slices", "plan_blocks", "run_blocks", "slice_counts"]

#: working memory allowed for one block of slices when ``chunk_size="auto"``
MEMORY_BUDGET = 2 * 2**30
#: on the CPU, ``chunk_size="auto"`` also caps a block at about this many (line x atom)
#: elements, so that a block's passes run in cache (measured forward + backward of
#: Db-TSW, float32, one thread: 1.39x faster at N = 2000, d = 64 with 64-tree blocks,
#: 1.47x at N = 1e4, d = 128 with 25-tree blocks, than one block)
CACHE_BLOCK_ELEMENTS = 2**20
#: the cap where the closed form runs as compiled loops, which stream each row once and
#: gain nothing from cache-sized blocks; at this size a block's largest array (the
#: permutation) stays under glibc's largest dynamic mmap threshold, so that its memory
#: is reused from block to block instead of being mapped afresh (2^24 took 1.2-1.6x the
#: time at N = 1e4 and 5e4 from page faults)
COMPILED_BLOCK_ELEMENTS = 2**21
#: working elements per (line x atom) of a block, forward and backward: measured about
#: 54 bytes (13.5 float32 elements) for Db-TSW at d = 64; rounded up
WORK_ELEMENTS_PER_LINE_POINT = 16


class Block(NamedTuple):
    """Batch items ``i0`` to ``i1 - 1`` and slices ``t0`` to ``t1 - 1``."""

    i0: int
    i1: int
    t0: int
    t1: int


def plan_blocks(
    *,
    items: int,
    slices: int,
    lines: int,
    atoms: int,
    dim: int,
    element_size: int,
    chunk_size: int | str | None,
    cpu: bool,
    compiled: bool,
    shared: bool,
) -> list[Block]:
    """Blocks of batch items and slices, in row-major order.

    ``items`` batch items of ``atoms`` atoms in ``dim`` dimensions, ``slices`` slices of
    ``lines`` lines each; ``shared``: the slices and the inputs are shared by the batch
    items (not batched trees). ``chunk_size=None``: one block. An int: blocks of that
    many slices, every item at once. ``"auto"``: blocks under :data:`MEMORY_BUDGET`; on
    the CPU also under :data:`CACHE_BLOCK_ELEMENTS` (line x atom) elements
    (:data:`COMPILED_BLOCK_ELEMENTS` where the closed form runs ``compiled``), at least
    ``dim / 3`` lines a block, grouping whole batch items when one item's slices fit
    (so a batch of small problems runs item by item in cache) and cutting one item's
    slices otherwise.
    """
    B, T, k = items, slices, lines
    if chunk_size is None:
        return [Block(0, B, 0, T)]
    if isinstance(chunk_size, int):
        return [Block(0, B, t, min(t + chunk_size, T)) for t in range(0, T, chunk_size)]
    per_tree = WORK_ELEMENTS_PER_LINE_POINT * element_size * k * atoms
    memory_trees = max(1, MEMORY_BUDGET // max(B * per_tree, 1))
    if not cpu:
        return [Block(0, B, t, min(t + memory_trees, T)) for t in range(0, T, memory_trees)]
    # each block also pays O(atoms x d) (the product, its gradient and their sum): at
    # least d / 3 lines a block keep that a small share (measured best at 40 lines for
    # d = 128, N = 1e5, where 8-line blocks were 3.6x slower than 40-line ones)
    min_trees = -(-dim // (3 * k))
    cache = COMPILED_BLOCK_ELEMENTS if compiled else CACHE_BLOCK_ELEMENTS
    item = T * k * atoms  # elements of one item's slices
    if B * item <= 2 * cache and memory_trees >= T:
        return [Block(0, B, 0, T)]
    if not shared:
        trees = max(min_trees, cache // max(B * k * atoms, 1))
        trees = max(1, min(memory_trees, trees))
        return [Block(0, B, t, min(t + trees, T)) for t in range(0, T, trees)]
    if item <= cache and per_tree * T <= MEMORY_BUDGET:
        per = max(1, min(cache // item, MEMORY_BUDGET // (per_tree * T)))
        return [Block(i, min(i + per, B), 0, T) for i in range(0, B, per)]
    trees = max(min_trees, cache // (k * atoms))
    trees = max(1, min(trees, MEMORY_BUDGET // per_tree))
    return [Block(i, i + 1, t, min(t + trees, T)) for i in range(B) for t in range(0, T, trees)]


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


def shared_by_items(inputs: tuple[Tensor, ...], slices: Any) -> bool:
    """Whether the inputs have one batch size and the slices no batch axis of their own."""
    B = inputs[0].shape[0]
    return all(x.shape[0] == B for x in inputs) and _unbatched(slices)


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


def _items(inputs: tuple[Tensor, ...], i0: int, i1: int) -> tuple[Tensor, ...]:
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


def _assemble(parts: list[Tensor], blocks: list[Block]) -> Tensor:
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
    (the centring and the squared norms of :func:`tsw.euclidean._lines.centered`) runs
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
            x.detach().requires_grad_(n) for x, n in zip(_items(inputs, i0, i1), needs, strict=True)
        )

    @staticmethod
    def _sums(block, blocks, prepare, inputs, needs, upstream=None):
        """Every block's costs and the gradients of their sums, accumulated over the blocks.

        ``prepare(inputs)`` (the front end) runs first, once, on leaves of the inputs:
        it returns the tensors every block reads besides the inputs (the squared norms)
        and the blocks' context (the shift and the slices). Their gradients, summed over
        the blocks, go back through its graph at the end; its ops may add into the
        accumulators too (``tsw.euclidean._lines._SquaredNorm``). ``upstream``
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
        blocks: list[Block],
        prepare: Callable,
        *inputs: Tensor,
    ):
        needs = ctx.needs_input_grad[3:]
        # the kernels' choice of the first block serves every block and the backward's
        with pinned(current()) as ctx.kernels:
            done = _BlockCosts._sums(block, blocks, prepare, inputs, needs)
        if done is None:
            return None
        parts, ctx.summed = done
        ctx.block, ctx.blocks, ctx.prepare = block, blocks, prepare
        ctx.save_for_backward(*inputs)
        return _assemble(parts, blocks)

    @staticmethod
    def backward(ctx: Any, g: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        inputs = ctx.saved_tensors
        needs = ctx.needs_input_grad[3:]
        if building_graph():  # create_graph: every block again, with its graph kept
            return (None, None, None, *_BlockCosts._graph(ctx, inputs, needs, g))
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
    def _graph(ctx: Any, inputs, needs, upstream: Tensor) -> list[Tensor | None]:
        """Return the gradients of the blocks' costs weighted by ``upstream``, with their graph.

        The front end and every block run again on the saved inputs (linked to their
        graph, and not marked for the accumulators), and their graphs are kept until the
        gradient is formed: the memory of one block is not the bound here.
        """

        def costs(*tensors: Tensor) -> Tensor:
            extra, context = ctx.prepare(tensors)
            every = (*tensors, *extra)
            parts = [ctx.block(_items(every, b.i0, b.i1), *b, context) for b in ctx.blocks]
            return _assemble(parts, ctx.blocks)

        with pinned(ctx.kernels):
            return graph_backward(costs, inputs, needs, upstream)

    @staticmethod
    def _again(ctx: Any, inputs, needs, upstream=None) -> list[Tensor | None]:
        """Form the accumulated gradients of the forward's blocks again (in backward).

        With the forward's kernels (:mod:`tsw.core._pinning`): the compiled ones may have
        become ready since, and their rounding differs.
        """
        with pinned(ctx.kernels):
            done = _BlockCosts._sums(ctx.block, ctx.blocks, ctx.prepare, inputs, needs, upstream)
        return done[1] if done is not None else [None] * len(inputs)


def run_blocks(
    run: Callable[[Measures, Any], Tensor],
    measures: Measures,
    slices: Any,
    blocks: list[Block],
    narrow: Callable[[Any, int, int], Any],
    front: Callable[[Measures, Any], tuple[Measures, Any]] | None = None,
) -> Tensor:
    """Return the (B, T) costs ``run(measures, block of slices)`` of every block.

    ``front`` first maps the measures and the slices once (the Euclidean distances'
    centering, :func:`tsw.euclidean._lines.centered`); its ``measures.sq`` travel with
    the supports as inputs of every block. Under grad mode the blocks go through
    :class:`_BlockCosts`, which forms each block's gradient during the forward pass and
    runs the front end itself, on the leaves whose gradients it accumulates; or, when a
    block depends on other tensors that require grad (a learnable split, a tensor mass),
    through activation checkpointing.
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
        parts = [block(_items(inputs, b[0], b[1]), *b, context) for b in blocks]
        return _assemble(parts, blocks)
    kernels = current()  # the forward's choice of the kernels, for the recomputation

    def pinned_block(*args: Any) -> Tensor:
        with pinned(kernels):
            return block(*args)

    parts = [
        checkpoint(
            pinned_block,
            _items(inputs, b[0], b[1]),
            *b,
            context,
            use_reentrant=False,
            preserve_rng_state=False,
        )
        for b in blocks
    ]
    return _assemble(parts, blocks)
