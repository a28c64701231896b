r"""Spherical sliced Wasserstein (SSW, Bonet et al., ICLR 2023): baselines for STSW.

* :func:`ssw` wraps POT's ``ot.sliced_wasserstein_sphere`` (torch backend:
  differentiable, dtype and device of the input) with the conventions of :mod:`tsw`:
  POT argument order, validation, the seeding contract for the great circles, batching,
  and weights of any common total.
* :func:`ssw_unif` computes the closed form behind POT's
  ``ot.sliced_wasserstein_sphere_unif`` itself, vectorised over the batch: POT 0.9.7
  sorts the projected points without their weights
  (``semidiscrete_wasserstein2_unif_circle``), which is right for uniform weights only.
  The two agree for uniform weights (tested); weighted values are checked against an
  exact LP on the circle.

Both use the driver (:mod:`tsw.core._driver`) for validation, the seeding contract, the
mean over the great circles and the root; the per-circle costs of :func:`ssw` come from
POT (one call per batch item), those of :func:`ssw_unif` from the closed form above.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from tsw.core._api import distance
from tsw.core._output import Evaluation
from tsw.core._problem import Problem, from_numpy
from tsw.core._random import Seed, resolve_sampler
from tsw.core._sort import sort_last
from tsw.core._twice import first_order_only, no_gradient_to
from tsw.core._validation import (
    check_dtype_device,
    check_measures_on_sphere,
    check_orthogonal,
    check_positive_int,
    check_stack,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from tsw.core._api import POTOrderOptions

__all__ = ["sample_sphere_projections", "ssw", "ssw_unif"]


def sample_sphere_projections(
    dim: int,
    n_projections: int,
    *,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Sample great circles: Haar-random orthonormal 2-frames, POT's layout (L, d+1, 2).

    The circle of frame ``U`` is the intersection of the sphere with the plane spanned
    by its two columns; SSW projects a point on it along the geodesics.

    Parameters
    ----------
    dim : int
        Ambient dimension ``d + 1 >= 2``.
    n_projections : int
        ``L``.
    seed, generator, dtype, device
        As for the tree samplers (``seed`` is device independent).

    Returns
    -------
    Tensor of shape (L, d+1, 2)

    Examples
    --------
    >>> import tsw
    >>> tuple(tsw.sample_sphere_projections(3, 10, seed=0).shape)
    (10, 3, 2)
    """
    check_positive_int(dim, "dim")
    check_positive_int(n_projections, "n_projections")
    if dim < 2:
        raise ValueError(f"great circles need dim = d+1 >= 2; got dim={dim}")
    dtype, device = check_dtype_device(dtype, device)
    sampler = resolve_sampler(seed, generator, dtype=dtype, device=device)
    return sampler.orthonormal(n_projections, n=2, dim=dim).transpose(-1, -2)


def resolve_circles(problem: Problem, projections: Tensor | None, n_projections: int) -> Tensor:
    """Explicit great circles checked against the data, or drawn ones: (L, d+1, 2) or (B, ...).

    Explicit frames must have orthonormal columns (a value check, with ``validate``): a
    NaN or a zero frame projects every point to NaN (POT's binary search never ends on
    it), a non-orthonormal one to the wrong circle.
    """
    X = problem.measures.X_s
    D = X.shape[-1]
    explicit = from_numpy(projections, "projections")
    if explicit is None:
        return sample_sphere_projections(
            D, n_projections, generator=problem.rng.generator, dtype=X.dtype, device=X.device
        )
    shape = f"(L, d+1, 2) with d+1={D}"
    checked = check_stack(explicit, "projections", (D, 2), shape, X, problem.measures.batched)
    if problem.validate:
        check_orthogonal(checked, "projections")
    return checked


