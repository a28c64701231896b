"""Trees built from the data: build times, and distance matrices against POT's exact W1.

Two measurements, in one process, float64 and one torch thread:

* **builds**: ``T`` trees over ``n`` points of N(0, I_d) for each d in ``--dims``, with
  ``tsw.sample_quadtrees``, ``tsw.sample_cluster_trees`` (farthest-point, and k-means),
  interleaved round by round with the lower limit of any builder that reads the points:
  one ``torch.sort`` of the ``n * d`` coordinates per tree;
* **matrix**: a support of ``--support`` "word vectors" (a mixture of 50 Gaussians in
  dimension ``--dim``), two sets of ``--docs`` documents of ``--words`` distinct words each
  (uniformly drawn words, weights drawn uniform and normalised), ``T`` clustering trees
  (4 clusters, 5 levels) on the support, and the (docs, docs) matrix of
  ``tsw.pairwise_tsw`` (trees built once, then the matrix), against ``ot.emd2`` per pair
  on the two documents' own supports (``--words`` points each, Euclidean cost from
  ``ot.dist``), timed on ``--pairs`` random pairs, and against the same matrix as
  ``torch.cdist(p=1)`` of the whole dense embeddings (``tsw.tree_embedding``, blocks of
  500 rows). The table gives the time per pair of both, their ratio, and how the tree
  value relates to the exact W1 on those pairs.

* **flowtree** (``--parts flowtree``): Flowtree between documents on the same support,
  ``--flow-trees`` trees (quadtrees, then clustering trees), for two settings: two sets of
  ``--flow-docs`` documents of ``--words`` words, and two sets of 40 documents of 20
  words. Per pair, side by side in interleaved rounds: ``tsw.pairwise_flowtree`` with
  the compiled kernel (the whole matrix), the same function on its Python fallback (the
  first ``--fallback-docs`` rows and columns) and ``ot.emd2`` on ``--pairs`` random
  pairs (their own supports, Euclidean cost from ``ot.dist``); the median over rounds
  of each time per pair and of the per-round ratios, the largest difference between
  the compiled and the fallback values, and Flowtree's value over the exact W1 on
  those pairs.

``python -m benchmarks.support_trees`` (the defaults are the reported settings);
``--quick`` for a smoke run. Writes ``support_trees_<parts>.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import ot
import torch

import tsw
from benchmarks._timing import interleaved, median, ratio

F64 = torch.float64


def builds(n: int, dims: list[int], T: int, rounds: int) -> list[dict]:
    rows = []
    for d in dims:
        X = torch.randn(n, d, generator=torch.Generator().manual_seed(d), dtype=F64)
        flat = X.reshape(-1)
        fns = {
            "quadtree": lambda X=X: tsw.sample_quadtrees(X, T, seed=0),
            "cluster (farthest)": lambda X=X: tsw.sample_cluster_trees(X, T, seed=0),
            "cluster (kmeans)": lambda X=X: tsw.sample_cluster_trees(X, T, method="kmeans", seed=0),
            "lower limit": lambda flat=flat: [torch.sort(flat) for _ in range(T)],
        }
        times = interleaved(fns, rounds=rounds, warmup=0)
        nodes = [t.n_nodes for t in tsw.sample_quadtrees(X, T, seed=0)]
        row = {"n": n, "d": d, "trees": T, "quadtree nodes (mean)": statistics.mean(nodes)}
        for name in fns:
            row[f"{name} [s]"] = median(times[name])
            if name != "lower limit":
                row[f"{name} / lower limit"] = ratio(times, name, "lower limit")
        rows.append(row)
        print(json.dumps(row))
    return rows


def documents(k: int, n: int, words: int, g: torch.Generator) -> torch.Tensor:
    """(k, n) histograms: ``words`` distinct support points per row, random weights."""
    idx = torch.argsort(torch.rand(k, n, generator=g), dim=1)[:, :words]
    w = torch.rand(k, words, generator=g, dtype=F64) + 0.1
    H = torch.zeros(k, n, dtype=F64)
    H.scatter_(1, idx, w / w.sum(1, keepdim=True))
    return H


def matrix(args: argparse.Namespace) -> dict:
    g = torch.Generator().manual_seed(0)
    S = _word_vectors(args, g)
    Hs = documents(args.docs, args.support, args.words, g)
    Ht = documents(args.docs, args.support, args.words, g)
    t0 = time.perf_counter()
    trees = tsw.sample_cluster_trees(S, args.trees, n_clusters=4, depth=5, seed=0)
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    D = tsw.pairwise_tsw(Hs.to_sparse(), Ht.to_sparse(), trees=trees)
    total = time.perf_counter() - t0
    # the same matrix as torch.cdist of the whole embeddings, in blocks of 500 rows
    t0 = time.perf_counter()
    sparse_s = tsw.tree_embedding(Hs.to_sparse(), trees)
    Zs = sparse_s.to_dense()
    Zt = tsw.tree_embedding(Ht.to_sparse(), trees).to_dense()
    # the sparse embedding's bytes (int64 row and column, float64 value per nonzero)
    sparse_bytes = sparse_s._nnz() * 24
    dense_bytes = Zs.numel() * Zs.element_size()
    dense = [torch.cdist(Zs[None, i : i + 500], Zt[None], p=1)[0] for i in range(0, len(Zs), 500)]
    cdist_total = time.perf_counter() - t0
    gap = float((torch.cat(dense) - D).abs().max() / D.abs().max())
    del Zs, Zt, dense
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, args.docs, size=(args.pairs, 2))
    Sn, Hsn, Htn = S.numpy(), Hs.numpy(), Ht.numpy()
    emd_times, exact, tree = [], [], []
    for i, j in pairs:
        si, sj = np.flatnonzero(Hsn[i]), np.flatnonzero(Htn[j])
        t0 = time.perf_counter()
        w = ot.emd2(Hsn[i, si], Htn[j, sj], ot.dist(Sn[si], Sn[sj], metric="euclidean"))
        emd_times.append(time.perf_counter() - t0)
        exact.append(float(w))
        tree.append(float(D[i, j]))
    exact_a, tree_a = np.array(exact), np.array(tree)
    per_pair = total / (args.docs * args.docs)
    emd = statistics.median(emd_times)
    row = {
        "support": args.support,
        "d": args.dim,
        "docs": args.docs,
        "words": args.words,
        "trees": args.trees,
        "tree build [s]": build,
        "embedding columns": tsw.tree_embedding(Hs[:1], trees).shape[1],
        "sparse embedding of one set [MiB]": sparse_bytes / 2**20,
        "dense embedding of one set [MiB]": dense_bytes / 2**20,
        "matrix [s]": total,
        "matrix per pair [s]": per_pair,
        "cdist of the embeddings [s]": cdist_total,
        "cdist of the embeddings / matrix": cdist_total / total,
        "max |difference| / max value": gap,
        "ot.emd2 per pair (median) [s]": emd,
        "ot.emd2 / matrix per pair": emd / per_pair,
        "ot.emd2 for the whole matrix (estimated) [s]": emd * args.docs * args.docs,
        "TSW / W1 (median over pairs)": float(np.median(tree_a / exact_a)),
        "TSW / W1 (5%-95%)": [float(q) for q in np.quantile(tree_a / exact_a, [0.05, 0.95])],
        "Pearson(TSW, W1)": float(np.corrcoef(tree_a, exact_a)[0, 1]),
    }
    print(json.dumps(row))
    return row


def _word_vectors(args: argparse.Namespace, g: torch.Generator) -> torch.Tensor:
    """``--support`` points in dimension ``--dim``: a mixture of 50 Gaussians."""
    centres = 4 * torch.randn(50, args.dim, generator=g, dtype=F64)
    S = centres[torch.randint(0, 50, (args.support,), generator=g)]
    return S + torch.randn(args.support, args.dim, generator=g, dtype=F64)


def flowtree(args: argparse.Namespace) -> list[dict]:
    from tsw.core import _kernels

    if not _kernels.warm_up():
        raise SystemExit("the flowtree part needs the compiled kernels (pip install numba)")
    g = torch.Generator().manual_seed(1)
    S = _word_vectors(args, g)
    Sn = S.numpy()
    rng = np.random.default_rng(1)
    rows = []
    for kind in ("quadtree", "cluster"):
        if kind == "quadtree":
            trees = tsw.sample_quadtrees(S, args.flow_trees, seed=0)
        else:
            trees = tsw.sample_cluster_trees(S, args.flow_trees, n_clusters=4, depth=5, seed=0)
        for docs, words in ((args.flow_docs, args.words), (40, 20)):
            Hs, Ht = (
                documents(docs, args.support, words, g),
                documents(docs, args.support, words, g),
            )
            f = min(args.fallback_docs, docs)
            pairs = rng.integers(0, docs, size=(args.pairs, 2))
            Hsn, Htn = Hs.numpy(), Ht.numpy()
            out: dict[str, torch.Tensor] = {}

            def compiled(Hs=Hs, Ht=Ht, trees=trees, out=out) -> None:
                out["compiled"] = tsw.pairwise_flowtree(Hs, Ht, trees=trees)

            def fallback(Hs=Hs, Ht=Ht, trees=trees, f=f, out=out) -> None:
                usable = _kernels.trees_usable
                _kernels.trees_usable = lambda: False  # the Python twin
                try:
                    out["fallback"] = tsw.pairwise_flowtree(Hs[:f], Ht[:f], trees=trees)
                finally:
                    _kernels.trees_usable = usable

            def emd(pairs=pairs, Hsn=Hsn, Htn=Htn, out=out) -> None:
                values = []
                for i, j in pairs:
                    si, sj = np.flatnonzero(Hsn[i]), np.flatnonzero(Htn[j])
                    M = ot.dist(Sn[si], Sn[sj], metric="euclidean")
                    values.append(float(ot.emd2(Hsn[i, si], Htn[j, sj], M)))
                out["emd"] = torch.tensor(values, dtype=F64)

            times = interleaved(
                {"compiled": compiled, "fallback": fallback, "ot.emd2": emd},
                rounds=args.rounds,
                warmup=1,
            )
            per = {
                "compiled": [t / docs**2 for t in times["compiled"]],
                "fallback": [t / f**2 for t in times["fallback"]],
                "ot.emd2": [t / len(pairs) for t in times["ot.emd2"]],
            }
            D = out["compiled"]
            excess = D[pairs[:, 0], pairs[:, 1]] / out["emd"]
            row = {
                "trees": f"{args.flow_trees} {kind}",
                "documents": docs,
                "words": words,
                "compiled per pair [us]": 1e6 * median(per["compiled"]),
                "fallback per pair [us]": 1e6 * median(per["fallback"]),
                "ot.emd2 per pair [us]": 1e6 * median(per["ot.emd2"]),
                "fallback / compiled": ratio(per, "fallback", "compiled"),
                "ot.emd2 / compiled": ratio(per, "ot.emd2", "compiled"),
                "max |compiled - fallback| / max": float(
                    (D[:f, :f] - out["fallback"]).abs().max() / D[:f, :f].abs().max()
                ),
                "Flowtree / W1 (median over pairs)": float(excess.median()),
                "pairs": {"compiled": docs**2, "fallback": f**2, "ot.emd2": len(pairs)},
            }
            rows.append(row)
            print(json.dumps(row))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="points of the builds")
    ap.add_argument("--dims", default="2,64", help="dimensions of the builds")
    ap.add_argument("--trees", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--support", type=int, default=5000)
    ap.add_argument("--dim", type=int, default=32, help="dimension of the word vectors")
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--words", type=int, default=100)
    ap.add_argument("--pairs", type=int, default=200, help="pairs timed with ot.emd2")
    ap.add_argument("--flow-trees", type=int, default=1, help="trees of the flowtree part")
    ap.add_argument("--flow-docs", type=int, default=200, help="documents a set (flowtree)")
    ap.add_argument("--fallback-docs", type=int, default=10, help="of them on the fallback")
    ap.add_argument(
        "--parts", default="builds,matrix", help="builds, matrix, flowtree (comma-separated)"
    )
    ap.add_argument("--quick", action="store_true", help="a smoke run (tiny settings)")
    ap.add_argument("--out", default="benchmarks/out")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.dims, args.trees, args.rounds = 500, "2,8", 2, 1
        args.support, args.dim, args.docs, args.words, args.pairs = 100, 8, 10, 10, 3
        args.flow_docs, args.fallback_docs = 6, 3
    torch.set_num_threads(1)
    parts = args.parts.split(",")
    result: dict[str, object] = {}
    if "builds" in parts:
        dims = [int(d) for d in args.dims.split(",")]
        result["builds"] = builds(args.n, dims, args.trees, args.rounds)
    if "matrix" in parts:
        result["matrix"] = matrix(args)
    if "flowtree" in parts:
        result["flowtree"] = flowtree(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"support_trees_{'_'.join(parts)}.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
