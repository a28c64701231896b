"""Exactness of the closed forms against independent computations (float64, 1e-10).

Every expected value here is computed without the library's closed form: exact LPs
(POT's ``ot.emd2``) on explicit tree metrics built in ``_reference``, Sobolev sums
written edge by edge or from explicit subtrees, POT / scipy one-dimensional and sliced
distances, and coordinates and splits recomputed in numpy. The library only receives the
same inputs (points, weights, trees).

Sections: 1 arbitrary trees, 2 line systems, 3 Db-TSW on one tree, 4 TSW-SL on one tree,
5 several trees and p > 1, 6 golden values, 7 reductions, 8 max-SW bounds, 0 the oracles
themselves.
"""

from __future__ import annotations

import math

import _reference as ref
import numpy as np
import ot
import pytest
import scipy.stats
import torch
from _reference import TOL, assert_close, t64, unit_rows, weights

import tsw

# --------------------------------------------------------------------------- helpers


def distinct_sizes(rng, low=1, high=8):
    n = int(rng.integers(low, high + 1))
    m = int(rng.choice([v for v in range(low, high + 1) if v != n]))
    return n, m


def random_problem(rng, d, n, m, zero_prob=0.0, spread=1.0):
    """Supports X (n, d), Y (m, d) and non-uniform weights a, b."""
    X = rng.normal(size=(n, d)) * spread
    Y = rng.normal(size=(m, d)) * spread + rng.normal(size=d)
    return X, Y, weights(rng, (n,), zero_prob), weights(rng, (m,), zero_prob)


def random_chain(rng, k, d):
    """Sources (k, d) and directions (k, d) of a chain: s_i = s_{i-1} + t_i theta_{i-1}."""
    dirs = unit_rows(rng, k, d)
    sources = np.empty((k, d))
    sources[0] = rng.normal(size=d)
    for i in range(1, k):
        sources[i] = sources[i - 1] + rng.uniform(-1.5, 1.5) * dirs[i - 1]
    return sources, dirs


def chain_attachments(sources, dirs):
    """t_i = <s_i - s_{i-1}, theta_{i-1}>, 0 for the first line."""
    t = np.einsum("id,id->i", sources[1:] - sources[:-1], dirs[:-1])
    return np.concatenate([[0.0], t])


def line_coords(Z, sources, dirs):
    """<z - s_l, theta_l>, shape (k, n)."""
    return np.einsum("lnd,ld->ln", Z[None] - sources[:, None], dirs)


def distance_split(Z, root, dirs, delta):
    """Db-TSW split softmax_l(-delta * dist(z, line l)), shape (k, n)."""
    rel = Z - root
    t = rel @ dirs.T  # (n, k)
    dist = np.linalg.norm(rel[:, None, :] - t[:, :, None] * dirs[None], axis=-1)
    logits = -delta * dist
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).T


def tree_oracle(X, Y, a, b, sources, dirs, *, chain, p=1, delta=None, alpha=None):
    """Per-tree cost: EMD on the explicit tree (p = 1) or the Sobolev sum (p > 1).

    ``delta`` selects the distance split (concurrent lines), else the constant split
    ``alpha`` (uniform when None).
    """
    k = dirs.shape[0]
    cx, cy = line_coords(X, sources, dirs), line_coords(Y, sources, dirs)
    if delta is not None:
        sx, sy = (
            distance_split(X, sources[0], dirs, delta),
            distance_split(Y, sources[0], dirs, delta),
        )
    else:
        col = np.full((k, 1), 1.0 / k) if alpha is None else np.asarray(alpha)[:, None]
        sx, sy = col, col
    mx, my = a * sx, b * sy
    att = chain_attachments(sources, dirs) if chain else None
    if p == 1:
        return ref.emd_on_lines(cx, cy, mx, my, att)
    coords, signed = np.concatenate([cx, cy], 1), np.concatenate([mx, -my], 1)
    return (
        ref.line_system_sobolev(coords, signed, att, p)
        if chain
        else ref.star_sobolev(coords, signed, p)
    )


