"""``torch.nn.Module`` losses: hyper-parameters in ``__init__``, tensors in ``forward``.

Every loss is built from the function of the same name by one mechanism
(:func:`_loss_from`): its ``__init__`` takes exactly the function's keyword options (names
and defaults, read from the function's signature, so they cannot drift), except the
randomness (``seed``, ``generator``), explicit slices (``trees``, ``projections``,
``rotations``) and ``log`` (a loss returns a tensor), plus ``reduction``, ``seed`` and
``resample``; its Parameters section is the function's. Its value equals the function's
for the same trees. Options are attributes: assign a new value to follow a schedule
(``loss.mass_t = 1.02``); an ``nn.Parameter`` or ``nn.Module`` option is registered
(trained through the loss, moved by ``.to()``), and a plain tensor option is a
non-persistent buffer (moved by ``.to()``, keeping its precision under ``.to(dtype)``
and ``.half()``; assign a tensor to change it). Tensor options are cast to the data's
dtype and device at every call. Options are checked at construction and at every
assignment, by the same check functions the function runs (its ``option_checks``).

Randomness:

* ``resample=True`` (default): new trees or projections at every call. With
  ``seed=None`` they come from operating-system entropy; with ``seed=s`` from a
  generator owned by the module, so a training run replays exactly from ``s``.
* ``resample=False``: the same random draw (directions, root offsets) at every call.
  The roots still follow the data's centre unless ``center`` is given, so the
  objective is a deterministic function of the inputs.
* ``state_dict()`` holds the random stream (the generator's state, the fixed seed):
  a module restored with ``load_state_dict`` resumes the stream where the saved one
  was.
"""

from __future__ import annotations

import inspect
import re
import secrets
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import Tensor, nn

from tsw.core._api import LOW_PRECISION
from tsw.core._random import check_seed
from tsw.core._validation import check_bool, check_choice, check_positive_int
from tsw.euclidean._circular_tsw import circular_tsw
from tsw.euclidean._db_tsw import db_tsw
from tsw.euclidean._partial_tsw import partial_tsw
from tsw.euclidean._spatial_tsw import spatial_tsw
from tsw.euclidean._tsw_sl import tsw_sl
from tsw.euclidean.mappings import resolve_mapping
from tsw.sliced._s3w import s3w, s3w_unif, sample_rotations
from tsw.sliced._ssw import ssw, ssw_unif
from tsw.sliced._sw import max_sw, sw
from tsw.sphere._spatial_stsw import resolve_sphere_mapping, spatial_stsw
from tsw.sphere._stsw import stsw, stsw_unif

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

#: keyword options of a function that a loss module does not take
NOT_OPTIONS = frozenset({"seed", "generator", "trees", "projections", "rotations", "log"})

_COMMON_DOC = """\
reduction : {"mean", "sum", "none"}, default "mean"
    Reduction over a batch of problems; unbatched inputs give a 0-d tensor.
seed : int, optional
    With ``resample=True``, seeds a generator owned by the module (a run replays
    exactly); with ``resample=False``, the one draw used at every call. Without it,
    operating-system entropy.
resample : bool, default True
    New random slices at every call; ``False`` reuses one draw."""


