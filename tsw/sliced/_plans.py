r"""POT's sliced transport plans: one monotone plan per projection, the best one, their mean.

:func:`sliced_plans`, :func:`min_sliced_transport_plan` and :func:`expected_sliced_plan`
keep POT 0.9.7's signatures, defaults and return values (``ot.sliced``), and add
batched (B, N, d) inputs, torch sparse COO plans, the seeding contract of :mod:`tsw`
and a cost that is differentiable in the points with the plan held fixed. The plans are
built by :mod:`tsw.core._plans` (monotone plans, vectorised over the projections); this
module holds the option plumbing: :func:`tsw.core._plans.plan_problem` binds the shared
options (the measures, ``seed``, ``generator``, ``validate``) for every plan function (a
plan is not a distance: no closed form, no :func:`tsw.core._api.distance`).

Differences from POT 0.9.7, all deliberate:

* POT's per-projection costs are wrong whenever POT does not take the plan for a
  permutation: ``N != M``, non-uniform weights, and also ``N = M`` with uniform
  weights when its exact test ``a == a.sum() / n`` fails (the ``n`` weights ``1 / n``
  do not sum to 1 exactly: 43 of the sizes 2 to 100, ``N = 7`` among them):
  ``ot.utils.sparse_ot_dist`` then indexes the entries' masses by their row index
  (fixed upstream by POT pull request #846). So POT's ``min_sliced_transport_plan``
  may pick another projection there, and its ``expected_sliced_plan`` with
  ``beta != 0`` weighs the projections by wrong costs. Here every cost is
  ``sum_ij P_ij c(x_i, y_j)`` of its plan.
* ``seed`` follows :mod:`tsw`'s contract (a fresh generator, never the global one):
  the same seed gives other directions than POT's.
* POT's cost of ``expected_sliced_plan`` with ``beta = 0`` forms the (N, M) cost matrix;
  here the cost is the mean of the projections' costs, which is equal, in O(L (N + M) d).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from tsw.core._plans import (
    Accumulator,
    PlanTuple,
    check_metric,
    monotone_plan,
    plan_costs,
    plan_problem,
)
from tsw.core._problem import Problem, to_numpy
from tsw.core._sort import argsort_last
from tsw.core._validation import (
    Measures,
    check_bool,
    check_nonnegative_float,
    check_positive_int,
)
from tsw.sliced._sw import resolve_projections

__all__ = ["expected_sliced_plan", "min_sliced_transport_plan", "sliced_plans"]


class _Sliced:
    """The validated problem, the projections and every projection's plan entries."""

    def __init__(
        self,
        problem: Problem,
        *,
        metric: object,
        p: object,
        projections: Any,
        n_projections: object,
        batch_size: object,
    ):
        self.problem = problem
        self.metric, self.p = check_metric(metric, p)
        if batch_size is not None:
            check_positive_int(batch_size, "batch_size")
        self.chunk: int | None = batch_size  # type: ignore[assignment]
        if projections is None:
            if n_projections is None:
                raise ValueError(
                    "n_projections must be given (an int >= 1) when projections is None; "
                    "got neither"
                )
            check_positive_int(n_projections, "n_projections")
        measures = self.problem.measures
        self.measures: Measures = measures
        self.projections: Tensor = resolve_projections(
            measures,
            projections,
            n_projections if projections is None else 1,  # type: ignore[arg-type]
            False,
            self.problem.rng,
            validate=self.problem.validate,
        )
        P = self.projections if self.projections.dim() == 3 else self.projections.unsqueeze(0)
        X, Y = measures.X_s.detach(), measures.X_t.detach()
        self.cs = torch.matmul(X, P)  # (B, N, L), POT's X_projection
        self.ct = torch.matmul(Y, P)
        cs, ct = self.cs.mT, self.ct.mT  # (B, L, N), (B, L, M)
        a_, b_ = measures.a.detach(), measures.b.detach()
        N, M = cs.shape[-1], ct.shape[-1]
        # a permutation when both measures are uniform with N atoms: no merge needed
        self.permutation = N == M and bool(((a_ == a_[:, :1]) & (b_ == a_[:, :1])).all())
        if self.permutation:
            self.rows = argsort_last(cs)
            self.cols = argsort_last(ct)
            self.mass = a_[:, None, :1].expand(self.rows.shape)  # uniform: no gather
        else:
            self.rows, self.cols, self.mass = monotone_plan(
                cs, ct, a_.unsqueeze(1), b_.unsqueeze(1)
            )

    @property
    def n_projections(self) -> int:
        return self.projections.shape[-1]

    def costs(self, rows=None, cols=None, mass=None) -> Tensor:
        """Cost in R^d of each projection's plan (or of the given entries), (B, L)."""
        m = self.measures
        rows = self.rows if rows is None else rows
        cols = self.cols if cols is None else cols
        mass = self.mass if mass is None else mass
        return plan_costs(m.X_s, m.X_t, rows, cols, mass, self.metric, self.p, chunk=self.chunk)

    def out(self, t: Tensor) -> Any:
        """Unbatch (when the input was) and convert to numpy (when it was numpy)."""
        t = t if self.measures.batched else t[0]
        return to_numpy(t) if self.problem.numpy else t

    def accumulator(self, dense: bool) -> Accumulator:
        m = self.measures
        B, N, M = m.X_s.shape[0], m.X_s.shape[1], m.X_t.shape[1]
        return Accumulator(B, N, M, m.X_s, dense=dense, batched=m.batched, numpy=self.problem.numpy)

    def projection_log(self) -> dict[str, Any]:
        P = self.projections
        return {
            "X_projection": self.out(self.cs),
            "Y_projection": self.out(self.ct),
            "projections": to_numpy(P) if self.problem.numpy else P,
        }


