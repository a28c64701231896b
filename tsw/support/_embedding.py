r"""Tree-sliced Wasserstein as an L1 embedding: the edge matrix, embeddings, distance matrices.

On a tree with edge lengths :math:`w_e`, :math:`W_1(\mu, \nu) = \sum_e w_e |\mu(\Gamma_e) -
\nu(\Gamma_e)|` with :math:`\Gamma_e` the support points below edge ``e``. The map
:math:`\phi(\mu)_e = w_e \mu(\Gamma_e)` is linear, so the mean over ``T`` trees is the L1
distance between concatenated embeddings scaled by ``1/T``: a matrix of distances
between many histograms on one support costs one embedding per histogram and an L1
distance matrix (Le et al. 2019, Section 4), computed by :mod:`tsw.support._pairwise`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tsw.core._problem import to_numpy
from tsw.core._random import refuse_tracing
from tsw.core._validation import (
    check_bool,
    check_nonnegative,
    check_positive_int,
    check_same_device_dtype,
    mass_rtol,
)
from tsw.support._pairwise import l1_matrix
from tsw.support._trees import SupportTree, SupportTrees, check_trees

__all__ = ["edge_matrix", "embed_entries", "pairwise_tsw", "subtree_sums", "tree_embedding"]

#: the working memory of one block of embeddings and distances, in bytes
BLOCK_BYTES = 2**28


def _ancestors(tree: SupportTree) -> tuple[Tensor, Tensor]:
    """(node, support point) pairs: every non-root node on the path from a point's leaf up."""
    cur = tree.leaves
    col = torch.arange(cur.shape[0], device=cur.device)
    nodes, cols = [], []
    while cur.numel():
        keep = cur > 0
        cur, col = cur[keep], col[keep]
        nodes.append(cur)
        cols.append(col)
        cur = tree.parents[cur]
    return torch.cat(nodes), torch.cat(cols)


def edge_matrix(trees: SupportTrees) -> Tensor:
    r"""Return the (E, n) sparse matrix that maps a histogram to its tree embedding.

    ``M = edge_matrix(trees)``: row ``offset_t + v`` (``offset_t`` the number of nodes of
    the trees before tree ``t``, ``E = sum_t V_t``) is the edge from node ``v`` of tree
    ``t`` to its parent; ``M[offset_t + v, i] = w_v / T`` when support point ``i`` lies
    below that edge (its leaf is ``v`` or a descendant of ``v``), zero otherwise (the
    roots' rows are empty; zero-length edges keep their entries, as stored zeros).
    For histograms ``h`` (k, n) on the support, ``h @ M.T`` (k, E) is their embedding
    :math:`\phi`, and

    .. math::

        \frac1T \sum_t W_1^{(t)}(\mu, \nu) = \lVert \phi(\mu) - \phi(\nu) \rVert_1 ,

    the tree-sliced distance as an L1 distance (the ``1/T`` folded in). Written as
    :math:`M = \frac1T \operatorname{diag}(w) B` with ``B`` the 0/1 subtree indicator,
    the fixed-support tree barycenter reads its objective from it.

    Parameters
    ----------
    trees : SupportTrees

    Returns
    -------
    Tensor of shape (E, n), sparse COO (coalesced)
        In the trees' dtype, on their device.

    Examples
    --------
    >>> import torch, tsw
    >>> from tsw.support._embedding import edge_matrix
    >>> X = torch.tensor([[0.0], [1.0], [3.0]], dtype=torch.float64)
    >>> trees = tsw.sample_quadtrees(X, n_trees=2, seed=0)
    >>> M = edge_matrix(trees)
    >>> mu = torch.tensor([1.0, 0.0, 0.0], dtype=X.dtype)
    >>> nu = torch.tensor([0.0, 0.0, 1.0], dtype=X.dtype)
    >>> d = (M @ (mu - nu)).abs().sum()
    >>> bool(torch.isclose(d, tsw.pairwise_tsw(mu[None], nu[None], trees=trees)[0, 0]))
    True
    """
    trees = check_trees(trees)
    T, n = len(trees), trees.n_points
    rows, cols, vals, offset = [], [], [], 0
    for tree in trees:
        node, col = _ancestors(tree)
        rows.append(node + offset)
        cols.append(col)
        vals.append(tree.edge_lengths[node] / T)
        offset += tree.n_nodes
    index = torch.stack([torch.cat(rows), torch.cat(cols)])
    shape = (offset, n)
    return torch.sparse_coo_tensor(index, torch.cat(vals), shape, check_invariants=False).coalesce()


