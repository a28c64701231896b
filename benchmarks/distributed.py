"""Speed-up of ``process_group=`` on one machine: 1 process against R gloo processes.

``python -m benchmarks.distributed`` times ``db_tsw`` forward + backward (float32, one
thread per process) on one problem, in one process without a group and in ``R`` spawned
processes with ``process_group`` (``--world``), on replicated data (the trees split
across the ranks) and on sharded data (``gather=True``: each rank holds ``1/R`` of the
points). Runs of the configurations alternate round by round, each run in fresh
processes timing one warm call (after one warm-up call) between barriers; the report
gives the median time of each configuration and the speed-up ``t(1) / t(R)``. Every
process uses one thread, so ``R`` processes need ``R`` free cores to show a speed-up.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

import tsw
from benchmarks._report import print_table, write_results


def _problem(n: int, d: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g)
    Y = torch.randn(n, d, generator=g) + 0.5
    return X, Y


def _worker(rank: int, world: int, port: int, mode: str, args: dict, out: str) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    X, Y = _problem(args["n"], args["d"])
    kwargs: dict = {"n_trees": args["trees"], "n_lines": args["lines"], "seed": 0}
    if world > 1:
        torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
        kwargs.update(process_group=torch.distributed.group.WORLD, gather=mode == "sharded")
        if mode == "sharded":
            lo, hi = args["n"] * rank // world, args["n"] * (rank + 1) // world
            X, Y = X[lo:hi], Y[lo:hi]

    def call() -> None:
        Xs = X.clone().requires_grad_(True)
        tsw.db_tsw(Xs, Y, **kwargs).backward()

    call()  # warm-up
    if world > 1:
        torch.distributed.barrier()
    t0 = time.perf_counter()
    call()
    if world > 1:
        torch.distributed.barrier()
    elapsed = time.perf_counter() - t0
    if rank == 0:
        Path(out).write_text(str(elapsed))
    if world > 1:
        torch.distributed.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_once(world: int, mode: str, args: dict) -> float:
    """Time one warm call of the configuration in fresh processes; return seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "t.txt")
        ctx = mp.get_context("spawn")
        port = _free_port()
        procs = [
            ctx.Process(target=_worker, args=(r, world, port, mode, args, out))
            for r in range(world)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if any(p.exitcode != 0 for p in procs):
            raise RuntimeError(f"a rank failed (world={world}, mode={mode})")
        return float(Path(out).read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10000, help="points per measure (N = M)")
    ap.add_argument("--d", type=int, default=64, help="dimension")
    ap.add_argument("--trees", type=int, default=500, help="trees T")
    ap.add_argument("--lines", type=int, default=4, help="lines per tree k")
    ap.add_argument("--world", type=int, default=2, help="processes R")
    ap.add_argument("--rounds", type=int, default=3, help="runs per configuration (median)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    ap.add_argument("--out", default="benchmarks/out/distributed", help="output folder")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.d, args.trees, args.rounds = 200, 8, 8, 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = {k: getattr(args, k) for k in ("n", "d", "trees", "lines", "world", "rounds")}
    print(f"settings: {settings}  torch {torch.__version__}  cores {os.cpu_count()}", flush=True)
    configs = [(1, "single"), (args.world, "replicated"), (args.world, "sharded")]
    times: dict[str, list[float]] = {mode: [] for _, mode in configs}
    for _ in range(args.rounds):
        for world, mode in configs:
            times[mode].append(run_once(world, mode, settings))
    t1 = statistics.median(times["single"])
    header = ["configuration", "processes", "median [s]", "speed-up t(1)/t(R)"]
    rows = [
        [
            mode,
            str(world),
            f"{statistics.median(times[mode]):.3f}",
            f"{t1 / statistics.median(times[mode]):.2f}",
        ]
        for world, mode in configs
    ]
    print_table(
        f"db_tsw forward + backward, N = M = {args.n}, d = {args.d}, "
        f"{args.trees} x {args.lines} lines, float32, 1 thread per process",
        header,
        rows,
    )
    write_results(out, "distributed", header, rows, {"settings": settings, "times": times})
    return 0


if __name__ == "__main__":
    sys.exit(main())
