"""Runtime and memory of the tsw distances against POT's SW and the sort-bound limit.

Every method computes forward + backward (gradient with respect to the source points)
on the same tensors, with explicit trees / projections of equal total line count
``L = n_trees * n_lines``. All methods are timed in one process, interleaved round by
round, and compared by the median of per-round ratios.

The *lower limit* is the work no sliced method can avoid: one (n, d) x (d, L)
projection matmul, one sort of the (L, n) coordinates, one gather of the signed masses
and one cumulative sum, forward and backward. Its sort is the fastest this process has,
the one tsw's closed forms use (``tsw.core._sort.sort_last``: NumPy's on the CPU, 0.5x
torch.sort's time at this size); ``lower limit (torch.sort)`` is the same work with
``torch.sort`` (the sort POT's torch backend uses).

``projections`` times the product alone: the (N + M, d) points on the ``L`` directions
forward, and the (N, L) x (L, d) product of the source points' gradient backward. Every
sliced method forms it, POT's SW and the lower limit included, so ``projections / POT``
is the least share of POT's time that any of them can take; where it exceeds a target
ratio to POT, no exact float32 method meets that target on this machine.

Examples
--------
``python -m benchmarks.runtime``: the reference setting (Db-TSW 250 x 4, N = M = 2000,
d = 64, float32, one thread), with CircularTSW (r = 0 and r = 0.01) and SpatialTSW
("pow") on the same trees and the side-by-side ratios circular r=0 / SW at equal total
lines and circular / Db-TSW at equal trees and lines.
``python -m benchmarks.runtime --sweep n``: times as a function of N with a log-log plot
(``--grid 50000,100000`` chooses the values).
``python -m benchmarks.runtime --sweep sort``: the float32 sort of the closed forms on
rows of 128 to 16384 atoms of seven kinds (Gaussian to clustered), as packed 64-bit
keys against ``np.argsort``.
``--memory``: peak resident memory of each method, each in a fresh subprocess.
``python -m benchmarks.runtime --sweep chunk --n 100000 --d 128 --trees 1000 --grid
auto,250,100 --memory``: db_tsw's time and peak memory against ``chunk_size``
(``none`` = all trees at once; ``auto`` = blocks under 2 GiB).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import torch

import tsw
from benchmarks._memory import peak_growth
from benchmarks._timing import interleaved, malloc_setting, median, ratio
from tsw.core._sort import sort_last

try:  # POT is a dependency of tsw's tests and benchmarks
    import ot
except ImportError:  # pragma: no cover
    ot = None


def make_problem(n: int, d: int, n_trees: int, n_lines: int, dtype, device, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float64).to(dtype=dtype, device=device)
    Y = (torch.randn(n, d, generator=g, dtype=torch.float64) + 0.5).to(dtype=dtype, device=device)
    center = 0.5 * (X.mean(0) + Y.mean(0))
    trees = tsw.sample_concurrent_lines(
        d, n_trees=n_trees, n_lines=n_lines, center=center, seed=seed
    )
    chains = tsw.sample_chain_lines(d, n_trees=n_trees, n_lines=n_lines, center=center, seed=seed)
    proj = tsw.sample_projections(d, n_trees * n_lines, seed=seed, dtype=dtype, device=device)
    return X, Y, trees, chains, proj


def methods(X, Y, trees, chains, proj) -> dict[str, Callable[[], object]]:
    """Forward + backward closures, all with explicit randomness."""
    n, m = X.shape[0], Y.shape[0]
    w = torch.cat([torch.full((n,), 1.0 / n), torch.full((m,), -1.0 / m)]).to(X)

    def run(f):
        def step():
            Xs = X.detach().requires_grad_(True)
            f(Xs).backward()
            if X.is_cuda:  # kernels run asynchronously: time their completion
                torch.cuda.synchronize(X.device)

        return step

    def lower(Xs, sort=sort_last):
        c = torch.matmul(proj.T, torch.cat([Xs, Y]).T)  # (L, n + m)
        cs, idx = sort(c)
        prefix = torch.gather(w.expand_as(c), -1, idx).cumsum(-1)
        return (cs * prefix).sum()

    proj_grad = torch.ones(n, proj.shape[1], dtype=X.dtype, device=X.device)  # dense

    def projections():
        Xs = X.detach().requires_grad_(True)
        torch.matmul(Xs, proj).backward(proj_grad)
        torch.matmul(Y, proj)
        if X.is_cuda:
            torch.cuda.synchronize(X.device)

    out = {
        "lower limit": run(lower),
        "projections": projections,
        "lower limit (torch.sort)": run(partial(lower, sort=partial(torch.sort, dim=-1))),
        "db_tsw": run(lambda Xs: tsw.db_tsw(Xs, Y, trees=trees, validate=False)),
        "tsw_sl chain": run(lambda Xs: tsw.tsw_sl(Xs, Y, trees=chains, validate=False)),
        "tsw_sl concurrent": run(lambda Xs: tsw.tsw_sl(Xs, Y, trees=trees, validate=False)),
        "circular r=0": run(
            lambda Xs: tsw.circular_tsw(Xs, Y, radius=0.0, trees=trees, validate=False)
        ),
        "circular r=0.01": run(
            lambda Xs: tsw.circular_tsw(Xs, Y, radius=0.01, trees=trees, validate=False)
        ),
        "spatial pow": run(lambda Xs: tsw.spatial_tsw(Xs, Y, trees=trees, validate=False)),
        "partial_tsw": run(
            lambda Xs: tsw.partial_tsw(Xs, Y, mass_t=1.04, trees=trees, validate=False)
        ),
        "tsw.sw p=2": run(lambda Xs: tsw.sw(Xs, Y, projections=proj, validate=False)),
        "tsw.sw p=1": run(lambda Xs: tsw.sw(Xs, Y, projections=proj, p=1, validate=False)),
    }
    if ot is not None:
        out["POT sw p=2"] = run(lambda Xs: ot.sliced_wasserstein_distance(Xs, Y, projections=proj))
    return out


def _prepare(args, name):  # runs in a fresh process
    torch.set_num_threads(args.threads)
    X, Y, trees, chains, proj = make_problem(
        args.n, args.d, args.trees, args.lines, getattr(torch, args.dtype), args.device
    )
    return methods(X, Y, trees, chains, proj)[name]


def peak_memory(args) -> dict[str, float]:
    """Peak RSS growth (MiB) of one forward+backward, each method in a fresh process."""
    names = list(methods(*make_problem(8, 2, 1, 1, torch.float32, "cpu")).keys())
    return {name: peak_growth(_prepare, args, name) for name in names}


def time_one(args, n: int, d: int, lines: int) -> dict[str, float | str]:
    dtype = getattr(torch, args.dtype)
    X, Y, trees, chains, proj = make_problem(n, d, lines, args.lines, dtype, args.device)
    fns = methods(X, Y, trees, chains, proj)
    if args.methods:
        fns = {name: fns[name] for name in _selected(args.methods, fns)}
    faults: dict[str, list[int]] = {}
    times = interleaved(fns, rounds=args.rounds, faults=faults)
    row: dict[str, float | str] = {"N=M": n, "d": d, "trees": lines, "lines/tree": args.lines}
    row["malloc"] = malloc_setting()
    for name, ts in times.items():
        row[f"{name} [s]"] = median(ts)
    for name, fs in faults.items():
        row[f"{name} page faults"] = median(fs)
    # side-by-side ratios of the nonlinear projections (same trees / equal total lines)
    for num, den in (
        ("db_tsw", "lower limit (torch.sort)"),
        ("circular r=0", "tsw.sw p=1"),
        ("circular r=0", "tsw.sw p=2"),
        ("circular r=0", "db_tsw"),
        ("circular r=0.01", "db_tsw"),
        ("spatial pow", "db_tsw"),
    ):
        if num in times and den in times:
            row[f"{num} / {den}"] = ratio(times, num, den)
    for name in times:
        if name != "lower limit":
            row[f"{name} / lower"] = ratio(times, name, "lower limit")
            if "POT sw p=2" in times and name != "POT sw p=2":
                row[f"{name} / POT"] = ratio(times, name, "POT sw p=2")
    return row


#: the methods of ``--sweep grid`` unless ``--methods`` names others
GRID_METHODS = "lower limit,lower limit (torch.sort),projections,db_tsw,POT sw p=2"


def _selected(text: str, fns: dict) -> list[str]:
    """The comma-separated method names of ``--methods``, checked against ``fns``."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in names if t not in fns]
    if unknown:
        raise SystemExit(f"--methods: unknown {unknown}; choose from {list(fns)}")
    return names if "lower limit" in names else ["lower limit", *names]


