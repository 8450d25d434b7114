"""The pure step and the sinks' one protocol, without the kernel: what one interval makes, and
how the trace directory, the lines and the notes take it."""

from __future__ import annotations

import io
import json

import pyarrow.parquet as pq
import pytest
from ui_snapshots import SEC, findings, loop_rows, snapshot

from tracer.core import abi
from tracer.core.diagnosis import Diagnosis
from tracer.core.diagnosis.feed import Known
from tracer.core.interval import Interval
from tracer.core.selfcost import SelfCost, TracerCpu
from tracer.live.aggregate import Aggregator, Reading
from tracer.live.clock import Clock
from tracer.live.processes import ProcessTable
from tracer.live.step import FINDINGS_EVERY_S, Step
from tracer.sinks.parquet import ParquetSink, TraceWriter
from tracer.tracedir.schema import MAX_CPU_TAKERS
from tracer.ui.line import LinePrinter, NotePrinter

T0 = 1_700_000_000 * SEC


def cost(lost: int = 0) -> SelfCost:
    return SelfCost((), lost, {}, TracerCpu(1.0, 0.5, 2.0, 25.0, 25.0, 1 << 27))


def step() -> Step:
    return Step(Aggregator(ProcessTable(Clock())), Diagnosis(page_size=4096))


def run(s: Step, i: int, **kw) -> Interval:
    return s.interval(Reading({}), T0 + i * SEC, devices=[], system=None, gpu_rows=[],
                      cost=cost(i), known=Known(), **kw)


def test_findings_rows_every_few_seconds_and_the_whole_run_at_the_end():
    s = step()
    every = int(FINDINGS_EVERY_S)
    out = [run(s, i) for i in range(2 * every + 1)]
    assert all(iv.snapshot.cost == cost(i) and iv.events_lost == i for i, iv in enumerate(out))
    last = run(s, 2 * every + 1, processes=[], final=True)
    assert last.final and last.processes == [] and last.meta["events_lost"] == 2 * every + 1
    assert last.meta["self_cost"] == cost(2 * every + 1).meta() and "gpu" not in last.meta
    assert not any(iv.final or iv.meta for iv in out)
    assert out[0].snapshot.interval_ns == 0 and out[1].snapshot.interval_ns == SEC


def interval(i: int, **kw) -> Interval:
    return Interval(snapshot(i), loop_rows(i), findings(), **kw)


def test_parquet_sink_rolls_with_the_processes_and_closes_at_the_end(tmp_path):
    writer = TraceWriter(tmp_path, {"stop_ns": None}, roll_s=1e-6)  # always due: the sink rolls when told
    failed: list[OSError] = []
    sink = ParquetSink(writer, lambda: {"stop_ns": 7, "stop_reason": "q"}, failed.append)
    proc = {"pid": 1000, "ppid": 1, "comm": "python", "role": "main", "cmdline": "python x",
            "first_seen": T0, "exit": None, "exit_code": None, "exit_signal": None,
            "worker_generation": None, "worker_index": None, "ns_pid": None}
    sink.write(interval(0))
    assert pq.read_table(tmp_path / "latency").num_rows == 0  # no roll without the processes' rows
    sink.write(interval(1, processes=[proc]))
    assert len(list((tmp_path / "processes").glob("part-*.parquet"))) == 1
    assert len(list((tmp_path / "latency").glob("part-*.parquet"))) == 1
    sink.write(interval(2, processes=[{**proc, "exit": T0 + 3 * SEC}], final=True,
                        meta={"events_lost": 3}))
    assert writer.closed and not failed
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert (meta["stop_ns"], meta["stop_reason"], meta["events_lost"]) == (7, "q", 3)
    procs = pq.read_table(tmp_path / "processes").to_pylist()
    assert len(procs) == 1 and procs[0]["exit"] is not None  # compacted: the last row
    sink.close()  # closed already: nothing more


