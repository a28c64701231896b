"""Tree-sliced distances between measures in R^d.

One private module per method, named after its function with a leading underscore (so
that no function shadows its module): ``_tsw_sl`` (:func:`tsw.tsw_sl`, TSW-SL),
``_db_tsw`` (:func:`tsw.db_tsw`, Db-TSW and Db-TSW⊥), ``_circular_tsw``
(:func:`tsw.circular_tsw`), ``_spatial_tsw`` (:func:`tsw.spatial_tsw`, with the maps of
the public :mod:`tsw.euclidean.mappings`) and ``_partial_tsw`` (:func:`tsw.partial_tsw`,
unequal masses), and ``_tree_sliced_plan`` (:func:`tsw.expected_tree_sliced_plan`, the
transport plan of Db-TSW's or TSW-SL's trees). Each holds its projection and its public
function, re-exported by :mod:`tsw`; the private ``_lines`` holds the geometry they share
(coordinates on lines, distances to lines).
"""
