"""The compiled line kernels (``tsw.core._kernels``, Numba) against the torch operators.

The closed form itself is checked against ``ot.emd2`` with both implementations in
``test_exactness.py`` (``TestLineSystemCost`` takes the ``line_kernel`` fixture); here
the two implementations are compared on the cases where their code differs: atoms on
one side of the root only, atoms at the root, ties, one atom, rays, shared coordinates,
one gradient wanted, several threads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch

import tsw
from tsw.core import _kernels
from tsw.core.tree_wasserstein import line_cost

pytest.importorskip("numba")

F64 = torch.float64


def _coords(case: str, shape, rays: bool, g) -> torch.Tensor:
    c = torch.randn(shape, generator=g, dtype=F64)
    if case == "negative":
        c = -c.abs() - 0.1
    elif case == "positive":
        c = c.abs() + 0.1
    elif case == "ties_and_root":  # a coarse grid: repeated values and atoms at 0
        c = torch.round(2 * c) / 2
    return c.abs() if rays else c


def _run(coords, masses, p, rays, up, compiled: bool, monkeypatch):
    with monkeypatch.context() as mp:
        if not compiled:
            mp.setattr(_kernels, "usable", lambda *tensors, **kw: False)
        c = coords.detach().requires_grad_(True)
        m = masses.detach().requires_grad_(True)
        out = line_cost(c, m, p, rays=rays)
        gc, gm = torch.autograd.grad(out, (c, m), up)
    return out.detach(), gc, gm


@pytest.mark.parametrize("name", ["float32", "float64"])
@pytest.mark.parametrize("p", [1.0, 2.0])
@pytest.mark.parametrize("rays", [False, True])
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("case", ["mixed", "negative", "positive", "ties_and_root", "one_atom"])
def test_compiled_equals_torch(name, p, rays, shared, case, monkeypatch):
    dt = getattr(torch, name)
    g = torch.Generator().manual_seed(hash((p, rays, shared, case)) % 2**31)
    n = 1 if case == "one_atom" else 37
    coords = _coords(case, (3, 1 if shared else 4, n), rays, g).to(dt)
    masses = torch.randn(3, 4, n, generator=g, dtype=F64).to(dt)
    up = torch.randn(3, 4, generator=g, dtype=F64).to(dt)
    spy = []
    real = _kernels.line_cost_forward
    monkeypatch.setattr(_kernels, "line_cost_forward", lambda *a: spy.append(1) or real(*a))
    got = _run(coords, masses, p, rays, up, True, monkeypatch)
    assert spy, "the compiled kernel did not run"
    expected = _run(coords, masses, p, rays, up, False, monkeypatch)
    rtol = 1e-12 if dt == F64 else 1e-5
    for a, b in zip(got, expected, strict=True):
        assert a.dtype == dt
        assert a.shape == b.shape
        scale = float(b.abs().max()) + 1e-30
        assert float((a - b).abs().max()) <= rtol * scale


def test_one_gradient_wanted():
    """Only the masses' (or only the coordinates') gradient: the other is not formed."""
    g = torch.Generator().manual_seed(1)
    coords = torch.randn(5, 4, 30, generator=g, dtype=F64)
    masses = torch.randn(5, 4, 30, generator=g, dtype=F64)
    c = coords.clone().requires_grad_(True)
    m = masses.clone().requires_grad_(True)
    (gc_both, gm_both) = torch.autograd.grad(line_cost(c, m).sum(), (c, m))
    (gm,) = torch.autograd.grad(line_cost(coords, m).sum(), (m,))
    (gc,) = torch.autograd.grad(line_cost(c, masses).sum(), (c,))
    torch.testing.assert_close(gm, gm_both, rtol=0, atol=0)
    torch.testing.assert_close(gc, gc_both, rtol=0, atol=0)


def test_strided_inputs():
    """Transposed, expanded and sliced inputs give the contiguous inputs' results."""
    g = torch.Generator().manual_seed(2)
    base_c = torch.randn(40, 6, generator=g, dtype=F64)
    base_m = torch.randn(40, 6, generator=g, dtype=F64)
    expected = line_cost(base_c.T.contiguous(), base_m.T.contiguous(), 2.0)
    torch.testing.assert_close(line_cost(base_c.T, base_m.T, 2.0), expected, rtol=0, atol=0)
    row = torch.randn(1, 25, generator=g, dtype=F64)
    m = torch.randn(3, 25, generator=g, dtype=F64)
    torch.testing.assert_close(
        line_cost(row.expand(3, 25), m), line_cost(row.repeat(3, 1), m), rtol=0, atol=0
    )


