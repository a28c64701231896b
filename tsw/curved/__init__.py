"""Sliced distances between measures on curved spaces: hyperbolic space and SPD matrices.

The private ``_hyperbolic`` holds the geometry of hyperbolic space (the Lorentz and
Poincare models: checks, conversions, exponential and logarithm maps, geodesic
distances, the geodesic and horospherical coordinates).
"""

__all__: list[str] = []
