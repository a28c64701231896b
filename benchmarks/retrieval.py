"""Nearest-neighbour classification and retrieval with W1 and its fast approximations.

Two data sets of histograms on a fixed support:

* ``digits``: scikit-learn's 8x8 digits (1,797 images, no download), each image a
  histogram of its pixel intensities on the 8x8 grid of pixel centres (unit spacing);
* ``bow``: a synthetic bag-of-words corpus (:func:`make_bow_corpus`): a vocabulary of
  5,000 words embedded in d = 32 around 10 topic centres, 2,000 documents of 40-100
  words, 45% drawn from its own topic (its class), 30% from a second topic and 25% from
  the whole vocabulary; deterministic for a seed.

A fixed random subset of ``--queries`` histograms are the queries, every other histogram
is the database: exact W1 on all pairs would take hours, so every method is compared on
the same queries against the same database. Methods (``--methods``):

* ``exact``: ``ot.emd2`` per pair on the two histograms' supports (Euclidean cost);
* ``sinkhorn``: ``ot.sinkhorn2`` with ``reg = --sinkhorn-reg`` x the largest ground
  distance of the support (stopThr 1e-6, at most 1,000 iterations): on the digits one
  call per query against the whole database (one 64 x 64 cost); on the corpus one call
  per pair on the two supports, for the first ``--sinkhorn-queries`` queries only (its
  accuracy, recall and correlation are over those queries);
* ``quad1``, ``quad10``, ``clus1``, ``clus10``: the tree-sliced W of Le et al.
  (:func:`tsw.pairwise_tsw`) on 1 or 10 random-shift quadtrees
  (:func:`tsw.sample_quadtrees`) or clustering trees (:func:`tsw.sample_cluster_trees`,
  4 clusters, depth 5);
* ``flow-quad``, ``flow-clus``: Flowtree (:func:`tsw.pairwise_flowtree`) on one quadtree or
  one clustering tree;
* ``fit-quad10``, ``fit-clus10``: the 10 trees with edge lengths fitted to the Euclidean
  distances (:func:`tsw.fit_edge_lengths`, ``--fit-pairs`` pairs, 1e5 by default,
  lam 1e-3);
* ``sw``, ``dbtsw``: :func:`tsw.sw` (100 projections) and :func:`tsw.db_tsw` (25 trees of
  4 lines) at p = 1 on the weighted point clouds, one batched call per query against the
  database (supports padded with zero-weight atoms).

Metrics: kNN accuracy (``--k`` neighbours, majority vote, labels of the database),
recall@10 of the exact-W1 neighbours, Spearman rank correlation with exact W1 (per query,
averaged), and seconds per query (wall time of the method over all its queries, divided
by their number; building or fitting the trees, done once per data set, is reported
apart as ``setup``). Output under ``--out``: ``retrieval_<data>.csv``, ``retrieval.json``
and ``retrieval.png`` (kNN accuracy and recall@10 against seconds per query; ``--plot-from
retrieval.json`` draws it again from a saved run).

Example: ``python -m benchmarks.retrieval`` (``--smoke`` for a few seconds).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import ot
import torch

import tsw
from benchmarks._report import prepare, print_table, save_with_legend, write_csv

F64 = torch.float64

ALL = (
    "exact",
    "sinkhorn",
    "quad1",
    "quad10",
    "clus1",
    "clus10",
    "flow-quad",
    "flow-clus",
    "fit-quad10",
    "fit-clus10",
    "sw",
    "dbtsw",
)

NAMES = {
    "exact": "exact W1 (ot.emd2)",
    "sinkhorn": "Sinkhorn (ot.sinkhorn2)",
    "quad1": "TSW, 1 quadtree",
    "quad10": "TSW, 10 quadtrees",
    "clus1": "TSW, 1 cluster tree",
    "clus10": "TSW, 10 cluster trees",
    "flow-quad": "Flowtree, 1 quadtree",
    "flow-clus": "Flowtree, 1 cluster tree",
    "fit-quad10": "TSW, 10 fitted quadtrees",
    "fit-clus10": "TSW, 10 fitted cluster trees",
    "sw": "SW_1, 100 projections",
    "dbtsw": "Db-TSW, 25 x 4 lines",
}


# --------------------------------------------------------------------------- data


def load_digit_histograms() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Histograms (1797, 64) of the digits, the pixel centres (64, 2) and the labels."""
    from sklearn.datasets import load_digits

    data = load_digits()
    H = data.data.astype(np.float64)
    H /= H.sum(1, keepdims=True)
    rows, cols = np.divmod(np.arange(64), 8)
    support = np.stack([rows, cols], axis=1).astype(np.float64)
    return H, support, data.target.astype(np.int64)


