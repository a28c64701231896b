r"""Products of constant-curvature factors: ``components``, points, tree systems and roots.

A *mixed-curvature space* is a product :math:`\mathcal M = \prod_j M_j` of Euclidean
spaces :math:`\mathbb R^d`, unit spheres :math:`\mathbb S^d \subset \mathbb R^{d+1}` and
hyperbolic spaces :math:`\mathbb H^d` (curvature -1, Lorentz model: the upper sheet of
:math:`\langle x, x\rangle_L = -1` in :math:`\mathbb R^{d+1}`), with the product metric
:math:`d_{\mathcal M}(x, y)^2 = \sum_j d_j(x_j, y_j)^2`. A point is the concatenation of
its factors' ambient coordinates (``d``, ``d + 1`` and ``d + 1`` columns), in the order of
``components``, a sequence of ``(name, d)`` pairs such as
``[("euclidean", 2), ("sphere", 2), ("hyperbolic", 2)]`` (7 columns).

This module parses ``components`` into column ranges (:class:`Factor`), checks points on
the product, holds the tree systems of :func:`tsw.mc_tsw` (:class:`MixedCurvatureTrees`:
a root on the product and rays that each move in one factor, along a geodesic of that
factor) and samples them (:func:`sample_mixed_curvature_trees`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from tsw.core._random import resolve_sampler
from tsw.core._validation import (
    Measures,
    check_dtype_device,
    check_finite,
    check_on_sphere,
    check_positive_int,
    check_tensor,
    sphere_tol,
)
from tsw.core.trees import _batch_size, _rooted_pair, _TreeCounts
from tsw.curved._hyperbolic import (
    check_lorentz,
    distance_matrix,
    exp_map,
    lorentz_centroid,
    minkowski_inner,
    transport0,
)

__all__ = [
    "KINDS",
    "Factor",
    "MixedCurvatureTrees",
    "check_components",
    "check_on_product",
    "check_trees_on_product",
    "factors_of",
    "lifted",
    "lorentz_signs",
    "product_center",
    "product_distance",
    "ray_factors",
    "sample_mixed_curvature_trees",
]

#: the factor names ``components`` accepts
KINDS = ("euclidean", "sphere", "hyperbolic")
#: the centres ``center=`` accepts by name
CENTERS = ("mean", "origin")


class Factor(NamedTuple):
    """One factor of a product: its kind, intrinsic dimension and ambient columns."""

    kind: str
    dim: int
    start: int
    stop: int

    @property
    def width(self) -> int:
        """Number of ambient columns (``dim`` in Euclidean space, ``dim + 1`` otherwise)."""
        return self.stop - self.start

    def label(self, index: int) -> str:
        """``"factor 1 (sphere S^2, columns 2:5)"``: how messages name the factor."""
        symbol = {"euclidean": "R", "sphere": "S", "hyperbolic": "H"}[self.kind]
        return f"factor {index} ({self.kind} {symbol}^{self.dim}, columns {self.start}:{self.stop})"


def check_components(value: object, name: str = "components") -> tuple[tuple[str, int], ...]:
    """Return ``value`` as a tuple of ``(kind, d)`` pairs, or raise naming ``name``.

    ``value`` is a non-empty sequence of pairs ``(kind, d)`` with ``kind`` one of
    :data:`KINDS` and ``d >= 1`` an int (the intrinsic dimension of the factor).
    """
    form = (
        f"{name} must be a non-empty sequence of (name, d) pairs, name one of "
        f"{', '.join(repr(k) for k in KINDS)} and d >= 1 an int, e.g. "
        '[("euclidean", 2), ("sphere", 2), ("hyperbolic", 2)]'
    )
    if isinstance(value, str | bytes) or not isinstance(value, Sequence) or len(value) == 0:
        raise ValueError(f"{form}; got {value!r}")
    out = []
    for i, pair in enumerate(value):
        if isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise ValueError(f"{form}; got {name}[{i}] = {pair!r}")
        kind, dim = pair
        if not isinstance(kind, str) or kind not in KINDS:
            raise ValueError(
                f"{name}[{i}] names an unknown factor {kind!r}; the factors are "
                f"{', '.join(repr(k) for k in KINDS)}"
            )
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 1:
            raise ValueError(
                f"{name}[{i}] = {pair!r}: the dimension d of a factor must be an int >= 1; "
                f"got {dim!r}"
            )
        out.append((kind, int(dim)))
    return tuple(out)


def factors_of(components: Sequence[tuple[str, int]]) -> tuple[Factor, ...]:
    """Column ranges of checked ``components`` (:func:`check_components`), in order."""
    out, start = [], 0
    for kind, dim in components:
        width = dim if kind == "euclidean" else dim + 1
        out.append(Factor(kind, dim, start, start + width))
        start += width
    return tuple(out)


def check_width(factors: tuple[Factor, ...], width: int, what: str) -> None:
    """Raise naming ``components`` if the factors' columns do not add up to ``width``."""
    total = factors[-1].stop
    if total != width:
        parts = " + ".join(f"{f.width} ({f.kind} {f.dim})" for f in factors)
        raise ValueError(
            f"components must add up to the width of {what}: the factors take {parts} = "
            f"{total} columns (d for a Euclidean factor, d + 1 for a sphere or a hyperboloid), "
            f"but {what} has {width}"
        )