def sliced_plans(
    X_s: Any,
    X_t: Any,
    a: Any = None,
    b: Any = None,
    metric: str = "sqeuclidean",
    p: float = 1,
    projections: Any = None,
    n_projections: int | None = None,
    seed: int | None = None,
    batch_size: int | None = None,
    log: bool = False,
    *,
    generator: torch.Generator | None = None,
    validate: bool = True,
) -> Any:
    r"""Return the optimal plan of every projection and its cost in R^d (POT's ``sliced_plans``).

    References: [Tanguy2025]_.

    For each direction :math:`\theta_k` the plan :math:`\pi_k` is the optimal plan
    between the projected measures :math:`\theta_k \# \mu` and :math:`\theta_k \# \nu`
    (the monotone plan, optimal for every convex cost on the line), lifted to the
    points; its cost is :math:`\sum_{ij} \pi_{k,ij}\, c(x_i, y_j)` with the ground cost
    ``metric``. When ``N = M`` and both measures are uniform, each plan is a
    permutation: ``x[rows[i]]`` goes to ``y[cols[i]]``.

    Parameters
    ----------
    X_s : Tensor or ndarray of shape (N, d) or (B, N, d)
        Source support.
    X_t : Tensor or ndarray of shape (M, d) or (B, M, d)
        Target support.
    a, b : Tensor or ndarray of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative weights of equal totals; uniform by default.
    metric : {"sqeuclidean", "euclidean", "cityblock", "minkowski"}, default "sqeuclidean"
        Ground cost :math:`c`: :math:`\|x - y\|_2^2`, :math:`\|x - y\|_2`,
        :math:`\|x - y\|_1` or :math:`\|x - y\|_p` (POT's ``ot.dist`` metrics).
    p : float, default 1
        The order of ``"minkowski"`` (POT's default here is 1); ignored otherwise.
    projections : Tensor or ndarray of shape (d, L) or (B, d, L), optional
        Unit directions as columns (POT's layout), in the dtype of the points; drawn
        when not given.
    n_projections : int, optional
        ``L``; required when ``projections`` is not given.
    seed : int, optional
        Seed of the drawn directions (:mod:`tsw`'s contract: a fresh generator, the same
        directions on every device; not POT's draws).
    batch_size : int, optional
        Entries whose cost is gathered at once (POT's memory option); about 2^22 / d by
        default.
    log : bool, default False
        Also return POT's log: ``X_projection`` (N, L) and ``Y_projection`` (M, L), the
        coordinates, and ``projections``.
    generator : torch.Generator, optional
        Instead of ``seed``.
    validate : bool, default True
        Run the value checks.

    Returns
    -------
    plans : list of PlanTuple(data, rows, cols)
        One per projection: masses and indices of its entries, ``N`` entries for a
        permutation, ``N + M - 1`` otherwise (some may be 0); shape (B, E) each for
        batched inputs.
    costs : Tensor or ndarray of shape (L,) or (B, L)
        Differentiable with respect to the points (the plans held fixed).
    log : dict, optional
        With ``log=True``.

    Raises
    ------
    TypeError, ValueError
        For malformed inputs, an unknown ``metric``, ``p < 1`` with ``"minkowski"``,
        neither ``projections`` nor ``n_projections``, or malformed projections.

    Notes
    -----
    O(L (N + M) (d + log(N + M))) time, vectorised over the projections; O(L (N + M))
    memory for the plans. POT 0.9.7 computes the costs with the masses indexed by row
    (POT pull request #846 fixes it) whenever it does not take the plan for a
    permutation: ``N != M``, non-uniform weights, and ``N = M`` with uniform weights
    whose ``N`` values ``1 / N`` do not sum to 1 exactly (``N = 7``, for one: the costs
    are then wrong for a permutation too). The costs here are those of the plans,
    ``sum_ij P_ij c(x_i, y_j)``, exact to rounding wherever the points lie.

    References
    ----------
    .. [Tanguy2025] E. Tanguy, L. Chapel, J. Delon. Sliced optimal transport plans.
       arXiv:2506.03661, 2025.

    Examples
    --------
    >>> import torch, tsw
    >>> x = torch.tensor([[3.0, 3.0], [1.0, 1.0]]); y = torch.tensor([[2.0, 2.5], [3.0, 2.0]])
    >>> plans, costs = tsw.sliced_plans(x, y, projections=torch.eye(2))
    >>> plans[0].rows, plans[0].cols
    (tensor([1, 0]), tensor([0, 1]))
    >>> costs
    tensor([2.1250, 3.1250])
    """
    check_bool(log, "log")
    s = _Sliced(
        plan_problem(X_s, X_t, a, b, seed, generator, validate),
        metric=metric,
        p=p,
        projections=projections,
        n_projections=n_projections,
        batch_size=batch_size,
    )
    costs = s.costs()
    plans = [
        PlanTuple(s.out(s.mass[:, k]), s.out(s.rows[:, k]), s.out(s.cols[:, k]))
        for k in range(s.n_projections)
    ]
    if log:
        return plans, s.out(costs), s.projection_log()
    return plans, s.out(costs)


