r"""The geometry of symmetric positive definite (SPD) matrices :math:`S^{++}_n`.

Two metrics (Bonet et al., ICML 2023; Arsigny et al. 2007; Pennec et al. 2006):

* log-Euclidean: :math:`d(X, Y) = |\log X - \log Y|_F`; the geodesics through the identity
  are :math:`\exp(tA)`, and the projection of :math:`X` on the one of direction
  :math:`A` (symmetric, :math:`|A|_F = 1`) has coordinate :math:`\operatorname{tr}(A \log X)`;
* affine-invariant: :math:`d(X, Y) = |\log(X^{-1/2} Y X^{-1/2})|_F`, invariant under every
  congruence :math:`X \mapsto G X G^T`; the same geodesics through the identity, whose
  Busemann functions have the closed form of :func:`busemann_coordinates`.

The matrix functions (:func:`spd_log`, :func:`spd_exp`, :func:`spd_sqrt`,
:func:`spd_invsqrt`) take one batched symmetric eigendecomposition,
:math:`X = U \operatorname{diag}(\lambda) U^T`, and apply :math:`f` to the eigenvalues.
Their gradient is the Daleckii-Krein formula :math:`U (F \circ U^T G U) U^T` with the
divided differences :math:`F_{ij} = (f(\lambda_i) - f(\lambda_j)) / (\lambda_i -
\lambda_j)` (:math:`f'(\lambda_i)` on ties) written in forms that do not cancel (for the
logarithm :math:`2 \operatorname{artanh}(q) / (q (\lambda_i + \lambda_j))` with
:math:`q = (\lambda_i - \lambda_j)/(\lambda_i + \lambda_j)`): finite and exact at repeated
eigenvalues (the identity), where the gradient of ``torch.linalg.eigh`` is NaN. Under
``create_graph`` the gradient is itself differentiable: in the upstream gradient
exactly, in ``X`` through ``torch.linalg.eigh``, which is exact where the eigenvalues
are distinct; a second derivative in ``X`` at (nearly) repeated eigenvalues raises
rather than return NaN.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from tsw.core._random import Sampler
from tsw.core._validation import check_choice, check_finite, sphere_tol

__all__ = [
    "METRICS",
    "affine_distance",
    "busemann_coordinates",
    "check_metric",
    "check_spd",
    "check_symmetric",
    "divided_differences",
    "draw_spd_directions",
    "eigen_directions",
    "half_vectorize",
    "log_euclidean_distance",
    "spd_distance",
    "spd_distance_matrix",
    "spd_exp",
    "spd_exp_map",
    "spd_invsqrt",
    "spd_log",
    "spd_sqrt",
    "spd_step",
    "symmetrize",
]

#: the two metrics, by name
METRICS = ("log_euclidean", "affine")
#: relative eigenvalue gap below which a second derivative of a matrix function raises
SECOND_ORDER_GAP = 1e-6


def check_metric(value: object, name: str = "metric") -> str:
    """Return ``value`` if it is ``"log_euclidean"`` or ``"affine"``, else raise naming both."""
    return check_choice(value, name, METRICS)


def symmetrize(X: Tensor) -> Tensor:
    """Return :math:`(X + X^T) / 2`."""
    return (X + X.mT) / 2


def check_symmetric(X: Tensor, name: str, *, validate: bool = True) -> Tensor:
    r"""Check that ``X`` (..., n, n) holds symmetric matrices; return them symmetrised.

    The shape is always checked; with ``validate`` (a value check): finite entries and
    :math:`\max |X - X^T| \le` ``max(1e3 eps, 1e-6)`` times :math:`\\max |X|` of each
    matrix. The returned :math:`(X + X^T) / 2` removes the accepted asymmetry (so that
    the gradient of a value is symmetric too).
    """
    if X.dim() < 2 or X.shape[-1] != X.shape[-2] or X.shape[-1] < 1:
        raise ValueError(
            f"{name} must hold square n x n matrices (shape (..., n, n)); got "
            f"{name}.shape={tuple(X.shape)}"
        )
    if validate and X.numel():
        check_finite(X, name)
        x = X.detach()
        top = x.abs().amax(dim=(-2, -1))
        gap = (x - x.mT).abs().amax(dim=(-2, -1))
        tol = sphere_tol(X.dtype)
        bad = gap > tol * top
        if bool(bad.any()):
            worst = int((gap / top.clamp_min(torch.finfo(X.dtype).tiny)).reshape(-1).argmax())
            raise ValueError(
                f"{name} must hold symmetric matrices (max |X - X^T| <= {tol:.1e} max |X|); "
                f"got a matrix with max |X - X^T| = {gap.reshape(-1)[worst].item():.3g} and "
                f"max |X| = {top.reshape(-1)[worst].item():.3g}"
            )
    return symmetrize(X)


def _not_positive(name: str, smallest: float) -> ValueError:
    return ValueError(
        f"{name} must hold positive definite matrices; got a matrix whose smallest "
        f"eigenvalue is {smallest:.6g}"
    )


def check_spd(X: Tensor, name: str, *, validate: bool = True) -> Tensor:
    """:func:`check_symmetric`, then (with ``validate``) positive definiteness by Cholesky.

    Returns the symmetrised matrices. A matrix whose Cholesky factorisation fails in its
    dtype raises, naming its smallest eigenvalue.
    """
    S = check_symmetric(X, name, validate=bool(validate))
    if validate and S.numel():
        info = torch.linalg.cholesky_ex(S.detach()).info
        if bool((info > 0).any()):
            smallest = torch.linalg.eigvalsh(S.detach()).amin().item()
            raise _not_positive(name, smallest)
    return S


# ------------------------------------------------------------------ matrix functions


def _atanhc(q: Tensor) -> Tensor:
    """``atanh(q) / q``, 1 at 0, smooth (series below 1e-3)."""
    small = q.abs() < 1e-3
    safe = torch.where(small, torch.full_like(q, 0.5), q)
    q2 = q * q
    return torch.where(small, 1 + q2 / 3 + q2 * q2 / 5, torch.atanh(safe) / safe)


def _sinhc(x: Tensor) -> Tensor:
    """``sinh(x) / x``, 1 at 0, smooth (series below 1e-3)."""
    small = x.abs() < 1e-3
    safe = torch.where(small, torch.ones_like(x), x)
    x2 = x * x
    return torch.where(small, 1 + x2 / 6 + x2 * x2 / 120, torch.sinh(safe) / safe)


def _apply(lam: Tensor, kind: str) -> Tensor:
    """``f`` of the eigenvalues."""
    if kind == "log":
        return torch.log(lam)
    if kind == "exp":
        return torch.exp(lam)
    if kind == "sqrt":
        return torch.sqrt(lam)
    return torch.rsqrt(lam)


def divided_differences(lam: Tensor, kind: str) -> Tensor:
    r"""Return the divided differences of ``f`` at the eigenvalues, (..., n, n).

    :math:`F_{ij} = (f(\lambda_i) - f(\lambda_j)) / (\lambda_i - \lambda_j)`,

    :math:`f'(\lambda_i)` where the eigenvalues tie; every form is free of cancellation.
    """
    li, lj = lam.unsqueeze(-1), lam.unsqueeze(-2)
    if kind == "log":
        total = li + lj
        return 2 * _atanhc((li - lj) / total) / total
    if kind == "exp":
        return torch.exp((li + lj) / 2) * _sinhc((li - lj) / 2)
    si, sj = torch.sqrt(li), torch.sqrt(lj)
    if kind == "sqrt":
        return 1 / (si + sj)
    return -1 / (si * sj * (si + sj))


def _reconstruct(U: Tensor, values: Tensor) -> Tensor:
    r"""Return :math:`U \operatorname{diag}(values) U^T`."""
    return (U * values.unsqueeze(-2)) @ U.mT


def _frechet(U: Tensor, F: Tensor, G: Tensor) -> Tensor:
    r"""Return :math:`U (F \circ U^T \operatorname{sym}(G) U) U^T`, a derivative along ``G``."""
    return U @ (F * (U.mT @ symmetrize(G) @ U)) @ U.mT


class _MatrixFunction(torch.autograd.Function):
    """``f(X)`` for symmetric ``X`` by one eigendecomposition; Daleckii-Krein gradient."""

    @staticmethod
    def forward(ctx: Any, X: Tensor, kind: str, name: str | None) -> Tensor:
        lam, U = torch.linalg.eigh(X)
        if name is not None and kind != "exp" and lam.numel():
            smallest = lam[..., 0].amin()
            if not bool(smallest > 0):
                raise _not_positive(name, smallest.item())
        ctx.kind = kind
        ctx.save_for_backward(X, lam, U)
        return _reconstruct(U, _apply(lam, kind))

    @staticmethod
    def backward(ctx: Any, G: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        X, lam, U = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: a gradient that can be differentiated
            return _Frechet.apply(X, G, ctx.kind), None, None
        return _frechet(U, divided_differences(lam, ctx.kind), G), None, None


class _Frechet(torch.autograd.Function):
    """The derivative :math:`L_X(G)` of a matrix function at ``X`` along ``G``, differentiable.

    Linear and self-adjoint in ``G`` (its gradient there is :math:`L_X` of the upstream);
    its derivative in ``X`` is formed through ``torch.linalg.eigh``, exact where the
    eigenvalues are distinct, and raises at (nearly) repeated ones
    (:data:`SECOND_ORDER_GAP`) rather than return NaN.
    """

    @staticmethod
    def forward(ctx: Any, X: Tensor, G: Tensor, kind: str) -> Tensor:
        lam, U = torch.linalg.eigh(X)
        ctx.kind = kind
        ctx.save_for_backward(X, G)
        return _frechet(U, divided_differences(lam, kind), G)

    @staticmethod
    def backward(ctx: Any, H: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        X, G = ctx.saved_tensors
        grad_X = grad_G = None
        if ctx.needs_input_grad[1]:
            grad_G = _Frechet.apply(X, H, ctx.kind)
        if ctx.needs_input_grad[0]:
            create = torch.is_grad_enabled()
            with torch.enable_grad():
                leaf = X.detach().requires_grad_(True)
                lam, U = torch.linalg.eigh(leaf)
                _check_gaps(lam.detach())
                out = _frechet(U, divided_differences(lam, ctx.kind), G)
                (grad_X,) = torch.autograd.grad(out, leaf, H, create_graph=create)
        return grad_X, grad_G, None


def _check_gaps(lam: Tensor) -> None:
    """Raise where a second derivative through ``eigh`` would divide by a zero gap."""
    if lam.shape[-1] < 2:
        return
    scale = lam.abs().amax(dim=-1, keepdim=True).clamp_min(torch.finfo(lam.dtype).tiny)
    gap = ((lam[..., 1:] - lam[..., :-1]) / scale).amin()
    if bool(gap < SECOND_ORDER_GAP):
        raise ValueError(
            "second derivatives of a matrix function (log, exp, square root) are formed "
            "through its eigenvectors, which are not unique at repeated eigenvalues: got a "
            f"matrix whose eigenvalues are {gap.item():.2g} apart (relative). First "
            "derivatives are exact there"
        )


def _function(X: Tensor, kind: str, name: str | None) -> Tensor:
    return _MatrixFunction.apply(X, kind, name)


def spd_log(X: Tensor, name: str | None = None) -> Tensor:
    """Return the logarithm of SPD ``X`` (..., n, n); with ``name``, a non-SPD ``X`` raises."""
    return _function(X, "log", name)


def spd_exp(S: Tensor) -> Tensor:
    """Return the exponential of symmetric ``S`` (..., n, n)."""
    return _function(S, "exp", None)


def spd_sqrt(X: Tensor, name: str | None = None) -> Tensor:
    """Return the square root of SPD ``X`` (..., n, n)."""
    return _function(X, "sqrt", name)


def spd_invsqrt(X: Tensor, name: str | None = None) -> Tensor:
    """Return the inverse square root of SPD ``X`` (..., n, n)."""
    return _function(X, "invsqrt", name)


# ------------------------------------------------------------------------- distances


def log_euclidean_distance(X: Tensor, Y: Tensor) -> Tensor:
    r"""Return :math:`|\log X - \log Y|_F`, broadcast over the leading axes."""
    D = spd_log(X) - spd_log(Y)
    return torch.linalg.matrix_norm(D)


def affine_distance(X: Tensor, Y: Tensor) -> Tensor:
    r"""Return :math:`|\log(X^{-1/2} Y X^{-1/2})|_F = \sqrt{\sum_k \log^2 \mu_k}`, broadcast.

    :math:`\mu_k` the eigenvalues of :math:`L^{-1} Y L^{-T}` (:math:`X = L L^T`), the
    generalised eigenvalues of the pair.
    """
    X, Y = torch.broadcast_tensors(X, Y)
    C = torch.linalg.cholesky(X)
    M = torch.linalg.solve_triangular(C, Y, upper=False)
    M = torch.linalg.solve_triangular(C, M.mT, upper=False)
    mu = torch.linalg.eigvalsh(symmetrize(M))
    return torch.sqrt((torch.log(mu) ** 2).sum(-1))


def spd_distance(X: Tensor, Y: Tensor, metric: str = "affine") -> Tensor:
    """Return the distance of ``metric`` between SPD matrices, broadcast over leading axes."""
    if check_metric(metric) == "affine":
        return affine_distance(X, Y)
    return log_euclidean_distance(X, Y)


def spd_distance_matrix(X: Tensor, Y: Tensor, metric: str = "affine") -> Tensor:
    """Pairwise distances (N, M) between SPD matrices ``X`` (N, n, n) and ``Y`` (M, n, n).

    Log-Euclidean: one logarithm per matrix, then Euclidean distances. Affine-invariant:
    one generalised eigenvalue problem per pair.
    """
    if check_metric(metric) == "log_euclidean":
        A, B = half_vectorize(spd_log(X)), half_vectorize(spd_log(Y))
        return torch.cdist(A, B, compute_mode="donot_use_mm_for_euclid_dist")
    return affine_distance(X.unsqueeze(-3), Y.unsqueeze(-4))


def half_vectorize(S: Tensor) -> Tensor:
    r"""Return the half-vectorisation of symmetric ``S`` (..., n, n): its upper triangle.

    Off the diagonal times :math:`\sqrt 2`; shape (..., n(n+1)/2); an isometry:
    :math:`\langle h(A), h(B)\rangle = \operatorname{tr}(AB)` for symmetric ``A``, ``B``.
    """
    n = S.shape[-1]
    rows, cols = torch.triu_indices(n, n, device=S.device)
    scale = torch.full(rows.shape, math.sqrt(2), dtype=S.dtype, device=S.device)
    scale[rows == cols] = 1
    return S[..., rows, cols] * scale


# ------------------------------------------------------------------- the projections


def draw_spd_directions(n: int, n_projections: int, rng: Sampler) -> Tensor:
    r"""Draw ``L`` directions :math:`A = P \operatorname{diag}(\theta) P^T`, shape (L, n, n).

    :math:`\theta` uniform on :math:`\mathbb S^{n-1}`, :math:`P` Haar on :math:`O(n)`
    (Bonet et al. 2023): symmetric, :math:`|A|_F = 1`.
    """
    theta = rng.sphere(n_projections, n)
    P = rng.orthonormal(n_projections, n=n, dim=n).mT  # columns orthonormal
    return _reconstruct(P, theta)


def eigen_directions(A: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues (ascending) and eigenvectors (columns) of symmetric directions ``A``."""
    return torch.linalg.eigh(symmetrize(A))