Merged = tuple[Tensor, Tensor, Tensor, int]


def _merged(trees: SupportTrees) -> Merged:
    """Return the edge matrix with its single-point rows merged (CSR of its transpose).

    Rows of :func:`edge_matrix` with one entry (edges above one support point, such as
    the leaves' edges of every tree) whose point is the same are one column of the
    embedding times positive factors: ``sum_r c_r |x| = |(sum_r c_r) x|``, so they merge
    into one column per point with their summed weights, and L1 distances are unchanged.
    Returns ``crow`` (n + 1,), ``col`` and ``val`` of the (n, E') transpose, and E'.
    """
    M = edge_matrix(trees)
    row, col = M.indices()
    val = M.values()
    per_row = torch.bincount(row, minlength=M.shape[0])
    single = per_row[row] == 1
    n = trees.n_points
    # merged single rows: column i of the embedding is point i's single-point edges
    rest = torch.unique(row[~single], return_inverse=True)[1] + n
    new_row = torch.where(single, col, torch.zeros_like(col))
    new_row[~single] = rest
    E = n + (int(rest.max()) - n + 1 if rest.numel() else 0)
    order = torch.argsort(col * E + new_row)  # rows of the transpose, then its columns
    crow = torch.zeros(n + 1, dtype=torch.long, device=col.device)
    crow[1:] = torch.cumsum(torch.bincount(col, minlength=n), 0)
    return crow, new_row[order], val[order], E


def _writable(a: np.ndarray) -> np.ndarray:
    """Return ``a`` C-contiguous and writable (a read-only array, e.g. a memmap, copied)."""
    a = np.ascontiguousarray(a)
    return a if a.flags.writeable else a.copy()


def _triplets(hists: Any, name: str, trees: SupportTrees) -> tuple[Tensor, Tensor, Tensor, int]:
    """Rows, columns and values of the nonzeros of (k, n) histograms, and k.

    Dense or sparse torch tensors in the trees' dtype and device; numpy arrays and
    scipy sparse matrices (duck-typed: ``tocoo``) are converted to the trees' dtype.
    """
    n, dtype, device = trees.n_points, trees.dtype, trees.device
    if isinstance(hists, np.ndarray):
        if hists.dtype not in (np.float32, np.float64):
            raise TypeError(f"{name} must have dtype float32 or float64; got {hists.dtype}")
        hists = torch.as_tensor(_writable(hists), dtype=dtype, device=device)
    elif not isinstance(hists, Tensor) and callable(getattr(hists, "tocoo", None)):
        coo = hists.tocoo()
        shape = tuple(coo.shape)
        if coo.data.dtype not in (np.float32, np.float64):
            raise TypeError(f"{name} must have dtype float32 or float64; got {coo.data.dtype}")
        index = torch.as_tensor(np.stack([coo.row, coo.col]).astype(np.int64), device=device)
        data = torch.as_tensor(_writable(coo.data), dtype=dtype, device=device)
        hists = torch.sparse_coo_tensor(index, data, shape, check_invariants=True)
    if not isinstance(hists, Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor (dense or sparse), a numpy array or a scipy "
            f"sparse matrix; got {type(hists).__name__}"
        )
    if not hists.dtype.is_floating_point:
        raise TypeError(f"{name} must have a floating dtype; got {hists.dtype}")
    check_same_device_dtype(trees.support, "the trees' support", hists, name)
    if hists.ndim != 2 or hists.shape[1] != n or hists.shape[0] == 0:
        raise ValueError(
            f"{name} must have shape (k, n) with n = {n}, the trees' support points, and "
            f"k >= 1; got {name}.shape={tuple(hists.shape)}"
        )
    if hists.layout == torch.strided:
        r, c = torch.nonzero(hists, as_tuple=True)
        return r, c, hists[r, c], hists.shape[0]
    coo = hists.to_sparse_coo().coalesce()
    r, c = coo.indices()
    return r, c, coo.values(), hists.shape[0]