def star_oracle(X, Y, a, b, root, dirs, **kwargs):
    """:func:`tree_oracle` on concurrent lines through ``root`` (d,)."""
    sources = np.repeat(np.asarray(root)[None], len(dirs), axis=0)
    return tree_oracle(X, Y, a, b, sources, dirs, chain=False, **kwargs)


def star_trees(rng, T, k, d, orthogonal=False):
    """Roots (T, d) and directions (T, k, d) of T concurrent-line trees."""
    dirs = np.stack([unit_rows(rng, k, d, orthogonal) for _ in range(T)])
    return rng.normal(size=(T, d)), dirs


def concurrent(roots, dirs):
    return tsw.ConcurrentLines(t64(roots), t64(dirs))


def chains(sources, dirs):
    return tsw.ChainLines(t64(sources), t64(dirs))


def w1_1d(u, v, a, b):
    """Independent 1-D W1 (scipy)."""
    return scipy.stats.wasserstein_distance(u, v, a, b)


# --------------------------------------------------------------------------- 1. arbitrary trees


def random_tree(rng, V):
    """Parent array of a random rooted tree whose root is any node."""
    perm = rng.permutation(V)
    parents = np.full(V, -1)
    for i in range(1, V):
        parents[perm[i]] = perm[rng.integers(i)]
    return parents


def random_tree_problem(rng, batch_shape):
    V = int(rng.integers(2, 13))
    parents = random_tree(rng, V)
    lengths = rng.uniform(0.0, 2.0, size=V) * (rng.random(V) > 0.15)  # some zero edges
    total = rng.uniform(0.5, 2.0)
    ms = total * weights(rng, (*batch_shape, V), zero_prob=0.3)
    mt = total * weights(rng, (*batch_shape, V), zero_prob=0.3)
    return parents, lengths, ms, mt


BATCH_SHAPES = [(), (3,), (2, 3)]


class TestTreeWasserstein:
    @pytest.mark.parametrize("seed", range(24))
    def test_p1_equals_emd_on_tree_metric(self, seed):
        rng = np.random.default_rng(seed)
        parents, lengths, ms, mt = random_tree_problem(rng, BATCH_SHAPES[seed % 3])
        par = torch.as_tensor(parents) if seed % 2 else parents.tolist()
        got = tsw.tree_wasserstein(par, t64(lengths), t64(ms), t64(mt), p=1)
        D = ref.tree_metric_from_parents(parents, lengths)
        expected = [
            ot.emd2(s, t, D)
            for s, t in zip(ms.reshape(-1, len(parents)), mt.reshape(-1, len(parents)), strict=True)
        ]
        assert_close(got, np.reshape(expected, ms.shape[:-1]))

    def test_batched_edge_lengths(self):
        rng = np.random.default_rng(100)
        parents, _, ms, mt = random_tree_problem(rng, (4,))
        lengths = rng.uniform(0.0, 2.0, size=ms.shape)
        got = tsw.tree_wasserstein(parents, t64(lengths), t64(ms), t64(mt), p=1)
        expected = [
            ot.emd2(s, t, ref.tree_metric_from_parents(parents, w))
            for s, t, w in zip(ms, mt, lengths, strict=True)
        ]
        assert_close(got, expected)

    @pytest.mark.parametrize("p", [2, 3, 1.5])
    @pytest.mark.parametrize("seed", range(8))
    def test_p_gt_1_equals_sobolev(self, seed, p):
        rng = np.random.default_rng(1000 + seed)
        parents, lengths, ms, mt = random_tree_problem(rng, BATCH_SHAPES[seed % 3])
        got = tsw.tree_wasserstein(parents, t64(lengths), t64(ms), t64(mt), p=p)
        V = len(parents)
        expected = [
            ref.sobolev_cost_on_tree(parents, lengths, s - t, p) ** (1 / p)
            for s, t in zip(ms.reshape(-1, V), mt.reshape(-1, V), strict=True)
        ]
        assert_close(got, np.reshape(expected, ms.shape[:-1]))

    @pytest.mark.parametrize("p", [1, 2])
    def test_gradcheck_masses_and_lengths(self, p):
        rng = np.random.default_rng(7)
        parents = random_tree(rng, 7)
        lengths = t64(rng.uniform(0.5, 2.0, 7)).requires_grad_()
        ms = t64(weights(rng, (7,)) + 0.05).requires_grad_()
        mt = t64(weights(rng, (7,)) + 0.05).requires_grad_()

        def f(s, t, w):
            return tsw.tree_wasserstein(parents, w, s, t, p=p, validate=False)

        assert torch.autograd.gradcheck(f, (ms, mt, lengths))


