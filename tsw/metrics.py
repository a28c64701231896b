r"""Exact evaluation metrics: the numbers a flow or a generator is judged by.

These are not training losses: each returns a Python float computed in float64 on the
CPU with no gradient, from POT's exact network-simplex solver ``ot.emd2`` where a
transport problem is solved.

* :func:`wasserstein`: the exact :math:`W_p` in :math:`\mathbb R^d`;
* :func:`geodesic_wasserstein`: the exact :math:`W_p` on the sphere for the great-circle
  distance;
* :func:`vmf_mixture_nll`: the mean negative log-likelihood of points on
  :math:`\mathbb S^2` under a mixture of von Mises-Fisher distributions (the mixture of
  :func:`tsw.datasets.make_vmf_mixture`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from tsw.core._validation import check_measures, check_p, check_tensor

__all__ = ["geodesic_wasserstein", "vmf_mixture_nll", "wasserstein"]

#: iterations of the network simplex (POT's default, 1e5, stops early above ~500 points)
NUM_ITER_MAX = 10**7


def _float64(x: object, name: str) -> Tensor:
    """Return a float32 / float64 tensor or numpy array as a detached float64 CPU tensor."""
    if isinstance(x, np.ndarray):
        if x.dtype not in (np.float32, np.float64):
            raise TypeError(f"{name} must have dtype float32 or float64; got {x.dtype}")
        return torch.from_numpy(x.astype(np.float64))
    if not isinstance(x, Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor or a numpy float array; got {type(x).__name__}"
        )
    return check_tensor(x, name).detach().to("cpu", torch.float64)


def _pair(
    X_s: object, X_t: object, a: object, b: object
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validate one pair of measures; return float64 numpy supports and weights.

    Mixed float32 / float64 inputs and devices are accepted: an evaluation metric
    computes in float64 on the CPU whatever it is given.
    """
    wa = None if a is None else _float64(a, "a")
    wb = None if b is None else _float64(b, "b")
    m = check_measures(_float64(X_s, "X_s"), _float64(X_t, "X_t"), wa, wb)
    if m.batched:
        raise ValueError(
            "the metrics take one pair of measures, X_s (N, d) and X_t (M, d); got "
            f"X_s.shape={tuple(m.X_s.shape)} and X_t.shape={tuple(m.X_t.shape)}"
        )
    return m.X_s[0].numpy(), m.X_t[0].numpy(), m.a[0].numpy(), m.b[0].numpy()


def _emd2(a: np.ndarray, b: np.ndarray, M: np.ndarray) -> float:
    import ot  # POT, imported when an exact value is asked for

    value = float(ot.emd2(a, b, M, numItermax=NUM_ITER_MAX))
    return max(value, 0.0)


def wasserstein(
    X_s: Tensor | np.ndarray,
    X_t: Tensor | np.ndarray,
    a: Tensor | np.ndarray | None = None,
    b: Tensor | np.ndarray | None = None,
    *,
    p: float = 2.0,
    power: bool = False,
) -> float:
    r"""Compute the exact Wasserstein distance :math:`W_p` of two measures in :math:`\mathbb R^d`.

    .. math::

        W_p(\mu, \nu)^p = \min_{\pi \in \Pi(a, b)} \sum_{i, j} \pi_{ij}\,
        \lVert x_i - y_j \rVert^p,

    solved by ``ot.emd2`` in float64 (cost ``ot.dist``, squared Euclidean, for ``p = 2``;
    the Euclidean distance to the power ``p`` otherwise).

    Parameters
    ----------
    X_s, X_t : Tensor or ndarray of shape (N, d) and (M, d)
        Supports (float32 or float64; computed in float64, detached).
    a, b : Tensor or ndarray of shape (N,) and (M,), optional
        Non-negative weights of equal totals; uniform by default.
    p : float, default 2.0
        Order, :math:`p \geq 1`.
    power : bool, default False
        Return :math:`W_p^p` (the optimal cost) instead of :math:`W_p`.

    Returns
    -------
    float

    Examples
    --------
    >>> import torch, tsw
    >>> X = torch.zeros(3, 2)
    >>> tsw.metrics.wasserstein(X, X + torch.tensor([3.0, 4.0]))
    5.0
    """
    p = check_p(p)
    X, Y, wa, wb = _pair(X_s, X_t, a, b)
    import ot

    # ot.dist's default is the squared Euclidean cost
    M = ot.dist(X, Y) if p == 2 else ot.dist(X, Y, metric="euclidean") ** p
    value = _emd2(wa, wb, M)
    return value if power else value ** (1 / p)


def _check_unit_rows(X: np.ndarray, name: str) -> None:
    norms = np.linalg.norm(X, axis=1)
    err = np.abs(norms - 1)
    if err.max() > 1e-4:
        raise ValueError(
            f"{name} must lie on the unit sphere (rows of norm 1 up to 1e-4); got a row of "
            f"norm {norms[err.argmax()]:.6g}"
        )


