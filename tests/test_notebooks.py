"""Execute every notebook in ``notebooks/``, so they cannot rot.

The default run executes each notebook with ``TSW_NOTEBOOK_QUICK=1``: the notebook's
settings cell reads it into a global ``QUICK`` and shrinks every loop and sample to a
smoke run (a few optimisation steps). ``-m slow`` executes them in full, without the
variable. Contract for every notebook: it reads ``TSW_NOTEBOOK_QUICK`` into ``QUICK``
(``"1"`` means fast) and runs to the end without an error.

What is checked on the executed notebook (not on the test's own environment): every code
cell ran, none produced an error output, the notebook printed or displayed something,
and a probe cell appended after the last cell reports the value of the notebook's own
``QUICK`` global, so a notebook that ignores the variable (and would run in full in the
default run) fails here.

What is checked on the committed files (no execution): every notebook was run top to
bottom without an error, and every code cell that draws has a picture in its output, so
a reader on a code host sees the figures.
"""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]  # notebooks run from the repository root
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PROBE = "__tsw_notebook_probe__"


def test_notebooks_exist():
    assert [p.name for p in NOTEBOOKS], "no notebook found"


#: a call that draws with matplotlib (outside imports and function definitions)
DRAWS = re.compile(
    r"\bplt\.|\bmatplotlib\.|\.(plot|imshow|matshow|scatter|semilogy|semilogx|loglog|hist|bar"
    r"|barh|contour|contourf|pcolormesh|errorbar|fill_between|plot_wireframe|plot_surface)\("
)


def _draws(source: str) -> bool:
    """Whether a cell's top-level statements draw (definitions and imports do not)."""
    tree = ast.parse(source)
    skip = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return any(
        DRAWS.search(ast.get_source_segment(source, node) or "")
        for node in tree.body
        if not isinstance(node, skip)
    )


def test_draws_recognises_drawing_cells():
    assert _draws("fig, ax = plt.subplots()\nax.plot([1, 2])")
    assert _draws("for ax in axes:\n    ax.scatter(*X.T)")
    assert not _draws("import matplotlib.pyplot as plt\nX = 1")
    assert not _draws("def show(ax):\n    ax.imshow(X)")
    assert not _draws("print(tsw.db_tsw(X, Y))")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebook_ran_in_full_with_its_figures(path):
    """The committed outputs are a complete run, and every drawing cell shows its figure."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.get("execution_count") for c in code]
    assert counts == list(range(1, len(code) + 1)), (
        f"{path.name}: committed execution counts {counts}; run it top to bottom and save"
    )
    for i, cell in enumerate(code, start=1):
        outputs = cell.get("outputs", [])
        errors = [o for o in outputs if o.get("output_type") == "error"]
        assert not errors, f"{path.name}, cell [{i}]: committed with an error output"
        if _draws(cell.source):
            images = [o for o in outputs if "image/png" in o.get("data", {})]
            assert images, (
                f"{path.name}, cell [{i}] draws but its committed output holds no image: "
                "execute it with MPLBACKEND=module://matplotlib_inline.backend_inline"
            )


def _client(path: Path, *, quick: bool):
    """The notebook with the probe cell appended, and its client (not yet executed)."""
    nb = nbformat.read(path, as_version=4)
    sources = "".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "TSW_NOTEBOOK_QUICK" in sources, f"{path.name} does not read TSW_NOTEBOOK_QUICK"
    n_code = sum(c.cell_type == "code" for c in nb.cells)
    nb.cells.append(
        nbformat.v4.new_code_cell(f'print("{PROBE}", repr(globals().get("QUICK", "undefined")))')
    )
    client = nbclient.NotebookClient(
        nb,
        timeout=600 if quick else 3600,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT)}},
        shutdown_kernel="immediate",  # the outputs are read after execute(); no need to wait
    )
    return nb, n_code, client


def _check(path: Path, nb, n_code: int, *, quick: bool):
    code = [c for c in nb.cells if c.cell_type == "code"]
    outputs = [o for c in code for o in c.get("outputs", [])]
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors, [(e.get("ename"), e.get("evalue")) for e in errors]
    assert all(c.get("execution_count") for c in code), "a code cell did not run"
    probe = "".join(o.get("text", "") for o in code[-1].get("outputs", []))
    assert probe.strip() == f"{PROBE} {quick!r}", (
        f"{path.name}: the notebook's QUICK is {probe.strip()!r} with "
        f"TSW_NOTEBOOK_QUICK={'1' if quick else 'unset'}"
    )
    produced = [
        o
        for c in code[:n_code]
        for o in c.get("outputs", [])
        if o.get("output_type") in ("stream", "display_data", "execute_result")
    ]
    assert produced, f"{path.name} printed and displayed nothing"
    return nb


def _set_env(monkeypatch, quick: bool) -> None:
    if quick:
        monkeypatch.setenv("TSW_NOTEBOOK_QUICK", "1")
    else:
        monkeypatch.delenv("TSW_NOTEBOOK_QUICK", raising=False)
    monkeypatch.setenv("MPLBACKEND", "Agg")


@pytest.fixture(scope="module")
def quick_runs():
    """Every notebook executed quick, all kernels at once (their start-up and imports,
    most of a quick run, overlap on the two cores); an error is kept for its test."""
    mp = pytest.MonkeyPatch()
    _set_env(mp, quick=True)
    try:
        runs = {path: _client(path, quick=True) for path in NOTEBOOKS}

        async def execute_all():
            async def one(client):
                try:
                    await client.async_execute()
                except Exception as exc:  # reported by the notebook's own test
                    return exc
                return None

            return await asyncio.gather(*(one(c) for _, _, c in runs.values()))

        errors = asyncio.run(execute_all())
    finally:
        mp.undo()
    return {path: (*runs[path], err) for path, err in zip(runs, errors, strict=True)}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_quick(path, quick_runs):
    nb, n_code, _, error = quick_runs[path]
    if error is not None:
        raise error
    _check(path, nb, n_code, quick=True)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_in_full(path, monkeypatch):
    _set_env(monkeypatch, quick=False)
    nb, n_code, client = _client(path, quick=False)
    client.execute()
    _check(path, nb, n_code, quick=False)
