"""Each training loop's time with a file open for writing (a write span: from opening an empty
file for writing to closing it), per interval, from the kernel's per-thread record
(abi.WriteSpans): the span open now, counted as it passes, and the last one closed, counted to
its end. A save is such a span whose file turns out to be a checkpoint (the diagnosis decides,
split.py); here it is only time and a file.

Exact over a run: each span's time is counted once, from its open (or the last reading that
counted it) to its close (or this reading). A span the kernel opened again (an fsync of its file
right after its close) keeps its start, and is counted on from where it was. Two spans opened and
closed between two readings: only the last is seen (the kernel keeps one), the earlier one's
time is not counted.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from tracer.core.abi import WriteSpans

FileId = tuple[int, int, int]  # (dev, ino, gen)


@dataclass
class SpanClock:
    """Per main pid: how far each span seen at the last reading (the open one and the last
    closed one, by their start) was counted, CLOCK_MONOTONIC ns."""

    counted: dict[int, dict[int, int]] = field(default_factory=dict)

    def advance(self, pid: int, span: WriteSpans, mono_ns: int) -> dict[FileId, int]:
        """The time in write spans since the last reading (read at `mono_ns`), per file."""
        out: dict[FileId, int] = defaultdict(int)
        before = self.counted.get(pid, {})
        now: dict[int, int] = {}
        if span.ended_since:
            start = before.get(span.ended_since, span.ended_since)
            out[span.ended_file] += max(0, span.ended - start)
            now[span.ended_since] = max(start, span.ended)
        if span.since:  # open now; a span opened again (an fsync after its close) goes on
            # from its close, not its start
            start = now.get(span.since, before.get(span.since, span.since))
            out[span.file] += max(0, mono_ns - start)
            now[span.since] = max(start, mono_ns)
        self.counted[pid] = now
        return {f: ns for f, ns in out.items() if ns}

    def forget(self, pid: int) -> None:
        self.counted.pop(pid, None)
