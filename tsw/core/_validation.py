"""Input checks shared by every distance in :mod:`tsw`.

Shape, type, dtype and device checks are always performed: they read only metadata
and never synchronise a GPU. *Value* checks (NaN/Inf, negative weights, unequal
totals, unit directions) read tensor contents, which forces a device
synchronisation; every public function takes ``validate=True`` to run them and
``validate=False`` to skip them in a hot training loop.
"""

from __future__ import annotations

import math
import numbers
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from types import FrameType, MappingProxyType
from typing import NamedTuple, TypeAlias, cast

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "COMMON_CHECKS",
    "SAMPLINGS",
    "Check",
    "Measures",
    "as_real",
    "check_bool",
    "check_choice",
    "check_chunk_size",
    "check_dtype_device",
    "check_equal_totals",
    "check_mass",
    "check_measure",
    "check_measures",
    "check_measures_on_sphere",
    "check_nonnegative",
    "check_nonnegative_int",
    "check_on_sphere",
    "check_orthogonal",
    "check_p",
    "check_positive_int",
    "check_sampling",
    "check_tensor",
    "check_unit",
    "mass_rtol",
    "sphere_tol",
    "warn",
]

SUPPORTED_DTYPES = (torch.float32, torch.float64)


class Measures(NamedTuple):
    """Validated pair of discrete measures, always batched internally.

    Attributes
    ----------
    X_s, X_t : Tensor of shape (B, N, d) and (B, M, d)
    a, b : Tensor of shape (B, N) and (B, M)
        Non-negative weights (uniform ``1/N`` and ``1/M`` when not given).
    batched : bool
        Whether the caller passed batched inputs; unbatched calls return 0-d tensors.
    sq : (Tensor of shape (B, N), Tensor of shape (B, M)) or None
        Set by a front end that translated the supports (and the slices with them),
        such as :func:`tsw.euclidean._lines.centered`: the squared norms of the
        translated points, computed once for all blocks; None otherwise.
    shift : Tensor of shape (B|1, 1, d) or None
        Set with ``sq`` by a front end that translates on the fly: the points the
        slices see are ``X - shift`` (``shift`` detached), formed a chunk of atoms at a
        time by the products that read them (:class:`tsw.core._gradients.Products`),
        so that no translated (B, N, d) copy is held; ``X_s`` and ``X_t`` are then the
        supports as given. None: the supports are used as they are.
    """

    X_s: Tensor
    X_t: Tensor
    a: Tensor
    b: Tensor
    batched: bool
    sq: tuple[Tensor, Tensor] | None = None
    shift: Tensor | None = None


#: the directory of the package: warnings point at the first frame outside it
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """Warn at the caller's line: the first frame outside the package."""
    level, frame = 2, cast("FrameType | None", sys._getframe(1))
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, category, stacklevel=level)


def mass_rtol(dtype: torch.dtype) -> float:
    """Relative tolerance used to compare total masses in ``dtype``."""
    return 1e3 * torch.finfo(dtype).eps


