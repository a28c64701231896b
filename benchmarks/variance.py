"""Monte-Carlo quality: coefficient of variation against wall time for every sampling option.

Every tree-sliced value is a Monte-Carlo estimate over random trees. This program measures,
for SW, Db-TSW, Db-TSW⊥ and STSW with ``sampling="iid"`` (the default), ``"orthogonal"``
(stratified across trees in orthonormal frames) and ``"qmc"`` (randomised quasi-Monte
Carlo), at several numbers of trees:

* the coefficient of variation CV = std / mean of the value over ``--seeds`` seeds (fresh
  trees per seed, the data fixed): it does not depend on the machine's load;
* the wall time of one call (forward only), timed side by side (interleaved rounds, see
  ``benchmarks/_timing.py``), as a ratio to the i.i.d. call of the same method;
* the variance ratio ``(CV_iid / CV_option)^2`` at equal trees, with a 95% interval
  (``log`` of a ratio of sample variances has standard error ``sqrt(2/(n-1) + 2/(n-1))``),
  and the equal-variance cost factor ``variance ratio x time_iid / time_option``: how many
  times fewer seconds the option needs for the i.i.d. variance (i.i.d. variance falls as
  1 / T at a cost proportional to T).

Problems:

* ``gauss64`` (the headline): N = M = 500 points in d = 64, ``X ~ N(0, I)``, ``Y = 0.3 +
  Z A`` with ``Z ~ N(0, I)`` and ``A = (I + G / 8) / 2`` for one Gaussian matrix ``G``
  (different means and covariances); 4 lines per tree; p = 1, delta = 2, roots around the
  mean with std 0.1 (the library defaults). SW at p = 2 with ``T * k`` directions. STSW on
  the same points normalised to the sphere S^63 (``T`` trees of 4 rays).
* ``table4``: the PartialTSW paper's convergence analysis (its Table 4; the official
  ``analysis/convergence`` code, read for the setting): d = 100, N = M = 30, ``X ~
  N(+1, I)``, ``Y ~ N(-1, I)``, Db-TSW with p = 2, delta = 2, 10 lines per tree, roots
  ``N(0, I)`` (root std 1 around 0); the paper reports CV = 0.0239 at L = 100 trees and
  0.0070 at L = 1000 over 10 runs on one draw of the data.

``--quick`` runs a tiny version in seconds (the smoke test). Output: a table per problem,
``variance.csv`` / ``variance.json`` and ``variance.png`` (CV against seconds per call,
log-log, one curve per method and option) under ``--out``.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable

import numpy as np
import torch

import tsw
from benchmarks._report import add_run_args, prepare, print_table, progress, write_results
from benchmarks._timing import interleaved

SAMPLINGS = ("iid", "orthogonal", "qmc")
#: Table 4 of the PartialTSW paper (NeurIPS 2025): CV of Db-TSW at d = 100, k = 10
TABLE4 = {100: 0.0239, 1000: 0.0070}


def gauss64(d: int, n: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The headline problem (see the module docstring), drawn from seed 0."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    G = torch.randn(d, d, generator=g, dtype=torch.float64)
    A = 0.5 * torch.eye(d, dtype=torch.float64) + 0.5 * G / math.sqrt(d)
    Y = torch.randn(n, d, generator=g, dtype=torch.float64) @ A + 0.3
    return X.to(dtype), Y.to(dtype)


def table4_data(d: int, n: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The PartialTSW convergence setting: N(+1, I) against N(-1, I), seed 0."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, d, generator=g, dtype=torch.float64) + 1.0
    Y = torch.randn(n, d, generator=g, dtype=torch.float64) - 1.0
    return X.to(dtype), Y.to(dtype)


def methods(X, Y, k: int) -> dict[str, Callable[..., torch.Tensor]]:
    """Method name -> ``call(T, sampling, seed)`` on the headline data."""
    S, R = (torch.nn.functional.normalize(Z, dim=-1) for Z in (X, Y))
    return {
        "SW_2": lambda T, s, seed: tsw.sw(X, Y, n_projections=T * k, sampling=s, seed=seed),
        "Db-TSW": lambda T, s, seed: tsw.db_tsw(
            X, Y, n_trees=T, n_lines=k, sampling=s, seed=seed, validate=False
        ),
        "Db-TSW⊥": lambda T, s, seed: tsw.db_tsw(
            X, Y, n_trees=T, n_lines=k, orthogonal=True, sampling=s, seed=seed, validate=False
        ),
        "STSW": lambda T, s, seed: tsw.stsw(
            S, R, n_trees=T, n_lines=k, sampling=s, seed=seed, validate=False
        ),
    }


def cv_of(values: list[float]) -> float:
    return float(np.std(values, ddof=1) / np.mean(values))


def ratio_interval(cv_a: float, cv_b: float, n: int) -> tuple[float, float, float]:
    """``(cv_a / cv_b)^2`` and its 95% interval (log-normal, Gaussian-sample approximation)."""
    r = (cv_a / cv_b) ** 2
    se = math.sqrt(4 / (n - 1))
    return r, r * math.exp(-1.96 * se), r * math.exp(1.96 * se)


def run_grid(calls, trees, seeds, rounds, label) -> list[dict]:
    """CV over seeds and side-by-side time for every (method, T, sampling)."""
    rows = []
    jobs = [(m, T) for m in calls for T in trees]
    for method, T in progress(jobs, label):
        fn = calls[method]
        cvs, means = {}, {}
        for s in SAMPLINGS:
            with torch.no_grad():
                vals = [float(fn(T, s, seed)) for seed in range(seeds)]
            cvs[s], means[s] = cv_of(vals), float(np.mean(vals))
        with torch.no_grad():
            times = interleaved(
                {s: (lambda s=s, fn=fn, T=T: fn(T, s, 10**6)) for s in SAMPLINGS},
                rounds=rounds,
                warmup=1,
            )
        t = {s: statistics.median(times[s]) for s in SAMPLINGS}
        for s in SAMPLINGS:
            r, lo, hi = ratio_interval(cvs["iid"], cvs[s], seeds)
            ratios = [a / b for a, b in zip(times[s], times["iid"], strict=True)]
            time_ratio = statistics.median(ratios)
            rows.append(
                {
                    "method": method,
                    "trees": T,
                    "sampling": s,
                    "mean": means[s],
                    "cv": cvs[s],
                    "seconds": t[s],
                    "time / iid": time_ratio,
                    "variance ratio": r,
                    "ratio 95% low": lo,
                    "ratio 95% high": hi,
                    "equal-variance cost factor": r / time_ratio,
                }
            )
    return rows


def table4(args, dtype) -> list[dict]:
    d, n = (10, 10) if args.quick else (100, 30)
    X, Y = table4_data(d, n, dtype)
    center = torch.zeros(d, dtype=dtype)
    rows = []
    for L in (10, 30) if args.quick else (100, 1000):
        for s in SAMPLINGS:
            with torch.no_grad():
                vals = [
                    float(
                        tsw.db_tsw(
                            X,
                            Y,
                            n_trees=L,
                            n_lines=10,
                            p=2,
                            delta=2.0,
                            center=center,
                            root_std=1.0,
                            sampling=s,
                            seed=seed,
                        )
                    )
                    for seed in range(args.seeds)
                ]
            rows.append({"trees": L, "sampling": s, "cv": cv_of(vals), "published": TABLE4.get(L)})
    return rows


def sources(X, Y, args) -> list[dict]:
    """Db-TSW's variance from the roots alone and from the directions alone (i.i.d.).

    Roots only: the directions of seed 0 with the roots of seed ``s``; directions only:
    the roots of seed 0 with the directions of seed ``s``. Antithetic or stratified roots
    can remove at most the first part.
    """
    T = 16 if args.quick else 64
    ref = tsw.sample_concurrent_lines(X.shape[-1], n_trees=T, n_lines=args.n_lines, seed=0)
    center = (X.mean(0) + Y.mean(0)) / 2
    rows = []
    for part in ("roots", "directions", "both"):
        vals = []
        for seed in range(args.seeds):
            t = tsw.sample_concurrent_lines(
                X.shape[-1], n_trees=T, n_lines=args.n_lines, seed=seed, dtype=X.dtype
            )
            roots = center + (t.roots if part != "directions" else ref.roots.to(X.dtype))
            dirs = t.directions if part != "roots" else ref.directions.to(X.dtype)
            with torch.no_grad():
                trees = tsw.ConcurrentLines(roots, dirs, validate=False)
                vals.append(float(tsw.db_tsw(X, Y, trees=trees, validate=False)))
        rows.append({"random": part, "trees": T, "cv": cv_of(vals)})
    return rows


def plot(rows: list[dict], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {"iid": "o-", "orthogonal": "s--", "qmc": "^:"}
    colors = {}
    for method in dict.fromkeys(r["method"] for r in rows):
        for s in SAMPLINGS:
            pts = [r for r in rows if r["method"] == method and r["sampling"] == s]
            (line,) = ax.loglog(
                [r["seconds"] for r in pts],
                [r["cv"] for r in pts],
                styles[s],
                color=colors.get(method),
                label=f"{method} {s}",
            )
            colors[method] = line.get_color()
    ax.set_xlabel("seconds per call (side by side)")
    ax.set_ylabel("coefficient of variation over seeds")
    ax.set_title("Monte-Carlo error against cost, gauss64")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, seconds (smoke test)")
    ap.add_argument("--trees", default="16,64,256", help="numbers of trees T (lines: T x k)")
    ap.add_argument("--n-lines", type=int, default=4, help="lines per tree k")
    ap.add_argument("--rounds", type=int, default=5, help="timing rounds")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    add_run_args(ap, "variance")
    ap.set_defaults(seeds=100)
    args = ap.parse_args(argv)
    out = prepare(args)
    dtype = getattr(torch, args.dtype)
    if args.quick:
        d, n, trees = 8, 30, [4, 8]
        args.seeds, args.rounds = min(args.seeds, 12), min(args.rounds, 1)
    else:
        d, n, trees = 64, 500, [int(t) for t in args.trees.split(",")]
    if args.seeds < 3:
        ap.error("--seeds must be at least 3 (a spread over seeds)")
    print(f"settings: {vars(args) | {'d': d, 'n': n, 'trees': trees}}")
    X, Y = gauss64(d, n, dtype)
    rows = run_grid(methods(X, Y, args.n_lines), trees, args.seeds, args.rounds, "gauss64")
    header = ["method", "T", "sampling", "CV", "s/call", "time/iid", "var. ratio (95%)", "cost"]
    table = [
        [
            r["method"],
            str(r["trees"]),
            r["sampling"],
            f"{r['cv']:.4f}",
            f"{r['seconds']:.4f}",
            f"{r['time / iid']:.2f}",
            f"{r['variance ratio']:.2f} ({r['ratio 95% low']:.2f}-{r['ratio 95% high']:.2f})",
            f"{r['equal-variance cost factor']:.2f}",
        ]
        for r in rows
    ]
    print_table(
        f"gauss{d}: CV over {args.seeds} seeds; var. ratio = (CV_iid / CV)^2 at equal trees; "
        "cost = var. ratio x time_iid / time (seconds saved at equal variance)",
        header,
        table,
    )
    src = sources(X, Y, args)
    print_table(
        f"Db-TSW at T = {src[0]['trees']}: CV over {args.seeds} seeds with only part of "
        "the trees random (the rest from seed 0)",
        ["random part", "CV", "share of the variance"],
        [[r["random"], f"{r['cv']:.4f}", f"{(r['cv'] / src[-1]['cv']) ** 2:.2f}"] for r in src],
    )
    t4 = table4(args, dtype)
    t4_table = [
        [
            str(r["trees"]),
            r["sampling"],
            f"{r['cv']:.4f}",
            "-" if r["published"] is None or r["sampling"] != "iid" else f"{r['published']:.4f}",
        ]
        for r in t4
    ]
    print_table(
        f"PartialTSW Table 4 setting (Db-TSW, k = 10, p = 2): CV over {args.seeds} seeds",
        ["L (trees)", "sampling", "CV", "published (10 runs)"],
        t4_table,
    )
    payload = {"settings": vars(args) | {"d": d, "n": n, "trees": trees}, "gauss": rows}
    payload["table4"] = t4
    payload["sources"] = src
    write_results(out, "variance", header, table, payload)
    plot(rows, out / "variance.png")
    print(f"\nresults written to {out.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
