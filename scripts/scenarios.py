#!/usr/bin/env python3
"""Run iotrace's training scenarios UNTRACED and show, from /proc, that each is what it claims.

    scripts/scenarios.py --list
    scripts/scenarios.py NAME --print-cmd        setup steps and the exact command line
    scripts/scenarios.py NAME --setup            make the data and its cache state, print the command
    scripts/scenarios.py [NAME ...|all]          run and measure (default: all)
    scripts/scenarios.py --roles                 comm of workers / pin thread, worker PIDs per epoch

The scenarios themselves are data in `tracer.workloads.scenarios` (tests and the demo import them).
Each run uses the ready-fd/SIGUSR1 handshake, so only training is measured (not `import torch`).
A sampler reads, every 20 ms, each process of the tree (training process and its DataLoader
workers): the state of its main thread (R running/runnable, S sleeping, D uninterruptible, i.e.
waiting for the disk) and, when not running, the system call it is blocked in
(/proc/PID/task/TID/syscall); utime+stime and /proc/PID/io read_bytes/write_bytes as deltas from the
start of training. Then it checks the scenario's claim and exits 1 if a check fails.
Needs root for /proc/PID/{io,syscall} of the workload and for the throttling cgroups.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracer.workloads import dataset as ds
from tracer.workloads.scenarios import NAMES, SPECS, Output, Scenario, parse_output, prepare

HZ = os.sysconf("SC_CLK_TCK")
INTERVAL = 0.02
SYSCALLS = {
    "x86_64": {
        0: "read", 1: "write", 2: "open", 3: "close", 4: "stat", 5: "fstat", 7: "poll", 8: "lseek",
        9: "mmap", 11: "munmap", 16: "ioctl", 17: "pread64", 19: "readv", 20: "writev", 23: "select",
        35: "nanosleep", 56: "clone", 61: "wait4", 74: "fsync", 75: "fdatasync", 76: "truncate",
        77: "ftruncate", 82: "rename", 87: "unlink", 128: "rt_sigtimedwait", 202: "futex",
        230: "clock_nanosleep", 232: "epoll_wait", 257: "openat", 262: "newfstatat", 263: "unlinkat",
        270: "pselect6", 271: "ppoll", 281: "epoll_pwait", 435: "clone3", 441: "epoll_pwait2",
    },
    "aarch64": {
        22: "epoll_pwait", 35: "unlinkat", 56: "openat", 57: "close", 63: "read", 64: "write",
        67: "pread64", 72: "pselect6", 73: "ppoll", 79: "newfstatat", 82: "fsync", 83: "fdatasync",
        98: "futex", 101: "nanosleep", 115: "clock_nanosleep", 137: "rt_sigtimedwait", 222: "mmap",
    },
}.get(platform.machine(), {})


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _stat(pid: int, tid: int | None = None) -> tuple[str, str, int, int] | None:
    """(comm, state, ppid, utime+stime ticks) of a process (or of one of its threads)."""
    s = _read(f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat")
    if not s:
        return None
    lp, rp = s.find("("), s.rfind(")")
    rest = s[rp + 2 :].split()
    return s[lp + 1 : rp], rest[0], int(rest[1]), int(rest[11]) + int(rest[12])


def _io(pid: int) -> tuple[int, int] | None:
    s = _read(f"/proc/{pid}/io")
    if not s:
        return None
    kv = dict(line.split(": ") for line in s.splitlines() if ": " in line)
    return int(kv.get("read_bytes", 0)), int(kv.get("write_bytes", 0))


def _syscall(pid: int, tid: int) -> str:
    s = _read(f"/proc/{pid}/task/{tid}/syscall")
    if not s:
        return "?"
    first = s.split()[0]
    if first == "running":
        return "running"
    if first == "-1":
        return "fault"  # blocked outside a system call (page fault)
    n = int(first)
    return SYSCALLS.get(n, f"sys{n}")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        s = _read(f"/proc/{pid}/task/{tid}/children")
        if s:
            out += [int(c) for c in s.split()]
    return out


@dataclass
class Proc:
    pid: int
    ppid: int
    comm: str
    first: float
    last: float
    ticks0: int
    ticks: int
    io0: tuple[int, int]
    io: tuple[int, int]
    states: Counter[str] = field(default_factory=Counter)
    waits: Counter[str] = field(default_factory=Counter)  # "D:read", "S:futex", ...
    threads: set[str] = field(default_factory=set)
    nthreads: int = 0  # most threads seen at once

    @property
    def alive(self) -> float:
        return max(self.last - self.first, INTERVAL)

    @property
    def cpu(self) -> float:
        return (self.ticks - self.ticks0) / HZ / self.alive

    def frac(self, state: str) -> float:
        n = sum(self.states.values())
        return self.states[state] / n if n else 0.0

    def wait_frac(self, key: str) -> float:
        n = sum(self.states.values())
        return self.waits[key] / n if n else 0.0

    @property
    def read_bytes(self) -> int:
        return self.io[0] - self.io0[0]

    @property
    def write_bytes(self) -> int:
        return self.io[1] - self.io0[1]


class Sampler(threading.Thread):
    """Samples a process tree from /proc every INTERVAL seconds until stopped."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.procs: dict[int, Proc] = {}
        self.t0 = time.monotonic()
        self._stop_event = threading.Event()
        self.cpu_s = 0.0
        self.disk: str | None = None
        self.disk_samples: list[tuple[float, list[int]]] = []

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def run(self) -> None:
        c0 = time.thread_time()
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(INTERVAL)
        self.cpu_s = time.thread_time() - c0

    def sample(self) -> None:
        now = time.monotonic() - self.t0
        d = _diskstats(self.disk)
        if d is not None:
            self.disk_samples.append((now, d))
        todo, seen = [self.root], set()
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            todo += _children(pid)
            st, io = _stat(pid), _io(pid)
            if st is None or io is None:
                continue
            comm, state, ppid, ticks = st
            p = self.procs.get(pid)
            if p is None:
                p = self.procs[pid] = Proc(pid, ppid, comm, now, now, ticks, ticks, io, io)
            p.comm, p.last, p.ticks, p.io = comm, now, ticks, io
            p.states[state] += 1
            if state != "R":
                p.waits[f"{state}:{_syscall(pid, pid)}"] += 1
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                tids = []
            p.nthreads = max(p.nthreads, len(tids))
            for tid in tids:
                tst = _stat(pid, int(tid))
                if tst:
                    p.threads.add(tst[0])


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    f = [int(x) for x in (_read("/proc/stat") or "cpu 0").splitlines()[0].split()[1:]]
    total = sum(f[:8])
    return total - f[3] - (f[4] if len(f) > 4 else 0), total


