"""Gradient flows on curved spaces: the hyperboloid, SPD matrices and a product space.

A source cloud flows onto a target by Riemannian gradient steps on a sliced or
tree-sliced discrepancy: at every step the Euclidean gradient of the discrepancy (fresh
slices from the step's generator, ``power=True``) is turned into a Riemannian one and the
points move along the manifold with :func:`tsw.riemannian_step`. Every method takes the
same steps: the gradient is rescaled to a root-mean-square Riemannian length of 1 per
point, and the step length (in geodesic units) decays geometrically from ``--lr`` to
``--lr / 20`` over the run. So the methods differ only in the directions their
discrepancy gives, not in the size of its gradient (the discrepancies' scales differ by
orders of magnitude).

The error is the **exact** Wasserstein-2 distance on the manifold's geodesic distance
(``ot.emd2`` in float64 on the pairwise squared distances), reported as ``log10 W2``,
mean ± std over ``--seeds`` seeds, at five checkpoints; the time per step (the
discrepancy, its gradient and the step; not the metric) is the median over the seeds.

Flows (``--flows``):

* ``hyperbolic``: H^2 (Lorentz model); the target mixes 4 wrapped normal distributions
  (Nagano et al. 2019) centred at distance 1.5 from the origin in four directions, the
  source is a wrapped normal at the origin (Bonet et al.'s setting, ICLR 2023 / JMLR
  2025). Methods: GHSW, HHSW (:func:`tsw.ghsw`, :func:`tsw.hhsw`), MC-TSW on the single
  factor ``[("hyperbolic", 2)]`` (:func:`tsw.mc_tsw`) and SW on the points' Euclidean
  coordinates in the Poincare ball.
* ``spd``: SPD(2) matrices (affine-invariant metric, the steps' and the error's); the
  target mixes 3 wrapped normals around three SPD matrices, the source is one around the
  identity. Methods: SPDSW (log-Euclidean), HSPDSW (affine-invariant Busemann), SW on the
  half-vectorised matrix logarithms.
* ``product``: R^2 x S^2 x H^2 (8 columns); the target mixes 6 product components whose
  centres move together in the three factors (mode ``i`` at angle ``2 pi i / 6`` in each),
  the source is one product component at the factors' origins. Methods: MC-TSW (the
  geodesic split; and ``split="ray"``), SW on the ambient coordinates (the sphere's unit
  vectors, the hyperboloid's Poincare coordinates), and the separable baselines of the
  MC-TSW paper: Prod-SW (the sum over the factors of SW, SW on the sphere's ambient
  coordinates and GHSW) and Prod-TSW (Db-TSW, STSW and MC-TSW on the hyperbolic factor).

Tree methods use ``p = 2`` (the Sobolev transport :math:`ST_2^2` under ``power=True``,
the official TSW codes' default); the sliced ones ``SW_2^2``. At equal slices: ``L``
directions for each sliced method, ``L / k`` trees of ``k`` rays for each tree method.

Example: ``python -m benchmarks.curved_flow --steps 300 --seeds 3``.
``--smoke``: tiny settings for the test suite.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

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
    write_results,
)
from tsw.curved import (
    exp0,
    hyperbolic_distance_matrix,
    lorentz_to_poincare,
    riemannian_step,
    spd_distance_matrix,
    spd_exp_map,
    wrapped_normal,
)
from tsw.curved._hyperbolic import minkowski_inner, riemannian_gradient
from tsw.curved._product import factors_of, product_distance
from tsw.curved._spd import half_vectorize, spd_log

F64 = torch.float64
FLOWS = ("hyperbolic", "spd", "product")
#: the product flow's factors
PRODUCT = (("euclidean", 2), ("sphere", 2), ("hyperbolic", 2))
#: the MC-TSW paper's gradient flow (Table 1: a mixture of 6 wrapped normals on a
#: mixed-curvature space), log W2 at the end, as reported in published accounts of the
#: paper (its text was not available): SW ambient 0.33, Prod-TSW 0.34, Prod-SW 0.31,
#: MC-TSW -3.65 (GPU-sized runs; the logarithm's base is not given there)
PAPER_PRODUCT = {"SW ambient": 0.33, "Prod-TSW": 0.34, "Prod-SW": 0.31, "MC-TSW": -3.65}


# --------------------------------------------------------------------------- data


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _angle(i: int, m: int) -> tuple[float, float]:
    return math.cos(2 * math.pi * i / m), math.sin(2 * math.pi * i / m)


def _mixture(n: int, m: int, draw: Callable[[int, int, torch.Generator], torch.Tensor], g):
    """``n`` points, mode ``i`` of ``m`` drawn ``n // m`` (or one more) times by ``draw``."""
    counts = [n // m + (i < n % m) for i in range(m)]
    return torch.cat([draw(i, c, g) for i, c in enumerate(counts) if c])


def hyperbolic_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Source (WND at the origin, cov 0.2 I) and target (4 WNDs, cov 0.05 I) on H^2."""
    g = _generator(seed)
    origin = torch.tensor([1.0, 0.0, 0.0], dtype=F64)
    source = wrapped_normal(origin, 0.2 * torch.eye(2, dtype=F64), n, generator=g)

    def mode(i, c, g):
        centre = exp0(1.5 * torch.tensor(_angle(i, 4), dtype=F64))
        return wrapped_normal(centre, 0.05 * torch.eye(2, dtype=F64), c, generator=g)

    return source, _mixture(n, 4, mode, g)


def _spd_around(centre: torch.Tensor, scale: float, c: int, g) -> torch.Tensor:
    """``c`` affine-invariant wrapped normals around ``centre``: Exp of Gaussian symmetric V."""
    n = centre.shape[-1]
    A = scale * torch.randn(c, n, n, generator=g, dtype=F64)
    V = (A + A.mT) / 2
    root = torch.linalg.cholesky(centre)  # V at the centre: L V L^T (a congruence)
    return spd_exp_map(centre.expand(c, n, n), root @ V @ root.mT, "affine")


def spd_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Source (around I) and target (3 modes) of SPD(2) matrices."""
    g = _generator(seed)
    source = _spd_around(torch.eye(2, dtype=F64), 0.3, n, g)
    centres = [torch.diag(torch.tensor(v, dtype=F64)) for v in ((4.0, 0.5), (0.5, 4.0))]
    centres.append(torch.tensor([[2.0, 1.2], [1.2, 2.0]], dtype=F64))
    return source, _mixture(n, 3, lambda i, c, g: _spd_around(centres[i], 0.15, c, g), g)


def _sphere_exp(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    v = v - (v * x).sum(-1, keepdim=True) * x
    r = v.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    return torch.cos(r) * x + torch.sin(r) * v / r


def _product_mode(centre: tuple, scale: float, c: int, g) -> torch.Tensor:
    """A product component: Gaussian, sphere-wrapped and hyperboloid-wrapped normals."""
    e, s, h = centre
    E = e + scale * torch.randn(c, 2, generator=g, dtype=F64)
    S = _sphere_exp(s.expand(c, 3), scale * torch.randn(c, 3, generator=g, dtype=F64))
    H = wrapped_normal(h, scale**2 * torch.eye(2, dtype=F64), c, generator=g)
    return torch.cat([E, S, H], dim=-1)


def product_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Source (one component at the origins) and target (6 coupled modes) on R^2 x S^2 x H^2."""
    g = _generator(seed)
    north = torch.tensor([0.0, 0.0, 1.0], dtype=F64)
    origin = torch.tensor([1.0, 0.0, 0.0], dtype=F64)
    source = _product_mode((torch.zeros(2, dtype=F64), north, origin), 0.5, n, g)

    def mode(i, c, g):
        u = torch.tensor(_angle(i, 6), dtype=F64)
        s = torch.nn.functional.normalize(torch.cat([u, torch.tensor([0.6], dtype=F64)]), dim=0)
        return _product_mode((2.0 * u, s, exp0(1.2 * u)), 0.15, c, g)

    return source, _mixture(n, 6, mode, g)


# --------------------------------------------------------------------------- error


def w2(X: torch.Tensor, Y: torch.Tensor, flow: str) -> float:
    """Exact geodesic W2 of uniform clouds (``ot.emd2`` on squared geodesic distances)."""
    with torch.no_grad():
        X, Y = X.double(), Y.double()
        if flow == "hyperbolic":
            D = hyperbolic_distance_matrix(X, Y, "lorentz")
        elif flow == "spd":
            D = spd_distance_matrix(X, Y, "affine")
        else:
            D = product_distance(X, Y, factors_of(PRODUCT))
        cost = (D * D).numpy()
    a = torch.full((X.shape[0],), 1 / X.shape[0], dtype=F64).numpy()
    b = torch.full((Y.shape[0],), 1 / Y.shape[0], dtype=F64).numpy()
    return math.sqrt(max(float(ot.emd2(a, b, cost, numItermax=10**7)), 0.0))


# --------------------------------------------------------------------------- methods


def _split(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return X[..., :2], X[..., 2:5], X[..., 5:]


def methods(flow: str, args) -> dict[str, dict]:
    """The flow's methods: key -> {"name", "loss": (X, Y, generator) -> value^p}."""
    L, k = args.projections, args.lines
    T = max(1, L // k)
    tree = {"n_trees": T, "n_lines": k, "p": 2, "power": True, "validate": False}
    sliced = {"n_projections": L, "p": 2, "power": True, "validate": False}
    if flow == "hyperbolic":
        return {
            "ghsw": {
                "name": f"GHSW_2 (L={L})",
                "loss": lambda X, Y, g: tsw.ghsw(X, Y, generator=g, **sliced),
            },
            "hhsw": {
                "name": f"HHSW_2 (L={L})",
                "loss": lambda X, Y, g: tsw.hhsw(X, Y, generator=g, **sliced),
            },
            "mc_tsw": {
                "name": f"MC-TSW on H^2 ({T}x{k}, p=2)",
                "loss": lambda X, Y, g: tsw.mc_tsw(
                    X, Y, components=[("hyperbolic", 2)], generator=g, **tree
                ),
            },
            "sw_ball": {
                "name": f"SW_2 on Poincare coordinates (L={L})",
                "loss": lambda X, Y, g: tsw.sw(
                    lorentz_to_poincare(X), lorentz_to_poincare(Y), generator=g, **sliced
                ),
            },
        }
    if flow == "spd":
        return {
            "spdsw": {
                "name": f"SPDSW_2 (L={L})",
                "loss": lambda X, Y, g: tsw.spdsw(X, Y, generator=g, **sliced),
            },
            "hspdsw": {
                "name": f"HSPDSW_2 (L={args.hspdsw_projections})",
                "loss": lambda X, Y, g: tsw.hspdsw(
                    X, Y, generator=g, **{**sliced, "n_projections": args.hspdsw_projections}
                ),
            },
            "sw_log": {
                "name": f"SW_2 on the logarithms (L={L})",
                "loss": lambda X, Y, g: tsw.sw(
                    half_vectorize(spd_log(X)), half_vectorize(spd_log(Y)), generator=g, **sliced
                ),
            },
        }

    def ambient(X):
        E, S, H = _split(X)
        return torch.cat([E, S, lorentz_to_poincare(H)], dim=-1)

    def prod_sw(X, Y, g):
        (E, S, H), (F, R, K) = _split(X), _split(Y)
        parts = (tsw.sw(E, F, generator=g, **sliced), tsw.sw(S, R, generator=g, **sliced))
        return parts[0] + parts[1] + tsw.ghsw(H, K, generator=g, **sliced)

    def prod_tsw(X, Y, g):
        (E, S, H), (F, R, K) = _split(X), _split(Y)
        hyper = tsw.mc_tsw(H, K, components=[("hyperbolic", 2)], generator=g, **tree)
        return tsw.db_tsw(E, F, generator=g, **tree) + tsw.stsw(S, R, generator=g, **tree) + hyper

    return {
        "mc_tsw": {
            "name": f"MC-TSW ({T}x{k}, p=2)",
            "loss": lambda X, Y, g: tsw.mc_tsw(X, Y, components=PRODUCT, generator=g, **tree),
        },
        "mc_tsw_ray": {
            "name": f"MC-TSW, split='ray' ({T}x{k}, p=2)",
            "loss": lambda X, Y, g: tsw.mc_tsw(
                X, Y, components=PRODUCT, split="ray", generator=g, **tree
            ),
        },
        "sw_ambient": {
            "name": f"SW_2 ambient (L={L})",
            "loss": lambda X, Y, g: tsw.sw(ambient(X), ambient(Y), generator=g, **sliced),
        },
        "prod_sw": {"name": f"Prod-SW (SW + SW + GHSW, L={L} each)", "loss": prod_sw},
        "prod_tsw": {
            "name": f"Prod-TSW (Db-TSW + STSW + MC-TSW on H, {T}x{k} each)",
            "loss": prod_tsw,
        },
    }


# --------------------------------------------------------------------------- the flow


def _norm2(x: torch.Tensor, g: torch.Tensor, manifold: str) -> torch.Tensor:
    """Squared Riemannian norm, per point, of the gradient of Euclidean gradient ``g``."""
    if manifold == "euclidean":
        return (g * g).sum(-1)
    if manifold == "sphere":  # the tangent part of g at the unit x
        return (g * g).sum(-1) - (g * x).sum(-1) ** 2
    if manifold == "lorentz":
        v = riemannian_gradient(x, g, "lorentz")
        return minkowski_inner(v, v)
    S = (g + g.mT) / 2  # affine-invariant: grad = X S X, |grad|^2 = tr((S X)^2)
    SX = S @ x
    return (SX * SX.mT).sum((-2, -1))


def _step(X: torch.Tensor, grad: torch.Tensor, lr: float, flow: str) -> torch.Tensor:
    """One Riemannian step (:func:`tsw.riemannian_step`) of RMS geodesic length ``lr`` per point."""
    if flow == "hyperbolic":
        parts = [(X, grad, "lorentz")]
    elif flow == "spd":
        parts = [(X, grad, "spd_affine")]
    else:
        (E, S, H), (gE, gS, gH) = _split(X), _split(grad)
        parts = [(E, gE, "euclidean"), (S, gS, "sphere"), (H, gH, "lorentz")]
    sq = sum(_norm2(x, g, manifold).clamp_min(0) for x, g, manifold in parts)
    rms = float(torch.as_tensor(sq).mean().sqrt())
    scale = lr / rms if rms > 0 else 0.0
    moved = [riemannian_step(x, g, scale, manifold=manifold) for x, g, manifold in parts]
    return moved[0] if len(moved) == 1 else torch.cat(moved, dim=-1)


def run_flow(flow: str, method: dict, X: torch.Tensor, Y: torch.Tensor, args, seed: int):
    """One flow: log10 W2 at the checkpoints, seconds per step."""
    gen = _generator(5_000 + seed)
    steps = args.steps
    checkpoints = sorted({max(steps * i // 5, 1) for i in range(1, 6)})
    decay = (1 / 20) ** (1 / max(steps - 1, 1))
    curve = {0: math.log10(w2(X, Y, flow))}
    elapsed = 0.0
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        Xg = X.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(method["loss"](Xg, Y, gen), Xg)
        X = _step(X.detach(), grad, args.lr * decay ** (step - 1), flow)
        elapsed += time.perf_counter() - t0
        if step in checkpoints:
            curve[step] = math.log10(w2(X, Y, flow))
    return {"curve": curve, "s_per_step": elapsed / steps}


DATA = {"hyperbolic": hyperbolic_data, "spd": spd_data, "product": product_data}
TITLES = {
    "hyperbolic": "H^2: a wrapped normal onto a mixture of 4 wrapped normals",
    "spd": "SPD(2), affine-invariant: around I onto 3 modes",
    "product": "R^2 x S^2 x H^2: one component onto 6 coupled modes",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--flows", default=",".join(FLOWS))
    ap.add_argument("--n", type=int, default=300, help="points per cloud")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=0.1, help="first step length (geodesic RMS)")
    ap.add_argument("--projections", type=int, default=200, help="L of the sliced methods")
    ap.add_argument("--lines", type=int, default=4, help="k of the tree methods (L / k trees)")
    ap.add_argument("--hspdsw-projections", type=int, default=50)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    ap.add_argument("--smoke", action="store_true", help="tiny settings (the test suite's)")
    add_run_args(ap, "curved_flow")
    args = ap.parse_args(argv)
    if args.smoke:
        args.n, args.steps, args.seeds = 24, 3, 1
        args.projections, args.lines, args.hspdsw_projections = 8, 2, 4
    out = prepare(args)
    flows = [f.strip() for f in args.flows.split(",") if f.strip()]
    bad = [f for f in flows if f not in FLOWS]
    if bad:
        ap.error(f"unknown flows {bad}; choose from {list(FLOWS)}")
    dtype = getattr(torch, args.dtype)
    settings = vars(args) | {"metric": "log10 exact geodesic W2 (float64, ot.emd2)"}
    print(f"settings: {settings}")
    payload: dict = {"settings": settings, "flows": {}}
    numeric_header = ["flow", "key", "method", "n_seeds"]
    checkpoints = [0, *sorted({max(args.steps * i // 5, 1) for i in range(1, 6)})]
    for c in checkpoints:
        numeric_header += [f"log10_w2_step{c}_mean", f"log10_w2_step{c}_std"]
    numeric_header += ["s_per_step_median"]
    numeric: list[list] = []
    for flow in flows:
        table = methods(flow, args)
        raw: dict[str, list] = {k: [] for k in table}
        jobs = [(k, s) for k in table for s in range(args.seeds)]
        for key, seed in progress(jobs, f"{flow} flows"):
            X, Y = (t.to(dtype) for t in DATA[flow](args.n, seed))
            raw[key].append({"seed": seed, **run_flow(flow, table[key], X, Y, args, seed)})
        header = ["method", *[f"step {c}" for c in checkpoints], "s/step"]
        rows = [
            [
                table[k]["name"],
                *[mean_std([r["curve"][c] for r in raw[k]], ".2f", ".2f") for c in checkpoints],
                f"{statistics.median(r['s_per_step'] for r in raw[k]):.4f}",
            ]
            for k in table
        ]
        title = (
            f"{TITLES[flow]}, {args.n} points, {args.dtype}: log10 exact W2, "
            f"mean ± std over {args.seeds} seeds"
        )
        if flow == "product":
            title += f"\n(MC-TSW paper, Table 1, log W2 at the end: {PAPER_PRODUCT})"
        print_table(title, header, rows)
        payload["flows"][flow] = raw
        for k in table:
            numeric.append(
                [
                    flow,
                    k,
                    table[k]["name"],
                    len(raw[k]),
                    *[
                        x
                        for c in checkpoints
                        for x in mean_and_std([r["curve"][c] for r in raw[k]])
                    ],
                    statistics.median(r["s_per_step"] for r in raw[k]),
                ]
            )
        curves = {
            table[k]["name"]: [[r["curve"][c] for r in raw[k]] for c in checkpoints] for k in table
        }
        plot_curves(
            {name: [statistics.mean(v) for v in vals] for name, vals in curves.items()},
            checkpoints,
            xlabel="step",
            ylabel="log10 exact geodesic $W_2$",
            title=(
                f"{TITLES[flow]}, {args.n} points; mean over {args.seeds} seeds, band: min to max"
            ),
            path=out / f"curved_flow_{flow}.png",
            bands={n: ([min(v) for v in vs], [max(v) for v in vs]) for n, vs in curves.items()},
        )
    payload["paper_product"] = PAPER_PRODUCT
    write_results(out, "curved_flow", numeric_header, numeric, payload)
    print(f"\nresults written to {out.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
