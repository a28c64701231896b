"""Edges a user meets: options reassigned across kinds, messages that name the argument,
and properties checked against their formulas (the standard error, batched medians)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import ot
import pytest
import torch

import tsw
from tsw.core._slices import geometric_median
from tsw.core._validation import Measures

F64 = torch.float64


def _data(n=20, m=24, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=F64), torch.randn(m, d, generator=g, dtype=F64)


# ----------------------------------------------------------------- options change kind


def test_a_tensor_option_takes_a_float_and_back():
    X, Y = _data()
    loss = tsw.nn.PartialTSWLoss(mass_t=torch.tensor(0.8, dtype=F64), n_trees=4, seed=0,
                                 resample=False)  # fmt: skip
    by_tensor = loss(X, Y)
    loss.mass_t = 0.8
    assert "mass_t" not in loss._buffers
    assert torch.equal(loss(X, Y), by_tensor)
    loss.mass_t = torch.nn.Parameter(torch.tensor(0.8, dtype=F64))
    assert [name for name, _ in loss.named_parameters()] == ["mass_t"]
    loss.mass_t = torch.tensor(0.6, dtype=F64)
    assert list(loss.parameters()) == []
    assert "mass_t" in loss._buffers
    with pytest.raises(ValueError, match="mass_t must be a finite real number >= 0"):
        loss.mass_t = -1.0


def test_center_and_mapping_change_kind():
    X, Y = _data()
    loss = tsw.nn.DbTSWLoss(center=torch.zeros(3, dtype=F64), n_trees=4, seed=0, resample=False)
    loss.center = "median"
    assert loss.center == "median"
    assert "center" not in loss._buffers
    assert torch.equal(
        loss(X, Y), tsw.db_tsw(X, Y, center="median", n_trees=4, seed=loss._fixed_seed)
    )
    spatial = tsw.nn.SpatialTSWLoss(mapping=torch.nn.Linear(3, 4, dtype=F64), n_trees=4, seed=0)
    assert len(list(spatial.parameters())) == 2
    spatial.mapping = "pow"
    assert list(spatial.parameters()) == []
    assert torch.isfinite(spatial(X, Y))


# ------------------------------------------------------------------------------ messages


def test_the_first_bad_argument_is_named():
    with pytest.raises(TypeError, match=r"X_s must be a torch\.Tensor or a numpy array"):
        tsw.db_tsw([[1.0, 2.0]], np.zeros((3, 2)))
    with pytest.raises(TypeError, match="X_s must be a dense"):
        tsw.db_tsw(torch.randn(5, 2).to_sparse(), torch.randn(4, 2))


def test_read_only_arrays_raise_no_warning():
    X, Y = (x.numpy() for x in _data())
    X.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isfinite(tsw.sw(X, Y, seed=0))


def test_trees_needed_for_an_unreachable_target():
    X, Y = _data()
    _, log = tsw.db_tsw(X, Y, n_trees=10, seed=0, log=True)
    with pytest.raises(ValueError, match="ask for a larger rel_std_error"):
        tsw.trees_needed(log, rel_std_error=1e-300)


def test_traced_loss_without_weights():
    """Tracing a loss without weights raises naming the loss and pointing to
    torch.compile: a trace would keep the example inputs' draws and sorts
    (tests/test_tracing.py covers every public function)."""
    loss = tsw.nn.SWLoss(n_projections=10, seed=0, resample=False)
    X, Y = (x.float() for x in _data())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.trace is deprecated
        with pytest.raises(RuntimeError, match=r"^tsw\.nn\.SWLoss: torch\.jit\.trace cannot"):
            torch.jit.trace(loss, (X, Y), check_trace=False)


# ------------------------------------------------------- properties against formulas


@pytest.mark.parametrize(("p", "power"), [(1, False), (2, False), (2, True), (1.5, False)])
def test_std_error_is_its_formula(p, power):
    """The sample standard deviation (ddof = 1) over sqrt(T), through the root by the
    delta method: computed here with NumPy from the per-tree costs."""
    X, Y = _data()
    _, log = tsw.db_tsw(X, Y, n_trees=37, seed=1, p=p, power=power, log=True)
    c = log["per_tree"].detach().numpy()
    se = np.std(c, ddof=1) / math.sqrt(len(c))
    if not power:
        se = se * np.mean(c) ** (1 / p - 1) / p
    assert abs(float(log["std_error"]) - se) <= 1e-12 * se


def test_batched_geometric_median_is_each_items_median():
    """Items that are not translates of each other converge in different numbers of
    steps: each batched median equals its item's own."""
    g = torch.Generator().manual_seed(3)
    items = [
        torch.randn(30, 2, generator=g, dtype=F64),
        torch.randn(30, 2, generator=g, dtype=F64) * torch.tensor([5.0, 0.1], dtype=F64),
        torch.cat([torch.zeros(20, 2, dtype=F64), torch.randn(10, 2, generator=g, dtype=F64) * 9]),
    ]

    def measures(X):
        w = torch.full(X.shape[:-1], 1 / X.shape[-2], dtype=F64)
        return Measures(X, X[..., :0, :], w, w[..., :0], X.ndim == 3)

    batched = geometric_median(measures(torch.stack(items)))
    for i, X in enumerate(items):
        torch.testing.assert_close(batched[i], geometric_median(measures(X[None]))[0])


