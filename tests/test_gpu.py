"""CUDA checks: run automatically where ``torch.cuda.is_available()``, skipped elsewhere."""

from __future__ import annotations

import pytest
import torch

import tsw

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

DISTANCES = {
    "db_tsw": lambda X, Y, **k: tsw.db_tsw(X, Y, n_trees=20, n_lines=3, **k),
    "db_tsw_orth": lambda X, Y, **k: tsw.db_tsw(X, Y, n_trees=20, n_lines=3, orthogonal=True, **k),
    "tsw_sl_chain": lambda X, Y, **k: tsw.tsw_sl(X, Y, n_trees=20, n_lines=3, **k),
    "tsw_sl_concurrent": lambda X, Y, **k: tsw.tsw_sl(
        X, Y, n_trees=20, n_lines=3, tree="concurrent", **k
    ),
    "sw": lambda X, Y, **k: tsw.sw(X, Y, n_projections=60, **k),
    "max_sw": lambda X, Y, **k: tsw.max_sw(X, Y, n_iter=5, **k),
    "s3w_ri": lambda X, Y, **k: tsw.s3w(X, Y, n_rotations=4, renormalize=True, **k),
    "s3w_compat": lambda X, Y, **k: tsw.s3w(X, Y, compat=True, renormalize=True, **k),
}


def _data(dtype, device="cpu"):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(2, 30, 5, generator=g, dtype=torch.float64)
    Y = torch.randn(2, 25, 5, generator=g, dtype=torch.float64) + 0.3
    return X.to(dtype=dtype, device=device), Y.to(dtype=dtype, device=device)


@pytest.mark.parametrize("name", list(DISTANCES))
def test_same_seed_same_value_on_cpu_and_cuda(name):
    X, Y = _data(torch.float64)
    cpu = DISTANCES[name](X, Y, seed=3)
    gpu = DISTANCES[name](X.cuda(), Y.cuda(), seed=3)
    assert gpu.device.type == "cuda"
    assert gpu.dtype == torch.float64
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", list(DISTANCES))
@pytest.mark.parametrize("precision", [torch.float32, torch.float64])
def test_cuda_generator_dtype_device_and_backward(name, precision):
    X, Y = _data(precision, "cuda")
    X.requires_grad_(True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    v = DISTANCES[name](X, Y, generator=gen)
    assert v.device.type == "cuda"
    assert v.dtype == precision
    assert v.shape == (2,)
    v.sum().backward()
    assert torch.isfinite(X.grad).all()


def test_cpu_generator_feeds_cuda_tensors():
    X, Y = _data(torch.float32, "cuda")
    a = tsw.db_tsw(X, Y, generator=torch.Generator().manual_seed(1))
    b = tsw.db_tsw(X, Y, seed=1)
    torch.testing.assert_close(a, b)


def test_cuda_generator_with_cpu_data_raises():
    X, Y = _data(torch.float32)
    with pytest.raises(ValueError, match="generator must be on the CPU or on the data's device"):
        tsw.db_tsw(X, Y, generator=torch.Generator(device="cuda"))


def test_samplers_identical_across_devices():
    a = tsw.sample_concurrent_lines(5, n_trees=4, n_lines=3, seed=0, dtype=torch.float64)
    b = tsw.sample_concurrent_lines(
        5, n_trees=4, n_lines=3, seed=0, dtype=torch.float64, device="cuda"
    )
    torch.testing.assert_close(b.directions.cpu(), a.directions, rtol=0, atol=0)
    torch.testing.assert_close(b.roots.cpu(), a.roots, rtol=0, atol=0)


def test_module_on_cuda():
    X, Y = _data(torch.float32, "cuda")
    loss = tsw.nn.DbTSWLoss(n_trees=10, n_lines=3, seed=0)
    assert loss(X, Y).device.type == "cuda"