@distance(sliced=True)
def ssw(
    problem: Problem,
    /,
    n_projections: int = 50,
    p: float = 2,
    projections: Tensor | None = None,
    seed: Seed = None,
    log: bool = False,
    *,
    renormalize: bool = False,
    **options: Unpack[POTOrderOptions],
) -> Evaluation:
    r"""Spherical sliced Wasserstein distance :math:`SSW_p` (Bonet et al. 2023).

    References: [Bonet2023]_.

    .. math::

        SSW_p(\mu, \nu) = \Big(\frac1L \sum_{l=1}^L W_p^p(P^{U_l}_\#\mu,
            P^{U_l}_\#\nu)\Big)^{1/p}, \qquad P^U(x) = \frac{U^T x}{\|U^T x\|},

    with :math:`U_l` random orthonormal (d+1, 2) frames (great circles) and
    :math:`W_p` the Wasserstein distance on the circle (geodesic cost, normalised to
    length 1 as in POT). Computed by POT's ``ot.sliced_wasserstein_sphere`` (exact
    circle :math:`W_1`; binary search for :math:`p > 1`), called once per batch item,
    in float64 (POT's binary search can loop forever in float32); the value is cast to
    the input's dtype.

    Parameters
    ----------
    X_s : Tensor of shape (N, d+1) or (B, N, d+1)
        Source support, unit vectors.
    X_t : Tensor of shape (M, d+1) or (B, M, d+1)
        Target support, unit vectors.
    a, b : Tensor of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative weights of equal totals ``c``; uniform by default. The value is
        ``c ** (1/p)`` times POT's value for ``a / c`` and ``b / c``.
    n_projections : int, default 50
        ``L``, ignored when ``projections`` is given.
    p : float, default 2
        Order of the circle Wasserstein distances.
    projections : Tensor of shape (L, d+1, 2) or (B, L, d+1, 2), optional
        Explicit frames (POT's layout), see :func:`sample_sphere_projections`.
    renormalize
        As in :func:`tsw.stsw`.

    Returns
    -------
    Tensor of shape () or (B,)

    Raises
    ------
    TypeError, ValueError
        For malformed inputs, points off the sphere, ``p < 1``, bad ``projections``.

    Notes
    -----
    POT's binary search loops forever on NaN. Explicit frames are therefore checked
    (finite, orthonormal columns to ``max(1e3 eps, 1e-6)``) with ``validate``; with
    ``validate=False`` the inputs and frames are still checked for NaN/Inf (a device
    synchronisation, negligible next to POT's own) and a NaN is returned. The positions
    on the circles are computed here (POT's formula, in float64) and passed to POT's
    ``ot.wasserstein_circle``: a point at a pole of a circle (:math:`U^T x = 0`, where
    the projection is undefined and POT's own gives 0/0) gets position 0. Gradients
    with respect to the points are exact; with respect to the weights they are not
    available (a gradient asked of weights that require grad raises): the optimal cut
    of a circle often sits at a kink of the circle's cost, where POT's solver gives no
    derivative (measured: POT's gradient along a zero-sum direction of the weights was
    0.092 where finite differences gave 0.102). No second derivative either.

    References
    ----------
    .. [Bonet2023] C. Bonet, P. Berg, N. Courty, F. Septier, L. Drumetz, M.-T. Pham.
       Spherical sliced-Wasserstein. ICLR 2023.

    Examples
    --------
    >>> import torch, tsw
    >>> X = torch.nn.functional.normalize(torch.randn(20, 3), dim=-1)
    >>> float(tsw.ssw(X, X, seed=0))
    0.0
    """
    import ot  # POT's circle solver (imported here: most distances never need POT)

    if problem.measures.X_s.device.type == "meta":
        raise ValueError(
            "ssw solves each great circle with POT, which needs values: X_s on the meta "
            "device has none (ssw_unif and stsw run on meta tensors)"
        )
    measures = check_measures_on_sphere(
        problem.measures, renormalize=renormalize, validate=problem.validate
    )
    problem = problem.replace(measures=measures)
    Xs, Xt, p = measures.X_s, measures.X_t, problem.p
    proj = resolve_circles(problem, projections, n_projections)
    L = proj.shape[-3]
    if not problem.validate:  # POT's binary search never ends on NaN: give NaN without calling it
        finite = torch.isfinite(Xs).all() & torch.isfinite(Xt).all()
        finite &= torch.isfinite(measures.a).all() & torch.isfinite(measures.b).all()
        finite &= torch.isfinite(proj).all()
        if not bool(finite):
            nan = torch.full((Xs.shape[0], L), math.nan, dtype=Xs.dtype, device=Xs.device)
            return Evaluation(nan, proj, proj)
    # POT's circle solver on positions in [0, 1) computed here in float64 (its binary
    # search for p > 1 stops on an interval width float32 cannot always resolve): a point
    # at a pole of a circle (U^T x = 0, where POT's own projection gives 0/0 and its
    # search loops forever) gets position 0
    p64 = proj.to(torch.float64)
    u = _circle_coordinates(Xs.to(torch.float64), p64)  # (B, L, N)
    v = _circle_coordinates(Xt.to(torch.float64), p64)
    a, b = measures.a.detach().to(torch.float64), measures.b.detach().to(torch.float64)
    per_circle = []
    for i in range(Xs.shape[0]):
        mass = a[i].sum()
        w = ot.wasserstein_circle(
            u[i].T, v[i].T, u_weights=a[i] / mass, v_weights=b[i] / b[i].sum(), p=p
        )
        per_circle.append(w * mass)
    # the mean and the root are the driver's (zero subgradient at 0; POT's gives NaN)
    empty = Xs.new_zeros((0, L))  # an empty batch
    costs = torch.stack(per_circle).to(Xs.dtype) if per_circle else empty
    why = "POT's circle solver gives its gradient, not its second derivative"
    costs = first_order_only(costs, "ssw", why)
    message = (
        "ssw has no gradient with respect to the weights a and b: the optimal cut of each "
        "great circle often sits where the circle's cost has a kink in it, and POT's "
        "solver gives no derivative there; detach the weights (gradients with respect to "
        "the points are exact)"
    )
    return Evaluation(no_gradient_to(costs, (measures.a, measures.b), message), proj, proj)


