"""The Numba kernels of rooted trees, behind :mod:`tsw.core._kernels` (imported there only).

Module-level functions, so that Numba's on-disk cache (``cache=True``) serves later
processes without compiling again. The traversal and the matching follow, step for step,
the NumPy/Python code they replace (``tsw.core.tree_wasserstein._euler_tour_numpy`` and
``tsw.core.tree_plan._match_python``), so that both give the same orders and entries; the
sums over subtrees replace ``tsw.core.tree_wasserstein.subtree_sums_torch`` (the same sums,
accumulated in another order).

* ``euler_tour``: the pre-order of a parent array (children pushed on a stack in
  increasing label order, so visited in decreasing order) and the end of every subtree in
  it, with a status code for parent arrays that are not trees.
* ``match``: the bottom-up matching of an optimal transport plan on a tree whose nodes
  are labelled in pre-order.
* ``subtree_sums`` / ``path_sums``: the sums of a function of the nodes over every subtree
  (bottom up) and over every path to the root (top down), on a tree labelled in pre-order:
  the two are each other's transpose (the subtree masses of ``tsw.tree_wasserstein`` and
  their gradient).
"""

# pyright: reportMissingImports=false
from __future__ import annotations

import numba
import numpy as np

jit = numba.njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")


@jit
def euler_tour(parents, pre, end):
    """Fill ``pre`` (the pre-order) and ``end`` (the subtree ends); return a status.

    ``end[k]`` is one past the position in ``pre`` of the last node of the subtree of
    ``pre[k]``: that subtree is ``pre[k:end[k]]``.
    Status: ``-1`` a tree; ``-2 - k`` for ``k`` roots (``k != 1``); ``-(n + 3) - i`` for an
    entry ``parents[i]`` out of range (tested first); ``s >= 0``: only ``s`` nodes reachable
    from the root (a cycle or a disconnected part).
    """
    n = parents.shape[0]
    for i in range(n):
        if parents[i] < -1 or parents[i] >= n:
            return -(n + 3) - i
    roots = 0
    root = 0
    for i in range(n):
        if parents[i] == -1:
            roots += 1
            root = i
    if roots != 1:
        return -2 - roots
    # the children of every node in increasing order, as one flat array
    starts = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        if parents[i] >= 0:
            starts[parents[i] + 1] += 1
    for v in range(n):
        starts[v + 1] += starts[v]
    fill = starts[:-1].copy()
    kids = np.empty(max(n - 1, 1), dtype=np.int64)
    for i in range(n):
        u = parents[i]
        if u >= 0:
            kids[fill[u]] = i
            fill[u] += 1
    stack = np.empty(n, dtype=np.int64)
    stack[0] = root
    top = 1
    seen = 0
    # the subtree of the node popped at position k with h nodes left on the stack ends at
    # the next position popped with fewer than h left: positions waiting for their end,
    # with their h, are kept on a second stack (read in order: no pass over the nodes)
    waiting = np.empty(n, dtype=np.int64)
    height = np.empty(n, dtype=np.int64)
    w = 0
    while top > 0:
        top -= 1
        v = stack[top]
        if seen >= n:
            break
        while w > 0 and height[w - 1] > top:
            w -= 1
            end[waiting[w]] = seen
        waiting[w] = seen
        height[w] = top
        w += 1
        pre[seen] = v
        seen += 1
        for j in range(starts[v], starts[v + 1]):
            if top >= n:  # a cycle pushes more than n nodes: stop there
                break
            stack[top] = kids[j]
            top += 1
    if seen != n:
        return seen
    while w > 0:
        w -= 1
        end[waiting[w]] = n
    return -1


@jit
def match(end, ms, mt, rows, cols, vals, flow):
    """Match bottom-up on a tree labelled in pre-order; return the number of entries.

    ``end[v]`` is the end of node ``v``'s subtree (``v`` to ``end[v] - 1``): the children
    of ``v`` are ``v + 1``, then each next one at the end of the previous one's subtree.
    The children's unmatched pieces (node, mass) of one sign are linked lists joined in
    O(1); at every node they and the node's own masses (its supply after the children's,
    then its demand) are matched in order. ``rows``, ``cols``, ``vals`` receive the
    entries (source node, target node, mass), each with room for ``2 V`` entries, and
    ``flow`` (V,) the mass they move across the edge above each node: the subtree sums
    of ``+m`` at an entry's two nodes and ``-2 m`` at the node where it is matched.
    """
    V = end.shape[0]
    g = np.zeros(V, dtype=np.float64)
    atom = np.empty(2 * V, dtype=np.int64)
    amount = np.empty(2 * V, dtype=np.float64)
    nxt = np.empty(2 * V, dtype=np.int64)
    head = np.empty(V, dtype=np.int64)
    tail = np.empty(V, dtype=np.int64)
    sign = np.zeros(V, dtype=np.int8)
    pieces = 0
    e = 0
    for v in range(V - 1, -1, -1):
        sh = st = dh = dt = -1
        c = v + 1
        while c < end[v]:
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
            c = end[c]
        if ms[v] > 0:
            atom[pieces] = v
            amount[pieces] = ms[v]
            nxt[pieces] = -1
            if sh < 0:
                sh = pieces
            else:
                nxt[st] = pieces
            st = pieces
            pieces += 1
        if mt[v] > 0:
            atom[pieces] = v
            amount[pieces] = mt[v]
            nxt[pieces] = -1
            if dh < 0:
                dh = pieces
            else:
                nxt[dt] = pieces
            dt = pieces
            pieces += 1
        while sh >= 0 and dh >= 0:  # the subtrees' supply meets their demand at v
            m = min(amount[sh], amount[dh])
            rows[e] = atom[sh]
            cols[e] = atom[dh]
            vals[e] = m
            e += 1
            g[atom[sh]] += m  # the entry's path: up from its two nodes to v
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
    _subtree_row(end, g, flow)  # bottom up: a small subtree's flow is not lost
    return e


@jit
def _subtree_row(end, x, out):
    """``out[v] = x[v] + sum of out[c]`` over the children ``c`` of ``v``, children first.

    The sum of ``x`` over every subtree of a tree labelled in pre-order, accumulated
    bottom up: each node's sum holds only the terms of its own subtree, so that a small
    subtree's sum keeps its digits next to large ones elsewhere (a difference of prefix
    sums in pre-order loses them).
    """
    for v in range(end.shape[0] - 1, -1, -1):
        acc = x[v]
        c = v + 1
        while c < end[v]:  # the children: v + 1, then each at its previous one's end
            acc += out[c]
            c = end[c]
        out[v] = acc


@jit
def subtree_sums(end, x, out):
    """Per row: ``out[r, v]``, the sum of ``x[r]`` over the subtree of ``v`` (bottom up)."""
    for r in range(x.shape[0]):
        _subtree_row(end, x[r], out[r])


@jit
def path_sums(end, g, out):
    """Per row: ``out[r, v]``, the sum of ``g[r]`` over ``v`` and its ancestors (top down).

    The transpose of :func:`subtree_sums` (its gradient): node ``u`` is in the subtree of
    ``v`` if and only if ``v`` is on the path from ``u`` to the root.
    """
    V = end.shape[0]
    for r in range(g.shape[0]):
        gr = g[r]
        orow = out[r]
        if V > 0:
            orow[0] = gr[0]
        for v in range(V):
            c = v + 1
            top = orow[v]
            while c < end[v]:
                orow[c] = top + gr[c]
                c = end[c]
