"""Euclidean gradient flows: move a point cloud onto a target by descending a distance.

The source cloud ``X`` (the optimised parameter) starts at ``N(0, I)`` and follows Adam
on ``loss(X, Y)``; fresh trees / projections are drawn at every iteration, centred
on the current pair of clouds. The error is the **exact** squared Wasserstein-2
distance between the clouds, ``ot.emd2`` in float64 (the papers compute it in float32,
which has a noise floor near 1e-8).

Datasets (built in, synthetic, centred to zero mean):

* ``25gaussians``: 25 small Gaussians on a grid, as in the Db-TSW experiments;
* ``swissroll``: the 2-D Swiss roll of the same experiments;
* ``gaussian<d>d``: ``N(mu, I_d)`` with ``mu ~ U([0, 1)^d)`` (the high-dimensional
  Gaussians of the TSW-SL paper's Table 2).

Methods (``--methods``, comma-separated keys): ``sw2``, ``sw1``, ``orthsw``, ``maxsw``,
``tswsl``, ``tswsl-conc``, ``dbtsw``, ``dbtsw-orth``, ``circular``, ``circular-r0``,
``spatial``, ``dbtsw-strat`` and ``dbtsw-qmc`` (Db-TSW with ``sampling="orthogonal"`` /
``"qmc"``), ``dbtsw-orth-strat`` (Db-TSW⊥ with ``sampling="orthogonal"``), ``fwtsw``
(FW-TSW: Db-TSW with roots around the geometric median, ``center="median"``) and
``fwtsw-star`` (FW-TSW*: also ``directions="paths"``). They compare tree-sliced
distances with sliced baselines at **equal total line counts**, including SW_1 and SW_2:
with a point-independent split, TSW-SL is exactly an SW_1 over its lines, so SW_1
isolates what the tree adds.

The rows of the papers' full tables (TSW-SL paper, Table 1) add
``lcvsw`` (:func:`tsw.lcv_sw`, the lower control variate), ``ebsw`` (:func:`tsw.eb_sw`,
importance-sampling EBSW with f = exp), ``rpsw`` (:func:`tsw.rp_sw`; ``--rpsw-kappa``
perturbs its directions), ``maxtswsl`` (:func:`tsw.max_tsw_sl`: one chain tree of
``--n-lines`` lines moved uphill by ``--max-iter`` inner steps, the first of angle
``--max-lr``; ``maxsw`` takes the same two options), ``tssobolev`` (:func:`tsw.ts_sobolev`
at ``--sobolev-p``, Db-TSW's trees and ``--delta``) and ``swgg`` (:func:`tsw.swgg`: the
cost in R^d of the monotone plan along the best of ``--lines`` random directions after
``--swgg-iter`` descent steps on the sphere, differentiated with the plan and the
direction held fixed; :func:`swgg_loss`). The papers' timings are
printed beside ours, labelled as theirs (A100). ``--ascent-check`` measures what the Max
rows' inner loop does at the papers' setting (100 plain gradient steps at lr 1e-4)
against the ascent used here, on the clouds of the first step.

Example: ``python -m benchmarks.gradient_flow --iters 500 --seeds 3`` (the README's
main job, about a minute on two CPU cores). The full Table 1:
``--dataset swissroll --methods sw2,maxsw,lcvsw,tswsl,maxtswsl`` (and ``25gaussians``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import ot
import torch

import tsw
from benchmarks._report import (
    add_run_args,
    mean_and_std,
    mean_std,
    plot_curves,
    prepare,
    print_table,
    progress,
    write_csv,
    write_results,
)
from tsw import datasets, metrics


def make_target(name: str, n: int, seed: int) -> torch.Tensor:
    """Target cloud of ``n`` points from :mod:`tsw.datasets`, centred to zero mean (float64).

    ``25gaussians`` is :func:`tsw.datasets.make_25gaussians`, ``swissroll``
    :func:`tsw.datasets.make_swiss_roll`, ``gaussian<d>d``
    :func:`tsw.datasets.make_gaussian` in dimension ``d``; each drawn with the seed
    ``10_000 + seed``.
    """
    s = 10_000 + seed
    if name == "25gaussians":
        Y = datasets.make_25gaussians(n, seed=s)
    elif name == "swissroll":
        Y = datasets.make_swiss_roll(n, seed=s)
    elif (
        name.startswith("gaussian") and name.endswith("d") and name[len("gaussian") : -1].isdigit()
    ):
        Y = datasets.make_gaussian(n, int(name[len("gaussian") : -1]), seed=s)
    else:
        raise ValueError(f"unknown dataset {name!r}")
    return Y - Y.mean(0)


def methods(lines: int, n_lines: int, dim: int, args: argparse.Namespace) -> dict[str, dict]:
    """Every method at ``lines`` total lines: key -> {"name", "fn", "kw", "lr"}.

    Tree methods use ``lines // n_lines`` trees (Db-TSW⊥ needs ``k <= d`` and uses
    ``min(n_lines, dim)`` lines per tree); sliced methods use ``lines`` directions.
    """
    T = max(lines // n_lines, 1)
    ko = min(n_lines, dim)
    To = max(lines // ko, 1)
    tree = {"p": args.p, "root_std": args.root_std}
    lr_tree = args.lr_tree if args.lr_tree is not None else args.lr
    table = {
        "sw2": (f"SW_2 (L={lines})", tsw.sw, {"n_projections": lines, "p": 2}, args.lr),
        "sw1": (f"SW_1 (L={lines})", tsw.sw, {"n_projections": lines, "p": 1}, args.lr),
        "orthsw": (
            f"Orthogonal SW_2 (L={lines})",
            tsw.sw,
            {"n_projections": lines, "p": 2, "orthogonal": True},
            args.lr,
        ),
        "maxsw": (
            f"Max-SW_2 ({args.max_iter} inner steps)",
            tsw.max_sw,
            {"p": 2, "n_iter": args.max_iter, "lr": args.max_lr},
            args.lr,
        ),
        "lcvsw": (
            f"LCV-SW_2 (L={lines})",
            tsw.lcv_sw,
            {"n_projections": lines, "p": 2},
            args.lr,
        ),
        "ebsw": (
            f"EB-SW_2 (L={lines}, f = exp)",
            tsw.eb_sw,
            {"n_projections": lines, "p": 2},
            args.lr,
        ),
        "rpsw": (
            f"RP-SW_2 (L={lines}"
            + ("" if args.rpsw_kappa is None else f", kappa={args.rpsw_kappa:g}")
            + ")",
            tsw.rp_sw,
            {"n_projections": lines, "p": 2, "kappa": args.rpsw_kappa},
            args.lr,
        ),
        "maxtswsl": (
            f"MaxTSW-SL chain (1x{n_lines}, {args.max_iter} inner steps)",
            tsw.max_tsw_sl,
            {
                "n_trees": 1,
                "n_lines": n_lines,
                "n_iter": args.max_iter,
                "lr": args.max_lr,
                **tree,
            },
            lr_tree,
        ),
        "tssobolev": (
            f"TS-Sobolev ({T}x{n_lines}, delta={args.delta:g}, p={args.sobolev_p:g})",
            tsw.ts_sobolev,
            {
                "n_trees": T,
                "n_lines": n_lines,
                "delta": args.delta,
                "p": args.sobolev_p,
                "root_std": args.root_std,
            },
            lr_tree,
        ),
        "tswsl": (
            f"TSW-SL chain ({T}x{n_lines})",
            tsw.tsw_sl,
            {"n_trees": T, "n_lines": n_lines, "tree": "chain", **tree},
            lr_tree,
        ),
        "tswsl-conc": (
            f"TSW-SL concurrent ({T}x{n_lines})",
            tsw.tsw_sl,
            {"n_trees": T, "n_lines": n_lines, "tree": "concurrent", **tree},
            lr_tree,
        ),
        "dbtsw": (
            f"Db-TSW ({T}x{n_lines}, delta={args.delta:g})",
            tsw.db_tsw,
            {"n_trees": T, "n_lines": n_lines, "delta": args.delta, **tree},
            lr_tree,
        ),
        "dbtsw-orth": (
            f"Db-TSW⊥ ({To}x{ko}, delta={args.delta:g})",
            tsw.db_tsw,
            {"n_trees": To, "n_lines": ko, "delta": args.delta, "orthogonal": True, **tree},
            lr_tree,
        ),
        "dbtsw-strat": (
            f"Db-TSW stratified ({T}x{n_lines}, delta={args.delta:g})",
            tsw.db_tsw,
            {
                "n_trees": T,
                "n_lines": n_lines,
                "delta": args.delta,
                "sampling": "orthogonal",
                **tree,
            },
            lr_tree,
        ),
        "dbtsw-orth-strat": (
            f"Db-TSW⊥ stratified ({To}x{ko}, delta={args.delta:g})",
            tsw.db_tsw,
            {
                "n_trees": To,
                "n_lines": ko,
                "delta": args.delta,
                "orthogonal": True,
                "sampling": "orthogonal",
                **tree,
            },
            lr_tree,
        ),
        "dbtsw-qmc": (
            f"Db-TSW QMC ({T}x{n_lines}, delta={args.delta:g})",
            tsw.db_tsw,
            {"n_trees": T, "n_lines": n_lines, "delta": args.delta, "sampling": "qmc", **tree},
            lr_tree,
        ),
        "fwtsw": (
            f"FW-TSW ({T}x{n_lines}, median roots, delta={args.delta:g})",
            tsw.db_tsw,
            {"n_trees": T, "n_lines": n_lines, "delta": args.delta, "center": "median", **tree},
            lr_tree,
        ),
        "fwtsw-star": (
            f"FW-TSW* ({T}x{n_lines}, median roots, path directions)",
            tsw.db_tsw,
            {
                "n_trees": T,
                "n_lines": n_lines,
                "delta": args.delta,
                "center": "median",
                "directions": "paths",
                **tree,
            },
            lr_tree,
        ),
        "circular": (
            f"CircularTSW ({T}x{n_lines}, r={args.radius:g})",
            tsw.circular_tsw,
            {"n_trees": T, "n_lines": n_lines, "radius": args.radius, "delta": args.delta, **tree},
            lr_tree,
        ),
        "circular-r0": (
            f"CircularTSW r=0 ({T}x{n_lines})",
            tsw.circular_tsw,
            {"n_trees": T, "n_lines": n_lines, "radius": 0.0, "delta": args.delta, **tree},
            lr_tree,
        ),
        "spatial": (
            f"SpatialTSW pow ({T}x{n_lines})",
            tsw.spatial_tsw,
            {"n_trees": T, "n_lines": n_lines, "mapping": "pow", "delta": args.delta, **tree},
            lr_tree,
        ),
    }
    table["swgg"] = (
        f"SWGG (L={lines}, {args.swgg_iter} descent steps)",
        swgg_loss,
        {"n_projections": lines, "n_iter": args.swgg_iter},
        args.lr,
    )
    return {k: {"name": v[0], "fn": v[1], "kw": v[2], "lr": v[3]} for k, v in table.items()}


def swgg_loss(X_s: torch.Tensor, X_t: torch.Tensor, **options) -> torch.Tensor:
    """SWGG as a loss: the cost of :func:`tsw.swgg`'s plan (squared Euclidean), no plan kept.

    The cost is differentiable with respect to the points, the plan and its direction
    held fixed; ``options`` go to :func:`tsw.swgg` (a sparse plan is built, not used).
    """
    return tsw.swgg(X_s, X_t, dense=False, **options)[1]


#: The iterations of the published W2^2 values below.
PUBLISHED_ITERS = (500, 1000, 1500, 2000, 2500)
#: Published W2^2 at iterations 500/1000/1500/2000/2500 and s/iter.
#: TSW-SL paper (ICML 2025) Table 1, all six rows: source N(0, I), 100 points, SW
#: variants L=100, TSW-SL 25x4, lr 5e-3 (inner lr 1e-4 and 100 inner steps for the Max
#: rows), 10 runs, A100, float32 metric. The Db-TSW rows are the FW-TSW paper's rerun
#: (5 runs, iterations 1000/2000/2500 only).
PUBLISHED = {
    ("swissroll", "sw2"): ([5.73e-3, 2.04e-3, 1.23e-3, 1.11e-3, 1.05e-3], 0.009),
    ("swissroll", "maxsw"): ([2.47e-2, 1.03e-2, 6.10e-3, 4.47e-3, 3.45e-3], 2.46),
    ("swissroll", "swgg"): ([3.84e-2, 1.53e-2, 1.02e-2, 4.49e-3, 3.57e-5], 0.011),
    ("swissroll", "lcvsw"): ([7.28e-3, 1.40e-3, 1.38e-3, 1.38e-3, 1.36e-3], 0.010),
    ("swissroll", "tswsl"): ([9.41e-3, 2.03e-7, 9.63e-8, 4.44e-8, 3.65e-8], 0.014),
    ("swissroll", "maxtswsl"): ([2.75e-6, 8.24e-7, 5.14e-7, 5.02e-7, 5.00e-7], 2.53),
    ("25gaussians", "sw2"): ([1.61e-1, 9.52e-2, 3.44e-2, 2.56e-2, 2.20e-2], 0.006),
    ("25gaussians", "maxsw"): ([5.09e-1, 2.36e-1, 1.33e-1, 9.70e-2, 8.48e-2], 2.38),
    ("25gaussians", "swgg"): ([3.10e-1, 1.17e-1, 3.38e-2, 3.58e-3, 2.54e-4], 0.009),
    ("25gaussians", "lcvsw"): ([3.38e-1, 6.64e-2, 3.06e-2, 3.06e-2, 3.02e-2], 0.009),
    ("25gaussians", "tswsl"): ([3.49e-1, 9.06e-2, 2.96e-2, 1.20e-2, 3.03e-7], 0.010),
    ("25gaussians", "maxtswsl"): ([1.12e-1, 8.28e-3, 1.61e-6, 7.32e-7, 5.19e-7], 2.49),
    ("25gaussians", "tswsl-conc"): ([None, 1.37e-6, None, 9.13e-7, 8.76e-7], None),
    ("25gaussians", "dbtsw"): ([None, 1.55e-6, None, 9.50e-7, 8.55e-7], None),
    ("25gaussians", "dbtsw-orth"): ([None, 1.79e-6, None, 1.14e-6, 1.03e-6], None),
}
#: TSW-SL paper Table 2 (SW / TSW-SL, lr 5e-2 for TSW-SL), same checkpoints.
for _d, _sw, _tsw in [
    (
        10,
        [4.32e-3, 2.94e-3, 2.81e-3, 2.23e-3, 2.28e-3],
        [2.81e-3, 2.00e-3, 1.55e-3, 1.59e-3, 1.75e-3],
    ),
    (50, [50.41, 45.69, 42.56, 38.81, 35.75], [39.26, 21.91, 11.91, 4.08, 1.72]),
    (75, [92.39, 90.79, 90.07, 86.58, 90.31], [79.71, 67.99, 53.92, 44.91, 31.61]),
    (100, [130.12, 128.13, 128.58, 129.80, 128.29], [117.66, 103.23, 93.41, 80.46, 75.28]),
    (150, [214.09, 213.71, 215.05, 212.90, 216.32], [203.30, 190.62, 186.77, 183.52, 182.63]),
    (200, [302.84, 301.35, 303.07, 302.70, 301.51], [289.83, 283.34, 276.94, 279.24, 279.08]),
]:
    PUBLISHED[(f"gaussian{_d}d", "sw2")] = (_sw, None)
    PUBLISHED[(f"gaussian{_d}d", "tswsl")] = (_tsw, None)


def published_source(dataset: str, key: str) -> str:
    """Where the published row of ``(dataset, key)`` comes from."""
    if dataset.startswith("gaussian"):
        return "TSW-SL paper, Table 2"
    if key in ("tswsl-conc", "dbtsw", "dbtsw-orth"):
        return "FW-TSW paper's rerun (5 runs)"
    return "TSW-SL paper, Table 1 (10 runs)"


def _chain_with(trees: tsw.ChainLines, directions: torch.Tensor) -> tsw.ChainLines:
    """The chain with new directions, its root and attachment coordinates kept."""
    t = trees.attachments
    root = trees.sources[..., :1, :]
    steps = t[..., 1:, None] * directions[..., :-1, :]
    sources = torch.cat([root, root + steps.cumsum(-2)], dim=-2)
    return tsw.ChainLines(sources, directions, validate=False)


def _planar_max(X: torch.Tensor, Y: torch.Tensor, p: float, n: int = 20001) -> float:
    """max over the directions of W_p (planar clouds: a fine grid of angles)."""
    angles = torch.linspace(0, np.pi, n, dtype=torch.float64)
    grid = torch.stack([angles.cos(), angles.sin()])
    _, info = tsw.sw(X, Y, projections=grid, p=p, log=True)
    return float(info["per_tree"].max() ** (1 / p))


def ascent_check(args: argparse.Namespace, starts: int = 10) -> int:
    """What 100 inner steps do: the papers' plain steps at lr 1e-4 against this ascent.

    On the clouds of the flows' first step (source N(0, I) of seed 0, each dataset's
    target), from ``starts`` random starts: Max-SW_2's value at a random direction, after
    100 plain gradient steps ``theta <- (theta + 1e-4 grad) / |.|`` (the official codes'
    inner loop), after :func:`tsw.max_sw`'s ascent, and the true maximum (a grid of
    angles); the same for MaxTSW-SL on one chain tree of 4 lines (TSW-SL's value), whose
    maximum is max-SW_1.
    """
    out = prepare(args)
    rows, payload = [], {}
    for dataset in ("swissroll", "25gaussians"):
        Y = make_target(dataset, args.n, 0)
        g = torch.Generator().manual_seed(0)
        X = torch.randn(Y.shape, generator=g, dtype=torch.float64)
        res: dict[str, list[float]] = {k: [] for k in ("sw_start", "sw_plain", "sw_ours")}
        res |= {k: [] for k in ("tsw_start", "tsw_plain", "tsw_ours")}
        for s in range(starts):
            theta = tsw.sample_projections(2, 1, seed=s, dtype=torch.float64)
            res["sw_start"].append(float(tsw.sw(X, Y, projections=theta)))
            for _ in range(100):
                th = theta.clone().requires_grad_()
                value = tsw.sw(X, Y, projections=th / th.norm(), validate=False)
                (grad,) = torch.autograd.grad(value, th)
                theta = theta + 1e-4 * grad
                theta = theta / theta.norm()
            res["sw_plain"].append(float(tsw.sw(X, Y, projections=theta)))
            res["sw_ours"].append(float(tsw.max_sw(X, Y, n_iter=100, lr=1e-4, n_init=1, seed=s)))
            start = tsw.sample_chain_lines(
                2,
                n_trees=1,
                n_lines=4,
                center=(X.mean(0) + Y.mean(0)) / 2,
                seed=s,
                dtype=torch.float64,
            )
            res["tsw_start"].append(float(tsw.tsw_sl(X, Y, trees=start)))
            dirs = start.directions
            for _ in range(100):
                d = dirs.clone().requires_grad_()
                value = tsw.tsw_sl(X, Y, trees=_chain_with(start, d), validate=False)
                (grad,) = torch.autograd.grad(value, d)
                dirs = dirs + 1e-4 * grad
                dirs = dirs / dirs.norm(dim=-1, keepdim=True)
            res["tsw_plain"].append(float(tsw.tsw_sl(X, Y, trees=_chain_with(start, dirs))))
            res["tsw_ours"].append(float(tsw.max_tsw_sl(X, Y, trees=start, n_iter=100, lr=1e-4)))
        best2, best1 = _planar_max(X, Y, 2), _planar_max(X, Y, 1)
        payload[dataset] = {**res, "max_sw2": best2, "max_sw1": best1}
        for label, keys, best in (
            ("Max-SW_2", ("sw_start", "sw_plain", "sw_ours"), best2),
            ("MaxTSW-SL (1x4 chain, p=1)", ("tsw_start", "tsw_plain", "tsw_ours"), best1),
        ):
            rows.append(
                [dataset, label, *[mean_std(res[k], ".4f", ".3f") for k in keys], f"{best:.4f}"]
            )
    header = ["dataset", "method", "random start", "100 plain steps, lr 1e-4"]
    header += ["100 steps of the ascent here", "maximum"]
    print_table(
        f"the Max rows' inner loop on the first step's clouds, mean ± std over {starts} starts",
        header,
        rows,
    )
    (out / "ascent_check.json").write_text(json.dumps(payload, indent=1))
    print(f"\nresults written to {(out / 'ascent_check.json').resolve()}")
    return 0


def w2_squared(X: torch.Tensor, Y: torch.Tensor) -> float:
    """Exact squared W2 between uniform clouds, in float64 (:func:`tsw.metrics.wasserstein`)."""
    return metrics.wasserstein(X, Y, power=True)


def lr_scheduler(opt: torch.optim.Optimizer, schedule: str, iters: int):
    """``constant``; ``cosine`` (annealed to 0 at ``iters``); ``step`` (x0.1 at 60% and 80%)."""
    if schedule == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=iters)
    if schedule == "step":
        marks = [int(0.6 * iters), int(0.8 * iters)]
        return torch.optim.lr_scheduler.MultiStepLR(opt, milestones=marks, gamma=0.1)
    return None


def flow(
    method, Y, *, iters, seed, checkpoints, dtype, source_std=1.0, budget=None, schedule="constant"
):
    """Run one flow; return errors at checkpoints, s/iter, final errors and iterations.

    With ``budget`` (seconds of optimisation time, metric excluded) the flow stops at
    the first iteration past the budget (or at ``iters``), for equal-time comparisons.
    ``schedule`` is the learning-rate schedule of :func:`lr_scheduler`.
    """
    g = torch.Generator().manual_seed(seed)
    X = source_std * torch.randn(Y.shape, generator=g, dtype=torch.float64)
    X = X.to(dtype).requires_grad_(True)
    Yt = Y.to(dtype)
    opt = torch.optim.Adam([X], lr=method["lr"])
    sched = lr_scheduler(opt, schedule, iters)
    gen = torch.Generator().manual_seed(1_000 + seed)
    fn, kw = method["fn"], method["kw"]
    errors, elapsed, it = {}, 0.0, 0
    while it < iters and (budget is None or elapsed < budget):
        it += 1
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        fn(X, Yt, generator=gen, validate=False, **kw).backward()
        opt.step()
        if sched is not None:
            sched.step()
        elapsed += time.perf_counter() - t0
        if it in checkpoints:
            errors[it] = w2_squared(X, Y)
    final = {"w2sq_float64": w2_squared(X, Y), "w2sq_float32": w2_squared_float32(X, Y)}
    return {"errors": errors, "s_per_iter": elapsed / it, "iterations": it, **final}


def w2_squared_float32(X: torch.Tensor, Y: torch.Tensor) -> float:
    """The papers' metric: ot.emd2 on float32 squared distances (noise floor ~1e-8)."""
    Xn, Yn = X.detach().float().numpy(), Y.detach().float().numpy()
    M = ot.dist(Xn, Yn)
    n, m = len(Xn), len(Yn)
    w_n, w_m = np.full(n, 1 / n, dtype=np.float32), np.full(m, 1 / m, dtype=np.float32)
    return float(ot.emd2(w_n, w_m, M))


DEFAULT_METHODS = "sw2,sw1,tswsl,dbtsw,dbtsw-orth"

OUTPUT_HELP = """output (under --out, default benchmarks/out/gradient_flow; DATASET = --dataset):
  stdout                 the settings, then the table of this run: exact W2^2 (mean ± std
                         over the seeds) at 5 checkpoints (--iters / 5 apart), the last
                         step's W2^2 with the papers' float32 metric ("it C, f32
                         metric"), the median s/iter with the CPU thread count, and a
                         line that explains the columns; then, where the papers report
                         the method, a second table of their numbers at their own
                         iterations (500..2500; * marks those past --iters), their A100
                         s/iter, and a line that says which of their columns compares
  DATASET.csv            one row per method, numeric columns: key, method, n_seeds,
                         w2sq_it<C>_mean, w2sq_it<C>_std for each checkpoint C,
                         w2sq_final_float32_mean / _std, s_per_iter_median (seconds);
                         with --time-budget: iterations_mean, w2sq_float64_mean / _std,
                         s_per_iter_median
  DATASET_published.csv  the published values: key, method, w2sq_it500 .. w2sq_it2500
                         (empty where not published), source, s_per_iter_a100
  DATASET.json           the settings and every run (per seed: W2^2 at each checkpoint,
                         s/iter, iterations, final W2^2 in float64 and float32)
  DATASET.png            exact W2^2 against the iteration, log scale: the mean over the
                         seeds and a band from the smallest to the largest seed's value
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, epilog=OUTPUT_HELP, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--dataset", default="25gaussians")
    ap.add_argument("--n", type=int, default=100, help="points per cloud")
    ap.add_argument("--iters", type=int, default=2500)
    ap.add_argument("--lr", type=float, default=5e-3, help="Adam lr of the sliced methods")
    ap.add_argument("--lr-tree", type=float, default=None, help="lr of tree methods (--lr)")
    ap.add_argument("--lr-schedule", default="constant", choices=["constant", "cosine", "step"])
    ap.add_argument("--source-std", type=float, default=1.0, help="source N(0, std^2 I)")
    ap.add_argument("--lines", type=int, default=100, help="total lines per iteration")
    ap.add_argument("--n-lines", type=int, default=4, help="lines per tree")
    ap.add_argument("--p", type=float, default=1.0, help="p of the tree distances")
    ap.add_argument("--delta", type=float, default=1.0, help="Db-TSW split temperature")
    ap.add_argument("--root-std", type=float, default=0.1, help="root spread of trees")
    ap.add_argument("--radius", type=float, default=0.01, help="CircularTSW radius")
    ap.add_argument("--max-iter", type=int, default=100, help="inner steps of the Max rows")
    ap.add_argument(
        "--max-lr", type=float, default=1e-4, help="first inner step of the Max rows [rad]"
    )
    ap.add_argument("--sobolev-p", type=float, default=2.0, help="p of TS-Sobolev")
    ap.add_argument("--rpsw-kappa", type=float, default=None, help="RP-SW perturbation")
    ap.add_argument("--swgg-iter", type=int, default=10, help="SWGG's descent steps per step")
    ap.add_argument(
        "--ascent-check",
        action="store_true",
        help="measure what 100 inner steps at lr 1e-4 do (the Max rows), then exit",
    )
    ap.add_argument("--methods", default=DEFAULT_METHODS, help="comma-separated keys")
    ap.add_argument("--time-budget", type=float, default=None, help="equal-time mode [s]")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    add_run_args(ap, "gradient_flow")
    args = ap.parse_args(argv)
    if args.ascent_check:
        return ascent_check(args)
    out = prepare(args)
    step = max(args.iters // 5, 1)
    checkpoints = sorted({min(step * i, args.iters) for i in range(1, 6)})
    dtype = getattr(torch, args.dtype)
    settings = vars(args) | {"checkpoints": checkpoints, "metric": "exact W2^2 (ot.emd2, float64)"}
    print(f"settings: {settings}")
    dim = make_target(args.dataset, 2, 0).shape[1]
    table = methods(args.lines, args.n_lines, dim, args)
    keys = [k.strip() for k in args.methods.split(",") if k.strip()]
    unknown = [k for k in keys if k not in table]
    if unknown:
        ap.error(f"unknown methods {unknown}; choose from {sorted(table)}")
    jobs = [(k, s) for k in keys for s in range(args.seeds)]
    bar = progress(jobs, "gradient flows")
    raw: dict[str, list] = {k: [] for k in keys}
    for key, seed in bar:
        Y = make_target(args.dataset, args.n, seed)
        run = flow(
            table[key],
            Y,
            iters=args.iters,
            seed=seed,
            checkpoints=[] if args.time_budget else checkpoints,
            dtype=dtype,
            source_std=args.source_std,
            budget=args.time_budget,
            schedule=args.lr_schedule,
        )
        raw[key].append({"seed": seed, **run})

    payload = {"settings": settings, "methods": {k: table[k]["name"] for k in keys}, "runs": raw}
    where = f"CPU, {torch.get_num_threads()} thread(s), {args.dtype}"
    if args.time_budget:
        header = ["method", "iterations", "final W2^2 (float64)", f"s/iter ({where})"]
        rows = [
            [
                table[k]["name"],
                f"{statistics.mean(r['iterations'] for r in raw[k]):.0f}",
                mean_std([r["w2sq_float64"] for r in raw[k]]),
                f"{statistics.median(r['s_per_iter'] for r in raw[k]):.4f}",
            ]
            for k in keys
        ]
        title = f"{args.dataset}: equal time, {args.time_budget:g} s per run ({args.seeds} seeds)"
        print_table(title, header, rows)
        numeric_header = ["key", "method", "n_seeds", "iterations_mean"]
        numeric_header += ["w2sq_float64_mean", "w2sq_float64_std", "s_per_iter_median"]
        numeric = [
            [
                k,
                table[k]["name"],
                len(raw[k]),
                statistics.mean(r["iterations"] for r in raw[k]),
                *mean_and_std([r["w2sq_float64"] for r in raw[k]]),
                statistics.median(r["s_per_iter"] for r in raw[k]),
            ]
            for k in keys
        ]
        write_results(out, args.dataset, numeric_header, numeric, payload)
    else:
        last = checkpoints[-1]
        header = ["method", *[f"it {c}" for c in checkpoints], f"it {last}, f32 metric"]
        header.append(f"s/iter ({where})")
        rows = [
            [
                table[k]["name"],
                *[mean_std([r["errors"][c] for r in raw[k]]) for c in checkpoints],
                mean_std([r["w2sq_float32"] for r in raw[k]]),
                f"{statistics.median(r['s_per_iter'] for r in raw[k]):.4f}",
            ]
            for k in keys
        ]
        title = f"{args.dataset}: exact W2^2, mean ± std over {args.seeds} seeds, this run"
        print_table(title, header, rows)
        print(
            f"it C: exact W2^2 between the flowed cloud and the target after C Adam steps, "
            f"ot.emd2 on float64 squared distances. it {last}, f32 metric: the same cloud "
            "at the last step, measured as the papers measure (ot.emd2 on float32 squared "
            "distances; noise floor about 1e-8): the column to set beside theirs."
        )
        numeric_header = ["key", "method", "n_seeds"]
        for c in checkpoints:
            numeric_header += [f"w2sq_it{c}_mean", f"w2sq_it{c}_std"]
        numeric_header += ["w2sq_final_float32_mean", "w2sq_final_float32_std"]
        numeric_header.append("s_per_iter_median")
        numeric = [
            [
                k,
                table[k]["name"],
                len(raw[k]),
                *[x for c in checkpoints for x in mean_and_std([r["errors"][c] for r in raw[k]])],
                *mean_and_std([r["w2sq_float32"] for r in raw[k]]),
                statistics.median(r["s_per_iter"] for r in raw[k]),
            ]
            for k in keys
        ]
        write_results(out, args.dataset, numeric_header, numeric, payload)
        published = [
            (k, PUBLISHED[(args.dataset, k)]) for k in keys if (args.dataset, k) in PUBLISHED
        ]
        if published:
            beyond = [c for c in PUBLISHED_ITERS if c > args.iters]
            pub_header = ["method"]
            pub_header += [f"it {c}{'*' * (c in beyond)}" for c in PUBLISHED_ITERS]
            pub_header.append("source")
            pub_header.append("s/iter (A100, float32)")
            pub_rows = [
                [
                    table[k]["name"],
                    *["-" if v is None else f"{v:.2e}" for v in vals],
                    published_source(args.dataset, k),
                    "-" if spi is None else f"{spi:.3f}",
                ]
                for k, (vals, spi) in published
            ]
            print_table(
                f"{args.dataset}: published exact W2^2 (float32 metric), at the papers' own "
                "iterations; not this run's",
                pub_header,
                pub_rows,
            )
            shared = [c for c in PUBLISHED_ITERS if c in checkpoints]
            note = f"The papers ran {PUBLISHED_ITERS[-1]} iterations, this run {args.iters}"
            if beyond:
                note += " (* marks the iterations it did not reach)"
            if last in PUBLISHED_ITERS:
                note += f". Their it {last} compares with this run's it {last}, f32 metric."
            elif shared:
                note += f". Their it {shared[-1]} compares with this run's it {shared[-1]}."
            else:
                note += ". None of their iterations is among this run's checkpoints."
            print(note)
            pub_numeric_header = ["key", "method", *[f"w2sq_it{c}" for c in PUBLISHED_ITERS]]
            pub_numeric_header += ["source", "s_per_iter_a100"]
            pub_numeric = [
                [
                    k,
                    table[k]["name"],
                    *["" if v is None else v for v in vals],
                    published_source(args.dataset, k),
                    "" if spi is None else spi,
                ]
                for k, (vals, spi) in published
            ]
            write_csv(out / f"{args.dataset}_published.csv", pub_numeric_header, pub_numeric)
        curves = {
            table[k]["name"]: [[r["errors"][c] for r in raw[k]] for c in checkpoints] for k in keys
        }
        plot_curves(
            {name: [statistics.mean(v) for v in vals] for name, vals in curves.items()},
            checkpoints,
            xlabel="iteration",
            ylabel="exact $W_2^2$ (float64)",
            title=(
                f"gradient flow onto {args.dataset}: N = {args.n}, {args.lines} lines per "
                f"step, lr {args.lr:g}, {args.dtype}\nmean over {args.seeds} seeds; "
                "band: min to max over the seeds"
            ),
            path=out / f"{args.dataset}.png",
            logy=True,
            bands={
                name: ([min(v) for v in vals], [max(v) for v in vals])
                for name, vals in curves.items()
            },
        )
    print(f"\nresults written to {out.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
