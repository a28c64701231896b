"""Sliced distances between measures on curved spaces: hyperbolic space and SPD matrices.

The private ``_hyperbolic`` holds the geometry of hyperbolic space (the Lorentz and
Poincare models: checks, conversions, exponential and logarithm maps, geodesic
distances, the geodesic and horospherical coordinates).
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
