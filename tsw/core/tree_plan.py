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

from tsw.core import _kernels
from tsw.core._plans import Accumulator
from tsw.core._problem import to_numpy
from tsw.core._random import refuse_tracing
from tsw.core._validation import check_bool
from tsw.core.tree_wasserstein import (
    euler_tour,
    parents_array,
    preorder_parents,
    subtree_masses,
    subtree_sums_torch,
    tree_inputs,
)

__all__ = ["tree_plan"]


def _match_python(
    end: np.ndarray, up: np.ndarray, ms: np.ndarray, mt: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Match bottom-up without Numba (``_numba_trees.match``, step for step).

    On a tree labelled in pre-order, node ``v``'s subtree ``v .. end[v] - 1`` and its
    parent ``up[v]``. Each node's unmatched remainder is a linked list of pieces (node,
    mass) of one sign, so that concatenating the children's lists costs O(1); every
    match removes at least one piece, so the pass is O(V) with at most 2V - 1 entries.
    Returns the source nodes, target nodes and masses of the entries, and the mass they
    move across each edge.
    """
    V = len(end)
    ends = end.tolist()
    mass_s, mass_t = ms.tolist(), mt.tolist()
    atom: list[int] = []
    amount: list[float] = []
    nxt: list[int] = []
    head = [-1] * V
    tail = [-1] * V
    sign = [0] * V
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    g = [0.0] * V  # +m at an entry's two nodes, -2m where it is matched (_subtree_sums)
    for v in range(V - 1, -1, -1):
        sh = st = dh = dt = -1
        c = v + 1
        while c < ends[v]:  # the children: v + 1, then each at its previous one's end
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
            c = ends[c]
        if mass_s[v] > 0:
            atom.append(v)
            amount.append(mass_s[v])
            nxt.append(-1)
            if sh < 0:
                sh = len(atom) - 1
            else:
                nxt[st] = len(atom) - 1
            st = len(atom) - 1
        if mass_t[v] > 0:
            atom.append(v)
            amount.append(mass_t[v])
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
            g[atom[sh]] += m
            g[atom[dh]] += m
            g[v] -= 2.0 * m
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
    index = np.asarray
    return (
        index(rows, dtype=np.int64),
        index(cols, dtype=np.int64),
        index(vals, dtype=np.float64),
        _flows(index(g, dtype=np.float64), up),
    )


def _flows(g: np.ndarray, up: np.ndarray) -> np.ndarray:
    """Return the sums of ``g`` over every subtree: the mass the plan moves across each edge.

    With ``g`` holding ``+m`` at both nodes of every entry of mass ``m`` and ``-2 m`` at
    the node where it is matched (their lowest common ancestor), the sum over ``v``'s
    subtree is the mass the entries move across the edge above ``v``: an entry crosses it
    if and only if one of its nodes lies in the subtree and the other does not. Summed
    bottom up (:func:`tsw.core.tree_wasserstein.subtree_sums_torch`; the kernel in one
    pass), so that a small flow keeps its digits beside large ones.
    """
    return subtree_sums_torch(torch.from_numpy(g), up).numpy()


def _fallback_parents(parents: np.ndarray, pre: np.ndarray) -> np.ndarray | None:
    """None where the compiled matching runs, else the parents in pre-order labels."""
    return None if _kernels.trees_usable() else preorder_parents(parents, pre)


def _match_preorder(
    end: np.ndarray, up: np.ndarray | None, ms: np.ndarray, mt: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Match on a tree labelled in pre-order (subtree ends ``end``).

    Compiled where ``up`` is None (:func:`_fallback_parents`), else in Python with the
    parents ``up`` in pre-order labels.
    """
    if up is None:
        return _kernels.tree_match(end, ms, mt)
    return _match_python(end, up, ms, mt)


