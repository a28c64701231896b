r"""Tree-sliced Wasserstein between two measures on trees built from their supports.

The distance of Le et al. (2019): the mean over ``T`` random trees built on the union of
the two supports (quadtrees or clustering trees) of the exact W1 for each tree's path
metric, with each point placed on its tree (:meth:`SupportTrees.place`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, cast

import torch
from torch import Tensor

from tsw.core._api import distance
from tsw.core._output import Evaluation
from tsw.core._problem import Problem
from tsw.core._random import Sampler
from tsw.core._validation import check_choice, check_positive_int
from tsw.support._cluster import METHODS, build_cluster_trees, check_n_clusters
from tsw.support._embedding import subtree_sums
from tsw.support._trees import SupportTrees, quadtrees

__all__ = ["forest", "support_tsw", "tree_values"]

TREES = ("quadtree", "cluster")


def _check_trees(value: object, name: str) -> object:
    """None, a SupportTrees, or a sequence of them (one per batch item)."""
    if value is None or isinstance(value, SupportTrees):
        return value
    if (
        isinstance(value, Sequence)
        and len(value) > 0
        and all(isinstance(t, SupportTrees) for t in value)
    ):
        return tuple(value)
    raise TypeError(
        f"{name} must be None, a SupportTrees (tsw.sample_quadtrees, "
        f"tsw.sample_cluster_trees) or a sequence of them, one per batch item; got "
        f"{type(value).__name__}"
    )


def _optional_positive(value: object, name: str) -> int | None:
    return None if value is None else check_positive_int(value, name)


class Forest(NamedTuple):
    """The trees of a :class:`SupportTrees` as one forest.

    Node ``v`` of tree ``t`` is node ``offset[t] + v``; ``which`` is each node's tree.
    """

    offset: Tensor
    parents: Tensor
    depth: Tensor
    lengths: Tensor
    which: Tensor


def forest(trees: SupportTrees, device: torch.device) -> Forest:
    """Concatenate the trees' parents (shifted), depths and edge lengths into one forest."""
    sizes = torch.tensor([t.n_nodes for t in trees], device=device)
    offset = torch.cumsum(sizes, 0) - sizes
    parents = torch.cat(
        [torch.where(t.parents >= 0, t.parents + o, -1) for t, o in zip(trees, offset, strict=True)]
    )
    depth = torch.cat([t.depth for t in trees])
    lengths = torch.cat([t.edge_lengths for t in trees])
    which = torch.repeat_interleave(torch.arange(len(trees), device=device), sizes)
    return Forest(offset, parents, depth, lengths, which)


