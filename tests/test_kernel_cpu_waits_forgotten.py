"""The CPU waits of processes that come and go for a long run: a DataLoader forks new workers
every epoch, and the kernel's `cpu_waits` has room for 3 840 named keys (sched.bpf.c). The keys
of a process gone are deleted an interval after its exit, so the waits of the last processes
are named as well as the first ones' (before, they were lumped into a key without a taker or
lost once the keys had run out, after a few minutes of such a job)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from test_kernel_cpu_contended import spinners

from conftest import ROOT, needs_root
from tracer.tracedir.reader import load

pytestmark = [needs_root, pytest.mark.kernel]

CHILDREN = 3000
# children forked 4 at a time, each sleeping 1 ms (a wake-up, then a wait for a CPU the
# spinners hold) and burning 2 ms of CPU
JOB = f"""
import os, time
def child():
    time.sleep(0.001)
    end = time.thread_time() + 0.002
    while time.thread_time() < end:
        pass
    os._exit(0)
for _ in range({CHILDREN} // 4):
    pids = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:
            child()
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
"""


def test_the_waits_of_processes_that_come_and_go_stay_named(tmp_path):
    out = tmp_path / "trace"
    with spinners():
        done = subprocess.run([sys.executable, "-m", "tracer.cli", "-o", str(out), "-i", "0.5",
                               "--no-tui", "--", sys.executable, "-c", JOB],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    t = load(out)
    procs = t["processes"]
    main = int(procs[procs.role == "main"].pid.iloc[0])
    children = procs[procs.ppid == main].sort_values("first_seen").pid.tolist()
    assert len(children) == CHILDREN
    waits = t["cpu_waits"]
    named = set(waits[waits.who.isin(["traced", "other", "idle"])].pid)
    first, last = children[:CHILDREN // 5], children[-CHILDREN // 5:]
    first_named = sum(p in named for p in first) / len(first)
    last_named = sum(p in named for p in last) / len(last)
    # most children waited for a CPU and were named; the last as often as the first
    assert first_named > 0.5, (first_named, last_named)
    assert last_named > 0.8 * first_named, (first_named, last_named)
