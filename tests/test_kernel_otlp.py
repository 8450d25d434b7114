"""--otlp on a real trace: iowork's known reads, pushed to a real receiver on 127.0.0.1 that
decodes the OTLP protobuf (tests/otlp_receiver.py); and a receiver that is down or slow, which
costs one line and nothing else."""

from __future__ import annotations

import subprocess

import pandas as pd
import pytest
from otlp_receiver import Receiver, attributes, closed_port_url, metrics, number

from conftest import EXACT, needs_root, run_iotrace, unseen, warm
from tracer.sinks.otlp import TIMEOUT_S

pytestmark = [needs_root, pytest.mark.kernel]

N, M = 200, 50  # O_DIRECT reads (each one block read), page-cache reads (none)
PAGE = 4096


def traced(iowork, data_file, out, url: str) -> subprocess.CompletedProcess:
    """iowork's N O_DIRECT and M cached reads, traced from its first instruction (a static
    binary: no loader reads), pushed to `url`; primed by one untraced run, as
    test_kernel_exact does, so that its block reads are exactly the N asked for."""
    args = [str(data_file), "--direct", str(N), "--cached", str(M)]
    subprocess.run([str(iowork), *args], check=True)
    warm(data_file)
    r = run_iotrace("-o", str(out), *EXACT, "-i", "0.3", "--no-tui", "--otlp", url, "--",
                    str(iowork), *args)
    assert r.returncode == 0, r.stderr
    assert f"Trace written to {out}" in r.stdout
    return r


def series(request, name: str) -> dict[frozenset, object]:
    """{labels: data point} of one metric of a received request."""
    metric = metrics(request)[name]
    data = getattr(metric, metric.WhichOneof("data"))
    return {frozenset(attributes(p).items()): p for p in data.data_points}


def test_pushes_the_exact_counts(iowork, data_file, tmp_path):
    """The last push (at the end of the run) holds every read: the file reads of the training
    process (`main`) exactly, and the block reads exactly as the trace has them, which with
    those that ended unseen are the N asked for."""
    out = tmp_path / "trace"
    with Receiver() as receiver:
        r = traced(iowork, data_file, out, receiver.url)
    assert r.stderr.splitlines()[1] == (f"Pushing metrics to {receiver.url}/v1/metrics "
                                        "(OTLP/HTTP, every interval)")
    assert "cannot push" not in r.stderr
    assert receiver.paths and set(receiver.paths) == {"/v1/metrics"}
    last = receiver.requests[-1]

    main_reads = series(last, "iotrace.syscall_io_latency")[frozenset({("role", "main"), ("op", "read")})]
    assert main_reads.count == N + M == sum(main_reads.bucket_counts)
    read_bytes = series(last, "iotrace.read")
    assert number(read_bytes[frozenset({("role", "main"), ("layer", "syscall")})]) == PAGE * (N + M)

    lat = pd.read_parquet(out / "latency")
    block = lat[(lat.layer == "block") & (lat.op == "read")]
    pushed = {dict(k)["device"]: p.count for k, p in series(last, "iotrace.block_io_latency").items()
              if dict(k)["op"] == "read"}
    assert pushed == block.groupby("device")["count"].sum().to_dict()
    lost, lost_bytes = unseen(out)
    assert sum(pushed.values()) + lost == N
    assert number(read_bytes[frozenset({("role", "main"), ("layer", "block")})]) + lost_bytes == PAGE * N


@pytest.mark.parametrize("receiver", ["down", "slow"])
def test_a_receiver_down_or_slow_costs_one_line(iowork, data_file, tmp_path, receiver):
    """Nothing waits on the receiver: the run ends as usual (exit 0), the trace holds every
    read, and stderr has one line about the receiver."""
    out = tmp_path / "trace"
    if receiver == "down":
        r = traced(iowork, data_file, out, closed_port_url())
        assert "Connection refused" in r.stderr
    else:
        with Receiver(delay_s=3 * TIMEOUT_S) as slow:
            r = traced(iowork, data_file, out, slow.url)
        assert f"no answer within {TIMEOUT_S:g} s" in r.stderr
    said = [line for line in r.stderr.splitlines() if "push metrics" in line]
    assert len(said) == 1 and said[0].startswith("iotrace: cannot push metrics to http://127.0.0.1:")
    assert "Traceback" not in r.stderr
    lat = pd.read_parquet(out / "latency")
    block_reads = lat[(lat.layer == "block") & (lat.op == "read")]["count"].sum()
    file_reads = lat[(lat.layer == "syscall") & (lat.op == "read") & (lat.target == "file")]["count"].sum()
    assert file_reads == N + M
    # every O_DIRECT read's request; more only for cached pages the host's reclaim evicted
    # since the warm-up (test_kernel_exact holds the block counts exactly)
    files = pd.read_parquet(out / "files")
    missed = int(files[(files.path == str(data_file)) & (files.op == "read")].pages_missed.sum())
    assert N <= block_reads + unseen(out)[0] <= N + missed
