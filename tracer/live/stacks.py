"""Python stacks of traced threads, read from outside the process by py-spy, off the tracer's loop.

`py-spy dump --pid P --json --nonblocking` reads the interpreter's frames from the process's
memory without stopping it (about 8 ms of CPU and 10 ms of wall time a dump here, against
0.26 s of CPU for pystack's, docs/benchmarks.md). The session asks for a sample when something
it saw matters (a slow read, a save, the loop waiting for batches); the asks are bounded (one
in flight per process, a thread and reason at most every `GAP_S`, less often while they find
the same line again, a loop's DataLoader workers one thread in this, about `RATE_PER_S` a
second in all, and the reader's own CPU at most `CPU_SHARE` of one CPU over the run) and run
on a small pool of threads, so the interval loop never waits on a reader. A loop asked for
because it waited for batches that runs by the time it is read has moved on: that sample is
dropped, and the loop asked for again; so is one asked for by a slow read or write whose
thread is in no such call once read (`in_io_call`): its stack shows where the thread went
next. Finished samples are taken once per interval as
`stacks` rows (tracer.core.stacks.frame_rows).

No reader installed, or none that may read a process: tracing goes on without stacks and the
user is told once (`missing_line`, `StackSampler.note`).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from tracer.core import abi
from tracer.core.redact import Redactor
from tracer.core.stacks import (
    BACKGROUND,
    DATA_WAIT,
    GPU_WAIT,
    HOST,
    SAVE,
    SLOW_READ,
    SLOW_WRITE,
    SYNC_LOADING,
    Frame,
    Thread,
    frame_rows,
    parse_dump,
    thread_of,
    user_frame,
)
from tracer.core.vocab import DATALOADER_WORKER, LOOP_ROLES

if TYPE_CHECKING:
    from tracer.core.interval import Interval
    from tracer.live.processes import Process

READER = "py-spy"
INSTALL = "pip install py-spy"
READER_ENV = "IOTRACE_PYSPY"  # a path to the reader; set and empty: no stacks
TIMEOUT_S = 5.0  # a dump that takes longer is given up (a process that hangs the reader)
GAP_S = 1.0  # a thread's samples for one reason at most this often
MAX_GAP_S = 16.0  # ... the gap doubled, up to this, while they find the same line again
RATE_PER_S = 2.0  # dumps a second, on average, over every process
BURST = 4  # ... and at most this many at once
CPU_SHARE = 0.01  # the reader's CPU, all dumps, at most this share of one CPU since the start
CPU_GRACE_S = 0.05  # ... plus this (the first samples: a few dumps)
BACKGROUND_S = 20.0  # the loop's main thread sampled this often whatever happens
FAILURES = 3  # a process whose reads failed this many times in a row is not read again
SOURCE_FILES = 256  # source files whose lines are kept (the lines named, read once)
# an interval's share a loop waited for batches, read, waited for its GPU or (calling CUDA)
# worked on the host, to be sampled for it: evidence for a finding judged over a whole window
WAIT_SHARE = 0.2
MAX_ASKED = 10_000  # (pid, tid, reason) remembered for GAP_S; past it, forgotten at once
# The system calls a slow read or write sample must find its thread in, by number, per
# machine: those the programs count as reads and writes (bpf/syscalls.bpf.h): read, pread64,
# readv, preadv, preadv2, recvfrom, recvmsg; write, pwrite64, writev, pwritev, pwritev2,
# fsync, fdatasync
IO_CALLS = {
    "x86_64": {SLOW_READ: frozenset({0, 17, 19, 295, 327, 45, 47}),
               SLOW_WRITE: frozenset({1, 18, 20, 296, 328, 74, 75})},
    "aarch64": {SLOW_READ: frozenset({63, 67, 65, 69, 286, 207, 212}),
                SLOW_WRITE: frozenset({64, 68, 66, 70, 287, 82, 83})},
}.get(platform.machine(), {})


def find_reader() -> str | None:
    """The py-spy binary: READER_ENV's path when it is set (empty: none), else on PATH, else
    beside this interpreter (a virtual environment's bin/, which PATH may lack)."""
    if READER_ENV in os.environ:
        path = os.environ[READER_ENV]
        return path if path and os.access(path, os.X_OK) else None
    found = shutil.which(READER)
    if found:
        return found
    beside = Path(sys.executable).parent / READER
    return str(beside) if os.access(beside, os.X_OK) else None


def ns_tid(pid: int, tid: int) -> int | None:
    """Thread `tid`'s number in its process's own PID namespace (a container's), the last of
    its NSpid line; None when it is gone."""
    try:
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None


def in_io_call(pid: int, tid: int, reason: str) -> bool:
    """Whether thread `tid` is in a system call of `reason` (SLOW_READ, SLOW_WRITE) now;
    True where that cannot be told (another reason or machine, a thread gone)."""
    calls = IO_CALLS.get(reason)
    if calls is None:
        return True
    try:
        with open(f"/proc/{pid}/task/{tid}/syscall") as f:
            first = f.read().split(maxsplit=1)[0]
    except (OSError, IndexError):
        return True
    return first.isdigit() and int(first) in calls  # "running": out of any call


def missing_line() -> str:
    """What iotrace says once when it has no reader."""
    return f"no Python stacks: {READER} not found ({INSTALL})"


class StackSampler:
    """Asks for samples (`ask`), takes the finished ones each interval (`take`)."""

    def __init__(self, reader: str, now_ns: Callable[[], int], note: Callable[[str], None],
                 redact_path: Callable[[str], str] | None = None, workers: int = 2):
        self.reader, self.now_ns, self.note = reader, now_ns, note
        self.redact_path = redact_path
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="iotrace-stacks")
        self._lock = threading.Lock()
        self._done: list[dict] = []  # rows of samples finished since the last take (ts unset)
        self._busy: set[int] = set()  # pids with a dump in flight
        self._last: dict[tuple[int, int, str], float] = {}  # (pid, tid, reason) -> when asked
        # (pid, tid, reason) -> the user line its last sample found, and the gap to the next
        self._repeat: dict[tuple[int, int, str], tuple[tuple[str, int] | None, float]] = {}
        self._failures: dict[int, int] = {}
        self._given_up: set[int] = set()
        self._tokens, self._refilled = float(BURST), time.monotonic()
        self._started = time.monotonic()
        self._turn = 0  # the worker sampled next while its loop waits for batches
        self._background: dict[int, float] = {}  # loop pid -> when last sampled so
        self._sources: dict[tuple[int, int, int], list[str] | None] = {}  # by file identity
        self._denied = False
        self.asked = self.dumps = self.failed = 0
        self.cpu_s = 0.0  # the reader's CPU, all dumps

    def ask(self, pid: int, tid: int, reason: str, role: str | None,
            loop: int | None = None) -> bool:
        """Sample thread `tid` of process `pid` for `reason`, unless a bound says not now;
        returns whether it was started. `loop`: the pid of the loop whose DataLoader worker
        `pid` is: its workers read the same lines, so they share one thread's gap, and their
        slow reads, which come all the time, leave the budget to the loop."""
        now = time.monotonic()
        key = (loop, 0, reason) if loop is not None else (pid, tid, reason)
        with self._lock:
            if pid in self._busy or pid in self._given_up:
                return False
            if now - self._last.get(key, -MAX_GAP_S) < self._repeat.get(key, (None, GAP_S))[1]:
                return False
            self._tokens = min(BURST, self._tokens + (now - self._refilled) * RATE_PER_S)
            self._refilled = now
            if self._tokens < 1 or self.cpu_s > CPU_SHARE * (now - self._started) + CPU_GRACE_S:
                return False
            self._tokens -= 1
            self._busy.add(pid)
            if len(self._last) >= MAX_ASKED:
                self._last.clear()
                self._repeat.clear()
            self._last[key] = now
            self.asked += 1
        self._pool.submit(self._sample, pid, tid, reason, role, key)
        return True

    def on_slow(self, ev: abi.SlowEvent, role: str | None, loop: int | None = None) -> None:
        """A slow operation from the ring buffer: its thread, where it reads or writes
        (`loop`: as ask's)."""
        if ev.layer != "syscall":
            return
        reason = SLOW_READ if ev.op == "read" else SLOW_WRITE if ev.op in ("write", "fsync") else None
        if reason is not None:
            self.ask(ev.pid, ev.tid, reason, role, loop)

    def after_interval(self, loops: list[dict], spans: dict[int, bytes],
                       roles: dict[int, str | None], workers: dict[int, list[int]],
                       cuda: frozenset[int] = frozenset()) -> None:
        """What one interval says of the training loops (`loop` rows; `spans`: each loop's
        write spans, as read; `roles`: the loops alive, pid -> role): a loop that waited for
        batches, or read its data itself, is sampled as it goes on; one with a file open for
        writing now, as it saves; and each loop every BACKGROUND_S. A loop that waited for
        batches also has one of its DataLoader workers (`workers`: loop pid -> theirs)
        sampled, in turn: what they do meanwhile. A loop that waited for its GPU is sampled
        where it waits (the line of a `.item()` or a copy); one that calls the CUDA driver
        (`cuda`: such loops' pids) and worked on the host most of the interval, where it
        works (host_bound's line)."""
        for row in loops:
            pid, n = row["pid"], row["interval_ns"] or 1
            if (row.get("gpu_wait_ns") or 0) >= WAIT_SHARE * n:
                self.ask(pid, pid, GPU_WAIT, roles.get(pid))
            if pid in cuda and row["compute_ns"] >= WAIT_SHARE * n:
                self.ask(pid, pid, HOST, roles.get(pid))
            wait = row["data_wait_io_ns"] + row["data_wait_cpu_ns"] + row["data_wait_network_ns"]
            if wait >= WAIT_SHARE * n:
                self.ask(pid, pid, DATA_WAIT, roles.get(pid))
                if workers.get(pid):
                    self._turn += 1
                    w = sorted(workers[pid])[self._turn % len(workers[pid])]
                    self.ask(w, w, DATA_WAIT, DATALOADER_WORKER)
            if row["sync_loading_ns"] >= WAIT_SHARE * n:
                self.ask(pid, pid, SYNC_LOADING, roles.get(pid))
        for pid, raw in spans.items():
            if abi.decode_write_span(raw).since:  # open now
                self.ask(pid, pid, SAVE, roles.get(pid))
        self.background(roles)

    def background(self, loops: dict[int, str | None]) -> None:
        """The loops' main threads (pid -> role), each every BACKGROUND_S."""
        now = time.monotonic()
        for pid, role in loops.items():
            since = self._background.setdefault(pid, now)
            if now - since >= BACKGROUND_S and self.ask(pid, pid, BACKGROUND, role):
                self._background[pid] = now

    def take(self) -> list[dict]:
        """The rows of the samples finished since the last call (their `ts` for the caller)."""
        with self._lock:
            rows, self._done = self._done, []
        return rows

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    # -- in the pool ------------------------------------------------------------------------------
    def _sample(self, pid: int, tid: int, reason: str, role: str | None,
                key: tuple[int, int, str]) -> None:
        try:
            taken = self.now_ns()
            thread = self._dump(pid, tid)
            if thread is None or not thread.frames:
                return
            if reason == DATA_WAIT and role != DATALOADER_WORKER and thread.active:
                # the batch came before the reader did: where the loop runs now is no wait
                with self._lock:
                    self._last.pop(key, None)
                return
            if not in_io_call(pid, tid, reason):
                # the read or write ended before the reader came: its line is not on the stack
                with self._lock:
                    self._last.pop(key, None)
                return
            rows = self._rows(taken, pid, tid, role, reason, thread.frames)
            at = user_frame(thread.frames)
            mine = (thread.frames[at].file, thread.frames[at].line) if at is not None else None
            with self._lock:
                self._done.extend(rows)
                seen, gap = self._repeat.get(key, (None, GAP_S))
                again = mine is not None and mine == seen
                self._repeat[key] = (mine, min(2 * gap, MAX_GAP_S) if again else GAP_S)
        finally:
            with self._lock:
                self._busy.discard(pid)

    def _dump(self, pid: int, tid: int) -> Thread | None:
        done = self._run([self.reader, "dump", "--pid", str(pid), "--json", "--nonblocking"])
        if done is None:
            self._failed(pid, None)
            return None
        code, stdout, stderr = done
        if code != 0:
            self._failed(pid, stderr)
            return None
        try:
            threads = parse_dump(stdout)
        except (ValueError, TypeError, AttributeError):
            self._failed(pid, None)
            return None
        with self._lock:
            self._failures.pop(pid, None)
        return thread_of(threads, pid, tid, ns_tid(pid, tid))

    def _run(self, argv: list[str]) -> tuple[int, str, str] | None:
        """Runs the reader: its exit code and output, and its CPU time added to `cpu_s` (what
        iotrace reports it cost); None when it could not run or ran past TIMEOUT_S."""
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        except OSError:
            return None
        timer = threading.Timer(TIMEOUT_S, proc.kill)
        timer.start()
        try:
            stdout, stderr = proc.stdout.read(), proc.stderr.read()  # its stderr is a line
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
            proc.stdout.close()
            proc.stderr.close()
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        with self._lock:
            self.dumps += 1
            self.cpu_s += usage.ru_utime + usage.ru_stime
        return None if code == -9 else (code, stdout, stderr)

    def stats(self) -> dict:
        """meta.json's `python_stacks`: samples asked for, dumps run, failed, their CPU."""
        return {"reader": self.reader, "asked": self.asked, "dumps": self.dumps,
                "failed": self.failed, "cpu_s": round(self.cpu_s, 3)}

    def _failed(self, pid: int, stderr: str | None) -> None:
        """A dump that failed: a process that exited, that is not Python, or that the reader
        may not read (said once: tracing goes on without its stacks)."""
        with self._lock:
            self.failed += 1
            n = self._failures[pid] = self._failures.get(pid, 0) + 1
            if n >= FAILURES:
                self._given_up.add(pid)
            denied = stderr is not None and "ermission" in stderr and not self._denied
            if denied:
                self._denied = True
        if denied:
            self.note(f"no Python stacks of PID {pid}: {READER} may not read it "
                      "(run iotrace as root, or with CAP_SYS_PTRACE)")

    def _rows(self, taken: int, pid: int, tid: int, role: str | None, reason: str,
              frames: list[Frame]) -> list[dict]:
        mine = user_frame(frames)
        text = self._source(pid, frames[mine].file, frames[mine].line) if mine is not None else None
        if self.redact_path is not None:
            frames = [Frame(self.redact_path(f.file), f.line, f.function) for f in frames]
            text = None  # the source is the user's words too
        return frame_rows(0, taken, pid, tid, role, reason, frames, text)

    def _source(self, pid: int, file: str, line: int) -> str | None:
        """Line `line` of the process's file `file`, read through its root (a container's own
        files) and, for a relative name, its working directory; kept per file, the same for
        every process that sees it (the workers a DataLoader forks anew each epoch)."""
        path = (f"/proc/{pid}/root" if file.startswith("/") else f"/proc/{pid}/cwd/") + file
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (st.st_dev, st.st_ino, st.st_mtime_ns)
        if key not in self._sources:
            if len(self._sources) >= SOURCE_FILES:
                self._sources.clear()
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    self._sources[key] = f.read().splitlines()
            except OSError:
                self._sources[key] = None
        lines = self._sources[key]
        if lines is None or not 0 < line <= len(lines):
            return None
        return lines[line - 1].strip() or None


