"""The distance contract (conventions C9), parametrised over every public distance.

``REGISTRY`` lists each public distance once per configuration worth testing: the
functions :func:`tsw.tsw_sl`, :func:`tsw.db_tsw`, :func:`tsw.circular_tsw`,
:func:`tsw.spatial_tsw`, :func:`tsw.partial_tsw`, :func:`tsw.sw`, :func:`tsw.max_sw`, the
unequal-mass sliced baselines :func:`tsw.partial_sw` and :func:`tsw.unbalanced_sw`,
:func:`tsw.stsw`, :func:`tsw.spatial_stsw`, :func:`tsw.ssw`, :func:`tsw.s3w`, :func:`tsw.mc_tsw`
(on lifted data, ``tests/_mixed.py``), :func:`tsw.ghsw`, :func:`tsw.hhsw`, :func:`tsw.spdsw`,
:func:`tsw.hspdsw` (on data lifted onto hyperbolic space and SPD matrices, ``tests/_curved.py``)
and every loss
module of :mod:`tsw.nn`. A combination of options that only repeats code paths already
covered is left out (Db-TSW's options form a covering array, not a full product).
The distances to the uniform measure on the sphere (:func:`tsw.stsw_unif`,
:func:`tsw.ssw_unif`, :func:`tsw.s3w_unif`) take one measure; ``UNIF_REGISTRY`` subjects
them to the one-measure part of the contract.
Spherical entries run with ``renormalize=True``: the generic data are projected on the
sphere by the distance itself (the value depends on ``x / |x|`` only). An entry states the
properties it claims; every property test below runs on the entries that claim it, so
adding a distance to the registry subjects it to the whole contract.

Every comparison is against an exact property of the mathematics (identity, symmetry,
triangle inequality, invariances, weight semantics, closed forms, finite differences),
evaluated with *shared* randomness: explicit trees / projections, or the same seed with an
explicit tree centre, so that the property holds exactly for the draw and not only in law.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import _curved
import pytest
import torch
from _mixed import MIN_DIM, mc_tsw_module
from _mixed import mc_tsw as lifted_mc_tsw
from _public import NOT_DISTANCES
from conftest import assert_close, tolerances
from hypothesis import given
from hypothesis import strategies as st
from torch import Tensor

import tsw
from tsw import ChainLines, ConcurrentLines, SphericalTrees

# --------------------------------------------------------------------------- properties

IDENTITY = "identity"  # d(mu, mu) = 0, also for a row-permuted copy
NONNEG = "nonnegative"  # d >= 0 everywhere, > 0 on generic distinct inputs
SYMMETRIC = "symmetric"  # d(mu, nu) = d(nu, mu) with the same randomness
TRIANGLE = "triangle"  # with trees / projections shared by the three pairs
RIGID = "rigid"  # unchanged under a joint rigid motion of data and explicit slices
TRANSLATION_LAW = "translation_in_law"  # same seed, default centre, translated data
HOMOGENEOUS = "homogeneous"  # d(c mu, c nu; c-scaled slices) = c d(mu, nu)
DELTA_HOMOGENEOUS = "delta_homogeneous"  # Db-TSW: homogeneous once delta -> delta / c
HOMOGENEOUS_LAW = "homogeneous_in_law"  # same seed, no explicit slices (max-SW)
TRANSLATION_FORM = "translation_closed_form"  # closed form of d(mu, mu + t)
SEED = "seed"  # bit-identical for a seed, different across seeds, global RNG untouched
GENERATOR = "generator"  # accepts generator=, and seed=s equals Generator().manual_seed(s)
DTYPE = "dtype"  # dtype/device/shape preserved; float32 agrees with float64
BATCH = "batch"  # batched call equals a loop of unbatched calls (same seed)
BATCH_SLICES = "batch_slices"  # same with per-item explicit trees / projections
WEIGHTS = "weights"  # a=None, replication, duplicated atoms, zero-weight atoms
GRADCHECK = "gradcheck"  # finite differences w.r.t. points and (zero-sum) weights
GRADCHECK_POINTS = "gradcheck_points"  # the same w.r.t. points only
DEGENERATE = "degenerate"  # finite gradients at ties, identical inputs, ...
TREE_DEGENERATE = "tree_degenerate"  # finite gradients at roots / on lines of explicit trees
NONFINITE = "nonfinite"  # NaN/Inf raise with validate=True, never a finite value without
SPHERE_ROTATION = "sphere_rotation"  # O(d+1): rotating data and explicit slices together
#: the weights take no gradient: asking for one raises a RuntimeError naming the distance
#: (the properties above then differentiate with respect to the points only)
NO_WEIGHT_GRAD = "no_weight_gradient"

COMMON = frozenset(
    {IDENTITY, NONNEG, SYMMETRIC, SEED, DTYPE, BATCH, WEIGHTS, DEGENERATE, NONFINITE}
)
EXPLICIT = frozenset({RIGID, TRIANGLE, TRANSLATION_LAW, GENERATOR, BATCH_SLICES, GRADCHECK})


@dataclass(frozen=True)
class Entry:
    """One public distance in one configuration.

    ``fn(X_s, X_t, a, b, **kwargs, **rand)`` returns the value (0-d, or (B,) for batched
    input); ``rand`` holds ``seed``, ``generator``, ``trees``, ``projections``, ``center``,
    ``validate`` or overrides of ``kwargs``.
    """

    name: str
    fn: Callable[..., Tensor]
    kwargs: dict
    props: frozenset
    slices: str | None = None  # "chain", "concurrent", "projections" or None (seed only)
    center: bool = False  # accepts center= (tree distances and their modules)
    min_dim: int = 1
    scale: float = 1.0  # tolerance loosening (iterative max-SW)
    module: type | None = None  # for loss modules: the class ...
    function: Callable | None = None  # ... and the function it wraps
    p: float = field(default=1.0)
    #: degree of homogeneity: 1 for the sliced Wasserstein distances; 1/p for the tree
    #: distances, whose p > 1 form is a Sobolev transport (sum of edge length x |mass|^p:
    #: lengths scale by c, masses do not, so the value scales by c^(1/p))
    degree: float = 1.0
    #: dimension of the trees for data of dimension d (SpatialTSW: the mapped one)
    tree_dim: Callable[[int], int] | None = None

    def dim_of_trees(self, d: int) -> int:
        return d if self.tree_dim is None else self.tree_dim(d)

    def __call__(self, X_s, X_t, a=None, b=None, **rand):
        return self.fn(X_s, X_t, a, b, **{**self.kwargs, **rand})


def _tsw_sl(X_s, X_t, a, b, *, alpha=None, **kw):
    if alpha is not None:  # a constant split, in the data's dtype and device
        alpha = torch.as_tensor(alpha, dtype=X_s.dtype, device=X_s.device)
    return tsw.tsw_sl(X_s, X_t, a, b, alpha=alpha, **kw)


def _module_call(cls):
    """Call a loss module as a function: fixed draw from ``seed``, no batch reduction."""

    def call(X_s, X_t, a, b, *, seed=None, validate=True, **kw):
        loss = cls(**kw, seed=seed, resample=False, validate=validate, reduction="none")
        return loss(X_s, X_t, a, b)

    return call


def _ari_call(X_s, X_t, a, b, *, seed=None, validate=True, **kw):
    """ARIS3WLoss as a function: a pool in the data's dimension, fixed draw, no reduction."""
    loss = tsw.nn.ARIS3WLoss(
        dim=X_s.shape[-1], **kw, seed=seed, resample=False, validate=validate, reduction="none"
    )
    return loss(X_s, X_t, a, b)


def _unit_mass(fn):
    """A distance of atoms of equal unit mass: called with a = b = None, whatever the test's
    weights (the entry claims no property that depends on them)."""

    def call(X_s, X_t, a, b, **kw):
        return fn(X_s, X_t, None, None, **kw)

    return call


def _graph_map(Z):
    """A fixed injective map R^d -> R^(d+1): h(y) = (y, sum tanh(y))."""
    return torch.cat([Z, torch.tanh(Z).sum(-1, keepdim=True)], dim=-1)


T, K = 8, 3  # trees and lines per tree of the registry's tree distances
ALPHA = [0.2, 0.5, 0.3]