# --------------------------------------------------------------------------- 2. line systems


def random_line_system(rng, B, k, n, ties):
    """Coordinates (B, k, n), signed masses with zero total, chain attachments (B, k)."""
    coords = rng.normal(size=(B, k, n)) * 1.5
    att = rng.uniform(-1.5, 1.5, size=(B, k))
    if ties:  # a coarse grid: repeated coordinates, atoms at 0 and on attachment points
        coords, att = np.round(coords * 2) / 2, np.round(att * 2) / 2
    masses = rng.normal(size=(B, k, n)) * (rng.random((B, k, n)) > 0.2)
    for mb in masses:  # zero total over the tree, not per line
        j = rng.integers(k), rng.integers(n)
        mb[j] -= mb.sum()
    return coords, masses, att


def emd_signed(coords, masses, attachments):
    """EMD between the positive and negative parts of signed masses on a line system."""
    return ref.emd_on_lines(
        coords, coords, np.clip(masses, 0, None), np.clip(-masses, 0, None), attachments
    )


@pytest.mark.usefixtures("line_kernel")
class TestLineSystemCost:
    @pytest.mark.parametrize("ties", [False, True])
    @pytest.mark.parametrize("structure", ["star", "chain"])
    @pytest.mark.parametrize("seed", range(10))
    def test_p1_equals_emd(self, seed, structure, ties):
        rng = np.random.default_rng(2000 + seed)
        k = seed % 5 + 1
        n, m = distinct_sizes(rng)  # source / target atoms, both signed
        coords, masses, att = random_line_system(rng, 2, k, n + m, ties)
        chain = structure == "chain"
        got = tsw.line_system_cost(t64(coords), t64(masses), t64(att) if chain else None, p=1)
        expected = [
            emd_signed(c, w, a if chain else None)
            for c, w, a in zip(coords, masses, att, strict=True)
        ]
        assert_close(got, expected)

    @pytest.mark.parametrize("p", [2, 3])
    @pytest.mark.parametrize("structure", ["star", "chain"])
    @pytest.mark.parametrize("seed", range(4))
    def test_p_gt_1_equals_sobolev(self, seed, structure, p):
        rng = np.random.default_rng(2100 + seed)
        k, n = seed % 5 + 1, int(rng.integers(2, 10))
        coords, masses, att = random_line_system(rng, 2, k, n, ties=seed % 2 == 1)
        chain = structure == "chain"
        got = tsw.line_system_cost(t64(coords), t64(masses), t64(att) if chain else None, p=p)
        expected = [
            ref.line_system_sobolev(c, w, a if chain else None, p)
            for c, w, a in zip(coords, masses, att, strict=True)
        ]
        assert_close(got, expected)

    @pytest.mark.parametrize("p", [1, 2])
    @pytest.mark.parametrize("structure", ["star", "chain"])
    def test_gradcheck(self, structure, p):
        rng = np.random.default_rng(2200)
        coords, masses, att = random_line_system(rng, 1, 3, 5, ties=False)
        inputs = [t64(coords[0]).requires_grad_(), t64(masses[0]).requires_grad_()]
        if structure == "chain":
            inputs.append(t64(att[0]).requires_grad_())
        assert torch.autograd.gradcheck(lambda *xs: tsw.line_system_cost(*xs, p=p), inputs)


