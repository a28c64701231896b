r"""TS-Sobolev: tree-sliced Sobolev IPM on Db-TSW's trees (Tran et al., ICLR 2026).

The mathematics is :func:`sobolev_weights` (the regularised edge weight
:math:`\beta_e`), :func:`sobolev_line_cost` (the closed form on lines rooted at 0) and
:func:`sobolev_cost` (one cost per tree of a :class:`~tsw.core._projection.Projection`).
:func:`ts_sobolev` draws Db-TSW's trees and splits their masses as Db-TSW does
(:func:`~tsw.euclidean._db_tsw.resolve_db_trees`,
:func:`~tsw.euclidean._db_tsw.db_projection`), then applies this closed form. At
``p = 1`` the weights are the edge lengths and the value is Db-TSW's, computed by the
shared closed form (:func:`~tsw.core._projection.closed_form`).

The closed form brings its own weights instead of changing the shared one
(:mod:`tsw.core.tree_wasserstein`): it is written with torch operators (autograd
differentiates it, to any order), one sort per line as the shared kernel does.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from tsw.core._api import distance
from tsw.core._driver import evaluate
from tsw.core._projection import STAR, Projection
from tsw.core._sort import sort_last
from tsw.core.splits import LineSplit
from tsw.euclidean._db_tsw import check_directions, db_projection, resolve_db_trees
from tsw.euclidean._lines import centered

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from tsw.core._api import ChunkedOptions
    from tsw.core._output import Evaluation
    from tsw.core._problem import Problem
    from tsw.core.trees import ConcurrentLines

__all__ = ["sobolev_cost", "sobolev_line_cost", "sobolev_weights", "ts_sobolev"]


# --------------------------------------------------------------------------- mathematics


def sobolev_weights(length: Tensor, subtree: Tensor, p: float) -> Tensor:
    r"""TS-Sobolev's edge weight :math:`\beta_e = \int_0^{\ell_e} (1 + \omega_e + s)^{1-p}\,ds`.

    ``length`` is the edge's length :math:`\ell_e`, ``subtree`` the length
    :math:`\omega_e \ge 0` of the tree below the edge's outer end. In closed form

    .. math::

        \beta_e = \frac{(1 + \omega_e + \ell_e)^{2-p} - (1 + \omega_e)^{2-p}}{2 - p},
        \qquad \beta_e = \log\Big(1 + \frac{\ell_e}{1 + \omega_e}\Big) \text{ at } p = 2,

    evaluated as :math:`(1 + \omega)^{2-p}\,\mathrm{expm1}((2-p)\,\mathrm{log1p}(\ell /
    (1 + \omega))) / (2 - p)`, which has no cancellation for short edges and tends to the
    logarithm as :math:`p \to 2`. At ``p = 1`` it is :math:`\ell_e` (the tree's own
    length, so the cost is the tree :math:`W_1`).
    """
    base = 1.0 + subtree
    ratio = torch.log1p(length / base)
    if p == 2.0:
        return ratio
    if p == 1.0:
        return length
    return base.pow(2.0 - p) * torch.expm1((2.0 - p) * ratio) / (2.0 - p)


def sobolev_line_cost(coords: Tensor, masses: Tensor, p: float) -> Tensor:
    r"""TS-Sobolev's sum :math:`\sum_e \beta_e |m(\Gamma_e)|^p` on lines rooted at 0.

    ``coords`` and ``masses`` (broadcastable, (..., n)): the atoms' coordinates on each
    line and their signed masses. The edges are those of the shared closed form
    (:func:`tsw.core.tree_wasserstein.line_cost`): on the negative side, from each atom
    to the next atom towards the root (or the root), crossed by the prefix mass; on the
    positive side, from the previous atom (or the root) to each atom, crossed by the
    suffix mass. The subtree below an edge is the rest of its side of the line out to
    the side's tip: the farthest atom of non-zero mass on that side
    (:math:`\omega_e` of :func:`sobolev_weights`). So the tree is the part of the line
    that the projected measures span, as in the authors' code (which takes every atom,
    all of positive mass there); an atom of zero mass changes nothing. Returns (...).
    """
    shape = torch.broadcast_shapes(coords.shape, masses.shape)
    c, idx = sort_last(coords.expand(shape))
    m = torch.gather(masses.expand(shape), -1, idx)
    prefix = m.cumsum(-1)
    suffix = m.flip(-1).cumsum(-1).flip(-1)
    neg, pos = c.clamp(max=0), c.clamp(min=0)
    # the edge beside each sorted atom (zero on the other side of the root)
    inward = torch.cat([neg[..., 1:] - neg[..., :-1], -neg[..., -1:]], dim=-1)
    outward = torch.cat([pos[..., :1], pos[..., 1:] - pos[..., :-1]], dim=-1)
    # the tips of the spanned tree: the outermost atoms of non-zero mass (an empty
    # side gets the other end, so that every subtree length below is finite and >= 0)
    held = m.detach() != 0
    low = torch.where(held, c, c[..., -1:]).amin(-1, keepdim=True)
    high = torch.where(held, c, c[..., :1]).amax(-1, keepdim=True)
    below_neg = (neg - low).clamp(min=0)
    below_pos = (high - pos).clamp(min=0)
    cost = sobolev_weights(inward, below_neg, p) * prefix.abs().pow(p)
    cost = cost + sobolev_weights(outward, below_pos, p) * suffix.abs().pow(p)
    return cost.sum(-1)


def sobolev_cost(projection: Projection, p: float) -> Tensor:
    """Cost per tree (B, T) of a star :class:`~tsw.core._projection.Projection` (no root).

    Masses left to the closed form to split (a :class:`~tsw.core.splits.LineSplit`,
    Db-TSW's projection for ``delta != 0``) are split here first.
    """
    if projection.structure != STAR:  # not reached from ts_sobolev
        raise ValueError(
            f"TS-Sobolev is defined here on concurrent lines; got {projection.structure}"
        )
    masses = projection.masses
    if isinstance(masses, LineSplit):
        masses = masses.masses()
    return sobolev_line_cost(projection.coords, masses, p).sum(-1)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- public function


@distance(chunked=True, checks={"directions": check_directions})
def ts_sobolev(
    problem: Problem,
    /,
    *,
    n_trees: int | None = None,
    n_lines: int | None = None,
    delta: float = 2.0,
    p: float = 2,
    orthogonal: bool = False,
    sampling: str = "iid",
    directions: str = "uniform",
    trees: ConcurrentLines | None = None,
    center: Tensor | str | None = "mean",
    root_std: float = 0.1,
    **options: Unpack[ChunkedOptions],
) -> Evaluation:
    r"""Tree-sliced Sobolev IPM (TS-Sobolev) on Db-TSW's trees.

    References: [Tran2026b]_ and [Le2025]_.

    The trees, the projection and the distance-based split are Db-TSW's
    (:func:`tsw.db_tsw`, the same trees for the same seed). On each tree the cost is the
    regularised Sobolev IPM of order ``p``, which has the closed form

    .. math::

        \mathrm{TS\text{-}Sobolev}_p(\mu, \nu) = \Big(\frac1T \sum_{\tau=1}^T
        \sum_{e \in \mathcal L_\tau} \beta_e\, |\mu_\tau(\Gamma_e) -
        \nu_\tau(\Gamma_e)|^p\Big)^{1/p},
        \qquad \beta_e = \int_e \big(1 + \lambda(\Gamma(x))\big)^{1-p}\, dx,

    with :math:`\lambda(\Gamma(x))` the length of the tree below the point :math:`x`
    of the edge. On a line of a star that is the distance from :math:`x` out to the tip
    of its side, so :math:`\beta_e = ((1 + \omega_e + \ell_e)^{2-p} - (1 +
    \omega_e)^{2-p}) / (2 - p)` (:math:`\log(1 + \ell_e / (1 + \omega_e))` at ``p = 2``)
    for an edge of length :math:`\ell_e` with :math:`\omega_e` of tree below it
    (:func:`sobolev_weights`). The tree is the part of each line the projected
    measures span: out to the outermost atom of non-zero mass on each side (the
    authors' code takes every atom, all of positive mass there). At ``p = 1``,
    :math:`\beta_e = \ell_e` and the value is Db-TSW's tree :math:`W_1`
    (``ts_sobolev(..., p=1) == db_tsw(...)`` for the same trees). For ``p > 1`` it is
    neither :math:`W_p` nor the unweighted Sobolev transport of ``db_tsw(..., p=p)``:
    long branches weigh less, by :math:`(1 + \lambda)^{1-p}`.

    Parameters
    ----------
    X_s : Tensor of shape (N, d) or (B, N, d)
        Source support.
    X_t : Tensor of shape (M, d) or (B, M, d)
        Target support; ``M != N`` is allowed.
    a, b : Tensor of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative weights of equal totals; uniform by default.
    n_trees, n_lines : int, optional
        ``T`` and ``k``; 250 and 4 by default, inferred from ``trees`` if given.
    delta : float, default 2.0
        Inverse temperature of Db-TSW's split :math:`\mathrm{softmax}_l(-\delta\,
        d(y, l))`, a finite real number ``>= 0`` as for :func:`tsw.db_tsw`: ``0`` is the
        uniform split, larger values send more of a point's mass to its nearest lines.
        Not scale-free: scaling the data by ``c`` acts like ``delta * c``.
    p : float, default 2
        Order of the Sobolev IPM, ``>= 1`` (the authors' default is 2).
    orthogonal, sampling, directions, trees, center, root_std
        Db-TSW's trees, as in :func:`tsw.db_tsw` (``orthogonal=True``: TS-Sobolev on
        Db-TSW⊥'s trees); a ``seed`` gives the trees of :func:`tsw.db_tsw` for the same
        seed.

    Returns
    -------
    Tensor of shape () or (B,)
        Same dtype and device as ``X_s``.

    Raises
    ------
    TypeError, ValueError
        For malformed inputs, ``p < 1``, a ``delta`` that is negative or not finite,
        counts < 1, ``orthogonal`` with ``k > d``, an unknown ``sampling``,
        ``directions`` or ``center``, or trees that do not fit the data. Each message
        names the argument, the expected form and the value received.

    Notes
    -----
    The weights depend on the span of the projected measures (the tree is cut at the
    outermost atoms, as in the authors' code), so they change from one pair of measures
    to another, and with the same trees for three measures the triangle inequality can
    fail (the paper's metric property is for one fixed tree): on one line, ``mu =
    delta_1``, ``nu = delta_2`` and ``xi`` their mixture with mass ``1e-3`` moved to
    ``1e4`` give ``d(mu, nu) = 0.83`` and ``d(mu, xi) + d(xi, nu) = 0.012`` at ``p = 2``,
    since the far atom shrinks every weight of the pairs with ``xi``. The ``1`` in
    :math:`1 + \lambda` is a length: the value is not homogeneous in the data (as
    ``delta`` is not). The closed form runs through torch operators, one sort per line,
    O(Tkn log n) time and a few (T, k, n) tensors of memory for autograd. Chains are
    left out: the authors' chain variant measures :math:`\lambda` along each line
    alone, while the subtree below a point of a chain includes the lines attached
    beyond it.

    References
    ----------
    .. [Tran2026b] V.-H. Tran, T. Tran, T. Chu, D.-T. Pham, T.-K. Tran, T. Le, T. M.
       Nguyen. Tree-sliced Sobolev IPM. ICLR 2026.
    .. [Le2025] T. Le, T. Nguyen, H. Hino, K. Fukumizu. Scalable Sobolev IPM for
       probability measures on a graph. arXiv:2502.00737, 2025.

    Examples
    --------
    >>> import torch, tsw
    >>> g = torch.Generator().manual_seed(0)
    >>> X, Y = torch.randn(50, 3, generator=g), torch.randn(40, 3, generator=g) + 1
    >>> v1 = tsw.ts_sobolev(X, Y, n_trees=20, p=1, seed=0)
    >>> bool(torch.isclose(v1, tsw.db_tsw(X, Y, n_trees=20, seed=0)))
    True
    >>> bool(tsw.ts_sobolev(X, Y, n_trees=20, p=2, seed=0) > 0)
    True
    """
    trees = resolve_db_trees(
        problem,
        trees,
        n_trees=n_trees,
        n_lines=n_lines,
        orthogonal=orthogonal,
        center=center,
        root_std=root_std,
        sampling=sampling,
        directions=directions,
    )
    project = partial(db_projection, delta=delta)
    if problem.p == 1.0:  # beta_e = l_e: Db-TSW's tree W1, by the shared closed form
        return evaluate(problem, project, trees, front=centered)
    return evaluate(problem, project, trees, sobolev_cost, front=centered)
