"""Sliced-Wasserstein baselines that the tree-sliced papers compare against.

One private module per baseline, re-exported by :mod:`tsw`:

* ``_sw``: SW, orthogonal SW and max-SW in R^d (:func:`sw`, :func:`max_sw`,
  :func:`sample_projections`, also importable from here);
* ``_ssw``: spherical SW (:func:`tsw.ssw`, POT-backed) and SSW to the uniform measure;
* ``_s3w``: S3W, RI-S3W, ARI-S3W (:func:`tsw.s3w`: SW after a map of the sphere into a ball);
* ``_unbalanced_sw``: sliced partial and unbalanced OT (POT's solvers);
* ``_plans``: POT's sliced transport plans (:func:`tsw.sliced_plans`,
  :func:`tsw.min_sliced_transport_plan`, :func:`tsw.expected_sliced_plan`), and
  ``_swgg``: min-pivot with an optimised direction (:func:`tsw.swgg`).

SW is the degenerate case of the driver (one line per slice, no split); the POT-backed
baselines and the max-SW ascent use the driver for everything but their solver (each
module says why).
"""

from tsw.sliced._sw import max_sw, sample_projections, sw

__all__ = ["max_sw", "sample_projections", "sw"]
