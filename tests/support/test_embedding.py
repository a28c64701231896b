"""The edge matrix, embeddings and distance matrices: against per-tree tree_wasserstein."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from _oracle import tree_w1

import tsw
from tsw.support import _pairwise
from tsw.support._embedding import edge_matrix

F64 = torch.float64
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


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
    with warnings.catch_warnings():  # torch's notice (once a process) that CSR is beta
        warnings.simplefilter("ignore", UserWarning)
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
    assert type(Z) is sp.csr_matrix
    np.testing.assert_allclose(
        Z.toarray(), tsw.tree_embedding(Hs, trees).numpy(), rtol=1e-15, atol=1e-17
    )


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

    def add_minima(out, s, t, C, chunk, bar=None):
        seen["sparse"] += C
        return minima(out, s, t, C, chunk, bar)

    def add_dense(out, nz_s, blocks_s, nz_t, blocks_t, pos, width, same, bar=None):
        seen["dense"] += width
        return dense(out, nz_s, blocks_s, nz_t, blocks_t, pos, width, same, bar)

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


# --------------------------------------------------------------------------- gradients


def _explicit_map(trees):
    """The (E, n) matrix diag(w) B / T, built by walking each point's path to the root."""
    cols = []
    for tree in trees:
        par = tree.parents.tolist()
        w = tree.edge_lengths.tolist()
        below = {}
        for i, leaf in enumerate(tree.leaves.tolist()):
            v = leaf
            while par[v] >= 0:
                below.setdefault(v, set()).add(i)
                v = par[v]
        for v, points in sorted(below.items()):
            col = torch.zeros(trees.n_points, dtype=F64)
            col[sorted(points)] = w[v] / len(trees)
            cols.append(col)
    return torch.stack(cols)


@pytest.mark.parametrize("kind", ["quadtree", "cluster"])
def test_embedding_gradient_is_the_linear_map_at_zero_entries_too(kind):
    """d/dh of |Z(h) - Z(k)|_1 is B^T diag(w) sign(...) / T, also where h is zero."""
    _X, trees, g = _setup(n=25, d=2, T=3, seed=9, kind=kind)
    H, K = _hists(3, 25, g), _hists(3, 25, g)
    assert bool((H == 0).any())
    M = _explicit_map(trees)
    Hg = H.clone().requires_grad_()
    (tsw.tree_embedding(Hg, trees) - tsw.tree_embedding(K, trees)).abs().sum().backward()
    expected = torch.sign((H - K) @ M.T) @ M
    torch.testing.assert_close(Hg.grad, expected, rtol=1e-12, atol=1e-14)
    assert bool((Hg.grad[H == 0] != 0).any())  # the zero entries have their gradient
    # and a linear functional: <G, Z> has the gradient G M in the merged columns
    Z = tsw.tree_embedding(H, trees)
    G = torch.randn(Z.shape, generator=g, dtype=F64)
    Hg.grad = None
    (tsw.tree_embedding(Hg, trees) * G).sum().backward()
    eye = tsw.tree_embedding(torch.eye(25, dtype=F64), trees)  # row i: point i's column
    torch.testing.assert_close(Hg.grad, G @ eye.T, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("one_set", [False, True])
def test_pairwise_gradient_is_the_explicit_l1s(one_set):
    """Values unchanged by requires_grad; gradients those of the explicit |M (h - k)|_1."""
    _X, trees, g = _setup(n=30, d=2, T=3, seed=10)
    Hs, Ht = _hists(5, 30, g, total=2.0), _hists(4, 30, g, total=2.0)
    M = _explicit_map(trees)
    W = torch.randn(5, 5 if one_set else 4, generator=g, dtype=F64)
    a, b = Hs.clone().requires_grad_(), Ht.clone().requires_grad_()
    D = tsw.pairwise_tsw(a, trees=trees) if one_set else tsw.pairwise_tsw(a, b, trees=trees)
    plain = tsw.pairwise_tsw(Hs, trees=trees) if one_set else tsw.pairwise_tsw(Hs, Ht, trees=trees)
    assert torch.equal(D.detach(), plain)
    (D * W).sum().backward()
    a2, b2 = Hs.clone().requires_grad_(), Ht.clone().requires_grad_()
    other = a2 if one_set else b2
    explicit = ((a2 @ M.T)[:, None] - (other @ M.T)[None]).abs().sum(-1)
    torch.testing.assert_close(explicit.detach(), plain, rtol=1e-12, atol=1e-13)
    (explicit * W).sum().backward()
    torch.testing.assert_close(a.grad, a2.grad, rtol=1e-12, atol=1e-13)
    if not one_set:
        torch.testing.assert_close(b.grad, b2.grad, rtol=1e-12, atol=1e-13)
    assert bool((a.grad[Hs == 0] != 0).any())


def test_pairwise_gradcheck_and_gradgradcheck():
    _X, trees, g = _setup(n=12, d=2, T=2, seed=11)
    Hs, Ht = _hists(3, 12, g), _hists(2, 12, g)
    a, b = Hs.clone().requires_grad_(), Ht.clone().requires_grad_()

    def two(x, y):  # unvalidated: gradcheck's steps leave the simplex
        return tsw.pairwise_tsw(x, y, trees=trees, validate=False)

    def one(x):
        return tsw.pairwise_tsw(x, trees=trees, validate=False, block_size=2)

    assert torch.autograd.gradcheck(two, (a, b))
    assert torch.autograd.gradcheck(one, (a,))
    # the second derivative is zero away from ties of two coordinates (where the first
    # jumps): positive histograms of unequal totals have none (equal totals tie on the
    # edges above every point)
    p, q = (a.detach() + 0.05).requires_grad_(), (b.detach() + 0.07).requires_grad_()
    assert torch.autograd.gradgradcheck(two, (p, q))
    H = Hs.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda x: tsw.tree_embedding(x + 0.01, trees), (H,))
    assert torch.autograd.gradgradcheck(lambda x: tsw.tree_embedding(x + 0.01, trees), (H,))


