"""``tsw.core._api``: the public form that the decorator gives every distance.

Written out here by hand, not read from the decorator: the measures' parameters in POT's
positional order, the options every distance shares (names, defaults, keyword-only) at
the end of its signature, the memory and ``torch.distributed`` options of the distances
evaluated in blocks, and POT's whole positional order in ``sw``, ``ssw`` and
``ssw_unif``; every shared option documented in the function's Parameters section; an
unknown option raises naming it; the distances run outside ``torch.autocast``.
"""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from _public import NOT_DISTANCES

import tsw

F64 = torch.float64

#: the distances evaluated in blocks of slices (they take chunk_size, process_group, gather)
CHUNKED = {
    "tsw_sl",
    "db_tsw",
    "circular_tsw",
    "spatial_tsw",
    "partial_tsw",
    "sw",
    "stsw",
    "stsw_unif",
    "spatial_stsw",
    "ts_sobolev",
    "lcv_sw",
    "eb_sw",
    "rp_sw",
    "mc_tsw",
    "ghsw",
    "hhsw",
    "spdsw",
    "hspdsw",
}
OTHERS = {
    "max_sw",
    "max_tsw_sl",
    "partial_sw",
    "unbalanced_sw",
    "ssw",
    "ssw_unif",
    "s3w",
    "s3w_unif",
}
#: distances to the uniform measure on the sphere: one measure
ONE_MEASURE = {"stsw_unif", "ssw_unif", "s3w_unif"}
#: POT's positional parameters of the functions that take POT's order, as POT's
#: sliced_wasserstein_distance, sliced_wasserstein_sphere(_unif) write them (the SW
#: variants lcv_sw, eb_sw and rp_sw take sw's)
POT_ORDER = {
    "sw": ["X_s", "X_t", "a", "b", "n_projections", "p", "projections", "seed", "log"],
    "lcv_sw": ["X_s", "X_t", "a", "b", "n_projections", "p", "projections", "seed", "log"],
    "eb_sw": ["X_s", "X_t", "a", "b", "n_projections", "p", "projections", "seed", "log"],
    "rp_sw": ["X_s", "X_t", "a", "b", "n_projections", "p", "projections", "seed", "log"],
    "ssw": ["X_s", "X_t", "a", "b", "n_projections", "p", "projections", "seed", "log"],
    "ssw_unif": ["X_s", "a", "n_projections", "projections", "seed", "log"],
}
SHARED = [("seed", None), ("generator", None), ("validate", True), ("power", False), ("log", False)]
BLOCKS = [("chunk_size", "auto"), ("process_group", None), ("gather", False)]
DISTANCES = sorted(CHUNKED | OTHERS)


def _expected(name):
    return SHARED + (BLOCKS if name in CHUNKED else [])


def test_every_distance_is_listed():
    public = {n for n in tsw.__all__ if n[0].islower() and callable(getattr(tsw, n))}
    assert public - NOT_DISTANCES == CHUNKED | OTHERS


@pytest.mark.parametrize("name", DISTANCES)
def test_measures_come_first_in_pots_order(name):
    params = inspect.signature(getattr(tsw, name)).parameters
    measures = ["X_s", "a"] if name in ONE_MEASURE else ["X_s", "X_t", "a", "b"]
    assert list(params)[: len(measures)] == measures
    for m in measures:
        assert params[m].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        want = inspect.Parameter.empty if m.startswith("X") else None
        assert params[m].default is want


@pytest.mark.parametrize("name", DISTANCES)
def test_shared_options_close_the_signature(name):
    """The shared options, with their defaults, keyword-only and last (the functions of
    POT's order take its positional ``seed`` and ``log`` earlier, see below)."""
    params = inspect.signature(getattr(tsw, name)).parameters
    expected = _expected(name)
    for option, default in expected:
        assert option in params, option
        assert params[option].default == default
        assert type(params[option].default) is type(default)
    pot_positional = {"seed", "log"} if name in POT_ORDER else set()
    keyword = [(o, d) for o, d in expected if o not in pot_positional]
    assert list(params)[-len(keyword) :] == [o for o, _ in keyword]
    for option, _ in keyword:
        assert params[option].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize("name", sorted(POT_ORDER))
def test_pots_positional_order(name):
    """The functions of POT's order take its parameters positionally, in its order; for
    ``sw``, a positional call equals the keyword one."""
    params = inspect.signature(getattr(tsw, name)).parameters
    pot = POT_ORDER[name]
    assert list(params)[: len(pot)] == pot
    for q in pot:
        assert params[q].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD


@pytest.mark.parametrize("name", ["sw", "lcv_sw", "eb_sw", "rp_sw"])
def test_sw_positional_call_equals_the_keyword_call(name):
    fn = getattr(tsw, name)
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(9, 3, generator=g, dtype=F64), torch.randn(7, 3, generator=g, dtype=F64)
    value, log = fn(X, Y, None, None, 7, 1, None, 3, True)
    assert torch.equal(value, fn(X, Y, n_projections=7, p=1, seed=3))
    assert log["projections"].shape == (3, 7)


