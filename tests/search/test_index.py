"""tsw.W1Index: answers against brute-force exact W1 (POT), every input form, bad input."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from _search_ref import brute_force, corpus, exact_w1, topk, tsw_oracle

import tsw
from tsw.search._cascade import default_shortlists
from tsw.search._store import smallest

F64 = torch.float64


@pytest.fixture(scope="module")
def small():
    words, H, labels = corpus(120, seed=101)
    return words, H, labels


def _index(words, H, **options):
    index = tsw.W1Index(words, **{"seed": 0, **options})
    index.add(H)
    return index


# --------------------------------------------------------------------------- answers


@pytest.mark.parametrize("seed", [7001, 7002, 7003])
def test_recall_of_the_exact_neighbours_on_unseen_corpora(seed):
    """Corpora of seeds the defaults were never tuned on: recall@10 of exact W1's top 10.

    Shortlists a tenth of the database long (stage one 60, Flowtree 20 of 600) still find
    the exact top 10 of almost every query, and every returned distance is exact W1.
    """
    words, H, _ = corpus(600, seed=seed)
    Q, DB = H[:12], H[12:]
    index = _index(words, DB, candidates=(60, 20))
    D, ids = index.search(Q, 10)
    R = brute_force(words, Q, DB)
    truth = topk(R, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, truth, strict=True)])
    assert recall >= 0.95, recall
    np.testing.assert_allclose(D, np.take_along_axis(R, ids, 1), rtol=1e-12, atol=1e-14)


def test_full_shortlists_give_the_brute_force_answer(small):
    """With every row a candidate at every stage, the answer is exact W1's top k, ties
    by row number; so the exact stage's lower-bound skipping loses nothing."""
    words, H, _ = small
    Q, DB = H[:6], H[6:]
    R = brute_force(words, Q, DB)
    for candidates in [(len(DB), len(DB)), len(DB)]:
        D, ids = _index(words, DB, candidates=candidates, n_trees=3).search(Q, 8)
        np.testing.assert_array_equal(ids, topk(R, 8))
        np.testing.assert_allclose(D, np.sort(R, 1)[:, :8], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("metric", ["sqeuclidean", "cityblock"])
def test_other_ground_costs_are_exact(small, metric):
    words, H, _ = small
    Q, DB = H[:4], H[4:]
    R = brute_force(words, Q, DB, metric)
    D, ids = _index(words, DB, metric=metric, candidates=len(DB), n_trees=2).search(Q, 5)
    np.testing.assert_array_equal(ids, topk(R, 5))
    np.testing.assert_allclose(D, np.sort(R, 1)[:, :5], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("tree", ["quadtree", "cluster"])
def test_rerank_none_is_the_tree_sliced_top_k(tree):
    """Stage one alone: the tree-sliced W (the mean over the trees of ot.emd2 on each
    tree's path metric) to every row, its k smallest."""
    words, H, _ = corpus(40, seed=3, n_words=30)
    index = _index(words, H[4:], rerank=None, n_trees=3, tree=tree)
    D, ids = index.search(H[:4], 6)
    ref = tsw_oracle(index.trees, H[:4], H[4:])
    np.testing.assert_allclose(D, np.take_along_axis(ref, ids, 1), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(D, np.sort(ref, 1)[:, :6], rtol=1e-10, atol=1e-12)


def test_rerank_flowtree_gives_flowtree_values(small):
    words, H, _ = small
    Q, DB = H[:5], H[5:]
    index = _index(words, DB, rerank="flowtree", candidates=len(DB), n_trees=2)
    D, ids = index.search(Q, 7)
    F = tsw.pairwise_flowtree(Q, DB, trees=index.trees)
    np.testing.assert_allclose(D, np.sort(F, 1)[:, :7], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(D, np.take_along_axis(F, ids, 1), rtol=1e-12, atol=1e-14)
    R = brute_force(words, Q, DB)  # a feasible plan's cost: at least exact W1
    assert (np.take_along_axis(R, ids, 1) - 1e-12 <= D).all()


def test_ties_are_broken_by_row_number(small):
    words, H, _ = small
    DB = np.concatenate([H[:10], H[3:4], H[10:40], H[3:4], H[3:4]])  # row 3 four times
    for rerank in ("exact", "flowtree", None):
        D, ids = _index(words, DB, rerank=rerank, n_trees=2).search(H[3], 4)
        assert ids.tolist() == [3, 10, 41, 42], rerank
        assert D.tolist() == [0.0] * 4


def test_knn_graph_is_every_row_against_the_others(small):
    words, H, _ = small
    DB = H[:40]
    index = _index(words, DB, candidates=len(DB), n_trees=2)
    D, ids = index.knn_graph(5)
    R = brute_force(words, DB, DB)
    np.fill_diagonal(R, np.inf)
    np.testing.assert_array_equal(ids, topk(R, 5))
    np.testing.assert_allclose(D, np.sort(R, 1)[:, :5], rtol=1e-12, atol=1e-14)
    _, ids2 = _index(words, DB, n_trees=2).knn_graph(5)  # the defaults: a cascade
    assert (np.arange(40)[:, None] != ids2).all()


# --------------------------------------------------------------------------- shortlists


def _ranked(D: np.ndarray, c: int) -> list[set[int]]:
    """The ``c`` smallest of each row of ``D`` as sets, after checking that the c-th and
    the next values differ (no tie or rounding decides who is in)."""
    order = np.argsort(D, axis=1, kind="stable")
    gap = np.take_along_axis(D, order[:, c : c + 1], 1) - np.take_along_axis(
        D, order[:, c - 1 : c], 1
    )
    assert (gap > 1e-9).all()
    return [set(row[:c].tolist()) for row in order]


def _means_cost(words: np.ndarray, Q: np.ndarray, H: np.ndarray) -> np.ndarray:
    """The (q, N) Euclidean distances between the histograms' means, by scipy."""
    from scipy.spatial.distance import cdist

    return cdist(Q @ words / Q.sum(1, keepdims=True), H @ words / H.sum(1, keepdims=True))


def _top_among(R: np.ndarray, allowed: list[set[int]], k: int) -> np.ndarray:
    """Row numbers of the k smallest of each row of R among its allowed columns."""
    masked = np.full(R.shape, np.inf)
    for i, cols in enumerate(allowed):
        masked[i, list(cols)] = R[i, list(cols)]
    return topk(masked, k)


def test_stage_one_passes_on_the_nearest_means_too():
    """With one shortlist ``c``, exact W1 orders the union of the ``c`` rows of smallest
    tree-sliced W (POT on the tree's path metric) and the ``c`` rows whose means are
    nearest the query's (scipy): the answer is exact W1's top k among that union. On
    this 10-dimensional corpus one quadtree misses exact neighbours that the means
    find."""
    words, H, _ = corpus(260, seed=11, dim=10)
    Q, DB = H[:10], H[10:]
    c, k = 12, 5
    index = _index(words, DB, n_trees=1, candidates=c)
    D, ids = index.search(Q, k)
    R = brute_force(words, Q, DB)
    by_tree = _ranked(tsw_oracle(index.trees, Q, DB), c)
    by_means = _ranked(_means_cost(words, Q, DB), c)
    union = [a | b for a, b in zip(by_tree, by_means, strict=True)]
    np.testing.assert_array_equal(ids, _top_among(R, union, k))
    np.testing.assert_allclose(D, np.take_along_axis(R, ids, 1), rtol=1e-12, atol=1e-14)
    # the means' list matters here: the tree's list alone gives another answer
    assert (_top_among(R, by_tree, k) != ids).any()


def test_knn_graph_leaves_each_row_out_of_both_lists():
    """The k-NN graph with one short shortlist: each row's answer is exact W1's top k
    among the union of both lists of the other rows (never the row itself)."""
    words, H, _ = corpus(50, seed=12, dim=10)
    c, k = 6, 3
    index = _index(words, H, n_trees=1, candidates=c)
    D, ids = index.knn_graph(k)
    R = brute_force(words, H, H)
    T = tsw_oracle(index.trees, H, H)
    M = _means_cost(words, H, H)
    for A in (R, T, M):
        np.fill_diagonal(A, np.inf)
    union = [a | b for a, b in zip(_ranked(T, c), _ranked(M, c), strict=True)]
    np.testing.assert_array_equal(ids, _top_among(R, union, k))
    np.testing.assert_allclose(D, np.take_along_axis(R, ids, 1), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(
    ("n", "k", "expected"),
    [
        (100, 10, (200, 30)),
        (3600, 10, (200, 30)),  # sqrt(3600) / 2 = 30
        (3601, 10, (200, 31)),
        (12000, 10, (200, 55)),
        (50000, 10, (224, 112)),
        (100000, 10, (318, 159)),
        (1000, 1, (32, 16)),
        (1000, 40, (800, 120)),
    ],
)
def test_default_shortlists_grow_with_the_database(n, k, expected):
    """c2 = max(3k, ceil(sqrt(n) / 2)), c1 = max(20k, 2 c2), by hand."""
    assert default_shortlists("exact", n, k) == expected
    assert default_shortlists("flowtree", n, k) == expected[:1]


def test_default_candidates_follow_the_size_of_the_index():
    """``candidates=None`` answers as the explicit shortlists of the rule at the index's
    size at each search: (40, 10) for k = 2 among 400 rows, (40, 12) among 530."""
    words, H, _ = corpus(560, seed=13, dim=8)
    Q = H[:30]
    auto = _index(words, H[30:430], n_trees=1)
    assert "candidates=auto" in repr(auto)
    for size, sizes in ((400, (40, 10)), (530, (40, 12))):
        assert len(auto) == size
        got = auto.search(Q, 2)
        fixed = _index(words, H[30 : 30 + size], n_trees=1, candidates=sizes).search(Q, 2)
        for a, b in zip(got, fixed, strict=True):
            np.testing.assert_array_equal(a, b)
        if size == 400:
            auto.add(H[430:])
    # shorter shortlists give another answer on these queries: the sizes are the rule's
    other = _index(words, H[30:], n_trees=1, candidates=(40, 10)).search(Q, 2)
    assert (other[1] != got[1]).any()


# --------------------------------------------------------------------------- state


def test_incremental_adds_equal_one_add(small):
    words, H, _ = small
    one = _index(words, H[10:], n_trees=3, candidates=(30, 10))
    parts = tsw.W1Index(words, seed=0, n_trees=3, candidates=(30, 10))
    for lo, hi in [(10, 11), (11, 18), (18, 19), (19, 60), (60, 61), (61, 120)]:
        parts.add(H[lo] if hi == lo + 1 else H[lo:hi])  # single 1-D histograms too
    assert len(parts) == len(one) == 110
    for a, b in zip(one.search(H[:10], 6), parts.search(H[:10], 6), strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(one.knn_graph(3), parts.knn_graph(3), strict=True):
        np.testing.assert_array_equal(a, b)


def test_pickle_and_save_load_answer_identically(small, tmp_path):
    words, H, _ = small
    index = _index(words, H[10:80], n_trees=3, candidates=(30, 10))
    before = index.search(H[:10], 5)
    copy = pickle.loads(pickle.dumps(index))
    index.save(tmp_path / "index.pkl")
    loaded = tsw.W1Index.load(tmp_path / "index.pkl")
    for other in (copy, loaded):
        assert len(other) == 70
        for a, b in zip(before, other.search(H[:10], 5), strict=True):
            np.testing.assert_array_equal(a, b)
    index.add(H[80:])  # both go on as the original does
    loaded.add(H[80:])
    for a, b in zip(index.search(H[:10], 5), loaded.search(H[:10], 5), strict=True):
        np.testing.assert_array_equal(a, b)
    with open(tmp_path / "other.pkl", "wb") as f:
        pickle.dump({"not": "an index"}, f)
    with pytest.raises(TypeError, match="not a W1Index"):
        tsw.W1Index.load(tmp_path / "other.pkl")


def test_same_seed_same_answers_and_repr(small):
    words, H, _ = small
    a = _index(words, H[5:], n_trees=2).search(H[:5], 4)
    b = _index(words, H[5:], n_trees=2).search(H[:5], 4)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    index = _index(words, H, n_trees=2)
    assert "W1Index(n=120" in repr(index)
    assert "rerank='exact'" in repr(index)
    assert index.total == pytest.approx(1.0)
    assert index.nbytes > 0


# --------------------------------------------------------------------------- input forms


def test_every_input_form_gives_the_same_answer(small):
    words, H, _ = small
    Q, DB = H[:4], H[4:50]
    ref = _index(words, DB, n_trees=2).search(Q, 5)
    DBt, Qt = torch.from_numpy(DB), torch.from_numpy(Q)
    forms = [
        (sp.csr_matrix(DB), sp.csr_matrix(Q)),
        (sp.csr_array(DB), sp.coo_matrix(Q)),
        (DBt.to_sparse(), Qt.to_sparse_csr()),
        (DBt, Qt),
    ]
    for db, q in forms:
        D, ids = _index(words, db, n_trees=2).search(q, 5)
        if isinstance(q, torch.Tensor):
            assert D.dtype == F64
            assert ids.dtype == torch.int64
            D, ids = D.numpy(), ids.numpy()
        else:
            assert isinstance(D, np.ndarray)
            assert D.dtype == np.float64
        np.testing.assert_array_equal(ids, ref[1])
        np.testing.assert_allclose(D, ref[0], rtol=1e-14, atol=0)
    D1, I1 = _index(words, DB, n_trees=2).search(Q[0], 5)  # one 1-D query
    assert D1.shape == I1.shape == (5,)
    np.testing.assert_array_equal(I1, ref[1][0])


def test_float32_support_keeps_its_dtype(small):
    words, H, _ = small
    w32 = torch.from_numpy(words).float()
    index = tsw.W1Index(w32, seed=0, n_trees=2)
    index.add(torch.from_numpy(H[5:]).float())
    D, ids = index.search(torch.from_numpy(H[:3]).float(), 4)
    assert D.dtype == torch.float32
    assert ids.dtype == torch.int64
    R = brute_force(words.astype(np.float32).astype(np.float64),
                    H[:3].astype(np.float32).astype(np.float64),
                    H[5:].astype(np.float32).astype(np.float64))  # fmt: skip
    np.testing.assert_allclose(D.numpy(), np.take_along_axis(R, ids.numpy(), 1), rtol=1e-6)


def test_unnormalised_equal_totals(small):
    words, H, _ = small
    index = _index(words, 3.5 * H[4:], candidates=len(H) - 4, n_trees=2)
    D, ids = index.search(3.5 * H[:3], 4)
    R = brute_force(words, 3.5 * H[:3], 3.5 * H[4:])
    np.testing.assert_array_equal(ids, topk(R, 4))
    np.testing.assert_allclose(D, np.sort(R, 1)[:, :4], rtol=1e-12)
    assert index.total == pytest.approx(3.5)


def test_exact_values_agree_with_pot(small):
    words, H, _ = small
    D, ids = _index(words, H[3:]).search(H[:3], 5)
    for i in range(3):
        for j in range(5):
            assert D[i, j] == pytest.approx(exact_w1(words, H[i], H[3 + ids[i, j]]), rel=1e-12)


# --------------------------------------------------------------------------- bad input


def _assert_unchanged(index, H, before):
    assert len(index) == 50
    for a, b in zip(before, index.search(H[:3], 4), strict=True):
        np.testing.assert_array_equal(a, b)


def test_refused_add_leaves_the_index_unchanged(small):
    words, H, _ = small
    index = _index(words, H[:50], n_trees=2)
    before = index.search(H[:3], 4)
    bad = H[50:60].copy()
    neg = bad.copy()
    neg[3, 5] = -0.1
    nan = bad.copy()
    nan[2, 0] = np.nan
    zero = bad.copy()
    zero[4] = 0.0
    cases = [
        (bad[:, :-1], ValueError, "shape"),
        (neg, ValueError, "non-negative"),
        (nan, ValueError, "NaN"),
        (zero, ValueError, "zero row"),
        (bad * 2.0, ValueError, "total"),
        (np.concatenate([bad[:2], 1.5 * bad[2:3]]), ValueError, "row 2"),
        (bad.astype(np.int64), TypeError, "dtype"),
        (torch.from_numpy(bad).float(), TypeError, "dtype"),
        ([[0.5, 0.5]], TypeError, "hists"),
    ]
    for hists, err, match in cases:
        with pytest.raises(err, match=match):
            index.add(hists)
        _assert_unchanged(index, H, before)


def test_first_add_checks_its_own_rows(small):
    words, H, _ = small
    index = tsw.W1Index(words, seed=0, n_trees=2)
    with pytest.raises(ValueError, match="row 1 has total"):
        index.add(np.stack([H[0], 2 * H[1]]))
    assert len(index) == 0
    assert index.total is None
    with pytest.raises(ValueError, match="empty"):
        index.search(H[:2], 1)


def test_bad_queries_and_k(small):
    words, H, _ = small
    index = _index(words, H[:50], n_trees=2)
    with pytest.raises(ValueError, match="k must be at most the number of indexed"):
        index.search(H[:2], 51)
    for k in (0, -1):
        with pytest.raises(ValueError, match="k"):
            index.search(H[:2], k)
    with pytest.raises(TypeError, match="k"):
        index.search(H[:2], 2.5)
    with pytest.raises(ValueError, match="queries"):
        index.search(2 * H[:2], 3)
    with pytest.raises(TypeError, match="queries"):
        index.search(torch.from_numpy(H[:2]).float(), 3)
    with pytest.raises(ValueError, match="queries"):
        index.search(torch.from_numpy(H[:2]).to("meta"), 3)
    with pytest.raises(ValueError, match="queries must have shape"):
        index.search(H[:2, :10], 3)
    with pytest.raises(ValueError, match="k must be at most"):
        index.knn_graph(50)


@pytest.mark.parametrize(
    ("options", "err", "match"),
    [
        ({"rerank": "sinkhorn"}, ValueError, "rerank"),
        ({"rerank": None, "candidates": 10}, ValueError, "rerank=None"),
        ({"rerank": "flowtree", "candidates": (10, 5)}, ValueError, "candidates"),
        ({"candidates": (10, 20)}, ValueError, "c2 <= c1"),
        ({"candidates": 0}, ValueError, "candidates"),
        ({"candidates": (10, 0)}, ValueError, "candidates"),
        ({"candidates": "10"}, TypeError, "candidates"),
        ({"tree": "kd"}, ValueError, "tree"),
        ({"n_trees": 0}, ValueError, "n_trees"),
        ({"metric": "minkowski"}, ValueError, "metric"),
        ({"metric": "cosine"}, ValueError, "metric"),
        ({"seed": "0"}, TypeError, "seed"),
        ({"verbose": "yes"}, TypeError, "verbose"),
        ({"fit_lengths": 1}, TypeError, "fit_lengths"),
    ],
)
def test_bad_options(small, options, err, match):
    with pytest.raises(err, match=match):
        tsw.W1Index(small[0], **options)


def test_bad_support():
    with pytest.raises((TypeError, ValueError), match="support"):
        tsw.W1Index([[0.0, 1.0]])
    with pytest.raises(ValueError, match="support"):
        tsw.W1Index(np.array([[0.0, np.nan]]))


# --------------------------------------------------------------------------- options


def test_fitted_lengths_and_cluster_trees_still_return_exact_values(small):
    words, H, _ = small
    Q, DB = H[:3], H[3:60]
    R = brute_force(words, Q, DB)
    for options in ({"fit_lengths": True}, {"tree": "cluster"}):
        D, ids = _index(words, DB, n_trees=2, candidates=len(DB), **options).search(Q, 4)
        np.testing.assert_array_equal(ids, topk(R, 4))
        np.testing.assert_allclose(D, np.sort(R, 1)[:, :4], rtol=1e-12)


def test_verbose_shows_progress(small, capsys):
    words, H, _ = small
    index = tsw.W1Index(words, seed=0, n_trees=2, verbose=True)
    index.add(H)
    index.search(H[:3], 2)
    err = capsys.readouterr()
    text = err.out + err.err
    assert "W1Index.add" in text
    assert "W1Index.search" in text


def test_tracing_is_refused(small):
    words, H, _ = small
    index = _index(words, H, n_trees=2)

    def f(q):
        return index.search(q, 2)[0]

    with pytest.raises(RuntimeError, match="W1Index"):
        torch.jit.trace(f, torch.from_numpy(H[:2]))


# --------------------------------------------------------------------------- merges


def test_smallest_keeps_the_smallest_by_value_then_row_number():
    rng = np.random.default_rng(0)
    vals = rng.integers(0, 4, (50, 30)).astype(float)  # many ties
    vals[rng.random(vals.shape) < 0.1] = np.nan
    gids = np.stack([rng.permutation(1000)[:30] for _ in range(50)])
    for c in (1, 5, 29, 30, 35):
        v, g = smallest(vals, gids, c)
        for i in range(50):
            ok = ~np.isnan(vals[i])
            ref = sorted(zip(vals[i][ok], gids[i][ok], strict=True))[:c]
            ref += [(np.inf, -1)] * (c - len(ref))
            assert list(zip(v[i], g[i], strict=True)) == ref
