"""GPU sampling, idle spans and their attribution, without a GPU.

NVML is replayed from recorded sample streams (tests/data/nvml/*.json, written by make_fixtures.py
there) through the same `GpuSource` interface that `NvmlSource` implements; `NvmlSource` itself is
checked against the real pynvml module with its C calls replaced, and against the real library where
a driver and GPU exist (skipped elsewhere).
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import pytest

from tracer.gpu import idle, nvml
from tracer.gpu.idle import (
    IdleDetector,
    IdleSpan,
    analyse,
    attribute,
    gpu_evidence,
    gpu_owners,
    gpu_sentence,
    idle_spans,
    soft_idle_s,
)
from tracer.gpu.nvml import (
    GpuDevice,
    GpuError,
    GpuLost,
    GpuMonitor,
    GpuSampler,
    GpuUnavailable,
    NvmlSource,
    calibrate,
    open_source,
)
from tracer.tracedir.schema import TABLES, table_from_rows

DATA = Path(__file__).resolve().parent / "data" / "nvml"
S = 1_000_000_000  # ns
MS = 1_000_000
REALTIME_NS = 1_760_000_000_000_000_000  # the fixtures' wall clock at their NVML time "nvml_us"
POLL_LAG_NS = 3 * MS  # the clocks are read a little after NVML answers


class RecordedSource:
    """Replays a recorded NVML stream; `now_us` (NVML's clock) is the time of the next poll."""

    def __init__(self, name: str) -> None:
        data = json.loads((DATA / f"{name}.json").read_text())
        self.clock_at = data["clock_at"]
        self.dev = {d["index"]: d for d in data["devices"]}
        self.now_us = self.clock_at["nvml_us"]
        self.closed = False
        self.calls: list[tuple[str, int]] = []

    def advance(self, seconds: float) -> None:
        self.now_us += round(seconds * 1e6)

    def clocks(self) -> dict[str, int]:
        elapsed = (self.now_us - self.clock_at["nvml_us"]) * 1000 + POLL_LAG_NS
        return {c: self.clock_at[c] + elapsed for c in ("realtime", "monotonic", "boottime")}

    def _check(self, what: str, index: int) -> dict:
        self.calls.append((what, index))
        d = self.dev[index]
        if what in d["errors"]:
            raise GpuError(f"GPU {index}: NVML cannot read {what}: {d['errors'][what]}")
        return d

    def devices(self) -> list[GpuDevice]:
        return [GpuDevice(d["index"], d["uuid"], d["name"], d["mig"]) for d in self.dev.values()]

    def samples(self, index: int, since_us: int) -> list[tuple[int, float]]:
        d = self._check("samples", index)
        return [(t, float(v)) for t, v in d["samples"] if since_us < t <= self.now_us]

    def utilization(self, index: int) -> tuple[float, float]:
        d = self._check("utilization", index)
        current = [r for r in d["rates"] if r[0] <= self.now_us][-1]
        return float(current[1]), float(current[2])

    def pcie(self, index: int) -> tuple[float, float] | None:
        d = self._check("pcie", index)
        return None if d["pcie"] is None else tuple(d["pcie"])

    def processes(self, index: int) -> list[int]:
        return list(self._check("processes", index)["processes"])

    def close(self) -> None:
        self.closed = True


def replay(name: str, polls: int, **kwargs) -> tuple[RecordedSource, GpuSampler, list[list[dict]]]:
    """Poll a recorded stream once a second; returns the rows of each poll."""
    source = RecordedSource(name)
    sampler = GpuSampler(source, clocks=source.clocks, **kwargs)
    per_poll = []
    for _ in range(polls):
        source.advance(1.0)
        per_poll.append(sampler.poll(source.clocks()["realtime"]))
    return source, sampler, per_poll


def utc(nvml_us_from_t0: float) -> int:
    """UTC ns of a time given in seconds after the fixture's reference instant."""
    return REALTIME_NS + round(nvml_us_from_t0 * S)


# -- clock calibration --------------------------------------------------------------------------


def test_calibrate_picks_the_clock_the_newest_sample_is_close_to() -> None:
    now = {"realtime": 1_760_000_000 * S, "monotonic": 86_358 * S, "boottime": 86_400 * S}
    # Wall-clock timestamps: the newest sample 120 ms ago.
    assert calibrate([1_759_999_999_000_000, 1_759_999_999_880_000], now) == ("realtime", 0)
    # Since boot (the host was suspended 42 s, so monotonic is 42 s behind).
    clock, offset = calibrate([86_399_900_000], now)
    assert (clock, offset) == ("boottime", now["realtime"] - now["boottime"])
    assert 86_399_900_000 * 1000 + offset == now["realtime"] - 100 * MS
    clock, offset = calibrate([86_357_950_000], now)
    assert (clock, offset) == ("monotonic", now["realtime"] - now["monotonic"])
    # No suspend: boottime == monotonic; a tie goes to boottime.
    same = {"realtime": now["realtime"], "monotonic": 500 * S, "boottime": 500 * S}
    assert calibrate([499_800_000], same)[0] == "boottime"


def test_calibrate_refuses_a_timestamp_far_from_every_clock() -> None:
    now = {"realtime": 1_760_000_000 * S, "monotonic": 86_358 * S, "boottime": 86_400 * S}
    with pytest.raises(nvml.CalibrationError, match="fit no clock"):
        calibrate([86_300_000_000], now)  # 100 s before boottime, 58 s after monotonic
    with pytest.raises(ValueError, match="at least one"):
        calibrate([], now)


# -- the recorded streams -----------------------------------------------------------------------


def test_busy_gpu_rows_and_no_idle_span() -> None:
    _, sampler, per_poll = replay("busy", 5)
    rows = [r for poll in per_poll for r in poll]
    assert (sampler.clock, sampler.offset_ns) == ("realtime", 0)
    # Samples 1-29 are due by 5 s (sample 30 is at 5.00016 s); the bogus sample 13 is left out.
    assert [len(p) for p in per_poll] == [5, 6, 6, 5, 6]
    assert len(rows) == 28
    assert any("outside 0-100 %" in n and "808334905" in n for n in sampler.notes)
    first = rows[0]
    assert first == {
        "ts": REALTIME_NS + (166_667 + ((37 % 7) - 3) * 150) * 1000,
        "gpu": 0, "uuid": "GPU-5b2a6f4e-1c1d-4e8a-9d0e-0f3c2a7b9e11",
        "name": "NVIDIA H100 80GB HBM3", "util_pct": 96.0, "mem_util_pct": 41.0,
        "pcie_rx_bytes_s": 12_500_000_000.0, "pcie_tx_bytes_s": 310_000_000.0,
        # The first sample: the usual 1/6 s, but never before the sampler started (3 ms after 0).
        "sample_period_ns": (166_667 - 150) * 1000 - POLL_LAG_NS,
    }
    # Later periods are the gaps between samples, the bogus sample's folded into the next one.
    ts = [r["ts"] for r in rows]
    assert [r["sample_period_ns"] for r in rows[1:]] == [b - a for a, b in itertools.pairwise(ts)]
    assert max(r["sample_period_ns"] for r in rows) < 340 * MS
    assert idle_spans(rows) == []
    assert sampler.processes == {0: [4242]}
    table = table_from_rows("gpu", rows)
    assert table.num_rows == 28 and table.schema.names == list(first)


def test_stalls_give_exact_spans_soft_idle_and_boottime_clock() -> None:
    source, sampler, per_poll = replay("stalls", 11)
    rows = [r for poll in per_poll for r in poll]
    assert sampler.clock == "boottime"
    assert sampler.offset_ns == REALTIME_NS - source.clock_at["boottime"]
    assert len(rows) == 55
    assert rows[-1]["ts"] == utc(11.0)
    assert all(r["pcie_rx_bytes_s"] is None and r["mem_util_pct"] == 30.0 for r in rows)
    # Sample k covers ((k-1) * 0.2 s, k * 0.2 s]; samples 16-25 and 41-50 are <= 5 %.
    assert idle_spans(rows) == [
        IdleSpan(0, utc(3.0), utc(5.0), 10),
        IdleSpan(0, utc(8.0), utc(10.0), 10),
    ]
    # Soft idle over the whole stream: 32 samples at 95 % of 0.2 s, the first at 95 % of 1/6 s,
    # two half-stalled samples (50 %), 19 at 0 % and one at 3 %.
    expected = 32 * 0.05 * 0.2 + 0.05 * (1 / 6) + 2 * 0.5 * 0.2 + 19 * 0.2 + 0.97 * 0.2
    assert soft_idle_s(rows, utc(0), utc(11.0)) == {0: pytest.approx(expected, abs=1e-9)}
    # Per interval: [3 s, 4 s) holds samples 16-20 (one at 3 %); [2 s, 3 s) four busy and one half.
    assert soft_idle_s(rows, utc(3.0), utc(4.0)) == {0: pytest.approx(4 * 0.2 + 0.97 * 0.2)}
    assert soft_idle_s(rows, utc(2.0), utc(3.0)) == {0: pytest.approx(4 * 0.05 * 0.2 + 0.5 * 0.2)}
    # A row straddling a bound counts with its part inside: [2.9 s, 3.1 s).
    assert soft_idle_s(rows, utc(2.9), utc(3.1)) == {0: pytest.approx(0.5 * 0.1 + 0.1)}


def test_streaming_detector_closes_spans_on_the_poll_that_ends_them() -> None:
    _, _, per_poll = replay("stalls", 11)
    detector = IdleDetector()
    closed = [detector.feed(rows) for rows in per_poll]
    # Span 1 ends with sample 26 (5.2 s), fetched by the poll at 6 s; span 2 with sample 51 (11 s).
    assert [i for i, spans in enumerate(closed) if spans] == [5, 10]
    assert closed[5] == [IdleSpan(0, utc(3.0), utc(5.0), 10)]
    assert detector.open_since() is None
    assert detector.flush() == []


def test_idle_gpu_with_an_empty_sample_buffer_uses_the_utilisation_rates() -> None:
    source, sampler, per_poll = replay("idle", 4)
    rows = [r for poll in per_poll for r in poll]
    assert sampler.clock is None  # no sample to calibrate with; rows are stamped at the poll
    assert [len(p) for p in per_poll] == [1, 1, 1, 1]
    start = sampler.start_ns
    assert start == REALTIME_NS + POLL_LAG_NS
    assert [(r["ts"], r["util_pct"], r["mem_util_pct"], r["sample_period_ns"]) for r in rows] == [
        (start + k * S, 0.0, 0.0, S) for k in (1, 2, 3, 4)
    ]
    assert ("utilization", 0) in source.calls
    detector = IdleDetector()
    assert detector.feed(rows) == []  # still idle: the span stays open
    assert detector.open_since() == start
    assert detector.flush() == [IdleSpan(0, start, start + 4 * S, 4)]
    assert soft_idle_s(rows, start, start + 4 * S) == {0: pytest.approx(4.0)}


def test_one_long_idle_sample_is_a_span_one_short_one_is_not() -> None:
    def row(t_s: float, util: float, period_ms: int) -> dict:
        return {"ts": utc(t_s), "gpu": 3, "util_pct": util, "sample_period_ns": period_ms * MS}

    # A GPU sampling once a second: one 0 % sample is a second of idleness.
    assert idle_spans([row(1, 90, 1000), row(2, 0, 1000), row(3, 90, 1000)]) == [
        IdleSpan(3, utc(1), utc(2), 1)
    ]
    # One 1/6 s sample at 0 % between busy ones is a short stall: soft idle only.
    short = [row(1, 90, 167), row(1.167, 0, 167), row(1.334, 90, 167)]
    assert idle_spans(short) == []
    assert soft_idle_s(short, utc(0), utc(2)) == {3: pytest.approx(0.1 * 0.167 * 2 + 0.167)}
    # 5 % is idle, 5.1 % is not.
    assert len(idle_spans([row(1, 5, 167), row(1.167, 5, 167)])) == 1
    assert idle_spans([row(1, 5.1, 167), row(1.167, 5.1, 167)]) == []


def test_mig_devices_are_named_and_skipped() -> None:
    source = RecordedSource("mig")
    opened, reason = open_source("auto", factory=lambda: source)
    assert opened is source
    assert reason == (
        "GPU 0 (NVIDIA H100 80GB HBM3) in MIG mode: NVML reports no utilisation for MIG devices, so "
        "idle time is not measured there; the other GPUs are sampled, tracing of I/O goes on"
    )
    sampler = GpuSampler(source, clocks=source.clocks)
    assert sampler.take_notes() == [reason]
    source.advance(1.0)
    rows = sampler.poll(source.clocks()["realtime"])
    source.advance(1.0)
    rows += sampler.poll(source.clocks()["realtime"])
    assert {r["gpu"] for r in rows} == {1} and len(rows) == 11  # the 12th sample is at 2.000004 s
    assert not [c for c in source.calls if c[1] == 0]  # the MIG device is never asked
    assert sampler.meta()["gpus"][0] == {"index": 0, "uuid": "GPU-11111111-2222-3333-4444-555555555555",
                                         "name": "NVIDIA H100 80GB HBM3", "mig": True}
    _, reason = open_source("0", factory=lambda: RecordedSource("mig"))
    assert reason is not None and reason.endswith("no GPU is sampled, tracing of I/O goes on")


# -- --gpu auto|off|N ---------------------------------------------------------------------------


def test_open_source_spec_rules() -> None:
    def no_nvml() -> RecordedSource:
        raise GpuUnavailable("no NVML: libnvidia-ml.so.1 not found (no NVIDIA driver on this host)")

    assert open_source("off", factory=no_nvml) == (None, None)
    assert open_source("auto", factory=no_nvml) == (
        None, "GPU sampling off: no NVML: libnvidia-ml.so.1 not found (no NVIDIA driver on this host)")
    with pytest.raises(GpuUnavailable, match=r"^--gpu 0,2: no NVML: libnvidia-ml"):
        open_source("0,2", factory=no_nvml)
    source = RecordedSource("mig")
    with pytest.raises(GpuUnavailable, match=r"^--gpu 0,2: no such GPU 2 \(this host has GPU 0, 1;"):
        open_source("0,2", factory=lambda: source)
    assert source.closed
    opened, reason = open_source("1", factory=lambda: RecordedSource("mig"))
    assert [d.index for d in opened.devices()] == [1] and reason is None
    for bad in ("", "gpu0", "-1", "1,,x"):
        with pytest.raises(ValueError, match="expected auto, off, or GPU indices"):
            open_source(bad, factory=no_nvml)


def test_auto_with_no_gpu() -> None:
    class Empty(RecordedSource):
        def devices(self) -> list[GpuDevice]:
            return []

    source = Empty("idle")
    assert open_source("auto", factory=lambda: source) == (None, "GPU sampling off: NVML found no NVIDIA GPU")
    assert source.closed


def test_failed_queries_are_one_line_each_and_a_lost_gpu_stops_being_polled() -> None:
    source = RecordedSource("stalls")
    sampler = GpuSampler(source, clocks=source.clocks)
    source.dev[0]["errors"]["processes"] = "Insufficient Permissions"
    for _ in range(2):
        source.advance(1.0)
        assert len(sampler.poll(source.clocks()["realtime"])) == 5
    assert sampler.take_notes() == ["GPU 0: NVML cannot read processes: Insufficient Permissions"]

    def lost(index: int, since_us: int) -> list:
        raise GpuLost("GPU 0 is lost (fallen off the bus? see dmesg for an Xid): its sampling stops, "
                      "tracing of I/O goes on")

    source.dev[0]["errors"]["samples"] = "Not Supported"
    source.advance(1.0)
    assert [r["util_pct"] for r in sampler.poll(source.clocks()["realtime"])] == [95.0]
    assert sampler.take_notes() == [
        "GPU 0: NVML cannot read samples: Not Supported; using the utilisation rates once per poll "
        "instead"
    ]

    source.samples = lost
    source.advance(1.0)
    assert sampler.poll(source.clocks()["realtime"]) == []
    assert sampler.lost(0) and sampler.sampled == []
    assert sampler.take_notes() == [
        "GPU 0 is lost (fallen off the bus? see dmesg for an Xid): its sampling stops, tracing of I/O "
        "goes on"
    ]
    source.advance(1.0)
    n = len(source.calls)
    assert sampler.poll(source.clocks()["realtime"]) == []
    assert len(source.calls) == n


# -- attribution --------------------------------------------------------------------------------


def loop_row(pid: int, end_s: float, **ns_ms: int) -> dict:
    row = {"ts": utc(end_s), "pid": pid, "interval_ns": S}
    for s in idle.STATES:
        row[f"{s}_ns"] = ns_ms.get(s, 0) * MS
    row["state"] = max(idle.STATES, key=lambda s: row[f"{s}_ns"])
    return row


# Intervals of one second ending at x.5 s, so the spans [3 s, 5 s] and [8 s, 10 s] overlap some
# halfway; the loop row for (8.5 s, 9.5 s] is missing.
LOOP = [
    loop_row(4242, 2.5, compute=1000),
    loop_row(4242, 3.5, compute=500, data_wait_io=500),
    loop_row(4242, 4.5, data_wait_io=900, data_wait_cpu=100),
    loop_row(4242, 5.5, data_wait_io=400, compute=600),
    loop_row(4242, 6.5, compute=1000),
    loop_row(4242, 8.5, checkpoint=800, compute=200),
    loop_row(4242, 10.5, checkpoint=1000),
    loop_row(4242, 11.5, compute=1000),
]
OTHER_JOB = [loop_row(5555, t, data_wait_cpu=1000) for t in (3.5, 4.5, 5.5, 8.5, 9.5, 10.5)]


def expected_idle(pid: int | None = 4242) -> list[dict]:
    zero = {f"{s}_frac": 0.0 for s in idle.STATES}
    return [
        # Span 1: half of (2.5, 3.5], all of (3.5, 4.5], half of (4.5, 5.5]:
        # data_wait_io 250 + 900 + 200 ms, data_wait_cpu 100 ms, compute 250 + 300 ms of 2 s.
        {"start": utc(3.0), "end": utc(5.0), "duration_ns": 2 * S, "gpu": 0, "pid": pid,
         "cause": "data_wait_io", **zero, "data_wait_io_frac": 0.675, "data_wait_cpu_frac": 0.05,
         "compute_frac": 0.275, "coverage": 1.0, "confidence": 0.675},
        # Span 2: half of (7.5, 8.5] and half of (9.5, 10.5] cover 1 s of 2 s:
        # checkpoint 400 + 500 ms, compute 100 ms.
        {"start": utc(8.0), "end": utc(10.0), "duration_ns": 2 * S, "gpu": 0, "pid": pid,
         "cause": "checkpoint", **zero, "checkpoint_frac": 0.9, "compute_frac": 0.1,
         "coverage": 0.5, "confidence": 0.45},
    ]


def assert_rows(actual: list[dict], expected: list[dict]) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a.keys() == e.keys()
        for k, v in e.items():
            assert a[k] == (pytest.approx(v, abs=1e-12) if isinstance(v, float) else v), k


def test_attribution_fractions_cause_and_confidence() -> None:
    _, sampler, per_poll = replay("stalls", 11)
    rows = [r for poll in per_poll for r in poll]
    owners = gpu_owners(sampler.processes, {4242: 4242, 4243: 4242, 5555: 5555})
    assert owners == {0: 4242}  # 7777 (first, most memory) is not traced
    idle = attribute(idle_spans(rows), LOOP + OTHER_JOB, owners)
    assert_rows(idle, expected_idle())
    table = table_from_rows("gpu_idle", idle)
    assert table.schema.names == TABLES["gpu_idle"].names == list(idle[0])
    # Offline: no process information and a single main process in the loop table.
    assert_rows(analyse(rows, LOOP), expected_idle())
    # Offline with two main processes and no mapping: the owner is unknown.
    unknown = analyse(rows, LOOP + OTHER_JOB)
    assert [(r["pid"], r["cause"], r["coverage"], r["confidence"]) for r in unknown] == [
        (None, "unknown", 0.0, 0.0)] * 2
    table_from_rows("gpu_idle", unknown)


def test_attribution_accepts_rows_read_back_with_pandas(tmp_path: Path) -> None:
    import pandas as pd

    _, _, per_poll = replay("stalls", 11)
    rows = [r for poll in per_poll for r in poll]
    table_from_rows("gpu", rows).to_pandas().to_parquet(tmp_path / "gpu.parquet")
    table_from_rows("loop", LOOP).to_pandas().to_parquet(tmp_path / "loop.parquet")
    gpu_df = pd.read_parquet(tmp_path / "gpu.parquet")
    loop_df = pd.read_parquet(tmp_path / "loop.parquet")
    idle = analyse(gpu_df.to_dict("records"), loop_df.to_dict("records"))
    assert_rows(idle, expected_idle())


def test_gpu_owners_prefers_the_process_with_most_memory_and_takes_a_callable() -> None:
    processes = {0: [100, 200], 1: [200, 100], 2: [999]}
    main_of = {100: 100, 101: 100, 200: 200}
    assert gpu_owners(processes, main_of) == {0: 100, 1: 200}
    assert gpu_owners({0: [101]}, lambda pid: main_of.get(pid)) == {0: 100}


# -- evidence -----------------------------------------------------------------------------------


def test_evidence_numbers_and_sentence_for_the_stalls() -> None:
    _, _, per_poll = replay("stalls", 11)
    rows = [r for poll in per_poll for r in poll]
    idle = analyse(rows, LOOP)
    ev = gpu_evidence(idle, rows)
    [g] = ev["gpus"]
    observed = utc(11.0) - (utc(0.2) - nvml.DEFAULT_PERIOD_NS)
    assert g["observed_ns"] == observed
    assert g["idle_ns"] == 4 * S and g["spans"] == 2 and g["pid"] == 4242
    assert g["idle_pct"] == pytest.approx(100 * 4 * S / observed)
    assert g["idle_by_cause_ns"] == {
        "data_wait_io": 1_350 * MS, "data_wait_cpu": 100 * MS, "data_wait_network": 0,
        "sync_loading": 0, "sync_writes": 0, "checkpoint": 900 * MS, "collective_wait": 0,
        "compute": 650 * MS, "other": 0, "unknown": 1_000 * MS,
    }
    assert g["top_cause"] == "data_wait_io" and g["top_cause_pct"] == pytest.approx(33.75)
    assert g["soft_idle_ns"] == round(
        (32 * 0.05 * 0.2 + 0.05 * nvml.DEFAULT_PERIOD_NS / S + 2 * 0.5 * 0.2 + 19 * 0.2 + 0.97 * 0.2) * S)
    assert g["idle_parts_ns"] == {"data_wait_io": 2 * S, "checkpoint": 2 * S}
    assert gpu_sentence(g) == (
        "GPU 0 idle 4.0 s (36 % of the time): 2.0 s waiting on DataLoader reads, 2.0 s writing "
        "a checkpoint")
    json.dumps(ev)  # goes into findings.evidence as it is


def test_evidence_sentence_of_the_design_example() -> None:
    # GPU 0 sampled once a second for 100 s; idle 62 s in two spans; the loop waited on reads for
    # 85 % of that and computed for the rest.
    rows = [{"ts": utc(t), "gpu": 0, "uuid": "GPU-x", "name": "NVIDIA H200", "util_pct": 0.0 if 10 < t <= 62
             or 70 < t <= 80 else 97.0, "sample_period_ns": S} for t in range(1, 101)]
    spans = idle_spans(rows)
    assert [(s.start, s.end) for s in spans] == [(utc(10), utc(62)), (utc(70), utc(80))]
    loop = [loop_row(4242, t, data_wait_io=850, compute=150) for t in range(1, 101)]
    ev = gpu_evidence(attribute(spans, loop), rows)
    assert gpu_sentence(ev["gpus"][0]) == (
        "GPU 0 idle 62.0 s (62 % of the time): 62.0 s waiting on DataLoader reads")
    assert idle.gpu_sentences(gpu_evidence([], rows)) == ["GPU 0 idle 0 % of the time"]


# -- the session's entry point ------------------------------------------------------------------


def test_monitor_per_interval_matches_the_offline_analysis() -> None:
    source = RecordedSource("stalls")
    monitor = GpuMonitor(source, clocks=source.clocks)
    by_end = {round((r["ts"] - REALTIME_NS) / S, 1): r for r in LOOP}
    gpu_rows, idle_rows = [], []
    for k in range(1, 12):
        source.advance(1.0)
        # The session's loop rows for this interval (here: those that ended since the last poll).
        loop = [r for t, r in by_end.items() if k - 1 < t <= k]
        rows, idle = monitor.interval(source.clocks()["realtime"], loop, {4242: 4242})
        gpu_rows += rows
        idle_rows += idle
    idle_rows += monitor.finish()
    # Span 1 is reported at 6 s, span 2 at 11 s: each after the loop rows that overlap it came.
    assert_rows(idle_rows, expected_idle())
    assert gpu_rows == [r for poll in replay("stalls", 11)[2] for r in poll]
    assert len(monitor._loop) <= 3  # loop rows are not kept once no span can need them
    meta = monitor.meta()
    assert meta["nvml_clock"] == "boottime"
    assert meta["nvml_clock_to_utc_offset_ns"] == REALTIME_NS - source.clock_at["boottime"]
    monitor.close()
    assert source.closed


def test_monitor_gives_a_gpu_nvml_lists_no_process_on_to_the_loop_its_environment_names() -> None:
    """Two training loops and NVML's process list empty (a container's PIDs): with no other
    information GPU 0's spans have no pid; the loop whose environment names GPU 0 gets them."""
    for named, pid in ((None, None), ({5555: "1", 4242: "0"}, 4242), ({5555: "GPU-8f7e"}, 5555)):
        source = RecordedSource("stalls")
        source.dev[0]["processes"] = []
        monitor = GpuMonitor(source, clocks=source.clocks)
        rows = LOOP + OTHER_JOB
        idle_rows = []
        for k in range(1, 12):
            source.advance(1.0)
            loop = [r for r in rows if k - 1 < (r["ts"] - REALTIME_NS) / S <= k]
            idle_rows += monitor.interval(source.clocks()["realtime"], loop, {4242: 4242, 5555: 5555},
                                          named)[1]
        idle_rows += monitor.finish()
        assert [r["pid"] for r in idle_rows] == [pid, pid], named
        if pid == 4242:
            assert_rows(idle_rows, expected_idle())


# -- NvmlSource against pynvml ------------------------------------------------------------------


def test_schema_states_match_the_diagnosis() -> None:
    from tracer.core.diagnosis import STATES

    assert idle.STATES == STATES
    assert [f"{s}_frac" for s in STATES] == [n for n in TABLES["gpu_idle"].names if n.endswith("_frac")]


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch):
    """The real pynvml module with its C calls replaced: two GPUs, the second in MIG mode."""
    pynvml = pytest.importorskip("pynvml")
    state = {"samples": [(1_000, 40), (1_167, 0)], "not_found": False, "lost": False}

    def err(code: int):
        return pynvml.NVMLError(code)

    def get_samples(handle, kind, since):
        assert kind == pynvml.NVML_GPU_UTILIZATION_SAMPLES
        if state["lost"]:
            raise err(pynvml.NVML_ERROR_GPU_IS_LOST)
        if state["not_found"]:
            raise err(pynvml.NVML_ERROR_NOT_FOUND)
        out = []
        for ts, v in [(0, 0), *state["samples"]]:  # NVML may hand back zeroed entries
            s = pynvml.c_nvmlSample_t()
            s.timeStamp = ts
            s.sampleValue.uiVal = v
            out.append(s)
        return pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, out

    def mig_mode(handle):
        if handle == 0:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE]

    def pcie(handle, counter):
        return {pynvml.NVML_PCIE_UTIL_RX_BYTES: 2000, pynvml.NVML_PCIE_UTIL_TX_BYTES: 10}[counter]

    def procs(handle):
        return [pynvml.nvmlFriendlyObject({"pid": p, "usedGpuMemory": m})
                for p, m in ((11, 1 << 20), (22, 1 << 34), (11, 1 << 20), (33, None))]

    util = pynvml.c_nvmlUtilization_t()
    util.gpu, util.memory = 7, 3
    for name, fn in {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 2,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetUUID": lambda h: f"GPU-{h}",
        "nvmlDeviceGetName": lambda h: "NVIDIA H200",
        "nvmlDeviceGetMigMode": mig_mode,
        "nvmlDeviceGetSamples": get_samples,
        "nvmlDeviceGetUtilizationRates": lambda h: util,
        "nvmlDeviceGetPcieThroughput": pcie,
        "nvmlDeviceGetComputeRunningProcesses": procs,
    }.items():
        monkeypatch.setattr(pynvml, name, fn)
    return pynvml, state


