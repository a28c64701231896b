"""Shared machinery of every distance: nothing here knows a particular method.

Public modules (their names are re-exported by :mod:`tsw`):

* :mod:`tsw.core.trees`: tree-system containers (:class:`~tsw.ConcurrentLines`,
  :class:`~tsw.ChainLines`, :class:`~tsw.SphericalTrees`) and their samplers;
* :mod:`tsw.core.splits`: splitting maps (uniform, constant, distance-based, angular);
* :mod:`tsw.core.tree_wasserstein`: the closed-form OT on trees
  (:func:`~tsw.tree_wasserstein` on any rooted tree, :func:`~tsw.line_system_cost` on
  systems of lines, and its kernel ``line_cost``);
* :mod:`tsw.core.wasserstein_1d`: the one-dimensional closed form of the sliced baselines;
* :mod:`tsw.core.monte_carlo`: the Monte-Carlo error of a value and
  :func:`~tsw.trees_needed`, the number of trees for a target error;
* :mod:`tsw.core.tree_plan`: :func:`~tsw.tree_plan`, the exact transport plan on a
  rooted tree.

Private modules (no stability promise), in the order a call meets them:

* ``_api``: the decorator that makes a method's function public (shared options,
  their checks and documentation);
* ``_problem``: the :class:`Problem` a call builds (measures, ``p``, random stream,
  options); ``_validation``: argument checks with messages naming the argument;
  ``_random``: the seeding contract;
* ``_slices``: explicit-or-drawn slices (counts, root centers, checks against the data);
* ``_driver``: :func:`evaluate`, projections and closed forms over the slices;
  ``_blocks``: the slices in blocks (the plan, the blocks' gradients);
  ``_distributed``: the slices shared among the ranks of a process group;
* ``_projection``: the :class:`Projection` type and :func:`closed_form`;
* ``_output``: the value and the log from the per-slice costs;
* ``_gradients``: the products of points and directions, whose gradients go straight
  into the blocks' sums; ``_safe``: primitives with finite subgradients;
* ``_sort``: the one sort of every closed form; ``_angles``: STSW's angles on S^2;
* ``_kernels`` (with ``_numba_kernels``, ``_numba_trees`` and ``_threads``): the
  compiled CPU kernels, called only by the closed forms, the tree solvers, the splits,
  the sort and the angles; ``_kernel_loading``: when they are loaded or compiled;
* ``_plans``: the entries of every transport plan (monotone plans, plans on systems of
  lines, their costs, dense or sparse assembly) and :func:`~tsw.barycentric_map`.
"""