def test_sparse_histograms_requiring_grad_are_refused():
    _X, trees, g = _setup(n=12, d=2, T=2, seed=11)
    H = _hists(3, 12, g).to_sparse().requires_grad_()
    with pytest.raises(ValueError, match=r"sparse hists_s .*requires grad: pass hists_s\.to_dense"):
        tsw.pairwise_tsw(H, trees=trees)
    with pytest.raises(ValueError, match=r"sparse hists .*requires grad: pass hists\.to_dense"):
        tsw.tree_embedding(H, trees)
    with torch.no_grad():
        assert tsw.tree_embedding(H, trees).is_sparse


# --------------------------------------------------------------------------- sparse out


@pytest.mark.parametrize(
    "layout", ["coo", "csr", "csc", "scipy_csr_array", "scipy_coo_matrix", "scipy_csc_array"]
)
def test_sparse_in_sparse_out_of_the_same_kind(layout):
    _X, trees, g = _setup(n=40, d=3, T=3, seed=12)
    H = _words(6, 40, 4, g, total=3.0)
    dense = tsw.tree_embedding(H, trees)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's beta notice on CSR / CSC
        given = {
            "coo": lambda: H.to_sparse(),
            "csr": lambda: H.to_sparse_csr(),
            "csc": lambda: H.to_sparse_csc(),
            "scipy_csr_array": lambda: sp.csr_array(H.numpy()),
            "scipy_coo_matrix": lambda: sp.coo_matrix(H.numpy()),
            "scipy_csc_array": lambda: sp.csc_array(H.numpy()),
        }[layout]()
        Z = tsw.tree_embedding(given, trees)
    if layout.startswith("scipy"):
        assert type(Z) is type(given)  # the same class and format
        assert Z.nnz == int((dense != 0).sum())
        np.testing.assert_allclose(Z.toarray(), dense.numpy(), rtol=1e-14, atol=1e-17)
        return
    expected = {"coo": torch.sparse_coo, "csr": torch.sparse_csr, "csc": torch.sparse_csc}
    assert Z.layout == expected[layout]
    if layout == "coo":
        assert Z.is_coalesced()
        assert Z._nnz() == int((dense != 0).sum())  # nonzeros only
    torch.testing.assert_close(Z.to_dense(), dense, rtol=1e-14, atol=1e-17)


