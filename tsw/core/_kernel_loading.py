"""When the compiled kernels of :mod:`tsw.core._kernels` are prepared, and where.

No call waits for the compiler, and nothing works beside the calls in the process. The
first call that could use the kernels of a dtype loads them from Numba's disk cache in
the calling thread (:func:`load`): nothing is compiled in this process, and that call
and every later one take the compiled path. Where the cache does not hold them, a child
process compiles them into it (:func:`compile_in_child`), at the lowest scheduling
priority so that the calls keep their CPU, while the torch operators serve; the first
call after the child is done loads them. A load or compilation in a thread of this
process would hold the interpreter lock that the calls' Python needs between torch
operators; only where no child can start does a thread compile them here.
``TSW_NUMBA=wait`` (and ``torch.use_deterministic_algorithms(True)``, whose calls must
not switch implementation mid-process) compiles them in the calling thread instead;
``TSW_NUMBA=0`` turns them off.

The module holds the state (which dtypes are ready, built or under way) and takes from
:mod:`tsw.core._kernels` the two functions that touch Numba: ``import_kernels``
(imports the kernels, False without Numba) and ``exercise(dtype, cached_only)`` (calls
every kernel of a dtype once, so that Numba compiles or loads each specialisation the
library calls; with ``cached_only``, False at the first one its disk cache lacks).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from functools import partial

import torch

from tsw.core._validation import warn

__all__ = ["DTYPES", "compile_in_child", "load", "mode", "prepare", "ready"]

#: the dtypes the kernels take
DTYPES = (torch.float32, torch.float64)
#: the dtypes whose specialisations are compiled (or loaded from Numba's disk cache)
_ready: set[torch.dtype] = set()
#: the compilations under way in a child process (or, without one, here), by dtype
_pending: dict[torch.dtype, threading.Thread] = {}
#: the dtypes whose kernels a child process has compiled into the disk cache
_built: set[torch.dtype] = set()
_failed = False
#: held while a thread compiles or loads (one at a time), and while one is started
_compiling = threading.Lock()
_starting = threading.Lock()

ImportKernels = Callable[[], bool]
Exercise = Callable[[torch.dtype, bool], bool]


def ready(dtype: torch.dtype) -> bool:
    """Whether the kernels of ``dtype`` are loaded (without preparing them)."""
    return dtype in _ready


def mode() -> str:
    """``TSW_NUMBA``: ``"0"`` (off), ``"wait"`` (compile before the first call) or ``"1"``."""
    value = os.environ.get("TSW_NUMBA", "1")
    return value if value in ("0", "wait") else "1"


def prepare(dtype: torch.dtype, import_kernels: ImportKernels, exercise: Exercise) -> None:
    """Compile (or load from the disk cache) every kernel's specialisations for ``dtype``."""
    with _compiling:
        _prepare_locked(dtype, import_kernels, exercise, cached_only=False)


def _prepare_locked(
    dtype: torch.dtype, import_kernels: ImportKernels, exercise: Exercise, cached_only: bool
) -> bool:
    """:func:`prepare` with :data:`_compiling` held; ``cached_only``: load, never compile.

    Returns whether the kernels of ``dtype`` are ready. With ``cached_only`` a kernel that
    Numba's disk cache does not hold stops the load (``exercise`` returns False), and the
    kernels loaded so far stay loaded.
    """
    global _failed
    if dtype in _ready:
        return True
    if _failed:
        return False
    try:
        if not import_kernels():  # Numba is not installed
            _failed = True
            return False
    except Exception as err:  # e.g. no writable place for Numba's cache: say so, once
        _failed = True
        warn(
            f"tsw: the compiled CPU kernels could not be loaded ({type(err).__name__}: "
            f"{err}); the torch operators run instead (set TSW_NUMBA=0 to silence this)",
            RuntimeWarning,
        )
        return False
    try:
        if not exercise(dtype, cached_only):  # the cache missed: nothing compiled here
            return False
    except Exception as err:  # a kernel that does not compile here: say so, once
        _failed = True
        warn(
            f"tsw: the compiled CPU kernels could not be compiled ({type(err).__name__}: "
            f"{err}); the torch operators run instead (set TSW_NUMBA=0 to silence this)",
            RuntimeWarning,
        )
        return False
    _ready.add(dtype)
    return True


