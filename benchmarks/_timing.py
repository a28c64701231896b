"""Side-by-side timing: interleaved rounds, medians and per-round ratios."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

try:
    import resource
except ImportError:  # pragma: no cover  (not on Windows)
    resource = None  # type: ignore[assignment]

#: the glibc malloc tunables that decide whether freed memory goes back to the OS
MALLOC_VARIABLES = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_ARENA_MAX",
)


def minor_faults() -> int:
    """Minor page faults of this process so far (0 where ``resource`` is missing).

    A minor fault is the first touch of a page the process got from the OS. A call
    that re-acquires memory glibc gave back (heap trimming after large frees) pays
    for each page, a call reusing retained memory does not. On this project's machine
    writing 64 MiB of fresh pages took 31 ms against 3.5 ms into a retained buffer
    (1.7 us a fault); in db_tsw calls the time lost was 2-7 us a fault
    (``benchmarks/results/runtime.md``, "Page faults").
    """
    return 0 if resource is None else resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def malloc_setting() -> str:
    """The glibc malloc variables set in the environment, or ``"default"``."""
    given = [f"{k}={os.environ[k]}" for k in MALLOC_VARIABLES if k in os.environ]
    return " ".join(given) if given else "default"


def interleaved(
    fns: dict[str, Callable[[], object]],
    rounds: int = 7,
    warmup: int = 1,
    faults: dict[str, list[int]] | None = None,
) -> dict[str, list[float]]:
    """Time every function once per round, in the same process, interleaved.

    Interleaving makes every method see the same machine state in each round, so that
    the median of per-round ratios is robust to drifts in load; the order rotates from
    round to round, so that no method always runs after the same one. With ``faults``
    (a dict), each method's minor page faults per call are appended to
    ``faults[name]``.
    """
    for _ in range(warmup):
        for f in fns.values():
            f()
    times: dict[str, list[float]] = {name: [] for name in fns}
    if faults is not None:
        faults.update({name: [] for name in fns})
    names = list(fns)
    for r in range(rounds):
        # rotate the order each round: the call after a large one pays for the memory
        # that one released (measured: up to 15% at N = 1e5, d = 128), so no method may
        # always follow the same neighbour
        for name in names[r % len(names) :] + names[: r % len(names)]:
            f0 = minor_faults()
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
            if faults is not None:
                faults[name].append(minor_faults() - f0)
    return times


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def ratio(times: dict[str, list[float]], num: str, den: str) -> float:
    """Median over rounds of ``time[num] / time[den]``."""
    return statistics.median(a / b for a, b in zip(times[num], times[den], strict=True))
