r"""Range checks: the data, the options in the data's units and the p-th powers of a result.

Value checks, run with ``validate=True``: the coordinates' squares
(:func:`check_range`), the options that multiply or add to distances
(:func:`check_scales`) and the mean p-th power of a result before its root
(:func:`check_powers`) must stay in the dtype's range, else a ``ValueError`` names the
argument and its usable range, rather than a value that reads Inf, NaN or 0.
"""

from __future__ import annotations

import math
from types import MappingProxyType

import torch
from torch import Tensor

from tsw.core._validation import Measures

__all__ = ["SCALED_OPTIONS", "check_powers", "check_range", "check_scales", "magnitude"]


def magnitude(measures: Measures) -> float:
    """``max |x_ij|`` over both supports (0 for empty ones), with one host synchronisation."""
    tops = [x.detach().abs().amax() for x in (measures.X_s, measures.X_t) if x.numel()]
    if not tops:
        return 0.0
    return float(tops[0] if len(tops) == 1 else torch.maximum(*tops))


def check_range(measures: Measures) -> None:
    r"""Raise ``ValueError`` if the supports' magnitude leaves the dtype's range (a value check).

    The distances square coordinates (distances to lines). With :math:`s = \max |x_{ij}|`
    over both supports and :math:`n` atoms, the squared distances (bounded by
    :math:`(2 \sqrt d\, s)^2`), summed over :math:`n` atoms, must stay below the dtype's
    largest value, and a non-zero :math:`s^2` above its smallest normal value (1.2e-38 in
    float32): otherwise the costs overflow to Inf or NaN, or underflow to 0, silently. In
    float32 that accepts magnitudes from about 1e-19 to 1e17-1e18 (depending on ``n`` and
    ``d``). The p-th powers are checked on the result (:func:`check_powers`): which of
    them overflow depends on the distances and masses, not on the coordinates alone.
    """
    X_s, X_t = measures.X_s, measures.X_t
    s = magnitude(measures)
    if not math.isfinite(s) or s == 0:
        return
    info = torch.finfo(X_s.dtype)
    d, n = X_s.shape[-1], X_s.shape[-2] + X_t.shape[-2]
    high = 2 * math.log(2 * math.sqrt(d) * s) + math.log(n) > math.log(info.max)
    low = 2.0 * math.log(s) < math.log(info.tiny)
    if high or low:
        name = "X_s" if X_s.numel() and float(X_s.detach().abs().amax()) == s else "X_t"
        way = "overflow" if high else "underflow"
        wider = " or use torch.float64" if X_s.dtype != torch.float64 else ""
        raise ValueError(
            f"{name} has entries of magnitude up to {s:.3g}: in {X_s.dtype} the squared "
            f"distances would {way}, giving Inf, NaN or 0. Rescale the data (the "
            f"distances are in the units of the data){wider}"
        )


#: options in the units of the data (+1: lengths) or in their inverse (-1: ``delta``,
#: which multiplies distances): their products with the data must stay in the dtype
SCALED_OPTIONS: MappingProxyType[str, int] = MappingProxyType(
    {"delta": -1, "root_std": 1, "radius": 1, "source_range": 1}
)


def _below(x: float) -> str:
    """``x`` to three significant digits, rounded down (a limit that can be passed)."""
    shown = float(f"{x:.3g}")
    if shown > x:
        shown -= 10 ** (math.floor(math.log10(shown)) - 2)
    return f"{shown:.3g}"


