"""Runtime of STSW on the sphere against its lower limit, the official code and sliced baselines.

Every method computes forward + backward (gradient with respect to the source points)
on the same tensors, timed in one process, interleaved round by round, and compared by
the median of per-round ratios (``benchmarks/_timing.py``).

The *lower limit* is the work no STSW implementation can avoid, written in plain torch
with autograd: one (T, N + M) geodesic coordinate (``arccos`` of a matmul), one sort per
tree, a (T, k, N + M) split (a softmax over the rays of logits from one matmul), the
gather of the masses with the tree's permutation, one cumulative sum and the weighted
sum of the suffix masses. The *minimal bound* leaves out the split: one (T, N + M)
angle, one sort per tree, one gather of the signed masses and one cumulative sum (the
1-D W1 of the angles to each root). Both sort with tsw's sort (``sort_last``: NumPy's on
the CPU, faster than ``torch.sort``).

The official STSW code (github.com/lilythchu/STSW, ``methods/stswd.py``) is not part of
this repository: clone it anywhere and pass ``--official PATH/methods/stswd.py`` to time
it on the same trees (its ``STSWD`` class with ``device="cpu"``). POT's
``ot.sliced_wasserstein_sphere`` (SSW) runs with ``--ssw-projections`` great circles.
:func:`tsw.s3w` and :func:`tsw.sw` of the ambient space run with ``L = T`` directions
(one sort each, as many sorts as STSW's one per tree) and ``L = T k`` (as many
directions as STSW has rays).

Examples
--------
``python -m benchmarks.runtime_sphere --official /tmp/STSW/methods/stswd.py``: the
reference setting (N = M = 2400 on S^2, 200 trees x 5 rays, float32, one thread).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

import tsw
from benchmarks._timing import interleaved, malloc_setting, median, ratio
from tsw.core._sort import sort_last

try:
    import ot
except ImportError:  # pragma: no cover
    ot = None


def make_problem(n: int, dim: int, n_trees: int, n_lines: int, dtype, seed: int = 0):
    """Two clouds on the sphere (a uniform one and a cap) and explicit spherical trees."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, dim, generator=g, dtype=torch.float64)
    Y = torch.randn(n, dim, generator=g, dtype=torch.float64)
    Y[:, -1] += 2.0
    X, Y = (torch.nn.functional.normalize(Z, dim=-1).to(dtype) for Z in (X, Y))
    trees = tsw.sample_spherical_trees(
        dim, n_trees=n_trees, n_lines=n_lines, seed=seed, dtype=dtype
    )
    return X, Y, trees


