"""Sliced distances between measures on curved spaces: hyperbolic space and SPD matrices.

The private ``_hyperbolic`` holds the geometry of hyperbolic space (the Lorentz and
Poincare models: checks, conversions, exponential and logarithm maps, geodesic
distances, the geodesic and horospherical coordinates).
"""

from tsw.curved._mc_tsw import mc_tsw
from tsw.curved._product import MixedCurvatureTrees, sample_mixed_curvature_trees

__all__ = ["MixedCurvatureTrees", "mc_tsw", "sample_mixed_curvature_trees"]
