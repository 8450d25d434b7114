"""Chrome trace JSON for Perfetto: ``iotrace export DIR --perfetto OUT.json [--merge KINETO.json]``.

`export_perfetto` writes a trace directory as a Chrome trace (the Trace Event Format's JSON object
form), which ui.perfetto.dev and chrome://tracing open:

- one process per traced PID, named ``"<comm> (<role>) <pid>"``, sorted with the main processes
  first, then DataLoader workers (by generation and index), then other children; each has a
  ``lifetime`` track (one slice from first seen to exit);
- the training loop's state on a ``training loop`` track of its process: consecutive intervals
  with the same dominant state are one slice, named after the state, with the nanoseconds of
  each state in its args;
- slow I/O operations (the ``events`` table) as slices on ``slow <layer> ops`` tracks of their
  process. Perfetto and chrome://tracing need the slices of one track to nest, and slow
  operations overlap (block requests always do), so each layer gets as many tracks (lanes,
  ``#2``, ``#3``, ...) as it has operations in flight at once: an operation goes on the first
  lane that is free when it starts;
- counters (``C`` events) of file read and write throughput per role, bytes per second of each
  interval (the ``files`` table's bytes of the interval divided by its length), in an
  ``I/O throughput`` process, and of GPU utilisation per GPU in a ``GPUs`` process, which also
  holds the GPU idle spans (named after their cause) on a ``GPU <n> idle`` track per GPU;
- the Python stacks sampled (the ``stacks`` table) as 1 ms slices on ``Python stacks`` tracks
  of their process, named after the user's line, the whole stack and the reason in the args.

Times are microseconds (``ts``, ``dur``) since a zero recorded in the JSON's ``otherData``
(``iotrace_zero_ns``: ns since the Unix epoch, UTC; ``iotrace_zero_utc``): the trace's start
(``meta.json``'s ``start_ns``), or the earliest timestamp in its tables if that is earlier. Each
value has nanosecond precision and is written so that Perfetto's importer, which truncates
``ts * 1000``, reads back exactly the nanosecond it stands for (slices that touch never overlap).

``merge=KINETO.json`` adds all this to a PyTorch profiler (Kineto) trace instead: every original
event and top-level key is kept as it was, and iotrace's tracks go into one extra process named
``iotrace`` (pid `IOTRACE_PID`, far above any Linux PID and away from Kineto's; thread ids from
`_TID_BASE`), whose track names start with the process they belong to. Kineto writes ``ts`` in
microseconds relative to ``baseTimeNanoseconds`` (a top-level key: the Unix time in ns of the
profiler's system clock, floored to a multiple of three months, 7,889,238 s), so iotrace's
events get ``ts = (t_ns - baseTimeNanoseconds) / 1000``: both sides are wall-clock (UTC) times.
Traces without ``baseTimeNanoseconds``: when their ``ts`` are at least 10^15 µs they are
absolute Unix microseconds (what Kineto wrote before it had the key), otherwise the base is
recomputed the way Kineto does, from the iotrace trace's start (the three-month boundary
before it, or the one before or after, whichever puts the profile inside the trace). iotrace
data earlier than the base is left out (Chrome trace readers reject negative times). A profile
that does not overlap the iotrace trace at all is refused: it was not recorded during it.

Errors: a trace that cannot be read raises `tracer.TraceError` with one line saying what is
wrong (a table with damaged or foreign segments names each of them, see `segment_problems`); a
Kineto file that cannot be read, is not JSON or not a trace raises `KinetoError` (a ValueError);
failing to write the output raises OSError.
"""

from __future__ import annotations

import datetime as dt
import gzip
import heapq
import json
import math
import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from tracer.core.vocab import AGENT, CHILD, CUDA_STATES, DATALOADER_WORKER, LOOP_STATES, MAIN, RANK
from tracer.tracedir.private import open_private
from tracer.tracedir.reader import TraceError, TraceReader, load
from tracer.tracedir.segments import _first_line, segment_problems

IOTRACE_PID = 0x7A00_0000
"""pid of the ``iotrace`` process in a merged trace (Linux PIDs stay below 2^22)."""
_PSEUDO_PID_BASE = 0x7A00_0100
"""pids of the ``I/O throughput`` and ``GPUs`` processes of a standalone export."""
_TID_BASE = 0x7B00_0000
"""Thread ids of iotrace's tracks: unique in the whole file (Perfetto names threads by tid)."""
_ABSOLUTE_US = 1e15
"""A Kineto ``ts`` at least this large is absolute Unix time in µs (after September 2001)."""
KINETO_BASE_PERIOD_NS = 7_889_238 * 10**9
"""Kineto floors ``baseTimeNanoseconds`` to a multiple of three months (7,889,238 s)."""
_ALIGN_SLACK_NS = 10**9
"""How far outside the iotrace trace a merged profile may start or end and still overlap it."""

