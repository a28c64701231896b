"""SpatialTSW (``tsw.euclidean._spatial_tsw``): Db-TSW on mapped points, invariances.

Its value equals Db-TSW on the points mapped in numpy (``_reference.np_pow``,
``np_poly``, a graph map) with the same trees; the order of the monomials does not
matter in law; signed permutations of the coordinates act through the map; a learnable
map receives gradients and trains; trees and centre live in the mapped dimension.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from _reference import assert_close, data, lit, np_poly, np_pow, t64

import tsw
from tsw import ConcurrentLines

F64 = torch.float64


class _Graph(torch.nn.Module):
    """h(y) = (y, phi(y)): injective for any phi."""

    def __init__(self, d, width=5, seed=0):
        super().__init__()
        torch.manual_seed(seed)  # test-local parameters; the library never reads this RNG
        self.phi = torch.nn.Sequential(
            torch.nn.Linear(d, width), torch.nn.Tanh(), torch.nn.Linear(width, 2)
        ).double()

    def forward(self, Z):
        return torch.cat([Z, self.phi(Z)], dim=-1)


SPATIAL_CASES = [
    ("pow", 3, 1.0),
    ("pow", 5, 0.25),
    ("pow", 1, 0.0),
    ("poly", 3, None),
    ("poly", 1, None),
    ("graph", None, None),
]


@pytest.mark.parametrize(("mapping", "degree", "beta"), SPATIAL_CASES)
@pytest.mark.parametrize("batched", [False, True])
def test_spatial_equals_db_tsw_on_mapped_points(mapping, degree, beta, batched):
    rng = np.random.default_rng(3)
    d, lead = 3, ((2,) if batched else ())
    X = rng.normal(size=(*lead, 6, d))
    Y = rng.normal(size=(*lead, 4, d)) + 0.5
    a = rng.random(size=(*lead, 6)) + 0.1
    b = rng.random(size=(*lead, 4)) + 0.1
    a, b = a / a.sum(-1, keepdims=True), b / b.sum(-1, keepdims=True)
    if mapping == "pow":
        HX, HY, opts = np_pow(X, degree, beta), np_pow(Y, degree, beta), {"beta": beta}
        opts["degree"] = degree
    elif mapping == "poly":
        HX, HY, opts = np_poly(X, degree)[0], np_poly(Y, degree)[0], {"degree": degree}
    else:
        h = _Graph(d)
        with torch.no_grad():
            HX, HY = h(t64(X)).numpy(), h(t64(Y)).numpy()
        opts = {"mapping": h}
    opts = {"mapping": mapping, **opts} if mapping != "graph" else opts
    d_theta = HX.shape[-1]
    # the same explicit trees in d_theta; columns of "poly" in the library's order
    if mapping == "poly":
        HX = tsw.mappings.poly_map(t64(X), degree).numpy()
        HY = tsw.mappings.poly_map(t64(Y), degree).numpy()
    trees = tsw.sample_concurrent_lines(d_theta, n_trees=5, n_lines=3, std=0.7, seed=4, dtype=F64)
    for rand in ({"trees": trees}, {"seed": 8}):
        value = tsw.spatial_tsw(t64(X), t64(Y), t64(a), t64(b), delta=1.5, **opts, **rand)
        expected = tsw.db_tsw(t64(HX), t64(HY), t64(a), t64(b), delta=1.5, **rand)
        assert value.shape == lead
        assert_close(value, expected.numpy())
    # sampled roots are centred on the weighted mean of the mapped points
    w_mean = (a[..., None] * HX).sum(-2) + (b[..., None] * HY).sum(-2)
    centred = tsw.spatial_tsw(
        t64(X), t64(Y), t64(a), t64(b), delta=1.5, seed=8, center=t64(w_mean / 2), **opts
    )
    default = tsw.spatial_tsw(t64(X), t64(Y), t64(a), t64(b), delta=1.5, seed=8, **opts)
    assert_close(centred, default.detach().numpy())


def test_spatial_poly_order_does_not_matter_in_law():
    """Reordering the monomials is an orthogonal map of R^d_theta: explicit trees moved
    by it give the same value, so the library's column order is immaterial."""
    rng = np.random.default_rng(5)
    X, Y = rng.normal(size=(5, 2)), rng.normal(size=(7, 2))
    mine = tsw.mappings.poly_map(t64(X), 3).numpy()
    other, _ = np_poly(X, 3)
    perm = [int(np.argmin(np.abs(mine - other[:, [j]]).sum(0))) for j in range(other.shape[1])]
    np.testing.assert_allclose(mine[:, perm], other, rtol=1e-12)
    trees = tsw.sample_concurrent_lines(4, n_trees=4, n_lines=3, seed=0, dtype=F64)
    moved = ConcurrentLines(trees.roots[:, perm], trees.directions[..., perm])
    v = tsw.spatial_tsw(t64(X), t64(Y), mapping="poly", trees=trees)
    w = tsw.db_tsw(t64(other), t64(np_poly(Y, 3)[0]), trees=moved)
    assert_close(v, float(w))


