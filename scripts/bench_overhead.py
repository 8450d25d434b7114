#!/usr/bin/env python3
"""Measure what iotrace costs a traced process, beside bpftrace, strace and perf trace.

    .venv/bin/python scripts/bench_overhead.py [--seconds 2] [--rounds 3] [--cpu 1]

Run as root from anywhere (paths are relative to the repository). For each workload of
scripts/bin/pread_loop (4 KiB page-cache preads over the first 1 MiB of a file; O_DIRECT
4 KiB random reads over the whole file; getppid() calls, a syscall no tracer here traces,
for what every other syscall on the host pays; writes to fresh anonymous pages, a page fault
each, for what a fault pays) it runs ROUNDS rounds; each round runs the
loop once per mode, the order rotating from round to round:

  untraced   scripts/bin/pread_loop FILE SECONDS [--direct | --other | --faults]
  iotrace    iotrace -o TMPDIR -- scripts/bin/pread_loop FILE SECONDS [...]
             (its syscalls on the raw sys_enter/sys_exit pair, as for -- CMD and --pid)
  iotrace-classic  the same with IOTRACE_FORCE=classic_syscalls: the syscalls on their
             classic per-syscall tracepoints, as for --auto (needs tracefs mounted)
  iotrace-mixed  IOTRACE_FORCE=mixed_syscalls: classic enters, the raw sys_exit
  bpftrace   bpftrace -c 'scripts/bin/pread_loop FILE SECONDS [...]' scripts/bench_overhead.bt
             (only when bpftrace is on PATH; a per-PID pread64 latency histogram)
  floor      bpftrace -c '...' -e 'tracepoint:syscalls:sys_enter_pread64 {} ...sys_exit_pread64 {}'
             (empty programs on the classic pread64 tracepoints: what the kernel's tracepoint
             and BPF dispatch cost before a tracer does any work; also only with bpftrace)
  raw-floor  empty programs on the raw sys_enter/sys_exit tracepoints, where iotrace attaches
             (scripts/bench_floor.bpf.c, loaded by this script: bpftrace 0.17 has no raw
             tracepoints)
  timing-floor  the least a per-call latency histogram takes there: for the loop's process
             only, a start time in task-local storage, then the latency into a log2 slot
             (scripts/bench_floor.bpf.c too)
  classic-floor  empty programs on the classic tracepoints of each syscall iotrace traces
             (scripts/bench_floor.bpf.c), where iotrace-classic attaches: bpftrace's floor,
             on all 26 tracepoints instead of pread64's two
  strace     strace -f -c -o /dev/null -- ...   (when installed)
  perf-trace perf trace -s -o /dev/null -- ...  (when installed)

Every figure comes from the loop's own `ns_per_op`, so tracer start-up and shutdown are not
in it; "p10 ovh" from its 10th percentile of batches' ns/op (pread_loop.c), which other load
moves least. A traced run is paired with the untraced run of its round: the slowdown is the
median of the per-round ratios traced/untraced, the overhead the median of the per-round
differences traced - untraced (ns per pread64, as the loop does one syscall per op).
Before each run the first 1 MiB of the file is read once, so that the page-cache loop
starts on a warm cache (reclaim on small VMs evicts pages idle for a few seconds).

It also reports, for the tracers: peak RSS (ru_maxrss from wait4 on the tracer process,
which covers its shutdown too) and, for iotrace, the attach time: from starting
`iotrace --pid` on a `sleep` to the `Tracing` line on its stderr, the median of a few
repetitions. "Coverage" is how many pread64 calls the tracer counted over how many the
loop made: 100 % says the tracer saw the whole run, so it paid for every call timed.

Which CPU the loop lands on matters: a tracepoint BPF program is attached through a perf
event opened on CPU 0, and when the program returns non-zero (bpftrace 0.17's do) the kernel
also builds and submits the perf record on CPU 0, which makes bpftrace dearer there than on
other CPUs. --cpu N pins the loop (through taskset) so that every mode runs on the same CPU.

Other tracers tax the untraced runs as well (a BPF program on a syscall tracepoint runs for
every process), so before each run the script waits (--quiet-wait) until `bpftool prog show`
lists no tracing programs, and flags the rounds where some were still loaded.

Timings are reported, never asserted: the exit status is 0 unless something could not run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOOP = REPO / "scripts" / "bin" / "pread_loop"
BT_SCRIPT = REPO / "scripts" / "bench_overhead.bt"
FILE_SIZE = 256 << 20
WARM_BYTES = 1 << 20
LOOP_LINE = re.compile(r"ops=(\d+) seconds=([0-9.]+) ns_per_op=([0-9.]+)"
                       r"(?: p10_ns_per_op=([0-9.]+))?")
# iotrace's summary: "syscall read (file): 643072 ops, ..." (pread64 is counted as a read).
IOTRACE_READS = re.compile(r"syscall read \(file\): (\d+) ops")
# bpftrace's histogram rows: "[512, 1K)   549363 |@@@@...|"
BT_ROW = re.compile(r"^\[[^\]\)\n]*[\])][ \t]+(\d+)[ \t]+\|", re.M)

FLOOR_OBJ = REPO / "scripts" / "bin" / "bench_floor.bpf.o"
WORKLOADS = [("page-cache pread", []), ("O_DIRECT pread", ["--direct"]),
             ("other syscall", ["--other"]), ("page fault", ["--faults"])]
ALL_MODES = ("untraced", "iotrace", "iotrace-classic", "iotrace-mixed", "bpftrace", "floor",
             "raw-floor", "timing-floor", "classic-floor", "strace", "perf-trace")
# iotrace's modes: the IOTRACE_FORCE each runs with, and the syscall hooks it must report.
IOTRACE_MODES = {"iotrace": ("", "raw"), "iotrace-classic": ("classic_syscalls", "classic"),
                 "iotrace-mixed": ("mixed_syscalls", "mixed")}
# The issue's goals: slowdown of the loop under iotrace, by workload.
SLOWDOWN_GOALS = {"page-cache pread": 1.6, "O_DIRECT pread": 1.03}


class BenchError(Exception):
    pass


@dataclass
class Run:
    ns_per_op: float
    ops: int
    p10_ns: float | None = None  # the loop's 10th percentile of its batches' ns/op
    seen: int | None = None  # pread64 calls the tracer counted
    maxrss_kib: int | None = None  # tracer's peak RSS
    hwm_kib: int | None = None  # tracer's VmHWM, last sample before it stopped
    attach_s: float | None = None  # start of the tracer -> its `Tracing` line
    wait_ns: int | None = None  # the loop's time runnable but not running (schedstat)

    @property
    def rq_wait(self) -> float | None:
        """Share of the loop's run it spent waiting for a CPU."""
        if self.wait_ns is None or not self.ops:
            return None
        return self.wait_ns / (self.ns_per_op * self.ops)

    @property
    def on_cpu(self) -> float | None:
        """ns/op with the loop's waits for a CPU taken out (its sleeps on I/O stay in)."""
        return None if self.wait_ns is None or not self.ops else (
            self.ns_per_op - self.wait_ns / self.ops)
    wall_s: float | None = None  # the whole tracer invocation
    others: int = 0  # tracing BPF programs loaded by someone else around this run


