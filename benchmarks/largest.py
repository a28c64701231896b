"""The largest N (= M) that one forward + backward of ``db_tsw`` fits in, with chunking.

``python -m benchmarks.largest --device cuda`` doubles N from ``--start`` at d = 128,
1000 x 4 lines, float32, ``chunk_size="auto"``, until the allocator raises out of memory
or ``--max-n`` or ``--budget-s`` is reached, and reports for each N the time of one
forward + backward and the peak memory (``torch.cuda.max_memory_allocated`` on CUDA;
on the CPU the peak resident set of the process, data included, from ``VmHWM`` reset
before each N, see benchmarks/_memory.py; run it with ``MALLOC_MMAP_THRESHOLD_=65536``
so that freed blocks leave the resident set). ``--n N`` runs one size only.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

import tsw
from benchmarks._memory import peak, reset_peak


def one(n: int, d: int, trees: int, lines: int, device: str) -> tuple[float, float]:
    """Seconds and peak GiB of one forward + backward at N = M = n."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, d, generator=g).to(device).requires_grad_(True)
    Y = (torch.randn(n, d, generator=g) + 0.5).to(device)
    T = tsw.sample_concurrent_lines(
        d, n_trees=trees, n_lines=lines, seed=0, center=torch.zeros(d), device=device
    )
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    else:
        reset_peak()
    t0 = time.perf_counter()
    tsw.db_tsw(X, Y, trees=T, validate=False).backward()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        top = torch.cuda.max_memory_allocated() / 2**30
    else:
        top = peak() / 1024
    return time.perf_counter() - t0, top


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--trees", type=int, default=1000)
    ap.add_argument("--lines", type=int, default=4)
    ap.add_argument("--start", type=int, default=100_000)
    ap.add_argument("--n", type=int, default=None, help="run this N only")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--max-n", type=int, default=10_000_000)
    ap.add_argument("--budget-s", type=float, default=120.0, help="stop after this much time")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.n is not None:
        args.start = args.max_n = args.n
    print(
        f"device {args.device}  d {args.d}  {args.trees} x {args.lines}  float32  "
        f"chunk_size auto  threads {torch.get_num_threads()}  torch {torch.__version__}",
        flush=True,
    )
    n, spent, largest = args.start, 0.0, None
    while n <= args.max_n and spent < args.budget_s:
        try:
            seconds, peak = one(n, args.d, args.trees, args.lines, args.device)
        except torch.OutOfMemoryError:
            print(f"N = {n}: out of memory", flush=True)
            break
        spent += seconds
        largest = n
        print(f"N = {n}: {seconds:.3f} s forward + backward, peak {peak:.2f} GiB", flush=True)
        n *= 2
    print(f"largest N that ran: {largest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
