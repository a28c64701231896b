"""Rows of an array shared among threads (NumPy's sorts and the compiled kernels).

NumPy releases the GIL while it sorts and assigns by index, and the compiled kernels run
without it, so blocks of rows run in parallel in Python threads. Each row is written by
one thread, so results do not depend on the number of threads.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

__all__ = ["by_rows", "threads_for"]

#: below this many elements one thread works; above, rows are shared among
#: ``torch.get_num_threads()`` threads
PARALLEL_MIN = 1 << 18


def threads_for(n_rows: int, size: int) -> int:
    """How many threads share ``n_rows`` rows of ``size`` elements in all."""
    return 1 if size < PARALLEL_MIN else max(1, min(torch.get_num_threads(), n_rows))


def by_rows(part: Callable[[slice], None], n_rows: int, threads: int | None = None) -> None:
    """Run ``part`` on all rows: in one call, or on blocks of rows in ``threads`` threads."""
    threads = 1 if threads is None else threads
    if threads <= 1:
        part(slice(0, n_rows))
        return
    bounds = np.linspace(0, n_rows, threads + 1).astype(int)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(part, [slice(bounds[i], bounds[i + 1]) for i in range(threads)]))
