"""One tracing run: load and attach, follow the targets, write one interval at a time, stop.

The straight line: check host -> load -> track targets (tracer.live.child, .discovery) ->
attach -> `Tracing` -> loop (poll events; every interval: read the maps, /proc, the GPUs ->
the pure step (tracer.live.step) makes one `Interval` -> every sink writes it) -> the last
interval through the same path -> close the sinks -> summary -> detach. Everything opened is
closed in `finally`, so an error or a signal keeps what was collected.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from tracer.core import abi
from tracer.core.diagnosis import Diagnosis
from tracer.core.diagnosis.words import NOTHING_JUDGED
from tracer.core.redact import Redactor
from tracer.core.roles import ELASTIC_COMM
from tracer.core.vocab import LOOP_ROLES, READY_PREFIX
from tracer.errors import (
    EXIT_HOST,
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_USAGE,
    TraceFailure,
    drop_output,
)
from tracer.gpu import nvml
from tracer.kernel.host import tracing_problem, yield_to_job
from tracer.kernel.libbpf import release_free_memory
from tracer.kernel.loader import BadSetting, HostCannotTrace
from tracer.kernel.probes import Probes
from tracer.live.child import STOP_SIGNALS, HeldChild
from tracer.live.clock import Clock
from tracer.live.cost import CostReader
from tracer.live.cuda import LaunchSampler
from tracer.live.discovery import Discovery, gone
from tracer.live.files import FileTable
from tracer.live.forget import Forgetter
from tracer.live.fuse import FuseMounts
from tracer.live.memory import MemorySampler
from tracer.live.options import TraceOptions
from tracer.live.peers import sample_peers
from tracer.live.processes import ProcessTable
from tracer.live.procfs import ProcSampler
from tracer.live.rereads import rows_dtype
from tracer.live.sinks import cannot_write_message, open_sinks, serve_metrics
from tracer.live.stacks import PythonStacks

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tracer.core.interval import Interval
    from tracer.core.model import FileLookup
    from tracer.live.aggregate import Reading
    from tracer.live.step import Step
    from tracer.render.first_screen import TraceLines
    from tracer.sinks import Sink
    from tracer.sinks.parquet import ParquetSink

# Imported while the BPF objects load (a thread), so that they do not delay attaching: those
# every run needs, and those of the outputs asked for (the others are never imported: the live
# view's rich and the Prometheus client take memory a run without them need not hold).
HEAVY_MODULES = ("tracer.live.aggregate", "tracer.sinks.parquet", "tracer.ui.line",
                 "tracer.render.summary")


def heavy_modules(opts: TraceOptions) -> list[str]:
    """The modules this run imports while the BPF objects load."""
    return [*HEAVY_MODULES, *(["tracer.sinks.csv"] if opts.csv else []),
            *(["tracer.sinks.prometheus"] if opts.prometheus or opts.otlp else []),
            *(["tracer.sinks.otlp"] if opts.otlp else []),
            *(["tracer.ui.live"] if opts.tui else [])]


def _preload(names: list[str]) -> threading.Thread:
    def run() -> None:
        for name in names:
            importlib.import_module(name)

    t = threading.Thread(target=run, name="iotrace-preload", daemon=True)
    t.start()
    return t


class NoPandas:
    """Keeps pandas out of the tracer process while it traces and prints its summary. The
    tracer never uses pandas, but pyarrow imports it, where installed, at its first conversion
    of Python values (the first interval's Parquet rows): 46 MiB of resident memory and about
    0.1 s of CPU here, for nothing. pyarrow goes without it when the import fails, and a later
    import (after remove()) works as usual. Has no effect where pandas is imported already."""

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


class Session:
    """start() -> loop() (each interval: read -> step -> every sink) -> finish() -> close()."""

    def __init__(self, opts: TraceOptions, out: TextIO, err: TextIO):
        # A target that exits before the programs attach is start()'s to refuse ("nothing traced")
        opts.validate(exited=False)
        self.opts, self.out, self.err = opts, out, err
        self.clock = Clock()
        self.processes = ProcessTable(self.clock)
        self.redact = Redactor(opts.redact_paths)
        self.files = FileTable(self.redact)
        try:
            self.probes = Probes(slow_ns=int(opts.slow_ms * 1e6), auto_discover=opts.auto)
        except BadSetting as e:
            raise TraceFailure(str(e), EXIT_USAGE) from None
        # Kernel launches are counted in a slice of each interval (LaunchSampler), or all of
        # them when asked (IOTRACE_CUDA_LAUNCHES=1): a uprobe per launch costs a launch-bound
        # loop more than iotrace may (docs/diagnosis.md, host_bound)
        self.probes.cuda_launches = os.environ.get("IOTRACE_CUDA_LAUNCHES") == "1"
        self.probes.cuda_note = lambda text: print(f"iotrace: {text}", file=err, flush=True)
        self.launches = LaunchSampler(opts.interval_s)  # kernel launches, sampled
        self.no_pandas = NoPandas()
        # /metrics shows the requests that ended unseen as they are found (its block counts plus
        # those are exact at every scrape); without it they matter at the end only
        self.cost = CostReader(self.probes, opts.bpf_stats, opts.interval_s,
                               unseen_each_interval=opts.prometheus is not None)
        self.discovery = Discovery(self.processes, self.probes, self.redact, err, opts.match)
        self.proc = ProcSampler()
        self.memory = MemorySampler()
        self.fuse = FuseMounts()
        self.gpu: nvml.GpuMonitor | None = None
        self.gpu_note: str | None = None  # why GPU sampling is off, when it is
        self.stacks = PythonStacks(self.clock.now_ns, err, self.redact)  # py-spy's samples
        self.step: Step | None = None  # made once attached (tracer.live.aggregate imports numpy)
        self.sinks: list[Sink] = []  # every interval goes to each, in this order
        self.trace: ParquetSink | None = None  # the trace directory (among the sinks)
        self.child: HeldChild | None = None
        self.stop_reason: str | None = None
        self.forget = Forgetter(self.probes, self.processes)
        self.final_findings: list = []
        self.command_log: Path | None = None
        self.write_error: OSError | None = None  # the write that failed (a full disk)
        self.stdout_gone = False  # its reader closed stdout (a pipe): nothing more goes there
        self.drain_asked = False  # the kernel asks for the per-file buffer now (EVENT_DRAIN)

    # -- start ------------------------------------------------------------------------------------
    def start(self) -> None:
        problem = tracing_problem()
        if problem:
            raise TraceFailure(problem, EXIT_HOST)
        self.no_pandas.install()
        preload = _preload(heavy_modules(self.opts))
        start_ns = self.clock.now_ns()
        try:
            self.probes.load()
        except HostCannotTrace as e:
            raise TraceFailure(str(e), EXIT_HOST) from None
        self.cost.start_stats()
        self.probes.ring.open(self.on_event)
        if self.opts.command:
            self.command_log = self.opts.command_output or (
                self.opts.output / "command.log" if self.opts.tui else None)
            self.child = HeldChild(self.opts.command, self.command_log)
            self.processes.add_started(self.child.pid, os.getpid(), self.opts.command)
            self.probes.loader.track(self.child.pid)
        for pid in self.discovery.targets(self.opts.pids):
            self.discovery.add_target(pid)
        if self.opts.auto:
            self.discovery.scan()
        try:
            self.probes.loader.attach()
        except HostCannotTrace as e:
            raise TraceFailure(str(e), EXIT_HOST) from None
        self._check_targets_alive()
        self._open_gpu()
        self.stacks.open()
        if self.opts.prometheus:
            self._serve_metrics()
        what = self._what()
        if self.child:
            self.child.release()  # programs are attached: the command is traced from its exec
        print(f"{READY_PREFIX} {what} and its descendants... Hit Ctrl-C to end.",
              file=self.err, flush=True)
        if self.cost.unavailable and self.opts.bpf_stats != "off":
            print(f"iotrace: per-program cost unavailable: {self.cost.unavailable}",
                  file=self.err, flush=True)
        # From here on the tracer gives way to the job (the command, forked above, keeps the
        # normal priority); attaching ran at the normal one, so as not to delay it.
        yield_to_job()
        preload.join()
        self._open_sinks(start_ns, what)
        # Start-up is over: what the imports made lives as long as the process, so the garbage
        # collector's full passes need not walk it again (one took 40 ms).
        gc.freeze()

    def _open_gpu(self) -> None:
        try:
            source, self.gpu_note = nvml.open_source(self.opts.gpu)
        except nvml.GpuUnavailable as e:
            raise TraceFailure(str(e), EXIT_HOST) from None
        if source is not None:
            self.gpu = nvml.GpuMonitor(source)

    def _serve_metrics(self) -> None:
        self.sinks.append(serve_metrics(self.opts.prometheus, self.err))

    def _what(self) -> str:
        """What is traced, as the first line and the live view's header say it."""
        if self.opts.auto:
            what = "PyTorch training jobs as they appear (--auto)"
            if self.processes.by_pid:
                what += f", now PID {' '.join(map(str, sorted(self.processes.by_pid)))}"
            return what
        if self.opts.command:
            return " ".join(self.redact.argv(self.opts.command))
        return "PID " + " ".join(map(str, sorted(p.pid for p in self.processes.by_pid.values()
                                                 if p.is_target)))

    def _open_sinks(self, start_ns: int, what: str) -> None:
        """The step, the trace directory and the other sinks; the first interval starts here."""
        from tracer.live.aggregate import Aggregator
        from tracer.live.cgroups import CgroupNames
        from tracer.live.step import Step

        self.cost.start_meter()
        aggregator = Aggregator(self.processes, self.files, CgroupNames())
        # the kernel marks the files it folds in this bitmap (slots.bpf.h, fold_on_close)
        aggregator.rereads.bitmap = self.probes.maps.read_files
        aggregator.faults_seen = self.probes.loader.features.get("page_fault_user",
                                                                 "missing") != "missing"
        # A command traced from its first instruction has a start-up (imports, set-up) that the
        # verdicts leave out; a job attached to is usually past it.
        diagnosis = Diagnosis(startup=bool(self.opts.command))
        self.step = Step(aggregator, diagnosis, self.gpu)
        self.trace = open_sinks(self.opts, self.sinks, meta=self._meta(start_ns), what=what,
                                out=self.out, err=self.err, stop_meta=self._stop_meta,
                                cannot_write=self._cannot_write, stdout_failed=self._stdout_failed,
                                on_quit=lambda: self.request_stop("q"))
        aggregator.last_ts_ns = self.clock.now_ns()  # the first interval starts now
        self.proc.sample(aggregator.last_ts_ns)  # primes the /proc counters

    def _check_targets_alive(self) -> None:
        """--pid: a target that was a zombie, or exited while the programs attached, left
        nothing to trace; a trace of nothing would end in a verdict from no data."""
        if not self.opts.pids or self.opts.auto:
            return
        targets = [p for p in self.processes.by_pid.values() if p.is_target]
        alive = [p for p in targets if p.alive and not gone(p.pid)]
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
            "interval_s": self.opts.interval_s, "hooks": self.probes.loader.features,
            "syscall_hooks": self.probes.loader.syscall_hooks,
            "unavailable": [k for k, v in self.probes.loader.features.items() if v == "missing"]
            + [n for n in (self.probes.loader.syscall_hooks_note, self.gpu_note,
                           self.stacks.note) if n],
            "events_lost": 0, "self_cost": None,
        }

    def _stop_meta(self) -> dict:
        """meta.json's fields of how the trace ended, as the trace is closed."""
        return {"stop_ns": self.clock.now_ns(), "stop_reason": self.stop_reason,
                "python_stacks": self.stacks.stats()}

    def on_event(self, raw: bytes) -> None:
        """One ring-buffer record: process life cycle, a file's path, or a slow operation."""
        kind = abi.event_kind(raw)
        if kind == abi.EVENT_DISCOVER:
            ev = abi.decode_proc_event(raw)
            self.discovery.found(ev.pid if ev.comm == ELASTIC_COMM else ev.ppid)
        elif kind == abi.EVENT_FILE:
            self.files.on_record(raw)
        elif kind == abi.EVENT_DRAIN:
            self.drain_asked = True  # done once the poll returns (loop)
        elif kind == abi.EVENT_SLOW:
            ev = abi.decode_slow_event(raw)
            self.step.aggregator.on_slow(ev, self.clock.to_utc_ns(ev.ts_ns))
            self.stacks.on_slow(ev, self.processes.get(ev.pid))
        else:
            self.processes.on_event(abi.decode_proc_event(raw))

    # -- run ----------------------------------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        if not self.stop_reason:
            self.stop_reason = reason

    def loop(self) -> None:
        started = time.monotonic()
        next_tick = started + self.opts.interval_s
        self.cost.sample(started)
        while not self.stop_reason:
            now = time.monotonic()
            until = min(next_tick, self.cost.off_at or next_tick,
                        self.launches.off_at or next_tick)
            wait_ms = int(max(0.0, min(until - now, POLL_MS / 1000)) * 1000)
            self.probes.ring.poll(wait_ms)
            if self.drain_asked and self.step is not None:
                # taken out now and rolled up into the interval's rows so far (slots.bpf.h,
                # ask_drain): no interval holds more keys than a buffer has room for
                self.drain_asked = False
                self.step.aggregator.add_drain(*self.probes.maps.drain_next(rows_dtype()))
            now = time.monotonic()
            self.cost.pause_if_due(now)
            self.launches.stop_if_due(self.probes.cuda, now)
            if self.opts.duration_s is not None and now - started >= self.opts.duration_s:
                self.request_stop("duration")
            if now >= next_tick:
                self.tick()
                # from here, once the tick's own work is done: started at the reading, the
                # counting lasted as long as the tick, and every program run paid for it
                self.cost.sample(time.monotonic())
                self.launches.start(self.probes.cuda)
                next_tick = max(next_tick + self.opts.interval_s, now)
            if self.child and self.child.reap():
                self.processes.mark_gone(self.child.pid)
            if not self.opts.auto and not self.processes.alive():
                self.request_stop("targets exited")

    def tick(self, final: bool = False) -> Interval:
        """One interval: read the maps, /proc, the GPUs and iotrace's cost; the step makes the
        Interval; every sink writes it; processes gone a while are forgotten. `final`: the run's
        last interval."""
        if self.discovery.match:
            self.discovery.scan()
        for proc in self.processes.alive():
            if gone(proc.pid):  # died before it was tracked, or its exit event was lost
                self.processes.mark_gone(proc.pid)
        reading = self._read()
        # A process forks before it does I/O, so its FORK record is in the ring buffer before
        # its counters are in the maps just read: take the records now, the rows get its name.
        self.probes.ring.poll(0)
        ts_ns = self.clock.to_utc_ns(reading.monotonic_ns)
        devices, system = self.proc.sample(ts_ns)
        # each training loop's (a torchrun job's ranks, not its agent)
        memory = self.memory.sample(ts_ns, [p.pid for p in self.processes.alive()
                                            if p.role in LOOP_ROLES])
        gpu_rows = self.gpu.poll(ts_ns) if self.gpu else []
        cost = self.cost.read(final)
        assert self.step is not None and self.trace is not None
        sample_peers(self.processes.alive(), reading.hists)
        # Every segment roll carries the processes seen or changed since the last: a killed
        # tracer's trace still names every process its other rows mention.
        processes = self._process_rows() if final or self.trace.roll_due() else None
        interval = self.step.interval(reading, ts_ns, devices=devices, system=system,
                                      memory=memory, fuse=self.fuse.rows,
                                      gpu_rows=gpu_rows, cost=cost,
                                      known=self.processes.known(),
                                      processes=processes, final=final,
                                      gpu_named=self.processes.cuda_devices(),
                                      stacks=self.stacks.take())
        for sink in self.sinks:
            sink.write(interval)
        self.stacks.after_interval(interval, reading.write_spans, self.processes.alive())
        self.forget.after(reading, self.step.aggregator)
        del reading  # its arrays: the interval's per-file counters, freed before the trim
        release_free_memory()
        return interval

    def _read(self) -> Reading:
        """The kernel's maps: this interval's per-file counters (taken out of the kernel), the
        cumulative histograms and thread times."""
        from tracer.live.aggregate import Reading

        maps = self.probes.maps
        drain = maps.drain_next(rows_dtype())
        hists, threads = maps.read_hists(), maps.read_threads()
        # After the per-file counters: a syscall that returned since they were read is seen
        # done here and counted in them at the next reading (the diagnosis allows for both).
        mains = [p.pid for p in self.processes.alive() if p.role in LOOP_ROLES]
        now = time.monotonic_ns()
        return Reading(hists, drain.files, drain.folders, threads, now,
                       maps.syscalls_in_flight(mains), maps.read_block_users(),
                       maps.write_spans(mains), self._read_cuda(now), self._launch_share(),
                       maps.read_cpu_waits(), drain.folded, drain.folded_files)

    def _read_cuda(self, now_ns: int) -> dict:
        """The CUDA driver calls of every thread, cumulative; first, the driver libraries that
        traced processes mapped since the last reading are probed (cheap for those seen)."""
        cuda = self.probes.cuda
        if cuda is None:
            return {}
        cuda.scan([p.pid for p in self.processes.alive()])
        return cuda.read(now_ns) if cuda.libraries else {}

    def _launch_share(self) -> float | None:
        """The share of the time since the last reading in which launches were counted."""
        share = self.launches.take(time.monotonic())
        return 1.0 if self.probes.cuda_launches else share

    def _cannot_write(self, error: OSError) -> None:
        """The trace sink could not write a segment (a full disk) and writes nothing more: stop
        tracing, keep what is written; run_trace says which file and exits EXIT_OUTPUT."""
        if self.write_error is None:
            self.write_error = error
        self.request_stop(f"cannot write the trace: {error.strerror}")

    def _stdout_failed(self, error: OSError) -> None:
        """The interval lines could not be printed; they stop."""
        if isinstance(error, BrokenPipeError):  # `iotrace ... | head`: the lines, not the trace
            self.stdout_gone = True
            drop_output(self.out)
        else:  # the terminal is gone (an SSH drop without SIGHUP): stop cleanly
            self.request_stop("stdout closed")

    def _process_rows(self) -> list[dict]:
        """A `processes` row for each process new or changed (name, exit, worker numbering)
        since its last row: readers take the last row per pid."""
        self.processes.number_workers()
        rows = []
        for proc in self.processes.by_pid.values():
            if proc.final_written:
                continue
            self.processes.fill_cmdline(proc)
            row = proc.row()
            row["cmdline"] = self.redact.cmdline(row["cmdline"])
            row["comm"] = self.redact.comm(row["comm"])
            if row != proc.written:
                rows.append(row)
                # a row with its exit is its last: kept only while another may follow
                proc.final_written = row["exit"] is not None
                proc.written = None if proc.final_written else row
        return rows

    # -- stop -----------------------------------------------------------------------------------------
    def finish(self) -> str:
        """The last interval, through every sink, which are then closed (the trace among
        them); returns the summary text: the first screen of ``iotrace report DIR``, the same
        text (`render.summary.render_summary` over the parts `render.first_screen` and
        `render.saved_files` read back from the closed trace; the findings and the start-up
        are this run's, which the report replays to the same). The programs stay attached
        until close() (detaching waits for the kernel: about a second), so the summary comes
        first; what completes after this last read is not in the trace, as with any stop."""
        self.probes.ring.poll(0)
        assert self.step is not None
        last = self.tick(final=True)
        self.final_findings, cost = last.final_findings, last.snapshot.cost
        self._close_sinks()
        # (pandas stays out: the first screen reads the trace back with pyarrow and numpy)
        from tracer.render.findings import context_lines
        from tracer.render.first_screen import histograms_hint
        from tracer.render.summary import render_summary

        parts, file_totals, files, count = _summary_parts(self, cost.events_lost)
        return render_summary({}, self.processes, parts.header, file_totals, files,
                              self.final_findings, cost,
                              startup=context_lines(self.step.diagnosis), loop=parts.loop,
                              devices=parts.devices,
                              histograms=histograms_hint(str(self.opts.output)),
                              files_count=count)

    def judged_nothing(self) -> bool:
        """--pid targets that exited before the training loop was traced long enough to judge
        (the summary says so) and read or wrote nothing: bad input, as a target that exits
        before the attach is. A short job that did I/O is no error: its trace is exact."""
        if not (self.opts.pids and not self.opts.auto and not self.final_findings
                and self.stop_reason == "targets exited"):
            return False
        assert self.step is not None
        return not any(acc[1] for totals in self.step.aggregator.file_totals.values()
                       for acc in totals.by_op.values())

    def exit_code(self) -> int:
        """What iotrace exits with after a trace: the started command's status, as time(1) and
        strace give it (a code as is, 128 + the signal that killed it), so that a script sees
        the job fail; 0 when tracing PIDs or --auto, or when the command still runs (--duration)."""
        code = self.child.exit_code() if self.child else None
        return EXIT_OK if code is None else code

    def _close_sinks(self) -> None:
        """Closes every sink, the last in the list first (the live view leaves the screen
        first, the trace closes last), each even if another fails."""
        sinks, self.sinks = self.sinks, []
        with contextlib.ExitStack() as stack:
            for sink in sinks:
                stack.callback(sink.close)

    def close(self) -> None:
        self._close_sinks()
        self.stacks.close()
        if self.gpu:
            self.gpu.close()
        self.probes.close()
        self.no_pandas.remove()
        if self.child and not self.child.released:
            self.child.abandon()


