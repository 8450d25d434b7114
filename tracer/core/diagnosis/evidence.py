"""What the diagnosis keeps of one interval: typed evidence the rules read (small: a run can
last days, and an hour of intervals is kept), and a main process's start-up as data."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tracer.core.diagnosis.compact import counts, frozen
from tracer.core.diagnosis.finding import LoopInterval
from tracer.core.diagnosis.fuse import FuseSample
from tracer.core.diagnosis.reads import NO_COUNTS, Reads
from tracer.core.diagnosis.thresholds import MAX_CPU_TAKERS, MAX_DISK_USERS
from tracer.core.model import CpuWaitRow, DeviceUserRow, MemoryRow, StackRow, ThreadRow
from tracer.core.stacks import CodeLine
from tracer.core.vocab import DATALOADER_WORKER, LOOP_ROLES

# (comm, cgroup, container ID, pod UID): who else used a disk
DiskUser = tuple[str, str, str | None, str | None]


@dataclass(slots=True)
class DiskReads:
    """One disk's reads in one interval, by whom (`device_users`)."""

    traced: list[int] = field(default_factory=lambda: [0, 0, 0])  # requests, bytes, service ns
    others: list[int] = field(default_factory=lambda: [0, 0, 0])
    by_user: dict[DiskUser, int] = field(default_factory=dict)  # -> bytes


# (comm, pid, cgroup, container ID, pod UID): a process outside a job that had a CPU it waited for
CpuTaker = tuple[str, int, str, str | None, str | None]


@dataclass(slots=True)
class CpuWaits:
    """A job's (a main's processes') wait for CPUs in one interval, and who had them."""

    loop: tuple[int, int] = (0, 0)  # its loop thread's (time, time runnable), ns
    workers: tuple[int, int] = (0, 0)  # its DataLoader workers' main threads', summed
    waited_ns: int = 0  # its threads' waits that ended (cpu_waits rows), whoever had the CPU
    own_ns: int = 0  # ... charged to the job's own processes
    others: dict[CpuTaker, int] = field(default_factory=dict)  # ... to processes outside it


@dataclass(slots=True)
class Reclaim:
    """A job's (a main's processes') time reclaiming memory in one interval (`threads` rows'
    reclaim_ns), and blocked in page faults outside reclaim (fault_wait_ns): its loop's, its
    DataLoader workers', its other threads'."""

    loop: tuple[int, int] = (0, 0)  # its loop thread's (time, time in reclaim), ns
    workers: tuple[int, int] = (0, 0)  # its workers' main threads' (busy time: not asleep, ...)
    workers_blocked_ns: int = 0  # ... of their reclaim, blocked (D): writeback, reads
    other_ns: int = 0  # its other threads' reclaim (pin-memory, savers, children)
    reclaims: int = 0  # reclaims that ended, all its threads
    loop_fault_ns: int = 0  # its loop thread's time blocked in page faults
    workers_fault_ns: int = 0  # ... its workers' main threads'
    other_fault_ns: int = 0  # ... its other threads'
    fault_sleeps: int = 0  # its threads' sleeps in page faults


@dataclass(slots=True)
class Background:
    """A background save (another thread, a child process) in one interval."""

    blocked_ns: int  # the saver's blocked (D) time
    waited_ns: int  # the loop's sleep charged to it (`checkpoint`)
    bytes: int  # checkpoint bytes written by the saver
    woken_own_ns: int  # the loop's sleeps ended by its own threads (a join, a lock, the GIL)
    woken_other_ns: int  # ... by timers and other processes (timed waits: the GIL's)
    child: bool  # a child process saves (else a thread)


@dataclass(frozen=True)
class CodeSample:
    """A Python stack sampled in one interval, by the line of the user's code it was at."""

    reason: str  # what it was taken for (tracer.core.stacks.REASONS)
    role: str | None  # of its process
    main_thread: bool  # its process's main thread (a loop's, a worker's)
    code: CodeLine


