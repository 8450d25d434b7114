"""device_saturated: the disk the job reads from was busy nearly all the time and its reads
queued far longer than they took (`devices` utilisation; block_queue against block latency).

Thresholds: saturated_util_pct (the busiest disk's mean utilisation), saturated_queue_ratio
(median queue time over median service time); the others' share is named past
contended_share. Judged only when a loop waits on its reads; severity half of that (at least
30)."""

from __future__ import annotations

from collections import defaultdict

from tracer.core.diagnosis import words
from tracer.core.diagnosis.evidence import disk_totals, others_share
from tracer.core.diagnosis.finding import Finding
from tracer.core.diagnosis.rules.context import Context
from tracer.core.histogram import percentile_ns
from tracer.core.units import MAX_SLOTS


def judge(ctx: Context) -> list[Finding]:
    t, sev, ivs = ctx.thresholds, ctx.io_severity(), ctx.training
    if sev is None:
        return []
    queue = [sum(iv.queue_counts[i] for iv in ivs) for i in range(MAX_SLOTS)]
    service = [sum(iv.service_counts[i] for iv in ivs) for i in range(MAX_SLOTS)]
    q50, s50 = percentile_ns(queue, 50), percentile_ns(service, 50)
    utils = defaultdict(list)
    for iv in ivs:
        for dev, u in iv.device_util.items():
            utils[dev].append(u)
    busy = {d: sum(u) / len(u) for d, u in utils.items() if u}
    hot = max(busy, key=busy.get) if busy else None
    if not (hot and busy[hot] >= t.saturated_util_pct and q50 and s50
            and q50 >= t.saturated_queue_ratio * s50):
        return []
    share = others_share(*disk_totals(ivs, hot))
    named = 100 * share[1] if share and share[1] > t.contended_share else None
    return [Finding(
        "device_saturated", max(30, sev // 2), None,
        words.device_saturated(hot, busy[hot], q50, s50, named),
        {"device": hot, "util_pct": round(busy[hot], 1), "queue_p50_ns": q50,
         "service_p50_ns": s50,
         "other_bytes_pct": round(100 * share[1], 1) if share else None})]
