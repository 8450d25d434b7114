"""A real PyTorch training loop over a directory of sample files.

    python -m tracer.workloads.train --data DIR [--num-workers N] [--batch-size B]
        [--persistent-workers] [--prefetch-factor F] [--pin-memory]
        [--transform none|heavy] [--compute light|heavy] [--epochs E] [--steps-per-epoch S]
        [--checkpoint-every K --checkpoint-mb M --checkpoint-dir D [--checkpoint-in loop|thread|fork]]
        [--data-url URL] [--log-fsync PATH]
        [--throttle-read-bps N] [--throttle-read-iops N] [--throttle-write-bps N]
        [--throttle-write-iops N] [--memory-limit-mib M [--no-oom-kill]] [--join-cgroup DIR]
        [--decode-mib M [--spill-dir DIR]] [--keep-mib M]
        [--ready-fd FD] [--wait-signal]

Each sample is one file, read with plain open()/read() inside `Dataset.__getitem__` (in the
DataLoader workers, or in the training loop itself with --num-workers 0), turned into a float
image tensor (3 x S x S, S = floor(sqrt(bytes / 3))). The model pools it to 3 x 32 x 32 and runs an
MLP; `--compute heavy` adds a deep stack of 1024-wide layers run several times per step, so the loop
is on CPU and data loading never holds it back. `--transform heavy` does convolutions and FFTs per
sample in the worker, so workers are CPU-bound even on cached data.

Checkpoints are synchronous, in the loop: every K steps `torch.save` of a state dict of about M MB
(model + optimizer + a ballast standing in for a large model), then the file is opened and fsynced,
then the previous checkpoint is removed. `--checkpoint-in thread` saves in a background thread of
the process instead, `fork` in a forked child (the child's copy of memory, as fork-based async
savers do); the loop goes on training and waits only for the previous save before it starts the
next one.
`--checkpoint-device cuda` keeps the ballast on the GPU as bf16 tensors (a large model's
weights): a save then copies it off the device first.
`--checkpoint-tensors N` makes the ballast N small tensors instead of 16 MB ones (a save then
spends its time pickling, not writing); `--checkpoint-via file` saves through a file object
(`with open(p, "wb") as f: torch.save(state, f)`, fsynced before it is closed) instead of a path.

--data-url URL: the samples come over HTTP instead of from files (streaming data sets): sample i
is `GET URL/i` (`tracer.workloads.slow_http` serves a directory so), read with urllib on a
blocking socket. --data then only gives the number of samples (its files).

--gpu-work matmul|tiny (with --device cuda): GPU work each step after the model's, then a host
sync (the loss's `.item()`, as loops that log it do): `matmul` runs --gpu-rounds products of two
8192 x 8192 bf16 matrices (the loop waits for a busy GPU: GPU-bound), `tiny` --gpu-rounds
elementwise ops on 256 floats (each kernel lasts microseconds, launching it longer: the GPU
waits for the host, launch-bound).

--log-fsync PATH: every step appends a metrics line to PATH and fsyncs it (a training log).

--ready-fd FD writes "r" to FD (then closes it) once set up (imports, model, ballast, a warm-up step
on random data), just before the DataLoader exists; with --wait-signal the loop then blocks until
SIGUSR1, so that a tracer can attach with --pid before any sample is read or any worker is forked.

--throttle-*: the process moves itself into a blkio/io.max cgroup limiting its disk (see
`tracer.workloads.dataset.throttle`; DataLoader workers inherit it) before the handshake, and
leaves and removes it at exit. The cgroup is named iotrace-train-<pid>. The disk is the one that
holds --data, or the one that holds --throttle-disk-of PATH (for data on a loop device: the disk of
its image file).

--memory-limit-mib M: the process moves itself into a memory cgroup of M MiB (v1 memory or v2
memory.max, `tracer.workloads.dataset.limit_memory`; the same name, removed the same way) before
the handshake: the page cache its reads fill, and its workers' memory, count against M, so a data
set larger than M is read from disk again every epoch. What it charged before (imports) does not.

--no-oom-kill: with --memory-limit-mib on cgroup v1 (memory.oom_control), a task at the limit
that reclaim cannot help waits for memory to be freed instead of being killed.

--decode-mib M: each sample is also decoded into M MiB of fresh memory, written and freed (a
video clip's frames): the workers' working set. --spill-dir DIR: and kept in DIR (a local cache
of decoded samples), its writeback started at once (posix_fadvise). In a memory cgroup too
small for both, the workers reclaim before they go on, waiting for those pages to be written.

--keep-mib M: each worker keeps M MiB of decoded samples in memory (a data set that caches
what it decoded), made at its first sample, and rewrites an eighth of it with every sample. In
a memory cgroup smaller than the workers' caches, with swap, those pages go out to swap and
every sample waits for its eighth to come back in.

--join-cgroup DIR: the process moves itself into the existing cgroup DIR (its `cgroup.procs`) at
the same point instead, and leaves it as it is at exit: a cgroup that other processes share with
the job (neighbours under one I/O limit), made and removed by whoever started them.

stdout: one line per epoch, `epoch E steps N seconds T`. stderr: one line per checkpoint,
`checkpoint step N bytes B save_s T fsync_s T seconds T`. Exit 0.

Threads: torch.set_num_threads(1) in the loop and in every worker. The development machines have 2
cores shared by the loop and its workers; more intra-op threads would oversubscribe them, blur which
process is on CPU, and make the timings of the scenarios depend on scheduling noise.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

# `import torch` starts a thread, and a SIGUSR1 that reaches a thread not blocking it ends the
# process (its default action): blocked before, every thread inherits the mask and only the
# loop's sigwait() takes the signal, however soon after the handshake it comes.
if "--wait-signal" in sys.argv:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

POOLED = 32  # every sample is pooled to 3 x POOLED x POOLED by the model
CLASSES = 10


class FileDataset(Dataset):
    """One sample per file; `__getitem__` reads the whole file with open()/read()."""

    def __init__(self, paths: list[Path], transform: str, transform_rounds: int,
                 decode_mib: int = 0, spill_dir: str | None = None, keep_mib: int = 0) -> None:
        self.paths = paths
        self.spill_dir = spill_dir
        self.transform = transform
        self.transform_rounds = transform_rounds
        self.decode_mib = decode_mib
        self.keep_mib = keep_mib
        self._kept: torch.Tensor | None = None  # made in the worker, not pickled to it
        self._kernel: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        with open(self.paths[i], "rb") as f:
            buf = f.read()
        return self._sample(buf, str(self.paths[i]))

    def _sample(self, buf: bytes, name: str) -> tuple[torch.Tensor, int]:
        side = math.isqrt(len(buf) // 3)
        if side < 1:
            raise ValueError(f"{name}: {len(buf)} bytes is too small for a sample")
        x = torch.frombuffer(bytearray(buf[: 3 * side * side]), dtype=torch.uint8)
        x = x.view(3, side, side).float().div_(255.0)
        if self.decode_mib:
            # a decoder's scratch (a video clip's frames): fresh memory for every sample, since
            # buffers this large are mmap'd and unmapped by malloc, each page written once
            scratch = torch.empty(self.decode_mib << 20, dtype=torch.uint8)
            scratch.fill_(buf[0])
            if self.spill_dir:  # kept on local disk, as a cache of decoded samples
                with open(Path(self.spill_dir, Path(name).name + ".dec"), "wb") as f:
                    f.write(scratch.numpy().tobytes())
                    f.flush()
                    # writeback started now (not in 30 s, by the flusher): pages that reclaim
                    # can wait for and free, where dirty ones would only fail it
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            del scratch
        if self.keep_mib:
            self._touch_kept(int(buf[0]) + len(buf))
        if self.transform == "heavy":
            x = self._heavy(x)
        return x, buf[0] % CLASSES

    def _touch_kept(self, i: int) -> None:
        """The worker's cache of decoded samples (--keep-mib): an eighth of it rewritten."""
        if self._kept is None:
            self._kept = torch.ones(self.keep_mib << 20, dtype=torch.uint8)
        part = self._kept.numel() // 8
        self._kept[(i % 8) * part:(i % 8 + 1) * part].add_(1)

    def _heavy(self, x: torch.Tensor) -> torch.Tensor:
        """CPU work of an augmentation pipeline: blur/sharpen convolutions and a spectral filter."""
        if self._kernel is None:
            g = torch.Generator().manual_seed(0)
            self._kernel = torch.randn(3, 3, 5, 5, generator=g) / 25.0
        y = x.unsqueeze(0)
        for _ in range(self.transform_rounds):
            y = torch.tanh(F.conv2d(y, self._kernel, padding=2))
            spec = torch.fft.rfft2(y)
            y = torch.fft.irfft2(spec * spec.abs().clamp(max=1.0), s=y.shape[-2:])
            y = (y - y.mean()) / (y.std() + 1e-6)
        return y.squeeze(0)


