"""cold_cache: the data set's reads came from disk first and from the page cache later: the
first pass was cold (not an I/O finding: judge the steady state).

Thresholds: min_read_bytes (an interval that reads less says nothing), cold_miss_ratio (a cold
interval), cold_min_intervals (cold ones the reads start with), warm_miss_ratio (each of the
last quarter's). Not said when dataset_exceeds_cache is: later passes missed again."""

from __future__ import annotations

from tracer.core.diagnosis import words
from tracer.core.diagnosis.finding import Finding
from tracer.core.diagnosis.rules.context import Context


def judge(ctx: Context) -> list[Finding]:
    t = ctx.thresholds
    if any(f.kind == "dataset_exceeds_cache" for f in ctx.found):
        return []
    # The cold part is the run of cold intervals the reads start with, however long: a first
    # epoch can be a small part of a trace (8 epochs, or attached to late in the first).
    ratios = [r.missed / r.bytes for r in ctx.reads if r.bytes >= t.min_read_bytes]
    cold = next((i for i, r in enumerate(ratios) if r < t.cold_miss_ratio), len(ratios))
    k = max(1, len(ratios) // 4)
    if len(ratios) < 4 or cold < t.cold_min_intervals or cold + k > len(ratios):
        return []
    early, late = ratios[:cold], ratios[-k:]
    if max(late) > t.warm_miss_ratio:
        return []
    return [Finding(
        "cold_cache", 30, None,
        words.cold_cache(cold, 100 * sum(early) / cold, k, 100 * sum(late) / k),
        {"early_miss_pct": [round(100 * r, 1) for r in early],
         "late_miss_pct": [round(100 * r, 1) for r in late]})]