def match_on_tree(
    parents: np.ndarray, mass_s: np.ndarray, mass_t: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return the entries of an optimal transport plan between two measures on a tree.

    ``parents`` (V,) is a parent array (the root's entry -1), as :func:`tree_plan` takes
    it; ``mass_s`` and ``mass_t`` (V,) are non-negative node masses with equal totals
    (read as float64; neither is checked: an excess of one reaches the root and is left
    out). Returns ``rows``, ``cols`` (int64 node labels) and ``masses`` (float64), each
    (E,) with ``E <= 2V - 1``: the plan moves ``masses[e]`` from node ``rows[e]`` to node
    ``cols[e]``, and it is optimal for the tree path metric whatever the edge lengths.
    No pair (row, col) appears twice and no mass is zero. The same entries as
    :func:`tree_plan`'s plan, compiled when Numba can run
    (:func:`tsw.core._kernels.trees_usable`), in Python otherwise, with the same result.
    Raises ``ValueError`` if ``parents`` is not a tree or the masses are not (V,).
    """
    par = parents_array(parents)
    pre, end = euler_tour(par)
    ms = np.asarray(mass_s, dtype=np.float64)
    mt = np.asarray(mass_t, dtype=np.float64)
    if ms.shape != par.shape or mt.shape != par.shape:
        raise ValueError(
            f"mass_s and mass_t must have shape (V,) with V={par.shape[0]}; got "
            f"mass_s.shape={ms.shape} and mass_t.shape={mt.shape}"
        )
    rows, cols, vals, _ = _match_preorder(end, _fallback_parents(par, pre), ms[pre], mt[pre])
    return pre[rows], pre[cols], vals


def tree_plan(
    parents: Tensor | np.ndarray | Sequence[int],
    edge_lengths: Any,
    mass_s: Any,
    mass_t: Any,
    *,
    dense: bool = False,
    validate: bool = True,
) -> tuple[Any, Any]:
    r"""Compute an exact optimal transport plan between two measures on a rooted tree.

    Returns ``(plan, cost)``, as the library's other plan functions. References:
    [Le2019b]_.

    The plan :math:`P` (``P[u, v]``: mass moved from node ``u`` to node ``v``) has
    marginals ``mass_s`` and ``mass_t`` and solves

    .. math::

        \min_{P \in \Pi(\mu, \nu)} \sum_{u, v} P_{uv}\, d_T(u, v)
        = \sum_{v \neq r} w_v\, |\mu(\Gamma(v)) - \nu(\Gamma(v))|,

    the tree Wasserstein-1 distance of :func:`tsw.tree_wasserstein` (``p = 1``), where
    :math:`d_T` is the path length of the tree. A plan is optimal if and only if no
    edge carries mass both ways, whatever the edge lengths, so the plan does not depend
    on ``edge_lengths``; they give its cost.

    Parameters
    ----------
    parents : Tensor, ndarray or sequence of int, shape (V,)
        ``parents[v]`` is the parent of node ``v``; the root has parent ``-1``.
    edge_lengths : Tensor, ndarray or list, shape (V,) or broadcastable to (..., V)
        Non-negative lengths of the edges ``(v, parents[v])`` (the root's is ignored).
    mass_s, mass_t : Tensor, ndarray or list, shape (..., V)
        Non-negative masses on the nodes with equal totals; leading dimensions are batch
        dimensions. ``edge_lengths``, ``mass_s`` and ``mass_t`` are all tensors or all
        NumPy arrays (``TypeError`` otherwise); a list is read in the kind and dtype of
        the others (float64 NumPy if all are lists).
    dense : bool, default False
        Return a dense (..., V, V) array; otherwise a sparse COO plan: a torch sparse
        tensor (coalesced, at most ``2V - 1`` entries per problem), or scipy's
        ``coo_array`` for NumPy inputs (a list of them for batched masses).
    validate : bool, default True
        Run the value checks (finite, non-negative, equal totals).

    Returns
    -------
    plan : Tensor or ndarray of shape (V, V) or (..., V, V), or sparse
        The plan, in the dtype and on the device of the masses (not differentiable).
    cost : Tensor or ndarray of shape (...)
        :math:`\sum_{u, v} P_{uv}\, d_T(u, v)`, summed over the plan's entries (each
        entry's path length), equal to :func:`tsw.tree_wasserstein` at ``p = 1`` up to
        rounding; differentiable with respect to ``edge_lengths`` (the plan held fixed:
        the mass it moves across each edge) and to the masses (the gradient of the
        tree Wasserstein-1 distance, which the optimal plan's cost is: for ``mass_s``,
        :math:`\sum_{v \neq r,\, u \in \Gamma(v)} w_v\, \mathrm{sign}(\mu(\Gamma(v))
        - \nu(\Gamma(v)))` at node ``u``, its negative for ``mass_t``). NumPy for NumPy
        inputs.

    Raises
    ------
    TypeError
        For non-floating inputs, or tensors mixed with NumPy arrays.
    ValueError
        If ``parents`` is not a tree (an entry out of range, not exactly one root, a cycle
        or a part not connected to the root), shapes disagree, or the value checks fail.

    Notes
    -----
    The nodes are visited once, children before parents (compiled with Numba when it is
    installed, a Python loop otherwise, with the same entries): at each node the
    children's unmatched masses (kept as linked lists, one sign each) and the node's own
    masses are matched in order, and the remainder goes up. Every match uses up at least
    one piece of mass, so the work is O(V) per problem and the plan has at most
    ``2V - 1`` entries (timings in ``benchmarks/results/plans.md``). Each
    match happens at the lowest common ancestor of its two nodes, so its path crosses
    every edge in the direction of the net flow.

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
    >>> plan, cost = tsw.tree_plan(parents, lengths, mu, nu, dense=True)
    >>> plan
    tensor([[0.0000, 0.0000, 0.0000],
            [0.5000, 0.0000, 0.0000],
            [0.0000, 0.0000, 0.5000]])
    >>> cost
    tensor(0.5000)
    """
    refuse_tracing("tsw.tree_plan")  # matched in NumPy: a trace would keep the plan
    dense = check_bool(dense, "dense")
    par, edge_lengths, mass_s, mass_t, numpy = tree_inputs(
        parents, edge_lengths, mass_s, mass_t, validate
    )
    V = par.shape[0]
    pre, end = euler_tour(par)
    lead = tuple(mass_s.shape[:-1])
    ms = mass_s.detach().reshape(-1, V).cpu().to(torch.float64).numpy()[:, pre]
    mt = mass_t.detach().reshape(-1, V).cpu().to(torch.float64).numpy()[:, pre]
    B = ms.shape[0]
    acc = Accumulator(
        B, V, V, mass_s.detach(), dense=dense, batched=bool(lead), numpy=numpy, lead=lead
    )
    # the matching runs on the nodes relabelled in pre-order (node pre[k] is k), so that
    # it reads its lists in order
    flows = np.empty((B, V))
    dev = mass_s.device
    up = _fallback_parents(par, pre)
    for i in range(B):
        rows, cols, vals, flows[i] = _match_preorder(end, up, ms[i], mt[i])
        acc.add(
            torch.from_numpy(pre[rows]).to(dev),
            torch.from_numpy(pre[cols]).to(dev),
            torch.from_numpy(vals).to(dev),
            item=i,
        )
    # the flow across the edge above every node but the root, in pre-order
    flow = torch.from_numpy(flows[:, 1:]).to(device=dev, dtype=mass_s.dtype)
    lengths = edge_lengths.index_select(-1, torch.as_tensor(pre[1:], device=dev))
    cost = (lengths * flow.reshape(*lead, V - 1)).sum(-1)
    if torch.is_grad_enabled() and (mass_s.requires_grad or mass_t.requires_grad):
        # the plan is optimal, so its cost is the tree W1 of the masses: the cost takes
        # that function's gradient with respect to the masses (the dual potentials)
        sub = subtree_masses(mass_s, mass_t, par, pre, end)
        w1 = (lengths.detach() * sub.abs()).sum(-1)
        cost = cost + (w1 - w1.detach())
    plan = acc.result()
    return (plan, to_numpy(cost)) if numpy else (plan, cost)
