"""Shared machinery of the Euclidean tree-sliced distances.

Given validated measures and a tree system, compute the line coordinates (one matmul),
optionally the point-to-line distances (without the (T, k, n, d) tensor), the masses
from a splitting map, and the closed form of :mod:`tsw.tree_wasserstein`.
"""

from __future__ import annotations

from collections.abc import Callable

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
    dirs = _batched(trees.directions, 3)  # (B|1, T, k, d)
    if isinstance(trees, ConcurrentLines):
        roots = _batched(trees.roots, 2)  # (B|1, T, d)
        sources = roots.unsqueeze(-2)  # (B|1, T, 1, d)
    else:
        sources = _batched(trees.sources, 3)  # (B|1, T, k, d)
        roots = sources[..., 0, :]
    # Centre on the mean root: translation-invariant, and it keeps the expanded
    # squares below well conditioned when the data sit far from the origin.
    c0 = roots.detach().mean(dim=-2, keepdim=True)  # (B|1, 1, d)
    Zc = Z - c0
    Sc = sources - c0.unsqueeze(-2)
    B, n, d = Z.shape
    T, k = dirs.shape[-3], dirs.shape[-2]
    proj = torch.matmul(dirs.reshape(dirs.shape[0], T * k, d), Zc.transpose(-1, -2))
    coords = proj.reshape(B, T, k, n) - (dirs * Sc).sum(-1).unsqueeze(-1)
    if not distances:
        return coords, None
    if not isinstance(trees, ConcurrentLines):
        raise TypeError("point-to-line distances are implemented for ConcurrentLines only")
    Rc = roots - c0  # (B|1, T, d)
    if d <= EXPLICIT_RESIDUAL_MAX_DIM:
        rel = Zc.unsqueeze(1) - Rc.unsqueeze(-2)  # (B, T, n, d)
        resid = rel.unsqueeze(2) - coords.unsqueeze(-1) * dirs.unsqueeze(-2)  # (B,T,k,n,d)
        dist = torch.linalg.vector_norm(resid, dim=-1)
    else:
        sq = (
            (Zc * Zc).sum(-1).unsqueeze(1)
            - 2 * torch.matmul(Rc, Zc.transpose(-1, -2))
            + (Rc * Rc).sum(-1).unsqueeze(-1)
        )  # (B, T, n) = |z - x_tau|^2
        dist = _LineDistance.apply(sq.unsqueeze(2), coords)
    return coords, dist


def tree_sliced_cost(
    measures: Measures,
    trees: TreeSystem,
    p: float,
    split: Callable[[Tensor | None], Tensor],
    *,
    distances: bool,
) -> Tensor:
    r"""Mean over the trees of the per-tree cost :math:`\sum_{e} w_e |\Delta_e|^p` (no root).

    Parameters
    ----------
    measures : Measures
        Validated, batched measures. Their totals need not agree: on concurrent lines
        the imbalance of a whole tree is absorbed at the root (see
        :func:`tsw.tree_wasserstein.line_system_cost`).
    trees : ConcurrentLines or ChainLines
        The tree systems.
    p : float
        Exponent.
    split : callable
        Maps the distances (B, T, k, n) (or ``None``) to split weights broadcastable
        to (B, T, k, n).
    distances : bool
        Whether ``split`` needs point-to-line distances.

    Returns
    -------
    Tensor of shape (B,)
    """
    Z = torch.cat([measures.X_s, measures.X_t], dim=-2)  # (B, n, d)
    w = torch.cat([measures.a, -measures.b], dim=-1)  # (B, n) signed
    coords, dist = project(Z, trees, distances=distances)
    alpha = split(dist)
    masses = alpha * w[:, None, None, :]
    attachments = _batched(trees.attachments, 2) if isinstance(trees, ChainLines) else None
    per_tree = line_system_cost(coords, masses, attachments, p)  # (B, T)
    return per_tree.mean(-1)


def finish(cost: Tensor, p: float, measures: Measures) -> Tensor:
    """``cost ** (1/p)`` (zero subgradient at 0), unbatched when the input was."""
    value = safe_root(cost, p)
    return value if measures.batched else value[0]


def tree_sliced(
    measures: Measures,
    trees: TreeSystem,
    p: float,
    split: Callable[[Tensor | None], Tensor],
    *,
    distances: bool,
) -> Tensor:
    r"""Tree-sliced value :math:`(\frac1T \sum_\tau \sum_{e} w_e |\Delta_e|^p)^{1/p}`.

    :func:`tree_sliced_cost` followed by :func:`finish`.

    Returns
    -------
    Tensor of shape (B,) or () when the measures were unbatched.
    """
    return finish(tree_sliced_cost(measures, trees, p, split, distances=distances), p, measures)
