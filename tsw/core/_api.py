"""The public form of every distance: one decorator binds the options they all share.

A method's function takes a built :class:`~tsw.core._problem.Problem` and its own
options, and returns an :class:`~tsw.core._output.Evaluation`::

    @distance(chunked=True, checks={"delta": check_nonnegative_float})
    def db_tsw(problem: Problem, /, *, n_trees=None, delta=2.0, p=1.0, **options):
        ...
        return evaluate(problem, project, trees)

:func:`distance` turns it into the public function ``db_tsw(X_s, X_t, a=None, b=None, *,
n_trees=None, delta=2.0, p=1.0, seed=None, generator=None, validate=True, power=False,
log=False, chunk_size="auto", process_group=None, gather=False)``: it checks the options
(each by one check function, which the loss modules run too), builds the problem
(numpy inputs, the measures, the seed), calls the method, and finishes the value
(:func:`~tsw.core._output.finish`). It also documents the shared options in the
function's Parameters section and runs the distance outside ``torch.autocast``. Under
``torch.jit.trace`` it raises a RuntimeError naming the function
(:func:`~tsw.core._random.refuse_tracing`): ``torch.compile`` traces the distances.

A method may declare a shared option itself, to set its default (``p``) or its position
(POT's positional ``seed`` and ``log`` in :func:`tsw.sw`); it then receives its checked
value, which the problem holds too.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
import numbers
import textwrap
from collections.abc import Callable, Mapping
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Literal,
    ParamSpec,
    Protocol,
    TypedDict,
    cast,
    overload,
)

import numpy as np
import torch
from torch import Tensor

from tsw.core._output import Evaluation, Result, finish
from tsw.core._problem import Problem, build
from tsw.core._random import Seed, refuse_tracing
from tsw.core._ranges import check_scales
from tsw.core._validation import COMMON_CHECKS, Check, check_bool

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = [
    "ChunkedOptions",
    "Distance",
    "DistanceToReference",
    "POTOrderOptions",
    "SWOptions",
    "SharedOptions",
    "distance",
    "unknown_options",
]

P = ParamSpec("P")

#: points or weights as a tensor or a numpy array
Array = Tensor | np.ndarray


class SharedOptions(TypedDict, total=False):
    """The options every distance takes from :func:`distance`."""

    seed: Seed
    generator: torch.Generator | None
    validate: bool
    power: bool
    log: bool


class ChunkedOptions(SharedOptions, total=False):
    """The options of the distances evaluated in blocks of slices (trees, SW)."""

    chunk_size: int | str | None
    process_group: ProcessGroup | None
    gather: bool


class POTOrderOptions(TypedDict, total=False):
    """:class:`SharedOptions` but ``seed`` and ``log``, taken by position (POT's order).

    As in POT's sliced functions, and so in :func:`tsw.ssw` and :func:`tsw.ssw_unif`.
    """

    generator: torch.Generator | None
    validate: bool
    power: bool


class SWOptions(POTOrderOptions, total=False):
    """:class:`ChunkedOptions` but ``seed`` and ``log``, which :func:`tsw.sw` takes by position."""

    chunk_size: int | str | None
    process_group: ProcessGroup | None
    gather: bool


class Distance(Protocol[P]):
    """A distance between two measures: ``fn(X_s, X_t, a=None, b=None, ...)``."""

    def __call__(
        self,
        X_s: Array,
        X_t: Array,
        a: Array | None = None,
        b: Array | None = None,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Result: ...


class DistanceToReference(Protocol[P]):
    """A distance from a measure to a fixed reference measure: ``fn(X_s, a=None, ...)``."""

    def __call__(
        self, X_s: Array, a: Array | None = None, *args: P.args, **kwargs: P.kwargs
    ) -> Result: ...


#: the parameters of the measures, before every option
MEASURES = ("X_s", "X_t", "a", "b")
#: the shared options, their defaults and annotations, in the order of the signatures
SHARED: tuple[tuple[str, object, str], ...] = (
    ("seed", None, "Seed"),
    ("generator", None, "torch.Generator | None"),
    ("validate", True, "bool"),
    ("power", False, "bool"),
    ("log", False, "bool"),
)
#: the options of the distances evaluated in blocks
CHUNKED: tuple[tuple[str, object, str], ...] = (
    ("chunk_size", "auto", "int | str | None"),
    ("process_group", None, "ProcessGroup | None"),
    ("gather", False, "bool"),
)

#: the documentation of the options every distance takes, inserted into each public
#: function's Parameters section
SHARED_DOC = """\
seed : int, numpy RandomState or Generator, optional
    Randomness of the slices: the same seed gives the same slices on every device.
    Without it (and without ``generator``), fresh slices from operating-system entropy;
    the global torch RNG is never used.
generator : torch.Generator, optional
    Draw the slices from this generator instead.
validate : bool, default True
    Run the value checks (finite inputs, non-negative weights, equal totals, the
    range of the data): a device synchronisation.
power : bool, default False
    Return the ``p``-th power of the value, the mean over the slices of the per-slice
    costs, without the ``1/p`` root: the usual training objective (``SW_2^2`` in SWAE
    and SW generators). Its gradient stays bounded where the two measures meet; the
    root's is unbounded there for ``p > 1``. Both forms are equal at ``p = 1``.
log : bool, default False
    Return ``(value, log)``. ``log["per_tree"]``, shape (T,) or (B, T), holds the
    per-slice costs (differentiable): their mean, to the power ``1/p`` unless ``power``,
    is the value. ``log["trees"]`` holds the slices used (pass them back as explicit
    slices to recompute the value). ``log["std_error"]`` is the Monte-Carlo standard
    error of the returned value: ``std(per_tree, ddof=1) / sqrt(T)`` (NaN for one
    slice), carried through the ``1/p`` root by the delta method; detached. Inputs given
    as numpy arrays (float32 or float64, no gradient) give numpy outputs: a numpy scalar
    (an array for batched inputs), numpy in ``log``."""

#: the extra log keys of the sliced baselines
SLICED_LOG_DOC = """\
    Sliced baselines also give POT's keys: ``log["projections"]``, the directions
    used, and ``log["projected_emds"]``, the per-direction costs (``W_p^p``, as
    ``log["per_tree"]``)."""

#: the memory and ``torch.distributed`` options of the distances evaluated in blocks
CHUNKED_DOC = """\
chunk_size : int, "auto" or None, default "auto"
    Slices (trees, or directions for SW) evaluated at once. ``None``: all at once. An
    int: blocks of that many. ``"auto"``: blocks whose working memory stays under 2 GiB
    and, on the CPU, whose passes run in cache. Under grad mode each block's gradient
    is formed during the forward pass and its graph freed, so the peak working memory
    is that of one block and no forward is recomputed (a block that closes over other
    tensors requiring grad, such as a learnable ``alpha``, is checkpointed instead, at
    about one more forward pass). Values and gradients do not depend on it (up to
    rounding). The guide's section on memory says more.
process_group : torch.distributed.ProcessGroup, optional
    Evaluate the value with the ranks of this group (e.g.
    ``torch.distributed.group.WORLD``): the slices are split into one contiguous share
    per rank and the per-slice costs gathered, so that every rank returns the value one
    process computes, and the gradients one process computes (summed over the ranks
    where the measures are projected). Every rank must call with the same arguments
    (checked); ``seed=None`` then draws one seed on the first rank for all. The number
    of slices must be at least the group's size.
gather : bool, default False
    With ``process_group``: the inputs are this rank's shards (points and, if given,
    weights; shards may differ in size), and the distance is between the unions of the
    shards (uniform weights over the union when ``a``/``b`` are not given). Each
    shard's gradient is its rows of the single-process gradient. Under
    ``DistributedDataParallel``, which averages the parameter gradients over the
    ranks, multiply such a loss by the world size to get the single-process gradient
    of the parameters."""

#: device types whose autocast state is read (``torch.is_autocast_enabled(kind)``)
AUTOCAST_KINDS = ("cpu", "cuda", "xpu", "mps")
LOW_PRECISION = (torch.float16, torch.bfloat16)


#: a method's function, before :func:`distance` makes it public
Method = Callable[Concatenate[Problem, P], Evaluation]


@overload
def distance(
    *,
    chunked: bool = ...,
    sliced: bool = ...,
    one_measure: Literal[False] = ...,
    balanced: bool = ...,
    p: float | None = ...,
    checks: Mapping[str, Check] | None = ...,
) -> Callable[[Method[P]], Distance[P]]: ...


@overload
def distance(
    *,
    chunked: bool = ...,
    sliced: bool = ...,
    one_measure: Literal[True],
    balanced: bool = ...,
    p: float | None = ...,
    checks: Mapping[str, Check] | None = ...,
) -> Callable[[Method[P]], DistanceToReference[P]]: ...


def distance(
    *,
    chunked: bool = False,
    sliced: bool = False,
    one_measure: bool = False,
    balanced: bool = True,
    p: float | None = None,
    checks: Mapping[str, Check] | None = None,
) -> Callable[[Method[P]], Any]:
    """Make the public function of a method's function ``fn(problem, /, **options)``.

    Parameters
    ----------
    chunked : bool
        The distance takes ``chunk_size``, ``process_group`` and ``gather``.
    sliced : bool
        A sliced baseline: its log has POT's keys too.
    one_measure : bool
        A distance to a reference measure: ``fn(X_s, a=None, ...)``.
    balanced : bool
        Require equal total masses of the measures (a value check).
    p : float, optional
        The fixed exponent of a method that does not take ``p``.
    checks : mapping, optional
        The checks of the method's own options, by name, besides
        :data:`~tsw.core._validation.COMMON_CHECKS` (which cover the options of the same
        names). Each takes ``(value, name)`` and returns the checked value; the public
        function exposes them all as ``option_checks``, which the loss modules run at
        construction and assignment.
    """

    def decorate(fn: Method[P]) -> Any:
        own = list(inspect.signature(fn).parameters.values())[1:]  # after the problem
        method = [q for q in own if q.kind is not q.VAR_KEYWORD]
        declared = {q.name for q in method}
        shared = SHARED + (CHUNKED if chunked else ())
        extra = [
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=kind
            )
            for name, default, kind in shared
            if name not in declared
        ]
        public = inspect.Signature(
            [*_measure_parameters(one_measure), *method, *extra], return_annotation="Result"
        )
        names = set(public.parameters)
        option_checks = {k: c for k, c in COMMON_CHECKS.items() if k in names}
        option_checks.update(checks or {})
        unknown = set(option_checks) - names
        if unknown:
            raise TypeError(f"{fn.__name__}: checks of unknown options {sorted(unknown)}")
        fixed_p = p
        body = cast(Callable[..., Evaluation], fn)

        @functools.wraps(fn)
        def public_fn(*args: Any, **kwargs: Any) -> Result:
            refuse_tracing(f"tsw.{fn.__name__}")
            with _outside_autocast() as up:
                bound = _bind(public, f"tsw.{fn.__name__}", args, kwargs)
                values = {k: up(v) for k, v in bound.arguments.items()}
                validate = check_bool(values["validate"], "validate")
                for name in ("p", "power", "log", "chunk_size"):
                    if name in option_checks:
                        values[name] = option_checks[name](values[name], name)
                problem = build(
                    values["X_s"],
                    values.get("X_t"),
                    values.get("a"),
                    values.get("b"),
                    one_measure=one_measure,
                    balanced=balanced,
                    p=values.get("p", fixed_p),
                    seed=values["seed"],
                    generator=values["generator"],
                    validate=validate,
                    power=values["power"],
                    log=values["log"],
                    chunk_size=values.get("chunk_size", "auto"),
                    process_group=values.get("process_group"),
                    gather=values.get("gather", False),
                )
                for name, check in option_checks.items():
                    if name not in ("p", "power", "log", "chunk_size", "validate"):
                        values[name] = check(values[name], name)
                if validate:
                    check_scales(problem.measures, values)
                evaluation = body(problem, **{k: values[k] for k in declared})
                return finish(problem, evaluation)

        # names, kinds and defaults: the types are in the Parameters section, and without
        # them help() opens with a signature of about 290 characters, not 630
        public_fn.__signature__ = _untyped(public)  # type: ignore[attr-defined]
        doc = _call_first(fn.__doc__ or "", fn.__name__, public, one_measure)
        public_fn.__doc__ = _document(doc, fn.__name__, chunked, sliced)
        public_fn.option_checks = option_checks  # type: ignore[attr-defined]
        del public_fn.__wrapped__  # the signature is the public one, not the method's
        return public_fn

    return decorate


def unknown_options(owner: str, unknown: Mapping[str, object], options: list[str]) -> TypeError:
    """Return the TypeError for the keyword options ``unknown`` (name: value) of ``owner``.

    It names each, the option it abbreviates or the closest to it (``difflib``) where
    one is close, and then every option. Raised by the public distances
    (:func:`distance`) and the loss modules (:mod:`tsw.core._loss`).
    """
    names = sorted(unknown)
    plural = "s" if len(names) > 1 else ""
    message = f"{owner} got {'an ' * (not plural)}unexpected keyword argument{plural} "
    message += ", ".join(repr(n) for n in names)
    hints = [f"{close}={_short(unknown[n])}" for n in names if (close := _closest(n, options))]
    message += f"; did you mean {', '.join(hints)}?" if hints else "."
    return TypeError(f"{message} Its options are {', '.join(options)}.")


def _closest(name: str, options: list[str]) -> str | None:
    """Return the option ``name`` abbreviates, or the closest by ``difflib`` (ratio >= 0.75)."""
    starts = [o for o in options if o.startswith(name)]
    close = starts or difflib.get_close_matches(name, options, n=1, cutoff=0.75)
    return close[0] if close else None


def _short(value: object) -> str:
    """``repr(value)`` for a number, a string or None; ``...`` for anything else."""
    return repr(value) if value is None or isinstance(value, numbers.Number | str) else "..."


#: the options a count given by position most likely meant, in this order
_COUNTS = ("n_trees", "n_projections", "n_samples")


def _bind(public: inspect.Signature, name: str, args: tuple, kwargs: dict) -> Any:
    """Bind a call to the public signature; a misplaced or misspelt option raises naming it.

    Options after the measures are keyword-only (but for POT's positional order): a
    number given where ``a`` or ``b`` (the weights) is, or too many positional
    arguments, raises a TypeError naming the function and the option it likely meant.
    The names for these messages are read only for a call that fails or passes a number
    by position.
    """
    try:
        bound = public.bind(*args, **kwargs)
    except TypeError as err:
        raise _bind_error(public, name, args, kwargs, err) from None
    bound.apply_defaults()
    if not any(isinstance(v, numbers.Number) for v in args):
        return bound
    positional, _, options = _names(public)
    for weight in ("a", "b"):
        value = bound.arguments.get(weight)
        if weight not in positional[: len(args)] or not isinstance(value, numbers.Number):
            continue
        after = [o for o in positional if o not in MEASURES]
        guess = next((c for c in _COUNTS if c in options), options[0])
        if isinstance(value, float) and "p" in options:
            guess = "p"
        where = f"{', '.join(after)} by position, then keywords" if after else "keyword-only"
        raise TypeError(
            f"{name}: the argument in position {positional.index(weight) + 1} is {weight}, "
            f"the weights of {'X_s' if weight == 'a' else 'X_t'} (a Tensor, a numpy array "
            f"or None); got {type(value).__name__} {value!r}. The options after the "
            f"measures are {where}: did you mean {guess}={value!r}?"
        )
    return bound


def _names(public: inspect.Signature) -> tuple[list[str], list[str], list[str]]:
    """Return the names of the positional, keyword-only and option parameters of ``public``."""
    params = list(public.parameters.values())
    positional = [q.name for q in params if q.kind is q.POSITIONAL_OR_KEYWORD]
    keyword = [q.name for q in params if q.kind is q.KEYWORD_ONLY]
    return positional, keyword, [q.name for q in params if q.name not in MEASURES]


def _bind_error(
    public: inspect.Signature, name: str, args: tuple, kwargs: dict, err: TypeError
) -> TypeError:
    """Return the TypeError for a call that does not bind (a misspelt option, extra arguments)."""
    positional, keyword, options = _names(public)
    unknown = {k: v for k, v in kwargs.items() if k not in public.parameters}
    if unknown:
        return unknown_options(name, unknown, options)
    if len(args) > len(positional):
        return TypeError(
            f"{name} takes at most {len(positional)} positional arguments "
            f"({', '.join(positional)}); got {len(args)}. The options after "
            f"{positional[-1]} are keyword-only: {', '.join(keyword)}."
        )
    return TypeError(f"{name}: {err}")


def _untyped(signature: inspect.Signature) -> inspect.Signature:
    """Return ``signature`` without its annotations."""
    params = [q.replace(annotation=q.empty) for q in signature.parameters.values()]
    return signature.replace(parameters=params, return_annotation=signature.empty)


def _measure_parameters(one_measure: bool) -> list[inspect.Parameter]:
    """``X_s, X_t, a=None, b=None`` (or ``X_s, a=None``), POT's positional order."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    names = ("X_s", "a") if one_measure else ("X_s", "X_t", "a", "b")
    return [
        inspect.Parameter(n, kind, annotation="Tensor")
        if n.startswith("X")
        else inspect.Parameter(n, kind, default=None, annotation="Tensor | None")
        for n in names
    ]


def _document(doc: str, name: str, chunked: bool, sliced: bool) -> str:
    """Insert the shared options' documentation before the Returns section of ``doc``."""
    text = SHARED_DOC + ("\n" + SLICED_LOG_DOC if sliced else "")
    text += "\n" + CHUNKED_DOC if chunked else ""
    block = "".join(f"    {line}\n" if line else "\n" for line in text.splitlines())
    marker = "\n\n    Returns\n    -------\n"
    if marker not in doc:
        raise ValueError(f"{name}'s docstring has no Returns section")
    return doc.replace(marker, "\n" + block + marker[1:], 1)


def _usage(name: str, public: inspect.Signature, one_measure: bool) -> str:
    """Return the paragraph that says how to call ``tsw.name``, read from its signature."""
    params = list(public.parameters.values())
    by_position = [q for q in params if q.kind is q.POSITIONAL_OR_KEYWORD]
    pot = [q.name for q in by_position if q.name not in MEASURES]
    shared = {n for n, _, _ in SHARED + CHUNKED}
    own = [q for q in params if q.kind is q.KEYWORD_ONLY and q.name not in shared][:2]
    shown = [
        q.name if q.default is q.empty else f"{q.name}={q.default!r}"
        for q in by_position[: 4 - 2 * one_measure]
    ]
    if pot:
        shown.append(f"{pot[0]}={public.parameters[pot[0]].default!r}")
    shown += ["...", "*"] if pot else ["*"]
    shown += [f"{q.name}={q.default!r}" for q in own] + ["seed=None", "..."]
    target = "the uniform measure on the sphere" if one_measure else "``(X_t, b)``"
    options = (
        f"by position in POT's order ({', '.join(pot)}) or by keyword, the others by keyword"
        if pot
        else "keyword-only"
    )
    return (
        f"``tsw.{name}({', '.join(shown)})`` returns the distance between ``(X_s, a)`` and "
        f"{target} (weights ``None``: uniform). The options after the measures are "
        f"{options}; the Parameters say each, the Notes the definition."
    )


def _call_first(doc: str, name: str, public: inspect.Signature, one_measure: bool) -> str:
    """Open ``doc`` with its summary line and how to call the function; the rest to Notes.

    So ``help()`` and the reference show what the function is and how to call it before
    its parameters. The text between the summary and Parameters (the definition, its
    mathematics, the references cited) opens the Notes section, made before References
    or Examples where there is none. A first paragraph that already shows a call
    (``tsw.name(...)``) stays as the usage paragraph. A docstring without a summary
    line and a Parameters section is left as it is.
    """
    summary, sep, rest = doc.partition("\n\n")
    marker = "\n\n    Parameters\n    ----------\n"
    if not sep or marker not in "\n\n" + rest:  # a short docstring (a user's method)
        return doc
    body, _, sections = ("\n\n" + rest).partition(marker)
    body = body.strip("\n")
    usage = _usage(name, public, one_measure)
    if body.lstrip().startswith(f"``tsw.{name}("):
        usage, _, body = body.strip().partition("\n\n")
    usage = textwrap.indent(textwrap.fill(" ".join(usage.split()), 84), "    ")
    sections = marker + sections
    if body:
        notes = "\n    Notes\n    -----\n"
        if notes in sections:
            sections = sections.replace(notes, f"{notes}{body}\n\n", 1)
        else:
            at = min(
                (i for k in ("References", "Examples") if (i := sections.find(f"\n    {k}\n")) > 0),
                default=len(sections),
            )
            sections = f"{sections[:at].rstrip()}\n{notes}{body}\n{sections[at:]}"
    return f"{summary}\n\n{usage}{sections}"


def _autocast_kinds() -> list[str]:
    kinds = []
    for kind in AUTOCAST_KINDS:
        try:
            if torch.is_autocast_enabled(kind):
                kinds.append(kind)
        except (TypeError, RuntimeError):  # a torch without that device type
            continue
    return kinds


@contextlib.contextmanager
def _outside_autocast() -> Any:
    """Run the body outside ``torch.autocast``, in the inputs' precision.

    Under autocast, matrix products would run in float16 / bfloat16: coordinates lose
    their accuracy, and the dtype of the value would change. Inside an autocast region
    autocast is disabled, and float16 / bfloat16 tensor arguments (such as a generator's
    autocast output) are taken as float32 (a differentiable cast); the value is float32
    or float64. Outside autocast nothing changes: half precision raises. Yields the map
    applied to each argument.
    """
    kinds = _autocast_kinds()
    if not kinds:
        yield lambda x: x
        return

    def up(x: Any) -> Any:
        return x.float() if isinstance(x, Tensor) and x.dtype in LOW_PRECISION else x

    with contextlib.ExitStack() as stack:
        for kind in kinds:
            stack.enter_context(torch.autocast(kind, enabled=False))
        yield up
