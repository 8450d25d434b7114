"""Turns cumulative in-kernel histograms into one immutable snapshot per interval.

The kernel keeps cumulative counts; each interval this stage subtracts what it saw last time, so
the sum of `count` over a trace's rows is exactly the number of operations completed.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from tracer.core import abi, rollup
from tracer.core.cgroup import container_of
from tracer.core.model import (
    FOLDER_GEN,
    CpuWaitRow,
    DeviceRow,
    DeviceUserRow,
    EventRow,
    FileKey,
    FileRow,
    FileTotals,
    GpuRow,
    LatencyRow,
    MemoryRow,
    RolledUp,
    Series,
    Snapshot,
    SystemRow,
    ThreadRow,
)
from tracer.core.roles import CHILD
from tracer.core.selfcost import SelfCost
from tracer.core.units import PAGE_SIZE, slot_bounds_ns
from tracer.live.cgroups import CgroupNames, describe, hierarchies
from tracer.live.cuda import CudaDeltas
from tracer.live.devices import device_name
from tracer.live.files import FileTable
from tracer.live.processes import Process, ProcessTable
from tracer.live.rereads import Rereads, with_rereads
from tracer.live.spans import SpanClock
from tracer.tracedir.schema import MAX_CPU_TAKERS, MAX_DEVICE_USERS

MAX_FILE_TOTALS = 2_000  # files the summary keeps totals of (the others: their folders')
# Folders' totals past which those of exited processes go to their training loop's: DataLoader
# workers made again every epoch would otherwise add their folders anew each epoch.
MAX_FOLDER_TOTALS = 4_000
NO_SYSCALL: dict[str, str | int | None] = {"syscall_op": None, "syscall_path": None, "syscall_since": None}
NO_SPAN: dict[str, str | int | None] = {"write_open_path": None, "write_open_ns": None}


def role_of_pid(proc: Process | None) -> str:
    """A process's role; one not in the table yet (its fork event still in the ring buffer) is
    a traced descendant: every target is registered before tracing starts."""
    return proc.role if proc else CHILD


def series_of(key: abi.HistKey) -> Series:
    device = device_name(key.dev) if key.layer in ("block", "block_queue") else None
    return Series(key.pid, key.layer, key.op, key.target, device, key.attribution)


def no_file_counts() -> np.ndarray:
    return np.zeros(0, dtype=abi.file_counts_dtype())


@dataclass(frozen=True)
class Reading:
    """One read of the kernel's maps (raw bytes, as the loader returns them)."""

    hists: dict[bytes, bytes]
    # This interval's per-file and per-folder counters (kernel.maps.Maps.drain_file_stats): its
    # last drain, those the kernel asked for before it given to Aggregator.add_drain already
    files: np.ndarray = field(default_factory=no_file_counts)
    folders: np.ndarray = field(default_factory=no_file_counts)
    threads: dict[int, bytes] = field(default_factory=dict)  # by thread id
    monotonic_ns: int = 0  # when it was read (CLOCK_MONOTONIC, the kernel's clock)
    # The syscall each main process's main thread was in when read, by pid (= its tid):
    # (start, op, target, dev, ino, gen, dir_ino), start in CLOCK_MONOTONIC ns
    # (kernel.maps.Maps.syscalls_in_flight)
    in_flight: dict[int, tuple[int, int, int, int, int, int, int]] = field(default_factory=dict)
    # Who used each disk, cumulative (kernel.maps.Maps.read_block_users)
    block_users: dict[bytes, bytes] = field(default_factory=dict)
    # Each main process's main thread's write spans, by pid (kernel.maps.Maps.write_spans)
    write_spans: dict[int, bytes] = field(default_factory=dict)
    # Each thread's CUDA driver calls, cumulative (kernel.uprobes.CudaProbes.read), by thread id
    cuda: dict[int, abi.CudaThread] = field(default_factory=dict)
    # the share of the time since the last reading in which launches were counted (live.cuda)
    launch_share: float | None = None
    # Who had the CPUs traced threads waited for, cumulative (kernel.maps.Maps.read_cpu_waits)
    cpu_waits: dict[bytes, bytes] = field(default_factory=dict)
    # The files the kernel folded at their close, per folder, and how many in each (abi.Drain)
    folded: np.ndarray | None = None
    folded_files: np.ndarray | None = None