@pytest.mark.parametrize("name", DISTANCES)
def test_shared_options_are_documented(name):
    doc = inspect.getdoc(getattr(tsw, name))
    section = doc.split("Parameters\n----------\n", 1)[1].split("Returns\n-------", 1)[0]
    for option, _ in _expected(name):
        assert re.search(rf"^{option} :", section, re.MULTILINE), option


@pytest.mark.parametrize("name", DISTANCES)
def test_the_first_screen_says_what_it_is_and_how_to_call_it(name):
    """The summary line, then a call of the function, then Parameters; the math in Notes."""
    doc = inspect.getdoc(getattr(tsw, name))
    head, _, rest = doc.partition("\nParameters\n----------\n")
    summary, usage = head.strip().split("\n\n")  # two paragraphs, nothing else
    assert "\n" not in summary
    assert usage.startswith(f"``tsw.{name}(X_s, ")
    assert len(head.splitlines()) <= 12
    assert len(str(inspect.signature(getattr(tsw, name)))) < 400  # help()'s first line
    assert ".. math::" not in head
    assert ":math:" not in usage
    assert "\nNotes\n-----\n" in rest  # where the definition went


def test_an_unknown_option_raises_naming_it():
    g = torch.Generator().manual_seed(1)
    X, Y = torch.randn(5, 3, generator=g, dtype=F64), torch.randn(4, 3, generator=g, dtype=F64)
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_projections'"):
        tsw.db_tsw(X, Y, n_projections=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'chunk_size'"):
        tsw.max_sw(X, Y, chunk_size=2)  # evaluated at once: no blocks


def test_a_misspelt_option_names_the_function_and_the_closest_option():
    X, Y = torch.randn(5, 3, dtype=F64), torch.randn(4, 3, dtype=F64)
    with pytest.raises(
        TypeError,
        match=r"^tsw\.db_tsw got an unexpected keyword argument 'ntrees'; "
        r"did you mean n_trees=10\? Its options are n_trees, ",
    ):
        tsw.db_tsw(X, Y, ntrees=10)
    with pytest.raises(TypeError, match=r"^tsw\.sw got .*'n_proj'; did you mean n_projections=5\?"):
        tsw.sw(X, Y, n_proj=5)  # an abbreviation
    with pytest.raises(TypeError, match=r"'dleta', 'ntrees'; did you mean delta=1\.0, n_trees=3\?"):
        tsw.db_tsw(X, Y, ntrees=3, dleta=1.0)
    with pytest.raises(TypeError, match=r"argument 'zzz'\. Its options are"):
        tsw.db_tsw(X, Y, zzz=3)  # nothing close: no guess
    # the loss modules say it the same way
    with pytest.raises(
        TypeError, match=r"^tsw\.nn\.DbTSWLoss got .*'ntrees'; did you mean n_trees=3\?"
    ):
        tsw.nn.DbTSWLoss(ntrees=3)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda X, Y: tsw.db_tsw(X, Y, 100),
            r"^tsw\.db_tsw: the argument in position 3 is a, "
            r"the weights of X_s .* got int 100\. The options after the measures are "
            r"keyword-only: did you mean n_trees=100\?",
        ),
        (
            lambda X, Y: tsw.partial_sw(X, Y, None, 50),
            r"position 4 is b, the weights of X_t .*"
            r"did you mean n_projections=50\?",
        ),
        (lambda X, Y: tsw.tsw_sl(X, Y, 2.0), r"got float 2\.0.* did you mean p=2\.0\?"),
        (
            lambda X, Y: tsw.sw(X, Y, 100),
            r"options after the measures are n_projections, p, "
            r"projections, seed, log by position, then keywords: did you mean n_projections=100",
        ),
        (
            lambda X, Y: tsw.db_tsw(X, Y, None, None, 100),
            r"^tsw\.db_tsw takes at most 4 "
            r"positional arguments \(X_s, X_t, a, b\); got 5\. The options after b are "
            r"keyword-only: n_trees, ",
        ),
    ],
)
def test_an_option_given_by_position_names_the_function_and_the_option(call, message):
    X, Y = torch.randn(5, 3, dtype=F64), torch.randn(4, 3, dtype=F64)
    with pytest.raises(TypeError, match=message):
        call(X, Y)


def test_autocast_takes_half_precision_points_as_float32():
    X = torch.randn(10, 3)
    Y = torch.randn(8, 3) + 1
    want = tsw.db_tsw(X.bfloat16().float(), Y.bfloat16().float(), n_trees=5, seed=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = tsw.db_tsw(X.bfloat16(), Y.bfloat16(), n_trees=5, seed=0)
    assert got.dtype == torch.float32
    assert torch.equal(got, want)
    with pytest.raises(
        TypeError, match=re.escape("must have dtype torch.float32 or torch.float64")
    ):
        tsw.db_tsw(X.bfloat16(), Y.bfloat16(), n_trees=5, seed=0)  # outside autocast
