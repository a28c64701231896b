"""Barycenters: free support (sliced, tree-sliced, MFSWB) and fixed support on trees.

Free support (``tsw.free_support_barycenter``) against POT's exact
``ot.lp.free_support_barycenter`` from the same start: four Gaussians of 100 points in
R^2 (MFSWB's set-up) and the average of four 2-D shapes of 100 points (ring, square,
triangle, cross). Metrics: W, the mean exact W2 (``ot.emd2``) from the barycenter to the
marginals; F, the mean |W_i - W_j| over pairs (MFSWB's fairness); the time. When GeomLoss
imports (it is optional and no dependency of ``tsw``), its debiased Sinkhorn barycenter is a
row too on the tasks of at most ``--geomloss-max-n`` points: GeomLoss 0.3.1's
``geomloss.ot.barycenter_sample`` is an unimplemented stub (its body raises NameError), so
the row runs GeomLoss's documented Lagrangian scheme (its "Wasserstein barycenters in 2D"
example): x <- mean_k (x - grad_x S_eps(alpha, beta_k) / alpha_i), with
``SamplesLoss("sinkhorn", p=2, blur=0.01 * diameter, scaling=0.9)``, iterated from the same
start with POT's stopping rule. Figures: W against F per method and task
(``barycenters_free.png``) and the barycenters of the shapes (``barycenters_shapes.png``).

Fixed support (``tsw.tree_barycenter``): scikit-learn's 8x8 digits, one barycenter per
class on the pixel grid, against POT's entropic ``ot.bregman.barycenter`` and the exact
``ot.lp.barycenter``; metric: the exact objective sum_k w_k W1(bar, a_k) (``ot.emd2`` on
Euclidean pixel distances), time, and a figure of the ten barycenters.

Speed (``--parts speed``): 200 histograms (Gaussian bumps) on a 20 x 20 grid, the tree
barycenter on ten quadtrees at its defaults (and at ``stopThr=1e-4``, and on one quadtree)
against POT's ``ot.bregman.barycenter`` with ``reg`` = 1e-2 x the largest ground distance,
the runs interleaved and repeated (medians); metrics: the exact W1 objective (``ot.emd2``
against every histogram), the tree objective and its certified gap. Where the linear
program runs (smaller problems, ``--lp-sizes``), the tree barycenter's objective against
its exact minimum (scipy's HiGHS). Figure: ``barycenters_speed.png``.

Every part writes ``<stem>.csv`` (the table) and ``<stem>.json`` (the arguments, the
machine and every record). Run ``python -m benchmarks.barycenters`` (``--smoke`` for CI).
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import ot
import torch

import tsw
from benchmarks._report import (
    add_run_args,
    mean_std,
    prepare,
    print_table,
    save_with_legend,
    write_results,
)

FREE_METHODS = ("sw", "db_tsw", "tsw_sl")
GEOMLOSS_BLUR = 0.01  # GeomLoss's blur, relative to the diameter of the pooled data
GEOMLOSS_SCALING = 0.9
GEOMLOSS_ROW = (
    f"GeomLoss sinkhorn (blur={GEOMLOSS_BLUR:g} x diameter, scaling={GEOMLOSS_SCALING:g})"
)
POT_EXACT = "POT exact (free_support_barycenter)"


def payload(args: argparse.Namespace, records: list[dict], **extra: object) -> dict:
    """The JSON of a part: its arguments, the machine and every record."""
    machine = {
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "pot": ot.__version__,
        "torch_threads": torch.get_num_threads(),
    }
    return {"args": vars(args), "machine": machine, "records": records, **extra}


def geomloss_status() -> tuple[bool, str]:
    """Whether GeomLoss's row can run here, and a line saying what is run (or why not)."""
    try:
        import geomloss
    except ImportError:
        return False, "GeomLoss: not run (geomloss is not installed here; it is optional)"
    version = getattr(geomloss, "__version__", "?")
    try:
        from geomloss.ot import barycenter_sample

        barycenter_sample(torch.zeros(2, 3, 2, dtype=torch.float64))
        stub = "ran on a probe, but its output is not used here"
    except Exception as err:  # 0.3.1: an unimplemented stub (NameError)
        stub = f"not run: {type(err).__name__}: {err}"
    return True, (
        f"GeomLoss {version}: geomloss.ot.barycenter_sample {stub}; the GeomLoss row is its "
        f"documented Lagrangian Sinkhorn-divergence barycenter ({GEOMLOSS_ROW})"
    )


