"""MaxTSW-SL (``tsw.euclidean._max_tsw_sl``): the ascent's value against exact maxima.

With the uniform split at p = 1 the maximum is max-SW_1, computed exactly for planar
clouds on a fine grid of angles (POT's per-projection costs); the value beats TSW-SL on
random trees of its shape and reproduces on its final trees, whose roots and
attachments stay as drawn; the ascent never decreases; with a constant split the
sources' gradient vanishes (why only the directions move); a zero-weight atom changes
nothing without validation.

The distance's shared properties run in ``test_contract.py``; the refusal of second
derivatives in ``test_second_order.py``.
"""

from __future__ import annotations

import math

import numpy as np
import ot
import pytest
import torch

import tsw

F64 = torch.float64


def clouds(seed=0, N=40, M=30, d=2, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, d, generator=g, dtype=F64)
    Y = 1.5 * torch.randn(M, d, generator=g, dtype=F64) + 1.0
    return X.to(dtype), Y.to(dtype)


def max_sw1_planar(X, Y, n=20001):
    """Exact max-SW_1 of planar clouds: a fine grid of angles (W_1 is Lipschitz in theta),
    each direction's W_1 from POT."""
    angles = np.linspace(0, math.pi, n)
    grid = np.stack([np.cos(angles), np.sin(angles)])
    _, log = ot.sliced_wasserstein_distance(X.numpy(), Y.numpy(), projections=grid, p=1, log=True)
    return float(np.max(log["projected_emds"]))


def test_it_beats_random_trees_of_its_shape_and_reaches_max_sw1():
    X, Y = clouds(10)
    value, info = tsw.max_tsw_sl(X, Y, n_lines=4, seed=0, log=True)
    # random chain trees of the same shape (1 tree x 4 lines): TSW-SL never exceeds it
    randoms = [float(tsw.tsw_sl(X, Y, n_trees=1, n_lines=4, seed=s)) for s in range(40)]
    assert float(value) >= max(randoms)
    # with the uniform split at p = 1 the maximum is max-SW_1 (every line on the best one)
    best = max_sw1_planar(X, Y)
    assert float(value) <= best * (1 + 1e-7)  # the grid's resolution
    assert float(value) == pytest.approx(best, rel=1e-6)
    # the final trees reproduce the value, and keep the drawn roots and attachments
    trees = info["trees"]
    assert torch.equal(tsw.tsw_sl(X, Y, trees=trees), value)
    centre = (X.mean(0) + Y.mean(0)) / 2  # the weighted mean of both measures
    start = tsw.sample_chain_lines(2, n_trees=1, n_lines=4, center=centre, seed=0, dtype=F64)
    tsw.ChainLines(trees.sources, trees.directions)  # sources on the previous lines
    torch.testing.assert_close(trees.roots, start.roots)
    torch.testing.assert_close(trees.attachments, start.attachments)


def test_without_steps_it_is_tsw_sl_and_the_ascent_never_decreases():
    X, Y = clouds(11, N=30, M=30, d=3)
    for tree in ("chain", "concurrent"):
        kw = {"n_trees": 2, "n_lines": 3, "tree": tree, "seed": 4}
        assert torch.equal(tsw.max_tsw_sl(X, Y, n_iter=0, **kw), tsw.tsw_sl(X, Y, **kw))
        values = [float(tsw.max_tsw_sl(X, Y, n_iter=n, lr=0.05, **kw)) for n in (0, 3, 15)]
        assert values == sorted(values)


def test_tsw_sl_does_not_depend_on_roots_or_attachments():
    """Why MaxTSW-SL moves the directions only: with a constant split the sources'
    gradient vanishes (no mass crosses a root or an attachment)."""
    X, Y = clouds(12, N=20, M=15, d=3)
    trees = tsw.sample_chain_lines(3, n_trees=2, n_lines=4, std=1.0, seed=0, dtype=F64)
    sources = trees.sources.clone().requires_grad_()
    value = tsw.tsw_sl(X, Y, trees=tsw.ChainLines(sources, trees.directions), p=2)
    (grad,) = torch.autograd.grad(value, sources)
    assert float(grad.abs().max()) < 1e-12


