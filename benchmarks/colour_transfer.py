"""Colour transfer with each plan's barycentric map (``--mode plans``).

The source image's colours are moved to the target image's palette: each plan between
the two pixel clouds in RGB (N = M pixels of a downsampled grid, uniform weights) gives
the barycentric map ``x_i -> sum_j P_ij y_j / a_i`` (:func:`tsw.barycentric_map`), and every
pixel of the full-resolution source takes the colour shift of its nearest sampled colour.
The images are scikit-learn's two sample photographs (``china.jpg`` to the palette of
``flower.jpg``), shipped with the package, so nothing is downloaded.

Plans: the exact optimal plan (``ot.emd``, the reference), :func:`tsw.expected_sliced_plan`,
:func:`tsw.min_sliced_transport_plan`, :func:`tsw.swgg` (L directions) and
:func:`tsw.expected_tree_sliced_plan` (L / 4 trees of 4 lines, Db-TSW and TSW-SL). For
each: the plan's cost (mean squared colour displacement) against the exact one, the
squared W2 distance between the mapped colours and the target's (``ot.emd2``: how well
the palette is reached; a barycentric map averages colours, so only a permutation
reaches 0) and the seconds of the plan and its map.

This module has one mode here, ``plans``; the benchmark of the papers' colour-transfer
flows lives in the same module on the baselines branch (``--mode flow``), to be merged.
Output under ``--out``: ``colour_transfer_plans.csv`` / ``.json`` and
``colour_transfer_plans.png`` (source, target and every plan's result).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import ot
import torch

import tsw
from benchmarks._report import add_run_args, prepare, print_table, write_results

MODES = ("plans",)


def load_images(step: int) -> tuple[np.ndarray, np.ndarray]:
    """The two scikit-learn sample photographs in [0, 1], (H, W, 3), source first."""
    from sklearn.datasets import load_sample_images

    china, flower = (im.astype(np.float64) / 255.0 for im in load_sample_images().images)
    return china[::step, ::step], flower[::step, ::step]


def plans(X: np.ndarray, Y: np.ndarray, L: int, k: int, steps: int) -> dict:
    """Name -> a call returning the plan between the pixel clouds (dense for small N)."""
    n = X.shape[0]
    w = np.full(n, 1.0 / n)
    P = tsw.sample_projections(X.shape[1], L, seed=0, dtype=torch.float64).numpy()
    T = max(1, L // k)
    return {
        "exact (ot.emd)": lambda: ot.emd(w, w, ot.dist(X, Y), numItermax=10**8),
        "expected sliced": lambda: tsw.expected_sliced_plan(X, Y, projections=P, dense=False)[0],
        "min sliced": lambda: tsw.min_sliced_transport_plan(X, Y, projections=P, dense=False)[0],
        "swgg": lambda: tsw.swgg(X, Y, projections=P, n_iter=steps, seed=0, dense=False)[0],
        "tree Db-TSW": lambda: tsw.expected_tree_sliced_plan(
            X, Y, n_trees=T, n_lines=k, seed=0, dense=False
        )[0],
        "tree TSW-SL": lambda: tsw.expected_tree_sliced_plan(
            X, Y, method="tsw_sl", n_trees=T, n_lines=k, seed=0, dense=False
        )[0],
    }


def extend(full: np.ndarray, X: np.ndarray, moved: np.ndarray, chunk: int = 8192) -> np.ndarray:
    """Every pixel of ``full`` (H, W, 3) shifted as its nearest sampled colour in ``X``."""
    pixels = torch.from_numpy(full.reshape(-1, 3))
    samples = torch.from_numpy(X)
    shift = torch.from_numpy(moved - X)
    out = torch.empty_like(pixels)
    for i in range(0, pixels.shape[0], chunk):
        nearest = torch.cdist(pixels[i : i + chunk], samples).argmin(-1)
        out[i : i + chunk] = pixels[i : i + chunk] + shift[nearest]
    return out.clamp_(0, 1).numpy().reshape(full.shape)


def run_plans(args: argparse.Namespace) -> int:
    """The ``plans`` mode (see the module docstring)."""
    out = prepare(args)
    from tsw.core._kernels import warm_up

    warm_up()  # the compiled kernels (Numba, when installed) are not timed
    tiny = np.random.default_rng(0).random((2, 16, 3))
    for name, call in plans(tiny[0], tiny[1], 8, args.lines, 1).items():
        if name != "exact (ot.emd)":
            call()  # the first call of each path compiles or loads its kernels
    source_full, target_full = load_images(args.full_step)
    source, target = load_images(args.step)
    X, Y = source.reshape(-1, 3), target.reshape(-1, 3)
    n = X.shape[0]
    w = np.full(n, 1.0 / n)
    C = ot.dist(X, Y)
    results, images = [], {"source": source_full, "target": target_full}
    exact_cost = None
    for name, call in plans(X, Y, args.slices, args.lines, args.swgg_steps).items():
        t0 = time.perf_counter()
        plan = call()
        moved = tsw.barycentric_map(plan, Y)
        seconds = time.perf_counter() - t0
        dense = plan if isinstance(plan, np.ndarray) else plan.toarray()
        cost = float((dense * C).sum())
        exact_cost = cost if exact_cost is None else exact_cost
        fidelity = float(ot.emd2(w, w, ot.dist(moved, Y), numItermax=10**8))
        results.append(
            {
                "plan": name,
                "cost": cost,
                "cost / exact": cost / exact_cost,
                "W2^2(mapped, target)": fidelity,
                "seconds": seconds,
            }
        )
        images[name] = extend(source_full, X, moved)
    header = ["plan", "cost", "cost / exact", "W2^2(mapped, target)", "seconds"]
    rows = [
        [
            r["plan"],
            f"{r['cost']:.4g}",
            f"{r['cost / exact']:.3f}",
            f"{r[header[3]]:.3g}",
            f"{r['seconds']:.3g}",
        ]
        for r in results
    ]
    print_table(
        f"Colour transfer, N = M = {n} pixels, L = {args.slices} lines ({args.lines} per tree)",
        header,
        rows,
    )
    write_results(
        out,
        "colour_transfer_plans",
        header,
        [[r[h] for h in header] for r in results],
        {"args": vars(args), "rows": results},
    )
    figure(images, out / "colour_transfer_plans.png")
    return 0


def figure(images: dict[str, np.ndarray], path) -> None:
    """All images in one row of panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = (len(images) + 1) // 2
    fig, axes = plt.subplots(2, cols, figsize=(2.4 * cols, 3.6))
    for ax in axes.flat:
        ax.axis("off")
    for ax, (name, image) in zip(axes.flat, images.items(), strict=False):
        ax.imshow(image)
        ax.set_title(name, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=75, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=MODES, default="plans")
    ap.add_argument("--quick", action="store_true", help="tiny images (smoke test)")
    ap.add_argument("--step", type=int, default=10, help="pixel stride of the sampled grid")
    ap.add_argument("--full-step", type=int, default=4, help="pixel stride of the figure")
    ap.add_argument("--slices", type=int, default=100, help="lines in all (L)")
    ap.add_argument("--lines", type=int, default=4, help="lines per tree (k)")
    ap.add_argument("--swgg-steps", type=int, default=50)
    add_run_args(ap, "colour_transfer")
    args = ap.parse_args(argv)
    if args.quick:
        args.step, args.full_step, args.slices, args.swgg_steps = 40, 20, 8, 3
    return run_plans(args)


if __name__ == "__main__":
    raise SystemExit(main())
