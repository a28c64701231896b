"""Tree-sliced distances between measures in R^d.

One module per method, named after its function: :mod:`~tsw.euclidean.tsw_sl` (TSW-SL),
:mod:`~tsw.euclidean.db_tsw` (Db-TSW, Db-TSW⊥), :mod:`~tsw.euclidean.circular_tsw`
(CircularTSW), :mod:`~tsw.euclidean.spatial_tsw` (SpatialTSW, with the maps of
:mod:`~tsw.euclidean.mappings`) and :mod:`~tsw.euclidean.partial_tsw` (PartialTSW, unequal
masses). Each holds its projection and its public function; the private ``_lines`` holds
the geometry they share (coordinates on lines, distances to lines).
"""
