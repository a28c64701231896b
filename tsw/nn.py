"""``torch.nn.Module`` losses: hyper-parameters in ``__init__``, tensors in ``forward``.

Every loss is a thin wrapper around the function of the same name; its value equals
the function's for the same trees. Randomness:

* ``resample=True`` (default): new trees or projections at every call. With
  ``seed=None`` they come from operating-system entropy; with ``seed=s`` from a
  generator owned by the module, so a training run replays exactly from ``s``.
* ``resample=False``: the same random draw (directions, root offsets) at every call.
  The roots still follow the data's centre unless ``center`` is given, so the
  objective is a deterministic function of the inputs.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from tsw.core._validation import check_choice, check_positive_int
from tsw.euclidean.circular_tsw import circular_tsw
from tsw.euclidean.db_tsw import db_tsw
from tsw.euclidean.mappings import resolve_mapping
from tsw.euclidean.partial_tsw import partial_tsw
from tsw.euclidean.spatial_tsw import spatial_tsw
from tsw.euclidean.tsw_sl import tsw_sl
from tsw.sliced.s3w import s3w, s3w_unif, sample_rotations
from tsw.sliced.ssw import ssw, ssw_unif
from tsw.sliced.sw import max_sw, sw
from tsw.sphere.spatial_stsw import spatial_stsw
from tsw.sphere.stsw import stsw, stsw_unif

__all__ = [
    "ARIS3WLoss",
    "CircularTSWLoss",
    "DbTSWLoss",
    "MaxSWLoss",
    "PartialTSWLoss",
    "S3WLoss",
    "S3WUnifLoss",
    "SSWLoss",
    "SSWUnifLoss",
    "STSWLoss",
    "STSWUnifLoss",
    "SWLoss",
    "SpatialSTSWLoss",
    "SpatialTSWLoss",
    "TSWSLLoss",
]


class _RandomizedLoss(nn.Module):
    """Shared plumbing: randomness policy and batch reduction."""

    _fn: Callable[..., Tensor]

    def __init__(
        self,
        *,
        reduction: str = "mean",
        seed: int | None = None,
        resample: bool = True,
        **kwargs: Any,
    ):
        super().__init__()
        self.reduction = check_choice(reduction, "reduction", ("mean", "sum", "none"))
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"seed must be an int or None; got {type(seed).__name__}")
        self.seed = seed
        self.resample = bool(resample)
        self.kwargs = kwargs
        self._generator: torch.Generator | None = None
        if self.resample and seed is not None:
            self._generator = torch.Generator(device="cpu")
            self._generator.manual_seed(seed)
        self._fixed_seed = None
        if not self.resample:
            self._fixed_seed = seed if seed is not None else secrets.randbits(63)

    def _randomness(self) -> dict[str, Any]:
        return {"generator": self._generator} if self.resample else {"seed": self._fixed_seed}

    def _reduce(self, out: Tensor) -> Tensor:
        if out.ndim == 0 or self.reduction == "none":
            return out
        return out.mean() if self.reduction == "mean" else out.sum()

    def forward(
        self, X_s: Tensor, X_t: Tensor, a: Tensor | None = None, b: Tensor | None = None
    ) -> Tensor:
        """Loss between ``(X_s, a)`` and ``(X_t, b)``, reduced over a batch.

        Parameters
        ----------
        X_s : Tensor of shape (N, d) or (B, N, d)
        X_t : Tensor of shape (M, d) or (B, M, d)
        a, b : Tensor of shape (N,) / (M,) or (B, N) / (B, M), optional

        Returns
        -------
        Tensor
            A 0-d tensor (unbatched input, or ``reduction`` in {"mean", "sum"}) or a
            (B,) tensor (``reduction="none"``).
        """
        return self._reduce(
            type(self)._fn(X_s, X_t, a, b, **self._call_kwargs(), **self._randomness())
        )

    def _call_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the wrapped function (hyper-parameters)."""
        return self.kwargs

    def extra_repr(self) -> str:
        items = [
            f"{k}={v!r}" for k, v in self.kwargs.items() if not isinstance(v, Tensor | nn.Module)
        ]
        items += [f"reduction={self.reduction!r}", f"resample={self.resample}"]
        if self.seed is not None:
            items.append(f"seed={self.seed}")
        return ", ".join(items)


