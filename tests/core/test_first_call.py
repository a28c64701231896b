"""``tsw.core._kernels``: no call waits for the compiler; the torch operators serve meanwhile.

The first call that could use the kernels loads them from Numba's disk cache in the
calling thread; where the cache misses, a child process compiles them and the torch
operators serve until it is done. Cache misses are simulated in this process (its
kernels are loaded already) and real in fresh processes on an empty cache.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading

import pytest
import torch

import tsw
from tsw.core import _kernel_loading as loading
from tsw.core import _kernels

pytest.importorskip("numba")


@pytest.fixture
def background(monkeypatch):
    """The default mode on a cache that misses, with a child that waits for ``release``.

    The child's compilation is simulated: once released, the kernels are in the cache.
    """
    monkeypatch.setenv("TSW_NUMBA", "1")
    release = threading.Event()
    built = set()
    real = _kernels._exercise

    def child(dtype):
        release.wait(timeout=60)
        built.add(dtype)
        return True

    def exercise(dtype, cached_only=False):  # the cache holds what the child built
        return (dtype in built or not cached_only) and real(dtype, cached_only)

    monkeypatch.setattr(loading, "compile_in_child", child)
    monkeypatch.setattr(_kernels, "_exercise", exercise)
    monkeypatch.setattr(loading, "_ready", set())
    monkeypatch.setattr(loading, "_pending", {})
    monkeypatch.setattr(loading, "_built", set())
    return release


def _data():
    g = torch.Generator().manual_seed(0)
    return torch.randn(40, 5, generator=g), torch.randn(30, 5, generator=g) + 0.5


def test_calls_take_the_torch_path_until_the_kernels_are_ready(background, monkeypatch):
    X, Y = _data()
    first = tsw.db_tsw(X, Y, n_trees=6, seed=0)
    assert torch.float32 in loading._pending
    assert not _kernels.usable(X)
    with monkeypatch.context() as mp:  # the torch operators alone
        mp.setattr(_kernels, "usable", lambda *t, **k: False)
        torch_only = tsw.db_tsw(X, Y, n_trees=6, seed=0)
    assert torch.equal(first, torch_only)
    background.set()
    loading._pending[torch.float32].join(timeout=300)
    assert torch.float32 in loading._built
    assert _kernels.usable(X)  # the first call after the child loads them
    compiled = tsw.db_tsw(X, Y, n_trees=6, seed=0)
    torch.testing.assert_close(compiled, first, rtol=1e-5, atol=1e-6)


def test_one_compilation_per_dtype(background):
    X, Y = _data()
    for _ in range(3):
        tsw.db_tsw(X, Y, n_trees=3, seed=0)
    tsw.db_tsw(X.double(), Y.double(), n_trees=3, seed=0)
    assert set(loading._pending) == {torch.float32, torch.float64}
    background.set()
    for thread in loading._pending.values():
        thread.join(timeout=300)
    assert loading._built == {torch.float32, torch.float64}
    tsw.db_tsw(X, Y, n_trees=3, seed=0)
    tsw.db_tsw(X.double(), Y.double(), n_trees=3, seed=0)
    assert loading._ready == {torch.float32, torch.float64}


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
    assert not loading.compile_in_child(torch.float64)
    monkeypatch.setattr(loading, "_ready", set())
    monkeypatch.setattr(loading, "_built", set())
    loading._build_in_background(_kernels._import, _kernels._exercise, torch.float64)
    assert torch.float64 in loading._ready
    assert torch.float64 not in loading._built


def test_a_warm_cache_serves_the_first_call(monkeypatch):
    """The kernels in the cache (here: in this process already) load in the first call
    that could use them, in the calling thread: no thread, no child."""
    monkeypatch.setenv("TSW_NUMBA", "1")
    assert _kernels.warm_up()
    monkeypatch.setattr(loading, "_ready", set())
    monkeypatch.setattr(loading, "_pending", {})
    monkeypatch.setattr(loading, "compile_in_child", lambda dtype: pytest.fail("a child"))
    X, _ = _data()
    assert _kernels.usable(X)
    assert _kernels.trees_usable()
    assert not loading._pending
    assert loading._ready == {torch.float32, torch.float64}


def test_a_call_never_waits_for_another_threads_load(background):
    """While a thread holds the load (or a compilation here), a call takes the torch
    operators at once and starts nothing."""
    X, _ = _data()
    with loading._compiling:
        assert not _kernels.usable(X)
    assert not loading._pending
    background.set()


def _fresh(code, cache=None, mode="1"):
    """Run ``code`` in a fresh process (on the Numba cache ``cache`` if given); its stdout."""
    env = {**os.environ, "TSW_NUMBA": mode}
    if cache is not None:
        env["NUMBA_CACHE_DIR"] = str(cache)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_empty_cache_is_a_miss_compiled_by_nobody_here(tmp_path):
    """On an empty cache the load stops at the first kernel it would compile: nothing is
    compiled in this process and nothing is written to the cache."""
    code = (
        "import time, torch\n"
        "from tsw.core import _kernels\n"
        "assert _kernels._import()\n"
        "t = time.perf_counter()\n"
        "hit = _kernels._exercise(torch.float64, cached_only=True)\n"
        "print(hit, time.perf_counter() - t)\n"
    )
    hit, seconds = _fresh(code, tmp_path).split()
    assert hit == "False"
    assert float(seconds) < 30  # Numba's set-up and the first miss, no compilation
    assert not list(tmp_path.rglob("*.nbi"))


def test_the_calls_use_the_specialisations_warm_up_prepares():
    """After the kernels are loaded, the library's calls add no specialisation: each
    kernel is called with the types and array layouts ``_exercise`` compiles, so that a
    call never compiles (nor loads) a kernel. (A broadcast row map and a strided
    placeholder each made Numba compile a kernel for 4-5 s in the first Db-TSW call.)"""
    code = (
        "import numpy as np, torch, tsw\n"
        "from tsw.core import _kernels\n"
        "assert _kernels.warm_up()\n"
        "def signatures():\n"
        "    return {n: set(getattr(f, 'overloads', ())) for n, f in _kernels._compiled.items()}\n"
        "before = signatures()\n"
        "g = torch.Generator().manual_seed(0)\n"
        "for dt in (torch.float32, torch.float64):\n"
        "    X = torch.randn(60, 4, generator=g, dtype=dt)\n"
        "    Y = torch.randn(50, 4, generator=g, dtype=dt) + 0.5\n"
        "    S, T = (torch.nn.functional.normalize(t, dim=-1) for t in (X, Y))\n"
        "    for p in (1.0,):  # p = 2 calls the same specialisations (a flag)\n"
        "        kw = {'seed': 0, 'p': p, 'n_trees': 3}\n"
        "        calls = [\n"
        "            lambda x: tsw.db_tsw(x.expand(2, -1, -1), Y.expand(2, -1, -1), **kw),\n"
        "            lambda x: tsw.db_tsw(x, Y, chunk_size=2, **kw),\n"
        "            lambda x: tsw.tsw_sl(x, Y, tree='chain', **kw),\n"
        "            lambda x: tsw.circular_tsw(x, Y, radius=0.5, **kw),\n"
        "            lambda x: tsw.sw(x, Y, seed=0, p=p, n_projections=5),\n"
        "        ]\n"
        "        for f in calls:\n"
        "            f(X.clone().requires_grad_()).sum().backward()\n"
        "        tsw.stsw(S.clone().requires_grad_(), T, **kw).backward()\n"
        "        tsw.stsw_unif(S.clone().requires_grad_(), **kw).backward()\n"
        "rng = np.random.default_rng(0)\n"
        "par = np.concatenate([[-1], (rng.random(99) * np.arange(1, 100)).astype(np.int64)])\n"
        "ms, mt, w = rng.random(100), rng.random(100), rng.random(100)\n"
        "tsw.tree_plan(par, w, ms, mt * ms.sum() / mt.sum())\n"
        "m = torch.tensor(ms, dtype=torch.float32, requires_grad=True)\n"
        "t = torch.tensor(mt * ms.sum() / mt.sum(), dtype=torch.float32)\n"
        "tsw.tree_wasserstein(par, torch.tensor(w, dtype=torch.float32), m, t).backward()\n"
        "after = signatures()\n"
        "print(sorted((n, str(s)) for n in after for s in after[n] - before[n]))\n"
    )
    assert _fresh(code, mode="wait").strip() == "[]"


@pytest.mark.slow
def test_a_child_compiles_into_the_disk_cache(monkeypatch, tmp_path):
    """On an empty cache the child leaves the compiled kernels there for this process."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert loading.compile_in_child(torch.float64)
    assert list(tmp_path.rglob("*.nbi"))