def _diskstats(name: str | None) -> list[int] | None:
    if not name:
        return None
    for line in (_read("/proc/diskstats") or "").splitlines():
        f = line.split()
        if len(f) >= 14 and f[2] == name:
            return [int(x) for x in f[3:14]]
    return None


@dataclass
class Disk:
    """iostat -x over the run for one disk (from /proc/diskstats deltas)."""

    name: str
    seconds: float
    # rd_ios rd_merges rd_sectors rd_ticks wr_ios wr_merges wr_sectors wr_ticks inflight io_ticks queue
    d: list[int]

    @property
    def util(self) -> float:
        return self.d[9] / (self.seconds * 1000)

    @property
    def aqu(self) -> float:
        return self.d[10] / (self.seconds * 1000)

    @property
    def r_await(self) -> float:
        return self.d[3] / self.d[0] if self.d[0] else 0.0

    @property
    def svctm(self) -> float:  # ms of busy time per request (iostat's old svctm)
        n = self.d[0] + self.d[4]
        return self.d[9] / n if n else 0.0

    def line(self) -> str:
        s = self.seconds
        return (f"disk {self.name}: r/s {self.d[0] / s:.0f} rMB/s {self.d[2] * 512 / s / 1e6:.1f} "
                f"w/s {self.d[4] / s:.0f} wMB/s {self.d[6] * 512 / s / 1e6:.1f} "
                f"r_await {self.r_await:.1f} ms svctm {self.svctm:.1f} ms aqu-sz {self.aqu:.2f} "
                f"%util {100 * self.util:.1f}")