def lorentz_signs(factors: tuple[Factor, ...], like: Tensor) -> Tensor:
    r"""Return the diagonal of the product's bilinear form, shape (D,): -1 at each time column.

    ``(x * signs * y).sum(-1)`` is the Euclidean inner product on Euclidean and sphere
    columns and the Lorentz one :math:`-x_0 y_0 + \sum_i x_i y_i` on hyperbolic columns.
    """
    signs = torch.ones(factors[-1].stop, dtype=like.dtype, device=like.device)
    for f in factors:
        if f.kind == "hyperbolic":
            signs[f.start] = -1.0
    return signs


# ------------------------------------------------------------------ sphere geometry


def _sphere_exp(x: Tensor, v: Tensor) -> Tensor:
    """``cos(|v|) x + sin(|v|) v / |v|`` for ``v`` tangent at ``x`` (``x`` at ``v = 0``)."""
    n = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
    pos = n > 0
    safe = torch.where(pos, n, torch.ones_like(n))
    return torch.cos(n) * x + torch.where(pos, torch.sin(safe) / safe, torch.ones_like(n)) * v


# ------------------------------------------------------------------ points on the product


def check_on_product(X: Tensor, factors: tuple[Factor, ...], name: str, validate: bool) -> None:
    """Raise naming ``name`` and the factor if a row of ``X`` is off the product (``validate``).

    Sphere columns: unit rows (:func:`~tsw.core._validation.check_on_sphere`);
    hyperbolic columns: the upper sheet of the hyperboloid; Euclidean columns: anything.
    """
    if not validate:
        return
    for i, f in enumerate(factors):
        part = X[..., f.start : f.stop]
        where = f"{name} in {f.label(i)}"
        if f.kind == "sphere":
            check_on_sphere(part, where, renormalize=False, validate=True)
        elif f.kind == "hyperbolic":
            check_lorentz(part, where)


def lifted(X: Tensor, factors: tuple[Factor, ...]) -> Tensor:
    r"""``X`` with each hyperbolic factor's :math:`x_0` recomputed as :math:`\sqrt{1 + |x_{1:}|^2}`.

    The library's convention for Lorentz points (:mod:`tsw.curved._hyperbolic`): a point
    is its spatial part, the given :math:`x_0` is checked and then not read (its gradient
    is 0). Other columns are returned as they are.
    """
    if all(f.kind != "hyperbolic" for f in factors):
        return X
    parts = []
    for f in factors:
        part = X[..., f.start : f.stop]
        if f.kind == "hyperbolic":
            z = part[..., 1:]
            part = torch.cat([torch.sqrt(1 + (z * z).sum(-1, keepdim=True)), z], dim=-1)
        parts.append(part)
    return torch.cat(parts, dim=-1)


