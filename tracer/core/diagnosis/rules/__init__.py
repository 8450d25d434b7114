"""The finding rules, one module per kind, and the order they are judged and said in.

Every rule is `judge(ctx: Context) -> list[Finding]`. A loop rule (LOOP_RULES) is given one
main process at a time (`ctx.pid`, its training intervals in `ctx.ivs`); the others
(WINDOW_RULES) the whole window. Rules are judged in the order below, mains in pid order, each
seeing in `ctx.found` the findings of those before it: the storage rules judge only when a
loop rule blamed the loop's reads, not_io_bound only when no rule blamed I/O, and
straggler_rank takes its cause from the others' findings. The straggler's finding is said
first (so that it leads its own loop's finding of the same severity), then the others in
judging order; `judge` returns them so, and the diagnosis sorts them by severity (stably).
"""

from __future__ import annotations

from tracer.core.diagnosis.finding import Finding
from tracer.core.diagnosis.rules import (
    checkpoint_stall,
    cold_cache,
    cpu_contended,
    dataloader_cpu_bound,
    dataloader_io_bound,
    dataloader_network_bound,
    dataset_exceeds_cache,
    device_contended,
    device_saturated,
    host_bound,
    memory_pressure,
    not_io_bound,
    slow_filesystem,
    small_files,
    straggler_rank,
    sync_loading,
    sync_writes,
)
from tracer.core.diagnosis.rules.context import Context

LOOP_RULES = (sync_loading, dataloader_io_bound, dataloader_cpu_bound, cpu_contended,
              memory_pressure, dataloader_network_bound, sync_writes, checkpoint_stall,
              host_bound)
# dataset_exceeds_cache before cold_cache: later passes that miss again say there was no cold
# first pass to discount
WINDOW_RULES = (dataset_exceeds_cache, cold_cache, small_files, slow_filesystem,
                device_contended, device_saturated, not_io_bound)
LEADING_RULES = (straggler_rank,)  # judged last, said first
RULES = (*LOOP_RULES, *WINDOW_RULES, *LEADING_RULES)


def judge(ctx: Context) -> list[Finding]:
    """Every rule's findings over `ctx`, in the order they are said (before sorting)."""
    for pid in ctx.mains:
        main = ctx.for_main(pid)
        for rule in LOOP_RULES:
            ctx.found.extend(rule.judge(main))
    for rule in WINDOW_RULES:
        ctx.found.extend(rule.judge(ctx))
    leading = [f for rule in LEADING_RULES for f in rule.judge(ctx)]
    return leading + ctx.found
