r"""Energy-based sliced Wasserstein, importance-sampling form (IS-EBSW; Nguyen and Ho, 2023).

Like :mod:`tsw.sliced._lcv_sw`, the value needs every direction's cost first (the
importance weights are normalised over the directions): the driver gives the
per-direction costs (:func:`~tsw.core._driver.evaluate`), :func:`energy_weights` forms
the weights, and the weighted terms are returned as a new
:class:`~tsw.core._output.Evaluation`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from tsw.core._api import distance
from tsw.core._output import Evaluation
from tsw.core._twice import first_order_only
from tsw.core._validation import check_choice
from tsw.sliced._lcv_sw import direction_costs, sw_projections

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from tsw.core._api import SWOptions
    from tsw.core._problem import Problem
    from tsw.core._random import Seed

__all__ = ["eb_sw", "energy_weights", "weighted_terms"]

#: the energy functions f of the slicing distribution sigma(theta) ~ f(W_p^p(theta))
ENERGIES = ("exp", "identity")


def check_energy(value: object, name: str = "energy") -> str:
    """Return ``value`` if it is one of :data:`ENERGIES`, else raise naming them."""
    return check_choice(value, name, ENERGIES)


# --------------------------------------------------------------------------- mathematics


def energy_weights(costs: Tensor, energy: str) -> Tensor:
    r"""Self-normalised importance weights :math:`f(W_l) / \sum_j f(W_j)` (B, L).

    ``"exp"``: :math:`f(x) = e^x` (a softmax of the costs); ``"identity"``:
    :math:`f(x) = x` (uniform weights where every cost is 0). Differentiable in
    ``costs``: :func:`weighted_terms` decides what of it the gradient sees.
    """
    W = costs
    if energy == "exp":
        return torch.softmax(W, dim=-1)
    total = W.sum(-1, keepdim=True)
    uniform = torch.full_like(W, 1.0 / W.shape[-1])
    return torch.where(total > 0, W / torch.where(total > 0, total, 1.0), uniform)


class _HeldWeights(torch.autograd.Function):
    r"""``costs * weights``, differentiated with the weights held fixed.

    The value is :math:`w_l W_l`; the gradient is :math:`w_l \nabla W_l`, the authors'
    (no gradient through the weights). Under ``create_graph`` that gradient is formed
    with the weights' own graph, so that its derivative is the exact derivative of this
    gradient, the weights' change included. Only where the value is the mean of these
    terms (``power=True``, or ``p = 1``): a ``1/p`` root's derivative would read the
    value's own derivative, which through this node holds the weights too
    (:func:`eb_sw` then refuses a second derivative).
    """

    @staticmethod
    def forward(ctx, costs: Tensor, weights: Tensor) -> Tensor:  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        ctx.save_for_backward(weights)
        return costs * weights

    @staticmethod
    def backward(ctx, grad: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        (weights,) = ctx.saved_tensors
        return grad * weights, None


def weighted_terms(costs: Tensor, energy: str) -> tuple[Tensor, Tensor]:
    r"""Return the terms :math:`L\, w_l W_l` (B, L), whose mean is the estimate, and :math:`w`.

    The gradient holds the weights fixed (:class:`_HeldWeights`): :math:`\sum_l w_l
    \nabla W_l`, as in the authors' code.
    """
    weights = energy_weights(costs, energy)
    L = costs.shape[-1]
    terms = _HeldWeights.apply(costs, weights * L)
    return terms, weights.detach()


# --------------------------------------------------------------------------- public function


@distance(chunked=True, checks={"energy": check_energy})
def eb_sw(
    problem: Problem,
    /,
    n_projections: int = 50,
    p: float = 2,
    projections: Tensor | None = None,
    seed: Seed = None,
    log: bool = False,
    *,
    energy: str = "exp",
    orthogonal: bool = False,
    sampling: str = "iid",
    **options: Unpack[SWOptions],
) -> Evaluation:
    r"""Energy-based sliced Wasserstein distance, importance-sampling estimate (IS-EBSW).

    References: [Nguyen2023]_.

    EBSW draws its directions from the energy-based slicing distribution
    :math:`\sigma_{\mu,\nu}(\theta) \propto f(W_p^p(\theta \# \mu, \theta \# \nu))`,
    with :math:`f` increasing, so that directions that separate the measures count
    more:

    .. math::

        EBSW_p(\mu, \nu) = \big(E_{\theta \sim \sigma_{\mu,\nu}}[W_p^p(\theta \# \mu,
        \theta \# \nu)]\big)^{1/p}
        \approx \Big(\sum_{l=1}^L \frac{f(W_l)}{\sum_j f(W_j)}\, W_l\Big)^{1/p},

    the importance-sampling estimate from ``L`` uniform directions (the paper's IS-EBSW;
    its sampling-importance-resampling and Markov-chain estimators are not built). On
    the same directions it is never below :func:`tsw.sw` (a weighted mean with weights
    increasing in the values is at least their mean). The weights are held fixed in the
    gradient, as in the authors' code: the gradient is :math:`\sum_l w_l \nabla W_l`
    (times the root's derivative), not the derivative of the value.

    Parameters
    ----------
    X_s, X_t, a, b
        As in :func:`tsw.sw`.
    n_projections : int, default 50
        ``L``, ignored when ``projections`` is given.
    p : float, default 2
        Order of the one-dimensional Wasserstein distances.
    projections : Tensor of shape (d, L) or (B, d, L), optional
        Explicit unit directions (POT's layout), taken as the uniform proposal's draws.
    energy : {"exp", "identity"}, default "exp"
        The energy :math:`f`: :math:`e^x` (the paper's main choice) or :math:`x`.
        :math:`e^x` is not scale-free: the weights sharpen as the costs grow.
    orthogonal, sampling
        How the proposal's directions are drawn, as in :func:`tsw.sw`.

    Returns
    -------
    Tensor of shape () or (B,)
        Same dtype and device as ``X_s``.

    Raises
    ------
    TypeError, ValueError
        For malformed inputs, ``p < 1``, malformed projections or an unknown ``energy``.

    Notes
    -----
    ``log["weights"]`` holds the importance weights, ``log["projections"]`` the
    directions, ``log["projected_emds"]`` the costs :math:`W_l` (POT's key) and
    ``log["per_tree"]`` the terms :math:`L w_l W_l`, whose mean is the estimate (their
    standard error ignores the randomness of the normalisation). The estimate is biased
    for finite ``L`` (self-normalised importance sampling), consistent as ``L`` grows.

    Second derivatives: with ``power=True`` (or ``p = 1``) the derivative of the
    gradient (a Hessian-vector product under ``create_graph=True``) is exact, that of
    :math:`\sum_l w_l \nabla W_l` with the weights' own change included. With the
    ``1/p`` root of ``p > 1`` it is not available and raises: the root's derivative
    would need the derivative of the value through the weights, which the held
    gradient does not carry.

    References
    ----------
    .. [Nguyen2023] K. Nguyen, N. Ho. Energy-based sliced Wasserstein distance.
       NeurIPS 2023.

    Examples
    --------
    >>> import torch, tsw
    >>> g = torch.Generator().manual_seed(0)
    >>> X, Y = torch.randn(50, 3, generator=g), torch.randn(40, 3, generator=g) + 1
    >>> theta = tsw.sample_projections(3, 30, seed=0)
    >>> bool(tsw.eb_sw(X, Y, projections=theta) >= tsw.sw(X, Y, projections=theta))
    True
    """
    projections = sw_projections(problem, projections, n_projections, orthogonal, sampling)
    plain = direction_costs(problem, projections)
    terms, weights = weighted_terms(plain.per_slice, energy)
    if not problem.power and problem.p != 1.0:
        why = (
            "its gradient holds the importance weights fixed, and the derivative of the "
            "1/p root of the value would need the value's derivative through them "
            "(power=True or p=1 give exact second derivatives)"
        )
        terms = first_order_only(terms, "eb_sw", why)
    extra = {"projected_emds": plain.per_slice, "weights": weights}
    return Evaluation(terms, projections, projections, extra)
