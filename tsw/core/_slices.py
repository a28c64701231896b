"""Explicit-or-drawn slices: the part of the driver that knows where trees come from.

A *slice* is what a distance projects the measures on: a tree system
(:mod:`tsw.core.trees`), or a stack of directions for the sliced baselines. Every
distance either checks the slices its caller passed (shape, dtype, device, dimension
and batch against the data, counts against ``n_trees`` / ``n_lines``) or draws them from
the driver's :class:`~tsw.core._random.Sampler` (the seeding contract).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
from torch import Tensor

from tsw.core._random import Sampler
from tsw.core._validation import (
    CENTERS,
    Measures,
    check_finite,
    check_nonnegative_float,
    check_positive_int,
    check_tensor,
    check_unit,
    warn,
)
from tsw.core.trees import (
    ChainLines,
    ConcurrentLines,
    SphericalTrees,
    TreeSystem,
    check_sampling,
)

#: any tree container; the resolvers return the kind they were asked for
AnyTrees = TypeVar("AnyTrees", bound=ConcurrentLines | ChainLines | SphericalTrees)

__all__ = [
    "DEFAULT_N_LINES",
    "DEFAULT_N_TREES",
    "SPREAD_RTOL",
    "check_spread",
    "check_trees",
    "geometric_median",
    "path_directions",
    "resolve_center",
    "resolve_counts",
    "resolve_trees",
    "weighted_center",
    "with_batch_axis",
]

DEFAULT_N_TREES = 250
DEFAULT_N_LINES = 4


def with_batch_axis(t: Tensor, unbatched_ndim: int) -> Tensor:
    """Add a leading batch axis of size 1 to tree tensors without one."""
    return t if t.ndim > unbatched_ndim else t.unsqueeze(0)


def weighted_center(measures: Measures) -> Tensor:
    """Detached weighted mean of both measures, shape (B, d)."""
    a, b = measures.a.detach(), measures.b.detach()
    num = (a.unsqueeze(-1) * measures.X_s.detach()).sum(-2) + (
        b.unsqueeze(-1) * measures.X_t.detach()
    ).sum(-2)
    return num / (a.sum(-1) + b.sum(-1)).unsqueeze(-1)


#: Weiszfeld iterations of :func:`geometric_median`: at most this many ...
MEDIAN_MAX_ITER = 100
#: ... or until the centre moves by less than this times the spread of the atoms
MEDIAN_RTOL = 1e-6


def geometric_median(measures: Measures) -> Tensor:
    r"""Detached weighted geometric median of both measures together, shape (B, d).

    The Fermat-Weber point :math:`\arg\min_z \sum_i w_i \|x_i - z\|` of the atoms
    of both measures (weights ``a`` and ``b``), by Weiszfeld's iterations

    .. math::

        z \leftarrow \frac{\sum_i w_i x_i / \max(\|x_i - z\|, \epsilon)}
            {\sum_i w_i / \max(\|x_i - z\|, \epsilon)},

    started at the weighted mean, for at most :data:`MEDIAN_MAX_ITER` steps or until the
    step is below :data:`MEDIAN_RTOL` times the spread (the weighted mean distance to the
    mean), item by item: an item of a batch stops where it would alone. :math:`\epsilon`
    is ``sqrt(eps)`` times the spread, so an iterate that lands on an atom stays finite.
    The objective decreases at every step (Weiszfeld 1937; Kuhn 1973); FW-TSW (Tran et
    al., ICLR 2026) centers its roots here.
    """
    a, b = measures.a.detach(), measures.b.detach()
    Z = torch.cat([measures.X_s.detach(), measures.X_t.detach()], dim=-2)  # (B, n, d)
    w = torch.cat([a, b], dim=-1)  # (B, n)
    w = w / w.sum(-1, keepdim=True)
    z = (w.unsqueeze(-1) * Z).sum(-2)  # (B, d)
    spread = (w * torch.linalg.vector_norm(Z - z.unsqueeze(-2), dim=-1)).sum(-1)
    floor = (spread * torch.finfo(Z.dtype).eps ** 0.5).clamp_min(torch.finfo(Z.dtype).tiny)
    done = torch.zeros_like(spread, dtype=torch.bool)
    for _ in range(MEDIAN_MAX_ITER):
        dist = torch.linalg.vector_norm(Z - z.unsqueeze(-2), dim=-1)
        inv = w / torch.maximum(dist, floor.unsqueeze(-1))
        new = (inv.unsqueeze(-1) * Z).sum(-2) / inv.sum(-1, keepdim=True)
        step = torch.linalg.vector_norm(new - z, dim=-1)
        z = torch.where(done.unsqueeze(-1), z, new)  # a converged item stays where it stopped
        done = done | (step <= MEDIAN_RTOL * spread)
        if bool(done.all()):
            break
    return z


def path_directions(measures: Measures, n_trees: int, n_lines: int, rng: Sampler) -> Tensor:
    r"""Detached directions along random paths between the measures, (B, T, k, d).

    Line ``l`` of tree ``t`` gets :math:`(x_i - y_j) / \|x_i - y_j\|` with :math:`i`
    drawn from the weights ``a`` and :math:`j` from ``b``, independently for every line
    (by the inverse CDF of uniforms that every batch item shares, so that a batched
    call equals a loop of unbatched ones). A pair of coincident points gets a uniform
    direction instead (drawn for every line, so the draws keep their order). The
    "data-driven paths" of FW-TSW* (Tran et al., ICLR 2026).
    """
    L = n_trees * n_lines
    X, Y = measures.X_s.detach(), measures.X_t.detach()
    u = rng.uniform(2, L)  # (2, L) on the data's device and dtype
    fallback = rng.sphere(L, X.shape[-1])

    def pick(points: Tensor, w: Tensor, u: Tensor) -> Tensor:
        cdf = w.detach().cumsum(-1)
        cdf = cdf / cdf[..., -1:]
        idx = torch.searchsorted(cdf, (u * (1 - 1e-12)).expand(cdf.shape[0], -1).contiguous())
        idx = idx.clamp_(max=points.shape[-2] - 1)
        return torch.gather(points, -2, idx.unsqueeze(-1).expand(-1, -1, points.shape[-1]))

    diff = pick(X, measures.a, u[0]) - pick(Y, measures.b, u[1])  # (B, L, d)
    norm = torch.linalg.vector_norm(diff, dim=-1, keepdim=True)
    theta = torch.where(norm > 0, diff / norm.clamp_min(torch.finfo(X.dtype).tiny), fallback)
    return theta.reshape(X.shape[0], n_trees, n_lines, X.shape[-1])


def check_trees_batch(trees: TreeSystem | SphericalTrees, measures: Measures) -> None:
    """Raise if the trees' dimension, dtype, device or batch does not fit the measures."""
    d = measures.X_s.shape[-1]
    if trees.dim != d:
        raise ValueError(
            f"trees must live in the dimension of the data, d={d}; got trees of dimension "
            f"{trees.dim} (directions.shape={tuple(trees.directions.shape)})"
        )
    if (
        trees.directions.device != measures.X_s.device
        or trees.directions.dtype != measures.X_s.dtype
    ):
        raise ValueError(
            "trees must have the dtype and device of X_s "
            f"({measures.X_s.dtype} on {measures.X_s.device}); got "
            f"{trees.directions.dtype} on {trees.directions.device}"
        )
    tb = trees.batch_size
    B = measures.X_s.shape[0]
    if tb is not None and (not measures.batched or tb != B):
        shape = tuple(measures.X_s.shape if measures.batched else measures.X_s.shape[1:])
        raise ValueError(
            f"batched trees (batch size {tb}) need batched measures of the same batch size; "
            f"got X_s.shape={shape}"
        )


