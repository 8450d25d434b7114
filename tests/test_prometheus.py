"""The Prometheus sink on synthetic snapshots (no kernel): served over HTTP, scraped, parsed."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import urllib.request

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tracer import __version__
from tracer.core.abi import MAP_FULL_MAPS
from tracer.core.diagnosis import KINDS, STATES, Finding
from tracer.core.interval import Interval
from tracer.core.model import Snapshot
from tracer.core.selfcost import ProgramCost, SelfCost, TracerCpu
from tracer.sinks.prometheus import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    LE_BOUNDS_NS,
    MAX_RANK_LABELS,
    MAX_USER_LABELS,
    PrometheusSink,
    parse_listen,
)

S = 10**9
OPEN_HI = (1 << 63) - 1
ALLOWED_LABELS = {"device", "op", "role", "layer", "state", "gpu", "cause", "kind", "version", "le",
                  "object", "program", "map", "rank", "who", "user"}
PATH = "/data/imagenet/train/n01440764/secret.JPEG"


def row(layer: str, op: str, slot: int | None, count: int, nbytes: int, *, pid: int = 4242,
        role: str | None = "main", target: str | None = None, device: str | None = None) -> dict:
    """One `latency` row; slot None: a page-cache row ([0, 0])."""
    if slot is None:
        lo = hi = 0
    else:
        lo = 0 if slot == 0 else 1 << slot
        hi = OPEN_HI if slot == 39 else 1 << (slot + 1)
    return {"ts": 0, "pid": pid, "comm": "python", "role": role, "layer": layer, "op": op,
            "target": target, "device": device, "attribution": "direct" if device else None,
            "bucket_lo_ns": lo, "bucket_hi_ns": hi, "count": count, "bytes": nbytes}


# Block reads on vda: (slot, count) per interval. Slot 16 = [65.5 us, 131 us), 20 = [1 ms, 2 ms),
# 39 = the open-ended last slot (only in +Inf), 3 = [8 ns, 16 ns) (below the first bound).
VDA_READS = [[(16, 10)], [(20, 5), (39, 2)], [(3, 3), (16, 4)]]


def cost(i: int) -> SelfCost:
    """iotrace's own cost after interval i (cumulative): two programs, file_stats full once."""
    progs = (ProgramCost("block", "rq_complete_btf", "tp_btf/block_rq_complete", 100 * (i + 1),
                         50_000 * (i + 1), 0),
             ProgramCost("syscall", "enter_x", "tracepoint", 1000 * (i + 1), 300_000 * (i + 1),
                         i))
    tracer = TracerCpu(0.5 + 0.1 * i, 0.4, float(i + 1), 10.0, 10.0, (100 + i) << 20)
    return SelfCost(progs, [0, 5, 3][i], {"file_stats": 7 * i, "hists": 0}, tracer,
                    block_unseen_requests=2 * i, block_unseen_bytes=8192 * i)


def intervals() -> list[tuple[Snapshot, list[dict], list, list[dict], int]]:
    """Three intervals: (snapshot, loop rows, findings, gpu_idle rows, events lost)."""
    out = []
    t0 = 1_700_000_000 * S
    for i, reads in enumerate(VDA_READS):
        lat = [row("block", "read", slot, n, n * 4096, device="vda") for slot, n in reads]
        lat += [
            row("block_queue", "read", 10, sum(n for _, n in reads), 999_999, device="vda"),
            row("block", "write", 18, 1, 1 << 20, role="dataloader_worker", pid=4243, device="vdb"),
            row("syscall", "read", 12, 100, 100 * 65536, target="file"),
            row("syscall", "read", 14, 7, 7000, role="dataloader_worker", pid=4300 + i, target="file"),
            row("syscall", "read", 25, 50, 50 * 4, target="pipe"),  # DataLoader queue: not storage
            row("syscall", "write", 22, 2, 2 << 20, target="file"),
            row("syscall", "fsync", 28, 1, 0, target="file"),
            row("pagecache", "read", None, 64, 64 * 4096, target=None),
            row("syscall", "read", 11, 1, 10, role=None, pid=99, target="file"),  # role unknown
        ]
        snap = Snapshot(t0 + (i + 1) * S, S, lat,
                        files=[{"ts": 0, "pid": 4242, "path": PATH, "op": "read", "ops": 1, "bytes": 1}],
                        events=[{"ts": 0, "pid": 4242, "path": PATH, "latency_ns": 10**8}],
                        cost=cost(i))
        loop = [{"ts": snap.ts_ns, "pid": 4242, "interval_ns": S, "data_wait_io_ns": 600_000_000,
                 "data_wait_cpu_ns": 0, "data_wait_network_ns": 0, "sync_loading_ns": 0,
                 "sync_writes_ns": 0, "checkpoint_ns": 0,
                 "compute_ns": 300_000_000, "other_ns": 100_000_000, "state": "data_wait_io"}]
        findings = [Finding("dataloader_io_bound", 60 + i, 4242, "workers wait on reads", {"x": 1}),
                    Finding("dataloader_io_bound", 10, 5555, "another job", {}),
                    Finding("cold_cache", 30, 4242, "cold", {"path": PATH})] if i < 2 else []
        gpu_idle = [{"start": 0, "end": 0, "duration_ns": 250_000_000, "gpu": 0,
                     "cause": "dataloader_io_bound", "pid": 4242}]
        out.append((snap, loop, findings, gpu_idle, [0, 5, 3][i]))  # lost count passed lower once
    return out


