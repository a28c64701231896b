"""``tsw.core._sort``: the one sort of every closed form, against ``torch.sort`` and NumPy.

``sort_last`` (NumPy's permutation on the CPU, torch.sort's elsewhere), ``unsort_last``
(its inverse) and the packed float32 sort of the compiled kernels, which must give
exactly NumPy's stable argsort on adversarial rows.
"""

from __future__ import annotations

import pytest
import torch

from tsw.core import _kernel_loading, _sort, _threads
from tsw.core._sort import sort_last


def _check(x: torch.Tensor) -> None:
    values, order = sort_last(x)
    want = torch.sort(x, dim=-1).values
    assert values.dtype == x.dtype
    assert order.dtype == torch.int64
    assert values.shape == order.shape == x.shape
    assert torch.equal(values, want)
    # a permutation of every row, sorting it
    assert torch.equal(torch.sort(order, dim=-1).values, torch.arange(x.shape[-1]).expand_as(x))
    assert torch.equal(torch.gather(x, -1, order), want)


@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.float16, torch.int64])
@pytest.mark.parametrize("shape", [(7,), (3, 5, 40), (2, 1), (4, 0)])
def test_sorts_like_torch(dt, shape):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(shape, generator=g) * 10).to(dt)
    _check(x)


def test_ties_nan_infinities_and_strided_input():
    x = torch.tensor([[3.0, float("nan"), -0.0, 0.0, -float("inf"), 3.0, float("inf"), 1.0]])
    values, _ = sort_last(x)
    assert torch.equal(values[:, :-1], torch.sort(x, dim=-1).values[:, :-1])
    assert bool(values[0, -1].isnan())  # NaN last, as torch.sort puts it
    base = torch.randn(6, 50, dtype=torch.float64)
    _check(base.T)  # non-contiguous
    _check(base[:, ::3])
    _check(base.expand(2, 6, 50))


def test_threads_share_rows(monkeypatch):
    """Above PARALLEL_MIN elements the rows are shared among threads: same result."""
    x = torch.randn(37, 300, generator=torch.Generator().manual_seed(1))
    one = sort_last(x)
    monkeypatch.setattr(_threads, "PARALLEL_MIN", 1)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        three = sort_last(x)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one[0], three[0])
    assert torch.equal(one[1], three[1])


def test_values_carry_the_gradient_of_torch_sort():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 9, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(4, 9, dtype=torch.float64, generator=g)
    (ga,) = torch.autograd.grad((sort_last(x)[0] * w).sum(), x)
    (gb,) = torch.autograd.grad((torch.sort(x, dim=-1).values * w).sum(), x)
    assert torch.equal(ga, gb)


def test_falls_back_to_torch_without_numpy(monkeypatch):
    calls = []

    def no_numpy(x):
        calls.append(x.shape)
        return None

    monkeypatch.setattr(_sort, "_numpy_argsort", no_numpy)
    _check(torch.randn(3, 8))
    assert calls == [(3, 8)]


def test_numpy_is_not_used_off_the_cpu_or_while_compiling(monkeypatch):
    def fail(x):
        raise AssertionError("NumPy sort used")

    monkeypatch.setattr(_sort, "_numpy_argsort", fail)
    _check(torch.randn(3, 8, dtype=torch.float16))  # a dtype NumPy does not sort here
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    _check(torch.randn(3, 8))


def _unsort_reference(values: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """The same map by a gather with the inverse permutation (``argsort`` of the order)."""
    order = order.expand(values.shape)
    return torch.gather(values, -1, torch.argsort(order, dim=-1))


@pytest.mark.parametrize("numpy_path", [False, True])
@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("threads", [1, 3])
def test_unsort_inverts_the_sort(monkeypatch, numpy_path, dt, threads):
    """Both paths (scatter_ and NumPy's indexed assignment, in 1 or 3 threads) are the
    inverse of the sort's gather, also with an order broadcast over lines and ``out=``.
    float16 always takes scatter_ (NumPy does not handle it here)."""
    if numpy_path:
        monkeypatch.setattr(_sort, "_UNSORT_MIN", 2)
        monkeypatch.setattr(_threads, "PARALLEL_MIN", 1)
    scattered = []
    real = torch.Tensor.scatter_

    def spy(self, *args, **kwargs):
        scattered.append(self.shape)
        return real(self, *args, **kwargs)

    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 1, 64, generator=g, dtype=torch.float64)
    _, order = sort_last(x)  # (5, 1, 64), shared by 4 lines
    values = torch.randn(5, 4, 64, generator=g, dtype=torch.float64).to(dt)
    want = _unsort_reference(values, order)
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    monkeypatch.setattr(torch.Tensor, "scatter_", spy)
    try:
        got = _sort.unsort_last(values, order)
        out = torch.full_like(values, float("nan"))
        into = _sort.unsort_last(values, order, out=out)
        strided = _sort.unsort_last(values.transpose(0, 1).contiguous().transpose(0, 1), order)
    finally:
        torch.set_num_threads(saved)
        monkeypatch.setattr(torch.Tensor, "scatter_", real)
    # the path the test means ran: three calls through scatter_, or none
    assert len(scattered) == (0 if numpy_path and dt != torch.float16 else 3)
    assert into is out
    for r in (got, into, strided):
        assert r.dtype == dt
        assert r.shape == values.shape
        assert torch.equal(r, want)
    # and it undoes the sort: the sorted values go back to x
    xs, o = sort_last(x.squeeze(1))
    assert torch.equal(_sort.unsort_last(xs, o), x.squeeze(1))


