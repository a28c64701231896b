"""tsw: tree-sliced optimal transport distances in PyTorch.

Distances (functions, POT argument order ``X_s, X_t, a, b``):
:func:`tsw_sl`, :func:`max_tsw_sl`, :func:`db_tsw`, :func:`ts_sobolev`,
:func:`circular_tsw`, :func:`spatial_tsw`, :func:`partial_tsw` (unequal masses),
:func:`sw`, :func:`max_sw`, the SW variants :func:`lcv_sw`, :func:`eb_sw`,
:func:`rp_sw`, and the exact :func:`tree_wasserstein` on any rooted tree. On the
sphere: :func:`stsw`, :func:`stsw_unif`, :func:`spatial_stsw`, and the baselines
:func:`ssw`, :func:`ssw_unif`, :func:`s3w` (S3W, RI-S3W, ARI-S3W), :func:`s3w_unif`.
Loss modules live in
:mod:`tsw.nn`; tree systems and their samplers in :mod:`tsw.core.trees`; the maps of
SpatialTSW in :mod:`tsw.mappings` (:mod:`tsw.euclidean.mappings`).

Layout: :mod:`tsw.core` (shared machinery: validation, random draws, tree containers,
splits, closed forms, the driver), :mod:`tsw.euclidean`, :mod:`tsw.sphere`,
:mod:`tsw.sliced` (the SW baselines), :mod:`tsw.support` (trees built from the data),
:mod:`tsw.barycenters`, :mod:`tsw.nn` (losses built from the functions).
See ``ARCHITECTURE.md``. Sliced baselines for unequal masses (POT's solvers):
:func:`partial_sw`, :func:`unbalanced_sw`.

Transport plans (couplings, not only distances): POT's sliced plans
:func:`sliced_plans`, :func:`min_sliced_transport_plan`, :func:`expected_sliced_plan`,
:func:`swgg` (min-pivot with an optimised direction), the exact :func:`tree_plan` on a
rooted tree, :func:`expected_tree_sliced_plan` (the mean of the optimal plans of
Db-TSW's or TSW-SL's trees), and :func:`barycentric_map`.

Many histograms on one support (:mod:`tsw.support`): trees built from the data
(:func:`sample_quadtrees`, :func:`sample_cluster_trees`, held in :class:`SupportTrees`),
their distance matrices and embeddings (:func:`pairwise_tsw`, :func:`tree_embedding`),
:func:`support_tsw` between point clouds, :func:`flowtree` and :func:`pairwise_flowtree`,
and :func:`fit_edge_lengths`.

Search under W1 (:mod:`tsw.search`): :class:`W1Index` (nearest neighbours under exact W1
through a cascade: tree-sliced W, Flowtree, exact), :class:`DaskW1Index` (the same,
sharded over a Dask cluster), :class:`TreeEmbedding` (a scikit-learn transformer) and
:func:`tree_sliced_kernel` (the positive-definite kernel exp(-t TSW)).

Barycenters: :func:`free_support_barycenter` (any distance, POT's signature; MFSWB's
fairness) and :func:`tree_barycenter` (fixed support on trees built from the data).

Data and evaluation: :mod:`tsw.datasets` (the synthetic point clouds of the papers'
experiments) and :mod:`tsw.metrics` (exact W_p through ``ot.emd2``, the geodesic W_p on
the sphere, the NLL of a von Mises-Fisher mixture).
"""

from typing import TYPE_CHECKING, Any

