r"""Transport plans: the shared machinery of every plan of :mod:`tsw`, and the barycentric map.

A plan is kept as *entries*: source indices, target indices and masses, grouped into
slices (a projection of the sliced plans, a tree of the tree-sliced plans). This module
builds them and turns them into what the public functions return:

* :func:`northwest_corner` couples two weight sequences in their given order (the
  north-west corner rule: quantile ``q`` of one to quantile ``q`` of the other), and
  :func:`monotone_plan` sorts coordinates first, which gives the optimal plan on a line
  for every convex cost (the plan of :func:`ot.wasserstein_1d`);
* :func:`line_system_plan` gives an optimal plan for the tree metric of a system of
  lines: on each line the monotone plan with the line's imbalance moved to its root,
  then the roots' excesses coupled through the common root;
* :func:`plan_costs` evaluates the entries' costs in R^d, grouped by slice, with a
  gradient with respect to the points (the plan held fixed);
* :class:`Accumulator` sums weighted entries into a dense or sparse (COO) plan, torch or
  numpy (scipy, through POT's backend: ``tsw`` itself does not import scipy);
* :func:`barycentric_map`, public (re-exported by :mod:`tsw`): ``x_i -> sum_j P_ij y_j / a_i``.

Nothing here knows a method; :mod:`tsw.sliced._plans`, :mod:`tsw.sliced._swgg` and
:mod:`tsw.euclidean._tree_sliced_plan` use it, and :mod:`tsw.core.tree_plan` returns its
entries through :class:`Accumulator`.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from tsw.core._sort import argsort_last
from tsw.core._validation import check_bool, check_choice, check_p, check_tensor

__all__ = [
    "METRICS",
    "Accumulator",
    "PlanTuple",
    "SystemPlan",
    "barycentric_map",
    "check_metric",
    "grouped_plan_costs",
    "line_system_plan",
    "monotone_plan",
    "northwest_corner",
    "plan_costs",
]

#: POT's name for one slice's plan: the masses, source and target indices of its entries
PlanTuple = namedtuple("PlanTuple", ["data", "rows", "cols"])

#: the ground costs of POT's sliced plans (``ot.utils.sparse_ot_dist``)
METRICS = ("sqeuclidean", "euclidean", "cityblock", "minkowski")

#: elements (entries x d) gathered at once by :func:`plan_costs`: 32 MiB in float64
GATHER_ELEMENTS = 1 << 22


def check_metric(metric: object, p: object) -> tuple[str, float]:
    """Return ``(metric, p)`` as POT reads them: ``p`` is 2 for "euclidean", 1 for "cityblock".

    ``p`` is only read for ``"minkowski"`` (a finite real ``>= 1``), as in POT.
    """
    metric = check_choice(metric, "metric", METRICS)
    if metric == "minkowski":
        return metric, check_p(p)
    return metric, {"sqeuclidean": 2.0, "euclidean": 2.0, "cityblock": 1.0}[metric]


# --------------------------------------------------------------------------- 1-D plans


def northwest_corner(wa: Tensor, wb: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    r"""Couple two weight sequences in their order: quantile ``q`` of one to ``q`` of the other.

    Parameters
    ----------
    wa : Tensor of shape (..., n)
    wb : Tensor of shape (..., m)
        Non-negative weights with equal totals (up to rounding), in the order they are
        coupled; the leading dimensions agree.

    Returns
    -------
    ia, jb : Tensor of shape (..., n + m - 1), int64
        Indices into ``wa`` and ``wb`` of each entry.
    mass : Tensor of shape (..., n + m - 1)
        The mass of each entry; some are 0 (ties of the cumulative sums, zero weights).

    Notes
    -----
    The entries are the intervals between the sorted breakpoints of both cumulative
    sums :math:`U, V`: the interval :math:`(w_{k-1}, w_k]` belongs to the first atom
    whose cumulative sum reaches :math:`w_k` on each side. Sorting the breakpoints
    together gives both at once: a breakpoint of ``U`` ends atom ``i`` of ``wa`` and
    falls in the atom of ``wb`` after the breakpoints of ``V`` sorted before it, and
    conversely (one sort of ``n + m`` values and two cumulative counts, no binary
    search: ``torch.searchsorted`` on batched rows measured up to 1000x slower than on
    one row here, in its thread pool). Tied breakpoints end intervals of length 0, so
    their order does not matter. The last breakpoint, the larger total, is dropped, so
    a rounding gap between the totals is left out (a few ulps). Identical inputs give
    bit-identical cumulative sums, hence a diagonal coupling (the other entries are 0).
    """
    U = wa.cumsum(-1)
    V = wb.cumsum(-1)
    n, m = U.shape[-1], V.shape[-1]
    both = torch.cat([U, V], dim=-1)
    order = argsort_last(both)[..., :-1]
    w = torch.gather(both, -1, order)
    from_a = order < n
    ca = from_a.cumsum(-1)  # breakpoints of U up to here
    cb = (~from_a).cumsum(-1)
    ia = torch.where(from_a, ca - 1, ca).clamp_(max=n - 1)
    jb = torch.where(from_a, cb, cb - 1).clamp_(max=m - 1)
    mass = torch.diff(w, dim=-1, prepend=w.new_zeros((*w.shape[:-1], 1)))
    return ia, jb, mass


def monotone_plan(cs: Tensor, ct: Tensor, ws: Tensor, wt: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Return the optimal plan on a line between weighted atoms (sort, then north-west corner).

    ``cs`` (..., N) and ``ct`` (..., M) are the coordinates, ``ws`` and ``wt`` the weights
    (broadcastable to them). Returns ``rows`` (..., N + M - 1) and ``cols`` (int64 indices
    of the atoms in the input order) and ``mass``. The plan is monotone: it couples the
    quantiles of both measures, so it is optimal for every convex cost of the difference
    (``ot.wasserstein_1d``'s plan); atoms at equal coordinates are taken in the order of
    :func:`tsw.core._sort.argsort_last`, the same for two identical inputs.
    """
    ps = argsort_last(cs)
    pt = argsort_last(ct)
    wa = torch.gather(ws.expand(cs.shape), -1, ps)
    wb = torch.gather(wt.expand(ct.shape), -1, pt)
    ia, jb, mass = northwest_corner(wa, wb)
    return torch.gather(ps, -1, ia), torch.gather(pt, -1, jb), mass


