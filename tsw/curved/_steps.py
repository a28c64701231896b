r"""Riemannian gradient steps: move points along a manifold for a gradient flow.

:func:`riemannian_step` turns the Euclidean gradient of a loss with respect to the
points (what ``torch.autograd`` returns) into the Riemannian gradient of the manifold
and moves the points along the geodesic against it (the exponential map), so that a
gradient flow of any of the library's distances is a few lines::

    X = X0.clone()
    for it in range(200):
        X.requires_grad_(True)
        loss = tsw.hhsw(X, Y, seed=it)
        (grad,) = torch.autograd.grad(loss, X)
        X = tsw.riemannian_step(X.detach(), grad, lr=0.5, manifold="lorentz")

The points stay on the manifold to rounding (the step's end point is put back on it:
the sphere's rows renormalised, the hyperboloid's :math:`x_0` recomputed, SPD
matrices symmetrised).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tsw.core._validation import check_choice, check_tensor
from tsw.curved._hyperbolic import _frame, _step, from_spatial, to_spatial
from tsw.curved._spd import spd_step

__all__ = ["MANIFOLDS", "riemannian_step"]

#: the manifolds :func:`riemannian_step` moves points on
MANIFOLDS = ("euclidean", "sphere", "lorentz", "poincare", "spd_affine", "spd_log")


def _sphere(X: Tensor, G: Tensor, lr: float) -> Tensor:
    r"""Return :math:`\cos(n) x + \sin(n) v / n` for :math:`v = -lr (g - \langle g, x\rangle x)`."""
    v = -lr * (G - (G * X).sum(-1, keepdim=True) * X)
    n = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
    safe = torch.where(n > 0, n, torch.ones_like(n))
    moved = torch.cos(n) * X + torch.where(n > 0, torch.sin(safe) / safe, 1) * v
    return moved / torch.linalg.vector_norm(moved, dim=-1, keepdim=True)


def _hyperbolic(X: Tensor, G: Tensor, lr: float, model: str) -> Tensor:
    r"""Return the step against the Riemannian gradient from the model's gradient ``G``.

    The gradient is carried to the spatial coordinates ``z`` and split into its part
    along :math:`\hat z` and the rest, where the Riemannian gradient is :math:`g_\perp +
    x_0^2 \langle \hat z, g\rangle \hat z` (Lorentz) and the step's length has no
    cancellation far from the origin (:func:`~tsw.curved._hyperbolic._step`).
    """
    z = to_spatial(X, model)
    _, x0, unit = _frame(z)
    x0 = x0.unsqueeze(-1)
    if model == "lorentz":
        g = G[..., 1:] + G[..., :1] * z / x0  # the gradient of f(sqrt(1 + |z|^2), z)
        radial = (unit * g).sum(-1, keepdim=True)
        perp = g - radial * unit
        rad = x0 * x0 * radial
    else:  # y = z / (1 + x_0): its Jacobian's transpose, split along z / |z| and across
        radial = (unit * G).sum(-1, keepdim=True)
        perp = (G - radial * unit) / (1 + x0)
        rad = x0 * radial / (1 + x0)
    return from_spatial(_step(z, -lr * perp, -lr * rad.squeeze(-1), "grad"), model)


def riemannian_step(x: Tensor, grad: Tensor, lr: float, *, manifold: str) -> Tensor:
    r"""Move points one step against the Riemannian gradient of a loss, along the manifold.

    ``grad`` is the Euclidean gradient of the loss with respect to ``x`` (in the
    coordinates ``x`` is given in); the step is :math:`\exp_x(-lr\, \operatorname{grad}
    f(x))` with the manifold's Riemannian gradient and exponential map:

    * ``"euclidean"``: :math:`x - lr\, g`;
    * ``"sphere"`` (rows of unit norm, (..., d+1)): :math:`g - \langle g, x\rangle x`, and
      :math:`\cos(|v|) x + \sin(|v|) v / |v|`;
    * ``"lorentz"`` (hyperboloid, (..., d+1)): :math:`J g + \langle x, J g\rangle_L x`
      with :math:`J = \operatorname{diag}(-1, 1, \dots, 1)`, and the hyperboloid's
      exponential map, computed on the spatial coordinates so that steps far from the
      origin keep their length (:mod:`tsw.curved._hyperbolic`);
    * ``"poincare"`` (ball, (..., d)): :math:`\frac{(1 - |y|^2)^2}{4} g` and the ball's
      exponential map (through the hyperboloid). A step that ends where the ball cannot
      hold the point in its dtype (beyond about 16.6 from the origin in float32, 37.4 in
      float64) raises: use the Lorentz model;
    * ``"spd_affine"`` (SPD matrices, (..., n, n)), affine-invariant metric:
      :math:`X \operatorname{sym}(G) X` and :math:`X^{1/2} \exp(-lr\, X^{1/2} G X^{1/2})
      X^{1/2}`;
    * ``"spd_log"``, log-Euclidean metric: :math:`\exp(\log X - lr\, D\exp_{\log X}[G])`,
      a gradient step on :math:`\log X`.

    Parameters
    ----------
    x : Tensor
        The points (see above for the shapes), e.g. ``X.detach()`` after a loss.
    grad : Tensor of the shape of ``x``
        The Euclidean gradient, e.g. ``torch.autograd.grad(loss, X)[0]``.
    lr : float
        The step size (a non-negative number): the step's Riemannian length is ``lr``
        times the Riemannian gradient's norm.
    manifold : {"euclidean", "sphere", "lorentz", "poincare", "spd_affine", "spd_log"}
        The manifold and its metric.

    Returns
    -------
    Tensor of the shape of ``x``

    Raises
    ------
    TypeError, ValueError
        For a ``grad`` of another shape, a negative or non-finite ``lr``, an unknown
        ``manifold``, or a step that overflows (a Riemannian length beyond 43 in float32,
        354 in float64, on the hyperboloid; on SPD matrices a step whose matrix
        exponential overflows to Inf or underflows to a singular matrix) or that is NaN.

    Examples
    --------
    A gradient flow of HHSW on the hyperboloid:

    >>> import torch, tsw
    >>> g = torch.Generator().manual_seed(0)
    >>> Y = tsw.curved.exp0(0.3 * torch.randn(100, 2, generator=g, dtype=torch.float64) + 1)
    >>> X = tsw.curved.exp0(0.3 * torch.randn(100, 2, generator=g, dtype=torch.float64))
    >>> start = float(tsw.hhsw(X, Y, seed=0))
    >>> for it in range(50):
    ...     X = X.requires_grad_(True)
    ...     (grad,) = torch.autograd.grad(tsw.hhsw(X, Y, seed=it, power=True), X)
    ...     X = tsw.riemannian_step(X.detach(), grad, lr=50.0, manifold="lorentz")
    >>> float(tsw.hhsw(X, Y, seed=0)) < start / 5
    True
    """
    x = check_tensor(x, "x")
    grad = check_tensor(grad, "grad")
    if grad.shape != x.shape:
        raise ValueError(
            f"grad must have the shape of x {tuple(x.shape)}; got grad.shape={tuple(grad.shape)}"
        )
    if isinstance(lr, bool) or not isinstance(lr, int | float) or not math.isfinite(lr) or lr < 0:
        raise ValueError(f"lr must be a finite non-negative number; got {lr!r}")
    manifold = check_choice(manifold, "manifold", MANIFOLDS)
    lr = float(lr)
    if manifold == "euclidean":
        return x - lr * grad
    if manifold == "sphere":
        return _sphere(x, grad, lr)
    if manifold in ("lorentz", "poincare"):
        return _hyperbolic(x, grad, lr, manifold)
    out = spd_step(x, grad, lr, "affine" if manifold == "spd_affine" else "log_euclidean")
    # a long step's matrix exponential overflows (Inf, NaN) or underflows (singular)
    if not bool(torch.isfinite(out).all()) or bool(
        (torch.linalg.cholesky_ex(out.detach()).info != 0).any()
    ):
        raise ValueError(
            f"the step leaves the SPD matrices of dtype {x.dtype}: the exponential of lr times "
            f"the Riemannian gradient overflows or underflows (lr={lr!r}); take a smaller lr"
        )
    return out