class _Loss(nn.Module):
    """What every loss shares: the options as attributes, randomness, batch reduction."""

    _fn: Callable[..., Tensor]
    _signature_options: tuple[inspect.Parameter, ...] = ()
    _options: tuple[str, ...] = ()
    _one_measure: bool = False

    def __init__(
        self,
        *,
        reduction: str = "mean",
        seed: int | None = None,
        resample: bool = True,
        **options: Any,
    ) -> None:
        super().__init__()
        self.reduction: str = check_choice(reduction, "reduction", ("mean", "sum", "none"))
        self.seed: int | None = check_seed(seed)
        seed = self.seed
        self.resample: bool = check_bool(resample, "resample")
        bound = _bind_options(type(self), options)
        checks = self._checks()
        for name, value in bound.items():  # the function's own checks, at construction
            if name in checks:
                checks[name](value, name)
        for name, value in bound.items():
            setattr(self, name, value)
        self._generator: torch.Generator | None = None
        if self.resample and seed is not None:
            self._generator = torch.Generator(device="cpu")
            self._generator.manual_seed(seed)
        self._fixed_seed = None
        if not self.resample:
            self._fixed_seed = seed if seed is not None else secrets.randbits(63)

    @classmethod
    def _checks(cls) -> dict[str, Any]:
        """Return the function's checks of its options (``option_checks``), by name."""
        return getattr(cls._fn, "option_checks", {})

    def __setattr__(self, name: str, value: Any) -> None:
        """Set an attribute; an option is checked first (``loss.p = 0.5`` raises here).

        An option may change kind in any direction: an ``nn.Parameter`` is registered as
        a parameter, an ``nn.Module`` as a submodule, another tensor as a non-persistent
        buffer, anything else as a plain attribute (the previous registration goes).
        """
        if name not in type(self)._options:
            super().__setattr__(name, value)
            return
        checks = self._checks()
        if name in checks:
            checks[name](value, name)
        for store in (self._parameters, self._buffers, self._modules):
            store.pop(name, None)
        self._non_persistent_buffers_set.discard(name)
        self.__dict__.pop(name, None)
        if isinstance(value, Tensor) and not isinstance(value, nn.Parameter):
            self.register_buffer(name, value, persistent=False)
        else:
            super().__setattr__(name, value)

    @property
    def options(self) -> dict[str, Any]:
        """The keyword options passed to the function at the next call."""
        return {name: getattr(self, name) for name in self._options}

    def _call_options(self, X: object) -> dict[str, Any]:
        """Return the options, the tensor ones cast to the dtype and device of the data.

        So ``.to(torch.float64)``, ``.half()`` or float64 data never leave a tensor
        option in another precision than the data (a differentiable cast: an
        ``nn.Parameter`` option still receives its gradient).
        """
        options = self.options
        if not isinstance(X, Tensor) or not X.is_floating_point():
            return options
        dtype = torch.float32 if X.dtype in LOW_PRECISION else X.dtype
        for name, value in options.items():
            if isinstance(value, Tensor) and value.is_floating_point():
                options[name] = value.to(dtype=dtype, device=X.device)
        return options

    def _apply(self, fn: Callable, recurse: bool = True) -> nn.Module:
        """Apply ``.to()``, ``.half()``, ...: tensor options and pools move and keep their dtype.

        They are cast to the data's dtype at every call (:meth:`_call_options`); a cast
        here would only lose precision (``.half()`` rounds an ``alpha`` off the
        simplex, a rotation pool off orthogonality).
        """
        kept = {
            name: t
            for name, t in self._buffers.items()
            if t is not None and t.is_floating_point() and name in self._keep_dtype()
        }
        out = super()._apply(fn, recurse)
        for name, t in kept.items():
            moved = self._buffers[name]
            if moved is not None and moved.dtype != t.dtype:
                self._buffers[name] = t.to(device=moved.device)
        return out

    def _keep_dtype(self) -> set[str]:
        return set(self._options)

    def get_extra_state(self) -> dict[str, Any]:
        """Return the random stream, saved in ``state_dict()``: a restored module resumes it.

        The state of the module's generator (``seed=s``, ``resample=True``) and the seed
        of ``resample=False``.
        """
        gen = self._generator
        return {
            "generator": None if gen is None else gen.get_state(),
            "fixed_seed": self._fixed_seed,
        }

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_extra_state` saved."""
        gen_state = state.get("generator")
        if gen_state is not None:
            if self._generator is None:
                self._generator = torch.Generator(device="cpu")
            self._generator.set_state(gen_state)
        if state.get("fixed_seed") is not None:
            self._fixed_seed = state["fixed_seed"]

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
        fn = type(self)._fn
        options = self._call_options(X_s)
        return self._reduce(fn(X_s, X_t, a, b, **options, **self._randomness()))

    def extra_repr(self) -> str:
        items = []
        for name, value in self.options.items():
            if isinstance(value, nn.Module):
                continue
            if isinstance(value, Tensor):
                value = value.tolist() if value.numel() <= 8 else f"Tensor{tuple(value.shape)}"
            items.append(f"{name}={value!r}")
        items += [f"reduction={self.reduction!r}", f"resample={self.resample}"]
        if self.seed is not None:
            items.append(f"seed={self.seed}")
        return ", ".join(items)


class _UnifLoss(_Loss):
    """A distance to the uniform measure on the sphere: ``forward(X_s, a=None)``."""

    _one_measure = True

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
        fn = type(self)._fn
        return self._reduce(fn(X_s, a, **self._call_options(X_s), **self._randomness()))


#: the measures: ``forward``'s arguments, not options
MEASURES = frozenset({"X_s", "X_t", "a", "b"})


def function_options(
    fn: Callable, exclude: frozenset[str] = NOT_OPTIONS
) -> list[inspect.Parameter]:
    """List the parameters of ``fn`` that a loss module takes, in order, as keyword-only."""
    params = inspect.signature(fn).parameters.values()
    return [
        q.replace(kind=q.KEYWORD_ONLY)
        for q in params
        if q.name not in MEASURES and q.name not in exclude
    ]


def _bind_options(cls: type[_Loss], given: dict[str, Any]) -> dict[str, Any]:
    """Check option names against the class's signature and fill in the defaults."""
    params = {q.name: q for q in cls._signature_options}
    unknown = sorted(set(given) - set(params))
    if unknown:
        raise TypeError(
            f"{cls.__name__} got unexpected keyword argument(s) {', '.join(unknown)}; its "
            f"options are {', '.join(params)}, reduction, seed and resample"
        )
    out = {}
    for name, q in params.items():
        if name in given:
            out[name] = given[name]
        elif q.default is inspect.Parameter.empty:
            raise TypeError(f"{cls.__name__} missing required keyword argument {name!r}")
        else:
            out[name] = q.default
    return out


def _parameter_docs(fn: Callable, names: set[str]) -> str:
    """Return the entries of ``fn``'s numpydoc Parameters section that document ``names``."""
    doc = inspect.getdoc(fn) or ""
    match = re.search(r"^Parameters\n-+\n(.*?)(?=^\w[^\n]*\n-+\n|\Z)", doc, re.S | re.M)
    entries = re.split(r"\n(?=\S)", match.group(1).strip()) if match else []
    keep = []
    for entry in entries:
        head = entry.split("\n", 1)[0]
        listed = [n.strip() for n in head.split(" : ", 1)[0].split(",")]
        if any(n in names for n in listed):
            keep.append(entry)
    return "\n".join(keep)


def _loss_from(
    fn: Callable,
    name: str,
    summary: str,
    examples: str,
    *,
    base: type[_Loss] = _Loss,
    exclude: frozenset[str] = NOT_OPTIONS,
    check: Callable[[dict[str, Any]], None] | None = None,
) -> type[_Loss]:
    """Build the loss class ``name`` from the function ``fn`` (options, signature, docs)."""
    options = function_options(fn, exclude)
    own = inspect.signature(_Loss.__init__).parameters
    common = [own[k] for k in ("reduction", "seed", "resample")]
    signature = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD), *options, *common]
    )

    def init(self, **kwargs: Any) -> None:
        base.__init__(self, **kwargs)
        if check is not None:
            check(self.options)

    init.__signature__ = signature  # type: ignore[attr-defined]
    init.__doc__ = f"See :class:`{name}`."
    params = _parameter_docs(fn, {q.name for q in options})
    doc = (
        f"{summary}\n\nLoss module for :func:`tsw.{fn.__name__}`: the function's options in "
        "``__init__``, tensors in ``forward``.\n\nParameters\n----------\n"
        f"{params}\n{_COMMON_DOC}\n\nExamples\n--------\n{inspect.cleandoc(examples)}\n"
    )
    namespace = {
        "__init__": init,
        "__doc__": doc,
        "__module__": __name__,
        "__qualname__": name,
        "_fn": staticmethod(fn),
        "_options": tuple(q.name for q in options),
        "_signature_options": tuple(options),
    }
    return type(name, (base,), namespace)


def _check_spatial(options: dict[str, Any]) -> None:
    # bad map options raise here, not at the first call
    resolve_mapping(options["mapping"], options["degree"], options["beta"])


def _check_sphere_mapping(options: dict[str, Any]) -> None:
    resolve_sphere_mapping(options["mapping"])


TSWSLLoss: type[_Loss] = _loss_from(
    tsw_sl,
    "TSWSLLoss",
    "TSW-SL loss: tree-sliced Wasserstein on systems of lines.",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.TSWSLLoss(n_trees=25, n_lines=4, seed=0)
    >>> X = torch.randn(10, 2, requires_grad=True)
    >>> loss(X, torch.randn(12, 2)).backward()
    >>> X.grad.shape
    torch.Size([10, 2])
    """,
)

DbTSWLoss: type[_Loss] = _loss_from(
    db_tsw,
    "DbTSWLoss",
    "Db-TSW loss (Db-TSW⊥ with ``orthogonal=True``): distance-based tree-sliced Wasserstein.",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.DbTSWLoss(n_trees=50, n_lines=4, delta=2.0, seed=0, reduction="none")
    >>> loss(torch.randn(3, 10, 5), torch.randn(3, 8, 5)).shape
    torch.Size([3])
    """,
)

CircularTSWLoss: type[_Loss] = _loss_from(
    circular_tsw,
    "CircularTSWLoss",
    "CircularTSW loss: the circular Radon transform on systems of lines.",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.CircularTSWLoss(radius=0.0, n_trees=50, n_lines=4, seed=0)
    >>> X = torch.randn(10, 3, requires_grad=True)
    >>> loss(X, torch.randn(12, 3)).backward()
    >>> X.grad.shape
    torch.Size([10, 3])
    """,
)

SpatialTSWLoss: type[_Loss] = _loss_from(
    spatial_tsw,
    "SpatialTSWLoss",
    "SpatialTSW loss: Db-TSW on an injective map of the supports; an ``nn.Module`` mapping "
    "is registered as the submodule ``mapping`` (its parameters train through the loss).",
    """
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
    """,
    check=_check_spatial,
)

PartialTSWLoss: type[_Loss] = _loss_from(
    partial_tsw,
    "PartialTSWLoss",
    "PartialTSW loss for measures of unequal mass. ``mass_s`` and ``mass_t`` are read at "
    "every call: assign a new float to follow a schedule (``loss.mass_t = 1.02``), or pass "
    "an ``nn.Parameter`` to learn a mass (it is then a parameter of the module).",
    """
    >>> import torch, tsw
    >>> mass = torch.nn.Parameter(torch.tensor(0.8))
    >>> loss = tsw.nn.PartialTSWLoss(mass_t=mass, n_trees=20, n_lines=3, seed=0)
    >>> loss(torch.randn(10, 3), torch.randn(12, 3)).backward()
    >>> mass.grad is not None, [n for n, _ in loss.named_parameters()]
    (True, ['mass_t'])
    """,
)

SWLoss: type[_Loss] = _loss_from(
    sw,
    "SWLoss",
    "Sliced Wasserstein loss (orthogonal SW with ``orthogonal=True``).",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.SWLoss(n_projections=100, p=2, seed=0)
    >>> float(loss(torch.zeros(4, 3), torch.zeros(5, 3)))
    0.0
    """,
)

MaxSWLoss: type[_Loss] = _loss_from(
    max_sw,
    "MaxSWLoss",
    "Max-sliced Wasserstein loss (the direction by Riemannian ascent at every call).",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.MaxSWLoss(n_iter=10, seed=0)
    >>> loss(torch.zeros(4, 3), torch.ones(5, 3)).item() > 0
    True
    """,
)

STSWLoss: type[_Loss] = _loss_from(
    stsw,
    "STSWLoss",
    "STSW loss between measures on the sphere.",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.STSWLoss(n_trees=50, n_lines=5, seed=0)
    >>> X = torch.nn.functional.normalize(torch.randn(10, 3), dim=-1).requires_grad_()
    >>> Y = torch.nn.functional.normalize(torch.randn(12, 3), dim=-1)
    >>> loss(X, Y).backward()
    >>> X.grad.shape
    torch.Size([10, 3])
    """,
)

SpatialSTSWLoss: type[_Loss] = _loss_from(
    spatial_stsw,
    "SpatialSTSWLoss",
    "SpatialSTSW loss; an ``nn.Module`` mapping is registered as the submodule ``mapping``.",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.SpatialSTSWLoss(n_trees=20, seed=0)
    >>> X = torch.nn.functional.normalize(torch.randn(10, 3), dim=-1)
    >>> Y = torch.nn.functional.normalize(torch.randn(12, 3), dim=-1)
    >>> loss(X, Y).item() > 0
    True
    """,
    check=_check_sphere_mapping,
)

STSWUnifLoss: type[_Loss] = _loss_from(
    stsw_unif,
    "STSWUnifLoss",
    "STSW to the uniform measure on the sphere (a uniformity regulariser): ``loss(X_s, a=None)``.",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.STSWUnifLoss(n_trees=50, seed=0, reduction="none")
    >>> loss(torch.nn.functional.normalize(torch.randn(4, 10, 3), dim=-1)).shape
    torch.Size([4])
    """,
    base=_UnifLoss,
)

SSWLoss: type[_Loss] = _loss_from(
    ssw,
    "SSWLoss",
    "Spherical sliced Wasserstein loss (POT's SSW).",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.SSWLoss(n_projections=20, seed=0)
    >>> X = torch.nn.functional.normalize(torch.randn(10, 3), dim=-1)
    >>> float(loss(X, X))
    0.0
    """,
)

SSWUnifLoss: type[_Loss] = _loss_from(
    ssw_unif,
    "SSWUnifLoss",
    "SSW_2 to the uniform measure on the sphere: ``loss(X_s, a=None)``.",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.SSWUnifLoss(n_projections=20, seed=0)
    >>> loss(torch.nn.functional.normalize(torch.randn(10, 3), dim=-1)).shape
    torch.Size([])
    """,
    base=_UnifLoss,
)

S3WLoss: type[_Loss] = _loss_from(
    s3w,
    "S3WLoss",
    "S3W loss (``n_rotations=0``) or RI-S3W (``n_rotations >= 1``); with ``resample=True`` "
    "every call draws new rotations and directions.",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.S3WLoss(n_projections=50, n_rotations=5, seed=0)
    >>> X = torch.nn.functional.normalize(torch.randn(10, 3), dim=-1).requires_grad_()
    >>> Y = torch.nn.functional.normalize(torch.randn(12, 3), dim=-1)
    >>> loss(X, Y).backward()
    >>> X.grad.shape
    torch.Size([10, 3])
    """,
)

S3WUnifLoss: type[_Loss] = _loss_from(
    s3w_unif,
    "S3WUnifLoss",
    "S3W / RI-S3W to a sample of the uniform measure on the sphere: ``loss(X_s, a=None)``.",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.S3WUnifLoss(n_samples=500, n_rotations=3, seed=0, reduction="none")
    >>> loss(torch.nn.functional.normalize(torch.randn(4, 10, 3), dim=-1)).shape
    torch.Size([4])
    """,
    base=_UnifLoss,
)

_S3WPoolBase: type[_Loss] = _loss_from(
    s3w,
    "_S3WPoolBase",
    "S3W with rotations from a pool.",
    "",
    exclude=NOT_OPTIONS | {"n_rotations"},
)


class ARIS3WLoss(_S3WPoolBase):  # type: ignore[valid-type,misc]  # a class built at run time
    """ARI-S3W: RI-S3W with its rotations drawn from a pool sampled once (Tran et al. 2024).

    At construction the module samples ``pool_size`` Haar rotations of ``R^dim``
    (:func:`tsw.sample_rotations`, in float64) into the buffer ``pool`` (saved in the
    ``state_dict``, moved by ``.to()``; it stays in float64 under ``.to(dtype)`` and
    ``.half()``, and is cast to the data's dtype at each call). Every call draws
    ``n_rotations`` of them without replacement and returns :func:`tsw.s3w` with
    ``rotations=pool[idx]``. One CPU generator, seeded with ``seed`` (operating-system
    entropy without one), draws the pool, then at each call the indices
    ``torch.randperm(pool_size)[:n_rotations]`` and the directions (through ``s3w``'s
    ``generator``). So ``ARIS3WLoss(seed=s)`` replays (and a state_dict round trip
    resumes the generator)::

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
    n_projections, p, compat, sampling, validate, renormalize, power
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

    pool: Tensor  # (pool_size, dim, dim), a buffer

    dim: int
    pool_size: int
    n_rotations: int

    def __init__(
        self, *, dim: int, pool_size: int = 100, n_rotations: int = 1, **options: Any
    ) -> None:
        super().__init__(**options)
        seed = self.seed
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
        if self._state is not None:  # resample=False: replay the state saved at __init__
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
        options = self._call_options(X_s)
        if isinstance(X_s, Tensor) and X_s.is_floating_point():
            dtype = torch.float32 if X_s.dtype in LOW_PRECISION else X_s.dtype
            rotations = rotations.to(device=X_s.device, dtype=dtype)
        value = s3w(X_s, X_t, a, b, **options, rotations=rotations, generator=gen)
        return self._reduce(cast(Tensor, value))  # tensors in, no log: a tensor

    def _keep_dtype(self) -> set[str]:
        return {*self._options, "pool"}

    def get_extra_state(self) -> dict[str, Any]:
        """Return the random stream as every loss does, and the state of ``resample=False``."""
        state = super().get_extra_state()
        state["state"] = self._state
        return state

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_extra_state` saved."""
        super().set_extra_state(state)
        if state.get("state") is not None:
            self._state = state["state"]

    def extra_repr(self) -> str:
        """Show the pool's dimension and size, then the other hyper-parameters."""
        head = f"dim={self.dim}, pool_size={self.pool_size}, n_rotations={self.n_rotations}"
        return ", ".join([head, super().extra_repr()])


_pool_options = [
    inspect.Parameter("dim", inspect.Parameter.KEYWORD_ONLY, annotation="int"),
    inspect.Parameter("pool_size", inspect.Parameter.KEYWORD_ONLY, default=100, annotation="int"),
    inspect.Parameter("n_rotations", inspect.Parameter.KEYWORD_ONLY, default=1, annotation="int"),
]
_base = inspect.signature(_S3WPoolBase.__init__).parameters.values()
_self, *_rest = _base
setattr(ARIS3WLoss.__init__, "__signature__", inspect.Signature([_self, *_pool_options, *_rest]))  # noqa: B010
del _base, _self, _rest, _pool_options


def __dir__() -> list[str]:
    return list(__all__)
