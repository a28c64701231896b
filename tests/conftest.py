"""Shared pytest configuration for the tsw test suite.

Layout
------
``core/``, ``euclidean/``, ``sphere/`` and ``sliced/`` hold one file per module of the
package (a method's values against its oracles, its own options); the files at the top
are the suites across the package (the distance contract, validation, driver options,
distributed runs, packaging, docs, notebooks, benchmarks). File names are unique across
the directories and there is no ``__init__.py``: pytest's default ``prepend`` import
mode puts ``tests/`` on ``sys.path`` when it imports this file, so every test imports
``_reference`` (the independent oracles) and ``_distributed_cases`` by name.

Devices
-------
``--device`` (or the ``TSW_TEST_DEVICE`` environment variable) selects the devices the
``device`` fixture is parametrised over: a comma-separated list such as ``cpu`` or
``cpu,cuda``, or ``all`` for every device available on this machine. Without either, the
default is ``cpu`` plus ``cuda`` when ``torch.cuda.is_available()``, so the same tests
cover the GPU wherever one exists while CI stays on CPU. A requested device that is not
available is *skipped*, never silently replaced by the CPU. Parameters on ``cuda`` carry
the ``gpu`` marker (registered in ``pyproject.toml``), so ``-m "not gpu"`` drops them.

Dtypes
------
``--dtype`` (or ``TSW_TEST_DTYPE``) selects the dtypes of the ``dtype`` fixture, default
``float32,float64``. :func:`tolerances` gives the per-dtype ``(rtol, atol)`` pairs and
:func:`assert_close` compares with them.

Hypothesis
----------
A ``ci`` profile (no deadline, few examples) is registered and loaded unless
``HYPOTHESIS_PROFILE`` names another registered profile.
"""

from __future__ import annotations

import os

# the compiled kernels are compiled before their first use (not in the background), so
# that every test takes the path it means to take whatever the state of Numba's cache
os.environ.setdefault("TSW_NUMBA", "wait")

import pytest
import torch
from hypothesis import HealthCheck, settings

# --------------------------------------------------------------------------- hypothesis

