"""tsw: tree-sliced optimal transport distances in PyTorch.

Distances (functions, POT argument order ``X_s, X_t, a, b``):
:func:`tsw_sl`, :func:`db_tsw`, :func:`circular_tsw`, :func:`spatial_tsw`,
:func:`partial_tsw` (unequal masses), :func:`sw`, :func:`max_sw`, and the exact
:func:`tree_wasserstein` on any rooted tree. On the sphere: :func:`stsw`,
:func:`stsw_unif`, :func:`spatial_stsw`, and the baselines :func:`ssw`, :func:`ssw_unif`,
:func:`s3w` (S3W, RI-S3W, ARI-S3W), :func:`s3w_unif`.
Loss modules live in
:mod:`tsw.nn`; tree systems and their samplers in :mod:`tsw.core.trees`; the maps of
SpatialTSW in :mod:`tsw.mappings` (:mod:`tsw.euclidean.mappings`).

Layout: :mod:`tsw.core` (shared machinery: validation, random draws, tree containers,
splits, closed forms, the driver), :mod:`tsw.euclidean`, :mod:`tsw.sphere`,
:mod:`tsw.sliced` (the SW baselines), :mod:`tsw.nn` (losses built from the functions).
See ``ARCHITECTURE.md``. Sliced baselines for unequal masses (POT's solvers):
:func:`partial_sw`, :func:`unbalanced_sw`.
"""

import sys as _sys

from tsw import nn
from tsw.core.monte_carlo import trees_needed
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
from tsw.euclidean import mappings
from tsw.euclidean.circular_tsw import circular_tsw
from tsw.euclidean.db_tsw import db_tsw
from tsw.euclidean.partial_tsw import partial_tsw
from tsw.euclidean.spatial_tsw import spatial_tsw
from tsw.euclidean.tsw_sl import tsw_sl
from tsw.sliced.s3w import s3w, s3w_map, s3w_unif, sample_rotations
from tsw.sliced.ssw import sample_sphere_projections, ssw, ssw_unif
from tsw.sliced.sw import max_sw, sample_projections, sw
from tsw.sliced.unbalanced_sw import partial_sw, unbalanced_sw
from tsw.sphere.spatial_stsw import spatial_stsw
from tsw.sphere.stsw import stsw, stsw_unif

__version__ = "0.1.0"

# The module paths of the flat layout before the subpackages (``from tsw.trees import
# ...``) keep working: each names the module that now holds its code.
_MOVED = {
    "circular": "tsw.euclidean.circular_tsw",
    "db_tsw": "tsw.euclidean.db_tsw",
    "mappings": "tsw.euclidean.mappings",
    "one_d": "tsw.core.wasserstein_1d",
    "partial_tsw": "tsw.euclidean.partial_tsw",
    "s3w": "tsw.sliced.s3w",
    "spatial": "tsw.euclidean.spatial_tsw",
    "spatial_sphere": "tsw.sphere.spatial_stsw",
    "splits": "tsw.core.splits",
    "ssw": "tsw.sliced.ssw",
    "stsw": "tsw.sphere.stsw",
    "tree_wasserstein": "tsw.core.tree_wasserstein",
    "trees": "tsw.core.trees",
    "tsw_sl": "tsw.euclidean.tsw_sl",
    "unbalanced_sliced": "tsw.sliced.unbalanced_sw",
}
for _old, _new in _MOVED.items():
    _sys.modules[f"tsw.{_old}"] = _sys.modules[_new]
del _old, _new

__all__ = [
    "ChainLines",
    "ConcurrentLines",
    "SphericalTrees",
    "__version__",
    "circular_tsw",
    "db_tsw",
    "line_system_cost",
    "mappings",
    "max_sw",
    "nn",
    "partial_sw",
    "partial_tsw",
    "s3w",
    "s3w_map",
    "s3w_unif",
    "sample_chain_lines",
    "sample_concurrent_lines",
    "sample_projections",
    "sample_rotations",
    "sample_sphere_projections",
    "sample_spherical_trees",
    "spatial_stsw",
    "spatial_tsw",
    "ssw",
    "ssw_unif",
    "stsw",
    "stsw_unif",
    "sw",
    "tree_wasserstein",
    "trees_needed",
    "tsw_sl",
    "unbalanced_sw",
    "wasserstein_1d",
]
