r"""STSW: spherical tree-sliced Wasserstein distance (Tran et al., ICLR 2025)."""

from __future__ import annotations

import torch
from torch import Tensor

from tsw._common import check_trees, resolve_counts
from tsw._engine import safe_root
from tsw._sphere import spherical_project
from tsw._validation import (
    Measures,
    check_measures,
    check_nonnegative_float,
    check_on_sphere,
    check_p,
)
from tsw.splits import distance_split
from tsw.tree_wasserstein import line_cost
from tsw.trees import SphericalTrees, sample_spherical_trees

__all__ = ["stsw"]

#: official STSW defaults (``STSWD(ntrees=200, nlines=5)``)
DEFAULT_COUNTS = (200, 5)


def _spherical_measures(measures: Measures, renormalize: bool, validate: bool) -> Measures:
    return measures._replace(
        X_s=check_on_sphere(measures.X_s, "X_s", renormalize=renormalize, validate=validate),
        X_t=check_on_sphere(measures.X_t, "X_t", renormalize=renormalize, validate=validate),
    )


def resolve_spherical_trees(
    trees: object,
    n_trees: int | None,
    n_lines: int | None,
    dim: int,
    like: Tensor,
    measures: Measures | None,
    seed: int | None,
    generator: torch.Generator | None,
) -> SphericalTrees:
    """Explicit spherical trees checked against the data, or trees sampled (spec 5.2)."""
    if trees is not None:
        if measures is not None:
            trees = check_trees(trees, (SphericalTrees,), measures)
        resolve_counts(trees, n_trees, n_lines)
        return trees
    T, k = resolve_counts(None, n_trees, n_lines, DEFAULT_COUNTS)
    return sample_spherical_trees(
        T, k, dim, seed=seed, generator=generator, dtype=like.dtype, device=like.device
    )


def spherical_tree_cost(
    Z: Tensor, w: Tensor, trees: SphericalTrees, delta: float, p: float
) -> Tensor:
    r"""Per-tree :math:`\sum_e w_e |\Delta_e|^p` of signed masses ``w`` at points ``Z``.

    Parameters
    ----------
    Z : Tensor of shape (B, n, d+1)
        Points of the sphere.
    w : Tensor of shape (B, n)
        Signed masses (source minus target), summing to zero.
    trees : SphericalTrees
    delta, p : float

    Returns
    -------
    Tensor of shape (B, T)
    """
    t, beta = spherical_project(Z, trees, angles=delta != 0)
    if beta is None:
        masses = (w / trees.n_lines).unsqueeze(-2).unsqueeze(-2)  # (B, 1, 1, n)
    else:
        masses = distance_split(beta, delta) * w.unsqueeze(-2).unsqueeze(-2)
    masses = masses.expand(*t.shape[:-1], trees.n_lines, t.shape[-1])
    return line_cost(t.unsqueeze(-2), masses, p, rays=True).sum(-1)  # t >= 0: rays