def _prepare_in_thread(
    import_kernels: ImportKernels, exercise: Exercise, dtype: torch.dtype
) -> None:
    """:func:`prepare`, arguments in the order :func:`_start`'s partial gives them."""
    prepare(dtype, import_kernels, exercise)


def _build_in_background(
    import_kernels: ImportKernels, exercise: Exercise, dtype: torch.dtype
) -> None:
    """Have a child process compile the kernels of ``dtype`` into Numba's disk cache.

    Numba holds the interpreter lock while it compiles, which slows the calling thread's
    Python between torch operators: a child interpreter compiles instead, and the next
    call that wants the kernels loads them (:func:`load`). If no child can run (no
    interpreter to start), this thread compiles them itself.
    """
    if compile_in_child(dtype):
        _built.add(dtype)
    else:
        prepare(dtype, import_kernels, exercise)


def compile_in_child(dtype: torch.dtype) -> bool:
    """Compile the kernels of ``dtype`` into the disk cache in a child; whether it ran.

    The child runs at the lowest scheduling priority (where the platform has one), so
    that the calls of this process keep their CPU.
    """
    code = (
        "import os\n"
        "if hasattr(os, 'nice'):\n"
        "    os.nice(19)\n"
        f"import torch; from tsw.core import _kernels; _kernels._prepare({dtype})"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "TSW_NUMBA": "wait"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=900,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _start(dtype: torch.dtype, target: Callable[[torch.dtype], None]) -> None:
    """Run ``target(dtype)`` in a daemon thread, recorded in :data:`_pending`."""
    thread = threading.Thread(
        target=target, args=(dtype,), name=f"tsw-kernels-{dtype}", daemon=True
    )
    _pending[dtype] = thread
    thread.start()


def load(dtype: torch.dtype, import_kernels: ImportKernels, exercise: Exercise) -> bool:
    """Whether the kernels for ``dtype`` are ready; if not, load or start compiling them.

    The first call loads them from Numba's disk cache in the calling thread; where the
    cache misses, a child process compiles them (:func:`_build_in_background`) and the
    torch operators serve until the first call after it is done, which loads them. A
    call never waits for another thread's load (it takes the torch operators). With
    ``TSW_NUMBA=wait``, and under ``torch.use_deterministic_algorithms(True)``, the
    calling thread compiles them first.
    """
    if dtype in _ready:
        return True
    setting = mode()
    if _failed or setting == "0" or dtype not in DTYPES:
        return False
    if setting == "wait" or torch.are_deterministic_algorithms_enabled():
        prepare(dtype, import_kernels, exercise)
        return dtype in _ready
    if dtype in _pending and dtype not in _built:  # a compilation under way
        return False
    if not _compiling.acquire(blocking=False):  # another thread loads or compiles
        return False
    try:
        if _prepare_locked(dtype, import_kernels, exercise, cached_only=True):
            return True
        if _failed:
            return False
        with _starting:
            if dtype in _built:  # built, yet the cache misses (not visible here): compile
                _built.discard(dtype)
                _start(dtype, partial(_prepare_in_thread, import_kernels, exercise))
            elif dtype not in _pending:
                _start(dtype, partial(_build_in_background, import_kernels, exercise))
    finally:
        _compiling.release()
    return False


def _forget_pending() -> None:
    """After a fork: a compilation under way in the parent has no thread in the child.

    Its locks may be held by that thread, so the child never compiles: the kernels
    ready in the parent stay usable, those a child process has built load from the
    cache, the others take the torch operators.
    """
    global _failed, _compiling, _starting
    _compiling, _starting = threading.Lock(), threading.Lock()
    if any(dtype not in _ready and dtype not in _built for dtype in _pending):
        _failed = True
    _pending.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pending)
