"""dataloader_cpu_bound: the loop waits for batches while the DataLoader workers are on CPU
(decoding, augmenting): not an I/O finding.

Thresholds: loop_share (of the loop's training time in `data_wait_cpu`, less the part that the
workers' time in memory reclaim outside D explains: memory_pressure's)."""

from __future__ import annotations

from tracer.core.diagnosis import words
from tracer.core.diagnosis.finding import Finding, severity
from tracer.core.diagnosis.rules.context import (
    Context,
    code_line,
    data_wait_pct,
    less_reclaim,
    worker_reclaim,
    worker_times,
)
from tracer.core.stacks import DATA_WAIT
from tracer.core.vocab import DATALOADER_WORKER


def judge(ctx: Context) -> list[Finding]:
    loop, pid = ctx.loop, ctx.pid
    if loop.total <= 0 or loop.share["data_wait_cpu"] < ctx.thresholds.loop_share:
        return []
    cpu, io = worker_times(ctx.ivs, pid)
    reclaim, blocked = worker_reclaim(ctx.ivs, pid)
    share = less_reclaim(loop.share["data_wait_cpu"], cpu, reclaim - blocked)
    if share < ctx.thresholds.loop_share:
        return []
    oncpu = 100 - (100 * io / (io + cpu) if io + cpu else 0.0)
    # where the workers were while the loop waited for their batches (Python stacks)
    code = code_line(ctx.ivs, pid, (DATA_WAIT,), (DATALOADER_WORKER,), main_thread=True)
    return [Finding(
        "dataloader_cpu_bound", severity(share), pid,
        words.dataloader_cpu_bound(data_wait_pct(loop), loop.total, oncpu)
        + words.at_code("The DataLoader workers work", code),
        {"loop_shares_pct": loop.pct, "seconds": round(loop.total / 1e9, 1),
         "workers_oncpu_pct": round(oncpu, 1), "code": code.evidence() if code else None})]
