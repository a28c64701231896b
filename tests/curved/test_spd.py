"""The SPD geometry (``tsw.curved._spd``) and SPDSW / HSPDSW against independent references.

References: scipy's ``logm`` / ``expm`` / ``sqrtm``, mpmath's eigenvalues at high
precision (the Busemann function as the limit of ``t - d(X, exp(tA))``), ``ot.wasserstein_1d``
on ``tr(A log X)``, and finite differences.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import ot
import pytest
import scipy.linalg as sl
import torch

import tsw
from tsw.core._random import resolve_sampler
from tsw.curved import _spd as spd

F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _spd_batch(N: int, n: int, seed: int, scale: float = 1.0, lead=()) -> torch.Tensor:
    G = torch.randn(*lead, N, n, n, generator=_gen(seed), dtype=F64)
    return scale * (G @ G.mT / n + 0.2 * torch.eye(n, dtype=F64))


def _directions(n: int, L: int, seed: int) -> torch.Tensor:
    return tsw.sample_spd_projections(n, L, seed=seed, dtype=F64)


# ------------------------------------------------------------------------ matrix functions


def test_matrix_functions_equal_scipy():
    X = _spd_batch(6, 4, 0)
    for ours, theirs in (
        (spd.spd_log, sl.logm),
        (spd.spd_sqrt, sl.sqrtm),
        (spd.spd_invsqrt, lambda m: np.linalg.inv(sl.sqrtm(m))),
    ):
        ref = np.stack([np.real(theirs(x)) for x in X.numpy()])
        np.testing.assert_allclose(ours(X).numpy(), ref, rtol=1e-11, atol=1e-12)
    S = spd.spd_log(X)
    np.testing.assert_allclose(spd.spd_exp(S).numpy(), X.numpy(), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(
        spd.spd_exp(S).numpy(), np.stack([sl.expm(s) for s in S.numpy()]), rtol=1e-11, atol=1e-12
    )


@pytest.mark.parametrize("kind", ["log", "exp", "sqrt", "invsqrt"])
def test_gradients_equal_finite_differences_and_are_exact_at_repeated_eigenvalues(kind):
    fn = {"log": spd.spd_log, "exp": spd.spd_exp, "sqrt": spd.spd_sqrt, "invsqrt": spd.spd_invsqrt}
    f = fn[kind]
    X = _spd_batch(2, 3, 1).requires_grad_(True)
    W = torch.randn(2, 3, 3, generator=_gen(2), dtype=F64)

    def g(X):
        return (f(spd.symmetrize(X)) * W).sum()

    assert torch.autograd.gradcheck(g, (X,))
    assert torch.autograd.gradgradcheck(g, (X,))
    # at the identity (all eigenvalues equal) torch.linalg.eigh's gradient is NaN; here the
    # Frechet derivative f'(1) sym(W) (a scalar function of I)
    eye = torch.eye(3, dtype=F64).expand(2, 3, 3).clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(g(eye), eye)
    slope = {"log": 1.0, "exp": math.e, "sqrt": 0.5, "invsqrt": -0.5}[kind]
    torch.testing.assert_close(grad, slope * spd.symmetrize(W))


def test_second_derivatives_at_repeated_eigenvalues_raise():
    eye = torch.eye(3, dtype=F64).requires_grad_(True)
    W = torch.randn(3, 3, generator=_gen(4), dtype=F64)
    (grad,) = torch.autograd.grad((spd.spd_log(eye) * W).sum(), eye, create_graph=True)
    torch.testing.assert_close(grad, spd.symmetrize(W))  # first order: exact
    with pytest.raises(ValueError, match="repeated eigenvalues"):
        torch.autograd.grad((grad * W).sum(), eye)


def test_half_vectorization_is_an_isometry():
    A, B = spd.symmetrize(torch.randn(2, 5, 4, 4, generator=_gen(3), dtype=F64))
    lhs = (spd.half_vectorize(A) * spd.half_vectorize(B)).sum(-1)
    torch.testing.assert_close(lhs, (A * B).sum((-2, -1)), rtol=1e-14, atol=1e-14)


# ------------------------------------------------------------------------------ distances


def test_distances_equal_their_closed_forms():
    X, Y = _spd_batch(5, 3, 4), _spd_batch(5, 3, 5)
    le = [
        np.linalg.norm(sl.logm(x) - sl.logm(y)) for x, y in zip(X.numpy(), Y.numpy(), strict=True)
    ]
    np.testing.assert_allclose(spd.spd_distance(X, Y, "log_euclidean").numpy(), le, rtol=1e-11)
    ai = []
    for x, y in zip(X.numpy(), Y.numpy(), strict=True):
        r = np.linalg.inv(sl.sqrtm(x))
        ai.append(np.linalg.norm(sl.logm(r @ y @ r)))
    np.testing.assert_allclose(spd.spd_distance(X, Y, "affine").numpy(), ai, rtol=1e-10)
    D = spd.spd_distance_matrix(X, Y, "affine")
    torch.testing.assert_close(D.diagonal(), spd.spd_distance(X, Y))
    torch.testing.assert_close(D, spd.spd_distance(X[:, None], Y[None]))
    E = spd.spd_distance_matrix(X, Y, "log_euclidean")
    torch.testing.assert_close(E, spd.spd_distance(X[:, None], Y[None], "log_euclidean"))


def test_affine_distance_is_congruence_invariant():
    X, Y = _spd_batch(4, 3, 6), _spd_batch(4, 3, 7)
    G = torch.randn(3, 3, generator=_gen(8), dtype=F64)
    torch.testing.assert_close(
        spd.affine_distance(G @ X @ G.T, G @ Y @ G.T),
        spd.affine_distance(X, Y),
        rtol=1e-9,
        atol=1e-10,
    )


@pytest.mark.parametrize("metric", ["affine", "log_euclidean"])
def test_exponential_map_walks_geodesics_of_the_metric(metric):
    """d(X, exp_X(t V)) = t |V|_X for the metric's norm of V at X."""
    X = _spd_batch(3, 3, 9)
    V = spd.symmetrize(torch.randn(3, 3, 3, generator=_gen(10), dtype=F64))
    for t in (0.1, 0.7):
        Y = spd.spd_exp_map(X, t * V, metric)
        if metric == "affine":
            r = spd.spd_invsqrt(X)
            norm = torch.linalg.matrix_norm(r @ V @ r)
        else:
            lam, U = torch.linalg.eigh(X)
            D = U @ (spd.divided_differences(lam, "log") * (U.mT @ V @ U)) @ U.mT
            norm = torch.linalg.matrix_norm(D)
        torch.testing.assert_close(spd.spd_distance(X, Y, metric), t * norm, rtol=1e-9, atol=1e-12)


