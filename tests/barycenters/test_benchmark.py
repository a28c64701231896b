"""benchmarks.barycenters writes its records (JSON), its tables (CSV) and its figures."""

from __future__ import annotations

import csv
import json

import pytest


@pytest.mark.slow  # about 10 s: every part at its smoke sizes
def test_every_part_writes_its_records_and_figures(tmp_path):
    from benchmarks import barycenters

    assert barycenters.main(["--smoke", "--out", str(tmp_path)]) == 0
    stems = ["free", "digits", "digits_4", "speed", "lp"]
    for stem in stems:
        data = json.loads((tmp_path / f"barycenters_{stem}.json").read_text())
        assert data["args"]["smoke"] is True
        assert data["machine"]["torch_threads"] == 1
        rows = list(csv.DictReader((tmp_path / f"barycenters_{stem}.csv").open()))
        assert data["records"]
        if stem != "free":  # the free part's table averages its records over the seeds
            assert len(data["records"]) == len(rows)
    free = json.loads((tmp_path / "barycenters_free.json").read_text())["records"]
    assert {r["method"] for r in free} >= {"sw", "db_tsw + fairness 1", "tsw_sl"}
    assert all(r["W"] > 0 and r["time_s"] >= 0 for r in free)
    speed = json.loads((tmp_path / "barycenters_speed.json").read_text())
    assert any(r["method"].startswith("POT") for r in speed["records"])
    assert all(r["certified_gap"] <= 1e-3 for r in speed["records"] if "certified_gap" in r)
    assert len(speed["curve"]["objective"]) == len(speed["curve"]["lower_bounds"])
    lp = json.loads((tmp_path / "barycenters_lp.json").read_text())["records"]
    assert all(r["lower_bound"] <= r["lp_minimum"] * (1 + 1e-9) for r in lp)
    assert all(r["excess"] <= 1e-3 / (1 - 1e-3) for r in lp)
    for figure in ("free", "shapes", "digits", "speed"):
        assert (tmp_path / f"barycenters_{figure}.png").stat().st_size > 0
