"""``tsw.core.wasserstein_1d``: one-dimensional W_p against POT and the exact LP.

General weights, and the sorted shortcut of equal sizes with one weight (two sorts, no
search of the cumulative weights), ties included; the shortcut's gradient against its
closed form.
"""

from __future__ import annotations

import numpy as np
import ot
import pytest
import torch
from _reference import assert_close, t64, weights

import tsw


@pytest.mark.parametrize("p", [1, 1.5, 2, 3])
def test_wasserstein_1d_equals_pot(p):
    rng = np.random.default_rng(7400)
    n, m = 6, 9
    u, v = rng.normal(size=(2, 3, n)), rng.normal(size=(2, 3, m)) + 0.5
    uw, vw = weights(rng, (2, 3, n), 0.2), weights(rng, (2, 3, m), 0.2)
    got = tsw.wasserstein_1d(t64(u), t64(v), t64(uw), t64(vw), p=p)
    pot = ot.wasserstein_1d(*(z.reshape(6, -1).T for z in (u, v, uw, vw)), p=p)  # atoms first
    assert_close(got, pot.reshape(2, 3))
    lp = ot.emd2(uw[0, 0], vw[0, 0], np.abs(u[0, 0][:, None] - v[0, 0][None]) ** p)
    assert_close(got[0, 0], lp)


@pytest.mark.parametrize("p", [1, 1.5, 2, 3])
@pytest.mark.parametrize(
    "given", ["none", "uniform", "constant 2/n", "one constant per item", "varying"]
)
def test_wasserstein_1d_equal_sizes_equals_pot(p, given, monkeypatch):
    """n = m atoms of one weight take the sorted shortcut (two sorts, no search of
    the cumulative weights); other weights the general path. Both equal POT and the
    LP, ties among the values included."""
    from tsw.core import wasserstein_1d as w1d

    # which path ran (the shortcut's one weight, or None): the comparison with POT below
    # covers the path each case is meant to take
    taken = []
    real = w1d._one_weight
    monkeypatch.setattr(w1d, "_one_weight", lambda *a: taken.append(real(*a)) or taken[-1])
    rng = np.random.default_rng(7450)
    n = 7
    u, v = rng.normal(size=(2, 3, n)), rng.normal(size=(2, 3, n)) + 0.5
    u[..., :2] = v[..., 3:5] = 0.25  # ties within and across the measures
    uw = vw = None
    if given == "uniform":
        uw, vw = np.full((2, 3, n), 1 / n), np.full((2, 3, n), 1 / n)
    elif given == "constant 2/n":
        uw, vw = np.full((2, 3, n), 2 / n), np.full((2, 3, n), 2 / n)
    elif given == "one constant per item":  # totals 1 and 3: one weight per item
        uw = np.full((2, 3, n), 1 / n) * np.array([1.0, 3.0])[:, None, None]
        vw = uw.copy()
    elif given == "varying":
        uw, vw = weights(rng, (2, 3, n), 0.0), weights(rng, (2, 3, n), 0.0)
    got = tsw.wasserstein_1d(
        t64(u), t64(v), *(None if z is None else t64(z) for z in (uw, vw)), p=p
    )
    assert (taken[-1] is None) == (given == "varying")
    ones = np.full((2, 3, n), 1 / n)
    a, b = (ones, ones) if uw is None else (uw, vw)
    pot = ot.wasserstein_1d(*(z.reshape(6, -1).T for z in (u, v, a, b)), p=p)
    assert_close(got, pot.reshape(2, 3))
    lp = ot.emd2(a[1, 2], b[1, 2], np.abs(u[1, 2][:, None] - v[1, 2][None]) ** p)
    assert_close(got[1, 2], lp)


@pytest.mark.parametrize("p", [1, 1.5, 2])
def test_sorted_shortcut_gradient(p):
    """The values' gradient of the shortcut, at distinct values, equals the closed
    form ``w p |u_i - v_s(i)|^(p-1) sign(u_i - v_s(i))`` (``v_s(i)`` the atom of v of
    u_i's rank), and the general path's (taken when the weights need a gradient)."""
    rng = np.random.default_rng(7460)
    u, v = rng.normal(size=(4, 9)), rng.normal(size=(4, 9))
    ranks = np.argsort(np.argsort(u, axis=-1), axis=-1)
    matched = np.take_along_axis(np.sort(v, axis=-1), ranks, axis=-1)
    diff = u - matched
    expected = p * np.abs(diff) ** (p - 1) * np.sign(diff) / 9
    grads = []
    for need in (False, True):
        uu = t64(u).requires_grad_(True)
        w = torch.full_like(uu, 1 / 9).requires_grad_(need)
        vv = t64(v)
        tsw.wasserstein_1d(uu, vv, w, torch.full_like(vv, 1 / 9), p=p).sum().backward()
        grads.append(uu.grad)
    assert_close(grads[0], expected)
    assert_close(grads[1], expected)