class Aggregator:
    def __init__(self, processes: ProcessTable, files: FileTable | None = None,
                 cgroups: CgroupNames | None = None) -> None:
        self.processes = processes
        self.cgroups = cgroups  # None: cgroups are not named (a replay, a test)
        self.prev_users: dict[bytes, tuple[int, int, int]] = {}
        self.prev_waits: dict[bytes, tuple[int, int, int]] = {}
        # The CPU programs read a task's cgroup on the v2 hierarchy only: named where it is
        # mounted (a v1 host's ids would name directories of another hierarchy)
        v2 = hierarchies("blkio")[1] if cgroups else None
        self.cpu_cgroups = (cgroups if cgroups and cgroups.root == v2
                            else CgroupNames(v2) if v2 else None)
        self.files = files or FileTable()
        self.prev: dict[bytes, np.ndarray] = {}
        self.prev_threads: dict[int, tuple[int, ...]] = {}  # (pid, *ThreadTime.as_tuple())
        # (pid, dev, ino, gen): a file over time (abi.FileKey); a folder's rows as (pid, dev,
        # folder inode, FOLDER_GEN). Bounded (fold_file_totals).
        self.file_totals: dict[FileKey, FileTotals] = {}
        self._fold_at = 0  # folded again once file_totals is past twice what the last left
        self.rolled_up = RolledUp()
        # the interval's drains so far, rolled up (add_drain), and their kernel folder rows
        self._drains: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._drains_folders: list[np.ndarray] = []
        self.last_ts_ns: int | None = None
        self.pending_events: list[EventRow] = []
        self.rereads = Rereads(self._size_of)
        self.spans = SpanClock()
        self.cuda = CudaDeltas()
        # False where the kernel has no page_fault_user tracepoint: the fault columns are null
        self.faults_seen = True

    def interval(self, reading: Reading, ts_ns: int, *, devices: list[DeviceRow] | None = None,
                 system: SystemRow | None = None, gpu: list[GpuRow] | None = None,
                 cost: SelfCost | None = None, memory: list[MemoryRow] | None = None) -> Snapshot:
        """Deltas since the previous call, as rows stamped `ts_ns`; slow events since then. The
        snapshot's other fields, read elsewhere (/proc, NVML, iotrace's cost), as given, but for
        the cost's count of files whose path was lost: the file table's, after this reading."""
        rows: list[LatencyRow] = []
        for rkey, rval in reading.hists.items():
            cur = abi.decode_hist(rval)
            prev = self.prev.get(rkey)
            delta = cur if prev is None else cur - prev
            if (delta > cur).any():  # the key was recreated since: all of it is new
                delta = cur
            self.prev[rkey] = cur
            if not delta[0].any():
                continue
            rows.extend(self._rows(series_of(abi.decode_hist_key(rkey)), delta, ts_ns))
        file_rows = self._file_rows(reading.files, reading.folders, ts_ns, reading.folded,
                                    reading.folded_files)
        self.cuda.launch_share = reading.launch_share
        thread_rows = self._thread_rows(reading.threads, reading.monotonic_ns, ts_ns,
                                        reading.in_flight, reading.write_spans, reading.cuda)
        interval_ns = ts_ns - self.last_ts_ns if self.last_ts_ns else 0
        self.last_ts_ns = ts_ns
        events, self.pending_events = self.pending_events, []
        if cost is not None:  # what the file table could not name, once this reading's are in
            recovered, unknown = self.files.lost_paths()
            r = self.rolled_up
            cost = dataclasses.replace(cost, paths_recovered=recovered, paths_unknown=unknown,
                                       file_rows_rolled_up=r.file_rows, folder_rows=r.folder_rows,
                                       folder_ops_kernel=r.kernel_ops,
                                       files_folded_kernel=r.kernel_folded)
        return Snapshot(ts_ns, interval_ns, rows, file_rows, events, thread_rows, devices or [],
                         system, gpu or [], cost, memory or [],
                         self._device_user_rows(reading.block_users, ts_ns),
                         self._cpu_wait_rows(reading.cpu_waits, ts_ns))

    def _cpu_wait_rows(self, waits: dict[bytes, bytes], ts_ns: int) -> list[CpuWaitRow]:
        """Who had the CPUs the traced processes' threads waited for in the interval: the
        deltas of the kernel's counts, per waiting process at most MAX_CPU_TAKERS takers (by
        wait), the rest added up, and the waits' parts before their last taker ran (`earlier`)."""
        by_pid: dict[int, list[tuple[abi.CpuWaitKey, int, int]]] = {}
        earlier: dict[int, int] = {}
        for raw, value in waits.items():
            cur = abi.decode_cpu_wait(value)
            prev = self.prev_waits.get(raw, (0, 0, 0))
            self.prev_waits[raw] = cur
            n, ns, before = (c - p for c, p in zip(cur, prev, strict=True))
            if n <= 0 or ns < 0 or before < 0:
                continue
            key = abi.decode_cpu_wait_key(raw)
            by_pid.setdefault(key.pid, []).append((key, n, ns))
            earlier[key.pid] = earlier.get(key.pid, 0) + before
        rows: list[CpuWaitRow] = []
        for pid, found in by_pid.items():
            found.sort(key=lambda k: -k[2])
            rest = [0, 0]
            for i, (key, n, ns) in enumerate(found):
                if key.rest or i >= MAX_CPU_TAKERS:
                    rest = [rest[0] + n, rest[1] + ns]
                    continue
                rows.append(self._cpu_wait_row(ts_ns, pid, key, n, ns))
            for who, (n, ns) in (("rest", rest), ("earlier", (0, earlier[pid]))):
                if n or ns:
                    rows.append({"ts": ts_ns, "pid": pid, "who": who, "taker_pid": None,
                                 "comm": None, "cgroup": None, "container_id": None,
                                 "pod_uid": None, "waits": n, "wait_ns": ns})
        return rows

    def _cpu_wait_row(self, ts_ns: int, pid: int, key: abi.CpuWaitKey, n: int, ns: int
                      ) -> CpuWaitRow:
        # (a process being attached to is in the table before the kernel's set: its first
        # waits' takers among its own processes are traced all the same)
        traced = key.traced or key.taker in self.processes.by_pid
        who = "traced" if traced else "idle" if not key.taker else "other"
        path = self.cpu_cgroups.path(key.cgroup) if self.cpu_cgroups and key.taker else None
        c = container_of(path)
        return {"ts": ts_ns, "pid": pid, "who": who, "taker_pid": key.taker or None,
                "comm": self.files.redact.comm(key.comm),
                "cgroup": self.files.redact.path(path) if path else None,
                "container_id": c.container_id, "pod_uid": c.pod_uid, "waits": n, "wait_ns": ns}

    def _device_user_rows(self, users: dict[bytes, bytes], ts_ns: int) -> list[DeviceUserRow]:
        """Who used each disk in the interval: the deltas of the kernel's counts, the traced
        processes' per cgroup, the others' per (cgroup, name), MAX_DEVICE_USERS of them per disk
        and op (by bytes), the rest added up."""
        groups: dict[tuple[str, str], list[tuple[abi.BlockUserKey, tuple[int, int, int]]]] = {}
        for raw, value in users.items():
            cur = abi.decode_block_user(value)
            prev = self.prev_users.get(raw, (0, 0, 0))
            self.prev_users[raw] = cur
            delta = tuple(c - p for c, p in zip(cur, prev, strict=True))
            if not delta[0] or min(delta) < 0:
                continue
            key = abi.decode_block_user_key(raw)
            groups.setdefault((device_name(key.dev), key.op), []).append((key, delta))
        rows: list[DeviceUserRow] = []
        # every process traced, also one that exited but is still listed in its cgroup
        traced = set(self.processes.by_pid) if self.cgroups else set()
        for (device, op), found in groups.items():
            found.sort(key=lambda kd: -kd[1][1])
            named = 0
            rest = [0, 0, 0]
            for key, (n, nbytes, svc) in found:
                if key.traced:
                    who = "traced"
                elif key.rest or named >= MAX_DEVICE_USERS:
                    rest = [rest[0] + n, rest[1] + nbytes, rest[2] + svc]
                    continue
                else:
                    named += 1
                    who = "kernel_thread" if key.kthread else "other"
                path = self.cgroups.path(key.cgroup) if self.cgroups else None
                comm = None
                if who == "other":
                    comm = self.files.redact.comm(key.comm)
                elif who == "kernel_thread" and self.cgroups:
                    names = Counter()
                    for name, k in self.cgroups.processes(path, traced).items():
                        names[self.files.redact.comm(name)] += k
                    comm = describe(names)
                c = container_of(path)  # (IDs, not names: kept when paths are redacted)
                rows.append({"ts": ts_ns, "device": device, "op": op, "who": who,
                             "cgroup": self.files.redact.path(path) if path else None,
                             "container_id": c.container_id,
                             "pod_uid": c.pod_uid, "comm": comm, "requests": n,
                             "bytes": nbytes, "service_ns": svc})
            if rest[0]:
                rows.append({"ts": ts_ns, "device": device, "op": op, "who": "rest",
                             "cgroup": None, "container_id": None, "pod_uid": None,
                             "comm": None, "requests": rest[0], "bytes": rest[1],
                             "service_ns": rest[2]})
        return rows

    def _thread_rows(self, threads: dict[int, bytes], mono_ns: int, ts_ns: int,
                     in_flight: dict[int, tuple[int, int, int, int, int, int, int]],
                     spans: dict[int, bytes] | None = None,
                     cuda: dict[int, abi.CudaThread] | None = None) -> list[ThreadRow]:
        rows: list[ThreadRow] = []
        for tid, raw in threads.items():
            t = abi.decode_thread_time(tid, raw, mono_ns)
            cur = (t.pid, *t.as_tuple())
            prev = self.prev_threads.get(tid)
            if prev is None or prev[0] != t.pid:  # first seen, or its tid reused by another process
                delta, seen = cur[1:], cur
            else:
                # The state a thread was in when read is counted up to the reading's clock, taken
                # after the map: a state that ended in between was counted a little long, and the
                # kernel's total is then below it. That time is not counted twice: each total
                # goes on from the larger of the two, and what was counted early is taken from
                # the next intervals' (the run's sums are the kernel's once it passes them).
                seen = tuple(max(c, p) for c, p in zip(cur, prev, strict=True))
                delta = tuple(n - p for n, p in zip(seen[1:], prev[1:], strict=True))
            self.prev_threads[tid] = seen
            if not any(delta[:4]):
                continue  # (the kernel starts counting at first sight: nothing from before)
            proc = self.processes.get(t.pid)
            woken = dict(zip(abi.WAKERS, delta[4:8], strict=True))
            rows.append({
                "ts": ts_ns, "pid": t.pid, "tid": tid, "comm": self.files.redact.comm(t.comm),
                "role": role_of_pid(proc), "oncpu_ns": delta[0],
                "runnable_ns": delta[1], "sleep_ns": delta[2], "iowait_ns": delta[3],
                "woken_by_worker_ns": woken["worker"], "woken_by_pin_ns": woken["pin"],
                "woken_by_own_ns": woken["own"], "woken_by_other_ns": woken["other"],
                "reclaim_ns": delta[8], "reclaim_blocked_ns": delta[9], "reclaims": delta[10],
                "fault_wait_ns": delta[11] if self.faults_seen else None,
                "fault_sleeps": delta[12] if self.faults_seen else None,
                **self._syscall_columns(in_flight.get(tid), t.pid, mono_ns, ts_ns),
                **self._span_columns((spans or {}).get(tid), t.pid, mono_ns),
                **self.cuda.columns((cuda or {}).get(tid)),
            })
        return rows

    def _syscall_columns(self, call: tuple[int, int, int, int, int, int, int] | None, pid: int,
                         mono_ns: int, ts_ns: int) -> dict[str, str | int | None]:
        """The read/write/fsync of a regular file a thread was in at the end of the interval,
        and since when (UTC): the diagnosis charges its time as it passes."""
        if call is None:
            return NO_SYSCALL
        start, op, target, dev, ino, gen, dir_ino = call
        name = abi.OPS.get(op)
        if target != abi.TARGET_FILE or name not in ("read", "write", "fsync") or not dev:
            return NO_SYSCALL
        return {"syscall_op": name,
                "syscall_path": self.files.get(dev, ino, gen, pid, dir_ino).path,
                "syscall_since": ts_ns - (mono_ns - start)}

    def _span_columns(self, raw: bytes | None, pid: int, mono_ns: int
                      ) -> dict[str, str | int | None]:
        """A main thread's time in write spans since the last reading (live/spans.py), all of
        it, and the file it spent the most of it on (an interval may hold the end of one save
        and the start of the next, to files of one folder); the diagnosis decides whether it
        was a save."""
        if raw is None:
            return NO_SPAN
        by_file = self.spans.advance(pid, abi.decode_write_span(raw), mono_ns)
        if not by_file or not max(by_file.values()):
            return NO_SPAN
        dev, ino, gen = max(by_file, key=lambda f: by_file[f])
        return {"write_open_path": self.files.get(dev, ino, gen, pid).path,
                "write_open_ns": sum(by_file.values())}

    def forget(self, raw_keys: list[bytes], tids: Iterable[int] = (),
               cpu_waits: Iterable[bytes] = ()) -> None:
        """Drops keys deleted from the kernel maps (processes gone): histograms', threads',
        `cpu_waits`'."""
        for k in raw_keys:
            self.prev.pop(k, None)
        for k in cpu_waits:
            self.prev_waits.pop(k, None)
        tids = list(tids)
        for tid in tids:
            self.prev_threads.pop(tid, None)
            self.spans.forget(tid)
        self.cuda.forget(tids)

    def add_drain(self, files: np.ndarray, folders: np.ndarray, folded: np.ndarray | None = None,
                  folded_files: np.ndarray | None = None) -> None:
        """Per-file counters of the interval taken out of the kernel (kernel.maps.drain_next,
        an abi.Drain), before its end when the kernel asked (its buffer filled): marked and
        rolled up at once, so that only a drain's rows are held; the interval's rows merge them
        (rollup.merge). `folded`: the files the kernel folded at their close, per folder
        (`folded_files` in each row), their re-reads marked there."""
        self._drains.append(rollup.split(self.rereads.mark(files), with_rereads(folders),
                                         folded=None if folded is None else with_rereads(folded),
                                         folded_files=folded_files))
        self._drains_folders.append(folders)
        if folded_files is not None:
            self.rolled_up.kernel_folded += int(folded_files.sum())

    def _file_rows(self, files: np.ndarray, folders: np.ndarray, ts_ns: int,
                   folded: np.ndarray | None = None, folded_files: np.ndarray | None = None
                   ) -> list[FileRow]:
        """This interval's per-file rows, the files past rollup.KEEP_FILES per (process, op)
        added up per folder (and the kernel's own folder counts and folded files with them),
        and the folders past as many added up in their parents."""
        self.add_drain(files, folders, folded, folded_files)
        parts, kernel = self._drains, np.concatenate(self._drains_folders)
        self._drains, self._drains_folders = [], []
        own, folder_rows, n_files = parts[0] if len(parts) == 1 else rollup.merge(parts)
        folder_rows, n_files = rollup.fold_folders(folder_rows, n_files, self.files.parent)
        self.rolled_up.add(folder_rows, n_files, kernel)
        who: dict[int, tuple[str, str]] = {}  # pid -> (comm, role), looked up once per reading
        rows: list[FileRow] = []
        for counts, n, folder in itertools.chain(
                zip(own.tolist(), itertools.repeat(1), itertools.repeat(False)),
                zip(folder_rows.tolist(), n_files.tolist(), itertools.repeat(True))):
            (pid, dev, ino, gen, op_code, _buf, _pad, ops, nbytes, lat_sum, missed, dirtied,
             max_ns, dir_ino, _opens, _open_sum, _open_max, _size, reread, reread_pages) = counts
            op = abi.OPS.get(op_code, "other")
            info = (self.files.folder(dev, ino) if folder
                    else self.files.get(dev, ino, gen, pid, dir_ino))
            comm_role = who.get(pid)
            if comm_role is None:
                proc = self.processes.get(pid)
                comm_role = who[pid] = (self.files.redact.comm(proc.comm if proc else ""),
                                        role_of_pid(proc))
            hit = None
            if op == "read" and nbytes:
                hit = max(0.0, 1.0 - missed * PAGE_SIZE / nbytes) * 100.0
            rows.append({
                "ts": ts_ns, "pid": pid, "comm": comm_role[0], "role": comm_role[1],
                "path": info.path, "path_source": info.path_source, "fs_type": info.fs_type,
                "device": info.device, "inode": ino, "op": op, "file_count": n, "ops": ops,
                "bytes": nbytes, "latency_sum_ns": lat_sum, "latency_max_ns": max_ns,
                "pages_missed": missed, "pages_dirtied": dirtied, "cache_hit_pct": hit,
                "reread_bytes": reread if op == "read" else None,
                "reread_pages_missed": reread_pages if op == "read" else None,
            })
            tkey = (pid, dev, ino, FOLDER_GEN if folder else gen)
            t = self.file_totals.get(tkey)
            if t is None:
                t = self.file_totals[tkey] = FileTotals(dir_ino=ino if folder else dir_ino)
            t.add(op, ops, nbytes, lat_sum, missed, dirtied, max_ns)
        self.files.close_folders()
        if len(self.file_totals) > max(2 * MAX_FILE_TOTALS, self._fold_at):
            self.fold_file_totals()
            self._fold_at = 2 * len(self.file_totals)
        return rows

    def _size_of(self, pid: int, dev: int, ino: int, gen: int, dir_ino: int) -> int | None:
        """A file's size now, through the process's root (its mount namespace's view), or None
        when it cannot be found there as that inode."""
        path = self.files.get(dev, ino, gen, pid, dir_ino).path
        try:
            st = os.stat(f"/proc/{pid}/root{path}")
        except (OSError, ValueError):
            return None
        return st.st_size if st.st_ino == ino else None

    def fold_file_totals(self) -> None:
        """Keeps the MAX_FILE_TOTALS files with the most time in syscalls, the others added to
        their folders' totals, so that the summary's memory does not grow with the files read;
        past MAX_FOLDER_TOTALS folders, an exited process's folders are added to its training
        loop's (the main process or rank whose pid the summary then shows for them), so that it
        does not grow with the processes that came and went either."""
        files = [(k, t) for k, t in self.file_totals.items() if k[3] != FOLDER_GEN]
        files.sort(key=lambda kt: -kt[1].latency_sum_ns)
        for (pid, dev, _ino, _gen), t in files[MAX_FILE_TOTALS:]:
            key = (pid, dev, t.dir_ino, FOLDER_GEN)
            into = self.file_totals.get(key)
            if into is None:
                into = self.file_totals[key] = FileTotals(dir_ino=t.dir_ino)
            into.absorb(t)
        for k, _ in files[MAX_FILE_TOTALS:]:
            del self.file_totals[k]
        folders = [k for k in self.file_totals if k[3] == FOLDER_GEN]
        if len(folders) <= MAX_FOLDER_TOTALS:
            return
        owners = self.processes.owners()
        for k in folders:
            proc, owner = self.processes.get(k[0]), owners.get(k[0], k[0])
            if owner != k[0] and proc is not None and not proc.alive:
                t = self.file_totals.pop(k)
                into = self.file_totals.get((owner, k[1], k[2], FOLDER_GEN))
                if into is None:
                    into = self.file_totals[(owner, k[1], k[2], FOLDER_GEN)] = FileTotals(
                        dir_ino=t.dir_ino)
                into.absorb(t)

    def on_slow(self, ev: abi.SlowEvent, ts_ns: int) -> None:
        """A slow operation from the ring buffer (`ts_ns`: its start, UTC)."""
        proc = self.processes.get(ev.pid)
        path = (self.files.get(ev.file_dev, ev.ino, ev.file_gen, ev.pid, ev.dir_ino).path
                if ev.ino else None)
        device = device_name(ev.dev)  # syscall: the file system's device; block: the disk
        self.pending_events.append({
            "ts": ts_ns, "pid": ev.pid, "tid": ev.tid,
            "comm": self.files.redact.comm(ev.comm or (proc.comm if proc else "")),
            "role": role_of_pid(proc),
            "layer": ev.layer, "op": ev.op, "path": path, "device": device, "offset": ev.offset,
            "bytes": ev.bytes, "latency_ns": ev.latency_ns,
        })

    def _rows(self, key: Series, delta: np.ndarray, ts_ns: int) -> list[LatencyRow]:
        proc = self.processes.get(key.pid)
        comm = self.files.redact.comm(proc.comm if proc else "")  # roles: from the real name
        role = role_of_pid(proc)
        out: list[LatencyRow] = []
        for slot in np.flatnonzero(delta[0]):
            # Page-cache misses have no latency: their one slot is reported as [0, 0].
            lo, hi = (0, 0) if key.layer == "pagecache" else slot_bounds_ns(int(slot))
            out.append({
                "ts": ts_ns, "pid": key.pid, "comm": comm, "role": role, "layer": key.layer,
                "op": key.op, "target": key.target, "device": key.device,
                "attribution": key.attribution, "bucket_lo_ns": lo, "bucket_hi_ns": hi,
                "count": int(delta[0, slot]), "bytes": int(delta[1, slot]),
            })
        return out