def min_sliced_transport_plan(
    X_s: Any,
    X_t: Any,
    a: Any = None,
    b: Any = None,
    projections: Any = None,
    metric: str = "sqeuclidean",
    p: float = 2,
    n_projections: int | None = None,
    seed: int | None = None,
    batch_size: int | None = None,
    dense: bool = True,
    log: bool = False,
    *,
    generator: torch.Generator | None = None,
    validate: bool = True,
) -> Any:
    r"""Return the projection plan of least cost in R^d: min-pivot sliced, or min-SWGG.

    References: [Mahey2023]_ and [Tanguy2025b]_.

    .. math::

        \pi^\star = \pi_{k^\star}, \qquad k^\star = \arg\min_k \sum_{ij}
        \pi_{k,ij}\, c(x_i, y_j),

    over the monotone plans :math:`\pi_k` of the projections (:func:`sliced_plans`).
    Its cost bounds the optimal transport cost from above. POT's
    ``ot.min_sliced_transport_plan``, batched; :func:`tsw.swgg` optimises the direction.

    Parameters
    ----------
    X_s : Tensor or ndarray of shape (N, d) or (B, N, d)
        Source support.
    X_t : Tensor or ndarray of shape (M, d) or (B, M, d)
        Target support.
    a, b : Tensor or ndarray of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative weights of equal totals; uniform by default.
    projections : Tensor or ndarray of shape (d, L) or (B, d, L), optional
        Unit directions as columns; drawn when not given.
    metric : {"sqeuclidean", "euclidean", "cityblock", "minkowski"}, default "sqeuclidean"
        Ground cost, as in :func:`sliced_plans`.
    p : float, default 2
        Order of ``"minkowski"``; ignored otherwise.
    n_projections : int, optional
        ``L``; required when ``projections`` is not given.
    seed : int, optional
        Seed of the drawn directions (:mod:`tsw`'s contract, not POT's draws).
    batch_size : int, optional
        Entries whose cost is gathered at once.
    dense : bool, default True
        Return an (N, M) array; otherwise a sparse COO plan (torch, or scipy's
        ``coo_array`` for numpy inputs; a list of them for batched numpy inputs), with
        at most ``N + M - 1`` non-zero entries.
    log : bool, default False
        Also return POT's log: ``projections``, ``costs`` (every projection's, detached),
        ``min_projection`` (d,), ``X_min_projection`` (N,), ``Y_min_projection`` (M,).
    generator : torch.Generator, optional
        Instead of ``seed``.
    validate : bool, default True
        Run the value checks.

    Returns
    -------
    plan : Tensor or ndarray of shape (N, M) or (B, N, M), or sparse
        Marginals ``a`` and ``b``.
    cost : Tensor or ndarray of shape () or (B,)
        Its cost in R^d, differentiable with respect to the points (plan held fixed).
    log : dict, optional
        With ``log=True``.

    Raises
    ------
    TypeError, ValueError
        As :func:`sliced_plans`.

    Notes
    -----
    The costs compared are those of the plans (see :func:`sliced_plans`); POT 0.9.7's
    are wrong where it does not take a plan for a permutation (``N = 7`` uniform points
    included), so it may pick another projection there.

    References
    ----------
    .. [Mahey2023] G. Mahey, L. Chapel, G. Gasso, C. Bonet, N. Courty. Fast optimal
       transport through sliced generalized Wasserstein geodesics. NeurIPS 2023.
    .. [Tanguy2025b] E. Tanguy, L. Chapel, J. Delon. Sliced optimal transport plans.
       arXiv:2506.03661, 2025.

    Examples
    --------
    >>> import torch, tsw
    >>> x = torch.tensor([[3.0, 3.0], [1.0, 1.0]]); y = torch.tensor([[2.0, 2.5], [3.0, 2.0]])
    >>> plan, cost = tsw.min_sliced_transport_plan(x, y, projections=torch.eye(2))
    >>> plan
    tensor([[0.0000, 0.5000],
            [0.5000, 0.0000]])
    >>> cost
    tensor(2.1250)
    """
    check_bool(log, "log")
    dense = check_bool(dense, "dense")
    s = _Sliced(
        plan_problem(X_s, X_t, a, b, seed, generator, validate),
        metric=metric,
        p=p,
        projections=projections,
        n_projections=n_projections,
        batch_size=batch_size,
    )
    with torch.no_grad():
        costs = s.costs()  # (B, L)
    best = costs.argmin(-1)  # (B,)
    pick = best.view(-1, 1, 1).expand(-1, 1, s.rows.shape[-1])
    rows, cols, mass = (torch.gather(t, 1, pick) for t in (s.rows, s.cols, s.mass))
    cost = s.costs(rows, cols, mass)[:, 0]  # the chosen plan's cost, with its gradient
    acc = s.accumulator(dense)
    acc.add(rows[:, 0], cols[:, 0], mass[:, 0])
    plan = acc.result()
    if not log:
        return plan, s.out(cost)
    P = s.projections if s.projections.dim() == 3 else s.projections.unsqueeze(0)
    P = P.expand(costs.shape[0], -1, -1)
    item = torch.arange(costs.shape[0])
    info = {
        "projections": to_numpy(s.projections) if s.problem.numpy else s.projections,
        "costs": s.out(costs),
        "min_projection": s.out(P[item, :, best]),
        "X_min_projection": s.out(s.cs[item, :, best]),
        "Y_min_projection": s.out(s.ct[item, :, best]),
    }
    return plan, s.out(cost), info