class PythonStacks:
    """The session's side: a StackSampler when py-spy is there, else nothing but the `note`
    said once (`open`); every call is a no-op without a reader."""

    def __init__(self, now_ns: Callable[[], int], err: TextIO, redact: Redactor):
        self.now_ns, self.err, self.redact = now_ns, err, redact
        self.sampler: StackSampler | None = None
        self.note: str | None = None  # why there are no stacks, when there are none

    def _say(self, text: str) -> None:
        print(f"iotrace: {text}", file=self.err, flush=True)

    def open(self) -> None:
        reader = find_reader()
        if reader is None:
            self.note = missing_line()
            self._say(self.note)
            return
        self.sampler = StackSampler(reader, self.now_ns, self._say,
                                    self.redact.path if self.redact.enabled else None)

    def on_slow(self, ev: abi.SlowEvent, proc: Process | None) -> None:
        if self.sampler is not None:
            self.sampler.on_slow(ev, proc.role if proc else None,
                                 proc.ppid if proc and proc.role == DATALOADER_WORKER else None)

    def take(self) -> list[dict]:
        return self.sampler.take() if self.sampler is not None else []

    def after_interval(self, interval: Interval, spans: dict[int, bytes],
                       alive: Iterable[Process]) -> None:
        if self.sampler is None or interval.final:
            return
        alive = list(alive)
        workers: dict[int, list[int]] = {}
        for p in alive:
            if p.role == DATALOADER_WORKER:
                workers.setdefault(p.ppid, []).append(p.pid)
        cuda = frozenset(t["pid"] for t in interval.snapshot.threads
                         if t["tid"] == t["pid"] and t["cuda_syncs"] is not None)
        self.sampler.after_interval(interval.loop, spans, {p.pid: p.role for p in alive
                                                           if p.role in LOOP_ROLES}, workers,
                                    cuda)

    def stats(self) -> dict | None:
        return self.sampler.stats() if self.sampler is not None else None

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()
