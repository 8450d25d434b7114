"""OTLP sink: the series of /metrics pushed to an OpenTelemetry collector over OTLP/HTTP.

The series are not listed again here: every push reads the Prometheus sink's registry (its
collector and the process_* one), as a scrape of /metrics does, and turns each family into
OpenTelemetry's data model (the SDK's `MetricsData`), which the SDK's OTLP/HTTP exporter
encodes and posts. So /metrics and OTLP carry the same series, with the same labels (as
attributes) and the same values, and a series added to /metrics is pushed too.

Why not the SDK's meters: its API has no observable histogram, and the kernel's histograms are
slot counts, not values to record one by one; its periodic reader keeps a clock of its own,
where iotrace pushes once per interval, right after the interval is folded in.

Names: OpenTelemetry's semantic conventions where one exists (`SEMANTIC`: the process_* metrics
of iotrace's own process, which the resource describes); iotrace's own otherwise, made from the
Prometheus name by undoing OpenTelemetry's Prometheus naming (no `_total`, the unit suffix as
the unit, `iotrace.` as the namespace), so that a collector exporting to Prometheus gives back
the names of /metrics. Counters are cumulative sums from the sink's start (never reset), so a
push that is skipped or lost loses nothing: the next one carries the totals.

Pushing never holds the tracer up: `write()` only wakes a thread, which pushes the newest
totals (pushes that a slow receiver delays are merged into one), each within `TIMEOUT_S`. A
receiver that is down, slow or refusing gets one line on `note`; tracing goes on, and every
interval tries again.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import requests
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.semconv._incubating.metrics import process_metrics as semconv_process

from tracer.core.version import __version__

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from tracer.core.interval import Interval

TIMEOUT_S = 2.0  # one push, retries included; the end of the run waits at most this for the last
SCOPE = InstrumentationScope("iotrace", __version__)
CUMULATIVE = AggregationTemporality.CUMULATIVE

# Prometheus family name -> (semantic-convention name, unit, kind): the process_* metrics of
# prometheus_client's process collector, all of iotrace's own process (the resource).
COUNTER, UPDOWN, GAUGE = "counter", "updowncounter", "gauge"
SEMANTIC: dict[str, tuple[str, str, str]] = {
    "process_cpu_seconds": (semconv_process.PROCESS_CPU_TIME, "s", COUNTER),
    "process_resident_memory_bytes": (semconv_process.PROCESS_MEMORY_USAGE, "By", UPDOWN),
    "process_virtual_memory_bytes": (semconv_process.PROCESS_MEMORY_VIRTUAL, "By", UPDOWN),
    "process_open_fds": (semconv_process.PROCESS_UNIX_FILE_DESCRIPTOR_COUNT, "{file_descriptor}",
                         UPDOWN),
}
# Prometheus unit suffixes and the UCUM units OpenTelemetry writes for them
_UNIT_SUFFIXES = (("_seconds", "s"), ("_bytes", "By"))


def otel_name(family: str) -> tuple[str, str]:
    """A Prometheus family name (counters without `_total`, as prometheus_client names the
    family) -> (OpenTelemetry name, unit) for a name with no semantic convention."""
    name, unit = family, ""
    for suffix, ucum in _UNIT_SUFFIXES:
        if name.endswith(suffix):
            name, unit = name.removesuffix(suffix), ucum
            break
    if name.startswith("iotrace_"):
        name = "iotrace." + name.removeprefix("iotrace_")
    return name, unit


def resource() -> Resource:
    """Who pushes: iotrace on this host (OTEL_RESOURCE_ATTRIBUTES adds to it, as in any SDK)."""
    return Resource.create({"service.name": "iotrace", "service.version": __version__,
                            "host.name": socket.gethostname(), "process.pid": os.getpid()})


def metrics_data(registry: CollectorRegistry, res: Resource, start_ns: int,
                 now_ns: int) -> MetricsData:
    """What one push carries: every family `registry` collects now, as OpenTelemetry metrics."""
    metrics = [m for fam in registry.collect() if (m := _metric(fam, start_ns, now_ns))]
    return MetricsData([ResourceMetrics(res, [ScopeMetrics(SCOPE, metrics, "")], "")])


def _metric(fam, start_ns: int, now_ns: int) -> Metric | None:
    name, unit = otel_name(fam.name)
    kind = {"counter": COUNTER, "gauge": GAUGE, "histogram": "histogram"}.get(fam.type)
    if fam.name in SEMANTIC:
        name, unit, kind = SEMANTIC[fam.name]
    if kind is None:
        return None  # summary, info, stateset: none among iotrace's families
    if kind == "histogram":
        points = _histogram_points(fam.samples, fam.name, start_ns, now_ns)
        data = Histogram(points, CUMULATIVE)
    else:
        wanted = fam.name + "_total" if fam.type == "counter" else fam.name
        points = [NumberDataPoint(dict(s.labels), start_ns, now_ns, s.value)
                  for s in fam.samples if s.name == wanted]
        data = (Gauge(points) if kind == GAUGE
                else Sum(points, CUMULATIVE, is_monotonic=kind == COUNTER))
    # A family with no series yet (no block I/O so far) is a metric with no points: left out,
    # as OTLP has no place for /metrics' HELP and TYPE alone.
    return Metric(name, fam.documentation, unit, data) if points else None


def _histogram_points(samples: Iterable, family: str, start_ns: int,
                      now_ns: int) -> list[HistogramDataPoint]:
    """Prometheus' cumulative `le` buckets -> OpenTelemetry's explicit bounds and per-bucket
    counts (the last one above every bound), one point per label set."""
    series: dict[frozenset, dict] = {}
    for s in samples:
        labels = {k: v for k, v in s.labels.items() if k != "le"}
        one = series.setdefault(frozenset(labels.items()), {"labels": labels, "le": [], "sum": 0.0})
        if s.name == family + "_bucket":
            one["le"].append((float(s.labels["le"]), s.value))
        elif s.name == family + "_sum":
            one["sum"] = s.value
    points = []
    for one in series.values():
        le = sorted(one["le"])
        cumulative = [int(n) for _, n in le]
        counts = [b - a for a, b in zip([0, *cumulative[:-1]], cumulative, strict=True)]
        bounds = [bound for bound, _ in le if bound != float("inf")]
        # The kernel's slots give no exact extremes: min and max are left out (optional in OTLP).
        points.append(HistogramDataPoint(one["labels"], start_ns, now_ns, cumulative[-1] if le else 0,
                                         one["sum"], counts, bounds, None, None))  # type: ignore[arg-type]
    return points


class _Session(requests.Session):
    """The exporter's HTTP session, keeping what went wrong with the last request (the
    exporter says only that a push failed): the error raised, or the answer's status."""

    def __init__(self) -> None:
        super().__init__()
        self.error: Exception | None = None
        self.status: tuple[int, str] | None = None

    def request(self, *args, **kwargs):  # type: ignore[override]
        try:
            response = super().request(*args, **kwargs)
        except Exception as e:
            self.error = e
            raise
        if response.status_code >= 400:
            self.status = (response.status_code, response.reason or "")
        return response

    def forget(self) -> None:
        self.error = self.status = None


