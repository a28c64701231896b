"""float32 accuracy against float64, and memory that does not grow with T*k*N*d."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tsw
from benchmarks._memory import peak_growth


def _problem(d: int, n: int, offset: float, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    # inputs representable in float32, so both precisions see the same data
    X = (torch.randn(n, d, generator=g, dtype=torch.float64) + offset).float().double()
    Y = (torch.randn(n, d, generator=g, dtype=torch.float64) + offset + 0.5).float().double()
    center = 0.5 * (X.mean(0) + Y.mean(0))
    trees = tsw.sample_concurrent_lines(
        d, n_trees=100, n_lines=4, center=center, seed=seed, dtype=torch.float64
    )
    return X, Y, trees


def _value_and_grad(fn, X, Y, trees, dtype):
    Xs = X.to(dtype).detach().requires_grad_(True)
    v = fn(Xs, Y.to(dtype), trees=trees.to(dtype), validate=False)
    v.backward()
    return v.double(), Xs.grad.double()


@pytest.mark.parametrize("d", [2, 3, 4, 16, 64])
@pytest.mark.parametrize("offset", [0.0, 30.0])
@pytest.mark.parametrize(
    "fn",
    [
        lambda *a, **k: tsw.db_tsw(*a, delta=2.0, **k),
        lambda *a, **k: tsw.db_tsw(*a, delta=10.0, p=2, **k),
        tsw.tsw_sl,
    ],
    ids=["db_tsw", "db_tsw_d10_p2", "tsw_sl"],
)
def test_float32_matches_float64(fn, d, offset):
    """Relative error of value and gradient at most 1e-4, also at d = 2 near lines.

    Coordinates that differ in float64 but round to the same float32 value are a tie in
    float32, where the cost (piecewise linear in the coordinates) takes one of its
    subgradients; a tie broken the other way than float64's order moves the gradient of
    its two points by a few percent (measured: 4.6% for the one such pair of tsw_sl at
    d = 64, against at most 3.6e-6 for every other point). The gradient is therefore
    compared without the 1% of the points (10) with the largest errors; an error of
    precision (offset 30 without centring) moves every point.
    """
    X, Y, trees = _problem(d, 1000, offset)
    v64, g64 = _value_and_grad(fn, X, Y, trees, torch.float64)
    v32, g32 = _value_and_grad(fn, X, Y, trees, torch.float32)
    assert abs(v32 - v64) / v64 < 1e-4
    errors = (g32 - g64).norm(dim=-1)
    kept = torch.sort(errors).values[: int(0.99 * len(errors))]
    assert kept.norm() / g64.norm() < 1e-4


def _db_tsw_step(d: int):
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(1000, d, generator=g).requires_grad_(True)
    Y = torch.randn(1000, d, generator=g)
    trees = tsw.sample_concurrent_lines(d, n_trees=50, n_lines=4, seed=0)
    return lambda: tsw.db_tsw(X, Y, trees=trees, validate=False).backward()


def test_peak_memory_does_not_scale_with_tknd():
    """At d = 1024, T*k*n*d*4 bytes would be 1.6 GB; the growth stays far below."""
    growth_mib = peak_growth(_db_tsw_step, 1024)
    assert growth_mib < 150, f"peak RSS grew by {growth_mib:.0f} MiB"


# ------------------------------------------------------------ masses and data at extreme scales


def _oracle_problem(seed=0, n=6, m=5, d=3, T=3, k=3):
    """A float64 problem with unit-total weights and explicit concurrent and chain trees."""
    import _reference as ref

    rng = np.random.default_rng(seed)
    X, Y, a, b = ref.random_problem(rng, d, n, m)
    roots, dirs = ref.star_trees(rng, T, k, d)
    return X, Y, a, b, roots, dirs


def _tree_value(method, X, Y, a, b, roots, dirs, p):
    """The value at unit masses from the explicit trees (numpy float64, ``_reference``)."""
    import _reference as ref

    if method == "tsw_sl chain":
        sources = []  # source i on line i - 1, at coordinate 0.3 i
        for r, th in zip(roots, dirs, strict=True):
            chain = [r]
            for i in range(1, len(th)):
                chain.append(chain[-1] + 0.3 * i * th[i - 1])
            sources.append(np.stack(chain))
        per_tree = [
            ref.tree_oracle(X, Y, a, b, s, th, chain=True, p=p)
            for s, th in zip(sources, dirs, strict=True)
        ]
        return ref.mean_root(per_tree, p), sources
    delta = {"db_tsw": 2.0, "tsw_sl": None}[method]
    per_tree = [
        ref.star_oracle(X, Y, a, b, r, th, p=p, delta=delta)
        for r, th in zip(roots, dirs, strict=True)
    ]
    return ref.mean_root(per_tree, p), None


@pytest.mark.parametrize(
    ("precision", "total"),
    [(torch.float32, 1e-30), (torch.float32, 1e30), (torch.float64, 1e-300)],
    ids=["f32-1e-30", "f32-1e30", "f64-1e-300"],
)
@pytest.mark.parametrize("method", ["db_tsw", "tsw_sl", "tsw_sl chain"])
@pytest.mark.parametrize("p", [2.0, 3.0])
def test_tiny_and_huge_masses_keep_the_trees_value(method, precision, total, p):
    """Masses of total 1e-30 (float32) or 1e-300 (float64) at p > 1: not 0, not an error.

    The trees' cost is of degree p in the masses (their differences' p-th powers), so
    its root is of degree 1: the value is ``total`` times the value at unit masses,
    which the explicit trees give in float64 (``_reference``). The p-th powers of
    masses of 1e-30 underflow in float32, where the value (about 1e-31) does not.
    """
    X, Y, a, b, roots, dirs = _oracle_problem()
    want, sources = _tree_value(method, X, Y, a, b, roots, dirs, p)
    args = [torch.as_tensor(v, dtype=precision) for v in (X, Y, a * total, b * total)]
    if method == "tsw_sl chain":
        trees = tsw.ChainLines(torch.as_tensor(np.stack(sources)), torch.as_tensor(dirs))
        got = tsw.tsw_sl(*args, trees=trees.to(precision), p=p)
    else:
        trees = tsw.ConcurrentLines(torch.as_tensor(roots), torch.as_tensor(dirs)).to(precision)
        fn = tsw.db_tsw if method == "db_tsw" else tsw.tsw_sl
        got = fn(*args, trees=trees, p=p, **({"delta": 2.0} if method == "db_tsw" else {}))
    tol = 1e-5 if precision == torch.float32 else 1e-10
    assert float(got) == pytest.approx(total * float(want), rel=tol, abs=0)


@pytest.mark.parametrize("p", [2.0, 3.0])
def test_per_tree_costs_are_pth_powers_of_the_masses(p):
    """At total mass 8 the per-tree costs of ``log=True`` are 8^p times those at total 1.

    At p > 1 the masses are divided by a power of two near their total inside (8 here,
    exactly) and the costs multiplied back: the per-tree costs are p-th powers (a form
    of degree p in the masses), the value their mean's root (degree 1). Both against
    the explicit trees at unit masses (``_reference``, float64), and the standard error
    of degree 1 as the value.
    """
    import _reference as ref

    X, Y, a, b, roots, dirs = _oracle_problem(seed=2)
    trees = tsw.ConcurrentLines(torch.as_tensor(roots), torch.as_tensor(dirs))
    unit = [
        ref.star_oracle(X, Y, a, b, r, th, p=p, delta=2.0)
        for r, th in zip(roots, dirs, strict=True)
    ]
    args = [torch.as_tensor(v) for v in (X, Y)]
    logs = {}
    for total in (1.0, 8.0):
        weights = [torch.as_tensor(w * total) for w in (a, b)]
        logs[total] = tsw.db_tsw(*args, *weights, trees=trees, p=p, delta=2.0, log=True)
    (v1, log1), (v8, log8) = logs[1.0], logs[8.0]
    np.testing.assert_allclose(log1["per_tree"].numpy(), unit, rtol=1e-12, atol=0)
    np.testing.assert_allclose(
        log8["per_tree"].numpy(), 8.0**p * np.array(unit), rtol=1e-12, atol=0
    )
    assert float(v8) == pytest.approx(8.0 * float(v1), rel=1e-13, abs=0)
    assert float(log8["std_error"]) == pytest.approx(8.0 * float(log1["std_error"]), rel=1e-12)
    assert float(log1["std_error"]) > 0


@pytest.mark.parametrize(
    "call",
    [
        lambda *a: tsw.ts_sobolev(*a, p=2.0, n_trees=4, seed=0),
        lambda *a: tsw.circular_tsw(*a, radius=0.5, p=2.0, n_trees=4, seed=0),
        lambda *a: tsw.max_tsw_sl(*a, p=2.0, n_iter=5, seed=0),
        lambda *a: tsw.db_tsw(*a, p=2.0, n_trees=4, seed=0),
    ],
    ids=["ts_sobolev", "circular_tsw", "max_tsw_sl", "db_tsw"],
)
@pytest.mark.parametrize(
    ("precision", "total"), [(torch.float32, 1e-30), (torch.float64, 1e-300)], ids=["f32", "f64"]
)
def test_tiny_masses_of_the_other_tree_methods(call, precision, total):
    """The root of a degree-p form in the masses is of degree 1: ``total`` times the value.

    The reference is the same call in float64 at unit masses, multiplied by ``total``
    (the methods' values at unit masses are checked against the explicit trees in
    their own files). The masses' p-th powers underflow to 0 in float32 (float64 at
    1e-300), where the value does not.
    """
    X, Y, a, b, _, _ = _oracle_problem(seed=1)
    unit = float(call(*(torch.as_tensor(v) for v in (X, Y, a, b))))
    got = float(call(*(torch.as_tensor(v, dtype=precision) for v in (X, Y, a * total, b * total))))
    assert unit > 0
    tol = 1e-4 if precision == torch.float32 else 1e-10
    assert got == pytest.approx(total * unit, rel=tol, abs=0)


@pytest.mark.parametrize("scale", [1e15, 1e-15])
def test_max_sw_ascent_is_free_of_the_data_scale(scale):
    """float32 data times 1e15 or 1e-15: max-SW's ascent climbs as at scale 1.

    The value is W_2 along the final direction (POT's ``wasserstein_1d`` in float64 on
    the projections), and it reaches the maximum found at scale 1 (to 1e-3): the
    gradient's squared norm would overflow (1e15) or underflow (1e-15) in float32.
    """
    import ot

    g = torch.Generator().manual_seed(0)
    X = torch.randn(50, 3, generator=g)
    Y = torch.randn(60, 3, generator=g) * torch.tensor([1.0, 2.5, 0.5]) + 0.5
    kw = {"seed": 0, "n_init": 4, "n_iter": 200}
    unit = float(tsw.max_sw(X.double(), Y.double(), **kw))
    value, info = tsw.max_sw(X * scale, Y * scale, log=True, **kw)
    theta = info["projections"].double().numpy().reshape(3, 1)
    Xs, Ys = (X.double() * scale).numpy(), (Y.double() * scale).numpy()
    want = float(ot.wasserstein_1d((Xs @ theta)[:, 0], (Ys @ theta)[:, 0], p=2)) ** 0.5
    assert float(value) == pytest.approx(want, rel=1e-4, abs=0)
    assert float(value) / scale == pytest.approx(unit, rel=1e-3)


def test_batch_items_of_other_totals_in_blocks_of_one_item(monkeypatch):
    """Items whose masses total 1, 8e5 and 1e-30, at p = 2, evaluated one item a block
    (the blocks' cache budget set to one element): each value is its total times the
    explicit trees' value at unit masses (``_reference``, float64)."""
    import tsw.core._blocks as blocks

    monkeypatch.setattr(blocks, "CACHE_BLOCK_ELEMENTS", 1)
    monkeypatch.setattr(blocks, "COMPILED_BLOCK_ELEMENTS", 1)
    X, Y, a, b, roots, dirs = _oracle_problem()
    want, _ = _tree_value("db_tsw", X, Y, a, b, roots, dirs, 2.0)
    totals = np.array([1.0, 8e5, 1e-30])
    stack = [torch.as_tensor(np.stack([v] * len(totals))) for v in (X, Y)]
    weights = [torch.as_tensor(totals[:, None] * w) for w in (a, b)]
    trees = tsw.ConcurrentLines(torch.as_tensor(roots), torch.as_tensor(dirs))
    got = tsw.db_tsw(*stack, *weights, trees=trees, p=2.0, delta=2.0)
    np.testing.assert_allclose(got.numpy(), totals * float(want), rtol=1e-10, atol=0)