class TSWSLLoss(_RandomizedLoss):
    """Loss module for :func:`tsw.tsw_sl` (keyword arguments as there).

    Examples
    --------
    >>> import torch, tsw
    >>> loss = tsw.nn.TSWSLLoss(n_trees=25, n_lines=4, seed=0)
    >>> X = torch.randn(10, 2, requires_grad=True)
    >>> loss(X, torch.randn(12, 2)).backward()
    >>> X.grad.shape
    torch.Size([10, 2])
    """

    _fn = staticmethod(tsw_sl)

    def __init__(
        self,
        *,
        n_trees: int | None = None,
        n_lines: int | None = None,
        p: float = 1,
        tree: str = "chain",
        alpha: Tensor | None = None,
        center: Tensor | None = None,
        root_std: float = 0.1,
        source_range: float = 1.0,
        validate: bool = True,
        reduction: str = "mean",
        seed: int | None = None,
        resample: bool = True,
    ):
        super().__init__(
            n_trees=n_trees,
            n_lines=n_lines,
            p=p,
            tree=tree,
            alpha=alpha,
            center=center,
            root_std=root_std,
            source_range=source_range,
            validate=validate,
            reduction=reduction,
            seed=seed,
            resample=resample,
        )


class DbTSWLoss(_RandomizedLoss):
    """Loss module for :func:`tsw.db_tsw` (keyword arguments as there).

    Examples
    --------
    >>> import torch, tsw
    >>> loss = tsw.nn.DbTSWLoss(n_trees=50, n_lines=4, delta=2.0, seed=0, reduction="none")
    >>> loss(torch.randn(3, 10, 5), torch.randn(3, 8, 5)).shape
    torch.Size([3])
    """

    _fn = staticmethod(db_tsw)

    def __init__(
        self,
        *,
        n_trees: int | None = None,
        n_lines: int | None = None,
        delta: float = 2.0,
        p: float = 1,
        orthogonal: bool = False,
        center: Tensor | None = None,
        root_std: float = 0.1,
        validate: bool = True,
        reduction: str = "mean",
        seed: int | None = None,
        resample: bool = True,
    ):
        super().__init__(
            n_trees=n_trees,
            n_lines=n_lines,
            delta=delta,
            p=p,
            orthogonal=orthogonal,
            center=center,
            root_std=root_std,
            validate=validate,
            reduction=reduction,
            seed=seed,
            resample=resample,
        )


class CircularTSWLoss(_RandomizedLoss):
    """Loss module for :func:`tsw.circular_tsw` (keyword arguments as there).

    Examples
    --------
    >>> import torch, tsw
    >>> loss = tsw.nn.CircularTSWLoss(radius=0.0, n_trees=50, n_lines=4, seed=0)
    >>> X = torch.randn(10, 3, requires_grad=True)
    >>> loss(X, torch.randn(12, 3)).backward()
    >>> X.grad.shape
    torch.Size([10, 3])
    """

    _fn = staticmethod(circular_tsw)

    def __init__(
        self,
        *,
        radius: float,
        n_trees: int | None = None,
        n_lines: int | None = None,
        delta: float = 2.0,
        p: float = 1,
        split: str = "image",
        compat: bool = False,
        center: Tensor | None = None,
        root_std: float = 0.1,
        validate: bool = True,
        reduction: str = "mean",
        seed: int | None = None,
        resample: bool = True,
    ):
        super().__init__(
            radius=radius,
            n_trees=n_trees,
            n_lines=n_lines,
            delta=delta,
            p=p,
            split=split,
            compat=compat,
            center=center,
            root_std=root_std,
            validate=validate,
            reduction=reduction,
            seed=seed,
            resample=resample,
        )