class SystemPlan(NamedTuple):
    """Entries of one plan per tree on systems of lines (:func:`line_system_plan`).

    Every field has shape (..., E): the source point, its line, the target point, its
    line, and the mass moved from atom ``(rows, line_s)`` to atom ``(cols, line_t)``.
    Some masses are 0 (padding of the fixed shape).
    """

    rows: Tensor
    line_s: Tensor
    cols: Tensor
    line_t: Tensor
    mass: Tensor


def line_system_plan(cs: Tensor, ct: Tensor, ms: Tensor, mt: Tensor, *, star: bool) -> SystemPlan:
    r"""Return an optimal plan of the tree metric between masses on systems of lines.

    Parameters
    ----------
    cs, ct : Tensor of shape (..., k, N) and (..., k, M)
        Coordinates of the source and target atoms on each of the ``k`` lines of a tree,
        measured from the point where the line hangs from the rest of the tree (the
        root of a star).
    ms, mt : Tensor of shape (..., k, N) and (..., k, M)
        Their non-negative masses; the totals over the tree agree.
    star : bool
        Concurrent lines glued at their coordinate 0. Otherwise every line must balance
        on its own (a point-independent split, as TSW-SL's), whatever the gluing.

    Returns
    -------
    SystemPlan
        ``E = 3 k (N + M + 1) - 1`` entries per tree for a star, ``k (N + M - 1)``
        otherwise.

    Notes
    -----
    For the tree :math:`W_1` a plan is optimal if and only if no edge carries mass both
    ways; its cost is then :math:`\sum_e w_e |\mu(\Gamma_e) - \nu(\Gamma_e)|`. On a star,
    each line ``l`` with imbalance :math:`r_l = \mu_l - \nu_l` gets a virtual atom at
    its root, a target of mass :math:`r_l` (or a source of :math:`-r_l`); the monotone
    plan of the balanced line sends the mass nearest the root through it, so no edge of
    the line carries mass both ways. The mass each line sends to the root is then
    coupled with the mass the other lines take from it, in line order
    (:func:`northwest_corner`): every such pair's path goes through the root, and lines
    either only send or only receive. The cost on each line is its one-dimensional
    :math:`W_1` with the virtual atom, whose sum over the lines is the closed form of
    :func:`tsw.line_system_cost`. With one line (or balanced lines) this is the
    monotone plan of each line. O(k (N + M) log(N + M)) per tree, vectorised over all
    leading dimensions.
    """
    N, M = cs.shape[-1], ct.shape[-1]
    k = cs.shape[-2]
    lead = cs.shape[:-1]
    lines_of = torch.arange(k, device=cs.device).view(k, 1)
    if not star:
        rows, cols, mass = monotone_plan(cs, ct, ms, mt)
        line = lines_of.expand(rows.shape)
        flat = [x.flatten(-2) for x in (rows, line, cols, line, mass)]
        return SystemPlan(*flat)
    # sums taken apart for each side: identical sides balance exactly (no virtual mass)
    net = ms.sum(-1) - mt.sum(-1)  # (..., k)
    zero = cs.new_zeros((*lead, 1))
    cs1 = torch.cat([cs, zero], dim=-1)
    ct1 = torch.cat([ct, zero.expand((*ct.shape[:-1], 1))], dim=-1)
    ms1 = torch.cat([ms.expand(cs.shape), (-net).clamp_min(0).unsqueeze(-1)], dim=-1)
    mt1 = torch.cat([mt.expand(ct.shape), net.clamp_min(0).unsqueeze(-1)], dim=-1)
    rows, cols, mass = monotone_plan(cs1, ct1, ms1, mt1)  # (..., k, K), K = N + M + 1
    K = rows.shape[-1]
    real_s, real_t = rows < N, cols < M
    inside = mass.masked_fill(~(real_s & real_t), 0)
    up = mass.masked_fill(~(real_s & ~real_t), 0).flatten(-2)  # atom -> root
    down = mass.masked_fill(~(~real_s & real_t), 0).flatten(-2)  # root -> atom
    ia, jb, through = northwest_corner(up, down)  # (..., 2 k K - 1)
    flat_rows, flat_cols = rows.flatten(-2), cols.flatten(-2)
    line = lines_of.expand(rows.shape).flatten(-2)
    rows_all = torch.cat([flat_rows.clamp(max=N - 1), torch.gather(flat_rows, -1, ia)], dim=-1)
    cols_all = torch.cat([flat_cols.clamp(max=M - 1), torch.gather(flat_cols, -1, jb)], dim=-1)
    line_s = torch.cat([line, torch.div(ia, K, rounding_mode="floor")], dim=-1)
    line_t = torch.cat([line, torch.div(jb, K, rounding_mode="floor")], dim=-1)
    mass_all = torch.cat([inside.flatten(-2), through], dim=-1)
    # a padding entry may pair a virtual atom with a real one at mass 0: clamp its index
    return SystemPlan(
        rows_all.clamp_(max=N - 1), line_s, cols_all.clamp_(max=M - 1), line_t, mass_all
    )


