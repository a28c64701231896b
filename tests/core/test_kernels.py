"""The compiled kernels (``tsw.core._kernels``, Numba) against the torch operators.

The closed form itself is checked against ``ot.emd2`` with both implementations in
``core/test_tree_wasserstein.py`` (``TestLineSystemCost`` takes the ``line_kernel``
fixture) and, for STSW on S^2, in ``sphere/test_stsw.py``; here the two implementations
are compared on the cases where their code differs: atoms on one side of the root only,
atoms at the root, ties, one atom, rays, shared coordinates, one gradient wanted, several
threads, extreme split temperatures. The parts with no torch twin are checked against
independent results: the exponential against NumPy's, the angles' backward against
autograd's graph of ``atan2`` and ``hypot``, and gradcheck.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings

import pytest
import torch

import tsw
from tsw.core import _kernel_loading as loading
from tsw.core import _kernels, splits
from tsw.core.splits import SplitForm
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
    assert _kernels.usable(coords, masses, p=p)  # else both runs would be torch's
    got = _run(coords, masses, p, rays, up, True, monkeypatch)
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


def test_a_failing_numba_falls_back_with_a_warning(monkeypatch):
    """Numba installed but unable to load (say, no writable cache): warn, use torch."""
    import builtins

    real_import = builtins.__import__

    def failing(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "tsw.core" and fromlist and "_numba_kernels" in fromlist:
            raise RuntimeError("cannot cache function: no locator available")
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(_kernels, "_compiled", {})  # a fresh load: nothing compiled or ready
    monkeypatch.setattr(loading, "_ready", set())
    monkeypatch.setattr(loading, "_pending", {})
    monkeypatch.setattr(loading, "_failed", False)
    monkeypatch.setattr(builtins, "__import__", failing)
    with pytest.warns(RuntimeWarning, match="torch operators run instead"):
        assert not _kernels.usable(torch.zeros(2, 3), torch.zeros(2, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once only
        assert not _kernels.usable(torch.zeros(2, 3), torch.zeros(2, 3))
    monkeypatch.setattr(builtins, "__import__", real_import)
    v = line_cost(torch.tensor([1.0, 3.0]), torch.tensor([1.0, -1.0]))
    assert float(v) == 2.0


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
@pytest.mark.parametrize("given", ["line", "distance", "signed"])
def test_split_backward_equals_torch(name, given):
    """``DistanceSplit`` against ``LineDistance`` + ``distance_split`` with autograd.

    ``given="distance"``: the distances are the input (``sq=None``), as in space;
    ``"signed"``: signed distances whose absolute values are the distances, as in the
    plane, with atoms exactly on a line (``abs``' zero subgradient there).
    """
    from tsw.core._safe import LineDistance
    from tsw.core.splits import distance_split

    sq, t, w, up = _split_inputs(name)
    mode = {
        "line": SplitForm.COORDINATES,
        "distance": SplitForm.DISTANCES,
        "signed": SplitForm.SIGNED,
    }
    if given == "distance":
        sq, t = sq - sq + 1.0, LineDistance.apply(sq, t)  # grads below: d/dt of the split
    elif given == "signed":
        sq, t = sq - sq + 1.0, t.clone()
        t[0, 1, 2, :3] = 0.0  # atoms on a line
    out = []
    for compiled in (True, False):
        s, c = sq.clone().requires_grad_(True), t.clone().requires_grad_(True)
        if compiled:
            m = splits._DistanceSplit.apply(s if given == "line" else None, c, w, 1.5, mode[given])
        elif given == "line":
            m = distance_split(LineDistance.apply(s, c), 1.5) * w[:, None, None, :]
        elif given == "signed":
            m = distance_split(c.abs(), 1.5) * w[:, None, None, :] + 0 * s
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
    if given == "signed":  # the subgradient on the line is 0, as abs' is
        assert bool((out[0][2][0, 1, 2, :3] == 0).all())


def test_split_gradcheck():
    sq, t, w, _ = _split_inputs("float64", seed=6)
    sq = sq + 0.5  # away from the lines: the distance is smooth there
    assert torch.autograd.gradcheck(
        lambda s, c: splits._DistanceSplit.apply(s, c, w, 0.7, SplitForm.COORDINATES),
        (sq.requires_grad_(True), t.requires_grad_(True)),
    )
    dist = t.detach().abs().requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda x: splits._DistanceSplit.apply(None, x, w, 0.7, SplitForm.DISTANCES), dist
    )
    signed = (t.detach() + 0.05 * t.detach().sign()).requires_grad_(True)  # off the lines
    assert torch.autograd.gradcheck(
        lambda x: splits._DistanceSplit.apply(None, x, w, 0.7, SplitForm.SIGNED), signed
    )


@pytest.mark.parametrize("d", [2, 6])
def test_learnable_weights_equal_with_either_kernel(d, monkeypatch):
    """Weights that need a gradient (which the compiled split's backward does not form):
    the value and the gradients of the points and of the weights equal the torch
    operators'."""
    g = torch.Generator().manual_seed(7)
    X, Y = torch.randn(10, d, generator=g, dtype=F64), torch.randn(8, d, generator=g, dtype=F64)
    a = torch.rand(10, generator=g, dtype=F64) + 0.1
    a = a / a.sum()
    results = []
    for compiled in (True, False):
        with monkeypatch.context() as mp:
            if not compiled:
                mp.setattr(_kernels, "usable", lambda *tensors, **kw: False)
            Xs, As = X.clone().requires_grad_(True), a.clone().requires_grad_(True)
            v = tsw.db_tsw(Xs, Y, As, n_trees=3, seed=0)
            results.append((v.detach(), *torch.autograd.grad(v, (Xs, As))))
    for c, r in zip(*results, strict=True):
        assert bool(torch.isfinite(c).all())
        torch.testing.assert_close(c, r, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------ Db-TSW's split and line cost together


def _split_line_inputs(name: str, given: str, seed: int = 5):
    """``_split_inputs`` with two atoms at a tree's root and a gradient per line; for
    ``given`` other than ``"line"``, the distances' input ``t`` and coordinates ``x``
    apart (signed distances with atoms on a line, or distances)."""
    sq, t, w, _ = _split_inputs(name, seed)
    t = t.clone()
    t[1, 2, :, :2] = 0.0  # two atoms at a root (sq stays >= t^2)
    g = torch.Generator().manual_seed(seed + 100)
    up = torch.randn(2, 3, 4, generator=g, dtype=F64).to(t.dtype)
    if given == "line":
        return sq, t, t, w, up, SplitForm.COORDINATES
    x = torch.randn(t.shape, generator=g, dtype=F64).to(t.dtype)
    if given == "signed":
        t[0, 1, 2, :3] = 0.0  # atoms on a line
        return None, t, x, w, up, SplitForm.SIGNED
    return None, t.abs() + 0.1, x, w, up, SplitForm.DISTANCES


def _split_line_costs(sq, t, x, w, up, mode, p, together: bool):
    s = sq.clone().requires_grad_(True) if sq is not None else None
    c = t.clone().requires_grad_(True)
    y = c if mode == SplitForm.COORDINATES else x.clone().requires_grad_(True)
    if together:
        cost = splits._SplitLineCost.apply(s, c, y, w, 1.5, mode, p)
    else:
        cost = line_cost(y, splits._DistanceSplit.apply(s, c, w, 1.5, mode), p)
    inputs = [v for v in (s, c, y if y is not c else None) if v is not None]
    return (cost.detach(), *torch.autograd.grad(cost, inputs, up))


@pytest.mark.parametrize("name", ["float32", "float64"])
@pytest.mark.parametrize("p", [1.0, 2.0])
@pytest.mark.parametrize("given", ["line", "signed", "distance"])
def test_split_line_cost_is_the_two_kernels_bit_for_bit(name, p, given):
    """``SplitLineCost``: ``line_cost`` of ``DistanceSplit``'s masses, the value and every
    gradient (``sq``, the distances' input, the coordinates; for ``"line"`` the
    coordinates through both) bit for bit, with atoms at a root and on a line, and a
    batch of two items."""
    sq, t, x, w, up, mode = _split_line_inputs(name, given)
    together = _split_line_costs(sq, t, x, w, up, mode, p, True)
    apart = _split_line_costs(sq, t, x, w, up, mode, p, False)
    assert len(together) == 3  # the value and two gradients
    for a, b in zip(together, apart, strict=True):
        assert a.dtype == b.dtype
        assert torch.equal(a, b)


@pytest.mark.parametrize("p", [1.0, 2.0])
@pytest.mark.parametrize("given", ["line", "signed", "distance"])
def test_split_line_cost_equals_torch(p, given, monkeypatch):
    """Against the torch operators (``LineDistance``, ``abs``, ``distance_split``,
    ``_LineCost``'s torch path) with autograd: an implementation that shares no kernel."""
    from tsw.core._safe import LineDistance
    from tsw.core.splits import distance_split

    sq, t, x, w, up, mode = _split_line_inputs("float64", given, seed=8)
    got = _split_line_costs(sq, t, x, w, up, mode, p, True)
    with monkeypatch.context() as mp:
        mp.setattr(_kernels, "usable", lambda *tensors, **kw: False)
        s = sq.clone().requires_grad_(True) if sq is not None else None
        c = t.clone().requires_grad_(True)
        y = c if mode == SplitForm.COORDINATES else x.clone().requires_grad_(True)
        if mode == SplitForm.COORDINATES:
            dist = LineDistance.apply(s, c)
        else:
            dist = c.abs() if mode == SplitForm.SIGNED else c
        cost = line_cost(y, distance_split(dist, 1.5) * w[:, None, None, :], p)
        inputs = [v for v in (s, c, y if y is not c else None) if v is not None]
        want = (cost.detach(), *torch.autograd.grad(cost, inputs, up))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_split_line_cost_gradcheck():
    sq, t, w, _ = _split_inputs("float64", seed=6)
    sq = sq + 0.5  # away from the lines: the distance is smooth there
    x = t.detach() * 1.3 + 0.1
    signed = t.detach() + 0.05 * t.detach().sign()  # off the lines
    for p in (1.0, 2.0):
        assert torch.autograd.gradcheck(
            lambda s, c, p=p: splits._SplitLineCost.apply(
                s, c, c, w, 0.7, SplitForm.COORDINATES, p
            ),
            (sq.clone().requires_grad_(True), t.clone().requires_grad_(True)),
        )
        for mode, dist in ((SplitForm.SIGNED, signed), (SplitForm.DISTANCES, signed.abs())):
            assert torch.autograd.gradcheck(
                lambda c, y, p=p, mode=mode: splits._SplitLineCost.apply(
                    None, c, y, w, 0.7, mode, p
                ),
                (dist.clone().requires_grad_(True), x.clone().requires_grad_(True)),
            )


def _split_apart(projection):
    split = projection.masses
    return (
        projection._replace(masses=split.masses())
        if isinstance(split, splits.LineSplit)
        else projection
    )


@pytest.mark.parametrize(
    ("d", "learnable", "p", "together"),
    [
        (5, False, 2, True),  # |z - x|^2 and the coordinates
        (5, False, 1, True),
        (3, False, 2, True),  # distances from cross products in space
        (2, False, 1, True),  # signed distances in the plane
        (5, True, 2, False),  # weights with a gradient: the torch split
        (5, False, 1.5, False),  # p outside {1, 2}: the torch line cost
    ],
)
def test_db_tsw_runs_split_and_line_cost_together_where_it_can(d, learnable, p, together):
    """Where ``SplitLineCost`` runs, db_tsw's value and gradients equal those of the
    split and the line cost apart (the projection forced apart), bit for bit.

    The calls are counted: the fused kernel is the path that pays on the CPU (one pass
    over the atoms instead of two, kept for its measured speed), and the bit-for-bit
    comparison means something only where it ran; it must run exactly in the cases
    marked ``together``."""
    import tsw.euclidean._db_tsw as db

    g = torch.Generator().manual_seed(9)
    X = torch.randn(20, d, generator=g, dtype=F64)
    Y = torch.randn(15, d, generator=g, dtype=F64) + 0.2
    a = torch.full((20,), 1 / 20, dtype=F64, requires_grad=learnable)
    trees = tsw.sample_concurrent_lines(d, n_trees=5, n_lines=3, seed=0, dtype=F64)
    real_apply, real_projection = splits._SplitLineCost.apply, db.db_projection
    results = []
    for apart in (False, True):
        calls: list[int] = []
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(
                splits._SplitLineCost,
                "apply",
                lambda *x, calls=calls: calls.append(1) or real_apply(*x),
            )
            if apart:  # the masses split by the projection, then the shared closed form
                mp.setattr(
                    db, "db_projection", lambda *x, **k: _split_apart(real_projection(*x, **k))
                )
            Xs = X.clone().requires_grad_(True)
            v = tsw.db_tsw(Xs, Y, a=a, trees=trees, p=p, chunk_size=2)
            results.append((v.detach(), *torch.autograd.grad(v, Xs)))
        assert bool(calls) == (together and not apart)
    for x, y in zip(*results, strict=True):
        assert torch.equal(x, y)


@pytest.mark.parametrize(
    ("d", "k", "threads"),
    [(7, 1, 1), (2, 3, 1), (3, 2, 1), (7, 4, 2)],  # 2 threads: rows shared among them
)
def test_split_line_cost_batched_trees_and_threads(d, k, threads):
    """A batch of items with trees of their own, one line a tree, and rows shared among
    two threads (above the sort's threshold): db_tsw with the split and the line cost
    together equals them apart, bit for bit, for both measures' gradients."""
    import tsw.euclidean._db_tsw as db

    g = torch.Generator().manual_seed(12)
    n = 40000 if threads > 1 else 30
    X = torch.randn(2, n, d, generator=g)
    Y = torch.randn(2, n - 3, d, generator=g) + 0.3
    trees = tsw.sample_concurrent_lines(d, n_trees=4, n_lines=k, seed=1, center=torch.zeros(2, d))
    real_projection = db.db_projection
    before = torch.get_num_threads()
    results = []
    try:
        torch.set_num_threads(threads)
        for apart in (False, True):
            with pytest.MonkeyPatch.context() as mp:
                if apart:
                    mp.setattr(
                        db,
                        "db_projection",
                        lambda *x, **kw: _split_apart(real_projection(*x, **kw)),
                    )
                Xs, Ys = X.clone().requires_grad_(True), Y.clone().requires_grad_(True)
                v = tsw.db_tsw(Xs, Ys, trees=trees, p=2, chunk_size=3)
                results.append((v.detach(), *torch.autograd.grad(v.sum(), (Xs, Ys))))
    finally:
        torch.set_num_threads(before)
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


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
        lambda X, Y: tsw.spatial_tsw(X, Y, n_trees=6, seed=0),  # SplitLineCost
    ],
    ids=["circular", "circular_image", "stsw_s3", "spatial"],
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
    with pytest.raises(TypeError, match="exactly one of distances=, line= and signed="):
        split_masses(w, 1.0)
    with pytest.raises(TypeError, match="exactly one of distances=, line= and signed="):
        split_masses(w, 1.0, distances=d, line=(d[:, :, :1], d))
    with pytest.raises(TypeError, match="exactly one of distances=, line= and signed="):
        split_masses(w, 1.0, distances=d, signed=d)


# --------------------------------------------------------------------------- STSW's split


def test_wrapped_angle_split_gradcheck():
    from tsw.core.splits import _AngularSplitMasses as _WrappedAngleSplit

    g = torch.Generator().manual_seed(9)
    polar = torch.rand(2, 3, 6, generator=g, dtype=F64) * 6.2
    theta = torch.rand(2, 3, 4, generator=g, dtype=F64) * 6.2
    scale = torch.rand(2, 3, 6, generator=g, dtype=F64)
    w = torch.randn(2, 6, generator=g, dtype=F64)
    inputs = tuple(x.requires_grad_(True) for x in (polar, theta, scale))
    assert torch.autograd.gradcheck(lambda *x: _WrappedAngleSplit.apply(*x, w, 0.9), inputs)


# ------------------------------------------------------------- STSW's split and closed form at once


def _ray_inputs(name: str, shared: bool, case: str = "generic", seed: int = 11):
    """Angles of atoms on S^2 trees as _SplitRayCost reads them: (t, polar, theta, scale, w)."""
    dt = getattr(torch, name)
    g = torch.Generator().manual_seed(seed)
    B, T, k, n = 3, 4, 5, 13
    t = torch.rand(B, T, n, generator=g, dtype=F64) * math.pi
    if case == "ties_and_root":  # repeated coordinates, atoms at the root (t = 0)
        t = torch.round(2 * t) / 2
    polar = (torch.rand(B, T, n, generator=g, dtype=F64) * 2 - 1) * math.pi
    theta = (torch.rand(1 if shared else B, T, k, generator=g, dtype=F64) * 2 - 1) * math.pi
    scale = torch.sin(t)
    w = torch.randn(B, n, generator=g, dtype=F64)
    return tuple(x.to(dt) for x in (t, polar, theta, scale, w))


def _split_ray_cost(t, polar, theta, scale, w, delta, p):
    """STSW's split and the closed form on the rays (the compiled path where it runs)."""
    return splits.angular_split_cost(t, splits.AngularSplit(polar, theta, scale, w, delta), p)


def _ray_costs(inputs, delta, p, up, compiled, monkeypatch):
    with monkeypatch.context() as mp:
        if not compiled:
            mp.setattr(_kernels, "usable", lambda *tensors, **kw: False)
        xs = [x.clone().requires_grad_(True) for x in inputs]
        out = _split_ray_cost(*xs, delta, p)
        return out.detach(), *torch.autograd.grad(out, xs, up)


@pytest.mark.parametrize("name", ["float32", "float64"])
@pytest.mark.parametrize("p", [1.0, 2.0])
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("case", ["generic", "ties_and_root"])
def test_split_ray_cost_equals_torch(name, p, shared, case, monkeypatch):
    """STSW on S^2, split and closed form in one compiled loop per tree (_SplitRayCost),
    against the torch path (_WrappedAngleSplit's masses, then line_cost on the rays):
    the cost per tree and the gradients of the coordinates, polar angles, rays' angles,
    sin t and weights, under an upstream gradient that differs per tree."""
    inputs = _ray_inputs(name, shared, case)
    g = torch.Generator().manual_seed(12)
    up = torch.randn(3, 4, generator=g, dtype=F64).to(inputs[0].dtype)
    compiled = _ray_costs(inputs, 1.7, p, up, True, monkeypatch)
    reference = _ray_costs(inputs, 1.7, p, up, False, monkeypatch)
    rtol = 1e-12 if name == "float64" else 1e-5
    for a, b in zip(compiled, reference, strict=True):
        assert a.shape == b.shape
        assert float((a - b).abs().max()) <= rtol * max(float(b.abs().max()), 1.0)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("fn", ["stsw", "stsw_unif", "spatial_stsw"])
def test_spherical_distances_equal_with_either_kernel(fn, p, monkeypatch):
    """stsw (S^2), stsw_unif (the projected uniform measure enters the compiled loop as
    atoms of given masses on each ray) and spatial_stsw (S^1 lifted to S^2), batched,
    with weights that need a gradient and in blocks of trees: values and the gradients
    of the points and weights equal the torch operators'."""
    g = torch.Generator().manual_seed(16)
    dim = 2 if fn == "spatial_stsw" else 3
    X = torch.nn.functional.normalize(torch.randn(2, 30, dim, generator=g, dtype=F64), dim=-1)
    Y = torch.nn.functional.normalize(torch.randn(2, 25, dim, generator=g, dtype=F64), dim=-1)
    a = torch.rand(2, 30, generator=g, dtype=F64) + 0.1
    b = torch.rand(2, 25, generator=g, dtype=F64) + 0.1
    b = b / b.sum(-1, keepdim=True) * a.sum(-1, keepdim=True)
    options = {"n_trees": 9, "n_lines": 4, "p": p, "seed": 0, "chunk_size": 4}
    results = []
    for compiled in (True, False):
        with monkeypatch.context() as mp:
            if not compiled:
                mp.setattr(_kernels, "usable", lambda *tensors, **kw: False)
            Xs, As = X.clone().requires_grad_(True), a.clone().requires_grad_(True)
            if fn == "stsw_unif":
                v = tsw.stsw_unif(Xs, As, n_grid=40, **options)
                inputs = (Xs, As)
            else:
                Ys, Bs = Y.clone().requires_grad_(True), b.clone().requires_grad_(True)
                v = getattr(tsw, fn)(Xs, Ys, As, Bs, **options)
                inputs = (Xs, Ys, As, Bs)
            results.append((v.detach(), *torch.autograd.grad(v.sum(), inputs)))
    for c, r in zip(*results, strict=True):
        torch.testing.assert_close(c, r, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("delta", [1e-3, 50.0, 500.0])
def test_split_ray_cost_extreme_temperatures(delta, monkeypatch):
    """A nearly uniform split, and splits whose smaller shares underflow (the compiled
    exponential clamps its argument at -87 in float32 and -708 in float64). In float64
    both paths agree to rounding; in float32 (where delta = 500 costs both about 3 digits
    of the gradients) the compiled path's error against float64 is at most twice the
    torch path's."""
    ones = torch.ones(3, 4, dtype=F64)
    exact = _ray_costs(_ray_inputs("float64", True), delta, 1.0, ones, False, monkeypatch)
    for name in ("float32", "float64"):
        inputs = _ray_inputs(name, True)
        up = torch.ones(3, 4, dtype=inputs[0].dtype)
        compiled = _ray_costs(inputs, delta, 1.0, up, True, monkeypatch)
        reference = _ray_costs(inputs, delta, 1.0, up, False, monkeypatch)
        for a, b, e in zip(compiled, reference, exact, strict=True):
            assert torch.isfinite(a).all()
            scale = max(float(e.abs().max()), 1.0)
            err, err_torch = (float((x.double() - e).abs().max()) for x in (a, b))
            if name == "float64":
                assert float((a - b).abs().max()) <= 1e-12 * scale
            else:
                assert err <= max(2 * err_torch, 1e-6 * scale), (err, err_torch)


def test_split_ray_cost_gradcheck():
    t, polar, theta, scale, w = _ray_inputs("float64", False)
    args = tuple(x[:2, :3, :7] if x.dim() == 3 else x[:2, :7] for x in (t, polar, scale, w))
    t, polar, scale, w = (x.clone().requires_grad_() for x in args)
    theta = theta[:2, :3].clone().requires_grad_()
    for p in (1.0, 2.0):
        assert torch.autograd.gradcheck(
            lambda *xs, p=p: _split_ray_cost(*xs, 0.9, p), (t, polar, theta, scale, w)
        )


def test_split_ray_cost_threads_give_the_same_bits():
    """Trees shared among threads (above the sort's threshold) give one thread's bits."""

    g = torch.Generator().manual_seed(13)
    T, n = 40, 2000
    t = torch.rand(1, T, n, generator=g) * math.pi
    polar = (torch.rand(1, T, n, generator=g) * 2 - 1) * math.pi
    theta = (torch.rand(1, T, 5, generator=g) * 2 - 1) * math.pi
    w = torch.randn(1, n, generator=g)
    threads = torch.get_num_threads()
    out = []
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            xs = [x.clone().requires_grad_(True) for x in (t, polar, theta, torch.sin(t), w)]
            v = _split_ray_cost(*xs, 2.0, 1.0)
            out.append((v.detach(), *torch.autograd.grad(v.sum(), xs)))
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(*out, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", ["float32", "float64"])
def test_compiled_exponential(name):
    """exp32_ / exp64_ against NumPy's exp (in float64): within 2 ulp of the dtype on
    [-80, 0] (the split's logits minus their maximum), clamped below, NaN kept."""
    import numpy as np

    from tsw.core import _numba_kernels as nk

    dt = np.float32 if name == "float32" else np.float64
    fn, ints, lo = (nk.exp32_, np.int32, -87.0)
    if name == "float64":
        fn, ints, lo = nk.exp64_, np.int64, -708.0
    x = np.concatenate([np.linspace(-80.0, 0.0, 200001), [-1000.0, lo, np.nan, 0.5]]).astype(dt)
    shift = np.zeros_like(x)
    shift[-1] = 0.5  # exp(0.5 - 0.5) = 1
    total = np.ones_like(x)
    e = x.copy()
    fn(e, shift, total, np.empty(x.shape, ints))
    exact = np.exp(np.maximum(x[:-2].astype(np.float64), lo))
    rel = np.abs(e[:-2] - exact) / exact
    assert rel.max() <= 2 * np.finfo(dt).eps, rel.max()
    assert np.isnan(e[-2])
    assert e[-1] == 1.0
    np.testing.assert_array_equal(total, 1 + e)


@pytest.mark.parametrize("name", ["float32", "float64"])
def test_s2_angles_backward_equals_autograd(name, monkeypatch):
    """The written-out backward of STSW's angles on S^2 (S2Angles), compiled and in torch
    operators, against autograd's graph of the operations it replaces (atan2, hypot with
    a zero subgradient at rho = 0, the norm of the points): gradients of the points and
    of the frames, with points at a root and its antipode (rho = 0) among them."""
    from tsw.core import _angles
    from tsw.sphere import _geometry as geo

    dt = getattr(torch, name)
    g = torch.Generator().manual_seed(14)
    B, T, n = 2, 3, 9
    trees = tsw.sample_spherical_trees(3, n_trees=T, n_lines=4, seed=1, dtype=F64)
    frames = geo._frames(trees)[0][None].expand(B, T, 3, 3).clone()
    Z = torch.randn(B, n, 3, generator=g, dtype=F64) * 1.3
    Z[0, 0], Z[1, 1] = 2 * trees.roots[0], -trees.roots[1]  # rho = 0 on those trees
    ups = [torch.randn(B, T, n, generator=g, dtype=F64).to(dt) for _ in range(3)]
    Z, frames = Z.to(dt), frames.to(dt)

    def autograd_graph(Zg, Fg):
        A = torch.matmul(Fg.reshape(B, 3 * T, 3), Zg.transpose(-1, -2)).reshape(B, T, 3, n)
        rho, polar = geo._Polar.apply(A[:, :, 1], A[:, :, 2])
        t = torch.atan2(rho, A[:, :, 0])
        return t, polar, rho * _angles.inv_norm(Zg)

    results = []
    for how in ("compiled", "torch", "autograd"):
        with monkeypatch.context() as mp:
            if how == "torch":
                mp.setattr(_kernels, "usable", lambda *tensors, **kw: False)
            Zg, Fg = Z.clone().requires_grad_(), frames.clone().requires_grad_()
            outs = autograd_graph(Zg, Fg) if how == "autograd" else _angles.S2Angles.apply(Zg, Fg)
            loss = sum((o * u).sum() for o, u in zip(outs, ups, strict=True))
            results.append((*(o.detach() for o in outs), *torch.autograd.grad(loss, (Zg, Fg))))
    tol = 1e-12 if name == "float64" else 2e-5
    for other in results[:2]:
        for a, b in zip(other, results[2], strict=True):
            assert float((a - b).abs().max()) <= tol * max(float(b.abs().max()), 1.0)


def test_s2_angles_gradcheck():
    from tsw.core import _angles
    from tsw.sphere import _geometry as geo

    g = torch.Generator().manual_seed(15)
    trees = tsw.sample_spherical_trees(3, n_trees=2, n_lines=3, seed=2, dtype=F64)
    frames = geo._frames(trees)[0][None].clone().requires_grad_()
    Z = torch.randn(2, 5, 3, generator=g, dtype=F64).requires_grad_()
    assert torch.autograd.gradcheck(lambda Z, F: _angles.S2Angles.apply(Z, F), (Z, frames))


# --------------------------------------------------------------------------- Flowtree


def _flowtree_case(seed: int, d: int, kind: str, words: int):
    """Trees on a support of 60 points and two sets of sparse histograms on it (CSR)."""
    import numpy as np

    from tsw.support._flowmatch import FlowtreeTrees, csr

    rng = np.random.default_rng(seed)
    X = torch.as_tensor(rng.normal(size=(60, d)))
    X[40:50] = X[:10].clone()  # duplicate points: shared cells
    if kind == "quadtree":
        trees = tsw.sample_quadtrees(X, 2, max_depth=None if seed % 2 else 3, seed=seed)
    else:
        trees = tsw.sample_cluster_trees(X, 2, n_clusters=3, depth=3, seed=seed)
    sets = []
    for k in (7, 5):
        H = np.zeros((k, 60))
        for r in range(k):
            H[r, rng.choice(60, words, replace=False)] = rng.random(words) + 0.05
        sets.append(csr(2.5 * H / H.sum(1, keepdims=True)))  # unnormalised equal totals
    return FlowtreeTrees.of(trees), sets[0], sets[1]


@pytest.mark.parametrize("kind", ["quadtree", "cluster"])
@pytest.mark.parametrize("d", [1, 2, 4])
@pytest.mark.parametrize(
    ("metric", "p"),
    [("euclidean", 2.0), ("sqeuclidean", 2.0), ("cityblock", 1.0), ("minkowski", 3.0)],
)
def test_flowtree_costs_compiled_equal_the_fallback(kind, d, metric, p, monkeypatch):
    """The same entries: the costs agree to the rounding of their sums (of up to 2s terms)."""
    from tsw.support._flowmatch import flowtree_costs

    assert _kernels.warm_up()
    prepared, s, t = _flowtree_case(d, d, kind, words=9)
    results = []
    for compiled in (True, False):
        with monkeypatch.context() as mp:
            if not compiled:
                mp.setattr(_kernels, "trees_usable", lambda: False)
            pair = flowtree_costs(prepared, s, t, metric=metric, p=p, per_tree=True)
            one = flowtree_costs(prepared, s, metric=metric, p=p, per_tree=True)
            results.append((pair, one))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(torch.as_tensor(a), torch.as_tensor(b), rtol=1e-14, atol=0)
        assert (a > 0).any()


def test_flowtree_sort_rows_equals_numpy():
    import numpy as np

    from tsw.support._flowmatch import _sort_rows

    assert _kernels.warm_up()
    prepared, s, _ = _flowtree_case(0, 2, "quadtree", words=13)
    key = prepared.order[0]
    ptr, idx, val = s
    _, out_idx, out_val = _sort_rows(s, key)
    row = np.repeat(np.arange(ptr.size - 1), np.diff(ptr))
    perm = np.lexsort((key[idx], row))
    assert np.array_equal(out_idx, idx[perm])
    assert np.array_equal(out_val, val[perm])


def test_flowtree_threads_give_the_same_bits(monkeypatch):
    """Rows shared among threads (work above the threshold) give one thread's bits."""
    from tsw.core import _threads
    from tsw.support._flowmatch import flowtree_costs

    assert _kernels.warm_up()
    prepared, s, t = _flowtree_case(3, 2, "quadtree", words=9)
    threads = torch.get_num_threads()
    out = []
    try:
        monkeypatch.setattr(_threads, "PARALLEL_MIN", 1)
        for n in (1, 3):
            torch.set_num_threads(n)
            out.append((flowtree_costs(prepared, s, t), flowtree_costs(prepared, s)))
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(*out, strict=True):
        assert (a == b).all()


@pytest.mark.parametrize("d", [1, 3])
def test_flowtree_plans_compiled_equal_the_fallback(d, monkeypatch):
    """tsw.flowtree between point clouds: the same plan and cost, bit for bit, either way."""
    assert _kernels.warm_up()
    g = torch.Generator().manual_seed(d)
    X = torch.randn(2, 13, d, generator=g, dtype=F64)
    Y = torch.randn(2, 17, d, generator=g, dtype=F64)
    a = torch.rand(2, 13, generator=g, dtype=F64)
    b = torch.rand(2, 17, generator=g, dtype=F64)
    a, b = 3 * a / a.sum(-1, keepdim=True), 3 * b / b.sum(-1, keepdim=True)
    results = []
    for compiled in (True, False):
        with monkeypatch.context() as mp:
            if not compiled:
                mp.setattr(_kernels, "trees_usable", lambda: False)
            plan, cost, log = tsw.flowtree(X, Y, a, b, n_trees=3, seed=0, dense=True, log=True)
            results.append((plan, cost, log["per_tree"]))
    for u, v in zip(*results, strict=True):
        assert torch.equal(u, v)
