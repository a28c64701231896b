"""The API reference lists every public name, and every cited reference is linked."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import tsw

ROOT = Path(__file__).resolve().parents[1]


def _listed() -> set[str]:
    """Fully qualified names of the autosummary entries of docs/api.rst."""
    names, module = set(), "tsw"
    for line in (ROOT / "docs" / "api.rst").read_text().splitlines():
        if line.startswith(".. currentmodule::"):
            module = line.split("::")[1].strip()
        elif re.fullmatch(r"   [A-Za-z_][A-Za-z0-9_]*", line):
            names.add(f"{module}.{line.strip()}")
    return names


def _public() -> dict[str, object]:
    found = {}
    for mod, names in [
        (tsw, tsw.__all__),
        (tsw.nn, tsw.nn.__all__),
        (tsw.sphere, tsw.sphere.__all__),
        # the curved spaces' geometry (their distances are listed at the top level)
        (tsw.curved, [n for n in tsw.curved.__all__ if n not in tsw.__all__]),
        (tsw.datasets, tsw.datasets.__all__),
        (tsw.metrics, tsw.metrics.__all__),
    ]:
        for n in names:
            obj = getattr(mod, n)
            if not inspect.ismodule(obj) and n != "__version__":
                found[f"{mod.__name__}.{n}"] = obj
    return found


def test_api_reference_lists_every_public_name():
    missing = set(_public()) - _listed()
    assert not missing, f"docs/api.rst does not list {sorted(missing)}"


def test_gallery_examples_import_only_tsw_and_plotting():
    for path in (ROOT / "docs" / "gallery").glob("plot_*.py"):
        imports = re.findall(r"^(?:import|from) (\w+)", path.read_text(), flags=re.MULTILINE)
        assert set(imports) <= {"matplotlib", "torch", "tsw", "math", "numpy"}, path.name


@pytest.mark.parametrize("name", sorted(_public()))
def test_every_reference_is_cited_and_documented(name):
    doc = inspect.getdoc(_public()[name]) or ""
    assert doc.strip(), f"{name} has no docstring"
    keys = re.findall(r"^\.\. \[(\w+)\]", doc, flags=re.MULTILINE)
    uncited = [k for k in keys if f"[{k}]_" not in doc]
    assert not uncited, f"{name}: references listed but never cited: {uncited}"
