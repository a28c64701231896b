r"""Flowtree's matching: points hung under a tree's nodes, matched bottom-up in one sweep.

The matching of :func:`tsw.flowtree` and :func:`tsw.pairwise_flowtree` (Backurs, Dong,
Indyk, Razenshteyn and Wagner, ICML 2020): every point is its own leaf under its node,
and supply meets demand at the lowest node where both are left, as in
:func:`tsw.tree_plan`. The points are visited once in a pre-order of the tree
(:func:`matching_order`), a stack holding the nodes where their paths meet, so that a
pair of histograms costs time in its support points, not in the tree's size. Compiled
behind :mod:`tsw.core._kernels` (``_numba_trees.flow_sweep``, ``flow_costs``), in Python
otherwise (:func:`_sweep_python`, step for step the kernel's, the same entries).

:class:`FlowtreeTrees` holds the trees prepared once (NumPy arrays, picklable) and
:func:`flowtree_costs` the costs between sparse histograms (CSR triples) on them, for
all pairs of two sets, the pairs of one set, or chosen rows against a set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from tsw.core import _kernels
from tsw.core._plans import numpy_costs
from tsw.core._progress import Progress
from tsw.core._threads import by_rows, threads_for
from tsw.core.tree_wasserstein import euler_tour
from tsw.support._trees import SupportTrees, check_trees

__all__ = [
    "CSR",
    "FlowtreeTrees",
    "csr",
    "flowtree_costs",
    "match_points",
    "matching_order",
    "tree_arrays",
]


def _depths(par: np.ndarray) -> np.ndarray:
    """Every node's number of edges to the root, by pointer jumping (O(V log depth)).

    ``par`` must be a rooted tree (one -1, node indices otherwise): the trees of
    :class:`tsw.SupportTrees` are checked when built.
    """
    n = par.shape[0]
    depth = (par >= 0).astype(np.int64)
    up = par.copy()
    for _ in range(int(np.log2(max(n, 2))) + 2):
        going = up >= 0
        if not going.any():
            return depth
        safe = np.maximum(up, 0)
        depth = depth + np.where(going, depth[safe], 0)
        up = np.where(going, up[safe], -1)
    raise ValueError("parents must describe a rooted tree (acyclic, one root)")


def tree_arrays(parents: Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return a tree's int64 parent array and its depths."""
    par = parents.detach().cpu().numpy() if isinstance(parents, Tensor) else parents
    par = np.ascontiguousarray(par, dtype=np.int64)
    return par, _depths(par)


