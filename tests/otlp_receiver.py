"""A real OTLP/HTTP metrics receiver for the tests, on 127.0.0.1: it decodes each request's
ExportMetricsServiceRequest with opentelemetry-proto, as a collector does, and can answer late.

`points(request)` flattens what it received into Prometheus' terms (the OpenTelemetry
specification's naming for Prometheus: dots to underscores, the unit as a suffix, `_total` for
monotonic sums), so a test compares it sample by sample with a scrape of /metrics.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

UNIT_SUFFIX = {"s": "_seconds", "By": "_bytes"}


class Receiver:
    """Collects the requests posted to it; `delay_s`: how long it waits before answering,
    `status`: the HTTP status it answers with."""

    def __init__(self, delay_s: float = 0.0, status: int = 200) -> None:
        self.delay_s, self.status = delay_s, status
        self.requests: list[ExportMetricsServiceRequest] = []
        self.paths: list[str] = []
        self.content_types: list[str | None] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = ExportMetricsServiceRequest.FromString(body)
                time.sleep(receiver.delay_s)
                receiver.requests.append(request)
                receiver.paths.append(self.path)
                receiver.content_types.append(self.headers.get("Content-Type"))
                answer = ExportMetricsServiceResponse().SerializeToString()
                with contextlib.suppress(OSError):  # a client that gave up closed the socket
                    self.send_response(receiver.status)
                    self.send_header("Content-Type", "application/x-protobuf")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Receiver:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def closed_port_url() -> str:
    """The URL of a receiver that is down: a port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def metrics(request: ExportMetricsServiceRequest) -> dict[str, object]:
    """{name: Metric} of a request with one resource and one scope, as iotrace sends."""
    (rm,) = request.resource_metrics
    (sm,) = rm.scope_metrics
    return {m.name: m for m in sm.metrics}


def resource(request: ExportMetricsServiceRequest) -> dict[str, object]:
    return {a.key: _value(a.value) for a in request.resource_metrics[0].resource.attributes}


def _value(v) -> object:
    return getattr(v, v.WhichOneof("value"))


def attributes(point) -> dict[str, str]:
    return {a.key: _value(a.value) for a in point.attributes}


def number(point) -> float:
    """A NumberDataPoint's value, sent as an int or a double."""
    return getattr(point, point.WhichOneof("value"))


def prometheus_name(metric) -> str:
    name = metric.name.replace(".", "_") + UNIT_SUFFIX.get(metric.unit, "")
    if metric.WhichOneof("data") == "sum" and metric.sum.is_monotonic:
        name += "_total"
    return name


def points(request: ExportMetricsServiceRequest,
           names: dict[str, str] | None = None) -> dict[tuple[str, frozenset], float]:
    """{(Prometheus sample name, frozenset of labels): value}: histograms as cumulative
    `_bucket` samples (le as a float), `_count` and `_sum`. `names` renames metrics first
    (semantic-convention names back to prometheus_client's)."""
    out: dict[tuple[str, frozenset], float] = {}
    for metric in metrics(request).values():
        name = (names or {}).get(metric.name) or prometheus_name(metric)
        kind = metric.WhichOneof("data")
        if kind == "histogram":
            for p in metric.histogram.data_points:
                labels = attributes(p)
                cum = 0
                for bound, n in zip([*p.explicit_bounds, float("inf")], p.bucket_counts, strict=True):
                    cum += n
                    out[(f"{name}_bucket", frozenset({**labels, "le": bound}.items()))] = cum
                out[(f"{name}_count", frozenset(labels.items()))] = p.count
                out[(f"{name}_sum", frozenset(labels.items()))] = p.sum
        else:
            for p in getattr(metric, kind).data_points:
                out[(name, frozenset(attributes(p).items()))] = number(p)
    return out
