"""`Diagnosis`: one interval's input in, its loop rows out; findings over the window on demand.

It holds the split's state across intervals (split.py), the window of kept intervals
(window.py) and the thresholds (thresholds.py), and asks the rules (rules/) for findings.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from tracer.core.diagnosis import rules
from tracer.core.diagnosis.evidence import IntervalEvidence, StartUp
from tracer.core.diagnosis.finding import Finding, RankLoop
from tracer.core.diagnosis.input import IntervalInput
from tracer.core.diagnosis.rules.context import Context
from tracer.core.diagnosis.rules.straggler_rank import judge_ranks
from tracer.core.diagnosis.split import SplitState, split
from tracer.core.diagnosis.thresholds import THRESHOLDS, Thresholds
from tracer.core.diagnosis.window import BackgroundSave, OtherTime, Window
from tracer.core.model import LoopRow
from tracer.core.units import PAGE_SIZE


@dataclass
class Diagnosis:
    thresholds: Thresholds = THRESHOLDS
    page_size: int = PAGE_SIZE  # the bytes of a missed page (the `files` rows count pages)
    # Start-up (docs/diagnosis.md), in launch mode only: each main's intervals before its first
    # DataLoader worker ran, or before it first read its data, are not judged.
    startup: bool = False
    state: SplitState = field(default_factory=SplitState)
    window: Window = field(init=False)

    def __post_init__(self) -> None:
        self.window = Window(self.state, self.startup)

    @property
    def intervals(self):
        """The kept intervals' evidence, oldest first (a deque of `IntervalEvidence`)."""
        return self.window.intervals

    @property
    def written_total(self) -> dict[tuple[int, str], int]:
        """(main pid, path) -> bytes its loop's processes wrote to that file so far."""
        return self.state.written_total

    def add(self, inp: IntervalInput) -> list[LoopRow]:
        """One interval: what it says of the processes (ranks, peers) is learnt first, then its
        loops' time is split and its evidence kept. Returns its rows of the `loop` table; of a
        replay's `carried` interval, only the state is kept, and no rows are made."""
        self.window.learn(inp.ranks, inp.peers)
        iv = split(self.state, inp, self.thresholds, self.page_size, self.window.ranks,
                   evidence=not inp.carried)
        if iv is None:  # carried
            return []
        self.window.intervals.append(iv)
        return [loop.row() for loop in iv.loops.values()]

    def findings(self, window_s: float | None = None) -> list[Finding]:
        """Verdicts over the last `window_s` seconds (None: every interval kept), most severe
        first."""
        ivs = self.window.last(window_s)
        if not ivs:
            return []
        # Verdicts judge training: each main's start-up intervals are left out (startups()).
        mains = sorted({pid for iv in ivs for pid in iv.loops})
        ctx = Context(self.window, self.thresholds, ivs, mains)
        if ctx.training_ns() < self.thresholds.judge_min_ns:
            return []  # nothing traced long enough to judge
        out = rules.judge(ctx)
        start, end = ivs[0].ts_ns - ivs[0].interval_ns, ivs[-1].ts_ns
        for f in out:
            f.start_ns, f.end_ns = start, end
            if f.pid in self.window.ranks and f.rank is None:
                f.rank = self.window.ranks[f.pid].rank
        return sorted(out, key=lambda f: -f.severity)

    def training_since(self, pid: int) -> int | None:
        """Start of the first interval of main `pid` that counts as training (earlier ones are
        its start-up), or None: no start-up seen, every interval counts."""
        return self.window.training_since(pid)

    def loop_split(self) -> dict[int, tuple[int, int, dict[str, int]]]:
        """Per loop pid: its training time, its start-up time and its training time by state
        (ns), over the intervals kept (what `TraceReader.loop_split` gives from the rows)."""
        return self.window.loop_split()

    def startups(self) -> list[StartUp]:
        """The start-up of every main process seen from its start, in pid order."""
        return self.window.startups()

    def long_startups(self) -> list[StartUp]:
        """The start-ups long enough for the summary to say what they waited for."""
        return [s for s in self.startups() if s.seconds >= self.thresholds.startup_long_s]

    def background_saves(self) -> list[BackgroundSave]:
        """Background saves that cost the loop less than a `checkpoint_stall` (a finding says
        the others), per main process."""
        return [b for b in self.window.background_saves()
                if b.waited_ns < self.thresholds.checkpoint_share * b.loop_ns]

    def other_time(self) -> list[OtherTime]:
        """Per loop whose `other` time is a large enough share of its training to say what it
        was."""
        return [o for o in self.window.other_time()
                if o.loop_ns and o.other_ns >= self.thresholds.other_line_share * o.loop_ns]

    def rank_loops(self, ivs: Iterable[IntervalEvidence] | None = None,
                   since_ns: int | None = None, until_ns: int | None = None
                   ) -> dict[int, dict[int, RankLoop]]:
        """Per job, per rank: its processes, world size and loop's training time by state, over
        `ivs` (default: the intervals kept) that end in (since_ns, until_ns]."""
        return self.window.rank_loops(ivs, since_ns, until_ns)

    def judge_ranks(self, ranks: dict[int, RankLoop], found: list[Finding],
                    where: dict[int, str] | None = None) -> Finding | None:
        """The straggler among the ranks of one job, if any (`straggler_rank`); `found`: the
        findings its cause is taken from; `where`: per rank, the host it ran on."""
        return judge_ranks(ranks, found, self.thresholds, where)
