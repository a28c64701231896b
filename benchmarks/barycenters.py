"""Barycenters: free support (sliced, tree-sliced, MFSWB) and fixed support on trees.

Free support (``tsw.free_support_barycenter``) against POT's exact
``ot.lp.free_support_barycenter`` from the same start: four Gaussians of 100 points in
R^2 (MFSWB's set-up) and the average of four 2-D shapes of 100 points (ring, square,
triangle, cross). Metrics: W, the mean exact W2 (``ot.emd2``) from the barycenter to the
marginals; F, the mean |W_i - W_j| over pairs (MFSWB's fairness); the time. When GeomLoss
imports (it is optional and no dependency of ``tsw``), its debiased Sinkhorn barycenter is a
row too: GeomLoss 0.3.1's ``geomloss.ot.barycenter_sample`` is an unimplemented stub (its body
raises NameError), so the row runs GeomLoss's documented Lagrangian scheme (its "Wasserstein
barycenters in 2D" example): x <- mean_k (x - grad_x S_eps(alpha, beta_k) / alpha_i), with
``SamplesLoss("sinkhorn", p=2, blur=0.01 * diameter, scaling=0.9)``, iterated from the same
start with POT's stopping rule.

Fixed support (``tsw.tree_barycenter``): scikit-learn's 8x8 digits, one barycenter per
class on the pixel grid, against POT's entropic ``ot.bregman.barycenter`` and the exact
``ot.lp.barycenter``; metric: the exact objective sum_k w_k W1(bar, a_k) (``ot.emd2`` on
Euclidean pixel distances), time, and a figure of the ten barycenters. Speed: the tree
barycenter of 1,000 histograms on 1,000 support points against POT's entropic barycenter.

Run ``python -m benchmarks.barycenters`` (``--smoke`` for CI).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import ot
import torch

import tsw
from benchmarks._report import add_run_args, mean_std, prepare, print_table, write_results

FREE_METHODS = ("sw", "db_tsw", "tsw_sl")
GEOMLOSS_BLUR = 0.01  # GeomLoss's blur, relative to the diameter of the pooled data
GEOMLOSS_SCALING = 0.9
GEOMLOSS_ROW = (
    f"GeomLoss sinkhorn (blur={GEOMLOSS_BLUR:g} x diameter, scaling={GEOMLOSS_SCALING:g})"
)


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
) -> tuple[list[list[str]], list[list[object]]]:
    rows, raw = [], []
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
            runs["POT exact (free_support_barycenter)"] = None
            if with_geomloss:
                runs[GEOMLOSS_ROW] = ("geomloss", 0.0)
            for m in FREE_METHODS:
                runs[m] = (m, 0.0)
                runs[f"{m} + fairness {args.fairness:g}"] = (m, args.fairness)
            for name, spec in runs.items():
                t0 = time.perf_counter()
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
                    X = tsw.free_support_barycenter(
                        Ys,
                        X_init=X0,
                        numItermax=args.iters,
                        distance=method,
                        fairness=lam,
                        seed=seed,
                        **opts,
                    )
                elapsed = time.perf_counter() - t0
                W, F = fairness_metrics(X, Ys)
                r = results.setdefault(name, {"W": [], "F": [], "time": []})
                r["W"].append(W)
                r["F"].append(F)
                r["time"].append(elapsed)
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
    return rows, raw


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
) -> tuple[list[list[str]], list]:
    """One barycenter per class (all images, or the first ``limit``: then also the LP)."""
    per_class, grid = digits_hists(args.smoke, limit)
    M = ot.dist(grid, grid, metric="euclidean")
    support = torch.tensor(grid)
    K = max(len(h) for h in per_class)
    H = np.zeros((10, K, 64))
    W = np.zeros((10, K))
    for c, h in enumerate(per_class):
        H[c, : len(h)] = h
        W[c, : len(h)] = 1 / len(h)
        H[c, len(h) :] = h[0]  # zero-weight padding
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
        objective = np.mean([exact_objective(B[c], per_class[c], M) for c in range(10)])
        rows.append([name, f"{objective:.4f}", f"{times[name]:.2f}"])
        raw.append([name, float(objective), times[name]])
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


def speed(args: argparse.Namespace) -> tuple[list[list[str]], list]:
    """1,000 histograms on 1,000 points: the tree barycenter against POT's entropic one."""
    n, K = args.speed_n, args.speed_n
    rng = np.random.default_rng(0)
    support = rng.uniform(0, 1, (n, 2))
    # each histogram: a Gaussian bump at a random centre
    centres = rng.uniform(0.2, 0.8, (K, 2))
    d2 = ((support[None] - centres[:, None]) ** 2).sum(-1)
    A = np.exp(-d2 / (2 * 0.1**2))
    A /= A.sum(1, keepdims=True)
    M = ot.dist(support, support, metric="euclidean")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    runs: dict[str, tuple[np.ndarray, float]] = {}
    for T, fitted in ((1, False), (args.trees, False), (4, True)):
        t0 = time.perf_counter()
        trees = tsw.sample_quadtrees(torch.tensor(support), n_trees=T, seed=0)
        if fitted:  # edge lengths fitted to the Euclidean distances (treeOT)
            trees = tsw.fit_edge_lengths(trees, seed=0)
        bar = tsw.tree_barycenter(torch.tensor(A), trees).numpy()
        label = f"quadtrees, T={T}" + (", fitted lengths" if fitted else "")
        runs[f"tsw.tree_barycenter ({label})"] = (bar, time.perf_counter() - t0)
    for reg in args.reg_speed:
        t0 = time.perf_counter()
        bar = ot.bregman.barycenter(A.T, M, reg)
        runs[f"POT ot.bregman.barycenter (reg={reg:g})"] = (bar, time.perf_counter() - t0)
    torch.set_num_threads(threads)
    # the exact objective on a random subset of the histograms (ot.emd2 on 1000 x 1000)
    sub = rng.choice(K, min(K, args.speed_eval), replace=False)
    rows, raw = [], []
    t_tree = next(iter(runs.values()))[1]
    for name, (bar, t) in runs.items():
        obj = exact_objective(bar, A[sub], M)
        rows.append([name, f"{obj:.4f}", f"{t:.2f}", f"{t / t_tree:.1f}"])
        raw.append([name, obj, t])
    return rows, raw


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
        "--reg-speed", type=float, nargs="+", default=[0.01, 0.05], help="POT's regs (speed)"
    )
    ap.add_argument("--speed-n", type=int, default=1000)
    ap.add_argument("--speed-eval", type=int, default=50, help="histograms in the exact check")
    ap.add_argument("--no-exact", action="store_true", help="skip ot.lp.barycenter")
    ap.add_argument("--exact-k", type=int, default=20, help="images per class with the LP")
    ap.add_argument(
        "--parts", default="free,digits,speed", help="comma-separated: free, digits, speed"
    )
    add_run_args(ap, "barycenters")
    args = ap.parse_args(argv)
    if args.smoke:
        args.n_free, args.iters, args.lines, args.seeds, args.n_large = 12, 3, 8, 1, 16
        args.trees, args.speed_n, args.speed_eval, args.exact_k = 2, 40, 3, 4
    out = prepare(args)
    with _one_blas_thread():  # one core for NumPy's BLAS too (POT's entropic barycenter)
        return _run(args, out)


