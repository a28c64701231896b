"""Barycenters: free-support (sliced, tree-sliced, on the sphere) and fixed-support on trees.

:func:`free_support_barycenter` moves the atoms of a support by gradient steps on any of
the library's distances (POT's ``ot.lp.free_support_barycenter`` signature);
:func:`tree_barycenter` finds the masses of a fixed support that minimise the (tree-sliced)
tree-Wasserstein distances to histograms on :class:`tsw.SupportTrees`.
"""

from tsw.barycenters._free_support import free_support_barycenter
from tsw.barycenters._tree import tree_barycenter

__all__ = ["free_support_barycenter", "tree_barycenter"]
