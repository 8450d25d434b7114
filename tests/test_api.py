"""The trace as a product: `Trace.percentiles/findings/summary/_repr_html_`, the HTML and JSON
reports (`tracer.render.html`), other readers (DuckDB, pyarrow.dataset), and ``tracer.trace(...)``.

Most tests use a trace built by hand with `TraceWriter` (exact expected numbers, no root); the
ones marked `kernel` trace real processes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pytest

import tracer
from conftest import IOTRACE, ROOT, needs_root
from tracer import attach
from tracer.api import Trace, TraceError, load
from tracer.core.histogram import percentile_ns
from tracer.render.first_screen import device_lines
from tracer.render.html import render_html, summary_json, write_html
from tracer.render.saved_files import file_totals_from_files, file_totals_from_segments
from tracer.render.summary import max_seen
from tracer.report import totals_from_latency
from tracer.sinks.parquet import TraceWriter
from tracer.tracedir import sums
from tracer.tracedir.schema import SCHEMA_VERSION, TABLES

S = 1_000_000_000
T0 = 1_700_000_000 * S  # start of the hand-built trace
OPEN_LO = 1 << 39  # the last, open-ended histogram slot
OPEN_HI = (1 << 63) - 1

MAIN, W1, W2 = 100, 101, 102
CKPT = "/data/ckpt.pt"
SHARD = "/data/shard-0000.tar"
ADVICE_IO = "Add DataLoader workers & use a faster disk <fast>"


def lat(ts, pid, role, layer, op, lo, hi, count, nbytes=0, target=None, device=None,
        attribution=None, comm=None):
    return {"ts": ts, "pid": pid, "comm": comm or ("python" if role == "main" else
                                                   "pt_data_worker"),
            "role": role, "layer": layer, "op": op, "target": target, "device": device,
            "attribution": attribution, "bucket_lo_ns": lo, "bucket_hi_ns": hi, "count": count,
            "bytes": nbytes}


LATENCY = [
    # main, syscall file reads: interval 1 and 2 each 1 op in [1024, 2048) and 1 in [4096, 8192)
    lat(T0 + 1 * S, MAIN, "main", "syscall", "read", 1024, 2048, 1, 100, target="file"),
    lat(T0 + 1 * S, MAIN, "main", "syscall", "read", 4096, 8192, 1, 200, target="file"),
    lat(T0 + 2 * S, MAIN, "main", "syscall", "read", 1024, 2048, 1, 300, target="file"),
    lat(T0 + 2 * S, MAIN, "main", "syscall", "read", 4096, 8192, 1, 400, target="file"),
    # main, one pipe read (a batch from a worker) in [2^20, 2^21)
    lat(T0 + 2 * S, MAIN, "main", "syscall", "read", 1 << 20, 1 << 21, 1, 8, target="pipe"),
    # main, a checkpoint write and its fsync
    lat(T0 + 2 * S, MAIN, "main", "syscall", "write", 1 << 16, 1 << 17, 4, 4 << 20, target="file"),
    lat(T0 + 2 * S, MAIN, "main", "syscall", "fsync", 1 << 24, 1 << 25, 1, 0, target="file"),
    # two workers, 5 file reads each in [65536, 131072)
    lat(T0 + 1 * S, W1, "dataloader_worker", "syscall", "read", 65536, 131072, 5, 5 << 20,
        target="file"),
    lat(T0 + 2 * S, W2, "dataloader_worker", "syscall", "read", 65536, 131072, 5, 5 << 20,
        target="file"),
    # block layer under the workers' reads
    lat(T0 + 1 * S, W1, "dataloader_worker", "block", "read", 32768, 65536, 3, 3 << 20,
        device="nvme0n1", attribution="direct"),
    lat(T0 + 2 * S, W2, "dataloader_worker", "block", "read", 32768, 65536, 1, 1 << 20,
        device="nvme0n1", attribution="readahead"),
    lat(T0 + 1 * S, W1, "dataloader_worker", "block_queue", "read", 512, 1024, 4, 4 << 20,
        device="nvme0n1", attribution="direct"),
    # page-cache misses (count = pages)
    lat(T0 + 1 * S, W1, "dataloader_worker", "pagecache", "read", 0, 2, 256, 1 << 20),
]


def file_row(ts, pid, role, path, op, ops, nbytes, lat_sum, inode, missed=0, dirtied=0):
    return {"ts": ts, "pid": pid, "comm": "python" if role == "main" else "pt_data_worker",
            "role": role, "path": path, "path_source": "kernel", "fs_type": "ext4",
            "device": "nvme0n1", "inode": inode, "op": op, "ops": ops, "bytes": nbytes,
            "latency_sum_ns": lat_sum, "latency_max_ns": lat_sum, "pages_missed": missed,
            "pages_dirtied": dirtied, "cache_hit_pct": None}


FILES = [
    file_row(T0 + 1 * S, W1, "dataloader_worker", SHARD, "read", 5, 5 << 20, 500_000, 11,
             missed=256),
    file_row(T0 + 2 * S, W2, "dataloader_worker", SHARD, "read", 5, 5 << 20, 600_000, 11),
    file_row(T0 + 2 * S, MAIN, "main", CKPT, "write", 4, 4 << 20, 300_000, 12, dirtied=1024),
    file_row(T0 + 2 * S, MAIN, "main", CKPT, "fsync", 1, 0, 20_000_000, 12),
    file_row(T0 + 1 * S, MAIN, "main", "/data/labels.csv", "read", 4, 1000, 10_000, 13),
]

PROCESSES = [
    {"pid": MAIN, "ppid": 1, "comm": "python", "role": "main", "cmdline": "python train.py",
     "first_seen": T0},
    {"pid": W1, "ppid": MAIN, "comm": "pt_data_worker", "role": "dataloader_worker",
     "cmdline": "python train.py", "first_seen": T0, "exit": T0 + 2 * S, "exit_code": 0,
     "worker_generation": 0, "worker_index": 0},
    {"pid": W2, "ppid": MAIN, "comm": "pt_data_worker", "role": "dataloader_worker",
     "cmdline": "python train.py", "first_seen": T0, "worker_generation": 0, "worker_index": 1},
]

LOOP = [
    {"ts": T0 + 1 * S, "pid": MAIN, "interval_ns": S, "data_wait_io_ns": 600_000_000,
     "data_wait_cpu_ns": 0, "data_wait_network_ns": 0, "sync_loading_ns": 0,
     "sync_writes_ns": 0, "checkpoint_ns": 0, "compute_ns": 400_000_000,
     "other_ns": 0, "state": "data_wait_io"},
    {"ts": T0 + 2 * S, "pid": MAIN, "interval_ns": S, "data_wait_io_ns": 200_000_000,
     "data_wait_cpu_ns": 0, "data_wait_network_ns": 0, "sync_loading_ns": 0,
     "sync_writes_ns": 0, "checkpoint_ns": 500_000_000,
     "compute_ns": 300_000_000, "other_ns": 0, "state": "checkpoint"},
]


def finding(ts, start, kind, severity, summary, evidence, advice, pid=MAIN):
    return {"ts": ts, "start": start, "end": ts, "kind": kind, "severity": severity, "pid": pid,
            "summary": summary, "evidence": evidence, "advice": advice}


FINDINGS = [
    # an evaluation of the last window during the run
    finding(T0 + 1 * S, T0, "dataloader_io_bound", 60, "early window", '{"n": 1}', ADVICE_IO),
    # at the end: the last window's evaluation (later start), then the whole trace's, twice
    finding(T0 + 2 * S, T0 + 1 * S, "checkpoint_stall", 50, "window only", '{"n": 2}', "w"),
    finding(T0 + 2 * S, T0, "checkpoint_stall", 25, "Checkpoints took 25 % of the loop.",
            '{"bytes_written": 4194304, "files": ["/data/ckpt.pt"]}', "Write checkpoints async."),
    finding(T0 + 2 * S, T0, "dataloader_io_bound", 40,
            "The loop waited for batches 40 % <of> the time & more.",
            '{"loop_shares_pct": {"data_wait_io": 40.0}, "p99_read_ns": 130416.64}', ADVICE_IO),
    finding(T0 + 2 * S, T0, "dataloader_io_bound", 40,
            "The loop waited for batches 40 % <of> the time & more.",
            '{"loop_shares_pct": {"data_wait_io": 40.0}, "p99_read_ns": 130416.64}', ADVICE_IO),
    finding(T0 + 2 * S, T0, "cold_cache", 30, "Cold first pass.", "not json {", "Warm it.",
            pid=None),
]

def row(table: str, **given: object) -> dict:
    """A row of `table` with `given` values and a zero of the right type in every other required
    column (so that fixtures of the GPU tables follow their schema as it grows)."""
    out = dict(given)
    for f in TABLES[table]:
        if f.name in out or f.nullable:
            continue
        if pa.types.is_dictionary(f.type) or pa.types.is_string(f.type):
            out[f.name] = "x"
        elif pa.types.is_floating(f.type):
            out[f.name] = 0.0
        else:
            out[f.name] = 0
    return out


GPU = [row("gpu", ts=T0 + i * S // 4, gpu=g, util_pct=90.0 - 20 * g - i)
       for i in range(1, 10) for g in (0, 1)]
GPU_IDLE = [row("gpu_idle", start=T0 + S, end=T0 + S + S // 2, gpu=0, cause="data_wait_io")]

META = {"host": "gpu-node-1", "kernel": "6.18.0", "start_ns": T0, "stop_ns": T0 + 2 * S + S // 2,
        "interval_s": 1.0, "targets": {"pids": [MAIN], "command": []}, "events_lost": 0,
        "stop_reason": "SIGINT"}


@pytest.fixture
def hand(tmp_path: Path) -> Path:
    """A two-interval trace of a training job with two DataLoader workers, in two segments."""
    d = tmp_path / "trace"
    d.mkdir()
    with TraceWriter(d, META) as w:
        w.add("processes", PROCESSES)
        w.add("latency", [r for r in LATENCY if r["ts"] == T0 + S])
        w.add("files", [r for r in FILES if r["ts"] == T0 + S])
        w.add("loop", LOOP[:1])
        w.add("findings", FINDINGS[:1])
        w.flush()
        w.add("latency", [r for r in LATENCY if r["ts"] == T0 + 2 * S])
        w.add("files", [r for r in FILES if r["ts"] == T0 + 2 * S])
        w.add("loop", LOOP[1:])
        w.add("findings", FINDINGS[1:])
        w.add("gpu", GPU)
        w.add("gpu_idle", GPU_IDLE)
    return d


# -- percentiles -----------------------------------------------------------------------------


def test_percentiles_exact_interpolated_values(hand: Path) -> None:
    p = load(hand).percentiles()  # syscall reads by role, q = 50, 90, 99
    assert list(p.columns) == ["count", "bytes", "p50_ns", "p90_ns", "p99_ns"]
    assert p.index.name == "role" and list(p.index) == ["dataloader_worker", "main"]
    # main: file reads [1024,2048) x2, [4096,8192) x2, and a pipe read [2^20,2^21) x1; total 5.
    # Nearest rank ceil(q/100 * 5), placed in the middle of its share of its bucket: p50: rank
    # 3, the 1st of the 2nd bucket (cumulative 2, 4, 5): 4096 + 4096 * 0.5 / 2. p90 and p99:
    # rank 5, the one in the 3rd: 2^20 + 2^20 * 0.5 / 1.
    main = p.loc["main"]
    assert (main["count"], main["bytes"]) == (5, 1008)
    assert main["p50_ns"] == pytest.approx(5120.0, rel=1e-12)
    assert main["p90_ns"] == pytest.approx(1048576 * 1.5, rel=1e-12)
    assert main["p99_ns"] == pytest.approx(1048576 * 1.5, rel=1e-12)
    # workers: 10 reads in [65536, 131072) from two pids and two intervals: rank k of 10 is
    # lo + width * (k - 0.5) / 10, k = 5, 9, 10.
    w = p.loc["dataloader_worker"]
    assert (w["count"], w["bytes"]) == (10, 10 << 20)
    assert w["p50_ns"] == pytest.approx(65536 * 1.45, rel=1e-12)
    assert w["p90_ns"] == pytest.approx(65536 * 1.85, rel=1e-12)
    assert w["p99_ns"] == pytest.approx(65536 * 1.95, rel=1e-12)
    assert p["count"].dtype == "int64" and p["p50_ns"].dtype == "float64"


def test_percentiles_filters_and_groupings(hand: Path) -> None:
    trace = load(hand)
    files_only = trace.percentiles(target="file", q=(50, 99))
    # main's 4 file reads, 2 in [1024, 2048) and 2 in [4096, 8192): p50 is rank 2, the 2nd
    # of the first bucket, 1024 + 1024 * 1.5 / 2 (inside it, not 2048, the next one's bound);
    # p99 rank 4: 4096 + 4096 * 1.5 / 2.
    assert files_only.loc["main", "count"] == 4
    assert files_only.loc["main", "p50_ns"] == pytest.approx(1792.0, rel=1e-12)
    assert files_only.loc["main", "p99_ns"] == pytest.approx(4096 + 4096 * 0.75, rel=1e-12)
    one = trace.percentiles(by=None, q=50)
    assert list(one.columns) == ["count", "bytes", "p50_ns"] and len(one) == 1
    assert one["count"].iloc[0] == 15
    blocks = trace.percentiles(layer="block", by=["pid", "attribution"], q=[50])
    assert blocks.index.names == ["pid", "attribution"]
    assert blocks.loc[(W1, "direct"), "count"] == 3
    # 3 reads in [32768, 65536): rank 1.5 -> 32768 + 32768 * 1.5 / 3
    assert blocks.loc[(W1, "direct"), "p50_ns"] == pytest.approx(49152.0, rel=1e-12)
    every = trace.percentiles(layer=None, op=None, by=["layer", "op"], q=99.9)
    assert "p99.9_ns" in every.columns
    assert every.loc[("syscall", "fsync"), "count"] == 1
    assert every["count"].sum() == sum(r["count"] for r in LATENCY)
    both = trace.percentiles(layer=["block", "block_queue"], op="read", by="layer")
    assert both["count"].to_dict() == {"block": 4, "block_queue": 4}
    none = trace.percentiles(layer="block", op="write")
    assert none.empty and list(none.columns) == ["count", "bytes", "p50_ns", "p90_ns", "p99_ns"]


def test_percentiles_open_last_bucket_gives_its_lower_bound(tmp_path: Path) -> None:
    with TraceWriter(tmp_path, {}) as w:
        w.add("latency", [lat(T0, 1, "main", "syscall", "read", OPEN_LO, OPEN_HI, 3,
                              target="file")])
    p = load(tmp_path).percentiles(q=(1, 50, 100))
    assert p.loc["main"].tolist()[2:] == [float(OPEN_LO)] * 3


def test_percentiles_match_the_terminal_summary(hand: Path) -> None:
    """Per series, the same numbers as `render_summary` prints (tracer.core.histogram.percentile_ns,
    at most the slowest file syscall that the files rows know)."""
    trace = load(hand)
    series = ["pid", "layer", "op", "target", "device", "attribution"]
    p = trace.percentiles(layer=None, op=None, by=series, q=(50, 90, 99)).reset_index()
    totals = totals_from_latency(trace.latency)
    seen = max_seen(file_totals_from_files(trace.files)[0])
    assert len(p) == len(totals)
    for r in p.itertuples():
        key = tuple(None if pd.isna(v) else v for v in (r.layer, r.op, r.target, r.device,
                                                       r.attribution))
        (counts,) = [h[0] for k, h in totals.items() if (k.pid, *k[1:]) == (r.pid, *key)]
        top = (seen.known({(r.pid, r.op): int(counts.sum())})
               if (r.layer, r.target) == ("syscall", "file") else None)
        for q, got in ((50, r.p50_ns), (90, r.p90_ns), (99, r.p99_ns)):
            assert got == pytest.approx(percentile_ns([int(c) for c in counts], q, top),
                                        rel=1e-12)


def test_file_totals_a_segment_at_a_time_are_the_whole_tables(hand: Path) -> None:
    """The live run's end adds the files up a segment at a time: the same totals, in the same
    order, and the same names as the whole table gives (here a row a segment)."""
    files = load(hand).files
    assert len(files) > 2
    whole, names = file_totals_from_files(files)
    parts, parts_names = file_totals_from_segments(files.iloc[[i]] for i in range(len(files)))
    assert list(parts) == list(whole)
    for key, t in whole.items():
        got = parts[key]
        assert (got.by_op, got.latency_sum_ns, got.pages_missed, got.pages_dirtied) == (
            t.by_op, t.latency_sum_ns, t.pages_missed, t.pages_dirtied)
    assert parts_names.by_id == names.by_id


def test_percentiles_error_is_within_a_factor_of_two(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    samples = np.exp(rng.normal(np.log(200_000), 1.5, 20_000)).astype(np.int64) + 1
    slots = np.floor(np.log2(samples)).astype(int)
    rows = [lat(T0, 1, "main", "syscall", "read", 1 << int(s), 1 << (int(s) + 1), int(n),
                target="file") for s, n in zip(*np.unique(slots, return_counts=True), strict=True)]
    with TraceWriter(tmp_path, {}) as w:
        w.add("latency", rows)
    qs = (1, 10, 50, 90, 99, 99.9)
    p = load(tmp_path).percentiles(by=None, q=qs).iloc[0]
    for q in qs:
        exact = float(np.percentile(samples, q))
        assert 0.5 < p[f"p{q:g}_ns"] / exact < 2.0, q


def test_percentiles_bad_arguments(hand: Path) -> None:
    trace = load(hand)
    with pytest.raises(ValueError, match="cannot group by 'rol'.*columns: ts, pid"):
        trace.percentiles(by="rol")
    with pytest.raises(ValueError, match="unknown layer 'syscal'; layers: block, "):
        trace.percentiles(layer="syscal")
    with pytest.raises(ValueError, match="unknown op 'reads'"):
        trace.percentiles(op="reads")
    for q in (0, 101, -5, float("nan")):
        with pytest.raises(ValueError, match="out of range"):
            trace.percentiles(q=q)


def test_percentiles_of_an_empty_trace(tmp_path: Path) -> None:
    with TraceWriter(tmp_path, {}):
        pass
    p = load(tmp_path).percentiles(by=["role", "layer"])
    assert p.empty and p.index.names == ["role", "layer"]


# -- findings --------------------------------------------------------------------------------


def test_findings_are_the_final_verdicts_most_severe_first(hand: Path) -> None:
    trace = load(hand)
    f = trace.findings
    assert f["kind"].astype(str).tolist() == ["dataloader_io_bound", "cold_cache",
                                             "checkpoint_stall"]
    assert f["severity"].tolist() == [40, 30, 25]
    assert (f["ts"] == pd.Timestamp(T0 + 2 * S, unit="ns", tz="UTC")).all()
    assert (f["start"] == pd.Timestamp(T0, unit="ns", tz="UTC")).all()
    assert f["evidence"][0] == {"loop_shares_pct": {"data_wait_io": 40.0},
                                "p99_read_ns": 130416.64}
    assert f["evidence"][2] == {"bytes_written": 4194304, "files": ["/data/ckpt.pt"]}
    assert f["evidence"][1] == {"text": "not json {"}  # kept, not lost
    assert f["advice"][0] == ADVICE_IO
    assert pd.isna(f["pid"][1]) and f["pid"][0] == MAIN
    assert list(f.columns) == list(trace["findings"].columns)
    assert len(trace["findings"]) == len(FINDINGS)  # the raw table: every evaluation


def test_findings_of_a_trace_without_any(tmp_path: Path) -> None:
    with TraceWriter(tmp_path, {}):
        pass
    f = load(tmp_path).findings
    assert f.empty and "evidence" in f.columns and "advice" in f.columns


# -- summary, repr, top files ------------------------------------------------------------------


def _iotrace_report(directory: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*IOTRACE, "report", str(directory), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False)


def test_summary_is_the_report_text(hand: Path) -> None:
    text = load(hand).summary()
    done = _iotrace_report(hand)
    assert done.returncode == 0, done.stderr
    assert text + "\n" == done.stdout
    assert text.startswith(f"Trace {hand}: 3 processes")
    assert SHARD in text
    # the histograms: only when asked, the report's and the summary's alike
    assert "pid 101 pt_data_worker (dataloader_worker)" not in text
    assert f"Latency histograms per process and layer: iotrace report {hand} --histograms" in text
    full = load(hand).summary(histograms=True)
    done = _iotrace_report(hand, "--histograms")
    assert done.returncode == 0, done.stderr
    assert full + "\n" == done.stdout
    assert "pid 101 pt_data_worker (dataloader_worker)" in full
    assert "--histograms" not in full
    # the first screen is the same text, the histograms come after it
    first = text[:text.index("\nLatency histograms per process and layer: iotrace report")]
    assert full.startswith(first + "\nLatency per process and layer:")


def test_reading_a_trace_imports_neither_kernel_nor_live(hand: Path) -> None:
    """The summary, the report's text and the notebook view of a saved trace load nothing of
    the tracing side: not tracer.kernel (libbpf and its libc through ctypes), not tracer.live."""
    script = ("import sys, tracer\n"
              "from tracer.report import summary_text\n"
              f"t = tracer.load({str(hand)!r})\n"
              "t.summary(); summary_text(t); t._repr_html_()\n"
              "print([n for n, m in sys.modules.items() if n.startswith(('tracer.kernel', "
              "'tracer.live')) or n.startswith('tracer') and hasattr(m, 'ctypes')])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _files_of(directory: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(directory)): (p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_reading_a_trace_writes_nothing_to_it(hand: Path) -> None:
    before = _files_of(hand)
    trace = load(hand)
    trace.summary()
    trace._repr_html_()
    trace.percentiles(), trace.findings, trace.top_files()
    assert _files_of(hand) == before  # (`iotrace report` rewrites DIR/gpu_idle; reading does not)


def test_summary_of_a_trace_with_no_usable_segment_raises_trace_error(hand: Path) -> None:
    trace = load(hand)
    for seg in (hand / "latency").glob("part-*.parquet"):
        seg.write_bytes(b"garbage")
    with pytest.raises(TraceError, match="table 'latency'.*nothing left to load"):
        trace.summary()


def test_top_files(hand: Path) -> None:
    top = load(hand).top_files()
    assert top["path"].tolist() == [CKPT, SHARD, "/data/labels.csv"]
    ckpt, shard = top.iloc[0], top.iloc[1]
    assert (ckpt["time_ns"], ckpt["writes"], ckpt["write_bytes"], ckpt["reads"]) == (
        20_300_000, 4, 4 << 20, 0)
    assert pd.isna(ckpt["cache_hit_pct"])
    assert (shard["time_ns"], shard["reads"], shard["read_bytes"], shard["pids"]) == (
        1_100_000, 10, 10 << 20, 2)
    assert shard["roles"] == "dataloader_worker"
    page = os.sysconf("SC_PAGE_SIZE")
    assert shard["cache_hit_pct"] == pytest.approx(100 * (1 - 256 * page / (10 << 20)))
    assert len(load(hand).top_files(1)) == 1


def test_device_summary_says_who_else_read_the_disk(tmp_path: Path) -> None:
    """device_summary's others_read_pct: the share of a disk's read bytes from processes
    iotrace did not trace (device_users rows), NaN for a disk without such rows."""
    devices = [row("devices", ts=T0 + S, device=d, r_s=10.0, util_pct=u)
               for d, u in (("vda", 50.0), ("vdb", 10.0))]
    users = [row("device_users", ts=T0 + S, device="vda", op="read", who=who, bytes=n,
                 requests=1)
             for who, n in (("traced", 1 << 20), ("kernel_thread", 2 << 20), ("other", 1 << 20))]
    users.append(row("device_users", ts=T0 + S, device="vda", op="write", who="other",
                     bytes=9 << 20, requests=1))  # writes are not reads
    with TraceWriter(tmp_path, META) as w:
        w.add("devices", devices)
        w.add("device_users", users)
    trace = load(tmp_path)
    summary = trace.device_summary()
    assert summary.loc["vda", "others_read_pct"] == 75.0
    assert pd.isna(summary.loc["vdb", "others_read_pct"])
    screen = device_lines(sums.device_summary(trace.arrow("devices"), trace.arrow("device_users")))
    assert screen[2].split()[-1] == "others" and screen[3].split()[-2:] == ["75", "%"]
    assert screen[4].split()[-1] == "-"


def test_repr_html_shows_findings_latency_and_files(hand: Path) -> None:
    page = load(hand)._repr_html_()
    assert "The loop waited for batches 40 % &lt;of&gt; the time &amp; more." in page
    assert "Add DataLoader workers &amp; use a faster disk &lt;fast&gt;" in page
    assert "<of>" not in page and "<fast>" not in page  # escaped
    assert "Checkpoints took 25 % of the loop." in page
    assert "early window" not in page and "window only" not in page
    assert "PID 100" in page and "2.5 s" in page
    assert "1 main" in page and "2 dataloader_worker" in page
    assert SHARD in page and CKPT in page
    assert "syscall read (file)" in page and "block queue read" in page
    assert "95 us" in page  # the workers' p50 (65536 * 1.45 ns: the 5th of 10)


def test_repr_html_of_a_damaged_trace_loads_the_rest(hand: Path) -> None:
    trace = load(hand)
    (hand / "latency" / "part-00001.parquet").write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="skipped 1 unusable segment"):
        page = trace._repr_html_()
    assert "<table" in page
    assert [p.name for p, _ in trace.damaged["latency"]] == ["part-00001.parquet"]


# -- HTML report -----------------------------------------------------------------------------

_EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:|//)|@import|url\(\s*["']?https?:""",
                       re.IGNORECASE)


