r"""Sliced Wasserstein distances between measures on SPD matrices: SPDSW and HSPDSW.

Bonet, Malezieux, Rakotomamonjy, Drumetz, Moreau, Kowalski and Courty (ICML 2023)
slice :math:`S^{++}_n` along the geodesics :math:`t \mapsto \exp(tA)` through the
identity, for directions :math:`A = P \operatorname{diag}(\theta) P^T` (``P`` Haar on
:math:`O(n)`, :math:`\theta` uniform on :math:`\mathbb S^{n-1}`, so :math:`|A|_F = 1`):

* :func:`spdsw`, the log-Euclidean metric: the coordinate :math:`\operatorname{tr}(A
  \log X)`. One eigendecomposition per matrix gives :math:`\log X`, read by every
  direction: the distance is SW (the driver's line projection) of the half-vectorised
  logarithms (:func:`~tsw.curved._spd.half_vectorize`, an isometry of the symmetric
  matrices onto :math:`\mathbb R^{n(n+1)/2}`);
* :func:`hspdsw`, the affine-invariant metric: the coordinate is minus the Busemann
  function of the geodesic (:func:`~tsw.curved._spd.busemann_coordinates`), one Cholesky
  factorisation per (direction, matrix).

The driver takes points as (B, N, d) rows: the public functions take (N, n, n) or
(B, N, n, n) matrices and hand the driver their rows of :math:`n^2` entries
(:func:`_matrices`), which the methods read back as matrices.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
import torch
from torch import Tensor

from tsw.core._api import distance
from tsw.core._directions import line_projection
from tsw.core._driver import evaluate
from tsw.core._output import Evaluation
from tsw.core._problem import Problem, from_numpy
from tsw.core._projection import LINE, Projection
from tsw.core._random import resolve_sampler
from tsw.core._validation import (
    Measures,
    check_dtype_device,
    check_positive_int,
    check_stack,
    check_unit,
)
from tsw.curved._spd import (
    busemann_coordinates,
    check_spd,
    check_symmetric,
    draw_spd_directions,
    eigen_directions,
    half_vectorize,
    spd_log,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from tsw.core._api import ChunkedOptions

__all__ = ["hspdsw", "sample_spd_projections", "spdsw"]

#: elements of one block's (direction x matrix x n x n) working tensors in hspdsw
#: (``chunk_size="auto"``): a few MiB, so that a block's congruences stay in cache
HSPDSW_BLOCK_ELEMENTS = 2**21


def sample_spd_projections(
    n: int,
    n_projections: int,
    *,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""Sample directions :math:`A = P \operatorname{diag}(\theta) P^T` of SPDSW, shape (L, n, n).

    ``P`` Haar on :math:`O(n)` and :math:`\theta` uniform on :math:`\mathbb S^{n-1}`
    (Bonet et al. 2023): symmetric matrices of unit Frobenius norm.

    Parameters
    ----------
    n, n_projections : int
        The matrices' size and ``L``.
    seed, generator, dtype, device
        As for :func:`tsw.sample_projections` (``seed`` is device independent).

    Returns
    -------
    Tensor of shape (L, n, n)

    Examples
    --------
    >>> import torch, tsw
    >>> A = tsw.sample_spd_projections(3, 10, seed=0, dtype=torch.float64)
    >>> tuple(A.shape), torch.linalg.matrix_norm(A).sub(1).abs().max().item() < 1e-12
    ((10, 3, 3), True)
    """
    check_positive_int(n, "n")
    check_positive_int(n_projections, "n_projections")
    dtype, device = check_dtype_device(dtype, device)
    rng = resolve_sampler(seed, generator, dtype=dtype, device=device)
    return draw_spd_directions(n, n_projections, rng)


def _side(measures: Measures) -> int:
    """Return the matrices' size ``n`` from the rows of ``n^2`` entries the driver holds."""
    return math.isqrt(measures.X_s.shape[-1])


def _as_matrices(X: Tensor, n: int) -> Tensor:
    return X.unflatten(-1, (n, n))


