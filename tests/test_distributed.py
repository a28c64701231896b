"""``process_group=``: values and gradients of 2 and 3 gloo processes against one process.

Every tree distance and SW, on replicated data (the trees split across the ranks) and on
uneven shards (``gather=True``), with explicit weights and without, batched, chunked, at
``p = 2`` with ``power``, and through a learnable map (SpatialTSW): each rank's value,
per-tree costs and standard error equal one process's, and each rank's gradients equal
one process's (its shard's rows of them with ``gather=True``). The loss differentiated
is ``value + 0.1 * sum(per_tree ** 2)``, so the gradient also flows through the gathered
per-tree costs. The ranks run in spawned processes (tests/_distributed_cases.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import _distributed_cases as cases
import pytest
import torch
import torch.multiprocessing as mp

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available(), reason="torch.distributed is not available"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(world: int, folder) -> str | None:
    """Run every rank of one group; return None, or why it failed."""
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [
        ctx.Process(target=cases.worker, args=(r, world, port, str(folder))) for r in range(world)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + 300
    while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
        if any(p.exitcode not in (None, 0) for p in procs):
            break  # one rank failed: the others would wait for it
        time.sleep(0.2)
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join()
    errors = [
        f"rank {r}: {(folder / f'rank{r}.err').read_text()}"
        for r in range(world)
        if (folder / f"rank{r}.err").exists()
    ]
    if errors or any(p.exitcode != 0 for p in procs):
        codes = [p.exitcode for p in procs]
        return f"exit codes {codes}\n" + "\n".join(errors)
    return None


#: two ranks by default; three (shards of unequal sizes on every rank) with -m slow
@pytest.fixture(
    scope="module",
    params=[2, pytest.param(3, marks=pytest.mark.slow)],
    ids=lambda w: f"world{w}",
)
def ranks(request, tmp_path_factory):
    # a second launch on a fresh port if the first fails: the free port found can be
    # taken by another process before the group's store binds it
    world = request.param
    failures = []
    for attempt in range(2):
        folder = tmp_path_factory.mktemp(f"world{world}_{attempt}")
        failure = _launch(world, folder)
        if failure is None:
            return world, [torch.load(folder / f"rank{r}.pt") for r in range(world)]
        failures.append(failure)
    pytest.fail(f"{world} ranks failed twice:\n" + "\n---\n".join(failures))


def reference(name: str) -> dict[str, torch.Tensor]:
    if name == "mapping":
        return cases.run_mapping(0, 1, False)
    return cases.run_case(name, 0, 1, False)


def expected_grad(ref: torch.Tensor, key: str, rank: int, world: int, gather: bool):
    if not gather or key[5:] not in ("X_s", "X_t", "a", "b"):
        return ref
    return cases.shard_of(ref, key.startswith("grad_X"), rank, world)


@pytest.mark.parametrize("gather", [False, True], ids=["replicated", "sharded"])
@pytest.mark.parametrize("name", [*cases.CASES, "mapping"])
def test_equals_one_process(ranks, name, gather):
    world, results = ranks
    ref = reference(name)
    for rank, res in enumerate(results):
        got = res[(name, gather)]
        assert set(got) == set(ref)
        for key, want in ref.items():
            want = expected_grad(want, key, rank, world, gather)
            torch.testing.assert_close(
                got[key],
                want,
                rtol=1e-12,
                atol=1e-14,
                msg=lambda m, k=key, r=rank: f"{k} rank {r}: {m}",
            )


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("generators", "the ranks disagree on the slices"),
        ("data", "the ranks disagree on the measures; for one shard per rank pass gather=True"),
        ("few_trees", "must be at least the number of ranks"),
        ("shard_dims", "the shards of X_s must agree in dtype and in every dimension"),
        ("weights_on_some", "a must be given on every rank or on none"),
    ],
)
def test_clear_errors_on_every_rank(ranks, key, message):
    _world, results = ranks
    for res in results:
        assert message in res["errors"][key], res["errors"][key]


def test_few_collectives(ranks):
    """A sharded call with weights: one all-gather of the shards' headers, one per shard
    (4), one of the trees' fingerprints and one of the per-tree costs; one all-reduce
    backward (headers and fingerprints batched: one collective each, not one per tensor).
    Counted because each collective is a round trip of every rank: the latency of a
    distributed call, which no value shows."""
    _world, results = ranks
    for res in results:
        assert res["collectives"] == {"forward": 7, "backward": 1}, res["collectives"]


def test_ddp_example_matches_one_process():
    # torchrun, 2 gloo processes: the first step's loss and DDP-averaged gradients equal one
    # process's on the union of the shards (the example's --check), then two more steps
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--standalone",
        str(root / "examples" / "ddp_train.py"),
        "--steps",
        "3",
        "--batch",
        "64",
        "--trees",
        "8",
        "--check",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=root)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert "check: |value - 1 process|" in out.stdout
    assert "step 3:" in out.stdout
