"""TSW-SL (``tsw.euclidean._tsw_sl``): exact values against ``ot.emd2``, and its options.

One tree (chains and concurrent lines, the uniform or a constant split ``alpha``) against
EMD on the explicit tree; several chains and p > 1 against the Sobolev sum written edge
by edge, tree by tree in ``log["per_tree"]``; a constant split is a weighted sliced W1
(scipy); the checks of ``tree`` and ``alpha``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _reference import (
    assert_close,
    data,
    distinct_sizes,
    lit,
    mean_root,
    random_chain,
    random_problem,
    star_trees,
    t64,
    tree_oracle,
    w1_1d,
    weights,
)

import tsw

F64 = torch.float64


def concurrent(roots, dirs):
    return tsw.ConcurrentLines(t64(roots), t64(dirs))


def chains(sources, dirs):
    return tsw.ChainLines(t64(sources), t64(dirs))


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


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("seed", range(3))
def test_several_chains_and_p(seed, p):
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


def test_per_tree_log_equals_the_oracle():
    rng = np.random.default_rng(9100)
    n, m = distinct_sizes(rng)
    X, Y, a, b = random_problem(rng, 3, n, m)
    pairs = [random_chain(rng, 3, 3) for _ in range(2)]
    trees = chains(np.stack([s for s, _ in pairs]), np.stack([d for _, d in pairs]))
    _, log = tsw.tsw_sl(t64(X), t64(Y), t64(a), t64(b), trees=trees, log=True)
    expected = [tree_oracle(X, Y, a, b, s, d, chain=True) for s, d in pairs]
    assert_close(log["per_tree"], expected)


@pytest.mark.parametrize("alpha_per_tree", [False, True])
@pytest.mark.parametrize("structure", ["chain", "concurrent"])
def test_constant_split_is_weighted_sliced_w1(structure, alpha_per_tree):
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


# --------------------------------------------------------------------------- checks of the options


@pytest.mark.parametrize("tree", ["star", "Chain", None, ""])
def test_bad_tree_option(tree):
    X, Y = data()
    with pytest.raises(
        ValueError, match=lit(f"tree must be one of 'chain', 'concurrent'; got {tree!r}")
    ):
        tsw.tsw_sl(X, Y, tree=tree)
    with pytest.raises(ValueError, match=lit("tree must be one of 'chain', 'concurrent'")):
        tsw.nn.TSWSLLoss(tree=tree)(X, Y)


def test_alpha_wrong_shape():
    X, Y = data()
    msg = lit("alpha must have shape (k,) = (2,) or (T, k) = (3, 2); got alpha.shape=")
    for alpha in (torch.full((3,), 1 / 3, dtype=F64), torch.full((2, 2), 0.5, dtype=F64)):
        with pytest.raises(ValueError, match=msg):
            tsw.tsw_sl(X, Y, n_trees=3, n_lines=2, alpha=alpha)


def test_alpha_off_simplex():
    X, Y = data()
    kw = {"n_trees": 3, "n_lines": 2}
    with pytest.raises(ValueError, match=lit("alpha must lie on the simplex")):
        tsw.tsw_sl(X, Y, alpha=torch.tensor([1.5, -0.5], dtype=F64), **kw)
    with pytest.raises(
        ValueError,
        match=lit(
            "alpha must lie on the simplex (non-negative entries summing to 1); got a sum of 0.8"
        ),
    ):
        tsw.tsw_sl(X, Y, alpha=torch.tensor([0.4, 0.4], dtype=F64), **kw)
    with pytest.raises(ValueError, match=lit("alpha contains NaN or Inf values")):
        tsw.tsw_sl(X, Y, alpha=torch.tensor([math.nan, 0.5], dtype=F64), **kw)
    per_tree = torch.tensor([[0.5, 0.5], [0.3, 0.7], [0.5, 0.6]], dtype=F64)
    with pytest.raises(ValueError, match=lit("alpha must lie on the simplex")):
        tsw.tsw_sl(X, Y, alpha=per_tree, **kw)


def test_alpha_dtype_and_type():
    X, Y = data()
    with pytest.raises(ValueError, match=lit("alpha must have the dtype and device of X_s")):
        tsw.tsw_sl(X, Y, n_lines=2, alpha=torch.tensor([0.5, 0.5]))
    with pytest.raises(TypeError, match=lit("alpha must be a torch.Tensor; got list")):
        tsw.tsw_sl(X, Y, n_lines=2, alpha=[0.5, 0.5])