# --------------------------------------------------------------------------- 3. Db-TSW, one tree


#: the point-to-line distance of the split is a residual norm formed explicitly up to
#: d = 3 and an identity above (tsw's EXPLICIT_RESIDUAL_MAX_DIM): both sides are covered
DB_DIMS = [2, 3, 4, 5, 9, 12]


class TestDbTswOneTree:
    @pytest.mark.parametrize("p", [1, 2])
    def test_zero_padding_leaves_value_and_gradients_unchanged(self, p):
        """Data and trees in R^2, zero-padded into R^D for D = 2, ..., 12: the same
        problem, hence the same value and gradients (zero in the padded coordinates),
        whichever point-to-line algorithm a dimension D uses. A fault in either branch
        (or in the switch between them) breaks the equality at some D."""
        rng = np.random.default_rng([3100, p])
        X, Y, a, b = random_problem(rng, 2, 6, 5)
        roots, dirs = star_trees(rng, 3, 3, 2)
        values, grads = [], []
        for D in range(2, 13):

            def pad(A, D=D):
                A = t64(A)
                return torch.cat([A, A.new_zeros(*A.shape[:-1], D - A.shape[-1])], -1)

            trees = tsw.ConcurrentLines(pad(roots), pad(dirs))
            Xs = pad(X).requires_grad_()
            v = tsw.db_tsw(Xs, pad(Y), t64(a), t64(b), trees=trees, delta=1.5, p=p)
            (g,) = torch.autograd.grad(v, Xs)
            assert float(g[:, 2:].abs().sum()) <= 1e-12
            values.append(v.detach())
            grads.append(g[:, :2])
        for D, (v, g) in enumerate(zip(values, grads, strict=True), start=2):
            assert_close(v, values[0])
            torch.testing.assert_close(g, grads[0], rtol=1e-9, atol=1e-12, msg=f"D={D}")

    @pytest.mark.parametrize("delta", [0.0, 0.5, 1.0, 2.0, 10.0])
    @pytest.mark.parametrize("d", DB_DIMS)
    def test_equals_emd_on_star(self, d, delta):
        rng = np.random.default_rng([3000, d, int(10 * delta)])
        for case in range(4):
            k = case + 1
            orthogonal = case % 2 == 1 and k <= d
            n, m = distinct_sizes(rng)
            X, Y, a, b = random_problem(rng, d, n, m, zero_prob=0.2 * (case == 3))
            roots, dirs = star_trees(rng, 1, k, d, orthogonal)
            got = tsw.db_tsw(
                t64(X), t64(Y), t64(a), t64(b), trees=concurrent(roots, dirs), delta=delta, p=1
            )
            expected = star_oracle(X, Y, a, b, roots[0], dirs[0], delta=delta)
            assert_close(got, expected)


# --------------------------------------------------------------------------- 4. TSW-SL, one tree


