"""The diagnosis's input per interval from `processes` rows (tracer.core.diagnosis.feed): the
rules the live step and a replay of a trace share."""

from __future__ import annotations

from tracer.core.diagnosis.feed import interval_input, known_at, loop_owners, owners, peers, ranks
from tracer.core.diagnosis.input import Rank

S = 1_000_000_000


def proc(pid: int, ppid: int, role: str, first_seen: int = 0, **more: object) -> dict:
    return {"pid": pid, "ppid": ppid, "role": role, "first_seen": first_seen, "exit": None,
            "rank": None, "world_size": None, "peers": None, **more}


# torchrun's agent (started by iotrace, its parent untraced), two ranks, a worker of rank 1,
# and a helper the agent started that is no rank
JOB = [proc(10, 1, "agent"), proc(11, 10, "rank", S, rank=0, world_size=2),
       proc(12, 10, "rank", S, rank=1, world_size=2), proc(13, 12, "dataloader_worker", 2 * S),
       proc(14, 10, "child", 2 * S)]


def test_each_process_has_the_loop_above_it_or_the_target_that_named_it() -> None:
    assert owners(JOB) == {10: 10, 11: 11, 12: 12, 13: 12, 14: 10}
    # a main's worker and a grandchild; an untraced parent
    assert owners([proc(5, 1, "main"), proc(6, 5, "dataloader_worker"), proc(7, 6, "child")]) \
        == {5: 5, 6: 5, 7: 5}


def test_loop_owners_takes_whether_the_user_named_a_process() -> None:
    # the live table knows its targets: the agent named, its helper owned by it
    assert loop_owners({10: (1, "agent", True), 14: (10, "child", True)}) == {10: 10, 14: 14}
    assert loop_owners({10: (1, "agent", False), 14: (10, "child", False)}) == {10: 10, 14: 14}
    assert loop_owners({10: (1, "agent", True), 14: (10, "child", False)}) == {10: 10, 14: 10}


def test_ranks_are_those_alive_at_the_interval_end() -> None:
    rows = [*JOB[:2], {**JOB[2], "exit": 3 * S}]
    assert ranks(rows, 2 * S) == {11: Rank(0, 2, 10), 12: Rank(1, 2, 10)}
    assert ranks(rows, 3 * S) == {11: Rank(0, 2, 10)}
    assert ranks([proc(11, 10, "rank", S)], 2 * S) == {}  # its numbers unknown


def test_peers_per_loop_in_the_order_first_seen() -> None:
    rows = [proc(6, 5, "dataloader_worker", 2 * S, peers="10.0.0.2:80, 10.0.0.1:80"),
            proc(5, 1, "main", 0, peers="10.0.0.1:80"),
            proc(7, 5, "dataloader_worker", 3 * S, peers=", ".join(f"10.0.1.{i}:80"
                                                                   for i in range(10)))]
    got = peers(rows, owners(rows))
    assert list(got) == [5]
    assert got[5][:2] == ["10.0.0.1:80", "10.0.0.2:80"] and len(got[5]) == 8


def test_interval_input_from_the_rows_known_at_its_end() -> None:
    known = known_at(JOB, S)
    assert [r["pid"] for r in known] == [10, 11, 12]
    threads = [{"pid": 11}]
    inp = interval_input(S, S, {"threads": threads}, known)
    assert inp.ts_ns == S and inp.interval_ns == S
    assert inp.threads == threads and inp.files == [] and inp.gpu == []
    assert inp.owners == {10: 10, 11: 11, 12: 12}
    assert inp.ranks == {11: Rank(0, 2, 10), 12: Rank(1, 2, 10)}
    assert inp.peers == {}
