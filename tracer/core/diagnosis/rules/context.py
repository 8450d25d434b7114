"""What every rule is given (`Context`), and the sums over it that several rules share."""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass, field, replace

from tracer.core.diagnosis.evidence import IntervalEvidence
from tracer.core.diagnosis.finding import STATES, Finding
from tracer.core.diagnosis.reads import Reads
from tracer.core.diagnosis.thresholds import Thresholds
from tracer.core.diagnosis.window import Window
from tracer.core.stacks import CodeLine
from tracer.core.units import MAX_SLOTS


@dataclass(frozen=True)
class LoopTime:
    """One main's loop over the intervals judged: its training time by state."""

    ns: dict[str, int]
    total: int

    @functools.cached_property
    def share(self) -> dict[str, float]:
        return {s: self.ns[s] / self.total for s in STATES}

    @functools.cached_property
    def pct(self) -> dict[str, float]:
        """Its shares in percent, rounded as the evidence gives them (`loop_shares_pct`)."""
        return {s: round(100 * self.share[s], 1) for s in STATES}


@dataclass
class Context:
    """The window a rule judges.

    A loop rule (rules.LOOP_RULES) is given one main at a time: `pid` and, in `ivs`, that
    main's training intervals; the others the whole window: `ivs` are the intervals judged
    (the last `window_s` seconds) and `mains` the loops seen in them. `found` holds the
    findings of the rules before, in the registry's order."""

    window: Window
    thresholds: Thresholds
    ivs: list[IntervalEvidence]
    mains: list[int]
    found: list[Finding] = field(default_factory=list)
    pid: int | None = None

    def for_main(self, pid: int) -> Context:
        """The context of a loop rule judging main `pid`: its training intervals only."""
        return replace(self, pid=pid,
                       ivs=[iv for iv in self.ivs if self.window.training(iv, pid)])

    @functools.cached_property
    def loop(self) -> LoopTime:
        """Main `pid`'s loop time over `ivs`."""
        ns = dict.fromkeys(STATES, 0)
        for iv in self.ivs:
            if self.pid in iv.loops:
                for s in STATES:
                    ns[s] += iv.loops[self.pid].ns[s]
        return LoopTime(ns, sum(ns.values()))

    def training_ns(self) -> int:
        """Every main's training time over the intervals judged."""
        return sum(self.for_main(pid).loop.total for pid in self.mains)

    def io_severity(self) -> int | None:
        """The severity of the most severe finding that the loops waited on their reads
        (`sync_loading`, `dataloader_io_bound`); None without one."""
        found = [f.severity for f in self.found
                 if f.kind in ("sync_loading", "dataloader_io_bound")]
        return max(found) if found else None

    @functools.cached_property
    def reads(self) -> list[Reads]:
        """The data set's reads of each interval judged in which some main was training."""
        return [r for r in self._reads if r is not None]

    @functools.cached_property
    def training(self) -> list[IntervalEvidence]:
        """The intervals judged in which some main was training (all, when none was)."""
        return [iv for iv, r in zip(self.ivs, self._reads, strict=True) if r is not None] or (
            self.ivs)

    @functools.cached_property
    def _reads(self) -> list[Reads | None]:
        return [self.window.data_read(iv) for iv in self.ivs]


def merged_reads(ivs: list[IntervalEvidence], pid: int) -> dict[str, list[int]]:
    """Main `pid`'s file reads in `ivs`, per role, as log2 slot counts."""
    out: dict[str, list[int]] = {}
    for iv in ivs:
        for (main, role), counts in iv.read_counts.items():
            if main == pid:
                acc = out.setdefault(role, [0] * MAX_SLOTS)
                for i, c in enumerate(counts):
                    acc[i] += c
    return out


def slowest(ivs: list[IntervalEvidence], pid: int, role: str, reads: dict[str, list[int]]
            ) -> int | None:
    """The slowest file read of main `pid`'s processes of `role` in `ivs`, when the files rows
    cover every read of the histogram (a percentile stays at or below it), else None."""
    ops = top = 0
    for iv in ivs:
        n, m = iv.read_max.get((pid, role), (0, 0))
        if m < 0:
            return None
        ops, top = ops + n, max(top, m)
    return top if top and ops == sum(reads.get(role, [])) else None


