"""memory_pressure on hand-made windows: the workers (or the loop) reclaim memory much of
their time, with the job's memory cgroup at its limit (a finding, naming the cgroup, its limit
and usage); not when they reclaim little, or not at all (a roomy cgroup), and a replay's nulls
(traces from before the columns) read as none."""

from __future__ import annotations

from diagnosis_rows import MAIN, MS, WORKER, S, add_interval, kinds, thread

from tracer.core.diagnosis import Diagnosis
from tracer.core.diagnosis.rules import memory_pressure
from tracer.core.diagnosis.rules.context import Context

MIB = 1 << 20


def loop():
    """A loop that waits for batches 800 ms a second (its sleeps ended by the worker)."""
    return thread(MAIN, MAIN, "main", oncpu=200 * MS, sleep=800 * MS, by_worker=800 * MS)


def worker(reclaim_ms, reclaims=40, blocked_ms=0, fault_ms=0, fault_sleeps=0):
    """A worker busy 900 ms a second: on CPU, or blocked (D) `blocked_ms` of it in reclaim and
    `fault_ms` in page faults."""
    return {**thread(WORKER, WORKER, "dataloader_worker",
                     oncpu=(900 - blocked_ms - fault_ms) * MS,
                     iowait=(blocked_ms + fault_ms) * MS, sleep=100 * MS),
            "reclaim_ns": reclaim_ms * MS, "reclaim_blocked_ns": blocked_ms * MS,
            "reclaims": reclaims if reclaim_ms else 0, "fault_wait_ns": fault_ms * MS,
            "fault_sleeps": fault_sleeps}


def memory_row(usage_mib=255, limit_mib=256, hits=50, psi_some_ms=300):
    return {"pid": MAIN, "source": "cgroup_v1", "cgroup": "/jobs/train",
            "limit_bytes": limit_mib * MIB, "usage_bytes": usage_mib * MIB,
            "cache_bytes": 10 * MIB, "available_bytes": 20_000 * MIB, "majfaults": 7,
            "limit_hits": hits, "swap_bytes": None, "psi_source": "host",
            "psi_memory_some_ns": psi_some_ms * MS, "psi_memory_full_ns": psi_some_ms * MS // 2,
            "psi_io_some_ns": 0, "psi_cpu_some_ns": 0}


def window(reclaim_ms, n=5, mem=None, blocked_ms=0, fault_ms=0) -> Diagnosis:
    d = Diagnosis()
    for i in range(1, n + 1):
        add_interval(d, i * S, S, [loop(), worker(reclaim_ms, blocked_ms=blocked_ms,
                                                   fault_ms=fault_ms, fault_sleeps=60)], [],
                     memory=[mem or memory_row()])
    return d


def judge(d: Diagnosis):
    ivs = list(d.intervals)
    ctx = Context(d.window, d.thresholds, ivs, sorted({p for iv in ivs for p in iv.loops}))
    return memory_pressure.judge(ctx.for_main(MAIN))


def test_workers_that_reclaim_at_the_limit():
    (f,) = judge(window(450))
    # the loop waits 80 % of its time, the worker reclaims 50 % of its busy 900 ms: 40 %
    assert (f.kind, f.severity, f.pid) == ("memory_pressure", 40, MAIN)
    ev = f.evidence
    assert (ev["workers_reclaim_pct"], ev["loop_reclaim_pct"], ev["loop_data_wait_pct"],
            ev["reclaim_s"], ev["reclaims"]) == (50.0, None, 80.0, 2.25, 200)
    assert ev["memory"]["limit_bytes"] == 256 * MIB and ev["memory"]["limit_hits"] == 250
    assert ev["memory"]["psi_memory_some_pct"] == 30.0 and ev["memory"]["majfaults"] == 35
    assert f.summary == (
        "The job reclaimed memory before it could go on (the DataLoader workers 50 % of their "
        "busy time; 2.25 s in 200 reclaims): its memory cgroup /jobs/train used 255.0 MiB of "
        "its 256.0 MiB limit and met it 250 times; memory pressure (the host's PSI) 30 % of "
        "the time.")