@dataclass
class Measured:
    scenario: Scenario
    out: Output
    procs: list[Proc]
    wall: float
    busy_cores: float = 0.0  # whole machine, during the run
    sampler_cores: float = 0.0
    disk: Disk | None = None
    data_bytes: int = 0

    @property
    def main(self) -> Proc:
        return next(p for p in self.procs if p.pid == self.procs[0].pid)

    @property
    def workers(self) -> list[Proc]:
        return [p for p in self.procs[1:] if p.comm == "pt_data_worker"]

    def workers_weighted(self, fn: Callable[[Proc], float]) -> float:
        ws = self.workers
        total = sum(w.alive for w in ws)
        return sum(fn(w) * w.alive for w in ws) / total if total else 0.0


def _reader(stream: IO[str], sink: list[tuple[float, str]]) -> threading.Thread:
    def run() -> None:
        for line in stream:
            sink.append((time.monotonic(), line))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def measure(sc: Scenario, timeout: float = 300.0) -> Measured:
    """Run `sc` (handshake, then training) under the sampler; disk figures cover the training, up to
    the last epoch line."""
    data_bytes = ds.total_bytes(sc.paths)
    run = sc.start(ready=True)
    sampler = Sampler(run.pid)
    sampler.disk = sc.disk
    sampler.sample()  # baseline before training
    base = sampler.procs[run.pid]
    base.states.clear()
    base.waits.clear()
    out_lines: list[tuple[float, str]] = []
    err_lines: list[tuple[float, str]] = []
    assert run.proc.stdout is not None and run.proc.stderr is not None
    readers = [_reader(run.proc.stdout, out_lines), _reader(run.proc.stderr, err_lines)]
    run.go()
    t0 = time.monotonic()
    busy0, total0 = _cpu_ticks()
    sampler.t0 = t0
    sampler.disk_samples = [(0.0, d) for _, d in sampler.disk_samples[-1:]]
    base.first = base.last = 0.0
    sampler.start()
    try:
        run.proc.wait(timeout=timeout)
        for r in readers:
            r.join(timeout=10)
    finally:
        sampler.stop()
    wall = time.monotonic() - t0
    busy1, total1 = _cpu_ticks()
    ncpu = os.cpu_count() or 1
    busy = (busy1 - busy0) / max(total1 - total0, 1) * ncpu
    stdout, stderr = ("".join(x for _, x in lines) for lines in (out_lines, err_lines))
    out = parse_output(run.proc.returncode, stdout, stderr)
    procs = sorted(sampler.procs.values(), key=lambda p: (p.pid != run.pid, p.first, p.pid))
    dstat = None
    ds_samples = sampler.disk_samples
    if sampler.disk and len(ds_samples) >= 2:
        epoch_ends = [t - t0 for t, line in out_lines if line.startswith("epoch ")]
        t_end = epoch_ends[-1] if epoch_ends else wall
        first = ds_samples[0]
        last = max((x for x in ds_samples if x[0] <= t_end), key=lambda x: x[0], default=ds_samples[-1])
        if last[0] > first[0]:
            delta = [b - a for a, b in zip(first[1], last[1], strict=True)]
            dstat = Disk(sampler.disk, last[0] - first[0], delta)
    return Measured(sc, out, procs, wall, busy, sampler.cpu_s / wall, dstat, data_bytes)


def _pct(x: float) -> str:
    return f"{100 * x:5.1f}"


