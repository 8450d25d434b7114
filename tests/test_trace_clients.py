"""Other readers of a trace directory: every table of the contract reads through pandas, DuckDB
and polars in folder form, with its columns, on a trace with no GPU and no slow events, while it
is written and after; and a segment lacking a nullable column reads, filled with nulls."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import IOTRACE, ROOT
from tracer.api import load
from tracer.sinks.parquet import TraceWriter
from tracer.tracedir.schema import TABLES, table_from_rows

T0 = 1_700_000_000 * 1_000_000_000


def rows_by_client(directory: Path) -> dict[str, dict[str, int]]:
    """Rows per table as pandas, DuckDB and polars read each table's folder; each also checks
    that the columns are the schema's, in order."""
    got: dict[str, dict[str, int]] = {"pandas": {}, "duckdb": {}, "polars": {}}
    for table, schema in TABLES.items():
        folder = directory / table
        frame = pd.read_parquet(folder)
        assert list(frame.columns) == schema.names, table
        got["pandas"][table] = len(frame)
        rel = duckdb.sql(f"select * from read_parquet('{folder}/*.parquet')")
        assert rel.columns == schema.names, table
        got["duckdb"][table] = len(rel.fetchall())
        anything = duckdb.sql(f"select count(*) from read_parquet('{folder}/**')")  # every file
        assert anything.fetchall()[0][0] == got["duckdb"][table], table
        frame = pl.read_parquet(folder)
        assert frame.columns == schema.names, table
        got["polars"][table] = frame.height
    return got


def latency_row(pid: int) -> dict:
    return {"ts": T0, "pid": pid, "comm": "python", "role": "main", "layer": "syscall",
            "op": "read", "target": "file", "bucket_lo_ns": 1024, "bucket_hi_ns": 2048,
            "count": 3, "bytes": 300}


def test_every_table_reads_while_written_and_after(tmp_path: Path) -> None:
    """A trace open for writing, a segment half-written (its temporary file is where a killed
    writer leaves it), then closed: every client reads every table, the empty ones too."""
    w = TraceWriter(tmp_path, {})
    w.add("latency", [latency_row(1), latency_row(2)])
    w.flush()
    (tmp_path / ".tmp" / "latency-part-00001.parquet.tmp").write_bytes(b"PAR1 half a segment")
    during = rows_by_client(tmp_path)
    expected = {t: 2 if t == "latency" else 0 for t in TABLES}
    assert during == {"pandas": expected, "duckdb": expected, "polars": expected}
    (tmp_path / ".tmp" / "latency-part-00001.parquet.tmp").unlink()
    w.add("latency", [latency_row(3)])
    w.close()
    expected["latency"] = 3
    assert rows_by_client(tmp_path) == {"pandas": expected, "duckdb": expected,
                                        "polars": expected}
    assert not (tmp_path / ".tmp").exists()  # a closed trace has nothing but its tables


def test_segment_without_a_nullable_column_reads_with_nulls(tmp_path: Path) -> None:
    """An NVML stream recorded elsewhere with no PCIe columns, and a `files` segment from before
    `cache_hit_pct`: read, the missing nullable columns null. A segment lacking a required
    column is skipped, with a warning that names the column."""
    with TraceWriter(tmp_path, {}):
        pass
    gpu = table_from_rows("gpu", [
        {"ts": T0 + i, "gpu": 0, "uuid": "GPU-1", "name": "H100", "util_pct": 50.0 + i,
         "mem_util_pct": 10.0, "pcie_rx_bytes_s": 1.0, "pcie_tx_bytes_s": 2.0,
         "sample_period_ns": 1000} for i in range(3)])
    old = gpu.drop_columns(["pcie_rx_bytes_s", "pcie_tx_bytes_s"])
    old = old.set_column(old.schema.get_field_index("uuid"), "uuid",
                         old.column("uuid").cast(pa.string()))  # plain strings, as another tool writes
    pq.write_table(old, tmp_path / "gpu" / "part-00001.parquet")
    trace = load(tmp_path)
    got = trace.gpu
    assert list(got.columns) == TABLES["gpu"].names
    assert got["util_pct"].tolist() == [50.0, 51.0, 52.0]
    assert got["pcie_rx_bytes_s"].isna().all() and got["pcie_tx_bytes_s"].isna().all()
    assert got["uuid"].astype(str).tolist() == ["GPU-1"] * 3
    assert trace.damaged == {}

    no_gpu_column = gpu.drop_columns(["gpu"])
    pq.write_table(no_gpu_column, tmp_path / "gpu" / "part-00002.parquet")
    trace = load(tmp_path)
    with pytest.warns(UserWarning, match="part-00002.parquet: not an iotrace segment of this "
                                         "table: no column gpu"):
        assert len(trace.gpu) == 3


@pytest.mark.kernel
def test_real_trace_reads_while_running_and_after(tmp_path: Path, iowork: Path) -> None:
    """iotrace tracing a job with no GPU (--gpu off) and nothing slow (--slow-ms far above any
    read): every table reads through every client as it runs, and once it has stopped."""
    out = tmp_path / "trace"
    data = tmp_path / "data.bin"
    data.write_bytes(b"x" * 65536)
    job = f"while :; do cat {data} > /dev/null; sleep 0.05; done"
    tracer = subprocess.Popen(
        [*IOTRACE, "-o", str(out), "-i", "0.5", "--gpu", "off", "--slow-ms", "600000",
         "--", "sh", "-c", job],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        assert tracer.stderr.readline().startswith("Tracing")
        first = out / "latency" / "part-00000.parquet"  # empty until the first roll
        while not first.exists() or pq.read_metadata(first).num_rows == 0:
            assert tracer.poll() is None, tracer.stderr.read()
            time.sleep(0.2)
        during = rows_by_client(out)
    finally:
        os.killpg(tracer.pid, signal.SIGINT)  # Ctrl-C: to the job too
        tracer.communicate(timeout=60)
    assert during["pandas"] == during["duckdb"] == during["polars"]
    assert during["pandas"]["latency"] > 0 and during["pandas"]["processes"] > 0
    after = rows_by_client(out)
    assert after["pandas"] == after["duckdb"] == after["polars"]
    for table in ("events", "gpu", "gpu_idle"):
        assert after["pandas"][table] == 0, table
    assert after["pandas"]["latency"] >= during["pandas"]["latency"]
    assert not (out / ".tmp").exists()
