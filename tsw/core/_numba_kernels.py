"""The Numba kernels behind :mod:`tsw.core._kernels` (imported only when Numba is there).

Module-level functions, so that Numba's on-disk cache (``cache=True``) serves later
processes without compiling again.

* ``forward`` / ``backward``: the line cost. Each row ``r`` of the masses reads the row
  ``cmap[r]`` of the sorted coordinates ``c`` and of the permutation ``idx`` (rows of
  shared coordinates are read by several rows of masses); ``forward`` can also form
  ``c`` from the input coordinates ``x``. ``sq`` selects p = 2 (else p = 1); ``rays``
  says that every coordinate is >= 0.
* ``split_forward`` / ``split_backward``: the distance-based split
  (``tsw.core.splits.split_masses``), one row per tree; ``wrow[r]`` is the row of the
  signed masses ``w`` that tree row ``r`` reads. ``split_line_forward`` /
  ``split_line_backward``: the split and the line cost together, one tree at a time.
* ``pack_keys`` / ``unpack_order``: float32 rows sorted as 64-bit keys (the value's
  order-preserving 32 bits, then the index), for ``tsw.core._sort``.
* ``ray_split_forward`` / ``ray_split_backward``: STSW on S^2, the split and the closed
  form on the rays together, one row per tree; ``s2_angles_backward``: the backward of
  its angles; ``exp32_`` / ``exp64_``: an exponential that the compiler vectorises.
"""

# pyright: reportMissingImports=false
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import numba
import numba.core.event
import numba.extending
import numpy as np

jit = numba.njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")


class CacheMissError(Exception):
    """Numba would compile a kernel that its disk cache does not hold (:func:`cache_only`)."""


@contextlib.contextmanager
def cache_only() -> Iterator[None]:
    """Within: Numba loads kernels from its disk cache, and compiles none in this thread.

    Numba announces every compilation (after its cache missed) with a ``numba:compile``
    event; a listener raises :class:`CacheMissError` at those of this thread before
    they start. Other threads compile as usual.
    """
    me = threading.get_ident()

    class Refuse(numba.core.event.Listener):
        def on_start(self, event):
            if threading.get_ident() == me:
                raise CacheMissError

        def on_end(self, event):
            pass

    with numba.core.event.install_listener("numba:compile", Refuse()):
        yield


#: the same, with products and sums fused where the CPU has FMA (``a - b * c`` exactly
#: rounded, as torch's ``addcmul`` forms it)
jit_fma = numba.njit(
    nogil=True, cache=True, boundscheck=False, error_model="numpy", fastmath={"contract"}
)
#: the same, with sums that may be reassociated (so that reductions are vectorised)
jit_reassoc = numba.njit(
    nogil=True, cache=True, boundscheck=False, error_model="numpy", fastmath={"reassoc"}
)


@numba.njit(inline="always")
def sign(x):
    """Sign of ``x`` (0 at 0), branch-free: the sign of a prefix sum is not predictable."""
    return 1.0 * (x > 0) - 1.0 * (x < 0)


@numba.njit(inline="always")
def pw(x, sq):
    """``|x|^p`` for p = 2 (``sq``) or p = 1."""
    return x * x if sq else abs(x)


@numba.njit(inline="always")
def dpw(x, sq):
    """Return the derivative of ``|x|^p``: ``2x`` (p = 2) or ``sign(x)``, 0 at 0 (p = 1)."""
    return 2.0 * x if sq else sign(x)