def busemann_coordinates(X: Tensor, P: Tensor, lam: Tensor, *, strict: bool = True) -> Tensor:
    r"""Return minus the affine-invariant Busemann functions of ``X`` for the directions.

    The directions are :math:`A = P \operatorname{diag}(\lambda) P^T`.

    ``X`` (..., N, n, n) SPD, ``P`` (..., L, n, n) orthogonal (eigenvectors as columns),
    ``lam`` (..., L, n) the eigenvalues in ascending order; returns (..., L, N):

    .. math::

        -B^A(X) = \sum_i \lambda_i \log D_{ii} = 2 \sum_i \lambda_i \log C_{ii},
        \qquad P^T X P = L D L^T = C C^T,

    with ``L`` unit lower triangular and ``C`` the Cholesky factor. It is
    :math:`\lim_{t \to \infty} (t - d(X, \exp(tA)))` for the affine-invariant distance
    (the columns of :math:`P` ordered by increasing :math:`\lambda`: along
    :math:`\exp(tA)` the entries below the diagonal of
    :math:`e^{-tA/2} L e^{tA/2}` vanish), and equals ``t`` at :math:`\exp(tA)`. With
    ``strict`` (a value check), a factorisation that fails raises; without, its
    coordinates are not finite.
    """
    M = P.mT.unsqueeze(-3) @ X.unsqueeze(-4) @ P.unsqueeze(-3)  # (..., L, N, n, n)
    C, info = torch.linalg.cholesky_ex(symmetrize(M))
    if strict and C.numel() and bool((info > 0).any()):
        raise ValueError(
            "a matrix is not positive definite to working precision (its Cholesky "
            "factorisation failed after a change of basis); its eigenvalues are too far "
            "apart for this dtype"
        )
    logs = torch.log(torch.diagonal(C, dim1=-2, dim2=-1))  # (..., L, N, n)
    return 2 * (logs * lam.unsqueeze(-2)).sum(-1)


