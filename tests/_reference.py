"""Independent oracles for the tests: explicit tree metrics solved by POT's exact LP.

Nothing here calls the library's closed forms: tree metrics are built as weighted
graphs and their path lengths come from scipy's shortest-path routine. The random
problems and per-tree oracles that several test files share (a tree of lines given by
its sources and directions, the Db-TSW split, the maps of SpatialTSW) are written here
in numpy, once.
"""

from __future__ import annotations

import itertools
import re
from fractions import Fraction

import numpy as np
import ot
import scipy.stats
import torch
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


# --------------------------------------------------------------------------- Sobolev oracles


def line_system_tree(coords, attachments=None):
    """The tree of a line system written out as a parent array.

    Each line gets one node per atom, a node at its coordinate 0 and, for a chain, a node
    at ``attachments[line + 1]`` where the next line hangs. Along a line a node's parent
    is its neighbour towards coordinate 0. The zero node of line 0 is the root; the zero
    node of line ``l >= 1`` hangs (length 0) from the root (concurrent lines) or from the
    attachment node on line ``l - 1`` (chain).

    Returns
    -------
    parents : int array (V,), -1 at the root
    lengths : array (V,), length of the edge to the parent (0 at the root)
    atom_nodes : int array (k, n), node of atom j on line l
    """
    coords = np.asarray(coords, dtype=np.float64)
    k, n = coords.shape
    parents, lengths = [], []
    atom_nodes = np.zeros((k, n), dtype=int)
    zero_node = np.zeros(k, dtype=int)
    att_node = np.zeros(k, dtype=int)
    for line in range(k):
        pts = list(coords[line])
        if attachments is not None and line + 1 < k:
            pts.append(float(attachments[line + 1]))
            att_node[line + 1] = len(parents) + n
        base, zero = len(parents), len(parents) + len(pts)
        parents += [-1] * (len(pts) + 1)
        lengths += [0.0] * (len(pts) + 1)
        for on_side in (lambda t: t >= 0, lambda t: t < 0):
            prev, prev_t = zero, 0.0
            for i in sorted(
                (i for i, t in enumerate(pts) if on_side(t)), key=lambda i: abs(pts[i])
            ):
                parents[base + i], lengths[base + i] = prev, abs(pts[i] - prev_t)
                prev, prev_t = base + i, pts[i]
        atom_nodes[line] = np.arange(base, base + n)
        zero_node[line] = zero
    for line in range(1, k):
        parents[zero_node[line]] = zero_node[0] if attachments is None else att_node[line]
    return np.array(parents), np.array(lengths), atom_nodes


def subtree_members(parents):
    """Node list of every subtree Γ(v), found by walking from each node up to the root."""
    members = [[] for _ in parents]
    for u in range(len(parents)):
        v = u
        while v != -1:
            members[v].append(u)
            v = parents[v]
    return members


def sobolev_cost_on_tree(parents, lengths, signed_mass, p):
    """Σ_{v ≠ root} lengths[v] · |Σ_{u ∈ Γ(v)} signed_mass[u]|^p (no 1/p root)."""
    signed_mass = np.asarray(signed_mass, dtype=np.float64)
    return sum(
        lengths[v] * abs(signed_mass[members].sum()) ** p
        for v, members in enumerate(subtree_members(parents))
        if parents[v] != -1
    )


def sobolev_cost_exact(parents, lengths, signed_mass, p=1):
    """:func:`sobolev_cost_on_tree` in rational arithmetic (integer ``p``): no rounding.

    Every float is read exactly (``Fraction``; ``signed_mass`` may hold fractions) and
    the subtree masses are summed exactly, so the value is the mathematics' on the given
    floats: the reference for inputs whose rounding an implementation must not let
    through (small masses beside large ones). Returns a ``Fraction``.
    """
    mass = [m if isinstance(m, Fraction) else Fraction(float(m)) for m in signed_mass]
    total = Fraction(0)
    for v, members in enumerate(subtree_members(parents)):
        if parents[v] != -1:
            beyond = sum((mass[u] for u in members), Fraction(0))
            total += Fraction(float(lengths[v])) * abs(beyond) ** p
    return total


def line_system_exact(coords, signed_mass, attachments=None, p=1):
    """:func:`line_system_sobolev` in rational arithmetic (:func:`sobolev_cost_exact`)."""
    parents, lengths, atom_nodes = line_system_tree(coords, attachments)
    node_mass = [Fraction(0)] * len(parents)
    masses = np.asarray(signed_mass, dtype=np.float64).reshape(-1)
    for node, m in zip(atom_nodes.reshape(-1), masses, strict=True):
        node_mass[node] += Fraction(float(m))
    return sobolev_cost_exact(parents, lengths, node_mass, p)


