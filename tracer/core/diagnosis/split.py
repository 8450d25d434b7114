"""The loop-time split of one interval: where each training loop's time went, by state, and the
evidence the rules read later (`IntervalEvidence`).

The training loop is the main thread of each `main` (or `rank`) process. Its time in an
interval is split, in this order, into:
  checkpoint    it writes or fsyncs a large regular file (a checkpoint), or sleeps while a
                background saver (another thread, a child process) is blocked writing one
  sync_writes   it writes or fsyncs other files itself (logs, metrics)
  sync_loading  its process reads files itself (num_workers=0 loads batches this way)
  data_wait_*   it sleeps and a DataLoader worker or the pin-memory thread wakes it: waiting for
                a batch; split into _io, _cpu and _network by what the workers did meanwhile
                (blocked in D state on reads/page faults, on CPU, in socket reads); without
                workers, its own socket reads are data_wait_network
  collective_wait  a rank running gloo collectives sleeps, woken by its own threads
  device_copy   it is in a CUDA copy (a synchronous one, or a synchronisation that waited for a
                large async copy: `threads.device_copy_ns`), outside a save
  gpu_wait      it is in a CUDA synchronisation (`threads.gpu_wait_ns`): waits for its GPU
  compute       on CPU otherwise: the host's work (Python, kernel launches, CPU ops)
  other         the rest: runnable without a CPU, sleeps ended by anything else

What one interval's split needs of the ones before (bytes written per file, who woke the loop
lately, the syscall it is in, ...) is `SplitState`; everything else comes from the interval's
`IntervalInput`.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tracer.core.diagnosis.evidence import (
    Background,
    IntervalEvidence,
    code_samples,
    cpu_waits,
    disk_reads,
    reclaims,
)
from tracer.core.diagnosis.finding import STATES, LoopInterval
from tracer.core.diagnosis.fuse import FuseSample
from tracer.core.diagnosis.input import IntervalInput, Rank
from tracer.core.diagnosis.reads import NO_COUNTS, Reads, folder_files_of, is_library
from tracer.core.diagnosis.saves import SaveState, settle_owed, span_checkpoint_ns
from tracer.core.diagnosis.thresholds import MAX_READ_AHEAD, MAX_WRITTEN_FILES, Thresholds
from tracer.core.model import FileRow, LatencyRow, ThreadRow
from tracer.core.units import MAX_SLOTS, slot_of
from tracer.core.vocab import CHILD, DATALOADER_WORKER, LOOP_ROLES, RANK

# The `latency` rows the split reads (`socket_reads`, `_histograms`): reads, of these layers
# and targets (None: any). A replay gives it no others (report._table_rows).
LATENCY_READS: dict[str, tuple[str, ...] | None] = {"syscall": ("file", "socket"),
                                                    "block": None, "block_queue": None}
# Threads that a process group starts, by the names PyTorch and gloo give them: a rank that has
# one runs collectives with that backend.
COLLECTIVE_THREADS = {"gloo_tcp_loop": "gloo", "pt_gloo_runloop": "gloo",
                      "pt_nccl_watchdg": "nccl", "pt_nccl_heartbt": "nccl"}


@dataclass
class SplitState:
    """What the split of one interval carries over to the next, per main pid unless said."""

    # (main, path) -> bytes its loop's processes wrote to it so far: a checkpoint once large
    written_total: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))
    workers_seen: set[int] = field(default_factory=set)  # mains that had DataLoader workers
    # the last `wake_window` intervals' (sleep ended by a worker or the pin-memory thread,
    # sleep ended by anyone, sleep ended by its own threads), in ns
    wakes: dict[int, deque] = field(default_factory=dict)
    # the syscall its loop is in: (since, state charged, ns charged so far)
    in_flight: dict[int, tuple[int, str, int]] = field(default_factory=dict)
    # per (main, state), time charged while a syscall ran that its `files` rows, counting it
    # when it returns, still hold
    counted_early: dict[tuple[int, str], int] = field(default_factory=dict)
    # the start of the first interval in which one of its DataLoader workers ran, and of the
    # first that read its data (the start-up's end, docs/diagnosis.md)
    first_worker_ns: dict[int, int] = field(default_factory=dict)
    first_data_ns: dict[int, int] = field(default_factory=dict)
    collective: dict[int, str] = field(default_factory=dict)  # rank pid -> its backend
    background_savers: set[int] = field(default_factory=set)  # mains saving off the loop
    # (pid, path) -> bytes brought in by readahead that no read has used yet
    read_ahead: dict[tuple[int, str], int] = field(default_factory=dict)
    saves: SaveState = field(default_factory=SaveState)  # saves as spans (saves.py)


@dataclass
class _FileTimes:
    """One interval's `files` rows, per main: time in reads and writes, bytes written."""

    own_read: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    worker_read: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    proc_ckpt: dict[int, int] = field(default_factory=lambda: defaultdict(int))  # its process's
    proc_writes: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    written: dict[int, int] = field(default_factory=lambda: defaultdict(int))  # checkpoint bytes
    child_written: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    small: dict[int, dict[str, list[int]]] = field(default_factory=lambda: defaultdict(dict))


