"""The Numba kernels behind :mod:`tsw.core._kernels` (imported only when Numba is there).

Module-level functions, so that Numba's on-disk cache (``cache=True``) serves later
processes without compiling again.

* ``forward`` / ``backward``: the line cost. Each row ``r`` of the masses reads the row
  ``cmap[r]`` of the sorted coordinates ``c`` and of the permutation ``idx`` (rows of
  shared coordinates are read by several rows of masses); ``forward`` can also form
  ``c`` from the input coordinates ``x``. ``sq`` selects p = 2 (else p = 1); ``rays``
  says that every coordinate is >= 0.
* ``split_backward`` / ``angle_split_backward``: the backward of the distance-based
  split (``tsw.core.splits.split_masses``) and of STSW's split on S^2, one row per tree;
  ``wrow[r]`` is the row of the signed masses ``w`` that tree row ``r`` reads.
"""

# pyright: reportMissingImports=false
from __future__ import annotations

import numba
import numpy as np

jit = numba.njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
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
    """Per row: the prefix sums ``P_j = sum_{i <= j} m[idx[i]]`` and the cost.

    The cost is ``sum_e w_e |mass beyond e|^p`` over the edges of the line rooted at 0.
    With ``sort_c`` (one row of coordinates per row of masses: ``cmap[r] = r``), the
    sorted coordinates ``c[r, j] = x[r, idx[r, j]]`` are formed in the same loop.
    """
    n = m.shape[1]
    for r in range(m.shape[0]):
        cr = c[cmap[r]]
        ir = idx[cmap[r]]
        mr = m[r]
        pr = prefix[r]
        acc = 0.0
        if sort_c:
            xr = x[r]
            for j in range(n):
                k = ir[j]
                cr[j] = xr[k]
                acc += mr[k]
                pr[j] = acc
        else:
            for j in range(n):
                acc += mr[ir[j]]
                pr[j] = acc
        total = pr[n - 1]
        s = 0.0
        S = total  # S_j = total - P_{j-1}: the mass at and beyond atom j
        if rays:  # every coordinate >= 0: the edge (c_{j-1}, c_j) carries S_j, c_{-1} = 0
            prev = 0.0
            for j in range(n):
                cj = cr[j]
                s += (cj - prev) * pw(S, sq)
                prev = cj
                S = total - pr[j]
            cost[r] = s
            continue
        z = first_nonnegative(cr, n)  # atoms 0..z-1 lie below the root
        if z > 0:  # the edge from c_j to c_{j+1} (to 0 for the last) carries P_j
            for j in range(z - 1):
                s += (cr[j + 1] - cr[j]) * pw(pr[j], sq)
            s -= cr[z - 1] * pw(pr[z - 1], sq)
            S = total - pr[z - 1]
        prev = 0.0
        for j in range(z, n):  # the edge from c_{j-1} (from 0 for the first) carries S_j
            cj = cr[j]
            s += (cj - prev) * pw(S, sq)
            prev = cj
            S = total - pr[j]
        cost[r] = s


@jit
def backward(c, idx, cmap, prefix, g, gm, gc, sq, rays, want_m, want_c):
    """Per row: the gradients of the masses (``gm``) and coordinates (``gc``), times ``g``.

    Both are written in input order (to the atom's place ``idx[j]``).
    """
    # in sorted order:
    # dC/dm_i = sum_{i <= j < z} dn_j d|P_j|^p + sum_{z <= j <= i} dp_j d|S_j|^p
    # dC/dc_j = |P_{j-1}|^p - |P_j|^p below the root, |S_j|^p - |S_{j+1}|^p above it
    n = prefix.shape[1]
    for r in range(prefix.shape[0]):
        cr = c[cmap[r]]
        ir = idx[cmap[r]]
        pr = prefix[r]
        gmr = gm[r]
        gcr = gc[r]
        gr = g[r]
        total = pr[n - 1]
        S = total
        A = 0.0
        prev = 0.0
        if rays:
            for j in range(n):
                cj = cr[j]
                Sn = total - pr[j] if j + 1 < n else 0.0
                k = ir[j]
                if want_m:
                    A += (cj - prev) * dpw(S, sq)
                    gmr[k] = gr * A
                if want_c:
                    gcr[k] = gr * (pw(S, sq) - pw(Sn, sq))
                prev = cj
                S = Sn
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
        if z > 0:
            S = total - pr[z - 1]
        for j in range(z, n):  # above the root (c_j >= 0), left to right
            cj = cr[j]
            Sn = total - pr[j] if j + 1 < n else 0.0
            k = ir[j]
            if want_m:
                A += (cj - prev) * dpw(S, sq)
                gmr[k] = gr * A
            if want_c:  # an atom at the root (c_j = 0) gets 0, as in the torch path
                gcr[k] = gr * (pw(S, sq) - pw(Sn, sq)) if cj > 0.0 else 0.0
            prev = cj
            S = Sn