def _resolve(problem: Problem, projections: object, n_projections: int, n: int) -> Tensor:
    """Return the explicit directions checked, or drawn ones: (L, n, n) or (B, L, n, n).

    Explicit ones must be symmetric matrices of unit Frobenius norm (a value check).
    """
    X = problem.measures.X_s
    explicit = from_numpy(projections, "projections")
    if explicit is None:
        return draw_spd_directions(n, n_projections, problem.rng)
    shape = f"(L, n, n) with n={n}"
    A = check_stack(explicit, "projections", (n, n), shape, X, problem.measures.batched)
    if problem.validate:
        A = check_symmetric(A, "projections")
        check_unit(A.flatten(-2), "projections", what="matrices (Frobenius norm)")
    return A


D = TypeVar("D", bound=Callable[..., Any])


def _matrices(inner: D) -> D:
    """Return the public function, on matrices, of a method written on rows of ``n^2`` entries.

    ``X_s`` (N, n, n) or (B, N, n, n) (and ``X_t`` alike) become (N, n^2) or (B, N, n^2)
    rows; everything else (the signature, the checks, the documentation) is ``inner``'s.
    """

    @functools.wraps(inner)
    def public(X_s: Any, X_t: Any = None, *args: Any, **kwargs: Any) -> Any:
        return inner(_rows(X_s, "X_s"), _rows(X_t, "X_t"), *args, **kwargs)

    public.option_checks = inner.option_checks  # type: ignore[attr-defined]
    public.__signature__ = inner.__signature__  # type: ignore[attr-defined]
    del public.__wrapped__
    return cast(D, public)


def _rows(X: Any, name: str) -> Any:
    """``X`` (..., N, n, n) as (..., N, n^2); anything else is left to the driver's checks."""
    if not isinstance(X, Tensor | np.ndarray):
        return X
    if X.ndim not in (3, 4) or X.shape[-1] != X.shape[-2]:
        raise ValueError(
            f"{name} must hold N square n x n matrices, shape (N, n, n) or (B, N, n, n); got "
            f"{name}.shape={tuple(X.shape)}"
        )
    return X.reshape(*X.shape[:-2], X.shape[-1] * X.shape[-2])


def _finish(evaluation: Evaluation, A: Tensor) -> Evaluation:
    """Report the directions ``A`` as the slices used (``log["trees"]``, ``log["projections"]``)."""
    return evaluation._replace(slices=A, projections=A)


