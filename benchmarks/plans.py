"""Transport plans: their cost against exact OT, their time against POT's, their memory.

For every size N (= M) and dimension d of the grid, on the ``gauss64`` problem of
``benchmarks.variance`` (X ~ N(0, I), Y = 0.3 + Z A, different means and covariances),
with L lines in all (``--slices``, 100 by default):

* **cost**: each plan's cost in R^d (squared Euclidean), divided by the exact optimal
  cost ``ot.emd2`` where it runs (``N <= --exact-max``): 1 is optimal. The plans:
  ``expected sliced`` (:func:`tsw.expected_sliced_plan`, L directions), ``min sliced``
  (:func:`tsw.min_sliced_transport_plan`, the same L directions), ``swgg``
  (:func:`tsw.swgg`, the same L starting directions, ``--swgg-steps`` steps), ``tree
  Db-TSW`` and ``tree TSW-SL`` (:func:`tsw.expected_tree_sliced_plan`, L / k trees of k
  lines: the same number of lines, so the same number of one-dimensional sorts);
* **time**: each call (sparse output, numpy in and out, one thread), timed side by side
  with POT's ``ot.sliced.expected_sliced_plan`` and ``min_sliced_transport_plan`` on the
  same projections (interleaved rounds; the median of the per-round ratios);
* **memory**: the peak resident growth of one call in a fresh process (``--memory``);
* **tree plan**: the time of :func:`tsw.tree_plan` on random trees of V = N nodes, and
  its growth (the log-log slope between sizes).

POT's expected plan forms the (N, M) cost matrix, so it is not run where N M > 1e8.

``--quick`` runs a tiny grid in seconds (the smoke test). Output: tables, ``plans.csv`` /
``plans.json`` and the figures ``plans_cost.png`` and ``plans_time.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import warnings
from collections.abc import Callable

import numpy as np
import ot
import torch

import tsw
from benchmarks._memory import peak_growth
from benchmarks._report import add_run_args, prepare, print_table, write_results
from benchmarks._timing import interleaved
from benchmarks.variance import gauss64

#: the plans compared, in the tables' order
PLANS = ("expected sliced", "min sliced", "swgg", "tree Db-TSW", "tree TSW-SL")
#: POT's counterpart of a plan (timed side by side)
POT = {"expected sliced": "ot expected", "min sliced": "ot min"}
#: POT's expected plan forms the (N, M) cost matrix: not above this many entries
POT_DENSE_MAX = 10**8


def problem(n: int, d: int, L: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The points (float64 numpy) and L unit projections (d, L), all from seed 0."""
    X, Y = gauss64(d, n, torch.float64)
    P = tsw.sample_projections(d, L, seed=0, dtype=torch.float64)
    return X.numpy(), Y.numpy(), P.numpy()


