"""Tree-sliced distances between measures on the sphere S^d (points as unit vectors).

:mod:`~tsw.sphere.stsw` (STSW, and STSW to the uniform measure) and
:mod:`~tsw.sphere.spatial_stsw` (STSW after an injective lift). The private ``_geometry``
holds the spherical coordinates and the projected uniform measure. The sliced baselines
on the sphere (SSW, S3W) live in :mod:`tsw.sliced`.
"""
