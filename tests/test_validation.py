"""One test per error path, with the exception type and a distinctive part of the message.

Shape, type and option checks always run; value checks (NaN/Inf, signs, totals, unit
directions, simplex) run with ``validate=True`` (the default) and are skipped with
``validate=False``.

Here are the checks the distances share (measures, ``p``, counts, ``delta``, explicit
trees and projections, seeds, modules, points on the sphere); the checks of one
method's own options are in its file (``euclidean/``, ``sphere/``, ``sliced/``), those
of the tree containers, samplers and ``tree_wasserstein`` in ``core/``.
"""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from _reference import data, lit

import tsw
from tsw import ChainLines, ConcurrentLines

F64 = torch.float64


def uniform(n, batch=None, dtype=F64):
    shape = (n,) if batch is None else (batch, n)
    return torch.full(shape, 1 / n, dtype=dtype)


#: every public distance, with small settings; all share the measure checks
DISTANCES = {
    "tsw_sl": lambda *args, **kw: tsw.tsw_sl(*args, **{"n_trees": 3, "n_lines": 2, **kw}),
    "db_tsw": lambda *args, **kw: tsw.db_tsw(*args, **{"n_trees": 3, "n_lines": 2, **kw}),
    "circular_tsw": lambda *args, **kw: tsw.circular_tsw(
        *args, **{"n_trees": 3, "n_lines": 2, "radius": 0.5, **kw}
    ),
    "spatial_tsw": lambda *args, **kw: tsw.spatial_tsw(*args, **{"n_trees": 3, "n_lines": 2, **kw}),
    "sw": lambda *args, **kw: tsw.sw(*args, **{"n_projections": 4, **kw}),
    "max_sw": lambda *args, **kw: tsw.max_sw(*args, **{"n_iter": 1, "n_init": 2, **kw}),
    "TSWSLLoss": lambda *args, **kw: tsw.nn.TSWSLLoss(n_trees=3, n_lines=2, **kw)(*args),
    "DbTSWLoss": lambda *args, **kw: tsw.nn.DbTSWLoss(n_trees=3, n_lines=2, **kw)(*args),
    "CircularTSWLoss": lambda *args, **kw: tsw.nn.CircularTSWLoss(
        n_trees=3, n_lines=2, **{"radius": 0.0, **kw}
    )(*args),
    "SpatialTSWLoss": lambda *args, **kw: tsw.nn.SpatialTSWLoss(n_trees=3, n_lines=2, **kw)(*args),
    "SWLoss": lambda *args, **kw: tsw.nn.SWLoss(n_projections=4, **kw)(*args),
    "MaxSWLoss": lambda *args, **kw: tsw.nn.MaxSWLoss(n_iter=1, n_init=2, **kw)(*args),
    # on the sphere: the generic data are renormalised, so the shared checks apply
    "stsw": lambda *args, **kw: tsw.stsw(
        *args, **{"n_trees": 3, "n_lines": 2, "renormalize": True, **kw}
    ),
    "ssw": lambda *args, **kw: tsw.ssw(*args, **{"n_projections": 4, "renormalize": True, **kw}),
    "STSWLoss": lambda *args, **kw: tsw.nn.STSWLoss(n_trees=3, n_lines=2, renormalize=True, **kw)(
        *args
    ),
    "SSWLoss": lambda *args, **kw: tsw.nn.SSWLoss(n_projections=4, renormalize=True, **kw)(*args),
    "s3w": lambda *args, **kw: tsw.s3w(
        *args, **{"n_projections": 4, "n_rotations": 2, "renormalize": True, **kw}
    ),
    "S3WLoss": lambda *args, **kw: tsw.nn.S3WLoss(n_projections=4, renormalize=True, **kw)(*args),
    "ARIS3WLoss": lambda *args, **kw: tsw.nn.ARIS3WLoss(
        dim=3, pool_size=4, n_rotations=2, n_projections=4, renormalize=True, **kw
    )(*args),
}
#: distances of measures of unequal mass: the same checks of the points, and of the
#: weights (shapes, normalised) for partial_tsw and unbalanced_sw; partial_sw takes no
#: weights (atoms of unit mass; its own checks are in sliced/test_unbalanced_sw.py)
UNEQUAL_MASS = {
    "partial_tsw": lambda *args, **kw: tsw.partial_tsw(
        *args, **{"n_trees": 3, "n_lines": 2, "mass_t": 0.5, **kw}
    ),
    "unbalanced_sw": lambda *args, **kw: tsw.unbalanced_sw(
        *args, **{"n_projections": 4, "mass_t": 1.5, **kw}
    ),
    "partial_sw": lambda *args, **kw: tsw.partial_sw(*args, **{"n_projections": 4, **kw}),
}
ALL = {**DISTANCES, **UNEQUAL_MASS}
#: loss modules whose forward is the shared ``_RandomizedLoss.forward``: it hands
#: (X_s, X_t, a, b) unchanged to the wrapped function, which runs the measure checks. The
#: measure checks run on every function, on ARIS3WLoss (its own forward) and on DbTSWLoss
#: (the shared forward); the other modules get one check that they pass the measures
#: through (test_shared_forward_passes_measures_to_the_checks)
SHARED_FORWARD = [
    "TSWSLLoss",
    "CircularTSWLoss",
    "SpatialTSWLoss",
    "SWLoss",
    "MaxSWLoss",
    "STSWLoss",
    "SSWLoss",
    "S3WLoss",
]
MEASURE_CHECKED = [n for n in ALL if n not in SHARED_FORWARD]
WEIGHTED = [n for n in MEASURE_CHECKED if n != "partial_sw"]
FUNCTIONS = ["tsw_sl", "db_tsw", "circular_tsw", "spatial_tsw", "sw", "max_sw", "stsw", "s3w"]
SEEDED = [*FUNCTIONS, *UNEQUAL_MASS]
#: the distance on which the shared validators are exercised value by value; every
#: other distance is checked with one value per error path (it calls the same validator)
ONE = "db_tsw"


@pytest.fixture(params=[n for n in DISTANCES if n in MEASURE_CHECKED])
def dist(request):
    """The balanced distances (equal total masses required)."""
    return DISTANCES[request.param]


@pytest.fixture(params=MEASURE_CHECKED)
def any_dist(request):
    """Every distance of two point clouds: checks that do not involve the weights."""
    return ALL[request.param]


@pytest.fixture(params=WEIGHTED)
def weighted_dist(request):
    """Every distance that takes weights: checks of the weights' type, shape and values."""
    return ALL[request.param]


@pytest.fixture(params=FUNCTIONS)
def fn(request):
    return DISTANCES[request.param]


@pytest.fixture(params=SEEDED)
def seeded_fn(request):
    return ALL[request.param]