def matching_order(par: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """Return each point's rank in the matching order of points hung under ``cells``.

    Point ``q`` is its own leaf (node ``V + q``) under node ``cells[q]`` of the tree
    ``par`` (V,). The order is :func:`tsw.core.tree_wasserstein.euler_tour`'s pre-order of
    that tree (a node's children in decreasing label order): the points under a node come
    before its child subtrees, in decreasing index, and every subtree's points are
    consecutive. It is the order in which :func:`tsw.tree_plan`'s matching meets them.
    """
    V = par.shape[0]
    pre, _ = euler_tour(np.concatenate([par, np.asarray(cells, dtype=np.int64)]))
    rank = np.empty_like(pre)
    rank[pre] = np.arange(pre.shape[0])
    return rank[V:]


def _sweep_python(
    cell: np.ndarray,
    ms: np.ndarray,
    mt: np.ndarray,
    up: Sequence[int],
    deep: Sequence[int],
    rtol: float,
) -> tuple[list[int], list[int], list[float]]:
    """Flowtree's matching without Numba (``_numba_trees.flow_sweep``, step for step).

    The ``K`` points come in the matching order (:func:`matching_order`), point ``q`` hung
    under node ``cell[q]`` of the tree ``up`` (parents, as a list: read once per tree;
    depths ``deep``) with supply ``ms[q]`` and demand ``mt[q]``. A stack holds the
    branching nodes of the current point's path, each with its unmatched pieces (linked
    lists of (point, mass) of one sign); when the next point leaves a subtree, the
    subtree's pieces join its parent's, where supply meets demand in list order: the
    bottom-up matching of :func:`tsw.tree_plan` restricted to the nodes where paths meet
    (O(K + the nodes walked), no pass over the tree). What reaches the root unmatched is
    the rounding gap of the totals when it is at most ``rtol`` times the larger total: it
    joins the last point of the other side matched, so that no small mass is lost; a
    larger excess (unvalidated unequal totals) is left out. Returns the entries' source
    points, target points and masses.
    """
    cells, supply, demand = cell.tolist(), ms.tolist(), mt.tolist()
    atom: list[int] = []
    amount: list[float] = []
    nxt: list[int] = []
    s_node: list[int] = []
    s_sh: list[int] = []
    s_st: list[int] = []
    s_dh: list[int] = []
    s_dt: list[int] = []
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    last = [-1, -1]

    def join(i: int, sh: int, st: int, dh: int, dt: int) -> None:
        if sh >= 0:
            if s_sh[i] < 0:
                s_sh[i] = sh
            else:
                nxt[s_st[i]] = sh
            s_st[i] = st
        if dh >= 0:
            if s_dh[i] < 0:
                s_dh[i] = dh
            else:
                nxt[s_dt[i]] = dh
            s_dt[i] = dt
        x, y = s_sh[i], s_dh[i]
        while x >= 0 and y >= 0:
            m = min(amount[x], amount[y])
            rows.append(atom[x])
            cols.append(atom[y])
            vals.append(m)
            last[0], last[1] = atom[x], atom[y]
            amount[x] -= m
            amount[y] -= m
            if amount[x] <= 0:
                x = nxt[x]
            if amount[y] <= 0:
                y = nxt[y]
        s_sh[i], s_dh[i] = x, y

    def pop_into_parent() -> None:
        join(len(s_node) - 2, s_sh[-1], s_st[-1], s_dh[-1], s_dt[-1])
        for stack in (s_node, s_sh, s_st, s_dh, s_dt):
            stack.pop()

    total_s = total_t = 0.0
    for q in range(len(cells)):
        a, b = supply[q], demand[q]
        if a > 0:
            total_s += a
        if b > 0:
            total_t += b
        if not (a > 0 or b > 0):
            continue
        sh = dh = -1
        if a > 0 and b > 0:  # the point's own supply meets its own demand
            m = min(a, b)
            rows.append(q)
            cols.append(q)
            vals.append(m)
            last[0] = last[1] = q
            a -= m
            b -= m
        if a > 0 or b > 0:
            atom.append(q)
            amount.append(a if a > 0 else b)
            nxt.append(-1)
            if a > 0:
                sh = len(atom) - 1
            else:
                dh = len(atom) - 1
        c = cells[q]
        if s_node:  # close the subtrees the point is not in: up to the common ancestor
            u, v = s_node[-1], c
            while deep[u] > deep[v]:
                u = up[u]
            while deep[v] > deep[u]:
                v = up[v]
            while u != v:
                u, v = up[u], up[v]
            while len(s_node) >= 2 and deep[s_node[-2]] >= deep[u]:
                pop_into_parent()
            s_node[-1] = u
        if s_node and s_node[-1] == c:
            join(len(s_node) - 1, sh, sh, dh, dh)
        else:
            s_node.append(c)
            s_sh.append(sh)
            s_st.append(sh)
            s_dh.append(dh)
            s_dt.append(dh)
    while len(s_node) >= 2:
        pop_into_parent()
    if s_node:  # the rounding gap of the totals
        x, side = (s_sh[0], 1) if s_sh[0] >= 0 else (s_dh[0], 0)
        gap, y = 0.0, x
        while y >= 0:
            gap += amount[y]
            y = nxt[y]
        if x >= 0 and last[side] >= 0 and gap <= rtol * max(total_s, total_t):
            while x >= 0:
                rows.append(atom[x] if side == 1 else last[0])
                cols.append(last[1] if side == 1 else atom[x])
                vals.append(amount[x])
                x = nxt[x]
    return rows, cols, vals


def match_points(
    cell: np.ndarray,
    ms: np.ndarray,
    mt: np.ndarray,
    par: np.ndarray,
    depth: np.ndarray,
    rtol: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flowtree's matching of points in matching order: compiled when it can run."""
    if _kernels.trees_usable():
        K = cell.shape[0]
        ent, val = np.empty((2, 2 * K + 1), dtype=np.int64), np.empty(2 * K + 1)
        cell, par, depth = (np.ascontiguousarray(x, dtype=np.int64) for x in (cell, par, depth))
        ms, mt = (np.ascontiguousarray(m, dtype=np.float64) for m in (ms, mt))
        kernel = _kernels.tree_kernel("flow_match")
        e = kernel(cell, ms, mt, par, depth, float(rtol), ent, val)
        return ent[0, :e], ent[1, :e], val[:e]
    rows, cols, vals = _sweep_python(cell, ms, mt, par.tolist(), depth.tolist(), rtol)
    return (
        np.asarray(rows, dtype=np.int64),
        np.asarray(cols, dtype=np.int64),
        np.asarray(vals, dtype=np.float64),
    )


# --------------------------------------------------------------------------- pairs


@dataclasses.dataclass(frozen=True)
class FlowtreeTrees:
    """The trees of a :class:`SupportTrees` prepared for Flowtree between histograms.

    NumPy arrays only (it pickles): per tree, the parent array and the depths of its
    nodes, each support point's node (``cells``) and its rank in the matching order
    (``order``, :func:`matching_order`); the support in float64. Built once by
    :meth:`of`, then read by every call of :func:`flowtree_costs`.
    """

    parents: tuple[np.ndarray, ...]
    depth: tuple[np.ndarray, ...]
    cells: tuple[np.ndarray, ...]
    order: tuple[np.ndarray, ...]
    support: np.ndarray

    @classmethod
    def of(cls, trees: SupportTrees) -> FlowtreeTrees:
        """Prepare the trees of ``trees`` (a :class:`SupportTrees`)."""
        trees = check_trees(trees)
        parents, depth, cells, order = [], [], [], []
        for tree in trees.trees:
            par, dep = tree_arrays(tree.parents)
            leaves = np.ascontiguousarray(tree.leaves.detach().cpu().numpy(), dtype=np.int64)
            parents.append(par)
            depth.append(dep)
            cells.append(leaves)
            order.append(np.ascontiguousarray(matching_order(par, leaves)))
        X = np.ascontiguousarray(trees.support.detach().cpu().to(torch.float64).numpy())
        return cls(tuple(parents), tuple(depth), tuple(cells), tuple(order), X)

    @property
    def n_trees(self) -> int:
        """The number of trees ``T``."""
        return len(self.parents)

    @property
    def n_points(self) -> int:
        """The number of support points ``n``."""
        return int(self.support.shape[0])


CSR = tuple[np.ndarray, np.ndarray, np.ndarray]  # row pointers, support points, masses

#: metric codes of the compiled costs (``_numba_trees._ground``)
_SQEUCLIDEAN, _ABS, _EUCLIDEAN, _MINKOWSKI = 0, 1, 2, 3


def _metric_code(metric: str, p: float) -> int:
    """Return the code of ``(metric, p)`` as :func:`tsw.core._plans.numpy_costs` reads them."""
    if metric == "sqeuclidean":
        return _SQEUCLIDEAN
    return _ABS if p == 1.0 else _EUCLIDEAN if p == 2.0 else _MINKOWSKI


def _sort_rows(h: CSR, key: np.ndarray) -> CSR:
    """Return ``h`` with each row's entries in the matching order ``key`` of their points."""
    ptr, idx, val = h
    out_idx, out_val = np.empty_like(idx), np.empty_like(val)
    _kernels.tree_kernel("flow_sort_rows")(ptr, idx, val, key, out_idx, out_val)
    return ptr, out_idx, out_val


def _costs_compiled(
    s: CSR,
    t: CSR,
    rows: np.ndarray,
    same: bool,
    key: np.ndarray,
    cell: np.ndarray,
    par: np.ndarray,
    depth: np.ndarray,
    X: np.ndarray,
    code: int,
    p: float,
    rtol: float,
    out: np.ndarray,
) -> None:
    """``_numba_trees.flow_costs`` (rows sorted by ``key``), rows shared among threads.

    Each row of ``out`` is written by one thread: the values do not depend on their
    number.
    """
    kernel = _kernels.tree_kernel("flow_costs")
    args = (key, cell, par, depth, X, int(code), float(p), float(rtol))

    def part(sl: slice) -> None:
        kernel(*s, *t, rows[sl], bool(same), *args, out[sl])

    work = int(rows.shape[0]) * (t[0].shape[0] - 1) * max(1, X.shape[1])
    by_rows(part, rows.shape[0], threads_for(rows.shape[0], work))


def _costs_python(
    s: CSR,
    t: CSR,
    rows: np.ndarray,
    same: bool,
    key: np.ndarray,
    cell: np.ndarray,
    up: Sequence[int],
    deep: Sequence[int],
    X: np.ndarray,
    metric: str,
    p: float,
    rtol: float,
    out: np.ndarray,
) -> None:
    """``_numba_trees.flow_costs`` without Numba (one tree; the same entries).

    The rows need not be sorted: each pair's points are sorted in matching order here.
    """
    (s_ptr, s_idx, s_val), (t_ptr, t_idx, t_val) = s, t
    for r, i in enumerate(rows.tolist()):
        a0, a1 = s_ptr[i], s_ptr[i + 1]
        for j in range(i + 1 if same else 0, t_ptr.shape[0] - 1):
            b0, b1 = t_ptr[j], t_ptr[j + 1]
            # the two rows merged in matching order (a point in both once)
            pts = np.concatenate([s_idx[a0:a1], t_idx[b0:b1]])
            pts, where = np.unique(pts, return_inverse=True)
            if pts.size == 0:
                continue
            ms, mt = np.zeros(pts.size), np.zeros(pts.size)
            ms[where[: a1 - a0]] = s_val[a0:a1]
            mt[where[a1 - a0 :]] = t_val[b0:b1]
            perm = np.argsort(key[pts])
            pts, ms, mt = pts[perm], ms[perm], mt[perm]
            rr, cc, vv = _sweep_python(cell[pts], ms, mt, up, deep, rtol)
            if rr:
                diff = X[pts[np.asarray(rr)]] - X[pts[np.asarray(cc)]]
                out[r, j] += float(np.asarray(vv) @ numpy_costs(diff, metric, p))


def flowtree_costs(
    prepared: FlowtreeTrees,
    s: CSR,
    t: CSR | None = None,
    *,
    metric: str = "euclidean",
    p: float = 2,
    rows: np.ndarray | None = None,
    per_tree: bool = False,
    rtol: float = 2.0**-42,
    progress: Progress | None = None,
) -> np.ndarray:
    """Flowtree costs between sparse histograms on prepared trees (no checks).

    ``s`` (k rows) and ``t`` (m rows) are CSR triples: int64 row pointers, int64 support
    points (any order within a row, each point at most once a row) and float64
    non-negative masses; ``t=None`` is ``s`` itself (the upper triangle is matched and
    mirrored: exactly symmetric, zero diagonal). ``rows`` restricts to those s rows (the
    result's rows follow ``rows``). Returns the (k, m) costs, the mean over the trees, or
    with ``per_tree`` the (T, k, m) costs of each tree. ``metric`` and ``p`` as
    :func:`tsw.core._plans.check_metric` returns them; ``rtol`` the totals' tolerance
    (see :func:`_sweep_python`). Compiled when the tree kernels can run (rows shared among
    threads), in Python otherwise, with the same entries. ``progress`` counts the rows
    done, tree by tree.
    """
    same = t is None
    if same and rows is not None:
        raise ValueError("flowtree_costs takes rows= only with a second set t")
    t = s if t is None else t
    k, m = s[0].shape[0] - 1, t[0].shape[0] - 1
    rows = np.arange(k, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    if same and rows.size > 2:  # balanced among threads: long rows and short ones alternate
        half = (rows.size + 1) // 2
        inter = np.empty_like(rows)
        inter[0::2], inter[1::2] = rows[:half], rows[half:][::-1]
        rows = inter
    T = prepared.n_trees
    out = np.zeros((T if per_tree else 1, rows.size, m))
    compiled = _kernels.trees_usable()
    code, X = _metric_code(metric, p), prepared.support
    step = rows.size if progress is None or not progress.verbose else max(1, rows.size // 20)
    for tree in range(T):
        key, cell = prepared.order[tree], prepared.cells[tree]
        par, depth = prepared.parents[tree], prepared.depth[tree]
        s_t = _sort_rows(s, key) if compiled else s
        t_t = s_t if same or not compiled else _sort_rows(t, key)
        up, deep = ([], []) if compiled else (par.tolist(), depth.tolist())
        target = out[tree if per_tree else 0]
        for lo in range(0, rows.size, step):
            part, dest = rows[lo : lo + step], target[lo : lo + step]
            if compiled:
                _costs_compiled(s_t, t_t, part, same, key, cell, par, depth, X, code, p, rtol, dest)
            else:
                _costs_python(s, t, part, same, key, cell, up, deep, X, metric, p, rtol, dest)
            if progress is not None:
                progress.update(part.size)
    if same:  # each pair was matched once, as (min, max): mirror it
        full = np.zeros((out.shape[0], k, k))
        full[:, rows] = out
        out = np.triu(full, 1)
        out = out + np.swapaxes(out, -1, -2)
    return out if per_tree else out[0] / T


def csr(h: np.ndarray) -> CSR:
    """Return the nonzeros of the (k, n) rows ``h`` as a CSR triple (row-major)."""
    r, c = np.nonzero(h)
    ptr = np.zeros(h.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=h.shape[0]), out=ptr[1:])
    return ptr, c.astype(np.int64), np.ascontiguousarray(h[r, c], dtype=np.float64)
