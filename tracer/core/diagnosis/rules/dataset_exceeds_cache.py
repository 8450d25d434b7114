"""dataset_exceeds_cache: the bytes read again (of files read in an earlier interval) missed
the page cache again: the data set does not fit in the memory the job may use.

Thresholds: min_reread_bytes (read again, at least), reread_miss_ratio (of them missed again).
Judged only when a loop waits on its reads (sync_loading, dataloader_io_bound), whose severity
it scales by the share missed again (at least 30)."""

from __future__ import annotations

from tracer.core.diagnosis import words
from tracer.core.diagnosis.finding import Finding
from tracer.core.diagnosis.rules.context import Context


def judge(ctx: Context) -> list[Finding]:
    t, sev = ctx.thresholds, ctx.io_severity()
    if sev is None:
        return []
    by_dir: dict[str, list[int]] = {}
    for r in ctx.reads:
        for d, counts in r.by_dir.items():
            acc = by_dir.setdefault(d, [0, 0, 0])
            for i, n in enumerate(counts):
                acc[i] += n
    again = sum(c[1] for c in by_dir.values())
    missed = sum(c[2] for c in by_dir.values())
    if again < t.min_reread_bytes or missed < t.reread_miss_ratio * again:
        return []
    top = max(by_dir, key=lambda d: by_dir[d][2])
    first = by_dir[top][0] - by_dir[top][1]  # what a first pass read there
    by_dir = {d.rstrip("/") or "/": c for d, c in by_dir.items()}  # said without the "/"
    top = top.rstrip("/") or "/"
    share = missed / again
    memory = _memory(ctx)
    return [Finding(
        "dataset_exceeds_cache", min(sev, max(30, round(sev * share))), None,
        words.dataset_exceeds_cache(
            top, first, words.cache_room(memory["limit_bytes"], memory["cgroup"],
                                         memory["cache_bytes"], memory["available_bytes"]),
            100 * share, again),
        {"top_dir": top, "first_pass_bytes": first, "reread_bytes": again,
         "reread_missed_bytes": missed, "reread_miss_pct": round(100 * share, 1), **memory,
         "dirs": {d: {"bytes": c[0], "reread_bytes": c[1], "reread_missed_bytes": c[2]}
                  for d, c in sorted(by_dir.items(), key=lambda kv: -kv[1][2])[:5]}})]


def _memory(ctx: Context) -> dict:
    """The memory the job had over the training intervals: its cgroup's lowest limit (and
    that cgroup), the most page cache and memory it used, the least the host had left."""
    rows = [m for iv in ctx.training for m in iv.memory.values()]
    limits = [m["limit_bytes"] for m in rows if m.get("limit_bytes")]
    caches = [m["cache_bytes"] for m in rows if m.get("cache_bytes") is not None]
    limit = min(limits) if limits else None
    return {
        "limit_bytes": limit,
        "cgroup": next((m["cgroup"] for m in rows if m.get("limit_bytes") == limit and limit),
                       None),
        "cache_bytes": max(caches) if caches else None,
        "usage_bytes": max((m["usage_bytes"] for m in rows if m.get("usage_bytes") is not None),
                           default=None),
        "available_bytes": min((m["available_bytes"] for m in rows), default=None)}
