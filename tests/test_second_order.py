"""Second derivatives: Hessian-vector products equal finite differences of the gradient.

Every distance is checked with ``torch.autograd.gradgradcheck`` (its analytical second
derivative against finite differences of its analytical gradient) on small float64
problems, with slices that do not depend on the data (explicit trees or directions, or a
given center), in one block and in several, with the compiled kernels and with the
torch operators. The distances whose second derivative is not available raise a clear
error instead of returning a silent zero.
"""

from __future__ import annotations

import _curved
import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

import tsw
from tsw.core import _kernels

F64 = torch.float64


def _points(n, d, seed, shift=0.0, sphere=False):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=F64) + shift
    return torch.nn.functional.normalize(X, dim=-1) if sphere else X


X5, Y5 = _points(6, 5, 0), _points(7, 5, 1, 0.5)
X3, Y3 = _points(6, 3, 2), _points(7, 3, 3, 0.4)
X2, Y2 = _points(6, 2, 4), _points(7, 2, 5, 0.4)
S, T = _points(6, 3, 6, 0.2, sphere=True), _points(7, 3, 7, sphere=True)
S4, T4 = _points(5, 4, 8, 0.2, sphere=True), _points(6, 4, 9, sphere=True)


def _trees(d, seed=0, k=2):
    return tsw.sample_concurrent_lines(d, n_trees=3, n_lines=k, seed=seed, dtype=F64)


def _spherical(d, seed=0):
    return tsw.sample_spherical_trees(d, n_trees=3, n_lines=2, seed=seed, dtype=F64)


def _hyperbolic(X, model="lorentz"):
    """Generic points of R^d carried onto H^d (tests/_curved.py)."""
    return _curved.hyperbolic(X, model)


#: points of H^3 (Lorentz and ball), 3 x 3 SPD matrices, and their directions
H3, K3 = _hyperbolic(X3), _hyperbolic(Y3)
B3, D3 = _hyperbolic(X3, "poincare"), _hyperbolic(Y3, "poincare")
M3, N3 = _curved.spd(X5), _curved.spd(Y5)
U3 = tsw.sample_projections(3, 4, seed=0, dtype=F64)
A3 = tsw.sample_spd_projections(3, 4, seed=0, dtype=F64)


def _sym(X):
    return (X + X.mT) / 2


C5, C3, C2 = _trees(5), _trees(3), _trees(2)
CHAIN = tsw.sample_chain_lines(5, n_trees=3, n_lines=2, seed=0, dtype=F64)
P5 = tsw.sample_projections(5, 4, seed=0, dtype=F64)
P2_SPHERE = tsw.sample_sphere_projections(3, 4, seed=0, dtype=F64)

