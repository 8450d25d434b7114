"""sync_loading: the training loop reads files itself (num_workers=0 loads batches this way).

Thresholds: loop_share (of the loop's training time in `sync_loading`)."""

from __future__ import annotations

from tracer.core.diagnosis import words
from tracer.core.diagnosis.finding import Finding, severity
from tracer.core.diagnosis.fuse import served_by
from tracer.core.diagnosis.rules.context import Context, code_line, merged_reads, slowest, top_dir
from tracer.core.histogram import percentile_ns
from tracer.core.stacks import SLOW_READ, SYNC_LOADING
from tracer.core.vocab import LOOP_ROLES, MAIN, RANK


def judge(ctx: Context) -> list[Finding]:
    loop, pid = ctx.loop, ctx.pid
    if loop.total <= 0 or loop.share["sync_loading"] < ctx.thresholds.loop_share:
        return []
    reads = merged_reads(ctx.ivs, pid)
    me = RANK if RANK in reads else MAIN  # the loop's own process
    p99 = percentile_ns(reads.get(me, []), 99, slowest(ctx.ivs, pid, me, reads))
    workers = pid in ctx.window.state.workers_seen
    top = top_dir(ctx.ivs, pid)
    fuse = served_by(ctx.ivs, top)
    code = code_line(ctx.ivs, pid, (SLOW_READ, SYNC_LOADING), LOOP_ROLES, main_thread=True)
    return [Finding(
        "sync_loading", severity(loop.share["sync_loading"]), pid,
        words.sync_loading(loop.pct["sync_loading"], loop.total, workers, p99, top, fuse)
        + words.at_code("The loop reads", code),
        {"loop_shares_pct": loop.pct, "seconds": round(loop.total / 1e9, 1),
         "p99_read_ns": p99, "dataloader_workers": workers,
         "top_dir": top[0] if top else None, "fuse": fuse,
         "code": code.evidence() if code else None})]
