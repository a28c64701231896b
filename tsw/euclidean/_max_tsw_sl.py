r"""MaxTSW-SL: TSW-SL maximised over its tree systems (Tran et al., ICML 2025, App. C).

Like :func:`tsw.max_sw`, the method uses the driver for its value and brings an ascent
that no projection describes: :func:`ascend` moves the trees' directions uphill from
TSW-SL's random trees, then the value is TSW-SL's on the final trees
(:func:`tsw.euclidean._tsw_sl.constant_split_projection` through
:func:`~tsw.core._driver.evaluate`).

**Why only the directions move.** The paper's ascent (its Algorithm 3) updates the root,
the chain's attachment coordinates and the directions. With a constant split every line
carries the same mass from both measures, so no mass crosses a root or an attachment,
and each line's cost is that of a balanced measure on a line, unchanged by where its
source sits: the gradient with respect to the roots and attachments is identically
zero. The ascent keeps them where they were drawn and moves the directions only.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, cast

import torch
from torch import Tensor

from tsw.core._api import distance
from tsw.core._ascent import detached, sphere_ascent
from tsw.core._driver import evaluate
from tsw.core._projection import closed_form
from tsw.core._ranges import check_range
from tsw.core._slices import resolve_trees
from tsw.core._twice import first_order_only
from tsw.core._validation import Measures
from tsw.core.splits import check_alpha, constant_split, uniform_split
from tsw.core.trees import ChainLines, ConcurrentLines, sample_chain_lines, sample_concurrent_lines
from tsw.euclidean._lines import centered
from tsw.euclidean._tsw_sl import check_tree, constant_split_projection

if TYPE_CHECKING:
    from collections.abc import Callable

    from typing_extensions import Unpack

    from tsw.core._api import SharedOptions
    from tsw.core._output import Evaluation
    from tsw.core._problem import Problem

__all__ = ["ascend", "max_tsw_sl"]

Trees = ChainLines | ConcurrentLines


# --------------------------------------------------------------------------- mathematics


def _with_directions(trees: Trees, directions: Tensor) -> Trees:
    """Return the trees with new directions, the same roots and chain attachments."""
    if isinstance(trees, ConcurrentLines):
        return ConcurrentLines(trees.roots, directions, validate=False)
    t = trees.attachments  # (..., k): where line i starts on line i - 1
    steps = t[..., 1:, None] * directions[..., :-1, :]  # (..., k - 1, d)
    root = trees.sources[..., :1, :]
    sources = torch.cat([root, root + steps.cumsum(-2)], dim=-2)
    return ChainLines(sources, directions, validate=False)


def _batched(trees: Trees, B: int) -> Trees:
    """Return the trees with a batch axis of size ``B`` (each item ascends its own copy)."""
    if trees.batch_size is not None:
        return trees
    dirs = trees.directions.expand(B, *trees.directions.shape)
    if isinstance(trees, ConcurrentLines):
        return ConcurrentLines(trees.roots.expand(B, *trees.roots.shape), dirs, validate=False)
    return ChainLines(trees.sources.expand(B, *trees.sources.shape), dirs, validate=False)


def ascend(
    measures: Measures, trees: Trees, split: Tensor, p: float, *, n_iter: int, lr: float
) -> Trees:
    r"""Move every tree's directions uphill for its TSW-SL cost; return the final trees.

    Each tree ascends on its own, by :func:`~tsw.core._ascent.sphere_ascent` (every line
    a geodesic step along its tangent gradient, the tree keeping the step only if its
    cost increases, as :func:`tsw.max_sw`'s ascent). The measures are read detached;
    batched measures give batched trees (one ascent per item). ``split`` (..., k, 1) is
    the constant split.
    """
    measures = detached(measures)
    anchor = _batched(trees, measures.X_s.shape[0])

    def cost(directions: Tensor) -> Tensor:  # (B, T, k, d) -> (B, T)
        moved = _with_directions(anchor, directions)
        return closed_form(constant_split_projection(measures, moved, split), p)

    theta = anchor.directions.detach().clone()
    with torch.no_grad():
        best = cost(theta)
    theta = sphere_ascent(cost, theta, best, n_iter=n_iter, lr=lr, group_dims=2)
    final = _with_directions(anchor, theta)
    if measures.batched or trees.batch_size is not None:
        return final
    if isinstance(final, ConcurrentLines):  # unbatched measures: unbatched trees
        return ConcurrentLines(final.roots[0], final.directions[0], validate=False)
    return ChainLines(final.sources[0], final.directions[0], validate=False)


# --------------------------------------------------------------------------- public function


@distance(checks={"tree": check_tree})
def max_tsw_sl(
    problem: Problem,
    /,
    *,
    n_trees: int | None = None,
    n_lines: int | None = None,
    p: float = 1,
    tree: str = "chain",
    alpha: Tensor | None = None,
    n_iter: int = 100,
    lr: float = 1e-4,
    trees: ChainLines | ConcurrentLines | None = None,
    center: Tensor | str | None = "mean",
    root_std: float = 0.1,
    source_range: float = 1.0,
    **options: Unpack[SharedOptions],
) -> Evaluation:
    r"""Max tree-sliced Wasserstein on systems of lines (MaxTSW-SL), by ascent.

    References: [Tran2025a]_ (its Appendix C, Algorithm 3).

    .. math::

        \mathrm{MaxTSW\text{-}SL}_p(\mu, \nu) = \max_{\mathcal L} \Big(\sum_{e \in
        \mathcal L} w_e\, |\mu_{\mathcal L}(\Gamma_e) - \nu_{\mathcal L}(\Gamma_e)|^p
        \Big)^{1/p},

    the TSW-SL cost of :func:`tsw.tsw_sl` maximised over the tree system. The trees
    start as TSW-SL's random trees (the same draws for the same seed); their directions
    then take ``n_iter`` monotone steps of Riemannian ascent (:func:`ascend`), each tree
    on its own, and the value is TSW-SL's on the final trees, averaged over the
    ``n_trees`` trees (one tree by default: the maximum over one tree system). Its
    gradient with respect to the supports is the gradient at the final trees (Danskin).
    The roots and chain attachments stay as drawn: with a constant split the cost does
    not depend on them (see the module notes), so the paper's ascent on them is a
    no-op. With the uniform split and ``p = 1`` the cost of a tree is the mean of its
    lines' :math:`W_1`, so the maximum is max-:math:`SW_1`, reached with every line
    along the best direction.

    Parameters
    ----------
    X_s, X_t, a, b
        As in :func:`tsw.tsw_sl`.
    n_trees, n_lines : int, default 1 and 4
        ``T`` ascents and ``k`` lines per tree; inferred from ``trees`` if given.
    p : float, default 1
        Exponent, as in :func:`tsw.tsw_sl`.
    tree : {"chain", "concurrent"}, default "chain"
        Structure of the starting trees; ignored when ``trees`` is given.
    alpha : Tensor of shape (k,) or (T, k), optional
        Constant split; uniform by default.
    n_iter : int, default 100
        Ascent steps (0: TSW-SL on the drawn trees).
    lr : float, default 1e-4
        The first step's angle in radians (the paper's inner learning rate); later
        steps adapt.
    trees : ChainLines or ConcurrentLines, optional
        The starting trees (not the final ones: those are in ``log["trees"]``).
    center, root_std, source_range
        The starting trees' roots and chain attachments, as in :func:`tsw.tsw_sl`; a
        ``seed`` gives the starting trees of :func:`tsw.tsw_sl` for the same seed.

    Returns
    -------
    Tensor of shape () or (B,)
        A lower bound of the true maximum (a non-convex ascent), at least TSW-SL on
        the starting trees. ``log["trees"]`` holds the final trees (batched trees for
        batched measures: one ascent per item).

    Raises
    ------
    TypeError, ValueError
        For malformed inputs, ``p < 1``, a bad ``tree``, ``alpha`` off the simplex,
        counts < 1, ``n_iter < 0`` or ``lr < 0``.

    Notes
    -----
    The gradient is exact at the final trees, but there is no second derivative: the
    trees are the ascent's maximiser, held fixed, so a gradient with
    ``create_graph=True`` (a Hessian-vector product, a gradient penalty) raises, as
    for :func:`tsw.max_sw`. Cost: ``n_iter + 1`` evaluations of TSW-SL's cost and
    ``n_iter`` of its gradient with respect to the directions.

    References
    ----------
    .. [Tran2025a] H. V. Tran, H. T. Pham, T. Tran, T. M. Nguyen, T. Chu, T. Le,
       T. M. Nguyen. Tree-sliced Wasserstein distance: a geometric perspective.
       ICML 2025 (arXiv:2406.13725).

    Examples
    --------
    >>> import torch, tsw
    >>> g = torch.Generator().manual_seed(0)
    >>> X, Y = torch.randn(50, 2, generator=g), torch.randn(60, 2, generator=g) + 1
    >>> v, info = tsw.max_tsw_sl(X, Y, n_lines=3, seed=0, log=True)
    >>> start = tsw.max_tsw_sl(X, Y, n_lines=3, n_iter=0, seed=0)
    >>> bool(v >= start), info["trees"].n_lines
    (True, 3)
    """
    sampler: Callable[..., Trees] = (
        partial(sample_chain_lines, source_range=source_range)
        if tree == "chain"
        else sample_concurrent_lines
    )
    start = cast(
        Trees,
        resolve_trees(
            problem.measures,
            trees,
            (ChainLines, ConcurrentLines),
            n_trees,
            n_lines,
            sampler=sampler,
            rng=problem.rng,
            center=center,
            root_std=root_std,
            defaults=(1, 4),
            validate=problem.validate,
        ),
    )
    X = problem.measures.X_s
    T, k = start.n_trees, start.n_lines
    split = (
        uniform_split(k, X)
        if alpha is None
        else constant_split(check_alpha(alpha, T, k, X, problem.validate))
    )
    if problem.validate:
        check_range(problem.measures)
    with torch.inference_mode(False):  # the ascent differentiates, in any mode
        final = ascend(problem.measures, start, split, problem.p, n_iter=n_iter, lr=lr)
    project = partial(constant_split_projection, split=split)
    # the range was checked before the ascent
    value = evaluate(problem.replace(validate=False), project, final, front=centered)
    why = "its trees are the ascent's maximiser, held fixed (Danskin's theorem)"
    return value._replace(per_slice=first_order_only(value.per_slice, "max_tsw_sl", why))