@_matrices
@distance(chunked=True, sliced=True)
def spdsw(
    problem: Problem,
    /,
    *,
    n_projections: int = 50,
    p: float = 2,
    projections: Tensor | None = None,
    **options: Unpack[ChunkedOptions],
) -> Evaluation:
    r"""Log-Euclidean sliced Wasserstein distance between measures on SPD matrices, :math:`SPDSW_p`.

    References: [Bonet2023s]_.

    .. math::

        SPDSW_p(\mu, \nu) = \Big(\frac1L \sum_{l=1}^L W_p^p(P^{A_l}_\#\mu,
            P^{A_l}_\#\nu)\Big)^{1/p}, \qquad P^A(X) = \operatorname{tr}(A \log X),

    the coordinate of the projection of ``X`` on the geodesic :math:`\exp(tA)` for the
    log-Euclidean metric :math:`d(X, Y) = |\log X - \log Y|_F`, with :math:`A_l = P_l
    \operatorname{diag}(\theta_l) P_l^T` (:func:`tsw.sample_spd_projections`). The
    logarithms take one batched eigendecomposition per matrix, read by every direction:
    the value is :func:`tsw.sw` of the half-vectorised logarithms
    (:math:`\operatorname{tr}(AB) = \langle h(A), h(B)\rangle`) along the directions
    :math:`h(A_l)`. Invariant under :math:`X \mapsto c\, O X O^T` (``O`` orthogonal, with
    the directions rotated alike, ``c > 0``). Gradients are finite at repeated eigenvalues
    (the identity; :mod:`tsw.curved._spd`).

    Parameters
    ----------
    X_s : Tensor of shape (N, n, n) or (B, N, n, n)
        Source support: symmetric positive definite matrices (symmetric to ``max(1e3
        eps, 1e-6)`` relative; they are symmetrised).
    X_t : Tensor of shape (M, n, n) or (B, M, n, n)
        Target support.
    a, b : Tensor of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative weights of equal totals; uniform by default.
    n_projections : int, default 50
        ``L``, ignored when ``projections`` is given.
    p : float, default 2
        Order of the one-dimensional Wasserstein distances.
    projections : Tensor of shape (L, n, n) or (B, L, n, n), optional
        Explicit directions: symmetric matrices of unit Frobenius norm (checked with
        ``validate``).

    Returns
    -------
    Tensor of shape () or (B,)

    Raises
    ------
    TypeError, ValueError
        For malformed inputs, matrices that are not symmetric or not positive definite,
        ``p < 1`` or malformed projections.

    References
    ----------
    .. [Bonet2023s] C. Bonet, B. Malezieux, A. Rakotomamonjy, L. Drumetz, T. Moreau,
       M. Kowalski, N. Courty. Sliced-Wasserstein on symmetric positive definite
       matrices for M/EEG signals. ICML 2023.

    Examples
    --------
    >>> import torch, tsw
    >>> X = torch.eye(2).expand(3, 2, 2) * torch.tensor([1.0, 2.0, 3.0])[:, None, None]
    >>> float(tsw.spdsw(X, X, seed=0))
    0.0
    """
    measures = problem.measures
    n = _side(measures)
    logs = []
    for X, name in ((measures.X_s, "X_s"), (measures.X_t, "X_t")):
        S = check_symmetric(_as_matrices(X, n), name, validate=problem.validate)
        logs.append(half_vectorize(spd_log(S, name if problem.validate else None)))
    mapped = measures._replace(X_s=logs[0], X_t=logs[1])
    A = _resolve(problem, projections, n_projections, n)
    directions = half_vectorize(A).mT  # (m, L) or (B, m, L), unit columns
    evaluation = evaluate(problem.replace(measures=mapped), line_projection, directions)
    return _finish(evaluation, A)


def _busemann_projection(measures: Measures, slices: Tensor, *, strict: bool = True) -> Projection:
    """Busemann coordinates of both supports on a block of directions ``(P; lambda)``.

    ``slices`` (n+1, n, L) or (B, n+1, n, L): the eigenvectors of the directions in its
    first ``n`` rows (``slices[i, j, l] = P_l[i, j]``), their eigenvalues in the last.
    """
    n = slices.shape[-2]
    P = slices[..., :n, :, :].movedim(-1, -3)  # (..., L, n, n)
    lam = slices[..., n, :, :].movedim(-1, -2)  # (..., L, n)
    if P.dim() == 3:
        P, lam = P.unsqueeze(0), lam.unsqueeze(0)
    coords = torch.cat(
        [
            busemann_coordinates(_as_matrices(X, n), P, lam, strict=strict)
            for X in (measures.X_s, measures.X_t)
        ],
        dim=-1,
    )  # (B, L, N + M)
    weights = torch.cat([measures.a, measures.b], dim=-1).unsqueeze(-2)
    return Projection(coords, weights, LINE, n_source=measures.X_s.shape[-2])


