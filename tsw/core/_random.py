"""Random number plumbing: one place that turns ``seed`` / ``generator`` into draws.

The seeding contract of the whole library lives here:

* ``seed=int``: draws come from a fresh CPU ``torch.Generator`` seeded with ``seed``
  (in float64, then cast and moved), so the same seed gives the same trees on CPU and
  on any GPU, in float32 and float64 alike.
* ``generator=torch.Generator``: draws come from that generator, on its device; a CPU
  generator may feed tensors on any device (the draws are moved), a CUDA generator
  must live on the data's device.
* neither: a private generator on the data's device, seeded from operating-system
  entropy. The global torch RNG is never read nor advanced.
"""

from __future__ import annotations

import numbers
import secrets
import sys
from collections.abc import Callable
from functools import partial
from types import FrameType
from typing import TypeAlias

import numpy as np
import torch
from torch import Tensor

__all__ = ["Sampler", "Seed", "check_seed", "haar_rows", "refuse_tracing", "resolve_sampler"]

#: what ``seed=`` takes: an int (numpy integers too), a numpy ``RandomState`` or
#: ``Generator`` (one int is drawn from it), or None
Seed: TypeAlias = int | np.integer | np.random.RandomState | np.random.Generator | None

#: the seeds a torch.Generator accepts
SEED_RANGE = (-(2**63), 2**64)
#: the largest dimension of torch.quasirandom.SobolEngine
SOBOL_MAX_DIM = 21201


def check_seed(seed: object) -> int | None:
    """Return ``seed`` as a Python int, or None; else raise.

    numpy integers are accepted, and a numpy ``RandomState`` or ``Generator`` gives one
    int drawn from it (so that a seeded numpy stream, as POT's ``seed=`` takes, gives
    the same draws again). A ``torch.Generator`` belongs in ``generator=``.
    """
    if seed is None:
        return None
    if isinstance(seed, np.random.RandomState):
        return int(seed.randint(0, 2**63 - 1, dtype=np.int64))
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(0, 2**63 - 1))
    if isinstance(seed, torch.Generator):
        raise TypeError(
            "seed must be an int, a numpy RandomState or Generator, or None; got a "
            "torch.Generator: pass it as generator= instead"
        )
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(
            "seed must be an int, a numpy RandomState or Generator, or None; got "
            f"{type(seed).__name__}"
        )
    seed = int(seed)
    if not SEED_RANGE[0] <= seed < SEED_RANGE[1]:
        raise ValueError(f"seed must be an int in [-2**63, 2**64); got {seed}")
    return seed


def refuse_tracing(name: str | None = None) -> None:
    """Raise a RuntimeError naming ``name`` while ``torch.jit.trace`` records a graph.

    A trace records what a call did with its example inputs: a sort's permutation and
    the random draws (the library's sorts run in NumPy on the CPU, its slices come from
    generators) would become constants of the graph, and the traced function would
    return wrong values on new inputs. ``torch.compile`` traces these calls correctly.
    Called by every public distance and loss module, by the sorts
    (:mod:`tsw.core._sort`) and by every draw (:class:`Sampler`); without ``name``, the
    outermost public ``tsw`` function on the call stack is named.
    """
    if not torch.jit.is_tracing():  # pyright: ignore[reportPrivateImportUsage]  # public, unlisted
        return
    raise RuntimeError(
        f"{name or _public_caller()}: torch.jit.trace cannot record this function: its "
        "sorts and random draws would be recorded as constants, and the traced function "
        "would return wrong values on new inputs. Use torch.compile(fn) instead (it "
        "traces these calls correctly), or call the function eagerly."
    )


def _public_caller() -> str:
    """Name the outermost public ``tsw`` function on the call stack (``"tsw"`` if none)."""
    name = "tsw"
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        code = frame.f_code.co_name
        public = code.isidentifier() and not code.startswith("_")
        if public and (module == "tsw" or module.startswith("tsw.")):
            name = f"tsw.{code}"
        frame = frame.f_back
    return name


