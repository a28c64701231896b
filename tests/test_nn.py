"""The loss modules of :mod:`tsw.nn` against the functions they are built from.

Every option a loss takes, set to a value other than its default, changes the loss as
it changes the function with the same draw; a few modules' option lists are written
out by hand. Then options as attributes (schedules, checks at construction and
assignment), tensor options and their dtype, autocast, inference mode, the random
stream in ``state_dict``, and (slow) gradient flows driven by the losses. The module =
function equality with default options runs on every loss in ``test_contract.py``.
"""

from __future__ import annotations

import inspect
import math
import re

import _curved
import pytest
import torch

import tsw

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
    "MCTSWLoss": tsw.mc_tsw,
    "GHSWLoss": tsw.ghsw,
    "HHSWLoss": tsw.hhsw,
    "SPDSWLoss": tsw.spdsw,
    "HSPDSWLoss": tsw.hspdsw,
    "STSWLoss": tsw.stsw,
    "SpatialSTSWLoss": tsw.spatial_stsw,
    "STSWUnifLoss": tsw.stsw_unif,
    "SSWLoss": tsw.ssw,
    "SSWUnifLoss": tsw.ssw_unif,
    "S3WLoss": tsw.s3w,
    "ARIS3WLoss": tsw.s3w,
    "S3WUnifLoss": tsw.s3w_unif,
}


def test_every_loss_has_a_function():
    assert set(FUNCTIONS) == set(tsw.nn.__all__)


def test_dir_shows_the_losses_only():
    assert sorted(dir(tsw.nn)) == sorted(tsw.nn.__all__)


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


def _sphere(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(*shape, generator=g, dtype=dtype), dim=-1)


#: small settings of every loss, and whether it takes points on the sphere (True), or the
#: lift of the generic data onto its manifold (hyperbolic space, SPD matrices)
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
    # MC-TSW on the data as one Euclidean factor (generic points of R^3)
    "MCTSWLoss": ({"components": (("euclidean", 3),), "n_trees": 4, "n_lines": 3}, False),
    "GHSWLoss": ({"n_projections": 6}, _curved.hyperbolic),
    "HHSWLoss": ({"n_projections": 6}, _curved.hyperbolic),
    "SPDSWLoss": ({"n_projections": 6}, _curved.spd),
    "HSPDSWLoss": ({"n_projections": 6}, _curved.spd),
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
    if sphere is True:
        X, Y = _sphere(10, 3, seed=1, dtype=dtype), _sphere(8, 3, seed=2, dtype=dtype)
    else:
        g = torch.Generator().manual_seed(3)
        X = torch.randn(10, 3, generator=g, dtype=torch.float64).to(dtype)
        Y = (torch.randn(8, 3, generator=g, dtype=torch.float64) + 1).to(dtype)
        if callable(sphere):
            X, Y = sphere(X), sphere(Y)
    return (X,) if issubclass(getattr(tsw.nn, name), tsw.nn._UnifLoss) else (X, Y)


def test_every_loss_has_small_settings():
    assert set(SMALL) == set(tsw.nn.__all__)


