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


# --------------------------------------------------------------------------- Flowtree
#
# Flowtree (tsw.support._flowtree) matches points hung as their own leaves under nodes of a
# tree: ``flow_sweep`` is the matching, ``flow_match`` one problem's entries,
# ``flow_sort_rows`` and ``flow_costs`` the costs of many pairs of sparse histograms. The
# Python fallback (``tsw.support._flowtree._sweep_python``) follows ``flow_sweep`` step for
# step, so that both give the same entries.


@jit
def flow_sweep(cell, ms, mt, K, par, depth, rtol, ent, val, work, iwork):
    """Match ``K`` points given in the matching order; return the number of entries.

    Point ``q`` hangs as its own leaf under node ``cell[q]`` of the tree ``par`` (depths
    ``depth``) with supply ``ms[q]`` and demand ``mt[q]``; the points come in the order
    of a pre-order of that tree in which the points under a node precede its children's
    subtrees. A stack holds the open nodes of the current point's path (the branching
    nodes only), each with its unmatched pieces (linked lists of (point, mass) of one
    sign): when the next point leaves a subtree, the subtree's pieces join its parent's,
    where supply meets demand in list order. ``ent`` (2, 2K) and ``val`` (2K,) receive
    the entries (source point, target point; mass). What reaches the root unmatched is
    the rounding gap of the totals when it is at most ``rtol`` times the larger total:
    it joins the last point of the other side matched (no mass is lost); a larger excess
    (unvalidated unequal totals) is left out. ``work`` (2K,) float64 and ``iwork``
    (7, 2K) int64 are work space. One join (append a list pair to a stack entry's, then
    match) serves the points and the closing subtrees, written once in the loop.
    """
    amount = work
    atom = iwork[0]
    nxt = iwork[1]
    s_node = iwork[2]
    s_sh = iwork[3]
    s_st = iwork[4]
    s_dh = iwork[5]
    s_dt = iwork[6]
    last_s = -1
    last_t = -1
    pieces = 0
    e = 0
    top = 0
    total_s = 0.0
    total_t = 0.0
    for q in range(K + 1):  # q == K: close every subtree left open
        sh = -1
        dh = -1
        c = -1
        u = -1
        lca_depth = -1
        if q < K:
            a = ms[q]
            b = mt[q]
            if a > 0:
                total_s += a
            if b > 0:
                total_t += b
            if not (a > 0 or b > 0):
                continue
            if a > 0 and b > 0:  # the point's own supply meets its own demand
                m = min(a, b)
                ent[0, e] = q
                ent[1, e] = q
                val[e] = m
                e += 1
                last_s = q
                last_t = q
                a -= m
                b -= m
            if a > 0:
                atom[pieces] = q
                amount[pieces] = a
                nxt[pieces] = -1
                sh = pieces
                pieces += 1
            elif b > 0:
                atom[pieces] = q
                amount[pieces] = b
                nxt[pieces] = -1
                dh = pieces
                pieces += 1
            c = cell[q]
            if top > 0:  # the common ancestor of the point and the open path
                u = s_node[top - 1]
                v = c
                while depth[u] > depth[v]:
                    u = par[u]
                while depth[v] > depth[u]:
                    v = par[v]
                while u != v:
                    u = par[u]
                    v = par[v]
                lca_depth = depth[u]
        pending = q < K  # the point joins once the subtrees it is not in have closed
        closing = True
        while True:
            if closing and top >= 2 and depth[s_node[top - 2]] >= lca_depth:
                # a subtree the point is not in closes: its pieces join its parent's
                i = top - 2
                jh, jt, kh, kt = s_sh[top - 1], s_st[top - 1], s_dh[top - 1], s_dt[top - 1]
                top -= 1
            elif pending:
                pending = False
                closing = False
                if top > 0:
                    s_node[top - 1] = u  # the open path now ends at the common ancestor
                if top > 0 and s_node[top - 1] == c:
                    i = top - 1
                    jh, jt, kh, kt = sh, sh, dh, dh
                else:  # the point opens its node
                    s_node[top] = c
                    s_sh[top] = sh
                    s_st[top] = sh
                    s_dh[top] = dh
                    s_dt[top] = dh
                    top += 1
                    continue
            else:
                break
            if jh >= 0:  # append the supply list jh..jt, the demand list kh..kt
                if s_sh[i] < 0:
                    s_sh[i] = jh
                else:
                    nxt[s_st[i]] = jh
                s_st[i] = jt
            if kh >= 0:
                if s_dh[i] < 0:
                    s_dh[i] = kh
                else:
                    nxt[s_dt[i]] = kh
                s_dt[i] = kt
            x = s_sh[i]
            y = s_dh[i]
            while x >= 0 and y >= 0:  # supply meets demand in list order
                m = min(amount[x], amount[y])
                ent[0, e] = atom[x]
                ent[1, e] = atom[y]
                val[e] = m
                e += 1
                last_s = atom[x]
                last_t = atom[y]
                amount[x] -= m
                amount[y] -= m
                if amount[x] <= 0:
                    x = nxt[x]
                if amount[y] <= 0:
                    y = nxt[y]
            s_sh[i] = x
            s_dh[i] = y
    if top == 1:  # the rounding gap of the totals
        x = s_sh[0]
        other = last_t
        if x < 0:
            x = s_dh[0]
            other = last_s
        gap = 0.0
        y = x
        while y >= 0:
            gap += amount[y]
            y = nxt[y]
        if x >= 0 and other >= 0 and gap <= rtol * max(total_s, total_t):
            supply = s_sh[0] >= 0
            while x >= 0:
                ent[0, e] = atom[x] if supply else other
                ent[1, e] = other if supply else atom[x]
                val[e] = amount[x]
                e += 1
                x = nxt[x]
    return e


