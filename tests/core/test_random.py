"""``tsw.core._random``: what ``seed`` and ``generator`` mean for every draw.

An int seed (numpy integers too) seeds a fresh CPU generator whose float64 draws are the
documented ones; a numpy ``RandomState`` or ``Generator`` replays from its state and
advances; a torch generator belongs in ``generator=``; bad seeds raise naming the
argument. The shared part of the contract (determinism, the global RNG untouched,
``seed=s`` equal to ``Generator().manual_seed(s)``) runs on every distance in
``test_contract.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _reference import lit

import tsw

F64 = torch.float64


def _data(d=3, n=12, m=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=F64)
    Y = torch.randn(m, d, generator=g, dtype=F64) + 0.7
    return X, Y


def test_numpy_integer_seeds_and_out_of_range_seeds():
    X, Y = _data()
    assert torch.equal(tsw.db_tsw(X, Y, seed=np.int64(3)), tsw.db_tsw(X, Y, seed=3))
    assert torch.equal(
        tsw.nn.DbTSWLoss(seed=np.int32(4), resample=False)(X, Y), tsw.db_tsw(X, Y, seed=4)
    )
    for bad in (2**64, -(2**63) - 1):
        with pytest.raises(ValueError, match=r"seed must be an int in \[-2\*\*63, 2\*\*64\)"):
            tsw.db_tsw(X, Y, seed=bad)
    with pytest.raises(
        TypeError, match="seed must be an int, a numpy RandomState or Generator, or None; got float"
    ):
        tsw.db_tsw(X, Y, seed=1.0)


def test_an_int_seed_gives_the_documented_draw():
    """sampling="iid" is the documented draw, written here from torch alone: from one
    CPU generator seeded with the seed, float64, the (T, d) root offsets (times root_std
    = 0.1) and then (T, k, d) Gaussians normalised into directions."""
    g = torch.Generator().manual_seed(5)
    offsets = torch.randn(7, 4, generator=g, dtype=F64)
    dirs = torch.randn(7, 3, 4, generator=g, dtype=F64)
    dirs = dirs / torch.linalg.vector_norm(dirs, dim=-1, keepdim=True)
    for sampling in ({}, {"sampling": "iid"}):
        trees = tsw.sample_concurrent_lines(4, n_trees=7, n_lines=3, seed=5, dtype=F64, **sampling)
        assert torch.equal(trees.directions, dirs)
        assert torch.equal(trees.roots, 0.1 * offsets)


def test_sampler_seed_checks():
    with pytest.raises(
        TypeError,
        match=lit("seed must be an int, a numpy RandomState or Generator, or None; got str"),
    ):
        tsw.sample_chain_lines(3, n_trees=2, n_lines=2, seed="1")
    with pytest.raises(ValueError, match=lit("pass at most one of seed and generator")):
        tsw.sample_projections(3, 4, seed=1, generator=torch.Generator())


@pytest.mark.parametrize(
    "make", [np.random.RandomState, np.random.default_rng], ids=["RandomState", "Generator"]
)
def test_numpy_random_states_replay_and_advance(make):
    """A numpy stream as ``seed=``: the same state gives the same value, and the stream
    advances from one call to the next (as POT's ``seed=`` takes it)."""
    X, Y = _data()
    first = tsw.sw(X, Y, n_projections=5, seed=make(3))
    assert torch.equal(tsw.sw(X, Y, n_projections=5, seed=make(3)), first)
    stream = make(3)
    values = [tsw.sw(X, Y, n_projections=5, seed=stream) for _ in range(2)]
    assert torch.equal(values[0], first)
    assert not torch.equal(values[1], first)


def test_a_torch_generator_as_seed_raises():
    X, Y = _data()
    with pytest.raises(TypeError, match="pass it as generator= instead"):
        tsw.db_tsw(X, Y, seed=torch.Generator().manual_seed(0))
