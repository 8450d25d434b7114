"""`iotrace report DIR`: the end-of-run summary again, from a trace directory alone.

It rebuilds what the live run had in memory from the tables (histograms from `latency`, file
totals from `files`, the diagnosis from the per-interval rows) and renders it with the same
code as the end of a live run: the first screen is the same text, and `--histograms` adds the
latency histograms per process.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TextIO

import numpy as np
import pandas as pd
import pyarrow as pa

from tracer.core.diagnosis import Diagnosis, Finding, RankLoop
from tracer.core.diagnosis.feed import Known, feed, interval_input
from tracer.core.diagnosis.input import IntervalInput
from tracer.core.diagnosis.split import LATENCY_READS
from tracer.core.diagnosis.thresholds import MAX_READ_AHEAD
from tracer.core.model import GpuIdleRow, GpuRow, Series
from tracer.core.selfcost import SelfCost
from tracer.core.units import MAX_SLOTS, slot_of
from tracer.core.vocab import CHILD, LOOP_ROLES, MAIN, RANK
from tracer.errors import EXIT_USAGE, TraceFailure
from tracer.gpu import idle
from tracer.render.findings import context_lines, render_findings
from tracer.render.first_screen import histograms_hint, trace_lines
from tracer.render.saved_files import file_totals_from_files
from tracer.render.summary import render_summary, split_lines
from tracer.tracedir.reader import TraceError, TraceReader, load
from tracer.tracedir.schema import table_from_rows

# The tables with rows per interval, stamped with its end: the diagnosis's input from the trace.
ROW_TABLES = ("threads", "files", "latency", "devices", "memory", "device_users", "cpu_waits",
              "fuse", "stacks")


def grouped(df: pd.DataFrame, keys: list[str], **agg: tuple[str, str]) -> pd.DataFrame:
    """`agg` (pandas' named aggregations) per distinct `keys`, nulls a key of their own, in one
    pass over the rows: a day of trace has millions of them. The groups are in the order they
    first appear; a dictionary column's values come back as str, its nulls as NaN. Grouped by
    the dictionary's codes (null: -1): hashing each row's strings was most of the time."""
    cats = {k: df[k].cat for k in keys if isinstance(df[k].dtype, pd.CategoricalDtype)}
    out = (df.assign(**{k: c.codes for k, c in cats.items()})
           .groupby(keys, dropna=False, sort=False).agg(**agg).reset_index())
    for k, c in cats.items():
        out[k] = pd.Categorical.from_codes(out[k], c.categories).astype(object)
    return out


def _text(v: object) -> str | None:
    return None if pd.isna(v) else str(v)


def totals_from_latency(latency: pd.DataFrame) -> dict[Series, np.ndarray]:
    """Whole-trace histograms per series, summed from the latency rows (bucket_lo_ns -> slot)."""
    totals: dict[Series, np.ndarray] = {}
    keys = ["pid", "layer", "op", "target", "device", "attribution"]
    if latency.empty:
        return totals
    summed = grouped(latency, [*keys, "bucket_lo_ns"], count=("count", "sum"),
                      bytes=("bytes", "sum"))
    for r in summed.itertuples(index=False):
        key = Series(int(r.pid), str(r.layer), str(r.op), _text(r.target), _text(r.device),
                     _text(r.attribution))
        h = totals.setdefault(key, np.zeros((2, MAX_SLOTS), dtype=np.uint64))
        slot = slot_of(int(r.bucket_lo_ns))
        h[0, slot] += int(r.count)
        h[1, slot] += int(r.bytes)
    return totals


def _records(df: pd.DataFrame) -> dict[int, list[dict]]:
    """Rows by interval end (ns), as plain dicts with str/None for the dictionary columns."""
    out: dict[int, list[dict]] = {}
    for rec in _plain_records(df):
        out.setdefault(rec["ts"], []).append(rec)
    return out


def diagnose_trace(trace: TraceReader) -> Diagnosis:
    """Replays the trace's intervals through the diagnosis, in time order, each as the live
    step gave it (`replay`), the intervals older than its window with the rows its state
    needs only."""
    d = Diagnosis(startup=bool(trace.targets["command"]))  # as the live run: launch mode
    for inp in replay(trace, d):
        feed(d, inp)
    return d


def replay(trace: TraceReader, diagnosis: Diagnosis | None = None) -> Iterator[IntervalInput]:
    """The diagnosis's input per interval, from the trace alone, through the live step's builder
    (`feed.interval_input`): each table's rows of the interval, and the `processes` rows of the
    processes first seen by its end (the last row of each: what became of it). Slow operations
    and GPU samples go to the interval in which they ended.

    With `diagnosis`, the one these inputs are fed to (each before the next is asked for), the
    intervals that will have left its window by the last one come with only what its state
    carries over (`_Carried`), marked `carried` so that the diagnosis builds no evidence of
    them (it would drop it unread): on a day of trace, building it row by row was most of the
    summary's time. What the diagnosis then holds is what the whole replay gives it."""
    rows = {name: _table_rows(trace, name) for name in ROW_TABLES}
    stamps = sorted(set().union(*(r.stamps for r in rows.values()),
                                _Rows(trace["system"]).stamps))
    events = _plain_records(trace["events"])
    for e in events:
        e["end"] = e["ts"] + e["latency_ns"]
    ended = {"events": _by_interval(events, stamps, "end"),
             "gpu": _by_interval(_plain_records(trace["gpu"]), stamps, "ts")}
    procs = sorted(_plain_records(trace.processes), key=lambda r: (r["first_seen"], r["pid"]))
    first_seen = [r["first_seen"] for r in procs]
    kept = diagnosis.window.intervals.maxlen if diagnosis is not None else None
    carried = (_Carried.of(rows, stamps[-kept - 1], diagnosis.page_size)
               if kept is not None and len(stamps) > kept else None)
    # The first interval began where the run's meta.json says (traces before it said: one
    # interval before its end).
    prev = trace.meta.get("intervals_start_ns")
    interval_ns = int(float(trace.meta.get("interval_s") or 1.0) * 1e9)
    known, taken = Known(), 0
    for i, ts in enumerate(stamps):
        n = bisect.bisect_right(first_seen, ts)
        for r in procs[taken:n]:
            known.put(r)
        taken = n
        passing = carried is not None and ts <= carried.until_ns
        if passing:
            interval = carried.rows(ts, known.owners(), diagnosis.state.first_data_ns, rows,
                                    stamps, i)
        else:
            if carried is not None and diagnosis.state.read_ahead is not carried.read_ahead:
                diagnosis.state.read_ahead = carried.read_ahead
            interval = {name: r.full(ts, stamps, i) for name, r in rows.items()}
            interval.update((name, by_ts.get(ts, [])) for name, by_ts in ended.items())
        yield interval_input(ts, ts - prev if prev else interval_ns, interval, known,
                             carried=passing)
        prev = ts


def _latency_split_reads(df: pd.DataFrame) -> np.ndarray:
    """The `latency` rows the diagnosis reads (`split.LATENCY_READS`). The others (pipes,
    writes, unix sockets) were three quarters of a DataLoader job's rows, each made a dict for
    nothing."""
    layer, target = df["layer"], df["target"]
    keep = np.zeros(len(df), dtype=bool)
    for name, targets in LATENCY_READS.items():
        keep |= ((layer == name) if targets is None
                 else (layer == name) & target.isin(targets)).to_numpy()
    return keep & (df["op"] == "read").to_numpy()


# Per table, where the diagnosis reads fewer than all its rows: the columns that say which,
# and which.
_SPLIT_READS: dict[str, tuple[list[str], Callable[[pd.DataFrame], np.ndarray]]] = {
    "latency": (["layer", "target", "op"], _latency_split_reads)}


class _Rows:
    """A table's rows by interval end (ns) as plain dicts, turned into dicts a block of
    intervals at a time as the replay comes to them (a day has millions of rows)."""

    BLOCK = 4096  # intervals

    def __init__(self, df: pd.DataFrame, every_ts: np.ndarray | None = None) -> None:
        """`every_ts`: the interval ends of all the table's rows, where `df` holds only those
        the diagnosis reads (an interval of rows left out is still one)."""
        ts = df["ts"].array.asi8 if len(df) else np.empty(0, dtype=np.int64)
        if len(ts) and np.any(ts[1:] < ts[:-1]):
            order = np.argsort(ts, kind="stable")  # an interval's rows keep their order
            df, ts = df.take(order), ts[order]
        self.stamps = _ends(ts if every_ts is None else every_ts)
        self.df, self.ts = df, ts
        # the block held: how its rows were made, the last interval end in it, its rows
        self._block: tuple[Callable, int, dict[int, list[dict]]] | None = None

    def full(self, ts: int, stamps: list[int], i: int,
             records: Callable[[pd.DataFrame], dict[int, list[dict]]] = _records
             ) -> list[dict]:
        """The rows of the interval ending at `ts`, `stamps[i]`, made by `records` (by default
        whole); asked in time order."""
        if self._block is None or self._block[0] is not records or ts > self._block[1]:
            until_ns = stamps[min(i + self.BLOCK, len(stamps)) - 1]
            lo = np.searchsorted(self.ts, ts, side="left")
            hi = np.searchsorted(self.ts, until_ns, side="right")
            self._block = None  # (freed before the next is made)
            self._block = (records, until_ns, records(self._rows(lo, hi)))
        return self._block[2].get(ts, [])

    def until(self, until_ns: int) -> pd.DataFrame:
        """The rows of the intervals that end by `until_ns`."""
        return self._rows(0, np.searchsorted(self.ts, until_ns, side="right"))

    def _rows(self, lo: int, hi: int) -> pd.DataFrame:
        return self.df.iloc[lo:hi]


def _ends(ts: np.ndarray) -> set[int]:
    """The distinct interval ends of rows stamped `ts`: the first of each run of equal ends
    in order (sorted first where they are not), without np.unique's sort."""
    if len(ts) and np.any(ts[1:] < ts[:-1]):
        ts = np.sort(ts)
    return set(ts[np.concatenate(([True], ts[1:] != ts[:-1]))].tolist()) if len(ts) else set()


def _table_rows(trace: TraceReader, name: str) -> _Rows:
    """Table `name`'s rows for the replay. Of a table the diagnosis reads only some rows of
    (`_SPLIT_READS`), only those are made a DataFrame, chosen on the Arrow table: a day's
    `latency` whole was 1.6 GiB in pandas, three quarters of it rows never read."""
    if name not in _SPLIT_READS:
        return _Rows(trace[name])
    columns, keep = _SPLIT_READS[name]
    table = trace.arrow(name)
    chosen = table.select(["ts", *columns]).to_pandas()
    kept = table.filter(pa.array(keep(chosen))).to_pandas()
    return _Rows(kept, every_ts=chosen["ts"].array.asi8)


@dataclass
class _Carried:
    """The rows of the intervals up to `until_ns` that the diagnosis's state carries over
    (split.SplitState), each older interval's others leaving only evidence that its window
    drops before the end:

    - `threads`: the loops' own threads' rows (their time, who woke them), and the other
      threads' added up per process (the workers seen, their time: `_carried_threads`);
    - `files`: the loop processes' and their children's writes and fsyncs of files (the bytes
      written per file, checkpoints), and a row per loop process and interval for its own
      reads, their time summed (what the split reads of them); every row of an interval with
      a process whose main has not yet read its data set (its start-up's end);
    - `latency`: socket reads (the loop's and workers' waits on the network);
    - the read-ahead left per (pid, path) after them, computed here over every read row
      (`_read_ahead`), which replaces the replay's own once its window is reached.
    """

    until_ns: int
    files: dict[int, list[dict]]
    latency: dict[int, list[dict]]
    pids: dict[int, list[int]]  # interval end -> the pids of its `files` rows
    read_ahead: dict[tuple[int, str], int]

    @classmethod
    def of(cls, rows: dict[str, _Rows], until_ns: int, page_size: int) -> _Carried | None:
        """None when the read-ahead kept would reach its bound (MAX_READ_AHEAD files): then
        which files it kept depends on the order they came in, which only the full replay
        gives."""
        files = rows["files"].until(until_ns)
        op = files["op"]
        read = (op == "read").to_numpy()
        read_ahead = _read_ahead(files[["pid", "path", "pages_missed", "bytes"]][read], page_size)
        if read_ahead is None:
            return None
        loop = read & files["role"].isin(LOOP_ROLES).to_numpy()
        own = (files[["ts", "pid", "role", "latency_sum_ns"]][loop].astype({"role": object})
               .groupby(["ts", "pid", "role"], sort=False)["latency_sum_ns"].sum().reset_index())
        # the writes the split counts (`_file_times`), not a DataLoader worker's (many a second)
        written = files[(op.isin(("write", "fsync")) & files["role"].isin((*LOOP_ROLES, CHILD))
                         & (files["path_source"] != "folder")).to_numpy()]
        # a row that stands for the process's reads: their time, no bytes, no operations
        own = own.assign(comm="", path="", path_source="", fs_type="", device="", inode=0,
                         op="read", file_count=None, ops=0, bytes=0, latency_max_ns=0,
                         pages_missed=0, pages_dirtied=0, cache_hit_pct=None,
                         reread_bytes=None, reread_pages_missed=None)[list(files.columns)]
        by_ts = _records(written)
        for ts, recs in _records(own).items():
            by_ts.setdefault(ts, []).extend(recs)
        latency = rows["latency"].until(until_ns)
        sockets = latency[((latency["layer"] == "syscall") & (latency["op"] == "read")
                           & (latency["target"] == "socket")).to_numpy()]
        pids: dict[int, list[int]] = {}
        stamp = rows["files"].ts[:len(files)]
        pid = files["pid"].to_numpy()
        new = ~pd.DataFrame({"ts": stamp, "pid": pid}).duplicated().to_numpy()
        for ts, p in zip(stamp[new].tolist(), pid[new].tolist(), strict=True):
            pids.setdefault(ts, []).append(p)
        return cls(until_ns, by_ts, _records(sockets), pids, read_ahead)

    def rows(self, ts: int, owner: dict[int, int], first_data_ns: dict[int, int],
             rows: dict[str, _Rows], stamps: list[int], i: int) -> dict[str, list[dict]]:
        """The rows of the interval ending at `ts` (`stamps[i]`) that the state needs."""
        starting = any(owner.get(p, p) not in first_data_ns for p in self.pids.get(ts, ()))
        return {"threads": rows["threads"].full(ts, stamps, i, _carried_threads),
                "files": rows["files"].full(ts, stamps, i) if starting else
                self.files.get(ts, []),
                "latency": self.latency.get(ts, [])}


# What the split adds up of a carried interval's threads rows other than a loop's own
# (`split._thread_times`): a day has millions, which made whole were most of its replay.
CARRIED_THREAD_SUMS = ("oncpu_ns", "runnable_ns", "iowait_ns")


def _carried_threads(df: pd.DataFrame) -> dict[int, list[dict]]:
    """`_records` of `threads` rows as the split reads a carried interval's: the loops' own
    threads' rows whole, the other threads' added up per process and name (tid -1), which
    is all the split reads of them (a DataLoader worker's threads: its one row). In the rows'
    order, a sum where its last row was (the last collective thread named wins)."""
    at = np.arange(len(df))
    whole = (df["role"].isin(LOOP_ROLES) & (df["tid"] == df["pid"])).to_numpy()
    keys = ["ts", "pid", "role", "comm"]
    rest = (df[~whole][[*keys, *CARRIED_THREAD_SUMS]].assign(at=at[~whole])
            .groupby(keys, sort=False, observed=True, dropna=False)
            .agg(**{c: (c, "sum") for c in CARRIED_THREAD_SUMS}, at=("at", "max"))
            .reset_index())
    recs = _plain_records(df[whole]) + _plain_records(rest.drop(columns="at").assign(tid=-1))
    out: dict[int, list[dict]] = {}
    for k in np.argsort(np.concatenate([at[whole], rest["at"].to_numpy()]),
                        kind="stable").tolist():
        out.setdefault(recs[k]["ts"], []).append(recs[k])
    return out


def _read_ahead(reads: pd.DataFrame, page_size: int) -> dict[tuple[int, str], int] | None:
    """The read-ahead bytes left unused per (pid, path) after the read rows `reads`, in their
    order, as `split._missed` leaves them: for each row, what was left plus its missed pages,
    less its bytes, never below 0 (a row without bytes keeps its pages for the next). That is
    each file's sum of (pages missed - bytes) less the lowest of its running sums, if below 0.
    None when more files than MAX_READ_AHEAD were read."""
    if reads.empty:
        return {}
    pid_codes, _ = pd.factorize(reads["pid"].to_numpy())
    path_codes, paths = pd.factorize(reads["path"], use_na_sentinel=False)
    codes, _ = pd.factorize(pid_codes.astype(np.int64) * (len(paths) + 1) + path_codes)
    if codes.max() + 1 >= MAX_READ_AHEAD:
        return None
    step = (reads["pages_missed"].to_numpy(np.int64) * page_size
            - reads["bytes"].to_numpy(np.int64))
    running = pd.Series(step).groupby(codes).cumsum()
    by_file = running.groupby(codes)
    left = by_file.last() - np.minimum(by_file.min(), 0)
    kept = left.to_numpy() > 0
    at = pd.Series(np.arange(len(codes))).groupby(codes).first()[left.index].to_numpy()[kept]
    pid = reads["pid"].to_numpy()[at].tolist()
    path = reads["path"].iloc[at].astype(object).tolist()
    return {(p, None if pd.isna(f) else f): n
            for p, f, n in zip(pid, path, left.to_numpy()[kept].tolist(), strict=True)}


def _by_interval(rows: list[dict], stamps: list[int], key: str) -> dict[int, list[dict]]:
    """`rows` by the interval (end in `stamps`) in which their `key` time falls: (prev, end]."""
    out: dict[int, list[dict]] = {}
    for r in rows:
        i = bisect.bisect_left(stamps, r[key])
        if i < len(stamps):
            out.setdefault(stamps[i], []).append(r)
    return out


def recompute_gpu(trace: TraceReader, write: bool = True, diagnosis: Diagnosis | None = None
                  ) -> tuple[list[GpuIdleRow], list[GpuRow]] | None:
    """With a `gpu` table: the idle spans and their causes again, from the saved NVML samples
    and the training loop's states (so a trace recorded on a GPU host, or an NVML stream
    recorded separately and dropped into DIR/gpu, can be analysed anywhere). Offline there is
    no process list per GPU: a GPU belongs to the training loop whose environment gave it that
    GPU (`processes.cuda_device`), else to the single `main` process (with several, pid is null
    and the cause `unknown`). In launch mode, the part of a span before its loop's start-up
    ended is cause `startup`, from `diagnosis` (the trace's, replayed: by default made here), as
    the live run did. Writes DIR/gpu_idle (replacing it) unless `write` is False.
    Returns (gpu_idle rows, gpu rows), or None without a gpu table."""
    from tracer.sinks.parquet import write_segment

    gpu_df = trace["gpu"]
    if gpu_df.empty:
        return None
    gpu_rows = _plain_records(gpu_df)
    loop_rows = _plain_records(trace["loop"])
    procs = trace.processes.drop_duplicates("pid", keep="last")
    procs = procs[procs.role.isin(LOOP_ROLES) & procs.cuda_device.notna()]
    named = dict(zip(procs.pid.astype(int), procs.cuda_device.astype(str), strict=True))
    devices = gpu_df[["gpu", "uuid"]].drop_duplicates().itertuples(index=False, name=None)
    owners = idle.gpu_owners({}, {}, named, [(int(g), str(u)) for g, u in devices])
    if diagnosis is None:
        diagnosis = diagnose_trace(trace)
    signals = diagnosis.state if diagnosis.startup else None
    spans = idle.analyse(gpu_rows, loop_rows, owners or None, signals)
    if write:
        write_segment(trace.directory / "gpu_idle", table_from_rows("gpu_idle", spans), replace=True)
        trace.forget("gpu_idle")
    return spans, gpu_rows


def _plain_records(df: pd.DataFrame) -> list[dict]:
    """Rows as plain dicts, as the live session passes them: timestamps as int ns, str for the
    dictionary columns, None for missing values. Column by column: a day has millions of rows."""
    columns = {}
    for name in df.columns:
        col = df[name]
        missing = col.isna().to_numpy()
        if isinstance(col.dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_dtype(col):
            values = col.array.asi8.tolist()
        else:
            values = col.astype(object).tolist()
        if missing.any():
            values = [None if m else v for v, m in zip(values, missing, strict=True)]
        columns[name] = values
    names = list(columns)
    return [dict(zip(names, row, strict=True)) for row in zip(*columns.values(), strict=True)]


def report(directory: str, out: TextIO, histograms: bool = False) -> int:
    """`iotrace report DIR`: prints the summary (with the latency histograms if `histograms`),
    and writes DIR/gpu_idle again from DIR/gpu."""
    try:
        trace = load(directory)
        for table in ("latency", "files", "processes"):  # one unreadable is the user's to fix
            trace[table]
    except TraceError as e:
        raise TraceFailure(str(e), EXIT_USAGE) from None
    print(summary_text(trace, directory, write_gpu_idle=True, histograms=histograms), file=out)
    return 0


def report_nodes(directories: list[str], out: TextIO, histograms: bool = False) -> int:
    """`iotrace report DIR0 DIR1 ...`: traces of one distributed job, one per node (each node
    ran its own iotrace). Their rows are on UTC clocks already (each trace turned its monotonic
    clock into UTC with the offset in its meta.json), so the ranks are compared over the span
    that every trace covers; then each trace's own summary follows (with its latency
    histograms if `histograms`)."""
    traces = []
    for directory in directories:
        try:
            trace = load(directory)
            for table in ("latency", "files", "processes"):
                trace[table]
        except TraceError as e:
            raise TraceFailure(str(e), EXIT_USAGE) from None
        traces.append(trace)
    seen: dict[tuple, str] = {}
    for directory, trace in zip(directories, traces, strict=True):
        # a node's trace given twice, or a copy of it, would count its ranks twice
        key = (trace.meta.get("host"), trace.start_ns) if trace.start_ns is not None else (
            str(trace.directory.resolve()),)
        if key in seen:
            raise TraceFailure(f"{seen[key]} and {directory} are the same trace (same host and "
                               "start): give each node's trace once", EXIT_USAGE)
        seen[key] = directory
    starts = [t.start_ns for t in traces if t.start_ns is not None]
    stops = [t.stop_ns for t in traces if t.stop_ns is not None]
    since = max(starts) if len(starts) == len(traces) else None
    until = min(stops) if len(stops) == len(traces) else None
    if since is not None and until is not None and until <= since:
        raise TraceFailure("these traces do not overlap in time: give traces of one job, "
                           "recorded at the same time on its nodes", EXIT_USAGE)
    joined: dict[int, RankLoop] = {}
    where: dict[int, str] = {}
    found: list[Finding] = []
    lines = [f"Traces of one job from {len(traces)} nodes, compared over the "
             + (f"{(until - since) / 1e9:.1f} s they all cover:" if since and until else
                "time they cover:"),
             clock_line([(str(t.meta.get("host") or "?"), d, t.meta)
                         for d, t in zip(directories, traces, strict=True)])]
    for directory, trace in zip(directories, traces, strict=True):
        d = diagnose_trace(trace)
        found.extend(d.findings())
        host = str(trace.meta.get("host") or "?")
        for ranks in d.rank_loops(since_ns=since, until_ns=until).values():
            for rank, r in ranks.items():
                if rank in joined:  # the same rank in two traces: one job traced twice
                    for s in r.ns:
                        joined[rank].ns[s] += r.ns[s]
                    joined[rank].pids.extend(r.pids)
                    joined[rank].pid_ns.update(r.pid_ns)
                else:
                    joined[rank] = r
                where.setdefault(rank, f"{host}, {directory}")
    if not joined:
        raise TraceFailure("no ranks in these traces: joining traces needs a distributed job "
                           "(torchrun) traced on each node", EXIT_USAGE)
    split = [(rank, sum(r.ns.values()) / 1e9, 0.0,
              {s: 100 * n / sum(r.ns.values()) for s, n in r.ns.items()} if sum(r.ns.values())
              else {}) for rank, r in sorted(joined.items())]
    lines += split_lines(split, {rank: rank for rank in joined},  # (keyed by rank here)
                         {rank: f"rank {rank} on {where[rank]}, pid "
                                f"{','.join(map(str, r.pids))}" for rank, r in joined.items()})[2:]
    straggler = Diagnosis().judge_ranks(joined, found, where)
    lines.extend(render_findings([straggler]) if straggler else
                 ["", "No straggler across the nodes: no rank held the others back."])
    print("\n".join(lines), file=out)
    for directory, trace in zip(directories, traces, strict=True):
        print("", file=out)
        print(summary_text(trace, directory, write_gpu_idle=True, histograms=histograms), file=out)
    return 0


def clock_line(hosts: list[tuple[str, str, dict]]) -> str:
    """How far apart the hosts' clocks may be, from each trace's meta.json (`clocks.utc_sync`,
    the kernel's NTP state when it was recorded): (host, directory, meta) per trace."""
    unsure, bounds = [], []
    for host, directory, meta in hosts:
        sync = (meta.get("clocks") or {}).get("utc_sync") or {}
        if sync.get("synchronised") and sync.get("max_error_ns") is not None:
            bounds.append(int(sync["max_error_ns"]))
        else:
            unsure.append(f"{host} ({directory})")
    if unsure:
        return (f"  Clocks: the kernel of {', '.join(unsure)} did not say its clock was "
                "synchronised (NTP, chrony or PTP): the traces are aligned on each host's own "
                "clock, and the span compared is off by as much as the hosts' clocks differ.")
    worst = sorted(bounds)[-2:]
    return (f"  Clocks: synchronised on every host, each within {max(worst) / 1e6:.0f} ms of UTC "
            f"(the kernels' bound), so within {sum(worst) / 1e6:.0f} ms of each other.")


@dataclass(frozen=True)
class SavedProcess:
    """A process as the summary names it, from its last `processes` row."""

    pid: int
    ppid: int
    comm: str
    role: str
    rank: int | None  # its RANK, a rank's

    @property
    def is_target(self) -> bool:  # a `main` is named without its parent
        return self.role == MAIN


class SavedProcesses:
    """The trace's processes by pid, as the summary looks them up (`ProcessLookup`)."""

    def __init__(self, trace: TraceReader) -> None:
        # A process has a row when first seen and one more whenever it changed: the last is current.
        self.by_pid = {int(r["pid"]): SavedProcess(int(r["pid"]), int(r["ppid"]), str(r["comm"]),
                                                   str(r["role"]), _int(r.get("rank")))
                       for r in _plain_records(trace.processes.drop_duplicates("pid", keep="last"))}

    def get(self, pid: int) -> SavedProcess | None:
        return self.by_pid.get(pid)

    def rank_numbers(self) -> dict[int, int]:
        """Each rank's RANK, by pid (the summary's line per rank)."""
        return {p.pid: p.rank for p in self.by_pid.values() if p.role == RANK and p.rank is not None}


def _int(v: object) -> int | None:
    return None if v is None or pd.isna(v) else int(v)


def training_since(diagnosis: Diagnosis, procs: SavedProcesses) -> dict[int, int]:
    """Per main pid whose start-up was seen, when its training started (ns)."""
    return {pid: ns for pid in procs.by_pid if (ns := diagnosis.training_since(pid)) is not None}


def trace_training_since(trace: TraceReader) -> dict[int, int]:
    """`training_since` of a saved trace, its diagnosis replayed (for the HTML renderings)."""
    return training_since(diagnose_trace(trace), SavedProcesses(trace))


def summary_text(trace: TraceReader, name: str | None = None, write_gpu_idle: bool = False,
                 histograms: bool = False) -> str:
    """The summary of `trace` (headed "Trace NAME", by default its directory): its first screen,
    which the live run printed at its end, and with `histograms` the latency histograms per
    process; the GPU idle spans are recomputed in memory, and written to DIR/gpu_idle if
    `write_gpu_idle`."""
    procs = SavedProcesses(trace)
    file_totals, file_table = file_totals_from_files(trace.files)
    diagnosis = diagnose_trace(trace)
    findings: list[Finding] = diagnosis.findings()
    gpu = recompute_gpu(trace, write=write_gpu_idle, diagnosis=diagnosis)
    if gpu is not None:
        idle.add_gpu_evidence(findings, *gpu)
    else:
        idle.confirm_host_bound(findings, None)  # no GPU samples: nothing says the GPU waited
    name = str(trace.directory) if name is None else name
    parts = trace_lines(trace, name, training_since(diagnosis, procs),
                        table_from_rows("gpu_idle", gpu[0]) if gpu is not None else None)
    saved = trace.meta.get("self_cost")
    cost = SelfCost.from_meta(saved) if isinstance(saved, dict) else None
    totals = totals_from_latency(trace.latency) if histograms else {}
    return render_summary(totals, procs, parts.header, file_totals, file_table, findings, cost,
                          startup=context_lines(diagnosis), loop=parts.loop,
                          devices=parts.devices,
                          histograms=None if histograms else histograms_hint(name))
