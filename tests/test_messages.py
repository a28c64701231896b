"""What a new user reads first: the benchmark table's columns say what they are.

The main job (``python -m benchmarks.gradient_flow``) prints this run's table beside the
papers' published one. The columns of the first are explained under it, and the second
says which of its iterations the run reached and which column compares.
"""

from __future__ import annotations

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
