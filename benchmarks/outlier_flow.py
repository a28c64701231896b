"""Partial transport with outliers: a point-cloud flow onto a target with 7% uniform noise.

The point-cloud experiment of the PartialTSW paper (spec 6.4) on a synthetic shape: the
target is a torus surface at the scale of the paper's bunny (diameter 0.19) plus 7%
outliers drawn uniformly in a cube of half-width 0.6 x the diameter around it (as in the
paper's ``bunny_noise`` data); the source, a small sphere surface, carries mass 1. Adam,
lr 1e-3, 300 steps, as in the official experiment.

Methods (``--methods``):

* ``ptsw``: :func:`tsw.partial_tsw` at every target mass of ``--masses`` (mass 1 is
  Db-TSW on the same trees); trees as in the official experiment: 5 trees of 2
  orthonormal lines, roots ``N(0, I)``, p = 2, delta = 2;
* ``sw``: :func:`tsw.sw`, 100 projections, p = 2 (the official SW baseline);
* ``psw``: POT's sliced partial OT, :func:`tsw.partial_sw`, transporting every source
  atom (``k = N`` of the ``M`` target atoms on every slice);
* ``usw``: POT's sliced unbalanced OT (KL penalties, Frank-Wolfe),
  :func:`tsw.unbalanced_sw`, target mass 1.04, at every penalty of ``--usw-reg``.

POT's solvers run one Python call per slice; they use ``--pot-projections`` slices (10,
the PartialTSW paper's L for its sliced baselines) to keep a run within minutes.

Metrics, at the end of the flow: the share of source points **on outliers** (within
0.01 of an outlier that lies farther than 0.02 from the torus), the share **off the
shape** (farther than 0.01 from the torus), and seconds per step.

Example: ``python -m benchmarks.outlier_flow --seeds 3``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

import tsw
from benchmarks._report import (
    add_run_args,
    mean_and_std,
    mean_std,
    prepare,
    print_table,
    progress,
    write_results,
)
from tsw import datasets
from tsw.datasets import distance_to_torus


def noisy_problem(seed: int, n: int = 1000, noise: float = 0.07):
    """Source (float32), target with ``noise * n`` outliers (float32), and the outliers
    (float64): :func:`tsw.datasets.make_torus_with_outliers` with seed ``seed``."""
    data = datasets.make_torus_with_outliers(n, noise, seed=seed)
    return data.source.float(), data.target.float(), data.outliers


def points_on_outliers(X, outliers, radius: float = 0.01, isolation: float = 0.02) -> int:
    """Source points within ``radius`` of an outlier farther than ``isolation`` from the torus."""
    isolated = outliers[distance_to_torus(outliers) > isolation]
    return int((torch.cdist(X, isolated).min(-1).values < radius).sum())


def methods(args: argparse.Namespace) -> dict[str, dict]:
    """key -> {"name", "fn", "kw"}; every function is called as ``fn(X, Y, **kw)``."""
    trees = {"n_trees": 5, "n_lines": 2, "p": 2, "delta": 2.0, "orthogonal": True}
    trees |= {"center": torch.zeros(3), "root_std": 1.0}
    table = {}
    for m in args.masses:
        name = "Db-TSW (5x2, = mass 1)" if m == 1 else f"PartialTSW (5x2, target mass {m:g})"
        table[f"ptsw-{m:g}"] = {"name": name, "fn": tsw.partial_tsw, "kw": {"mass_t": m, **trees}}
    table["sw"] = {
        "name": "SW_2 (L=100)",
        "fn": tsw.sw,
        "kw": {"n_projections": 100, "p": 2},
    }
    L = args.pot_projections
    table["psw"] = {
        "name": f"sliced partial OT (POT, L={L}, k=N)",
        "fn": tsw.partial_sw,
        "kw": {"n_projections": L, "p": 2},
    }
    for reg in args.usw_reg:
        table[f"usw-{reg:g}"] = {
            "name": f"SUOT (POT, L={L}, KL reg {reg:g}, target mass 1.04)",
            "fn": tsw.unbalanced_sw,
            "kw": {"n_projections": L, "p": 2, "mass_t": 1.04, "reg_m": reg},
        }
    return table


def flow(method: dict, source, target, seed: int, steps: int = 300, lr: float = 1e-3):
    """Adam on the source points; returns the final cloud (float64) and seconds per step."""
    X = source.clone().requires_grad_()
    opt = torch.optim.Adam([X], lr=lr)
    g = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        method["fn"](X, target, generator=g, validate=False, **method["kw"]).backward()
        opt.step()
    return X.detach().double(), (time.perf_counter() - t0) / steps


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="clean target and source points")
    ap.add_argument("--noise", type=float, default=0.07, help="outliers per clean point")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--masses", type=_floats, default=[1.0, 1.02, 1.04, 1.08, 1.15])
    ap.add_argument("--usw-reg", type=_floats, default=[0.01, 0.1], help="SUOT KL penalties")
    ap.add_argument("--pot-projections", type=int, default=10, help="slices of POT baselines")
    ap.add_argument("--methods", default="ptsw,sw,psw,usw", help="comma-separated families")
    add_run_args(ap, "outlier_flow")
    args = ap.parse_args(argv)
    out = prepare(args)
    families = [f.strip() for f in args.methods.split(",") if f.strip()]
    bad = [f for f in families if f not in ("ptsw", "sw", "psw", "usw")]
    if bad:
        ap.error(f"unknown methods {bad}; choose from ['ptsw', 'psw', 'sw', 'usw']")
    table = {k: v for k, v in methods(args).items() if k.split("-")[0] in families}
    settings = vars(args) | {
        "metrics": "% of source points on isolated outliers / off the torus (> 0.01)"
    }
    print(f"settings: {settings}")
    problems = [noisy_problem(s, args.n, args.noise) for s in range(args.seeds)]
    raw: dict[str, list] = {k: [] for k in table}
    for key, seed in progress([(k, s) for k in table for s in range(args.seeds)], "flows"):
        source, target, outliers = problems[seed]
        X, spi = flow(table[key], source, target, seed, steps=args.steps, lr=args.lr)
        raw[key].append(
            {
                "seed": seed,
                "on_outliers": 100 * points_on_outliers(X, outliers) / len(X),
                "off_shape": 100 * float((distance_to_torus(X) > 0.01).double().mean()),
                "s_per_step": spi,
                "final": X.float().tolist() if seed == 0 else None,
            }
        )
    header = ["method", "on outliers (%)", "off the shape (%)", "s/step"]
    rows = [
        [
            table[k]["name"],
            mean_std([r["on_outliers"] for r in raw[k]], ".1f", ".1f"),
            mean_std([r["off_shape"] for r in raw[k]], ".1f", ".1f"),
            f"{statistics.median(r['s_per_step'] for r in raw[k]):.4f}",
        ]
        for k in table
    ]
    n_out = round(args.noise * args.n)
    title = (
        f"torus + {n_out} uniform outliers, {args.steps} steps, mean ± std over "
        f"{args.seeds} seeds (share of the {args.n} source points)"
    )
    print_table(title, header, rows)
    names = {k: v["name"] for k, v in table.items()}
    payload = {"settings": settings, "names": names, "runs": raw}
    numeric_header = ["key", "method", "n_seeds", "on_outliers_pct_mean", "on_outliers_pct_std"]
    numeric_header += ["off_shape_pct_mean", "off_shape_pct_std", "s_per_step_median"]
    numeric = [
        [
            k,
            table[k]["name"],
            len(raw[k]),
            *mean_and_std([r["on_outliers"] for r in raw[k]]),
            *mean_and_std([r["off_shape"] for r in raw[k]]),
            statistics.median(r["s_per_step"] for r in raw[k]),
        ]
        for k in table
    ]
    write_results(out, "outlier_flow", numeric_header, numeric, payload)
    plot(raw, table, problems[0], out / "outlier_flow.png")
    print(f"\nresults written to {out.resolve()}")
    return 0


def plot(raw: dict, table: dict, problem, path: Path) -> None:
    """Bars of the share on outliers, and side views (x, z) of the final clouds of seed 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(raw)
    partial = [k for k in keys if k.startswith("ptsw-") and k != "ptsw-1"]
    show = (["ptsw-1.04"] if "ptsw-1.04" in raw else partial[:1]) + [
        k for k in ("ptsw-1", "sw") if k in raw
    ]
    fig, axes = plt.subplots(1, 1 + len(show), figsize=(4 + 3.2 * len(show), 3.6))
    axes = list(axes) if len(show) else [axes]
    means = [statistics.mean(r["on_outliers"] for r in raw[k]) for k in keys]
    stds = [statistics.pstdev(r["on_outliers"] for r in raw[k]) for k in keys]
    axes[0].barh(range(len(keys)), means, xerr=stds, color="tab:blue")
    axes[0].set_yticks(range(len(keys)), [table[k]["name"] for k in keys], fontsize=6)
    axes[0].invert_yaxis()
    axes[0].set_xlabel("source points on outliers (%)")
    _, target, outliers = problem
    for ax, k in zip(axes[1:], show, strict=True):
        X = torch.tensor(raw[k][0]["final"])
        ax.scatter(target[:, 0], target[:, 2], s=1, c="0.75")
        ax.scatter(outliers[:, 0], outliers[:, 2], s=8, c="tab:red", marker="x")
        ax.scatter(X[:, 0], X[:, 2], s=1, c="tab:blue")
        ax.set_title(f"{table[k]['name']}\nside view (x, z), seed 0", fontsize=7)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
