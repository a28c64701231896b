"""The cascade of a search, written once for one store and for shards on a cluster.

A search of a block of queries is a few steps, each either run on every store (stage one,
Flowtree, exact W1 on the store's own candidates) or once (embedding the queries,
merging the stores' answers). :func:`run` writes the steps against an *executor*:
:class:`Local` calls them in turn; the Dask index submits them as tasks, the merges fed
by the stores' futures, so that the same steps give the same answer on a cluster. The
merges keep the smallest values, ties by row number (:func:`tsw.search._store.smallest`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from tsw.core._validation import check_choice, check_positive_int
from tsw.search._data import Rows
from tsw.search._store import Model, Store, smallest

__all__ = ["Local", "Plan", "check_plan", "default_shortlists", "run"]

#: rerank choices
RERANKS = ("exact", "flowtree")


def default_shortlists(rerank: str, n: int, k: int) -> tuple[int, ...]:
    r"""Return the shortlists of ``candidates=None`` for ``k`` neighbours among ``n`` rows.

    With ``rerank="exact"``: :math:`c_2 = \max(3k, \lceil \sqrt{n} / 2 \rceil)` for
    Flowtree's shortlist (to exact W1) and :math:`c_1 = \max(20k, 2 c_2)` for stage one
    (each of its two lists); with ``rerank="flowtree"``: :math:`(c_1,)`. For ``k = 10``:
    (200, 30) up to 3,600 rows, (200, 55) at 12,000, (224, 112) at 50,000, (318, 159) at
    100,000: the ranks of the exact neighbours under the cheaper stages grow with the
    database.
    """
    c2 = max(3 * k, math.ceil(math.sqrt(n) / 2))
    c1 = max(20 * k, 2 * c2)
    return (c1, c2) if rerank == "exact" else (c1,)


@dataclasses.dataclass(frozen=True)
class Plan:
    """The cascade: the last stage (None, "flowtree", "exact") and the shortlists before it.

    ``shortlists`` has one size per stage after the first: ``()`` for ``rerank=None``,
    ``(c1,)`` (stage one's shortlists for the last stage) or ``(c1, c2)`` (stage one's
    for Flowtree, Flowtree's for exact W1); ``None``: the sizes of
    :func:`default_shortlists`, from the database's size at each search.
    """

    rerank: str | None
    shortlists: tuple[int, ...] | None

    def sizes(self, n: int, k: int) -> tuple[int, ...]:
        """Return the shortlists of a search of ``k`` neighbours among ``n`` rows."""
        if self.shortlists is None and self.rerank is not None:
            return default_shortlists(self.rerank, n, k)
        return self.shortlists or ()

    @property
    def label(self) -> str:
        """``candidates`` as the repr shows it."""
        return "auto" if self.shortlists is None else repr(self.shortlists)


def check_plan(rerank: object, candidates: object) -> Plan:
    """Check ``rerank`` and ``candidates`` and return the :class:`Plan` they describe."""
    if rerank is not None:
        rerank = check_choice(rerank, "rerank", RERANKS)
    if rerank is None:
        if candidates is not None:
            raise ValueError(
                "candidates sets the shortlists of the reranking stages; with rerank=None "
                f"the tree-sliced values are the answer (got candidates={candidates!r})"
            )
        return Plan(None, ())
    if candidates is None:
        return Plan(rerank, None)
    if isinstance(candidates, tuple | list):
        sizes = tuple(check_positive_int(c, "candidates") for c in candidates)
        if len(sizes) == 2 and rerank == "exact" and sizes[1] <= sizes[0]:
            return Plan(rerank, sizes)
        if len(sizes) == 1:
            return Plan(rerank, sizes)
        raise ValueError(
            "candidates must be an int or, with rerank='exact', a pair (c1, c2) with c2 <= c1 "
            f"(stage one's shortlist for Flowtree, Flowtree's for exact W1); got {candidates!r}"
        )
    return Plan(rerank, (check_positive_int(candidates, "candidates"),))


class Executor(Protocol):
    """Runs the steps: ``each`` on every store, ``one`` once; handles are values or futures."""

    def each(self, fn: Callable[..., Any], *args: Any) -> list[Any]: ...

    def one(self, fn: Callable[..., Any], *args: Any) -> Any: ...


class Local:
    """The executor of one machine: calls the steps at once on its stores."""

    def __init__(self, stores: Sequence[Store]) -> None:
        self.stores = stores

    def each(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        return [fn(store, *args) for store in self.stores]

    def one(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)


# --------------------------------------------------------------------------- steps


def _merge_top(parts: list[tuple[np.ndarray, np.ndarray]], c: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the ``c`` smallest over the stores' shortlists."""
    return smallest(
        np.concatenate([p[0] for p in parts], 1), np.concatenate([p[1] for p in parts], 1), c
    )


def _merge_values(
    top: tuple[np.ndarray, np.ndarray], parts: list[np.ndarray], c: int
) -> tuple[np.ndarray, np.ndarray]:
    """Return the ``c`` smallest candidates ``top`` by their new values (each from its store)."""
    vals = parts[0].copy()
    for p in parts[1:]:
        vals = np.where(np.isnan(vals), p, vals)
    return smallest(vals, top[1], c)


def _stage_one(store: Store, q: Any, c: int, exclude: np.ndarray | None) -> Any:
    return store.stage_one(q, c, exclude)


def _both_lists(store: Store, q: Any, c: int, exclude: np.ndarray | None) -> Any:
    """Stage one's two lists on one store: by the tree-sliced W, by the means' cost."""
    return store.stage_one(q, c, exclude), store.nearest_means(q, c, exclude)


def _merge_union(parts: list[tuple[Any, Any]], c: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the union of the ``c`` best by each of stage one's two scores (no values).

    The row numbers (q, m) alternate between the two lists, best first, each row once
    (its first place), completed with -1; the values are NaN (no stage has run on them).
    """
    tsw = _merge_top([p[0] for p in parts], c)[1]
    near = _merge_top([p[1] for p in parts], c)[1]
    both = np.empty((tsw.shape[0], 2 * c), np.int64)
    both[:, 0::2], both[:, 1::2] = tsw, near
    rows = []
    for line in both:
        u, first = np.unique(line, return_index=True)
        keep = u >= 0
        rows.append(u[keep][np.argsort(first[keep], kind="stable")])
    gids = np.full((len(rows), max((r.size for r in rows), default=0)), -1, np.int64)
    for i, r in enumerate(rows):
        gids[i, : r.size] = r
    return np.full(gids.shape, np.nan), gids


def _flowtree(store: Store, q: Rows, top: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    return store.flowtree(q, top[1])


def _exact(store: Store, q: Rows, top: tuple[np.ndarray, np.ndarray], k: int) -> np.ndarray:
    return store.exact(q, top[1], k)


def run(
    ex: Executor,
    model: Any,
    plan: Plan,
    queries: Any,
    k: int,
    size: int,
    exclude: Any = None,
) -> Any:
    """Return the (values, row numbers) of the ``k`` nearest rows of each query (a handle).

    ``model`` and ``queries`` (a :class:`Rows`) may be handles too; ``size`` the number
    of rows of all the stores (it sets the default shortlists); ``exclude`` (k,) a row
    number left out for each query (the k-NN graph leaves each row out of its own).

    Stage one keeps, from every store, the ``c1`` best rows by the tree-sliced W and the
    ``c1`` best by the ground cost between the query's and the row's means, and the
    union of the two lists goes on (to Flowtree, or to exact W1 for one shortlist).
    """
    emb = ex.one(Model.embed, model, queries)
    if plan.rerank is None:
        return ex.one(_merge_top, ex.each(_stage_one, emb, k, exclude), k)
    sizes = plan.sizes(size, k)
    first = max(sizes[0], k)
    top = ex.one(_merge_union, ex.each(_both_lists, emb, first, exclude), first)
    if plan.rerank == "flowtree" or len(sizes) == 2:
        second = k if plan.rerank == "flowtree" else max(sizes[1], k)
        top = ex.one(_merge_values, top, ex.each(_flowtree, queries, top), second)
        if plan.rerank == "flowtree":
            return top
    return ex.one(_merge_values, top, ex.each(_exact, queries, top, k), k)