from tsw import datasets, metrics, nn
from tsw.barycenters import free_support_barycenter, tree_barycenter
from tsw.core._barycentric import barycentric_map
from tsw.core.monte_carlo import trees_needed
from tsw.core.tree_plan import tree_plan
from tsw.core.tree_wasserstein import line_system_cost, tree_wasserstein
from tsw.core.trees import (
    ChainLines,
    ConcurrentLines,
    SphericalTrees,
    sample_chain_lines,
    sample_concurrent_lines,
    sample_spherical_trees,
)
from tsw.core.wasserstein_1d import wasserstein_1d
from tsw.curved._hsw import ghsw, hhsw
from tsw.curved._mc_tsw import mc_tsw
from tsw.curved._product import MixedCurvatureTrees, sample_mixed_curvature_trees
from tsw.curved._spdsw import hspdsw, sample_spd_projections, spdsw
from tsw.curved._steps import riemannian_step
from tsw.euclidean import mappings
from tsw.euclidean._circular_tsw import circular_tsw
from tsw.euclidean._db_tsw import db_tsw
from tsw.euclidean._max_tsw_sl import max_tsw_sl
from tsw.euclidean._partial_tsw import partial_tsw
from tsw.euclidean._spatial_tsw import spatial_tsw
from tsw.euclidean._tree_sliced_plan import expected_tree_sliced_plan
from tsw.euclidean._ts_sobolev import ts_sobolev
from tsw.euclidean._tsw_sl import tsw_sl
from tsw.search._dask import DaskW1Index
from tsw.search._index import W1Index
from tsw.search._kernel import tree_sliced_kernel
from tsw.sliced._eb_sw import eb_sw
from tsw.sliced._lcv_sw import lcv_sw
from tsw.sliced._plans import expected_sliced_plan, min_sliced_transport_plan, sliced_plans
from tsw.sliced._rp_sw import rp_sw
from tsw.sliced._s3w import s3w, s3w_map, s3w_unif, sample_rotations
from tsw.sliced._ssw import sample_sphere_projections, ssw, ssw_unif
from tsw.sliced._sw import max_sw, sample_projections, sw
from tsw.sliced._swgg import swgg
from tsw.sliced._unbalanced_sw import partial_sw, unbalanced_sw
from tsw.sphere._spatial_stsw import spatial_stsw
from tsw.sphere._stsw import stsw, stsw_unif
from tsw.support._cluster import sample_cluster_trees
from tsw.support._embedding import pairwise_tsw, tree_embedding
from tsw.support._fit import fit_edge_lengths
from tsw.support._flowtree import flowtree, pairwise_flowtree
from tsw.support._support_tsw import support_tsw
from tsw.support._trees import SupportTree, SupportTrees, sample_quadtrees

if TYPE_CHECKING:
    from tsw.search._sklearn import TreeEmbedding

__version__ = "0.2.0.dev0"

__all__ = [
    "ChainLines",
    "ConcurrentLines",
    "DaskW1Index",
    "MixedCurvatureTrees",
    "SphericalTrees",
    "SupportTree",
    "SupportTrees",
    "TreeEmbedding",
    "W1Index",
    "__version__",
    "barycentric_map",
    "circular_tsw",
    "datasets",
    "db_tsw",
    "eb_sw",
    "expected_sliced_plan",
    "expected_tree_sliced_plan",
    "fit_edge_lengths",
    "flowtree",
    "free_support_barycenter",
    "ghsw",
    "hhsw",
    "hspdsw",
    "lcv_sw",
    "line_system_cost",
    "mappings",
    "max_sw",
    "max_tsw_sl",
    "mc_tsw",
    "metrics",
    "min_sliced_transport_plan",
    "nn",
    "pairwise_flowtree",
    "pairwise_tsw",
    "partial_sw",
    "partial_tsw",
    "riemannian_step",
    "rp_sw",
    "s3w",
    "s3w_map",
    "s3w_unif",
    "sample_chain_lines",
    "sample_cluster_trees",
    "sample_concurrent_lines",
    "sample_mixed_curvature_trees",
    "sample_projections",
    "sample_quadtrees",
    "sample_rotations",
    "sample_spd_projections",
    "sample_sphere_projections",
    "sample_spherical_trees",
    "sliced_plans",
    "spatial_stsw",
    "spatial_tsw",
    "spdsw",
    "ssw",
    "ssw_unif",
    "stsw",
    "stsw_unif",
    "support_tsw",
    "sw",
    "swgg",
    "tree_barycenter",
    "tree_embedding",
    "tree_plan",
    "tree_sliced_kernel",
    "tree_wasserstein",
    "trees_needed",
    "ts_sobolev",
    "tsw_sl",
    "unbalanced_sw",
    "wasserstein_1d",
]


def __getattr__(name: str) -> Any:
    """``tsw.TreeEmbedding`` imports scikit-learn (an optional dependency) on first access."""
    if name == "TreeEmbedding":
        from tsw.search import TreeEmbedding  # tsw.search's own lazy import

        return TreeEmbedding
    raise AttributeError(f"module 'tsw' has no attribute {name!r}")
