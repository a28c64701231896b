r"""Sliced baselines for measures of unequal mass, wrapping POT's one-dimensional solvers.

* :func:`partial_sw`: sliced partial optimal transport (Bonneel & Coeurjolly 2019), each
  slice solved exactly by POT's ``ot.partial.partial_wasserstein_1d`` (Chapel & Tavenard
  2025).
* :func:`unbalanced_sw`: sliced unbalanced optimal transport with KL marginal penalties
  (SUOT, Bonet et al. 2025), each slice solved by POT's Frank-Wolfe solver as in
  ``ot.unbalanced.sliced_unbalanced_ot``.

Both take POT's argument order and the keyword options of :func:`tsw.sw`, and return the
``1/p`` root of the mean per-slice cost. POT solves on detached copies (on the CPU for the
partial solver); the value is then recomputed in torch from POT's solution, so that
gradients are those of the envelope theorem (the solution held fixed). They use the
driver (:mod:`tsw.core._driver`) for validation, the seeding contract, the projections and
the mean and root, but not its closed form: the per-slice costs come from POT's solvers,
one call per slice.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, cast

import numpy as np
import torch
from torch import Tensor

from tsw.core._api import distance
from tsw.core._output import Evaluation
from tsw.core._problem import Problem
from tsw.core._ranges import check_range
from tsw.core._safe import recordable
from tsw.core._sort import sort_last
from tsw.core._twice import first_order_only
from tsw.core._validation import check_mass, check_positive_int
from tsw.core.wasserstein_1d import quantile_cost
from tsw.sliced._sw import line_projection, resolve_projections

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from tsw.core._api import SharedOptions

__all__ = ["partial_sw", "unbalanced_sw"]


def _line_coordinates(
    problem: Problem,
    projections: Tensor | None,
    n_projections: int,
    orthogonal: bool,
    sampling: str,
) -> tuple[Tensor, Tensor, Tensor]:
    """Projected supports (B, L, N) and (B, L, M) on explicit or drawn directions."""
    if problem.measures.X_s.device.type == "meta":
        raise ValueError(
            "partial_sw and unbalanced_sw solve each slice with POT, which needs values: "
            "X_s on the meta device has none"
        )
    if problem.validate:
        check_range(problem.measures)
    measures = problem.measures
    proj = resolve_projections(
        measures,
        projections,
        n_projections,
        orthogonal,
        problem.rng,
        sampling,
        validate=problem.validate,
    )
    coords = line_projection(measures, proj).coords
    N = measures.X_s.shape[-2]
    return coords[..., :N], coords[..., N:], proj


def _check_reg_m(reg_m: object) -> tuple[float, float]:
    """``reg_m`` as a pair of positive reals (``inf`` allowed: a hard marginal)."""
    pair = tuple(reg_m) if isinstance(reg_m, tuple | list) else (reg_m, reg_m)
    reals = [
        float(r)
        for r in pair
        if not isinstance(r, bool) and isinstance(r, int | float) and not math.isnan(r) and r > 0
    ]
    if len(pair) != 2 or len(reals) != 2:
        raise ValueError(
            "reg_m must be a real number > 0 or a pair of them (inf allowed: a hard "
            f"marginal); got {reg_m!r}"
        )
    return reals[0], reals[1]


def check_reg_m(value: object, name: str = "reg_m") -> tuple[float, float]:
    """``reg_m`` as a pair of positive reals (``inf`` allowed: a hard marginal)."""
    return _check_reg_m(value)


def _check_n_transported(value: object, name: str = "n_transported") -> int | None:
    return None if value is None else check_positive_int(value, name)


@distance(sliced=True, balanced=False, checks={"n_transported": _check_n_transported})
def partial_sw(
    problem: Problem,
    /,
    *,
    n_transported: int | None = None,
    n_projections: int = 50,
    p: float = 2,
    projections: Tensor | None = None,
    orthogonal: bool = False,
    sampling: str = "iid",
    **options: Unpack[SharedOptions],
) -> Evaluation:
    r"""Sliced partial Wasserstein distance between point clouds of unit-mass atoms.

    References: [Bonneel2019]_ and [Chapel2025]_.

    Every atom of either cloud carries mass :math:`1/k`, with :math:`k` = ``n_transported``
    (so the source has mass :math:`N/k`, the target :math:`M/k`), and on every slice
    exactly mass 1 (:math:`k` atoms of each side) is transported:

    .. math::

        \mathrm{PSW}_p(\mu, \nu) = \Big(\frac1L \sum_{l=1}^L \frac1k
            \min_{\substack{I \subset [N], J \subset [M]\\ |I| = |J| = k}}
            W_p^p\big(\textstyle\sum_{i \in I} \delta_{\langle\theta_l, x_i\rangle},
                      \sum_{j \in J} \delta_{\langle\theta_l, y_j\rangle}\big)\Big)^{1/p}.

    The subsets come from POT's exact one-dimensional solver; the cost of the selected
    atoms (monotone matching) is recomputed in torch, so gradients with respect to the
    supports hold the selection fixed (exact almost everywhere). With
    ``n_transported = N = M`` it equals :func:`tsw.sw` for the same projections.

    Parameters
    ----------
    X_s : Tensor of shape (N, d) or (B, N, d)
    X_t : Tensor of shape (M, d) or (B, M, d)
    a, b : None
        POT's solver handles equal unit masses only: weights must be ``None``.
    n_transported : int, optional
        :math:`k \le \min(N, M)`, the number of atoms transported on each side;
        ``min(N, M)`` by default.
    n_projections : int, default 50
        ``L``, ignored when ``projections`` is given.
    p : int, default 2
        Order of the one-dimensional costs :math:`|s - t|^p`, an integer: POT 0.9.7's
        solver truncates a non-integer ``p`` to an integer (and then selects the wrong
        atoms), so a non-integer ``p`` raises here.
    projections : Tensor of shape (d, L) or (B, d, L), optional
        Explicit unit directions as columns (POT's layout).
    orthogonal : bool, default False
        Blocks of orthonormal directions, as in :func:`tsw.sw`.
    sampling : {"iid", "orthogonal", "qmc"}, default "iid"
        How the directions are spread, as in :func:`tsw.sw` (unbiased in every mode).

    Returns
    -------
    Tensor of shape () or (B,)

    Raises
    ------
    TypeError, ValueError
        For malformed inputs, weights that are not ``None``, ``n_transported`` out of
        range, ``p < 1`` or not an integer, or malformed projections.

    Notes
    -----
    One call of POT's solver per slice and batch item, on the CPU in float64: O(L n log n)
    but a Python loop over ``B * L``, and a host-device copy on a GPU.

    References
    ----------
    .. [Bonneel2019] N. Bonneel, D. Coeurjolly. SPOT: sliced partial optimal transport.
       ACM TOG 2019.
    .. [Chapel2025] L. Chapel, R. Tavenard. One for all and all for one: efficient
       computation of partial Wasserstein distances on the line. ICLR 2025.

    Examples
    --------
    >>> import torch, tsw
    >>> X = torch.tensor([[0.0], [1.0], [10.0]]); Y = torch.tensor([[0.5], [1.5]])
    >>> # the outlier at 10 is left out: two atoms of mass 1/2 each move by 0.5
    >>> tsw.partial_sw(X, Y, projections=torch.ones(1, 1), p=1)
    tensor(0.5000)
    """
    import ot  # POT's one-dimensional partial solver (imported here, when needed)

    for name, given in zip(("a", "b"), problem.weighted, strict=True):
        if given:
            raise ValueError(
                f"partial_sw supports atoms of equal unit mass only (POT's one-dimensional "
                f"partial solver): pass {name}=None; got weights"
            )
    measures, p = problem.measures, problem.p
    if p != int(p):
        # POT 0.9.7's solver takes an int: a non-integer p is silently truncated there
        raise ValueError(
            f"partial_sw needs an integer p (POT's one-dimensional partial solver); got p={p}"
        )
    N, M = measures.X_s.shape[-2], measures.X_t.shape[-2]
    k = min(N, M) if n_transported is None else n_transported
    if k > min(N, M):
        raise ValueError(f"n_transported must be <= min(N, M) = {min(N, M)}; got n_transported={k}")
    us, vs, proj = _line_coordinates(problem, projections, n_projections, orthogonal, sampling)
    u_np = us.detach().cpu().to(torch.float64).numpy()
    v_np = vs.detach().cpu().to(torch.float64).numpy()
    B, L = us.shape[0], us.shape[1]
    idx_s = np.empty((B, L, k), dtype=np.int64)
    idx_t = np.empty((B, L, k), dtype=np.int64)
    for i in range(B):
        for j in range(L):
            ix, iy, _ = ot.partial.partial_wasserstein_1d(
                u_np[i, j], v_np[i, j], n_transported_samples=k, p=p
            )
            idx_s[i, j], idx_t[i, j] = ix[:k], iy[:k]
    sel_s = torch.gather(us, -1, torch.from_numpy(idx_s).to(us.device))
    sel_t = torch.gather(vs, -1, torch.from_numpy(idx_t).to(vs.device))
    diff = (sort_last(sel_s)[0] - sort_last(sel_t)[0]).abs()
    cost = (diff if p == 1.0 else diff.pow(p)).sum(-1) / k  # (B, L)
    # POT's solver may leave a NaN atom out of the transported ones (validate=False): a
    # slice with a non-finite coordinate costs NaN, not the cost of the other atoms
    finite = np.isfinite(u_np).all(-1) & np.isfinite(v_np).all(-1)
    if not finite.all():
        cost = torch.where(torch.from_numpy(finite).to(cost.device), cost, torch.nan)
    return Evaluation(cost, proj, proj)


def _kl(p: Tensor, q: Tensor) -> Tensor:
    """Generalised KL divergence of non-negative vectors on the last axis (0 log 0 = 0)."""
    pos = p > 0
    ratio = torch.where(pos, p, 1) / torch.where(pos, q, 1)
    return (torch.where(pos, p * torch.log(ratio), 0) - p + q).sum(-1)


@distance(sliced=True, balanced=False, checks={"reg_m": check_reg_m, "n_iter": check_positive_int})
def unbalanced_sw(
    problem: Problem,
    /,
    *,
    mass_s: float | Tensor = 1.0,
    mass_t: float | Tensor = 1.0,
    reg_m: float | tuple[float, float] = 1.0,
    n_projections: int = 50,
    p: float = 2,
    projections: Tensor | None = None,
    orthogonal: bool = False,
    sampling: str = "iid",
    n_iter: int = 10,
    **options: Unpack[SharedOptions],
) -> Evaluation:
    r"""Sliced unbalanced optimal transport with KL marginal penalties (SUOT).

    References: [Bonet2025]_ and [Sejourne2022]_.

    With :math:`\mu = m_s \sum_i \hat a_i \delta_{x_i}` and
    :math:`\nu = m_t \sum_j \hat b_j \delta_{y_j}` (as in :func:`tsw.partial_tsw`),

    .. math::

        \mathrm{SUOT}_p(\mu, \nu) = \Big(\frac1L \sum_{l=1}^L \min_{\pi_1, \pi_2}
            W_p^p(\pi_1, \pi_2) + \rho_1 \mathrm{KL}(\pi_1 \| \theta_l\#\mu)
            + \rho_2 \mathrm{KL}(\pi_2 \| \theta_l\#\nu)\Big)^{1/p},

    with the generalised KL :math:`\sum \pi \log(\pi / \mu) - \pi + \mu` and
    :math:`(\rho_1, \rho_2)` = ``reg_m``. Each slice is solved by POT's Frank-Wolfe
    solver (``ot.unbalanced.uot_1d``, ``n_iter`` steps, approximate) on detached inputs;
    the objective is then evaluated in torch at POT's marginals :math:`\pi_1, \pi_2`, so
    that the value equals ``ot.unbalanced.sliced_unbalanced_ot`` (``p``-th power) and the
    gradients with respect to supports, weights and masses are the envelope-theorem ones
    (exact for POT's marginals, which are themselves approximate).

    Two differences from calling POT 0.9.7 directly, both deliberate: POT's function
    fails on inputs that require gradients (its solver back-propagates through the
    caller's graph); and in the semi-relaxed case (one ``reg_m`` infinite) POT adds the KL
    term summed over *all* slices to every slice, where here each slice gets its own
    (the formula above). With two finite penalties the values agree.

    Parameters
    ----------
    X_s, X_t : Tensor of shape (N, d) / (M, d) or (B, N, d) / (B, M, d)
    a, b : Tensor of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative shapes, normalised by their totals; uniform by default.
    mass_s, mass_t : float or Tensor of shape () or (B,), default 1.0
        Total masses, as in :func:`tsw.partial_tsw`.
    reg_m : float or pair of floats, default 1.0
        Marginal penalties :math:`\rho_1, \rho_2 > 0`; ``inf`` makes a marginal hard
        (both ``inf``: sliced :math:`W_p^p` of equal masses).
    n_projections, p, projections, orthogonal, sampling
        As in :func:`tsw.sw`.
    n_iter : int, default 10
        Frank-Wolfe iterations of POT's solver (POT's default). Each slice's value is
        the objective at POT's current marginals, an upper bound of the slice's UOT that
        decreases with ``n_iter``, or, where those marginals are not finite or cost
        more (large costs against ``reg_m``: data at a large scale, ``p = 8``,
        ``reg_m = 1e-3``, a zero mass), the objective of the empty plan,
        :math:`\rho_1 m_s + \rho_2 m_t`, itself an upper bound; ten steps can be far
        from converged (measured: 6 vs 9 Gaussian points, ``reg_m=0.5``, 12
        projections: 0.661 at 10 steps, 0.444 at 50, 0.439 at 1000), and the early
        iterates depend on tie-breaking in the 1-D duals (equal cumulative weights) and
        on the order of the two measures.

    Returns
    -------
    Tensor of shape () or (B,)

    Raises
    ------
    TypeError, ValueError
        For malformed inputs or masses, ``reg_m`` not positive, ``p < 1``, ``n_iter < 1``
        or malformed projections.

    References
    ----------
    .. [Bonet2025] C. Bonet, K. Nadjahi, T. Séjourné, K. Fatras, N. Courty. Slicing
       unbalanced optimal transport. TMLR 2025.
    .. [Sejourne2022] T. Séjourné, F.-X. Vialard, G. Peyré. Faster unbalanced optimal
       transport: translation invariant Sinkhorn and 1-D Frank-Wolfe. AISTATS 2022.

    Examples
    --------
    >>> import torch, tsw
    >>> X = torch.randn(20, 2, dtype=torch.float64); Y = torch.randn(30, 2, dtype=torch.float64)
    >>> value = tsw.unbalanced_sw(X, Y, mass_t=1.5, reg_m=0.5, n_projections=10, seed=0)
    >>> bool(value > 0)
    True
    """
    import ot  # POT's unbalanced one-dimensional solver (imported here, when needed)

    given_a, given_b = problem.weighted
    measures, p = problem.measures, problem.p
    rho = cast(tuple[float, float], reg_m)  # checked: a pair
    validate = problem.validate
    # POT's Frank-Wolfe steps leave the dtype's range for larger finite penalties
    top = math.sqrt(torch.finfo(measures.X_s.dtype).max) / 1e4
    if any(top < r < math.inf for r in rho):
        raise ValueError(
            f"reg_m={reg_m!r} is beyond its usable range in {measures.X_s.dtype}: a finite "
            f"reg_m must be <= {top:.3g}; pass reg_m=float('inf') for a hard marginal"
        )
    m_s = check_mass(mass_s, "mass_s", measures.X_s, measures.batched, validate).reshape(-1, 1)
    m_t = check_mass(mass_t, "mass_t", measures.X_s, measures.batched, validate).reshape(-1, 1)
    a_hat = measures.a / measures.a.sum(-1, keepdim=True) if given_a else measures.a
    b_hat = measures.b / measures.b.sum(-1, keepdim=True) if given_b else measures.b
    wa, wb = a_hat * m_s, b_hat * m_t  # (B, N), (B, M)
    us, vs, proj = _line_coordinates(problem, projections, n_projections, orthogonal, sampling)
    pi_s, pi_t = [], []
    for i in range(us.shape[0]):
        # POT solves on detached inputs; its solver differentiates internally, which
        # must not touch the caller's graph (plain copies under torch.inference_mode)
        with torch.inference_mode(False), torch.enable_grad():
            pa, pb, _ = ot.unbalanced.uot_1d(
                *(recordable(t) for t in (us[i].T, vs[i].T)),
                rho,
                *(recordable(t) for t in (wa[i], wb[i])),
                p,
                numItermax=n_iter,
            )
        pi_s.append(pa.T)
        pi_t.append(pb.T)
    if pi_s:  # (B, L, N), (B, L, M)
        marg_s, marg_t = torch.stack(pi_s).detach(), torch.stack(pi_t).detach()
    else:  # an empty batch
        marg_s, marg_t = us.new_zeros(us.shape), vs.new_zeros(vs.shape)

    def objective(pi_s: Tensor, pi_t: Tensor) -> Tensor:
        # W_p^p between the fixed marginals (equal totals up to rounding): W_p^p is
        # 1-homogeneous in the common mass; the empty plan (both 0) costs the KL terms only
        total_s, total_t = pi_s.sum(-1, keepdim=True), pi_t.sum(-1, keepdim=True)
        pi_t = pi_t * torch.where(total_t > 0, total_s / torch.where(total_t > 0, total_t, 1), 0)
        cost = quantile_cost(us, vs, pi_s, pi_t, p)  # (B, L)
        if rho[0] != math.inf:
            cost = cost + rho[0] * _kl(pi_s, wa.unsqueeze(-2))
        if rho[1] != math.inf:
            cost = cost + rho[1] * _kl(pi_t, wb.unsqueeze(-2))
        return cost

    # POT's Frank-Wolfe iterates leave the range of the dtype when the costs are large
    # against reg_m (exp(-f / reg_m) over- or underflows: NaN at reg_m = 1e-3, at p = 8 or
    # for a zero mass) and can cost more than transporting nothing. The empty plan is
    # feasible for finite penalties (or a zero mass under an infinite one) and costs
    # rho_1 m_s + rho_2 m_t: a slice whose FW marginals are not finite, or cost more,
    # takes it instead (a better upper bound of the slice's UOT)
    with torch.no_grad():
        fw = objective(marg_s, marg_t)
        zero_s, zero_t = torch.zeros_like(marg_s), torch.zeros_like(marg_t)
        empty = objective(zero_s, zero_t)
        # an infinite penalty fixes its marginal: the empty plan is then feasible only
        # for a zero mass
        for r, m in ((rho[0], m_s), (rho[1], m_t)):
            if r == math.inf:
                empty = torch.where(m.detach() > 0, math.inf, empty)
        bad = (~torch.isfinite(fw) | (fw > empty)) & torch.isfinite(empty)
        # non-finite data (validate=False) must give a non-finite value, not the fallback
        bad &= torch.isfinite(us).all(-1) & torch.isfinite(vs).all(-1)
        bad &= (torch.isfinite(wa).all(-1) & torch.isfinite(wb).all(-1)).unsqueeze(-1)
    if bool(bad.any()):
        marg_s = torch.where(bad.unsqueeze(-1), zero_s, marg_s)
        marg_t = torch.where(bad.unsqueeze(-1), zero_t, marg_t)
    why = "POT's marginals are held fixed (their derivative in the data is not formed)"
    return Evaluation(first_order_only(objective(marg_s, marg_t), "unbalanced_sw", why), proj, proj)
