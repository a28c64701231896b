r"""Energy-based sliced Wasserstein, importance-sampling form (IS-EBSW; Nguyen and Ho, 2023).

Like :mod:`tsw.sliced._lcv_sw`, the value needs every direction's cost first (the
importance weights are normalised over the directions): the driver gives the
per-direction costs, :func:`energy_weights` forms the weights, and the weighted terms
go back to :meth:`~tsw.core._driver.Problem.finish`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from tsw.core._driver import Problem, Result, driver_options
from tsw.core._validation import OPTION_CHECKS, check_choice
from tsw.sliced._lcv_sw import direction_costs, with_costs
from tsw.sliced._sw import resolve_projections

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = ["eb_sw", "energy_weights"]

#: the energy functions f of the slicing distribution sigma(theta) ~ f(W_p^p(theta))
ENERGIES = ("exp", "identity")
OPTION_CHECKS["energy"] = lambda value, name: check_choice(value, name, ENERGIES)


# --------------------------------------------------------------------------- mathematics


def energy_weights(costs: Tensor, energy: str) -> Tensor:
    r"""Self-normalised importance weights :math:`f(W_l) / \sum_j f(W_j)` (B, L), detached.

    ``"exp"``: :math:`f(x) = e^x` (a softmax of the costs); ``"identity"``:
    :math:`f(x) = x` (uniform weights where every cost is 0).
    """
    W = costs.detach()
    if energy == "exp":
        return torch.softmax(W, dim=-1)
    total = W.sum(-1, keepdim=True)
    uniform = torch.full_like(W, 1.0 / W.shape[-1])
    return torch.where(total > 0, W / torch.where(total > 0, total, 1.0), uniform)


# --------------------------------------------------------------------------- public function


@driver_options(chunked=True)
def eb_sw(
    X_s: Tensor,
    X_t: Tensor,
    a: Tensor | None = None,
    b: Tensor | None = None,
    *,
    n_projections: int = 50,
    p: float = 2,
    energy: str = "exp",
    projections: Tensor | None = None,
    orthogonal: bool = False,
    sampling: str = "iid",
    seed: int | None = None,
    generator: torch.Generator | None = None,
    validate: bool = True,
    power: bool = False,
    log: bool = False,
    chunk_size: int | str | None = "auto",
    process_group: ProcessGroup | None = None,
    gather: bool = False,
) -> Result:
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
    increasing in the values is at least their mean). The weights are detached, as in
    the authors' code: the gradient is :math:`\sum_l w_l \nabla W_l`.

    Parameters
    ----------
    X_s, X_t, a, b
        As in :func:`tsw.sw`.
    n_projections : int, default 50
        ``L``, ignored when ``projections`` is given.
    p : float, default 2
        Order of the one-dimensional Wasserstein distances.
    energy : {"exp", "identity"}, default "exp"
        The energy :math:`f`: :math:`e^x` (the paper's main choice) or :math:`x`.
        :math:`e^x` is not scale-free: the weights sharpen as the costs grow.
    projections : Tensor of shape (d, L) or (B, d, L), optional
        Explicit unit directions (POT's layout), taken as the uniform proposal's draws.
    orthogonal, sampling
        How the proposal's directions are drawn, as in :func:`tsw.sw`.
    seed, generator, validate
        As in :func:`tsw.sw`.

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
    problem = Problem.of(
        X_s,
        X_t,
        a,
        b,
        p=p,
        seed=seed,
        generator=generator,
        validate=validate,
        power=power,
        log=log,
        chunk_size=chunk_size,
        process_group=process_group,
        gather=gather,
    )
    energy = check_choice(energy, "energy", ENERGIES)
    projections = resolve_projections(
        problem.measures,
        projections,
        n_projections,
        orthogonal,
        problem.rng,
        sampling,
        validate=problem.validate,
    )
    costs = direction_costs(problem, projections)
    weights = energy_weights(costs, energy)
    terms = costs * (weights * costs.shape[-1])
    result = problem.finish(terms, projections, projections)
    return with_costs(problem, result, costs, weights=weights)