def scrape(sink: PrometheusSink) -> str:
    with urllib.request.urlopen(sink.url, timeout=10) as r:
        assert r.status == 200
        return r.read().decode()


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """{(sample name, frozenset of label items): value}, checking each name appears once."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"duplicate sample {key}"
            out[key] = s.value
    return out


def families(text: str) -> dict[str, object]:
    return {fam.name: fam for fam in text_string_to_metric_families(text)}


def val(smp: dict, name: str, **labels: str) -> float:
    return smp[(name, frozenset(labels.items()))]


def buckets(smp: dict, name: str, **labels: str) -> list[tuple[float, float]]:
    """[(le, cumulative count)] of one histogram series, sorted by le."""
    out = []
    for (n, lab), v in smp.items():
        d = dict(lab)
        le = d.pop("le", None)
        if n == f"{name}_bucket" and d == labels:
            out.append((float(le), v))
    return sorted(out)


@pytest.fixture
def sink():
    s = PrometheusSink()
    s.start("127.0.0.1", 0)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def scrapes() -> list[str]:
    """The text scraped after each of the three intervals."""
    s = PrometheusSink()
    s.start("127.0.0.1", 0)
    try:
        texts = []
        for snap, loop, findings, gpu_idle, lost in intervals():
            s.write(Interval(snap, loop, findings, gpu_idle=gpu_idle, events_lost=lost))
            texts.append(scrape(s))
        return texts
    finally:
        s.stop()


def test_serves_on_loopback(sink):
    host, port = sink.address
    assert host == "127.0.0.1" and port > 0
    assert sink.url == f"http://127.0.0.1:{port}/metrics"
    text = scrape(sink)
    assert "# TYPE iotrace_block_io_latency_seconds histogram" in text
    assert f'iotrace_build_info{{version="{__version__}"}} 1.0' in text


def test_block_histogram_counts_every_read(scrapes):
    total = 0
    for i, text in enumerate(scrapes):
        total += sum(n for _, n in VDA_READS[i])
        smp = samples(text)
        labels = {"device": "vda", "op": "read"}
        count = val(smp, "iotrace_block_io_latency_seconds_count", **labels)
        assert count == total
        b = buckets(smp, "iotrace_block_io_latency_seconds", **labels)
        assert len(b) == len(LE_BOUNDS_NS) + 1
        assert b[-1] == (float("inf"), count)
        assert [le for le, _ in b[:-1]] == [ns / 1e9 for ns in LE_BOUNDS_NS]
        assert all(b[j][1] <= b[j + 1][1] for j in range(len(b) - 1)), "buckets not cumulative"
    # After the three intervals: 3 below the first bound, 14 in slot 16 (bound 2^17 ns), 5 in slot
    # 20 (bound 2^21 ns), 2 in the open-ended slot, only in +Inf.
    b = dict(buckets(smp, "iotrace_block_io_latency_seconds", device="vda", op="read"))
    assert b[LE_BOUNDS_NS[0] / 1e9] == 3
    assert b[(1 << 16) / 1e9] == 3
    assert b[(1 << 17) / 1e9] == 17
    assert b[(1 << 20) / 1e9] == 17
    assert b[(1 << 21) / 1e9] == 22
    assert b[LE_BOUNDS_NS[-1] / 1e9] == 22
    assert b[float("inf")] == 24
    # _sum from slot midpoints; the open-ended slot counts as its lower bound.
    want = (3 * 12 + 14 * 3 * (1 << 15) + 5 * 3 * (1 << 19) + 2 * (1 << 39)) / 1e9
    assert val(smp, "iotrace_block_io_latency_seconds_sum", device="vda", op="read") == pytest.approx(want)
    assert val(smp, "iotrace_block_io_latency_seconds_count", device="vdb", op="write") == 3
    assert val(smp, "iotrace_block_queue_latency_seconds_count", device="vda", op="read") == 24


def test_syscall_histogram_is_file_io_by_role(scrapes):
    smp = samples(scrapes[-1])
    assert val(smp, "iotrace_syscall_io_latency_seconds_count", role="main", op="read") == 300
    assert val(smp, "iotrace_syscall_io_latency_seconds_count", role="dataloader_worker", op="read") == 21
    assert val(smp, "iotrace_syscall_io_latency_seconds_count", role="unknown", op="read") == 3
    assert val(smp, "iotrace_syscall_io_latency_seconds_count", role="main", op="write") == 6
    assert val(smp, "iotrace_syscall_io_latency_seconds_count", role="main", op="fsync") == 3
    # The pipe reads (50 per interval, slot 25) are not file I/O: nowhere in the histogram.
    b = dict(buckets(smp, "iotrace_syscall_io_latency_seconds", role="main", op="read"))
    assert b[(1 << 13) / 1e9] == 300 and b[float("inf")] == 300


def test_byte_counters(scrapes):
    smp = samples(scrapes[-1])
    assert val(smp, "iotrace_read_bytes_total", role="main", layer="syscall") == 3 * 100 * 65536
    assert val(smp, "iotrace_read_bytes_total", role="dataloader_worker", layer="syscall") == 3 * 7000
    assert val(smp, "iotrace_read_bytes_total", role="main", layer="block") == 24 * 4096  # no queue rows
    assert val(smp, "iotrace_written_bytes_total", role="main", layer="syscall") == 3 * (2 << 20)
    assert val(smp, "iotrace_written_bytes_total", role="dataloader_worker", layer="block") == 3 << 20
    assert val(smp, "iotrace_written_bytes_total", role="child", layer="block") == 0  # pre-seeded
    layers = {dict(lab)["layer"] for (n, lab) in smp if n.startswith("iotrace_read_bytes")}
    assert layers == {"syscall", "block"}  # no pagecache, no block_queue


def test_loop_gpu_findings_lost(scrapes):
    smp = samples(scrapes[-1])
    loop = {s: val(smp, "iotrace_training_loop_seconds_total", state=s, rank="") for s in STATES}
    assert loop["data_wait_io"] == pytest.approx(1.8)
    assert loop["compute"] == pytest.approx(0.9)
    assert loop["other"] == pytest.approx(0.3)
    assert loop["checkpoint"] == 0
    assert val(smp, "iotrace_gpu_idle_seconds_total", gpu="0", cause="dataloader_io_bound") == 0.75
    assert val(smp, "iotrace_events_lost_total") == 5  # 0, 5, then 3 passed: never goes down
    assert val(smp, "iotrace_last_update_timestamp_seconds") == 1_700_000_003
    # Findings: the highest severity per kind; every known kind exported, 0 when not found now.
    second = samples(scrapes[1])
    assert val(second, "iotrace_findings", kind="dataloader_io_bound", rank="") == 61
    assert val(second, "iotrace_findings", kind="cold_cache", rank="") == 30
    assert val(second, "iotrace_findings", kind="checkpoint_stall", rank="") == 0
    assert {dict(lab)["kind"] for (n, lab) in second if n == "iotrace_findings"} == set(KINDS)
    assert all(val(smp, "iotrace_findings", kind=k, rank="") == 0 for k in KINDS)  # none in the last


def test_self_cost(scrapes):
    """iotrace_self_*: the cumulative readings of the last interval, every map named."""
    smp = samples(scrapes[-1])
    assert val(smp, "iotrace_self_bpf_runs_total", object="block", program="rq_complete_btf") == 300
    assert val(smp, "iotrace_self_bpf_run_seconds_total", object="syscall",
               program="enter_x") == pytest.approx(900e-6)
    assert val(smp, "iotrace_self_bpf_recursion_misses_total", object="syscall",
               program="enter_x") == 2
    assert val(smp, "iotrace_self_bpf_stats_enabled") == 1
    assert val(smp, "iotrace_self_map_full_drops_total", map="file_stats") == 14
    assert {dict(lab)["map"] for (n, lab) in smp if n == "iotrace_self_map_full_drops_total"} == \
        set(MAP_FULL_MAPS)
    assert val(smp, "iotrace_self_block_completions_unseen_total") == 4
    assert val(smp, "iotrace_self_cpu_seconds_total") == pytest.approx(0.7)
    assert val(smp, "iotrace_self_peak_resident_memory_bytes") == 102 << 20


def test_types_and_help(scrapes):
    fams = families(scrapes[-1])
    want = {"iotrace_block_io_latency_seconds": "histogram", "iotrace_syscall_io_latency_seconds":
            "histogram", "iotrace_block_queue_latency_seconds": "histogram",
            "iotrace_read_bytes": "counter", "iotrace_written_bytes": "counter",
            "iotrace_training_loop_seconds": "counter", "iotrace_gpu_idle_seconds": "counter",
            "iotrace_findings": "gauge", "iotrace_events_lost": "counter", "iotrace_build_info": "gauge",
            "iotrace_last_update_timestamp_seconds": "gauge",
            "iotrace_self_bpf_runs": "counter", "iotrace_self_bpf_run_seconds": "counter",
            "iotrace_self_bpf_recursion_misses": "counter", "iotrace_self_bpf_stats_enabled": "gauge",
            "iotrace_self_map_full_drops": "counter", "iotrace_self_cpu_seconds": "counter",
            "iotrace_self_block_completions_unseen": "counter",
            "iotrace_self_peak_resident_memory_bytes": "gauge"}
    for name, kind in want.items():
        assert fams[name].type == kind, name
        assert fams[name].documentation, name
    assert "midpoint" in fams["iotrace_block_io_latency_seconds"].documentation
    assert "midpoint" in fams["iotrace_syscall_io_latency_seconds"].documentation


def test_labels_bounded(scrapes):
    pids = {"4242", "4243", "99", "5555", *(str(4300 + i) for i in range(3))}
    for text in scrapes:
        assert PATH not in text and "secret" not in text
        for fam in text_string_to_metric_families(text):
            if not fam.name.startswith("iotrace_"):
                continue
            for s in fam.samples:
                assert set(s.labels) <= ALLOWED_LABELS, (s.name, s.labels)
                assert not pids & set(s.labels.values()), (s.name, s.labels)
                assert all("/" not in v for v in s.labels.values()), (s.name, s.labels)
    # The series count does not grow with new PIDs (a worker respawned each interval here).
    counts = [sum(1 for f in text_string_to_metric_families(t) if f.name.startswith("iotrace_")
                  for _ in f.samples) for t in scrapes]
    assert counts[0] == counts[1] == counts[2]


def test_loop_by_rank_bounded():
    """A rank's loop is its own series; past MAX_RANK_LABELS ranks the rest add up in 'other'."""
    s = PrometheusSink(process_metrics=False)
    ranks = MAX_RANK_LABELS + 6
    loop = [{"pid": 1000 + r, "rank": r, "compute_ns": 2_000_000_000, "other_ns": 0}
            for r in range(ranks)] + [{"pid": 7, "rank": None, "compute_ns": 500_000_000}]
    for ts in (1, 2):
        s.write(Interval(Snapshot(ts * 1_000_000_000, 1_000_000_000), loop))
    smp = samples(generate_latest(s.registry).decode())
    name = "iotrace_training_loop_seconds_total"
    assert val(smp, name, state="compute", rank="0") == 4.0
    assert val(smp, name, state="compute", rank=str(MAX_RANK_LABELS - 1)) == 4.0
    assert val(smp, name, state="compute", rank="other") == 6 * 4.0
    assert val(smp, name, state="compute", rank="") == 1.0  # the main without a rank
    assert {dict(lab)["rank"] for (n, lab) in smp if n == name} == {
        "", "other", *map(str, range(MAX_RANK_LABELS))}


