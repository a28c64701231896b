"""The papers' comparison rows: TS-Sobolev, MaxTSW-SL, LCV-SW, EB-SW and RP-SW.

Every value is compared with an independent computation: TS-Sobolev with its edge sum
on the explicit tree (``tests/_reference.py``'s tree of a line system, subtree lengths
read off that tree, the weights integrated numerically by ``scipy.integrate.quad``);
the sliced variants with :func:`tsw.sw` on the same directions, a large-L SW and
exact 1-D transport; MaxTSW-SL with TSW-SL on random trees of the same shape and with
the exact max-SW_1 of a planar problem (a fine grid of angles). The whole distance
contract runs on their entries in ``tests/test_contract.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.integrate import quad

import tsw
from tests._reference import line_system_tree, subtree_members

F64 = torch.float64


# --------------------------------------------------------------------------- TS-Sobolev


def _star_masses(X, w, roots, dirs, delta):
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


@pytest.mark.parametrize(
    ("p", "delta", "seed"),
    [(2.0, 2.0, 0), (3.0, -1.0, 1), (1.5, 0.0, 2), (2.5, 1.0, 3), (1.0, 2.0, 4), (2.0, 2.0, 5)],
)
def test_ts_sobolev_equals_its_edge_sum_on_explicit_trees(p, delta, seed):
    X, Y, a, b, trees = _problem(seed, zero=seed == 5)
    _, info = tsw.ts_sobolev(X, Y, a, b, trees=trees, delta=delta, p=p, power=True, log=True)
    for t in range(trees.n_trees):
        roots, dirs = trees.roots[t], trees.directions[t]
        cx, mx = _star_masses(X, a, roots, dirs, delta)
        cy, my = _star_masses(Y, b, roots, dirs, delta)
        coords = torch.cat([cx, cy], -1).numpy()
        signed = torch.cat([mx, -my], -1).numpy()
        expected = sobolev_reference(coords, signed, p)
        assert float(info["per_tree"][t]) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_ts_sobolev_reproduces_the_authors_self_test():
    """Their two lines along (1, 1) and (2, -1), root 0, delta = -1: 0.426344 (p = 2) and
    0.349254 (p = 3) to their tolerance 1e-5 (float32), and the edge sum in float64."""
    for dtype in (torch.float32, F64):
        th = torch.tensor([[[1.0, 1.0], [2.0, -1.0]]], dtype=dtype)
        th = th / torch.linalg.vector_norm(th, dim=-1, keepdim=True)
        trees = tsw.ConcurrentLines(torch.zeros(1, 2, dtype=dtype), th)
        X = torch.tensor([[2.0, 0.0], [4.0, 0.0]], dtype=dtype)
        Y = torch.tensor([[2.0, 1.0], [6.0, 0.0]], dtype=dtype)
        for p, published in ((2, 0.426344), (3, 0.349254)):
            value = float(tsw.ts_sobolev(X, Y, trees=trees, delta=-1.0, p=p))
            assert abs(value - published) <= 1e-5
            if dtype == F64:
                cx, mx = _star_masses(
                    X, torch.full((2,), 0.5, dtype=F64), trees.roots[0], th[0], -1
                )
                cy, my = _star_masses(
                    Y, torch.full((2,), 0.5, dtype=F64), trees.roots[0], th[0], -1
                )
                ref = sobolev_reference(
                    torch.cat([cx, cy], -1).numpy(), torch.cat([mx, -my], -1).numpy(), p
                )
                assert value == pytest.approx(ref ** (1 / p), rel=1e-12)


def test_ts_sobolev_at_p1_is_db_tsw_and_continuous_in_p():
    g = torch.Generator().manual_seed(3)
    X, Y = torch.randn(30, 4, generator=g, dtype=F64), torch.randn(20, 4, generator=g, dtype=F64)
    ref = tsw.db_tsw(X, Y, n_trees=16, n_lines=3, delta=1.5, seed=7)
    assert torch.equal(tsw.ts_sobolev(X, Y, n_trees=16, n_lines=3, delta=1.5, p=1, seed=7), ref)
    # the Sobolev closed form itself (p just above 1) tends to Db-TSW's tree W1
    near = tsw.ts_sobolev(X, Y, n_trees=16, n_lines=3, delta=1.5, p=1 + 1e-9, seed=7)
    assert float(near) == pytest.approx(float(ref), rel=1e-7)


def test_ts_sobolev_zero_weight_atom_far_away_changes_nothing():
    """The tree is cut at the outermost atom of non-zero mass: a far atom of zero weight
    is not part of the measure and does not lengthen the tree."""
    X, Y, a, b, trees = _problem(8)
    far = torch.cat([X, torch.full((1, 3), 50.0, dtype=F64)])
    a0 = torch.cat([a, torch.zeros(1, dtype=F64)])
    v = tsw.ts_sobolev(X, Y, a, b, trees=trees)
    assert float(tsw.ts_sobolev(far, Y, a0, b, trees=trees)) == pytest.approx(float(v), rel=1e-13)


def test_ts_sobolev_triangle_fails_with_shared_trees():
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


def test_ts_sobolev_rejects_a_non_finite_delta():
    X = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="delta must be a finite real number"):
        tsw.ts_sobolev(X, X + 1, delta=math.inf, n_trees=2, seed=0)
    with pytest.raises(TypeError, match="delta must be a finite real number"):
        tsw.ts_sobolev(X, X + 1, delta="2", n_trees=2, seed=0)