# --------------------------------------------------------------------------- spatial: invariances


def _signed_permutation(d, seed):
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(d, generator=g)
    signs = torch.where(torch.rand(d, generator=g) < 0.5, -1.0, 1.0).to(F64)
    signs[0] = -1.0  # at least one flip
    return torch.eye(d, dtype=F64)[perm] * signs[:, None]  # y -> S y


def _induced_on_monomials(S, degree):
    """The signed permutation S' of R^d_theta with poly(S y) = S' poly(y)."""
    d = S.shape[0]
    combos = list(itertools.combinations_with_replacement(range(d), degree))
    index = {c: i for i, c in enumerate(combos)}
    src = S.abs().argmax(1)  # (S y)_i = sign_i y_src[i]
    sign = S[torch.arange(d), src]
    out = torch.zeros(len(combos), len(combos), dtype=F64)
    for i, c in enumerate(combos):
        out[i, index[tuple(sorted(int(src[j]) for j in c))]] = math.prod(float(sign[j]) for j in c)
    return out


@pytest.mark.parametrize("mapping", ["pow", "poly"])
@pytest.mark.parametrize("seed", [0, 1])
def test_spatial_signed_permutation_invariance(mapping, seed):
    """h(S y) = S' h(y) for signed permutations S: value unchanged with trees moved by S'.

    Rotations do not commute with the maps: moving data and trees by a generic rotation
    changes the value (SpatialTSW is not rigid-motion invariant).
    """
    g = torch.Generator().manual_seed(seed)
    X, Y = torch.randn(6, 3, generator=g, dtype=F64), torch.randn(5, 3, generator=g, dtype=F64)
    S = _signed_permutation(3, seed)
    Sh = S if mapping == "pow" else _induced_on_monomials(S, 3)
    torch.testing.assert_close(
        tsw.mappings.poly_map(X @ S.T, 3) if mapping == "poly" else tsw.mappings.pow_map(X @ S.T),
        (tsw.mappings.poly_map(X, 3) if mapping == "poly" else tsw.mappings.pow_map(X)) @ Sh.T,
    )
    d_theta = Sh.shape[0]
    trees = tsw.sample_concurrent_lines(
        d_theta, n_trees=6, n_lines=3, std=0.5, seed=seed, dtype=F64
    )
    moved = ConcurrentLines(trees.roots @ Sh.T, trees.directions @ Sh.T)
    base = tsw.spatial_tsw(X, Y, mapping=mapping, trees=trees)
    assert_close(tsw.spatial_tsw(X @ S.T, Y @ S.T, mapping=mapping, trees=moved), float(base))
    if mapping == "pow":
        q, _ = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=F64))
        rotated = ConcurrentLines(trees.roots @ q.T, trees.directions @ q.T)
        other = tsw.spatial_tsw(X @ q.T, Y @ q.T, mapping=mapping, trees=rotated)
        assert abs(float(other) - float(base)) > 1e-6


