r"""Clustering trees: the high-dimensional trees of Le et al. (2019).

Every level of a tree is built at once: the points of all the nodes of a level are
clustered together, each within its own node (farthest-point clustering of Gonzalez,
then, with ``method="kmeans"``, a few Lloyd iterations), with no Python loop over the
nodes. Their placement (:meth:`SupportTrees.place`) lives with the container in
:mod:`tsw.support._trees`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from tsw.core._random import Sampler, Seed, resolve_sampler
from tsw.core._validation import check_choice, check_positive_int
from tsw.support._trees import SupportTree, SupportTrees, check_support, sqdist

__all__ = ["build_cluster_trees", "check_cluster_options", "sample_cluster_trees"]

#: Lloyd iterations of method="kmeans"
LLOYD_STEPS = 5
#: Lloyd's steps compare all the centres of a level by one matrix product up to this many
BLAS_CENTRES = 64
METHODS = ("farthest", "kmeans")


def _group_first(group: Tensor, G: int, mask: Tensor) -> Tensor:
    """Per group, the smallest point index where ``mask`` holds (N if none)."""
    n = group.shape[0]
    idx = torch.where(mask, torch.arange(n, device=group.device), n)
    return torch.full((G,), n, dtype=torch.long, device=group.device).scatter_reduce_(
        0, group, idx, "amin"
    )


def _farthest(
    X: Tensor, group: Tensor, G: int, k: int, sampler: Sampler
) -> tuple[Tensor, Tensor, Tensor]:
    """Gonzalez's farthest-point centres of every group at once.

    The first centre of a group is one of its points drawn uniformly; each next one is
    a point farthest from the centres chosen so far (the first such point on ties).
    Returns the centres (G, k) as point indices, each point's nearest centre (its first
    nearest: the label of :func:`tsw.support._trees.sqdist`'s argmin, from the same
    squared distances) and each group's largest squared distance to its first centre.
    """
    dev = X.device
    count = torch.bincount(group, minlength=G)
    order = torch.argsort(group, stable=True)
    start = torch.cumsum(count, 0) - count
    u = sampler.uniform(G).to(dev)
    pick = start + torch.minimum((u * count).to(torch.long), count - 1)
    chosen = [order[pick]]
    mind = (X - X[chosen[0]][group]).square().sum(-1)
    label = torch.zeros_like(group)
    spread = None
    for j in range(1, k):
        top = torch.full((G,), -1.0, dtype=X.dtype, device=dev).scatter_reduce_(
            0, group, mind, "amax"
        )
        spread = top if spread is None else spread
        chosen.append(_group_first(group, G, mind == top[group]))
        dist = (X - X[chosen[-1]][group]).square().sum(-1)
        closer = dist < mind  # strictly: ties stay with the earlier centre
        label = torch.where(closer, j, label)
        mind = torch.where(closer, dist, mind)
    if spread is None:
        spread = torch.zeros(G, dtype=X.dtype, device=dev).scatter_reduce_(0, group, mind, "amax")
    return torch.stack(chosen, dim=1), label, spread


def _nearest(X: Tensor, C: Tensor, group: Tensor) -> Tensor:
    """Each point's nearest centre among its group's ``C`` (G, k, d), for Lloyd's steps.

    With few centres in all (``G k <= min(BLAS_CENTRES, d)``) one matrix product gives every
    ``<x, c>`` and ``|c|^2 - 2 <x, c>`` is compared; otherwise :func:`sqdist`. The final
    assignment always uses :func:`sqdist`, the placement's formula.
    """
    G, k, d = C.shape
    if G * k > min(BLAS_CENTRES, d):  # the product writes G k numbers a point, not k d
        return sqdist(X, C, group).argmin(-1)
    flat = C.reshape(G * k, d)
    score = (flat.square().sum(-1) - 2 * (X @ flat.T)).view(-1, G, k)
    return score[torch.arange(X.shape[0], device=X.device), group].argmin(-1)


def _lloyd(X: Tensor, group: Tensor, C: Tensor, steps: int) -> Tensor:
    """Run a few Lloyd iterations from centres ``C`` (G, k, d) within each group."""
    G, k, d = C.shape
    for _ in range(steps):
        label = _nearest(X, C, group)
        cell = group * k + label
        sums = X.new_zeros(G * k, d).index_add_(0, cell, X)
        count = torch.bincount(cell, minlength=G * k).to(X.dtype)
        mean = sums / count.clamp(min=1)[:, None]
        C = torch.where((count > 0)[:, None], mean, C.reshape(G * k, d)).reshape(G, k, d)
    return C


def _cluster_tree(X: Tensor, k: int, depth: int, method: str, sampler: Sampler) -> SupportTree:
    """One clustering tree (see :func:`sample_cluster_trees`)."""
    n, dev = X.shape[0], X.device
    centers = [X.mean(0, keepdim=True)]
    parents = [torch.tensor([-1], device=dev)]
    depths = [torch.zeros(1, dtype=torch.long, device=dev)]
    node = torch.zeros(n, dtype=torch.long, device=dev)  # the deepest cluster of each point
    active = torch.arange(n, device=dev)
    V = 1
    for level in range(1, depth + 1):
        if active.numel() == 0:
            break
        nodes, group = torch.unique(node[active], return_inverse=True)
        G = nodes.numel()
        Xa = X if active.numel() == n else X[active]
        # a node whose points all coincide with its first centre is not split
        idx, label, spread = _farthest(Xa, group, G, k, sampler)  # (G, k) local indices
        C = Xa[idx]  # (G, k, d)
        if method == "kmeans":
            C = _lloyd(Xa, group, C, LLOYD_STEPS)
            label = sqdist(Xa, C, group).argmin(-1)
        split = spread[group] > 0
        active, group, label = active[split], group[split], label[split]
        if active.numel() == 0:
            break
        child, cid = torch.unique(group * k + label, return_inverse=True)
        g_of, l_of = child // k, child % k
        centers.append(C[g_of, l_of])
        parents.append(nodes[g_of])
        depths.append(torch.full((child.numel(),), level, dtype=torch.long, device=dev))
        node[active] = V + cid
        V += child.numel()
    # every support point hangs from its deepest cluster as its own leaf
    centers.append(X)
    parents.append(node)
    all_depths = torch.cat(depths)
    depths.append(all_depths[node] + 1)
    centers_t, parents_t = torch.cat(centers), torch.cat(parents)
    lengths = (centers_t[1:] - centers_t[parents_t[1:]]).square().sum(-1).sqrt()
    return SupportTree(
        parents=parents_t,
        edge_lengths=torch.cat([lengths.new_zeros(1), lengths]),
        leaves=V + torch.arange(n, device=dev),
        depth=torch.cat(depths),
        centers=centers_t,
    )


def check_cluster_options(
    n_trees: object, n_clusters: object, depth: object, method: object
) -> tuple[int, int, int, str]:
    """Check the options of :func:`sample_cluster_trees`."""
    return (
        check_positive_int(n_trees, "n_trees"),
        check_positive_int(n_clusters, "n_clusters"),
        check_positive_int(depth, "depth"),
        check_choice(method, "method", METHODS),
    )


def build_cluster_trees(
    X: Tensor, n_trees: int, n_clusters: int, depth: int, method: str, sampler: Sampler
) -> SupportTrees:
    """``n_trees`` clustering trees on ``X`` from ``sampler`` (options checked)."""
    trees = tuple(_cluster_tree(X, n_clusters, depth, method, sampler) for _ in range(n_trees))
    return SupportTrees(X, trees, "cluster")


def sample_cluster_trees(
    support: Tensor | np.ndarray,
    n_trees: int = 1,
    *,
    n_clusters: int = 4,
    depth: int = 5,
    method: str = "farthest",
    seed: Seed = None,
    generator: torch.Generator | None = None,
) -> SupportTrees:
    r"""Draw clustering trees over a support (the high-dimensional trees of Le et al.).

    ``tsw.sample_cluster_trees(X, n_trees=10, seed=0)`` returns a :class:`SupportTrees`
    of 10 trees over the points ``X`` (n, d); :func:`tsw.support_tsw` and
    :func:`tsw.pairwise_tsw` take it as ``trees=``. References: [Le2019c]_ and
    [Gonzalez1985]_.

    Each tree: the root is the mean of the support. The points of a node are split
    into ``n_clusters`` clusters by farthest-point clustering (Gonzalez 1985: a first
    centre drawn uniformly among them, each next centre a point farthest from those
    chosen; then every point to its nearest centre), recursively to ``depth`` levels;
    a node whose points all coincide is not split, and empty clusters are dropped. The
    edge between two clusters has the distance between their centres as its length.
    Every support point then hangs from its deepest cluster as its own leaf, at the
    distance to that cluster's centre (a zero-length edge where the point is the
    centre; the authors' MATLAB drops such edges, which changes no distance). All the
    nodes of a level are clustered at once.

    Parameters
    ----------
    support : Tensor or numpy array of shape (n, d)
        Finite points, float32 or float64 (numpy arrays are converted to tensors). The
        tree is built in this dtype.
    n_trees : int, default 1
        Number of trees ``T``.
    n_clusters : int, default 4
        Clusters per node (``KC`` of Le et al., who use 4).
    depth : int, default 5
        Levels of clusters below the root (``L`` of Le et al., who use 5); the leaves
        are one level deeper.
    method : {"farthest", "kmeans"}, default "farthest"
        ``"farthest"``: the centres are the farthest-point centres (support points).
        ``"kmeans"``: 5 Lloyd iterations from them (the centres are then means, an
        empty cluster keeps its centre), and the points go to their nearest final
        centre.
    seed, generator
        The library's seeding contract (the guide's "Seeding"): the first centre of
        every node is drawn in float64, so the same seed gives the same trees on every
        device.

    Returns
    -------
    SupportTrees
        ``kind = "cluster"``; each tree's ``centers`` (V, d) holds the nodes' centres,
        clusters first (numbered level by level), then the ``n`` leaves in the order
        of the support.

    References
    ----------
    .. [Le2019c] T. Le, M. Yamada, K. Fukumizu, M. Cuturi. Tree-sliced variants of
       Wasserstein distances. NeurIPS 2019.
    .. [Gonzalez1985] T. F. Gonzalez. Clustering to minimize the maximum intercluster
       distance. Theoretical Computer Science 38, 1985.

    Examples
    --------
    >>> import torch, tsw
    >>> X = torch.randn(100, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    >>> trees = tsw.sample_cluster_trees(X, n_trees=2, n_clusters=3, depth=2, seed=0)
    >>> len(trees), trees.kind, trees[0].leaves.shape
    (2, 'cluster', torch.Size([100]))
    >>> torch.equal(trees.place(X), torch.stack([t.leaves for t in trees]))
    True
    """
    X = check_support(support, "support")
    n_trees, n_clusters, depth, method = check_cluster_options(n_trees, n_clusters, depth, method)
    sampler = resolve_sampler(seed, generator, dtype=torch.float64, device=X.device)
    return build_cluster_trees(X, n_trees, n_clusters, depth, method, sampler)