@numba.njit(inline="always")
def first_nonnegative(cr, n):
    """Index of the first coordinate >= 0 of a sorted row (bisection); n if none."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) >> 1
        if cr[mid] < 0.0:
            lo = mid + 1
        else:
            hi = mid
    return lo


@jit
def forward(x, c, idx, cmap, m, prefix, cost, sq, rays, sort_c):
    """Per row: the mass beyond every atom, seen from the root, and the cost.

    ``prefix[r, j]`` receives the mass beyond the edge on atom ``j``'s root side: below
    the root (``c_j < 0``) the prefix sum ``P_j = sum_{i <= j} m[idx[i]]``, above it the
    suffix sum ``S_j = sum_{i >= j} m[idx[i]]``, each summed from the far end of its side
    (a suffix read as ``total - P_{j-1}`` would lose a small mass far out beside a large
    one near the root). The cost is ``sum_e w_e |mass beyond e|^p`` over the edges of the
    line rooted at 0. With ``sort_c`` (one row of coordinates per row of masses:
    ``cmap[r] = r``), the sorted coordinates ``c[r, j] = x[r, idx[r, j]]`` are formed
    first.
    """
    n = m.shape[1]
    for r in range(m.shape[0]):
        cr = c[cmap[r]]
        ir = idx[cmap[r]]
        mr = m[r]
        pr = prefix[r]
        if sort_c:
            xr = x[r]
            for j in range(n):
                cr[j] = xr[ir[j]]
        z = 0 if rays else first_nonnegative(cr, n)  # atoms 0..z-1 lie below the root
        acc = 0.0
        for j in range(z):
            acc += mr[ir[j]]
            pr[j] = acc
        acc = 0.0
        for j in range(n - 1, z - 1, -1):
            acc += mr[ir[j]]
            pr[j] = acc
        s = 0.0
        if z > 0:  # the edge from c_j to c_{j+1} (to 0 for the last) carries P_j
            for j in range(z - 1):
                s += (cr[j + 1] - cr[j]) * pw(pr[j], sq)
            s -= cr[z - 1] * pw(pr[z - 1], sq)
        prev = 0.0
        for j in range(z, n):  # the edge from c_{j-1} (from 0 for the first) carries S_j
            cj = cr[j]
            s += (cj - prev) * pw(pr[j], sq)
            prev = cj
        cost[r] = s


@jit
def backward(c, idx, cmap, prefix, g, gm, gc, sq, rays, want_m, want_c):
    """Per row: the gradients of the masses (``gm``) and coordinates (``gc``), times ``g``.

    ``prefix`` is :func:`forward`'s: ``P_j`` below the root, ``S_j`` above it. Both
    gradients are written in input order (to the atom's place ``idx[j]``).
    """
    # in sorted order:
    # dC/dm_i = sum_{i <= j < z} dn_j d|P_j|^p + sum_{z <= j <= i} dp_j d|S_j|^p
    # dC/dc_j = |P_{j-1}|^p - |P_j|^p below the root, |S_j|^p - |S_{j+1}|^p above it
    n = prefix.shape[1]
    zero = prefix.dtype.type(0.0)  # S_n, in the masses' type (as S_j: |S|^p in one type)
    for r in range(prefix.shape[0]):
        cr = c[cmap[r]]
        ir = idx[cmap[r]]
        pr = prefix[r]
        gmr = gm[r]
        gcr = gc[r]
        gr = g[r]
        A = 0.0
        prev = 0.0
        if rays:
            for j in range(n):
                cj = cr[j]
                S = pr[j]
                Sn = pr[j + 1] if j + 1 < n else zero
                k = ir[j]
                if want_m:
                    A += (cj - prev) * dpw(S, sq)
                    gmr[k] = gr * A
                if want_c:
                    gcr[k] = gr * (pw(S, sq) - pw(Sn, sq))
                prev = cj
            continue
        z = first_nonnegative(cr, n)
        B = 0.0  # below the root, right to left
        nxt = 0.0
        for j in range(z - 1, -1, -1):
            cj = cr[j]
            pj = pr[j]
            k = ir[j]
            if want_m:
                B += (nxt - cj) * dpw(pj, sq)
                gmr[k] = gr * B
            if want_c:
                gcr[k] = gr * ((pw(pr[j - 1], sq) if j > 0 else 0.0) - pw(pj, sq))
            nxt = cj
        for j in range(z, n):  # above the root (c_j >= 0), left to right
            cj = cr[j]
            S = pr[j]
            Sn = pr[j + 1] if j + 1 < n else zero
            k = ir[j]
            if want_m:
                A += (cj - prev) * dpw(S, sq)
                gmr[k] = gr * A
            if want_c:  # an atom at the root (c_j = 0) gets 0, as in the torch path
                gcr[k] = gr * (pw(S, sq) - pw(Sn, sq)) if cj > 0.0 else 0.0
            prev = cj


@jit_fma
def split_backward(gm, alpha, sq, t, w, wrow, delta, tiny, mode, gsq, gt):
    """Per row (one tree): the backward of Db-TSW's split of the masses.

    The forward is ``masses_l = alpha_l w`` with ``alpha = softmax_l(-delta dist_l)``.
    With ``g_l = gm_l w``: ``e_l = dC/ddist_l = -delta alpha_l (g_l - sum_j alpha_j g_j)``.
    ``mode`` is :func:`split_forward`'s: ``LINE`` (1), ``dist_l = sqrt(max(sq - t_l^2,
    0))`` (formed again from ``sq`` (rows, n) and ``t``, as the forward formed it, rather
    than stored) and, with ``q_l = e_l dist_l / (dist_l^2 + tiny)`` (0 on the line
    itself), ``dC/dsq = (q_0 + ... + q_{k-1}) / 2`` goes to ``gsq`` and
    ``dC/dt_l = -q_l t_l`` to ``gt``; ``SIGNED`` (2), ``dist_l = |t_l|`` and ``gt``
    receives ``sign(t_l) e_l`` (0 on the line, as ``abs``' subgradient); ``DISTANCES``
    (0), ``gt`` receives ``e``. ``sq``, ``t`` and ``gsq`` are read and written only where
    the mode uses them. The loops run over the atoms innermost, so that they are
    vectorised.
    """
    k, n = alpha.shape[1], alpha.shape[2]
    s = np.empty(n, dtype=alpha.dtype)
    c = alpha.dtype.type(-delta)
    half = alpha.dtype.type(0.5)
    eps = alpha.dtype.type(tiny)
    zero = alpha.dtype.type(0.0)
    for r in range(alpha.shape[0]):
        wr = w[wrow[r]]
        gmr = gm[r]
        ar = alpha[r]
        gtr = gt[r]
        for i in range(n):
            s[i] = ar[0, i] * gmr[0, i]
        for line in range(1, k):
            for i in range(n):
                s[i] += ar[line, i] * gmr[line, i]
        if mode == 0:
            for line in range(k):
                for i in range(n):
                    gtr[line, i] = c * ar[line, i] * (gmr[line, i] - s[i]) * wr[i]
            continue
        tr = t[r]
        if mode == 2:
            for line in range(k):
                for i in range(n):
                    e = c * ar[line, i] * (gmr[line, i] - s[i]) * wr[i]
                    v = tr[line, i]
                    gtr[line, i] = e if v > zero else (-e if v < zero else zero)
            continue
        sr = sq[r]
        gsr = gsq[r]
        for i in range(n):
            gsr[i] = 0.0
        for line in range(k):
            for i in range(n):
                v = sr[i] - tr[line, i] * tr[line, i]
                d = np.sqrt(zero if v < zero else v)
                q = c * ar[line, i] * (gmr[line, i] - s[i]) * wr[i] * d / (d * d + eps)
                gsr[i] += half * q
                gtr[line, i] = -q * tr[line, i]


@jit
def split_line_forward(sq, t, x, w, wrow, delta, mode, idx, sq_p, alpha, c, prefix, cost, bits):
    """Per tree: :func:`split_forward`, then :func:`forward` on the tree's ``k`` lines.

    ``t`` (trees, k, n) and ``mode`` give the distances as for :func:`split_forward`
    (``sq`` (trees, n) read by ``LINE`` only; a placeholder row otherwise); ``x``
    (trees, k, n) holds the coordinates on the lines (``t`` itself for ``LINE``) and
    ``idx`` the permutations that sort them; ``w[wrow[r]]`` (n,) the signed masses. The
    tree's masses go to a (k, n) work space, read at once by the line cost while in the
    cache, instead of a (trees, k, n) array written and read back. Writes the split
    ``alpha``, the sorted coordinates ``c``, the masses beyond the atoms (:func:`forward`)
    and the cost (trees, k):
    the same values as the two kernels one after the other.
    """
    k, n = t.shape[1], t.shape[2]
    masses = np.empty((1, k, n), dtype=t.dtype)
    lines = np.arange(k)
    for r in range(t.shape[0]):
        s = r if mode == 1 else 0
        split_forward(
            sq[s : s + 1],
            t[r : r + 1],
            w,
            wrow[r : r + 1],
            delta,
            mode,
            masses,
            alpha[r : r + 1],
            bits,
        )
        forward(x[r], c[r], idx[r], lines, masses[0], prefix[r], cost[r], sq_p, False, True)


@jit
def split_line_backward(
    c, idx, prefix, g, alpha, sq, t, w, wrow, delta, tiny, mode, sq_p, gsq, gt, gx
):
    """Per tree: :func:`backward` on the tree's ``k`` lines, then :func:`split_backward`.

    The gradient of the tree's masses goes to a (k, n) work space, which the split's
    backward reads while in the cache. The coordinates' gradient through the line cost
    goes to ``gx`` (trees, k, n), except for ``LINE``, where the coordinates are ``t``:
    it then goes to a (k, n) work space and is added to the gradient through the split
    (``gt``) there, instead of two (trees, k, n) arrays that autograd adds. ``g``
    (trees, k) is the gradient of the cost. Writes ``gt`` (trees, k, n) and, for
    ``LINE``, ``gsq`` (trees, n) (placeholder rows of ``gsq`` and ``gx`` otherwise).
    """
    k, n = t.shape[1], t.shape[2]
    gm = np.empty((1, k, n), dtype=t.dtype)
    gc = np.empty((k, n), dtype=t.dtype)
    lines = np.arange(k)
    for r in range(t.shape[0]):
        s = r if mode == 1 else 0
        gcr = gc if mode == 1 else gx[r]
        backward(c[r], idx[r], lines, prefix[r], g[r], gm[0], gcr, sq_p, False, True, True)
        split_backward(
            gm,
            alpha[r : r + 1],
            sq[s : s + 1],
            t[r : r + 1],
            w,
            wrow[r : r + 1],
            delta,
            tiny,
            mode,
            gsq[s : s + 1],
            gt[r : r + 1],
        )
        if mode == 1:
            gtr = gt[r]
            for line in range(k):
                a, b = gtr[line], gc[line]
                for i in range(n):
                    a[i] += b[i]


@jit
def _scale_and_add(x, scale, total):
    """``x *= scale`` (the powers of two of :func:`exp32_`, :func:`exp64_`); ``total += x``."""
    for i in range(x.shape[0]):
        e = x[i] * scale[i]
        x[i] = e
        total[i] += e


@jit
def exp32_(x, shift, total, bits):
    """``x <- exp(x - shift)`` and ``total += x`` for float32, in vectorised loops.

    No libm call: ``exp(v) = 2^m exp(r)`` with ``m = floor(v log2(e) + 1/2)`` and
    ``r = v - m log(2)`` in two parts (Cody and Waite), Cephes' degree-7 polynomial for
    ``exp(r)`` on ``|r| <= log(2) / 2`` (measured on [-87, 0]: relative error at most
    0.7 float32 eps), and ``2^m`` built in ``bits`` (int32, as long as ``x``). ``v``
    below -87 gives ``exp(-87)`` (for the split's logits minus their maximum: a share
    below 1e-37 of the largest); NaN stays NaN.
    """
    lo = np.float32(-87.0)
    for i in range(x.shape[0]):
        v = x[i] - shift[i]
        v = lo if v < lo else v
        m = np.floor(v * np.float32(1.44269504088896341) + np.float32(0.5))
        r = v - m * np.float32(0.693359375) + m * np.float32(2.12194440e-4)
        q = np.float32(1.9875691500e-4)
        q = q * r + np.float32(1.3981999507e-3)
        q = q * r + np.float32(8.3334519073e-3)
        q = q * r + np.float32(4.1665795894e-2)
        q = q * r + np.float32(1.6666665459e-1)
        q = q * r + np.float32(5.0000001201e-1)
        x[i] = q * r * r + r + np.float32(1.0)
        bits[i] = (np.int32(m) + np.int32(127)) << np.int32(23)
    _scale_and_add(x, bits.view(np.float32), total)


@jit
def exp64_(x, shift, total, bits):
    """``x <- exp(x - shift)`` and ``total += x`` for float64, as :func:`exp32_`.

    Cephes' rational approximation of ``exp(r)`` after the same reduction (measured on
    [-87, 0] against mpmath: relative error at most 1.0 float64 eps),
    ``bits`` int64; ``v`` below -708 gives ``exp(-708)``.
    """
    lo = -708.0
    for i in range(x.shape[0]):
        v = x[i] - shift[i]
        v = lo if v < lo else v
        m = np.floor(v * 1.4426950408889634074 + 0.5)
        r = v - m * 6.93145751953125e-1 - m * 1.42860682030941723212e-6
        rr = r * r
        px = r * ((1.26177193074810590878e-4 * rr + 3.02994407707441961300e-2) * rr + 1.0)
        qx = (
            (3.00198505138664455042e-6 * rr + 2.52448340349684104192e-3) * rr
            + 2.27265548208155028766e-1
        ) * rr + 2.0
        x[i] = 1.0 + 2.0 * px / (qx - px)
        bits[i] = (np.int64(m) + np.int64(1023)) << np.int64(52)
    _scale_and_add(x, bits.view(np.float64), total)


def exp_(x, shift, total, bits):
    """:func:`exp32_` or :func:`exp64_` by the dtype of ``x``, chosen when compiling."""
    raise NotImplementedError("called from compiled kernels only")


@numba.extending.overload(exp_)
def _exp_by_dtype(x, shift, total, bits):
    if x.dtype == numba.types.float32:
        return lambda x, shift, total, bits: exp32_(x, shift, total, bits)
    return lambda x, shift, total, bits: exp64_(x, shift, total, bits)


@jit
def _cumsum_rows(x):
    """In place, the prefix sums of every row of ``x`` (k, n).

    Four rows at a time, each sum in a register of its own, so that four additions are in
    flight instead of one chain (a sum's order of terms is that of one row alone).
    """
    k, n = x.shape
    line = 0
    while line + 4 <= k:
        x0, x1, x2, x3 = x[line], x[line + 1], x[line + 2], x[line + 3]
        a0 = a1 = a2 = a3 = 0.0
        for j in range(n):
            a0 += x0[j]
            x0[j] = a0
            a1 += x1[j]
            x1[j] = a1
            a2 += x2[j]
            x2[j] = a2
            a3 += x3[j]
            x3[j] = a3
        line += 4
    while line < k:
        xl = x[line]
        a = 0.0
        for j in range(n):
            a += xl[j]
            xl[j] = a
        line += 1


@jit
def _suffix_scan(ar, ws, sq, P, S, keep):
    """Sum the rays' suffix masses ``S_lj = sum_{i >= j} ar[l, i] ws[i]`` of one tree.

    Summed from the far end in float64, four rays at a time (four sums in flight), in
    the same order on every call. Writes ``P_j = sum_l |S_lj|^p`` and, if ``keep``,
    ``S`` (k, n) itself.
    """
    k, n = ar.shape
    for j in range(n):
        P[j] = 0.0
    line = 0
    while line < k:
        if line + 4 <= k:
            r0, r1, r2, r3 = ar[line], ar[line + 1], ar[line + 2], ar[line + 3]
            s0, s1, s2, s3 = S[line], S[line + 1], S[line + 2], S[line + 3]
            a0 = a1 = a2 = a3 = 0.0
            for jj in range(n):
                j = n - 1 - jj
                wj = ws[j]
                a0 += r0[j] * wj
                a1 += r1[j] * wj
                a2 += r2[j] * wj
                a3 += r3[j] * wj
                P[j] += pw(a0, sq) + pw(a1, sq) + pw(a2, sq) + pw(a3, sq)
                if keep:
                    s0[j] = a0
                    s1[j] = a1
                    s2[j] = a2
                    s3[j] = a3
            line += 4
        else:
            rl, sl = ar[line], S[line]
            a = 0.0
            for jj in range(n):
                j = n - 1 - jj
                a += rl[j] * ws[j]
                P[j] += pw(a, sq)
                if keep:
                    sl[j] = a
            line += 1


@jit
def _softmax_rows_(ar, top, total, bits):
    """In place, ``ar`` (k, n) <- ``softmax`` over its rows (the lines) of every column.

    ``top``, ``total`` and ``bits`` (n,) are work space. Every loop runs over the
    columns (the atoms), which the compiler vectorises; so does the exponential
    (:func:`exp32_`, :func:`exp64_`: ``bits`` int32 or int64 as ``ar`` is float32 or
    float64).
    """
    k, n = ar.shape
    dt = ar.dtype.type
    for j in range(n):
        top[j] = ar[0, j]
    for line in range(1, k):
        al = ar[line]
        for j in range(n):
            top[j] = al[j] if al[j] > top[j] else top[j]
    for j in range(n):
        total[j] = 0.0
    for line in range(k):
        exp_(ar[line], top, total, bits)
    for j in range(n):
        top[j] = dt(1.0) / total[j]
    for line in range(k):
        al = ar[line]
        for j in range(n):
            al[j] *= top[j]


@jit
def _ray_split(srt, th, delta, ar, top, total, bits):
    """Split a tree's atoms over its rays, in sorted order.

    ``srt`` (4, n) holds the atoms' coordinate, polar angle ``x``, ``s = sin t`` and
    signed mass in sorted order; ``th`` (k,) the rays' polar angles. Writes
    ``ar[l, j] = softmax_l(-delta s_j phi_lj)`` with ``phi_lj = pi - ||x_j - th_l| - pi|``
    (in [0, pi]; the logits are at most 0) by :func:`_softmax_rows_`.
    """
    k, n = ar.shape
    dt = ar.dtype.type
    pi = dt(np.pi)
    c = dt(-delta)
    xs, ss = srt[1], srt[2]
    for line in range(k):
        thl = th[line]
        al = ar[line]
        for j in range(n):
            al[j] = c * ss[j] * (pi - abs(abs(xs[j] - thl) - pi))
    _softmax_rows_(ar, top, total, bits)


@jit_fma
def split_forward(sq, t, w, wrow, delta, mode, masses, alpha, bits):
    """Per row (one tree): Db-TSW's masses ``alpha_l w``, ``alpha = softmax_l(-delta dist_l)``.

    ``t`` (rows, k, n) and ``mode``: ``LINE`` (1), ``t`` holds the coordinates on the
    lines and ``dist_l = sqrt(max(sq - t_l^2, 0))`` with ``sq`` (rows, n)
    (``LineDistance``'s formula; ``sq - t_l^2`` fused into one rounding where the CPU
    has FMA, as ``addcmul`` does: near a line the distance is a difference of nearly
    equal numbers); ``SIGNED`` (2), ``dist_l = |t_l|`` (the plane's coordinates along
    the normals); ``DISTANCES`` (0), ``t`` holds the distances. ``sq`` is read by
    ``LINE`` only. ``w[wrow[r]]`` (n,) the signed masses.
    Writes ``alpha`` and ``masses`` (rows, k, n); ``bits`` (n,) is work space
    (:func:`_softmax_rows_`).
    """
    k, n = t.shape[1], t.shape[2]
    dt = alpha.dtype.type
    c = dt(-delta)
    zero = dt(0.0)
    top = np.empty(n, dtype=alpha.dtype)
    total = np.empty(n, dtype=alpha.dtype)
    for r in range(t.shape[0]):
        tr = t[r]
        ar = alpha[r]
        if mode == 1:
            sr = sq[r]
            for line in range(k):
                tl, al = tr[line], ar[line]
                for j in range(n):
                    v = sr[j] - tl[j] * tl[j]
                    al[j] = c * np.sqrt(zero if v < zero else v)
        elif mode == 2:
            for line in range(k):
                tl, al = tr[line], ar[line]
                for j in range(n):
                    al[j] = c * abs(tl[j])
        else:
            for line in range(k):
                tl, al = tr[line], ar[line]
                for j in range(n):
                    al[j] = c * tl[j]
        _softmax_rows_(ar, top, total, bits)
        wr = w[wrow[r]]
        mr = masses[r]
        for line in range(k):
            al, ml = ar[line], mr[line]
            for j in range(n):
                ml[j] = al[j] * wr[j]


@jit
def _gather(ir, src, dst):
    """``dst[j] = src[ir[j]]``: one row in sorted order."""
    for j in range(ir.shape[0]):
        dst[j] = src[ir[j]]


@jit
def _scatter(ir, src, c, dst):
    """``dst[ir[j]] = c src[j]``: one row of sorted-order values back in input order."""
    for j in range(ir.shape[0]):
        dst[ir[j]] = c * src[j]


@jit
def _edges(ts, e):
    """``e_j = ts_j - ts_{j-1}`` (``ts_{-1} = 0``): the edge below each sorted atom of a ray."""
    e[0] = ts[0]
    for j in range(1, ts.shape[0]):
        e[j] = ts[j] - ts[j - 1]


@jit_reassoc
def ray_split_forward(
    t,
    polar,
    scale,
    theta,
    trow,
    w,
    wrow,
    fixed,
    frow,
    n0,
    idx,
    delta,
    sq,
    srt,
    alpha,
    cost,
    bits,
    work,
):
    """Per row (one tree): STSW's split on S^2 and the closed form on the tree's k rays.

    Inputs in input order: ``t``, ``polar``, ``scale`` (rows, n) the atoms' coordinate,
    tangent polar angle and ``sin t``; ``theta[trow[r]]`` (k,) the rays' polar angles;
    ``w[wrow[r]]`` (n,) the signed masses; ``idx`` (rows, n) the permutation sorting
    ``t``. Atom ``j`` (in sorted order) puts ``alpha_lj w_j`` on ray ``l``, with
    ``alpha_j = softmax_l(-delta scale_j phi_lj)`` (:func:`_ray_split`, in the inputs'
    precision, as torch's softmax). Writes, in sorted order, ``srt`` (rows, 4, n): the
    coordinates, polar angles, ``sin t`` and masses; the split ``alpha`` (rows, k, n);
    and the cost ``sum_j e_j sum_l |S_lj|^p``, ``e_j = t_j - t_{j-1}`` (``t_{-1} = 0``)
    and ``S_lj`` the mass of ray ``l`` at and beyond atom ``j`` (:func:`_suffix_scan`).
    Atoms ``i >= n0`` take the split ``fixed[frow[r], :, i - n0]`` (k,) instead
    (``fixed`` (rows, k, n - n0): atoms of given masses on each ray, such as the
    projected uniform measure of ``stsw_unif``; their ``w`` must be 1 and their
    ``scale`` 0, so that they add nothing to the gradients of the rays' angles).
    Work space: ``bits`` (n,), int32 or int64 as the inputs are float32 or float64
    (:func:`exp32_`, :func:`exp64_`), and ``work`` (k, 0): the suffix masses are used
    as they are summed, not kept (:func:`_suffix_scan`). The sum over the
    atoms may be reassociated (``fastmath={"reassoc"}``); the suffix sums run in order.
    """
    n = t.shape[1]
    top = np.empty(n, dtype=alpha.dtype)
    total = np.empty(n, dtype=alpha.dtype)
    e = np.empty(n)
    P = np.empty(n)
    for r in range(t.shape[0]):
        ir = idx[r]
        tr, pr, sr, wr = t[r], polar[r], scale[r], w[wrow[r]]
        sortr = srt[r]
        _gather(ir, tr, sortr[0])  # one array at a time: 0.6-0.75x the time of one loop
        _gather(ir, pr, sortr[1])
        _gather(ir, sr, sortr[2])
        _gather(ir, wr, sortr[3])
        ar = alpha[r]
        _ray_split(sortr, theta[trow[r]], delta, ar, top, total, bits)
        if n0 < n:
            fr = fixed[frow[r]]
            for j in range(n):
                i = ir[j]
                if i >= n0:
                    for line in range(ar.shape[0]):
                        ar[line, j] = fr[line, i - n0]
        _edges(sortr[0], e)
        _suffix_scan(ar, sortr[3], sq, P, work, False)
        s = 0.0
        for j in range(n):
            s += e[j] * P[j]
        cost[r] = s


@jit_reassoc
def ray_split_backward(
    srt, idx, theta, trow, alpha, g, delta, sq, want_w, gt, gpolar, gscale, gtheta, gw, gm
):
    """Per row: the gradients of :func:`ray_split_forward`'s cost, times ``g[r]``.

    Reads the forward's ``srt`` and ``alpha`` and sums the suffix masses again as the
    forward did (:func:`_suffix_scan`); ``gm`` (k, n) float64 is work space. Writes, in
    input order, the gradients of the coordinates (``gt``), of the polar angles
    (``gpolar``), of ``sin t`` (``gscale``) and, if ``want_w``, of the signed masses
    (``gw``, per row: not yet summed over the trees), and the rays' (``gtheta``,
    (rows, k)). In sorted order, with ``e_j = t_j - t_{j-1}``:

    * ``G_lj = dC/dm_lj = sum_{i <= j} e_i d|S_li|^p`` (the atom's mass on ray ``l``);
    * ``dC/dt_j = sum_l |S_lj|^p - |S_l(j+1)|^p``;
    * with ``m_lj = alpha_lj w_j`` and ``z_l = -delta s phi_l`` the split's logits,
      ``dC/dw_j = sum_l alpha_l G_l`` and ``dC/dz_l = alpha_l w_j (G_l - dC/dw_j)``,
      from which ``dC/ds = -delta sum_l dC/dz_l phi_l`` and ``dC/dphi_l = -delta
      s dC/dz_l``, times the wrapped angle's slope ``-sign(d) sign(|d| - pi)``
      (``d = x - theta_l``) for the polar angles (and minus it, summed over the atoms,
      for the rays).

    The sums over the atoms may be reassociated (``fastmath={"reassoc"}``), so that
    they are vectorised; the prefix and suffix sums run in order.
    """
    n = srt.shape[2]
    k = theta.shape[1]
    dt = alpha.dtype.type
    pi = dt(np.pi)
    e = np.empty(n)
    P = np.empty(n)
    mean = np.empty(n)
    gs = np.empty(n)
    gp = np.empty(n)
    for r in range(srt.shape[0]):
        ir = idx[r]
        th = theta[trow[r]]
        ar = alpha[r]
        gr = g[r]
        ts, xs, ss, ws = srt[r, 0], srt[r, 1], srt[r, 2], srt[r, 3]
        _edges(ts, e)
        _suffix_scan(ar, ws, sq, P, gm, True)
        for line in range(k):  # the terms of G_lj, then their prefix sums
            gl = gm[line]
            for j in range(n):
                gl[j] = e[j] * dpw(gl[j], sq)
        _cumsum_rows(gm)
        for j in range(n):
            mean[j] = ar[0, j] * gm[0, j]
            gs[j] = 0.0
            gp[j] = 0.0
        for line in range(1, k):
            for j in range(n):
                mean[j] += ar[line, j] * gm[line, j]
        for line in range(k):
            thl = th[line]
            tot = 0.0
            for j in range(n):
                dz = ar[line, j] * ws[j] * (gm[line, j] - mean[j])
                d = xs[j] - thl
                a = abs(d) - pi
                slope = ((d < 0) * 1.0 - (d > 0) * 1.0) * ((a > 0) * 1.0 - (a < 0) * 1.0)
                gs[j] += dz * (pi - abs(a))
                dd = dz * ss[j] * slope
                gp[j] += dd
                tot += dd
            gtheta[r, line] = gr * delta * tot
        for j in range(n - 1):  # dC/dt_j = P_j - P_{j+1}
            P[j] = gr * (P[j] - P[j + 1])
        P[n - 1] *= gr
        _scatter(ir, P, 1.0, gt[r])  # one array at a time, as the gathers
        _scatter(ir, gp, -delta * gr, gpolar[r])
        _scatter(ir, gs, -delta * gr, gscale[r])
        if want_w:
            _scatter(ir, mean, gr, gw[r])


@jit
def s2_angles_backward(A, rho, inv, irow, gt, gpolar, gscale, tiny, gA, gq):
    """Per row (one tree): the backward of STSW's angles on S^2 to the frame coordinates.

    ``A`` (rows, 3, n) the atoms' coordinates ``(A_0, A_1, A_2)`` in the tree's frame,
    ``rho = |(A_1, A_2)|`` and the gradients ``gt``, ``gpolar``, ``gscale`` (rows, n) of
    ``t = atan2(rho, A_0)``, ``theta = atan2(A_2, A_1)`` and ``rho inv[irow[r]]``.
    Writes the gradient of ``A`` to ``gA`` (rows, 3, n) and ``gscale rho`` to ``gq``
    (the gradient of ``inv``, not yet summed over the trees); ``1 / rho`` is taken as 0
    where ``rho = 0`` (``rho / (rho^2 + tiny)``). Three loops over the atoms, each
    reading few arrays, so that the compiler vectorises them (one loop over all twelve
    arrays ran 1.7x slower: too many for its checks that the arrays do not overlap).
    """
    n = rho.shape[1]
    eps = rho.dtype.type(tiny)
    for r in range(rho.shape[0]):
        a0, a1, a2 = A[r, 0], A[r, 1], A[r, 2]
        rr, ir = rho[r], inv[irow[r]]
        gtr, gpr, gsr = gt[r], gpolar[r], gscale[r]
        g0, g1, g2, gqr = gA[r, 0], gA[r, 1], gA[r, 2], gq[r]
        for i in range(n):  # for now g0 <- dC/drho, gqr <- 1 / rho
            p = rr[i]
            x = a0[i]
            g0[i] = gtr[i] * x / (x * x + p * p) + gsr[i] * ir[i]
            gqr[i] = p / (p * p + eps)
        for i in range(n):
            q = gqr[i]
            h = gpr[i] * q * q
            grho = g0[i]
            g1[i] = grho * a1[i] * q - h * a2[i]
            g2[i] = grho * a2[i] * q + h * a1[i]
        for i in range(n):
            p = rr[i]
            x = a0[i]
            g0[i] = -gtr[i] * p / (x * x + p * p)
            gqr[i] = gsr[i] * p


@jit
def pack_keys(x, keys):
    """``keys[r, j] = (u(x[r, j]) << 32) | j`` for float32 rows ``x`` (C-contiguous).

    ``u`` maps float32 to uint32 preserving the order (negative values' bits flipped,
    positive values' sign bit set), with -0.0 taken as 0.0 and every NaN as the largest
    key (last, as ``torch.sort`` puts it). Sorting the keys sorts the values, ties in the
    order of their indices (a stable sort), and the low 32 bits are then the permutation.
    """
    u = x.view(np.uint32)
    top = np.uint32(0x80000000)
    ones = np.uint32(0xFFFFFFFF)
    inf = np.uint32(0x7F800000)
    for r in range(x.shape[0]):
        ur = u[r]
        kr = keys[r]
        for j in range(x.shape[1]):
            b = ur[j]
            b = np.uint32(0) if b == top else b
            b = b ^ ones if b >= top else b | top
            b = ones if (ur[j] & ~top) > inf else b
            kr[j] = (np.uint64(b) << np.uint64(32)) | np.uint64(j)


@jit
def unpack_order(keys, order):
    """``order[r, j]``: the index in the low 32 bits of sorted :func:`pack_keys` keys."""
    low = np.uint64(0xFFFFFFFF)
    for r in range(keys.shape[0]):
        kr = keys[r]
        orr = order[r]
        for j in range(keys.shape[1]):
            orr[j] = np.int64(kr[j] & low)