def _expand(triplets: tuple[Tensor, Tensor, Tensor, int], merged: Merged) -> tuple[Tensor, Tensor]:
    """Each nonzero times each column of its point: flat (row, column) keys and values."""
    r, c, v, _ = triplets
    crow, col, val, E = merged
    start, count = crow[c], crow[c + 1] - crow[c]
    rep = torch.repeat_interleave(count)
    first = (start - torch.cumsum(count, 0) + count).index_select(0, rep)
    idx = first + torch.arange(rep.numel(), device=c.device)
    dest = r.index_select(0, rep) * E + col.index_select(0, idx)
    return dest, v.index_select(0, rep) * val.index_select(0, idx)


def _embed(triplets: tuple[Tensor, Tensor, Tensor, int], merged: Merged) -> Tensor:
    """Return the dense (k, E') embedding of histograms given as nonzero triplets."""
    k, E = triplets[3], merged[3]
    # one flat scatter, row by row when the triplets are (as from _split): fast in cache
    dest, flat = _expand(triplets, merged)
    return flat.new_zeros(k * E).index_add(0, dest, flat).view(k, E)


#: expansions (a histogram's nonzero times one of its point's columns) coalesced at once
EXPAND = 1 << 20

#: a block of rows is summed in a dense (rows, E) scratch when that holds at most this many
#: times its expansions (memory and time stay proportional to them), else by sorting
DENSE_FACTOR = 4