_ROLE_ORDER = {MAIN: 0, RANK: 0, AGENT: 2, DATALOADER_WORKER: 3, CHILD: 4}
_LAYER_ORDER = {"syscall": 0, "block_queue": 1, "block": 2, "pagecache": 3}
_SORT_THROUGHPUT, _SORT_GPU, _SORT_OTHERS = 1000, 1001, 2000
"""Process sort indices: main processes (0, 1, ...), then these groups, then the other PIDs."""

_NEEDED: dict[str, tuple[str, ...]] = {
    "processes": ("pid", "ppid", "comm", "role", "cmdline", "first_seen", "exit", "exit_code",
                  "worker_generation", "worker_index"),
    "loop": ("ts", "pid", "interval_ns", "state", *(f"{s}_ns" for s in LOOP_STATES)),
    "events": ("ts", "pid", "tid", "comm", "role", "layer", "op", "path", "device", "offset",
               "bytes", "latency_ns"),
    "files": ("ts", "pid", "role", "op", "bytes"),
    "stacks": ("taken", "pid", "tid", "reason", "depth", "file", "line", "function", "user", "text"),
    "gpu": ("ts", "gpu", "util_pct", "sample_period_ns"),
    "gpu_idle": ("start", "end", "duration_ns", "gpu", "pid", "cause", "coverage", "confidence",
                 *(f"{s}_frac" for s in LOOP_STATES)),
}
"""The tables the export reads and the columns it uses of each."""


class KinetoError(ValueError):
    """The file given to merge into is not a readable Chrome/Kineto trace (one line: why)."""


# -- the entry point ---------------------------------------------------------------------------


def export_perfetto(
    trace: TraceReader | str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    merge: str | os.PathLike[str] | None = None,
) -> Path:
    """Write `trace` (a `Trace` or a trace directory) as Chrome trace JSON to `out_path`.

    With `merge`, the path of a PyTorch profiler (Kineto) trace JSON (gzip allowed), write that
    trace with iotrace's tracks added in a process named ``iotrace``, aligned by wall clock (see
    the module's documentation). `out_path` is written atomically; a name ending in ``.gz`` is
    gzip-compressed. It may be the `merge` file itself. Returns `out_path` as a Path.

    Raises TraceError (the trace cannot be read, or holds nothing to export), KinetoError (a
    ValueError: `merge` is not a readable trace, or was not recorded during this trace) or
    OSError (`out_path` cannot be written); every message is one line.
    """
    if not isinstance(trace, TraceReader):
        trace = load(trace)
    out = Path(out_path)
    kineto = read_kineto(merge) if merge is not None else None
    timeline = _Timeline(single="iotrace" if kineto is not None else None)
    if kineto is not None:
        timeline.avoid(*_ids_in(kineto["traceEvents"]))
    _collect(trace, timeline)
    if timeline.empty:
        raise TraceError(
            f"trace {str(trace.directory)!r} holds nothing to export: no processes, training loop, "
            f"slow operations, file I/O or GPU samples (the tracer may have stopped before "
            f"writing its first segment)"
        )
    first, last = timeline.span()
    other = _other_data(trace)
    if kineto is None:
        zero = first if trace.start_ns is None else min(trace.start_ns, first)
        other["iotrace_time_base"] = ("ts: microseconds since iotrace_zero_ns (ns since the Unix "
                                      "epoch, UTC), the trace's start")
        doc: dict = {"traceEvents": timeline.events(zero), "displayTimeUnit": "ms"}
    else:
        start = trace.start_ns if trace.start_ns is not None else first
        stop = max(last, trace.stop_ns or last)
        zero, how = kineto_base_ns(kineto, start, stop, str(merge))
        other["iotrace_time_base"] = (
            f"ts: microseconds since iotrace_zero_ns (ns since the Unix epoch, UTC), the Kineto "
            f"trace's base time ({how})")
        doc = kineto
        doc["traceEvents"].extend(timeline.events(zero))
        if timeline.dropped:
            other["iotrace_left_out"] = (f"{timeline.dropped} iotrace slices and counter values "
                                         f"earlier than the Kineto base time")
    other["iotrace_zero_ns"] = zero
    other["iotrace_zero_utc"] = _utc(zero)
    existing = doc.get("otherData")
    if isinstance(existing, dict):
        existing.update(other)
    elif existing is None:
        doc["otherData"] = other
    else:
        doc["iotrace"] = other
    _write_json(out, doc, allow_nan=kineto is not None)
    return out


# -- reading the trace -------------------------------------------------------------------------


