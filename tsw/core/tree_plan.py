r"""The exact optimal transport plan between two measures on a rooted tree.

For the tree Wasserstein-1 distance a plan is optimal if and only if no edge carries
mass in both directions: its cost is then :math:`\sum_e w_e |\mu(\Gamma_e) -
\nu(\Gamma_e)|`, the closed form of :func:`tsw.tree_wasserstein` (Le et al. 2019). One
such plan is built bottom-up: at each node, the supply and demand left unmatched in its
subtrees and its own masses are matched, and what remains (of one sign only) goes up to
the parent. :func:`tree_plan` does that in one pass over the nodes, children before
parents.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tsw.core._plans import Accumulator
from tsw.core._problem import from_numpy
from tsw.core._safe import broadcast_shape
from tsw.core._validation import (
    check_bool,
    check_equal_totals,
    check_nonnegative,
    check_same_device_dtype,
    check_tensor,
)
from tsw.core.tree_wasserstein import _euler_tour

__all__ = ["tree_plan"]


def _parents_array(parents: object) -> np.ndarray:
    """``parents`` as a 1-D int64 numpy array (a tensor or a sequence of ints)."""
    if isinstance(parents, Tensor):
        if parents.dtype.is_floating_point or parents.dtype == torch.bool:
            raise TypeError(f"parents must hold integers; got dtype {parents.dtype}")
        par = parents.detach().cpu().numpy().astype(np.int64)
    else:
        par = np.asarray(parents)
        if par.dtype.kind not in "iu":
            raise TypeError(f"parents must hold integers; got {par.dtype}")
        par = par.astype(np.int64)
    if par.ndim != 1 or par.shape[0] == 0:
        raise ValueError(f"parents must have shape (V,) with V >= 1; got shape {par.shape}")
    return par


def _match(
    parents: np.ndarray, pre: np.ndarray, ms: list[float], mt: list[float]
) -> tuple[list[int], list[int], list[float]]:
    """Match bottom-up on one tree: the plan's (source node, target node, mass) entries.

    Each node's unmatched remainder is a linked list of pieces (node, mass) of one sign,
    so that concatenating the children's lists costs O(1); every match removes at least
    one piece, so the pass is O(V) with at most 2V - 1 entries.
    """
    V = len(parents)
    # the children of every node, in pre-order, as one flat list (no list per node: at
    # V = 1e5 the lists and the garbage collector's passes over them took 0.35-0.5 s)
    child = pre[parents[pre] >= 0]
    by_parent = np.argsort(parents[child], kind="stable")
    kids = child[by_parent].tolist()
    starts = np.searchsorted(parents[child][by_parent], np.arange(V + 1)).tolist()
    atom: list[int] = []
    amount: list[float] = []
    nxt: list[int] = []
    head = [-1] * V
    tail = [-1] * V
    sign = [0] * V
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for v in reversed(pre.tolist()):
        sh = st = dh = dt = -1
        for i in range(starts[v], starts[v + 1]):
            c = kids[i]
            s = sign[c]
            if s > 0:
                if sh < 0:
                    sh = head[c]
                else:
                    nxt[st] = head[c]
                st = tail[c]
            elif s < 0:
                if dh < 0:
                    dh = head[c]
                else:
                    nxt[dt] = head[c]
                dt = tail[c]
        if ms[v] > 0:
            atom.append(v)
            amount.append(ms[v])
            nxt.append(-1)
            if sh < 0:
                sh = len(atom) - 1
            else:
                nxt[st] = len(atom) - 1
            st = len(atom) - 1
        if mt[v] > 0:
            atom.append(v)
            amount.append(mt[v])
            nxt.append(-1)
            if dh < 0:
                dh = len(atom) - 1
            else:
                nxt[dt] = len(atom) - 1
            dt = len(atom) - 1
        while sh >= 0 and dh >= 0:  # the subtrees' supply meets their demand at v
            m = min(amount[sh], amount[dh])
            rows.append(atom[sh])
            cols.append(atom[dh])
            vals.append(m)
            amount[sh] -= m
            amount[dh] -= m
            if amount[sh] <= 0:
                sh = nxt[sh]
            if amount[dh] <= 0:
                dh = nxt[dh]
        if sh >= 0:
            head[v], tail[v], sign[v] = sh, st, 1
        elif dh >= 0:
            head[v], tail[v], sign[v] = dh, dt, -1
    # what reaches the root unmatched is the rounding gap of the totals: left out
    return rows, cols, vals


def tree_plan(
    parents: Tensor | Sequence[int],
    edge_lengths: Any,
    mass_s: Any,
    mass_t: Any,
    *,
    dense: bool = False,
    validate: bool = True,
) -> Any:
    r"""Compute an exact optimal transport plan between two measures on a rooted tree.

    References: [Le2019b]_.

    The plan :math:`P` (``P[u, v]``: mass moved from node ``u`` to node ``v``) has
    marginals ``mass_s`` and ``mass_t`` and solves

    .. math::

        \min_{P \in \Pi(\mu, \nu)} \sum_{u, v} P_{uv}\, d_T(u, v)
        = \sum_{v \neq r} w_v\, |\mu(\Gamma(v)) - \nu(\Gamma(v))|,

    the tree Wasserstein-1 distance of :func:`tsw.tree_wasserstein` (``p = 1``), where
    :math:`d_T` is the path length of the tree. A plan is optimal if and only if no
    edge carries mass both ways, whatever the edge lengths, so the plan does not depend
    on ``edge_lengths`` (they are checked, as in :func:`tsw.tree_wasserstein`, and give
    its cost).

    Parameters
    ----------
    parents : Tensor or sequence of int, shape (V,)
        ``parents[v]`` is the parent of node ``v``; the root has parent ``-1``.
    edge_lengths : Tensor of shape (V,) or broadcastable to (..., V)
        Non-negative lengths of the edges ``(v, parents[v])`` (the root's is ignored).
    mass_s, mass_t : Tensor or ndarray of shape (..., V)
        Non-negative masses on the nodes with equal totals; leading dimensions are batch
        dimensions.
    dense : bool, default False
        Return a dense (..., V, V) array; otherwise a sparse COO plan: a torch sparse
        tensor (coalesced, at most ``2V - 1`` entries per problem), or scipy's
        ``coo_array`` for numpy masses (a list of them for batched masses).
    validate : bool, default True
        Run the value checks (finite, non-negative, equal totals).

    Returns
    -------
    Tensor or ndarray of shape (V, V) or (..., V, V), or sparse
        The plan, in the dtype and on the device of the masses (not differentiable).

    Raises
    ------
    TypeError
        For non-tensor or non-floating inputs.
    ValueError
        If ``parents`` is not a tree, shapes disagree, or the value checks fail.

    Notes
    -----
    The nodes are visited once, children before parents, on the CPU (a Python loop): at
    each node the children's unmatched masses (kept as linked lists, one sign each) and
    the node's own masses are matched in order, and the remainder goes up. Every
    match uses up at least one piece of mass, so the work is O(V) per problem and the
    plan has at most ``2V - 1`` entries (measured growth in ``benchmarks/RESULTS.md``,
    "Transport plans"). Each match happens at the lowest common ancestor of its two
    nodes, so its path crosses every edge in the direction of the net flow.

    References
    ----------
    .. [Le2019b] T. Le, M. Yamada, K. Fukumizu, M. Cuturi. Tree-sliced variants of
       Wasserstein distances. NeurIPS 2019.

    Examples
    --------
    >>> import torch, tsw
    >>> parents = [-1, 0, 0]          # a root with two leaves
    >>> lengths = torch.tensor([0.0, 1.0, 2.0])
    >>> mu = torch.tensor([0.0, 0.5, 0.5]); nu = torch.tensor([0.5, 0.0, 0.5])
    >>> tsw.tree_plan(parents, lengths, mu, nu, dense=True)
    tensor([[0.0000, 0.0000, 0.0000],
            [0.5000, 0.0000, 0.0000],
            [0.0000, 0.0000, 0.5000]])
    """
    dense = check_bool(dense, "dense")
    validate = check_bool(validate, "validate")
    numpy = isinstance(mass_s, np.ndarray)
    if numpy != isinstance(mass_t, np.ndarray) or (
        isinstance(edge_lengths, np.ndarray | Tensor)
        and isinstance(edge_lengths, np.ndarray) != numpy
    ):
        kind = "numpy arrays" if numpy else "torch tensors"
        raise TypeError(f"mass_s, mass_t and edge_lengths must all be {kind} like mass_s")
    mass_s = check_tensor(from_numpy(mass_s, "mass_s"), "mass_s")
    mass_t = check_tensor(from_numpy(mass_t, "mass_t"), "mass_t")
    edge_lengths = check_tensor(from_numpy(edge_lengths, "edge_lengths"), "edge_lengths")
    check_same_device_dtype(mass_s, "mass_s", mass_t, "mass_t")
    check_same_device_dtype(mass_s, "mass_s", edge_lengths, "edge_lengths")
    par = _parents_array(parents)
    V = par.shape[0]
    if mass_s.shape != mass_t.shape or mass_s.ndim == 0 or mass_s.shape[-1] != V:
        raise ValueError(
            f"mass_s and mass_t must have the same shape (..., V) with V={V}; got "
            f"mass_s.shape={tuple(mass_s.shape)} and mass_t.shape={tuple(mass_t.shape)}"
        )
    try:
        fits = edge_lengths.ndim > 0 and edge_lengths.shape[-1] == V
        fits = fits and broadcast_shape(edge_lengths.shape, mass_s.shape) == mass_s.shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"edge_lengths must have shape (V,) or (..., V) with V={V}, broadcasting to "
            f"mass_s.shape={tuple(mass_s.shape)}; got "
            f"edge_lengths.shape={tuple(edge_lengths.shape)}"
        )
    if validate:
        for t, name in ((mass_s, "mass_s"), (mass_t, "mass_t"), (edge_lengths, "edge_lengths")):
            check_nonnegative(t, name)
        check_equal_totals(
            (mass_s.sum(-1), mass_t.sum(-1)), ("mass_s.sum()", "mass_t.sum()"), mass_s.dtype
        )
    pre, _, _ = _euler_tour(par)
    lead = tuple(mass_s.shape[:-1])
    ms = mass_s.detach().reshape(-1, V).cpu().to(torch.float64).numpy()
    mt = mass_t.detach().reshape(-1, V).cpu().to(torch.float64).numpy()
    B = ms.shape[0]
    acc = Accumulator(
        B, V, V, mass_s.detach(), dense=dense, batched=bool(lead), numpy=numpy, lead=lead
    )
    # the nodes relabelled in pre-order, so that the pass reads its lists in order (at
    # V = 1e5, a random recursive tree's pass took 1.8x longer in its own labels)
    rank = np.empty(V, dtype=np.int64)
    rank[pre] = np.arange(V)
    par_pre = np.where(par[pre] >= 0, rank[np.maximum(par[pre], 0)], -1)
    order = np.arange(V)
    dev = mass_s.device
    for i in range(B):
        rows, cols, vals = _match(par_pre, order, ms[i, pre].tolist(), mt[i, pre].tolist())
        acc.add(
            torch.from_numpy(pre[np.asarray(rows, dtype=np.int64)]).to(dev),
            torch.from_numpy(pre[np.asarray(cols, dtype=np.int64)]).to(dev),
            torch.tensor(vals, dtype=torch.float64, device=dev),
            item=i,
        )
    return acc.result()
