r"""SWGG: the min-pivot sliced plan with its direction optimised (Mahey et al., NeurIPS 2023).

:func:`swgg` starts where :func:`tsw.min_sliced_transport_plan` stops (the best of the
starting directions) and descends on the sphere along the gradient of the paper's
smoothed surrogate, keeping the direction of least exact cost among all it visits, so
the result is never worse than min-pivot over the same directions.

The surrogate (Mahey et al. 2023, section 4). For the monotone plan along
:math:`\theta`, with entries :math:`e` of mass :math:`w_e` from :math:`x_e` to
:math:`y_e`, midpoints :math:`m_e = (x_e + y_e)/2` and pivots :math:`z_e = \langle m_e,
\theta\rangle \theta` on the line, the parallelogram law gives

.. math::

    \|x_e - y_e\|^2 = 2\|x_e - z_e\|^2 + 2\|y_e - z_e\|^2 - 4\|m_e - z_e\|^2 .

The cost is piecewise constant in :math:`\theta` (it changes only when the order of
the projections does), so its gradient is 0. Replacing :math:`m_e` by
:math:`\tilde m_e`, its mean over plans of randomly perturbed projections (Gaussian
noise on the coordinates, the same quantile interval), gives a surrogate whose gradient
with the plan held fixed is

.. math::

    \nabla_\theta = -8 \sum_e w_e \big(\langle m_e - \tilde m_e, \theta\rangle\, m_e
        + \langle m_e, \theta\rangle\, (m_e - \tilde m_e)\big),

translation-invariant because :math:`\sum_e w_e (m_e - \tilde m_e) = 0`. The paper
perturbs sorted points of equal weights; here the perturbed plan's midpoints are
averaged over each quantile interval of the plan (:func:`tsw.core._plans.northwest_corner`
gives the overlaps), which is the same for equal weights and extends it to any weights.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from tsw.core._plans import monotone_plan, northwest_corner, plan_problem
from tsw.core._validation import (
    check_bool,
    check_nonnegative_float,
    check_nonnegative_int,
    check_positive_int,
)
from tsw.sliced._plans import _Sliced

__all__ = ["swgg"]


def swgg(
    X_s: Any,
    X_t: Any,
    a: Any = None,
    b: Any = None,
    *,
    projections: Any = None,
    n_projections: int = 50,
    metric: str = "sqeuclidean",
    p: float = 2,
    n_iter: int = 100,
    lr: float = 0.2,
    smoothing: float = 0.3,
    n_perturbations: int = 4,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    dense: bool = True,
    batch_size: int | None = None,
    validate: bool = True,
    log: bool = False,
) -> Any:
    r"""Min-SWGG with an optimised direction: a sliced plan close to the optimal one.

    References: [Mahey2023b]_.

    .. math::

        \mathrm{SWGG}(\mu, \nu) = \min_{\theta \in \mathbb S^{d-1}} \sum_{ij}
        \pi^\theta_{ij}\, c(x_i, y_j),

    where :math:`\pi^\theta` is the optimal plan between the projections on
    :math:`\theta` (the monotone plan, lifted to the points). The search starts from the
    best of the starting directions (:func:`tsw.min_sliced_transport_plan`), then takes
    ``n_iter`` steps of descent on the sphere along the gradient of the paper's smoothed
    surrogate (module notes): step ``t`` is a geodesic step of angle
    ``lr / sqrt(1 + t / 10)`` in the direction of descent. The steps move freely (the
    surrogate is noisy and the exact cost piecewise constant, so a step may cost more);
    the direction whose plan costs least in R^d among all those visited is returned. The
    cost is therefore never above min-pivot's over the starting directions, and it
    bounds the optimal transport cost from above.

    Parameters
    ----------
    X_s : Tensor or ndarray of shape (N, d) or (B, N, d)
        Source support.
    X_t : Tensor or ndarray of shape (M, d) or (B, M, d)
        Target support.
    a, b : Tensor or ndarray of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative weights of equal totals; uniform by default.
    projections : Tensor or ndarray of shape (d, L) or (B, d, L), optional
        Starting directions as columns; drawn when not given.
    n_projections : int, default 50
        Number of random starting directions (ignored with ``projections``).
    metric : {"sqeuclidean", "euclidean", "cityblock", "minkowski"}, default "sqeuclidean"
        Ground cost, as in :func:`tsw.sliced_plans`. The surrogate is that of the
        squared Euclidean cost (the paper's); for the other metrics it only proposes
        the steps, which are kept on the metric's own cost.
    p : float, default 2
        Order of ``"minkowski"``; ignored otherwise.
    n_iter : int, default 100
        Descent steps (0: min-pivot over the starting directions).
    lr : float, default 0.2
        Angle of the first step, in radians.
    smoothing : float, default 0.3
        Standard deviation of the noise added to the projected coordinates, relative to
        their spread (the standard deviation of both measures' coordinates on the
        current direction); 0 makes the surrogate's gradient 0 (no step is taken).
    n_perturbations : int, default 4
        Perturbed plans averaged per step.
    seed, generator
        Randomness of the starting directions and of the perturbations (:mod:`tsw`'s
        contract).
    dense : bool, default True
        Return an (N, M) array; otherwise a sparse COO plan, as
        :func:`tsw.min_sliced_transport_plan`.
    batch_size : int, optional
        Entries whose cost is gathered at once.
    validate : bool, default True
        Run the value checks.
    log : bool, default False
        Also return ``{"projection": theta, "initial_cost": ..., "costs": ...}``: the
        returned direction (d,) or (B, d), min-pivot's cost over the starting
        directions, and the cost of every direction visited, (n_iter + 1,) or
        (B, n_iter + 1) (detached; the returned cost is their minimum).

    Returns
    -------
    plan : Tensor or ndarray of shape (N, M) or (B, N, M), or sparse
        The monotone plan along the final direction.
    cost : Tensor or ndarray of shape () or (B,)
        Its cost in R^d, differentiable with respect to the points (plan and direction
        held fixed).
    log : dict, optional
        With ``log=True``.

    Raises
    ------
    TypeError, ValueError
        As :func:`tsw.min_sliced_transport_plan`, and for negative ``n_iter``, ``lr``,
        ``smoothing`` or a ``n_perturbations`` below 1.

    Notes
    -----
    A step costs ``n_perturbations + 1`` monotone plans and two products with the
    points, O((n_perturbations + 1) (N + M) log(N + M) + (N + M) d), and the exact cost
    of the new direction's plan, O((N + M) d). The search is local and the objective is
    not convex: more starting directions help more in high dimension than more steps.

    References
    ----------
    .. [Mahey2023b] G. Mahey, L. Chapel, G. Gasso, C. Bonet, N. Courty. Fast optimal
       transport through sliced generalized Wasserstein geodesics. NeurIPS 2023.

    Examples
    --------
    >>> import torch, tsw
    >>> g = torch.Generator().manual_seed(0)
    >>> X = torch.randn(64, 5, generator=g); Y = torch.randn(64, 5, generator=g) + 1
    >>> _, start = tsw.min_sliced_transport_plan(X, Y, n_projections=8, seed=0)
    >>> plan, cost = tsw.swgg(X, Y, n_projections=8, seed=0)
    >>> bool(cost <= start)
    True
    """
    check_bool(log, "log")
    dense = check_bool(dense, "dense")
    n_iter = check_nonnegative_int(n_iter, "n_iter")
    lr = check_nonnegative_float(lr, "lr")
    smoothing = check_nonnegative_float(smoothing, "smoothing")
    n_perturbations = check_positive_int(n_perturbations, "n_perturbations")
    s = _Sliced(
        plan_problem(X_s, X_t, a, b, seed, generator, validate),
        metric=metric,
        p=p,
        projections=projections,
        n_projections=n_projections,
        batch_size=batch_size,
    )
    m = s.measures
    X, Y = m.X_s.detach(), m.X_t.detach()
    # centred data: the surrogate's gradient is translation-invariant, its rounding not
    centre = 0.5 * (X.mean(1, keepdim=True) + Y.mean(1, keepdim=True))
    Xc, Yc = X - centre, Y - centre
    wa, wb = m.a.detach().unsqueeze(1), m.b.detach().unsqueeze(1)
    B, N, M = X.shape[0], X.shape[1], Y.shape[1]
    with torch.no_grad():
        costs = s.costs()  # (B, L)
        best = costs.argmin(-1)
        P = s.projections if s.projections.dim() == 3 else s.projections.unsqueeze(0)
        P = P.expand(costs.shape[0], -1, -1)
        theta = P[torch.arange(costs.shape[0]), :, best]  # (B, d)
        initial = costs.min(-1).values
        # the plan along the best direction, in the form of the steps' plans (N + M - 1
        # entries): min-pivot's, up to the order of exactly tied coordinates
        current = _plan_along(X, Y, wa, wb, theta)
        cost = s.costs(*(t.unsqueeze(1) for t in current))[:, 0]
        best_theta, best_cost, entries = theta, cost, current
        trace = [cost]
        for step in range(n_iter):
            rng = s.problem.rng
            noise = (rng.normal(B, n_perturbations, N), rng.normal(B, n_perturbations, M))
            grad = _surrogate_grad(Xc, Yc, wa, wb, theta, current, smoothing, noise)
            tangent = grad - (grad * theta).sum(-1, keepdim=True) * theta
            norm = torch.linalg.vector_norm(tangent, dim=-1, keepdim=True)
            move = -tangent / norm.clamp_min(torch.finfo(norm.dtype).tiny)
            eta = lr / math.sqrt(1 + step / 10)
            theta = math.cos(eta) * theta + math.sin(eta) * move
            theta = theta / torch.linalg.vector_norm(theta, dim=-1, keepdim=True)
            current = _plan_along(X, Y, wa, wb, theta)
            cost = s.costs(*(t.unsqueeze(1) for t in current))[:, 0]
            better = cost < best_cost
            best_theta = torch.where(better.unsqueeze(-1), theta, best_theta)
            best_cost = torch.where(better, cost, best_cost)
            keep = better.unsqueeze(-1)
            entries = (
                torch.where(keep, current[0], entries[0]),
                torch.where(keep, current[1], entries[1]),
                torch.where(keep, current[2], entries[2]),
            )
            trace.append(cost)
    theta = best_theta
    rows, cols, mass = entries
    final = s.costs(rows.unsqueeze(1), cols.unsqueeze(1), mass.unsqueeze(1))[:, 0]
    acc = s.accumulator(dense)
    acc.add(rows, cols, mass)
    plan = acc.result()
    if not log:
        return plan, s.out(final)
    info = {
        "projection": s.out(theta),
        "initial_cost": s.out(initial),
        "costs": s.out(torch.stack(trace, dim=-1)),
    }
    return plan, s.out(final), info


def _plan_along(
    X: Tensor, Y: Tensor, wa: Tensor, wb: Tensor, theta: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Return the monotone plan along ``theta`` (B, d): rows, cols, mass (B, N + M - 1)."""
    cs = torch.einsum("bnd,bd->bn", X, theta)
    ct = torch.einsum("bnd,bd->bn", Y, theta)
    return monotone_plan(cs, ct, wa[:, 0], wb[:, 0])


def _surrogate_grad(
    X: Tensor,
    Y: Tensor,
    wa: Tensor,
    wb: Tensor,
    theta: Tensor,
    entries: tuple[Tensor, Tensor, Tensor],
    smoothing: float,
    noise: tuple[Tensor, Tensor],
) -> Tensor:
    r"""Return the gradient of the smoothed surrogate at ``theta`` (module notes), (B, d).

    Written with scalars per entry only: with :math:`z_e = \langle m_e, \theta\rangle`
    and :math:`\tilde z_e = \langle \tilde m_e, \theta\rangle`, the gradient is
    :math:`-8 (\sum_e w_e (2 z_e - \tilde z_e) m_e - \sum_e w_e z_e \tilde m_e)`, and
    both sums are weighted sums of midpoints, that is of the points: two products
    with the (n, d) points, O((N + M) d) a step, and no (entries, d) array. ``noise``
    holds standard normal draws of shape (B, R, N) and (B, R, M): ``R`` perturbed plans.
    """
    rows, cols, w = entries  # (B, K)
    B = theta.shape[0]
    R = noise[0].shape[1]
    N, M = X.shape[1], Y.shape[1]
    cs = torch.einsum("bnd,bd->bn", X, theta)
    ct = torch.einsum("bnd,bd->bn", Y, theta)
    spread = torch.cat([cs, ct], dim=-1).std(-1, keepdim=True).unsqueeze(1)  # (B, 1, 1)
    cs_r = cs.unsqueeze(1) + smoothing * spread * noise[0]
    ct_r = ct.unsqueeze(1) + smoothing * spread * noise[1]
    r_rows, r_cols, r_w = monotone_plan(cs_r, ct_r, wa, wb)  # (B, R, K')
    z = 0.5 * (torch.gather(cs, 1, rows) + torch.gather(ct, 1, cols))  # (B, K)
    z_r = 0.5 * (  # the perturbed plan's midpoints on the unperturbed line
        torch.gather(cs.unsqueeze(1).expand(-1, R, -1), 2, r_rows)
        + torch.gather(ct.unsqueeze(1).expand(-1, R, -1), 2, r_cols)
    )
    # the overlaps of the plan's quantile intervals with each perturbed plan's
    ia, jb, overlap = northwest_corner(w.unsqueeze(1).expand(-1, R, -1), r_w)  # (B, R, C)
    wz_blur = z.new_zeros(z.shape).scatter_add_(
        1, ia.reshape(B, -1), (overlap * torch.gather(z_r, 2, jb)).reshape(B, -1)
    )  # R w_e <m~_e, theta>
    a = 2 * w * z - wz_blur / R  # the weight of m_e
    q = overlap * torch.gather(z.unsqueeze(1).expand(-1, R, -1), 2, ia) / R
    Q = z_r.new_zeros(z_r.shape).scatter_add_(2, jb, q)  # the weight of m'_e'
    half_a, half_q = 0.5 * a, -0.5 * Q.reshape(B, -1)
    u = X.new_zeros(B, N).scatter_add_(1, rows, half_a)
    u.scatter_add_(1, r_rows.reshape(B, -1), half_q)
    v = Y.new_zeros(B, M).scatter_add_(1, cols, half_a)
    v.scatter_add_(1, r_cols.reshape(B, -1), half_q)
    return -8 * (torch.einsum("bn,bnd->bd", u, X) + torch.einsum("bm,bmd->bd", v, Y))
