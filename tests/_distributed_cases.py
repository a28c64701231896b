"""Cases of tests/test_distributed.py: each runs in one process, or in every rank of a group.

A case is ``case(rank, world) -> dict of tensors``: the value and the gradients of the
inputs. ``world = 1`` is the single-process reference (no process group, the whole
problem); with ``world = R`` the case runs in R gloo processes, on replicated data or on
uneven shards (``gather=True``), and returns this rank's value and gradients, whose
shard rows the test compares with the reference.
"""

from __future__ import annotations

import datetime
import itertools
import os
import traceback

import torch

import tsw

F64 = torch.float64


def shards(n: int, world: int) -> list[tuple[int, int]]:
    """Uneven contiguous shards of ``n`` rows (the first rank gets the fewest)."""
    cuts = [0] + [round(n * (r + 1) ** 1.3 / world**1.3) for r in range(world)]
    return list(itertools.pairwise(cuts))


def shard_of(v: torch.Tensor, points: bool, rank: int, world: int) -> torch.Tensor:
    """Rank ``rank``'s rows of a (..., n, d) support (``points``) or (..., n) weights."""
    axis = -2 if points else -1
    lo, hi = shards(v.shape[axis], world)[rank]
    return v.narrow(v.dim() + axis, lo, hi - lo)


def euclid(batched: bool = False):
    g = torch.Generator().manual_seed(0)
    shape = (2,) if batched else ()
    X = torch.randn(*shape, 13, 3, generator=g, dtype=F64)
    Y = torch.randn(*shape, 11, 3, generator=g, dtype=F64) + 0.5
    a = torch.rand(*shape, 13, generator=g, dtype=F64) + 0.2
    b = torch.rand(*shape, 11, generator=g, dtype=F64) + 0.2
    return X, Y, a / a.sum(-1, keepdim=True), b / b.sum(-1, keepdim=True)


def sphere():
    X, Y, a, b = euclid()
    return (
        torch.nn.functional.normalize(X, dim=-1),
        torch.nn.functional.normalize(Y + 1, dim=-1),
        a,
        b,
    )


COMMON = {"seed": 3}
TREES = {"n_trees": 7, "n_lines": 3, **COMMON}

#: name -> (function, data, keyword arguments, weights given?)
CASES = {
    "db_tsw": (tsw.db_tsw, euclid, TREES, True),
    "db_tsw_p2_power": (tsw.db_tsw, euclid, {**TREES, "p": 2, "power": True}, True),
    "db_tsw_uniform": (tsw.db_tsw, euclid, TREES, False),
    "db_tsw_chunked": (tsw.db_tsw, euclid, {**TREES, "chunk_size": 2}, True),
    "db_tsw_batched": (tsw.db_tsw, lambda: euclid(True), TREES, True),
    "tsw_sl_chain": (tsw.tsw_sl, euclid, {**TREES, "tree": "chain"}, True),
    "circular_tsw": (tsw.circular_tsw, euclid, {**TREES, "radius": 0.3}, True),
    "spatial_tsw": (tsw.spatial_tsw, euclid, TREES, True),
    "partial_tsw": (tsw.partial_tsw, euclid, {**TREES, "mass_s": 0.8, "mass_t": 0.6}, True),
    "stsw": (tsw.stsw, sphere, TREES, True),
    "spatial_stsw": (tsw.spatial_stsw, sphere, TREES, True),
    "sw": (tsw.sw, euclid, {"n_projections": 9, **COMMON}, True),
    "sw_p2": (tsw.sw, euclid, {"n_projections": 9, "p": 2, **COMMON}, True),
    # sampling, FW-TSW's median roots and FW-TSW*'s paths read the (gathered) measures
    "fw_tsw_star_stratified": (
        tsw.db_tsw,
        euclid,
        {**TREES, "sampling": "orthogonal", "center": "median", "directions": "paths"},
        True,
    ),
    "sw_qmc": (tsw.sw, euclid, {"n_projections": 9, "sampling": "qmc", **COMMON}, True),
}


def run_case(name: str, rank: int, world: int, gather: bool) -> dict[str, torch.Tensor]:
    fn, data, kwargs, weighted = CASES[name]
    X, Y, a, b = data()
    inputs = {"X_s": X, "X_t": Y, "a": a, "b": b} if weighted else {"X_s": X, "X_t": Y}
    if world > 1 and gather:  # this rank's shard of every input
        inputs = {k: shard_of(v, k.startswith("X"), rank, world) for k, v in inputs.items()}
    leaves = {k: v.clone().requires_grad_() for k, v in inputs.items()}
    extra = {}
    if world > 1:
        extra = {"process_group": torch.distributed.group.WORLD, "gather": gather}
    value, log = fn(**leaves, **kwargs, **extra, log=True)
    (value.sum() + 0.1 * log["per_tree"].square().sum()).backward()
    out = {"value": value.detach(), "per_tree": log["per_tree"].detach()}
    out["std_error"] = log["std_error"]
    out.update({f"grad_{k}": v.grad for k, v in leaves.items()})
    return out