# ----------------------------------------------------------------- large p and extreme options


def _tree_value_logdomain(parents, lengths, m_s, m_t, p):
    """(sum_v w_v |mu(subtree v) - nu(subtree v)|^p)^(1/p) through logs, node by node."""
    n = len(parents)
    sub = np.array(m_s, dtype=float) - np.array(m_t, dtype=float)
    order = sorted(range(n), key=lambda v: -_depth(parents, v))
    for v in order:  # children before parents: accumulate the subtree masses upwards
        if parents[v] >= 0:
            sub[parents[v]] += sub[v]
    terms = [
        math.log(lengths[v]) + p * math.log(abs(sub[v]))
        for v in range(n)
        if parents[v] >= 0 and sub[v] != 0 and lengths[v] > 0
    ]
    top = max(terms)
    return math.exp((top + math.log(sum(math.exp(t - top) for t in terms))) / p)


def _depth(parents, v):
    depth = 0
    while parents[v] >= 0:
        v, depth = parents[v], depth + 1
    return depth


@pytest.mark.parametrize("p", [2.0, 50.0, 500.0, 5000.0])
def test_tree_wasserstein_stays_exact_at_large_p(p):
    rng = np.random.default_rng(7)
    parents = [-1] + [int(rng.integers(0, v)) for v in range(1, 30)]
    lengths = rng.uniform(0.1, 2.0, 30)
    m_s, m_t = rng.dirichlet(np.ones(30)), rng.dirichlet(np.ones(30))
    got = tsw.tree_wasserstein(parents, *(torch.tensor(x) for x in (lengths, m_s, m_t)), p=p)
    assert math.isclose(float(got), _tree_value_logdomain(parents, lengths, m_s, m_t, p),
                        rel_tol=1e-12)  # fmt: skip
    # two nodes: the value is w^(1/p) |m| (0.1 here, where 0.1^500 underflows)
    pair = [torch.tensor(v, dtype=F64) for v in ([0.0, 1.0], [0.9, 0.1], [1.0, 0.0])]
    two = tsw.tree_wasserstein([-1, 0], *pair, p=p)
    assert math.isclose(float(two), 0.1, rel_tol=1e-14)


def test_tree_wasserstein_large_p_gradient_matches_finite_differences():
    parents = [-1, 0, 0, 1]
    lengths = torch.tensor([0.0, 1.0, 0.5, 2.0], dtype=F64)
    m_s = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64, requires_grad=True)
    m_t = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=F64)

    def value(m):
        return tsw.tree_wasserstein(parents, lengths, m, m_t, p=400.0, validate=False)

    assert torch.autograd.gradcheck(value, (m_s,))


def _separated(p_dim=3, shift=0.1, seed=0):
    X, _ = _data(d=p_dim, seed=seed)
    return X, X + shift


@pytest.mark.parametrize(
    "call",
    [
        lambda X, Y, p: tsw.db_tsw(X, Y, p=p, seed=0),
        lambda X, Y, p: tsw.tsw_sl(X, Y, p=p, seed=0),
        lambda X, Y, p: tsw.sw(X, Y, p=p, seed=0),
        lambda X, Y, p: tsw.stsw(*(x / x.norm(dim=-1, keepdim=True) for x in (X, Y)), p=p, seed=0),
    ],
    ids=["db_tsw", "tsw_sl", "sw", "stsw"],
)
def test_underflowing_powers_raise_instead_of_reading_zero(call):
    X, Y = _separated()
    with pytest.raises(ValueError, match=r"p=3000 is too large .* underflows to 0"):
        call(X, Y, 3000.0)
    # identical measures are a true zero
    assert float(call(X, X.clone(), 3000.0)) == 0.0


def test_the_power_form_returns_the_rounded_power_without_error():
    X, Y = _separated()
    assert float(tsw.db_tsw(X, Y, p=3000.0, power=True, seed=0)) == 0.0
    assert float(tsw.sw(X, Y, p=3000.0, power=True, seed=0)) >= 0.0


