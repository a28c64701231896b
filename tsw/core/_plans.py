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
* :func:`plan_problem` validates a plan function's measures and builds its random
  stream, the options every plan function shares, in one place.

The barycentric map of a plan is in :mod:`tsw.core._barycentric`.

Nothing here knows a method; :mod:`tsw.sliced._plans`, :mod:`tsw.sliced._swgg` and
:mod:`tsw.euclidean._tree_sliced_plan` use it, and :mod:`tsw.core.tree_plan` returns its
entries through :class:`Accumulator`.
"""

from __future__ import annotations

import itertools
from collections import namedtuple
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from tsw.core._problem import Problem, build
from tsw.core._random import Seed
from tsw.core._safe import safe_root
from tsw.core._sort import argsort_last
from tsw.core._twice import building_graph, graph_backward
from tsw.core._validation import check_bool, check_choice, check_p

__all__ = [
    "METRICS",
    "Accumulator",
    "PlanTuple",
    "SystemPlan",
    "check_metric",
    "grouped_plan_costs",
    "line_system_plan",
    "monotone_plan",
    "northwest_corner",
    "plan_costs",
    "plan_problem",
]

#: POT's name for one slice's plan: the masses, source and target indices of its entries
PlanTuple = namedtuple("PlanTuple", ["data", "rows", "cols"])

#: the ground costs of POT's sliced plans (``ot.utils.sparse_ot_dist``)
METRICS = ("sqeuclidean", "euclidean", "cityblock", "minkowski")

#: elements (entries x d) that :func:`plan_costs` gathers at once on the CPU: 1 MiB in
#: float64, so that a chunk's rows and their difference stay in cache. Measured on 4e5
#: entries, d = 64, float64, side by side (a shared machine): chunks of 2^22 elements took
#: 4.5x the time of chunks of 2^18 in torch with one thread (out of cache)
CPU_GATHER_ELEMENTS = 1 << 17
#: the same on other devices (a GPU gathers from memory at any size)
GATHER_ELEMENTS = 1 << 22
#: on the CPU, squared Euclidean costs are read from the (B, N, M) Gram matrix of the
#: centred points (in float64) when it has at most this many elements: at N = M = 2000,
#: d = 64, 4e5 entries, it took 0.37-0.84x the time of the gathered differences
GRAM_ELEMENTS = 1 << 22
#: and when the points have at least this many coordinates: at d = 2 the gathered
#: differences took 0.73-0.78x the Gram matrix's time (N = M = 2000, 4e5 entries)
GRAM_MIN_DIM = 3
#: ``|x|^2 + |y|^2 - 2 <x, y>`` in float64 errs by at most about ``(d + 3) 2^-53`` times
#: ``|x|^2 + |y|^2``; an entry whose Gram value is under ``(d + 3) 2^-53 2^GRAM_BITS``
#: times that is recomputed from its exact difference, so every kept value is within
#: ``2^-GRAM_BITS`` of its own (relative); the others (nearby points, identical measures)
#: are exact differences
GRAM_BITS = 40


def plan_problem(
    X_s: object,
    X_t: object,
    a: object,
    b: object,
    seed: Seed,
    generator: torch.Generator | None,
    validate: object,
) -> Problem:
    """Build the problem of a plan function: the measures, numpy in/out, the random stream.

    The options every plan function shares (``seed``, ``generator``, ``validate``) are
    checked and bound here, once; a plan is not a distance (no value to finish), so
    :func:`tsw.core._api.distance` does not apply.
    """
    return build(
        X_s,
        X_t,
        a,
        b,
        p=1,
        seed=seed,
        generator=generator,
        validate=check_bool(validate, "validate"),
    )


def check_metric(metric: object, p: object) -> tuple[str, float]:
    """Return ``(metric, p)`` as POT reads them: ``p`` is 2 for "euclidean", 1 for "cityblock".

    ``p`` is only read for ``"minkowski"`` (a finite real ``>= 1``), as in POT.
    """
    metric = check_choice(metric, "metric", METRICS)
    if metric == "minkowski":
        return metric, check_p(p)
    return metric, {"sqeuclidean": 2.0, "euclidean": 2.0, "cityblock": 1.0}[metric]


# --------------------------------------------------------------------------- 1-D plans
#
# The entries of the plans are built with NumPy on the CPU and with torch elsewhere:
# the same code runs on either through the few helpers below. NumPy runs in the calling
# thread; torch's elementwise operations on 4e5 entries took 30-50x longer than NumPy's
# here on a machine whose cores were shared (its thread pool waits for busy cores), and
# about as long on one thread.

Array = Any  # a numpy array (CPU) or a torch tensor (other devices)


def _numpy_side(*xs: Tensor) -> bool:
    """Whether the entries of these tensors are handled by NumPy (all on the CPU).

    The one switch between the two paths (the tests force the torch path with it).
    """
    return all(x.device.type == "cpu" for x in xs)


def _arrays(*xs: Tensor) -> list[Array]:
    """Return the tensors as NumPy views on the CPU (detached), as themselves elsewhere."""
    if _numpy_side(*xs):
        return [x.detach().numpy() for x in xs]
    return [x.detach() for x in xs]


def _tensors(*xs: Array) -> list[Tensor]:
    return [
        torch.from_numpy(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else x for x in xs
    ]


def _cumsum(x: Array) -> Array:
    return np.cumsum(x, axis=-1) if isinstance(x, np.ndarray) else x.cumsum(-1)


def _cat(xs: list[Array]) -> Array:
    if isinstance(xs[0], np.ndarray):
        return np.concatenate(xs, axis=-1)
    return torch.cat(xs, dim=-1)


def _argsort(x: Array) -> Array:
    if isinstance(x, np.ndarray):
        return argsort_last(torch.from_numpy(np.ascontiguousarray(x))).numpy()
    return argsort_last(x)


def _take(x: Array, index: Array) -> Array:
    """``x`` (broadcast to ``index``'s leading shape) gathered along its last axis."""
    shape = (*index.shape[:-1], x.shape[-1])
    if isinstance(x, np.ndarray):
        return np.take_along_axis(np.broadcast_to(x, shape), index, axis=-1)
    return torch.gather(x.expand(shape), -1, index)


def _where(cond: Array, a: Array, b: Array) -> Array:
    return np.where(cond, a, b) if isinstance(cond, np.ndarray) else torch.where(cond, a, b)


def _clip_max(x: Array, top: int) -> Array:
    return np.minimum(x, top) if isinstance(x, np.ndarray) else x.clamp(max=top)


def _zeros_like_last(x: Array, shape: tuple[int, ...]) -> Array:
    if isinstance(x, np.ndarray):
        return np.zeros(shape, dtype=x.dtype)
    return x.new_zeros(shape)


def _northwest(wa: Array, wb: Array) -> tuple[Array, Array, Array]:
    """:func:`northwest_corner` on arrays of either kind."""
    U, V = _cumsum(wa), _cumsum(wb)
    n, m = U.shape[-1], V.shape[-1]
    both = _cat([U, V])
    order = _argsort(both)[..., :-1]
    w = _take(both, order)
    from_a = order < n
    ca = _cumsum(from_a)  # breakpoints of U up to here
    cb = _cumsum(~from_a)
    ia = _clip_max(_where(from_a, ca - 1, ca), n - 1)
    jb = _clip_max(_where(from_a, cb, cb - 1), m - 1)
    mass = w - _cat([_zeros_like_last(w, (*w.shape[:-1], 1)), w[..., :-1]])
    return ia, jb, mass


def _monotone(cs: Array, ct: Array, ws: Array, wt: Array) -> tuple[Array, Array, Array]:
    """:func:`monotone_plan` on arrays of either kind."""
    ps, pt = _argsort(cs), _argsort(ct)
    ia, jb, mass = _northwest(_take(ws, ps), _take(wt, pt))
    return _take(ps, ia), _take(pt, jb), mass


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
    ia, jb, mass = _northwest(*_arrays(wa, wb))
    return tuple(_tensors(ia, jb, mass))  # type: ignore[return-value]


def monotone_plan(cs: Tensor, ct: Tensor, ws: Tensor, wt: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Return the optimal plan on a line between weighted atoms (sort, then north-west corner).

    ``cs`` (..., N) and ``ct`` (..., M) are the coordinates, ``ws`` and ``wt`` the weights
    (broadcastable to them). Returns ``rows`` (..., N + M - 1) and ``cols`` (int64 indices
    of the atoms in the input order) and ``mass``. The plan is monotone: it couples the
    quantiles of both measures, so it is optimal for every convex cost of the difference
    (``ot.wasserstein_1d``'s plan); atoms at equal coordinates are taken in the order of
    :func:`tsw.core._sort.argsort_last`, the same for two identical inputs.
    """
    rows, cols, mass = _monotone(*_arrays(cs, ct, ws, wt))
    return tuple(_tensors(rows, cols, mass))  # type: ignore[return-value]


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
    cs_, ct_, ms_, mt_ = _arrays(cs, ct, ms.expand(cs.shape), mt.expand(ct.shape))
    N, M = cs.shape[-1], ct.shape[-1]
    k = cs.shape[-2]
    numpy = isinstance(cs_, np.ndarray)
    lines_of: Array = (
        np.arange(k).reshape(k, 1) if numpy else torch.arange(k, device=cs.device).view(k, 1)
    )

    def flat(x: Array) -> Array:
        return x.reshape(*x.shape[:-2], -1)

    def lines(shape: tuple[int, ...]) -> Array:
        return np.broadcast_to(lines_of, shape) if numpy else lines_of.expand(shape)

    if not star:
        rows, cols, mass = _monotone(cs_, ct_, ms_, mt_)
        line = flat(lines(rows.shape))
        return SystemPlan(*_tensors(flat(rows), line, flat(cols), line, flat(mass)))
    # sums taken apart for each side: identical sides balance exactly (no virtual mass)
    net = ms_.sum(-1) - mt_.sum(-1)  # (..., k)
    excess = (net * (net > 0))[..., None]  # the line's mass for the root
    deficit = (-net * (net < 0))[..., None]  # what the line takes from the root
    zero_s = _zeros_like_last(cs_, (*cs_.shape[:-1], 1))
    zero_t = _zeros_like_last(ct_, (*ct_.shape[:-1], 1))
    rows, cols, mass = _monotone(
        _cat([cs_, zero_s]), _cat([ct_, zero_t]), _cat([ms_, deficit]), _cat([mt_, excess])
    )  # (..., k, K), K = N + M + 1: the virtual atoms are N and M
    K = rows.shape[-1]
    real_s, real_t = rows < N, cols < M
    inside = mass * (real_s & real_t)
    up = flat(mass * (real_s & ~real_t))  # atom -> root
    down = flat(mass * (~real_s & real_t))  # root -> atom
    ia, jb, through = _northwest(up, down)  # (..., 2 k K - 1)
    flat_rows, flat_cols = flat(rows), flat(cols)
    line = flat(lines(rows.shape))
    # padding entries may pair a virtual atom with a real one at mass 0: clip the index
    rows_all = _clip_max(_cat([flat_rows, _take(flat_rows, ia)]), N - 1)
    cols_all = _clip_max(_cat([flat_cols, _take(flat_cols, jb)]), M - 1)
    line_s = _cat([line, ia // K])
    line_t = _cat([line, jb // K])
    mass_all = _cat([flat(inside), through])
    return SystemPlan(*_tensors(rows_all, line_s, cols_all, line_t, mass_all))


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


def _spans(n_entries: int, d: int, chunk: int | None, cpu: bool) -> list[tuple[int, int]]:
    budget = CPU_GATHER_ELEMENTS if cpu else GATHER_ELEMENTS
    size = chunk if chunk is not None else max(1, budget // max(d, 1))
    return [(i, min(i + size, n_entries)) for i in range(0, n_entries, size)]


def numpy_costs(diff: np.ndarray, metric: str, p: float) -> np.ndarray:
    """Return :func:`_entry_costs` in NumPy (rows of ``diff``)."""
    if metric == "sqeuclidean":
        return np.einsum("ij,ij->i", diff, diff)
    if p == 1.0:
        return np.abs(diff).sum(-1)
    if p == 2.0:
        return np.sqrt(np.einsum("ij,ij->i", diff, diff))
    return (np.abs(diff) ** p).sum(-1) ** (1.0 / p)


def _gram_costs(X_s: Tensor, X_t: Tensor, rows: Tensor, cols: Tensor) -> Tensor:
    """Squared Euclidean entry costs from the Gram matrix, exact where it would cancel.

    The points are centred (in float64) to shrink ``|x|^2 + |y|^2``; an entry whose
    value is small against it (:data:`GRAM_BITS`: a move small against the points'
    spread, a point and itself) is recomputed as the squared norm of the difference of
    the original points in float64 (no cancellation). The values are thus never
    negative, 0 between equal points, and within about ``2^-GRAM_BITS`` (relative) of
    the differences' everywhere, at any translation of the data.
    """
    B, N, d = X_s.shape
    M = X_t.shape[1]
    X0, Y0 = X_s.detach().double(), X_t.detach().double()
    shift = 0.5 * (X0.mean(1, keepdim=True) + Y0.mean(1, keepdim=True))
    Xs, Xt = X0 - shift, Y0 - shift
    gram = torch.bmm(Xs, Xt.mT).numpy().reshape(-1)
    sx = np.einsum("bnd,bnd->bn", Xs.numpy(), Xs.numpy()).reshape(-1)
    sy = np.einsum("bnd,bnd->bn", Xt.numpy(), Xt.numpy()).reshape(-1)
    r, c = rows.numpy(), cols.numpy()
    item = r // N
    scale = sx[r] + sy[c]
    values = gram[item * (N * M) + (r - item * N) * M + (c - item * M)]
    values *= -2
    values += scale
    scale *= (d + 3) * 2.0 ** (GRAM_BITS - 53)
    loose = np.flatnonzero(values <= scale)
    if loose.size:
        xs, xt = X0.reshape(B * N, d).numpy(), Y0.reshape(B * M, d).numpy()
        for i, j in _spans(loose.size, d, None, True):
            k = loose[i:j]
            values[k] = numpy_costs(xs[r[k]] - xt[c[k]], "sqeuclidean", 2.0)
    return torch.from_numpy(values).to(X_s.dtype)


def _cost_values(
    X_s: Tensor,
    X_t: Tensor,
    rows: Tensor,
    cols: Tensor,
    metric: str,
    p: float,
    chunk: int | None,
) -> Tensor:
    """Return the cost of every entry, (E,), without a graph.

    ``X_s`` (B, N, d) and ``X_t`` (B, M, d); ``rows`` and ``cols`` index the flattened
    (B N, d) and (B M, d) points. On the CPU: the squared Euclidean cost from the Gram
    matrix of the centred points when it is small (:data:`GRAM_ELEMENTS`), else the
    differences gathered by NumPy a cache-sized chunk at a time (NumPy runs them in this
    thread: torch's thread pool took 2-9x longer here on a loaded machine); elsewhere
    torch gathers in large chunks.
    """
    B, N, d = X_s.shape
    M = X_t.shape[1]
    cpu = _numpy_side(X_s)
    gram = metric == "sqeuclidean" and chunk is None and d >= GRAM_MIN_DIM
    if cpu and gram and B * N * M <= GRAM_ELEMENTS:
        return _gram_costs(X_s, X_t, rows, cols)
    Xs = X_s.detach().reshape(B * N, d)
    Xt = X_t.detach().reshape(B * M, d)
    out = Xs.new_empty(rows.shape)
    spans = _spans(rows.shape[0], d, chunk, cpu)
    if cpu:
        xs, xt, r, c, o = (t.numpy() for t in (Xs, Xt, rows, cols, out))
        for i, j in spans:
            o[i:j] = numpy_costs(xs[r[i:j]] - xt[c[i:j]], metric, p)
        return out
    for i, j in spans:
        diff = Xs.index_select(0, rows[i:j]) - Xt.index_select(0, cols[i:j])
        out[i:j] = _entry_costs(diff, metric, p)
    return out


def _graph_costs(
    X_s: Tensor,
    X_t: Tensor,
    rows: Tensor,
    cols: Tensor,
    mass: Tensor,
    group: Tensor,
    n_groups: int,
    metric: str,
    p: float,
) -> Tensor:
    """:class:`_PlanCost`'s forward in differentiable torch operations (for its graph).

    Every entry's difference at once (only a gradient with ``create_graph`` reads it):
    its first derivative is that of :func:`_entry_grads`, 0 where a cost is 0.
    """
    d = X_s.shape[-1]
    diff = X_s.reshape(-1, d).index_select(0, rows) - X_t.reshape(-1, d).index_select(0, cols)
    if metric == "sqeuclidean" or p == 1.0:
        cost = _entry_costs(diff, metric, p)
    else:  # the p-th root where the cost is not 0 (its derivative is infinite there)
        power = diff.square().sum(-1) if p == 2.0 else diff.abs().pow(p).sum(-1)
        cost = safe_root(power, p)
    per_entry = cost.to(mass.dtype) * mass
    return mass.new_zeros(n_groups).index_add(0, group, per_entry)


class _PlanCost(torch.autograd.Function):
    """``sum_e mass_e c(x_{rows_e}, y_{cols_e})`` per group, the entries gathered in chunks.

    ``X_s`` (B, N, d), ``X_t`` (B, M, d); ``rows`` and ``cols`` index their flattened
    rows. The masses and indices are constants (the plan held fixed); the backward pass
    gathers the chunks again and adds ``mass * g * dc/dx`` into the points' gradients,
    so no (entries, d) tensor outlives a chunk. A gradient with ``create_graph`` (a
    Hessian-vector product, a gradient penalty) differentiates :func:`_graph_costs`
    instead: exact second derivatives, the plan still held fixed.
    """

    @staticmethod
    def forward(ctx, X_s, X_t, rows, cols, mass, group, n_groups, metric, p, chunk):
        per_entry = _cost_values(X_s, X_t, rows, cols, metric, p, chunk)
        if _numpy_side(per_entry):
            sums = np.bincount(
                group.numpy(), weights=per_entry.numpy() * mass.numpy(), minlength=n_groups
            )
            out = torch.from_numpy(sums).to(mass.dtype)
        else:
            out = mass.new_zeros(n_groups).index_add_(0, group, per_entry.mul_(mass))
        ctx.save_for_backward(X_s, X_t, rows, cols, mass, group)
        ctx.config = (metric, p, chunk, n_groups)
        return out

    @staticmethod
    def backward(ctx, g):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        X_s, X_t, rows, cols, mass, group = ctx.saved_tensors
        metric, p, chunk, n_groups = ctx.config
        need_s, need_t = ctx.needs_input_grad[:2]
        if building_graph():  # create_graph: differentiate the costs written in torch
            gs, gt = graph_backward(
                lambda xs, xt: _graph_costs(xs, xt, rows, cols, mass, group, n_groups, metric, p),
                (X_s, X_t),
                (need_s, need_t),
                g,
            )
            return (gs, gt, *([None] * 8))
        d = X_s.shape[-1]
        Xs, Xt = X_s.reshape(-1, d), X_t.reshape(-1, d)
        gs = torch.zeros_like(Xs) if need_s else None
        gt = torch.zeros_like(Xt) if need_t else None
        weight = g.index_select(0, group).mul_(mass)
        for i, j in _spans(rows.shape[0], d, chunk, _numpy_side(X_s)):
            diff = Xs.index_select(0, rows[i:j]) - Xt.index_select(0, cols[i:j])
            part = _entry_grads(diff, metric, p).mul_(weight[i:j, None])
            if gs is not None:
                gs.index_add_(0, rows[i:j], part)
            if gt is not None:
                gt.index_add_(0, cols[i:j], part, alpha=-1)
        return (
            None if gs is None else gs.view(X_s.shape),
            None if gt is None else gt.view(X_t.shape),
            *([None] * 8),
        )


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
    slices of ``E`` entries each. Twice differentiable with respect to the points, the
    plan (indices and masses, detached) held fixed; the gradient is finite where a cost
    is 0 (a zero subgradient for the non-smooth metrics). ``chunk`` entries are gathered at
    once (by default about :data:`CPU_GATHER_ELEMENTS` / d on the CPU, where small
    squared Euclidean problems read a Gram matrix instead, and :data:`GATHER_ELEMENTS`
    / d elsewhere).
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
    nonzero: bool = False,
) -> Tensor:
    """:func:`plan_costs` with each entry's slice given: ``group`` (B, ...) in [0, n_groups).

    ``rows``, ``cols`` and ``mass`` have one shape (B, ...), ``group`` broadcasts to it;
    with ``nonzero`` only the entries of non-zero mass are gathered. Returns (B, n_groups).
    """
    B, N = X_s.shape[0], X_s.shape[1]
    M = X_t.shape[1]
    given = [rows, cols, mass, group.expand(rows.shape)]
    r, c, w, g = _arrays(*given)
    item: Array = np.arange(B) if isinstance(r, np.ndarray) else torch.arange(B, device=rows.device)
    item = item.reshape((B,) + (1,) * (rows.dim() - 1))
    r, c, g = r + item * N, c + item * M, g + item * n_groups
    if nonzero:
        k = w != 0
        r, c, w, g = r[k], c[k], w[k], g[k]
    r, c, w, g = _tensors(*(x.reshape(-1) for x in (r, c, w, g)))
    out = _PlanCost.apply(X_s, X_t, r, c, w, g, B * n_groups, metric, p, chunk)
    return out.view(B, n_groups)


# --------------------------------------------------------------------------- assembly


class Accumulator:
    """Sum weighted entries into one plan per batch item: dense, or sparse COO.

    :meth:`add` takes the entries of each item, as many times as there are blocks;
    :meth:`result` returns a (..., N, M) dense tensor, a torch sparse COO tensor
    (coalesced, zeros dropped), or for numpy inputs a numpy array or a scipy
    ``coo_array`` (a list of them for batched inputs). On the CPU the entries are summed
    by NumPy (see the notes of the 1-D plans).
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
        self.cpu = _numpy_side(like)
        self.parts: list[tuple[Array, Array]] = []
        self.full: Array | None = None
        if dense:  # in the plan's dtype: the result is this array, no copy
            dtype = _NUMPY_DTYPE.get(like.dtype, np.float64)
            self.full = np.zeros((B, N * M), dtype) if self.cpu else like.new_zeros(B, N * M)

    def add(
        self,
        rows: Tensor,
        cols: Tensor,
        values: Tensor,
        item: int | None = None,
        scale: Tensor | None = None,
    ) -> None:
        """Add the entries ``values`` at ``(rows, cols)``: (B, ..., E) for every item.

        With ``item``, the (E,) entries of that item alone. ``scale`` (B, ...) multiplies
        the values of each group of ``E`` entries (a slice's weight).
        """
        r, c, v = _arrays(rows, cols, values)
        if scale is not None:
            v = v * _arrays(scale)[0][..., None]
        n = 1 if item is not None else self.B
        r, c, v = (x.reshape(n, -1) for x in (r, c, v))
        keys = r * self.M + c
        if self.full is not None:
            first = item if item is not None else 0
            for i in range(n):
                if self.cpu:
                    _add_entries(self.full[first + i], keys[i], v[i])
                else:
                    self.full[first + i].scatter_add_(0, keys[i], v[i].to(self.full.dtype))
            return
        offset: Array
        if item is not None:
            offset = item * (self.N * self.M)
        elif self.cpu:
            offset = np.arange(n).reshape(n, 1) * (self.N * self.M)
        else:
            offset = torch.arange(n, device=keys.device).view(n, 1) * (self.N * self.M)
        keys, v = (keys + offset).reshape(-1), v.reshape(-1)
        keep = v != 0
        self.parts.append((keys[keep], v[keep]))

    def result(self) -> Any:
        """Return the plan (see the class docstring)."""
        B, N, M = self.B, self.N, self.M
        dtype, device = self.like.dtype, self.like.device
        if self.full is not None:
            plan = self.full.reshape(*self.lead, N, M)
            if self.numpy:
                plan = plan if isinstance(plan, np.ndarray) else plan.cpu().numpy()
                return plan.astype(_NUMPY_DTYPE[dtype], copy=False)
            return plan.to(dtype) if not self.cpu else torch.from_numpy(plan).to(dtype)
        if self.parts:
            keys = _cat([k for k, _ in self.parts])
            values = _cat([v for _, v in self.parts])
        else:
            keys = np.zeros(0, dtype=np.int64) if self.cpu else self.like.new_zeros(0).long()
            values = np.zeros(0) if self.cpu else self.like.new_zeros(0)
        keys, values = _coalesce(keys, values)
        item, rest = keys // (N * M), keys % (N * M)
        rows, cols = rest // M, rest % M
        if self.numpy:
            from ot.backend import NumpyBackend  # scipy's coo_array, through POT

            nb = NumpyBackend()
            if not isinstance(keys, np.ndarray):
                item, rows, cols, values = (t.cpu().numpy() for t in (item, rows, cols, values))
            values = values.astype(_NUMPY_DTYPE[dtype], copy=False)
            if B == 1:
                mats = [nb.coo_matrix(values, rows, cols, shape=(N, M))]
            else:
                bounds = np.searchsorted(item, np.arange(B + 1))  # keys are sorted
                mats = [
                    nb.coo_matrix(values[i0:i1], rows[i0:i1], cols[i0:i1], shape=(N, M))
                    for i0, i1 in itertools.pairwise(bounds)
                ]
            return mats if self.lead else mats[0]
        index_parts = []
        for n in reversed(self.lead):  # the item's index in the batch shape, C order
            index_parts.append(item % n)
            item = item // n
        index_parts = [*reversed(index_parts), rows, cols]
        if self.cpu:
            index = torch.from_numpy(np.stack(index_parts))
            vals = torch.from_numpy(values).to(dtype)
        else:
            index, vals = torch.stack(index_parts), values.to(dtype)
        return torch.sparse_coo_tensor(
            index, vals, (*self.lead, N, M), is_coalesced=True, check_invariants=False
        ).to(device)


#: numpy's dtype of each torch dtype of the plans
_NUMPY_DTYPE = {torch.float32: np.float32, torch.float64: np.float64}


def _add_entries(full: np.ndarray, keys: np.ndarray, values: np.ndarray) -> None:
    """Add ``values`` at the flat positions ``keys`` of ``full`` (1-D), in place.

    No temporary of ``full``'s size unless the entries are as many, so that a dense plan
    peaks at about its own size: ``np.bincount`` when there are at least as many entries
    as elements; otherwise ``np.add.at`` into a float64 plan (the sums of ``np.bincount``,
    in the same order), and for a float32 plan the entries summed by key in float64 first
    (a sort), then added once.
    """
    if keys.shape[0] >= full.shape[0]:
        full += np.bincount(keys, values, minlength=full.shape[0])
    elif full.dtype == np.float64:
        np.add.at(full, keys, values.astype(np.float64, copy=False))
    else:
        unique, sums = _coalesce(keys, values.astype(np.float64, copy=False))
        full[unique] += sums


def _coalesce(keys: Array, values: Array) -> tuple[Array, Array]:
    """Sorted unique ``keys`` and the sums of their ``values``.

    NumPy: a sort of the int64 keys, then one segmented sum (measured faster than
    ``Tensor.coalesce``); torch (other devices): ``torch.unique``.
    """
    if keys.shape[0] == 0:
        return keys, values
    if isinstance(keys, np.ndarray):
        order = np.argsort(keys)
        k = keys[order]
        starts = np.flatnonzero(np.concatenate([[True], k[1:] != k[:-1]]))
        return k[starts], np.add.reduceat(values[order], starts)
    unique, inverse = torch.unique(keys, sorted=True, return_inverse=True)
    return unique, values.new_zeros(unique.shape).index_add_(0, inverse, values)