# -------------------------------------------------------------------- Busemann coordinates


def _mp_busemann(X: torch.Tensor, P: torch.Tensor, lam: torch.Tensor) -> float:
    """-B(X) = lim (t - d(X, exp(tA))): d^2 is a quadratic in t up to O(e^{-gap t}) terms;
    the coefficient of t, read from three large t at 500 digits (the spectrum of the
    scaled matrix spans e^(t (max lam - min lam)), down to 1e-300 here), is -2 (-B)."""
    mp.mp.dps = 500
    M = mp.matrix(P.T.tolist()) * mp.matrix(X.tolist()) * mp.matrix(P.tolist())
    values = []
    ts = (mp.mpf(300), mp.mpf(400), mp.mpf(500))
    for t in ts:
        E = mp.diag([mp.e ** (-t * mp.mpf(float(v)) / 2) for v in lam])
        ev = mp.eigsy(E * M * E)[0]
        values.append(sum(mp.log(e) ** 2 for e in ev))
    # d^2 = t^2 |lam|^2 + beta t + gamma: divided differences in t
    (t1, t2, t3), (v1, v2, v3) = ts, values
    a = ((v3 - v2) / (t3 - t2) - (v2 - v1) / (t2 - t1)) / (t3 - t1)
    beta = (v2 - v1) / (t2 - t1) - a * (t1 + t2)
    return float(-beta / 2)


def test_busemann_coordinates_are_the_limit_of_t_minus_the_distance():
    X = _spd_batch(3, 3, 11)
    A = _directions(3, 2, 12)
    lam, P = spd.eigen_directions(A)
    got = spd.busemann_coordinates(X, P, lam)  # (L, N)
    for i in range(3):
        for k in range(2):
            assert abs(float(got[k, i]) - _mp_busemann(X[i], P[k], lam[k])) < 1e-10


def test_busemann_coordinate_is_t_along_the_geodesic():
    A = _directions(4, 3, 13)
    lam, P = spd.eigen_directions(A)
    t = torch.tensor([-2.0, 0.5, 3.0], dtype=F64)
    X = torch.stack([torch.linalg.matrix_exp(s * A[0]) for s in t])
    torch.testing.assert_close(spd.busemann_coordinates(X, P[:1], lam[:1])[0], t)


# --------------------------------------------------------------------------- SPDSW, HSPDSW