def user_row(who: str, comm: str | None, requests: int, *, device: str = "vda",
             op: str = "read") -> dict:
    """One `device_users` row: 4 KiB and 100 us of service per request."""
    return {"ts": 0, "device": device, "op": op, "who": who, "cgroup": "/x", "container_id": None,
            "pod_uid": None, "comm": comm, "requests": requests, "bytes": 4096 * requests,
            "service_ns": 100_000 * requests}


def test_device_users_summed_with_bounded_names():
    """Who used each disk, summed over intervals: the traced processes, untraced ones by name
    (the first MAX_USER_LABELS names), kernel threads; later names and the rows' own rest add
    up under who="rest"."""
    s = PrometheusSink(process_metrics=False)
    names = [f"reader{i}" for i in range(MAX_USER_LABELS + 3)]
    first = [user_row("traced", None, 10), user_row("other", "dd", 5),
             user_row("kernel_thread", "2 x dd", 3), user_row("rest", None, 1),
             user_row("traced", None, 2, op="write", device="sda")]
    s.write(Interval(Snapshot(S, S, device_users=first)))
    second = [user_row("traced", None, 7), user_row("other", "dd", 1),
              *(user_row("other", n, 1) for n in names)]
    s.write(Interval(Snapshot(2 * S, S, device_users=second)))
    smp = samples(generate_latest(s.registry).decode())
    req, nbytes = "iotrace_device_user_requests_total", "iotrace_device_user_bytes_total"
    svc = "iotrace_device_user_service_seconds_total"
    assert val(smp, req, device="vda", op="read", who="traced", user="") == 17
    assert val(smp, nbytes, device="vda", op="read", who="traced", user="") == 17 * 4096
    assert val(smp, svc, device="vda", op="read", who="traced", user="") == pytest.approx(0.0017)
    assert val(smp, req, device="vda", op="read", who="other", user="dd") == 6
    assert val(smp, req, device="vda", op="read", who="kernel_thread", user="") == 3
    assert val(smp, req, device="sda", op="write", who="traced", user="") == 2
    # dd took a name: MAX_USER_LABELS - 1 readers get theirs, 4 more go to rest with its 1
    named = names[:MAX_USER_LABELS - 1]
    assert all(val(smp, req, device="vda", op="read", who="other", user=n) == 1 for n in named)
    assert val(smp, req, device="vda", op="read", who="rest", user="") == 1 + 4
    users = {dict(lab)["user"] for (n, lab) in smp if n == req}
    assert users == {"", "dd", *named}
    total = sum(v for (n, lab), v in smp.items() if n == req and dict(lab)["device"] == "vda")
    assert total == 10 + 5 + 3 + 1 + 7 + 1 + len(names)  # every request, once