@jit
def flow_match(cell, ms, mt, par, depth, rtol, ent, val):
    """:func:`flow_sweep` of one problem (work space allocated here); the entries' count."""
    K = cell.shape[0]
    work = np.empty(2 * K + 1, dtype=np.float64)
    iwork = np.empty((7, 2 * K + 1), dtype=np.int64)
    return flow_sweep(cell, ms, mt, K, par, depth, rtol, ent, val, work, iwork)


@jit
def flow_sort_rows(ptr, idx, val, key, out_idx, out_val):
    """Each CSR row's entries sorted by ``key`` of their column (keys distinct in a row)."""
    for r in range(ptr.shape[0] - 1):
        a = ptr[r]
        b = ptr[r + 1]
        k = np.empty(b - a, dtype=np.int64)
        for i in range(a, b):
            k[i - a] = key[idx[i]]
        order = np.argsort(k)
        for i in range(b - a):
            out_idx[a + i] = idx[a + order[i]]
            out_val[a + i] = val[a + order[i]]


@jit
def _ground(X, u, v, metric, p):
    """Return the ground cost between support points ``u`` and ``v`` (``numpy_costs``).

    ``metric``: 0 squared Euclidean, 1 the sum of absolute differences, 2 Euclidean, 3
    Minkowski of order ``p``.
    """
    acc = 0.0
    if metric == 1:
        for k in range(X.shape[1]):
            acc += abs(X[u, k] - X[v, k])
        return acc
    if metric == 3:
        for k in range(X.shape[1]):
            acc += abs(X[u, k] - X[v, k]) ** p
        return acc ** (1.0 / p)
    for k in range(X.shape[1]):
        d = X[u, k] - X[v, k]
        acc += d * d
    return acc if metric == 0 else np.sqrt(acc)