def _log_coordinates(X: torch.Tensor, A: torch.Tensor) -> np.ndarray:
    logs = [sl.logm(x) for x in X.numpy()]
    return np.array([[np.trace(a @ lx).real for lx in logs] for a in A.numpy()])


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0])
def test_spdsw_equals_pot_on_trace_coordinates(p):
    X, Y = _spd_batch(10, 3, 14), _spd_batch(7, 3, 15, scale=1.7)
    a = torch.rand(10, generator=_gen(16), dtype=F64) + 0.1
    b = torch.rand(7, generator=_gen(17), dtype=F64) + 0.1
    a, b = 3 * a / a.sum(), 3 * b / b.sum()  # unnormalised, equal totals
    A = _directions(3, 6, 18)
    cx, cy = _log_coordinates(X, A), _log_coordinates(Y, A)
    costs = [ot.wasserstein_1d(cx[k], cy[k], a.numpy() / 3, b.numpy() / 3, p=p) for k in range(6)]
    ref = (3 * np.mean(costs)) ** (1 / p)
    assert abs(float(tsw.spdsw(X, Y, a, b, projections=A, p=p)) - ref) < 1e-10


@pytest.mark.parametrize("p", [1.0, 2.0])
def test_hspdsw_equals_pot_on_busemann_limits(p):
    X, Y = _spd_batch(4, 2, 19), _spd_batch(3, 2, 20, scale=1.5)
    A = _directions(2, 2, 21)
    lam, P = spd.eigen_directions(A)
    cx = np.array([[_mp_busemann(x, P[k], lam[k]) for x in X] for k in range(2)])
    cy = np.array([[_mp_busemann(y, P[k], lam[k]) for y in Y] for k in range(2)])
    ref = np.mean([ot.wasserstein_1d(cx[k], cy[k], p=p) for k in range(2)]) ** (1 / p)
    assert abs(float(tsw.hspdsw(X, Y, projections=A, p=p)) - ref) < 1e-9


def test_spdsw_is_sw_of_the_half_vectorised_logarithms():
    X, Y = _spd_batch(8, 3, 22), _spd_batch(8, 3, 23)
    value, log = tsw.spdsw(X, Y, seed=4, log=True)
    A = log["projections"]
    torch.testing.assert_close(A, tsw.sample_spd_projections(3, 50, seed=4, dtype=F64))
    theta = spd.half_vectorize(A).T
    hx, hy = spd.half_vectorize(spd.spd_log(X)), spd.half_vectorize(spd.spd_log(Y))
    torch.testing.assert_close(value, tsw.sw(hx, hy, projections=theta), rtol=1e-13, atol=1e-14)
    # log["trees"] passed back recomputes the value
    torch.testing.assert_close(tsw.spdsw(X, Y, projections=log["trees"]), value)


def test_sample_spd_projections_have_the_papers_law():
    A = tsw.sample_spd_projections(3, 2000, seed=0, dtype=F64)
    torch.testing.assert_close(A, A.mT)
    torch.testing.assert_close(torch.linalg.matrix_norm(A), torch.ones(2000, dtype=F64))
    # O(n)-invariant law: E[A] = 0 and E[A_00^2] = E[theta_i^2 P_0i^2 ...] = 1/(n(n+2)) * 3 ... (
    # for Haar P and theta uniform: E[A_11^2] = 3 / (n (n + 2)) = 0.2 at n = 3)
    assert float(A.mean(0).abs().max()) < 0.05
    assert abs(float((A[:, 0, 0] ** 2).mean()) - 0.2) < 0.02
    rng = resolve_sampler(0, None, dtype=F64, device=torch.device("cpu"))
    torch.testing.assert_close(spd.draw_spd_directions(3, 2000, rng), A)


@pytest.mark.parametrize("fn", [tsw.spdsw, tsw.hspdsw])
def test_orthogonal_congruence_and_scaling_with_the_directions(fn):
    X, Y = _spd_batch(6, 3, 24), _spd_batch(5, 3, 25)
    A = _directions(3, 5, 26)
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=_gen(27), dtype=F64))
    base = fn(X, Y, projections=A)
    moved = fn(2.5 * q @ X @ q.T, 2.5 * q @ Y @ q.T, projections=q @ A @ q.T)
    torch.testing.assert_close(moved, base, rtol=1e-10, atol=1e-12)
    assert not torch.allclose(fn(q @ X @ q.T, q @ Y @ q.T, projections=A), base, rtol=1e-4)


def test_hspdsw_is_invariant_under_any_congruence_with_the_directions_at_infinity():
    """(G X G^T, A) and (X, Q diag(lambda) Q^T) have equal costs, G^T P = Q R."""
    X, Y = _spd_batch(6, 3, 28), _spd_batch(5, 3, 29)
    A = _directions(3, 5, 30)
    G = torch.randn(3, 3, generator=_gen(31), dtype=F64)
    lam, P = spd.eigen_directions(A)
    Q, _ = torch.linalg.qr(G.T @ P)
    A2 = Q @ torch.diag_embed(lam) @ Q.mT
    moved = tsw.hspdsw(G @ X @ G.T, G @ Y @ G.T, projections=A)
    torch.testing.assert_close(moved, tsw.hspdsw(X, Y, projections=A2), rtol=1e-9, atol=1e-11)
    # the log-Euclidean one is not affine-invariant
    le = tsw.spdsw(G @ X @ G.T, G @ Y @ G.T, projections=A)
    assert not torch.allclose(le, tsw.spdsw(X, Y, projections=A2), rtol=1e-3)