def _table(trace: TraceReader, name: str) -> pd.DataFrame:
    """Table `name` of `trace`, with a one-line TraceError naming each segment that is unusable."""
    folder = trace.directory / name
    columns = _NEEDED[name]
    problems = segment_problems(folder, name, columns)
    if not problems:
        try:
            frame = trace[name]
        except TraceError:
            problems = segment_problems(folder, name, columns, read_data=True)
            if not problems:
                raise
    if problems:
        total = len(list(folder.glob("part-*.parquet")))
        listed = "; ".join(f"{p.name}: {why}" for p, why in problems)
        raise TraceError(
            f"table {name!r} of trace {str(trace.directory)!r} has {len(problems)} unusable "
            f"segment{'s' if len(problems) > 1 else ''} of {total} ({listed}); move "
            f"{'them' if len(problems) > 1 else 'it'} out of {str(folder)!r} to export the rest"
        ) from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:  # e.g. a table read through a Trace whose cache was filled by other means
        raise TraceError(f"table {name!r} of trace {str(trace.directory)!r} has no column "
                         f"{', '.join(missing)}; it was not written by this iotrace")
    return frame


def _ns(values: pd.Series) -> pd.Series:
    """A timestamp column as int64 ns since the Unix epoch (NaT stays missing: <NA>)."""
    stamps = pd.to_datetime(values, utc=True).dt.as_unit("ns")
    out = pd.Series(stamps.array.asi8, index=values.index, dtype="Int64")
    return out.mask(stamps.isna())


def _text(value: object) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return None
    return str(value)


def _int(value: object) -> int | None:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return int(value)


def _num(value: object) -> float | None:
    if value is None or value is pd.NA:
        return None
    value = float(value)
    return None if math.isnan(value) or math.isinf(value) else value


# -- building the tracks -----------------------------------------------------------------------