@dataclass
class _ThreadTimes:
    """One interval's `threads` rows, per main: its workers', other threads', children's."""

    worker_cpu: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    worker_io: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    worker_runnable: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    other_io: dict[int, int] = field(default_factory=lambda: defaultdict(int))  # non-loop D
    child_io: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    loops: dict[int, ThreadRow] = field(default_factory=dict)  # main -> its loop's row


@dataclass
class _SocketReads:
    """One interval's socket reads (`latency` rows), estimated from the histograms."""

    worker: dict[int, int]  # main -> its workers' time in them
    own: dict[int, int]  # main -> its own process's
    counts: dict[tuple[int, str], list[int]]  # (main, role) -> log2 slot counts
    bytes: dict[tuple[int, str], int]


@dataclass
class _LoopCharges:
    """Per main, the time its loop spent in its own file syscalls, and what a saver wrote."""

    ckpt: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    writes: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    saver_bytes: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    span: dict[int, int] = field(default_factory=lambda: defaultdict(int))  # in saves (saves.py)


def split(state: SplitState, inp: IntervalInput, t: Thresholds, page_size: int,
          ranks: Mapping[int, Rank], evidence: bool = True) -> IntervalEvidence | None:
    """The interval `inp` split (its loops' states) and what the rules keep of it; `state`
    carries over to the next interval. Without `evidence`, `state` only (None)."""
    ts_ns, interval_ns, owner = inp.ts_ns, inp.interval_ns, inp.owners
    files, threads, latency = list(inp.files), list(inp.threads), inp.latency
    ft = _file_times(state, t, files, owner)
    tt = _thread_times(state, threads, owner)
    net = socket_reads(latency, owner)
    charges = _loop_charges(state, ft, tt)
    for pid, th in tt.loops.items():
        charges.ckpt[pid], charges.writes[pid], ft.own_read[pid] = _as_it_passes(
            state, t, pid, th, ts_ns, interval_ns, charges.ckpt[pid], charges.writes[pid],
            ft.own_read[pid])
        charges.span[pid] = span_checkpoint_ns(state.saves, state.written_total, t, pid, th)
    for pid in set(state.in_flight) - set(tt.loops):  # no row: the loop is gone
        _ended(state, pid)
    loops, background, other_parts, saves = {}, {}, {}, {}
    for pid, th in tt.loops.items():
        ns, background_save, parts = _split_loop(state, t, pid, th, ft, tt, net, charges)
        moved, other_parts[pid] = settle_owed(state.saves, pid, ns, parts)
        if charges.span[pid] or moved:
            saves[pid] = (min(charges.span[pid], ns["checkpoint"]) + moved, charges.ckpt[pid])
        if background_save is not None:
            background[pid] = background_save
        loops[pid] = LoopInterval(ts_ns, pid, interval_ns, ns,
                                  ranks[pid].rank if pid in ranks else None)
    data, library, loop_time = _reads(state, t, page_size, ts_ns - interval_ns, files, threads,
                                      owner)
    if not evidence:
        return None
    read_counts, queue, service = _histograms(latency, owner)
    return IntervalEvidence(
        ts_ns=ts_ns, interval_ns=interval_ns, loops=loops, worker_oncpu_ns=dict(tt.worker_cpu),
        worker_iowait_ns=dict(tt.worker_io), worker_read_ns=dict(ft.worker_read),
        data={pid: r.frozen() for pid, r in data.items()},
        library={pid: r.frozen() for pid, r in library.items()}, loop_time=loop_time,
        written=dict(ft.written), read_counts=read_counts, read_max=read_max(files, owner),
        queue_counts=queue if any(queue) else NO_COUNTS,
        service_counts=service if any(service) else NO_COUNTS,
        device_util={d["device"]: d["util_pct"] for d in inp.devices},
        worker_net_ns=dict(net.worker), net_counts=net.counts, net_bytes=net.bytes,
        small_writes=dict(ft.small), background=background, other_parts=other_parts,
        memory={m["pid"]: m for m in inp.memory}, disk_reads=disk_reads(
            inp.device_users, (r["daemon_comm"] for r in inp.fuse if r["daemon_comm"])),
        saves=saves, cuda=cuda_calls(tt.loops), cpu=cpu_waits(inp.cpu_waits, threads, owner),
        reclaim=reclaims(threads, owner), fuse=tuple(FuseSample.of(r) for r in inp.fuse),
        code=code_samples(inp.stacks, owner)).compacted()