# (name, function of the source points, the source points, chunked)
CASES = [
    ("db_tsw", lambda X: tsw.db_tsw(X, Y5, trees=C5), X5, True),
    ("db_tsw p=2", lambda X: tsw.db_tsw(X, Y5, trees=C5, p=2), X5, True),
    ("db_tsw p=1.5", lambda X: tsw.db_tsw(X, Y5, trees=C5, p=1.5), X5, True),
    ("db_tsw d=3", lambda X: tsw.db_tsw(X, Y3, trees=C3), X3, True),
    ("db_tsw d=2", lambda X: tsw.db_tsw(X, Y2, trees=C2, p=2), X2, True),
    ("db_tsw delta=0", lambda X: tsw.db_tsw(X, Y5, trees=C5, delta=0.0), X5, True),
    ("tsw_sl chain", lambda X: tsw.tsw_sl(X, Y5, trees=CHAIN, p=2), X5, True),
    ("tsw_sl star", lambda X: tsw.tsw_sl(X, Y5, trees=C5), X5, True),
    ("circular r=0", lambda X: tsw.circular_tsw(X, Y5, radius=0.0, trees=C5), X5, True),
    ("circular", lambda X: tsw.circular_tsw(X, Y5, radius=0.3, trees=C5), X5, True),
    ("spatial", lambda X: tsw.spatial_tsw(X, Y5, trees=C5, mapping="poly", degree=1), X5, True),
    ("partial", lambda X: tsw.partial_tsw(X, Y5, trees=C5, mass_t=0.8), X5, True),
    ("ts_sobolev", lambda X: tsw.ts_sobolev(X, Y5, trees=C5), X5, True),
    ("ts_sobolev p=1.5", lambda X: tsw.ts_sobolev(X, Y5, trees=C5, p=1.5), X5, True),
    ("ts_sobolev p=3 delta=0", lambda X: tsw.ts_sobolev(X, Y5, trees=C5, p=3, delta=0.0), X5, True),
    ("ts_sobolev p=1", lambda X: tsw.ts_sobolev(X, Y5, trees=C5, p=1), X5, True),
    ("sw", lambda X: tsw.sw(X, Y5, projections=P5), X5, True),
    ("sw p=1", lambda X: tsw.sw(X, Y5, projections=P5, p=1), X5, True),
    (
        "sw weighted",
        lambda X: tsw.sw(
            X,
            Y5[:6],
            torch.full((6,), 1 / 6, dtype=F64),
            torch.linspace(1, 2, 6, dtype=F64) / 9,
            projections=P5,
        ),
        X5,
        True,
    ),
    ("lcv_sw", lambda X: tsw.lcv_sw(X, Y5, projections=P5), X5, True),
    (
        "lcv_sw upper leave_one_out",
        lambda X: tsw.lcv_sw(
            X, Y5, projections=P5, p=1.5, variate="upper", coefficient="leave_one_out"
        ),
        X5,
        True,
    ),
    ("rp_sw given", lambda X: tsw.rp_sw(X, Y5, projections=P5), X5, True),
    ("partial_sw", lambda X: tsw.partial_sw(X, Y5, projections=P5, n_transported=4), X5, False),
    ("stsw", lambda X: tsw.stsw(X, T, trees=_spherical(3), renormalize=True), S, True),
    ("stsw p=2", lambda X: tsw.stsw(X, T, trees=_spherical(3), p=2, renormalize=True), S, True),
    ("stsw S^3", lambda X: tsw.stsw(X, T4, trees=_spherical(4), renormalize=True), S4, True),
    ("stsw_unif", lambda X: tsw.stsw_unif(X, trees=_spherical(3), renormalize=True), S, True),
    (
        "spatial_stsw",
        lambda X: tsw.spatial_stsw(X, T, trees=_spherical(4), renormalize=True),
        S,
        True,
    ),
    (
        "ssw_unif",
        lambda X: tsw.ssw_unif(X, None, projections=P2_SPHERE, renormalize=True),
        S,
        False,
    ),
    ("s3w", lambda X: tsw.s3w(X, T, n_rotations=2, seed=0, renormalize=True), S, False),
    ("s3w_unif", lambda X: tsw.s3w_unif(X, n_samples=20, seed=0, renormalize=True), S, False),
    # on H^3 and SPD(3) (the points are moved off the manifold by the finite differences:
    # validate=False; a Lorentz point's x_0 is not read, SPD matrices are symmetrised)
    ("ghsw", lambda X: tsw.ghsw(X, K3, projections=U3, validate=False), H3, True),
    (
        "hhsw poincare",
        lambda X: tsw.hhsw(X, D3, projections=U3, model="poincare", p=1.5),
        B3,
        True,
    ),
    ("spdsw", lambda X: tsw.spdsw(_sym(X), N3, projections=A3, validate=False), M3, True),
    # (three matrices and two directions: a Cholesky factorisation per pair is slow to
    # differentiate twice)
    (
        "hspdsw",
        lambda X: tsw.hspdsw(_sym(X), N3[:4], projections=A3[:2], p=1.5, validate=False),
        M3[:3],
        True,
    ),
]


