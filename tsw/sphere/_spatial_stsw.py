r"""SpatialSTSW: STSW after an injective continuous map of the sphere (spec 4.4).

The map, then STSW's projection on the mapped points through the driver; the mapped
points are checked as data (shape, dtype, device, on the sphere).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, cast

import torch
from torch import Tensor

from tsw.core._api import distance
from tsw.core._driver import evaluate
from tsw.core._output import Evaluation
from tsw.core._problem import Problem
from tsw.core._validation import check_measures_on_sphere
from tsw.core.trees import SphericalTrees
from tsw.euclidean.mappings import map_measures
from tsw.sphere._stsw import resolve_spherical_trees, spherical_projection

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from tsw.core._api import ChunkedOptions

__all__ = ["spatial_stsw", "sphere_lift"]


def sphere_lift(y: Tensor, eps: float = 1e-6) -> Tensor:
    r"""Lift unit vectors to the next sphere, :math:`h : \mathbb S^d \to \mathbb S^{d+1}`.

    .. math::

        h(y) = (\cos\varphi(y),\ \sin\varphi(y)\, y), \qquad
        \varphi(y) = \pi\, \frac{\bar y + 1 + \epsilon}{2 + 2\epsilon},

    with :math:`\bar y` the mean of the coordinates of ``y``. For a unit ``y``,
    :math:`|\bar y| \le 1/\sqrt{d+1}` so :math:`\varphi \in (0, \pi)` and
    :math:`\sin\varphi > 0`: ``h(y)`` is a unit vector and ``y = h(y)[1:] / sin(phi)``,
    so ``h`` is continuous and injective (not isometric, not rotation-equivariant).

    Parameters
    ----------
    y : Tensor of shape (..., d + 1)
        Unit vectors.
    eps : float, default 1e-6
        The official code's margin.

    Returns
    -------
    Tensor of shape (..., d + 2)

    Examples
    --------
    >>> import torch
    >>> from tsw.sphere import sphere_lift
    >>> z = sphere_lift(torch.tensor([1.0, 0.0, 0.0]))
    >>> round(float(z.norm()), 6), tuple(z.shape)
    (1.0, (4,))
    """
    phi = math.pi * (y.mean(-1, keepdim=True) + 1 + eps) / (2 + 2 * eps)
    return torch.cat([torch.cos(phi), torch.sin(phi) * y], dim=-1)


def resolve_sphere_mapping(mapping: object) -> Callable[[Tensor], Tensor]:
    """Return the map of :func:`spatial_stsw`: ``"lift"`` (:func:`sphere_lift`) or a callable."""
    if isinstance(mapping, str):
        if mapping != "lift":
            raise ValueError(f"mapping must be 'lift' or a callable; got {mapping!r}")
        return sphere_lift
    if callable(mapping):
        return cast("Callable[[Tensor], Tensor]", mapping)  # its output is checked when used
    raise TypeError(f"mapping must be 'lift' or a callable; got {type(mapping).__name__}")


@distance(chunked=True)
def spatial_stsw(
    problem: Problem,
    /,
    *,
    mapping: str | Callable[[Tensor], Tensor] = "lift",
    n_trees: int | None = None,
    n_lines: int | None = None,
    delta: float = 2.0,
    p: float = 1,
    trees: SphericalTrees | None = None,
    sampling: str = "iid",
    renormalize: bool = False,
    **options: Unpack[ChunkedOptions],
) -> Evaluation:
    r"""SpatialSTSW: :func:`tsw.stsw` between the images of the measures under a map.

    .. math::

        \mathrm{SpatialSTSW}(\mu, \nu) = \mathrm{STSW}(h\#\mu, h\#\nu),

    a metric on measures of :math:`\mathbb S^d` whenever ``h`` is continuous and
    injective into a sphere (Tran et al., ICML 2025). ``mapping="lift"`` is
    :func:`sphere_lift`, :math:`\mathbb S^d \to \mathbb S^{d+1}`; a callable must map
    unit vectors of shape (..., d + 1) to unit vectors (..., d') and be injective: its
    output is checked to lie on the sphere (as any :func:`tsw.stsw` input), its
    injectivity is the caller's responsibility. Trees are sampled (or must be given)
    in the mapped dimension. ``p`` means what it means for :func:`tsw.stsw` (``p > 1``:
    Sobolev-type). The value is invariant under rotations only if ``h`` is equivariant;
    ``sphere_lift`` is equivariant under permutations of the coordinates only.

    Parameters
    ----------
    X_s, X_t : Tensor of shape (N, d + 1) / (M, d + 1), or batched (B, ., d + 1)
        Unit vectors (``renormalize=True`` divides by the norms first).
    a, b : Tensor, optional
        Weights, as in :func:`tsw.stsw`.
    mapping : "lift" or callable, default "lift"
        The map ``h``.
    n_trees, n_lines, delta, p, trees, sampling
        As in :func:`tsw.stsw`, in the mapped dimension.
    renormalize : bool, default False
        Project the inputs onto the sphere instead of rejecting off-sphere points.

    Returns
    -------
    Tensor of shape () or (B,)

    Raises
    ------
    TypeError, ValueError
        For malformed inputs, an unknown mapping name, a non-callable mapping, or a
        mapped point off the unit sphere.

    Examples
    --------
    >>> import torch, tsw
    >>> g = torch.Generator().manual_seed(0)
    >>> X = torch.nn.functional.normalize(torch.randn(20, 3, generator=g), dim=-1)
    >>> Y = torch.nn.functional.normalize(torch.randn(30, 3, generator=g) + 1, dim=-1)
    >>> bool(tsw.spatial_stsw(X, Y, n_trees=50, seed=0) > 0)
    True
    """
    h: Callable[[Tensor], Tensor] = resolve_sphere_mapping(mapping)
    check = problem.validate
    measures = check_measures_on_sphere(problem.measures, renormalize=renormalize, validate=check)
    # the map sees the points as the caller passed them (the shared map step checks
    # its output); the weights are kept, already validated
    mapped = map_measures(measures, h, check)
    problem = problem.replace(
        measures=check_measures_on_sphere(mapped, renormalize=False, validate=check)
    )
    trees = resolve_spherical_trees(problem, trees, n_trees, n_lines, sampling)
    return evaluate(problem, partial(spherical_projection, delta=delta), trees)