def _file_times(state: SplitState, t: Thresholds, files: list[FileRow],
                owner: Mapping[int, int]) -> _FileTimes:
    out = _FileTimes()
    for f in files:
        main = owner.get(f["pid"], f["pid"])
        if f["op"] == "read":
            if f["role"] in LOOP_ROLES:
                out.own_read[main] += f["latency_sum_ns"]
            elif f["role"] == DATALOADER_WORKER:
                out.worker_read[main] += f["latency_sum_ns"]
        elif (f["op"] in ("write", "fsync") and f["role"] in (*LOOP_ROLES, CHILD)
              and f.get("path_source") != "folder"):  # a checkpoint is one file
            key = (main, f["path"])
            state.written_total[key] += f["bytes"]
            ckpt = state.written_total[key] >= t.checkpoint_file_bytes
            if f["role"] == CHILD:
                out.child_written[main] += f["bytes"] if ckpt else 0
            elif ckpt:
                out.proc_ckpt[main] += f["latency_sum_ns"]
                out.written[main] += f["bytes"]
            else:
                out.proc_writes[main] += f["latency_sum_ns"]
                w = out.small[main].setdefault(f["path"], [0, 0, 0])
                if f["op"] == "write":
                    w[0] += f["ops"]
                else:
                    w[1] += f["ops"]
                    w[2] += f["latency_sum_ns"]
    if len(state.written_total) > MAX_WRITTEN_FILES:
        # Files short of a checkpoint's size and not written now are forgotten: a DataLoader
        # makes a few dozen semaphores in /dev/shm an epoch, and a run lasts days.
        now = {(owner.get(f["pid"], f["pid"]), f["path"]) for f in files}
        for key in [k for k, n in state.written_total.items()
                    if n < t.checkpoint_file_bytes and k not in now]:
            del state.written_total[key]
    return out


def _thread_times(state: SplitState, threads: list[ThreadRow],
                  owner: Mapping[int, int]) -> _ThreadTimes:
    out = _ThreadTimes()
    for th in threads:
        main = owner.get(th["pid"], th["pid"])
        if th["role"] == DATALOADER_WORKER:
            out.worker_cpu[main] += th["oncpu_ns"]
            out.worker_io[main] += th["iowait_ns"]
            out.worker_runnable[main] += th["runnable_ns"]
            state.workers_seen.add(main)
        elif th["role"] in LOOP_ROLES and th["tid"] == th["pid"]:
            out.loops[th["pid"]] = th
        elif th["role"] in LOOP_ROLES:
            out.other_io[main] += th["iowait_ns"]
            if th["role"] == RANK and th["comm"] in COLLECTIVE_THREADS:
                state.collective[main] = COLLECTIVE_THREADS[th["comm"]]
        elif th["role"] == CHILD:
            out.child_io[main] += th["iowait_ns"]
    return out