def check_tensor(x: object, name: str) -> Tensor:
    """Raise ``TypeError`` unless ``x`` is a dense floating tensor of a supported dtype."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    if x.layout != torch.strided:
        raise TypeError(
            f"{name} must be a dense (strided) tensor; got a tensor of layout {x.layout} "
            f"(call {name}.to_dense())"
        )
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} must have dtype torch.float32 or torch.float64; got {x.dtype}")
    return x


def check_dtype_device(
    dtype: object, device: object, default_dtype: torch.dtype | None = None
) -> tuple[torch.dtype, torch.device]:
    """Check the ``dtype`` and ``device`` arguments of a sampler; ``None`` takes the defaults.

    ``dtype`` must be ``torch.float32`` or ``torch.float64`` (``None``: ``default_dtype``,
    else ``torch.get_default_dtype()``); ``device`` a ``torch.device``, a device string
    or ``None`` (the CPU).
    """
    if dtype is None:
        dtype = torch.get_default_dtype() if default_dtype is None else default_dtype
    if not isinstance(dtype, torch.dtype):
        raise TypeError(
            f"dtype must be torch.float32, torch.float64 or None; got {type(dtype).__name__} "
            f"{dtype!r}"
        )
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"dtype must be torch.float32 or torch.float64; got {dtype}")
    if device is None:
        return dtype, torch.device("cpu")
    if not isinstance(device, str | torch.device):
        raise TypeError(
            f"device must be a torch.device, a device string or None; got {type(device).__name__}"
        )
    try:
        return dtype, torch.device(device)
    except RuntimeError as err:  # torch's message for a malformed string
        raise ValueError(f"device must name a torch device; got {device!r} ({err})") from None


def check_unit(x: Tensor, name: str, *, dim: int = -1, what: str = "rows") -> None:
    """Raise ``ValueError`` unless ``x`` is finite with unit vectors along ``dim`` (a value check).

    Accepts ``| ||v|| - 1 | <=`` :func:`sphere_tol` (1e-6 in float64, 1.2e-4 in float32),
    so that directions normalised in float32 and cast to float64 pass; a zero vector, a
    NaN or an Inf raises.
    """
    check_finite(x, name)
    norms = torch.linalg.vector_norm(x.detach(), dim=dim)
    err = (norms - 1).abs()
    tol = sphere_tol(x.dtype)
    if norms.numel() and bool((err > tol).any()):
        raise ValueError(
            f"{name} must have unit-norm {what} (norm 1 up to {tol:.1e} in {x.dtype}); got "
            f"one of norm {norms.reshape(-1)[err.argmax()].item():.6g}"
        )


def check_nonnegative(t: Tensor, name: str) -> None:
    """Raise ``ValueError`` unless ``t`` is finite and non-negative (a value check)."""
    check_finite(t, name)
    if bool((t < 0).any()):
        raise ValueError(f"{name} must be non-negative; got a minimum of {float(t.min()):.6g}")


def check_equal_totals(
    totals: tuple[Tensor | float, Tensor | float],
    names: tuple[str, str],
    dtype: torch.dtype,
    *,
    why: str = "",
    batched: bool = False,
) -> None:
    """Raise ``ValueError`` unless two total masses agree to :func:`mass_rtol` (relative).

    ``totals`` are numbers or broadcastable tensors (one total per batch item); the
    message names ``names`` (e.g. ``("a.sum()", "b.sum()")``), ``why`` the requirement,
    and with ``batched`` the first item where they differ most.
    """
    sa, sb = (torch.as_tensor(t, dtype=dtype) for t in totals)
    sa, sb = torch.broadcast_tensors(sa, sb)
    gap = (sa - sb).abs()
    if bool((gap > mass_rtol(dtype) * torch.maximum(sa.abs(), sb.abs())).any()):
        worst = int(gap.reshape(-1).argmax())
        x, y = sa.reshape(-1)[worst].item(), sb.reshape(-1)[worst].item()
        first, second = (n.removesuffix(".sum()") for n in names)
        raise ValueError(
            f"{first} and {second} must have equal total mass{why}; got "
            f"{names[0]}={x:.10g} and {names[1]}={y:.10g}"
            + (f" at batch index {worst}" if batched else "")
        )


def check_stack(
    x: object, name: str, trailing: tuple[int, ...], shape: str, X: Tensor, batched: bool
) -> Tensor:
    """Check an explicit stack of ``K >= 1`` arrays of shape ``trailing`` against data ``X``.

    Accepts ``(K, *trailing)``, or ``(B, K, *trailing)`` with ``B = X.shape[0]`` when
    ``batched``, in the dtype and on the device of ``X``. ``shape`` spells the unbatched
    form for messages, e.g. ``"(L, d+1, 2) with d+1=3"``.
    """
    x = check_tensor(x, name)
    n = len(trailing)
    ok = x.ndim == n + 1 or (batched and x.ndim == n + 2)
    ok = ok and tuple(x.shape[-n:]) == trailing and x.shape[-n - 1] > 0
    if x.ndim == n + 2:
        ok = ok and x.shape[0] == X.shape[0]
    if not ok:
        form = shape.partition(" with ")[0]
        raise ValueError(
            f"{name} must have shape {shape}"
            + (f" or (B, {form[1:]}" if batched else "")
            + f"; got {name}.shape={tuple(x.shape)}"
        )
    if x.device != X.device or x.dtype != X.dtype:
        raise ValueError(
            f"{name} must have the dtype and device of X_s ({X.dtype} on {X.device}); "
            f"got {x.dtype} on {x.device}"
        )
    return x


def _integer(value: object) -> int | None:
    """``value`` as a Python int if it is an integer (numpy's, or a 0-d integer tensor)."""
    if isinstance(value, bool | np.bool_):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if not isinstance(value, Tensor) or value.ndim != 0:
        return None
    dtype = value.dtype
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        return None
    return int(value)


def as_real(value: object) -> float | None:
    """``value`` as a Python float if it is a real number (numpy's too), else None."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        return None
    return float(value)


def check_positive_int(value: object, name: str) -> int:
    """Return ``value`` as an int if it is an integer >= 1 (numpy's or torch's too), else raise."""
    number = _integer(value)
    if number is None:
        raise TypeError(f"{name} must be an int >= 1; got {type(value).__name__}")
    if number < 1:
        raise ValueError(f"{name} must be an int >= 1; got {number}")
    return number


def check_nonnegative_int(value: object, name: str) -> int:
    """Return ``value`` as an int if it is an integer >= 0 (numpy's or torch's too), else raise."""
    number = _integer(value)
    if number is None:
        raise TypeError(f"{name} must be an int >= 0; got {type(value).__name__}")
    if number < 0:
        raise ValueError(f"{name} must be an int >= 0; got {number}")
    return number


def check_p(p: object) -> float:
    """Return ``p`` as a float if it is a real number >= 1 (numpy's too), else raise."""
    number = as_real(p)
    if number is None:
        raise TypeError(f"p must be a real number >= 1; got {type(p).__name__}")
    if not math.isfinite(number) or number < 1:
        raise ValueError(f"p must be a finite real number >= 1; got {number}")
    return number


def check_nonnegative_float(value: object, name: str) -> float:
    """Return ``value`` as a float if it is a finite real number >= 0, else raise."""
    number = as_real(value)
    if number is None:
        raise TypeError(f"{name} must be a real number >= 0; got {type(value).__name__}")
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{name} must be a finite real number >= 0; got {number}")
    return number


def check_bool(value: object, name: str) -> bool:
    """Return ``value`` if it is a bool (numpy's ``bool_`` too), else raise ``TypeError``.

    A string such as ``"False"`` is truthy in Python: it raises rather than meaning True.
    """
    if isinstance(value, np.bool_):
        return bool(value)
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False; got {type(value).__name__}")
    return value


def check_mass(value: object, name: str, X: Tensor, batched: bool, validate: bool) -> Tensor:
    """Check a total mass: a real number or a tensor of shape () (or (B,) for batched data).

    Returned as a tensor of ``X``'s dtype and device, shape () or (B,) (a tensor input is
    returned as is, so that gradients reach it). Negative, NaN and Inf masses raise (a
    value check for tensors, skipped with ``validate=False``).
    """
    if isinstance(value, Tensor):
        check_mass_number(value, name)
        check_same_device_dtype(X, "X_s", value, name)
        B = X.shape[0]
        if value.shape not in (((), (B,)) if batched else ((),)):
            form = f"() or (B,) = ({B},)" if batched else "()"
            raise ValueError(
                f"{name} must be a real number or a tensor of shape {form}; got "
                f"{name}.shape={tuple(value.shape)}"
            )
        if validate:
            check_nonnegative(value, name)
        return value
    return torch.tensor(check_mass_number(value, name), dtype=X.dtype, device=X.device)


def check_mass_number(value: object, name: str) -> float:
    """Check the part of :func:`check_mass` that needs no data: a finite real >= 0.

    A tensor passes when it is floating (its shape and values are checked against the
    data by :func:`check_mass`).
    """
    if isinstance(value, Tensor):
        if not value.dtype.is_floating_point:
            raise TypeError(
                f"{name} must be a real number or a floating tensor; got a tensor of "
                f"dtype {value.dtype}"
            )
        return value  # type: ignore[return-value]
    number = as_real(value)
    if number is None:
        raise TypeError(
            f"{name} must be a real number >= 0 or a tensor; got {type(value).__name__}"
        )
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{name} must be a finite real number >= 0; got {number}")
    return number


def check_chunk_size(value: object, name: str = "chunk_size") -> int | str | None:
    """Return ``value`` if it is None, ``"auto"`` or an int >= 1, else raise."""
    if value is None or (isinstance(value, str) and value == "auto"):
        return value
    if isinstance(value, str):
        raise ValueError(f"{name} must be an int >= 1, 'auto' or None; got {value!r}")
    return check_positive_int(value, name)


def _optional(check):
    def run(value: object, name: str) -> object:
        return None if value is None else check(value, name)

    return run


def _optional_tensor(value: object, name: str) -> object:
    return None if value is None else check_tensor(value, name)


#: the named centres of the roots (:func:`tsw.core._slices.resolve_center`)
CENTERS = ("mean", "median")


def check_center_option(value: object, name: str = "center") -> object:
    """Return ``value`` if it is None, one of :data:`CENTERS` or a floating tensor."""
    if isinstance(value, str) and value not in CENTERS:
        raise ValueError(
            f'{name} must be "mean", "median" or a tensor of shape (d,) or (B, d); got {value!r}'
        )
    return value if isinstance(value, str) else _optional_tensor(value, name)


#: how the slices of a call are spread (:func:`tsw.sample_concurrent_lines`)
SAMPLINGS = ("iid", "orthogonal", "qmc")


def check_sampling(value: object, name: str = "sampling") -> str:
    """Return ``value`` if it is one of :data:`SAMPLINGS`, else raise naming them."""
    return check_choice(value, name, SAMPLINGS)


#: A check of an option: ``check(value, name)`` returns the checked value or raises.
Check: TypeAlias = Callable[[object, str], object]

#: the checks of the options that several distances share, by option name. A public
#: distance runs the checks of its options (these, and its own given to
#: :func:`tsw.core._api.distance`); a loss module runs the same functions at
#: construction and at every assignment (``loss.p = 0.5`` raises at once). Checks that
#: need the data (shapes of ``center``, ``alpha``; a mass tensor's shape) run at the call.
COMMON_CHECKS: MappingProxyType[str, Check] = MappingProxyType(
    {
        "p": lambda value, name: check_p(value),
        "n_trees": _optional(check_positive_int),
        "n_lines": _optional(check_positive_int),
        "n_grid": _optional(check_positive_int),
        "n_projections": check_positive_int,
        "n_init": check_positive_int,
        "n_quad": check_positive_int,
        "n_samples": check_positive_int,
        "n_rotations": check_nonnegative_int,
        "n_iter": check_nonnegative_int,
        "delta": check_nonnegative_float,
        "root_std": check_nonnegative_float,
        "source_range": check_nonnegative_float,
        "radius": check_nonnegative_float,
        "price": check_nonnegative_float,
        "lr": check_nonnegative_float,
        "orthogonal": check_bool,
        "renormalize": check_bool,
        "compat": check_bool,
        "validate": check_bool,
        "power": check_bool,
        "log": check_bool,
        "chunk_size": check_chunk_size,
        "sampling": check_sampling,
        "mass_s": check_mass_number,
        "mass_t": check_mass_number,
        "center": check_center_option,
        "alpha": _optional_tensor,
    }
)


def check_choice(value: object, name: str, allowed: Sequence[str]) -> str:
    """Return ``value`` if it is one of ``allowed``, else raise naming the options."""
    if value not in allowed:
        options = ", ".join(repr(v) for v in allowed)
        raise ValueError(f"{name} must be one of {options}; got {value!r}")
    return value  # type: ignore[return-value]


def check_finite(x: Tensor, name: str) -> None:
    """Raise ``ValueError`` if ``x`` contains NaN or Inf (a value check)."""
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains NaN or Inf values")


def check_same_device_dtype(ref: Tensor, ref_name: str, x: Tensor, name: str) -> None:
    """Raise unless ``x`` has the dtype and device of ``ref``."""
    if x.device != ref.device:
        raise ValueError(
            f"{name} must be on the same device as {ref_name}; "
            f"got {name} on {x.device} and {ref_name} on {ref.device}"
        )
    if x.dtype != ref.dtype:
        raise TypeError(
            f"{name} must have the same dtype as {ref_name}; "
            f"got {name}.dtype={x.dtype} and {ref_name}.dtype={ref.dtype}"
        )


def _check_weights(
    w: object, name: str, X: Tensor, X_name: str, batched: bool, validate: bool
) -> Tensor:
    n = X.shape[-2]
    if w is None:
        return torch.full(X.shape[:-1], 1.0 / n, dtype=X.dtype, device=X.device)
    w = check_tensor(w, name)
    check_same_device_dtype(X, X_name, w, name)
    expected = tuple(X.shape[:-1])
    if tuple(w.shape) != expected:
        form = "(B, N)" if batched else "(N,)"
        raise ValueError(
            f"{name} must have shape {form} = {expected} to match "
            f"{X_name}.shape={tuple(X.shape)}; got {name}.shape={tuple(w.shape)}"
        )
    if validate:
        check_nonnegative(w, name)
        if bool((w.sum(-1) <= 0).any()):
            raise ValueError(f"{name} must have a positive total mass; got a total of 0")
    return w


def check_points(X: object, name: str, validate: bool) -> Tensor:
    """Check a support tensor of shape (N, d) or (B, N, d)."""
    X = check_tensor(X, name)
    if X.ndim not in (2, 3):
        raise ValueError(
            f"{name} must have shape (N, d) or (B, N, d); got {name}.shape={tuple(X.shape)}"
        )
    if X.shape[-2] == 0:
        raise ValueError(f"{name} is an empty measure: {name}.shape={tuple(X.shape)}")
    if X.shape[-1] == 0:
        raise ValueError(f"{name} must have d >= 1 features; got {name}.shape={tuple(X.shape)}")
    if validate:
        check_finite(X, name)
    return X


def check_measure(
    X: object, a: object = None, *, validate: bool = True
) -> tuple[Tensor, Tensor, bool]:
    """Validate one discrete measure ``(X_s, a)`` (distances to a fixed reference measure).

    Returns ``X`` (B, N, d), ``a`` (B, N) with a leading batch dimension and whether the
    input was batched; the checks are those of :func:`check_measures` for one side.
    """
    X = check_points(X, "X_s", validate)
    batched = X.ndim == 3
    a = _check_weights(a, "a", X, "X_s", batched, validate)
    return (X, a, True) if batched else (X[None], a[None], False)


def check_measures(
    X_s: object,
    X_t: object,
    a: object = None,
    b: object = None,
    *,
    balanced: bool = True,
    validate: bool = True,
) -> Measures:
    """Validate two discrete measures and return them in batched form.

    Parameters
    ----------
    X_s, X_t : Tensor of shape (N, d) and (M, d), or (B, N, d) and (B, M, d)
        Supports of the source and target measures.
    a, b : Tensor of shape (N,) and (M,), or (B, N) and (B, M), optional
        Non-negative weights; ``None`` gives uniform weights summing to one.
    balanced : bool, default True
        Require equal total masses of ``a`` and ``b`` (a value check).
    validate : bool, default True
        Run the value checks (finite entries, non-negative weights, equal totals).

    Returns
    -------
    Measures
        The inputs with a leading batch dimension and explicit weights.

    Raises
    ------
    TypeError
        For non-tensors, unsupported or mixed dtypes.
    ValueError
        For wrong shapes, mismatched dimensions or batches, devices, empty measures,
        non-finite values, negative weights or (``balanced``) unequal totals.
    """
    X_s = check_points(X_s, "X_s", validate)
    X_t = check_points(X_t, "X_t", validate)
    check_same_device_dtype(X_s, "X_s", X_t, "X_t")
    if X_s.ndim != X_t.ndim:
        raise ValueError(
            "X_s and X_t must both be unbatched (N, d), (M, d) or both batched "
            f"(B, N, d), (B, M, d); got X_s.shape={tuple(X_s.shape)} and "
            f"X_t.shape={tuple(X_t.shape)}"
        )
    if X_s.shape[-1] != X_t.shape[-1]:
        raise ValueError(
            "X_s and X_t must have the same feature dimension d; got "
            f"X_s.shape={tuple(X_s.shape)} and X_t.shape={tuple(X_t.shape)}"
        )
    batched = X_s.ndim == 3
    if batched and X_s.shape[0] != X_t.shape[0]:
        raise ValueError(
            "X_s and X_t must have the same batch size B; got "
            f"X_s.shape={tuple(X_s.shape)} and X_t.shape={tuple(X_t.shape)}"
        )
    given = a is not None or b is not None  # the default uniform weights both sum to 1
    a = _check_weights(a, "a", X_s, "X_s", batched, validate)
    b = _check_weights(b, "b", X_t, "X_t", batched, validate)
    if balanced and validate and given:
        check_equal_totals(
            (a.sum(-1), b.sum(-1)),
            ("a.sum()", "b.sum()"),
            a.dtype,
            why=" for a balanced distance",
            batched=batched,
        )
    if not batched:
        X_s, X_t, a, b = X_s[None], X_t[None], a[None], b[None]
    return Measures(X_s, X_t, a, b, batched)


def sphere_tol(dtype: torch.dtype) -> float:
    """Largest accepted ``| ||x|| - 1 |`` for points on the unit sphere in ``dtype``.

    ``max(1e3 * eps, 1e-6)``: 1.2e-4 in float32, 1e-6 in float64. Loose enough for
    points normalised in float32 and then cast to float64, tight enough to catch data
    that were never normalised.
    """
    return max(1e3 * torch.finfo(dtype).eps, 1e-6)


def check_on_sphere(X: Tensor, name: str, *, renormalize: bool, validate: bool) -> Tensor:
    r"""Check (or, with ``renormalize``, make) the rows of ``X`` unit vectors.

    ``X`` has shape (..., d+1) and describes points of the sphere :math:`\mathbb S^d`;
    ``d + 1 >= 2`` is always checked. With ``renormalize=True`` the rows are divided by
    their norms, computed after a division by a power of 2 near the row's largest entry
    (exact), so that rows of any finite magnitude, 1e-30 or 1e30 in float32, are
    normalised without overflow or underflow (a zero row raises when ``validate``);
    otherwise, when ``validate``, a row
    whose norm differs from 1 by more than :func:`sphere_tol` raises.
    """
    if X.shape[-1] < 2:
        raise ValueError(
            f"{name} must have d+1 >= 2 coordinates to describe points of the sphere S^d; "
            f"got {name}.shape={tuple(X.shape)}"
        )
    renormalize = check_bool(renormalize, "renormalize")
    if renormalize:
        # divide by a power of 2 below the largest entry first (detached, exact): the norm of
        # rows near 1e30 or 1e-30 would overflow or underflow in float32
        top = X.detach().abs().amax(dim=-1, keepdim=True)
        if validate and bool((top == 0).any()):
            raise ValueError(f"{name} has a zero row, which cannot be renormalised onto the sphere")
        scale = torch.exp2(torch.floor(torch.log2(torch.where(top > 0, top, 1))))
        Z = X / scale
        return Z / torch.linalg.vector_norm(Z, dim=-1, keepdim=True)
    norms = torch.linalg.vector_norm(X.detach(), dim=-1)
    if validate:
        err = (norms - 1).abs()
        tol = sphere_tol(X.dtype)
        if bool((err > tol).any()):
            raise ValueError(
                f"{name} must lie on the unit sphere (rows of norm 1 up to {tol:.1e} in "
                f"{X.dtype}); got a row of norm {norms.reshape(-1)[err.argmax()].item():.6g}. "
                "Pass renormalize=True to project the rows onto the sphere"
            )
    return X


def check_measures_on_sphere(measures: Measures, *, renormalize: bool, validate: bool) -> Measures:
    """:func:`check_on_sphere` for both supports of validated measures."""
    return measures._replace(
        X_s=check_on_sphere(measures.X_s, "X_s", renormalize=renormalize, validate=validate),
        X_t=check_on_sphere(measures.X_t, "X_t", renormalize=renormalize, validate=validate),
    )


def check_orthogonal(Q: Tensor, name: str) -> None:
    r"""Raise ``ValueError`` unless ``Q`` (..., m, n) has orthonormal columns (a value check).

    Square ``Q`` (rotations): orthogonal matrices; (m, 2) frames: great circles.

    Accepts :math:`\max |Q^T Q - I| \le` :func:`sphere_tol` (1e-6 in float64, 1.2e-4 in
    float32); NaN/Inf raise first.
    """
    check_finite(Q, name)
    eye = torch.eye(Q.shape[-1], dtype=Q.dtype, device=Q.device)
    err = (Q.detach().transpose(-1, -2) @ Q.detach() - eye).abs().amax()
    tol = sphere_tol(Q.dtype)
    if bool(err > tol):
        what = "orthogonal matrices" if Q.shape[-1] == Q.shape[-2] else "orthonormal columns"
        raise ValueError(
            f"{name} must have {what} (max |Q^T Q - I| <= {tol:.1e} in {Q.dtype}); "
            f"got a deviation of {err.item():.3g}"
        )
