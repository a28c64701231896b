"""Adversarial property-based tests: every public function and loss.

Hypothesis drives the distances, the closed forms, the samplers and the loss modules
through dtypes and layouts, empty, single-point and zero-weight measures, extreme
scales, non-finite values in every argument, bad counts and flags, and the framework
modes (``torch.inference_mode``, ``torch.autocast``, ``torch.no_grad``, ``.to(dtype)``,
``state_dict`` round trips). Every case must end in

* a ``ValueError`` or ``TypeError`` whose message names an argument of the call, or
* a finite value of the right shape and dtype that matches an independent computation
  where one exists: POT's ``ot.emd2`` on the explicit tree metric
  (``tests/_reference.py``), ``ot.sliced_wasserstein_distance``,
  ``ot.sliced_wasserstein_sphere``, ``ot.wasserstein_1d``,

under a per-case deadline (``signal.setitimer`` on the main thread), so that a hang, such
as POT's binary search looping on NaN, fails the case instead of stalling the run. The
fast profile (a few seconds) runs by default; ``python -m pytest -m slow`` runs the
longer one.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import re
import signal
import threading
import warnings
from collections.abc import Callable, Iterator

import _curved
import numpy as np
import ot
import pytest
import torch
from _reference import emd_on_lines, tree_metric_from_parents
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tsw

F32, F64 = torch.float32, torch.float64

FAST = settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
SLOW = settings(
    max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
#: seconds one case may run before it counts as a hang
CASE_SECONDS = 20.0


class HangError(AssertionError):
    """A case ran past its deadline."""


@contextlib.contextmanager
def deadline(seconds: float = CASE_SECONDS) -> Iterator[None]:
    """Fail with :class:`HangError` after ``seconds`` (a timer signal; the main thread only)."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:  # e.g. Windows: no per-case deadline, the run's own timeout applies
        yield
        return

    def fire(signum, frame):
        raise HangError(f"the case ran for more than {seconds} s (a hang)")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def both_profiles(strategy_kwargs: dict, body: Callable) -> tuple[Callable, Callable]:
    """The property ``body`` under the fast profile and, marked slow, the long one."""

    def fast(**kw):
        body(**kw)

    def slow(**kw):
        body(**kw)

    fast.__doc__ = slow.__doc__ = body.__doc__
    return (
        FAST(given(**strategy_kwargs)(fast)),
        pytest.mark.slow(SLOW(given(**strategy_kwargs)(slow))),
    )


def names_an_argument(err: Exception, fn: Callable, extra: tuple[str, ...] = ()) -> bool:
    """Whether the message of ``err`` names a parameter of ``fn`` (or one of ``extra``)."""
    try:
        params = set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = set()
    params |= {"X_s", "X_t", "a", "b", *extra}
    message = str(err)
    words = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", message))
    # a one-letter name ("a", "b", "p") is also an English word: it counts only where
    # the message starts with it or quotes it
    long = {w for w in params & words if len(w) > 1}
    short = {
        w for w in params if len(w) == 1 and (re.match(rf"{w}\b", message) or f"`{w}`" in message)
    }
    return bool(long or short)


