"""Perfetto / Chrome trace JSON export (`tracer.render.perfetto`), alone and merged into Kineto traces.

Most tests use a trace built by hand with `TraceWriter`, so that every slice and counter value is
known exactly; one test (root) traces a real run of torch.profiler and merges its Kineto trace.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import sys
import warnings
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import ROOT, needs_root, run_iotrace
from tracer.api import TraceError, load
from tracer.core.vocab import LOOP_STATES
from tracer.render.perfetto import (
    IOTRACE_PID,
    KINETO_BASE_PERIOD_NS,
    KinetoError,
    export_perfetto,
    segment_problems,
)
from tracer.sinks.parquet import TraceWriter

S = 1_000_000_000
MS = 1_000_000
T0 = 1_700_000_000 * S  # start of the hand-built trace
MAIN, W1, W2, CHILD = 100, 101, 102, 103
STATES = LOOP_STATES

META = {"host": "gpu-node-1", "start_ns": T0, "stop_ns": T0 + 5 * S, "interval_s": 1.0,
        "targets": {"pids": [MAIN], "command": []}}


def proc(pid, ppid, comm, role, first, exit=None, gen=None, idx=None):
    return {"pid": pid, "ppid": ppid, "comm": comm, "role": role, "cmdline": f"{comm} train.py",
            "first_seen": first, "exit": exit, "exit_code": None if exit is None else 0,
            "worker_generation": gen, "worker_index": idx}


def loop(end, length, state, **spent):
    row = {"ts": end, "pid": MAIN, "interval_ns": length, "state": state}
    row.update({f"{s}_ns": spent.get(s, 0) for s in STATES})
    return row


def event(start, pid, tid, layer, op, path, latency, nbytes=4096, device="nvme0n1", role=None):
    return {"ts": start, "pid": pid, "tid": tid, "comm": "python" if pid == MAIN else "pt_data_worker",
            "role": role or ("main" if pid == MAIN else "dataloader_worker"), "layer": layer, "op": op,
            "path": path, "device": device, "offset": 0, "bytes": nbytes, "latency_ns": latency}


def file_io(end, pid, op, nbytes, path="/data/shard.tar"):
    role = "main" if pid == MAIN else "dataloader_worker"
    return {"ts": end, "pid": pid, "comm": "python", "role": role, "path": path,
            "path_source": "kernel", "fs_type": "ext4", "device": "nvme0n1", "inode": 7, "op": op,
            "ops": 1, "bytes": nbytes, "latency_sum_ns": 1000, "latency_max_ns": 1000,
            "pages_missed": 0, "pages_dirtied": 0, "cache_hit_pct": None}


def gpu_row(end, gpu, util):
    return {"ts": end, "gpu": gpu, "uuid": f"GPU-{gpu}", "name": "H100", "util_pct": util,
            "sample_period_ns": S // 2}


def idle(start, end, gpu, cause):
    fracs = {f"{s}_frac": (1.0 if s == cause else 0.0) for s in STATES}
    return {"start": start, "end": end, "duration_ns": end - start, "gpu": gpu, "pid": MAIN,
            "cause": cause, **fracs, "coverage": 1.0, "confidence": 0.9}


PROCESSES_1 = [proc(CHILD, MAIN, "sh", "child", T0 + 10 * MS, exit=T0 + 20 * MS),
               proc(W2, MAIN, "pt_data_worker", "dataloader_worker", T0 + 50 * MS, gen=0, idx=1),
               proc(W1, MAIN, "pt_data_worker", "dataloader_worker", T0 + 40 * MS, gen=0, idx=0),
               proc(MAIN, 1, "python", "main", T0)]
PROCESSES_2 = [proc(W1, MAIN, "pt_data_worker", "dataloader_worker", T0 + 40 * MS,
                    exit=T0 + 3 * S, gen=0, idx=0)]  # the exit row: the last row of a pid wins

LOOP = [
    loop(T0 + 1 * S, S, "data_wait_io", data_wait_io=600 * MS, compute=400 * MS),
    loop(T0 + 2 * S, S, "data_wait_io", data_wait_io=700 * MS, compute=300 * MS),
    loop(T0 + 3 * S, S, "compute", compute=900 * MS, other=100 * MS),
    loop(T0 + 4 * S, S // 2, "compute", compute=S // 2),  # starts at 3.5 s: a gap before it
]

A_START, A_LAT = T0 + 100 * MS + 123, 50 * MS + 1  # odd nanoseconds on purpose
EVENTS = [
    event(A_START, MAIN, MAIN, "syscall", "read", "/data/a.bin", A_LAT),
    event(T0 + 120 * MS, MAIN, MAIN + 5, "syscall", "read", "/data/b.bin", 10 * MS),  # overlaps a
    event(A_START + A_LAT, MAIN, MAIN, "syscall", "read", "/data/c.bin", 5 * MS),  # touches a
    event(T0 + 1100 * MS, W1, W1, "syscall", "read", "/data/shard.tar", 200 * MS, nbytes=1 << 20),
    event(T0 + 1200 * MS, W1, 0, "block", "read", None, 3 * MS, nbytes=1 << 20),
]

FILES = [
    file_io(T0 + 1 * S, MAIN, "read", 1_000_000),
    file_io(T0 + 1 * S, W1, "read", 2_000_000),
    file_io(T0 + 1 * S, W2, "read", 2_000_000),
    file_io(T0 + 1 * S, MAIN, "open", 0),
    file_io(T0 + 2 * S, MAIN, "write", 500_000, path="/ckpt.pt"),
    file_io(T0 + 2 * S, W1, "read", 8_000_000),
    file_io(T0 + 4 * S, W2, "read", 1_000_000),  # the loop says this interval is 0.5 s long
    file_io(T0 + 5 * S, W2, "read", 3_000_000),  # no loop row: 1 s since the previous end
]

GPU = [gpu_row(T0 + k * S // 2, g, 10.0 * k + g) for k in (1, 2, 3) for g in (0, 1)]
GPU_IDLE = [idle(T0 + 1 * S, T0 + 1 * S + S // 2, 0, "data_wait_io"),
            idle(T0 + 2 * S, T0 + 3 * S, 1, "compute")]


@pytest.fixture
def hand(tmp_path: Path) -> Path:
    """A hand-built trace: a main process, two DataLoader workers and a child, in two segments."""
    d = tmp_path / "trace"
    d.mkdir()
    with TraceWriter(d, META) as w:
        w.add("processes", PROCESSES_1)
        w.add("loop", LOOP[:2])
        w.add("events", EVENTS[:3])
        w.add("files", FILES[:4])
        w.flush()
        w.add("processes", PROCESSES_2)
        w.add("loop", LOOP[2:])
        w.add("events", EVENTS[3:])
        w.add("files", FILES[4:])
        w.add("gpu", GPU)
        w.add("gpu_idle", GPU_IDLE)
    return d


def ns(us: float) -> int:
    """A JSON time in µs as Perfetto's importer reads it: ``int(us * 1000)``, truncated."""
    return int(us * 1000.0) if isinstance(us, float) else us * 1000


