"""The diagnosis's input per interval from `processes` rows (tracer.core.diagnosis.feed): the
rules the live step and a replay of a trace share."""

from __future__ import annotations

import random

import process_rules
import pytest

from tracer.core.diagnosis.feed import Known, interval_input, known_at
from tracer.core.diagnosis.input import Rank
from tracer.core.vocab import AGENT, CHILD, DATALOADER_WORKER, MAIN, RANK

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
    assert Known(JOB).owners() == {10: 10, 11: 11, 12: 12, 13: 12, 14: 10}
    # a main's worker and a grandchild; an untraced parent
    assert Known([proc(5, 1, "main"), proc(6, 5, "dataloader_worker"),
                  proc(7, 6, "child")]).owners() == {5: 5, 6: 5, 7: 5}


def test_loop_owners_takes_whether_the_user_named_a_process() -> None:
    # the live table knows its targets: the agent named, its helper owned by it
    loop_owners = process_rules.loop_owners
    assert loop_owners({10: (1, "agent", True), 14: (10, "child", True)}) == {10: 10, 14: 14}
    assert loop_owners({10: (1, "agent", False), 14: (10, "child", False)}) == {10: 10, 14: 14}
    assert loop_owners({10: (1, "agent", True), 14: (10, "child", False)}) == {10: 10, 14: 10}


def test_ranks_are_those_alive_at_the_interval_end() -> None:
    known = Known([*JOB[:2], {**JOB[2], "exit": 3 * S}])
    assert known.ranks(2 * S) == {11: Rank(0, 2, 10), 12: Rank(1, 2, 10)}
    assert known.ranks(3 * S) == {11: Rank(0, 2, 10)}
    assert Known([proc(11, 10, "rank", S)]).ranks(2 * S) == {}  # its numbers unknown


def test_peers_per_loop_in_the_order_first_seen() -> None:
    rows = [proc(6, 5, "dataloader_worker", 2 * S, peers="10.0.0.2:80, 10.0.0.1:80"),
            proc(5, 1, "main", 0, peers="10.0.0.1:80"),
            proc(7, 5, "dataloader_worker", 3 * S, peers=", ".join(f"10.0.1.{i}:80"
                                                                   for i in range(10)))]
    got = Known(rows).peers()
    assert list(got) == [5]
    assert got[5][:2] == ["10.0.0.1:80", "10.0.0.2:80"] and len(got[5]) == 8


def test_interval_input_from_the_rows_known_at_its_end() -> None:
    known = known_at(JOB, S)
    assert [r["pid"] for r in known] == [10, 11, 12]
    threads = [{"pid": 11}]
    inp = interval_input(S, S, {"threads": threads}, Known(known))
    assert inp.ts_ns == S and inp.interval_ns == S
    assert inp.threads == threads and inp.files == [] and inp.gpu == []
    assert inp.owners == {10: 10, 11: 11, 12: 12}
    assert inp.ranks == {11: Rank(0, 2, 10), 12: Rank(1, 2, 10)}
    assert inp.peers == {}


def test_an_input_keeps_what_it_was_given() -> None:
    """The owners given to an interval's input stay as they were when the processes change."""
    known = Known([proc(5, 1, "main"), proc(6, 5, "python")])
    first = interval_input(S, S, {}, known)
    known.put(proc(7, 6, "child", S))
    known.put(proc(6, 5, "main"))
    second = interval_input(2 * S, S, {}, known)
    assert first.owners == {5: 5, 6: 5}
    assert second.owners == {5: 5, 6: 6, 7: 6}


ROLES = (MAIN, DATALOADER_WORKER, DATALOADER_WORKER, CHILD, RANK, AGENT)
PEERS = [f"10.0.0.{i}:443" for i in range(12)]


def random_row(rng: random.Random, pid: int, pids: list[int], first_seen: int) -> dict:
    role = rng.choice(ROLES)
    row = proc(pid, rng.choice([1, *pids]) if pids else 1, role, first_seen)
    if role == RANK and rng.random() < 0.8:
        row.update(rank=rng.randrange(4), world_size=4)
    if rng.random() < 0.4:
        row["peers"] = ", ".join(rng.sample(PEERS, rng.randint(1, 4)))
    return row


def changed(rng: random.Random, row: dict, pids: list[int], ts: int) -> dict:
    """`row` as a live process's changes it (a rename or exec, more peers, its exit), or as it
    never changes live (another parent, other peers: a whole recount)."""
    row = dict(row)
    what = rng.random()
    if what < 0.25:
        row["role"] = rng.choice(ROLES)
        row["rank"], row["world_size"] = ((rng.randrange(4), 4) if row["role"] == RANK
                                          else (None, None))
    elif what < 0.6:
        more = ", ".join(rng.sample(PEERS, rng.randint(1, 3)))
        row["peers"] = f"{row['peers']}, {more}" if row["peers"] else more
    elif what < 0.8:
        row["exit"] = ts
    elif what < 0.9:
        row["ppid"] = rng.choice(pids)
    else:
        row["peers"] = rng.choice([None, PEERS[0]])
    return row


@pytest.mark.parametrize("seed", range(40))
def test_known_says_what_the_live_rows_say(seed: int) -> None:
    """As a live table uses it: one process per pid (a pid taken again drops the one before),
    the rows of those that changed put again each interval, in the order first seen."""
    rng = random.Random(seed)
    rows: dict[int, dict] = {}  # the table's, by pid in the order first seen
    known = Known()
    for ts in range(1, 120):
        touched = set()
        for _ in range(rng.randint(0, 4)):
            pid = rng.randrange(100, 140)  # some taken again
            if pid in rows:
                del rows[pid]
                known.drop(pid)
            rows[pid] = random_row(rng, pid, list(rows), ts * S)
            touched.add(pid)
        for pid in rng.sample(list(rows), min(len(rows), rng.randint(0, 3))):
            rows[pid] = changed(rng, rows[pid], list(rows), ts * S)
            touched.add(pid)
        for pid in rows:
            if pid in touched or rng.random() < 0.2:  # the same row again changes nothing
                known.put(rows[pid])
        if rng.random() < 0.5:
            at = (ts - rng.randint(0, 10)) * S
            assert process_rules.said(list(rows.values()), at) == (
                known.owners(), list(known.ranks(at).items()), list(known.peers().items()))


@pytest.mark.parametrize("seed", range(40))
def test_known_says_what_the_replayed_rows_say(seed: int) -> None:
    """As a replay uses it: each process's last row, put once the interval it was first seen
    in ends, in the order first seen (a pid used again is two processes)."""
    rng = random.Random(seed)
    last: dict[tuple[int, int], dict] = {}  # a process is its pid and first_seen (the reader's)
    for _ in range(150):
        row = random_row(rng, rng.randrange(100, 160), [pid for pid, _ in last],
                         rng.randrange(60) * S)
        if rng.random() < 0.5:
            row["exit"] = row["first_seen"] + rng.randrange(1, 20) * S
        last[row["pid"], row["first_seen"]] = row
    procs = sorted(last.values(), key=lambda r: (r["first_seen"], r["pid"]))
    known, taken = Known(), 0
    for ts in range(0, 60 * S, S):
        n = len(known_at(procs, ts))
        for r in procs[taken:n]:
            known.put(r)
        taken = n
        assert process_rules.said(procs[:n], ts) == (
            known.owners(), list(known.ranks(ts).items()), list(known.peers().items()))
