r"""MC-TSW: mixed-curvature tree-sliced Wasserstein distance (ICLR 2026)."""

from __future__ import annotations

import math
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor

from tsw.core._api import distance
from tsw.core._driver import evaluate
from tsw.core._output import Evaluation
from tsw.core._problem import Problem
from tsw.core._projection import RAYS, Projection, atoms, signed_masses
from tsw.core._safe import SafeSqrt
from tsw.core._slices import check_trees_batch, resolve_counts, with_batch_axis
from tsw.core._twice import building_graph, graph_backward
from tsw.core._validation import Measures, check_choice, check_tensor
from tsw.core.splits import ray_masses, split_masses
from tsw.curved._product import (
    CENTERS,
    Factor,
    MixedCurvatureTrees,
    check_components,
    check_on_product,
    check_trees_on_product,
    check_width,
    factors_of,
    lifted,
    lorentz_signs,
    product_center,
    ray_factors,
    sample_mixed_curvature_trees,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from typing_extensions import Unpack

    from tsw.core._api import ChunkedOptions

__all__ = ["mc_tsw"]

#: default numbers of trees and rays per tree (those of Db-TSW)
DEFAULT_COUNTS = (250, 4)
#: what the split measures the distance to (``split=``)
SPLITS = ("geodesic", "ray")


def check_split(value: object, name: str = "split") -> str:
    """Return ``value`` if it is one of :data:`SPLITS`, else raise naming them."""
    return check_choice(value, name, SPLITS)


def check_center(value: object, name: str = "center") -> object:
    """Return ``value`` if it is None, ``"mean"``, ``"origin"`` or a tensor."""
    if isinstance(value, str):
        if value not in CENTERS:
            raise ValueError(
                f'{name} must be "mean", "origin" or a tensor of shape (D,) or (B, D) on the '
                f"product; got {value!r}"
            )
        return value
    return None if value is None else check_tensor(value, name)


def _arsinh_sqrt(q: Tensor) -> Tensor:
    r""":math:`\operatorname{arsinh}\sqrt{\max(q, 0)}`, a hyperbolic distance from its squared sine.

    As :math:`\log(1 + s + q / (1 + \sqrt{1 + q}))`, :math:`s = \sqrt q`: accurate to
    rounding for small and large ``q`` alike, and several times cheaper than
    ``torch.asinh`` on the CPU. Zero subgradient at ``q <= 0``.
    """
    s = SafeSqrt.apply(q)
    q = s * s  # max(q, 0), consistently with s
    return torch.log1p(s + q / (1 + torch.sqrt(1 + q)))


def _root_distance(kind: str, c: Tensor, nz: Tensor, nr: Tensor) -> tuple[Tensor, Tensor]:
    r"""Distance to the root in one factor and its square, from the factor's Gram quantities.

    ``c`` the product :math:`\langle z_j, x_j\rangle` (Euclidean on centred Euclidean
    columns and on a sphere, Lorentz on a hyperboloid), ``nz`` and ``nr`` the squared
    Euclidean norms of the atom's and the root's factor (broadcast). :math:`|z - x|`
    (its square without a root; the distance itself is not formed), the angle
    :math:`\mathrm{atan2}(\sqrt{|z|^2 - c^2}, c)` and :math:`\operatorname{arsinh}
    \sqrt{a^2 - 1}` (:math:`a = -c`), each with a zero subgradient where it vanishes.
    """
    if kind == "euclidean":
        d2 = (nz - 2 * c + nr).clamp_min(0)
        return d2, d2
    if kind == "sphere":
        d = torch.atan2(SafeSqrt.apply(nz - c * c), c)
    else:
        d = _arsinh_sqrt((c - 1) * (c + 1))  # a^2 - 1 with a = -c
    return d, d * d


def _geodesic_distance2(
    kind: str, flat: bool, split: str, S: Tensor, C: Tensor, Nz: Tensor
) -> Tensor:
    r"""Squared distance :math:`g^2` from atoms to rays' geodesics inside a curved factor.

    All (B, L', n) for the ``L'`` rays of spherical or hyperbolic factors (``kind``; of
    dimension 1 if ``flat``): ``S`` the product :math:`\langle z_j, v\rangle` with the
    ray's direction (Lorentz on a hyperboloid), ``C`` and ``Nz`` the root product and the
    squared norm in the ray's factor.

    * sphere: the angle between ``z`` and the plane of the great circle,
      :math:`\mathrm{atan2}(\sqrt{|z|^2 - c^2 - s^2}, \sqrt{c^2 + s^2})`;
    * hyperboloid: :math:`\sinh^2 g = a^2 - s^2 - 1` (:math:`a = -c = \cosh d_j`);
    * a factor of dimension 1 is its own geodesic: :math:`g = 0`.

    With ``split="ray"``, the distance to the ray itself: to the geodesic where the foot
    of the perpendicular lies on the ray (``s >= 0``), else to its nearer end (the root;
    on a sphere the nearer of the root and its antipode).
    """
    if flat:
        g2 = torch.zeros_like(S)
    elif kind == "sphere":
        r2 = torch.addcmul(C * C, S, S)
        g = torch.atan2(SafeSqrt.apply(Nz - r2), SafeSqrt.apply(r2))
        g2 = g * g
    else:
        g = _arsinh_sqrt(torch.addcmul(C * C, S, S, value=-1) - 1)  # a^2 - s^2 - 1
        g2 = g * g
    if split == "ray":
        d, d2 = _root_distance(kind, C, Nz, Nz)
        if kind == "sphere":
            end = torch.minimum(d, math.pi - d)
            d2 = end * end
        g2 = torch.where(S >= 0, g2, d2)
    return g2


def _group_distance(
    kind: str, flat: bool, split: str, base: Tensor, S: Tensor, C: Tensor, Nz: Tensor
) -> Tensor:
    r"""Distance :math:`d_{\mathcal M}(z, \bar\gamma)` to rays of one kind, in torch operations.

    All (B, L', n). Euclidean factor: ``base`` the squared distance to the root
    :math:`t^2` and ``S`` the coordinate :math:`\langle z_j - x_j, v\rangle`, the squared
    distance :math:`t^2 - s^2` (Pythagoras; ``C`` and ``Nz`` not read). Curved factor:
    ``base`` the squared distance to the root in the other factors, :math:`\sum_{l \ne
    j} d_l^2`, and the squared distance :math:`base + g^2`
    (:func:`_geodesic_distance2`). The reference of :class:`_RayDistance` (which runs it
    under ``create_graph``) and the path of ``split="ray"``.
    """
    if kind == "euclidean":
        part = torch.addcmul(base, S, S, value=-1)
        if split == "ray":  # behind the root, the ray's nearest point is the root
            part = torch.where(S >= 0, part, base)
    else:
        part = base + _geodesic_distance2(kind, flat, split, S, C, Nz)
    return SafeSqrt.apply(part)


class _RayDistance(torch.autograd.Function):
    r""":func:`_group_distance` for ``split="geodesic"``, in place, with a written-out gradient.

    ``_RayDistance.apply(base, S, C, Nz, rows, factors, kind, flat)``: ``base`` (B, R, n)
    read through ``rows`` (L',), one row per ray (the squared distances to the roots
    :math:`t^2`, one row per tree, for Euclidean factors; the other factors' squared
    distances, one row per tree and factor, for curved ones), ``Nz`` (B, m, n) the
    factors' squared norms read through ``factors`` (L',); ``S``, ``C`` (B, L', n) the
    rays' products. The forward forms the distance a chunk of rays at a time with a few
    work spaces (in-place passes), the backward its gradient from the coefficient ``G``
    the forward kept: with :math:`P = base - s^2` (Euclidean) or :math:`base + g^2` and
    :math:`D = \sqrt P`,

    * Euclidean: :math:`\partial P / \partial s = -2s`;
    * hyperboloid, :math:`v = c^2 - s^2 - 1 = \sinh^2 g`, :math:`G = g / \sqrt{v(1 + v)}`:
      :math:`\partial P/\partial c = 2cG`, :math:`\partial P/\partial s = -2sG`;
    * sphere, :math:`X = \sqrt{c^2 + s^2}`, :math:`Y = \sqrt{|z|^2 - X^2}`,
      :math:`G = g/(XY)`: :math:`\partial P/\partial c = -2cG`, :math:`\partial P/\partial
      s = -2sG`, :math:`\partial P/\partial |z|^2 = X^2 G / |z|^2`;

    :math:`\partial P/\partial base = 1` and :math:`\partial D/\partial P = 1/(2D)`
    (0 where :math:`D = 0`). ``G`` is 0 where its denominator vanishes (on a geodesic, at
    a great circle's poles): the zero subgradients of :func:`_group_distance`'s
    operations, so that the written-out gradient is theirs everywhere. Under
    ``create_graph`` the gradient is that of :func:`_group_distance`
    (:func:`~tsw.core._twice.graph_backward`).
    """

    @staticmethod
    def forward(  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        ctx,
        base: Tensor,
        S: Tensor,
        C: Tensor,
        Nz: Tensor,
        rows: Tensor,
        factors: Tensor,
        kind: str,
        flat: bool,
    ):
        ctx.kind, ctx.flat = kind, flat
        D = torch.empty_like(S)
        G = torch.empty_like(S) if kind != "euclidean" and not flat else None
        for part in _chunks(S):
            d = D[:, part]
            b = base.index_select(1, rows[part])
            s, c = S[:, part], C[:, part]
            if kind == "euclidean":
                torch.addcmul(b, s, s, value=-1, out=d)
            elif G is None:  # a factor of dimension 1: on the geodesic
                d.copy_(b)
            elif kind == "hyperbolic":
                v = torch.mul(c, c).addcmul_(s, s, value=-1).sub_(1).clamp_(min=0)
                g = _arsinh_parts(v, G[:, part])
                torch.addcmul(b, g, g, out=d)
            else:
                X = torch.mul(c, c).addcmul_(s, s)  # X^2
                Y = Nz.index_select(1, factors[part]).sub_(X).clamp_(min=0).sqrt_()
                g = torch.atan2(Y, X.sqrt_())
                _ratio(g, X.mul_(Y), G[:, part], cone=True)  # 0 on the circle and at poles
                torch.addcmul(b, g, g, out=d)
            d.clamp_(min=0).sqrt_()
        ctx.save_for_backward(base, S, C, Nz, D, G, rows, factors)
        return D

    @staticmethod
    def backward(ctx, grad: Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        base, S, C, Nz, D, G, rows, factors = ctx.saved_tensors
        kind, flat = ctx.kind, ctx.flat
        needs = ctx.needs_input_grad
        if building_graph():  # create_graph: the same gradient, with its own graph

            def reference(base: Tensor, S: Tensor, C: Tensor, Nz: Tensor) -> Tensor:
                b, nz = base.index_select(1, rows), Nz.index_select(1, factors)
                return _group_distance(kind, flat, "geodesic", b, S, C, nz)

            grads = graph_backward(reference, (base, S, C, Nz), needs[:4], grad)
            return (*grads, None, None, None, None)
        euclid = kind == "euclidean"
        gB = torch.zeros_like(base) if needs[0] else None
        gS = torch.empty_like(S) if needs[1] and (euclid or G is not None) else None
        gC = torch.empty_like(C) if needs[2] and G is not None else None
        gN = torch.zeros_like(Nz) if needs[3] and kind == "sphere" and G is not None else None
        tiny = torch.full((), torch.finfo(D.dtype).tiny, dtype=D.dtype, device=D.device)
        for part in _chunks(S):
            d = D[:, part]
            p = torch.addcmul(tiny, d, d).reciprocal_()
            p.mul_(d).mul_(grad[:, part]).mul_(0.5)  # grad / (2 D), 0 where D = 0
            if gB is not None:
                gB.index_add_(1, rows[part], p)
            if G is not None:
                p.mul_(G[:, part])  # G dP
            if gS is not None:  # -2 s dP (Euclidean), -2 s G dP (curved)
                torch.mul(S[:, part], p, out=gS[:, part]).mul_(-2)
            if gC is not None:  # 2 c G dP (hyperboloid), -2 c G dP (sphere)
                torch.mul(C[:, part], p, out=gC[:, part]).mul_(2 if kind == "hyperbolic" else -2)
            if gN is not None:  # X^2 G dP / |z|^2
                c, s, f = C[:, part], S[:, part], factors[part]
                term = torch.mul(c, c).addcmul_(s, s).mul_(p).div_(Nz.index_select(1, f))
                gN.index_add_(1, f, term)
        return gB, gS, gC, gN, None, None, None, None


#: the elements of one chunk of :class:`_RayDistance`'s and :class:`_RootDistance`'s
#: passes: their work spaces stay in cache and are reused from chunk to chunk (measured
#: forward + backward, N = M = 2000, 250 trees of 4 rays on R^4 x S^3 x H^3, float32, one
#: thread: 2^15 104 ms, 2^16 92 ms, 2^18 90 ms, 2^20 96 ms)
CHUNK_ELEMENTS = 2**18


def _chunks(x: Tensor) -> list[slice]:
    """Slices cutting (B, L, n) along ``L`` into chunks of :data:`CHUNK_ELEMENTS`."""
    rows = max(1, CHUNK_ELEMENTS // max(x.shape[0] * x.shape[2], 1))
    return [slice(i, min(i + rows, x.shape[1])) for i in range(0, x.shape[1], rows)]


def _ratio(num: Tensor, den: Tensor, out: Tensor | None = None, cone: bool = False) -> Tensor:
    """``num / den`` (into ``out``), 0 where ``den`` is 0 (``cone``: ``num`` need not vanish there).

    0 is the gradient the torch operations give there (:class:`~tsw.core._safe.SafeSqrt`'s
    zero subgradient), which :class:`_RayDistance`'s backward keeps equal to.
    """
    res = torch.div(num, den.clamp_min(torch.finfo(den.dtype).tiny), out=out)
    return res.masked_fill_(den == 0, 0.0) if cone else res


def _arsinh_parts(q: Tensor, ratio: Tensor | None = None) -> Tensor:
    r""":math:`a = \operatorname{arsinh}\sqrt q`, and :math:`a / \sqrt{q(1 + q)}` into ``ratio``.

    ``q >= 0`` (overwritten); :math:`a = \log(\sqrt{1 + q} + \sqrt q)`, a sum of
    non-negative terms (absolute error of a few ``eps``, and several times cheaper than
    ``torch.asinh`` on the CPU). The ratio, :math:`\partial(a^2)/\partial q` (0 at
    ``q = 0``, as the torch operations' subgradient), is read by :class:`_RayDistance`'s
    backward.
    """
    s = q.sqrt()
    r = q.add_(1).sqrt_()  # sqrt(1 + q), in q's place
    a = torch.add(r, s).log_()
    if ratio is not None:
        _ratio(a, r.mul_(s), ratio)  # a = 0 where s = 0
    return a


def _others(d2: Tensor) -> Tensor:
    r""":math:`\sum_{l \ne j} d_l^2` for each factor ``j`` along axis 2 of ``d2`` (B, T, m, n).

    An exclusive prefix sum plus an exclusive suffix sum: sums of non-negative terms.
    """
    if d2.shape[2] == 1:
        return d2 * 0  # (in the graph, as the second output of the reference)
    before = torch.cumsum(d2, dim=2) - d2
    after = torch.flip(torch.cumsum(torch.flip(d2, [2]), dim=2), [2]) - d2
    return (before + after).clamp(min=0)


def _root_reference(
    C: Tensor, Nz: Tensor, Nr: Tensor, kinds: tuple[str, ...]
) -> tuple[Tensor, Tensor]:
    """:class:`_RootDistance` in torch operations (its gradient under ``create_graph``)."""
    d2 = torch.stack(
        [
            _root_distance(kind, C[:, :, j], Nz[:, None, j], Nr[..., j, None])[1]
            for j, kind in enumerate(kinds)
        ],
        dim=2,
    )
    return d2.sum(2), _others(d2)


class _RootDistance(torch.autograd.Function):
    r"""Squared distances to the roots: :math:`t^2 = \sum_j d_j^2` and the others', in chunks.

    ``_RootDistance.apply(C, Nz, Nr, kinds)`` returns ``t2`` (B, T, n) and ``others``
    (B, T, m, n), :math:`\sum_{l \ne j} d_l^2` (what a ray of factor ``j`` adds its
    geodesic's distance to). ``C`` (B, T, m, n) the factors' root products, ``Nz``
    (B, m, n) and ``Nr`` (B|1, T, m) the squared norms (see :func:`_root_distance`, whose
    values and zero subgradients it keeps). The forward keeps each curved factor's
    coefficient of :math:`\partial d_j^2 / \partial c` (sphere: :math:`-2A` with
    :math:`A = d/y`, also :math:`\partial d_j^2 / \partial |z|^2 = Ac/|z|^2`;
    hyperboloid: :math:`2c\,\partial(a^2)/\partial q`); a Euclidean factor's are
    constants (:math:`-2`, 1, 1). The gradient of :math:`d_l^2` is that of ``t2`` plus
    those of the other factors' ``others``. Chunks over the trees keep the work spaces in
    cache. Under ``create_graph``: :func:`_root_reference`.
    """

    @staticmethod
    def forward(ctx, C: Tensor, Nz: Tensor, Nr: Tensor, kinds: tuple[str, ...]):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        B, T, m, n = C.shape
        t2 = C.new_empty(B, T, n)
        others = C.new_empty(B, T, m, n)
        coef = C.new_empty(B, T, m, n)  # the curved factors' A (read on those only)
        for part in _tree_chunks(B, T, m, n):
            d2 = C.new_empty(B, part.stop - part.start, m, n)
            for j, kind in enumerate(kinds):
                c, a, out = C[:, part, j], coef[:, part, j], d2[:, :, j]
                if kind == "euclidean":  # |z|^2 - 2 <z, x> + |x|^2
                    torch.add(Nz[:, None, j], Nr[:, part, j, None], out=out).add_(c, alpha=-2)
                    out.clamp_(min=0)
                elif kind == "sphere":
                    y = torch.addcmul(Nz[:, None, j], c, c, value=-1).clamp_(min=0).sqrt_()
                    d = torch.atan2(y, c)
                    _ratio(d, y, a, cone=True)
                    torch.mul(d, d, out=out)
                else:
                    d = _arsinh_parts(torch.addcmul(c.new_full((), -1.0), c, c).clamp_(min=0), a)
                    torch.mul(d, d, out=out)
            torch.sum(d2, dim=2, out=t2[:, part])
            for j in range(m):  # the sum of the others, term by term (no cancellation)
                out = others[:, part, j]
                out.zero_()
                for other in range(m):
                    if other != j:
                        out.add_(d2[:, :, other])
        ctx.kinds = kinds
        ctx.save_for_backward(C, Nz, Nr, coef)
        return t2, others

    @staticmethod
    def backward(ctx, g_t2: Tensor | None, g_others: Tensor | None):  # pyright: ignore[reportIncompatibleMethodOverride]  # torch's documented form
        C, Nz, Nr, coef = ctx.saved_tensors
        kinds = ctx.kinds
        needs = ctx.needs_input_grad
        if building_graph():
            reference = partial(_root_reference, kinds=kinds)
            grads = graph_backward(reference, (C, Nz, Nr), needs[:3], (g_t2, g_others))
            return (*grads, None)
        B, T, m, n = C.shape
        gC = torch.empty_like(C) if needs[0] else None
        gN = torch.zeros_like(Nz) if needs[1] else None
        gR = torch.zeros_like(Nr) if needs[2] else None
        for part in _tree_chunks(B, T, m, n):
            # the gradient of each d_l^2: t2's, plus the others' of every other factor
            if g_t2 is not None:
                total = g_t2[:, part].clone()
            else:
                total = C.new_zeros(B, part.stop - part.start, n)
            if g_others is not None:
                total.add_(g_others[:, part].sum(2))
            for j, kind in enumerate(kinds):
                grad = total if g_others is None else total - g_others[:, part, j]
                c, a = C[:, part, j], coef[:, part, j]
                if kind == "euclidean":
                    if gC is not None:
                        torch.mul(grad, -2, out=gC[:, part, j])
                    if gN is not None:
                        gN[:, j] += grad.sum(1)
                    if gR is not None:
                        gR[:, part, j] += grad.sum(-1).sum_to_size(gR[:, part, j].shape)
                elif kind == "sphere":  # d(d^2)/dc = -2A, d(d^2)/d|z|^2 = A c / |z|^2
                    if gC is not None:
                        torch.mul(a, grad, out=gC[:, part, j]).mul_(-2)
                    if gN is not None:
                        gN[:, j] += (a * c * grad).sum(1) / Nz[:, j]
                elif gC is not None:  # d(a^2)/dc = 2 c d(a^2)/dq
                    torch.mul(a, grad, out=gC[:, part, j]).mul_(c).mul_(2)
        return gC, gN, gR, None


def _tree_chunks(B: int, T: int, m: int, n: int) -> list[slice]:
    """Slices of the trees whose (B, trees, m, n) blocks hold about :data:`CHUNK_ELEMENTS`."""
    rows = max(1, CHUNK_ELEMENTS // max(B * m * n, 1))
    return [slice(i, min(i + rows, T)) for i in range(0, T, rows)]


def mc_projection(
    measures: Measures,
    rays: tuple[MixedCurvatureTrees, Tensor],
    *,
    factors: tuple[Factor, ...],
    delta: float,
    split: str,
) -> Projection:
    r"""MC-TSW's projection: the distance to the root on every ray and the split masses.

    ``rays``: the trees and the factor of each ray, an int64 CPU tensor (T, k) or (B, T, k)
    (:func:`~tsw.curved._product.ray_factors`). Coordinates :math:`t(z) = d_{\mathcal
    M}(x, z)` (B, T, 1, n), shared by the rays of a tree (``RAYS``), and masses
    :math:`\mathrm{softmax}_i(-\delta\, d_{\mathcal M}(z, \bar\gamma_i))\, w`
    (B, T, k, n). Two products of the atoms with the trees (their roots, one row per tree
    and factor, and their directions) give every quantity through Gram identities: no
    (T, k, n, D) tensor is formed. The rays are then taken kind by kind (an index of the
    rays of Euclidean, spherical and hyperbolic factors), each kind's formula on its own
    rays only. The Euclidean columns are centred on the trees' mean root first
    (detached), so that :math:`|z - x|^2` does not cancel for data far from the origin;
    a hyperboloid's :math:`x_0` is read as :math:`\sqrt{1 + |x_{1:}|^2}`.
    """
    trees, own = rays
    own = own if own.dim() == 3 else own.unsqueeze(0)
    if own.shape[0] > 1 and not bool((own == own[:1]).all()):
        return _item_by_item(measures, trees, own, factors, delta, split)
    own = own[0]
    Z, w = lifted(atoms(measures), factors), signed_masses(measures)  # (B, n, D), (B, n)
    R = lifted(with_batch_axis(trees.roots, 2), factors)  # (Bt, T, D)
    V = with_batch_axis(trees.directions, 3)  # (Bt, T, k, D)
    T, k, D = V.shape[-3], V.shape[-2], V.shape[-1]
    m = len(factors)
    B, n = Z.shape[0], Z.shape[1]
    signs = lorentz_signs(factors, Z)
    masks = torch.zeros(m, D, dtype=Z.dtype, device=Z.device)
    euclid = torch.zeros(D, dtype=Z.dtype, device=Z.device)
    for j, f in enumerate(factors):
        masks[j, f.start : f.stop] = 1
        if f.kind == "euclidean":
            euclid[f.start : f.stop] = 1
    kinds = {f.kind for f in factors}
    if "euclidean" in kinds:
        shift = R.detach().mean(dim=-2, keepdim=True) * euclid  # (Bt, 1, D)
        Z, R = Z - shift, R - shift
    Zt = Z.transpose(-1, -2)  # (B, D, n)
    # the roots' factors, one row per (tree, factor), signed: <z_j, x_j> (Lorentz on H)
    rows = ((R * signs).unsqueeze(-2) * masks).reshape(R.shape[0], T * m, D)
    C = torch.matmul(rows, Zt).view(B, T, m, n)
    Nz = torch.matmul(masks, Zt * Zt)  # (B, m, n)
    Nr = torch.matmul(R * R, masks.T)  # (Bt, T, m)
    t2, others = _RootDistance.apply(C, Nz, Nr, tuple(f.kind for f in factors))
    t = SafeSqrt.apply(t2)
    if delta == 0:  # the uniform split: no distance to the rays
        return Projection(*ray_masses(t, (w / k)[:, None, None, :], k), RAYS)
    # the rays, kind by kind: <z, v> (Lorentz on H, less <x, v> on Euclidean columns),
    # and on curved factors <z_j, x_j> again, from products with the kind's rows only
    L = T * k
    flat_own = own.reshape(L)
    tree_of = torch.arange(T).repeat_interleave(k)
    dirs = (V * signs).reshape(V.shape[0], L, D)
    ray_dist = Z.new_empty(B, L, n)
    device = Z.device
    for kind in sorted(kinds):
        for flat in (False, True):
            ids = [j for j, f in enumerate(factors) if f.kind == kind and (f.dim == 1) == flat]
            picked = torch.isin(flat_own, torch.tensor(ids, dtype=flat_own.dtype))
            if not ids or not bool(picked.any()):
                continue
            idx = picked.nonzero().squeeze(1)
            idx_d, trees_d = idx.to(device), tree_of[idx].to(device)
            Sk = torch.matmul(dirs.index_select(1, idx_d), Zt)  # (B, L', n)
            fac_d = flat_own[idx].to(device)
            if kind == "euclidean":  # t^2 - s^2, t^2 by tree
                off = V.reshape(-1, L, D).index_select(1, idx_d) * R.index_select(1, trees_d)
                Sk = Sk - (off * euclid).sum(-1, keepdim=True)
                base, at, Ck = t2, trees_d, Sk  # (C not read)
            else:  # the other factors' squared distances, by tree and factor, plus g^2
                at = (tree_of[idx] * m + flat_own[idx]).to(device)
                base = others.view(B, T * m, n)
                Ck = C.view(B, T * m, n).index_select(1, at)
            if split == "geodesic":
                part = _RayDistance.apply(base, Sk, Ck, Nz, at, fac_d, kind, flat)
            else:
                b, Nzk = base.index_select(1, at), Nz.index_select(1, fac_d)
                part = _group_distance(kind, flat, split, b, Sk, Ck, Nzk)
            ray_dist.index_copy_(1, idx_d, part)
    ray_dist = ray_dist.view(B, T, k, n)
    # every coordinate is >= 0: the star of lines through the root is the star of rays,
    # and its closed form splits and transports together (one compiled loop per tree)
    # one sort per tree serves its rays (RAYS); the compiled split forms the masses
    masses = split_masses(w, delta, distances=ray_dist)
    return Projection(*ray_masses(t, masses, k), RAYS)


def _item_by_item(
    measures: Measures,
    trees: MixedCurvatureTrees,
    own: Tensor,
    factors: tuple[Factor, ...],
    delta: float,
    split: str,
) -> Projection:
    """:func:`mc_projection` of per-item trees whose rays take different factors."""
    parts = []
    for b in range(own.shape[0]):
        X_s, X_t, a, w = (x[b : b + 1] for x in measures[:4])
        item = Measures(X_s, X_t, a, w, True)
        one = MixedCurvatureTrees(trees.roots[b], trees.directions[b], validate=False)
        parts.append(
            mc_projection(item, (one, own[b : b + 1]), factors=factors, delta=delta, split=split)
        )
    coords = torch.cat([p.coords for p in parts])
    masses = torch.cat([cast(Tensor, p.masses) for p in parts])
    return Projection(coords, masses, RAYS)


def _narrow(rays: tuple[MixedCurvatureTrees, Tensor], start: int, stop: int):
    """Trees ``start`` to ``stop - 1`` and their rays' factors."""
    return rays[0].narrow(start, stop), rays[1][..., start:stop, :]


def resolve_mixed_trees(
    problem: Problem,
    trees: object,
    factors: tuple[Factor, ...],
    *,
    n_trees: int | None,
    n_lines: int | None,
    center: Tensor | str | None,
    root_std: float,
) -> MixedCurvatureTrees:
    """Explicit trees checked against the data and the product, or trees drawn."""
    measures = problem.measures
    if trees is not None:
        if not isinstance(trees, MixedCurvatureTrees):
            raise TypeError(f"trees must be MixedCurvatureTrees; got {type(trees).__name__}")
        # the fit with the data reads dim, directions and batch_size, which it has too
        check_trees_batch(cast(Any, trees), measures)
        checked = trees
        resolve_counts(cast(Any, checked), n_trees, n_lines)
        check_trees_on_product(checked, factors, problem.validate)
        return checked
    T, k = resolve_counts(None, n_trees, n_lines, DEFAULT_COUNTS)
    c = product_center(center, measures, factors, problem.validate)
    components = tuple((f.kind, f.dim) for f in factors)
    return sample_mixed_curvature_trees(
        components,
        n_trees=T,
        n_lines=k,
        center=c,
        std=root_std,
        generator=problem.rng.generator,
        dtype=measures.X_s.dtype,
        device=measures.X_s.device,
    )


@distance(
    chunked=True,
    checks={"components": check_components, "split": check_split, "center": check_center},
)
def mc_tsw(
    problem: Problem,
    /,
    *,
    components: Sequence[tuple[str, int]],
    n_trees: int | None = None,
    n_lines: int | None = None,
    delta: float = 1.0,
    p: float = 1,
    split: str = "geodesic",
    trees: MixedCurvatureTrees | None = None,
    center: Tensor | str | None = "mean",
    root_std: float = 1.0,
    **options: Unpack[ChunkedOptions],
) -> Evaluation:
    r"""Mixed-curvature tree-sliced Wasserstein distance (MC-TSW) on a product of factors.

    References: [Tran2026m]_, [Le2022m]_.

    The measures live on a product :math:`\mathcal M = \prod_{j=1}^m M_j` of Euclidean
    spaces, unit spheres and hyperbolic spaces (curvature -1, Lorentz model) with the
    product metric :math:`d_{\mathcal M}^2 = \sum_j d_j^2`; a point is the concatenation
    of its factors' ambient coordinates, in the order of ``components``.

    Each of ``T`` random trees (:class:`tsw.MixedCurvatureTrees`) has a root
    :math:`x \in \mathcal M` and ``k`` rays; ray ``i`` is the geodesic ray
    :math:`\gamma_i(t)` that leaves :math:`x` in a unit tangent direction :math:`v_i` of
    one factor, keeping the other factors at the root's. The rays are glued at the root
    (the star metric: :math:`|t_a - t_b|` on a ray, :math:`t_a + t_b` across rays). A
    point :math:`z` of weight :math:`a_z` sits at :math:`t(z) = d_{\mathcal M}(x, z)` on
    *every* ray and puts mass :math:`a_z \alpha_i(z)` on ray ``i``, with

    .. math::

        \alpha_i(z) = \mathrm{softmax}_i\big(-\delta\, d_{\mathcal M}(z,
            \bar\gamma_i)\big), \qquad d_{\mathcal M}(z, \bar\gamma_i)^2 =
            \sum_{l \ne j_i} d_l(z_l, x_l)^2 + d_{j_i}(z_{j_i}, \bar\gamma_i)^2,

    :math:`\bar\gamma_i` the complete geodesic carrying the ray (``split="geodesic"``)
    and :math:`j_i` its factor. The value is

    .. math::

        \mathrm{MCTSW}_p(\mu, \nu) = \Big(\frac1T \sum_{\tau=1}^T \sum_{e \in
        \mathcal T_\tau} w_e\, |\mu_\tau(\Gamma_e) - \nu_\tau(\Gamma_e)|^p\Big)^{1/p}.

    For ``p = 1`` each tree term is the exact Wasserstein-1 distance for the tree metric
    between the projected measures (the paper's definition); for ``p > 1`` it is the
    tree-sliced Sobolev transport :math:`ST_p` (Le et al. 2022), not a
    Wasserstein-:math:`p` distance. A single factor gives the tree-sliced distance of that
    space: ``[("hyperbolic", d)]`` a hyperbolic one. The page *Curved spaces* of the
    documentation compares it with the sphere's STSW and the Euclidean Db-TSW.

    **Sources and choices.** The paper's text was not available when this was written;
    the construction follows published accounts of it (summaries and its reviews): the
    tree system (a root, rays along geodesics of single factors), the projection on the
    distance to the root, the softmax split of the distances to the rays' geodesics
    (as reported, without a temperature: ``delta = 1``), the closed form and the sampling
    (a wrapped-normal root, each ray's factor uniform among the factors, a uniform
    direction in that factor's tangent space). Where the accounts leave a choice open:

    * the split measures the distance to the *complete* geodesic carrying a ray, as the
      accounts state; ``split="ray"`` measures it to the ray itself (:math:`t \ge 0`),
      which separates a ray from its opposite direction as STSW's split does;
    * the wrapped normal is centred at the detached mean of the measures factor by
      factor (``center="mean"``: Euclidean mean, normalised extrinsic mean on a sphere,
      Lorentzian centroid on a hyperboloid, each equivariant under its factor's
      isometries), with identity covariance (``root_std = 1``, a standard wrapped
      normal). Every point sits at its distance to the root on every ray, so the
      coordinates see positions only through the spread of the roots: around the mean
      at Db-TSW's 0.1 they are nearly blind to angular structure, and in
      ``python -m benchmarks.curved_flow`` a product flow made no progress at all (the
      page *Curved spaces* gives the figures);
    * factors may have different dimensions (the paper's implementation gives them one
      dimension to vectorise; here each ray's direction is zero outside its factor);
    * curvatures are +1 and -1 (scale the data for others).

    Parameters
    ----------
    X_s : Tensor of shape (N, D) or (B, N, D)
        Source support, points of the product (each factor's ambient coordinates, in the
        order of ``components``).
    X_t : Tensor of shape (M, D) or (B, M, D)
        Target support; ``M != N`` is allowed.
    a, b : Tensor of shape (N,) / (M,) or (B, N) / (B, M), optional
        Non-negative weights of equal totals; uniform ``1/N``, ``1/M`` by default.
    components : sequence of (name, d)
        The factors, in the order of the columns: ``("euclidean", d)`` (``d`` columns),
        ``("sphere", d)`` (:math:`\mathbb S^d`, ``d + 1`` columns of a unit vector),
        ``("hyperbolic", d)`` (:math:`\mathbb H^d`, ``d + 1`` columns on the hyperboloid
        :math:`-x_0^2 + |x_{1:}|^2 = -1`, :math:`x_0 > 0`). Required.
    n_trees, n_lines : int, optional
        ``T`` and ``k``; 250 and 4 by default, inferred from ``trees`` if given.
    delta : float, default 1.0
        Inverse temperature of the split; ``0`` is the uniform split. In geodesic units:
        scaling the distances by ``c`` acts like ``delta * c``.
    p : float, default 1
        Exponent (see above).
    split : {"geodesic", "ray"}, default "geodesic"
        What the split measures the distance to: the complete geodesic carrying each ray
        (the paper as reported), or the ray itself.
    trees : MixedCurvatureTrees, optional
        Explicit trees (shared, or one set per batch item); overrides the sampling.
    center : "mean", "origin" or Tensor of shape (D,) or (B, D), default "mean"
        Centre of the roots' wrapped normal: the detached mean of both measures (per
        batch item, see above), the product's origin (0, :math:`e_0` and
        :math:`(1, 0, \dots, 0)` on the factors) or a given point of the product.
    root_std : float, default 1.0
        Standard deviation of the roots around the centre, in geodesic units (of the
        data's scale: the roots should spread over the data).

    Returns
    -------
    Tensor of shape () or (B,)
        Same dtype and device as ``X_s``.

    Raises
    ------
    TypeError, ValueError
        For malformed inputs (see :func:`tsw.core._validation.check_measures`); with a
        ValueError naming the argument: ``components`` that name an unknown factor, have
        a dimension below 1 or do not add up to the width of the points; points off a
        sphere or off the hyperboloid in their factor (with ``validate``); ``p < 1``,
        ``delta < 0``, counts < 1, an unknown ``split`` or ``center``, or trees that do
        not fit the data and the product.

    Notes
    -----
    All rays of a tree share the coordinate :math:`t(z)`: one sort per tree, then the
    closed form of :func:`tsw.line_system_cost` on rays. Cost: two products of the
    (n, D) atoms with the trees' (T m + T k, D) rows, O(T k n) elementwise work for the
    distances and the split, O(T n log n) for the sorts; no (T, k, n, D) tensor. The
    distances come from Gram identities (:math:`\cosh d = -\langle z, x\rangle_L` on a
    hyperboloid, :math:`\cos d = \langle z, x\rangle` on a sphere): within about
    :math:`\sqrt\epsilon` of a root or of a ray's geodesic they are resolved to about
    :math:`\sqrt\epsilon` (1.5e-8 in float64), and on a hyperboloid the products' rounding
    grows with :math:`x_0 z_0`. Gradients are finite everywhere, with a zero subgradient
    where a distance vanishes. In a batch, sampled trees are shared by the items when
    ``center`` is a shared point; with ``center="mean"`` each item's trees are drawn
    around its own centre from the same draws, so a batched call equals a loop of
    unbatched calls with the same seed.

    References
    ----------
    .. [Tran2026m] Mixed-curvature tree-sliced Wasserstein distance. ICLR 2026
       (OpenReview e439wJl5sT).
    .. [Le2022m] T. Le, T. Nguyen, D. Phung, V. A. Nguyen. Sobolev transport: a
       scalable metric for probability measures with graph metrics. AISTATS 2022.

    Examples
    --------
    >>> import torch, tsw
    >>> g = torch.Generator().manual_seed(0)
    >>> def points(n):  # R^2 x S^2 x H^2: 2 + 3 + 3 columns
    ...     e = torch.randn(n, 2, generator=g)
    ...     s = torch.nn.functional.normalize(torch.randn(n, 3, generator=g), dim=-1)
    ...     h = 0.5 * torch.randn(n, 2, generator=g)
    ...     h = torch.cat([(1 + h.square().sum(-1, keepdim=True)).sqrt(), h], dim=-1)
    ...     return torch.cat([e, s, h], dim=-1)
    >>> X, Y = points(50), points(40)
    >>> parts = [("euclidean", 2), ("sphere", 2), ("hyperbolic", 2)]
    >>> value = tsw.mc_tsw(X, Y, components=parts, n_trees=100, seed=0)
    >>> value.shape, bool(value > 0)
    (torch.Size([]), True)
    """
    factors = factors_of(components)
    measures = problem.measures
    check_width(factors, measures.X_s.shape[-1], "the points")
    check_on_product(measures.X_s, factors, "X_s", problem.validate)
    check_on_product(measures.X_t, factors, "X_t", problem.validate)
    drawn = resolve_mixed_trees(
        problem,
        trees,
        factors,
        n_trees=n_trees,
        n_lines=n_lines,
        center=center,
        root_std=root_std,
    )
    own = ray_factors(drawn.directions, factors).cpu()  # (T, k), or (B, T, k) per item
    project = partial(mc_projection, factors=factors, delta=delta, split=split)
    evaluation = evaluate(problem, project, (drawn, own), narrow=_narrow)
    return evaluation._replace(slices=drawn)
