"""The compiled kernels becoming ready mid-process never changes a graph's gradients.

By default the kernels compile in the background and the torch operators serve until
they are ready (``tsw.core._kernels``): within one process, calls switch from one to the
other, whose results differ by rounding. A backward pass that computes again what its
forward computed (the blocks' second pass through a retained graph, activation
checkpointing, the S^2 angles) must take the implementation its forward took, or
``torch.autograd.gradcheck`` finds a backward that is not reentrant. Under
``torch.use_deterministic_algorithms(True)`` no call switches: the first call that could
use the kernels compiles them first.

The switch is simulated: the kernels are hidden (``TSW_NUMBA=0``, no dtype ready) for the
forward, then shown. The reference is the gradient of the same graph before the switch,
and the torch operators' own gradient (the kernels never shown).
"""

from __future__ import annotations

import pytest
import torch

import tsw
from tsw.core import _kernel_loading as loading
from tsw.core import _kernels

F64 = torch.float64

pytestmark = pytest.mark.skipif(not _kernels.warm_up(), reason="the compiled kernels (Numba)")


class Switch:
    """Hide the kernels (as before their compilation finished), then show them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.mp = monkeypatch
        self.ready = set(loading._ready)

    def hide(self) -> None:
        self.mp.setattr(loading, "_ready", set())
        self.mp.setenv("TSW_NUMBA", "0")

    def show(self) -> None:
        self.mp.setattr(loading, "_ready", set(self.ready))
        self.mp.setenv("TSW_NUMBA", "wait")


def _data(sphere: bool = False, n: int = 40, m: int = 30):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, 3, generator=g, dtype=F64)
    Y = torch.randn(m, 3, generator=g, dtype=F64) + 0.5
    if sphere:
        X, Y = (torch.nn.functional.normalize(t, dim=-1) for t in (X, Y))
    return X.requires_grad_(), Y


#: (name, call) of graphs whose backward recomputes: several blocks (a second backward
#: forms the blocks' gradients again), a learnable split (activation checkpointing), the
#: S^2 angles (their backward has its own kernel)
CASES = {
    "db_tsw blocks": (False, lambda X, Y: tsw.db_tsw(X, Y, seed=0, n_trees=8, chunk_size=2)),
    "db_tsw p=2 blocks": (
        False,
        lambda X, Y: tsw.db_tsw(X, Y, seed=0, n_trees=8, p=2, chunk_size=2),
    ),
    "tsw_sl blocks": (False, lambda X, Y: tsw.tsw_sl(X, Y, seed=0, n_trees=8, chunk_size=2)),
    "sw blocks": (False, lambda X, Y: tsw.sw(X, Y, seed=0, n_projections=8, chunk_size=2)),
    "tsw_sl learnable alpha (checkpointed)": (
        False,
        lambda X, Y: tsw.tsw_sl(
            X,
            Y,
            seed=0,
            n_trees=8,
            n_lines=3,
            chunk_size=2,
            alpha=torch.tensor([0.2, 0.3, 0.5], dtype=F64, requires_grad=True),
        ),
    ),
    "stsw": (True, lambda X, Y: tsw.stsw(X, Y, seed=0, n_trees=8, chunk_size=None)),
    "stsw blocks": (True, lambda X, Y: tsw.stsw(X, Y, seed=0, n_trees=8, chunk_size=2)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_backward_takes_the_implementation_of_its_forward(case, monkeypatch):
    sphere, call = CASES[case]
    switch = Switch(monkeypatch)
    X, Y = _data(sphere)
    switch.hide()
    value = call(X, Y)
    (first,) = torch.autograd.grad(value, X, retain_graph=True)
    (torch_only,) = torch.autograd.grad(call(X, Y), X)  # the torch operators throughout
    switch.show()  # the background compilation finishes here
    (second,) = torch.autograd.grad(value, X, retain_graph=True)
    assert torch.equal(first, second)
    assert torch.equal(first, torch_only)
    # and a graph formed after the switch takes the kernels, which agree to rounding
    (compiled,) = torch.autograd.grad(call(X, Y), X)
    torch.testing.assert_close(compiled, first, rtol=1e-10, atol=1e-13)


def test_gradcheck_survives_the_switch(monkeypatch):
    """gradcheck's reentrancy test (two backward passes of one graph) across the switch."""
    switch = Switch(monkeypatch)
    X, Y = _data(n=6, m=5)
    switch.hide()
    grad = torch.autograd.grad

    def grad_then_switch(*args, **kwargs):
        out = grad(*args, **kwargs)
        if kwargs.get("retain_graph"):  # gradcheck's first analytical pass is done
            switch.show()
        return out

    monkeypatch.setattr(torch.autograd, "grad", grad_then_switch)
    center = torch.zeros(3, dtype=F64)  # roots independent of the data (the tsw.nn notes)
    assert torch.autograd.gradcheck(
        lambda X: tsw.db_tsw(X, Y, seed=0, n_trees=6, center=center, chunk_size=2), (X,)
    )


def test_deterministic_algorithms_never_switch(monkeypatch):
    """Under deterministic algorithms the first call that could use the kernels waits for them."""
    switch = Switch(monkeypatch)
    switch.hide()
    monkeypatch.setenv("TSW_NUMBA", "1")  # a cache that misses, a child's compilation ...
    started = []
    monkeypatch.setattr(loading, "_pending", {})
    real = _kernels._exercise
    monkeypatch.setattr(
        _kernels, "_exercise", lambda dtype, cached_only=False: not cached_only and real(dtype)
    )
    monkeypatch.setattr(loading, "_build_in_background", lambda *args: started.append(args))
    X, Y = _data()
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: True)
    assert _kernels.usable(X.detach())
    first = tsw.db_tsw(X.detach(), Y, seed=0)
    assert torch.equal(first, tsw.db_tsw(X.detach(), Y, seed=0))
    assert not started
    # without them, the call takes the torch operators until the compilation is done
    monkeypatch.setattr(loading, "_ready", set())
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: False)
    assert not _kernels.usable(X.detach())
