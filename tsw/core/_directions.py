r"""Unit directions of the sliced distances: drawn, or explicit ones checked against the data.

Every distance that projects on one direction per slice (SW and its variants in
:mod:`tsw.sliced`, GHSW and HHSW in :mod:`tsw.curved`) draws its (d, L) directions with
:func:`sample_projections` or checks the caller's with :func:`resolve_projections`, and
projects with :func:`line_projection` (a ``LINE`` per slice) or on coordinates made from it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tsw.core._problem import from_numpy
from tsw.core._projection import LINE, Projection, line_coordinates
from tsw.core._random import Sampler, resolve_sampler
from tsw.core._validation import (
    Measures,
    check_bool,
    check_dtype_device,
    check_positive_int,
    check_sampling,
    check_tensor,
    check_unit,
)
from tsw.core.trees import sample_directions, sampling_doc

__all__ = [
    "line_projection",
    "resolve_direction_sampling",
    "resolve_projections",
    "sample_projections",
]


@sampling_doc
def sample_projections(
    dim: int,
    n_projections: int,
    *,
    orthogonal: bool = False,
    sampling: str = "iid",
    seed: int | None = None,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Sample unit projection directions as columns of a (d, L) matrix (POT layout).

    Parameters
    ----------
    dim, n_projections : int
        ``d`` and ``L``.
    orthogonal : bool, default False
        Draw ``ceil(L / d)`` independent Haar-random orthonormal frames of ``d``
        directions and keep the first ``L`` columns (orthogonal SW, Rowland et al.
        2019); otherwise i.i.d. uniform directions. The same as ``sampling="orthogonal"``.
    sampling : {"iid", "orthogonal", "qmc"}, default "iid"
        {SAMPLING}
        For directions (one line per slice) ``"orthogonal"`` is orthogonal SW;
        ``orthogonal=True`` with ``sampling="qmc"`` raises.
    seed, generator, dtype, device
        As for the tree samplers (``seed`` is device independent).

    Returns
    -------
    Tensor of shape (d, L)

    Examples
    --------
    >>> import tsw
    >>> tuple(tsw.sample_projections(3, 10, seed=0).shape)
    (3, 10)
    """
    check_positive_int(dim, "dim")
    check_positive_int(n_projections, "n_projections")
    sampling = resolve_direction_sampling(orthogonal, sampling)
    dtype, device = check_dtype_device(dtype, device)
    sampler = resolve_sampler(seed, generator, dtype=dtype, device=device)
    if sampling == "orthogonal":  # the draws of orthogonal SW before ``sampling`` existed
        frames = sampler.orthonormal(-(-n_projections // dim), n=dim, dim=dim)
        return frames.reshape(-1, dim)[:n_projections].T
    return sample_directions(sampler, n_projections, 1, dim, sampling=sampling)[:, 0].T


def resolve_direction_sampling(orthogonal: object, sampling: object) -> str:
    """Return the ``sampling`` of one-line slices (``orthogonal=True`` is ``"orthogonal"``)."""
    sampling = check_sampling(sampling)
    if check_bool(orthogonal, "orthogonal"):
        if sampling == "qmc":
            raise ValueError(
                'orthogonal=True (orthogonal SW) is sampling="orthogonal"; it cannot be '
                'combined with sampling="qmc"; got orthogonal=True and sampling="qmc"'
            )
        return "orthogonal"
    return sampling


def _check_projections(given: object, measures: Measures, validate: bool) -> Tensor:
    projections = check_tensor(given, "projections")
    d = measures.X_s.shape[-1]
    ok = projections.ndim == 2 and projections.shape[0] == d
    if measures.batched:
        ok = ok or (
            projections.ndim == 3
            and projections.shape[0] == measures.X_s.shape[0]
            and projections.shape[1] == d
        )
    if not ok or projections.shape[-1] == 0:
        raise ValueError(
            f"projections must have shape (d, L) with d={d}"
            + (" or (B, d, L)" if measures.batched else "")
            + f"; got projections.shape={tuple(projections.shape)}"
        )
    if projections.device != measures.X_s.device or projections.dtype != measures.X_s.dtype:
        raise ValueError(
            f"projections must have the dtype and device of X_s; got {projections.dtype} on "
            f"{projections.device}"
        )
    if validate:
        check_unit(projections, "projections", dim=-2, what="columns (directions)")
    return projections


def resolve_projections(
    measures: Measures,
    projections: Tensor | None,
    n_projections: int,
    orthogonal: bool,
    rng: Sampler,
    sampling: str = "iid",
    *,
    validate: bool = True,
) -> Tensor:
    """Explicit projections checked against the data, or drawn ones: (d, L) or (B, d, L).

    Explicit ones must be finite unit columns (a value check, with ``validate``): a NaN,
    a zero or a non-unit direction would give a wrong value silently.
    """
    orthogonal = check_bool(orthogonal, "orthogonal")
    explicit = from_numpy(projections, "projections")
    sampling = resolve_direction_sampling(orthogonal, sampling)
    if explicit is not None:
        return _check_projections(explicit, measures, validate)
    return sample_projections(
        measures.X_s.shape[-1],
        n_projections,
        sampling=sampling,
        generator=rng.generator,
        dtype=measures.X_s.dtype,
        device=measures.X_s.device,
    )


def line_projection(measures: Measures, projections: Tensor) -> Projection:
    """Coordinates ``<z, theta_l>`` of the atoms on each direction (a ``LINE`` per slice)."""
    coords = line_coordinates(measures.X_s, measures.X_t, projections)  # (B, L, n)
    weights = torch.cat([measures.a, measures.b], dim=-1).unsqueeze(-2)  # (B, 1, n)
    return Projection(coords, weights, LINE, n_source=measures.X_s.shape[-2])