#: the options of a few modules, written out: a change to a function's signature shows
#: here as a change to its module's
OPTIONS = {
    "DbTSWLoss": [
        "n_trees", "n_lines", "delta", "p", "orthogonal", "sampling", "directions", "center",
        "root_std", "validate", "power", "chunk_size", "process_group", "gather",
        "reduction", "seed", "resample",
    ],
    "SWLoss": [
        "n_projections", "p", "orthogonal", "sampling", "validate", "power", "chunk_size",
        "process_group", "gather", "reduction", "seed", "resample",
    ],
    "PartialTSWLoss": [
        "mass_s", "mass_t", "n_trees", "n_lines", "delta", "p", "price", "orthogonal",
        "sampling", "center", "root_std", "validate", "power", "chunk_size", "process_group",
        "gather", "reduction", "seed", "resample",
    ],
    "SSWUnifLoss": ["n_projections", "renormalize", "validate", "power", "reduction", "seed",
                    "resample"],
    "ARIS3WLoss": [
        "dim", "pool_size", "n_rotations", "n_projections", "p", "compat", "sampling",
        "renormalize", "validate", "power", "reduction", "seed", "resample",
    ],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_option_names_of_some_modules(name):
    params = inspect.signature(getattr(tsw.nn, name)).parameters
    assert list(params) == OPTIONS[name]
    assert all(q.kind is q.KEYWORD_ONLY for q in params.values())


@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_option_is_documented(name):
    """Each option of the module's signature has an entry in its Parameters section."""
    cls = getattr(tsw.nn, name)
    doc = inspect.getdoc(cls)
    section = doc.split("Parameters\n----------\n", 1)[1]
    section = re.split(r"\n\S[^\n]*\n-{3,}\n", section, maxsplit=1)[0]  # to the next section
    entries = set()
    for line in section.splitlines():
        if line and not line[0].isspace():  # "name : type" or "a, b, c" (shared entries)
            entries |= {n.strip() for n in line.split(":", 1)[0].split(",")}
    missing = set(inspect.signature(cls).parameters) - entries
    assert not missing, missing


def _lift_to_s3(Z):
    """An injective map S^2 -> S^3, other than the default lift."""
    return torch.nn.functional.normalize(torch.cat([Z, Z[..., :1] ** 2], dim=-1), dim=-1)


#: a value other than the default (and than SMALL's) for every option of the losses
OTHER = {
    "n_trees": 5,
    "n_lines": 2,
    "n_projections": 7,
    "p": 1.5,
    "delta": 0.5,
    "orthogonal": True,
    "sampling": "orthogonal",
    "directions": "paths",
    "center": torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64),
    "root_std": 0.5,
    "source_range": 2.0,
    "tree": "concurrent",
    "alpha": torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64),
    "radius": 0.3,
    "split": "line",
    "compat": True,
    "mass_s": 0.7,
    "mass_t": 0.6,
    "price": 0.5,
    "degree": 5,
    "beta": 0.5,
    "n_iter": 2,
    "lr": 0.1,
    "n_init": 8,
    "n_rotations": 3,
    "n_samples": 40,
    "n_grid": 20,
    "n_quad": 16,
    "renormalize": True,
    "validate": False,
    "power": True,
    "chunk_size": 2,
    "variate": "upper",
    "coefficient": "leave_one_out",
    "energy": "identity",
    "kappa": 10.0,
    "components": (("euclidean", 1), ("euclidean", 2)),  # R^3 as R^1 x R^2: other trees
}
#: options whose other value leaves the value unchanged: on these data (points on the
#: sphere for renormalize) or by design (validate, chunk_size)
SAME_VALUE = {"renormalize", "validate", "chunk_size"}
#: the exponent of a loss that takes no p
FIXED_P = {"SSWUnifLoss": 2}
#: the same for one loss: TSW-SL's constant split makes each tree a weighted sliced W1,
#: which neither the roots nor the tree's structure change (nor MaxTSW-SL's ascent, which
#: moves the directions only); on S^2 the uniform side's split needs no tangent nodes
SAME_VALUE_OF = {
    "TSWSLLoss": {"tree", "center", "root_std", "source_range"},
    "MaxTSWSLLoss": {"tree", "center", "root_std", "source_range"},
    "STSWUnifLoss": {"n_quad"},
}
#: options the comparison leaves to other files: a group of processes
#: (test_distributed.py), the random stream and the reduction (test_contract.py), the
#: model of hyperbolic space, which says what the data mean (curved/test_hsw.py).
#: ARIS3WLoss is left out too: no function draws its pool (sliced/test_s3w.py replays it)
ELSEWHERE = {"process_group", "gather", "reduction", "seed", "resample", "model"}


def _cases():
    for name in sorted(SMALL):
        if name == "ARIS3WLoss":
            continue
        params = inspect.signature(getattr(tsw.nn, name)).parameters
        for option in params:
            if option not in ELSEWHERE:
                yield pytest.param(name, option, id=f"{name}-{option}")


def _other(name, option):
    if option == "mapping":
        return {"SpatialTSWLoss": "poly", "SpatialSTSWLoss": _lift_to_s3}[name]
    if option == "n_rotations" and name == "S3WUnifLoss":
        return 2
    if option == "split" and name == "MCTSWLoss":
        return "ray"
    return OTHER[option]