# --------------------------------------------------------------------------- types and dtypes


def test_non_tensor_input(any_dist):
    X, Y = data()
    with pytest.raises(
        TypeError, match=r"X_s must be a torch\.Tensor or a numpy array .*; got list"
    ):
        any_dist(X.tolist(), Y)
    with pytest.raises(TypeError, match=lit("X_t must be a torch.Tensor like X_s")):
        any_dist(X, Y.numpy())


def _non_floating(f, bad):
    X, Y = data()
    with pytest.raises(
        TypeError, match=lit(f"X_s must have dtype torch.float32 or torch.float64; got {bad}")
    ):
        f(X.to(bad), Y.to(bad))


def test_non_floating_dtype(any_dist):
    _non_floating(any_dist, torch.int64)


@pytest.mark.parametrize("bad", [torch.int32, torch.bool])
def test_non_floating_dtype_kinds(bad):
    _non_floating(DISTANCES[ONE], bad)


def _half(f, half):
    X, Y = data()
    with pytest.raises(TypeError, match=lit(f"got {half}")):
        f(X.to(half), Y.to(half))
    with pytest.raises(
        TypeError, match=lit(f"X_t must have dtype torch.float32 or torch.float64; got {half}")
    ):
        f(X, Y.to(half))


def test_half_precision_rejected(any_dist):
    _half(any_dist, torch.float16)


def test_bfloat16_rejected():
    _half(DISTANCES[ONE], torch.bfloat16)


def test_mixed_dtypes(any_dist):
    X, Y = data()
    with pytest.raises(TypeError, match=lit("X_t must have the same dtype as X_s")):
        any_dist(X, Y.float())


def test_mixed_weight_dtypes(weighted_dist):
    X, Y = data()
    with pytest.raises(TypeError, match=lit("a must have the same dtype as X_s")):
        weighted_dist(X, Y, uniform(5, dtype=torch.float32), uniform(4))
    with pytest.raises(TypeError, match=lit("b must have the same dtype as X_t")):
        weighted_dist(X, Y, uniform(5), uniform(4, dtype=torch.float32))


def test_weights_not_tensor(weighted_dist):
    X, Y = data()
    with pytest.raises(TypeError, match=lit("a must be a torch.Tensor; got list")):
        weighted_dist(X, Y, [0.2] * 5, uniform(4))


def test_mixed_devices():
    # the meta device stands in for a second device on CPU-only machines; device checks
    # read metadata only, so they run even with validate=False
    X, Y = data()
    with pytest.raises(ValueError, match=lit("X_t must be on the same device as X_s")):
        tsw.sw(X, Y.to("meta"), validate=False)
    with pytest.raises(ValueError, match=lit("a must be on the same device as X_s")):
        tsw.db_tsw(X, Y, uniform(5).to("meta"), uniform(4), validate=False)


# --------------------------------------------------------------------------- shapes


def _wrong_ndim(f, shape):
    X = torch.zeros(shape, dtype=F64)
    _, Y = data()
    with pytest.raises(
        ValueError, match=lit("X_s must have shape (N, d) or (B, N, d); got X_s.shape=")
    ):
        f(X, Y)
    with pytest.raises(ValueError, match=lit("X_t must have shape (N, d) or (B, N, d)")):
        f(Y, X)


def test_wrong_ndim(any_dist):
    _wrong_ndim(any_dist, (5,))


def test_too_many_dims():
    _wrong_ndim(DISTANCES[ONE], (1, 2, 5, 3))


def test_feature_dimension_mismatch(any_dist):
    X, _ = data(d=3)
    _, Y = data(d=2)
    with pytest.raises(ValueError, match=lit("X_s and X_t must have the same feature dimension d")):
        any_dist(X, Y)


def test_batch_size_mismatch(any_dist):
    X, _ = data(batch=2)
    _, Y = data(batch=3)
    with pytest.raises(ValueError, match=lit("X_s and X_t must have the same batch size B")):
        any_dist(X, Y)


def test_mixed_batched_and_unbatched(any_dist):
    X, _ = data(batch=2)
    _, Y = data()
    with pytest.raises(ValueError, match=lit("X_s and X_t must both be unbatched")):
        any_dist(X, Y)


def test_empty_measure(any_dist):
    X, Y = data()
    with pytest.raises(ValueError, match=lit("X_s is an empty measure")):
        any_dist(X[:0], Y)
    with pytest.raises(ValueError, match=lit("X_t is an empty measure")):
        any_dist(X, Y[:0])
    Xb, Yb = data(batch=2)
    with pytest.raises(ValueError, match=lit("X_s is an empty measure")):
        any_dist(Xb[:, :0], Yb)


def test_zero_feature_dimension(any_dist):
    X = torch.zeros(5, 0, dtype=F64)
    Y = torch.zeros(4, 0, dtype=F64)
    with pytest.raises(ValueError, match=lit("X_s must have d >= 1 features")):
        any_dist(X, Y)


def test_weight_shape_mismatch(weighted_dist):
    X, Y = data()
    with pytest.raises(ValueError, match=lit("a must have shape (N,) = (5,)")):
        weighted_dist(X, Y, uniform(4), uniform(4))
    with pytest.raises(ValueError, match=lit("b must have shape (N,) = (4,)")):
        weighted_dist(X, Y, uniform(5), uniform(5))
    Xb, Yb = data(batch=2)
    with pytest.raises(ValueError, match=lit("a must have shape (B, N) = (2, 5)")):
        # unbatched weights, batched points
        weighted_dist(Xb, Yb, uniform(5), uniform(4, batch=2))


# --------------------------------------------------------------------------- weight values


def test_negative_weights(weighted_dist):
    X, Y = data()
    a = torch.tensor([0.5, -0.1, 0.2, 0.2, 0.2], dtype=F64)
    with pytest.raises(ValueError, match=lit("a must be non-negative; got a minimum of -0.1")):
        weighted_dist(X, Y, a, uniform(4))


def test_nan_weights(weighted_dist):
    X, Y = data()
    b = torch.tensor([0.5, math.nan, 0.25, 0.25], dtype=F64)
    with pytest.raises(ValueError, match=lit("b contains NaN or Inf values")):
        weighted_dist(X, Y, uniform(5), b)


def test_zero_total_weight(weighted_dist):
    X, Y = data()
    with pytest.raises(
        ValueError, match=lit("a must have a positive total mass; got a total of 0")
    ):
        weighted_dist(X, Y, torch.zeros(5, dtype=F64), torch.zeros(4, dtype=F64))
    Xb, Yb = data(batch=2)
    a = uniform(5, batch=2)
    a[1] = 0
    with pytest.raises(ValueError, match=lit("a must have a positive total mass")):
        weighted_dist(Xb, Yb, a, uniform(4, batch=2))