class _Timeline:
    """Processes (groups), tracks, slices and counters, in ns, laid out as Chrome trace events.

    Standalone, each group is a process (a traced PID keeps its pid; the others get pids from
    `_PSEUDO_PID_BASE`). With `single`, all groups are tracks of one process of that name, and
    track names start with their group's name.
    """

    def __init__(self, single: str | None = None) -> None:
        self.single = single
        self.pid = IOTRACE_PID
        self._next_pseudo = _PSEUDO_PID_BASE
        self._next_tid = _TID_BASE
        self._taken_pids: set[int] = set()
        self._taken_tids: set[int] = set()
        self._groups: dict[object, tuple[int, str, int]] = {}  # key -> pid, name, sort
        self._meta: list[dict] = []
        self._items: list[tuple[int, int, dict]] = []  # (start ns, end ns or -1, event)
        self.dropped = 0

    def avoid(self, pids: set[int], tids: set[int]) -> None:
        """Never use these pids and tids (those of a trace merged into)."""
        self._taken_pids |= pids
        self._taken_tids |= tids
        while self.pid in self._taken_pids:
            self.pid += 1

    @property
    def empty(self) -> bool:
        return not self._items

    def group(self, key: object, name: str, sort: int, pid: int | None = None) -> None:
        """Declare group `key` (once): a process named `name`, `sort` its place (lowest first)."""
        if key in self._groups:
            return
        if self.single is not None:
            self._groups[key] = (self.pid, name, sort)
            return
        if pid is None:
            while self._next_pseudo in self._taken_pids:
                self._next_pseudo += 1
            pid = self._next_pseudo
            self._next_pseudo += 1
        self._taken_pids.add(pid)
        self._groups[key] = (pid, name, sort)
        self._meta += [
            {"ph": "M", "ts": 0, "pid": pid, "tid": 0, "name": "process_name",
             "args": {"name": name}},
            {"ph": "M", "ts": 0, "pid": pid, "tid": 0, "name": "process_sort_index",
             "args": {"sort_index": sort}},
        ]

    def track(self, key: object, name: str, sort: int) -> tuple[int, int]:
        """A new thread track named `name` in group `key`; returns its (pid, tid)."""
        pid, group_name, group_sort = self._groups[key]
        while self._next_tid in self._taken_tids:
            self._next_tid += 1
        tid = self._next_tid
        self._next_tid += 1
        if self.single is not None:
            name, sort = f"{group_name}: {name}", group_sort * 100_000 + sort
        self._meta += [
            {"ph": "M", "ts": 0, "pid": pid, "tid": tid, "name": "thread_name",
             "args": {"name": name}},
            {"ph": "M", "ts": 0, "pid": pid, "tid": tid, "name": "thread_sort_index",
             "args": {"sort_index": sort}},
        ]
        return pid, tid

    def slice(self, track: tuple[int, int], start: int, end: int, name: str, cat: str,
              args: dict) -> None:
        """A complete ("X") slice on `track` from `start` to `end` (ns since the epoch)."""
        pid, tid = track
        self._items.append((start, max(start, end), {
            "ph": "X", "pid": pid, "tid": tid, "name": name, "cat": cat,
            "args": {k: v for k, v in args.items() if v is not None}}))

    def counter(self, key: object, ts: int, name: str, args: dict) -> None:
        """A counter ("C") value of group `key` from `ts` on (ns since the epoch)."""
        pid = self._groups[key][0]
        self._items.append((ts, -1, {"ph": "C", "pid": pid, "tid": pid, "name": name,
                                     "cat": "iotrace", "args": args}))

    def lanes(self, key: object, name: str, sort: int,
              spans: list[tuple[int, int, str, str, dict]]) -> None:
        """Slices `spans` (start, end, name, cat, args) on as few tracks as keep each one nested:
        a span goes on the first track (``name``, ``name #2``, ...) that is free at its start."""
        spans = sorted(spans, key=lambda s: (s[0], s[1]))
        tracks: list[tuple[int, int]] = []
        free: list[int] = []  # lane numbers free now (heap)
        busy: list[tuple[int, int]] = []  # (end, lane) (heap)
        for start, end, label, cat, args in spans:
            while busy and busy[0][0] <= start:
                heapq.heappush(free, heapq.heappop(busy)[1])
            if free:
                lane = heapq.heappop(free)
            else:
                lane = len(tracks)
                tracks.append(self.track(key, name if lane == 0 else f"{name} #{lane + 1}",
                                         sort + lane))
            self.slice(tracks[lane], start, end, label, cat, args)
            heapq.heappush(busy, (max(start, end), lane))

    def span(self) -> tuple[int, int]:
        """The earliest and latest ns of any slice or counter."""
        return (min(s for s, _, _ in self._items),
                max(max(s, e) for s, e, _ in self._items))

    def events(self, zero: int) -> list[dict]:
        """Every event, times in µs since `zero` (ns); metadata first, then by time. What lies
        before `zero` is left out (counted in `dropped`): slices that end by then, and counter
        values but the last, which moves to `zero`; slices across `zero` start there."""
        out = list(self._meta)
        if self.single is not None:
            out[:0] = [
                {"ph": "M", "ts": 0, "pid": self.pid, "tid": 0, "name": "process_name",
                 "args": {"name": self.single}},
                {"ph": "M", "ts": 0, "pid": self.pid, "tid": 0, "name": "process_labels",
                 "args": {"labels": "eBPF I/O trace"}},
                {"ph": "M", "ts": 0, "pid": self.pid, "tid": 0, "name": "process_sort_index",
                 "args": {"sort_index": (1 << 29) - 1}},
            ]
        self.dropped = 0
        items = sorted(self._items, key=lambda i: (i[0], -i[1]))
        # A counter's last value before zero still holds at zero: it moves there (unless the
        # counter has a value at zero itself); the earlier ones are left out.
        at_zero = {(e["pid"], e["name"]) for s, end, e in items if end < 0 and s == zero}
        last_before: dict[tuple, int] = {}
        for i, (s, end, e) in enumerate(items):
            if end < 0 and s < zero and (e["pid"], e["name"]) not in at_zero:
                last_before[(e["pid"], e["name"])] = i
        keep = set(last_before.values())
        for i, (start, end, event) in enumerate(items):
            if end < 0 and start < zero and i not in keep:
                self.dropped += 1
                continue
            if end >= 0 and start < zero and end <= zero:  # a slice over before zero
                self.dropped += 1
                continue
            start = max(start, zero)
            ts = _us(start - zero)
            timed = {"ph": event["ph"], "ts": ts}
            if end >= 0:
                # The duration as the reader will see it: end minus start, each as read back.
                # Both are exact below about 100 days from zero; beyond, times are rounded
                # (floats of µs since 1970 hold about 0.25 µs) but still never break nesting.
                timed["dur"] = _us(max(0, _read_ns(_us(end - zero)) - _read_ns(ts)))
            timed.update((k, v) for k, v in event.items() if k != "ph")
            out.append(timed)
        return out


def _us(ns: int) -> int | float:
    """`ns` nanoseconds as microseconds, exact: Perfetto's importer computes ``int(us * 1000)``
    (truncating), so a float is nudged up to the nearest one that reads back as `ns`."""
    if ns % 1000 == 0:
        return ns // 1000
    us = ns / 1000
    for _ in range(16):
        if int(us * 1000.0) >= ns:
            break
        us = math.nextafter(us, math.inf)
    return us


def _read_ns(us: int | float) -> int:
    """What Perfetto's importer reads for a JSON time `us` (µs): integer nanoseconds."""
    return int(us * 1000.0) if isinstance(us, float) else us * 1000


