"""The window of kept intervals: the last MAX_INTERVALS intervals' evidence (an hour at -i 1),
what is known of their processes (ranks, TCP peers), and the questions asked of them (which
intervals are training, start-ups, the loop's split and each rank's, the context the summary
gives beside the findings)."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from tracer.core.diagnosis.evidence import IntervalEvidence, StartUp
from tracer.core.diagnosis.finding import STATES, RankLoop
from tracer.core.diagnosis.input import Rank
from tracer.core.diagnosis.reads import Reads, count_files
from tracer.core.diagnosis.split import SplitState
from tracer.core.diagnosis.thresholds import MAX_INTERVALS, MAX_PEERS


@dataclass
class BackgroundSave:
    """A main process's checkpoints saved in the background, over the window."""

    pid: int
    child: bool  # a child process saved (else its threads)
    bytes: int
    blocked_ns: int  # the saver's time blocked writing
    waited_ns: int  # the loop's wait for it
    loop_ns: int  # the loop's time


@dataclass
class OtherTime:
    """A loop's `other` time over its training, and what it was."""

    pid: int
    other_ns: int
    loop_ns: int
    parts: tuple[int, int, int]  # runnable; asleep, woken by its own threads; by timers/others


@dataclass
class Window:
    state: SplitState  # the split's: when each main's start-up ended, who saved in background
    startup: bool = False  # a launched command: its mains' start-ups are not judged
    # Memory stays bounded on runs of days; the verdicts at the end of a longer trace cover its
    # last hour (the `loop` table has every interval).
    intervals: deque[IntervalEvidence] = field(
        default_factory=lambda: deque(maxlen=MAX_INTERVALS))
    ranks: dict[int, Rank] = field(default_factory=dict)  # rank pid -> its place in its job
    # main pid -> the TCP peers (address:port) its processes were seen talking to, bounded
    peers: dict[int, list[str]] = field(default_factory=dict)

    def learn(self, ranks: dict[int, Rank], peers: dict[int, list[str]]) -> None:
        """What an interval's input says of the processes: ranks, added to those known (the
        latest word stands), and each loop's TCP peers so far, which replace what was known of
        it (at most MAX_PEERS): the input's list is the whole, in the order a replay of the
        trace gives too."""
        self.ranks.update(ranks)
        self.peers.update({main: list(seen[:MAX_PEERS]) for main, seen in peers.items()})

    def last(self, window_s: float | None) -> list[IntervalEvidence]:
        """The intervals that end in the last `window_s` seconds (None: all kept)."""
        ivs = list(self.intervals)
        if window_s is not None and ivs:
            since = ivs[-1].ts_ns - int(window_s * 1e9)
            ivs = [iv for iv in ivs if iv.ts_ns > since]
        return ivs

    def training_since(self, pid: int) -> int | None:
        """Start of the first interval of main `pid` that counts as training (earlier ones are
        its start-up), or None: no start-up seen, every interval counts."""
        if not self.startup:
            return None
        return self.state.first_worker_ns.get(pid, self.state.first_data_ns.get(pid))

    def training(self, iv: IntervalEvidence, pid: int) -> bool:
        since = self.training_since(pid)
        return since is None or iv.ts_ns > since

    def data_read(self, iv: IntervalEvidence) -> Reads | None:
        """The data set's reads in `iv` by the mains in training then; None when every main
        with a loop there was still starting up."""
        mains = set(iv.loops) | set(iv.data)
        if mains and not any(self.training(iv, pid) for pid in mains):
            return None
        reads = [r for pid, r in iv.data.items() if self.training(iv, pid)]
        if len(reads) == 1:
            return reads[0]  # the interval's own, read-only: no copy of an hour of them
        out = Reads()
        for r in reads:
            out.merge(r)
        return out

    def startups(self) -> list[StartUp]:
        """The start-up of every main process seen from its start, in pid order."""
        out = []
        for pid in sorted({p for iv in self.intervals for p in iv.loop_time}):
            since = self.training_since(pid)
            ivs = [iv for iv in self.intervals
                   if iv.ts_ns <= (since or 0) and (pid in iv.loop_time or pid in iv.data)]
            if ivs:
                out.append(_startup(pid, since, ivs, pid in self.state.first_worker_ns))
        return out

    def loop_split(self) -> dict[int, tuple[int, int, dict[str, int]]]:
        """Per loop pid: its training time, its start-up time and its training time by state
        (ns), over the intervals kept (what `TraceReader.loop_split` gives from the rows)."""
        out: dict[int, tuple[int, int, dict[str, int]]] = {}
        for iv in self.intervals:
            for pid, loop in iv.loops.items():
                total, startup, ns = out.get(pid, (0, 0, dict.fromkeys(STATES, 0)))
                if self.training(iv, pid):
                    for s in STATES:
                        ns[s] += loop.ns[s]
                    total += sum(loop.ns.values())
                else:
                    startup += iv.interval_ns
                out[pid] = (total, startup, ns)
        return out

    def rank_loops(self, ivs: Iterable[IntervalEvidence] | None = None,
                   since_ns: int | None = None, until_ns: int | None = None
                   ) -> dict[int, dict[int, RankLoop]]:
        """Per job, per rank: its processes (a rank the agent restarted has several), its
        world size and its loop's training time by state, over `ivs` (default: the intervals
        kept) that end in (since_ns, until_ns]."""
        jobs: dict[int, dict[int, RankLoop]] = defaultdict(dict)
        for pid, place in self.ranks.items():
            r = jobs[place.job].setdefault(
                place.rank, RankLoop(place.rank, place.world_size, [], dict.fromkeys(STATES, 0),
                                     {}))
            r.pids.append(pid)
            r.world = max(r.world, place.world_size)
        for iv in self.intervals if ivs is None else ivs:
            if (since_ns is not None and iv.ts_ns <= since_ns) or (
                    until_ns is not None and iv.ts_ns > until_ns):
                continue
            for pid, loop in iv.loops.items():
                if pid not in self.ranks or not self.training(iv, pid):
                    continue
                place = self.ranks[pid]
                r = jobs[place.job][place.rank]
                for st in STATES:
                    r.ns[st] += loop.ns[st]
                r.pid_ns[pid] = r.pid_ns.get(pid, 0) + sum(loop.ns.values())
        return jobs

    def background_saves(self) -> list[BackgroundSave]:
        """Per main process that saved checkpoints in the background, over every interval kept,
        in pid order."""
        out = []
        ivs = list(self.intervals)
        for pid in sorted(self.state.background_savers):
            bg = [iv.background[pid] for iv in ivs if pid in iv.background]
            total = sum(sum(iv.loops[pid].ns.values()) for iv in ivs if pid in iv.loops)
            if bg and total:
                out.append(BackgroundSave(
                    pid, any(b.child for b in bg), sum(b.bytes for b in bg),
                    sum(b.blocked_ns for b in bg), sum(b.waited_ns for b in bg), total))
        return out

    def other_time(self) -> list[OtherTime]:
        """Per loop, in pid order: its `other` time over its training, and what that was."""
        out = []
        for pid in sorted({p for iv in self.intervals for p in iv.loops}):
            ivs = [iv for iv in self.intervals if pid in iv.loops and self.training(iv, pid)]
            parts = [sum(iv.other_parts.get(pid, (0, 0, 0))[i] for iv in ivs) for i in range(3)]
            out.append(OtherTime(pid, sum(iv.loops[pid].ns["other"] for iv in ivs),
                                 sum(sum(iv.loops[pid].ns.values()) for iv in ivs),
                                 (parts[0], parts[1], parts[2])))
        return out


