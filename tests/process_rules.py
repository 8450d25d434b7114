"""The rules of the diagnosis's input over `processes` rows as first written, a pass over every
row known each interval: what `feed.Known`, which keeps them up to date row by row, must say."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tracer.core.diagnosis.feed import loop_of
from tracer.core.diagnosis.input import Rank
from tracer.core.diagnosis.thresholds import MAX_PEERS
from tracer.core.vocab import RANK


def owners(processes: Iterable[Mapping]) -> dict[int, int]:
    rows = list(processes)
    pids = {int(r["pid"]) for r in rows}
    return loop_owners({int(r["pid"]): (int(r["ppid"]), r["role"], int(r["ppid"]) not in pids)
                        for r in rows})


def loop_owners(parents: Mapping[int, tuple[int, str, bool]]) -> dict[int, int]:
    """`feed.loop_of` for every pid of (ppid, role, is_target) per pid."""
    return {pid: loop_of(pid, parents.get) for pid in parents}


def ranks(processes: Iterable[Mapping], ts_ns: int) -> dict[int, Rank]:
    return {int(r["pid"]): Rank(int(r["rank"]), int(r["world_size"]), int(r["ppid"]))
            for r in processes
            if r["role"] == RANK and r.get("rank") is not None
            and (r.get("exit") is None or r["exit"] > ts_ns)}


def peers(processes: Iterable[Mapping], owner: Mapping[int, int]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for r in sorted(processes, key=lambda r: (r["first_seen"], r["pid"])):
        if not r.get("peers"):
            continue
        seen = out.setdefault(owner.get(int(r["pid"]), int(r["pid"])), [])
        seen.extend(p for p in r["peers"].split(", ") if p not in seen and len(seen) < MAX_PEERS)
    return out


def said(rows: list[Mapping], ts_ns: int) -> tuple:
    """(owners, ranks in their order, peers in their order) of `rows`."""
    owner = owners(rows)
    return owner, list(ranks(rows, ts_ns).items()), list(peers(rows, owner).items())