def socket_reads(latency: Iterable[LatencyRow], owner: Mapping[int, int]) -> _SocketReads:
    """Per main pid: its workers' time in socket reads and its own process's, estimated from
    the histograms (each read at the middle of its log2 slot: within a third), and the data's
    socket reads (the workers', or the main's without workers) as slot counts and bytes."""
    worker, own = defaultdict(int), defaultdict(int)
    counts: dict[tuple[int, str], list[int]] = {}
    nbytes: dict[tuple[int, str], int] = defaultdict(int)
    for r in latency:
        if (r["layer"] != "syscall" or r["op"] != "read" or r["target"] != "socket"
                or r["role"] not in (*LOOP_ROLES, DATALOADER_WORKER)):
            continue
        main = owner.get(r["pid"], r["pid"])
        ns = r["count"] * (r["bucket_lo_ns"] + r["bucket_hi_ns"]) // 2
        (worker if r["role"] == DATALOADER_WORKER else own)[main] += ns
        counts.setdefault((main, r["role"]), [0] * MAX_SLOTS)[slot_of(r["bucket_lo_ns"])] += (
            r["count"])
        nbytes[(main, r["role"])] += r["bytes"]
    return _SocketReads(worker, own, counts, dict(nbytes))


def _loop_charges(state: SplitState, ft: _FileTimes, tt: _ThreadTimes) -> _LoopCharges:
    """The `files` rows are per process: the part of its writes that is the loop's own is its
    share of the process's blocked (D) time (a saver thread blocks, a loop that keeps training
    does not); the rest was written by its other threads."""
    out = _LoopCharges()
    for pid, th in tt.loops.items():
        blocked = th["iowait_ns"] + tt.other_io[pid]
        mine = th["iowait_ns"] / blocked if blocked else 1.0
        out.ckpt[pid] = round(ft.proc_ckpt[pid] * mine)
        out.writes[pid] = round(ft.proc_writes[pid] * mine)
        written = ft.written[pid]
        out.saver_bytes[pid] = written - round(written * mine) + ft.child_written[pid]
        ft.written[pid] -= out.saver_bytes[pid] - ft.child_written[pid]
        if ft.proc_ckpt[pid] > out.ckpt[pid] or ft.child_written[pid]:
            state.background_savers.add(pid)
    return out


def _as_it_passes(state: SplitState, t: Thresholds, pid: int, th: ThreadRow, ts_ns: int,
                  interval_ns: int, ckpt_ns: int, writes_ns: int, read_ns: int
                  ) -> tuple[int, int, int]:
    """The loop's checkpoint and read time in this interval, counted as it passes: `files`
    rows count a syscall when it returns (a 2.5 s fsync all in the interval where it ends),
    while the time of the one the loop is in (its `threads` row) belongs to the intervals it
    spans. So that part is added now, and taken back from the `files` rows once the call has
    returned (in the interval where the loop is seen out of it, or the next: the files are
    read before the syscall in flight)."""
    op, since = th.get("syscall_op"), th.get("syscall_since")
    kind = None
    if op == "read":
        kind = "sync_loading"
    elif op in ("write", "fsync"):
        kind = ("checkpoint" if state.written_total.get((pid, th.get("syscall_path")), 0)
                >= t.checkpoint_file_bytes else "sync_writes")
    prev = state.in_flight.get(pid)
    if prev is not None and (kind is None or prev[0] != since):
        _ended(state, pid)
        prev = None
    part = 0
    if kind is not None:
        part = max(0, ts_ns - max(int(since), ts_ns - interval_ns))
        state.in_flight[pid] = (since, kind, (prev[2] if prev else 0) + part)
    out = {"checkpoint": ckpt_ns, "sync_writes": writes_ns, "sync_loading": read_ns}
    for k in out:
        owed = state.counted_early.get((pid, k), 0)
        if owed:
            paid = min(owed, out[k])
            out[k] -= paid
            state.counted_early[(pid, k)] = owed - paid
    if kind is not None:
        out[kind] += part
    return out["checkpoint"], out["sync_writes"], out["sync_loading"]


