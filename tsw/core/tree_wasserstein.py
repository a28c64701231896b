r"""Closed-form optimal transport on trees.

Two entry points share one mathematical fact (Le et al. 2019): on a tree with edge
weights :math:`w_e`,

.. math::

    W_{d_T,1}(\mu, \nu) = \sum_e w_e\, |\mu(\Gamma_e) - \nu(\Gamma_e)|,

where :math:`\Gamma_e` is the subtree below edge :math:`e`. With an exponent
:math:`p > 1` the same sum of :math:`w_e |\cdot|^p` is the Sobolev transport
:math:`ST_p^p` (Le et al. 2022), **not** :math:`W_p^p` on the tree.

* :func:`tree_wasserstein`: any rooted tree given as a parent array.
* :func:`line_system_cost`: the vectorised closed form on systems of lines, concurrent
  (a star) or chained, for arbitrary signed masses on the lines: the building block
  of every tree-sliced distance.
* :func:`line_cost`: its kernel, for one line rooted at its coordinate 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tsw.core import _kernels
from tsw.core._problem import from_numpy, to_numpy
from tsw.core._safe import broadcast_shape, safe_root
from tsw.core._sort import argsort_last, sort_last, unsort_last
from tsw.core._twice import building_graph, graph_backward
from tsw.core._validation import (
    check_bool,
    check_equal_totals,
    check_finite,
    check_nonnegative,
    check_p,
    check_same_device_dtype,
    check_tensor,
)

__all__ = ["line_cost", "line_system_cost", "runs_compiled", "tree_wasserstein"]


def runs_compiled(x: Tensor, p: float) -> bool:
    """Whether the closed form on lines runs as compiled loops for tensors like ``x``.

    On the CPU, float32 or float64, ``p`` in {1, 2}, with Numba on (``_kernels.usable``).
    """
    return _kernels.usable(x, p=p)


def _compiling() -> bool:
    """Whether ``torch.compile`` is tracing: then out-of-place forms replace ``out=``."""
    return torch.compiler.is_compiling()


def _side_lengths(c: Tensor) -> Tensor:
    """Return the length of the edge on each sorted atom's root side.

    Below the root (``c_j < 0``) the edge to the next atom or to the root,
    ``min(c[j+1], 0) - c[j]`` (with ``c[n] := 0``), crossed by the prefix mass ``P_j``;
    at or above it the edge from the previous atom or from the root, ``c[j] - max(c[j-1],
    0)`` (with ``c[-1] := 0``), crossed by the suffix mass ``S_j``. One of the two parts
    is 0 at every atom, so the length is their sum.
    """
    if _compiling():  # torch.compile cannot trace out= writes into slices
        neg, pos = c.clamp(max=0), c.clamp(min=0)
        dn = torch.cat([neg[..., 1:] - neg[..., :-1], -neg[..., -1:]], dim=-1)
        return dn + torch.cat([pos[..., :1], pos[..., 1:] - pos[..., :-1]], dim=-1)
    buf = c.clamp(max=0)
    out = torch.empty_like(c)
    torch.sub(buf[..., 1:], buf[..., :-1], out=out[..., :-1])
    torch.neg(buf[..., -1:], out=out[..., -1:])
    torch.clamp(c, min=0, out=buf)
    out[..., :1] += buf[..., :1]
    out[..., 1:] += buf[..., 1:]
    out[..., 1:] -= buf[..., :-1]
    return out


def _ray_lengths(c: Tensor) -> Tensor:
    """:func:`_side_lengths` when every coordinate is >= 0 (``c[-1] := 0``)."""
    if _compiling():
        return torch.cat([c[..., :1], c[..., 1:] - c[..., :-1]], dim=-1)
    dp = torch.empty_like(c)
    dp[..., :1] = c[..., :1]
    torch.sub(c[..., 1:], c[..., :-1], out=dp[..., 1:])
    return dp


def _suffix_sums(x: Tensor) -> Tensor:
    """``sum_{i >= j} x_i`` along the last axis, summed from the far end."""
    if _compiling():
        return x.flip(-1).cumsum(-1).flip(-1)
    return x.flip(-1).cumsum_(-1).flip(-1)


def _below(c: Tensor) -> Tensor:
    """1 where a sorted coordinate lies below the root (``c < 0``), else 0, in ``c``'s dtype.

    A float mask (exact products for finite values): faster than ``torch.where`` on the CPU.
    """
    return c.clamp(max=0).sign().neg_()


def _beyond(ms: Tensor, c: Tensor, rays: bool) -> Tensor:
    """Return the mass beyond each sorted atom seen from the root (``ms``: sorted masses).

    The prefix sum ``P_j`` below the root (``c_j < 0``), the suffix sum ``S_j`` at or
    above it, each summed from the far end of its side: a suffix read as ``total -
    P_{j-1}`` would lose a small mass far out beside a large one nearer the root.
    """
    suffix = _suffix_sums(ms)
    if rays:
        return suffix
    below = _below(c.detach())  # piecewise constant: no gradient
    prefix = ms.cumsum(-1) if _compiling() else ms.cumsum_(-1)  # ms is a fresh gather
    # P where below, S elsewhere: S + below (P - S) is not exact, S (1 - below) + P below is
    return suffix.mul_(1 - below).add_(prefix.mul_(below))


def _abs_pow_(x: Tensor, p: float) -> Tensor:
    """In place ``|x|^p`` (one pass for ``p`` = 1 or 2)."""
    if p == 2.0:
        return x.square_()
    x.abs_()
    return x if p == 1.0 else x.pow_(p)


def _dabs_pow_(x: Tensor, p: float) -> Tensor:
    """In place derivative of ``|x|^p``: ``p |x|^(p-1) sign(x)`` (0 at 0; ``2x`` for p = 2)."""
    if p == 1.0:
        return x.sign_()
    if p == 2.0:
        return x.mul_(2.0)
    s = torch.sign(x)
    return x.abs_().pow_(p - 1).mul_(s).mul_(p)


class _LineCost(torch.autograd.Function):
    """Sum over the edges of rooted lines of ``w_e |mass beyond e|^p``.

    Forward and backward are written out (in place where possible: on CPU, large
    fresh allocations cost as much as the arithmetic) and keep only the sorted
    coordinates, the permutation and the masses beyond the atoms (:func:`_beyond`) for
    the backward pass. On the CPU, with Numba installed and p in {1, 2}, the passes
    after the sort are compiled loops (:mod:`tsw.core._kernels`) that follow the same
    formulas.
    """

    @staticmethod
    def forward(ctx, coords: Tensor, masses: Tensor, p: float, rays: bool) -> Tensor:
        # ``coords`` has the number of dimensions of ``masses`` and, on some axes, size 1:
        # the lines along such an axis share their coordinates, sorted once.
        ctx.p = p
        ctx.rays = rays
        ctx.fused = _kernels.usable(coords, masses, p=p)
        if ctx.fused:  # compiled loops (tsw.core._kernels), the sorted values among them
            idx = argsort_last(coords, compact=True)  # int32 where the sort writes it
            cost, beyond, c = _kernels.line_cost_forward(coords, idx, masses, p, rays)
            ctx.save_for_backward(c, idx, beyond, coords, masses)
            return cost
        c, idx = sort_last(coords)
        idx_m = idx.expand(masses.shape) if c.shape != masses.shape else idx
        beyond = _beyond(torch.gather(masses, -1, idx_m), c, rays)
        lengths = _ray_lengths(c) if rays else _side_lengths(c)
        cost = _abs_pow(beyond, p).mul_(lengths).sum(-1)
        ctx.save_for_backward(c, idx, beyond, coords, masses)
        return cost

    @staticmethod
    def backward(ctx, grad: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        c, idx, beyond, coords, masses = ctx.saved_tensors
        p, rays = ctx.p, ctx.rays
        if building_graph():  # create_graph: the same gradient, with its own graph
            cost = partial(line_cost_graph, p=p, rays=rays)
            needs = ctx.needs_input_grad[:2]
            return (*graph_backward(cost, (coords, masses), needs, grad), None, None)
        g = grad.unsqueeze(-1)
        grad_c = grad_m = None
        if ctx.fused:
            grad_m, gc = _kernels.line_cost_backward(
                c, idx, beyond, grad, p, rays, *ctx.needs_input_grad[1::-1]
            )
            return (None if gc is None else _sum_to(gc, c.shape)), grad_m, None, None
        below = None if rays else _below(c)
        if ctx.needs_input_grad[1]:
            # m_i enters P_j for i <= j < z and S_j for z <= j <= i (z: the first atom at
            # or above the root): dC/dm_i sums D_j = w_j d|B_j|^p over those j, from the
            # root outwards on either side (no difference of sums)
            d = _dabs_pow_(beyond.clone(), p).mul_(_ray_lengths(c) if rays else _side_lengths(c))
            if below is None:
                gs = d.cumsum_(-1)
            else:
                part = d * below
                gs = _suffix_sums(part).add_(d.sub_(part).cumsum_(-1))
            grad_m = unsort_last(gs.mul_(g), idx)
            del d, gs
        if ctx.needs_input_grad[0]:
            # dC/dc_j = |B_{j-1}|^p - |B_j|^p below the root, |B_j|^p - |B_{j+1}|^p above
            # it (B_{-1} = B_n = 0), 0 for an atom at the root
            a = _abs_pow(beyond, p)
            up = _backward_diff(a)  # |B_j|^p - |B_{j+1}|^p
            if below is None:
                gc = up
            else:
                down = torch.neg(a)
                down[..., 1:] += a[..., :-1]
                gc = up.mul_(c.clamp(min=0).sign_()).add_(down.mul_(below))
            grad_c = unsort_last(_sum_to(gc.mul_(g), c.shape), idx)
        return grad_c, grad_m, None, None


def _backward_diff(b: Tensor) -> Tensor:
    """``b_j - b_{j+1}`` (with ``b_n := 0``) along the last axis."""
    if _compiling():
        return torch.cat([b[..., :-1] - b[..., 1:], b[..., -1:]], dim=-1)
    d = torch.empty_like(b)
    torch.sub(b[..., :-1], b[..., 1:], out=d[..., :-1])
    d[..., -1:] = b[..., -1:]
    return d


def _abs_pow(x: Tensor, p: float) -> Tensor:
    """``|x|^p`` out of place, twice differentiable at 0 for ``p = 2`` (``x * x``)."""
    if p == 2.0:
        return x * x
    return x.abs() if p == 1.0 else x.abs().pow(p)


def line_cost_graph(coords: Tensor, masses: Tensor, p: float, rays: bool) -> Tensor:
    """:class:`_LineCost`'s forward in differentiable torch operations (its graph backward).

    The same formulas: the atoms sorted by coordinate, the masses beyond them
    (:func:`_beyond`) and ``sum_j |B_j|^p w_j`` over the edges on the atoms' root sides;
    autograd differentiates them as often as asked.
    """
    c, idx = sort_last(coords)  # c = gather(coords, idx): differentiable
    beyond = _beyond(torch.gather(masses, -1, idx.expand(masses.shape)), c, rays)
    if rays:
        lengths = torch.cat([c[..., :1], c[..., 1:] - c[..., :-1]], dim=-1)
    else:
        neg, pos = c.clamp(max=0), c.clamp(min=0)
        dn = torch.cat([neg[..., 1:] - neg[..., :-1], -neg[..., -1:]], dim=-1)
        lengths = dn + torch.cat([pos[..., :1], pos[..., 1:] - pos[..., :-1]], dim=-1)
    return (_abs_pow(beyond, p) * lengths).sum(-1)


def _sum_to(x: Tensor, shape: torch.Size) -> Tensor:
    """Sum the sorted-order gradient of lines that share coordinates (and permutation)."""
    dims = [i for i, (s, t) in enumerate(zip(shape, x.shape, strict=True)) if s != t]
    return x.sum(dims, keepdim=True) if dims else x


def line_cost(coords: Tensor, masses: Tensor, p: float = 1.0, *, rays: bool = False) -> Tensor:
    r"""Tree-metric transport cost on lines rooted at coordinate 0 (batched kernel).

    Each row of ``coords`` holds the coordinates of ``n`` atoms on one line whose
    root (the point where its subtree hangs from the rest of the tree) is at
    coordinate 0; ``masses`` holds their *signed* masses (source minus target).
    The returned value is

    .. math::

        \sum_{e} w_e\, |m(\Gamma_e)|^p,

    over the edges between consecutive atoms and the root, :math:`m(\Gamma_e)` being
    the signed mass beyond the edge seen from 0: the prefix sum on the negative side,
    the suffix sum on the positive side. A line whose signed masses do not sum to
    zero sends the excess through its root, to be accounted for by the caller (the
    parent line of a chain, or nothing for the root of a star).

    Parameters
    ----------
    coords : Tensor of shape (..., n)
        Coordinates along each line. It may have size 1 on axes where ``masses`` has
        more (lines that share their coordinates, as the rays of a spherical tree):
        such coordinates are sorted once and the permutation is shared.
    masses : Tensor of shape (..., n)
        Signed masses, broadcastable with ``coords``.
    p : float, default 1
        Exponent; ``p = 1`` is the tree :math:`W_1`, ``p > 1`` Sobolev-type.
    rays : bool, default False
        The caller guarantees ``coords >= 0`` (rays leaving their root, as on a
        spherical tree): the empty negative side is skipped. Negative coordinates
        would then be treated as 0.

    Returns
    -------
    Tensor of shape (...)
        The sum over the edges of each line (no ``1/p`` root).

    Notes
    -----
    One sort, one gather, O(n log n) per line (per row of ``coords``: one sort serves
    all lines sharing it); the mass beyond an edge is summed from the line's far end on
    either side of the root, so that a small mass far out keeps its digits beside large
    ones nearer the root. The backward pass is analytic (cumulative sums from the root
    outwards and two scatters) and keeps only the sorted coordinates, the permutation
    and the masses beyond the atoms. At ties the gradient is a valid subgradient.

    Examples
    --------
    >>> import torch
    >>> from tsw.core.tree_wasserstein import line_cost
    >>> line_cost(torch.tensor([1.0, 3.0]), torch.tensor([1.0, -1.0]))  # W1 = 2
    tensor(2.)
    """
    shape = broadcast_shape(coords.shape, masses.shape)
    coords = coords.reshape((1,) * (len(shape) - coords.ndim) + tuple(coords.shape))
    return _LineCost.apply(coords, masses.expand(shape), float(p), bool(rays))


def line_system_cost(
    coords: Tensor,
    masses: Tensor,
    attachments: Tensor | None = None,
    p: float = 1.0,
    *,
    validate: bool = True,
) -> Tensor:
    r"""Closed-form transport cost on a system of ``k`` lines forming a tree.

    Parameters
    ----------
    coords : Tensor of shape (..., k, n) or (..., 1, n)
        Coordinate of each of ``n`` atoms on each line, measured from the line's
        source. Shape (..., 1, n) (concurrent lines only): every line gives an atom the
        same coordinate (the rays of a spherical tree), sorted once for all lines.
    masses : Tensor of shape (..., k, n)
        Signed masses (source minus target) put on each line; lines need not be
        balanced, only the whole tree (a point-dependent split moves mass between
        lines).
    attachments : Tensor of shape (..., k), optional
        ``None`` for concurrent lines (a star: every line is rooted at its coordinate
        0, the common root). For a chain, ``attachments[..., i]`` is the coordinate on
        line ``i - 1`` where line ``i`` starts (entry 0 is ignored).
    p : float, default 1
        Exponent, a finite real ``>= 1``: ``p = 1`` gives the tree :math:`W_1`,
        ``p > 1`` the Sobolev-type sum.
    validate : bool, default True
        Run the value check (finite inputs). Types (float32 or float64, one dtype and
        device), shapes and ``p`` are always checked. The masses need not balance: an
        imbalance leaves through the root, which no edge counts (as
        :func:`tsw.partial_tsw` uses).

    Returns
    -------
    Tensor of shape (...)
        :math:`\sum_e w_e |m(\Gamma_e)|^p` over all edges of the tree (no root taken).

    Raises
    ------
    TypeError
        For non-tensors, integer or half-precision dtypes, mixed dtypes.
    ValueError
        For shapes that do not fit (``k, n >= 1``), a bad ``p``, other devices, or
        (``validate``) the value checks.

    Notes
    -----
    For chains, line ``i`` receives a virtual atom at ``attachments[i + 1]`` carrying
    the signed mass of lines ``i + 1, ..., k - 1`` (one cumulative sum from the last), after
    which every line is handled as a ray pair rooted at 0 (spec 1.4). No loop over
    lines or trees.

    Examples
    --------
    >>> import torch
    >>> from tsw.core.tree_wasserstein import line_system_cost
    >>> # two lines through 0: +1 at t=1 on line 0 must travel to t=2 on line 1
    >>> line_system_cost(torch.tensor([[1.0], [2.0]]), torch.tensor([[1.0], [-1.0]]))
    tensor(3.)
    """
    p = check_p(p)
    coords = check_tensor(coords, "coords")
    masses = check_tensor(masses, "masses")
    check_same_device_dtype(coords, "coords", masses, "masses")
    if masses.ndim < 2 or 0 in masses.shape[-2:]:
        raise ValueError(
            "masses must have shape (..., k, n) with k, n >= 1; got "
            f"masses.shape={tuple(masses.shape)}"
        )
    try:
        shape = broadcast_shape(coords.shape, masses.shape)
    except ValueError:
        shape = None
    k_ok = coords.ndim >= 2 and coords.shape[-2] in (1, masses.shape[-2])
    if shape is None or tuple(shape[-2:]) != tuple(masses.shape[-2:]) or not k_ok:
        raise ValueError(
            "coords must have shape (..., k, n) or (..., 1, n) broadcasting with masses "
            f"(..., k, n); got coords.shape={tuple(coords.shape)} and "
            f"masses.shape={tuple(masses.shape)}"
        )
    if attachments is not None:
        check_tensor(attachments, "attachments")
        check_same_device_dtype(coords, "coords", attachments, "attachments")
        k = masses.shape[-2]
        if coords.shape[-2] != k or attachments.ndim < 1 or attachments.shape[-1] != k:
            raise ValueError(
                f"attachments must have shape (..., k) with k={k}, for coords of shape "
                f"(..., k, n); got attachments.shape={tuple(attachments.shape)} and "
                f"coords.shape={tuple(coords.shape)}"
            )
        try:
            broadcast_shape(attachments.shape, shape[:-1])
        except ValueError:
            raise ValueError(
                f"attachments must broadcast to {tuple(shape[:-1])}; got "
                f"attachments.shape={tuple(attachments.shape)}"
            ) from None
    if check_bool(validate, "validate"):
        check_finite(coords, "coords")
        check_finite(masses, "masses")
        if attachments is not None:
            check_finite(attachments, "attachments")
    return system_cost(coords, masses, attachments, p)


def system_cost(coords: Tensor, masses: Tensor, attachments: Tensor | None, p: float) -> Tensor:
    """Compute :func:`line_system_cost` without any check (the driver's closed form)."""
    if attachments is None:
        return line_cost(coords, masses, p).sum(-1)
    masses = masses.expand(coords.shape)
    totals = masses.sum(-1)  # (..., k)
    # the mass of the lines after each line, summed from the last (a suffix sum less the
    # line's own total would lose a small mass far down the chain)
    after = _suffix_sums(totals)
    below = torch.cat([after[..., 1:], torch.zeros_like(after[..., :1])], dim=-1)
    vc = torch.cat([attachments[..., 1:], torch.zeros_like(attachments[..., :1])], dim=-1)
    vc = vc.expand(below.shape)
    coords = torch.cat([coords, vc.unsqueeze(-1)], dim=-1)
    masses = torch.cat([masses, below.unsqueeze(-1)], dim=-1)
    return line_cost(coords, masses, p).sum(-1)


# --------------------------------------------------------------------------- arbitrary trees


def parents_array(parents: object) -> np.ndarray:
    """``parents`` (a tensor, a NumPy array or a sequence of ints) as a 1-D int64 array."""
    given: Any = parents
    shape = tuple(given.shape) if isinstance(given, Tensor) else np.shape(given)
    if shape == (0,):  # read as floats (an empty list): say so before the dtype
        raise ValueError(
            "parents is empty: a tree has at least one node, its root (parent -1); got "
            "parents of shape (0,)"
        )
    if 0 in shape or len(shape) != 1:
        raise ValueError(f"parents must have shape (V,) with V >= 1; got shape {shape}")
    if isinstance(parents, Tensor):
        if parents.dtype.is_floating_point or parents.dtype == torch.bool:
            raise TypeError(f"parents must hold integers; got dtype {parents.dtype}")
        par = parents.detach().cpu().numpy().astype(np.int64)
    else:
        par = np.asarray(parents)
        if par.dtype.kind not in "iu":
            raise TypeError(f"parents must hold integers; got {par.dtype}")
        par = par.astype(np.int64)
    return par


def _euler_tour_numpy(parents: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`euler_tour` without Numba: pre-order, subtree ends and the kernel's status."""
    n = parents.shape[0]
    bad = (parents < -1) | (parents >= n)
    if bad.any():
        return parents, parents, -(n + 3) - int(np.flatnonzero(bad)[0])
    roots = np.flatnonzero(parents == -1)
    if roots.size != 1:
        return parents, parents, -2 - int(roots.size)
    child_mask = parents >= 0
    order_children = np.argsort(parents[child_mask], kind="stable")
    children = np.flatnonzero(child_mask)[order_children]
    starts = np.searchsorted(parents[child_mask][order_children], np.arange(n + 1))
    pre = np.empty(n, dtype=np.int64)
    stack = [int(roots[0])]
    seen = 0
    while stack:  # children pushed in increasing order: visited in decreasing order
        v = stack.pop()
        pre[seen] = v
        seen += 1
        stack.extend(children[starts[v] : starts[v + 1]].tolist())
    if seen != n:
        return parents, parents, seen
    size = np.ones(n, dtype=np.int64)
    up = parents.tolist()
    sizes = size.tolist()
    for v in pre[::-1].tolist():  # subtree sizes, children before parents
        if up[v] >= 0:
            sizes[up[v]] += sizes[v]
    return pre, np.arange(n) + np.asarray(sizes, dtype=np.int64)[pre], -1


def euler_tour(parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pre-order of a rooted tree and the end of every subtree in it; checks the tree.

    ``parents`` is an int64 parent array (V,) (:func:`parents_array`). Returns ``pre``
    (V,), the nodes in pre-order (the root first; a node's children in decreasing label
    order), and ``end`` (V,): the subtree of node ``pre[k]`` is ``pre[k:end[k]]``. Compiled
    (:func:`tsw.core._kernels.trees_usable`) or in NumPy, with the same result; no
    recursion, so paths of any depth are fine. Raises ``ValueError`` naming ``parents``
    for an entry out of range, a number of roots other than one, or a cycle or a part
    not connected to the root.
    """
    if _kernels.trees_usable():
        pre, end, status = _kernels.tree_euler_tour(parents)
    else:
        pre, end, status = _euler_tour_numpy(parents)
    n = parents.shape[0]
    if status == -1:
        return pre, end
    if status <= -(n + 3):
        i = -(n + 3) - status
        raise ValueError(
            f"parents entries must be -1 or node indices in [0, {n}); got parents[{i}]={parents[i]}"
        )
    if status < 0:
        raise ValueError(
            f"parents must contain exactly one root (entry -1); got {-2 - status} roots"
        )
    raise ValueError(
        f"parents must describe a tree (connected, acyclic); only {status} of {n} nodes "
        "are reachable from the root"
    )


def preorder_parents(parents: np.ndarray, pre: np.ndarray) -> np.ndarray:
    """Return every node's parent in pre-order labels (node ``pre[k]`` is ``k``); -1: the root."""
    order = np.empty_like(pre)
    order[pre] = np.arange(pre.shape[0])
    up = parents[pre]
    return np.where(up >= 0, order[np.maximum(up, 0)], -1)


def subtree_sums_torch(x: Tensor, up: np.ndarray) -> Tensor:
    """Sum ``x`` (..., V) over every subtree by doubling the jumps to the ancestors.

    ``x`` is in pre-order labels and ``up`` (:func:`preorder_parents`) the parent of each
    node. Round ``j`` adds each node's partial sum to its ``2^j``-th ancestor: after it,
    a node holds the sum over its descendants less than ``2^(j + 1)`` levels below (the
    jumps of 1, 2, 4, ... levels write every depth in binary once), so
    ``ceil(log2(depth + 1))`` rounds of ``index_add`` (differentiable, on any device)
    finish it. Every partial sum holds terms of the node's own subtree only: no
    difference of prefix sums, whose rounding would lose a small subtree's mass.
    """
    jump = up
    out = x
    while True:
        nodes = np.flatnonzero(jump >= 0)
        if nodes.size == 0:
            return out
        src = torch.as_tensor(nodes, device=x.device)
        dst = torch.as_tensor(jump[nodes], device=x.device)
        out = out.index_add(-1, dst, out.index_select(-1, src))
        jump = jump[np.maximum(jump, 0)]  # the root's entry is -1: beyond it stays -1


def _tree_rows(fn: Any, x: Tensor, end: np.ndarray) -> Tensor:
    """Run the tree kernel ``fn`` on the rows of ``x`` (..., V) in float64; ``x``'s dtype out."""
    rows = x.detach().reshape(-1, x.shape[-1]).to(torch.float64).numpy()
    return torch.from_numpy(fn(end, rows)).to(x.dtype).view(x.shape)


class _SubtreeSums(torch.autograd.Function):
    """Sums over every subtree, bottom up, compiled (:func:`tsw.core._kernels.tree_subtree_sums`).

    Linear, with the path sums (:class:`_PathSums`) as its transpose: its gradient, to
    any order.
    """

    @staticmethod
    def forward(ctx, x: Tensor, end: np.ndarray) -> Tensor:  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        ctx.end = end
        return _tree_rows(_kernels.tree_subtree_sums, x, end)

    @staticmethod
    def backward(ctx, grad: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        return _PathSums.apply(grad, ctx.end), None


class _PathSums(torch.autograd.Function):
    """Sums over every path to the root, top down: the gradient of :class:`_SubtreeSums`."""

    @staticmethod
    def forward(ctx, g: Tensor, end: np.ndarray) -> Tensor:  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        ctx.end = end
        return _tree_rows(_kernels.tree_path_sums, g, end)

    @staticmethod
    def backward(ctx, grad: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        return _SubtreeSums.apply(grad, ctx.end), None


def subtree_sums(x: Tensor, parents: np.ndarray, pre: np.ndarray, end: np.ndarray) -> Tensor:
    """Sum ``x`` (..., V) over every subtree, bottom up; differentiable.

    ``x`` is in pre-order labels (``pre`` and ``end`` from :func:`euler_tour` of
    ``parents``). Compiled on the CPU (:func:`tsw.core._kernels.trees_usable`: one pass,
    children before parents, in float64), :func:`subtree_sums_torch` otherwise.
    """
    if x.device.type == "cpu" and _kernels.trees_usable():
        return _SubtreeSums.apply(x, end)
    return subtree_sums_torch(x, preorder_parents(parents, pre))


def subtree_masses(
    mass_s: Tensor, mass_t: Tensor, parents: np.ndarray, pre: np.ndarray, end: np.ndarray
) -> Tensor:
    """``mu(subtree) - nu(subtree)`` (..., V - 1) of every node but the root, in pre-order.

    Node ``pre[k]``'s subtree is ``pre[k:end[k]]`` (:func:`euler_tour`); its mass is
    summed bottom up (:func:`subtree_sums`). Differentiable.
    """
    order = torch.as_tensor(pre, device=mass_s.device)
    return subtree_sums((mass_s - mass_t).index_select(-1, order), parents, pre, end)[..., 1:]


def _as_input(x: object, name: str, like: object) -> Tensor:
    """``x`` as a tensor: a list in the kind and dtype of ``like`` (float64 NumPy if None)."""
    if isinstance(x, list | tuple):
        try:
            if isinstance(like, Tensor):
                return torch.tensor(x, dtype=like.dtype, device=like.device)
            dtype = like.dtype if isinstance(like, np.ndarray) else np.float64
            x = np.asarray(x, dtype=dtype)
        except (TypeError, ValueError) as err:
            raise TypeError(f"{name} must be a list of real numbers; got {x!r:.60}") from err
    return check_tensor(from_numpy(x, name), name)


def tree_inputs(
    parents: object, edge_lengths: object, mass_s: object, mass_t: object, validate: object
) -> tuple[np.ndarray, Tensor, Tensor, Tensor, bool]:
    """Check and convert the inputs of :func:`tree_wasserstein` and ``tsw.tree_plan``.

    ``edge_lengths``, ``mass_s`` and ``mass_t`` are tensors or NumPy arrays, not both
    (``TypeError``); a list is read in the kind and dtype of the first array given
    (float64 NumPy when all are lists). Returns the int64 parent array (not yet checked
    as a tree: :func:`euler_tour` does), the three as tensors of one dtype and device, and
    whether the output is NumPy (no tensor given). ``validate`` runs the value checks
    (finite, non-negative, equal totals).
    """
    named = {"edge_lengths": edge_lengths, "mass_s": mass_s, "mass_t": mass_t}
    arrays = {k: x for k, x in named.items() if isinstance(x, np.ndarray | Tensor)}
    if len({isinstance(x, Tensor) for x in arrays.values()}) == 2:
        got = ", ".join(f"{k}: {type(x).__name__}" for k, x in arrays.items())
        raise TypeError(
            "edge_lengths, mass_s and mass_t must be all torch tensors or all numpy arrays "
            f"(a list takes the kind of the others); got {got}"
        )
    like = next(iter(arrays.values()), None)
    numpy = not isinstance(like, Tensor)
    edge_lengths, mass_s, mass_t = (_as_input(x, k, like) for k, x in named.items())
    check_same_device_dtype(mass_s, "mass_s", mass_t, "mass_t")
    check_same_device_dtype(mass_s, "mass_s", edge_lengths, "edge_lengths")
    par = parents_array(parents)
    n = par.shape[0]
    if mass_s.shape != mass_t.shape or mass_s.ndim == 0 or mass_s.shape[-1] != n:
        raise ValueError(
            f"mass_s and mass_t must have the same shape (..., V) with V={n}; got "
            f"mass_s.shape={tuple(mass_s.shape)} and mass_t.shape={tuple(mass_t.shape)}"
        )
    try:
        fits = edge_lengths.ndim > 0 and edge_lengths.shape[-1] == n
        fits = fits and broadcast_shape(edge_lengths.shape, mass_s.shape) == mass_s.shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"edge_lengths must have shape (V,) or (..., V) with V={n}, broadcasting to "
            f"mass_s.shape={tuple(mass_s.shape)}; got "
            f"edge_lengths.shape={tuple(edge_lengths.shape)}"
        )
    if check_bool(validate, "validate"):
        for t, name in ((mass_s, "mass_s"), (mass_t, "mass_t"), (edge_lengths, "edge_lengths")):
            check_nonnegative(t, name)
        check_equal_totals(
            (mass_s.sum(-1), mass_t.sum(-1)), ("mass_s.sum()", "mass_t.sum()"), mass_s.dtype
        )
    return par, edge_lengths, mass_s, mass_t, numpy


def tree_wasserstein(
    parents: Tensor | np.ndarray | Sequence[int],
    edge_lengths: Tensor | np.ndarray | Sequence[float],
    mass_s: Tensor | np.ndarray | Sequence[float],
    mass_t: Tensor | np.ndarray | Sequence[float],
    p: float = 1,
    *,
    validate: bool = True,
    power: bool = False,
) -> Tensor | np.ndarray:
    r"""Exact optimal transport between two measures on a rooted tree.

    References: [Le2019]_ and [Le2022]_.

    .. math::

        TW_p(\mu, \nu) = \Big(\sum_{v \neq r} w_v\,
            |\mu(\Gamma(v)) - \nu(\Gamma(v))|^p\Big)^{1/p},

    where :math:`w_v` is the length of the edge from node ``v`` to its parent and
    :math:`\Gamma(v)` the subtree rooted at ``v``. For ``p = 1`` this is the
    Wasserstein-1 distance for the tree path metric (Le et al. 2019); for ``p > 1`` it
    is the Sobolev transport :math:`ST_p` (Le et al. 2022), a metric that differs from
    :math:`W_p` on the tree.

    Parameters
    ----------
    parents : Tensor, ndarray or sequence of int, shape (V,)
        ``parents[v]`` is the parent of node ``v``; the root has parent ``-1``.
    edge_lengths : Tensor, ndarray or list, shape (V,) or broadcastable to (..., V)
        Non-negative length of the edge ``(v, parents[v])``; the root's entry is
        ignored. Differentiable.
    mass_s, mass_t : Tensor, ndarray or list, shape (..., V)
        Non-negative masses on the nodes with equal totals; leading dimensions are
        batch dimensions. Differentiable. ``edge_lengths``, ``mass_s`` and ``mass_t``
        are all tensors or all NumPy arrays (``TypeError`` otherwise); a list is read in
        the kind and dtype of the others (float64 NumPy if all are lists).
    p : float, default 1
        Exponent, ``p >= 1``.
    validate : bool, default True
        Run the value checks (finite, non-negative, equal totals).
    power : bool, default False
        Return the ``p``-th power, :math:`\sum_v w_v |\cdot|^p`, without the ``1/p``
        root (its gradient stays bounded where the measures meet). The root is formed
        from the masses divided by their largest difference, so that it stays exact at
        large ``p`` (at ``p = 500`` a mass difference of 0.1 has a p-th power below
        float64's range).

    Returns
    -------
    Tensor or ndarray of shape (...)
        With the dtype and device of the masses; NumPy for NumPy or list inputs.

    Raises
    ------
    TypeError
        For non-floating inputs, or tensors mixed with NumPy arrays.
    ValueError
        If ``parents`` is not a tree (an entry out of range, not exactly one root, a cycle
        or a part not connected to the root), shapes disagree, or the value checks fail.

    Notes
    -----
    The tree structure is read on the CPU in one depth-first pass, O(V) (compiled with
    Numba when it is installed, in NumPy and Python otherwise; no recursion, so paths of
    any depth are fine). The subtree masses are then accumulated bottom up, each from
    its children's, so that a small subtree keeps its mass beside large ones elsewhere
    (a difference of prefix sums would lose it): one compiled pass on the CPU, O(V) per
    measure (in float64), otherwise ``ceil(log2(depth + 1))`` rounds of ``index_add``
    on the masses' device, each adding partial sums to the ancestors ``2^j`` levels up.
    Both are differentiable. Timings against a sort of as many floats are in
    ``benchmarks/results/plans.md``.

    References
    ----------
    .. [Le2019] T. Le, M. Yamada, K. Fukumizu, M. Cuturi. Tree-sliced variants of
       Wasserstein distances. NeurIPS 2019.
    .. [Le2022] T. Le, T. Nguyen, D. Phung, V. A. Nguyen. Sobolev transport: a scalable
       metric for probability measures with graph metrics. AISTATS 2022.

    Examples
    --------
    >>> import torch, tsw
    >>> parents = [-1, 0, 0]          # a root with two leaves
    >>> lengths = torch.tensor([0.0, 1.0, 2.0])
    >>> mu = torch.tensor([0.0, 1.0, 0.0]); nu = torch.tensor([0.0, 0.0, 1.0])
    >>> tsw.tree_wasserstein(parents, lengths, mu, nu)
    tensor(3.)
    """
    p = check_p(p)
    power = check_bool(power, "power")
    par, edge_lengths, mass_s, mass_t, numpy = tree_inputs(
        parents, edge_lengths, mass_s, mass_t, validate
    )
    n = par.shape[0]
    pre, end = euler_tour(par)
    sub = subtree_masses(mass_s, mass_t, par, pre, end)
    lengths = edge_lengths.index_select(-1, torch.as_tensor(pre[1:], device=mass_s.device))
    if power or p == 1:
        cost = (lengths * sub.abs().pow(p)).sum(-1)
        out = cost if power else safe_root(cost, p)
    else:
        # the root of sum w |m|^p as s (sum w (|m| / s)^p)^(1/p), s = max |m|: no power
        # underflows or overflows before the root where the value is representable
        if n == 1:  # no edge
            top = sub.new_ones((*sub.shape[:-1], 1))
        else:
            top = sub.detach().abs().amax(-1, keepdim=True)
        top = torch.where(top > 0, top, torch.ones_like(top))
        cost = (lengths * (sub.abs() / top).pow(p)).sum(-1)
        out = top.squeeze(-1) * safe_root(cost, p)
    return to_numpy(out) if numpy else out
