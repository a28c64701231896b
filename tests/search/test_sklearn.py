"""scikit-learn: TreeEmbedding passes the estimator checks; the kernel exp(-t TSW) is PSD."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from _search_ref import corpus, tsw_oracle

import tsw

sklearn = pytest.importorskip("sklearn")
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.svm import SVC  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402


@parametrize_with_checks(
    [tsw.TreeEmbedding(), tsw.TreeEmbedding(tree="cluster", n_trees=3, random_state=0)]
)
def test_estimator_checks(estimator, check):
    """Every check of scikit-learn's suite applies (histograms are non-negative: the
    ``positive_only`` tag makes the checks' data non-negative) and passes."""
    check(estimator)


def _grid(side):
    return np.stack(np.divmod(np.arange(side * side), side), axis=1).astype(float)


def test_embedding_l1_distances_are_the_tree_sliced_w():
    words, H, _ = corpus(30, seed=5, n_words=40)
    model = tsw.TreeEmbedding(words, n_trees=3, random_state=0).fit(H)
    Z = model.transform(H)
    L1 = np.abs(Z[:, None, :] - Z[None, :, :]).sum(-1)
    np.testing.assert_allclose(L1, tsw_oracle(model.trees_, H, H), rtol=1e-10, atol=1e-12)
    Zs = model.transform(sp.csr_matrix(H))  # sparse input, the same embedding
    np.testing.assert_allclose(np.asarray(Zs.todense() if sp.issparse(Zs) else Zs), Z)
    assert model.n_features_in_ == 40


def test_default_support_is_the_bins_of_a_line():
    """Without a support, feature i is the point i of a line: the L1 distance is the 1-D
    W1 between the histograms, the L1 distance between their cumulative sums."""
    rng = np.random.default_rng(0)
    H = rng.random((6, 9))
    H /= H.sum(1, keepdims=True)
    Z = tsw.TreeEmbedding(n_trees=2, random_state=0).fit_transform(H)
    L1 = np.abs(Z[:, None, :] - Z[None, :, :]).sum(-1)
    C = np.cumsum(H, 1)
    ref = np.abs(C[:, None, :] - C[None, :, :]).sum(-1)
    # a quadtree on a line dominates the line's metric: at least W1, exact on neighbours
    assert (ref - 1e-12 <= L1).all()
    np.testing.assert_allclose(np.diag(L1), 0.0, atol=1e-15)


def test_pipeline_is_the_tree_sliced_knn():
    digits = load_digits()
    H = digits.data / digits.data.sum(1, keepdims=True)
    y = digits.target
    model = make_pipeline(
        tsw.TreeEmbedding(_grid(8), n_trees=5, random_state=0),
        KNeighborsClassifier(5, metric="manhattan", algorithm="brute"),
    )
    model.fit(H[:600], y[:600])
    pred = model.predict(H[600:900])
    trees = model[0].trees_
    D = tsw.pairwise_tsw(H[600:900], H[:600], trees=trees)
    knn = KNeighborsClassifier(5, metric="precomputed").fit(np.zeros((600, 600)), y[:600])
    np.testing.assert_array_equal(pred, knn.predict(D))
    assert (pred == y[600:900]).mean() > 0.8  # 10 classes: chance is 0.1


def test_bad_support_and_options():
    H = np.full((3, 4), 0.25)
    with pytest.raises(ValueError, match="one feature per support point"):
        tsw.TreeEmbedding(_grid(3)).fit(H)
    with pytest.raises(ValueError, match="n_trees"):
        tsw.TreeEmbedding(n_trees=0).fit(H)
    with pytest.raises(ValueError, match="tree"):
        tsw.TreeEmbedding(tree="kd").fit(H)
    with pytest.raises(ValueError, match="Negative"):
        tsw.TreeEmbedding().fit(-H)
    model = tsw.TreeEmbedding().fit(H)
    with pytest.raises(ValueError, match="features"):
        model.transform(np.full((2, 5), 0.2))


# --------------------------------------------------------------------------- kernel


@pytest.mark.parametrize("t", [0.3, 1.0, 10.0])
def test_kernel_is_positive_semidefinite(t):
    words, H, _ = corpus(80, seed=9, n_words=60)
    trees = tsw.sample_quadtrees(words, n_trees=4, seed=1)
    K = tsw.tree_sliced_kernel(H, trees=trees, t=t)
    np.testing.assert_array_equal(K, K.T)
    np.testing.assert_allclose(np.diag(K), 1.0)
    assert np.linalg.eigvalsh(K).min() >= -1e-12 * len(K)
    ref = np.exp(-t * tsw_oracle(trees, H[:5], H[:7]))  # independent: POT on path metrics
    np.testing.assert_allclose(tsw.tree_sliced_kernel(H[:5], H[:7], trees=trees, t=t), ref,
                               rtol=1e-10)  # fmt: skip


def test_kernel_keeps_torch_tensors():
    words, H, _ = corpus(10, seed=2, n_words=30)
    trees = tsw.sample_quadtrees(torch.from_numpy(words), n_trees=2, seed=0)
    K = tsw.tree_sliced_kernel(torch.from_numpy(H), trees=trees)
    assert isinstance(K, torch.Tensor)
    assert K.dtype == torch.float64


def test_svc_on_the_digits_with_the_precomputed_kernel():
    digits = load_digits()
    H = digits.data / digits.data.sum(1, keepdims=True)
    y = digits.target
    trees = tsw.sample_quadtrees(_grid(8), n_trees=10, seed=0)
    K_train = tsw.tree_sliced_kernel(H[:1000], trees=trees, t=1.0)
    K_test = tsw.tree_sliced_kernel(H[1000:], H[:1000], trees=trees, t=1.0)
    svc = SVC(kernel="precomputed").fit(K_train, y[:1000])
    assert (svc.predict(K_test) == y[1000:]).mean() > 0.9


@pytest.mark.parametrize(("t", "err"), [(0, ValueError), (-1.0, ValueError), ("1", TypeError)])
def test_kernel_bad_bandwidth(t, err):
    trees = tsw.sample_quadtrees(_grid(2), seed=0)
    with pytest.raises(err, match="t must"):
        tsw.tree_sliced_kernel(np.full((2, 4), 0.25), trees=trees, t=t)
