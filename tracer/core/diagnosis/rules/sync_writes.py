"""sync_writes: the training loop writes and fsyncs files that are not checkpoints itself
(logs, metrics).

Thresholds: sync_writes_share (of the loop's training time in `sync_writes`)."""

from __future__ import annotations

from tracer.core.diagnosis import words
from tracer.core.diagnosis.finding import Finding, severity
from tracer.core.diagnosis.rules.context import Context, code_line
from tracer.core.stacks import SAVE, SLOW_WRITE
from tracer.core.vocab import LOOP_ROLES


def judge(ctx: Context) -> list[Finding]:
    loop, pid, ivs = ctx.loop, ctx.pid, ctx.ivs
    if loop.total <= 0 or loop.share["sync_writes"] < ctx.thresholds.sync_writes_share:
        return []
    by_path: dict[str, list[int]] = {}  # path -> [writes, fsyncs, fsync ns]
    for iv in ivs:
        for path, w in iv.small_writes.get(pid, {}).items():
            acc = by_path.setdefault(path, [0, 0, 0])
            for i in range(3):
                acc[i] += w[i]
    secs = sum(iv.interval_ns for iv in ivs if pid in iv.loops) / 1e9 or 1.0
    top = max(by_path, key=lambda p: by_path[p][0] + by_path[p][1] + by_path[p][2] / 1e9,
              default=None)
    writes, fsyncs, fsync_ns = by_path.get(top, [0, 0, 0]) if top else (0, 0, 0)
    mean = fsync_ns // fsyncs if fsyncs else 0
    # the loop's line that writes (Python stacks: its slow writes and fsyncs, its open files)
    code = code_line(ctx.ivs, pid, (SLOW_WRITE, SAVE), LOOP_ROLES, main_thread=True)
    return [Finding(
        "sync_writes", severity(loop.share["sync_writes"]), pid,
        words.sync_writes(loop.pct["sync_writes"], loop.total, top, writes / secs,
                          fsyncs / secs, mean) + words.at_code("The loop writes", code),
        {"loop_shares_pct": loop.pct, "seconds": round(loop.total / 1e9, 1), "file": top,
         "writes_per_s": round(writes / secs, 2), "fsyncs_per_s": round(fsyncs / secs, 2),
         "fsync_mean_ns": mean,
         "files": sorted(by_path, key=lambda p: -sum(by_path[p][:2]))[:5],
         "code": code.evidence() if code else None})]