def _registry() -> list[Entry]:
    out = []
    tree_props = COMMON | EXPLICIT | {HOMOGENEOUS, TREE_DEGENERATE}
    for tree in ("chain", "concurrent"):
        for alpha in (None, ALPHA):
            name = f"tsw_sl[{tree}{'' if alpha is None else ',alpha'}]"
            kw = {"n_trees": T, "n_lines": K, "tree": tree, "alpha": alpha}
            out.append(Entry(name, _tsw_sl, kw, tree_props | {TRANSLATION_FORM}, tree, True))
    # p = 2: a Sobolev transport, homogeneous of degree 1/2
    out.append(
        Entry(
            "tsw_sl[chain,p=2]",
            _tsw_sl,
            {"n_trees": T, "n_lines": K, "tree": "chain", "p": 2},
            tree_props,
            "chain",
            True,
            p=2.0,
            degree=0.5,
        )
    )
    # a covering array of the three binary options (every pair of values of every two
    # options once): the split (delta), the sampler (orthogonal) and the cost (p) are
    # separate stages of the computation, so the full 2 x 2 x 2 product adds no path; this
    # half includes the defaults (delta=2, orthogonal=False, p=1)
    for delta, orthogonal, p in ((2.0, False, 1), (2.0, True, 2), (0.0, False, 2), (0.0, True, 1)):
        k = 2 if orthogonal else K
        props = COMMON | EXPLICIT | {DELTA_HOMOGENEOUS, TREE_DEGENERATE}
        if delta == 0:
            props |= {HOMOGENEOUS}
        out.append(
            Entry(
                f"db_tsw[delta={delta:g},orth={orthogonal},p={p}]",
                tsw.db_tsw,
                {
                    "n_trees": T,
                    "n_lines": k,
                    "delta": delta,
                    "orthogonal": orthogonal,
                    "p": p,
                },
                props,
                "concurrent",
                True,
                min_dim=k if orthogonal else 1,
                p=float(p),
                degree=1 / p,
            )
        )
    # TS-Sobolev: Db-TSW's trees and split, Sobolev weights beta_e = int (1 + lambda)^(1-p)
    # over the edge. The weights depend on the span of the measures (the tree is cut at
    # the outermost atoms) and on the length scale of the "1 +": no homogeneity.
    # No triangle inequality: each pair cuts the trees at its own span, so a third
    # measure with a tiny far atom shrinks the weights of its two sides
    # (euclidean/test_ts_sobolev.py::test_the_triangle_inequality_fails_with_shared_trees)
    sobolev_props = (COMMON | EXPLICIT | {TREE_DEGENERATE}) - {TRIANGLE}
    for delta, orthogonal, p in ((2.0, False, 2), (0.0, True, 3)):
        k = 2 if orthogonal else K
        out.append(
            Entry(
                f"ts_sobolev[delta={delta:g},orth={orthogonal},p={p}]",
                tsw.ts_sobolev,
                {"n_trees": T, "n_lines": k, "delta": delta, "orthogonal": orthogonal, "p": p},
                sobolev_props,
                "concurrent",
                True,
                min_dim=k if orthogonal else 1,
                p=float(p),
            )
        )
    # CircularTSW: E(d)-invariant splits (rigid motions with the trees, translations in
    # law), homogeneous once radius -> c radius and delta -> delta / c; with r = 0 no
    # radius to rescale (and with delta = 0 too, plainly homogeneous)
    for radius, split, delta, p in (
        (0.0, "image", 2.0, 1),
        (0.0, "line", 2.0, 1),
        (0.0, "image", 0.0, 2),
        (0.5, "image", 2.0, 1),
        (0.5, "line", 2.0, 2),
        (0.5, "image", 0.0, 1),
    ):
        props = COMMON | EXPLICIT | {DELTA_HOMOGENEOUS, TREE_DEGENERATE}
        if radius == 0 and delta == 0:
            props |= {HOMOGENEOUS}
        out.append(
            Entry(
                f"circular_tsw[r={radius:g},{split},delta={delta:g},p={p}]",
                tsw.circular_tsw,
                {
                    "n_trees": T,
                    "n_lines": K,
                    "radius": radius,
                    "split": split,
                    "delta": delta,
                    "p": p,
                },
                props,
                "concurrent",
                True,
                p=float(p),
                degree=1 / p,
            )
        )
    # SpatialTSW: Db-TSW after a map h that commutes with neither rotations nor
    # translations nor scalings (no RIGID / TRANSLATION_LAW / homogeneity: signed
    # permutations are tested in euclidean/test_spatial_tsw.py). Trees live in d_theta. "pow" maps
    # 0 to 0 and the coordinate axes into themselves, so points at roots / on the axis
    # lines of the hand-made degenerate trees stay there (TREE_DEGENERATE).
    spatial_props = COMMON | {TRIANGLE, GENERATOR, BATCH_SLICES, GRADCHECK}
    for label, kw, tree_dim, extra in (
        ("pow", {"mapping": "pow"}, None, {TREE_DEGENERATE}),
        ("pow,deg=5,p=2", {"mapping": "pow", "degree": 5, "beta": 0.5, "p": 2}, None, set()),
        ("poly", {"mapping": "poly"}, lambda d: math.comb(d + 2, 3), set()),
        ("graph", {"mapping": _graph_map}, lambda d: d + 1, set()),
    ):
        p = float(kw.get("p", 1))
        out.append(
            Entry(
                f"spatial_tsw[{label}]",
                tsw.spatial_tsw,
                {"n_trees": T, "n_lines": K, **kw},
                spatial_props | extra,
                "concurrent",
                True,
                p=p,
                degree=1 / p,
                tree_dim=tree_dim,
            )
        )
    # PartialTSW. Equal masses: everything Db-TSW claims. Unequal masses: d(mu, mu) > 0
    # (the gap costs its transport to the root), so no identity (nor the zero value of
    # DEGENERATE); symmetric and a triangle inequality only with the masses moved along
    # with the measures, which the shared tests cannot express (euclidean/test_partial_tsw.py
    # checks both). A price adds price * |gap|^p, which does not scale with the data.
    partial_unequal = (COMMON - {IDENTITY, SYMMETRIC, DEGENERATE}) | (EXPLICIT - {TRIANGLE})
    for masses, p, price in (((1.0, 1.0), 1, 0.0), ((1.0, 0.6), 1, 0.0), ((0.7, 1.3), 2, 0.5)):
        props = (COMMON | EXPLICIT) if masses[0] == masses[1] else partial_unequal
        props = props | {TREE_DEGENERATE} | ({DELTA_HOMOGENEOUS} if price == 0 else set())
        out.append(
            Entry(
                f"partial_tsw[mass={masses[0]:g}/{masses[1]:g},p={p},price={price:g}]",
                tsw.partial_tsw,
                {
                    "n_trees": T,
                    "n_lines": K,
                    "delta": 2.0,
                    "p": p,
                    "mass_s": masses[0],
                    "mass_t": masses[1],
                    "price": price,
                },
                props,
                "concurrent",
                True,
                p=float(p),
                degree=1 / p,
            )
        )
    sw_props = COMMON | EXPLICIT | {HOMOGENEOUS, TRANSLATION_FORM}
    for p, orthogonal in ((1, False), (2, False), (2, True)):
        out.append(
            Entry(
                f"sw[p={p},orth={orthogonal}]",
                tsw.sw,
                {"n_projections": 12, "p": p, "orthogonal": orthogonal},
                sw_props,
                "projections",
                p=float(p),
            )
        )
    # LCV-SW: SW minus a control variate of known mean, the coefficient estimated from
    # the same directions. Symmetric, rigid, homogeneous (the coefficient scales as
    # c^(p-2), the variate as c^2); not a metric of the measures (the correction depends
    # on the pair: no triangle), and d(mu, mu + t) is corrected towards its expectation,
    # not the slices' average (no translation closed form)
    lcv_props = (COMMON | EXPLICIT | {HOMOGENEOUS}) - {TRIANGLE}
    for variate, coefficient, p in (("lower", "pooled", 2), ("upper", "leave_one_out", 1)):
        out.append(
            Entry(
                f"lcv_sw[{variate},{coefficient},p={p}]",
                tsw.lcv_sw,
                {
                    "n_projections": 12,
                    "p": p,
                    "variate": variate,
                    "coefficient": coefficient,
                    "orthogonal": False,
                },
                lcv_props,
                "projections",
                p=float(p),
            )
        )
    # EB-SW (importance-sampling form): the weights follow the costs, so no triangle and
    # no translation closed form; e^x is not scale-free (homogeneous with f(x) = x only);
    # the weights are held fixed in the gradient as in the authors' code, so it is not the value's
    # derivative (no gradcheck; sliced/test_eb_sw.py checks the gradient against POT)
    eb_props = (COMMON | EXPLICIT) - {TRIANGLE, GRADCHECK}
    for energy, p in (("exp", 2), ("identity", 1)):
        out.append(
            Entry(
                f"eb_sw[{energy},p={p}]",
                tsw.eb_sw,
                {"n_projections": 12, "p": p, "energy": energy, "orthogonal": False},
                eb_props | ({HOMOGENEOUS} if energy == "identity" else set()),
                "projections",
                p=float(p),
            )
        )
    # RP-SW: directions x_i - y_j of random pairs, drawn from the data (detached): no
    # explicit slices of its own (with projections= it is sw), not symmetric (the pairs
    # are drawn from a, then b), no finite-difference gradient (the directions move with
    # the data); invariant in law under translations and scalings. The pairs are drawn by
    # inverse CDF in the atoms' order, so splitting or moving an atom changes the draws
    # (not their law): no weight semantics
    rp_props = (COMMON - {SYMMETRIC, WEIGHTS}) | {TRANSLATION_LAW, HOMOGENEOUS_LAW, GENERATOR}
    for kw in ({"p": 2}, {"p": 1, "kappa": 10.0}):
        label = ",".join(f"{k}={v:g}" for k, v in kw.items())
        out.append(
            Entry(f"rp_sw[{label}]", tsw.rp_sw, {"n_projections": 12, **kw}, rp_props, p=kw["p"])
        )
    # SUOT baseline: POT's Frank-Wolfe stops after n_iter = 10 steps, far from converged,
    # at an iterate that depends on tie-breaking in the 1-D dual (weights 1/6 vs
    # 1/6 * (1 + 1e-15) change the value by 5%) and on the order of the arguments. So no
    # symmetry, weight semantics or finite-difference gradients are claimed; SUOT is not
    # a metric (no triangle inequality).
    suot = COMMON - {SYMMETRIC, WEIGHTS} | (EXPLICIT - {TRIANGLE, GRADCHECK})
    unequal = suot - {IDENTITY, DEGENERATE}
    for masses, props in (((1.0, 1.0), suot), ((1.0, 1.3), unequal)):
        out.append(
            Entry(
                f"unbalanced_sw[mass={masses[0]:g}/{masses[1]:g}]",
                tsw.unbalanced_sw,
                {
                    "n_projections": 12,
                    "reg_m": 0.5,
                    "mass_s": masses[0],
                    "mass_t": masses[1],
                    "orthogonal": False,
                },
                props,
                "projections",
                p=2.0,
            )
        )
    # Sliced partial OT (POT's exact 1-D partial solver): atoms of equal unit mass only, so
    # the weights of the shared test data are dropped (a = b = None) and no property that
    # involves weights is claimed (WEIGHTS, gradcheck in the weights, NONFINITE's NaN
    # weights, DEGENERATE's weight gradients). With k = min(N, M) atoms moved, N = M
    # gives SW (identity, the translation closed form); a fixed k is not a metric (no
    # triangle inequality). Selection is piecewise constant: gradcheck in the points.
    psw_props = (
        (COMMON - {WEIGHTS, DEGENERATE, NONFINITE})
        | (EXPLICIT - {TRIANGLE, GRADCHECK})
        | {GRADCHECK_POINTS, HOMOGENEOUS, TRANSLATION_FORM}
    )
    for p in (1, 2):
        out.append(
            Entry(
                f"partial_sw[p={p}]",
                _unit_mass(tsw.partial_sw),
                {"n_projections": 12, "p": p, "orthogonal": False},
                psw_props,
                "projections",
                function=tsw.partial_sw,
                p=float(p),
            )
        )
    # max-SW: an optimisation per pair, so no shared slices (no triangle, no rigid
    # motion with explicit slices). With n_iter=0 the direction is an argmax among
    # random directions, locally constant in the data: gradcheck applies.
    # SpatialSTSW: STSW after the lift S^d -> S^(d+1), which commutes with coordinate
    # permutations only (no rotation invariance claimed); trees live on S^(d+1).
    out.append(
        Entry(
            "spatial_stsw[lift]",
            tsw.spatial_stsw,
            {"n_trees": T, "n_lines": K, "renormalize": True},
            COMMON | {TRIANGLE, GRADCHECK},
            min_dim=2,
        )
    )
    max_props = COMMON | {TRANSLATION_LAW, HOMOGENEOUS_LAW, GENERATOR}
    out.append(
        Entry(
            "max_sw[n_iter=5]", tsw.max_sw, {"n_iter": 5, "n_init": 4}, max_props, scale=1e3, p=2.0
        )
    )
    out.append(
        Entry(
            "max_sw[n_iter=0,p=1]",
            tsw.max_sw,
            {"n_iter": 0, "n_init": 6, "p": 1},
            max_props | {GRADCHECK},
            scale=1e3,
        )
    )
    # MaxTSW-SL: an ascent per pair from TSW-SL's trees (as max-SW: no shared slices).
    # With n_iter=0 it is TSW-SL on the starting trees, explicit ones included
    out.append(
        Entry(
            "max_tsw_sl[n_iter=5]",
            tsw.max_tsw_sl,
            {"n_trees": 2, "n_lines": K, "n_iter": 5, "lr": 0.05},
            max_props,
            None,
            True,
            scale=1e3,
        )
    )
    out.append(
        Entry(
            "max_tsw_sl[n_iter=0,concurrent]",
            tsw.max_tsw_sl,
            {"n_trees": T, "n_lines": K, "n_iter": 0, "tree": "concurrent"},
            COMMON | EXPLICIT | {HOMOGENEOUS},
            "concurrent",
            True,
        )
    )
    # on the sphere: no translations or scalings, rotations of data and slices instead
    sphere = {"renormalize": True}
    stsw_props = COMMON | {TRIANGLE, GENERATOR, BATCH_SLICES, GRADCHECK, SPHERE_ROTATION}
    for delta, p in ((2.0, 1), (0.0, 1), (5.0, 2)):
        out.append(
            Entry(
                f"stsw[delta={delta:g},p={p}]",
                tsw.stsw,
                {"n_trees": T, "n_lines": K, "delta": delta, "p": p, **sphere},
                stsw_props | {TREE_DEGENERATE},
                "spherical",
                min_dim=2,
                p=float(p),
            )
        )
    # POT's circle OT gives wrong gradients w.r.t. the weights as soon as there is more
    # than one great circle (values are right; see tsw.ssw): points only
    ssw_props = (stsw_props - {GRADCHECK}) | {GRADCHECK_POINTS, NO_WEIGHT_GRAD}
    for p in (1, 2):
        out.append(
            Entry(
                f"ssw[p={p}]",
                tsw.ssw,
                {"n_projections": 12, "p": p, **sphere},
                ssw_props,
                "sphere_projections",
                min_dim=2,
                p=float(p),
            )
        )
    # S3W: SW after the map h of the sphere into the unit ball. Not invariant under
    # rotations of the sphere (RI-S3W only in expectation over its rotations): no
    # SPHERE_ROTATION. Its draws do not depend on the data, so a seed freezes them
    # (explicit rotations / projections, per-item batches and the rotations that fix the
    # poles are tested in sliced/test_s3w.py)
    s3w_props = COMMON | {TRIANGLE, GENERATOR, GRADCHECK}
    for label, kw in (
        ("p=2", {}),
        ("p=1", {"p": 1}),
        ("RI=3,p=2", {"n_rotations": 3}),
        ("compat,RI=2,p=1.5", {"compat": True, "n_rotations": 2, "p": 1.5}),
    ):
        out.append(
            Entry(
                f"s3w[{label}]",
                tsw.s3w,
                {"n_projections": 12, **kw, **sphere},
                s3w_props,
                min_dim=2,
                p=float(kw.get("p", 2)),
            )
        )
    # ARIS3WLoss: its pool lives in the module, in the data's dimension; the module =
    # function checks do not apply (no function draws the pool), see sliced/test_s3w.py
    out.append(
        Entry(
            "ARIS3WLoss",
            _ari_call,
            {"pool_size": 6, "n_rotations": 3, "n_projections": 12, **sphere},
            COMMON | {TRIANGLE, GRADCHECK},
            min_dim=2,
            module=tsw.nn.ARIS3WLoss,
            p=2.0,
        )
    )
    for cls, fn, kw, p, grad in (
        (tsw.nn.STSWLoss, tsw.stsw, {"n_trees": T, "n_lines": K, **sphere}, 1.0, GRADCHECK),
        (
            tsw.nn.S3WLoss,
            tsw.s3w,
            {"n_projections": 12, "n_rotations": 2, **sphere},
            2.0,
            GRADCHECK,
        ),
        (tsw.nn.SSWLoss, tsw.ssw, {"n_projections": 12, **sphere}, 2.0, GRADCHECK_POINTS),
        (
            tsw.nn.SpatialSTSWLoss,
            tsw.spatial_stsw,
            {"n_trees": T, "n_lines": K, **sphere},
            1.0,
            GRADCHECK,
        ),
    ):
        out.append(
            Entry(
                cls.__name__,
                _module_call(cls),
                kw,
                COMMON | {TRIANGLE, grad} | ({NO_WEIGHT_GRAD} if fn is tsw.ssw else set()),
                min_dim=2,
                module=cls,
                function=fn,
                p=p,
            )
        )
    mod_props = COMMON | {TRIANGLE, TRANSLATION_LAW, GRADCHECK}
    for cls, fn, kw, center, p in (
        (tsw.nn.TSWSLLoss, tsw.tsw_sl, {"n_trees": T, "n_lines": K}, True, 1.0),
        (tsw.nn.DbTSWLoss, tsw.db_tsw, {"n_trees": T, "n_lines": K, "delta": 2.0}, True, 1.0),
        (tsw.nn.SWLoss, tsw.sw, {"n_projections": 12, "p": 2}, False, 2.0),
        (
            tsw.nn.CircularTSWLoss,
            tsw.circular_tsw,
            {"n_trees": T, "n_lines": K, "radius": 0.5},
            True,
            1.0,
        ),
    ):
        out.append(
            Entry(
                cls.__name__,
                _module_call(cls),
                kw,
                mod_props,
                None,
                center,
                module=cls,
                function=fn,
                p=p,
            )
        )
    for cls, fn, kw, props, p, scale in (
        (
            tsw.nn.LCVSWLoss,
            tsw.lcv_sw,
            {"n_projections": 12},
            COMMON | {TRANSLATION_LAW, GRADCHECK},
            2.0,
            1.0,
        ),
        (tsw.nn.EBSWLoss, tsw.eb_sw, {"n_projections": 12}, COMMON | {TRANSLATION_LAW}, 2.0, 1.0),
        (
            tsw.nn.RPSWLoss,
            tsw.rp_sw,
            {"n_projections": 12, "kappa": 20.0},
            (COMMON - {SYMMETRIC, WEIGHTS}) | {TRANSLATION_LAW},
            2.0,
            1.0,
        ),
        (
            tsw.nn.MaxTSWSLLoss,
            tsw.max_tsw_sl,
            {"n_lines": K, "n_iter": 5},
            COMMON | {TRANSLATION_LAW},
            1.0,
            1e3,
        ),
    ):
        out.append(
            Entry(
                cls.__name__,
                _module_call(cls),
                kw,
                props,
                None,
                fn is tsw.max_tsw_sl,
                scale=scale,
                module=cls,
                function=fn,
                p=p,
            )
        )
    out.append(
        Entry(
            "TSSobolevLoss",
            _module_call(tsw.nn.TSSobolevLoss),
            {"n_trees": T, "n_lines": K},
            COMMON | {TRANSLATION_LAW, GRADCHECK},
            None,
            True,
            module=tsw.nn.TSSobolevLoss,
            function=tsw.ts_sobolev,
            p=2.0,
        )
    )
    # SpatialTSWLoss: "pow" keeps d_theta = d (the shared centre lives there); no
    # translation invariance
    out.append(
        Entry(
            "SpatialTSWLoss",
            _module_call(tsw.nn.SpatialTSWLoss),
            {"n_trees": T, "n_lines": K, "mapping": "pow"},
            COMMON | {TRIANGLE, GRADCHECK},
            None,
            True,
            module=tsw.nn.SpatialTSWLoss,
            function=tsw.spatial_tsw,
        )
    )
    out.append(
        Entry(
            "PartialTSWLoss",
            _module_call(tsw.nn.PartialTSWLoss),
            {"n_trees": T, "n_lines": K, "mass_t": 0.8},
            (COMMON - {IDENTITY, SYMMETRIC, DEGENERATE}) | {TRANSLATION_LAW, GRADCHECK},
            None,
            True,
            module=tsw.nn.PartialTSWLoss,
            function=tsw.partial_tsw,
        )
    )
    # MC-TSW on R^1 x S^1 x H^(d-2): generic data lifted onto the product (tests/_mixed.py),
    # roots around the product's origin so that a seed shares the trees among pairs; the
    # lift moves the points, so no rigid or translation property. The default centre (the
    # data's mean) draws each pair's trees around its own centre: no triangle inequality.
    # Its loss module runs on the data as one Euclidean factor (the module = function
    # checks pass the same kwargs to both), where the default centre is Db-TSW's.
    mixed = COMMON | {TRIANGLE, GENERATOR, GRADCHECK}
    for label, kw, props in (
        ("p=1,geodesic", {"center": "origin"}, mixed),
        ("p=2,ray,delta=2", {"center": "origin", "p": 2, "split": "ray", "delta": 2.0}, mixed),
        # the centre follows the data (detached): finite differences see it move
        ("mean,delta=0", {"delta": 0.0}, mixed - {TRIANGLE, GRADCHECK}),
    ):
        p = float(kw.get("p", 1))
        out.append(
            Entry(
                f"mc_tsw[{label}]",
                lifted_mc_tsw,
                {"n_trees": T, "n_lines": K, **kw},
                props,
                min_dim=MIN_DIM,
                function=tsw.mc_tsw,
                p=p,
                degree=1 / p,
            )
        )
    out.append(
        Entry(
            "MCTSWLoss",
            mc_tsw_module,
            {"components": (("euclidean", 3),), "n_trees": T, "n_lines": K},
            COMMON | {TRIANGLE, TRANSLATION_LAW, GRADCHECK},
            None,
            True,
            module=tsw.nn.MCTSWLoss,
            function=tsw.mc_tsw,
        )
    )
    # Hyperbolic SW on data lifted onto H^d (tests/_curved.py: the point at distance |v| in
    # the direction of v, which commutes with the rotations about the origin); SPD SW on
    # data lifted onto SPD matrices (exp of the symmetric matrix of half-vectorisation v).
    # The lifts move the points: no translation or scaling property; the rotations about
    # the origin with the directions (SPHERE_ROTATION's test: O(d) on data and projections)
    hyperbolic = COMMON | {TRIANGLE, GENERATOR, BATCH_SLICES, GRADCHECK, SPHERE_ROTATION}
    for fn, model, p in (
        (tsw.ghsw, "lorentz", 2),
        (tsw.ghsw, "poincare", 1),
        (tsw.hhsw, "lorentz", 1),
        (tsw.hhsw, "poincare", 2),
    ):
        lift = _curved.hyperbolic if model == "lorentz" else _curved.poincare
        out.append(
            Entry(
                f"{fn.__name__}[{model},p={p}]",
                _curved.lifted(fn, lift, model=model),
                {"n_projections": 12, "p": p, "orthogonal": False},
                hyperbolic,
                "projections",
                function=fn,
                p=float(p),
            )
        )
    spd_props = COMMON | {TRIANGLE, GENERATOR, BATCH_SLICES, GRADCHECK}
    for fn, p in ((tsw.spdsw, 2), (tsw.spdsw, 1), (tsw.hspdsw, 2), (tsw.hspdsw, 1.5)):
        out.append(
            Entry(
                f"{fn.__name__}[p={p}]",
                _curved.lifted(fn, _curved.spd),
                {"n_projections": 12, "p": p},
                spd_props,
                "spd_projections",
                function=fn,
                p=float(p),
            )
        )
    # their loss modules on the lifted data (the module = function checks, which pass the
    # suite's generic data to both, run in tests/curved/)
    for cls, lift, kw in (
        (tsw.nn.GHSWLoss, _curved.hyperbolic, {"n_projections": 12}),
        (tsw.nn.HHSWLoss, _curved.poincare, {"n_projections": 12, "model": "poincare"}),
        (tsw.nn.SPDSWLoss, _curved.spd, {"n_projections": 12}),
        (tsw.nn.HSPDSWLoss, _curved.spd, {"n_projections": 12}),
    ):
        out.append(
            Entry(
                cls.__name__,
                _curved.lifted_module(cls, lift),
                kw,
                COMMON | {TRIANGLE, GRADCHECK},
                module=cls,
                p=2.0,
            )
        )
    out.append(
        Entry(
            "MaxSWLoss",
            _module_call(tsw.nn.MaxSWLoss),
            {"n_iter": 5, "n_init": 4},
            COMMON | {TRANSLATION_LAW},
            scale=1e3,
            module=tsw.nn.MaxSWLoss,
            function=tsw.max_sw,
            p=2.0,
        )
    )
    return out


