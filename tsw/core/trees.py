r"""Tree systems: small typed containers of lines, and their samplers.

A *tree system* is a set of ``k`` lines in R^d glued into a tree (spec 1.1). Two
structures are provided:

* :class:`ConcurrentLines`: all ``k`` lines of a tree pass through one root (a star
  of ``2k`` rays). Used by Db-TSW, the concurrent TSW-SL baseline and later papers.
* :class:`ChainLines`: line ``i`` starts on line ``i - 1`` (TSW-SL, Tran et al.
  2025, Algorithm 1). The root is the source of line 0.
* :class:`SphericalTrees`: spherical trees on :math:`\mathbb S^d` (STSW): ``k`` great
  semicircles of length pi leaving a root in tangent directions, glued at the root only.

Both hold ``T`` trees at once and may carry a leading batch dimension ``B`` (one tree
set per batch item). Without it the trees are shared by every item of a batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch
from torch import Tensor

from tsw.core._random import Sampler, haar_rows, resolve_sampler
from tsw.core._validation import (
    check_bool,
    check_dtype_device,
    check_finite,
    check_nonnegative_float,
    check_positive_int,
    check_sampling,
    check_tensor,
    check_unit,
)

__all__ = [
    "SAMPLING_DOC",
    "ChainLines",
    "ConcurrentLines",
    "SphericalTrees",
    "TreeSystem",
    "sample_chain_lines",
    "sample_concurrent_lines",
    "sample_directions",
    "sample_offsets",
    "sample_spherical_trees",
    "sampling_doc",
]

#: a function whose docstring :func:`sampling_doc` completes
F = TypeVar("F", bound=Callable[..., Any])

#: the documentation of ``sampling=``, shared by the samplers
SAMPLING_DOC = r"""``"iid"`` (default): independent trees. ``"orthogonal"``: stratified across
trees in blocks of Haar-random orthonormal frames of R^d: line ``l`` of the ``d`` trees of a block
takes the ``d`` rows of its own frame (``k`` independent frames per block), so that the
lines of one tree stay independent while each line's directions cover the sphere
evenly; the root offsets are the rows of one more frame times independent
:math:`\chi_d` radii. With ``orthogonal=True`` (orthonormal lines in a tree) a block is
one frame cut into ``d // k`` trees. ``"qmc"``: randomised quasi-Monte Carlo, every
line index and the root offsets taking the first ``T`` points of a Sobol sequence with
their own random digital shift, in their own random order (Owen's padding), through the
Gaussian inverse CDF (then normalised; orthonormalised within a tree with
``orthogonal=True``), all drawn from the call's generator. In every mode each
tree has exactly the law of an ``"iid"`` tree, so every estimator stays unbiased; only
the dependence between trees changes, which lowers the variance of the mean.
``log["std_error"]`` assumes independent trees: with ``"orthogonal"`` or ``"qmc"`` it
overstates the error (measure the spread over seeds instead)."""


def sampling_doc(fn: F) -> F:
    """Replace the line ``{SAMPLING}`` of ``fn``'s docstring by :data:`SAMPLING_DOC`.

    Written once here, the text reaches every sampler and distance with ``sampling=``
    (and, through the Parameters sections, the loss modules).
    """
    lines: list[str] = []
    found = False
    for line in (fn.__doc__ or "").splitlines():
        if line.strip() == "{SAMPLING}":
            indent = line[: len(line) - len(line.lstrip())]
            lines.extend(indent + text for text in SAMPLING_DOC.splitlines())
            found = True
        else:
            lines.append(line)
    if not found:
        raise ValueError(f"{fn.__name__}'s docstring has no {{SAMPLING}} line")
    fn.__doc__ = "\n".join(lines)
    return fn


def _stratified_rows(sampler: Sampler, n: int, m: int, dim: int) -> Tensor:
    """Return ``(n, m, dim)`` unit vectors, stratified down the first axis.

    Column ``j`` takes, in blocks of ``dim`` rows, the rows of independent Haar frames
    (one frame per column and block). For ``n < dim`` only the ``n`` rows used are drawn
    (the first ``n`` rows of a Haar frame are a Haar ``n``-frame; a QR of ``dim x n``
    instead of ``dim x dim``).
    """
    if n < dim:
        return sampler.orthonormal(m, n=n, dim=dim).transpose(0, 1)
    blocks = -(-n // dim)
    frames = sampler.orthonormal(blocks, m, n=dim, dim=dim)  # (blocks, m, dim, dim)
    return frames.transpose(1, 2).reshape(blocks * dim, m, dim)[:n]


def _qmc_columns(sampler: Sampler, n: int, m: int, dim: int) -> Tensor:
    """Return ``(n, m, dim)`` Gaussian vectors, column ``j`` from its own QMC draw."""
    return torch.stack([sampler.qmc_normal(n, dim) for _ in range(m)], dim=1)


def sample_directions(
    sampler: Sampler,
    n_trees: int,
    n_lines: int,
    dim: int,
    *,
    sampling: str = "iid",
    orthogonal: bool = False,
) -> Tensor:
    """Draw unit directions (T, k, d) from ``sampler`` (see :data:`SAMPLING_DOC`).

    Each tree's ``k`` directions are i.i.d. uniform on the sphere, or (``orthogonal``)
    a Haar-random orthonormal frame, whatever the ``sampling``. ``"iid"`` reproduces the
    draws of the samplers before ``sampling`` existed.
    """
    if sampling == "iid":
        if orthogonal:
            return sampler.orthonormal(n_trees, n=n_lines, dim=dim)
        return sampler.sphere(n_trees, n_lines, dim)
    if sampling == "orthogonal":
        if not orthogonal:
            return _stratified_rows(sampler, n_trees, n_lines, dim)
        per_frame = dim // n_lines
        if n_trees <= per_frame:  # one frame: draw only the rows used
            frame = sampler.orthonormal(n=n_trees * n_lines, dim=dim)
            return frame.reshape(n_trees, n_lines, dim)
        blocks = -(-n_trees // per_frame)
        frames = sampler.orthonormal(blocks, n=dim, dim=dim)[:, : per_frame * n_lines]
        return frames.reshape(blocks * per_frame, n_lines, dim)[:n_trees]
    g = _qmc_columns(sampler, n_trees, n_lines, dim)
    if orthogonal:
        return haar_rows(g.transpose(-1, -2))
    return g / torch.linalg.vector_norm(g, dim=-1, keepdim=True)


def sample_offsets(sampler: Sampler, n: int, dim: int, *, sampling: str = "iid") -> Tensor:
    """``n`` standard normal vectors of R^dim (root offsets), spread by ``sampling``."""
    if sampling == "iid":
        return sampler.normal(n, dim)
    if sampling == "orthogonal":
        radii = torch.linalg.vector_norm(sampler.normal(n, dim), dim=-1, keepdim=True)
        return radii * _stratified_rows(sampler, n, 1, dim)[:, 0]
    return sampler.qmc_normal(n, dim)


def _unit_tol(dtype: torch.dtype) -> float:
    return 1e3 * torch.finfo(dtype).eps


def _check_directions(directions: Tensor, name: str, validate: bool) -> None:
    """Check unit rows to the tolerance of every other direction check (:func:`check_unit`)."""
    if validate:
        check_unit(directions, name, what="rows (last dimension)")


def _check_pair(first: Tensor, fname: str, directions: Tensor, validate: object) -> None:
    check_bool(validate, "validate")
    check_tensor(first, fname)
    check_tensor(directions, "directions")
    if first.device != directions.device or first.dtype != directions.dtype:
        raise ValueError(
            f"{fname} and directions must share dtype and device; got "
            f"{first.dtype} on {first.device} and {directions.dtype} on {directions.device}"
        )
    if directions.ndim not in (3, 4) or 0 in directions.shape[-3:]:
        raise ValueError(
            "directions must have shape (T, k, d) or (B, T, k, d) with T, k, d >= 1; "
            f"got directions.shape={tuple(directions.shape)}"
        )


def _from_numpy(x: Tensor | np.ndarray) -> Tensor:
    """Return a numpy array as a tensor (the containers take arrays too), a tensor as given."""
    return torch.from_numpy(np.array(x, copy=True)) if isinstance(x, np.ndarray) else x


def _rooted_pair(
    roots: Tensor | np.ndarray, directions: Tensor | np.ndarray, validate: bool, d: str = "d"
) -> tuple[Tensor, Tensor]:
    """Return ``roots`` and ``directions`` as tensors, their shapes and types checked.

    ``roots`` (T, d) or (B, T, d), ``directions`` (T, k, d) or (B, T, k, d); with
    ``validate`` the roots are checked finite. ``d`` names the last axis in the message.
    """
    roots, directions = _from_numpy(roots), _from_numpy(directions)
    _check_pair(roots, "roots", directions, validate)
    if (
        roots.ndim not in (2, 3)
        or roots.shape[-2:] != (directions.shape[-3], directions.shape[-1])
        or (roots.ndim == 3 and directions.ndim == 4 and roots.shape[0] != directions.shape[0])
    ):
        raise ValueError(
            f"roots must have shape (T, {d}) or (B, T, {d}) matching directions (T, k, {d}) or "
            f"(B, T, k, {d}); got roots.shape={tuple(roots.shape)} and "
            f"directions.shape={tuple(directions.shape)}"
        )
    if validate:
        check_finite(roots, "roots")
    return roots, directions


class _TreeCounts:
    """The counts every tree container reads from its ``directions`` (..., T, k, dim)."""

    directions: Tensor

    def numpy(self) -> dict[str, np.ndarray]:
        """Return the container's tensors as numpy arrays, by field name.

        ``type(trees)(**trees.numpy())`` rebuilds the container; distances called with
        numpy inputs report their trees in this form (``log["trees"]``).
        """
        fields = type(self).__dataclass_fields__  # type: ignore[attr-defined]
        return {name: getattr(self, name).detach().cpu().numpy() for name in fields}

    @property
    def n_trees(self) -> int:
        """Number of trees ``T``."""
        return self.directions.shape[-3]

    @property
    def n_lines(self) -> int:
        """Number of lines (or rays) per tree ``k``."""
        return self.directions.shape[-2]

    @property
    def dim(self) -> int:
        """Ambient dimension ``d``."""
        return self.directions.shape[-1]


def _batch_size(roots: Tensor, directions: Tensor) -> int | None:
    """Leading batch size of trees with per-tree roots, or ``None`` when shared."""
    if directions.ndim == 4:
        return directions.shape[0]
    return roots.shape[0] if roots.ndim == 3 else None


@dataclass(frozen=True, init=False)
class ConcurrentLines(_TreeCounts):
    """``T`` trees of ``k`` concurrent lines each (star trees).

    Tree ``tau`` is made of the lines ``roots[tau] + s * directions[tau, l]``,
    ``s`` in R, all meeting at ``roots[tau]``, which is the root of the tree metric.

    Parameters
    ----------
    roots : Tensor or ndarray of shape (T, d) or (B, T, d)
        Common point of the lines of each tree.
    directions : Tensor or ndarray of shape (T, k, d) or (B, T, k, d)
        Unit directions of the lines.
    validate : bool, default True
        Check that the tensors are finite and the directions have unit norm.

    Raises
    ------
    TypeError
        If the tensors are not float32/float64 tensors.
    ValueError
        If the shapes disagree, or (``validate``) directions are not unit vectors.

    Examples
    --------
    >>> import torch, tsw
    >>> trees = tsw.ConcurrentLines(torch.zeros(1, 2), torch.eye(2)[None])
    >>> trees.n_trees, trees.n_lines, trees.dim
    (1, 2, 2)
    """

    roots: Tensor
    directions: Tensor

    def __init__(
        self, roots: Tensor | np.ndarray, directions: Tensor | np.ndarray, *, validate: bool = True
    ):
        roots, directions = _rooted_pair(roots, directions, validate)
        _check_directions(directions, "directions", validate)
        object.__setattr__(self, "roots", roots)
        object.__setattr__(self, "directions", directions)

    @property
    def batch_size(self) -> int | None:
        """Leading batch size ``B``, or ``None`` when the trees are shared."""
        return _batch_size(self.roots, self.directions)

    @property
    def sources(self) -> Tensor:
        """Source of every line, shape (T, 1, d) or (B, T, 1, d) (the root)."""
        return self.roots.unsqueeze(-2)

    def to(self, *args: Any, **kwargs: Any) -> ConcurrentLines:
        """Return the trees with ``Tensor.to(*args, **kwargs)`` applied."""
        return ConcurrentLines(
            self.roots.to(*args, **kwargs), self.directions.to(*args, **kwargs), validate=False
        )

    def narrow(self, start: int, stop: int) -> ConcurrentLines:
        """Return trees ``start`` to ``stop - 1`` (views, no copy, no validation)."""
        return ConcurrentLines(
            self.roots[..., start:stop, :], self.directions[..., start:stop, :, :], validate=False
        )


@dataclass(frozen=True, init=False)
class ChainLines(_TreeCounts):
    """``T`` trees of ``k`` chained lines each (TSW-SL tree systems).

    Line ``i`` of a tree is ``sources[i] + s * directions[i]``; for ``i >= 1`` its
    source lies on line ``i - 1`` at coordinate
    ``t_i = <sources[i] - sources[i-1], directions[i-1]>`` (:attr:`attachments`).
    The root of the tree metric is ``sources[0]``.

    Parameters
    ----------
    sources : Tensor or ndarray of shape (T, k, d) or (B, T, k, d)
        Source of every line.
    directions : Tensor or ndarray of shape (T, k, d) or (B, T, k, d)
        Unit directions.
    validate : bool, default True
        Check finiteness, unit directions and that each source lies on the previous
        line (up to ``1e3 * eps * (1 + max |source|)``).

    Raises
    ------
    TypeError
        If the tensors are not float32/float64 tensors.
    ValueError
        If the shapes disagree, a direction is not a unit vector, or a source is off
        the previous line.

    Examples
    --------
    >>> import torch, tsw
    >>> src = torch.tensor([[[0.0, 0.0], [2.0, 0.0]]])  # line 1 starts at t=2 on line 0
    >>> trees = tsw.ChainLines(src, torch.eye(2)[None])
    >>> trees.attachments
    tensor([[0., 2.]])
    """

    sources: Tensor
    directions: Tensor

    def __init__(
        self,
        sources: Tensor | np.ndarray,
        directions: Tensor | np.ndarray,
        *,
        validate: bool = True,
    ):
        sources, directions = _from_numpy(sources), _from_numpy(directions)
        _check_pair(sources, "sources", directions, validate)
        if sources.shape != directions.shape:
            raise ValueError(
                "sources must have the shape of directions, (T, k, d) or (B, T, k, d); got "
                f"sources.shape={tuple(sources.shape)} and "
                f"directions.shape={tuple(directions.shape)}"
            )
        if validate:
            check_finite(sources, "sources")
        _check_directions(directions, "directions", validate)
        object.__setattr__(self, "sources", sources)
        object.__setattr__(self, "directions", directions)
        if validate and self.n_lines > 1:
            step = sources[..., 1:, :] - sources[..., :-1, :]
            prev = directions[..., :-1, :]
            off = step - (step * prev).sum(-1, keepdim=True) * prev
            err = torch.linalg.vector_norm(off, dim=-1).max()
            tol = _unit_tol(sources.dtype) * (1 + sources.abs().max())
            if bool(err > tol):
                raise ValueError(
                    "sources[..., i, :] must lie on line i-1 (sources[..., i-1, :] + "
                    f"s * directions[..., i-1, :]) for every i >= 1; got a source at "
                    f"distance {err.item():.3g} from the previous line"
                )

    @property
    def batch_size(self) -> int | None:
        """Leading batch size ``B``, or ``None`` when the trees are shared."""
        return self.directions.shape[0] if self.directions.ndim == 4 else None

    @property
    def roots(self) -> Tensor:
        """Root of each tree (source of line 0), shape (T, d) or (B, T, d)."""
        return self.sources[..., 0, :]

    @property
    def attachments(self) -> Tensor:
        """Coordinate of line ``i``'s source on line ``i - 1``; 0 for line 0.

        Shape (T, k) or (B, T, k).
        """
        step = self.sources[..., 1:, :] - self.sources[..., :-1, :]
        t = (step * self.directions[..., :-1, :]).sum(-1)
        return torch.cat([t.new_zeros((*t.shape[:-1], 1)), t], dim=-1)

    def to(self, *args: Any, **kwargs: Any) -> ChainLines:
        """Return the trees with ``Tensor.to(*args, **kwargs)`` applied."""
        return ChainLines(
            self.sources.to(*args, **kwargs), self.directions.to(*args, **kwargs), validate=False
        )

    def narrow(self, start: int, stop: int) -> ChainLines:
        """Return trees ``start`` to ``stop - 1`` (views, no copy, no validation)."""
        return ChainLines(
            self.sources[..., start:stop, :, :],
            self.directions[..., start:stop, :, :],
            validate=False,
        )


TreeSystem = ConcurrentLines | ChainLines


def _check_center(center: Tensor | None, dim: int, dtype, device, validate: bool) -> Tensor:
    if center is None:
        return torch.zeros(dim, dtype=dtype, device=device)
    check_tensor(center, "center")
    if center.ndim not in (1, 2) or center.shape[-1] != dim:
        raise ValueError(
            f"center must have shape (d,) or (B, d) with d={dim}; got "
            f"center.shape={tuple(center.shape)}"
        )
    if check_bool(validate, "validate"):
        check_finite(center, "center")
    return center.to(dtype=dtype, device=device)


def _resolve_dtype_device(center, dtype, device):
    if isinstance(center, Tensor):
        dtype = center.dtype if dtype is None else dtype
        device = center.device if device is None else device
    return check_dtype_device(dtype, device)


@sampling_doc
def sample_concurrent_lines(
    dim: int,
    *,
    n_trees: int,
    n_lines: int,
    center: Tensor | None = None,
    std: float = 0.1,
    orthogonal: bool = False,
    sampling: str = "iid",
    seed: int | None = None,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    validate: bool = True,
) -> ConcurrentLines:
    r"""Sample ``n_trees`` star trees of ``n_lines`` concurrent lines (Db-TSW law).

    Roots are ``center + std * N(0, I_d)``; directions are i.i.d. uniform on
    :math:`\mathbb S^{d-1}` or, with ``orthogonal=True`` (Db-TSW⊥), an orthonormal
    Haar-random frame of ``n_lines`` vectors per tree.

    Parameters
    ----------
    dim : int
        Ambient dimension ``d``; the only positional argument, as in every sampler.
    n_trees, n_lines : int
        ``T`` and ``k`` (keyword-only: since 0.2 the samplers take the dimension first, and
        the counts by name so that a call in the old ``(T, k, d)`` order fails loudly).
    center : Tensor of shape (d,) or (B, d), optional
        Centre of the roots; zeros by default. A batched centre gives batched roots
        (the same random offsets translated to each item's centre) and shared
        directions.
    std : float, default 0.1
        Standard deviation of the roots around ``center``.
    orthogonal : bool, default False
        Orthonormal directions inside each tree; needs ``n_lines <= dim``.
    sampling : {"iid", "orthogonal", "qmc"}, default "iid"
        {SAMPLING}
    seed, generator
        Randomness, as in the guide's "Seeding" section (``seed`` gives the same
        trees on every device).
    dtype, device
        Of the result (float32 or float64); default to those of ``center``, else the
        default dtype, CPU.
    validate : bool, default True
        Check that ``center`` is finite (a value check: a device synchronisation).

    Returns
    -------
    ConcurrentLines

    Raises
    ------
    TypeError
        For a non-bool ``orthogonal``, a ``dtype`` other than float32 / float64.
    ValueError
        If a count is < 1, ``orthogonal`` with ``n_lines > dim``, bad ``center`` shape, an
        unknown ``sampling``, or (``validate``) a non-finite ``center``.

    Examples
    --------
    >>> import tsw
    >>> trees = tsw.sample_concurrent_lines(5, n_trees=3, n_lines=2, seed=0)
    >>> tuple(trees.roots.shape), tuple(trees.directions.shape)
    ((3, 5), (3, 2, 5))
    """
    check_positive_int(n_trees, "n_trees")
    check_positive_int(n_lines, "n_lines")
    check_positive_int(dim, "dim")
    std = check_nonnegative_float(std, "std")
    orthogonal = check_bool(orthogonal, "orthogonal")
    dtype, device = _resolve_dtype_device(center, dtype, device)
    center = _check_center(center, dim, dtype, device, validate)
    if orthogonal and n_lines > dim:
        raise ValueError(
            f"orthogonal directions need n_lines <= dim; got n_lines={n_lines} and dim={dim}"
        )
    sampling = check_sampling(sampling)
    sampler = resolve_sampler(seed, generator, dtype=dtype, device=device)
    offsets = sample_offsets(sampler, n_trees, dim, sampling=sampling)
    directions = sample_directions(
        sampler, n_trees, n_lines, dim, sampling=sampling, orthogonal=orthogonal
    )
    roots = center.unsqueeze(-2) + std * offsets
    return ConcurrentLines(roots, directions, validate=False)


@sampling_doc
def sample_chain_lines(
    dim: int,
    *,
    n_trees: int,
    n_lines: int,
    center: Tensor | None = None,
    std: float = 0.1,
    source_range: float = 1.0,
    sampling: str = "iid",
    seed: int | None = None,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    validate: bool = True,
) -> ChainLines:
    r"""Sample ``n_trees`` chain trees of ``n_lines`` lines (TSW-SL, Algorithm 1).

    The root ``x_0 = center + std * N(0, I_d)``; every direction is uniform on
    :math:`\mathbb S^{d-1}`; for ``i >= 1``, ``t_i ~ U(-source_range, source_range)``
    and ``x_i = x_{i-1} + t_i theta_{i-1}``. The paper draws ``x_0`` uniformly in
    ``[-1, 1]^d`` and places it "near the mean of the target" in experiments; a
    Gaussian around an explicit centre is used here, as for concurrent lines.

    Parameters
    ----------
    dim : int
        Ambient dimension ``d``; the only positional argument, as in every sampler.
    n_trees, n_lines : int
        ``T`` and ``k`` (keyword-only: since 0.2 the samplers take the dimension first, and
        the counts by name so that a call in the old ``(T, k, d)`` order fails loudly).
    center : Tensor of shape (d,) or (B, d), optional
        Centre of the roots; zeros by default.
    std : float, default 0.1
        Standard deviation of the roots around ``center``.
    source_range : float, default 1.0
        Half-width of the uniform law of the attachment coordinates ``t_i``.
    sampling : {"iid", "orthogonal", "qmc"}, default "iid"
        {SAMPLING}
        The attachment coordinates ``t_i`` stay i.i.d.
    seed, generator, dtype, device, validate
        As in :func:`sample_concurrent_lines`.

    Returns
    -------
    ChainLines

    Examples
    --------
    >>> import tsw
    >>> trees = tsw.sample_chain_lines(2, n_trees=3, n_lines=4, seed=0)
    >>> tuple(trees.sources.shape), tuple(trees.attachments.shape)
    ((3, 4, 2), (3, 4))
    """
    check_positive_int(n_trees, "n_trees")
    check_positive_int(n_lines, "n_lines")
    check_positive_int(dim, "dim")
    std = check_nonnegative_float(std, "std")
    source_range = check_nonnegative_float(source_range, "source_range")
    dtype, device = _resolve_dtype_device(center, dtype, device)
    center = _check_center(center, dim, dtype, device, validate)
    sampling = check_sampling(sampling)
    sampler = resolve_sampler(seed, generator, dtype=dtype, device=device)
    offsets = sample_offsets(sampler, n_trees, dim, sampling=sampling)
    directions = sample_directions(sampler, n_trees, n_lines, dim, sampling=sampling)
    t = sampler.uniform(n_trees, n_lines - 1, low=-source_range, high=source_range)
    steps = t.unsqueeze(-1) * directions[:, :-1, :]
    rel = torch.cat([torch.zeros_like(offsets).unsqueeze(-2), steps.cumsum(-2)], dim=-2)
    roots = center.unsqueeze(-2) + std * offsets  # (T, d) or (B, T, d)
    sources = roots.unsqueeze(-2) + rel
    if sources.ndim == 4:
        directions = directions.expand(sources.shape[0], -1, -1, -1)
    return ChainLines(sources, directions, validate=False)


@dataclass(frozen=True, init=False)
class SphericalTrees(_TreeCounts):
    r"""``T`` spherical trees of ``k`` rays each, on the unit sphere of R^(d+1).

    Tree ``tau`` has a root ``x = roots[tau]`` on :math:`\mathbb S^d` and ``k`` rays, the
    great semicircles :math:`\cos(t)\, x + \sin(t)\, v_i`, :math:`t \in [0, \pi]`,
    leaving ``x`` in the unit tangent directions ``v_i = directions[tau, i]`` (so
    :math:`\langle v_i, x\rangle = 0`) and ending at :math:`-x`. The rays are glued at
    the root only (the ``k`` copies of :math:`-x` stay distinct): the tree metric is the
    star metric, :math:`|t_a - t_b|` on one ray and :math:`t_a + t_b` across rays
    (Tran et al., ICLR 2025, spec 5.1).

    Parameters
    ----------
    roots : Tensor or ndarray of shape (T, d+1) or (B, T, d+1)
        Unit roots.
    directions : Tensor or ndarray of shape (T, k, d+1) or (B, T, k, d+1)
        Unit tangent directions of the rays, orthogonal to their tree's root.
    validate : bool, default True
        Check finiteness, unit norms (to ``sphere_tol``: 1e-6 in float64, 1.2e-4 in
        float32, as every direction check) and orthogonality (to ``1e3 * eps``).

    Raises
    ------
    TypeError
        If the tensors are not float32/float64 tensors.
    ValueError
        If the shapes disagree, ``d + 1 < 2``, or (``validate``) a root or direction is
        not a unit vector, or a direction is not tangent at its root.

    Examples
    --------
    >>> import torch, tsw
    >>> e = torch.eye(3)
    >>> trees = tsw.SphericalTrees(e[2:3], e[None, :2])  # root e3, rays towards e1, e2
    >>> trees.n_trees, trees.n_lines, trees.dim
    (1, 2, 3)
    """

    roots: Tensor
    directions: Tensor

    def __init__(
        self, roots: Tensor | np.ndarray, directions: Tensor | np.ndarray, *, validate: bool = True
    ):
        roots, directions = _rooted_pair(roots, directions, validate, d="d+1")
        if directions.shape[-1] < 2:
            raise ValueError(
                "spherical trees need an ambient dimension d+1 >= 2 (a tangent space); got "
                f"directions.shape={tuple(directions.shape)}"
            )
        _check_directions(roots, "roots", validate)
        _check_directions(directions, "directions", validate)
        if validate:
            cos = (directions * roots.unsqueeze(-2)).sum(-1).abs().max()
            if bool(cos > _unit_tol(directions.dtype)):
                raise ValueError(
                    "directions must be tangent at their root (orthogonal to roots); got "
                    f"|<directions, roots>| up to {cos.item():.3g}"
                )
        object.__setattr__(self, "roots", roots)
        object.__setattr__(self, "directions", directions)

    @property
    def batch_size(self) -> int | None:
        """Leading batch size ``B``, or ``None`` when the trees are shared."""
        return _batch_size(self.roots, self.directions)

    @property
    def dim(self) -> int:
        """Ambient dimension ``d + 1`` (the trees live on the sphere of R^(d+1))."""
        return self.directions.shape[-1]

    def to(self, *args: Any, **kwargs: Any) -> SphericalTrees:
        """Return the trees with ``Tensor.to(*args, **kwargs)`` applied."""
        return SphericalTrees(
            self.roots.to(*args, **kwargs), self.directions.to(*args, **kwargs), validate=False
        )

    def narrow(self, start: int, stop: int) -> SphericalTrees:
        """Return trees ``start`` to ``stop - 1`` (views, no copy, no validation)."""
        return SphericalTrees(
            self.roots[..., start:stop, :], self.directions[..., start:stop, :, :], validate=False
        )


@sampling_doc
def sample_spherical_trees(
    dim: int,
    *,
    n_trees: int,
    n_lines: int,
    sampling: str = "iid",
    seed: int | None = None,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> SphericalTrees:
    r"""Sample ``n_trees`` spherical trees of ``n_lines`` rays on the sphere of R^dim.

    The law of the STSW code (spec 5.2): the root is uniform on the sphere (a normalised
    standard Gaussian); each direction is a standard Gaussian with its component along
    the root removed, normalised, i.e. i.i.d. uniform on the unit sphere of the tangent
    space. The law is invariant under :math:`O(d+1)`.

    Parameters
    ----------
    dim : int
        Ambient dimension ``d + 1 >= 2`` (the last dimension of the data); the only
        positional argument, as in every sampler.
    n_trees, n_lines : int
        ``T`` and ``k`` (keyword-only, see :func:`sample_concurrent_lines`).
    sampling : {"iid", "orthogonal", "qmc"}, default "iid"
        {SAMPLING}
        On the sphere the roots are the unit vectors of their draws and each ray the
        normalised tangent part of its own; both keep their law in every mode.
    seed, generator
        Randomness, as in the guide's "Seeding" section (``seed`` gives the same
        trees on every device).
    dtype, device
        Of the result (float32 or float64); default dtype and CPU by default.

    Returns
    -------
    SphericalTrees

    Raises
    ------
    ValueError
        If a count is < 1 or ``dim < 2``.

    Examples
    --------
    >>> import tsw
    >>> trees = tsw.sample_spherical_trees(4, n_trees=3, n_lines=5, seed=0)
    >>> tuple(trees.roots.shape), tuple(trees.directions.shape)
    ((3, 4), (3, 5, 4))
    """
    check_positive_int(n_trees, "n_trees")
    check_positive_int(n_lines, "n_lines")
    check_positive_int(dim, "dim")
    if dim < 2:
        raise ValueError(f"spherical trees need dim = d+1 >= 2; got dim={dim}")
    sampling = check_sampling(sampling)
    dtype, device = _resolve_dtype_device(None, dtype, device)
    sampler = resolve_sampler(seed, generator, dtype=torch.float64, device=device)
    roots = sample_directions(sampler, n_trees, 1, dim, sampling=sampling)[:, 0]
    if sampling == "iid":
        g = sampler.normal(n_trees, n_lines, dim)
    else:  # unit vectors uniform on the sphere: their tangent parts have the Gaussian's law
        g = sample_directions(sampler, n_trees, n_lines, dim, sampling=sampling)
    g = g - (g * roots.unsqueeze(-2)).sum(-1, keepdim=True) * roots.unsqueeze(-2)
    directions = g / torch.linalg.vector_norm(g, dim=-1, keepdim=True)
    return SphericalTrees(roots.to(dtype), directions.to(dtype), validate=False)
