"""The self-supervised benchmark: Wang-Isola measures by hand, the --smoke run's outputs."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math

import pytest
import torch

pytest.importorskip("sklearn")

from benchmarks import ssl

REQUIRED = ("method", "seed", "seconds", "weight", "probe_accuracy", "uniformity", "alignment")


def test_uniformity_by_hand():
    # three points of a great circle: squared distances 2 (1-2), 4 (1-3), 2 (2-3)
    z = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]], dtype=torch.float64)
    expected = math.log((2 * math.exp(-2 * 2) + math.exp(-2 * 4)) / 3)
    assert float(ssl.wang_isola_uniformity(z, t=2.0)) == pytest.approx(expected, rel=1e-12)
    t1 = math.log((2 * math.exp(-2) + math.exp(-4)) / 3)
    assert float(ssl.wang_isola_uniformity(z, t=1.0)) == pytest.approx(t1, rel=1e-12)


def test_uniformity_matches_a_pair_loop():
    g = torch.Generator().manual_seed(0)
    z = torch.nn.functional.normalize(torch.randn(7, 4, generator=g, dtype=torch.float64), dim=1)
    rows = z.tolist()
    terms = [
        math.exp(-2.0 * sum((a - b) ** 2 for a, b in zip(rows[i], rows[j], strict=True)))
        for i in range(7)
        for j in range(i + 1, 7)
    ]
    expected = math.log(sum(terms) / len(terms))
    assert float(ssl.wang_isola_uniformity(z)) == pytest.approx(expected, rel=1e-12)


def test_uniformity_of_identical_points_is_zero_with_finite_gradient():
    z = torch.tensor([[0.0, 0.0, 1.0]] * 4, requires_grad=True)
    u = ssl.wang_isola_uniformity(z)
    u.backward()
    assert float(u.detach()) == pytest.approx(0.0, abs=1e-6)
    assert torch.isfinite(z.grad).all()


def test_alignment_by_hand():
    z1 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], dtype=torch.float64)
    z2 = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.6, -0.8]], dtype=torch.float64)
    # squared distances 2, 0, 1.6^2 = 2.56
    assert float(ssl.wang_isola_alignment(z1, z2)) == pytest.approx((2 + 0 + 2.56) / 3)
    expected = (math.sqrt(2) + 0 + 1.6) / 3
    assert float(ssl.wang_isola_alignment(z1, z2, alpha=1.0)) == pytest.approx(expected)


def test_augment_is_seeded_and_in_range():
    x = torch.rand(5, 64)
    a = ssl.augment(x, torch.Generator().manual_seed(1), crop=0.25, shift=1.0, noise=0.1)
    b = ssl.augment(x, torch.Generator().manual_seed(1), crop=0.25, shift=1.0, noise=0.1)
    assert torch.equal(a, b)
    assert a.shape == x.shape
    assert float(a.min()) >= 0
    assert float(a.max()) <= 1
    same = ssl.augment(x, torch.Generator().manual_seed(1), crop=0.0, shift=0.0, noise=0.0)
    torch.testing.assert_close(same, x, rtol=0, atol=1e-6)  # identity resampling


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """One ``--smoke`` run (about 15 s) shared by the tests below: (folder, stdout)."""
    out = tmp_path_factory.mktemp("ssl_smoke")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert ssl.main(["--smoke", "--out", str(out)]) == 0
    return out, buf.getvalue()


def test_smoke_run(smoke):
    tmp_path, out = smoke
    for name in ("Wang-Isola", "STSW", "SSW_2", "S3W_2", "RI-S3W_2", "untrained", "raw pixels"):
        assert name in out
    records = json.loads((tmp_path / "results.json").read_text())
    methods = {r["method"] for r in records}
    assert methods == {"pixels", "untrained", "align", "wang-isola", "stsw", "ssw", "s3w", "ri-s3w"}
    for r in records:
        assert all(k in r for k in REQUIRED), r
        for k in ("seconds", "probe_accuracy", "uniformity", "alignment"):
            assert math.isfinite(r[k]), (k, r)
        assert 0 <= r["probe_accuracy"] <= 1
        assert r["alignment"] >= 0
        assert r["uniformity"] <= 1e-9
    trained = [r for r in records if r["method"] not in ("pixels", "untrained")]
    assert all(r["seconds"] > 0 for r in trained)
    with open(tmp_path / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(methods)
    for row in rows:
        float(row["weight"])  # numeric (nan for the reference rows)
        assert 0 <= float(row["probe_accuracy_mean"]) <= 1
        assert float(row["probe_accuracy_std"]) >= 0
    assert (tmp_path / "probe_vs_weight.png").stat().st_size > 0
    assert (tmp_path / "features_s2.png").stat().st_size > 0  # --smoke runs on S^2
    times = json.loads((tmp_path / "step_times.json").read_text())["times"]
    assert set(times) == methods - {"pixels", "untrained"}
    scales = json.loads((tmp_path / "grad_scale.json").read_text())
    assert all(math.isfinite(v["grad_norm"]) and v["grad_norm"] > 0 for v in scales.values())


def test_merge_rereports(smoke, tmp_path):
    first = smoke[0]
    with contextlib.redirect_stdout(io.StringIO()):
        assert ssl.main(["--merge", f"{first},{first}", "--out", str(tmp_path)]) == 0
    records = json.loads((tmp_path / "results.json").read_text())
    assert records == json.loads((first / "results.json").read_text())  # duplicates dropped
    assert (tmp_path / "results.csv").read_text() == (first / "results.csv").read_text()