def geomloss_barycenter(
    Ys: list[np.ndarray], X0: np.ndarray, num_iter: int, stop_thr: float = 1e-7
) -> np.ndarray:
    """GeomLoss's free-support barycenter: Lagrangian steps on the debiased Sinkhorn divergence.

    Each step moves every atom to the mean over the measures of x_i - grad_{x_i} S_eps / a_i
    (GeomLoss's "Wasserstein barycenters in 2D" update), until the squared displacement summed
    over the atoms is below ``stop_thr`` (POT's rule) or after ``num_iter`` steps.
    """
    from geomloss import SamplesLoss

    diameter = float(np.ptp(np.concatenate(Ys), axis=0).max())
    loss = SamplesLoss(
        "sinkhorn",
        p=2,
        blur=GEOMLOSS_BLUR * diameter,
        scaling=GEOMLOSS_SCALING,
        debias=True,
        backend="tensorized",
    )
    ys = [torch.tensor(Y) for Y in Ys]
    bs = [torch.full((len(Y),), 1 / len(Y), dtype=torch.float64) for Y in Ys]
    x = torch.tensor(X0)
    a = torch.full((len(x),), 1 / len(x), dtype=torch.float64)
    for _ in range(num_iter):
        x.requires_grad_(True)
        grads = [torch.autograd.grad(loss(a, x, b, y), [x])[0] for b, y in zip(bs, ys, strict=True)]
        new = x.detach() - sum(grads) / (len(ys) * a[:, None])
        moved = float(((new - x.detach()) ** 2).sum())
        x = new
        if moved < stop_thr:
            break
    return x.detach().numpy()


def gaussians(n: int, seed: int) -> list[np.ndarray]:
    """Four Gaussians in R^2 at unequal distances from their centre (MFSWB's test)."""
    rng = np.random.default_rng(seed)
    means = [(0.0, 0.0), (20.0, 0.0), (18.0, 8.0), (18.0, -8.0)]
    stds = [1.0, 2.0, 1.0, 1.5]
    return [m + s * rng.standard_normal((n, 2)) for m, s in zip(means, stds, strict=True)]