def _collect(trace: TraceReader, timeline: _Timeline) -> None:
    processes = _table(trace, "processes")
    loop = _table(trace, "loop")
    events = _table(trace, "events")
    files = _table(trace, "files")
    gpu = _table(trace, "gpu")
    gpu_idle = _table(trace, "gpu_idle")
    end_of_trace = _end_of_trace(trace, [(loop, "ts"), (events, "ts"), (files, "ts"),
                                         (gpu, "ts"), (gpu_idle, "end")])

    # Processes: every traced PID, plus any PID the other tables name.
    procs: dict[int, dict] = {}
    if not processes.empty:
        p = processes.assign(first_ns=_ns(processes["first_seen"]), exit_ns=_ns(processes["exit"]))
        for r in p.drop_duplicates("pid", keep="last").itertuples(index=False):
            procs[int(r.pid)] = {
                "comm": _text(r.comm) or "?", "role": _text(r.role), "ppid": _int(r.ppid),
                "cmdline": _text(r.cmdline), "first": _int(r.first_ns), "exit": _int(r.exit_ns),
                "exit_code": _int(r.exit_code),
                "exit_signal": _int(getattr(r, "exit_signal", None)), "generation": _int(r.worker_generation),
                "index": _int(r.worker_index), "rank": _int(getattr(r, "rank", None))}
    for frame in (events, loop):
        if frame.empty:
            continue
        cols = [c for c in ("pid", "comm", "role") if c in frame.columns]
        for r in frame[cols].drop_duplicates("pid").itertuples(index=False):
            pid = int(r.pid)
            if pid not in procs:
                role = _text(getattr(r, "role", None)) or (MAIN if frame is loop else None)
                procs[pid] = {"comm": _text(getattr(r, "comm", None)) or "?", "role": role}

    def order(pid: int) -> tuple:
        p = procs[pid]
        role_rank = _ROLE_ORDER.get(p.get("role") or "", 5)
        # ranks in rank order, each one's group next to the others'
        rank = p.get("rank") if p.get("role") == RANK and p.get("rank") is not None else -1
        return (role_rank, rank, p.get("generation") if p.get("generation") is not None else -1,
                p.get("index") if p.get("index") is not None else -1, pid)

    for rank, pid in enumerate(sorted(procs, key=order)):
        p = procs[pid]
        sort = rank if p.get("role") in (MAIN, RANK) else _SORT_OTHERS + rank
        name = (f"rank {p['rank']}" if p.get("role") == RANK and p.get("rank") is not None
                else p.get("role") or "unknown role")
        timeline.group(("pid", pid), f"{p['comm']} ({name}) {pid}",
                       sort, pid=pid)
        if p.get("first") is not None:
            end = p["exit"] if p.get("exit") is not None else max(end_of_trace, p["first"])
            track = timeline.track(("pid", pid), "lifetime", 0)
            timeline.slice(track, p["first"], end, f"{p['comm']} {pid}", "iotrace.process", {
                "pid": pid, "ppid": p.get("ppid"), "role": p.get("role"),
                "cmdline": p.get("cmdline"), "exit_code": p.get("exit_code"),
                "exit_signal": p.get("exit_signal"),
                "worker_generation": p.get("generation"), "worker_index": p.get("index"),
                "exited": p.get("exit") is not None})

    _loop_slices(loop, timeline)
    _slow_ops(events, timeline)
    _stacks(_table(trace, "stacks"), timeline)
    _throughput(trace, files, loop, timeline)
    _gpu(gpu, gpu_idle, timeline)


def _end_of_trace(trace: TraceReader, columns: list[tuple[pd.DataFrame, str]]) -> int:
    latest = [int(_ns(f[c]).max()) for f, c in columns if not f.empty and _ns(f[c]).notna().any()]
    if trace.stop_ns is not None:
        latest.append(trace.stop_ns)
    if not latest and trace.start_ns is not None:
        latest.append(trace.start_ns)
    return max(latest, default=0)


def _loop_slices(loop: pd.DataFrame, timeline: _Timeline) -> None:
    """The training loop's dominant state per interval; equal neighbours merged into one slice."""
    if loop.empty:
        return
    frame = loop.assign(end_ns=_ns(loop["ts"])).dropna(subset=["end_ns"])
    state_cols = [f"{s}_ns" for s in LOOP_STATES]
    cuda_cols = {f"{s}_ns" for s in CUDA_STATES}
    for pid, rows in frame.groupby("pid", sort=True):
        runs: list[dict] = []
        prev_end: int | None = None
        for r in rows.sort_values("end_ns", kind="stable").itertuples(index=False):
            end = int(r.end_ns)
            start = end - max(int(r.interval_ns), 0)
            if prev_end is not None:
                start = max(start, prev_end)  # never overlap the previous interval
            if end <= start:
                continue
            state = _text(r.state) or "unknown"
            # the CUDA states only where the loop had them (null in older traces)
            spent = {c: int(v) for c in state_cols if not pd.isna(v := getattr(r, c))
                     and (v or c not in cuda_cols)}
            run = runs[-1] if runs else None
            if run is not None and run["state"] == state and run["end"] == start:
                run["end"], run["n"] = end, run["n"] + 1
                run["ns"] = {c: run["ns"].get(c, 0) + spent.get(c, 0) for c in state_cols
                             if c in run["ns"] or c in spent}
            else:
                runs.append({"state": state, "start": start, "end": end, "n": 1, "ns": spent})
            prev_end = end
        track = timeline.track(("pid", int(pid)), "training loop", 1)
        for run in runs:
            timeline.slice(track, run["start"], run["end"], run["state"], "iotrace.loop",
                           {"intervals": run["n"], **run["ns"]})