def export(trace_dir: Path, tmp_path: Path, **kw) -> dict:
    out = export_perfetto(trace_dir, tmp_path / "out.json", **kw)
    assert out == tmp_path / "out.json"
    return json.loads(out.read_text())


def names(doc: dict) -> dict[tuple, str]:
    """(pid,) -> process name and (pid, tid) -> thread name."""
    out = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name":
            out[(e["pid"],)] = e["args"]["name"]
        if e["ph"] == "M" and e["name"] == "thread_name":
            out[(e["pid"], e["tid"])] = e["args"]["name"]
    return out


def slices(doc: dict, cat: str) -> list[tuple]:
    """(track name, start ns, end ns, name) of the X events of category `cat`, in file order."""
    n = names(doc)
    return [(n[(e["pid"], e["tid"])], ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["name"])
            for e in doc["traceEvents"] if e["ph"] == "X" and e.get("cat") == cat]


def counters(doc: dict) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list] = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "C":
            (value,) = e["args"].values()
            out[e["name"]].append((ns(e["ts"]), value))
    return dict(out)


def assert_nested(events: list[dict]) -> int:
    """On every track, X slices (times as Perfetto reads them) are disjoint or nested."""
    tracks: dict[tuple, list] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            start = ns(e["ts"])
            tracks[(e["pid"], e["tid"])].append((start, start + ns(e["dur"])))
    for track, spans in tracks.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_ends: list[int] = []
        for start, end in spans:
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], (track, start, end, open_ends[-1])
            open_ends.append(end)
    return len(tracks)


# -- the standalone export ---------------------------------------------------------------------


def test_every_event_is_well_formed(hand: Path, tmp_path: Path) -> None:
    doc = export(hand, tmp_path)
    assert set(doc) == {"traceEvents", "displayTimeUnit", "otherData"}
    other = doc["otherData"]
    assert other["iotrace_zero_ns"] == T0 and other["iotrace_zero_utc"] == "2023-11-14T22:13:20.000000000Z"
    assert other["iotrace_trace"] == str(hand) and "iotrace_time_base" in other
    required = {"M": {"name", "pid", "tid", "args", "ts"}, "X": {"name", "pid", "tid", "ts", "dur", "cat"},
                "C": {"name", "pid", "ts", "args"}}
    for e in doc["traceEvents"]:
        assert required[e["ph"]] <= set(e), e
        assert isinstance(e["pid"], int) and isinstance(e["ts"], int | float) and e["ts"] >= 0
        if e["ph"] == "X":
            assert e["dur"] >= 0 and not any(v is None for v in e["args"].values())
        if e["ph"] == "C":
            assert all(isinstance(v, int | float) for v in e["args"].values())
    # Times are exact: Perfetto's truncating import gives back the nanoseconds of the trace.
    (a,) = [e for e in doc["traceEvents"] if e["name"] == "read a.bin"]
    assert (ns(a["ts"]), ns(a["dur"])) == (A_START - T0, A_LAT)
    assert a["args"] == {"layer": "syscall", "op": "read", "path": "/data/a.bin", "device": "nvme0n1",
                         "bytes": 4096, "offset": 0, "latency_ns": A_LAT, "tid": MAIN, "comm": "python"}