def shapes(n: int, seed: int) -> list[np.ndarray]:
    """A ring, a square, a triangle and a cross (their outlines), each of ``n`` points."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, 1, n)
    ring = np.stack([np.cos(2 * np.pi * t), np.sin(2 * np.pi * t)], 1)

    def polygon(corners: np.ndarray) -> np.ndarray:
        k = len(corners)
        s = rng.uniform(0, k, n)
        i = np.floor(s).astype(int)
        f = (s - i)[:, None]
        return corners[i] * (1 - f) + corners[(i + 1) % k] * f

    square = polygon(np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], dtype=float))
    h = math.sqrt(3) / 2
    triangle = polygon(np.array([[-1, -h / 1.5], [1, -h / 1.5], [0, 2 * h / 1.5]]))
    u = rng.uniform(-1, 1, n)
    cross = np.where(
        (rng.uniform(size=n) < 0.5)[:, None], np.stack([u, 0 * u], 1), [0, 1] * u[:, None]
    )
    noise = 0.02 * rng.standard_normal((4, n, 2))
    return [c + e for c, e in zip((ring, square, triangle, cross), noise, strict=True)]


def fairness_metrics(X: np.ndarray, Ys: list[np.ndarray]) -> tuple[float, float]:
    """W (mean exact W2 to the marginals) and F (mean |W_i - W_j| over pairs)."""
    d = [math.sqrt(max(ot.emd2([], [], ot.dist(X, Y)), 0.0)) for Y in Ys]
    pairs = [abs(a - b) for i, a in enumerate(d) for b in d[i + 1 :]]
    return float(np.mean(d)), float(np.mean(pairs))


def free_support(
    args: argparse.Namespace, with_geomloss: bool
) -> tuple[list[list[str]], list[list[object]], list[dict], dict]:
    """Run every method on every task; return the table, its raw rows, the records, clouds."""
    rows, raw, records = [], [], []
    clouds: dict[str, dict[str, np.ndarray]] = {}
    tasks = {
        "4 Gaussians": (gaussians, args.n_free, args.seeds),
        "shapes": (shapes, args.n_free, args.seeds),
        f"4 Gaussians, n={args.n_large}": (gaussians, args.n_large, 1),
    }
    for task, (make, n, seeds) in tasks.items():
        results: dict[str, dict[str, list[float]]] = {}
        for seed in range(seeds):
            Ys = make(n, seed)
            rng = np.random.default_rng(100 + seed)
            pool = np.concatenate(Ys)
            X0 = pool[rng.choice(len(pool), n, replace=False)]
            # name -> None (POT), or (method, fairness) with method "geomloss" or a tsw distance
            runs: dict[str, tuple[str, float] | None] = {}
            runs[POT_EXACT] = None
            if with_geomloss and n <= args.geomloss_max_n:
                runs[GEOMLOSS_ROW] = ("geomloss", 0.0)
            for m in FREE_METHODS:
                runs[m] = (m, 0.0)
                runs[f"{m} + fairness {args.fairness:g}"] = (m, args.fairness)
            for name, spec in runs.items():
                t0 = time.perf_counter()
                n_iter = None
                if spec is None:
                    b = np.full(n, 1 / n)
                    X = ot.lp.free_support_barycenter(
                        Ys, [np.full(n, 1 / n)] * 4, X0, b, numItermax=args.iters
                    )
                elif spec[0] == "geomloss":
                    X = geomloss_barycenter(Ys, X0, args.iters)
                else:
                    method, lam = spec
                    opts = {"n_projections": args.lines} if method == "sw" else {}
                    if method != "sw":
                        opts = {"n_trees": args.lines // 4, "n_lines": 4}
                    X, log = tsw.free_support_barycenter(
                        Ys,
                        X_init=X0,
                        numItermax=args.iters,
                        distance=method,
                        fairness=lam,
                        seed=seed,
                        log=True,
                        **opts,
                    )
                    n_iter = log["n_iter"]
                elapsed = time.perf_counter() - t0
                W, F = fairness_metrics(X, Ys)
                r = results.setdefault(name, {"W": [], "F": [], "time": []})
                r["W"].append(W)
                r["F"].append(F)
                r["time"].append(elapsed)
                records.append(
                    {
                        "task": task,
                        "n": n,
                        "seed": seed,
                        "method": name,
                        "W": W,
                        "F": F,
                        "time_s": elapsed,
                        "n_iter": n_iter,
                    }
                )
                if task == "shapes" and seed == 0:
                    clouds.setdefault("measures", {"pooled": pool})
                    clouds[name] = {"X": np.asarray(X)}
        for name, r in results.items():
            rows.append(
                [
                    task,
                    name,
                    mean_std(r["W"], ".3f", ".3f"),
                    mean_std(r["F"], ".3f", ".3f"),
                    mean_std(r["time"], ".2f", ".2f"),
                ]
            )
            raw.append([task, name, *np.mean([r["W"], r["F"], r["time"]], axis=1).tolist()])
    return rows, raw, records, clouds


#: one colour per method family, one marker per variant (fairness: hollow)
FREE_STYLE = {
    "POT": ("black", "*"),
    "GeomLoss": ("tab:gray", "P"),
    "sw": ("tab:blue", "o"),
    "db_tsw": ("tab:red", "s"),
    "tsw_sl": ("tab:green", "^"),
}


def _free_style(name: str) -> tuple[str, str, bool]:
    family = name.split()[0]
    colour, marker = FREE_STYLE.get(family, ("tab:brown", "D"))
    return colour, marker, "fairness" in name


def plot_free(records: list[dict], clouds: dict, out: Path) -> None:
    """W against F (mean and spread over seeds) per task; the shapes' barycenters."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(r["task"] for r in records))
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.3 * len(tasks), 3.9), squeeze=False)
    handles: dict[str, object] = {}
    for ax, task in zip(axes[0], tasks, strict=True):
        sub = [r for r in records if r["task"] == task]
        for name in dict.fromkeys(r["method"] for r in sub):
            Ws = [r["W"] for r in sub if r["method"] == name]
            Fs = [r["F"] for r in sub if r["method"] == name]
            colour, marker, fair = _free_style(name)
            handles[name] = ax.errorbar(
                statistics.mean(Ws),
                statistics.mean(Fs),
                xerr=statistics.pstdev(Ws) if len(Ws) > 1 else None,
                yerr=statistics.pstdev(Fs) if len(Fs) > 1 else None,
                fmt=marker,
                ms=8,
                color=colour,
                mfc="white" if fair else colour,
                mew=1.5,
                elinewidth=0.8,
                capsize=2,
                label=name,
            )
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("W: mean exact W2 to the marginals (lower: closer)", fontsize=8)
        ax.set_ylabel("F: mean |W_i - W_j| (lower: fairer)", fontsize=8)
        ax.grid(True, lw=0.4, alpha=0.5)
        ax.tick_params(labelsize=7)
    save_with_legend(fig, handles, out / "barycenters_free.png", ncol=4, bottom=0.14)
    if not clouds:
        return
    names = [k for k in clouds if k != "measures"]
    cols = math.ceil(len(names) / 2)
    fig, axes = plt.subplots(2, cols, figsize=(2.4 * cols, 5.0), squeeze=False)
    pooled = clouds["measures"]["pooled"]
    for ax in axes.flat:
        ax.set_axis_off()
    for ax, name in zip(axes.flat, names, strict=False):
        ax.scatter(*pooled.T, s=1, c="lightgray")
        colour, _, _ = _free_style(name)
        ax.scatter(*clouds[name]["X"].T, s=3, c=colour)
        ax.set_title(name.replace(" (", "\n(").replace(" + ", "\n+ "), fontsize=7)
        ax.set_aspect("equal")
    fig.suptitle("the shapes (gray, all four) and their barycenters (seed 0)", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "barycenters_shapes.png", dpi=130)
    plt.close(fig)