def run_case(call: Callable[[], object], fn: Callable, extra: tuple[str, ...] = ()):
    """Run one case under the deadline: the value, or the clear error it raised."""
    with deadline(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the spread guard's warning is allowed
        try:
            return call(), None
        except (ValueError, TypeError) as err:
            error = err
    assert names_an_argument(error, fn, extra), f"unclear error: {error!r}"
    return None, error


# --------------------------------------------------------------------------- the distances

#: small settings of every distance of two measures; "sphere": points on S^d
TWO = {
    "tsw_sl": (tsw.tsw_sl, {"n_trees": 3, "n_lines": 2}, False),
    "tsw_sl[concurrent]": (tsw.tsw_sl, {"n_trees": 3, "n_lines": 2, "tree": "concurrent"}, False),
    "db_tsw": (tsw.db_tsw, {"n_trees": 3, "n_lines": 2}, False),
    "db_tsw[p=2]": (tsw.db_tsw, {"n_trees": 3, "n_lines": 2, "p": 2}, False),
    "circular_tsw": (tsw.circular_tsw, {"n_trees": 3, "n_lines": 2, "radius": 0.5}, False),
    "circular_tsw[r=0]": (tsw.circular_tsw, {"n_trees": 3, "n_lines": 2, "radius": 0.0}, False),
    "spatial_tsw": (tsw.spatial_tsw, {"n_trees": 3, "n_lines": 2}, False),
    "partial_tsw": (tsw.partial_tsw, {"n_trees": 3, "n_lines": 2, "mass_t": 0.7}, False),
    "sw": (tsw.sw, {"n_projections": 4}, False),
    "sw[p=1]": (tsw.sw, {"n_projections": 4, "p": 1}, False),
    "max_sw": (tsw.max_sw, {"n_iter": 3, "n_init": 2}, False),
    "unbalanced_sw": (tsw.unbalanced_sw, {"n_projections": 3, "mass_t": 1.3}, False),
    "partial_sw": (tsw.partial_sw, {"n_projections": 3}, False),
    "stsw": (tsw.stsw, {"n_trees": 3, "n_lines": 2}, True),
    "spatial_stsw": (tsw.spatial_stsw, {"n_trees": 3, "n_lines": 2}, True),
    "ssw": (tsw.ssw, {"n_projections": 3}, True),
    "ssw[p=1]": (tsw.ssw, {"n_projections": 3, "p": 1}, True),
    "s3w": (tsw.s3w, {"n_projections": 3, "n_rotations": 2}, True),
    "ts_sobolev": (tsw.ts_sobolev, {"n_trees": 3, "n_lines": 2}, False),
    "ts_sobolev[delta=0,p=3]": (
        tsw.ts_sobolev,
        {"n_trees": 3, "n_lines": 2, "delta": 0.0, "p": 3},
        False,
    ),
    "max_tsw_sl": (tsw.max_tsw_sl, {"n_trees": 2, "n_lines": 2, "n_iter": 2}, False),
    "lcv_sw": (tsw.lcv_sw, {"n_projections": 4}, False),
    "lcv_sw[upper,loo]": (
        tsw.lcv_sw,
        {"n_projections": 4, "variate": "upper", "coefficient": "leave_one_out"},
        False,
    ),
    "eb_sw": (tsw.eb_sw, {"n_projections": 4}, False),
    "rp_sw": (tsw.rp_sw, {"n_projections": 4, "kappa": 5.0}, False),
}
#: distances of one measure to the uniform measure on the sphere
ONE = {
    "stsw_unif": (tsw.stsw_unif, {"n_trees": 3, "n_lines": 2, "n_grid": 16, "n_quad": 8}),
    "ssw_unif": (tsw.ssw_unif, {"n_projections": 3}),
    "s3w_unif": (tsw.s3w_unif, {"n_projections": 3, "n_samples": 20}),
}
#: options that make no sense for some inputs and raise a clear error by design
NO_WEIGHTS = {"partial_sw"}  # atoms of unit mass only


@st.composite
def measures(draw, sphere: bool, *, allow_empty_batch: bool = True):
    """Random measures: dtype, layout, sizes, scale and weights (valid, maybe degenerate)."""
    dtype = draw(st.sampled_from([F32, F64]))
    batch = draw(st.sampled_from([None, 1, 2, *([0] if allow_empty_batch else [])]))
    N, M = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    d = draw(st.integers(2, 4)) if sphere else draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    lead = () if batch is None else (batch,)
    X = torch.randn(*lead, N, d, generator=g, dtype=F64)
    Y = torch.randn(*lead, M, d, generator=g, dtype=F64) + draw(st.sampled_from([0.0, 1.0]))
    if draw(st.booleans()):  # a point shared by both measures (ties, zero distances)
        Y[..., 0, :] = X[..., 0, :]
    if sphere:
        X, Y = (torch.nn.functional.normalize(t, dim=-1) for t in (X, Y))
    else:
        scale = draw(st.sampled_from([1e-3, 1.0, 1e3] + ([1e-30, 1e30] if dtype == F64 else [])))
        X, Y = scale * X, scale * Y
    pattern = draw(st.sampled_from(["none", "random", "zeros"]))
    a = b = None
    if pattern != "none":
        a = torch.rand(*lead, N, generator=g, dtype=F64) + 0.05
        b = torch.rand(*lead, M, generator=g, dtype=F64) + 0.05
        if pattern == "zeros":  # zero-weight atoms (not all of them)
            a[..., 0] = 0 if N > 1 else a[..., 0]
            b[..., -1] = 0 if M > 1 else b[..., -1]
        a, b = a / a.sum(-1, keepdim=True), b / b.sum(-1, keepdim=True)
        a, b = a.to(dtype), b.to(dtype)
    return X.to(dtype), Y.to(dtype), a, b


def _expected_shape(X: torch.Tensor) -> tuple[int, ...]:
    return (X.shape[0],) if X.ndim == 3 else ()


def _mode(name: str):
    return {
        "plain": contextlib.nullcontext(),
        "no_grad": torch.no_grad(),
        "inference": torch.inference_mode(),
        "autocast": torch.autocast("cpu", dtype=torch.bfloat16),
    }[name]


def _oracle(name: str, fn, kwargs, X, Y, a, b, value) -> bool:
    """Compare with an independent computation where one exists (float64, unbatched).

    Returns whether a comparison ran.
    """
    if X.ndim != 2 or X.dtype != F64 or float(X.abs().max()) > 1e6:
        return False
    xn, yn = X.numpy(), Y.numpy()
    an = None if a is None else a.numpy()
    bn = None if b is None else b.numpy()
    if name in ("sw", "sw[p=1]"):
        P = tsw.sample_projections(X.shape[-1], 4, seed=11, dtype=F64)
        got = fn(X, Y, a, b, **{**kwargs, "projections": P})
        want = ot.sliced_wasserstein_distance(
            xn, yn, an, bn, projections=P.numpy(), p=kwargs.get("p", 2)
        )
        assert abs(float(got) - want) <= 1e-9 * max(1.0, want)
    elif name in ("db_tsw", "tsw_sl[concurrent]"):
        trees = tsw.sample_concurrent_lines(X.shape[-1], n_trees=3, n_lines=2, seed=12, dtype=F64)
        got = fn(
            X,
            Y,
            a,
            b,
            **{k: v for k, v in kwargs.items() if k not in ("n_trees", "n_lines", "tree")},
            trees=trees,
        )
        an = np.full(X.shape[0], 1 / X.shape[0]) if an is None else an
        bn = np.full(Y.shape[0], 1 / Y.shape[0]) if bn is None else bn
        delta = 2.0 if name == "db_tsw" else 0.0
        costs = []
        for root, dirs in zip(trees.roots.numpy(), trees.directions.numpy(), strict=True):
            cs, ct = (xn - root) @ dirs.T, (yn - root) @ dirs.T  # (N, k), (M, k)

            def split(Z, c, root=root):
                dist = np.sqrt(np.maximum(((Z - root) ** 2).sum(-1)[:, None] - c**2, 0))
                w = np.exp(-delta * (dist - dist.min(-1, keepdims=True)))
                return w / w.sum(-1, keepdims=True)

            ms, mt = an[:, None] * split(xn, cs), bn[:, None] * split(yn, ct)
            costs.append(emd_on_lines(cs.T, ct.T, ms.T, mt.T))
        want = float(np.mean(costs))
        assert abs(float(got) - want) <= 1e-8 * max(1.0, want), (float(got), want)
    elif name in ("ssw", "ssw[p=1]") and a is None:
        P = tsw.sample_sphere_projections(X.shape[-1], 3, seed=13, dtype=F64)
        got = fn(X, Y, **{**kwargs, "projections": P})
        want = float(
            ot.sliced_wasserstein_sphere(X, Y, projections=P, n_projections=3, p=kwargs.get("p", 2))
        )
        assert abs(float(got) - want) <= 1e-9 * max(1.0, want), (float(got), want)
    else:
        return False
    return True


@pytest.mark.parametrize("name", ["sw", "sw[p=1]", "db_tsw", "tsw_sl[concurrent]", "ssw"])
@pytest.mark.parametrize("degenerate", [False, True], ids=["plain", "duplicates"])
def test_oracles_run_in_the_default_profile(name, degenerate):
    # the derandomised fast profile draws no case that reaches an oracle, so the
    # comparisons with POT run here on fixed data (with duplicate points too)
    fn, kwargs, sphere = TWO[name]
    X, Y, _, _ = _fixed_data()
    if degenerate:
        X, Y = torch.cat([X, X[:2]]), torch.cat([Y[:1], Y[:1], Y])
    if sphere:
        X, Y = (torch.nn.functional.normalize(Z, dim=-1) for Z in (X, Y))
    g = torch.Generator().manual_seed(9)
    a = b = None
    if name != "ssw":
        a = torch.rand(X.shape[0], generator=g, dtype=F64) + 0.1
        b = torch.rand(Y.shape[0], generator=g, dtype=F64) + 0.1
        a, b = a / a.sum(), b / b.sum()
    assert _oracle(name, fn, kwargs, X, Y, a, b, None)


def _valid_distance(name, data, mode, validate):
    """Valid (possibly degenerate) measures: a finite value, right shape and dtype."""
    fn, kwargs, _ = TWO[name]
    X, Y, a, b = data
    if name in NO_WEIGHTS:
        a = b = None
    if mode == "autocast" and name in ("partial_sw",):
        mode = "plain"

    def call():
        with _mode(mode):
            return fn(X, Y, a, b, **kwargs, seed=0, validate=validate)

    value, err = run_case(call, fn)
    if err is not None:
        # the only errors valid measures may meet: the float32 range guard, Db-TSW⊥'s
        # k <= d, and the 1e±30 scales of the sliced baselines' POT solvers
        assert "magnitude" in str(err) or "n_lines <= dim" in str(err), repr(err)
        return
    assert isinstance(value, torch.Tensor)
    assert value.shape == _expected_shape(X), (value.shape, X.shape)
    assert value.dtype == X.dtype
    assert bool(torch.isfinite(value).all()), value
    assert bool((value >= 0).all()), value
    if mode == "plain" and validate:
        _oracle(name, fn, kwargs, X, Y, a, b, value)


test_valid_measures, test_valid_measures_slow = both_profiles(
    {
        "name": st.sampled_from(sorted(n for n, v in TWO.items() if not v[2])),
        "data": measures(False),
        "mode": st.sampled_from(["plain", "no_grad", "inference", "autocast"]),
        "validate": st.booleans(),
    },
    _valid_distance,
)
test_valid_sphere_measures, test_valid_sphere_measures_slow = both_profiles(
    {
        "name": st.sampled_from(sorted(n for n, v in TWO.items() if v[2])),
        "data": measures(True),
        "mode": st.sampled_from(["plain", "no_grad", "inference", "autocast"]),
        "validate": st.booleans(),
    },
    _valid_distance,
)


def _valid_unif(name, data, mode):
    fn, kwargs = ONE[name]
    X, _, a, _ = data

    def call():
        with _mode(mode):
            return fn(X, a, **kwargs, seed=0)

    value, err = run_case(call, fn)
    assert err is None, repr(err)
    assert value.shape == _expected_shape(X)
    assert value.dtype == X.dtype
    assert bool(torch.isfinite(value).all())


test_valid_unif, test_valid_unif_slow = both_profiles(
    {
        "name": st.sampled_from(sorted(ONE)),
        "data": measures(True),
        "mode": st.sampled_from(["plain", "no_grad", "inference", "autocast"]),
    },
    _valid_unif,
)


# --------------------------------------------------------------------------- non-finite values

BAD_VALUES = [math.nan, math.inf, -math.inf]


def _explicit_slices(name, X):
    """Explicit slices of the distance (one corrupted argument may be among them)."""
    d = X.shape[-1]
    dt = X.dtype
    if name.startswith(("db_tsw", "tsw_sl[concurrent]", "circular", "partial_tsw")):
        return {"trees": tsw.sample_concurrent_lines(d, n_trees=3, n_lines=2, seed=3, dtype=dt)}
    if name == "tsw_sl":
        return {"trees": tsw.sample_chain_lines(d, n_trees=3, n_lines=2, seed=3, dtype=dt)}
    if name in ("sw", "sw[p=1]", "unbalanced_sw", "partial_sw"):
        return {"projections": tsw.sample_projections(d, 3, seed=3, dtype=dt)}
    if name in ("ssw", "ssw[p=1]"):
        return {"projections": tsw.sample_sphere_projections(d, 3, seed=3, dtype=dt)}
    if name == "stsw":
        return {"trees": tsw.sample_spherical_trees(d, n_trees=3, n_lines=2, seed=3, dtype=dt)}
    return {}


def _corrupt(tensor: torch.Tensor, position: int, bad: float) -> torch.Tensor:
    out = tensor.detach().clone().contiguous()
    flat = out.view(-1)
    flat[position % flat.numel()] = bad
    return out


def _nonfinite(name, data, target, position, bad, validate):
    """A NaN / Inf anywhere: a ValueError naming it, or (validate=False) a non-finite value."""
    fn, kwargs, _ = TWO[name]
    X, Y, a, b = data
    if X.numel() == 0 or Y.numel() == 0:
        return
    if name in NO_WEIGHTS:
        a = b = None
    kwargs = dict(kwargs)
    slices = _explicit_slices(name, X if X.ndim == 2 else X[0])
    if slices and any(k in kwargs for k in ("n_trees", "n_projections")):
        for k in ("n_trees", "n_lines", "n_projections", "tree"):
            kwargs.pop(k, None)
        kwargs.update(slices)
    args = {"X_s": X, "X_t": Y, "a": a, "b": b}
    if target in ("a", "b") and args[target] is None:
        target = "X_s"
    if target == "slices":
        if not slices:
            target = "X_t"
        else:
            key = next(iter(slices))
            obj = slices[key]
            if isinstance(obj, torch.Tensor):
                kwargs[key] = _corrupt(obj, position, bad)
                label = key
            else:  # a tree container: corrupt its directions without validation
                field = "directions"
                fields = {f: getattr(obj, f) for f in obj.__dataclass_fields__}
                fields[field] = _corrupt(fields[field], position, bad)
                kwargs[key] = type(obj)(*fields.values(), validate=False)
                label = field
    clean_args, clean_kwargs = dict(args), dict(kwargs)
    if target != "slices":
        args[target] = _corrupt(args[target], position, bad)
        label = target

    def call(args=args, kwargs=kwargs):
        return fn(
            args["X_s"], args["X_t"], args["a"], args["b"], **kwargs, seed=0, validate=validate
        )

    value, err = run_case(call, fn, extra=("directions", "trees", "projections"))
    if validate:
        assert err is not None, f"a {bad} in {label} passed the checks: {value}"
        assert label in str(err) or (label == "directions" and "trees" in str(err)), repr(err)
        return
    if err is not None:  # some checks stay on without validate (shapes, POT's NaN guard)
        return
    if bool(torch.isfinite(value).all()):
        # finite only where the bad entry does not enter the value (e.g. the directions
        # of CircularTSW at radius 0, which uses distances to the roots only): then the
        # value is the clean input's
        clean, _ = run_case(lambda: call(clean_args, clean_kwargs), fn)
        assert clean is not None
        assert torch.equal(value, clean), f"a {bad} in {label} gave {value}, not {clean}"


test_nonfinite_anywhere, test_nonfinite_anywhere_slow = both_profiles(
    {
        "name": st.sampled_from(sorted(TWO)),
        "data": measures(False, allow_empty_batch=False),
        "target": st.sampled_from(["X_s", "X_t", "a", "b", "slices"]),
        "position": st.integers(0, 10**6),
        "bad": st.sampled_from(BAD_VALUES),
        "validate": st.booleans(),
    },
    lambda name, data, **kw: _nonfinite(name, _to_sphere(data) if TWO[name][2] else data, **kw),
)


def _to_sphere(data):
    X, Y, a, b = data
    if X.shape[-1] < 2:
        X, Y = torch.cat([X, torch.ones_like(X)], -1), torch.cat([Y, torch.ones_like(Y)], -1)
    X, Y = (torch.nn.functional.normalize(t.double(), dim=-1).to(t.dtype) for t in (X, Y))
    return X, Y, a, b


# --------------------------------------------------------------------------- bad options

#: bad values of the options, and of the counts and flags
BAD_OPTION_VALUES = [-1, 0, 0.5, 2.5, -0.5, math.nan, math.inf, "False", "1", None, True, [1]]


def _bad_option(name, option_index, bad):
    """Any bad count, flag or option: a clear error naming it, or a finite value."""
    fn, kwargs, sphere = TWO[name]
    options = [
        q.name
        for q in inspect.signature(fn).parameters.values()
        if q.kind is q.KEYWORD_ONLY and q.name not in ("seed", "generator", "log")
    ]
    option = options[option_index % len(options)]
    X, Y, _, _ = _to_sphere(_fixed_data()) if sphere else _fixed_data()

    def call():
        return fn(X, Y, **{**kwargs, option: bad}, seed=0)

    value, err = run_case(call, fn)
    if err is not None:
        assert option in str(err), (option, bad, err)
        return
    out = value[0] if isinstance(value, tuple) else value
    assert bool(torch.isfinite(torch.as_tensor(out)).all()), (option, bad, out)


def _fixed_data():
    g = torch.Generator().manual_seed(5)
    return (
        torch.randn(6, 3, generator=g, dtype=F64),
        torch.randn(5, 3, generator=g, dtype=F64) + 1,
        None,
        None,
    )


test_bad_options, test_bad_options_slow = both_profiles(
    {
        "name": st.sampled_from(sorted(TWO)),
        "option_index": st.integers(0, 40),
        "bad": st.sampled_from(BAD_OPTION_VALUES),
    },
    _bad_option,
)


# --------------------------------------------------------------------------- loss modules

LOSSES = {
    "TSWSLLoss": {"n_trees": 3, "n_lines": 2},
    "DbTSWLoss": {"n_trees": 3, "n_lines": 2},
    "CircularTSWLoss": {"radius": 0.5, "n_trees": 3, "n_lines": 2},
    "SpatialTSWLoss": {"n_trees": 3, "n_lines": 2},
    "PartialTSWLoss": {"n_trees": 3, "n_lines": 2, "mass_t": 0.8},
    "SWLoss": {"n_projections": 4},
    "MaxSWLoss": {"n_iter": 2, "n_init": 2},
    "STSWLoss": {"n_trees": 3, "n_lines": 2},
    "SpatialSTSWLoss": {"n_trees": 3, "n_lines": 2},
    "SSWLoss": {"n_projections": 3},
    "S3WLoss": {"n_projections": 3, "n_rotations": 2},
    "ARIS3WLoss": {"dim": 3, "pool_size": 4, "n_rotations": 2, "n_projections": 3},
    "STSWUnifLoss": {"n_trees": 3, "n_lines": 2, "n_grid": 16, "n_quad": 8},
    "SSWUnifLoss": {"n_projections": 3},
    "S3WUnifLoss": {"n_projections": 3, "n_samples": 20},
    "TSSobolevLoss": {"n_trees": 3, "n_lines": 2},
    "MaxTSWSLLoss": {"n_lines": 2, "n_iter": 2},
    "LCVSWLoss": {"n_projections": 4},
    "EBSWLoss": {"n_projections": 4},
    "RPSWLoss": {"n_projections": 4},
    "MCTSWLoss": {"components": (("euclidean", 3),), "n_trees": 3, "n_lines": 2},
    "GHSWLoss": {"n_projections": 4},
    "HHSWLoss": {"n_projections": 4},
    "SPDSWLoss": {"n_projections": 4},
    "HSPDSWLoss": {"n_projections": 4},
}
#: the losses on hyperbolic space and SPD matrices take the generic data lifted there
CURVED_LOSSES = {
    "GHSWLoss": _curved.hyperbolic,
    "HHSWLoss": _curved.hyperbolic,
    "SPDSWLoss": _curved.spd,
    "HSPDSWLoss": _curved.spd,
}
SPHERE_LOSSES = {"STSWLoss", "SpatialSTSWLoss", "SSWLoss", "S3WLoss", "ARIS3WLoss"}
UNIF_LOSSES = {"STSWUnifLoss", "SSWUnifLoss", "S3WUnifLoss"}


def test_every_loss_is_driven():
    assert set(LOSSES) == set(tsw.nn.__all__)


def _module(name, dtype, cast, mode, resample, calls):
    """Losses under .to(dtype) / .half(), the framework modes and state_dict round trips."""
    cls = getattr(tsw.nn, name)
    g = torch.Generator().manual_seed(9)
    X = torch.randn(7, 3, generator=g, dtype=F64)
    Y = torch.randn(6, 3, generator=g, dtype=F64) + 0.5
    if name in SPHERE_LOSSES | UNIF_LOSSES:
        X, Y = (torch.nn.functional.normalize(t, dim=-1) for t in (X, Y))
    if name in CURVED_LOSSES:
        X, Y = (CURVED_LOSSES[name](t) for t in (X, Y))
    X, Y = X.to(dtype), Y.to(dtype)
    inputs = (X,) if name in UNIF_LOSSES else (X, Y)
    with deadline():
        loss = cls(**LOSSES[name], seed=21, resample=resample)
        loss = {
            "none": loss,
            "to64": loss.to(F64),
            "to32": loss.to(F32),
            "half": loss.half(),
            "double": loss.double(),
        }[cast]
        for _ in range(calls):
            loss(*inputs)
        state = loss.state_dict()
        with _mode(mode):
            value = loss(*inputs)
            nxt = loss(*inputs)
        assert value.dtype == dtype
        assert bool(torch.isfinite(value))
        restored = cls(**LOSSES[name], resample=resample)
        restored.load_state_dict(state)
        with _mode(mode):
            again = restored(*inputs)
            again_next = restored(*inputs)
        # the restored module resumes the stream (same values, up to autocast's identity)
        assert torch.equal(again, value)
        assert torch.equal(again_next, nxt)


test_modules, test_modules_slow = both_profiles(
    {
        "name": st.sampled_from(sorted(LOSSES)),
        "dtype": st.sampled_from([F32, F64]),
        "cast": st.sampled_from(["none", "to64", "to32", "half", "double"]),
        "mode": st.sampled_from(["plain", "no_grad", "inference", "autocast"]),
        "resample": st.booleans(),
        "calls": st.integers(0, 2),
    },
    _module,
)


def _module_construction(name, option_index, bad):
    """A bad hyper-parameter raises at construction (or the loss gives a finite value)."""
    cls = getattr(tsw.nn, name)
    params = [
        q for q in inspect.signature(cls).parameters.values() if q.name not in ("self", "seed")
    ]
    option = params[option_index % len(params)].name
    kwargs = {**LOSSES[name], option: bad}
    error = None
    with deadline():
        try:
            loss = cls(**kwargs)
        except (ValueError, TypeError) as err:
            error = err
    if error is not None:
        assert option in str(error) or names_an_argument(error, cls), repr(error)
        return
    X = torch.nn.functional.normalize(torch.randn(6, 3, dtype=F64), dim=-1)
    if name in CURVED_LOSSES:
        X = CURVED_LOSSES[name](X)
    inputs = (X,) if name in UNIF_LOSSES else (X, X.flip(0))
    value, err = run_case(lambda: loss(*inputs), cls, extra=(option,))
    if err is None:
        assert bool(torch.isfinite(value).all()), (option, bad, value)


test_module_construction, test_module_construction_slow = both_profiles(
    {
        "name": st.sampled_from(sorted(LOSSES)),
        "option_index": st.integers(0, 40),
        "bad": st.sampled_from(BAD_OPTION_VALUES),
    },
    _module_construction,
)


# --------------------------------------------------------------------------- closed forms


@st.composite
def rooted_trees(draw):
    V = draw(st.integers(1, 7))
    parents = [-1] + [draw(st.integers(0, v - 1)) for v in range(1, V)]
    perm = draw(st.permutations(range(V)))  # the root anywhere
    relabel = {old: new for new, old in enumerate(perm)}
    par = [0] * V
    for v, u in enumerate(parents):
        par[relabel[v]] = -1 if u == -1 else relabel[u]
    return par


def _tree_wasserstein(parents, seed, p, dtype, corrupt):
    """tree_wasserstein equals ot.emd2 on the tree metric at p = 1, finite otherwise."""
    V = len(parents)
    g = torch.Generator().manual_seed(seed)
    lengths = torch.rand(V, generator=g, dtype=F64) + 0.1
    mu = torch.rand(V, generator=g, dtype=F64)
    nu = torch.rand(V, generator=g, dtype=F64)
    mu, nu = mu / mu.sum(), nu / nu.sum()
    args = {"edge_lengths": lengths, "mass_s": mu, "mass_t": nu}
    if corrupt is not None:
        which, bad = corrupt
        args[which] = (
            _corrupt(args[which], seed, bad)
            if not isinstance(bad, tuple)
            else torch.ones(*bad, dtype=F64)
        )
    args = {k: v.to(dtype) for k, v in args.items()}
    value, err = run_case(
        lambda: tsw.tree_wasserstein(
            parents, args["edge_lengths"], args["mass_s"], args["mass_t"], p=p
        ),
        tsw.tree_wasserstein,
    )
    if corrupt is not None:
        assert err is not None, value
        return
    assert err is None, repr(err)
    assert bool(torch.isfinite(value))
    if p == 1 and dtype == F64:
        D = tree_metric_from_parents(parents, lengths.numpy())
        want = ot.emd2(mu.numpy(), nu.numpy(), D)
        assert abs(float(value) - want) <= 1e-10 * max(1.0, want)


test_tree_wasserstein, test_tree_wasserstein_slow = both_profiles(
    {
        "parents": rooted_trees(),
        "seed": st.integers(0, 2**16),
        "p": st.sampled_from([1, 1.5, 2, 3]),
        "dtype": st.sampled_from([F32, F64]),
        "corrupt": st.one_of(
            st.none(),
            st.tuples(
                st.sampled_from(["edge_lengths", "mass_s", "mass_t"]),
                st.sampled_from([*BAD_VALUES, -1.0, (2, 9), (3,)]),
            ),
        ),
    },
    _tree_wasserstein,
)


def _wasserstein_1d(n, m, seed, p, dtype, batch, weighted):
    """wasserstein_1d equals ot.wasserstein_1d (atoms on the last axis here)."""
    g = torch.Generator().manual_seed(seed)
    lead = () if batch is None else (batch,)
    u = torch.randn(*lead, n, generator=g, dtype=F64)
    v = torch.randn(*lead, m, generator=g, dtype=F64)
    uw = vw = None
    if weighted:
        uw = torch.rand(*lead, n, generator=g, dtype=F64) + 0.1
        vw = torch.rand(*lead, m, generator=g, dtype=F64) + 0.1
        uw, vw = uw / uw.sum(-1, keepdim=True), vw / vw.sum(-1, keepdim=True)
    cast = [None if t is None else t.to(dtype) for t in (u, v, uw, vw)]
    value, err = run_case(lambda: tsw.wasserstein_1d(*cast, p=p), tsw.wasserstein_1d)
    assert err is None, repr(err)
    assert value.dtype == dtype
    assert bool(torch.isfinite(value).all())
    want = ot.wasserstein_1d(
        u.movedim(-1, 0).numpy(),
        v.movedim(-1, 0).numpy(),
        None if uw is None else uw.movedim(-1, 0).numpy(),
        None if vw is None else vw.movedim(-1, 0).numpy(),
        p=p,
    )
    tol = 1e-10 if dtype == F64 else 1e-4
    np.testing.assert_allclose(value.double().numpy(), want, rtol=tol, atol=tol)


test_wasserstein_1d, test_wasserstein_1d_slow = both_profiles(
    {
        "n": st.integers(1, 6),
        "m": st.integers(1, 6),
        "seed": st.integers(0, 2**16),
        "p": st.sampled_from([1, 1.5, 2, 3]),
        "dtype": st.sampled_from([F32, F64]),
        "batch": st.sampled_from([None, 1, 3]),
        "weighted": st.booleans(),
    },
    _wasserstein_1d,
)


def _line_system_cost(k, n, seed, chain):
    """line_system_cost equals ot.emd2 on the explicit line-system metric (p = 1)."""
    rng = np.random.default_rng(seed)
    coords = rng.normal(size=(k, n))
    ms = rng.random((k, n))
    mt = rng.random((k, n))
    mt *= ms.sum() / mt.sum()
    att = rng.normal(size=k) if chain else None
    value, err = run_case(
        lambda: tsw.line_system_cost(
            torch.tensor(coords), torch.tensor(ms - mt), None if att is None else torch.tensor(att)
        ),
        tsw.line_system_cost,
    )
    assert err is None, repr(err)
    want = emd_on_lines(coords, coords, ms, mt, att)
    assert abs(float(value) - want) <= 1e-9 * max(1.0, want)


test_line_system_cost, test_line_system_cost_slow = both_profiles(
    {
        "k": st.integers(1, 3),
        "n": st.integers(1, 4),
        "seed": st.integers(0, 2**16),
        "chain": st.booleans(),
    },
    _line_system_cost,
)


# --------------------------------------------------------------------------- samplers

SAMPLERS = {
    "sample_concurrent_lines": lambda d, n, **kw: tsw.sample_concurrent_lines(
        d, n_trees=n, n_lines=2, **kw
    ),
    "sample_chain_lines": lambda d, n, **kw: tsw.sample_chain_lines(d, n_trees=n, n_lines=2, **kw),
    "sample_spherical_trees": lambda d, n, **kw: tsw.sample_spherical_trees(
        d, n_trees=n, n_lines=2, **kw
    ),
    "sample_projections": lambda d, n, **kw: tsw.sample_projections(d, n, **kw),
    "sample_sphere_projections": lambda d, n, **kw: tsw.sample_sphere_projections(d, n, **kw),
    "sample_rotations": lambda d, n, **kw: tsw.sample_rotations(d, n, **kw),
}


def _sampler(name, dim, count, dtype, device, seed):
    """Samplers: bad dimensions, counts, dtypes and devices raise clearly; else unit draws."""
    fn = getattr(tsw, name)
    value, err = run_case(
        lambda: SAMPLERS[name](dim, count, dtype=dtype, device=device, seed=seed),
        fn,
        extra=("dim", "n_trees", "n_lines", "n_projections", "n_rotations", "dtype", "device"),
    )
    if err is not None:
        return
    t = value if isinstance(value, torch.Tensor) else value.directions
    assert t.dtype in (F32, F64)
    assert bool(torch.isfinite(t).all())
    tol = 1e-5 if t.dtype == F32 else 1e-12
    if name == "sample_projections":  # (d, L): unit columns
        assert float((torch.linalg.vector_norm(t, dim=0) - 1).abs().max()) <= tol
    elif name in ("sample_sphere_projections", "sample_rotations"):  # orthonormal columns
        eye = torch.eye(t.shape[-1], dtype=t.dtype)
        assert float((t.transpose(-1, -2) @ t - eye).abs().max()) <= tol
    else:  # trees: unit directions
        assert float((torch.linalg.vector_norm(t, dim=-1) - 1).abs().max()) <= tol


test_samplers, test_samplers_slow = both_profiles(
    {
        "name": st.sampled_from(sorted(SAMPLERS)),
        "dim": st.sampled_from([-1, 0, 1, 2, 3, 2.0, "3", None]),
        "count": st.sampled_from([-1, 0, 1, 3, 1.5, "2"]),
        "dtype": st.sampled_from([None, F32, F64, torch.float16, torch.int64, "float32", 3]),
        "device": st.sampled_from([None, "cpu", torch.device("cpu"), "nope", 0.5]),
        "seed": st.sampled_from([None, 0, -1, 2**70, 1.5, "0", True]),
    },
    _sampler,
)


def test_deadline_fails_a_hang():
    """The per-case deadline turns an endless loop into a failure."""

    def spin():
        with deadline(0.2):
            while True:
                pass

    with pytest.raises(HangError):
        spin()