@pytest.mark.parametrize("fn", [tsw.spdsw, tsw.hspdsw])
def test_batches_blocks_and_numpy(fn):
    X, Y = _spd_batch(5, 3, 32, lead=(2,)), _spd_batch(4, 3, 33, lead=(2,))
    A = _directions(3, 7, 34)
    batched = fn(X, Y, projections=A)
    loop = torch.stack([fn(X[i], Y[i], projections=A) for i in range(2)])
    torch.testing.assert_close(batched, loop)
    per = torch.stack([_directions(3, 4, 40 + i) for i in range(2)])
    loop = torch.stack([fn(X[i], Y[i], projections=per[i]) for i in range(2)])
    torch.testing.assert_close(fn(X, Y, projections=per), loop)
    Xg = X[0].clone().requires_grad_(True)
    values, grads = [], []
    for chunk in (None, 2):
        Xg = X[0].clone().requires_grad_(True)
        v = fn(Xg, Y[0], projections=A, chunk_size=chunk)
        values.append(v)
        grads.append(torch.autograd.grad(v, Xg)[0])
    torch.testing.assert_close(values[0], values[1])
    torch.testing.assert_close(grads[0], grads[1])
    assert isinstance(fn(X[0].numpy(), Y[0].numpy(), seed=0), np.floating)


@pytest.mark.parametrize("fn", [tsw.spdsw, tsw.hspdsw])
def test_gradcheck_gradgradcheck_and_degenerate_points(fn):
    X, Y = _spd_batch(4, 2, 35), _spd_batch(3, 2, 36)
    A = _directions(2, 3, 37)

    def f(X, Y):
        return fn(spd.symmetrize(X), spd.symmetrize(Y), projections=A)

    inputs = (X.clone().requires_grad_(True), Y.clone().requires_grad_(True))
    assert torch.autograd.gradcheck(f, inputs)
    assert torch.autograd.gradgradcheck(f, inputs)
    # identities (repeated eigenvalues), identical supports: finite gradients
    eye = torch.eye(3, dtype=F64).expand(4, 3, 3)
    for Xs, Xt in ((eye.clone(), _spd_batch(2, 3, 38)), (eye.clone(), eye.clone())):
        Xs.requires_grad_(True)
        (g,) = torch.autograd.grad(fn(Xs, Xt, seed=0), Xs)
        assert bool(torch.isfinite(g).all())


def test_loss_modules_equal_the_functions():
    X, Y = _spd_batch(5, 3, 39, lead=(2,)), _spd_batch(4, 3, 40, lead=(2,))
    for cls, fn in ((tsw.nn.SPDSWLoss, tsw.spdsw), (tsw.nn.HSPDSWLoss, tsw.hspdsw)):
        loss = cls(n_projections=9, seed=4, resample=False, reduction="none")
        torch.testing.assert_close(loss(X, Y), fn(X, Y, n_projections=9, seed=4))


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("fn", [tsw.spdsw, tsw.hspdsw])
def test_bad_matrices_raise_naming_the_argument(fn):
    X, Y = _spd_batch(4, 3, 41), _spd_batch(3, 3, 42)
    bent = X.clone()
    bent[1, 0, 2] += 0.1
    with pytest.raises(ValueError, match="X_s must hold symmetric matrices"):
        fn(bent, Y, seed=0)
    neg = Y.clone()
    neg[0] = -neg[0]
    with pytest.raises(ValueError, match="X_t must hold positive definite matrices"):
        fn(X, neg, seed=0)
    with pytest.raises(ValueError, match=r"X_s must hold N square n x n matrices"):
        fn(X[..., :2], Y, seed=0)
    with pytest.raises(ValueError, match=r"X_s must hold N square n x n matrices"):
        fn(X[0], Y, seed=0)
    with pytest.raises(ValueError, match=r"projections must have unit-norm matrices \(Frob"):
        fn(X, Y, projections=2 * _directions(3, 2, 43))
    with pytest.raises(ValueError, match="projections must hold symmetric matrices"):
        fn(X, Y, projections=torch.randn(2, 3, 3, generator=_gen(44), dtype=F64))
    with pytest.raises(ValueError, match=r"projections must have shape \(L, n, n\) with n=3"):
        fn(X, Y, projections=_directions(2, 2, 45))