def _slow_ops(events: pd.DataFrame, timeline: _Timeline) -> None:
    """Each slow operation as a slice on its process's lanes for its layer."""
    if events.empty:
        return
    frame = events.assign(start_ns=_ns(events["ts"])).dropna(subset=["start_ns"])
    frame = frame.astype({c: object for c in ("layer", "op", "path", "device", "comm", "role")})
    for (pid, layer), rows in frame.groupby(["pid", "layer"], sort=True, dropna=False):
        layer = _text(layer) or "other"
        spans = []
        for r in rows.itertuples(index=False):
            start, latency = int(r.start_ns), max(int(r.latency_ns), 0)
            path, device, op = _text(r.path), _text(r.device), _text(r.op) or "op"
            where = path.rsplit("/", 1)[-1] if path else (device or "?")
            spans.append((start, start + latency, f"{op} {where}", f"iotrace.slow_io.{layer}", {
                "layer": layer, "op": op, "path": path, "device": device, "bytes": _int(r.bytes),
                "offset": _int(r.offset), "latency_ns": latency, "tid": _int(r.tid),
                "comm": _text(r.comm)}))
        rank = _LAYER_ORDER.get(layer, len(_LAYER_ORDER))
        timeline.lanes(("pid", int(pid)), f"slow {layer} ops", 100 + 1000 * rank, spans)


def _stacks(stacks: pd.DataFrame, timeline: _Timeline) -> None:
    """Each Python stack sample as a 1 ms slice on its process's lanes, named after its line."""
    frame = stacks.assign(taken_ns=_ns(stacks["taken"])).sort_values(["taken_ns", "tid", "depth"])
    for pid, rows in frame.groupby("pid", sort=True):
        if ("pid", int(pid)) not in timeline._groups:  # a process the trace does not name
            continue
        spans = []
        for (taken, tid), sample in rows.groupby(["taken_ns", "tid"], sort=True):
            chosen = sample[sample.user]
            top = (chosen if len(chosen) else sample).iloc[0]
            stack = [f"{_text(r.file)}:{int(r.line)} {_text(r.function)}"
                     for r in sample.itertuples(index=False)]
            spans.append((int(taken), int(taken) + 1_000_000,
                          f"{str(top.file).rsplit('/', 1)[-1]}:{int(top.line)} {top.function}",
                          "iotrace.stacks", {"reason": _text(sample.reason.iloc[0]),
                                             "tid": int(tid), "text": _text(top.text),
                                             "stack": stack}))
        timeline.lanes(("pid", int(pid)), "Python stacks", 50, spans)


def _interval_lengths(trace: TraceReader, ends: Iterable[int], loop: pd.DataFrame) -> dict[int, int]:
    """Length in ns of each interval, by its end: the loop table's ``interval_ns`` where it has
    one; else the time since the previous interval end (or the trace's start) when that is at
    most 1.5 nominal intervals; else the nominal interval (``meta.json``'s ``interval_s``)."""
    nominal = int(float(trace.meta.get("interval_s") or 1.0) * 1e9) or 10**9
    known: dict[int, int] = {}
    if not loop.empty:
        frame = loop.assign(end_ns=_ns(loop["ts"])).dropna(subset=["end_ns"])
        for end, length in frame.groupby("end_ns")["interval_ns"].max().items():
            if int(length) > 0:
                known[int(end)] = int(length)
    points = sorted(set(ends) | set(known))
    out: dict[int, int] = {}
    prev = trace.start_ns
    for end in points:
        if end in known:
            out[end] = known[end]
        elif prev is not None and 0 < end - prev <= nominal * 1.5:
            out[end] = end - prev
        else:
            out[end] = nominal
        prev = end
    return out


def _throughput(trace: TraceReader, files: pd.DataFrame, loop: pd.DataFrame, timeline: _Timeline) -> None:
    """Read and write bytes/s per role, one value per interval, as counters (0 between)."""
    if files.empty:
        return
    frame = files.assign(end_ns=_ns(files["ts"])).dropna(subset=["end_ns"])
    frame = frame.astype({"role": object, "op": object})
    frame["role"] = frame["role"].map(lambda r: _text(r) or "unknown")
    frame = frame[frame["op"].isin(["read", "write"])]
    sums = frame.groupby(["role", "op", "end_ns"], sort=True)["bytes"].sum()
    lengths = _interval_lengths(trace, (int(e) for e in frame["end_ns"].unique()), loop)
    series = [(role, op) for role, op in sums.index.droplevel(2).unique()
              if sums.loc[(role, op)].sum() > 0]
    if not series:
        return
    timeline.group("throughput", "I/O throughput", _SORT_THROUGHPUT)
    for role, op in sorted(series, key=lambda s: (_ROLE_ORDER.get(s[0], 5), s[0], s[1])):
        name = f"{role} {op}"
        cursor: int | None = None
        for end, nbytes in sums.loc[(role, op)].items():
            end, length = int(end), lengths[int(end)]
            start = end - length if cursor is None else max(end - length, cursor)
            if cursor is not None and start > cursor:
                timeline.counter("throughput", cursor, name, {"bytes/s": 0})
            timeline.counter("throughput", start, name, {"bytes/s": int(nbytes) * 1e9 / length})
            cursor = end
        if cursor is not None:
            timeline.counter("throughput", cursor, name, {"bytes/s": 0})


