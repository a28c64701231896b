"""Db-TSW: distance-based tree-sliced Wasserstein (Tran et al., ICLR 2025)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from torch import Tensor

from tsw.core._api import distance
from tsw.core._driver import evaluate
from tsw.core._output import Evaluation
from tsw.core._problem import Problem
from tsw.core._projection import STAR, Projection, signed_masses
from tsw.core._slices import path_directions, resolve_trees
from tsw.core._validation import Measures, check_bool, check_choice
from tsw.core.splits import uniform_split
from tsw.core.trees import ConcurrentLines, sample_concurrent_lines
from tsw.euclidean._lines import centered, line_split, offsets, project

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from tsw.core._api import ChunkedOptions

__all__ = ["db_tsw"]

#: how the line directions are drawn
DIRECTIONS = ("uniform", "paths")


def check_directions(value: object, name: str = "directions") -> str:
    """Return ``value`` if it is one of :data:`DIRECTIONS`, else raise naming them."""
    return check_choice(value, name, DIRECTIONS)


@distance(chunked=True, checks={"directions": check_directions})
def db_tsw(
    problem: Problem,
    /,
    *,
    n_trees: int | None = None,
    n_lines: int | None = None,
    delta: float = 2.0,
    p: float = 1,
    orthogonal: bool = False,
    sampling: str = "iid",
    directions: str = "uniform",
    trees: ConcurrentLines | None = None,
    center: Tensor | str | None = "mean",
    root_std: float = 0.1,
    **options: Unpack[ChunkedOptions],
) -> Evaluation:
    r"""Distance-based tree-sliced Wasserstein distance (Db-TSW, Db-TSW⊥).

    References: [Tran2025b]_.

    Each of ``T`` random trees is a star of ``k`` concurrent lines through a root
    ``x``. A point ``y`` of weight ``a_y`` puts mass ``a_y alpha_l(y)`` on line ``l`` at
    coordinate ``<y - x, theta_l>``, with the E(d)-invariant split

    .. math::

        \alpha_l(y) = \mathrm{softmax}_l\big(-\delta\, \|(y - x) -
            \langle y - x, \theta_l\rangle \theta_l\|\big),

    and the value is

    .. math::

        \mathrm{DbTSW}_p(\mu, \nu) = \Big(\frac1T \sum_{\tau=1}^T \sum_{e \in
        \mathcal L_\tau} w_e\, |\mu_\tau(\Gamma_e) - \nu_\tau(\Gamma_e)|^p\Big)^{1/p}.

    For ``p = 1`` each tree term is the exact :math:`W_1` for the tree metric of the
    star (a metric on measures, Tran et al. 2025). For ``p > 1`` it is the
    tree-sliced Sobolev transport :math:`ST_p` (Le et al. 2022), a metric too, but
    **not** a Wasserstein-:math:`p` distance; the official code's default is
    ``p = 2``, the paper's definition ``p = 1`` (the default here).

    Parameters
    ----------
    X_s : Tensor of shape (N, d) or (B, N, d)
        Source support.
    X_t : Tensor of shape (M, d) or (B, M, d)
        Target support; ``M != N`` is allowed.
    a, b : Tensor of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative weights of equal totals; uniform ``1/N``, ``1/M`` by default.
    n_trees, n_lines : int, optional
        ``T`` and ``k``; 250 and 4 by default, inferred from ``trees`` if given.
    delta : float, default 2.0
        Inverse temperature of the split; ``0`` is the uniform split (TSW-SL
        baseline of the later papers). Not scale-free: scaling the data by ``c``
        acts like ``delta * c``.
    p : float, default 1
        Exponent (see the Notes).
    orthogonal : bool, default False
        Db-TSW⊥: orthonormal directions inside each tree (needs ``k <= d``).
    sampling : {"iid", "orthogonal", "qmc"}, default "iid"
        How the ``T`` trees are spread (:func:`tsw.sample_concurrent_lines`): i.i.d.,
        stratified across trees in orthonormal frames, or randomised quasi-Monte Carlo.
        Every tree keeps its law, so the value stays an unbiased estimate of the same
        distance (of its ``p``-th power); only its variance changes
        (``python -m benchmarks.variance``). ``log["std_error"]`` assumes independent
        trees: it overstates the error of ``"orthogonal"`` and ``"qmc"``.
    directions : {"uniform", "paths"}, default "uniform"
        ``"paths"``: FW-TSW*'s data-driven directions (Tran et al., ICLR 2026), every
        line along :math:`x_i - y_j` for a random pair of atoms, ``i`` drawn from ``a``
        and ``j`` from ``b`` (:func:`tsw.core._slices.path_directions`; detached, one
        set per batch item). The lines then depend on the measures: the value is
        **not** an estimate of the ``"uniform"`` Db-TSW, nor known to be a metric.
        The roots follow ``center`` and ``sampling`` as usual; needs ``orthogonal=False``.
        This is the ``random_path`` mode of the authors' earlier published tree code
        (PartialTSW repository), without its optional power-spherical perturbation; the
        FW-TSW paper's own text was not available to check its exact construction.
    trees : ConcurrentLines, optional
        Explicit trees; overrides the sampling arguments.
    center : "mean", "median" or Tensor of shape (d,) or (B, d), default "mean"
        Centre of the sampled roots: the detached weighted mean of both measures (per
        batch item), their detached weighted geometric median (``"median"``, found by
        Weiszfeld's iterations: FW-TSW, Tran et al., ICLR 2026), or a given point.
    root_std : float, default 0.1
        Standard deviation of the roots around the centre (official code's value).
        In the units of the data, not scaled with them: for data at a scale far below
        1, pass a proportional value (with ``validate``, a ``UserWarning`` says when
        float rounding of the line coordinates hides the data,
        :func:`tsw.core._slices.check_spread`).

    Returns
    -------
    Tensor of shape () or (B,)
        Same dtype and device as ``X_s``.

    Raises
    ------
    TypeError, ValueError
        For malformed inputs (see :func:`tsw.core._validation.check_measures`), ``p < 1``,
        ``delta < 0``, counts < 1, ``orthogonal`` with ``k > d``, an unknown ``sampling``
        or ``center``, or trees that do not fit the data.

    Notes
    -----
    In a batch, sampled trees share their directions and root offsets; each item's
    roots are translated to its own centre, so a batched call equals a loop of
    unbatched calls with the same seed. Cost: one (n_i, d) x (d, Tk + T) product per
    measure (the line directions and the roots), one sort of (T, k, n) coordinates
    and O(Tkn) work; memory O(Tkn + nd + Tkd) (for ``d <= 3`` the distances to the lines
    are the norms of the ``d - 1`` or 3 coordinates of the cross products
    ``theta_l x (y - x)``, taken in the same product: exact float32 distances near the
    lines, with no cancellation).
    Above ``d = 3`` the distance of a point lying within about ``sqrt(eps) |y - x|`` of a
    line is resolved only to that accuracy (``eps`` the machine epsilon), which moves the
    value by at most ``delta`` times that much times the point's mass: measured float32
    errors against float64 stay below 1e-5 for values and gradients
    (``tests/test_precision.py``). The value is E(d)-invariant for fixed trees moved with
    the data, and invariant in law since the centre is equivariant.

    References
    ----------
    .. [Tran2025b] H. V. Tran, M.-K. Nguyen-Nhat, H. T. Pham, T. Chu, T. Le, T. M.
       Nguyen. Distance-based tree-sliced Wasserstein distance. ICLR 2025.

    Examples
    --------
    >>> import torch, tsw
    >>> g = torch.Generator().manual_seed(0)
    >>> X, Y = torch.randn(50, 3, generator=g), torch.randn(40, 3, generator=g) + 1
    >>> value = tsw.db_tsw(X, Y, n_trees=100, n_lines=4, seed=0)
    >>> value.shape, bool(value > 0)
    (torch.Size([]), True)
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
    return evaluate(problem, partial(db_projection, delta=delta), trees, front=centered)


def resolve_db_trees(
    problem: Problem,
    trees: object,
    *,
    n_trees: int | None,
    n_lines: int | None,
    orthogonal: bool,
    center: Tensor | str | None,
    root_std: float,
    sampling: str = "iid",
    directions: str = "uniform",
) -> ConcurrentLines:
    """Explicit concurrent-line trees checked against the data, or Db-TSW's sampled ones.

    Shared by :func:`db_tsw`, :func:`tsw.spatial_tsw` and :func:`tsw.partial_tsw` (the
    same trees for the same seed). ``directions="paths"`` replaces the sampled
    directions by :func:`~tsw.core._slices.path_directions` (drawn after the trees).
    """
    orthogonal = check_bool(orthogonal, "orthogonal")
    directions = check_directions(directions)
    if directions == "paths" and orthogonal:
        raise ValueError(
            'directions="paths" draws each line independently; it needs orthogonal=False, '
            "got orthogonal=True"
        )
    drawn = resolve_trees(
        problem.measures,
        trees,
        (ConcurrentLines,),
        n_trees,
        n_lines,
        sampler=partial(sample_concurrent_lines, orthogonal=orthogonal),
        rng=problem.rng,
        center=center,
        root_std=root_std,
        sampling=sampling,
        validate=problem.validate,
    )
    if directions == "uniform" or trees is not None:
        return drawn
    theta = path_directions(problem.measures, drawn.n_trees, drawn.n_lines, problem.rng)
    theta = theta if problem.measures.batched else theta[0]
    return ConcurrentLines(drawn.roots, theta, validate=False)


def db_projection(measures: Measures, trees: ConcurrentLines, delta: float) -> Projection:
    r"""Db-TSW's projection: line coordinates and the distance-based split of the masses.

    ``softmax_l(-delta * dist(y, line l))`` (uniform for ``delta = 0``, with no distance
    computed). The measures' totals need not agree: an imbalance is absorbed at each
    tree's root (as :func:`tsw.partial_tsw` uses). For ``delta != 0`` the masses are
    left to the closed form to split (a :class:`~tsw.core.splits.LineSplit`).
    """
    w = signed_masses(measures)
    if delta == 0:
        coords, _ = project(measures, trees, distances=False)
        return Projection(coords, uniform_split(trees.n_lines, coords) * w[:, None, None, :], STAR)
    off = offsets(measures, trees)
    return Projection(off.coords, line_split(w, delta, off), STAR)
