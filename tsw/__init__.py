"""tsw: tree-sliced optimal transport distances in PyTorch.

Distances (functions, POT argument order ``X_s, X_t, a, b``):
:func:`tsw_sl`, :func:`db_tsw`, :func:`circular_tsw`, :func:`spatial_tsw`,
:func:`partial_tsw` (unequal masses), :func:`sw`, :func:`max_sw`, and the exact
:func:`tree_wasserstein` on any rooted tree. Loss modules live in :mod:`tsw.nn`; tree
systems and their samplers in :mod:`tsw.trees`; the maps of SpatialTSW in
:mod:`tsw.mappings`. Sliced baselines for unequal masses (POT's solvers):
:func:`partial_sw`, :func:`unbalanced_sw`.
"""

from tsw import mappings, nn
from tsw.circular import circular_tsw
from tsw.db_tsw import db_tsw
from tsw.one_d import wasserstein_1d
from tsw.partial_tsw import partial_tsw
from tsw.sliced import max_sw, sample_projections, sw
from tsw.spatial import spatial_tsw
from tsw.tree_wasserstein import line_system_cost, tree_wasserstein
from tsw.trees import (
    ChainLines,
    ConcurrentLines,
    sample_chain_lines,
    sample_concurrent_lines,
)
from tsw.tsw_sl import tsw_sl
from tsw.unbalanced_sliced import partial_sw, unbalanced_sw

__version__ = "0.1.0"

__all__ = [
    "ChainLines",
    "ConcurrentLines",
    "__version__",
    "circular_tsw",
    "db_tsw",
    "line_system_cost",
    "mappings",
    "max_sw",
    "nn",
    "partial_sw",
    "partial_tsw",
    "sample_chain_lines",
    "sample_concurrent_lines",
    "sample_projections",
    "spatial_tsw",
    "sw",
    "tree_wasserstein",
    "tsw_sl",
    "unbalanced_sw",
    "wasserstein_1d",
]