def line_system_sobolev(coords, signed_mass, attachments=None, p=1):
    """Σ_e w_e |signed mass beyond e|^p on a line system, through its explicit tree."""
    parents, lengths, atom_nodes = line_system_tree(coords, attachments)
    node_mass = np.zeros(len(parents))
    np.add.at(node_mass, atom_nodes.reshape(-1), np.asarray(signed_mass, float).reshape(-1))
    return sobolev_cost_on_tree(parents, lengths, node_mass, p)


def star_sobolev(coords, signed_mass, p=1):
    """The same sum on concurrent lines, edge by edge from the sorted breakpoints.

    On each line the breakpoints are the atoms' coordinates and the root 0. An edge
    [u, v] left of the root carries the mass at coordinates <= u (a prefix); one right of
    the root carries the mass at coordinates >= v (a suffix).
    """
    total = 0.0
    for c, m in zip(np.asarray(coords, float), np.asarray(signed_mass, float), strict=True):
        pts = np.sort(np.append(c, 0.0))
        for u, v in itertools.pairwise(pts):
            beyond = m[c <= u].sum() if v <= 0 else m[c >= v].sum()
            total += (v - u) * abs(beyond) ** p
    return total


# --------------------------------------------------------------------------- stars of rays


def ray_star_metric(coords):
    """Path lengths between atoms on a star of k rays joined at their origin.

    coords (k, n), all >= 0: node (l, j) sits at distance coords[l, j] from the centre
    on ray l. Two nodes on the same ray are |t - t'| apart, on different rays t + t'
    (through the centre). Flattened ray-major, shape (k n, k n).
    """
    c = np.asarray(coords, dtype=np.float64)
    assert np.all(c >= 0), "atoms on rays have non-negative coordinates"
    k, n = c.shape
    t = c.reshape(-1)
    ray = np.repeat(np.arange(k), n)
    same = ray[:, None] == ray[None, :]
    return np.where(same, np.abs(t[:, None] - t[None, :]), t[:, None] + t[None, :])


def emd_on_rays(coords_s, coords_t, mass_s, mass_t):
    """Exact W1 between masses on a star of rays (POT's network simplex).

    coords_s (k, N), coords_t (k, M) >= 0; mass_s (k, N), mass_t (k, M) non-negative
    with equal totals (rays need not balance one by one).
    """
    coords_s = np.asarray(coords_s, dtype=np.float64)
    coords_t = np.asarray(coords_t, dtype=np.float64)
    k, N = coords_s.shape
    D = ray_star_metric(np.concatenate([coords_s, coords_t], axis=1))
    n = N + coords_t.shape[1]
    sel_s = np.array([line * n + j for line in range(k) for j in range(N)])
    sel_t = np.array([line * n + j for line in range(k) for j in range(N, n)])
    a = np.asarray(mass_s, dtype=np.float64).reshape(-1)
    b = np.asarray(mass_t, dtype=np.float64).reshape(-1)
    b = b * a.sum() / b.sum()  # guard rounding
    return float(ot.emd2(a, b, D[np.ix_(sel_s, sel_t)], numItermax=10**7))


# --------------------------------------------------------------------------- unequal masses


def star_metric_with_root(coords, price=0.0):
    """Path lengths on concurrent lines between the atoms and one extra node.

    The extra node is the root (``price == 0``) or a point hanging from the root by an
    edge of length ``price``. It is the last row/column of the returned matrix, after the
    atoms flattened line-major as in :func:`line_system_metric`.
    """
    coords = np.asarray(coords, dtype=np.float64)
    k, n = coords.shape
    with_root = np.concatenate([coords, np.zeros((k, 1))], axis=1)  # root: coordinate 0
    D = line_system_metric(with_root, None)
    nodes = np.array([line * (n + 1) + j for line in range(k) for j in range(n)])
    root = n  # node (0, n): coordinate 0 on line 0
    out = np.zeros((k * n + 1, k * n + 1))
    out[:-1, :-1] = D[np.ix_(nodes, nodes)]
    out[:-1, -1] = out[-1, :-1] = D[nodes, root] + price
    return out


def emd_with_deficit_at_root(coords_s, coords_t, mass_s, mass_t, price=0.0):
    """Balanced EMD after the lighter side receives the mass difference at the root.

    coords_s (k, N), coords_t (k, M): coordinates on concurrent lines; mass_s (k, N),
    mass_t (k, M): non-negative masses whose totals may differ. ``price`` moves the
    deficit to a point at that distance from the root.
    """
    coords_s = np.asarray(coords_s, dtype=np.float64)
    coords_t = np.asarray(coords_t, dtype=np.float64)
    k, N = coords_s.shape
    D = star_metric_with_root(np.concatenate([coords_s, coords_t], axis=1), price)
    n = N + coords_t.shape[1]
    sel_s = [line * n + j for line in range(k) for j in range(N)] + [k * n]
    sel_t = [line * n + N + j for line in range(k) for j in range(n - N)] + [k * n]
    a = np.asarray(mass_s, dtype=np.float64).reshape(-1)
    b = np.asarray(mass_t, dtype=np.float64).reshape(-1)
    gap = a.sum() - b.sum()
    a = np.append(a, max(-gap, 0.0))
    b = np.append(b, max(gap, 0.0))
    b = b * a.sum() / b.sum()  # guard rounding
    return float(ot.emd2(a, b, D[np.ix_(sel_s, sel_t)], numItermax=10**7))