def resolve_counts(
    trees: TreeSystem | SphericalTrees | None,
    n_trees: int | None,
    n_lines: int | None,
    defaults: tuple[int, int] = (DEFAULT_N_TREES, DEFAULT_N_LINES),
) -> tuple[int, int]:
    """Default or check ``n_trees`` / ``n_lines`` against explicit ``trees``."""
    if trees is not None:
        for name, given, actual in (
            ("n_trees", n_trees, trees.n_trees),
            ("n_lines", n_lines, trees.n_lines),
        ):
            if given is not None and given != actual:
                raise ValueError(
                    f"{name}={given} disagrees with the explicit trees, which have "
                    f"{name}={actual}; pass {name}=None with trees="
                )
        return trees.n_trees, trees.n_lines
    T = check_positive_int(defaults[0] if n_trees is None else n_trees, "n_trees")
    k = check_positive_int(defaults[1] if n_lines is None else n_lines, "n_lines")
    return T, k


def resolve_center(
    center: Tensor | str | None, measures: Measures, validate: bool = True
) -> Tensor:
    """Center of the roots: a given tensor, or a detached center of both measures.

    ``"mean"`` (or ``None``): their weighted mean; ``"median"``: their weighted
    geometric median (:func:`geometric_median`, FW-TSW). Shape (d,) for unbatched
    measures (so that the drawn trees are unbatched too), (B, d) or (d,) for batched
    ones. A given tensor must be finite (a value check, with ``validate``); it is not
    detached, so a center that requires grad (an ``nn.Parameter`` of a loss) gets its
    gradient through the roots.
    """
    if center is None or isinstance(center, str):
        if center not in (None, *CENTERS):
            raise ValueError(
                f'center must be "mean", "median" or a tensor of shape (d,) or (B, d); got '
                f"{center!r}"
            )
        center = geometric_median(measures) if center == "median" else weighted_center(measures)
        return center if measures.batched else center[0]
    check_tensor(center, "center")
    d = measures.X_s.shape[-1]
    B = measures.X_s.shape[0]
    if center.shape not in ((d,), (B, d)):
        form = f"(d,) = ({d},)" + (f" or (B, d) = ({B}, {d})" if measures.batched else "")
        raise ValueError(f"center must have shape {form}; got center.shape={tuple(center.shape)}")
    if validate:
        check_finite(center, "center")
    return center.to(dtype=measures.X_s.dtype, device=measures.X_s.device)