def digits_hists(smoke: bool, limit: int | None) -> tuple[list[np.ndarray], np.ndarray]:
    from sklearn.datasets import load_digits

    data = load_digits()
    X = data.data.astype(np.float64)
    X = X / X.sum(1, keepdims=True)
    per_class = [X[data.target == c] for c in range(10)]
    if smoke:
        per_class = [h[:8] for h in per_class]
    if limit:
        per_class = [h[:limit] for h in per_class]
    grid = np.stack(np.meshgrid(np.arange(8.0), np.arange(8.0), indexing="ij"), -1).reshape(-1, 2)
    return per_class, grid


def exact_objective(bar: np.ndarray, hists: np.ndarray, M: np.ndarray) -> float:
    """sum_k w_k W1(bar, a_k), uniform w_k (``ot.emd2`` on the ground metric M)."""
    bar = bar / bar.sum()
    return float(np.mean([ot.emd2(bar, a, M) for a in hists]))


def fixed_support(
    args: argparse.Namespace, out: Path, limit: int | None
) -> tuple[list[list[str]], list[dict]]:
    """One barycenter per class (all images, or the first ``limit``: then also the LP)."""
    per_class, grid = digits_hists(args.smoke, limit)
    M = ot.dist(grid, grid, metric="euclidean")
    support = torch.tensor(grid)
    K = max(len(h) for h in per_class)
    H = np.zeros((10, K, 64))
    W = np.zeros((10, K))
    for c, h in enumerate(per_class):
        H[c, : len(h)] = h  # the rest: rows of zeros of weight zero (padding)
        W[c, : len(h)] = 1 / len(h)
    bars: dict[str, np.ndarray] = {}
    times: dict[str, float] = {}
    for T in (1, args.trees):
        name = f"tsw.tree_barycenter (quadtrees, T={T})"
        t0 = time.perf_counter()
        trees = tsw.sample_quadtrees(support, n_trees=T, seed=0)
        bars[name] = tsw.tree_barycenter(torch.tensor(H), trees, torch.tensor(W)).numpy()
        times[name] = time.perf_counter() - t0
    reg = args.reg
    name = f"POT ot.bregman.barycenter (reg={reg:g})"
    t0 = time.perf_counter()
    bars[name] = np.stack([ot.bregman.barycenter(h.T, M, reg) for h in per_class])
    times[name] = time.perf_counter() - t0
    if limit and not args.no_exact:
        name = "POT ot.lp.barycenter (exact)"
        t0 = time.perf_counter()
        bars[name] = np.stack([ot.lp.barycenter(h.T, M) for h in per_class])
        times[name] = time.perf_counter() - t0
    rows, raw = [], []
    for name, B in bars.items():
        per = [exact_objective(B[c], per_class[c], M) for c in range(10)]
        objective = float(np.mean(per))
        rows.append([name, f"{objective:.4f}", f"{times[name]:.2f}"])
        raw.append(
            {
                "method": name,
                "objective": objective,
                "time_s": times[name],
                "images_per_class": [len(h) for h in per_class],
                "per_class": per,
            }
        )
    figure(bars, out / f"barycenters_digits{'_' + str(limit) if limit else ''}.png")
    return rows, raw


