"""Edges a user meets: options reassigned across kinds, messages that name the argument,
and properties checked against their formulas (the standard error, batched medians)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import tsw
from tsw.core._slices import geometric_median
from tsw.core._validation import Measures

F64 = torch.float64


def _data(n=20, m=24, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=F64), torch.randn(m, d, generator=g, dtype=F64)


# ----------------------------------------------------------------- options change kind


def test_a_tensor_option_takes_a_float_and_back():
    X, Y = _data()
    loss = tsw.nn.PartialTSWLoss(mass_t=torch.tensor(0.8, dtype=F64), n_trees=4, seed=0,
                                 resample=False)  # fmt: skip
    by_tensor = loss(X, Y)
    loss.mass_t = 0.8
    assert "mass_t" not in loss._buffers
    assert torch.equal(loss(X, Y), by_tensor)
    loss.mass_t = torch.nn.Parameter(torch.tensor(0.8, dtype=F64))
    assert [name for name, _ in loss.named_parameters()] == ["mass_t"]
    loss.mass_t = torch.tensor(0.6, dtype=F64)
    assert list(loss.parameters()) == []
    assert "mass_t" in loss._buffers
    with pytest.raises(ValueError, match="mass_t must be a finite real number >= 0"):
        loss.mass_t = -1.0


def test_center_and_mapping_change_kind():
    X, Y = _data()
    loss = tsw.nn.DbTSWLoss(center=torch.zeros(3, dtype=F64), n_trees=4, seed=0, resample=False)
    loss.center = "median"
    assert loss.center == "median"
    assert "center" not in loss._buffers
    assert torch.equal(
        loss(X, Y), tsw.db_tsw(X, Y, center="median", n_trees=4, seed=loss._fixed_seed)
    )
    spatial = tsw.nn.SpatialTSWLoss(mapping=torch.nn.Linear(3, 4, dtype=F64), n_trees=4, seed=0)
    assert len(list(spatial.parameters())) == 2
    spatial.mapping = "pow"
    assert list(spatial.parameters()) == []
    assert torch.isfinite(spatial(X, Y))


# ------------------------------------------------------------------------------ messages


def test_the_first_bad_argument_is_named():
    with pytest.raises(TypeError, match=r"X_s must be a torch\.Tensor or a numpy array"):
        tsw.db_tsw([[1.0, 2.0]], np.zeros((3, 2)))
    with pytest.raises(TypeError, match="X_s must be a dense"):
        tsw.db_tsw(torch.randn(5, 2).to_sparse(), torch.randn(4, 2))


def test_read_only_arrays_raise_no_warning():
    X, Y = (x.numpy() for x in _data())
    X.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isfinite(tsw.sw(X, Y, seed=0))


def test_trees_needed_for_an_unreachable_target():
    X, Y = _data()
    _, log = tsw.db_tsw(X, Y, n_trees=10, seed=0, log=True)
    with pytest.raises(ValueError, match="ask for a larger rel_std_error"):
        tsw.trees_needed(log, rel_std_error=1e-300)


def test_traced_loss_without_weights():
    """Tracing a loss used to fail on the equal-mass check of the default weights (a trace
    records its random draws through the global generator, so its values are not the
    module's; torch.jit.trace is deprecated in favour of torch.compile, tested apart)."""
    loss = tsw.nn.SWLoss(n_projections=10, seed=0, resample=False)
    X, Y = (x.float() for x in _data())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.trace is deprecated
        traced = torch.jit.trace(loss, (X, Y), check_trace=False)
    value = traced(X, Y)
    assert value.shape == ()
    assert torch.isfinite(value)


# ------------------------------------------------------- properties against formulas


@pytest.mark.parametrize(("p", "power"), [(1, False), (2, False), (2, True), (1.5, False)])
def test_std_error_is_its_formula(p, power):
    """The sample standard deviation (ddof = 1) over sqrt(T), through the root by the
    delta method: computed here with NumPy from the per-tree costs."""
    X, Y = _data()
    _, log = tsw.db_tsw(X, Y, n_trees=37, seed=1, p=p, power=power, log=True)
    c = log["per_tree"].detach().numpy()
    se = np.std(c, ddof=1) / math.sqrt(len(c))
    if not power:
        se = se * np.mean(c) ** (1 / p - 1) / p
    assert abs(float(log["std_error"]) - se) <= 1e-12 * se


def test_batched_geometric_median_is_each_items_median():
    """Items that are not translates of each other converge in different numbers of
    steps: each batched median equals its item's own."""
    g = torch.Generator().manual_seed(3)
    items = [
        torch.randn(30, 2, generator=g, dtype=F64),
        torch.randn(30, 2, generator=g, dtype=F64) * torch.tensor([5.0, 0.1], dtype=F64),
        torch.cat([torch.zeros(20, 2, dtype=F64), torch.randn(10, 2, generator=g, dtype=F64) * 9]),
    ]

    def measures(X):
        w = torch.full(X.shape[:-1], 1 / X.shape[-2], dtype=F64)
        return Measures(X, X[..., :0, :], w, w[..., :0], X.ndim == 3)

    batched = geometric_median(measures(torch.stack(items)))
    for i, X in enumerate(items):
        torch.testing.assert_close(batched[i], geometric_median(measures(X[None]))[0])