def run_mapping(rank: int, world: int, gather: bool) -> dict[str, torch.Tensor]:
    """SpatialTSW through a learnable map: the map's parameters get the full gradient."""
    X, Y, _, _ = euclid()
    if world > 1 and gather:
        X, Y = shard_of(X, True, rank, world), shard_of(Y, True, rank, world)
    torch.manual_seed(0)  # the same map on every rank
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh()).to(F64)
    extra = {}
    if world > 1:
        extra = {"process_group": torch.distributed.group.WORLD, "gather": gather}
    rows = torch.linspace(-1, 1, 12, dtype=F64).reshape(4, 3)

    def mapping(z):
        # ``rows @ z^T``: autograd's backward gives ``z`` a gradient with permuted strides,
        # the layout that torch.distributed.nn's gloo all_gather reads back transposed
        return torch.cat([z, net(z), torch.matmul(rows, z.transpose(-1, -2)).transpose(-1, -2)], -1)

    value = tsw.spatial_tsw(X, Y, mapping=mapping, **TREES, **extra)
    value.backward()
    return {"value": value.detach(), **{f"grad_{n}": p.grad for n, p in net.named_parameters()}}


def errors(rank: int, world: int) -> dict[str, str]:
    """The messages every rank gets for calls that cannot be distributed."""
    X, Y, _, _ = euclid()
    group = torch.distributed.group.WORLD
    calls = {
        # the ranks' generators differ: different trees
        "generators": lambda: tsw.db_tsw(
            X, Y, generator=torch.Generator().manual_seed(rank), process_group=group
        ),
        # replicated mode on different data
        "data": lambda: tsw.db_tsw(X + rank, Y, seed=0, process_group=group),
        "few_trees": lambda: tsw.db_tsw(X, Y, n_trees=world - 1, seed=0, process_group=group),
        "shard_dims": lambda: tsw.db_tsw(
            X[:, : 2 + rank % 2], Y[:, : 2 + rank % 2], seed=0, process_group=group, gather=True
        ),
        "weights_on_some": lambda: tsw.db_tsw(
            X,
            Y,
            a=torch.full((13,), 1 / (13 * world), dtype=F64) if rank == 0 else None,
            seed=0,
            process_group=group,
            gather=True,
        ),
    }
    out = {}
    for key, call in calls.items():
        try:
            call()
            out[key] = "no error"
        except (ValueError, TypeError) as e:
            out[key] = f"{type(e).__name__}: {e}"
    return out


def collectives(rank: int, world: int) -> dict[str, int]:
    """How many collectives one sharded db_tsw call (with weights) makes, and its backward."""
    X, Y, a, b = (shard_of(v, v.dim() == 2, rank, world) for v in euclid())
    dist = torch.distributed
    counts = {"forward": 0, "backward": 0}
    phase = ["forward"]
    names = ("all_gather", "all_reduce", "broadcast", "all_gather_object", "broadcast_object_list")
    originals = {n: getattr(dist, n) for n in names}

    def counted(fn):
        def call(*args, **kwargs):
            counts[phase[0]] += 1
            return fn(*args, **kwargs)

        return call

    for n, fn in originals.items():
        setattr(dist, n, counted(fn))
    try:
        Xs = X.clone().requires_grad_()
        value = tsw.db_tsw(Xs, Y, a, b, **TREES, process_group=dist.group.WORLD, gather=True)
        phase[0] = "backward"
        value.backward()
    finally:
        for n, fn in originals.items():
            setattr(dist, n, fn)
    return counts


def worker(rank: int, world: int, port: int, folder: str) -> None:
    """Entry point of one rank: run every case, save the results to ``folder``."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    try:
        torch.distributed.init_process_group(
            "gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120)
        )
        results = {}
        for gather in (False, True):
            for name in CASES:
                results[(name, gather)] = run_case(name, rank, world, gather)
            results[("mapping", gather)] = run_mapping(rank, world, gather)
        results["errors"] = errors(rank, world)
        results["collectives"] = collectives(rank, world)
        torch.save(results, os.path.join(folder, f"rank{rank}.pt"))
        torch.distributed.destroy_process_group()
    except Exception:
        with open(os.path.join(folder, f"rank{rank}.err"), "w") as f:
            f.write(traceback.format_exc())
        raise