settings.register_profile(
    "ci",
    deadline=None,
    max_examples=10,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    deadline=None,
    max_examples=50,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# --------------------------------------------------------------------------- tolerances

#: (rtol, atol) for comparisons of values that are equal in exact arithmetic.
_TOLERANCES = {
    torch.float64: (1e-10, 1e-12),
    torch.float32: (1e-4, 1e-5),
}


def tolerances(dtype: torch.dtype, scale: float = 1.0) -> dict[str, float]:
    """Keyword arguments ``rtol``/``atol`` for ``torch.testing.assert_close`` in ``dtype``.

    ``scale`` loosens both tolerances by a constant factor (for example for quantities
    that go through an iterative optimiser).
    """
    rtol, atol = _TOLERANCES[dtype]
    return {"rtol": rtol * scale, "atol": atol * scale}


def assert_close(actual, expected, *, dtype: torch.dtype | None = None, scale: float = 1.0):
    """``torch.testing.assert_close`` with the per-dtype tolerances of :func:`tolerances`."""
    if not isinstance(actual, torch.Tensor):
        actual = torch.as_tensor(actual)
    if not isinstance(expected, torch.Tensor):
        expected = torch.as_tensor(expected, dtype=actual.dtype, device=actual.device)
    dtype = actual.dtype if dtype is None else dtype
    torch.testing.assert_close(actual, expected, **tolerances(dtype, scale))


# --------------------------------------------------------------------------- options


def pytest_sessionstart(session):
    """Fill Numba's disk cache with every compiled kernel once, before any test runs.

    Otherwise, on a fresh clone, the first test of each kind compiles what it needs and
    so does every process a test starts before then (the distributed workers, the
    benchmarks and the examples run as scripts), each on its own: the first run of the
    suite took about three times the second. With the cache filled here (20-40 s on an
    empty cache, under a second on a full one), the processes load the kernels from it.
    """
    if os.environ.get("TSW_NUMBA") == "0":
        return
    try:
        import numba  # noqa: F401
    except ImportError:
        return
    from tsw.core import _kernels

    _kernels.warm_up()


def pytest_addoption(parser):
    group = parser.getgroup("tsw")
    group.addoption(
        "--device",
        action="store",
        default=None,
        help=(
            "devices for the `device` fixture: comma-separated (cpu,cuda,mps) or 'all' "
            "(every available device); env TSW_TEST_DEVICE; default cpu (+cuda if available)"
        ),
    )
    group.addoption(
        "--dtype",
        action="store",
        default=None,
        help="dtypes for the `dtype` fixture: float32,float64 (default); env TSW_TEST_DTYPE",
    )


_KNOWN_DEVICES = ("cpu", "cuda", "mps")


def device_available(name: str) -> bool:
    """Whether a device type can run tensors on this machine."""
    kind = torch.device(name).type
    if kind == "cpu":
        return True
    if kind == "cuda":
        return torch.cuda.is_available()
    if kind == "mps":
        backend = getattr(torch.backends, "mps", None)
        return bool(backend is not None and backend.is_available())
    return False


def _requested_devices(config) -> list[str]:
    raw = config.getoption("--device") or os.environ.get("TSW_TEST_DEVICE")
    if not raw:
        return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    names = [s.strip() for s in raw.split(",") if s.strip()]
    if "all" in names:
        return [d for d in _KNOWN_DEVICES if device_available(d)]
    for name in names:
        torch.device(name)  # raises on a malformed name, before any test runs
    return list(dict.fromkeys(names))


def _requested_dtypes(config) -> list[str]:
    raw = config.getoption("--dtype") or os.environ.get("TSW_TEST_DTYPE") or "float32,float64"
    names = [s.strip() for s in raw.split(",") if s.strip()]
    for name in names:
        if name not in ("float32", "float64"):
            raise pytest.UsageError(f"--dtype accepts float32 and float64; got {name!r}")
    return list(dict.fromkeys(names))


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        params = [
            pytest.param(d, marks=pytest.mark.gpu, id=d)
            if torch.device(d).type == "cuda"
            else pytest.param(d, id=d)
            for d in _requested_devices(metafunc.config)
        ]
        metafunc.parametrize("device", params, indirect=True)
    if "dtype" in metafunc.fixturenames:
        metafunc.parametrize("dtype", _requested_dtypes(metafunc.config), indirect=True)


@pytest.fixture
def device(request) -> torch.device:
    """The device under test; skips (never falls back) when it is not available."""
    name = getattr(request, "param", "cpu")
    if not device_available(name):
        pytest.skip(f"device {name!r} is not available on this machine")
    return torch.device(name)


@pytest.fixture
def dtype(request) -> torch.dtype:
    """The floating dtype under test (float32 or float64)."""
    return getattr(torch, getattr(request, "param", "float64"))


@pytest.fixture
def rng() -> torch.Generator:
    """A seeded CPU generator for test data (independent of the library's draws)."""
    return torch.Generator().manual_seed(1234)


# --------------------------------------------------------------------------- line kernels


@pytest.fixture(params=["numba", "torch"])
def line_kernel(request, monkeypatch) -> str:
    """Run a test with each implementation of the line cost (``tsw.core._kernels``).

    ``numba``: the compiled kernels (skipped where Numba is not installed); ``torch``:
    the torch operators, which also run on every other device and under compile.
    """
    from tsw.core import _kernels

    if request.param == "numba":
        pytest.importorskip("numba")
        if not _kernels.warm_up():
            pytest.skip("the compiled line kernels are disabled (TSW_NUMBA=0)")
    else:
        monkeypatch.setattr(_kernels, "usable", lambda *tensors, **kw: False)
    return request.param
