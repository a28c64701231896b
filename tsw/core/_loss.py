"""The loss modules' machinery: a ``torch.nn.Module`` class built from a distance function.

:func:`_loss_from` makes the loss class of a public distance (its options, signature and
docs read from the function); :class:`_Loss` and :class:`_UnifLoss` hold what every loss
shares (the options as attributes, the random stream, the batch reduction). It knows no
method: :mod:`tsw.nn` builds one loss per distance with it, and its module docstring
says what a loss does.
"""

from __future__ import annotations

import inspect
import re
import secrets
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from tsw.core._api import LOW_PRECISION, MEASURES, unknown_options
from tsw.core._random import check_seed, refuse_tracing
from tsw.core._validation import check_bool, check_choice

__all__ = ["NOT_OPTIONS", "_Loss", "_UnifLoss", "_loss_from", "function_options"]

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
    New random slices at every call; ``False`` reuses one draw. Roots that follow the
    data (a tree loss's ``center="mean"`` or ``"median"``) follow a detached centre: the
    gradient holds them fixed, and is the value's derivative only with ``center`` given
    as a tensor."""


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
        refuse_tracing(f"tsw.nn.{type(self).__name__}")
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
        refuse_tracing(f"tsw.nn.{type(self).__name__}")
        fn = type(self)._fn
        return self._reduce(fn(X_s, a, **self._call_options(X_s), **self._randomness()))


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
    unknown = {k: v for k, v in given.items() if k not in params}
    if unknown:
        options = [*params, "reduction", "seed", "resample"]
        raise unknown_options(f"tsw.nn.{cls.__name__}", unknown, options)
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
        "__module__": "tsw.nn",  # every loss class is public there
        "__qualname__": name,
        "_fn": staticmethod(fn),
        "_options": tuple(q.name for q in options),
        "_signature_options": tuple(options),
    }
    return type(name, (base,), namespace)