def figure(bars: dict[str, np.ndarray], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(bars), 10, figsize=(10, 1.15 * len(bars)))
    axes = np.atleast_2d(axes)
    for r, (name, B) in enumerate(bars.items()):
        for c in range(10):
            ax = axes[r, c]
            ax.imshow(B[c].reshape(8, 8), cmap="gray_r")
            ax.set_xticks([])
            ax.set_yticks([])
        axes[r, 0].set_ylabel(name.replace(" (", "\n("), fontsize=5, rotation=0, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def grid_histograms(side: int, K: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A ``side`` x ``side`` grid in the unit square and ``K`` Gaussian bumps (std 0.1) on it."""
    rng = np.random.default_rng(seed)
    axis = np.linspace(0, 1, side)
    grid = np.stack(np.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)
    centres = rng.uniform(0.2, 0.8, (K, 2))
    A = np.exp(-((grid[None] - centres[:, None]) ** 2).sum(-1) / (2 * 0.1**2))
    return grid, A / A.sum(1, keepdims=True)


def merged_edge_matrix(trees: tsw.SupportTrees) -> np.ndarray:
    """The edge matrix of the trees with the rows over the same points added up.

    Every row of :func:`tsw.support._embedding.edge_matrix` is one constant on the points
    below its edge, so rows over the same points merge into one (their constants added):
    the objective is unchanged and the linear program smaller.
    """
    from tsw.support._embedding import edge_matrix

    M = edge_matrix(trees).to_dense().numpy()
    rows: dict[tuple[int, ...], float] = {}
    for row in M:
        support = tuple(np.flatnonzero(row))
        if support:
            rows[support] = rows.get(support, 0.0) + float(row[support[0]])
    out = np.zeros((len(rows), M.shape[1]))
    for r, (support, value) in enumerate(rows.items()):
        out[r, list(support)] = value
    return out


def tree_lp(M: np.ndarray, A: np.ndarray, w: np.ndarray) -> float:
    """The exact minimum of sum_k w_k ||M (x - a_k)||_1 over x >= 0 of a_0's total (HiGHS).

    The linear program of the tree barycenter (the math notes, section 12.5): auxiliary
    s_ke >= |M (x - a_k)|_e, with feasibility tolerances 1e-10 (HiGHS's default 1e-7 left
    its value 6e-9 below the exact minimum on small problems).
    """
    from scipy import sparse
    from scipy.optimize import linprog

    E, n = M.shape
    K = A.shape[0]
    C = A @ M.T
    cost = np.concatenate([np.zeros(n), np.repeat(w, E)])
    MM = sparse.vstack([sparse.csr_matrix(M)] * K)
    eye = sparse.identity(K * E, format="csr")
    A_ub = sparse.vstack([sparse.hstack([MM, -eye]), sparse.hstack([-MM, -eye])])
    b_ub = np.concatenate([C.reshape(-1), -C.reshape(-1)])
    A_eq = sparse.hstack([sparse.csr_matrix(np.ones((1, n))), sparse.csr_matrix((1, K * E))])
    tight = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}
    total = [A[0].sum()]
    res = linprog(cost, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=total, method="highs", options=tight)
    if res.status != 0:
        raise RuntimeError(f"HiGHS did not solve the tree barycenter's LP: {res.message}")
    return float(res.fun)


def speed(args: argparse.Namespace) -> tuple[list[list[str]], list[dict], dict]:
    """The tree barycenter at its defaults against POT's entropic one, interleaved, medians."""
    grid, A = grid_histograms(args.speed_side, args.speed_k, 0)
    M = ot.dist(grid, grid, metric="euclidean")
    reg = args.speed_reg * M.max()
    support = torch.tensor(grid)
    H = torch.tensor(A)
    t0 = time.perf_counter()
    trees = tsw.sample_quadtrees(support, n_trees=args.trees, seed=0)
    build = {args.trees: time.perf_counter() - t0}
    t0 = time.perf_counter()
    one = tsw.sample_quadtrees(support, n_trees=1, seed=0)
    build[1] = time.perf_counter() - t0
    pot = f"POT ot.bregman.barycenter (reg={args.speed_reg:g} x max cost)"
    runs = {
        f"tsw.tree_barycenter, {args.trees} quadtrees (defaults: stopThr=1e-3)": (trees, 1e-3),
        f"tsw.tree_barycenter, {args.trees} quadtrees, stopThr=1e-4": (trees, 1e-4),
        "tsw.tree_barycenter, 1 quadtree (defaults)": (one, 1e-3),
        pot: None,
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    bars: dict[str, np.ndarray] = {}
    logs: dict[str, dict] = {}
    for _ in range(args.repeats):  # interleaved: a load change hits every method alike
        for name, spec in runs.items():
            t0 = time.perf_counter()
            if spec is None:
                bar = ot.bregman.barycenter(A.T, M, reg)
            else:
                bar_t, log = tsw.tree_barycenter(H, spec[0], stopThr=spec[1], log=True)
                bar, logs[name] = bar_t.numpy(), log
            times[name].append(time.perf_counter() - t0)
            bars[name] = bar
    t_pot = statistics.median(times[pot])
    rows, records = [], []
    for name, spec in runs.items():
        t = statistics.median(times[name])
        exact = exact_objective(bars[name], A, M)
        record = {
            "method": name,
            "time_s_median": t,
            "times_s": times[name],
            "ratio_to_pot": t / t_pot,
            "exact_w1_objective": exact,
        }
        if spec is not None:
            log = logs[name]
            T = len(spec[0])
            record |= {
                "trees_build_s": build[T],
                "tree_objective": float(log["value"]),
                "certified_gap": float(log["gap"]),
                "n_iter": log["n_iter"],
            }
        records.append(record)
    exact_pot = next(r["exact_w1_objective"] for r in records if r["method"] == pot)
    for r in records:
        r["exact_vs_pot"] = r["exact_w1_objective"] / exact_pot - 1
        rows.append(
            [
                r["method"],
                f"{r['exact_w1_objective']:.4f}",
                f"{100 * r['exact_vs_pot']:+.2f}%",
                f"{r['tree_objective']:.5f}" if "tree_objective" in r else "-",
                f"{r['certified_gap']:.1e}" if "certified_gap" in r else "-",
                str(r.get("n_iter", "-")),
                f"{r['time_s_median']:.3f}",
                f"{r['ratio_to_pot']:.2f}",
            ]
        )
    curve = logs[next(iter(runs))]
    extra = {
        "curve": {
            "objective": np.asarray(curve["objective"]).tolist(),
            "lower_bounds": np.asarray(curve["lower_bounds"]).tolist(),
        }
    }
    return rows, records, extra


def lp_check(args: argparse.Namespace) -> tuple[list[list[str]], list[dict]]:
    """The tree barycenter's objective against the LP minimum where HiGHS runs."""
    rows, records = [], []
    for spec in args.lp_sizes:
        side, K, T = (int(v) for v in spec.split("x"))
        grid, A = grid_histograms(side, K, 1)
        trees = tsw.sample_quadtrees(torch.tensor(grid), n_trees=T, seed=1)
        w = np.full(K, 1 / K)
        t0 = time.perf_counter()
        x, log = tsw.tree_barycenter(A, trees, log=True)
        t_tree = time.perf_counter() - t0
        Mm = merged_edge_matrix(trees)
        t0 = time.perf_counter()
        exact = tree_lp(Mm, A, w)
        t_lp = time.perf_counter() - t0
        value = float((w[:, None] * np.abs(Mm @ x - A @ Mm.T)).sum())
        record = {
            "grid": f"{side}x{side}",
            "K": K,
            "trees": T,
            "lp_minimum": exact,
            "tsw_objective": value,
            "excess": value / exact - 1,
            "certified_gap": float(log["gap"]),
            "lower_bound": float(log["lower_bound"]),
            "n_iter": log["n_iter"],
            "tsw_time_s": t_tree,
            "lp_time_s": t_lp,
        }
        records.append(record)
        rows.append(
            [
                f"{side}x{side}",
                str(K),
                str(T),
                f"{exact:.6f}",
                f"{value:.6f}",
                f"{record['excess']:.1e}",
                f"{record['certified_gap']:.1e}",
                f"{t_tree:.3f}",
                f"{t_lp:.2f}",
            ]
        )
    return rows, records


def plot_speed(records: list[dict], extra: dict, path: Path) -> None:
    """Exact W1 objective against time; the default run's certified gap per iteration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10.5, 4.0))
    styles = [("tab:blue", "o"), ("tab:cyan", "s"), ("tab:green", "^"), ("black", "*")]
    for r, (colour, marker) in zip(records, styles, strict=False):
        ax.scatter(
            r["time_s_median"],
            r["exact_w1_objective"],
            s=90,
            c=colour,
            marker=marker,
            label=r["method"],
            zorder=3,
        )
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.set_xlabel("median time [s], one thread (log)", fontsize=8)
    ax.set_ylabel("exact W1 objective (mean ot.emd2 to the histograms)", fontsize=8)
    ax.grid(True, lw=0.4, alpha=0.5)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), frameon=False)
    ax.tick_params(labelsize=7)
    objective = np.asarray(extra["curve"]["objective"])
    bound = np.asarray(extra["curve"]["lower_bounds"])
    its = 16 * np.arange(len(objective))
    gap = (objective - bound) / objective
    bx.semilogy(its, np.maximum(gap, 1e-16), "o-", ms=3, color="tab:blue")
    bx.axhline(1e-3, color="gray", lw=0.8, ls="--")
    bx.text(its[0], 1.1e-3, "stopThr = 1e-3", fontsize=7, ha="left", va="bottom")
    bx.set_xlabel("iteration", fontsize=8)
    bx.set_ylabel("certified relative gap (objective - lower bound) / objective", fontsize=8)
    bx.set_title(records[0]["method"], fontsize=8)
    bx.grid(True, lw=0.4, alpha=0.5)
    bx.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)


def _one_blas_thread():
    """Limit NumPy's BLAS to one thread (threadpoolctl, when installed) for the one-core run."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny settings (CI)")
    ap.add_argument("--n-free", type=int, default=100, help="points per free-support measure")
    ap.add_argument("--n-large", type=int, default=1000, help="points, the large task (1 seed)")
    ap.add_argument("--iters", type=int, default=100, help="free-support iterations")
    ap.add_argument("--lines", type=int, default=100, help="directions (SW) or lines (trees)")
    ap.add_argument("--fairness", type=float, default=1.0)
    ap.add_argument("--trees", type=int, default=10, help="trees of the second tree barycenter")
    ap.add_argument("--reg", type=float, default=0.1, help="POT's entropic reg (digits)")
    ap.add_argument(
        "--geomloss-max-n", type=int, default=100, help="GeomLoss runs on tasks up to this n"
    )
    ap.add_argument("--speed-side", type=int, default=20, help="speed: the grid's side")
    ap.add_argument("--speed-k", type=int, default=200, help="speed: histograms")
    ap.add_argument("--speed-reg", type=float, default=1e-2, help="POT's reg x the largest cost")
    ap.add_argument("--repeats", type=int, default=7, help="speed: interleaved repeats")
    ap.add_argument(
        "--lp-sizes",
        nargs="*",
        default=["10x20x10", "20x20x10", "20x60x1"],
        help="LP check: SIDExKxT (grid side, histograms, trees)",
    )
    ap.add_argument("--no-exact", action="store_true", help="skip ot.lp.barycenter")
    ap.add_argument("--exact-k", type=int, default=20, help="images per class with the LP")
    ap.add_argument(
        "--parts", default="free,digits,speed,lp", help="comma-separated: free, digits, speed, lp"
    )
    add_run_args(ap, "barycenters")
    args = ap.parse_args(argv)
    if args.smoke:
        args.n_free, args.iters, args.lines, args.seeds, args.n_large = 12, 3, 8, 1, 16
        args.trees, args.exact_k = 2, 4
        args.speed_side, args.speed_k, args.repeats, args.lp_sizes = 6, 8, 1, ["5x4x2"]
    out = prepare(args)
    with _one_blas_thread():  # one core for NumPy's BLAS too (POT's entropic barycenter)
        return _run(args, out)


def _run(args: argparse.Namespace, out: Path) -> int:
    with_geomloss, line = geomloss_status()
    print(line)
    if "free" in args.parts:
        rows, raw, records, clouds = free_support(args, with_geomloss)
        header = ["task", "method", "W (mean W2 to marginals)", "F (mean |W_i - W_j|)", "time [s]"]
        print_table("Free-support barycenters", header, rows)
        header = [*header[:2], "W", "F", "time_s"]
        write_results(out, "barycenters_free", header, raw, payload(args, records, geomloss=line))
        plot_free(records, clouds, out)
    if "digits" in args.parts:
        _digits(args, out)
    if "speed" in args.parts:
        rows, records, extra = speed(args)
        header = ["method", "exact W1 objective", "vs POT", "tree objective", "certified gap"]
        header += ["iterations", "median time [s]", "x POT's time"]
        side, K = args.speed_side, args.speed_k
        print_table(f"{K} histograms on a {side} x {side} grid", header, rows)
        write_results(out, "barycenters_speed", header, rows, payload(args, records, **extra))
        plot_speed(records, extra, out / "barycenters_speed.png")
    if "lp" in args.parts:
        rows, records = lp_check(args)
        header = ["grid", "K", "trees", "LP minimum", "tsw objective", "excess", "certified gap"]
        header += ["tsw time [s]", "LP time [s]"]
        print_table("tree_barycenter at its defaults against the LP minimum", header, rows)
        write_results(out, "barycenters_lp", header, rows, payload(args, records))
    return 0


def _digits(args: argparse.Namespace, out: Path) -> None:
    header = ["method", "exact objective (mean W1 to the class)", "time [s], 10 classes"]
    for limit in (None, args.exact_k):
        rows, records = fixed_support(args, out, limit)
        which = f"the first {limit} images of each class" if limit else "every image"
        print_table(f"Fixed-support barycenters of the digits, {which}", header, rows)
        stem = f"barycenters_digits{'_' + str(limit) if limit else ''}"
        raw = [[r["method"], r["objective"], r["time_s"]] for r in records]
        write_results(out, stem, ["method", "objective", "time_s"], raw, payload(args, records))


if __name__ == "__main__":
    raise SystemExit(main())