def _with_blocks(fn, chunked):
    """The distance evaluated in blocks of one slice, through the blocks' gradients."""
    import tsw.core._driver as driver

    def blocked(X):
        with pytest.MonkeyPatch.context() as mp:
            real = driver._plan

            def one_slice(problem, measures, counts, slices):
                return real(problem.replace(chunk_size=1), measures, counts, slices)

            mp.setattr(driver, "_plan", one_slice)
            return fn(X)

    return blocked if chunked else fn


#: the cases whose every variant (blocks, torch operators) runs by default; the rest run
#: in one block with the compiled kernels by default, and in every variant with -m slow
ALWAYS = {"db_tsw", "sw", "stsw"}


def _variants():
    for name, fn, X, chunked in CASES:
        for kernels in (True, False):
            for blocks in (False, True) if chunked else (False,):
                marks = () if name in ALWAYS or (kernels and not blocks) else (pytest.mark.slow,)
                how = ("compiled" if kernels else "torch", "blocks" if blocks else "one block")
                label = f"{name}-{how[0]}-{how[1]}"
                yield pytest.param(fn, X, blocks, kernels, id=label, marks=marks)


@pytest.mark.parametrize(("fn", "X", "blocks", "kernels"), list(_variants()))
def test_second_derivatives_equal_finite_differences(fn, X, blocks, kernels):
    with pytest.MonkeyPatch.context() as mp:
        if not kernels:
            mp.setattr(_kernels, "usable", lambda *t, **k: False)
        f = _with_blocks(fn, blocks)
        x = X.clone().requires_grad_(True)
        assert gradcheck(f, (x,))
        assert gradgradcheck(f, (x,))


def test_the_gradient_carries_its_graph_in_blocks():
    """With create_graph, the gradient evaluated in blocks has a graph (it had none when
    each block's gradient was formed during the forward pass alone)."""
    X = X5.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(tsw.db_tsw(X, Y5, trees=C5, chunk_size=1), X, create_graph=True)
    assert g.grad_fn is not None


def test_gradient_penalty_with_a_loss_module():
    """A WGAN-GP-style penalty (|grad| - 1)^2 of DbTSWLoss: its gradient equals finite
    differences of the penalty."""
    loss = tsw.nn.DbTSWLoss(
        n_trees=3, n_lines=2, center=torch.zeros(5, dtype=F64), seed=0, resample=False
    )

    def penalty(X):
        (g,) = torch.autograd.grad(loss(X, Y5), X, create_graph=True)
        return (g.norm() - 1) ** 2

    X = X5.clone().requires_grad_(True)
    (got,) = torch.autograd.grad(penalty(X), X)
    V = _points(6, 5, 11)
    eps = 1e-6

    def value(Z):
        return penalty(Z.clone().requires_grad_(True)).detach()

    fd = (value(X5 + eps * V) - value(X5 - eps * V)) / (2 * eps)
    torch.testing.assert_close((got * V).sum(), fd, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("ssw", lambda X: tsw.ssw(X, T, seed=0)),
        ("unbalanced_sw", lambda X: tsw.unbalanced_sw(X, T, seed=0, mass_t=0.8)),
        ("max_sw", lambda X: tsw.max_sw(X, T, seed=0, n_iter=3)),
        ("max_tsw_sl", lambda X: tsw.max_tsw_sl(X, T, seed=0, n_iter=3, lr=0.1)),
        ("max_tsw_sl", lambda X: tsw.max_tsw_sl(X, T, seed=0, n_iter=0)),
        ("rp_sw", lambda X: tsw.rp_sw(X, T, n_projections=4, seed=0)),
        ("rp_sw", lambda X: tsw.rp_sw(X, T, n_projections=4, kappa=10.0, seed=0)),
        ("eb_sw", lambda X: tsw.eb_sw(X, T, n_projections=4, seed=0)),
    ],
)
def test_no_second_derivative_raises_naming_the_distance(name, call):
    X = S.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(call(X), X)  # the gradient itself is there
    assert torch.isfinite(g).all()
    with pytest.raises(RuntimeError, match=f"{name} has no second derivative"):
        torch.autograd.grad(call(X), X, create_graph=True)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"power": True},
        {"power": True, "p": 1.5, "energy": "identity"},
        {"p": 1},
        {"p": 1, "energy": "identity"},
    ],
    ids=["power", "power identity p=1.5", "p=1", "identity p=1"],
)
@pytest.mark.parametrize("blocks", [False, True], ids=["one block", "blocks"])
def test_eb_sw_second_derivative_is_that_of_its_held_weights_gradient(kwargs, blocks):
    """EB-SW's gradient holds the importance weights fixed (the authors' gradient), so
    it is not the derivative of the value (gradcheck fails, as designed); its own
    derivative, the weights' change included, equals finite differences of it. With the
    1/p root of p > 1 that derivative is not available and raises (the case above)."""
    f = _with_blocks(lambda X: tsw.eb_sw(X, Y5, projections=P5, **kwargs), blocks)
    x = X5.clone().requires_grad_(True)
    assert not gradcheck(f, (x,), raise_exception=False)
    assert gradgradcheck(f, (x,))