def test_threads_give_the_same_bits():
    """Rows shared among threads (above the sort's threshold) give one thread's bits."""
    g = torch.Generator().manual_seed(3)
    coords = torch.randn(8, 40000, generator=g)
    masses = torch.randn(8, 40000, generator=g)
    threads = torch.get_num_threads()
    out = []
    try:
        for t in (1, 2):
            torch.set_num_threads(t)
            c = coords.clone().requires_grad_(True)
            m = masses.clone().requires_grad_(True)
            v = line_cost(c, m)
            out.append((v.detach(), *torch.autograd.grad(v.sum(), (c, m))))
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(*out, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("p", [1.5, 3.0])
def test_other_exponents_take_the_torch_path(p, monkeypatch):
    calls = []
    monkeypatch.setattr(_kernels, "line_cost_forward", lambda *a: calls.append(a))
    line_cost(torch.randn(2, 5, dtype=F64), torch.randn(2, 5, dtype=F64), p)
    assert not calls


@pytest.mark.parametrize("d", [2, 3, 5])
def test_db_tsw_equal_with_either_kernel(d, monkeypatch):
    """A whole distance, value and gradient, in blocks: both implementations agree.

    d = 2 and 3 take the cross-product distances into the split, d = 5 ``|z - x|^2``.
    """
    g = torch.Generator().manual_seed(4)
    X = torch.randn(60, d, generator=g, dtype=F64)
    Y = torch.randn(50, d, generator=g, dtype=F64) + 0.3
    trees = tsw.sample_concurrent_lines(d, n_trees=12, n_lines=4, seed=0, dtype=F64)
    results = []
    for compiled in (True, False):
        with monkeypatch.context() as mp:
            if not compiled:
                mp.setattr(_kernels, "usable", lambda *tensors, **kw: False)
            Xs = X.clone().requires_grad_(True)
            v = tsw.db_tsw(Xs, Y, trees=trees, p=2, chunk_size=5)
            results.append((v.detach(), *torch.autograd.grad(v, Xs)))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_environment_variable_disables_the_kernels():
    code = (
        "import torch; from tsw.core import _kernels; "
        "print(_kernels.usable(torch.zeros(2, 3), torch.zeros(2, 3), p=1.0))"
    )
    env = {**os.environ, "TSW_NUMBA": "0"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


# --------------------------------------------------------------------------- Db-TSW's split


def _split_inputs(name: str, seed: int = 5):
    dt = getattr(torch, name)
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(2, 3, 4, 9, generator=g, dtype=F64)
    sq = t.square().amax(2, keepdim=True) + torch.rand(2, 3, 1, 9, generator=g, dtype=F64)
    sq[0, 0, 0, 0] = t[0, 0, 1, 0] ** 2  # an atom on line 1 of a tree: distance 0
    w = torch.randn(2, 9, generator=g, dtype=F64)
    up = torch.randn(2, 3, 4, 9, generator=g, dtype=F64)
    return (x.to(dt) for x in (sq, t, w, up))


@pytest.mark.parametrize("name", ["float32", "float64"])
@pytest.mark.parametrize("given", ["line", "distance"])
def test_split_backward_equals_torch(name, given):
    """``DistanceSplit`` against ``LineDistance`` + ``distance_split`` with autograd.

    ``given="distance"``: the distances are the input (``sq=None``), as up to d = 3.
    """
    from tsw.core._safe import LineDistance
    from tsw.core.splits import distance_split

    sq, t, w, up = _split_inputs(name)
    if given == "distance":
        sq, t = sq - sq + 1.0, LineDistance.apply(sq, t)  # grads below: d/dt of the split
    out = []
    for compiled in (True, False):
        s, c = sq.clone().requires_grad_(True), t.clone().requires_grad_(True)
        if compiled:
            m = _kernels.DistanceSplit.apply(s if given == "line" else None, c, w, 1.5)
        elif given == "line":
            m = distance_split(LineDistance.apply(s, c), 1.5) * w[:, None, None, :]
        else:
            m = distance_split(c, 1.5) * w[:, None, None, :] + 0 * s
        grads = torch.autograd.grad(m, (s, c), up, allow_unused=True)
        out.append((m.detach(), *(torch.zeros_like(s) if x is None else x for x in grads)))
    rtol = 1e-12 if name == "float64" else 2e-5
    for a, b in zip(*out, strict=True):
        assert a.dtype == b.dtype
        assert float((a - b).abs().max()) <= rtol * float(b.abs().max())
    assert torch.isfinite(out[0][1]).all()
    assert torch.isfinite(out[0][2]).all()


def test_split_gradcheck():
    sq, t, w, _ = _split_inputs("float64", seed=6)
    sq = sq + 0.5  # away from the lines: the distance is smooth there
    assert torch.autograd.gradcheck(
        lambda s, c: _kernels.DistanceSplit.apply(s, c, w, 0.7),
        (sq.requires_grad_(True), t.requires_grad_(True)),
    )
    dist = t.detach().abs().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: _kernels.DistanceSplit.apply(None, x, w, 0.7), dist)


def test_split_takes_the_torch_path_for_learnable_weights(monkeypatch):
    """Weights that need a gradient (not formed by the compiled backward) use autograd."""
    calls = []
    monkeypatch.setattr(_kernels.DistanceSplit, "apply", lambda *a: calls.append(a))
    g = torch.Generator().manual_seed(7)
    X, Y = torch.randn(10, 6, generator=g, dtype=F64), torch.randn(8, 6, generator=g, dtype=F64)
    a = torch.full((10,), 0.1, dtype=F64, requires_grad=True)
    v = tsw.db_tsw(X, Y, a=a, n_trees=3, seed=0)
    (ga,) = torch.autograd.grad(v, a)
    assert not calls
    assert torch.isfinite(ga).all()


def test_a_failing_numba_falls_back_with_a_warning(monkeypatch):
    """Numba installed but unable to load (say, no writable cache): warn, use torch."""
    import builtins

    real_import = builtins.__import__

    def failing(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "tsw.core" and fromlist and "_numba_kernels" in fromlist:
            raise RuntimeError("cannot cache function: no locator available")
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(_kernels, "_kernels", {})
    monkeypatch.setattr(_kernels, "_failed", False)
    monkeypatch.setattr(builtins, "__import__", failing)
    with pytest.warns(RuntimeWarning, match="torch operators run instead"):
        assert not _kernels.usable(torch.zeros(2, 3), torch.zeros(2, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once only
        assert not _kernels.usable(torch.zeros(2, 3), torch.zeros(2, 3))
    monkeypatch.setattr(builtins, "__import__", real_import)
    v = line_cost(torch.tensor([1.0, 3.0]), torch.tensor([1.0, -1.0]))
    assert float(v) == 2.0


# --------------------------------------------------------------------------- STSW's split


@pytest.mark.parametrize("name", ["float32", "float64"])
@pytest.mark.parametrize("shared", [False, True])
def test_wrapped_angle_split_backward_equals_torch(name, shared, monkeypatch):
    """STSW's split on S^2: the compiled backward against the torch operators."""
    from tsw.sphere._geometry import _WrappedAngleSplit

    dt = getattr(torch, name)
    g = torch.Generator().manual_seed(8)
    B, T, k, n = 3, 4, 5, 11
    polar = (torch.rand(B, T, n, generator=g, dtype=F64) * 6.2).to(dt)
    theta = (torch.rand(1 if shared else B, T, k, generator=g, dtype=F64) * 6.2).to(dt)
    scale = torch.rand(B, T, n, generator=g, dtype=F64).to(dt)
    w = torch.randn(B, n, generator=g, dtype=F64).to(dt)
    up = torch.randn(B, T, k, n, generator=g, dtype=F64).to(dt)
    out = []
    for compiled in (True, False):
        with monkeypatch.context() as mp:
            if not compiled:
                mp.setattr(_kernels, "usable", lambda *tensors, **kw: False)
            xs = [x.clone().requires_grad_(True) for x in (polar, theta, scale)]
            m = _WrappedAngleSplit.apply(*xs, w, 1.7)
            out.append((m.detach(), *torch.autograd.grad(m, xs, up)))
    rtol = 1e-12 if name == "float64" else 2e-5
    for a, b in zip(*out, strict=True):
        assert a.shape == b.shape
        assert float((a - b).abs().max()) <= rtol * float(b.abs().max())


def test_wrapped_angle_split_gradcheck():
    from tsw.sphere._geometry import _WrappedAngleSplit

    g = torch.Generator().manual_seed(9)
    polar = torch.rand(2, 3, 6, generator=g, dtype=F64) * 6.2
    theta = torch.rand(2, 3, 4, generator=g, dtype=F64) * 6.2
    scale = torch.rand(2, 3, 6, generator=g, dtype=F64)
    w = torch.randn(2, 6, generator=g, dtype=F64)
    inputs = tuple(x.requires_grad_(True) for x in (polar, theta, scale))
    assert torch.autograd.gradcheck(lambda *x: _WrappedAngleSplit.apply(*x, w, 0.9), inputs)


@pytest.mark.parametrize(
    "fn",
    [
        lambda X, Y: tsw.circular_tsw(X, Y, radius=0.3, n_trees=6, seed=0),
        lambda X, Y: tsw.circular_tsw(X, Y, radius=0.3, split="image", n_trees=6, seed=0),
        lambda X, Y: tsw.stsw(  # S^3: the split through split_masses' distances
            torch.nn.functional.normalize(X[:, :4], dim=-1),
            torch.nn.functional.normalize(Y[:, :4], dim=-1),
            n_trees=6,
            seed=0,
        ),
    ],
    ids=["circular", "circular_image", "stsw_s3"],
)
def test_split_masses_callers_equal_with_either_kernel(fn, monkeypatch):
    g = torch.Generator().manual_seed(10)
    X = torch.randn(40, 5, generator=g, dtype=F64)
    Y = torch.randn(30, 5, generator=g, dtype=F64) + 0.2
    results = []
    for compiled in (True, False):
        with monkeypatch.context() as mp:
            if not compiled:
                mp.setattr(_kernels, "usable", lambda *tensors, **kw: False)
            Xs = X.clone().requires_grad_(True)
            v = fn(Xs, Y)
            results.append((v.detach(), *torch.autograd.grad(v, Xs)))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_split_masses_takes_one_form():
    from tsw.core.splits import split_masses

    w, d = torch.ones(1, 3), torch.ones(1, 2, 4, 3)
    with pytest.raises(TypeError, match="exactly one of distances= and line="):
        split_masses(w, 1.0)
    with pytest.raises(TypeError, match="exactly one of distances= and line="):
        split_masses(w, 1.0, distances=d, line=(d[:, :, :1], d))
