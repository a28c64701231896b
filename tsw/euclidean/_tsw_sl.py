"""TSW-SL: tree-sliced Wasserstein on systems of lines (Tran et al., ICML 2025)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from torch import Tensor

from tsw.core._api import distance
from tsw.core._driver import evaluate
from tsw.core._output import Evaluation
from tsw.core._problem import Problem
from tsw.core._projection import CHAIN, STAR, Projection, signed_masses
from tsw.core._slices import resolve_trees, with_batch_axis
from tsw.core._validation import Measures, check_choice
from tsw.core.splits import check_alpha, constant_split, uniform_split
from tsw.core.trees import ChainLines, ConcurrentLines, sample_chain_lines, sample_concurrent_lines
from tsw.euclidean._lines import centered, project

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from tsw.core._api import ChunkedOptions

__all__ = ["tsw_sl"]

#: the structures of sampled trees
TREES = ("chain", "concurrent")


def check_tree(value: object, name: str = "tree") -> str:
    """Return ``value`` if it is one of :data:`TREES`, else raise naming them."""
    return check_choice(value, name, TREES)


@distance(chunked=True, checks={"tree": check_tree})
def tsw_sl(
    problem: Problem,
    /,
    *,
    n_trees: int | None = None,
    n_lines: int | None = None,
    p: float = 1,
    tree: str = "chain",
    alpha: Tensor | None = None,
    trees: ChainLines | ConcurrentLines | None = None,
    center: Tensor | str | None = "mean",
    sampling: str = "iid",
    root_std: float = 0.1,
    source_range: float = 1.0,
    **options: Unpack[ChunkedOptions],
) -> Evaluation:
    r"""Tree-sliced Wasserstein distance on systems of lines (TSW-SL).

    References: [Tran2025a]_.

    A point ``y`` of weight ``a_y`` puts mass ``a_y alpha_l`` on line ``l`` of each tree,
    at coordinate ``<y - x_l, theta_l>``, where ``alpha`` is a constant vector of the
    simplex (uniform by default). The value is

    .. math::

        \mathrm{TSW\text{-}SL}_p(\mu, \nu) = \Big(\frac1T \sum_{\tau=1}^T \sum_{e \in
        \mathcal L_\tau} w_e\, |\mu_\tau(\Gamma_e) - \nu_\tau(\Gamma_e)|^p\Big)^{1/p}.

    ``tree="chain"`` (default) uses the chain-like tree systems of the paper
    (line ``i`` starts on line ``i-1``); ``tree="concurrent"`` uses concurrent lines,
    which is what the "TSW-SL" rows of the later papers (Db-TSW, STSW, PartialTSW)
    computed, with a uniform split.

    **Reduction.** Because the split does not depend on the point, every line carries
    the same mass ``alpha_l`` from both measures: no mass crosses a root, the tree
    structure and the sources play no role, and for ``p = 1``

    .. math::

        \mathrm{TSW\text{-}SL}_1 = \frac1T \sum_\tau \sum_l \alpha_{\tau l}\,
        W_1(\theta_{\tau l}\#\mu, \theta_{\tau l}\#\nu),

    an :math:`\alpha`-weighted sliced :math:`W_1` over the tree's directions. For
    ``p > 1`` the edges carry :math:`\alpha_l`-scaled masses, giving
    :math:`\sum_l \alpha_l^p ST_p^p` per tree: a tree-sliced Sobolev transport, not a
    Wasserstein-:math:`p` distance. Gains of TSW-SL over SW at equal line counts must
    be read with this in mind; only point-dependent splits (:func:`tsw.db_tsw`) use
    the tree.

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
    p : float, default 1
        Exponent (see the Notes).
    tree : {"chain", "concurrent"}, default "chain"
        Structure of sampled trees; ignored when ``trees`` is given (its type decides).
    alpha : Tensor of shape (k,) or (T, k), optional
        Constant splitting vector(s) on the simplex; uniform ``1/k`` by default.
        Differentiable (a trainable split).
    trees : ChainLines or ConcurrentLines, optional
        Explicit trees.
    center : "mean", "median" or Tensor of shape (d,) or (B, d), default "mean"
        Centre of the sampled roots, as in :func:`tsw.db_tsw` (``"median"``: the
        geometric median of both measures).
    sampling : {"iid", "orthogonal", "qmc"}, default "iid"
        How the trees' directions and roots are spread, as in :func:`tsw.db_tsw`
        (unbiased in every mode; chain attachments stay i.i.d.).
    root_std : float, default 0.1
        Standard deviation of the roots around the centre.
        In the units of the data, not scaled with them: for data at a scale far below
        1, pass a proportional value (with ``validate``, a ``UserWarning`` says when
        float rounding of the line coordinates hides the data,
        :func:`tsw.core._slices.check_spread`).
    source_range : float, default 1.0
        Chains only: attachment coordinates are uniform in ``[-source_range,
        source_range]`` (paper's Algorithm 1); in the units of the data, as
        ``root_std``.

    Returns
    -------
    Tensor of shape () or (B,)
        Same dtype and device as ``X_s``.

    Raises
    ------
    TypeError, ValueError
        For malformed inputs, ``p < 1``, a bad ``tree`` option, ``alpha`` off the
        simplex or of the wrong shape, counts < 1.

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
    >>> bool(tsw.tsw_sl(X, Y, n_trees=25, n_lines=4, seed=0) > 0)
    True
    """
    sampler: Callable[..., ChainLines | ConcurrentLines] = (
        partial(sample_chain_lines, source_range=source_range)
        if tree == "chain"
        else sample_concurrent_lines
    )
    resolved = resolve_trees(
        problem.measures,
        trees,
        (ChainLines, ConcurrentLines),
        n_trees,
        n_lines,
        sampler=sampler,
        rng=problem.rng,
        center=center,
        root_std=root_std,
        sampling=sampling,
        validate=problem.validate,
    )
    X = problem.measures.X_s
    if alpha is None:
        split = uniform_split(resolved.n_lines, X)
    else:
        T, k = resolved.n_trees, resolved.n_lines
        split = constant_split(check_alpha(alpha, T, k, X, problem.validate))
    projection = partial(constant_split_projection, split=split)
    return evaluate(problem, projection, resolved, front=centered)


def constant_split_projection(
    measures: Measures, trees: ChainLines | ConcurrentLines, split: Tensor
) -> Projection:
    """Line coordinates, and the masses split by the constant ``split`` (..., k, 1)."""
    coords, _ = project(measures, trees, distances=False)
    masses = split * signed_masses(measures)[:, None, None, :]
    if isinstance(trees, ChainLines):
        return Projection(coords, masses, CHAIN, with_batch_axis(trees.attachments, 2))
    return Projection(coords, masses, STAR)