def geodesic_wasserstein(
    X_s: Tensor | np.ndarray,
    X_t: Tensor | np.ndarray,
    a: Tensor | np.ndarray | None = None,
    b: Tensor | np.ndarray | None = None,
    *,
    p: float = 2.0,
    power: bool = False,
) -> float:
    r"""Compute the exact Wasserstein distance on the sphere :math:`\mathbb S^d`, geodesic cost.

    .. math::

        W_p(\mu, \nu)^p = \min_{\pi \in \Pi(a, b)} \sum_{i, j} \pi_{ij}\,
        \angle(x_i, y_j)^p, \qquad
        \angle(x, y) = 2 \operatorname{atan2}(\lVert x - y \rVert, \lVert x + y \rVert),

    the great-circle distance. That form of the angle is exact to rounding at every
    angle, where :math:`\arccos\langle x, y\rangle` loses half the digits near 0 and
    :math:`\pi` and, clamped, biases small distances (the STSW paper's float32 metric has
    a floor near :math:`\log_{10} W_2^2 = -4.69`). Solved by ``ot.emd2`` in float64.

    Parameters
    ----------
    X_s, X_t : Tensor or ndarray of shape (N, d+1) and (M, d+1)
        Points of the sphere as unit vectors (norms within 1e-4 of 1; they are used as given).
    a, b : Tensor or ndarray of shape (N,) and (M,), optional
        Non-negative weights of equal totals; uniform by default.
    p : float, default 2.0
        Order, :math:`p \geq 1`.
    power : bool, default False
        Return :math:`W_p^p` instead of :math:`W_p`.

    Returns
    -------
    float

    Examples
    --------
    >>> import math, torch, tsw
    >>> north, east = torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[1.0, 0.0, 0.0]])
    >>> math.isclose(tsw.metrics.geodesic_wasserstein(north, east), math.pi / 2)
    True
    """
    p = check_p(p)
    X, Y, wa, wb = _pair(X_s, X_t, a, b)
    _check_unit_rows(X, "X_s")
    _check_unit_rows(Y, "X_t")
    diff = np.linalg.norm(X[:, None, :] - Y[None, :, :], axis=-1)
    summ = np.linalg.norm(X[:, None, :] + Y[None, :, :], axis=-1)
    value = _emd2(wa, wb, (2 * np.arctan2(diff, summ)) ** p)
    return value if power else value ** (1 / p)


def vmf_mixture_nll(
    X: Tensor | np.ndarray,
    means: Tensor | np.ndarray,
    kappa: float,
    weights: Tensor | np.ndarray | None = None,
) -> float:
    r"""Compute the mean negative log-likelihood of points of :math:`\mathbb S^2`, vMF mixture.

    .. math::

        \mathrm{NLL} = -\frac1n \sum_{i=1}^n \log \sum_{j=1}^K w_j\,
        \frac{\kappa}{4\pi\sinh\kappa}\, e^{\kappa\langle \mu_j, x_i\rangle},

    with the normalising constant written as
    :math:`\log\frac{\kappa}{2\pi} - \kappa - \log(1 - e^{-2\kappa})` so that large
    :math:`\kappa` does not overflow, and a log-sum-exp over the components. Densities are
    with respect to the area measure of the unit sphere (total area :math:`4\pi`), so the
    uniform distribution has NLL :math:`\log 4\pi \approx 2.531`.

    Parameters
    ----------
    X : Tensor or ndarray of shape (n, 3)
        Points (unit vectors, used as given).
    means : Tensor or ndarray of shape (K, 3)
        Unit modes :math:`\mu_j` (e.g. :func:`tsw.datasets.icosahedron`).
    kappa : float
        Concentration :math:`\kappa > 0`, shared by the components.
    weights : Tensor or ndarray of shape (K,), optional
        Mixture weights (non-negative, normalised here); equal by default.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        For shapes other than (n, 3) and (K, 3) (only :math:`\mathbb S^2` is implemented),
        a non-positive ``kappa`` or negative weights.
    """
    Xt, M = _float64(X, "X"), _float64(means, "means")
    if Xt.ndim != 2 or Xt.shape[1] != 3 or Xt.shape[0] == 0:
        raise ValueError(f"X must have shape (n, 3) with n >= 1; got X.shape={tuple(Xt.shape)}")
    if M.ndim != 2 or M.shape[1] != 3 or M.shape[0] == 0:
        raise ValueError(
            f"means must have shape (K, 3) with K >= 1; got means.shape={tuple(M.shape)}"
        )
    if isinstance(kappa, bool) or not isinstance(kappa, int | float):
        raise TypeError(f"kappa must be a real number > 0; got {type(kappa).__name__}")
    if not math.isfinite(kappa) or kappa <= 0:
        raise ValueError(f"kappa must be a finite real number > 0; got {kappa}")
    if weights is None:
        log_w = torch.full((M.shape[0],), -math.log(M.shape[0]), dtype=torch.float64)
    else:
        w = _float64(weights, "weights")
        if tuple(w.shape) != (M.shape[0],):
            raise ValueError(
                f"weights must have shape (K,) = ({M.shape[0]},) to match means; "
                f"got weights.shape={tuple(w.shape)}"
            )
        if not bool(torch.isfinite(w).all()) or bool((w < 0).any()) or float(w.sum()) <= 0:
            raise ValueError("weights must be finite, non-negative and not all zero")
        log_w = torch.log(w / w.sum())
    kappa = float(kappa)
    log_c = math.log(kappa / (2 * math.pi)) - kappa - math.log1p(-math.exp(-2 * kappa))
    logits = log_w + log_c + kappa * (Xt @ M.T)
    return float(-torch.logsumexp(logits, dim=1).mean())