def test_nvml_source_reads_pynvml_shapes(fake_nvml) -> None:
    _, state = fake_nvml
    source = NvmlSource()
    assert source.devices() == [GpuDevice(0, "GPU-0", "NVIDIA H200", False),
                                GpuDevice(1, "GPU-1", "NVIDIA H200", True)]
    assert source.samples(0, 0) == [(1_000, 40.0), (1_167, 0.0)]
    assert source.samples(0, 1_000) == [(1_167, 0.0)]
    state["not_found"] = True
    assert source.samples(0, 1_167) == []
    assert source.utilization(0) == (7.0, 3.0)
    assert source.pcie(0) == (2000 * 1024.0, 10 * 1024.0)
    assert source.processes(0) == [22, 11, 33]
    state["not_found"], state["lost"] = False, True
    with pytest.raises(GpuLost, match=r"^GPU 0 is lost"):
        source.samples(0, 0)


def test_nvml_source_reports_unsupported_pcie_once_and_permission_errors(fake_nvml, monkeypatch) -> None:
    pynvml, _ = fake_nvml
    calls = []

    def pcie(handle, counter):
        calls.append(counter)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def procs(handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetPcieThroughput", pcie)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", procs)
    source = NvmlSource()
    assert source.pcie(0) is None and source.pcie(0) is None and len(calls) == 1
    with pytest.raises(GpuError, match=r"^GPU 0: permission denied reading its processes"):
        source.processes(0)


