"""Smoke tests of the benchmark command-line programs (tiny settings)."""

from __future__ import annotations

import json
import math

import pytest

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


def test_sphere_flow_tiny(tmp_path, capsys):
    from benchmarks import sphere_flow

    args = ["--per-component", "5", "--steps", "3", "--seeds", "1", "--trees", "5"]
    args += ["--ssw-projections", "3", "--s3w-projections", "4", "--ari-rotations", "2"]
    args += ["--ari-pool", "5", "--out", str(tmp_path)]
    assert sphere_flow.main(args) == 0
    out = capsys.readouterr().out
    for name in ("STSW", "SSW_2", "SW_2", "S3W_2", "RI-S3W_2", "ARI-S3W_2"):
        assert name in out
    data = json.loads((tmp_path / "sphere_flow.json").read_text())
    assert all(len(runs) == 1 for runs in data["runs"].values())
    assert (tmp_path / "sphere_flow.png").stat().st_size > 0


def test_vmf_sampler_and_icosahedron():
    import torch

    from benchmarks.sphere_flow import icosahedron, sample_vmf

    V = icosahedron()
    assert V.shape == (12, 3)
    G = V @ V.T
    assert torch.allclose(G.diagonal(), torch.ones(12, dtype=G.dtype))
    # every vertex has 5 nearest neighbours at the same angle
    off = G - 2 * torch.eye(12, dtype=G.dtype)
    assert torch.allclose(off.max(1).values, off.max(1).values[0].expand(12))
    x = sample_vmf(V[0], 50.0, 4000, torch.Generator().manual_seed(0))
    assert torch.allclose(x.norm(dim=1), torch.ones(4000, dtype=x.dtype))
    mean_w = float((x @ V[0]).mean())  # E<x, mu> = coth(kappa) - 1/kappa
    assert abs(mean_w - (1 / math.tanh(50.0) - 1 / 50.0)) < 2e-3


def test_outlier_flow_tiny(tmp_path, capsys):
    from benchmarks import outlier_flow

    args = ["--n", "40", "--steps", "3", "--seeds", "2", "--masses", "1,1.04"]
    args += ["--usw-reg", "0.1", "--pot-projections", "2", "--out", str(tmp_path)]
    assert outlier_flow.main(args) == 0
    out = capsys.readouterr().out
    for name in ("Db-TSW", "PartialTSW", "SW_2", "sliced partial OT", "SUOT"):
        assert name in out
    data = json.loads((tmp_path / "outlier_flow.json").read_text())
    assert set(data["runs"]) == {"ptsw-1", "ptsw-1.04", "sw", "psw", "usw-0.1"}
    assert all(0 <= r["on_outliers"] <= 100 for runs in data["runs"].values() for r in runs)
    assert (tmp_path / "outlier_flow.png").stat().st_size > 0


def test_outlier_problem_geometry():
    import torch

    from benchmarks.outlier_flow import distance_to_torus, noisy_problem, torus_surface

    P = torus_surface(500, torch.Generator().manual_seed(0))
    assert float(distance_to_torus(P).max()) < 1e-12  # points lie on the surface
    source, target, outliers = noisy_problem(0, n=200)
    assert source.shape == (200, 3)
    assert target.shape == (214, 3)
    assert outliers.shape == (14, 3)
    assert torch.equal(target[200:].double(), outliers.float().double())


def test_variance_quick(tmp_path, capsys):
    from benchmarks import variance

    assert variance.main(["--quick", "--seeds", "6", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for name in ("SW_2", "Db-TSW", "Db-TSW⊥", "STSW", "Table 4"):
        assert name in out
    data = json.loads((tmp_path / "variance.json").read_text())
    rows = data["gauss"]
    assert {r["sampling"] for r in rows} == {"iid", "orthogonal", "qmc"}
    assert all(r["cv"] > 0 and r["seconds"] > 0 for r in rows)
    assert all(r["variance ratio"] == 1.0 for r in rows if r["sampling"] == "iid")
    assert {r["sampling"] for r in data["table4"]} == {"iid", "orthogonal", "qmc"}
    assert [r["random"] for r in data["sources"]] == ["roots", "directions", "both"]
    assert (tmp_path / "variance.png").stat().st_size > 0


@pytest.mark.slow  # five spawned processes: about 50 s under load
def test_distributed_quick(tmp_path, capsys):
    from benchmarks import distributed

    assert distributed.main(["--quick", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "speed-up t(1)/t(R)" in text
    assert (tmp_path / "distributed.csv").read_text().count("\n") == 4
