"""--otlp without a kernel: the Prometheus sink fed synthetic intervals, pushed by the OTLP sink
to a real receiver on 127.0.0.1 (tests/otlp_receiver.py), compared sample by sample with a
scrape of /metrics; receivers that are down or slow; the URL and options checks."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from otlp_receiver import Receiver, closed_port_url, metrics, number, points, resource
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from test_prometheus import intervals

from conftest import run_iotrace
from tracer import __version__
from tracer.core.interval import Interval
from tracer.errors import EXIT_USAGE, TraceFailure
from tracer.live.options import TraceOptions
from tracer.live.sinks import push_metrics
from tracer.sinks import otlp_target
from tracer.sinks.otlp import SEMANTIC, OtlpSink, otel_name
from tracer.sinks.otlp_target import NEEDS, parse_otlp_url
from tracer.sinks.prometheus import LE_BOUNDS_NS, PrometheusSink


def scraped(registry) -> dict[tuple[str, frozenset], float]:
    """/metrics as text, parsed back: {(sample name, labels with le as a float): value}."""
    out = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            labels = {k: float(v) if k == "le" else v for k, v in s.labels.items()}
            out[(s.name, frozenset(labels.items()))] = s.value
    return out


def pushed(sink: PrometheusSink, receiver: Receiver, notes: list[str], **kw) -> OtlpSink:
    """Writes the three synthetic intervals to `sink`, each then to an OtlpSink pushing to
    `receiver`, and closes it (the last push)."""
    pusher = OtlpSink(sink.registry, parse_otlp_url(receiver.url), notes.append, **kw)
    for snap, loop, findings, gpu_idle, lost in intervals():
        interval = Interval(snap, loop, findings, gpu_idle=gpu_idle, events_lost=lost)
        sink.write(interval)
        pusher.write(interval)
    pusher.close()
    return pusher


def test_pushes_every_series_of_metrics_with_its_value():
    """The last push holds exactly the samples of /metrics: same series, labels and values,
    and the names a collector's Prometheus exporter turns back into /metrics' names."""
    sink = PrometheusSink(process_metrics=False)  # (their values move between two reads)
    notes: list[str] = []
    with Receiver() as receiver:
        pusher = pushed(sink, receiver, notes)
    assert notes == [] and pusher.pushes_ok == len(receiver.requests) >= 1
    assert receiver.paths[-1] == "/v1/metrics"
    assert receiver.content_types[-1] == "application/x-protobuf"
    want = scraped(sink.registry)
    got = points(receiver.requests[-1])
    assert got == want
    # The synthetic block reads: 10 + 5 + 2 + 3 + 4 on vda, in the kernel's log2 bounds.
    block = metrics(receiver.requests[-1])["iotrace.block_io_latency"]
    (vda_reads,) = [p for p in block.histogram.data_points
                    if {(a.key, a.value.string_value) for a in p.attributes}
                    == {("device", "vda"), ("op", "read")}]
    assert vda_reads.count == 24 == sum(vda_reads.bucket_counts)
    assert list(vda_reads.explicit_bounds) == [b / 1e9 for b in LE_BOUNDS_NS]
    assert block.unit == "s" and not vda_reads.HasField("min")


def test_kinds_units_and_resource():
    sink = PrometheusSink()
    with Receiver() as receiver:
        pushed(sink, receiver, [])
    request = receiver.requests[-1]
    by_name = metrics(request)
    cumulative = 2  # AGGREGATION_TEMPORALITY_CUMULATIVE
    read = by_name["iotrace.read"]
    assert (read.unit, read.sum.is_monotonic, read.sum.aggregation_temporality) == ("By", True,
                                                                                   cumulative)
    assert by_name["iotrace.findings"].WhichOneof("data") == "gauge"
    assert by_name["iotrace.block_io_latency"].histogram.aggregation_temporality == cumulative
    # The process collector's metrics under their semantic-convention names, of iotrace's process
    assert by_name["process.cpu.time"].unit == "s" and by_name["process.cpu.time"].sum.is_monotonic
    memory = by_name["process.memory.usage"]
    assert (memory.unit, memory.sum.is_monotonic) == ("By", False)
    assert number(memory.sum.data_points[0]) > 10 << 20
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes"}.isdisjoint(
        {name for name, _ in points(request)})
    res = resource(request)
    assert (res["service.name"], res["service.version"]) == ("iotrace", __version__)
    # Every push is cumulative from the same start
    starts = {p.start_time_unix_nano for r in receiver.requests
              for p in metrics(r)["iotrace.read"].sum.data_points}
    assert len(starts) == 1 and 0 < starts.pop() <= time.time_ns()


@pytest.mark.parametrize("prometheus, otel", [
    ("iotrace_block_io_latency_seconds", ("iotrace.block_io_latency", "s")),
    ("iotrace_read_bytes", ("iotrace.read", "By")),
    ("iotrace_findings", ("iotrace.findings", "")),
    ("iotrace_self_peak_resident_memory_bytes", ("iotrace.self_peak_resident_memory", "By")),
    ("process_max_fds", ("process_max_fds", "")),
])
def test_own_names(prometheus, otel):
    assert otel_name(prometheus) == otel


def test_semantic_names_are_the_conventions():
    assert {name for name, _, _ in SEMANTIC.values()} == {
        "process.cpu.time", "process.memory.usage", "process.memory.virtual",
        "process.unix.file_descriptor.count"}


def test_receiver_down_one_line():
    """Connection refused on every push: one line, however many intervals."""
    notes: list[str] = []
    url = closed_port_url()
    pusher = OtlpSink(PrometheusSink().registry, parse_otlp_url(url), notes.append, timeout_s=0.5)
    for snap, loop, findings, _, _ in intervals():
        pusher.write(Interval(snap, loop, findings))
        time.sleep(0.6)
    pusher.close()
    assert len(notes) == 1 and pusher.pushes_ok == 0
    assert notes[0].startswith(f"iotrace: cannot push metrics to {url}/v1/metrics: ")
    assert "refused" in notes[0].lower() and "tracing goes on" in notes[0]


def test_receiver_slow_one_line():
    """A receiver that answers after the timeout: one line, and close() does not wait for it."""
    notes: list[str] = []
    with Receiver(delay_s=3.0) as receiver:
        pusher = pushed(PrometheusSink(), receiver, notes, timeout_s=0.3)
        assert len(notes) == 1 and pusher.pushes_ok == 0
    assert "no answer within 0.3 s" in notes[0], notes


def test_receiver_refusing_one_line():
    """A receiver that answers with an error status (here: 404, a wrong path): one line."""
    notes: list[str] = []
    with Receiver(status=404) as receiver:
        pushed(PrometheusSink(), receiver, notes)
    assert len(notes) == 1 and "/v1/metrics: HTTP 404 Not Found;" in notes[0], notes


@pytest.mark.parametrize("url, want", [
    ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/metrics"),
    ("https://otel.example:4318/", "https://otel.example:4318/v1/metrics"),
    ("http://c:4318/v1/metrics", "http://c:4318/v1/metrics"),
    ("http://c:4318/otlp/v1/metrics?tenant=a", "http://c:4318/otlp/v1/metrics?tenant=a"),
    ("http://[::1]:4318", "http://[::1]:4318/v1/metrics"),
])
def test_parse_otlp_url(url, want):
    assert parse_otlp_url(url) == want


@pytest.mark.parametrize("url, says", [
    ("", "give the receiver's URL"),
    ("127.0.0.1:4318", "give an http:// or https:// URL"),
    ("grpc://c:4317", "give an http:// or https:// URL"),
    ("http://:4318", "names no host"),
    ("http://c:0", "the port must be a number"),
    ("http://c:99999", "the port must be a number"),
    ("http://c:port", "the port must be a number"),
    ("http://c :4318", "give the receiver's URL"),
])
def test_parse_otlp_url_rejects(url, says):
    with pytest.raises(ValueError, match="^--otlp ") as e:
        parse_otlp_url(url)
    assert says in str(e.value) and "http://127.0.0.1:4318" in str(e.value)


def test_options_complete_and_check_the_url(monkeypatch):
    opts = TraceOptions(output=Path("t"), auto=True, otlp="http://127.0.0.1:4318")
    opts.validate()
    assert opts.otlp == "http://127.0.0.1:4318/v1/metrics"
    with pytest.raises(TraceFailure) as e:
        TraceOptions(output=Path("t"), auto=True, otlp="localhost:4318").validate()
    assert e.value.exit_code == EXIT_USAGE
    # Without the optional packages: what to install, bad usage (as `iotrace mcp` says it)
    monkeypatch.setattr(otlp_target, "_PACKAGES", ("opentelemetry.no_such_part",))
    with pytest.raises(TraceFailure) as e:
        TraceOptions(output=Path("t"), auto=True, otlp="http://127.0.0.1:4318").validate()
    assert (str(e.value), e.value.exit_code) == (NEEDS, EXIT_USAGE)


def test_command_line_bad_url_is_one_line():
    r = run_iotrace("--otlp", "localhost:4318", "--", "true")
    assert r.returncode == EXIT_USAGE, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("iotrace: error: --otlp 'localhost:4318': ")
    assert "Traceback" not in r.stderr


def test_pushes_what_the_served_metrics_hold():
    """With --prometheus, the pusher reads the sink that serves /metrics; without, one that
    serves nothing, which gets each interval before the pusher does."""
    served = PrometheusSink(process_metrics=False)
    sinks: list = [served]
    push_metrics(closed_port_url(), sinks, io.StringIO())
    assert len(sinks) == 2 and sinks[1].registry is served.registry
    alone: list = []
    said = io.StringIO()
    push_metrics("http://127.0.0.1:4318/v1/metrics", alone, said)
    assert [type(s) for s in alone] == [PrometheusSink, OtlpSink]
    assert alone[1].registry is alone[0].registry
    assert said.getvalue() == ("Pushing metrics to http://127.0.0.1:4318/v1/metrics (OTLP/HTTP, "
                               "every interval)\n")
    for sink in (*sinks, *alone):
        sink.close()