def test_the_loop_waits_for_workers_and_says_why():
    """Workers on CPU half of it reclaiming: dataloader_cpu_bound keeps the other half of the
    loop's wait (40 %), memory_pressure the reclaim's (40 %)."""
    found = {f.kind: f.severity for f in window(450).findings()}
    assert (found["dataloader_cpu_bound"], found["memory_pressure"]) == (40, 40), found


def test_reclaim_that_explains_the_wait_leaves_no_storage_or_cpu_finding():
    """Workers blocked in reclaim (waiting for writeback) nearly all their busy time: the
    loop waits on memory, not on storage reads nor on the workers' work."""
    got = window(850, blocked_ms=800).findings()
    assert kinds(got)[0] == "memory_pressure", [(f.kind, f.severity) for f in got]
    assert not {"dataloader_io_bound", "dataloader_cpu_bound"} & set(kinds(got))
    (f,) = [f for f in got if f.kind == "memory_pressure"]
    assert f.severity == 76  # 80 % waiting x 850 / 900 ms busy in reclaim


def test_little_or_no_reclaim_is_no_finding():
    assert judge(window(0)) == []  # a roomy cgroup
    assert judge(window(30)) == []  # 3 % of the workers' time: 2.7 % of the loop's
    roomy = memory_row(usage_mib=100, limit_mib=4096, hits=0, psi_some_ms=0)
    assert "memory_pressure" not in kinds(window(0, mem=roomy).findings())


def test_a_replays_nulls_are_no_reclaim():
    d = Diagnosis()
    old = {**worker(0), "reclaim_ns": float("nan"), "reclaims": float("nan")}
    for i in range(1, 6):
        add_interval(d, i * S, S, [loop(), old], [], memory=[memory_row()])
    assert judge(d) == []


def test_faults_while_memory_is_short_count_with_reclaim():
    """Workers 50 % of their busy time in reclaim and 25 % blocked in page faults, the cgroup at
    its limit: the loop waits 80 %, of it 0.8 x 75 % = 60 % memory's."""
    (f,) = judge(window(450, fault_ms=225))
    assert (f.severity, f.evidence["workers_reclaim_pct"], f.evidence["workers_fault_pct"],
            f.evidence["fault_wait_s"], f.evidence["fault_sleeps"]) == (60, 50.0, 25.0, 1.12, 300)
    assert f.summary.startswith(
        "The job reclaimed memory and waited in page faults for pages read back before it "
        "could go on (the DataLoader workers 75 % of their busy time; 2.25 s in 200 reclaims, "
        "1.12 s in 300 waits in page faults): its memory cgroup /jobs/train used 255.0 MiB")


def test_faults_alone_at_the_limit():
    """No reclaim, but the cgroup met its limit: pages evicted and read back (refaults) are
    memory's. 0.8 x 600 / 900 ms = 53 %."""
    (f,) = judge(window(0, fault_ms=600))
    assert f.severity == 53
    assert f.summary.startswith(
        "The job waited in page faults for pages read back before it could go on (the "
        "DataLoader workers 67 % of their busy time; 3 s in 300 waits in page faults): its "
        "memory cgroup /jobs/train used")


def test_faults_with_memory_to_spare_are_storage_s():
    """The same faults in a roomy cgroup, no swap, no reclaim: a mapped file read from its
    disk, which dataloader_io_bound names; no memory_pressure."""
    roomy = memory_row(usage_mib=100, limit_mib=4096, hits=0, psi_some_ms=0)
    got = window(0, mem=roomy, fault_ms=600).findings()
    assert "memory_pressure" not in kinds(got)
    assert kinds(got)[0] == "dataloader_io_bound", [(f.kind, f.severity) for f in got]


def test_swap_ins_are_memory_s_not_storage_s():
    """Workers blocked in page faults 700 ms of their busy 900 (swap-ins: the cgroup at its
    limit), reclaiming 100 more on CPU: memory_pressure leads (0.8 x 800 / 900 = 71 %), and the
    faults' D time is not the workers reading storage."""
    got = window(100, fault_ms=700).findings()
    assert kinds(got)[0] == "memory_pressure", [(f.kind, f.severity) for f in got]
    assert got[0].severity == 71
    assert "dataloader_io_bound" not in kinds(got)