@dataclass
class Cell:
    runs: dict[int, Run] = field(default_factory=dict)  # round -> run


# -- helpers --------------------------------------------------------------------------------------
def fs_type(path: Path) -> str:
    """Filesystem type of the mount holding path (longest mount-point prefix)."""
    best, kind = "", "?"
    real = str(path.resolve())
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            mnt = parts[1].replace("\\040", " ")
            if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, kind = mnt, parts[2]
    return kind


def ensure_built() -> None:
    for target in (LOOP, FLOOR_OBJ):
        if target.exists():
            continue
        print(f"building {target.relative_to(REPO)} ...", file=sys.stderr)
        subprocess.run(["make", str(target.relative_to(REPO))], cwd=REPO, check=True)
        if not target.exists():
            raise BenchError(f"make did not produce {target}")


def ensure_data_file(path: Path) -> None:
    kind = fs_type(path.parent)
    if kind in ("tmpfs", "ramfs"):
        raise BenchError(f"{path.parent} is on {kind}: O_DIRECT needs a disk; pass --file")
    if path.exists() and path.stat().st_size == FILE_SIZE:
        return
    print(f"writing {FILE_SIZE >> 20} MiB to {path} ({kind}) ...", file=sys.stderr)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        for _ in range(FILE_SIZE // (1 << 20)):
            f.write(os.urandom(1 << 20))  # real blocks: no holes, nothing compressible
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def warm(path: Path) -> None:
    with open(path, "rb", buffering=0) as f:
        left = WARM_BYTES
        while left > 0:
            got = f.read(min(left, 1 << 16))
            if not got:
                break
            left -= len(got)


TRACING_TYPES = {"tracepoint", "raw_tracepoint", "raw_tracepoint_writable", "tracing",
                 "kprobe", "perf_event"}


def tracing_programs() -> int | None:
    """How many tracing BPF programs are loaded now (None: cannot tell). Called when this
    script has no tracer running, so any are someone else's and tax every syscall."""
    if not shutil.which("bpftool"):
        return None
    try:
        p = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True,
                           timeout=10)
        return sum(1 for prog in json.loads(p.stdout or "[]")
                   if prog.get("type") in TRACING_TYPES)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def wait_quiet(limit_s: float) -> int:
    """Wait up to limit_s for no foreign tracing programs; return how many are left."""
    deadline = time.monotonic() + limit_s
    while True:
        n = tracing_programs()
        if not n or time.monotonic() >= deadline:
            return n or 0
        time.sleep(0.5)


