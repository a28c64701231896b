"""``torch.nn.Module`` losses: hyper-parameters in ``__init__``, tensors in ``forward``.

Every loss is built from the function of the same name by one mechanism
(:func:`tsw.core._loss._loss_from`): its ``__init__`` takes exactly the function's
keyword options (names and defaults, read from the function's signature, so they cannot
drift), except the
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
* ``resample=False``: the same random draw (directions, root offsets) at every call,
  so the value is a deterministic function of the inputs. The roots of the tree losses
  still follow the data's centre (``center="mean"`` or ``"median"``, the default), a
  *detached* one: the gradient autograd returns holds the roots fixed, so it is not the
  derivative of that function (``torch.autograd.gradcheck`` fails against its finite
  differences). Give ``center`` a tensor (e.g. ``torch.zeros(d)``) for a loss whose
  gradient is its derivative.
* ``state_dict()`` holds the random stream (the generator's state, the fixed seed):
  a module restored with ``load_state_dict`` resumes the stream where the saved one
  was.
"""

from __future__ import annotations

import inspect
import secrets
from typing import Any, cast

import torch
from torch import Tensor

from tsw.core._api import LOW_PRECISION
from tsw.core._loss import NOT_OPTIONS, _Loss, _loss_from, _UnifLoss
from tsw.core._validation import check_positive_int
from tsw.curved._hsw import ghsw, hhsw
from tsw.curved._mc_tsw import mc_tsw
from tsw.curved._spdsw import hspdsw, spdsw
from tsw.euclidean._circular_tsw import circular_tsw
from tsw.euclidean._db_tsw import db_tsw
from tsw.euclidean._max_tsw_sl import max_tsw_sl
from tsw.euclidean._partial_tsw import partial_tsw
from tsw.euclidean._spatial_tsw import spatial_tsw
from tsw.euclidean._ts_sobolev import ts_sobolev
from tsw.euclidean._tsw_sl import tsw_sl
from tsw.euclidean.mappings import resolve_mapping
from tsw.sliced._eb_sw import eb_sw
from tsw.sliced._lcv_sw import lcv_sw
from tsw.sliced._rp_sw import rp_sw
from tsw.sliced._s3w import s3w, s3w_unif, sample_rotations
from tsw.sliced._ssw import ssw, ssw_unif
from tsw.sliced._sw import max_sw, sw
from tsw.sphere._spatial_stsw import resolve_sphere_mapping, spatial_stsw
from tsw.sphere._stsw import stsw, stsw_unif

__all__ = [
    "ARIS3WLoss",
    "CircularTSWLoss",
    "DbTSWLoss",
    "EBSWLoss",
    "GHSWLoss",
    "HHSWLoss",
    "HSPDSWLoss",
    "LCVSWLoss",
    "MCTSWLoss",
    "MaxSWLoss",
    "MaxTSWSLLoss",
    "PartialTSWLoss",
    "RPSWLoss",
    "S3WLoss",
    "S3WUnifLoss",
    "SPDSWLoss",
    "SSWLoss",
    "SSWUnifLoss",
    "STSWLoss",
    "STSWUnifLoss",
    "SWLoss",
    "SpatialSTSWLoss",
    "SpatialTSWLoss",
    "TSSobolevLoss",
    "TSWSLLoss",
]


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