REGISTRY = _registry()


def having(*props):
    return [pytest.param(e, id=e.name) for e in REGISTRY if set(props) <= e.props]


def weight_grad(entry) -> bool:
    """Whether the entry's weights take a gradient."""
    return NO_WEIGHT_GRAD not in entry.props


def test_registry_covers_every_public_distance():
    """Read from ``tsw.__all__``: a new distance fails here until it joins a registry."""
    public = {
        getattr(tsw, n)
        for n in tsw.__all__
        if n[0].islower() and callable(getattr(tsw, n)) and n not in NOT_DISTANCES
    }
    unif = {f for f in public if f.__name__.endswith("_unif")}
    fns = {e.function or (tsw.tsw_sl if e.fn is _tsw_sl else e.fn) for e in REGISTRY}
    assert public - unif <= fns
    assert {e.function or e.fn for e in UNIF_REGISTRY} == unif
    modules = {e.module for e in REGISTRY + UNIF_REGISTRY if e.module is not None}
    assert modules == {getattr(tsw.nn, n) for n in tsw.nn.__all__}


# --------------------------------------------------------------------------- helpers

F64 = torch.float64


def make_data(N=7, M=5, d=3, *, batch=None, dtype=F64, device="cpu", seed=0, shift=1.0):
    """Generic supports and positive weights of total 1, drawn in float64 on the CPU."""
    g = torch.Generator().manual_seed(seed)
    lead = () if batch is None else (batch,)
    X = torch.randn(*lead, N, d, generator=g, dtype=F64)
    Y = 0.8 * torch.randn(*lead, M, d, generator=g, dtype=F64) + shift
    a = torch.rand(*lead, N, generator=g, dtype=F64) + 0.2
    b = torch.rand(*lead, M, generator=g, dtype=F64) + 0.2
    a, b = a / a.sum(-1, keepdim=True), b / b.sum(-1, keepdim=True)
    return tuple(t.to(dtype=dtype, device=device) for t in (X, Y, a, b))


