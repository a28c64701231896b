r"""Free-support barycenters: gradient steps on the library's differentiable distances.

The sliced barycenter of Bonneel, Rabin, Peyré and Pfister (JMIV 2015) minimises
:math:`\sum_k w_k SW_2^2(X, Y_k)` over the support ``X``; any of the library's distances
between point clouds takes the place of :math:`SW_2` here, with fresh slices at every step.
MFSWB's fairness penalty (Nguyen, Nguyen and Ho, ICLR 2025) is an optional extra term.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tsw.core._problem import from_numpy, to_numpy
from tsw.core._progress import Progress
from tsw.core._random import Seed, resolve_sampler
from tsw.core._validation import (
    as_real,
    check_bool,
    check_nonnegative,
    check_nonnegative_float,
    check_nonnegative_int,
    check_on_sphere,
    check_points,
    check_positive_int,
    check_same_device_dtype,
    check_tensor,
    mass_rtol,
    warn,
)
from tsw.euclidean._circular_tsw import circular_tsw
from tsw.euclidean._db_tsw import db_tsw
from tsw.euclidean._max_tsw_sl import max_tsw_sl
from tsw.euclidean._spatial_tsw import spatial_tsw
from tsw.euclidean._ts_sobolev import ts_sobolev
from tsw.euclidean._tsw_sl import tsw_sl
from tsw.sliced._lcv_sw import lcv_sw
from tsw.sliced._rp_sw import rp_sw
from tsw.sliced._s3w import s3w
from tsw.sliced._ssw import ssw
from tsw.sliced._sw import max_sw, sw
from tsw.sphere._spatial_stsw import spatial_stsw
from tsw.sphere._stsw import stsw

__all__ = ["DISTANCES", "SPHERE_DISTANCES", "free_support_barycenter"]

_NAME = "free_support_barycenter"

#: the distances a free-support barycenter takes by name (points in R^d)
EUCLIDEAN_DISTANCES: dict[str, Callable[..., Any]] = {
    "sw": sw,
    "max_sw": max_sw,
    "lcv_sw": lcv_sw,
    "rp_sw": rp_sw,
    "db_tsw": db_tsw,
    "tsw_sl": tsw_sl,
    "max_tsw_sl": max_tsw_sl,
    "ts_sobolev": ts_sobolev,
    "spatial_tsw": spatial_tsw,
    "circular_tsw": circular_tsw,
}
#: the distances on the sphere: the support stays on it (Riemannian steps)
SPHERE_DISTANCES: dict[str, Callable[..., Any]] = {
    "stsw": stsw,
    "spatial_stsw": spatial_stsw,
    "ssw": ssw,
    "s3w": s3w,
}
DISTANCES = {**EUCLIDEAN_DISTANCES, **SPHERE_DISTANCES}
#: options the barycenter sets itself on every call of a named distance
_RESERVED = ("seed", "generator", "power", "log", "validate", "a", "b", "X_s", "X_t")
#: relative size of the calibration move (a translation, or a rotation on the sphere)
_CALIBRATION_MOVE = 1e-2
_CALIBRATION_DRAWS = 4
#: the fewest directions a step of the sliced distances takes by default
_MIN_DIRECTIONS = 50


def _tensor(x: object, name: str, numpy: bool, dtype: Any = None) -> Tensor:
    if isinstance(x, np.ndarray) != numpy and isinstance(x, np.ndarray | Tensor):
        kind = "a numpy array" if numpy else "a torch.Tensor"
        raise TypeError(
            f"{_NAME}: {name} must be {kind} like measures_locations (all inputs tensors, or "
            f"all numpy arrays); got {type(x).__name__}"
        )
    return check_tensor(from_numpy(x, name, dtype), name)


def _split(x: object, name: str, ndim: int) -> list[object]:
    """Return a list of arrays from a list/tuple or a stacked array with one more dimension."""
    if isinstance(x, np.ndarray | Tensor):
        if x.ndim != ndim + 1:
            form = "(K, N, d)" if ndim == 2 else "(K, N)"
            raise ValueError(
                f"{_NAME}: {name} must be a list of K arrays or one array of shape {form}; "
                f"got an array of shape {tuple(x.shape)}"
            )
        return list(x)
    if not isinstance(x, Sequence) or isinstance(x, str):
        raise TypeError(
            f"{_NAME}: {name} must be a list of arrays or a stacked array; got {type(x).__name__}"
        )
    return list(x)


def _check_simplex(w: Tensor, name: str) -> None:
    check_nonnegative(w, name)
    total = float(w.sum())
    if abs(total - 1.0) > mass_rtol(w.dtype):
        raise ValueError(
            f"{_NAME}: {name} must sum to one (a probability vector); got a total of {total:.10g}"
        )


def _check_weights(w: object, name: str, n: int, ref: Tensor, numpy: bool) -> Tensor:
    if w is None:
        return torch.full((n,), 1.0 / n, dtype=ref.dtype, device=ref.device)
    w = _tensor(w, name, numpy, ref.detach().cpu().numpy().dtype if numpy else None)
    check_same_device_dtype(ref, "measures_locations[0]", w, name)
    if tuple(w.shape) != (n,):
        raise ValueError(f"{_NAME}: {name} must have shape ({n},); got {tuple(w.shape)}")
    _check_simplex(w, name)
    return w


def _check_distance(distance: object) -> tuple[Callable[..., Any], bool, bool]:
    """Return the distance function, whether it lives on the sphere, whether it is named."""
    if callable(distance):
        return distance, False, False
    if isinstance(distance, str) and distance in DISTANCES:
        return DISTANCES[distance], distance in SPHERE_DISTANCES, True
    names = ", ".join(repr(n) for n in DISTANCES)
    raise ValueError(f"{_NAME}: distance must be one of {names}, or a callable; got {distance!r}")


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _initial(
    Ys: list[Tensor], As: list[Tensor], weights: Tensor, n: int, gen: torch.Generator
) -> Tensor:
    """``n`` distinct atoms drawn from the mixture ``sum_k w_k a_k`` (repeats only if too few)."""
    pool = torch.cat(Ys)
    prob = torch.cat([w * a for w, a in zip(weights, As, strict=True)])
    prob = prob.to(device=gen.device, dtype=torch.float64)
    replace = n > int((prob > 0).sum())
    idx = torch.multinomial(prob, n, replacement=replace, generator=gen)
    return pool[idx.to(pool.device)].clone()


def _tangent(G: Tensor, X: Tensor) -> Tensor:
    return G - (G * X).sum(-1, keepdim=True) * X


def _retract(X: Tensor) -> Tensor:
    return X / torch.linalg.vector_norm(X, dim=-1, keepdim=True)


def _precondition(grad: Tensor, b: Tensor, X: Tensor, sphere: bool) -> Tensor:
    """Return the gradient per unit mass of each atom (tangent to the sphere there)."""
    G = torch.where(b[:, None] > 0, grad / b.clamp_min(torch.finfo(b.dtype).tiny)[:, None], 0)
    return _tangent(G, X) if sphere else G


def _pooled(Ys: list[Tensor], As: list[Tensor], weights: Tensor) -> tuple[Tensor, Tensor]:
    """Return the mean (d,) and the variance () of the mixture ``sum_k w_k mu_k``."""
    parts = zip(weights, As, Ys, strict=True)
    mean = torch.stack([w * (a @ Y) for w, a, Y in parts]).sum(0)
    parts = zip(weights, As, Ys, strict=True)
    var = torch.stack([w * (a * ((Y - mean) ** 2).sum(-1)).sum() for w, a, Y in parts]).sum()
    return mean, var


def _length(X0: Tensor, b: Tensor, mean: Tensor, var: Tensor) -> Tensor:
    """Return a length of the problem: the spread of ``X0``, else of the measures.

    A start of identical atoms (one atom, or ``X_init`` of copies) has no spread; the
    measures' spread, else the distance from the start to their mean, else 1 (every
    point the same) takes its place.
    """
    centre = (b[:, None] * X0).sum(0)
    spread = ((X0 - centre) ** 2 * b[:, None]).sum().sqrt()
    gap = torch.linalg.vector_norm(centre - mean)
    fallback = torch.where(var > 0, var.sqrt(), torch.where(gap > 0, gap, torch.ones_like(gap)))
    return torch.where(spread > 0, spread, fallback)


def _calibrate(
    cost: Callable[[Tensor, Tensor], Tensor],
    X0: Tensor,
    b: Tensor,
    length: Tensor,
    sphere: bool,
    gen: torch.Generator,
) -> float:
    """Return the gain that makes a step of size 1 undo a small rigid move of a copy of ``X0``.

    ``X0`` is moved by a translation of 1% of ``length`` (its spread; see
    :func:`_length`), or a rotation by 0.01 radians on the sphere; the preconditioned
    gradient ``G`` of ``cost(X, X0)`` at the moved copy ``X`` then points back along ``X -
    X0`` with a slope ``1 / gain``: ``gain = sum b |X - X0|^2 / sum b <G, X - X0>``, both
    sums taken over a few random moves (one host sync in all).
    """
    d = X0.shape[-1]
    num = den = X0.new_zeros((), dtype=torch.float64)
    for _ in range(_CALIBRATION_DRAWS):
        u = torch.randn(d, generator=gen, dtype=torch.float64, device=gen.device).to(X0)
        u = u / torch.linalg.vector_norm(u)
        if sphere:
            v = torch.randn(d, generator=gen, dtype=torch.float64, device=gen.device).to(X0)
            v = v - (v @ u) * u
            v = v / torch.linalg.vector_norm(v)
            t = _CALIBRATION_MOVE
            # rotation by t in the plane (u, v)
            cu, cv = X0 @ u, X0 @ v
            X = X0 + ((math.cos(t) - 1) * cu - math.sin(t) * cv)[:, None] * u
            X = X + (math.sin(t) * cu + (math.cos(t) - 1) * cv)[:, None] * v
        else:
            X = X0 + _CALIBRATION_MOVE * length * u
        X = X.detach().requires_grad_(True)
        with torch.enable_grad():
            (grad,) = torch.autograd.grad(cost(X, X0), X)
        G = _precondition(grad, b, X.detach(), sphere) / 2
        move = X.detach() - X0
        num = num + (b[:, None] * move * move).sum()
        den = den + (b[:, None] * G * move).sum()
    num, den = torch.stack([num, den]).tolist()
    if not (math.isfinite(den) and den > 0):
        raise ValueError(
            f"{_NAME}: the distance's gradient does not point back along a small move of the "
            "support (no descent direction); check that the distance is differentiable in "
            "its first argument"
        )
    return num / den


def free_support_barycenter(
    measures_locations: Sequence[Tensor] | Tensor | Sequence[np.ndarray] | np.ndarray,
    measures_weights: Sequence[Tensor] | Tensor | Sequence[np.ndarray] | np.ndarray | None = None,
    X_init: Tensor | np.ndarray | None = None,
    b: Tensor | np.ndarray | None = None,
    weights: Tensor | np.ndarray | None = None,
    numItermax: int = 100,
    stopThr: float = 1e-7,
    verbose: bool = False,
    log: bool = False,
    *,
    distance: str | Callable[..., Any] = "sw",
    n_points: int | None = None,
    fairness: float = 0.0,
    lr: float = 1.0,
    seed: Seed = None,
    generator: torch.Generator | None = None,
    **options: Any,
) -> Any:
    r"""Free-support barycenter of point clouds for a sliced or tree-sliced distance.

    A drop-in for POT's ``ot.lp.free_support_barycenter`` (same positional arguments,
    same return value: the barycenter's support ``X``), with the exact :math:`W_2^2` replaced
    by one of the library's distances::

        X = tsw.free_support_barycenter([Y1, Y2, Y3], seed=0)              # SW_2
        X = tsw.free_support_barycenter(Ys, distance="db_tsw", n_trees=50)  # Db-TSW
        X, log = tsw.free_support_barycenter(Ys, fairness=1.0, log=True)    # MFSWB

    The support ``X`` (``n`` atoms of masses ``b``) minimises

    .. math::

        F(X) = \sum_k w_k\, C(X, Y_k) + \lambda \frac{2}{K(K-1)}
            \sum_{i<j} \big|C(X, Y_i) - C(X, Y_j)\big|,

    with :math:`C = D^2` the squared distance (``D^p`` is computed with ``power=True``
    and raised to ``2/p``, so :math:`C = SW_2^2` for ``"sw"``: the sliced barycenter of
    [Bonneel2015]_) and :math:`\lambda` = ``fairness``, the pairwise form of MFSWB's
    marginal-fairness penalty [Nguyen2025]_ (the spread of the squared distances to the
    marginals, in the units of the objective; 0 by default).

    **Steps.** Each iteration draws fresh slices (every distance call takes the run's
    generator) and takes a preconditioned gradient step,
    :math:`x_i \leftarrow x_i - \frac{\mathrm{lr}\; \gamma}{1 + 2\lambda}\;
    \nabla_{x_i} F / (2 b_i)`: the gradient per unit mass of atom :math:`i`, times a gain
    :math:`\gamma` calibrated once at the start (a few gradients of :math:`C` between the
    initial support and moved copies of it) so that a step of size 1 undoes a small
    translation of a copy of the support (a rotation on the sphere); :math:`1 + 2\lambda`
    bounds the curvature of :math:`F` relative to that of one :math:`C` (1 without the
    penalty). For :math:`SW_2^2` the per-unit-mass gradient is
    :math:`\frac2L \sum_l (x_i\cdot\theta_l - t_{il})\theta_l`, with :math:`t_{il}` the
    matched target on direction :math:`\theta_l`, and :math:`\gamma \approx d`: ``lr=1``
    is then Bonneel et al.'s step, which moves every atom to its matched targets averaged
    over the directions. The rule is scale-free (rescaling the data rescales the steps)
    and works for every distance, callables included. A start of identical atoms (one
    atom, or an ``X_init`` of copies) is calibrated on atoms drawn from the measures
    instead, and a small move is then 1% of the measures' spread. On the sphere
    (``"stsw"``, ``"spatial_stsw"``, ``"ssw"``, ``"s3w"``) the step is taken in the
    tangent space and the atoms are put back on the sphere (a retraction). The iterates
    of the second half of the run are averaged (Polyak-Ruppert; renormalised on the
    sphere), which removes most of the Monte-Carlo jitter of single steps. A run that
    stops early returns its last iterate: it stops when the squared size of a step,
    summed over the atoms (POT's ``displacement_square_norms``), is at most ``stopThr``
    times ``n`` times the variance of the mixture :math:`\sum_k w_k \mu_k`, so that the
    same data at any scale takes the same steps.

    Parameters
    ----------
    measures_locations : list of K Tensors of shape (N_k, d), or Tensor of shape (K, N, d)
        The supports of the measures (numpy arrays too).
    measures_weights : list of K Tensors of shape (N_k,), or Tensor of shape (K, N), optional
        Their masses, each summing to one; uniform by default.
    X_init : Tensor of shape (n, d), optional
        The initial support. By default ``n_points`` distinct atoms drawn (seeded) from the
        mixture :math:`\sum_k w_k \mu_k`.
    b : Tensor of shape (n,), optional
        The masses of the barycenter's atoms (fixed), summing to one; uniform by default.
    weights : Tensor of shape (K,), optional
        The barycentric coordinates :math:`w_k`, summing to one; uniform by default.
    numItermax : int, default 100
        The number of steps.
    stopThr : float, default 1e-7
        Stop when the mean squared move of the atoms in a step is at most this times the
        variance of the mixture of the measures (relative: scale-free).
    verbose : bool, default False
        Show a progress bar (``tqdm`` when installed, else a line every tenth of the run).
    log : bool, default False
        Also return a dict: ``"objective"`` (the estimate of :math:`F` at each iterate,
        with that step's slices), ``"costs"`` (the :math:`C(X, Y_k)` of each iterate,
        shape (n_iter, K)), ``"displacement_square_norms"`` (POT's key: the squared size
        of each step), ``"gain"`` (:math:`\gamma`) and ``"n_iter"``.
    distance : str or callable, default "sw"
        One of ``"sw"``, ``"max_sw"``, ``"lcv_sw"``, ``"rp_sw"``, ``"db_tsw"``,
        ``"tsw_sl"``, ``"max_tsw_sl"``, ``"ts_sobolev"``, ``"spatial_tsw"``,
        ``"circular_tsw"`` (in R^d), ``"stsw"``, ``"spatial_stsw"``, ``"ssw"``, ``"s3w"``
        (on the sphere: the measures must lie on it), or a callable
        ``cost(X, Y, b, a, **options)`` returning the differentiable cost :math:`C(X, Y)`
        itself (a squared distance; it receives ``generator=`` too when its signature
        takes it).
    n_points : int, optional
        The number of atoms when ``X_init`` is not given; the largest :math:`N_k` by default.
    fairness : float, default 0
        :math:`\lambda`, the weight of the fairness penalty (MFSWB).
    lr : float, default 1
        The step size, in units of the calibrated step (see above).
    seed : int, numpy RandomState or Generator, optional
        Randomness of the initial support, the calibration and every step's slices: the
        same seed gives the same barycenter (the library's seeding contract).
    generator : torch.Generator, optional
        Draw from this generator instead.
    **options
        Passed to the distance (``n_projections=``, ``n_trees=``, ``p=``, ...). For
        ``"sw"``, ``"lcv_sw"`` and ``"rp_sw"`` the default ``n_projections`` is the
        smallest multiple of ``d`` from 50 up, and ``"sw"`` draws orthonormal frames
        (``orthogonal=True``) unless ``sampling`` or ``orthogonal`` is given: a step on
        ``L`` directions moves the atoms by ``d / L`` times their displacement projected
        on the directions' span, so the steps diverge with fewer than ``d / 2``
        directions, and are exactly Bonneel's with whole frames.

    Returns
    -------
    X : Tensor of shape (n, d)
        The barycenter's support (numpy for numpy inputs), in the measures' dtype and on
        their device.
    log : dict
        Only with ``log=True``.

    Raises
    ------
    ValueError
        For K = 0 measures, clouds of different dimensions, weights that do not sum to one,
        NaN or Inf entries, points off the sphere for a spherical distance, or an unknown
        ``distance`` (the message lists the names).
    TypeError
        For mixed numpy and torch inputs, or options the barycenter sets itself.

    References
    ----------
    .. [Bonneel2015] N. Bonneel, J. Rabin, G. Peyré, H. Pfister. Sliced and Radon
       Wasserstein barycenters of measures. JMIV 51, 2015.
    .. [Nguyen2025] K. Nguyen, H. Nguyen, N. Ho. Towards marginal fairness sliced
       Wasserstein barycenter. ICLR 2025.

    Examples
    --------
    >>> import torch, tsw
    >>> g = torch.Generator().manual_seed(0)
    >>> Y = torch.randn(64, 2, generator=g, dtype=torch.float64)
    >>> X = tsw.free_support_barycenter([Y - 2, Y + 2], seed=0)
    >>> X.shape
    torch.Size([64, 2])
    >>> bool((X.mean(0) - Y.mean(0)).abs().max() < 0.05)
    True
    """
    if not isinstance(measures_locations, list | tuple | np.ndarray | Tensor):
        raise TypeError(
            f"{_NAME}: measures_locations must be a list of (N_k, d) arrays or one (K, N, d) "
            f"array; got {type(measures_locations).__name__}"
        )
    raw = _split(measures_locations, "measures_locations", 2)
    if not raw:
        raise ValueError(f"{_NAME}: measures_locations must hold K >= 1 measures; got none")
    numpy = isinstance(raw[0], np.ndarray)
    Ys = [_tensor(Y, f"measures_locations[{k}]", numpy) for k, Y in enumerate(raw)]
    ref = Ys[0]
    for k, Y in enumerate(Ys):
        check_points(Y, f"measures_locations[{k}]", True)
        if Y.ndim != 2:
            raise ValueError(
                f"{_NAME}: measures_locations[{k}] must have shape (N_k, d); got {tuple(Y.shape)}"
            )
        check_same_device_dtype(ref, "measures_locations[0]", Y, f"measures_locations[{k}]")
        if Y.shape[-1] != ref.shape[-1]:
            raise ValueError(
                f"{_NAME}: every measure must have the same dimension d; got "
                f"measures_locations[0].shape={tuple(ref.shape)} and "
                f"measures_locations[{k}].shape={tuple(Y.shape)}"
            )
    K, d = len(Ys), ref.shape[-1]
    if measures_weights is None:
        As = [_check_weights(None, "", Y.shape[0], ref, numpy) for Y in Ys]
    else:
        wraw = _split(measures_weights, "measures_weights", 1)
        if len(wraw) != K:
            raise ValueError(
                f"{_NAME}: measures_weights must hold one weight vector per measure (K={K}); "
                f"got {len(wraw)}"
            )
        As = [
            _check_weights(a, f"measures_weights[{k}]", Y.shape[0], ref, numpy)
            for k, (a, Y) in enumerate(zip(wraw, Ys, strict=True))
        ]
    weights_t = _check_weights(weights, "weights", K, ref, numpy)
    fn, sphere, named = _check_distance(distance)
    fairness = check_nonnegative_float(fairness, "fairness")
    lr_value = as_real(lr)
    if lr_value is None or not (math.isfinite(lr_value) and lr_value > 0):
        raise ValueError(f"{_NAME}: lr must be a finite real number > 0; got {lr!r}")
    numItermax = check_nonnegative_int(numItermax, "numItermax")
    stopThr = check_nonnegative_float(stopThr, "stopThr")
    verbose, log = check_bool(verbose, "verbose"), check_bool(log, "log")
    for key in _RESERVED:
        if key in options:
            raise TypeError(
                f"{_NAME}: the option {key!r} is set by the barycenter itself; pass seed= or "
                f"generator= to the barycenter, not to the distance"
            )
    gen = resolve_sampler(seed, generator, dtype=ref.dtype, device=ref.device).generator
    if sphere:
        for k, Y in enumerate(Ys):
            check_on_sphere(Y, f"measures_locations[{k}]", renormalize=False, validate=True)

    if X_init is None:
        n = (
            max(Y.shape[0] for Y in Ys)
            if n_points is None
            else check_positive_int(n_points, "n_points")
        )
        X = None
    else:
        X = _tensor(X_init, "X_init", numpy)
        check_points(X, "X_init", True)
        check_same_device_dtype(ref, "measures_locations[0]", X, "X_init")
        if X.ndim != 2 or X.shape[-1] != d:
            raise ValueError(f"{_NAME}: X_init must have shape (n, {d}); got {tuple(X.shape)}")
        n = X.shape[0]
        if n_points is not None and check_positive_int(n_points, "n_points") != n:
            raise ValueError(
                f"{_NAME}: n_points={n_points} disagrees with X_init's {n} atoms; pass one"
            )
        if sphere:
            check_on_sphere(X, "X_init", renormalize=False, validate=True)
        X = X.detach().clone()
    b_t = _check_weights(b, "b", n, ref, numpy)
    if X is None:
        X = _initial(Ys, As, weights_t, n, gen)

    p = 2.0
    if named:
        p_default = inspect.signature(fn).parameters["p"].default
        # a malformed p is left to the distance's own check, at its first call
        p = as_real(options.get("p", p_default)) or 2.0
    call_options = dict(options)
    if named:
        call_options.update(generator=gen, power=True, validate=False)
        if distance == "sw" and "sampling" not in options and "orthogonal" not in options:
            call_options["orthogonal"] = True  # Bonneel's orthonormal frames
        if distance in ("sw", "lcv_sw", "rp_sw") and "n_projections" not in options:
            # whole orthonormal frames, at least 50 directions: with L directions a step
            # moves the atoms by d / L times their projection on the directions' span,
            # which diverges once L < d / 2
            call_options["n_projections"] = d * math.ceil(_MIN_DIRECTIONS / d)
        L = call_options.get("n_projections")
        if distance in ("sw", "lcv_sw", "rp_sw") and isinstance(L, int) and d > 2 * L:
            warn(
                f"{_NAME}: n_projections={L} < d/2 = {d / 2:g}: the steps on so few "
                "directions overshoot and diverge; pass n_projections >= d"
            )
    elif _accepts(fn, "generator"):
        call_options["generator"] = gen

    def cost(Xc: Tensor, Y: Tensor, a: Tensor | None = None) -> Tensor:
        """C(X, Y), or a (K,) tensor of them for a stacked (K, N, d) ``Y``."""
        a = b_t if a is None else a
        if Y.ndim == 3:
            Xb, bb = Xc.unsqueeze(0).expand(Y.shape[0], -1, -1), b_t.expand(Y.shape[0], -1)
            value = fn(Xb, Y, bb, a, **call_options)
        else:
            value = fn(Xc, Y, b_t, a, **call_options)
        if named and p != 2.0:
            value = value.clamp_min(0) ** (2.0 / p)
        return value

    # measures of one size run as one batch
    batch = (torch.stack(Ys), torch.stack(As)) if named and len({len(Y) for Y in Ys}) == 1 else None

    def costs(Xc: Tensor) -> Tensor:
        if batch is not None:
            return cost(Xc, *batch)
        return torch.stack([cost(Xc, Y, a) for Y, a in zip(Ys, As, strict=True)])

    n_pairs = K * (K - 1) // 2
    pair_i, pair_j = torch.triu_indices(K, K, offset=1, device=ref.device)

    def objective(C: Tensor) -> Tensor:
        F = (weights_t * C).sum()
        if fairness > 0 and n_pairs:
            F = F + fairness * (C[pair_i] - C[pair_j]).abs().sum() / n_pairs
        return F

    pooled_mean, pooled_var = _pooled(Ys, As, weights_t)
    probe = X
    if n > 1 and bool((X[0] == X).all()):
        # a start of identical atoms: calibrate on atoms drawn from the measures instead
        probe = _initial(Ys, As, weights_t, n, gen)
    length = _length(probe, b_t, pooled_mean, pooled_var)
    gain = _calibrate(lambda Xc, Y: cost(Xc, Y, b_t), probe, b_t, length, sphere, gen)
    # POT's rule on the squared moves, relative to the squared size of the data: the same
    # steps at every scale
    threshold = stopThr * n * float(pooled_var)
    # the curvature of F is at most sum_k w_k + 2 fairness times that of one C
    scale = lr_value * gain / 2 / (1 + 2 * fairness)
    history: list[float] = []
    cost_history: list[Tensor] = []
    moves: list[float] = []
    tail = numItermax // 2
    mean, count, stopped = torch.zeros_like(X), 0, False
    bar = Progress(verbose, numItermax, _NAME)
    for it in range(numItermax):
        Xg = X.detach().requires_grad_(True)
        with torch.enable_grad():
            C = costs(Xg)
            F = objective(C)
            (grad,) = torch.autograd.grad(F, Xg)
        step = scale * _precondition(grad, b_t, X, sphere)
        X_new = X - step
        if sphere:
            X_new = _retract(X_new)
        # the step's size (POT's stopping rule) and the objective: one host sync per step
        move, value = torch.stack([((X_new - X) ** 2).sum(), F.detach()]).tolist()
        if not math.isfinite(move):
            raise ValueError(
                f"{_NAME}: the step at iteration {it} is not finite (objective {value:.6g}); "
                "try a smaller lr"
            )
        X = X_new
        history.append(value)
        cost_history.append(C.detach())
        moves.append(move)
        if it >= tail:
            count += 1
            mean += (X - mean) / count
        bar.update(1, objective=history[-1], step2=move)
        if move <= threshold:
            stopped = True
            break
    bar.close()
    if count and not stopped:
        X = _retract(mean) if sphere else mean
    out = to_numpy(X) if numpy else X
    if not log:
        return out
    C_hist = torch.stack(cost_history) if cost_history else X.new_zeros((0, K))
    record = {
        "objective": history,
        "costs": to_numpy(C_hist) if numpy else C_hist,
        "displacement_square_norms": moves,
        "gain": gain,
        "n_iter": len(history),
    }
    return out, record