class TestTswSlOneTree:
    @pytest.mark.parametrize("constant_alpha", [False, True])
    @pytest.mark.parametrize("structure", ["chain", "concurrent"])
    @pytest.mark.parametrize("d", [2, 3, 5])
    @pytest.mark.parametrize("k", [1, 2, 3, 4])
    def test_equals_emd(self, k, d, structure, constant_alpha):
        rng = np.random.default_rng(4000 + 10 * d + k)
        for _ in range(2):
            n, m = distinct_sizes(rng)
            X, Y, a, b = random_problem(rng, d, n, m, zero_prob=0.2)
            alpha = weights(rng, (k,)) if constant_alpha else None
            if structure == "chain":
                sources, dirs = random_chain(rng, k, d)
                trees = chains(sources[None], dirs[None])
            else:
                roots, dirs3 = star_trees(rng, 1, k, d)
                sources, dirs = np.repeat(roots, k, axis=0), dirs3[0]
                trees = concurrent(roots, dirs3)
            kwargs = {} if alpha is None else {"alpha": t64(alpha)}
            got = tsw.tsw_sl(t64(X), t64(Y), t64(a), t64(b), trees=trees, p=1, **kwargs)
            expected = tree_oracle(
                X, Y, a, b, sources, dirs, chain=structure == "chain", alpha=alpha
            )
            assert_close(got, expected)


# --------------------------------------------------------------------------- 5. several trees, p


def mean_root(per_tree, p):
    return np.mean(per_tree, axis=-1) ** (1 / p)


class TestSeveralTrees:
    @pytest.mark.parametrize("p", [1, 2, 3])
    @pytest.mark.parametrize("seed", range(3))
    def test_db_tsw(self, seed, p):
        rng = np.random.default_rng(5000 + seed)
        T, k, d, delta = 4, seed + 2, 3 + seed, [0.0, 1.0, 5.0][seed]
        n, m = distinct_sizes(rng, 2)
        X, Y, a, b = random_problem(rng, d, n, m)
        roots, dirs = star_trees(rng, T, k, d, orthogonal=seed == 1)
        got = tsw.db_tsw(
            t64(X), t64(Y), t64(a), t64(b), trees=concurrent(roots, dirs), delta=delta, p=p
        )
        per_tree = [
            star_oracle(X, Y, a, b, r, th, p=p, delta=delta)
            for r, th in zip(roots, dirs, strict=True)
        ]
        assert_close(got, mean_root(per_tree, p))

    @pytest.mark.parametrize("p", [1, 2])
    @pytest.mark.parametrize("shared_trees", [True, False])
    def test_db_tsw_batched(self, shared_trees, p):
        rng = np.random.default_rng(5100)
        B, T, k, d, n, m, delta = 3, 3, 3, 4, 5, 7, 2.0
        probs = [random_problem(rng, d, n, m) for _ in range(B)]
        X, Y, a, b = (np.stack(z) for z in zip(*probs, strict=True))
        roots, dirs = star_trees(rng, T if shared_trees else B * T, k, d)
        if shared_trees:
            per_item = [(roots, dirs)] * B
        else:
            roots, dirs = roots.reshape(B, T, d), dirs.reshape(B, T, k, d)
            per_item = list(zip(roots, dirs, strict=True))
        trees = concurrent(roots, dirs)
        got = tsw.db_tsw(t64(X), t64(Y), t64(a), t64(b), trees=trees, delta=delta, p=p)
        expected = [
            mean_root(
                [
                    star_oracle(X[i], Y[i], a[i], b[i], r, th, p=p, delta=delta)
                    for r, th in zip(*per_item[i], strict=True)
                ],
                p,
            )
            for i in range(B)
        ]
        assert_close(got, expected)

    @pytest.mark.parametrize("p", [1, 2, 3])
    @pytest.mark.parametrize("seed", range(3))
    def test_tsw_sl_chain(self, seed, p):
        rng = np.random.default_rng(5200 + seed)
        T, k, d = 4, seed + 2, 2 + seed
        n, m = distinct_sizes(rng, 2)
        X, Y, a, b = random_problem(rng, d, n, m)
        trees = [random_chain(rng, k, d) for _ in range(T)]
        sources, dirs = (np.stack(z) for z in zip(*trees, strict=True))
        alpha = weights(rng, (T, k))  # one constant split per tree
        got = tsw.tsw_sl(
            t64(X), t64(Y), t64(a), t64(b), trees=chains(sources, dirs), alpha=t64(alpha), p=p
        )
        per_tree = [
            tree_oracle(X, Y, a, b, s, th, chain=True, p=p, alpha=al)
            for s, th, al in zip(sources, dirs, alpha, strict=True)
        ]
        assert_close(got, mean_root(per_tree, p))


