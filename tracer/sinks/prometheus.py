"""Prometheus sink: `/metrics` over the same interval snapshots every other sink renders.

The session calls `PrometheusSink.write()` once per interval with that interval (its snapshot's
deltas, its `loop` rows, the current findings, the GPU idle spans that ended in it, and the ring
buffer's cumulative lost-event count). The sink folds them into cumulative state under a lock; a custom
collector turns that state into metric families when Prometheus scrapes, from the HTTP server's
thread. Scrapes are consistent: a histogram's buckets, _count and _sum come from one copy.

Metrics (base units; docs/prometheus.md has the full description and example queries):
  iotrace_block_io_latency_seconds{device,op}        histogram, block issue -> complete
  iotrace_block_queue_latency_seconds{device,op}     histogram, block insert -> issue
  iotrace_syscall_io_latency_seconds{role,op}        histogram, read/write/fsync/... on files
  iotrace_read_bytes_total{role,layer}               counter, layer = syscall | block
  iotrace_written_bytes_total{role,layer}            counter
  iotrace_training_loop_seconds_total{state}         counter, tracer.core.vocab.LOOP_STATES
  iotrace_gpu_idle_seconds_total{gpu,cause}          counter
  iotrace_findings{kind,rank}                        gauge, severity 0-100 (0: not found now)
  iotrace_events_lost_total                          counter
  iotrace_device_user_requests_total{device,op,who,user}   counter, every process's requests
  iotrace_device_user_bytes_total{device,op,who,user}      counter   to each disk, traced or not
  iotrace_device_user_service_seconds_total{device,op,who,user}  counter
  iotrace_self_bpf_runs_total{object,program}        counter, runs of each of iotrace's BPF programs
  iotrace_self_bpf_run_seconds_total{object,program} counter, their time in the kernel
  iotrace_self_bpf_recursion_misses_total{object,program}  counter
  iotrace_self_bpf_stats_enabled                     gauge, 1 when the kernel counts the above
  iotrace_self_bpf_stats_seconds_total               counter, seconds they were counted
  iotrace_self_map_full_drops_total{map}             counter, inserts refused by a full map
  iotrace_self_block_completions_unseen_total        counter, block requests no program saw end
  iotrace_self_cpu_seconds_total                     counter, the tracer process's CPU
  iotrace_self_peak_resident_memory_bytes            gauge, the tracer process's peak RSS
  iotrace_last_update_timestamp_seconds              gauge, end of the last interval (Unix time)
  iotrace_build_info{version}                        gauge, always 1
plus the standard process_* metrics of the iotrace process itself (its CPU and memory).

Labels stay bounded: device is the kernel's name (as node_exporter's `device`, so queries join on
it), role/op/layer/state/cause/kind/map come from fixed vocabularies, gpu is an NVML index,
object/program name iotrace's own BPF programs (a fixed set per version), who is the
`device_users` table's (traced, other, kernel_thread, rest). Never a PID, path or command line;
a comm only as `user`, the name of an untraced process that used a disk, and only the first
MAX_USER_LABELS names seen: the others' requests count under who="rest" (hashed with
--redact-paths, as in the trace).

Histograms come from the kernel's log2 slots: slot i holds [2^i, 2^(i+1)) ns, so bucket bounds
are the slots' upper bounds in seconds. Only the bounds from 2^9 ns (512 ns) to 2^35 ns (34.4 s)
are exported, to keep the series count down; faster operations fall in the first bucket, slower
ones only in +Inf. The kernel keeps no latency sums, so `_sum` is estimated from slot midpoints
(1.5 * 2^i ns; the open-ended last slot counts as its lower bound): within a factor of 4/3 of the
truth, good for averages, not for exact totals.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from tracer.core.abi import MAP_FULL_MAPS
from tracer.core.selfcost import SelfCost
from tracer.core.version import __version__
from tracer.core.vocab import FINDING_KINDS, LOOP_STATES, ROLES
from tracer.tracedir.schema import MAX_DEVICE_USERS

if TYPE_CHECKING:
    from tracer.core.interval import Interval

DEFAULT_HOST = "127.0.0.1"
# The Prometheus wiki's exporter range (9100-9999) is fully allocated; 9473 is free of everything
# a GPU training node usually runs (node_exporter 9100, DCGM exporter 9400, ebpf_exporter 9435,
# OpenTelemetry's Prometheus exporter 9464, kubelet/kube-proxy 102xx). See docs/prometheus.md.
DEFAULT_PORT = 9473

UNKNOWN = "unknown"  # label value for a role/device/cause the tracer could not name
# The loop's `rank` label: the first ranks seen get their own value (a node runs a few), any
# more share "other", so that the series stay bounded; a `main` (no rank) has rank="".
MAX_RANK_LABELS = 64
OTHER_RANKS = "other"
# The disk users' `user` label: the names of untraced processes, the first ones seen, as many as
# a `device_users` interval names per disk and op; the requests of any other go to who="rest".
MAX_USER_LABELS = MAX_DEVICE_USERS
REST_USERS = "rest"
LE_MIN_EXP = 9  # first finite bucket bound: 2^9 ns = 512 ns
LE_MAX_EXP = 35  # last finite bucket bound: 2^35 ns = 34.4 s
LE_BOUNDS_NS: tuple[int, ...] = tuple(1 << k for k in range(LE_MIN_EXP, LE_MAX_EXP + 1))
_LE_LABELS: tuple[str, ...] = (*(floatToGoString(b / 1e9) for b in LE_BOUNDS_NS), "+Inf")
_OPEN_HI_NS = 1 << 62  # a slot bound this large is the open-ended last slot (hi = 2^63 - 1)

BYTES_LAYERS = ("syscall", "block")

_HISTOGRAMS = {
    # name: (layer of the latency rows, label names, HELP)
    "iotrace_block_io_latency_seconds": (
        "block", ("device", "op"),
        "Block I/O service time (request issued to the device -> completed) of traced processes, "
        "in seconds, by disk (kernel name, as node_exporter's device label) and op. Buckets are "
        "the kernel's log2 slots; _sum is estimated from slot midpoints (within a factor of 4/3)."),
    "iotrace_block_queue_latency_seconds": (
        "block_queue", ("device", "op"),
        "Block I/O queue time (request inserted -> issued to the device) of traced processes, in "
        "seconds, by disk and op. Buckets are the kernel's log2 slots; _sum is estimated from "
        "slot midpoints (within a factor of 4/3)."),
    "iotrace_syscall_io_latency_seconds": (
        "syscall", ("role", "op"),
        "Latency of file I/O system calls (read, pread64, readv, write, ..., fsync) of traced "
        "processes, in seconds, by role (main, dataloader_worker, child) and op; regular files "
        "only (no pipes or sockets). Buckets are the kernel's log2 slots; _sum is estimated from "
        "slot midpoints (within a factor of 4/3)."),
}


class _Hist:
    """Cumulative operation counts per exported bucket (the last one: above every bound)."""

    __slots__ = ("counts", "sum_ns")

    def __init__(self) -> None:
        self.counts = [0] * (len(LE_BOUNDS_NS) + 1)
        self.sum_ns = 0

    def add(self, lo_ns: int, hi_ns: int, count: int) -> None:
        # Slot [lo, hi) belongs to the first bucket whose bound is >= hi (every op in it is < hi).
        self.counts[bisect_left(LE_BOUNDS_NS, hi_ns)] += count
        mid = lo_ns if hi_ns >= _OPEN_HI_NS else (lo_ns + hi_ns) // 2
        self.sum_ns += mid * count

    def copy(self) -> _Hist:
        h = _Hist()
        h.counts = list(self.counts)
        h.sum_ns = self.sum_ns
        return h


class _State:
    """Everything the collector exports; a copy of it is what one scrape renders."""

    def __init__(self) -> None:
        self.hists: dict[str, dict[tuple[str, ...], _Hist]] = {name: {} for name in _HISTOGRAMS}
        self.read_bytes = {(role, layer): 0 for role in ROLES for layer in BYTES_LAYERS}
        self.written_bytes = dict(self.read_bytes)
        self.loop_ns: dict[tuple[str, str], int] = {(s, ""): 0 for s in LOOP_STATES}
        self.ranks: set[str] = set()  # the rank label values given so far
        self.gpu_idle_ns: dict[tuple[str, str], int] = {}
        # (kind, rank) -> severity; every kind has its rank="" series from the start
        self.findings: dict[tuple[str, str], int] = {(k, ""): 0 for k in FINDING_KINDS}
        self.events_lost = 0
        # (device, op, who, user) -> [requests, bytes, service ns], from the device_users rows
        self.device_users: dict[tuple[str, str, str, str], list[int]] = {}
        self.user_labels: set[str] = set()  # the user label values given so far
        self.last_ts_ns = 0
        # iotrace's own cost (snapshot.cost), cumulative: (object, program) -> counts
        self.bpf_runs: dict[tuple[str, str], int] = {}
        self.bpf_run_ns: dict[tuple[str, str], int] = {}
        self.bpf_recursion_misses: dict[tuple[str, str], int] = {}
        self.bpf_stats_enabled = 0
        self.bpf_stats_s = 0.0
        self.map_full = dict.fromkeys(MAP_FULL_MAPS, 0)
        self.block_unseen = 0
        self.cpu_s = 0.0
        self.peak_rss_bytes = 0

    def copy(self) -> _State:
        s = _State()
        s.hists = {name: {k: h.copy() for k, h in series.items()} for name, series in self.hists.items()}
        s.read_bytes = dict(self.read_bytes)
        s.written_bytes = dict(self.written_bytes)
        s.loop_ns = dict(self.loop_ns)
        s.ranks = set(self.ranks)
        s.gpu_idle_ns = dict(self.gpu_idle_ns)
        s.findings = dict(self.findings)
        s.events_lost = self.events_lost
        s.device_users = {k: list(v) for k, v in self.device_users.items()}
        s.user_labels = set(self.user_labels)
        s.last_ts_ns = self.last_ts_ns
        s.bpf_runs = dict(self.bpf_runs)
        s.bpf_run_ns = dict(self.bpf_run_ns)
        s.bpf_recursion_misses = dict(self.bpf_recursion_misses)
        s.bpf_stats_enabled = self.bpf_stats_enabled
        s.bpf_stats_s = self.bpf_stats_s
        s.map_full = dict(self.map_full)
        s.block_unseen = self.block_unseen
        s.cpu_s = self.cpu_s
        s.peak_rss_bytes = self.peak_rss_bytes
        return s


def _label(value: object) -> str:
    return UNKNOWN if value is None or value == "" else str(value)


def _get(obj: object, name: str) -> object:
    """A field of a Finding (dataclass) or of a findings row (dict)."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


