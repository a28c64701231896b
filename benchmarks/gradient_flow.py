"""Euclidean gradient flows: move a point cloud onto a target by descending a distance.

The source cloud ``X`` (the optimised parameter) starts at ``N(0, I)`` and follows Adam
on ``loss(X, Y)``; fresh trees / projections are drawn at every iteration, centred
on the current pair of clouds. The error is the **exact** squared Wasserstein-2
distance between the clouds, ``ot.emd2`` in float64 (the papers compute it in float32,
which has a noise floor near 1e-8).

Datasets (built in, synthetic, centred to zero mean):

* ``25gaussians``: 25 small Gaussians on a grid, as in the Db-TSW experiments;
* ``swissroll``: the 2-D Swiss roll of the same experiments;
* ``gaussian<d>d``: a Gaussian in dimension ``d`` with a random covariance.

Methods compare tree-sliced distances with sliced baselines at **equal total line
counts**, including SW_1 and SW_2: with a point-independent split, TSW-SL is exactly
an SW_1 over its lines, so SW_1 isolates what the tree adds.

Example: ``python -m benchmarks.gradient_flow --iters 500 --seeds 3`` (the README's
main job, about a minute on two CPU cores).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import ot
import torch

import tsw

try:
    from tqdm import tqdm
except ImportError:  # pragma: no cover
    tqdm = None


def make_target(name: str, n: int, seed: int) -> torch.Tensor:
    """Target cloud of ``n`` points, centred to zero mean (float64).

    The 2-D sets follow the definitions of the Db-TSW gradient-flow experiments:
    ``25gaussians`` puts ``n / 25`` points in each cell of the grid ``2 * {-2..2}^2``
    with noise std 0.05, all divided by 2.828; ``swissroll`` is the (x, z) projection
    of the noiseless 3-D Swiss roll, ``t (cos t, sin t)`` with ``t ~ 1.5 pi (1 + 2 U)``,
    divided by its largest absolute coordinate.
    """
    g = torch.Generator().manual_seed(10_000 + seed)
    if name == "25gaussians":
        grid = torch.arange(-2.0, 3.0, dtype=torch.float64)
        centres = 2 * torch.cartesian_prod(grid, grid)
        reps = max(n // 25, 1)
        Y = centres.repeat(reps, 1)
        Y = Y + 0.05 * torch.randn(Y.shape, generator=g, dtype=torch.float64)
        Y = Y[torch.randperm(len(Y), generator=g)][:n] / 2.828
    elif name == "swissroll":
        t = 1.5 * math.pi * (1 + 2 * torch.rand(n, generator=g, dtype=torch.float64))
        Y = torch.stack([t * torch.cos(t), t * torch.sin(t)], dim=1)
        Y = Y / Y.abs().max()
    elif name.startswith("gaussian") and name.endswith("d"):
        d = int(name[len("gaussian") : -1])
        A = torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
        Y = torch.randn(n, d, generator=g, dtype=torch.float64) @ A.T + 1.0
    else:
        raise ValueError(f"unknown dataset {name!r}")
    return Y - Y.mean(0)


def methods(lines: int, n_lines: int, dim: int) -> dict[str, dict]:
    """Name -> (function, keyword arguments) at ``lines`` total lines.

    Db-TSW-orth needs ``k <= d``: it uses ``min(n_lines, dim)`` lines per tree.
    """
    T = max(lines // n_lines, 1)
    ko = min(n_lines, dim)
    To = max(lines // ko, 1)
    return {
        f"SW_2 (L={lines})": {"fn": tsw.sw, "kw": {"n_projections": lines, "p": 2}},
        f"SW_1 (L={lines})": {"fn": tsw.sw, "kw": {"n_projections": lines, "p": 1}},
        f"TSW-SL chain ({T}x{n_lines})": {
            "fn": tsw.tsw_sl,
            "kw": {"n_trees": T, "n_lines": n_lines, "tree": "chain"},
        },
        f"Db-TSW ({T}x{n_lines}, delta=1)": {
            "fn": tsw.db_tsw,
            "kw": {"n_trees": T, "n_lines": n_lines, "delta": 1.0},
        },
        f"Db-TSW-orth ({To}x{ko}, delta=1)": {
            "fn": tsw.db_tsw,
            "kw": {"n_trees": To, "n_lines": ko, "delta": 1.0, "orthogonal": True},
        },
    }


def w2_squared(X: torch.Tensor, Y: torch.Tensor) -> float:
    """Exact squared W2 between uniform clouds, in float64."""
    Xn, Yn = X.detach().double().numpy(), Y.detach().double().numpy()
    M = ot.dist(Xn, Yn)
    return float(ot.emd2(np.full(len(Xn), 1 / len(Xn)), np.full(len(Yn), 1 / len(Yn)), M))


def flow(fn, kw, Y, *, iters, lr, seed, checkpoints, dtype, source_std=1.0):
    g = torch.Generator().manual_seed(seed)
    X = source_std * torch.randn(Y.shape, generator=g, dtype=torch.float64)
    X = X.to(dtype).requires_grad_(True)
    Yt = Y.to(dtype)
    opt = torch.optim.Adam([X], lr=lr)
    gen = torch.Generator().manual_seed(1_000 + seed)
    errors, elapsed = {}, 0.0
    for it in range(1, iters + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        fn(X, Yt, generator=gen, validate=False, **kw).backward()
        opt.step()
        elapsed += time.perf_counter() - t0
        if it in checkpoints:
            errors[it] = w2_squared(X, Y)
    return errors, elapsed / iters


def fmt(mean: float, std: float) -> str:
    return f"{mean:.2e} ± {std:.1e}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dataset", default="25gaussians")
    ap.add_argument("--n", type=int, default=100, help="points per cloud")
    ap.add_argument("--iters", type=int, default=2500)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--source-std", type=float, default=1.0, help="source N(0, std^2 I)")
    ap.add_argument("--lines", type=int, default=100, help="total lines per iteration")
    ap.add_argument("--n-lines", type=int, default=4, help="lines per tree")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/out/gradient_flow")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    step = max(args.iters // 5, 1)
    checkpoints = sorted({min(step * i, args.iters) for i in range(1, 6)})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dtype = getattr(torch, args.dtype)
    settings = vars(args) | {"checkpoints": checkpoints, "metric": "exact W2^2 (ot.emd2, float64)"}
    print(f"settings: {settings}")
    dim = make_target(args.dataset, 2, 0).shape[1]
    table = methods(args.lines, args.n_lines, dim)
    jobs = [(name, s) for name in table for s in range(args.seeds)]
    bar = tqdm(jobs, desc="gradient flows", file=sys.stderr) if tqdm else jobs
    raw: dict[str, list] = {name: [] for name in table}
    for name, seed in bar:
        Y = make_target(args.dataset, args.n, seed)
        errs, spi = flow(
            table[name]["fn"],
            table[name]["kw"],
            Y,
            iters=args.iters,
            lr=args.lr,
            seed=seed,
            checkpoints=checkpoints,
            dtype=dtype,
            source_std=args.source_std,
        )
        raw[name].append({"seed": seed, "errors": errs, "s_per_iter": spi})
    rows = []
    for name, runs in raw.items():
        row = {"method": name}
        for c in checkpoints:
            vals = [r["errors"][c] for r in runs]
            row[f"it {c}"] = fmt(statistics.mean(vals), statistics.pstdev(vals))
        spis = [r["s_per_iter"] for r in runs]
        row["s/iter"] = f"{statistics.median(spis):.4f}"
        rows.append(row)
    width = max(len(r["method"]) for r in rows)
    header = " | ".join([f"{'method':{width}s}"] + [f"{k:>18s}" for k in rows[0] if k != "method"])
    print(f"\n{args.dataset}: exact W2^2 (mean ± std over {args.seeds} seeds)")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            " | ".join(
                [f"{r['method']:{width}s}"] + [f"{v:>18s}" for k, v in r.items() if k != "method"]
            )
        )
    with open(out / f"{args.dataset}.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        wr.writeheader()
        wr.writerows(rows)
    (out / f"{args.dataset}.json").write_text(
        json.dumps({"settings": settings, "runs": raw}, indent=2)
    )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for name, runs in raw.items():
            mean = [statistics.mean(r["errors"][c] for r in runs) for c in checkpoints]
            ax.semilogy(checkpoints, mean, "o-", label=name)
        ax.set_xlabel("iteration")
        ax.set_ylabel("exact $W_2^2$")
        ax.set_title(f"gradient flow, {args.dataset}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / f"{args.dataset}.png", dpi=120)
    except ImportError:  # pragma: no cover
        pass
    print(f"\nresults written to {out.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
