"""The loss modules of :mod:`tsw.nn` against the functions they are built from."""

from __future__ import annotations

import inspect
import math
import re

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
    "TSSobolevLoss": tsw.ts_sobolev,
    "CircularTSWLoss": tsw.circular_tsw,
    "SpatialTSWLoss": tsw.spatial_tsw,
    "PartialTSWLoss": tsw.partial_tsw,
    "SWLoss": tsw.sw,
    "MaxSWLoss": tsw.max_sw,
    "MaxTSWSLLoss": tsw.max_tsw_sl,
    "LCVSWLoss": tsw.lcv_sw,
    "EBSWLoss": tsw.eb_sw,
    "RPSWLoss": tsw.rp_sw,
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
    return {q.name: q.default for q in params if q.name not in ("X_s", "X_t", "a", "b")}


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
    # the buffer keeps its precision (cast to the data's dtype at each call)
    assert loss.alpha.dtype == torch.float32
    assert torch.equal(loss.alpha, alpha)
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


# --------------------------------------------------------------------------- issue 15 pins


def _sphere(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(*shape, generator=g, dtype=dtype), dim=-1)


#: small settings of every loss, and whether it takes points on the sphere
SMALL = {
    "TSWSLLoss": ({"n_trees": 4, "n_lines": 3}, False),
    "DbTSWLoss": ({"n_trees": 4, "n_lines": 3}, False),
    "TSSobolevLoss": ({"n_trees": 4, "n_lines": 3}, False),
    "CircularTSWLoss": ({"radius": 0.5, "n_trees": 4, "n_lines": 3}, False),
    "SpatialTSWLoss": ({"n_trees": 4, "n_lines": 3}, False),
    "PartialTSWLoss": ({"n_trees": 4, "n_lines": 3, "mass_t": 0.8}, False),
    "SWLoss": ({"n_projections": 6}, False),
    "MaxSWLoss": ({"n_iter": 3, "n_init": 2}, False),
    "MaxTSWSLLoss": ({"n_lines": 3, "n_iter": 3}, False),
    "LCVSWLoss": ({"n_projections": 6}, False),
    "EBSWLoss": ({"n_projections": 6}, False),
    "RPSWLoss": ({"n_projections": 6}, False),
    "STSWLoss": ({"n_trees": 4, "n_lines": 3}, True),
    "SpatialSTSWLoss": ({"n_trees": 4, "n_lines": 3}, True),
    "STSWUnifLoss": ({"n_trees": 4, "n_lines": 3}, True),
    "SSWLoss": ({"n_projections": 6}, True),
    "SSWUnifLoss": ({"n_projections": 6}, True),
    "S3WLoss": ({"n_projections": 6, "n_rotations": 2}, True),
    "ARIS3WLoss": ({"dim": 3, "pool_size": 5, "n_rotations": 2, "n_projections": 6}, True),
    "S3WUnifLoss": ({"n_projections": 6, "n_samples": 30}, True),
}


def _inputs(name, dtype=torch.float64):
    sphere = SMALL[name][1]
    if sphere:
        X, Y = _sphere(10, 3, seed=1, dtype=dtype), _sphere(8, 3, seed=2, dtype=dtype)
    else:
        g = torch.Generator().manual_seed(3)
        X = torch.randn(10, 3, generator=g, dtype=torch.float64).to(dtype)
        Y = (torch.randn(8, 3, generator=g, dtype=torch.float64) + 1).to(dtype)
    return (X,) if issubclass(getattr(tsw.nn, name), tsw.nn._UnifLoss) else (X, Y)


def test_every_loss_has_small_settings():
    assert set(SMALL) == set(tsw.nn.__all__)