def _ended(state: SplitState, pid: int) -> None:
    """The syscall the loop was in has returned: its `files` rows will count all of it, of
    which the part already charged is to be taken back."""
    _since, kind, charged = state.in_flight.pop(pid)
    state.counted_early[(pid, kind)] = state.counted_early.get((pid, kind), 0) + charged


def _wake_shares(state: SplitState, t: Thresholds, pid: int, th: ThreadRow
                 ) -> tuple[bool, float, float]:
    """Whether this interval's wake-ups speak for its sleep, and the shares of the sleep that
    workers (or the pin-memory thread) and the loop's own threads ended.

    A sleep is credited to its waker when it ends, perhaps an interval or more after it began,
    while the sleep itself is counted as it passes: so the loop's sleep in this interval is
    split by who ended its sleeps here when those cover at least half of it (short waits for
    batches: the interval speaks for itself), else over the last few intervals (a wait still
    in progress goes the way the last ones went; an older window alone would lag behind a
    change, e.g. the workers' start)."""
    data = th["woken_by_worker_ns"] + th["woken_by_pin_ns"]
    woken = data + th["woken_by_own_ns"] + th["woken_by_other_ns"]
    recent = state.wakes.setdefault(pid, deque(maxlen=t.wake_window))
    recent.append((data, woken, th["woken_by_own_ns"]))
    speaks = bool(woken and 2 * woken >= th["sleep_ns"])
    if speaks:
        return speaks, data / woken, th["woken_by_own_ns"] / woken
    ended = sum(a for _, a, _ in recent)
    share = sum(d for d, _, _ in recent) / ended if ended else 0.0
    own_share = sum(o for _, _, o in recent) / ended if ended else 0.0
    return speaks, share, own_share


def _split_loop(state: SplitState, t: Thresholds, pid: int, th: ThreadRow, ft: _FileTimes,
                tt: _ThreadTimes, net: _SocketReads, charges: _LoopCharges
                ) -> tuple[dict[str, int], Background | None, tuple[int, int, int]]:
    """Loop `pid`'s time in this interval by state, the background save that held it, and
    what its `other` time was."""
    total = th["oncpu_ns"] + th["runnable_ns"] + th["sleep_ns"] + th["iowait_ns"]
    ns = dict.fromkeys(STATES, 0)
    ns["checkpoint"] = min(max(charges.ckpt[pid], charges.span[pid]), total)
    left = total - ns["checkpoint"]
    ns["sync_writes"] = min(charges.writes[pid], left)
    left -= ns["sync_writes"]
    ns["sync_loading"] = min(ft.own_read[pid], left)
    left -= ns["sync_loading"]
    sleep = th["sleep_ns"]
    if pid not in state.workers_seen:  # the loop fetches its data over the network
        ns["data_wait_network"] = min(net.own[pid], sleep, left)
        left -= ns["data_wait_network"]
        sleep -= ns["data_wait_network"]
    speaks, share, own_share = _wake_shares(state, t, pid, th)
    # While a background saver is blocked writing, the loop's sleeps that no worker ended are
    # waits for it (a join, the GIL it holds, a lock), up to its blocked time.
    saver_ns = tt.other_io[pid] + tt.child_io[pid] if pid in state.background_savers else 0
    background = None
    if saver_ns:
        waited = min(sleep - round(sleep * share) if speaks else sleep, saver_ns, left)
        ns["checkpoint"] += waited
        left -= waited
        sleep -= waited
        background = Background(saver_ns, waited, charges.saver_bytes[pid],
                                th["woken_by_own_ns"], th["woken_by_other_ns"],
                                bool(tt.child_io[pid]))
    left = _data_wait(ns, left, round(sleep * share), speaks, pid, tt, net)
    # A rank that runs collectives over gloo waits for its peers asleep, woken by its own
    # threads (measured: gloo's worker threads, themselves woken by its own threads, and its
    # TCP device loop, woken by the peer ranks' sends): its sleeps ended by its own threads
    # are that wait.
    if state.collective.get(pid) == "gloo":
        ns["collective_wait"] = min(round(sleep * own_share), left)
        left -= ns["collective_wait"]
    left = _cuda_calls(ns, th, left, charges.span[pid])
    ns["compute"] = min(th["oncpu_ns"], left)
    ns["other"] = left - ns["compute"]
    # what `other` was: runnable without a CPU, then sleeps by who ended them
    runnable = min(th["runnable_ns"], ns["other"])
    rest = ns["other"] - runnable
    own_woken, timer_woken = th["woken_by_own_ns"], th["woken_by_other_ns"]
    own_part = round(rest * own_woken / (own_woken + timer_woken)) if (
        own_woken + timer_woken) else 0
    return ns, background, (runnable, own_part, rest - own_part)


