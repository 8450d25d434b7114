"""The process table from the kernel's life-cycle events: what it keeps of each process, and
the `processes` rows a segment roll writes."""

from __future__ import annotations

import random
from types import SimpleNamespace

import process_rules

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


def test_workers_numbered_by_generation_per_parent():
    """A generation ends when all its workers have exited: a worker started while one of them
    still runs is of it, whoever else exited; each parent numbers its own."""
    t = ProcessTable(Clock())
    t.add_started(10, 1, ["python", "train.py"])
    t.on_event(event(abi.EVENT_FORK, 20, 10, ts=0))  # a second loader's parent

    def worker(pid: int, ppid: int, start: float, end: float | None) -> None:
        t.on_event(event(abi.EVENT_FORK, pid, ppid, ts=int(start * S)))
        t.on_event(event(abi.EVENT_RENAME, pid, pid, "pt_data_worker", ts=int(start * S)))
        if end is not None:
            t.on_event(event(abi.EVENT_EXIT, pid, ts=int(end * S)))

    for pid, start, end in ((11, 1, 5), (12, 1, 6), (13, 5.5, 8),  # 13 while 12 runs
                            (14, 8, 12), (15, 8.5, 11),  # 14 as the last one exited
                            (16, 11.5, None), (17, 13, 14),  # 17 while 16 runs
                            (30, 1, 3)):
        worker(pid, 10, start, end)
    worker(18, 10, 8, 9)  # started with 14: the pid breaks the tie
    worker(21, 20, 1, 4)
    worker(22, 20, 4, None)
    t.number_workers()
    numbers = {p.pid: (p.worker_generation, p.worker_index) for p in t.by_pid.values()
               if p.worker_generation is not None}
    assert numbers == {11: (0, 0), 12: (0, 1), 30: (0, 2), 13: (0, 3),
                       14: (1, 0), 18: (1, 1), 15: (1, 2), 16: (1, 3), 17: (1, 4),
                       21: (0, 0), 22: (1, 0)}
    t.on_event(event(abi.EVENT_EXIT, 16, ts=15 * S))
    worker(19, 10, 15, None)  # once all of generation 1 exited
    t.number_workers()
    assert (t.get(17).worker_generation, t.get(19).worker_generation) == (1, 2)  # type: ignore[union-attr]


def test_what_the_diagnosis_is_told_of_the_processes_is_what_their_rows_say():
    """`known()` puts only the rows of the processes not forgotten: what it says (each one's
    loop, the ranks, the peers) is what the rows of all of them say, through forks, names,
    peers, ranks, exits, the forgetting an interval later and pids taken again."""
    rng = random.Random(5)
    t = ProcessTable(Clock())
    t.add_started(10, 1, ["python", "train.py"])
    exited: list[int] = []
    for ts in range(1, 300):
        for pid in exited:  # as the forgetter does
            t.by_pid[pid].forgotten = True
        for _ in range(rng.randint(0, 3)):
            alive = [p.pid for p in t.alive()]
            pid = rng.randrange(11, 60)
            proc = t.get(pid)
            if alive and (proc is None or not proc.alive):
                t.on_event(event(abi.EVENT_FORK, pid, rng.choice(alive), ts=ts * S))
        for proc in t.alive():
            if proc.pid == 10:
                continue
            what = rng.random()
            if what < 0.1:
                t.on_event(event(abi.EVENT_RENAME, proc.pid, proc.pid, "pt_data_worker"))
            elif what < 0.15:  # as its exec's environment says (_read_torchrun_role)
                proc.rank_env, proc.is_rank = (rng.randrange(4), None, 4), True
            elif what < 0.2:
                proc.peers += (f"10.0.0.{rng.randrange(12)}:443",)
            elif what < 0.3:
                t.on_event(event(abi.EVENT_EXIT, proc.pid, ts=ts * S))
        known = t.known()
        rows = [p.known_row() for p in t.by_pid.values()]
        assert process_rules.said(rows, ts * S) == (
            known.owners(), list(known.ranks(ts * S).items()), list(known.peers().items()))
        assert t.alive() == [p for p in t.by_pid.values() if p.alive]
        exited = [p.pid for p in t.exited()]
    assert sum(p.forgotten for p in t.by_pid.values()) > 20


def test_a_forgotten_process_that_changes_is_told_again():
    """A process the forgetter marked while it ran (its pid was taken again from one that had
    just exited), and a record late for a forgotten one: the diagnosis is told the change."""
    t = ProcessTable(SimpleNamespace(now_ns=lambda: 5 * S, to_utc_ns=lambda ns: ns))
    t.add_started(10, 1, ["python", "train.py"])
    t.on_event(event(abi.EVENT_FORK, 11, 10, ts=S))
    t.known()
    t.by_pid[11].forgotten = True  # meant for the process that had pid 11 before
    t.known()
    t.by_pid[11].peers += ("10.0.0.1:443",)
    assert t.known().peers() == {10: ["10.0.0.1:443"]}

    rank = t.by_pid[10]
    rank.rank_env, rank.is_rank = (0, 0, 2), True
    t.mark_gone(10)  # at 5 s: its exit record comes later, and says 3 s
    t.known()
    rank.forgotten = True
    t.known()
    t.on_event(event(abi.EVENT_EXIT, 10, ts=3 * S))
    assert list(t.known().ranks(4 * S)) == []