def _chunk_value(text: str) -> int | str | None:
    return None if text == "none" else text if text == "auto" else int(text)


def _prepare_chunk(args, chunk):  # runs in a fresh process (peak_growth)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    X, Y, trees, _, _ = make_problem(args.n, args.d, args.trees, args.lines, dtype, args.device)

    def step():
        Xs = X.detach().requires_grad_(True)
        tsw.db_tsw(Xs, Y, trees=trees, validate=False, chunk_size=chunk).backward()

    return step


def chunk_sweep(args, grid: list[str]) -> list[dict]:
    """db_tsw time (median, interleaved) and peak memory (fresh process) per chunk size.

    The children run with ``MALLOC_MMAP_THRESHOLD_=65536``: with glibc's default dynamic
    threshold, the freed blocks of one chunk stay in the heap and the resident size
    counts them (measured at N = 1e4: 1.9 GiB instead of 0.2 GiB at chunk_size=25).
    """
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")
    dtype = getattr(torch, args.dtype)
    X, Y, trees, _, proj = make_problem(args.n, args.d, args.trees, args.lines, dtype, args.device)

    def run(chunk):
        def step():
            Xs = X.detach().requires_grad_(True)
            tsw.db_tsw(Xs, Y, trees=trees, validate=False, chunk_size=chunk).backward()

        return step

    def lower():
        Xs = X.detach().requires_grad_(True)
        c = torch.matmul(proj.T, torch.cat([Xs, Y]).T)
        cs, idx = sort_last(c)
        n, m = X.shape[0], Y.shape[0]
        w = torch.cat([torch.full((n,), 1.0 / n), torch.full((m,), -1.0 / m)]).to(X)
        (cs * torch.gather(w.expand_as(c), -1, idx).cumsum(-1)).sum().backward()

    work = {f"chunk={g}": run(_chunk_value(g)) for g in grid}
    work["lower limit"] = lower
    times = interleaved(work, rounds=args.rounds)
    rows = []
    for g in grid:
        chunk = _chunk_value(g)
        key = f"chunk={g}"
        rows.append(
            {
                "N=M": args.n,
                "d": args.d,
                "trees": args.trees,
                "chunk_size": g,
                "db_tsw [s]": median(times[key]),
                "db_tsw / lower": ratio(times, key, "lower limit"),
                "peak RSS growth [MiB]": peak_growth(_prepare_chunk, args, chunk)
                if args.memory
                else float("nan"),
            }
        )
        print(f"done chunk={g}", file=sys.stderr, flush=True)
    return rows


