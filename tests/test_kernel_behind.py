"""A tracer that falls behind: while iotrace is stopped (SIGSTOP), a job reads thousands of
files once each; nothing drains the ring buffer meanwhile. Every file read must still have its
real path in the trace, and the events lost must say what was not recovered."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pandas as pd
import pytest
from workloads.many_files import start

from conftest import EXACT, IOTRACE, ROOT, needs_root

pytestmark = [needs_root, pytest.mark.kernel]

FILES = 20000  # the count: far more first sights than a 1 MiB ring buffer held at 2 KiB each


def read_while_stopped(tmp_path, names: list[str]):
    """Reads each of `names` (made in a fresh directory) once while iotrace is stopped; the
    trace's files (read by the job), the names wanted, and meta.json."""
    data = tmp_path / "many"
    work, ready_r = start(data, names)
    out = tmp_path / "trace"
    tracer = subprocess.Popen([*IOTRACE, "--pid", str(work.pid), "-o", str(out), *EXACT],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        assert tracer.stderr.readline().startswith("Tracing")
        tracer.send_signal(signal.SIGSTOP)  # a tracer that gets no CPU: nothing drains
        work.send_signal(signal.SIGUSR1)
        assert os.read(ready_r, 1) == b"d"  # every file read while the tracer was stopped
        tracer.send_signal(signal.SIGCONT)
        work.send_signal(signal.SIGUSR1)
        assert work.wait(timeout=60) == 0
        _, err = tracer.communicate(timeout=120)
    finally:
        tracer.send_signal(signal.SIGCONT)
        for p in (work, tracer):
            if p.poll() is None:
                p.kill()
                p.wait()
        os.close(ready_r)
    assert tracer.returncode == 0, err
    files = pd.read_parquet(out / "files")
    read = files[(files.pid == work.pid) & (files.op == "read")]
    return read, {str(data / n) for n in names}, json.loads((out / "meta.json").read_text())


def test_paths_of_files_read_while_the_tracer_is_stopped(tmp_path):
    """Packed records in a 4 MiB ring buffer: the issue's 20 000 files all fit."""
    read, want, meta = read_while_stopped(tmp_path, [f"f{i:05d}.bin" for i in range(FILES)])
    with_path = len(want & set(read.path))
    assert with_path == FILES, f"{with_path} of {FILES} files read have their path"
    assert not {p for p in read.path if p.startswith("(inode")}
    assert set(read.path_source) == {"kernel"}
    assert meta["events_lost"] == 0
    assert meta["self_cost"]["file_paths_lost"] == {"recovered": 0, "unknown": 0}


def test_paths_of_files_whose_records_did_not_fit(tmp_path):
    """More first sights than the ring buffer holds (names of 50 bytes, ~190-byte records): the
    files whose records were lost are found in the directory of those whose records came."""
    n = 30000
    names = [f"f{i:05d}-{'x' * 40}.bin" for i in range(n)]
    read, want, meta = read_while_stopped(tmp_path, names)
    with_path = len(want & set(read.path))
    assert with_path == n, f"{with_path} of {n} files read have their path"
    assert not {p for p in read.path if p.startswith("(inode")}
    assert meta["events_lost"] > 0  # else this tests nothing: the buffer did fill up
    recovered = read[read.path_source == "sibling"].path.nunique()
    assert 0 < recovered < n
    assert meta["self_cost"]["file_paths_lost"] == {"recovered": recovered, "unknown": 0}
