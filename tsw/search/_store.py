r"""A database of histograms and the three stages of the search, on one machine or one shard.

:class:`Model` is what every shard of an index shares: the trees, their merged edge
matrix (:func:`tsw.tree_embedding`'s columns), the support in float64 and the ground
metric. :class:`Store` holds histograms (CSR rows, their global row numbers) and answers
the three stages for its own rows:

* :meth:`Store.stage_one`: the tree-sliced W of Le et al. to every row, as
  :math:`\lVert e(q) \rVert_1 + \lVert e(x) \rVert_1 - 2 \sum_v \min(e(q)_v, e(x)_v)`
  with the minima summed over the coordinates the two embeddings share, through an
  inverted index of the rows' embeddings (coordinate -> rows holding it): a query
  touches the lists of its own coordinates only;
* :meth:`Store.nearest_means`: the ground cost between the query's mean point and
  every row's (the word centroid distance of Kusner et al., a lower bound of W1), from
  the rows' means kept dimension by dimension;
* :meth:`Store.flowtree`: Flowtree (:func:`tsw.pairwise_flowtree`) on given candidates;
* :meth:`Store.exact`: exact W1 (``ot.emd2`` on the pair's supports) on given
  candidates, skipping those whose lower bound (the ground cost between the two
  histograms' means, at most W1 for a cost convex in the difference) exceeds the
  ``k``-th exact value already found.

A value depends only on the query and the row, never on the other rows of the store, so
a sharded database gives every value bit for bit as one store does: the minima of a
(query, row) pair are added in the order of the query's coordinates.
"""

from __future__ import annotations

import copy
import dataclasses
import heapq

import numpy as np
import torch
from torch import Tensor

from tsw.core._plans import numpy_costs
from tsw.core._validation import mass_rtol
from tsw.search._data import Rows
from tsw.support._embedding import _merged, embed_entries
from tsw.support._flowmatch import FlowtreeTrees, flowtree_costs
from tsw.support._pairwise import Inverted, add_minima, invert
from tsw.support._trees import SupportTrees

__all__ = ["Embedded", "Model", "Store", "smallest"]

#: pairs of nonzeros (query coordinate, row holding it) enumerated at once in stage one
PAIR_CHUNK = 2**21
#: a shard's inverted index is kept in segments, merged two by two when the newer is at
#: least half the size of the older (a binary counter: O(log) merges of each row)
MERGE_RATIO = 2
#: relative margin of the lower bound of the exact stage (it skips a candidate only when
#: its bound exceeds the k-th value found by more than rounding)
BOUND_MARGIN = 1e-9
#: the entries of (points, dimensions) of one block of differences in ``Model.costs``
COST_ENTRIES = 2**20
#: the row number of no row while candidates are sorted (after every real one)
BIG = np.iinfo(np.int64).max


@dataclasses.dataclass(frozen=True)
class Embedded:
    """The nonzeros of ``k`` embeddings (rows, coordinates, values, tensors) and their L1 norms."""

    rows: Tensor
    cols: Tensor
    vals: Tensor
    norms: Tensor
    k: int
    means: np.ndarray


