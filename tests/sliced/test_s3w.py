"""S3W, RI-S3W, ARI-S3W (``tsw.sliced._s3w``): the map, values against POT, rotations, losses.

Independent oracles: the map written in numpy from the paper's algebra (arccos form, and
h1 after the stereographic projection), the official pipeline's algebra transcribed in
numpy (factor 2, clamps, sum over sorted points), POT's ``sliced_wasserstein_distance``
on the mapped points, and numpy loops over rotations.
"""

from __future__ import annotations

import math

import numpy as np
import ot
import pytest
import torch
from _reference import lit

import tsw
from tsw import s3w_map

F64 = torch.float64


def on_sphere(*shape, dtype=F64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(*shape, generator=g, dtype=F64), dim=-1).to(
        dtype
    )


def sphere_points(n, D, *, seed=0, shift=0.0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, D, generator=g, dtype=F64) + shift
    return torch.nn.functional.normalize(X, dim=-1).to(dtype)


def weights(n, seed):
    w = torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=F64) + 0.2
    return w / w.sum()


# --------------------------------------------------------------------------- numpy oracles


def h1_np(u):
    """The paper's h1: arccos(-(|u|^2 - 1) / (|u|^2 + 1)) / pi * u / |u| (no clamps)."""
    n2 = (u * u).sum(-1)
    return (np.arccos(-(n2 - 1) / (n2 + 1)) / np.pi / np.sqrt(n2))[:, None] * u


def default_map_np(S):
    """Geodesic angle from the south pole over pi, along the direction of x."""
    x, z = S[:, :-1], S[:, -1]
    return (np.arccos(-z) / np.pi / np.linalg.norm(x, axis=1))[:, None] * x


def official_map_np(S, eps=1e-6):
    """The official torch pipeline's algebra: clamp z, rescale x, u = 2x/(1-z), clipped h1."""
    x, z = S[:, :-1].copy(), S[:, -1].copy()
    z = np.minimum(z, float(np.float32(1 - eps)))  # its bound is a float32 tensor
    nx = np.linalg.norm(x, axis=1)
    x = x * (np.sqrt(1 - z * z) / np.where(nx > 0, nx, 1))[:, None]
    u = 2 * x / (1 - z)[:, None]
    n2 = np.maximum((u * u).sum(-1), 1e-8)
    c = np.clip(-np.clip((n2 - 1) / (n2 + 1), -1, 1), -1 + eps, 1 - eps)
    return (np.arccos(c) / np.pi / np.sqrt(n2))[:, None] * u


def official_value_np(X, Y, P, p):
    """Official s3wd on mapped points: sort, |diff|^p, SUM over points, mean over directions."""
    hx, hy = official_map_np(X) @ P, official_map_np(Y) @ P  # (N, L)
    return (np.abs(np.sort(hx, axis=0) - np.sort(hy, axis=0)) ** p).sum(0).mean()


# --------------------------------------------------------------------------- the map


