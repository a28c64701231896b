"""Compiled CPU kernels (Numba) for the passes around the sort.

After the sort, the closed form on a line (``tree_wasserstein._LineCost``) is a gather,
two cumulative sums, a scatter per gradient and about thirty elementwise passes over
the (lines x atoms) block, each with torch operators a pass over memory. At 1000 lines
x 4000 atoms (float32, one thread, Intel Xeon) they took about 1.5x the time of the
sort itself. Here the forward (the gather of the masses, the prefix sums, the cost) and
the backward (both gradients, written straight to input order) are each one compiled
loop per line.

:class:`DistanceSplit` is Db-TSW's split of the masses (``softmax_l(-delta dist_l) w``),
whose backward is one vectorised loop per tree instead of about twelve torch passes.

Used when Numba (an optional dependency: ``pip install torch-tsw[fast]``) can be
imported, the tensors are float32 or float64 on the CPU, ``p`` is 1 or 2 (line cost),
no graph is being traced, and the environment variable ``TSW_NUMBA`` is not ``0``.
Otherwise the torch operators run; both are tested against each other
(``tests/test_kernels.py``) and against ``ot.emd2`` (``tests/test_exactness.py``).

The kernels follow the torch path's formulas, with differences of rounding only: the
line cost's sums over a line and the sums of the masses' gradient accumulate in float64
(torch sums float32 in float32), and its prefix sums accumulate in float64 as torch's
CPU ``cumsum`` does. The kernels run serially without the GIL; rows are shared among
``torch.get_num_threads()`` threads as the sort's are, each row written by one thread,
so the result does not depend on the number of threads.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch
from torch import Tensor

from tsw.core._sort import _by_rows, _threads

__all__ = [
    "DistanceSplit",
    "angle_split_backward",
    "line_cost_backward",
    "line_cost_forward",
    "usable",
    "warm_up",
]

_kernels: dict[str, Any] = {}
_failed = False


def _load() -> bool:
    """Import Numba and define the kernels once; False if Numba is missing or disabled."""
    global _failed
    if _kernels:
        return True
    if _failed or os.environ.get("TSW_NUMBA", "1") == "0":
        return False
    try:
        from tsw.core import _numba_kernels
    except ImportError:  # Numba is not installed
        _failed = True
        return False
    except Exception as err:  # e.g. no writable place for Numba's cache: say so, once
        _failed = True
        warnings.warn(
            f"tsw: the compiled CPU kernels could not be loaded ({type(err).__name__}: "
            f"{err}); the torch operators run instead (set TSW_NUMBA=0 to silence this)",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    _kernels.update(
        forward=_numba_kernels.forward,
        backward=_numba_kernels.backward,
        split_backward=_numba_kernels.split_backward,
        angle_split_backward=_numba_kernels.angle_split_backward,
    )
    return True


def usable(*tensors: Tensor, p: float = 1.0) -> bool:
    """Whether the fused kernels may run on these tensors (see the module notes)."""
    if p not in (1.0, 2.0) or torch.compiler.is_compiling():
        return False
    t = tensors[0]
    for x in tensors:
        if x.device.type != "cpu" or x.dtype != t.dtype or type(x) is not Tensor:
            return False
    if t.dtype not in (torch.float32, torch.float64) or t.numel() == 0 or t.ndim == 0:
        return False
    return _load()


def warm_up() -> bool:
    """Compile (or load from Numba's cache) the kernels for float32 and float64 now.

    For measurements that should not count the one-time compilation (its time and
    memory do not depend on the problem). Returns whether the kernels are usable.
    """
    ok = False
    for dtype in (torch.float32, torch.float64):
        c = torch.tensor([[-1.0, 2.0]], dtype=dtype)
        if usable(c, p=1.0):
            idx = torch.tensor([[0, 1]])
            cost, prefix, _ = line_cost_forward(c, idx, c, 1.0, False)
            line_cost_backward(c, idx, prefix, cost, 1.0, False, True, True)
            ok = True
    return ok


def _rows(x: Tensor, *shape: int) -> Any:
    """``x`` as a C-contiguous (rows, *shape) NumPy array (a view when it already is one).

    ``shape`` defaults to the last axis: (rows, n).
    """
    return x.detach().reshape(-1, *(shape or x.shape[-1:])).contiguous().numpy()


def _row_map(c_shape: torch.Size, m_shape: torch.Size) -> Any:
    """For each row of ``m_shape``, the row of ``c_shape`` (broadcast to it) it reads."""
    rows = torch.arange(c_shape[:-1].numel()).view(c_shape[:-1])
    return rows.expand(m_shape[:-1]).reshape(-1).numpy()


def line_cost_forward(
    coords: Tensor, idx: Tensor, masses: Tensor, p: float, rays: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """Cost, prefix sums and sorted coordinates of ``_LineCost.forward``.

    ``coords`` and ``idx`` (the coordinates and the permutation that sorts them, shape
    (..., n) with size 1 on the axes of shared coordinates) broadcast with ``masses``
    (..., n). Returns the cost (...,), the prefix sums in sorted order (shaped as
    ``masses``) and the sorted coordinates (shaped as ``coords``; without shared
    coordinates they are gathered in the kernel's loop).
    """
    m = _rows(masses)
    xn, ixn = _rows(coords), _rows(idx)
    cmap = _row_map(coords.shape, masses.shape)
    sort_c = coords.shape == masses.shape
    c = torch.empty(coords.shape, dtype=coords.dtype) if sort_c else torch.gather(coords, -1, idx)
    cn = c.view(-1, m.shape[1]).numpy()
    prefix = torch.empty(masses.shape, dtype=masses.dtype)
    cost = torch.empty(masses.shape[:-1], dtype=masses.dtype)
    pn, con = prefix.view(-1, m.shape[1]).numpy(), cost.view(-1).numpy()
    kernel = _kernels["forward"]
    sq = p == 2.0

    def part(s: slice) -> None:
        if sort_c:  # row r of the masses reads row r of the coordinates (cmap = arange)
            rows = cmap[: s.stop - s.start]
            kernel(xn[s], cn[s], ixn[s], rows, m[s], pn[s], con[s], sq, rays, True)
        else:
            kernel(xn, cn, ixn, cmap[s], m[s], pn[s], con[s], sq, rays, False)

    _by_rows(part, m.shape[0], _threads(m.shape[0], m.size))
    return cost, prefix, c


def line_cost_backward(
    c: Tensor,
    idx: Tensor,
    prefix: Tensor,
    grad: Tensor,
    p: float,
    rays: bool,
    want_m: bool,
    want_c: bool,
) -> tuple[Tensor | None, Tensor | None]:
    """Gradients of ``_LineCost`` with respect to the masses and the coordinates.

    Both come back in input order, shaped as ``prefix`` (the masses' shape); the
    coordinates' gradient is not yet summed over the lines that share coordinates.
    """
    pn = _rows(prefix)
    cn, ixn = _rows(c), _rows(idx)
    cmap = _row_map(c.shape, prefix.shape)
    g = grad.detach().expand(prefix.shape[:-1]).reshape(-1).contiguous().numpy()
    gm = torch.empty(prefix.shape, dtype=prefix.dtype) if want_m else None
    gc = torch.empty(prefix.shape, dtype=prefix.dtype) if want_c else None
    dummy = pn[:1]
    gmn = gm.view(-1, pn.shape[1]).numpy() if gm is not None else dummy
    gcn = gc.view(-1, pn.shape[1]).numpy() if gc is not None else dummy
    kernel = _kernels["backward"]
    sq = p == 2.0

    def part(s: slice) -> None:
        gms = gmn[s] if gm is not None else dummy
        gcs = gcn[s] if gc is not None else dummy
        kernel(cn, ixn, cmap[s], pn[s], g[s], gms, gcs, sq, rays, want_m, want_c)

    _by_rows(part, pn.shape[0], _threads(pn.shape[0], pn.size))
    return gm, gc


class DistanceSplit(torch.autograd.Function):
    r"""Db-TSW's masses on the lines: ``softmax_l(-delta dist_l) * w``, compiled backward.

    ``t`` (B, T, k, n) holds the coordinates on the lines when ``sq`` (B, T, 1, n),
    :math:`|z - x_\tau|^2`, is given: the distances are then ``LineDistance``'s
    ``sqrt(max(sq - t^2, 0))``. With ``sq=None``, ``t`` is the distance itself (formed
    by autograd-tracked torch operators, as the cross-product distances up to d = 3).
    ``w`` (B, n) holds the signed masses, not differentiated: callers whose weights need a
    gradient use the torch operators. The forward is the torch path's operators
    (:func:`~tsw.core.splits.distance_split` times ``w``); the backward, about twelve
    passes over (B, T, k, n) with torch operators (five without the distance), is one
    vectorised compiled loop per tree (``_numba_kernels.split_backward``) with the same
    formulas, including ``LineDistance``'s zero subgradient on a line.
    """

    @staticmethod
    def forward(ctx, sq: Tensor | None, t: Tensor, w: Tensor, delta: float) -> Tensor:
        from tsw.core._safe import line_distance_values
        from tsw.core.splits import distance_split  # (splits imports this module)

        dist = t if sq is None else line_distance_values(sq, t)
        alpha = distance_split(dist, delta)
        ctx.from_line = sq is not None
        if ctx.from_line:
            ctx.save_for_backward(alpha, w, dist, t)
        else:
            ctx.save_for_backward(alpha, w)
        ctx.delta = delta
        return alpha * w[:, None, None, :]

    @staticmethod
    def backward(ctx, grad: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        alpha, w, *line = ctx.saved_tensors
        B, T, k, n = alpha.shape

        gm, an = _rows(grad, k, n), _rows(alpha, k, n)
        dn, tn = (_rows(line[0], k, n), _rows(line[1], k, n)) if ctx.from_line else (an, an)
        wn, wrow = _rows(w), _row_map(torch.Size((B, 1, n)), torch.Size((B, T, n)))
        gsq = torch.empty((B, T, 1, n), dtype=alpha.dtype) if ctx.from_line else None
        gt = torch.empty((B, T, k, n), dtype=alpha.dtype)
        gtn = gt.view(-1, k, n).numpy()
        gsn = gsq.view(-1, n).numpy() if gsq is not None else gtn[:, 0]
        tiny = float(torch.finfo(alpha.dtype).tiny)
        kernel = _kernels["split_backward"]
        delta, from_line = float(ctx.delta), bool(ctx.from_line)

        def part(s: slice) -> None:
            kernel(gm[s], an[s], dn[s], tn[s], wn, wrow[s], delta, tiny, from_line, gsn[s], gtn[s])

        _by_rows(part, gm.shape[0], _threads(gm.shape[0], gm.size))
        needs = ctx.needs_input_grad
        return (gsq if needs[0] else None), (gt if needs[1] else None), None, None


def angle_split_backward(
    g: Tensor, alpha: Tensor, phi: Tensor, slope: Tensor, scale: Tensor, w: Tensor, delta: float
) -> tuple[Tensor, Tensor, Tensor]:
    """Backward of STSW's split on S^2 (``tsw.sphere._geometry._WrappedAngleSplit``).

    ``g``, ``alpha``, ``phi``, ``slope`` (B, T, k, n), ``scale`` (B, T, n), ``w`` (B, n).
    Returns the gradients of the polar angles (B, T, n), of ``scale`` (B, T, n) and of
    the rays' angles (B, T, k) (not yet summed over a batch that shares its trees); the
    weights' gradient is not formed (callers that need it use the torch operators).
    """
    B, T, k, n = alpha.shape

    gn, an, pn, ln = (_rows(x, k, n) for x in (g, alpha, phi, slope))
    sn, wn = _rows(scale), _rows(w)
    wrow = _row_map(torch.Size((B, 1, n)), scale.shape)  # the row of w of each tree's row
    grad_polar = torch.empty((B, T, n), dtype=alpha.dtype)
    grad_scale = torch.empty((B, T, n), dtype=alpha.dtype)
    grad_theta = torch.empty((B, T, k), dtype=alpha.dtype)
    gpn, gsn, gtn = (
        grad_polar.view(-1, n).numpy(),
        grad_scale.view(-1, n).numpy(),
        grad_theta.view(-1, k).numpy(),
    )
    kernel = _kernels["angle_split_backward"]

    def part(s: slice) -> None:
        kernel(gn[s], an[s], pn[s], ln[s], sn[s], wn, wrow[s], float(delta), gpn[s], gsn[s], gtn[s])

    _by_rows(part, gn.shape[0], _threads(gn.shape[0], gn.size))
    return grad_polar, grad_scale, grad_theta
