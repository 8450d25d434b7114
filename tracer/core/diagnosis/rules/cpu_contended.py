"""cpu_contended: the training loop or its DataLoader workers waited for a CPU (runnable, not
running) much of their time, and processes outside the job had the CPU most of that wait
(`cpu_waits` rows): neighbours on the host, or another traced job.

Thresholds: cpu_contended_share (the larger of the loop's and the workers' share of their time
runnable, times the share of the job's wait behind a known task (its own processes or others:
not an idle CPU, not `earlier`) that processes outside it had the CPU: above),
cpu_contended_min_ns (the wait behind those processes, at least). A job whose own processes
outnumber its CPUs waits behind itself, which does not count here (the loop then waits for its
workers: dataloader_cpu_bound). Severity that product."""

from __future__ import annotations

from tracer.core.diagnosis import words
from tracer.core.diagnosis.finding import Finding, severity
from tracer.core.diagnosis.rules.context import Context
from tracer.core.diagnosis.thresholds import MAX_CPU_TAKERS

# (comm, cgroup, container ID, pod UID): processes that had the job's CPUs, named together
TakerGroup = tuple[str, str, str | None, str | None]


def _pct(part: int, whole: int) -> float | None:
    return round(100 * part / whole, 1) if whole else None


def judge(ctx: Context) -> list[Finding]:
    t, pid = ctx.thresholds, ctx.pid
    loop, workers, waited, own = [0, 0], [0, 0], 0, 0
    groups: dict[TakerGroup, tuple[int, set[int]]] = {}
    for iv in ctx.ivs:
        w = iv.cpu.get(pid)
        if w is None:
            continue
        for acc, ns in ((loop, w.loop), (workers, w.workers)):
            acc[0], acc[1] = acc[0] + ns[0], acc[1] + ns[1]
        waited, own = waited + w.waited_ns, own + w.own_ns
        for (comm, taker, cgroup, cid, pod), ns in w.others.items():
            n, pids = groups.get((comm, cgroup, cid, pod), (0, set()))
            groups[(comm, cgroup, cid, pod)] = (n + ns, pids | {taker})
    outside = sum(n for n, _ in groups.values())
    known = own + outside  # the wait behind a task that is known
    runnable = max(loop[1] / loop[0] if loop[0] else 0.0,
                   workers[1] / workers[0] if workers[0] else 0.0)
    share = runnable * outside / known if known else 0.0
    if outside < t.cpu_contended_min_ns or share <= t.cpu_contended_share:
        return []
    top = sorted(groups.items(), key=lambda kv: -kv[1][0])[:MAX_CPU_TAKERS]
    names = ", ".join(words.cpu_taker(comm, sorted(pids), cgroup, cid, pod, 100 * n / known)
                      for (comm, cgroup, cid, pod), (n, pids) in top[:3])
    loop_pct, workers_pct = _pct(loop[1], loop[0]), _pct(workers[1], workers[0])
    return [Finding(
        "cpu_contended", severity(share), pid,
        words.cpu_contended(loop_pct, workers_pct, 100 * outside / known, outside, names),
        {"loop_runnable_pct": loop_pct, "workers_runnable_pct": workers_pct,
         "others_pct": _pct(outside, known), "own_pct": _pct(own, known),
         "known_pct": _pct(known, max(waited, known)), "others_wait_s": round(outside / 1e9, 2),
         "others": [{"comm": comm, "pids": sorted(p for p in pids if p), "cgroup": cg or None,
                     "container_id": cid, "pod_uid": pod, "wait_s": round(n / 1e9, 2),
                     "wait_pct": _pct(n, known)}
                    for (comm, cg, cid, pod), (n, pids) in top]})]
