r"""Random-path sliced Wasserstein (RPSW; Nguyen, Zhang, Le, Ho, ICLR 2024).

SW whose directions are drawn from the data: the normalised difference of a random
pair of atoms, one from each measure, optionally perturbed by a power spherical law.
Once drawn, the directions are SW's explicit projections: the value goes through the
driver exactly as :func:`tsw.sw` with ``projections=`` does. The mathematics is
:func:`random_path_directions` and :func:`power_spherical`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from tsw.core._api import distance
from tsw.core._driver import evaluate
from tsw.core._output import Evaluation
from tsw.core._slices import path_directions
from tsw.core._twice import first_order_only
from tsw.core._validation import as_real
from tsw.sliced._sw import line_projection, resolve_projections

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from tsw.core._api import SWOptions
    from tsw.core._problem import Problem
    from tsw.core._random import Sampler, Seed
    from tsw.core._validation import Measures

__all__ = ["check_kappa", "power_spherical", "random_path_directions", "rp_sw"]


def check_kappa(value: object, name: str = "kappa") -> float | None:
    """Return ``value`` if it is None or a finite real number > 0, else raise."""
    if value is None:
        return None
    number = as_real(value)
    if number is None:
        raise TypeError(f"{name} must be None or a real number > 0; got {type(value).__name__}")
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{name} must be None or a finite real number > 0; got {number}")
    return number


# --------------------------------------------------------------------------- mathematics


def _gamma(rng: Sampler, shape: float, n: int) -> Tensor:
    """``n`` Gamma(shape, 1) draws by Marsaglia and Tsang's rejection, from ``rng`` only.

    Rounds of normal and uniform draws for the draws still pending, until all are
    accepted (more than 95 % per round); a shape below 1 takes Gamma(shape + 1) times
    ``U^(1 / shape)``. The draws depend on ``rng`` alone, not on the data.
    """
    boost = shape < 1
    a = shape + 1 if boost else shape
    d = a - 1 / 3
    c = 1 / math.sqrt(9 * d)
    out = torch.empty(n, dtype=torch.float64)
    pending = torch.arange(n)
    while pending.numel():
        m = pending.numel()
        x = rng.normal(m).double().cpu()
        u = rng.uniform(m).double().cpu()
        v = (1 + c * x) ** 3
        ok = v > 0
        vs = torch.where(ok, v, torch.ones_like(v))
        ok &= torch.log(u) < 0.5 * x**2 + d - d * vs + d * torch.log(vs)
        out[pending[ok]] = d * vs[ok]
        pending = pending[~ok]
    if boost:
        out = out * rng.uniform(n).double().cpu() ** (1 / shape)
    return out


def power_spherical(loc: Tensor, kappa: float, rng: Sampler) -> Tensor:
    r"""Draw from the power spherical laws :math:`PS(\mu_l, \kappa)` around ``loc`` (..., L, d).

    The density is proportional to :math:`(1 + \langle \mu, x \rangle)^\kappa` on
    :math:`\mathbb S^{d-1}` (De Cao and Aziz 2020): the cosine to the mean is
    :math:`2t - 1` with :math:`t \sim \mathrm{Beta}((d-1)/2 + \kappa, (d-1)/2)`, the rest
    a uniform direction orthogonal to it, moved onto :math:`\mu` by a Householder
    reflection. ``L`` draws of the cosine and of the orthogonal part, shared by the
    leading axes (a batch of locations); ``d = 1`` returns ``loc``.
    """
    L, d = loc.shape[-2], loc.shape[-1]
    if d == 1:
        return loc
    beta = (d - 1) / 2
    g1, g2 = _gamma(rng, beta + kappa, L), _gamma(rng, beta, L)
    cos = (2 * g1 / (g1 + g2) - 1).to(dtype=loc.dtype, device=loc.device)  # (L,)
    v = rng.sphere(L, d - 1)  # (L, d - 1)
    y = torch.cat([cos.unsqueeze(-1), (1 - cos.square()).clamp_min(0).sqrt().unsqueeze(-1) * v], -1)
    e1 = torch.zeros_like(loc)
    e1[..., 0] = 1
    u = e1 - loc
    norm = torch.linalg.vector_norm(u, dim=-1, keepdim=True)
    u = torch.where(norm > 0, u / norm.clamp_min(torch.finfo(loc.dtype).tiny), u)
    x = y - 2 * (y * u).sum(-1, keepdim=True) * u
    return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)


def random_path_directions(
    measures: Measures, n_projections: int, kappa: float | None, rng: Sampler
) -> Tensor:
    r"""RPSW's directions as SW's projections: (d, L), or (B, d, L) for batched measures.

    Direction ``l`` is :math:`(x_i - y_j) / \|x_i - y_j\|` with :math:`i` drawn from
    ``a`` and :math:`j` from ``b`` (:func:`tsw.core._slices.path_directions`: detached,
    a uniform direction for a pair of coincident atoms), then, with ``kappa``, a draw
    of :func:`power_spherical` around it.
    """
    theta = path_directions(measures, n_projections, 1, rng)[:, :, 0]  # (B, L, d)
    if kappa is not None:
        theta = power_spherical(theta, kappa, rng)
    theta = theta.transpose(-1, -2)
    return theta if measures.batched else theta[0]


# --------------------------------------------------------------------------- public function


@distance(chunked=True, sliced=True, checks={"kappa": check_kappa})
def rp_sw(
    problem: Problem,
    /,
    n_projections: int = 50,
    p: float = 2,
    projections: Tensor | None = None,
    seed: Seed = None,
    log: bool = False,
    *,
    kappa: float | None = None,
    **options: Unpack[SWOptions],
) -> Evaluation:
    r"""Random-path sliced Wasserstein distance (RPSW).

    References: [Nguyen2024b]_.

    .. math::

        RPSW_p(\mu, \nu) = \Big(\frac1L \sum_{l=1}^L W_p^p(\theta_l \# \mu,
            \theta_l \# \nu)\Big)^{1/p}, \qquad
        \theta_l = \frac{x_{i_l} - y_{j_l}}{\|x_{i_l} - y_{j_l}\|},\;
        i_l \sim a,\; j_l \sim b,

    the random-path directions between the two measures (perturbed by a power
    spherical law of concentration ``kappa`` when it is given). The directions depend
    on the data, detached (the gradient is SW's at those directions); they are
    returned in ``log["projections"]``, and ``tsw.sw(X_s, X_t, a, b,
    projections=log["projections"], p=p)`` gives the same value. Not a metric of the
    measures and not an estimate of :math:`SW_p`: its directions follow the paths
    between the two measures.

    Parameters
    ----------
    X_s, X_t, a, b
        As in :func:`tsw.sw`.
    n_projections : int, default 50
        ``L``, ignored when ``projections`` is given.
    p : float, default 2
        Order of the one-dimensional Wasserstein distances.
    projections : Tensor of shape (d, L) or (B, d, L), optional
        Explicit unit directions (POT's layout): then the value is :func:`tsw.sw`'s.
    kappa : float, optional
        Concentration of the power spherical perturbation of each direction (the
        authors' experiments use 50 or anneal it from 100 to 1); ``None`` (default):
        the unperturbed directions.

    Returns
    -------
    Tensor of shape () or (B,)
        Same dtype and device as ``X_s``.

    Raises
    ------
    TypeError, ValueError
        For malformed inputs, ``p < 1``, malformed projections or a ``kappa`` that is
        not a positive real.

    Notes
    -----
    The pairs are drawn first, then the perturbations, as Db-TSW's
    ``directions="paths"`` draws them. A batched call draws the pairs' uniforms once and
    reads them through each item's weights, so it equals a loop of unbatched calls with
    the same seed. With drawn directions there is no second derivative (a gradient with
    ``create_graph=True`` raises): the directions move with the data but are held fixed,
    so the derivative of the gradient would miss their motion. With ``projections`` the
    value is SW's, second derivatives included. Cost: SW's, plus the gathers of ``2L``
    atoms.

    References
    ----------
    .. [Nguyen2024b] K. Nguyen, S. Zhang, T. Le, N. Ho. Sliced Wasserstein with
       random-path projecting directions. ICML 2024.

    Examples
    --------
    >>> import torch, tsw
    >>> g = torch.Generator().manual_seed(0)
    >>> X, Y = torch.randn(50, 3, generator=g), torch.randn(40, 3, generator=g) + 1
    >>> value, log = tsw.rp_sw(X, Y, n_projections=20, seed=0, log=True)
    >>> bool(torch.equal(value, tsw.sw(X, Y, projections=log["projections"])))
    True
    """
    if projections is not None:  # SW on the given directions
        given = resolve_projections(
            problem.measures, projections, 1, False, problem.rng, validate=problem.validate
        )
        return evaluate(problem, line_projection, given, projections=given)
    drawn = random_path_directions(problem.measures, n_projections, kappa, problem.rng)
    value = evaluate(problem, line_projection, drawn, projections=drawn)
    why = "its directions are drawn from the data and held fixed"
    return value._replace(per_slice=first_order_only(value.per_slice, "rp_sw", why))