def stsw(
    X_s: Tensor,
    X_t: Tensor,
    a: Tensor | None = None,
    b: Tensor | None = None,
    *,
    n_trees: int | None = None,
    n_lines: int | None = None,
    delta: float = 2.0,
    p: float = 1,
    trees: SphericalTrees | None = None,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    validate: bool = True,
    renormalize: bool = False,
) -> Tensor:
    r"""Spherical tree-sliced Wasserstein distance (STSW) between measures on a sphere.

    Each of ``T`` random spherical trees (:class:`tsw.SphericalTrees`) has a root
    :math:`x \in \mathbb S^d` and ``k`` rays, great semicircles of length :math:`\pi`
    leaving :math:`x` in unit tangent directions :math:`v_i` and glued at the root only.
    A point :math:`y` of weight :math:`a_y` sits at the geodesic distance
    :math:`t(y) = \angle(x, y)` from the root on *every* ray and puts mass
    :math:`a_y \alpha_i(y)` on ray :math:`i`, with the :math:`O(d+1)`-invariant split

    .. math::

        \alpha_i(y) = \mathrm{softmax}_i\big(-\delta\, \sin t(y)\,
            \angle(u(y), v_i)\big), \qquad u(y) \propto y - \langle x, y\rangle x .

    The value is

    .. math::

        \mathrm{STSW}_p(\mu, \nu) = \Big(\frac1T \sum_{\tau=1}^T \sum_{e \in
        \mathcal T_\tau} w_e\, |\mu_\tau(\Gamma_e) - \nu_\tau(\Gamma_e)|^p\Big)^{1/p}.

    For ``p = 1`` each tree term is the exact Wasserstein-1 distance for the star
    metric of the spherical tree (:math:`|t_a - t_b|` on one ray, :math:`t_a + t_b`
    across rays), and STSW is an :math:`O(d+1)`-invariant metric on measures on the
    sphere (Tran et al. 2025). For ``p > 1`` it is the tree-sliced Sobolev transport
    :math:`ST_p` (Le et al. 2022), a metric too but **not** a Wasserstein-:math:`p`
    distance; the official code's default is ``p = 2``, the paper's definition ``p = 1``
    (the default here).

    Parameters
    ----------
    X_s : Tensor of shape (N, d+1) or (B, N, d+1)
        Source support, unit vectors.
    X_t : Tensor of shape (M, d+1) or (B, M, d+1)
        Target support, unit vectors; ``M != N`` is allowed.
    a, b : Tensor of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative weights of equal totals; uniform ``1/N``, ``1/M`` by default.
    n_trees, n_lines : int, optional
        ``T`` and ``k``; 200 and 5 by default (the official code's), inferred from
        ``trees`` if given.
    delta : float, default 2.0
        Inverse temperature of the split; ``0`` is the uniform split.
    p : float, default 1
        Exponent (see above).
    trees : SphericalTrees, optional
        Explicit trees (shared, or one set per batch item); overrides the sampling.
    seed, generator
        Randomness of the trees (:func:`tsw.sample_spherical_trees`): ``seed`` gives
        identical trees on every device; without either, fresh trees from
        operating-system entropy. The global torch RNG is never used.
    validate : bool, default True
        Run the value checks (a device synchronisation), including that the rows of
        ``X_s`` and ``X_t`` have norm 1 up to :func:`tsw._validation.sphere_tol`.
    renormalize : bool, default False
        Divide the rows of ``X_s`` and ``X_t`` by their norms instead of checking them.

    Returns
    -------
    Tensor of shape () or (B,)
        Same dtype and device as ``X_s``.

    Raises
    ------
    TypeError, ValueError
        For malformed inputs (see :func:`tsw._validation.check_measures`), points off
        the sphere (with ``validate`` and without ``renormalize``), ``d + 1 < 2``,
        ``p < 1``, ``delta < 0``, counts < 1, or trees that do not fit the data.

    Notes
    -----
    The rays of a tree share the coordinate :math:`t(y)`: one (T, N + M) coordinate
    tensor, **one sort per tree** (its permutation gathers the (T, k, N + M) masses of
    all rays), then the closed form of :func:`tsw.line_system_cost`; no (T, k, n, d+1)
    tensor is formed. Angles are ``atan2`` of plane components, not a clamped arccos:
    the golden value of spec 8 (G3) is reproduced to rounding, and gradients are finite
    at the roots, their antipodes, on the rays and at coincident points (where the
    distance is not differentiable, a subgradient). On :math:`\mathbb S^2` the angles
    are exact everywhere; in other dimensions they are resolved to about
    :math:`\sqrt{\epsilon}` within :math:`\sqrt{\epsilon}` of a root, its antipode or
    the plane of a ray (see :mod:`tsw._sphere`). The value depends on the points only
    through ``y / |y|``. In a batch, sampled trees are shared by the items (the law does
    not depend on the data), so a batched call equals a loop with the same seed.

    References
    ----------
    .. [Tran2025s] H. V. Tran, T. T. Chu, K. N. M. Nguyen, T. Pham, T. Le, T. M.
       Nguyen. Spherical tree-sliced Wasserstein distance. ICLR 2025.
    .. [Le2022s] T. Le, T. Nguyen, D. Phung, V. A. Nguyen. Sobolev transport: a
       scalable metric for probability measures with graph metrics. AISTATS 2022.

    Examples
    --------
    >>> import torch, tsw
    >>> e = torch.eye(3, dtype=torch.float64)
    >>> trees = tsw.SphericalTrees(e[2:3], e[None, :2])  # root e3, rays to e1 and e2
    >>> value = tsw.stsw(e[:1], e[1:2], trees=trees)  # spec 8, G3: pi |2 sigma(pi) - 1|
    >>> round(value.item(), 7)
    2.881319
    """
    measures = check_measures(X_s, X_t, a, b, validate=validate)
    measures = _spherical_measures(measures, renormalize, validate)
    p = check_p(p)
    delta = check_nonnegative_float(delta, "delta")
    X = measures.X_s
    trees = resolve_spherical_trees(
        trees, n_trees, n_lines, X.shape[-1], X, measures, seed, generator
    )
    Z = torch.cat([measures.X_s, measures.X_t], dim=-2)
    w = torch.cat([measures.a, -measures.b], dim=-1)
    value = safe_root(spherical_tree_cost(Z, w, trees, delta, p).mean(-1), p)
    return value if measures.batched else value[0]