# --------------------------------------------------------------------------- learnable mapping


def test_learnable_mapping_receives_gradients_and_trains():
    h = _Graph(2, seed=1)
    loss = tsw.nn.SpatialTSWLoss(mapping=h, n_trees=20, n_lines=3, seed=0, resample=False)
    assert loss.mapping is h
    params = list(loss.parameters())
    assert len(params) == 4
    assert all(p1 is p2 for p1, p2 in zip(params, h.parameters(), strict=True))
    # the mapping's parameters, and the loss's random stream (resumed on loading)
    assert set(loss.state_dict()) == {f"mapping.{k}" for k in h.state_dict()} | {"_extra_state"}
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(30, 2, generator=g, dtype=F64), torch.randn(25, 2, generator=g, dtype=F64)
    value = loss(X, Y + 1)
    value.backward()
    for prm in h.parameters():
        assert prm.grad is not None
        assert bool(torch.isfinite(prm.grad).all())
    assert float(h.phi[0].weight.grad.abs().sum()) > 0
    # ascent on the map (the max-projection use): a few steps increase the distance
    opt = torch.optim.SGD(h.parameters(), lr=0.5)
    before = float(value.detach())
    for _ in range(5):
        opt.zero_grad()
        (-loss(X, Y + 1)).backward()
        opt.step()
    assert float(loss(X, Y + 1).detach()) > before
    # the function with the same map and draw gives the same value
    same = tsw.spatial_tsw(X, Y + 1, mapping=h, n_trees=20, n_lines=3, seed=loss._fixed_seed)
    assert torch.equal(loss(X, Y + 1), same)


def test_spatial_loss_with_a_builtin_or_function_registers_nothing():
    assert list(tsw.nn.SpatialTSWLoss(mapping="poly").parameters()) == []
    loss = tsw.nn.SpatialTSWLoss(mapping=lambda Z: Z**3 + Z)
    assert list(loss.parameters()) == []
    assert "mapping" not in dict(loss.named_children())


# --------------------------------------------------------------------------- checks of the options


def _trees(d):
    return tsw.sample_concurrent_lines(d, n_trees=3, n_lines=2, seed=0, dtype=F64)


def test_spatial_trees_and_center_in_the_mapped_dimension():
    X, Y = data()
    with pytest.raises(
        ValueError,
        match=lit(
            "trees must live in the mapped dimension d_theta=10 (the data have d=3); got trees "
            "of dimension 3"
        ),
    ):
        tsw.spatial_tsw(
            X,
            Y,
            mapping="poly",
            trees=tsw.sample_concurrent_lines(3, n_trees=3, n_lines=2, seed=0, dtype=F64),
        )
    assert (
        tsw.spatial_tsw(
            X,
            Y,
            mapping="poly",
            trees=tsw.sample_concurrent_lines(10, n_trees=3, n_lines=2, seed=0, dtype=F64),
        ).shape
        == ()
    )
    with pytest.raises(ValueError, match=lit("center must have shape (d,) = (10,)")):
        tsw.spatial_tsw(X, Y, mapping="poly", center=torch.zeros(3, dtype=F64))
    with pytest.raises(TypeError, match=lit("trees must be ConcurrentLines; got ChainLines")):
        tsw.spatial_tsw(
            X, Y, trees=tsw.sample_chain_lines(3, n_trees=3, n_lines=2, seed=0, dtype=F64)
        )
    msg = lit("orthogonal directions need n_lines <= dim; got n_lines=4 and dim=3")
    with pytest.raises(ValueError, match=msg):
        tsw.spatial_tsw(X, Y, n_lines=4, orthogonal=True)
    assert tsw.spatial_tsw(X, Y, mapping="poly", n_lines=4, orthogonal=True).shape == ()
