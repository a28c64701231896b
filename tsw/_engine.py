"""Shared machinery of the Euclidean tree-sliced distances.

Given validated measures and a tree system, compute the line coordinates (one matmul),
optionally the point-to-line distances (without the (T, k, n, d) tensor), the masses
from a splitting map, and the closed form of :mod:`tsw.tree_wasserstein`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from tsw._validation import Measures
from tsw.tree_wasserstein import line_system_cost
from tsw.trees import ChainLines, ConcurrentLines, TreeSystem

#: Up to this dimension the point-to-line residual is formed explicitly
#: (O(T k n d) memory, exact in floating point); above it the identity
#: ``|z|^2 - <z, theta>^2`` is used on centred data (O(T k n) memory).
EXPLICIT_RESIDUAL_MAX_DIM = 3


class _LineDistance(torch.autograd.Function):
    """``sqrt(max(sq - t^2, 0))``: distance to a line from ``|z - x|^2`` and ``t``.

    The backward pass divides by the distance only where it is positive and gives a
    zero (sub)gradient on the line itself, without any large boolean temporaries.
    """

    @staticmethod
    def forward(ctx, sq: Tensor, t: Tensor) -> Tensor:
        dist = torch.addcmul(sq, t, t, value=-1).clamp_min_(0).sqrt_()
        ctx.save_for_backward(t, dist)
        return dist

    @staticmethod
    def backward(ctx, grad: Tensor):
        t, dist = ctx.saved_tensors
        # grad / dist, and 0 where dist == 0: dist / (dist^2 + tiny) in two passes
        tiny = torch.full((), torch.finfo(dist.dtype).tiny, dtype=dist.dtype, device=dist.device)
        r = torch.addcmul(tiny, dist, dist)
        r = torch.div(dist, r, out=r).mul_(grad)
        grad_sq = grad_t = None
        if ctx.needs_input_grad[0]:
            grad_sq = 0.5 * r.sum(-2, keepdim=True) if r.shape[-2] > 1 else 0.5 * r
        if ctx.needs_input_grad[1]:
            grad_t = r.mul_(t).neg_()
        return grad_sq, grad_t


def safe_root(x: Tensor, p: float) -> Tensor:
    """``x ** (1/p)`` for ``x >= 0`` with a zero (sub)gradient at ``x = 0``; NaN stays NaN."""
    if p == 1.0:
        return x
    zero = x == 0
    return torch.where(zero, torch.zeros_like(x), torch.where(zero, 1, x).pow(1.0 / p))


def check_trees_batch(trees: TreeSystem, measures: Measures) -> None:
    """Raise if the trees' dimension or batch does not fit the measures."""
    d = measures.X_s.shape[-1]
    if trees.dim != d:
        raise ValueError(
            f"trees must live in the dimension of the data, d={d}; got trees of dimension "
            f"{trees.dim} (directions.shape={tuple(trees.directions.shape)})"
        )
    if (
        trees.directions.device != measures.X_s.device
        or trees.directions.dtype != measures.X_s.dtype
    ):
        raise ValueError(
            "trees must have the dtype and device of X_s "
            f"({measures.X_s.dtype} on {measures.X_s.device}); got "
            f"{trees.directions.dtype} on {trees.directions.device}"
        )
    tb = trees.batch_size
    B = measures.X_s.shape[0]
    if tb is not None and (not measures.batched or tb != B):
        shape = tuple(measures.X_s.shape if measures.batched else measures.X_s.shape[1:])
        raise ValueError(
            f"batched trees (batch size {tb}) need batched measures of the same batch size; "
            f"got X_s.shape={shape}"
        )


def weighted_center(measures: Measures) -> Tensor:
    """Detached weighted mean of both measures, shape (B, d)."""
    a, b = measures.a.detach(), measures.b.detach()
    num = (a.unsqueeze(-1) * measures.X_s.detach()).sum(-2) + (
        b.unsqueeze(-1) * measures.X_t.detach()
    ).sum(-2)
    return num / (a.sum(-1) + b.sum(-1)).unsqueeze(-1)


def _batched(t: Tensor, unbatched_ndim: int) -> Tensor:
    """Add a leading batch axis of size 1 to tree tensors without one."""
    return t if t.ndim > unbatched_ndim else t.unsqueeze(0)


class Offsets(NamedTuple):
    """Where the points sit relative to the roots of concurrent lines.

    Attributes
    ----------
    coords : Tensor of shape (B, T, k, n)
        ``s = <z - x_tau, theta_l>``, the linear coordinate on each line.
    dirs : Tensor of shape (B|1, T, k, d)
        The line directions.
    rel : Tensor of shape (B, T, n, d) or None
        ``z - x_tau`` formed explicitly (``d <= EXPLICIT_RESIDUAL_MAX_DIM``).
    sq : Tensor of shape (B, T, 1, n) or None
        ``|z - x_tau|^2`` from centred data (above that dimension).
    """

    coords: Tensor
    dirs: Tensor
    rel: Tensor | None
    sq: Tensor | None


