"""``torch.jit.trace`` on every public function and loss module: right, or refused by name.

A trace records what a call did with its example inputs. The library's sorts (a
permutation of the data, taken in NumPy on the CPU) and its random draws would become
constants of the graph, so a traced distance would return another value than the eager
call on new inputs. Every public callable of :mod:`tsw` and every loss module of
:mod:`tsw.nn` is traced here on one input and called on another: either tracing raises a
RuntimeError that names the function and points to ``torch.compile``, or the traced
function equals the eager call on the new input (the independent reference).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import _curved
import pytest
import torch

import tsw
import tsw.nn

F64 = torch.float64
N, M, D = 8, 6, 3


def _points(seed: int, n: int, *, sphere: bool = False, dim: int = D) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g, dtype=F64) + seed
    return torch.nn.functional.normalize(x, dim=-1) if sphere else x


def _pair(sphere: bool = False) -> Callable[[int], tuple[torch.Tensor, ...]]:
    def make(seed: int) -> tuple[torch.Tensor, ...]:
        return _points(seed, N, sphere=sphere), _points(seed + 10, M, sphere=sphere)

    return make


def _one(sphere: bool = False, dim: int = D) -> Callable[[int], tuple[torch.Tensor, ...]]:
    return lambda seed: (_points(seed, N, sphere=sphere, dim=dim),)


def _lifted(lift, make):
    """Inputs of ``make`` carried onto a manifold by ``lift`` (tests/_curved.py)."""
    return lambda seed: tuple(lift(t) for t in make(seed))


def _plan(seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    plan = torch.rand(N, M, generator=g, dtype=F64)
    return plan / plan.sum(), _points(seed + 10, M)


def _tree(seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.rand(5, generator=g, dtype=F64) + 0.1
    ms, mt = torch.rand(5, generator=g, dtype=F64), torch.rand(5, generator=g, dtype=F64)
    return lengths, ms / ms.sum(), mt / mt.sum()


def _hists(seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    h = torch.rand(3, N + M, generator=g, dtype=F64)
    return (h / h.sum(-1, keepdim=True),)


#: trees built once on a support of N + M points, for the functions of histograms on it
SUPPORT_TREES = tsw.sample_quadtrees(torch.cat(_pair()(0)), 2, seed=0)
PARENTS = [-1, 0, 0, 1, 1]
PROJECTIONS = tsw.sample_projections(D, 5, seed=0, dtype=F64)
SPHERE = {"ssw", "s3w", "stsw", "spatial_stsw"}
UNIF = {"ssw_unif", "s3w_unif", "stsw_unif"}
DISTANCES = {
    "circular_tsw",
    "db_tsw",
    "eb_sw",
    "lcv_sw",
    "max_sw",
    "max_tsw_sl",
    "partial_sw",
    "partial_tsw",
    "rp_sw",
    "spatial_tsw",
    "sw",
    "ts_sobolev",
    "tsw_sl",
    "unbalanced_sw",
}

#: name -> (inputs from a seed, the call on those inputs)
CASES: dict[str, tuple[Callable[[int], tuple[torch.Tensor, ...]], Callable[..., object]]] = {
    **{n: (_pair(), lambda X, Y, n=n: getattr(tsw, n)(X, Y, seed=0)) for n in DISTANCES},
    **{n: (_pair(True), lambda X, Y, n=n: getattr(tsw, n)(X, Y, seed=0)) for n in SPHERE},
    **{n: (_one(True), lambda X, n=n: getattr(tsw, n)(X, seed=0)) for n in UNIF},
    "sw_projections": (_pair(), lambda X, Y: tsw.sw(X, Y, projections=PROJECTIONS)),
    "barycentric_map": (_plan, lambda P, Y: tsw.barycentric_map(P, Y)),
    "expected_sliced_plan": (
        _pair(),
        lambda X, Y: tsw.expected_sliced_plan(X, Y, n_projections=4, seed=0),
    ),
    "expected_tree_sliced_plan": (
        _pair(),
        lambda X, Y: tsw.expected_tree_sliced_plan(X, Y, seed=0),
    ),
    "min_sliced_transport_plan": (
        _pair(),
        lambda X, Y: tsw.min_sliced_transport_plan(X, Y, n_projections=4, seed=0)[0],
    ),
    "sliced_plans": (_pair(), lambda X, Y: tsw.sliced_plans(X, Y, n_projections=4, seed=0)[0]),
    "swgg": (_pair(), lambda X, Y: tsw.swgg(X, Y, seed=0, n_iter=3)[0]),
    "line_system_cost": (
        lambda s: (_points(s, 2), _points(s + 10, 2)),  # (k, n) = (2, 3)
        lambda c, m: tsw.line_system_cost(c, m),
    ),
    "tree_wasserstein": (_tree, lambda w, ms, mt: tsw.tree_wasserstein(PARENTS, w, ms, mt)),
    "tree_plan": (_tree, lambda w, ms, mt: tsw.tree_plan(PARENTS, w, ms, mt, dense=True)[0]),
    "wasserstein_1d": (
        lambda s: (_points(s, N)[:, 0], _points(s + 10, M)[:, 0]),
        lambda u, v: tsw.wasserstein_1d(u, v),
    ),
    "s3w_map": (_one(True), lambda X: tsw.s3w_map(X)),
    "sample_chain_lines": (
        lambda s: (_points(s, 1)[0],),
        lambda c: tsw.sample_chain_lines(D, n_trees=2, n_lines=2, center=c, seed=0).sources,
    ),
    "sample_concurrent_lines": (
        lambda s: (_points(s, 1)[0],),
        lambda c: tsw.sample_concurrent_lines(D, n_trees=2, n_lines=2, center=c, seed=0).roots,
    ),
    "sample_projections": (_one(), lambda X: X @ tsw.sample_projections(D, 4, dtype=F64).T),
    "sample_rotations": (_one(), lambda X: X @ tsw.sample_rotations(D, 1, dtype=F64)[0]),
    "sample_sphere_projections": (
        _one(),
        lambda X: X @ tsw.sample_sphere_projections(D - 1, 4, dtype=F64).T,
    ),
    "sample_spherical_trees": (
        _one(),
        lambda X: X @ tsw.sample_spherical_trees(D - 1, n_trees=2, n_lines=2, dtype=F64).roots.T,
    ),
    "sample_quadtrees": (_one(), lambda X: tsw.sample_quadtrees(X, 2, seed=0).support),
    "sample_cluster_trees": (_one(), lambda X: tsw.sample_cluster_trees(X, 2, seed=0).support),
    "support_tsw": (_pair(), lambda X, Y: tsw.support_tsw(X, Y, seed=0)),
    "pairwise_tsw": (_hists, lambda H: tsw.pairwise_tsw(H, trees=SUPPORT_TREES)),
    "tree_embedding": (_hists, lambda H: tsw.tree_embedding(H, SUPPORT_TREES)),
    "tree_barycenter": (_hists, lambda H: tsw.tree_barycenter(H, SUPPORT_TREES, numItermax=5)),
    "pairwise_flowtree": (_hists, lambda H: tsw.pairwise_flowtree(H, trees=SUPPORT_TREES)),
    "tree_sliced_kernel": (_hists, lambda H: tsw.tree_sliced_kernel(H, trees=SUPPORT_TREES)),
    "flowtree": (_pair(), lambda X, Y: tsw.flowtree(X, Y, seed=0, dense=True)[0]),
    "fit_edge_lengths": (
        lambda s: (torch.cat(_pair()(s)),),
        lambda S: tsw.fit_edge_lengths(SUPPORT_TREES, support=S, n_pairs=50, seed=0).support,
    ),
    "free_support_barycenter": (
        _pair(),
        lambda X, Y: tsw.free_support_barycenter([X, Y], n_points=5, numItermax=3, seed=0),
    ),
    "trees_needed": (lambda s: (_points(s, N)[:, 0].abs() + 1,), lambda t: tsw.trees_needed(t)),
    "mc_tsw": (_pair(), lambda X, Y: tsw.mc_tsw(X, Y, components=[("euclidean", D)], seed=0)),
    **{
        n: (_lifted(_curved.hyperbolic, _pair()), lambda X, Y, n=n: getattr(tsw, n)(X, Y, seed=0))
        for n in ("ghsw", "hhsw")
    },
    **{
        n: (_lifted(_curved.spd, _pair()), lambda X, Y, n=n: getattr(tsw, n)(X, Y, seed=0))
        for n in ("spdsw", "hspdsw")
    },
    "sample_spd_projections": (
        _one(),
        lambda X: X @ tsw.sample_spd_projections(D, 2, dtype=F64)[0],
    ),
    # deterministic: a trace is right (the overflow check is left out of it)
    "riemannian_step": (
        lambda s: (_curved.hyperbolic(_points(s, N)), _points(s + 10, N, dim=D + 1)),
        lambda X, G: tsw.riemannian_step(X, G, 0.1, manifold="lorentz"),
    ),
    "sample_mixed_curvature_trees": (
        _one(),
        lambda X: (
            X
            @ tsw.sample_mixed_curvature_trees(
                [("euclidean", D)], n_trees=2, n_lines=2, dtype=F64
            ).roots.T
        ),
    ),
}
#: a planning helper returning a Python int: a trace cannot output it (any error will do)
NOT_TENSOR_OUTPUT = {"trees_needed"}
#: a public function a trace would get wrong that does not refuse yet (none)
KNOWN_WRONG: set[str] = set()

#: every loss module, with its required options and whether it takes data on the sphere
LOSS_OPTIONS = {
    "ARIS3WLoss": {"dim": D},
    "CircularTSWLoss": {"radius": 1.0},
    "MCTSWLoss": {"components": [("euclidean", D)]},
}
SPHERE_LOSSES = {"SSWLoss", "S3WLoss", "STSWLoss", "SpatialSTSWLoss", "ARIS3WLoss"}
UNIF_LOSSES = {"SSWUnifLoss", "S3WUnifLoss", "STSWUnifLoss"}
#: the losses on hyperbolic space and SPD matrices, and the lift of their data
CURVED_LOSSES = {
    "GHSWLoss": _curved.hyperbolic,
    "HHSWLoss": _curved.hyperbolic,
    "SPDSWLoss": _curved.spd,
    "HSPDSWLoss": _curved.spd,
}


def _public_callables() -> set[str]:
    return {n for n in tsw.__all__ if n[0].islower() and callable(getattr(tsw, n))}


def test_every_public_callable_has_a_case():
    assert _public_callables() == set(CASES) - {"sw_projections"}


def _trace_or_refusal(call, example, names):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarnings of the recorded constants
        try:
            return torch.jit.trace(call, example, check_trace=False)
        except RuntimeError as err:
            msg = str(err)
            assert any(n in msg for n in names), msg
            assert "torch.jit.trace" in msg, msg
            assert "torch.compile" in msg, msg
            return None


def _assert_traced_equals_eager(traced, call, new):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got, expected = traced(*new), call(*new)
    flat_got = got if isinstance(got, tuple) else (got,)
    flat_exp = expected if isinstance(expected, tuple) else (expected,)
    for g, e in zip(flat_got, flat_exp, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason="traced result is a constant"))
        if n in KNOWN_WRONG
        else n
        for n in sorted(CASES)
    ],
)
def test_public_function_traced_is_right_or_refused(name):
    make, call = CASES[name]
    public = "tsw.sw" if name == "sw_projections" else f"tsw.{name}"
    if name in NOT_TENSOR_OUTPUT:
        example = make(0)
        with pytest.raises(RuntimeError), warnings.catch_warnings(action="ignore"):
            torch.jit.trace(call, example, check_trace=False)
        return
    traced = _trace_or_refusal(call, make(0), [public])
    if traced is not None:
        _assert_traced_equals_eager(traced, call, make(1))


@pytest.mark.parametrize("name", sorted(tsw.nn.__all__))
@pytest.mark.parametrize("resample", [False, True])
def test_loss_module_traced_is_right_or_refused(name, resample):
    cls = getattr(tsw.nn, name)
    loss = cls(**LOSS_OPTIONS.get(name, {}), seed=0, resample=resample)
    sphere = name in SPHERE_LOSSES or name in UNIF_LOSSES
    make = _one(True) if name in UNIF_LOSSES else _pair(sphere)
    if name in CURVED_LOSSES:
        make = _lifted(CURVED_LOSSES[name], make)
    # the loss names itself, or (ARIS3WLoss, which draws its rotations first) its function
    names = [f"tsw.nn.{name}", f"tsw.{cls._fn.__name__}"]
    traced = _trace_or_refusal(loss, make(0), names)
    if traced is not None:
        assert not resample, "a traced loss that resamples repeats one draw"
        _assert_traced_equals_eager(traced, loss, make(1))


def test_refusal_names_the_function_and_torch_compile():
    """The message a user meets: the function, why, and what to use instead."""
    X, Y = _pair()(0)
    with pytest.raises(RuntimeError) as info:
        torch.jit.trace(lambda X, Y: tsw.db_tsw(X, Y, seed=0), (X, Y), check_trace=False)
    msg = str(info.value)
    assert msg.startswith("tsw.db_tsw: torch.jit.trace cannot record this function")
    assert "Use torch.compile(fn) instead" in msg


def test_eager_calls_are_unaffected():
    """Outside a trace nothing changes: the same value as before, no error."""
    X, Y = _pair()(0)
    P = tsw.sample_projections(D, 7, seed=3, dtype=F64)
    value = tsw.sw(X, Y, projections=P, p=2)
    # the closed form of SW_2 on these projections: sorted projections matched in order
    # after replicating atoms to the common multiple of N and M
    xs = (X @ P).repeat_interleave(M, 0).sort(0).values
    ys = (Y @ P).repeat_interleave(N, 0).sort(0).values
    expected = ((xs - ys) ** 2).mean(0).mean().sqrt()
    torch.testing.assert_close(value, expected, rtol=1e-12, atol=0)


def test_support_trees_place_refuses_a_trace():
    """The cells found for the example points would be constants of the trace: the
    method refuses under its own name, as the functions do."""
    X = torch.cat(_pair()(0))
    eager = SUPPORT_TREES.place(X)
    assert eager.shape == (2, X.shape[0])
    with pytest.raises(RuntimeError, match=r"^tsw\.SupportTrees\.place: torch\.jit\.trace"):
        torch.jit.trace(SUPPORT_TREES.place, (X,), check_trace=False)