def test_findings_by_rank():
    """A rank's finding is its own series (the straggler and its cause at rank 1, another kind
    at rank 0 and on a main); a series once seen stays, at 0, when its finding clears; the
    rank label shares the loop's bound."""
    s = PrometheusSink(process_metrics=False)
    now = [Finding("straggler_rank", 80, 1001, "rank 1 is the straggler", {}, rank=1),
           Finding("dataloader_io_bound", 70, 1001, "rank 1's workers read", {}, rank=1),
           Finding("dataloader_io_bound", 20, 1000, "rank 0's", {}, rank=0),
           Finding("dataloader_io_bound", 40, 7, "a main's", {})]
    s.write(Interval(Snapshot(1_000_000_000, 1_000_000_000), [], now))
    smp = samples(generate_latest(s.registry).decode())
    assert val(smp, "iotrace_findings", kind="straggler_rank", rank="1") == 80
    assert val(smp, "iotrace_findings", kind="dataloader_io_bound", rank="1") == 70
    assert val(smp, "iotrace_findings", kind="dataloader_io_bound", rank="0") == 20
    assert val(smp, "iotrace_findings", kind="dataloader_io_bound", rank="") == 40
    assert val(smp, "iotrace_findings", kind="straggler_rank", rank="") == 0
    s.write(Interval(Snapshot(2_000_000_000, 1_000_000_000), [], now[:1]))
    smp = samples(generate_latest(s.registry).decode())
    assert val(smp, "iotrace_findings", kind="straggler_rank", rank="1") == 80
    assert val(smp, "iotrace_findings", kind="dataloader_io_bound", rank="1") == 0
    many = [Finding("straggler_rank", 50, 2000 + r, "", {}, rank=r)
            for r in range(MAX_RANK_LABELS + 3)]
    s.write(Interval(Snapshot(3_000_000_000, 1_000_000_000), [], many))
    smp = samples(generate_latest(s.registry).decode())
    ranks = {dict(lab)["rank"] for (n, lab) in smp if n == "iotrace_findings"}
    assert len(ranks) == MAX_RANK_LABELS + 2 and "other" in ranks and "" in ranks


