"""``tsw.core._kernels``: no call waits for the compiler; the torch operators serve meanwhile."""

from __future__ import annotations

import multiprocessing
import sys
import threading

import pytest
import torch

import tsw
from tsw.core import _kernels

pytest.importorskip("numba")


@pytest.fixture
def background(monkeypatch):
    """The default mode, with a compilation that waits for ``release`` to be set."""
    monkeypatch.setenv("TSW_NUMBA", "1")
    release = threading.Event()
    real = _kernels._prepare

    def slow(dtype):
        release.wait(timeout=60)
        real(dtype)

    monkeypatch.setattr(_kernels, "_prepare", slow)
    monkeypatch.setattr(_kernels, "_compile_in_child", lambda dtype: False)
    monkeypatch.setattr(_kernels, "_ready", set())
    monkeypatch.setattr(_kernels, "_pending", {})
    return release


def _data():
    g = torch.Generator().manual_seed(0)
    return torch.randn(40, 5, generator=g), torch.randn(30, 5, generator=g) + 0.5


def test_calls_take_the_torch_path_until_the_kernels_are_ready(background, monkeypatch):
    X, Y = _data()
    first = tsw.db_tsw(X, Y, n_trees=6, seed=0)
    assert torch.float32 in _kernels._pending
    assert not _kernels.usable(X)
    with monkeypatch.context() as mp:  # the torch operators alone
        mp.setattr(_kernels, "usable", lambda *t, **k: False)
        torch_only = tsw.db_tsw(X, Y, n_trees=6, seed=0)
    assert torch.equal(first, torch_only)
    background.set()
    _kernels._pending[torch.float32].join(timeout=300)
    assert _kernels.usable(X)
    compiled = tsw.db_tsw(X, Y, n_trees=6, seed=0)
    torch.testing.assert_close(compiled, first, rtol=1e-5, atol=1e-6)


def test_one_compilation_per_dtype(background):
    X, Y = _data()
    for _ in range(3):
        tsw.db_tsw(X, Y, n_trees=3, seed=0)
    tsw.db_tsw(X.double(), Y.double(), n_trees=3, seed=0)
    assert set(_kernels._pending) == {torch.float32, torch.float64}
    background.set()
    for thread in _kernels._pending.values():
        thread.join(timeout=300)
    assert _kernels._ready == {torch.float32, torch.float64}


def _child(queue):  # runs in a forked process
    X, Y = _data()
    queue.put(float(tsw.db_tsw(X, Y, n_trees=6, seed=0)))
    queue.put(_kernels.usable(X))


def test_a_fork_during_the_compilation_takes_the_torch_path(background):
    """A process forked while the parent compiles never waits for locks the compiling
    thread may hold: it takes the torch operators. (One torch thread: a fork after
    torch's OpenMP pool has run is not safe, whatever the kernels do.)"""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        X, Y = _data()
        want = float(tsw.db_tsw(X, Y, n_trees=6, seed=0))  # starts the compilation
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=_child, args=(queue,))
        child.start()
        value, usable = queue.get(timeout=120), queue.get(timeout=120)
        child.join(timeout=60)
    finally:
        torch.set_num_threads(threads)
        background.set()
    assert value == want
    assert usable is False


def test_wait_mode_compiles_before_the_first_call(monkeypatch):
    monkeypatch.setenv("TSW_NUMBA", "wait")
    X, _ = _data()
    assert _kernels.usable(X)  # (compiled by the test session already, or now)


def test_without_a_child_this_process_compiles(monkeypatch):
    """No interpreter to start: the child reports failure and the kernels compile here."""
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    assert not _kernels._compile_in_child(torch.float64)
    monkeypatch.setattr(_kernels, "_ready", set())
    _kernels._prepare_in_background(torch.float64)
    assert torch.float64 in _kernels._ready


@pytest.mark.slow
def test_a_child_compiles_into_the_disk_cache(monkeypatch, tmp_path):
    """On an empty cache the child leaves the compiled kernels there for this process."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert _kernels._compile_in_child(torch.float64)
    assert list(tmp_path.rglob("*.nbi"))