def why(error: Exception | None, status: tuple[int, str] | None, timeout_s: float) -> str:
    """A failed push's cause in a few words: no answer in time, the system's error (the
    first OSError behind the HTTP library's), or the receiver's HTTP status."""
    if isinstance(error, requests.Timeout):
        return f"no answer within {timeout_s:g} s"
    seen, todo = set(), [error]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.strerror:
            return e.strerror
        todo += [e.__cause__, e.__context__, getattr(e, "reason", None),
                 *(a for a in e.args if isinstance(a, BaseException))]
    if status is not None:
        return f"HTTP {status[0]} {status[1]}".strip()
    return type(error).__name__ if error is not None else "the export failed"


class OtlpSink:
    """Pushes what `metrics_registry` collects (a PrometheusSink's `registry`: what /metrics
    renders) to `url` once per interval, from its own thread. `note` hears the one line about
    a failing receiver. The PrometheusSink must get each interval before this sink does."""

    def __init__(self, metrics_registry: CollectorRegistry, url: str,
                 note: Callable[[str], None], timeout_s: float = TIMEOUT_S) -> None:
        self.url, self.timeout_s, self._note = url, timeout_s, note
        self.registry = metrics_registry  # what it pushes
        self._resource = resource()
        self._start_ns = time.time_ns()
        # The exporter logs each failure, and each retry: iotrace says one line instead
        self._quiet = logging.NullHandler()
        self._logger = logging.getLogger("opentelemetry.exporter")
        self._logger.addHandler(self._quiet)
        self._logger.propagate = False
        self._session = _Session()
        # Headers (OTEL_EXPORTER_OTLP_HEADERS), certificates and compression come from the
        # SDK's usual environment variables
        self._exporter = OTLPMetricExporter(endpoint=url, timeout=timeout_s, session=self._session)
        self._due = threading.Event()
        self._lock = threading.Lock()  # guards the counters below
        self._written = 0  # intervals written
        self._pushed = 0  # intervals in the last push that went out (or was tried)
        self._closing = False
        self.pushes_ok = 0
        self.warned = False
        self._thread = threading.Thread(target=self._run, name="iotrace-otlp", daemon=True)
        self._thread.start()

    def write(self, interval: Interval) -> None:
        """Asks for a push of the totals as they are now; returns at once."""
        with self._lock:
            self._written += 1
        self._due.set()

    def close(self) -> None:
        """Pushes what the last push missed, waiting at most `timeout_s`; safe to call twice."""
        if self._closing:
            return
        with self._lock:
            self._closing = True
        self._due.set()
        self._thread.join(self.timeout_s)
        if self._thread.is_alive():  # a push still waits on the receiver: given up (a daemon)
            self._warn(f"no answer within {self.timeout_s:g} s")
        self._exporter.shutdown()  # also ends a retry still waiting
        if not self._thread.is_alive():  # else it would log its failure when it comes
            self._logger.removeHandler(self._quiet)
            self._logger.propagate = True

    def _run(self) -> None:
        while True:
            self._due.wait()
            self._due.clear()
            with self._lock:
                written, closing = self._written, self._closing
            if written > self._pushed:
                self._pushed = written
                self._push()
            if closing:
                return

    def _push(self) -> None:
        self._session.forget()
        data = metrics_data(self.registry, self._resource, self._start_ns, time.time_ns())
        error: Exception | None = None
        try:
            result = self._exporter.export(data, timeout_millis=self.timeout_s * 1000)
        except Exception as e:  # the exporter's own failure: tracing goes on all the same
            result, error = MetricExportResult.FAILURE, e
        if result == MetricExportResult.SUCCESS:
            self.pushes_ok += 1
        else:
            self._warn(why(error or self._session.error, self._session.status, self.timeout_s))

    def _warn(self, reason: str) -> None:
        """The one line about a failing receiver, whichever thread sees it first."""
        with self._lock:
            if self.warned:
                return
            self.warned = True
        self._note(f"iotrace: cannot push metrics to {self.url}: {reason}; tracing goes on, "
                   "and each interval tries again")
