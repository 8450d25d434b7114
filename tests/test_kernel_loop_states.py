"""The loop's states beyond storage reads: the socket reads they rest on."""

from __future__ import annotations

import sys

import pandas as pd
import pytest

from conftest import EXACT, needs_root, run_iotrace

pytestmark = [needs_root, pytest.mark.kernel]


def test_socket_reads_are_counted(tmp_path):
    """recv() and recvmsg() on a socket are syscall reads of target `socket`, exactly."""
    script = ("import socket\n"
              "a, b = socket.socketpair()\n"
              "for _ in range(7):\n"
              "    a.send(b'x' * 100); assert len(b.recv(100)) == 100\n"
              "for _ in range(3):\n"
              "    a.send(b'y' * 100); assert len(b.recvmsg(100)[0]) == 100\n")
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), *EXACT, "--", sys.executable, "-c", script)
    assert r.returncode == 0, r.stderr
    lat = pd.read_parquet(out / "latency")
    socket = lat[(lat.layer == "syscall") & (lat.op == "read") & (lat.target == "socket")]
    assert (socket["count"].sum(), socket["bytes"].sum()) == (10, 1000)
