"""device_contended: other processes took most of the reads of the disk the job reads most
from (`device_users` rows), while the job waited on its reads.

Thresholds: contended_share (the others' share of its read bytes, above), contended_min_bytes
(their bytes, at least). Judged only when a loop waits on its reads; severity half of that
(at least 20)."""

from __future__ import annotations

from collections import defaultdict

from tracer.core.diagnosis import words
from tracer.core.diagnosis.evidence import DiskUser, disk_totals, others_share
from tracer.core.diagnosis.finding import Finding
from tracer.core.diagnosis.rules.context import Context
from tracer.core.diagnosis.thresholds import MAX_DISK_USERS


def judge(ctx: Context) -> list[Finding]:
    t, sev, ivs = ctx.thresholds, ctx.io_severity(), ctx.training
    if sev is None:
        return []
    mine: dict[str, int] = defaultdict(int)
    for iv in ivs:
        for dev, d in iv.disk_reads.items():
            mine[dev] += d.traced[1]
    if not mine or not max(mine.values()):
        return []
    dev = max(mine, key=mine.get)
    traced, others = disk_totals(ivs, dev)
    share = others_share(traced, others)
    if share is None or share[1] <= t.contended_share or others[1] < t.contended_min_bytes:
        return []
    users: dict[DiskUser, int] = defaultdict(int)
    for iv in ivs:
        d = iv.disk_reads.get(dev)
        for who, n in (d.by_user.items() if d else ()):
            users[who] += n
    # Rates over the intervals after the first kept, whose length a replay of the trace knows
    # as the live run did (the time since the interval before)
    later = [iv for iv in ivs if iv.ts_ns != ctx.window.intervals[0].ts_ns]
    secs = sum(iv.interval_ns for iv in later) / 1e9
    later_totals = disk_totals(later, dev)
    rates = [later_totals[k][1] / secs if secs else None for k in (1, 0)]
    top = sorted(users.items(), key=lambda kv: -kv[1])[:MAX_DISK_USERS]
    names = ", ".join(words.disk_user(*who) for who, _ in top[:3])
    pct = [round(100 * x, 1) for x in share]
    return [Finding(
        "device_contended", max(20, sev // 2), None,
        words.device_contended(dev, pct[1], names, (rates[0], rates[1]) if secs else None,
                               others[1], traced[1]),
        {"device": dev, "other_requests_pct": pct[0], "other_bytes_pct": pct[1],
         "other_service_pct": pct[2], "other_bytes": others[1], "job_bytes": traced[1],
         "other_bytes_s": round(rates[0]) if secs else None,
         "job_bytes_s": round(rates[1]) if secs else None,
         "others": [{"comm": comm, "cgroup": cg or None, "container_id": cid,
                     "pod_uid": pod, "bytes": n} for (comm, cg, cid, pod), n in top]})]
