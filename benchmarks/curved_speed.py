"""Runtime of the hyperbolic and SPD sliced distances against SW on the same coordinates.

Every method computes forward + backward (the gradient with respect to the source points)
with the same number ``L`` of directions, timed in one process, interleaved round by round,
and compared by the median of per-round ratios (``benchmarks/_timing.py``):

* hyperbolic space: :func:`tsw.ghsw` and :func:`tsw.hhsw` on points of the hyperboloid
  (``model="lorentz"``) and of the Poincare ball, against :func:`tsw.sw` on the points'
  spatial coordinates ``x_1:`` (the same (n, d) x (d, L) product, the same sorts): the
  ratio is the price of the hyperbolic coordinates;
* SPD matrices: :func:`tsw.spdsw` (one eigendecomposition per matrix, then SW of the
  half-vectorised logarithms) against :func:`tsw.sw` on the half-vectorised logarithms
  computed beforehand (so the ratio is the price of the logarithms and their gradient),
  and :func:`tsw.hspdsw` (one Cholesky factorisation per direction and matrix).

Examples
--------
``python -m benchmarks.curved_speed``: the reference settings (float32, one thread).
``python -m benchmarks.curved_speed --smoke``: tiny settings, one round.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import tsw
from benchmarks._timing import interleaved, median, ratio
from tsw.curved import _hyperbolic as hyp
from tsw.curved import _spd as spd

#: (N = M, d) of the hyperbolic table
HYPERBOLIC_GRID = ((500, 2), (500, 16), (2000, 2), (2000, 16), (2000, 64), (10000, 16))
#: (N = M, n) of the SPD table (n x n matrices)
SPD_GRID = ((500, 4), (500, 8), (2000, 8), (500, 22))


def _backward(fn: Callable[[torch.Tensor], Any], X: torch.Tensor) -> Callable[[], object]:
    """A call of forward + backward with respect to a fresh leaf copy of ``X``."""

    def run() -> object:
        leaf = X.detach().clone().requires_grad_(True)
        value = fn(leaf)
        value.backward()
        return value

    return run


def hyperbolic_problem(n: int, d: int, dtype: torch.dtype, seed: int = 0):
    """Two wrapped-normal-like clouds on H^d (Lorentz), their ball points and spatial parts."""
    g = torch.Generator().manual_seed(seed)
    X = hyp.exp0(torch.randn(n, d, generator=g, dtype=torch.float64))
    Y = hyp.exp0(0.5 * torch.randn(n, d, generator=g, dtype=torch.float64) + 0.5)
    X, Y = X.to(dtype), Y.to(dtype)
    return X, Y


def time_hyperbolic(
    n: int, d: int, n_projections: int, *, rounds: int, dtype: torch.dtype, seed: int = 0
) -> dict[str, float]:
    """Median seconds of each method and the medians of the per-round ratios to SW."""
    X, Y = hyperbolic_problem(n, d, dtype, seed)
    P, Q = hyp.lorentz_to_poincare(X), hyp.lorentz_to_poincare(Y)
    Zx, Zy = X[:, 1:].contiguous(), Y[:, 1:].contiguous()
    # not the data's seed: the same Gaussian draws would align directions with points
    theta = tsw.sample_projections(d, n_projections, seed=seed + 1, dtype=dtype)
    fns: dict[str, Callable[[], object]] = {
        "sw": _backward(lambda A: tsw.sw(A, Zy, projections=theta), Zx),
        "ghsw": _backward(lambda A: tsw.ghsw(A, Y, projections=theta), X),
        "hhsw": _backward(lambda A: tsw.hhsw(A, Y, projections=theta), X),
        "ghsw poincare": _backward(
            lambda A: tsw.ghsw(A, Q, model="poincare", projections=theta), P
        ),
        "hhsw poincare": _backward(
            lambda A: tsw.hhsw(A, Q, model="poincare", projections=theta), P
        ),
    }
    times = interleaved(fns, rounds=rounds)
    row: dict[str, float] = {"N=M": n, "d": d, "L": n_projections}
    for name in fns:
        row[f"{name} [s]"] = median(times[name])
        if name != "sw":
            row[f"{name} / sw"] = ratio(times, name, "sw")
    return row


def spd_problem(n: int, side: int, dtype: torch.dtype, seed: int = 0):
    """Two clouds of ``side`` x ``side`` SPD matrices (covariances of Gaussian samples)."""
    g = torch.Generator().manual_seed(seed)
    samples = torch.randn(2, n, 2 * side, side, generator=g, dtype=torch.float64)
    C = samples.mT @ samples / (2 * side) + 0.1 * torch.eye(side, dtype=torch.float64)
    C[1] = 2 * C[1]
    return C[0].to(dtype), C[1].to(dtype)


def time_spd(
    n: int, side: int, n_projections: int, *, rounds: int, dtype: torch.dtype, seed: int = 0
) -> dict[str, float]:
    """Median seconds of spdsw, hspdsw and sw on the logarithms, and their ratios to sw."""
    X, Y = spd_problem(n, side, dtype, seed)
    A = tsw.sample_spd_projections(side, n_projections, seed=seed + 1, dtype=dtype)
    theta = spd.half_vectorize(A).T
    Lx, Ly = spd.half_vectorize(spd.spd_log(X)), spd.half_vectorize(spd.spd_log(Y))
    fns: dict[str, Callable[[], object]] = {
        "sw on logs": _backward(lambda B: tsw.sw(B, Ly, projections=theta), Lx),
        "spdsw": _backward(lambda B: tsw.spdsw(B, Y, projections=A), X),
        "hspdsw": _backward(lambda B: tsw.hspdsw(B, Y, projections=A), X),
    }
    times = interleaved(fns, rounds=rounds)
    row: dict[str, float] = {"N=M": n, "n": side, "L": n_projections}
    for name in fns:
        row[f"{name} [s]"] = median(times[name])
        if name != "sw on logs":
            row[f"{name} / sw on logs"] = ratio(times, name, "sw on logs")
    return row


def _table(rows: list[dict[str, float]]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        cells = [f"{v:.3g}" if isinstance(v, float) else str(v) for v in r.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny settings, one round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--projections", type=int, default=200, help="L")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="write curved_speed.json here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    hgrid, sgrid, rounds, L = HYPERBOLIC_GRID, SPD_GRID, args.rounds, args.projections
    if args.smoke:
        hgrid, sgrid, rounds, L = ((50, 2),), ((20, 3),), 1, 8
    hyperbolic = [time_hyperbolic(n, d, L, rounds=rounds, dtype=dtype) for n, d in hgrid]
    spd_rows = [time_spd(n, s, L, rounds=rounds, dtype=dtype) for n, s in sgrid]
    setting = f"{args.dtype}, {torch.get_num_threads()} thread(s), {rounds} rounds, L = {L}"
    print(f"# curved_speed ({setting}; {os.cpu_count()} CPUs)\n")
    print("## Hyperbolic (forward + backward; ratios: medians of per-round ratios)\n")
    print(_table(hyperbolic) + "\n")
    print("## SPD\n")
    print(_table(spd_rows))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        record = {"setting": setting, "hyperbolic": hyperbolic, "spd": spd_rows}
        (args.out / "curved_speed.json").write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
