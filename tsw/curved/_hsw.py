r"""Hyperbolic sliced Wasserstein: GHSW (geodesic projections) and HHSW (horospherical).

Bonet, Chapel, Drumetz and Courty (ICLR 2023) slice hyperbolic space along the geodesics
through the origin, :math:`\gamma_\theta(t) = \cosh(t)\,o + \sinh(t)\,(0, \theta)` for
unit directions :math:`\theta \in \mathbb S^{d-1}` of the tangent space at the origin, and
give every point a coordinate on each: the geodesic projection's (GHSW) or minus the
Busemann function's (HHSW, the horospherical projection). Both are then the sliced
Wasserstein distance of those coordinates, and go through the driver
(:mod:`tsw.core._driver`) as SW does: the directions are SW's (the same seed draws the
same ones as :func:`tsw.sw` in ``R^d``), and the projection is SW's line projection of the
hyperboloid's spatial coordinates :math:`z = x_{1:}`, mapped through the coordinate
(:func:`~tsw.curved._hyperbolic.geodesic_from_products`,
:func:`~tsw.curved._hyperbolic.horospherical_from_products`); a front end forms
:math:`|z|^2` once per call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import Tensor

from tsw.core._api import distance
from tsw.core._directions import line_projection, resolve_projections
from tsw.core._driver import evaluate
from tsw.core._output import Evaluation
from tsw.core._problem import Problem
from tsw.core._projection import Projection
from tsw.core._validation import Measures
from tsw.curved._hyperbolic import (
    check_hyperbolic,
    check_model,
    geodesic_from_products,
    horospherical_from_products,
    to_spatial,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from tsw.core._api import ChunkedOptions

__all__ = ["ghsw", "hhsw"]

#: a coordinate from the products ``<z, theta>``, the squared norms, the supports, the directions
Coordinate = Callable[[Tensor, Tensor, tuple[Tensor, ...], Tensor], Tensor]


def _squares(measures: Measures, directions: Tensor) -> tuple[Measures, Tensor]:
    """Return the measures with the squared norms ``|z|^2`` of both supports (the front end)."""
    sq = ((measures.X_s * measures.X_s).sum(-1), (measures.X_t * measures.X_t).sum(-1))
    return measures._replace(sq=sq), directions


def _projection(coordinate: Coordinate) -> Callable[[Measures, Tensor], Projection]:
    """SW's line projection of the spatial coordinates, mapped through ``coordinate``."""

    def project(measures: Measures, directions: Tensor) -> Projection:
        line = line_projection(measures, directions)  # <z, theta>, (B, L, n)
        supports = (measures.X_s, measures.X_t)
        if measures.sq is None:  # not reached: the front end forms them
            measures = _squares(measures, directions)[0]
        q = torch.cat(measures.sq, dim=-1).unsqueeze(-2)  # type: ignore[arg-type]
        return line._replace(coords=coordinate(line.coords, q, supports, directions))

    return project


def _sliced(
    problem: Problem,
    coordinate: Coordinate,
    *,
    model: str,
    n_projections: int,
    projections: Tensor | None,
    orthogonal: bool,
    sampling: str,
) -> Evaluation:
    """Check the points, map them to spatial coordinates, and evaluate the sliced distance."""
    measures = problem.measures
    Z = [
        to_spatial(check_hyperbolic(X, name, model, validate=problem.validate), model)
        for X, name in ((measures.X_s, "X_s"), (measures.X_t, "X_t"))
    ]
    mapped = measures._replace(X_s=Z[0], X_t=Z[1])
    directions = resolve_projections(
        mapped,
        projections,
        n_projections,
        orthogonal,
        problem.rng,
        sampling,
        validate=problem.validate,
    )
    # unit to rounding: the coordinates far out read |z|^2 - <z, theta>^2 / |theta|^2
    directions = directions / torch.linalg.vector_norm(directions, dim=-2, keepdim=True)
    # the range was checked on the hyperbolic points (check_hyperbolic): the driver's
    # check of Euclidean magnitudes does not apply to the spatial coordinates
    inner = problem.replace(measures=mapped, validate=False)
    return evaluate(
        inner, _projection(coordinate), directions, projections=directions, front=_squares
    )


