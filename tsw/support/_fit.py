r"""Edge lengths fitted to the ground metric (Yamada et al., TMLR 2022, treeOT).

The tree Wasserstein distance is exact for the tree's path metric, so the closer the
path lengths between support points are to their ground distances, the closer the tree
value is to the Wasserstein distance of the ground metric. With ``z_ij`` the indicator of
the edges on the path between the leaves of points ``i`` and ``j``, the path length is
``z_ij . w``; :func:`fit_edge_lengths` fits ``w >= 0`` to the ground distances of sampled
pairs by a non-negative Lasso, solved in torch by accelerated projected gradient (FISTA
with adaptive restart) and, when the positive edges are few, polished by solving the
least-squares problem on them exactly.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tsw.core._plans import check_metric
from tsw.core._progress import Progress
from tsw.core._random import refuse_tracing, resolve_sampler
from tsw.core._ranges import power_of_two
from tsw.core._validation import check_bool, check_nonnegative_float, check_positive_int
from tsw.support._cluster import row_norms
from tsw.support._flowtree import _Tree
from tsw.support._trees import check_support, check_trees

__all__ = ["fit_edge_lengths"]

#: the most positive edges whose least-squares problem is solved exactly after the
#: iterations (a dense k x k Gram matrix)
POLISH_EDGES = 2048
#: ... and the most entries of their dense (P, k) columns
POLISH_ELEMENTS = 1 << 23


def _pairs(n: int, n_pairs: int, generator: torch.Generator) -> np.ndarray:
    """Every pair ``i < j`` when there are at most ``n_pairs``, else ``n_pairs`` drawn ones."""
    if n * (n - 1) // 2 <= n_pairs:
        i, j = np.triu_indices(n, k=1)
        return np.stack([i, j], axis=1).astype(np.int64)
    first = torch.randint(0, n, (n_pairs,), generator=generator)
    second = torch.randint(0, n - 1, (n_pairs,), generator=generator)
    second = second + (second >= first).long()  # uniform over j != i
    return torch.stack([first, second], dim=1).numpy().astype(np.int64)


def ground_costs(diff: Tensor, metric: str, p: float) -> Tensor:
    """Return the costs ``c(x_i, x_j)`` (P,) of the rows ``x_i - x_j`` of ``diff``.

    Norms formed without overflow or underflow (:func:`row_norms`): a row is exact to
    rounding wherever its cost is representable, at any Minkowski ``p`` (the plain
    ``sum |x|^p`` reads 0 for entries below ``tiny^(1/p)``: 0.24 at ``p = 500`` in
    float64).
    """
    if metric == "sqeuclidean":
        return row_norms(diff, 2.0).square()
    return row_norms(diff, p)


def _range_error(X: Tensor, metric: str, dtype: torch.dtype, way: str) -> ValueError:
    """Return the ``ValueError`` for fitted lengths that leave ``dtype``'s range."""
    wider = " or use torch.float64" if dtype != torch.float64 else ""
    return ValueError(
        f"support has entries of magnitude up to {float(X.abs().amax()):.3g}: in {dtype} "
        f"the fitted lengths (ground costs for metric={metric!r}) {way}. Rescale the data "
        f"(the lengths are in the units of the costs){wider}"
    )


