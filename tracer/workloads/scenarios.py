"""Named training scenarios, one per finding of iotrace's diagnosis, sized for a 2-core machine.

Each scenario is data (`SPECS`): a dataset shape, its page-cache state at start (cold or warm), disk
throttling, and the arguments of `python -m tracer.workloads.train`. `prepare(name, workdir)` makes
the dataset and returns a `Scenario`: the exact argv, the setup steps in words, and how to start,
signal and clean up a run.

    from tracer.workloads.scenarios import prepare
    sc = prepare("sync_loading", tmp_path)
    try:
        run = sc.start(ready=True)       # spawned, set up, blocked before training (SIGUSR1 handshake)
        ...attach the tracer to run.pid...
        run.go()                          # cache state applied (cold/warm) right now, then SIGUSR1
        out = run.wait(timeout=120)       # out.epochs: [(epoch, steps, seconds)], out.checkpoints
    finally:
        sc.cleanup()

`sc.start()` without `ready` applies the cache state and starts training at once (what
`iotrace -- CMD` does with `sc.argv`: call `sc.prepare_cache()` right before). Throttling is part of
the argv (`--throttle-*`: the workload moves itself into a blkio cgroup before training, its
DataLoader workers inherit it), so the argv alone reproduces a scenario once the data is prepared.

Each trains for ~10-15 s on the 2-core development VM (plus ~3 s of `import torch` and set-up
before the handshake); `scripts/scenarios.py` runs them untraced and checks their claims from /proc.
Throttled reads wait in the cgroup before they become requests: the workers are in D while the
disk shows ~1 % util. Only `device_saturated` makes a disk busy: its data lives on a loop device,
and the throttle sits under it (on the disk of the image file), so the loop disk is at ~100 % util
with aqu-sz ~4 and ~160 ms await. Warm data is read and kept mapped by the process that called
`prepare_cache()` until `cleanup()`: this VM's reclaim pages out unmapped file pages idle ~6 s.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from tracer.workloads import dataset as ds
from tracer.workloads import slow_http

MB = 1_000_000


@dataclass(frozen=True)
class Spec:
    """What a scenario is: data, cache state, throttling and the training arguments."""

    name: str
    finding: str  # the finding the diagnosis is expected to emit
    summary: str  # what happens, in words
    expect: str  # what /proc shows when it runs untraced (the check in scripts/scenarios.py)
    n_files: int
    file_kib: int
    cache: str  # "cold": posix_fadvise(DONTNEED) right before training; "warm": read and kept mapped
    train_args: tuple[str, ...]
    read_bps: int = 0
    read_iops: int = 0
    write_bps: int = 0
    write_iops: int = 0
    checkpoints: bool = False
    http_delay_ms: int = 0  # > 0: the samples come from a slow local HTTP server (slow_http)
    log_fsync: bool = False  # the loop appends a line to a log and fsyncs it every step
    loop_mib: int = 0  # > 0: the data lives on an ext4 loop device of this size (throttled underneath)
    memory_mib: int = 0  # > 0: the job trains in a memory cgroup of this size (page cache included)


_PICKLE = Spec(
    name="checkpoint_pickle",
    finding="checkpoint_stall",
    summary="torch.save of 40 000 small tensors (10 MB) + fsync every 10 steps; data warm: "
    "each save ~1.5 s, nearly all of it pickling, ~20 ms of it writes",
    expect="checkpoint steps take ~1.5 s with the main thread on CPU (R); other steps ms",
    n_files=64,
    file_kib=192,
    cache="warm",
    checkpoints=True,
    train_args=(
        "--num-workers", "2", "--persistent-workers", "--batch-size", "8", "--epochs", "8",
        "--checkpoint-every", "10", "--checkpoint-mb", "10",
        "--checkpoint-tensors", "40000",
    ),
)

SPECS: dict[str, Spec] = {
    s.name: s
    for s in (
        Spec(
            name="sync_loading",
            finding="sync_loading",
            summary="num_workers=0: the training loop itself reads 128 cold 1 MiB files at 12 MB/s",
            expect="main thread mostly in D inside read(); main read_bytes = dataset size",
            n_files=128,
            file_kib=1024,
            cache="cold",
            read_bps=12 * MB,
            train_args=("--num-workers", "0", "--batch-size", "8", "--epochs", "1"),
        ),
        Spec(
            name="dataloader_io_bound",
            finding="dataloader_io_bound",
            summary="3 workers read 160 cold 1 MiB files at 16 MB/s (shared); the loop waits for batches",
            expect="workers mostly in D inside read(), little CPU; main thread sleeping (S, in poll/futex)",
            n_files=160,
            file_kib=1024,
            cache="cold",
            read_bps=16 * MB,
            train_args=("--num-workers", "3", "--batch-size", "8", "--epochs", "1"),
        ),
        Spec(
            name="dataloader_cpu_bound",
            finding="dataloader_cpu_bound",
            summary="2 persistent workers run a heavy per-sample transform on warm 192 KiB files",
            expect="workers ~100 % CPU (R), no disk reads; main thread sleeping, waiting for batches",
            n_files=96,
            file_kib=192,
            cache="warm",
            train_args=(
                "--num-workers", "2", "--persistent-workers", "--batch-size", "8", "--epochs", "4",
                "--transform", "heavy", "--transform-rounds", "10",
            ),
        ),
        Spec(
            name="not_io_bound",
            finding="not_io_bound",
            summary="heavy compute per step on warm data; 2 persistent workers keep the queue full",
            expect="main thread ~100 % CPU (R); workers mostly idle (S); no disk reads",
            n_files=64,
            file_kib=192,
            cache="warm",
            train_args=(
                "--num-workers", "2", "--persistent-workers", "--batch-size", "8", "--epochs", "8",
                "--compute", "heavy", "--compute-rounds", "6",
            ),
        ),
        Spec(
            name="checkpoint_stall",
            finding="checkpoint_stall",
            summary="torch.save of 256 MB + fsync every 8 steps, writes limited to 100 MB/s; data warm",
            expect="checkpoint steps take seconds (mostly fsync, main thread in D); other steps ms",
            n_files=64,
            file_kib=192,
            cache="warm",
            write_bps=100 * MB,
            checkpoints=True,
            train_args=(
                "--num-workers", "2", "--persistent-workers", "--batch-size", "8", "--epochs", "4",
                "--checkpoint-every", "8", "--checkpoint-mb", "256",
            ),
        ),
        Spec(
            name="dataloader_network_bound",
            finding="dataloader_network_bound",
            summary="2 workers fetch 64 samples of 192 KiB per epoch over HTTP from a local server "
            "that answers each request after 80 ms (a remote object store)",
            expect="workers asleep (S) in recvfrom() most of the time; main thread waiting for batches",
            n_files=64,
            file_kib=192,
            cache="warm",
            http_delay_ms=80,
            train_args=("--num-workers", "2", "--persistent-workers", "--batch-size", "8",
                        "--epochs", "2"),
        ),
        Spec(
            name="sync_writes",
            finding="sync_writes",
            summary="the loop appends a metrics line and fsyncs it every step, on a disk limited "
            "to 20 write IO/s; data warm",
            expect="main thread in D inside fsync() ~130 ms per step; workers mostly idle",
            n_files=64,
            file_kib=192,
            cache="warm",
            write_iops=20,
            log_fsync=True,
            train_args=("--num-workers", "2", "--persistent-workers", "--batch-size", "8",
                        "--epochs", "3"),
        ),
        Spec(
            name="checkpoint_thread",
            finding="checkpoint_stall",
            summary="a background thread saves ~100 MB with torch.save + fsync every 16 steps, "
            "writes limited to 32 MB/s; the loop waits for the previous save before the next, "
            "and for the last one at the end (the first starts ~3 s into training)",
            expect="saver thread in D in fsync ~3 s per save; main thread asleep in a join "
            "(futex) until it ends",
            n_files=64,
            file_kib=192,
            cache="warm",
            write_bps=32 * MB,
            checkpoints=True,
            train_args=(
                "--num-workers", "2", "--persistent-workers", "--batch-size", "8", "--epochs", "4",
                "--compute", "heavy", "--compute-rounds", "4", "--checkpoint-every", "16",
                "--checkpoint-mb", "96", "--checkpoint-in", "thread",
            ),
        ),
        Spec(
            name="checkpoint_fork",
            finding="not_io_bound",
            summary="a forked child saves ~55 MB with torch.save + fsync every 12 steps (writes "
            "limited to 100 MB/s) while the loop trains on; each save ends well before the next "
            "and before the run's last steps are done (the loop waits for the last at its end)",
            expect="the child in D in fsync ~0.5 s; main thread on CPU meanwhile",
            n_files=64,
            file_kib=192,
            cache="warm",
            write_bps=100 * MB,
            checkpoints=True,
            train_args=(
                "--num-workers", "2", "--persistent-workers", "--batch-size", "8", "--epochs", "4",
                "--compute", "heavy", "--compute-rounds", "8", "--checkpoint-every", "12",
                "--checkpoint-mb", "16", "--checkpoint-in", "fork",
            ),
        ),
        _PICKLE,
        # the same saves through a file object
        replace(_PICKLE, name="checkpoint_pickle_file",
                summary="checkpoint_pickle saved through a file object: with open(p, 'wb') as f: "
                "torch.save(state, f), fsynced before it is closed",
                expect="as checkpoint_pickle",
                train_args=(*_PICKLE.train_args, "--checkpoint-via", "file")),
        # back-to-back saves whose fsync, after torch.save closed the file, is about half of each
        replace(_PICKLE, name="checkpoint_pickle_fsync",
                summary="torch.save of 20 000 small tensors (40 MB) to a path every 2 steps, then "
                "the file reopened and fsynced, writes limited to 50 MB/s: each save ~0.7 s of "
                "pickling, then ~0.8 s of fsync",
                expect="checkpoint steps take ~1.5 s, the main thread on CPU (R) then in D "
                "inside fsync(); other steps ms",
                write_bps=50 * MB,
                train_args=(
                    "--num-workers", "2", "--persistent-workers", "--batch-size", "8",
                    "--epochs", "3", "--checkpoint-every", "2", "--checkpoint-mb", "40",
                    "--checkpoint-tensors", "20000",
                )),
        Spec(
            name="cold_cache",
            finding="cold_cache",
            summary="epoch 1 reads 64 cold 1 MiB files at 12 MB/s; epochs 2-8 hit the page cache",
            expect="epoch 1 several times slower than epoch 2; read_bytes only in epoch 1's workers",
            n_files=64,
            file_kib=1024,
            cache="cold",
            read_bps=12 * MB,
            train_args=(
                "--num-workers", "2", "--batch-size", "8", "--epochs", "8",
                "--compute", "heavy", "--compute-rounds", "1",
            ),
        ),
        Spec(
            name="small_files",
            finding="small_files",
            summary="2 workers read 3000 cold 4 KiB files, the disk limited to 300 IO/s",
            expect="workers mostly in D on open()/read() of tiny files; ~4 KiB per read",
            n_files=3000,
            file_kib=4,
            cache="cold",
            read_iops=300,
            train_args=("--num-workers", "2", "--batch-size", "32", "--epochs", "1"),
        ),
        Spec(
            name="device_saturated",
            finding="device_saturated",
            summary="3 workers read 160 cold 1 MiB files from an ext4 loop device whose backing reads "
            "are limited to 16 MB/s: that disk is 100 % busy and requests queue on it",
            expect="data disk (loopN) %util ~100, aqu-sz > 1, await >> service time; workers in D",
            n_files=160,
            file_kib=1024,
            cache="cold",
            read_bps=16 * MB,
            loop_mib=256,
            train_args=("--num-workers", "3", "--batch-size", "8", "--epochs", "1"),
        ),
        Spec(
            name="dataset_exceeds_cache",
            finding="dataset_exceeds_cache",
            summary="2 workers read 640 cold 512 KiB files (320 MiB) twice at 32 MB/s in a memory "
            "cgroup of 320 MiB: the workers' memory leaves at most ~190 MiB of page cache, so the "
            "second epoch reads from disk again",
            expect="both epochs equally slow; the second epoch's disk reads ~ the data set",
            n_files=640,
            file_kib=512,
            cache="cold",
            read_bps=32 * MB,
            memory_mib=320,
            train_args=("--num-workers", "2", "--persistent-workers", "--batch-size", "8",
                        "--epochs", "2"),
        ),
        Spec(
            name="dataset_fits_cache",
            finding="cold_cache",
            summary="2 workers read 128 cold 512 KiB files (64 MiB) for 4 epochs at 12 MB/s in a "
            "memory cgroup of 448 MiB: the data set fits, epochs 2-4 hit the page cache",
            expect="epoch 1 several times slower than the others; disk reads only in epoch 1",
            n_files=128,
            file_kib=512,
            cache="cold",
            read_bps=12 * MB,
            memory_mib=448,
            train_args=("--num-workers", "2", "--persistent-workers", "--batch-size", "8",
                        "--epochs", "4"),
        ),
    )
}

NAMES = tuple(SPECS)


@dataclass
class Output:
    """What a finished run printed, parsed."""

    returncode: int
    stdout: str
    stderr: str
    epochs: list[tuple[int, int, float]] = field(default_factory=list)  # (epoch, steps, seconds)
    checkpoints: list[dict[str, float]] = field(default_factory=list)  # step, bytes, save_s, fsync_s, seconds


_EPOCH = re.compile(r"^epoch (\d+) steps (\d+) seconds ([0-9.]+)$")
_CKPT = re.compile(
    r"^checkpoint step (\d+) bytes (\d+) save_s ([0-9.]+) fsync_s ([0-9.]+) seconds ([0-9.]+)$"
)


def parse_output(returncode: int, stdout: str, stderr: str) -> Output:
    out = Output(returncode, stdout, stderr)
    for line in stdout.splitlines():
        if m := _EPOCH.match(line.strip()):
            out.epochs.append((int(m[1]), int(m[2]), float(m[3])))
    for line in stderr.splitlines():
        if m := _CKPT.match(line.strip()):
            keys = ("step", "bytes", "save_s", "fsync_s", "seconds")
            out.checkpoints.append({k: float(v) for k, v in zip(keys, m.groups(), strict=True)})
    return out


class Run:
    """A started workload. With `ready`, it is blocked before training until `go()`."""

    def __init__(self, scenario: Scenario, proc: subprocess.Popen[str], waiting: bool) -> None:
        self.scenario = scenario
        self.proc = proc
        self.pid = proc.pid
        self.waiting = waiting
        self.started_at: float | None = None if waiting else time.monotonic()

    def go(self) -> None:
        """Apply the cache state (cold/warm) and let training start."""
        if not self.waiting:
            return
        self.scenario.prepare_cache()
        self.started_at = time.monotonic()
        os.kill(self.pid, signal.SIGUSR1)
        self.waiting = False

    def wait(self, timeout: float | None = None) -> Output:
        stdout, stderr = self.proc.communicate(timeout=timeout)
        return parse_output(self.proc.returncode, stdout or "", stderr or "")


@dataclass
class Scenario:
    spec: Spec
    workdir: Path
    data: Path
    paths: list[Path]
    argv: list[str]
    setup: list[str]  # the setup steps, in words (what prepare() did, and what go() does)
    checkpoint_dir: Path | None
    env: dict[str, str]
    loop: ds.LoopDisk | None = None  # device_saturated: the mounted loop device holding the data
    server: subprocess.Popen[str] | None = None  # the slow HTTP server of the samples
    log: Path | None = None  # the log the loop fsyncs every step
    _hold: ds.Hold | None = None
    _runs: list[Run] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def finding(self) -> str:
        return self.spec.finding

    @property
    def disk(self) -> str | None:
        """Name of the disk that holds the data, as in /proc/diskstats (vda, loop0)."""
        return ds.disk_name(self.data) if self.data.exists() else None

    def command(self) -> str:
        """The argv as one shell command line."""
        return shlex.join(self.argv)

    def prepare_cache(self) -> None:
        """Make the dataset cold or warm: call right before training starts."""
        if self.spec.cache == "cold":
            self.release()
            ds.make_cold(self.paths)
            if self.loop is not None:
                ds.make_cold([self.loop.image])  # and what mkfs left cached of the image
        else:
            if self._hold is None:
                self._hold = ds.hold(self.paths)  # read and kept mapped: warm for the whole run
            else:
                ds.warm(self.paths)

    def release(self) -> None:
        """Stop keeping a warm dataset mapped."""
        if self._hold is not None:
            self._hold.close()
            self._hold = None

    def start(
        self,
        *,
        ready: bool = False,
        extra_args: list[str] | None = None,
        stdout: int | None = subprocess.PIPE,
        stderr: int | None = subprocess.PIPE,
        ready_timeout: float = 120.0,
    ) -> Run:
        """Start the workload. With `ready`, return once it is set up and blocked before training
        (its pid can be traced now); `run.go()` starts training. Without, training starts at once."""
        argv = self.argv + list(extra_args or [])
        if not ready:
            self.prepare_cache()
            proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr, text=True, env=self.env)
            run = Run(self, proc, waiting=False)
            self._runs.append(run)
            return run
        r, w = os.pipe()
        try:
            proc = subprocess.Popen(
                [*argv, "--ready-fd", str(w), "--wait-signal"],
                stdout=stdout, stderr=stderr, text=True, env=self.env, pass_fds=(w,),
            )
        finally:
            os.close(w)
        run = Run(self, proc, waiting=True)
        self._runs.append(run)
        try:
            rlist, _, _ = select.select([r], [], [], ready_timeout)
            got = os.read(r, 1) if rlist else b""
        finally:
            os.close(r)
        if got != b"r":
            proc.kill()
            out = run.wait(timeout=10)
            raise RuntimeError(
                f"{self.name}: workload did not get ready (rc {out.returncode}): {out.stderr[-2000:]}"
            )
        return run

    def cleanup(self, *, remove_data: bool = False) -> None:
        """Stop runs still going, remove their throttling cgroups and the checkpoints, unmount a
        loop device (its image stays, as the data does, unless remove_data)."""
        self.release()
        for run in self._runs:
            if run.proc.poll() is None:
                run.proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    run.proc.communicate(timeout=10)
            ds.unthrottle(f"train-{run.pid}")
        self._runs = []
        if self.checkpoint_dir is not None:
            shutil.rmtree(self.checkpoint_dir, ignore_errors=True)
        if self.log is not None:
            self.log.unlink(missing_ok=True)
        if self.server is not None:
            self.server.kill()
            self.server.wait()
            self.server = None
        if self.loop is not None:
            self.loop.close()
            if remove_data:
                self.loop.image.unlink(missing_ok=True)
            self.loop = None
        if remove_data:
            shutil.rmtree(self.data, ignore_errors=True)


def _repo_env() -> dict[str, str]:
    """The environment of the workload: `tracer` importable (the repository root on PYTHONPATH)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = root if not old else f"{root}{os.pathsep}{old}"
    return env


