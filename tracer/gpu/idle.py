"""GPU idle spans, and what the training loop was doing while the GPU idled. Pure: rows in,
rows out; `iotrace report` and the live `GpuMonitor` share it."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any, Protocol

from tracer.core.diagnosis.thresholds import THRESHOLDS
from tracer.core.model import GpuIdleRow, GpuRow
from tracer.core.vocab import CUDA_STATES, GPU_STARTUP, GPU_UNKNOWN, LOOP_STATES
from tracer.gpu.words import gpu_sentence as gpu_sentence  # where the sentences were
from tracer.gpu.words import gpu_sentences

if TYPE_CHECKING:
    from tracer.core.diagnosis import Finding

STATES = LOOP_STATES  # the training loop's states, as the `loop` table has them

UNKNOWN = GPU_UNKNOWN
"""The cause of an idle span no loop interval overlaps (or whose GPU has no known process)."""

STARTUP = GPU_STARTUP
"""The cause of the part of an idle span before its loop's start-up ended (launch mode)."""

STARTUP_DECIDED_NS = 10 * 60 * 1_000_000_000
"""How long after a loop's first interval its start-up's end is still looked for, for its GPU's
idle spans (`gpu_startup_end`): the live monitor holds the spans of a loop whose start-up is
undecided this long at most (then the spans go out, and Prometheus counts them)."""


class StartupSignals(Protocol):
    """What ends a loop's start-up, per main pid (`SplitState` has them)."""

    first_worker_ns: Mapping[int, int]
    first_data_ns: Mapping[int, int]

IDLE_UTIL_PCT = 5.0
"""A sample at or below this utilisation is idle."""

MIN_IDLE_SAMPLES = 2
"""A hard idle span needs at least this many consecutive idle samples..."""

MIN_IDLE_NS = 333_333_334
"""...or idle samples covering at least this long (two periods of the common 1/6 s sampling): a GPU
that samples once a second, or a utilisation-rates row standing for an empty sample buffer."""


# -- idle spans ---------------------------------------------------------------------------------


def ns_of(value: Any) -> int:
    """int ns from an int, a pandas Timestamp/Timedelta, or a numpy datetime64/timedelta64/integer."""
    if isinstance(value, int):
        return value
    inner = getattr(value, "value", None)  # pandas Timestamp / Timedelta: ns since the epoch (UTC)
    if isinstance(inner, int):
        return inner
    dtype = str(getattr(value, "dtype", ""))
    if dtype.startswith("datetime64"):
        return int(value.astype("datetime64[ns]").astype("int64"))
    if dtype.startswith("timedelta64"):
        return int(value.astype("timedelta64[ns]").astype("int64"))
    return int(value)


@dataclass(frozen=True)
class IdleSpan:
    gpu: int
    start: int  # UTC ns: the start of the first idle sample's period
    end: int  # UTC ns: the end of the last idle sample's period
    samples: int

    @property
    def duration_ns(self) -> int:
        return self.end - self.start


class IdleDetector:
    """Hard idle spans from `gpu` rows fed in time order per GPU (as `GpuSampler.poll` makes them).

    A run of consecutive rows with util <= threshold_pct is a span when it has at least min_samples
    rows, or covers at least min_duration_ns. A span is returned by the `feed` whose rows end it (the
    first busy row after it); `flush` ends the runs still open (end of trace, or a lost GPU).
    """

    def __init__(self, threshold_pct: float = IDLE_UTIL_PCT, min_samples: int = MIN_IDLE_SAMPLES,
                 min_duration_ns: int = MIN_IDLE_NS) -> None:
        self.threshold_pct = threshold_pct
        self.min_samples = min_samples
        self.min_duration_ns = min_duration_ns
        self._runs: dict[int, list[int]] = {}  # gpu -> [start, end, samples]

    def feed(self, rows: Iterable[Mapping[str, Any]]) -> list[IdleSpan]:
        spans = []
        for row in rows:
            gpu = int(row["gpu"])
            ts = ns_of(row["ts"])
            start = ts - ns_of(row["sample_period_ns"])
            run = self._runs.get(gpu)
            if float(row["util_pct"]) <= self.threshold_pct:
                if run is None:
                    self._runs[gpu] = [start, ts, 1]
                else:
                    run[1] = ts
                    run[2] += 1
            elif run is not None:
                span = self._close(gpu)
                if span:
                    spans.append(span)
        return spans

    def _close(self, gpu: int) -> IdleSpan | None:
        start, end, n = self._runs.pop(gpu)
        if n >= self.min_samples or end - start >= self.min_duration_ns:
            return IdleSpan(gpu, start, end, n)
        return None

    def flush(self, gpu: int | None = None) -> list[IdleSpan]:
        """End the open runs (of one GPU, or all) and return those that are spans."""
        gpus = sorted(self._runs) if gpu is None else [gpu] if gpu in self._runs else []
        return [s for s in (self._close(g) for g in gpus) if s]

    def open_since(self) -> int | None:
        """The start of the earliest run still open (its span may still come), or None."""
        return min((r[0] for r in self._runs.values()), default=None)