def _cuda_calls(ns: dict[str, int], th: ThreadRow, left: int, in_save: int) -> int:
    """Charges the loop's time in CUDA driver calls (its `threads` row: spinning or asleep,
    whichever way the driver waits) to device_copy and gpu_wait, at most `left`; returns what
    is left. A save's span holds its device copies (checkpoint time, charged already): up to
    the span's time in this interval (`in_save`) is taken out first, copies before waits. A
    thread without driver calls (null columns: no libcuda, a trace from before) has none."""
    copy, wait = th.get("device_copy_ns") or 0, th.get("gpu_wait_ns") or 0
    saved = min(in_save, copy + wait)
    copy_saved = min(copy, saved)
    copy, wait = copy - copy_saved, wait - (saved - copy_saved)
    ns["device_copy"] = min(copy, left)
    left -= ns["device_copy"]
    ns["gpu_wait"] = min(wait, left)
    return left - ns["gpu_wait"]


def cuda_calls(loops: Mapping[int, ThreadRow]) -> dict[int, tuple[int, int, int]]:
    """Per main: its loop's CUDA driver calls in the interval (synchronisations, copies,
    launches, -1 when launches are not counted), for the loops that have the columns."""
    out = {}
    for pid, th in loops.items():
        if th.get("cuda_syncs") is not None:
            launches = th.get("cuda_launches")
            out[pid] = (th["cuda_syncs"], th.get("cuda_copies") or 0,
                        -1 if launches is None else launches)
    return out


def _data_wait(ns: dict[str, int], left: int, wait: int, speaks: bool, pid: int,
               tt: _ThreadTimes, net: _SocketReads) -> int:
    """Charges the loop's wait for batches (`wait` of its sleep, at most `left`) to
    data_wait_io, _network and _cpu by what its workers did meanwhile; returns what is left."""
    wait = min(wait, left)
    io, cpu, sock = tt.worker_io[pid], tt.worker_cpu[pid], net.worker[pid]
    if not speaks:  # the window's guess: no more than the workers were doing
        wait = min(wait, io + cpu + sock + tt.worker_runnable[pid])
    busy = io + cpu + sock
    io_part = round(wait * io / busy) if busy else 0
    net_part = round(wait * sock / busy) if busy else 0
    ns["data_wait_io"] = io_part
    ns["data_wait_network"] += net_part
    ns["data_wait_cpu"] = wait - io_part - net_part
    return left - wait


def _histograms(latency: Iterable[LatencyRow], owner: Mapping[int, int]
                ) -> tuple[dict[tuple[int, str], list[int]], list[int], list[int]]:
    """The file reads' log2 slot counts per (main, role); block reads' queue and service."""
    read_counts: dict[tuple[int, str], list[int]] = {}
    queue, service = [0] * MAX_SLOTS, [0] * MAX_SLOTS
    for r in latency:
        slot = slot_of(r["bucket_lo_ns"])
        if r["layer"] == "syscall" and r["op"] == "read" and r["target"] == "file":
            key = (owner.get(r["pid"], r["pid"]), r["role"])
            read_counts.setdefault(key, [0] * MAX_SLOTS)[slot] += r["count"]
        elif r["layer"] == "block_queue" and r["op"] == "read":
            queue[slot] += r["count"]
        elif r["layer"] == "block" and r["op"] == "read":
            service[slot] += r["count"]
    return read_counts, queue, service