class Paths:
    """The path-indicator operator ``Z`` of sampled pairs on one tree, without forming it.

    With ``h = A w`` the root distances (``A[x, e] = 1`` when edge ``e``, the edge into
    node ``e``, lies on the root path of ``x``), a pair's path length is
    ``h[u] + h[v] - 2 h[lca(u, v)]``; its adjoint adds ``r`` at ``u`` and ``v``, ``-2 r``
    at the lowest common ancestor, then sums each subtree. Both are O(P + V L) gathers
    and scatters in torch, ``L`` the depth; everything is in the tree's topological
    ranks (:class:`tsw.support._flowtree._Tree`) and float64.
    """

    def __init__(self, tree: _Tree, leaves: np.ndarray, pairs: np.ndarray):
        V = tree.size
        anc = tree.ancestors(np.arange(V))  # (V, L) self first, -1 padded
        L = anc.shape[1]
        depth = tree.depth
        # root first: R[x, k] is the ancestor of x at depth k (-1 beyond depth[x])
        at = depth[:, None] - np.arange(L)[None, :]
        valid = at >= 0
        R = np.full((V, L), -1, dtype=np.int64)
        R[np.nonzero(valid)[0], at[valid]] = anc[valid]
        u, v = tree.rank[leaves[pairs[:, 0]]], tree.rank[leaves[pairs[:, 1]]]
        common = (R[u] == R[v]) & (R[u] >= 0)  # a prefix: the common ancestors
        lca = R[u, common.sum(1) - 1]
        self.V, self.L = V, L
        self.root = int(np.flatnonzero(tree.par < 0)[0])
        self.anc = torch.from_numpy(np.where(anc >= 0, anc, V))  # V: a zero pad
        self.ends = torch.from_numpy(np.stack([u, v, lca]))
        self.rank = tree.rank

    def apply(self, w: Tensor) -> Tensor:
        """``Z @ w`` (P,) for edge lengths ``w`` (V,) in ranks (the root's ignored)."""
        w = torch.cat([w, w.new_zeros(1)])
        w[self.root] = 0.0
        h = w.index_select(0, self.anc.reshape(-1)).view(self.V, self.L).sum(1)
        u, v, lca = self.ends  # index_select: advanced indexing took 20x longer here
        return h.index_select(0, u) + h.index_select(0, v) - 2.0 * h.index_select(0, lca)

    def adjoint(self, r: Tensor) -> Tensor:
        """``Z^T @ r`` (V,) for pair values ``r`` (P,)."""
        u, v, lca = self.ends
        c = r.new_zeros(self.V)
        c.index_add_(0, u, r).index_add_(0, v, r).index_add_(0, lca, r, alpha=-2.0)
        g = r.new_zeros(self.V + 1)
        g.index_add_(0, self.anc.reshape(-1), c[:, None].expand(self.V, self.L).reshape(-1))
        g = g[: self.V]
        g[self.root] = 0.0
        return g

    def columns(self, J: Tensor) -> Tensor:
        """Return the dense columns ``Z[:, J]`` (P, len(J)): membership of each end's root path."""
        member = torch.zeros(self.V + 1, J.numel(), dtype=torch.float64)
        rows = self.anc[:, :, None].expand(self.V, self.L, J.numel())  # x's ancestors
        hit = rows == J.view(1, 1, -1)
        x, _, k = torch.nonzero(hit, as_tuple=True)
        member[x, k] = 1.0  # member[x, k]: edge J[k] lies on x's root path
        u, v, lca = self.ends
        return member[u] + member[v] - 2.0 * member[lca]


def nonnegative_lasso(
    Z: Paths, d: Tensor, lam: float, *, max_iter: int, tol: float
) -> tuple[Tensor, int]:
    r"""Minimise ``||d - Z w||^2 / (2P) + lam * sum(w)`` over ``w >= 0`` (float64).

    FISTA with gradient-based restart; the step is ``1 / L``, ``L`` the largest
    eigenvalue of ``Z^T Z / P`` (power iteration, 5% margin). Stops when the projected
    gradient's largest entry is below ``tol`` times ``1 + max|Z^T d| / P``. Returns ``w``
    (in the tree's ranks) and the iterations run.
    """
    P, V = d.shape[0], Z.V
    b = Z.adjoint(d) / P
    v = torch.ones(V, dtype=torch.float64) / math.sqrt(V)
    lip = 0.0
    for _ in range(30):
        u = Z.adjoint(Z.apply(v)) / P
        lip = float(torch.linalg.vector_norm(u))
        if lip == 0:
            return torch.zeros(V, dtype=torch.float64), 0
        v = u / lip
    step = 1.0 / (1.05 * lip)
    scale = 1.0 + float(b.abs().max())
    w = torch.zeros(V, dtype=torch.float64)
    y, t = w.clone(), 1.0

    def grad(x: Tensor) -> Tensor:
        return Z.adjoint(Z.apply(x)) / P - b + lam

    it = 0
    for it in range(1, max_iter + 1):
        w_new = (y - step * grad(y)).clamp_min_(0.0)
        w_new[Z.root] = 0.0
        if float(torch.dot(y - w_new, w_new - w)) > 0:  # restart the momentum
            t = 1.0
        t_new = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
        y = w_new + ((t - 1.0) / t_new) * (w_new - w)
        w, t = w_new, t_new
        if it % 25 == 0 and _kkt(Z, d, lam, w) <= tol * scale:
            break
    return _polish(Z, d, lam, w, tol * scale), it


def _kkt(Z: Paths, d: Tensor, lam: float, w: Tensor) -> float:
    """Return the largest entry of the projected gradient (0 at the optimum)."""
    g = Z.adjoint(Z.apply(w) - d) / d.shape[0] + lam
    g[Z.root] = 0.0
    return float(torch.where(w > 0, g, g.clamp_max(0.0)).abs().max())