def test_unequal_total_mass(dist):
    X, Y = data()
    with pytest.raises(ValueError, match=lit("a and b must have equal total mass")):
        dist(X, Y, uniform(5), 2 * uniform(4))
    # totals need not be 1, only equal
    assert torch.isfinite(dist(X, Y, 3 * uniform(5), 3 * uniform(4)))
    Xb, Yb = data(batch=3)
    b = uniform(4, batch=3)
    b[2, 0] += 0.01
    with pytest.raises(ValueError, match=lit("at batch index 2")):
        dist(Xb, Yb, uniform(5, batch=3), b)


@pytest.mark.parametrize("name", SHARED_FORWARD)
def test_shared_forward_passes_measures_to_the_checks(name):
    """A type check, a shape check and a value check (with validate=) reach the function."""
    f = DISTANCES[name]
    X, Y = data()
    with pytest.raises(
        TypeError, match=r"X_s must be a torch\.Tensor or a numpy array .*; got list"
    ):
        f(X.tolist(), Y)
    with pytest.raises(ValueError, match=lit("a must have shape (N,) = (5,)")):
        f(X, Y, uniform(4), uniform(4))
    with pytest.raises(ValueError, match=lit("a and b must have equal total mass")):
        f(X, Y, uniform(5), 2 * uniform(4))
    assert f(X, Y, uniform(5), 2 * uniform(4), validate=False).shape == ()


def _nonfinite_points(f, bad):
    X, Y = data()
    X[2, 1] = bad
    with pytest.raises(ValueError, match=lit("X_s contains NaN or Inf values")):
        f(X, Y)
    with pytest.raises(ValueError, match=lit("X_t contains NaN or Inf values")):
        f(Y, X)


def test_nonfinite_points(any_dist):
    _nonfinite_points(any_dist, math.nan)


@pytest.mark.parametrize("bad", [math.inf, -math.inf])
def test_infinite_points(bad):
    _nonfinite_points(DISTANCES[ONE], bad)


# --------------------------------------------------------------------------- scalar options


def test_p_out_of_range(any_dist):
    X, Y = data()
    with pytest.raises(ValueError, match=lit("p must be a finite real number >= 1; got 0.5")):
        any_dist(X, Y, p=0.5)
    with pytest.raises(TypeError, match=lit("p must be a real number >= 1; got str")):
        any_dist(X, Y, p="2")


@pytest.mark.parametrize("p", [0, -1, math.inf, math.nan])
def test_p_out_of_range_values(p):
    X, Y = data()
    with pytest.raises(ValueError, match=lit("p must be a finite real number >= 1")):
        DISTANCES[ONE](X, Y, p=p)


@pytest.mark.parametrize("p", [None, True, torch.tensor(2.0)])
def test_p_not_a_number(p):
    X, Y = data()
    with pytest.raises(TypeError, match=lit("p must be a real number >= 1; got")):
        DISTANCES[ONE](X, Y, p=p)


@pytest.mark.parametrize(
    "name",
    [
        "tsw_sl",
        "db_tsw",
        "circular_tsw",
        "spatial_tsw",
        "DbTSWLoss",  # the modules' shared forward hands the counts to the function
    ],
)
@pytest.mark.parametrize("count", ["n_trees", "n_lines"])
def test_tree_counts(name, count):
    X, Y = data()
    make = {
        "tsw_sl": lambda **kw: tsw.tsw_sl(X, Y, **kw),
        "db_tsw": lambda **kw: tsw.db_tsw(X, Y, **kw),
        "circular_tsw": lambda **kw: tsw.circular_tsw(X, Y, radius=0.0, **kw),
        "spatial_tsw": lambda **kw: tsw.spatial_tsw(X, Y, **kw),
        "TSWSLLoss": lambda **kw: tsw.nn.TSWSLLoss(**kw)(X, Y),
        "DbTSWLoss": lambda **kw: tsw.nn.DbTSWLoss(**kw)(X, Y),
        "CircularTSWLoss": lambda **kw: tsw.nn.CircularTSWLoss(radius=1.0, **kw)(X, Y),
    }[name]
    with pytest.raises(ValueError, match=lit(f"{count} must be an int >= 1; got 0")):
        make(**{count: 0})
    with pytest.raises(ValueError, match=lit(f"{count} must be an int >= 1; got -3")):
        make(**{count: -3})
    with pytest.raises(TypeError, match=lit(f"{count} must be an int >= 1; got float")):
        make(**{count: 2.0})
    with pytest.raises(TypeError, match=lit(f"{count} must be an int >= 1; got bool")):
        make(**{count: True})


def test_projection_and_iteration_counts():
    X, Y = data()
    with pytest.raises(ValueError, match=lit("n_projections must be an int >= 1; got 0")):
        tsw.sw(X, Y, n_projections=0)
    with pytest.raises(TypeError, match=lit("n_projections must be an int >= 1; got float")):
        tsw.sw(X, Y, n_projections=10.0)
    with pytest.raises(ValueError, match=lit("n_projections must be an int >= 1; got 0")):
        tsw.nn.SWLoss(n_projections=0)(X, Y)
    with pytest.raises(ValueError, match=lit("n_iter must be an int >= 0; got -1")):
        tsw.max_sw(X, Y, n_iter=-1)
    with pytest.raises(TypeError, match=lit("n_iter must be an int >= 0; got float")):
        tsw.max_sw(X, Y, n_iter=2.5)
    with pytest.raises(ValueError, match=lit("n_init must be an int >= 1; got 0")):
        tsw.max_sw(X, Y, n_init=0)
    with pytest.raises(ValueError, match=lit("lr must be a finite real number >= 0; got -0.1")):
        tsw.max_sw(X, Y, lr=-0.1)


@pytest.mark.parametrize("delta", [-1.0, -1e-9, math.inf, math.nan])
def test_delta_out_of_range(delta):
    X, Y = data()
    with pytest.raises(ValueError, match=lit("delta must be a finite real number >= 0")):
        tsw.db_tsw(X, Y, delta=delta)
    with pytest.raises(ValueError, match=lit("delta must be a finite real number >= 0")):
        tsw.nn.DbTSWLoss(delta=delta)(X, Y)


def test_delta_not_a_number():
    X, Y = data()
    with pytest.raises(TypeError, match=lit("delta must be a real number >= 0; got str")):
        tsw.db_tsw(X, Y, delta="2")


