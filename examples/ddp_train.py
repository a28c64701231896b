"""Train a generator with a tree-sliced loss under DistributedDataParallel (CPU, gloo).

Run with ``torchrun``::

    torchrun --nproc_per_node 2 examples/ddp_train.py --steps 200

Each rank draws its own shard of the batch (noise for the generator, samples of the
target); ``tsw.nn.DbTSWLoss(process_group=..., gather=True)`` measures the distance
between the *unions* of the shards, with the trees split across the ranks, so every rank
computes the value one process computes on the whole batch. DDP then averages the
parameter gradients over the ranks; since each rank's parameters only see the gradient
through their own shard, the loss is multiplied by the world size, and the averaged
gradient is the gradient one process computes on the whole batch.

``--check`` verifies that on the first step: rank 0 recomputes the loss and its gradient
in one process on the gathered batch and compares them with DDP's (the test suite runs
this). The target is a mixture of 8 Gaussians on a circle.
"""

from __future__ import annotations

import argparse
import math
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import tsw


def target(n: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` samples of 8 Gaussians (std 0.1) on the circle of radius 2."""
    k = torch.randint(0, 8, (n,), generator=generator)
    angle = 2 * math.pi * k / 8
    centres = 2 * torch.stack([angle.cos(), angle.sin()], dim=-1)
    return centres + 0.1 * torch.randn(n, 2, generator=generator)


def generator_net() -> torch.nn.Module:
    """Build a small MLP from 2-D noise to the plane (the same weights on every rank)."""
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts them)
    return torch.nn.Sequential(
        torch.nn.Linear(2, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 2),
    )


def main(argv: list[str] | None = None) -> int:
    """Train for ``--steps`` steps; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="optimisation steps")
    parser.add_argument("--batch", type=int, default=512, help="points per rank and step")
    parser.add_argument("--trees", type=int, default=64, help="trees (split across ranks)")
    parser.add_argument("--check", action="store_true", help="check step 1 against 1 process")
    args = parser.parse_args(argv)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    group = dist.group.WORLD
    net = generator_net()
    model = DistributedDataParallel(net)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    # seed=0 on every rank: the module's generator draws the same trees everywhere
    loss_fn = tsw.nn.DbTSWLoss(
        n_trees=args.trees, n_lines=4, p=2, power=True, seed=0, process_group=group, gather=True
    )
    data = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard
    status = 0
    for step in range(1, args.steps + 1):
        z = torch.randn(args.batch, 2, generator=data)
        y = target(args.batch, data)
        x = model(z)
        loss = loss_fn(x, y)
        opt.zero_grad()
        (world * loss).backward()  # DDP averages: world * mean = the union's gradient
        if args.check and step == 1 and not check(net, z, y, loss, args, group, rank, world):
            status = 1
            break
        opt.step()
        if rank == 0 and (step % 50 == 0 or step == args.steps):
            print(f"step {step}: DbTSW_2^2 = {loss.item():.4f}", flush=True)
    # every rank done, DDP's reducer released, then the group: a rank that tears the
    # group down while DDP still holds it can abort at exit
    dist.barrier()
    del model, opt
    dist.destroy_process_group()
    return status


def check(net, z, y, loss, args, group, rank, world) -> bool:
    """Compare DDP's first-step value and gradients with one process on the union."""
    zs = [torch.empty_like(z) for _ in range(world)]
    ys = [torch.empty_like(y) for _ in range(world)]
    dist.all_gather(zs, z, group=group)
    dist.all_gather(ys, y, group=group)
    ok = True
    if rank == 0:
        single = generator_net()
        single.load_state_dict(net.state_dict())
        ref_fn = tsw.nn.DbTSWLoss(n_trees=args.trees, n_lines=4, p=2, power=True, seed=0)
        ref = ref_fn(single(torch.cat(zs)), torch.cat(ys))
        ref.backward()
        err_v = abs(ref.item() - loss.item())
        err_g = max(
            (p.grad - q.grad).abs().max().item()
            for p, q in zip(single.parameters(), net.parameters(), strict=True)
        )
        scale = max(q.grad.abs().max().item() for q in single.parameters())
        print(
            f"check: |value - 1 process| = {err_v:.2e}, max |grad - 1 process| = "
            f"{err_g:.2e} (max |grad| {scale:.2e})",
            flush=True,
        )
        ok = err_v < 1e-5 * max(1.0, abs(ref.item())) and err_g < 1e-4 * scale
    flag = torch.tensor([int(ok)])
    dist.broadcast(flag, src=0, group=group)
    return bool(flag.item())


if __name__ == "__main__":
    sys.exit(main())