class Model:
    """What every shard shares: the trees, the embedding, the support and the ground cost."""

    def __init__(self, trees: SupportTrees, metric: str, p: float) -> None:
        self.trees = trees
        self.merged = _merged(trees)
        self.flow = FlowtreeTrees.of(trees)
        self.points = self.flow.support
        self.metric, self.p = metric, p

    @property
    def n_coords(self) -> int:
        """The number of coordinates of the embedding."""
        return int(self.merged[3])

    def embed(self, rows: Rows) -> Embedded:
        """Return the embeddings' nonzeros of ``rows`` (sorted by row), in the trees' dtype."""
        like = self.trees.support
        with torch.no_grad():
            r, c, v = embed_entries(rows.triplets(like), self.merged)
        norms = like.new_zeros(len(rows)).index_add_(0, r, v)
        return Embedded(r, c, v, norms, len(rows), self.means(rows))

    def means(self, rows: Rows) -> np.ndarray:
        """Return each histogram's mean point (k, d), for the lower bound of the exact stage."""
        if not len(rows):
            return np.zeros((0, self.points.shape[1]))
        start = rows.indptr[:-1]  # no row is empty
        total = np.add.reduceat(rows.val, start)
        return np.add.reduceat(rows.val[:, None] * self.points[rows.idx], start) / total[:, None]

    def centre_costs(self, means_t: np.ndarray, centre: np.ndarray) -> np.ndarray:
        """Return the ground costs (m,) between ``centre`` (d,) and the columns of ``means_t``.

        ``means_t`` (d, m): points by dimension. The terms are summed dimension by
        dimension in order, so each value depends on its own point alone (the same bits
        on every shard, whatever else it holds).
        """
        acc = np.zeros(means_t.shape[1])
        square = self.metric == "sqeuclidean" or self.p == 2.0
        for j in range(means_t.shape[0]):
            t = means_t[j] - centre[j]
            acc += t * t if square else np.abs(t) ** self.p
        if self.metric == "sqeuclidean":
            return acc
        return np.sqrt(acc) if self.p == 2.0 else acc ** (1.0 / self.p)

    def costs(self, xs: np.ndarray, xt: np.ndarray) -> np.ndarray:
        """Return the (a, b) ground costs between the points ``xs`` and ``xt``.

        From the differences (no cancellation), a block of ``COST_ENTRIES`` at a time.
        """
        a, b = xs.shape[0], xt.shape[0]
        out = np.empty((a, b))
        step = max(1, COST_ENTRIES // max(1, a * xs.shape[1]))
        for lo in range(0, b, step):
            diff = (xs[:, None, :] - xt[None, lo : lo + step, :]).reshape(-1, xs.shape[1])
            out[:, lo : lo + step] = numpy_costs(diff, self.metric, self.p).reshape(a, -1)
        return out


@dataclasses.dataclass
class Segment:
    """Rows ``lo .. lo + n`` of a store as an inverted index of their embeddings.

    ``inv``: their nonzeros sorted by coordinate (:func:`tsw.support._pairwise.invert`;
    rows within the segment, in increasing order within a coordinate); ``norms``: their
    embeddings' L1 norms.
    """

    lo: int
    n: int
    inv: Inverted
    norms: Tensor

    @classmethod
    def of(cls, lo: int, emb: Embedded, C: int) -> Segment:
        return cls(lo, emb.k, invert((emb.rows, emb.cols, emb.vals), C), emb.norms)

    def merge(self, other: Segment) -> Segment:
        """Return this segment then ``other`` (the next rows) as one segment."""
        C = self.inv.count.shape[0]
        cols = torch.arange(C, device=self.norms.device)
        nonzeros = (
            torch.cat([self.inv.rows, other.inv.rows + self.n]),
            torch.cat(
                [cols.repeat_interleave(self.inv.count), cols.repeat_interleave(other.inv.count)]
            ),
            torch.cat([self.inv.vals, other.inv.vals]),
        )  # a stable sort by coordinate keeps this segment's rows before the other's
        inv = invert(nonzeros, C)
        return Segment(self.lo, self.n + other.n, inv, torch.cat([self.norms, other.norms]))

    @property
    def nbytes(self) -> int:
        inv = self.inv
        parts = (inv.rows, inv.vals, inv.first, inv.count, self.norms)
        return sum(t.numel() * t.element_size() for t in parts)


def smallest(vals: np.ndarray, gids: np.ndarray, c: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the ``c`` smallest of each row of ``vals`` (q, m) by (value, row number), sorted.

    ``gids`` (q, m) are the row numbers. NaN values (no candidate) are never chosen: a
    row with fewer than ``c`` values is completed with ``inf`` and row number -1.
    """
    q, m = vals.shape
    vals = np.where(np.isnan(vals), np.inf, vals)
    gids = np.where(np.isinf(vals), BIG, gids)
    if c < m:
        part = np.argpartition(vals, c - 1, axis=1)[:, :c]
        kth = np.take_along_axis(vals, part, 1).max(1)
        need = c - (vals < kth[:, None]).sum(1)
        tied = (vals == kth[:, None]).sum(1)
        for i in np.flatnonzero(tied > need):  # ties at the c-th value: lowest numbers
            at = np.flatnonzero(vals[i] == kth[i])
            at = at[np.argsort(gids[i, at], kind="stable")[: need[i]]]
            part[i] = np.concatenate([np.flatnonzero(vals[i] < kth[i]), at])
        vals, gids = np.take_along_axis(vals, part, 1), np.take_along_axis(gids, part, 1)
    elif c > m:
        vals = np.concatenate([vals, np.full((q, c - m), np.inf)], 1)
        gids = np.concatenate([gids, np.full((q, c - m), BIG)], 1)
    order = np.lexsort((gids, vals), axis=1)
    vals, gids = np.take_along_axis(vals, order, 1), np.take_along_axis(gids, order, 1)
    return vals, np.where(gids == BIG, -1, gids)


class Store:
    """Histograms with their global row numbers, and the stages of a search on them."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.rows = Rows.empty()
        self.gids = np.zeros(0, np.int64)
        self.means_t = np.zeros((model.points.shape[1], 0))  # the rows' means, (d, rows)
        self.segments: list[Segment] = []

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def nbytes(self) -> int:
        """Bytes of the rows, the means and the inverted index."""
        seg = sum(s.nbytes for s in self.segments)
        return self.rows.nbytes + self.gids.nbytes + self.means_t.nbytes + seg

    def appended(self, rows: Rows, gids: np.ndarray) -> Store:
        """Return a new store holding these rows then ``rows`` (global numbers ``gids``).

        The arrays of this store are shared, never changed: a store is a value.
        """
        new = copy.copy(self)
        lo = len(self)
        new.rows = self.rows.concat(rows)
        new.gids = np.concatenate([self.gids, gids])
        new.means_t = np.concatenate([self.means_t, self.model.means(rows).T], 1)
        segments = [*self.segments, Segment.of(lo, self.model.embed(rows), self.model.n_coords)]
        while len(segments) > 1 and MERGE_RATIO * segments[-1].n >= segments[-2].n:
            last = segments.pop()
            segments[-1] = segments[-1].merge(last)
        new.segments = segments
        return new

    def local(self, gids: np.ndarray) -> np.ndarray:
        """Return the local rows of global numbers ``gids`` (-1 for those not held here)."""
        pos = np.searchsorted(self.gids, gids)
        pos = np.minimum(pos, max(len(self) - 1, 0))
        held = (self.gids[pos] == gids) if len(self) else np.zeros(gids.shape, bool)
        return np.where(held, pos, -1)

    # ----------------------------------------------------------------------- stage one

    def stage_one(
        self, q: Embedded, c: int, exclude: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return the ``c`` rows of smallest tree-sliced W to each query: values, row numbers.

        ``exclude`` (k,): a global row number left out for each query (-1: none).
        """
        like = self.model.trees.support
        s = (q.rows, q.cols, q.vals)
        out_v, out_g = [np.zeros((q.k, 0))], [np.zeros((q.k, 0), np.int64)]
        for seg in self.segments:
            acc = like.new_zeros(q.k, seg.n)
            add_minima(acc, s, seg.inv, PAIR_CHUNK)
            val = acc.mul_(-2.0).add_(q.norms[:, None]).add_(seg.norms[None, :]).clamp_(min=0.0)
            v = val.cpu().to(torch.float64).numpy()
            g = np.broadcast_to(self.gids[seg.lo : seg.lo + seg.n], v.shape)
            if exclude is not None:
                v = np.where(g == exclude[:, None], np.nan, v)
            v, g = smallest(v, g, c)
            out_v.append(v)
            out_g.append(g)
        return smallest(np.concatenate(out_v, 1), np.concatenate(out_g, 1), c)

    def nearest_means(
        self, q: Embedded, c: int, exclude: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return the ``c`` rows whose means are nearest each query's: costs, row numbers.

        The cost is the ground cost between the two means (:meth:`Model.centre_costs`);
        ``exclude`` as in :meth:`stage_one`.
        """
        v = np.empty((q.k, len(self)))
        for i in range(q.k):
            v[i] = self.model.centre_costs(self.means_t, q.means[i])
        g = np.broadcast_to(self.gids, v.shape)
        if exclude is not None:
            v = np.where(g == exclude[:, None], np.nan, v)
        return smallest(v, g, c)

    # ----------------------------------------------------------------------- reranks

    def flowtree(self, q: Rows, cand: np.ndarray) -> np.ndarray:
        """Return the Flowtree values (k, c) of the candidates held here (NaN for the others)."""
        out = np.full(cand.shape, np.nan)
        model = self.model
        rtol = mass_rtol(model.trees.dtype)
        for i in range(len(q)):
            loc = self.local(cand[i])
            here = np.flatnonzero(loc >= 0)
            if not here.size:
                continue
            docs = self.rows.take(loc[here])
            query = q.take(np.array([i]))
            vals = flowtree_costs(
                model.flow,
                (query.indptr, query.idx, query.val),
                (docs.indptr, docs.idx, docs.val),
                metric=model.metric,
                p=model.p,
                rtol=rtol,
            )
            out[i, here] = vals[0]
        return out

    def exact(self, q: Rows, cand: np.ndarray, k: int) -> np.ndarray:
        """Return exact W1 (k', c) for the candidates held here that can be among the ``k`` nearest.

        The candidates are taken in the order given (the previous stage's); one whose
        lower bound exceeds the ``k``-th value found so far is skipped (NaN). The bounds,
        each at most W1: the ground cost between the two means (for a cost convex in the
        difference, by Jensen's inequality), then, from the pair's cost matrix, the two
        relaxed problems of Kusner et al. (each point's mass to the other side's nearest
        point), before the LP itself.
        """
        import ot

        out = np.full(cand.shape, np.nan)
        model = self.model
        q_means = model.means(q)
        for i in range(len(q)):
            loc = self.local(cand[i])
            here = np.flatnonzero(loc >= 0)
            if not here.size:
                continue
            centre = model.centre_costs(self.means_t[:, loc[here]], q_means[i])
            sq, a = q.row(i)
            docs = self.rows.take(loc[here])
            words, pos = np.unique(docs.idx, return_inverse=True)
            C = model.costs(model.points[sq], model.points[words])  # all candidates at once
            best: list[float] = []  # the k smallest values found, negated (a max-heap)
            for j in range(here.size):
                if len(best) == k and centre[j] * (1 - BOUND_MARGIN) > -best[0]:
                    continue
                lo, hi = docs.indptr[j], docs.indptr[j + 1]
                M, b = C[:, pos[lo:hi]], docs.val[lo:hi]
                if len(best) == k:
                    relaxed = max(a @ M.min(1), M.min(0) @ b)
                    if relaxed * (1 - BOUND_MARGIN) > -best[0]:
                        continue
                value = float(ot.emd2(a, b, M, check_marginals=False, center_dual=False))
                out[i, here[j]] = value
                if len(best) < k:
                    heapq.heappush(best, -value)
                elif value < -best[0]:
                    heapq.heapreplace(best, -value)
        return out


def rows_of(store: Store, lo: int, hi: int) -> tuple[Rows, np.ndarray]:
    """Return local rows ``lo .. hi`` of a store and their global numbers (k-NN queries)."""
    idx = np.arange(lo, min(hi, len(store)))
    return store.rows.take(idx), store.gids[idx]
