"""Trees built from the data (Le, Yamada, Fukumizu, Cuturi, NeurIPS 2019).

The tree-sliced Wasserstein distance of Le et al. averages, over random trees built on
a support, the exact W1 for each tree's path metric; it is an L1 distance between
linear embeddings of the measures, so a distance matrix between many histograms on one
support costs one embedding per histogram. Re-exported by :mod:`tsw`:

* ``_trees``: the containers (:class:`SupportTree`, :class:`SupportTrees`, whose
  ``place`` maps points to nodes) and random-shift quadtrees (:func:`sample_quadtrees`,
  low dimensions);
* ``_cluster``: farthest-point (or k-means) clustering trees
  (:func:`sample_cluster_trees`, high dimensions);
* ``_embedding``: the edge matrix and embedding (:func:`tree_embedding`) and distance
  matrices between histograms (:func:`pairwise_tsw`);
* ``_pairwise``: L1 distance matrices between sparse embeddings, never formed densely
  (the columns shared by few histograms summed pair by pair through an inverted index,
  the others through ``torch.cdist``);
* ``_support_tsw``: the distance between two measures, on trees built on the union of
  their supports (:func:`support_tsw`);
* ``_flowtree``: Flowtree, the tree's optimal flow charged at the ground distances
  (:func:`flowtree` between point clouds, :func:`pairwise_flowtree` between histograms);
  ``_flowmatch``: its matching (one pass over the points in a pre-order of the tree,
  compiled behind :mod:`tsw.core._kernels` or in Python) and the costs between sparse
  histograms on prepared trees;
* ``_fit``: edge lengths fitted to the ground metric (:func:`fit_edge_lengths`).
"""

from tsw.support._cluster import sample_cluster_trees
from tsw.support._embedding import pairwise_tsw, tree_embedding
from tsw.support._fit import fit_edge_lengths
from tsw.support._flowtree import flowtree, pairwise_flowtree
from tsw.support._support_tsw import support_tsw
from tsw.support._trees import SupportTree, SupportTrees, sample_quadtrees

__all__ = [
    "SupportTree",
    "SupportTrees",
    "fit_edge_lengths",
    "flowtree",
    "pairwise_flowtree",
    "pairwise_tsw",
    "sample_cluster_trees",
    "sample_quadtrees",
    "support_tsw",
    "tree_embedding",
]
