"""One sort along the last axis for every closed form: NumPy's on the CPU, torch's elsewhere.

Sorting is most of the time of every sliced distance (60 to 80% of a Db-TSW forward +
backward at N = 2000, d = 64, float32, one thread). On the CPU, NumPy (>= 2) sorts with
vectorised kernels (x86-simd-sort): ``np.argsort`` followed by a gather measured 0.17 to
0.74x the time of ``torch.sort`` on (1000, 100) to (40, 2e5) float32 and float64 arrays
on this project's AMD EPYC machine (AVX-512), and 0.24 to 0.73x on (1000, 1000) to
(16, 2e6) on an Intel Xeon (AVX-512; 0.53 and 0.73x on the longest rows, float32 and
float64). So :func:`sort_last` takes NumPy's
permutation on the CPU and torch's on other devices and under ``torch.compile``.

NumPy's sort of 64-bit integers is faster than its argsort of float32. So, with the
compiled kernels loaded (``[fast]``), float32 rows are sorted as packed keys, each
value's order-preserving 32 bits above its index
(:func:`tsw.core._kernels.packed_argsort`), which gives the permutation of NumPy's
stable argsort, int32 where the caller asks for it (``argsort_last(..., compact=True)``:
the compiled kernels read it faster). Against ``np.argsort``, one thread, on (1000,
1000) to (4, 2e6) rows: 0.18-0.56x its time on an AMD EPYC with AVX2 only, and
0.69-0.78x on an AMD EPYC with AVX-512 (Zen 4). float64 (no room for the index in 64
bits) and runs without Numba keep ``np.argsort``.

The backward passes put sorted-order gradients back in the input order, a scatter by
the permutation (:func:`unsort_last`). On long rows these are random writes over more
than the cache holds: NumPy's indexed assignment row by row measured 0.48-0.85x the time
of ``Tensor.scatter_`` on float32 rows of 1e5 to 8e6 elements (1.6e7 elements in all;
0.48x at 1e6, 0.80x at 8e6; Intel Xeon, AVX-512, one thread), and 1.2x on rows of 4e3.
So rows of at least ``_UNSORT_MIN`` = 2^17 elements (N = M of about 65536 and more) take
NumPy's, shorter ones ``scatter_``. Both write every value to the same place, so the
result does not depend on the choice.

The choice depends only on the device, the dtype, the sizes and whether a graph is being
traced, never on timing, so that a call is reproducible: both sorts give the same sorted
values; tied values may come out in another order, which changes neither the cost nor
any gradient away from ties.

Under ``torch.jit.trace`` every function here raises a RuntimeError naming the public
function called (:func:`tsw.core._random.refuse_tracing`): a trace would record the
permutation of its example inputs as a constant. ``torch.compile`` traces the sorts.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from tsw.core import _kernels
from tsw.core._random import refuse_tracing
from tsw.core._threads import by_rows, threads_for

__all__ = ["argsort_last", "sort_last", "unsort_last"]

#: dtypes sorted by NumPy on the CPU (NumPy has no bfloat16; half precision is rare here)
_NUMPY_DTYPES = (torch.float32, torch.float64)

#: rows at least this long are put back in input order by NumPy (see the module notes)
_UNSORT_MIN = 1 << 17


def _numpy_ok(x: Tensor) -> bool:
    """Whether NumPy may handle ``x``: non-empty, float32/float64, on the CPU, untraced.

    Rows of one element are left to torch (nothing to sort or to move).
    """
    return (
        x.device.type == "cpu"
        and x.dtype in _NUMPY_DTYPES
        and x.shape[-1] > 1
        and x.numel() > 0
        and not torch.compiler.is_compiling()
    )


def _numpy_argsort(x: Tensor, compact: bool = False) -> Tensor | None:
    """Return the permutation sorting ``x`` along its last axis (NumPy), or None.

    int32 when ``compact`` and the rows are sorted as packed keys (which write it
    directly), else int64.
    """
    n = x.shape[-1]
    try:
        rows = x.detach().reshape(-1, n).numpy()
    except (RuntimeError, TypeError):  # torch built without NumPy, or a tensor subclass
        return None
    threads = threads_for(rows.shape[0], rows.size)
    packed = _kernels.packs(rows)
    if threads <= 1 and not packed:  # no copy of the permutation
        return torch.from_numpy(np.argsort(rows, axis=-1)).view(x.shape)
    order = np.empty(rows.shape, dtype=np.int32 if packed and compact else np.int64)

    def part(s: slice) -> None:
        if packed:
            _kernels.packed_argsort(rows[s], order[s])
        else:
            order[s] = np.argsort(rows[s], axis=-1)

    by_rows(part, rows.shape[0], threads)
    return torch.from_numpy(order).view(x.shape)


def argsort_last(x: Tensor, compact: bool = False) -> Tensor:
    """Return the permutation of :func:`sort_last` alone, without the values.

    int64, or int32 where ``compact`` and the sort can write it directly (float32 rows
    sorted as packed keys on the CPU): for the compiled kernels, which read either and
    read the int32 one in less time (a 1000 x 1000 line cost's backward measured 0.71x
    the time with the int64 permutation, the arrays out of cache). ``torch.gather``
    and ``scatter_`` take int64 only.
    """
    refuse_tracing()
    if _numpy_ok(x):
        order = _numpy_argsort(x, compact)
        if order is not None:
            return order
    return torch.sort(x, dim=-1)[1]


def sort_last(x: Tensor) -> tuple[Tensor, Tensor]:
    """``torch.sort(x, dim=-1)``, faster on the CPU: (sorted values, permutation).

    The values are ``gather(x, -1, permutation)``, so they carry ``x``'s gradient as
    ``torch.sort``'s do. The permutation is int64, like ``torch.sort``'s.
    """
    refuse_tracing()
    if _numpy_ok(x):
        order = _numpy_argsort(x)
        if order is not None:
            return torch.gather(x, -1, order), order
    values, order = torch.sort(x, dim=-1)
    return values, order


def unsort_last(values: Tensor, order: Tensor, out: Tensor | None = None) -> Tensor:
    """Put sorted-order ``values`` back in input order (the inverse of the sort's gather).

    ``out[..., order[..., j]] = values[..., j]`` for every ``j``.

    ``order`` holds a permutation of ``range(n)`` in every row (it may be broadcast to
    ``values``' shape), as :func:`sort_last` returns; every entry of the result is
    written. ``out`` (the shape and dtype of ``values``, not overlapping it) receives the
    result when given. The same as ``torch.empty_like(values).scatter_(-1, order,
    values)``, faster on long CPU rows (see the module notes). Not differentiable: for
    the written-out backward passes.
    """
    refuse_tracing()
    if out is None:  # contiguous even for strided values, so that NumPy can write it
        out = torch.empty_like(values, memory_format=torch.contiguous_format)
    order = order.expand(values.shape)
    n = values.shape[-1]
    if n >= _UNSORT_MIN and _numpy_ok(values) and out.is_contiguous():
        try:
            src = values.detach().reshape(-1, n).numpy()
            dst = out.detach().view(-1, n).numpy()
            idx = order.reshape(-1, n).numpy()
        except (RuntimeError, TypeError):  # torch built without NumPy, or a tensor subclass
            pass
        else:

            def part(s: slice) -> None:
                for r in range(s.start, s.stop):
                    dst[r][idx[r]] = src[r]

            by_rows(part, src.shape[0], threads_for(src.shape[0], src.size))
            return out
    return out.scatter_(-1, order, values)
