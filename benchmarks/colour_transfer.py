"""Colour transfer between scikit-learn's two sample images: the papers' flows, and plans.

The images are ``china.jpg`` (source) and ``flower.jpg`` (target) of
:func:`sklearn.datasets.load_sample_images`: nothing is downloaded. Modes (``--mode``;
:data:`MODES` maps a name to a function ``(args, out) -> records``):

* ``flow`` (default), the protocol of the TSW-SL and Db-TSW papers (after the
  SW-variant papers of Nguyen and Ho): both images are summarised by k-means palettes
  (``--palette`` colours, in RGB scaled to [0, 1]; the papers use 3000); the source
  palette, one point per colour, follows a gradient flow of a sliced or tree-sliced loss
  towards the target palette, and every pixel of the source takes the final colour of
  its cluster (:func:`flow_mode`): Adam at ``--lr`` on the loss (the distance itself,
  the root form), fresh lines or trees at every step, the palette clamped to [0, 1]
  after each step, ``--iters`` steps (the papers: 2000). Every loss uses the same
  number of lines (``--slices``: SW's directions, trees x lines per tree for the tree
  losses, the papers' L = 25 trees of k = ``--lines`` = 4 lines by default).
* ``plans``: each transport plan's barycentric map (:func:`run_plans`). Each plan
  between the two pixel clouds in RGB (N = M pixels of a downsampled grid, every
  ``--step``-th pixel, uniform weights) gives the barycentric map
  ``x_i -> sum_j P_ij y_j / a_i`` (:func:`tsw.barycentric_map`), and every pixel of the
  full-resolution source takes the colour shift of its nearest sampled colour. Plans:
  the exact optimal plan (``ot.emd``, the reference), :func:`tsw.expected_sliced_plan`,
  :func:`tsw.min_sliced_transport_plan`, :func:`tsw.swgg` (L directions) and
  :func:`tsw.expected_tree_sliced_plan` (L / k trees of k lines, Db-TSW and TSW-SL).
  For each: the plan's cost (mean squared colour displacement) against the exact one,
  the squared W2 distance between the mapped colours and the target's (``ot.emd2``: how
  well the palette is reached; a barycentric map averages colours, so only a
  permutation reaches 0) and the seconds of the plan and its map. Output:
  ``colour_transfer_plans.csv`` / ``.json`` and ``colour_transfer_plans.png`` (source,
  target and every plan's result).

Methods of the flow (keys as in :mod:`benchmarks.gradient_flow`): ``sw2`` (SW_2),
``maxsw`` (Max-SW_2, ``--max-iter`` ascent steps, 10 by default: the papers' 100 cost
100x a step), ``tswsl`` (TSW-SL, chains), ``dbtsw`` and ``dbtsw-orth`` (Db-TSW, Db-TSW⊥,
``--delta``), ``tssobolev`` (TS-Sobolev at ``--sobolev-p``, Db-TSW's trees), the SW
variants ``lcvsw``, ``ebsw``, ``rpsw``, and ``swgg`` (the cost of :func:`tsw.swgg`'s plan,
``--swgg-iter`` descent steps from the best of the L directions, as in
:mod:`benchmarks.gradient_flow`). The tree losses use ``p = 1`` (the papers'
definition) and roots around the mean of both palettes with spread ``--root-std``.

Metric of the flow: the exact W2 between the current and the target palette
(``ot.emd2``, squared Euclidean cost, uniform weights, float64, the root), at five
checkpoints; the seconds of optimisation (the metric excluded). Records go to
``results.json`` (one per method and seed: ``mode``, ``method``, ``name``, ``seed``,
``seconds``, ``w2`` (final), ``w2_checkpoints``); the recoloured images of the first
seed, side by side with the source and the target, to ``colour_transfer.png``.

Examples::

    python -m benchmarks.colour_transfer --seeds 3          # about 15 minutes, 1 thread
    python -m benchmarks.colour_transfer --smoke --out /tmp/ct   # a few seconds
    python -m benchmarks.colour_transfer --mode plans
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import ot
import torch

import tsw
from benchmarks._report import (
    add_run_args,
    mean_std,
    prepare,
    print_table,
    progress,
    write_results,
)
from benchmarks.gradient_flow import swgg_loss

METHODS = ("sw2", "maxsw", "tswsl", "dbtsw", "dbtsw-orth", "tssobolev")


class Palettes(NamedTuple):
    """The two images and their k-means palettes (colours in [0, 1], float64)."""

    source: np.ndarray  # (H, W, 3) uint8
    target: np.ndarray
    source_palette: np.ndarray  # (k, 3)
    target_palette: np.ndarray
    source_labels: np.ndarray  # (H * W,) the cluster of every source pixel


def load_images(scale: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``china.jpg`` and ``flower.jpg`` (427 x 640), every ``scale``-th pixel."""
    from sklearn.datasets import load_sample_images

    data = load_sample_images()
    names = [Path(f).name for f in data.filenames]
    china, flower = (data.images[names.index(n)] for n in ("china.jpg", "flower.jpg"))
    return china[::scale, ::scale], flower[::scale, ::scale]


