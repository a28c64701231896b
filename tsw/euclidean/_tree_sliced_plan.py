r"""The expected tree-sliced plan: the mean over trees of the lifted optimal tree plans.

On a tree system the atoms are (point, line) pairs carrying :math:`a_i \alpha_l(x_i)`.
An optimal plan of the tree metric between the split measures
(:func:`tsw.core._plans.line_system_plan`) sends atom ``(i, l)`` to atom ``(j, l')``;
summing it over the lines gives a coupling of the original measures, because the split
keeps every point's mass. The mean over the trees of Db-TSW or TSW-SL is the expected
tree-sliced plan, a coupling whose cost in R^d bounds the optimal transport cost from
above. The trees are those of :func:`tsw.db_tsw` and :func:`tsw.tsw_sl` for the same
seed and options.

The option plumbing goes through :func:`tsw.core._plans.plan_problem` for the measures and
the randomness, and the methods' own tree resolution and projections; the trees are
processed in blocks (a plan is not a per-tree cost, so the driver's blocks do not apply).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from tsw.core._plans import (
    Accumulator,
    SystemPlan,
    check_metric,
    grouped_plan_costs,
    line_system_plan,
    plan_problem,
)
from tsw.core._problem import Problem, to_numpy
from tsw.core._projection import Projection
from tsw.core._slices import resolve_trees
from tsw.core._validation import (
    Measures,
    check_bool,
    check_choice,
    check_nonnegative_float,
)
from tsw.core.splits import LineSplit, check_alpha, constant_split, uniform_split
from tsw.core.trees import ChainLines, ConcurrentLines, sample_chain_lines, sample_concurrent_lines
from tsw.euclidean._db_tsw import db_projection, resolve_db_trees
from tsw.euclidean._tsw_sl import TREES, constant_split_projection

__all__ = ["expected_tree_sliced_plan"]

#: the tree-sliced methods whose trees and splits give a plan
METHODS = ("db_tsw", "tsw_sl")

#: each method's own options and their defaults (those of the distances)
METHOD_OPTIONS: dict[str, dict[str, Any]] = {
    "db_tsw": {"delta": 2.0, "orthogonal": False, "directions": "uniform"},
    "tsw_sl": {"tree": "chain", "alpha": None, "source_range": 1.0},
}

#: (line x atom) elements of a block of trees: the plans' entries are about 3 per element
BLOCK_ELEMENTS = 1 << 20


def expected_tree_sliced_plan(
    X_s: Any,
    X_t: Any,
    a: Any = None,
    b: Any = None,
    *,
    method: str = "db_tsw",
    trees: ConcurrentLines | ChainLines | None = None,
    n_trees: int | None = None,
    n_lines: int | None = None,
    delta: float | None = None,
    orthogonal: bool | None = None,
    directions: str | None = None,
    tree: str | None = None,
    alpha: Tensor | None = None,
    source_range: float | None = None,
    sampling: str = "iid",
    center: Tensor | str | None = "mean",
    root_std: float = 0.1,
    metric: str = "sqeuclidean",
    p: float = 2,
    dense: bool = True,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    validate: bool = True,
    log: bool = False,
) -> Any:
    r"""Average the lifted optimal plans of a tree-sliced method's trees.

    References: [Tran2025c]_ and [Tran2025d]_.

    For each tree :math:`\mathcal L_\tau` (a star of ``k`` concurrent lines for Db-TSW,
    or the trees of TSW-SL) a point :math:`x_i` puts mass :math:`a_i \alpha_l(x_i)` on
    line ``l``. Let :math:`\gamma_\tau` be an optimal plan of the tree metric between
    the split measures (atom :math:`(i, l)` to atom :math:`(j, l')`); it lifts to a
    coupling of ``a`` and ``b`` by summing over the lines,
    :math:`\pi_{\tau, ij} = \sum_{l, l'} \gamma_\tau((i, l), (j, l'))`, and

    .. math::

        \bar\pi = \frac1T \sum_{\tau=1}^T \pi_\tau, \qquad
        \mathrm{cost} = \sum_{ij} \bar\pi_{ij}\, c(x_i, y_j)
        \ \ge\ \min_{\pi \in \Pi(a, b)} \sum_{ij} \pi_{ij}\, c(x_i, y_j).

    Each :math:`\gamma_\tau` costs exactly the tree :math:`W_1` of the tree (the value of
    :func:`tsw.db_tsw` or :func:`tsw.tsw_sl` at ``p = 1`` on it). With one tree of one
    line, :math:`\pi` is the optimal one-dimensional plan along the line (the plan of
    :func:`tsw.sliced_plans` for that direction). Between a measure and itself it is
    the identity plan. With TSW-SL's split (constant over the points) every line
    balances on its own, so its plan is the :math:`\alpha`-weighted mean of the
    lines' one-dimensional plans, whatever the roots and the gluing: an
    expected sliced plan over the trees' directions (only a point-dependent split, as
    Db-TSW's, moves mass between lines).

    Parameters
    ----------
    X_s : Tensor or ndarray of shape (N, d) or (B, N, d)
        Source support.
    X_t : Tensor or ndarray of shape (M, d) or (B, M, d)
        Target support.
    a, b : Tensor or ndarray of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative weights of equal totals; uniform by default.
    method : {"db_tsw", "tsw_sl"}, default "db_tsw"
        Whose trees and split: :func:`tsw.db_tsw` (concurrent lines, distance-based
        split) or :func:`tsw.tsw_sl` (chains or concurrent lines, constant split).
    trees : ConcurrentLines or ChainLines, optional
        Explicit trees (ConcurrentLines for ``"db_tsw"``); overrides the sampling
        options.
    n_trees, n_lines : int, optional
        ``T`` and ``k``; 250 and 4 by default (the methods' defaults).
    delta, orthogonal, directions
        ``"db_tsw"`` only: as in :func:`tsw.db_tsw` (defaults 2.0, False, "uniform").
    tree, alpha, source_range
        ``"tsw_sl"`` only: as in :func:`tsw.tsw_sl` (defaults "chain", uniform, 1.0).
    sampling, center, root_std
        As in the methods.
    metric : {"sqeuclidean", "euclidean", "cityblock", "minkowski"}, default "sqeuclidean"
        The ground cost in R^d of the returned cost, as in :func:`tsw.sliced_plans`.
    p : float, default 2
        Order of ``"minkowski"``; ignored otherwise (not the methods' ``p``: the tree
        plans are those of the tree :math:`W_1`).
    dense : bool, default True
        Return an (N, M) array; otherwise a sparse COO plan (torch, coalesced, or scipy's
        ``coo_array`` for numpy inputs; a list of them for batched numpy inputs).
    seed, generator
        Randomness of the trees: the same seed gives the trees of the method itself.
    validate : bool, default True
        Run the value checks.
    log : bool, default False
        Also return ``{"per_tree": ..., "trees": ...}``: each tree's plan's cost in R^d,
        shape (T,) or (B, T) (differentiable; their mean is the cost), and the trees.

    Returns
    -------
    plan : Tensor or ndarray of shape (N, M) or (B, N, M), or sparse
        Marginals ``a`` and ``b``.
    cost : Tensor or ndarray of shape () or (B,)
        Its cost in R^d, differentiable with respect to the points with the plan held
        fixed.
    log : dict, optional
        With ``log=True``.

    Raises
    ------
    TypeError, ValueError
        For malformed inputs, an unknown ``method`` or ``metric``, an option of the
        other method, or the methods' own errors (counts, ``delta``, ``alpha``, trees
        that do not fit the data).

    Notes
    -----
    Each tree costs O(k (N + M) log(N + M)) (one sort per line, the monotone plan of
    each line with its imbalance moved to the root, and the coupling of the roots'
    excesses, :func:`tsw.core._plans.line_system_plan`), vectorised over the trees of a
    block and the batch; a star's plan has at most about ``3 k (N + M)`` entries, at
    most ``2 k (N + M)`` of them non-zero. The cost gathers every non-zero entry's
    points once, O(entries x d).

    References
    ----------
    .. [Tran2025c] H. V. Tran, M.-K. Nguyen-Nhat, H. T. Pham, T. Chu, T. Le, T. M.
       Nguyen. Distance-based tree-sliced Wasserstein distance. ICLR 2025.
    .. [Tran2025d] H. V. Tran, H. T. Pham, T. Tran, T. M. Nguyen, T. Chu, T. Le,
       T. M. Nguyen. Tree-sliced Wasserstein distance: a geometric perspective.
       ICML 2025.

    Examples
    --------
    >>> import torch, tsw
    >>> X = torch.tensor([[0.0, 0.0], [1.0, 0.0]]); Y = X + torch.tensor([0.0, 2.0])
    >>> plan, cost = tsw.expected_tree_sliced_plan(X, Y, n_trees=10, n_lines=2, seed=0)
    >>> plan.sum(0), plan.sum(1)
    (tensor([0.5000, 0.5000]), tensor([0.5000, 0.5000]))
    >>> bool(cost >= 4.0)  # W_2^2 = 4: every plan costs at least that
    True
    """
    method = check_choice(method, "method", METHODS)
    given = {
        "delta": delta,
        "orthogonal": orthogonal,
        "directions": directions,
        "tree": tree,
        "alpha": alpha,
        "source_range": source_range,
    }
    other = next(m for m in METHODS if m != method)
    for name in METHOD_OPTIONS[other]:
        if given[name] is not None:
            raise ValueError(
                f"{name} is an option of method={other!r}; it cannot be given with "
                f"method={method!r} (got {name}={given[name]!r})"
            )
    options: dict[str, Any] = {
        k: (v if given[k] is None else given[k]) for k, v in METHOD_OPTIONS[method].items()
    }
    dense = check_bool(dense, "dense")
    log = check_bool(log, "log")
    metric, p = check_metric(metric, p)
    problem = plan_problem(X_s, X_t, a, b, seed, generator, validate)

    measures = problem.measures
    if method == "db_tsw":
        delta_ = check_nonnegative_float(options["delta"], "delta")
        resolved: ConcurrentLines | ChainLines = resolve_db_trees(
            problem,
            trees,
            n_trees=n_trees,
            n_lines=n_lines,
            orthogonal=options["orthogonal"],
            center=center,
            root_std=root_std,
            sampling=sampling,
            directions=options["directions"],
        )

        def project(m: Measures, block: Any, t0: int, t1: int) -> tuple[Tensor, Tensor]:
            proj = db_projection(m, block, delta_)
            return proj.coords, _masses(proj)

    else:
        kind = check_choice(options["tree"], "tree", TREES)
        sampler = (
            _chain_sampler(options["source_range"]) if kind == "chain" else sample_concurrent_lines
        )
        resolved = resolve_trees(  # type: ignore[assignment]  # the allowed types: lines
            measures,
            trees,
            (ChainLines, ConcurrentLines),
            n_trees,
            n_lines,
            sampler=sampler,
            rng=problem.rng,
            center=center,
            root_std=root_std,
            sampling=sampling,
            validate=problem.validate,
        )
        X = measures.X_s
        T, k = resolved.n_trees, resolved.n_lines
        if options["alpha"] is None:
            split = uniform_split(k, X)
        else:
            split = constant_split(check_alpha(options["alpha"], T, k, X, problem.validate))

        def project(m: Measures, block: Any, t0: int, t1: int) -> tuple[Tensor, Tensor]:
            part = split if split.dim() == 2 else split[t0:t1]
            proj = constant_split_projection(m, block, part)
            return proj.coords, _masses(proj)

    per_tree, acc = _plans(
        problem, resolved, project, star=method == "db_tsw", metric=metric, p=p, dense=dense
    )
    cost = per_tree.mean(-1)
    plan = acc.result()

    def out(t: Tensor) -> Any:
        t = t if measures.batched else t[0]
        return to_numpy(t) if problem.numpy else t

    if log:
        return plan, out(cost), {"per_tree": out(per_tree), "trees": resolved}
    return plan, out(cost)


def _masses(projection: Projection) -> Tensor:
    """Return a projection's masses on the lines, split here if the closed form would split them."""
    masses = projection.masses
    if isinstance(masses, LineSplit):
        return masses.masses()
    if not isinstance(masses, Tensor):  # not reached: the Euclidean projections
        raise TypeError(f"expected the masses of a Euclidean projection; got {type(masses)}")
    return masses


