"""Packaging: the runtime dependencies are what ``tsw/`` imports; one version everywhere."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tsw

ROOT = Path(__file__).resolve().parents[1]
tomllib = pytest.importorskip("tomllib")  # Python >= 3.11; the checks need no more

#: import name -> distribution name, for every third-party module ``tsw/`` may import
DISTRIBUTION = {"torch": "torch", "numpy": "numpy", "ot": "pot"}

#: import name -> (distribution, extra, the files importing it) for optional modules:
#: imported by tsw/ only where an ImportError falls back to another path, and declared in an
#: extra, not as a dependency
OPTIONAL = {
    "numba": ("numba", "fast", {"_numba_kernels.py", "_numba_trees.py"}),
    "tqdm": ("tqdm", "bench", {"_progress.py"}),  # the progress bars of long calls
    "sklearn": ("scikit-learn", "sklearn", {"_sklearn.py"}),  # tsw.TreeEmbedding
    "distributed": ("distributed", "dask", {"_dask.py"}),  # tsw.DaskW1Index
}


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirement_name(req: str) -> str:
    """The normalised distribution name of a PEP 508 requirement string."""
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    assert name, req
    return re.sub(r"[-_.]+", "-", name.group(1)).lower()


def imported_top_level_modules(package: Path) -> dict[str, set[str]]:
    """Every top-level module imported anywhere in ``package`` (module and function level,
    ``if TYPE_CHECKING`` blocks excluded), with the files that import it."""
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        type_only: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                type_only |= {id(n) for b in node.body for n in ast.walk(b)}
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(path.name)
    return found


def test_the_scan_sees_imports_inside_functions(tmp_path):
    (tmp_path / "m.py").write_text("import os\n\ndef f():\n    import matplotlib.pyplot\n")
    assert set(imported_top_level_modules(tmp_path)) == {"os", "matplotlib"}


def test_runtime_dependencies_are_exactly_what_tsw_imports():
    imported = imported_top_level_modules(ROOT / "tsw")
    third_party = {
        m: files
        for m, files in imported.items()
        if m != "tsw"
        and m != "__future__"
        and m not in sys.stdlib_module_names
        and m not in OPTIONAL
    }
    unknown = {m: sorted(f) for m, f in third_party.items() if m not in DISTRIBUTION}
    assert not unknown, f"tsw/ imports modules with no declared distribution: {unknown}"
    needed = {DISTRIBUTION[m] for m in third_party}
    declared = {_requirement_name(r) for r in _pyproject()["project"]["dependencies"]}
    assert declared == needed, (
        f"pyproject dependencies {sorted(declared)} but tsw/ imports {sorted(needed)}"
    )


def test_optional_modules_are_extras_with_a_fallback():
    project = _pyproject()["project"]
    declared = {_requirement_name(r) for r in project["dependencies"]}
    imported = imported_top_level_modules(ROOT / "tsw")
    for module, (dist, extra, files) in OPTIONAL.items():
        assert dist not in declared, f"{dist} must stay optional"
        extras = {_requirement_name(r) for r in project["optional-dependencies"][extra]}
        assert dist in extras, f"{dist} must be in the {extra!r} extra"
        # only the listed modules import it, each inside a try / except ImportError
        assert imported.get(module) == files, imported.get(module)
    loader = (ROOT / "tsw" / "core" / "_kernels.py").read_text()
    assert "from tsw.core import _numba_kernels, _numba_trees\n    except ImportError:" in loader
    progress = (ROOT / "tsw" / "core" / "_progress.py").read_text()
    assert "from tqdm.auto import tqdm\n            except ImportError:" in progress


def test_scipy_is_a_test_dependency_only():
    project = _pyproject()["project"]
    assert "scipy" not in {_requirement_name(r) for r in project["dependencies"]}
    assert "scipy" in {_requirement_name(r) for r in project["optional-dependencies"]["test"]}


def test_distribution_name_is_not_the_taken_tsw():
    project = _pyproject()["project"]
    assert project["name"] == "torch-tsw"
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"pip install [^\n]*\btorch-tsw\b", readme), "README: no pip install torch-tsw"


def test_version_is_written_once():
    config = _pyproject()
    assert "version" not in config["project"]
    assert "version" in config["project"]["dynamic"]
    assert config["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "tsw.__version__"}
    changelog = (ROOT / "CHANGELOG.md").read_text()
    first = re.search(r"^## (\S+)", changelog, flags=re.MULTILINE)
    assert first, "CHANGELOG.md has no '## VERSION' heading"
    assert first.group(1) == tsw.__version__
    citation = re.search(r"^version: (\S+)$", (ROOT / "CITATION.cff").read_text(), re.MULTILINE)
    assert citation, "CITATION.cff has no version"
    assert citation.group(1) == tsw.__version__


def test_license_file_is_mit():
    assert _pyproject()["project"]["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_import_and_first_calls_stay_light():
    """``import tsw`` loads neither POT nor scikit-learn, and no first call loads sympy.

    POT (with scikit-learn) is imported by the functions that call it; sympy comes with
    ``torch.broadcast_shapes`` and took 0.4-1.4 s of the first call of a process.
    """
    code = (
        "import sys, torch, tsw\n"
        "print(sorted(m for m in ('ot', 'sklearn', 'sympy') if m in sys.modules))\n"
        "X = torch.randn(30, 4, dtype=torch.float64, requires_grad=True)\n"
        "Y = torch.randn(20, 4, dtype=torch.float64)\n"
        "S = torch.nn.functional.normalize(X.detach(), dim=-1).requires_grad_()\n"
        "T = torch.nn.functional.normalize(Y, dim=-1)\n"
        "for f in (tsw.db_tsw, tsw.tsw_sl, tsw.sw, tsw.circular_tsw):\n"
        "    kw = {'radius': 0.5} if f is tsw.circular_tsw else {}\n"
        "    f(X, Y, seed=0, **kw).backward()\n"
        "tsw.stsw(S, T, seed=0).backward()\n"
        "print(sorted(m for m in ('ot', 'sklearn', 'sympy') if m in sys.modules))\n"
    )
    env = {**os.environ, "TSW_NUMBA": "0"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True, timeout=300)  # fmt: skip
    assert out.stdout.split("\n")[:2] == ["[]", "[]"], out.stdout