def calls(
    X: np.ndarray, Y: np.ndarray, P: np.ndarray, k: int, swgg_steps: int
) -> dict[str, Callable[[], tuple[object, object]]]:
    """Name -> a call returning ``(plan, cost)``, sparse plans (POT's where it runs)."""
    T = max(1, P.shape[1] // k)
    out: dict[str, Callable[[], tuple[object, object]]] = {
        "expected sliced": lambda: tsw.expected_sliced_plan(X, Y, projections=P, dense=False),
        "min sliced": lambda: tsw.min_sliced_transport_plan(X, Y, projections=P, dense=False),
        "swgg": lambda: tsw.swgg(X, Y, projections=P, n_iter=swgg_steps, seed=0, dense=False),
        "tree Db-TSW": lambda: tsw.expected_tree_sliced_plan(
            X, Y, n_trees=T, n_lines=k, seed=0, dense=False
        ),
        "tree TSW-SL": lambda: tsw.expected_tree_sliced_plan(
            X, Y, method="tsw_sl", n_trees=T, n_lines=k, seed=0, dense=False
        ),
        "ot min": lambda: ot.sliced.min_sliced_transport_plan(X, Y, projections=P, dense=False),
    }
    if X.shape[0] * Y.shape[0] <= POT_DENSE_MAX:
        out["ot expected"] = lambda: ot.sliced.expected_sliced_plan(
            X, Y, projections=P, dense=False
        )
    return out


def _work(n: int, d: int, L: int, k: int, swgg_steps: int, name: str) -> Callable[[], object]:
    """What :func:`benchmarks._memory.peak_growth` measures in a fresh process."""
    torch.set_num_threads(1)
    X, Y, P = problem(n, d, L)
    return calls(X, Y, P, k, swgg_steps)[name]


def random_tree(V: int, rng: np.random.Generator, shape: str = "random") -> np.ndarray:
    """The parents of a tree of V nodes: random recursive, a path or a star."""
    if shape == "path":
        return np.arange(-1, V - 1)
    if shape == "star":
        return np.concatenate([[-1], np.zeros(V - 1, dtype=np.int64)])
    # each node's parent uniform among the earlier ones (depth about log V)
    return np.concatenate([[-1], (rng.random(V - 1) * np.arange(1, V)).astype(np.int64)])


#: the tree shapes :func:`tree_plan_times` measures
SHAPES = ("random", "path", "star")
#: the calls timed side by side on every tree: the two tree solvers and two sorts of V floats
TREE_CALLS = ("tree_plan", "tree_wasserstein", "torch.sort", "np.sort")


def _tree_calls(
    parents: np.ndarray, lengths: np.ndarray, ms: np.ndarray, mt: np.ndarray, values: np.ndarray
) -> dict[str, Callable[[], object]]:
    """The calls of :data:`TREE_CALLS` on one tree (``values``: the floats sorted)."""
    values_t = torch.from_numpy(values)
    return {
        "tree_plan": lambda: tsw.tree_plan(parents, lengths, ms, mt),
        "tree_wasserstein": lambda: tsw.tree_wasserstein(parents, lengths, ms, mt),
        "torch.sort": lambda: torch.sort(values_t),
        "np.sort": lambda: np.sort(values),
    }


def tree_plan_times(sizes: list[int], rounds: int, fallback_max: int = 10**5) -> list[dict]:
    """Median seconds of the tree solvers on trees of V nodes, against sorts of V floats.

    :func:`tsw.tree_plan` (sparse plan and cost) and :func:`tsw.tree_wasserstein` (p = 1)
    with float64 NumPy inputs, ``torch.sort`` and ``np.sort`` of V float64 values, timed
    in interleaved rounds in one process; ``/ sort`` is the median of the per-round ratios
    to ``torch.sort``. ``path`` says whether the tree kernels are compiled (Numba) or the
    NumPy/Python fallback (up to ``fallback_max`` nodes). Half the nodes (at random) carry
    source mass, half target mass, independently. ``slope`` is the log-log slope of the
    plan's time from the previous size (1: linear).
    """
    from unittest import mock

    from tsw.core import _kernels

    compiled = _kernels.warm_up()
    rng = np.random.default_rng(0)
    rows = []
    for shape in SHAPES:
        previous: dict[str, dict] = {}
        for V in sizes:
            parents = random_tree(V, rng, shape)
            lengths = rng.random(V)
            ms = rng.random(V) * (rng.random(V) < 0.5)
            mt = rng.random(V) * (rng.random(V) < 0.5)
            ms, mt = ms / ms.sum(), mt / mt.sum()
            values = rng.random(V)
            fns = _tree_calls(parents, lengths, ms, mt, values)
            paths = (["compiled"] if compiled else []) + (["fallback"] if fallback_max >= V else [])
            for path in paths:
                with mock.patch.object(
                    _kernels, "trees_usable", _kernels.trees_usable if path == "compiled" else bool
                ):
                    times = interleaved(fns, rounds=rounds)
                    plan, _ = fns["tree_plan"]()
                row: dict = {"shape": shape, "V": V, "path": path, "entries": plan.nnz}
                row.update({f"{k} s": statistics.median(v) for k, v in times.items()})
                for name in ("tree_plan", "tree_wasserstein"):
                    ratios = [a / b for a, b in zip(times[name], times["torch.sort"], strict=True)]
                    row[f"{name} / sort"] = statistics.median(ratios)
                    row[f"{name} / np.sort"] = statistics.median(
                        [a / b for a, b in zip(times[name], times["np.sort"], strict=True)]
                    )
                before = previous.get(path)
                if before is not None:
                    row["slope"] = math.log(row["tree_plan s"] / before["tree_plan s"]) / math.log(
                        V / before["V"]
                    )
                rows.append(row)
                previous[path] = row
    return rows


def run_cell(n: int, d: int, args: argparse.Namespace) -> list[dict]:
    """Every plan of one (N, d) cell: cost, exact cost, times and memory."""
    X, Y, P = problem(n, d, args.slices)
    fns = calls(X, Y, P, args.lines, args.swgg_steps)
    exact = None
    if n <= args.exact_max:
        w = np.full(n, 1.0 / n)
        t0 = time.perf_counter()
        exact = float(ot.emd2(w, w, ot.dist(X, Y), numItermax=10**8))
        exact_seconds = time.perf_counter() - t0
    costs = {name: float(fn()[1]) for name, fn in fns.items()}
    times = interleaved(fns, rounds=args.rounds, warmup=0)
    rows = []
    for name in PLANS:
        row: dict = {"N": n, "d": d, "plan": name, "cost": costs[name]}
        row["seconds"] = statistics.median(times[name])
        row["cost / exact"] = costs[name] / exact if exact else None
        pot = POT.get(name)
        if pot in times:
            row["pot cost"] = costs[pot]
            row["pot seconds"] = statistics.median(times[pot])
            ratios = [a / b for a, b in zip(times[name], times[pot], strict=True)]
            row["time / pot"] = statistics.median(ratios)
        if args.memory and n >= args.memory_min:
            row["peak MiB"] = peak_growth(
                _work, n, d, args.slices, args.lines, args.swgg_steps, name
            )
            if pot in times:
                row["pot peak MiB"] = peak_growth(
                    _work, n, d, args.slices, args.lines, args.swgg_steps, pot
                )
        rows.append(row)
    if exact is not None:
        rows.append(
            {
                "N": n,
                "d": d,
                "plan": "exact (ot.emd2)",
                "cost": exact,
                "seconds": exact_seconds,
                "cost / exact": 1.0,
            }
        )
    return rows


def target(rounds: int) -> list[dict]:
    """The speed target: the sparse expected plan, N = M = 2000, d = 64, L = 200.

    tsw against POT on the same projections, numpy inputs (POT's numpy backend) and
    torch inputs (its torch backend), interleaved rounds; the median of the per-round
    ratios.
    """
    X, Y, P = problem(2000, 64, 200)
    Xt, Yt, Pt = (torch.from_numpy(v) for v in (X, Y, P))
    pairs = {
        "numpy": (
            lambda: tsw.expected_sliced_plan(X, Y, projections=P, dense=False),
            lambda: ot.sliced.expected_sliced_plan(X, Y, projections=P, dense=False),
        ),
        "torch": (
            lambda: tsw.expected_sliced_plan(Xt, Yt, projections=Pt, dense=False),
            lambda: ot.sliced.expected_sliced_plan(Xt, Yt, projections=Pt, dense=False),
        ),
    }
    rows = []
    for kind, (mine, theirs) in pairs.items():
        times = interleaved({"tsw": mine, "pot": theirs}, rounds=rounds)
        ratios = [a / b for a, b in zip(times["tsw"], times["pot"], strict=True)]
        rows.append(
            {
                "inputs": kind,
                "tsw seconds": statistics.median(times["tsw"]),
                "pot seconds": statistics.median(times["pot"]),
                "ratio": statistics.median(ratios),
                "ratios": ratios,
            }
        )
    return rows


def _fmt(x: object, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def plot(rows: list[dict], dims: list[int], out, key: str, ylabel: str, name: str) -> None:
    """One panel per dimension: ``key`` against N, one line per plan (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(dims), figsize=(5 * len(dims), 3.6), squeeze=False)
    for ax, d in zip(axes[0], dims, strict=True):
        series = list(PLANS) + (["ot expected", "ot min"] if key == "seconds" else [])
        for plan in series:
            pts = []
            for r in rows:
                if r["d"] != d:
                    continue
                if r["plan"] == plan and r.get(key) is not None:
                    pts.append((r["N"], r[key]))
                elif key == "seconds" and POT.get(r["plan"]) == plan and "pot seconds" in r:
                    pts.append((r["N"], r["pot seconds"]))
            if pts:
                x, y = zip(*sorted(pts), strict=True)
                ax.plot(x, y, "o--" if plan.startswith("ot") else "o-", label=plan)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("N = M")
        ax.set_ylabel(ylabel)
        ax.set_title(f"d = {d}", fontsize=9)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    fig.savefig(out / name, dpi=120, bbox_inches="tight")
    plt.close(fig)


def tree_plans_table(args: argparse.Namespace) -> list[dict]:
    """Time the tree solvers against sorts of as many floats and print the table."""
    trees = tree_plan_times(args.tree_sizes, max(1, args.rounds), args.tree_fallback_max)
    print_table(
        "tsw.tree_plan on random trees, paths and stars (and tsw.tree_wasserstein), "
        "against torch.sort of V floats; median ms, median of per-round ratios",
        [
            "shape",
            "V",
            "path",
            "plan",
            "tw",
            "torch.sort",
            "np.sort",
            "plan / sort",
            "tw / sort",
            "entries",
            "slope",
        ],
        [
            [
                r["shape"],
                str(r["V"]),
                r["path"],
                *(f"{1e3 * r[f'{k} s']:.3g}" for k in TREE_CALLS),
                f"{r['tree_plan / sort']:.2f}",
                f"{r['tree_wasserstein / sort']:.2f}",
                str(r["entries"]),
                _fmt(r.get("slope"), ".2f"),
            ]
            for r in trees
        ],
    )
    return trees


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a tiny grid (smoke test)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000, 100000])
    ap.add_argument("--dims", type=int, nargs="+", default=[2, 64])
    ap.add_argument("--slices", type=int, default=100, help="lines in all (L)")
    ap.add_argument("--lines", type=int, default=4, help="lines per tree (k)")
    ap.add_argument("--swgg-steps", type=int, default=50)
    ap.add_argument("--exact-max", type=int, default=3000, help="largest N for ot.emd2")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    ap.add_argument("--memory", action="store_true", help="peak memory in fresh processes")
    ap.add_argument("--memory-min", type=int, default=10000, help="smallest N measured")
    ap.add_argument("--resume", action="store_true", help="keep the cells of plans.json")
    ap.add_argument("--tree-sizes", type=int, nargs="+", default=[1000, 10000, 100000, 1000000])
    ap.add_argument(
        "--tree-fallback-max",
        type=int,
        default=100000,
        help="largest tree timed on the NumPy/Python fallback as well as compiled",
    )
    ap.add_argument(
        "--target",
        action="store_true",
        help="only the speed target (sparse expected plan, N = 2000, d = 64, L = 200)",
    )
    ap.add_argument(
        "--tree-only", action="store_true", help="only the tree solvers' timings (and sorts)"
    )
    add_run_args(ap, "plans")
    args = ap.parse_args(argv)
    if args.tree_only:
        out = prepare(args)
        (out / "plans_tree.json").write_text(json.dumps(tree_plans_table(args), indent=2))
        return 0
    if args.target:
        out = prepare(args)
        warnings.filterwarnings("ignore", category=UserWarning)
        rows = target(max(args.rounds, 5))
        print_table(
            "expected_sliced_plan, sparse, N = M = 2000, d = 64, L = 200: tsw against POT",
            ["inputs", "tsw s", "POT s", "tsw / POT (median of rounds)"],
            [
                [
                    r["inputs"],
                    f"{r['tsw seconds']:.3g}",
                    f"{r['pot seconds']:.3g}",
                    f"{r['ratio']:.3f}",
                ]
                for r in rows
            ],
        )
        (out / "plans_target.json").write_text(json.dumps(rows, indent=2))
        return 0
    if args.quick:
        args.sizes, args.dims, args.slices, args.swgg_steps = [60, 200], [2, 8], 8, 5
        args.rounds, args.tree_sizes = 1, [100, 1000]
    out = prepare(args)
    warnings.filterwarnings("ignore", category=UserWarning, module="ot")
    header = ["N", "d", "plan", "cost", "cost / exact", "seconds", "time / pot", "peak MiB"]
    rows = []
    if args.resume and (out / "plans.json").exists():
        rows = json.loads((out / "plans.json").read_text())["rows"]
    for d in args.dims:
        for n in args.sizes:
            if any(r["N"] == n and r["d"] == d for r in rows):
                continue
            rows.extend(run_cell(n, d, args))
            # written after every cell, so that a long grid can be resumed
            payload = {"args": vars(args), "rows": rows}
            write_results(out, "plans", header, [[r.get(h) for h in header] for r in rows], payload)
            print(f"done N={n} d={d}", flush=True)
    table = [
        [
            str(r["N"]),
            str(r["d"]),
            r["plan"],
            _fmt(r["cost"], ".4g"),
            _fmt(r.get("cost / exact"), ".4f"),
            _fmt(r["seconds"], ".3g"),
            _fmt(r.get("time / pot"), ".3f"),
            _fmt(r.get("peak MiB"), ".0f"),
        ]
        for r in rows
    ]
    print_table(
        f"Plans at L = {args.slices} lines ({args.lines} per tree), one thread", header, table
    )
    trees = tree_plans_table(args)
    csv_rows = [[r.get(h) for h in header] for r in rows]
    write_results(
        out, "plans", header, csv_rows, {"args": vars(args), "rows": rows, "tree_plan": trees}
    )
    plot(rows, args.dims, out, "cost / exact", "cost / exact OT cost", "plans_cost.png")
    plot(rows, args.dims, out, "seconds", "seconds per call", "plans_time.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