@pytest.mark.parametrize("std", [-0.1, math.nan, math.inf])
def test_root_std_out_of_range(std):
    X, Y = data()
    with pytest.raises(ValueError, match=lit("std must be a finite real number >= 0")):
        tsw.db_tsw(X, Y, root_std=std, seed=0)
    with pytest.raises(ValueError, match=lit("std must be a finite real number >= 0")):
        tsw.tsw_sl(X, Y, root_std=std, seed=0)
    with pytest.raises(ValueError, match=lit("std must be a finite real number >= 0")):
        tsw.sample_concurrent_lines(3, n_trees=2, n_lines=2, std=std)


def test_orthogonal_needs_k_at_most_d():
    X, Y = data(d=2)
    msg = lit("orthogonal directions need n_lines <= dim; got n_lines=3 and dim=2")
    with pytest.raises(ValueError, match=msg):
        tsw.db_tsw(X, Y, n_trees=2, n_lines=3, orthogonal=True)
    with pytest.raises(ValueError, match=msg):
        tsw.nn.DbTSWLoss(n_trees=2, n_lines=3, orthogonal=True)(X, Y)
    with pytest.raises(ValueError, match=msg):
        tsw.sample_concurrent_lines(2, n_trees=2, n_lines=3, orthogonal=True)
    # k == d is fine
    assert tsw.sample_concurrent_lines(2, n_trees=2, n_lines=2, orthogonal=True).n_lines == 2


# --------------------------------------------------------------------------- explicit trees


def concurrent(T=3, k=2, d=3, dtype=F64):
    return tsw.sample_concurrent_lines(d, n_trees=T, n_lines=k, seed=0, dtype=dtype)


def chain(T=3, k=2, d=3, dtype=F64):
    return tsw.sample_chain_lines(d, n_trees=T, n_lines=k, seed=0, dtype=dtype)


@pytest.mark.parametrize(
    ("name", "bad"), [("tsw_sl", {"roots": None}), ("db_tsw", torch.zeros(3, 2, 3, dtype=F64))]
)
def test_trees_of_wrong_type(name, bad):
    # a TypeError naming the accepted classes, not an AttributeError from reading
    # bad.n_trees before the type is checked
    X, Y = data()
    expected = "ChainLines or ConcurrentLines" if name == "tsw_sl" else "ConcurrentLines"
    with pytest.raises(TypeError, match=lit(f"trees must be {expected}; got {type(bad).__name__}")):
        getattr(tsw, name)(X, Y, trees=bad)


@pytest.mark.parametrize("make", [concurrent, chain])
def test_trees_of_wrong_dimension(make):
    X, Y = data(d=3)
    msg = lit("trees must live in the dimension of the data, d=3; got trees of dimension 2")
    with pytest.raises(ValueError, match=msg):
        tsw.tsw_sl(X, Y, trees=make(d=2))
    if make is concurrent:
        with pytest.raises(ValueError, match=msg):
            tsw.db_tsw(X, Y, trees=make(d=2))


@pytest.mark.parametrize("make", [concurrent, chain])
def test_trees_of_wrong_dtype(make):
    X, Y = data()
    with pytest.raises(ValueError, match=lit("trees must have the dtype and device of X_s")):
        tsw.tsw_sl(X, Y, trees=make(dtype=torch.float32))


def test_batched_trees_need_matching_batched_measures():
    X, Y = data()
    trees = tsw.sample_concurrent_lines(
        3, n_trees=3, n_lines=2, center=torch.zeros(2, 3, dtype=F64), seed=0
    )
    assert trees.batch_size == 2
    with pytest.raises(ValueError, match=lit("batched trees (batch size 2) need batched measures")):
        tsw.db_tsw(X, Y, trees=trees)
    Xb, Yb = data(batch=4)
    with pytest.raises(
        ValueError,
        match=lit("batched trees (batch size 2) need batched measures of the same batch size"),
    ):
        tsw.db_tsw(Xb, Yb, trees=trees)


@pytest.mark.parametrize(("count", "value"), [("n_trees", 5), ("n_lines", 4)])
def test_counts_disagreeing_with_explicit_trees(count, value):
    X, Y = data()
    actual = 3 if count == "n_trees" else 2
    msg = lit(f"{count}={value} disagrees with the explicit trees, which have {count}={actual}")
    with pytest.raises(ValueError, match=msg):
        tsw.db_tsw(X, Y, trees=concurrent(), **{count: value})
    with pytest.raises(ValueError, match=msg):
        tsw.tsw_sl(X, Y, trees=chain(), **{count: value})
    # equal counts are accepted
    assert torch.isfinite(tsw.db_tsw(X, Y, trees=concurrent(), **{count: actual}))


def test_center_shape():
    X, Y = data()
    with pytest.raises(
        ValueError, match=lit("center must have shape (d,) = (3,); got center.shape=(2,)")
    ):
        tsw.db_tsw(X, Y, center=torch.zeros(2, dtype=F64))
    Xb, Yb = data(batch=2)
    with pytest.raises(
        ValueError, match=lit("center must have shape (d,) = (3,) or (B, d) = (2, 3)")
    ):
        tsw.tsw_sl(Xb, Yb, center=torch.zeros(3, 3, dtype=F64))
    with pytest.raises(ValueError, match=lit("center must have shape (d,) or (B, d) with d=3")):
        tsw.sample_concurrent_lines(3, n_trees=2, n_lines=2, center=torch.zeros(2, dtype=F64))
    with pytest.raises(TypeError, match=lit("center must be a torch.Tensor; got list")):
        tsw.db_tsw(X, Y, center=[0.0, 0.0, 0.0])


# --------------------------------------------------------------------------- randomness


def test_seed_of_wrong_type(seeded_fn):
    X, Y = data()
    with pytest.raises(
        TypeError,
        match=lit("seed must be an int, a numpy RandomState or Generator, or None; got float"),
    ):
        seeded_fn(X, Y, seed=1.0)


@pytest.mark.parametrize("seed", ["0", True, torch.tensor(0)])
def test_seed_of_wrong_type_values(seed):
    X, Y = data()
    with pytest.raises(
        TypeError, match=lit("seed must be an int, a numpy RandomState or Generator, or None; got")
    ):
        DISTANCES[ONE](X, Y, seed=seed)


@pytest.mark.parametrize(
    "cls",
    [
        tsw.nn.TSWSLLoss,
        tsw.nn.DbTSWLoss,
        partial(tsw.nn.CircularTSWLoss, radius=0.0),
        tsw.nn.SpatialTSWLoss,
        tsw.nn.SWLoss,
        tsw.nn.MaxSWLoss,
    ],
)
def test_module_seed_of_wrong_type(cls):
    with pytest.raises(
        TypeError,
        match=lit("seed must be an int, a numpy RandomState or Generator, or None; got float"),
    ):
        cls(seed=1.5)