# ------------------------------------------------------------------- exponential maps


def spd_exp_map(X: Tensor, V: Tensor, metric: str = "affine") -> Tensor:
    r"""Return the exponential map at SPD ``X`` of the symmetric tangent vector ``V``.

    Affine-invariant: :math:`X^{1/2} \exp(X^{-1/2} V X^{-1/2}) X^{1/2}`. Log-Euclidean:
    :math:`\exp(\log X + D\log_X[V])`, with :math:`D\log_X` the derivative of the
    logarithm at ``X`` (Daleckii-Krein). Both stay SPD (to rounding) for any ``V``.
    """
    V = symmetrize(V)
    if check_metric(metric) == "affine":
        lam, U = torch.linalg.eigh(X)
        root = _reconstruct(U, torch.sqrt(lam))
        inv = _reconstruct(U, torch.rsqrt(lam))
        return symmetrize(root @ spd_exp(symmetrize(inv @ V @ inv)) @ root)
    lam, U = torch.linalg.eigh(X)
    log = _reconstruct(U, torch.log(lam))
    return spd_exp(log + _frechet(U, divided_differences(lam, "log"), V))


def spd_step(X: Tensor, grad: Tensor, lr: float, metric: str = "affine") -> Tensor:
    r"""Return one Riemannian gradient step on SPD matrices from the Euclidean gradient ``grad``.

    Affine-invariant: the Riemannian gradient is :math:`X \operatorname{sym}(G) X` and the
    step :math:`\exp_X(-lr\, X G X) = X^{1/2} \exp(-lr\, X^{1/2} G X^{1/2}) X^{1/2}`.
    Log-Euclidean: a gradient step on :math:`\log X` (whose gradient is
    :math:`D\exp_{\log X}[G]`), then the exponential: :math:`\exp(\log X - lr\,
    D\exp_{\log X}[G])`, the exponential map of the log-Euclidean Riemannian gradient.
    """
    G = symmetrize(grad)
    lam, U = torch.linalg.eigh(X)
    if check_metric(metric) == "affine":
        root = _reconstruct(U, torch.sqrt(lam))
        return symmetrize(root @ spd_exp(symmetrize(-lr * (root @ G @ root))) @ root)
    log_lam = torch.log(lam)
    direction = _frechet(U, divided_differences(log_lam, "exp"), G)
    return spd_exp(_reconstruct(U, log_lam) - lr * direction)
