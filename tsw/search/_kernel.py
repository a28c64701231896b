r"""The positive-definite kernel :math:`\exp(-t\,\mathrm{TSW})` of Le et al. (2019).

The tree-sliced Wasserstein distance is an L1 distance between embeddings, hence a
negative-definite function (L1 distances are), so by Schoenberg's theorem
:math:`\exp(-t\,\mathrm{TSW})` is a positive-definite kernel for every :math:`t > 0`
(Le et al., 2019, Proposition 2): a kernel matrix for ``SVC(kernel="precomputed")``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tsw.core._random import refuse_tracing
from tsw.core._validation import check_nonnegative_float
from tsw.support._embedding import pairwise_tsw
from tsw.support._trees import SupportTrees

__all__ = ["tree_sliced_kernel"]


def tree_sliced_kernel(
    hists_s: Any,
    hists_t: Any = None,
    *,
    trees: SupportTrees,
    t: float = 1.0,
) -> Any:
    r"""Kernel matrix :math:`K_{ij} = \exp(-t\,\mathrm{TSW}(h_i, h_j))` between histograms.

    References: [Le2019pd]_.

    ``K = tsw.tree_sliced_kernel(H, trees=trees, t=1.0)``: with
    :math:`\mathrm{TSW}` the tree-sliced Wasserstein distance of :func:`tsw.pairwise_tsw`
    (an L1 distance between tree embeddings, so negative definite), ``K`` is positive
    semi-definite for every ``t > 0`` (Schoenberg's theorem): the Gram matrix of a
    positive-definite kernel. With two sets, ``K[i, j]`` pairs row ``i`` of ``hists_s``
    with row ``j`` of ``hists_t``: the (test, train) matrix that
    ``SVC(kernel="precomputed").predict`` takes.

    Parameters
    ----------
    hists_s : Tensor (dense or sparse), numpy array or scipy sparse matrix, shape (k, n)
        Non-negative histograms of equal totals on the ``n`` support points of ``trees``.
    hists_t : same, shape (m, n), optional
        The second set; default ``hists_s`` (a symmetric (k, k) matrix).
    trees : SupportTrees
        From :func:`tsw.sample_quadtrees` or :func:`tsw.sample_cluster_trees`.
    t : float, default 1.0
        The bandwidth, > 0: a larger ``t`` makes the kernel more local. A common choice
        is the inverse of a typical distance (e.g. its median over the training pairs).

    Returns
    -------
    Tensor or numpy array of shape (k, m)
        In ``[0, 1]``, ones on the diagonal of a (k, k) matrix; numpy for numpy or scipy
        input, otherwise in the trees' dtype and on their device.

    References
    ----------
    .. [Le2019pd] T. Le, M. Yamada, K. Fukumizu, M. Cuturi. Tree-sliced variants of
       Wasserstein distances. NeurIPS 2019.

    Examples
    --------
    >>> import numpy as np, tsw
    >>> from sklearn.datasets import load_digits
    >>> from sklearn.svm import SVC
    >>> digits = load_digits()
    >>> H = digits.data / digits.data.sum(1, keepdims=True)
    >>> grid = np.stack(np.divmod(np.arange(64), 8), axis=1).astype(float)
    >>> trees = tsw.sample_quadtrees(grid, n_trees=10, seed=0)
    >>> K_train = tsw.tree_sliced_kernel(H[:1000], trees=trees, t=1.0)
    >>> K_test = tsw.tree_sliced_kernel(H[1000:], H[:1000], trees=trees, t=1.0)
    >>> svc = SVC(kernel="precomputed").fit(K_train, digits.target[:1000])
    >>> float((svc.predict(K_test) == digits.target[1000:]).mean()) > 0.9
    True
    """
    refuse_tracing("tsw.tree_sliced_kernel")  # its trees' embedding runs in NumPy
    t = check_nonnegative_float(t, "t")
    if t == 0:
        raise ValueError("t must be > 0 (t = 0 gives the constant kernel 1); got t=0")
    D = pairwise_tsw(hists_s, hists_t, trees=trees)
    if isinstance(D, np.ndarray):
        return np.exp(-t * D)
    return torch.exp(-t * D)