def test_eb_sw_exp_gradient_is_that_of_log_sum_exp():
    """With the exponential energy the held-weights gradient is a gradient after all:
    sum_l softmax(W)_l grad W_l = grad logsumexp(W). An independent check of the power
    form's gradient and of its (then symmetric) second derivative."""
    x = X5.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(tsw.eb_sw(x, Y5, projections=P5, power=True), x, create_graph=True)

    def lse(X):
        u, v = (X @ P5).T, (Y5 @ P5).T
        return torch.logsumexp(tsw.wasserstein_1d(u, v, p=2), 0)

    y = X5.clone().requires_grad_(True)
    (ref,) = torch.autograd.grad(lse(y), y, create_graph=True)
    torch.testing.assert_close(g, ref, rtol=1e-12, atol=1e-14)
    V = _points(6, 5, 12)
    (hv,) = torch.autograd.grad((g * V).sum(), x)
    (hv_ref,) = torch.autograd.grad((ref * V).sum(), y)
    torch.testing.assert_close(hv, hv_ref, rtol=1e-10, atol=1e-12)


def test_tree_wasserstein_and_the_closed_forms():
    g = torch.Generator().manual_seed(3)
    lengths = torch.rand(5, generator=g, dtype=F64).requires_grad_()
    mu = torch.rand(5, generator=g, dtype=F64)
    nu = torch.rand(5, generator=g, dtype=F64)
    mu, nu = (mu / mu.sum()).requires_grad_(), (nu / nu.sum()).requires_grad_()
    parents = [-1, 0, 0, 1, 1]
    assert gradgradcheck(
        lambda w, a, b: tsw.tree_wasserstein(parents, w, a, b, p=2, validate=False),
        (lengths, mu, nu),
    )
    c = torch.randn(2, 3, 6, generator=g, dtype=F64).requires_grad_()
    m = torch.randn(2, 3, 6, generator=g, dtype=F64).requires_grad_()
    att = torch.randn(2, 3, generator=g, dtype=F64).requires_grad_()
    assert gradgradcheck(lambda c, m, a: tsw.line_system_cost(c, m, a, 2.0), (c, m, att))
    u = torch.randn(3, 7, generator=g, dtype=F64).requires_grad_()
    v = torch.randn(3, 5, generator=g, dtype=F64).requires_grad_()
    assert gradgradcheck(lambda u, v: tsw.wasserstein_1d(u, v, p=2), (u, v))


