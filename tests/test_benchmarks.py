"""Smoke tests of the benchmark command-line programs (tiny settings)."""

from __future__ import annotations

import csv
import json
import math
import sys

import ot
import pytest
import torch

import tsw
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


def test_runtime_grid(tmp_path):
    args = ["--rounds", "1", "--trees", "5", "--sweep", "grid", "--grid-n", "20,30"]
    args += ["--grid-d", "2,5", "--max-rounds-s", "100", "--out", str(tmp_path)]
    assert runtime.main(args) == 0
    rows = list(csv.DictReader((tmp_path / "runtime_grid.csv").open()))
    assert [(r["N=M"], r["d"]) for r in rows] == [
        ("20", "2"),
        ("20", "5"),
        ("30", "2"),
        ("30", "5"),
    ]
    for r in rows:  # the grid's methods only, each against both limits
        assert float(r["db_tsw / lower"]) > 0
        assert float(r["db_tsw / lower limit (torch.sort)"]) > 0
        assert float(r["projections / POT"]) > 0  # the floor shared by every method
        assert "tsw_sl chain [s]" not in r
        assert float(r["db_tsw page faults"]) >= 0  # recorded next to each time
        assert r["malloc"]  # "default" or the MALLOC_* variables set
    with pytest.raises(SystemExit, match="unknown"):
        runtime.main(["--quick", "--methods", "db_tsw,nope", "--out", str(tmp_path)])


def test_runtime_batch_vs_loop(tmp_path):
    args = ["--rounds", "1", "--trees", "3", "--n", "10", "--d", "3", "--batch", "2"]
    assert runtime.main([*args, "--sweep", "batch", "--out", str(tmp_path)]) == 0
    row = json.loads((tmp_path / "runtime_batch.json").read_text())["rows"][0]
    assert row["db_tsw batched / loop"] > 0
    assert row["tsw.sw batched / loop"] > 0
    assert row["db_tsw loop page faults"] >= 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="minor faults: Linux")