class SpatialTSWLoss(_RandomizedLoss):
    """Loss module for :func:`tsw.spatial_tsw` (keyword arguments as there).

    A ``torch.nn.Module`` mapping is registered as the submodule ``mapping``: its
    parameters appear in ``loss.parameters()`` and are trained through the loss
    (for instance maximised adversarially, or learned jointly with a model).

    Examples
    --------
    >>> import torch, tsw
    >>> phi = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    >>> class Graph(torch.nn.Module):  # h(y) = (y, phi(y)): injective for any phi
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.phi = phi
    ...     def forward(self, Z):
    ...         return torch.cat([Z, self.phi(Z)], dim=-1)
    >>> loss = tsw.nn.SpatialTSWLoss(mapping=Graph(), n_trees=50, seed=0)
    >>> len(list(loss.parameters()))
    4
    >>> loss(torch.randn(10, 2), torch.randn(12, 2)).backward()
    >>> phi[0].weight.grad is not None
    True
    """

    _fn = staticmethod(spatial_tsw)

    def __init__(
        self,
        *,
        mapping: str | Callable[[Tensor], Tensor] = "pow",
        degree: int | None = None,
        beta: float | None = None,
        n_trees: int | None = None,
        n_lines: int | None = None,
        delta: float = 2.0,
        p: float = 1,
        orthogonal: bool = False,
        center: Tensor | None = None,
        root_std: float = 0.1,
        validate: bool = True,
        reduction: str = "mean",
        seed: int | None = None,
        resample: bool = True,
    ):
        super().__init__(
            mapping=mapping,
            degree=degree,
            beta=beta,
            n_trees=n_trees,
            n_lines=n_lines,
            delta=delta,
            p=p,
            orthogonal=orthogonal,
            center=center,
            root_std=root_std,
            validate=validate,
            reduction=reduction,
            seed=seed,
            resample=resample,
        )
        resolve_mapping(mapping, degree, beta)  # bad options raise here, not at the first call
        if isinstance(mapping, nn.Module):
            self.mapping = mapping  # registered: trained through the loss, moved by .to()


class PartialTSWLoss(_RandomizedLoss):
    """Loss module for :func:`tsw.partial_tsw` (keyword arguments as there).

    ``mass_s`` and ``mass_t`` are attributes read at every call: assign a new float to
    follow a schedule (``loss.mass_t = 1.02``), or pass an ``nn.Parameter`` to learn a
    mass (it is then registered as a parameter of the module).

    Examples
    --------
    >>> import torch, tsw
    >>> mass = torch.nn.Parameter(torch.tensor(0.8))
    >>> loss = tsw.nn.PartialTSWLoss(mass_t=mass, n_trees=20, n_lines=3, seed=0)
    >>> loss(torch.randn(10, 3), torch.randn(12, 3)).backward()
    >>> mass.grad is not None, [n for n, _ in loss.named_parameters()]
    (True, ['mass_t'])
    """

    _fn = staticmethod(partial_tsw)

    def __init__(
        self,
        *,
        mass_s: float | Tensor = 1.0,
        mass_t: float | Tensor = 1.0,
        n_trees: int | None = None,
        n_lines: int | None = None,
        delta: float = 2.0,
        p: float = 1,
        price: float = 0.0,
        orthogonal: bool = False,
        center: Tensor | None = None,
        root_std: float = 0.1,
        validate: bool = True,
        reduction: str = "mean",
        seed: int | None = None,
        resample: bool = True,
    ):
        super().__init__(
            n_trees=n_trees,
            n_lines=n_lines,
            delta=delta,
            p=p,
            price=price,
            orthogonal=orthogonal,
            center=center,
            root_std=root_std,
            validate=validate,
            reduction=reduction,
            seed=seed,
            resample=resample,
        )
        self.mass_s = mass_s
        self.mass_t = mass_t

    def _call_kwargs(self) -> dict[str, Any]:
        return {**self.kwargs, "mass_s": self.mass_s, "mass_t": self.mass_t}

    def extra_repr(self) -> str:
        """Show the masses (tensors by their values), then the other hyper-parameters."""
        masses = [
            f"{name}={v.tolist() if isinstance(v, Tensor) else v!r}"
            for name, v in (("mass_s", self.mass_s), ("mass_t", self.mass_t))
        ]
        return ", ".join([*masses, super().extra_repr()])