def idle_spans(gpu_rows: Iterable[Mapping[str, Any]], **kwargs: Any) -> list[IdleSpan]:
    """All hard idle spans of a whole `gpu` table (any row order), by GPU then start."""
    rows = sorted(gpu_rows, key=lambda r: (int(r["gpu"]), ns_of(r["ts"])))
    detector = IdleDetector(**kwargs)
    spans = detector.feed(rows) + detector.flush()
    return sorted(spans, key=lambda s: (s.gpu, s.start))


def soft_idle_s(gpu_rows: Iterable[Mapping[str, Any]], start_ns: int, end_ns: int) -> dict[int, float]:
    """Soft idle seconds per GPU in [start_ns, end_ns): the sum of (1 - util/100) * period over the
    rows, a row straddling a bound counting with the part of its period inside."""
    out: dict[int, float] = {}
    for row in gpu_rows:
        gpu = int(row["gpu"])
        hi = ns_of(row["ts"])
        lo = hi - ns_of(row["sample_period_ns"])
        inside = min(hi, end_ns) - max(lo, start_ns)
        out.setdefault(gpu, 0.0)
        if inside > 0:
            out[gpu] += (1.0 - float(row["util_pct"]) / 100.0) * inside / 1e9
    return out


# -- attribution --------------------------------------------------------------------------------


def gpu_owners(processes: Mapping[int, Sequence[int]],
               main_of: Mapping[int, int] | Callable[[int], int | None],
               named: Mapping[int, str] | None = None,
               devices: Iterable[tuple[int, str]] = ()) -> dict[int, int]:
    """GPU index -> the traced main process (or rank) using it.

    `processes` is `GpuSampler.processes` (per GPU, host PIDs, most device memory first);
    `main_of` maps a traced PID (the main process or any of its workers/children) to its main
    process and leaves untraced PIDs out (or returns None). The first traced PID on a GPU wins.
    A GPU NVML names no traced process on (a container whose PIDs NVML cannot see, or before the
    process made its CUDA context) goes to the main process whose environment names it:
    `named` is main PID -> `roles.cuda_device`, resolved against `devices` (index, UUID).
    """
    lookup = main_of.get if isinstance(main_of, Mapping) else main_of
    owners = {}
    for gpu, pids in processes.items():
        for pid in pids:
            main = lookup(pid)
            if main is not None:
                owners[gpu] = int(main)
                break
    devices = list(devices)
    placed = set(owners.values())
    for main, spec in sorted((named or {}).items()):
        gpu = gpu_of(spec, devices)
        if gpu is not None and gpu not in owners and main not in placed:
            owners[gpu] = int(main)
            placed.add(main)
    return owners


def gpu_of(spec: str, devices: Sequence[tuple[int, str]]) -> int | None:
    """The NVML index of the GPU that a CUDA_VISIBLE_DEVICES entry names, among `devices`
    (index, UUID): an index (CUDA's order is NVML's on a machine of identical GPUs, and with
    CUDA_DEVICE_ORDER=PCI_BUS_ID on any) or a UUID or its prefix; None for a MIG instance or
    a GPU not there."""
    if spec.isdigit():
        return int(spec) if any(i == int(spec) for i, _ in devices) else None
    if not spec.startswith("GPU-"):
        return None  # MIG-...: NVML gives a MIG instance no utilisation to attribute
    matches = [i for i, uuid in devices if uuid.startswith(spec)]
    return matches[0] if len(matches) == 1 else None


