"""``torch.compile(fullgraph=True)`` traces whole distances (explicit slices, no checks).

The closed form writes into slices with ``out=`` for speed in eager mode; under
``torch.compile`` it switches to out-of-place forms (``tsw.core.tree_wasserstein``),
and a call with explicit slices creates no generator. The compiled values and
gradients must equal eager ones, on star, chain and spherical trees and for SW.
"""

from __future__ import annotations

import pytest
import torch

import tsw

F64 = torch.float64


def _data(sphere=False):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(30, 4, generator=g, dtype=F64)
    Y = torch.randn(25, 4, generator=g, dtype=F64) + 0.5
    if sphere:
        X, Y = (torch.nn.functional.normalize(Z, dim=-1) for Z in (X, Y))
    return X, Y


CASES = {
    "db_tsw": lambda: (
        lambda X, Y, t: tsw.db_tsw(X, Y, trees=t, p=2, validate=False, chunk_size=None),
        tsw.sample_concurrent_lines(4, n_trees=6, n_lines=3, seed=0, dtype=F64),
        False,
    ),
    "tsw_sl_chain": lambda: (
        lambda X, Y, t: tsw.tsw_sl(X, Y, trees=t, validate=False, chunk_size=None),
        tsw.sample_chain_lines(4, n_trees=6, n_lines=3, seed=0, dtype=F64),
        False,
    ),
    "stsw": lambda: (
        lambda X, Y, t: tsw.stsw(X, Y, trees=t, validate=False, chunk_size=None),
        tsw.sample_spherical_trees(4, n_trees=6, n_lines=3, seed=0, dtype=F64),
        True,
    ),
    "sw": lambda: (
        lambda X, Y, t: tsw.sw(X, Y, projections=t, validate=False, chunk_size=None),
        tsw.sample_projections(4, 12, seed=0, dtype=F64),
        False,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_fullgraph_compile_equals_eager(name):
    fn, slices, sphere = CASES[name]()
    X, Y = _data(sphere)
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    out = []
    for f in (fn, compiled):
        Xs = X.clone().requires_grad_(True)
        value = f(Xs, Y, slices)
        out.append((value.detach(), torch.autograd.grad(value, Xs)[0]))
    torch.testing.assert_close(out[1][0], out[0][0], rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(out[1][1], out[0][1], rtol=1e-12, atol=1e-14)
