"""cpu_contended on hand-made windows: the job waits for CPUs that processes outside it have
(a finding, naming them), and not when the CPUs it waits for are its own processes' (a job
whose workers outnumber the cores: dataloader_cpu_bound's), the CPU was idle, or the wait is
short."""

from __future__ import annotations

from diagnosis_rows import MAIN, MS, OWNER, WORKER, S, add_interval, cpu_wait, kinds, thread

from tracer.core.diagnosis import Diagnosis
from tracer.core.diagnosis import rules as registry
from tracer.core.diagnosis.rules import cpu_contended
from tracer.core.diagnosis.rules.context import Context

SPINNERS = (901, 902, 903, 904)


def computing_loop(runnable_ms: int):
    """A loop on CPU or runnable all the second (it computes; batches are ready)."""
    return thread(MAIN, MAIN, "main", oncpu=(1000 - runnable_ms) * MS, runnable=runnable_ms * MS)


def worker(pid: int, runnable_ms: int, sleep_ms: int = 0):
    return thread(pid, pid, "dataloader_worker", oncpu=(1000 - runnable_ms - sleep_ms) * MS,
                  runnable=runnable_ms * MS, sleep=sleep_ms * MS)


def window(threads, waits, n=5, owner=None) -> Diagnosis:
    d = Diagnosis()
    for i in range(1, n + 1):
        add_interval(d, i * S, S, threads, [], owner=owner, cpu_waits=waits)
    return d


def judge(d: Diagnosis, pid: int = MAIN):
    ivs = list(d.intervals)
    ctx = Context(d.window, d.thresholds, ivs, sorted({p for iv in ivs for p in iv.loops}))
    return cpu_contended.judge(ctx.for_main(pid))


# Beside 4 spinners: the loop runnable 600 ms a second, its worker 500 ms; 1 s of their wait
# behind the spinners, 0.1 s behind the job's own worker
CROWDED = ([computing_loop(600), worker(WORKER, 500)],
           [*(cpu_wait(MAIN, "other", p, 200 * MS, "cpu_spin") for p in SPINNERS),
            cpu_wait(WORKER, "other", SPINNERS[0], 200 * MS, "cpu_spin"),
            cpu_wait(MAIN, "traced", WORKER, 100 * MS, "pt_data_worker")])


def test_a_job_beside_spinners_is_contended_and_names_them():
    (f,) = judge(window(*CROWDED))
    # the loop's 60 % runnable, of which the spinners had the CPU 1.0 s of 1.1 s
    assert (f.kind, f.severity, f.pid) == ("cpu_contended", 55, MAIN)
    ev = f.evidence
    assert ev["loop_runnable_pct"] == 60.0 and ev["workers_runnable_pct"] == 50.0
    assert ev["others_pct"] == 90.9 and ev["own_pct"] == 9.1 and ev["others_wait_s"] == 5.0
    assert ev["others"] == [{"comm": "cpu_spin", "pids": list(SPINNERS), "cgroup": "/",
                             "container_id": None, "pod_uid": None, "wait_s": 5.0,
                             "wait_pct": 90.9}]
    assert "4 x cpu_spin (pids 901, 902, 903, 904) 91 %" in f.summary
    assert "the training loop 60 % of its time" in f.summary
    assert f.advice.startswith("Other processes take the CPUs")


def test_it_leads_a_computing_loop_and_not_io_bound_stays():
    """cpu_contended is not an I/O finding: not_io_bound is still said, after it."""
    d = window(*CROWDED)
    assert kinds(d.findings()) == ["cpu_contended", "not_io_bound"]
    ivs = list(d.intervals)
    out = registry.judge(Context(d.window, d.thresholds, ivs, [MAIN]))
    assert kinds(out) == ["cpu_contended", "not_io_bound"]


def test_a_job_whose_workers_outnumber_the_cores_is_not_contended():
    """Alone, 4 busy workers and the loop on 2 cores: they wait for each other, all of it
    inside the job: dataloader_cpu_bound's, not cpu_contended's."""
    pids = [WORKER + i for i in range(4)]
    owner = {MAIN: MAIN, **{p: MAIN for p in pids}}
    loop = thread(MAIN, MAIN, "main", oncpu=100 * MS, runnable=100 * MS, sleep=800 * MS,
                  by_worker=800 * MS)
    threads = [loop, *(worker(p, 600) for p in pids)]
    # each worker waits behind the next one, the loop behind the first
    waits = [*(cpu_wait(p, "traced", pids[(i + 1) % 4], 600 * MS, "pt_data_worker")
               for i, p in enumerate(pids)),
             cpu_wait(MAIN, "traced", pids[0], 100 * MS, "pt_data_worker")]
    d = window(threads, waits, owner=owner)
    assert judge(d) == []
    assert kinds(d.findings()) == ["dataloader_cpu_bound", "not_io_bound"]


def test_another_traced_jobs_processes_are_outside_it():
    other_main = 500
    owner = {**OWNER, other_main: other_main}
    waits = [cpu_wait(MAIN, "traced", other_main, 900 * MS, "python")]
    (f,) = judge(window([computing_loop(600)], waits, owner=owner))
    assert f.evidence["others"][0]["pids"] == [other_main] and f.severity == 60


def test_an_idle_cpu_a_short_wait_or_a_busy_loop_alone_is_not_contended():
    idle = [cpu_wait(MAIN, "idle", None, 900 * MS, "swapper/0")]
    assert judge(window([computing_loop(600)], idle)) == []
    short = [cpu_wait(MAIN, "other", SPINNERS[0], 50 * MS, "cpu_spin")]  # 0.25 s in 5 s
    assert judge(window([computing_loop(600)], short)) == []
    # the spinners had the CPU but the loop hardly waited: 10 % of its time
    little = [cpu_wait(MAIN, "other", SPINNERS[0], 300 * MS, "cpu_spin")]
    assert judge(window([computing_loop(100)], little)) == []
    assert judge(window([computing_loop(600)], [])) == []  # no rows: an older trace


def test_a_replay_reading_the_pids_as_floats_says_the_same():
    """A trace's nullable taker_pid column reads as floats where an interval has a null (idle,
    rest): the finding is the live run's, with the pids as ints."""
    threads, waits = CROWDED
    replayed = [{**w, "taker_pid": float(w["taker_pid"])} for w in waits]
    replayed.append(cpu_wait(MAIN, "idle", None, 0, "swapper/0"))
    (live,), (again,) = judge(window(threads, waits)), judge(window(threads, replayed))
    assert (again.summary, again.evidence) == (live.summary, live.evidence)
    assert "(pids 901, 902, 903, 904)" in again.summary


def test_the_wait_before_the_last_taker_ran_is_not_charged_to_anyone():
    """`earlier` (the part of a wait behind tasks before the one that ran last) and an idle CPU
    are in no one's share: the shares are of the wait behind a known task."""
    threads, waits = CROWDED
    more = [*waits, cpu_wait(MAIN, "earlier", None, 1100 * MS), cpu_wait(MAIN, "idle", None, 0)]
    (f,) = judge(window(threads, more))
    (g,) = judge(window(threads, waits))
    assert (f.severity, f.summary) == (g.severity, g.summary)
    assert f.evidence["known_pct"] == 50.0 and g.evidence["known_pct"] == 100.0
