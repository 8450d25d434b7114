"""Numbers the live view, the interval line and the CSV sink derive from snapshots (pure).

Every function here takes rows exactly as `tracer.core.model.Snapshot` holds them and returns
plain values; nothing reads the kernel or /proc. Definitions shared by all three outputs:

- file I/O of a process: its `syscall` latency rows with target ``file`` (reads and writes of
  pipes and sockets, which DataLoader workers use to hand over batches, are left out);
  read/write bytes are the ``bytes`` of the rows with op ``read``/``write``; ops are the ``count``
  of every op (read, write, fsync, open, ...);
- block I/O of a process: its `block` rows (issue -> complete, the service time; the submitter
  is the process that started the request);
- blocked on I/O: the sum of ``iowait_ns`` (D state) over the process's threads divided by the
  interval, in percent, capped at 100, as iotop's IO> column sums a process's threads (-P);
- loop shares: the six states of the `loop` table summed over the rows given, in percent of
  their total.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from tracer.core.model import FileRow, LatencyRow, LoopRow, Snapshot, ThreadRow
from tracer.core.units import MAX_SLOTS, PAGE_SIZE, slot_of
from tracer.core.vocab import LOOP_STATES


def interval_ns(snapshot: Snapshot, default_s: float = 1.0) -> int:
    """The snapshot's interval; the first snapshot of a run has none (0), so `default_s` then."""
    return snapshot.interval_ns or int(default_s * 1e9)


def is_file_syscall(row: LatencyRow) -> bool:
    return row["layer"] == "syscall" and row.get("target") == "file"


def add_counts(into: list[int], rows: Iterable[LatencyRow]) -> list[int]:
    """Adds the rows' counts to the log2 histogram `into` (MAX_SLOTS long); returns it."""
    for r in rows:
        into[slot_of(r["bucket_lo_ns"])] += r["count"]
    return into


def histogram(rows: Iterable[LatencyRow]) -> list[int]:
    return add_counts([0] * MAX_SLOTS, rows)


@dataclass
class ProcIO:
    """One process's I/O in one interval (or summed over a window)."""

    pid: int
    comm: str = ""
    role: str | None = None
    read_bytes: int = 0  # file reads through read syscalls
    write_bytes: int = 0  # file writes through write syscalls
    ops: int = 0  # file syscalls of any op
    iowait_ns: int = 0  # summed over its threads
    syscall: list[int] = field(default_factory=lambda: [0] * MAX_SLOTS)  # file syscall latency
    block: list[int] = field(default_factory=lambda: [0] * MAX_SLOTS)  # block service latency

    def merge(self, other: ProcIO) -> None:
        self.read_bytes += other.read_bytes
        self.write_bytes += other.write_bytes
        self.ops += other.ops
        self.iowait_ns += other.iowait_ns
        for i in range(MAX_SLOTS):
            self.syscall[i] += other.syscall[i]
            self.block[i] += other.block[i]


def processes(snapshot: Snapshot) -> dict[int, ProcIO]:
    """Every process that appears in the snapshot's latency, files or threads rows, by pid."""
    out: dict[int, ProcIO] = {}
    comm_of_main_thread: dict[int, str] = {}

    def get(row: LatencyRow | FileRow | ThreadRow) -> ProcIO:
        p = out.get(row["pid"])
        if p is None:
            p = out[row["pid"]] = ProcIO(row["pid"])
        if not p.comm and row.get("comm"):
            p.comm = row["comm"]
        if p.role is None and row.get("role"):
            p.role = row["role"]
        return p

    for r in snapshot.latency:
        p = get(r)
        if is_file_syscall(r):
            p.ops += r["count"]
            if r["op"] == "read":
                p.read_bytes += r["bytes"]
            elif r["op"] == "write":
                p.write_bytes += r["bytes"]
            p.syscall[slot_of(r["bucket_lo_ns"])] += r["count"]
        elif r["layer"] == "block":
            p.block[slot_of(r["bucket_lo_ns"])] += r["count"]
    for f in snapshot.files:
        get(f)
    for t in snapshot.threads:
        p = get(t)
        p.iowait_ns += t["iowait_ns"]
        if t["tid"] == t["pid"] and t.get("comm"):
            comm_of_main_thread[t["pid"]] = t["comm"]
    for pid, comm in comm_of_main_thread.items():  # threads rename themselves; the process's
        out[pid].comm = comm                         # name is its main thread's
    return out


def blocked_pct(iowait_ns: int, interval: int) -> float:
    return min(100.0, 100.0 * iowait_ns / interval) if interval > 0 else 0.0


def loop_shares(loop_rows: Iterable[LoopRow]) -> dict[str, float] | None:
    """Percent of the loop's time in each of vocab.LOOP_STATES, over the rows; None without time."""
    ns = dict.fromkeys(LOOP_STATES, 0)
    for r in loop_rows:
        for s in LOOP_STATES:
            ns[s] += r.get(f"{s}_ns") or 0  # (null in traces from before the state)
    total = sum(ns.values())
    if not total:
        return None
    return {s: 100.0 * ns[s] / total for s in LOOP_STATES}


def read_syscalls(snapshot: Snapshot) -> list[int]:
    """Latency histogram of the file read syscalls of every traced process in the snapshot."""
    return histogram(r for r in snapshot.latency if is_file_syscall(r) and r["op"] == "read")


@dataclass
class FileIO:
    """One file over a window: the sums of its `files` rows (all processes and ops)."""

    path: str
    fs_type: str = ""
    roles: set[str] = field(default_factory=set)
    reads: int = 0
    writes: int = 0
    read_bytes: int = 0
    write_bytes: int = 0
    latency_sum_ns: int = 0
    latency_max_ns: int = 0
    pages_missed: int = 0

    @property
    def cache_hit_pct(self) -> float | None:
        """As the files table defines it: read bytes not missed in the page cache, percent."""
        if not self.read_bytes:
            return None
        return max(0.0, 1.0 - self.pages_missed * PAGE_SIZE / self.read_bytes) * 100.0


def top_files(file_rows: Iterable[FileRow], n: int) -> list[FileIO]:
    """The `n` files with the most time in syscalls (then most bytes), summed by path."""
    by_path: dict[str, FileIO] = {}
    for r in file_rows:
        path = r.get("path") or f"<inode {r.get('inode')}>"
        f = by_path.get(path)
        if f is None:
            f = by_path[path] = FileIO(path, r.get("fs_type") or "")
        if r.get("role"):
            f.roles.add(r["role"])
        if r["op"] == "read":
            f.reads += r["ops"]
            f.read_bytes += r["bytes"]
        elif r["op"] == "write":
            f.writes += r["ops"]
            f.write_bytes += r["bytes"]
        f.latency_sum_ns += r["latency_sum_ns"]
        f.latency_max_ns = max(f.latency_max_ns, r["latency_max_ns"])
        f.pages_missed += r.get("pages_missed") or 0
    ranked = sorted(by_path.values(),
                    key=lambda f: (-f.latency_sum_ns, -(f.read_bytes + f.write_bytes), f.path))
    return ranked[:n]