class SWLoss(_RandomizedLoss):
    """Loss module for :func:`tsw.sw` (``orthogonal=True`` for orthogonal SW).

    Examples
    --------
    >>> import torch, tsw
    >>> loss = tsw.nn.SWLoss(n_projections=100, p=2, seed=0)
    >>> float(loss(torch.zeros(4, 3), torch.zeros(5, 3)))
    0.0
    """

    _fn = staticmethod(sw)

    def __init__(
        self,
        *,
        n_projections: int = 50,
        p: float = 2,
        orthogonal: bool = False,
        validate: bool = True,
        reduction: str = "mean",
        seed: int | None = None,
        resample: bool = True,
    ):
        super().__init__(
            n_projections=n_projections,
            p=p,
            orthogonal=orthogonal,
            validate=validate,
            reduction=reduction,
            seed=seed,
            resample=resample,
        )


class MaxSWLoss(_RandomizedLoss):
    """Loss module for :func:`tsw.max_sw` (keyword arguments as there).

    Examples
    --------
    >>> import torch, tsw
    >>> loss = tsw.nn.MaxSWLoss(n_iter=10, seed=0)
    >>> loss(torch.zeros(4, 3), torch.ones(5, 3)).item() > 0
    True
    """

    _fn = staticmethod(max_sw)

    def __init__(
        self,
        *,
        p: float = 2,
        n_iter: int = 100,
        lr: float = 0.05,
        n_init: int = 16,
        validate: bool = True,
        reduction: str = "mean",
        seed: int | None = None,
        resample: bool = True,
    ):
        super().__init__(
            p=p,
            n_iter=n_iter,
            lr=lr,
            n_init=n_init,
            validate=validate,
            reduction=reduction,
            seed=seed,
            resample=resample,
        )


class _RandomizedUnifLoss(_RandomizedLoss):
    """A distance to the uniform measure on the sphere: ``forward(X_s, a=None)``."""

    def forward(self, X_s: Tensor, a: Tensor | None = None) -> Tensor:  # type: ignore[override]
        """Loss between ``(X_s, a)`` and the uniform measure, reduced over a batch.

        Parameters
        ----------
        X_s : Tensor of shape (N, d+1) or (B, N, d+1)
        a : Tensor of shape (N,) or (B, N), optional

        Returns
        -------
        Tensor
            A 0-d tensor (unbatched input, or ``reduction`` in {"mean", "sum"}) or a
            (B,) tensor (``reduction="none"``).
        """
        return self._reduce(type(self)._fn(X_s, a, **self.kwargs, **self._randomness()))


class STSWLoss(_RandomizedLoss):
    """Loss module for :func:`tsw.stsw` (keyword arguments as there).

    Examples
    --------
    >>> import torch, tsw
    >>> loss = tsw.nn.STSWLoss(n_trees=50, n_lines=5, seed=0)
    >>> X = torch.nn.functional.normalize(torch.randn(10, 3), dim=-1).requires_grad_()
    >>> Y = torch.nn.functional.normalize(torch.randn(12, 3), dim=-1)
    >>> loss(X, Y).backward()
    >>> X.grad.shape
    torch.Size([10, 3])
    """

    _fn = staticmethod(stsw)

    def __init__(
        self,
        *,
        n_trees: int | None = None,
        n_lines: int | None = None,
        delta: float = 2.0,
        p: float = 1,
        validate: bool = True,
        renormalize: bool = False,
        reduction: str = "mean",
        seed: int | None = None,
        resample: bool = True,
    ):
        super().__init__(
            n_trees=n_trees,
            n_lines=n_lines,
            delta=delta,
            p=p,
            validate=validate,
            renormalize=renormalize,
            reduction=reduction,
            seed=seed,
            resample=resample,
        )


