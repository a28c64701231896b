"""Compiled CPU kernels (Numba): the one seam between the library and compiled code.

Only core's closed form (:mod:`tsw.core.tree_wasserstein`), tree plan
(:mod:`tsw.core.tree_plan`), splits (:mod:`tsw.core.splits`), sort (:mod:`tsw.core._sort`),
S^2 angles (:mod:`tsw.core._angles`) and Flowtree (:mod:`tsw.support._flowmatch`) call this
module; each of them chooses the compiled or the torch implementation with :func:`usable`
(:func:`trees_usable` for the tree kernels), and the method packages never see the
difference. The functions here take tensors and return tensors (no autograd; the tree
kernels take NumPy arrays): the autograd functions that call them live with the
mathematics they compute.

* :func:`line_cost_forward` / :func:`line_cost_backward`: the closed form on rooted lines
  after the sort (a gather, two cumulative sums, the cost; both gradients straight to
  input order), one compiled loop per line.
* :func:`split_forward` / :func:`split_backward`: the distance-based split
  ``softmax_l(-delta dist_l) w``, one loop per tree; :func:`split_line_forward` /
  :func:`split_line_backward`: the split and the line cost of a tree's lines together,
  one tree at a time, so that the masses stay in the cache.
* :func:`ray_split_forward` / :func:`ray_split_backward`: STSW's split on S^2 and the
  closed form on the rays together; :func:`s2_angles_backward`: the backward of the
  angles of points on S^2.
* :func:`packed_argsort`: float32 rows sorted as packed 64-bit keys (the value's
  order-preserving 32 bits above its index), the permutation of NumPy's stable argsort.
* :func:`tree_euler_tour` / :func:`tree_match`: the pre-order of a rooted tree and the
  bottom-up matching of its exact transport plan (:mod:`tsw.core.tree_plan`);
  :func:`tree_subtree_sums` / :func:`tree_path_sums`: sums over every subtree and over
  every path to the root (:func:`tsw.tree_wasserstein`); all gated by
  :func:`trees_usable`.
* :func:`tree_kernel`: Flowtree's kernels (``_numba_trees.flow_*``), wrapped in
  :mod:`tsw.support._flowmatch`, gated by :func:`trees_usable`.

Used when Numba (an optional dependency: ``pip install torch-tsw[fast]``) can be
imported, the tensors are float32 or float64 on the CPU, ``p`` is 1 or 2, no graph is
being traced, and the environment variable ``TSW_NUMBA`` is not ``0``. When they are
prepared (loaded from Numba's disk cache in the first call that can use them; compiled
in a child process where the cache misses) is :mod:`tsw.core._kernel_loading`'s
concern; :func:`warm_up` compiles them all at once. The kernels follow the torch
formulas, with differences of rounding only (sums over a line accumulate in float64).
Rows are shared among ``torch.get_num_threads()`` threads, each row written by one
thread, so the result does not depend on the number of threads.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tsw.core import _kernel_loading as loading
from tsw.core._pinning import recorded
from tsw.core._threads import by_rows, threads_for

__all__ = [
    "SplitForm",
    "line_cost_backward",
    "line_cost_forward",
    "packed_argsort",
    "packs",
    "ray_split_backward",
    "ray_split_forward",
    "s2_angles_backward",
    "split_backward",
    "split_forward",
    "split_line_backward",
    "split_line_forward",
    "tree_euler_tour",
    "tree_kernel",
    "tree_match",
    "tree_path_sums",
    "tree_subtree_sums",
    "trees_usable",
    "usable",
    "warm_up",
]

#: the names of the compiled functions
_NAMES = (
    "forward",
    "backward",
    "split_forward",
    "split_backward",
    "split_line_forward",
    "split_line_backward",
    "ray_split_forward",
    "ray_split_backward",
    "s2_angles_backward",
    "pack_keys",
    "unpack_order",
)
#: the compiled functions, by name, once Numba and the kernels are imported
_compiled: dict[str, Any] = {}
#: the kernels' module (its ``cache_only`` and ``CacheMissError``), once imported
_numba: Any = None
#: the dtypes the kernels take
DTYPES = loading.DTYPES


class SplitForm(enum.IntEnum):
    """How the distances to the lines of a distance-based split are given.

    ``DISTANCES``: ``t`` holds the distances. ``COORDINATES``: ``t`` holds the
    coordinates on the lines and ``sq`` the squared distances to the tree's root, the
    distances being ``sqrt(max(sq - t^2, 0))``. ``SIGNED``: ``t`` holds signed distances
    (along the lines' normals in the plane), the distances being ``|t|``.
    """

    DISTANCES = 0
    COORDINATES = 1
    SIGNED = 2


def _import() -> bool:
    """Import Numba and the kernels once; False if Numba is not installed.

    Other errors (no writable place for Numba's cache) propagate:
    :mod:`tsw.core._kernel_loading` reports them once.
    """
    global _numba
    if _compiled:
        return True
    try:
        from tsw.core import _numba_kernels, _numba_trees
    except ImportError:
        return False
    _numba = _numba_kernels
    _compiled.update({name: getattr(_numba_kernels, name) for name in _NAMES})
    _compiled.update({name: getattr(_numba_trees, name) for name in _TREE_NAMES})
    return True


def _load(dtype: torch.dtype = torch.float32) -> bool:
    """Whether the kernels of ``dtype`` are ready (:func:`tsw.core._kernel_loading.load`)."""
    return loading.load(dtype, _import, _exercise)


def _prepare(dtype: torch.dtype) -> None:
    """Compile (or load) the kernels of ``dtype`` now (a child process runs this)."""
    loading.prepare(dtype, _import, _exercise)


def usable(*tensors: Tensor, p: float = 1.0) -> bool:
    """Whether the compiled kernels may run on these tensors (see the module notes).

    Loads (or starts compiling) them the first time it is asked for a dtype
    (:func:`tsw.core._kernel_loading.load`). Within :func:`tsw.core._pinning.pinned`, the
    answer is the one the graph's forward got.
    """
    if p not in (1.0, 2.0) or torch.compiler.is_compiling():
        return False
    t = tensors[0]
    for x in tensors:
        if x.device.type != "cpu" or x.dtype != t.dtype or type(x) is not Tensor:
            return False
    if t.dtype not in DTYPES or t.numel() == 0 or t.ndim == 0:
        return False
    return recorded(t.dtype, _load)


def warm_up() -> bool:
    """Compile (or load from Numba's cache) every kernel for float32 and float64 now.

    Blocks until they are ready: for measurements that should not count the one-time
    compilation, and for runs whose every call should take the compiled path. Returns
    whether the kernels are usable.
    """
    if loading.mode() == "0":
        return False
    for dtype in DTYPES:
        _prepare(dtype)
    return all(loading.ready(dtype) for dtype in DTYPES)


def _exercise(dtype: torch.dtype, cached_only: bool = False) -> bool:
    """Call every kernel once on tiny inputs of ``dtype``: Numba compiles what a call needs.

    The same wrappers, index types and layouts as the library's calls, so that these
    specialisations are the ones the calls use. With ``cached_only`` Numba loads them
    from its disk cache and compiles none: False at the first it lacks.
    """
    if cached_only:
        try:
            with _numba.cache_only():
                _exercise(dtype)
        except _numba.CacheMissError:
            return False
        return True
    c = torch.tensor([[-1.0, 2.0]], dtype=dtype)
    for index in (torch.int64, torch.int32):
        idx = torch.tensor([[0, 1]], dtype=index)
        for p in (1.0, 2.0):
            cost, prefix, _ = line_cost_forward(c, idx, c, p, False)
            line_cost_backward(c, idx, prefix, cost, p, False, True, True)
    index = torch.int32 if dtype == torch.float32 else torch.int64  # the sort's
    lines = c[None, None]  # Db-TSW's split: one tree, one line, two atoms
    for form in SplitForm:
        sq = lines.abs() if form == SplitForm.COORDINATES else None
        _, alpha = split_forward(sq, lines, c, 1.0, form)
        split_backward(lines, alpha, c, sq, lines, 1.0, form)
        for p in (1.0, 2.0):
            order = torch.tensor([[[[0, 1]]]], dtype=index)
            costs, kept = split_line_forward(sq, lines, lines, c, 1.0, form, order, p)
            split_line_backward(kept, costs, sq, lines, c, 1.0, form, p)
    t = c.abs().unsqueeze(0)  # STSW on S^2: one tree, one ray, two atoms
    for p in (1.0, 2.0):
        order = torch.tensor([[[0, 1]]], dtype=index)
        tree_cost, rays = ray_split_forward(t, t, t[..., :1], t, c, None, 1.0, p, order)
        ray_split_backward(rays, tree_cost, 1.0, p, True)
    s2_angles_backward(t.unsqueeze(-2).expand(1, 1, 3, 2), t, t, t, t, t)
    if dtype == torch.float32:  # the packed sort, into int64 and int32 permutations
        rows = np.linspace(0.0, 1.0, 600, dtype=np.float32).reshape(2, 300)[:, ::-1]
        for out in (np.int64, np.int32):
            packed_argsort(np.ascontiguousarray(rows), np.empty(rows.shape, dtype=out))
    if dtype == torch.float64:  # the tree kernels (int64 labels, float64 masses)
        star = np.array([-1, 0, 0], dtype=np.int64)
        _, end, _ = tree_euler_tour(star)
        tree_match(end, np.array([0.0, 1.0, 0.0]), np.array([0.0, 0.0, 1.0]))
        tree_path_sums(end, tree_subtree_sums(end, np.ones((1, 3))))
        _compiled["flow_warm"]()  # the Flowtree kernels (tsw.support._flowmatch)
    return True


def _as_rows(x: Tensor, *shape: int) -> Any:
    """``x`` as a C-contiguous (rows, *shape) NumPy array (a view when it already is one).

    ``shape`` defaults to the last axis: (rows, n).
    """
    return x.detach().reshape(-1, *(shape or x.shape[-1:])).contiguous().numpy()


def _row_map(c_shape: torch.Size, m_shape: torch.Size) -> Any:
    """For each row of ``m_shape``, the row of ``c_shape`` (broadcast to it) it reads.

    A contiguous array (a broadcast one has stride 0), so that the kernels see the layout
    :func:`_exercise` compiles them for.
    """
    rows = torch.arange(c_shape[:-1].numel()).view(c_shape[:-1])
    return np.ascontiguousarray(rows.expand(m_shape[:-1]).reshape(-1).numpy())


def _run(part: Any, n_rows: int, size: int) -> None:
    """Run ``part`` over ``n_rows`` rows of ``size`` elements, threads by the size."""
    by_rows(part, n_rows, threads_for(n_rows, size))


def _work_index(dtype: torch.dtype) -> np.dtype[Any]:
    """Return the integer type of the kernels' per-thread work space for ``dtype``."""
    return np.dtype(np.int32) if dtype == torch.float32 else np.dtype(np.int64)


def line_cost_forward(
    coords: Tensor, idx: Tensor, masses: Tensor, p: float, rays: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """Cost, masses beyond the atoms and sorted coordinates of the line cost.

    ``coords`` and ``idx`` (the coordinates and the permutation that sorts them, shape
    (..., n) with size 1 on the axes of shared coordinates) broadcast with ``masses``
    (..., n). Returns the cost (...,), the mass beyond each atom seen from the root in
    sorted order (prefix sums below the root, suffix sums above it, each from the far
    end; shaped as ``masses``) and the sorted coordinates (shaped as ``coords``; without
    shared coordinates they are gathered in the kernel).
    """
    m = _as_rows(masses)
    xn, ixn = _as_rows(coords), _as_rows(idx)
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
    kernel = _compiled["forward"]
    sq = p == 2.0

    def part(s: slice) -> None:
        if sort_c:  # row r of the masses reads row r of the coordinates (cmap = arange)
            rows = cmap[: s.stop - s.start]
            kernel(xn[s], cn[s], ixn[s], rows, m[s], pn[s], con[s], sq, rays, True)
        else:
            kernel(xn, cn, ixn, cmap[s], m[s], pn[s], con[s], sq, rays, False)

    _run(part, m.shape[0], m.size)
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
    """Gradients of the line cost with respect to the masses and the coordinates.

    Both come back in input order, shaped as ``prefix`` (the masses' shape); the
    coordinates' gradient is not yet summed over the lines that share coordinates.
    """
    pn = _as_rows(prefix)
    cn, ixn = _as_rows(c), _as_rows(idx)
    cmap = _row_map(c.shape, prefix.shape)
    g = grad.detach().expand(prefix.shape[:-1]).reshape(-1).contiguous().numpy()
    gm = torch.empty(prefix.shape, dtype=prefix.dtype) if want_m else None
    gc = torch.empty(prefix.shape, dtype=prefix.dtype) if want_c else None
    dummy = pn[:1]
    gmn = gm.view(-1, pn.shape[1]).numpy() if gm is not None else dummy
    gcn = gc.view(-1, pn.shape[1]).numpy() if gc is not None else dummy
    kernel = _compiled["backward"]
    sq = p == 2.0

    def part(s: slice) -> None:
        gms = gmn[s] if gm is not None else dummy
        gcs = gcn[s] if gc is not None else dummy
        kernel(cn, ixn, cmap[s], pn[s], g[s], gms, gcs, sq, rays, want_m, want_c)

    _run(part, pn.shape[0], pn.size)
    return gm, gc


def split_forward(
    sq: Tensor | None, t: Tensor, w: Tensor, delta: float, form: SplitForm
) -> tuple[Tensor, Tensor]:
    r"""Split ``w``: the masses ``softmax_l(-delta dist_l) w`` (B, T, k, n) and ``alpha``.

    ``t`` (B, T, k, n) and ``sq`` (B, T, 1, n), given exactly for ``COORDINATES``, hold
    the distances in the :class:`SplitForm` ``form``; ``w`` (B, n) the signed masses.
    """
    B, T, k, n = t.shape
    masses = torch.empty((B, T, k, n), dtype=t.dtype)
    alpha = torch.empty((B, T, k, n), dtype=t.dtype)
    tn, wn = _as_rows(t, k, n), _as_rows(w)
    sqn = _as_rows(sq) if sq is not None else wn
    wrow = _row_map(torch.Size((B, 1, n)), torch.Size((B, T, n)))
    mn, an = (x.view(-1, k, n).numpy() for x in (masses, alpha))
    kernel = _compiled["split_forward"]
    coordinates = form == SplitForm.COORDINATES

    def part(s: slice) -> None:
        bits = np.empty(n, dtype=_work_index(t.dtype))  # work space of each thread
        rows = sqn[s] if coordinates else sqn
        kernel(rows, tn[s], wn, wrow[s], float(delta), int(form), mn[s], an[s], bits)

    _run(part, tn.shape[0], tn.size)
    return masses, alpha


def split_backward(
    grad: Tensor,
    alpha: Tensor,
    w: Tensor,
    sq: Tensor | None,
    t: Tensor | None,
    delta: float,
    form: SplitForm,
) -> tuple[Tensor | None, Tensor]:
    """Gradients of :func:`split_forward`'s masses times ``grad``: of ``sq`` and of ``t``.

    ``t`` may be None for ``DISTANCES`` (the backward does not read the distances); the
    gradient of ``sq`` is None except for ``COORDINATES``.
    """
    B, T, k, n = alpha.shape
    gm, an = _as_rows(grad, k, n), _as_rows(alpha, k, n)
    wn, wrow = _as_rows(w), _row_map(torch.Size((B, 1, n)), torch.Size((B, T, n)))
    sqn = _as_rows(sq) if sq is not None else wn  # placeholders where the form reads none
    tn = _as_rows(t, k, n) if t is not None else an
    coordinates = form == SplitForm.COORDINATES
    gsq = torch.empty((B, T, 1, n), dtype=alpha.dtype) if coordinates else None
    gt = torch.empty((B, T, k, n), dtype=alpha.dtype)
    gtn = gt.view(-1, k, n).numpy()
    # (a contiguous placeholder where the form writes no gsq: the layout _exercise compiles)
    gsn = gsq.view(-1, n).numpy() if gsq is not None else np.empty((gtn.shape[0], 0), gtn.dtype)
    tiny = float(torch.finfo(alpha.dtype).tiny)
    kernel = _compiled["split_backward"]

    def part(s: slice) -> None:
        rows = sqn[s] if coordinates else sqn
        kernel(
            gm[s], an[s], rows, tn[s], wn, wrow[s], float(delta), tiny, int(form), gsn[s], gtn[s]
        )

    _run(part, gm.shape[0], gm.size)
    return gsq, gt


def split_line_forward(
    sq: Tensor | None,
    t: Tensor,
    x: Tensor,
    w: Tensor,
    delta: float,
    form: SplitForm,
    idx: Tensor,
    p: float,
) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor, Tensor]]:
    """Run the split and the line cost of every line together, one tree at a time.

    The distances as :func:`split_forward` takes them, ``x`` (B, T, k, n) the coordinates
    on the lines (``t`` itself for ``COORDINATES``) and ``idx`` the permutation sorting
    them. Returns the cost of every line (B, T, k) and what :func:`split_line_backward`
    reads: the sorted coordinates, the masses beyond the atoms and the split.
    """
    B, T, k, n = t.shape
    alpha, c, prefix = (torch.empty((B, T, k, n), dtype=t.dtype) for _ in range(3))
    cost = torch.empty((B, T, k), dtype=t.dtype)
    tn, xn, ixn, wn = _as_rows(t, k, n), _as_rows(x, k, n), _as_rows(idx, k, n), _as_rows(w)
    sqn = _as_rows(sq) if sq is not None else wn  # a placeholder where the form reads none
    wrow = _row_map(torch.Size((B, 1, n)), torch.Size((B, T, n)))
    an, cn, pn = (y.view(-1, k, n).numpy() for y in (alpha, c, prefix))
    con = cost.view(-1, k).numpy()
    kernel = _compiled["split_line_forward"]
    coordinates = form == SplitForm.COORDINATES
    delta, mode, sq_p = float(delta), int(form), p == 2.0

    def part(s: slice) -> None:
        bits = np.empty(n, dtype=_work_index(t.dtype))  # work space of each thread
        rows = sqn[s] if coordinates else sqn
        kernel(
            rows,
            tn[s],
            xn[s],
            wn,
            wrow[s],
            delta,
            mode,
            ixn[s],
            sq_p,
            an[s],
            cn[s],
            pn[s],
            con[s],
            bits,
        )

    _run(part, tn.shape[0], tn.size)
    return cost, (c, idx, prefix, alpha)


def split_line_backward(
    saved: tuple[Tensor, Tensor, Tensor, Tensor],
    grad: Tensor,
    sq: Tensor | None,
    t: Tensor,
    w: Tensor,
    delta: float,
    form: SplitForm,
    p: float,
) -> tuple[Tensor | None, Tensor, Tensor | None]:
    """Gradients of :func:`split_line_forward`'s costs times ``grad`` (B, T, k).

    Returns the gradients of ``sq`` (``COORDINATES`` only), of ``t`` and of ``x``
    (except for ``COORDINATES``, where ``x`` is ``t`` and its gradient is in ``t``'s).
    """
    c, idx, prefix, alpha = saved
    B, T, k, n = t.shape
    g = grad.detach().expand(B, T, k).reshape(-1, k).contiguous().numpy()
    cn, ixn, pn, an, tn = (_as_rows(y, k, n) for y in (c, idx, prefix, alpha, t))
    wn = _as_rows(w)
    sqn = _as_rows(sq) if sq is not None else wn
    wrow = _row_map(torch.Size((B, 1, n)), torch.Size((B, T, n)))
    coordinates = form == SplitForm.COORDINATES
    gt = torch.empty((B, T, k, n), dtype=t.dtype)
    gsq = torch.empty((B, T, 1, n), dtype=t.dtype) if coordinates else None
    gx = torch.empty((B, T, k, n), dtype=t.dtype) if not coordinates else None
    gtn = gt.view(-1, k, n).numpy()
    gsn = gsq.view(-1, n).numpy() if gsq is not None else gtn[:1, 0]
    gxn = gx.view(-1, k, n).numpy() if gx is not None else gtn[:1]
    tiny = float(torch.finfo(t.dtype).tiny)
    kernel = _compiled["split_line_backward"]
    delta, mode, sq_p = float(delta), int(form), p == 2.0

    def part(s: slice) -> None:
        kernel(
            cn[s],
            ixn[s],
            pn[s],
            g[s],
            an[s],
            sqn[s] if coordinates else sqn,
            tn[s],
            wn,
            wrow[s],
            delta,
            tiny,
            mode,
            sq_p,
            gsn[s] if coordinates else gsn,
            gtn[s],
            gxn if coordinates else gxn[s],
        )

    _run(part, tn.shape[0], tn.size)
    return gsq, gt, gx


def ray_split_forward(
    t: Tensor,
    polar: Tensor,
    theta: Tensor,
    scale: Tensor,
    w: Tensor,
    fixed: Tensor | None,
    delta: float,
    p: float,
    idx: Tensor,
) -> tuple[Tensor, tuple[Tensor, ...]]:
    """STSW's split on S^2 and the closed form on the rays, one compiled loop per tree.

    ``t``, ``polar``, ``scale`` (B, T, n), ``theta`` (B|1, T, k), ``w`` (B, n), ``idx``
    the permutation sorting ``t``; ``fixed`` (B|1, T, k, G), optional: the last ``G``
    atoms' masses on the rays (their ``w`` 1 and ``scale`` 0). Returns the cost (B, T)
    and what :func:`ray_split_backward` reads: the permutation, the atoms' coordinates,
    polar angles, ``sin t`` and masses in sorted order (B, T, 4, n), the split in sorted
    order (B, T, k, n) and ``theta``.
    """
    B, T, n = t.shape
    k = theta.shape[-1]
    tn, pn, sn, ixn = _as_rows(t), _as_rows(polar), _as_rows(scale), _as_rows(idx)
    thn, wn = _as_rows(theta), _as_rows(w)
    trow = _row_map(torch.Size((*theta.shape[:-1], 1)), torch.Size((B, T, 1)))
    wrow = _row_map(torch.Size((B, 1, 1)), torch.Size((B, T, 1)))
    n0 = n if fixed is None else n - fixed.shape[-1]  # the atoms split by the kernel
    if fixed is None:  # not read
        fixed = t.new_zeros(1, 1, k, 1)
    fn = _as_rows(fixed, k, fixed.shape[-1])
    frow = _row_map(torch.Size((*fixed.shape[:-2], 1)), torch.Size((B, T, 1)))
    srt = torch.empty((B, T, 4, n), dtype=t.dtype)
    alpha = torch.empty((B, T, k, n), dtype=t.dtype)
    cost = torch.empty((B, T), dtype=t.dtype)
    srn, an = srt.view(-1, 4, n).numpy(), alpha.view(-1, k, n).numpy()
    con = cost.view(-1).numpy()
    kernel = _compiled["ray_split_forward"]
    delta, sq = float(delta), p == 2.0

    def part(s: slice) -> None:
        bits = np.empty(n, dtype=_work_index(t.dtype))  # work space of each thread
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

    _run(part, tn.shape[0], tn.size * k)
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
    ixn, srn, an = _as_rows(idx), _as_rows(srt, 4, n), _as_rows(alpha, k, n)
    thn = _as_rows(theta)
    trow = _row_map(torch.Size((*theta.shape[:-1], 1)), torch.Size((B, T, 1)))
    gn = g.detach().to(torch.float64).expand(B, T).reshape(-1).contiguous().numpy()
    out = [torch.empty((B, T, n), dtype=alpha.dtype) for _ in range(3)]
    gw = torch.empty((B, T, n), dtype=alpha.dtype) if want_w else None
    gtheta = torch.empty((B, T, k), dtype=alpha.dtype)
    gt, gp, gs = (x.view(-1, n).numpy() for x in out)
    gwn = gw.view(-1, n).numpy() if gw is not None else gt
    gthn = gtheta.view(-1, k).numpy()
    kernel = _compiled["ray_split_backward"]
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

    _run(part, srn.shape[0], srn.size * k)
    return out[0], out[1], out[2], gtheta, gw


def s2_angles_backward(
    A: Tensor, rho: Tensor, inv: Tensor, gt: Tensor, gpolar: Tensor, gscale: Tensor
) -> tuple[Tensor, Tensor]:
    """Backward of the angles of points on S^2 (:class:`tsw.core._angles.S2Angles`).

    ``A`` (B, T, 3, n), ``rho``, ``gt``, ``gpolar``, ``gscale`` (B, T, n), ``inv``
    (B, 1, n). Returns the gradient of ``A`` and ``gscale * rho`` (B, T, n).
    """
    B, T, _, n = A.shape
    An = _as_rows(A, 3, n)
    rn, invn = _as_rows(rho), _as_rows(inv)
    gtn, gpn, gsn = _as_rows(gt), _as_rows(gpolar), _as_rows(gscale)
    irow = _row_map(torch.Size((B, 1, 1)), torch.Size((B, T, 1)))
    gA = torch.empty((B, T, 3, n), dtype=A.dtype)
    gq = torch.empty((B, T, n), dtype=A.dtype)
    gAn, gqn = gA.view(-1, 3, n).numpy(), gq.view(-1, n).numpy()
    tiny = float(torch.finfo(A.dtype).tiny)
    kernel = _compiled["s2_angles_backward"]

    def part(s: slice) -> None:
        kernel(An[s], rn[s], invn, irow[s], gtn[s], gpn[s], gsn[s], tiny, gAn[s], gqn[s])

    _run(part, rn.shape[0], rn.size)
    return gA, gq


#: rows sorted as packed keys at a time: at most this many elements (a 32 MiB buffer of
#: 64-bit keys)
_PACK_ELEMENTS = 1 << 22


def packs(rows: Any) -> bool:
    """Whether :func:`packed_argsort` sorts these NumPy rows (see :mod:`tsw.core._sort`).

    float32 rows shorter than 2^32 (the index takes the low 32 bits of a key), with the
    kernels loaded.
    """
    return rows.dtype == np.float32 and rows.shape[-1] < 2**32 and _load(torch.float32)


def packed_argsort(rows: Any, out: Any) -> None:
    """``out`` (rows, n) int64 or int32 <- the permutation sorting each float32 row.

    The permutation of NumPy's stable argsort (ties in the order of their indices, -0.0
    tied with 0.0, NaN last): each value's order-preserving 32 bits above its index
    (``_numba_kernels.pack_keys``); NumPy sorts the 64-bit keys (its sort of integers is
    vectorised, unlike ``np.argsort`` of float32), and the indices come back from the
    low bits. At most :data:`_PACK_ELEMENTS` keys are held at once.
    """
    rows = np.ascontiguousarray(rows)
    n_rows, n = rows.shape
    per = max(1, _PACK_ELEMENTS // max(n, 1))
    keys = np.empty((min(per, n_rows), n), dtype=np.uint64)
    for r0 in range(0, n_rows, per):
        r1 = min(r0 + per, n_rows)
        k = keys[: r1 - r0]
        _compiled["pack_keys"](rows[r0:r1], k)
        k.sort(axis=-1)
        _compiled["unpack_order"](k, out[r0:r1])


#: the compiled tree functions (tsw.core._numba_trees), loaded with the float64 kernels
_TREE_NAMES = (
    "euler_tour",
    "match",
    "subtree_sums",
    "path_sums",
    "flow_match",
    "flow_sort_rows",
    "flow_costs",
    "flow_warm",
)


def trees_usable() -> bool:
    """Whether the tree kernels may run: ready with the float64 kernels, not traced."""
    return not torch.compiler.is_compiling() and _load(torch.float64) and "match" in _compiled


def tree_kernel(name: str) -> Any:
    """Return the compiled tree function ``name`` of ``_numba_trees`` (once usable)."""
    return _compiled[name]


def tree_euler_tour(parents: Any) -> tuple[Any, Any, int]:
    """Pre-order, subtree ends and status (``_numba_trees.euler_tour``) of int64 parents."""
    parents = np.ascontiguousarray(parents, dtype=np.int64)
    pre, end = np.empty_like(parents), np.empty_like(parents)
    return pre, end, int(_compiled["euler_tour"](parents, pre, end))


def tree_match(end: Any, ms: Any, mt: Any) -> tuple[Any, Any, Any, Any]:
    """Match on a tree labelled in pre-order (``_numba_trees.match``): entries, edge flows."""
    end = np.ascontiguousarray(end, dtype=np.int64)
    ms, mt = (np.ascontiguousarray(m, dtype=np.float64) for m in (ms, mt))
    rows, cols = (np.empty(2 * end.shape[0], dtype=np.int64) for _ in range(2))
    vals, flow = np.empty(2 * end.shape[0]), np.empty(end.shape[0])
    e = _compiled["match"](end, ms, mt, rows, cols, vals, flow)
    return rows[:e], cols[:e], vals[:e], flow


def tree_subtree_sums(end: Any, x: Any) -> Any:
    """Return the sums of the float64 rows ``x`` (rows, V) over every subtree, bottom up.

    The nodes are labelled in pre-order with subtree ends ``end``
    (``_numba_trees.subtree_sums``).
    """
    end = np.ascontiguousarray(end, dtype=np.int64)
    x = np.ascontiguousarray(x, dtype=np.float64)
    out = np.empty_like(x)
    _compiled["subtree_sums"](end, x, out)
    return out


def tree_path_sums(end: Any, g: Any) -> Any:
    """Return the sums of the float64 rows ``g`` (rows, V) over every path to the root.

    The transpose of :func:`tree_subtree_sums` (``_numba_trees.path_sums``).
    """
    end = np.ascontiguousarray(end, dtype=np.int64)
    g = np.ascontiguousarray(g, dtype=np.float64)
    out = np.empty_like(g)
    _compiled["path_sums"](end, g, out)
    return out
