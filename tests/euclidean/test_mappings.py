"""``tsw.euclidean.mappings``: SpatialTSW's maps and the checks of ``mapping=``.

``pow_map`` and ``poly_map`` against the maps written in numpy (``_reference.np_pow``,
``np_poly``: every monomial of the degree, in any order); the errors of a bad name,
degree or ``beta``, of options that do not apply to the map, and of a callable map whose
output has the wrong type, dtype, device, shape or values.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _reference import data, lit, np_poly, np_pow, t64

import tsw

F64 = torch.float64


def test_poly_map_is_the_set_of_monomials():
    rng = np.random.default_rng(0)
    for d, degree in ((1, 3), (2, 3), (3, 1), (3, 3), (4, 5)):
        X = rng.normal(size=(6, d))
        out = tsw.mappings.poly_map(t64(X), degree).numpy()
        expected, exps = np_poly(X, degree)
        assert out.shape == (6, math.comb(d + degree - 1, degree)) == expected.shape
        assert tsw.mappings.poly_dim(d, degree) == len(exps)
        # the same monomials, up to the order of the columns
        np.testing.assert_allclose(np.sort(out, axis=1), np.sort(expected, axis=1), rtol=1e-12)
    X = rng.normal(size=(4, 3))
    np.testing.assert_allclose(tsw.mappings.poly_map(t64(X), 1).numpy(), X)  # degree 1: identity
    np.testing.assert_allclose(tsw.mappings.pow_map(t64(X), 5, 0.5).numpy(), np_pow(X, 5, 0.5))


# --------------------------------------------------------------------------- checks of mapping=


@pytest.mark.parametrize("mapping", ["cubic", "POW", "", "linear"])
def test_bad_mapping_name(mapping):
    X, Y = data()
    msg = lit(
        f"mapping must be 'pow', 'poly' or a callable (e.g. a torch.nn.Module); got {mapping!r}"
    )
    with pytest.raises(ValueError, match=msg):
        tsw.spatial_tsw(X, Y, mapping=mapping)
    with pytest.raises(ValueError, match=msg):
        tsw.nn.SpatialTSWLoss(mapping=mapping)  # at construction


@pytest.mark.parametrize("mapping", [3, None, torch.zeros(3)])
def test_mapping_not_callable(mapping):
    X, Y = data()
    with pytest.raises(
        TypeError, match=lit("mapping must be 'pow', 'poly' or a callable (e.g. a torch.nn.Module)")
    ):
        tsw.spatial_tsw(X, Y, mapping=mapping)


@pytest.mark.parametrize("mapping", ["pow", "poly"])
@pytest.mark.parametrize("degree", [2, 4, 0, -1])
def test_mapping_degree_must_be_odd(mapping, degree):
    X, Y = data()
    msg = lit(f"degree must be an odd int >= 1 (an even degree is not injective: h(-y) = h(y)); "
              f"got {degree}")  # fmt: skip
    with pytest.raises(ValueError, match=msg):
        tsw.spatial_tsw(X, Y, mapping=mapping, degree=degree)
    with pytest.raises(ValueError, match=msg):
        tsw.nn.SpatialTSWLoss(mapping=mapping, degree=degree)
    with pytest.raises(ValueError, match=msg):
        (tsw.mappings.pow_map if mapping == "pow" else tsw.mappings.poly_map)(X, degree)


@pytest.mark.parametrize("degree", [3.0, "3", True])
def test_mapping_degree_not_an_int(degree):
    X, Y = data()
    with pytest.raises(TypeError, match=lit("degree must be an odd int >= 1; got")):
        tsw.spatial_tsw(X, Y, mapping="pow", degree=degree)


@pytest.mark.parametrize("beta", [-0.5, math.inf, math.nan])
def test_pow_beta_out_of_range(beta):
    X, Y = data()
    with pytest.raises(ValueError, match=lit("beta must be a finite real number >= 0; got")):
        tsw.spatial_tsw(X, Y, mapping="pow", beta=beta)


def test_mapping_options_that_do_not_apply():
    X, Y = data()
    with pytest.raises(ValueError, match=lit("beta applies to mapping='pow' only; got beta=1.0")):
        tsw.spatial_tsw(X, Y, mapping="poly", beta=1.0)
    for name in ("degree", "beta"):
        with pytest.raises(
            ValueError,
            match=lit(
                f"{name} applies to the built-in mappings only; got {name}=3 with a callable"
            ),
        ):
            tsw.spatial_tsw(X, Y, mapping=lambda Z: Z, **{name: 3})


def test_mapping_output_type_dtype_device():
    X, Y = data()
    with pytest.raises(
        TypeError, match=lit("mapping(X_s) must return a torch.Tensor; got ndarray")
    ):
        tsw.spatial_tsw(X, Y, mapping=lambda Z: Z.numpy())
    with pytest.raises(
        TypeError,
        match=lit("mapping(X_s) must keep the dtype of X_s (torch.float64); got torch.float32"),
    ):
        tsw.spatial_tsw(X, Y, mapping=lambda Z: Z.float())
    with pytest.raises(
        ValueError, match=lit("mapping(X_s) must stay on the device of X_s (cpu); got meta")
    ):
        tsw.spatial_tsw(X, Y, mapping=lambda Z: Z.to("meta"))


def test_mapping_output_shape():
    X, Y = data()
    with pytest.raises(
        ValueError,
        match=lit(
            "mapping(X_s) must have shape (N, d_theta) with leading dimensions (5,) and "
            "d_theta >= 1; got shape (15,)"
        ),
    ):
        tsw.spatial_tsw(X, Y, mapping=lambda Z: Z.reshape(-1))
    with pytest.raises(
        ValueError, match=lit("leading dimensions (5,) and d_theta >= 1; got shape (3, 5)")
    ):
        tsw.spatial_tsw(X, Y, mapping=lambda Z: Z.T)
    with pytest.raises(ValueError, match=lit("got shape (5, 0)")):
        tsw.spatial_tsw(X, Y, mapping=lambda Z: Z[:, :0])
    Xb, Yb = data(batch=2)
    with pytest.raises(
        ValueError,
        match=lit("mapping(X_t) must have shape (B, N, d_theta) with leading dimensions (2, 4)"),
    ):
        tsw.spatial_tsw(Xb, Yb, mapping=lambda Z: Z if Z.shape[1] == 5 else Z[0])
    with pytest.raises(
        ValueError,
        match=lit(
            "mapping(X_s) and mapping(X_t) must have the same last dimension d_theta; got 3 and 2"
        ),
    ):
        tsw.spatial_tsw(X, Y, mapping=lambda Z: Z if Z.shape[0] == 5 else Z[:, :2])


def test_mapping_output_nonfinite():
    X, Y = data()
    Y = Y.abs()
    with pytest.raises(ValueError, match=lit("mapping(X_s) contains NaN or Inf values")):
        tsw.spatial_tsw(X, Y, mapping=torch.log)  # log of negative coordinates of X
    with pytest.raises(ValueError, match=lit("mapping(X_t) contains NaN or Inf values")):
        tsw.spatial_tsw(Y, X, mapping=torch.log)
    # validate=False skips the value check; the NaN propagates
    assert torch.isnan(tsw.spatial_tsw(X, Y, mapping=torch.log, validate=False))