class SpatialSTSWLoss(_RandomizedLoss):
    """Loss module for :func:`tsw.spatial_stsw` (keyword arguments as there).

    A ``torch.nn.Module`` mapping is registered as the submodule ``mapping``.

    Examples
    --------
    >>> import torch, tsw
    >>> loss = tsw.nn.SpatialSTSWLoss(n_trees=20, seed=0)
    >>> X = torch.nn.functional.normalize(torch.randn(10, 3), dim=-1)
    >>> Y = torch.nn.functional.normalize(torch.randn(12, 3), dim=-1)
    >>> loss(X, Y).item() > 0
    True
    """

    _fn = staticmethod(spatial_stsw)

    def __init__(
        self,
        *,
        mapping: str | Callable[[Tensor], Tensor] = "lift",
        n_trees: int | None = None,
        n_lines: int | None = None,
        delta: float = 2.0,
        p: float = 1,
        validate: bool = True,
        renormalize: bool = False,
        reduction: str = "mean",
        seed: int | None = None,
        resample: bool = True,
    ):
        super().__init__(
            mapping=mapping,
            n_trees=n_trees,
            n_lines=n_lines,
            delta=delta,
            p=p,
            validate=validate,
            renormalize=renormalize,
            reduction=reduction,
            seed=seed,
            resample=resample,
        )
        if isinstance(mapping, nn.Module):
            self.mapping = mapping


class STSWUnifLoss(_RandomizedUnifLoss):
    """Loss module for :func:`tsw.stsw_unif`: ``loss(X_s, a=None)``.

    Examples
    --------
    >>> import torch, tsw
    >>> loss = tsw.nn.STSWUnifLoss(n_trees=50, seed=0, reduction="none")
    >>> loss(torch.nn.functional.normalize(torch.randn(4, 10, 3), dim=-1)).shape
    torch.Size([4])
    """

    _fn = staticmethod(stsw_unif)

    def __init__(
        self,
        *,
        n_trees: int | None = None,
        n_lines: int | None = None,
        delta: float = 2.0,
        p: float = 1,
        n_grid: int | None = None,
        n_quad: int = 128,
        validate: bool = True,
        renormalize: bool = False,
        reduction: str = "mean",
        seed: int | None = None,
        resample: bool = True,
    ):
        super().__init__(
            n_trees=n_trees,
            n_lines=n_lines,
            delta=delta,
            p=p,
            n_grid=n_grid,
            n_quad=n_quad,
            validate=validate,
            renormalize=renormalize,
            reduction=reduction,
            seed=seed,
            resample=resample,
        )


class SSWLoss(_RandomizedLoss):
    """Loss module for :func:`tsw.ssw` (keyword arguments as there).

    Examples
    --------
    >>> import torch, tsw
    >>> loss = tsw.nn.SSWLoss(n_projections=20, seed=0)
    >>> X = torch.nn.functional.normalize(torch.randn(10, 3), dim=-1)
    >>> float(loss(X, X))
    0.0
    """

    _fn = staticmethod(ssw)

    def __init__(
        self,
        *,
        n_projections: int = 50,
        p: float = 2,
        validate: bool = True,
        renormalize: bool = False,
        reduction: str = "mean",
        seed: int | None = None,
        resample: bool = True,
    ):
        super().__init__(
            n_projections=n_projections,
            p=p,
            validate=validate,
            renormalize=renormalize,
            reduction=reduction,
            seed=seed,
            resample=resample,
        )


class SSWUnifLoss(_RandomizedUnifLoss):
    """Loss module for :func:`tsw.ssw_unif`: ``loss(X_s, a=None)``.

    Examples
    --------
    >>> import torch, tsw
    >>> loss = tsw.nn.SSWUnifLoss(n_projections=20, seed=0)
    >>> loss(torch.nn.functional.normalize(torch.randn(10, 3), dim=-1)).shape
    torch.Size([])
    """

    _fn = staticmethod(ssw_unif)

    def __init__(
        self,
        *,
        n_projections: int = 50,
        validate: bool = True,
        renormalize: bool = False,
        reduction: str = "mean",
        seed: int | None = None,
        resample: bool = True,
    ):
        super().__init__(
            n_projections=n_projections,
            validate=validate,
            renormalize=renormalize,
            reduction=reduction,
            seed=seed,
            resample=resample,
        )


