"""The public functions of :mod:`tsw` that are not distances between two measures.

Read by the contract suite and the API tests: a public function outside this set is a
distance and must join their registries.
"""

NOT_DISTANCES = frozenset(
    {
        "trees_needed",  # a pilot's per-tree costs: core/test_monte_carlo.py
        "line_system_cost",
        "tree_wasserstein",  # one explicit tree: core/test_tree_wasserstein.py
        "wasserstein_1d",
        "s3w_map",
        "sample_chain_lines",
        "sample_concurrent_lines",
        "sample_projections",
        "sample_rotations",
        "sample_sphere_projections",
        "sample_spherical_trees",
        "sample_mixed_curvature_trees",
        "sample_spd_projections",
        "riemannian_step",  # a step of a gradient flow: tests/curved/test_steps.py
        # trees built from the data, and what reads them: tests/support/
        "sample_quadtrees",
        "sample_cluster_trees",
        "tree_embedding",
        "pairwise_tsw",
        # a distance, differentiable in the weights only (points are placed on tree
        # nodes), which the shared suite differentiates in: its contract properties are
        # tested in support/test_support_tsw.py
        "support_tsw",
        "pairwise_flowtree",  # Flowtree and fitted lengths: support/test_flowtree.py, test_fit.py
        "fit_edge_lengths",
        "tree_sliced_kernel",  # exp(-t pairwise_tsw), a kernel matrix: search/test_sklearn.py
        "flowtree",  # a plan and its cost
        # transport plans (a plan and its cost, not a distance): test_plans.py
        "barycentric_map",
        "expected_sliced_plan",
        "expected_tree_sliced_plan",
        "min_sliced_transport_plan",
        "sliced_plans",
        "swgg",
        "tree_plan",
        # barycenters (a support or masses, not a distance): barycenters/
        "free_support_barycenter",
        "tree_barycenter",
    }
)