class _SafeSqrt(torch.autograd.Function):
    """``sqrt(max(q, 0))`` with a zero (sub)gradient where the result is 0."""

    @staticmethod
    def forward(ctx, q: Tensor) -> Tensor:
        out = q.clamp_min(0).sqrt_()
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        (out,) = ctx.saved_tensors
        tiny = torch.full((), torch.finfo(out.dtype).tiny, dtype=out.dtype, device=out.device)
        r = torch.addcmul(tiny, out, out)
        return torch.div(out, r, out=r).mul_(grad).mul_(0.5)


def _line_coordinates(Z: Tensor, dirs: Tensor, sources: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``<z - source_l, theta_l>`` for every line, on data centred on the mean root.

    ``dirs`` (B|1, T, k, d), ``sources`` (B|1, T, k|1, d) with the root at index 0 of the
    line axis. Centring on the mean root is translation-invariant and keeps expanded
    squares well conditioned when the data sit far from the origin.

    Returns
    -------
    coords : Tensor of shape (B, T, k, n)
    Zc : Tensor of shape (B, n, d)
        The centred points.
    c0 : Tensor of shape (B|1, 1, d)
        The (detached) centre.
    """
    c0 = sources[..., 0, :].detach().mean(dim=-2, keepdim=True)  # (B|1, 1, d)
    Zc = Z - c0
    B, n, d = Z.shape
    T, k = dirs.shape[-3], dirs.shape[-2]
    proj = torch.matmul(dirs.reshape(dirs.shape[0], T * k, d), Zc.transpose(-1, -2))
    offset = (dirs * (sources - c0.unsqueeze(-2))).sum(-1).unsqueeze(-1)
    return proj.reshape(B, T, k, n) - offset, Zc, c0


def offsets(Z: Tensor, trees: ConcurrentLines) -> Offsets:
    """Linear coordinates of points on concurrent lines and what distances need.

    Parameters
    ----------
    Z : Tensor of shape (B, n, d)
        Points.
    trees : ConcurrentLines
        ``T`` trees of ``k`` lines, shared or with batch size ``B``.

    Returns
    -------
    Offsets
        No (T, k, n, d) tensor is formed above ``d = EXPLICIT_RESIDUAL_MAX_DIM``.
    """
    dirs = _batched(trees.directions, 3)  # (B|1, T, k, d)
    roots = _batched(trees.roots, 2)  # (B|1, T, d)
    coords, Zc, c0 = _line_coordinates(Z, dirs, roots.unsqueeze(-2))
    Rc = roots - c0  # (B|1, T, d)
    d = Z.shape[-1]
    if d <= EXPLICIT_RESIDUAL_MAX_DIM:
        return Offsets(coords, dirs, Zc.unsqueeze(1) - Rc.unsqueeze(-2), None)
    sq = (
        (Zc * Zc).sum(-1).unsqueeze(1)
        - 2 * torch.matmul(Rc, Zc.transpose(-1, -2))
        + (Rc * Rc).sum(-1).unsqueeze(-1)
    )  # (B, T, n) = |z - x_tau|^2
    return Offsets(coords, dirs, None, sq.unsqueeze(2))


def line_distance(off: Offsets) -> Tensor:
    """Distance of every point to every line, shape (B, T, k, n)."""
    if off.rel is not None:
        return point_distance(off, off.coords)
    return _LineDistance.apply(off.sq, off.coords)


def point_distance(off: Offsets, u: Tensor | float) -> Tensor:
    """``|(z - x_tau) - u theta_l|``: distance to the point at coordinate ``u`` of line l.

    ``u`` is a number or a tensor broadcastable to (B, T, k, n); the result has shape
    (B, T, k, n). Above ``d = EXPLICIT_RESIDUAL_MAX_DIM`` it is
    ``sqrt(|z - x|^2 - 2 u s + u^2)``, resolved to about ``sqrt(eps) |z - x|`` near 0,
    with a zero subgradient at 0.
    """
    if off.rel is not None:
        u = torch.as_tensor(u, dtype=off.rel.dtype, device=off.rel.device)
        u = u.unsqueeze(-1) if u.ndim else u
        resid = off.rel.unsqueeze(2) - u * off.dirs.unsqueeze(-2)  # (B, T, k, n, d)
        return torch.linalg.vector_norm(resid, dim=-1)
    if isinstance(u, Tensor):
        q = torch.addcmul(off.sq, off.coords, u, value=-2).addcmul_(u, u)
    else:
        q = off.sq - (2 * u) * off.coords + u * u
    return _SafeSqrt.apply(q)


def radial_distance(off: Offsets) -> Tensor:
    """``|z - x_tau|``, the same on every line of a tree: shape (B, T, 1, n)."""
    if off.rel is not None:
        return torch.linalg.vector_norm(off.rel, dim=-1).unsqueeze(2)
    return _SafeSqrt.apply(off.sq)


def project(Z: Tensor, trees: TreeSystem, *, distances: bool) -> tuple[Tensor, Tensor | None]:
    """Coordinates of points on every line, and optionally distances to the lines.

    Parameters
    ----------
    Z : Tensor of shape (B, n, d)
        Points.
    trees : ConcurrentLines or ChainLines
        ``T`` trees of ``k`` lines, shared or with batch size ``B``.
    distances : bool
        Also return the Euclidean distance of each point to each line (concurrent
        lines only).

    Returns
    -------
    coords : Tensor of shape (B, T, k, n)
        ``<z - source_l, theta_l>``.
    dist : Tensor of shape (B, T, k, n) or None
    """
    if distances:
        if not isinstance(trees, ConcurrentLines):
            raise TypeError("point-to-line distances are implemented for ConcurrentLines only")
        off = offsets(Z, trees)
        return off.coords, line_distance(off)
    dirs = _batched(trees.directions, 3)  # (B|1, T, k, d)
    if isinstance(trees, ConcurrentLines):
        sources = _batched(trees.roots, 2).unsqueeze(-2)  # (B|1, T, 1, d)
    else:
        sources = _batched(trees.sources, 3)  # (B|1, T, k, d)
    coords, _, _ = _line_coordinates(Z, dirs, sources)
    return coords, None


def tree_cost(
    measures: Measures,
    coords: Tensor,
    alpha: Tensor,
    p: float,
    attachments: Tensor | None = None,
) -> Tensor:
    r"""Mean over the trees of the per-tree cost :math:`\sum_e w_e |\Delta_e|^p` (no root).

    Parameters
    ----------
    measures : Measures
        Validated, batched measures (their ``n = N + M`` atoms, source first). Their
        totals need not agree: on concurrent lines the imbalance of a whole tree is
        absorbed at the root (see :func:`tsw.tree_wasserstein.line_system_cost`).
    coords : Tensor of shape (B, T, k, n) or (B, T, 1, n)
        Coordinates of the atoms on the lines (the same on every line when the line
        axis has size 1: one sort per tree).
    alpha : Tensor broadcastable to (B, T, k, n)
        Split weights.
    p : float
        Exponent.
    attachments : Tensor of shape (B|1, T, k), optional
        For chains (see :func:`tsw.line_system_cost`).

    Returns
    -------
    Tensor of shape (B,)
    """
    w = torch.cat([measures.a, -measures.b], dim=-1)  # (B, n) signed
    masses = alpha * w[:, None, None, :]
    return line_system_cost(coords, masses, attachments, p).mean(-1)  # (B,)


def finish(cost: Tensor, p: float, measures: Measures) -> Tensor:
    """``cost ** (1/p)`` (zero subgradient at 0), unbatched when the input was."""
    value = safe_root(cost, p)
    return value if measures.batched else value[0]


def tree_value(
    measures: Measures,
    coords: Tensor,
    alpha: Tensor,
    p: float,
    attachments: Tensor | None = None,
) -> Tensor:
    """:func:`tree_cost` followed by :func:`finish`: shape (B,), or () if unbatched."""
    return finish(tree_cost(measures, coords, alpha, p, attachments), p, measures)


def tree_sliced_cost(
    measures: Measures,
    trees: TreeSystem,
    p: float,
    split: Callable[[Tensor | None], Tensor],
    *,
    distances: bool,
) -> Tensor:
    r"""Mean per-tree cost (no root) of the points projected on ``trees``, shape (B,).

    Parameters
    ----------
    measures : Measures
        Validated, batched measures.
    trees : ConcurrentLines or ChainLines
        The tree systems.
    p : float
        Exponent.
    split : callable
        Maps the distances (B, T, k, n) (or ``None``) to split weights broadcastable
        to (B, T, k, n).
    distances : bool
        Whether ``split`` needs point-to-line distances.
    """
    Z = torch.cat([measures.X_s, measures.X_t], dim=-2)  # (B, n, d)
    coords, dist = project(Z, trees, distances=distances)
    attachments = _batched(trees.attachments, 2) if isinstance(trees, ChainLines) else None
    return tree_cost(measures, coords, split(dist), p, attachments)


def tree_sliced(
    measures: Measures,
    trees: TreeSystem,
    p: float,
    split: Callable[[Tensor | None], Tensor],
    *,
    distances: bool,
) -> Tensor:
    r"""Tree-sliced value :math:`(\frac1T \sum_\tau \sum_{e} w_e |\Delta_e|^p)^{1/p}`.

    :func:`tree_sliced_cost` followed by :func:`finish`; shape (B,) or () when the
    measures were unbatched.
    """
    return finish(tree_sliced_cost(measures, trees, p, split, distances=distances), p, measures)
