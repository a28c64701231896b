"""``tsw.core._blocks``: blocks of items and slices (``chunk_size``).

Blocks give the one-block values and gradients (bit for bit up to rounding), for every
chunked distance, under upstream gradients that differ across slices and with other
tensors requiring grad; ``plan_blocks`` is checked by properties of its plan (every
(item, slice) once, memory budget, cache cap); the blocks' peak memory is measured in a
spawned process.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tsw
import tsw.core._blocks as blocks
from tsw.core._blocks import Block, plan_blocks

F64 = torch.float64


def _data(d=4, sphere=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(20, d, generator=g, dtype=F64)
    Y = torch.randn(15, d, generator=g, dtype=F64) + 0.5
    if sphere:
        X, Y = torch.nn.functional.normalize(X, dim=-1), torch.nn.functional.normalize(Y, dim=-1)
    g2 = torch.Generator().manual_seed(seed + 1)
    a = torch.rand(20, generator=g2, dtype=F64) + 0.1
    b = torch.rand(15, generator=g2, dtype=F64) + 0.1
    return X, Y, a / a.sum(), b / b.sum()


CHUNKED = [
    ("db_tsw", lambda *m, **o: tsw.db_tsw(*m, n_trees=11, p=2, **o), False),
    ("db_tsw_d2", lambda *m, **o: tsw.db_tsw(*m[:2], n_trees=11, **o), False),
    ("tsw_sl_chain", lambda *m, **o: tsw.tsw_sl(*m, n_trees=11, **o), False),
    ("circular_tsw", lambda *m, **o: tsw.circular_tsw(*m, radius=0.2, n_trees=11, **o), False),
    ("spatial_tsw", lambda *m, **o: tsw.spatial_tsw(*m, n_trees=11, **o), False),
    ("partial_tsw", lambda *m, **o: tsw.partial_tsw(*m, mass_t=0.7, n_trees=11, **o), False),
    ("sw", lambda *m, **o: tsw.sw(*m, n_projections=11, **o), False),
    ("stsw", lambda *m, **o: tsw.stsw(*m, n_trees=11, p=1.5, **o), True),
    ("stsw_unif", lambda *m, **o: tsw.stsw_unif(m[0], m[2], n_trees=11, **o), True),
    ("spatial_stsw", lambda *m, **o: tsw.spatial_stsw(*m, n_trees=11, **o), True),
]


@pytest.mark.parametrize(("name", "call", "sphere"), CHUNKED, ids=[c[0] for c in CHUNKED])
@pytest.mark.parametrize("chunk", [1, 4])
def test_chunked_equals_unchunked(name, call, sphere, chunk):
    d = 2 if name == "db_tsw_d2" else 4
    X, Y, a, b = _data(d=d, sphere=sphere)
    results = []
    for chunk_size in (None, chunk):
        leaves = [t.clone().requires_grad_(True) for t in (X, Y, a, b)]
        value = call(*leaves, seed=3, chunk_size=chunk_size)
        grads = torch.autograd.grad(value, leaves, allow_unused=True)
        results.append((value, grads))
    (v0, g0), (v1, g1) = results
    torch.testing.assert_close(v1, v0, rtol=1e-12, atol=1e-14)
    for x, y in zip(g1, g0, strict=True):
        if y is None:
            assert x is None
        else:
            torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("method", ["db_tsw", "sw"])
def test_chunked_gradcheck(method):
    # blocks of 2 slices (the supports' gradients go into the driver's sums) against
    # finite differences
    X, Y, _, _ = _data(d=5)
    X = X[:6].clone().requires_grad_(True)
    Yr = Y[:5].clone().requires_grad_(True)
    trees = tsw.sample_concurrent_lines(5, n_trees=5, n_lines=3, seed=0, dtype=F64)
    directions = tsw.sample_projections(5, 5, seed=0, dtype=F64)

    def f(X, Y):
        if method == "sw":
            return tsw.sw(X, Y, projections=directions, p=2, chunk_size=2)
        return tsw.db_tsw(X, Y, trees=trees, p=2, chunk_size=2)

    assert torch.autograd.gradcheck(f, (X, Yr))


def test_chunked_batched_and_logged():
    X, Y, _, _ = _data()
    Xb, Yb = torch.stack([X, X + 1]), torch.stack([Y, Y])
    v0, log0 = tsw.db_tsw(Xb, Yb, n_trees=9, seed=0, chunk_size=None, log=True)
    v1, log1 = tsw.db_tsw(Xb, Yb, n_trees=9, seed=0, chunk_size=2, log=True)
    torch.testing.assert_close(v1, v0, rtol=1e-12, atol=0)
    torch.testing.assert_close(log1["per_tree"], log0["per_tree"], rtol=1e-12, atol=0)


def test_auto_blocks_under_a_small_memory_budget(monkeypatch):
    """A memory budget of three trees cuts the trees into blocks: the one-block value and
    gradient (the plan's budget property is checked on ``plan_blocks`` below)."""
    X, Y, _, _ = _data()
    # one tree's block: 4 lines x 35 atoms x 16 elements x 8 bytes = 17920 bytes
    monkeypatch.setattr(blocks, "MEMORY_BUDGET", 3 * 17920)
    results = []
    for chunk_size in ("auto", None):
        Xs = X.clone().requires_grad_(True)
        value = tsw.db_tsw(Xs, Y, n_trees=10, seed=0, chunk_size=chunk_size)
        results.append((value, *torch.autograd.grad(value, Xs)))
    for x, y in zip(*results, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("bad", [0, -1, 2.5, "all"])
def test_bad_chunk_size(bad):
    X, Y, _, _ = _data()
    with pytest.raises((TypeError, ValueError), match="chunk_size"):
        tsw.db_tsw(X, Y, n_trees=3, chunk_size=bad)


def _grads_both_ways(fn, leaves):
    out = []
    for chunk_size in (None, 2):
        ls = [t.detach().clone().requires_grad_(True) for t in leaves]
        value = fn(*ls, chunk_size=chunk_size)
        out.append((value.detach(), torch.autograd.grad(value, ls)))
    return out


@pytest.mark.parametrize(
    "case", ["per_tree_loss", "learnable_alpha", "tensor_mass", "batched_per_tree"]
)
def test_chunked_gradients_beyond_the_mean(case):
    # upstream gradients that differ across trees, and tensors other than the measures that
    # require grad (closed over by the projection): chunked equals unchunked
    X, Y, _, _ = _data()
    if case == "per_tree_loss":

        def fn(X, Y, chunk_size):
            value, log = tsw.db_tsw(X, Y, n_trees=7, seed=0, log=True, chunk_size=chunk_size)
            return value + (log["per_tree"] * torch.arange(7.0, dtype=F64)).sum()

        leaves = [X, Y]
    elif case == "batched_per_tree":

        def fn(X, Y, chunk_size):
            _, log = tsw.db_tsw(X, Y, n_trees=7, seed=0, log=True, chunk_size=chunk_size)
            return (log["per_tree"] * torch.tensor([[1.0], [3.0]], dtype=F64)).sum()

        leaves = [torch.stack([X, X + 1]), torch.stack([Y, Y])]
    elif case == "learnable_alpha":

        def fn(X, alpha, chunk_size):
            return tsw.tsw_sl(
                X, Y, n_trees=7, n_lines=3, alpha=alpha, seed=0, chunk_size=chunk_size
            )

        leaves = [X, torch.tensor([0.2, 0.3, 0.5], dtype=F64)]
    else:

        def fn(X, m, chunk_size):
            return tsw.partial_tsw(X, Y, mass_s=m, n_trees=7, seed=0, chunk_size=chunk_size)

        leaves = [X, torch.tensor(0.8, dtype=F64)]
    (v0, g0), (v1, g1) = _grads_both_ways(fn, leaves)
    torch.testing.assert_close(v1, v0, rtol=1e-12, atol=1e-14)
    for x, y in zip(g1, g0, strict=True):
        assert y.abs().max() > 0
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("cache", [1100, 400, 60])
@pytest.mark.parametrize("batched_trees", [False, True])
def test_auto_blocks_give_the_one_block_values_and_gradients(monkeypatch, cache, batched_trees):
    """Blocks of whole items (cache 1100), of one item's trees (400 and 60 elements), and
    of all items' trees (batched trees): values, per-tree costs and gradients (of the
    value and of a loss built from the per-tree costs) equal one block's."""
    monkeypatch.setattr(blocks, "CACHE_BLOCK_ELEMENTS", cache)
    monkeypatch.setattr(blocks, "COMPILED_BLOCK_ELEMENTS", cache)
    g = torch.Generator().manual_seed(5)
    X = torch.randn(5, 10, 3, generator=g, dtype=F64)
    Y = torch.randn(5, 8, 3, generator=g, dtype=F64) + 0.5
    center = torch.zeros(5, 3, dtype=F64) if batched_trees else torch.zeros(3, dtype=F64)
    trees = tsw.sample_concurrent_lines(3, n_trees=7, n_lines=4, center=center, seed=0, dtype=F64)
    results = []
    for chunk_size in (None, "auto"):
        Xs, Ys = X.clone().requires_grad_(True), Y.clone().requires_grad_(True)
        value, log = tsw.db_tsw(Xs, Ys, trees=trees, chunk_size=chunk_size, log=True)
        loss = value.sum() + (log["per_tree"] * torch.arange(7.0, dtype=F64)).sum()
        results.append((value, log["per_tree"], *torch.autograd.grad(loss, (Xs, Ys))))
        value2 = tsw.db_tsw(Xs, Ys, trees=trees, chunk_size=chunk_size)
        results[-1] += torch.autograd.grad(value2.sum(), (Xs, Ys))
    for x, y in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("d", [2, 5, 20])  # 20: above NARROW_MAX_DIM (addmm_ / baddbmm_)
@pytest.mark.parametrize("kind", ["one", "batch_shared_trees", "batch_trees"])
@pytest.mark.parametrize("method", ["db_tsw", "tsw_sl_chain", "sw"])
def test_projection_gradients_go_into_the_accumulators(d, kind, method):
    """In blocks, the supports' projection gradient is added into the driver's sums
    (addmm_ / baddbmm_ below and above NARROW_MAX_DIM, nothing returned through autograd):
    values and gradients equal the one-block evaluation's, for tree systems and SW's
    directions, shared by the items or per item."""
    g = torch.Generator().manual_seed(2)
    shape = () if kind == "one" else (3,)
    X = torch.randn(*shape, 12, d, generator=g, dtype=F64)
    Y = torch.randn(*shape, 9, d, generator=g, dtype=F64) + 0.5
    center = torch.zeros(3, d, dtype=F64) if kind == "batch_trees" else torch.zeros(d, dtype=F64)
    if method == "db_tsw":
        trees = tsw.sample_concurrent_lines(
            d, n_trees=7, n_lines=3, center=center, seed=0, dtype=F64
        )
        call = tsw.db_tsw
    elif method == "tsw_sl_chain":
        trees = tsw.sample_chain_lines(d, n_trees=7, n_lines=3, center=center, seed=0, dtype=F64)
        call = tsw.tsw_sl
    else:  # directions (d, L), or (B, d, L) per item
        trees = tsw.sample_projections(d, 7, seed=0, dtype=F64)
        if kind == "batch_trees":
            trees = torch.stack([trees, trees.flip(-1), trees.roll(1, -1)])

        def call(X, Y, trees, chunk_size):
            return tsw.sw(X, Y, projections=trees, chunk_size=chunk_size)

    results = []
    for chunk_size in (None, 2):
        leaves = [X.clone().requires_grad_(True), Y.clone().requires_grad_(True)]
        value = call(*leaves, trees=trees, chunk_size=chunk_size).sum()
        results.append((value, torch.autograd.grad(value, leaves)))
    (v0, g0), (v1, g1) = results
    torch.testing.assert_close(v1, v0, rtol=1e-12, atol=1e-14)
    for x, y in zip(g1, g0, strict=True):
        assert y.abs().max() > 0
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-14)


def test_second_backward_through_a_retained_graph():
    # the first backward hands the accumulated sums over (scaled in place); a second one
    # through the retained graph forms them again, bit-identical
    X, Y, _, _ = _data()
    X.requires_grad_(True)
    value = tsw.db_tsw(X, Y, n_trees=7, seed=0, chunk_size=2) * 3.0
    value.backward(retain_graph=True)
    first = X.grad.clone()
    value.backward()
    assert torch.equal(X.grad, 2 * first)
    expected = torch.autograd.grad(3.0 * tsw.db_tsw(X, Y, n_trees=7, seed=0, chunk_size=None), X)[0]
    torch.testing.assert_close(first, expected, rtol=1e-12, atol=1e-14)


def _plan(**sizes):
    base = {"items": 1, "slices": 250, "lines": 4, "atoms": 4000, "dim": 64, "element_size": 4}
    base.update(chunk_size="auto", cpu=True, compiled=False, shared=True)
    base.update(sizes)
    return base, plan_blocks(**base)


def _check_cover(plan: list[Block], B: int, T: int) -> None:
    """The blocks cover every (item, slice) pair once, in row-major order."""
    seen = [(i, t) for b in plan for i in range(b.i0, b.i1) for t in range(b.t0, b.t1)]
    assert sorted(seen) == [(i, t) for i in range(B) for t in range(T)]
    assert seen == sorted(seen, key=lambda it: (it[0], it[1])) or all(
        b.i0 == 0 and b.i1 == B for b in plan
    )


@settings(max_examples=300, deadline=None)
@given(
    items=st.integers(1, 40),
    slices=st.integers(1, 2000),
    lines=st.integers(1, 8),
    atoms=st.integers(2, 300_000),
    dim=st.integers(1, 4096),
    element_size=st.sampled_from([4, 8]),
    cpu=st.booleans(),
    compiled=st.booleans(),
    shared=st.booleans(),
)
def test_auto_plan_properties(
    items, slices, lines, atoms, dim, element_size, cpu, compiled, shared
):
    """``"auto"``: every (item, slice) once; a block of more than one tree stays under the
    memory budget; on the CPU a block of more than the least trees stays under twice the
    cache cap, and off the CPU every block holds every item; batched trees are never
    cut by item."""
    _, plan = _plan(
        items=items, slices=slices, lines=lines, atoms=atoms, dim=dim,
        element_size=element_size, cpu=cpu, compiled=compiled, shared=shared,
    )  # fmt: skip
    _check_cover(plan, items, slices)
    per_tree = blocks.WORK_ELEMENTS_PER_LINE_POINT * element_size * lines * atoms
    cap = blocks.COMPILED_BLOCK_ELEMENTS if compiled else blocks.CACHE_BLOCK_ELEMENTS
    least = -(-dim // (3 * lines))
    for b in plan:
        n_items, n_trees = b.i1 - b.i0, b.t1 - b.t0
        if n_trees > 1:
            assert n_items * n_trees * per_tree <= blocks.MEMORY_BUDGET
        if not cpu or not shared:
            assert (b.i0, b.i1) == (0, items)
        if cpu and n_trees > max(least, 1):
            assert n_items * n_trees * lines * atoms <= 2 * cap


def test_plan_of_an_int_and_of_none():
    _, plan = _plan(items=3, slices=10, chunk_size=4)
    assert plan == [Block(0, 3, 0, 4), Block(0, 3, 4, 8), Block(0, 3, 8, 10)]
    _, plan = _plan(items=3, slices=10, chunk_size=None)
    assert plan == [Block(0, 3, 0, 10)]


def test_auto_plan_cuts_only_what_exceeds_the_cache():
    """A problem within twice the cache cap is one block; 16 small items are grouped by
    whole items; one large item is cut by trees (at least d/3 lines a block)."""
    _, plan = _plan(atoms=100, slices=50)
    assert plan == [Block(0, 1, 0, 50)]
    _, plan = _plan(items=16, atoms=400)  # 4e5 elements an item
    assert all(b.t0 == 0 and b.t1 == 250 for b in plan)
    assert len(plan) > 1
    _, plan = _plan(atoms=20_000, dim=3072)  # d / 3 lines: 256 trees of 4 lines
    assert plan == [Block(0, 1, 0, 250)]


def _blocked_step(n: int, d: int, chunk_size: int | None = 1):
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    X = (torch.randn(n, d, generator=g) + 5.0).requires_grad_(True)
    Y = torch.randn(n, d, generator=g) + 5.5
    trees = tsw.sample_concurrent_lines(
        d, n_trees=2, n_lines=4, seed=0, center=torch.full((d,), 5.0)
    )
    return lambda: tsw.db_tsw(X, Y, trees=trees, validate=False, chunk_size=chunk_size).backward()


def test_blocks_hold_no_translated_copy_of_the_points():
    """Peak growth of a blocked call stays under 2.9x the bytes of one support.

    N = M = 2e5, d = 128 (X: 97.7 MiB), two one-tree blocks. The driver's accumulator
    (handed over as the gradient of X) takes 1x; the blocks' working memory is small.
    Measured 235 MiB (2.40x). Forming the squared norms' gradient apart and letting
    autograd add it takes 319 MiB (3.27x); holding translated copies of both supports
    takes 550 MiB (5.6x).
    """
    from benchmarks._memory import peak_growth

    n, d = 200_000, 128
    support_mib = n * d * 4 / 2**20
    growth = peak_growth(_blocked_step, n, d)
    assert growth < 2.9 * support_mib, (
        f"peak grew by {growth:.0f} MiB ({growth / support_mib:.2f}x)"
    )


def test_one_block_forms_one_gradient_buffer_of_the_products():
    """Peak growth of a call in one block stays under 3.6x the bytes of one support.

    N = M = 2e5, d = 128, two trees in one block (``chunk_size=None``). The products'
    backward adds every group's gradient of X into one buffer that owns its storage,
    so that autograd adds the squared norms' gradient into it in place. Measured 304 MiB
    (3.12x); with the first group's gradient a view of its product, autograd adds the
    two out of place: 403 MiB (4.13x), and one tree at N = 1e7 does not fit in 24 GiB
    where two trees in blocks do.
    """
    from benchmarks._memory import peak_growth

    n, d = 200_000, 128
    support_mib = n * d * 4 / 2**20
    growth = peak_growth(_blocked_step, n, d, None)
    assert growth < 3.6 * support_mib, (
        f"peak grew by {growth:.0f} MiB ({growth / support_mib:.2f}x)"
    )


def _target_work(n, d, trees, lines, chunk):  # runs in a spawned child (peak_growth)
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, d, generator=g).requires_grad_(True)
    Y = torch.randn(n, d, generator=g) + 0.5
    T = tsw.sample_concurrent_lines(d, n_trees=trees, n_lines=lines, seed=0, center=torch.zeros(d))

    def work():
        tsw.db_tsw(X, Y, trees=T, validate=False, chunk_size=chunk).backward()

    return work


@pytest.mark.slow
def test_memory_target_1e5_points_1000_trees(monkeypatch):
    """N = M = 1e5, d = 128, 1000 trees x 4 lines, forward + backward under 4 GiB.

    The child uses ``MALLOC_MMAP_THRESHOLD_=65536`` so that its resident size counts live
    memory: glibc's default dynamic threshold keeps freed blocks in the heap.
    """
    from benchmarks._memory import peak_growth

    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    growth = peak_growth(_target_work, 100_000, 128, 1000, 4, "auto", timeout=1800)
    assert growth < 4096, growth
