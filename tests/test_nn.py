"""The loss modules of :mod:`tsw.nn` against the functions they are built from."""

from __future__ import annotations

import inspect

import pytest
import torch

import tsw

#: options a module takes although its function does not (and why)
EXTRA = {
    "ARIS3WLoss": {"dim", "pool_size", "n_rotations"},  # the rotation pool replaces rotations=
}
#: keyword parameters of a function that no module takes: randomness, explicit slices, log
NOT_OPTIONS = {"seed", "generator", "trees", "projections", "rotations", "log"}
COMMON = {"reduction": "mean", "seed": None, "resample": True}
FUNCTIONS = {
    "TSWSLLoss": tsw.tsw_sl,
    "DbTSWLoss": tsw.db_tsw,
    "CircularTSWLoss": tsw.circular_tsw,
    "SpatialTSWLoss": tsw.spatial_tsw,
    "PartialTSWLoss": tsw.partial_tsw,
    "SWLoss": tsw.sw,
    "MaxSWLoss": tsw.max_sw,
    "STSWLoss": tsw.stsw,
    "SpatialSTSWLoss": tsw.spatial_stsw,
    "STSWUnifLoss": tsw.stsw_unif,
    "SSWLoss": tsw.ssw,
    "SSWUnifLoss": tsw.ssw_unif,
    "S3WLoss": tsw.s3w,
    "ARIS3WLoss": tsw.s3w,
    "S3WUnifLoss": tsw.s3w_unif,
}


def _keyword_options(fn):
    params = inspect.signature(fn).parameters.values()
    return {q.name: q.default for q in params if q.kind is q.KEYWORD_ONLY}


def test_every_loss_has_a_function():
    assert set(FUNCTIONS) == set(tsw.nn.__all__)


def test_dir_shows_the_losses_only():
    assert sorted(dir(tsw.nn)) == sorted(tsw.nn.__all__)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_module_options_equal_function_options(name):
    """Names and defaults of ``__init__`` are the function's, so they cannot drift."""
    cls = getattr(tsw.nn, name)
    fn_options = _keyword_options(FUNCTIONS[name])
    mod = inspect.signature(cls).parameters
    assert all(q.kind is q.KEYWORD_ONLY for q in mod.values())
    extra = EXTRA.get(name, set())
    expected = {k: v for k, v in fn_options.items() if k not in NOT_OPTIONS | extra}
    got = {k: q.default for k, q in mod.items() if k not in COMMON and k not in extra}
    assert got == expected
    for k, default in COMMON.items():
        assert mod[k].default == default
    # every option is documented in the module's Parameters section
    doc = inspect.getdoc(cls)
    params = doc.split("Parameters\n----------\n", 1)[1].split("\n\n", 1)[0]
    for k in [*expected, *COMMON]:
        assert k in params, (name, k)


def test_unknown_and_missing_options_raise():
    with pytest.raises(TypeError, match=r"unexpected keyword argument.*n_projections"):
        tsw.nn.DbTSWLoss(n_projections=3)
    with pytest.raises(TypeError, match="missing required keyword argument 'radius'"):
        tsw.nn.CircularTSWLoss()


def test_tensor_option_moves_with_the_module():
    alpha = torch.tensor([0.25, 0.25, 0.5])  # exact in float32
    loss = tsw.nn.TSWSLLoss(n_trees=4, n_lines=3, alpha=alpha, seed=0).to(torch.float64)
    X = torch.randn(12, 3, dtype=torch.float64)
    value = loss(X, X + 1)
    assert value.dtype == torch.float64
    assert torch.equal(loss.alpha, alpha.double())
    g = torch.Generator().manual_seed(0)
    expected = tsw.tsw_sl(X, X + 1, n_trees=4, n_lines=3, alpha=alpha.double(), generator=g)
    assert torch.equal(value, expected)
    assert "alpha=[0.25" in repr(loss)


def test_option_assignment_is_read_at_the_next_call():
    X, Y = torch.randn(10, 2, dtype=torch.float64), torch.randn(12, 2, dtype=torch.float64)
    loss = tsw.nn.PartialTSWLoss(n_trees=8, n_lines=2, seed=0, resample=False)
    first = loss(X, Y)
    loss.mass_t = 0.5
    second = loss(X, Y)
    expected = tsw.partial_tsw(X, Y, n_trees=8, n_lines=2, mass_t=0.5, seed=loss._fixed_seed)
    assert first != second
    assert torch.equal(second, expected)
