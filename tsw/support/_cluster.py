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
from tsw.core._ranges import power_of_two
from tsw.core._validation import _integer, check_choice, check_positive_int
from tsw.support._trees import SupportTree, SupportTrees, check_support, match_rows, sqdist

__all__ = [
    "build_cluster_trees",
    "check_cluster_options",
    "check_n_clusters",
    "first_copies",
    "row_norms",
    "sample_cluster_trees",
]

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
    Returns the centres (G, k') as point indices, ``k' = min(k, largest group)`` (a
    centre chosen once every point of its group coincides with a chosen one repeats
    that one and takes no point: a group of ``m`` distinct points gets ``min(k, m)``
    clusters), each point's nearest centre (its first nearest: the label of
    :func:`tsw.support._trees.sqdist`'s argmin, from the same squared distances) and
    each group's largest squared distance to its first centre.
    """
    dev = X.device
    count = torch.bincount(group, minlength=G)
    # a group of m points has at most m distinct centres: the ones beyond are repeats
    k = min(k, int(count.max()))
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
    if spread is None:  # every group holds one point
        spread = torch.zeros(G, dtype=X.dtype, device=dev)
    return torch.stack(chosen, dim=1), label, spread


def _lloyd(X: Tensor, group: Tensor, C: Tensor, steps: int) -> Tensor:
    """Run a few Lloyd iterations from centres ``C`` (G, k, d) within each group.

    Each point goes to its nearest centre of its group, the first on ties. With few
    centres in all (``G k <= min(BLAS_CENTRES, d)``) one matrix product gives every
    ``<x - r, c - r>``, ``r`` the first initial centre of the point's group (the points
    are moved by it once, so that comparing ``|c - r|^2 - 2 <x - r, c - r>`` cancels
    only the group's own spread, not the data's offset); otherwise :func:`sqdist`. The
    final assignment, after the iterations, uses :func:`sqdist`, the placement's
    formula. A cluster's new centre is its mean, formed as the old centre plus the mean
    of the points' offsets from it (exact for a cluster of equal points, and free of the
    data's offset); an empty cluster keeps its centre.
    """
    G, k, d = C.shape
    n = X.shape[0]
    flat = C.reshape(G * k, d)
    blas = G * k <= min(BLAS_CENTRES, d)  # the product writes G k numbers a point, not k d
    ref = C[:, 0]  # (G, d)
    rows = X - ref.index_select(0, group) if blas else X
    every = torch.arange(n, device=X.device)
    offsets = torch.empty_like(X)
    for _ in range(steps):
        if blas:
            shifted = (flat.view(G, k, d) - ref[:, None]).reshape(G * k, d)
            score = (shifted.square().sum(-1) - 2 * (rows @ shifted.T)).view(n, G, k)
            label = score[every, group].argmin(-1)
        else:
            label = sqdist(X, flat.view(G, k, d), group).argmin(-1)
        cell = group * k + label
        torch.index_select(flat, 0, cell, out=offsets)
        offsets.sub_(X).neg_()  # x - c, exactly
        sums = X.new_zeros(G * k, d).index_add_(0, cell, offsets)
        count = torch.bincount(cell, minlength=G * k).to(X.dtype)
        flat = flat + sums / count.clamp(min=1)[:, None]
    return flat.view(G, k, d)


def row_norms(diff: Tensor, ord: float = 2.0) -> Tensor:
    r"""Return the ``ord``-norms of the rows of ``diff``, without overflow or underflow.

    Each row is divided by a scale ``m`` of its largest entry before the powers are
    formed, so :math:`m \lVert x / m \rVert` is exact to rounding for every row whose
    norm is representable, at any ``ord`` (the plain sum of squares reads 0 for entries
    below 1e-154 in float64 and Inf above 1e154). For ``ord = 2``, ``m`` is the power of
    two nearest to that entry, an exact division: the value is then the plain formula's
    wherever that one neither overflows nor underflows. Otherwise ``m`` is the entry
    itself, so that the largest term is 1 at every ``ord``.
    """
    top = diff.abs().amax(-1, keepdim=True)
    m = power_of_two(top) if ord == 2 else torch.where(top > 0, top, torch.ones_like(top))
    return torch.linalg.vector_norm(diff / m, ord=ord, dim=-1) * m[..., 0]


#: coordinates combined into the key that finds the candidate repeated points
KEY_COLUMNS = 16


def first_copies(X: Tensor) -> Tensor:
    """For each row of ``X`` (n, d) the first row equal to it (:func:`match_rows`).

    Only the rows that share a key with another row are compared whole (``match_rows``
    sorts rows, the cost of a few builds' levels on 1e5 points): the key is a fixed
    combination of up to ``KEY_COLUMNS`` coordinates of ``X`` scaled to at most 1 (equal
    rows get equal keys, elementwise; most distinct rows different ones). Without
    repeated keys nothing is sorted.
    """
    n, d = X.shape
    first = torch.arange(n, device=X.device)
    cols = torch.linspace(0, d - 1, min(d, KEY_COLUMNS)).round().long().unique()
    Xs = X.detach()[:, cols.to(X.device)]
    Xs = (Xs / power_of_two(Xs.abs().amax())).T  # (K, n): no overflow in the key
    key = torch.zeros(n, dtype=X.dtype, device=X.device)
    for row in Xs:
        key = key * 0.7548776662466927 + row
    _, inv, counts = torch.unique(key, return_inverse=True, return_counts=True)
    shared = torch.nonzero(counts[inv] > 1).squeeze(-1)
    if shared.numel():
        first[shared] = shared[match_rows(X[shared], X[shared])]
    return first


def _root_distances(parents: Tensor, lengths: Tensor, depth: Tensor) -> Tensor:
    """Each node's path length to the root; ``lengths`` holds the edges into nodes 1 .. V-1."""
    h = lengths.new_zeros(parents.shape[0])
    w = torch.cat([h[:1], lengths])
    for level in range(1, int(depth.max()) + 1):
        nodes = torch.nonzero(depth == level).squeeze(-1)
        h[nodes] = h[parents[nodes]] + w[nodes]
    return h


def _range_error(X: Tensor, what: str) -> ValueError:
    """Return the ``ValueError`` for a support whose tree lengths leave its dtype's range."""
    wider = " or use torch.float64" if X.dtype != torch.float64 else ""
    return ValueError(
        f"support has entries of magnitude up to {float(X.abs().amax()):.3g}: in {X.dtype} "
        f"the {what} overflow to Inf. Rescale the data (the distances are in the units "
        f"of the data){wider}"
    )


def _cluster_tree(
    X: Tensor, scale: Tensor, first: Tensor, k: int, depth: int, method: str, sampler: Sampler
) -> SupportTree:
    """One clustering tree (see :func:`sample_cluster_trees`) on ``X`` (n, d).

    ``first`` (n,) is the first row of ``X`` equal to each row (:func:`first_copies`). The
    tree is built on ``X / scale`` (``scale`` a power of two near ``max |X|``: an exact
    division outside subnormals), where no squared distance overflows or underflows, and
    its centres and lengths are multiplied back: the tree of ``2^j X`` is that of ``X``
    with its lengths times ``2^j``.
    """
    n, dev = X.shape[0], X.device
    Xs = X / scale
    centers = [Xs.mean(0, keepdim=True)]
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
        Xa = Xs if active.numel() == n else Xs[active]
        # a node whose points all coincide with its first centre is not split
        idx, label, spread = _farthest(Xa, group, G, k, sampler)  # (G, k') local indices
        C = Xa[idx]  # (G, k', d)
        if method == "kmeans":
            C = _lloyd(Xa, group, C, LLOYD_STEPS)
            label = sqdist(Xa, C, group).argmin(-1)
        kk = C.shape[1]
        split = spread[group] > 0
        active, group, label = active[split], group[split], label[split]
        if active.numel() == 0:
            break
        child, cid = torch.unique(group * kk + label, return_inverse=True)
        g_of, l_of = child // kk, child % kk
        centers.append(C[g_of, l_of])
        parents.append(nodes[g_of])
        depths.append(torch.full((child.numel(),), level, dtype=torch.long, device=dev))
        node[active] = V + cid
        V += child.numel()
    # every support point hangs from its deepest cluster as its own leaf; a repeated
    # point sits on its first copy's leaf (its own leaf node keeps no mass), so that the
    # copies are at distance 0, as on a quadtree
    centers.append(Xs)
    parents.append(node)
    all_depths = torch.cat(depths)
    depths.append(all_depths[node] + 1)
    scaled, parents_t = torch.cat(centers), torch.cat(parents)
    depth_t = torch.cat(depths)
    lengths = row_norms(scaled[1:] - scaled[parents_t[1:]]) * scale
    clusters = scaled[:V] * scale
    # the longest path, twice the largest distance from the root, must be finite
    if not bool(torch.isfinite(2 * _root_distances(parents_t, lengths, depth_t).amax())):
        raise _range_error(X, "path lengths of the tree")
    if not bool(torch.isfinite(clusters).all()):
        raise _range_error(X, "centres of its clusters")
    centers_t = torch.cat([clusters, X])  # the leaves' centres: the points, exactly
    return SupportTree(
        parents=parents_t,
        edge_lengths=torch.cat([lengths.new_zeros(1), lengths]),
        leaves=V + first,
        depth=depth_t,
        centers=centers_t,
    )


def check_n_clusters(value: object, name: str = "n_clusters") -> int:
    """Return ``value`` as an int if it is an integer >= 2, else raise naming ``name``.

    One cluster per node would make every node's only child a copy of it: a path.
    """
    number = _integer(value)
    if number is None:
        raise TypeError(f"{name} must be an int >= 2; got {type(value).__name__}")
    if number < 2:
        raise ValueError(
            f"{name} must be an int >= 2 (the clusters of each node: with one, every "
            f"node's only child repeats it and the tree is a path); got {number}"
        )
    return number


def check_cluster_options(
    n_trees: object, n_clusters: object, depth: object, method: object
) -> tuple[int, int, int, str]:
    """Check the options of :func:`sample_cluster_trees`."""
    return (
        check_positive_int(n_trees, "n_trees"),
        check_n_clusters(n_clusters, "n_clusters"),
        check_positive_int(depth, "depth"),
        check_choice(method, "method", METHODS),
    )


def build_cluster_trees(
    X: Tensor, n_trees: int, n_clusters: int, depth: int, method: str, sampler: Sampler
) -> SupportTrees:
    """``n_trees`` clustering trees on ``X`` from ``sampler`` (options checked)."""
    scale = power_of_two(X.detach().abs().amax())
    first = first_copies(X)
    trees = tuple(
        _cluster_tree(X, scale, first, n_clusters, depth, method, sampler) for _ in range(n_trees)
    )
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
    centre drawn uniformly among them, each next centre the first of the points
    farthest from those chosen; then every point to its nearest centre, the earlier
    centre on ties), recursively to ``depth`` levels; a node whose points all coincide
    is not split, a node of fewer distinct points than ``n_clusters`` gets one cluster
    per distinct point, and empty clusters are dropped. The edge between two clusters
    has the distance between their centres as its length. Every support point then
    hangs from its deepest cluster as its own leaf, at the distance to that cluster's
    centre (a zero-length edge where the point is the centre; the authors' MATLAB drops
    such edges, which changes no distance); a repeated point sits on the leaf of its
    first copy, so that copies are at distance 0 (the leaf nodes of the later copies
    keep no mass). All the nodes of a level are clustered at once.

    Parameters
    ----------
    support : Tensor or numpy array of shape (n, d)
        Finite points, float32 or float64 (numpy arrays are converted to tensors). The
        tree is built in this dtype.
    n_trees : int, default 1
        Number of trees ``T``.
    n_clusters : int, default 4
        Clusters per node, at least 2 (``KC`` of Le et al., who use 4).
    depth : int, default 5
        Levels of clusters below the root (``L`` of Le et al., who use 5); the leaves
        are one level deeper.
    method : {"farthest", "kmeans"}, default "farthest"
        ``"farthest"``: the centres are the farthest-point centres (support points).
        ``"kmeans"``: 5 Lloyd iterations from them (the centres are then means, an
        empty cluster keeps its centre), and the points go to their nearest final
        centre (the earlier centre on ties).
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

    Raises
    ------
    ValueError
        For a support that is not a finite (n, d) array, ``n_clusters < 2``, a
        non-positive ``n_trees`` or ``depth``, an unknown ``method``, or a support whose
        tree's path lengths overflow its dtype (entries near its largest value).

    Notes
    -----
    The tree is built on the support divided by the power of two nearest to its largest
    entry (an exact division), so no squared distance overflows or underflows: the
    trees of ``c X`` are those of ``X`` with every length times ``c``, exactly for a
    power of two, for data from the smallest to the largest magnitudes of the dtype.
    Lengths are norms formed without squaring overflow. Points closer than about
    ``1e-154`` (float64) or ``1e-19`` (float32) times the support's largest entry
    count as coinciding when the clusters are formed (their squared distance
    underflows); their edges keep their exact lengths.

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