def test_a_center_that_requires_grad_gets_its_gradient():
    """``center`` is not detached: its gradient equals finite differences, and a loss
    module trains an ``nn.Parameter`` center."""
    c = torch.zeros(5, dtype=F64, requires_grad=True)
    (got,) = torch.autograd.grad(tsw.db_tsw(X5, Y5, center=c, n_trees=4, seed=0), c)
    eps = 1e-6
    for i in range(5):
        e = torch.zeros(5, dtype=F64)
        e[i] = eps
        fd = (
            tsw.db_tsw(X5, Y5, center=e, n_trees=4, seed=0)
            - tsw.db_tsw(X5, Y5, center=-e, n_trees=4, seed=0)
        ) / (2 * eps)
        torch.testing.assert_close(got[i], fd, rtol=1e-6, atol=1e-9)
    loss = tsw.nn.DbTSWLoss(center=torch.nn.Parameter(torch.zeros(5, dtype=F64)), n_trees=4, seed=0)
    loss(X5, Y5).backward()
    assert loss.center.grad is not None
    assert torch.equal(loss.center.grad, got)


def test_other_tensor_options_get_their_gradients():
    """alpha (TSW-SL's split), a mass (PartialTSW), explicit trees and projections."""
    alpha = torch.tensor([0.3, 0.7], dtype=F64, requires_grad=True)
    assert gradcheck(lambda a: tsw.tsw_sl(X5, Y5, trees=C5, alpha=a / a.sum()), (alpha,))
    mass = torch.tensor(0.8, dtype=F64, requires_grad=True)
    assert gradcheck(lambda m: tsw.partial_tsw(X5, Y5, trees=C5, mass_t=m), (mass,))
    roots = C5.roots.clone().requires_grad_(True)
    assert gradcheck(
        lambda r: tsw.db_tsw(X5, Y5, trees=tsw.ConcurrentLines(r, C5.directions)), (roots,)
    )
    P = P5.clone().requires_grad_(True)
    assert gradcheck(lambda q: tsw.sw(X5, Y5, projections=q / q.norm(dim=0)), (P,))


W6 = torch.linspace(1.0, 2.0, 6, dtype=F64) / 9.0
W7 = torch.full((7,), 1.0 / 7, dtype=F64) * W6.sum()


@pytest.mark.parametrize(
    ("name", "call", "Y0"),
    [
        (
            "tsw_sl star p=2",
            lambda Y, b: tsw.tsw_sl(X2, Y, W6, b, trees=C2, p=2, validate=False),
            Y2,
        ),
        (
            "tsw_sl chain p=1.5",
            lambda Y, b: tsw.tsw_sl(X5, Y, W6, b, trees=CHAIN, p=1.5, validate=False),
            Y5,
        ),
    ],
    ids=["tsw_sl star p=2", "tsw_sl chain p=1.5"],
)
def test_second_derivatives_in_the_target_alone(name, call, Y0):
    """Only the later inputs (the target's points and weights) want a gradient, the
    source's not: the second derivatives still equal finite differences of the gradient
    (a guard that looked at the first input only would drop them). Without validation:
    the finite differences move the weights' total off the source's."""
    for wants in ((True, False), (False, True), (True, True)):
        Y = Y0.clone().requires_grad_(wants[0])
        b = W7.clone().requires_grad_(wants[1])
        inputs = tuple(t for t in (Y, b) if t.requires_grad)

        def f(*ts, Y=Y, b=b, wants=wants):
            it = iter(ts)
            return call(next(it) if wants[0] else Y, next(it) if wants[1] else b)

        assert gradgradcheck(f, inputs), (name, wants)


def test_a_gradient_of_the_second_weights_alone_raises_where_there_is_none():
    """ssw refuses gradients of the weights: of ``b`` alone too, not only of ``a``."""
    a = torch.full((6,), 1 / 6, dtype=F64)
    b = torch.full((7,), 1 / 7, dtype=F64, requires_grad=True)
    value = tsw.ssw(S, T, a, b, n_projections=3, seed=0)
    with pytest.raises(RuntimeError, match="ssw has no gradient with respect to the weights"):
        torch.autograd.grad(value, b)