@pytest.mark.parametrize(("name", "option"), list(_cases()))
def test_every_option_changes_the_loss_as_it_changes_the_function(name, option):
    """``Loss(option=v)`` with ``seed=s`` equals the function with ``option=v`` and the
    draw of ``Generator().manual_seed(s)``; and ``v`` changes the function's value (to its
    p-th power for ``power``; not at all for the options of ``SAME_VALUE``), so an option
    the module dropped, renamed or did not pass on fails here."""
    cls, fn = getattr(tsw.nn, name), FUNCTIONS[name]
    base = dict(SMALL[name][0])
    if option == "degree":
        base["mapping"] = "pow"  # degree and beta shape the "pow" map
    elif option == "beta":
        base.update(mapping="pow", degree=3)
    changed = {**base, option: _other(name, option)}
    inputs = _inputs(name)
    got = cls(**changed, seed=7)(*inputs)
    want = fn(*inputs, **changed, generator=torch.Generator().manual_seed(7))
    assert torch.equal(got, want)
    default = fn(*inputs, **base, generator=torch.Generator().manual_seed(7))
    if option == "power":  # the p-th power of the value
        p = changed.get("p", FIXED_P.get(name) or inspect.signature(fn).parameters["p"].default)
        torch.testing.assert_close(got, default**p, rtol=1e-12, atol=1e-14)
    elif option in SAME_VALUE | SAME_VALUE_OF.get(name, set()):
        torch.testing.assert_close(got, default, rtol=1e-12, atol=1e-14)
    else:
        assert not torch.allclose(got, default, rtol=1e-6, atol=0)


def test_every_option_has_another_value():
    options = {
        q
        for name in SMALL
        if name != "ARIS3WLoss"
        for q in inspect.signature(getattr(tsw.nn, name)).parameters
    }
    assert options - ELSEWHERE - {"mapping"} <= set(OTHER)


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
    "split": ("x", ValueError, "split must be one of '"),  # each loss names its own
    "components": ((("torus", 2),), ValueError, "components[0] names an unknown factor 'torus'"),
    "mapping": (3, TypeError, "mapping must be"),
    "model": ("klein", ValueError, "model must be one of 'lorentz', 'poincare'; got 'klein'"),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_bad_hyper_parameters_raise_at_construction(name):
    """A bad option (n_trees=-1, p=0.5, ...) raises at construction, not at the first call."""
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
    # choices are checked on assignment too
    with pytest.raises(ValueError, match=re.escape("tree must be one of 'chain', 'concurrent'")):
        tsw.nn.TSWSLLoss().tree = "bogus"
    with pytest.raises(ValueError, match=re.escape("split must be one of 'image', 'line'")):
        tsw.nn.CircularTSWLoss(radius=0.1).split = "bogus"


@pytest.mark.parametrize("cast", ["to64", "half", "double_data"])
def test_tensor_options_follow_the_data_dtype(cast):
    """.to(float64), .half() and float64 data: tensor options are cast to the data's dtype
    at every call, and the value equals the function's with the float64 tensors."""
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


# --------------------------------------------------------------------------- gradient flows


def _w2sq(X, Y):
    import numpy as np
    import ot

    n, m = len(X), len(Y)
    return ot.emd2(np.full(n, 1 / n), np.full(m, 1 / m), ot.dist(X.numpy(), Y.numpy()))


@pytest.mark.slow
@pytest.mark.parametrize(
    "loss",
    [
        tsw.nn.DbTSWLoss(n_trees=25, n_lines=4, delta=1.0, seed=0),
        tsw.nn.TSWSLLoss(n_trees=25, n_lines=4, seed=0),
        tsw.nn.SWLoss(n_projections=100, seed=0),
        tsw.nn.MaxSWLoss(n_iter=10, seed=0),
    ],
    ids=["db_tsw", "tsw_sl", "sw", "max_sw"],
)
def test_gradient_flow_lowers_exact_w2(loss):
    """A few hundred Adam steps on the loss move a cloud onto a target (exact W2, POT)."""
    g = torch.Generator().manual_seed(0)
    Y = torch.randn(80, 2, generator=g, dtype=torch.float64) * 0.5 + torch.tensor([2.0, -1.0])
    X = torch.randn(80, 2, generator=g, dtype=torch.float64).requires_grad_(True)
    start = _w2sq(X.detach(), Y)
    opt = torch.optim.Adam([X], lr=2e-2)
    for _ in range(400):
        opt.zero_grad()
        loss(X, Y).backward()
        opt.step()
    end = _w2sq(X.detach(), Y)
    assert end < 0.02 * start, (start, end)