def grid_sweep(args) -> list[dict]:
    """Every cell of ``--grid-n`` x ``--grid-d``, each timed side by side in one process.

    Big cells may run fewer rounds: with ``--max-rounds-s S`` a cell whose warm-up round
    took ``t`` seconds runs ``max(3, min(rounds, S / t))`` rounds (stated in its row).
    """
    rows = []
    rounds = args.rounds
    for n in [int(v) for v in args.grid_n.split(",")]:
        for d in [int(v) for v in args.grid_d.split(",")]:
            if args.max_rounds_s:
                dtype = getattr(torch, args.dtype)
                X, Y, trees, chains, proj = make_problem(
                    n, d, args.trees, args.lines, dtype, args.device
                )
                fns = methods(X, Y, trees, chains, proj)
                probe = interleaved(
                    {m: fns[m] for m in _selected(args.methods, fns)}, rounds=1, warmup=0
                )
                one = sum(t[0] for t in probe.values())
                del X, Y, trees, chains, proj, fns
                args.rounds = max(3, min(rounds, int(args.max_rounds_s / one)))
            row = time_one(args, n, d, args.trees)
            row["rounds"] = args.rounds
            rows.append(row)
            ratios = {k: round(v, 3) for k, v in row.items() if " / " in k}
            print(f"done N={n} d={d} rounds={args.rounds}: {ratios}", file=sys.stderr, flush=True)
    args.rounds = rounds
    return rows


