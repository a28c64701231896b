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
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from tsw.core._validation import check_choice, check_positive_int
from tsw.search._data import Rows
from tsw.search._store import Model, Store, smallest

__all__ = ["Local", "Plan", "check_plan", "run"]

#: rerank choices
RERANKS = ("exact", "flowtree")
#: the default shortlists: stage one's for Flowtree, then Flowtree's for exact W1
DEFAULT_CANDIDATES = {"exact": (200, 50), "flowtree": (200,)}


@dataclasses.dataclass(frozen=True)
class Plan:
    """The cascade: the last stage (None, "flowtree", "exact") and the shortlists before it.

    ``shortlists`` has one size per stage after the first: ``()`` for ``rerank=None``,
    ``(c1,)`` (stage one's shortlist for the last stage) or ``(c1, c2)`` (stage one's
    for Flowtree, Flowtree's for exact W1).
    """

    rerank: str | None
    shortlists: tuple[int, ...]


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
        return Plan(rerank, DEFAULT_CANDIDATES[rerank])
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
    exclude: Any = None,
) -> Any:
    """Return the (values, row numbers) of the ``k`` nearest rows of each query (a handle).

    ``model`` and ``queries`` (a :class:`Rows`) may be handles too; ``exclude`` (k,) a
    row number left out for each query (the k-NN graph leaves each row out of its own).
    """
    emb = ex.one(Model.embed, model, queries)
    first = max(plan.shortlists[0], k) if plan.shortlists else k
    top = ex.one(_merge_top, ex.each(_stage_one, emb, first, exclude), first)
    if plan.rerank is None:
        return top
    if plan.rerank == "flowtree" or len(plan.shortlists) == 2:
        second = k if plan.rerank == "flowtree" else max(plan.shortlists[1], k)
        top = ex.one(_merge_values, top, ex.each(_flowtree, queries, top), second)
        if plan.rerank == "flowtree":
            return top
    return ex.one(_merge_values, top, ex.each(_exact, queries, top, k), k)