def _chain_sampler(source_range: object) -> Any:
    """:func:`tsw.sample_chain_lines` with TSW-SL's ``source_range`` bound (checked)."""
    source_range = check_nonnegative_float(source_range, "source_range")

    def sample(*args: Any, **kwargs: Any) -> ChainLines:
        return sample_chain_lines(*args, source_range=source_range, **kwargs)

    return sample


def split_atoms(coords: Tensor, masses: Tensor, N: int) -> tuple[Tensor, ...]:
    """Source and target coordinates and (non-negative) masses of a projection's atoms."""
    masses = masses.expand(coords.shape)
    return coords[..., :N], coords[..., N:], masses[..., :N], -masses[..., N:]


def _plans(
    problem: Problem,
    trees: ConcurrentLines | ChainLines,
    project: Any,
    *,
    star: bool,
    metric: str,
    p: float,
    dense: bool,
) -> tuple[Tensor, Accumulator]:
    """Every tree's plan in blocks of trees: per-tree costs (B, T) and the summed plan."""
    m = problem.measures
    X_s, X_t = m.X_s, m.X_t
    B, N, M = X_s.shape[0], X_s.shape[1], X_t.shape[1]
    # the plans are built from detached data; only their costs carry a gradient
    fixed = Measures(X_s.detach(), X_t.detach(), m.a.detach(), m.b.detach(), m.batched)
    T, k = trees.n_trees, trees.n_lines
    acc = Accumulator(B, N, M, X_s, dense=dense, batched=m.batched, numpy=problem.numpy)
    per_tree = []
    size = max(1, BLOCK_ELEMENTS // max(1, B * k * (N + M + 1)))
    for t0 in range(0, T, size):
        t1 = min(T, t0 + size)
        with torch.no_grad():
            coords, masses = project(fixed, trees.narrow(t0, t1), t0, t1)
            plan = line_system_plan(*split_atoms(coords, masses, N), star=star)
        group = torch.arange(t1 - t0, device=plan.mass.device).view(1, -1, 1)
        per_tree.append(
            grouped_plan_costs(
                X_s, X_t, plan.rows, plan.cols, plan.mass, group, t1 - t0, metric, p, nonzero=True
            )
        )
        acc.add(plan.rows, plan.cols, plan.mass, scale=plan.mass.new_full((B, t1 - t0), 1 / T))
    return torch.cat(per_tree, dim=-1), acc


def tree_plans(
    measures: Measures, trees: ConcurrentLines | ChainLines, masses_of: Any, *, star: bool
) -> SystemPlan:
    """Atom-level plans of every tree (for tests): (point, line) to (point, line) entries."""
    coords, masses = masses_of(measures, trees)
    return line_system_plan(*split_atoms(coords, masses, measures.X_s.shape[1]), star=star)
