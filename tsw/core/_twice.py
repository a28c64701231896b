"""Second derivatives of the written-out autograd functions.

The closed forms, the splits and the products form their gradients with written-out
passes (in place, compiled, or accumulated during the forward pass) that autograd does
not record. When a gradient is asked for with ``create_graph=True`` (a Hessian-vector
product, a gradient penalty), each of them instead recomputes its forward from the
inputs it saved with differentiable torch operations and differentiates that, so that
the gradient carries its own graph: the same first derivative, and exact second
derivatives. :func:`graph_backward` is that step; :func:`first_order_only` marks a value
whose second derivative is not available (a solver outside torch), which then raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

__all__ = ["building_graph", "first_order_only", "graph_backward", "no_gradient_to"]


def building_graph() -> bool:
    """Whether a backward pass is building a graph of the gradient (``create_graph``)."""
    return torch.is_grad_enabled()


def graph_backward(
    reference: Callable[..., Tensor | tuple[Tensor, ...]],
    inputs: Sequence[Tensor | None],
    needs: Sequence[bool],
    grads: Tensor | Sequence[Tensor | None],
) -> list[Tensor | None]:
    """Return the gradients of ``reference(*inputs)`` weighted by ``grads``, with their graph.

    ``inputs`` are the tensors a custom autograd function saved (so linked to the graph
    of its inputs); ``needs[i]`` says whether input ``i`` wants a gradient. Returns one
    entry per input (None where none is wanted or it does not enter).
    """
    wanted = [x for x, n in zip(inputs, needs, strict=True) if n and x is not None]
    if not wanted:
        return [None] * len(inputs)
    with torch.enable_grad():
        out = reference(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    gs = (grads,) if isinstance(grads, Tensor) else tuple(grads)
    pairs = [(o, g) for o, g in zip(outs, gs, strict=True) if g is not None]
    got = torch.autograd.grad(
        [o for o, _ in pairs], wanted, [g for _, g in pairs], create_graph=True, allow_unused=True
    )
    it = iter(got)
    return [next(it) if n and x is not None else None for x, n in zip(inputs, needs, strict=True)]


class _FirstOrderOnly(torch.autograd.Function):
    """The identity, whose backward raises when a graph of the gradient is asked for."""

    @staticmethod
    def forward(ctx, value: Tensor, name: str, why: str) -> Tensor:  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        ctx.name, ctx.why = name, why
        return value.view_as(value)

    @staticmethod
    def backward(ctx, grad: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        if building_graph():
            raise RuntimeError(
                f"{ctx.name} has no second derivative: {ctx.why}. Its gradient is exact, but "
                "a gradient with create_graph=True (a Hessian-vector product, a gradient "
                "penalty) is not available"
            )
        return grad, None, None


def first_order_only(value: Tensor, name: str, why: str) -> Tensor:
    """``value``, whose gradient raises under ``create_graph=True`` (naming ``name``, ``why``)."""
    if not value.requires_grad:
        return value
    return _FirstOrderOnly.apply(value, name, why)


class _NoGradientTo(torch.autograd.Function):
    """The identity on ``value``; its backward raises if ``others`` want a gradient."""

    @staticmethod
    def forward(ctx, value: Tensor, message: str, *others: Tensor) -> Tensor:  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        ctx.message = message
        return value.view_as(value)

    @staticmethod
    def backward(ctx, grad: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        if any(ctx.needs_input_grad[2:]):
            raise RuntimeError(ctx.message)
        return (grad, None, *(None for _ in ctx.needs_input_grad[2:]))


def no_gradient_to(value: Tensor, others: Sequence[Tensor], message: str) -> Tensor:
    """``value``, computed from detached ``others``: a gradient asked of them raises ``message``."""
    if not any(t.requires_grad for t in others):
        return value
    return _NoGradientTo.apply(value, message, *others)