def load_official(path: str | None):
    """The official ``methods/stswd.py`` as a module, or None."""
    if path is None:
        return None
    spec = importlib.util.spec_from_file_location("official_stswd", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def methods(X, Y, trees, *, official=None, ssw_projections: int = 0, delta: float = 2.0):
    """Forward + backward closures on the same data and trees."""
    n, m = X.shape[0], Y.shape[0]
    T, k, D = trees.directions.shape
    w = torch.cat([torch.full((n,), 1.0 / n), torch.full((m,), -1.0 / m)]).to(X)

    def run(f: Callable[[torch.Tensor], torch.Tensor]):
        def step():
            Xs = X.detach().requires_grad_(True)
            f(Xs).backward()

        return step

    def lower(Xs):
        Z = torch.cat([Xs, Y])
        c = torch.arccos((trees.roots @ Z.T).clamp(-1, 1))  # (T, n)
        cs, idx = sort_last(c)
        logits = torch.matmul(trees.directions.reshape(T * k, D), Z.T).reshape(T, k, -1)
        masses = torch.softmax(logits, dim=-2) * w
        prefix = torch.gather(masses, -1, idx.unsqueeze(-2).expand(T, k, -1)).cumsum(-1)
        edges = torch.diff(cs, dim=-1, prepend=torch.zeros(T, 1, dtype=cs.dtype))
        return ((prefix[..., -1:] - prefix).abs() * edges.unsqueeze(-2)).sum()

    def minimal(Xs):
        c = torch.arccos((trees.roots @ torch.cat([Xs, Y]).T).clamp(-1, 1))  # (T, n)
        cs, idx = sort_last(c)
        prefix = torch.gather(w.expand_as(c), -1, idx).cumsum(-1)
        edges = torch.diff(cs, dim=-1, prepend=torch.zeros(T, 1, dtype=cs.dtype))
        return ((prefix[..., -1:] - prefix).abs() * edges).sum()

    out = {"lower limit": run(lower), "minimal bound": run(minimal)}
    for p in (1, 2):
        out[f"tsw.stsw p={p}"] = run(
            lambda Xs, p=p: tsw.stsw(Xs, Y, trees=trees, delta=delta, p=p, validate=False)
        )
    out["tsw.stsw_unif p=2"] = run(
        lambda Xs: tsw.stsw_unif(Xs, trees=trees, delta=delta, p=2, validate=False, seed=0)
    )
    # sliced baselines with one sort per direction: as many sorts as STSW (L = T) and as
    # many lines (L = T k); S3W projects in R^d, SW in the ambient R^(d+1)
    for L in sorted({T, T * k}):
        proj = tsw.sample_projections(D - 1, L, seed=0, dtype=X.dtype)
        out[f"tsw.s3w p=2 L={L}"] = run(
            lambda Xs, proj=proj: tsw.s3w(Xs, Y, projections=proj, validate=False)
        )
        amb = tsw.sample_projections(D, L, seed=0, dtype=X.dtype)
        out[f"tsw.sw (ambient) p=2 L={L}"] = run(
            lambda Xs, amb=amb: tsw.sw(Xs, Y, projections=amb, validate=False)
        )
    if official is not None:
        obj = official.STSWD(ntrees=T, nlines=k, p=2, delta=delta, device="cpu")
        root, intercept = trees.roots.unsqueeze(1), trees.directions
        out["official STSW p=2"] = run(lambda Xs: obj(Xs, Y, root, intercept))
    if ssw_projections and ot is not None:
        proj = tsw.sample_sphere_projections(D, ssw_projections, seed=0, dtype=X.dtype)
        out[f"POT SSW p=2 L={ssw_projections}"] = run(
            lambda Xs: ot.sliced_wasserstein_sphere(
                Xs, Y, projections=proj, n_projections=ssw_projections, p=2
            )
        )
    return out


def agreement(X, Y, trees, official, delta: float) -> dict[str, float]:
    """Values of tsw.stsw and of the official code on the same trees (float64)."""
    X, Y = X.double(), Y.double()
    trees = trees.to(torch.float64)
    res = {}
    for p in (1, 2):
        ours = tsw.stsw(X, Y, trees=trees, delta=delta, p=p).item()
        res[f"tsw.stsw p={p}"] = ours
        if official is not None:
            obj = official.STSWD(
                ntrees=trees.n_trees, nlines=trees.n_lines, p=p, delta=delta, device="cpu"
            )
            theirs = obj(X, Y, trees.roots.unsqueeze(1), trees.directions).item()
            res[f"official p={p}"] = theirs
            res[f"relative difference p={p}"] = abs(ours - theirs) / abs(ours)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=2400, help="points per measure (N = M)")
    ap.add_argument("--dim", type=int, default=3, help="ambient dimension d + 1")
    ap.add_argument("--trees", type=int, default=200, help="number of trees T")
    ap.add_argument("--lines", type=int, default=5, help="rays per tree k")
    ap.add_argument("--delta", type=float, default=2.0, help="split inverse temperature")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--rounds", type=int, default=7, help="timed rounds (median)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--official", default=None, help="path to the official methods/stswd.py")
    ap.add_argument("--ssw-projections", type=int, default=0, help="POT SSW great circles")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    ap.add_argument("--out", default="benchmarks/out/runtime_sphere", help="output folder")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.trees, args.rounds = 200, 20, 2
    torch.set_num_threads(args.threads)
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    print(
        f"settings: {settings}  torch {torch.__version__}  POT {getattr(ot, '__version__', None)}"
    )
    X, Y, trees = make_problem(args.n, args.dim, args.trees, args.lines, getattr(torch, args.dtype))
    official = load_official(args.official)
    fns = methods(
        X, Y, trees, official=official, ssw_projections=args.ssw_projections, delta=args.delta
    )
    faults: dict[str, list[int]] = {}
    times = interleaved(fns, rounds=args.rounds, faults=faults)
    settings["malloc"] = malloc_setting()
    row: dict[str, float] = {}
    for name, ts in times.items():
        row[f"{name} [s]"] = median(ts)
    for name, fs in faults.items():
        row[f"{name} page faults"] = median(fs)
    for name in times:
        if name != "lower limit":
            row[f"{name} / lower limit"] = ratio(times, name, "lower limit")
        if name != "minimal bound":
            row[f"{name} / minimal bound"] = ratio(times, name, "minimal bound")
    for name in times:
        if name.startswith(("official", "POT", "tsw.s3w", "tsw.sw")):
            row[f"{name} / tsw.stsw p=2"] = ratio(times, name, "tsw.stsw p=2")
    for k, v in row.items():
        print(f"  {k:44s} {v:.4g}")
    values = agreement(X, Y, trees, official, args.delta)
    print("values on the same trees (float64):")
    for k, v in values.items():
        print(f"  {k:44s} {v:.10g}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "runtime_sphere.json").write_text(
        json.dumps({"settings": settings, "times": row, "values": values}, indent=2)
    )
    print(f"results written to {out.resolve()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