@pytest.mark.parametrize("factor", [0, None, 10**9])  # sorting, the cost model, dense scratch
@pytest.mark.parametrize("expand", [7, None])  # blocks of 7 expansions, the default
def test_embedding_entries_either_way_equal_the_dense_embedding(factor, expand, monkeypatch):
    from tsw.support import _embedding
    from tsw.support._embedding import _embed, _merged, _triplets, embed_entries

    _X, trees, g = _setup(n=50, d=2, T=3, seed=13, kind="cluster")
    H = _words(9, 50, 5, g)
    H[4] = 0.0  # an empty row
    if factor is not None:
        monkeypatch.setattr(_embedding, "DENSE_FACTOR", factor)
    if expand is not None:
        monkeypatch.setattr(_embedding, "EXPAND", expand)
    trip = _triplets(H, "H", trees)
    rows, cols, vals = embed_entries(trip, _merged(trees))
    Z = _embed(trip, _merged(trees))
    r, c = torch.nonzero(Z, as_tuple=True)
    assert torch.equal(rows, r)
    assert torch.equal(cols, c)
    torch.testing.assert_close(vals, Z[r, c], rtol=1e-15, atol=0)


_MEMORY_SCRIPT = r"""
import resource, sys
import numpy as np, torch
torch.set_num_threads(1)
import tsw
rng = np.random.default_rng(0)
n, k, words = 10000, 10000, 5
support = torch.as_tensor(rng.normal(size=(n, 2)))
trees = tsw.sample_quadtrees(support, 2, seed=0)
index = torch.as_tensor(np.stack([np.repeat(np.arange(k), words), rng.integers(0, n, k * words)]))
ones = torch.full((k * words,), 1.0 / words, dtype=torch.float64)  # totals 1
H = torch.sparse_coo_tensor(index, ones, (k, n)).coalesce()
first, second = H.index_select(0, torch.arange(1000)), H.index_select(0, torch.arange(1000, 3000))
small = H.index_select(0, torch.arange(20))
tsw.pairwise_tsw(small, small, trees=trees)  # the code paths' one-time allocations
size = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
limit = size + int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
if sys.argv[1] == "embedding":
    Z = tsw.tree_embedding(H, trees)
    assert Z.shape[0] * Z.shape[1] * 8 > 5 * int(sys.argv[2])  # dense: over 5 x the bound
    print("ok", Z._nnz())
else:
    D = tsw.pairwise_tsw(first, second, trees=trees)
    print("ok", float(D.sum()))
"""


