r"""``process_group=``: one distance evaluated by the ranks of a ``torch.distributed`` group.

Two modes, both giving every rank the value that one process computes on the whole
problem, and gradients equal to one process's:

* **replicated data** (``gather=False``): every rank holds the same measures. The slices
  (drawn from one seed, shared by the ranks) are split into contiguous shares, one per
  rank; each rank evaluates its share, and the per-slice costs are gathered so that every
  rank holds all ``T`` of them and finishes the value itself.
* **sharded data** (``gather=True``): each rank passes its own shard of points (and
  weights); the measures are the unions of the shards, gathered once, and then evaluated
  as in the replicated mode.

Gradients. Rank ``r`` differentiates only through its own share of slices, so its
gradient of the (union) measures is a partial sum. :func:`sum_gradients` wraps the
measures just before they are projected: the identity forward, an all-reduce (sum) of
the gradient backward. Every rank then holds the full gradient of the measures, and so
of everything upstream of them (a spatial map's parameters, a generator), exactly as
one process computes it. The other two collectives need no communication backward:
the per-slice costs are gathered by :func:`gather_slices`, whose backward keeps the
rank's own share (every rank computes the same value from the gathered costs, so the
gradient of the gathered costs is the same on every rank), and the shards by
:func:`gather_points`, whose backward keeps the rank's own rows of the (already summed)
gradient of the union.

Why not ``torch.distributed.nn.functional.all_gather``. Its backward differs in two
ways, the second a defect. (1) It sums the gradients of every rank's copy of the
gathered tensor: the gradient of the *sum over ranks* of the losses, ``R`` times one
process's when every rank computes the same value. (2) On gloo it receives those
gradients into ``torch.empty_like(grad)`` buffers, which keep the incoming gradient's
strides, and ``dist.scatter`` fills them as contiguous memory. A gradient that reaches
the gather with permuted strides, as autograd's backward of ``rows @ Y.T`` gives ``Y``'s,
is then read back transposed: measured with torch 2.13, gloo, 2 processes, a gradient of
shape (2, 4, 3) with strides (12, 1, 4) came back with a maximal error of 54 against
values of at most 417, while the same loss through contiguous gradients was exact.
Every collective here sends and receives contiguous buffers of its own, and never
reduces in place into a gradient tensor that autograd handed over.

Requirements (checked, with a ``ValueError`` that says which): every rank calls the
function with the same arguments other than its shard; the slices drawn on the ranks
agree (the default ``seed=None`` draws one seed on the group's first rank and
broadcasts it; with an explicit ``generator`` every rank must hold the same state); the
number of slices is at least the number of ranks; explicit slices do not require grad.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from tsw.core._validation import check_tensor

__all__ = [
    "Group",
    "all_tensors",
    "check_agree",
    "check_group",
    "gather_points",
    "gather_slices",
    "shared_seed",
    "sum_gradients",
]


def _dist() -> Any:
    import torch.distributed as dist

    return dist


@dataclasses.dataclass(frozen=True)
class Group:
    """A process group with this process's rank and the group's size."""

    group: Any
    rank: int
    size: int
    gather: bool

    def share(self, n_slices: int, rank: int | None = None) -> tuple[int, int]:
        """Return the contiguous range ``[lo, hi)`` of slices ``rank`` (this one) evaluates."""
        r = self.rank if rank is None else rank
        return n_slices * r // self.size, n_slices * (r + 1) // self.size

    def all_gather(self, t: Tensor) -> list[Tensor]:
        """All-gather equal-shaped tensors into contiguous buffers of our own."""
        t = t.contiguous()
        out = [torch.empty(t.shape, dtype=t.dtype, device=t.device) for _ in range(self.size)]
        _dist().all_gather(out, t, group=self.group)
        return out


def check_group(process_group: object, gather: object) -> Group | None:
    """Validate ``process_group`` and ``gather``; ``None`` when no group is given.

    Raises
    ------
    TypeError
        If ``process_group`` is not a ``torch.distributed.ProcessGroup`` or ``gather`` not
        a bool.
    ValueError
        If ``torch.distributed`` is not initialised, or ``gather=True`` without a group.
    """
    if not isinstance(gather, bool):
        raise TypeError(f"gather must be a bool; got {type(gather).__name__}")
    if process_group is None:
        if gather:
            raise ValueError("gather=True needs a process_group; got process_group=None")
        return None
    dist = _dist()
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError(
            "process_group needs an initialised torch.distributed "
            "(call torch.distributed.init_process_group first)"
        )
    if not isinstance(process_group, dist.ProcessGroup):
        raise TypeError(
            "process_group must be a torch.distributed.ProcessGroup (e.g. "
            f"torch.distributed.group.WORLD) or None; got {type(process_group).__name__}"
        )
    rank = dist.get_rank(group=process_group)
    if rank < 0:
        raise ValueError("process_group: this process is not a member of the group")
    return Group(process_group, rank, dist.get_world_size(group=process_group), gather)


def shared_seed(group: Group, device: torch.device) -> int:
    """Draw a fresh seed on the group's first rank and broadcast it to the others."""
    dist = _dist()
    seed = torch.tensor([secrets.randbits(62)], dtype=torch.int64, device=device)
    src = dist.get_global_rank(group.group, 0)
    dist.broadcast(seed, src=src, group=group.group)
    return int(seed.item())


