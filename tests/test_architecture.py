"""The worked example of ``ARCHITECTURE.md`` runs and means what it says."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import torch

import tsw

ROOT = Path(__file__).resolve().parents[1]


def _example_namespace() -> dict:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 2, "the worked example has a function block and a loss block"
    namespace: dict = {}
    exec(blocks[0], namespace)
    return namespace


def test_hard_split_example_equals_db_tsw_at_large_delta():
    ns = _example_namespace()
    g = torch.Generator().manual_seed(0)
    X = torch.randn(30, 5, generator=g, dtype=torch.float64)
    Y = torch.randn(25, 5, generator=g, dtype=torch.float64) + 0.5
    got = ns["hard_tsw"](X, Y, n_trees=20, n_lines=3, seed=1)
    expected = tsw.db_tsw(X, Y, n_trees=20, n_lines=3, delta=1e7, seed=1)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)
    # and it is not Db-TSW at its default delta: the split matters
    assert abs(got - tsw.db_tsw(X, Y, n_trees=20, n_lines=3, seed=1)) > 1e-3
    batched = ns["hard_tsw"](torch.stack([X, X]), torch.stack([Y, Y + 1]), n_trees=20, n_lines=3)
    assert batched.shape == (2,)


def test_hard_split_example_loss_module():
    ns = _example_namespace()
    from tsw.nn import _loss_from

    cls = _loss_from(ns["hard_tsw"], "HardTSWLoss", "Nearest-line TSW loss.", "")
    options = set(inspect.signature(cls).parameters)
    own = {"n_trees", "n_lines", "p", "center", "root_std"}
    shared = {"validate", "power", "chunk_size", "process_group", "gather"}
    assert options == own | shared | {"reduction", "seed", "resample"}
    X = torch.randn(10, 3, dtype=torch.float64, requires_grad=True)
    cls(n_trees=5, n_lines=2, seed=0)(X, torch.randn(12, 3, dtype=torch.float64)).backward()
    assert torch.isfinite(X.grad).all()
