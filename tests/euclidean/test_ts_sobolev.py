"""TS-Sobolev (``tsw.euclidean._ts_sobolev``): the edge sum on the explicit tree, and its options.

Every tree's cost against the sum over the edges of the explicit tree of concurrent
lines (``_reference.line_system_tree``), with the subtree lengths read off that tree and
the weights integrated numerically by ``scipy.integrate.quad``; at ``p = 1`` against
``ot.emd2`` on the tree metric (the tree W1); the authors' published self-test values; a
far atom of zero weight; a triangle that fails by hand; the messages of bad options.

The distance's shared properties run in ``test_contract.py`` (its registry entries);
its second derivatives in ``test_second_order.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _reference import emd_on_lines, line_system_tree, subtree_members
from scipy.integrate import quad

import tsw

F64 = torch.float64


def star_masses(X, w, roots, dirs, delta):
    """Coordinates (k, n) and masses (k, n) of one tree, from the geometry written out."""
    z = X - roots  # (n, d)
    coords = dirs @ z.T  # (k, n)
    foot = coords[..., None] * dirs[:, None, :]  # (k, n, d): the feet on the lines
    dist = torch.linalg.vector_norm(z[None] - foot, dim=-1)
    alpha = torch.softmax(-delta * dist, dim=0)
    return coords, alpha * w


def sobolev_reference(coords, signed, p):
    """Σ_e β_e |mass beyond e|^p on the explicit tree of concurrent lines.

    The tree is cut to the paths from the root to the atoms of non-zero mass; λ(Γ(v)) is
    the total length of the cut tree below node v; β_v integrates (1 + λ + s)^(1 - p)
    over the edge from v to its parent, numerically.
    """
    parents, lengths, atom_nodes = line_system_tree(coords)
    mass = np.zeros(len(parents))
    np.add.at(mass, atom_nodes.reshape(-1), np.asarray(signed, float).reshape(-1))
    members = subtree_members(parents)
    spanned = [any(mass[u] != 0 for u in members[v]) for v in range(len(parents))]
    total = 0.0
    for v, below in enumerate(members):
        if parents[v] == -1 or not spanned[v]:
            continue
        lam = sum(lengths[u] for u in below if u != v and spanned[u])
        beta, _ = quad(lambda s, lam=lam: (1 + lam + s) ** (1 - p), 0.0, lengths[v])
        total += beta * abs(mass[below].sum()) ** p
    return total


def _problem(seed, N=5, M=4, d=3, T=2, k=3, zero=False):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, d, generator=g, dtype=F64)
    Y = 0.7 * torch.randn(M, d, generator=g, dtype=F64) + 0.5
    a = torch.rand(N, generator=g, dtype=F64) + 0.1
    b = torch.rand(M, generator=g, dtype=F64) + 0.1
    if zero:
        a[1] = 0.0
    a, b = a / a.sum(), b / b.sum()
    trees = tsw.sample_concurrent_lines(d, n_trees=T, n_lines=k, std=0.5, seed=seed, dtype=F64)
    return X, Y, a, b, trees


def _tree(X, Y, a, b, trees, t, delta):
    """Tree ``t``'s coordinates (k, N + M) and signed masses, written out."""
    roots, dirs = trees.roots[t], trees.directions[t]
    cx, mx = star_masses(X, a, roots, dirs, delta)
    cy, my = star_masses(Y, b, roots, dirs, delta)
    return cx, cy, mx, my


