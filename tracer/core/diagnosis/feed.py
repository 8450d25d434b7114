"""The one builder of the diagnosis's input per interval, for the live step and for a replay.

The live step gives it the interval's snapshot and its process table's rows; a replay of a trace
directory gives it the rows saved for the interval and the `processes` rows known at its end
(`known_at`). What a process's rows say decides its training loop (`owners`), its rank
(`ranks`) and the TCP peers named for its loop (`peers`), by the same rules both ways, so
`iotrace report DIR` reaches the findings the run that wrote DIR reached.

Only the columns of `processes` rows the rules read are used: pid, ppid, role, first_seen,
exit, rank, world_size, peers (`tracer.core.model.ProcessRow`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from tracer.core.diagnosis.input import IntervalInput, Rank
from tracer.core.diagnosis.thresholds import MAX_PEERS
from tracer.core.vocab import LOOP_ROLES, RANK

if TYPE_CHECKING:
    from tracer.core.diagnosis.diagnosis import Diagnosis
    from tracer.core.model import LoopRow

TABLES = ("threads", "files", "latency", "devices", "memory", "device_users", "events", "gpu",
          "cpu_waits", "fuse", "stacks")


def loop_owners(parents: Mapping[int, tuple[int, str, bool]]) -> dict[int, int]:
    """Each process's training loop, by pid, from (ppid, role, is_target) per pid: its nearest
    ancestor (or itself) whose role is a loop's (a rank or a `main`), else the nearest traced
    ancestor the user named (torchrun's agent, whose ranks' other children have no loop above
    them), else itself."""
    out: dict[int, int] = {}
    for pid in parents:
        cur: int | None = pid
        seen: set[int] = set()
        target = None
        while cur is not None and cur in parents and cur not in seen:
            ppid, role, is_target = parents[cur]
            if role in LOOP_ROLES:
                break
            if is_target and target is None:
                target = cur
            seen.add(cur)
            cur = ppid
        else:
            cur = target
        out[pid] = cur if cur is not None else pid
    return out


def owners(processes: Iterable[Mapping]) -> dict[int, int]:
    """`loop_owners` of `processes` rows. A row does not say whether the user named its
    process: a traced process whose parent is not traced was (iotrace follows every traced
    process's children from their fork), which is what the live table knows."""
    rows = list(processes)
    pids = {int(r["pid"]) for r in rows}
    return loop_owners({int(r["pid"]): (int(r["ppid"]), r["role"], int(r["ppid"]) not in pids)
                        for r in rows})


def ranks(processes: Iterable[Mapping], ts_ns: int) -> dict[int, Rank]:
    """The ranks alive at `ts_ns` whose environment's numbers are known, by pid; a rank's job
    is its parent (torchrun's agent, which started it)."""
    return {int(r["pid"]): Rank(int(r["rank"]), int(r["world_size"]), int(r["ppid"]))
            for r in processes
            if r["role"] == RANK and r.get("rank") is not None
            and (r.get("exit") is None or r["exit"] > ts_ns)}


def peers(processes: Iterable[Mapping], owner: Mapping[int, int]) -> dict[int, list[str]]:
    """Per training loop, the TCP peers its processes' rows name, at most MAX_PEERS: processes
    in the order they were first seen, each's peers in the order it saw them."""
    out: dict[int, list[str]] = {}
    for r in sorted(processes, key=lambda r: (r["first_seen"], r["pid"])):
        if not r.get("peers"):
            continue
        seen = out.setdefault(owner.get(int(r["pid"]), int(r["pid"])), [])
        seen.extend(p for p in r["peers"].split(", ") if p not in seen and len(seen) < MAX_PEERS)
    return out


def known_at(processes: Sequence[Mapping], ts_ns: int) -> list[Mapping]:
    """The rows of the processes first seen by `ts_ns` (a replay's rows are each process's last:
    those of processes not yet started say nothing of the interval)."""
    return [r for r in processes if r["first_seen"] <= ts_ns]


def interval_input(ts_ns: int, interval_ns: int, rows: Mapping[str, Sequence],
                   processes: Sequence[Mapping], owner: dict[int, int] | None = None,
                   carried: bool = False) -> IntervalInput:
    """The interval ending at `ts_ns` as the diagnosis is told it: `rows`, per table name
    (TABLES; a table left out has none), and the `processes` rows known at its end. `owner`:
    `owners(processes)`, when the caller has it for these same rows already. `carried`: a
    replay's interval that leaves the diagnosis's window before the end (IntervalInput)."""
    owner = owners(processes) if owner is None else owner
    return IntervalInput(ts_ns, interval_ns, **{t: list(rows.get(t, ())) for t in TABLES},
                         owners=owner, ranks=ranks(processes, ts_ns),
                         peers=peers(processes, owner), carried=carried)


def feed(diagnosis: Diagnosis, inp: IntervalInput) -> list[LoopRow]:
    """Tells `diagnosis` one interval; returns the `loop` rows. The one call of the diagnosis
    per interval, live and in a replay (`Diagnosis.add`: ranks are added to those it knows, and
    each loop's peers are the input's, a list so far)."""
    return diagnosis.add(inp)