def frozen(entry, d, *, dtype=F64, device="cpu", seed=11):
    """Randomness that does not depend on the data: explicit slices, else seed + centre."""
    if entry.slices in ("chain", "concurrent") or entry.center:
        d = entry.dim_of_trees(d)
    center = torch.full((d,), 0.3, dtype=dtype, device=device)
    kw = {"seed": seed, "dtype": dtype, "device": device}
    if entry.slices == "chain":
        n, k = entry.kwargs["n_trees"], entry.kwargs["n_lines"]
        return {
            "trees": tsw.sample_chain_lines(d, n_trees=n, n_lines=k, center=center, std=0.5, **kw)
        }
    if entry.slices == "concurrent":
        n, k = entry.kwargs["n_trees"], entry.kwargs["n_lines"]
        orth = entry.kwargs.get("orthogonal", False)
        return {
            "trees": tsw.sample_concurrent_lines(
                d, n_trees=n, n_lines=k, center=center, std=0.5, orthogonal=orth, **kw
            )
        }
    if entry.slices == "projections":
        L, orth = entry.kwargs["n_projections"], entry.kwargs["orthogonal"]
        return {"projections": tsw.sample_projections(d, L, orthogonal=orth, **kw)}
    if entry.slices == "spherical":
        n, k = entry.kwargs["n_trees"], entry.kwargs["n_lines"]
        return {"trees": tsw.sample_spherical_trees(d, n_trees=n, n_lines=k, **kw)}
    if entry.slices == "sphere_projections":
        return {
            "projections": tsw.sample_sphere_projections(d, entry.kwargs["n_projections"], **kw)
        }
    if entry.slices == "spd_projections":
        return {"projections": _curved.spd_projections(d, entry.kwargs["n_projections"], **kw)}
    return {"seed": seed, "center": center} if entry.center else {"seed": seed}


def shared(entry, d, *, dtype=F64, device="cpu", seed=11):
    """Same seed and an explicit centre: sampled trees shared by every pair of measures."""
    if entry.center:
        d = entry.dim_of_trees(d)
        return {"seed": seed, "center": torch.full((d,), 0.3, dtype=dtype, device=device)}
    return {"seed": seed}


def moved(rand, Q=None, v=None, c=1.0):
    """The slices of ``rand`` under x -> c Q x + v (directions -> Q theta)."""
    out = dict(rand)
    if "trees" in rand:
        t = rand["trees"]
        eye = torch.eye(t.dim, dtype=t.directions.dtype, device=t.directions.device)
        Q = eye if Q is None else Q
        v = torch.zeros_like(eye[0]) if v is None else v
        dirs = t.directions @ Q.T
        if isinstance(t, SphericalTrees):
            assert c == 1.0, "spherical trees only rotate"
            assert not bool(v.any()), "spherical trees only rotate"
            out["trees"] = SphericalTrees(t.roots @ Q.T, dirs)
        elif isinstance(t, ConcurrentLines):
            out["trees"] = ConcurrentLines(c * (t.roots @ Q.T) + v, dirs)
        else:
            out["trees"] = ChainLines(c * (t.sources @ Q.T) + v, dirs)
    if "projections" in rand and Q is not None:
        out["projections"] = Q @ rand["projections"]
    assert "center" not in rand, "move explicit trees or projections only"
    return out


def random_orthogonal(d, seed, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=F64))
    q = q * torch.sign(torch.diagonal(r))
    if seed % 2:  # include an improper rotation (a reflection)
        q[:, 0] = -q[:, 0]
    return q.to(dtype)


def close(entry, actual, expected, dtype=F64, scale=1.0):
    assert_close(actual, expected, dtype=dtype, scale=entry.scale * scale)


# ------------------------------------------------------------- 1-3. identity, sign, symmetry


@pytest.mark.parametrize("entry", having(IDENTITY))
def test_identity_and_permuted_copy(entry, device):
    X, _, a, _ = make_data(N=9, device=device)
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(3)).to(device)
    for rand in ({"seed": 3}, frozen(entry, 3, device=device)):
        Xg = X.clone().requires_grad_()
        v = entry(Xg, X, a, a, **rand)
        v_perm = entry(X, X[perm], a, a[perm], **rand)
        assert v.shape == ()
        assert v.requires_grad  # graph-connected zero
        # the p-th power is a sum of |mass| x edge length: rounding of the coordinates of
        # tied atoms leaves ~eps, which the 1/p root amplifies to ~eps^(1/p)
        assert 0 <= float(v.detach()) ** entry.p <= 1e-12
        assert 0 <= float(v_perm) ** entry.p <= 1e-12
    # unweighted, float32
    X32 = X.float()
    assert 0 <= float(entry(X32, X32[perm], seed=1)) ** entry.p <= 1e-6


@pytest.mark.parametrize("entry", having(NONNEG))
@given(
    n=st.integers(1, 10),
    m=st.integers(1, 10),
    d=st.integers(1, 5),
    batch=st.sampled_from([None, 2]),
    data_seed=st.integers(0, 2**16),
)
def test_nonnegative(entry, n, m, d, batch, data_seed):
    d = max(d, entry.min_dim)
    X, Y, a, b = make_data(n, m, d, batch=batch, seed=data_seed, shift=0.0)
    v = entry(X, Y, a, b, seed=data_seed)
    assert v.shape == (() if batch is None else (batch,))
    assert bool(torch.isfinite(v).all())
    assert bool((v >= 0).all())


@pytest.mark.parametrize("entry", having(NONNEG))
def test_positive_on_generic_distinct_inputs(entry, device):
    X, Y, a, b = make_data(device=device, seed=5)
    assert float(entry(X, Y, a, b, seed=0)) > 1e-3
    assert float(entry(X, Y, a, b, **frozen(entry, 3, device=device))) > 1e-3


@pytest.mark.parametrize("entry", having(SYMMETRIC))
def test_symmetry(entry, device):
    # float64 only: float32 agrees with float64 for every entry
    # (test_dtype_device_and_float32_agreement)
    dtype = F64
    X, Y, a, b = make_data(dtype=dtype, device=device, seed=1)
    for rand in ({"seed": 4}, frozen(entry, 3, dtype=dtype, device=device)):
        close(entry, entry(X, Y, a, b, **rand), entry(Y, X, b, a, **rand), dtype)
    # batched, unweighted
    X, Y, _, _ = make_data(N=6, M=6, batch=2, dtype=dtype, device=device, seed=2)
    close(entry, entry(X, Y, seed=5), entry(Y, X, seed=5), dtype)


# --------------------------------------------------------------------------- 4. triangle inequality


@pytest.mark.parametrize("entry", having(TRIANGLE))
@pytest.mark.parametrize("data_seed", [0, 1])
def test_triangle_inequality(entry, data_seed, device):
    g = torch.Generator().manual_seed(100 + data_seed)
    d = 3

    def measure(n, loc):
        x = torch.randn(n, d, generator=g, dtype=F64) * torch.rand(1, generator=g, dtype=F64)
        w = torch.rand(n, generator=g, dtype=F64) + 0.1
        return (x + loc).to(device), (w / w.sum()).to(device)

    (x1, w1), (x2, w2), (x3, w3) = measure(6, 0.0), measure(4, 0.7), measure(7, 1.5)
    rands = [shared(entry, d, device=device)]
    if entry.slices is not None:
        rands.append(frozen(entry, d, device=device))
    for rand in rands:
        d12 = entry(x1, x2, w1, w2, **rand)
        d23 = entry(x2, x3, w2, w3, **rand)
        d13 = entry(x1, x3, w1, w3, **rand)
        # every ordering of the three sides
        for lhs, r1, r2 in ((d13, d12, d23), (d12, d13, d23), (d23, d12, d13)):
            assert float(lhs) <= float(r1 + r2) + 1e-12


