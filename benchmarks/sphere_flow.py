"""Spherical gradient flow: a cloud on S^2 flows onto a mixture of 12 von Mises-Fisher.

The target mixes 12 vMF (concentration ``kappa``, default 50) centred on the vertices
of an icosahedron (the STSW paper's setting, spec 5.6). The source starts as normalised
Gaussian samples; Adam moves it and every step renormalises it onto the sphere. Metrics:
``log10`` of the **exact** squared geodesic W2 (``ot.emd2`` with cost ``arccos(<x, y>)^2``
in float64, no cosine clamp) and the negative log-likelihood of the source under the
mixture; seconds per step.

Methods (``--methods``): ``stsw`` (:func:`tsw.stsw`), ``ssw`` (POT's spherical SW through
:func:`tsw.ssw`), ``sw`` (SW of the ambient R^3), ``s3w`` / ``ri-s3w`` (:func:`tsw.s3w`
without / with one random rotation per step) and ``ari-s3w`` (``--ari-rotations``
rotations drawn at every step from a fixed pool of ``--ari-pool``, with
``--s3w-projections`` directions each). SW, S3W and RI-S3W use ``--sliced-projections``
directions, by default as many as STSW has trees: one sort per direction against one
sort per tree, so about the same time per step.

POT's spherical SW costs seconds per step at this size with many great circles: use
``--ssw-projections`` to choose, and say so when comparing.

Example: ``python -m benchmarks.sphere_flow --steps 500 --seeds 3``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

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
    write_results,
)
from tsw import datasets, metrics


def make_target(per_component: int, kappa: float, seed: int) -> torch.Tensor:
    """The 12-vMF target of :func:`tsw.datasets.make_vmf_mixture`, seed ``20_000 + seed``."""
    return datasets.make_vmf_mixture(per_component, kappa, seed=20_000 + seed)


def geodesic_w2_squared(X: torch.Tensor, Y: torch.Tensor) -> float:
    """Exact squared geodesic W2 of uniform clouds (:func:`tsw.metrics.geodesic_wasserstein`)."""
    return metrics.geodesic_wasserstein(X, Y, power=True)


def nll(X: torch.Tensor, kappa: float) -> float:
    """Mean NLL under the 12-vMF mixture (:func:`tsw.metrics.vmf_mixture_nll`)."""
    return metrics.vmf_mixture_nll(X, datasets.icosahedron(), kappa)


def methods(args) -> dict[str, dict]:
    T, k = args.trees, args.lines
    L, R = args.s3w_projections, args.ari_rotations
    S = args.sliced_projections or T
    return {
        "stsw": {
            "name": f"STSW ({T}x{k}, p={args.p:g}, delta={args.delta:g})",
            "fn": tsw.stsw,
            "kw": {"n_trees": T, "n_lines": k, "p": args.p, "delta": args.delta},
        },
        "ssw": {
            "name": f"SSW_2 (POT, L={args.ssw_projections})",
            "fn": tsw.ssw,
            "kw": {"n_projections": args.ssw_projections, "p": 2},
        },
        "sw": {
            "name": f"SW_2 in R^3 (L={S})",
            "fn": tsw.sw,
            "kw": {"n_projections": S, "p": 2},
        },
        "s3w": {
            "name": f"S3W_2 (L={S})",
            "fn": tsw.s3w,
            "kw": {"n_projections": S, "p": 2},
        },
        "ri-s3w": {
            "name": f"RI-S3W_2 (1 rotation, L={S})",
            "fn": tsw.s3w,
            "kw": {"n_projections": S, "p": 2, "n_rotations": 1},
        },
        "ari-s3w": {
            "name": f"ARI-S3W_2 ({R} of {args.ari_pool} rotations, L={L})",
            # a loss module owns the rotation pool: built per flow from the flow's seed
            "loss": lambda seed: tsw.nn.ARIS3WLoss(
                dim=3,
                pool_size=args.ari_pool,
                n_rotations=R,
                n_projections=L,
                validate=False,
                seed=3_000 + seed,
            ),
        },
    }


def flow(method, Y, *, steps, lr, seed, kappa, checkpoints=()):
    """One flow: log10 geodesic W2^2 at the checkpoints and at the end, NLL, s/step."""
    g = torch.Generator().manual_seed(seed)
    X0 = torch.randn(Y.shape, generator=g, dtype=torch.float64)
    X = (X0 / X0.norm(dim=1, keepdim=True)).float().requires_grad_(True)
    opt = torch.optim.Adam([X], lr=lr)
    gen = torch.Generator().manual_seed(3_000 + seed)
    loss = method["loss"](seed) if "loss" in method else None
    Yf = Y.float()
    elapsed, curve = 0.0, {}
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if loss is not None:
            loss(X, Yf).backward()
        else:
            method["fn"](X, Yf, generator=gen, validate=False, **method["kw"]).backward()
        opt.step()
        with torch.no_grad():
            X /= X.norm(dim=1, keepdim=True)
        elapsed += time.perf_counter() - t0
        if step in checkpoints and step != steps:
            curve[step] = math.log10(geodesic_w2_squared(X, Y))
    curve[steps] = math.log10(geodesic_w2_squared(X, Y))
    return {
        "log10_w2sq": curve[steps],
        "curve": curve,
        "nll": nll(X, kappa),
        "s_per_step": elapsed / steps,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--per-component", type=int, default=200, help="points per vMF (x12)")
    ap.add_argument("--kappa", type=float, default=50.0)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--trees", type=int, default=200)
    ap.add_argument("--lines", type=int, default=5)
    ap.add_argument("--p", type=float, default=2.0, help="p of STSW (official runs: 2)")
    ap.add_argument("--delta", type=float, default=2.0)
    ap.add_argument("--ssw-projections", type=int, default=100)
    ap.add_argument(
        "--sliced-projections",
        type=int,
        default=None,
        help="L of SW / S3W / RI-S3W (default: --trees, as many sorts per step as STSW)",
    )
    ap.add_argument("--s3w-projections", type=int, default=10, help="ARI-S3W L per rotation")
    ap.add_argument("--ari-rotations", type=int, default=30)
    ap.add_argument("--ari-pool", type=int, default=1000)
    ap.add_argument("--methods", default="stsw,ssw,sw,s3w,ri-s3w,ari-s3w")
    add_run_args(ap, "sphere_flow")
    args = ap.parse_args(argv)
    out = prepare(args)
    table = methods(args)
    keys = [k.strip() for k in args.methods.split(",") if k.strip()]
    bad = [k for k in keys if k not in table]
    if bad:
        ap.error(f"unknown methods {bad}; choose from {sorted(table)}")
    settings = vars(args) | {"metric": "log10 exact geodesic W2^2 (float64), NLL"}
    print(f"settings: {settings}")
    jobs = [(k, s) for k in keys for s in range(args.seeds)]
    checkpoints = sorted({max(args.steps * i // 5, 1) for i in range(1, 6)})
    raw: dict[str, list] = {k: [] for k in keys}
    for key, seed in progress(jobs, "sphere flows"):
        Y = make_target(args.per_component, args.kappa, seed)
        run = flow(
            table[key],
            Y,
            steps=args.steps,
            lr=args.lr,
            seed=seed,
            kappa=args.kappa,
            checkpoints=checkpoints,
        )
        raw[key].append({"seed": seed, **run})
    target_nll = statistics.mean(
        nll(make_target(args.per_component, args.kappa, s), args.kappa) for s in range(args.seeds)
    )
    header = ["method", *[f"step {c}" for c in checkpoints], "NLL", "s/step"]
    rows = []
    for k in keys:
        r = raw[k]
        rows.append(
            [
                table[k]["name"],
                *[mean_std([x["curve"][c] for x in r], ".2f", ".2f") for c in checkpoints],
                mean_std([x["nll"] for x in r], ".3f", ".3f"),
                f"{statistics.median(x['s_per_step'] for x in r):.4f}",
            ]
        )
    title = (
        f"12 vMF (kappa={args.kappa:g}), {len(Y)} points: log10 exact geodesic W2^2, "
        f"mean ± std over {args.seeds} seeds\n(NLL of the target samples themselves: "
        f"{target_nll:.3f}; STSW paper: -4.69 at step 500 with a clamped float32 metric "
        "whose floor is -4.69, about -5.67 in exact float64)"
    )
    print_table(title, header, rows)
    payload = {"settings": settings, "target_nll": target_nll, "runs": raw}
    numeric_header = ["key", "method", "n_seeds"]
    for c in checkpoints:
        numeric_header += [f"log10_w2sq_step{c}_mean", f"log10_w2sq_step{c}_std"]
    numeric_header += ["nll_mean", "nll_std", "s_per_step_median"]
    numeric = [
        [
            k,
            table[k]["name"],
            len(raw[k]),
            *[x for c in checkpoints for x in mean_and_std([r["curve"][c] for r in raw[k]])],
            *mean_and_std([r["nll"] for r in raw[k]]),
            statistics.median(r["s_per_step"] for r in raw[k]),
        ]
        for k in keys
    ]
    write_results(out, "sphere_flow", numeric_header, numeric, payload)
    curves = {
        table[k]["name"]: [[r["curve"][c] for r in runs] for c in checkpoints]
        for k, runs in raw.items()
    }
    plot_curves(
        {name: [statistics.mean(v) for v in vals] for name, vals in curves.items()},
        checkpoints,
        xlabel="step",
        ylabel="log10 exact geodesic $W_2^2$",
        title=(
            f"spherical gradient flow onto 12 vMF (kappa {args.kappa:g}), {len(Y)} points, "
            f"lr {args.lr:g}\nmean over {args.seeds} seeds; band: min to max over the seeds"
        ),
        path=out / "sphere_flow.png",
        bands={n: ([min(v) for v in vs], [max(v) for v in vs]) for n, vs in curves.items()},
    )
    print(f"\nresults written to {out.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