def embed_entries(
    trip: tuple[Tensor, Tensor, Tensor, int], merged: Merged
) -> tuple[Tensor, Tensor, Tensor]:
    """Return the nonzeros of the embedding of histograms given as nonzero triplets.

    ``trip`` is :func:`_triplets`' (rows sorted), ``merged`` :func:`_merged`'s. Returns
    the rows, columns and values of the embedding's nonzeros, each (row, column) once,
    sorted by row then column, without forming the (k, E) embedding: the rows go in
    blocks of about :data:`EXPAND` expansions, each summed in a dense scratch of the
    block's rows when it holds at most :data:`DENSE_FACTOR` times the block's expansions,
    else by sorting them; the memory is proportional to the expansions (the nonzeros
    times the points' depths). The values equal :func:`_embed`'s to rounding.
    """
    r, c, v, k = trip
    crow, E = merged[0], merged[3]
    count = crow[c + 1] - crow[c]  # the expansions of each nonzero
    per_row = torch.zeros(k, dtype=count.dtype, device=count.device).index_add_(0, r, count)
    start = torch.cumsum(per_row, 0) - per_row
    first_rows = torch.unique_consecutive(start // EXPAND, return_counts=True)[1]
    bounds = [0, *torch.cumsum(first_rows, 0).tolist()]
    cuts = torch.searchsorted(r, torch.tensor(bounds, dtype=r.dtype, device=r.device)).tolist()
    rows, cols, vals = [], [], []
    for b in range(len(bounds) - 1):
        lo, hi, t0, t1 = bounds[b], bounds[b + 1], cuts[b], cuts[b + 1]
        part = (r[t0:t1] - lo, c[t0:t1], v[t0:t1], hi - lo)
        n_exp = int(count[t0:t1].sum())
        if (hi - lo) * E <= DENSE_FACTOR * max(n_exp, 1):
            Z = _embed(part, merged)
            rr, cc = torch.nonzero(Z, as_tuple=True)
            vv = Z[rr, cc]
        else:
            key, flat = _expand(part, merged)
            uniq, inv = torch.unique(key, sorted=True, return_inverse=True)
            vv = flat.new_zeros(uniq.numel()).index_add_(0, inv, flat)
            keep = vv != 0
            uniq, vv = uniq[keep], vv[keep]
            rr, cc = uniq // E, uniq % E
        rows.append(rr + lo)
        cols.append(cc)
        vals.append(vv)
    return torch.cat(rows), torch.cat(cols), torch.cat(vals)


def _check_values(trip: tuple[Tensor, Tensor, Tensor, int], name: str) -> Tensor:
    """Non-negative finite values; return the (k,) totals."""
    r, _, v, k = trip
    v = v.detach()
    check_nonnegative(v, name)
    return v.new_zeros(k).index_add(0, r, v)


def tree_embedding(hists: Any, trees: SupportTrees) -> Any:
    r"""Embed histograms on the trees' support so that L1 distances are tree-sliced W1.

    ``Z = tsw.tree_embedding(H, trees)`` for histograms ``H`` (k, n) over the ``n``
    support points of ``trees``: ``|Z[i] - Z[j]|.sum()`` is the mean over the trees of
    the exact W1 between ``H[i]`` and ``H[j]`` for each tree's path metric (histograms of
    equal totals), the ``1/T`` folded in. The map is linear, :math:`Z = H M^\top` with
    :math:`M = \frac1T \operatorname{diag}(w) B` (merged as below).

    Parameters
    ----------
    hists : Tensor (dense or sparse), numpy array or scipy sparse matrix, shape (k, n)
        Non-negative masses on the support points. Torch tensors must have the trees'
        dtype and device; numpy and scipy inputs are converted to them.
    trees : SupportTrees

    Returns
    -------
    Tensor, numpy array or scipy sparse matrix of shape (k, E)
        Dense for dense inputs (numpy for numpy). Sparse for sparse inputs, of the same
        kind, holding the embedding's nonzeros only (never a dense (k, E) array: memory
        proportional to the nonzeros of ``hists`` times the depth of their points): a
        coalesced torch COO tensor for COO input, a torch CSR (CSC) tensor for CSR (CSC)
        input (other compressed layouts give CSR), a scipy sparse array or matrix of the
        input's class and format for scipy input. Its columns are the
        embedding of :func:`edge_matrix` with the edges above a single support point
        merged into one column per point (their lengths summed), which leaves every L1
        distance unchanged: ``E`` is ``n`` plus the number of edges above two or more
        support points.

    Raises
    ------
    TypeError, ValueError
        For inputs of another kind, dtype, device or shape, negative or non-finite
        entries, and sparse torch tensors that require a gradient while autograd records
        (pass ``hists.to_dense()``).

    Notes
    -----
    Differentiable in dense torch ``hists``: the gradient of :math:`\langle g, Z \rangle`
    is :math:`g M`, nonzero at the zero entries of ``hists`` too (the map is linear); the
    embedding itself sums the nonzeros only.

    Examples
    --------
    >>> import torch, tsw
    >>> X = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    >>> trees = tsw.sample_quadtrees(X, n_trees=3, seed=0)
    >>> H = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]], dtype=torch.float64)
    >>> Z = tsw.tree_embedding(H, trees)
    >>> d = (Z[0] - Z[1]).abs().sum()
    >>> bool(torch.isclose(d, tsw.pairwise_tsw(H, trees=trees)[0, 1]))
    True
    >>> tsw.tree_embedding(H.to_sparse(), trees).is_sparse
    True
    """
    refuse_tracing("tsw.tree_embedding")  # its nonzeros would be recorded as constants
    trees = check_trees(trees)
    numpy = not isinstance(hists, Tensor)
    trip = _triplets(hists, "hists", trees)
    _check_values(trip, "hists")
    merged = _merged(trees)
    k, E = trip[3], merged[3]
    dense = isinstance(hists, np.ndarray) or (
        isinstance(hists, Tensor) and hists.layout == torch.strided
    )
    if dense:
        if isinstance(hists, Tensor) and hists.requires_grad and torch.is_grad_enabled():
            Z = _Embedding.apply(hists, trip, merged)
        else:
            Z = _embed(trip, merged)
        return to_numpy(Z) if numpy else Z
    if isinstance(hists, Tensor) and hists.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            "tree_embedding is differentiable in dense histograms; got a sparse hists "
            f"(layout {hists.layout}) that requires grad: pass hists.to_dense()"
        )
    rows, cols, vals = embed_entries(trip, merged)
    if numpy:  # scipy in (duck-typed: tsw does not import scipy), scipy out, same format
        given: Any = hists
        coo = type(given.tocoo())  # coo_array or coo_matrix, as the input's family
        Z = coo((to_numpy(vals), (to_numpy(rows), to_numpy(cols))), shape=(k, E))
        return Z.asformat(given.format)
    index = torch.stack([rows, cols])
    Z = torch.sparse_coo_tensor(index, vals, (k, E), is_coalesced=True, check_invariants=False)
    if hists.layout == torch.sparse_coo:
        return Z
    with warnings.catch_warnings():  # torch's notice that its compressed layouts are beta
        warnings.simplefilter("ignore", UserWarning)
        return Z.to_sparse_csc() if hists.layout == torch.sparse_csc else Z.to_sparse_csr()


