"""The package layout: public names, private method modules, imports that go down only."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import tsw

MODULES = sorted(m.name for m in pkgutil.walk_packages(tsw.__path__, "tsw."))

#: the only modules that call the compiled kernels: core's closed form, splits, sort, S^2
#: angles and Flowtree's matching choose the compiled or the torch (NumPy, Python)
#: implementation there
KERNEL_CALLERS = {
    "tsw.support._flowmatch",
    "tsw.core.tree_wasserstein",
    "tsw.core.tree_plan",
    "tsw.core.splits",
    "tsw.core._sort",
    "tsw.core._angles",
}


def test_every_public_name_is_there():
    for name in tsw.__all__:
        assert hasattr(tsw, name), name


def test_no_function_shadows_its_own_submodule():
    """``pkg.name`` is the module ``pkg/name.py`` for every module file of the package."""
    for name in MODULES:
        parent, _, leaf = name.rpartition(".")
        module = importlib.import_module(name)
        assert getattr(importlib.import_module(parent), leaf) is module, name


def test_method_modules_are_private():
    """One private module per method: a public name lives in a package, not a module."""
    packages = (
        "tsw.euclidean",
        "tsw.sphere",
        "tsw.sliced",
        "tsw.support",
        "tsw.barycenters",
        "tsw.curved",
    )
    for pkg in (*packages, "tsw.search"):
        public = [m for m in MODULES if m.startswith(pkg + ".") and m.rsplit(".", 1)[1][0] != "_"]
        assert public in ([], [f"{pkg}.mappings"]), public


def test_every_package_and_module_says_what_lives_there():
    for name in MODULES:
        assert importlib.import_module(name).__doc__, name


def _source(name: str) -> Path:
    return Path(importlib.import_module(name).__file__)


def _imports(name: str) -> set[str]:
    """The tsw modules ``name`` imports anywhere in its source, in functions too."""
    deps = set()
    for node in ast.walk(ast.parse(_source(name).read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tsw"):
            deps.add(node.module)
            deps.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            deps.update(a.name for a in node.names if a.name.startswith("tsw"))
    return {d for d in deps if d in MODULES and d != name}


def _graph() -> dict[str, set[str]]:
    graph = {name: _imports(name) for name in MODULES}
    # a package imports its own submodules from its __init__: not an edge back
    return {
        name: {d for d in deps if not (d.rsplit(".", 1)[0] == name and name in d)}
        for name, deps in graph.items()
    }


def test_imports_read_from_the_source_include_those_in_functions():
    assert "tsw.core._kernels" in _imports("tsw.core._sort")
    deps = _imports("tsw.sliced._ssw")  # POT's solver is imported inside the function
    assert "tsw.core._api" in deps


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        if state.get(node) == 1:
            raise AssertionError("import cycle: " + " -> ".join([*path, node]))
        if state.get(node) == 2:
            return
        state[node] = 1
        for dep in graph[node]:
            visit(dep, [*path, node])
        state[node] = 2

    for name in graph:
        visit(name, [])


def test_core_imports_no_method_package():
    for name, deps in _graph().items():
        if name.startswith("tsw.core"):
            assert all(d.startswith("tsw.core") for d in deps), (name, deps)


def test_search_sits_on_core_and_support():
    """``tsw.search`` imports ``core`` and ``support`` only; only ``tsw`` imports it."""
    graph = _graph()
    for name, deps in graph.items():
        if name.startswith("tsw.search"):
            assert all(d.startswith(("tsw.core", "tsw.support", "tsw.search")) for d in deps), (
                name,
                deps,
            )
        elif name != "tsw":
            assert not any(d.startswith("tsw.search") for d in deps), (name, deps)


def test_curved_imports_core_and_the_spheres_geometry_only():
    """``tsw.curved`` (hyperbolic space, SPD matrices, products) sits beside the sphere."""
    allowed = ("tsw.core", "tsw.curved", "tsw.sphere")
    for name, deps in _graph().items():
        if name.startswith("tsw.curved"):
            assert all(d.startswith(allowed) for d in deps), (name, deps)


def test_the_compiled_kernels_sit_behind_one_seam():
    for name, deps in _graph().items():
        if "tsw.core._kernels" in deps:
            assert name in KERNEL_CALLERS, name
        if {"tsw.core._numba_kernels", "tsw.core._numba_trees"} & deps:
            assert name == "tsw.core._kernels", name


def test_no_module_outgrows_its_purpose():
    """The driver stays small; no module but the compiled kernels passes 800 lines."""
    assert len(_source("tsw.core._driver").read_text().splitlines()) <= 500
    for name in MODULES:
        lines = len(_source(name).read_text().splitlines())
        if name != "tsw.core._numba_kernels":
            assert lines <= 800, (name, lines)


def test_no_method_passes_the_shared_options_by_hand():
    """The public-API decorator binds them: no method module names ``seed=seed``."""
    for name in MODULES:
        if name.startswith(("tsw.euclidean.", "tsw.sphere.", "tsw.sliced.", "tsw.curved.")):
            text = _source(name).read_text()
            for option in ("generator", "validate", "power", "log", "chunk_size", "process_group"):
                assert f"{option}={option}" not in text, (name, option)
