"""Side-by-side timing: interleaved rounds, medians and per-round ratios."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def interleaved(
    fns: dict[str, Callable[[], object]], rounds: int = 7, warmup: int = 1
) -> dict[str, list[float]]:
    """Time every function once per round, in the same process, interleaved.

    Interleaving makes every method see the same machine state in each round, so that
    the median of per-round ratios is robust to drifts in load; the order rotates from
    round to round, so that no method always runs after the same one.
    """
    for _ in range(warmup):
        for f in fns.values():
            f()
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        # rotate the order each round: the call after a large one pays for the memory
        # that one released (measured: up to 15% at N = 1e5, d = 128), so no method may
        # always follow the same neighbour
        for name in names[r % len(names) :] + names[: r % len(names)]:
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def ratio(times: dict[str, list[float]], num: str, den: str) -> float:
    """Median over rounds of ``time[num] / time[den]``."""
    return statistics.median(a / b for a, b in zip(times[num], times[den], strict=True))