def _edge_map(merged: Merged) -> Tensor:
    """Return the (n, E') sparse COO matrix of the merged embedding (``Z = H @ map``)."""
    crow, col, val, E = merged
    n = crow.shape[0] - 1
    row = torch.repeat_interleave(torch.arange(n, device=col.device), crow[1:] - crow[:-1])
    index = torch.stack([row, col])
    return torch.sparse_coo_tensor(index, val, (n, E), check_invariants=False).coalesce()


class _Embedding(torch.autograd.Function):
    """The embedding of dense histograms, differentiable at their zero entries too.

    Forward: :func:`_embed` of the nonzeros; backward: ``g @ map.T`` over every entry
    (the map is linear), itself differentiable in ``g``.
    """

    @staticmethod
    def forward(ctx: Any, hists: Tensor, trip: Any, merged: Merged) -> Tensor:
        ctx.merged = merged
        return _embed(trip, merged)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, None, None]:  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        return torch.sparse.mm(_edge_map(ctx.merged), g.T).T, None, None


def _check_totals(totals: list[tuple[Tensor, str]], dtype: torch.dtype) -> None:
    """Every histogram must have the total of the first: raise naming the rows."""
    ref, ref_name = totals[0][0][0], totals[0][1]
    for tot, name in totals:
        gap = (tot - ref).abs()
        bad = gap > mass_rtol(dtype) * torch.maximum(tot.abs(), ref.abs())
        if bool(bad.any()):
            i = int(torch.nonzero(bad)[0])
            raise ValueError(
                "pairwise_tsw needs histograms of equal total mass (the tree W1 of Le et "
                f"al. is balanced); got {ref_name} row 0 of total {float(ref):.10g} and "
                f"{name} row {i} of total {float(tot[i]):.10g}"
            )


