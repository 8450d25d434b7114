"""The one builder of the diagnosis's input per interval, for the live step and for a replay.

The live step gives it the interval's snapshot and its process table's rows; a replay of a trace
directory gives it the rows saved for the interval and the `processes` rows known at its end
(`known_at`). What a process's rows say decides its training loop (`Known.owners`), its rank
(`Known.ranks`) and the TCP peers named for its loop (`Known.peers`), by the same rules both
ways, so `iotrace report DIR` reaches the findings the run that wrote DIR reached.

Only the columns of `processes` rows the rules read are used: pid, ppid, role, first_seen,
exit, rank, world_size, peers (`tracer.core.model.ProcessRow`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from tracer.core.diagnosis.input import IntervalInput, Rank
from tracer.core.diagnosis.thresholds import MAX_PEERS
from tracer.core.vocab import LOOP_ROLES, RANK

if TYPE_CHECKING:
    from tracer.core.diagnosis.diagnosis import Diagnosis
    from tracer.core.model import LoopRow

TABLES = ("threads", "files", "latency", "devices", "memory", "device_users", "events", "gpu",
          "cpu_waits", "fuse", "stacks")


def loop_of(pid: int, entry: Callable[[int], tuple[int, str, bool] | None]) -> int:
    """The training loop of `pid`, from `entry(pid)`: its (ppid, role, is_target), None for a
    pid not known. Its nearest ancestor (or itself) whose role is a loop's (a rank or a `main`),
    else the nearest traced ancestor the user named (torchrun's agent, whose ranks' other
    children have no loop above them), else itself."""
    cur, seen, target = pid, set(), None
    while cur not in seen and (e := entry(cur)) is not None:
        ppid, role, is_target = e
        if role in LOOP_ROLES:
            return cur
        if is_target and target is None:
            target = cur
        seen.add(cur)
        cur = ppid
    return pid if target is None else target


class Known:
    """The processes known at an interval's end, by their `processes` rows, and what the rules
    read of them: each one's training loop (`owners`), the ranks alive (`ranks`) and each loop's
    TCP peers (`peers`).

    A process is its pid and first_seen, as in the trace. A replay puts the rows of the
    processes first seen by each interval's end; a live run puts, each interval, the rows of
    those that may still change, and `drop`s a process whose pid another one took. What the
    rules say is redone only for what the rows put since changed: a job that re-forks its
    DataLoader workers every epoch leaves thousands of processes gone, which then cost nothing
    per interval. The rows' order (the ranks' is theirs) is the order their processes were
    first put."""

    def __init__(self, rows: Iterable[Mapping] = ()) -> None:
        # pid -> (ppid, role, first_seen) of its latest process, in the rows' order; ppid ->
        # the pids put under it (some moved since): a loop is decided by a row and its ancestors'
        self._parent: dict[int, tuple[int, str, int]] = {}
        self._children: dict[int, list[int]] = {}
        self._moved: set[int] = set()  # put with another parent or role, or dropped, since
        self._owner: dict[int, int] = {}
        self._owner_given = False  # in an input given out: the next change goes to a copy
        # (pid, first_seen) -> the place and exit of each rank whose numbers are known
        self._ranks: dict[tuple[int, int], tuple[Rank, int | None]] = {}
        # (pid, first_seen) -> the peers of the rows that name some
        self._peer_rows: dict[tuple[int, int], str] = {}
        self._uncounted: dict[tuple[int, int], int] = {}  # -> its first peer not counted yet
        self._counted_for: dict[int, int] = {}  # pid -> the loop its rows' peers count for
        self._recount = False  # a row's peers changed otherwise than by more of them
        # loop -> its first MAX_PEERS peers -> where each was first named: (first_seen, pid,
        # place in the row), as the rows sorted by first_seen name them
        self._first: dict[int, dict[str, tuple[int, int, int]]] = {}
        self._peers: dict[int, list[str]] | None = {}  # the last `peers()`; None: to redo
        for r in rows:
            self.put(r)

    def put(self, row: Mapping) -> None:
        """A process's row, new or again (what it says now replaces what it said)."""
        pid, ppid, role, first_seen = int(row["pid"]), int(row["ppid"]), row["role"], row["first_seen"]
        was = self._parent.get(pid)
        if was != (ppid, role, first_seen):
            if was is None or was[0] != ppid:
                self._children.setdefault(ppid, []).append(pid)
            if was is None or was[:2] != (ppid, role):
                self._moved.add(pid)
            self._parent[pid] = (ppid, role, first_seen)
        key = (pid, first_seen)
        self._put_rank(key, row, again=was is not None and was[2] == first_seen)
        self._put_peers(key, row.get("peers"))

    def drop(self, pid: int) -> None:
        """The process of `pid` is no longer known: another one took its pid."""
        if self._parent.pop(pid, None) is None:
            return
        self._moved.add(pid)
        self._ranks = {k: v for k, v in self._ranks.items() if k[0] != pid}
        for key in [k for k in self._peer_rows if k[0] == pid]:
            del self._peer_rows[key]
            self._recount = True

    def _put_rank(self, key: tuple[int, int], row: Mapping, again: bool) -> None:
        rank = row.get("rank")
        if row["role"] != RANK or rank is None:
            self._ranks.pop(key, None)
            return
        new = key not in self._ranks
        self._ranks[key] = (Rank(int(rank), int(row["world_size"]), int(row["ppid"])),
                            row.get("exit"))
        if new and again:  # a process put before became a rank: in the rows' order
            at = {pid: i for i, pid in enumerate(self._parent)}
            self._ranks = dict(sorted(self._ranks.items(), key=lambda kv: at[kv[0][0]]))

    def _put_peers(self, key: tuple[int, int], peers: str | None) -> None:
        was = self._peer_rows.get(key)
        if peers == was:
            return
        if not peers:
            if was is not None:
                del self._peer_rows[key]
                self._recount = True
            return
        self._peer_rows[key] = peers
        if was is None:
            self._uncounted[key] = 0
        elif peers.startswith(was + ", "):  # more of them: the new ones are counted
            self._uncounted.setdefault(key, len(was.split(", ")))
        else:
            self._recount = True

    def owners(self) -> dict[int, int]:
        """Each process's training loop, by pid (`loop_of`). A row does not say whether the
        user named its process: a traced process whose parent is not traced was (iotrace
        follows every traced process's children from their fork), which is what the live table
        knows. Redone for the processes put with another parent or role, and those below them."""
        if self._moved:
            owner = dict(self._owner) if self._owner_given else self._owner
            for pid in self._below(self._moved):
                if pid not in self._parent:
                    owner.pop(pid, None)
                    continue
                loop = owner[pid] = loop_of(pid, self._entry)
                if self._counted_for.get(pid, loop) != loop:
                    self._recount = True
            self._moved, self._owner, self._owner_given = set(), owner, False
        self._owner_given = True
        return self._owner

    def _entry(self, pid: int) -> tuple[int, str, bool] | None:
        e = self._parent.get(pid)
        return None if e is None else (e[0], e[1], e[0] not in self._parent)

    def _below(self, pids: Iterable[int]) -> set[int]:
        """`pids` and the processes below them, by the parents their rows name now."""
        out: set[int] = set()
        todo = list(pids)
        while todo:
            pid = todo.pop()
            if pid not in out:
                out.add(pid)
                todo.extend(c for c in self._children.get(pid, ())
                            if (e := self._parent.get(c)) is not None and e[0] == pid)
        return out

    def ranks(self, ts_ns: int) -> dict[int, Rank]:
        """The ranks alive at `ts_ns` whose environment's numbers are known, by pid; a rank's
        job is its parent (torchrun's agent, which started it)."""
        out = {}
        for (pid, _), (place, end) in self._ranks.items():
            if end is None or end > ts_ns:
                out[pid] = place
        return out

    def peers(self) -> dict[int, list[str]]:
        """Per training loop, the TCP peers its processes' rows name, at most MAX_PEERS:
        processes in the order they were first seen, each's peers in the order it saw them.
        A row's peers are counted once, as they come."""
        owner = self.owners()
        if self._recount:
            self._first, self._counted_for, self._recount = {}, {}, False
            self._uncounted = dict.fromkeys(self._peer_rows, 0)
            self._peers = None
        if self._uncounted:
            for (pid, first_seen), start in self._uncounted.items():
                loop = self._counted_for[pid] = owner[pid]
                first = self._first.setdefault(loop, {})
                for i, peer in enumerate(self._peer_rows[pid, first_seen].split(", ")[start:],
                                         start):
                    _name_first(first, peer, (first_seen, pid, i))
            self._uncounted, self._peers = {}, None
        if self._peers is None:
            self._peers = {loop: sorted(first, key=first.__getitem__) for loop, first
                           in sorted(self._first.items(), key=lambda lf: min(lf[1].values()))}
        return self._peers