def attribute(spans: Iterable[IdleSpan | Mapping[str, Any]], loop_rows: Iterable[Mapping[str, Any]],
              gpu_pids: Mapping[int, int] | None = None,
              startup_ends: Mapping[int, int] | None = None) -> list[dict]:
    """Rows of the `gpu_idle` table: each span cut into parts, each part with what the training
    loop did during it.

    `loop_rows` are rows of the `loop` table (ts = end of the interval). The span's pid is
    gpu_pids[gpu]; without an entry, the single pid of `loop_rows` (offline rule), else null.
    `startup_ends` maps a pid to the end of its start-up (`gpu_startups`): the span's time
    before it is one part, cause `startup` (confidence 1: known by time, not by loop state).
    The rest is cut where the loop's leading state changes between two whole loop intervals
    inside the span (`_state_changes`). In each part, each loop interval overlapping it gives
    its state times in proportion to the overlap (uniform within the interval):
    `<state>_frac` are the shares of the covered part (they add up to 1 when anything is
    covered); `coverage` is the share of the part that loop intervals cover; cause = the state
    with the largest share ("unknown" when nothing is covered); confidence = that share x
    coverage. A span that is one part is one row, as before the cut.
    """
    gpu_pids = dict(gpu_pids or {})
    by_pid: dict[int, list[tuple[int, int, dict[str, int]]]] = {}
    for row in loop_rows:
        end = ns_of(row["ts"])
        start = end - ns_of(row["interval_ns"])
        by_pid.setdefault(int(row["pid"]), []).append(
            (start, end, {s: ns_of(row.get(f"{s}_ns") or 0) for s in STATES}))
    # per pid, its intervals' starts and the longest one: the intervals a span overlaps are
    # found by bisection, not by a pass over every interval of a day's trace
    index: dict[int, tuple[list[int], int]] = {}
    for pid, intervals in by_pid.items():
        intervals.sort(key=lambda iv: iv[0])
        index[pid] = ([iv[0] for iv in intervals], max(iv[1] - iv[0] for iv in intervals))
    single = next(iter(by_pid)) if len(by_pid) == 1 else None
    out = []
    for span in spans:
        if isinstance(span, Mapping):
            span = IdleSpan(int(span["gpu"]), ns_of(span["start"]), ns_of(span["end"]),
                            int(span.get("samples", 0)))
        pid = gpu_pids.get(span.gpu, single)
        intervals = []
        if pid in by_pid:
            starts, longest = index[pid]
            intervals = by_pid[pid][bisect.bisect_left(starts, span.start - longest):
                                    bisect.bisect_left(starts, span.end)]
        startup_end = (startup_ends or {}).get(pid) if pid is not None else None
        cut = span.start
        if startup_end is not None and startup_end > span.start:
            cut = min(startup_end, span.end)
            out.append(_part(span.gpu, pid, span.start, cut, intervals, startup=True))
        parts: list[dict] = []
        edges = [cut, *_state_changes(intervals, cut, span.end), span.end]
        for lo, hi in pairwise(edges):
            if hi <= lo:
                continue
            part = _part(span.gpu, pid, lo, hi, intervals)
            if parts and parts[-1]["cause"] == part["cause"]:  # one cause: one part
                part = _part(span.gpu, pid, parts.pop()["start"], hi, intervals)
            parts.append(part)
        out += parts
    return out


def _state_changes(intervals: Sequence[tuple[int, int, dict[str, int]]], lo: int, hi: int
                   ) -> list[int]:
    """Where in [lo, hi] the loop's leading state changes: the starts of the whole intervals
    inside it whose leading state differs from the whole interval before. A loop row says how
    long each state lasted, not when: a change is placed only between whole intervals, and an
    interval the span covers in part joins the part next to it."""
    out: list[int] = []
    prev = None
    for start, end, ns in intervals:
        if start < lo or end > hi or end <= start or not any(ns.values()):
            continue
        state = max(STATES, key=lambda s: ns[s])  # ties: the earlier state in STATES
        if prev is not None and state != prev and start > lo:
            out.append(start)
        prev = state
    return out


def _part(gpu: int, pid: int | None, start: int, end: int,
          intervals: Sequence[tuple[int, int, dict[str, int]]], startup: bool = False) -> dict:
    """One `gpu_idle` row: the part [start, end) of a span, with the loop's states in it."""
    duration = end - start
    state_ns = dict.fromkeys(STATES, 0.0)
    covered = 0
    for lo, hi, ns in intervals:
        overlap = min(hi, end) - max(lo, start)
        if overlap <= 0 or hi <= lo:
            continue
        covered += overlap
        for s in STATES:
            state_ns[s] += ns[s] * overlap / (hi - lo)
    total = sum(state_ns.values())
    fracs = {s: (state_ns[s] / total if total > 0 else 0.0) for s in STATES}
    coverage = min(1.0, covered / duration) if duration > 0 else 0.0
    if startup:
        cause, confidence = STARTUP, 1.0
    elif total > 0:
        cause = max(STATES, key=lambda s: fracs[s])  # ties: the earlier state in STATES
        confidence = fracs[cause] * coverage
    else:
        cause, confidence = UNKNOWN, 0.0
    return {"start": start, "end": end, "duration_ns": duration, "gpu": gpu, "pid": pid,
            "cause": cause, **{f"{s}_frac": fracs[s] for s in STATES}, "coverage": coverage,
            "confidence": confidence}


