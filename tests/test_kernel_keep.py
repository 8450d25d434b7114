"""Never lose the trace: a hung-up terminal, a killed tracer and a full disk keep what was traced."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import termios
import time
from pathlib import Path

import pandas as pd

from conftest import IOTRACE, ROOT, needs_root

pytestmark = needs_root


def _drain(fd: int, seconds: float, until: bytes | None = None) -> bytes:
    """What the terminal shows for `seconds` (or until `until` appears): read, so that the
    tracer never blocks on a full terminal."""
    got = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            got += chunk
            if until is not None and until in got:
                break
    return got


def _meta(out: Path) -> dict:
    return json.loads((out / "meta.json").read_text())


def test_terminal_hangup_finishes_the_trace(tmp_path):
    """The live view runs on a pseudo-terminal whose other side closes (an SSH drop, a closed
    window): the kernel sends SIGHUP, and the tracer ends the trace as on Ctrl-C, although
    nothing can be drawn or printed any more."""
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    out = tmp_path / "trace"
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))

    def own_terminal() -> None:  # the tracer leads a session with the pty as its terminal
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    tracer = subprocess.Popen([*IOTRACE, "--pid", str(sleeper.pid), "-o", str(out), "-i", "0.3"],
                              cwd=ROOT, stdin=slave, stdout=slave, stderr=slave,
                              start_new_session=True, preexec_fn=own_terminal)
    os.close(slave)
    try:
        shown = _drain(master, 30, until=b"Tracing")
        assert b"Tracing" in shown, shown[-2000:]
        _drain(master, 1.5)  # a few intervals drawn by the live view; no segment rolled yet
        os.close(master)  # hang up
        master = None
        assert tracer.wait(timeout=60) == 0
        meta = _meta(out)
        assert meta["stop_reason"] == "SIGHUP" and meta["stop_ns"] is not None
        procs = pd.read_parquet(out / "processes")
        assert procs.pid.tolist() == [sleeper.pid]
        assert str(procs.comm.iloc[0]) == "sleep"
        assert len(pd.read_parquet(out / "system")) >= 3  # every interval, the last one too
    finally:
        if master is not None:
            os.close(master)
        sleeper.kill()
        sleeper.wait()
        if tracer.poll() is None:
            tracer.kill()
            tracer.wait()


def test_sighup_without_a_terminal_finishes_the_trace(tmp_path):
    """`kill -HUP` (nohup-less scripts, a parent that hangs up) with stdout a pipe: the summary
    is printed and the trace closed."""
    sleeper = subprocess.Popen(["sleep", "60"])
    out = tmp_path / "trace"
    tracer = subprocess.Popen([*IOTRACE, "--pid", str(sleeper.pid), "-o", str(out), "-i", "0.3"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert tracer.stderr.readline().startswith("Tracing")
        time.sleep(1)
        tracer.send_signal(signal.SIGHUP)
        stdout, stderr = tracer.communicate(timeout=60)
        assert tracer.returncode == 0, stderr
        assert "(SIGHUP)" in stdout and f"Trace written to {out}" in stdout
        meta = _meta(out)
        assert meta["stop_reason"] == "SIGHUP" and meta["stop_ns"] is not None
        assert pd.read_parquet(out / "processes").pid.tolist() == [sleeper.pid]
    finally:
        sleeper.kill()
        sleeper.wait()
        if tracer.poll() is None:
            tracer.kill()
            tracer.wait()