def gkr_lp(D, mu, nu, price_mu, price_nu):
    """Generalised Kantorovich-Rubinstein distance by linear programming (scipy HiGHS).

    min_{pi >= 0, pi 1 <= mu, pi^T 1 <= nu} <D, pi> + <price_mu, mu - pi 1>
    + <price_nu, nu - pi^T 1>: mass of mu left untransported is destroyed at a price per
    unit, mass of nu not covered is created at a price per unit (Sato et al. 2020).
    """
    from scipy.optimize import linprog

    D = np.asarray(D, dtype=np.float64)
    mu, nu = np.asarray(mu, float), np.asarray(nu, float)
    pm, pn = np.asarray(price_mu, float), np.asarray(price_nu, float)
    n, m = D.shape
    cost = (D - pm[:, None] - pn[None, :]).reshape(-1)
    rows = np.zeros((n + m, n * m))
    for i in range(n):
        rows[i, i * m : (i + 1) * m] = 1.0
    for j in range(m):
        rows[n + j, j::m] = 1.0
    res = linprog(cost, A_ub=rows, b_ub=np.concatenate([mu, nu]), bounds=(0, None), method="highs")
    assert res.status == 0, res.message
    return float(res.fun + pm @ mu + pn @ nu)


# --------------------------------------------------------------------------- test helpers

#: tolerance of the exactness tests (float64)
TOL = 1e-10


