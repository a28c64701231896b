"""One sort along the last axis for every closed form: NumPy's on the CPU, torch's elsewhere.

Sorting is most of the time of every sliced distance (60 to 80% of a Db-TSW forward +
backward at N = 2000, d = 64, float32, one thread). On the CPU, NumPy (>= 2) sorts with
vectorised kernels (x86-simd-sort): ``np.argsort`` followed by a gather measured 0.17 to
0.74x the time of ``torch.sort`` on (1000, 100) to (40, 2e5) float32 and float64 arrays
on this project's AMD EPYC machine (AVX-512). So :func:`sort_last` takes NumPy's
permutation on the CPU and torch's on other devices and under ``torch.compile``.

The choice depends only on the device, the dtype and whether a graph is being traced,
never on timing, so that a call is reproducible: both sorts give the same sorted
values; tied values may come out in another order, which changes neither the cost nor
any gradient away from ties.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import Tensor

__all__ = ["sort_last"]

#: dtypes sorted by NumPy on the CPU (NumPy has no bfloat16; half precision is rare here)
_NUMPY_DTYPES = (torch.float32, torch.float64)

#: below this many elements one thread sorts; above, rows are shared among
#: ``torch.get_num_threads()`` threads (NumPy releases the GIL while it sorts)
_PARALLEL_MIN = 1 << 18


def _numpy_argsort(x: Tensor) -> Tensor | None:
    """Return the permutation sorting ``x`` along its last axis (NumPy), or None."""
    n = x.shape[-1]
    try:
        rows = x.detach().reshape(-1, n).numpy()
    except (RuntimeError, TypeError):  # torch built without NumPy, or a tensor subclass
        return None
    threads = min(torch.get_num_threads(), rows.shape[0])
    if threads <= 1 or rows.size < _PARALLEL_MIN:
        order = np.argsort(rows, axis=-1)
    else:
        order = np.empty(rows.shape, dtype=np.int64)
        bounds = np.linspace(0, rows.shape[0], threads + 1).astype(int)

        def part(i: int) -> None:
            s = slice(bounds[i], bounds[i + 1])
            order[s] = np.argsort(rows[s], axis=-1)

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(part, range(threads)))
    return torch.from_numpy(order).view(x.shape)


def sort_last(x: Tensor) -> tuple[Tensor, Tensor]:
    """``torch.sort(x, dim=-1)``, faster on the CPU: (sorted values, permutation).

    The values are ``gather(x, -1, permutation)``, so they carry ``x``'s gradient as
    ``torch.sort``'s do. The permutation is int64, like ``torch.sort``'s.
    """
    if (
        x.device.type == "cpu"
        and x.dtype in _NUMPY_DTYPES
        and x.shape[-1] > 1
        and x.numel() > 0
        and not torch.compiler.is_compiling()
    ):
        order = _numpy_argsort(x)
        if order is not None:
            return torch.gather(x, -1, order), order
    values, order = torch.sort(x, dim=-1)
    return values, order
