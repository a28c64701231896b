"""Argument handling shared by the tree-sliced distances (tree counts, sampling)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from tsw._engine import check_trees_batch, weighted_center
from tsw._validation import Measures, check_nonnegative_float, check_positive_int, check_tensor
from tsw.trees import TreeSystem

DEFAULT_N_TREES = 250
DEFAULT_N_LINES = 4


def resolve_counts(
    trees: TreeSystem | None,
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


def resolve_center(center: Tensor | None, measures: Measures) -> Tensor:
    """Centre of the roots: the given one, or the detached weighted mean of both measures."""
    if center is None:
        return weighted_center(measures)
    check_tensor(center, "center")
    d = measures.X_s.shape[-1]
    B = measures.X_s.shape[0]
    if center.shape not in ((d,), (B, d)):
        form = f"(d,) = ({d},)" + (f" or (B, d) = ({B}, {d})" if measures.batched else "")
        raise ValueError(f"center must have shape {form}; got center.shape={tuple(center.shape)}")
    return center.to(dtype=measures.X_s.dtype, device=measures.X_s.device).detach()


def check_trees(trees: object, allowed: tuple[type, ...], measures: Measures) -> TreeSystem:
    """Check the type of explicit ``trees`` and its fit with the measures."""
    if not isinstance(trees, allowed):
        names = " or ".join(t.__name__ for t in allowed)
        raise TypeError(f"trees must be {names}; got {type(trees).__name__}")
    check_trees_batch(trees, measures)
    return trees


def resolve_trees(
    measures: Measures,
    trees: object,
    allowed: tuple[type, ...],
    n_trees: int | None,
    n_lines: int | None,
    *,
    sampler: Callable[..., TreeSystem],
    center: Tensor | None,
    root_std: float,
    seed: int | None,
    generator: torch.Generator | None,
) -> TreeSystem:
    """Explicit trees checked against the data, or trees drawn by ``sampler``.

    ``sampler(T, k, d, center=, std=, seed=, generator=, dtype=, device=)`` is one of
    the samplers of :mod:`tsw.trees` (with its structure-specific options bound).
    """
    check_nonnegative_float(root_std, "root_std")
    if trees is not None:
        trees = check_trees(trees, allowed, measures)
        resolve_counts(trees, n_trees, n_lines)
        return trees
    T, k = resolve_counts(None, n_trees, n_lines)
    return sampler(
        T,
        k,
        measures.X_s.shape[-1],
        center=resolve_center(center, measures),
        std=root_std,
        seed=seed,
        generator=generator,
        dtype=measures.X_s.dtype,
        device=measures.X_s.device,
    )


__all__ = ["check_trees", "resolve_center", "resolve_counts", "resolve_trees"]
