r"""SpatialTSW: Db-TSW on the image of the supports by an injective map (ICML 2025)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from torch import Tensor

from tsw.core._api import distance
from tsw.core._driver import evaluate
from tsw.core._output import Evaluation
from tsw.core._problem import Problem
from tsw.core.trees import ConcurrentLines
from tsw.euclidean._db_tsw import db_projection, resolve_db_trees
from tsw.euclidean._lines import centered
from tsw.euclidean.mappings import map_measures, resolve_mapping

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from tsw.core._api import ChunkedOptions

__all__ = ["spatial_tsw"]


@distance(chunked=True)
def spatial_tsw(
    problem: Problem,
    /,
    *,
    mapping: str | Callable[[Tensor], Tensor] = "pow",
    degree: int | None = None,
    beta: float | None = None,
    n_trees: int | None = None,
    n_lines: int | None = None,
    delta: float = 2.0,
    p: float = 1,
    orthogonal: bool = False,
    sampling: str = "iid",
    trees: ConcurrentLines | None = None,
    center: Tensor | str | None = "mean",
    root_std: float = 0.1,
    **options: Unpack[ChunkedOptions],
) -> Evaluation:
    r"""Spatial tree-sliced Wasserstein distance (SpatialTSW).

    References: [Tran2025c]_ and [Tran2025b]_.

    The spatial Radon transform on systems of lines (SRTSL) is the linear one applied
    to :math:`h(y)` for an injective, continuous
    :math:`h: \mathbb R^d \to \mathbb R^{d_\theta}`:

    .. math::

        \mathrm{SpatialTSW}_p(\mu, \nu) = \mathrm{DbTSW}_p(h_\#\mu, h_\#\nu),

    computed by :func:`tsw.db_tsw` on the mapped supports (same weights). Trees live
    in :math:`\mathbb R^{d_\theta}`: sampled there, rooted by default around the
    detached weighted mean of the **mapped** points; explicit ``trees`` and
    ``center`` must have dimension :math:`d_\theta`. With an E(:math:`d_\theta`)-invariant
    split (Db-TSW's) the transform is injective and, for ``p = 1``, the value is a
    metric on measures whenever ``h`` is injective (Tran et al. 2025, Thm 4.3, 5.3).
    ``p`` has the meaning of :func:`tsw.db_tsw` (``p > 1``: Sobolev transport).

    Parameters
    ----------
    X_s : Tensor of shape (N, d) or (B, N, d)
    X_t : Tensor of shape (M, d) or (B, M, d)
    a, b : Tensor of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative weights of equal totals; uniform by default.
    mapping : {"pow", "poly"} or callable, default "pow"
        ``"pow"``: :math:`h(y) = y + \beta y^{\circ m}` coordinate-wise
        (:math:`d_\theta = d`); ``"poly"``: all monomials of total degree ``m``
        (:math:`d_\theta = \binom{d+m-1}{m}`, see :mod:`tsw.mappings`). Or any
        callable, e.g. a ``torch.nn.Module`` (gradients reach its parameters), called
        on ``X_s`` and ``X_t`` as given, (N, d) or (B, N, d), and returning
        (N, d_theta) or (B, N, d_theta). A callable must be injective for the value to
        be a metric; that is not checked.
    degree : int, optional
        ``m``, odd, default 3 (built-in maps only).
    beta : float, optional
        :math:`\beta \ge 0`, default 1.0 (``"pow"`` only).
    n_trees, n_lines, delta, p, orthogonal, sampling, trees, center, root_std
        As in :func:`tsw.db_tsw`, in dimension :math:`d_\theta`.

    Returns
    -------
    Tensor of shape () or (B,)

    Raises
    ------
    TypeError, ValueError
        As :func:`tsw.db_tsw`, plus: an unknown mapping name or a non-callable, an even
        or non-positive ``degree``, ``beta < 0``, options given for a map that does
        not take them, a mapping output of the wrong type, dtype, device or shape,
        non-finite mapped points (``validate``), trees not in dimension
        :math:`d_\theta`.

    Notes
    -----
    Invariances: the built-in maps commute with permutations and sign flips of the
    coordinates (``"pow"``: :math:`h(PSy) = PS\,h(y)`; ``"poly"``: they induce a signed
    permutation of the monomials), so the value is unchanged when the data and the
    trees are moved by these maps (tested). They do **not** commute with rotations
    or translations: unlike Db-TSW, SpatialTSW is neither rigid-motion nor
    translation invariant, and not homogeneous (``"poly"`` scales by
    :math:`c^m` in :math:`d_\theta`). Cost: that of :func:`tsw.db_tsw` in
    dimension :math:`d_\theta`, plus the map (O(n d_theta m) for ``"poly"``).

    References
    ----------
    .. [Tran2025c] T. Tran et al. Tree-sliced Wasserstein distance with nonlinear
       projection. ICML 2025 (arXiv:2505.00968).
    .. [Tran2025b] H. V. Tran et al. Distance-based tree-sliced Wasserstein distance.
       ICLR 2025.

    Examples
    --------
    >>> import torch, tsw
    >>> g = torch.Generator().manual_seed(0)
    >>> X, Y = torch.randn(50, 3, generator=g), torch.randn(40, 3, generator=g) + 1
    >>> v = tsw.spatial_tsw(X, Y, mapping="poly", degree=3, n_trees=100, seed=0)
    >>> bool(v > 0)
    True
    >>> # a learnable map h(y) = (y, phi(y)), injective for any phi
    >>> phi = torch.nn.Linear(3, 2)
    >>> h = lambda Z: torch.cat([Z, torch.tanh(phi(Z))], dim=-1)
    >>> tsw.spatial_tsw(X, Y, mapping=h, n_trees=100, seed=0).backward()
    >>> phi.weight.grad.shape
    torch.Size([2, 3])
    """
    h = resolve_mapping(mapping, degree, beta)
    measures = problem.measures
    mapped = map_measures(measures, h, problem.validate)
    d_theta = mapped.X_s.shape[-1]
    if isinstance(trees, ConcurrentLines) and trees.dim != d_theta:
        raise ValueError(
            f"trees must live in the mapped dimension d_theta={d_theta} (the data have "
            f"d={measures.X_s.shape[-1]}); got trees of dimension {trees.dim}"
        )
    problem = problem.replace(measures=mapped)
    trees = resolve_db_trees(
        problem,
        trees,
        n_trees=n_trees,
        n_lines=n_lines,
        orthogonal=orthogonal,
        center=center,
        root_std=root_std,
        sampling=sampling,
    )
    return evaluate(problem, partial(db_projection, delta=delta), trees, front=centered)