# --------------------------------------------------------------------------- 6. golden values


class TestGoldenG1:
    """Spec section 8, G1: d=2, root 0, theta = (e1, e2), X = {(1, 0)}, Y = {(0, 2)}."""

    X = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    Y = torch.tensor([[0.0, 2.0]], dtype=torch.float64)

    def trees(self):
        return tsw.ConcurrentLines(
            torch.zeros(1, 2, dtype=torch.float64), torch.eye(2, dtype=torch.float64)[None]
        )

    @pytest.mark.parametrize(("p", "expected"), [(1, 1.5), (2, math.sqrt(0.75))])
    def test_uniform_split(self, p, expected):
        assert_close(tsw.db_tsw(self.X, self.Y, trees=self.trees(), delta=0.0, p=p), expected)
        assert_close(tsw.tsw_sl(self.X, self.Y, trees=self.trees(), p=p), expected)

    @pytest.mark.parametrize(("p", "expected"), [(1, 2.4926527346), (2, 1.4443177042)])
    def test_distance_split_delta_1(self, p, expected):
        a, b = 1 / (1 + math.exp(-1)), 1 / (1 + math.exp(-2))
        exact = a + 2 * b if p == 1 else math.sqrt(a**2 + 2 * b**2)
        assert abs(exact - expected) < 1e-10  # the spec's rounded value
        assert_close(tsw.db_tsw(self.X, self.Y, trees=self.trees(), delta=1.0, p=p), exact)


# --------------------------------------------------------------------------- 7. reductions