def report(m: Measured) -> None:
    tree = sum((p.ticks - p.ticks0) / HZ for p in m.procs) / m.wall
    print(f"  wall {m.wall:.1f} s (training and exit, after the handshake); CPUs busy {m.busy_cores:.2f} of "
          f"{os.cpu_count()}: this workload {tree:.2f}, the sampler {m.sampler_cores:.2f}, "
          f"others {max(0.0, m.busy_cores - tree - m.sampler_cores):.2f}")
    if m.disk is not None:
        print(f"  {m.disk.line()}")
    for line in m.out.stdout.splitlines():
        print(f"  {line}")
    for line in m.out.stderr.splitlines():
        if line.startswith(("checkpoint", "throttle")):
            print(f"  {line}")
    print("  (a process's read_MB/write_MB include its children once reaped, as /proc/PID/io does)")
    print(f"  {'pid':>7} {'comm':<15} {'alive_s':>7} {'cpu%':>5} {'R%':>5} {'S%':>5} {'D%':>5} "
          f"{'read_MB':>8} {'write_MB':>8}  top waits (% of samples)")
    for p in m.procs:
        n = sum(p.states.values()) or 1
        waits = ", ".join(f"{k} {100 * v / n:.0f}" for k, v in p.waits.most_common(3))
        print(f"  {p.pid:>7} {p.comm:<15} {p.alive:7.1f} {_pct(p.cpu)} {_pct(p.frac('R'))} "
              f"{_pct(p.frac('S'))} {_pct(p.frac('D'))} {p.read_bytes / 1e6:8.1f} "
              f"{p.write_bytes / 1e6:8.1f}  {waits}")
    ws = m.workers
    if ws:
        print(f"  workers: {len(ws)} pids, cpu {_pct(m.workers_weighted(lambda w: w.cpu))} %, "
              f"R {_pct(m.workers_weighted(lambda w: w.frac('R')))} %, "
              f"D {_pct(m.workers_weighted(lambda w: w.frac('D')))} %, "
              f"read {sum(w.read_bytes for w in ws) / 1e6:.1f} MB")
    threads = sorted(m.main.threads)
    print(f"  main process: up to {m.main.nthreads} threads, named {', '.join(threads)}")


