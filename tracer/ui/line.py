"""One dstat-like line per interval, for stdout that is not a terminal or --no-tui.

    --time-- ---cpu %--- -disk MB/s- --file reads-- -------------loop %------------ ---finding---
        time|usr sys wai| read  writ|  ops/s    p99|dwio dwcpu load ckpt comp other|kind
    22:13:22| 35   8  22|  150  10.0|    161 5.01ms|  45    10    0    0   40     5|dataloader_io_bound

Columns: local time at the end of the interval; cpu usr/sys/wai percent (dstat's, tracer.live.procfs);
disk read/write MB/s (2**20 bytes, whole disks, dstat's dsk/total); file read syscalls of every
traced process per second and their p99 latency (log2 histogram); the training loop's time by
state in percent (dwio/dwcpu: data wait I/O/CPU, load: sync loading, ckpt: checkpoint, comp:
compute), summed over the main processes ('-' when no loop ran); the kind of the leading
finding ('-' when none). Values too wide for their column push the line right, they are never cut.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, TextIO

from tracer.core.histogram import percentile_ns
from tracer.core.model import LoopRow, Snapshot
from tracer.core.vocab import LOOP_STATES
from tracer.ui import stats
from tracer.ui.fmt import clock, short_ns

if TYPE_CHECKING:
    from tracer.core.interval import Interval

MB = 1 << 20
HEADER_EVERY = 25  # LinePrinter repeats the header after this many lines, as dstat does

# (group, [(column, width)]); values are right-aligned to the width, groups joined by '|'.
COLUMNS = (
    ("time", [("time", 8)]),
    ("cpu %", [("usr", 3), ("sys", 3), ("wai", 3)]),
    ("disk MB/s", [("read", 5), ("writ", 5)]),
    ("file reads", [("ops/s", 7), ("p99", 6)]),
    ("loop %", [("dwio", 4), ("dwcpu", 5), ("dwnet", 5), ("load", 4), ("wrt", 4), ("ckpt", 4),
                ("coll", 4), ("gpu", 4), ("dcpy", 4), ("comp", 4), ("other", 5)]),  # in LOOP_STATES order
)


def _group_width(cols: list[tuple[str, int]]) -> int:
    return sum(w for _, w in cols) + len(cols) - 1


def header_line() -> str:
    """The two header lines (group names, column names), joined by a newline."""
    groups = " ".join(name.center(_group_width(cols), "-") for name, cols in COLUMNS)
    names = "|".join(" ".join(f"{c:>{w}}" for c, w in cols) for _, cols in COLUMNS)
    return f"{groups} ---finding---\n{names}|kind"


def _mbs(n: float) -> str:
    mb = n / MB
    return f"{mb:.0f}" if mb >= 99.95 else f"{mb:.1f}"


def interval_line(snapshot: Snapshot, loop_rows: Iterable[LoopRow] = (), findings: Sequence = (),
                  interval_s: float = 1.0) -> str:
    """The line of one interval: `snapshot` (tracer.core.model.Snapshot), its `loop` rows, the
    current findings (most severe first); `interval_s` stands in when the snapshot has no
    interval (the first of a run)."""
    itv_s = stats.interval_ns(snapshot, interval_s) / 1e9
    sysrow = snapshot.system
    if sysrow:
        cpu = [f"{sysrow[k]:.0f}" for k in ("cpu_user_pct", "cpu_sys_pct", "cpu_iowait_pct")]
        disk = [_mbs(sysrow["disk_read_bytes_s"]), _mbs(sysrow["disk_write_bytes_s"])]
    else:
        cpu, disk = ["-"] * 3, ["-"] * 2
    reads = stats.read_syscalls(snapshot)
    n = sum(reads)
    io = [f"{n / itv_s:.0f}", short_ns(percentile_ns(reads, 99)) if n else "-"]
    shares = stats.loop_shares(loop_rows)
    loop = [f"{shares[s]:.0f}" for s in LOOP_STATES] if shares else ["-"] * len(LOOP_STATES)
    values = [[clock(snapshot.ts_ns)], cpu, disk, io, loop]
    cells = "|".join(" ".join(f"{v:>{w}}" for v, (_, w) in zip(vals, cols, strict=True))
                     for vals, (_, cols) in zip(values, COLUMNS, strict=True))
    return f"{cells}|{findings[0].kind if findings else '-'}"


class LinePrinter:
    """Writes `header_line` first and again every HEADER_EVERY lines, then one line per
    interval (interval_line), flushed, so `| tee` and logs see it live. The run's last, partial,
    interval gets no line: the summary follows it at once.

    `on_error`: called once with the OSError of a write that failed (the reader left, the
    terminal is gone), after which nothing more is written; None raises it."""

    def __init__(self, out: TextIO, interval_s: float = 1.0, header_every: int = HEADER_EVERY,
                 on_error: Callable[[OSError], None] | None = None) -> None:
        self.out, self.interval_s, self.header_every = out, interval_s, header_every
        self.on_error = on_error
        self.lines = 0
        self.failed = False

    def write(self, interval: Interval) -> None:
        if interval.final or self.failed:
            return
        try:
            if self.header_every and self.lines % self.header_every == 0:
                print(header_line(), file=self.out)
            print(interval_line(interval.snapshot, interval.loop, interval.findings,
                                self.interval_s), file=self.out, flush=True)
        except OSError as e:
            if self.on_error is None:
                raise
            self.failed = True
            self.on_error(e)
            return
        self.lines += 1

    def close(self) -> None:
        """Nothing to release: `out` belongs to the caller."""


class NotePrinter:
    """Prints each interval's notes (a GPU lost, ...) as `iotrace: NOTE` lines on `err`; where
    the live view owns the terminal, there is no NotePrinter."""

    def __init__(self, err: TextIO) -> None:
        self.err = err

    def write(self, interval: Interval) -> None:
        for note in interval.notes:
            print(f"iotrace: {note}", file=self.err, flush=True)

    def close(self) -> None:
        """Nothing to release: `err` belongs to the caller."""
