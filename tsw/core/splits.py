r"""Splitting maps: how the mass of a point is shared among the lines of a tree.

A splitting map sends a point :math:`y` (and the tree :math:`\mathcal L`) to a vector
:math:`\alpha(y, \mathcal L)` of the simplex :math:`\Delta_{k-1}`; the point puts mass
:math:`a_y \alpha_l(y)` on line :math:`l` (spec 1.5).

* :func:`uniform_split`: :math:`\alpha_l = 1/k` (TSW-SL baseline of later papers).
* :func:`constant_split`: one vector :math:`\alpha \in \Delta_{k-1}` for every point
  (TSW-SL, Tran et al. 2025).
* :func:`distance_split`: :math:`\alpha_l = \mathrm{softmax}_l(-\delta\, d(y, l))`,
  closer lines get more mass (Db-TSW). E(d)-invariant; ``delta = 0`` is uniform.
* :func:`angular_split_masses`: the same softmax over the rays of a spherical tree on
  S^2, of :math:`\sin t` times the angle between a point's tangent direction and each ray
  (STSW).

A projection may leave a distance-based or angular split to the closed form: it then
carries a :class:`LineSplit` or an :class:`AngularSplit` in place of the masses, and
:func:`split_line_cost` or :func:`angular_split_cost` splits and transports. On the CPU
with the compiled kernels (:mod:`tsw.core._kernels`) these run the split and the closed
form one tree at a time, with the same values and gradients as the torch operators (the
split, then :func:`tsw.line_system_cost`), which run everywhere else.

A point-independent split (the first two) leaves every line balanced: no mass
crosses a root, and TSW-SL reduces to an :math:`\alpha`-weighted sliced
:math:`W_1` over the tree's lines. Only point-dependent splits make the tree
structure matter.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple, cast

import torch
from torch import Tensor

from tsw.core import _kernels
from tsw.core._kernels import SplitForm
from tsw.core._safe import LineDistance
from tsw.core._sort import argsort_last
from tsw.core._twice import building_graph, graph_backward
from tsw.core._validation import check_finite, check_tensor, sphere_tol
from tsw.core.tree_wasserstein import line_cost, line_cost_graph, system_cost

__all__ = [
    "AngularSplit",
    "LineSplit",
    "SplitForm",
    "angular_split_cost",
    "angular_split_masses",
    "check_alpha",
    "constant_split",
    "distance_split",
    "ray_masses",
    "split_by_form",
    "split_line_cost",
    "split_masses",
    "uniform_split",
]


def uniform_split(n_lines: int, like: Tensor) -> Tensor:
    """Uniform split ``1/k``, as a (k, 1) tensor broadcasting over points."""
    return torch.full((n_lines, 1), 1.0 / n_lines, dtype=like.dtype, device=like.device)


def check_alpha(alpha: Tensor, n_trees: int, n_lines: int, like: Tensor, validate: bool) -> Tensor:
    """Validate a constant splitting vector of shape (k,) or (T, k) on the simplex.

    Its sums must be 1 to :func:`~tsw.core._validation.sphere_tol` (1e-6 in float64,
    1.2e-4 in float32), so that a vector written in float32 passes in float64.
    """
    check_tensor(alpha, "alpha")
    if alpha.device != like.device or alpha.dtype != like.dtype:
        raise ValueError(
            f"alpha must have the dtype and device of X_s ({like.dtype} on {like.device}); "
            f"got {alpha.dtype} on {alpha.device}"
        )
    if alpha.shape not in ((n_lines,), (n_trees, n_lines)):
        raise ValueError(
            f"alpha must have shape (k,) = ({n_lines},) or (T, k) = ({n_trees}, {n_lines}); "
            f"got alpha.shape={tuple(alpha.shape)}"
        )
    if validate:
        check_finite(alpha, "alpha")
        if bool((alpha < 0).any()):
            raise ValueError("alpha must lie on the simplex (non-negative entries summing to 1)")
        # sphere_tol: a vector normalised in float32 and cast to float64 passes
        if bool(((alpha.sum(-1) - 1).abs() > sphere_tol(alpha.dtype)).any()):
            raise ValueError(
                "alpha must lie on the simplex (non-negative entries summing to 1); got a sum "
                f"of {alpha.sum(-1).reshape(-1)[0].item():.10g}"
            )
    return alpha


def constant_split(alpha: Tensor) -> Tensor:
    """Constant split: ``alpha`` of shape (k,) or (T, k) as (..., k, 1)."""
    return alpha.unsqueeze(-1)


def distance_split(distances: Tensor, delta: float) -> Tensor:
    r"""Distance-based split :math:`\mathrm{softmax}_l(-\delta\, d(y, l))` over lines.

    Parameters
    ----------
    distances : Tensor of shape (..., k, n)
        Distance of each of ``n`` points to each of the ``k`` lines of a tree.
    delta : float
        Inverse temperature; ``0`` gives the uniform split, larger values send more
        mass to the nearest line.

    Returns
    -------
    Tensor of shape (..., k, n)
        Non-negative, summing to one over the line axis.
    """
    if delta == 0:
        return torch.full_like(distances, 1.0 / distances.shape[-2])
    return torch.softmax(distances * (-delta), dim=-2)


def split_masses(
    w: Tensor,
    delta: float,
    *,
    distances: Tensor | None = None,
    line: tuple[Tensor, Tensor] | None = None,
    signed: Tensor | None = None,
) -> Tensor:
    r"""Masses on the lines: :func:`distance_split` times the signed masses ``w``.

    Parameters
    ----------
    w : Tensor of shape (B, n)
        Signed masses of the atoms.
    delta : float
        Inverse temperature of :func:`distance_split`.
    distances : Tensor of shape (B, T, k, n), optional
        Distance of each atom to each line.
    line : (sq, t), optional
        Instead of ``distances``: ``sq`` (B, T, 1, n) the squared distance of each atom to
        its tree's root and ``t`` (B, T, k, n) its coordinates on the lines, whose
        distances are ``LineDistance``'s ``sqrt(max(sq - t^2, 0))``.
    signed : Tensor of shape (B, T, k, n), optional
        Instead of ``distances``: signed distances (in the plane, the coordinates along
        the lines' normals), whose absolute values are the distances (gradient
        ``sign(signed)``, 0 on a line).

    Returns
    -------
    Tensor of shape (B, T, k, n)
        :math:`\mathrm{softmax}_l(-\delta\, d_l)\, w`.

    Notes
    -----
    On the CPU with the compiled kernels (:mod:`tsw.core._kernels`), for ``delta != 0``
    and weights that need no gradient, the forward and the backward passes are each one
    compiled loop per tree, the distances of ``line`` and ``signed`` included; otherwise
    autograd runs through the torch operators. Both give the same values and gradients
    up to rounding.
    """
    given = [x is not None for x in (distances, line, signed)]
    if sum(given) != 1:
        raise TypeError("split_masses takes exactly one of distances=, line= and signed=")
    if line is not None:
        return split_by_form(w, delta, line[0], line[1], SplitForm.COORDINATES)
    if signed is not None:
        return split_by_form(w, delta, None, signed, SplitForm.SIGNED)
    return split_by_form(w, delta, None, cast(Tensor, distances), SplitForm.DISTANCES)


def split_by_form(w: Tensor, delta: float, sq: Tensor | None, t: Tensor, form: SplitForm) -> Tensor:
    """:func:`split_masses` with its distances given as ``(sq, t, form)`` (:class:`SplitForm`)."""
    if delta != 0 and not w.requires_grad and _kernels.usable(t, w):
        return _DistanceSplit.apply(sq, t, w, delta, form)
    return _torch_split(sq, t, w, delta, form)


def _torch_split(sq: Tensor | None, t: Tensor, w: Tensor, delta: float, form: SplitForm) -> Tensor:
    """:func:`split_by_form` in torch operations (autograd differentiates it)."""
    if form == SplitForm.COORDINATES:
        dist: Tensor = LineDistance.apply(sq, t)
    else:
        dist = t.abs() if form == SplitForm.SIGNED else t
    return distance_split(dist, delta) * w[:, None, None, :]


class _DistanceSplit(torch.autograd.Function):
    r"""``softmax_l(-delta dist_l) * w`` with the compiled kernels, forward and backward.

    ``_DistanceSplit.apply(sq, t, w, delta, form)``: the distances in the
    :class:`SplitForm` ``form``; ``w`` (B, n) the signed masses, not differentiated
    (callers whose weights need a gradient use the torch operators). The forward (about
    seven torch passes over (B, T, k, n), the softmax over the lines among them) and the
    backward (about twelve) are each one loop per tree, with the formulas of
    :class:`~tsw.core._safe.LineDistance`, :func:`distance_split` and their gradients,
    including the zero subgradient on a line. The backward forms the distances again
    from ``sq`` and ``t`` rather than storing them.
    """

    @staticmethod
    def forward(ctx, sq: Tensor | None, t: Tensor, w: Tensor, delta: float, form: SplitForm):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        masses, alpha = _kernels.split_forward(sq, t, w, delta, form)
        ctx.form, ctx.delta = form, delta
        ctx.save_for_backward(alpha, w, sq, t)
        return masses

    @staticmethod
    def backward(ctx, grad: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        alpha, w, sq, t = ctx.saved_tensors
        needs = ctx.needs_input_grad
        if building_graph():  # create_graph: the same gradient, with its own graph
            split = partial(_torch_split, w=w, delta=ctx.delta, form=ctx.form)
            return (*graph_backward(split, (sq, t), needs[:2], grad), None, None, None)
        forms_t = t if ctx.form != SplitForm.DISTANCES else None  # (the distances: not read)
        gsq, gt = _kernels.split_backward(grad, alpha, w, sq, forms_t, ctx.delta, ctx.form)
        return (gsq if needs[0] else None), (gt if needs[1] else None), None, None, None


class LineSplit(NamedTuple):
    r"""The signed masses of a star's atoms before a distance-based split.

    A projection carries it in place of the masses (:class:`tsw.core._projection.Projection`)
    so that :func:`split_line_cost` splits and transports together. ``w`` (B, n) the
    signed masses, ``delta != 0``, and the distances to the lines in the
    :class:`SplitForm` ``form``: ``t`` (B, T, k, n), ``sq`` (B, T, 1, n) for
    ``COORDINATES`` (then ``t`` is the coordinates on the lines), else None.
    """

    w: Tensor
    delta: float
    sq: Tensor | None
    t: Tensor
    form: SplitForm

    def masses(self) -> Tensor:
        """Return the split masses (B, T, k, n): :func:`split_by_form`."""
        return split_by_form(self.w, self.delta, self.sq, self.t, self.form)


def split_line_cost(coords: Tensor, split: LineSplit, p: float) -> Tensor:
    """Cost per tree (B, T) of a star with atoms at ``coords`` (B, T, k, n), split by ``split``.

    On the CPU with the compiled kernels, ``p`` in {1, 2} and weights that need no
    gradient, the split and the line cost of each tree run together (the same values and
    gradients bit for bit, with the masses and their gradient kept in the cache);
    otherwise :meth:`LineSplit.masses`, then :func:`tsw.line_system_cost`.
    """
    w, delta, sq, t, form = split
    given = [x for x in (sq, t, coords, w) if x is not None]
    if not w.requires_grad and _kernels.usable(*given, p=p):
        return _SplitLineCost.apply(sq, t, coords, w, delta, form, p).sum(-1)
    return system_cost(coords, split.masses(), None, p)


class _SplitLineCost(torch.autograd.Function):
    r"""The split and the line cost together: the cost of every line, (B, T, k).

    ``_SplitLineCost.apply(sq, t, x, w, delta, form, p)``: the distances as
    :class:`_DistanceSplit` takes them, ``x`` (B, T, k, n) the coordinates on the lines
    (``t`` itself for ``COORDINATES``), ``w`` (B, n) the signed masses (no gradient),
    ``delta != 0``, ``p`` in {1, 2}. The value is ``line_cost(x, _DistanceSplit.apply(sq,
    t, w, delta, form), p)``, and so are the gradients, bit for bit: the same kernels
    run, one tree at a time, so that a tree's masses and their gradient live in (k, n)
    work spaces while the tree is in the cache; for ``COORDINATES`` so does the
    coordinates' gradient through the cost, added to the one through the split.
    """

    @staticmethod
    def forward(ctx, sq, t, x, w, delta: float, form: SplitForm, p: float):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        idx = argsort_last(x, compact=True)  # int32 where the sort writes it
        cost, saved = _kernels.split_line_forward(sq, t, x, w, delta, form, idx, p)
        ctx.save_for_backward(*saved, sq, t, w, x)
        ctx.delta, ctx.form, ctx.p = delta, form, p
        return cost

    @staticmethod
    def backward(ctx, grad: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        c, idx, prefix, alpha, sq, t, w, x = ctx.saved_tensors
        needs = ctx.needs_input_grad
        if building_graph():  # create_graph: the same gradient, with its own graph
            delta, form, p = ctx.delta, ctx.form, ctx.p

            def cost(sq: Tensor | None, t: Tensor, x: Tensor) -> Tensor:
                masses = _torch_split(sq, t, w, delta, form)
                return line_cost_graph(t if form == SplitForm.COORDINATES else x, masses, p, False)

            wants = (needs[0], needs[1], needs[2] and form != SplitForm.COORDINATES)
            return (*graph_backward(cost, (sq, t, x), wants, grad), None, None, None, None)
        gsq, gt, gx = _kernels.split_line_backward(
            (c, idx, prefix, alpha), grad, sq, t, w, ctx.delta, ctx.form, ctx.p
        )
        return (
            gsq if needs[0] else None,
            gt if needs[1] else None,
            gx if needs[2] else None,
            None,
            None,
            None,
            None,
        )


# --------------------------------------------------------------------------- rays on S^2


class AngularSplit(NamedTuple):
    r"""The atoms of a block of spherical trees on S^2 before STSW's split.

    A projection carries it in place of the masses (``RAYS``), the coordinates being the
    geodesic coordinates ``t`` (B, T, n) shared by the rays; :func:`angular_split_cost`
    splits and transports together. ``polar``, ``scale`` (B, T, n): the tangent polar
    angles and :math:`\sin t` of the atoms; ``theta`` (B|1, T, k) the rays' polar angles;
    ``w`` (B, n) the signed masses; ``delta > 0``. ``extra``, optional: ``G`` more atoms
    on every tree, not split but given their masses on each ray: their coordinate (G,)
    (the same on every tree) and their signed masses (B|1, T, k, G), without gradients.
    """

    polar: Tensor
    theta: Tensor
    scale: Tensor
    w: Tensor
    delta: float
    extra: tuple[Tensor, Tensor] | None = None


def _shared_trees_sum(grad_theta: Tensor, theta_shape: torch.Size) -> Tensor:
    """Sum the rays' gradient (B, T, k) over a batch that shares its trees (theta (1, T, k))."""
    return grad_theta.sum(0, keepdim=True) if theta_shape[0] != grad_theta.shape[0] else grad_theta


