"""Sliced and tree-sliced distances between measures on curved spaces.

Hyperbolic space, SPD matrices and products of Euclidean, spherical and hyperbolic
factors. The geometry of each space lives in one private module, the methods beside it:

* ``_hyperbolic``: hyperbolic space in the Lorentz and Poincare models (checks,
  conversions, exponential and logarithm maps, geodesic distances, the geodesic and
  horospherical coordinates, wrapped normal draws);
* ``_spd``: SPD matrices (checks, the matrix functions by one eigendecomposition with
  their Daleckii-Krein gradients, log-Euclidean and affine-invariant distances and
  exponential maps, the affine-invariant Busemann coordinates);
* ``_hsw``: :func:`tsw.ghsw` and :func:`tsw.hhsw`; ``_spdsw``: :func:`tsw.spdsw` and
  :func:`tsw.hspdsw`; ``_steps``: :func:`tsw.riemannian_step`;
* ``_product`` and ``_mc_tsw``: products of factors and :func:`tsw.mc_tsw`.
"""

from tsw.curved._hsw import ghsw, hhsw
from tsw.curved._hyperbolic import distance as hyperbolic_distance
from tsw.curved._hyperbolic import distance_matrix as hyperbolic_distance_matrix
from tsw.curved._hyperbolic import (
    exp0,
    lorentz_to_poincare,
    poincare_to_lorentz,
    wrapped_normal,
)
from tsw.curved._mc_tsw import mc_tsw
from tsw.curved._product import MixedCurvatureTrees, sample_mixed_curvature_trees
from tsw.curved._spd import spd_distance, spd_distance_matrix, spd_exp_map
from tsw.curved._spdsw import hspdsw, sample_spd_projections, spdsw
from tsw.curved._steps import riemannian_step

__all__ = [
    "MixedCurvatureTrees",
    "exp0",
    "ghsw",
    "hhsw",
    "hspdsw",
    "hyperbolic_distance",
    "hyperbolic_distance_matrix",
    "lorentz_to_poincare",
    "mc_tsw",
    "poincare_to_lorentz",
    "riemannian_step",
    "sample_mixed_curvature_trees",
    "sample_spd_projections",
    "spd_distance",
    "spd_distance_matrix",
    "spd_exp_map",
    "spdsw",
    "wrapped_normal",
]
