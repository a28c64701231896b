"""What a new user reads: the benchmark table's columns, the loss modules' randomness.

The main job (``python -m benchmarks.gradient_flow``) prints this run's table beside the
papers' published one. The columns of the first are explained under it, and the second
says which of its iterations the run reached and which column compares. The loss
modules' documentation says what ``resample=False`` gives, checked against finite
differences.
"""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch

import tsw
from benchmarks import gradient_flow


def _run(tmp_path, capsys, iters: int) -> str:
    args = ["--iters", str(iters), "--seeds", "1", "--n", "12", "--lines", "4"]
    assert gradient_flow.main([*args, "--methods", "sw2", "--out", str(tmp_path)]) == 0
    return capsys.readouterr().out


def test_the_last_column_of_the_run_is_explained(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gradient_flow, "PUBLISHED_ITERS", (10, 20, 30, 40, 50))
    out = _run(tmp_path, capsys, 10)
    run = out[out.index("this run\n") : out.index("published exact W2^2")]
    assert "| it 10, f32 metric |" in run
    assert "it C: exact W2^2 between the flowed cloud and the target after C Adam" in run
    assert "it 10, f32 metric: the same cloud at the last step" in run
    published = out[out.index("published exact W2^2") :]
    assert "| it 10 " in published  # reached
    assert "| it 20* " in published  # past the run
    assert "The papers ran 50 iterations, this run 10 (* marks the iterations it did not" in (
        published
    )
    assert "Their it 10 compares with this run's it 10, f32 metric." in published


def test_a_run_sharing_no_published_iteration_says_so(tmp_path, capsys):
    out = _run(tmp_path, capsys, 5)
    published = out[out.index("published exact W2^2") :]
    assert "| it 500* " in published
    assert "None of their iterations is among this run's checkpoints." in published


def test_resample_false_docs_say_the_gradient_holds_a_detached_centre():
    """The documented behaviour: a fixed draw with the default centre has a gradient that
    is not the value's derivative (finite differences), and is with ``center`` given."""
    for doc in (tsw.nn.__doc__, inspect.getdoc(tsw.nn.DbTSWLoss)):
        assert "detached" in doc
        assert "``center``" in doc
    g = torch.Generator().manual_seed(0)
    X = torch.randn(6, 2, generator=g, dtype=torch.float64, requires_grad=True)
    Y = torch.randn(5, 2, generator=g, dtype=torch.float64) + 1
    loss = tsw.nn.DbTSWLoss(n_trees=8, seed=0, resample=False)
    error = importlib.import_module("torch.autograd.gradcheck").GradcheckError
    with pytest.raises(error, match="Jacobian mismatch"):
        torch.autograd.gradcheck(lambda X: loss(X, Y), (X,))
    fixed = tsw.nn.DbTSWLoss(n_trees=8, seed=0, resample=False, center=torch.zeros(2))
    assert torch.autograd.gradcheck(lambda X: fixed(X, Y), (X,))
