r"""Fixed-support barycenters on trees built from the data (FS-TWB / FS-TSWB).

Takezawa, Sato, Kozareva, Ravi and Yamada (AISTATS 2022): on a tree with edge lengths
:math:`w_e`, the tree-Wasserstein distance between histograms on the support is an L1
distance of linear embeddings, :math:`\lVert \operatorname{diag}(w) B (x - a)\rVert_1`,
so the barycenter :math:`\min_{x \in \Delta} \sum_k w_k \lVert \operatorname{diag}(w) B (x -
a_k)\rVert_1` is a convex piecewise-linear problem on the simplex: a linear program.

It is solved here by the primal-dual hybrid gradient method (Chambolle and Pock 2011)
with diagonal preconditioning, restarts and primal weights as in PDLP (Applegate et al.
2021), on the saddle-point form

.. math::

    \min_{x \in \Delta} \max_{s} \; s \cdot M x - \sum_e \varphi_e^*(s_e),
    \qquad \varphi_e(z) = \sum_k w_k |z - c_{ke}|,

whose pieces are all one-dimensional per edge: the objective, a subgradient, the
conjugate :math:`\varphi_e^*` and the proximal map of :math:`\varphi_e^*` each cost one
binary search among the sorted :math:`c_{ke}`. Every dual point gives a lower bound on
the optimum (weak duality), so the stopping rule is a certified duality gap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.nn.functional import embedding_bag

from tsw.core._problem import from_numpy, to_numpy
from tsw.core._progress import Progress
from tsw.core._random import refuse_tracing
from tsw.core._sort import sort_last
from tsw.core._validation import (
    check_bool,
    check_nonnegative,
    check_nonnegative_float,
    check_nonnegative_int,
    check_same_device_dtype,
    check_tensor,
    mass_rtol,
    warn,
)
from tsw.support._embedding import _merged
from tsw.support._trees import SupportTrees, check_trees

__all__ = ["tree_barycenter"]

_NAME = "tree_barycenter"
#: the duality gap is evaluated (and a restart considered) every CHECK iterations
CHECK = 16
#: PDLP's restart rule: restart to the current or the averaged iterate when its gap fell
#: below SUFFICIENT times the gap at the last restart, or below NECESSARY times it while
#: no longer falling, or after ARTIFICIAL times the iterations run so far
SUFFICIENT, NECESSARY, ARTIFICIAL = 0.2, 0.8, 0.36
#: the smoothing of the primal weight's updates at restarts (PDLP's theta)
SMOOTHING = 0.8
#: the initial primal weight, relative to the ratio of the initial dual and primal norms
OMEGA = 2.0


class _Edges:
    r"""The per-edge functions :math:`\varphi_e(z) = \sum_k w_k |z - c_{ke}|` of P problems.

    ``C`` (P, E, K) holds the :math:`c_{ke}` sorted along the last axis; with ``r`` of
    them below ``z``, :math:`\varphi_e(z) = z\, G_r - R_r` and the slope is ``G_r``, where
    ``G_r = 2 W_r - W`` and ``R_r = 2 S_r - S`` from the prefix sums ``W_r`` of the sorted
    weights and ``S_r`` of the weighted values (``W``, ``S`` the totals).
    """

    def __init__(self, C: Tensor, w: Tensor) -> None:
        C, order = sort_last(C)
        ws = w[:, None, :].expand_as(C).gather(-1, order)
        zero = C.new_zeros(*C.shape[:-1], 1)
        W = torch.cat([zero, ws.cumsum(-1)], -1)
        S = torch.cat([zero, (ws * C).cumsum(-1)], -1)
        self.C = C.contiguous()
        self.total = W[..., -1:]  # (P, E, 1): the weights' total, 1 up to rounding
        self.G = (2 * W - self.total).contiguous()
        self.R = (2 * S - S[..., -1:]).contiguous()
        self.K = C.shape[-1]
        self.low = torch.empty_like(self.C)
        self.lam = torch.ones_like(self.C[..., 0])

    @staticmethod
    def _at(T: Tensor, index: Tensor) -> Tensor:
        return T.gather(-1, index[..., None])[..., 0]

    def value(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """Return the objective (P,) at ``z = M x`` (P, E) and its slopes (P, E)."""
        r = torch.searchsorted(self.C, z[..., None].contiguous())[..., 0]
        slope = self._at(self.G, r)
        return (z * slope - self._at(self.R, r)).sum(-1), slope

    def conjugate(self, s: Tensor) -> Tensor:
        r"""Return :math:`\sum_e \varphi_e^*(s_e)` (P,) for slopes ``s`` in ``[-W, W]``.

        :math:`\varphi_e^*(s) = s c_j - \varphi_e(c_j)` at the kink ``c_j`` whose
        slopes ``G_j <= s <= G_{j+1}`` enclose ``s``.
        """
        j = torch.searchsorted(self.G, s[..., None].contiguous())[..., 0] - 1
        j = j.clamp(0, self.K - 1)
        c = self._at(self.C, j)
        return (s * c - c * self._at(self.G, j) + self._at(self.R, j)).sum(-1)

    def set_step(self, sigma: Tensor) -> None:
        r"""Tabulate the proximal map of :math:`\varphi_e / \sigma_e` (``sigma`` (P, E)).

        ``h(z) = z + G(z) / sigma`` is non-decreasing; at the kink ``c_j`` it jumps from
        ``c_j + G_j / sigma`` to ``c_j + G_{j+1} / sigma``: the table holds the first.
        """
        self.lam = 1 / sigma
        torch.addcmul(self.C, self.G[..., :-1], self.lam[..., None], out=self.low)

    def prox_conjugate(self, y: Tensor, sigma: Tensor) -> Tensor:
        r"""Return :math:`\operatorname{prox}_{\sigma \varphi^*}(y)` (Moreau's identity).

        :math:`y - \sigma\, \operatorname{prox}_{\varphi / \sigma}(y / \sigma)`, with
        :math:`\operatorname{prox}_{\varphi/\sigma}(v)` the ``z`` solving ``h(z) = v``:
        with ``j`` kinks whose jump starts at or below ``v``, the kink ``c_{j-1}`` when its
        jump reaches ``v``, else ``v - G_j / sigma`` on the segment after it.
        """
        v = y / sigma
        j = torch.searchsorted(self.low, v[..., None].contiguous(), side="right")[..., 0]
        kink = self._at(self.C, (j - 1).clamp_min(0))
        slope = self._at(self.G, j) * self.lam
        z = torch.where((j > 0) & (v <= kink + slope), kink, v - slope)
        return y - sigma * z


def _project(u: Tensor, tau: Tensor) -> Tensor:
    r"""Rows of :math:`\arg\min_{x \in \Delta} \sum_i (x_i - u_i)^2 / \tau_i` (the simplex).

    :math:`x_i = \max(u_i - \tau_i \nu, 0)` with :math:`\nu` the threshold that makes the
    total one: the points in decreasing order of :math:`u_i / \tau_i`, the active ones a
    prefix of them.
    """
    t = u / tau
    ts, order = t.sort(-1, descending=True)
    nu = (u.gather(-1, order).cumsum(-1) - 1) / tau.gather(-1, order).cumsum(-1)
    k = ((ts > nu).sum(-1, keepdim=True) - 1).clamp_min(0)
    return (u - tau * nu.gather(-1, k)).clamp_min(0)


def _operator(
    trees: SupportTrees, n: int, dtype: torch.dtype, device: torch.device
) -> tuple[
    Callable[[Tensor], Tensor],
    Callable[[Tensor], Tensor],
    Callable[[Tensor], Tensor],
    Tensor,
    Tensor,
]:
    """Return the products with ``M`` and ``M^T``, and the row and column sums of ``abs(M)``.

    ``M`` (E, n) is the edge matrix with its single-point rows merged
    (:func:`tsw.support._embedding._merged`), held as the lists of the points below each
    edge and of the edges above each point: a product is a weighted sum over each list
    (``embedding_bag``), costing the nonzeros. (torch's CSR tensors multiply about three
    times faster, but creating one spends torch's once-per-process warning that they are in
    beta, which a user's own CSR tensor would otherwise show.)
    """
    crow, col, val, E = _merged(trees)
    crow, col = crow.to(device), col.to(device)
    val = val.to(dtype=dtype, device=device)
    cols = torch.repeat_interleave(torch.arange(n, device=device), crow.diff())
    # (n, E) compressed rows of M^T are given; M's are the same entries ordered by edge
    order = torch.argsort(col * n + cols)
    mrow = torch.zeros(E + 1, dtype=torch.long, device=device)
    mrow[1:] = torch.cumsum(torch.bincount(col, minlength=E), 0)
    below, below_val, below_start = cols[order], val[order], mrow[:-1]
    above, above_start = col, crow[:-1]

    def apply(x: Tensor) -> Tensor:
        """``M x`` for the columns of ``x`` (n, k): shape (E, k)."""
        return embedding_bag(below, x, below_start, mode="sum", per_sample_weights=below_val)

    def embed(x: Tensor) -> Tensor:
        """``M x`` for the rows of ``x`` (P, n): shape (P, E)."""
        return apply(x.T.contiguous()).T

    def adjoint(s: Tensor) -> Tensor:
        """``M^T s`` for the rows of ``s`` (P, E): shape (P, n)."""
        return embedding_bag(
            above, s.T.contiguous(), above_start, mode="sum", per_sample_weights=val
        ).T

    absval = val.abs()
    rowsum = torch.zeros(E, dtype=dtype, device=device).index_add_(0, col, absval)
    colsum = torch.zeros(n, dtype=dtype, device=device).index_add_(0, cols, absval)
    return apply, embed, adjoint, rowsum, colsum


def _start(H: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
    """Return the start of each problem (P, n) and whether it is the exact barycenter (P,).

    A histogram of weight at least 1/2 is a weighted median of every edge's ``c_ke``, so
    it minimises every term of the objective at once: it is the barycenter. Otherwise the
    start is the weighted mean.
    """
    heavy, k = w.max(-1)
    exact = heavy >= 0.5
    first = H.gather(1, k[:, None, None].expand(-1, 1, H.shape[-1]))[:, 0]
    return torch.where(exact[:, None], first, (w[..., None] * H).sum(1)), exact


def _solve(
    H: Tensor,
    w: Tensor,
    trees: SupportTrees,
    numItermax: int,
    stopThr: float,
    bar: Progress,
) -> dict[str, Any]:
    """PDHG on P problems at once: ``H`` (P, K, n) rows summing to one, ``w`` (P, K)."""
    P, K, n = H.shape
    apply, embed, adjoint, rowsum, colsum = _operator(trees, n, H.dtype, H.device)
    E = rowsum.shape[0]
    C = apply(H.reshape(P * K, n).T.contiguous())  # (E, P K): one product for them all
    C = C.reshape(E, P, K).transpose(0, 1).contiguous()  # (P, E, K), K contiguous
    edges = _Edges(C, w)
    # diagonal preconditioning (Pock and Chambolle 2011, alpha = 1): edges of zero length
    # and points under none carry no cost; any finite step leaves them in place
    sig0 = torch.where(rowsum > 0, 1 / rowsum.clamp_min(torch.finfo(H.dtype).tiny), 1.0)
    fallback = colsum[colsum > 0].max() if bool((colsum > 0).any()) else colsum.new_ones(())
    tau0 = 1 / torch.where(colsum > 0, colsum, fallback)

    def dual(s: Tensor) -> Tensor:
        """Return the lower bound ``min_i (M^T s)_i - sum_e phi_e^*(s_e)`` (weak duality)."""
        return adjoint(s).amin(-1) - edges.conjugate(s)

    def norm_x(d: Tensor) -> Tensor:
        return (d * d / tau0).sum(-1).sqrt()

    def norm_s(d: Tensor) -> Tensor:
        return (d * d / sig0).sum(-1).sqrt()

    x, exact = _start(H, w)
    best_p, s = edges.value(embed(x))  # the start and its subgradient
    best_d = torch.where(exact, best_p, dual(s).clamp_min(0))  # the objective is >= 0
    best_x = x.clone()
    from_start = torch.ones(P, dtype=torch.bool, device=H.device)
    nx, ns = norm_x(x), norm_s(s)
    ok = (nx > 0) & (ns > 0)
    omega = torch.where(ok, OMEGA * ns / torch.where(ok, nx, 1.0), 1.0)[:, None]
    edges.set_step(sig0 * omega)
    xr, sr, gap_r = x, s, best_p - best_d  # the last restart's point and its gap
    gap_last = gap_r.clone()
    xa, sa = torch.zeros_like(x), torch.zeros_like(s)
    count = torch.zeros(P, 1, dtype=H.dtype, device=H.device)
    since = torch.zeros(P, dtype=torch.long, device=H.device)
    history: list[Tensor] = [best_p.clone()]
    bounds: list[Tensor] = [best_d.clone()]
    done = best_p - best_d <= stopThr * best_p.abs()
    it = 0
    while it < numItermax and not bool(done.all()):
        tau, sigma = tau0 / omega, sig0 * omega
        steps = min(CHECK, numItermax - it)
        for _ in range(steps):
            x_new = _project(x - tau * adjoint(s), tau)
            s = edges.prox_conjugate(s + sigma * embed(2 * x_new - x), sigma)
            x = x_new
            count += 1
            xa += (x - xa) / count
            sa += (s - sa) / count
        it += steps
        since += steps
        p_cur, p_avg = edges.value(embed(x))[0], edges.value(embed(xa))[0]
        d_cur, d_avg = dual(s), dual(sa)
        for p, cand in ((p_cur, x), (p_avg, xa)):
            better = p < best_p
            best_p = torch.where(better, p, best_p)
            best_x = torch.where(better[:, None], cand, best_x)
            from_start &= ~better
        best_d = torch.maximum(best_d, torch.maximum(d_cur, d_avg))
        history.append(best_p.clone())
        bounds.append(best_d.clone())
        gap = best_p - best_d
        done = done | (gap <= stopThr * best_p.abs())
        bar.update(steps, gap=float((gap / best_p.abs().clamp_min(1e-300)).max()))
        # PDLP's adaptive restarts, to the current or the averaged pair (the smaller gap)
        g_cur, g_avg = p_cur - d_cur, p_avg - d_avg
        use_avg = (g_avg < g_cur)[:, None]
        g = torch.minimum(g_cur, g_avg)
        restart = (g <= SUFFICIENT * gap_r) | ((g <= NECESSARY * gap_r) & (g > gap_last))
        restart |= since >= ARTIFICIAL * it
        gap_last = g
        if not bool(restart.any()):
            continue
        x_c, s_c = torch.where(use_avg, xa, x), torch.where(use_avg, sa, s)
        dx, ds = norm_x(x_c - xr), norm_s(s_c - sr)
        move = restart & (dx > 0) & (ds > 0)
        ratio = torch.where(move, ds, 1.0) / torch.where(move, dx, 1.0)
        log_omega = SMOOTHING * ratio.log() + (1 - SMOOTHING) * omega[:, 0].log()
        omega = torch.where(move, log_omega.exp(), omega[:, 0])[:, None]
        r = restart[:, None]
        x, s = torch.where(r, x_c, x), torch.where(r, s_c, s)
        xr, sr = torch.where(r, x, xr), torch.where(r, s, sr)
        gap_r = torch.where(restart, g, gap_r)
        xa, sa = torch.where(r, 0, xa), torch.where(r, 0, sa)
        count = torch.where(r, 0, count)
        since = torch.where(restart, 0, since)
        edges.set_step(sig0 * omega)
    return {
        "x": best_x,
        "from_start": from_start,
        "value": best_p,
        "bound": best_d,
        "objective": torch.stack(history),
        "lower_bound": torch.stack(bounds),
        "n_iter": it,
    }


def _row(p: int, k: int, batched: bool) -> str:
    return f"hists[{p}, {k}]" if batched else f"hists[{k}]"


def _check_hists(hists: object, trees: SupportTrees, numpy: bool) -> tuple[Tensor, bool]:
    if isinstance(hists, np.ndarray) != numpy and isinstance(hists, np.ndarray | Tensor):
        raise TypeError(
            f"{_NAME}: hists must be a torch.Tensor or a numpy array; got {type(hists).__name__}"
        )
    H = check_tensor(from_numpy(hists, "hists"), "hists")
    if numpy:
        H = H.to(dtype=trees.dtype, device=trees.device)
    check_same_device_dtype(trees.support, "the trees' support", H, "hists")
    n = trees.n_points
    if H.ndim not in (2, 3) or H.shape[-1] != n or H.shape[-2] == 0 or H.shape[0] == 0:
        raise ValueError(
            f"{_NAME}: hists must have shape (K, n) or (P, K, n) with n = {n}, the trees' "
            f"support points, and K >= 1; got hists.shape={tuple(H.shape)}"
        )
    if H.requires_grad:
        raise ValueError(
            f"{_NAME}: hists requires grad, but the barycenter (the solution of a linear "
            "program) is not differentiated; pass hists.detach()"
        )
    check_nonnegative(H, "hists")
    batched = H.ndim == 3
    return (H if batched else H[None]), batched


def _check_weights(weights: object, H: Tensor, batched: bool, numpy: bool) -> Tensor:
    P, K = H.shape[0], H.shape[1]
    if weights is None:
        return H.new_full((P, K), 1.0 / K)
    if isinstance(weights, np.ndarray) != numpy and isinstance(weights, np.ndarray | Tensor):
        raise TypeError(f"{_NAME}: weights must be of the kind of hists (numpy or torch)")
    w = check_tensor(from_numpy(weights, "weights"), "weights")
    if numpy:
        w = w.to(dtype=H.dtype, device=H.device)
    check_same_device_dtype(H, "hists", w, "weights")
    shapes = [(K,)] + ([(P, K)] if batched else [])
    if tuple(w.shape) not in shapes:
        forms = " or ".join(str(s) for s in shapes)
        raise ValueError(f"{_NAME}: weights must have shape {forms}; got {tuple(w.shape)}")
    if w.requires_grad:
        raise ValueError(
            f"{_NAME}: weights requires grad, but the barycenter is not differentiated; "
            "pass weights.detach()"
        )
    check_nonnegative(w, "weights")
    w = w.expand(P, K)
    totals = w.sum(-1)
    if bool(((totals - 1).abs() > mass_rtol(w.dtype)).any()):
        raise ValueError(
            f"{_NAME}: weights must sum to one (per problem); got a total of "
            f"{float(totals.reshape(-1)[(totals - 1).abs().argmax()]):.10g}"
        )
    return w


def _totals(H: Tensor, w: Tensor, batched: bool) -> Tensor:
    """Return each problem's total mass (P,): the histograms of positive weight share it.

    Rows of zero weight (padding) are not read. The comparison is relative, so that it
    holds at every scale of the masses.
    """
    totals = H.sum(-1)  # (P, K)
    used = w > 0
    empty = used & (totals <= 0)
    if bool(empty.any()):
        p, k = (int(i) for i in torch.nonzero(empty)[0])
        raise ValueError(
            f"{_NAME}: {_row(p, k, batched)} has total mass 0 but weight "
            f"{float(w[p, k]):.6g}: a histogram of positive weight needs mass (padding rows "
            "take weight 0)"
        )
    first = used.to(torch.uint8).argmax(-1, keepdim=True)  # the first row of positive weight
    ref = totals.gather(-1, first)
    gap = torch.where(used, (totals - ref).abs(), 0)
    bad = gap > mass_rtol(H.dtype) * torch.maximum(totals, ref)
    if bool(bad.any()):
        p, k = (int(i) for i in torch.nonzero(bad)[0])
        k0 = int(first[p, 0])
        raise ValueError(
            f"{_NAME}: the histograms of positive weight must have equal total masses (the "
            f"tree-Wasserstein distance is balanced); got {_row(p, k0, batched)} of total "
            f"{float(totals[p, k0]):.10g} and {_row(p, k, batched)} of total "
            f"{float(totals[p, k]):.10g}"
        )
    return (w * totals).sum(-1)  # the common total (a weighted mean of equal numbers)


def tree_barycenter(
    hists: Tensor | np.ndarray,
    trees: SupportTrees,
    weights: Tensor | np.ndarray | None = None,
    *,
    numItermax: int = 10000,
    stopThr: float = 1e-3,
    verbose: bool = False,
    log: bool = False,
) -> Any:
    r"""Fixed-support barycenter of histograms for the (tree-sliced) tree-Wasserstein distance.

    The masses :math:`x` on the support of ``trees`` that minimise the weighted sum of the
    distances to ``K`` histograms :math:`a_k` on the same support::

        trees = tsw.sample_quadtrees(support, n_trees=1, seed=0)
        x = tsw.tree_barycenter(hists, trees)           # hists (K, n) -> x (n,)
        xs = tsw.tree_barycenter(batch, trees)          # (P, K, n) -> (P, n), P problems

    .. math::

        \min_{x \ge 0,\ \sum_i x_i = m} \sum_k w_k\, \frac1T \sum_t W_1^{(t)}(x, a_k)
        = \min_{x} \sum_k w_k \lVert M (x - a_k) \rVert_1 ,

    with :math:`m` the histograms' common total mass and :math:`M = \frac1T
    \operatorname{diag}(w) B` the edge matrix of the ``T`` trees (:math:`B_{ei} = 1` when
    point :math:`i` lies below edge :math:`e`). For one tree this is the exact barycenter
    for the tree's path metric (FS-TWB), for several the tree-sliced one (FS-TSWB) of
    [Takezawa2022]_. The problem is a linear program; per edge the objective is
    :math:`\varphi_e(z_e) = \sum_k w_k |z_e - c_{ke}|` with :math:`z = Mx`, :math:`c_k =
    M a_k`.

    **Solver.** The primal-dual hybrid gradient method [Chambolle2011]_ on
    :math:`\min_x \max_s s \cdot Mx - \sum_e \varphi_e^*(s_e)`, with diagonal
    preconditioning, adaptive restarts and primal weights as in PDLP [Applegate2021]_.
    The :math:`c_{ke}` are sorted once per edge with prefix sums of their weights, so the
    objective, the conjugates :math:`\varphi_e^*` and their proximal maps cost one binary
    search per edge (:math:`O(E \log K)` per step, not :math:`O(E K)`); the projection on
    the simplex sorts the ``n`` masses. Every dual iterate :math:`s` gives a lower bound
    :math:`\min_i (M^\top s)_i\, m - \sum_e \varphi_e^*(s_e)` on the optimum, so the run
    stops at a **certified** relative duality gap: the returned barycenter's objective is
    at most :math:`1 / (1 - \text{stopThr})` times the exact minimum (``log=True``
    returns the gap reached). The start is the weighted mean of the histograms (itself
    a candidate: the barycenter of one histogram is that histogram), and the best
    iterate is returned. The steps are scale-free: scaling the masses or the edge lengths
    scales the objective and leaves the iterates' path the same. The ``P`` problems of a
    (P, K, n) batch run together, each until its own gap is reached.

    Parameters
    ----------
    hists : Tensor of shape (K, n) or (P, K, n)
        Histograms on the support of ``trees`` (non-negative), those of positive weight
        with equal total masses (relative to :math:`10^3` machine epsilons; the
        barycenter has that total), in the trees' dtype and on their device (numpy
        arrays are converted to it). Rows of zero weight are not read, so a problem with
        fewer histograms pads with rows of zeros of weight zero.
    trees : SupportTrees
        The trees (:func:`tsw.sample_quadtrees`, :func:`tsw.sample_cluster_trees`).
    weights : Tensor of shape (K,) or (P, K), optional
        The barycentric weights :math:`w_k`, non-negative and summing to one (per problem);
        uniform by default.
    numItermax : int, default 10000
        The most iterations.
    stopThr : float, default 1e-3
        Stop when the duality gap, relative to the objective, is at most this. With 0
        the run stops at a zero gap (an exact optimum) or after ``numItermax``
        iterations. A run that ends above it warns, giving the gap reached.
    verbose : bool, default False
        Show a progress bar (``tqdm`` when installed, else a line every tenth of
        ``numItermax``), with the largest relative gap of the problems.
    log : bool, default False
        Also return a dict: ``"value"`` (the returned barycenter's objective),
        ``"lower_bound"`` (a certified lower bound on the exact minimum), ``"gap"``
        (``(value - lower_bound) / value``), ``"objective"`` and ``"lower_bounds"`` (the
        best objective and bound at the start and after every 16 iterations, shape
        (n_checks, P), or (n_checks,) unbatched) and ``"n_iter"``.

    Returns
    -------
    x : Tensor of shape (n,) or (P, n)
        The barycenter's masses (numpy for numpy inputs).
    log : dict
        Only with ``log=True``.

    Raises
    ------
    TypeError
        If ``trees`` is not a :class:`tsw.SupportTrees`, for non-floating or mixed inputs.
    ValueError
        For shapes that do not match the support, negative, NaN or Inf masses, a
        histogram of positive weight with no mass, histograms of positive weight with
        unequal totals, weights that do not sum to one, or inputs that require grad.

    References
    ----------
    .. [Takezawa2022] Y. Takezawa, R. Sato, Z. Kozareva, S. Ravi, M. Yamada. Fixed support
       tree-sliced Wasserstein barycenter. AISTATS 2022.
    .. [Chambolle2011] A. Chambolle, T. Pock. A first-order primal-dual algorithm for
       convex problems with applications to imaging. JMIV 40, 2011; and T. Pock,
       A. Chambolle. Diagonal preconditioning for first order primal-dual algorithms in
       convex optimization. ICCV 2011.
    .. [Applegate2021] D. Applegate, M. Díaz, O. Hinder, H. Lu, M. Lubin, B. O'Donoghue,
       W. Schudy. Practical large-scale linear programming using primal-dual hybrid
       gradient. NeurIPS 2021.

    Examples
    --------
    >>> import torch, tsw
    >>> support = torch.tensor([[0.0], [1.0], [2.0]], dtype=torch.float64)
    >>> trees = tsw.sample_quadtrees(support, n_trees=1, seed=0)
    >>> hists = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]],
    ...                      dtype=torch.float64)
    >>> x = tsw.tree_barycenter(hists, trees)
    >>> [round(v, 3) for v in x.tolist()]  # the weighted median
    [0.0, 0.0, 1.0]
    """
    refuse_tracing(f"tsw.{_NAME}")  # its iterations run on the values: a trace keeps them
    trees = check_trees(trees, f"{_NAME}: trees")
    if not isinstance(hists, np.ndarray | Tensor):
        raise TypeError(
            f"{_NAME}: hists must be a torch.Tensor or a numpy array of shape (K, n) or "
            f"(P, K, n); got {type(hists).__name__}"
        )
    numpy = isinstance(hists, np.ndarray)
    H, batched = _check_hists(hists, trees, numpy)
    w = _check_weights(weights, H, batched, numpy)
    numItermax = check_nonnegative_int(numItermax, "numItermax")
    stopThr = check_nonnegative_float(stopThr, "stopThr")
    verbose, log = check_bool(verbose, "verbose"), check_bool(log, "log")
    mass = _totals(H, w, batched)  # (P,)

    with torch.no_grad():
        used = w > 0
        keep = used.any(0)  # histograms of zero weight in every problem are dropped
        Hk, wk = H[:, keep], w[:, keep]
        # each histogram of positive weight normalised to total one (zero-weight rows:
        # zeros, which the weights ignore)
        totals = Hk.sum(-1, keepdim=True)
        Hn = torch.where(wk[..., None] > 0, Hk / torch.where(totals > 0, totals, 1), 0)
        with Progress(verbose, numItermax, _NAME) as bar:
            out = _solve(Hn, wk, trees, numItermax, stopThr, bar)
        # the start in the input's units when it is the best point (exactly the heaviest
        # histogram where it is the barycenter)
        start, _ = _start(H, w)
        bary = torch.where(out["from_start"][:, None], start, out["x"] * mass[:, None])
        value, bound = out["value"] * mass, out["bound"] * mass
        gap = (value - bound).clamp_min(0) / value.abs().clamp_min(torch.finfo(H.dtype).tiny)
        gap = torch.where(value > 0, gap, 0)
    worst = float(gap.max())
    if stopThr > 0 and worst > stopThr:
        warn(
            f"{_NAME}: stopped after numItermax={numItermax} iterations at a relative "
            f"duality gap of {worst:.3g} > stopThr={stopThr:g}; the objective is within "
            f"{worst:.3g} of the minimum (raise numItermax for a closer one)"
        )
    bary = bary if batched else bary[0]
    result = to_numpy(bary) if numpy else bary
    if not log:
        return result
    objective = out["objective"] * mass
    lower = out["lower_bound"] * mass
    if not batched:
        value, bound, gap = value[0], bound[0], gap[0]
        objective, lower = objective[:, 0], lower[:, 0]
    convert = to_numpy if numpy else (lambda t: t)
    record = {
        "value": convert(value),
        "lower_bound": convert(bound),
        "gap": convert(gap),
        "objective": convert(objective),
        "lower_bounds": convert(lower),
        "n_iter": out["n_iter"],
    }
    return result, record
