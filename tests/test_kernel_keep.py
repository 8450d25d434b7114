"""Never lose the trace: a hung-up terminal, a killed tracer and a full disk keep what was traced."""

from __future__ import annotations

import contextlib
import errno
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
import pytest

from conftest import IOTRACE, ROOT, kill_9_after_a_roll, needs_root, rolled, tracing_a_sleeper
from tracer import load as tracer_load

pytestmark = [needs_root, pytest.mark.kernel]


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
    out = tmp_path / "trace"
    with tracing_a_sleeper(out, "0.3") as (sleeper, tracer):
        time.sleep(1)
        tracer.send_signal(signal.SIGHUP)
        stdout, stderr = tracer.communicate(timeout=60)
        assert tracer.returncode == 0, stderr
        assert "(SIGHUP)" in stdout and f"Trace written to {out}" in stdout
        meta = _meta(out)
        assert meta["stop_reason"] == "SIGHUP" and meta["stop_ns"] is not None
        assert pd.read_parquet(out / "processes").pid.tolist() == [sleeper.pid]



def test_kill_9_keeps_the_processes_and_says_cut_short(tmp_path):
    """After kill -9 nothing runs at exit: the processes rows rolled with the other segments
    still name the training loop, and the report says the trace was cut short."""
    out = tmp_path / "trace"
    # the shell itself reads
    kill_9_after_a_roll(out, "while :; do read x < /etc/hostname; sleep 0.05; done")
    assert _meta(out)["stop_ns"] is None
    trace = tracer_load(out)
    procs = trace.processes.drop_duplicates("pid", keep="last")
    main = procs[procs.role == "main"]
    assert len(main) == 1 and str(main.comm.iloc[0]) == "sh"
    # every process the latency rows name has a processes row
    assert set(trace.latency.pid) <= set(procs.pid)
    r = subprocess.run([*IOTRACE, "report", str(out), "--histograms"], capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    header = r.stdout.splitlines()[0]
    assert "cut short" in header and "(None)" not in header, header
    assert f"pid {int(main.pid.iloc[0])} sh (main)" in r.stdout
    assert not [line for line in r.stdout.splitlines()
                if line.startswith("pid ") and line.split()[2] == "?"]


def test_a_finished_trace_has_one_processes_row_each(tmp_path):
    """A process alive at a segment roll (5 s) and gone later has had two rows written; the
    finished trace keeps its last one only."""
    out = tmp_path / "trace"
    r = subprocess.run([*IOTRACE, "-o", str(out), "-i", "0.5", "--", "sh", "-c",
                        "sleep 6; read x < /etc/hostname"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    procs = pd.read_parquet(out / "processes")
    assert sorted(procs.comm.astype(str)) == ["sh", "sleep"], procs.to_string()
    assert procs.pid.is_unique and procs.exit.notna().all()
    assert len(list((out / "processes").glob("part-*.parquet"))) == 1


def _fill(directory: Path) -> None:
    """Writes a file into `directory` until its file system has no space left."""
    with open(directory / "filler", "wb", buffering=0) as f:
        for size in (1 << 20, 1 << 16, 1 << 12, 1 << 9):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e


def test_full_disk_stops_cleanly_and_keeps_what_was_written(tmp_path):
    """-o on a file system that fills up while tracing: one line naming the file that could
    not be written and what to do, exit 4, no traceback; the segments written before stay
    readable and `iotrace report` reads them."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2M", "tmpfs", str(mnt)], check=True)
    tracer = None
    try:
        out = mnt / "trace"
        loop = "while :; do read x < /etc/hostname; sleep 0.05; done"
        tracer = subprocess.Popen([*IOTRACE, "-o", str(out), "-i", "0.5", "--", "sh", "-c", loop],
                                  cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, start_new_session=True)
        assert tracer.stderr.readline().startswith("Tracing")
        deadline = time.monotonic() + 30
        while not rolled(out) and time.monotonic() < deadline:
            time.sleep(0.2)
        written = sorted(p.relative_to(out) for p in out.glob("*/part-*.parquet"))
        assert written, "no segment was rolled within 30 s"
        _fill(mnt)
        code = tracer.wait(timeout=60)
        os.killpg(tracer.pid, signal.SIGKILL)  # the traced shell, which holds the pipes too
        stdout, stderr = tracer.communicate(timeout=10)
        assert code == 4, stderr
        assert "Traceback" not in stdout + stderr
        lines = stderr.strip().splitlines()
        assert len(lines) == 1, stderr  # ("Tracing ..." was read above)
        assert lines[0].startswith(f"iotrace: error: No space left on device writing {out}/")
        assert "free space or choose another -o DIR" in lines[0]
        assert f"what was written before is kept in {out}" in lines[0]
        assert "Traced " in stdout  # the summary from memory
        assert not list(out.glob("*/.*.tmp")) and not list(out.glob(".tmp/*"))
        trace = tracer_load(out)
        assert not trace.latency.empty
        procs = trace.processes.drop_duplicates("pid", keep="last")
        assert str(procs[procs.role == "main"].comm.iloc[0]) == "sh"
        r = subprocess.run([*IOTRACE, "report", str(out), "--histograms"], capture_output=True,
                           text=True, timeout=120, cwd=ROOT)
        assert r.returncode == 0 and " sh (main)" in r.stdout, r.stderr
    finally:
        if tracer is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(tracer.pid, signal.SIGKILL)  # the traced shell too
            tracer.wait()
        subprocess.run(["umount", str(mnt)], check=True)