@pytest.mark.parametrize("entry", having(TRANSLATION_FORM))
def test_translation_closed_form(entry, device):
    """d(mu, mu + t) from the slices alone.

    Every slice of SW sees a translation by <theta, t>, so SW_p^p = mean_l |<theta_l, t>|^p.
    TSW-SL (constant split, p = 1) is the alpha-weighted sliced W1 over the tree's lines:
    mean_tau sum_l alpha_tau,l |<theta_tau,l, t>|. Both are linear in |t| (the triangle
    inequality is then an equality along a line of translates).
    """
    X, _, a, _ = make_data(N=6, device=device, seed=8)
    t = torch.tensor([0.7, -1.2, 0.4], dtype=F64, device=device)
    rand = frozen(entry, 3, device=device)
    value = entry(X, X + t, a, a, **rand)
    if "projections" in rand:
        proj = (t @ rand["projections"]).abs()
        expected = proj.pow(entry.p).mean().pow(1 / entry.p)
    else:
        dirs = rand["trees"].directions  # (T, k, d)
        alpha = entry.kwargs["alpha"]
        k = dirs.shape[-2]
        alpha = torch.full((k,), 1 / k, dtype=F64) if alpha is None else alpha
        alpha = torch.as_tensor(alpha, dtype=F64)
        expected = ((dirs @ t).abs() * alpha.to(device)).sum(-1).mean()
    assert_close(value, expected)
    close(entry, entry(X, X + 2 * t, a, a, **rand), 2 * value)


# --------------------------------------------------------------------------- 9. invariances


@pytest.mark.parametrize("entry", having(RIGID))
@pytest.mark.parametrize("motion_seed", [0, 1])
def test_rigid_motion_with_explicit_slices(entry, motion_seed, device):
    # float64 only: float32 agrees with float64 for every entry
    # (test_dtype_device_and_float32_agreement)
    dtype = F64
    X, Y, a, b = make_data(dtype=dtype, device=device, seed=2)
    Q = random_orthogonal(3, motion_seed, dtype).to(device)
    v = torch.tensor([2.0, -1.0, 0.5], dtype=dtype, device=device)
    rand = frozen(entry, 3, dtype=dtype, device=device)
    base = entry(X, Y, a, b, **rand)
    moved_value = entry(X @ Q.T + v, Y @ Q.T + v, a, b, **moved(rand, Q, v))
    close(entry, moved_value, base, dtype, scale=10)
    # not a vacuous check: moving the data without the slices changes the value
    other = entry(X @ Q.T + v, Y @ Q.T + v, a, b, **rand)
    assert not torch.allclose(other, base, rtol=1e-3)


@pytest.mark.parametrize("entry", having(SPHERE_ROTATION))
@pytest.mark.parametrize("motion_seed", [0, 1])
def test_sphere_rotation_with_explicit_slices(entry, motion_seed, device):
    """O(d+1) invariance on the sphere: data and slices rotated (or reflected) together."""
    # float64 only: float32 agrees with float64 for every entry
    # (test_dtype_device_and_float32_agreement)
    dtype = F64
    X, Y, a, b = make_data(dtype=dtype, device=device, seed=2)
    Q = random_orthogonal(3, motion_seed, dtype).to(device)
    rand = frozen(entry, 3, dtype=dtype, device=device)
    base = entry(X, Y, a, b, **rand)
    close(entry, entry(X @ Q.T, Y @ Q.T, a, b, **moved(rand, Q)), base, dtype, scale=10)
    other = entry(X @ Q.T, Y @ Q.T, a, b, **rand)
    assert not torch.allclose(other, base, rtol=1e-5 if dtype == F64 else 3e-4)


@pytest.mark.parametrize("entry", having(TRANSLATION_LAW))
def test_translation_with_same_seed_and_default_centre(entry, device):
    """Roots follow the weighted mean of the data, directions do not move: exact invariance."""
    X, Y, a, b = make_data(device=device, seed=3)
    v = torch.tensor([3.0, -2.0, 1.0], dtype=F64, device=device)
    close(entry, entry(X + v, Y + v, a, b, seed=9), entry(X, Y, a, b, seed=9), scale=100)


CENTRED = [pytest.param(e, id=e.name) for e in REGISTRY if e.center]


@pytest.mark.parametrize("entry", CENTRED)
@pytest.mark.parametrize("batch", [None, 2])
def test_default_centre_is_detached(entry, batch):
    """The default root centre is the *detached* weighted mean of the (mapped) data.

    Same seed, float64: the value and the gradients with respect to both supports and
    both weights equal those with ``center=`` set to the weighted mean computed here
    (detached). A centre left in the graph adds the roots' pull to every gradient.
    PartialTSW's centre is the mean of the two normalised shapes; the test weights have
    total 1, so it is the same formula.
    """
    X, Y, a, b = make_data(batch=batch, seed=24)
    h = _mapping(entry)
    with torch.no_grad():
        num = (a.unsqueeze(-1) * h(X)).sum(-2) + (b.unsqueeze(-1) * h(Y)).sum(-2)
        centre = num / (a.sum(-1) + b.sum(-1)).unsqueeze(-1)

    def value_and_grads(**rand):
        leaves = [t.clone().requires_grad_() for t in (X, Y, a, b)]
        value = entry(*leaves, seed=7, **rand)
        return value, torch.autograd.grad(value.sum(), leaves)

    v_default, g_default = value_and_grads()
    v_explicit, g_explicit = value_and_grads(center=centre)
    assert_close(v_default, v_explicit)
    for name, u, w in zip(("X_s", "X_t", "a", "b"), g_default, g_explicit, strict=True):
        torch.testing.assert_close(u, w, **tolerances(F64), msg=f"{entry.name}: grad {name}")


@pytest.mark.parametrize("entry", having(HOMOGENEOUS))
@pytest.mark.parametrize("c", [2.5])  # one factor: the scaling is the same code path for all c
def test_homogeneity_with_scaled_slices(entry, c, device):
    X, Y, a, b = make_data(device=device, seed=4)
    rand = frozen(entry, 3, device=device)
    scaled = entry(c * X, c * Y, a, b, **moved(rand, c=c))
    close(entry, scaled, c**entry.degree * entry(X, Y, a, b, **rand), scale=10)


@pytest.mark.parametrize("entry", having(DELTA_HOMOGENEOUS))
@pytest.mark.parametrize("c", [0.3])  # and the other direction (delta / c grows) here
def test_db_tsw_homogeneous_only_with_rescaled_delta(entry, c, device):
    X, Y, a, b = make_data(device=device, seed=4)
    rand = frozen(entry, 3, device=device)
    delta = entry.kwargs["delta"]
    # CircularTSW: the radius is a length, scaled with the data
    lengths = {"radius": c * entry.kwargs["radius"]} if "radius" in entry.kwargs else {}
    base = entry(X, Y, a, b, **rand)
    scaled = entry(c * X, c * Y, a, b, delta=delta / c, **lengths, **moved(rand, c=c))
    close(entry, scaled, c**entry.degree * base, scale=10)
    if delta > 0:  # documented: not homogeneous with the same delta
        same_delta = entry(c * X, c * Y, a, b, **lengths, **moved(rand, c=c))
        assert not torch.allclose(same_delta, c**entry.degree * base, rtol=1e-6)


@pytest.mark.parametrize("entry", having(HOMOGENEOUS_LAW))
def test_homogeneity_same_seed(entry, device):
    X, Y, a, b = make_data(device=device, seed=4)
    close(entry, entry(2.5 * X, 2.5 * Y, a, b, seed=2), 2.5 * entry(X, Y, a, b, seed=2))


# --------------------------------------------------------------------------- 11. determinism


@pytest.mark.parametrize("entry", having(SEED))
def test_seed_determinism_and_global_rng(entry, device):
    X, Y, a, b = make_data(device=device, seed=6)
    cpu_state = torch.get_rng_state()
    cuda_state = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    v1 = entry(X, Y, a, b, seed=5)
    v2 = entry(X, Y, a, b, seed=5)
    assert torch.equal(v1, v2)  # bit-identical
    assert not torch.equal(v1, entry(X, Y, a, b, seed=6))
    # without a seed: fresh draws, and the global generators are neither read nor advanced
    u1, u2 = entry(X, Y, a, b), entry(X, Y, a, b)
    assert not torch.equal(u1, u2)
    assert torch.equal(torch.get_rng_state(), cpu_state)
    if cuda_state is not None:
        after = torch.cuda.get_rng_state_all()
        assert all(torch.equal(s, t) for s, t in zip(after, cuda_state, strict=True))
    # reseeding the global RNG does not make unseeded calls reproducible
    torch.manual_seed(0)
    w1 = entry(X, Y, a, b)
    torch.manual_seed(0)
    assert not torch.equal(w1, entry(X, Y, a, b))


@pytest.mark.parametrize("entry", having(GENERATOR))
def test_generator_reproducible_and_equal_to_seed(entry, device):
    X, Y, a, b = make_data(device=device, seed=6)
    v = entry(X, Y, a, b, generator=torch.Generator().manual_seed(7))
    assert torch.equal(v, entry(X, Y, a, b, generator=torch.Generator().manual_seed(7)))
    # documented: seed=s draws from a CPU generator seeded with s
    assert torch.equal(v, entry(X, Y, a, b, seed=7))
    g = torch.Generator().manual_seed(7)
    first, second = entry(X, Y, a, b, generator=g), entry(X, Y, a, b, generator=g)
    assert torch.equal(first, v)
    assert not torch.equal(first, second)  # the generator advances
    if device.type == "cuda":
        gc = torch.Generator(device=device)
        w = entry(X, Y, a, b, generator=gc.manual_seed(7))
        assert torch.equal(w, entry(X, Y, a, b, generator=gc.manual_seed(7)))


# ------------------------------------------------------------- 12. dtype, device, batch


