"""Compiled CPU kernels (Numba) for the passes around the sort.

After the sort, the closed form on a line (``tree_wasserstein._LineCost``) is a gather,
two cumulative sums, a scatter per gradient and about thirty elementwise passes over
the (lines x atoms) block, each with torch operators a pass over memory. At 1000 lines
x 4000 atoms (float32, one thread, Intel Xeon) they took about 1.5x the time of the
sort itself. Here the forward (the gather of the masses, the prefix sums, the cost) and
the backward (both gradients, written straight to input order) are each one compiled
loop per line.

:class:`DistanceSplit` is Db-TSW's split of the masses (``softmax_l(-delta dist_l) w``):
its forward and its backward are each one vectorised loop per tree instead of about
seven and twelve torch passes (forward measured 0.56-0.59x the torch operators' time).
:class:`SplitLineCost` runs that split and the line cost of the tree's lines one tree
at a time, so that the masses and their gradient stay in the cache (Db-TSW's and
SpatialTSW's compiled path).

:func:`ray_split_forward` / :func:`ray_split_backward` are STSW's split on S^2 and the
closed form on the tree's rays together (``tsw.sphere._geometry._SplitRayCost``), and
:func:`s2_angles_backward` the backward of its angles. The softmaxes use an
exponential the compiler vectorises (``_numba_kernels.exp32_`` / ``exp64_``).

:func:`packed_argsort` sorts float32 rows as packed 64-bit keys, or 32-bit keys whose
buckets are then settled on the values, for :mod:`tsw.core._sort` (:func:`packs`; see
that module's notes for the times measured).

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

import numpy as np
import torch
from torch import Tensor

from tsw.core._sort import _by_rows, _threads, argsort_last

__all__ = [
    "DistanceSplit",
    "SplitLineCost",
    "line_cost_backward",
    "line_cost_forward",
    "packed_argsort",
    "packs",
    "ray_split_backward",
    "ray_split_forward",
    "s2_angles_backward",
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
        split_forward=_numba_kernels.split_forward,
        split_backward=_numba_kernels.split_backward,
        split_line_forward=_numba_kernels.split_line_forward,
        split_line_backward=_numba_kernels.split_line_backward,
        ray_split_forward=_numba_kernels.ray_split_forward,
        ray_split_backward=_numba_kernels.ray_split_backward,
        s2_angles_backward=_numba_kernels.s2_angles_backward,
        pack_keys=_numba_kernels.pack_keys,
        unpack_order=_numba_kernels.unpack_order,
        pack_keys32=_numba_kernels.pack_keys32,
        unpack_order32=_numba_kernels.unpack_order32,
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
            for idx in (torch.tensor([[0, 1]]), torch.tensor([[0, 1]], dtype=torch.int32)):
                cost, prefix, _ = line_cost_forward(c, idx, c, 1.0, False)
                line_cost_backward(c, idx, prefix, cost, 1.0, False, True, True)
            t = c.abs().unsqueeze(0)  # STSW on S^2: one tree, one ray, two atoms
            cost, saved = ray_split_forward(t, t, t[..., :1], t, c, None, 1.0, 1.0)
            ray_split_backward(saved, cost, 1.0, 1.0, True)
            lines = c[None, None].clone().requires_grad_(True)  # Db-TSW's split
            DistanceSplit.apply(c.abs()[None, None], lines, c, 1.0, LINE).sum().backward()
            for p in (1.0, 2.0):  # the split and the line cost together, in each form
                sq = c.abs()[None, None]
                SplitLineCost.apply(sq, lines, lines, c, 1.0, LINE, p).sum().backward()
                for mode in (SIGNED, DISTANCES):
                    SplitLineCost.apply(None, lines, lines * 1, c, 1.0, mode, p).sum().backward()
            s2_angles_backward(t.unsqueeze(-2).expand(1, 1, 3, 2), t, t, t, t, t)
            ok = True
    if ok:  # the packed sorts (float32): 32-bit keys with a run to settle, 64-bit keys,
        # into int64 and int32 (``argsort_last(..., compact=True)``) permutations
        narrow = np.linspace(0.0, 1.0, 600, dtype=np.float32).reshape(2, 300)[:, ::-1]
        narrow[:, :2] = [1e-9, 0.0]
        for rows in (narrow, np.zeros((1, 3), dtype=np.float32)):
            for index in (np.int64, np.int32):
                packed_argsort(rows, np.empty(rows.shape, dtype=index))
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
    c = (  # (torch.gather takes int64 indices; the kernels take int32 or int64)
        torch.empty(coords.shape, dtype=coords.dtype)
        if sort_c
        else torch.gather(coords, -1, idx.long())
    )
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


#: what :class:`DistanceSplit`'s ``t`` holds (the kernels' ``mode``)
DISTANCES, LINE, SIGNED = 0, 1, 2


class DistanceSplit(torch.autograd.Function):
    r"""Db-TSW's masses on the lines: ``softmax_l(-delta dist_l) * w``, compiled backward.

    ``DistanceSplit.apply(sq, t, w, delta, mode)``: with ``mode=LINE``, ``t`` (B, T, k, n)
    holds the coordinates on the lines and ``sq`` (B, T, 1, n) :math:`|z - x_\tau|^2`;
    the distances are then ``LineDistance``'s ``sqrt(max(sq - t^2, 0))``. With
    ``mode=SIGNED`` (``sq=None``), the distances are ``|t|`` (the coordinates along the
    normals of lines in the plane), with ``abs``' zero subgradient on a line. With
    ``mode=DISTANCES`` (``sq=None``), ``t`` is the distance itself (formed by
    autograd-tracked torch operators, as the cross-product distances in space).
    ``w`` (B, n) holds the signed masses, not differentiated: callers whose weights need a
    gradient use the torch operators. The forward (about seven passes over (B, T, k, n)
    with torch operators, the softmax over the lines among them) and the backward (about
    twelve, five without the distance) are each one vectorised compiled loop per tree
    (``_numba_kernels.split_forward``, ``split_backward``; the backward forms the
    distances again from ``sq`` and ``t`` rather than storing them) with the formulas of
    :class:`~tsw.core._safe.LineDistance`, :func:`~tsw.core.splits.distance_split` and
    their gradients, including the zero subgradient on a line.
    """

    @staticmethod
    def forward(  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        ctx, sq: Tensor | None, t: Tensor, w: Tensor, delta: float, mode: int = DISTANCES
    ) -> Tensor:
        if not _load():
            raise RuntimeError("DistanceSplit needs the compiled kernels (see usable())")
        if (sq is not None) != (mode == LINE):  # not reached from split_masses
            raise ValueError(f"DistanceSplit: sq is given exactly for mode={LINE} (LINE)")
        B, T, k, n = t.shape
        masses = torch.empty((B, T, k, n), dtype=t.dtype)
        alpha = torch.empty((B, T, k, n), dtype=t.dtype)
        tn, wn = _rows(t, k, n), _rows(w)
        sqn = _rows(sq) if sq is not None else wn
        wrow = _row_map(torch.Size((B, 1, n)), torch.Size((B, T, n)))
        mn, an = (x.view(-1, k, n).numpy() for x in (masses, alpha))
        kernel = _kernels["split_forward"]
        int_type = np.int32 if t.dtype == torch.float32 else np.int64

        def part(s: slice) -> None:
            bits = np.empty(n, dtype=int_type)  # work space of each thread
            rows = sqn[s] if mode == LINE else sqn
            kernel(rows, tn[s], wn, wrow[s], float(delta), mode, mn[s], an[s], bits)

        _by_rows(part, tn.shape[0], _threads(tn.shape[0], tn.size))
        ctx.mode, ctx.delta = mode, delta
        # the backward forms the distances again from sq and t (no (B, T, k, n) stored);
        # with the distances given, it needs neither
        ctx.save_for_backward(alpha, w, sq, t if mode != DISTANCES else None)
        return masses

    @staticmethod
    def backward(ctx, grad: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        alpha, w, sq, t = ctx.saved_tensors
        B, T, k, n = alpha.shape
        mode = int(ctx.mode)

        gm, an = _rows(grad, k, n), _rows(alpha, k, n)
        wn, wrow = _rows(w), _row_map(torch.Size((B, 1, n)), torch.Size((B, T, n)))
        sqn = _rows(sq) if sq is not None else wn  # placeholders where the mode reads none
        tn = _rows(t, k, n) if t is not None else an
        gsq = torch.empty((B, T, 1, n), dtype=alpha.dtype) if mode == LINE else None
        gt = torch.empty((B, T, k, n), dtype=alpha.dtype)
        gtn = gt.view(-1, k, n).numpy()
        gsn = gsq.view(-1, n).numpy() if gsq is not None else gtn[:, 0]
        tiny = float(torch.finfo(alpha.dtype).tiny)
        kernel = _kernels["split_backward"]
        delta = float(ctx.delta)

        def part(s: slice) -> None:
            rows = sqn[s] if mode == LINE else sqn
            kernel(gm[s], an[s], rows, tn[s], wn, wrow[s], delta, tiny, mode, gsn[s], gtn[s])

        _by_rows(part, gm.shape[0], _threads(gm.shape[0], gm.size))
        needs = ctx.needs_input_grad
        return (gsq if needs[0] else None), (gt if needs[1] else None), None, None, None


def ray_split_forward(
    t: Tensor,
    polar: Tensor,
    theta: Tensor,
    scale: Tensor,
    w: Tensor,
    fixed: Tensor | None,
    delta: float,
    p: float,
) -> tuple[Tensor, tuple[Tensor, ...]]:
    """STSW's split on S^2 and the closed form on the rays, one compiled loop per tree.

    ``t``, ``polar``, ``scale`` (B, T, n), ``theta`` (B|1, T, k), ``w`` (B, n);
    ``fixed`` (B|1, T, k, G), optional: the last ``G`` atoms' masses on the rays
    (their ``w`` 1 and ``scale`` 0). Returns the cost (B, T) and what
    :func:`ray_split_backward` reads: the permutation sorting ``t``, the atoms'
    coordinates, polar angles, ``sin t`` and masses in sorted order (B, T, 4, n), the
    split in sorted order (B, T, k, n) and ``theta``.
    """
    B, T, n = t.shape
    k = theta.shape[-1]
    idx = argsort_last(t, compact=True)  # read by the kernels only
    tn, pn, sn, ixn = _rows(t), _rows(polar), _rows(scale), _rows(idx)
    thn, wn = _rows(theta), _rows(w)
    trow = _row_map(torch.Size((*theta.shape[:-1], 1)), torch.Size((B, T, 1)))
    wrow = _row_map(torch.Size((B, 1, 1)), torch.Size((B, T, 1)))
    n0 = n if fixed is None else n - fixed.shape[-1]  # the atoms split by the kernel
    if fixed is None:  # not read
        fixed = t.new_zeros(1, 1, k, 1)
    fn = _rows(fixed, k, fixed.shape[-1])
    frow = _row_map(torch.Size((*fixed.shape[:-2], 1)), torch.Size((B, T, 1)))
    srt = torch.empty((B, T, 4, n), dtype=t.dtype)
    alpha = torch.empty((B, T, k, n), dtype=t.dtype)
    cost = torch.empty((B, T), dtype=t.dtype)
    srn, an = srt.view(-1, 4, n).numpy(), alpha.view(-1, k, n).numpy()
    con = cost.view(-1).numpy()
    kernel = _kernels["ray_split_forward"]
    delta, sq = float(delta), p == 2.0
    int_type = np.int32 if t.dtype == torch.float32 else np.int64

    def part(s: slice) -> None:
        bits = np.empty(n, dtype=int_type)  # work space of each thread
        kernel(
            tn[s],
            pn[s],
            sn[s],
            thn,
            trow[s],
            wn,
            wrow[s],
            fn,
            frow[s],
            n0,
            ixn[s],
            delta,
            sq,
            srn[s],
            an[s],
            con[s],
            bits,
            np.empty((k, 0)),  # S is not kept: no work space
        )

    _by_rows(part, tn.shape[0], _threads(tn.shape[0], tn.size * k))
    return cost, (idx, srt, alpha, theta)


def ray_split_backward(
    saved: tuple[Tensor, ...], g: Tensor, delta: float, p: float, want_w: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]:
    """Gradients of :func:`ray_split_forward`'s cost times ``g`` (B, T).

    ``saved`` is what the forward returned. Returns the gradients of ``t``, ``polar``
    and ``scale`` (B, T, n), of ``theta`` (B, T, k; not yet summed over a batch that
    shares its trees) and, if ``want_w``, of ``w`` per tree (B, T, n).
    """
    idx, srt, alpha, theta = saved
    B, T, k, n = alpha.shape
    ixn, srn, an = _rows(idx), _rows(srt, 4, n), _rows(alpha, k, n)
    thn = _rows(theta)
    trow = _row_map(torch.Size((*theta.shape[:-1], 1)), torch.Size((B, T, 1)))
    gn = g.detach().to(torch.float64).expand(B, T).reshape(-1).contiguous().numpy()
    out = [torch.empty((B, T, n), dtype=alpha.dtype) for _ in range(3)]
    gw = torch.empty((B, T, n), dtype=alpha.dtype) if want_w else None
    gtheta = torch.empty((B, T, k), dtype=alpha.dtype)
    gt, gp, gs = (x.view(-1, n).numpy() for x in out)
    gwn = gw.view(-1, n).numpy() if gw is not None else gt
    gthn = gtheta.view(-1, k).numpy()
    kernel = _kernels["ray_split_backward"]
    delta, sq = float(delta), p == 2.0

    def part(s: slice) -> None:
        kernel(
            srn[s],
            ixn[s],
            thn,
            trow[s],
            an[s],
            gn[s],
            delta,
            sq,
            want_w,
            gt[s],
            gp[s],
            gs[s],
            gthn[s],
            gwn[s],
            np.empty((k, n)),
        )

    _by_rows(part, srn.shape[0], _threads(srn.shape[0], srn.size * k))
    return out[0], out[1], out[2], gtheta, gw


def s2_angles_backward(
    A: Tensor, rho: Tensor, inv: Tensor, gt: Tensor, gpolar: Tensor, gscale: Tensor
) -> tuple[Tensor, Tensor]:
    """Backward of STSW's angles on S^2 (``tsw.sphere._geometry._S2Angles``).

    ``A`` (B, T, 3, n), ``rho``, ``gt``, ``gpolar``, ``gscale`` (B, T, n), ``inv``
    (B, 1, n). Returns the gradient of ``A`` and ``gscale * rho`` (B, T, n).
    """
    B, T, _, n = A.shape
    An = _rows(A, 3, n)
    rn, invn = _rows(rho), _rows(inv)
    gtn, gpn, gsn = _rows(gt), _rows(gpolar), _rows(gscale)
    irow = _row_map(torch.Size((B, 1, 1)), torch.Size((B, T, 1)))
    gA = torch.empty((B, T, 3, n), dtype=A.dtype)
    gq = torch.empty((B, T, n), dtype=A.dtype)
    gAn, gqn = gA.view(-1, 3, n).numpy(), gq.view(-1, n).numpy()
    tiny = float(torch.finfo(A.dtype).tiny)
    kernel = _kernels["s2_angles_backward"]

    def part(s: slice) -> None:
        kernel(An[s], rn[s], invn, irow[s], gtn[s], gpn[s], gsn[s], tiny, gAn[s], gqn[s])

    _by_rows(part, rn.shape[0], _threads(rn.shape[0], rn.size))
    return gA, gq


class SplitLineCost(torch.autograd.Function):
    r"""Db-TSW's split and the line cost together: the cost of every line, (B, T, k).

    ``SplitLineCost.apply(sq, t, x, w, delta, mode, p)``: the distances to the lines as
    :class:`DistanceSplit` takes them (``sq``, ``t`` and ``mode``: ``LINE``, where ``t``
    is the coordinates and ``sq`` (B, T, 1, n) :math:`|z - x_\tau|^2`; ``SIGNED`` or
    ``DISTANCES``, ``sq`` None), ``x`` (B, T, k, n) the coordinates on the lines (pass
    ``t`` itself for ``LINE``), ``w`` (B, n) the signed masses (no gradient),
    ``delta != 0``, ``p`` in {1, 2}. The value is ``tree_wasserstein.line_cost(x,
    DistanceSplit.apply(sq, t, w, delta, mode), p)``, and so are the gradients, bit for
    bit: the same kernels run (``_numba_kernels.split_line_forward`` /
    ``split_line_backward``), one tree at a time. A tree's masses and their gradient
    live in (k, n) work spaces while the tree is in the cache instead of (B, T, k, n)
    arrays; for ``LINE`` so does the coordinates' gradient through the cost, added there
    to the one through the split rather than by autograd. On this project's AMD EPYC
    (Zen 4), one thread, float32, 250 trees x 4 lines, ``LINE``: the sort, split and
    line cost forward and backward took 0.84-0.85x the time of the two functions at
    1000 and 4000 atoms.
    """

    @staticmethod
    def forward(  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        ctx,
        sq: Tensor | None,
        t: Tensor,
        x: Tensor,
        w: Tensor,
        delta: float,
        mode: int,
        p: float,
    ) -> Tensor:
        if not _load():
            raise RuntimeError("SplitLineCost needs the compiled kernels (see usable())")
        if (sq is not None) != (mode == LINE) or (mode == LINE and x is not t):
            raise ValueError(f"SplitLineCost: sq is given, and x is t, exactly for mode={LINE}")
        B, T, k, n = t.shape
        idx = argsort_last(x, compact=True)  # int32 where the sort writes it
        alpha, c, prefix = (torch.empty((B, T, k, n), dtype=t.dtype) for _ in range(3))
        cost = torch.empty((B, T, k), dtype=t.dtype)
        tn, xn, ixn, wn = _rows(t, k, n), _rows(x, k, n), _rows(idx, k, n), _rows(w)
        sqn = _rows(sq) if sq is not None else wn  # a placeholder where the mode reads none
        wrow = _row_map(torch.Size((B, 1, n)), torch.Size((B, T, n)))
        an, cn, pn = (y.view(-1, k, n).numpy() for y in (alpha, c, prefix))
        con = cost.view(-1, k).numpy()
        kernel = _kernels["split_line_forward"]
        int_type = np.int32 if t.dtype == torch.float32 else np.int64
        delta = float(delta)

        def part(s: slice) -> None:
            bits = np.empty(n, dtype=int_type)  # work space of each thread
            rows = sqn[s] if mode == LINE else sqn
            kernel(
                rows,
                tn[s],
                xn[s],
                wn,
                wrow[s],
                delta,
                mode,
                ixn[s],
                p == 2.0,
                an[s],
                cn[s],
                pn[s],
                con[s],
                bits,
            )

        _by_rows(part, tn.shape[0], _threads(tn.shape[0], tn.size))
        ctx.save_for_backward(c, idx, prefix, alpha, sq, t, w)
        ctx.delta, ctx.mode, ctx.p = delta, mode, p
        return cost

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        c, idx, prefix, alpha, sq, t, w = ctx.saved_tensors
        B, T, k, n = t.shape
        mode = int(ctx.mode)
        g = grad.detach().expand(B, T, k).reshape(-1, k).contiguous().numpy()
        cn, ixn, pn, an, tn = (_rows(y, k, n) for y in (c, idx, prefix, alpha, t))
        wn = _rows(w)
        sqn = _rows(sq) if sq is not None else wn
        wrow = _row_map(torch.Size((B, 1, n)), torch.Size((B, T, n)))
        gt = torch.empty((B, T, k, n), dtype=t.dtype)
        gsq = torch.empty((B, T, 1, n), dtype=t.dtype) if mode == LINE else None
        gx = torch.empty((B, T, k, n), dtype=t.dtype) if mode != LINE else None
        gtn = gt.view(-1, k, n).numpy()
        gsn = gsq.view(-1, n).numpy() if gsq is not None else gtn[:1, 0]
        gxn = gx.view(-1, k, n).numpy() if gx is not None else gtn[:1]
        tiny = float(torch.finfo(t.dtype).tiny)
        kernel = _kernels["split_line_backward"]
        delta, sq_p = float(ctx.delta), ctx.p == 2.0

        def part(s: slice) -> None:
            line = mode == LINE
            kernel(
                cn[s],
                ixn[s],
                pn[s],
                g[s],
                an[s],
                sqn[s] if line else sqn,
                tn[s],
                wn,
                wrow[s],
                delta,
                tiny,
                mode,
                sq_p,
                gsn[s] if line else gsn,
                gtn[s],
                gxn if line else gxn[s],
            )

        _by_rows(part, tn.shape[0], _threads(tn.shape[0], tn.size))
        needs = ctx.needs_input_grad
        return (
            gsq if needs[0] else None,
            gt if needs[1] else None,
            gx if needs[2] else None,
            None,
            None,
            None,
            None,
        )


#: rows sorted as packed keys at a time: at most this many elements (a 32 MiB buffer of
#: 64-bit keys)
_PACK_ELEMENTS = 1 << 22

#: rows of ``_NARROW[0] < n <= _NARROW[1]`` atoms are sorted as 32-bit keys first
#: (:func:`packed_argsort`): up to 256, NumPy's 64-bit sort is as fast (a sorting
#: network), and beyond 2^14 the buckets grow crowded
_NARROW = (256, 1 << 14)

#: the rows of the first block sorted as 32-bit keys: about this many elements
_PROBE_ELEMENTS = 1 << 16

#: a block whose runs to settle hold more than this share of its atoms is crowded, and
#: the rest of the call sorts 64-bit keys
_CROWDED = 0.1

#: a run of one bucket out of order and longer than this sends its row to 64-bit keys
_RUN_MAX = 64


def packs(rows: Any) -> bool:
    """Whether :func:`packed_argsort` sorts these NumPy rows (see :mod:`tsw.core._sort`).

    float32 rows shorter than 2^32 (the index takes the low 32 bits of a key), with the
    kernels loaded. With 64-bit keys it measured faster than ``np.argsort`` on CPUs with
    and without AVX-512 (0.18-0.78x); it was not measured on an Intel CPU with AVX-512.
    """
    return rows.dtype == np.float32 and rows.shape[-1] < 2**32 and _load()


def _wide(rows: Any, out: Any, keys: list[Any]) -> None:
    """``out`` <- the permutations of ``rows``, sorted as 64-bit keys.

    ``keys`` holds the keys' buffer once one is made (none is, in calls that never sort
    64-bit keys: an untouched buffer changes where later arrays are placed, and with
    them the page faults).
    """
    if not keys or keys[0].shape[0] < rows.shape[0]:
        keys[:] = [np.empty(rows.shape, dtype=np.uint64)]
    k = keys[0][: rows.shape[0]]
    _kernels["pack_keys"](rows, k)
    k.sort(axis=-1)
    _kernels["unpack_order"](k, out)


def _narrow(rows: Any, out: Any, keys: Any, wide: list[Any]) -> float:
    """``out`` <- the permutations of ``rows``, sorted as 32-bit keys; how crowded it was.

    Rows that the 32-bit keys could not settle (an infinity or a NaN, or a long run of
    one bucket out of order) are sorted again with 64-bit keys in ``wide``.
    """
    n_rows, n = rows.shape
    bits = max(1, (n - 1).bit_length())
    k = keys[:n_rows]
    ok = np.empty(n_rows, dtype=np.bool_)
    _kernels["pack_keys32"](rows, k, bits, ok)
    k.sort(axis=-1)
    crowd = _kernels["unpack_order32"](rows, k, out, bits, ok, _RUN_MAX)
    if not ok.all():
        redo = np.flatnonzero(~ok)
        order = np.empty((redo.size, n), dtype=out.dtype)
        _wide(np.ascontiguousarray(rows[redo]), order, wide)
        out[redo] = order
    return crowd / max(rows.size, 1)


def packed_argsort(rows: Any, out: Any) -> None:
    """``out`` (rows, n) int64 or int32 <- the permutation sorting each float32 row.

    The permutation of NumPy's stable argsort: ties in the order of their indices,
    -0.0 tied with 0.0, NaN last. Two ways, which give the same permutation:

    * **64-bit keys**: each value's order-preserving 32 bits above its index
      (``_numba_kernels.pack_keys``); NumPy sorts the keys (its sort of 64-bit integers
      is vectorised on AVX2, unlike ``np.argsort``), and the indices come back from the
      low bits.
    * **32-bit keys**, for rows of ``_NARROW`` lengths (257 to 16384 atoms): a bucket of
      the value on a grid across the row's range above its index
      (``pack_keys32``), which NumPy sorts 2 to 6 times faster than 64-bit keys on an
      AVX-512 CPU. The keys order the buckets; the atoms that share a bucket are then
      put in the order of their values (``unpack_order32``). Rows the buckets cannot
      settle cheaply (an infinity or a NaN, a long run of one bucket out of order) are
      sorted again with 64-bit keys. The first block holds about ``_PROBE_ELEMENTS``
      elements; once a block is crowded (more than ``_CROWDED`` of its atoms in runs to
      settle: clustered or heavy-tailed rows), the rest of the call takes 64-bit keys.

    The choice changes the time only, never the permutation. At most
    :data:`_PACK_ELEMENTS` keys are held at once.
    """
    rows = np.ascontiguousarray(rows)
    n_rows, n = rows.shape
    per = max(1, _PACK_ELEMENTS // max(n, 1))
    wide: list[Any] = []  # the 64-bit keys' buffer, made by the first call that needs it
    narrow = _NARROW[0] < n <= _NARROW[1]
    keys = np.empty((min(per, n_rows), n), dtype=np.uint32) if narrow else None
    r0 = 0
    while r0 < n_rows:
        if narrow:
            step = per if r0 else max(1, min(per, _PROBE_ELEMENTS // n))
            r1 = min(r0 + step, n_rows)
            narrow = _narrow(rows[r0:r1], out[r0:r1], keys, wide) <= _CROWDED
        else:
            r1 = min(r0 + per, n_rows)
            _wide(rows[r0:r1], out[r0:r1], wide)
        r0 = r1