def tree_values(f: Forest, nodes_s: Tensor, nodes_t: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """Per-tree W1 (T,) between masses ``a`` on ``nodes_s`` (T, N) and ``b`` on ``nodes_t``.

    The signed masses are summed on the forest's nodes, the subtree masses accumulated
    level by level (:func:`subtree_sums`), and each tree's sum of ``w_v |subtree mass|``
    gathered; differentiable in ``a`` and ``b``.
    """
    T = f.offset.shape[0]
    mass = a.new_zeros(f.parents.shape[0])
    mass = mass.index_add(0, (nodes_s + f.offset[:, None]).reshape(-1), a.repeat(T))
    mass = mass.index_add(0, (nodes_t + f.offset[:, None]).reshape(-1), -b.repeat(T))
    sub = subtree_sums(mass, f.parents, f.depth)
    return a.new_zeros(T).index_add(0, f.which, f.lengths * sub.abs())


def _given(trees: object, i: int, B: int) -> SupportTrees:
    if isinstance(trees, SupportTrees):
        return trees
    trees = cast(tuple, trees)
    if len(trees) != B:
        raise ValueError(
            f"trees must be one SupportTrees, or one per batch item (B = {B}); got a "
            f"sequence of {len(trees)}"
        )
    return trees[i]


def _check_given(trees: SupportTrees, X: Tensor) -> None:
    if trees.dim != X.shape[-1]:
        raise ValueError(
            f"trees must be built on points of dimension d = {X.shape[-1]}, that of X_s; "
            f"got trees of dimension {trees.dim}"
        )
    if trees.dtype != X.dtype or trees.device != X.device:
        raise ValueError(
            f"trees must have the dtype and device of X_s ({X.dtype} on {X.device}); got "
            f"{trees.dtype} on {trees.device} (use trees.to(...))"
        )


@distance(
    p=1.0,
    checks={
        "trees": _check_trees,
        "tree": lambda v, name: check_choice(v, name, TREES),
        "n_trees": check_positive_int,
        "n_clusters": check_n_clusters,
        "depth": check_positive_int,
        "max_depth": _optional_positive,
        "method": lambda v, name: check_choice(v, name, METHODS),
    },
)
def support_tsw(
    problem: Problem,
    /,
    *,
    trees: SupportTrees | Sequence[SupportTrees] | None = None,
    tree: str = "quadtree",
    n_trees: int = 10,
    n_clusters: int = 4,
    depth: int = 5,
    max_depth: int | None = None,
    method: str = "farthest",
) -> Evaluation:
    r"""Tree-sliced Wasserstein distance on trees built from the data (Le et al. 2019).

    ``tsw.support_tsw(X_s, X_t, a, b, seed=0)`` builds ``n_trees`` random trees on the
    union of the two supports, places every point on each tree (its own leaf) and
    returns the mean over the trees of the exact W1 between the two measures for the
    tree's path metric. ``tree="quadtree"`` (random-shift quadtrees,
    :func:`tsw.sample_quadtrees`: low dimensions) or ``"cluster"`` (clustering trees,
    :func:`tsw.sample_cluster_trees`: high dimensions); or pass trees built once on a
    larger support as ``trees=``, and the points are placed on them
    (:meth:`SupportTrees.place`). For many histograms on one support,
    :func:`tsw.pairwise_tsw` gives the whole matrix at once. Reference: [Le2019s]_.

    .. math::

        TSW(\mu, \nu) = \frac1T \sum_{t=1}^T \sum_e w^{(t)}_e
            \big|\mu(\Gamma^{(t)}_e) - \nu(\Gamma^{(t)}_e)\big| .

    Parameters
    ----------
    X_s, X_t : Tensor or numpy array of shape (N, d) and (M, d), or (B, N, d), (B, M, d)
        Supports. A batch builds its trees per item, each item from the same random
        stream (so a batched call equals a loop of calls with the same seed).
    a, b : Tensor or numpy array of shape (N,) and (M,), or (B, N), (B, M), optional
        Non-negative weights of equal totals (uniform by default). The value is
        differentiable in them (exactly: it is piecewise linear in the weights).
    trees : SupportTrees or sequence of SupportTrees, optional
        Trees to use instead of building them: one for every batch item, or one per
        item. In the data's dtype and on its device.
    tree : {"quadtree", "cluster"}, default "quadtree"
        The trees built when ``trees`` is not given.
    n_trees : int, default 10
        Number of trees built.
    n_clusters, depth, method
        The clustering trees' options (:func:`tsw.sample_cluster_trees`): clusters per
        node (4), levels (5), ``"farthest"`` or ``"kmeans"``.
    max_depth : int, optional
        The quadtrees' deepest level (:func:`tsw.sample_quadtrees`).

    Returns
    -------
    Tensor of shape () or (B,)
        ``log["per_tree"]`` holds the per-tree W1 and ``log["trees"]`` the trees (a
        tuple of one :class:`SupportTrees` per item for batched inputs).

    Raises
    ------
    ValueError
        If ``X_s`` or ``X_t`` requires a gradient: the value is not differentiable in
        the points (each point is placed on a tree node, a piecewise constant map, and
        the trees are built from the detached data), only in the weights.

    Notes
    -----
    Without ``trees``, the trees are built on the distinct points of the union of the
    two supports (sorted), so that the value does not depend on the order of the atoms
    nor on which measure is the first. ``p`` is 1: the tree W1 of Le et al.

    References
    ----------
    .. [Le2019s] T. Le, M. Yamada, K. Fukumizu, M. Cuturi. Tree-sliced variants of
       Wasserstein distances. NeurIPS 2019.

    Examples
    --------
    >>> import torch, tsw
    >>> g = torch.Generator().manual_seed(0)
    >>> X = torch.randn(50, 2, generator=g, dtype=torch.float64)
    >>> Y = torch.randn(40, 2, generator=g, dtype=torch.float64) + 1
    >>> v = tsw.support_tsw(X, Y, seed=0)
    >>> v.shape, bool(v > 0)
    (torch.Size([]), True)
    >>> v_cluster = tsw.support_tsw(X, Y, tree="cluster", n_clusters=3, depth=3, seed=0)
    """
    m = problem.measures
    for X, name in ((m.X_s, "X_s"), (m.X_t, "X_t")):
        if X.requires_grad and torch.is_grad_enabled():
            raise ValueError(
                f"support_tsw is differentiable in the weights a and b only (the points are "
                f"placed on tree nodes, a piecewise constant map); got {name} with "
                f"requires_grad=True: pass {name}.detach()"
            )
    B, N = m.X_s.shape[0], m.X_s.shape[1]
    per, used = [], []
    state = None
    shared = None  # one SupportTrees for every item: checked and made a forest once
    if isinstance(trees, SupportTrees):
        _check_given(trees, m.X_s)
        shared = forest(trees, m.X_s.device)
    for i in range(B):
        Xs, Xt = m.X_s[i].detach(), m.X_t[i].detach()
        if trees is not None:
            t_i = _given(trees, i, B)
            if shared is None:
                _check_given(t_i, Xs)
            ns, nt = t_i.place(Xs), t_i.place(Xt)
        else:
            union, inv = torch.unique(torch.cat([Xs, Xt]), dim=0, return_inverse=True)
            gen = problem.rng.generator
            if state is None:
                state = gen.get_state()
            else:  # every item draws from the same stream
                gen.set_state(state)
            # the builders' float64 draws, as sample_quadtrees and sample_cluster_trees
            rng = Sampler(gen, torch.float64, union.device)
            if tree == "quadtree":
                t_i = quadtrees(union, n_trees, max_depth, rng)
            else:
                t_i = build_cluster_trees(union, n_trees, n_clusters, depth, method, rng)
            leaves = torch.stack([t.leaves for t in t_i])
            ns, nt = leaves[:, inv[:N]], leaves[:, inv[N:]]
        f = forest(t_i, Xs.device) if shared is None else shared
        per.append(tree_values(f, ns, nt, m.a[i], m.b[i]))
        used.append(t_i)
    slices = tuple(used) if m.batched else used[0]
    return Evaluation(torch.stack(per), slices)