def test_parquet_sink_stops_writing_when_the_disk_is_full(tmp_path):
    writer = TraceWriter(tmp_path, {}, roll_s=1e-6)  # always due: the sink rolls when told
    failed: list[OSError] = []
    sink = ParquetSink(writer, lambda: {"stop_reason": "x"}, failed.append)

    def full():
        raise OSError(28, "No space left on device")

    writer.flush = full
    sink.write(interval(0, processes=[]))
    assert [e.errno for e in failed] == [28]
    sink.write(interval(1))  # given up: taken, not written
    sink.close()
    assert writer.closed and json.loads((tmp_path / "meta.json").read_text())["stop_reason"] == "x"


def test_line_printer_reports_a_failed_write_once_and_skips_the_last_interval():
    class Gone(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    errors: list[OSError] = []
    printer = LinePrinter(Gone(), on_error=errors.append)
    printer.write(interval(0))
    printer.write(interval(1))
    assert [type(e) for e in errors] == [BrokenPipeError]
    with pytest.raises(BrokenPipeError):
        LinePrinter(Gone()).write(interval(0))
    out = io.StringIO()
    LinePrinter(out).write(interval(0, final=True))
    assert out.getvalue() == ""


def test_note_printer():
    err = io.StringIO()
    NotePrinter(err).write(interval(0, notes=["GPU 0 lost"]))
    assert err.getvalue() == "iotrace: GPU 0 lost\n"


def _wait_key(pid: int, taker: int, comm: str, traced: int = 0, rest: int = 0) -> bytes:
    return abi.CPU_WAIT_KEY.pack(pid, taker, 0, traced, rest, comm.encode())


def test_cpu_waits_rows_are_deltas_by_taker_and_the_table_says_who_is_traced():
    """Who had the CPUs the job's threads waited for: the kernel's cumulative counts as each
    interval's deltas; a taker the process table has is traced even where the kernel's key
    says not (a worker found at attach, before it was in the kernel's set), the CPU idle is
    `idle`, past MAX_CPU_TAKERS per waiting process the rest is one row, and the waits' parts
    before their last taker ran are one more (`earlier`)."""
    procs = ProcessTable(Clock())
    procs.add_started(100, 1, ["python"])
    procs.add_started(200, 100, ["python"])
    agg = Aggregator(procs)
    first = {_wait_key(100, 900, "cpu_spin"): abi.CPU_WAIT.pack(2, 5 * SEC, 0),
             _wait_key(100, 200, "pt_data_worker"): abi.CPU_WAIT.pack(1, SEC, 0),
             _wait_key(100, 0, "swapper/0"): abi.CPU_WAIT.pack(1, SEC // 2, 0)}
    agg.interval(Reading({}, cpu_waits=first), T0)
    later = {**first, _wait_key(100, 900, "cpu_spin"): abi.CPU_WAIT.pack(5, 8 * SEC, SEC),
             **{_wait_key(100, 1000 + i, f"p{i}"): abi.CPU_WAIT.pack(1, (20 - i) * 10**6, 0)
                for i in range(MAX_CPU_TAKERS)}}
    rows = agg.interval(Reading({}, cpu_waits=later), T0 + SEC).cpu_waits
    by = {(r["who"], r["taker_pid"]): (r["waits"], r["wait_ns"]) for r in rows}
    assert by[("other", 900)] == (3, 3 * SEC) and by[("earlier", None)] == (0, SEC)
    assert len(rows) == MAX_CPU_TAKERS + 2
    assert by[("rest", None)] == (1, 20 * 10**6 - (MAX_CPU_TAKERS - 1) * 10**6)
    first_rows = {(r["who"], r["taker_pid"]) for r in agg.interval(
        Reading({}, cpu_waits={_wait_key(100, 200, "pt_data_worker"): abi.CPU_WAIT.pack(2, 2 * SEC, 0),
                               _wait_key(100, 0, "swapper/0"): abi.CPU_WAIT.pack(2, SEC, 0)}),
        T0 + 2 * SEC).cpu_waits}
    assert first_rows == {("traced", 200), ("idle", None)}
