"""One tracing run: load and attach, follow the targets, write one snapshot per interval, stop.

The straight line: check host -> load -> track targets -> attach -> `Tracing` -> loop
(poll events, every interval read the maps into a snapshot for the sinks) -> detach -> last
snapshot -> close sinks -> summary. Everything opened is closed in `finally`, so an error or a
signal keeps what was collected.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gc
import importlib
import os
import re
import signal
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import psutil

from tracer.core import abi
from tracer.core.diagnose import Diagnosis
from tracer.core.redact import Redactor
from tracer.core.roles import ELASTIC_COMM, WORKER_COMM
from tracer.core.selfcost import STATS_SHARE, ProgramCost, SelfCost, TracerMeter
from tracer.core.vocab import READY_PREFIX
from tracer.errors import (
    EXIT_HOST,
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_USAGE,
    TraceFailure,
    drop_output,
)
from tracer.gpu import nvml
from tracer.gpu.idle import add_gpu_evidence
from tracer.kernel.host import tracing_problem, yield_to_job
from tracer.kernel.probes import BadSetting, HostCannotTrace, Probes
from tracer.live.clock import Clock
from tracer.live.files import FileTable
from tracer.live.processes import ProcessTable
from tracer.live.procfs import ProcSampler

if TYPE_CHECKING:
    from tracer.core.model import Snapshot
    from tracer.sinks.csv import CsvSink
    from tracer.sinks.parquet import TraceWriter
    from tracer.sinks.prometheus import PrometheusSink
    from tracer.ui import LinePrinter, LiveView

# Imported while the BPF objects load (a thread), so that they do not delay attaching.
HEAVY_MODULES = ("tracer.live.aggregate", "tracer.sinks.parquet", "tracer.sinks.csv",
                 "tracer.sinks.prometheus", "tracer.ui", "tracer.render.summary")


def _preload() -> threading.Thread:
    def run() -> None:
        for name in HEAVY_MODULES:
            importlib.import_module(name)

    t = threading.Thread(target=run, name="iotrace-preload", daemon=True)
    t.start()
    return t


class NoPandas:
    """Keeps pandas out of the tracer process while it traces. The tracer never uses pandas,
    but pyarrow imports it, where installed, at its first conversion of Python values (the
    first interval's Parquet rows): 46 MiB of resident memory and about 0.1 s of CPU here,
    for nothing. pyarrow goes without it when the import fails, and a later import (after
    remove()) works as usual. Has no effect where pandas is imported already."""

    def find_spec(self, name: str, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("iotrace: not while tracing (tracer/live/session.py NoPandas)",
                                      name=name)
        return None

    def install(self) -> None:
        if "pandas" not in sys.modules and self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def remove(self) -> None:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)


POLL_MS = 100  # ring-buffer wait; bounds how late a signal or an exit is noticed
FINDINGS_EVERY_S = 10.0  # during a run, verdicts over the last window are written this often
FILE_IDLE_INTERVALS = 5  # per-file kernel counters untouched this long are dropped (taken
# with their last counts, so nothing is lost; read again, a file gets a new key)
# A closed terminal or a dropped SSH session sends SIGHUP: it ends the trace as Ctrl-C does.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GPU_ROWS_KEPT = 500_000  # NVML samples kept in memory for the findings' GPU evidence (~1 day, 1 GPU)


@dataclass
class TraceOptions:
    output: Path
    pids: list[int] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    duration_s: float | None = None
    interval_s: float = 1.0
    slow_ms: float = 10.0
    auto: bool = False  # trace PyTorch jobs as they appear (DataLoader workers, torchrun)
    match: str | None = None  # --auto also takes processes whose command line matches this
    prometheus: tuple[str, int] | None = None  # serve /metrics on (host, port)
    tui: bool = False  # the live terminal view (stdout is a terminal and no --no-tui)
    csv: Path | None = None  # per-interval numbers as CSV (dstat --output)
    gpu: str = "auto"  # --gpu auto|off|0,2
    command_output: Path | None = None  # the started command's stdout+stderr go there
    redact_paths: bool = False  # hash names (paths, command words, comms) in every output
    bpf_stats: str = "sampled"  # count BPF programs' runs: sampled|always|off (selfcost.STATS_MODES)
    roll_s: float = 5.0
    argv: list[str] = field(default_factory=lambda: list(sys.argv))


PR_SET_PDEATHSIG = 1


_libc = None  # resolved before forking: a forked child must not import (another thread may
# hold an import lock at the fork)


def _load_libc():
    global _libc
    if _libc is None:
        import ctypes

        _libc = (ctypes, ctypes.CDLL(None, use_errno=True))
    return _libc


def _set_pdeathsig(sig: int) -> None:
    """prctl(PR_SET_PDEATHSIG): the signal this process gets when its parent thread dies."""
    ctypes, libc = _load_libc()
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


class HeldChild:
    """A forked child that stops itself (SIGSTOP) until it is tracked, then execs the command.

    Stopping does no syscall the tracer counts (a pipe handshake would show up as a pipe read
    of the traced command). A failed exec is reported back through a close-on-exec pipe.
    """

    def __init__(self, argv: list[str], output: Path | None = None):
        """`output`: a file for the command's stdout and stderr (the live view owns the
        terminal); None leaves them alone."""
        self.argv = argv
        _load_libc()
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: no Python-level cleanup may run here
            try:
                os.close(err_r)
                # Killed while holding it, iotrace must not leave it stopped for ever: the
                # kernel kills it with its parent (a stopped process takes SIGKILL). Undone by
                # release(), so the command itself runs as if iotrace had not been there.
                _set_pdeathsig(signal.SIGKILL)
                if os.getppid() != parent:  # the parent died before the prctl took effect
                    os._exit(127)
                if output is not None:
                    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                    os.dup2(fd, 1)
                    os.dup2(fd, 2)
                    os.close(fd)
                for sig in STOP_SIGNALS:
                    signal.signal(sig, signal.SIG_DFL)
                # Python ignores these, and an ignored signal stays ignored across exec: the
                # command would get EPIPE instead of dying in `| head`, as it does untraced.
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)
                signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGSTOP)
                _set_pdeathsig(0)  # tracked now: the job outlives iotrace, as any command does
                os.execvp(argv[0], argv)
            except OSError as e:
                os.write(err_w, f"{e.errno}:{e.strerror}".encode())
            finally:
                os._exit(127)
        os.close(err_w)
        _, status = os.waitpid(pid, os.WUNTRACED)
        self.pid, self._err = pid, err_r
        self.status: int | None = None
        if not os.WIFSTOPPED(status):
            self.status = os.waitstatus_to_exitcode(status)
        self.released = False

    def release(self) -> None:
        """Lets the child exec; raises TraceFailure if the exec failed."""
        self.released = True
        os.kill(self.pid, signal.SIGCONT)
        failure = os.read(self._err, 512).decode(errors="replace")
        os.close(self._err)
        if failure:
            self.reap(block=True)
            reason = failure.split(":", 1)[-1]
            raise TraceFailure(f"cannot execute {self.argv[0]!r}: {reason}", EXIT_USAGE)

    def abandon(self) -> None:
        """The trace could not start: the child must not run the command untraced."""
        os.kill(self.pid, signal.SIGKILL)
        self.reap(block=True)

    def reap(self, block: bool = False) -> bool:
        """True once the child has exited (and is reaped)."""
        if self.status is None:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
        return self.status is not None


def _job_of(pid: int) -> int:
    """The training process behind a DataLoader worker's parent: the parent itself, or the
    process that started it when it is a multiprocessing forkserver."""
    try:
        proc = psutil.Process(pid)
        if "multiprocessing.forkserver" in " ".join(proc.cmdline()):
            return proc.ppid()
    except psutil.Error:
        pass
    return pid


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class Session:
    def __init__(self, opts: TraceOptions, out: TextIO, err: TextIO):
        self.opts, self.out, self.err = opts, out, err
        self.clock = Clock()
        self.processes = ProcessTable(self.clock)
        self.redact = Redactor(opts.redact_paths)
        self.files = FileTable(self.redact)
        self.aggregator = None  # made once attached (tracer.live.aggregate imports numpy)
        try:
            self.probes = Probes(slow_ns=int(opts.slow_ms * 1e6), auto_discover=opts.auto)
        except BadSetting as e:
            raise TraceFailure(str(e), EXIT_USAGE) from None
        self.meter: TracerMeter | None = None  # the tracer's own CPU, from when tracing starts
        self.no_pandas = NoPandas()
        self.stats_unavailable: str | None = None  # why BPF programs' costs are not counted
        self._stats_off_at: float | None = None  # --bpf-stats sampled: when to stop counting
        self.match = re.compile(opts.match) if opts.match else None
        self._scanned: set[int] = set()
        # iotrace and the processes it runs under (a wrapper script, sudo, a shell) are never a
        # job to find: their command lines hold iotrace's own --match REGEX.
        self._ours = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
        self.proc = ProcSampler()
        # A command traced from its first instruction has a start-up (imports, set-up) that the
        # verdicts leave out; a job attached to is usually past it.
        self.diagnosis = Diagnosis(page_size=os.sysconf("SC_PAGE_SIZE"),
                                   startup=bool(opts.command))
        self._last_findings_ns = 0
        self.findings: list = []  # the current verdicts (last window), for live sinks
        self.prometheus: PrometheusSink | None = None
        self.view: LiveView | None = None
        self.lines: LinePrinter | None = None
        self.csv: CsvSink | None = None
        self.gpu: nvml.GpuMonitor | None = None
        self.gpu_note: str | None = None  # why GPU sampling is off, when it is
        self.gpu_rows: deque[dict] = deque(maxlen=GPU_ROWS_KEPT)
        self.gpu_idle: list[dict] = []
        self.writer: TraceWriter | None = None
        self.child: HeldChild | None = None
        self.stop_reason: str | None = None
        self._forget_next: set[int] = set()
        self._finishing = False
        self.final_findings: list = []
        self.command_log: Path | None = None
        self.write_error: OSError | None = None  # the write that failed (a full disk)
        self.stdout_gone = False  # its reader closed stdout (a pipe): nothing more goes there

    # -- start ------------------------------------------------------------------------------------
    def start(self) -> None:
        problem = tracing_problem()
        if problem:
            raise TraceFailure(problem, EXIT_HOST)
        self.no_pandas.install()
        preload = _preload()
        start_ns = self.clock.now_ns()
        try:
            self.probes.load()
        except HostCannotTrace as e:
            raise TraceFailure(str(e), EXIT_HOST) from None
        if self.opts.bpf_stats == "off":
            self.stats_unavailable = "not counted (--bpf-stats off)"
        else:
            self.stats_unavailable = self.probes.enable_stats()
            if self.opts.bpf_stats == "sampled":
                self.probes.pause_stats()  # it could be turned on: the loop samples from here
        self.probes.open_events(self.on_event)
        if self.opts.command:
            self.command_log = self.opts.command_output or (
                self.opts.output / "command.log" if self.opts.tui else None)
            self.child = HeldChild(self.opts.command, self.command_log)
            self.processes.add_started(self.child.pid, os.getpid(), self.opts.command)
            self.probes.track(self.child.pid)
        for pid in self._targets(self.opts.pids):
            self.add_target(pid)
        if self.opts.auto:
            self.discover()
        try:
            self.probes.attach()
        except HostCannotTrace as e:
            raise TraceFailure(str(e), EXIT_HOST) from None
        self._check_targets_alive()
        try:
            source, self.gpu_note = nvml.open_source(self.opts.gpu)
        except nvml.GpuUnavailable as e:
            raise TraceFailure(str(e), EXIT_HOST) from None
        if source is not None:
            self.gpu = nvml.GpuMonitor(source)
        if self.opts.prometheus:
            from tracer.sinks.prometheus import PrometheusSink

            self.prometheus = PrometheusSink()
            try:
                self.prometheus.start(*self.opts.prometheus)
            except OSError as e:
                raise TraceFailure(str(e), EXIT_USAGE) from None
            print(f"Serving metrics on {self.prometheus.url}", file=self.err, flush=True)
        if self.opts.auto:
            what = "PyTorch training jobs as they appear (--auto)"
            if self.processes.by_pid:
                what += f", now PID {' '.join(map(str, sorted(self.processes.by_pid)))}"
        elif self.opts.command:
            what = " ".join(self.redact.argv(self.opts.command))
        else:
            what = "PID " + " ".join(map(str, sorted(p.pid for p in self.processes.by_pid.values()
                                                     if p.is_target)))
        if self.child:
            self.child.release()  # programs are attached: the command is traced from its exec
        print(f"{READY_PREFIX} {what} and its descendants... Hit Ctrl-C to end.",
              file=self.err, flush=True)
        if self.stats_unavailable and self.opts.bpf_stats != "off":
            print(f"iotrace: per-program cost unavailable: {self.stats_unavailable}",
                  file=self.err, flush=True)
        # From here on the tracer gives way to the job (the command, forked above, keeps the
        # normal priority); attaching ran at the normal one, so as not to delay it.
        yield_to_job()
        preload.join()
        from tracer.live.aggregate import Aggregator
        from tracer.sinks.csv import CsvSink
        from tracer.sinks.parquet import TraceWriter
        from tracer.ui import LinePrinter, LiveView

        # The tracer's own CPU from here: what came before is start-up, not the steady cost of
        # tracing.
        self.meter = TracerMeter()
        self.aggregator = Aggregator(self.processes, self.files)
        try:
            self.writer = TraceWriter(self.opts.output, self._meta(start_ns),
                                      roll_s=self.opts.roll_s)
        except OSError as e:
            raise TraceFailure(cannot_write_message(e, self.opts.output, started=False),
                               EXIT_OUTPUT) from None
        self.aggregator.last_ts_ns = self.clock.now_ns()  # the first interval starts now
        self.proc.sample(self.aggregator.last_ts_ns)  # primes the /proc counters
        if self.opts.csv:
            try:
                self.csv = CsvSink(self.opts.csv, interval_s=self.opts.interval_s)
            except OSError as e:
                raise TraceFailure(f"cannot write --csv {self.opts.csv}: {e.strerror}",
                                   EXIT_USAGE) from None
        if self.opts.tui:
            self.view = LiveView(targets=what, interval_s=self.opts.interval_s,
                                 on_quit=lambda: self.request_stop("q"))
            self.view.start()
        else:
            self.lines = LinePrinter(self.out, self.opts.interval_s)
        # Start-up is over: what the imports made lives as long as the process, so the garbage
        # collector's full passes need not walk it again (one took 40 ms).
        gc.freeze()

    def _check_targets_alive(self) -> None:
        """--pid: a target that was a zombie, or exited while the programs attached, left
        nothing to trace; a trace of nothing would end in a verdict from no data."""
        if not self.opts.pids or self.opts.auto:
            return
        targets = [p for p in self.processes.by_pid.values() if p.is_target]
        alive = [p for p in targets if p.alive and not _gone(p.pid)]
        if alive:
            return
        pids = " ".join(map(str, self.opts.pids))
        raise TraceFailure(f"nothing traced: PID {pids} exited before iotrace attached (or is "
                           "a zombie): check the job is running (pgrep -a python)", EXIT_USAGE)

    def _meta(self, start_ns: int) -> dict:
        try:
            boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        except OSError:
            boot_id = None
        return {
            "host": socket.gethostname(), "kernel": os.uname().release, "boot_id": boot_id,
            "command_line": self.redact.argv(self.opts.argv),
            "targets": {"pids": self.opts.pids, "command": self.redact.argv(self.opts.command)},
            "redacted_paths": self.redact.enabled,
            "clocks": self.clock.meta(), "start_ns": start_ns, "stop_ns": None,
            "interval_s": self.opts.interval_s, "hooks": self.probes.features,
            "unavailable": [k for k, v in self.probes.features.items() if v == "missing"]
            + ([self.gpu_note] if self.gpu_note else []),
            "events_lost": 0, "self_cost": None,
        }

    def _targets(self, pids: list[int]) -> list[int]:
        """The processes to trace as `main` for the PIDs given (`$(pgrep -f train.py)` lists a
        trainer and its DataLoader workers alike): a PID below another given one is traced as
        its descendant, with the role its name and place give it; a DataLoader worker given
        without its parent stands for its training process, which is traced instead."""
        given, out = set(pids), []
        for pid in pids:
            try:
                proc = psutil.Process(pid)
                if given & {p.pid for p in proc.parents()}:
                    continue
                if proc.name() == WORKER_COMM:
                    parent = _job_of(proc.ppid())
                    print(f"iotrace: PID {pid} is a DataLoader worker: tracing its training "
                          f"process, PID {parent}, and its descendants", file=self.err,
                          flush=True)
                    pid = parent
            except psutil.Error:
                pass  # gone: add_target says so
            if pid not in out:
                out.append(pid)
        return out

    def add_target(self, pid: int) -> None:
        """Traces a process and its descendants: the kernel follows its forks from now on, the
        ones alive now are found in /proc and marked in the kernel as if it had seen them
        start (a DataLoader worker as a worker)."""
        if self.processes.get(pid) is not None:
            return
        try:
            proc = psutil.Process(pid)
            # first: its forks from now on are followed in the kernel
            self.probes.track(pid, worker=proc.name() == WORKER_COMM)
            self.processes.add_existing(pid, is_target=True)
            for kid in proc.children(recursive=True):
                if kid.pid != os.getpid() and self.processes.get(kid.pid) is None:
                    self.probes.track(kid.pid, pid, worker=kid.name() == WORKER_COMM)
                    self.processes.add_existing(kid.pid, is_target=False)
        except psutil.NoSuchProcess:
            self.processes.mark_gone(pid)

    def discover(self) -> None:
        """--auto: finds training jobs in /proc (DataLoader workers' parents, torchrun agents,
        --match); the kernel reports new ones as they name their workers (EVENT_DISCOVER)."""
        me = os.getpid()
        for p in psutil.process_iter(["pid", "ppid", "name", "cmdline"]):
            pid = p.info["pid"]
            if pid == me or pid in self._scanned or pid in self._ours:
                continue
            self._scanned.add(pid)
            if p.info["name"] == WORKER_COMM:
                self._discovered(p.info["ppid"])
            elif p.info["name"] == ELASTIC_COMM or self._matches(p.info["cmdline"]):
                self._discovered(pid)

    def _matches(self, cmdline: list[str] | None) -> bool:
        return bool(self.match and self.match.search(" ".join(cmdline or ())))

    def _discovered(self, pid: int) -> None:
        """A training process was found: trace it (or the process behind its forkserver)."""
        pid = _job_of(pid)
        if pid in (0, 1) or pid in self._ours:  # tracing an ancestor would trace iotrace too
            return
        owners = self.processes.owners()
        if pid in owners or not psutil.pid_exists(pid):
            return  # already traced (a target or a descendant of one), or gone
        self.add_target(pid)
        proc = self.processes.get(pid)
        print(f"Tracing PID {pid} ({self.redact.comm(proc.comm) if proc else '?'})"
              " and its descendants", file=self.err, flush=True)

    def on_event(self, raw: bytes) -> None:
        """One ring-buffer record: process life cycle, a file's path, or a slow operation."""
        kind = abi.event_kind(raw)
        if kind == abi.EVENT_DISCOVER:
            ev = abi.decode_proc_event(raw)
            self._discovered(ev.pid if ev.comm == ELASTIC_COMM else ev.ppid)
        elif kind == abi.EVENT_FILE:
            self.files.on_event(abi.decode_file_event(raw))
        elif kind == abi.EVENT_SLOW:
            ev = abi.decode_slow_event(raw)
            self.aggregator.on_slow(ev, self.clock.to_utc_ns(ev.ts_ns))
        else:
            self.processes.on_event(abi.decode_proc_event(raw))

    # -- run ----------------------------------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        if not self.stop_reason:
            self.stop_reason = reason

    def loop(self) -> None:
        started = time.monotonic()
        next_tick = started + self.opts.interval_s
        self._sample_stats(started)
        while not self.stop_reason:
            now = time.monotonic()
            until = min(next_tick, self._stats_off_at or next_tick)
            wait_ms = int(max(0.0, min(until - now, POLL_MS / 1000)) * 1000)
            self.probes.poll_events(wait_ms)
            now = time.monotonic()
            if self._stats_off_at is not None and now >= self._stats_off_at:
                self.probes.pause_stats()
                self._stats_off_at = None
            if self.opts.duration_s is not None and now - started >= self.opts.duration_s:
                self.request_stop("duration")
            if now >= next_tick:
                self.tick()
                next_tick = max(next_tick + self.opts.interval_s, now)
            if self.child and self.child.reap():
                self.processes.mark_gone(self.child.pid)
            if not self.opts.auto and not self.processes.alive():
                self.request_stop("targets exited")

    def tick(self) -> Snapshot:
        """One interval: map deltas -> snapshot -> sinks; forget processes gone a while."""
        if self.match:
            self.discover()
        for proc in self.processes.alive():
            if _gone(proc.pid):  # died before it was tracked, or its exit event was lost
                self.processes.mark_gone(proc.pid)
        epoch = self.probes.next_epoch()
        from tracer.live.aggregate import Reading

        file_stats = self.probes.read_file_stats()
        # Per-file counters idle for FILE_IDLE_INTERVALS are deleted (a job reading millions of
        # files keeps the kernel map small, and every interval reads all of it): taken out of
        # the map with their values, which join this reading, so what came since is counted.
        quiet = self.aggregator.idle_file_keys(FILE_IDLE_INTERVALS)
        if quiet:
            file_stats.update(self.probes.take_file_stats(quiet))
        hists, threads = self.probes.read_hists(), self.probes.read_threads()
        # After the per-file counters: a syscall that returned since they were read is seen
        # done here and counted in them at the next reading (the diagnosis allows for both).
        mains = [p.pid for p in self.processes.alive() if p.is_target]
        reading = Reading(hists, file_stats, epoch, threads, time.monotonic_ns(),
                          self.probes.syscalls_in_flight(mains))
        # A process forks before it does I/O, so its FORK record is in the ring buffer before
        # its counters are in the maps just read: take the records now, the rows get its name.
        self.probes.poll_events(0)
        now_ns = self.clock.to_utc_ns(reading.monotonic_ns)
        snap = self.aggregator.interval(reading, now_ns)
        devices, system = self.proc.sample(now_ns)
        snap = dataclasses.replace(snap, devices=devices, system=system)
        assert self.writer is not None
        for table in ("latency", "files", "events", "threads", "devices"):
            self.writer.add(table, getattr(snap, table))
        self.writer.add("system", [snap.system] if snap.system else [])
        owners = self.processes.owners()  # pid -> its main process, for the loop and the GPUs
        loop_rows = self.diagnosis.add(
            snap.ts_ns, snap.interval_ns, snap.threads, snap.files, snap.latency, snap.devices,
            owners)
        self.writer.add("loop", loop_rows)
        self.findings = self.diagnosis.findings(self.diagnosis.thresholds.window_s)
        if not self._last_findings_ns:  # the first verdicts once FINDINGS_EVERY_S have passed,
            self._last_findings_ns = snap.ts_ns - snap.interval_ns  # not after one interval
        if not self._finishing and snap.ts_ns - self._last_findings_ns >= FINDINGS_EVERY_S * 1e9:
            self._last_findings_ns = snap.ts_ns
            self.writer.add("findings", [f.row(snap.ts_ns) for f in self.findings])
        idle: list[dict] = []
        if self.gpu:
            gpu_rows, idle = self.gpu.interval(snap.ts_ns, loop_rows, owners)
            snap = dataclasses.replace(snap, gpu=gpu_rows)
            self.writer.add("gpu", gpu_rows)
            self.writer.add("gpu_idle", idle)
            self.gpu_rows.extend(gpu_rows)
            self.gpu_idle.extend(idle)
            for note in self.gpu.take_notes():
                if not self.view:
                    print(f"iotrace: {note}", file=self.err, flush=True)
        cost = self.self_cost()
        self._sample_stats(time.monotonic())
        snap = dataclasses.replace(snap, cost=cost)
        lost = cost.events_lost
        if self.prometheus:
            self.prometheus.update(snap, loop_rows, self.findings, gpu_idle_rows=idle,
                                   events_lost=lost)
        if self.view:
            self.view.update(snap, loop_rows, self.findings, events_lost=lost)
        elif self.lines and not self._finishing:
            try:
                self.lines.write(snap, loop_rows, self.findings)
            except BrokenPipeError:  # `iotrace ... | head`: the lines stop, not the trace
                self.lines = None
                self.stdout_gone = True
                drop_output(self.out)
            except OSError:  # the terminal is gone (an SSH drop without SIGHUP): stop cleanly
                self.lines = None
                self.request_stop("stdout closed")
        if self.csv:
            self.csv.write(snap, loop_rows)
        if quiet:  # deleted from the kernel map above
            self.aggregator.forget(quiet)
        if self._forget_next:
            gone = self._forget_next
            stale = [k for k in reading.hists if abi.HIST_KEY.unpack_from(k)[0] in gone]
            stale_files = [k for k in reading.file_stats
                           if abi.FILE_KEY.unpack_from(k)[0] in gone]
            stale_tids = [tid for tid, raw in reading.threads.items()
                          if abi.TGID.unpack_from(raw)[0] in gone]
            self.probes.delete_hists(stale)
            self.probes.delete_file_stats(stale_files)
            self.probes.delete_threads(stale_tids)
            self.aggregator.forget(stale + stale_files, stale_tids)
            self.probes.forget_pidfds(gone)
            for pid in gone:
                self.processes.by_pid[pid].forgotten = True
        self._forget_next = {p.pid for p in self.processes.by_pid.values()
                             if not p.alive and not p.forgotten}
        if self.writer.roll_due():
            # Every segment roll carries the processes seen or changed since the last: a
            # killed tracer's trace still names every process its other rows mention.
            self._write_processes()
            try:
                self.writer.maybe_roll()
            except OSError as e:
                self._cannot_write(e)
        return snap

    def _cannot_write(self, error: OSError) -> None:
        """A segment could not be written (a full disk): stop tracing, write nothing more, keep
        what is written; run_trace says which file and exits EXIT_OUTPUT."""
        if self.write_error is None:
            self.write_error = error
        assert self.writer is not None
        self.writer.give_up()
        self.request_stop(f"cannot write the trace: {error.strerror}")

    def _sample_stats(self, now: float) -> None:
        """--bpf-stats sampled: an interval starts; the kernel counts the programs' runs for
        its first STATS_SHARE (the loop turns the counting off again)."""
        if self.opts.bpf_stats != "sampled" or self.stats_unavailable is not None:
            return
        self.probes.enable_stats()
        self._stats_off_at = now + STATS_SHARE * self.opts.interval_s

    def self_cost(self, final: bool = False) -> SelfCost:
        """iotrace's own cost so far, where a new interval starts for the CPU share; `final`: the
        last reading, where none starts and the requests left in flight that ended unseen are
        counted too."""
        assert self.meter is not None
        programs = ()
        if self.stats_unavailable is None:
            programs = tuple(ProgramCost(obj, name, sec, st.run_cnt, st.run_time_ns,
                                         st.recursion_misses)
                             for obj, name, sec, st in self.probes.program_stats())
        unseen = self.probes.block_unseen(leftovers=final)
        return SelfCost(programs, self.probes.events_lost(), self.probes.map_full_drops(),
                        self.meter.read(not final), self.stats_unavailable,
                        self.probes.stats_before, dict(self.probes.max_entries),
                        self.probes.stats_seconds, self.opts.bpf_stats, *unseen,
                        *self.files.lost_paths())

    def _write_processes(self) -> None:
        """A `processes` row for each process new or changed (name, exit, worker numbering)
        since its last row: readers take the last row per pid."""
        assert self.writer is not None
        self.processes.number_workers()
        rows = []
        for proc in self.processes.by_pid.values():
            if proc.written is not None and proc.written["exit"] is not None:
                continue  # its final row is in
            self.processes.fill_cmdline(proc)
            row = proc.row()
            row["cmdline"] = self.redact.cmdline(row["cmdline"])
            row["comm"] = self.redact.comm(row["comm"])
            if row != proc.written:
                rows.append(row)
                proc.written = row
        self.writer.add("processes", rows)

    # -- stop -----------------------------------------------------------------------------------------
    def finish(self) -> str:
        """Takes the last snapshot, closes the trace; returns the summary text. The programs
        stay attached until close() (detaching waits for the kernel: about a second), so the
        summary comes first; what completes after this last read is not in the trace, as
        with any stop."""
        self.probes.poll_events(0)
        self._finishing = True
        findings = []
        self.final_findings = findings
        cost = None
        if self.writer:
            snap = self.tick()
            self._write_processes()
            findings = self.diagnosis.findings()
            if self.gpu:
                last = self.gpu.finish()
                self.writer.add("gpu_idle", last)
                self.gpu_idle.extend(last)
                add_gpu_evidence(findings, self.gpu_idle, list(self.gpu_rows))
                self.writer.update_meta(gpu=self.gpu.meta())
            self.writer.add("findings", [f.row(snap.ts_ns) for f in findings])
            self.final_findings = findings
            cost = self.self_cost(final=True)
            try:
                # While running, a process got a row each time it changed; closed, it has one.
                self.writer.compact("processes", ("pid", "first_seen"))
                self.writer.close(stop_ns=self.clock.now_ns(), stop_reason=self.stop_reason,
                                  events_lost=cost.events_lost, self_cost=cost.meta())
            except OSError as e:
                self._cannot_write(e)
                self.writer.close(stop_ns=self.clock.now_ns(), stop_reason=self.stop_reason,
                                  events_lost=cost.events_lost, self_cost=cost.meta())
        lost = cost.events_lost if cost else self.probes.events_lost()
        n = len(self.processes.by_pid)
        header = (f"Traced {n} process{'es' if n != 1 else ''} ({self.stop_reason or 'stopped'}); "
                  f"{lost} events lost.")
        if self.gpu_note:
            header += f"\n{self.gpu_note}."
        from tracer.render.summary import render_summary

        return render_summary(self.aggregator.totals, self.processes, header,
                              self.aggregator.file_totals, self.files, findings, cost,
                              startup=self.diagnosis.startup_lines())

    def exit_code(self) -> int:
        """What iotrace exits with after a trace: the started command's status, as time(1) and
        strace give it (a code as is, 128 + the signal that killed it), so that a script sees
        the job fail; 0 when tracing PIDs or --auto, or when the command still runs (--duration)."""
        if not self.child or not self.child.reap():
            return EXIT_OK
        status = self.child.status
        return status if status >= 0 else 128 - status

    def close_view(self) -> None:
        """Leaves the live view's screen so that what follows goes to normal scrollback."""
        if self.view:
            self.view.close()

    def close(self) -> None:
        self.close_view()
        if self.gpu:
            self.gpu.close()
        if self.csv:
            self.csv.close()
        if self.prometheus:
            self.prometheus.stop()
        if self.writer and not self.writer.closed:
            self.writer.close(stop_ns=self.clock.now_ns(), stop_reason=self.stop_reason)
        self.probes.close()
        self.no_pandas.remove()
        if self.child and not self.child.released:
            self.child.abandon()


