r"""Flowtree: the optimal flow of a tree, charged at the true ground distances.

Backurs, Dong, Indyk, Razenshteyn and Wagner (ICML 2020) estimate the Wasserstein-1
distance by computing an optimal flow on a tree built from the data (a quadtree) and
then charging each matched pair its true ground distance instead of its tree path
length. The matching is bottom-up (:func:`tsw.tree_plan`'s matching): at each node the
supply and demand left in its subtrees meet, and the remainder goes up. The result is
the cost of a feasible plan, so it bounds the exact :math:`W_1` from above, and when
the tree metric dominates the ground metric, it is at most the tree value.

Every point gets its own leaf (of length zero) under its cell, so that points sharing a
cell are matched as separate points. :func:`flowtree` takes two point clouds (a quadtree
built on their union, or given trees on which the points are placed);
:func:`pairwise_flowtree` takes histograms on the support of given trees (one query
against many documents, or all pairs), and restricts each pair's matching to the
subtree spanned by the two histograms' support points.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from tsw.core._plans import (
    Accumulator,
    check_metric,
    grouped_plan_costs,
    numpy_costs,
    plan_problem,
)
from tsw.core._problem import from_numpy, to_numpy
from tsw.core._random import refuse_tracing
from tsw.core._validation import (
    check_bool,
    check_equal_totals,
    check_nonnegative,
    check_positive_int,
    check_same_device_dtype,
    check_tensor,
)
from tsw.core.tree_plan import match_on_tree
from tsw.support._trees import check_trees, sample_quadtrees

__all__ = ["flowtree", "pairwise_flowtree"]

#: (points x depth) entries of the ancestor table of :func:`pairwise_flowtree` above
#: which each pair is matched on the whole tree instead of its spanned subtree
ANCESTOR_ENTRIES = 1 << 26


# --------------------------------------------------------------------------- matching


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


class _Tree:
    """One tree relabelled so that parents precede children (pre-order ranks).

    ``par[r]`` is the rank of the parent of the node of rank ``r`` (-1 for the root,
    rank 0); ``rank[v]`` is the rank of node ``v``.
    """

    def __init__(self, parents: Tensor | np.ndarray):
        par = parents.detach().cpu().numpy() if isinstance(parents, Tensor) else parents
        par = np.asarray(par, dtype=np.int64)
        depth = _depths(par)
        pre = np.argsort(depth, kind="stable")  # parents before children
        self.rank = np.empty(par.shape[0], dtype=np.int64)
        self.rank[pre] = np.arange(par.shape[0])
        up = par[pre]
        self.par = np.where(up >= 0, self.rank[np.maximum(up, 0)], -1)
        self.depth = depth[pre]  # per rank
        self.max_depth = int(depth.max())

    @property
    def size(self) -> int:
        return int(self.par.shape[0])

    def ancestors(self, nodes: np.ndarray) -> np.ndarray:
        """Return the (K, L) ranks of every node's ancestors (itself first), -1 padded."""
        cols = [nodes]
        cur = nodes
        while True:
            cur = np.where(cur >= 0, self.par[np.maximum(cur, 0)], -1)
            if not (cur >= 0).any():
                break
            cols.append(cur)
        return np.stack(cols, axis=1)

    def match(
        self, cells: np.ndarray, ms: np.ndarray, mt: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Match point masses ``ms`` and ``mt`` (K,) hung as own leaves under ``cells`` (ranks).

        Returns the entries as (source point, target point, mass), point indices in [0, K).
        """
        V = self.size
        parents = np.concatenate([self.par, cells])
        zeros = np.zeros(V)
        rows, cols, vals = match_on_tree(
            parents, np.concatenate([zeros, ms]), np.concatenate([zeros, mt])
        )
        return rows - V, cols - V, vals

    def match_spanned(
        self, anc: np.ndarray, ms: np.ndarray, mt: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`match` on the subtree spanned by the points' ancestor rows ``anc`` (K, L)."""
        active = np.unique(anc[anc >= 0])  # sorted ranks: parents precede children
        up = self.par[active]
        sub = np.where(up >= 0, np.searchsorted(active, np.maximum(up, 0)), -1)
        cells = np.searchsorted(active, anc[:, 0])
        S = active.shape[0]
        zeros = np.zeros(S)
        rows, cols, vals = match_on_tree(
            np.concatenate([sub, cells]), np.concatenate([zeros, ms]), np.concatenate([zeros, mt])
        )
        return rows - S, cols - S, vals


# --------------------------------------------------------------------------- arguments


def flowtree(
    X_s: Any,
    X_t: Any,
    a: Any = None,
    b: Any = None,
    *,
    trees: Any = None,
    n_trees: int | None = None,
    max_depth: int | None = None,
    metric: str = "euclidean",
    p: float = 2,
    dense: bool = False,
    seed: Any = None,
    generator: torch.Generator | None = None,
    validate: bool = True,
    log: bool = False,
) -> Any:
    r"""Compute the Flowtree plan between two point clouds and its cost in R^d.

    References: [Backurs2020]_.

    ``plan, cost = tsw.flowtree(X_s, X_t, a, b, seed=0)`` builds a randomly shifted
    quadtree on the union of the two supports (:func:`tsw.sample_quadtrees`), computes
    an optimal flow of the tree metric bottom-up (the matching of :func:`tsw.tree_plan`,
    every point on its own zero-length leaf under its cell), and charges each matched
    pair its true ground cost:

    .. math::

        \mathrm{cost} = \sum_{ij} \pi^{T}_{ij}\, c(x_i, y_j)
        \ \ge\ W_1(\mu, \nu) = \min_{\pi \in \Pi(a, b)} \sum_{ij} \pi_{ij}\, c(x_i, y_j),

    with :math:`\pi^T` the tree's optimal plan. Since :math:`\pi^T` is a coupling of
    ``a`` and ``b``, the cost is at least the exact optimum; when the tree's path length
    dominates ``c`` (the quadtree's diameter weights do for the Euclidean cost) it is at
    most the tree's :math:`W_1`. With several trees (``n_trees`` or ``trees`` holding
    more than one), the plan is the mean of the trees' plans and the cost its cost, the
    mean of the trees' costs (``log=True`` gives each; their minimum is also a feasible
    plan's cost).

    Parameters
    ----------
    X_s : Tensor or ndarray of shape (N, d) or (B, N, d)
        Source support.
    X_t : Tensor or ndarray of shape (M, d) or (B, M, d)
        Target support.
    a, b : Tensor or ndarray of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative weights of equal totals; uniform by default.
    trees : SupportTrees, optional
        Trees to use (every tree of it), on which the points are placed with
        :meth:`SupportTrees.place`; by default quadtrees are drawn on the union of the
        supports (one per batch item).
    n_trees : int, optional
        Number of quadtrees drawn (default 1); not with ``trees``.
    max_depth : int, optional
        Depth limit of the drawn quadtrees (:func:`tsw.sample_quadtrees`); not with
        ``trees``.
    metric : {"euclidean", "sqeuclidean", "cityblock", "minkowski"}, default "euclidean"
        The ground cost charged to the matched pairs (as in :func:`tsw.sliced_plans`).
        The tree is a quadtree of the Euclidean geometry whatever the metric.
    p : float, default 2
        Order of ``"minkowski"``; ignored otherwise.
    dense : bool, default False
        Return an (N, M) array; otherwise a sparse COO plan (a coalesced torch sparse
        tensor, or scipy's ``coo_array`` for numpy inputs; a list of them for batched
        numpy inputs).
    seed, generator
        Randomness of the drawn quadtrees (the library's seeding contract; one stream
        for the whole batch).
    validate : bool, default True
        Run the value checks.
    log : bool, default False
        Also return ``{"per_tree": ..., "trees": ...}``: each tree's plan's cost, shape
        (T,) or (B, T), and the trees (a list of one :class:`SupportTrees` per batch item).

    Returns
    -------
    plan : Tensor or ndarray of shape (N, M) or (B, N, M), or sparse
        Marginals ``a`` and ``b``, in the dtype and on the device of the points.
    cost : Tensor or ndarray of shape () or (B,)
        Its cost, differentiable with respect to the points with the plan held fixed.
    log : dict, optional
        With ``log=True``.

    Raises
    ------
    TypeError
        For non-tensor inputs, ``trees`` that is not a :class:`SupportTrees`.
    ValueError
        For malformed measures, unequal totals, an unknown ``metric``, ``n_trees`` or
        ``max_depth`` given with ``trees``, or trees of another dimension.

    Notes
    -----
    Each tree is matched in one pass over its nodes and the ``N + M`` points' leaves
    (O(V + N + M), at most ``2 (V + N + M)`` entries), on the CPU; the cost gathers each
    entry's two points once. The plan is not differentiable.

    References
    ----------
    .. [Backurs2020] A. Backurs, Y. Dong, P. Indyk, I. Razenshteyn, T. Wagner. Scalable
       nearest neighbor search for optimal transport. ICML 2020.

    Examples
    --------
    >>> import torch, tsw
    >>> X = torch.tensor([[0.0], [1.0], [10.0]]); Y = torch.tensor([[0.5], [10.5], [11.0]])
    >>> plan, cost = tsw.flowtree(X, Y, seed=0, dense=True)
    >>> plan.sum(0), plan.sum(1)
    (tensor([0.3333, 0.3333, 0.3333]), tensor([0.3333, 0.3333, 0.3333]))
    >>> round(float(cost), 4)  # a coupling's cost: at least the exact W_1, 11/3
    4.0
    """
    refuse_tracing("tsw.flowtree")  # the plan is matched in NumPy: a trace would freeze it
    dense = check_bool(dense, "dense")
    log = check_bool(log, "log")
    metric, p = check_metric(metric, p)
    problem = plan_problem(X_s, X_t, a, b, seed, generator, validate)
    m = problem.measures
    B, N, M = m.X_s.shape[0], m.X_s.shape[1], m.X_t.shape[1]
    if trees is not None:
        trees = check_trees(trees)
        for value, name in ((n_trees, "n_trees"), (max_depth, "max_depth")):
            if value is not None:
                raise ValueError(
                    f"{name} sets the drawn quadtrees; it cannot be given with trees= "
                    f"(got {name}={value!r})"
                )
        if trees.support.shape[-1] != m.X_s.shape[-1]:
            raise ValueError(
                "trees must live in the points' dimension: trees.support.shape="
                f"{tuple(trees.support.shape)} and X_s.shape={tuple(m.X_s.shape)}"
            )
    n_draw = 1 if n_trees is None else check_positive_int(n_trees, "n_trees")
    acc = Accumulator(B, N, M, m.X_s, dense=dense, batched=m.batched, numpy=problem.numpy)
    ms = m.a.detach().cpu().to(torch.float64).numpy()
    mt = m.b.detach().cpu().to(torch.float64).numpy()
    # given trees are shared by every item: relabel them once
    given = None if trees is None else [_Tree(tree.parents) for tree in trees.trees]
    used, parts = [], []
    for i in range(B):
        Xs, Xt = m.X_s[i].detach(), m.X_t[i].detach()
        if trees is None:
            item_trees = sample_quadtrees(
                torch.cat([Xs, Xt]), n_draw, max_depth=max_depth, generator=problem.rng.generator
            )
            placed = torch.stack([tree.leaves for tree in item_trees.trees])
        else:
            item_trees = trees
            placed = item_trees.place(torch.cat([Xs, Xt]))
        used.append(item_trees)
        nodes = placed.detach().cpu().numpy().astype(np.int64)
        T = nodes.shape[0]
        # the item's source masses on its first N points, the target's on its last M
        w_s = np.concatenate([ms[i], np.zeros(M)])
        w_t = np.concatenate([np.zeros(N), mt[i]])
        for t in range(T):
            tree = _Tree(item_trees.trees[t].parents) if given is None else given[t]
            cells = tree.rank[nodes[t]]
            rows, cols, vals = tree.match(cells, w_s, w_t)
            parts.append((i, t, rows, cols - N, vals))
            acc.add(
                torch.from_numpy(rows).to(m.X_s.device),
                torch.from_numpy(cols - N).to(m.X_s.device),
                torch.from_numpy(vals / T).to(m.X_s.device),
                item=i,
            )
    per_tree = _per_tree_costs(m.X_s, m.X_t, parts, B, metric, p)
    cost = per_tree.mean(-1)
    plan = acc.result()

    def out(x: Tensor) -> Any:
        x = x if m.batched else x[0]
        return to_numpy(x) if problem.numpy else x

    if log:
        return plan, out(cost), {"per_tree": out(per_tree), "trees": used}
    return plan, out(cost)


def _per_tree_costs(X_s: Tensor, X_t: Tensor, parts: list, B: int, metric: str, p: float) -> Tensor:
    """Each (item, tree) plan's cost in R^d, (B, T), differentiable in the points."""
    T = max(t for _, t, *_ in parts) + 1
    E = max(1, max(r.shape[0] for _, _, r, _, _ in parts))
    rows = np.zeros((B, T, E), dtype=np.int64)
    cols = np.zeros((B, T, E), dtype=np.int64)
    mass = np.zeros((B, T, E))
    for i, t, r, c, v in parts:
        rows[i, t, : r.shape[0]], cols[i, t, : r.shape[0]], mass[i, t, : r.shape[0]] = r, c, v
    dev = X_s.device
    group = torch.arange(T, device=dev).view(1, T, 1)
    return grouped_plan_costs(
        X_s,
        X_t,
        torch.from_numpy(rows).to(dev),
        torch.from_numpy(cols).to(dev),
        torch.from_numpy(mass).to(dev, X_s.dtype),
        group,
        T,
        metric,
        p,
        nonzero=True,
    )


# --------------------------------------------------------------------------- pairwise


def _check_hists(h: object, name: str, n: int) -> tuple[Tensor, bool]:
    h = check_tensor(from_numpy(h, name), name)
    if h.ndim not in (1, 2) or h.shape[-1] != n:
        raise ValueError(
            f"{name} must have shape (n,) or (m, n) with n={n} support points (trees.n_points); "
            f"got {name}.shape={tuple(h.shape)}"
        )
    return h, h.ndim == 1  # and whether it is a single histogram


def pairwise_flowtree(
    hists_s: Any,
    hists_t: Any = None,
    *,
    trees: Any,
    metric: str = "euclidean",
    p: float = 2,
    validate: bool = True,
) -> Any:
    r"""Flowtree costs between histograms on the support of given trees, all pairs.

    References: [Backurs2020b]_.

    ``tsw.pairwise_flowtree(query, hists, trees=trees)`` gives the (m,) costs between one
    histogram ``query`` (n,) and the rows of ``hists`` (m, n) on the ``n`` support points
    of ``trees`` (a :class:`SupportTrees`, e.g. from :func:`tsw.sample_quadtrees` on a
    vocabulary's embeddings or a pixel grid); two (k, n) and (m, n) arrays give the
    (k, m) matrix, and one (k, n) array alone the (k, k) matrix of its rows, as
    :func:`tsw.pairwise_tsw` takes them. Each pair's cost is :func:`tsw.flowtree`'s: the
    bottom-up optimal flow of the tree between the two histograms (each support point its
    own leaf under its node), each matched pair ``(i, j)`` charged ``c(x_i, x_j)``,
    averaged over the trees. It lies between the exact :math:`W_1` on the support and,
    when the trees dominate ``c``, the tree-sliced value :func:`tsw.pairwise_tsw`.

    Parameters
    ----------
    hists_s : Tensor or ndarray of shape (n,) or (k, n)
        Non-negative histograms on the trees' support.
    hists_t : Tensor or ndarray of shape (n,) or (m, n), optional
        Non-negative histograms with the same totals as ``hists_s`` (each pair);
        ``hists_s`` itself by default.
    trees : SupportTrees
        The trees and their support ``trees.support`` (n, d).
    metric : {"euclidean", "sqeuclidean", "cityblock", "minkowski"}, default "euclidean"
        The ground cost of the matched pairs.
    p : float, default 2
        Order of ``"minkowski"``; ignored otherwise.
    validate : bool, default True
        Run the value checks (finite, non-negative, positive and equal totals).

    Returns
    -------
    Tensor or ndarray of shape (k, m), (m,), (k,) or ()
        The costs (a leading or trailing 1-D input drops its axis), in the dtype and on
        the device of ``hists_s``; not differentiable.

    Raises
    ------
    TypeError
        For non-tensor or non-floating histograms, mixed numpy and torch, ``hists_s``
        and ``hists_t`` of different dtypes, ``trees`` that is not a
        :class:`SupportTrees`.
    ValueError
        For histograms whose last axis is not the support's size, on different devices,
        negative or non-finite entries, or a pair of unequal totals.

    Notes
    -----
    Each pair is matched on the subtree spanned by the support points of its two
    histograms (their ancestors), on the CPU in one pass; the work per pair is
    O(s L), ``s`` the number of support points in either histogram and ``L`` the
    trees' depth.

    References
    ----------
    .. [Backurs2020b] A. Backurs, Y. Dong, P. Indyk, I. Razenshteyn, T. Wagner. Scalable
       nearest neighbor search for optimal transport. ICML 2020.

    Examples
    --------
    >>> import torch, tsw
    >>> support = torch.tensor([[0.0], [1.0], [5.0]])
    >>> trees = tsw.sample_quadtrees(support, seed=0)
    >>> query = torch.tensor([1.0, 0.0, 0.0])
    >>> hists = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.5, 0.0, 0.5]])
    >>> tsw.pairwise_flowtree(query, hists, trees=trees)
    tensor([1.0000, 5.0000, 2.5000])
    """
    refuse_tracing("tsw.pairwise_flowtree")  # matched in NumPy: a trace would freeze it
    trees = check_trees(trees)
    metric, p = check_metric(metric, p)
    validate = check_bool(validate, "validate")
    if hists_t is None:
        hists_t = hists_s
    numpy = isinstance(hists_s, np.ndarray)
    if numpy != isinstance(hists_t, np.ndarray):
        raise TypeError(
            "hists_s and hists_t must both be numpy arrays or both torch tensors; got "
            f"{type(hists_s).__name__} and {type(hists_t).__name__}"
        )
    n = trees.n_points
    hs, one_s = _check_hists(hists_s, "hists_s", n)
    ht, one_t = _check_hists(hists_t, "hists_t", n)
    check_same_device_dtype(hs, "hists_s", ht, "hists_t")
    hs2, ht2 = hs.reshape(-1, n), ht.reshape(-1, n)
    if validate:
        for h, name in ((hs2, "hists_s"), (ht2, "hists_t")):
            check_nonnegative(h, name)  # finite too
    S = hs2.detach().cpu().to(torch.float64).numpy()
    Tg = ht2.detach().cpu().to(torch.float64).numpy()
    if validate:
        ts, tt = torch.from_numpy(S.sum(1)), torch.from_numpy(Tg.sum(1))
        if bool((ts <= 0).any() or (tt <= 0).any()):
            raise ValueError("pairwise_flowtree needs histograms of positive total mass")
        check_equal_totals(
            (ts[:, None], tt[None, :]),
            ("hists_s.sum()", "hists_t.sum()"),
            hs.dtype,
            why=" (every pair)",
            batched=True,
        )
    X = trees.support.detach().cpu().to(torch.float64).numpy()
    out = np.zeros((S.shape[0], Tg.shape[0]))
    nz_s = [np.flatnonzero(row) for row in S]
    nz_t = [np.flatnonzero(row) for row in Tg]
    for tree_t in trees.trees:
        tree = _Tree(tree_t.parents)
        leaves = tree.rank[tree_t.leaves.detach().cpu().numpy().astype(np.int64)]
        spanned = n * (tree.max_depth + 1) <= ANCESTOR_ENTRIES
        anc = tree.ancestors(leaves) if spanned else None
        for i in range(S.shape[0]):
            for j in range(Tg.shape[0]):
                idx = np.union1d(nz_s[i], nz_t[j])
                if idx.size == 0:  # two empty histograms (validate=False): nothing moves
                    continue
                if anc is not None:
                    rows, cols, vals = tree.match_spanned(anc[idx], S[i, idx], Tg[j, idx])
                else:
                    rows, cols, vals = tree.match(leaves[idx], S[i, idx], Tg[j, idx])
                rows, cols = idx[rows], idx[cols]
                out[i, j] += vals @ numpy_costs(X[rows] - X[cols], metric, p)
    out /= len(trees.trees)
    if one_s:
        out = out[0]
    if one_t:
        out = out[..., 0]
    result = torch.from_numpy(np.array(out)).to(hs.dtype)  # 0-d stays 0-d
    return to_numpy(result) if numpy else result.to(hs.device)