class HttpDataset(FileDataset):
    """Sample i is `GET base/i`: what streaming data sets (object stores, HTTP shards) do."""

    def __init__(self, base: str, n: int, transform: str, transform_rounds: int) -> None:
        super().__init__([Path(str(i)) for i in range(n)], transform, transform_rounds)
        self.base = base.rstrip("/")

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        import urllib.request

        with urllib.request.urlopen(f"{self.base}/{i}") as r:
            buf = r.read()
        return self._sample(buf, str(i))


class Model(nn.Module):
    def __init__(self, compute: str) -> None:
        super().__init__()
        width = 1024 if compute == "heavy" else 256
        layers: list[nn.Module] = [nn.Linear(3 * POOLED * POOLED, width), nn.ReLU()]
        if compute == "heavy":
            for _ in range(6):
                layers += [nn.Linear(width, width), nn.ReLU()]
        layers.append(nn.Linear(width, CLASSES))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(x, POOLED)
        return self.net(x.flatten(1))


def worker_init(_worker_id: int) -> None:
    torch.set_num_threads(1)  # torch does this in workers too; said here so nobody changes it


def ballast(total_mb: int, model: nn.Module, optimizer: torch.optim.Optimizer,
            tensors: int = 0, device: str = "cpu") -> dict[str, torch.Tensor]:
    """Tensors that bring the checkpoint to about `total_mb` MB (a stand-in for a large model);
    `tensors` > 0: that many small ones (many small layers, or a sharded optimizer's state);
    `device` "cuda": bf16 tensors of 16 MB on the GPU."""
    if device == "cuda":
        n = 8 * 1024 * 1024  # bf16 elements of 16 MB
        return {f"layer{i:03d}.weight": torch.empty(n, dtype=torch.bfloat16, device="cuda").uniform_()
                for i in range(max(1, total_mb * 1_000_000 // (2 * n)))}
    if tensors:
        n = max(1, total_mb * 1_000_000 // 4 // tensors)
        g = torch.Generator().manual_seed(1)
        return {f"small{i:06d}": torch.rand(n, generator=g) for i in range(tensors)}
    have = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    for st in optimizer.state_dict()["state"].values():
        have += sum(t.numel() * t.element_size() for t in st.values() if torch.is_tensor(t))
    left = max(0, total_mb * 1_000_000 - have) // 4  # float32 elements
    g = torch.Generator().manual_seed(1)
    out = {}
    chunk = 4 * 1024 * 1024  # 16 MB tensors, like the layers of a large model
    i = 0
    while left > 0:
        n = min(chunk, left)
        out[f"layer{i:03d}.weight"] = torch.rand(n, generator=g)
        left -= n
        i += 1
    return out


def warm_up(model: nn.Module, dataset: FileDataset) -> None:
    """One step and one transform on random data, before the handshake: the code they run (pages of
    libtorch, FFT kernels) is read from disk now, not during the training that is measured."""
    device = next(model.parameters()).device
    x = torch.rand(2, 3, 2 * POOLED, 2 * POOLED)
    nn.CrossEntropyLoss()(model(x.to(device)),
                          torch.zeros(2, dtype=torch.long, device=device)).backward()
    model.zero_grad(set_to_none=True)
    if dataset.transform == "heavy":
        dataset._heavy(x[0])


def save_checkpoint(
    directory: Path, step: int, state: dict[str, object], previous: Path | None,
    via: str = "path",
) -> tuple[Path, int, float, float]:
    path = directory / f"ckpt-{step:07d}.pt"
    t0 = time.perf_counter()
    if via == "file":
        with open(path, "wb") as f:
            torch.save(state, f)
            t1 = time.perf_counter()
            f.flush()
            os.fsync(f.fileno())
    else:
        torch.save(state, path)
        t1 = time.perf_counter()
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    t2 = time.perf_counter()
    if previous is not None and previous != path:
        previous.unlink(missing_ok=True)
    return path, path.stat().st_size, t1 - t0, t2 - t1


def _report(step: int, size: int, save_s: float, fsync_s: float, seconds: float) -> None:
    print(f"checkpoint step {step} bytes {size} save_s {save_s:.3f} fsync_s {fsync_s:.3f} "
          f"seconds {seconds:.3f}", file=sys.stderr, flush=True)


class Saver:
    """Saves checkpoints in the loop, in a background thread or in a forked child; a new save
    first waits for the one before (as async checkpointing does)."""

    def __init__(self, directory: Path | None, where: str, via: str = "path") -> None:
        self.directory, self.where, self.via = directory, where, via
        self.previous: Path | None = None
        self.thread: threading.Thread | None = None
        self.child = 0

    def save(self, step: int, state: dict[str, object]) -> None:
        assert self.directory is not None
        self.wait()
        c0 = time.perf_counter()
        if self.where == "loop":
            self._save(step, state, c0)
        elif self.where == "thread":
            self.thread = threading.Thread(target=self._save, args=(step, state, c0),
                                           name="ckpt-saver")
            self.thread.start()
        else:
            self.child = os.fork()
            if self.child == 0:  # the child: its copy of the state, written out, then gone
                try:
                    self._save(step, state, c0)
                finally:
                    os._exit(0)
            # the parent removes the file before this one once the child is done (wait())
            self.pending = self.directory / f"ckpt-{step:07d}.pt"

    def _save(self, step: int, state: dict[str, object], c0: float) -> None:
        assert self.directory is not None
        previous = self.previous if self.where != "fork" else None
        path, size, save_s, fsync_s = save_checkpoint(self.directory, step, state, previous,
                                                      self.via)
        self.previous = path
        _report(step, size, save_s, fsync_s, time.perf_counter() - c0)

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        if self.child:
            os.waitpid(self.child, 0)
            self.child = 0
            if self.previous is not None:
                self.previous.unlink(missing_ok=True)
            self.previous = self.pending


class GpuWork:
    """--gpu-work: GPU work after each step's model, then the loss's .item() (a host sync)."""

    def __init__(self, kind: str, rounds: int, device: str) -> None:
        self.kind, self.rounds = kind, rounds
        if kind == "matmul":
            self.a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
            self.b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
        elif kind == "tiny":
            self.t = torch.rand(256, device=device)

    def step(self, loss: torch.Tensor) -> None:
        if self.kind == "matmul":
            for _ in range(self.rounds):
                self.a @ self.b
        elif self.kind == "tiny":
            t = self.t
            for _ in range(self.rounds):
                t = t * 0.999 + 0.001
            self.t = t
        if self.kind != "none":
            loss.item()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tracer.workloads.train", description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="directory of sample files (one sample per file)")
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--persistent-workers", action="store_true")
    p.add_argument("--prefetch-factor", type=int, default=None)
    p.add_argument("--pin-memory", action="store_true")
    p.add_argument("--no-shuffle", action="store_true", help="read samples in file order")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--transform", choices=["none", "heavy"], default="none")
    p.add_argument("--transform-rounds", type=int, default=4, help="rounds of the heavy transform")
    p.add_argument("--compute", choices=["light", "heavy"], default="light")
    p.add_argument("--device", choices=["cpu", "cuda", "auto"], default="cpu",
                   help="where the model trains (auto: cuda when available); the data pipeline "
                        "stays on the CPU, as in real jobs")
    p.add_argument("--compute-rounds", type=int, default=4, help="forward/backward passes per heavy step")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps-per-epoch", type=int, default=0, help="0: until the dataset is consumed")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="K", help="steps; 0: never")
    p.add_argument("--checkpoint-mb", type=int, default=64, metavar="M")
    p.add_argument("--checkpoint-dir", default=None)
    p.add_argument("--checkpoint-in", choices=["loop", "thread", "fork"], default="loop",
                   help="who writes the checkpoint: the loop itself, a background thread, a forked child")
    p.add_argument("--checkpoint-tensors", type=int, default=0, metavar="N",
                   help="the ballast as N small tensors (0: 16 MB ones)")
    p.add_argument("--checkpoint-device", choices=["cpu", "cuda"], default="cpu",
                   help="where the ballast lives (cuda: bf16 tensors on the GPU)")
    p.add_argument("--gpu-work", choices=["none", "matmul", "tiny"], default="none",
                   help="GPU work each step, then a host sync (see the module's doc)")
    p.add_argument("--gpu-rounds", type=int, default=10, help="matmuls or tiny ops per step")
    p.add_argument("--checkpoint-via", choices=["path", "file"], default="path",
                   help="torch.save to the path, or through a file object fsynced before close")
    p.add_argument("--data-url", default=None, help="fetch sample i as GET URL/i (see the module's doc)")
    p.add_argument("--log-fsync", default=None, metavar="PATH",
                   help="append a metrics line to PATH and fsync it every step")
    p.add_argument("--throttle-read-bps", type=int, default=0)
    p.add_argument("--throttle-read-iops", type=int, default=0)
    p.add_argument("--throttle-write-bps", type=int, default=0)
    p.add_argument("--throttle-write-iops", type=int, default=0)
    p.add_argument("--throttle-disk-of", default=None, metavar="PATH",
                   help="throttle the disk that holds PATH (default: the one that holds --data)")
    p.add_argument("--memory-limit-mib", type=int, default=0, metavar="M",
                   help="train in a memory cgroup of M MiB (page cache included); 0: no limit")
    p.add_argument("--decode-mib", type=int, default=0, metavar="M",
                   help="each sample decoded into M MiB of fresh memory (a worker's working set)")
    p.add_argument("--keep-mib", type=int, default=0, metavar="M",
                   help="each worker keeps M MiB of decoded samples in memory (its cache)")
    p.add_argument("--no-oom-kill", action="store_true",
                   help="with --memory-limit-mib on cgroup v1: wait at the limit, never killed")
    p.add_argument("--spill-dir", default=None, metavar="DIR",
                   help="with --decode-mib, each decoded sample is also written to DIR")
    p.add_argument("--join-cgroup", default=None, metavar="DIR",
                   help="move into this existing cgroup before training (shared with others)")
    p.add_argument("--ready-fd", type=int, default=None)
    p.add_argument("--wait-signal", action="store_true", help="block until SIGUSR1 before training")
    args = p.parse_args(argv)
    if args.checkpoint_every and not args.checkpoint_dir:
        p.error("--checkpoint-every needs --checkpoint-dir")
    if args.num_workers == 0 and (args.persistent_workers or args.prefetch_factor is not None):
        p.error("--persistent-workers and --prefetch-factor need --num-workers >= 1")
    return args


def _limit_memory(args: argparse.Namespace) -> bool:
    """Moves this process into a memory cgroup of --memory-limit-mib; whether it did."""
    from tracer.workloads.dataset import limit_memory

    done = limit_memory(os.getpid(), args.memory_limit_mib << 20, name=f"train-{os.getpid()}")
    print(f"memory: {done or 'not possible here (no memory cgroup, or not root)'}",
          file=sys.stderr)
    if done is not None and args.no_oom_kill and "cgroup v1" in done:
        # v1's memory.oom_control: a task at the limit that reclaim cannot help waits for
        # memory to be freed (writeback ending) instead of being killed
        Path(done.split()[3].rstrip(":"), "memory.oom_control").write_text("1\n")
    return done is not None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM (a tracer's --duration, a test's cleanup) unwinds like an exception: the DataLoader
    # shuts its workers down and the throttling cgroup is removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)

    data = Path(args.data)
    if not data.is_dir():
        print(f"error: --data {data}: not a directory", file=sys.stderr)
        return 2
    paths = sorted(p for p in data.iterdir() if p.is_file() and not p.name.startswith("."))
    if not paths:
        print(f"error: no sample files in {data}", file=sys.stderr)
        return 2
    dataset = (HttpDataset(args.data_url, len(paths), args.transform, args.transform_rounds)
               if args.data_url else FileDataset(paths, args.transform, args.transform_rounds,
                                                 args.decode_mib, args.spill_dir, args.keep_mib))
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    model = Model(args.compute).to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    ckpt_dir = Path(args.checkpoint_dir) if args.checkpoint_dir else None
    extra: dict[str, torch.Tensor] = {}
    if args.checkpoint_every:
        assert ckpt_dir is not None
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        extra = ballast(args.checkpoint_mb, model, optimizer, args.checkpoint_tensors,
                        args.checkpoint_device)

    warm_up(model, dataset)

    throttle_name = None
    if (args.throttle_read_bps or args.throttle_read_iops or args.throttle_write_bps
            or args.throttle_write_iops):
        from tracer.workloads.dataset import throttle

        throttle_name = f"train-{os.getpid()}"
        done = throttle(
            os.getpid(),
            args.throttle_disk_of or data,
            args.throttle_read_bps,
            read_iops=args.throttle_read_iops,
            write_bps=args.throttle_write_bps,
            write_iops=args.throttle_write_iops,
            name=throttle_name,
        )
        print(f"throttle: {done or 'not possible here (no blkio/io cgroup, or not root)'}", file=sys.stderr)
        if done is None:
            throttle_name = None
    if args.memory_limit_mib and _limit_memory(args):
        throttle_name = f"train-{os.getpid()}"
    if args.join_cgroup:
        Path(args.join_cgroup, "cgroup.procs").write_text(f"{os.getpid()}\n")

    try:
        if args.wait_signal:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        if args.ready_fd is not None:
            os.write(args.ready_fd, b"r")
            os.close(args.ready_fd)
        if args.wait_signal:
            signal.sigwait({signal.SIGUSR1})
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
        train(args, dataset, model, optimizer, ckpt_dir, extra)
    finally:
        if throttle_name is not None:
            from tracer.workloads.dataset import unthrottle

            unthrottle(throttle_name)
    return 0


def train(
    args: argparse.Namespace,
    dataset: FileDataset,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    ckpt_dir: Path | None,
    extra: dict[str, torch.Tensor],
) -> None:
    kwargs: dict[str, object] = {}
    if args.num_workers:
        kwargs = {"worker_init_fn": worker_init, "persistent_workers": args.persistent_workers}
        if args.prefetch_factor is not None:
            kwargs["prefetch_factor"] = args.prefetch_factor
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=not args.no_shuffle,
        num_workers=args.num_workers,
        pin_memory=args.pin_memory,
        generator=torch.Generator().manual_seed(args.seed),
        **kwargs,
    )
    loss_fn = nn.CrossEntropyLoss()
    rounds = args.compute_rounds if args.compute == "heavy" else 1
    step = 0
    saver = Saver(ckpt_dir, args.checkpoint_in, args.checkpoint_via)
    gpu_work = GpuWork(args.gpu_work, args.gpu_rounds, args.device)
    log = open(args.log_fsync, "a") if args.log_fsync else None  # noqa: SIM115 (closed below)
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        n = 0
        for x, y in loader:
            x, y = x.to(args.device, non_blocking=True), y.to(args.device, non_blocking=True)
            for _ in range(rounds):
                optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
            gpu_work.step(loss)
            n += 1
            step += 1
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                assert ckpt_dir is not None
                state = {
                    "step": step,
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "ballast": extra,
                }
                saver.save(step, state)
            if log is not None:
                log.write(f"step {step} loss {loss.item():.4f}\n")
                log.flush()
                os.fsync(log.fileno())
            if args.steps_per_epoch and n >= args.steps_per_epoch:
                break
        print(f"epoch {epoch} steps {n} seconds {time.perf_counter() - t0:.3f}", flush=True)
    saver.wait()
    if log is not None:
        log.close()
    del loader  # shuts persistent workers down before the process leaves its cgroup


if __name__ == "__main__":
    sys.exit(main())
