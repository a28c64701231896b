"""Independent oracles for the trees built from the data: path metrics by scipy, W1 by POT."""

from __future__ import annotations

import numpy as np
import ot
import scipy.sparse as sp
from scipy.sparse.csgraph import shortest_path


def path_metric(tree) -> np.ndarray:
    """(V, V) shortest-path distances on the tree's edges (scipy's Dijkstra, undirected)."""
    par = tree.parents.cpu().numpy()
    w = tree.edge_lengths.detach().double().cpu().numpy()
    V = par.shape[0]
    child = np.flatnonzero(par >= 0)
    # a zero-length edge would read as no edge in a sparse graph: 1e-300 keeps it, and
    # adds nothing visible to a path length
    weights = np.where(w[child] > 0, w[child], 1e-300)
    graph = sp.coo_matrix((weights, (child, par[child])), shape=(V, V)).tocsr()
    return shortest_path(graph, directed=False)


def tree_w1(tree, mass_s: np.ndarray, mass_t: np.ndarray) -> float:
    """Exact W1 between node masses for the tree's path metric, by ot.emd2."""
    D = path_metric(tree)
    i, j = np.flatnonzero(mass_s > 0), np.flatnonzero(mass_t > 0)
    return float(ot.emd2(mass_s[i], mass_t[j], D[np.ix_(i, j)]))