def make_bow_corpus(
    n_words: int = 5000,
    dim: int = 32,
    n_topics: int = 10,
    n_docs: int = 2000,
    doc_len: tuple[int, int] = (40, 100),
    seed: int = 0,
    sparse: bool = False,
) -> tuple[Any, np.ndarray, np.ndarray]:
    """A deterministic synthetic corpus: histograms (n_docs, n_words), embeddings, labels.

    Topic centres ``c_k ~ N(0, 1.25^2 I)``; each word belongs to a topic and sits at
    ``c_k + N(0, I)``, except a fifth of the vocabulary, spread as ``N(0, 4 I)``. A topic
    draws word ``w`` with probability proportional to ``exp(-|e_w - c_k|^2 / 8)``. A
    document of class ``k`` has ``U{40..100}`` words: 45% from topic ``k``, 30% from one
    other random topic, 25% uniform over the vocabulary; its histogram is the normalised
    word counts. ``sparse=True`` returns the same histograms as a scipy CSR matrix (the
    dense array of 100,000 documents would take 4 GB).
    """
    rng = np.random.default_rng(seed)
    centres = 1.25 * rng.standard_normal((n_topics, dim))
    home = rng.integers(0, n_topics, n_words)
    emb = centres[home] + rng.standard_normal((n_words, dim))
    generic = rng.random(n_words) < 0.2
    emb[generic] = 2.0 * rng.standard_normal((int(generic.sum()), dim))
    sq = ((emb[None, :, :] - centres[:, None, :]) ** 2).sum(-1)  # (K, V)
    logits = -sq / 8.0
    topic_word = np.exp(logits - logits.max(1, keepdims=True))
    topic_word /= topic_word.sum(1, keepdims=True)
    labels = rng.integers(0, n_topics, n_docs)
    indptr, indices, counts = [0], [], []
    for i in range(n_docs):
        length = int(rng.integers(doc_len[0], doc_len[1] + 1))
        other = (labels[i] + 1 + rng.integers(0, n_topics - 1)) % n_topics
        source = rng.choice(3, size=length, p=[0.45, 0.3, 0.25])
        words = np.concatenate(
            [
                rng.choice(n_words, int((source == 0).sum()), p=topic_word[labels[i]]),
                rng.choice(n_words, int((source == 1).sum()), p=topic_word[other]),
                rng.integers(0, n_words, int((source == 2).sum())),
            ]
        )
        ids, c = np.unique(words, return_counts=True)
        indices.append(ids)
        counts.append(c / length)
        indptr.append(indptr[-1] + ids.size)
    shape = (n_docs, n_words)
    if sparse:
        from scipy.sparse import csr_matrix

        H = csr_matrix((np.concatenate(counts), np.concatenate(indices), indptr), shape=shape)
        return H, emb, labels
    H = np.zeros(shape)
    rows = np.repeat(np.arange(n_docs), np.diff(indptr))
    H[rows, np.concatenate(indices)] = np.concatenate(counts)
    return H, emb, labels


# --------------------------------------------------------------------------- methods