class S3WLoss(_RandomizedLoss):
    """Loss module for :func:`tsw.s3w`: S3W (``n_rotations=0``) or RI-S3W (``n_rotations >= 1``).

    With ``resample=True`` every call draws new rotations and directions.

    Examples
    --------
    >>> import torch, tsw
    >>> loss = tsw.nn.S3WLoss(n_projections=50, n_rotations=5, seed=0)
    >>> X = torch.nn.functional.normalize(torch.randn(10, 3), dim=-1).requires_grad_()
    >>> Y = torch.nn.functional.normalize(torch.randn(12, 3), dim=-1)
    >>> loss(X, Y).backward()
    >>> X.grad.shape
    torch.Size([10, 3])
    """

    _fn = staticmethod(s3w)

    def __init__(
        self,
        *,
        n_projections: int = 50,
        p: float = 2,
        n_rotations: int = 0,
        compat: bool = False,
        validate: bool = True,
        renormalize: bool = False,
        reduction: str = "mean",
        seed: int | None = None,
        resample: bool = True,
    ):
        super().__init__(
            n_projections=n_projections,
            p=p,
            n_rotations=n_rotations,
            compat=compat,
            validate=validate,
            renormalize=renormalize,
            reduction=reduction,
            seed=seed,
            resample=resample,
        )


