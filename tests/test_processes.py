"""The process table from the kernel's life-cycle events: what it keeps of each process, and
the `processes` rows a segment roll writes."""

from __future__ import annotations

from types import SimpleNamespace

from tracer.core import abi
from tracer.core.redact import Redactor
from tracer.live.clock import Clock
from tracer.live.processes import ProcessTable
from tracer.live.session import Session

S = 1_000_000_000


def event(kind: int, pid: int, ppid: int = 0, comm: str = "python", ts: int = 0) -> abi.ProcEvent:
    return abi.ProcEvent(kind, pid, ppid, 0, ts, comm, pid)


def rolled(t: ProcessTable) -> list[dict]:
    """The `processes` rows a segment roll writes now."""
    return Session._process_rows(SimpleNamespace(processes=t, redact=Redactor(False)))


def test_a_final_row_is_written_once_and_not_kept():
    t = ProcessTable(Clock())
    t.add_started(10, 1, ["python", "train.py"])
    t.on_event(event(abi.EVENT_FORK, 11, 10, ts=S))
    t.on_event(event(abi.EVENT_RENAME, 11, 11, "pt_data_worker", ts=S))
    assert [r["pid"] for r in rolled(t)] == [10, 11]
    assert rolled(t) == []  # nothing changed
    t.on_event(event(abi.EVENT_EXIT, 11, ts=2 * S))
    (row,) = rolled(t)
    assert (row["pid"], row["exit"], row["worker_generation"]) == (11, t.clock.to_utc_ns(2 * S), 0)
    worker = t.get(11)
    assert worker is not None and worker.final_written and worker.written is None
    assert rolled(t) == []


def test_workers_share_their_names_and_command_line():
    t = ProcessTable(Clock())
    t.add_started(10, 1, ["python", "train.py"])
    for pid in (11, 12):  # names decoded afresh from each record, as the ring buffer's are
        t.on_event(event(abi.EVENT_FORK, pid, 10, b"python".decode()))
        t.on_event(event(abi.EVENT_RENAME, pid, pid, b"pt_data_worker".decode()))
        t.on_event(event(abi.EVENT_EXIT, pid))
    a, b = t.get(11), t.get(12)
    assert a is not None and b is not None
    assert a.comm == "pt_data_worker" and a.comm is b.comm and a.cmdline is b.cmdline
