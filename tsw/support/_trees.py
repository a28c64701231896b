r"""Trees built on a support: the containers, the placement of points, and random quadtrees.

A :class:`SupportTree` is one rooted tree whose nodes are cells (a quadtree) or clusters
(a clustering tree) of a support of ``n`` points in :math:`\mathbb{R}^d`; every support
point sits on a node (``leaves``). A :class:`SupportTrees` holds ``T`` such trees over
one support: the slices of the tree-sliced Wasserstein distance of Le et al. (2019),
the mean over the trees of the exact W1 for each tree's path metric.

:func:`sample_quadtrees` draws random-shift quadtrees (Indyk and Thaper, 2003), the
low-dimensional builder of Le et al.; the clustering trees of high dimensions are in
:mod:`tsw.support._cluster`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from tsw.core._problem import from_numpy
from tsw.core._random import Sampler, Seed, refuse_tracing, resolve_sampler
from tsw.core._ranges import power_of_two
from tsw.core._validation import (
    check_dtype_device,
    check_finite,
    check_nonnegative,
    check_positive_int,
    check_same_device_dtype,
    check_tensor,
)

__all__ = [
    "SupportTree",
    "SupportTrees",
    "check_support",
    "place_cluster",
    "quadtrees",
    "sample_quadtrees",
    "sqdist",
]

#: the finest level of a quadtree: float64 resolves 52 halvings of the root cell
MAX_LEVELS = 52
#: points per block when distances to centres are formed (bounds the working memory)
ROWS = 16384


@dataclasses.dataclass(frozen=True)
class SupportTree:
    """One tree over a support of ``n`` points.

    Attributes
    ----------
    parents : LongTensor of shape (V,)
        ``parents[v]`` is the parent of node ``v``; the root (node 0) has ``-1``: the form
        :func:`tsw.tree_wasserstein` takes.
    edge_lengths : Tensor of shape (V,)
        Length of the edge from ``v`` to its parent, in the support's dtype and on its
        device; the root's entry is 0.
    leaves : LongTensor of shape (n,)
        The node of each support point.
    depth : LongTensor of shape (V,)
        The depth of each node (the root's is 0); children are numbered after their parents.
    centers : Tensor of shape (V, d) or None
        Clustering trees: the centre of each node (the root's is the support's mean, a
        leaf's is its support point), in the support's dtype.
    shift, origin : Tensor of shape (d,) or None
        Quadtrees: the random shift and the lower corner of the root cell (float64).
    side : Tensor of shape () or None
        Quadtrees: the side of the root cell (float64); a cell at depth ``l`` has side
        ``side / 2**l``.
    codes : LongTensor of shape (V, W) or None
        Quadtrees: which child of its parent each cell is, its ``d`` bits (1 = the upper
        half along that axis) packed 32 to a word; :meth:`cells` gives each cell's
        integer coordinates.
    levels : int
        Quadtrees: the grid of the finest level has ``2**levels`` cells per axis.
    """

    parents: Tensor
    edge_lengths: Tensor
    leaves: Tensor
    depth: Tensor
    centers: Tensor | None = None
    shift: Tensor | None = None
    origin: Tensor | None = None
    side: Tensor | None = None
    codes: Tensor | None = None
    levels: int = 0

    @property
    def n_nodes(self) -> int:
        """The number of nodes ``V``."""
        return int(self.parents.shape[0])

    def __repr__(self) -> str:
        kind = "quadtree" if self.codes is not None else "cluster tree"
        height = int(self.depth.max()) if self.depth.numel() else 0
        return (
            f"SupportTree({kind}, n_nodes={self.n_nodes}, n_points={self.leaves.shape[0]}, "
            f"height={height}, dtype={self.edge_lengths.dtype}, "
            f"device={self.edge_lengths.device.type})"
        )

    def replace(self, **changes: Any) -> SupportTree:
        """Return a copy with some fields replaced."""
        return dataclasses.replace(self, **changes)

    def cells(self) -> Tensor:
        """Return the integer coordinates (V, d) of each quadtree cell at its depth.

        Cell ``v`` is the cube ``origin + side / 2**depth[v] * (cells[v] + [0, 1)^d)``;
        the root's row is 0. Formed from the parents' cells and the ``codes``.
        """
        if self.codes is None or self.origin is None:
            raise ValueError("cells() is defined for quadtrees (this tree has no cell codes)")
        d = self.origin.shape[0]
        shifts = torch.arange(32, device=self.codes.device)
        bits = ((self.codes[:, :, None] >> shifts) & 1).reshape(self.codes.shape[0], -1)[:, :d]
        out = torch.zeros_like(bits)
        for level in range(1, int(self.depth.max()) + 1 if self.depth.numel() else 1):
            nodes = torch.nonzero(self.depth == level).squeeze(-1)
            out[nodes] = 2 * out[self.parents[nodes]] + bits[nodes]
        return out


def _move(t: Tensor, device: torch.device, dtype: torch.dtype | None) -> Tensor:
    if t.dtype.is_floating_point and dtype is not None:
        return t.to(device=device, dtype=dtype)
    return t.to(device=device)


@dataclasses.dataclass(frozen=True)
class SupportTrees:
    """``T`` trees over one support: the slices of the tree-sliced Wasserstein distance.

    Built by :func:`tsw.sample_quadtrees` or :func:`tsw.sample_cluster_trees`. ``len``,
    indexing and iteration give the trees (:class:`SupportTree`).

    Attributes
    ----------
    support : Tensor of shape (n, d)
        The points the trees were built on.
    trees : tuple of SupportTree
        The trees.
    kind : {"quadtree", "cluster"}
        How they were built.
    """

    support: Tensor
    trees: tuple[SupportTree, ...]
    kind: str

    def __len__(self) -> int:
        return len(self.trees)

    def __getitem__(self, t: int) -> SupportTree:
        return self.trees[t]

    def __iter__(self) -> Iterator[SupportTree]:
        return iter(self.trees)

    def __repr__(self) -> str:
        nodes = [tree.n_nodes for tree in self.trees] or [0]
        lo, hi = min(nodes), max(nodes)
        sizes = str(lo) if lo == hi else f"{lo}-{hi}"
        return (
            f"SupportTrees(kind={self.kind!r}, n_trees={self.n_trees}, "
            f"n_points={self.n_points}, dim={self.dim}, n_nodes={sizes}, "
            f"dtype={self.dtype}, device={self.device.type})"
        )

    @property
    def n_trees(self) -> int:
        """The number of trees ``T``."""
        return len(self.trees)

    @property
    def n_points(self) -> int:
        """The number of support points ``n``."""
        return int(self.support.shape[0])

    @property
    def dim(self) -> int:
        """The dimension ``d`` of the support."""
        return int(self.support.shape[1])

    @property
    def dtype(self) -> torch.dtype:
        """The support's dtype (that of the edge lengths)."""
        return self.support.dtype

    @property
    def device(self) -> torch.device:
        """The support's device."""
        return self.support.device

    def to(self, device: Any = None, dtype: torch.dtype | None = None) -> SupportTrees:
        """Return the trees on ``device`` with the support, lengths and centres in ``dtype``.

        A quadtree's shift, origin and side stay float64 (the placement's arithmetic).
        """
        dtype, device = check_dtype_device(
            dtype, self.device if device is None else device, default_dtype=self.dtype
        )
        trees = []
        for tree in self.trees:
            fields = {}
            for f in dataclasses.fields(tree):
                value = getattr(tree, f.name)
                if isinstance(value, Tensor):
                    keep = f.name in ("shift", "origin", "side")
                    fields[f.name] = _move(value, device, None if keep else dtype)
            trees.append(tree.replace(**fields))
        return SupportTrees(_move(self.support, device, dtype), tuple(trees), self.kind)

    def with_edge_lengths(self, edge_lengths: Sequence[Tensor]) -> SupportTrees:
        """Return the same trees with new edge lengths (one (V_t,) tensor per tree).

        Each tensor must have the support's dtype and device, be finite and non-negative;
        the root's entry is set to 0.
        """
        if isinstance(edge_lengths, Tensor) or len(edge_lengths) != len(self.trees):
            got = (
                f"a tensor of shape {tuple(edge_lengths.shape)}"
                if isinstance(edge_lengths, Tensor)
                else f"{len(edge_lengths)} entries"
            )
            raise ValueError(
                f"with_edge_lengths takes a sequence of {len(self.trees)} tensors (one per "
                f"tree); got {got}"
            )
        trees = []
        for t, (tree, w) in enumerate(zip(self.trees, edge_lengths, strict=True)):
            name = f"edge_lengths[{t}]"
            w = check_tensor(w, name)
            check_same_device_dtype(self.support, "the support", w, name)
            if w.shape != tree.parents.shape:
                raise ValueError(
                    f"{name} must have shape (V,) = {tuple(tree.parents.shape)}, the tree's "
                    f"node count; got {tuple(w.shape)}"
                )
            check_nonnegative(w, name)
            trees.append(tree.replace(edge_lengths=torch.where(tree.parents < 0, 0.0, w)))
        return SupportTrees(self.support, tuple(trees), self.kind)

    def place(self, X: Tensor | np.ndarray) -> Tensor:
        """Return the node of each point of ``X`` on each tree, as Le et al.'s TreeMapping.

        Quadtrees: the deepest existing cell containing the point (the root for a point
        outside the root cell). Clustering trees: the nearest child centre, level by level
        (ties to the first child), down to the deepest cluster; a point equal to a support
        point hanging from that cluster lands on that point's leaf (the first such point
        for duplicates), any other point on the cluster itself. Either way a support
        point lands on its own leaf.

        Parameters
        ----------
        X : Tensor or numpy array of shape (N, d)
            Points in the support's dtype and on its device.

        Returns
        -------
        LongTensor of shape (T, N)

        Raises
        ------
        RuntimeError
            Under ``torch.jit.trace``: the cells found for the example points would be
            recorded as constants.
        """
        refuse_tracing("tsw.SupportTrees.place")
        X = check_support(X, "X", dim=self.dim)
        check_same_device_dtype(self.support, "the trees' support", X, "X")
        if self.kind == "quadtree":
            return torch.stack([_place_quad(tree, X) for tree in self.trees])
        match = match_rows(self.support, X)
        return torch.stack([place_cluster(tree, X, match) for tree in self.trees])


def check_trees(trees: object, name: str = "trees") -> SupportTrees:
    """Return ``trees`` if it is a :class:`SupportTrees`; else raise a TypeError naming ``name``."""
    if not isinstance(trees, SupportTrees):
        raise TypeError(
            f"{name} must be a tsw.SupportTrees (from tsw.sample_quadtrees or "
            f"tsw.sample_cluster_trees); got {type(trees).__name__}"
        )
    return trees


def sqdist(X: Tensor, table: Tensor, index: Tensor) -> Tensor:
    """Squared distances (N, K) of each point to its own K centres ``table[index[i]]``.

    ``table[index[lo:hi]]`` is gathered a block of rows at a time (never the whole
    (N, K, d) tensor). One formula for the build and the placement, so that a support
    point is assigned to the same child in both (the same operations on the same values).
    """
    out = X.new_empty(index.shape[0], table[index[:1]].shape[1])
    for lo in range(0, X.shape[0], ROWS):
        hi = lo + ROWS
        out[lo:hi] = (X[lo:hi, None, :] - table[index[lo:hi]]).square().sum(-1)
    return out


def place_cluster(tree: SupportTree, X: Tensor, match: Tensor) -> Tensor:
    """Place ``X`` (N, d) on a clustering tree (:meth:`SupportTrees.place`).

    ``match`` (N,) is the support point equal to each row of ``X`` (-1 for none).
    """
    centers = tree.centers
    if centers is None:
        raise ValueError("place_cluster takes a clustering tree (its centers are None)")
    n = tree.leaves.shape[0]
    V = tree.n_nodes
    clusters = V - n  # nodes 0 .. clusters-1 are the clusters, then the leaves
    # the build's scale (a power of two, from the leaves' centres: the support points), so
    # that no squared distance overflows or underflows and a support point takes the
    # build's path
    scale = power_of_two(centers[clusters:].detach().abs().amax())
    X, centers = X / scale, centers / scale
    par = tree.parents[1:clusters]
    # children of each cluster in the order they were made (that of their labels)
    count = torch.bincount(par, minlength=clusters)
    K = int(count.max()) if par.numel() else 0
    node = torch.zeros(X.shape[0], dtype=torch.long, device=X.device)
    if K:
        order = torch.argsort(par, stable=True)
        start = torch.cumsum(count, 0) - count
        slot = torch.arange(par.numel(), device=X.device) - start[par[order]]
        table = torch.full((clusters, K), -1, dtype=torch.long, device=X.device)
        table[par[order], slot] = order + 1
        for _ in range(int(tree.depth[:clusters].max())):
            ch = table[node]  # (N, K)
            has = ch[:, 0] >= 0
            if not bool(has.any()):
                break
            d2 = sqdist(X, centers, ch.clamp(min=0))
            d2 = torch.where(ch >= 0, d2, torch.inf)
            best = ch.gather(1, d2.argmin(-1, keepdim=True)).squeeze(1)
            node = torch.where(has, best, node)
    # a point equal to a support point of its deepest cluster lands on that point's leaf
    leaf = tree.leaves[match.clamp(min=0)]
    own = (match >= 0) & (tree.parents[leaf] == node)
    return torch.where(own, leaf, node)


def check_support(X: object, name: str, *, dim: int | None = None) -> Tensor:
    """Return ``X`` as a finite (n, d) floating tensor (numpy converted), else raise."""
    X = check_tensor(from_numpy(X, name), name)
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(
            f"{name} must have shape (n, d) with n, d >= 1; got {name}.shape={tuple(X.shape)}"
        )
    if dim is not None and X.shape[1] != dim:
        raise ValueError(
            f"{name} must have d = {dim} columns, the trees' dimension; got "
            f"{name}.shape={tuple(X.shape)}"
        )
    check_finite(X, name)
    return X


def match_rows(support: Tensor, X: Tensor) -> Tensor:
    """For each row of ``X`` the first support row equal to it, or -1 (LongTensor (N,))."""
    n = support.shape[0]
    _, inv = torch.unique(torch.cat([support, X]), dim=0, return_inverse=True)
    first = torch.full((int(inv.max()) + 1,), n, dtype=torch.long, device=X.device)
    first.scatter_reduce_(0, inv[:n], torch.arange(n, device=X.device), "amin")
    found = first[inv[n:]]
    return torch.where(found < n, found, -1)


def group_ids(parent: Tensor, codes: Tensor) -> Tensor:
    """Dense ids (0 .. G-1, in sorted order) of the distinct rows ``(parent, codes)``.

    ``parent`` (k,) holds integers below 2**31 and ``codes`` (k, W) 32-bit words: one
    1-D ``torch.unique`` per word on the ranks of the previous words (exact; no
    multi-column sort).
    """
    key = parent
    for w in range(codes.shape[1]):
        key = torch.unique((key << 32) | codes[:, w], return_inverse=True)[1]
    return key


def _pack(bits: Tensor) -> Tensor:
    """(k, d) 0/1 integers packed into (k, ceil(d / 32)) words of 32 bits."""
    d = bits.shape[1]
    weights = torch.ones(32, dtype=torch.long, device=bits.device) << torch.arange(
        32, device=bits.device
    )
    # a product of integer tensors is not implemented on every device: multiply and sum
    words = [(bits[:, w : w + 32] * weights[: min(32, d - w)]).sum(-1) for w in range(0, d, 32)]
    return torch.stack(words, dim=1)


def _grid(X: Tensor, origin: Tensor, side: Tensor, levels: int) -> tuple[Tensor, Tensor]:
    """Return the cells at the finest level (N, d) of ``X``, and whether X is in the root."""
    u = (X.to(torch.float64) - origin) / side
    # u = 1 is the rounding of the farthest support points: the last cell, as in the build
    inside = ((u >= 0) & (u <= 1)).all(-1)
    q = torch.floor(u.clamp(0.0, 1.0) * 2.0**levels).to(torch.long)
    return q.clamp_(0, 2**levels - 1), inside


def _bounds(X: Tensor) -> tuple[Tensor, float]:
    """Return the lower corner of ``X`` and its largest extent along an axis (1 if none)."""
    lo = X.min(0).values
    span = float((X.max(0).values - lo).max())
    return lo, span if span > 0 else 1.0


def _quadtree(
    uniq: Tensor,
    inv: Tensor,
    bounds: tuple[Tensor, float],
    dtype: torch.dtype,
    sampler: Sampler,
    max_depth: int | None,
) -> SupportTree:
    """One random-shift quadtree (see :func:`sample_quadtrees`).

    ``uniq`` (m, d) are the distinct support points in float64, ``inv`` (n,) the row of
    each support point among them, ``bounds`` their :func:`_bounds`.
    """
    dev, d = uniq.device, uniq.shape[1]
    lo, span = bounds
    shift = sampler.uniform(d).to(torch.float64) * span
    origin, side = lo - shift, torch.tensor(2.0 * span, dtype=torch.float64, device=dev)
    levels = MAX_LEVELS if max_depth is None else min(max_depth, MAX_LEVELS)
    q, _ = _grid(uniq, origin, side, levels)
    m = uniq.shape[0]
    node = torch.zeros(m, dtype=torch.long, device=dev)
    active = torch.arange(m, device=dev) if m > 1 else node[:0]
    W = -(-d // 32)
    parents = [torch.tensor([-1], device=dev)]
    depth = [torch.zeros(1, dtype=torch.long, device=dev)]
    codes = [torch.zeros(1, W, dtype=torch.long, device=dev)]
    V = 1
    for level in range(1, levels + 1):
        if active.numel() == 0:
            break
        code = _pack((q[active] >> (levels - level)) & 1)
        gid = group_ids(node[active], code)
        G = int(gid.max()) + 1
        first = torch.full((G,), active.numel(), dtype=torch.long, device=dev)
        first.scatter_reduce_(0, gid, torch.arange(active.numel(), device=dev), "amin")
        parents.append(node[active][first])
        codes.append(code[first])
        depth.append(torch.full((G,), level, dtype=torch.long, device=dev))
        node[active] = V + gid
        V += G
        count = torch.bincount(gid, minlength=G)
        active = active[count[gid] > 1]
    depth_t = torch.cat(depth)
    lengths = math.sqrt(d) * float(side) * torch.pow(0.5, depth_t.to(torch.float64))
    lengths = torch.where(depth_t == 0, 0.0, lengths).to(dtype)
    return SupportTree(
        parents=torch.cat(parents),
        edge_lengths=lengths,
        leaves=node[inv],
        depth=depth_t,
        shift=shift,
        origin=origin,
        side=side,
        codes=torch.cat(codes),
        levels=levels,
    )


def _place_quad(tree: SupportTree, X: Tensor) -> Tensor:
    """Return the deepest cell of ``tree`` containing each point of ``X`` (root outside)."""
    origin, side = cast(Tensor, tree.origin), cast(Tensor, tree.side)
    codes = cast(Tensor, tree.codes)
    q, inside = _grid(X, origin, side, tree.levels)
    node = torch.zeros(X.shape[0], dtype=torch.long, device=X.device)
    active = torch.nonzero(inside).squeeze(-1)
    top = int(tree.depth.max())
    for level in range(1, top + 1):
        if active.numel() == 0:
            break
        cells = torch.nonzero(tree.depth == level).squeeze(-1)
        code = _pack((q[active] >> (tree.levels - level)) & 1)
        keys = torch.cat([tree.parents[cells], node[active]])
        gid = group_ids(keys, torch.cat([codes[cells], code]))
        table = torch.full((int(gid.max()) + 1,), -1, dtype=torch.long, device=X.device)
        table[gid[: cells.numel()]] = cells
        found = table[gid[cells.numel() :]]
        hit = found >= 0
        node[active[hit]] = found[hit]
        active = active[hit]
    return node


def check_tree_options(n_trees: object, max_depth: object = None) -> tuple[int, int | None]:
    """Check ``n_trees`` (an int >= 1) and ``max_depth`` (None or an int >= 1)."""
    n_trees = check_positive_int(n_trees, "n_trees")
    if max_depth is not None:
        max_depth = check_positive_int(max_depth, "max_depth")
    return n_trees, max_depth


def sample_quadtrees(
    support: Tensor | np.ndarray,
    n_trees: int = 1,
    *,
    max_depth: int | None = None,
    seed: Seed = None,
    generator: torch.Generator | None = None,
) -> SupportTrees:
    r"""Draw random-shift quadtrees over a support (the low-dimensional trees of Le et al.).

    ``tsw.sample_quadtrees(X, n_trees=10, seed=0)`` returns a :class:`SupportTrees` of 10
    trees over the points ``X`` (n, d); :func:`tsw.support_tsw` and
    :func:`tsw.pairwise_tsw` take it as ``trees=``. References: [Le2019q]_ and
    [Indyk2003]_.

    Each tree: the root is a cube of side :math:`L = 2\Delta` (:math:`\Delta` the largest
    extent of the support along an axis) with lower corner :math:`\min X - s`, the shift
    :math:`s \sim U(0, \Delta)^d` drawn per tree, so that the cube contains the support.
    A cell is split at its midpoints, only the non-empty children are kept (found per
    level from integer cell coordinates, never by enumerating the :math:`2^d`
    children), and a cell stops splitting when it holds one distinct point or at depth
    ``max_depth``. The support points sit on the cells where they stop (duplicates on
    one cell).

    Parameters
    ----------
    support : Tensor or numpy array of shape (n, d)
        Finite points, float32 or float64 (numpy arrays are converted to tensors). The
        trees are piecewise constant in the points: a support that requires a gradient
        is detached (``SupportTrees.support`` holds it without its graph).
    n_trees : int, default 1
        Number of trees ``T``.
    max_depth : int, optional
        Deepest level; by default cells split until each holds one distinct point, at
        most 52 levels (the float64 resolution of the root cell: closer points share a
        cell).
    seed, generator
        The library's seeding contract (the guide's "Seeding"): the shifts are drawn in
        float64, so the same seed gives the same trees on every device and dtype.

    Returns
    -------
    SupportTrees
        ``kind = "quadtree"``; edge lengths in the support's dtype, on its device.

    Notes
    -----
    The edge into a cell of side :math:`\ell` has the cell's diameter,
    :math:`\ell \sqrt{d}`, as its length. Two points whose lowest common cell has side
    :math:`\ell'` leave it through two different children, so their path is at least
    :math:`2 (\ell'/2) \sqrt{d} \ge \lVert x - y \rVert`: the tree metric dominates the
    Euclidean one on the support (not for points that share a cell at ``max_depth``).
    Le et al. (2019) weight a level-:math:`l` edge by a geometric factor of the side
    (:math:`\propto 2^{-l}`); the diameter is that factor times :math:`\sqrt{d}\,L`,
    chosen here for the dominance, which is what makes the tree value an upper bound
    of W1 (Indyk and Thaper, 2003).

    References
    ----------
    .. [Le2019q] T. Le, M. Yamada, K. Fukumizu, M. Cuturi. Tree-sliced variants of
       Wasserstein distances. NeurIPS 2019.
    .. [Indyk2003] P. Indyk, N. Thaper. Fast image retrieval via embeddings. 3rd
       International Workshop on Statistical and Computational Theories of Vision, 2003.

    Examples
    --------
    >>> import torch, tsw
    >>> X = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    >>> trees = tsw.sample_quadtrees(X, n_trees=2, seed=0)
    >>> len(trees), trees.kind
    (2, 'quadtree')
    >>> torch.equal(trees.place(X), torch.stack([t.leaves for t in trees]))
    True
    """
    # the trees are piecewise constant in the points: a support that requires grad is
    # read without its graph
    X = check_support(support, "support").detach()
    n_trees, max_depth = check_tree_options(n_trees, max_depth)
    sampler = resolve_sampler(seed, generator, dtype=torch.float64, device=X.device)
    return quadtrees(X, n_trees, max_depth, sampler)


def quadtrees(X: Tensor, n_trees: int, max_depth: int | None, sampler: Sampler) -> SupportTrees:
    """``n_trees`` quadtrees on ``X`` from a float64 ``sampler`` (options checked)."""
    uniq, inv = torch.unique(X.to(torch.float64), dim=0, return_inverse=True)
    bounds = _bounds(uniq)
    trees = tuple(_quadtree(uniq, inv, bounds, X.dtype, sampler, max_depth) for _ in range(n_trees))
    return SupportTrees(X, trees, "quadtree")
