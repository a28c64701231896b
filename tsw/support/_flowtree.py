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
against many documents, or all pairs), and matches each pair over the support
points of the two histograms (:mod:`tsw.support._flowmatch`).
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
    plan_problem,
)
from tsw.core._problem import from_numpy, to_numpy
from tsw.core._progress import Progress
from tsw.core._random import refuse_tracing
from tsw.core._validation import (
    check_bool,
    check_equal_totals,
    check_nonnegative,
    check_positive_int,
    check_same_device_dtype,
    check_tensor,
    mass_rtol,
)
from tsw.support._flowmatch import (
    FlowtreeTrees,
    csr,
    flowtree_costs,
    match_points,
    matching_order,
    tree_arrays,
)
from tsw.support._trees import check_trees, sample_quadtrees

__all__ = ["flowtree", "pairwise_flowtree"]


class _Tree:
    """One tree relabelled so that parents precede children (level-order ranks).

    ``par[r]`` is the rank of the parent of the node of rank ``r`` (-1 for the root,
    rank 0); ``rank[v]`` is the rank of node ``v``. Read by the fitted edge lengths
    (:mod:`tsw.support._fit`).
    """

    def __init__(self, parents: Tensor | np.ndarray):
        par, depth = tree_arrays(parents)
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


# --------------------------------------------------------------------------- clouds


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
    Each tree is matched on the CPU: the ``N + M`` points are ordered by a pre-order of
    the tree (one pass over its ``V`` nodes), then matched in one sweep over them
    (:mod:`tsw.support._flowmatch`, compiled with Numba when it is installed, the same
    entries in Python otherwise), at most ``2 (N + M)`` entries; the cost gathers each
    entry's two points once. What reaches the root unmatched, the rounding gap of the
    totals, joins the last point of the other side matched, so that a mass below the
    totals' resolution is still moved. The plan is not differentiable.

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
    rtol = mass_rtol(m.X_s.dtype)
    # given trees are shared by every item: their arrays are read once
    given = None if trees is None else [tree_arrays(tree.parents) for tree in trees.trees]
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
            par, depth = tree_arrays(item_trees.trees[t].parents) if given is None else given[t]
            order = np.argsort(matching_order(par, nodes[t]))
            rows, cols, vals = match_points(
                nodes[t][order], w_s[order], w_t[order], par, depth, rtol
            )
            rows, cols = order[rows], order[cols] - N
            parts.append((i, t, rows, cols, vals))
            acc.add(
                torch.from_numpy(rows).to(m.X_s.device),
                torch.from_numpy(cols).to(m.X_s.device),
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
    verbose: bool = False,
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
    verbose : bool, default False
        Show a progress bar (``tqdm`` when installed, else a printed line), over the
        rows of every tree.

    Returns
    -------
    Tensor or ndarray of shape (k, m), (m,), (k,) or ()
        The costs (a leading or trailing 1-D input drops its axis), in the dtype and on
        the device of ``hists_s``. Without ``hists_t`` the matrix is exactly symmetric
        with a zero diagonal (each pair is matched once). Not differentiable: histograms
        that require a gradient are refused.

    Raises
    ------
    TypeError
        For non-tensor or non-floating histograms, mixed numpy and torch, ``hists_s``
        and ``hists_t`` of different dtypes, ``trees`` that is not a
        :class:`SupportTrees`.
    ValueError
        For histograms whose last axis is not the support's size, on different devices,
        negative or non-finite entries, a pair of unequal totals, or histograms that
        require a gradient while autograd records.

    Notes
    -----
    Each pair is matched on the CPU in one pass over the support points of its two
    histograms, in a pre-order of the tree (each histogram's points sorted once per
    tree): a stack keeps the nodes where their paths meet, and at each such node the
    supply and demand left in its subtrees meet. The work per pair is O(s + the nodes
    walked between consecutive points), ``s`` the points in either histogram, at most
    O(s L) for trees of depth ``L``, with no pass over the tree. Compiled with Numba
    when it is installed (``pip install torch-tsw[fast]``; rows shared among
    ``torch.get_num_threads()`` threads), otherwise the same matching runs in Python,
    with the same entries, one to two orders of magnitude slower. The values do not
    depend on the number of threads. A mass below the rounding of the totals (say
    ``1e-20`` beside a total of 1) is still moved: what reaches the root unmatched
    joins the last point of the other side matched there.

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
    verbose = check_bool(verbose, "verbose")
    same = hists_t is None
    if same:
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
    for h, name in ((hs, "hists_s"), (ht, "hists_t")):
        if h.requires_grad and torch.is_grad_enabled():
            raise ValueError(
                f"pairwise_flowtree is not differentiable: its plans are matched on the CPU "
                f"and their masses are not tracked; got {name} with requires_grad=True (pass "
                f"{name}.detach(), or use tsw.pairwise_tsw, differentiable in the histograms)"
            )
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
    prepared = FlowtreeTrees.of(trees)
    sym = same and not one_s  # one matrix of the rows of hists_s: each pair matched once
    with Progress(verbose, len(trees) * S.shape[0], "pairwise_flowtree", unit="row") as bar:
        out = flowtree_costs(
            prepared,
            csr(S),
            None if sym else csr(Tg),
            metric=metric,
            p=p,
            rtol=mass_rtol(hs.dtype),
            progress=bar,
        )
    if one_s:
        out = out[0]
    if one_t:
        out = out[..., 0]
    result = torch.from_numpy(np.array(out)).to(hs.dtype)  # 0-d stays 0-d
    return to_numpy(result) if numpy else result.to(hs.device)
