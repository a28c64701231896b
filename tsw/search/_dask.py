"""``tsw.DaskW1Index``: the W1 search index sharded over the workers of a Dask cluster.

Each worker holds one shard (a :class:`tsw.search._store.Store`, kept as a future on it);
a search runs :func:`tsw.search._cascade.run`, the steps of :class:`tsw.W1Index`, as tasks:
every stage on every shard, the merges as tasks fed by the shards' results, so that the
answer is the single-machine one, value for value (every value depends only on its
query and row; the merges keep the smallest, ties by row number). Dask is an optional
import (``pip install torch-tsw[dask]``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tsw.core._progress import Progress
from tsw.core._random import refuse_tracing
from tsw.core._validation import check_positive_int
from tsw.search._cascade import run
from tsw.search._index import Options, answer, check_k, knn_blocks
from tsw.search._store import Model, Store, rows_of

__all__ = ["DaskW1Index"]


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as err:
        raise ImportError(
            "tsw.DaskW1Index needs dask.distributed: pip install 'torch-tsw[dask]'"
        ) from err
    return distributed


class _Cluster:
    """The executor of :func:`run` on a cluster: a step on every shard, where it lives."""

    def __init__(self, client: Any, shards: list[Any], workers: list[str]) -> None:
        self.client, self.shards, self.workers = client, shards, workers

    def each(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        return [
            self.client.submit(fn, shard, *args, workers=[w], pure=False)
            for shard, w in zip(self.shards, self.workers, strict=True)
        ]

    def one(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.client.submit(fn, *args, pure=False)


def _shares(sizes: list[int], n: int) -> np.ndarray:
    """How many of ``n`` new rows each shard takes: the smallest fill up first (water-filling)."""
    have = np.asarray(sizes, dtype=np.int64)
    lo, hi = int(have.min()), int(have.max()) + n
    while lo < hi:  # the lowest level L that n rows fill: sum(max(L - size, 0)) >= n
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if np.maximum(mid - have, 0).sum() >= n else (mid + 1, hi)
    share = np.maximum(lo - 1 - have, 0)
    short = np.flatnonzero(have + share < lo)[: n - int(share.sum())]
    share[short] += 1
    return share


def _item(pair: tuple[Any, Any], i: int) -> Any:
    return pair[i]


def _empty_store(model: Model) -> Store:
    return Store(model)


def _size(store: Store) -> int:
    return len(store)


def _nbytes(store: Store) -> int:
    return store.nbytes


class DaskW1Index(Options):
    """:class:`tsw.W1Index` with its database sharded over the workers of a Dask cluster.

    ``index = tsw.DaskW1Index(client, support, seed=0)`` takes a
    ``dask.distributed.Client`` and the options of :class:`tsw.W1Index`; ``add``,
    ``search``, ``knn_graph`` and ``len`` behave as there. The trees are built once (on
    the client's machine, from the same options and seed as :class:`tsw.W1Index`) and
    sent to every worker; each worker holds a shard of the histograms (``n_shards``
    shards, one per worker by default, filled in turn so that they stay balanced), and
    embeds and indexes its own. A search runs the cascade's stages on every shard and
    merges their shortlists between the stages, so it returns exactly the answer of a
    :class:`tsw.W1Index` with the same options and seed holding the same histograms.
    Queries are searched in blocks, all blocks at once over the cluster; so is the
    k-NN graph of the whole database (:meth:`knn_graph`), whose queries are read where
    the shards hold them.

    Parameters
    ----------
    client : dask.distributed.Client
        The cluster's client.
    support : Tensor or numpy array of shape (n, d)
        As :class:`tsw.W1Index`.
    n_shards : int, optional
        Shards, one per worker in turn; by default the number of workers at creation.
    **options
        ``n_trees``, ``tree``, ``fit_lengths``, ``rerank``, ``candidates``, ``metric``,
        ``seed``, ``verbose``: as :class:`tsw.W1Index`.

    Notes
    -----
    The shards live in the workers' memory as Dask futures: a worker lost takes its shard
    with it. ``pip install torch-tsw[dask]`` installs Dask.

    Examples
    --------
    On a cluster (``dask scheduler`` and ``dask worker tcp://...`` on the machines)::

        from dask.distributed import Client
        client = Client("tcp://scheduler-address:8786")
        index = tsw.DaskW1Index(client, word_vectors, seed=0)
        index.add(bags_of_words)  # sharded over the workers
        D, I = index.search(queries, k=10)  # = tsw.W1Index(word_vectors, seed=0)'s answer
        D_all, I_all = index.knn_graph(k=10)
    """

    def __init__(
        self,
        client: Any,
        support: Any,
        *,
        n_shards: int | None = None,
        n_trees: int = 10,
        tree: str = "quadtree",
        fit_lengths: bool = False,
        rerank: str | None = "exact",
        candidates: int | tuple[int, int] | None = None,
        metric: str = "euclidean",
        seed: Any = None,
        verbose: bool = False,
    ) -> None:
        refuse_tracing("tsw.DaskW1Index")
        distributed = _distributed()
        if not isinstance(client, distributed.Client):
            raise TypeError(
                f"client must be a dask.distributed.Client; got {type(client).__name__}"
            )
        self._configure(
            support, n_trees, tree, fit_lengths, rerank, candidates, metric, seed, verbose
        )
        workers = sorted(client.scheduler_info()["workers"])
        if not workers:
            raise ValueError("client has no workers: start the cluster's workers first")
        count = len(workers) if n_shards is None else check_positive_int(n_shards, "n_shards")
        self.client: Any = client
        self._workers = [workers[i % len(workers)] for i in range(count)]
        self._model_future = client.scatter(self._model, broadcast=True)
        self._shards = [
            client.submit(_empty_store, self._model_future, workers=[w], pure=False)
            for w in self._workers
        ]
        self._sizes = [0] * count

    def __len__(self) -> int:
        return sum(self._sizes)

    @property
    def n_shards(self) -> int:
        """The number of shards."""
        return len(self._shards)

    @property
    def nbytes(self) -> int:
        """Bytes held by the shards (summed over the workers)."""
        futures = [self.client.submit(_nbytes, s, workers=[w], pure=False)
                   for s, w in zip(self._shards, self._workers, strict=True)]  # fmt: skip
        return int(sum(self.client.gather(futures)))

    def __repr__(self) -> str:
        return (
            f"DaskW1Index(n={len(self)}, shards={self.n_shards}, n_points={self.trees.n_points}, "
            f"trees={len(self.trees)} {self.trees.kind}, rerank={self._plan.rerank!r}, "
            f"candidates={self._plan.label})"
        )

    def _executor(self) -> _Cluster:
        return _Cluster(self.client, self._shards, self._workers)

    def add(self, hists: Any) -> None:
        """Store histograms over the shards, numbered after those already stored.

        As :meth:`tsw.W1Index.add`: checked on the client first; a refused call leaves
        the index unchanged (and so does a task that fails on a worker).
        """
        refuse_tracing("tsw.DaskW1Index.add")
        query = self._read(hists, "hists")
        rows, n = query.rows, len(query.rows)
        share = _shares(self._sizes, n)
        bounds = np.concatenate([[0], np.cumsum(share)])
        new, start = list(self._shards), len(self)
        with Progress(self.verbose, n, "DaskW1Index.add", unit="hist") as bar:
            pending = []
            for s, w in enumerate(self._workers):
                lo, hi = int(bounds[s]), int(bounds[s + 1])
                if hi == lo:
                    continue
                part = self.client.scatter(rows.take(np.arange(lo, hi)), workers=[w])
                gids = np.arange(start + lo, start + hi)
                new[s] = self.client.submit(Store.appended, self._shards[s], part, gids,
                                            workers=[w], pure=False)  # fmt: skip
                pending.append((new[s], hi - lo))
            for future, count in pending:
                future.result()  # raises here if a worker failed: the index is unchanged
                bar.update(count)
        self._shards = new
        self._sizes = [self._sizes[s] + int(share[s]) for s in range(len(share))]
        self._added(query)

    def search(self, queries: Any, k: int) -> tuple[Any, Any]:
        """Return the ``k`` nearest stored histograms of each query (:meth:`tsw.W1Index.search`)."""
        refuse_tracing("tsw.DaskW1Index.search")
        k = check_k(k, len(self))
        query = self._read(queries, "queries")
        rows = query.rows
        ex, size = self._executor(), len(self)
        jobs = []
        for lo, hi in knn_blocks(len(rows)):
            block = self.client.scatter(rows.take(np.arange(lo, hi)))
            found = run(ex, self._model_future, self._plan, block, k, size)
            jobs.append((np.arange(lo, hi), found))
        dist, ids = self._collect(jobs, len(rows), k, "DaskW1Index.search")
        return answer(query, dist, ids, self.trees.support)

    def knn_graph(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Return the ``k`` nearest others of each stored histogram (:meth:`W1Index.knn_graph`).

        Each shard's histograms are the queries of their blocks, read on its worker; all
        the blocks run at once over the cluster.
        """
        refuse_tracing("tsw.DaskW1Index.knn_graph")
        k = self._knn_k(k, len(self))
        ex, jobs, size = self._executor(), [], len(self)
        for s, w in enumerate(self._workers):
            for lo, hi in knn_blocks(self._sizes[s]):
                got = self.client.submit(rows_of, self._shards[s], lo, hi, workers=[w], pure=False)
                block = self.client.submit(_item, got, 0, workers=[w], pure=False)
                gids = self.client.submit(_item, got, 1, workers=[w], pure=False)
                jobs.append((gids, run(ex, self._model_future, self._plan, block, k, size, gids)))
        return self._collect(jobs, len(self), k, "DaskW1Index.knn_graph")

    def _collect(
        self, jobs: list[tuple[Any, Any]], n: int, k: int, desc: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """Gather the blocks' answers into (n, k) arrays, each block at its rows."""
        distributed = _distributed()
        dist = np.zeros((n, k))
        ids = np.zeros((n, k), np.int64)
        where = {id(fut): rows for rows, fut in jobs}
        with Progress(self.verbose, n, desc, unit="query") as bar:
            for fut in distributed.as_completed([fut for _, fut in jobs]):
                rows = where[id(fut)]
                if not isinstance(rows, np.ndarray):
                    rows = rows.result()
                dist[rows], ids[rows] = fut.result()
                bar.update(len(rows))
        return dist, ids

    def shard_sizes(self) -> list[int]:
        """Return the number of histograms of each shard (read on the workers)."""
        futures = [self.client.submit(_size, s, workers=[w], pure=False)
                   for s, w in zip(self._shards, self._workers, strict=True)]  # fmt: skip
        return [int(x) for x in self.client.gather(futures)]
