r"""Fixed-support barycenters on trees built from the data (FS-TWB / FS-TSWB).

Takezawa, Sato, Kozareva, Ravi and Yamada (AISTATS 2022): on a tree with edge lengths
:math:`w_e`, the tree-Wasserstein distance between histograms on the support is an L1
distance of linear embeddings, :math:`\lVert \operatorname{diag}(w) B (x - a)\rVert_1`,
so the barycenter :math:`\min_{x \in \Delta} \sum_k w_k \lVert \operatorname{diag}(w) B (x -
a_k)\rVert_1` is a convex piecewise-linear problem on the simplex.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tsw.core._problem import from_numpy, to_numpy
from tsw.core._random import refuse_tracing
from tsw.core._validation import (
    check_bool,
    check_nonnegative,
    check_nonnegative_float,
    check_nonnegative_int,
    check_same_device_dtype,
    check_tensor,
    mass_rtol,
)
from tsw.support._embedding import _merged
from tsw.support._trees import SupportTrees, check_trees

__all__ = ["tree_barycenter"]

_NAME = "tree_barycenter"
#: mirror-descent step ``STEP / ||g||_inf / sqrt(t + 1)`` (the exponent of the update)
STEP = 1.0
#: the share of the uniform histogram mixed into the start (mirror descent needs x > 0)
MIX = 0.1
#: the stopping rule looks at the best objective every WINDOW iterations
WINDOW = 300


class _Sorted:
    """The per-edge sorted embeddings ``c_ke`` and prefix sums of their weights.

    With ``rl`` (``rr``) the number of ``c_ke < z_e`` (``<= z_e``), the objective of edge
    ``e`` is ``z (W[rl] - (W_tot - W[rr])) - (S[rl] - (S_tot - S[rr]))`` and its
    subgradient ``W[rl] - (W_tot - W[rr])``: ``O(log K)`` per edge.
    """

    def __init__(self, C: Tensor, w: Tensor):
        # C (P, E, K) embeddings, w (P, K) weights
        self.C, order = C.sort(-1)
        ws = torch.gather(w[:, None, :].expand_as(C), -1, order)
        zero = C.new_zeros(*C.shape[:-1], 1)
        self.W = torch.cat([zero, ws.cumsum(-1)], -1).contiguous()
        self.S = torch.cat([zero, (ws * self.C).cumsum(-1)], -1).contiguous()
        self.C = self.C.contiguous()

    def evaluate(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """Return the objective (P,) and the subgradient in the embedding (P, E) at ``z`` (P, E)."""
        q = z[..., None].contiguous()
        rl = torch.searchsorted(self.C, q, side="left")
        rr = torch.searchsorted(self.C, q, side="right")
        below = self.W.gather(-1, rl)[..., 0]
        above = self.W[..., -1] - self.W.gather(-1, rr)[..., 0]
        s_below = self.S.gather(-1, rl)[..., 0]
        s_above = self.S[..., -1] - self.S.gather(-1, rr)[..., 0]
        slope = below - above
        return (z * slope - (s_below - s_above)).sum(-1), slope


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
    check_nonnegative(H, "hists")
    totals = H.sum(-1)
    gap = (totals - 1).abs()
    if bool((gap > mass_rtol(H.dtype)).any()):
        raise ValueError(
            f"{_NAME}: every histogram must sum to one; got a total of "
            f"{float(totals.reshape(-1)[gap.reshape(-1).argmax()]):.10g}"
        )
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
    check_nonnegative(w, "weights")
    w = w.expand(P, K)
    totals = w.sum(-1)
    if bool(((totals - 1).abs() > mass_rtol(w.dtype)).any()):
        raise ValueError(
            f"{_NAME}: weights must sum to one (per problem); got a total of "
            f"{float(totals.reshape(-1)[(totals - 1).abs().argmax()]):.10g}"
        )
    return w


def tree_barycenter(
    hists: Tensor | np.ndarray,
    trees: SupportTrees,
    weights: Tensor | np.ndarray | None = None,
    *,
    numItermax: int = 1500,
    stopThr: float = 1e-7,
    log: bool = False,
) -> Any:
    r"""Fixed-support barycenter of histograms for the (tree-sliced) tree-Wasserstein distance.

    The masses :math:`x` on the support of ``trees`` that minimise the weighted sum of the
    distances to ``K`` histograms :math:`a_k` on the same support::

        trees = tsw.sample_quadtrees(support, n_trees=1, seed=0)
        x = tsw.tree_barycenter(hists, trees)           # hists (K, n) -> x (n,)
        xs = tsw.tree_barycenter(batch, trees)          # (P, K, n) -> (P, n), P problems

    .. math::

        \min_{x \in \Delta_n} \sum_k w_k\, \frac1T \sum_t W_1^{(t)}(x, a_k)
        = \min_{x \in \Delta_n} \sum_k w_k \lVert M (x - a_k) \rVert_1 ,

    with :math:`M = \frac1T \operatorname{diag}(w) B` the edge matrix of the ``T`` trees
    (:math:`B_{ei} = 1` when point :math:`i` lies below edge :math:`e`). For one tree this
    is the exact barycenter for the tree's path metric (FS-TWB), for several the
    tree-sliced one (FS-TSWB) of [Takezawa2022]_. The problem is convex and piecewise
    linear; per edge the objective is :math:`\sum_k w_k |z_e - c_{ke}|` with
    :math:`z = Mx`, :math:`c_k = M a_k`.

    **Solver.** The :math:`c_{ke}` are sorted once per edge with prefix sums of their
    weights, so the objective and a subgradient cost one binary search per edge
    (:math:`O(E \log K)` per step, not :math:`O(E K)`). The steps are mirror descent on
    the simplex (exponentiated gradient), :math:`x \leftarrow x\, e^{-\eta_t g} /
    \lVert x\, e^{-\eta_t g}\rVert_1` with :math:`\eta_t = 1 / (\lVert g\rVert_\infty
    \sqrt{t + 1})` (scale-free), from 90% of the weighted mean of the histograms plus
    10% of the uniform histogram; the best iterate is returned (the weighted mean itself
    is a candidate, so the barycenter of one histogram is that histogram). The
    ``P`` problems of a (P, K, n) batch run together. On small trees the objective of the
    result is within 5e-3 (relative; measured 1e-5 to 4e-3) of the exact minimum, computed by linear
    programming, after the default 1500 steps.

    Parameters
    ----------
    hists : Tensor of shape (K, n) or (P, K, n)
        Histograms on the support of ``trees`` (non-negative, each summing to one), in the
        trees' dtype and on their device (numpy arrays are converted to it). A problem
        with fewer histograms pads with zero weights.
    trees : SupportTrees
        The trees (:func:`tsw.sample_quadtrees`, :func:`tsw.sample_cluster_trees`).
    weights : Tensor of shape (K,) or (P, K), optional
        The barycentric weights :math:`w_k`, non-negative and summing to one (per problem);
        uniform by default.
    numItermax : int, default 1500
        The most mirror-descent steps.
    stopThr : float, default 1e-7
        Stop when the best objective improved by less than this (relative) over the last
        300 steps.
    log : bool, default False
        Also return a dict: ``"objective"`` (the best objective after each step, shape
        (n_iter, P), or (n_iter,) unbatched), ``"value"`` (the returned barycenter's
        objective) and ``"n_iter"``.

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
        For shapes that do not match the support, negative, NaN or Inf masses, or
        histograms and weights that do not sum to one.

    References
    ----------
    .. [Takezawa2022] Y. Takezawa, R. Sato, Z. Kozareva, S. Ravi, M. Yamada. Fixed support
       tree-sliced Wasserstein barycenter. AISTATS 2022.

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
    log = check_bool(log, "log")

    P, n = H.shape[0], H.shape[-1]
    # the (E, n) edge matrix as (row, column, value) triplets of its nonzeros; products
    # with it are gathers and index_add (no sparse tensor: faster at these sizes)
    crow, col, val, E = _merged(trees)
    rows = col.to(H.device)
    cols = torch.repeat_interleave(torch.arange(n, device=H.device), crow.diff().to(H.device))
    val = val.to(dtype=H.dtype, device=H.device)

    def embed(x: Tensor) -> Tensor:
        """Return ``M x`` for the rows of ``x`` (..., n): shape (..., E)."""
        out = x.new_zeros(*x.shape[:-1], E)
        return out.index_add_(-1, rows, x[..., cols] * val)

    def adjoint(s: Tensor) -> Tensor:
        """Return ``M^T s`` for the rows of ``s`` (..., E): shape (..., n)."""
        out = s.new_zeros(*s.shape[:-1], n)
        return out.index_add_(-1, cols, s[..., rows] * val)

    C = embed(H).transpose(1, 2)  # (P, E, K)
    sorted_ = _Sorted(C, w)

    def evaluate(x: Tensor) -> tuple[Tensor, Tensor]:
        value, slope = sorted_.evaluate(embed(x))
        return value, adjoint(slope)  # the subgradient in x, (P, n)

    mean = (w[..., None] * H).sum(1)
    best_value, _ = evaluate(mean)
    best = mean.clone()
    x = (1 - MIX) * mean + MIX / n
    history: list[Tensor] = []
    done = torch.zeros(P, dtype=torch.bool, device=H.device)
    last = best_value.clone()
    tiny = torch.finfo(H.dtype).tiny
    for t in range(numItermax):
        value, g = evaluate(x)
        better = value < best_value
        best_value = torch.where(better, value, best_value)
        best = torch.where(better[:, None], x, best)
        history.append(best_value.clone())
        gmax = g.abs().amax(-1, keepdim=True)
        done = done | (gmax[:, 0] == 0)  # a zero subgradient: x is optimal
        eta = torch.where(gmax > 0, 1.0 / gmax.clamp_min(tiny), 0) * STEP / math.sqrt(t + 1)
        logits = torch.log(x.clamp_min(tiny)) - eta * g
        # the normalised exponential by hand: torch.softmax on a few rows waits on its
        # thread pool (18 ms a call on a loaded 2-core machine)
        x = torch.exp(logits - logits.amax(-1, keepdim=True))
        x = x / x.sum(-1, keepdim=True)
        if (t + 1) % WINDOW == 0:
            scale = last.abs().clamp_min(tiny)
            done = done | ((last - best_value) <= stopThr * scale)
            last = best_value.clone()
        if bool(done.all()):
            break
    bary = best if batched else best[0]
    out = to_numpy(bary) if numpy else bary
    if not log:
        return out
    hist = torch.stack(history) if history else H.new_zeros((0, P))
    value = best_value if batched else best_value[0]
    if not batched:
        hist = hist[:, 0]
    record = {
        "objective": to_numpy(hist) if numpy else hist,
        "value": to_numpy(value) if numpy else value,
        "n_iter": len(history),
    }
    return out, record