@pytest.mark.parametrize(("code", "words"), [
    ("NVML_ERROR_LIBRARY_NOT_FOUND", "libnvidia-ml.so.1 not found"),
    ("NVML_ERROR_DRIVER_NOT_LOADED", "driver is not loaded"),
    ("NVML_ERROR_LIB_RM_VERSION_MISMATCH", "differ in version"),
])
def test_nvml_init_failures_are_one_line(monkeypatch, code: str, words: str) -> None:
    pynvml = pytest.importorskip("pynvml")

    def init():
        raise pynvml.NVMLError(getattr(pynvml, code))

    monkeypatch.setattr(pynvml, "nvmlInit", init)
    with pytest.raises(GpuUnavailable, match=words) as info:
        NvmlSource()
    assert "\n" not in str(info.value)
    source, reason = open_source("auto")
    assert source is None and reason.startswith("GPU sampling off: no NVML:") and words in reason


def test_no_pynvml_package(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert open_source("auto") == (
        None, "GPU sampling off: no NVML: the nvidia-ml-py package is not installed "
              "(pip install nvidia-ml-py)")
    with pytest.raises(GpuUnavailable, match="^--gpu 0: no NVML"):
        open_source("0")


def test_real_nvml() -> None:
    """The real library: runs where an NVIDIA driver and GPU exist."""
    try:
        source = NvmlSource()
    except GpuUnavailable as err:
        pytest.skip(f"no NVIDIA driver/GPU: {err}")
    try:
        devices = source.devices()
        if not devices:
            pytest.skip("no NVIDIA driver/GPU: NVML found no GPU")
        sampler = GpuSampler(source)
        import time

        for _ in range(3):
            time.sleep(0.4)
            rows = sampler.poll(time.time_ns())
            table_from_rows("gpu", rows)
        for d in sampler.sampled:
            util, mem = source.utilization(d.index)
            assert 0 <= util <= 100 and 0 <= mem <= 100
            assert isinstance(source.processes(d.index), list)
        assert sampler.clock in (None, "realtime", "monotonic", "boottime")
    finally:
        source.close()
