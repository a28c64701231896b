"""Peak resident memory of a piece of work, on Linux.

``ru_maxrss`` survives ``fork`` + ``exec``, so a spawned child starts with its parent's
peak; the kernel's high-water mark ``VmHWM`` can instead be reset by writing ``5`` to
``/proc/self/clear_refs``. Both functions fall back to ``ru_maxrss`` elsewhere.
"""

from __future__ import annotations

import resource


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