def test_large_p_where_representable_is_right():
    # in one dimension SW is W_p between the two measures: sorted differences of N = M atoms
    x = torch.linspace(0.0, 3.0, 40, dtype=F64)[:, None]
    y = (x + 0.9) * 1.1
    diff = (x - y).abs().flatten().numpy()
    for p in (300.0, 600.0):
        top = diff.max()
        want = top * float(np.mean((diff / top) ** p)) ** (1 / p)
        assert math.isclose(float(tsw.sw(x, y, p=p, n_projections=3, seed=0)), want,
                            rel_tol=1e-12)  # fmt: skip


def test_overflowing_powers_raise():
    X, Y = _separated(shift=30.0)
    with pytest.raises(ValueError, match=r"p=400 is too large .* overflow to Inf"):
        tsw.sw(X, Y, p=400.0, seed=0)
    # count weights of total 30 at p = 500: the closed form divides the masses by their
    # total (32), and the 500th powers of the differences, below 0.26, underflow
    a = torch.full((20,), 1.5, dtype=F64)
    b = torch.cat([torch.full((10,), 3.0, dtype=F64), torch.zeros(10, dtype=F64)])
    with pytest.raises(ValueError, match=r"p=500 is too large .* underflows to 0"):
        tsw.db_tsw(X, X + 0.5, a, b, p=500.0, seed=0)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda X, Y, v: tsw.db_tsw(X, Y, delta=v, seed=0), "delta"),
        (lambda X, Y, v: tsw.db_tsw(X, Y, root_std=v, seed=0), "root_std"),
        (lambda X, Y, v: tsw.tsw_sl(X, Y, root_std=v, seed=0), "root_std"),
        (lambda X, Y, v: tsw.circular_tsw(X, Y, radius=v, seed=0), "radius"),
    ],
    ids=["db_tsw-delta", "db_tsw-root_std", "tsw_sl-root_std", "circular_tsw-radius"],
)
@pytest.mark.parametrize("precision", [torch.float32, F64])
def test_extreme_options_raise_with_their_usable_range(call, name, precision):
    X, Y = (t.to(precision) for t in _data())
    huge = torch.finfo(precision).max / 2
    usable = rf"{name}=.* beyond its usable range .* use {name} <= "
    with pytest.raises(ValueError, match=usable) as info:
        call(X, Y, huge)
    # the range the message names computes a finite value
    limit = float(str(info.value).rsplit("<= ", 1)[1])
    with warnings.catch_warnings():  # roots this far from the data warn of lost digits
        warnings.simplefilter("ignore", UserWarning)
        assert bool(torch.isfinite(call(X, Y, limit)))


def test_delta_range_follows_the_data_in_float32():
    X, Y = _data()
    Xf, Yf = (1e10 * X).float(), (1e10 * Y).float()
    with pytest.raises(ValueError, match=r"delta=1e\+37 is beyond its usable range"):
        tsw.db_tsw(Xf, Yf, delta=1e37, seed=0)
    small = tsw.db_tsw(Xf, Yf, delta=1e25, seed=0)
    ref = tsw.db_tsw(Xf.double(), Yf.double(), delta=1e25, seed=0)
    assert math.isclose(float(small), float(ref), rel_tol=1e-4)


def test_unbalanced_sw_rejects_a_penalty_beyond_its_range():
    X, Y = _data()
    with pytest.raises(
        ValueError, match=r"reg_m=.* beyond its usable range .* reg_m=float\('inf'\)"
    ):
        tsw.unbalanced_sw(X, Y, reg_m=1e300, seed=0)
    # up to the range, a large penalty gives the balanced value (equal masses)
    balanced = tsw.sw(X, Y, seed=0)
    assert math.isclose(float(tsw.unbalanced_sw(X, Y, reg_m=1e150, seed=0)), float(balanced),
                        rel_tol=1e-9)  # fmt: skip


# ------------------------------------------------ overflow, NaN, and the range checks' terms


def test_wasserstein_1d_raises_where_its_powers_overflow():
    """float32 at p = 200: W_p^p is above float32's largest value (the sum of the
    differences' powers in the log domain, float64), so it raises naming the function
    and p, as the distances do, instead of returning Inf."""
    u, v = torch.tensor([0.0, 1.0, 2.0]), torch.tensor([3.0, 5.0, 9.0])
    diffs = np.abs(np.sort(v.numpy()) - np.sort(u.numpy())).astype(np.float64)
    log10 = np.log10(np.sum(np.exp(200 * np.log(diffs) - 200 * np.log(diffs.max())))) + 200 * (
        np.log10(diffs.max())
    ) - np.log10(3)  # fmt: skip
    assert log10 > math.log10(torch.finfo(torch.float32).max)
    with pytest.raises(ValueError, match=r"wasserstein_1d: p=200 is too large .* overflow"):
        tsw.wasserstein_1d(u, v, p=200)
    got = tsw.wasserstein_1d(u.double(), v.double(), p=200)  # in range in float64
    assert math.isclose(math.log10(float(got)), log10, rel_tol=1e-12)


