"""The replay's rows of the intervals that leave the diagnosis's window (`report._Carried`):
the split's state must come out of them as out of every row."""

from __future__ import annotations

from tracer.core.diagnosis.split import SplitState, _thread_times
from tracer.core.vocab import CHILD, DATALOADER_WORKER, RANK
from tracer.report import _carried_threads, _records
from tracer.tracedir.schema import TABLES, table_from_rows

S = 1_000_000_000


def thread(ts: int, pid: int, tid: int, comm: str, role: str | None, n: int) -> dict:
    row = {name: 0 for name in TABLES["threads"].names}
    row.update(ts=ts, pid=pid, tid=tid, comm=comm, role=role, syscall_op=None,
               syscall_path=None, syscall_since=None, write_open_path=None,
               oncpu_ns=n, runnable_ns=2 * n, sleep_ns=3 * n, iowait_ns=4 * n,
               woken_by_worker_ns=5 * n)
    return row


def test_a_carried_interval_s_threads_split_as_every_row_does():
    """Of each interval, the loop's own row whole, its other threads, a DataLoader worker's
    threads and a child's added up per process and name: the split's sums, its loops' rows,
    the workers it has seen and the collective library named last are the same."""
    rows = []
    for k, ts in enumerate((S, 2 * S), 1):
        rows += [thread(ts, 20, 20, "pt_data_worker", DATALOADER_WORKER, 7 * k),
                 thread(ts, 10, 11, "python", RANK, 11 * k),
                 thread(ts, 10, 10, "python", RANK, 13 * k),
                 thread(ts, 10, 12, "pt_gloo_runloop", RANK, 17 * k),
                 thread(ts, 20, 21, "pt_data_worker", DATALOADER_WORKER, 19 * k),
                 thread(ts, 10, 13, "pt_nccl_watchdg", RANK, 23 * k),
                 thread(ts, 30, 30, "sh", CHILD, 29 * k),
                 thread(ts, 30, 31, "sh", CHILD, 31 * k),
                 thread(ts, 40, 40, "other", None, 37 * k)]
    rows.append(thread(2 * S, 10, 14, "pt_gloo_runloop", RANK, 41))  # gloo again, last
    df = table_from_rows("threads", rows).to_pandas()
    every, carried = _records(df), _carried_threads(df)
    assert sorted(every) == sorted(carried) == [S, 2 * S]
    owner = {10: 10, 20: 10, 30: 10, 40: 40}
    for ts in every:
        assert len(carried[ts]) < len(every[ts])
        a, b = SplitState(), SplitState()
        want, got = _thread_times(a, every[ts], owner), _thread_times(b, carried[ts], owner)
        assert want == got and want.worker_cpu[10] == 26 * (ts // S)
        assert want.loops[10]["woken_by_worker_ns"] == 65 * (ts // S)
        assert (a.workers_seen, a.collective) == (b.workers_seen, b.collective)
    assert b.collective == {10: "gloo"}