def top_dir(ivs: list[IntervalEvidence], pid: int) -> tuple[str, str] | None:
    """The directory holding most of the data set's bytes that main `pid`'s processes read in
    `ivs`, with its file system type."""
    by_dir: dict[tuple[str, str], int] = defaultdict(int)
    for iv in ivs:
        r = iv.data.get(pid)
        for (path, fs), n in (r.files.items() if r else ()):
            by_dir[(path.rsplit("/", 1)[0] or "/", fs)] += n
    if not by_dir:
        return None
    return max(by_dir, key=by_dir.get)


def worker_times(ivs: list[IntervalEvidence], pid: int) -> tuple[int, int]:
    """Main `pid`'s DataLoader workers' time on CPU and blocked (D) in `ivs`."""
    return (sum(iv.worker_oncpu_ns.get(pid, 0) for iv in ivs),
            sum(iv.worker_iowait_ns.get(pid, 0) for iv in ivs))


def worker_reclaim(ivs: list[IntervalEvidence], pid: int) -> tuple[int, int]:
    """Main `pid`'s DataLoader workers' time in memory reclaim in `ivs`, and of it blocked (D):
    the part of their CPU and D time that memory took, not their work or their reads."""
    found = [iv.reclaim[pid] for iv in ivs if pid in iv.reclaim]
    return (sum(r.workers[1] for r in found), sum(r.workers_blocked_ns for r in found))


def worker_faults(ivs: list[IntervalEvidence], pid: int) -> int:
    """Main `pid`'s DataLoader workers' time blocked in page faults in `ivs` (outside reclaim)."""
    return sum(iv.reclaim[pid].workers_fault_ns for iv in ivs if pid in iv.reclaim)


def memory_short(ivs: list[IntervalEvidence], pid: int, t: Thresholds) -> bool:
    """Whether main `pid`'s job was short of memory in `ivs`: its threads reclaimed
    memory_reclaim_min_ns or more, or its memory cgroup met its limit, or swap was in use.
    Its page faults' waits are then pages evicted and read back (memory's), else mapped files
    read (storage's)."""
    found = [iv.reclaim[pid] for iv in ivs if pid in iv.reclaim]
    reclaimed = sum(r.loop[1] + r.workers[1] + r.other_ns for r in found)
    rows = [iv.memory[pid] for iv in ivs if pid in iv.memory]
    return reclaimed >= t.memory_reclaim_min_ns or any(
        (m.get("limit_hits") or 0) > 0 or (m.get("swap_bytes") or 0) > 0 for m in rows)


def less_reclaim(share: float, part: int, reclaimed: int) -> float:
    """A data-wait share of the loop's time without what the workers' reclaim explains: of
    their `part` (time on CPU, or blocked) `reclaimed` went to reclaim."""
    return share * (1 - min(reclaimed, part) / part) if part else share


def data_wait_pct(loop: LoopTime) -> float:
    """The loop's wait for batches, all causes, in percent (as the evidence rounds them)."""
    return loop.pct["data_wait_io"] + loop.pct["data_wait_cpu"] + loop.pct["data_wait_network"]


def code_line(ivs: list[IntervalEvidence], pid: int, reasons: tuple[str, ...],
              roles: tuple[str | None, ...] | None = None, main_thread: bool | None = None
              ) -> CodeLine | None:
    """The line of the user's code that main `pid`'s processes were sampled at most often in
    `ivs` for one of `reasons` (of processes of `roles`, on their main thread or not, when
    given), in the function sampled most often; the latest sample's text of it. None: no such
    sample."""
    seen: dict[tuple[str, int, str], int] = defaultdict(int)
    last: dict[tuple[str, int, str], CodeLine] = {}
    for iv in ivs:
        for s in iv.code.get(pid, ()):
            if s.reason not in reasons or (roles is not None and s.role not in roles):
                continue
            if main_thread is not None and s.main_thread != main_thread:
                continue
            key = (s.code.file, s.code.line, s.code.function)
            seen[key] += 1
            if s.code.text or key not in last:
                last[key] = s.code
    if not seen:
        return None
    # the function sampled most, then its line sampled most: a loop's body spreads its samples
    # over several lines of one function. Of lines sampled as often, the first: the statement
    # that starts the work (a save's `torch.save` before its fsync), not a coin's toss
    in_function: dict[tuple[str, str], int] = defaultdict(int)
    for (file, _line, function), n in seen.items():
        in_function[(file, function)] += n
    return last[max(seen, key=lambda k: (in_function[(k[0], k[2])], seen[k], -k[1], k))]