def _circle_coordinates(X: Tensor, projections: Tensor) -> Tensor:
    """Positions in [0, 1) of the points projected on the great circles (POT's convention).

    ``X`` (B, N, d+1), ``projections`` (L, d+1, 2) or (B, L, d+1, 2); returns (B, L, N).
    """
    spec = "bnd,ldk->bnlk" if projections.ndim == 3 else "bnd,bldk->bnlk"
    xp = torch.einsum(spec, X, projections)  # (B, N, L, 2)
    x, y = xp[..., 0], xp[..., 1]
    pole = (x == 0) & (y == 0)  # U^T x = 0: no projection; position 0, zero gradient
    x = torch.where(pole, torch.ones_like(x), x)
    y = torch.where(pole, torch.zeros_like(y), y)
    angle = torch.atan2(-y, -x) + math.pi
    return (angle / (2 * math.pi)).transpose(-1, -2)


@distance(sliced=True, one_measure=True, p=2.0)
def ssw_unif(
    problem: Problem,
    /,
    n_projections: int = 50,
    projections: Tensor | None = None,
    seed: Seed = None,
    log: bool = False,
    *,
    renormalize: bool = False,
    **options: Unpack[POTOrderOptions],
) -> Evaluation:
    r""":math:`SSW_2` between a measure on the sphere and the uniform measure on it.

    References: [Bonet2023u]_.

    The uniform measure projects to the uniform law on every great circle, and the
    circle :math:`W_2^2` between a discrete measure with sorted positions
    :math:`x_1 \le \dots \le x_N` in :math:`[0, 1)`, weights :math:`a_i` summing to 1
    and cumulative weights :math:`c_i = \sum_{j < i} a_j`, and the uniform law has the
    closed form (Bonet et al. 2023; no samples)

    .. math::

        W_2^2 = \sum_i a_i x_i^2 - \Big(\sum_i a_i x_i\Big)^2
            + \sum_i a_i x_i (1 - a_i - 2 c_i) + \frac{1}{12}.

    :math:`SSW_2^2` is its mean over the great circles. The uniform side has the total
    mass ``c`` of ``a``: the value is ``sqrt(c)`` times the value for ``a / c``. Equals
    POT's ``ot.sliced_wasserstein_sphere_unif`` for uniform weights; POT 0.9.7 is wrong
    for other weights (it sorts the positions without their weights).

    Parameters
    ----------
    X_s : Tensor of shape (N, d+1) or (B, N, d+1)
        Support, unit vectors.
    a : Tensor of shape (N,) or (B, N), optional
        Non-negative weights; uniform by default.
    n_projections, projections, renormalize
        As in :func:`ssw`.

    Returns
    -------
    Tensor of shape () or (B,)

    Raises
    ------
    TypeError, ValueError
        As :func:`ssw`.

    References
    ----------
    .. [Bonet2023u] C. Bonet, P. Berg, N. Courty, F. Septier, L. Drumetz, M.-T. Pham.
       Spherical sliced-Wasserstein. ICLR 2023.

    Examples
    --------
    >>> import torch, tsw
    >>> g = torch.Generator().manual_seed(0)
    >>> X = torch.nn.functional.normalize(torch.randn(3000, 3, generator=g), dim=-1)
    >>> bool(tsw.ssw_unif(X, seed=0) < 0.02)
    True
    """
    problem = problem.replace(
        measures=check_measures_on_sphere(
            problem.measures, renormalize=renormalize, validate=problem.validate
        )
    )
    proj = resolve_circles(problem, projections, n_projections)
    X, w = problem.measures.X_s, problem.measures.a
    mass = w.sum(-1)  # (B,)
    x, order = sort_last(_circle_coordinates(X, proj))  # (B, L, N)
    wl = w.unsqueeze(-2).expand(x.shape)
    ws = torch.gather(wl, -1, order) / mass.view(-1, 1, 1)
    before = ws.cumsum(-1) - ws  # c_i: weight of the points before i
    mean = (ws * x).sum(-1)
    w2 = (ws * x * x).sum(-1) - mean * mean + (ws * x * (1 - ws - 2 * before)).sum(-1) + 1 / 12
    # W2^2 >= 0 per circle; rounding may leave a tiny negative value
    return Evaluation((w2 * mass.unsqueeze(-1)).clamp_min(0), proj, proj)