_CHECKS = {"model": check_model}

_DOC_OPTIONS = """\
    X_s : Tensor of shape (N, D) or (B, N, D)
        Source support: points of the hyperboloid (``D = d + 1``, ``model="lorentz"``)
        or of the Poincare ball (``D = d``, ``model="poincare"``).
    X_t : Tensor of shape (M, D) or (B, M, D)
        Target support, in the same model.
    a, b : Tensor of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative weights of equal totals; uniform by default.
    n_projections : int, default 50
        ``L``, ignored when ``projections`` is given.
    p : float, default 2
        Order of the one-dimensional Wasserstein distances.
    projections : Tensor of shape (d, L) or (B, d, L), optional
        Explicit unit directions :math:`\\theta` of the tangent space at the origin, as
        columns (:func:`tsw.sample_projections` draws them); with ``validate``, NaN,
        Inf and columns whose norm is not 1 (to ``max(1e3 eps, 1e-6)``) raise. They are
        divided by their norms (a change within rounding).
    model : {"lorentz", "poincare"}, default "lorentz"
        The model of the points: the same points give the same value in both.
    orthogonal : bool, default False
        Blocks of orthonormal directions, as in :func:`tsw.sw`.
    sampling : {"iid", "orthogonal", "qmc"}, default "iid"
        How the directions are spread, as in :func:`tsw.sw`."""

_DOC_NUMERICS = """\
    Points are checked (with ``validate``) to lie on the hyperboloid (to a relative
    ``max(1e3 eps, 1e-6)`` in :math:`x_0`) or strictly inside the ball, and within
    :func:`~tsw.curved._hyperbolic.max_radius` of the origin (43.6 in float32, 354 in
    float64); the coordinates are computed from the hyperboloid's spatial coordinates
    :math:`z = x_{1:}` (:math:`2y / (1 - |y|^2)` in the ball), so that points far from
    the origin and near the geodesics, where the textbook formulas round to Inf or NaN,
    keep exact values (see :mod:`tsw.curved._hyperbolic`). A Lorentz point's
    :math:`x_0` is checked, then taken as :math:`\\sqrt{1 + |z|^2}`: its gradient is 0
    (:func:`tsw.riemannian_step` turns the gradient into the manifold's)."""


F = TypeVar("F", bound=Callable[..., Any])


def _document(fn: F) -> F:
    """Fill the shared parts of the two docstrings."""
    fn.__doc__ = (fn.__doc__ or "").replace("{OPTIONS}", _DOC_OPTIONS[4:])
    fn.__doc__ = fn.__doc__.replace("{NUMERICS}", _DOC_NUMERICS[4:])
    return fn


@distance(chunked=True, sliced=True, checks=_CHECKS)
@_document
def ghsw(
    problem: Problem,
    /,
    *,
    n_projections: int = 50,
    p: float = 2,
    projections: Tensor | None = None,
    model: str = "lorentz",
    orthogonal: bool = False,
    sampling: str = "iid",
    **options: Unpack[ChunkedOptions],
) -> Evaluation:
    r"""Geodesic hyperbolic sliced Wasserstein distance :math:`GHSW_p`.

    References: [Bonet2023h]_.

    .. math::

        GHSW_p(\mu, \nu) = \Big(\frac1L \sum_{l=1}^L W_p^p(P^{\theta_l}_\#\mu,
            P^{\theta_l}_\#\nu)\Big)^{1/p}, \qquad
        P^\theta(x) = \operatorname{arctanh}\frac{\langle x_{1:}, \theta\rangle}{x_0},

    with :math:`P^\theta(x)` the signed distance from the origin :math:`o` of the point of
    the geodesic :math:`\gamma_\theta(t) = \cosh(t)\,o + \sinh(t)\,(0, \theta)` nearest
    to ``x`` (the geodesic projection), :math:`\theta_l` uniform on
    :math:`\mathbb S^{d-1}` and :math:`W_p` the one-dimensional Wasserstein distance. In
    the Poincare ball the same projection reads :math:`\operatorname{arctanh}(2
    \langle y, \theta\rangle / (1 + |y|^2))`. Invariant under the rotations about the
    origin (with the directions rotated alike).

    {NUMERICS}

    Parameters
    ----------
    {OPTIONS}

    Returns
    -------
    Tensor of shape () or (B,)

    Raises
    ------
    TypeError, ValueError
        For malformed inputs, points off the hyperboloid or outside the ball, ``p < 1``
        or malformed projections.

    References
    ----------
    .. [Bonet2023h] C. Bonet, L. Chapel, L. Drumetz, N. Courty. Hyperbolic
       sliced-Wasserstein via geodesic and horospherical projections. TAG-ML workshop,
       ICML 2023 (arXiv:2211.10066).

    Examples
    --------
    >>> import torch, tsw
    >>> X = tsw.curved.exp0(torch.tensor([[0.0, 0.0], [1.0, 0.0]]))  # Lorentz points
    >>> Y = tsw.curved.exp0(torch.tensor([[0.0, 2.0], [1.0, 2.0]]))
    >>> theta = torch.tensor([[1.0], [0.0]])  # one direction, (d, L)
    >>> float(tsw.ghsw(X, X, projections=theta))
    0.0
    """
    return _sliced(
        problem,
        geodesic_from_products,
        model=model,
        n_projections=n_projections,
        projections=projections,
        orthogonal=orthogonal,
        sampling=sampling,
    )


