r"""PartialTSW: tree-sliced partial transport between measures of unequal mass.

Tran et al., NeurIPS 2025 ("tree-sliced entropy partial transport"), on the trees and the
split of Db-TSW. The whole method is one observation about the closed form on a star of
concurrent lines: :func:`tsw.line_system_cost` sums, over the edges,
the signed mass *beyond* each edge seen from the root, so a mismatch of total masses is
absorbed at the root. That is balanced transport after the missing mass is put at the
root, see :func:`partial_tsw` for the characterisation and its relation to the papers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import Tensor

from tsw.core._api import distance
from tsw.core._driver import evaluate
from tsw.core._output import Evaluation
from tsw.core._problem import Problem
from tsw.core._projection import Projection, closed_form
from tsw.core._validation import Measures, check_mass
from tsw.core.trees import ConcurrentLines
from tsw.euclidean._db_tsw import db_projection, resolve_db_trees
from tsw.euclidean._lines import centered

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from tsw.core._api import ChunkedOptions

__all__ = ["partial_tsw"]


@distance(chunked=True, balanced=False)
def partial_tsw(
    problem: Problem,
    /,
    *,
    mass_s: float | Tensor = 1.0,
    mass_t: float | Tensor = 1.0,
    n_trees: int | None = None,
    n_lines: int | None = None,
    delta: float = 2.0,
    p: float = 1,
    price: float = 0.0,
    orthogonal: bool = False,
    sampling: str = "iid",
    trees: ConcurrentLines | None = None,
    center: Tensor | str | None = "mean",
    root_std: float = 0.1,
    **options: Unpack[ChunkedOptions],
) -> Evaluation:
    r"""Partial tree-sliced Wasserstein distance (PartialTSW) for unequal total masses.

    References: [Tran2025c]_, [Sato2020]_, [Le2021]_ and [Le2022]_.

    The source is :math:`\mu = m_s \sum_i \hat a_i \delta_{x_i}` and the target
    :math:`\nu = m_t \sum_j \hat b_j \delta_{y_j}`, with total masses :math:`m_s`
    (``mass_s``) and :math:`m_t` (``mass_t``) and shapes :math:`\hat a = a / \sum_i a_i`,
    :math:`\hat b = b / \sum_j b_j`. Both are projected on ``T`` random Db-TSW trees
    (``k`` concurrent lines through a root :math:`r`, distance-based split, exactly the
    trees of :func:`tsw.db_tsw` for the same seed) and

    .. math::

        \mathrm{PartialTSW}_p(\mu, \nu) = \Big(\frac1T \sum_{\tau=1}^T \sum_{e \in
        \mathcal L_\tau} w_e\, |\mu_\tau(\Gamma_e) - \nu_\tau(\Gamma_e)|^p
        + \lambda\, |m_s - m_t|^p\Big)^{1/p},

    where :math:`\Gamma_e` is the part of the tree beyond edge :math:`e` seen from the
    root and :math:`\lambda` is ``price`` (0 by default: the value of the official code).

    **What one tree computes** (``p = 1``). The tree sum is the balanced tree
    :math:`W_1` after the mass difference is put at the root on the lighter side:

    .. math::

        \sum_e w_e |\mu_\tau(\Gamma_e) - \nu_\tau(\Gamma_e)|
        = W_{d_T,1}\big(\mu_\tau + (m_t - m_s)_+ \delta_r,\;
                        \nu_\tau + (m_s - m_t)_+ \delta_r\big).

    Equivalently it is an unbalanced transport in which creating or destroying a unit
    of mass at :math:`y` costs :math:`d_T(y, r)`: the generalised Kantorovich-Rubinstein
    (GKR) distance of Sato et al. (2020) with the creation and destruction prices
    :math:`\lambda_c(y) = \lambda_d(y) = d_T(y, r) + \lambda`. With ``price`` :math:`\lambda
    > 0` the tree is extended by one point :math:`\hat s` hanging from the root by an
    edge of length :math:`\lambda`, which receives the difference (the construction of
    Caffarelli-McCann used by Le & Nguyen 2021 and by the paper's App. B); the extra
    edge contributes :math:`\lambda |m_s - m_t|`. Some optimal plan creates or destroys
    only the excess :math:`|m_s - m_t|` and transports all of the lighter measure
    (tests/test_partial.py checks the value against an LP that may create and destroy
    anywhere at these prices).

    **Relation to the entropy partial transport of the paper.** The paper defines
    PartialTSW as the mean over trees of the closed form :math:`d_a` of the
    a-regularised entropy partial transport (EPT) on each tree, which (as reconstructed
    from the proofs of its App. B and D) is the tree sum above plus
    :math:`(b\lambda_{EPT}/2 + w(r) - a)\,|\mu(T) - \nu(T)|`: ``price`` is that
    constant. Because that term has no gradient with respect to the supports, the paper
    (its §3.3) drops it and keeps the total masses as the only parameters of
    partiality, which is ``price=0``. Whether the paper also scales the tree sum by the
    Lipschitz constant :math:`b` is unconfirmed; here it is not scaled (as in the code).

    **What it is not.** GKR with one price :math:`\lambda` per unit at *every* point
    (mass may vanish where it sits) is a different distance: it is not a sum over
    edges (subdividing an edge must not change it, yet :math:`\delta_0` vs
    :math:`\delta_L` on a segment costs :math:`\min(L, 2\lambda)`), and Sato et al.
    solve it with a dynamic program, not a closed form; it is not implemented.

    **p > 1** gives the tree-sliced Sobolev transport :math:`ST_p` (Le et al. 2022) of
    the measures completed at the root (or at :math:`\hat s`), **not** an unbalanced
    Wasserstein-:math:`p` distance; the official code's default is ``p=2``.

    Parameters
    ----------
    X_s : Tensor of shape (N, d) or (B, N, d)
        Source support.
    X_t : Tensor of shape (M, d) or (B, M, d)
        Target support; ``M != N`` is allowed.
    a, b : Tensor of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative **shapes** of the two measures: they are normalised by their own
        totals (any positive total is accepted), the masses come from ``mass_s`` and
        ``mass_t``. Uniform by default.
    mass_s, mass_t : float or Tensor of shape () or (B,), default 1.0
        Total masses :math:`m_s, m_t \ge 0`. Tensors (same dtype and device as the
        data) receive gradients, so a schedule or a learnable mass works. The paper's
        point-cloud experiment uses ``mass_s=1``, ``mass_t=1.04`` for a target with 7%
        outliers.
    n_trees, n_lines : int, optional
        ``T`` and ``k``; 250 and 4 by default, inferred from ``trees`` if given.
    delta : float, default 2.0
        Inverse temperature of the distance-based split (``0``: uniform split).
    p : float, default 1
        Exponent (see the Notes).
    price : float, default 0.0
        Extra cost :math:`\lambda` per unit of mass created or destroyed (at the root).
    orthogonal : bool, default False
        Orthonormal directions inside each tree (needs ``k <= d``).
    sampling : {"iid", "orthogonal", "qmc"}, default "iid"
        How the trees are spread, as in :func:`tsw.db_tsw` (unbiased in every mode).
    trees : ConcurrentLines, optional
        Explicit trees; overrides the sampling arguments.
    center : "mean", "median" or Tensor of shape (d,) or (B, d), default "mean"
        Centre of the sampled roots; ``"mean"``: the detached mean of the two normalised
        shapes, :math:`(\sum_i \hat a_i x_i + \sum_j \hat b_j y_j) / 2`, which does not
        depend on the masses (and equals :func:`tsw.db_tsw`'s centre for probability
        weights).
        ``"median"``: the detached geometric median of the two normalised shapes
        (FW-TSW, see :func:`tsw.db_tsw`).
    root_std : float, default 0.1
        Standard deviation of the roots around the centre.
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
        For malformed inputs (as :func:`tsw.db_tsw`), negative, NaN or Inf masses,
        masses of the wrong type, shape, dtype or device, or ``price < 0``.

    Notes
    -----
    Properties, for shared trees: symmetric when the masses are swapped with the
    measures, :math:`d(m_s\hat\mu, m_t\hat\nu) = d(m_t\hat\nu, m_s\hat\mu)`; the
    triangle inequality holds between measures of any masses (each tree term is a
    weighted :math:`\ell_p` norm of a linear image of :math:`\mu - \nu`); zero for
    identical inputs with equal masses; 1-homogeneous in the masses (scaling both by
    :math:`s` scales the value by :math:`s`); E(d)-invariant for trees moved with the
    data. Hence a pseudo-metric on measures of any masses, for every ``p``; the paper
    states that it is a metric (its Thm 3.3), which is not checked here. With
    ``price=0`` a mass sitting exactly on a root is invisible to that tree (so with
    ``root_std=0`` two measures differing by a Dirac at the centre are at distance 0).
    Equal masses and ``price=0`` reduce to :func:`tsw.db_tsw` times the common mass.
    Robustness to outliers depends on the root spread: in the digits benchmark
    (``python -m benchmarks.generative --task robust``, 10% outliers, generated mass
    0.5-0.9) the default ``root_std=0.1`` left 5-6% of the samples on the outlier class,
    ``root_std=2`` none; with roots near the mean, the cheapest mass to leave
    untransported is the clean bulk around the mean, not the outliers.
    The cost is that of :func:`tsw.db_tsw` (measured ratio 0.99, forward + backward,
    N = M = 2000, d = 64, 250 x 4 trees, float32, one CPU thread).

    References
    ----------
    .. [Tran2025c] H. V. Tran et al. Tree-sliced entropy partial transport. NeurIPS 2025.
    .. [Sato2020] R. Sato, M. Yamada, H. Kashima. Fast unbalanced optimal transport on a
       tree. NeurIPS 2020.
    .. [Le2021] T. Le, T. Nguyen. Entropy partial transport with tree metrics: theory
       and practice. AISTATS 2021.
    .. [Le2022] T. Le et al. Sobolev transport. AISTATS 2022.

    Examples
    --------
    >>> import torch, tsw
    >>> X = torch.tensor([[1.0, 0.0]]); Y = torch.tensor([[0.0, 2.0]])
    >>> trees = tsw.ConcurrentLines(torch.zeros(1, 2), torch.eye(2)[None])
    >>> # spec golden value G2: uniform split, mu(T) = 1, nu(T) = 0.5
    >>> tsw.partial_tsw(X, Y, mass_s=1.0, mass_t=0.5, trees=trees, delta=0.0)
    tensor(1.)
    """
    given_a, given_b = problem.weighted
    measures = problem.measures
    m_s = check_mass(mass_s, "mass_s", measures.X_s, measures.batched, problem.validate)
    m_t = check_mass(mass_t, "mass_t", measures.X_s, measures.batched, problem.validate)
    # shapes: normalised given weights (the defaults 1/N, 1/M already are); the trees'
    # default center is the mean of the shapes, whatever the masses
    a_hat = measures.a / measures.a.sum(-1, keepdim=True) if given_a else measures.a
    b_hat = measures.b / measures.b.sum(-1, keepdim=True) if given_b else measures.b
    problem = problem.replace(measures=measures._replace(a=a_hat, b=b_hat))
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
    m_s, m_t = m_s.reshape(-1, 1), m_t.reshape(-1, 1)  # (B|1, 1)

    def project(shapes: Measures, trees: ConcurrentLines) -> Projection:
        scaled = shapes._replace(a=shapes.a * m_s, b=shapes.b * m_t)
        return db_projection(scaled, trees, delta)

    def cost(projection: Projection, p: float) -> Tensor:
        per_tree = closed_form(projection, p)
        return per_tree + price * (m_s - m_t).abs().pow(p) if price > 0 else per_tree

    return evaluate(problem, project, trees, cost, front=centered)