def batch_vs_loop(args) -> list[dict]:
    """A batch of ``--batch`` problems of ``--n`` points against a Python loop over them.

    db_tsw on shared trees and tsw.sw on shared projections (``--trees`` x ``--lines``
    lines), forward + backward of the sum of the values, interleaved round by round.
    """
    dtype = getattr(torch, args.dtype)
    g = torch.Generator().manual_seed(0)
    B, n, d = args.batch, args.n, args.d
    X = torch.randn(B, n, d, generator=g, dtype=torch.float64).to(dtype=dtype, device=args.device)
    Y = (torch.randn(B, n, d, generator=g, dtype=torch.float64) + 0.5).to(X)
    trees = tsw.sample_concurrent_lines(
        d, n_trees=args.trees, n_lines=args.lines, seed=0, dtype=dtype, device=args.device
    )
    proj = tsw.sample_projections(
        d, args.trees * args.lines, seed=0, dtype=dtype, device=args.device
    )
    calls = {
        "db_tsw": lambda Xs, Ys: tsw.db_tsw(Xs, Ys, trees=trees, validate=False),
        "tsw.sw": lambda Xs, Ys: tsw.sw(Xs, Ys, projections=proj, validate=False),
    }
    work = {}
    for name, f in calls.items():

        def batched(f=f):
            Xs = X.detach().requires_grad_(True)
            f(Xs, Y).sum().backward()

        def loop(f=f):
            Xs = X.detach().requires_grad_(True)
            sum(f(Xs[i], Y[i]) for i in range(B)).backward()

        work[f"{name} batched"], work[f"{name} loop"] = batched, loop
    faults: dict[str, list[int]] = {}
    times = interleaved(work, rounds=args.rounds, faults=faults)
    row: dict[str, float | str] = {"B": B, "N=M": n, "d": d, "lines": args.trees * args.lines}
    row["malloc"] = malloc_setting()
    for name in calls:
        for mode in ("batched", "loop"):
            row[f"{name} {mode} [s]"] = median(times[f"{name} {mode}"])
            row[f"{name} {mode} page faults"] = median(faults[f"{name} {mode}"])
        row[f"{name} batched / loop"] = ratio(times, f"{name} batched", f"{name} loop")
    return [row]


#: the kinds of rows of ``--sweep sort``
SORT_KINDS = ("gaussian", "uniform", "student t3", "pairs", "cauchy", "clusters", "ties")