@pytest.mark.parametrize("D", [2, 3, 6])
def test_default_map_is_the_scaled_azimuthal_equidistant_projection(D):
    S = sphere_points(500, D, seed=D)
    H = s3w_map(S).numpy()
    Sn = S.numpy()
    # |h| = geodesic distance to the south pole / pi, direction of x kept (numpy's arccos
    # near the pole is the less accurate side: absolute error ~ eps / |x|)
    radius = np.arccos(-Sn[:, -1]) / np.pi
    np.testing.assert_allclose(np.linalg.norm(H, axis=1), radius, rtol=1e-13, atol=1e-14)
    x = Sn[:, :-1]
    cos = (H * x).sum(1) / np.linalg.norm(H, axis=1) / np.linalg.norm(x, axis=1)
    np.testing.assert_allclose(cos, 1.0, rtol=0, atol=1e-13)
    # = h1 after the stereographic projection WITHOUT the factor 2
    np.testing.assert_allclose(H, h1_np(x / (1 - Sn[:, -1:])), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(H, default_map_np(Sn), rtol=1e-12, atol=1e-14)
    # with the factor 2 it is a different map
    assert np.abs(H - h1_np(2 * x / (1 - Sn[:, -1:]))).max() > 0.05


def test_default_map_special_points():
    e = torch.eye(3, dtype=F64)
    S = torch.stack([-e[2], e[2], e[0], -e[1], torch.tensor([0.6, 0.0, -0.8], dtype=F64)])
    H = s3w_map(S)
    expected = [[0, 0], [1, 0], [0.5, 0], [0, -0.5], [math.acos(0.8) / math.pi, 0]]
    torch.testing.assert_close(H, torch.tensor(expected, dtype=F64), rtol=0, atol=1e-15)
    # only the north pole reaches the unit sphere; near it |h| -> 1
    near = torch.nn.functional.normalize(torch.tensor([1e-9, 2e-9, 1.0], dtype=F64), dim=-1)
    assert 1 - 1e-8 < float(s3w_map(near).norm()) < 1
    # scale-free: rows of any norm are taken as directions
    torch.testing.assert_close(s3w_map(3 * S), H, rtol=1e-15, atol=1e-16)


@pytest.mark.parametrize("D", [2, 3, 5])
def test_compat_map_matches_the_official_algebra(D):
    S = sphere_points(300, D, seed=10 + D)
    e = torch.eye(D, dtype=F64)
    cap = torch.nn.functional.normalize(e[-1] + 1e-4 * e[0], dim=-1)  # inside the z clamp
    cap2 = torch.nn.functional.normalize(e[-1] + 3e-3 * e[0] - 1e-3 * e[-2 if D > 2 else 0], dim=-1)
    S = torch.cat([S, -e[-1:], cap[None], cap2[None]])
    H = s3w_map(S, compat=True).numpy()
    np.testing.assert_allclose(H, official_map_np(S.numpy()), rtol=1e-12, atol=1e-13)
    # with the factor 2 the radius is arccos(-(3 + 5z) / (5 + 3z)) / pi
    z = S[:-3, -1].numpy()
    radius = np.arccos(-(3 + 5 * z) / (5 + 3 * z)) / np.pi
    np.testing.assert_allclose(np.linalg.norm(H[:-3], axis=1), radius, rtol=1e-6)
    # the north pole itself: x' along e_1 (the official adds random noise instead)
    north = s3w_map(e[-1:], compat=True)[0]
    assert float(north[0]) == pytest.approx(math.acos(-1 + 1e-6) / math.pi, rel=1e-12)
    assert not bool(north[1:].any())


def test_maps_are_equivariant_under_rotations_fixing_the_poles():
    """h(Px, z) = P h(x, z) for P in O(d): rotate the data and the directions together."""
    X, Y = sphere_points(9, 4, seed=1), sphere_points(7, 4, seed=2, shift=0.5)
    a, b = weights(9, 3), weights(7, 4)
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=torch.Generator().manual_seed(5), dtype=F64))
    Pfull = torch.eye(4, dtype=F64)
    Pfull[:3, :3] = q
    proj = tsw.sample_projections(3, 16, seed=0, dtype=F64)
    for compat in (False, True):
        for rotations in (None, tsw.sample_rotations(4, 3, seed=2, dtype=F64)):
            kw = {"compat": compat, "rotations": rotations}
            base = tsw.s3w(X, Y, a, b, projections=proj, **kw)
            if rotations is None:
                moved = tsw.s3w(X @ Pfull.T, Y @ Pfull.T, a, b, projections=q @ proj, **kw)
            else:  # R_i (P s) = (R_i P) s
                kw["rotations"] = rotations @ Pfull.T
                moved = tsw.s3w(X @ Pfull.T, Y @ Pfull.T, a, b, projections=proj, **kw)
            torch.testing.assert_close(moved, base, rtol=1e-12, atol=1e-14)
    # but S3W is not invariant under a rotation that moves the poles
    Q = tsw.sample_rotations(4, 1, seed=7, dtype=F64)[0]
    rotated = tsw.s3w(X @ Q.T, Y @ Q.T, a, b, projections=proj)
    assert abs(float(rotated) - float(tsw.s3w(X, Y, a, b, projections=proj))) > 1e-3


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize("p", [1, 2, 1.5])
@pytest.mark.parametrize("D", [2, 3, 5])
def test_value_equals_pot_on_the_mapped_points(p, D):
    X, Y = sphere_points(11, D, seed=int(p * 10) + D), sphere_points(8, D, seed=D, shift=0.7)
    a, b = weights(11, 1), weights(8, 2)
    P = tsw.sample_projections(D - 1, 30, seed=D, dtype=F64)  # (d, L), POT's layout
    expected = ot.sliced_wasserstein_distance(
        default_map_np(X.numpy()), default_map_np(Y.numpy()), a.numpy(), b.numpy(),
        projections=P.numpy(), p=p,
    )  # fmt: skip
    value = tsw.s3w(X, Y, a, b, projections=P, p=p)
    assert value.item() == pytest.approx(expected, rel=1e-12, abs=1e-14)
    # compat: POT on the official map
    expected = ot.sliced_wasserstein_distance(
        official_map_np(X.numpy()), official_map_np(Y.numpy()), a.numpy(), b.numpy(),
        projections=P.numpy(), p=p,
    )  # fmt: skip
    value = tsw.s3w(X, Y, a, b, projections=P, p=p, compat=True)
    assert value.item() == pytest.approx(expected, rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("compat", [False, True])
def test_rotation_invariant_value_is_sw_over_rotations_and_directions(compat):
    D, L, R, p = 4, 20, 5, 2
    X, Y = sphere_points(10, D, seed=3), sphere_points(13, D, seed=4, shift=1.0)
    a, b = weights(10, 5), weights(13, 6)
    P = tsw.sample_projections(D - 1, L, seed=1, dtype=F64)
    Q = tsw.sample_rotations(D, R, seed=2, dtype=F64)
    hmap = official_map_np if compat else default_map_np
    costs = [
        ot.sliced_wasserstein_distance(
            hmap(X.numpy() @ q.T), hmap(Y.numpy() @ q.T), a.numpy(), b.numpy(),
            projections=P.numpy(), p=p,
        ) ** p
        for q in Q.numpy()
    ]  # fmt: skip
    value = tsw.s3w(X, Y, a, b, projections=P, rotations=Q, compat=compat, p=p)
    assert value.item() == pytest.approx(np.mean(costs) ** (1 / p), rel=1e-12)
    # reflections are accepted as explicit rotations
    Qr = Q.clone()
    Qr[:, 0] *= -1
    assert torch.isfinite(tsw.s3w(X, Y, a, b, projections=P, rotations=Qr))


@pytest.mark.parametrize("p", [1, 2])
def test_relation_to_the_official_value(p):
    """Official s3wd (uniform weights, N == M) = N * s3w(compat=True) ** p, same draws."""
    N, D = 40, 3
    X, Y = sphere_points(N, D, seed=8), sphere_points(N, D, seed=9, shift=1.0)
    P = tsw.sample_projections(D - 1, 25, seed=3, dtype=F64)
    official = official_value_np(X.numpy(), Y.numpy(), P.numpy(), p)
    value = tsw.s3w(X, Y, projections=P, compat=True, p=p)
    assert N * value.item() ** p == pytest.approx(official, rel=1e-12)


def test_seed_draws_rotations_then_directions():
    X, Y = sphere_points(12, 3, seed=0), sphere_points(9, 3, seed=1, shift=0.5)
    for R in (0, 4):
        g = torch.Generator().manual_seed(13)
        Q = tsw.sample_rotations(3, R, generator=g, dtype=F64) if R else None
        P = tsw.sample_projections(2, 33, generator=g, dtype=F64)
        expected = tsw.s3w(X, Y, rotations=Q, projections=P)
        assert torch.equal(tsw.s3w(X, Y, n_rotations=R, n_projections=33, seed=13), expected)
    # explicit rotations: n_rotations is ignored
    Q = tsw.sample_rotations(3, 2, seed=0, dtype=F64)
    P = tsw.sample_projections(2, 5, seed=0, dtype=F64)
    assert torch.equal(
        tsw.s3w(X, Y, rotations=Q, projections=P, n_rotations=7),
        tsw.s3w(X, Y, rotations=Q, projections=P),
    )


def test_batched_per_item_rotations_and_projections_equal_a_loop():
    B, D = 3, 4
    g = torch.Generator().manual_seed(0)
    X = torch.nn.functional.normalize(torch.randn(B, 7, D, generator=g, dtype=F64), dim=-1)
    Y = torch.nn.functional.normalize(torch.randn(B, 5, D, generator=g, dtype=F64) + 1, dim=-1)
    a = torch.rand(B, 7, generator=g, dtype=F64) + 0.1
    b = torch.rand(B, 5, generator=g, dtype=F64) + 0.1
    a, b = a / a.sum(-1, keepdim=True), b / b.sum(-1, keepdim=True)
    Q = torch.stack([tsw.sample_rotations(D, 3, seed=i, dtype=F64) for i in range(B)])
    P = torch.stack([tsw.sample_projections(D - 1, 10, seed=9 + i, dtype=F64) for i in range(B)])
    for rot, proj in ((Q, P), (Q[0], P), (Q, P[0])):
        value = tsw.s3w(X, Y, a, b, rotations=rot, projections=proj, p=1.5)
        loop = [
            tsw.s3w(
                X[i], Y[i], a[i], b[i], p=1.5,
                rotations=rot[i] if rot.ndim == 4 else rot,
                projections=proj[i] if proj.ndim == 3 else proj,
            )
            for i in range(B)
        ]  # fmt: skip
        torch.testing.assert_close(value, torch.stack(loop), rtol=1e-13, atol=1e-15)


def test_ri_s3w_is_rotation_invariant_in_expectation_only():
    """With many rotations the value barely moves under a rotation of the data; S3W does."""
    X, Y = sphere_points(60, 3, seed=20, shift=0.8), sphere_points(60, 3, seed=21, shift=-0.3)
    Q = tsw.sample_rotations(3, 1, seed=5, dtype=F64)[0]
    plain = [tsw.s3w(Z1, Z2, n_projections=200, seed=0) for Z1, Z2 in ((X, Y), (X @ Q.T, Y @ Q.T))]
    ri = [
        tsw.s3w(Z1, Z2, n_projections=20, n_rotations=500, seed=0)
        for Z1, Z2 in ((X, Y), (X @ Q.T, Y @ Q.T))
    ]
    rel_plain = abs(float(plain[0] - plain[1])) / float(plain[0])
    rel_ri = abs(float(ri[0] - ri[1])) / float(ri[0])
    assert rel_ri < 0.02
    assert rel_plain > 5 * rel_ri


# --------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("compat", [False, True])
def test_gradcheck_points_and_weights(compat):
    X, Y = sphere_points(5, 3, seed=30), sphere_points(4, 3, seed=31, shift=0.6)
    a0, b0 = weights(5, 7), weights(4, 8)
    P = tsw.sample_projections(2, 6, seed=0, dtype=F64)
    Q = tsw.sample_rotations(3, 2, seed=1, dtype=F64)

    def f(X_s, X_t, u, v):
        # points through the normalisation: finite differences stay on the sphere (the
        # compat map's straight-through clamp differentiates tangentially only, as the
        # official code's)
        X_s, X_t = (torch.nn.functional.normalize(Z, dim=-1) for Z in (X_s, X_t))
        a, b = a0 + (u - u.mean()), b0 + (v - v.mean())
        return tsw.s3w(X_s, X_t, a, b, projections=P, rotations=Q, compat=compat, p=2)

    u = torch.zeros(5, dtype=F64, requires_grad=True)
    v = torch.zeros(4, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(f, (X.requires_grad_(), Y.requires_grad_(), u, v))


def test_map_gradcheck_at_and_near_the_south_pole():
    """The series branch: exact derivatives at the pole, continuous across the switch."""
    pts = [[0.0, 0.0, -1.0], [1e-5, -2e-5, -1.0], [3e-4, 1e-4, -1.0], [0.02, 0.01, -0.9]]
    S = torch.nn.functional.normalize(torch.tensor(pts, dtype=F64), dim=-1).requires_grad_()
    assert torch.autograd.gradcheck(s3w_map, (S,))
    # dh/dx = I / (pi |z|) at the pole
    J = torch.autograd.functional.jacobian(s3w_map, S.detach()[:1])[0, :, 0, :2]
    torch.testing.assert_close(J, torch.eye(2, dtype=F64) / math.pi, rtol=1e-15, atol=1e-15)
    # float32: the switch sits at t = |x|/|z| = eps32 ** 0.25 ~ 0.019
    t = torch.tensor([0.0185, 0.0187, 0.05])
    S32 = torch.stack([t, torch.zeros(3), -torch.ones(3)], dim=-1)
    S32 = torch.nn.functional.normalize(S32, dim=-1)
    torch.testing.assert_close(s3w_map(S32).double(), s3w_map(S32.double()), rtol=2e-7, atol=1e-8)


@pytest.mark.parametrize("compat", [False, True])
def test_finite_gradients_at_the_poles_and_duplicates(compat):
    e = torch.eye(3, dtype=F64)
    Y = sphere_points(6, 3, seed=40)
    cases = {
        "south": torch.stack([-e[2], e[0], -e[2]]),
        "north": torch.stack([e[2], e[1], e[2]]),
        "duplicates": torch.cat([Y[:3], Y[:3]]),
    }
    P = tsw.sample_projections(2, 8, seed=0, dtype=F64)
    for name, Z in cases.items():
        for kw in ({"projections": P}, {"projections": P, "n_rotations": 3, "seed": 1}):
            Zg, Yg = Z.clone().requires_grad_(), Y.clone().requires_grad_()
            value = tsw.s3w(Zg, Yg, compat=compat, **kw)
            grads = torch.autograd.grad(value, (Zg, Yg))
            assert bool(torch.isfinite(value)), name
            assert all(bool(torch.isfinite(g).all()) for g in grads), name
        Zg = Z.clone().requires_grad_()
        (g,) = torch.autograd.grad(tsw.s3w(Zg, Z, projections=P, compat=compat), Zg)
        assert bool(torch.isfinite(g).all())
    # the default map is constant (e_1) at the north pole: zero gradient there
    N = e[2:].clone().requires_grad_()
    (g,) = torch.autograd.grad(s3w_map(N).sum(), N)
    if not compat:
        assert not bool(g.any())


def test_compat_gradient_is_straight_through_the_clamp():
    """As the official .data edit: the gradient at a clamped point is the formula's there."""
    s = torch.nn.functional.normalize(torch.tensor([[1e-4, 0.0, 1.0]], dtype=F64), dim=-1)
    g1 = torch.autograd.functional.jacobian(lambda t: s3w_map(t, compat=True), s)
    z = float(np.float32(1 - 1e-6))
    clamped = torch.tensor([[math.sqrt(1 - z * z), 0.0, z]], dtype=F64)
    torch.testing.assert_close(s3w_map(s, compat=True), s3w_map(clamped, compat=True))
    g2 = torch.autograd.functional.jacobian(lambda t: s3w_map(t, compat=True), clamped)
    torch.testing.assert_close(g1, g2)


def test_gradient_of_the_default_map_is_tangent():
    S = sphere_points(20, 4, seed=50).requires_grad_()
    w = torch.randn(20, 3, generator=torch.Generator().manual_seed(0), dtype=F64)
    (g,) = torch.autograd.grad((s3w_map(S) * w).sum(), S)
    assert float((g * S.detach()).sum(-1).abs().max()) < 1e-14


# --------------------------------------------------------------------------- rotations


def test_sample_rotations_haar_on_so():
    Q = tsw.sample_rotations(4, 4000, seed=0, dtype=F64)
    eye = torch.eye(4, dtype=F64)
    torch.testing.assert_close(Q @ Q.transpose(-1, -2), eye.expand(4000, 4, 4))
    torch.testing.assert_close(torch.linalg.det(Q), torch.ones(4000, dtype=F64))
    # moments of Haar SO(4): E[Q] = 0, E[Q_ij^2] = 1/4 (4 standard errors)
    assert float(Q.mean(0).abs().max()) < 4 * 0.5 / math.sqrt(4000)
    assert float((Q**2).mean(0).sub(0.25).abs().max()) < 4 * 0.19 / math.sqrt(4000)
    # the image of e_(d+1) is uniform on the sphere: mean ~ 0
    assert float(Q[:, :, -1].mean(0).abs().max()) < 4 * 0.5 / math.sqrt(4000)
    # seeding contract: float64 draw, then cast
    assert torch.equal(tsw.sample_rotations(4, 3, seed=1), tsw.sample_rotations(4, 3, seed=1))
    torch.testing.assert_close(
        tsw.sample_rotations(4, 3, seed=1).double(),
        tsw.sample_rotations(4, 3, seed=1, dtype=F64),
        rtol=0,
        atol=1e-7,
    )


# --------------------------------------------------------------------------- losses


def _ari_recipe(X, Y, *, seed, dim, pool_size, n_rotations, calls, **kw):
    """The documented replay of ARIS3WLoss(seed=seed)."""
    g = torch.Generator().manual_seed(seed)
    pool = tsw.sample_rotations(dim, pool_size, generator=g, dtype=F64)
    out = []
    for _ in range(calls):
        idx = torch.randperm(pool_size, generator=g)[:n_rotations]
        out.append(tsw.s3w(X, Y, rotations=pool[idx].to(X), generator=g, **kw))
    return pool, out


def test_ari_loss_replays_its_documented_draws():
    X, Y = sphere_points(10, 3, seed=60), sphere_points(12, 3, seed=61, shift=0.4)
    kw = {"n_projections": 17, "p": 2}
    loss = tsw.nn.ARIS3WLoss(dim=3, pool_size=12, n_rotations=4, seed=3, **kw)
    pool, expected = _ari_recipe(X, Y, seed=3, dim=3, pool_size=12, n_rotations=4, calls=3, **kw)
    assert torch.equal(loss.pool, pool)
    values = [loss(X, Y) for _ in range(3)]
    for v, e in zip(values, expected, strict=True):
        assert torch.equal(v, e)
    assert not torch.equal(values[0], values[1])
    # resample=False: the generator's state after the pool, at every call
    fixed = tsw.nn.ARIS3WLoss(dim=3, pool_size=12, n_rotations=4, seed=3, resample=False, **kw)
    assert torch.equal(fixed.pool, pool)
    assert torch.equal(fixed(X, Y), expected[0])
    assert torch.equal(fixed(X, Y), expected[0])
    # float32 data: the float64 pool is cast at the call
    v32 = loss(X.float(), Y.float())
    assert v32.dtype == torch.float32


def test_ari_pool_determinism_and_buffer():
    a = tsw.nn.ARIS3WLoss(dim=4, pool_size=30, n_rotations=5, seed=1)
    b = tsw.nn.ARIS3WLoss(dim=4, pool_size=30, n_rotations=5, seed=1, resample=False)
    c = tsw.nn.ARIS3WLoss(dim=4, pool_size=30, n_rotations=5, seed=2)
    assert torch.equal(a.pool, b.pool)
    assert not torch.equal(a.pool, c.pool)
    assert not torch.equal(
        tsw.nn.ARIS3WLoss(dim=4, pool_size=30).pool, tsw.nn.ARIS3WLoss(dim=4, pool_size=30).pool
    )
    assert a.pool.dtype == F64
    assert a.pool.shape == (30, 4, 4)
    torch.testing.assert_close(torch.linalg.det(a.pool), torch.ones(30, dtype=F64))
    # a buffer: saved, loaded and moved with the module; it keeps float64 under
    # .to(dtype) / .half() (cast to the data's dtype at each call), so that it stays
    # orthogonal; the random stream is saved with it
    assert list(a.state_dict()) == ["pool", "_extra_state"]
    c.load_state_dict(a.state_dict())
    assert torch.equal(c.pool, a.pool)
    assert a.to(torch.float32).pool.dtype == F64
    assert a.half().pool.dtype == F64
    assert "pool" not in dict(a.named_parameters())
    assert "dim=4, pool_size=30, n_rotations=5" in repr(a)
    # the indices of one call are distinct (drawn without replacement)
    g = torch.Generator().manual_seed(0)
    idx = torch.randperm(30, generator=g)[:5]
    assert len(set(idx.tolist())) == 5


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_ari_pool_moves_to_cuda_and_matches_cpu():
    X, Y = sphere_points(10, 3, seed=70), sphere_points(12, 3, seed=71)
    cpu = tsw.nn.ARIS3WLoss(dim=3, pool_size=10, n_rotations=3, seed=0, resample=False)
    gpu = tsw.nn.ARIS3WLoss(dim=3, pool_size=10, n_rotations=3, seed=0, resample=False).cuda()
    assert gpu.pool.device.type == "cuda"
    v = gpu(X.cuda(), Y.cuda())
    assert v.device.type == "cuda"
    torch.testing.assert_close(v.cpu(), cpu(X, Y), rtol=1e-10, atol=1e-12)


def test_s3w_loss_equals_the_function():
    X, Y = sphere_points(10, 3, seed=80), sphere_points(12, 3, seed=81, shift=0.4)
    for R in (0, 3):
        loss = tsw.nn.S3WLoss(n_projections=9, n_rotations=R, compat=True, seed=4)
        g = torch.Generator().manual_seed(4)
        for _ in range(2):
            expected = tsw.s3w(X, Y, n_projections=9, n_rotations=R, compat=True, generator=g)
            assert torch.equal(loss(X, Y), expected)


# --------------------------------------------------------------------------- s3w_unif


def test_s3w_unif_is_s3w_against_its_uniform_sample():
    X = sphere_points(15, 3, seed=90, shift=0.5)
    a = weights(15, 9) * 3  # total mass 3: the uniform side carries it too
    g = torch.Generator().manual_seed(2)
    U = torch.nn.functional.normalize(torch.randn(300, 3, generator=g, dtype=F64), dim=-1)
    Q = tsw.sample_rotations(3, 2, generator=g, dtype=F64)
    P = tsw.sample_projections(2, 11, generator=g, dtype=F64)
    expected = tsw.s3w(X, U, a, torch.full((300,), 3 / 300, dtype=F64), rotations=Q, projections=P)
    value = tsw.s3w_unif(X, a, n_samples=300, n_rotations=2, n_projections=11, seed=2)
    torch.testing.assert_close(value, expected, rtol=1e-14, atol=0)
    # loss module
    loss = tsw.nn.S3WUnifLoss(n_samples=300, n_rotations=2, n_projections=11, seed=2)
    torch.testing.assert_close(loss(X, a), expected, rtol=1e-14, atol=0)


def test_s3w_unif_small_for_uniform_data_and_decreasing_in_n_samples():
    U = sphere_points(3000, 3, seed=91)
    C = sphere_points(3000, 3, seed=92, shift=2.0)
    u = [tsw.s3w_unif(U, n_samples=n, seed=0).item() for n in (100, 3000)]
    assert u[1] < u[0]
    assert u[1] < 0.02
    assert tsw.s3w_unif(C, seed=0).item() > 10 * u[1]


# --------------------------------------------------------------------------- sampling=


def _orthonormal_blocks(P, d):
    """Assert the columns of P (d, L) come in blocks of d orthonormal ones (the last cut)."""
    for start in range(0, P.shape[-1], d):
        block = P[:, start : start + d]
        eye = torch.eye(block.shape[-1], dtype=P.dtype)
        torch.testing.assert_close(block.T @ block, eye, rtol=0, atol=1e-12)


@pytest.mark.parametrize("R", [0, 2])
def test_s3w_sampling_draws_rotations_then_sample_projections(R):
    """The directions of R^d are tsw.sample_projections(d, L, sampling=) after the rotations."""
    X, Y = sphere_points(9, 3, seed=100), sphere_points(8, 3, seed=101, shift=0.5)
    kw = {"n_rotations": R, "n_projections": 5}
    default = tsw.s3w(X, Y, **kw, seed=7)
    assert torch.equal(tsw.s3w(X, Y, **kw, sampling="iid", seed=7), default)
    values = {}
    for sampling in ("iid", "orthogonal", "qmc"):
        g = torch.Generator().manual_seed(7)
        Q = tsw.sample_rotations(3, R, generator=g, dtype=F64) if R else None
        P = tsw.sample_projections(2, 5, sampling=sampling, generator=g, dtype=F64)
        if not R:  # no rotations drawn: the seed's directions are sample_projections(seed=)
            assert torch.equal(
                P, tsw.sample_projections(2, 5, sampling=sampling, seed=7, dtype=F64)
            )
        value, log = tsw.s3w(X, Y, **kw, sampling=sampling, seed=7, log=True)
        assert torch.equal(log["projections"], P)
        assert torch.equal(value, tsw.s3w(X, Y, rotations=Q, projections=P))
        assert bool(torch.isfinite(value))
        values[sampling] = value
    assert not torch.equal(values["orthogonal"], values["iid"])
    assert not torch.equal(values["qmc"], values["iid"])
    _, log = tsw.s3w(X, Y, **kw, sampling="orthogonal", seed=7, log=True)
    _orthonormal_blocks(log["projections"], 2)  # 5 = 2 + 2 + 1 directions of R^2


def test_s3w_unif_sampling_draws_uniform_rotations_then_sample_projections():
    X = sphere_points(12, 3, seed=102, shift=0.5)
    kw = {"n_samples": 40, "n_rotations": 2, "n_projections": 5}
    assert torch.equal(tsw.s3w_unif(X, **kw, sampling="iid", seed=2), tsw.s3w_unif(X, **kw, seed=2))
    b = torch.full((40,), 1 / 40, dtype=F64)
    values = {}
    for sampling in ("iid", "orthogonal", "qmc"):
        g = torch.Generator().manual_seed(2)
        U = torch.nn.functional.normalize(torch.randn(40, 3, generator=g, dtype=F64), dim=-1)
        Q = tsw.sample_rotations(3, 2, generator=g, dtype=F64)
        P = tsw.sample_projections(2, 5, sampling=sampling, generator=g, dtype=F64)
        value, log = tsw.s3w_unif(X, **kw, sampling=sampling, seed=2, log=True)
        assert torch.equal(log["projections"], P)
        expected = tsw.s3w(X, U, None, b, rotations=Q, projections=P)
        torch.testing.assert_close(value, expected, rtol=1e-14, atol=0)
        values[sampling] = value
    assert not torch.equal(values["orthogonal"], values["iid"])
    assert not torch.equal(values["qmc"], values["iid"])


def test_s3w_bad_sampling_raises():
    X = sphere_points(6, 3, seed=103)
    for bad in ("sobol", None):
        with pytest.raises(ValueError, match="sampling must be one of"):
            tsw.s3w(X, X, n_projections=3, sampling=bad)
        with pytest.raises(ValueError, match="sampling must be one of"):
            tsw.s3w_unif(X, n_samples=5, n_projections=3, sampling=bad)
        with pytest.raises(ValueError, match="sampling must be one of"):
            tsw.nn.S3WLoss(sampling=bad)
        with pytest.raises(ValueError, match="sampling must be one of"):
            tsw.nn.ARIS3WLoss(dim=3, pool_size=4, sampling=bad)


def test_s3w_losses_take_sampling():
    """S3WLoss, S3WUnifLoss and ARIS3WLoss equal their function with the same sampling."""
    X, Y = sphere_points(9, 3, seed=104), sphere_points(8, 3, seed=105, shift=0.5)
    for sampling in ("orthogonal", "qmc"):
        kw = {"n_projections": 5, "sampling": sampling}
        loss = tsw.nn.S3WLoss(n_rotations=2, seed=4, **kw)
        assert loss.options["sampling"] == sampling
        assert torch.equal(loss(X, Y), tsw.s3w(X, Y, n_rotations=2, seed=4, **kw))
        unif = tsw.nn.S3WUnifLoss(n_samples=30, seed=4, **kw)
        assert torch.equal(unif(X), tsw.s3w_unif(X, n_samples=30, seed=4, **kw))
        ari = tsw.nn.ARIS3WLoss(dim=3, pool_size=6, n_rotations=2, seed=3, **kw)
        _, expected = _ari_recipe(X, Y, seed=3, dim=3, pool_size=6, n_rotations=2, calls=2, **kw)
        assert [torch.equal(ari(X, Y), e) for e in expected] == [True, True]
        iid = _ari_recipe(X, Y, seed=3, dim=3, pool_size=6, n_rotations=2, calls=1, n_projections=5)
        assert not torch.equal(expected[0], iid[1][0])


# --------------------------------------------------------------------------- checks of the options


def test_s3w_rotations():
    X, Y = on_sphere(5, 3), on_sphere(4, 3, seed=1)
    Q = tsw.sample_rotations(3, 2, seed=0, dtype=F64)
    with pytest.raises(TypeError, match=lit("rotations must be a torch.Tensor; got list")):
        tsw.s3w(X, Y, rotations=Q.tolist())
    with pytest.raises(
        ValueError,
        match=lit("rotations must have shape (R, d+1, d+1) with d+1=3; got rotations.shape=(3, 3)"),
    ):
        tsw.s3w(X, Y, rotations=Q[0])
    with pytest.raises(ValueError, match=lit("got rotations.shape=(0, 3, 3)")):
        tsw.s3w(X, Y, rotations=Q[:0])
    with pytest.raises(ValueError, match=lit("with d+1=3; got rotations.shape=(2, 4, 4)")):
        tsw.s3w(X, Y, rotations=tsw.sample_rotations(4, 2, dtype=F64))
    # (B, R, d+1, d+1) only for batched measures, with their batch size
    with pytest.raises(ValueError, match=lit("with d+1=3; got rotations.shape=(1, 2, 3, 3)")):
        tsw.s3w(X, Y, rotations=Q[None])
    with pytest.raises(
        ValueError, match=lit("or (B, R, d+1, d+1); got rotations.shape=(3, 2, 3, 3)")
    ):
        tsw.s3w(X[None].expand(2, 5, 3), Y[None].expand(2, 4, 3), rotations=Q.expand(3, 2, 3, 3))
    with pytest.raises(ValueError, match=lit("rotations must have the dtype and device of X_s")):
        tsw.s3w(X, Y, rotations=Q.float())
    with pytest.raises(
        ValueError,
        match=lit(
            "rotations must have orthogonal matrices (max |Q^T Q - I| <= 1.0e-06 in "
            "torch.float64); got a deviation of 0.21"
        ),
    ):
        tsw.s3w(X, Y, rotations=1.1 * Q)
    bad = Q.clone()
    bad[1, 0, 0] = math.nan
    with pytest.raises(ValueError, match=lit("rotations contains NaN or Inf values")):
        tsw.s3w(X, Y, rotations=bad)
    # value checks are skipped with validate=False (shape checks stay)
    assert tsw.s3w(X, Y, rotations=1.1 * Q, validate=False).shape == ()
    with pytest.raises(ValueError, match=lit("rotations must have shape")):
        tsw.s3w(X, Y, rotations=Q[0], validate=False)


def test_s3w_options():
    X, Y = on_sphere(5, 3), on_sphere(4, 3, seed=1)
    with pytest.raises(ValueError, match=lit("n_rotations must be an int >= 0; got -1")):
        tsw.s3w(X, Y, n_rotations=-1)
    with pytest.raises(TypeError, match=lit("n_rotations must be an int >= 0; got float")):
        tsw.s3w(X, Y, n_rotations=2.0)
    with pytest.raises(TypeError, match=lit("n_rotations must be an int >= 0; got bool")):
        tsw.s3w_unif(X, n_rotations=True)
    with pytest.raises(TypeError, match=lit("compat must be True or False; got int")):
        tsw.s3w(X, Y, compat=1)
    with pytest.raises(ValueError, match=lit("n_projections must be an int >= 1; got 0")):
        tsw.s3w(X, Y, n_projections=0)
    with pytest.raises(ValueError, match=lit("p must be a finite real number >= 1; got 0.5")):
        tsw.s3w(X, Y, p=0.5)
    with pytest.raises(ValueError, match=lit("n_samples must be an int >= 1; got 0")):
        tsw.s3w_unif(X, n_samples=0)
    # projections live in the mapped dimension d = (d+1) - 1
    with pytest.raises(
        ValueError,
        match=lit("projections must have shape (d, L) with d=2; got projections.shape=(3, 4)"),
    ):
        tsw.s3w(X, Y, projections=tsw.sample_projections(3, 4, dtype=F64))
    with pytest.raises(ValueError, match=lit("projections must have the dtype and device of X_s")):
        tsw.s3w(X, Y, projections=tsw.sample_projections(2, 4))
    with pytest.raises(
        TypeError, match=lit("generator must be a torch.Generator or None; got int")
    ):
        tsw.s3w_unif(X, generator=0)


def test_s3w_map_and_rotation_sampler_arguments():
    with pytest.raises(TypeError, match=lit("X must be a torch.Tensor; got list")):
        tsw.s3w_map([[0.0, 1.0]])
    with pytest.raises(
        ValueError, match=lit("X must have d+1 >= 2 coordinates to describe points of the sphere")
    ):
        tsw.s3w_map(torch.ones(3, 1))
    with pytest.raises(TypeError, match=lit("compat must be True or False; got str")):
        tsw.s3w_map(torch.ones(3, 2), compat="yes")
    with pytest.raises(
        ValueError, match=lit("rotations of the sphere need dim = d+1 >= 2; got dim=1")
    ):
        tsw.sample_rotations(1, 3)
    with pytest.raises(ValueError, match=lit("n_rotations must be an int >= 1; got 0")):
        tsw.sample_rotations(3, 0)
    with pytest.raises(ValueError, match=lit("pass at most one of seed and generator")):
        tsw.sample_rotations(3, 2, seed=0, generator=torch.Generator())


def test_ari_loss_arguments():
    with pytest.raises(
        ValueError, match=lit("n_rotations must be <= pool_size = 4; got n_rotations=5")
    ):
        tsw.nn.ARIS3WLoss(dim=3, pool_size=4, n_rotations=5)
    with pytest.raises(ValueError, match=lit("n_rotations must be an int >= 1; got 0")):
        tsw.nn.ARIS3WLoss(dim=3, n_rotations=0)
    with pytest.raises(ValueError, match=lit("pool_size must be an int >= 1; got 0")):
        tsw.nn.ARIS3WLoss(dim=3, pool_size=0)
    with pytest.raises(TypeError, match=lit("pool_size must be an int >= 1; got float")):
        tsw.nn.ARIS3WLoss(dim=3, pool_size=10.0)
    with pytest.raises(
        ValueError, match=lit("rotations of the sphere need dim = d+1 >= 2; got dim=1")
    ):
        tsw.nn.ARIS3WLoss(dim=1)
    with pytest.raises(TypeError, match="dim"):
        tsw.nn.ARIS3WLoss()  # the pool's dimension is required
    loss = tsw.nn.ARIS3WLoss(dim=3, pool_size=4, n_rotations=2)
    with pytest.raises(
        ValueError,
        match=lit(
            "X_s must have dim=3 coordinates (the dimension of the rotation pool); "
            "got X_s.shape=(5, 4)"
        ),
    ):
        loss(on_sphere(5, 4), on_sphere(4, 4))
    with pytest.raises(ValueError, match=lit("p must be a finite real number >= 1; got 0.5")):
        tsw.nn.ARIS3WLoss(dim=3, p=0.5)(on_sphere(5, 3), on_sphere(4, 3))
