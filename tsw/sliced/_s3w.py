r"""Stereographic spherical sliced Wasserstein (S3W, RI-S3W, ARI-S3W; Tran et al., ICML 2024).

S3W compares measures on the sphere :math:`\mathbb S^d \subset \mathbb R^{d+1}` by mapping
them into the unit ball of :math:`\mathbb R^d` with a fixed map :math:`h` and taking the
sliced Wasserstein distance there (one matmul and one sort per direction, as
:func:`tsw.sw`, whose machinery computes the one-dimensional part). A point is written
:math:`s = (x, z)` with :math:`x \in \mathbb R^d` and :math:`z` the last coordinate (north
pole :math:`z = 1`).

* :func:`s3w_map`: the map :math:`h`, by default the azimuthal equidistant projection
  centred at the south pole, scaled into the unit ball (``compat=True``: the official
  code's map, see there).
* :func:`s3w`: S3W, and with random rotations of the sphere RI-S3W; with explicit
  ``rotations`` drawn from a fixed pool, ARI-S3W (the loss
  :class:`tsw.nn.ARIS3WLoss` owns such a pool).
* :func:`s3w_unif`: the same against the uniform measure on the sphere, represented by a
  sample (Monte-Carlo, as in the official code).
* :func:`sample_rotations`: Haar-random rotations of :math:`\mathbb R^{d+1}`.
"""

from __future__ import annotations

import math
from functools import partial
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from tsw.core._api import distance
from tsw.core._driver import evaluate
from tsw.core._output import Evaluation
from tsw.core._problem import Problem
from tsw.core._projection import LINE, Projection, line_coordinates
from tsw.core._random import Sampler, resolve_sampler
from tsw.core._validation import (
    Measures,
    check_bool,
    check_dtype_device,
    check_measures_on_sphere,
    check_orthogonal,
    check_positive_int,
    check_stack,
    check_tensor,
)
from tsw.sliced._sw import resolve_projections

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from tsw.core._api import SharedOptions

__all__ = ["s3w", "s3w_map", "s3w_unif", "sample_rotations"]

#: the official code's clamp margin (``epsilon_projection`` and ``hStar``)
_EPS = 1e-6
#: its bound on z: ``torch.tensor(1. - eps)`` is float32, 1 - 1e-6 rounded to 0.99999898672...
_ZMAX = float(torch.tensor(1 - _EPS, dtype=torch.float32))