def find_iotrace(src: Path | None) -> list[str]:
    """The iotrace command: from a source tree (its tracer/ package, BPF objects built with
    `make build`), else the one installed next to this Python, in .venv, or on PATH."""
    if src:
        if not (src / "tracer" / "cli.py").is_file() or not list((src / "tracer" / "bpf").glob("*.o")):
            raise BenchError(f"{src} has no tracer/cli.py or no built tracer/bpf/*.bpf.o "
                             f"(run `make -C {src} build`)")
        # env execs Python in place, so the PID (for VmHWM and wait4) is iotrace's own. -P: the
        # working directory is not put first on sys.path, where `-m` would find the tracer/ of
        # a checkout run from its root before PYTHONPATH's (so --iotrace-src measured the
        # checkout, not DIR, until 30 November 2026).
        return ["env", f"PYTHONPATH={src.resolve()}", sys.executable, "-P", "-m", "tracer.cli"]
    for cand in (Path(sys.prefix) / "bin" / "iotrace", REPO / ".venv" / "bin" / "iotrace"):
        if os.access(cand, os.X_OK):
            return [str(cand)]
    found = shutil.which("iotrace")
    if not found:
        raise BenchError("iotrace not found: run `make venv` (or use .venv/bin/python)")
    return [found]


def vm_hwm_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def loop_schedstat(pid: int) -> tuple[int, int] | None:
    """(ns on CPU, ns runnable but waiting for a CPU) of pid, if it is pread_loop by now."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            if f.read().strip() != LOOP.name:
                return None
        with open(f"/proc/{pid}/schedstat") as f:
            run_ns, wait_ns = f.read().split()[:2]
        return int(run_ns), int(wait_ns)
    except (OSError, ValueError):
        return None


def children(pid: int) -> list[int]:
    kids = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return kids


class Tracer:
    """A process (a tracer, or the bare loop): stdout and stderr drained by threads, stderr
    lines time-stamped, VmHWM sampled, reaped with wait4 for its peak RSS. The loop (the
    process itself, or a child running pread_loop) has its schedstat sampled, for the share
    of its life it spent waiting for a CPU: the noise other load adds to its wall-clock
    ns/op."""

    def __init__(self, argv: list[str], ready_prefix: str | None, is_loop: bool = False,
                 env: dict[str, str] | None = None):
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True, env=env)
        self.ready_prefix = ready_prefix
        self.ready = threading.Event()
        self.ready_at: float | None = None
        self.out: list[str] = []
        self.err: list[str] = []
        self.hwm: int | None = None
        self.maxrss: int | None = None
        self.status: int | None = None
        self.is_loop = is_loop
        self.sched: tuple[int, int] | None = None  # last (run ns, wait ns) of the loop
        self._loop_pid: int | None = None
        self._done = threading.Event()
        self._threads = [threading.Thread(target=self._drain_out, daemon=True),
                         threading.Thread(target=self._drain_err, daemon=True),
                         threading.Thread(target=self._sample, daemon=True)]
        for t in self._threads:
            t.start()

    def _drain_out(self) -> None:
        for line in self.proc.stdout:
            self.out.append(line)

    def _drain_err(self) -> None:
        for line in self.proc.stderr:
            if (self.ready_prefix and not self.ready.is_set()
                    and line.startswith(self.ready_prefix)):
                self.ready_at = time.monotonic()
                self.ready.set()
            self.err.append(line)
        self.ready.set()  # EOF: stop anyone waiting

    def _sample(self) -> None:
        while not self._done.wait(0.05):
            hwm = vm_hwm_kib(self.proc.pid)
            if hwm is not None:
                self.hwm = hwm
            if self._loop_pid is None:
                for pid in [self.proc.pid] if self.is_loop else children(self.proc.pid):
                    if loop_schedstat(pid):
                        self._loop_pid = pid
            if self._loop_pid is not None:
                self.sched = loop_schedstat(self._loop_pid) or self.sched

    @property
    def wait_ns(self) -> int | None:
        return self.sched[1] if self.sched else None

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while True:
            pid, status, ru = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                self.proc.kill()
                pid, status, ru = os.wait4(self.proc.pid, 0)
                self._finish(status, ru)
                raise BenchError(f"{self.proc.args[0]} ran past {timeout:.0f} s; killed")
            time.sleep(0.02)
        self._finish(status, ru)
        return self.status

    def _finish(self, status: int, ru) -> None:
        self._done.set()
        self.proc.returncode = self.status = os.waitstatus_to_exitcode(status)
        self.maxrss = ru.ru_maxrss  # KiB on Linux; max of the process and its reaped children
        for t in self._threads:
            t.join(5)

    @property
    def stdout(self) -> str:
        return "".join(self.out)

    @property
    def stderr(self) -> str:
        return "".join(self.err)


def parse_loop(text: str, what: str, stderr: str = "") -> tuple[int, float, float | None]:
    m = LOOP_LINE.search(text)
    if not m:
        raise BenchError(f"{what}: no `ops=... ns_per_op=...` line in its output\n"
                         f"stdout: {text[-800:]}\nstderr: {stderr[-800:]}")
    return int(m.group(1)), float(m.group(3)), float(m.group(4)) if m.group(4) else None


# -- one run per mode -----------------------------------------------------------------------------
def run_untraced(loop_argv: list[str], timeout: float) -> Run:
    p = Tracer(loop_argv, ready_prefix=None, is_loop=True)
    rc = p.wait(timeout)
    if rc != 0:
        raise BenchError(f"untraced loop exited {rc}: {p.stderr.strip()}")
    ops, ns, p10 = parse_loop(p.stdout, "untraced loop", p.stderr)
    return Run(ns_per_op=ns, ops=ops, wait_ns=p.wait_ns, p10_ns=p10)


def run_iotrace(iotrace: list[str], loop_argv: list[str], timeout: float, keep: bool,
                mode: str = "iotrace") -> Run:
    force, hooks = IOTRACE_MODES[mode]
    outdir = tempfile.mkdtemp(prefix="iotrace-bench-", dir="/var/tmp")
    try:
        tr = Tracer([*iotrace, "-o", outdir, "--", *loop_argv], ready_prefix="Tracing",
                    env={**os.environ, "IOTRACE_FORCE": force})
        rc = tr.wait(timeout)
        wall = time.monotonic() - tr.t0
        if rc != 0:
            raise BenchError(f"iotrace exited {rc}: {tr.stderr.strip()[-800:]}")
        meta = json.loads((Path(outdir) / "meta.json").read_text())
        if meta.get("syscall_hooks", "raw") != hooks:
            raise BenchError(f"{mode}: iotrace hooked its syscalls {meta.get('syscall_hooks')}, "
                             f"not {hooks}: {meta.get('unavailable')}")
        ops, ns, p10 = parse_loop(tr.stdout, "iotrace run", tr.stderr)
        m = IOTRACE_READS.search(tr.stdout)
        return Run(ns_per_op=ns, ops=ops, seen=int(m.group(1)) if m else None, p10_ns=p10,
                   maxrss_kib=tr.maxrss, hwm_kib=tr.hwm,
                   attach_s=(tr.ready_at - tr.t0) if tr.ready_at else None, wall_s=wall,
                   wait_ns=tr.wait_ns)
    finally:
        if keep:
            print(f"kept {outdir}", file=sys.stderr)
        else:
            shutil.rmtree(outdir, ignore_errors=True)


FLOOR_PROGRAM = "tracepoint:syscalls:sys_enter_pread64 {} tracepoint:syscalls:sys_exit_pread64 {}"


def run_command_tracer(argv: list[str], what: str, timeout: float) -> tuple[Run, str]:
    """A tracer that starts the loop itself (bpftrace -c, strace, perf trace, the floors):
    the loop's figures, and the tracer's stdout."""
    tr = Tracer(argv, ready_prefix=None)
    rc = tr.wait(timeout)
    wall = time.monotonic() - tr.t0
    if rc != 0:
        raise BenchError(f"{what} exited {rc}: {tr.stderr.strip()[-800:]}")
    ops, ns, p10 = parse_loop(tr.stdout, f"{what} run", tr.stderr)
    return Run(ns_per_op=ns, ops=ops, p10_ns=p10, maxrss_kib=tr.maxrss, hwm_kib=tr.hwm, wall_s=wall,
               wait_ns=tr.wait_ns), tr.stdout


FLOOR_PROGRAMS = {"raw-floor": ("floor_enter", "floor_exit"),
                  "timing-floor": ("time_enter", "time_exit"),
                  "io-floor": ("io_enter", "io_exit"),  # for scripts/bench_scale.py --floor
                  "classic-floor": ("classic_enter", "classic_exit")}


def floor_main(mode: str, loop_argv: list[str]) -> int:
    """Modes raw-floor, timing-floor and io-floor, run as `bench_overhead.py --floor-run MODE --
    LOOP...`: attaches that pair of scripts/bench_floor.bpf.c, runs the loop (its PID is the
    timing floor's filter), detaches."""
    sys.path.insert(0, str(REPO))
    from tracer.kernel import libbpf as _libbpf
    from tracer.kernel.loader import CLASSIC_SYSCALLS

    obj = _libbpf.BpfObject(str(FLOOR_OBJ))
    for prog in obj.programs():
        prog.autoload = prog.name in FLOOR_PROGRAMS[mode]
    obj.load()
    links = []
    for prog in obj.programs():
        if not prog.autoload:
            continue
        if prog.section != "tp":
            links.append(prog.attach())
            continue
        way = prog.name.removeprefix("classic_")  # enter, exit: the tracepoints iotrace uses
        links += [prog.attach_tracepoint("syscalls", f"sys_{way}_{name}")
                  for w, names in CLASSIC_SYSCALLS.values() if w == way for name in names]
    try:
        loop = subprocess.Popen(loop_argv)
        bss = _libbpf.Map(obj.map_fd(".bss"), 4, 4)
        bss.update((0).to_bytes(4, "little"), loop.pid.to_bytes(4, "little"))
        return loop.wait()
    finally:
        for link in links:
            link.destroy()
        obj.close()


def run_bpftrace(bpftrace: str, loop_argv: list[str], timeout: float, floor: bool = False) -> Run:
    prog = ["-e", FLOOR_PROGRAM] if floor else [str(BT_SCRIPT)]
    run, out = run_command_tracer([bpftrace, "-c", shlex.join(loop_argv), *prog], "bpftrace",
                                  timeout)
    rows = BT_ROW.findall(out)
    run.seen = sum(map(int, rows)) if rows else None
    return run


# -- attach time ----------------------------------------------------------------------------------
def measure_attach(iotrace: list[str], reps: int) -> list[Run]:
    runs = []
    for _ in range(reps):
        target = subprocess.Popen(["sleep", "30"])
        outdir = tempfile.mkdtemp(prefix="iotrace-bench-", dir="/var/tmp")
        try:
            tr = Tracer([*iotrace, "-o", outdir, "--pid", str(target.pid)],
                        ready_prefix="Tracing")
            tr.ready.wait(30)
            hwm = vm_hwm_kib(tr.proc.pid)
            if tr.ready_at is None:
                tr.proc.kill()
                tr.wait(10)
                raise BenchError(f"iotrace --pid never printed `Tracing`: {tr.stderr[-800:]}")
            attach = tr.ready_at - tr.t0
            time.sleep(1.0)  # one snapshot interval while attached
            tr.proc.send_signal(signal.SIGINT)
            rc = tr.wait(30)
            if rc != 0:
                raise BenchError(f"iotrace --pid exited {rc}: {tr.stderr.strip()[-800:]}")
            runs.append(Run(ns_per_op=0.0, ops=0, attach_s=attach, maxrss_kib=tr.maxrss,
                            hwm_kib=tr.hwm or hwm))
        finally:
            target.kill()
            target.wait()
            shutil.rmtree(outdir, ignore_errors=True)
    return runs


# -- report ---------------------------------------------------------------------------------------
def as_dict(run: Run) -> dict:
    return {**vars(run), "rq_wait": run.rq_wait, "on_cpu_ns_per_op": run.on_cpu}


def peak_kib(run: Run) -> int | None:
    """The larger of ru_maxrss (at exit) and the last VmHWM sample (they differ by rounding)."""
    xs = [x for x in (run.maxrss_kib, run.hwm_kib) if x is not None]
    return max(xs) if xs else None


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec: str, none: str = "-") -> str:
    return none if x is None else format(x, spec)