@_matrices
@distance(chunked=True, sliced=True)
def hspdsw(
    problem: Problem,
    /,
    *,
    n_projections: int = 50,
    p: float = 2,
    projections: Tensor | None = None,
    **options: Unpack[ChunkedOptions],
) -> Evaluation:
    r"""Affine-invariant (Busemann) sliced Wasserstein distance on SPD matrices, :math:`HSPDSW_p`.

    References: [Bonet2023ai]_ and [Bonet2025]_.

    .. math::

        HSPDSW_p(\mu, \nu) = \Big(\frac1L \sum_{l=1}^L W_p^p(B^{A_l}_\#\mu,
            B^{A_l}_\#\nu)\Big)^{1/p},

    with :math:`B^A` the Busemann function of the geodesic :math:`\exp(tA)` for the
    affine-invariant metric :math:`d(X, Y) = |\log(X^{-1/2} Y X^{-1/2})|_F`. For
    :math:`A = P \operatorname{diag}(\lambda) P^T` with :math:`\lambda_1 \le \dots \le
    \lambda_n`, it has the closed form

    .. math::

        -B^A(X) = \sum_{i=1}^n \lambda_i \log D_{ii}, \qquad P^T X P = L D L^T,

    ``L`` unit lower triangular (computed as :math:`2 \sum_i \lambda_i \log C_{ii}` from
    the Cholesky factor ``C`` of :math:`P^T X P`); it equals ``t`` at :math:`\exp(tA)`.
    The directions are those of :func:`tsw.spdsw` (:func:`tsw.sample_spd_projections`).
    Each (direction, matrix) pair takes one Cholesky factorisation. Given the
    directions, the value is invariant under every congruence :math:`X \mapsto G X G^T`
    (``G`` invertible) that carries each direction's point at infinity along: with
    :math:`G^T P = Q R` (QR, ``R`` upper triangular), the costs for ``(G X G^T, A)`` are
    those for ``(X, Q \operatorname{diag}(\lambda) Q^T)`` (the coordinates shift by the
    constant :math:`2 \sum_i \lambda_i \log |R_{ii}|`); the average over random directions
    is invariant under :math:`X \mapsto c\, O X O^T` (``O`` orthogonal, ``c > 0``).

    Parameters
    ----------
    X_s : Tensor of shape (N, n, n) or (B, N, n, n)
        Source support: symmetric positive definite matrices.
    X_t : Tensor of shape (M, n, n) or (B, M, n, n)
        Target support.
    a, b : Tensor of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative weights of equal totals; uniform by default.
    n_projections : int, default 50
        ``L``, ignored when ``projections`` is given.
    p : float, default 2
        Order of the one-dimensional Wasserstein distances.
    projections : Tensor of shape (L, n, n) or (B, L, n, n), optional
        Explicit directions: symmetric matrices of unit Frobenius norm.

    Returns
    -------
    Tensor of shape () or (B,)

    Raises
    ------
    TypeError, ValueError
        For malformed inputs, matrices that are not symmetric or not positive definite,
        ``p < 1`` or malformed projections.

    References
    ----------
    .. [Bonet2023ai] C. Bonet, B. Malezieux, A. Rakotomamonjy, L. Drumetz, T. Moreau,
       M. Kowalski, N. Courty. Sliced-Wasserstein on symmetric positive definite
       matrices for M/EEG signals. ICML 2023.
    .. [Bonet2025] C. Bonet, L. Drumetz, N. Courty. Sliced-Wasserstein distances and flows
       on Cartan-Hadamard manifolds. JMLR 26, 2025.

    Examples
    --------
    >>> import torch, tsw
    >>> X = torch.eye(2).expand(3, 2, 2) * torch.tensor([1.0, 2.0, 3.0])[:, None, None]
    >>> A = torch.eye(2)[None] / 2**0.5  # the direction of exp(t I / sqrt 2)
    >>> round(float(tsw.hspdsw(X, 2 * X, projections=A, p=1)), 6)  # log 2 * sqrt(2)
    0.980258
    """
    measures = problem.measures
    n = _side(measures)
    checked = [
        check_spd(_as_matrices(X, n), name, validate=problem.validate).flatten(-2)
        for X, name in ((measures.X_s, "X_s"), (measures.X_t, "X_t"))
    ]
    mapped = measures._replace(X_s=checked[0], X_t=checked[1])
    A = _resolve(problem, projections, n_projections, n)
    lam, P = eigen_directions(A)  # (..., L, n), (..., L, n, n)
    slices = torch.cat([P, lam.unsqueeze(-2)], dim=-2).movedim(-3, -1)  # (..., n+1, n, L)
    chunk = problem.chunk_size
    if chunk == "auto":  # the driver's plan counts rows of n^2, not n x n matrices per pair
        per_slice = measures.X_s.shape[0] * (measures.X_s.shape[-2] + measures.X_t.shape[-2])
        chunk = max(1, HSPDSW_BLOCK_ELEMENTS // max(1, 4 * n * n * per_slice))
    project = functools.partial(_busemann_projection, strict=problem.validate)
    evaluation = evaluate(problem.replace(measures=mapped, chunk_size=chunk), project, slices)
    return _finish(evaluation, A)