@pytest.mark.parametrize("precision", [torch.float32, F64])
@pytest.mark.parametrize("p", [1, 2])
def test_a_zero_weight_atom_without_validation_changes_nothing(precision, p):
    """A reported NaN with a zero-weight atom and validate=False (not reproduced): the
    value is finite and, with the other atoms' gradients, equals TSW-SL on the final
    trees without the atom; the atom's own gradient is 0; the same seed without the atom
    gives the same value."""
    X, Y = clouds(13, N=7, M=5, d=3, dtype=precision)
    a = torch.rand(7, generator=torch.Generator().manual_seed(1), dtype=precision) + 0.1
    a[2] = 0.0
    a = a / a.sum()
    keep = torch.arange(7) != 2
    kwargs = {"seed": 0, "p": p, "n_iter": 30, "lr": 0.05}
    Xg = X.clone().requires_grad_()
    value, info = tsw.max_tsw_sl(Xg, Y, a, None, validate=False, log=True, **kwargs)
    (grad,) = torch.autograd.grad(value, Xg)
    assert torch.isfinite(value)
    assert torch.isfinite(grad).all()
    assert float(grad[2].abs().max()) == 0.0
    Xr = X[keep].clone().requires_grad_()
    fixed = tsw.tsw_sl(Xr, Y, a[keep], None, trees=info["trees"], p=p)
    (grad_fixed,) = torch.autograd.grad(fixed, Xr)
    tol = {"rtol": 1e-5, "atol": 1e-6} if precision == torch.float32 else {}
    torch.testing.assert_close(value, fixed, **tol)
    torch.testing.assert_close(grad[keep], grad_fixed, **tol)
    torch.testing.assert_close(value, tsw.max_tsw_sl(X[keep], Y, a[keep], None, **kwargs), **tol)


@pytest.mark.parametrize(
    ("option", "value", "error", "message"),
    [
        ("tree", "star", ValueError, "tree must be one of 'chain', 'concurrent'; got 'star'"),
        ("n_iter", -1, ValueError, "n_iter must be an int >= 0; got -1"),
        ("lr", -0.1, ValueError, "lr must be a finite real number >= 0; got -0.1"),
        ("n_lines", 0, ValueError, "n_lines must be an int >= 1; got 0"),
    ],
)
def test_bad_options_name_the_argument_and_the_value(option, value, error, message):
    X = torch.zeros(3, 2)
    with pytest.raises(error, match=message):
        tsw.max_tsw_sl(X, X + 1, **{"seed": 0, option: value})
    with pytest.raises(error, match=message):
        tsw.nn.MaxTSWSLLoss(**{option: value})


def cdf_cost(u, v, p):
    """∫ |F_u - F_v|^p dt of two uniform empirical measures on a line (exact, numpy).

    A tree of one line under the uniform split: each edge carries the difference of the
    masses beyond it, on either side of the root the same (the measures are balanced).
    """
    pts = np.sort(np.concatenate([u, v]))
    mid = 0.5 * (pts[1:] + pts[:-1])
    Fu = (u[None, :] <= mid[:, None]).mean(1)
    Fv = (v[None, :] <= mid[:, None]).mean(1)
    return float(np.sum(np.diff(pts) * np.abs(Fu - Fv) ** p))