@pytest.mark.parametrize("entry", having(DTYPE))
def test_dtype_device_and_float32_agreement(entry, device):
    X, Y, a, b = make_data(device=device, seed=7)
    values = {}
    for dt in (torch.float32, torch.float64):
        v = entry(X.to(dt), Y.to(dt), a.to(dt), b.to(dt), seed=3)
        assert v.dtype == dt
        assert v.device == X.device
        assert v.shape == ()
        values[dt] = v
        Xb, Yb, ab, bb = make_data(batch=3, dtype=dt, device=device)
        vb = entry(Xb, Yb, ab, bb, seed=3)
        assert (vb.dtype, vb.device, vb.shape) == (dt, X.device, (3,))
    torch.testing.assert_close(values[torch.float32].double(), values[F64], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("entry", having(BATCH))
@pytest.mark.parametrize("weighted", [False, True])
def test_batch_equals_loop(entry, weighted, device):
    # float64 only: the batched float32 call keeps dtype and shape and agrees with float64
    # for every entry (test_dtype_device_and_float32_agreement)
    dtype = F64
    X, Y, a, b = make_data(N=6, M=8, batch=3, dtype=dtype, device=device, seed=8)
    if not weighted:
        a = b = None
    for rand in ({"seed": 2}, frozen(entry, 3, dtype=dtype, device=device)):
        batched = entry(X, Y, a, b, **rand)
        loop = torch.stack(
            [
                entry(X[i], Y[i], None if a is None else a[i], None if b is None else b[i], **rand)
                for i in range(3)
            ]
        )
        assert batched.shape == (3,)
        close(entry, batched, loop, dtype, scale=10)


def _per_item_slices(entry, d, B, device):
    items = [frozen(entry, d, device=device, seed=20 + i) for i in range(B)]
    if "projections" in items[0]:
        batched = {"projections": torch.stack([r["projections"] for r in items])}
    else:
        ts = [r["trees"] for r in items]
        if isinstance(ts[0], ConcurrentLines | SphericalTrees):
            batched = {
                "trees": type(ts[0])(
                    torch.stack([t.roots for t in ts]), torch.stack([t.directions for t in ts])
                )
            }
        else:
            batched = {
                "trees": ChainLines(
                    torch.stack([t.sources for t in ts]), torch.stack([t.directions for t in ts])
                )
            }
    return batched, items


@pytest.mark.parametrize("entry", having(BATCH_SLICES))
def test_batch_with_per_item_slices_equals_loop(entry, device):
    X, Y, a, b = make_data(N=6, M=8, batch=3, device=device, seed=9)
    batched_rand, items = _per_item_slices(entry, 3, 3, device)
    batched = entry(X, Y, a, b, **batched_rand)
    loop = torch.stack([entry(X[i], Y[i], a[i], b[i], **items[i]) for i in range(3)])
    close(entry, batched, loop, scale=10)
    # the items really use different slices
    assert not torch.allclose(loop, entry(X, Y, a, b, **items[0]), rtol=1e-6)


# --------------------------------------------------------------------------- 6. weight semantics


@pytest.mark.parametrize("entry", having(WEIGHTS))
def test_uniform_weights_default(entry, device):
    X, Y, _, _ = make_data(N=6, M=9, device=device, seed=10)
    a = torch.full((6,), 1 / 6, dtype=F64, device=device)
    b = torch.full((9,), 1 / 9, dtype=F64, device=device)
    for rand in ({"seed": 1}, frozen(entry, 3, device=device)):
        close(entry, entry(X, Y, **rand), entry(X, Y, a, b, **rand))


@pytest.mark.parametrize("entry", having(WEIGHTS))
def test_integer_weights_equal_replicated_atoms(entry, device):
    """N != M, rational weights: the same measure written with repeated atoms."""
    X, Y, _, _ = make_data(N=5, M=7, device=device, seed=11)
    cs = torch.tensor([1, 2, 3, 1, 1], device=device)
    ct = torch.tensor([2, 1, 1, 3, 1, 1, 1], device=device)
    a, b = cs.to(F64) / cs.sum(), ct.to(F64) / ct.sum()
    Xr, Yr = X.repeat_interleave(cs, dim=0), Y.repeat_interleave(ct, dim=0)
    rand = frozen(entry, 3, device=device)
    close(entry, entry(X, Y, a, b, **rand), entry(Xr, Yr, **rand), scale=10)


@pytest.mark.parametrize("entry", having(WEIGHTS))
def test_duplicated_atom_at_half_weight(entry, device):
    X, Y, a, b = make_data(device=device, seed=12)
    j = 2
    X2 = torch.cat([X, X[j : j + 1]])
    a2 = torch.cat([a, a[j : j + 1] / 2])
    a2[j] = a[j] / 2
    Y2 = torch.cat([Y[:1], Y])
    b2 = torch.cat([b[:1] / 2, b])
    b2[1] = b[0] / 2
    rand = frozen(entry, 3, device=device)
    close(entry, entry(X2, Y2, a2, b2, **rand), entry(X, Y, a, b, **rand), scale=10)


@pytest.mark.parametrize("entry", having(WEIGHTS))
def test_zero_weight_atom(entry, device):
    X, Y, a, b = make_data(device=device, seed=13)
    extra = torch.tensor([[0.4, -0.3, 0.9]], dtype=F64, device=device)
    rand = frozen(entry, 3, device=device)
    Xg = X.clone().requires_grad_()
    base = entry(Xg, Y, a, b, **rand)
    (g_base,) = torch.autograd.grad(base, Xg)
    X2 = torch.cat([X, extra]).requires_grad_()
    a2 = torch.cat([a, torch.zeros(1, dtype=F64, device=device)])
    a2.requires_grad_(weight_grad(entry))
    value = entry(X2, Y, a2, b, **rand)
    grads = torch.autograd.grad(value, [t for t in (X2, a2) if t.requires_grad])
    g_x = grads[0]
    close(entry, value, base, scale=10)
    close(entry, g_x[:-1], g_base, scale=1e3)
    for g in grads:
        assert bool(torch.isfinite(g).all())
    # the value does not depend on where a massless atom sits
    assert float(g_x[-1].abs().max()) <= 1e-9
    # and the zero-weight atom may also sit first in the target
    value_t = entry(X, torch.cat([extra, Y]), a, torch.cat([b.new_zeros(1), b]), **rand)
    close(entry, value_t, base, scale=10)


# --------------------------------------------------------------------------- 13. gradients


@pytest.mark.parametrize("entry", having(GRADCHECK) + having(GRADCHECK_POINTS))
def test_gradcheck_points(entry):
    X, Y, a, b = make_data(N=5, M=4, seed=14)  # generic: no ties among cumulative weights
    rand = frozen(entry, 3)

    def f(X_s, X_t):
        return entry(X_s, X_t, a, b, **rand)

    assert torch.autograd.gradcheck(f, (X.requires_grad_(), Y.requires_grad_()))


@pytest.mark.parametrize("entry", having(GRADCHECK))
def test_gradcheck_weights_zero_sum(entry):
    """Weights: finite differences along zero-sum directions only.

    The distances are balanced: with validate=True unequal totals raise, and off the
    simplex the value is an arbitrary extension (mass sent to a root, clamped quantiles).
    The meaningful derivative is the one along perturbations that keep both totals fixed
    (POT #364, OTT): a = a0 + (u - mean(u)) and b = b0 + (v - mean(v)), gradcheck in (u, v),
    which compares the projection of the analytic weight gradient onto zero-sum directions
    with finite differences, and keeps validate=True on every evaluation.
    """
    # generic weights: no ties among the cumulative weights of the two measures (a tie,
    # as with 0.2 + 0.3 = 0.5 = 0.35 + 0.15, is a kink of the 1-D quantile coupling)
    X, Y, a0, b0 = make_data(N=5, M=4, seed=15)
    rand = frozen(entry, 3)

    def f(u, v):
        return entry(X, Y, a0 + (u - u.mean()), b0 + (v - v.mean()), **rand)

    u = torch.zeros(5, dtype=F64, requires_grad=True)
    v = torch.zeros(4, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(f, (u, v))


TREE_FUNCTIONS = (tsw.tsw_sl, tsw.db_tsw, tsw.circular_tsw, tsw.spatial_tsw, tsw.partial_tsw)


def _base(entry):
    """The public function behind an entry."""
    return entry.function or (tsw.tsw_sl if entry.fn is _tsw_sl else entry.fn)


def _mapping(entry):
    """SpatialTSW's map h of an entry (the identity for the other distances)."""
    m = entry.kwargs.get("mapping")
    if m is None:
        return lambda Z: Z
    if callable(m):
        return m
    opts = {k: entry.kwargs[k] for k in ("degree", "beta") if k in entry.kwargs}
    if m == "pow":
        return lambda Z: tsw.mappings.pow_map(Z, **opts)
    return lambda Z: tsw.mappings.poly_map(Z, **opts)


def _lipschitz_bounds(entry, xs, xt, ws, wt, rand):
    """Bounds on the per-atom gradient norms |grad_{x_i} d|, or None where none is claimed.

    * Sliced W_p (sw, max_sw): moving x_i by eps moves a_i of mass by at most eps on every
      unit direction, so W_p changes by at most a_i^(1/p) eps (triangle inequality):
      |grad_{x_i} d| <= a_i^(1/p).
    * Tree distances, p = 1: the value is 1-Lipschitz in every line coordinate of every
      piece of mass, and the coordinates are 1-Lipschitz in h(x_i) (projections, or the
      distance to a point for CircularTSW), which gives a_i |J_h(x_i)|. A split
      alpha = softmax(-delta * dist) moves at most sum_l |d alpha_l| <= 2 delta |dx| of
      a_i between lines, each unit at a cost <= 2 R (R: the largest distance from a
      mapped point to a root, plus the radius): |grad| <= a_i |J_h| (1 + 2 delta R).
    * Tree distances with p > 1 (a Sobolev cost linear in |eps|, under the 1/p root) are
      not Lipschitz at identical inputs: see test_root_form_is_not_lipschitz_at_identical_inputs.
    * Not claimed: the sphere (a great circle's projection is not Lipschitz near its
      poles) and SUOT.
    The returned bounds are twice these (safety against rounding).
    """
    base = _base(entry)
    if "renormalize" in entry.kwargs:
        return None
    if base in (tsw.sw, tsw.max_sw):
        return [2 * w ** (1 / entry.p) for w in (ws, wt)]
    if base not in TREE_FUNCTIONS or entry.p != 1:
        return None
    delta = entry.kwargs.get("delta")
    if delta is None and base is not tsw.tsw_sl:
        delta = inspect.signature(base).parameters["delta"].default
    delta = 0.0 if delta is None else delta
    h = _mapping(entry)
    Z = torch.cat([h(xs), h(xt)]).detach()
    if "trees" in rand:
        t = rand["trees"]
        roots = t.roots if isinstance(t, ConcurrentLines) else t.sources
        roots = roots.reshape(-1, Z.shape[-1])
        R = float(torch.cdist(Z, roots).max())
    else:  # roots within 0.1 * N(0, I) of a convex combination of the mapped points
        R = float(torch.cdist(Z, Z).max()) + 1.0
    R += entry.kwargs.get("radius", 0.0)
    out = []
    for x, w in ((xs, ws), (xt, wt)):
        jac = torch.stack(
            [torch.autograd.functional.jacobian(lambda z: h(z[None])[0], xi) for xi in x]
        )
        lip = torch.linalg.matrix_norm(jac, ord=2)
        out.append(2 * w * lip * (1 + 2 * delta * R))
    return out


@pytest.mark.parametrize("entry", having(NO_WEIGHT_GRAD))
def test_weight_gradient_refused(entry, device):
    """A gradient asked of weights that take none raises an error naming the distance."""
    X, Y, a, b = make_data(device=device, seed=17)
    ag = a.clone().requires_grad_()
    value = entry(X.clone().requires_grad_(), Y, ag, b, **frozen(entry, 3, device=device))
    with pytest.raises(RuntimeError, match="no gradient with respect to the weights"):
        torch.autograd.grad(value, ag)


@pytest.mark.parametrize("entry", having(DEGENERATE))
def test_finite_gradients_at_degenerate_inputs(entry, device):
    """Finite gradients at ties and identical inputs, and bounded where a bound holds.

    The bounds (see _lipschitz_bounds) hold at every input, ties included, for a fixed
    draw of the slices: a gradient of 1e13 at identical inputs fails here.
    """
    X, Y, a, b = make_data(device=device, seed=16)
    # duplicates inside a measure and atoms shared by both measures (ties)
    Xd = torch.cat([X[:3], X[:3], Y[:2]])
    ad = torch.full((8,), 1 / 8, dtype=F64, device=device)
    cases = [(X, X.clone(), a, a.clone()), (Xd, Y, ad, b), (X, Xd, a, ad)]
    for rand in ({"seed": 0}, frozen(entry, 3, device=device)):
        for xs, xt, ws, wt in cases:
            leaves = [t.clone().requires_grad_() for t in (xs, xt)]
            leaves += [t.clone().requires_grad_(weight_grad(entry)) for t in (ws, wt)]
            value = entry(*leaves, **rand)
            assert value.requires_grad
            grads = torch.autograd.grad(value, [t for t in leaves if t.requires_grad])
            for g in grads:
                assert bool(torch.isfinite(g).all()), entry.name
            bounds = _lipschitz_bounds(entry, xs, xt, ws, wt, rand)
            if bounds is not None:
                for g, bound in zip(grads[:2], bounds, strict=True):
                    norms = g.norm(dim=-1)
                    assert bool((norms <= bound).all()), (entry.name, norms.max(), bound.max())
        # the very same tensor on both sides (value identically zero)
        Xs = X.clone().requires_grad_()
        value = entry(Xs, Xs, a, a, **rand)
        (g,) = torch.autograd.grad(value, Xs)
        assert bool(torch.isfinite(g).all())
        assert float(value.detach()) ** entry.p <= 1e-12


def _degenerate_trees(entry, device):
    """Hand-made trees with exact coordinates, and points at roots and on lines."""
    n, k = entry.kwargs["n_trees"], entry.kwargs["n_lines"]
    eye = torch.eye(3, dtype=F64)
    frames = [eye, torch.stack([-eye[1], eye[2], eye[0]]), torch.stack([eye[2], -eye[0], eye[1]])]
    dirs = torch.stack([frames[i % 3][:k] for i in range(n)]).to(device)
    if entry.slices == "spherical":
        # root = third frame vector, rays along +-(first two); points at roots, antipodes,
        # on rays, between rays, duplicated
        fr = [frames[i % 3] for i in range(n)]
        roots = torch.stack([f[2] for f in fr]).to(device)
        dirs = torch.stack([torch.stack([f[0], f[1], -f[0]])[:k] for f in fr]).to(device)
        trees = SphericalTrees(roots, dirs)
        pts = [[0, 0, 1], [0, 0, -1], [1, 0, 0], [0, 1, 0], [-1, 0, 0], [0, -1, 0]]
        pts += [[1, 1, 0], [0, 0, 1], [0.3, 0.2, 0.1]]
        return trees, torch.tensor(pts, dtype=F64, device=device)
    if entry.slices == "concurrent":
        trees = ConcurrentLines(torch.zeros(n, 3, dtype=F64, device=device), dirs)
        pts = [[0, 0, 0], [2, 0, 0], [0, -1.5, 0], [0, 0, 0.5], [-1, 0, 0], [0.3, 0.2, 0.1]]
    else:
        # line 0 through the origin along dirs[0]; line 1 starts at t=1 on line 0; ...
        src = torch.zeros(n, k, 3, dtype=F64)
        for i in range(1, k):
            src[:, i] = src[:, i - 1] + (1.0 if i == 1 else -0.5) * dirs[:, i - 1].cpu()
        trees = ChainLines(src.to(device), dirs)
        s = src[0]
        pts = [s[0].tolist(), (s[0] + 2 * dirs[0, 0].cpu()).tolist(), s[1].tolist()]
        pts += [(s[1] + 0.7 * dirs[0, 1].cpu()).tolist(), [0.3, 0.2, 0.1]]
        if k > 2:
            pts += [s[2].tolist(), (s[2] + 0.3 * dirs[0, 2].cpu()).tolist()]
    return trees, torch.tensor(pts, dtype=F64, device=device)


@pytest.mark.parametrize("entry", having(TREE_DEGENERATE))
def test_finite_gradients_at_roots_and_on_lines(entry, device):
    trees, P = _degenerate_trees(entry, device)
    _, Y, _, _ = make_data(N=P.shape[0], M=5, device=device, seed=17)
    cases = [(P, Y), (P, P.clone()), (P, P[torch.arange(P.shape[0] - 1, -1, -1)])]
    for xs, xt in cases:
        xs, xt = xs.clone().requires_grad_(), xt.clone().requires_grad_()
        ws = torch.full((xs.shape[0],), 1 / xs.shape[0], dtype=F64, device=device)
        wt = torch.full((xt.shape[0],), 1 / xt.shape[0], dtype=F64, device=device)
        ws.requires_grad_()
        wt.requires_grad_()
        value = entry(xs, xt, ws, wt, trees=trees)
        assert bool(torch.isfinite(value))
        for g in torch.autograd.grad(value, (xs, xt, ws, wt)):
            assert bool(torch.isfinite(g).all()), entry.name


SOBOLEV = [
    pytest.param(e, id=e.name)
    for e in REGISTRY
    if e.p > 1
    and IDENTITY in e.props
    and (_base(e) in TREE_FUNCTIONS or _base(e) in (tsw.stsw, tsw.spatial_stsw))
]


@pytest.mark.parametrize("entry", SOBOLEV)
def test_root_form_is_not_lipschitz_at_identical_inputs(entry):
    """The p > 1 tree distances are the 1/p root of a Sobolev cost that is *linear* in
    the displacement eps of one atom near identical inputs (a segment of length ~eps
    carries the atom's whole mass): d ~ eps^(1/p), whose slope is unbounded at eps = 0.
    So no bounded gradient is claimed there (the gradient at eps = 0 is only finite, and
    can be ~1e13 from rounding); ``power=True`` (the cost itself) has a bounded gradient.
    This pins the root form's behaviour: d(4 eps) / d(eps) = 4^(1/p), not 4.
    """
    X, _, a, _ = make_data(seed=16)
    rand = frozen(entry, 3)
    step = torch.zeros_like(X)
    step[0] = torch.tensor([0.6, -0.8, 0.0], dtype=F64)
    eps = 1e-5
    v1, v4 = (entry(X + c * eps * step, X, a, a, **rand) for c in (1, 4))
    assert float(v1) > 0
    torch.testing.assert_close(
        v4 / v1, torch.tensor(4 ** (1 / entry.p), dtype=F64), rtol=0.02, atol=0
    )
    # the difference quotient is far above any Lipschitz constant of order one
    assert float(v1) / eps > 10.0


@pytest.mark.parametrize("entry", having(DEGENERATE))
def test_upstream_gradient_scaling(entry, device):
    """grad(c * f) = c * grad(f): the backward passes honour grad_output."""
    X, Y, a, b = make_data(device=device, seed=18)
    rand = frozen(entry, 3, device=device)
    Xg = X.clone().requires_grad_()
    ag = a.clone().requires_grad_(weight_grad(entry))
    leaves = [t for t in (Xg, ag) if t.requires_grad]
    g1 = torch.autograd.grad(entry(Xg, Y, ag, b, **rand), leaves)
    g2 = torch.autograd.grad(-3.5 * entry(Xg, Y, ag, b, **rand), leaves)
    for u, v in zip(g1, g2, strict=True):
        close(entry, v, -3.5 * u, scale=10)
    # vector upstream gradient on a batch: each item's gradient weighted by its own factor
    Xb, Yb, ab, bb = make_data(batch=3, device=device, seed=19)
    Xb.requires_grad_()
    c = torch.tensor([2.0, -1.0, 0.5], dtype=F64, device=device)
    (gv,) = torch.autograd.grad(entry(Xb, Yb, ab, bb, **rand), Xb, grad_outputs=c)
    (g1,) = torch.autograd.grad(entry(Xb, Yb, ab, bb, **rand).sum(), Xb)
    close(entry, gv, c[:, None, None] * g1, scale=10)


# --------------------------------------------------------------------------- module = function


MODULES = [
    pytest.param(e, id=e.name)
    for e in REGISTRY
    if e.module is not None and e.function is not None  # not ARIS3WLoss (its own pool)
]


@pytest.mark.parametrize("entry", MODULES)
def test_module_equals_function(entry, device):
    X, Y, a, b = make_data(batch=3, device=device, seed=20)
    fixed = entry.module(**entry.kwargs, seed=5, resample=False, reduction="none")
    v1, v2 = fixed(X, Y, a, b), fixed(X, Y, a, b)
    assert torch.equal(v1, v2)  # the same draw at every call
    assert torch.equal(v1, entry.function(X, Y, a, b, **entry.kwargs, seed=fixed._fixed_seed))
    # a fixed draw without a seed is still stable across calls
    anon = entry.module(**entry.kwargs, resample=False, reduction="none")
    assert torch.equal(anon(X, Y, a, b), anon(X, Y, a, b))
    # resample=True: the module's generator replays Generator().manual_seed(seed)
    mod = entry.module(**entry.kwargs, seed=5, resample=True, reduction="none")
    g = torch.Generator().manual_seed(5)
    first = mod(X, Y, a, b)
    assert torch.equal(first, entry.function(X, Y, a, b, **entry.kwargs, generator=g))
    second = mod(X, Y, a, b)
    assert torch.equal(second, entry.function(X, Y, a, b, **entry.kwargs, generator=g))
    assert not torch.equal(first, second)


@pytest.mark.parametrize("entry", MODULES)
def test_module_reduction(entry, device):
    X, Y, a, b = make_data(batch=3, device=device, seed=21)
    expected = entry.function(X, Y, a, b, **entry.kwargs, seed=4)
    for reduction, want in (("none", expected), ("mean", expected.mean()), ("sum", expected.sum())):
        mod = entry.module(**entry.kwargs, seed=4, resample=False, reduction=reduction)
        out = mod(X, Y, a, b)
        assert out.shape == want.shape
        close(entry, out, want)
    # unbatched input: a 0-d value whatever the reduction
    for reduction in ("none", "mean", "sum"):
        mod = entry.module(**entry.kwargs, seed=4, resample=False, reduction=reduction)
        out = mod(X[0], Y[0], a[0], b[0])
        assert out.shape == ()
        close(entry, out, expected[0], scale=10)


@pytest.mark.parametrize("entry", MODULES)
def test_module_backward(entry):
    X, Y, a, b = make_data(batch=2, seed=22)
    X.requires_grad_()
    mod = entry.module(**entry.kwargs, seed=1, resample=False)
    mod(X, Y, a, b).backward()
    assert X.grad is not None
    assert bool(torch.isfinite(X.grad).all())
    assert float(X.grad.abs().max()) > 0


# --------------------------------------------------------------------------- 14. non-finite input


def _nonfinite_cases(device):
    X, Y, a, b = make_data(device=device, seed=23)
    cases = []
    # the bad value moves through the coordinates (NaN at 0, Inf at 1, -Inf at 2 of X_s;
    # shifted by one in X_t): with validate=False an Inf in a coordinate other than the
    # last was not covered (tests/test_adversarial.py draws the positions at random)
    d = X.shape[-1]
    for i, bad in enumerate((math.nan, math.inf, -math.inf)):
        Xbad, Ybad = X.clone(), Y.clone()
        Xbad[1, i % d] = bad
        Ybad[0, (i + 1) % d] = bad
        cases += [("X_s", (Xbad, Y, a, b)), ("X_t", (X, Ybad, a, b))]
    abad = a.clone()
    abad[2] = math.nan
    cases.append(("a", (X, Y, abad, b)))
    return cases


@pytest.mark.parametrize("entry", having(NONFINITE))
def test_nonfinite_input_raises_with_validation(entry, device):
    for name, args in _nonfinite_cases(device):
        with pytest.raises(ValueError, match=f"{name} contains NaN or Inf"):
            entry(*args, seed=0)


@pytest.mark.parametrize("entry", having(NONFINITE))
def test_nonfinite_input_never_gives_a_finite_value_without_validation(entry, device):
    """validate=False skips the check; NaN/Inf must then propagate, never vanish."""
    silent = []
    for name, args in _nonfinite_cases(device):
        value = entry(*args, seed=0, validate=False)
        if bool(torch.isfinite(value)):
            bad = {"X_s": args[0], "X_t": args[1], "a": args[2]}[name]
            kind = "nan" if bool(bad.isnan().any()) else "inf"
            silent.append(f"{kind} in {name} -> {float(value)}")
    assert not silent, silent


# ------------------------------------------------- distances to the uniform measure (sphere)


@dataclass(frozen=True)
class UnifEntry:
    """A distance ``fn(X_s, a, **kwargs, **rand)`` to the uniform measure on the sphere."""

    name: str
    fn: Callable[..., Tensor]
    kwargs: dict
    slices: str | None  # "spherical", "sphere_projections" or None (modules: seed only)
    p: float = 1.0
    #: the value scales as (total mass) ** mass_degree: 1 for a tree sum of edge x |mass|^p
    #: (its 1/p root), 1/p for a Wasserstein-p distance
    mass_degree: float = 1.0
    module: type | None = None
    function: Callable | None = None

    def __call__(self, X_s, a=None, **rand):
        return self.fn(X_s, a, **{**self.kwargs, **rand})


def _unif_module_call(cls):
    def call(X_s, a, *, seed=None, validate=True, **kw):
        return cls(**kw, seed=seed, resample=False, validate=validate, reduction="none")(X_s, a)

    return call


def _unif_registry() -> list[UnifEntry]:
    sphere = {"renormalize": True}
    out = [
        UnifEntry(
            f"stsw_unif[delta={delta:g},p={p}]",
            tsw.stsw_unif,
            {"n_trees": T, "n_lines": K, "delta": delta, "p": p, "n_grid": 64, **sphere},
            "spherical",
            p=float(p),
        )
        for delta, p in ((2.0, 1), (0.0, 1), (5.0, 2))
    ]
    out.append(
        UnifEntry(
            "ssw_unif",
            tsw.ssw_unif,
            {"n_projections": 12, **sphere},
            "sphere_projections",
            p=2.0,
            mass_degree=0.5,
        )
    )
    # a sampled uniform side (a fixed n_samples, independent of N): seed-only entries
    s3w_unif = {"n_samples": 200, "n_projections": 12, "n_rotations": 2, **sphere}
    out.append(UnifEntry("s3w_unif", tsw.s3w_unif, s3w_unif, None, p=2.0, mass_degree=0.5))
    for cls, fn, kw, p in (
        (tsw.nn.STSWUnifLoss, tsw.stsw_unif, {"n_trees": T, "n_lines": K, **sphere}, 1.0),
        (tsw.nn.SSWUnifLoss, tsw.ssw_unif, {"n_projections": 12, **sphere}, 2.0),
        (tsw.nn.S3WUnifLoss, tsw.s3w_unif, s3w_unif, 2.0),
    ):
        out.append(
            UnifEntry(cls.__name__, _unif_module_call(cls), kw, None, p, module=cls, function=fn)
        )
    return out


UNIF_REGISTRY = _unif_registry()
UNIF = [pytest.param(e, id=e.name) for e in UNIF_REGISTRY]
UNIF_SLICED = [pytest.param(e, id=e.name) for e in UNIF_REGISTRY if e.slices is not None]
UNIF_MODULES = [pytest.param(e, id=e.name) for e in UNIF_REGISTRY if e.module is not None]


def unif_frozen(entry, d, *, dtype=F64, device="cpu", seed=11):
    probe = Entry(entry.name, entry.fn, entry.kwargs, frozenset(), entry.slices)
    return frozen(probe, d, dtype=dtype, device=device, seed=seed)


@pytest.mark.parametrize("entry", UNIF)
@given(
    n=st.integers(1, 10),
    d=st.integers(2, 5),
    batch=st.sampled_from([None, 2]),
    data_seed=st.integers(0, 2**16),
)
def test_unif_nonnegative_and_finite(entry, n, d, batch, data_seed):
    X, _, a, _ = make_data(n, 2, d, batch=batch, seed=data_seed)
    v = entry(X, a, seed=data_seed)
    assert v.shape == (() if batch is None else (batch,))
    assert bool(torch.isfinite(v).all())
    assert bool((v >= 0).all())


@pytest.mark.parametrize("entry", UNIF)
def test_unif_seed_generator_and_global_rng(entry, device):
    X, _, a, _ = make_data(device=device, seed=6)
    state = torch.get_rng_state()
    v = entry(X, a, seed=5)
    assert torch.equal(v, entry(X, a, seed=5))
    assert not torch.equal(v, entry(X, a, seed=6))
    assert not torch.equal(entry(X, a), entry(X, a))
    assert torch.equal(torch.get_rng_state(), state)
    if entry.module is None:
        assert torch.equal(v, entry(X, a, generator=torch.Generator().manual_seed(5)))


@pytest.mark.parametrize("entry", UNIF)
def test_unif_dtype_device_and_float32_agreement(entry, device):
    X, _, a, _ = make_data(device=device, seed=7)
    values = {}
    for dt in (torch.float32, torch.float64):
        v = entry(X.to(dt), a.to(dt), seed=3)
        assert (v.dtype, v.device, v.shape) == (dt, X.device, ())
        values[dt] = v
    torch.testing.assert_close(values[torch.float32].double(), values[F64], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("entry", UNIF)
@pytest.mark.parametrize("weighted", [False, True])
def test_unif_batch_equals_loop(entry, weighted, device):
    X, _, a, _ = make_data(N=6, batch=3, device=device, seed=8)
    a = a if weighted else None
    batched = entry(X, a, seed=2)
    loop = torch.stack([entry(X[i], None if a is None else a[i], seed=2) for i in range(3)])
    assert batched.shape == (3,)
    assert_close(batched, loop, scale=10)


@pytest.mark.parametrize("entry", UNIF_SLICED)
def test_unif_batch_with_per_item_slices_equals_loop(entry, device):
    X, _, a, _ = make_data(N=6, batch=3, device=device, seed=9)
    probe = Entry(entry.name, entry.fn, entry.kwargs, frozenset(), entry.slices)
    batched_rand, items = _per_item_slices(probe, 3, 3, device)
    batched = entry(X, a, **batched_rand)
    loop = torch.stack([entry(X[i], a[i], **items[i]) for i in range(3)])
    assert_close(batched, loop, scale=10)


@pytest.mark.parametrize("entry", UNIF_SLICED)
def test_unif_weight_semantics(entry, device):
    X, _, a, _ = make_data(N=5, device=device, seed=11)
    rand = unif_frozen(entry, 3, device=device)
    # a=None is uniform
    assert_close(entry(X, **rand), entry(X, torch.full_like(a, 0.2), **rand))
    # integer weights = replicated atoms
    cs = torch.tensor([1, 2, 3, 1, 1], device=device)
    assert_close(entry(X, cs.to(F64) / cs.sum(), **rand), entry(X.repeat_interleave(cs, 0), **rand))
    # a zero-weight atom changes nothing and gets a zero gradient
    X2 = torch.cat([X, torch.tensor([[0.4, -0.3, 0.9]], dtype=F64, device=device)])
    X2.requires_grad_()
    a2 = torch.cat([a, a.new_zeros(1)])
    value = entry(X2, a2, **rand)
    assert_close(value, entry(X, a, **rand), scale=10)
    (g,) = torch.autograd.grad(value, X2)
    assert float(g[-1].abs().max()) <= 1e-9
    # the uniform side carries the total mass of a
    assert_close(entry(X, 3 * a, **rand), 3**entry.mass_degree * entry(X, a, **rand), scale=10)


@pytest.mark.parametrize("entry", UNIF_SLICED)
def test_unif_gradcheck(entry):
    X, _, a0, _ = make_data(N=5, seed=14)
    rand = unif_frozen(entry, 3)
    u = torch.zeros(5, dtype=F64, requires_grad=True)

    def f(X_s, u):
        return entry(X_s, a0 + (u - u.mean()), **rand)

    assert torch.autograd.gradcheck(f, (X.requires_grad_(), u))


@pytest.mark.parametrize("entry", UNIF)
def test_unif_finite_gradients_at_duplicates(entry, device):
    X, _, _, _ = make_data(device=device, seed=16)
    Xd = torch.cat([X[:3], X[:3]]).requires_grad_()
    (g,) = torch.autograd.grad(entry(Xd, seed=0), Xd)
    assert bool(torch.isfinite(g).all())


@pytest.mark.parametrize("entry", UNIF)
def test_unif_nonfinite_input(entry, device):
    X, _, a, _ = make_data(device=device, seed=23)
    for bad in (math.nan, math.inf):
        Xbad = X.clone()
        Xbad[1, 2] = bad
        with pytest.raises(ValueError, match="X_s contains NaN or Inf"):
            entry(Xbad, a, seed=0)
        assert not bool(torch.isfinite(entry(Xbad, a, seed=0, validate=False)))
    abad = a.clone()
    abad[0] = math.nan
    with pytest.raises(ValueError, match="a contains NaN or Inf"):
        entry(X, abad, seed=0)


@pytest.mark.parametrize("entry", UNIF_MODULES)
def test_unif_module_equals_function(entry, device):
    X, _, a, _ = make_data(batch=3, device=device, seed=20)
    fixed = entry.module(**entry.kwargs, seed=5, resample=False, reduction="none")
    v = fixed(X, a)
    assert torch.equal(v, fixed(X, a))
    assert torch.equal(v, entry.function(X, a, **entry.kwargs, seed=fixed._fixed_seed))
    mod = entry.module(**entry.kwargs, seed=5, resample=True, reduction="none")
    g = torch.Generator().manual_seed(5)
    first = mod(X, a)
    assert torch.equal(first, entry.function(X, a, **entry.kwargs, generator=g))
    assert not torch.equal(first, mod(X, a))
    for reduction, want in (("mean", v.mean()), ("sum", v.sum())):
        out = entry.module(**entry.kwargs, seed=5, resample=False, reduction=reduction)(X, a)
        assert_close(out, want)