@jit
def flow_costs(
    s_ptr,
    s_idx,
    s_val,
    t_ptr,
    t_idx,
    t_val,
    rows,
    same,
    key,
    cell,
    par,
    depth,
    X,
    metric,
    p,
    rtol,
    out,
):
    """Flowtree costs of pairs of sparse histograms on one tree, added to ``out``.

    The histograms are CSR rows (support points, masses), each row sorted by ``key`` (the
    points' matching order, :func:`flow_sort_rows`); ``cell`` is each support point's
    node. For every ``r``, ``out[r, j]`` gets the cost of s row ``rows[r]`` against t row
    ``j`` (only ``j > rows[r]`` when ``same``): the two rows merged in matching order,
    matched by :func:`flow_sweep`, each entry charged its ground cost.
    """
    m = t_ptr.shape[0] - 1
    ks = 0
    for r in range(rows.shape[0]):
        ks = max(ks, s_ptr[rows[r] + 1] - s_ptr[rows[r]])
    kt = 0
    for j in range(m):
        kt = max(kt, t_ptr[j + 1] - t_ptr[j])
    K = ks + kt
    pt = np.empty(K + 1, dtype=np.int64)
    cq = np.empty(K + 1, dtype=np.int64)
    ms = np.empty(K + 1, dtype=np.float64)
    mt = np.empty(K + 1, dtype=np.float64)
    ent = np.empty((2, 2 * K + 1), dtype=np.int64)
    val = np.empty(2 * K + 1, dtype=np.float64)
    work = np.empty(2 * K + 1, dtype=np.float64)
    iwork = np.empty((7, 2 * K + 1), dtype=np.int64)
    for r in range(rows.shape[0]):
        i = rows[r]
        j0 = i + 1 if same else 0
        for j in range(j0, m):
            a = s_ptr[i]
            ae = s_ptr[i + 1]
            b = t_ptr[j]
            be = t_ptr[j + 1]
            n = 0
            while a < ae or b < be:  # the two rows merged in matching order
                if b >= be or (a < ae and key[s_idx[a]] < key[t_idx[b]]):
                    pt[n] = s_idx[a]
                    ms[n] = s_val[a]
                    mt[n] = 0.0
                    a += 1
                elif a >= ae or key[t_idx[b]] < key[s_idx[a]]:
                    pt[n] = t_idx[b]
                    ms[n] = 0.0
                    mt[n] = t_val[b]
                    b += 1
                else:
                    pt[n] = s_idx[a]
                    ms[n] = s_val[a]
                    mt[n] = t_val[b]
                    a += 1
                    b += 1
                cq[n] = cell[pt[n]]
                n += 1
            e = flow_sweep(cq, ms, mt, n, par, depth, rtol, ent, val, work, iwork)
            total = 0.0
            for f in range(e):
                x = ent[0, f]
                y = ent[1, f]
                if x != y:
                    total += val[f] * _ground(X, pt[x], pt[y], metric, p)
            out[r, j] += total


def flow_warm():
    """Call the Flowtree kernels once on a star of two leaves: Numba compiles them.

    The argument types of :mod:`tsw.support._flowmatch`'s calls (int64 indices, float64
    masses, C-contiguous), so that these specialisations are the ones the calls use.
    """
    par = np.array([-1, 0, 0], dtype=np.int64)
    depth = np.array([0, 1, 1], dtype=np.int64)
    cell = np.array([1, 2], dtype=np.int64)
    one, zero = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    flow_match(cell, one, zero, par, depth, 1e-13, np.empty((2, 5), np.int64), np.empty(5))
    ptr, idx = np.array([0, 1, 2], dtype=np.int64), np.array([0, 1], dtype=np.int64)
    out_idx, out_val = np.empty(2, np.int64), np.empty(2)
    flow_sort_rows(ptr, idx, np.ones(2), cell, out_idx, out_val)
    X, out = np.array([[0.0], [1.0]]), np.zeros((2, 2))
    s = (ptr, out_idx, out_val)
    rows = np.arange(2, dtype=np.int64)
    flow_costs(*s, *s, rows, True, cell, cell, par, depth, X, 2, 2.0, 1e-13, out)


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