TSSobolevLoss: type[_Loss] = _loss_from(
    ts_sobolev,
    "TSSobolevLoss",
    "TS-Sobolev loss: the tree-sliced Sobolev IPM of order ``p`` on Db-TSW's trees.",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.TSSobolevLoss(n_trees=50, n_lines=4, p=2, seed=0)
    >>> X = torch.randn(10, 3, requires_grad=True)
    >>> loss(X, torch.randn(12, 3)).backward()
    >>> X.grad.shape
    torch.Size([10, 3])
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

MaxTSWSLLoss: type[_Loss] = _loss_from(
    max_tsw_sl,
    "MaxTSWSLLoss",
    "MaxTSW-SL loss: TSW-SL on trees moved uphill by an ascent at every call.",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.MaxTSWSLLoss(n_lines=4, n_iter=20, seed=0)
    >>> loss(torch.zeros(4, 2), torch.ones(5, 2)).item() > 0
    True
    """,
)

LCVSWLoss: type[_Loss] = _loss_from(
    lcv_sw,
    "LCVSWLoss",
    'Control-variate SW loss (LCV-SW; UCV-SW with ``variate="upper"``).',
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.LCVSWLoss(n_projections=50, seed=0)
    >>> X = torch.randn(10, 3, requires_grad=True)
    >>> loss(X, torch.randn(12, 3) + 1).backward()
    >>> X.grad.shape
    torch.Size([10, 3])
    """,
)

EBSWLoss: type[_Loss] = _loss_from(
    eb_sw,
    "EBSWLoss",
    "Energy-based SW loss (importance-sampling estimate, IS-EBSW).",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.EBSWLoss(n_projections=50, seed=0)
    >>> float(loss(torch.zeros(4, 3), torch.zeros(5, 3)))
    0.0
    """,
)

RPSWLoss: type[_Loss] = _loss_from(
    rp_sw,
    "RPSWLoss",
    "Random-path SW loss: directions along random pairs of atoms, drawn at every call.",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.RPSWLoss(n_projections=50, kappa=50.0, seed=0)
    >>> loss(torch.zeros(4, 3), torch.ones(5, 3)).item() > 0
    True
    """,
)

MCTSWLoss: type[_Loss] = _loss_from(
    mc_tsw,
    "MCTSWLoss",
    "MC-TSW loss between measures on a product of Euclidean, spherical and hyperbolic factors.",
    """
    >>> import torch, tsw
    >>> parts = [("euclidean", 2), ("hyperbolic", 2)]  # 2 + 3 columns
    >>> loss = tsw.nn.MCTSWLoss(components=parts, n_trees=50, seed=0)
    >>> def points(n):
    ...     u = torch.randn(n, 4)
    ...     h = torch.cat([(1 + u[:, 2:].square().sum(-1, keepdim=True)).sqrt(), u[:, 2:]], -1)
    ...     return torch.cat([u[:, :2], h], dim=-1)
    >>> X = points(10).requires_grad_()
    >>> loss(X, points(12)).backward()
    >>> X.grad.shape
    torch.Size([10, 5])
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

GHSWLoss: type[_Loss] = _loss_from(
    ghsw,
    "GHSWLoss",
    "Geodesic hyperbolic sliced Wasserstein loss (points on the hyperboloid or in the ball).",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.GHSWLoss(n_projections=20, seed=0)
    >>> X = tsw.curved.exp0(torch.randn(10, 2))  # Lorentz points
    >>> float(loss(X, X))
    0.0
    """,
)

HHSWLoss: type[_Loss] = _loss_from(
    hhsw,
    "HHSWLoss",
    "Horospherical hyperbolic sliced Wasserstein loss.",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.HHSWLoss(n_projections=20, model="poincare", seed=0)
    >>> Y = 0.5 * torch.nn.functional.normalize(torch.randn(10, 2), dim=-1)  # in the ball
    >>> float(loss(Y, Y))
    0.0
    """,
)

SPDSWLoss: type[_Loss] = _loss_from(
    spdsw,
    "SPDSWLoss",
    "Log-Euclidean sliced Wasserstein loss between measures on SPD matrices.",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.SPDSWLoss(n_projections=20, seed=0)
    >>> X = torch.eye(3).expand(5, 3, 3)  # five 3 x 3 SPD matrices
    >>> float(loss(X, X))
    0.0
    """,
)

HSPDSWLoss: type[_Loss] = _loss_from(
    hspdsw,
    "HSPDSWLoss",
    "Affine-invariant (Busemann) sliced Wasserstein loss between measures on SPD matrices.",
    """
    >>> import torch, tsw
    >>> loss = tsw.nn.HSPDSWLoss(n_projections=20, seed=0)
    >>> X = torch.eye(3).expand(5, 3, 3)
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