def test_processes_named_with_role_and_main_first(hand: Path, tmp_path: Path) -> None:
    doc = export(hand, tmp_path)
    order = {e["pid"]: e["args"]["sort_index"] for e in doc["traceEvents"]
             if e["name"] == "process_sort_index"}
    n = names(doc)
    listed = [n[(pid,)] for pid in sorted(order, key=order.get)]
    assert listed == ["python (main) 100", "I/O throughput", "GPUs",
                      "pt_data_worker (dataloader_worker) 101", "pt_data_worker (dataloader_worker) 102",
                      "sh (child) 103"]
    # Each traced PID keeps its pid; the other groups and every track id are out of Linux's range.
    assert {MAIN, W1, W2, CHILD} <= set(order)
    assert all(pid > 1 << 22 for pid in set(order) - {MAIN, W1, W2, CHILD})
    assert all(key[1] > 1 << 22 for key in n if len(key) == 2)
    life = {name_: (start, end) for track, start, end, name_ in slices(doc, "iotrace.process")}
    assert life == {"python 100": (0, 5 * S),  # still running: to the trace's stop
                    "pt_data_worker 101": (40 * MS, 3 * S),  # its exit row won
                    "pt_data_worker 102": (50 * MS, 5 * S), "sh 103": (10 * MS, 20 * MS)}