def product_distance(X: Tensor, Y: Tensor, factors: tuple[Factor, ...]) -> Tensor:
    r"""Pairwise geodesic distances of the product, shape (..., N, M).

    :math:`\big(\sum_j d_j(x_j, y_j)^2\big)^{1/2}` with :math:`d_j` the Euclidean
    distance, the angle :math:`\mathrm{atan2}(|x - y|\,|x + y| / 2, \langle x, y\rangle)`
    on a sphere (unit rows), and on a hyperboloid
    :func:`tsw.curved._hyperbolic.distance_matrix` (accurate near and far). Exact
    differences, no matrix-product shortcut: for exact ground costs (the flows'
    :math:`W_2`); it forms (..., N, M, width) tensors on spheres.
    """
    total = X.new_zeros((*X.shape[:-2], X.shape[-2], Y.shape[-2]))
    exact = "donot_use_mm_for_euclid_dist"
    for f in factors:
        x, y = X[..., f.start : f.stop], Y[..., f.start : f.stop]
        if f.kind == "euclidean":
            d = torch.cdist(x, y, compute_mode=exact)
        elif f.kind == "sphere":
            xs, ys = x.unsqueeze(-2), y.unsqueeze(-3)
            sin = torch.cdist(x, y, compute_mode=exact) * torch.linalg.vector_norm(xs + ys, dim=-1)
            d = torch.atan2(sin / 2, (xs * ys).sum(-1))
        else:
            d = distance_matrix(x, y, "lorentz")
        total = total + d * d
    return total.sqrt()


# ------------------------------------------------------------------ tree systems


@dataclass(frozen=True, init=False)
class MixedCurvatureTrees(_TreeCounts):
    r"""``T`` mixed-curvature trees of ``k`` rays each, on a product of factors.

    Tree ``tau`` has a root ``x = roots[tau]`` on the product :math:`\mathcal M` (the
    concatenated ambient coordinates of its factors) and ``k`` rays. Ray ``i`` moves in
    one factor ``j`` only: it is the geodesic ray
    :math:`t \mapsto (x_1, \dots, \mathrm{Exp}_{x_j}(t v_i), \dots, x_m)`, :math:`t \ge 0`,
    with ``v_i = directions[tau, i]`` restricted to the columns of factor ``j`` (zero
    elsewhere): a unit tangent vector of that factor at :math:`x_j` (Euclidean norm 1 in a
    Euclidean or sphere factor, with :math:`\langle v, x_j\rangle = 0` on a sphere;
    :math:`\langle v, v\rangle_L = 1` and :math:`\langle v, x_j\rangle_L = 0` on a
    hyperboloid). The rays are glued at the root only and each is a half-line
    :math:`[0, \infty)` of the tree (a ray on a sphere factor keeps going past
    :math:`-x_j` in the tree, though its image wraps): the tree metric is the star
    metric, :math:`|t_a - t_b|` on one ray and :math:`t_a + t_b` across rays.

    The container checks shapes, dtypes and finiteness; :func:`tsw.mc_tsw` checks the
    trees against its ``components`` (roots on the product, one factor per ray, unit
    tangent directions).

    Parameters
    ----------
    roots : Tensor or ndarray of shape (T, D) or (B, T, D)
        Roots on the product.
    directions : Tensor or ndarray of shape (T, k, D) or (B, T, k, D)
        Direction of each ray, zero outside the columns of its factor.
    validate : bool, default True
        Check that the tensors are finite.

    Examples
    --------
    >>> import torch, tsw
    >>> root = torch.tensor([[0.0, 1.0, 0.0, 1.0, 0.0]])  # R^1 x S^1 x H^1
    >>> rays = torch.tensor([[[1.0, 0, 0, 0, 0], [0, 0, 1.0, 0, 0], [0, 0, 0, 0, 1.0]]])
    >>> trees = tsw.MixedCurvatureTrees(root, rays)
    >>> trees.n_trees, trees.n_lines, trees.dim
    (1, 3, 5)
    """

    roots: Tensor
    directions: Tensor

    def __init__(
        self, roots: Tensor | np.ndarray, directions: Tensor | np.ndarray, *, validate: bool = True
    ):
        roots, directions = _rooted_pair(roots, directions, validate, d="D")
        if validate:
            check_finite(directions, "directions")
        object.__setattr__(self, "roots", roots)
        object.__setattr__(self, "directions", directions)

    @property
    def batch_size(self) -> int | None:
        """Leading batch size ``B``, or ``None`` when the trees are shared."""
        return _batch_size(self.roots, self.directions)

    def to(self, *args: Any, **kwargs: Any) -> MixedCurvatureTrees:
        """Return the trees with ``Tensor.to(*args, **kwargs)`` applied."""
        return MixedCurvatureTrees(
            self.roots.to(*args, **kwargs), self.directions.to(*args, **kwargs), validate=False
        )

    def narrow(self, start: int, stop: int) -> MixedCurvatureTrees:
        """Return trees ``start`` to ``stop - 1`` (views, no copy, no validation)."""
        return MixedCurvatureTrees(
            self.roots[..., start:stop, :], self.directions[..., start:stop, :, :], validate=False
        )