@jit
def split_backward(gm, alpha, dist, t, w, wrow, delta, tiny, from_line, gsq, gt):
    """Per row (one tree): the backward of Db-TSW's split of the masses.

    The forward is ``masses_l = alpha_l w`` with ``alpha = softmax_l(-delta dist_l)``.
    With ``g_l = gm_l w``: ``e_l = dC/ddist_l = -delta alpha_l (g_l - sum_j alpha_j g_j)``.
    If ``from_line``, ``dist_l = sqrt(max(sq - t_l^2, 0))`` and, with
    ``q_l = e_l dist_l / (dist_l^2 + tiny)`` (0 on the line itself),
    ``dC/dsq = (q_0 + ... + q_{k-1}) / 2`` goes to ``gsq`` and ``dC/dt_l = -q_l t_l`` to
    ``gt``; otherwise ``dist`` is the input and ``gt`` receives ``e`` (``t``, ``gsq``
    unused). The loops run over the atoms innermost, so that they are vectorised.
    """
    k, n = alpha.shape[1], alpha.shape[2]
    s = np.empty(n, dtype=alpha.dtype)
    c = alpha.dtype.type(-delta)
    half = alpha.dtype.type(0.5)
    eps = alpha.dtype.type(tiny)
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
        if not from_line:
            for line in range(k):
                for i in range(n):
                    gtr[line, i] = c * ar[line, i] * (gmr[line, i] - s[i]) * wr[i]
            continue
        dr = dist[r]
        tr = t[r]
        gsr = gsq[r]
        for i in range(n):
            gsr[i] = 0.0
        for line in range(k):
            for i in range(n):
                d = dr[line, i]
                q = c * ar[line, i] * (gmr[line, i] - s[i]) * wr[i] * d / (d * d + eps)
                gsr[i] += half * q
                gtr[line, i] = -q * tr[line, i]


@jit_reassoc
def angle_split_backward(g, alpha, phi, slope, scale, w, wrow, delta, gpolar, gscale, gtheta):
    """Per row (one tree): the backward of STSW's split on S^2 (``_WrappedAngleSplit``).

    The forward is ``masses_l = alpha_l w`` with ``alpha = softmax_l(-delta scale phi_l)``,
    ``phi_l`` the wrapped angle of the atom to ray ``l`` and ``slope_l`` its derivative.
    With ``e_l = -delta alpha_l w (g_l - sum_j alpha_j g_j)`` (the logits' gradient over
    ``scale``): ``gscale = sum_l e_l phi_l``, ``d_l = e_l scale slope_l``,
    ``gpolar = sum_l d_l`` and ``gtheta_l = -sum_atoms d_l``. The sums over the atoms may
    be reassociated (``fastmath={"reassoc"}``), so that the loops are vectorised.
    """
    k, n = alpha.shape[1], alpha.shape[2]
    s = np.empty(n, dtype=alpha.dtype)
    c = alpha.dtype.type(-delta)
    for r in range(alpha.shape[0]):
        wr = w[wrow[r]]
        gr = g[r]
        ar = alpha[r]
        pr = phi[r]
        lr = slope[r]
        sc = scale[r]
        gp = gpolar[r]
        gs = gscale[r]
        for i in range(n):
            s[i] = ar[0, i] * gr[0, i]
            gp[i] = 0.0
            gs[i] = 0.0
        for line in range(1, k):
            for i in range(n):
                s[i] += ar[line, i] * gr[line, i]
        for line in range(k):
            tot = 0.0
            for i in range(n):
                e = c * ar[line, i] * (gr[line, i] - s[i]) * wr[i]
                gs[i] += e * pr[line, i]
                d = e * sc[i] * lr[line, i]
                gp[i] += d
                tot += d
            gtheta[r, line] = -tot