def _cdist(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    sq = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * A @ B.T
    return np.sqrt(np.maximum(sq, 0.0))


def exact(Q: np.ndarray, DB: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Exact W1 per pair on the histograms' supports (``ot.emd2``)."""
    out = np.zeros((Q.shape[0], DB.shape[0]))
    nz_db = [np.flatnonzero(h) for h in DB]
    for i, q in enumerate(Q):
        sq = np.flatnonzero(q)
        for j, sd in enumerate(nz_db):
            out[i, j] = ot.emd2(q[sq], DB[j, sd], _cdist(X[sq], X[sd]))
    return out


def sinkhorn_batched(Q: np.ndarray, DB: np.ndarray, X: np.ndarray, reg: float) -> np.ndarray:
    """One ``ot.sinkhorn2`` call per query (on its support) against the whole database."""
    C = _cdist(X, X)
    out = np.zeros((Q.shape[0], DB.shape[0]))
    for i, q in enumerate(Q):
        s = np.flatnonzero(q)  # POT divides by the source weights
        out[i] = ot.sinkhorn2(q[s], DB.T, C[s], reg * C.max(), numItermax=1000, stopThr=1e-6)
    return out


def sinkhorn_pairs(Q: np.ndarray, DB: np.ndarray, X: np.ndarray, reg: float) -> np.ndarray:
    """``ot.sinkhorn2`` per pair on the two supports."""
    scale = reg * _diameter(X)
    out = np.zeros((Q.shape[0], DB.shape[0]))
    nz_db = [np.flatnonzero(h) for h in DB]
    for i, q in enumerate(Q):
        sq = np.flatnonzero(q)
        for j, sd in enumerate(nz_db):
            C = _cdist(X[sq], X[sd])
            out[i, j] = ot.sinkhorn2(q[sq], DB[j, sd], C, scale, numItermax=1000, stopThr=1e-6)
    return out


def _diameter(X: np.ndarray) -> float:
    """The largest distance between two points (exact for small X, else from the centroid)."""
    if X.shape[0] <= 2000:
        return float(_cdist(X, X).max())
    r = np.sqrt(((X - X.mean(0)) ** 2).sum(1))
    return float(2 * r.max())  # an upper bound, within a factor 2


def padded_clouds(H: np.ndarray, X: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Each histogram as a point cloud of its support, padded with zero-weight atoms."""
    nz = [np.flatnonzero(h) for h in H]
    S = max(len(s) for s in nz)
    P = np.zeros((H.shape[0], S, X.shape[1]))
    W = np.zeros((H.shape[0], S))
    for i, s in enumerate(nz):
        P[i, : len(s)] = X[s]
        P[i, len(s) :] = X[s[0]]
        W[i, : len(s)] = H[i, s]
    return torch.from_numpy(P), torch.from_numpy(W)


def sliced(Q: np.ndarray, DB: np.ndarray, X: np.ndarray, fn: Callable) -> np.ndarray:
    """One batched call per query against the whole database (same slices: one seed)."""
    Pd, Wd = padded_clouds(DB, X)
    out = np.zeros((Q.shape[0], DB.shape[0]))
    for i, q in enumerate(Q):
        s = np.flatnonzero(q)
        Pq = torch.from_numpy(X[s]).expand(DB.shape[0], len(s), X.shape[1])
        Wq = torch.from_numpy(q[s]).expand(DB.shape[0], len(s))
        out[i] = fn(Pq, Pd, Wq, Wd).numpy()
    return out


def build_trees(X: np.ndarray, key: str, fit_pairs: int) -> tsw.SupportTrees:
    """The trees of a tree method (seed 0)."""
    support = torch.from_numpy(X)
    T = 10 if key.endswith("10") else 1
    if "quad" in key:
        trees = tsw.sample_quadtrees(support, T, seed=0)
    else:
        trees = tsw.sample_cluster_trees(support, T, seed=0)
    if key.startswith("fit-"):
        trees = tsw.fit_edge_lengths(trees, n_pairs=fit_pairs, seed=0)
    return trees


def run_method(
    key: str, Q: np.ndarray, DB: np.ndarray, X: np.ndarray, args: argparse.Namespace, bow: bool
) -> tuple[np.ndarray, float, float, int]:
    """Distances (q', n), seconds per query, setup seconds and the queries q' it ran."""
    setup = 0.0
    nq = Q.shape[0]
    reg = args.sinkhorn_reg
    f: Callable[[np.ndarray, np.ndarray], np.ndarray]
    if key == "exact":
        f = lambda q, db: exact(q, db, X)  # noqa: E731
    elif key == "sinkhorn" and bow:
        nq = min(nq, args.sinkhorn_queries)
        f = lambda q, db: sinkhorn_pairs(q, db, X, reg)  # noqa: E731
    elif key == "sinkhorn":
        f = lambda q, db: sinkhorn_batched(q, db, X, reg)  # noqa: E731
    elif key == "sw":
        sw = lambda P1, P2, W1, W2: tsw.sw(P1, P2, W1, W2, n_projections=100, p=1, seed=0)  # noqa: E731
        f = lambda q, db: sliced(q, db, X, sw)  # noqa: E731
    elif key == "dbtsw":
        db = lambda P1, P2, W1, W2: tsw.db_tsw(  # noqa: E731
            P1, P2, W1, W2, n_trees=25, n_lines=4, p=1, seed=0
        )
        f = lambda q, d: sliced(q, d, X, db)  # noqa: E731
    else:
        t0 = time.perf_counter()
        base = key.replace("flow-quad", "quad1").replace("flow-clus", "clus1")
        trees = build_trees(X, base, args.fit_pairs)
        setup = time.perf_counter() - t0
        pair = tsw.pairwise_flowtree if key.startswith("flow-") else tsw.pairwise_tsw
        f = lambda q, db: pair(torch.from_numpy(q), torch.from_numpy(db), trees=trees).numpy()  # noqa: E731
    f(Q[:1], DB[:2])  # compiles or loads what the method needs: not timed
    t0 = time.perf_counter()
    D = f(Q[:nq], DB)
    return D, (time.perf_counter() - t0) / nq, setup, nq


# --------------------------------------------------------------------------- metrics


def knn_accuracy(D: np.ndarray, y_q: np.ndarray, y_db: np.ndarray, k: int) -> float:
    """Share of queries whose k nearest database items vote for their label."""
    near = np.argsort(D, axis=1, kind="stable")[:, :k]
    votes = np.stack([np.bincount(y_db[r], minlength=int(y_db.max()) + 1) for r in near])
    return float((votes.argmax(1) == y_q).mean())


def recall_at(D: np.ndarray, ref: np.ndarray, k: int = 10) -> float:
    """Mean share of each query's k exact nearest neighbours among the method's k."""
    a = np.argsort(D, axis=1, kind="stable")[:, :k]
    b = np.argsort(ref, axis=1, kind="stable")[:, :k]
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(a, b, strict=True)]))


def spearman(D: np.ndarray, ref: np.ndarray) -> float:
    """Mean over queries of the Spearman rank correlation with the exact distances."""
    from scipy.stats import spearmanr

    return float(np.mean([spearmanr(x, y)[0] for x, y in zip(D, ref, strict=True)]))


# --------------------------------------------------------------------------- main


def evaluate(name: str, H, X, y, args) -> list[dict]:
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(H.shape[0])
    q_idx, db_idx = order[: args.queries], order[args.queries :]
    if args.database:
        db_idx = db_idx[: args.database]
    Q, DB = H[q_idx], H[db_idx]
    bow = name == "bow"
    keys = [k for k in ALL if k in args.methods]
    results, ref = [], None
    for key in ["exact"] + [k for k in keys if k != "exact"]:
        D, spq, setup, nq = run_method(key, Q, DB, X, args, bow)
        if key == "exact":
            ref, exact_spq = D, spq
        rows = slice(0, nq)
        results.append(
            {
                "data": name,
                "key": key,
                "method": NAMES[key],
                "queries": nq,
                "database": DB.shape[0],
                "knn_acc": knn_accuracy(D, y[q_idx][rows], y[db_idx], args.k),
                "recall10": recall_at(D, ref[rows]),
                "spearman": spearman(D, ref[rows]),
                "s_per_query": spq,
                "vs_exact": spq / exact_spq,
                "setup_s": setup,
            }
        )
        print(f"  {name} {key}: {results[-1]['knn_acc']:.3f} acc, {spq:.4f} s/query", flush=True)
    return results


#: one colour and marker per method: quadtrees blue, cluster trees cyan, a circle for one
#: tree and a square for ten; fitted trees, Flowtree and the baselines apart
STYLE = {
    "exact": ("black", "*"),
    "sinkhorn": ("tab:gray", "P"),
    "quad1": ("tab:blue", "o"),
    "quad10": ("tab:blue", "s"),
    "clus1": ("tab:cyan", "o"),
    "clus10": ("tab:cyan", "s"),
    "flow-quad": ("tab:green", "^"),
    "flow-clus": ("tab:olive", "v"),
    "fit-quad10": ("tab:purple", "D"),
    "fit-clus10": ("tab:pink", "D"),
    "sw": ("tab:orange", "X"),
    "dbtsw": ("tab:red", "h"),
}


def plot(results: list[dict], path: Path) -> None:
    """kNN accuracy and recall@10 against seconds per query, one column per data set.

    Every method has its own colour and marker and one entry in a legend shared by the
    panels (below them), so no label is written on the data.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = sorted({r["data"] for r in results})
    metrics = (("knn_acc", "kNN accuracy"), ("recall10", "recall@10 of the exact-W1 neighbours"))
    fig, axes = plt.subplots(
        len(metrics), len(datasets), figsize=(5.2 * len(datasets), 7.2), squeeze=False
    )
    handles: dict[str, object] = {}
    most_of = {d: max(r["queries"] for r in results if r["data"] == d) for d in datasets}
    for col, data in enumerate(datasets):
        sub = [r for r in results if r["data"] == data]
        most = max(r["queries"] for r in sub)
        for row, (key, name) in enumerate(metrics):
            ax = axes[row, col]
            for r in sub:
                colour, marker = STYLE.get(r["key"], ("tab:brown", "o"))
                label = r["method"]
                fewer = sorted({(x["data"], x["queries"]) for x in results if x["key"] == r["key"]})
                fewer = [f"{d}: {q} queries" for d, q in fewer if q != most_of[d]]
                if fewer:
                    label += f" ({', '.join(fewer)})"
                handles[label] = ax.scatter(
                    r["s_per_query"],
                    r[key],
                    s=70,
                    c=colour,
                    marker=marker,
                    alpha=0.85,
                    edgecolors="white" if marker != "*" else "none",
                    linewidths=0.6,
                    label=label,
                    zorder=3,
                )
            ax.set_xscale("log")
            ax.grid(True, which="major", lw=0.4, alpha=0.5)
            ax.set_ylabel(f"{name}\n({most} queries)", fontsize=8)
            if row == len(metrics) - 1:
                ax.set_xlabel("seconds per query against the whole database (log)", fontsize=8)
            if row == 0:
                ax.set_title(f"{data}: database of {sub[0]['database']}", fontsize=9)
            ax.tick_params(labelsize=7)
    save_with_legend(fig, handles, path, ncol=3, bottom=0.13)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", default="digits,bow", help="comma-separated: digits, bow")
    ap.add_argument("--methods", default=",".join(ALL), help="comma-separated keys")
    ap.add_argument("--queries", type=int, default=50, help="queries per data set")
    ap.add_argument("--database", type=int, default=0, help="database size (0: the rest)")
    ap.add_argument("--k", type=int, default=5, help="neighbours of the kNN vote")
    ap.add_argument("--sinkhorn-reg", type=float, default=0.05, help="x the largest distance")
    ap.add_argument("--sinkhorn-queries", type=int, default=10, help="bow: Sinkhorn queries")
    ap.add_argument("--fit-pairs", type=int, default=100_000, help="pairs of each fitted tree")
    ap.add_argument("--words", type=int, default=5000)
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0, help="the query subset and the corpus")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--out", default="benchmarks/out/retrieval", help="output folder")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (seconds), for CI")
    ap.add_argument(
        "--plot-from", default=None, help="draw retrieval.png from a saved retrieval.json only"
    )
    args = ap.parse_args(argv)
    if args.plot_from:
        saved = json.loads(Path(args.plot_from).read_text())
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        plot(saved["rows"], out / "retrieval.png")
        print(f"figure written to {(out / 'retrieval.png').resolve()}")
        return 0
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in args.methods if m not in ALL]
    if bad:
        ap.error(f"unknown methods {bad}; choose from {list(ALL)}")
    if args.smoke:
        args.queries, args.database, args.words, args.docs = 4, 40, 300, 80
        args.sinkhorn_queries, args.fit_pairs = 2, 2000
    out = prepare(args)
    settings = vars(args) | {"machine": platform.processor() or platform.machine()}
    print(f"settings: {settings}")
    results: list[dict] = []
    for name in [d.strip() for d in args.data.split(",") if d.strip()]:
        if name == "digits":
            H, X, y = load_digit_histograms()
        elif name == "bow":
            H, X, y = make_bow_corpus(args.words, 32, 10, args.docs, seed=args.seed)
        else:
            ap.error(f"unknown data set {name!r}; choose from digits, bow")
        results += evaluate(name, H, X, y, args)
    header = ["data", "method", "queries", "kNN acc", "recall@10", "Spearman", "s/query"]
    header += ["x exact", "setup s"]
    rows = [
        [
            r["data"],
            r["method"],
            str(r["queries"]),
            f"{r['knn_acc']:.3f}",
            f"{r['recall10']:.3f}",
            f"{r['spearman']:.3f}",
            f"{r['s_per_query']:.2e}",
            f"{r['vs_exact']:.3g}",
            f"{r['setup_s']:.2f}",
        ]
        for r in results
    ]
    print_table(f"kNN (k = {args.k}) and retrieval against exact W1", header, rows)
    for name in sorted({r["data"] for r in results}):
        sub = [r for r in results if r["data"] == name]
        write_csv(out / f"retrieval_{name}.csv", list(sub[0]), [list(r.values()) for r in sub])
    (out / "retrieval.json").write_text(
        json.dumps({"settings": settings, "rows": results}, indent=2)
    )
    plot(results, out / "retrieval.png")
    print(f"\nresults written to {out.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