def _startup(pid: int, since: int | None, ivs: list[IntervalEvidence], workers: bool) -> StartUp:
    """Main `pid`'s start-up, over its intervals `ivs` up to `since`."""
    until = ("its first DataLoader worker started" if workers
             else "it started reading its data set")
    files: dict[str, tuple[bool, int]] = {}  # path -> (library?, bytes)
    in_folder: dict[str, int] = {}  # a folder row's path -> its files
    missed = 0
    for iv in ivs:
        for lib, reads in ((True, iv.library.get(pid)), (False, iv.data.get(pid))):
            if reads is None:
                continue
            missed += reads.missed
            for (path, _fs), n in reads.files.items():
                files[path] = (lib, files.get(path, (lib, 0))[1] + n)
            for (path, _fs), n in reads.folder_files.items():
                in_folder[path] = in_folder.get(path, 0) + n
    times = [iv.loop_time.get(pid, (0, 0, 0)) for iv in ivs]
    start = ivs[0].ts_ns - ivs[0].interval_ns
    return StartUp(
        pid, until, (since - start) / 1e9, sum(x[0] for x in times),
        sum(x[1] for x in times), sum(x[2] for x in times), count_files(files, in_folder),
        count_files((p for p, (lib, _) in files.items() if lib), in_folder),
        count_files((p for p in files if "/site-packages/" in p or "/dist-packages/" in p),
                    in_folder),
        sum(n for _, n in files.values()), missed)