# --------------------------------------------------------------------------- costs in R^d


def _entry_costs(diff: Tensor, metric: str, p: float) -> Tensor:
    """Return the ground cost of each difference ``x_i - y_j`` (rows of ``diff``)."""
    if metric == "sqeuclidean":
        return diff.square().sum(-1)
    if p == 1.0:
        return diff.abs().sum(-1)
    if p == 2.0:
        return torch.linalg.vector_norm(diff, dim=-1)
    return diff.abs().pow(p).sum(-1).pow(1.0 / p)


def _entry_grads(diff: Tensor, metric: str, p: float) -> Tensor:
    """Return the derivative of :func:`_entry_costs` in ``diff`` (0 where the cost is 0)."""
    if metric == "sqeuclidean":
        return 2 * diff
    if p == 1.0:
        return diff.sign()
    cost = _entry_costs(diff, metric, p).unsqueeze(-1)
    safe = torch.where(cost > 0, cost, torch.ones_like(cost))
    if p == 2.0:
        return torch.where(cost > 0, diff / safe, torch.zeros_like(diff))
    g = diff.sign() * diff.abs().pow(p - 1) / safe.pow(p - 1)
    return torch.where(cost > 0, g, torch.zeros_like(diff))


def _spans(n_entries: int, d: int, chunk: int | None) -> list[tuple[int, int]]:
    size = chunk if chunk is not None else max(1, GATHER_ELEMENTS // max(d, 1))
    return [(i, min(i + size, n_entries)) for i in range(0, n_entries, size)]


class _PlanCost(torch.autograd.Function):
    """``sum_e mass_e c(x_{rows_e}, y_{cols_e})`` per group, the entries gathered in chunks.

    The masses and indices are constants (the plan held fixed); the backward pass
    gathers the chunks again and adds ``mass * g * dc/dx`` into the points' gradients,
    so no (entries, d) tensor outlives a chunk.
    """

    @staticmethod
    def forward(ctx, X_s, X_t, rows, cols, mass, group, n_groups, metric, p, chunk):
        d = X_s.shape[-1]
        per_entry = mass.new_empty(mass.shape)
        with torch.no_grad():
            for i, j in _spans(rows.shape[0], d, chunk):
                diff = X_s.index_select(0, rows[i:j]) - X_t.index_select(0, cols[i:j])
                per_entry[i:j] = _entry_costs(diff, metric, p)
        out = mass.new_zeros(n_groups).index_add_(0, group, per_entry.mul_(mass))
        ctx.save_for_backward(X_s, X_t, rows, cols, mass, group)
        ctx.config = (metric, p, chunk)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        X_s, X_t, rows, cols, mass, group = ctx.saved_tensors
        metric, p, chunk = ctx.config
        need_s, need_t = ctx.needs_input_grad[:2]
        gs = torch.zeros_like(X_s) if need_s else None
        gt = torch.zeros_like(X_t) if need_t else None
        weight = g.index_select(0, group).mul_(mass)
        for i, j in _spans(rows.shape[0], X_s.shape[-1], chunk):
            diff = X_s.index_select(0, rows[i:j]) - X_t.index_select(0, cols[i:j])
            part = _entry_grads(diff, metric, p).mul_(weight[i:j, None])
            if gs is not None:
                gs.index_add_(0, rows[i:j], part)
            if gt is not None:
                gt.index_add_(0, cols[i:j], part, alpha=-1)
        return gs, gt, None, None, None, None, None, None, None, None


def plan_costs(
    X_s: Tensor,
    X_t: Tensor,
    rows: Tensor,
    cols: Tensor,
    mass: Tensor,
    metric: str,
    p: float,
    *,
    chunk: int | None = None,
) -> Tensor:
    """Cost in R^d of each slice's plan: ``sum_e mass_e c(x_rows_e, y_cols_e)``, shape (B, S).

    ``X_s`` (B, N, d), ``X_t`` (B, M, d); ``rows``, ``cols``, ``mass`` (B, S, E) for ``S``
    slices of ``E`` entries each. Differentiable with respect to the points, the plan
    (indices and masses, detached) held fixed; the gradient is finite where a cost is 0
    (a zero subgradient for the non-smooth metrics). ``chunk`` entries are gathered at
    once (by default about :data:`GATHER_ELEMENTS` / d).
    """
    S = rows.shape[1]
    group = torch.arange(S, device=rows.device).view(1, S, 1).expand(rows.shape)
    return grouped_plan_costs(X_s, X_t, rows, cols, mass, group, S, metric, p, chunk=chunk)


def grouped_plan_costs(
    X_s: Tensor,
    X_t: Tensor,
    rows: Tensor,
    cols: Tensor,
    mass: Tensor,
    group: Tensor,
    n_groups: int,
    metric: str,
    p: float,
    *,
    chunk: int | None = None,
    keep: Tensor | None = None,
) -> Tensor:
    """:func:`plan_costs` with each entry's slice given: ``group`` (B, ...) in [0, n_groups).

    ``rows``, ``cols``, ``mass`` and ``group`` have one shape (B, ...); ``keep`` (a
    boolean mask of that shape) selects the entries that count (the non-zero ones).
    Returns (B, n_groups).
    """
    B, N, d = X_s.shape
    M = X_t.shape[1]
    item = torch.arange(B, device=rows.device).view((B,) + (1,) * (rows.dim() - 1))
    flat_rows = rows + item * N
    flat_cols = cols + item * M
    flat_group = group + item * n_groups
    flat_mass = mass.detach()
    if keep is not None:
        flat_rows, flat_cols = flat_rows[keep], flat_cols[keep]
        flat_group, flat_mass = flat_group[keep], flat_mass[keep]
    out = _PlanCost.apply(
        X_s.reshape(B * N, d),
        X_t.reshape(B * M, d),
        flat_rows.reshape(-1),
        flat_cols.reshape(-1),
        flat_mass.reshape(-1),
        flat_group.reshape(-1),
        B * n_groups,
        metric,
        p,
        chunk,
    )
    return out.view(B, n_groups)


# --------------------------------------------------------------------------- assembly


class Accumulator:
    """Sum weighted entries into one plan per batch item: dense, or sparse COO.

    ``add(rows, cols, values)`` takes (B, E) tensors (entries of each item), as many
    times as there are blocks; :meth:`result` returns a (B, N, M) or (N, M) dense tensor,
    a torch sparse COO tensor (coalesced, zeros dropped), or for numpy inputs a numpy
    array or a scipy ``coo_array`` (a list of them for batched inputs).
    """

    def __init__(
        self,
        B: int,
        N: int,
        M: int,
        like: Tensor,
        *,
        dense: bool,
        batched: bool,
        numpy: bool,
        lead: tuple[int, ...] | None = None,
    ):
        self.B, self.N, self.M = B, N, M
        self.dense, self.batched, self.numpy = dense, batched, numpy
        #: the batch shape of the result (the items in C order): (B,) or () by default
        self.lead = lead if lead is not None else ((B,) if batched else ())
        self.like = like
        self.parts: list[tuple[Tensor, Tensor]] = []
        self.full = like.new_zeros(B, N * M) if dense else None

    def add(self, rows: Tensor, cols: Tensor, values: Tensor, item: int | None = None) -> None:
        """Add the (B, E) entries ``values`` at ``(rows, cols)`` of each item.

        With ``item``, the (E,) entries of that item alone.
        """
        values = values.detach().to(self.like.dtype)
        keys = rows * self.M + cols
        if item is not None:
            keys, values = keys.view(1, -1), values.view(1, -1)
            first = torch.full((1, 1), item, dtype=keys.dtype, device=keys.device)
        else:
            first = torch.arange(self.B, device=keys.device).view(self.B, 1)
        if self.full is not None:
            if item is None:
                self.full.scatter_add_(1, keys, values)
            else:
                self.full[item].scatter_add_(0, keys[0], values[0])
            return
        keys = (keys + first * (self.N * self.M)).reshape(-1)
        values = values.reshape(-1)
        keep = values != 0
        self.parts.append((keys[keep], values[keep]))

    def result(self) -> Any:
        """Return the plan (see the class docstring)."""
        B, N, M = self.B, self.N, self.M
        if self.full is not None:
            plan = self.full.view(*self.lead, N, M)
            return _numpy(plan) if self.numpy else plan
        keys = (
            torch.cat([k for k, _ in self.parts]) if self.parts else self.like.new_zeros(0).long()
        )
        values = torch.cat([v for _, v in self.parts]) if self.parts else self.like.new_zeros(0)
        keys, values = _coalesce(keys, values)
        item, rest = torch.div(keys, N * M, rounding_mode="floor"), keys % (N * M)
        rows, cols = torch.div(rest, M, rounding_mode="floor"), rest % M
        if self.numpy:
            from ot.backend import NumpyBackend  # scipy's coo_array, through POT

            nb = NumpyBackend()
            it, r, c, v = (_numpy(t) for t in (item, rows, cols, values))
            mats = [
                nb.coo_matrix(v[it == i], r[it == i], c[it == i], shape=(N, M)) for i in range(B)
            ]
            return mats if self.lead else mats[0]
        parts = []
        for n in reversed(self.lead):  # the item's index in the batch shape, C order
            parts.append(item % n)
            item = torch.div(item, n, rounding_mode="floor")
        index = torch.stack([*reversed(parts), rows, cols])
        size = (*self.lead, N, M)
        return torch.sparse_coo_tensor(
            index, values, size, is_coalesced=True, check_invariants=False
        )


def _coalesce(keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
    """Sorted unique ``keys`` and the sums of their ``values``.

    On the CPU through NumPy (a sort of the int64 keys, then one segmented sum), which
    measured faster than ``Tensor.coalesce``; elsewhere ``torch.unique``.
    """
    if keys.numel() == 0:
        return keys, values
    if keys.device.type == "cpu":
        k = keys.numpy()
        order = np.argsort(k, kind="stable")
        k = k[order]
        starts = np.flatnonzero(np.concatenate([[True], k[1:] != k[:-1]]))
        sums = np.add.reduceat(values.numpy()[order], starts)
        return torch.from_numpy(k[starts]), torch.from_numpy(sums)
    unique, inverse = torch.unique(keys, sorted=True, return_inverse=True)
    return unique, values.new_zeros(unique.shape).index_add_(0, inverse, values)


def _numpy(t: Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


# --------------------------------------------------------------------------- barycentric map


def _is_scipy_sparse(x: object) -> bool:
    return hasattr(x, "tocsr") and hasattr(x, "shape") and not isinstance(x, np.ndarray | Tensor)


def barycentric_map(
    plan: Any, X_t: Any, *, X_s: Any = None, validate: bool = True
) -> Tensor | np.ndarray:
    r"""Map each source point to the mean of its targets under a plan (barycentric map).

    .. math::

        T(x_i) = \frac{\sum_j P_{ij}\, y_j}{\sum_j P_{ij}},

    where the denominator is the source weight :math:`a_i` for a plan with marginals
    ``a`` and ``b``. For an optimal plan of the squared Euclidean cost this is the
    usual estimate of the Monge map (Ferradans et al. 2014, [Ferradans2014]_); with a
    sliced or tree-sliced plan it maps each point to the mean of the targets that plan
    sends it to (colour transfer, registration, domain adaptation).

    Parameters
    ----------
    plan : Tensor or ndarray of shape (N, M) or (B, N, M), torch sparse COO, or scipy sparse
        A plan, as returned by the plan functions (dense or sparse; a list of scipy
        matrices for batched numpy plans).
    X_t : Tensor or ndarray of shape (M, d) or (B, M, d)
        The target points.
    X_s : Tensor or ndarray of shape (N, d) or (B, N, d), optional
        The source points: a row of the plan with no mass then maps its point to
        itself. Without it such a row raises (with ``validate``).
    validate : bool, default True
        Check for rows without mass (a device synchronisation).

    Returns
    -------
    Tensor or ndarray of shape (N, d) or (B, N, d)
        numpy for numpy (or scipy) plans. Differentiable with respect to ``X_t`` (and the
        dense plan's values).

    Raises
    ------
    TypeError
        For a plan or points of another kind.
    ValueError
        For shapes that do not fit, or (``validate``) a row without mass and no ``X_s``.

    References
    ----------
    .. [Ferradans2014] S. Ferradans, N. Papadakis, G. Peyré, J.-F. Aujol. Regularized
       discrete optimal transport. SIAM Journal on Imaging Sciences, 2014.

    Examples
    --------
    >>> import torch, tsw
    >>> plan = torch.tensor([[0.25, 0.25], [0.0, 0.5]])
    >>> tsw.barycentric_map(plan, torch.tensor([[0.0, 0.0], [2.0, 0.0]]))
    tensor([[1., 0.],
            [2., 0.]])
    """
    validate = check_bool(validate, "validate")
    if isinstance(plan, list):
        if not plan:
            raise ValueError("plan must be a non-empty list of scipy sparse matrices")
        Y = np.asarray(X_t)
        if Y.ndim != 3 or Y.shape[0] != len(plan):
            raise ValueError(
                f"X_t must have shape (B, M, d) with B={len(plan)} for a list of plans; got "
                f"X_t.shape={tuple(Y.shape)}"
            )
        Xs = None if X_s is None else np.asarray(X_s)
        return np.stack(
            [
                barycentric_map(p, Y[i], X_s=None if Xs is None else Xs[i], validate=validate)
                for i, p in enumerate(plan)
            ]
        )
    if _is_scipy_sparse(plan) or isinstance(plan, np.ndarray):
        return _numpy_barycentric_map(plan, X_t, X_s, validate)
    if not isinstance(plan, Tensor):
        raise TypeError(
            "plan must be a torch.Tensor (dense or sparse COO), a numpy array, a scipy sparse "
            f"matrix or a list of them; got {type(plan).__name__}"
        )
    return _torch_barycentric_map(plan, X_t, X_s, validate)


def _numpy_barycentric_map(plan: Any, X_t: Any, X_s: Any, validate: bool) -> np.ndarray:
    """:func:`barycentric_map` of a numpy array or a scipy sparse matrix."""
    if not isinstance(X_t, np.ndarray):
        raise TypeError(
            f"X_t must be a numpy array for a numpy or scipy plan; got {type(X_t).__name__}"
        )
    sparse = _is_scipy_sparse(plan)
    P = plan.tocsr() if sparse else plan
    if P.ndim == 2 and X_t.ndim == 2 and P.shape[1] == X_t.shape[0]:
        moved = np.asarray(P @ X_t)
        mass = np.asarray(P.sum(axis=1)).reshape(-1, 1)
    elif not sparse and P.ndim == 3 and X_t.ndim == 3 and P.shape[::2] == X_t.shape[:2]:
        moved = P @ X_t
        mass = P.sum(-1, keepdims=True)
    else:
        raise ValueError(
            "plan (N, M) or (B, N, M) and X_t (M, d) or (B, M, d) must agree on M (and "
            f"B); got plan.shape={tuple(P.shape)} and X_t.shape={tuple(X_t.shape)}"
        )
    empty = mass == 0
    if empty.any():
        if X_s is None:
            _no_mass(validate, empty)
        else:
            return np.where(empty, np.asarray(X_s), moved / np.where(empty, 1, mass))
    return moved / mass


def _torch_barycentric_map(plan: Tensor, X_t: Any, X_s: Any, validate: bool) -> Tensor:
    """:func:`barycentric_map` of a dense or sparse COO tensor."""
    X_t = check_tensor(X_t, "X_t")
    dims_ok = plan.dim() in (2, 3) and X_t.dim() == plan.dim() and plan.shape[-1] == X_t.shape[-2]
    if not dims_ok or (plan.dim() == 3 and plan.shape[0] != X_t.shape[0]):
        raise ValueError(
            "plan (N, M) or (B, N, M) and X_t (M, d) or (B, M, d) must agree on M (and B); "
            f"got plan.shape={tuple(plan.shape)} and X_t.shape={tuple(X_t.shape)}"
        )
    if plan.dtype != X_t.dtype or plan.device != X_t.device:
        raise ValueError(
            f"plan must have the dtype and device of X_t ({X_t.dtype} on {X_t.device}); got "
            f"{plan.dtype} on {plan.device}"
        )
    if plan.is_sparse:
        moved = torch.sparse.mm(plan, X_t) if plan.dim() == 2 else torch.bmm(plan, X_t)
        mass = torch.sparse.sum(plan, dim=-1).to_dense().unsqueeze(-1)
    else:
        moved = plan @ X_t
        mass = plan.sum(-1, keepdim=True)
    empty = mass == 0
    if X_s is not None:
        X_s = check_tensor(X_s, "X_s")
        if X_s.shape != moved.shape:
            raise ValueError(
                f"X_s must have shape {tuple(moved.shape)} (one row per row of the plan); got "
                f"X_s.shape={tuple(X_s.shape)}"
            )
        return torch.where(empty, X_s, moved / torch.where(empty, torch.ones_like(mass), mass))
    if validate and bool(empty.any()):
        _no_mass(validate, empty)
    return moved / mass


def _no_mass(validate: bool, empty: Any) -> None:
    if validate:
        flags = empty.detach().cpu().numpy() if isinstance(empty, Tensor) else np.asarray(empty)
        rows = np.flatnonzero(flags.reshape(-1))
        raise ValueError(
            f"plan has rows without mass (the first at flat row {int(rows[0])}): their image "
            "is undefined; pass X_s to map those points to themselves"
        )