def _name_first(first: dict[str, tuple[int, int, int]], peer: str,
                at: tuple[int, int, int]) -> None:
    """Keeps in `first` (peer -> where first named) the MAX_PEERS peers named first, with
    `peer` named at `at`: a peer left out was named after all those kept, and stays so."""
    if peer in first:
        first[peer] = min(first[peer], at)
    elif len(first) < MAX_PEERS:
        first[peer] = at
    else:
        last = max(first, key=first.__getitem__)
        if at < first[last]:
            del first[last]
            first[peer] = at


def known_at(processes: Sequence[Mapping], ts_ns: int) -> list[Mapping]:
    """The rows of the processes first seen by `ts_ns` (a replay's rows are each process's last:
    those of processes not yet started say nothing of the interval)."""
    return [r for r in processes if r["first_seen"] <= ts_ns]


def interval_input(ts_ns: int, interval_ns: int, rows: Mapping[str, Sequence],
                   processes: Known, carried: bool = False) -> IntervalInput:
    """The interval ending at `ts_ns` as the diagnosis is told it: `rows`, per table name
    (TABLES; a table left out has none), and the processes known at its end. `carried`: a
    replay's interval that leaves the diagnosis's window before the end (IntervalInput)."""
    return IntervalInput(ts_ns, interval_ns, **{t: list(rows.get(t, ())) for t in TABLES},
                         owners=processes.owners(), ranks=processes.ranks(ts_ns),
                         peers=processes.peers(), carried=carried)


def feed(diagnosis: Diagnosis, inp: IntervalInput) -> list[LoopRow]:
    """Tells `diagnosis` one interval; returns the `loop` rows. The one call of the diagnosis
    per interval, live and in a replay (`Diagnosis.add`: ranks are added to those it knows, and
    each loop's peers are the input's, a list so far)."""
    return diagnosis.add(inp)