def check_scales(measures: Measures, options: dict[str, object]) -> None:
    r"""Raise ``ValueError`` if an option in the data's units leaves the dtype's range.

    A value check (the data's own range is :func:`check_range`'s). With :math:`s = \max
    |x_{ij}|`, ``d`` dimensions and ``n`` atoms, the slices' roots and radii lie within
    :math:`r = s + 10 \ell` for the largest length option :math:`\ell` (``root_std``,
    ``radius``, ``source_range``); the distances they form are below :math:`D = 4 \sqrt
    d\, r`. A length option must keep :math:`n (2 \sqrt d\, r)^2` below the dtype's
    largest value (the bound :func:`check_range` puts on the data), and ``delta`` must
    keep :math:`\delta D` below a sixteenth of it: beyond, the split's weights or the
    squared distances overflow into NaN. The message names the option and its usable
    range for the data at hand.
    """
    X_s, X_t = measures.X_s, measures.X_t
    given = {k: v for k, v in options.items() if k in SCALED_OPTIONS and isinstance(v, float)}
    if not given or X_s.device.type == "meta" or torch.compiler.is_compiling():
        return
    s = magnitude(measures)
    if options.get("renormalize") is True:  # the points are moved onto the unit sphere
        s = min(s, 1.0)
    info = torch.finfo(X_s.dtype)
    d, n = X_s.shape[-1], max(X_s.shape[-2] + X_t.shape[-2], 1)
    top = math.sqrt(info.max / n) / (2 * math.sqrt(d))  # the largest usable r
    if s > top:  # the data themselves leave the range: check_range names them
        return
    for name, value in given.items():
        if SCALED_OPTIONS[name] == 1 and s + 10 * value > top:
            raise ValueError(
                f"{name}={value:g} is beyond its usable range for these measures in "
                f"{X_s.dtype}: the squared distances it forms overflow; use "
                f"{name} <= {_below(max(top - s, 0) / 10)}"
            )
    length = max((v for k, v in given.items() if SCALED_OPTIONS[k] == 1), default=0.0)
    reach = 4 * math.sqrt(d) * (s + 10 * length)
    delta = given.get("delta")
    if delta is not None and reach > 0 and delta * reach > info.max / 16:
        raise ValueError(
            f"delta={delta:g} is beyond its usable range for these measures in {X_s.dtype}: "
            f"delta times their distances (up to {reach:.3g}) overflows; use "
            f"delta <= {_below(info.max / 16 / reach)}"
        )


def check_powers(measures: Measures, p: float, mean: Tensor, power: bool) -> None:
    r"""Raise ``ValueError`` where the mean of the p-th powers left the dtype's range.

    A value check on the result, before its root: the value is :math:`m^{1/p}` for the
    mean :math:`m` of the slices' p-th-power costs. At large ``p`` the powers of costs
    above :math:`\mathrm{max}^{1/p}` overflow (Inf), and those below
    :math:`(\mathrm{tiny} / \varepsilon)^{1/p}` underflow (0.25 at ``p = 500`` in
    float64), although the root would be representable. An overflow (Inf, or NaN from
    Inf times a zero length: the inputs are finite) always raises; an underflow raises
    when the root is asked for (``power=False``), unless the two measures are identical
    (a true 0) or every cost it can lose is below the data's rounding level
    (:math:`\varepsilon \max |x|`). With ``power=True`` the returned power is itself
    the rounded value.
    """
    if p <= 1 or mean.device.type == "meta" or torch.compiler.is_compiling():
        return
    m = mean.detach()
    info = torch.finfo(m.dtype)
    floor = info.tiny / info.eps
    low = m < floor
    overflow, underflow = torch.stack([~torch.isfinite(m).all(), low.any()]).tolist()
    if overflow:  # the inputs are finite: Inf, or Inf x 0
        cap = info.max ** (1 / p)
        raise ValueError(
            f"p={p:g} is too large for these measures in {m.dtype}: the p-th powers of "
            f"their costs (distances or masses above {cap:.3g}) overflow to Inf. Use a "
            "smaller p, rescale the data and the weights"
            + (", or use torch.float64" if m.dtype != torch.float64 else "")
        )
    if power or not underflow:
        return
    X_s, X_t = measures.X_s.detach(), measures.X_t.detach()
    scale = magnitude(measures)
    smallest = floor ** (1 / p)
    if scale == 0 or smallest <= info.eps * scale:  # every point at 0: a true 0
        return
    if X_s.shape == X_t.shape:
        same = (X_s == X_t).flatten(1).all(1) & (measures.a == measures.b).all(1)
        if bool(same[low].all()):
            return
    usable = math.log(floor) / math.log(0.1)
    raise ValueError(
        f"p={p:g} is too large for these measures in {m.dtype}: the p-th power of any cost "
        f"below {smallest:.3g} underflows to 0, and these measures' costs did, so the "
        f"value would read 0 although the measures differ. A cost c needs "
        f"p <= log({floor:.3g}) / log(c) (p <= {usable:.0f} for c = 0.1); use a smaller p "
        "or power=True (the p-th power itself)"
        + (", or torch.float64" if m.dtype != torch.float64 else "")
    )
