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

__all__ = [
    "SCALED_OPTIONS",
    "check_powers",
    "check_range",
    "check_scales",
    "magnitude",
    "overflow_error",
    "power_of_two",
]


def magnitude(measures: Measures) -> float:
    """``max |x_ij|`` over both supports (0 for empty ones), with one host synchronisation."""
    tops = [x.detach().abs().amax() for x in (measures.X_s, measures.X_t) if x.numel()]
    if not tops:
        return 0.0
    return float(tops[0] if len(tops) == 1 else torch.maximum(*tops))


def power_of_two(x: Tensor) -> Tensor:
    r"""Return the power of two nearest to ``x`` elementwise, detached: an exact scale.

    1 where ``x`` is 0, negative or not finite, and within the dtype's normal range (so
    that its inverse is finite too). Dividing by it and multiplying back is exact
    outside subnormals, so a computation run on ``x / power_of_two(x)`` and rescaled
    keeps every value that fits in the dtype, and changes none for ``x`` near 1.
    """
    x = x.detach()
    top = math.floor(math.log2(torch.finfo(x.dtype).max)) - 1  # 126 in float32
    ok = torch.isfinite(x) & (x > 0)
    return torch.where(ok, x, torch.ones_like(x)).log2().round().clamp(-top, top).exp2()


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


def overflow_error(
    p: float, dtype: torch.dtype, subject: str, costs: str, name: str = ""
) -> ValueError:
    """Return the ``ValueError`` for p-th powers of ``costs`` that overflow in ``dtype``."""
    cap = torch.finfo(dtype).max ** (1 / p)
    return ValueError(
        f"{name}p={p:g} is too large for {subject} in {dtype}: the p-th powers of "
        f"{costs} above {cap:.3g} overflow to Inf. Use a smaller p, rescale the data and "
        "the weights" + (", or use torch.float64" if dtype != torch.float64 else "")
    )


def _can_overflow(measures: Measures, p: float, dtype: torch.dtype) -> bool:
    r"""Whether the p-th powers of the measures' costs can approach the dtype's largest value.

    Costs are bounded by the distances in reach of the data (:math:`4 \sqrt d\, s`,
    a tenth of the range kept for the options in the data's units) and by the masses;
    a bound within a millionth of the largest value counts as an overflow.
    """
    info = torch.finfo(dtype)
    d = max(measures.X_s.shape[-1], 1)
    reach = 40 * math.sqrt(d) * max(magnitude(measures), 1.0)
    a, b = measures.a.detach(), measures.b.detach()
    mass = max((float(w.abs().sum(-1).amax()) for w in (a, b) if w.numel()), default=1.0)
    if not math.isfinite(reach) or not math.isfinite(mass):
        return True
    bound = p * math.log(reach) + max(p, 1.0) * math.log(max(mass, 1.0))
    return bound > math.log(info.max) - math.log(1e6)


def check_powers(
    measures: Measures, p: float, mean: Tensor, power: bool, per_slice: Tensor | None = None
) -> None:
    r"""Raise ``ValueError`` where the mean of the p-th powers left the dtype's range.

    A value check on the result, before its root: the value is :math:`m^{1/p}` for the
    mean :math:`m` of the slices' p-th-power costs. At large ``p`` the powers of costs
    above :math:`\mathrm{max}^{1/p}` overflow (Inf), and those below
    :math:`(\mathrm{tiny} / \varepsilon)^{1/p}` underflow (0.25 at ``p = 500`` in
    float64), although the root would be representable. An overflow (Inf, or NaN from
    Inf times a zero length: the inputs are finite) always raises; a NaN where the
    p-th powers cannot overflow raises as what it is (a NaN that arose inside the
    computation, with the items and the number of slices, from ``per_slice``, that hold
    it). An underflow raises when the root is asked for (``power=False``), unless the
    two measures are identical (a true 0) or every cost it can lose is below the data's
    rounding level (:math:`\varepsilon \max |x|`). With ``power=True`` the returned
    power is itself the rounded value.
    """
    if mean.device.type == "meta" or torch.compiler.is_compiling():
        return
    m = mean.detach()
    info = torch.finfo(m.dtype)
    floor = info.tiny / info.eps
    low = m < floor
    nan, inf, underflow = torch.stack([m.isnan().any(), m.isinf().any(), low.any()]).tolist()
    if nan and not inf and (p <= 1 or not _can_overflow(measures, p, m.dtype)):
        items = [int(i) for i in m.isnan().flatten().nonzero().flatten()[:8]]
        where = f"item {items[0]}" if len(items) == 1 else f"items {items}"
        if per_slice is not None and per_slice.dim() >= 1:
            bad = per_slice.detach().isnan()
            where += f" ({int(bad.sum())} of the {bad.numel()} per-slice costs)"
        raise ValueError(
            f"the value is NaN at {where}, although the inputs are finite and the p-th "
            f"powers (p={p:g}) of these measures' costs stay far inside {m.dtype}'s "
            "range: the NaN arose inside the computation, not from an overflow. Check "
            "the options (and explicit slices) passed with the measures"
        )
    if p <= 1:
        return
    if nan or inf:  # the inputs are finite: Inf, or Inf x 0
        raise overflow_error(p, m.dtype, "these measures", "their costs (distances or masses)")
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
