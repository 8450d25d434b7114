"""host_bound: the GPU waits for the host. A loop that calls the CUDA driver (its `threads`
row has the CUDA columns) spends most of its training time on the host (`compute`: Python,
kernel launches, CPU ops), little waiting for its GPU (`gpu_wait`), and so neither data, a save
nor the GPU holds it back: launch-bound loops of tiny kernels, or host work between steps.

Whether the GPU idled meanwhile is NVML's to say: tracer.gpu.idle.confirm_host_bound keeps
the finding only where the GPU samples show it idle (at the run's end, live and in `iotrace
report`), and drops it without GPU samples. The evidence has the launch rate: launches
are counted in a slice of each interval and scaled (tracer.live.cuda.LaunchSampler), and the
line of the loop's code where it worked on the host most (Python stacks: its samples taken for
host work, else its background ones).

Thresholds: host_share, host_gpu_wait_share (and host_gpu_idle_pct, the GPU's side)."""

from __future__ import annotations

from tracer.core.diagnosis import words
from tracer.core.diagnosis.finding import Finding, severity
from tracer.core.diagnosis.rules.context import Context, code_line
from tracer.core.stacks import BACKGROUND, HOST
from tracer.core.vocab import LOOP_ROLES


def judge(ctx: Context) -> list[Finding]:
    loop, pid, t = ctx.loop, ctx.pid, ctx.thresholds
    calls = [iv.cuda[pid] for iv in ctx.ivs if pid in iv.cuda]
    if (loop.total <= 0 or not calls or loop.share["compute"] < t.host_share
            or loop.share["gpu_wait"] > t.host_gpu_wait_share):
        return []
    launches = None
    if all(c[2] >= 0 for c in calls):
        launches = sum(c[2] for c in calls) / (loop.total / 1e9)
    syncs = sum(c[0] for c in calls) / (loop.total / 1e9)
    host_pct = 100 * loop.share["compute"]
    code = (code_line(ctx.ivs, pid, (HOST,), LOOP_ROLES, main_thread=True)
            or code_line(ctx.ivs, pid, (BACKGROUND,), LOOP_ROLES, main_thread=True))
    return [Finding(
        "host_bound", severity(loop.share["compute"]), pid,
        words.host_bound(host_pct, 100 * loop.share["gpu_wait"], loop.total, launches, syncs)
        + words.at_code("The loop works on the host", code),
        {"loop_shares_pct": loop.pct, "seconds": round(loop.total / 1e9, 1),
         "host_pct": round(host_pct, 1),
         "launches_per_s": None if launches is None else round(launches, 1),
         "syncs_per_s": round(syncs, 1), "code": code.evidence() if code else None})]
