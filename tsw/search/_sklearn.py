r"""scikit-learn: the tree embedding as a transformer (an optional import).

``make_pipeline(tsw.TreeEmbedding(support), KNeighborsClassifier(metric="manhattan"))``
is the k-nearest-neighbour classifier of the tree-sliced Wasserstein distance of Le et
al. (2019): the embedding's L1 distances are the distances. scikit-learn is imported
with this module, which :mod:`tsw` loads on first access to ``tsw.TreeEmbedding``
(``pip install torch-tsw[sklearn]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from tsw.support._cluster import sample_cluster_trees
from tsw.support._embedding import tree_embedding
from tsw.support._trees import SupportTrees, sample_quadtrees

try:
    from sklearn.base import BaseEstimator, TransformerMixin
    from sklearn.utils.validation import check_is_fitted, check_non_negative, validate_data
except ImportError as err:  # pragma: no cover - the extra is missing
    raise ImportError(
        "tsw.TreeEmbedding needs scikit-learn >= 1.6: pip install 'torch-tsw[sklearn]'"
    ) from err

if TYPE_CHECKING:  # scikit-learn ships no types: what its base classes give, typed

    class _Transformer:
        """scikit-learn's ``TransformerMixin`` and ``BaseEstimator``, as type checkers see them."""

        def get_params(self, deep: bool = True) -> dict[str, Any]:
            """Return the constructor's parameters."""
            ...

        def set_params(self, **params: Any) -> Any:
            """Set constructor parameters; return the estimator."""
            ...

        def fit_transform(self, X: Any, y: Any = None, **fit_params: Any) -> Any:
            """Fit, then transform ``X``."""
            ...

        def __sklearn_tags__(self) -> Any:
            """Return scikit-learn's tags of the estimator."""
            ...

else:

    class _Transformer(TransformerMixin, BaseEstimator):
        """scikit-learn's ``TransformerMixin`` and ``BaseEstimator``."""


__all__ = ["TreeEmbedding"]


def _line(n: int) -> np.ndarray:
    """Return the bins 0, 1, ..., n - 1 of a line, (n, 1): the support of 1-D histograms."""
    return np.arange(n, dtype=np.float64)[:, None]


class TreeEmbedding(_Transformer):
    r"""The tree-sliced Wasserstein embedding as a scikit-learn transformer.

    References: [Le2019k]_.

    ``TreeEmbedding(support, n_trees=10).fit(H).transform(H)`` maps histograms ``H``
    (k, n) on the ``n`` points ``support`` to their tree embedding
    (:func:`tsw.tree_embedding`): the L1 distance between two rows is the tree-sliced
    Wasserstein distance of Le et al. between the histograms (the mean over the trees
    of the exact W1 for each tree's path metric, for histograms of equal totals). So

    .. code-block:: python

        make_pipeline(tsw.TreeEmbedding(support), KNeighborsClassifier(metric="manhattan"))

    classifies by the k nearest histograms under the tree-sliced W.

    Parameters
    ----------
    support : array of shape (n, d), optional
        The points the histograms' ``n`` features are masses on. By default the
        features are the bins ``0, 1, ..., n - 1`` of a line (``n`` read by ``fit``).
    n_trees : int, default 10
        Number of trees.
    tree : {"quadtree", "cluster"}, default "quadtree"
        :func:`tsw.sample_quadtrees` (low dimensions) or :func:`tsw.sample_cluster_trees`
        (high dimensions; 4 clusters, depth 5).
    random_state : int, RandomState or Generator, optional
        Seed of the trees (the library's ``seed``, named as scikit-learn names it).

    Attributes
    ----------
    trees_ : SupportTrees
        The trees, built by ``fit`` on the support (in float64).
    n_features_in_ : int
        The number of support points ``n``.

    Notes
    -----
    ``fit`` builds the trees: it reads ``X`` only for its number of features (and the
    checks). The output is dense; columns are :func:`tsw.tree_embedding`'s. scikit-learn
    is an optional dependency: ``pip install torch-tsw[sklearn]``.

    References
    ----------
    .. [Le2019k] T. Le, M. Yamada, K. Fukumizu, M. Cuturi. Tree-sliced variants of
       Wasserstein distances. NeurIPS 2019.

    Examples
    --------
    >>> import numpy as np, tsw
    >>> from sklearn.neighbors import KNeighborsClassifier
    >>> from sklearn.pipeline import make_pipeline
    >>> rng = np.random.default_rng(0)
    >>> H = rng.random((40, 16)); H /= H.sum(1, keepdims=True)
    >>> y = (H[:, :8].sum(1) > 0.5).astype(int)
    >>> grid = np.stack(np.divmod(np.arange(16), 4), axis=1).astype(float)
    >>> model = make_pipeline(
    ...     tsw.TreeEmbedding(grid, random_state=0), KNeighborsClassifier(3, metric="manhattan")
    ... )
    >>> float(model.fit(H[:30], y[:30]).score(H[30:], y[30:])) >= 0.7
    True
    """

    def __init__(
        self,
        support: Any = None,
        n_trees: int = 10,
        tree: str = "quadtree",
        random_state: Any = None,
    ) -> None:
        self.support = support
        self.n_trees = n_trees
        self.tree = tree
        self.random_state = random_state

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        tags.input_tags.sparse = True
        return tags

    def _validate(self, X: Any, reset: bool) -> Any:
        X = validate_data(self, X, reset=reset, accept_sparse=["csr", "csc", "coo"],
                          dtype=[np.float64, np.float32])  # fmt: skip
        check_non_negative(X, f"{type(self).__name__} (input X)")
        return X

    def fit(self, X: Any, y: Any = None) -> TreeEmbedding:
        """Build the trees on the support (``X`` gives the number of features).

        Parameters
        ----------
        X : array or sparse matrix of shape (k, n)
            Non-negative histograms.
        y : ignored

        Returns
        -------
        self
        """
        from tsw.core._random import check_seed
        from tsw.core._validation import check_choice, check_positive_int

        X = self._validate(X, reset=True)
        n = X.shape[1]
        support = _line(n) if self.support is None else np.asarray(self.support, np.float64)
        if support.ndim != 2 or support.shape[0] != n:
            raise ValueError(
                f"X must have one feature per support point: support has shape "
                f"{support.shape}, X has {n} features"
            )
        n_trees = check_positive_int(self.n_trees, "n_trees")
        tree = check_choice(self.tree, "tree", ("quadtree", "cluster"))
        sample = sample_quadtrees if tree == "quadtree" else sample_cluster_trees
        seed = check_seed(self.random_state)
        self.trees_: SupportTrees = sample(torch.from_numpy(support), n_trees, seed=seed)
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Embed histograms: L1 distances between rows are tree-sliced W distances.

        Parameters
        ----------
        X : array or sparse matrix of shape (k, n)
            Non-negative histograms on the support.

        Returns
        -------
        ndarray of shape (k, E)
            Their embeddings (dense, float64).
        """
        check_is_fitted(self, "trees_")
        X = self._validate(X, reset=False)
        if not hasattr(X, "tocoo"):
            X = np.asarray(X, dtype=np.float64)
        Z = tree_embedding(X, self.trees_)
        if hasattr(Z, "toarray"):
            Z = Z.toarray()
        return np.asarray(Z, dtype=np.float64)
