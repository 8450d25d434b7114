"""A job shaped like image classification on ImageNet: many small files in class folders, read
once per epoch by DataLoader workers.

    python -m tracer.workloads.imagefolder --data DIR [--num-workers 8] [--batch-size 64]
        [--epochs 1] [--files-per-s N] [--shuffle] [--work-passes N] [--ready-fd FD]

DIR holds class folders of sample files (`make(DIR, n_files, n_folders, file_kib)` writes them).
Each sample is opened, read whole and closed in `Dataset.__getitem__`, as an image folder data
set does before decoding; the loop only sums the batch (no model), so the job goes as fast as
files can be opened and read, which is what a tracer must keep up with; or, with --files-per-s,
at that rate (each worker paces itself to its share). With --shuffle the files come in a random
order each epoch (the same for a given epoch from run to run), as a training job's sampler gives
them: every interval then touches most class folders, where in order it touches a few. With
--work-passes N each worker hashes every sample's bytes N times (SHA-256) before handing it on:
CPU work per sample of a fixed size, as decoding and augmenting an image take, with no syscall
(about 3 us a pass of 4 KiB here), so that the cost of tracing can be measured against jobs
that spend more than opening and reading on each file.

stdout: `files N bytes B seconds T cpu_seconds C` per epoch (T from the first batch asked for to
the last one received: torch's import and the worker start-up are not in it; C the CPU time the
main process and its workers took from the first batch received to the last). With --ready-fd
FD, "r" is written to FD once the workers run (after the first batch), so a tracer can attach
then.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import time
from pathlib import Path

import psutil


def make(directory: str | os.PathLike[str], n_files: int, n_folders: int,
         file_kib: int = 4) -> list[Path]:
    """`n_files` files of `file_kib` KiB in `n_folders` class folders of DIR; existing ones of
    the right size are kept. Not fsynced one by one (a million fsyncs take long): the caller
    syncs once if it needs them on disk."""
    root = Path(directory)
    size = file_kib * 1024
    block = os.urandom(size)
    paths = []
    for i in range(n_files):
        folder = root / f"n{i % n_folders:08d}"
        path = folder / f"img_{i:08d}.jpg"
        paths.append(path)
        try:
            if path.stat().st_size == size:
                continue
        except FileNotFoundError:
            folder.mkdir(parents=True, exist_ok=True)
        path.write_bytes(block)
    return paths


def listing(directory: str | os.PathLike[str]) -> list[str]:
    """Every sample path under DIR's class folders, sorted (as torchvision's ImageFolder)."""
    root = Path(directory)
    return sorted(str(p) for folder in sorted(root.iterdir()) if folder.is_dir()
                  for p in folder.iterdir())


def _cpu_s(workers: list | None = None) -> float:
    """CPU seconds of this process and of its children reaped so far, and of `workers` (psutil
    processes) still running."""
    spent = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        ru = resource.getrusage(who)
        spent += ru.ru_utime + ru.ru_stime
    for w in workers or ():
        try:
            t = w.cpu_times()
        except psutil.NoSuchProcess:  # it ended and was reaped: counted above
            continue
        spent += t.user + t.system
    return spent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="imagefolder")
    ap.add_argument("--data", required=True)
    ap.add_argument("--num-workers", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--files-per-s", type=float)
    ap.add_argument("--shuffle", action="store_true")
    ap.add_argument("--work-passes", type=int, default=0)
    ap.add_argument("--ready-fd", type=int)
    args = ap.parse_args(argv)

    import torch
    from torch.utils.data import DataLoader, Dataset

    torch.set_num_threads(1)
    paths = listing(args.data)

    class Files(Dataset):
        def __len__(self) -> int:
            return len(paths)

        def __init__(self) -> None:
            self.read, self.t0 = 0, None

        def __getitem__(self, i: int) -> int:
            if args.files_per_s:  # this worker's share of the rate
                self.t0 = self.t0 or time.monotonic()
                self.read += 1
                ahead = self.read * max(1, args.num_workers) / args.files_per_s - (
                    time.monotonic() - self.t0)
                if ahead > 0:
                    time.sleep(ahead)
            with open(paths[i], "rb") as f:
                data = f.read()
            for _ in range(args.work_passes):
                hashlib.sha256(data).digest()
            return len(data)

    order = torch.Generator().manual_seed(0) if args.shuffle else None
    loader = DataLoader(Files(), batch_size=args.batch_size, num_workers=args.num_workers,
                        shuffle=args.shuffle, generator=order)
    for epoch in range(args.epochs):
        n = nbytes = 0
        t0 = time.monotonic()
        cpu0 = None
        for batch in loader:
            if cpu0 is None:  # the workers run now; reaped when the epoch ends
                cpu0 = _cpu_s(psutil.Process().children())
            if args.ready_fd is not None:
                os.write(args.ready_fd, b"r")
                os.close(args.ready_fd)
                args.ready_fd = None
            n += len(batch)
            nbytes += int(batch.sum())
        seconds = time.monotonic() - t0
        print(f"epoch {epoch} files {n} bytes {nbytes} seconds {seconds:.3f} "
              f"cpu_seconds {_cpu_s() - (cpu0 or 0.0):.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
