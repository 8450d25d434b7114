"""A DistributedDataParallel training loop over gloo, one data shard per rank, run by torchrun.

    torchrun --standalone --nproc_per_node=N tracer/workloads/ddp_train.py --data DIR
        [--slow-rank R (--throttle-read-bps BPS | --heavy-transform-rounds K)]
        [--num-workers W] [--batch-size B]
        [--epochs E] [--compute-rounds K] [--fail-once-rank R --fail-after-steps N]

DIR holds one folder per rank, `shard<R>`, of sample files (`tracer.workloads.dataset`), all of
the same count so that every rank takes the same number of steps (DDP needs that). Each rank
reads its own shard with a `DataLoader` of W persistent workers (`train.FileDataset`) and trains
a small MLP wrapped in DDP: every backward all-reduces the gradients with the other ranks, so a
slow rank holds every other rank back in that all-reduce.

--slow-rank R: rank R's shard is made cold (posix_fadvise DONTNEED) at the start of every epoch
and its process moves itself (and so its workers) into a blkio/io.max cgroup that limits its
disk reads to BPS (the cgroup `iotrace-ddp-<pid>`, removed at exit); the other ranks keep their
shards read and mapped (warm, in memory). With --heavy-transform-rounds K instead, rank R's
shard stays warm too and its workers run K rounds of the CPU-heavy transform (`train`'s
`heavy`) on every sample: a rank slowed by its DataLoader's CPU. Without --slow-rank every
rank is the same: a balanced job.

--fail-once-rank R: in the first attempt (TORCHELASTIC_RESTART_COUNT 0), rank R exits with code
3 after --fail-after-steps steps, so that torchrun's agent (`--max-restarts 1` or more) stops the
other ranks and starts them all again: new processes with the same ranks.

stdout (rank 0 only): one line per epoch, `epoch E steps N seconds T`, as `train` prints. Each
rank prints `rank R pid P` on stderr at start. Exit 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from tracer.workloads import dataset as ds
from tracer.workloads.train import FileDataset, Model, worker_init


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ddp_train.py", description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="folder of shard<R> folders of sample files")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--throttle-read-bps", type=int, default=0)
    p.add_argument("--heavy-transform-rounds", type=int, default=0)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--compute-rounds", type=int, default=1,
                   help="forward/backward passes (each an all-reduce) per step")
    p.add_argument("--fail-once-rank", type=int, default=-1)
    p.add_argument("--fail-after-steps", type=int, default=2)
    return p.parse_args(argv)


def init(rank: int) -> None:
    """The gloo process group, its keys in the agent's store under this attempt's prefix: a
    group restarted by the agent would otherwise read the addresses of the ranks it replaced
    (their keys are still there) and fail to connect to them."""
    world = int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=False, timeout=timedelta(seconds=120))
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt{attempt}", store),
                            rank=rank, world_size=world)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    rank = int(os.environ["RANK"])
    fail = (rank == args.fail_once_rank
            and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0")
    print(f"rank {rank} pid {os.getpid()}", file=sys.stderr, flush=True)
    shard = Path(args.data) / f"shard{rank}"
    paths = sorted(p for p in shard.iterdir() if p.is_file())
    slow = rank == args.slow_rank
    cold = slow and bool(args.throttle_read_bps)
    held = None if cold else ds.hold(paths)  # warm for the whole run
    heavy = args.heavy_transform_rounds if slow else 0
    throttled = None
    if cold:
        throttled = f"ddp-{os.getpid()}"
        done = ds.throttle(os.getpid(), shard, args.throttle_read_bps, name=throttled)
        print(f"rank {rank} throttle: {done or 'not possible here'}", file=sys.stderr, flush=True)
        if done is None:
            throttled = None
    try:
        init(rank)
        model = DistributedDataParallel(Model("light"))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = DataLoader(FileDataset(paths, "heavy" if heavy else "none", heavy),
                            batch_size=args.batch_size,
                            shuffle=False, drop_last=True, num_workers=args.num_workers,
                            persistent_workers=args.num_workers > 0, worker_init_fn=worker_init)
        loss_fn = nn.CrossEntropyLoss()
        for epoch in range(1, args.epochs + 1):
            if cold:
                ds.make_cold(paths)
            t0 = time.perf_counter()
            n = 0
            for x, y in loader:
                for _ in range(args.compute_rounds):
                    optimizer.zero_grad(set_to_none=True)
                    loss_fn(model(x), y).backward()  # the gradients' all-reduce
                    optimizer.step()
                n += 1
                if fail and n >= args.fail_after_steps:
                    print(f"rank {rank} fails on purpose", file=sys.stderr, flush=True)
                    if throttled is not None:
                        ds.unthrottle(throttled)
                    os._exit(3)  # as a crash would, past the process group's shutdown
            if rank == 0:
                print(f"epoch {epoch} steps {n} seconds {time.perf_counter() - t0:.3f}",
                      flush=True)
        del loader
        dist.barrier()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        if held is not None:
            held.close()
        if throttled is not None:
            ds.unthrottle(throttled)
    return 0


if __name__ == "__main__":
    sys.exit(main())
