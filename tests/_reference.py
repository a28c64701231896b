"""Independent oracles for the tests: explicit tree metrics solved by POT's exact LP.

Nothing here calls the library's closed forms: tree metrics are built as weighted
graphs and their path lengths come from scipy's shortest-path routine.
"""

from __future__ import annotations

import itertools

import numpy as np
import ot
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import shortest_path


def line_system_metric(coords, attachments=None):
    """Path-length matrix between atoms placed on a system of lines.

    Parameters
    ----------
    coords : array (k, n)
        Coordinate of atom j on line l (every atom is placed on every line: the node
        (l, j)).
    attachments : array (k,) or None
        None: concurrent lines glued at their coordinate 0. Otherwise line i's
        coordinate 0 is glued to coordinate attachments[i] of line i-1.

    Returns
    -------
    D : array (k * n, k * n)
        Tree distances between nodes (l, j), flattened line-major.
    """
    coords = np.asarray(coords, dtype=np.float64)
    k, n = coords.shape
    node_pos = []  # (line, coordinate) of every graph node
    atom_nodes = np.zeros((k, n), dtype=int)
    zero_node = np.zeros(k, dtype=int)
    att_node = np.zeros(k, dtype=int)  # node on line i-1 where line i attaches
    edges = []
    for line in range(k):
        base = len(node_pos)
        pts = [*list(coords[line]), 0.0]
        if attachments is not None and line + 1 < k:
            pts.append(float(attachments[line + 1]))
        for t in pts:
            node_pos.append((line, t))
        idx = np.arange(base, base + len(pts))
        atom_nodes[line] = idx[:n]
        zero_node[line] = idx[n]
        if attachments is not None and line + 1 < k:
            att_node[line + 1] = idx[n + 1]
        order = np.argsort(np.array(pts), kind="stable")
        for u, v in itertools.pairwise(order):
            edges.append((idx[u], idx[v], abs(pts[v] - pts[u])))
    # glue
    for line in range(1, k):
        target = zero_node[0] if attachments is None else att_node[line]
        edges.append((zero_node[line], target, 0.0))
    m = len(node_pos)
    rows = [e[0] for e in edges] + [e[1] for e in edges]
    cols = [e[1] for e in edges] + [e[0] for e in edges]
    # zero-length edges are dropped by sparse graphs: use a tiny positive then fix
    vals = [max(e[2], 1e-300) for e in edges] * 2
    G = coo_matrix((vals, (rows, cols)), shape=(m, m)).tocsr()
    D = shortest_path(G, method="D", directed=False)
    flat = atom_nodes.reshape(-1)
    return D[np.ix_(flat, flat)]


def emd_on_lines(coords_s, coords_t, mass_s, mass_t, attachments=None):
    """Exact W1 between masses on a line system (POT's network simplex).

    coords_s (k, N), coords_t (k, M): coordinates of the source / target atoms on each
    line; mass_s (k, N), mass_t (k, M): non-negative masses (totals equal overall).
    """
    coords_s = np.asarray(coords_s, dtype=np.float64)
    coords_t = np.asarray(coords_t, dtype=np.float64)
    k, N = coords_s.shape
    coords = np.concatenate([coords_s, coords_t], axis=1)
    D = line_system_metric(coords, attachments)
    n = coords.shape[1]
    sel_s = np.array([line * n + j for line in range(k) for j in range(N)])
    sel_t = np.array([line * n + N + j for line in range(k) for j in range(coords_t.shape[1])])
    a = np.asarray(mass_s, dtype=np.float64).reshape(-1)
    b = np.asarray(mass_t, dtype=np.float64).reshape(-1)
    b = b * a.sum() / b.sum()  # guard rounding
    return float(ot.emd2(a, b, D[np.ix_(sel_s, sel_t)], numItermax=10**7))


def tree_metric_from_parents(parents, lengths):
    """All-pairs path lengths of a rooted tree given by a parent array."""
    parents = np.asarray(parents)
    n = len(parents)
    rows, cols, vals = [], [], []
    for v, u in enumerate(parents):
        if u >= 0:
            rows += [v, u]
            cols += [u, v]
            vals += [max(float(lengths[v]), 1e-300)] * 2
    G = coo_matrix((vals, (rows, cols)), shape=(n, n)).tocsr()
    return shortest_path(G, method="D", directed=False)
