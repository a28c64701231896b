"""tsw.DaskW1Index on a local cluster of two worker processes: the single-machine answer."""

from __future__ import annotations

import numpy as np
import pytest
from _search_ref import corpus

import tsw

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    with cluster, distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def data():
    words, H, _ = corpus(160, seed=31)
    return words, H


def _same(a, b):
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(
    "options",
    [
        {"rerank": None},
        {"rerank": "flowtree", "candidates": 20},
        pytest.param({"candidates": (25, 12)}, marks=pytest.mark.slow),
        pytest.param({"candidates": 8}, marks=pytest.mark.slow),  # both short lists to exact
        pytest.param({}, marks=pytest.mark.slow),  # the defaults: (120, 18) for k = 6 of 150
    ],
)
def test_sharded_index_answers_as_the_local_one(client, data, options):
    """Three adds spread over two shards (and three shards on two workers) give the
    answer of one local index holding the same rows, value for value."""
    words, H = data
    local = tsw.W1Index(words, seed=4, n_trees=3, **options)
    local.add(H[10:])
    for shards in (None, 3):
        index = tsw.DaskW1Index(client, words, seed=4, n_trees=3, n_shards=shards, **options)
        for lo, hi in [(10, 40), (40, 41), (41, 160)]:
            index.add(H[lo:hi])
        assert len(index) == len(local) == 150
        sizes = index.shard_sizes()
        assert sum(sizes) == 150
        assert max(sizes) - min(sizes) <= 1
        _same(index.search(H[:10], 6), local.search(H[:10], 6))
        _same(index.search(H[3], 4), local.search(H[3], 4))
        _same(index.knn_graph(5), local.knn_graph(5))


def test_refused_add_and_bad_arguments(client, data):
    words, H = data
    index = tsw.DaskW1Index(client, words, seed=0, n_trees=2)
    index.add(H[:30])
    before = index.search(H[:3], 3)
    with pytest.raises(ValueError, match="total"):
        index.add(2 * H[30:40])
    with pytest.raises(ValueError, match="non-negative"):
        index.add(-H[30:40])
    assert len(index) == 30
    assert index.shard_sizes() == [15, 15]
    _same(index.search(H[:3], 3), before)
    with pytest.raises(ValueError, match="k must be at most"):
        index.search(H[:3], 31)
    with pytest.raises(TypeError, match="client"):
        tsw.DaskW1Index("tcp://localhost:8786", words)
    with pytest.raises(ValueError, match="n_shards"):
        tsw.DaskW1Index(client, words, n_shards=0)
    assert "DaskW1Index(n=30, shards=2" in repr(index)
    assert index.nbytes > 0