def _polish(Z: Paths, d: Tensor, lam: float, w: Tensor, tol: float) -> Tensor:
    """Solve the least-squares problem on the positive edges; keep it if it is optimal."""
    P = d.shape[0]
    J = torch.nonzero(w > 0).flatten()
    if J.numel() == 0 or J.numel() > POLISH_EDGES or P * J.numel() > POLISH_ELEMENTS:
        return w
    ZJ = Z.columns(J)
    gram = ZJ.T @ ZJ / P
    rhs = ZJ.T @ d / P - lam
    sol = torch.linalg.lstsq(gram, rhs[:, None], driver="gelsd").solution[:, 0]
    if bool((sol < 0).any()):
        return w
    cand = torch.zeros_like(w)
    cand[J] = sol
    return cand if _kkt(Z, d, lam, cand) <= max(tol, _kkt(Z, d, lam, w)) else w


def fit_edge_lengths(
    trees: Any,
    *,
    support: Any = None,
    n_pairs: int = 100_000,
    lam: float = 1e-3,
    metric: str = "euclidean",
    p: float = 2,
    max_iter: int = 5000,
    tol: float = 1e-7,
    seed: Any = None,
    generator: torch.Generator | None = None,
    verbose: bool = False,
) -> Any:
    r"""Fit non-negative edge lengths so that tree path lengths match ground distances.

    References: [Yamada2022]_.

    ``fitted = tsw.fit_edge_lengths(trees, seed=0)`` returns a new
    :class:`SupportTrees` with the same trees and fitted lengths (through
    :meth:`SupportTrees.with_edge_lengths`), to use wherever the trees are:
    :func:`tsw.pairwise_tsw`, :func:`tsw.support_tsw`, :func:`tsw.tree_embedding`.
    For each tree, with :math:`z_{ij} \in \{0, 1\}^V` the edges on the path between the
    leaves of support points ``i`` and ``j`` and :math:`d_{ij} = c(x_i, x_j)`, it solves
    the non-negative Lasso

    .. math::

        \min_{w \ge 0}\ \frac{1}{2P} \sum_{(i, j)} \left(\frac{d_{ij}}{s} -
        z_{ij} \cdot w\right)^2 + \lambda \sum_e w_e,
        \qquad s = \max_{(i, j)} d_{ij},

    over ``P`` pairs (all pairs ``i < j`` when there are at most ``n_pairs``, else
    ``n_pairs`` pairs drawn uniformly with ``i != j``) and returns :math:`s\, w`. The
    distances are scaled to at most 1 as treeOT does, so ``lam`` reads the same for every
    data set; the objective is scikit-learn's ``Lasso(positive=True,
    fit_intercept=False, alpha=lam)``. With ``lam = 0`` it is a non-negative least-squares
    problem (:func:`scipy.optimize.nnls`'s).

    Parameters
    ----------
    trees : SupportTrees
        The trees to fit (their structure and leaves are kept).
    support : Tensor or ndarray of shape (n, d'), optional
        The points whose ground distances are fitted, one per support point of the trees
        (another embedding of the same points, say); ``trees.support`` by default.
    n_pairs : int, default 100000
        Pairs sampled per tree (treeOT samples about 1e5).
    lam : float, default 1e-3
        The L1 weight, on distances scaled to at most 1 (treeOT's default).
    metric : {"euclidean", "sqeuclidean", "cityblock", "minkowski"}, default "euclidean"
        The ground cost to fit.
    p : float, default 2
        Order of ``"minkowski"``; ignored otherwise.
    max_iter : int, default 5000
        Iterations of the solver per tree.
    tol : float, default 1e-7
        Stop when every entry of the projected gradient is below ``tol`` times
        ``1 + max |Z^T d| / P``.
    seed, generator
        Randomness of the sampled pairs (the library's seeding contract); no
        randomness is used when all pairs are taken.
    verbose : bool, default False
        Show a progress bar over the trees (``tqdm`` when installed, else a line every
        tenth of the run), with the iterations of each tree's solver.

    Returns
    -------
    SupportTrees
        The trees with the fitted lengths, in the dtype and on the device of
        ``trees.support``. Edges on no sampled path (the root's, those above every
        support point) get length 0.

    Raises
    ------
    TypeError
        If ``trees`` is not a :class:`SupportTrees` or ``support`` not a tensor or array.
    ValueError
        For a ``support`` of another number of points, non-finite points, a negative
        ``lam`` or ``tol``, a non-positive ``n_pairs`` or ``max_iter``, an unknown
        ``metric``, fewer than two support points, or fitted lengths that overflow the
        trees' dtype (or all underflow to 0 in it).

    Notes
    -----
    The fit runs in float64 on the CPU with a sparse (P, V) design matrix of at most
    ``2 L`` entries per row (``L`` the depth); each iteration is two sparse products.
    The ground costs are formed on the points divided by the power of two nearest to
    their largest entry, as norms that neither overflow nor underflow, so the fit of
    ``c X`` is that of ``X`` with lengths times ``c`` (``c^2`` for ``"sqeuclidean"``) at
    every representable scale and every Minkowski ``p``.
    With all points distinct and the path metric able to equal the ground metric (a
    tree metric), ``lam = 0`` recovers it on the pairs. The positive edges' least-squares
    problem is then solved exactly when there are at most 2048 of them and the result
    is kept if it satisfies the optimality conditions.

    References
    ----------
    .. [Yamada2022] M. Yamada, Y. Takezawa, R. Sato, H. Bao, Z. Kozareva, S. Ravi.
       Approximating 1-Wasserstein distance with trees. TMLR 2022.

    Examples
    --------
    >>> import torch, tsw
    >>> support = torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0]])
    >>> trees = tsw.sample_quadtrees(support, seed=0)
    >>> tsw.pairwise_tsw(torch.eye(3), trees=trees)  # the quadtree's path lengths
    tensor([[ 0.0000, 11.3137, 11.3137],
            [11.3137,  0.0000, 11.3137],
            [11.3137, 11.3137,  0.0000]])
    >>> fitted = tsw.fit_edge_lengths(trees, lam=0.0)
    >>> tsw.pairwise_tsw(torch.eye(3), trees=fitted).round(decimals=4)  # a tree metric
    tensor([[0., 3., 4.],
            [3., 0., 5.],
            [4., 5., 0.]])
    """
    refuse_tracing("tsw.fit_edge_lengths")  # the paths are found in NumPy
    trees = check_trees(trees)
    n = trees.n_points
    X = trees.support if support is None else check_support(support, "support")
    if X.shape[0] != n:
        raise ValueError(
            f"support must have shape (n, d) with n={n} points (trees.n_points); got "
            f"support.shape={tuple(X.shape)}"
        )
    if n < 2:
        raise ValueError(f"fit_edge_lengths needs at least 2 support points; got {n}")
    n_pairs = check_positive_int(n_pairs, "n_pairs")
    max_iter = check_positive_int(max_iter, "max_iter")
    lam = check_nonnegative_float(lam, "lam")
    tol = check_nonnegative_float(tol, "tol")
    metric, p = check_metric(metric, p)
    verbose = check_bool(verbose, "verbose")
    rng = resolve_sampler(seed, generator, dtype=torch.float64, device="cpu")
    X = X.detach().cpu().to(torch.float64)
    unit = power_of_two(X.abs().amax())  # the costs of X / unit: no overflow, exactly scaled
    power = 2 if metric == "sqeuclidean" else 1
    Xu = X / unit
    like = trees.support
    lengths = []
    with Progress(verbose, trees.n_trees, "fit_edge_lengths", unit="tree") as bar:
        for tree_t in trees.trees:
            V = int(tree_t.parents.shape[0])
            tree = _Tree(tree_t.parents)
            leaves = tree_t.leaves.detach().cpu().numpy().astype(np.int64)
            pairs = torch.from_numpy(_pairs(n, n_pairs, rng.generator))
            d = ground_costs(Xu[pairs[:, 0]] - Xu[pairs[:, 1]], metric, p)
            s = float(d.max())
            if s <= 0:
                lengths.append(torch.zeros(V, dtype=like.dtype, device=like.device))
                bar.update(1, iterations=0)
                continue
            Z = Paths(tree, leaves, pairs.numpy())
            w, it = nonnegative_lasso(Z, d / s, lam, max_iter=max_iter, tol=tol)
            w = w[tree.rank] * s
            out = w
            for _ in range(power):
                out = out * unit
            out = out.to(like.device, like.dtype)
            if not bool(torch.isfinite(out).all()):
                raise _range_error(X, metric, like.dtype, "overflow to Inf")
            if bool((w > 0).any()) and not bool((out > 0).any()):
                raise _range_error(X, metric, like.dtype, "all underflow to 0")
            lengths.append(out)
            bar.update(1, iterations=it)
    return trees.with_edge_lengths(lengths)
