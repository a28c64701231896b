"""The first call of a process: import time, and the first forward + backward with and without
the compiled kernels, on a fresh Numba cache.

Each measurement runs in a fresh Python process with its own empty ``NUMBA_CACHE_DIR``
(nothing compiled or cached), one torch thread, N = M = ``--n`` points in d = 10, float64:

* ``import``: ``import torch`` alone, and ``import torch, tsw`` (the difference is what
  ``tsw`` adds);
* the first and the second forward + backward of ``db_tsw``, ``sw`` and ``stsw`` (the
  default options) with ``TSW_NUMBA=1`` (on the empty cache a child process compiles the
  kernels while the torch operators serve) and ``TSW_NUMBA=0`` (the torch operators only);
* ``worker``: the first item of a ``torch.utils.data.DataLoader`` worker started with
  ``spawn`` whose ``__getitem__`` computes ``db_tsw`` (the worker's import and first call).

The two settings alternate round by round; the report gives the medians over ``--rounds``
and the ratio of the medians (kernels / torch operators).

``--arrival`` measures when the compiled kernels arrive instead: a fresh process calls
``tsw.tree_plan`` on a random tree of 1e5 nodes (float64 tensors; its compiled path is
10-30x faster than its NumPy/Python fallback) and ``tsw.db_tsw`` forward + backward (N = M =
``--n``, d = 10, float32; compiled 0.7-0.9x of the torch operators) back to back for up
to ``--seconds``, recording each call's start, duration and path. On a warm Numba cache
(a directory a warm-up process has filled) and on an empty one, with ``TSW_NUMBA=1``
and ``TSW_NUMBA=0`` alternately: the first call, the time from the first call's start
to the first compiled call's end ("arrival"), the median call before the kernels
arrive against the median call of ``TSW_NUMBA=0`` over the same stretch of the run (the
slowdown of the calls beside the child's compilation) and the median compiled call.

Examples
--------
``python -m benchmarks.first_call --rounds 5``
``python -m benchmarks.first_call --arrival --rounds 3 --seconds 90``
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


_ARRIVAL = """
import sys, time
import numpy as np
import torch
import tsw

try:
    from tsw.core._kernel_loading import ready
except ImportError:  # a checkout without core/_kernel_loading.py (side-by-side timings)
    from tsw.core import _kernels

    ready = _kernels._ready.__contains__
torch.set_num_threads(1)
kind, seconds, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
if kind == "tree_plan":
    V = 100_000
    parents = np.concatenate([[-1], (rng.random(V - 1) * np.arange(1, V)).astype(np.int64)])
    ms, mt = rng.random(V) * (rng.random(V) < 0.5), rng.random(V) * (rng.random(V) < 0.5)
    # tensors: a sparse torch plan (NumPy inputs would return scipy's, and the first call
    # would import POT, 1-2 s, whatever the kernels)
    ms, mt, lengths = (torch.from_numpy(x) for x in (ms / ms.sum(), mt / mt.sum(), rng.random(V)))
    group = torch.float64

    def call():
        tsw.tree_plan(parents, lengths, ms, mt)

else:
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(n, 10, generator=g), torch.randn(n, 10, generator=g) + 0.5
    group = torch.float32

    def call():
        tsw.db_tsw(X.clone().requires_grad_(), Y, seed=0).backward()

start = time.perf_counter()
compiled_calls = 0
while time.perf_counter() - start < seconds and compiled_calls < 10:
    t = time.perf_counter()
    call()
    done = time.perf_counter()
    compiled = ready(group)  # loaded at the call's start at the latest
    compiled_calls += compiled
    print(t - start, done - t, int(compiled), flush=True)
"""


def _run(code: list[str], kernels: str, cache: str | None = None) -> list[float]:
    """Run ``code`` in a fresh process; return the printed floats.

    On an empty Numba cache of its own, or on ``cache`` (a directory) if given.
    """
    with tempfile.TemporaryDirectory() as empty:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache or empty, "TSW_NUMBA": kernels}
        env["OMP_NUM_THREADS"] = "1"
        out = subprocess.run(
            [sys.executable, *code], capture_output=True, text=True, env=env, check=True
        )
    return [float(v) for v in out.stdout.split()]


def arrival(rounds: int, seconds: float, n: int) -> list[dict]:
    """The arrival of the kernels and the calls beside it (see the module notes)."""
    rows = []
    with tempfile.TemporaryDirectory() as warm:
        fill = "from tsw.core import _kernels; assert _kernels.warm_up()"
        _run(["-c", fill], "wait", warm)
        for state in ("warm", "cold"):
            for kind in ("tree_plan", "db_tsw"):
                runs: dict[str, list[list[tuple[float, float, int]]]] = {"1": [], "0": []}
                for _ in range(rounds):
                    for kernels in ("1", "0"):
                        cache = warm if state == "warm" else None
                        code = ["-c", _ARRIVAL, kind, str(seconds), str(n)]
                        v = _run(code, kernels, cache)
                        calls = zip(v[::3], v[1::3], map(int, v[2::3]), strict=True)
                        runs[kernels].append(list(calls))
                rows.append({"cache": state, "call": kind, **_arrival_stats(runs)})
    return rows


def _arrival_stats(runs: dict[str, list[list[tuple[float, float, int]]]]) -> dict:
    """Medians over the rounds of the arrival, first call and the calls beside the build."""
    first, first_off, arrive, before, beside, after = [], [], [], [], [], []
    for on, off in zip(runs["1"], runs["0"], strict=True):
        first.append(on[0][1])
        first_off.append(off[0][1])
        hit = next((i for i, c in enumerate(on) if c[2]), None)
        arrive.append(on[hit][0] + on[hit][1] if hit is not None else float("nan"))
        until = on[hit][0] if hit is not None else on[-1][0] + on[-1][1]
        waiting = [d for t, d, _ in on[1 : hit if hit is not None else None]]
        torch_only = [d for t, d, _ in off[1:] if t < until] or [d for _, d, _ in off[1:]]
        if waiting:
            before.append(statistics.median(waiting))
            beside.append(statistics.median(waiting) / statistics.median(torch_only))
        after.append(statistics.median([d for _, d, c in on if c]) if hit is not None else None)
    med = statistics.median
    return {
        "first call s": med(first),
        "first call torch s": med(first_off),
        "arrival s": med(arrive),
        "calls before arrival s": med(before) if before else None,
        "beside / torch": med(beside) if beside else None,
        "compiled call s": med([a for a in after if a is not None]) if any(after) else None,
        "torch call s": med(statistics.median([d for _, d, _ in off[1:]]) for off in runs["0"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="points per measure")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--no-worker", action="store_true", help="skip the DataLoader worker")
    parser.add_argument("--arrival", action="store_true", help="when the kernels arrive")
    parser.add_argument("--seconds", type=float, default=90.0, help="--arrival: longest run")
    args = parser.parse_args(argv)
    if args.arrival:
        rows = arrival(args.rounds, args.seconds, args.n)
        print(f"medians of {args.rounds} fresh processes per cell, one torch thread")
        print("| cache | call | first call: kernels | torch operators | kernels arrive |", end="")
        print(" calls before: s | / torch operators | compiled call | torch call |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            cells = [r["first call s"], r["first call torch s"], r["arrival s"]]
            cells += [r["calls before arrival s"], r["beside / torch"], r["compiled call s"]]
            cells += [r["torch call s"]]
            text = ["-" if c is None else f"{c:.3g}" for c in cells]
            print(f"| {r['cache']} | {r['call']} | " + " | ".join(text) + " |")
        return 0
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