#: the largest accepted rounding error of the line coordinates relative to the data's
#: spread, ``eps * reach / sigma`` (see :func:`check_spread`)
SPREAD_RTOL = 1e-4


def check_spread(trees: TreeSystem | SphericalTrees, measures: Measures) -> None:
    r"""Warn when the trees reach so far beyond the data that rounding hides the data.

    A coordinate on a line is :math:`\langle y - x, \theta\rangle`, with :math:`x` a root
    (or a chain's source). It carries a rounding error of about
    :math:`\epsilon\, \|y - x\|`, while the differences between the atoms that the value
    measures are of the order of the data's spread :math:`\sigma` (the weighted root mean
    square distance of the atoms to their mean). Roots drawn at ``root_std = 0.1`` (and
    chain sources up to ``source_range = 1`` apart) around float32 data at a scale of
    1e-8 leave no correct digit (the value's relative error was 0.97 for ``db_tsw``, 40
    for a chain ``tsw_sl``). With :math:`R` the largest distance from the data's mean to a
    root or source, a ``UserWarning`` is raised when :math:`\epsilon R / \sigma` exceeds
    :data:`SPREAD_RTOL` (1e-4); the remedy is ``root_std`` (and ``source_range``) in the
    data's units, e.g. ``root_std=0.1 * sigma``. A value check (a device
    synchronisation), run with ``validate``.
    """
    X = measures.X_s
    if X.shape[0] == 0:
        return
    c = weighted_center(measures)  # (B, d)
    a, b = measures.a.detach(), measures.b.detach()
    sq = (a * ((measures.X_s.detach() - c[:, None]) ** 2).sum(-1)).sum(-1)
    sq = sq + (b * ((measures.X_t.detach() - c[:, None]) ** 2).sum(-1)).sum(-1)
    spread = (sq / (a.sum(-1) + b.sum(-1))).sqrt().min()
    if isinstance(trees, ChainLines):
        src = trees.sources
    elif isinstance(trees, ConcurrentLines):
        src = trees.roots
    else:
        return
    d = src.shape[-1]
    src = src.detach().reshape(src.shape[0] if trees.batch_size else 1, -1, d)
    far = torch.linalg.vector_norm(src - c[:, None].to(src.dtype), dim=-1).amax()
    sigma, reach = torch.stack([spread, far.to(spread.dtype)]).tolist()  # one synchronisation
    eps = torch.finfo(X.dtype).eps
    if sigma > 0 and eps * reach > SPREAD_RTOL * sigma:
        warn(
            f"the trees' roots reach {reach:.3g} from the data's mean while the data spread "
            f"over {sigma:.3g}: in {X.dtype} the line coordinates lose about "
            f"{eps * reach / sigma:.1g} of the data's differences (the value's relative "
            "error is of that order). Pass root_std (and source_range for chains) in the "
            f"data's units, e.g. root_std={0.1 * sigma:.3g}"
            + (", or use torch.float64" if X.dtype != torch.float64 else ""),
        )