class PrometheusSink:
    """Cumulative Prometheus metrics over the interval snapshots; serves them with `start()`.

    `write()` and the collector may run on different threads (the HTTP server scrapes from its
    own); both take the same lock. `registry` holds this sink's collector (and the process_*
    collector): give it to `prometheus_client.generate_latest` to render without a server.
    """

    def __init__(self, process_metrics: bool = True) -> None:
        self._lock = threading.Lock()
        self._state = _State()
        self.registry = CollectorRegistry(auto_describe=True)
        self.collector = _Collector(self)
        self.registry.register(self.collector)
        if process_metrics:
            ProcessCollector(registry=self.registry)
        self._httpd = None
        self._thread: threading.Thread | None = None
        self._address: tuple[str, int] | None = None
        self._started = False

    # --- input -----------------------------------------------------------------------------

    def write(self, interval: Interval) -> None:
        """Folds one interval (tracer.core.interval.Interval) in:

        snapshot       its latency and device_users rows are deltas; its cost, when set
                       (SelfCost), gives the iotrace_self_* metrics
        loop           the interval's `loop` rows (one per training process)
        findings       the findings as they stand now (tracer.core.diagnosis.Finding or findings rows);
                       they replace the previous ones: a kind not among them goes back to 0
        gpu_idle       `gpu_idle` rows of spans that ended in this interval, each span once
        events_lost    the ring buffer's cumulative lost-event count (kernel.ring.EventRing.lost());
                       the counter never goes down, whatever is passed
        """
        snapshot, loop_rows, findings = interval.snapshot, interval.loop, interval.findings
        gpu_idle_rows, events_lost = interval.gpu_idle, interval.events_lost
        with self._lock:
            s = self._state
            severity: dict[tuple[str, str], int] = {}
            for f in findings:
                key = (_label(_get(f, "kind")), self._rank_label(s, _get(f, "rank")))
                severity[key] = max(severity.get(key, 0), int(_get(f, "severity") or 0))
            for row in snapshot.latency:
                self._add_latency(s, row)
            for row in getattr(snapshot, "device_users", ()):
                self._add_device_user(s, row)
            for row in loop_rows:
                rank = self._rank_label(s, row.get("rank"))
                for state in LOOP_STATES:
                    key = (state, rank)
                    s.loop_ns[key] = s.loop_ns.get(key, 0) + int(row.get(f"{state}_ns") or 0)
            for row in gpu_idle_rows:
                key = (_label(row.get("gpu")), _label(row.get("cause")))
                s.gpu_idle_ns[key] = s.gpu_idle_ns.get(key, 0) + int(row.get("duration_ns") or 0)
            s.findings = dict.fromkeys(s.findings, 0) | severity  # series once seen stay, at 0
            s.events_lost = max(s.events_lost, int(events_lost or 0))
            s.last_ts_ns = max(s.last_ts_ns, int(snapshot.ts_ns))
            cost = getattr(snapshot, "cost", None)
            if cost is not None:
                self._add_cost(s, cost)

    @staticmethod
    def _rank_label(s: _State, rank: object) -> str:
        if rank is None or rank != rank:  # None, or NaN from a findings row read with pandas
            return ""
        label = str(int(rank))  # type: ignore[call-overload]
        if label not in s.ranks:
            if len(s.ranks) >= MAX_RANK_LABELS:
                return OTHER_RANKS
            s.ranks.add(label)
        return label

    @staticmethod
    def _add_device_user(s: _State, row: dict) -> None:
        """A `device_users` row: an untraced process's under its name while the names given
        are fewer than MAX_USER_LABELS (or it has one), else under who="rest"."""
        who, user = _label(row.get("who")), ""
        if who == "other":
            user = _label(row.get("comm"))
            if user not in s.user_labels:
                if len(s.user_labels) >= MAX_USER_LABELS:
                    who, user = REST_USERS, ""
                else:
                    s.user_labels.add(user)
        key = (_label(row.get("device")), _label(row.get("op")), who, user)
        acc = s.device_users.setdefault(key, [0, 0, 0])
        acc[0] += int(row.get("requests") or 0)
        acc[1] += int(row.get("bytes") or 0)
        acc[2] += int(row.get("service_ns") or 0)

    @staticmethod
    def _add_cost(s: _State, cost: SelfCost) -> None:
        """Cumulative readings: kept as the maximum seen, so a counter never goes down."""
        s.bpf_stats_enabled = int(cost.stats_unavailable is None)
        s.bpf_stats_s = max(s.bpf_stats_s, cost.stats_seconds)
        for p in cost.programs:
            key = (_label(p.object), _label(p.name))
            s.bpf_runs[key] = max(s.bpf_runs.get(key, 0), p.run_cnt)
            s.bpf_run_ns[key] = max(s.bpf_run_ns.get(key, 0), p.run_time_ns)
            s.bpf_recursion_misses[key] = max(s.bpf_recursion_misses.get(key, 0),
                                              p.recursion_misses or 0)
        for name, n in cost.map_full_drops.items():
            s.map_full[name] = max(s.map_full.get(name, 0), n)
        s.block_unseen = max(s.block_unseen, cost.block_unseen_requests)
        s.cpu_s = max(s.cpu_s, cost.tracer.cpu_s)
        s.peak_rss_bytes = max(s.peak_rss_bytes, cost.tracer.peak_rss_bytes)

    @staticmethod
    def _add_latency(s: _State, row: dict) -> None:
        layer = row.get("layer")
        op = _label(row.get("op"))
        role = _label(row.get("role"))
        count = int(row.get("count") or 0)
        nbytes = int(row.get("bytes") or 0)
        if layer == "syscall":
            if row.get("target") != "file":
                return  # pipes and sockets: DataLoader queues, not storage
            name, labels = "iotrace_syscall_io_latency_seconds", (role, op)
        elif layer in ("block", "block_queue"):
            name = ("iotrace_block_io_latency_seconds" if layer == "block"
                    else "iotrace_block_queue_latency_seconds")
            labels = (_label(row.get("device")), op)
        else:
            return  # pagecache: pages, no latency
        if layer in BYTES_LAYERS and nbytes:  # block_queue rows are the same requests again
            table = s.read_bytes if op == "read" else s.written_bytes if op == "write" else None
            if table is not None:
                table[(role, layer)] = table.get((role, layer), 0) + nbytes
        if count:
            series = s.hists[name]
            hist = series.get(labels)
            if hist is None:
                hist = series[labels] = _Hist()
            hist.add(int(row.get("bucket_lo_ns") or 0), int(row.get("bucket_hi_ns") or 0), count)

    def close(self) -> None:
        """Stops serving: the end of the run (Sink.close)."""
        self.stop()

    def state_copy(self) -> _State:
        with self._lock:
            return self._state.copy()

    # --- serving ---------------------------------------------------------------------------

    def start(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
        """Serves /metrics on host:port from a daemon thread. Port 0 picks a free port (see
        `address`). Raises OSError with a one-line message when the address cannot be used."""
        if self._started:
            raise RuntimeError("the Prometheus endpoint is already running")
        try:
            served = start_http_server(port, addr=host, registry=self.registry)
        except OSError as e:
            why = e.strerror or str(e)
            raise OSError(f"cannot serve Prometheus metrics on {_join(host, port)}: {why} (another "
                          f"exporter on that port? pick one with --prometheus [HOST:]PORT)") from e
        self._started = True
        if isinstance(served, tuple):  # prometheus_client >= 0.20 returns (server, thread)
            self._httpd, self._thread = served
            self._address = (host, int(self._httpd.server_address[1]))
        else:  # older versions return nothing: the port is what was asked, stop() cannot stop it
            self._address = (host, port)

    @property
    def address(self) -> tuple[str, int] | None:
        """(host, port) being served, with the real port when started on port 0."""
        return self._address

    @property
    def url(self) -> str | None:
        return f"http://{_join(*self._address)}/metrics" if self._address else None

    def stop(self) -> None:
        """Stops serving (a no-op when not started, or on prometheus_client < 0.20)."""
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None
        self._address = None
        self._started = False


class _Collector:
    """Renders a consistent copy of the sink's state as metric families, at scrape time."""

    def __init__(self, sink: PrometheusSink) -> None:
        self.sink = sink

    def describe(self) -> Iterator[Metric]:
        return _families(_State())

    def collect(self) -> Iterator[Metric]:
        return _families(self.sink.state_copy())


def _families(s: _State) -> Iterator[Metric]:
    for name, (_layer, labelnames, doc) in _HISTOGRAMS.items():
        fam = HistogramMetricFamily(name, doc, labels=labelnames)
        for labels, hist in sorted(s.hists[name].items()):
            cum, buckets = 0, []
            for le, n in zip(_LE_LABELS, hist.counts, strict=True):
                cum += n
                buckets.append((le, cum))
            fam.add_metric(list(labels), buckets, hist.sum_ns / 1e9)
        yield fam

    for name, table, what in (("iotrace_read_bytes_total", s.read_bytes, "read"),
                              ("iotrace_written_bytes_total", s.written_bytes, "written")):
        fam = CounterMetricFamily(
            name, f"Bytes {what} by traced processes, by role and layer: syscall = {what} by "
                  f"system calls on regular files (through the page cache or not), block = {what} "
                  f"by the block device requests they submitted.",
            labels=("role", "layer"))
        for (role, layer), n in sorted(table.items()):
            fam.add_metric([role, layer], n)
        yield fam

    fam = CounterMetricFamily(
        "iotrace_training_loop_seconds_total",
        "Time of the training loop (main thread of each traced main process), in seconds, by "
        "state: " + ", ".join(LOOP_STATES) + ", and rank (a distributed job's; empty for "
        f"other training processes; past {MAX_RANK_LABELS} ranks, '{OTHER_RANKS}'). Summed "
        "over the training processes of the host.", labels=("state", "rank"))
    for (state, rank), ns in s.loop_ns.items():
        fam.add_metric([state, rank], ns / 1e9)
    yield fam

    fam = CounterMetricFamily(
        "iotrace_gpu_idle_seconds_total",
        "Time GPUs were idle while traced, in seconds, by GPU (NVML index) and the cause the "
        "diagnosis gave the idle span.", labels=("gpu", "cause"))
    for (gpu, cause), ns in sorted(s.gpu_idle_ns.items()):
        fam.add_metric([gpu, cause], ns / 1e9)
    yield fam

    fam = GaugeMetricFamily(
        "iotrace_findings",
        "Severity (0-100) of each kind of finding of the diagnosis as it stands now, by kind "
        "and rank (the rank it is about in a distributed job; empty for other findings; past "
        f"{MAX_RANK_LABELS} ranks, '{OTHER_RANKS}'); the highest over the traced processes; 0 "
        "when not found now.", labels=("kind", "rank"))
    for (kind, rank), sev in sorted(s.findings.items()):
        fam.add_metric([kind, rank], sev)
    yield fam

    yield from _device_user_families(s)

    fam = CounterMetricFamily(
        "iotrace_events_lost_total",
        "Events (process life cycle, first sight of files, slow operations) dropped because the "
        "ring buffer was full. Counts and histograms are kept in the kernel and lose nothing.")
    fam.add_metric([], s.events_lost)
    yield fam

    yield from _self_families(s)

    yield GaugeMetricFamily(
        "iotrace_last_update_timestamp_seconds",
        "End of the last interval folded in, in seconds since the Unix epoch (0 before the "
        "first).", value=s.last_ts_ns / 1e9)

    fam = GaugeMetricFamily("iotrace_build_info", "The iotrace version; always 1.",
                            labels=("version",))
    fam.add_metric([__version__], 1)
    yield fam


def _device_user_families(s: _State) -> Iterator[Metric]:
    """Who used each disk: every block request to it, by the traced processes or not."""
    labels = ("device", "op", "who", "user")
    who = ("who: traced (the traced processes), other (an untraced process, named in user), "
           "kernel_thread (requests a kernel thread submitted for an untraced cgroup), rest "
           f"(users past the first {MAX_USER_LABELS} names, and past the bound of an interval's "
           "rows)")
    for i, (name, scale, what) in enumerate((
            ("iotrace_device_user_requests_total", 1, "Block requests completed"),
            ("iotrace_device_user_bytes_total", 1, "Bytes of the block requests completed"),
            ("iotrace_device_user_service_seconds_total", 1e9,
             "Service time (issued -> completed) of the block requests, in seconds,"))):
        fam = CounterMetricFamily(
            name, f"{what} on each disk (kernel name, as node_exporter's device label), by op "
                  f"and by who submitted them, traced or not; {who}. rate() of the others' "
                  "bytes against the traced ones' is a neighbour's share of the disk.",
            labels=labels)
        for key, acc in sorted(s.device_users.items()):
            fam.add_metric(list(key), acc[i] / scale)
        yield fam


def _self_families(s: _State) -> Iterator[Metric]:
    """iotrace's own cost: its BPF programs, refused map inserts, the tracer process."""
    per_program = (
        ("iotrace_self_bpf_runs_total", s.bpf_runs, 1,
         "Runs of each of iotrace's BPF programs since they were loaded (the kernel's run_cnt; "
         "counted only while BPF stats are on, by default 2 % of every interval: "
         "see iotrace_self_bpf_stats_seconds_total). Programs run "
         "for every process on the host and return at once for untraced ones."),
        ("iotrace_self_bpf_run_seconds_total", s.bpf_run_ns, 1e9,
         "Time spent in each of iotrace's BPF programs, in seconds (the kernel's run_time_ns); "
         "divided by the runs, the cost of one run."),
        ("iotrace_self_bpf_recursion_misses_total", s.bpf_recursion_misses, 1,
         "Runs of each of iotrace's BPF programs the kernel skipped because the program was "
         "already running on that CPU (what they would have counted is missing)."),
    )
    for name, table, scale, doc in per_program:
        fam = CounterMetricFamily(name, doc, labels=("object", "program"))
        for (obj, prog), v in sorted(table.items()):
            fam.add_metric([obj, prog], v / scale)
        yield fam
    yield GaugeMetricFamily(
        "iotrace_self_bpf_stats_enabled",
        "1 when iotrace has the kernel count its BPF programs' runs and time (BPF_ENABLE_STATS, "
        "held by iotrace and undone when it exits; by default during 2 % of every interval, see "
        "iotrace_self_bpf_stats_seconds_total), 0 when it could not or was told not to.",
        value=s.bpf_stats_enabled)
    fam = CounterMetricFamily(
        "iotrace_self_bpf_stats_seconds_total",
        "Seconds during which the kernel counted iotrace's BPF programs (iotrace --bpf-stats): "
        "rate(iotrace_self_bpf_run_seconds_total) / rate(this) is the share of one CPU they "
        "take.")
    fam.add_metric([], s.bpf_stats_s)
    yield fam
    fam = CounterMetricFamily(
        "iotrace_self_map_full_drops_total",
        "Inserts the kernel refused because one of iotrace's maps was full, by map: each is an "
        "operation (or process, thread, block request) whose counts are missing.",
        labels=("map",))
    for m, n in sorted(s.map_full.items()):
        fam.add_metric([m], n)
    yield fam
    fam = CounterMetricFamily(
        "iotrace_self_block_completions_unseen_total",
        "Traced block requests whose end the kernel ran no completion program for (seen on 6.18 "
        "guests): they are in no block histogram, and a block histogram's _count plus this is "
        "exact. Counted when the request's address is reused, or by the interval after it ended "
        "once its disk is seen with nothing in flight (every request still held then ended).")
    fam.add_metric([], s.block_unseen)
    yield fam
    fam = CounterMetricFamily(
        "iotrace_self_cpu_seconds_total",
        "CPU time (user + system) of the iotrace process, every thread, since it started: the "
        "reading, aggregating and writing that tracing costs besides the BPF programs.")
    fam.add_metric([], s.cpu_s)
    yield fam
    yield GaugeMetricFamily(
        "iotrace_self_peak_resident_memory_bytes",
        "Peak resident memory of the iotrace process, in bytes (getrusage ru_maxrss).",
        value=s.peak_rss_bytes)


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_listen(spec: str) -> tuple[str, int]:
    """`--prometheus [HOST:]PORT` -> (host, port); host defaults to 127.0.0.1.

    Accepts PORT, HOST:PORT, and [IPv6]:PORT. Raises ValueError with a one-line message naming
    what is wrong and what to write instead.
    """
    s = spec.strip()
    example = f"write PORT (listens on {DEFAULT_HOST}), HOST:PORT or [IPv6]:PORT, e.g. {DEFAULT_PORT} " \
              f"or 0.0.0.0:{DEFAULT_PORT}"
    if not s:
        raise ValueError(f"--prometheus needs [HOST:]PORT: {example}")
    if "/" in s:
        raise ValueError(f"--prometheus {spec!r}: give an address, not a URL: {example}")
    if s.startswith("["):
        end = s.find("]")
        if end < 0 or s[end + 1:end + 2] != ":":
            raise ValueError(f"--prometheus {spec!r}: an IPv6 address is written [ADDR]:PORT, "
                             f"e.g. [::1]:{DEFAULT_PORT}")
        host, port_s = s[1:end], s[end + 2:]
    elif ":" not in s:
        host, port_s = DEFAULT_HOST, s
    elif s.count(":") == 1:
        host, port_s = s.split(":")
    else:
        raise ValueError(f"--prometheus {spec!r}: put an IPv6 address in brackets, e.g. "
                         f"[::1]:{DEFAULT_PORT}")
    if not host:
        raise ValueError(f"--prometheus {spec!r}: the host is empty: write 0.0.0.0:{port_s or 'PORT'} "
                         f"to listen on every interface, or just the port for {DEFAULT_HOST}")
    if any(c.isspace() for c in host):
        raise ValueError(f"--prometheus {spec!r}: the host contains spaces: {example}")
    if not port_s.isascii() or not port_s.isdigit():
        raise ValueError(f"--prometheus {spec!r}: the port must be a number from 1 to 65535: "
                         f"{example}")
    port = int(port_s)
    if not 1 <= port <= 65535:
        raise ValueError(f"--prometheus {spec!r}: port {port} is out of range (1-65535)")
    return host, port
