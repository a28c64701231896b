"""The first call of a process: import time, and the first forward + backward with and without
the compiled kernels, on a fresh Numba cache.

Each measurement runs in a fresh Python process with its own empty ``NUMBA_CACHE_DIR``
(nothing compiled or cached), one torch thread, N = M = ``--n`` points in d = 10, float64:

* ``import``: ``import torch`` alone, and ``import torch, tsw`` (the difference is what
  ``tsw`` adds);
* the first and the second forward + backward of ``db_tsw``, ``sw`` and ``stsw`` (the
  default options) with ``TSW_NUMBA=1`` (the kernels compile in a background thread while
  the torch operators serve) and ``TSW_NUMBA=0`` (the torch operators only);
* ``worker``: the first item of a ``torch.utils.data.DataLoader`` worker started with
  ``spawn`` whose ``__getitem__`` computes ``db_tsw`` (the worker's import and first call).

The two settings alternate round by round; the report gives the medians over ``--rounds``
and the ratio of the medians (kernels / torch operators).

Examples
--------
``python -m benchmarks.first_call --rounds 5``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

METHODS = ("db_tsw", "sw", "stsw")

_CALL = """
import sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import tsw
t2 = time.perf_counter()
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
n = int(sys.argv[2])
X = torch.randn(n, 10, generator=g, dtype=torch.float64)
Y = torch.randn(n, 10, generator=g, dtype=torch.float64) + 0.5
if sys.argv[1] == "stsw":
    X, Y = (torch.nn.functional.normalize(t, dim=-1) for t in (X, Y))
f = getattr(tsw, sys.argv[1])
times = []
for seed in (0, 1):
    x = X.clone().requires_grad_()
    t = time.perf_counter()
    f(x, Y, seed=seed).backward()
    times.append(time.perf_counter() - t)
print(t1 - t0, t2 - t1, *times)
"""

_WORKER = """
import sys, time
import torch
from torch.utils.data import DataLoader, Dataset


class Pairs(Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        import tsw

        g = torch.Generator().manual_seed(i)
        X = torch.randn(int(sys.argv[1]), 10, generator=g, dtype=torch.float64)
        return tsw.db_tsw(X, X + 0.5, seed=i)


if __name__ == "__main__":
    t = time.perf_counter()
    loader = DataLoader(Pairs(), batch_size=1, num_workers=1, multiprocessing_context="spawn")
    next(iter(loader))
    print(time.perf_counter() - t)
"""


def _run(code: list[str], kernels: str) -> list[float]:
    """Run ``code`` in a fresh process on an empty Numba cache; return the printed floats."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache, "TSW_NUMBA": kernels}
        env["OMP_NUM_THREADS"] = "1"
        out = subprocess.run(
            [sys.executable, *code], capture_output=True, text=True, env=env, check=True
        )
    return [float(v) for v in out.stdout.split()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="points per measure")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--no-worker", action="store_true", help="skip the DataLoader worker")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        worker = os.path.join(tmp, "worker.py")
        with open(worker, "w") as fh:
            fh.write(_WORKER)
        rows = []
        for name in args.methods.split(","):
            runs: dict[str, list[list[float]]] = {"1": [], "0": []}
            for _ in range(args.rounds):
                for kernels in ("1", "0"):
                    runs[kernels].append(_run(["-c", _CALL, name, str(args.n)], kernels))
            med = {
                k: [statistics.median(col) for col in zip(*v, strict=True)] for k, v in runs.items()
            }
            rows.append((name, med["1"], med["0"]))
        print(f"N = M = {args.n}, d = 10, float64, one thread, medians of {args.rounds} processes")
        torch_s = statistics.median(r[2][0] for r in rows)
        tsw_s = statistics.median(r[2][1] for r in rows)
        print(f"import torch: {torch_s:.2f} s; import tsw after it: {tsw_s:.2f} s")
        print("| method | first call: kernels | torch operators | ratio |", end="")
        print(" second call: kernels | torch operators |")
        print("|---|---|---|---|---|---|")
        for name, on, off in rows:
            print(f"| {name} | {on[2]:.2f} s | {off[2]:.2f} s | {on[2] / off[2]:.2f} |", end="")
            print(f" {on[3]:.3f} s | {off[3]:.3f} s |")
        if not args.no_worker:
            times = {"1": [], "0": []}
            for _ in range(args.rounds):
                for kernels in ("1", "0"):
                    times[kernels].extend(_run([worker, str(args.n)], kernels))
            on, off = (statistics.median(times[k]) for k in ("1", "0"))
            print(
                f"spawned DataLoader worker, first item: {on:.2f} s with kernels, "
                f"{off:.2f} s torch ops ({on / off:.2f}x)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