def check_trees(trees: object, allowed: tuple[type[AnyTrees], ...], measures: Measures) -> AnyTrees:
    """Check the type of explicit ``trees`` and its fit with the measures."""
    if not isinstance(trees, allowed):
        names = " or ".join(t.__name__ for t in allowed)
        raise TypeError(f"trees must be {names}; got {type(trees).__name__}")
    check_trees_batch(trees, measures)
    return trees


def resolve_trees(
    measures: Measures,
    trees: object,
    allowed: tuple[type[AnyTrees], ...],
    n_trees: int | None,
    n_lines: int | None,
    *,
    sampler: Callable[..., AnyTrees],
    rng: Sampler,
    center: Tensor | str | None = None,
    root_std: float | None = None,
    defaults: tuple[int, int] = (DEFAULT_N_TREES, DEFAULT_N_LINES),
    sampling: str = "iid",
    validate: bool = True,
) -> AnyTrees:
    """Explicit trees checked against the data, or trees drawn by ``sampler`` from ``rng``.

    ``sampler(d, n_trees=T, n_lines=k, sampling=, generator=, dtype=, device=)`` is one of
    the samplers of :mod:`tsw.core.trees` with its structure-specific options bound. With
    ``root_std`` (Euclidean trees) it also receives ``center=`` (the given one, or the
    detached mean or geometric median of both measures, :func:`resolve_center`, a given
    one checked finite with ``validate``) and ``std=``. ``sampling`` is checked even
    when explicit trees make it unused. With ``validate``, explicit trees are also
    checked at the call (finite tensors, unit directions to
    :func:`~tsw.core._validation.sphere_tol`), since a container built with
    ``validate=False`` or cast by ``.to()`` skipped its own checks.
    """
    extra: dict[str, object] = {}
    sampling = check_sampling(sampling)
    if root_std is not None:
        check_nonnegative_float(root_std, "root_std")
    if trees is not None:
        checked = check_trees(trees, allowed, measures)
        resolve_counts(checked, n_trees, n_lines)
        if validate:
            # the container may have been built with validate=False (or cast by .to(),
            # which skips its checks): finite tensors and unit directions, to the
            # tolerance of explicit projections (directions normalised in float32 and
            # cast to float64 pass); a NaN direction would otherwise give a silent NaN
            for name in checked.__dataclass_fields__:
                check_finite(getattr(checked, name), f"trees.{name}")
            check_unit(checked.directions, "trees.directions")
            check_spread(checked, measures)
        return checked
    T, k = resolve_counts(None, n_trees, n_lines, defaults)
    if root_std is not None:
        center = resolve_center(center, measures, validate)
        extra = {"center": center, "std": root_std, "validate": False}
    X = measures.X_s
    drawn = sampler(
        X.shape[-1],
        n_trees=T,
        n_lines=k,
        **extra,
        sampling=sampling,
        generator=rng.generator,
        dtype=X.dtype,
        device=X.device,
    )
    if validate:
        check_spread(drawn, measures)
    return drawn