def _gpu(gpu: pd.DataFrame, gpu_idle: pd.DataFrame, timeline: _Timeline) -> None:
    """GPU utilisation counters and idle spans (named after their cause), per GPU."""
    if gpu.empty and gpu_idle.empty:
        return
    timeline.group("gpu", "GPUs", _SORT_GPU)
    if not gpu.empty:
        frame = gpu.assign(end_ns=_ns(gpu["ts"])).dropna(subset=["end_ns"])
        for index, rows in frame.groupby("gpu", sort=True):
            cursor: int | None = None
            for r in rows.sort_values("end_ns", kind="stable").itertuples(index=False):
                start = int(r.end_ns) - max(int(r.sample_period_ns), 0)
                if cursor is not None:
                    start = max(start, cursor)
                util = _num(r.util_pct)
                if util is not None:
                    timeline.counter("gpu", start, f"GPU {int(index)}", {"util %": util})
                cursor = start
    if not gpu_idle.empty:
        frame = gpu_idle.assign(start_ns=_ns(gpu_idle["start"]), end_ns=_ns(gpu_idle["end"]))
        frame = frame.dropna(subset=["start_ns", "end_ns"])
        for index, rows in frame.groupby("gpu", sort=True):
            spans = []
            for r in rows.itertuples(index=False):
                cause = _text(r.cause) or "unknown"
                spans.append((int(r.start_ns), int(r.end_ns), f"idle: {cause}", "iotrace.gpu_idle", {
                    "gpu": int(index), "cause": cause, "pid": _int(r.pid),
                    "duration_ns": _int(r.duration_ns), "coverage": _num(r.coverage),
                    "confidence": _num(r.confidence),
                    **{f"{s}_frac": _num(getattr(r, f"{s}_frac")) for s in LOOP_STATES
                       if s not in CUDA_STATES or _num(getattr(r, f"{s}_frac"))}}))
            timeline.lanes("gpu", f"GPU {int(index)} idle", 100 * (int(index) + 1), spans)


def _other_data(trace: TraceReader) -> dict:
    meta = trace.meta
    out = {"iotrace_trace": str(trace.directory), "iotrace_version": meta.get("tool_version"),
           "iotrace_schema_version": meta.get("schema_version"), "iotrace_host": meta.get("host")}
    return {k: v for k, v in out.items() if v is not None}


def _utc(ns: int) -> str:
    seconds, rest = divmod(ns, 10**9)
    stamp = dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{rest:09d}Z"


# -- the Kineto side ---------------------------------------------------------------------------


def read_kineto(path: str | os.PathLike[str]) -> dict:
    """The PyTorch profiler (Kineto) trace at `path` (JSON, or gzip-compressed JSON) as a dict
    with a ``traceEvents`` list (a trace in the JSON array form is wrapped in one).

    Raises KinetoError, with one line, when the file cannot be read, is not JSON (or is cut
    short), or is JSON but not a Chrome trace.
    """
    p = Path(path)
    hint = "pass the JSON file written by torch.profiler's export_chrome_trace()"
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise KinetoError(f"cannot read the profiler trace {str(p)!r}: "
                          f"{e.strerror or e}; {hint}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise KinetoError(f"{str(p)!r} is a damaged gzip file ({_first_line(e)}); "
                              f"{hint}") from None
    try:
        text = raw.decode("utf-8")
        doc = json.loads(text)
    except UnicodeDecodeError:
        raise KinetoError(f"{str(p)!r} is not a JSON file (not UTF-8 text); {hint}") from None
    except json.JSONDecodeError as e:
        at_end = e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string")
        cut = " (the file is cut short)" if at_end and text.strip() else ""
        raise KinetoError(f"{str(p)!r} is not valid JSON{cut}: {e.msg} at line {e.lineno} "
                          f"column {e.colno}; {hint}") from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise KinetoError(f"{str(p)!r} is JSON but not a profiler trace: it has no traceEvents "
                          f"list; {hint}")
    for i, event in enumerate(doc["traceEvents"]):
        if not isinstance(event, dict) or not isinstance(event.get("ph"), str):
            raise KinetoError(f"{str(p)!r} is not a valid profiler trace: traceEvents[{i}] is "
                              f"not an event (an object with a \"ph\"); {hint}")
    if not _is_kineto(doc):
        what = ("an iotrace export" if "iotrace_zero_ns" in (doc.get("otherData") or {})
                else "a Chrome trace")
        raise KinetoError(f"{str(p)!r} is {what}, not a PyTorch profiler trace: it has no "
                          f"Kineto header ({', '.join(_KINETO_KEYS)}) and none of the "
                          f"profiler's events (cpu_op, user_annotation, ...); {hint}")
    return doc


