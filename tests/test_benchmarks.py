"""Smoke tests of the benchmark command-line programs (tiny settings)."""

from __future__ import annotations

import json

from benchmarks import gradient_flow, runtime


def test_runtime_quick(tmp_path, capsys):
    assert runtime.main(["--quick", "--rounds", "1", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "runtime_single.json").read_text())
    row = data["rows"][0]
    assert row["db_tsw / lower"] > 0
    assert "POT sw p=2 [s]" in row
    assert "lower limit" in capsys.readouterr().out


def test_runtime_sweep_plot(tmp_path):
    assert (
        runtime.main(["--quick", "--rounds", "1", "--sweep", "lines", "--out", str(tmp_path)]) == 0
    )
    assert (tmp_path / "runtime_lines.png").stat().st_size > 0
    assert (tmp_path / "runtime_lines.csv").read_text().count("\n") == 4  # header + 3 rows


def test_gradient_flow_tiny(tmp_path, capsys):
    args = ["--iters", "10", "--seeds", "1", "--n", "20", "--lines", "8", "--out", str(tmp_path)]
    assert gradient_flow.main(args) == 0
    out = capsys.readouterr().out
    for name in ("SW_2", "SW_1", "TSW-SL", "Db-TSW"):
        assert name in out
    data = json.loads((tmp_path / "25gaussians.json").read_text())
    errors = [r["errors"]["10"] for runs in data["runs"].values() for r in runs]
    assert all(e > 0 for e in errors)
    assert (tmp_path / "25gaussians.png").exists()


def test_runtime_sphere_quick(tmp_path, capsys):
    from benchmarks import runtime_sphere

    args = ["--quick", "--rounds", "1", "--ssw-projections", "4", "--out", str(tmp_path)]
    assert runtime_sphere.main(args) == 0
    data = json.loads((tmp_path / "runtime_sphere.json").read_text())
    assert data["times"]["tsw.stsw p=1 / lower limit"] > 0
    assert "POT SSW p=2 L=4 [s]" in data["times"]
    assert "lower limit" in capsys.readouterr().out
