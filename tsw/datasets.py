r"""Synthetic point clouds of the tree-sliced papers' experiments (as POT's ``ot.datasets``).

Every generator draws in float64 on the CPU from one ``torch.Generator`` and then casts
and moves the result, so the same ``seed`` gives the same points in float32 and float64
and on every device (the library's seeding contract). ``seed=None`` with no
``generator`` draws from operating-system entropy; the global torch RNG is never used.

* :func:`make_25gaussians`, :func:`make_swiss_roll`: the 2-D targets of the Db-TSW and
  TSW-SL gradient flows;
* :func:`make_gaussian`: :math:`\mathcal N(\mu, I_d)` with :math:`\mu \sim U([0, 1)^d)`,
  the high-dimensional Gaussians of the TSW-SL paper;
* :func:`icosahedron`, :func:`sample_vmf`, :func:`make_vmf_mixture`: von Mises-Fisher
  samples on :math:`\mathbb S^2` and the 12-component mixture of the STSW paper;
* :func:`make_torus_with_outliers`, :func:`torus_surface`, :func:`distance_to_torus`: a
  shape with uniform outliers, the partial-transport experiment of the PartialTSW paper.

The benchmarks of the repository (``benchmarks/``) draw their data from these functions.
"""

from __future__ import annotations

import math
import secrets
from typing import NamedTuple

import torch
from torch import Tensor

from tsw.core._random import check_seed
from tsw.core._validation import SUPPORTED_DTYPES, check_positive_int, check_tensor

__all__ = [
    "TorusWithOutliers",
    "distance_to_torus",
    "icosahedron",
    "make_25gaussians",
    "make_gaussian",
    "make_swiss_roll",
    "make_torus_with_outliers",
    "make_vmf_mixture",
    "sample_vmf",
    "torus_surface",
]

#: the torus of :func:`make_torus_with_outliers`: ring and tube radii, diameter 0.19
RING, TUBE = 0.07, 0.025


def _generator(seed: object, generator: object) -> torch.Generator:
    """Return the generator to draw from: fresh and seeded, the caller's, or from entropy."""
    if seed is not None and generator is not None:
        raise ValueError("pass at most one of seed and generator; got both")
    checked = check_seed(seed)
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(
                f"generator must be a torch.Generator or None; got {type(generator).__name__}"
            )
        if torch.device(generator.device).type != "cpu":
            raise ValueError(
                f"generator must be a CPU torch.Generator (the draws are made on the CPU in "
                f"float64, then moved); got a generator on {generator.device}"
            )
        return generator
    g = torch.Generator()
    g.manual_seed(secrets.randbits(63) if checked is None else checked)
    return g


def _out(x: Tensor, dtype: torch.dtype, device: torch.device | str | None) -> Tensor:
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"dtype must be torch.float32 or torch.float64; got {dtype}")
    return x.to(dtype=dtype, device=device)


