"""memory_pressure: the training loop or its DataLoader workers reclaimed memory themselves
(direct reclaim: the host short of memory; memcg reclaim: the job's memory cgroup at its limit),
or waited in page faults while memory was short (pages evicted and read back, swap-ins), long
enough to hold the loop back: `threads` rows' reclaim_ns and fault_wait_ns, with the `memory`
row's cgroup, limit, usage and pressure (PSI) as the evidence.

Thresholds: memory_reclaim_share (the loop's share of its time in reclaim and such faults, or
its share waiting for batches times the workers' share of their busy time in them: the part of
the loop's time memory explains; above), memory_reclaim_min_ns (that time, the job's, at
least). Severity that part. A fault's wait counts only while memory is short: the job
reclaimed at least memory_reclaim_min_ns, or its cgroup met its limit, or swap was in use;
otherwise it is a mapped file read (storage's, dataloader_io_bound's). Reclaim and faults are
time the thread also spent on CPU or blocked, so the finding that the loop waits for its workers
(dataloader_cpu_bound or _io_bound) stays, and this one says what part of the workers' time went
to memory."""

from __future__ import annotations

from tracer.core.diagnosis import words
from tracer.core.diagnosis.finding import Finding, severity
from tracer.core.diagnosis.rules.context import Context, memory_short
from tracer.core.model import MemoryRow

DATA_WAITS = ("data_wait_io", "data_wait_cpu", "data_wait_network")


def _pct(part: int, whole: int) -> float | None:
    return round(100 * part / whole, 1) if whole and part else None


def _n(v: float | None) -> int:
    return int(v) if v is not None and v == v else 0  # (a replay's null is NaN)


def _memory(rows: list[MemoryRow], span_ns: int) -> dict | None:
    """The memory rows' evidence: the fullest row's cgroup, limit and usage, the limit hits,
    major faults and PSI memory stall over the rows (`span_ns` long)."""
    if not rows:
        return None
    top = max(rows, key=lambda m: _n(m["usage_bytes"]))
    some = [_n(m.get("psi_memory_some_ns")) for m in rows if m.get("psi_source")]
    full = [_n(m.get("psi_memory_full_ns")) for m in rows if m.get("psi_source")]
    return {"source": top["source"], "cgroup": top["cgroup"],
            "limit_bytes": _n(top["limit_bytes"]) or None,
            "usage_bytes": _n(top["usage_bytes"]) or None,
            "cache_bytes": _n(top["cache_bytes"]) or None,
            "available_bytes": _n(top["available_bytes"]),
            "limit_hits": sum(_n(m.get("limit_hits")) for m in rows),
            "majfaults": sum(_n(m.get("majfaults")) for m in rows),
            "swap_bytes": max(_n(m.get("swap_bytes")) for m in rows) or None,
            "psi_source": next((m["psi_source"] for m in rows if m.get("psi_source")), None),
            "psi_memory_some_pct": _pct(sum(some), span_ns) if some else None,
            "psi_memory_full_pct": _pct(sum(full), span_ns) if full else None}


def judge(ctx: Context) -> list[Finding]:
    t, pid, loop = ctx.thresholds, ctx.pid, ctx.loop
    lp, wk, other, n = [0, 0], [0, 0], 0, 0
    loop_faults = workers_faults = other_faults = sleeps = 0
    rows: list[MemoryRow] = []
    span = 0
    for iv in ctx.ivs:
        if pid in iv.memory:
            rows.append(iv.memory[pid])
            span += iv.interval_ns
        r = iv.reclaim.get(pid)
        if r is None:
            continue
        for acc, ns in ((lp, r.loop), (wk, r.workers)):
            acc[0], acc[1] = acc[0] + ns[0], acc[1] + ns[1]
        other, n = other + r.other_ns, n + r.reclaims
        loop_faults += r.loop_fault_ns
        workers_faults += r.workers_fault_ns
        other_faults += r.other_fault_ns
        sleeps += r.fault_sleeps
    total = lp[1] + wk[1] + other
    short = memory_short(ctx.ivs, pid, t)
    fault_ns = loop_faults + workers_faults + other_faults if short else 0
    if total + fault_ns < t.memory_reclaim_min_ns or loop.total <= 0:
        return []
    loop_stall = lp[1] + (loop_faults if fault_ns else 0)
    workers_stall = wk[1] + (workers_faults if fault_ns else 0)
    waiting = sum(loop.share[s] for s in DATA_WAITS)
    share = max(loop_stall / lp[0] if lp[0] else 0.0,
                waiting * workers_stall / wk[0] if wk[0] else 0.0)
    if share <= t.memory_reclaim_share:
        return []
    mem = _memory(rows, span)
    return [Finding(
        "memory_pressure", severity(share), pid,
        words.memory_pressure(_pct(loop_stall, lp[0]), _pct(workers_stall, wk[0]), total, n,
                              fault_ns, sleeps, mem),
        {"loop_reclaim_pct": _pct(lp[1], lp[0]), "workers_reclaim_pct": _pct(wk[1], wk[0]),
         "loop_fault_pct": _pct(loop_faults, lp[0]) if fault_ns else None,
         "workers_fault_pct": _pct(workers_faults, wk[0]) if fault_ns else None,
         "loop_data_wait_pct": round(100 * waiting, 1), "reclaim_s": round(total / 1e9, 2),
         "other_reclaim_s": round(other / 1e9, 2), "reclaims": n,
         "fault_wait_s": round(fault_ns / 1e9, 2), "fault_sleeps": sleeps,
         "memory": mem})]