def _block_rows(block_size: object, E: int, itemsize: int) -> int:
    if block_size is None:
        return max(1, min(4096, BLOCK_BYTES // max(1, 2 * E * itemsize)))
    return check_positive_int(block_size, "block_size")


def pairwise_tsw(
    hists_s: Any,
    hists_t: Any = None,
    *,
    trees: SupportTrees,
    block_size: int | None = None,
    validate: bool = True,
    verbose: bool = False,
) -> Tensor | np.ndarray:
    r"""Compute the (k, m) matrix of tree-sliced Wasserstein distances between histograms.

    ``D = tsw.pairwise_tsw(H_s, H_t, trees=trees)``: ``D[i, j]`` is the mean over the
    trees of the exact W1 between ``H_s[i]`` and ``H_t[j]`` (histograms over the trees'
    support points) for each tree's path metric, the tree-sliced Wasserstein distance of
    Le et al. (2019). Without ``H_t``, the (k, k) matrix among the rows of ``H_s``
    (symmetric, zero diagonal). Computed from :func:`tree_embedding` as L1 distances; on
    any device. The columns nonzero for many histograms (the top edges) go in blocks of
    rows through ``torch.cdist`` with ``p = 1``; the others (the deep edges of sparse
    histograms) as :math:`|x - y|_1 = |x|_1 + |y|_1 - 2 \sum_e \min(x_e, y_e)`, the
    minima summed only over the pairs of histograms that share the column. The split
    changes the values only by rounding.

    Parameters
    ----------
    hists_s : Tensor (dense or sparse), numpy array or scipy sparse matrix, shape (k, n)
        Non-negative masses on the ``n`` support points of ``trees``.
    hists_t : same, shape (m, n), optional
        The second set; default ``hists_s``.
    trees : SupportTrees
        From :func:`tsw.sample_quadtrees` or :func:`tsw.sample_cluster_trees`.
    block_size : int, optional
        Rows embedded and compared at once (and ``block_size * m`` pairs of shared
        nonzeros summed at once); by default blocks whose dense columns take about 256
        MiB, and chunks of 2**20 pairs. The values depend on it only by rounding. The
        embeddings are never formed densely: their nonzeros are held in memory (about 24
        bytes each), and only the columns that many histograms share go dense, a block
        of rows at a time.
    validate : bool, default True
        Check the values: finite, non-negative, and equal totals for every pair (Le et
        al.'s tree W1 needs equal masses: a row of another total raises, naming it; the
        totals are compared relative to their size, so that the check does not depend on
        their scale).
    verbose : bool, default False
        Show progress (``tqdm`` when installed, else a printed line): the blocks
        embedded, then the steps of the distances (chunks of pairs, blocks of dense
        columns).

    Returns
    -------
    Tensor or numpy array of shape (k, m)
        In the trees' dtype and on their device; numpy for numpy or scipy inputs.
        Differentiable in dense torch histograms that require a gradient (the L1
        distance between linear embeddings: see the notes); sparse ones that require
        a gradient are refused.

    Notes
    -----
    The gradient in ``H_s[i]`` of :math:`\sum_{ij} g_{ij} D_{ij}` is
    :math:`\big(\sum_j g_{ij} \operatorname{sign}(Z^s_i - Z^t_j)\big) M` with
    :math:`Z = H M^\top` the embedding (:func:`tree_embedding`): a subgradient where a
    coordinate ties (``sign(0) = 0``). It is formed in the backward pass from the dense
    embeddings, a block of rows at a time (O(k m E) work, as many as the histograms'
    pairs times the columns): meant for the batches of a training loop, not for whole
    corpora.

    Examples
    --------
    >>> import torch, tsw
    >>> X = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    >>> trees = tsw.sample_quadtrees(X, n_trees=3, seed=0)
    >>> H = torch.eye(3, dtype=torch.float64)
    >>> D = tsw.pairwise_tsw(H, trees=trees)
    >>> D.shape, bool((D == D.T).all()), float(D.diagonal().abs().max())
    (torch.Size([3, 3]), True, 0.0)
    """
    trees = check_trees(trees)
    refuse_tracing("tsw.pairwise_tsw")  # its nonzeros would be recorded as constants
    validate = check_bool(validate, "validate")
    verbose = check_bool(verbose, "verbose")
    numpy = not isinstance(hists_s, Tensor)
    same = hists_t is None
    trip_s = _triplets(hists_s, "hists_s", trees)
    trip_t = trip_s if same else _triplets(hists_t, "hists_t", trees)
    grads = [_wants_grad(h, name) for h, name in ((hists_s, "hists_s"), (hists_t, "hists_t"))]
    if validate:
        totals = [(_check_values(trip_s, "hists_s"), "hists_s")]
        if not same:
            totals.append((_check_values(trip_t, "hists_t"), "hists_t"))
        _check_totals(totals, trees.dtype)
    merged = _merged(trees)
    E = merged[3]
    rows = _block_rows(block_size, E, trees.support.element_size())
    blocks_s = _split(trip_s, rows)
    blocks_t = blocks_s if same else _split(trip_t, rows)

    def embedder(blocks: list) -> Callable[[int], tuple[Tensor, Tensor, Tensor]]:
        return lambda b: embed_entries(blocks[b][1], merged)

    with torch.no_grad():
        out = l1_matrix(
            embedder(blocks_s),
            [(lo, b[3]) for lo, b in blocks_s],
            None if same else embedder(blocks_t),
            [(lo, b[3]) for lo, b in blocks_t],
            E,
            trees.support,
            pair_chunk=None if block_size is None else rows * trip_t[3],
            verbose=verbose,
        )
    if any(grads):
        ht = hists_s if same else hists_t
        parts = (trip_s, trip_t, merged, same, rows)
        out = _PairwiseL1.apply(hists_s, ht, out, parts)
    return to_numpy(out) if numpy else out


def _wants_grad(h: object, name: str) -> bool:
    """Whether autograd records a gradient of histograms ``h``: dense torch ones only."""
    if not (isinstance(h, Tensor) and h.requires_grad and torch.is_grad_enabled()):
        return False
    if h.layout != torch.strided:
        raise ValueError(
            f"pairwise_tsw is differentiable in dense histograms; got a sparse {name} "
            f"(layout {h.layout}) that requires grad: pass {name}.to_dense()"
        )
    return True


#: elements of the (rows, rows, E) signs formed at once in the gradient of pairwise_tsw
SIGN_ELEMENTS = 1 << 22


class _PairwiseL1(torch.autograd.Function):
    r"""``pairwise_tsw``'s matrix, differentiable in the dense histograms.

    Forward: the matrix computed without a graph. Backward: for
    :math:`D_{ij} = \lVert Z^s_i - Z^t_j \rVert_1` with :math:`Z = H M^\top`,
    :math:`\partial L / \partial H^s_i = \big(\sum_j g_{ij} \operatorname{sign}(Z^s_i -
    Z^t_j)\big) M` (and minus the transpose for :math:`H^t`), the signs formed by blocks
    of :data:`SIGN_ELEMENTS`; without a second set, :math:`g + g^\top` weighs the pairs.
    Written in torch operators on ``g``, so that it is itself differentiable.
    """

    @staticmethod
    def forward(ctx: Any, hs: Tensor, ht: Tensor, value: Tensor, parts: Any) -> Tensor:
        ctx.parts = parts
        return value.clone()

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, Tensor | None, None, None]:  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        trip_s, trip_t, merged, same, _ = ctx.parts
        want_s, want_t = ctx.needs_input_grad[0], ctx.needs_input_grad[1] and not same
        Zs = _embed(trip_s, merged)
        Zt = Zs if same else _embed(trip_t, merged)
        weights = g + g.T if same else g
        k, m, E = Zs.shape[0], Zt.shape[0], merged[3]
        step = max(1, int((SIGN_ELEMENTS // max(E, 1)) ** 0.5))
        sums_s: list[Tensor] = []
        sums_t: list[Tensor] = [Zt.new_zeros(min(step, m - j0), E) for j0 in range(0, m, step)]
        for i0 in range(0, k, step):
            acc = Zs.new_zeros(min(step, k - i0), E)
            for b, j0 in enumerate(range(0, m, step)):
                sign = torch.sign(Zs[i0 : i0 + step, None, :] - Zt[None, j0 : j0 + step, :])
                if want_s:
                    acc = acc + torch.einsum(
                        "ij,ije->ie", weights[i0 : i0 + step, j0 : j0 + step], sign
                    )
                if want_t:
                    sums_t[b] = sums_t[b] - torch.einsum(
                        "ij,ije->je", g[i0 : i0 + step, j0 : j0 + step], sign
                    )
            sums_s.append(acc)
        edges = _edge_map(merged)
        grad_s = torch.sparse.mm(edges, torch.cat(sums_s).T).T if want_s else None
        grad_t = torch.sparse.mm(edges, torch.cat(sums_t).T).T if want_t else None
        return grad_s, grad_t, None, None


def _split(
    trip: tuple[Tensor, Tensor, Tensor, int], rows: int
) -> list[tuple[int, tuple[Tensor, Tensor, Tensor, int]]]:
    """Blocks of ``rows`` histograms: (first row, triplets of the block, rows from 0)."""
    r, c, v, k = trip
    order = torch.argsort(r, stable=True)
    r, c, v = r[order], c[order], v[order]
    bounds = torch.searchsorted(r, torch.arange(0, k + rows, rows, device=r.device)).tolist()
    out = []
    for b, lo in enumerate(range(0, k, rows)):
        s, e = bounds[b], bounds[b + 1]
        out.append((lo, (r[s:e] - lo, c[s:e], v[s:e], min(rows, k - lo))))
    return out


def subtree_sums(mass: Tensor, parents: Tensor, depth: Tensor) -> Tensor:
    """Masses of the subtrees of every node, ``mass`` (..., V) on the nodes (differentiable).

    Level by level from the deepest: each level's totals are added to their parents.
    """
    total = mass
    for level in range(int(depth.max()) if depth.numel() else 0, 0, -1):
        nodes = torch.nonzero(depth == level).squeeze(-1)
        total = total.index_add(-1, parents[nodes], total.index_select(-1, nodes))
    return total