@distance(chunked=True, sliced=True, checks=_CHECKS)
@_document
def hhsw(
    problem: Problem,
    /,
    *,
    n_projections: int = 50,
    p: float = 2,
    projections: Tensor | None = None,
    model: str = "lorentz",
    orthogonal: bool = False,
    sampling: str = "iid",
    **options: Unpack[ChunkedOptions],
) -> Evaluation:
    r"""Horospherical hyperbolic sliced Wasserstein distance :math:`HHSW_p`.

    References: [Bonet2023hh]_.

    .. math::

        HHSW_p(\mu, \nu) = \Big(\frac1L \sum_{l=1}^L W_p^p(B^{\theta_l}_\#\mu,
            B^{\theta_l}_\#\nu)\Big)^{1/p}, \qquad
        -B^\theta(x) = -\log(x_0 - \langle x_{1:}, \theta\rangle),

    with :math:`B^\theta(x) = \lim_{t \to \infty} (d(x, \gamma_\theta(t)) - t)` the
    Busemann function of the geodesic :math:`\gamma_\theta` (the coordinate is that of
    the point of the geodesic on the horosphere through ``x``; in the Poincare ball
    :math:`B^\theta(y) = \log(|\theta - y|^2 / (1 - |y|^2))`), :math:`\theta_l` uniform on
    :math:`\mathbb S^{d-1}`. The sign does not change the value. Invariant under the
    rotations about the origin (with the directions rotated alike) and, given the
    directions, under every isometry that carries them to the directions of the image
    of their points at infinity (a Busemann function changes by a constant).

    {NUMERICS}

    Parameters
    ----------
    {OPTIONS}

    Returns
    -------
    Tensor of shape () or (B,)

    Raises
    ------
    TypeError, ValueError
        For malformed inputs, points off the hyperboloid or outside the ball, ``p < 1``
        or malformed projections.

    References
    ----------
    .. [Bonet2023hh] C. Bonet, L. Chapel, L. Drumetz, N. Courty. Hyperbolic
       sliced-Wasserstein via geodesic and horospherical projections. TAG-ML workshop,
       ICML 2023 (arXiv:2211.10066).

    Examples
    --------
    >>> import torch, tsw
    >>> X = tsw.curved.exp0(torch.tensor([[0.0, 0.0], [1.0, 0.0]]))
    >>> theta = torch.tensor([[1.0], [0.0]])
    >>> round(float(tsw.hhsw(X, tsw.curved.exp0(torch.tensor([[0.5, 0.0], [1.5, 0.0]])),
    ...                      projections=theta)), 6)  # moved by 0.5 along the geodesic
    0.5
    """
    return _sliced(
        problem,
        horospherical_from_products,
        model=model,
        n_projections=n_projections,
        projections=projections,
        orthogonal=orthogonal,
        sampling=sampling,
    )
