"""Nearest neighbours under W1: tsw.W1Index's cascade against exact search and its stages.

Histograms on a fixed support, a fixed random subset of ``--queries`` of them as queries
and the others as the database:

* ``digits``: scikit-learn's 8x8 digits (1,797 images), each a histogram of its pixel
  intensities on the 8x8 grid of pixel centres;
* ``bow-N``: the synthetic bag-of-words corpus of ``benchmarks.retrieval``
  (``make_bow_corpus``: 5,000 words in d = 32 around 10 topics, documents of 40-100
  words) with N documents (``--sizes``);
* ``text``: a real text corpus: the paragraphs (20 to 150 words after stop words) of the
  Wikipedia articles shipped in gensim's test data (``enwiki-latest-pages-articles1...
  -shortened.bz2``, no download), each labelled by its article, the words embedded by a
  Word2Vec model trained here on those paragraphs (gensim, 50 dimensions, one worker,
  seeded).

The ground truth is the exact top ``--k`` by W1 (Euclidean ground cost, ``ot.emd2`` on the
two histograms' supports) of every query, found by exact search with lower bounds
(``pruned``: the candidates in increasing order of max(distance between the means,
relaxed W1 of the document side) (Kusner et al. 2015), ``ot.emd2`` until the bound
exceeds the k-th value found: provably the exact top k). Methods (``--methods``):

* ``exact``: brute force, ``ot.emd2`` on every pair (``--brute-queries`` queries; its
  answer is checked against the ground truth);
* ``pruned``: the exact search above, timed on ``--brute-queries`` queries;
* ``sinkhorn``: ``ot.sinkhorn2`` on every pair, reg 0.05 x the largest ground distance
  between the two supports (``--sinkhorn-queries`` queries);
* ``gensim``: gensim's ``KeyedVectors.wmdistance(norm=False)`` on every pair (exact W1 by
  POT from word lists; ``--gensim-queries`` queries), where gensim is installed;
* ``flowtree``: Flowtree alone on the index's trees against every document
  (``--flow-queries`` queries);
* ``tsw``: stage one alone (``W1Index(rerank=None)``: the tree-sliced W of 10 quadtrees
  through the inverted index);
* ``tsw+flowtree``: ``W1Index(rerank="flowtree")``;
* ``cascade``: ``W1Index()`` with its defaults, then with every shortlist of
  ``--sweep`` (``c1:c2`` stage one's shortlist for Flowtree and Flowtree's for exact W1,
  or ``c`` stage one's straight to exact W1).

Metrics: recall@1 and recall@10 of the exact neighbours, k-NN accuracy (majority of the
``--vote`` nearest; the exact row is the ground truth's), seconds per query (the median
over queries, one query a call), its ratio to brute-force exact (the median over the
queries brute force ran of the ratio of the two times, measured in the same run), the
index's ``add`` time and bytes per document, and the largest gap between a returned
distance and the exact W1 of that pair. Output under ``--out``: for each data
set ``search_<data><tag>.json`` and ``.csv`` (``--tag``: a later run with the same tag
replaces them), and ``search.png``, recall@10 against seconds per query of every data
set found there, so that separate runs fill one figure. Ground truths are cached in
``--cache`` (they do not depend on the methods' timings).

``pynndescent`` (opt-in, not in the default ``--methods``): stage one through an
approximate nearest-neighbour graph of the embeddings (pynndescent's ``NNDescent``,
metric manhattan, 30 neighbours) instead of the inverted index: its build time and the
recall of the inverted index's 200 nearest, with the time per query of each.

Example: ``python -m benchmarks.search --data digits,bow,text --sizes 2000,3000``
(``--smoke`` for a few seconds; ``--truth-only`` fills the cache without timing).
"""

from __future__ import annotations

import argparse
import bz2
import json
import platform
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import ot
import scipy.sparse as sp
import torch
from scipy.spatial.distance import cdist

import tsw
from benchmarks._report import prepare, print_table, write_csv
from benchmarks.retrieval import load_digit_histograms, make_bow_corpus

ALL = ("exact", "pruned", "sinkhorn", "gensim", "flowtree", "tsw", "tsw+flowtree", "cascade")
OPT_IN = ("pynndescent",)

