r"""Batched one-dimensional optimal transport through quantile functions."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["wasserstein_1d"]


def wasserstein_1d(
    u_values: Tensor,
    v_values: Tensor,
    u_weights: Tensor | None = None,
    v_weights: Tensor | None = None,
    p: float = 1.0,
) -> Tensor:
    r"""Cost :math:`W_p^p` between batched weighted measures on the real line.

    .. math::

        W_p^p(\mu, \nu) = \int_0^{m} |F_\mu^{-1}(q) - F_\nu^{-1}(q)|^p \, dq,

    with :math:`m` the common total mass (1 for probability weights). This is POT's
    ``ot.wasserstein_1d`` with the atoms on the **last** axis (torch convention)
    instead of the first.

    Parameters
    ----------
    u_values : Tensor of shape (..., n)
    v_values : Tensor of shape (..., m)
    u_weights, v_weights : Tensor of shape (..., n) / (..., m), optional
        Non-negative weights of equal totals, broadcastable to the values; uniform
        ``1/n``, ``1/m`` by default. Not validated here: callers validate.
    p : float, default 1
        Exponent ``>= 1``.

    Returns
    -------
    Tensor of shape (...)
        :math:`W_p^p` (no root), differentiable in values and weights.

    Examples
    --------
    >>> import torch
    >>> from tsw.core.wasserstein_1d import wasserstein_1d
    >>> wasserstein_1d(torch.tensor([0.0, 1.0]), torch.tensor([2.0, 3.0]), p=2)
    tensor(4.)
    """
    n, m = u_values.shape[-1], v_values.shape[-1]
    if u_weights is None:
        u_weights = torch.full_like(u_values, 1.0 / n)
    if v_weights is None:
        v_weights = torch.full_like(v_values, 1.0 / m)
    u_sorted, u_idx = torch.sort(u_values, dim=-1)
    v_sorted, v_idx = torch.sort(v_values, dim=-1)
    u_cum = torch.cumsum(torch.gather(u_weights.expand_as(u_values), -1, u_idx), dim=-1)
    v_cum = torch.cumsum(torch.gather(v_weights.expand_as(v_values), -1, v_idx), dim=-1)
    qs, _ = torch.sort(torch.cat([u_cum, v_cum], dim=-1), dim=-1)
    iu = torch.searchsorted(u_cum.detach().contiguous(), qs.detach().contiguous()).clamp_(max=n - 1)
    iv = torch.searchsorted(v_cum.detach().contiguous(), qs.detach().contiguous()).clamp_(max=m - 1)
    diff = (torch.gather(u_sorted, -1, iu) - torch.gather(v_sorted, -1, iv)).abs()
    dq = torch.diff(qs, dim=-1, prepend=torch.zeros_like(qs[..., :1]))
    if p == 1.0:
        return (dq * diff).sum(-1)
    return (dq * diff.pow(p)).sum(-1)