class TestReductions:
    @pytest.mark.parametrize("p", [1, 2])
    def test_delta_0_is_concurrent_tsw_sl(self, p):
        rng = np.random.default_rng(7000)
        X, Y, a, b = random_problem(rng, 4, 6, 9)
        trees = concurrent(*star_trees(rng, 5, 3, 4))
        args = (t64(X), t64(Y), t64(a), t64(b))
        assert_close(
            tsw.db_tsw(*args, trees=trees, delta=0.0, p=p), tsw.tsw_sl(*args, trees=trees, p=p)
        )

    @pytest.mark.parametrize("estimator", ["db_tsw", "tsw_sl_concurrent", "tsw_sl_chain"])
    @pytest.mark.parametrize("seed", range(3))
    def test_one_line_is_1d_w1(self, seed, estimator):
        rng = np.random.default_rng(7100 + seed)
        T, d = 5, seed + 2
        X, Y, a, b = random_problem(rng, d, *distinct_sizes(rng), zero_prob=0.2)
        roots, dirs = star_trees(rng, T, 1, d)
        proj = dirs[:, 0, :]  # (T, d)
        expected = np.mean(ot.wasserstein_1d(X @ proj.T, Y @ proj.T, a, b, p=1))
        args = (t64(X), t64(Y), t64(a), t64(b))
        if estimator == "db_tsw":
            got = tsw.db_tsw(*args, trees=concurrent(roots, dirs), delta=2.0)
        elif estimator == "tsw_sl_concurrent":
            got = tsw.tsw_sl(*args, trees=concurrent(roots, dirs))
        else:
            got = tsw.tsw_sl(*args, trees=chains(roots[:, None], dirs))
        assert_close(got, expected)

    @pytest.mark.parametrize("alpha_per_tree", [False, True])
    @pytest.mark.parametrize("structure", ["chain", "concurrent"])
    def test_constant_split_is_weighted_sliced_w1(self, structure, alpha_per_tree):
        rng = np.random.default_rng(7200)
        T, k, d = 4, 3, 3
        X, Y, a, b = random_problem(rng, d, 7, 4)
        if structure == "chain":
            sources, dirs = (
                np.stack(z) for z in zip(*[random_chain(rng, k, d) for _ in range(T)], strict=True)
            )
            trees = chains(sources, dirs)
        else:
            roots, dirs = star_trees(rng, T, k, d)
            trees = concurrent(roots, dirs)
        alpha = weights(rng, (T, k) if alpha_per_tree else (k,))
        alpha_tk = np.broadcast_to(alpha, (T, k))
        expected = np.mean(
            [
                sum(alpha_tk[t, j] * w1_1d(X @ dirs[t, j], Y @ dirs[t, j], a, b) for j in range(k))
                for t in range(T)
            ]
        )
        got = tsw.tsw_sl(t64(X), t64(Y), t64(a), t64(b), trees=trees, alpha=t64(alpha), p=1)
        assert_close(got, expected)

    @pytest.mark.parametrize("p", [1, 2, 3])
    @pytest.mark.parametrize("seed", range(3))
    def test_sw_equals_pot(self, seed, p):
        rng = np.random.default_rng(7300 + seed)
        d = seed + 2
        X, Y, a, b = random_problem(rng, d, *distinct_sizes(rng, 2, 12), zero_prob=0.2)
        P = unit_rows(rng, 20, d).T  # (d, L)
        expected = ot.sliced_wasserstein_distance(X, Y, a, b, projections=P, p=p)
        assert_close(tsw.sw(t64(X), t64(Y), t64(a), t64(b), projections=t64(P), p=p), expected)

    @pytest.mark.parametrize("p", [1, 1.5, 2, 3])
    def test_wasserstein_1d_equals_pot(self, p):
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
    def test_wasserstein_1d_equal_sizes_equals_pot(self, p, given, monkeypatch):
        """n = m atoms of one weight take the sorted shortcut (two sorts, no search of
        the cumulative weights); other weights the general path. Both equal POT and the
        LP, ties among the values included."""
        from tsw.core import wasserstein_1d as w1d

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
    def test_sorted_shortcut_gradient(self, p):
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

    @pytest.mark.parametrize("p", [1, 2, 3])
    def test_sw_equal_sizes_equals_pot(self, p):
        rng = np.random.default_rng(7470 + p)
        X, Y = rng.normal(size=(15, 4)), rng.normal(size=(15, 4)) + 0.3
        P = unit_rows(rng, 25, 4).T
        expected = ot.sliced_wasserstein_distance(X, Y, projections=P, p=p)
        assert_close(tsw.sw(t64(X), t64(Y), projections=t64(P), p=p), expected)


# --------------------------------------------------------------------------- 8. max-SW


def wasserstein_p(X, Y, a, b, p):
    return ot.emd2(a, b, ot.dist(X, Y, metric="euclidean") ** p) ** (1 / p)


class TestMaxSw:
    @pytest.mark.parametrize("p", [1, 2])
    @pytest.mark.parametrize("seed", range(4))
    def test_between_best_init_and_wp(self, seed, p):
        rng = np.random.default_rng(8000 + seed)
        d, n_init = seed + 2, 8
        X, Y, a, b = random_problem(rng, d, *distinct_sizes(rng, 2, 10))
        got = float(
            tsw.max_sw(t64(X), t64(Y), t64(a), t64(b), p=p, n_iter=30, n_init=n_init, seed=seed)
        )
        init = tsw.sample_projections(d, n_init, seed=seed, dtype=torch.float64).numpy()
        best_init = ot.wasserstein_1d(X @ init, Y @ init, a, b, p=p).max() ** (1 / p)
        assert best_init - TOL <= got <= wasserstein_p(X, Y, a, b, p) + TOL

    @pytest.mark.parametrize("d", [2, 3, 5, 10])
    def test_translation(self, d):
        """W_2(theta#mu, theta#(mu + v)) = |<theta, v>|: the maximum is ||v|| = W_2."""
        rng = np.random.default_rng(8100 + d)
        X = rng.normal(size=(12, d))
        v = rng.normal(size=d)
        got = float(tsw.max_sw(t64(X), t64(X + v), p=2, seed=d))
        assert abs(got - np.linalg.norm(v)) < 1e-3