def all_tensors(obj: Any) -> Iterator[Tensor]:
    """Every tensor of a tensor, a tuple/list of them or a (tree container) dataclass."""
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, tuple | list):
        for x in obj:
            yield from all_tensors(x)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from all_tensors(getattr(obj, f.name))


def fingerprint(obj: Any, device: torch.device) -> Tensor:
    """Summarise every tensor of ``obj`` in fixed width (float64): equal for equal inputs.

    For each tensor, its size, whether it requires grad, its sum and sum of squares,
    summed over the tensors once plainly and once weighted by position (so that swapped
    tensors differ); with the number of tensors, 9 numbers whatever ``obj`` holds, so
    that the ranks can compare them in one all-gather without first agreeing on a width.
    """
    rows = []
    for t in all_tensors(obj):
        x = t.detach().to(device=device, dtype=torch.float64)
        n, g = x.new_tensor(float(x.numel())), x.new_tensor(float(t.requires_grad))
        rows.append(torch.stack([n, g, x.sum(), x.square().sum()]))
    if not rows:
        return torch.zeros(9, dtype=torch.float64, device=device)
    stats = torch.stack(rows)  # (tensors, 4)
    weight = torch.arange(1, len(rows) + 1, dtype=torch.float64, device=device)
    count = torch.tensor([float(len(rows))], dtype=torch.float64, device=device)
    return torch.cat([count, stats.sum(0), weight @ stats])


def check_agree(group: Group, device: torch.device, **named: Any) -> None:
    """Raise the same ``ValueError`` on every rank unless ``named`` agree across ranks.

    One all-gather of the fingerprints of every named object.
    """
    names = list(named)
    fps = torch.stack([fingerprint(named[n], device) for n in names])  # (names, 9)
    gathered = group.all_gather(fps)
    for i, name in enumerate(names):
        # every rank computes the same verdict from the same gathered data
        # (NaN data with validate=False gives NaN sums: equal NaNs agree)
        if not all(torch.allclose(g[i], fps[i], rtol=0, atol=0, equal_nan=True) for g in gathered):
            raise ValueError(
                f"process_group: the ranks disagree on {_what(name, group)}; every rank "
                "must pass the same arguments (and the same seed)"
            )


def _what(name: str, group: Group) -> str:
    if name == "slices":
        return "the slices (trees or directions): pass the same seed on every rank"
    if name == "measures":
        return "the measures; for one shard per rank pass gather=True" if not group.gather else name
    return name


class _SumGradients(torch.autograd.Function):
    """Identity forward; backward, the sum over the ranks of the gradient."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, group: Group) -> Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None]:  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        if torch.is_grad_enabled():
            raise RuntimeError(
                "process_group: the sum of the ranks' gradients is not differentiable, so a "
                "gradient with create_graph=True (a Hessian-vector product, a gradient "
                "penalty) is not available; evaluate the distance in one process for it"
            )
        # a buffer of our own: never reduce in place into the gradient autograd handed us
        total = g.contiguous().clone()
        _dist().all_reduce(total, group=ctx.group.group)
        return total, None


def sum_gradients(x: Tensor, group: Group) -> Tensor:
    """``x``, whose gradient backward is summed over the ranks (identity if no grad)."""
    if not (torch.is_grad_enabled() and x.requires_grad):
        return x
    return _SumGradients.apply(x, group)


def _gather_along(group: Group, x: Tensor, dim: int, counts: list[int]) -> Tensor:
    """Concatenate every rank's ``x`` along ``dim``; rank ``r``'s has ``counts[r]`` rows."""
    top = max(counts)
    pad = list(x.shape)
    pad[dim] = top - x.shape[dim]
    padded = torch.cat([x, x.new_zeros(pad)], dim=dim) if pad[dim] else x
    parts = group.all_gather(padded)
    return torch.cat([p.narrow(dim, 0, n) for p, n in zip(parts, counts, strict=True)], dim=dim)


class _GatherOwnGrad(torch.autograd.Function):
    """All-gather forward; backward, this rank's own rows of the (already summed) gradient."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, group: Group, dim: int, counts: list[int]) -> Tensor:
        ctx.dim, ctx.start, ctx.length = dim, sum(counts[: group.rank]), counts[group.rank]
        return _gather_along(group, x.detach(), dim, counts)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None, None, None]:  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        return g.narrow(ctx.dim, ctx.start, ctx.length).contiguous(), None, None, None