#: a bad hyper-parameter per option name that the losses share, and the message's start
BAD_OPTIONS = {
    "n_trees": (-1, ValueError, "n_trees must be an int >= 1; got -1"),
    "n_lines": (2.0, TypeError, "n_lines must be an int >= 1; got float"),
    "n_projections": (0, ValueError, "n_projections must be an int >= 1; got 0"),
    "p": (0.5, ValueError, "p must be a finite real number >= 1; got 0.5"),
    "delta": (-1.0, ValueError, "delta must be a finite real number >= 0; got -1.0"),
    "orthogonal": ("False", TypeError, "orthogonal must be True or False; got str"),
    "renormalize": (1, TypeError, "renormalize must be True or False; got int"),
    "validate": ("yes", TypeError, "validate must be True or False; got str"),
    "power": (None, TypeError, "power must be True or False; got NoneType"),
    "chunk_size": (0, ValueError, "chunk_size must be an int >= 1; got 0"),
    "root_std": (math.nan, ValueError, "root_std must be a finite real number >= 0; got nan"),
    "n_iter": (-2, ValueError, "n_iter must be an int >= 0; got -2"),
    "mass_t": (-1.0, ValueError, "mass_t must be a finite real number >= 0; got -1.0"),
    "tree": ("star", ValueError, "tree must be one of 'chain', 'concurrent'; got 'star'"),
    "split": ("x", ValueError, "split must be one of 'image', 'line'; got 'x'"),
    "mapping": (3, TypeError, "mapping must be"),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_bad_hyper_parameters_raise_at_construction(name):
    """n_trees=-1 or p=0.5 failed only at the first forward; now at construction."""
    cls = getattr(tsw.nn, name)
    kwargs = SMALL[name][0]
    options = set(inspect.signature(cls).parameters)
    tried = 0
    for option, (bad, error, message) in BAD_OPTIONS.items():
        if option not in options:
            continue
        tried += 1
        with pytest.raises(error, match=re.escape(message)):
            cls(**{**kwargs, option: bad})
    assert tried >= 4
    with pytest.raises(TypeError, match=re.escape("resample must be True or False; got str")):
        cls(**kwargs, resample="False")


def test_option_assignment_is_checked():
    loss = tsw.nn.DbTSWLoss(n_trees=4)
    with pytest.raises(ValueError, match=re.escape("p must be a finite real number >= 1")):
        loss.p = 0.5
    with pytest.raises(TypeError, match=re.escape("orthogonal must be True or False")):
        loss.orthogonal = "True"
    assert loss.p == 1
    loss.p = 2
    assert loss.p == 2
    # choices are checked on assignment too (they were checked only at construction)
    with pytest.raises(ValueError, match=re.escape("tree must be one of 'chain', 'concurrent'")):
        tsw.nn.TSWSLLoss().tree = "bogus"
    with pytest.raises(ValueError, match=re.escape("split must be one of 'image', 'line'")):
        tsw.nn.CircularTSWLoss(radius=0.1).split = "bogus"


@pytest.mark.parametrize("cast", ["to64", "half", "double_data"])
def test_tensor_options_follow_the_data_dtype(cast):
    """.to(float64) and .half() left tensor hyper-parameters behind or broke them."""
    alpha = torch.tensor([0.2, 0.3, 0.5])  # not exact in binary: a float32 sum is not 1
    center = torch.tensor([0.1, -0.2, 0.3])
    mass = torch.tensor(0.8)
    losses = [
        (tsw.nn.TSWSLLoss(n_trees=4, n_lines=3, alpha=alpha, seed=0), tsw.tsw_sl, {"alpha": alpha}),
        (
            tsw.nn.DbTSWLoss(n_trees=4, n_lines=3, center=center, seed=0),
            tsw.db_tsw,
            {"center": center},
        ),
        (
            tsw.nn.PartialTSWLoss(n_trees=4, n_lines=3, mass_t=mass, seed=0),
            tsw.partial_tsw,
            {"mass_t": mass},
        ),
    ]
    g = torch.Generator().manual_seed(0)
    X, Y = (
        torch.randn(12, 3, generator=g, dtype=torch.float64),
        torch.randn(9, 3, generator=g, dtype=torch.float64),
    )
    for loss, fn, tensors in losses:
        loss = {"to64": loss.to(torch.float64), "half": loss.half(), "double_data": loss}[cast]
        value = loss(X, Y + 0.7)
        assert value.dtype == torch.float64
        kwargs = {k: v.double() for k, v in tensors.items()}
        want = fn(
            X, Y + 0.7, n_trees=4, n_lines=3, **kwargs, generator=torch.Generator().manual_seed(0)
        )
        assert torch.equal(value, want)


def test_parameter_option_is_cast_and_still_trained():
    mass = torch.nn.Parameter(torch.tensor(0.8))
    loss = tsw.nn.PartialTSWLoss(n_trees=4, n_lines=3, mass_t=mass, seed=0)
    X = torch.randn(10, 3, dtype=torch.float64)
    loss(X, X + 1).backward()
    assert mass.grad is not None
    assert mass.grad.dtype == torch.float32


@pytest.mark.parametrize("name", sorted(SMALL))
def test_losses_under_autocast_inference_mode_and_no_grad(name):
    cls = getattr(tsw.nn, name)
    kwargs = SMALL[name][0]
    inputs = _inputs(name, torch.float32)
    want = cls(**kwargs, seed=4, resample=False)(*inputs)
    assert want.dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = cls(**kwargs, seed=4, resample=False)(*inputs)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    with torch.inference_mode():
        got = cls(**kwargs, seed=4, resample=False)(*inputs)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    with torch.no_grad():
        got = cls(**kwargs, seed=4, resample=False)(*inputs)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)


def test_autocast_takes_half_precision_points_as_float32():
    X = torch.randn(10, 3)
    Y = torch.randn(8, 3) + 1
    want = tsw.db_tsw(X.bfloat16().float(), Y.bfloat16().float(), n_trees=5, seed=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = tsw.db_tsw(X.bfloat16(), Y.bfloat16(), n_trees=5, seed=0)
    assert got.dtype == torch.float32
    assert torch.equal(got, want)
    with pytest.raises(
        TypeError, match=re.escape("must have dtype torch.float32 or torch.float64")
    ):
        tsw.db_tsw(X.bfloat16(), Y.bfloat16(), n_trees=5, seed=0)  # outside autocast


@pytest.mark.parametrize("resample", [True, False])
@pytest.mark.parametrize("name", sorted(SMALL))
def test_state_dict_round_trip_resumes_the_random_stream(name, resample):
    """A restored module continues the stream instead of restarting it."""
    cls = getattr(tsw.nn, name)
    kwargs = SMALL[name][0]
    inputs = _inputs(name)
    loss = cls(**kwargs, seed=7, resample=resample)
    loss(*inputs)  # advance the stream
    state = loss.state_dict()
    after = [loss(*inputs) for _ in range(2)]
    restored = cls(**kwargs, seed=123, resample=resample)
    restored.load_state_dict(state)
    assert [
        torch.equal(v, w) for v, w in zip(after, [restored(*inputs) for _ in range(2)], strict=True)
    ] == [True, True]
    # into a module built without a seed as well
    fresh = cls(**kwargs, resample=resample)
    fresh.load_state_dict(state)
    assert torch.equal(fresh(*inputs), after[0])
