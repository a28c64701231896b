"""The generative benchmark: its metrics against independent computations, and a smoke run."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")

from benchmarks import _gen_metrics as gm
from benchmarks import generative

ROOT = Path(__file__).resolve().parents[1]
CLASSIFIER = ROOT / "benchmarks" / "out" / "digits_classifier.pt"


def test_frechet_distance_diagonal_closed_form():
    rng = np.random.default_rng(0)
    mu1, mu2 = rng.normal(size=5), rng.normal(size=5)
    s1, s2 = rng.uniform(0.1, 3, size=5), rng.uniform(0.1, 3, size=5)
    # commuting covariances: |mu1 - mu2|^2 + sum (sqrt s1 - sqrt s2)^2
    expected = ((mu1 - mu2) ** 2).sum() + ((np.sqrt(s1) - np.sqrt(s2)) ** 2).sum()
    got = gm.frechet_distance(mu1, np.diag(s1), mu2, np.diag(s2))
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_frechet_distance_matches_scipy_sqrtm():
    from scipy.linalg import sqrtm

    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(6, 6)), rng.normal(size=(6, 6))
    S1, S2 = A @ A.T + 0.1 * np.eye(6), B @ B.T
    mu1, mu2 = rng.normal(size=6), rng.normal(size=6)
    covmean = sqrtm(S1 @ S2).real  # the classical FID formula
    expected = ((mu1 - mu2) ** 2).sum() + np.trace(S1 + S2 - 2 * covmean)
    assert gm.frechet_distance(mu1, S1, mu2, S2) == pytest.approx(expected, rel=1e-9)
    assert gm.frechet_distance(mu1, S1, mu1, S1) == pytest.approx(0.0, abs=1e-9)


def test_frechet_distance_one_dimensional_is_w2_squared():
    # in 1-D the Fréchet distance is W2^2 between the Gaussians: (m1-m2)^2 + (s1-s2)^2
    assert gm.frechet_distance([1.0], [[4.0]], [-1.0], [[9.0]]) == pytest.approx(4.0 + 1.0)


def test_coverage_hand_cases():
    entropy, classes = gm.coverage(np.array([0, 0, 1, 1]))
    assert entropy == pytest.approx(math.log(2))
    assert classes == 2
    entropy, classes = gm.coverage(np.arange(10).repeat(7))
    assert entropy == pytest.approx(math.log(10))
    assert classes == 10
    # 96 samples of class 3, 4 of class 5: class 5 has 4 % < 5 %
    labels = torch.tensor([3] * 96 + [5] * 4)
    entropy, classes = gm.coverage(labels)
    assert entropy == pytest.approx(-(0.96 * math.log(0.96) + 0.04 * math.log(0.04)))
    assert classes == 1
    assert gm.coverage(np.zeros(5, dtype=int)) == (0.0, 1)


def test_exact_w2_translation_and_permutation():
    X = torch.randn(30, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    t = torch.tensor([0.3, -1.0, 0.5, 2.0], dtype=torch.float64)
    assert gm.exact_w2(X, X + t) == pytest.approx(float(t.norm()), rel=1e-9)
    assert gm.exact_w2(X, X.flip(0)) == pytest.approx(0.0, abs=1e-7)


def test_shift_augment_moves_pixels_by_at_most_one():
    X = torch.zeros(50, 64)
    X[:, 3 * 8 + 3] = 1.0  # one lit pixel at (3, 3)
    Y = gm._shift_augment(X, torch.Generator().manual_seed(0))
    assert torch.equal(Y.sum(1), torch.ones(50))
    r, c = Y.argmax(1) // 8, Y.argmax(1) % 8
    assert int((r - 3).abs().max()) <= 1
    assert int((c - 3).abs().max()) <= 1


@pytest.mark.slow  # trains three generators and a robust flow: the longest default test
def test_generative_smoke(tmp_path, capsys):
    args = ["--smoke", "--out", str(tmp_path), "--classifier", str(CLASSIFIER)]
    assert generative.main(args) == 0
    out = capsys.readouterr().out
    for name in ("SW_2", "SW_1", "Max-SW_2", "TSW-SL", "Db-TSW", "Db-TSW⊥", "CircularTSW"):
        assert name in out
    assert "PartialTSW" in out
    assert "sliced partial OT" in out
    records = json.loads((tmp_path / "results.json").read_text())
    assert isinstance(records, list)
    gen = [r for r in records if r["task"] == "generate" and r["method"] != "real"]
    rob = [r for r in records if r["task"] == "robust" and r["method"] != "data"]
    assert {r["setup"] for r in gen} == {"pixel", "sngan", "swae"}
    assert {r["method"] for r in gen} == set(generative.METHODS)
    assert {r["method"].split("-")[0] for r in rob} == {"ptsw", "dbtsw", "sw2", "psw", "usw"}
    for r in gen:
        for key in ("method", "seed", "seconds", "iterations", "fid", "w2"):
            assert key in r
        assert math.isfinite(r["fid"])
        assert r["fid"] >= 0
        assert math.isfinite(r["w2"])
        assert r["w2"] > 0
        assert 0 <= r["coverage_entropy"] <= math.log(10) + 1e-9
        assert 1 <= r["coverage_classes"] <= 10
        assert r["iterations"] == 10
        assert r["seconds"] > 0
    for r in rob:
        assert 0 <= r["outlier_share"] <= 1
        assert 0 <= r["clean_share"] <= 1
        assert math.isfinite(r["fid"])
    real = [r for r in records if r["method"] == "real"]
    assert real
    assert all(r["coverage_classes"] == 10 for r in real)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["settings"]["classifier_accuracy"] >= 0.97
    with open(tmp_path / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows
    assert all(math.isfinite(float(r["fid_mean"])) for r in rows)
    with open(tmp_path / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(records)
    for png in ("samples_pixel", "samples_sngan", "samples_swae", "samples_robust"):
        assert (tmp_path / f"{png}.png").stat().st_size > 0
    assert (tmp_path / "fid_pixel_sngan_swae.png").stat().st_size > 0
    _, acc = gm.load_classifier(CLASSIFIER)
    assert acc >= gm.MIN_ACCURACY


def test_fibonacci_prior_and_vmf_mixture():
    """The papers' vMF prior: 10 unit modes spread over S^2, samples near them."""
    means = generative.fibonacci_sphere(10)
    torch.testing.assert_close(means.norm(dim=-1), torch.ones(10, dtype=torch.float64))
    gaps = torch.cdist(means, means) + 10 * torch.eye(10, dtype=torch.float64)
    assert float(gaps.min()) > 0.6  # no two modes close (the closest pair: 2/3 apart)
    z = generative.sphere_prior("vmf", 500, 2, torch.Generator().manual_seed(0))
    assert z.shape == (500, 3)
    nearest = (z.double() @ means.T).max(-1).values  # cosine to the nearest mode
    assert float(nearest.mean()) > 0.85  # kappa = 10: E<x, mu> = coth(10) - 1/10 = 0.9
    u = generative.sphere_prior("uniform", 4000, 4, torch.Generator().manual_seed(1))
    assert u.shape == (4000, 5)
    assert float(u.mean(0).abs().max()) < 0.05


def test_swae_sphere_smoke(tmp_path):
    args = ["--setups", "swae-sphere", "--task", "generate", "--seeds", "2", "--iters", "3"]
    args += ["--sphere-methods", "stsw,ri-s3w,sw", "--sphere-lines", "10"]
    args += ["--sphere-trees", "1", "--sphere-batch", "32", "--hidden", "16"]
    assert generative.main([*args, "--out", str(tmp_path)]) == 0
    records = json.loads((tmp_path / "results.json").read_text())
    assert {r["setup"] for r in records} == {"swae-sphere"}
    assert [(r["method"], r["seed"]) for r in records] == [
        (m, s) for m in ("prior", "stsw", "ri-s3w", "sw") for s in (0, 1)
    ]
    for r in records[2:]:
        assert 0 < r["w2"] <= math.pi
        assert r["log_w2"] == pytest.approx(math.log(r["w2"] ** 2))
        assert 0 < r["bce"] < 1
        assert r["nll"] > 0
    assert (tmp_path / "samples_swae-sphere.png").stat().st_size > 0