def palette(image: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """k-means palette of an image (MiniBatchKMeans, seeded) and the pixels' labels."""
    from sklearn.cluster import MiniBatchKMeans

    pixels = image.reshape(-1, 3).astype(np.float64) / 255
    km = MiniBatchKMeans(n_clusters=k, n_init=1, batch_size=2048, random_state=seed)
    km.fit(pixels)
    return km.cluster_centers_, km.labels_


def make_palettes(args: argparse.Namespace, seed: int) -> Palettes:
    source, target = load_images(args.scale)
    sp, labels = palette(source, args.palette, seed)
    tp, _ = palette(target, args.palette, seed)
    return Palettes(source, target, sp, tp, labels)


def exact_w2(X: np.ndarray, Y: np.ndarray) -> float:
    """Exact W2 (the root) between uniform palettes: ``ot.emd2`` on squared distances."""
    return math.sqrt(max(float(ot.emd2([], [], ot.dist(X, Y))), 0.0))


def method_table(args: argparse.Namespace) -> dict[str, dict]:
    """key -> {"name", "fn", "kw"} at ``args.lines`` lines per step."""
    L, k = args.slices, args.lines
    T = max(L // k, 1)
    ko = min(k, 3)  # Db-TSW⊥: at most d = 3 orthonormal lines per tree
    To = max(L // ko, 1)
    tree = {"p": 1.0, "root_std": args.root_std}
    table: dict[str, tuple[str, Callable, dict]] = {
        "sw2": (f"SW_2 (L={L})", tsw.sw, {"n_projections": L, "p": 2}),
        "maxsw": (
            f"Max-SW_2 ({args.max_iter} ascent steps)",
            tsw.max_sw,
            {"p": 2, "n_iter": args.max_iter},
        ),
        "lcvsw": (f"LCV-SW_2 (L={L})", tsw.lcv_sw, {"n_projections": L, "p": 2}),
        "ebsw": (f"EB-SW_2 (L={L})", tsw.eb_sw, {"n_projections": L, "p": 2}),
        "rpsw": (f"RP-SW_2 (L={L})", tsw.rp_sw, {"n_projections": L, "p": 2}),
        "swgg": (
            f"SWGG (L={L}, {args.swgg_iter} descent steps)",
            swgg_loss,
            {"n_projections": L, "n_iter": args.swgg_iter},
        ),
        "tswsl": (
            f"TSW-SL ({T}x{k})",
            tsw.tsw_sl,
            {"n_trees": T, "n_lines": k, "tree": "chain", **tree},
        ),
        "dbtsw": (
            f"Db-TSW ({T}x{k}, delta={args.delta:g})",
            tsw.db_tsw,
            {"n_trees": T, "n_lines": k, "delta": args.delta, **tree},
        ),
        "dbtsw-orth": (
            f"Db-TSW⊥ ({To}x{ko}, delta={args.delta:g})",
            tsw.db_tsw,
            {"n_trees": To, "n_lines": ko, "delta": args.delta, "orthogonal": True, **tree},
        ),
        "tssobolev": (
            f"TS-Sobolev ({T}x{k}, delta={args.delta:g}, p={args.sobolev_p:g})",
            tsw.ts_sobolev,
            {
                "n_trees": T,
                "n_lines": k,
                "delta": args.delta,
                "p": args.sobolev_p,
                "root_std": args.root_std,
            },
        ),
    }
    return {key: {"name": v[0], "fn": v[1], "kw": v[2]} for key, v in table.items()}


def flow(method: dict, data: Palettes, args: argparse.Namespace, seed: int) -> dict:
    """One flow of the source palette; the final palette, W2 at checkpoints, seconds."""
    X = torch.tensor(data.source_palette, dtype=torch.float32, requires_grad=True)
    Y = torch.tensor(data.target_palette, dtype=torch.float32)
    opt = torch.optim.Adam([X], lr=args.lr)
    gen = torch.Generator().manual_seed(1_000 + seed)
    fn, kw = method["fn"], method["kw"]
    step = max(args.iters // 5, 1)
    checkpoints = sorted({min(step * i, args.iters) for i in range(1, 6)})
    w2 = {0: exact_w2(data.source_palette, data.target_palette)}
    elapsed = 0.0
    for it in range(1, args.iters + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        fn(X, Y, generator=gen, validate=False, **kw).backward()
        opt.step()
        with torch.no_grad():
            X.clamp_(0.0, 1.0)
        elapsed += time.perf_counter() - t0
        if it in checkpoints:
            w2[it] = exact_w2(X.detach().double().numpy(), data.target_palette)
    final = X.detach().double().numpy()
    return {"palette": final, "w2": w2, "seconds": elapsed}


def recolour(data: Palettes, colours: np.ndarray) -> np.ndarray:
    """The source image with every pixel in its cluster's colour (uint8)."""
    image = colours[data.source_labels].reshape(data.source.shape)
    return (np.clip(image, 0.0, 1.0) * 255).round().astype(np.uint8)


def flow_mode(args: argparse.Namespace, out: Path) -> list[dict]:
    """The papers' flow of the source palette under every loss of ``--methods``."""
    table = method_table(args)
    records: list[dict] = []
    images: dict[str, np.ndarray] = {}
    titles: dict[str, str] = {}
    jobs = [(seed, key) for seed in range(args.seeds) for key in args.methods]
    palettes: dict[int, Palettes] = {}  # one pair of palettes per seed (k-means' seed)
    for seed, key in progress(jobs, "colour transfer"):
        if seed not in palettes:
            palettes = {seed: make_palettes(args, seed)}
        data = palettes[seed]
        run = flow(table[key], data, args, seed)
        last = max(run["w2"])
        records.append(
            {
                "mode": "flow",
                "method": key,
                "name": table[key]["name"],
                "seed": seed,
                "seconds": run["seconds"],
                "iterations": args.iters,
                "w2": run["w2"][last],
                "w2_start": run["w2"][0],
                "w2_checkpoints": {str(k): v for k, v in run["w2"].items()},
                "palette": args.palette,
            }
        )
        if seed == 0:
            images[key] = recolour(data, run["palette"])
            titles[key] = f"{table[key]['name']}\nW2 {run['w2'][last]:.4f}, {run['seconds']:.0f} s"
            if len(images) == 1:
                images["target"] = data.target
                images["source"] = data.source
    if images:
        plot_images(images, titles, out / "colour_transfer.png", args)
    return records


# --------------------------------------------------------------------------- plans


def plan_images(step: int) -> tuple[np.ndarray, np.ndarray]:
    """The two images in [0, 1] (float64), every ``step``-th pixel, source first."""
    source, target = load_images(step)
    return source.astype(np.float64) / 255.0, target.astype(np.float64) / 255.0


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


def run_plans(args: argparse.Namespace, out: Path) -> list[dict]:
    """The ``plans`` mode (see the module docstring); its records, one per plan."""
    from tsw.core._kernels import warm_up

    warm_up()  # the compiled kernels (Numba, when installed) are not timed
    tiny = np.random.default_rng(0).random((2, 16, 3))
    for name, call in plans(tiny[0], tiny[1], 8, args.lines, 1).items():
        if name != "exact (ot.emd)":
            call()  # the first call of each path compiles or loads its kernels
    source_full, target_full = plan_images(args.full_step)
    source, target = plan_images(args.step)
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
                "mode": "plans",
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
    return results


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


#: the modes of this benchmark: name -> function (args, output folder) -> records
MODES: dict[str, Callable[[argparse.Namespace, Path], list[dict]]] = {
    "flow": flow_mode,
    "plans": run_plans,
}


def plot_images(
    images: dict[str, np.ndarray], titles: dict[str, str], path: Path, args: argparse.Namespace
) -> None:
    """Source, target and every recoloured image side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = ["source", "target", *[k for k in images if k not in ("source", "target")]]
    cols = 4
    rows = math.ceil(len(order) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 3.0 * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, key in zip(axes.flat, order, strict=False):
        ax.imshow(images[key])
        ax.set_title(titles.get(key, key), fontsize=7)
    fig.suptitle(
        f"colour transfer: {args.palette}-colour palettes, {args.iters} steps of Adam "
        f"(lr {args.lr:g}), {args.slices} lines per step; W2 between palettes",
        fontsize=8,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary(records: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Printed rows: mean ± std over the seeds of W2 at each checkpoint and of seconds."""
    keys = list(dict.fromkeys((r["mode"], r["method"]) for r in records))
    its = sorted({int(i) for r in records for i in r["w2_checkpoints"]})
    header = ["mode", "method", "seeds", *[f"W2 it {i}" for i in its], "seconds"]
    rows = []
    for mode, method in keys:
        rs = [r for r in records if r["mode"] == mode and r["method"] == method]
        cells = [
            mean_std(
                [r["w2_checkpoints"][str(i)] for r in rs if str(i) in r["w2_checkpoints"]],
                ".4f",
                ".4f",
            )
            for i in its
        ]
        secs = mean_std([r["seconds"] for r in rs], ".1f", ".1f")
        rows.append([mode, rs[0]["name"], str(len(rs)), *cells, secs])
    return header, rows


def _keys(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mode", default="flow", choices=sorted(MODES))
    ap.add_argument("--methods", type=_keys, default=list(METHODS), help="comma-separated keys")
    ap.add_argument("--palette", type=int, default=1000, help="k-means colours per image")
    ap.add_argument("--scale", type=int, default=1, help="use every scale-th pixel")
    ap.add_argument("--iters", type=int, default=2000, help="flow steps (the papers: 2000)")
    ap.add_argument("--lr", type=float, default=1e-3, help="Adam lr, colours in [0, 1]")
    ap.add_argument("--slices", type=int, default=100, help="lines in all (L; 25 trees x 4)")
    ap.add_argument("--lines", type=int, default=4, help="lines per tree (k)")
    ap.add_argument("--step", type=int, default=10, help="plans: pixel stride of the grid")
    ap.add_argument("--full-step", type=int, default=4, help="plans: pixel stride of the figure")
    ap.add_argument("--swgg-steps", type=int, default=50, help="plans: SWGG's steps")
    ap.add_argument("--swgg-iter", type=int, default=10, help="flow: SWGG's steps per step")
    ap.add_argument("--delta", type=float, default=2.0, help="Db-TSW / TS-Sobolev split")
    ap.add_argument("--root-std", type=float, default=0.1, help="root spread of the trees")
    ap.add_argument("--sobolev-p", type=float, default=2.0, help="p of TS-Sobolev")
    ap.add_argument("--max-iter", type=int, default=10, help="Max-SW ascent steps")
    ap.add_argument(
        "--smoke", "--quick", dest="smoke", action="store_true", help="a few seconds: tiny data"
    )
    add_run_args(ap, "colour_transfer")
    args = ap.parse_args(argv)
    if args.smoke and args.mode == "flow":
        args.palette, args.scale, args.iters, args.seeds, args.max_iter = 24, 8, 10, 1, 2
    elif args.smoke:
        args.step, args.full_step, args.slices, args.swgg_steps = 40, 20, 8, 3
    table = method_table(args)
    unknown = [k for k in args.methods if k not in table]
    if unknown:
        ap.error(f"unknown methods {unknown}; choose from {sorted(table)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = prepare(args)
    settings = dict(vars(args))
    print(f"settings: {settings}")
    records = MODES[args.mode](args, out)
    if args.mode == "plans":  # its own table and files
        return 0
    path = out / "results.json"
    old = json.loads(path.read_text()) if path.exists() else []
    old = [r for r in old if r.get("mode") != args.mode]  # this mode's records are replaced
    path.write_text(json.dumps(old + records, indent=1))
    header, rows = summary(records)
    print_table(
        f"colour transfer ({args.mode}), exact W2 between palettes, mean ± std over "
        f"{args.seeds} seed(s); CPU, {torch.get_num_threads()} thread(s)",
        header,
        rows,
    )
    print(f"\nresults written to {out.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
