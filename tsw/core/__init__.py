"""Shared machinery of every distance: nothing here knows a particular method.

Public modules (their names are re-exported by :mod:`tsw`):

* :mod:`tsw.core.trees`: tree-system containers (:class:`~tsw.ConcurrentLines`,
  :class:`~tsw.ChainLines`, :class:`~tsw.SphericalTrees`) and their samplers;
* :mod:`tsw.core.splits`: splitting maps (uniform, constant, distance-based);
* :mod:`tsw.core.tree_wasserstein`: the closed-form OT on trees
  (:func:`~tsw.tree_wasserstein` on any rooted tree, :func:`~tsw.line_system_cost` on
  systems of lines, and its kernel ``line_cost``);
* :mod:`tsw.core.wasserstein_1d`: the one-dimensional closed form of the sliced baselines;
* :mod:`tsw.core.monte_carlo`: the Monte-Carlo error of a value and
  :func:`~tsw.trees_needed`, the number of trees for a target error;
* :mod:`tsw.core.tree_plan`: :func:`~tsw.tree_plan`, the exact transport plan on a
  rooted tree.

Private modules (no stability promise):

* ``_driver``: the one pipeline behind every distance (:class:`Problem`,
  :class:`Projection`, :func:`closed_form`); see ``ARCHITECTURE.md``;
* ``_slices``: explicit-or-drawn slices (counts, root centres, checks against the data);
* ``_validation``: argument checks with messages naming the argument;
* ``_random``: the seeding contract (:class:`Sampler`);
* ``_safe``: elementwise primitives with finite subgradients at their singular points;
* ``_gradients``: marks by which a block's projections add their gradient into the
  driver's accumulated sums;
* ``_kernels`` (with ``_numba_kernels``): the line cost's forward and backward as
  compiled CPU loops, when the optional Numba is installed;
* ``_plans``: the entries of every transport plan (monotone plans, plans on systems of
  lines, their costs, dense or sparse assembly) and :func:`~tsw.barycentric_map`.
"""