class Sampler:
    """Draw standard normal / uniform tensors from one generator, then cast and move.

    Parameters
    ----------
    generator : torch.Generator or callable
        Source of randomness, or a function that makes it on the first draw (so that a
        call with explicit slices creates no generator: ``torch.compile`` cannot trace
        the creation of one).
    dtype, device : torch.dtype, torch.device
        Dtype and device of the returned tensors.
    generator_device : torch.device, optional
        The device of the generator a callable makes (the CPU by default).
    """

    def __init__(
        self,
        generator: torch.Generator | Callable[[], torch.Generator],
        dtype: torch.dtype,
        device: torch.device,
        *,
        generator_device: torch.device | str = "cpu",
    ):
        if isinstance(generator, torch.Generator):
            self._generator: torch.Generator | None = generator
            gdev = torch.device(generator.device)
        else:
            self._generator, self._make = None, generator
            gdev = torch.device(generator_device)
        self.dtype = dtype
        self.device: torch.device = torch.device(device)
        # Draw in float64 on CPU for cross-device reproducibility; on an accelerator
        # generator draw in the target dtype for speed.
        self._draw_dtype = torch.float64 if gdev.type == "cpu" else dtype
        self._draw_device = gdev

    @property
    def generator(self) -> torch.Generator:
        """The generator, made on first use when a callable was given."""
        refuse_tracing()  # every draw reads it: a traced draw would be a constant
        if self._generator is None:
            self._generator = self._make()
        return self._generator

    def normal(self, *shape: int) -> Tensor:
        """Draw standard normal values of ``shape``."""
        z = torch.randn(
            shape, generator=self.generator, dtype=self._draw_dtype, device=self._draw_device
        )
        return z.to(device=self.device, dtype=self.dtype)

    def uniform(self, *shape: int, low: float = 0.0, high: float = 1.0) -> Tensor:
        """Draw uniform values on ``[low, high)`` of ``shape``."""
        u = torch.rand(
            shape, generator=self.generator, dtype=self._draw_dtype, device=self._draw_device
        )
        return (low + (high - low) * u).to(device=self.device, dtype=self.dtype)

    def sphere(self, *shape: int) -> Tensor:
        """Draw uniform unit vectors; ``shape[-1]`` is the ambient dimension."""
        g = torch.randn(
            shape, generator=self.generator, dtype=self._draw_dtype, device=self._draw_device
        )
        g = g / torch.linalg.vector_norm(g, dim=-1, keepdim=True)
        return g.to(device=self.device, dtype=self.dtype)

    def orthonormal(self, *batch: int, n: int, dim: int) -> Tensor:
        """``n <= dim`` orthonormal rows in R^dim per batch entry, Haar distributed.

        Uses the QR decomposition of a Gaussian (dim, n) matrix with the sign fix of
        Mezzadri (2007), so that the frame is uniform on the Stiefel manifold.
        """
        g = torch.randn(
            (*batch, dim, n),
            generator=self.generator,
            dtype=self._draw_dtype,
            device=self._draw_device,
        )
        return haar_rows(g).to(device=self.device, dtype=self.dtype)

    def qmc_normal(self, n: int, dim: int) -> Tensor:
        r"""``n`` randomised quasi-Monte Carlo standard normal points of R^dim, shape (n, dim).

        The first ``n`` points of the Sobol sequence (``torch.quasirandom.SobolEngine``),
        randomised by a random digital shift (their 30-bit integers XOR random bits, plus
        a uniform jitter below the last bit), put in a random order, and mapped through
        the inverse Gaussian CDF; every draw comes from the generator (the seeding
        contract), in float64 on the generator's device. Each point is then exactly
        :math:`N(0, I_{dim})` (up to the 2^-53 clamp of the uniforms away from 0 and 1)
        and the ``n`` points keep the Sobol net's balance. The random order is Owen's
        padding: point ``t`` of two such draws (two lines of one tree) is a random pair
        of two independently randomised sets, where the same index would be tightly
        coupled. ``SobolEngine(scramble=True)`` randomises too, but costs about 0.08 ms
        per dimension here, more than the distance itself at d = 64.
        """
        if dim > SOBOL_MAX_DIM:
            raise ValueError(
                f'sampling="qmc" draws Sobol points of dimension at most {SOBOL_MAX_DIM} (the '
                f"limit of torch.quasirandom.SobolEngine); got dimension {dim}"
            )
        gen, dev = self.generator, self._draw_device
        bits = torch.quasirandom.SobolEngine.MAXBIT
        ints = torch.quasirandom.SobolEngine(dim, scramble=False).draw(n, dtype=torch.float64)
        ints = (ints * 2.0**bits).to(torch.int64).to(dev)
        shift = torch.randint(0, 2**bits, (dim,), generator=gen, device=dev)
        jitter = torch.rand((n, dim), generator=gen, dtype=torch.float64, device=dev)
        u = ((ints ^ shift).to(torch.float64) + jitter) * 2.0**-bits
        u = u[torch.randperm(n, generator=gen, device=dev)].clamp_(2.0**-53, 1 - 2.0**-53)
        return torch.special.ndtri(u).to(device=self.device, dtype=self.dtype)

    def rotations(self, *batch: int, dim: int) -> Tensor:
        """Haar-distributed rotations of ``R^dim`` (the group SO(dim)), shape (*batch, dim, dim).

        An :meth:`orthonormal` frame of ``dim`` rows is Haar on O(dim); where its
        determinant is -1 the first row is negated. The map is a bijection of each coset
        of SO(dim) onto SO(dim) that commutes with right multiplication by SO(dim), so
        the result is Haar on SO(dim).
        """
        q = self.orthonormal(*batch, n=dim, dim=dim)
        flip = torch.linalg.det(q) < 0
        q[..., 0, :] = torch.where(flip[..., None], -q[..., 0, :], q[..., 0, :])
        return q