def _summary_parts(session: Session, events_lost: int
                   ) -> tuple[TraceLines, Mapping, FileLookup, int]:
    """The first screen's header, loop split and disks, and the top files' totals and how
    many (process, file) pairs there are, from the trace `session` just closed, as `iotrace
    report` reads them; from memory, without the disks, when it was not written whole (a full
    disk) or cannot be read back."""
    from tracer.render.first_screen import TraceLines, trace_lines
    from tracer.render.saved_files import SAVED_COLUMNS, top_file_totals
    from tracer.render.summary import TOP_FILES

    assert session.step is not None
    diagnosis, processes = session.step.diagnosis, session.processes
    since = {pid: ns for pid in processes.by_pid
             if (ns := diagnosis.training_since(pid)) is not None}
    if session.write_error is None:
        from tracer.tracedir.tables import TraceError, open_tables

        name = str(session.opts.output)
        try:
            trace = open_tables(name)
            # a segment at a time: a day's `files` whole would be gigabytes in this process
            return (trace_lines(trace, name, since),
                    *top_file_totals(trace.row_groups("files", SAVED_COLUMNS), TOP_FILES))
        except TraceError:
            pass
    n = len(processes.by_pid)
    header = (f"Traced {n} process{'es' if n != 1 else ''} "
              f"({session.stop_reason or 'stopped'}); {events_lost} events lost.")
    if session.gpu_note:
        header += f"\n{session.gpu_note}."
    totals = session.step.aggregator.file_totals
    return TraceLines(header, _loop_lines(session), []), totals, session.files, len(totals)


def _loop_lines(session: Session) -> list[str]:
    """The summary's loop split from memory, a line per loop (per rank), as `iotrace report`
    has it from the trace."""
    from tracer.render.summary import split_lines

    assert session.step is not None
    split = session.step.diagnosis.loop_split()
    rows = [(pid, total / 1e9, startup / 1e9,
             {s: 100 * n / total for s, n in ns.items()} if total else {})
            for pid, (total, startup, ns) in split.items()]
    return split_lines(rows, session.processes.rank_numbers()) if rows else []


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
        text = session.finish()  # every sink is closed: the live view has left the screen
        if session.command_log:
            text += f"\nThe command's output is in {session.command_log}"
            if opts.redact_paths:  # its own words: nothing of iotrace's to hash
                text += " (as the command wrote it: --redact-paths does not cover it)"
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
        if session.judged_nothing():
            pids = " ".join(map(str, opts.pids))
            _say(f"iotrace: error: {NOTHING_JUDGED}: PID {pids} exited right after iotrace "
                 "attached; attach to a job that runs on (pgrep -a python)", err)
            return EXIT_USAGE
        return session.exit_code()
    finally:
        session.close()
        for s, h in old.items():
            signal.signal(s, h)