def ray_factors(directions: Tensor, factors: tuple[Factor, ...]) -> Tensor:
    """Index of the factor each ray moves in, shape ``directions.shape[:-1]`` (int64).

    The factor whose columns hold the largest part of the direction (the only non-zero
    one for checked trees, :func:`check_trees_on_product`).
    """
    parts = torch.stack(
        [directions[..., f.start : f.stop].detach().abs().amax(-1) for f in factors], dim=-1
    )
    return parts.argmax(-1)


def check_trees_on_product(
    trees: MixedCurvatureTrees, factors: tuple[Factor, ...], validate: bool
) -> None:
    """Raise naming ``trees`` if they do not fit the product (with ``validate``).

    Roots on the product (:func:`check_on_product`); each direction non-zero in the
    columns of exactly one factor, where it is a unit tangent vector at the root's
    factor: tangency and unit norm to :func:`~tsw.core._validation.sphere_tol`, relative
    to the sizes of the vectors (the Lorentz form's rounding grows with them).
    """
    if trees.dim != factors[-1].stop:
        check_width(factors, trees.dim, "the trees")
    if not validate:
        return
    check_on_product(trees.roots, factors, "trees.roots", True)
    V = trees.directions.detach()
    X = trees.roots.detach().unsqueeze(-2).expand(V.shape)
    nonzero = torch.stack([V[..., f.start : f.stop].ne(0).any(-1) for f in factors], dim=-1)
    counts = nonzero.sum(-1)
    if bool((counts != 1).any()):
        n = int(counts[counts != 1].reshape(-1)[0])
        raise ValueError(
            "trees.directions: every ray moves in one factor, so its direction must be "
            f"non-zero in the columns of exactly one factor; got a ray non-zero in {n}"
        )
    tol = sphere_tol(V.dtype)
    own = ray_factors(V, factors)
    for i, f in enumerate(factors):
        mine = own == i
        if not bool(mine.any()):
            continue
        v, x = V[..., f.start : f.stop][mine], X[..., f.start : f.stop][mine]
        size = torch.linalg.vector_norm(v, dim=-1) * torch.linalg.vector_norm(x, dim=-1)
        if f.kind == "hyperbolic":
            norm2, tangent = minkowski_inner(v, v), minkowski_inner(v, x)
        else:
            norm2, tangent = v.square().sum(-1), (v * x).sum(-1)
        scale = v.square().sum(-1).clamp_min(1)
        if bool(((norm2 - 1).abs() > tol * scale).any()):
            form = "<v, v>_L" if f.kind == "hyperbolic" else "|v|^2"
            raise ValueError(
                f"trees.directions in {f.label(i)} must be unit vectors ({form} = 1 up to "
                f"{tol:.1e}); got {form} = {float(norm2[(norm2 - 1).abs().argmax()]):.6g}"
            )
        if f.kind != "euclidean" and bool((tangent.abs() > tol * size.clamp_min(1)).any()):
            form = "<v, x>_L" if f.kind == "hyperbolic" else "<v, x>"
            raise ValueError(
                f"trees.directions in {f.label(i)} must be tangent at the root ({form} = 0 "
                f"up to {tol:.1e}); got {form} = {float(tangent.abs().max()):.3g}"
            )