_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def gather_slices(local: Tensor, group: Group, n_slices: int) -> Tensor:
    """(B, T_r) per-slice costs of every rank's share, concatenated to (B, T) on each rank.

    The shares are :meth:`Group.share` of ``n_slices``, known to every rank without
    communication. Backward keeps this rank's share of the gradient: every rank finishes
    the same value from the gathered costs, and :func:`sum_gradients` sums the shares at
    the measures.
    """
    counts = [hi - lo for lo, hi in (group.share(n_slices, r) for r in range(group.size))]
    dim = local.dim() - 1
    if torch.is_grad_enabled() and local.requires_grad:
        return _GatherOwnGrad.apply(local, group, dim, counts)
    return _gather_along(group, local, dim, counts)


#: dimensions other than the point axis that a shard's header describes
_HEADER_DIMS = 6


def _header(x: Tensor | None, dim: int) -> list[int]:
    """``[given, dtype, ndim, rows, *other dims]`` of a shard, fixed width, -1 padded."""
    if x is None:
        return [0] * (4 + _HEADER_DIMS)
    axis = dim % x.dim()
    other = [s for i, s in enumerate(x.shape) if i != axis]
    kind = _DTYPES.index(x.dtype) if x.dtype in _DTYPES else -1
    return [1, kind, x.dim(), x.shape[axis], *(other + [-1] * _HEADER_DIMS)[:_HEADER_DIMS]]


def gather_points(
    items: list[tuple[object, int, str]], group: Group, device: torch.device | None = None
) -> list[Tensor | None]:
    """Return the unions of every rank's shards along their point axes (sizes may differ).

    ``items`` lists ``(shard, dim, name)``: validated shards (tensors) or None, ``dim``
    the point axis. One all-gather of fixed-width headers checks, for all of them at
    once, that every rank gives the same ones, with the same dtype and the same sizes
    off the point axis, and tells the row counts; then one all-gather per shard moves
    the data (5 collectives for two measures and their weights, 20 before). The headers
    travel on ``device`` or the first shard's (NCCL needs CUDA tensors). Backward keeps
    this rank's own rows: the gradient of the union reaching here is already summed over
    the ranks (by :func:`sum_gradients` where it is projected).
    """
    xs = [None if x is None else check_tensor(x, name) for x, _, name in items]
    given = [x for x in xs if x is not None]
    device = given[0].device if given else (device or torch.device("cpu"))
    header = torch.tensor(
        [_header(x, dim) for x, (_, dim, _) in zip(xs, items, strict=True)],
        dtype=torch.int64,
        device=device,
    )
    headers = torch.stack(group.all_gather(header)).tolist()  # (ranks, items, width)
    out: list[Tensor | None] = []
    for i, (x, (_, dim, name)) in enumerate(zip(xs, items, strict=True)):
        rows = [h[i] for h in headers]
        if len({r[0] for r in rows}) != 1:
            raise ValueError(
                f"process_group with gather=True: {name} must be given on every rank or on "
                f"none; given on ranks {[r for r, h in enumerate(rows) if h[0]]}"
            )
        if x is None:
            out.append(None)
            continue
        shapes = {(r[1], r[2], *r[4:]) for r in rows}
        if len(shapes) != 1 or max(r[2] for r in rows) > _HEADER_DIMS + 1:
            raise ValueError(
                f"process_group with gather=True: the shards of {name} must agree in dtype and "
                f"in every dimension but the point axis (at most {_HEADER_DIMS + 1} "
                f"dimensions); this rank's {name} has shape {tuple(x.shape)} and dtype {x.dtype}"
            )
        counts = [r[3] for r in rows]
        axis = dim % x.dim()
        if torch.is_grad_enabled() and x.requires_grad:
            out.append(_GatherOwnGrad.apply(x, group, axis, counts))
        else:
            out.append(_gather_along(group, x, axis, counts))
    return out
