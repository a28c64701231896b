"""The edge matrix, embeddings and distance matrices: against per-tree tree_wasserstein."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from _oracle import tree_w1

import tsw
from tsw.support import _pairwise
from tsw.support._embedding import edge_matrix

F64 = torch.float64


def _setup(n=40, d=3, T=4, seed=0, dtype=F64, kind="quadtree"):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=F64).to(dtype)
    if kind == "quadtree":
        trees = tsw.sample_quadtrees(X, n_trees=T, seed=seed)
    else:
        trees = tsw.sample_cluster_trees(X, n_trees=T, n_clusters=3, depth=3, seed=seed)
    return X, trees, g


def _hists(k, n, g, total=1.0, zeros=0.5):
    H = torch.rand(k, n, generator=g, dtype=F64)
    H = H * (torch.rand(k, n, generator=g, dtype=F64) > zeros)  # sparse rows
    H[:, 0] += 0.01  # no empty row
    return total * H / H.sum(1, keepdim=True)


def _looped(Hs, Ht, trees):
    out = torch.zeros(len(Hs), len(Ht), dtype=F64)
    for i, h in enumerate(Hs):
        for j, g in enumerate(Ht):
            vals = []
            for t in trees:
                mu = torch.zeros(t.n_nodes, dtype=F64).index_add_(0, t.leaves, h)
                nu = torch.zeros(t.n_nodes, dtype=F64).index_add_(0, t.leaves, g)
                vals.append(tsw.tree_wasserstein(t.parents, t.edge_lengths, mu, nu))
            out[i, j] = torch.stack(vals).mean()
    return out


@pytest.mark.parametrize(
    ("kind", "block_size"),
    [("quadtree", None), ("quadtree", 1), ("quadtree", 3), ("cluster", None), ("cluster", 2)],
)
def test_matrix_equals_looped_tree_wasserstein(kind, block_size):
    _X, trees, g = _setup(kind=kind)
    Hs, Ht = _hists(7, 40, g, total=2.5), _hists(5, 40, g, total=2.5)  # unnormalised
    D = tsw.pairwise_tsw(Hs, Ht, trees=trees, block_size=block_size)
    torch.testing.assert_close(D, _looped(Hs, Ht, trees), rtol=1e-12, atol=1e-13)
    S = tsw.pairwise_tsw(Hs, trees=trees, block_size=block_size)
    torch.testing.assert_close(S, _looped(Hs, Hs, trees), rtol=1e-12, atol=1e-13)
    assert torch.equal(S, S.T)
    assert bool((S.diagonal() == 0).all())


@pytest.mark.parametrize("kind", ["quadtree", "cluster"])
def test_one_pair_equals_emd_on_the_path_metric(kind):
    _X, trees, g = _setup(n=25, d=2, T=3, seed=4, kind=kind)
    h, k = _hists(2, 25, g)
    D = tsw.pairwise_tsw(h[None], k[None], trees=trees)
    expected = []
    for t in trees:
        mu = torch.zeros(t.n_nodes, dtype=F64).index_add_(0, t.leaves, h).numpy()
        nu = torch.zeros(t.n_nodes, dtype=F64).index_add_(0, t.leaves, k).numpy()
        expected.append(tree_w1(t, mu, nu))
    assert abs(float(D[0, 0]) - np.mean(expected)) <= 1e-10


def test_embedding_l1_is_the_mean_over_trees():
    _X, trees, g = _setup(seed=2)
    H = _hists(6, 40, g)
    Z = tsw.tree_embedding(H, trees)
    L1 = (Z[:, None] - Z[None]).abs().sum(-1)
    torch.testing.assert_close(L1, _looped(H, H, trees), rtol=1e-12, atol=1e-13)
    # the unmerged edge matrix gives the same distances
    M = edge_matrix(trees)
    assert M.shape == (sum(t.n_nodes for t in trees), 40)
    Zm = (M @ H.T).T
    torch.testing.assert_close((Zm[:, None] - Zm[None]).abs().sum(-1), L1, rtol=1e-12, atol=1e-13)
    # entries: w_v / T where point i lies below v
    dense, t0 = M.to_dense(), trees[0]
    for i in range(0, 40, 7):
        v = int(t0.leaves[i])
        while v > 0:
            assert float(dense[v, i]) == float(t0.edge_lengths[v]) / len(trees)
            v = int(t0.parents[v])
    # differentiable in dense histograms
    Hg = H.clone().requires_grad_()
    tsw.tree_embedding(Hg, trees).sum().backward()
    assert Hg.grad is not None


def test_sparse_and_numpy_inputs_equal_dense():
    _X, trees, g = _setup(seed=3)
    Hs, Ht = _hists(6, 40, g), _hists(4, 40, g)
    D = tsw.pairwise_tsw(Hs, Ht, trees=trees)
    torch.testing.assert_close(tsw.pairwise_tsw(Hs.to_sparse(), Ht, trees=trees), D)
    with pytest.warns(UserWarning, match="beta"):  # torch's own warning on CSR tensors
        csr = Ht.to_sparse_csr()
    torch.testing.assert_close(tsw.pairwise_tsw(Hs, csr, trees=trees), D)
    out = tsw.pairwise_tsw(sp.csr_matrix(Hs.numpy()), sp.coo_matrix(Ht.numpy()), trees=trees)
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, D.numpy(), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(
        tsw.pairwise_tsw(Hs.numpy(), trees=trees),
        tsw.pairwise_tsw(Hs, trees=trees).numpy(),
        rtol=0,
        atol=0,
    )
    Z = tsw.tree_embedding(sp.csr_matrix(Hs.numpy()), trees)
    np.testing.assert_allclose(Z, tsw.tree_embedding(Hs, trees).numpy(), rtol=1e-15, atol=0)


def test_dtype_and_float32():
    _X, trees, g = _setup(seed=5)
    H = _hists(5, 40, g)
    t32 = trees.to(dtype=torch.float32)
    D32 = tsw.pairwise_tsw(H.float(), trees=t32)
    assert D32.dtype == torch.float32
    torch.testing.assert_close(D32.double(), tsw.pairwise_tsw(H, trees=trees), rtol=1e-5, atol=1e-6)


def test_errors():
    _X, trees, g = _setup()
    H = _hists(4, 40, g)
    bad = H.clone()
    bad[2] *= 1.5
    message = r"hists_s row 0 of total 1 and hists_s row 2 of total 1\.5"
    with pytest.raises(ValueError, match=message):
        tsw.pairwise_tsw(bad, trees=trees)
    with pytest.raises(ValueError, match="hists_t row 2"):
        tsw.pairwise_tsw(H, bad, trees=trees)
    with pytest.raises(ValueError, match=r"hists_s must have shape \(k, n\) with n = 40"):
        tsw.pairwise_tsw(H[:, :30], trees=trees)
    with pytest.raises(ValueError, match=r"hists must have shape \(k, n\) with n = 40"):
        tsw.tree_embedding(H[0], trees)
    nan = H.clone()
    nan[1, 3] = float("nan")
    with pytest.raises(ValueError, match="hists_s contains NaN"):
        tsw.pairwise_tsw(nan, trees=trees)
    neg = H.clone()
    neg[1, 3] = -0.1
    neg[1, 4] += 0.1
    with pytest.raises(ValueError, match="hists_s must be non-negative"):
        tsw.pairwise_tsw(neg, trees=trees)
    with pytest.raises(TypeError, match=r"trees must be a tsw\.SupportTrees"):
        tsw.pairwise_tsw(H, trees=None)
    with pytest.raises(TypeError, match="hists_s must have the same dtype"):
        tsw.pairwise_tsw(H.float(), trees=trees)
    with pytest.raises(ValueError, match="block_size must be an int >= 1; got 0"):
        tsw.pairwise_tsw(H, trees=trees, block_size=0)
    with pytest.raises(TypeError, match=r"hists_s must be a torch\.Tensor"):
        tsw.pairwise_tsw([[1.0]], trees=trees)


def _words(k, n, words, g, total=1.0):
    """(k, n) histograms of ``words`` random support points each (sparse rows)."""
    idx = torch.argsort(torch.rand(k, n, generator=g), dim=1)[:, :words]
    H = torch.zeros(k, n, dtype=F64)
    H.scatter_(1, idx, torch.rand(k, words, generator=g, dtype=F64) + 0.1)
    return total * H / H.sum(1, keepdim=True)


def _cdist_of_embeddings(Hs, Ht, trees):
    """The L1 distances between tree_embedding rows, in float64 (one torch.cdist)."""
    Zs, Zt = tsw.tree_embedding(Hs, trees).double(), tsw.tree_embedding(Ht, trees).double()
    return torch.cdist(Zs[None], Zt[None], p=1)[0]


@pytest.fixture
def columns(monkeypatch):
    """Count the columns that go each way: pair by pair (sparse) or through torch.cdist."""
    seen = {"sparse": 0, "dense": 0}
    minima, dense = _pairwise._add_minima, _pairwise._add_dense

    def add_minima(out, s, t, C, chunk):
        seen["sparse"] += C
        return minima(out, s, t, C, chunk)

    def add_dense(out, nz_s, blocks_s, nz_t, blocks_t, pos, width, same):
        seen["dense"] += width
        return dense(out, nz_s, blocks_s, nz_t, blocks_t, pos, width, same)

    monkeypatch.setattr(_pairwise, "_add_minima", add_minima)
    monkeypatch.setattr(_pairwise, "_add_dense", add_dense)
    return seen


@pytest.mark.parametrize("kind", ["quadtree", "cluster"])
@pytest.mark.parametrize("block_size", [None, 3])
def test_sparse_columns_equal_looped_tree_wasserstein(kind, block_size, columns):
    """Few words a histogram: the deep columns go pair by pair, the top ones to cdist."""
    _X, trees, g = _setup(n=60, T=3, seed=7, kind=kind)
    Hs, Ht = _words(9, 60, 3, g, total=2.5), _words(7, 60, 3, g, total=2.5)  # unnormalised
    D = tsw.pairwise_tsw(Hs, Ht, trees=trees, block_size=block_size)
    assert columns["sparse"] > 0
    assert columns["dense"] > 0
    torch.testing.assert_close(D, _looped(Hs, Ht, trees), rtol=1e-12, atol=1e-13)
    S = tsw.pairwise_tsw(Hs.to_sparse(), trees=trees, block_size=block_size)
    torch.testing.assert_close(S, _looped(Hs, Hs, trees), rtol=1e-12, atol=1e-13)
    assert torch.equal(S, S.T)
    assert bool((S.diagonal() == 0).all())


@pytest.mark.parametrize("kind", ["quadtree", "cluster"])
@pytest.mark.parametrize("real", [torch.float32, F64])
@pytest.mark.parametrize("share", [0.0, None, 2.0])  # all dense, the cost model, all sparse
@pytest.mark.parametrize("zeros", [0.0, 0.9])  # dense histograms, sparse ones
def test_either_way_equals_the_cdist_of_embeddings(kind, real, share, zeros, monkeypatch):
    _X, trees, g = _setup(n=50, T=3, seed=11, kind=kind)
    trees = trees.to(dtype=real)
    Hs, Ht = _hists(23, 50, g, total=3.0, zeros=zeros), _hists(17, 50, g, total=3.0, zeros=zeros)
    Hs, Ht = Hs.to(real), Ht.to(real)
    if share is not None:
        monkeypatch.setattr(_pairwise, "SPARSE_SHARE", share)
    expected = _cdist_of_embeddings(Hs, Ht, trees)
    tol = {"rtol": 1e-5, "atol": 1e-5} if real == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    for block_size in (None, 4):  # 4 rows a block; pair chunks of 4 * 17 pairs
        D = tsw.pairwise_tsw(Hs, Ht, trees=trees, block_size=block_size)
        assert D.dtype == real
        torch.testing.assert_close(D.double(), expected, **tol)
        S = tsw.pairwise_tsw(Hs, trees=trees, block_size=block_size)
        torch.testing.assert_close(S.double(), _cdist_of_embeddings(Hs, Hs, trees), **tol)
        assert torch.equal(S, S.T)
        assert bool((S.diagonal() == 0).all())


def test_pair_chunks_split_the_sparse_columns(monkeypatch):
    _X, trees, g = _setup(n=60, T=3, seed=2)
    Hs, Ht = _words(12, 60, 4, g), _words(10, 60, 4, g)
    monkeypatch.setattr(_pairwise, "SPARSE_SHARE", 2.0)
    expected = _cdist_of_embeddings(Hs, Ht, trees)
    for chunk in (1, 5, 64):
        monkeypatch.setattr(_pairwise, "PAIR_CHUNK", chunk)
        D = tsw.pairwise_tsw(Hs, Ht, trees=trees)
        torch.testing.assert_close(D, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("share", [0.0, None, 2.0])
def test_blocks_embedded_again_when_their_nonzeros_are_not_kept(share, monkeypatch):
    _X, trees, g = _setup(n=60, T=3, seed=6, kind="cluster")
    Hs, Ht = _words(11, 60, 5, g), _words(8, 60, 5, g)
    if share is not None:
        monkeypatch.setattr(_pairwise, "SPARSE_SHARE", share)
    expected = _cdist_of_embeddings(Hs, Ht, trees)
    monkeypatch.setattr(_pairwise, "KEEP_BYTES", 0)  # nothing kept: every block embedded again
    for block_size in (None, 3):
        D = tsw.pairwise_tsw(Hs, Ht, trees=trees, block_size=block_size)
        torch.testing.assert_close(D, expected, rtol=1e-12, atol=1e-12)
        S = tsw.pairwise_tsw(Hs, trees=trees, block_size=block_size)
        torch.testing.assert_close(S, _cdist_of_embeddings(Hs, Hs, trees), rtol=1e-12, atol=1e-12)
        assert torch.equal(S, S.T)


def test_negative_values_unvalidated_go_through_cdist(monkeypatch):
    """validate=False with negative masses: the sum of minima does not apply; cdist does."""
    _X, trees, g = _setup(n=60, T=3, seed=8)
    Hs, Ht = _words(6, 60, 3, g), _words(5, 60, 3, g)
    Hs[0, Hs[0].nonzero()[0]] *= -1.0
    monkeypatch.setattr(_pairwise, "SPARSE_SHARE", 2.0)
    M = edge_matrix(trees).to_dense()
    Zs, Zt = Hs @ M.T, Ht @ M.T
    D = tsw.pairwise_tsw(Hs, Ht, trees=trees, validate=False)
    torch.testing.assert_close(D, (Zs[:, None] - Zt[None]).abs().sum(-1), rtol=1e-12, atol=1e-13)