def test_counters_only_grow(scrapes):
    def monotone(name: str) -> bool:
        return name.endswith(("_total", "_bucket", "_count", "_sum")) and name.startswith("iotrace_")

    prev: dict = {}
    for text in scrapes:
        cur = {k: v for k, v in samples(text).items() if monotone(k[0])}
        for key, v in prev.items():
            assert key in cur, f"series {key} vanished"
            assert cur[key] >= v, f"{key} went down: {v} -> {cur[key]}"
        prev = cur


def test_scrape_during_updates_is_consistent(sink):
    """The HTTP thread scrapes while the tracer updates: every scrape is internally consistent."""
    stop = threading.Event()
    data = intervals()

    def feed():
        i = 0
        while not stop.is_set():
            snap, loop, findings, gpu_idle, lost = data[i % 3]
            sink.write(Interval(snap, loop, findings, gpu_idle=gpu_idle, events_lost=lost))
            i += 1

    t = threading.Thread(target=feed)
    t.start()
    try:
        last = -1.0
        for _ in range(20):
            smp = samples(scrape(sink))
            for labels in ({"device": "vda", "op": "read"}, {"device": "vdb", "op": "write"}):
                b = buckets(smp, "iotrace_block_io_latency_seconds", **labels)
                if not b:
                    continue
                assert all(b[j][1] <= b[j + 1][1] for j in range(len(b) - 1))
                assert b[-1][1] == val(smp, "iotrace_block_io_latency_seconds_count", **labels)
            cur = val(smp, "iotrace_read_bytes_total", role="main", layer="syscall")
            assert cur >= last
            last = cur
    finally:
        stop.set()
        t.join()