def test_the_ascent_maximises_the_cost_at_p():
    """At p = 2 the trees of one line climb to the maximum of ∫|F - G|^2 over the angle
    (a fine grid, numpy), at 1.173 rad, where the p = 1 cost's maximum lies at 1.140 rad:
    an ascent on the p = 1 cost stops short of the p = 2 maximum."""
    X, Y = clouds(3)
    angles = np.linspace(0, math.pi, 4001)
    costs = [cdf_cost(X.numpy() @ [math.cos(t), math.sin(t)],
                      Y.numpy() @ [math.cos(t), math.sin(t)], 2) for t in angles]  # fmt: skip
    best = max(costs) ** 0.5
    _, info = tsw.max_tsw_sl(X, Y, n_trees=4, n_lines=1, p=2, n_iter=300, lr=0.01, seed=0,
                             log=True)  # fmt: skip
    per_tree = info["per_tree"] ** 0.5
    assert float(per_tree.max()) <= best * (1 + 1e-6)
    assert per_tree.numpy() == pytest.approx(np.full(4, best), rel=1e-5)


@pytest.mark.parametrize(("total", "p"), [(1e30, 1), (1e30, 2), (1e-30, 2)])
def test_the_ascent_is_free_of_the_masses_scale(total, p):
    """float32 weights of total 1e30 or 1e-30: the ascent climbs as with unit weights.

    Its value at the final trees equals the explicit one-line costs (numpy, float64) times
    ``total`` (degree 1 of the root), and reaches the unit-weight maximum; the norm of the
    gradient at masses of 1e30 overflowed in float32 and the ascent never left its start.
    """
    X, Y = clouds(3, dtype=torch.float32)
    a, b = torch.full((40,), total / 40), torch.full((30,), total / 30)
    kw = {"n_trees": 4, "n_lines": 1, "p": p, "n_iter": 300, "lr": 0.01, "seed": 0, "log": True}
    value, info = tsw.max_tsw_sl(X, Y, a, b, **kw)
    unit = float(tsw.max_tsw_sl(X.double(), Y.double(), **kw)[0])
    start = float(tsw.max_tsw_sl(X.double(), Y.double(), **{**kw, "n_iter": 0})[0])
    assert unit > 1.05 * start  # the ascent moves
    dirs = info["trees"].directions[:, 0, :].double().numpy()
    Xn, Yn = X.double().numpy(), Y.double().numpy()
    want = np.mean([cdf_cost(Xn @ t, Yn @ t, p) for t in dirs]) ** (1 / p)
    # the root is of degree 1 in the masses, at every p
    assert float(value) == pytest.approx(total * want, rel=1e-4, abs=0)
    assert float(value) / total == pytest.approx(unit, rel=1e-3)


def test_explicit_trees_give_the_counts():
    """``n_trees`` and ``n_lines`` are read from ``trees`` when not given (2 trees of 3
    lines here; the defaults 1 and 4 apply to drawn trees only)."""
    X, Y = clouds(5, N=20, M=20, d=3)
    trees = tsw.sample_chain_lines(3, n_trees=2, n_lines=3, seed=0, dtype=F64)
    value, info = tsw.max_tsw_sl(X, Y, trees=trees, n_iter=5, log=True)
    assert (info["trees"].n_trees, info["trees"].n_lines) == (2, 3)
    assert torch.equal(tsw.tsw_sl(X, Y, trees=info["trees"]), value)
    with pytest.raises(ValueError, match="n_trees=1 disagrees with the explicit trees"):
        tsw.max_tsw_sl(X, Y, trees=trees, n_trees=1)
    drawn = tsw.max_tsw_sl(X, Y, seed=0, n_iter=0, log=True)[1]["trees"]
    assert (drawn.n_trees, drawn.n_lines) == (1, 4)


def test_data_out_of_range_raise_before_the_ascent():
    """float32 data of magnitude 1e18: the squared distances overflow (their sum over the
    atoms exceeds float32's largest value, computed here in float64), so the range check
    raises naming X_s before the ascent, not a value or an ascent on Inf costs."""
    X, Y = clouds(6, N=20, M=20, d=3, dtype=torch.float32)
    X = X * 1e18
    s = float(X.abs().max())
    assert 20 * 2 * (2 * math.sqrt(3) * s) ** 2 > torch.finfo(torch.float32).max
    with pytest.raises(ValueError, match="X_s has entries of magnitude up to"):
        tsw.max_tsw_sl(X, Y, seed=0, n_iter=2)