# --------------------------------------------------------------------------- data


class Data:
    """A data set: the support (n, d), histograms (N, n) CSR, labels, and word lists."""

    def __init__(
        self,
        name: str,
        X: np.ndarray,
        H: sp.csr_matrix,
        y: np.ndarray,
        docs: list[list[str]] | None = None,
        words: list[str] | None = None,
    ):
        self.name, self.X, self.H, self.y = name, X, sp.csr_matrix(H), y
        self.docs, self.words = docs, words


def digits() -> Data:
    H, X, y = load_digit_histograms()
    return Data("digits", X, sp.csr_matrix(H), y)


def bow(n_docs: int, n_words: int = 5000, seed: int = 0) -> Data:
    H, X, y = make_bow_corpus(n_words, 32, 10, n_docs, seed=seed, sparse=True)
    return Data(f"bow-{n_docs}", X, H, y)


def wiki_paragraphs(min_len: int = 20, max_len: int = 150) -> tuple[list[list[str]], np.ndarray]:
    """The paragraphs of gensim's shortened Wikipedia dump, tokenised, and their article."""
    import gensim
    from gensim.corpora.wikicorpus import extract_pages, filter_wiki
    from gensim.parsing.preprocessing import STOPWORDS
    from gensim.utils import simple_preprocess

    path = Path(gensim.__file__).parent / "test" / "test_data"
    dump = path / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    docs, labels, article = [], [], 0
    with bz2.open(dump) as f:
        pages = list(extract_pages(f))
    for _title, text, _pid in pages:
        if not text or text.lower().startswith("#redirect"):
            continue
        for para in re.split(r"\n\s*\n", filter_wiki(text)):
            tokens = [
                t for t in simple_preprocess(para, min_len=2, max_len=20) if t not in STOPWORDS
            ]
            if min_len <= len(tokens) <= max_len:
                docs.append(tokens)
                labels.append(article)
        article += 1
    return docs, np.array(labels)


def text(cache: Path, dim: int = 50) -> Data:
    """The Wikipedia paragraphs with locally trained Word2Vec vectors (cached)."""
    path = cache / f"text_{dim}.npz"
    docs, labels = wiki_paragraphs()
    if path.exists():
        z = np.load(path, allow_pickle=False)
        words, X = list(z["words"]), z["vectors"]
    else:
        from gensim.models import Word2Vec

        model = Word2Vec(docs, vector_size=dim, window=5, min_count=3, workers=1, seed=0, epochs=20)
        words = list(model.wv.index_to_key)
        X = np.asarray(model.wv.vectors, dtype=np.float64)
        np.savez(path, words=np.array(words), vectors=X)
    index = {w: i for i, w in enumerate(words)}
    kept, rows, cols, vals, y = [], [], [], [], []
    for doc, label in zip(docs, labels, strict=True):
        ids = [index[w] for w in doc if w in index]
        if len(ids) < 10:
            continue
        u, c = np.unique(ids, return_counts=True)
        rows.append(np.full(u.size, len(kept)))
        cols.append(u)
        vals.append(c / c.sum())
        kept.append([words[i] for i in ids])
        y.append(label)
    H = sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(len(kept), len(words)),
    )
    return Data("text", X, H, np.array(y), docs=kept, words=words)


# --------------------------------------------------------------------------- exact


def _row(H: sp.csr_matrix, j: int) -> tuple[np.ndarray, np.ndarray]:
    s, e = H.indptr[j], H.indptr[j + 1]
    return H.indices[s:e], H.data[s:e]


def emd_pair(X: np.ndarray, q: tuple, x: tuple) -> float:
    """Exact W1 between two sparse histograms: ot.emd2 on their supports (Euclidean)."""
    return float(ot.emd2(q[1], x[1], cdist(X[q[0]], X[x[0]]), check_marginals=False))


def brute(X: np.ndarray, DB: sp.csr_matrix, q: tuple, pair: Callable) -> np.ndarray:
    """A pair function on the query and every document."""
    return np.array([pair(X, q, _row(DB, j)) for j in range(DB.shape[0])])