@dataclass(kw_only=True, slots=True)
class IntervalEvidence:
    """One interval as the rules see it, per main pid where it says "main"."""

    ts_ns: int
    interval_ns: int
    loops: dict[int, LoopInterval]  # main -> its loop's time by state
    worker_oncpu_ns: dict[int, int]  # main -> its DataLoader workers' time on CPU
    worker_iowait_ns: dict[int, int]  # ... blocked (D)
    worker_read_ns: dict[int, int]  # ... in file reads
    worker_net_ns: dict[int, int]  # ... in socket reads (estimated)
    data: dict[int, Reads]  # main -> what its processes read of the data set
    library: dict[int, Reads]  # main -> library/system files read, kept during start-up
    loop_time: dict[int, tuple[int, int, int]]  # main -> its loop's (on CPU, D, S) ns
    written: dict[int, int]  # main -> bytes its loop wrote to checkpoint-size files
    read_counts: dict[tuple[int, str], list[int]]  # (main, role) -> file reads' log2 slots
    read_max: dict[tuple[int, str], tuple[int, int]]  # (main, role) -> (reads, slowest ns)
    queue_counts: Sequence[int]  # block reads' queue time by slot (NO_COUNTS: none)
    service_counts: Sequence[int]  # ... service time
    device_util: dict[str, float]  # disk -> busy %
    net_counts: dict[tuple[int, str], list[int]]  # (main, role) -> socket reads' log2 slots
    net_bytes: dict[tuple[int, str], int]  # (main, role) -> bytes of socket reads
    small_writes: dict[int, dict[str, list[int]]]  # main -> path -> [writes, fsyncs, fsync ns]
    background: dict[int, Background]  # main -> a background save's cost to the loop
    other_parts: dict[int, tuple[int, int, int]]  # main -> other's (runnable, own, timers) ns
    memory: dict[int, MemoryRow] = field(default_factory=dict)  # main -> its memory row
    disk_reads: dict[str, DiskReads] = field(default_factory=dict)  # disk -> its reads, by whom
    cpu: dict[int, CpuWaits] = field(default_factory=dict)  # main -> its job's CPU waits
    reclaim: dict[int, Reclaim] = field(default_factory=dict)  # main -> its job's reclaim
    # main -> (its loop's time in saves charged here, its time writing checkpoints), saves.py
    saves: dict[int, tuple[int, int]] = field(default_factory=dict)
    # main -> its loop's CUDA driver calls here: (synchronisations, copies, launches; -1: not
    # counted); absent: none (no libcuda)
    cuda: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    fuse: tuple[FuseSample, ...] = ()  # the FUSE mounts read through, their daemons' activity
    # main -> its processes' Python stacks sampled here, at the user's code (`stacks` rows)
    code: dict[int, list[CodeSample]] = field(default_factory=dict)

    def compacted(self) -> IntervalEvidence:
        """This interval as the window keeps it for an hour: read-only, its dicts `Frozen`
        (compact.py), its lists tuples or arrays (an hour of intervals at -i 1 is kept)."""
        for loop in self.loops.values():
            loop.ns = frozen(loop.ns)
        for d in self.disk_reads.values():
            d.traced, d.others, d.by_user = tuple(d.traced), tuple(d.others), frozen(d.by_user)
        for w in self.cpu.values():
            w.others = frozen(w.others)
        for name in ("loops", "worker_oncpu_ns", "worker_iowait_ns", "worker_read_ns",
                     "worker_net_ns", "data", "library", "loop_time", "written", "read_max",
                     "device_util", "net_bytes", "background", "other_parts", "disk_reads",
                     "cpu", "reclaim", "saves", "cuda"):
            setattr(self, name, frozen(getattr(self, name)))
        self.read_counts = frozen(self.read_counts, counts)
        self.net_counts = frozen(self.net_counts, counts)
        self.small_writes = frozen(self.small_writes, lambda by_path: frozen(by_path, tuple))
        self.memory = frozen(self.memory, frozen)
        self.code = frozen(self.code, tuple)
        if self.queue_counts is not NO_COUNTS:
            self.queue_counts = counts(self.queue_counts)
        if self.service_counts is not NO_COUNTS:
            self.service_counts = counts(self.service_counts)
        return self


@dataclass
class StartUp:
    """A main process's start-up: from its first interval to the one where training starts."""

    pid: int
    until: str  # what ended it, in words
    seconds: float
    oncpu_ns: int  # its loop thread's time
    iowait_ns: int
    sleep_ns: int
    files: int  # files read
    library_files: int  # of them, the interpreter's and libraries' (site-packages, .py, .so)
    site_packages: int
    bytes: int
    missed: int  # bytes read from disk


def disk_reads(rows: Iterable[DeviceUserRow], served: Iterable[str] = ()
               ) -> dict[str, DiskReads]:
    """Each disk's reads of one interval's `device_users` rows; its others at most
    MAX_DISK_USERS, the largest. `served`: the names of the untraced processes that serve the
    FUSE mounts the job reads through (`fuse` rows), whose reads are the job's, made for it."""
    out: dict[str, DiskReads] = {}
    served = set(served)
    for r in rows:
        if r["op"] != "read":
            continue
        d = out.setdefault(r["device"], DiskReads())
        ours = r["who"] == "traced" or (r["who"] == "other" and r["comm"] in served)
        counts = d.traced if ours else d.others
        for i, v in enumerate((r["requests"], r["bytes"], r["service_ns"])):
            counts[i] += v
        if not ours:
            who = (r["comm"] or ("others" if r["who"] == "rest" else "?"), r["cgroup"] or "",
                   r["container_id"], r["pod_uid"])
            d.by_user[who] = d.by_user.get(who, 0) + r["bytes"]
    for d in out.values():
        if len(d.by_user) > MAX_DISK_USERS:
            d.by_user = dict(sorted(d.by_user.items(), key=lambda kv: -kv[1])[:MAX_DISK_USERS])
    return out


def disk_totals(ivs: Iterable[IntervalEvidence], dev: str) -> tuple[list[int], list[int]]:
    """Disk `dev`'s reads in `ivs`: the traced processes' and the others' [requests, bytes,
    service ns]."""
    traced, others = [0, 0, 0], [0, 0, 0]
    for iv in ivs:
        d = iv.disk_reads.get(dev)
        if d is not None:
            for i in range(3):
                traced[i] += d.traced[i]
                others[i] += d.others[i]
    return traced, others