def haar_rows(g: Tensor) -> Tensor:
    """Rows of ``Q`` from the QR decomposition of Gaussian ``g`` (..., dim, n), sign-fixed.

    With the sign fix of Mezzadri (2007) the ``n`` rows (shape (..., n, dim)) are
    uniform on the Stiefel manifold whenever the columns of ``g`` are independent
    standard Gaussian vectors.
    """
    q, r = torch.linalg.qr(g)
    sign = torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))
    sign = torch.where(sign == 0, torch.ones_like(sign), sign)
    return (q * sign[..., None, :]).transpose(-1, -2)


def resolve_sampler(
    seed: Seed,
    generator: torch.Generator | None,
    *,
    dtype: torch.dtype,
    device: torch.device | str,
) -> Sampler:
    """Build the :class:`Sampler` that implements the seeding contract.

    Raises
    ------
    TypeError
        If ``seed`` is not an int or ``generator`` not a ``torch.Generator``.
    ValueError
        If both are given, or the generator lives on another accelerator than the data.
    """
    device = torch.device(device)
    if seed is not None and generator is not None:
        raise ValueError("pass at most one of seed and generator; got both")
    seed = check_seed(seed)
    if seed is not None:
        return Sampler(partial(_seeded, "cpu", seed), dtype, device)
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(
                f"generator must be a torch.Generator or None; got {type(generator).__name__}"
            )
        gdev = torch.device(generator.device)
        if gdev.type != "cpu" and gdev.type != device.type:
            raise ValueError(
                f"generator must be on the CPU or on the data's device ({device}); "
                f"got a generator on {gdev}"
            )
        return Sampler(generator, dtype, device)
    entropy = partial(_seeded, device, None)  # fresh entropy, drawn on first use
    return Sampler(entropy, dtype, device, generator_device=device)


def _seeded(device: torch.device | str, seed: int | None) -> torch.Generator:
    """Make a generator on ``device`` seeded with ``seed`` (operating-system entropy if None)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(secrets.randbits(63) if seed is None else seed)
    return gen