def pruned_exact(
    X: np.ndarray, DB: sp.csr_matrix, q: tuple, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The exact top k (values, rows) by exact search with lower bounds of W1.

    Bounds: the distance between the two means (Jensen) and the document side of the
    relaxed W1 (each document word to its nearest query word; Kusner et al. 2015).
    """
    means = np.asarray(DB @ X) / np.asarray(DB.sum(1))
    qm = q[1] @ X[q[0]] / q[1].sum()
    nearest = cdist(X, X[q[0]]).min(1)
    bound = np.maximum(np.sqrt(((means - qm) ** 2).sum(1)), DB @ nearest)
    found: list[tuple[float, int]] = []
    for j in np.argsort(bound, kind="stable"):
        if len(found) == k and bound[j] * (1 - 1e-9) > found[-1][0]:
            break
        found.append((emd_pair(X, q, _row(DB, int(j))), int(j)))
        found = sorted(found)[:k]
    return np.array([v for v, _ in found]), np.array([j for _, j in found])


def sinkhorn_pair(X: np.ndarray, q: tuple, x: tuple, reg: float = 0.05) -> float:
    M = cdist(X[q[0]], X[x[0]])
    return float(ot.sinkhorn2(q[1], x[1], M, reg * M.max(), numItermax=1000, stopThr=1e-6))


def token_lists(H: sp.csr_matrix, names: list[str], max_len: int = 2000) -> list[list[str]]:
    """Each histogram as a word list whose counts are proportional to its masses."""
    out = []
    for j in range(H.shape[0]):
        idx, val = _row(H, j)
        for L in range(1, max_len + 1):  # the smallest length giving whole counts
            c = val * L
            if np.abs(c - np.round(c)).max() < 1e-6 * L:
                break
        out.append(
            [names[i] for i, n in zip(idx, np.round(c).astype(int), strict=True) for _ in range(n)]
        )
    return out


# --------------------------------------------------------------------------- metrics


def recall(found: np.ndarray, truth: np.ndarray, k: int) -> float:
    return float(
        np.mean([len(set(a[:k]) & set(b[:k])) / k for a, b in zip(found, truth, strict=True)])
    )


def knn_acc(found: np.ndarray, y_q: np.ndarray, y_db: np.ndarray, vote: int) -> float:
    votes = [np.bincount(y_db[r[:vote]], minlength=int(y_db.max()) + 1) for r in found]
    return float(np.mean([v.argmax() == t for v, t in zip(votes, y_q, strict=True)]))


def truth_of(data: Data, q_idx: np.ndarray, db_idx: np.ndarray, k: int, cache: Path) -> dict:
    """The exact top k of every query (cached) and the pruned search's time per query."""
    key = f"truth_{data.name}_{len(q_idx)}_{len(db_idx)}_{k}_{int(q_idx.sum())}.npz"
    path = cache / key
    if path.exists():
        z = np.load(path)
        return {"D": z["D"], "I": z["I"], "times": list(z["times"])}
    DB = data.H[db_idx]
    D, ids, times = [], [], []
    for i in q_idx:
        t0 = time.perf_counter()
        d, j = pruned_exact(data.X, DB, _row(data.H, int(i)), k)
        times.append(time.perf_counter() - t0)
        D.append(d)
        ids.append(j)
    out = {"D": np.array(D), "I": np.array(ids), "times": times}
    np.savez(path, **out)
    return out


# --------------------------------------------------------------------------- runs


def per_query(fn: Callable[[int], tuple[np.ndarray, np.ndarray]], queries: np.ndarray):
    """Run ``fn`` on each query; return its answers and the seconds of each call."""
    D, ids, times = [], [], []
    for i in queries:
        t0 = time.perf_counter()
        d, j = fn(int(i))
        times.append(time.perf_counter() - t0)
        D.append(d)
        ids.append(j)
    return np.array(D), np.array(ids), times


def evaluate(data: Data, args: argparse.Namespace, cache: Path) -> list[dict]:
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(data.H.shape[0])
    q_idx, db_idx = order[: args.queries], order[args.queries :]
    DB, k = data.H[db_idx], args.k
    y_q, y_db = data.y[q_idx], data.y[db_idx]
    truth = truth_of(data, q_idx, db_idx, k, cache)
    if args.truth_only:
        return []
    rows: list[dict] = []
    brute_times: list[float] = []  # brute force's seconds on each of the first queries

    def record(key: str, label: str, D, ids, times, n, **extra) -> dict:
        gap = np.nan
        if D is not None and key not in ("tsw", "tsw+flowtree", "flowtree", "sinkhorn"):
            ref = {
                (a, int(b)): v
                for a, (ds, js) in enumerate(zip(truth["D"][:n], truth["I"][:n], strict=True))
                for v, b in zip(ds, js, strict=True)
            }
            gaps = [
                abs(v - ref[(a, int(b))])
                for a in range(n)
                for v, b in zip(D[a], ids[a], strict=True)
                if (a, int(b)) in ref
            ]
            gap = max(gaps) if gaps else np.nan
        row = {
            "data": data.name,
            "key": key,
            "method": label,
            "queries": n,
            "database": DB.shape[0],
            "recall1": recall(ids, truth["I"][:n], 1),
            "recall10": recall(ids, truth["I"][:n], min(10, k)),
            "knn_acc": knn_acc(ids, y_q[:n], y_db, args.vote),
            "s_per_query": statistics.median(times),
            "s_mean": statistics.mean(times),
            "max_gap": gap,
            **extra,
        }
        m = min(len(times), len(brute_times))
        if m:  # the median over the queries both ran of the ratio of their times
            row["vs_exact"] = float(np.median(np.array(times[:m]) / np.array(brute_times[:m])))
        rows.append(row)
        print(
            f"  {data.name} {label}: recall@10 {row['recall10']:.3f}, "
            f"{row['s_per_query']:.4f} s/query",
            flush=True,
        )
        return row

    rows.append(
        {
            "data": data.name,
            "key": "truth",
            "method": "exact top-k (ground truth)",
            "queries": len(q_idx),
            "database": DB.shape[0],
            "recall1": 1.0,
            "recall10": 1.0,
            "knn_acc": knn_acc(truth["I"], y_q, y_db, args.vote),
            "s_per_query": np.nan,
            "s_mean": np.nan,
            "max_gap": 0.0,
        }
    )
    X = data.X
    methods = args.methods
    if "exact" in methods:
        n = min(args.brute_queries, len(q_idx))

        def exact_one(i: int):
            v = brute(X, DB, _row(data.H, i), emd_pair)
            j = np.argsort(v, kind="stable")[:k]
            return v[j], j

        D, ids, times = per_query(exact_one, q_idx[:n])
        if not np.array_equal(ids, truth["I"][:n]):
            raise AssertionError("brute force and the pruned exact search disagree")
        brute_times[:] = times
        record("exact", "exact W1, brute force (ot.emd2)", D, ids, times, n)
    if "pruned" in methods:  # timed again here, beside the others (the cache may be older)
        n = min(args.brute_queries, len(q_idx))
        D, ids, times = per_query(lambda i: pruned_exact(X, DB, _row(data.H, i), k), q_idx[:n])
        if not np.array_equal(ids, truth["I"][:n]):
            raise AssertionError("the pruned exact search is not deterministic")
        record("pruned", "exact W1, lower-bound pruned", D, ids, times, n)
    if "sinkhorn" in methods and args.sinkhorn_queries:
        n = min(args.sinkhorn_queries, len(q_idx))

        def sink_one(i: int):
            v = brute(X, DB, _row(data.H, i), sinkhorn_pair)
            j = np.argsort(v, kind="stable")[:k]
            return v[j], j

        record("sinkhorn", "Sinkhorn (ot.sinkhorn2)", *per_query(sink_one, q_idx[:n]), n)
    if "gensim" in methods and args.gensim_queries:
        try:
            from gensim.models import KeyedVectors
        except ImportError:
            print("  gensim is not installed: no gensim row")
        else:
            names = data.words or [f"w{i}" for i in range(X.shape[0])]
            kv = KeyedVectors(X.shape[1])
            kv.add_vectors(names, X)
            docs = token_lists(data.H, names)
            n = min(args.gensim_queries, len(q_idx))

            def gensim_one(i: int):
                v = np.array([kv.wmdistance(docs[i], docs[j], norm=False) for j in db_idx])
                j = np.argsort(v, kind="stable")[:k]
                return v[j], j

            record("gensim", "gensim wmdistance (norm=False)", *per_query(gensim_one, q_idx[:n]), n)
    support = torch.from_numpy(X)

    def run_index(key: str, label: str, **options) -> dict:
        t0 = time.perf_counter()
        index = tsw.W1Index(support, seed=args.seed, **options)
        index.add(DB)
        add_s = time.perf_counter() - t0
        index.search(data.H[q_idx[:1]], k)  # loads what the first call compiles: not timed

        def one(i: int) -> tuple[np.ndarray, np.ndarray]:
            d, j = index.search(data.H[i], k)  # a (1, n) sparse row: (1, k) answers
            return d[0], j[0]

        D, ids, times = per_query(one, q_idx)
        return record(
            key,
            label,
            D,
            ids,
            times,
            len(q_idx),
            add_s=add_s,
            bytes_per_doc=index.nbytes / DB.shape[0],
        )

    if "flowtree" in methods and args.flow_queries:
        from tsw.support._flowmatch import FlowtreeTrees, flowtree_costs

        prep = FlowtreeTrees.of(tsw.sample_quadtrees(support, 10, seed=args.seed))
        csr_db = (DB.indptr.astype(np.int64), DB.indices.astype(np.int64), DB.data)
        n = min(args.flow_queries, len(q_idx))

        def flow_one(i: int):
            q = data.H[i : i + 1]
            v = flowtree_costs(
                prep, (q.indptr.astype(np.int64), q.indices.astype(np.int64), q.data), csr_db
            )[0]
            j = np.argsort(v, kind="stable")[:k]
            return v[j], j

        record("flowtree", "Flowtree alone, 10 quadtrees", *per_query(flow_one, q_idx[:n]), n)
    if "tsw" in methods:
        run_index("tsw", "stage one alone: TSW, 10 quadtrees", rerank=None)
    if "pynndescent" in methods:
        rows.append(ann_stage(data, q_idx, DB, args, support))
    if "tsw+flowtree" in methods:
        run_index("tsw+flowtree", "TSW -> Flowtree (200)", rerank="flowtree")
    if "cascade" in methods:
        run_index("cascade", "W1Index defaults")
        for item in args.sweep:
            run_index(f"cascade {item}", f"W1Index candidates={item}", candidates=item)
    return rows


def ann_stage(
    data: Data,
    q_idx: np.ndarray,
    DB: sp.csr_matrix,
    args: argparse.Namespace,
    support: torch.Tensor,
    c1: int = 200,
) -> dict:
    """Stage one by pynndescent's graph of the embeddings against the inverted index."""
    import pynndescent

    c1 = min(c1, DB.shape[0] // 2)
    trees = tsw.sample_quadtrees(support, 10, seed=args.seed)
    Z = tsw.tree_embedding(DB, trees).tocsr()
    Zq = tsw.tree_embedding(data.H[q_idx], trees).tocsr()
    t0 = time.perf_counter()
    graph = pynndescent.NNDescent(
        Z, metric="manhattan", n_neighbors=30, random_state=args.seed, n_jobs=1
    )
    graph.prepare()
    build_s = time.perf_counter() - t0
    index = tsw.W1Index(support, seed=args.seed, rerank=None)
    t0 = time.perf_counter()
    index.add(DB)
    add_s = time.perf_counter() - t0
    _, ref, inv_times = per_query(lambda i: tuple(a[0] for a in index.search(data.H[i], c1)), q_idx)
    graph.query(Zq[:1], k=c1, epsilon=0.1)  # compiles the query: not timed
    _, ann, ann_times = per_query(
        lambda i: tuple(a[0] for a in graph.query(Zq[i], k=c1, epsilon=0.1)[::-1]),
        np.arange(len(q_idx)),
    )
    row = {
        "data": data.name,
        "key": "pynndescent",
        "queries": len(q_idx),
        "database": DB.shape[0],
        "method": f"stage one by pynndescent (recall of the inverted index's {c1})",
        "recall_of_inverted": recall(ann, ref, c1),
        "build_s": build_s,
        "index_add_s": add_s,
        "s_per_query": statistics.median(ann_times),
        "inverted_s_per_query": statistics.median(inv_times),
    }
    print(
        f"  {data.name} pynndescent: build {build_s:.1f} s (inverted index {add_s:.1f} s), "
        f"{row['s_per_query']:.4f} s/query (inverted index {row['inverted_s_per_query']:.4f}), "
        f"recall {row['recall_of_inverted']:.3f}",
        flush=True,
    )
    return row


def _shortlist(text: str) -> int | tuple[int, int]:
    parts = [int(p) for p in text.split(":")]
    return parts[0] if len(parts) == 1 else (parts[0], parts[1])


#: the marker, colour and legend label of each method in the figure (the same in every panel)
STYLE = {
    "exact": ("X", "black", "exact W1, brute force"),
    "pruned": ("s", "0.5", "exact W1, lower-bound pruned"),
    "sinkhorn": ("^", "tab:purple", "Sinkhorn"),
    "gensim": ("D", "tab:brown", "gensim wmdistance"),
    "flowtree": ("v", "tab:orange", "Flowtree alone"),
    "tsw": ("o", "tab:blue", "stage one alone (TSW)"),
    "tsw+flowtree": ("P", "tab:cyan", "TSW -> Flowtree"),
    "cascade": ("*", "tab:red", "W1Index defaults"),
}


def plot(rows: list[dict], path: Path) -> None:
    """Recall@10 against seconds per query, one panel per data set, one legend for all.

    The shortlists of the sweep are joined by a line (green: stage one, Flowtree and
    exact W1; olive: stage one and exact W1), each labelled with its shortlists.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    first = ["digits", "text"]
    names = sorted(
        {r["data"] for r in rows},
        key=lambda d: (
            d not in first,
            first.index(d) if d in first else 0,
            int(d.split("-")[1]) if "-" in d else 0,
        ),
    )
    cols = min(4, len(names))
    nrows = -(-len(names) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.4 * cols, 3.6 * nrows + 0.6), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        sub = [r for r in rows if r["data"] == name and np.isfinite(r["s_per_query"])]
        for kind, colour in (("pair", "tab:green"), ("one", "tab:olive")):
            sweep = [
                r
                for r in sub
                if r["key"].startswith("cascade ")
                and (r["key"].count(",") == 1) == (kind == "pair")
            ]
            sweep.sort(key=lambda r: r["s_per_query"])
            x = [r["s_per_query"] for r in sweep]
            y = [r["recall10"] for r in sweep]
            ax.plot(x, y, "o-", color=colour, ms=3, lw=1, zorder=1)
            for r in sweep:
                label = r["key"].split(" ", 1)[1].replace("(", "").replace(")", "")
                ax.annotate(
                    label.replace(", ", ":"),
                    (r["s_per_query"], r["recall10"]),
                    fontsize=6,
                    xytext=(3, -8),
                    textcoords="offset points",
                )
        for r in sub:
            if r["key"] in STYLE:
                marker, colour, _ = STYLE[r["key"]]
                ax.scatter(
                    r["s_per_query"],
                    r["recall10"],
                    marker=marker,
                    color=colour,
                    s=90 if marker == "*" else 35,
                    zorder=3,
                )
        ax.set_xscale("log")
        ax.set_xlabel("seconds per query (median)", fontsize=8)
        ax.set_ylabel("recall@10 of exact W1's top 10", fontsize=8)
        ax.set_title(f"{name}: {sub[0]['database']} documents", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    handles = [
        Line2D([], [], marker=m, color=c, ls="", ms=7, label=t) for m, c, t in STYLE.values()
    ]
    handles += [
        Line2D([], [], marker="o", color="tab:green", ms=3, label="W1Index candidates=(c1, c2)"),
        Line2D([], [], marker="o", color="tab:olive", ms=3, label="W1Index candidates=c"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.6 / (3.6 * nrows + 0.6), 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", default="digits,bow,text", help="comma-separated: digits, bow, text")
    ap.add_argument("--sizes", default="2000,3000,20000", help="bow corpus sizes")
    ap.add_argument("--methods", default=",".join(ALL), help="comma-separated keys")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--k", type=int, default=10, help="neighbours returned (recall@k)")
    ap.add_argument("--vote", type=int, default=5, help="neighbours of the k-NN vote")
    ap.add_argument("--brute-queries", type=int, default=5)
    ap.add_argument("--sinkhorn-queries", type=int, default=2)
    ap.add_argument("--gensim-queries", type=int, default=2)
    ap.add_argument("--flow-queries", type=int, default=5)
    ap.add_argument("--sweep", default="50:10,100:20,400:50,800:80,100", help="shortlists")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="benchmarks/out/search")
    ap.add_argument("--cache", default="benchmarks/out/search/cache")
    ap.add_argument("--truth-only", action="store_true", help="compute the ground truths only")
    ap.add_argument("--tag", default="", help="suffix of the output files of this run")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (seconds), for CI")
    args = ap.parse_args(argv)
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in args.methods if m not in ALL + OPT_IN]
    if bad:
        ap.error(f"unknown methods {bad}; choose from {list(ALL + OPT_IN)}")
    args.sweep = [_shortlist(s) for s in args.sweep.split(",") if s.strip()]
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.smoke:
        args.queries, args.brute_queries, args.flow_queries = 3, 2, 2
        args.sinkhorn_queries = args.gensim_queries = 1
        args.sweep, sizes = [(20, 5)], [120]
    out = prepare(args)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    settings = {k: (str(v) if isinstance(v, list) else v) for k, v in vars(args).items()}
    settings["machine"] = platform.processor() or platform.machine()
    rows: list[dict] = []
    for name in [d.strip() for d in args.data.split(",") if d.strip()]:
        if name == "digits":
            sets = [digits()]
        elif name == "bow":
            sets = [bow(n, n_words=300 if args.smoke else 5000) for n in sizes]
        elif name == "text":
            sets = [text(cache)]
        else:
            ap.error(f"unknown data set {name!r}; choose from digits, bow, text")
        for data in sets:
            if args.smoke:
                data = Data(data.name, data.X, data.H[:120], data.y[:120], data.docs, data.words)
            print(
                f"{data.name}: {data.H.shape[0]} histograms on {data.X.shape[0]} points", flush=True
            )
            rows += evaluate(data, args, cache)
    if args.truth_only:
        return 0
    header = [
        "data",
        "method",
        "queries",
        "recall@1",
        "recall@10",
        "kNN acc",
        "s/query",
        "x exact",
        "add s",
        "bytes/doc",
        "max |D - W1|",
    ]
    table = [
        [
            r["data"],
            r["method"],
            str(r["queries"]),
            f"{r['recall1']:.3f}",
            f"{r['recall10']:.3f}",
            f"{r['knn_acc']:.3f}",
            f"{r['s_per_query']:.2e}",
            f"{r.get('vs_exact', np.nan):.3g}",
            f"{r.get('add_s', np.nan):.2f}",
            f"{r.get('bytes_per_doc', np.nan):.0f}",
            f"{r['max_gap']:.1e}",
        ]
        for r in rows
        if r["key"] != "pynndescent"
    ]
    print_table(f"Search under W1 (top {args.k}, k-NN vote of {args.vote})", header, table)
    for name in dict.fromkeys(r["data"] for r in rows):
        sub = [r for r in rows if r["data"] == name]
        columns = list(dict.fromkeys(c for r in sub for c in r))
        write_csv(
            out / f"search_{name}.csv", columns, [[r.get(c, "") for c in columns] for r in sub]
        )
        (out / f"search_{name}{args.tag}.json").write_text(
            json.dumps({"settings": settings, "rows": sub}, indent=2, default=float)
        )
    found = [
        r for f in sorted(out.glob("search_*.json")) for r in json.loads(f.read_text())["rows"]
    ]
    plot([r for r in found if r["key"] != "pynndescent"], out / "search.png")
    print(f"\nresults written to {out.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