def others_share(traced: list[int], others: list[int]) -> tuple[float, float, float] | None:
    """The other processes' share of a disk's reads (`disk_totals`): of the requests, the
    bytes and the service time; None when there were none of its reads."""
    if not traced[0] + others[0]:
        return None
    return tuple(o / (o + tr) if o + tr else 0.0 for o, tr in zip(others, traced, strict=True))


def cpu_waits(rows: Iterable[CpuWaitRow], threads: Iterable[ThreadRow],
              owner: Mapping[int, int]) -> dict[int, CpuWaits]:
    """Per main, its loop's and its workers' time runnable in one interval (`threads` rows)
    and who had the CPUs its processes waited for (`cpu_waits` rows): a traced process of the
    same main is its own; another main's processes and untraced ones are outside it, at most
    MAX_CPU_TAKERS of them kept (the largest); the CPU idle, or takers past the kernel's bound,
    are neither."""
    out: dict[int, CpuWaits] = {}
    for th in threads:
        if th["tid"] != th["pid"] or th["role"] not in (*LOOP_ROLES, DATALOADER_WORKER):
            continue  # a worker's work is on its main thread, the loop is the main's
        w = out.setdefault(owner.get(th["pid"], th["pid"]), CpuWaits())
        ns = (th["oncpu_ns"] + th["runnable_ns"] + th["sleep_ns"] + th["iowait_ns"],
              th["runnable_ns"])
        if th["role"] == DATALOADER_WORKER:
            w.workers = (w.workers[0] + ns[0], w.workers[1] + ns[1])
        elif owner.get(th["pid"], th["pid"]) == th["pid"]:
            w.loop = ns
    for r in rows:
        main = owner.get(r["pid"], r["pid"])
        w = out.setdefault(main, CpuWaits())
        w.waited_ns += r["wait_ns"]
        # (a replay reads the nullable column as floats where a row has none)
        taker = int(r["taker_pid"]) if r["taker_pid"] is not None else 0
        if r["who"] == "traced" and owner.get(taker, taker) == main:
            w.own_ns += r["wait_ns"]
        elif r["who"] in ("traced", "other"):
            who = (r["comm"] or "?", taker, r["cgroup"] or "", r["container_id"], r["pod_uid"])
            w.others[who] = w.others.get(who, 0) + r["wait_ns"]
    for w in out.values():
        if len(w.others) > MAX_CPU_TAKERS:
            w.others = dict(sorted(w.others.items(), key=lambda kv: -kv[1])[:MAX_CPU_TAKERS])
    return out


def _n(v: float | None) -> int:
    """A nullable count as an int (a replay reads a null of an int column as NaN)."""
    return int(v) if v is not None and v == v else 0


def reclaims(threads: Iterable[ThreadRow], owner: Mapping[int, int]) -> dict[int, Reclaim]:
    """Per main that reclaimed or waited in page faults, its job's time in memory reclaim and
    in faults in one interval (`threads` rows): the loop's share of its time, the workers' of
    their busy time (a worker asleep waiting for work is not held back), the rest added up."""
    out: dict[int, Reclaim] = {}
    for th in threads:
        ns, fault = _n(th.get("reclaim_ns")), _n(th.get("fault_wait_ns"))
        main = owner.get(th["pid"], th["pid"])
        r = out.setdefault(main, Reclaim())
        r.reclaims += _n(th.get("reclaims"))
        r.fault_sleeps += _n(th.get("fault_sleeps"))
        if th["tid"] == th["pid"] and th["role"] == DATALOADER_WORKER:
            busy = th["oncpu_ns"] + th["runnable_ns"] + th["iowait_ns"]
            r.workers = (r.workers[0] + busy, r.workers[1] + ns)
            r.workers_blocked_ns += _n(th.get("reclaim_blocked_ns"))
            r.workers_fault_ns += fault
        elif th["tid"] == th["pid"] == main and th["role"] in LOOP_ROLES:
            r.loop = (th["oncpu_ns"] + th["runnable_ns"] + th["sleep_ns"] + th["iowait_ns"], ns)
            r.loop_fault_ns = fault
        else:
            r.other_ns += ns
            r.other_fault_ns += fault
    return {main: r for main, r in out.items()
            if r.loop[1] or r.workers[1] or r.other_ns or r.reclaims or r.fault_sleeps}


def code_samples(rows: Iterable[StackRow], owner: Mapping[int, int]) -> dict[int, list[CodeSample]]:
    """Per main, the samples of one interval's `stacks` rows that reached the user's code (the
    frame marked `user`; a sample without one names no line)."""
    out: dict[int, list[CodeSample]] = {}
    for r in rows:
        if not r["user"]:
            continue
        pid = int(r["pid"])
        line = CodeLine(r["file"], int(r["line"]), r["function"], r["text"])
        out.setdefault(owner.get(pid, pid), []).append(
            CodeSample(r["reason"], r["role"], int(r["tid"]) == pid, line))
    return out