def test_seed_and_generator(seeded_fn):
    X, Y = data()
    with pytest.raises(ValueError, match=lit("pass at most one of seed and generator; got both")):
        seeded_fn(X, Y, seed=0, generator=torch.Generator().manual_seed(0))


def test_generator_of_wrong_type(seeded_fn):
    X, Y = data()
    with pytest.raises(
        TypeError, match=lit("generator must be a torch.Generator or None; got int")
    ):
        seeded_fn(X, Y, generator=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_generator_with_cpu_data():
    X, Y = data()
    with pytest.raises(
        ValueError, match=lit("generator must be on the CPU or on the data's device")
    ):
        tsw.db_tsw(X, Y, generator=torch.Generator(device="cuda"))


# --------------------------------------------------------------------------- modules, projections


@pytest.mark.parametrize(
    "cls",
    [
        tsw.nn.TSWSLLoss,
        tsw.nn.DbTSWLoss,
        partial(tsw.nn.CircularTSWLoss, radius=0.0),
        tsw.nn.SpatialTSWLoss,
        tsw.nn.SWLoss,
        tsw.nn.MaxSWLoss,
    ],
)
def test_bad_reduction(cls):
    with pytest.raises(
        ValueError, match=lit("reduction must be one of 'mean', 'sum', 'none'; got 'avg'")
    ):
        cls(reduction="avg")


@pytest.mark.parametrize("reduction", ["MEAN", None, "batchmean"])
def test_bad_reduction_values(reduction):
    with pytest.raises(
        ValueError, match=lit(f"reduction must be one of 'mean', 'sum', 'none'; got {reduction!r}")
    ):
        tsw.nn.DbTSWLoss(reduction=reduction)


def test_projections_of_wrong_shape():
    X, Y = data(d=3)
    with pytest.raises(
        ValueError,
        match=lit("projections must have shape (d, L) with d=3; got projections.shape=(2, 4)"),
    ):
        tsw.sw(X, Y, projections=torch.zeros(2, 4, dtype=F64))
    with pytest.raises(
        ValueError,
        match=lit("projections must have shape (d, L) with d=3; got projections.shape=(3,)"),
    ):
        tsw.sw(X, Y, projections=torch.zeros(3, dtype=F64))
    with pytest.raises(ValueError, match=lit("projections.shape=(3, 0)")):
        tsw.sw(X, Y, projections=torch.zeros(3, 0, dtype=F64))
    # (B, d, L) only for batched measures, with the batch size of the data
    with pytest.raises(
        ValueError,
        match=lit("projections must have shape (d, L) with d=3; got projections.shape=(2, 3, 4)"),
    ):
        tsw.sw(X, Y, projections=torch.zeros(2, 3, 4, dtype=F64))
    Xb, Yb = data(batch=2)
    with pytest.raises(
        ValueError, match=lit("(d, L) with d=3 or (B, d, L); got projections.shape=(5, 3, 4)")
    ):
        tsw.sw(Xb, Yb, projections=torch.zeros(5, 3, 4, dtype=F64))


def test_projections_dtype_and_type():
    X, Y = data()
    with pytest.raises(ValueError, match=lit("projections must have the dtype and device of X_s")):
        tsw.sw(X, Y, projections=torch.eye(3)[:, :2])
    with pytest.raises(TypeError, match=lit("projections must be a torch.Tensor; got list")):
        tsw.sw(X, Y, projections=[[1.0], [0.0], [0.0]])


# --------------------------------------------------------------------------- validate=False


def test_validate_false_skips_value_checks(fn):
    X, Y = data()
    neg = torch.tensor([0.5, -0.1, 0.2, 0.2, 0.2], dtype=F64)
    with pytest.raises(ValueError, match="non-negative"):
        fn(X, Y, neg, uniform(4))
    assert fn(X, Y, neg, uniform(4), validate=False).shape == ()
    with pytest.raises(ValueError, match="equal total mass"):
        fn(X, Y, uniform(5), 2 * uniform(4))
    assert fn(X, Y, uniform(5), 2 * uniform(4), validate=False).shape == ()
    Xn = X.clone()
    Xn[0, 0] = math.nan
    assert fn(Xn, Y, validate=False).shape == ()  # no raise (the value is not checked here)
    # shape checks stay on
    with pytest.raises(ValueError, match="same feature dimension"):
        fn(X, Y[:, :2], validate=False)
    with pytest.raises(TypeError, match=lit("must be a torch.Tensor")):
        fn(X.tolist(), Y, validate=False)


def test_validate_false_skips_value_checks_in_modules():
    X, Y = data()
    neg = torch.tensor([0.5, -0.1, 0.2, 0.2, 0.2], dtype=F64)
    for cls in (
        tsw.nn.TSWSLLoss,
        tsw.nn.DbTSWLoss,
        partial(tsw.nn.CircularTSWLoss, radius=0.5),
        tsw.nn.SpatialTSWLoss,
        tsw.nn.SWLoss,
        tsw.nn.MaxSWLoss,
    ):
        with pytest.raises(ValueError, match="a must be non-negative"):
            cls(seed=0)(X, Y, neg, uniform(4))
        assert cls(seed=0, validate=False)(X, Y, neg, uniform(4)).shape == ()


def test_validate_false_skips_tree_and_alpha_checks():
    dirs = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]]], dtype=F64)
    ConcurrentLines(torch.zeros(1, 3, dtype=F64), dirs, validate=False)
    off = torch.tensor([[[0.0, 0.0, 0.0], [2.0, 0.1, 0.0]]], dtype=F64)
    ChainLines(off, torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], dtype=F64), validate=False)
    # shape checks stay on
    with pytest.raises(ValueError, match="matching directions"):
        ConcurrentLines(torch.zeros(2, 3, dtype=F64), dirs, validate=False)
    X, Y = data()
    alpha = torch.tensor([0.4, 0.4], dtype=F64)
    assert tsw.tsw_sl(X, Y, n_lines=2, alpha=alpha, validate=False).shape == ()
    with pytest.raises(ValueError, match="alpha must have shape"):
        tsw.tsw_sl(X, Y, n_lines=2, alpha=alpha[:1], validate=False)


# --------------------------------------------------------------------------- the sphere


def on_sphere(*shape, dtype=F64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(*shape, generator=g, dtype=F64), dim=-1).to(
        dtype
    )


