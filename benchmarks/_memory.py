"""Peak resident memory of a piece of work, on Linux.

``ru_maxrss`` survives ``fork`` + ``exec``, so a spawned child starts with its parent's
peak; the kernel's high-water mark ``VmHWM`` can instead be reset by writing ``5`` to
``/proc/self/clear_refs``. Both functions fall back to ``ru_maxrss`` elsewhere.
"""

from __future__ import annotations

import multiprocessing as mp
import resource
from collections.abc import Callable


def _vm(field: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024  # kB -> MiB
    except OSError:  # pragma: no cover
        return None
    return None


def reset_peak() -> float:
    """Reset the high-water mark; return the current resident memory in MiB."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # pragma: no cover
        pass
    rss = _vm("VmRSS")
    return rss if rss is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak() -> float:
    """Peak resident memory in MiB since the last :func:`reset_peak`."""
    hwm = _vm("VmHWM")
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _measure(prepare: Callable[..., Callable[[], object]], args: tuple, queue) -> None:
    work = prepare(*args)  # set-up (data, trees) is not measured
    # nor is the one-time compilation of the compiled kernels (Numba, when installed:
    # warm_up() loads all of them, about 225 MiB resident, independent of the problem's
    # size)
    from tsw.core._kernels import warm_up

    warm_up()
    before = reset_peak()
    work()
    queue.put(peak() - before)


def peak_growth(prepare: Callable[..., Callable[[], object]], *args, timeout: float = 600) -> float:
    """Peak resident-memory growth (MiB) of ``prepare(*args)()`` in a fresh process.

    ``prepare`` (a module-level function, so that it can be pickled) runs in a spawned
    child and returns the work to measure; its own allocations are not counted.
    """
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_measure, args=(prepare, args, queue))
    proc.start()
    try:
        return queue.get(timeout=timeout)
    finally:
        proc.join()
