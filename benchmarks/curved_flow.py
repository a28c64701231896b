"""Gradient flows on curved spaces: the hyperboloid, SPD matrices and a product space.

A source cloud flows onto a target by Riemannian gradient descent on a sliced or
tree-sliced discrepancy: at every step the Euclidean gradient of ``N`` times the
discrepancy (fresh slices from the step's generator, ``power=True``) is turned into the
Riemannian one and the points move along the manifold by :func:`tsw.riemannian_step`,
with a constant step size. The discrepancies' scales differ by orders of magnitude, so
each method takes its own step size: the one of the ``--lr`` grid with the lowest error
after ``--tune-steps`` steps on seed 0 (reported beside its results).

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

Example: ``python -m benchmarks.curved_flow --steps 500 --seeds 5`` (about 5 minutes on one core).
``--smoke``: tiny settings for the test suite. ``--speed``: instead of the flows, the time
of :func:`tsw.mc_tsw` against :func:`tsw.db_tsw` at equal trees and lines (forward +
backward, the same points read as R^D by Db-TSW, interleaved rounds; ``--rounds``).
``--compare``: single-factor MC-TSW against its counterparts, STSW on S^2 (equal on the
same trees with the uniform split; values and times at the defaults) and Db-TSW on R^3.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

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
    if not np.isfinite(cost).all():  # points run off to where their distances overflow
        raise ValueError("the squared geodesic distances overflow")
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


def _step(X: torch.Tensor, grad: torch.Tensor, lr: float, flow: str) -> torch.Tensor:
    """One Riemannian gradient step of size ``lr`` (:func:`tsw.riemannian_step`) per factor."""
    if flow == "hyperbolic":
        return riemannian_step(X, grad, lr, manifold="lorentz")
    if flow == "spd":
        return riemannian_step(X, grad, lr, manifold="spd_affine")
    (E, S, H), (gE, gS, gH) = _split(X), _split(grad)
    return torch.cat(
        [
            riemannian_step(E, gE, lr, manifold="euclidean"),
            riemannian_step(S, gS, lr, manifold="sphere"),
            riemannian_step(H, gH, lr, manifold="lorentz"),
        ],
        dim=-1,
    )


def run_flow(
    flow: str, method: dict, X: torch.Tensor, Y: torch.Tensor, steps: int, lr: float, seed: int
) -> dict:
    """One flow at step size ``lr``: log10 W2 at the checkpoints (inf if it diverged), s/step."""
    gen = _generator(5_000 + seed)
    checkpoints = sorted({max(steps * i // 5, 1) for i in range(1, 6)})
    curve = {0: math.log10(w2(X, Y, flow))}
    elapsed = 0.0
    n = X.shape[0]
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        Xg = X.detach().requires_grad_(True)
        try:
            (grad,) = torch.autograd.grad(method["loss"](Xg, Y, gen) * n, Xg)
            X = _step(X.detach(), grad, lr, flow)
            if not bool(torch.isfinite(X).all()):  # e.g. an SPD exponential that overflowed
                raise ValueError("the step left non-finite points")
            elapsed += time.perf_counter() - t0
            if step in checkpoints:
                curve[step] = math.log10(w2(X, Y, flow))
        except (ValueError, torch.linalg.LinAlgError):  # pyright: ignore[reportPrivateImportUsage]
            # beyond the dtype, a NaN, not SPD: this lr diverged
            return {"curve": dict.fromkeys([0, *checkpoints], math.inf), "s_per_step": math.nan}
    return {"curve": curve, "s_per_step": elapsed / steps}


def tune(flow: str, method: dict, args, dtype: torch.dtype) -> float:
    """The step size of ``--lr`` with the lowest final error on seed 0 in ``--tune-steps``."""
    grid = [float(v) for v in args.lr.split(",")]
    if len(grid) == 1:
        return grid[0]
    X, Y = (t.to(dtype) for t in DATA[flow](args.n, 0))
    finals = {
        lr: run_flow(flow, method, X, Y, args.tune_steps, lr, 0)["curve"][args.tune_steps]
        for lr in grid
    }
    return min(grid, key=lambda lr: (finals[lr], lr))


# --------------------------------------------------------------------------- speed


#: the products of ``--speed`` (each against Db-TSW on as many columns)
SPEED_PRODUCTS = {
    "R^4 x S^3 x H^3": (("euclidean", 4), ("sphere", 3), ("hyperbolic", 3)),
    "H^11": (("hyperbolic", 11),),
    "R^12": (("euclidean", 12),),
}


def product_points(components, n: int, g: torch.Generator, dtype) -> torch.Tensor:
    """``n`` points of a product: Gaussian, normalised Gaussian, hyperboloid above a Gaussian."""
    cols = []
    for kind, d in components:
        z = torch.randn(n, d + (kind == "sphere"), generator=g, dtype=F64)
        if kind == "sphere":
            z = torch.nn.functional.normalize(z, dim=-1)
        elif kind == "hyperbolic":
            z = torch.cat([(1 + (z * z).sum(-1, keepdim=True)).sqrt(), z], dim=-1)
        cols.append(z)
    return torch.cat(cols, dim=-1).to(dtype)


def time_mc_tsw(components, n: int, trees: int, lines: int, rounds: int, dtype) -> dict:
    """Forward + backward of mc_tsw and db_tsw at equal trees and lines, interleaved.

    The same points for both (Db-TSW reads the concatenated coordinates as R^D), explicit
    trees drawn once, ``validate=False``; medians over ``rounds`` and the median of the
    per-round ratios (:func:`benchmarks._timing.interleaved`).
    """
    from benchmarks._timing import interleaved, median

    g = _generator(0)
    X, Y = product_points(components, n, g, dtype), product_points(components, n, g, dtype)
    D = X.shape[-1]
    mixed = tsw.sample_mixed_curvature_trees(
        components, n_trees=trees, n_lines=lines, seed=0, dtype=dtype
    )
    lines_ = tsw.sample_concurrent_lines(
        D, n_trees=trees, n_lines=lines, center=torch.zeros(D, dtype=dtype), seed=0
    )

    def mc():
        Xg = X.clone().requires_grad_(True)
        tsw.mc_tsw(Xg, Y, components=components, trees=mixed, validate=False).backward()

    def db():
        Xg = X.clone().requires_grad_(True)
        tsw.db_tsw(Xg, Y, trees=lines_, validate=False).backward()

    times = interleaved({"mc_tsw": mc, "db_tsw": db}, rounds=rounds)
    ratio = median([a / b for a, b in zip(times["mc_tsw"], times["db_tsw"], strict=True)])
    return {
        "mc_tsw [s]": median(times["mc_tsw"]),
        "db_tsw [s]": median(times["db_tsw"]),
        "mc_tsw / db_tsw": ratio,
    }


def speed(args, out) -> int:
    """The ``--speed`` table: mc_tsw against db_tsw, forward + backward, one thread."""
    dtype = getattr(torch, args.dtype)
    sizes = (200, 2000) if args.smoke else (500, 2000, 10000)
    trees, rounds = (5, 1) if args.smoke else (250, args.rounds)
    rows = []
    for label, components in SPEED_PRODUCTS.items():
        for n in sizes:
            timing = time_mc_tsw(components, n, trees, args.lines, rounds, dtype)
            rows.append({"product": label, "N=M": n, "T": trees, "k": args.lines, **timing})
    header = list(rows[0])
    print_table(
        f"mc_tsw against db_tsw at equal trees and lines, forward + backward, {args.dtype}, "
        f"{torch.get_num_threads()} thread(s), median over {rounds} rounds",
        header,
        [[f"{r[h]:.4g}" if isinstance(r[h], float) else str(r[h]) for h in header] for r in rows],
    )
    write_results(
        out, "curved_flow_speed", header, [list(r.values()) for r in rows], {"rows": rows}
    )
    return 0


def compare(args, out) -> int:
    """The ``--compare`` table: single-factor MC-TSW against STSW (S^2) and Db-TSW (R^3).

    On S^2 with the uniform split (``delta=0``) and the same trees, MC-TSW and STSW are the
    same distance (every point at its angle to the root on every ray, mass ``1/k`` on
    each): their difference is printed. Then values at the defaults (mean ± std over
    ``--seeds`` seeds, 250 trees of 4 rays, L = 1000 for SW) on two clouds per space, and
    forward + backward times on S^2 at equal trees (interleaved, ``--rounds``).
    """
    from benchmarks._timing import interleaved, median

    n, T, k = (200, 5, 4) if args.smoke else (2000, 250, 4)
    g = _generator(0)

    def sphere(shift):
        z = 0.5 * torch.randn(n, 3, generator=g, dtype=F64) + torch.tensor(shift, dtype=F64)
        return torch.nn.functional.normalize(z, dim=-1)

    S1, S2 = sphere([0.0, 0.0, 1.0]), sphere([1.0, 0.0, 0.3])
    E1 = torch.randn(n, 3, generator=g, dtype=F64)
    E2 = 1.5 * torch.randn(n, 3, generator=g, dtype=F64) + torch.tensor([1.0, 0.0, 0.0])
    trees = tsw.sample_spherical_trees(3, n_trees=T, n_lines=k, seed=0, dtype=F64)
    mixed = tsw.MixedCurvatureTrees(trees.roots, trees.directions)
    on_s2 = [("sphere", 2)]
    tie = (
        float(tsw.mc_tsw(S1, S2, components=on_s2, trees=mixed, delta=0.0)),
        float(tsw.stsw(S1, S2, trees=trees, delta=0.0)),
    )
    print(f"S^2, uniform split, the same trees: mc_tsw {tie[0]:.15g}, stsw {tie[1]:.15g}")
    cases = {
        "S^2: mc_tsw": lambda s: tsw.mc_tsw(S1, S2, components=on_s2, n_trees=T, seed=s),
        "S^2: mc_tsw, split='ray'": lambda s: tsw.mc_tsw(
            S1, S2, components=on_s2, n_trees=T, split="ray", seed=s
        ),
        "S^2: stsw": lambda s: tsw.stsw(S1, S2, n_trees=T, seed=s),
        "R^3: mc_tsw": lambda s: tsw.mc_tsw(
            E1, E2, components=[("euclidean", 3)], n_trees=T, seed=s
        ),
        "R^3: db_tsw": lambda s: tsw.db_tsw(E1, E2, n_trees=T, seed=s),
        "R^3: sw": lambda s: tsw.sw(E1, E2, n_projections=T * k, seed=s),
    }
    values = {key: [float(f(s)) for s in range(args.seeds)] for key, f in cases.items()}
    print_table(
        f"values at the defaults, N = M = {n}, {T} trees of {k} rays, over {args.seeds} seeds",
        ["distance", "mean ± std"],
        [[key, mean_std(v, ".4f", ".4f")] for key, v in values.items()],
    )

    def step(fn):
        def run():
            X = S1.clone().requires_grad_(True)
            fn(X).backward()

        return run

    times = interleaved(
        {
            "mc_tsw": step(lambda X: tsw.mc_tsw(X, S2, components=on_s2, trees=mixed)),
            "stsw": step(lambda X: tsw.stsw(X, S2, trees=trees)),
        },
        rounds=1 if args.smoke else args.rounds,
    )
    ratio = median([a / b for a, b in zip(times["mc_tsw"], times["stsw"], strict=True)])
    timing = {"mc_tsw [s]": median(times["mc_tsw"]), "stsw [s]": median(times["stsw"])}
    print(
        f"S^2 forward + backward, N = M = {n}, {T} x {k}: mc_tsw {timing['mc_tsw [s]']:.4g} s, "
        f"stsw {timing['stsw [s]']:.4g} s, ratio {ratio:.3g}"
    )
    rows = [[key, *mean_and_std(v)] for key, v in values.items()]
    payload = {"tie": tie, "values": values, "timing": timing | {"mc_tsw / stsw": ratio}}
    write_results(out, "curved_flow_compare", ["distance", "mean", "std"], rows, payload)
    return 0


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
    ap.add_argument(
        "--lr",
        default="0.03,0.1,0.3,1,3,10,30",
        help="step sizes: one, or a grid tuned per method on seed 0 (--tune-steps)",
    )
    ap.add_argument("--tune-steps", type=int, default=None, help="default: --steps // 2")
    ap.add_argument("--projections", type=int, default=200, help="L of the sliced methods")
    ap.add_argument("--lines", type=int, default=4, help="k of the tree methods (L / k trees)")
    ap.add_argument("--hspdsw-projections", type=int, default=50)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    ap.add_argument("--smoke", action="store_true", help="tiny settings (the test suite's)")
    ap.add_argument(
        "--speed", action="store_true", help="time mc_tsw against db_tsw instead of the flows"
    )
    ap.add_argument(
        "--compare",
        action="store_true",
        help="single-factor mc_tsw against stsw (S^2) and db_tsw (R^3) instead of the flows",
    )
    ap.add_argument("--rounds", type=int, default=7, help="rounds of --speed and --compare")
    add_run_args(ap, "curved_flow")
    args = ap.parse_args(argv)
    if args.smoke:
        args.n, args.steps, args.seeds, args.lr = 24, 3, 1, "0.1,0.3"
        args.projections, args.lines, args.hspdsw_projections = 8, 2, 4
    if args.tune_steps is None:
        args.tune_steps = max(args.steps // 2, 1)
    out = prepare(args)
    if args.speed:
        return speed(args, out)
    if args.compare:
        return compare(args, out)
    flows = [f.strip() for f in args.flows.split(",") if f.strip()]
    bad = [f for f in flows if f not in FLOWS]
    if bad:
        ap.error(f"unknown flows {bad}; choose from {list(FLOWS)}")
    dtype = getattr(torch, args.dtype)
    settings = vars(args) | {"metric": "log10 exact geodesic W2 (float64, ot.emd2)"}
    print(f"settings: {settings}")
    payload: dict = {"settings": settings, "flows": {}}
    numeric_header = ["flow", "key", "method", "lr", "n_seeds"]
    checkpoints = [0, *sorted({max(args.steps * i // 5, 1) for i in range(1, 6)})]
    for c in checkpoints:
        numeric_header += [f"log10_w2_step{c}_mean", f"log10_w2_step{c}_std"]
    numeric_header += ["s_per_step_median"]
    numeric: list[list] = []
    for flow in flows:
        table = methods(flow, args)
        raw: dict[str, list] = {k: [] for k in table}
        lrs = {k: tune(flow, table[k], args, dtype) for k in progress(list(table), f"{flow} lr")}
        jobs = [(k, s) for k in table for s in range(args.seeds)]
        for key, seed in progress(jobs, f"{flow} flows"):
            X, Y = (t.to(dtype) for t in DATA[flow](args.n, seed))
            run = run_flow(flow, table[key], X, Y, args.steps, lrs[key], seed)
            raw[key].append({"seed": seed, "lr": lrs[key], **run})
        header = ["method", "lr", *[f"step {c}" for c in checkpoints], "s/step"]
        rows = [
            [
                table[k]["name"],
                f"{lrs[k]:g}",
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
                    lrs[k],
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
