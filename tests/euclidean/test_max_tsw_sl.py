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