def read_max(files: list[FileRow], owner: Mapping[int, int]
             ) -> dict[tuple[int, str], tuple[int, int]]:
    """(main pid, role) -> (file reads, the slowest in ns; -1 when a row does not know it)."""
    out: dict[tuple[int, str], tuple[int, int]] = {}
    for f in files:
        if f["op"] == "read" and f["ops"]:
            key = (owner.get(f["pid"], f["pid"]), f["role"])
            ops, top = out.get(key, (0, 0))
            known = f["latency_max_ns"] > 0 and top >= 0
            out[key] = (ops + f["ops"], max(top, f["latency_max_ns"]) if known else -1)
    return out


def _reads(state: SplitState, t: Thresholds, page_size: int, begin_ns: int,
           files: list[FileRow], threads: list[ThreadRow], owner: Mapping[int, int]
           ) -> tuple[dict[int, Reads], dict[int, Reads], dict[int, tuple[int, int, int]]]:
    """Per main pid: its processes' reads of the data set and of library/system files, its
    loop's time; and the signals that its start-up ended (with the interval's start)."""
    data: dict[int, Reads] = {}
    library: dict[int, Reads] = {}
    for f in files:
        main = owner.get(f["pid"], f["pid"])
        lib = is_library(f["path"], f["fs_type"])
        if f["op"] == "open" and not lib:
            data.setdefault(main, Reads()).opens += f["ops"]
        if f["op"] != "read":
            continue
        missed = _missed(state, page_size, f)
        if missed is None:
            continue
        # a later pass's reads: their misses at most their bytes (no carry: a share of them)
        reread = f.get("reread_bytes") or 0
        reread_missed = min((f.get("reread_pages_missed") or 0) * page_size, reread)
        if lib:
            if main not in state.first_worker_ns:  # kept for the start-up's summary only
                # every path: the start-up's summary counts distinct files, and it ends
                library.setdefault(main, Reads()).add(f["path"], f["fs_type"], f["bytes"],
                                                      missed, folder_files_of(f), None)
        else:
            data.setdefault(main, Reads()).add(f["path"], f["fs_type"], f["bytes"], missed,
                                               folder_files_of(f), reread=reread,
                                               reread_missed=reread_missed)
    for main, r in data.items():
        if (main not in state.first_data_ns and (r.file_count() >= t.startup_data_files
                                                 or r.bytes >= t.startup_data_bytes)):
            state.first_data_ns[main] = begin_ns
    loop_time = {}
    for th in threads:
        main = owner.get(th["pid"], th["pid"])
        if th["role"] == DATALOADER_WORKER:
            state.first_worker_ns.setdefault(main, begin_ns)
        elif th["role"] in LOOP_ROLES and th["tid"] == th["pid"]:
            loop_time[main] = (th["oncpu_ns"], th["iowait_ns"], th["sleep_ns"])
    return data, library, loop_time


def _missed(state: SplitState, page_size: int, f: FileRow) -> int | None:
    """The bytes of read row `f` that came from disk; None for a row without bytes.

    Readahead brings whole pages ahead of the reads: counted as bytes, at most the bytes read,
    so that a share from disk stays a share; pages not yet read count for the next reads of
    the file. A row without bytes has pages brought in for a read still in progress (its bytes
    come next interval) or faulted in through a mapping (a library's, no read's miss): kept
    for the file's next reads either way."""
    key = (f["pid"], f["path"])
    ahead = state.read_ahead.pop(key, 0) + f["pages_missed"] * page_size
    if not f["bytes"]:
        if ahead and len(state.read_ahead) < MAX_READ_AHEAD:
            state.read_ahead[key] = ahead
        return None
    missed = min(ahead, f["bytes"])
    if ahead > missed and len(state.read_ahead) < MAX_READ_AHEAD:
        state.read_ahead[key] = ahead - missed
    return missed