class ARIS3WLoss(_RandomizedLoss):
    """ARI-S3W: RI-S3W with its rotations drawn from a pool sampled once (Tran et al. 2024).

    At construction the module samples ``pool_size`` Haar rotations of ``R^dim``
    (:func:`tsw.sample_rotations`, in float64) into the buffer ``pool`` (saved in the
    ``state_dict``, moved and cast by ``.to()``). Every call draws ``n_rotations`` of them
    without replacement and returns :func:`tsw.s3w` with ``rotations=pool[idx]``. One CPU
    generator, seeded with ``seed`` (operating-system entropy without one), draws the
    pool, then at each call the indices ``torch.randperm(pool_size)[:n_rotations]``
    and the directions (through ``s3w``'s ``generator``). So ``ARIS3WLoss(seed=s)``
    replays::

        g = torch.Generator().manual_seed(s)
        pool = tsw.sample_rotations(dim, pool_size, generator=g, dtype=torch.float64)
        idx = torch.randperm(pool_size, generator=g)[:n_rotations]  # at every call
        tsw.s3w(X_s, X_t, a, b, rotations=pool[idx].to(X_s), generator=g, ...)

    With ``resample=False`` every call uses the generator's state right after the pool
    (the same indices and directions at every call). The official code keeps its pool in
    a global class variable and draws from the global RNG; nothing is global here.

    Parameters
    ----------
    dim : int
        Ambient dimension ``d + 1`` of the data (the pool's matrices are dim x dim).
    pool_size : int, default 100
        Size of the pool (the official default; its gradient-flow experiments use 1000).
    n_rotations : int, default 1
        Rotations per call, ``<= pool_size`` (the official default; the papers use 30
        for gradient flows, 5 for SSL and the SWAE, 50 for density estimation).
    n_projections, p, compat, validate, renormalize
        As in :func:`tsw.s3w`.
    reduction, seed, resample
        As for every loss module.

    Raises
    ------
    TypeError, ValueError
        For bad counts (``n_rotations`` must be in ``[1, pool_size]``, ``dim >= 2``) and
        at call time for data whose dimension is not ``dim``.

    Examples
    --------
    >>> import torch, tsw
    >>> loss = tsw.nn.ARIS3WLoss(dim=3, pool_size=100, n_rotations=5, seed=0)
    >>> tuple(loss.pool.shape)
    (100, 3, 3)
    >>> X = torch.nn.functional.normalize(torch.randn(10, 3), dim=-1)
    >>> float(loss(X, X))
    0.0
    """

    _fn = staticmethod(s3w)

    def __init__(
        self,
        *,
        dim: int,
        pool_size: int = 100,
        n_rotations: int = 1,
        n_projections: int = 50,
        p: float = 2,
        compat: bool = False,
        validate: bool = True,
        renormalize: bool = False,
        reduction: str = "mean",
        seed: int | None = None,
        resample: bool = True,
    ):
        super().__init__(
            n_projections=n_projections,
            p=p,
            compat=compat,
            validate=validate,
            renormalize=renormalize,
            reduction=reduction,
            seed=seed,
            resample=resample,
        )
        check_positive_int(pool_size, "pool_size")
        check_positive_int(n_rotations, "n_rotations")
        if n_rotations > pool_size:
            raise ValueError(
                f"n_rotations must be <= pool_size = {pool_size}; got n_rotations={n_rotations}"
            )
        self.dim, self.pool_size, self.n_rotations = dim, pool_size, n_rotations
        gen = torch.Generator(device="cpu")
        gen.manual_seed(seed if seed is not None else secrets.randbits(63))
        pool = sample_rotations(dim, pool_size, generator=gen, dtype=torch.float64)
        self.register_buffer("pool", pool)
        self._generator = gen if self.resample else None
        self._state = None if self.resample else gen.get_state()

    def _call_generator(self) -> torch.Generator:
        if self._generator is not None:
            return self._generator
        gen = torch.Generator(device="cpu")
        gen.set_state(self._state)
        return gen

    def forward(
        self, X_s: Tensor, X_t: Tensor, a: Tensor | None = None, b: Tensor | None = None
    ) -> Tensor:
        """ARI-S3W between ``(X_s, a)`` and ``(X_t, b)``, reduced over a batch.

        Parameters
        ----------
        X_s : Tensor of shape (N, dim) or (B, N, dim)
        X_t : Tensor of shape (M, dim) or (B, M, dim)
        a, b : Tensor of shape (N,) / (M,) or (B, N) / (B, M), optional

        Returns
        -------
        Tensor
            A 0-d tensor (unbatched input, or ``reduction`` in {"mean", "sum"}) or a
            (B,) tensor (``reduction="none"``).
        """
        if (
            isinstance(X_s, Tensor)
            and X_s.ndim in (2, 3)
            and X_s.shape[-1] > 0
            and X_s.shape[-1] != self.dim
        ):
            raise ValueError(
                f"X_s must have dim={self.dim} coordinates (the dimension of the rotation "
                f"pool); got X_s.shape={tuple(X_s.shape)}"
            )
        gen = self._call_generator()
        idx = torch.randperm(self.pool_size, generator=gen)[: self.n_rotations]
        rotations = self.pool[idx.to(self.pool.device)]
        if isinstance(X_s, Tensor) and X_s.is_floating_point():
            rotations = rotations.to(device=X_s.device, dtype=X_s.dtype)
        return self._reduce(s3w(X_s, X_t, a, b, **self.kwargs, rotations=rotations, generator=gen))

    def extra_repr(self) -> str:
        """Show the pool's dimension and size, then the other hyper-parameters."""
        head = f"dim={self.dim}, pool_size={self.pool_size}, n_rotations={self.n_rotations}"
        return ", ".join([head, super().extra_repr()])


class S3WUnifLoss(_RandomizedUnifLoss):
    """Loss module for :func:`tsw.s3w_unif`: ``loss(X_s, a=None)``.

    Examples
    --------
    >>> import torch, tsw
    >>> loss = tsw.nn.S3WUnifLoss(n_samples=500, n_rotations=3, seed=0, reduction="none")
    >>> loss(torch.nn.functional.normalize(torch.randn(4, 10, 3), dim=-1)).shape
    torch.Size([4])
    """

    _fn = staticmethod(s3w_unif)

    def __init__(
        self,
        *,
        n_samples: int = 1000,
        n_projections: int = 50,
        p: float = 2,
        n_rotations: int = 0,
        compat: bool = False,
        validate: bool = True,
        renormalize: bool = False,
        reduction: str = "mean",
        seed: int | None = None,
        resample: bool = True,
    ):
        super().__init__(
            n_samples=n_samples,
            n_projections=n_projections,
            p=p,
            n_rotations=n_rotations,
            compat=compat,
            validate=validate,
            renormalize=renormalize,
            reduction=reduction,
            seed=seed,
            resample=resample,
        )
