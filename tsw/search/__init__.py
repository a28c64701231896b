"""Search under W1: nearest neighbours between histograms on one support, and their tools.

Re-exported by :mod:`tsw`:

* ``_index``: :class:`W1Index`, the cascade of a search (tree-sliced W through an inverted
  index, Flowtree, exact W1) on one machine;
* ``_dask``: :class:`DaskW1Index`, the same sharded over the workers of a Dask cluster;
* ``_sklearn``: :class:`TreeEmbedding`, the tree embedding as a scikit-learn transformer
  (imports scikit-learn: loaded on first access to ``TreeEmbedding``);
* ``_kernel``: :func:`tree_sliced_kernel`, the positive-definite kernel exp(-t TSW);
* ``_store``: the database of a machine or a shard and the stages of a search on it;
* ``_cascade``: the steps of a search, written once for one store and for shards;
* ``_data``: histograms read as sparse rows and checked.
"""

from typing import TYPE_CHECKING, Any

from tsw.search._dask import DaskW1Index
from tsw.search._index import W1Index
from tsw.search._kernel import tree_sliced_kernel

if TYPE_CHECKING:
    from tsw.search._sklearn import TreeEmbedding

__all__ = ["DaskW1Index", "TreeEmbedding", "W1Index", "tree_sliced_kernel"]


def __getattr__(name: str) -> Any:
    """``TreeEmbedding`` imports scikit-learn (an optional dependency) on first access."""
    if name == "TreeEmbedding":
        from tsw.search._sklearn import TreeEmbedding

        return TreeEmbedding
    raise AttributeError(f"module 'tsw.search' has no attribute {name!r}")
