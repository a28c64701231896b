"""Tree-sliced distances between measures on the sphere S^d (points as unit vectors).

The private ``_stsw`` holds :func:`tsw.stsw` and :func:`tsw.stsw_unif` (STSW, and STSW
to the uniform measure), ``_spatial_stsw`` holds :func:`tsw.spatial_stsw` (STSW after an
injective lift, :func:`sphere_lift`). The private ``_geometry`` holds the spherical
coordinates and the projected uniform measure. The sliced baselines on the sphere (SSW,
S3W) live in :mod:`tsw.sliced`.
"""

from tsw.sphere._spatial_stsw import sphere_lift

__all__ = ["sphere_lift"]
