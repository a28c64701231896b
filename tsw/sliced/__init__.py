"""Sliced-Wasserstein baselines that the tree-sliced papers compare against.

* :mod:`~tsw.sliced.sw`: SW, orthogonal SW and max-SW in R^d (and ``sample_projections``);
* :mod:`~tsw.sliced.ssw`: spherical SW (SSW, POT-backed) and SSW to the uniform measure;
* :mod:`~tsw.sliced.s3w`: S3W, RI-S3W, ARI-S3W (SW after a map of the sphere into a ball);
* :mod:`~tsw.sliced.unbalanced_sw`: sliced partial and unbalanced OT (POT's solvers).

SW is the degenerate case of the driver (one line per slice, no split); the POT-backed
baselines and the max-SW ascent use the driver for everything but their solver (each
module says why).
"""

from tsw.sliced.sw import max_sw, sample_projections, sw

__all__ = ["max_sw", "sample_projections", "sw"]
