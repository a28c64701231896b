"""The package layout: public names, old module paths, no import cycles, docstrings."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import tsw

#: ``tsw.__all__`` before the subpackages: user code written against it must not change
PUBLIC_BEFORE = [
    "ChainLines",
    "ConcurrentLines",
    "SphericalTrees",
    "__version__",
    "circular_tsw",
    "db_tsw",
    "line_system_cost",
    "mappings",
    "max_sw",
    "nn",
    "partial_sw",
    "partial_tsw",
    "s3w",
    "s3w_map",
    "s3w_unif",
    "sample_chain_lines",
    "sample_concurrent_lines",
    "sample_projections",
    "sample_rotations",
    "sample_sphere_projections",
    "sample_spherical_trees",
    "spatial_stsw",
    "spatial_tsw",
    "ssw",
    "ssw_unif",
    "stsw",
    "stsw_unif",
    "sw",
    "tree_wasserstein",
    "tsw_sl",
    "unbalanced_sw",
    "wasserstein_1d",
]

MODULES = sorted(m.name for m in pkgutil.walk_packages(tsw.__path__, "tsw."))


def test_public_names_of_before_are_all_there():
    assert set(PUBLIC_BEFORE) <= set(tsw.__all__)
    for name in tsw.__all__:
        assert hasattr(tsw, name), name


@pytest.mark.parametrize(
    ("old", "name"),
    [
        ("tsw.trees", "ConcurrentLines"),
        ("tsw.tree_wasserstein", "line_cost"),
        ("tsw.one_d", "wasserstein_1d"),
        ("tsw.mappings", "poly_map"),
        ("tsw.splits", "distance_split"),
        ("tsw.stsw", "stsw_unif"),
        ("tsw.sliced", "max_sw"),
        ("tsw.unbalanced_sliced", "partial_sw"),
        # the method modules before they became private (issue 16)
        ("tsw.euclidean.db_tsw", "resolve_db_trees"),
        ("tsw.euclidean.tsw_sl", "tsw_sl"),
        ("tsw.euclidean.circular_tsw", "circular_tsw"),
        ("tsw.euclidean.spatial_tsw", "spatial_tsw"),
        ("tsw.euclidean.partial_tsw", "partial_tsw"),
        ("tsw.sphere.stsw", "stsw_unif"),
        ("tsw.sphere.spatial_stsw", "sphere_lift"),
        ("tsw.sliced.sw", "sample_projections"),
        ("tsw.sliced.ssw", "ssw_unif"),
        ("tsw.sliced.s3w", "s3w_map"),
        ("tsw.sliced.unbalanced_sw", "unbalanced_sw"),
    ],
)
def test_old_module_paths_still_import(old, name):
    assert hasattr(importlib.import_module(old), name)


def test_no_function_shadows_its_own_submodule():
    """``pkg.name`` is the module ``pkg/name.py`` for every module file of the package
    (``tsw.sliced.sw`` was both a module and the function ``sw`` re-exported there)."""
    for name in MODULES:
        parent, _, leaf = name.rpartition(".")
        module = importlib.import_module(name)
        assert getattr(importlib.import_module(parent), leaf) is module, name


def test_method_modules_are_private():
    """One private module per method: a public name lives in a package, not a module."""
    for pkg in ("tsw.euclidean", "tsw.sphere", "tsw.sliced"):
        public = [m for m in MODULES if m.startswith(pkg + ".") and m.rsplit(".", 1)[1][0] != "_"]
        assert public in ([], [f"{pkg}.mappings"]), public


def test_every_package_and_module_says_what_lives_there():
    for name in MODULES:
        assert importlib.import_module(name).__doc__, name


def _internal_imports() -> dict[str, set[str]]:
    """Module -> the tsw modules it imports at module level (read from the source)."""
    graph = {}
    for name in MODULES:
        tree = ast.parse(Path(importlib.import_module(name).__file__).read_text())
        deps = set()
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tsw"):
                deps.add(node.module)
                deps.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.startswith("tsw"))
        graph[name] = {d for d in deps if d in MODULES and d != name}
    return graph


def test_no_import_cycles():
    graph = _internal_imports()
    state: dict[str, int] = {}

    def visit(node, path):
        if state.get(node) == 1:
            raise AssertionError("import cycle: " + " -> ".join([*path, node]))
        if state.get(node) == 2:
            return
        state[node] = 1
        for dep in graph[node]:
            if not graph.get(dep) and dep.rsplit(".", 1)[0] == node:
                continue  # a package's own submodule, imported from its __init__
            visit(dep, [*path, node])
        state[node] = 2

    for name in graph:
        visit(name, [])


def test_core_imports_no_method_package():
    graph = _internal_imports()
    for name, deps in graph.items():
        if name.startswith("tsw.core"):
            assert all(d.startswith("tsw.core") for d in deps), (name, deps)