def test_training_loop_slices_merge_equal_neighbours(hand: Path, tmp_path: Path) -> None:
    doc = export(hand, tmp_path)
    assert slices(doc, "iotrace.loop") == [
        ("training loop", 0, 2 * S, "data_wait_io"),  # two intervals, one slice
        ("training loop", 2 * S, 3 * S, "compute"),
        ("training loop", 3 * S + S // 2, 4 * S, "compute"),  # not merged across the gap
    ]
    first = next(e for e in doc["traceEvents"] if e.get("cat") == "iotrace.loop")
    assert first["args"] == {"intervals": 2, "data_wait_io_ns": 1300 * MS, "data_wait_cpu_ns": 0,
                             "data_wait_network_ns": 0, "sync_loading_ns": 0, "sync_writes_ns": 0,
                             "checkpoint_ns": 0, "collective_wait_ns": 0, "compute_ns": 700 * MS,
                             "other_ns": 0}


def test_overlapping_slow_ops_go_on_separate_lanes(hand: Path, tmp_path: Path) -> None:
    doc = export(hand, tmp_path)
    got = slices(doc, "iotrace.slow_io.syscall") + slices(doc, "iotrace.slow_io.block")
    a0, a1 = A_START - T0, A_START - T0 + A_LAT
    assert sorted(got) == sorted([
        ("slow syscall ops", a0, a1, "read a.bin"),
        ("slow syscall ops #2", 120 * MS, 130 * MS, "read b.bin"),  # overlaps a: second lane
        ("slow syscall ops", a1, a1 + 5 * MS, "read c.bin"),  # starts as a ends: first lane again
        ("slow syscall ops", 1100 * MS, 1300 * MS, "read shard.tar"),
        ("slow block ops", 1200 * MS, 1203 * MS, "read nvme0n1"),  # no path: the device
    ])
    n = names(doc)
    by_pid = defaultdict(set)
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"].startswith("iotrace.slow_io"):
            by_pid[e["pid"]].add(n[(e["pid"], e["tid"])])
    assert by_pid == {MAIN: {"slow syscall ops", "slow syscall ops #2"},
                      W1: {"slow syscall ops", "slow block ops"}}
    assert assert_nested(doc["traceEvents"]) > 0


def test_throughput_counters_per_role(hand: Path, tmp_path: Path) -> None:
    doc = export(hand, tmp_path)
    c = counters(doc)
    assert set(c) == {"main read", "main write", "dataloader_worker read", "GPU 0", "GPU 1"}
    assert c["main read"] == [(0, 1e6), (S, 0)]  # no main reads in interval 2: back to 0
    assert c["main write"] == [(S, 5e5), (2 * S, 0)]
    assert c["dataloader_worker read"] == [
        (0, 4e6),  # both workers
        (S, 8e6),
        (2 * S, 0),
        (3 * S + S // 2, 2e6),  # 1 MB in the loop's 0.5 s interval
        (4 * S, 3e6),  # 3 MB in 1 s (no loop row: time since the previous interval end)
        (5 * S, 0),
    ]
    throughput = {e["pid"] for e in doc["traceEvents"] if e["ph"] == "C" and "read" in e["name"]}
    assert [names(doc)[(pid,)] for pid in throughput] == ["I/O throughput"]


def test_gpu_utilisation_and_idle_spans(hand: Path, tmp_path: Path) -> None:
    doc = export(hand, tmp_path)
    c = counters(doc)
    # Each sample covers the half second before its ts: the value starts there.
    assert c["GPU 0"] == [(0, 10.0), (S // 2, 20.0), (S, 30.0)]
    assert c["GPU 1"] == [(0, 11.0), (S // 2, 21.0), (S, 31.0)]
    assert slices(doc, "iotrace.gpu_idle") == [
        ("GPU 0 idle", S, S + S // 2, "idle: data_wait_io"),
        ("GPU 1 idle", 2 * S, 3 * S, "idle: compute"),
    ]
    span = next(e for e in doc["traceEvents"] if e.get("cat") == "iotrace.gpu_idle")
    assert span["args"]["cause"] == "data_wait_io" and span["args"]["confidence"] == 0.9
    gpus = {e["pid"] for e in doc["traceEvents"] if e.get("cat") == "iotrace.gpu_idle"}
    assert [names(doc)[(pid,)] for pid in gpus] == ["GPUs"]


def test_gzip_output_and_a_trace_object(hand: Path, tmp_path: Path) -> None:
    out = export_perfetto(load(hand), tmp_path / "out.json.gz")
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert doc["otherData"]["iotrace_zero_ns"] == T0
    assert not list(tmp_path.glob(".*.tmp"))


def test_zero_is_the_earliest_timestamp_when_data_predates_the_start(tmp_path: Path) -> None:
    d = tmp_path / "early"
    d.mkdir()
    with TraceWriter(d, {**META, "start_ns": T0 + S}) as w:  # e.g. attached to a running job
        w.add("processes", [proc(MAIN, 1, "python", "main", T0)])
    doc = export(d, tmp_path)
    assert doc["otherData"]["iotrace_zero_ns"] == T0
    assert slices(doc, "iotrace.process") == [("lifetime", 0, 5 * S, "python 100")]


# -- merged into a Kineto trace ----------------------------------------------------------------

BASE = T0 // KINETO_BASE_PERIOD_NS * KINETO_BASE_PERIOD_NS  # what Kineto would have chosen


def kineto_doc(offset_us: float, with_base: bool = True) -> dict:
    """A small trace shaped like torch.profiler's export_chrome_trace (torch 2.13): its events
    use the traced process's own pid (100, which iotrace also traced) and string pids."""
    t = offset_us
    doc = {"schemaVersion": 1, "deviceProperties": [], "trace_id": "ABC", "displayTimeUnit": "ms"}
    if with_base:
        doc["baseTimeNanoseconds"] = BASE
    doc["traceEvents"] = [
        {"ph": "M", "name": "process_name", "ts": t, "pid": MAIN, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "ts": t, "pid": MAIN, "tid": MAIN,
         "args": {"name": "thread 100 (python)"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": MAIN, "tid": MAIN,
         "ts": t + 0.5, "dur": 1.5e6, "args": {"External id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": MAIN, "tid": MAIN, "ts": t + 10.123,
         "dur": 12.345, "args": {"Input Dims": [[2, 2], [2, 2]]}},
        {"ph": "s", "id": 1, "pid": MAIN, "tid": MAIN, "ts": t + 11.0, "cat": "fwdbwd", "name": "fwdbwd"},
        {"ph": "f", "id": 1, "pid": MAIN, "tid": MAIN, "ts": t + 20.0, "cat": "fwdbwd", "name": "fwdbwd",
         "bp": "e"},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
         "tid": "PyTorch Profiler", "ts": t, "dur": 2e6, "args": {"Op count": 0}},
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": t + 2e6},
    ]
    doc["traceName"] = "kineto.json"
    return doc


def write_json(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc, indent=1))
    return path


def test_merge_keeps_every_kineto_event_and_adds_the_iotrace_process(hand: Path, tmp_path: Path) -> None:
    offset_us = (T0 - BASE) / 1000  # the profile starts with the trace
    kineto = write_json(tmp_path / "kineto.json", kineto_doc(offset_us))
    original = json.loads(kineto.read_text())
    doc = export(hand, tmp_path, merge=kineto)
    n = len(original["traceEvents"])
    assert doc["traceEvents"][:n] == original["traceEvents"]  # count and content
    assert [k for k in doc if k != "otherData"] == list(original)  # top-level keys, same order
    assert all(doc[k] == v for k, v in original.items() if k != "traceEvents")
    ours = doc["traceEvents"][n:]
    assert {e["pid"] for e in ours} == {IOTRACE_PID}  # one process, not any of Kineto's pids
    assert IOTRACE_PID not in {e["pid"] for e in original["traceEvents"]}
    assert names(doc)[(IOTRACE_PID,)] == "iotrace"
    tracks = {v for k, v in names(doc).items() if k[0] == IOTRACE_PID and len(k) == 2}
    assert {"python (main) 100: training loop", "python (main) 100: slow syscall ops",
            "python (main) 100: slow syscall ops #2", "GPUs: GPU 0 idle",
            "pt_data_worker (dataloader_worker) 101: slow block ops"} <= tracks
    # Aligned by wall clock: ts counts µs from baseTimeNanoseconds.
    assert doc["otherData"]["iotrace_zero_ns"] == BASE
    (a,) = [e for e in ours if e["name"] == "read a.bin"]
    assert ns(a["ts"]) == A_START - BASE and ns(a["dur"]) == A_LAT
    loop_ = [(ns(e["ts"]) + BASE, ns(e["ts"]) + ns(e["dur"]) + BASE)
             for e in ours if e.get("cat") == "iotrace.loop"]
    assert loop_ == [(T0, T0 + 2 * S), (T0 + 2 * S, T0 + 3 * S), (T0 + 3 * S + S // 2, T0 + 4 * S)]
    assert counters({"traceEvents": ours})["main read"] == [(T0 - BASE, 1e6), (T0 + S - BASE, 0)]
    assert_nested(ours)


def test_merge_without_base_time(hand: Path, tmp_path: Path) -> None:
    # Older Kineto: absolute Unix microseconds.
    absolute = kineto_doc(T0 / 1000 + 0.5, with_base=False)
    doc = export(hand, tmp_path, merge=write_json(tmp_path / "abs.json", absolute))
    assert doc["otherData"]["iotrace_zero_ns"] == 0
    (a,) = [e for e in doc["traceEvents"] if e["name"] == "read a.bin"]
    assert abs(ns(a["ts"]) - A_START) < 500  # µs since 1970 as a double: 0.25 µs resolution
    assert_nested(doc["traceEvents"][len(absolute["traceEvents"]):])
    # Relative times but no baseTimeNanoseconds: the base is recomputed as Kineto does.
    relative = kineto_doc((T0 - BASE) / 1000, with_base=False)
    doc = export(hand, tmp_path, merge=write_json(tmp_path / "rel.json", relative))
    assert doc["otherData"]["iotrace_zero_ns"] == BASE
    assert "recomputed" in doc["otherData"]["iotrace_time_base"]


def test_merge_leaves_out_what_precedes_the_base_time(hand: Path, tmp_path: Path) -> None:
    """Chrome trace readers reject negative times: iotrace data before the Kineto base is cut."""
    kineto = {**kineto_doc(0.0), "baseTimeNanoseconds": T0 + 2 * S}
    doc = export(hand, tmp_path, merge=write_json(tmp_path / "k.json", kineto))
    ours = doc["traceEvents"][len(kineto["traceEvents"]):]
    assert all(e["ts"] >= 0 for e in ours)
    assert [s[1:] for s in slices(doc, "iotrace.loop")] == [
        (0, S, "compute"), (S + S // 2, 2 * S, "compute")]  # [0 s, 2 s] ended at the base
    assert slices(doc, "iotrace.slow_io.syscall") == []
    assert [s[1:] for s in slices(doc, "iotrace.gpu_idle")] == [(0, S, "idle: compute")]
    life = {s[3]: s[1:3] for s in slices(doc, "iotrace.process")}
    assert life == {"python 100": (0, 3 * S), "pt_data_worker 101": (0, S),
                    "pt_data_worker 102": (0, 3 * S)}  # sh 103 ended before
    c = counters({"traceEvents": ours})
    assert c["GPU 0"] == [(0, 30.0)]  # the value in force at the base moves there
    assert c["main read"] == [(0, 0)]
    assert c["main write"] == [(0, 0)]  # a value at the base itself: the earlier ones go
    assert c["dataloader_worker read"] == [(0, 0), (1500 * MS, 2e6), (2 * S, 3e6), (3 * S, 0)]
    assert "earlier than the Kineto base time" in doc["otherData"]["iotrace_left_out"]
    assert_nested(ours)


def test_merge_into_the_same_file_and_array_form(hand: Path, tmp_path: Path) -> None:
    kineto = write_json(tmp_path / "k.json", kineto_doc((T0 - BASE) / 1000)["traceEvents"])
    events = json.loads(kineto.read_text())
    out = export_perfetto(hand, kineto, merge=kineto)  # array form: times taken as relative
    doc = json.loads(out.read_text())
    assert doc["traceEvents"][: len(events)] == events
    assert doc["otherData"]["iotrace_zero_ns"] == BASE


def one_line(e: pytest.ExceptionInfo, *words: str) -> None:
    text = str(e.value)
    assert "\n" not in text and text, text
    for w in words:
        assert w in text, text


def test_kineto_bad_input(hand: Path, tmp_path: Path) -> None:
    good = json.dumps(kineto_doc((T0 - BASE) / 1000))
    (tmp_path / "own").mkdir()
    own_export = json.dumps(export(hand, tmp_path / "own")).encode()
    cases = {
        "missing.json": (None, "cannot read the profiler trace"),
        "garbage.bin": (bytes(range(256)), "not a JSON file"),
        "text.json": (b"hello", "is not valid JSON"),
        "cut.json": (good[: len(good) // 2].encode(), "cut short"),
        "number.json": (b"42", "not a profiler trace"),
        "object.json": (b'{"foo": 1}', "no traceEvents list"),
        "events.json": (b'{"traceEvents": [1, 2]}', "traceEvents[0] is not an event"),
        "damaged.json.gz": (gzip.compress(good.encode())[:-20], "damaged gzip"),
        "empty.json": (b"", "is not valid JSON"),
        "untimed.json": (b'{"schemaVersion": 1, "traceEvents": [{"ph": "M", "name": "x"}]}',
                         "no timed events"),
        # Chrome traces of other tools, iotrace's own among them
        "chrome.json": (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 5, "dur": 1}]}',
                        "is a Chrome trace, not a PyTorch profiler trace"),
        "iotrace.json": (own_export,
                         "is an iotrace export, not a PyTorch profiler trace"),
        "badbase.json": (json.dumps({**kineto_doc(0.0), "baseTimeNanoseconds": "x"}).encode(),
                         "invalid baseTimeNanoseconds"),
        # a profile of another time: one day after the trace
        "elsewhere.json": (json.dumps(kineto_doc((T0 - BASE) / 1000 + 86400e6)).encode(),
                           "do not overlap"),
    }
    for name, (data, words) in cases.items():
        path = tmp_path / name
        if data is not None:
            path.write_bytes(data)
        with pytest.raises(KinetoError) as e:
            export_perfetto(hand, tmp_path / "out.json", merge=path)
        assert isinstance(e.value, ValueError)
        one_line(e, words, name)
        assert not (tmp_path / "out.json").exists()


# -- bad trace directories ---------------------------------------------------------------------


def test_bad_trace_directories(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "badmeta").mkdir()
    (tmp_path / "badmeta/meta.json").write_text("{")
    cases = {"missing": "does not exist", "file": "is not a directory", "empty": "no meta.json",
             "badmeta": "damaged"}
    for name, words in cases.items():
        with pytest.raises(TraceError) as e:
            export_perfetto(tmp_path / name, tmp_path / "out.json")
        one_line(e, words)
    # A trace whose tracer stopped before writing a segment: meta.json and nothing else.
    TraceWriter(tmp_path / "empty", META).close()
    with pytest.raises(TraceError) as e:
        export_perfetto(tmp_path / "empty", tmp_path / "out.json")
    one_line(e, "holds nothing to export")


def test_missing_tables_are_empty_not_errors(tmp_path: Path) -> None:
    d = tmp_path / "only_events"
    d.mkdir()
    with TraceWriter(d, META) as w:
        w.add("events", EVENTS[:1])
    doc = export(d, tmp_path)
    assert names(doc)[(MAIN,)] == "python (main) 100"  # named from the events table
    assert [s[3] for s in slices(doc, "iotrace.slow_io.syscall")] == ["read a.bin"]


def segmented(tmp_path: Path, segments: int = 5) -> tuple[Path, list[int]]:
    """A trace whose events (and loop) tables have `segments` segments of different sizes."""
    d = tmp_path / "segmented"
    d.mkdir()
    sizes = []
    with TraceWriter(d, META) as w:
        w.add("processes", PROCESSES_1)
        for i in range(segments):
            rows = [event(T0 + i * S + j * MS, MAIN, MAIN, "syscall", "read", f"/data/{i}-{j}", MS // 2)
                    for j in range(i + 1)]
            w.add("events", rows)
            w.add("loop", [loop(T0 + (i + 1) * S, S, "compute", compute=S)])
            w.flush()
            sizes.append(len(rows))
    return d, sizes


def corrupt(path: Path, how: str, rng: random.Random) -> None:
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: rng.randrange(1, len(data) - 8)])
    elif how == "random":
        path.write_bytes(rng.randbytes(len(data)))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "foreign":  # a Parquet file of something else
        pq.write_table(pa.table({"a": [1, 2], "b": ["x", "y"]}), path)
    elif how == "wrong_types":  # the right column names, not iotrace's types
        table = pq.read_table(path)
        pq.write_table(table.set_column(0, "ts", pa.array([1] * table.num_rows, pa.int64())), path)
    else:
        raise ValueError(how)


KINDS = ("truncate", "random", "empty", "foreign", "wrong_types")


@pytest.mark.parametrize("seed", range(8))
def test_fuzz_damaged_segments_are_named(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    d, sizes = segmented(tmp_path)
    table = rng.choice(["events", "loop"])
    segments = sorted((d / table).glob("part-*.parquet"))
    bad = sorted(rng.sample(range(len(segments)), rng.randint(1, 3)))
    for i in bad:
        corrupt(segments[i], rng.choice(KINDS), rng)
    with pytest.raises(TraceError) as e:
        export_perfetto(d, tmp_path / "out.json")
    one_line(e, f"table {table!r}", f"{len(bad)} unusable segment", f"of {len(segments)}")
    for i, seg in enumerate(segments):
        assert (seg.name in str(e.value)) == (i in bad), (seg.name, str(e.value))
    assert [p for p, _ in segment_problems(d / table, table)] == [segments[i] for i in bad]
    # Doing what the message says (moving them out) exports the rest.
    aside = tmp_path / "aside"
    aside.mkdir()
    for i in bad:
        shutil.move(segments[i], aside / segments[i].name)
    doc = export(d, tmp_path)
    reads = slices(doc, "iotrace.slow_io.syscall")
    kept = [n for i, n in enumerate(sizes) if not (table == "events" and i in bad)]
    assert len(reads) == sum(kept)


def test_fuzz_damaged_data_pages(tmp_path: Path) -> None:
    """Bytes overwritten inside a segment, footer intact: the export either reads it (Parquet
    pages carry no checksum here, so some damage is invisible) or names that segment."""
    d, _ = segmented(tmp_path)
    seg = sorted((d / "events").glob("part-*.parquet"))[2]
    data = bytearray(seg.read_bytes())
    for seed in range(10):
        rng = random.Random(seed)
        damaged = bytearray(data)
        at = rng.randrange(4, len(data) - 400)
        damaged[at: at + 32] = rng.randbytes(32)
        seg.write_bytes(bytes(damaged))
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                export_perfetto(load(d), tmp_path / "out.json")
            # read past the footer check: the loader skipped it, saying which
            assert all(seg.name in str(w.message) for w in caught), [str(w.message) for w in caught]
        except TraceError as e:
            assert "\n" not in str(e) and seg.name in str(e), str(e)


@pytest.mark.parametrize("how", ["truncate", "random", "empty", "foreign"])
def test_loader_loads_the_rest_of_a_table_with_damaged_segments(tmp_path: Path, how) -> None:
    d, sizes = segmented(tmp_path)
    seg = sorted((d / "events").glob("part-*.parquet"))[1]
    corrupt(seg, how, random.Random(0))
    trace = load(d)
    with pytest.warns(UserWarning, match=f"skipped 1 unusable segment.*{seg.name}"):
        assert len(trace.events) == sum(sizes) - sizes[1]
    assert [p for p, _ in trace.damaged["events"]] == [seg]


# -- real traces -------------------------------------------------------------------------------


def test_torch_profiler_writes_ts_relative_to_base_time(tmp_path: Path) -> None:
    """What the merge relies on, checked on this torch: Kineto's ``ts`` are µs from
    ``baseTimeNanoseconds``, which is wall-clock time floored to three months."""
    torch = pytest.importorskip("torch")
    import time

    before = time.time_ns()
    cpu = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=cpu) as prof, torch.profiler.record_function("probe"):
        torch.randn(64, 64) @ torch.randn(64, 64)
    after = time.time_ns()
    prof.export_chrome_trace(str(tmp_path / "k.json"))
    doc = json.loads((tmp_path / "k.json").read_text())
    base = doc["baseTimeNanoseconds"]
    assert isinstance(base, int) and base % KINETO_BASE_PERIOD_NS == 0
    (probe,) = [e for e in doc["traceEvents"] if e.get("name") == "probe"]
    start = base + probe["ts"] * 1000
    assert before - 10 * MS <= start <= after + 10 * MS
    assert {type(e["pid"]) for e in doc["traceEvents"]} <= {int, str}


@needs_root
@pytest.mark.kernel
def test_real_run_merged_with_its_torch_profile(tmp_path: Path) -> None:
    """iotrace traces a script that reads cold files inside torch.profiler record_function
    blocks; merged, each probe's slow reads fall inside its annotation (measured: < 2 ms)."""
    pytest.importorskip("torch")
    out, trace_dir = tmp_path / "work", tmp_path / "trace"
    out.mkdir()
    script = ROOT / "tests/workloads/profiled_reads.py"
    r = run_iotrace("-o", str(trace_dir), "--slow-ms", "0.01", "--no-tui", "--",
                    sys.executable, str(script), str(out), timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    kineto = json.loads((out / "kineto.json").read_text())
    probes = json.loads((out / "probes.json").read_text())
    merged = export_perfetto(trace_dir, tmp_path / "merged.json", merge=out / "kineto.json")
    doc = json.loads(merged.read_text())
    n = len(kineto["traceEvents"])
    assert doc["traceEvents"][:n] == kineto["traceEvents"]
    ours = doc["traceEvents"][n:]
    assert {e["pid"] for e in ours} == {IOTRACE_PID} and names(doc)[(IOTRACE_PID,)] == "iotrace"
    assert IOTRACE_PID not in {e.get("pid") for e in kineto["traceEvents"]}
    assert_nested(ours)
    timed = [e for e in kineto["traceEvents"] if e["ph"] == "X"]
    k_lo = min(e["ts"] for e in timed)
    k_hi = max(e["ts"] + e["dur"] for e in timed)
    annotations = {e["name"]: e for e in timed if e.get("cat") == "user_annotation"}
    tolerance_us = 50_000  # probes are 300 ms apart: a probe's reads cannot match its neighbour
    for p in probes:
        a = annotations[f"probe_{p['probe']}"]
        reads = [e for e in ours if e["ph"] == "X" and e["args"].get("layer") == "syscall"
                 and e["args"].get("op") == "read" and e["args"].get("path") == p["path"]]
        assert reads, f"no slow read of {p['path']} in the iotrace trace"
        for e in reads:
            assert k_lo <= e["ts"] and e["ts"] + e["dur"] <= k_hi, (e, k_lo, k_hi)
            assert a["ts"] - tolerance_us <= e["ts"], (e, a)
            assert e["ts"] + e["dur"] <= a["ts"] + a["dur"] + tolerance_us, (e, a)
    # The standalone export of the same trace is well nested too.
    alone = export_perfetto(trace_dir, tmp_path / "alone.json")
    assert assert_nested(json.loads(alone.read_text())["traceEvents"]) > 1
    assert os.path.getsize(alone) > 0


def stack_rows(taken, pid, tid, reason, frames, user, text):
    """A sample's `stacks` rows: `frames` (file, line, function) innermost first."""
    return [{"ts": taken + S, "taken": taken, "pid": pid, "tid": tid, "role": None,
             "reason": reason, "depth": i, "file": f, "line": line, "function": fn,
             "user": i == user, "text": text if i == user else None}
            for i, (f, line, fn) in enumerate(frames)]


def test_python_stacks_are_slices_named_after_the_users_line(hand: Path, tmp_path: Path) -> None:
    lib = ("/venv/lib/python3.11/site-packages/torch/serialization.py", 900, "save")
    read = ("/app/train.py", 110, "FileDataset.__getitem__")
    loop_line = ("/app/train.py", 485, "train")
    rows = (stack_rows(T0 + 1100 * MS, W1, W1, "slow_read", [read, loop_line], 0, "buf = f.read()")
            + stack_rows(T0 + 1100 * MS + MS // 2, W1, W1, "slow_read", [read], 0, None)  # overlaps
            + stack_rows(T0 + 2 * S, MAIN, MAIN, "save", [lib, loop_line], 1, "for x in loader:"))
    d = tmp_path / "stacks-trace"
    d.mkdir()
    with TraceWriter(d, META) as w:
        w.add("processes", PROCESSES_1)
        w.add("stacks", rows)
    doc = export(d, tmp_path)
    got = slices(doc, "iotrace.stacks")
    assert sorted(got) == sorted([
        ("Python stacks", 1100 * MS, 1101 * MS, "train.py:110 FileDataset.__getitem__"),
        ("Python stacks #2", 1100 * MS + MS // 2, 1101 * MS + MS // 2,
         "train.py:110 FileDataset.__getitem__"),
        ("Python stacks", 2 * S, 2 * S + MS, "train.py:485 train"),  # not torch's frame
    ])
    args = [e["args"] for e in doc["traceEvents"] if e.get("cat") == "iotrace.stacks"]
    save = next(a for a in args if a["reason"] == "save")
    assert save == {"reason": "save", "tid": MAIN, "text": "for x in loader:",
                    "stack": [f"{lib[0]}:900 save", "/app/train.py:485 train"]}
    assert {e["pid"] for e in doc["traceEvents"] if e.get("cat") == "iotrace.stacks"} == {W1, MAIN}
    assert assert_nested(doc["traceEvents"]) > 0