class _AngularSplitMasses(torch.autograd.Function):
    r"""STSW's split on S^2 in one function: angles, softmax and masses.

    The masses :math:`\mathrm{softmax}_i(-\delta\, s\, \varphi_i)\, w` with
    :math:`\varphi_i = \pi - |\pi - |\theta - \theta_i||`. ``polar`` (B, T, n) holds the
    points' tangent polar angles :math:`\theta`, ``theta`` (B|1, T, k) the rays',
    ``scale`` (B, T, n) :math:`s = \sin t`, ``w`` (B, n) the signed masses; the result
    has shape (B, T, k, n). Written out, so that a block keeps three (T, k, n) tensors
    for the backward pass (the angles, their slope and the split) instead of the eight
    that autograd's graph of the same nine operations keeps. The (sub)gradients equal
    autograd's: ``sign(diff) * sign(pi - |diff|)`` for the wrapped angle, 0 where either
    is 0.
    """

    @staticmethod
    def forward(ctx, polar: Tensor, theta: Tensor, scale: Tensor, w: Tensor, delta: float):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        phi = polar.unsqueeze(-2) - theta.unsqueeze(-1)  # (B, T, k, n), in [-2 pi, 2 pi]
        slope = torch.sign(phi)
        phi.abs_().sub_(math.pi)  # |diff| - pi
        slope.mul_(torch.sign(phi)).neg_()  # d phi / d diff = sign(diff) sign(pi - |diff|)
        phi.abs_().neg_().add_(math.pi)  # pi - ||diff| - pi|, in [0, pi]
        alpha = torch.softmax(phi * (scale * -delta).unsqueeze(-2), dim=-2)
        ctx.save_for_backward(phi, slope, alpha, scale, w, polar, theta)
        ctx.delta, ctx.theta_shape = delta, theta.shape
        return alpha * w[:, None, None, :]

    @staticmethod
    def backward(ctx, g: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        phi, slope, alpha, scale, w, polar, theta = ctx.saved_tensors
        if building_graph():  # create_graph: the same gradient, with its own graph
            masses = partial(_angular_masses_graph, delta=ctx.delta)
            inputs, needs = (polar, theta, scale, w), ctx.needs_input_grad[:4]
            return (*graph_backward(masses, inputs, needs, g), None)
        need_polar, need_theta, need_scale, need_w = ctx.needs_input_grad[:4]
        grad_polar = grad_theta = grad_scale = grad_w = None
        if need_w:
            grad_w = (g * alpha).sum((1, 2))
        gl = g * w[:, None, None, :]  # d/d alpha, then d/d logits (softmax backward)
        gl.sub_((alpha * gl).sum(-2, keepdim=True)).mul_(alpha).mul_(-ctx.delta)  # d/d beta
        if need_scale:
            grad_scale = (gl * phi).sum(-2)
        if need_polar or need_theta:
            gd = gl.mul_(scale.unsqueeze(-2)).mul_(slope)  # d/d diff
            if need_polar:
                grad_polar = gd.sum(-2)
            if need_theta:
                grad_theta = _shared_trees_sum(gd.sum(-1).neg_(), ctx.theta_shape)
        return grad_polar, grad_theta, grad_scale, grad_w, None


def _angular_masses_graph(
    polar: Tensor, theta: Tensor, scale: Tensor, w: Tensor, delta: float
) -> Tensor:
    """:class:`_AngularSplitMasses` in torch operations (autograd differentiates it)."""
    diff = polar.unsqueeze(-2) - theta.unsqueeze(-1)
    phi = math.pi - (math.pi - diff.abs()).abs()
    alpha = torch.softmax(phi * (scale * -delta).unsqueeze(-2), dim=-2)
    return alpha * w[:, None, None, :]


def angular_split_masses(
    polar: Tensor, theta: Tensor, scale: Tensor, w: Tensor, delta: float
) -> Tensor:
    r"""STSW's masses on the rays of trees on S^2, (B, T, k, n).

    :math:`\mathrm{softmax}_i(-\delta \sin t\, \varphi_i)\, w`, :math:`\varphi_i` the
    angle between a point's tangent direction (polar angle ``polar``) and ray ``i``
    (polar angle ``theta``); shapes as in :class:`AngularSplit`.
    """
    return _AngularSplitMasses.apply(polar, theta, scale, w, delta)


def ray_masses(
    t: Tensor, masses: Tensor, k: int, extra: tuple[Tensor, Tensor] | None = None
) -> tuple[Tensor, Tensor]:
    """Return the coordinates (B, T, 1, n') and masses (B, T, k, n') of rays sharing ``t``.

    ``t`` (B, T, n); ``masses`` broadcast to (B, T, k, n); ``extra`` as in
    :class:`AngularSplit` (atoms appended with their coordinate and their masses on each
    ray).
    """
    masses = masses.expand(*t.shape[:-1], k, t.shape[-1])
    if extra is not None:
        coords, extra_masses = extra
        t = torch.cat([t, coords.expand(*t.shape[:-1], coords.shape[-1])], dim=-1)
        extra_masses = extra_masses.expand(*masses.shape[:-1], coords.shape[-1])
        masses = torch.cat([masses, extra_masses], dim=-1)
    return t.unsqueeze(-2), masses


def angular_split_cost(t: Tensor, split: AngularSplit, p: float) -> Tensor:
    """Cost per tree (B, T) of rays sharing the coordinates ``t`` (B, T, n), split by ``split``.

    One compiled loop per tree where the kernels run (CPU, float32/float64, ``p`` in
    {1, 2}): it sorts each tree's coordinates, splits the atoms over the rays in sorted
    order and sums the rays' closed form. Otherwise :func:`angular_split_masses`, then
    the closed form on the rays.
    """
    polar, theta, scale, w, delta, extra = split
    if _kernels.usable(t, polar, theta, scale, w, p=p):
        fixed = None
        if extra is not None:  # atoms of given masses: w = 1 and sin t = 0 (no split)
            coords, fixed = extra
            B, T, G = t.shape[0], t.shape[1], coords.shape[-1]
            t = torch.cat([t, coords.expand(B, T, G)], dim=-1)
            polar = torch.cat([polar, polar.new_zeros(B, T, G)], dim=-1)
            scale = torch.cat([scale, scale.new_zeros(B, T, G)], dim=-1)
            w = torch.cat([w, w.new_ones(B, G)], dim=-1)
        return _SplitRayCost.apply(t, polar, theta, scale, w, fixed, delta, p)
    masses = angular_split_masses(polar, theta, scale, w, delta)
    coords, masses = ray_masses(t, masses, theta.shape[-1], extra)
    return line_cost(coords, masses, p, rays=True).sum(-1)


class _SplitRayCost(torch.autograd.Function):
    r"""STSW's cost per tree on S^2 from the angles, split and closed form in one loop.

    The compiled forward sorts each tree's coordinates, gathers the atoms' angles and
    masses in sorted order, forms their split over the rays there, and sums
    :math:`(t_j - t_{j-1}) \sum_l |S_{lj}|^p` over the rays' suffix masses
    :math:`S_{lj}` (in float64, from the far end). The backward is one loop per tree in
    sorted order. The same formulas as :class:`_AngularSplitMasses` and the line cost.
    ``fixed`` (B|1, T, k, G), optional, gives the last ``G`` atoms' masses on the rays
    instead of a split (their ``w`` must be 1 and ``scale`` 0).
    """

    @staticmethod
    def forward(ctx, t, polar, theta, scale, w, fixed, delta: float, p: float):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        idx = argsort_last(t, compact=True)  # read by the kernels only
        cost, saved = _kernels.ray_split_forward(t, polar, theta, scale, w, fixed, delta, p, idx)
        ctx.save_for_backward(*saved, t, polar, theta, scale, w, fixed)
        ctx.delta, ctx.p = delta, p
        return cost

    @staticmethod
    def backward(ctx, g: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        *saved, t, polar, theta, scale, w, fixed = ctx.saved_tensors
        if building_graph():  # create_graph: the same gradient, with its own graph
            delta, p = ctx.delta, ctx.p

            def cost(t: Tensor, polar: Tensor, theta: Tensor, scale: Tensor, w: Tensor) -> Tensor:
                masses = _angular_masses_graph(polar, theta, scale, w, delta)
                if fixed is not None:  # the last atoms' masses are given, not split
                    G = fixed.shape[-1]
                    given = fixed.expand(*masses.shape[:-1], G)
                    masses = torch.cat([masses[..., :-G], given], dim=-1)
                return line_cost_graph(t.unsqueeze(-2), masses, p, True).sum(-1)

            inputs, needs = (t, polar, theta, scale, w), ctx.needs_input_grad[:5]
            return (*graph_backward(cost, inputs, needs, g), None, None, None)
        need_t, need_polar, need_theta, need_scale, need_w = ctx.needs_input_grad[:5]
        gt, gp, gs, gth, gw = _kernels.ray_split_backward(tuple(saved), g, ctx.delta, ctx.p, need_w)
        return (
            gt if need_t else None,
            gp if need_polar else None,
            _shared_trees_sum(gth, saved[-1].shape) if need_theta else None,
            gs if need_scale else None,
            gw.sum(1) if gw is not None else None,
            None,
            None,
            None,
        )