SPHERE = {
    "stsw": lambda X, Y=None, **kw: tsw.stsw(
        X, on_sphere(4, X.shape[-1], dtype=X.dtype) if Y is None else Y, **{"n_trees": 3, **kw}
    ),
    "ssw": lambda X, Y=None, **kw: tsw.ssw(
        X,
        on_sphere(4, X.shape[-1], dtype=X.dtype) if Y is None else Y,
        **{"n_projections": 4, **kw},
    ),
    "stsw_unif": lambda X, Y=None, **kw: tsw.stsw_unif(X, **{"n_trees": 3, **kw}),
    "ssw_unif": lambda X, Y=None, **kw: tsw.ssw_unif(X, **{"n_projections": 4, **kw}),
    "STSWUnifLoss": lambda X, Y=None, **kw: tsw.nn.STSWUnifLoss(n_trees=3, **kw)(X),
    "s3w": lambda X, Y=None, **kw: tsw.s3w(
        X,
        on_sphere(4, X.shape[-1], dtype=X.dtype) if Y is None else Y,
        **{"n_projections": 4, "n_rotations": 2, **kw},
    ),
    "s3w_unif": lambda X, Y=None, **kw: tsw.s3w_unif(X, **{"n_projections": 4, **kw}),
}


@pytest.mark.parametrize("name", list(SPHERE))
def test_points_off_the_sphere(name):
    f = SPHERE[name]
    X = on_sphere(5, 3)
    X[2] *= 1.01
    with pytest.raises(
        ValueError,
        match=lit(
            "X_s must lie on the unit sphere (rows of norm 1 up to 1.0e-06 in torch.float64); "
            "got a row of norm 1.01. Pass renormalize=True to project the rows onto the sphere"
        ),
    ):
        f(X)
    assert f(X, renormalize=True).shape == ()
    assert f(X, validate=False).shape == ()  # value checks off
    if name in ("stsw", "ssw", "s3w"):
        with pytest.raises(ValueError, match=lit("X_t must lie on the unit sphere")):
            f(on_sphere(5, 3), 2 * on_sphere(4, 3))


@pytest.mark.parametrize("name", list(SPHERE))
def test_sphere_tolerance_depends_on_dtype(name):
    """float32 accepts | |x| - 1 | up to 1.2e-4, float64 up to 1e-6."""
    f = SPHERE[name]
    X = on_sphere(5, 3)
    X[0] *= 1 + 5e-5
    assert f(X.float()).shape == ()
    with pytest.raises(ValueError, match=lit("rows of norm 1 up to 1.0e-06 in torch.float64")):
        f(X)
    X[0] *= 1 + 5e-4
    with pytest.raises(ValueError, match=lit("rows of norm 1 up to 1.2e-04 in torch.float32")):
        f(X.float())
    assert tsw.core._validation.sphere_tol(torch.float32) == pytest.approx(1.19e-4, rel=1e-2)


@pytest.mark.parametrize("name", list(SPHERE))
def test_sphere_needs_two_coordinates_and_nonzero_rows(name):
    f = SPHERE[name]
    with pytest.raises(
        ValueError, match=lit("X_s must have d+1 >= 2 coordinates to describe points of the sphere")
    ):
        f(torch.ones(4, 1, dtype=F64), torch.ones(3, 1, dtype=F64))
    X = on_sphere(5, 3)
    X[1] = 0
    with pytest.raises(ValueError, match=lit("X_s has a zero row, which cannot be renormalised")):
        f(X, renormalize=True)


@pytest.mark.parametrize(
    "cls",
    [
        tsw.nn.STSWLoss,
        tsw.nn.STSWUnifLoss,
        tsw.nn.SSWLoss,
        tsw.nn.SSWUnifLoss,
        tsw.nn.S3WLoss,
        tsw.nn.S3WUnifLoss,
        partial(tsw.nn.ARIS3WLoss, dim=3),
    ],
)
def test_spherical_module_options(cls):
    with pytest.raises(
        TypeError,
        match=lit("seed must be an int, a numpy RandomState or Generator, or None; got float"),
    ):
        cls(seed=1.5)
    with pytest.raises(ValueError, match=lit("reduction must be one of 'mean', 'sum', 'none'")):
        cls(reduction="max")


# --------------------------------------------------------------------------- edge cases
# Inputs that adversarial tests found mishandled: a clear error naming the argument, or a
# finite value checked against an independent computation.


def sphere_data(N=12, M=9, dtype=F64):
    X, Y = data(N, M, 3, dtype=dtype)
    return torch.nn.functional.normalize(X, dim=-1), torch.nn.functional.normalize(Y, dim=-1)


@pytest.mark.parametrize("kind", ["nan", "inf", "zero", "scaled"])
@pytest.mark.parametrize("name", ["sw", "s3w", "partial_sw", "unbalanced_sw"])
def test_explicit_projections_are_value_checked(name, kind):
    X, Y = data(6, 6, 3)
    d = 2 if name == "s3w" else 3
    if name == "s3w":
        X, Y = sphere_data(6, 6)
    P = tsw.sample_projections(d, 5, seed=0, dtype=F64)
    if kind == "nan":
        P[0, 1] = math.nan
    elif kind == "inf":
        P[1, 3] = -math.inf
    elif kind == "zero":
        P[:, 2] = 0
    else:
        P = 1.5 * P
    f = getattr(tsw, name)
    message = (
        "projections contains NaN or Inf"
        if kind in ("nan", "inf")
        else ("projections must have unit-norm columns (directions)")
    )
    with pytest.raises(ValueError, match=lit(message)):
        f(X, Y, projections=P)
    f(X, Y, projections=P, validate=False)  # skipped without validation


def test_projections_normalised_in_float32_pass_in_float64():
    X, Y = data()
    P = tsw.sample_projections(3, 7, seed=1, dtype=torch.float32).double()
    want = tsw.sw(X, Y, projections=P / torch.linalg.vector_norm(P, dim=0), p=2)
    torch.testing.assert_close(tsw.sw(X, Y, projections=P, p=2), want, rtol=1e-6, atol=0)


EMPTY_BATCH = {
    **{n: f for n, f in ALL.items() if not n[0].isupper()},
    "ssw_unif": lambda X, Y, **kw: tsw.ssw_unif(X, n_projections=3, **kw),
    "stsw_unif": lambda X, Y, **kw: tsw.stsw_unif(X, n_trees=3, renormalize=True, **kw),
    "s3w_unif": lambda X, Y, **kw: tsw.s3w_unif(X, n_samples=20, renormalize=True, **kw),
}


@pytest.mark.parametrize("name", sorted(EMPTY_BATCH))
def test_empty_batch_gives_an_empty_value(name):
    """B = 0: every distance gives a value of shape (0,)."""
    X = torch.nn.functional.normalize(torch.randn(0, 5, 3, dtype=F64), dim=-1)
    kw = {"renormalize": True} if name in ("ssw_unif",) else {}
    value = EMPTY_BATCH[name](X, X, seed=0, **kw)
    assert value.shape == (0,)


