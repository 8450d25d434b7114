"""dataloader_io_bound: the loop waits for batches while the DataLoader workers are blocked on
storage (their reads, page faults of mapped files).

Thresholds: loop_share (of the loop's training time in `data_wait_io`, less the part that the
workers' time blocked in memory reclaim explains, and their page faults' while the job is
short of memory (pages evicted and read back, swap-ins): memory_pressure's, not storage's)."""

from __future__ import annotations

from tracer.core.diagnosis import words
from tracer.core.diagnosis.finding import Finding, severity
from tracer.core.diagnosis.fuse import served_by
from tracer.core.diagnosis.rules.context import (
    Context,
    code_line,
    data_wait_pct,
    less_reclaim,
    memory_short,
    merged_reads,
    slowest,
    top_dir,
    worker_faults,
    worker_reclaim,
    worker_times,
)
from tracer.core.histogram import percentile_ns
from tracer.core.stacks import DATA_WAIT, SLOW_READ
from tracer.core.vocab import DATALOADER_WORKER, LOOP_ROLES


def judge(ctx: Context) -> list[Finding]:
    loop, pid = ctx.loop, ctx.pid
    if loop.total <= 0 or loop.share["data_wait_io"] < ctx.thresholds.loop_share:
        return []
    cpu, io = worker_times(ctx.ivs, pid)
    in_reclaim = worker_reclaim(ctx.ivs, pid)[1]
    if memory_short(ctx.ivs, pid, ctx.thresholds):
        in_reclaim += worker_faults(ctx.ivs, pid)
    in_reclaim = min(io, in_reclaim)
    share = less_reclaim(loop.share["data_wait_io"], io, in_reclaim)
    if share < ctx.thresholds.loop_share:
        return []
    reads = merged_reads(ctx.ivs, pid)
    p99 = percentile_ns(reads.get(DATALOADER_WORKER, []), 99,
                        slowest(ctx.ivs, pid, DATALOADER_WORKER, reads))
    blocked = 100 * (io - in_reclaim) / (io + cpu) if io + cpu else 0.0
    top = top_dir(ctx.ivs, pid)
    fuse = served_by(ctx.ivs, top)
    # where the workers read, and where the loop waits for their batches (Python stacks)
    code = code_line(ctx.ivs, pid, (SLOW_READ,), (DATALOADER_WORKER,))
    waits = code_line(ctx.ivs, pid, (DATA_WAIT,), LOOP_ROLES, main_thread=True)
    return [Finding(
        "dataloader_io_bound", severity(share), pid,
        words.dataloader_io_bound(data_wait_pct(loop), loop.total, blocked, p99, top, fuse)
        + words.at_code("The DataLoader workers read", code)
        + words.at_code("The loop waits for batches", waits),
        {"loop_shares_pct": loop.pct, "seconds": round(loop.total / 1e9, 1),
         "workers_blocked_pct": round(blocked, 1), "p99_read_ns": p99,
         "top_dir": top[0] if top else None, "fuse": fuse,
         "code": code.evidence() if code else None,
         "loop_code": waits.evidence() if waits else None})]