def expected_sliced_plan(
    X_s: Any,
    X_t: Any,
    a: Any = None,
    b: Any = None,
    projections: Any = None,
    metric: str = "sqeuclidean",
    p: float = 2,
    n_projections: int | None = None,
    beta: float = 0.0,
    seed: int | None = None,
    dense: bool = True,
    batch_size: int | None = None,
    log: bool = False,
    *,
    generator: torch.Generator | None = None,
    validate: bool = True,
) -> Any:
    r"""Return the mean of the projections' plans: the expected sliced plan.

    References: [Liu2025]_ and [Tanguy2025c]_.

    .. math::

        \bar\pi = \sum_{k=1}^L w_k\, \pi_k, \qquad
        w = \mathrm{softmax}(-\beta\, C), \quad C_k = \sum_{ij} \pi_{k,ij}\, c(x_i, y_j),

    uniform weights :math:`1/L` for ``beta = 0``. A coupling of ``a`` and ``b`` whose
    cost :math:`\sum_k w_k C_k` bounds the optimal transport cost from above. POT's
    ``ot.expected_sliced_plan``, batched, faster (the cost needs no (N, M) matrix).

    Parameters
    ----------
    X_s : Tensor or ndarray of shape (N, d) or (B, N, d)
        Source support.
    X_t : Tensor or ndarray of shape (M, d) or (B, M, d)
        Target support.
    a, b : Tensor or ndarray of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative weights of equal totals; uniform by default.
    projections : Tensor or ndarray of shape (d, L) or (B, d, L), optional
        Unit directions as columns; drawn when not given.
    metric : {"sqeuclidean", "euclidean", "cityblock", "minkowski"}, default "sqeuclidean"
        Ground cost, as in :func:`sliced_plans`.
    p : float, default 2
        Order of ``"minkowski"``; ignored otherwise.
    n_projections : int, optional
        ``L``; required when ``projections`` is not given.
    beta : float, default 0.0
        Inverse temperature of the softmin weighting of the projections by their
        costs (>= 0); 0 weighs them equally.
    seed : int, optional
        Seed of the drawn directions (:mod:`tsw`'s contract, not POT's draws).
    dense : bool, default True
        Return an (N, M) array; otherwise a sparse COO plan (torch, or scipy's
        ``coo_array`` for numpy inputs; a list of them for batched numpy inputs),
        coalesced, with at most ``L (N + M - 1)`` non-zero entries.
    batch_size : int, optional
        Entries whose cost is gathered at once.
    log : bool, default False
        Also return POT's log: ``projections``, ``costs`` (every projection's, detached),
        ``G`` (the list of the projections' plans, as :func:`sliced_plans`) and
        ``weights``.
    generator : torch.Generator, optional
        Instead of ``seed``.
    validate : bool, default True
        Run the value checks.

    Returns
    -------
    plan : Tensor or ndarray of shape (N, M) or (B, N, M), or sparse
    cost : Tensor or ndarray of shape () or (B,)
        :math:`\sum_k w_k C_k`, differentiable with respect to the points with the plan
        (and the weights) held fixed.
    log : dict, optional
        With ``log=True``.

    Raises
    ------
    TypeError, ValueError
        As :func:`sliced_plans`, and for ``beta < 0``.

    Notes
    -----
    The weights use the plans' own costs (see :func:`sliced_plans`); POT 0.9.7's are
    wrong where it does not take a plan for a permutation (``N = 7`` uniform points
    included), so its weights differ there for ``beta != 0``.

    References
    ----------
    .. [Liu2025] X. Liu, R. Diaz Martin, Y. Bai, A. Shahbazi, M. Thorpe, A. Aldroubi,
       S. Kolouri. Expected sliced transport plans. ICLR 2025.
    .. [Tanguy2025c] E. Tanguy, L. Chapel, J. Delon. Sliced optimal transport plans.
       arXiv:2506.03661, 2025.

    Examples
    --------
    >>> import torch, tsw
    >>> x = torch.tensor([[3.0, 3.0], [1.0, 1.0]]); y = torch.tensor([[2.0, 2.5], [3.0, 2.0]])
    >>> plan, cost = tsw.expected_sliced_plan(x, y, projections=torch.eye(2))
    >>> plan
    tensor([[0.2500, 0.2500],
            [0.2500, 0.2500]])
    >>> cost
    tensor(2.6250)
    """
    check_bool(log, "log")
    dense = check_bool(dense, "dense")
    beta = check_nonnegative_float(beta, "beta")
    s = _Sliced(
        plan_problem(X_s, X_t, a, b, seed, generator, validate),
        metric=metric,
        p=p,
        projections=projections,
        n_projections=n_projections,
        batch_size=batch_size,
    )
    costs = s.costs()  # (B, L), differentiable
    if beta == 0.0:
        weights = torch.full_like(costs, 1.0 / s.n_projections).detach()
    else:
        weights = torch.softmax(-beta * costs.detach(), dim=-1)
    cost = (costs * weights).sum(-1)
    acc = s.accumulator(dense)
    acc.add(s.rows, s.cols, s.mass, scale=weights)
    plan = acc.result()
    if not log:
        return plan, s.out(cost)
    plans = [
        PlanTuple(s.out(s.mass[:, k]), s.out(s.rows[:, k]), s.out(s.cols[:, k]))
        for k in range(s.n_projections)
    ]
    info = {
        "projections": to_numpy(s.projections) if s.problem.numpy else s.projections,
        "costs": s.out(costs.detach()),
        "G": plans,
        "weights": s.out(weights),
    }
    return plan, s.out(cost), info