def assert_close(actual, expected, tol=TOL):
    """|actual - expected| <= tol * max(1, |expected|), elementwise (float64 numpy)."""
    actual = np.asarray(torch.as_tensor(actual).detach(), dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    err = np.abs(actual - expected)
    bound = tol * np.maximum(1.0, np.abs(expected))
    assert np.all(err <= bound), f"max error {err.max():.3e}: got {actual}, expected {expected}"


def t64(x):
    """A float64 tensor of ``x``."""
    return torch.as_tensor(np.asarray(x), dtype=torch.float64)


def weights(rng, shape, zero_prob=0.0):
    """Random non-negative weights summing to 1 on the last axis, some entries zero."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    w = rng.exponential(size=shape) * (rng.random(shape) >= zero_prob)
    rows = w.reshape(-1, shape[-1])
    rows[rows.sum(-1) == 0, rng.integers(shape[-1])] = 1.0
    return w / w.sum(-1, keepdims=True)


def unit_rows(rng, k, d, orthogonal=False):
    """k unit vectors of R^d, i.i.d. uniform or orthonormal (k <= d)."""
    g = rng.normal(size=(d, k))
    if orthogonal:
        return np.linalg.qr(g)[0].T
    return (g / np.linalg.norm(g, axis=0, keepdims=True)).T


# --------------------------------------------------------------------------- problems and oracles
# Random problems and per-tree oracles shared by the method files: coordinates and
# splits recomputed in numpy, EMD on the explicit tree or the Sobolev sum edge by edge.


def distinct_sizes(rng, low=1, high=8):
    n = int(rng.integers(low, high + 1))
    m = int(rng.choice([v for v in range(low, high + 1) if v != n]))
    return n, m


def random_problem(rng, d, n, m, zero_prob=0.0, spread=1.0):
    """Supports X (n, d), Y (m, d) and non-uniform weights a, b."""
    X = rng.normal(size=(n, d)) * spread
    Y = rng.normal(size=(m, d)) * spread + rng.normal(size=d)
    return X, Y, weights(rng, (n,), zero_prob), weights(rng, (m,), zero_prob)


def random_chain(rng, k, d):
    """Sources (k, d) and directions (k, d) of a chain: s_i = s_{i-1} + t_i theta_{i-1}."""
    dirs = unit_rows(rng, k, d)
    sources = np.empty((k, d))
    sources[0] = rng.normal(size=d)
    for i in range(1, k):
        sources[i] = sources[i - 1] + rng.uniform(-1.5, 1.5) * dirs[i - 1]
    return sources, dirs


def chain_attachments(sources, dirs):
    """t_i = <s_i - s_{i-1}, theta_{i-1}>, 0 for the first line."""
    t = np.einsum("id,id->i", sources[1:] - sources[:-1], dirs[:-1])
    return np.concatenate([[0.0], t])


def line_coords(Z, sources, dirs):
    """<z - s_l, theta_l>, shape (k, n)."""
    return np.einsum("lnd,ld->ln", Z[None] - sources[:, None], dirs)


def distance_split(Z, root, dirs, delta):
    """Db-TSW split softmax_l(-delta * dist(z, line l)), shape (k, n)."""
    rel = Z - root
    t = rel @ dirs.T  # (n, k)
    dist = np.linalg.norm(rel[:, None, :] - t[:, :, None] * dirs[None], axis=-1)
    logits = -delta * dist
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).T


def tree_oracle(X, Y, a, b, sources, dirs, *, chain, p=1, delta=None, alpha=None):
    """Per-tree cost: EMD on the explicit tree (p = 1) or the Sobolev sum (p > 1).

    ``delta`` selects the distance split (concurrent lines), else the constant split
    ``alpha`` (uniform when None).
    """
    k = dirs.shape[0]
    cx, cy = line_coords(X, sources, dirs), line_coords(Y, sources, dirs)
    if delta is not None:
        sx, sy = (
            distance_split(X, sources[0], dirs, delta),
            distance_split(Y, sources[0], dirs, delta),
        )
    else:
        col = np.full((k, 1), 1.0 / k) if alpha is None else np.asarray(alpha)[:, None]
        sx, sy = col, col
    mx, my = a * sx, b * sy
    att = chain_attachments(sources, dirs) if chain else None
    if p == 1:
        return emd_on_lines(cx, cy, mx, my, att)
    coords, signed = np.concatenate([cx, cy], 1), np.concatenate([mx, -my], 1)
    return line_system_sobolev(coords, signed, att, p) if chain else star_sobolev(coords, signed, p)


def star_oracle(X, Y, a, b, root, dirs, **kwargs):
    """:func:`tree_oracle` on concurrent lines through ``root`` (d,)."""
    sources = np.repeat(np.asarray(root)[None], len(dirs), axis=0)
    return tree_oracle(X, Y, a, b, sources, dirs, chain=False, **kwargs)


def star_trees(rng, T, k, d, orthogonal=False):
    """Roots (T, d) and directions (T, k, d) of T concurrent-line trees."""
    dirs = np.stack([unit_rows(rng, k, d, orthogonal) for _ in range(T)])
    return rng.normal(size=(T, d)), dirs


def w1_1d(u, v, a, b):
    """Independent 1-D W1 (scipy)."""
    return scipy.stats.wasserstein_distance(u, v, a, b)


def mean_root(per_tree, p):
    return np.mean(per_tree, axis=-1) ** (1 / p)


def random_line_system(rng, B, k, n, ties):
    """Coordinates (B, k, n), signed masses with zero total, chain attachments (B, k)."""
    coords = rng.normal(size=(B, k, n)) * 1.5
    att = rng.uniform(-1.5, 1.5, size=(B, k))
    if ties:  # a coarse grid: repeated coordinates, atoms at 0 and on attachment points
        coords, att = np.round(coords * 2) / 2, np.round(att * 2) / 2
    masses = rng.normal(size=(B, k, n)) * (rng.random((B, k, n)) > 0.2)
    for mb in masses:  # zero total over the tree, not per line
        j = rng.integers(k), rng.integers(n)
        mb[j] -= mb.sum()
    return coords, masses, att


# the maps of SpatialTSW, written in numpy


def np_pow(X, degree, beta):
    return X + beta * X**degree


def np_poly(X, degree):
    """Monomials x^alpha for every exponent vector |alpha| = degree (any fixed order)."""
    d = X.shape[-1]
    exps = [e for e in itertools.product(range(degree + 1), repeat=d) if sum(e) == degree]
    return np.stack([np.prod(X ** np.array(e), axis=-1) for e in exps], axis=-1), exps


def lit(text):
    """Regex matching ``text`` literally."""
    return re.escape(text)


def data(N=5, M=4, d=3, batch=None, dtype=torch.float64):
    """A seeded pair of Gaussian supports, the target shifted by 1 (float64 draws)."""
    g = torch.Generator().manual_seed(0)
    lead = () if batch is None else (batch,)
    X = torch.randn(*lead, N, d, generator=g, dtype=torch.float64).to(dtype)
    Y = torch.randn(*lead, M, d, generator=g, dtype=torch.float64).to(dtype) + 1
    return X, Y


def random_tree(rng, V):
    """Parent array of a random recursive tree in random labels (its root any node)."""
    perm = rng.permutation(V)
    parents = np.full(V, -1)
    for i in range(1, V):
        parents[perm[i]] = perm[rng.integers(i)]
    return parents