def check(m: Measured) -> list[tuple[str, bool]]:
    """The scenario's claim, as numbers from /proc; (what, ok) pairs."""
    name = m.scenario.name
    main, ws = m.main, m.workers
    data_bytes = m.data_bytes
    w_read = sum(w.read_bytes for w in ws)
    w_d = m.workers_weighted(lambda w: w.frac("D"))
    w_cpu = m.workers_weighted(lambda w: w.cpu)
    epochs = [e[2] for e in m.out.epochs]
    c: list[tuple[str, bool]] = [(f"exit status {m.out.returncode}", m.out.returncode == 0)]
    if name == "sync_loading":
        d_read = main.wait_frac("D:read")
        c += [
            (f"main thread in D inside read(): {_pct(d_read)} % of samples (>= 60)", d_read >= 0.6),
            (f"main on CPU {_pct(main.cpu)} % (<= 30)", main.cpu <= 0.3),
            (f"main read {main.read_bytes / 1e6:.1f} MB of {data_bytes / 1e6:.1f} MB",
             main.read_bytes >= 0.9 * data_bytes),
            ("no DataLoader workers", not ws),
        ]
    elif name in ("dataloader_io_bound", "small_files"):
        floor = 0.6 if name == "dataloader_io_bound" else 0.5
        c += [
            (f"workers in D {_pct(w_d)} % of samples (>= {100 * floor:.0f})", w_d >= floor),
            (f"workers on CPU {_pct(w_cpu)} % (<= 30)", w_cpu <= 0.3),
            (f"main thread running {_pct(main.frac('R'))} % (<= 25: it waits for batches)",
             main.frac("R") <= 0.25),
            (f"workers read {w_read / 1e6:.1f} MB of {data_bytes / 1e6:.1f} MB", w_read >= 0.9 * data_bytes),
        ]
    elif name == "dataloader_cpu_bound":
        w_r = m.workers_weighted(lambda w: w.frac("R"))
        c += [
            (f"workers running or runnable (R) {_pct(w_r)} % of samples (>= 80; on CPU {_pct(w_cpu)} %)",
             w_r >= 0.8),
            (f"main thread running {_pct(main.frac('R'))} % (<= 30: it waits for batches)",
             main.frac("R") <= 0.3),
            (f"disk reads at most {(w_read + main.read_bytes) / 1e6:.1f} MB (< 1: data warm)",
             w_read + main.read_bytes < 1e6),
        ]
    elif name == "not_io_bound":
        c += [
            (f"main thread running or runnable (R) {_pct(main.frac('R'))} % "
             f"(>= 80; on CPU {_pct(main.cpu)} %)", main.frac("R") >= 0.8),
            (f"workers on CPU {_pct(w_cpu)} % (<= 20)", w_cpu <= 0.2),
            (f"disk reads at most {(w_read + main.read_bytes) / 1e6:.1f} MB (< 1: data warm)",
             w_read + main.read_bytes < 1e6),
        ]
    elif name == "checkpoint_stall":
        ck = m.out.checkpoints
        ck_s = sum(x["seconds"] for x in ck)
        total = sum(epochs)
        share = ck_s / total if total else 0.0
        each = ", ".join(f"{x['seconds']:.2f}" for x in ck)
        c += [
            (f"{len(ck)} checkpoints, each >= 1.5 s: {each}",
             bool(ck) and all(x["seconds"] >= 1.5 for x in ck)),
            (f"checkpoints {ck_s:.1f} s of {total:.1f} s training ({_pct(share)} %, >= 70)", share >= 0.7),
            (f"main wrote {main.write_bytes / 1e6:.0f} MB", main.write_bytes >= 0.9 * 256e6 * len(ck)),
            (f"main thread in D inside fsync(): {_pct(main.wait_frac('D:fsync'))} %",
             main.wait_frac("D:fsync") >= 0.4),
        ]
    elif name == "cold_cache":
        later = statistics.median(epochs[1:]) if len(epochs) > 1 else 0.0
        e1_workers = [w for w in ws if w.first < (epochs[0] if epochs else 0) * 0.5]
        e1_read = sum(w.read_bytes for w in e1_workers)
        c += [
            (f"epoch 1 {epochs[0] if epochs else 0:.2f} s >= 3 x median of epochs 2+ ({later:.2f} s)",
             len(epochs) > 1 and epochs[0] >= 3 * later),
            (f"epoch 1 workers read {e1_read / 1e6:.1f} MB, later workers "
             f"{(w_read - e1_read) / 1e6:.1f} MB (< 5 % of {data_bytes / 1e6:.1f})",
             e1_read >= 0.9 * data_bytes and w_read - e1_read < 0.05 * data_bytes),
        ]
    elif name == "dataset_exceeds_cache":
        c += [
            (f"epoch 2 {epochs[-1] if epochs else 0:.2f} s >= 0.6 x epoch 1 "
             f"({epochs[0] if epochs else 0:.2f} s): read from disk again",
             len(epochs) > 1 and epochs[-1] >= 0.6 * epochs[0]),
            (f"workers read {w_read / 1e6:.1f} MB from disk (>= 1.5 x {data_bytes / 1e6:.1f})",
             w_read >= 1.5 * data_bytes),
        ]
    elif name == "dataset_fits_cache":
        later = statistics.median(epochs[1:]) if len(epochs) > 1 else 0.0
        c += [
            (f"epoch 1 {epochs[0] if epochs else 0:.2f} s >= 3 x median of epochs 2+ ({later:.2f} s)",
             len(epochs) > 1 and epochs[0] >= 3 * later),
            (f"workers read {w_read / 1e6:.1f} MB from disk (< 1.1 x {data_bytes / 1e6:.1f})",
             0.9 * data_bytes <= w_read < 1.1 * data_bytes),
        ]
    elif name == "device_saturated":
        dk = m.disk
        c += [
            (f"workers in D {_pct(w_d)} % of samples (>= 60)", w_d >= 0.6),
            (f"data disk {dk.name if dk else '?'} is a loop device", bool(dk and dk.name.startswith("loop"))),
            (f"%util {100 * dk.util if dk else 0:.1f} (>= 90)", bool(dk and dk.util >= 0.9)),
            (f"aqu-sz {dk.aqu if dk else 0:.2f} (>= 1.5)", bool(dk and dk.aqu >= 1.5)),
            (f"r_await {dk.r_await if dk else 0:.1f} ms >= 2 x svctm {dk.svctm if dk else 0:.1f} ms",
             bool(dk and dk.r_await >= 2 * dk.svctm)),
        ]
    if name == "small_files":
        per_file = w_read / len(m.scenario.paths)
        c.append((f"{per_file / 1024:.1f} KiB read from disk per file (<= 8)", per_file <= 8 * 1024))
    return c