@pytest.mark.parametrize("name", ["db_tsw", "tsw_sl", "circular_tsw", "spatial_tsw", "partial_tsw"])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nonfinite_center_raises(name, bad):
    X, Y = data()
    center = torch.zeros(3, dtype=F64)
    center[1] = bad
    kw = {"radius": 0.5} if name == "circular_tsw" else {}
    with pytest.raises(ValueError, match=lit("center contains NaN or Inf")):
        getattr(tsw, name)(X, Y, n_trees=3, center=center, seed=0, **kw)


@pytest.mark.parametrize("sampler", [tsw.sample_concurrent_lines, tsw.sample_chain_lines])
def test_samplers_check_center_values_and_dtypes(sampler):
    with pytest.raises(ValueError, match=lit("center contains NaN or Inf")):
        sampler(2, n_trees=2, n_lines=2, center=torch.tensor([0.0, math.nan]))
    sampler(2, n_trees=2, n_lines=2, center=torch.tensor([0.0, math.nan]), validate=False)


SAMPLERS = {
    "sample_concurrent_lines": lambda **kw: tsw.sample_concurrent_lines(
        3, n_trees=2, n_lines=2, **kw
    ),
    "sample_chain_lines": lambda **kw: tsw.sample_chain_lines(3, n_trees=2, n_lines=2, **kw),
    "sample_spherical_trees": lambda **kw: tsw.sample_spherical_trees(
        3, n_trees=2, n_lines=2, **kw
    ),
    "sample_projections": lambda **kw: tsw.sample_projections(3, 4, **kw),
    "sample_sphere_projections": lambda **kw: tsw.sample_sphere_projections(3, 4, **kw),
    "sample_rotations": lambda **kw: tsw.sample_rotations(3, 4, **kw),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_dtype_and_device_arguments(name):
    f = SAMPLERS[name]
    for bad in (torch.int64, torch.float16, torch.bfloat16):
        with pytest.raises(
            TypeError, match=lit(f"dtype must be torch.float32 or torch.float64; got {bad}")
        ):
            f(dtype=bad, seed=0)
    with pytest.raises(
        TypeError, match=lit("dtype must be torch.float32, torch.float64 or None; got str")
    ):
        f(dtype="float32", seed=0)
    with pytest.raises(ValueError, match=lit("device must name a torch device; got 'gpu0'")):
        f(device="gpu0", seed=0)
    with pytest.raises(
        TypeError, match=lit("device must be a torch.device, a device string or None")
    ):
        f(device=3.5, seed=0)
    out = f(dtype=torch.float64, device="cpu", seed=0)
    out = out.directions if hasattr(out, "directions") else out
    assert out.dtype == F64


FLAGS = [
    ("db_tsw", "orthogonal"),
    ("sw", "orthogonal"),
    ("partial_sw", "orthogonal"),
    ("unbalanced_sw", "orthogonal"),
    ("db_tsw", "validate"),
    ("sw", "validate"),
    ("ssw", "renormalize"),
    ("stsw", "renormalize"),
    ("s3w", "renormalize"),
    ("s3w", "compat"),
    ("db_tsw", "power"),
]


@pytest.mark.parametrize(("name", "flag"), FLAGS)
def test_flags_must_be_bools(name, flag):
    """orthogonal="False" is truthy: it raises instead of meaning True."""
    X, Y = sphere_data() if name in ("ssw", "stsw", "s3w") else data()
    for bad in ("False", 0, None):
        with pytest.raises(TypeError, match=lit(f"{flag} must be True or False; got")):
            getattr(tsw, name)(X, Y, seed=0, **{flag: bad})
    np = pytest.importorskip("numpy")
    getattr(tsw, name)(X, Y, seed=0, **{flag: np.bool_(flag == "validate")})


def test_sampler_flags_must_be_bools():
    with pytest.raises(TypeError, match=lit("orthogonal must be True or False; got str")):
        tsw.sample_concurrent_lines(3, n_trees=2, n_lines=2, orthogonal="False")
    with pytest.raises(TypeError, match=lit("orthogonal must be True or False; got int")):
        tsw.sample_projections(3, 4, orthogonal=1)
    with pytest.raises(TypeError, match=lit("validate must be True or False; got str")):
        ConcurrentLines(torch.zeros(1, 2), torch.eye(2)[None], validate="yes")


@pytest.mark.parametrize("scale", [1e30, 1e-30, 1e38])
def test_renormalize_rows_of_any_finite_magnitude(scale):
    X, Y = data(8, 6, 3)
    unit_X, unit_Y = (torch.nn.functional.normalize(t, dim=-1) for t in (X, Y))
    want = tsw.stsw(unit_X.float(), unit_Y.float(), n_trees=5, seed=0)
    got = tsw.stsw((scale * X).float(), (scale * Y).float(), n_trees=5, seed=0, renormalize=True)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(("scale", "way"), [(1e30, "overflow"), (1e-30, "underflow")])
@pytest.mark.parametrize(
    "name", ["db_tsw", "tsw_sl", "sw", "max_sw", "partial_tsw", "unbalanced_sw"]
)
def test_magnitudes_out_of_the_float32_range_raise(name, scale, way):
    """At 1e30 squared distances overflow float32 (NaN or Inf); at 1e-30 they underflow to 0."""
    X, Y = data(8, 6, 3)
    X32, Y32 = (scale * X).float(), (scale * Y).float()
    with pytest.raises(ValueError, match=r"X_[st] has entries of magnitude up to") as info:
        getattr(tsw, name)(X32, Y32, seed=0)
    assert way in str(info.value)
    assert "torch.float64" in str(info.value)
    # the same data in float64 give a finite value
    kw = {"root_std": 0.1 * scale} if name in ("db_tsw", "tsw_sl", "partial_tsw") else {}
    assert math.isfinite(float(getattr(tsw, name)(scale * X, scale * Y, seed=0, **kw)))


def test_magnitudes_inside_the_range_pass():
    """Data at 1e-15 and 1e15 in float32 (inside its range): no error, and SW scales
    with the data (it is 1-homogeneous), to float32 accuracy."""
    X, Y = data(8, 6, 3)
    base = float(tsw.sw(X, Y, seed=0))
    for scale in (1e-15, 1e15):
        value = tsw.sw((scale * X).float(), (scale * Y).float(), seed=0)
        assert value.dtype == torch.float32
        assert abs(float(value) / scale - base) <= 1e-5 * base


@pytest.mark.parametrize("name", ["db_tsw", "tsw_sl"])
def test_roots_far_beyond_float32_data_warn(name):
    """root_std=0.1 around float32 data at 1e-8 left no correct digit: a warning names it."""
    X, Y = data(40, 30, 5)
    s = 1e-8
    with pytest.warns(UserWarning, match="Pass root_std"):
        bad = getattr(tsw, name)((s * X).float(), (s * Y).float(), n_trees=20, seed=0)
    exact = getattr(tsw, name)(s * X, s * Y, n_trees=20, seed=0)
    assert abs(float(bad) - float(exact)) > 0.1 * float(exact)  # the loss is real
    # the remedy: root_std (and source_range) in the data's units
    kw = {"root_std": 0.1 * s} | ({"source_range": s} if name == "tsw_sl" else {})
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        good = getattr(tsw, name)((s * X).float(), (s * Y).float(), n_trees=20, seed=0, **kw)
        at_one = getattr(tsw, name)(X.float(), Y.float(), n_trees=20, seed=0)
    want = getattr(tsw, name)(s * X, s * Y, n_trees=20, seed=0, **kw)
    torch.testing.assert_close(good.double(), want, rtol=1e-5, atol=0)
    assert float(at_one) > 0


WASSERSTEIN_1D = [
    (
        "wasserstein_1d",
        lambda p=1.0, **kw: tsw.wasserstein_1d(
            kw.get("u", torch.tensor([0.0, 1.0])), kw.get("v", torch.tensor([2.0])), p=p
        ),
    ),
    (
        "line_system_cost",
        lambda p=1.0, **kw: tsw.line_system_cost(
            kw.get("u", torch.tensor([[1.0], [2.0]])), torch.tensor([[1.0], [-1.0]]), p=p
        ),
    ),
]


@pytest.mark.parametrize(("name", "f"), WASSERSTEIN_1D)
def test_closed_forms_check_p_and_types(name, f):
    for p in (-1, 0.5, math.nan, math.inf):
        with pytest.raises(ValueError, match=lit("p must be a finite real number >= 1")):
            f(p=p)
    with pytest.raises(
        TypeError, match=lit("must have dtype torch.float32 or torch.float64; got torch.int64")
    ):
        f(u=torch.tensor([[0, 1]]) if name == "line_system_cost" else torch.tensor([0, 1]))


def test_wasserstein_1d_checks():
    u, v = torch.tensor([0.0, 1.0]), torch.tensor([2.0, 3.0])
    assert float(tsw.wasserstein_1d(u, v, p=2)) == 4.0
    with pytest.raises(TypeError, match=lit("v_values must have the same dtype as u_values")):
        tsw.wasserstein_1d(u, v.double())
    with pytest.raises(ValueError, match=lit("v_values must have shape (..., n) with n >= 1")):
        tsw.wasserstein_1d(u, torch.zeros(0))
    with pytest.raises(ValueError, match=lit("u_weights must broadcast to u_values.shape=(2,)")):
        tsw.wasserstein_1d(u, v, torch.ones(3) / 3)
    with pytest.raises(ValueError, match=lit("leading (batch) dimensions")):
        tsw.wasserstein_1d(torch.zeros(3, 2), torch.zeros(4, 2))
    with pytest.raises(ValueError, match=lit("u_values contains NaN or Inf")):
        tsw.wasserstein_1d(torch.tensor([0.0, math.inf]), v)
    with pytest.raises(ValueError, match=lit("u_weights must be non-negative")):
        tsw.wasserstein_1d(u, v, torch.tensor([1.5, -0.5]))
    with pytest.raises(ValueError, match=lit("u_weights and v_weights must have equal total mass")):
        tsw.wasserstein_1d(u, v, torch.tensor([0.5, 0.6]))
    assert math.isfinite(float(tsw.wasserstein_1d(u, v, torch.tensor([0.5, 0.6]), validate=False)))


def test_line_system_cost_checks():
    c, m = torch.tensor([[1.0], [2.0]]), torch.tensor([[1.0], [-1.0]])
    assert float(tsw.line_system_cost(c, m)) == 3.0
    with pytest.raises(ValueError, match=lit("coords must have shape (..., k, n) or (..., 1, n)")):
        tsw.line_system_cost(torch.zeros(3, 1), m)
    with pytest.raises(ValueError, match=lit("masses must have shape (..., k, n) with k, n >= 1")):
        tsw.line_system_cost(c, torch.zeros(2, 0))
    with pytest.raises(ValueError, match=lit("attachments must have shape (..., k) with k=2")):
        tsw.line_system_cost(c, m, torch.zeros(3))
    with pytest.raises(ValueError, match=lit("masses contains NaN or Inf")):
        tsw.line_system_cost(c, torch.tensor([[math.nan], [-1.0]]))
    with pytest.raises(TypeError, match=lit("masses must have the same dtype as coords")):
        tsw.line_system_cost(c, m.double())


def test_tree_wasserstein_shape_mismatches_name_the_argument():
    mu = torch.tensor([[0.0, 0.5, 0.5], [0.0, 1.0, 0.0]], dtype=F64)
    nu = mu.flip(0)
    with pytest.raises(
        ValueError, match=lit("edge_lengths must have shape (V,) or (..., V) with V=3")
    ):
        tsw.tree_wasserstein([-1, 0, 0], torch.ones(4, 3, dtype=F64), mu, nu)
    with pytest.raises(ValueError, match=lit("edge_lengths must have shape")):
        tsw.tree_wasserstein([-1, 0, 0], torch.ones(2, dtype=F64), mu, nu)
    with pytest.raises(ValueError, match=lit("mass_s and mass_t must have the same shape")):
        tsw.tree_wasserstein([-1, 0, 0], torch.ones(3, dtype=F64), mu, nu[0])
    with pytest.raises(TypeError, match=lit("parents must hold integers")):
        tsw.tree_wasserstein([-1, 0.5, 0], torch.ones(3, dtype=F64), mu, nu)


def test_explicit_trees_are_checked_at_the_call():
    """A container built with validate=False, or cast by .to(), is checked by the distance."""
    X, Y = data()
    trees = tsw.sample_concurrent_lines(3, n_trees=3, n_lines=2, seed=0, dtype=F64)
    bad = trees.directions.clone()
    bad[1, 0, 2] = math.nan
    unchecked = ConcurrentLines(trees.roots, bad, validate=False)
    with pytest.raises(ValueError, match=lit("trees.directions contains NaN or Inf")):
        tsw.db_tsw(X, Y, trees=unchecked)
    assert math.isnan(float(tsw.db_tsw(X, Y, trees=unchecked, validate=False)))
    skew = ConcurrentLines(trees.roots, 1.01 * trees.directions, validate=False)
    with pytest.raises(ValueError, match=lit("trees.directions must have unit-norm rows")):
        tsw.db_tsw(X, Y, trees=skew)
    # sampled in float32 and cast to float64: unit to float32 accuracy, accepted
    cast = tsw.sample_concurrent_lines(3, n_trees=3, n_lines=2, seed=0).to(F64)
    assert math.isfinite(float(tsw.db_tsw(X, Y, trees=cast)))