def _run(args: argparse.Namespace, out: Path) -> int:
    with_geomloss, line = geomloss_status()
    print(line)
    if "free" in args.parts:
        rows, raw = free_support(args, with_geomloss)
        header = ["task", "method", "W (mean W2 to marginals)", "F (mean |W_i - W_j|)", "time [s]"]
        print_table("Free-support barycenters", header, rows)
        header = [*header[:2], "W", "F", "time_s"]
        write_results(out, "barycenters_free", header, raw, {"args": vars(args)})
    if "digits" in args.parts:
        _digits(args, out)
    if "speed" in args.parts:
        rows, raw = speed(args)
        header = ["method", "exact objective (subset)", "time [s], one core", "x tree's time"]
        print_table(f"{args.speed_n} histograms on {args.speed_n} points", header, rows)
        write_results(out, "barycenters_speed", ["method", "objective", "time_s"], raw, {})
    return 0


def _digits(args: argparse.Namespace, out: Path) -> None:
    header = ["method", "exact objective (mean W1 to the class)", "time [s], 10 classes"]
    for limit in (None, args.exact_k):
        rows, raw = fixed_support(args, out, limit)
        which = f"the first {limit} images of each class" if limit else "every image"
        print_table(f"Fixed-support barycenters of the digits, {which}", header, rows)
        stem = f"barycenters_digits{'_' + str(limit) if limit else ''}"
        write_results(out, stem, ["method", "objective", "time_s"], raw, {})


if __name__ == "__main__":
    raise SystemExit(main())