def sort_rows(kind: str, n_rows: int, n: int, seed: int = 0) -> np.ndarray:
    """float32 rows of one kind for ``--sweep sort`` (NumPy, C-contiguous)."""
    g = np.random.default_rng(seed)
    shape = (n_rows, n)
    if kind == "gaussian":
        x = g.standard_normal(shape)
    elif kind == "uniform":
        x = g.uniform(-1.0, 1.0, shape)
    elif kind == "student t3":
        x = g.standard_t(3, shape)
    elif kind == "pairs":  # every value twice, 1e-5 apart: a flow that has converged
        half = g.standard_normal((n_rows, (n + 1) // 2))
        x = np.concatenate([half, half + 1e-5 * g.standard_normal(half.shape)], axis=1)[:, :n]
    elif kind == "cauchy":
        x = g.standard_cauchy(shape)
    elif kind == "clusters":  # ten clusters of width 1e-4
        x = g.integers(0, 10, size=shape) + 1e-4 * g.standard_normal(shape)
    elif kind == "ties":  # a 1/8 grid: runs of equal values
        x = np.round(g.standard_normal(shape) * 8) / 8
    else:
        raise ValueError(f"kind must be one of {SORT_KINDS}; got {kind!r}")
    return np.ascontiguousarray(x, dtype=np.float32)


def sort_sweep(args) -> list[dict]:
    """The float32 sort of the closed forms (``tsw.core._sort.argsort_last``: packed
    64-bit keys with the compiled kernels) against ``np.argsort`` on rows of ``--grid``
    atoms of every kind of :data:`SORT_KINDS`, interleaved round by round. Each result is
    checked against NumPy's stable argsort.
    """
    from tsw.core import _kernels
    from tsw.core._sort import argsort_last

    if not _kernels.warm_up():
        raise SystemExit("--sweep sort needs the compiled kernels (pip install torch-tsw[fast])")
    lengths = [int(v) for v in (args.grid or "128,300,1000,4000,8192,16384").split(",")]
    rows = []
    for kind in SORT_KINDS:
        for n in lengths:
            x = sort_rows(kind, max(1, min(1000, (1 << 22) // n)), n)
            t = torch.from_numpy(x)
            want = np.argsort(x, axis=-1, kind="stable")
            if not np.array_equal(argsort_last(t).numpy(), want):  # pragma: no cover
                raise AssertionError(f"argsort_last differs from np.argsort on {kind} rows")
            work = {
                "packed keys": partial(argsort_last, t),
                "np.argsort": partial(np.argsort, x, axis=-1),
            }
            times = interleaved(work, rounds=args.rounds)
            row: dict[str, float | str] = {"kind": kind, "rows": x.shape[0], "atoms": n}
            for name in work:
                row[f"{name} [s]"] = median(times[name])
            row["packed keys / np.argsort"] = ratio(times, "packed keys", "np.argsort")
            rows.append(row)
            print(f"done {kind} n={n}", file=sys.stderr, flush=True)
    return rows


def print_rows(rows: list[dict]) -> None:
    keys = list(rows[0].keys())
    for r in rows:
        print("-" * 60)
        for k in keys:
            v = r[k]
            print(f"  {k:32s} {v:.4g}" if isinstance(v, float) else f"  {k:32s} {v}")


def plot(rows: list[dict], sweep: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = {"n": "N=M", "d": "d", "lines": "trees"}[sweep]
    xs = [r[key] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in [k[:-4] for k in rows[0] if k.endswith(" [s]")]:
        ax.loglog(xs, [r[f"{name} [s]"] for r in rows], "o-", label=name)
    ax.set_xlabel(key)
    ax.set_ylabel("forward + backward [s] (median)")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="points per measure (N = M)")
    ap.add_argument("--d", type=int, default=64, help="dimension")
    ap.add_argument("--trees", type=int, default=250, help="number of trees T")
    ap.add_argument("--lines", type=int, default=4, help="lines per tree k")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--rounds", type=int, default=7, help="timed rounds (median)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument(
        "--sweep",
        choices=["n", "d", "lines", "chunk", "grid", "batch", "sort"],
        help="sweep one parameter (chunk: db_tsw's chunk_size, with --memory its peak RSS;"
        " grid: every (N, d) of --grid-n x --grid-d; batch: --batch problems of --n points"
        " batched against a loop; sort: the float32 sort on rows of --grid atoms of"
        " several kinds, as packed 64-bit keys against np.argsort)",
    )
    ap.add_argument("--batch", type=int, default=16, help="problems of --sweep batch")
    ap.add_argument("--grid-n", default="500,2000,10000,50000", help="N values of --sweep grid")
    ap.add_argument("--grid-d", default="2,64,784,3072", help="d values of --sweep grid")
    ap.add_argument(
        "--methods",
        default=None,
        help="comma-separated methods to time (default: all; --sweep grid: " + GRID_METHODS + ")",
    )
    ap.add_argument(
        "--max-rounds-s",
        type=float,
        default=None,
        help="--sweep grid: fewer rounds (at least 3) where one round would take longer",
    )
    ap.add_argument("--grid", default=None, help="comma-separated sweep values (override)")
    ap.add_argument("--memory", action="store_true", help="peak RSS per method (CPU)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    ap.add_argument("--out", default="benchmarks/out/runtime", help="output folder")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.d, args.trees, args.rounds = 200, 8, 20, 2
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    print(
        f"settings: {settings}  torch {torch.__version__}  POT {getattr(ot, '__version__', None)}"
    )

    if args.sweep is None:
        rows = [time_one(args, args.n, args.d, args.trees)]
    elif args.sweep == "chunk":
        grid = (args.grid or "none,auto,250,100,25").split(",")
        rows = chunk_sweep(args, grid)
    elif args.sweep == "grid":
        if args.methods is None and ot is None:  # e.g. the GPU machine without POT's wheel
            print("POT is not installed: the grid runs without its POT column", file=sys.stderr)
            args.methods = GRID_METHODS.replace(",POT sw p=2", "")
        args.methods = args.methods or GRID_METHODS
        rows = grid_sweep(args)
    elif args.sweep == "batch":
        rows = batch_vs_loop(args)
    elif args.sweep == "sort":
        rows = sort_sweep(args)
    else:
        grid = {
            "n": [250, 500, 1000, 2000, 5000, 10000] + ([] if args.quick else [20000]),
            "d": [2, 8, 64, 256, 1024, 3072],
            "lines": [25, 50, 125, 250, 500],
        }[args.sweep]
        if args.quick:
            grid = grid[:3]
        if args.grid:
            grid = [int(v) for v in args.grid.split(",")]
        rows = []
        for v in grid:
            n = v if args.sweep == "n" else args.n
            d = v if args.sweep == "d" else args.d
            t = v if args.sweep == "lines" else args.trees
            rows.append(time_one(args, n, d, t))
            print(f"done {args.sweep}={v}", file=sys.stderr, flush=True)
        plot(rows, args.sweep, out / f"runtime_{args.sweep}.png")
    print_rows(rows)
    tag = args.sweep or "single"
    with open(out / f"runtime_{tag}.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        wr.writeheader()
        wr.writerows(rows)
    result = {"settings": settings, "rows": rows}
    if args.memory and args.sweep != "chunk":  # the chunk sweep measured its own
        mem = peak_memory(args)
        result["peak_rss_growth_MiB"] = mem
        print("peak RSS growth of one forward+backward [MiB]:")
        for k, v in mem.items():
            print(f"  {k:32s} {v:8.1f}")
    (out / f"runtime_{tag}.json").write_text(json.dumps(result, indent=2))
    print(f"results written to {out.resolve()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