def _origin(factors: tuple[Factor, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """Return the origin of the product, shape (D,): 0, :math:`e_0` and ``(1, 0, ..., 0)``."""
    o = torch.zeros(factors[-1].stop, dtype=dtype, device=device)
    for f in factors:
        if f.kind != "euclidean":
            o[f.start] = 1.0
    return o


def product_center(
    center: Tensor | str | None,
    measures: Measures,
    factors: tuple[Factor, ...],
    validate: bool,
) -> Tensor:
    r"""Centre of the sampled roots, shape (D,) (unbatched measures) or (B, D).

    * ``"mean"`` (or None), detached, factor by factor: the weighted mean of both
      measures on a Euclidean factor; on a sphere the weighted mean normalised (the
      extrinsic mean; the factor's origin where it vanishes); on a hyperboloid the
      Lorentzian centroid :math:`s / \sqrt{-\langle s, s\rangle_L}` of the weighted sum
      :math:`s` (Law et al. 2019). Each is equivariant under its factor's isometries. (The
      origin for data holding NaN or Inf, which then reach the value.)
    * ``"origin"``: 0, :math:`e_0` and :math:`(1, 0, \dots, 0)` on the factors.
    * a tensor of shape (D,) or (B, D) on the product (checked with ``validate``; not
      detached).
    """
    X = measures.X_s
    D = X.shape[-1]
    if center is None or isinstance(center, str):
        if center not in (None, *CENTERS):
            raise ValueError(
                f'center must be "mean", "origin" or a tensor of shape (D,) or (B, D) on the '
                f"product; got {center!r}"
            )
        if center == "origin":
            return _origin(factors, X.dtype, X.device)
        a, b = measures.a.detach(), measures.b.detach()
        Z = torch.cat([X.detach(), measures.X_t.detach()], dim=-2)  # (B, n, D)
        w = torch.cat([a, b], dim=-1)
        w = w / w.sum(-1, keepdim=True)
        parts = []
        for f in factors:
            part = Z[..., f.start : f.stop]
            if f.kind == "hyperbolic":
                parts.append(lorentz_centroid(part, w))
                continue
            mean = (w.unsqueeze(-1) * part).sum(-2)
            if f.kind == "sphere":
                norm = torch.linalg.vector_norm(mean, dim=-1, keepdim=True)
                ok = norm > math.sqrt(torch.finfo(X.dtype).eps)
                e0 = torch.zeros_like(mean)
                e0[..., 0] = 1
                mean = torch.where(ok, mean / torch.where(ok, norm, 1), e0)
            parts.append(mean)
        c = torch.cat(parts, dim=-1)
        # non-finite data (validate=False) reach the value through the projection; their
        # centre is the origin, which draws finite trees
        c = torch.where(
            torch.isfinite(c).all(-1, keepdim=True), c, _origin(factors, c.dtype, c.device)
        )
        return c if measures.batched else c[0]
    check_tensor(center, "center")
    B = X.shape[0]
    if center.shape not in ((D,), (B, D)):
        form = f"(D,) = ({D},)" + (f" or (B, D) = ({B}, {D})" if measures.batched else "")
        raise ValueError(f"center must have shape {form}; got center.shape={tuple(center.shape)}")
    center = center.to(dtype=X.dtype, device=X.device)
    if validate:
        check_finite(center, "center")
        check_on_product(center, factors, "center", True)
    return center


def sample_mixed_curvature_trees(
    components: Sequence[tuple[str, int]],
    *,
    n_trees: int,
    n_lines: int,
    center: Tensor | None = None,
    std: float = 1.0,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> MixedCurvatureTrees:
    r"""Sample mixed-curvature trees (:class:`MixedCurvatureTrees`) on a product.

    The law of MC-TSW's simplified trees (Tran et al., ICLR 2026): the root is a wrapped
    normal around ``center``, :math:`x = \mathrm{Exp}_c(\sigma \xi)` with :math:`\xi`
    standard Gaussian in the tangent space at ``c`` (on a hyperboloid drawn at the origin
    and carried to ``c`` by parallel transport), factor by factor; each ray picks its
    factor uniformly among the ``m`` factors, then a direction uniform on the unit sphere
    of that factor's tangent space at the root. The draws are, in this order, the
    (T, D) root offsets, (T, k) uniforms for the factors and (T, k, D) Gaussians for the
    directions (in float64 on the generator's device, then cast).

    Parameters
    ----------
    components : sequence of (name, d)
        The factors (see :func:`tsw.mc_tsw`).
    n_trees, n_lines : int
        ``T`` and ``k``.
    center : Tensor of shape (D,) or (B, D), optional
        A point of the product (per batch item for (B, D): the trees then carry a batch
        axis, every item's drawn from the same offsets); the origin by default.
    std : float, default 1.0
        :math:`\sigma`, in geodesic units of each factor.
    seed, generator
        Randomness, as in the guide's "Seeding" section.
    dtype, device
        Of the result (float32 or float64); those of ``center`` or the defaults.

    Returns
    -------
    MixedCurvatureTrees

    Examples
    --------
    >>> import tsw
    >>> trees = tsw.sample_mixed_curvature_trees(
    ...     [("euclidean", 2), ("hyperbolic", 2)], n_trees=4, n_lines=3, seed=0
    ... )
    >>> tuple(trees.roots.shape), tuple(trees.directions.shape)
    ((4, 5), (4, 3, 5))
    """
    factors = factors_of(check_components(components))
    T = check_positive_int(n_trees, "n_trees")
    k = check_positive_int(n_lines, "n_lines")
    if isinstance(center, Tensor):
        dtype = center.dtype if dtype is None else dtype
        device = center.device if device is None else device
    dtype, device = check_dtype_device(dtype, device)
    D = factors[-1].stop
    if center is None:
        center = _origin(factors, torch.float64, device)
    else:
        check_tensor(center, "center")
        if center.shape[-1] != D or center.ndim not in (1, 2):
            raise ValueError(
                f"center must have shape (D,) or (B, D) with D={D}; got "
                f"center.shape={tuple(center.shape)}"
            )
    std = float(std)
    if not math.isfinite(std) or std < 0:
        raise ValueError(f"std must be a finite number >= 0; got {std!r}")
    rng = resolve_sampler(seed, generator, dtype=torch.float64, device=device)
    xi, u, g = rng.normal(T, D), rng.uniform(T, k), rng.normal(T, k, D)
    own = (u * len(factors)).floor().clamp_(max=len(factors) - 1).long()  # (T, k)
    c = center.to(torch.float64).unsqueeze(-2)  # (..., 1, D)
    roots, rays = [], []
    for j, f in enumerate(factors):
        cj, xij, gj = c[..., f.start : f.stop], xi[:, f.start : f.stop], g[..., f.start : f.stop]
        if f.kind == "euclidean":
            x = cj + std * xij
            v = gj / torch.linalg.vector_norm(gj, dim=-1, keepdim=True)
            v = v.expand(*x.shape[:-2], T, k, f.width)
        elif f.kind == "sphere":
            tangent = xij - (xij * cj).sum(-1, keepdim=True) * cj
            x = _sphere_exp(cj, std * tangent)
            xr = x.unsqueeze(-2)  # (..., T, 1, d+1)
            v = gj - (gj * xr).sum(-1, keepdim=True) * xr
            v = v / torch.linalg.vector_norm(v, dim=-1, keepdim=True)
        else:
            x = exp_map(cj, std * transport0(cj, xij[..., 1:]), "lorentz")
            w = gj[..., 1:] / torch.linalg.vector_norm(gj[..., 1:], dim=-1, keepdim=True)
            v = transport0(x.unsqueeze(-2), w)
        roots.append(x)
        rays.append(torch.where((own == j).unsqueeze(-1), v, torch.zeros_like(v)))
    R = torch.cat(roots, dim=-1)
    V = torch.cat(rays, dim=-1)
    return MixedCurvatureTrees(R.to(dtype), V.to(dtype), validate=False)
