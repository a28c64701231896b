r"""Sliced Wasserstein baselines: Monte-Carlo SW, orthogonal SW and max-SW.

All three average (or maximise) the closed-form one-dimensional :math:`W_p^p` of the
projected measures and return the ``1/p`` root, as POT's
``ot.sliced_wasserstein_distance`` does. SW is the degenerate tree-sliced distance (one
line per slice, no split) and goes through the driver (:mod:`tsw.core._driver`) with
:func:`line_projection`. Max-SW does too for its value, but its direction comes from an
ascent on the sphere that no projection describes: that loop lives in :func:`max_sw`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from tsw.core._api import distance
from tsw.core._ascent import detached, sphere_ascent
from tsw.core._directions import line_projection, resolve_projections, sample_projections
from tsw.core._driver import evaluate
from tsw.core._output import Evaluation
from tsw.core._problem import Problem
from tsw.core._projection import closed_form
from tsw.core._random import Seed
from tsw.core._ranges import check_range
from tsw.core._twice import first_order_only
from tsw.core._validation import Measures

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from tsw.core._api import SharedOptions, SWOptions

__all__ = ["line_projection", "max_sw", "resolve_projections", "sample_projections", "sw"]


def _direction_costs(measures: Measures, projections: Tensor, p: float) -> Tensor:
    """Per-direction :math:`W_p^p`, shape (B, L)."""
    return closed_form(line_projection(measures, projections), p)


@distance(chunked=True, sliced=True)
def sw(
    problem: Problem,
    /,
    n_projections: int = 50,
    p: float = 2,
    projections: Tensor | None = None,
    seed: Seed = None,
    log: bool = False,
    *,
    orthogonal: bool = False,
    sampling: str = "iid",
    **options: Unpack[SWOptions],
) -> Evaluation:
    r"""Monte-Carlo sliced Wasserstein distance :math:`SW_p`.

    References: [Bonneel2015]_ and [Rowland2019]_.

    .. math::

        SW_p(\mu, \nu) = \Big(\frac1L \sum_{l=1}^L
            W_p^p(\theta_l \# \mu, \theta_l \# \nu)\Big)^{1/p},

    with :math:`W_p` the true one-dimensional Wasserstein-:math:`p` distance. With the
    same ``projections`` this equals ``ot.sliced_wasserstein_distance``.

    Parameters
    ----------
    X_s : Tensor of shape (N, d) or (B, N, d)
    X_t : Tensor of shape (M, d) or (B, M, d)
    a, b : Tensor of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative weights of equal totals; uniform by default.
    n_projections : int, default 50
        ``L``, ignored when ``projections`` is given.
    p : float, default 2
        Order of the one-dimensional Wasserstein distances.
    projections : Tensor of shape (d, L) or (B, d, L), optional
        Explicit unit directions as columns (POT's layout); with ``validate``, NaN, Inf
        and columns whose norm is not 1 (to ``max(1e3 eps, 1e-6)``) raise.
    orthogonal : bool, default False
        Sample blocks of orthonormal directions (orthogonal SW); the same as
        ``sampling="orthogonal"``.
    sampling : {"iid", "orthogonal", "qmc"}, default "iid"
        How the directions are spread (:func:`tsw.sample_projections`): i.i.d.,
        stratified in orthonormal frames, or randomised quasi-Monte Carlo; each direction
        stays uniform, so the estimate stays unbiased.

    Returns
    -------
    Tensor of shape () or (B,)

    Raises
    ------
    TypeError, ValueError
        For malformed inputs, ``p < 1`` or malformed projections.

    References
    ----------
    .. [Bonneel2015] N. Bonneel, J. Rabin, G. Peyré, H. Pfister. Sliced and Radon
       Wasserstein barycenters of measures. JMIV 2015.
    .. [Rowland2019] M. Rowland, J. Hron, Y. Tang, K. Choromanski, T. Sarlos,
       A. Weller. Orthogonal estimation of Wasserstein distances. AISTATS 2019.

    Examples
    --------
    >>> import torch, tsw
    >>> X = torch.zeros(1, 2); Y = torch.tensor([[3.0, 4.0]])
    >>> tsw.sw(X, Y, projections=torch.tensor([[1.0], [0.0]]))
    tensor(3.)
    """
    projections = resolve_projections(
        problem.measures,
        projections,
        n_projections,
        orthogonal,
        problem.rng,
        sampling,
        validate=problem.validate,
    )
    return evaluate(problem, line_projection, projections, projections=projections)


@distance(sliced=True)
def max_sw(
    problem: Problem,
    /,
    *,
    p: float = 2,
    n_iter: int = 100,
    lr: float = 0.05,
    n_init: int = 16,
    sampling: str = "iid",
    **options: Unpack[SharedOptions],
) -> Evaluation:
    r"""Max-sliced Wasserstein distance by projected gradient ascent.

    References: [Deshpande2019]_.

    .. math::

        \max\text{-}SW_p(\mu, \nu) = \max_{\theta \in \mathbb S^{d-1}}
            W_p(\theta \# \mu, \theta \# \nu).

    The direction starts at the best of ``n_init`` random unit vectors, then takes
    ``n_iter`` steps of Riemannian gradient ascent on the sphere for
    :math:`W_p^p` (supports detached): a step of angle ``eta`` along the tangent
    gradient, accepted only if the cost increases; ``eta`` starts at ``lr`` and grows
    by 1.5 after an accepted step, halves after a rejected one. The ascent is
    therefore monotone and free of the data's scale. The returned value is
    :math:`W_p` along the final direction, whose gradient with respect to the
    supports is the max-SW gradient (Danskin).

    Parameters
    ----------
    X_s, X_t, a, b
        As in :func:`sw`.
    p : float, default 2
        Order.
    n_iter : int, default 100
        Ascent steps (0 keeps the best random direction).
    lr : float, default 0.05
        Initial step angle in radians.
    n_init : int, default 16
        Random starting directions.
    sampling : {"iid", "orthogonal", "qmc"}, default "iid"
        How the ``n_init`` starting directions are spread, as in :func:`tsw.sw`
        (``"orthogonal"``: blocks of orthonormal frames, which cover the sphere evenly).

    Returns
    -------
    Tensor of shape () or (B,)
        A lower bound of the true max-SW (a non-convex maximisation) and an upper
        bound of :math:`SW_p`'s per-direction costs seen; always :math:`\le W_p`.

    References
    ----------
    .. [Deshpande2019] I. Deshpande, Y.-T. Hu, R. Sun, et al. Max-sliced Wasserstein
       distance and its use for GANs. CVPR 2019.

    Examples
    --------
    >>> import torch, tsw
    >>> X = torch.tensor([[0.0, 0.0], [0.0, 1.0]]); Y = X + torch.tensor([2.0, 0.0])
    >>> round(float(tsw.max_sw(X, Y, seed=0)), 3)
    2.0
    """
    if problem.validate:
        check_range(problem.measures)
    with torch.inference_mode(False):  # the ascent differentiates, in any mode
        best = _ascent(problem, n_iter=n_iter, lr=lr, n_init=n_init, sampling=sampling)
    # the value along the final direction goes through the driver (one slice per item);
    # the range was checked before the ascent
    value = evaluate(problem.replace(validate=False), line_projection, best, projections=best)
    why = "its direction is the ascent's maximiser, held fixed (Danskin's theorem)"
    return value._replace(per_slice=first_order_only(value.per_slice, "max_sw", why))


def _ascent(problem: Problem, *, n_iter: int, lr: float, n_init: int, sampling: str) -> Tensor:
    """Max-SW's direction, (B, d, 1): best of ``n_init`` random ones, then the ascent.

    Runs on detached copies of the measures (:func:`~tsw.core._ascent.detached`), by
    :func:`~tsw.core._ascent.sphere_ascent`.
    """
    measures, p = detached(problem.measures), problem.p
    init = resolve_projections(measures, None, n_init, False, problem.rng, sampling)
    with torch.no_grad():
        costs = _direction_costs(measures, init, p)  # (B, n_init)
        theta = init.T[costs.argmax(-1)]  # (B, d)
        best = costs.max(-1).values

    def cost(directions: Tensor) -> Tensor:  # (B, d) -> (B,)
        return _direction_costs(measures, directions.unsqueeze(-1), p)[:, 0]

    return sphere_ascent(cost, theta, best, n_iter=n_iter, lr=lr).unsqueeze(-1)  # (B, d, 1)