def gpu_startup_end(worker_ns: int | None, data_ns: int | None, first_ns: int | None
                    ) -> int | None:
    """When a loop's start-up ended, for its GPU's idle spans: the start of the first interval in
    which one of its DataLoader workers ran, else of the first that read its data set (as
    `Diagnosis.training_since`), counting only a signal that came within STARTUP_DECIDED_NS of
    its first loop interval's start (`first_ns`); None: no start-up. The bound lets the live
    monitor hold a span whose start-up is undecided for a while only; a replay of the trace,
    with the same rule on the same rows, gives the same parts."""
    if first_ns is None:
        return None
    for since in (worker_ns, data_ns):
        if since is not None and since - first_ns <= STARTUP_DECIDED_NS:
            return int(since)
    return None


def gpu_startups(state: StartupSignals | None, first_ns: Mapping[int, int]) -> dict[int, int]:
    """Per loop pid of `first_ns`, the end of its start-up (`gpu_startup_end`) from the split's
    `state` (first_worker_ns, first_data_ns); none in attach mode (`state` None)."""
    if state is None:
        return {}
    ends = {pid: gpu_startup_end(state.first_worker_ns.get(pid), state.first_data_ns.get(pid),
                                 first) for pid, first in first_ns.items()}
    return {pid: end for pid, end in ends.items() if end is not None}


def first_loop_ns(loop_rows: Iterable[Mapping[str, Any]]) -> dict[int, int]:
    """Per pid, the start of its first loop interval."""
    out: dict[int, int] = {}
    for row in loop_rows:
        pid, start = int(row["pid"]), ns_of(row["ts"]) - ns_of(row["interval_ns"])
        out[pid] = min(start, out.get(pid, start))
    return out


def analyse(gpu_rows: Sequence[Mapping[str, Any]], loop_rows: Sequence[Mapping[str, Any]],
            gpu_pids: Mapping[int, int] | None = None,
            startup: StartupSignals | None = None, **detector: Any) -> list[GpuIdleRow]:
    """Offline (`iotrace report`): the `gpu_idle` rows of a whole trace. `startup`: the replayed
    diagnosis's signals of each loop's start-up end (its `state`), None in attach mode."""
    ends = gpu_startups(startup, first_loop_ns(loop_rows))
    return attribute(idle_spans(gpu_rows, **detector), loop_rows, gpu_pids, ends)


# -- evidence -----------------------------------------------------------------------------------