def _positive_float(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a real number > 0; got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite real number > 0; got {value}")
    return float(value)


def make_25gaussians(
    n: int = 1000,
    *,
    std: float = 0.05,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""Draw points of 25 Gaussians on a grid (the Db-TSW gradient-flow target).

    The centres are the grid :math:`2\,\{-2, \dots, 2\}^2`; each receives
    :math:`\lceil n / 25 \rceil` points with isotropic noise of standard deviation
    ``std``, the points are shuffled, the first ``n`` kept, and all are divided by 2.828
    (so the centres lie in :math:`[-1.414, 1.414]^2`).

    Parameters
    ----------
    n : int, default 1000
        Number of points.
    std : float, default 0.05
        Standard deviation of each Gaussian before the division by 2.828.
    seed : int, optional
        Seed of a fresh CPU generator (the same points in every dtype and on every device).
    generator : torch.Generator, optional
        A CPU generator to draw from instead of ``seed``.
    dtype : torch.dtype, default torch.float64
        ``torch.float32`` or ``torch.float64``.
    device : torch.device or str, optional
        Device of the result (the CPU by default).

    Returns
    -------
    Tensor of shape (n, 2)

    Examples
    --------
    >>> import tsw
    >>> tsw.datasets.make_25gaussians(100, seed=0).shape
    torch.Size([100, 2])
    """
    n = check_positive_int(n, "n")
    std = _positive_float(std, "std")
    g = _generator(seed, generator)
    grid = torch.arange(-2.0, 3.0, dtype=torch.float64)
    centres = 2 * torch.cartesian_prod(grid, grid)
    Y = centres.repeat(-(-n // 25), 1)
    Y = Y + std * torch.randn(Y.shape, generator=g, dtype=torch.float64)
    Y = Y[torch.randperm(len(Y), generator=g)][:n] / 2.828
    return _out(Y, dtype, device)


def make_swiss_roll(
    n: int = 1000,
    *,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""Draw the 2-D Swiss roll of the Db-TSW gradient flows (noiseless).

    Points :math:`t\,(\cos t, \sin t)` with :math:`t = 1.5\pi\,(1 + 2u)`,
    :math:`u \sim U([0, 1))`, divided by their largest absolute coordinate, so that they
    lie in :math:`[-1, 1]^2`. This is the (x, z) projection of the 3-D Swiss roll.

    Parameters
    ----------
    n : int, default 1000
        Number of points.
    seed, generator, dtype, device
        As in :func:`make_25gaussians`.

    Returns
    -------
    Tensor of shape (n, 2)
    """
    n = check_positive_int(n, "n")
    g = _generator(seed, generator)
    t = 1.5 * math.pi * (1 + 2 * torch.rand(n, generator=g, dtype=torch.float64))
    Y = torch.stack([t * torch.cos(t), t * torch.sin(t)], dim=1)
    return _out(Y / Y.abs().max(), dtype, device)


def make_gaussian(
    n: int,
    dim: int,
    *,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""Draw samples of :math:`\mathcal N(\mu, I_d)`, with a mean :math:`\mu \sim U([0, 1)^d)`.

    The high-dimensional targets of the TSW-SL paper's Table 2. The mean is drawn first,
    then the ``n`` samples, from the same generator.

    Parameters
    ----------
    n : int
        Number of points.
    dim : int
        Dimension :math:`d`.
    seed, generator, dtype, device
        As in :func:`make_25gaussians`.

    Returns
    -------
    Tensor of shape (n, dim)
    """
    n = check_positive_int(n, "n")
    dim = check_positive_int(dim, "dim")
    g = _generator(seed, generator)
    mu = torch.rand(dim, generator=g, dtype=torch.float64)
    return _out(mu + torch.randn(n, dim, generator=g, dtype=torch.float64), dtype, device)


def icosahedron(
    *, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None
) -> Tensor:
    r"""Return the 12 vertices of a regular icosahedron, unit vectors of :math:`\mathbb R^3`.

    The cyclic permutations of :math:`(0, \pm 1, \pm\varphi)` with
    :math:`\varphi = (1 + \sqrt 5) / 2`, normalised: the centres of the vMF mixture of
    the STSW paper's gradient flow.

    Returns
    -------
    Tensor of shape (12, 3)
    """
    phi = (1 + math.sqrt(5)) / 2
    v = []
    for s1 in (-1.0, 1.0):
        for s2 in (-1.0, 1.0):
            v += [(0.0, s1, s2 * phi), (s1, s2 * phi, 0.0), (s2 * phi, 0.0, s1)]
    V = torch.tensor(v, dtype=torch.float64)
    return _out(V / V.norm(dim=1, keepdim=True), dtype, device)


def _check_mean(mean: object) -> Tensor:
    mean = check_tensor(mean, "mean")
    if tuple(mean.shape) != (3,):
        raise ValueError(
            "mean must be a unit vector of shape (3,) (a point of the sphere S^2); "
            f"got mean.shape={tuple(mean.shape)}"
        )
    m = mean.detach().to("cpu", torch.float64)
    norm = float(m.norm())
    if not abs(norm - 1) <= 1e-6:
        raise ValueError(f"mean must be a unit vector (norm 1 up to 1e-6); got norm {norm:.6g}")
    return m / norm


def _vmf(mu: Tensor, kappa: float, n: int, g: torch.Generator) -> Tensor:
    """``n`` float64 samples of vMF(mu, kappa) on S^2 from ``g`` (exact inverse CDF)."""
    u = torch.rand(n, generator=g, dtype=torch.float64)
    w = 1 + torch.log(u + (1 - u) * math.exp(-2 * kappa)) / kappa
    v = torch.randn(n, 3, generator=g, dtype=torch.float64)
    v = v - (v @ mu)[:, None] * mu
    v = v / v.norm(dim=1, keepdim=True)
    return w[:, None] * mu + torch.sqrt((1 - w * w).clamp_min(0))[:, None] * v


def sample_vmf(
    mean: Tensor,
    kappa: float,
    n: int,
    *,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""Draw samples of the von Mises-Fisher distribution on the sphere :math:`\mathbb S^2`.

    The density with respect to the area measure is
    :math:`f(x) = \frac{\kappa}{4\pi\sinh\kappa}\, e^{\kappa \langle \mu, x\rangle}`.
    The cosine :math:`w = \langle \mu, x\rangle` has the CDF
    :math:`F(w) = (e^{\kappa w} - e^{-\kappa}) / (e^{\kappa} - e^{-\kappa})` on
    :math:`[-1, 1]`, which is inverted exactly,
    :math:`w = 1 + \log(u + (1 - u) e^{-2\kappa}) / \kappa`; the tangent direction is
    uniform (a Gaussian projected on the plane orthogonal to :math:`\mu`).

    Parameters
    ----------
    mean : Tensor of shape (3,)
        The mode :math:`\mu`, a unit vector.
    kappa : float
        The concentration :math:`\kappa > 0`.
    n : int
        Number of samples.
    seed, generator
        As in :func:`make_25gaussians`.
    dtype, device : optional
        Of the result; those of ``mean`` by default.

    Returns
    -------
    Tensor of shape (n, 3)
        Unit vectors.

    Raises
    ------
    ValueError
        If ``mean`` is not a unit 3-vector (only :math:`\mathbb S^2` is implemented).
    """
    mu = _check_mean(mean)
    kappa = _positive_float(kappa, "kappa")
    n = check_positive_int(n, "n")
    X = _vmf(mu, kappa, n, _generator(seed, generator))
    return _out(X, mean.dtype if dtype is None else dtype, device or mean.device)


def make_vmf_mixture(
    n_per_component: int = 50,
    kappa: float = 50.0,
    *,
    means: Tensor | None = None,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""Draw samples of an equal-weight mixture of vMF distributions on :math:`\mathbb S^2`.

    ``n_per_component`` samples of each :func:`sample_vmf` component, in the order of
    ``means`` (by default the 12 :func:`icosahedron` vertices, the STSW paper's target),
    all drawn from one generator. :func:`tsw.metrics.vmf_mixture_nll` is the matching
    negative log-likelihood.

    Parameters
    ----------
    n_per_component : int, default 50
        Samples per component.
    kappa : float, default 50.0
        Concentration shared by the components.
    means : Tensor of shape (K, 3), optional
        Unit modes of the components; the icosahedron's vertices by default.
    seed, generator, dtype, device
        As in :func:`make_25gaussians`.

    Returns
    -------
    Tensor of shape (K * n_per_component, 3)
    """
    n = check_positive_int(n_per_component, "n_per_component")
    kappa = _positive_float(kappa, "kappa")
    if means is None:
        mus = icosahedron()
    else:
        means = check_tensor(means, "means")
        if means.ndim != 2 or means.shape[1] != 3 or means.shape[0] == 0:
            raise ValueError(
                f"means must have shape (K, 3) with K >= 1; got means.shape={tuple(means.shape)}"
            )
        mus = torch.stack([_check_mean(m) for m in means])
    g = _generator(seed, generator)
    return _out(torch.cat([_vmf(m, kappa, n, g) for m in mus]), dtype, device)


def torus_surface(
    n: int,
    *,
    ring: float = RING,
    tube: float = TUBE,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""Draw uniform samples of the surface of a torus around the z-axis.

    The parametrisation
    :math:`((R + r\cos v)\cos u, (R + r\cos v)\sin u, r\sin v)` with ring radius
    :math:`R` and tube radius :math:`r` has area element proportional to
    :math:`R + r\cos v`; uniform :math:`(u, v)` are kept with probability
    :math:`(R + r\cos v) / (R + r)` (rejection), so the points are uniform on the surface.

    Parameters
    ----------
    n : int
        Number of points.
    ring, tube : float, default 0.07 and 0.025
        :math:`R > r > 0` (the default diameter, 0.19, is that of the PartialTSW paper's
        bunny).
    seed, generator, dtype, device
        As in :func:`make_25gaussians`.

    Returns
    -------
    Tensor of shape (n, 3)
    """
    n = check_positive_int(n, "n")
    ring, tube = _positive_float(ring, "ring"), _positive_float(tube, "tube")
    if tube >= ring:
        raise ValueError(f"tube must be smaller than ring; got tube={tube} and ring={ring}")
    return _out(_torus(n, ring, tube, _generator(seed, generator)), dtype, device)


def _torus(n: int, ring: float, tube: float, g: torch.Generator) -> Tensor:
    parts, have = [], 0
    while have < n:  # the first round (8n proposals, ~75 % kept) almost always suffices
        u = torch.rand(8 * n, generator=g, dtype=torch.float64) * 2 * math.pi
        v = torch.rand(8 * n, generator=g, dtype=torch.float64) * 2 * math.pi
        keep = torch.rand(8 * n, generator=g, dtype=torch.float64) < (
            (ring + tube * torch.cos(v)) / (ring + tube)
        )
        parts.append((u[keep], v[keep]))
        have += int(keep.sum())
    u = torch.cat([p[0] for p in parts])[:n]
    v = torch.cat([p[1] for p in parts])[:n]
    r = ring + tube * torch.cos(v)
    return torch.stack([r * torch.cos(u), r * torch.sin(u), tube * torch.sin(v)], -1)


def distance_to_torus(P: Tensor, *, ring: float = RING, tube: float = TUBE) -> Tensor:
    r"""Compute the Euclidean distance of points to the torus of :func:`torus_surface`.

    :math:`\bigl|\sqrt{(\rho - R)^2 + z^2} - r\bigr|` with :math:`\rho` the distance to
    the z-axis.

    Parameters
    ----------
    P : Tensor of shape (n, 3)
        Points.
    ring, tube : float
        The torus, as in :func:`torus_surface`.

    Returns
    -------
    Tensor of shape (n,)
    """
    P = check_tensor(P, "P")
    if P.ndim != 2 or P.shape[1] != 3:
        raise ValueError(f"P must have shape (n, 3); got P.shape={tuple(P.shape)}")
    ring, tube = _positive_float(ring, "ring"), _positive_float(tube, "tube")
    rho = torch.linalg.vector_norm(P[:, :2], dim=-1)
    return ((rho - ring) ** 2 + P[:, 2] ** 2).sqrt().sub(tube).abs()


class TorusWithOutliers(NamedTuple):
    """The data of :func:`make_torus_with_outliers`."""

    source: Tensor
    """(n, 3): a sphere of radius 0.06 centred at (0, 0.03, 0), the flow's start."""
    target: Tensor
    """(n + n_outliers, 3): the torus points, then the outliers."""
    outliers: Tensor
    """(n_outliers, 3): the outliers alone (the last rows of ``target``)."""


def make_torus_with_outliers(
    n: int = 1000,
    outlier_fraction: float = 0.07,
    *,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> TorusWithOutliers:
    r"""Draw a shape with uniform outliers (the PartialTSW paper's partial-transport setting).

    The target is ``n`` uniform points of :func:`torus_surface` (diameter 0.19, the scale
    of the paper's bunny) and ``round(outlier_fraction * n)`` outliers uniform in the cube
    of half-width :math:`0.6 \times 0.19` around it. The source is ``n`` uniform points of
    a sphere of radius 0.06 centred at (0, 0.03, 0). Drawn in this order from one
    generator.

    Parameters
    ----------
    n : int, default 1000
        Points of the torus and of the source.
    outlier_fraction : float, default 0.07
        Outliers per torus point (>= 0).
    seed, generator, dtype, device
        As in :func:`make_25gaussians`.

    Returns
    -------
    TorusWithOutliers
        ``(source, target, outliers)``.
    """
    n = check_positive_int(n, "n")
    if isinstance(outlier_fraction, bool) or not isinstance(outlier_fraction, int | float):
        raise TypeError(
            f"outlier_fraction must be a real number >= 0; got {type(outlier_fraction).__name__}"
        )
    if not math.isfinite(outlier_fraction) or outlier_fraction < 0:
        raise ValueError(f"outlier_fraction must be a finite number >= 0; got {outlier_fraction}")
    g = _generator(seed, generator)
    clean = _torus(n, RING, TUBE, g)
    half = 0.6 * 2 * (RING + TUBE)
    m = round(outlier_fraction * n)
    outliers = (torch.rand(m, 3, generator=g, dtype=torch.float64) * 2 - 1) * half
    s = torch.randn(n, 3, generator=g, dtype=torch.float64)
    source = 0.06 * s / s.norm(dim=-1, keepdim=True) + torch.tensor([0.0, 0.03, 0.0]).double()
    target = torch.cat([clean, outliers])
    return TorusWithOutliers(*(_out(x, dtype, device) for x in (source, target, outliers)))
