"""Sphinx configuration: ``python -m sphinx -W -b html docs docs/_build/html``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # document this checkout, not an installed copy
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TSW_DOCS_QUICK", "1")

import tsw  # noqa: E402

project = "tsw"
author = "The tsw maintainers"
copyright = "2026, The tsw maintainers"
release = tsw.__version__
version = tsw.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    # MathJax served from the built site's _static/, so that math renders offline
    "sphinx-mathjax-offline",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "gallery", "generated/*.examples", "auto_examples/*.ipynb", "**.zip"]
root_doc = "index"
default_role = "py:obj"
nitpicky = False

autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"  # the numpydoc Parameters sections say the types
autodoc_default_options = {"members": False}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()

html_theme = "alabaster"
html_static_path: list[str] = []
html_theme_options = {"description": "Tree-sliced optimal transport in PyTorch"}

sphinx_gallery_conf = {
    "examples_dirs": "gallery",  # docs/gallery: executed; the repository's examples/ is not
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "matplotlib_animations": False,
    "reset_modules": ("matplotlib",),
    # no execution-times page: it loads its table scripts from CDNs, and the site is offline
    "write_computation_times": False,
}
