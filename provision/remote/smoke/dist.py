"""Several GPUs and several hosts: an all-reduce (correct sum, bus bandwidth) and a few DDP steps.

One function, :func:`run_rank`, runs in every rank. Locally the job starts one rank per GPU with
``torch.multiprocessing.spawn`` (NCCL); across hosts torchrun starts the ranks (c10d rendezvous)
and the job runs :func:`run_rank` in each. Without GPUs the same code runs on the CPU with gloo,
which is how it is tested on machines without GPUs.

Local ranks meet through a file (a FileStore in the job's temporary folder), not a TCP port:
there is no port to pick and lose to another process, and no store server inside rank 0 that
goes away while another rank still talks to it. A local rank ends in a fixed order (barrier,
destroy the group, write the result, flush, ``os._exit``) so the interpreter's and the C++
runtime's exit-time teardown never runs while gloo's threads are alive; see :func:`_spawned`.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time
from typing import Any

from .train import Synthetic, TrainConfig, Trainer


def allreduce(torch: Any, dist: Any, device: Any, nbytes: int, world: int) -> dict[str, Any]:
    """Sum ``rank + 1`` over all ranks (checked exactly), then time the all-reduce of ``nbytes``."""
    rank = dist.get_rank()
    n = max(1, nbytes // 4)
    t = torch.full((n,), float(rank + 1), device=device, dtype=torch.float32)
    dist.all_reduce(t)
    expected = world * (world + 1) / 2
    lo, hi = float(t.min()), float(t.max())
    ok = lo == expected and hi == expected
    for _ in range(2):  # warm-up: the first collectives set up rings / connections
        dist.all_reduce(t)
    reps = 5
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(reps):
        dist.all_reduce(t)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = (time.perf_counter() - started) / reps
    algbw = n * 4 / seconds / 1e9
    return {
        "allreduce_ok": ok,
        "allreduce_detail": f"min {lo} max {hi}, expected {expected}",
        "allreduce_bytes": n * 4,
        # NCCL tests' convention: bus bandwidth = algorithm bandwidth x 2(n-1)/n for all-reduce
        "allreduce_busbw_gbps": round(algbw * 2 * (world - 1) / world, 3),
    }


def ddp_steps(torch: Any, dist: Any, device: Any, cfg: TrainConfig) -> dict[str, Any]:
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts them)
    trainer = Trainer(torch, device, cfg)
    ids = [device.index] if device.type == "cuda" else None
    trainer.wrap(DistributedDataParallel(trainer.model, device_ids=ids))
    data = Synthetic(torch, device, cfg, seed=dist.get_rank())
    losses = [float(trainer.step(*data.batch())) for _ in range(cfg.steps)]
    checksum = torch.tensor(
        [sum(float(p.detach().double().sum()) for p in trainer.model.parameters())],
        device=device,
        dtype=torch.float64,
    )
    lo, hi = checksum.clone(), checksum.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    tail = losses[-2:]
    return {
        "ddp_steps": cfg.steps,
        "ddp_loss_first": round(losses[0], 4),
        "ddp_loss_last": round(sum(tail) / len(tail), 4),
        "ddp_in_sync": abs(float(hi) - float(lo)) <= 1e-6 * max(1.0, abs(float(hi))),
    }


def run_rank(
    local_rank: int,
    world: int,
    out: str | None,
    nbytes: int,
    cfg: TrainConfig,
    *,
    init_method: str = "env://",
) -> dict[str, Any]:
    """One rank: join the group (``init_method``: torchrun's env:// by default, a file:// store for
    local ranks), all-reduce, DDP steps; rank 0 writes ``out``."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    backend = "nccl" if cuda else "gloo"
    rank = int(os.environ.get("RANK", local_rank))
    dist.init_process_group(
        backend,
        init_method=init_method,
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=180),
    )
    try:
        result: dict[str, Any] = {
            "world_size": world,
            "backend": backend,
            "error": None,
            "hosts": sorted(_all_hostnames(torch, dist, device, world)),
        }
        result.update(allreduce(torch, dist, device, nbytes, world))
        result.update(ddp_steps(torch, dist, device, cfg))
        # Every rank is done before any tears its connections down: a rank that closes early
        # makes gloo's receive thread in a slower rank abort the whole process.
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank == 0 and out:
        with open(out, "w") as f:
            json.dump(result, f)
    return result


def _all_hostnames(torch: Any, dist: Any, device: Any, world: int) -> set[str]:
    """Every rank's hostname (all_gather_object would need numpy, which a host may lack)."""
    raw = socket.gethostname().encode()[:64].ljust(64, b"\0")
    mine = torch.tensor(list(raw), dtype=torch.uint8, device=device)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    return {bytes(t.cpu().tolist()).rstrip(b"\0").decode(errors="replace") for t in gathered}


def _spawned(local_rank: int, world: int, paths: tuple[str, str], nbytes: int, cfg: TrainConfig) -> None:
    out, store = paths
    run_rank(local_rank, world, out, nbytes, cfg, init_method=f"file://{store}")
    # The rank's work is done (run_rank's barrier: no peer still sends) and rank 0's result is on
    # disk. destroy_process_group() only drops torch's registry entries; gloo's ProcessGroup has no
    # shutdown of its own, and its C++ side outlives the call: measured at atexit in each
    # rank (torch 2.13.0), its two workers (pt_gloo_runloop), the transport's event loop
    # (gloo_tcp_loop) and, in rank 0, the TCPStore server (pt_tcpstore_uv) were all still running.
    # A normal exit then finalizes the interpreter and runs C++ static destructors next to those
    # threads, and under load that aborted a rank now and then ("terminate called without an
    # active exception", SIGABRT), failing a good host. Ending here, streams flushed, leaves
    # nothing for exit-time teardown to race with. A rank that fails raises out of run_rank
    # instead, and torch.multiprocessing reports its traceback as before.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def local(world: int, out: str, nbytes: int, cfg: TrainConfig) -> dict[str, Any]:
    """Run ``world`` ranks on this host (one per GPU, or CPU ranks with gloo) and return rank 0's result.

    ``out`` is a path in a fresh folder of the caller's; the ranks' rendezvous file goes beside it.
    """
    import torch.multiprocessing as mp

    # All ranks are on this host: gloo (CPU ranks) talks over loopback rather than whatever
    # address the hostname resolves to. NCCL finds its own intra-node paths.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # A FileStore in the caller's fresh folder: nothing to bind, so nothing another process can
    # take between choosing and binding (the TCP port this replaces needed a second try).
    store = os.path.join(os.path.dirname(os.path.abspath(out)), "rendezvous")
    try:
        mp.spawn(_spawned, args=(world, (out, store), nbytes, cfg), nprocs=world, join=True)  # type: ignore[attr-defined,no-untyped-call]
    except Exception as exc:
        # a rank's exception arrives with its traceback: its last line says what went wrong
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        error = (lines[-1] if lines else repr(exc))[:400]
        return {"world_size": world, "backend": None, "error": error}
    with open(out) as f:
        result: dict[str, Any] = json.load(f)
    return result
