"""CPU contention (`cpu_waits`, `cpu_contended`) on a real PyTorch DataLoader job (2 workers, a
moderate transform per cached sample, a loop that computes), launched and attached: beside four
untraced CPU-bound processes started here (`cpu_spin`) it waits for the CPUs they have, and
iotrace says so, naming them; alone, its waits are its own.

This 2-CPU machine is shared with other test runs, which the job may wait behind too: the
spinners are judged by their own share of the job's wait, and alone, by what the job's waits
are charged to."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator

import pandas as pd
import pytest

from conftest import ROOT, needs_root
from tracer.core.vocab import IO_KINDS
from tracer.report import diagnose_trace
from tracer.tracedir.reader import load

pytestmark = [needs_root, pytest.mark.kernel]

SPINNERS = 4
SPIN = ("import ctypes\nctypes.CDLL(None).prctl(15, b'cpu_spin', 0, 0, 0)  # PR_SET_NAME\n"
        "while True:\n    pass\n")
# ~6 s alone: 2 epochs of 12 steps, each sample's transform and each step's compute moderate
EXTRA = ("--transform-rounds", "3", "--compute", "heavy", "--compute-rounds", "2",
         "--epochs", "2")


@contextlib.contextmanager
def spinners() -> Iterator[list[int]]:
    procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(SPINNERS)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("cpu_contended")


def traced(mode: str, workdir, out):
    from scenario_trace import attached, launched

    from tracer.workloads.scenarios import prepare

    sc = prepare("dataloader_cpu_bound", workdir)
    try:
        return (launched(sc, out, extra=EXTRA) if mode == "launch"
                else attached(sc, out, after_workers=True, extra=EXTRA))
    finally:
        sc.cleanup()


def final(t) -> pd.DataFrame:
    f = t.table("findings")
    return f[f.ts == f.ts.max()].sort_values("severity", ascending=False, kind="stable")


def job_pids(t) -> set[int]:
    return set(t.table("processes").pid)


@pytest.mark.parametrize("mode", ["launch", "attach"])
def test_a_job_beside_cpu_bound_neighbours(mode, workdir, tmp_path):
    pytest.importorskip("torch", reason="the PyTorch scenarios need torch")
    alone = traced(mode, workdir, tmp_path / "alone")
    with spinners() as spin:
        crowded = traced(mode, workdir, tmp_path / "crowded")
    clock = [sum(s for _, _, s in t.job.epochs) for t in (alone, crowded)]
    a, c = final(alone), final(crowded)
    print(f"{mode}: the job's own clock alone {clock[0]:.1f} s, beside {SPINNERS} spinners "
          f"{clock[1]:.1f} s")
    print(a[["kind", "severity", "summary"]].to_string())
    print(c[["kind", "severity", "summary"]].to_string())
    table = c[["kind", "severity", "summary"]].to_string()

    # Beside the spinners: cpu_contended leads (the loop computes: no data-wait finding above
    # it), naming them with most of the job's wait; not_io_bound still says it is not I/O
    assert c.kind.iloc[0] == "cpu_contended", table
    assert not set(c.kind) & set(IO_KINDS), table
    f = c[c.kind == "cpu_contended"].iloc[0]
    ev = json.loads(f.evidence)
    assert f.severity >= 30 and ev["others_pct"] >= 50, ev
    # The spinners are named among the others, with all their processes and a good share of
    # the wait behind a known task (77-82 % at a load of 5; other test runs on this machine
    # may take more of it)
    spun = [o for o in ev["others"] if o["comm"] == "cpu_spin"]
    assert len(spun) == 1 and set(spun[0]["pids"]) == set(spin), ev
    assert spun[0]["wait_pct"] >= 20, ev
    assert not job_pids(crowded) & {p for o in ev["others"] for p in o["pids"]}, ev
    waits = crowded.table("cpu_waits")
    assert set(waits[waits.comm == "cpu_spin"].taker_pid) == set(spin)
    assert (waits[waits.comm == "cpu_spin"].who == "other").all()
    print(f"the spinners' share of the job's wait: "
          f"{waits[waits.comm == 'cpu_spin'].wait_ns.sum() / waits.wait_ns.sum():.2f}")
    assert "] cpu_contended:" in crowded.stdout
    report = subprocess.run([sys.executable, "-m", "tracer.cli", "report", str(crowded.out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "] cpu_contended:" in report.stdout, report.stdout  # again from the rows
    again = [x for x in diagnose_trace(load(str(crowded.out))).findings()
             if x.kind == "cpu_contended"]
    assert len(again) == 1, again
    # The replay names the same takers with the same seconds. Its shares may differ by a
    # tenth of a point: in 1 CI run of many the waits it added up were 10 ms fewer than live
    # (3.64 s against 3.65 s; not yet explained, see docs/diagnosis.md's cpu_contended)
    replayed = json.loads(json.dumps(again[0].evidence))
    assert sorted((o["comm"], o["pids"], o["wait_s"]) for o in replayed["others"]) == sorted(
        (o["comm"], o["pids"], o["wait_s"]) for o in ev["others"]), (replayed, ev)
    for key in ("loop_runnable_pct", "workers_runnable_pct", "others_pct", "own_pct"):
        assert abs(replayed[key] - ev[key]) <= 0.2, (key, replayed, ev)
    assert abs(replayed["others_wait_s"] - ev["others_wait_s"]) <= 0.02, (replayed, ev)

    # Alone: the job's waits behind its own processes are its own, and no cpu_contended (a
    # machine that other work loads would give one, rightly: the suite runs alone)
    mine = alone.table("cpu_waits")
    own = mine[mine.who == "traced"]
    assert not own.empty and set(own.taker_pid) <= job_pids(alone), own.to_string()
    assert "cpu_contended" not in set(a.kind), a[["kind", "severity", "summary"]].to_string()