_KINETO_KEYS = ("schemaVersion", "deviceProperties", "baseTimeNanoseconds")
"""Top-level keys that torch.profiler's export_chrome_trace writes and other tools do not."""
_KINETO_CATEGORIES = frozenset({
    "cpu_op", "user_annotation", "gpu_user_annotation", "python_function", "kernel",
    "cuda_runtime", "cuda_driver", "gpu_memcpy", "gpu_memset", "cpu_instant_event", "ac2g",
    "fwdbwd", "Trace"})
"""Event categories of Kineto traces (the array form has no header)."""


def _is_kineto(doc: dict) -> bool:
    """Whether `doc` was written by the PyTorch profiler: its header, or one of its events."""
    if any(k in doc for k in _KINETO_KEYS):
        return True
    return any(e.get("cat") in _KINETO_CATEGORIES for e in doc["traceEvents"])


def _ids_in(events: list[dict]) -> tuple[set[int], set[int]]:
    """The integer pids and tids a trace uses."""
    pids, tids = set(), set()
    for e in events:
        pid, tid = e.get("pid"), e.get("tid")
        if isinstance(pid, int):
            pids.add(pid)
        if isinstance(tid, int):
            tids.add(tid)
    return pids, tids


def _timed_range_us(events: list[dict]) -> tuple[float, float] | None:
    lo = hi = None
    for e in events:
        ts = e.get("ts")
        if e.get("ph") == "M" or not isinstance(ts, int | float) or isinstance(ts, bool):
            continue
        dur = e.get("dur")
        end = ts + dur if isinstance(dur, int | float) and not isinstance(dur, bool) else ts
        lo = ts if lo is None else min(lo, ts)
        hi = end if hi is None else max(hi, end)
    return None if lo is None else (float(lo), float(hi))


def kineto_base_ns(doc: dict, start_ns: int, stop_ns: int, name: str = "the profiler trace"
                   ) -> tuple[int, str]:
    """The Unix time in ns that the ``ts`` of Kineto trace `doc` count from, and how it was found.

    `start_ns` and `stop_ns` span the iotrace trace: without ``baseTimeNanoseconds`` they pick
    the base, and the profile must overlap them (1 s slack) or KinetoError is raised.
    """
    span = _timed_range_us(doc["traceEvents"])
    if span is None:
        raise KinetoError(f"{name!r} has no timed events to align with")
    lo_us, hi_us = span
    base = doc.get("baseTimeNanoseconds")
    if base is not None:
        if not isinstance(base, int) or isinstance(base, bool) or base < 0:
            raise KinetoError(f"{name!r} has an invalid baseTimeNanoseconds ({base!r}); it "
                              f"should be the profiler's base time in ns since the Unix epoch")
        how = "baseTimeNanoseconds"
    elif lo_us >= _ABSOLUTE_US:
        base, how = 0, "no baseTimeNanoseconds: ts taken as absolute Unix microseconds"
    else:
        floor = start_ns // KINETO_BASE_PERIOD_NS * KINETO_BASE_PERIOD_NS

        def overlap(b: int) -> int:
            return min(stop_ns, b + int(hi_us * 1000)) - max(start_ns, b + int(lo_us * 1000))

        base = max((floor - KINETO_BASE_PERIOD_NS, floor, floor + KINETO_BASE_PERIOD_NS),
                   key=overlap)
        how = ("no baseTimeNanoseconds: base recomputed as Kineto does, the 3-month boundary "
               f"{_utc(base)}")
    first, last = base + int(lo_us * 1000), base + int(hi_us * 1000)
    if last < start_ns - _ALIGN_SLACK_NS or first > stop_ns + _ALIGN_SLACK_NS:
        raise KinetoError(
            f"{name!r} covers {_utc(first)} to {_utc(last)} and the iotrace trace {_utc(start_ns)} "
            f"to {_utc(stop_ns)} (UTC): they do not overlap, so the profile was not recorded "
            f"during this trace; pass the profiler trace of the traced run")
    return base, how


# -- writing -----------------------------------------------------------------------------------


def _write_json(path: Path, doc: dict, allow_nan: bool) -> None:
    """Write `doc` to `path` atomically (a temporary file renamed); gzip when it ends in .gz."""
    data = json.dumps(doc, separators=(",", ":"), allow_nan=allow_nan).encode()
    if path.suffix == ".gz":
        data = gzip.compress(data, compresslevel=6)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open_private(tmp) as f:  # it has the command lines of the trace
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