# --------------------------------------------------------------------------- 0. the oracles


class TestOracles:
    """The two Sobolev oracles and the two tree-metric constructions agree."""

    @pytest.mark.parametrize("seed", range(4))
    def test_explicit_tree_matches_graph_metric_and_edge_formula(self, seed):
        rng = np.random.default_rng(9000 + seed)
        coords, masses, att = random_line_system(rng, 1, 3, 5, ties=seed % 2 == 1)
        for attachments in (None, att[0]):
            parents, lengths, atoms = ref.line_system_tree(coords[0], attachments)
            D = ref.tree_metric_from_parents(parents, lengths)[np.ix_(atoms.ravel(), atoms.ravel())]
            np.testing.assert_allclose(
                D, ref.line_system_metric(coords[0], attachments), atol=1e-12
            )
        for p in (1, 2):
            np.testing.assert_allclose(
                ref.line_system_sobolev(coords[0], masses[0], None, p),
                ref.star_sobolev(coords[0], masses[0], p),
                atol=1e-12,
            )


# --------------------------------------------------------------------------- 9. per-tree values


class TestPerTreeLog:
    """``log["per_tree"]`` holds each tree's cost: checked tree by tree against the oracles."""

    @pytest.mark.parametrize("p", [1, 2])
    def test_db_tsw_per_tree_equals_oracle(self, p):
        rng = np.random.default_rng(9000 + p)
        n, m = distinct_sizes(rng)
        X, Y, a, b = random_problem(rng, 4, n, m)
        roots, dirs = star_trees(rng, 3, 3, 4)
        args = (t64(X), t64(Y), t64(a), t64(b))
        value, log = tsw.db_tsw(*args, trees=concurrent(roots, dirs), delta=1.5, p=p, log=True)
        expected = [star_oracle(X, Y, a, b, roots[i], dirs[i], delta=1.5, p=p) for i in range(3)]
        assert_close(log["per_tree"], expected)
        assert_close(value, mean_root(np.array(expected), p))
        power = tsw.db_tsw(*args, trees=concurrent(roots, dirs), delta=1.5, p=p, power=True)
        assert_close(power, np.mean(expected))
        assert log["trees"].n_trees == 3

    def test_tsw_sl_chain_per_tree_equals_oracle(self):
        rng = np.random.default_rng(9100)
        n, m = distinct_sizes(rng)
        X, Y, a, b = random_problem(rng, 3, n, m)
        pairs = [random_chain(rng, 3, 3) for _ in range(2)]
        trees = chains(np.stack([s for s, _ in pairs]), np.stack([d for _, d in pairs]))
        _, log = tsw.tsw_sl(t64(X), t64(Y), t64(a), t64(b), trees=trees, log=True)
        expected = [tree_oracle(X, Y, a, b, s, d, chain=True) for s, d in pairs]
        assert_close(log["per_tree"], expected)

    @pytest.mark.parametrize("p", [1, 2])
    def test_sw_log_has_pots_keys_and_values(self, p):
        rng = np.random.default_rng(9200 + p)
        X, Y = rng.normal(size=(9, 3)), rng.normal(size=(7, 3)) + 1
        proj = tsw.sample_projections(3, 5, seed=0, dtype=torch.float64)
        _, log = tsw.sw(t64(X), t64(Y), projections=proj, p=p, log=True)
        _, pot = ot.sliced_wasserstein_distance(X, Y, projections=proj.numpy(), p=p, log=True)
        assert_close(log["projected_emds"], pot["projected_emds"])
        assert_close(log["per_tree"], pot["projected_emds"])
        assert torch.equal(log["projections"], proj)