def _awkward_rows(n_rows: int, n: int) -> torch.Tensor:
    """float32 rows with ties, -0.0 and 0.0, NaN of both signs, infinities, subnormals."""
    import numpy as np

    g = np.random.default_rng(5)
    x = np.round(g.standard_normal((n_rows, n)) * 4).astype(np.float32) / 4  # many ties
    pick = g.integers(0, 7, size=x.shape)
    nan_bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001], dtype=np.uint32).view(np.float32)
    specials = [np.float32(-0.0), np.float32(0.0), np.inf, -np.inf, np.float32(1e-40)]
    for code, value in enumerate(specials):
        x[pick == code] = value
    x[pick == 5] = nan_bits[g.integers(0, 3, size=int((pick == 5).sum()))]
    return torch.from_numpy(x)


@pytest.mark.parametrize("shape", [(3, 1), (5, 17), (40, 3000)])
def test_packed_sort_is_numpy_stable_argsort(shape, monkeypatch):
    """The packed sort gives exactly NumPy's stable argsort (ties by index, -0.0 tied
    with 0.0, NaN of either sign last), in one thread and with rows shared among threads,
    and in blocks of rows smaller than the table's."""
    import numpy as np

    from tsw.core import _kernels

    pytest.importorskip("numba")
    x = _awkward_rows(*shape)
    assert _kernels.packs(x.numpy())
    want = torch.from_numpy(np.argsort(x.numpy(), axis=-1, kind="stable"))
    assert torch.equal(_sort.argsort_last(x), want)
    monkeypatch.setattr(_threads, "PARALLEL_MIN", 1)
    monkeypatch.setattr(_kernels, "_PACK_ELEMENTS", 2 * shape[-1])
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert torch.equal(_sort.argsort_last(x), want)
        assert torch.equal(_sort.argsort_last(x.T.contiguous().T), want)  # strided rows
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("kind", ["pairs", "ulps", "cauchy", "signed zeros", "span"])
def test_packed_sort_on_adversarial_rows(kind):
    """Rows whose keys differ in their last bits (values 1e-6 or one ulp apart), heavy
    tails, signed zeros beside subnormals and a range of 6e38 sort to NumPy's stable
    argsort too, in rows of 257 to 16384 atoms."""
    import numpy as np

    from tsw.core import _kernels

    pytest.importorskip("numba")
    g = np.random.default_rng(len(kind))
    for n in (257, 4096, 16384):
        shape = (4, n)
        if kind == "pairs":  # every value twice, 1e-6 apart, the larger first
            half = g.standard_normal((4, (n + 1) // 2))
            x = np.concatenate([half + 1e-6, half], axis=1)[:, :n]
        elif kind == "ulps":  # three neighbouring floats
            x = np.nextafter(np.float32(1.0), np.float32(2.0)) * np.ones(shape, np.float32)
            x[:, ::3] = np.float32(1.0)
            x[:, 1::7] = np.nextafter(np.float32(1.0), np.float32(0.0))
        elif kind == "cauchy":
            x = g.standard_cauchy(shape)
        elif kind == "signed zeros":
            x = g.integers(-2, 3, size=shape).astype(np.float32)
            x[x == 2] = -0.0
            x[x == -2] = 1e-40
        else:
            x = g.uniform(-1, 1, shape) * 3e38
            x[:, 0], x[:, 1] = -3.4e38, 3.4e38
        x = np.ascontiguousarray(x.astype(np.float32))
        assert _kernels.packs(x)  # (which loads the kernels)
        out = np.empty(x.shape, dtype=np.int64)
        _kernels.packed_argsort(x, out)
        np.testing.assert_array_equal(out, np.argsort(x, axis=-1, kind="stable"))


def test_packed_sort_only_for_float32_with_the_kernels(monkeypatch):
    """float32 rows take the packed sort on every CPU once the kernels load; float64 and
    runs without Numba keep ``np.argsort``."""
    import numpy as np

    from tsw.core import _kernels

    pytest.importorskip("numba")
    rows = np.zeros((2, 3), dtype=np.float32)
    assert _kernels.packs(rows)
    assert not _kernels.packs(rows.astype(np.float64))
    monkeypatch.setenv("TSW_NUMBA", "0")
    monkeypatch.setattr(_kernels, "_compiled", {})  # a fresh load: nothing compiled or ready
    monkeypatch.setattr(_kernel_loading, "_ready", set())
    monkeypatch.setattr(_kernel_loading, "_pending", {})
    assert not _kernels.packs(rows)


def test_compact_permutation_is_int32_where_the_packed_sort_writes_it(monkeypatch):
    """``argsort_last(x, compact=True)``: torch's stable permutation, int32 for float32
    rows sorted as packed keys, int64 otherwise (float64, and float32 without the
    kernels)."""
    from tsw.core import _kernels

    pytest.importorskip("numba")
    g = torch.Generator().manual_seed(3)
    for n in (5, 300, 20000):
        x = torch.randn(3, 2, n, generator=g)
        got = _sort.argsort_last(x, compact=True)
        assert got.dtype == torch.int32
        assert torch.equal(got.long(), torch.sort(x, dim=-1, stable=True).indices)
    x64 = torch.randn(4, 300, generator=g, dtype=torch.float64)
    assert _sort.argsort_last(x64, compact=True).dtype == torch.int64
    monkeypatch.setattr(_kernels, "packs", lambda rows: False)
    assert _sort.argsort_last(torch.randn(4, 300, generator=g), compact=True).dtype == torch.int64