@pytest.mark.parametrize(
    ("p", "delta", "seed"),
    [(2.0, 2.0, 0), (3.0, 0.5, 1), (1.5, 0.0, 2), (2.5, 1.0, 3), (1.0, 2.0, 4), (2.0, 2.0, 5)],
)
def test_each_tree_equals_its_edge_sum_on_the_explicit_tree(p, delta, seed):
    X, Y, a, b, trees = _problem(seed, zero=seed == 5)
    _, info = tsw.ts_sobolev(X, Y, a, b, trees=trees, delta=delta, p=p, power=True, log=True)
    for t in range(trees.n_trees):
        cx, cy, mx, my = _tree(X, Y, a, b, trees, t, delta)
        coords = torch.cat([cx, cy], -1).numpy()
        signed = torch.cat([mx, -my], -1).numpy()
        expected = sobolev_reference(coords, signed, p)
        assert float(info["per_tree"][t]) == pytest.approx(expected, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_p1_is_the_tree_w1_and_the_closed_form_tends_to_it(seed):
    """At p = 1 each tree's cost is the exact W1 of the tree metric (``ot.emd2``), and the
    Sobolev closed form just above p = 1 tends to it."""
    X, Y, a, b, trees = _problem(10 + seed, N=6, M=5)
    _, info = tsw.ts_sobolev(X, Y, a, b, trees=trees, delta=1.5, p=1, log=True)
    near = tsw.ts_sobolev(X, Y, a, b, trees=trees, delta=1.5, p=1 + 1e-9, power=True, log=True)
    for t in range(trees.n_trees):
        cx, cy, mx, my = _tree(X, Y, a, b, trees, t, 1.5)
        expected = emd_on_lines(cx.numpy(), cy.numpy(), mx.numpy(), my.numpy())
        assert float(info["per_tree"][t]) == pytest.approx(expected, rel=1e-9, abs=1e-12)
        assert float(near[1]["per_tree"][t]) == pytest.approx(expected, rel=1e-7)


def test_the_authors_self_test():
    """Their two lines along (1, 1) and (2, -1), root 0, delta = -1: 0.426344 (p = 2) and
    0.349254 (p = 3) to their tolerance 1e-5 (float32), and the edge sum in float64.

    The public function takes ``delta >= 0`` (as Db-TSW does), so the self-test's
    negative delta runs through the method's own projection and closed form."""
    from tsw.core._validation import check_measures
    from tsw.euclidean._db_tsw import db_projection
    from tsw.euclidean._ts_sobolev import sobolev_cost

    for dtype in (torch.float32, F64):
        th = torch.tensor([[[1.0, 1.0], [2.0, -1.0]]], dtype=dtype)
        th = th / torch.linalg.vector_norm(th, dim=-1, keepdim=True)
        trees = tsw.ConcurrentLines(torch.zeros(1, 2, dtype=dtype), th)
        X = torch.tensor([[2.0, 0.0], [4.0, 0.0]], dtype=dtype)
        Y = torch.tensor([[2.0, 1.0], [6.0, 0.0]], dtype=dtype)
        measures = check_measures(X, Y, None, None)
        for p, published in ((2, 0.426344), (3, 0.349254)):
            cost = sobolev_cost(db_projection(measures, trees, -1.0), float(p))
            value = float(cost.mean()) ** (1 / p)
            assert abs(value - published) <= 1e-5
            if dtype == F64:
                half = torch.full((2,), 0.5, dtype=F64)
                cx, mx = star_masses(X, half, trees.roots[0], th[0], -1)
                cy, my = star_masses(Y, half, trees.roots[0], th[0], -1)
                ref = sobolev_reference(
                    torch.cat([cx, cy], -1).numpy(), torch.cat([mx, -my], -1).numpy(), p
                )
                assert value == pytest.approx(ref ** (1 / p), rel=1e-12)


def test_a_far_atom_of_zero_weight_changes_nothing():
    """The tree is cut at the outermost atom of non-zero mass: a far atom of zero weight
    is not part of the measure and does not lengthen the tree."""
    X, Y, a, b, trees = _problem(8)
    far = torch.cat([X, torch.full((1, 3), 50.0, dtype=F64)])
    a0 = torch.cat([a, torch.zeros(1, dtype=F64)])
    _, info = tsw.ts_sobolev(far, Y, a0, b, trees=trees, power=True, log=True)
    for t in range(trees.n_trees):
        cx, cy, mx, my = _tree(X, Y, a, b, trees, t, 2.0)
        expected = sobolev_reference(
            torch.cat([cx, cy], -1).numpy(), torch.cat([mx, -my], -1).numpy(), 2.0
        )
        assert float(info["per_tree"][t]) == pytest.approx(expected, rel=1e-9)


def test_the_triangle_inequality_fails_with_shared_trees():
    """Each pair cuts the tree at its own span: a third measure with a tiny far atom makes
    both of its sides small (the reason the contract claims no triangle inequality)."""
    trees = tsw.ConcurrentLines(torch.zeros(1, 1, dtype=F64), torch.ones(1, 1, 1, dtype=F64))
    mu, nu = torch.tensor([[1.0]], dtype=F64), torch.tensor([[2.0]], dtype=F64)
    xi = torch.tensor([[1.0], [2.0], [1e4]], dtype=F64)
    w = torch.tensor([(1 - 1e-3) / 2, (1 - 1e-3) / 2, 1e-3], dtype=F64)
    d12 = tsw.ts_sobolev(mu, nu, trees=trees)
    via = tsw.ts_sobolev(mu, xi, None, w, trees=trees) + tsw.ts_sobolev(
        xi, nu, w, None, trees=trees
    )
    # by hand: the tree [0, 2]; only the edge [1, 2] carries mass (1), with nothing below
    # it: beta = log(1 + 1 / (1 + 0)), so d(mu, nu) = sqrt(log 2)
    assert float(d12) == pytest.approx(math.sqrt(math.log(2.0)), rel=1e-14)
    assert float(via) < 0.1 * float(d12)


@pytest.mark.parametrize("delta", [-1.0, -1e-300, math.inf, -math.inf, math.nan])
def test_a_negative_or_non_finite_delta_raises(delta):
    X = torch.zeros(2, 2)
    message = rf"delta must be a finite real number >= 0; got {delta}"
    with pytest.raises(ValueError, match=message):
        tsw.ts_sobolev(X, X + 1, delta=delta, n_trees=2, seed=0)
    with pytest.raises(ValueError, match=message):  # the loss module runs the same check
        tsw.nn.TSSobolevLoss(delta=delta)
    loss = tsw.nn.TSSobolevLoss(n_trees=2, seed=0)
    with pytest.raises(ValueError, match=message):
        loss.delta = delta


@pytest.mark.parametrize(
    ("option", "value", "error", "message"),
    [
        ("delta", "2", TypeError, "delta must be a real number >= 0; got str"),
        ("p", 0.5, ValueError, "p must be a finite real number >= 1; got 0.5"),
        ("n_trees", 0, ValueError, "n_trees must be an int >= 1; got 0"),
        ("n_lines", 1.5, TypeError, "n_lines must be an int >= 1; got float"),
        ("directions", "x", ValueError, "directions must be one of 'uniform', 'paths'; got 'x'"),
        ("sampling", "y", ValueError, "sampling must be one of 'iid', 'orthogonal', 'qmc'"),
        ("root_std", -1.0, ValueError, "root_std must be a finite real number >= 0; got -1.0"),
        ("orthogonal", 1, TypeError, "orthogonal must be True or False; got int"),
        ("center", "mode", ValueError, "center must be .* got 'mode'"),
        ("trees", 5, TypeError, "trees must be ConcurrentLines; got int"),
    ],
)
def test_bad_options_name_the_argument_and_the_value(option, value, error, message):
    X = torch.zeros(2, 2)
    with pytest.raises(error, match=message):
        tsw.ts_sobolev(X, X + 1, **{"n_trees": 2, "seed": 0, option: value})
