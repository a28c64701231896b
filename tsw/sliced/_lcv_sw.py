r"""Control-variate sliced Wasserstein (LCV-SW, UCV-SW; Nguyen and Ho, ICLR 2024).

The value needs every direction's cost before it can be formed (the coefficient of
the control variate is a statistic of all of them), so :func:`lcv_sw` asks the driver
for the per-direction costs (:func:`~tsw.core._driver.evaluate`, with its blocks and
ranks), forms the corrected per-direction terms, and returns them as a new
:class:`~tsw.core._output.Evaluation` for the mean, the root and the log. The
mathematics is :func:`gaussian_variate` and :func:`corrected_costs`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from tsw.core._api import distance
from tsw.core._driver import evaluate
from tsw.core._output import Evaluation
from tsw.core._ranges import power_of_two
from tsw.core._validation import Measures, check_choice
from tsw.sliced._sw import line_projection, resolve_projections

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from tsw.core._api import SWOptions
    from tsw.core._problem import Problem
    from tsw.core._random import Seed

__all__ = ["corrected_costs", "direction_costs", "gaussian_variate", "lcv_sw"]

#: the control variates: the Gaussian approximations' W_2^2 without (lower) or with
#: (upper) the projected variances
VARIATES = ("lower", "upper")
#: how the coefficient is estimated from the L directions
COEFFICIENTS = ("pooled", "leave_one_out")


def check_variate(value: object, name: str = "variate") -> str:
    """Return ``value`` if it is one of :data:`VARIATES`, else raise naming them."""
    return check_choice(value, name, VARIATES)


def check_coefficient(value: object, name: str = "coefficient") -> str:
    """Return ``value`` if it is one of :data:`COEFFICIENTS`, else raise naming them."""
    return check_choice(value, name, COEFFICIENTS)


# --------------------------------------------------------------------------- mathematics


def _mean_and_centred(X: Tensor, w: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Weighted mean (B, d), centred points (B, n, d) and normalised weights (B, n)."""
    w = w / w.sum(-1, keepdim=True)
    m = (w.unsqueeze(-1) * X).sum(-2)
    return m, X - m.unsqueeze(-2), w


def gaussian_variate(
    measures: Measures, projections: Tensor, variate: str
) -> tuple[Tensor, Tensor]:
    r"""Return the control variate :math:`G(\theta_l)` (B, L) and its mean on the sphere (B, 1).

    With :math:`m_1, m_2` the means and :math:`\Sigma_1, \Sigma_2` the covariances of the
    two measures (weights normalised), ``"lower"`` is
    :math:`G(\theta) = (\theta^\top (m_1 - m_2))^2`, the :math:`W_2^2` of the projected
    Gaussian approximations without their variances (a lower bound of the projected
    :math:`W_2^2`), and ``"upper"`` adds :math:`\theta^\top \Sigma_1 \theta +
    \theta^\top \Sigma_2 \theta` (an upper bound). For :math:`\theta` uniform on the
    sphere, :math:`E[\theta\theta^\top] = I / d`, so :math:`E[G] = (|m_1 - m_2|^2 +
    [\mathrm{tr}\,\Sigma_1 + \mathrm{tr}\,\Sigma_2]) / d`.
    """
    m1, C1, w1 = _mean_and_centred(measures.X_s, measures.a)
    m2, C2, w2 = _mean_and_centred(measures.X_t, measures.b)
    diff = (m1 - m2).unsqueeze(-2)  # (B, 1, d)
    # means equal up to their rounding (a few eps times the points' magnitude) differ by
    # noise, which the lower variate would square into a variate of pure rounding: 0
    top_s, top_t = (x.detach().abs().flatten(1).amax(-1) for x in (measures.X_s, measures.X_t))
    top = torch.maximum(top_s, top_t)  # (B,)
    noise = diff.detach().abs().amax(-1).squeeze(-1) <= 64 * torch.finfo(diff.dtype).eps * top
    diff = torch.where(noise[:, None, None], torch.zeros_like(diff), diff)
    d = diff.shape[-1]
    G = torch.matmul(diff, projections).squeeze(-2).square()  # (B, L)
    mean = diff.square().sum(-1)  # (B, 1)
    if variate == "upper":
        for C, w in ((C1, w1), (C2, w2)):
            G = G + (w.unsqueeze(-1) * torch.matmul(C, projections).square()).sum(-2)
            mean = mean + (w * C.square().sum(-1)).sum(-1, keepdim=True)
    return G, mean / d