def gpu_evidence(idle_rows: Iterable[Mapping[str, Any]], gpu_rows: Iterable[Mapping[str, Any]]) -> dict:
    """Numbers for the findings, per GPU.

    observed_ns is the time the `gpu` rows cover (first row's period start to last row); idle_pct the
    share of it in hard idle spans; soft_idle_pct the soft idle time's share. idle_by_cause_ns splits
    the idle time by what the loop did (duration x <state>_frac x coverage; the uncovered rest
    is "unknown"), start-up parts included; idle_share_pct the same as percent of the idle time;
    top_cause is the largest. idle_parts_ns sums the rows (the parts of the spans) by their
    cause, `startup` included, largest first; `spans` counts the rows.
    Returns {"gpus": [{gpu, uuid, name, pid, observed_ns, idle_ns, idle_pct, spans, soft_idle_ns,
    soft_idle_pct, idle_by_cause_ns, idle_share_pct, top_cause, top_cause_pct, idle_parts_ns},
    ...]} by GPU index.
    """
    bounds: dict[int, list[int]] = {}
    names: dict[int, tuple[str, str]] = {}
    soft: dict[int, float] = {}
    for row in gpu_rows:
        gpu = int(row["gpu"])
        ts = ns_of(row["ts"])
        period = ns_of(row["sample_period_ns"])
        b = bounds.setdefault(gpu, [ts - period, ts])
        b[0], b[1] = min(b[0], ts - period), max(b[1], ts)
        names.setdefault(gpu, (str(row.get("uuid", "")), str(row.get("name", ""))))
        soft[gpu] = soft.get(gpu, 0.0) + (1.0 - float(row["util_pct"]) / 100.0) * period
    idle: dict[int, dict[str, float]] = {}
    parts: dict[int, dict[str, int]] = {}
    spans: dict[int, int] = {}
    pids: dict[int, int | None] = {}
    for row in idle_rows:
        gpu = int(row["gpu"])
        duration = ns_of(row["duration_ns"])
        coverage = float(row["coverage"])
        by = idle.setdefault(gpu, dict.fromkeys((*STATES, UNKNOWN), 0.0))
        for s in STATES:
            by[s] += duration * float(row.get(f"{s}_frac") or 0.0) * coverage
        covered = sum(float(row.get(f"{s}_frac") or 0.0) for s in STATES) * coverage
        by[UNKNOWN] += duration * max(0.0, 1.0 - covered)
        by_part = parts.setdefault(gpu, {})
        by_part[str(row["cause"])] = by_part.get(str(row["cause"]), 0) + duration
        spans[gpu] = spans.get(gpu, 0) + 1
        pid = row.get("pid")
        if pid is not None and not (isinstance(pid, float) and math.isnan(pid)):
            pids.setdefault(gpu, int(pid))
    out = []
    for gpu in sorted(set(bounds) | set(idle)):
        observed = bounds[gpu][1] - bounds[gpu][0] if gpu in bounds else 0
        by = idle.get(gpu, dict.fromkeys((*STATES, UNKNOWN), 0.0))
        # the CUDA states only where the loop had them: a trace of a job without libcuda, or
        # from before them, says what it said
        by = {c: v for c, v in by.items() if v or c not in CUDA_STATES}
        idle_ns = sum(by.values())
        share = {c: (100.0 * v / idle_ns if idle_ns else 0.0) for c, v in by.items()}
        top = max(by, key=lambda c: by[c]) if idle_ns else None
        uuid, name = names.get(gpu, ("", ""))
        out.append({
            "gpu": gpu, "uuid": uuid, "name": name, "pid": pids.get(gpu),
            "observed_ns": observed, "idle_ns": round(idle_ns),
            "idle_pct": 100.0 * idle_ns / observed if observed else 0.0,
            "spans": spans.get(gpu, 0),
            "soft_idle_ns": round(soft.get(gpu, 0.0)),
            "soft_idle_pct": 100.0 * soft.get(gpu, 0.0) / observed if observed else 0.0,
            "idle_by_cause_ns": {c: round(v) for c, v in by.items()},
            "idle_share_pct": share,
            "top_cause": top,
            "top_cause_pct": share[top] if top else 0.0,
            "idle_parts_ns": dict(sorted(parts.get(gpu, {}).items(), key=lambda kv: -kv[1])),
        })
    return {"gpus": out}


def add_gpu_evidence(findings: list[Finding], idle_rows: list[GpuIdleRow], gpu_rows: list[GpuRow]) -> None:
    """With NVML: every finding about the training loop also says how idle the GPU was and
    while doing what ("GPU 0 idle 62 % of the time; 85 % of that while the loop waited on
    DataLoader reads")."""
    if not gpu_rows:
        confirm_host_bound(findings, None)
        return
    ev = gpu_evidence(idle_rows, gpu_rows)
    confirm_host_bound(findings, ev)
    sentences = gpu_sentences(ev)
    for f in findings:
        f.evidence["gpu"] = ev["gpus"]
        if sentences:
            f.summary += " " + "; ".join(sentences) + "."


def confirm_host_bound(findings: list[Finding], ev: dict | None,
                       min_idle_pct: float = THRESHOLDS.host_gpu_idle_pct) -> None:
    """Keeps a host_bound finding only where NVML saw the loop's GPU idle (in idle spans, or
    by its utilisation) at least `min_idle_pct` % of the time (the loop's own GPU when known,
    else any): a loop on the host whose GPU is busy (a deep queue of long kernels) is not
    host-bound. Without GPU
    samples (`ev` None) nothing says the GPU waited: the finding goes."""
    def idle(f: Finding) -> bool:
        if ev is None:
            return False
        gpus = [g for g in ev["gpus"] if g["pid"] == f.pid] or ev["gpus"]
        # hard idle spans, or NVML's utilisation below 100 % (tiny kernels keep the GPU busy
        # a few microseconds between launches: not an idle span, idle most of the time)
        return any(max(g["idle_pct"], g.get("soft_idle_pct", 0.0)) >= min_idle_pct
                   for g in gpus)
    findings[:] = [f for f in findings if f.kind != "host_bound" or idle(f)]