def test_interleaved_counts_the_page_faults_of_each_call():
    """A call that writes to 64 MiB of fresh pages faults; an empty one does not.

    The pages come from an anonymous ``mmap``, not from malloc, so that the count does
    not depend on the ``MALLOC_*`` settings the README recommends: a write to each
    page faults 16384 times with 4 KiB pages, 32 times with 2 MiB huge pages.
    """
    import mmap

    from benchmarks._timing import interleaved

    def touch() -> None:
        with mmap.mmap(-1, 2**26) as pages:
            pages[:: mmap.PAGESIZE] = b"\x01" * (2**26 // mmap.PAGESIZE)

    faults: dict[str, list[int]] = {}
    fns = {"touch": touch, "idle": lambda: None}
    times = interleaved(fns, rounds=3, faults=faults)
    assert set(faults) == set(times) == {"touch", "idle"}
    assert all(len(v) == 3 for v in faults.values())
    assert min(faults["touch"]) >= 16
    assert max(faults["idle"]) < min(faults["touch"])


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
    # the CSV is numeric; the published numbers are a table of their own, at their iterations
    rows = list(csv.DictReader((tmp_path / "25gaussians.csv").open()))
    assert {r["key"] for r in rows} == {"sw2", "sw1", "tswsl", "dbtsw", "dbtsw-orth"}
    for r in rows:
        assert float(r["w2sq_it10_mean"]) > 0
        assert float(r["w2sq_it10_std"]) == 0.0  # one seed
        assert float(r["s_per_iter_median"]) > 0
    published = list(csv.DictReader((tmp_path / "25gaussians_published.csv").open()))
    sw2 = next(r for r in published if r["key"] == "sw2")
    assert float(sw2["w2sq_it500"]) == gradient_flow.PUBLISHED["25gaussians", "sw2"][0][0]
    assert "w2sq_it10" not in published[0]
    table = out[out.index("published exact W2^2") :]
    assert "it 2500" in table
    assert "A100" in table
    assert "it 10 " not in table


def test_gradient_flow_table_one_rows(tmp_path):
    """The keys of the papers' full tables run, and their published rows are printed."""
    keys = "maxsw,swgg,lcvsw,ebsw,rpsw,maxtswsl,tssobolev"
    args = ["--iters", "2", "--seeds", "1", "--n", "12", "--lines", "8", "--max-iter", "2"]
    args += ["--swgg-iter", "2", "--dataset", "swissroll", "--methods", keys]
    args += ["--out", str(tmp_path)]
    assert gradient_flow.main(args) == 0
    rows = list(csv.DictReader((tmp_path / "swissroll.csv").open()))
    assert {r["key"] for r in rows} == set(keys.split(","))
    published = {r["key"] for r in csv.DictReader((tmp_path / "swissroll_published.csv").open())}
    assert published == {"maxsw", "swgg", "lcvsw", "maxtswsl"}


def test_swgg_loss_is_the_cost_of_its_plan():
    """The flow's SWGG loss: the plan's squared-Euclidean cost (ot.dist against the
    dense plan), whose gradient moves each point towards its mass-weighted partners."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(9, 2, generator=g, dtype=torch.float64).requires_grad_()
    Y = torch.randn(9, 2, generator=g, dtype=torch.float64)
    loss = gradient_flow.swgg_loss(X, Y, n_projections=5, n_iter=3, seed=1)
    plan, _ = tsw.swgg(X.detach(), Y, n_projections=5, n_iter=3, seed=1)
    cost = (plan * ot.dist(X.detach(), Y)).sum()
    assert float(loss.detach()) == pytest.approx(float(cost), rel=1e-12)
    (grad,) = torch.autograd.grad(loss, X)
    expected = 2 * (plan.sum(1, keepdim=True) * X.detach() - plan @ Y)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-14)


def test_colour_transfer_smoke(tmp_path):
    from benchmarks import colour_transfer

    args = ["--smoke", "--methods", "sw2,dbtsw,tssobolev", "--out", str(tmp_path)]
    assert colour_transfer.main(args) == 0
    records = json.loads((tmp_path / "results.json").read_text())
    assert [r["method"] for r in records] == ["sw2", "dbtsw", "tssobolev"]
    for r in records:
        assert r["seed"] == 0
        assert r["seconds"] > 0
        assert 0 < r["w2"] < r["w2_start"]  # ten steps towards the target palette
    assert (tmp_path / "colour_transfer.png").stat().st_size > 0
    assert set(colour_transfer.MODES) >= {"flow"}


def test_gradient_flow_help_describes_the_output(capsys):
    with pytest.raises(SystemExit):
        gradient_flow.main(["--help"])
    text = capsys.readouterr().out
    for name in ("DATASET.csv", "DATASET_published.csv", "DATASET.json", "DATASET.png"):
        assert name in text


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
    for row in csv.DictReader((tmp_path / "sphere_flow.csv").open()):
        assert float(row["nll_mean"]) > 0
        assert float(row["s_per_step_median"]) > 0


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
    for row in csv.DictReader((tmp_path / "outlier_flow.csv").open()):
        assert 0 <= float(row["on_outliers_pct_mean"]) <= 100
        assert float(row["off_shape_pct_std"]) >= 0


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


def test_runtime_sort_sweep(tmp_path):
    """--sweep sort times the packed keys against np.argsort (each result checked
    against NumPy's stable argsort inside the sweep)."""
    pytest.importorskip("numba")
    args = ["--rounds", "1", "--sweep", "sort", "--grid", "40,300", "--out", str(tmp_path)]
    assert runtime.main(args) == 0
    rows = json.loads((tmp_path / "runtime_sort.json").read_text())["rows"]
    assert len(rows) == 2 * len(runtime.SORT_KINDS)
    assert all(r["packed keys / np.argsort"] > 0 for r in rows)


def test_runtime_projections_form_the_points_gradient():
    """``projections`` is the product every sliced method forms: forward on both
    measures, backward the (N, L) x (L, d) product of the source points' gradient."""
    X, Y, trees, chains, proj = runtime.make_problem(6, 3, 2, 2, torch.float64, "cpu")
    seen = []
    real = torch.Tensor.backward

    def spy(self, gradient=None, *a, **k):
        seen.append((self.shape, None if gradient is None else gradient.shape))
        return real(self, gradient, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.Tensor, "backward", spy)
        runtime.methods(X, Y, trees, chains, proj)["projections"]()
    assert seen == [((6, 4), (6, 4))]


def test_gpu_check_commands_run_on_the_cpu_without_pot(tmp_path, monkeypatch):
    """Every benchmark command of ``benchmarks/gpu_check.sh`` runs, in small, on the CPU.

    The script has never run on a GPU here: this checks that its options exist and that
    its code paths run, with ``--device cpu`` and tiny sizes appended (argparse takes the
    last value), and without POT, which the GPU machine lacks unless its wheel is
    carried (the grid then leaves out its POT column).
    """
    import importlib
    import re
    import shlex
    from pathlib import Path

    text = (Path(__file__).parents[1] / "benchmarks" / "gpu_check.sh").read_text()
    text = text.replace("\\\n", " ")
    commands = re.findall(r"python3 -m (benchmarks\.\w+)([^|\n]*)", text)
    assert sorted({m for m, _ in commands}) == ["benchmarks.largest", "benchmarks.runtime"]
    small = {
        "benchmarks.runtime": "--n 30 --d 3 --trees 2 --rounds 1 --grid 20,30 --grid-n 20 "
        "--grid-d 2,3 --max-rounds-s 1",
        "benchmarks.largest": "--start 40 --max-n 80 --d 4 --trees 2 --budget-s 5",
    }
    monkeypatch.setattr(runtime, "ot", None)
    for module, options in commands:
        argv = shlex.split(options.split("2>&1")[0].replace("$OUT", str(tmp_path)))
        argv = ["cpu" if a == "cuda" else a for a in argv]
        assert "--device" in argv
        assert importlib.import_module(module).main([*argv, *small[module].split()]) == 0
    rows = list(csv.DictReader((tmp_path / "runtime_grid" / "runtime_grid.csv").open()))
    assert [(r["N=M"], r["d"]) for r in rows] == [("20", "2"), ("20", "3")]
    assert "db_tsw / lower" in rows[0]
    assert not any("POT" in k for k in rows[0])


def test_first_call_quick(capsys):
    from benchmarks import first_call

    assert first_call.main(["--rounds", "1", "--n", "30", "--methods", "sw", "--no-worker"]) == 0
    out = capsys.readouterr().out
    assert "import tsw after it" in out
    assert out.count("| sw |") == 1


@pytest.mark.slow  # about 4 s: POT, Numba and scikit-learn's first calls
def test_retrieval_smoke(tmp_path, capsys):
    from benchmarks import retrieval

    methods = "exact,sinkhorn,quad1,flow-quad,fit-clus10,sw"
    args = ["--smoke", "--data", "bow", "--methods", methods, "--out", str(tmp_path)]
    assert retrieval.main(args) == 0
    rows = json.loads((tmp_path / "retrieval.json").read_text())["rows"]
    assert [r["key"] for r in rows] == methods.split(",")
    for r in rows:
        assert 0 <= r["knn_acc"] <= 1
        assert r["s_per_query"] > 0
        if r["key"] == "exact":  # the reference of recall and correlation
            assert r["recall10"] == 1.0
            assert abs(r["spearman"] - 1.0) < 1e-12
    assert (tmp_path / "retrieval_bow.csv").read_text().count("\n") == 1 + len(rows)
    assert (tmp_path / "retrieval.png").stat().st_size > 0
    # the corpus is deterministic
    H1, X1, y1 = retrieval.make_bow_corpus(200, 8, 4, 20, seed=3)
    H2, X2, y2 = retrieval.make_bow_corpus(200, 8, 4, 20, seed=3)
    for u, v in ((H1, H2), (X1, X2), (y1, y2)):
        assert (u == v).all()
    assert abs(H1.sum(1) - 1).max() < 1e-12


def test_search_smoke(tmp_path):
    from benchmarks import retrieval, search

    methods = "exact,pruned,sinkhorn,flowtree,tsw,tsw+flowtree,cascade"
    args = ["--smoke", "--data", "digits,bow", "--methods", methods, "--out", str(tmp_path)]
    assert search.main([*args, "--cache", str(tmp_path / "cache")]) == 0
    for name in ("digits", "bow-120"):
        rows = json.loads((tmp_path / f"search_{name}.json").read_text())["rows"]
        assert [r["key"] for r in rows] == ["truth", *methods.split(","), "cascade (20, 5)"]
        for r in rows:
            assert 0 <= r["recall1"] <= 1
            assert 0 <= r["recall10"] <= 1
            assert 0 <= r["knn_acc"] <= 1
            if r["key"] in ("exact", "pruned"):  # brute force agrees with the ground truth
                assert r["recall10"] == 1.0
            if r["key"].startswith("cascade"):  # the returned distances are exact W1
                assert r["max_gap"] < 1e-12
                assert r["bytes_per_doc"] > 0
        assert (tmp_path / f"search_{name}.csv").read_text().count("\n") == 1 + len(rows)
    assert (tmp_path / "search.png").stat().st_size > 0
    # the sparse corpus is the dense one
    H, X, y = retrieval.make_bow_corpus(200, 8, 4, 20, seed=3)
    S, X2, y2 = retrieval.make_bow_corpus(200, 8, 4, 20, seed=3, sparse=True)
    assert (S.toarray() == H).all()
    assert (X == X2).all()
    assert (y == y2).all()


def test_support_trees_quick(tmp_path):
    from benchmarks import support_trees

    assert support_trees.main(["--quick", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "support_trees_builds_matrix.json").read_text())
    assert [r["d"] for r in data["builds"]] == [2, 8]
    assert data["builds"][0]["quadtree / lower limit"] > 0
    assert data["matrix"]["ot.emd2 / matrix per pair"] > 0


def test_support_trees_flowtree_quick(tmp_path):
    pytest.importorskip("numba")
    from benchmarks import support_trees

    assert support_trees.main(["--quick", "--parts", "flowtree", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "support_trees_flowtree.json").read_text())["flowtree"]
    assert [(r["trees"], r["words"]) for r in rows] == [
        ("1 quadtree", 10),
        ("1 quadtree", 20),
        ("1 cluster", 10),
        ("1 cluster", 20),
    ]
    for r in rows:  # the compiled values are the fallback's; Flowtree is a coupling's cost
        assert r["max |compiled - fallback| / max"] < 1e-12
        assert r["Flowtree / W1 (median over pairs)"] >= 1 - 1e-12


@pytest.mark.slow  # about 10 s: POT's exact barycenters, the digits, the speed check
def test_barycenters_smoke(tmp_path, capsys):
    from benchmarks import barycenters

    assert barycenters.main(["--smoke", "--out", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "barycenters_free.csv").open()))
    assert {r["method"] for r in rows} >= {"sw", "db_tsw + fairness 1", "tsw_sl"}
    assert all(float(r["W"]) > 0 for r in rows)
    assert (tmp_path / "barycenters_digits.png").stat().st_size > 0
    assert "GeomLoss" in capsys.readouterr().out


def test_curved_speed_smoke(tmp_path, capsys):
    """The timing of ghsw / hhsw / spdsw / hspdsw against SW on the same coordinates."""
    from benchmarks import curved_speed

    assert curved_speed.main(["--smoke", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "curved_speed.json").read_text())
    assert record["hyperbolic"][0]["ghsw / sw"] > 0
    assert record["spd"][0]["hspdsw / sw on logs"] > 0
    assert "## SPD" in capsys.readouterr().out


def test_curved_flow_smoke(tmp_path, capsys):
    """Flows on H^2, SPD(2) and R^2 x S^2 x H^2, every method a few steps."""
    from benchmarks import curved_flow

    assert curved_flow.main(["--smoke", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for name in ("GHSW_2", "HHSW_2", "MC-TSW on H^2", "SPDSW_2", "HSPDSW_2", "Prod-SW", "Prod-TSW"):
        assert name in out
    record = json.loads((tmp_path / "curved_flow.json").read_text())
    assert set(record["flows"]) == {"hyperbolic", "spd", "product"}
    rows = list(csv.DictReader((tmp_path / "curved_flow.csv").open()))
    assert len(rows) == 12
    for row in rows:
        assert float(row["s_per_step_median"]) > 0
        # an exact W2 between distinct clouds, at the start and after the steps
        assert math.isfinite(float(row["log10_w2_step0_mean"]))
        assert math.isfinite(float(row["log10_w2_step3_mean"]))
    for flow in ("hyperbolic", "spd", "product"):
        assert (tmp_path / f"curved_flow_{flow}.png").stat().st_size > 0


def test_curved_flow_speed_smoke(tmp_path):
    """mc_tsw against db_tsw at equal trees and lines."""
    from benchmarks import curved_flow

    assert curved_flow.main(["--smoke", "--speed", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "curved_flow_speed.json").read_text())["rows"]
    assert len(rows) == 6
    assert all(r["mc_tsw / db_tsw"] > 0 for r in rows)


def test_curved_flow_compare_smoke(tmp_path):
    """Single-factor mc_tsw against stsw and db_tsw: equal to stsw with the uniform split."""
    from benchmarks import curved_flow

    assert curved_flow.main(["--smoke", "--compare", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "curved_flow_compare.json").read_text())
    mc, st = record["tie"]
    assert abs(mc - st) <= 1e-12 * abs(st)
    assert len(record["values"]) == 6
    assert record["timing"]["mc_tsw / stsw"] > 0