def run_one(name: str, workdir: Path) -> bool:
    spec = SPECS[name]
    print(f"== {name}: {spec.summary}")
    sc = prepare(name, workdir)
    try:
        print(f"  $ {sc.command()}")
        m = measure(sc)
    finally:
        sc.cleanup()
    report(m)
    ok = True
    for what, good in check(m):
        print(f"  {'ok  ' if good else 'FAIL'} {what}")
        ok = ok and good
    print()
    return ok


def roles(workdir: Path) -> bool:
    """What PyTorch names its processes and threads here, and whether workers are re-forked."""
    ok = True
    data = workdir / "roles" / "data-32x192k"
    ds.make_dataset(data, 32, 192)
    for persistent in (False, True):
        sc = prepare("dataloader_cpu_bound", workdir, make=False)
        sc.data, sc.paths = data, sorted(data.iterdir())
        sc.argv = [
            sys.executable, "-m", "tracer.workloads.train", "--data", str(data), "--num-workers", "2",
            "--batch-size", "8", "--epochs", "3", "--transform", "heavy", "--transform-rounds", "6",
            "--pin-memory", *(["--persistent-workers"] if persistent else []),
        ]
        try:
            m = measure(sc)
        finally:
            sc.cleanup()
        label = "persistent_workers=True" if persistent else "persistent_workers=False"
        print(f"== {label}, pin_memory=True, 3 epochs: {' | '.join(m.out.stdout.splitlines())}")
        pin_warn = [line for line in m.out.stderr.splitlines() if "pin_memory" in line]
        print(f"  main: comm {m.main.comm!r}, up to {m.main.nthreads} threads named {sorted(m.main.threads)}")
        for w in m.procs[1:]:
            print(f"  child pid {w.pid} comm {w.comm!r}, up to {w.nthreads} threads named "
                  f"{sorted(w.threads)}, alive {w.first:.2f}-{w.last:.2f} s")
        if pin_warn:
            print(f"  torch: {pin_warn[0].strip()}")
        ws = m.workers
        expect = 2 if persistent else 6
        good = len(ws) == expect and all(w.comm == "pt_data_worker" for w in ws)
        print(f"  {'ok  ' if good else 'FAIL'} {len(ws)} worker pids named pt_data_worker (expect {expect})")
        ok = ok and good
    return ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    p.add_argument("names", nargs="*", help=f"scenarios (default all): {', '.join(NAMES)}")
    p.add_argument("--list", action="store_true", help="list the scenarios")
    p.add_argument("--print-cmd", action="store_true", help="print setup steps and command line")
    p.add_argument(
        "--setup", action="store_true", help="make the data, apply its cache state, print the command"
    )
    p.add_argument("--roles", action="store_true", help="check worker/pin thread names and worker respawns")
    p.add_argument("--workdir", default="/tmp/iotrace-scenarios", help="datasets and checkpoints go here")
    args = p.parse_args(argv)
    names = [n for n in args.names if n != "all"] or list(NAMES)
    unknown = [n for n in names if n not in SPECS]
    if unknown:
        print(f"error: unknown scenario {', '.join(unknown)}; known: {', '.join(NAMES)}", file=sys.stderr)
        return 2
    workdir = Path(args.workdir)
    if args.list:
        for n in NAMES:
            s = SPECS[n]
            print(f"{n:<22} {s.summary}\n{'':<22} expect: {s.expect}")
        return 0
    if args.print_cmd or args.setup:
        for n in names:
            sc = prepare(n, workdir, make=args.setup)
            if args.setup:
                sc.prepare_cache()
                sc.release()
            print(f"# {n} (finding {sc.finding}): {SPECS[n].summary}")
            for step in sc.setup:
                print(f"# setup: {step}")
            print(sc.command())
            if args.setup and sc.loop is not None:
                print(f"# afterwards: umount {sc.loop.mountpoint} && losetup -d {sc.loop.device}")
        return 0
    if os.geteuid() != 0:
        print("note: not root: /proc/PID/io, /proc/PID/syscall and throttling need root", file=sys.stderr)
    if args.roles:
        return 0 if roles(workdir) else 1
    results = {n: run_one(n, workdir) for n in names}
    print("summary: " + ", ".join(f"{n} {'ok' if ok else 'FAIL'}" for n, ok in results.items()))
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