def test_port_in_use_is_one_clear_line():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        s = PrometheusSink()
        with pytest.raises(OSError, match=rf"cannot serve Prometheus metrics on 127\.0\.0\.1:{port}") as e:
            s.start("127.0.0.1", port)
        assert "\n" not in str(e.value) and "--prometheus" in str(e.value)
        assert s.address is None


def test_stop_frees_the_port():
    s = PrometheusSink()
    s.start("127.0.0.1", 0)
    port = s.address[1]
    s.stop()
    assert s.address is None
    s.start("127.0.0.1", port)  # the same port again
    try:
        assert s.address == ("127.0.0.1", port)
    finally:
        s.stop()


@pytest.mark.parametrize(("spec", "want"), [
    ("9473", (DEFAULT_HOST, 9473)),
    (" 9100 ", (DEFAULT_HOST, 9100)),
    ("0.0.0.0:9473", ("0.0.0.0", 9473)),
    ("localhost:1", ("localhost", 1)),
    ("node-7.cluster.local:65535", ("node-7.cluster.local", 65535)),
    ("[::1]:9473", ("::1", 9473)),
    ("[::]:8000", ("::", 8000)),
])
def test_parse_listen(spec, want):
    assert parse_listen(spec) == want


@pytest.mark.parametrize(("spec", "says"), [
    ("", "needs"),
    ("abc", "must be a number"),
    ("0", "out of range"),
    ("65536", "out of range"),
    ("-1", "must be a number"),
    (":9473", "host is empty"),
    ("127.0.0.1:", "must be a number"),
    ("::1:9473", "brackets"),
    ("[::1]9473", r"\[ADDR\]:PORT"),
    ("[::1", r"\[ADDR\]:PORT"),
    ("http://0.0.0.0:9473", "not a URL"),
    ("0.0.0.0:9473/metrics", "not a URL"),
    ("127.0.0.1:94 73", "must be a number"),
    ("host name:9473", "spaces"),
    ("\uff11\uff12\uff13", "must be a number"),  # full-width digits: isdigit() and int() take them
])
def test_parse_listen_rejects(spec, says):
    with pytest.raises(ValueError, match=says) as e:
        parse_listen(spec)
    assert "\n" not in str(e.value) and "--prometheus" in str(e.value)


def test_default_port_avoids_well_known_exporters():
    assert DEFAULT_PORT not in (9090, 9091, 9093, 9100, 9400, 9435, 9464)
    assert parse_listen(str(DEFAULT_PORT)) == ("127.0.0.1", DEFAULT_PORT)


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (make deps installs it: Debian's prometheus)")
def test_promtool_check_metrics(scrapes):
    for text in scrapes:
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert not (r.stdout + r.stderr).strip(), r.stdout + r.stderr  # no lint warnings either
