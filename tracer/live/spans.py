"""Each training loop's time with a file open for writing (a write span: from opening an empty
file for writing to closing it), per interval, from the kernel's per-thread record
(abi.WriteSpans): the span open now, counted as it passes, and the last one closed, counted to
its end. A save is such a span whose file turns out to be a checkpoint (the diagnosis decides,
split.py); here it is only time and a file.

Exact over a run: each span's time is counted once, from its open (or the last reading that
counted it) to its close (or this reading). Two spans opened and closed between two readings:
only the last is seen (the kernel keeps one), the earlier one's time is not counted.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from tracer.core.abi import WriteSpans

FileId = tuple[int, int, int]  # (dev, ino, gen)


@dataclass
class _Open:
    since: int
    file: FileId
    counted: int  # counted up to here (CLOCK_MONOTONIC ns)


@dataclass
class SpanClock:
    """Per main pid: the span counted at the last reading, and the last closed span counted."""

    open: dict[int, _Open] = field(default_factory=dict)
    ended: dict[int, int] = field(default_factory=dict)  # pid -> since of the last closed one

    def advance(self, pid: int, span: WriteSpans, mono_ns: int) -> dict[FileId, int]:
        """The time in write spans since the last reading (read at `mono_ns`), per file."""
        out: dict[FileId, int] = defaultdict(int)
        prev = self.open.pop(pid, None)
        if prev is not None and span.since == prev.since:  # still open
            out[prev.file] += max(0, mono_ns - prev.counted)
            self.open[pid] = _Open(prev.since, prev.file, max(prev.counted, mono_ns))
            return dict(out)
        if span.ended_since and span.ended_since != self.ended.get(pid):
            self.ended[pid] = span.ended_since
            start = prev.counted if prev is not None and prev.since == span.ended_since else (
                span.ended_since)
            out[span.ended_file] += max(0, span.ended - start)
        if span.since:  # a new one, open now
            out[span.file] += max(0, mono_ns - span.since)
            self.open[pid] = _Open(span.since, span.file, max(span.since, mono_ns))
        return dict(out)

    def forget(self, pid: int) -> None:
        self.open.pop(pid, None)
        self.ended.pop(pid, None)