def test_write_html_is_one_self_contained_page(hand: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = write_html(load(hand), tmp_path / "report.html")
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    for section in ("Training loop, file reads and GPU over time", "Latency heat maps",
                    "Top files by time spent", "Findings"):
        assert f"<h2>{section}</h2>" in page
    assert page.count("<svg") == 3  # timeline, heat maps, top files
    assert "data:image/png;base64," in page  # the rasterised heat maps inside their SVG
    assert "no GPU samples in this trace" not in page  # the hand-built trace has some
    assert "Add DataLoader workers &amp; use a faster disk &lt;fast&gt;" in page
    assert "&quot;bytes_written&quot;: 4194304" in page  # evidence
    assert not _EXTERNAL.search(page), _EXTERNAL.search(page)
    assert "<script" not in page
    assert not list(tmp_path.glob(".*.tmp"))


def test_write_html_of_an_empty_trace(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    with TraceWriter(tmp_path, {}):
        pass
    page = render_html(load(tmp_path))
    assert "No latency rows in this trace." in page and "No findings were recorded." in page
    assert "No training-loop, file-read or GPU rows in this trace." in page
    assert "<svg" not in page


def _chromium() -> str | None:
    for name in ("chromium-headless-shell", "chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.mark.skipif(_chromium() is None,
                    reason="no headless Chromium (apt-get install chromium-headless-shell)")
def test_html_renders_in_headless_chromium(hand: Path, tmp_path: Path) -> None:
    image = pytest.importorskip("matplotlib.image")
    page = write_html(load(hand), tmp_path / "report.html")
    shot = tmp_path / "shot.png"
    cmd = [_chromium(), "--headless", "--disable-gpu", "--no-first-run",
           f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,3000",
           f"--screenshot={shot}", page.as_uri()]
    if os.geteuid() == 0:
        cmd.insert(1, "--no-sandbox")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert shot.exists(), done.stderr[-2000:]
    pixels = image.imread(shot)[..., :3]
    assert pixels.shape[0] >= 3000 and pixels.shape[1] >= 1280
    ink = (pixels < 0.9).any(axis=2)  # anything not (near) white
    assert ink.mean() > 0.03  # text, plots, heat maps: not a blank page
    colour = (pixels.max(axis=2) - pixels.min(axis=2)) > 0.25
    assert colour.sum() > 20_000  # the plots drew in colour (heat maps, stacked states)


# -- JSON ------------------------------------------------------------------------------------


def test_summary_json(hand: Path) -> None:
    s = summary_json(load(hand))
    text = json.dumps(s, allow_nan=False)  # strict JSON: no NaN, no numpy types
    assert json.loads(text) == s
    assert set(s) == {"schema_version", "tool_version", "directory", "host", "kernel", "targets",
                      "start", "stop", "duration_s", "stop_reason", "events_lost", "self_cost",
                      "roles",
                      "processes", "latency", "pagecache", "loop", "top_files", "findings"}
    assert s["schema_version"] == SCHEMA_VERSION and s["host"] == "gpu-node-1"
    assert s["targets"] == {"pids": [MAIN], "command": []}
    assert s["duration_s"] == 2.5 and s["stop_reason"] == "SIGINT"
    assert s["start"] == "2023-11-14T22:13:20+00:00"
    assert s["roles"] == {"dataloader_worker": 2, "main": 1}
    assert [p["pid"] for p in s["processes"]] == [MAIN, W1, W2]
    by = {(e["pid"], e["what"]): e for e in s["latency"]}
    assert set(by) == {
        (MAIN, "syscall read (file)"), (MAIN, "syscall read (pipe)"),
        (MAIN, "syscall write (file)"), (MAIN, "syscall fsync (file)"),
        (W1, "syscall read (file)"), (W2, "syscall read (file)"),
        (W1, "block read on nvme0n1 (direct)"), (W2, "block read on nvme0n1 (readahead)"),
        (W1, "block queue read on nvme0n1 (direct)")}
    main_reads = by[(MAIN, "syscall read (file)")]
    assert (main_reads["count"], main_reads["bytes"], main_reads["role"]) == (4, 1000, "main")
    assert main_reads["p50_ns"] == pytest.approx(1792.0)  # the 2nd of 2 in [1024, 2048)
    assert main_reads["device"] is None
    assert by[(W1, "block read on nvme0n1 (direct)")]["p50_ns"] == pytest.approx(49152.0)
    assert s["pagecache"] == [{"pid": W1, "pages_missed": 256}]
    (loop,) = s["loop"]
    assert loop["pid"] == MAIN and loop["seconds"] == 2.0
    assert loop["state_ns"]["checkpoint"] == 500_000_000
    assert loop["state_pct"]["data_wait_io"] == pytest.approx(40.0)
    assert [f["path"] for f in s["top_files"]] == [CKPT, SHARD, "/data/labels.csv"]
    assert s["top_files"][0]["cache_hit_pct"] is None
    assert [f["kind"] for f in s["findings"]] == ["dataloader_io_bound", "cold_cache",
                                                 "checkpoint_stall"]
    assert s["findings"][0]["evidence"]["p99_read_ns"] == 130416.64
    assert s["findings"][1]["pid"] is None
    # integers stay integers though another finding's pid is null (pandas: 100.0)
    assert type(s["findings"][0]["pid"]) is int and '"pid": 100.0' not in text
    assert type(s["findings"][0]["severity"]) is int


# -- older schema, other readers ---------------------------------------------------------------


def test_older_schema_version_is_a_clear_trace_error(hand: Path) -> None:
    meta = json.loads((hand / "meta.json").read_text())
    meta.update(schema_version=1, tool_version="0.0.1")
    (hand / "meta.json").write_text(json.dumps(meta))
    older = rf"schema version {1}, written by the older iotrace 0\.0\.1"
    with pytest.raises(TraceError, match=older):
        load(hand)
    done = _iotrace_report(hand)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and f"schema version {1}" in done.stderr


def test_duckdb_reads_the_tables_as_they_are(hand: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    want = int(pd.read_parquet(hand / "latency")["count"].sum())
    assert want == sum(r["count"] for r in LATENCY)
    got = duckdb.sql(f"select sum(count) from read_parquet('{hand}/latency/*.parquet')").fetchall()[0]
    assert got[0] == want
    rows = duckdb.sql(
        f"select role, sum(bytes) from read_parquet('{hand}/files/*.parquet') "
        "where op = 'read' group by role order by role").fetchall()
    assert rows == [("dataloader_worker", 10 << 20), ("main", 1000)]
    kinds = duckdb.sql(f"describe select ts, role from read_parquet('{hand}/latency/*.parquet')")
    ts_type, role_type = (r[1] for r in kinds.fetchall())
    assert ts_type.startswith(("TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ")) and role_type == "VARCHAR"
    if ts_type == "TIMESTAMPTZ_NS":  # DuckDB 2 keeps the nanoseconds
        first = duckdb.sql(f"select epoch_ns(min(ts)) from read_parquet('{hand}/latency/*.parquet')")
        assert first.fetchall()[0][0] == T0 + S


def test_pyarrow_dataset_reads_the_tables_as_they_are(hand: Path) -> None:
    (hand / "latency" / ".part-00002.parquet.tmp").write_bytes(b"half a segment")  # ignored
    ds = pads.dataset(hand / "latency", format="parquet")
    assert len(ds.files) == 2
    table = ds.to_table()
    assert table.num_rows == len(LATENCY)
    assert table.column("count").to_pandas().sum() == sum(r["count"] for r in LATENCY)
    reads = ds.to_table(filter=pads.field("op") == "read", columns=["bytes"])
    assert reads.num_rows == sum(r["op"] == "read" for r in LATENCY)


# -- tracer.trace -----------------------------------------------------------------------------


def test_trace_without_privileges_fails_before_starting(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    monkeypatch.setattr(attach, "_privilege_problem", lambda: "running as uid 1000 without "
                        "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN): run iotrace as root")

    def no_popen(*args, **kwargs):
        raise AssertionError("started iotrace without privileges")

    monkeypatch.setattr(attach.subprocess, "Popen", no_popen)
    with pytest.raises(PermissionError, match="tracing needs root: running as uid 1000"), \
            tracer.trace(output=tmp_path / "t"):
        pass
    assert not (tmp_path / "t").exists()


@needs_root  # the privilege check comes first without root
@pytest.mark.kernel
def test_trace_of_a_missing_pid(tmp_path: Path) -> None:
    with pytest.raises(ProcessLookupError, match="no process with PID 999999999"), \
            tracer.trace(pid=999_999_999, output=tmp_path / "t"):
        pass


def _read_all(path: Path, chunk: int = 65536) -> int:
    n = 0
    with open(path, "rb", buffering=0) as f:
        while block := f.read(chunk):
            n += len(block)
    return n


@needs_root
@pytest.mark.kernel
def test_trace_a_block_of_this_process(tmp_path: Path) -> None:
    data = (tmp_path / "known.bin").resolve()
    size = 3 * (1 << 20) + 12345
    data.write_bytes(os.urandom(size))
    out = tmp_path / "trace"
    with tracer.trace(output=out, interval=0.5) as t:
        assert t.pid == os.getpid() and t.trace is None
        assert _read_all(data) == size
        assert _read_all(data, chunk=4096) == size
    assert isinstance(t.trace, Trace) and t.returncode == 0
    assert t.trace.directory == out and t.trace.meta["targets"]["pids"] == [os.getpid()]
    files = t.trace.files
    mine = files[(files["path"].astype(str) == str(data)) & (files["op"].astype(str) == "read")]
    assert set(mine["pid"]) == {os.getpid()}
    assert mine["bytes"].sum() == 2 * size
    # 65536-byte reads: ceil(size / 65536) with data and one at EOF; 4096-byte ones likewise.
    assert mine["ops"].sum() == (-(-size // 65536) + 1) + (-(-size // 4096) + 1)
    reads = t.trace.percentiles(by="pid", target="file")
    assert reads.loc[os.getpid(), "count"] >= mine["ops"].sum()
    assert "Traced" in t.summary_text and str(out) in t.summary_text


@needs_root
@pytest.mark.kernel
def test_trace_stops_and_loads_when_the_block_raises(tmp_path: Path) -> None:
    data = tmp_path / "known.bin"
    data.write_bytes(b"x" * 10000)
    with pytest.raises(KeyError, match="boom"), tracer.trace(output=tmp_path / "t") as t:
        _read_all(data.resolve())
        raise KeyError("boom")
    assert t.returncode == 0 and t.process.poll() == 0
    files = t.trace.files
    assert files[files["path"].astype(str) == str(data.resolve())]["bytes"].sum() == 10000


@needs_root
@pytest.mark.kernel
def test_trace_reports_iotrace_errors(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "x").write_text("not empty")
    with pytest.raises(tracer.TracingError, match="output directory .* is not empty") as info, \
            tracer.trace(output=tmp_path / "t"):
        pass
    assert info.value.exit_code == 2


# -- a real trace ----------------------------------------------------------------------------

_WORKLOAD = """
import os, sys
for _ in range(3):
    with open(sys.argv[1], "rb", buffering=0) as f:
        while f.read(1 << 16):
            pass
"""


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("real")
    data = base / "data.bin"
    data.write_bytes(os.urandom(4 << 20))
    out = base / "trace"
    done = subprocess.run([*IOTRACE, "-o", str(out), "--", sys.executable, "-c", _WORKLOAD,
                           str(data)], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    return out


@needs_root
@pytest.mark.kernel
def test_real_trace_summary_html_json_and_duckdb(real: Path, tmp_path: Path) -> None:
    trace = load(real)
    done = _iotrace_report(real)
    assert done.returncode == 0, done.stderr
    assert trace.summary() + "\n" == done.stdout
    data = str((real.parent / "data.bin").resolve())
    assert data in trace.summary()
    top = trace.top_files(None).set_index("path")
    assert top.loc[data, "read_bytes"] == 3 * (4 << 20)
    s = summary_json(trace)
    json.dumps(s, allow_nan=False)
    (main_reads,) = [e for e in s["latency"]
                     if e["role"] == "main" and e["what"] == "syscall read (file)"]
    assert main_reads["bytes"] >= 3 * (4 << 20)
    assert main_reads["p50_ns"] <= main_reads["p99_ns"]
    p = trace.percentiles(target="file", q=(50, 99))
    assert p.loc["main", "p50_ns"] == pytest.approx(main_reads["p50_ns"])
    if pytest.importorskip("matplotlib"):
        page = write_html(trace, tmp_path / "r.html").read_text()
        assert page.count("<svg") == 3 and data in page
    duckdb = pytest.importorskip("duckdb")
    got = duckdb.sql(f"select sum(count) from read_parquet('{real}/latency/*.parquet')").fetchall()[0]
    assert got[0] == int(trace.latency["count"].sum())
    assert pads.dataset(real / "latency").count_rows() == len(trace.latency)


def test_report_first_screen_is_what_a_user_came_for(hand: Path) -> None:
    """Before any histogram: what was traced and how long, the verdicts (none here), the
    loop's split (the `loop` rows: 0.8 + 0.2 s data wait of 2 s, 0.5 s checkpoint), the top
    files and the disks."""
    lines = load(hand).summary().splitlines()
    head = lines[:30]
    assert head[1] == "Traced: PID 100 (2 dataloader_worker, 1 main)."
    assert head[2] == "Duration: 2.5 s, from 2023-11-14 22:13:20 UTC, on gpu-node-1 6.18.0."
    # its `loop` rows are written by hand, without the `threads` rows a replay judges from
    assert head[4] == ("Findings: none, nothing traced long enough to judge: less than 1 s of a "
                       "training loop after its start-up.")
    assert "  pid 100 (2.0 s): data_wait_io 40 %, compute 35 %, checkpoint 25 %, the rest 0 %" \
        in head
    assert "Top files by time spent in syscalls (of 4):" in head
    assert "Devices: no disk I/O during the trace." in head
    assert "Latency per process and layer:" not in lines  # iotrace report DIR --histograms
    lines = load(hand).summary(histograms=True).splitlines()
    histograms = lines.index("Latency per process and layer:")
    assert histograms > lines.index("Devices: no disk I/O during the trace.")
    assert lines[histograms + 2] == "pid 100 python (main)"


def test_timeline_shows_the_start_up_and_a_gpu_panel_only_with_gpu_data(hand: Path) -> None:
    """The start-up's intervals get their own colour (they were classified as compute); a
    trace without GPU samples has two panels, not an empty GPU one."""
    pytest.importorskip("matplotlib")
    from tracer.render.html import STARTUP_COLOUR, timeline_svg

    panels = re.compile(r'<g id="axes_\d+"')
    trace = load(hand)
    plain = timeline_svg(trace)
    assert len(panels.findall(plain)) == 3 and STARTUP_COLOUR not in plain
    assert STARTUP_COLOUR in timeline_svg(trace, {MAIN: T0 + S})  # its first interval
    shutil.rmtree(hand / "gpu")
    shutil.rmtree(hand / "gpu_idle")
    assert len(panels.findall(timeline_svg(load(hand)))) == 2


def test_repr_html_shows_the_loop_split(hand: Path) -> None:
    page = load(hand)._repr_html_()
    assert "<h4>Training loop time by state</h4>" in page
    # pid, 2.0 s of training, no start-up, then the states of the `loop` rows
    cells = ["100", "2.0 s", "0.0 s", "40 %", "0 %", "0 %", "0 %", "0 %", "25 %", "0 %", "35 %", "0 %"]
    assert "".join(f'<td style="text-align:{"left" if i == 0 else "right"}">{c}</td>'
                   for i, c in enumerate(cells)) in page
