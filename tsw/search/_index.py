r"""``tsw.W1Index``: nearest neighbours under W1 between histograms on one support.

The cascade of Backurs, Dong, Indyk, Razenshteyn and Wagner (ICML 2020), after Kusner
et al.'s pruning (ICML 2015): the tree-sliced W ranks the whole database through an
inverted index of the tree embeddings, and so does the cost between the histograms'
means; Flowtree re-ranks the union of their shortlists, and exact W1 orders the last
one. The machinery is in :mod:`tsw.search._store` (a database and the
stages on it) and :mod:`tsw.search._cascade` (the steps of a search).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tsw.core._plans import METRICS, check_metric
from tsw.core._progress import Progress
from tsw.core._random import check_seed, refuse_tracing
from tsw.core._validation import check_bool, check_choice, check_positive_int
from tsw.search._cascade import Local, Plan, check_plan, run
from tsw.search._data import Query, Rows, read_hists
from tsw.search._store import Model, Store
from tsw.support._cluster import sample_cluster_trees
from tsw.support._fit import fit_edge_lengths
from tsw.support._trees import SupportTrees, sample_quadtrees

__all__ = ["Options", "W1Index", "answer", "build_model", "check_k", "knn_blocks"]

#: queries searched at once (stage one holds a (queries, rows) block of values)
QUERY_BLOCK = 32
#: histograms embedded and indexed at once by ``add`` (one step of its progress bar)
ADD_BLOCK = 2048
#: tree builders
TREES = ("quadtree", "cluster")


def build_model(
    support: Any,
    n_trees: object,
    tree: object,
    fit_lengths: object,
    metric: object,
    seed: object,
) -> Model:
    """Check the options and build the trees (and fit their lengths) on ``support``."""
    n_trees = check_positive_int(n_trees, "n_trees")
    tree = check_choice(tree, "tree", TREES)
    fit_lengths = check_bool(fit_lengths, "fit_lengths")
    metric = check_choice(metric, "metric", tuple(m for m in METRICS if m != "minkowski"))
    metric, p = check_metric(metric, 2.0)
    seed = check_seed(seed)
    sample = sample_quadtrees if tree == "quadtree" else sample_cluster_trees
    trees: SupportTrees = sample(support, n_trees, seed=seed)
    if fit_lengths:
        trees = fit_edge_lengths(trees, metric=metric, seed=seed)
    return Model(trees, metric, p)


def check_k(k: object, size: int) -> int:
    """``k`` neighbours out of ``size`` rows."""
    k = check_positive_int(k, "k")
    if size == 0:
        raise ValueError("the index is empty: add histograms before searching it")
    if k > size:
        raise ValueError(f"k must be at most the number of indexed histograms ({size}); got k={k}")
    return k


def answer(query: Query, dist: np.ndarray, ids: np.ndarray, like: Tensor) -> tuple[Any, Any]:
    """Return ``(D, I)`` as the caller gave the queries: numpy, or tensors like ``like``."""
    if query.one:
        dist, ids = dist[0], ids[0]
    if query.numpy:
        return dist.astype(torch.empty(0, dtype=like.dtype).numpy().dtype), ids
    return torch.from_numpy(dist).to(like.device, like.dtype), torch.from_numpy(ids).to(like.device)


def knn_blocks(size: int) -> list[tuple[int, int]]:
    """Return the blocks (first, last + 1) of ``size`` queries searched at once."""
    return [(lo, min(lo + QUERY_BLOCK, size)) for lo in range(0, size, QUERY_BLOCK)]


class Options:
    """What :class:`W1Index` and the Dask index share: the checked options, the trees, the total."""

    _plan: Plan
    _model: Model
    verbose: bool
    total: float | None

    def _configure(
        self,
        support: Any,
        n_trees: object,
        tree: object,
        fit_lengths: object,
        rerank: object,
        candidates: object,
        metric: object,
        seed: object,
        verbose: object,
    ) -> None:
        self._plan = check_plan(rerank, candidates)
        self.verbose = check_bool(verbose, "verbose")
        self._model = build_model(support, n_trees, tree, fit_lengths, metric, seed)
        self.total = None

    @property
    def trees(self) -> SupportTrees:
        """The trees of stage one and Flowtree."""
        return self._model.trees

    def _read(self, hists: Any, name: str) -> Query:
        return read_hists(hists, name, self.trees, self.total)

    def _added(self, query: Query) -> None:
        """Record the total mass of the index from its first histograms."""
        if self.total is None:
            self.total = float(query.totals[0])

    def _knn_k(self, k: object, size: int) -> int:
        """``k`` neighbours of each of ``size`` rows among the others."""
        return check_k(k, size - 1) if size else check_k(k, 0)


class W1Index(Options):
    r"""Nearest neighbours under exact W1 between histograms on one support.

    References: [Backurs2020s]_, [Kusner2015]_, [Le2019s]_.

    ``index = tsw.W1Index(support, seed=0)`` over the ``n`` points ``support`` (n, d) (a
    vocabulary's word vectors, a pixel grid); ``index.add(hists)`` stores histograms
    (k, n) on those points; ``D, I = index.search(queries, k)`` returns, for each query,
    the row numbers ``I`` (q, k) of its ``k`` nearest stored histograms under W1 with the
    ground cost ``metric``, nearest first, and their distances ``D`` (q, k). Row numbers
    count the histograms in the order they were added, from 0.

    A search is a cascade. Stage one ranks every stored histogram by the tree-sliced
    Wasserstein distance of Le et al. on ``n_trees`` trees built on the support, as an L1
    distance between embeddings (:func:`tsw.tree_embedding`):

    .. math::

        \lVert e(q) - e(x) \rVert_1 = \lVert e(q) \rVert_1 + \lVert e(x) \rVert_1
            - 2 \sum_v \min(e(q)_v, e(x)_v),

    the sum over the coordinates both embeddings hold, read from an inverted index
    (coordinate -> histograms holding it): a query touches only the lists of its own
    coordinates. Stage one also ranks every stored histogram by the ground cost
    between its mean point and the query's (the word centroid distance of Kusner et
    al., a lower bound of W1, and the better filter where the trees are coarse, as on
    word vectors of tens of dimensions). The best ``c1`` by each go, together, to
    Flowtree (:func:`tsw.pairwise_flowtree` on the same trees: the trees' optimal flow
    charged at the ground costs, an upper bound of W1), whose best ``c2`` go to exact
    W1, ``ot.emd2`` on the two histograms' supports. The exact stage takes them in
    Flowtree's order and skips those whose lower bound (the ground cost between the two
    means, at most W1 for a cost convex in the difference, then the relaxed problems of
    Kusner et al.) exceeds the ``k``-th value found: the answer is the ``k`` smallest
    exact values among the ``c2`` candidates, with fewer LPs.

    Parameters
    ----------
    support : Tensor or numpy array of shape (n, d)
        The points the histograms live on; its dtype and device are the index's.
    n_trees : int, default 10
        Trees of stage one (and of Flowtree).
    tree : {"quadtree", "cluster"}, default "quadtree"
        Random-shift quadtrees (:func:`tsw.sample_quadtrees`) or farthest-point
        clustering trees (:func:`tsw.sample_cluster_trees`, 4 clusters, depth 5).
    fit_lengths : bool, default False
        Fit the trees' edge lengths to the ground metric (:func:`tsw.fit_edge_lengths`).
    rerank : {"exact", "flowtree", None}, default "exact"
        The last stage, and so the distances returned: exact W1, Flowtree's values, or
        the tree-sliced values of stage one.
    candidates : int or (int, int), optional
        The shortlists. With ``rerank="exact"``: a pair ``(c1, c2)`` (stage one keeps
        its best ``c1`` by each of its two scores for Flowtree, Flowtree keeps ``c2``
        of them for exact W1), or one int ``c`` (stage one's best ``c`` by each go
        straight to exact W1). With ``rerank="flowtree"``: an int ``c1``. Not with
        ``rerank=None``. A shortlist shorter than ``k`` is taken as ``k``. By default
        (None) the shortlists grow with the number ``N`` of stored histograms, as the
        exact neighbours' ranks under the cheaper stages do:
        :math:`c_2 = \max(3k, \lceil \sqrt{N}/2 \rceil)` and
        :math:`c_1 = \max(20k, 2 c_2)`, read at each search; for ``k = 10``: (200, 30)
        up to 3,600 histograms, (200, 71) at 20,000, (224, 112) at 50,000. Longer
        shortlists give a higher recall of the exact neighbours for more time (the
        exact stage's LPs cost most): the docs' search page gives the measured recall
        for several.
    metric : {"euclidean", "sqeuclidean", "cityblock"}, default "euclidean"
        The ground cost of W1 (and of Flowtree); the trees are built in the Euclidean
        geometry whatever it is.
    seed : int, optional
        Seed of the trees (and of the pairs of the edge-length fit).
    verbose : bool, default False
        Show progress bars in :meth:`add`, :meth:`search` and :meth:`knn_graph`.

    Attributes
    ----------
    trees : SupportTrees
        The trees of stage one and Flowtree.
    total : float or None
        The total mass every histogram of the index has (that of the first added).

    Notes
    -----
    Every histogram must have the total mass of the first one added (W1 is balanced):
    normalise bags of words to frequencies. Ties between equal distances are broken by
    row number, so an answer is deterministic. The index is pickled with :mod:`pickle`
    (and :meth:`save` / :meth:`load`); a loaded index answers as the saved one did.
    Memory: each histogram's nonzeros and the nonzeros of its embedding (about 16 bytes
    each in float64); :attr:`nbytes` gives the total.

    References
    ----------
    .. [Backurs2020s] A. Backurs, Y. Dong, P. Indyk, I. Razenshteyn, T. Wagner. Scalable
       nearest neighbor search for optimal transport. ICML 2020.
    .. [Kusner2015] M. Kusner, Y. Sun, N. Kolkin, K. Weinberger. From word embeddings to
       document distances. ICML 2015.
    .. [Le2019s] T. Le, M. Yamada, K. Fukumizu, M. Cuturi. Tree-sliced variants of
       Wasserstein distances. NeurIPS 2019.

    Examples
    --------
    >>> import numpy as np, ot, tsw
    >>> rng = np.random.default_rng(0)
    >>> support = rng.standard_normal((50, 2))
    >>> hists = rng.random((100, 50)) * (rng.random((100, 50)) < 0.2)
    >>> hists[:, 0] += 0.01
    >>> hists /= hists.sum(1, keepdims=True)
    >>> index = tsw.W1Index(support, seed=0)
    >>> index.add(hists)
    >>> D, I = index.search(hists[:2], k=3)
    >>> I[:, 0], D[:, 0]  # each query is its own nearest neighbour
    (array([0, 1]), array([0., 0.]))
    >>> q, x = hists[0] > 0, hists[I[0, 1]] > 0
    >>> M = ot.dist(support[q], support[x], metric="euclidean")
    >>> bool(np.isclose(D[0, 1], ot.emd2(hists[0][q], hists[I[0, 1]][x], M)))
    True
    """

    def __init__(
        self,
        support: Any,
        *,
        n_trees: int = 10,
        tree: str = "quadtree",
        fit_lengths: bool = False,
        rerank: str | None = "exact",
        candidates: int | tuple[int, int] | None = None,
        metric: str = "euclidean",
        seed: Any = None,
        verbose: bool = False,
    ) -> None:
        refuse_tracing("tsw.W1Index")
        self._configure(
            support, n_trees, tree, fit_lengths, rerank, candidates, metric, seed, verbose
        )
        self._store = Store(self._model)

    # ----------------------------------------------------------------------- state

    def __len__(self) -> int:
        return len(self._store)

    @property
    def nbytes(self) -> int:
        """Bytes held by the stored histograms and their inverted index."""
        return self._store.nbytes

    def __repr__(self) -> str:
        plan = self._plan
        return (
            f"W1Index(n={len(self)}, n_points={self.trees.n_points}, trees={len(self.trees)} "
            f"{self.trees.kind}, rerank={plan.rerank!r}, candidates={plan.label}, "
            f"metric={self._model.metric!r})"
        )

    # ----------------------------------------------------------------------- add, search

    def add(self, hists: Any) -> None:
        """Store histograms, numbered after those already stored.

        Parameters
        ----------
        hists : Tensor (dense or sparse), numpy array or scipy sparse matrix
            One histogram (n,) or many (k, n) on the support: non-negative, finite,
            no zero row, each of the index's total mass. Torch tensors must have the
            support's dtype and device; numpy and scipy inputs are converted.

        Raises
        ------
        TypeError
            For another type or dtype.
        ValueError
            For another shape, device, negative or non-finite values, a zero row or
            another total mass. The index is unchanged.
        """
        refuse_tracing("tsw.W1Index.add")
        query = self._read(hists, "hists")
        rows, store = query.rows, self._store
        with Progress(self.verbose, len(rows), "W1Index.add", unit="hist") as bar:
            for lo in range(0, len(rows), ADD_BLOCK):
                hi = min(lo + ADD_BLOCK, len(rows))
                gids = np.arange(len(store), len(store) + hi - lo)
                store = store.appended(rows.take(np.arange(lo, hi)), gids)
                bar.update(hi - lo)
        self._store = store
        self._added(query)

    def search(self, queries: Any, k: int) -> tuple[Any, Any]:
        """Return the ``k`` nearest stored histograms of each query, nearest first.

        Parameters
        ----------
        queries : Tensor (dense or sparse), numpy array or scipy sparse matrix
            One histogram (n,) or several (q, n), as :meth:`add` takes them.
        k : int
            Neighbours per query, at most ``len(index)``.

        Returns
        -------
        D : ndarray or Tensor of shape (q, k) (or (k,) for one query)
            The distances (exact W1, Flowtree or tree-sliced values after ``rerank``),
            non-decreasing along each row; numpy for numpy or scipy queries, else a
            tensor in the support's dtype and on its device.
        I : ndarray or Tensor of shape (q, k) (or (k,)), int64
            The row numbers of the neighbours; equal distances in increasing row number.
        """
        refuse_tracing("tsw.W1Index.search")
        k = check_k(k, len(self))
        query = self._read(queries, "queries")
        dist, ids = self._run(query.rows, k, None, "W1Index.search")
        return answer(query, dist, ids, self.trees.support)

    def knn_graph(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Return the ``k`` nearest other stored histograms of every stored histogram.

        Returns
        -------
        D, I : ndarray of shape (len(index), k)
            Row ``i``: the distances and row numbers of the ``k`` nearest histograms to
            histogram ``i`` among the others, as :meth:`search` orders them.
        """
        refuse_tracing("tsw.W1Index.knn_graph")
        k = self._knn_k(k, len(self))
        rows = self._store.rows
        return self._run(rows, k, self._store.gids, "W1Index.knn_graph")

    def _run(
        self, rows: Rows, k: int, exclude: np.ndarray | None, desc: str
    ) -> tuple[np.ndarray, np.ndarray]:
        ex = Local([self._store])
        dist = np.zeros((len(rows), k))
        ids = np.zeros((len(rows), k), np.int64)
        with Progress(self.verbose, len(rows), desc, unit="query") as bar:
            for lo, hi in knn_blocks(len(rows)):
                block = rows.take(np.arange(lo, hi))
                skip = None if exclude is None else exclude[lo:hi]
                dist[lo:hi], ids[lo:hi] = run(
                    ex, self._model, self._plan, block, k, len(self), skip
                )
                bar.update(hi - lo)
        return dist, ids

    # ----------------------------------------------------------------------- files

    def save(self, path: str | Path) -> None:
        """Write the index to ``path`` (a pickle: load only files you trust)."""
        with open(path, "wb") as f:
            pickle.dump(self, f, protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def load(cls, path: str | Path) -> W1Index:
        """Read an index written by :meth:`save` (unpickles: only files you trust)."""
        with open(path, "rb") as f:
            index = pickle.load(f)
        if not isinstance(index, cls):
            raise TypeError(f"{path} holds a {type(index).__name__}, not a {cls.__name__}")
        return index