def pct(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x * 100, spec) + "%"


def source_revision(src: Path) -> str:
    """git describe of src, or the commit a `git archive` snapshot recorded in its name."""
    try:
        p = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=src,
                           capture_output=True, text=True, timeout=10)
        if p.returncode == 0 and p.stdout.strip():
            return p.stdout.strip()
    except OSError:
        pass
    return f"the tree in {src}"


def machine() -> dict:
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        rev = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO,
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        rev = ""
    return {"nproc": os.cpu_count(), "cpu": model, "kernel": platform.release(),
            "loadavg": os.getloadavg(), "revision": rev or "?"}


def paired(runs: dict[int, Run], base: dict[int, Run], key) -> tuple[list, list]:
    """Per-round ratios and differences of key(run) against the untraced run of the round."""
    ratios, diffs = [], []
    for r, run in runs.items():
        if r in base and key(run) is not None and key(base[r]) is not None:
            ratios.append(key(run) / key(base[r]))
            diffs.append(key(run) - key(base[r]))
    return ratios, diffs


def report(results: dict, modes: list[str], attach: list[Run], info: dict) -> None:
    print()
    print(f"machine: {info['nproc']} CPUs, {info['cpu']}, kernel {info['kernel']}; "
          f"data file {info['file']} on {info['fs']}")
    print(f"iotrace at {info['revision']} ({info['iotrace']}); "
          f"bpftrace {info['bpftrace_version'] or 'not used'}")
    print(f"loop: {info['seconds']:g} s per run, {info['rounds']} rounds per workload, "
          + ("on any CPU" if info["loop_cpu"] is None else f"on CPU {info['loop_cpu']} only") + "; "
          f"load average before {info['load_before'][0]:.2f}, after {info['load_after'][0]:.2f}")
    print()
    head = (f"{'workload':<17} {'mode':<15} {'median ns/op':>12} {'slowdown':>8} "
            f"{'overhead':>9} {'on-CPU ovh':>10} {'p10 ovh':>8} {'rq wait':>7} {'coverage':>8} "
            f"{'peak RSS':>8} {'wall':>6}")
    units = (f"{'':<17} {'':<15} {'(loop)':>12} {'':>8} {'ns/call':>9} {'ns/call':>10} "
             f"{'ns/call':>8} {'median':>7} {'min':>8} {'MiB':>8} {'s':>6}")
    print(head)
    print(units)
    print("-" * len(head))
    for wl, _ in WORKLOADS:
        base = results[wl]["untraced"].runs
        for mode in modes:
            runs = results[wl][mode].runs
            traced = mode != "untraced"
            ratios, diffs = paired(runs, base, lambda x: x.ns_per_op)
            _, cpu_diffs = paired(runs, base, lambda x: x.on_cpu)
            cov = [x.seen / x.ops for x in runs.values() if x.seen is not None]
            rss = med([peak_kib(x) for x in runs.values()])
            rq = med([x.rq_wait for x in runs.values()])
            _, p10_diffs = paired(runs, base, lambda x: x.p10_ns)
            print(f"{wl:<17} {mode:<15} {fmt(med([x.ns_per_op for x in runs.values()]), '12.1f')} "
                  f"{fmt(med(ratios) if traced else None, '7.2f') + ('x' if traced else ' '):>8} "
                  f"{fmt(med(diffs) if traced else None, '+9.0f'):>9} "
                  f"{fmt(med(cpu_diffs) if traced and cpu_diffs else None, '+10.0f'):>10} "
                  f"{fmt(med(p10_diffs) if traced and p10_diffs else None, '+8.0f'):>8} "
                  f"{pct(rq, '.1f'):>7} {pct(min(cov) if cov else None, '.1f'):>8} "
                  f"{fmt(rss / 1024 if rss else None, '8.1f'):>8} "
                  f"{fmt(med([x.wall_s for x in runs.values()]), '6.2f'):>6}")
    for title, cell in (
            ("ns/op as the loop printed it (rq wait %)",
             lambda x: f"{x.ns_per_op:8.0f} ({pct(x.rq_wait, '.0f')})" + ("*" if x.others else "")),
            ("the loop's p10 of its batches, ns/op", lambda x: fmt(x.p10_ns, "6.0f", "     -"))):
        print()
        print(f"per round, {title}:")
        for wl, _ in WORKLOADS:
            for mode in modes:
                runs = results[wl][mode].runs
                print(f"  {wl:<17} {mode:<15} " + "  ".join(cell(runs[r]) for r in sorted(runs)))
    if any(run.others for per in results.values() for cell in per.values()
           for run in cell.runs.values()):
        print("  * another tracer's BPF programs were loaded around this run: they tax "
              "every syscall, untraced runs too; rerun on a quiet machine")
    print()
    print("slowdown = median over rounds of traced/untraced ns/op of the same round; overhead = "
          "median of traced - untraced ns/op (one pread64 per op);\non-CPU ovh = the same after "
          "taking each run's time runnable-but-not-running (schedstat) out of its ns/op, which "
          "removes waits for a CPU other load took;\np10 ovh = the same with the 10th percentile of "
          "the loop's batches of calls (4096, or 64 O_DIRECT) for ns/op: other load only slows "
          "a batch, so on a loaded machine this is the steadiest figure;\nrq wait = share of "
          "the loop's run spent runnable but not running; coverage = lowest "
          "tracer-counted/loop-counted preads; wall = whole tracer invocation.")
    cmd_attach = [r.attach_s for wl, _ in WORKLOADS for r in results[wl]["iotrace"].runs.values()]
    print()
    if attach:
        a = [r.attach_s for r in attach]
        rss = [peak_kib(r) for r in attach]
        print(f"iotrace --pid attach (start -> `Tracing` on stderr), {len(a)} reps: "
              f"median {med(a):.3f} s (min {min(a):.3f}, max {max(a):.3f}); "
              f"peak RSS median {med(rss) / 1024:.1f} MiB")
    if any(x is not None for x in cmd_attach):
        print(f"iotrace -- CMD start -> `Tracing` (from the runs above): "
              f"median {med(cmd_attach):.3f} s")

    # The goals, read off the medians above (a verdict on this run, not an assertion).
    print()
    print("goals (this run; see the per-round spread before trusting a close call):")
    for wl, _ in WORKLOADS:
        base = results[wl]["untraced"].runs
        ratios, diffs = paired(results[wl]["iotrace"].runs, base, lambda x: x.ns_per_op)
        goal = SLOWDOWN_GOALS.get(wl)
        line = f"  {wl}: iotrace {med(ratios):.2f}x ({med(diffs):+.0f} ns/call)"
        if goal:
            line += f" -> {'met' if med(ratios) <= goal else 'NOT met'} (goal <= {goal:.2f}x)"
        for other in ("iotrace-classic", "iotrace-mixed", "bpftrace", "floor", "raw-floor",
                      "timing-floor", "classic-floor"):
            if other in modes:
                ovh = med(paired(results[wl][other].runs, base, lambda x: x.ns_per_op)[1])
                line += f"; {other} {ovh:+.0f}"
        print(line)
    if "bpftrace" in modes and info["loop_cpu"] in (None, 0):
        print("  (loop " + ("unpinned" if info["loop_cpu"] is None else "on CPU 0")
              + ": bpftrace pays extra on CPU 0, where its perf event is; compare with --cpu 1)")
    if attach:
        a = med([r.attach_s for r in attach])
        rss = med([peak_kib(r) for r in attach]) / 1024
        print(f"  attach: {a:.3f} s -> " + ("met" if a <= 0.5 else "NOT met") + " (goal <= 0.5 s)"
              f"; peak RSS {rss:.0f} MiB -> " + ("met" if rss <= 150 else "NOT met")
              + " (goal <= 150 MiB)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=1.5,
                    help="loop length per run (default 1.5)")
    ap.add_argument("--rounds", type=int, default=3, help="paired rounds per workload (default 3)")
    ap.add_argument("--attach-reps", type=int, default=5,
                    help="repetitions of the iotrace --pid attach measurement (default 5)")
    ap.add_argument("--file", type=Path, default=Path("/var/tmp/iotrace-bench.dat"),
                    help="256 MiB data file on a disk (created if missing; default %(default)s)")
    ap.add_argument("--cpu", type=int, metavar="N",
                    help="run the loop on CPU N only (through taskset), so every mode runs on "
                         "the same CPU; the tracers' own threads stay free to run anywhere")
    ap.add_argument("--modes", default=",".join(ALL_MODES),
                    help="comma-separated modes to run (default: all; those whose tool is not "
                         "installed are skipped with a note): " + ", ".join(ALL_MODES))
    ap.add_argument("--workload", choices=["cached", "direct", "other", "faults", "all"],
                    default="all")
    ap.add_argument("--quiet-wait", type=float, default=30.0, metavar="S",
                    help="before each run, wait up to S s for other tracers' BPF programs to "
                         "go (default 30); runs with them loaded are flagged")
    ap.add_argument("--iotrace-src", type=Path, metavar="DIR",
                    help="run iotrace from this source tree (e.g. a `git archive` snapshot after "
                         "`make -C DIR build`) instead of the installed one")
    ap.add_argument("--json", type=Path, help="also write every measurement here")
    ap.add_argument("--keep", action="store_true", help="keep iotrace's trace directories")
    if argv is None and sys.argv[1:2] == ["--floor-run"]:
        return floor_main(sys.argv[2], sys.argv[4:])  # internal: --floor-run MODE -- LOOP...
    args = ap.parse_args(argv)
    if args.seconds <= 0 or args.rounds < 1 or args.attach_reps < 0:
        ap.error("--seconds must be > 0, --rounds >= 1, --attach-reps >= 0")
    if os.geteuid() != 0:
        print("bench_overhead: run as root (iotrace and bpftrace load BPF programs)",
              file=sys.stderr)
        return 2

    global WORKLOADS
    if args.workload != "all":
        flag = {"cached": [], "direct": ["--direct"], "other": ["--other"],
                "faults": ["--faults"]}[args.workload]
        WORKLOADS = [w for w in WORKLOADS if w[1] == flag]
    wanted = [m for m in args.modes.split(",") if m]
    if set(wanted) - set(ALL_MODES) or not {"untraced", "iotrace"} <= set(wanted):
        ap.error(f"--modes: choose among {', '.join(ALL_MODES)}, untraced and iotrace included")

    try:
        ensure_built()
        ensure_data_file(args.file)
        iotrace = find_iotrace(args.iotrace_src)
        taskset = shutil.which("taskset")
        if args.cpu is not None and not taskset:
            raise BenchError("--cpu needs taskset (util-linux)")
        tools = {"bpftrace": shutil.which("bpftrace"), "floor": shutil.which("bpftrace"),
                 "strace": shutil.which("strace"), "perf-trace": shutil.which("perf")}
        bpftrace = tools["bpftrace"]
        modes = []
        for mode in ALL_MODES:
            if mode not in wanted:
                continue
            if mode in tools and not tools[mode]:
                print(f"{mode}: {mode.split('-')[0]} is not on PATH, skipped", file=sys.stderr)
                continue
            modes.append(mode)
        info = {**machine(), "file": str(args.file), "fs": fs_type(args.file),
                "seconds": args.seconds, "rounds": args.rounds, "modes": modes,
                "iotrace": shlex.join(iotrace), "bpftrace": bpftrace, "loop_cpu": args.cpu}
        if args.iotrace_src:
            info["revision"] = source_revision(args.iotrace_src)
        info["load_before"] = info.pop("loadavg")
        info["bpftrace_version"] = None
        if bpftrace:
            v = subprocess.run([bpftrace, "--version"], capture_output=True, text=True, timeout=30)
            info["bpftrace_version"] = v.stdout.strip().removeprefix("bpftrace ")
        timeout = args.seconds + 120

        results = {wl: {m: Cell() for m in modes} for wl, _ in WORKLOADS}
        for wl, extra in WORKLOADS:
            loop_argv = [str(LOOP), str(args.file), f"{args.seconds:g}", *extra]
            if args.cpu is not None:
                loop_argv = [taskset, "-c", str(args.cpu), *loop_argv]
            for r in range(args.rounds):
                order = modes[r % len(modes):] + modes[:r % len(modes)]
                for mode in order:
                    others = wait_quiet(args.quiet_wait)
                    warm(args.file)
                    if mode == "untraced":
                        run = run_untraced(loop_argv, timeout)
                        others = max(others, tracing_programs() or 0)
                    elif mode in IOTRACE_MODES:
                        run = run_iotrace(iotrace, loop_argv, timeout, args.keep, mode)
                    elif mode in ("bpftrace", "floor"):
                        run = run_bpftrace(bpftrace, loop_argv, timeout, floor=mode == "floor")
                    elif mode in FLOOR_PROGRAMS:
                        run, _ = run_command_tracer([sys.executable, __file__, "--floor-run",
                                                     mode, "--", *loop_argv], mode, timeout)
                    elif mode == "strace":
                        run, _ = run_command_tracer([tools["strace"], "-f", "-c", "-o",
                                                     "/dev/null", "--", *loop_argv], mode, timeout)
                    else:
                        run, _ = run_command_tracer([tools["perf-trace"], "trace", "-s", "-o",
                                                     "/dev/null", "--", *loop_argv], mode, timeout)
                    run.others = others
                    results[wl][mode].runs[r] = run
                    print(f"{wl:<18} round {r + 1}/{args.rounds} {mode:<15} "
                          f"{run.ns_per_op:9.1f} ns/op  ({run.ops} ops)"
                          + (f"  [{others} foreign BPF tracing programs loaded]" if others
                             else ""), file=sys.stderr)

        attach = measure_attach(iotrace, args.attach_reps) if args.attach_reps else []
        info["load_after"] = os.getloadavg()
    except (BenchError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        print(f"bench_overhead: {e}", file=sys.stderr)
        return 1

    report(results, modes, attach, info)
    if args.json:
        dump = {"machine": info,
                "results": {wl: {m: {r: as_dict(run) for r, run in cell.runs.items()}
                                 for m, cell in per.items()} for wl, per in results.items()},
                "attach": [as_dict(r) for r in attach]}
        args.json.write_text(json.dumps(dump, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