def corrected_costs(costs: Tensor, G: Tensor, mean: Tensor, coefficient: str) -> Tensor:
    r"""Return the per-direction terms :math:`W_l - \hat\alpha\, (G_l - E[G])` (B, L).

    Their mean is the control-variate estimate of :math:`SW_p^p`.
    ``"pooled"`` (the authors' estimator): one coefficient from all ``L`` directions,

    .. math::

        \hat\alpha = \frac{\frac1L \sum_l (W_l - \bar W)(G_l - E[G])}
            {\frac1L \sum_l (G_l - E[G])^2},

    unbiased up to :math:`O(1/L)` (the coefficient is estimated from the same
    directions). ``"leave_one_out"``: direction ``l`` is corrected with the coefficient
    of the other ``L - 1`` directions, independent of it, so that every term has mean
    :math:`SW_p^p` exactly (no coefficient for ``L = 1``: plain SW). Autograd
    differentiates through the coefficient too (as the authors' code does), so the
    gradient is the exact derivative of the estimate.
    """
    # in units of powers of two (exact): D of its mean, the costs of their largest, so
    # that the products and squares below neither overflow nor underflow (float32 data
    # of magnitude 1e15 or 1e-15 square to 1e60 or 1e-60 there)
    s = power_of_two(mean)  # (B, 1)
    c = power_of_two(costs.detach().abs().amax(-1, keepdim=True))
    D = (G - mean) / s  # (B, L), mean zero over the sphere
    W = costs / c
    # a variate that does not vary (d = 1, or identical means for the lower one) leaves
    # only rounding in D: no correction then (the ratio of two rounding errors is noise)
    floor = (100 * torch.finfo(costs.dtype).eps * mean.detach() / s).square()
    L = costs.shape[-1]
    if coefficient == "pooled":
        cov = ((W - W.mean(-1, keepdim=True)) * D).mean(-1, keepdim=True)
        return costs - c * (_ratio(cov, D.square().mean(-1, keepdim=True), floor) * D)
    if L < 2:
        return costs
    sw, sd = W.sum(-1, keepdim=True), D.sum(-1, keepdim=True)
    swd, sdd = (W * D).sum(-1, keepdim=True), D.square().sum(-1, keepdim=True)
    w_rest = (sw - W) / (L - 1)  # mean of the others' costs
    cov = ((swd - W * D) - w_rest * (sd - D)) / (L - 1)
    var = (sdd - D.square()) / (L - 1)
    return costs - c * (_ratio(cov, var, floor) * D)


def _ratio(cov: Tensor, var: Tensor, floor: Tensor) -> Tensor:
    """``cov / var`` where ``var`` exceeds ``floor``, else 0 (no correction)."""
    ok = var > floor
    return torch.where(ok, cov / torch.where(ok, var, torch.ones_like(var)), torch.zeros_like(cov))


def direction_costs(problem: Problem, projections: Tensor) -> Evaluation:
    """SW's evaluation on ``projections``: per-direction :math:`W_p^p` (B, L), via the driver.

    The driver's range check, blocks and ranks apply; the method transforms
    ``.per_slice`` and returns a new :class:`~tsw.core._output.Evaluation`.
    """
    return evaluate(problem, line_projection, projections, projections=projections)


def sw_projections(
    problem: Problem,
    projections: Tensor | None,
    n_projections: int,
    orthogonal: bool,
    sampling: str,
) -> Tensor:
    """Explicit directions checked against the data, or SW's drawn ones (d, L) or (B, d, L)."""
    return resolve_projections(
        problem.measures,
        projections,
        n_projections,
        orthogonal,
        problem.rng,
        sampling,
        validate=problem.validate,
    )


# --------------------------------------------------------------------------- public function


