"""tsw.core._sort.sort_last: NumPy's permutation on the CPU, torch.sort's elsewhere."""

from __future__ import annotations

import pytest
import torch

from tsw.core import _sort
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
    """Above _PARALLEL_MIN elements the rows are shared among threads: same result."""
    x = torch.randn(37, 300, generator=torch.Generator().manual_seed(1))
    one = sort_last(x)
    monkeypatch.setattr(_sort, "_PARALLEL_MIN", 1)
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
