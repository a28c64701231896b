"""The compiled kernels' choice made once per graph: a backward takes its forward's.

Where Numba's disk cache misses, the compiled kernels (:mod:`tsw.core._kernels`) compile
in a child process and the torch operators serve until they are ready, so that within
one process calls switch from one implementation to the other; the two differ by
rounding. A backward pass that
computes its forward again (the blocks' second pass through a retained graph,
:mod:`tsw.core._blocks`; activation checkpointing; the S^2 angles' backward,
:mod:`tsw.core._angles`) must take the implementation its forward took, or a second
backward pass of one graph would not repeat the first (``torch.autograd.gradcheck``'s
reentrancy test).

The forward runs :func:`pinned` with the record of :func:`current` (a dict kept on the
autograd context), the recomputation with the same record: within it, :func:`recorded`
answers each dtype's question once, at its first asking, and then from the record. A
forward within another's (a block's S^2 angles) shares the enclosing record, since the
enclosing backward computes it again.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import torch

__all__ = ["current", "pinned", "recorded"]

#: per thread, the record of the graph being formed (None: no record, ask each time)
_current = threading.local()


def current() -> dict[torch.dtype, bool]:
    """Return the record of the enclosing :func:`pinned` block, or a fresh one."""
    record = getattr(_current, "record", None)
    return {} if record is None else record


@contextlib.contextmanager
def pinned(record: dict[torch.dtype, bool]) -> Iterator[dict[torch.dtype, bool]]:
    """Within the block, :func:`recorded` answers from ``record`` (and fills it)."""
    before = getattr(_current, "record", None)
    _current.record = record
    try:
        yield record
    finally:
        _current.record = before


def recorded(dtype: torch.dtype, ask: Callable[[torch.dtype], bool]) -> bool:
    """``ask(dtype)``, or within :func:`pinned` the record's answer (asked once)."""
    record = getattr(_current, "record", None)
    if record is None:
        return ask(dtype)
    if dtype not in record:
        record[dtype] = ask(dtype)
    return record[dtype]
