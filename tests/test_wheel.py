"""The built wheel stands on its own: installed into a fresh environment, outside the
repository, it imports as ``tsw`` and runs the notebooks (which import only ``tsw`` and
ordinary third-party packages, never the repository's ``benchmarks``).

The environment is a plain ``venv`` whose site-packages holds the wheel (installed with
``--no-deps``) and a ``.pth`` file that lists the site directories of the interpreter
running the tests, so torch, POT and matplotlib come from wherever that interpreter
finds them (the system, or the virtual environment the tests run in) and nothing is
downloaded. ``venv --system-site-packages`` would not do: from inside a virtual
environment it inherits the base interpreter's packages, not the running one's. Each
notebook's code cells run as one script with ``TSW_NOTEBOOK_QUICK=1`` in a temporary
directory, so neither the repository nor its ``benchmarks`` package is importable.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import tsw

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: run by default; the others run with -m slow (each takes 10 to 40 s: by default the
#: wheel's imports are checked, and test_notebooks.py runs every notebook from the
#: repository)
DEFAULT_NOTEBOOKS: set[str] = set()


def _run(*cmd: str | Path, cwd: Path, env: dict | None = None) -> str:
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _site_dirs() -> list[str]:
    """The running interpreter's site directories (where its packages are installed).

    Only directories named ``site-packages`` or ``dist-packages``: never the repository
    itself (on ``sys.path`` in the tests), so that the wheel is the only ``tsw`` and the
    repository's ``benchmarks`` stays out of reach. A virtual environment inside the
    clone (``python -m venv .venv``) is a site directory like any other: the ``.pth``
    file lists the directory, and Python does not read the ``.pth`` files within it (an
    editable install's), so the repository stays out of reach there too.
    """
    candidates = [*site.getsitepackages(), *sys.path]
    if site.ENABLE_USER_SITE:
        candidates.append(site.getusersitepackages())
    dirs: list[str] = []
    for entry in candidates:
        path = Path(entry or ".").resolve()
        wanted = path.name in ("site-packages", "dist-packages") and path.is_dir()
        if wanted and str(path) not in dirs and path != ROOT:
            dirs.append(str(path))
    return dirs


def test_a_venv_inside_the_clone_is_a_site_directory(monkeypatch, tmp_path):
    """``python -m venv .venv`` in the clone: its site-packages holds torch and the rest,
    so the wheel's venv must list it (it skipped every directory under the repository,
    and two tests failed there); the repository itself is never listed."""
    inside = tmp_path / ".venv" / "lib" / "python3" / "site-packages"
    inside.mkdir(parents=True)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), str(inside), *sys.path])
    dirs = _site_dirs()
    assert str(inside.resolve()) in dirs
    assert str(tmp_path.resolve()) not in dirs


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python of a fresh venv holding only the wheel, the wheel's path)."""
    tmp = tmp_path_factory.mktemp("wheel")
    _run(sys.executable, "-m", "pip", "wheel", ROOT, "--no-deps", "--no-build-isolation",
         "-q", "-w", tmp / "dist", cwd=tmp)  # fmt: skip
    (wheel,) = (tmp / "dist").glob("*.whl")
    _run(sys.executable, "-m", "venv", "--without-pip", tmp / "venv", cwd=tmp)
    python = tmp / "venv" / ("Scripts" if os.name == "nt" else "bin") / "python"
    purelib = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                   cwd=tmp, env=_clean_env()).strip()  # fmt: skip
    # the running interpreter's pip puts the wheel into the venv's own site-packages
    _run(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
         "--target", purelib, wheel, cwd=tmp)  # fmt: skip
    # then the running interpreter's packages (torch, POT, matplotlib, ...) after it
    (Path(purelib) / "_tsw_test_site_dirs.pth").write_text("\n".join(_site_dirs()) + "\n")
    return python, wheel


def _clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return env | {"MPLBACKEND": "Agg", **extra}


def test_wheel_metadata(installed):
    _, wheel = installed
    assert wheel.name.startswith(f"torch_tsw-{tsw.__version__}-")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Name: torch-tsw" in meta
    assert f"Version: {tsw.__version__}" in meta
    assert "tsw/py.typed" in names
    assert "tsw/datasets.py" in names
    assert not any(n.startswith(("benchmarks/", "tests/")) for n in names)
    requires = {line.split()[1] for line in meta.splitlines() if line.startswith("Requires-Dist")
                and "extra ==" not in line}  # fmt: skip
    assert {r.split("<")[0].split(">")[0].split("=")[0] for r in requires} == {
        "torch",
        "numpy",
        "pot",
    }


def test_installed_package_is_imported_from_the_venv(installed, tmp_path):
    python, _ = installed
    code = "import tsw, json; print(json.dumps([tsw.__file__, tsw.__version__]))"
    path, version = json.loads(_run(python, "-c", code, cwd=tmp_path, env=_clean_env()))
    assert Path(path).is_relative_to(python.parents[1]), path
    assert version == tsw.__version__
    fails = "import benchmarks"
    proc = subprocess.run([python, "-c", fails], cwd=tmp_path, env=_clean_env(), check=False)
    assert proc.returncode != 0, "the repository's benchmarks package is importable"


def test_venv_sees_the_running_interpreters_packages(installed, tmp_path):
    """The test venv imports torch, numpy and POT from where the tests import them.

    A ``venv --system-site-packages`` made from inside a virtual environment would see the
    base interpreter's copies instead (or none), which is what failed there.
    """
    python, _ = installed
    names = ["torch", "numpy", "ot"]
    code = (
        "import importlib, json; "
        f"print(json.dumps([importlib.import_module(n).__file__ for n in {names!r}]))"
    )
    found = json.loads(_run(python, "-c", code, cwd=tmp_path, env=_clean_env()))
    for name, path in zip(names, found, strict=True):
        expected = __import__(name).__file__
        assert Path(path).resolve() == Path(expected).resolve(), (name, path, expected)


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, id=p.stem, marks=() if p.stem in DEFAULT_NOTEBOOKS else pytest.mark.slow)
        for p in NOTEBOOKS
    ],
)
def test_notebook_runs_from_the_installed_wheel(installed, path, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    python, _ = installed
    nb = nbformat.read(path, as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    script = "\n\n".join([*code, "import tsw\nprint('TSW_FILE', tsw.__file__)"])
    (tmp_path / "notebook.py").write_text(script)
    out = _run(python, "notebook.py", cwd=tmp_path, env=_clean_env(TSW_NOTEBOOK_QUICK="1"))
    where = next(line for line in out.splitlines() if line.startswith("TSW_FILE"))
    assert Path(where.split(maxsplit=1)[1]).is_relative_to(python.parents[1]), where