def test_a_nan_inside_the_computation_is_reported_as_a_nan(monkeypatch):
    """A NaN from the closed form (planted here) at p = 2 on data of magnitude 3, whose
    powers cannot overflow: the error says NaN and where, not "p is too large"."""
    import tsw.core._projection as projection

    X, Y = _data()

    def nan_cost(u, v, a, b, p):
        out = torch.zeros(u.shape[:-1], dtype=u.dtype)
        out[..., 1] = math.nan
        return out

    monkeypatch.setattr(projection, "quantile_cost", nan_cost)
    with pytest.raises(ValueError, match=r"NaN at item 0 \(1 of the 5 per-slice") as info:
        tsw.sw(X, Y, p=2, n_projections=5, seed=0)
    assert "too large" not in str(info.value)
    with pytest.raises(ValueError, match="NaN at item 0"):  # at p = 1 too
        tsw.sw(X, Y, p=1, n_projections=5, seed=0)


def test_the_squared_distances_bound_counts_the_atoms():
    """float32 data where one squared distance fits but their sum over the atoms (the
    bound of check_range, computed in float64) does not: it raises naming X_s."""
    big = math.sqrt(torch.finfo(torch.float32).max) / 4  # (2 s)^2 = max / 4 in d = 1
    X = torch.full((6, 1), big)
    Y = torch.full((6, 1), -big)
    one = (2 * big) ** 2
    assert one < torch.finfo(torch.float32).max < 12 * one
    assert not math.isfinite(float(((X - Y.T) ** 2).sum()))  # the sum overflows
    with pytest.raises(ValueError, match="X_s has entries of magnitude up to"):
        tsw.sw(X, Y, n_projections=3, seed=0)


def test_identical_points_with_other_weights_are_not_exempt_from_the_underflow_check():
    """The same points, other weights, p = 500 in float64: the distance is about 0.1 (the
    monotone plan's cost, optimal for every p, in the log domain), its 500th powers
    underflow, so it raises rather than reading 0; with the same weights too it is a
    true 0."""
    x = torch.tensor([[0.0], [0.05], [0.1], [0.15]], dtype=F64)
    a = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=F64)
    b = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64)
    plan = ot.emd_1d(x.numpy()[:, 0], x.numpy()[:, 0], a.numpy(), b.numpy())  # monotone
    i, j = np.nonzero(plan)
    terms = np.log(plan[i, j]) + 500 * np.log(np.abs(x.numpy()[i, 0] - x.numpy()[j, 0]) + 1e-300)
    want = math.exp((terms.max() + math.log(np.exp(terms - terms.max()).sum())) / 500)
    assert 0.05 < want < 0.15
    with pytest.raises(ValueError, match=r"p=500 is too large .* underflows to 0"):
        tsw.sw(x, x.clone(), a, b, p=500.0, n_projections=3, seed=0)
    assert float(tsw.sw(x, x.clone(), a, a.clone(), p=500.0, n_projections=3, seed=0)) == 0.0


@pytest.mark.parametrize("name", ["max_sw", "max_tsw_sl"])
def test_ascent_on_a_nan_of_zero_mass_is_not_silently_finite(name):
    """validate=False with a NaN at a point of zero mass: the cost at the start is finite,
    its gradient is not; the ascent must not stop there and return a finite value that is
    neither the clean input's nor NaN (it returned the start's value)."""
    X = torch.tensor([[0.0015, -0.0003], [-0.0022, 0.0006]])
    Y = torch.tensor([[-0.0011, -0.0014]])
    a, b = torch.tensor([0.0, 1.0]), torch.tensor([1.0])
    Xn = X.clone()
    Xn[0, 0] = math.nan
    fn = getattr(tsw, name)
    kw = {"n_iter": 3, "n_init": 2} if name == "max_sw" else {"n_iter": 3}
    value = fn(Xn, Y, a, b, seed=0, validate=False, **kw)
    clean = fn(X, Y, a, b, seed=0, validate=False, **kw)
    assert bool(value.isnan()) or torch.equal(value, clean), (value, clean)


def test_partial_sw_on_a_nan_is_not_silently_finite():
    """validate=False with a NaN atom: POT's partial solver may leave it out of the
    transported atoms; the value must be NaN, not the cost of the others."""
    X = torch.tensor([[0.0015], [-0.0003]])
    Y = torch.tensor([[-0.0022]])
    Xn = X.clone()
    Xn[1, 0] = math.nan
    value = tsw.partial_sw(Xn, Y, n_projections=3, seed=0, validate=False)
    assert bool(value.isnan()), value