def cannot_write_message(error: OSError, output: Path, started: bool = True) -> str:
    """One line for a trace file that could not be written: which, why, what to do."""
    full = error.errno in (errno.ENOSPC, errno.EDQUOT)
    advice = "free space or choose another -o DIR" if full else "choose another -o DIR"
    where = f" writing {error.filename}" if error.filename else f" writing into {output}"
    text = f"{error.strerror or error}{where}: {advice}"
    if started:
        text += f"; tracing stopped, what was written before is kept in {output}"
    return text


def _say(text: str, out: TextIO) -> None:
    """Prints the end of a run. The trace is closed by now: a terminal that hung up (SIGHUP) or
    a reader that went away must not turn a good trace into an error, so what cannot be printed
    is dropped, and stdout and stderr go to /dev/null from then on (else the interpreter's last
    flush fails again at exit)."""
    try:
        print(text, file=out, flush=True)
    except (OSError, ValueError):
        drop_output(sys.stdout, sys.stderr)


def run_trace(opts: TraceOptions, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Runs a whole trace; returns the exit code. Expected failures raise TraceFailure."""
    session = Session(opts, out, err)

    def on_signal(signum, _frame):
        session.request_stop(signal.Signals(signum).name)

    old = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    try:
        session.start()
        session.loop()
        summary = session.finish()
        session.close_view()
        text = summary
        if session.command_log:
            text += f"\nThe command's output is in {session.command_log}"
        if session.write_error is not None:
            _say(text, out)
            _say(f"iotrace: error: {cannot_write_message(session.write_error, opts.output)}", err)
            return EXIT_OUTPUT
        try:
            print(f"{text}\n\nTrace written to {opts.output}", file=out, flush=True)
        except BrokenPipeError:  # the reader left; the trace is complete all the same
            session.stdout_gone = True
            drop_output(out)
        except (OSError, ValueError):  # a terminal that hung up: nothing to print to
            drop_output(sys.stdout, sys.stderr)
        if session.stdout_gone:  # where the trace is, where someone may still read it
            _say(f"Trace written to {opts.output}", err)
        return session.exit_code()
    finally:
        session.close()
        for s, h in old.items():
            signal.signal(s, h)
