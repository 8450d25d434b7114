"""The command iotrace starts is held (stopped) until it is traced: it must never outlive a
killed iotrace in that state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from conftest import ROOT

HOLDER = """
import sys, time
from tracer.live.child import HeldChild
child = HeldChild(["true"])
print(child.pid, flush=True)
time.sleep(600)
"""


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def test_held_child_dies_with_a_killed_iotrace():
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    pid = int(holder.stdout.readline())
    assert _state(pid) == "T"  # held: stopped before its exec
    os.kill(holder.pid, signal.SIGKILL)  # as if killed while attaching
    holder.wait()
    # Reparented to init (or a subreaper), which reaps it once it is dead; poll, no timing asserted.
    deadline = time.monotonic() + 30
    while _state(pid) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _state(pid) in (None, "Z"), f"held child {pid} left in state {_state(pid)}"