@pytest.mark.parametrize("part", ["embedding", "pairwise"])
def test_sparse_embeddings_stay_within_a_memory_bound(part, tmp_path):
    """10,000 histograms of 5 words on 10,000 points: a dense embedding takes 1.9 GB.

    In a child process whose address space may grow by 250 MB only (RLIMIT_AS), the
    sparse embedding of all of them (7e5 nonzeros), or a (1000, 2000) matrix of
    pairwise_tsw, is computed; a dense (k, E) embedding, or dense (rows, E) blocks of one
    (134 MB each), would fail to allocate.
    """
    import os
    import subprocess
    import sys

    script = tmp_path / "memory.py"
    script.write_text(_MEMORY_SCRIPT)
    env = {**os.environ, "TSW_NUMBA": "0", "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-W", "ignore", str(script), part, str(250 * 2**20)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok")


# --------------------------------------------------------------------------- edges


def test_equal_totals_are_checked_relative_to_their_size():
    """Totals of 1e6 that differ by 1e-8 pass (1e-14 relative); 1e-14 and 2e-14 do not."""
    _X, trees, g = _setup(n=20, d=2, T=2, seed=14)
    H = _hists(2, 20, g)
    big = 1e6 * H
    big[1] *= 1 + 1e-14  # totals 1e6 and 1e6 + 1e-8
    assert float(big[1].sum() - big[0].sum()) != 0.0
    D = tsw.pairwise_tsw(big, trees=trees)
    torch.testing.assert_close(D, 1e6 * tsw.pairwise_tsw(H, trees=trees), rtol=1e-12, atol=0)
    tiny = H * torch.tensor([[1e-14], [2e-14]], dtype=F64)
    with pytest.raises(ValueError, match="equal total mass"):
        tsw.pairwise_tsw(tiny, trees=trees)
    with pytest.raises(ValueError, match="equal total mass"):
        tsw.pairwise_tsw(tiny[:1], tiny[1:], trees=trees)
    with pytest.raises(ValueError, match="must have equal total mass"):
        tsw.pairwise_flowtree(tiny[:1], tiny[1:], trees=trees)
    torch.testing.assert_close(
        tsw.pairwise_flowtree(big[:1], big[1:], trees=trees),
        1e6 * tsw.pairwise_flowtree(H[:1], H[1:], trees=trees),
        rtol=1e-12,
        atol=0,
    )


def test_traced_calls_are_refused():
    """A trace would freeze the histograms' nonzeros: on new ones it returned wrong values."""
    _X, trees, g = _setup(n=8, d=2, T=2, seed=15)
    H, K = _hists(3, 8, g), _hists(3, 8, g)
    assert not torch.equal(H != 0, K != 0)
    for name, fn in (
        ("tsw.pairwise_tsw", lambda h: tsw.pairwise_tsw(h, trees=trees)),
        ("tsw.tree_embedding", lambda h: tsw.tree_embedding(h, trees)),
        ("tsw.pairwise_flowtree", lambda h: tsw.pairwise_flowtree(h, trees=trees)),
        ("tsw.SupportTrees.place", lambda x: trees.place(x)),
    ):
        example = H if name != "tsw.SupportTrees.place" else _X
        with (
            pytest.raises(RuntimeError, match=rf"{name}: torch.jit.trace cannot record"),
            warnings.catch_warnings(action="ignore", category=DeprecationWarning),
        ):
            torch.jit.trace(fn, (example,), check_trace=False)
    assert torch.equal(trees.place(_X), torch.stack([t.leaves for t in trees]))


def test_verbose_shows_embeddings_then_distances(capsys, monkeypatch):
    import sys

    _X, trees, g = _setup(n=40, d=2, T=2, seed=16)
    H = _words(12, 40, 3, g)
    quiet = tsw.pairwise_tsw(H, trees=trees, block_size=5)
    assert capsys.readouterr() == ("", "")
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # a printed line instead of tqdm
    loud = tsw.pairwise_tsw(H, trees=trees, block_size=5, verbose=True)
    out = capsys.readouterr().out
    assert "pairwise_tsw (embeddings): 3/3 block" in out
    assert "pairwise_tsw (distances):" in out
    assert torch.equal(quiet, loud)


def test_read_only_arrays_are_read_without_a_warning():
    """A read-only array (a memmap, scikit-learn's checks) is copied, not warned about."""
    _X, trees, g = _setup(n=10, d=2, T=2, seed=17)
    H = _hists(3, 10, g).numpy()
    H.flags.writeable = False
    csr = sp.csr_array(H)
    csr.data.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Z = tsw.tree_embedding(H, trees)
        np.testing.assert_allclose(tsw.tree_embedding(csr, trees).toarray(), Z, rtol=1e-15)
        np.testing.assert_allclose(
            tsw.pairwise_tsw(H, trees=trees), tsw.pairwise_tsw(csr, trees=trees)
        )