@distance(chunked=True, checks={"variate": check_variate, "coefficient": check_coefficient})
def lcv_sw(
    problem: Problem,
    /,
    n_projections: int = 50,
    p: float = 2,
    projections: Tensor | None = None,
    seed: Seed = None,
    log: bool = False,
    *,
    variate: str = "lower",
    coefficient: str = "pooled",
    orthogonal: bool = False,
    sampling: str = "iid",
    **options: Unpack[SWOptions],
) -> Evaluation:
    r"""Sliced Wasserstein with a Gaussian control variate (LCV-SW, UCV-SW).

    References: [Nguyen2024a]_.

    An estimate of :math:`SW_p^p` with the variance of Monte-Carlo SW reduced by a
    control variate :math:`G(\theta)` whose mean over the sphere is known in closed form
    (:func:`gaussian_variate`): with :math:`W_l = W_p^p(\theta_l \# \mu, \theta_l \# \nu)`
    for uniform directions :math:`\theta_1, \dots, \theta_L`,

    .. math::

        \widehat{SW}_p^p = \frac1L \sum_{l=1}^L \big(W_l - \hat\alpha\,(G(\theta_l) -
        E[G])\big),

    with :math:`\hat\alpha` the estimated optimal coefficient (:func:`corrected_costs`).
    The lower variate (LCV-SW) is the projected :math:`W_2^2` of the two measures'
    Gaussian approximations without their variances, :math:`(\theta^\top(m_1 -
    m_2))^2`; the upper one (UCV-SW) adds :math:`\theta^\top(\Sigma_1 + \Sigma_2)\theta`.
    Both are functions of :math:`\theta` of known mean, so the estimate stays unbiased
    (exactly with ``coefficient="leave_one_out"``, up to :math:`O(1/L)` with the
    authors' pooled coefficient) and its variance drops by the squared correlation of
    :math:`W` and :math:`G`. The value is the ``1/p`` root of the estimate, as
    :func:`tsw.sw`'s; the estimate can fall below 0 (rarely: the correction exceeds the
    mean cost), where the root form returns 0 with a zero gradient (its
    ``log["per_tree"]`` then holds zeros) and ``power=True`` returns the estimate itself.

    Parameters
    ----------
    X_s, X_t, a, b
        As in :func:`tsw.sw`.
    n_projections : int, default 50
        ``L``, ignored when ``projections`` is given.
    p : float, default 2
        Order of the one-dimensional Wasserstein distances (the variate is a
        :math:`W_2^2`; it is a valid control variate for every ``p``, best correlated
        at ``p = 2``).
    projections : Tensor of shape (d, L) or (B, d, L), optional
        Explicit unit directions (POT's layout), taken as uniform draws: :math:`E[G]`
        is the sphere's mean.
    variate : {"lower", "upper"}, default "lower"
        LCV-SW or UCV-SW.
    coefficient : {"pooled", "leave_one_out"}, default "pooled"
        The authors' coefficient from all directions, or each direction's from the
        others (exactly unbiased).
    orthogonal, sampling
        How the directions are drawn, as in :func:`tsw.sw` (each direction stays
        uniform, so :math:`E[G]` holds).

    Returns
    -------
    Tensor of shape () or (B,)
        Same dtype and device as ``X_s``.

    Raises
    ------
    TypeError, ValueError
        For malformed inputs, ``p < 1``, malformed projections or an unknown
        ``variate`` / ``coefficient``.

    Notes
    -----
    ``log["per_tree"]`` holds the corrected terms (their mean is the estimate),
    ``log["projections"]`` the directions and ``log["projected_emds"]`` the plain costs
    :math:`W_l` (POT's key; their mean is SW's); the standard error is that of the
    corrected terms. The gradient and the second derivatives are those of the estimate,
    the coefficient's included. Cost: SW's, plus one (n, d) x (d, L) product per measure
    for UCV-SW's projected variances.

    References
    ----------
    .. [Nguyen2024a] K. Nguyen, N. Ho. Sliced Wasserstein estimation with control
       variates. ICLR 2024.

    Examples
    --------
    >>> import torch, tsw
    >>> g = torch.Generator().manual_seed(0)
    >>> X, Y = torch.randn(100, 3, generator=g), torch.randn(80, 3, generator=g) + 2
    >>> v = tsw.lcv_sw(X, Y, n_projections=20, seed=0)
    >>> w = tsw.sw(X, Y, n_projections=4000, seed=1)
    >>> bool(abs(v - w) < 0.1 * w)
    True
    """
    projections = sw_projections(problem, projections, n_projections, orthogonal, sampling)
    plain = direction_costs(problem, projections)
    G, mean = gaussian_variate(problem.measures, projections, variate)
    terms = corrected_costs(plain.per_slice, G, mean, coefficient)
    if not problem.power:  # the root of a negative estimate: 0 exactly, with a zero gradient
        negative = terms.detach().mean(-1, keepdim=True) < 0
        terms = torch.where(negative, torch.zeros_like(terms), terms)
    return Evaluation(terms, projections, projections, {"projected_emds": plain.per_slice})
