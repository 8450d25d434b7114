"""The trace directory: schema, Parquet segment writer and `tracer.load` (no root needed)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tracer
from tracer.api import Trace, TraceError, load
from tracer.sinks import parquet as parquet_sink
from tracer.sinks.parquet import TraceWriter
from tracer.tracedir.schema import SCHEMA_VERSION, SCHEMA_VERSION_KEY, TABLES, table_from_rows
from tracer.tracedir.segments import COVERS_KEY

REPO = Path(__file__).resolve().parent.parent
T0 = 1_700_000_000_123_456_789  # a wall-clock time, ns since the epoch

LATENCY_ROWS = [
    {
        "ts": T0,
        "pid": 100,
        "comm": "python",
        "role": "main",
        "layer": "syscall",
        "op": "read",
        "target": "file",
        "bucket_lo_ns": 1024,
        "bucket_hi_ns": 2048,
        "count": 7,
        "bytes": 28672,
    },
    {
        "ts": T0,
        "pid": 101,
        "comm": "pt_data_worker",
        "role": "dataloader_worker",
        "layer": "block",
        "op": "read",
        "device": "nvme0n1",
        "attribution": "readahead",
        "bucket_lo_ns": 65536,
        "bucket_hi_ns": 131072,
        "count": 2,
        "bytes": 262144,
    },
    {
        "ts": T0 + 1_000_000_000,
        "pid": 100,
        "comm": "python",
        "role": "main",
        "layer": "syscall",
        "op": "fsync",
        "target": "file",
        "bucket_lo_ns": 1 << 20,
        "bucket_hi_ns": 1 << 21,
        "count": 1,
        "bytes": 0,
    },
]


def _parts(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _all_files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


EVERY_TABLE = sorted(f"{t}/part-00000.parquet" for t in TABLES)
"""What a trace holds besides meta.json before any row came: an empty segment per table."""


def _rows(folder: Path) -> int:
    return pq.read_table(folder).num_rows


# -- schema ------------------------------------------------------------------------------------


def test_schema_follows_the_rules() -> None:
    design_tables = {
        "processes",
        "latency",
        "files",
        "events",
        "threads",
        "devices",
        "system",
        "gpu",
        "gpu_idle",
        "findings",
    }
    assert design_tables <= set(TABLES)
    for name, schema in TABLES.items():
        assert schema.metadata[SCHEMA_VERSION_KEY] == str(SCHEMA_VERSION).encode(), name
        for field in schema:
            if field.name.endswith("_ns"):
                assert field.type == pa.int64(), (name, field.name)
            if pa.types.is_timestamp(field.type):
                assert field.type == pa.timestamp("ns", tz="UTC"), (name, field.name)
        for col in ("comm", "role", "path", "op", "device", "layer"):
            if col in schema.names:
                assert schema.field(col).type == pa.dictionary(pa.int32(), pa.string()), name


def test_latency_and_processes_columns() -> None:
    d = pa.dictionary(pa.int32(), pa.string())
    ts = pa.timestamp("ns", tz="UTC")
    assert [(f.name, f.type, f.nullable) for f in TABLES["processes"]] == [
        ("pid", pa.int32(), False),
        ("ppid", pa.int32(), False),
        ("comm", d, False),
        ("role", d, False),
        ("cmdline", pa.string(), False),
        ("first_seen", ts, False),
        ("exit", ts, True),
        ("exit_code", pa.int32(), True),
        ("exit_signal", pa.int32(), True),
        ("worker_generation", pa.int32(), True),
        ("worker_index", pa.int32(), True),
        ("ns_pid", pa.int32(), True),
        ("peers", pa.string(), True),
        ("rank", pa.int32(), True),
        ("local_rank", pa.int32(), True),
        ("world_size", pa.int32(), True),
        ("cuda_device", d, True),
    ]
    assert [(f.name, f.type, f.nullable) for f in TABLES["latency"]] == [
        ("ts", ts, False),
        ("pid", pa.int32(), False),
        ("comm", d, False),
        ("role", d, False),
        ("layer", d, False),
        ("op", d, False),
        ("target", d, True),
        ("device", d, True),
        ("attribution", d, True),
        ("bucket_lo_ns", pa.int64(), False),
        ("bucket_hi_ns", pa.int64(), False),
        ("count", pa.int64(), False),
        ("bytes", pa.int64(), False),
    ]


def test_table_from_rows_has_exactly_the_schema() -> None:
    table = table_from_rows("latency", LATENCY_ROWS)
    assert table.schema.equals(TABLES["latency"], check_metadata=True)
    assert table.num_rows == 3
    assert table.column("target").to_pylist() == ["file", None, "file"]
    assert table.column("ts").cast(pa.int64()).to_pylist()[0] == T0
    empty = table_from_rows("processes", [])
    assert empty.num_rows == 0 and empty.schema.equals(TABLES["processes"])


def test_strict_schema_rejects_unknown_column() -> None:
    row = dict(LATENCY_ROWS[0], latncy_ns=5)
    with pytest.raises(ValueError, match=r"unknown column\(s\) latncy_ns"):
        table_from_rows("latency", [row])


def test_strict_schema_rejects_bad_rows() -> None:
    with pytest.raises(ValueError, match="unknown table 'latencies'"):
        table_from_rows("latencies", [])
    missing_pid = {k: v for k, v in LATENCY_ROWS[0].items() if k != "pid"}
    with pytest.raises(ValueError, match="column 'pid' is required"):
        table_from_rows("latency", [missing_pid])
    with pytest.raises(ValueError, match="column 'count'"):
        table_from_rows("latency", [dict(LATENCY_ROWS[0], count="seven")])
    with pytest.raises(ValueError, match="column 'comm'"):
        table_from_rows("latency", [dict(LATENCY_ROWS[0], comm=42)])


# -- writer ------------------------------------------------------------------------------------


def test_round_trip_exact_values_and_dtypes(tmp_path: Path) -> None:
    with TraceWriter(tmp_path, {"host": "h"}) as w:
        w.add("latency", LATENCY_ROWS)
    df = pd.read_parquet(str(tmp_path) + "/latency")
    assert len(df) == 3
    assert str(df["ts"].dtype) == "datetime64[ns, UTC]"
    assert df["ts"].iloc[0] == pd.Timestamp(T0, unit="ns", tz="UTC")
    assert df["ts"].iloc[0].value == T0  # nanoseconds survive
    for col in ("comm", "role", "layer", "op", "target", "device", "attribution"):
        assert isinstance(df[col].dtype, pd.CategoricalDtype), col
    for col in ("bucket_lo_ns", "bucket_hi_ns", "count", "bytes"):
        assert df[col].dtype == "int64", col
    assert df["pid"].dtype == "int32"
    assert df["pid"].tolist() == [100, 101, 100]
    assert df["comm"].tolist() == ["python", "pt_data_worker", "python"]
    assert df["op"].tolist() == ["read", "read", "fsync"]
    assert df["target"].isna().tolist() == [False, True, False]
    assert df["device"].tolist()[1] == "nvme0n1" and df["device"].isna().tolist()[0]
    assert df["attribution"].tolist()[1] == "readahead"
    assert df["bucket_lo_ns"].tolist() == [1024, 65536, 1 << 20]
    assert df["count"].sum() == 10
    assert df["bytes"].tolist() == [28672, 262144, 0]


def test_processes_round_trip_with_nulls(tmp_path: Path) -> None:
    rows = [
        {
            "pid": 100,
            "ppid": 1,
            "comm": "python",
            "role": "main",
            "cmdline": "python train.py",
            "first_seen": T0,
        },
        {
            "pid": 101,
            "ppid": 100,
            "comm": "pt_data_worker",
            "role": "dataloader_worker",
            "cmdline": "python train.py",
            "first_seen": T0 + 5,
            "exit": T0 + 10,
            "exit_code": 0,
        },
    ]
    with TraceWriter(tmp_path, {}) as w:
        w.add("processes", rows)
    df = pd.read_parquet(tmp_path / "processes")
    assert str(df["first_seen"].dtype) == "datetime64[ns, UTC]"
    assert str(df["exit"].dtype) == "datetime64[ns, UTC]"
    assert pd.isna(df["exit"].iloc[0]) and df["exit"].iloc[1].value == T0 + 10
    assert math.isnan(df["exit_code"].iloc[0]) and df["exit_code"].iloc[1] == 0
    assert df["cmdline"].tolist() == ["python train.py"] * 2
    assert isinstance(df["role"].dtype, pd.CategoricalDtype)


def test_processes_rows_as_they_change_and_compacted(tmp_path: Path) -> None:
    """A process gets a row when first seen and again when it changes (readers take the last
    per pid, which is what a killed trace holds); compacting leaves one row per process."""
    def proc(pid: int, comm: str, first: int, exit_ns: int | None = None) -> dict:
        return {"pid": pid, "ppid": 1, "comm": comm, "role": "main", "cmdline": comm,
                "first_seen": first, "exit": exit_ns}

    w = TraceWriter(tmp_path, {})
    w.add("processes", [proc(100, "python", T0), proc(101, "sh", T0 + 1)])
    w.flush()
    w.add("processes", [proc(100, "train", T0)])  # renamed itself
    w.flush()
    w.add("processes", [proc(100, "train", T0, T0 + 9), proc(102, "sleep", T0 + 2)])
    w.flush()
    assert len(_parts(tmp_path / "processes")) == 3
    assert len(pd.read_parquet(tmp_path / "processes")) == 5
    trace = load(tmp_path)
    assert tracer.api.role_counts(trace) == {"main": 3}
    last = trace.processes.set_index("pid")  # tracer.load: the last row of each process
    assert sorted(last.index) == [100, 101, 102]
    assert last.loc[100, "comm"] == "train" and last.loc[100, "exit"].value == T0 + 9
    w.compact("processes", ("pid", "first_seen"))
    w.close()
    assert _parts(tmp_path / "processes") == ["part-00003.parquet"]
    df = pd.read_parquet(tmp_path / "processes")
    assert df.pid.tolist() == [101, 100, 102]
    assert df.comm.astype(str).tolist() == ["sh", "train", "sleep"]
    assert pd.isna(df.exit.iloc[0]) and df.exit.iloc[1].value == T0 + 9


def test_segments_numbered_per_table_and_every_table_written(tmp_path: Path) -> None:
    """Every table has a segment from the start, an empty one with its columns until rows
    come, which the first rows replace: a folder never lacks a table or holds an extra file."""
    w = TraceWriter(tmp_path, {})
    w.flush()  # nothing buffered: nothing more written
    assert _all_files(tmp_path) == sorted(["meta.json", *EVERY_TABLE])
    for table, schema in TABLES.items():
        assert pq.read_table(tmp_path / table).schema.equals(schema, check_metadata=True)
        assert _rows(tmp_path / table) == 0
    for i in range(3):
        w.add("latency", [dict(LATENCY_ROWS[0], pid=i)])
        if i == 1:
            w.add(
                "processes",
                [
                    {
                        "pid": 1,
                        "ppid": 0,
                        "comm": "init",
                        "role": "main",
                        "cmdline": "",
                        "first_seen": T0,
                    }
                ],
            )
        w.flush()
    w.add("latency", [])  # no rows: no segment
    w.close()
    assert _parts(tmp_path / "latency") == [
        "part-00000.parquet",
        "part-00001.parquet",
        "part-00002.parquet",
    ]
    assert _parts(tmp_path / "processes") == ["part-00000.parquet"]
    assert _parts(tmp_path / "files") == ["part-00000.parquet"] and _rows(tmp_path / "files") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["meta.json", *TABLES])
    assert pd.read_parquet(tmp_path / "latency")["pid"].sort_values().tolist() == [0, 1, 2]
    for part in (tmp_path / "latency").iterdir():
        assert pq.ParquetFile(part).metadata.num_row_groups == 1
        # rolled: the cheaper codec (merges write zstd)
        assert pq.ParquetFile(part).metadata.row_group(0).column(0).compression == "SNAPPY"


def test_one_segment_per_flush_holds_every_add(tmp_path: Path) -> None:
    with TraceWriter(tmp_path, {}) as w:
        w.add("latency", LATENCY_ROWS[:1])
        w.add("latency", [dict(LATENCY_ROWS[1], comm="other")])
        assert w.buffered_rows() == {"latency": 2}
        w.flush()
        assert w.buffered_rows() == {}
    assert _parts(tmp_path / "latency") == ["part-00000.parquet"]
    df = pd.read_parquet(tmp_path / "latency")
    assert df["comm"].tolist() == ["python", "other"]


def test_dictionaries_differ_between_segments(tmp_path: Path) -> None:
    with TraceWriter(tmp_path, {}) as w:
        w.add("latency", [dict(LATENCY_ROWS[0], comm="a")])
        w.flush()
        w.add("latency", [dict(LATENCY_ROWS[0], comm="b")])
    df = pd.read_parquet(tmp_path / "latency")
    assert isinstance(df["comm"].dtype, pd.CategoricalDtype)
    assert sorted(df["comm"].tolist()) == ["a", "b"]


def test_existing_segments_are_never_overwritten(tmp_path: Path) -> None:
    with TraceWriter(tmp_path, {}) as w:
        w.add("latency", LATENCY_ROWS[:1])
    with TraceWriter(tmp_path, {}) as w:
        w.add("latency", LATENCY_ROWS[1:2])
    assert _parts(tmp_path / "latency") == ["part-00000.parquet", "part-00001.parquet"]
    assert len(pd.read_parquet(tmp_path / "latency")) == 2


MERGED_HERE_OR_APART = pytest.mark.parametrize("apart", [False, True], ids=["here", "child"])
"""Merges made in the call that rolls, or in a child process while writing goes on (the
tracer's way): the same segments either way."""


@MERGED_HERE_OR_APART
def test_segments_merged_every_merge_segments(tmp_path: Path, monkeypatch, apart) -> None:
    """A long trace keeps few files: every MERGE_SEGMENTS rolled segments of a table become
    one, under the last one's name; every row is read back once, in order, by iotrace and by
    pandas."""
    monkeypatch.setattr(parquet_sink, "MERGE_SEGMENTS", 4)
    monkeypatch.setattr(parquet_sink, "MERGED_ROW_GROUP_ROWS", 3)
    with TraceWriter(tmp_path, {}, merge_apart=apart) as w:
        for i in range(10):  # each segment with a dictionary of its own (comm)
            w.add("latency", [dict(LATENCY_ROWS[0], count=i, comm=f"c{i}")])
            w.flush()
    if apart:  # two merges, by children whose word came back
        assert w.merge_child.merges == 2 and w.merge_child.peak_rss_bytes > 10 << 20
    assert _parts(tmp_path / "latency") == ["part-00003.parquet", "part-00007.parquet",
                                            "part-00008.parquet", "part-00009.parquet"]
    assert load(tmp_path).latency["count"].tolist() == list(range(10))
    # a row group at a time, the same rows in the same order
    segs = list(load(tmp_path).segments("latency"))
    assert [s["count"].tolist() for s in segs] == [[0, 1, 2], [3], [4, 5, 6], [7], [8], [9]]
    back = pd.read_parquet(tmp_path / "latency")
    assert back["count"].tolist() == list(range(10))
    assert back["comm"].astype(str).tolist() == [f"c{i}" for i in range(10)]
    # the 4 parts in row groups of at least 3 rows: 3, then the last
    merged = pq.ParquetFile(tmp_path / "latency" / "part-00003.parquet")
    assert [merged.metadata.row_group(g).num_rows for g in range(merged.num_row_groups)] == [3, 1]


@MERGED_HERE_OR_APART
def test_a_merged_row_group_is_bounded_by_its_bytes_too(tmp_path: Path, monkeypatch,
                                                        apart) -> None:
    """Wide rows make a row group of MERGED_ROW_GROUP_ROWS large in memory: past
    MERGED_ROW_GROUP_BYTES a group holds fewer rows, the same rows read back in order."""
    monkeypatch.setattr(parquet_sink, "MERGE_SEGMENTS", 4)
    monkeypatch.setattr(parquet_sink, "MERGED_ROW_GROUP_BYTES", 1)  # a segment's rows each
    with TraceWriter(tmp_path, {}, merge_apart=apart) as w:
        for i in range(4):
            w.add("latency", [dict(LATENCY_ROWS[0], count=i * 2 + k) for k in range(2)])
            w.flush()
    merged = pq.ParquetFile(tmp_path / "latency" / "part-00003.parquet")
    assert [merged.metadata.row_group(g).num_rows for g in range(merged.num_row_groups)] == [
        2, 2, 2, 2]
    assert load(tmp_path).latency["count"].tolist() == list(range(8))


@MERGED_HERE_OR_APART
def test_merged_segments_merged_again_every_merge_merged(tmp_path: Path, monkeypatch,
                                                         apart) -> None:
    """A day's trace keeps a few dozen files a table: every MERGE_MERGED merged segments become
    one, a row group at a time; a tracer killed before the merged ones it holds were deleted
    leaves them behind, and they are read once."""
    monkeypatch.setattr(parquet_sink, "MERGE_SEGMENTS", 2)
    monkeypatch.setattr(parquet_sink, "MERGE_MERGED", 3)
    monkeypatch.setattr(parquet_sink, "MERGED_ROW_GROUP_ROWS", 3)
    with TraceWriter(tmp_path, {}, merge_apart=apart) as w:
        for i in range(14):
            w.add("latency", [dict(LATENCY_ROWS[0], count=i, comm=f"c{i}")])
            w.flush()
            if i == 10:  # the merged segments of 6-11 but the last, as a kill would leave them
                w.wait_for_merges()
                kept = {p.name: p.read_bytes() for p in (tmp_path / "latency").iterdir()}
    assert _parts(tmp_path / "latency") == ["part-00005.parquet", "part-00011.parquet",
                                            "part-00013.parquet"]
    assert pq.read_schema(tmp_path / "latency" / "part-00011.parquet").metadata[
        COVERS_KEY] == b"6-11"
    # groups of at least 3 rows made of the merged segments' groups of 2
    again = pq.ParquetFile(tmp_path / "latency" / "part-00005.parquet")
    assert [again.metadata.row_group(g).num_rows for g in range(again.num_row_groups)] == [4, 2]
    for name, data in kept.items():
        if name != "part-00010.parquet":
            (tmp_path / "latency" / name).write_bytes(data)
    assert _parts(tmp_path / "latency") == [
        "part-00005.parquet", "part-00007.parquet", "part-00009.parquet", "part-00011.parquet",
        "part-00013.parquet"]
    assert load(tmp_path).latency["count"].tolist() == list(range(14))
    assert [s["count"].tolist() for s in load(tmp_path).segments("latency")] == [
        [0, 1, 2, 3], [4, 5], [6, 7, 8, 9], [10, 11], [12, 13]]
    back = pd.read_parquet(tmp_path / "latency" / "part-00011.parquet")
    assert back["comm"].astype(str).tolist() == [f"c{i}" for i in range(6, 12)]
    for name in ("part-00005.parquet", "part-00013.parquet"):  # merged: zstd
        part = pq.ParquetFile(tmp_path / "latency" / name)
        assert part.metadata.row_group(0).column(0).compression == "ZSTD"


@pytest.mark.parametrize("spoil, error", [
    ("garbage", r"merging segments failed \(exit 1\): pyarrow.lib.ArrowInvalid"),
    ("folder", "part-00001.parquet' is a directory")])  # the child's OSError, passed on
def test_a_merge_that_fails_in_the_child_fails_the_writer(tmp_path: Path, monkeypatch, spoil,
                                                          error) -> None:
    """A segment the child cannot read: the writer raises OSError, as a merge made in the call
    that rolls would (the sink then stops writing, and says so); what was written stays."""
    monkeypatch.setattr(parquet_sink, "MERGE_SEGMENTS", 3)
    w = TraceWriter(tmp_path, {}, merge_apart=True)
    for i in range(2):
        w.add("latency", [dict(LATENCY_ROWS[0], count=i)])
        w.flush()
    part = tmp_path / "latency" / "part-00001.parquet"
    part.unlink()
    if spoil == "garbage":
        part.write_bytes(b"not parquet")
    else:
        part.mkdir()
    w.add("latency", [dict(LATENCY_ROWS[0], count=2)])
    w.flush()  # asks the child for the merge of 0-2
    with pytest.raises(OSError, match=error):
        w.close()
    assert w.closed
    assert _parts(tmp_path / "latency") == ["part-00000.parquet", "part-00001.parquet",
                                            "part-00002.parquet"]


def test_the_merge_child_runs_this_tracer_not_the_working_folders(tmp_path: Path,
                                                                   monkeypatch) -> None:
    """The child (root, with the tracer) imports iotrace from where the tracer did, never from
    the working folder, where anyone could have left a `tracer` package."""
    monkeypatch.setattr(parquet_sink, "MERGE_SEGMENTS", 2)
    (tmp_path / "cwd" / "tracer").mkdir(parents=True)
    (tmp_path / "cwd" / "tracer" / "__init__.py").write_text("raise SystemExit('not this one')\n")
    monkeypatch.chdir(tmp_path / "cwd")
    (tmp_path / "trace").mkdir()
    with TraceWriter(Path("../trace"), {}, merge_apart=True) as w:  # relative, as -o can be
        for i in range(2):
            w.add("latency", [dict(LATENCY_ROWS[0], count=i)])
            w.flush()
    assert w.merge_child.merges == 1
    assert _parts(tmp_path / "trace" / "latency") == ["part-00001.parquet"]


def test_parts_of_a_merged_segment_left_behind_are_read_once(tmp_path: Path,
                                                             monkeypatch) -> None:
    """A tracer killed after a merged segment was in place, before the parts it holds were
    deleted: iotrace's reader skips those parts (the merged segment names them)."""
    monkeypatch.setattr(parquet_sink, "MERGE_SEGMENTS", 3)
    with TraceWriter(tmp_path, {}) as w:
        for i in range(3):
            w.add("latency", [dict(LATENCY_ROWS[0], count=i)])
            w.flush()
            if i == 1:  # keep copies of the parts, as a kill before their deletion would
                kept = {p.name: p.read_bytes() for p in (tmp_path / "latency").iterdir()}
    for name, data in kept.items():
        (tmp_path / "latency" / name).write_bytes(data)
    assert len(_parts(tmp_path / "latency")) == 3
    assert load(tmp_path).latency["count"].tolist() == [0, 1, 2]
    assert [s["count"].tolist() for s in load(tmp_path).segments("latency")] == [[0, 1, 2]]


def test_maybe_roll_flushes_every_roll_s(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path, {}, roll_s=5.0)
    start = time.monotonic()
    w.add("latency", LATENCY_ROWS[:1])
    w.maybe_roll(start + 1.0)  # too early
    assert _rows(tmp_path / "latency") == 0
    w.maybe_roll(start + 5.5)
    assert _parts(tmp_path / "latency") == ["part-00000.parquet"]
    w.add("latency", LATENCY_ROWS[:1])
    w.maybe_roll(start + 9.0)  # 3.5 s since the last roll
    assert _parts(tmp_path / "latency") == ["part-00000.parquet"]
    w.maybe_roll(start + 10.5)
    assert _parts(tmp_path / "latency") == ["part-00000.parquet", "part-00001.parquet"]
    w.maybe_roll(start + 20.0)  # nothing buffered: nothing written
    assert len(_parts(tmp_path / "latency")) == 2
    w.close()
    with pytest.raises(ValueError, match="roll_s"):
        TraceWriter(tmp_path, {}, roll_s=0)


def test_no_temporary_files_left(tmp_path: Path) -> None:
    with TraceWriter(tmp_path, {"a": 1}) as w:
        for _ in range(3):
            w.add("latency", LATENCY_ROWS)
            w.flush()
            w.update_meta(events_lost=0)
    names = _all_files(tmp_path)
    assert not [n for n in names if Path(n).name.startswith((".", "_"))]
    assert not [n for n in names if n.endswith(".tmp")]


def test_readers_ignore_temporary_files(tmp_path: Path) -> None:
    with TraceWriter(tmp_path, {}) as w:
        w.add("latency", LATENCY_ROWS)
    # What a writer killed mid-segment or mid-meta leaves behind: garbage under a dot name.
    (tmp_path / "latency" / ".part-00001.parquet.tmp").write_bytes(b"PAR1 half a segment")
    (tmp_path / ".meta.json.tmp").write_text("{ half")
    (tmp_path / "processes" / ".part-00000.parquet.tmp").write_bytes(b"garbage")
    assert len(pd.read_parquet(tmp_path / "latency")) == 3
    trace = load(tmp_path)
    assert trace.tables == sorted(TABLES)
    assert len(trace.latency) == 3
    assert trace.processes.empty


def test_failed_write_leaves_nothing_and_keeps_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = TraceWriter(tmp_path, {})
    w.add("latency", LATENCY_ROWS)
    real_write = parquet_sink.pq.write_table

    def disk_full(table: pa.Table, where: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(parquet_sink.pq, "write_table", disk_full)
    with pytest.raises(OSError, match="No space"):
        w.flush()
    # neither a segment nor its temporary: the empty segment stays
    assert _parts(tmp_path / "latency") == ["part-00000.parquet"]
    assert _rows(tmp_path / "latency") == 0 and _parts(tmp_path / ".tmp") == []
    assert w.buffered_rows() == {"latency": 3}
    monkeypatch.setattr(parquet_sink.pq, "write_table", real_write)
    w.close()
    assert _parts(tmp_path / "latency") == ["part-00000.parquet"]
    assert len(pd.read_parquet(tmp_path / "latency")) == 3


def test_give_up_after_a_full_disk_keeps_what_was_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The error names the segment that could not be written; after give_up nothing more is
    written, the earlier segments stay, and close still records how the trace ended."""
    w = TraceWriter(tmp_path, {"stop_ns": None})
    w.add("latency", LATENCY_ROWS)
    w.flush()
    w.add("latency", LATENCY_ROWS)
    real_write = parquet_sink.pq.write_table

    def disk_full(table: pa.Table, where: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(parquet_sink.pq, "write_table", disk_full)
    with pytest.raises(OSError) as info:
        w.flush()
    assert info.value.errno == 28
    assert info.value.filename == str(tmp_path / "latency" / "part-00001.parquet")
    w.give_up()
    monkeypatch.setattr(parquet_sink.pq, "write_table", real_write)
    w.add("latency", LATENCY_ROWS)
    w.flush()
    w.close(stop_ns=5)
    assert _parts(tmp_path / "latency") == ["part-00000.parquet"]
    assert len(pd.read_parquet(tmp_path / "latency")) == 3
    assert json.loads((tmp_path / "meta.json").read_text())["stop_ns"] == 5


def test_close_twice_and_use_after_close(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path, {})
    w.add("latency", LATENCY_ROWS)
    w.close(stop="2025-01-01T00:00:00Z")
    w.close()
    w.close(stop="ignored")  # a second close does nothing
    assert w.closed
    assert json.loads((tmp_path / "meta.json").read_text())["stop"] == "2025-01-01T00:00:00Z"
    assert _parts(tmp_path / "latency") == ["part-00000.parquet"]
    with pytest.raises(ValueError, match="closed"):
        w.add("latency", LATENCY_ROWS)
    with pytest.raises(ValueError, match="closed"):
        w.flush()
    with TraceWriter(tmp_path / "latency" / "..", {}) as w2:
        w2.close()  # closed inside the block, then again by the with statement
    assert w2.closed


def test_context_manager_flushes_on_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), TraceWriter(tmp_path, {}) as w:
        w.add("latency", LATENCY_ROWS)
        raise RuntimeError("job crashed")
    assert w.closed
    assert len(pd.read_parquet(tmp_path / "latency")) == 3


def test_add_checks_rows_at_the_call_site(tmp_path: Path) -> None:
    with TraceWriter(tmp_path, {}) as w:
        with pytest.raises(ValueError, match="unknown table"):
            w.add("latencies", LATENCY_ROWS)
        with pytest.raises(ValueError, match="unknown column"):
            w.add("latency", [dict(LATENCY_ROWS[0], colour="red")])
        assert w.buffered_rows() == {}


def test_directory_must_exist(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        TraceWriter(tmp_path / "nope", {})


def test_meta_json(tmp_path: Path) -> None:
    meta = {
        "host": "gpu-node-1",
        "kernel": "6.18.0",
        "argv": ["iotrace", "--pid", "42"],
        "start": "2025-01-01T12:00:00.000000001Z",
    }
    w = TraceWriter(tmp_path, meta)
    on_disk = json.loads((tmp_path / "meta.json").read_text())
    assert on_disk == {**meta, "schema_version": SCHEMA_VERSION, "tool_version": tracer.__version__}
    assert on_disk["schema_version"] == 3 and tracer.__version__ == "0.1.0"
    w.update_meta(events_lost=0, stop=None)
    w.update_meta(events_lost=3)
    assert json.loads((tmp_path / "meta.json").read_text())["events_lost"] == 3
    with pytest.raises(ValueError, match="schema_version"):
        w.update_meta(schema_version=99)
    with pytest.raises(TypeError):
        w.update_meta(bad=object())  # not JSON: meta.json keeps its last good content
    w.close(stop="2025-01-01T12:01:00Z", events_lost=5)
    final = json.loads((tmp_path / "meta.json").read_text())
    assert final == {**on_disk, "events_lost": 5, "stop": "2025-01-01T12:01:00Z"}
    assert w.meta == final
    assert _all_files(tmp_path) == sorted(["meta.json", *EVERY_TABLE])
    with pytest.raises(ValueError, match="set by the writer"):
        TraceWriter(tmp_path, {"schema_version": 0})


_KILLED_WRITER = textwrap.dedent("""
    import sys
    from tracer.sinks.parquet import TraceWriter
    rows = [dict(ts=1_700_000_000_000_000_000 + i, pid=i % 7, comm="python", role="main",
                 layer="syscall", op="read", target="file", bucket_lo_ns=1024,
                 bucket_hi_ns=2048, count=1, bytes=4096) for i in range(20_000)]
    w = TraceWriter(sys.argv[1], {"host": "test"}, roll_s=0.001)
    n = 0
    while True:
        w.add("latency", rows)
        w.flush()
        n += 1
        print(n, flush=True)
""")


def test_sigkill_leaves_finished_segments_readable(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    try:
        finished = 0
        while finished < 4:
            line = child.stdout.readline()
            assert line, f"writer exited early with status {child.wait()}"
            finished = int(line)
        # Kill it in the middle of a later segment, with no chance to clean up.
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    parts = sorted((tmp_path / "latency").glob("part-*.parquet"))
    assert len(parts) >= finished
    assert [p.name for p in parts] == [f"part-{i:05d}.parquet" for i in range(len(parts))]
    for part in parts:  # each one complete
        assert pq.read_table(part).num_rows == 20_000
    df = pd.read_parquet(tmp_path / "latency")
    assert len(df) == 20_000 * len(parts)
    assert load(tmp_path).meta["host"] == "test"


_KILLED_MID_SEGMENT = textwrap.dedent("""
    import io, os, signal, sys
    from tracer.sinks import parquet
    real_write = parquet.pq.write_table
    def write_half_then_die(table, where, **kwargs):
        if table.num_rows == 0 or table.column("pid")[0].as_py() < 3:
            return real_write(table, where, **kwargs)
        whole = io.BytesIO()
        real_write(table, whole, **kwargs)
        where.write(whole.getvalue()[: len(whole.getvalue()) // 2])
        where.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    parquet.pq.write_table = write_half_then_die
    with parquet.TraceWriter(sys.argv[1], {}) as w:
        for pid in range(5):
            w.add("latency", [dict(ts=0, pid=pid, comm="c", role="main", layer="syscall",
                                   op="read", bucket_lo_ns=0, bucket_hi_ns=1, count=1, bytes=1)])
            w.flush()
""")


def test_sigkill_mid_segment_leaves_no_partial_segment(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_SEGMENT, str(tmp_path)], check=False, env=env
    )
    assert done.returncode == -signal.SIGKILL
    # Segments 0-2 finished; segment 3 died half-written, under its temporary name only,
    # outside the table's folder.
    assert _parts(tmp_path / "latency") == [
        "part-00000.parquet",
        "part-00001.parquet",
        "part-00002.parquet",
    ]
    assert _parts(tmp_path / ".tmp") == ["latency-part-00003.parquet.tmp"]
    assert pd.read_parquet(tmp_path / "latency")["pid"].tolist() == [0, 1, 2]
    assert load(tmp_path).latency["pid"].tolist() == [0, 1, 2]


# -- load --------------------------------------------------------------------------------------


def _trace(tmp_path: Path) -> Path:
    with TraceWriter(tmp_path, {"host": "h"}) as w:
        w.add("latency", LATENCY_ROWS)
        w.flush()
        w.add("latency", LATENCY_ROWS[:1])
    return tmp_path


def test_load_reads_tables_lazily(tmp_path: Path) -> None:
    trace = tracer.load(_trace(tmp_path))
    assert isinstance(trace, Trace)
    assert trace.meta["host"] == "h" and trace.meta["schema_version"] == SCHEMA_VERSION
    assert trace.tables == sorted(TABLES)
    assert "latency" in repr(trace)
    lat = trace.latency
    assert lat is trace["latency"]  # cached
    pd.testing.assert_frame_equal(lat, pd.read_parquet(tmp_path / "latency"))
    assert len(lat) == 4
    assert "processes" in dir(trace)


def test_load_absent_table_is_empty_with_columns(tmp_path: Path) -> None:
    trace = load(_trace(tmp_path))
    procs = trace.processes
    assert procs.empty
    assert list(procs.columns) == TABLES["processes"].names
    assert str(procs["first_seen"].dtype) == "datetime64[ns, UTC]"
    assert isinstance(procs["comm"].dtype, pd.CategoricalDtype)
    assert procs["pid"].dtype == "int32"
    assert list(trace["findings"].columns) == TABLES["findings"].names


def test_load_unknown_table(tmp_path: Path) -> None:
    trace = load(_trace(tmp_path))
    with pytest.raises(TraceError, match="no table 'latncy'.*latency"):
        trace["latncy"]
    with pytest.raises(AttributeError, match="latncy"):
        trace.latncy  # noqa: B018
    assert not hasattr(trace, "latncy")


def _rewrite_meta(directory: Path, **fields: object) -> None:
    path = directory / "meta.json"
    meta = json.loads(path.read_text())
    meta.update(fields)
    path.write_text(json.dumps(meta))


def test_load_newer_schema_version(tmp_path: Path) -> None:
    _rewrite_meta(_trace(tmp_path), schema_version=SCHEMA_VERSION + 1, tool_version="9.0.0")
    with pytest.raises(TraceError) as info:
        load(tmp_path)
    msg = str(info.value)
    assert f"schema version {SCHEMA_VERSION + 1}" in msg
    assert "iotrace 9.0.0" in msg
    assert f"reads version {SCHEMA_VERSION}" in msg
    assert "upgrade iotrace" in msg


def test_load_older_schema_version(tmp_path: Path) -> None:
    _rewrite_meta(_trace(tmp_path), schema_version=1, tool_version="0.0.1")
    older = rf"schema version {1}.*older iotrace 0\.0\.1.*read it with"
    with pytest.raises(TraceError, match=older):
        load(tmp_path)


@pytest.mark.parametrize("version", [None, "1", 1.0, True])
def test_load_invalid_schema_version(tmp_path: Path, version: object) -> None:
    _rewrite_meta(_trace(tmp_path), schema_version=version)
    with pytest.raises(TraceError, match="no valid schema_version"):
        load(tmp_path)


def test_load_missing_directory_or_meta(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="does not exist; pass the folder given to 'iotrace -o'"):
        load(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(TraceError, match="is not a directory"):
        load(tmp_path / "file")
    with pytest.raises(TraceError, match="not an iotrace trace: it has no meta.json"):
        load(tmp_path)


@pytest.mark.parametrize("content", ["{ half", "", "[1, 2]"])
def test_load_corrupt_meta(tmp_path: Path, content: str) -> None:
    (tmp_path / "meta.json").write_text(content)
    with pytest.raises(TraceError, match="meta.json' is damaged"):
        load(tmp_path)


def test_load_damaged_segment(tmp_path: Path) -> None:
    """A damaged segment is skipped with one warning line naming it; the rest loads."""
    _trace(tmp_path)
    whole = len(load(tmp_path).latency)
    seg = tmp_path / "latency" / "part-00001.parquet"
    lost = len(pd.read_parquet(seg))
    seg.write_bytes(b"not parquet at all")
    trace = load(tmp_path)
    with pytest.warns(UserWarning, match="part-00001.parquet: not a Parquet file"):
        assert len(trace.latency) == whole - lost


def test_import_tracer_is_light() -> None:
    code = (
        "import sys, tracer\n"
        "heavy = {'torch', 'pynvml', 'pandas', 'pyarrow', 'matplotlib'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
        "assert tracer.__version__ == '0.1.0'\n"
        "assert tracer.load.__module__ == 'tracer.api'\n"
        "assert tracer.trace.__module__ == 'tracer.attach'\n"
        "assert issubclass(tracer.TracingError, RuntimeError)\n"
        "assert {'load', 'trace', 'Trace'} <= set(dir(tracer))\n"
        "heavy = {'torch', 'pynvml', 'matplotlib'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_exit_status_is_split_into_code_and_signal() -> None:
    """The kernel's exit_code is a wait status: exit(1) is 256, a SIGSEGV with a core 139."""
    from tracer.live.processes import split_wait_status

    assert split_wait_status(0) == (0, None)
    assert split_wait_status(1 << 8) == (1, None)
    assert split_wait_status(7 << 8) == (7, None)
    assert split_wait_status(9) == (None, 9)
    assert split_wait_status(11 | 0x80) == (None, 11)


@pytest.mark.parametrize("asked", [None, "mimalloc"])
def test_the_tracers_pyarrow_allocates_with_malloc_unless_told(asked) -> None:
    """The tracer's pyarrow uses the C library's allocator, and the command it starts does not
    inherit the setting; a pool the user chose in the environment stays theirs."""
    code = ("import os, sys; from tracer import cli; cli._system_allocator_for_pyarrow(); "
            "import pyarrow; print(pyarrow.default_memory_pool().backend_name, "
            "os.environ.get('ARROW_DEFAULT_MEMORY_POOL'))")
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if asked:
        env["ARROW_DEFAULT_MEMORY_POOL"] = asked
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ([asked, asked] if asked else ["system", "None"])