def sample_rotations(
    dim: int,
    n_rotations: int,
    *,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Sample Haar-random rotations of ``R^dim`` (uniform on SO(dim)), shape (R, dim, dim).

    The draw of ``geotorch.SO(...).sample("uniform")`` in the official code, made from the
    seeding contract: the QR decomposition of a Gaussian matrix with Mezzadri's sign fix
    (Haar on O(dim)), then the first row negated where the determinant is -1.

    Parameters
    ----------
    dim : int
        Ambient dimension ``d + 1 >= 2``.
    n_rotations : int
        ``R``.
    seed, generator, dtype, device
        As for the tree samplers (``seed`` is device independent).

    Returns
    -------
    Tensor of shape (R, dim, dim)
        Orthogonal matrices of determinant +1; a point ``s`` (a row) is rotated to
        ``s @ Q.T``.

    Examples
    --------
    >>> import torch, tsw
    >>> Q = tsw.sample_rotations(3, 4, seed=0, dtype=torch.float64)
    >>> tuple(Q.shape), bool(torch.allclose(torch.linalg.det(Q), torch.ones(4, dtype=Q.dtype)))
    ((4, 3, 3), True)
    """
    check_positive_int(dim, "dim")
    check_positive_int(n_rotations, "n_rotations")
    if dim < 2:
        raise ValueError(f"rotations of the sphere need dim = d+1 >= 2; got dim={dim}")
    dtype, device = check_dtype_device(dtype, device)
    return resolve_sampler(seed, generator, dtype=dtype, device=device).rotations(
        n_rotations, dim=dim
    )


def _equidistant(S: Tensor) -> Tensor:
    """Map rows ``s = (x, z)`` of any norm by the default map (it sees ``s / |s|`` only)."""
    S = S / torch.linalg.vector_norm(S, dim=-1, keepdim=True)  # Inf -> NaN, never finite
    x, z = S[..., :-1], S[..., -1:]
    r2 = (x * x).sum(-1, keepdim=True)
    pos = r2 > 0
    r = torch.where(pos, torch.where(pos, r2, 1).sqrt(), 0)  # |x|, zero gradient at 0
    # near the south pole (|x| << |z|, z < 0) the factor atan2(|x|, -z) / (pi |x|) is
    # computed from its series 1/|z| (1 - t^2/3 + t^4/5 - ...), t = |x|/|z|, truncated
    # where t^4 / 5 < eps: exact value and gradient at the pole itself (1 / (pi |z|))
    dt = S.dtype
    near = (z < 0) & (r.detach() < torch.finfo(dt).eps ** 0.25 * z.detach().abs())
    az = torch.where(near, -z, 1)
    series = x * ((1 - r2 / (3 * az * az)) / (math.pi * az))
    # elsewhere: (angle from the south pole / pi) * (unit direction of x); at the north
    # pole (x = 0, z > 0) the direction is undefined: e_1 (h = e_1, gradient zero there)
    e1 = torch.zeros_like(x)
    e1[..., 0] = 1
    ok = pos & ~near
    unit = torch.where(ok, x / torch.where(ok, r, 1), e1)
    far = unit * (torch.atan2(torch.where(near, 0, r), torch.where(near, 1, -z)) / math.pi)
    return torch.where(near, series, far)


def _official(S: Tensor) -> Tensor:
    """Map rows as the official torch code: epsilon clamp, stereographic (factor 2), h1."""
    with torch.no_grad():  # epsilon_projection edits .data: values only (straight-through)
        x, z = S[..., :-1], S[..., -1:]
        zc = z.clamp_max(_ZMAX)
        nx = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        scale = (1 - zc * zc).clamp_min(0).sqrt() / torch.where(nx > 0, nx, 1)
        e1 = torch.zeros_like(x)
        e1[..., 0] = 1
        # x = 0: kept at the south pole (official: alpha = NaN -> 1); at the north pole the
        # official adds uniform noise from the global RNG: e_1 here, deterministic
        xc = torch.where(nx > 0, x * scale, e1 * (1 - zc * zc).clamp_min(0).sqrt())
        clamped = torch.cat([xc, zc], dim=-1)
    S = S + (clamped - S).detach()
    u = 2 * S[..., :-1] / (1 - S[..., -1:])
    u2 = (u * u).sum(-1, keepdim=True).clamp_min(1e-8)
    ratio = ((u2 - 1) / (u2 + 1)).clamp(-1, 1)
    angle = torch.arccos((-ratio).clamp(-1 + _EPS, 1 - _EPS))
    return angle / math.pi * (u / u2.sqrt())


def s3w_map(X: Tensor, *, compat: bool = False) -> Tensor:
    r"""Map points of the sphere into the unit ball: :math:`h : \mathbb S^d \to \mathbb R^d` of S3W.

    **Default** (``compat=False``): for :math:`s = (x, z)`,

    .. math::

        h(s) = \frac{\operatorname{atan2}(|x|, -z)}{\pi} \, \frac{x}{|x|}
             = \frac{\arccos(-z)}{\pi} \, \frac{x}{|x|},

    the azimuthal equidistant projection centred at the **south** pole
    :math:`-e_{d+1}`, scaled by :math:`1/\pi`: :math:`|h(s)|` is the geodesic distance
    from :math:`s` to the south pole divided by :math:`\pi`, and the directions of
    :math:`x` are kept. This is the paper's :math:`h_1 \circ \phi` with the
    stereographic projection :math:`\phi(s) = x / (1 - z)` (as in the official
    code's numpy helper): :math:`|\phi|^2 = (1 + z)/(1 - z)`, so
    :math:`-(|\phi|^2 - 1)/(|\phi|^2 + 1) = -z` and
    :math:`h_1(u) = \arccos(-(|u|^2-1)/(|u|^2+1))/\pi \cdot u/|u|` gives the formula
    above. It maps :math:`\mathbb S^d` minus the north pole bijectively and
    continuously onto the open unit ball; it is discontinuous at the north pole only,
    which is mapped to :math:`e_1 = (1, 0, \dots, 0)` (the limit direction
    :math:`x/|x|` does not exist there; :math:`e_1` is reached from no other point, so
    :math:`h` stays injective), with a zero gradient. Computed with ``atan2``, no
    ``arccos`` and no clamp; at and near the south pole from the series of
    :math:`\operatorname{atan}(t)/t`, so value and gradient are exact and finite there
    (:math:`\partial h/\partial x = I / (\pi |z|)` at :math:`x = 0`).

    **compat=True**: the map of the official torch code (``epsilon_projection``,
    ``get_stereo_proj_torch``, ``hStar`` in ``mint-vu/s3wd``): with
    :math:`\epsilon = 10^{-6}`, :math:`z' = \min(z, 1 - \epsilon)` (with
    :math:`1 - \epsilon` rounded to float32, as there),
    :math:`x' = x \sqrt{1 - z'^2}/|x|`, :math:`u = 2x'/(1 - z')` (a stereographic
    projection with a factor 2) and

    .. math::

        h(s) = \frac{1}{\pi} \arccos\Big(\mathrm{clip}\Big(-\frac{|u|^2 - 1}{|u|^2 + 1},
            -1 + \epsilon, 1 - \epsilon\Big)\Big) \frac{u}{\max(|u|, 10^{-4})}.

    With the factor 2, :math:`-(|u|^2 - 1)/(|u|^2 + 1) = -(3 + 5z)/(5 + 3z)`: the radius
    is not the geodesic distance to the south pole. The clamp of :math:`z` acts on the
    values only (the official code edits ``.data``): gradients pass through it as the
    identity, as there. The one difference: a point exactly at the north pole gets
    :math:`x' \propto e_1` (the official code adds uniform noise from the global RNG
    to it, in place in the caller's tensor).

    The default map depends on the rows only through :math:`s/|s|` (its gradient is
    tangent to the sphere); the compat map takes the rows as they are, as the official
    code does (the same values on the sphere, and the official gradients, which have a
    radial component).

    Parameters
    ----------
    X : Tensor of shape (..., d+1)
        Points of the sphere, ``d + 1 >= 2``.
    compat : bool, default False
        Use the official code's map.

    Returns
    -------
    Tensor of shape (..., d)
        Points of the closed unit ball.

    Examples
    --------
    >>> import torch, tsw
    >>> S = torch.tensor([[0.0, 0.0, -1.0], [1.0, 0.0, 0.0], [0.0, -0.6, 0.8]])
    >>> tsw.s3w_map(S)  # south pole -> 0, equator -> radius 1/2
    tensor([[ 0.0000,  0.0000],
            [ 0.5000,  0.0000],
            [ 0.0000, -0.7952]])
    """
    check_tensor(X, "X")
    if X.ndim < 1 or X.shape[-1] < 2:
        raise ValueError(
            "X must have d+1 >= 2 coordinates to describe points of the sphere S^d; got "
            f"X.shape={tuple(X.shape)}"
        )
    return _official(X) if check_bool(compat, "compat") else _equidistant(X)


def _resolve_rotations(
    rotations: Tensor | None,
    n_rotations: int,
    X: Tensor,
    batched: bool,
    sampler: Sampler,
    validate: bool,
) -> Tensor | None:
    """Explicit rotations checked against the data, sampled ones, or None (plain S3W)."""
    D = X.shape[-1]
    if rotations is None:
        return sampler.rotations(n_rotations, dim=D) if n_rotations > 0 else None
    shape = f"(R, d+1, d+1) with d+1={D}"
    rotations = check_stack(rotations, "rotations", (D, D), shape, X, batched)
    if validate:
        check_orthogonal(rotations, "rotations")
    return rotations


def _s3w(
    problem: Problem,
    *,
    n_projections: int,
    n_rotations: int,
    rotations: Tensor | None,
    projections: Tensor | None,
    compat: bool,
    sampling: str,
) -> Evaluation:
    """Evaluate a validated problem on the sphere (draws rotations, then directions)."""
    measures = problem.measures
    X_s = measures.X_s
    rot = _resolve_rotations(
        rotations, n_rotations, X_s, measures.batched, problem.rng, problem.validate
    )
    # projections live in the mapped dimension d: checked against a d-dimensional view
    view = measures._replace(X_s=X_s[..., :-1], X_t=measures.X_t[..., :-1])
    proj = resolve_projections(
        view, projections, n_projections, False, problem.rng, sampling, validate=problem.validate
    )
    project = partial(s3w_projection, compat=compat)
    return evaluate(problem, project, (rot, proj), projections=proj)


def s3w_projection(
    measures: Measures, slices: tuple[Tensor | None, Tensor], compat: bool
) -> Projection:
    """Rotate (RI-S3W), map into the ball, project: ``R * L`` lines per item (``LINE``).

    ``slices`` holds the rotations (R, d+1, d+1) or (B, R, d+1, d+1), or None (plain
    S3W, ``R = 1``), and the directions (d, L) or (B, d, L) of the mapped space.
    """
    rot, proj = slices

    def mapped(X: Tensor) -> Tensor:  # (B, n, d+1) -> (B, R, n, d)
        X = X.unsqueeze(1) if rot is None else X.unsqueeze(1) @ rot.transpose(-1, -2)
        return s3w_map(X, compat=compat)

    H_s, H_t = mapped(measures.X_s), mapped(measures.X_t)
    P = proj if proj.ndim == 2 else proj.unsqueeze(1)  # (d, L) or (B, 1, d, L)
    B, R = H_s.shape[0], H_s.shape[1]
    coords = line_coordinates(H_s, H_t, P)  # (B, R, L, n)
    coords = coords.reshape(B, R * P.shape[-1], coords.shape[-1])
    weights = torch.cat([measures.a, measures.b], dim=-1).unsqueeze(-2)  # (B, 1, n)
    return Projection(coords, weights, LINE, n_source=measures.X_s.shape[-2])


@distance(sliced=True)
def s3w(
    problem: Problem,
    /,
    *,
    n_projections: int = 50,
    p: float = 2,
    n_rotations: int = 0,
    rotations: Tensor | None = None,
    projections: Tensor | None = None,
    compat: bool = False,
    sampling: str = "iid",
    renormalize: bool = False,
    **options: Unpack[SharedOptions],
) -> Evaluation:
    r"""Stereographic spherical sliced Wasserstein distance: S3W, RI-S3W, ARI-S3W.

    References: [Tran2024s3w]_.

    With the map :math:`h` of :func:`s3w_map` and unit directions
    :math:`\theta_1, \dots, \theta_L` of :math:`\mathbb R^d`,

    .. math::

        S3W_p(\mu, \nu) = \Big(\frac1L \sum_{l=1}^L
            W_p^p(\theta_l \# h \# \mu, \theta_l \# h \# \nu)\Big)^{1/p},

    i.e. :func:`tsw.sw` between the images :math:`h\#\mu, h\#\nu` in the unit ball. With
    rotations :math:`Q_1, \dots, Q_R` of :math:`\mathbb R^{d+1}` (``n_rotations >= 1`` or
    explicit ``rotations``), the rotation-invariant variant

    .. math::

        RI\text{-}S3W_p(\mu, \nu) = \Big(\frac{1}{RL} \sum_{r=1}^R \sum_{l=1}^L
            W_p^p(\theta_l \# h \# Q_r \# \mu, \theta_l \# h \# Q_r \# \nu)\Big)^{1/p}:

    the sliced distance over the joint law of (rotation, direction), with the same
    directions for every rotation (as in the official code). Its expectation over Haar
    rotations is invariant under rotations of the data; a finite draw is not, and plain
    S3W is invariant only under the rotations that fix the poles (with the directions
    rotated along). ARI-S3W draws the ``R`` rotations from a fixed pool: pass
    ``rotations=pool[idx]`` (or use :class:`tsw.nn.ARIS3WLoss`).

    ``p`` is the order of the one-dimensional Wasserstein distances, and the value is
    their ``1/p`` root as for :func:`tsw.sw`: a pseudo-metric for a fixed draw (the
    triangle inequality included), and in expectation over the directions a metric for
    the default map, which is injective (``compat=True`` merges the points of the cap
    :math:`z > 1 - 10^{-6}` that share a direction of :math:`x`). **The official code
    returns** ``N * value ** p`` instead (sum over the ``N`` sorted points of
    ``|diff| ** p``, mean over directions and rotations, no root; uniform weights and
    ``N == M`` only), with the map of ``compat=True``: with the same draws,
    ``official == N * s3w(..., compat=True) ** p``.

    Parameters
    ----------
    X_s : Tensor of shape (N, d+1) or (B, N, d+1)
        Source support, unit vectors.
    X_t : Tensor of shape (M, d+1) or (B, M, d+1)
        Target support, unit vectors (``M != N`` allowed).
    a, b : Tensor of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative weights of equal totals; uniform by default.
    n_projections : int, default 50
        ``L``, ignored when ``projections`` is given.
    p : float, default 2
        Order of the one-dimensional Wasserstein distances.
    n_rotations : int, default 0
        ``R`` Haar-random rotations (RI-S3W); 0 for plain S3W. Ignored when
        ``rotations`` is given.
    rotations : Tensor of shape (R, d+1, d+1) or (B, R, d+1, d+1), optional
        Explicit orthogonal matrices (a point ``s`` becomes ``Q s``); reflections are
        accepted. Checked to be orthogonal when ``validate``.
    projections : Tensor of shape (d, L) or (B, d, L), optional
        Explicit unit directions of :math:`\mathbb R^d` as columns (POT's layout), see
        :func:`tsw.sample_projections`.
    compat : bool, default False
        Use the official code's map (see :func:`s3w_map`) to compare with published
        numbers.
    sampling : {"iid", "orthogonal", "qmc"}, default "iid"
        How the directions of :math:`\mathbb R^d` are spread, as in :func:`tsw.sw`
        (unbiased in every mode); the rotations stay i.i.d. Haar.
    renormalize : bool, default False
        Divide the rows by their norms instead of rejecting points off the sphere
        (with ``validate``, points off the sphere and rotations that are not orthogonal
        raise). The rotations are drawn first (as :func:`sample_rotations`), then the
        directions (as :func:`tsw.sample_projections` with ``sampling``), from one
        generator.

    Returns
    -------
    Tensor of shape () or (B,)

    Raises
    ------
    TypeError, ValueError
        For malformed inputs, points off the sphere, ``p < 1``, a negative
        ``n_rotations``, a non-bool ``compat``, malformed or non-orthogonal
        ``rotations``, malformed ``projections``.

    Notes
    -----
    Cost: ``R`` rotations of the data (one (n, d+1)x(d+1, d+1) matmul each), the map, one
    (R n, d)x(d, L) matmul and one sort of (R L, n) per measure.

    References
    ----------
    .. [Tran2024s3w] H. Tran, Y. Bai, A. Kothapalli, A. Shahbazi, X. Liu, R. Diaz Martin,
       S. Kolouri. Stereographic spherical sliced Wasserstein distances. ICML 2024
       (arXiv 2402.02345).

    Examples
    --------
    >>> import torch, tsw
    >>> g = torch.Generator().manual_seed(0)
    >>> X = torch.nn.functional.normalize(torch.randn(30, 3, generator=g), dim=-1)
    >>> float(tsw.s3w(X, X, seed=0))
    0.0
    >>> Y = torch.nn.functional.normalize(torch.randn(40, 3, generator=g) + 1, dim=-1)
    >>> bool(tsw.s3w(X, Y, n_rotations=10, seed=0) > 0)
    True
    """
    problem = problem.replace(
        measures=check_measures_on_sphere(
            problem.measures, renormalize=renormalize, validate=problem.validate
        )
    )
    return _s3w(
        problem,
        n_projections=n_projections,
        n_rotations=n_rotations,
        rotations=rotations,
        projections=projections,
        compat=compat,
        sampling=sampling,
    )


@distance(sliced=True, one_measure=True)
def s3w_unif(
    problem: Problem,
    /,
    *,
    n_samples: int = 1000,
    n_projections: int = 50,
    p: float = 2,
    n_rotations: int = 0,
    rotations: Tensor | None = None,
    projections: Tensor | None = None,
    compat: bool = False,
    sampling: str = "iid",
    renormalize: bool = False,
    **options: Unpack[SharedOptions],
) -> Evaluation:
    r"""S3W (or RI-S3W) between a measure on the sphere and a sample of the uniform measure.

    References: [Tran2024s3wu]_.

    :func:`s3w` between :math:`(X_s, a)` and ``n_samples`` i.i.d. uniform points of
    :math:`\mathbb S^d` with equal weights of total ``a.sum()``. A Monte-Carlo estimate,
    as in the official ``s3wd_unif`` (which samples ``N`` points at every call): its
    expectation exceeds the distance to the uniform measure itself by the sampling
    error of the uniform side, of order ``n_samples ** (-1/2)`` (about 0.01 for
    ``n_samples=1000`` and ``p=2`` on :math:`\mathbb S^2`). The uniform points are
    drawn first, then the rotations and directions, from one generator; within a batch
    every item sees the same uniform sample.

    Parameters
    ----------
    X_s : Tensor of shape (N, d+1) or (B, N, d+1)
        Support, unit vectors.
    a : Tensor of shape (N,) or (B, N), optional
        Non-negative weights; uniform by default.
    n_samples : int, default 1000
        Size of the uniform sample.
    n_projections, p, n_rotations, rotations, projections, compat, sampling
        As in :func:`s3w`.
    renormalize
        As in :func:`s3w`.

    Returns
    -------
    Tensor of shape () or (B,)

    Raises
    ------
    TypeError, ValueError
        As :func:`s3w`, and for ``n_samples < 1``.

    References
    ----------
    .. [Tran2024s3wu] H. Tran, Y. Bai, A. Kothapalli, A. Shahbazi, X. Liu, R. Diaz Martin,
       S. Kolouri. Stereographic spherical sliced Wasserstein distances. ICML 2024.

    Examples
    --------
    >>> import torch, tsw
    >>> g = torch.Generator().manual_seed(0)
    >>> U = torch.nn.functional.normalize(torch.randn(2000, 3, generator=g), dim=-1)
    >>> C = torch.nn.functional.normalize(torch.randn(2000, 3, generator=g) + 3, dim=-1)
    >>> bool(tsw.s3w_unif(U, seed=0) < tsw.s3w_unif(C, seed=0))
    True
    """
    measures = check_measures_on_sphere(
        problem.measures, renormalize=renormalize, validate=problem.validate
    )
    X, w = measures.X_s, measures.a
    # the uniform side: drawn first, shared by the batch, of the total mass of a
    U = problem.rng.sphere(n_samples, X.shape[-1]).expand(X.shape[0], n_samples, X.shape[-1])
    b = (w.sum(-1, keepdim=True) / n_samples).expand(X.shape[0], n_samples)
    return _s3w(
        problem.replace(measures=measures._replace(X_t=U, b=b)),
        n_projections=n_projections,
        n_rotations=n_rotations,
        rotations=rotations,
        projections=projections,
        compat=compat,
        sampling=sampling,
    )