def argv_for(
    spec: Spec,
    data: Path,
    checkpoint_dir: Path | None,
    python: str | None = None,
    throttle_disk_of: Path | None = None,
    data_url: str | None = None,
    log: Path | None = None,
    memory_mib: int = 0,
) -> list[str]:
    argv = [python or sys.executable, "-m", "tracer.workloads.train", "--data", str(data), *spec.train_args]
    if data_url is not None:
        argv += ["--data-url", data_url]
    if log is not None:
        argv += ["--log-fsync", str(log)]
    if checkpoint_dir is not None:
        argv += ["--checkpoint-dir", str(checkpoint_dir)]
    if throttle_disk_of is not None:
        argv += ["--throttle-disk-of", str(throttle_disk_of)]
    if memory_mib:
        argv += ["--memory-limit-mib", str(memory_mib)]
    for flag, value in (
        ("--throttle-read-bps", spec.read_bps),
        ("--throttle-read-iops", spec.read_iops),
        ("--throttle-write-bps", spec.write_bps),
        ("--throttle-write-iops", spec.write_iops),
    ):
        if value:
            argv += [flag, str(value)]
    return argv


def prepare(
    name: str, workdir: str | os.PathLike[str], *, python: str | None = None, make: bool = True
) -> Scenario:
    """Make the dataset of scenario `name` under `workdir` (kept and reused across calls) and
    return the scenario: argv, setup steps, start/cleanup. With make=False nothing is written
    (to print the command). Raises KeyError for an unknown name."""
    if name not in SPECS:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(NAMES)}")
    spec = SPECS[name]
    base = Path(workdir).resolve() / name
    setup = []
    loop = image = None
    data = base / f"data-{spec.n_files}x{spec.file_kib}k"
    if spec.loop_mib:
        image, mnt = base / "disk.img", base / "mnt"
        data = mnt / data.name
        setup.append(
            f"loop_disk({str(image)!r}, {str(mnt)!r}, {spec.loop_mib}): ext4 in a {spec.loop_mib} MiB image "
            "file, losetup --direct-io=on, mounted (needs root, losetup, mkfs.ext4)"
        )
        if make:
            loop = ds.loop_disk(image, mnt, spec.loop_mib)
    try:
        if make:
            paths = ds.make_dataset(data, spec.n_files, spec.file_kib)
        else:
            paths = [data / ds.sample_name(i) for i in range(spec.n_files)]
    except BaseException:
        if loop is not None:
            loop.close()
        raise
    ckpt = base / "checkpoints" if spec.checkpoints else None
    log = base / "metrics.log" if spec.log_fsync else None
    server, url = None, None
    if spec.http_delay_ms:
        url = "http://127.0.0.1:PORT"
        setup.append(f"slow_http.start(data, {spec.http_delay_ms}): a server of the files on "
                     "127.0.0.1, each answer after that many ms (not traced)")
        if make:
            server, port = slow_http.start(data, spec.http_delay_ms)
            url = f"http://127.0.0.1:{port}"
    argv = argv_for(spec, data, ckpt, python, image, url, log, spec.memory_mib)
    setup.append(
        f"make_dataset({str(data)!r}, {spec.n_files}, {spec.file_kib}): {spec.n_files} files of "
        f"{spec.file_kib} KiB random bytes, fsynced"
    )
    if spec.cache == "cold":
        setup.append("right before training: make_cold(files) (fsync + posix_fadvise DONTNEED)")
    else:
        setup.append("right before training: warm the files (read them; kept mapped for the run)")
    limits = []
    if spec.read_bps:
        limits.append(f"reads {spec.read_bps / MB:g} MB/s")
    if spec.read_iops:
        limits.append(f"reads {spec.read_iops} IO/s")
    if spec.write_bps:
        limits.append(f"writes {spec.write_bps / MB:g} MB/s")
    if spec.write_iops:
        limits.append(f"writes {spec.write_iops} IO/s")
    if limits:
        where = "the disk of the loop device's image file" if image is not None else "the disk of the data"
        setup.append(
            f"the workload throttles itself ({', '.join(limits)}) on {where}, through the cgroup "
            "iotrace-train-<pid> (blkio v1, or io.max v2); needs root, else it runs unthrottled"
        )
    if spec.memory_mib:
        setup.append(
            f"the workload moves itself into a memory cgroup of {spec.memory_mib} MiB "
            "(iotrace-train-<pid>: v1 memory, or memory.max v2) before training; needs root"
        )
    return Scenario(
        spec=spec, workdir=Path(workdir), data=data, paths=paths, argv=argv, setup=setup,
        checkpoint_dir=ckpt, env=_repo_env(), loop=loop, server=server, log=log,
    )
