"""The loop's states beyond storage reads, on real PyTorch jobs (tracer.workloads.scenarios):
data fetched over HTTP from a slow server, the loop's own fsynced log on a disk with few write
IOPS, a checkpoint saved by a background thread (a stall) and by a forked child that ends before
the next (no stall); each traced from its start and attached to once its workers run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from conftest import EXACT, needs_root, run_iotrace

torch = pytest.importorskip("torch", reason="the PyTorch scenarios need torch (pip install torch)")
from scenario_trace import shared  # noqa: E402

from tracer.workloads.scenarios import SPECS  # noqa: E402

pytestmark = [needs_root, pytest.mark.kernel]

DATA_WAITS = {"dataloader_io_bound", "dataloader_cpu_bound", "dataloader_network_bound",
              "sync_loading"}


def table(f: pd.DataFrame) -> str:
    return f[["kind", "severity", "summary"]].to_string()


@pytest.mark.parametrize("force", ["", "classic_syscalls"])
def test_socket_reads_are_counted(tmp_path, tracefs, force):
    """recv() and recvmsg() on a TCP socket are syscall reads of target `socket`, exactly, on
    the raw syscall hooks and on the classic tracepoints (--auto's); on a Unix socket (how
    PyTorch hands batches' shared memory between processes) they are `unix_socket`."""
    script = ("import socket\n"
              "def talk(a, b, n, m):\n"
              "    for _ in range(n):\n"
              "        a.send(b'x' * 100); assert len(b.recv(100)) == 100\n"
              "    for _ in range(m):\n"
              "        a.send(b'y' * 100); assert len(b.recvmsg(100)[0]) == 100\n"
              "talk(*socket.socketpair(), 7, 3)\n"
              "srv = socket.create_server(('127.0.0.1', 0))\n"
              "c = socket.create_connection(srv.getsockname())\n"
              "s, _ = srv.accept()\n"
              "for sock in (c, s):\n"
              "    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n"
              "talk(c, s, 5, 2)\n")
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), *EXACT, "--", sys.executable, "-c", script,
                    env={**os.environ, "IOTRACE_FORCE": force})
    assert r.returncode == 0, r.stderr
    lat = pd.read_parquet(out / "latency")
    reads = lat[(lat.layer == "syscall") & (lat.op == "read")].groupby("target")
    for target, expected in (("socket", (7, 700)), ("unix_socket", (10, 1000))):
        assert (reads["count"].sum()[target], reads["bytes"].sum()[target]) == expected


@pytest.mark.parametrize("mode", ["launch", "attach"])
def test_data_over_the_network(mode, tmp_path_factory):
    t, sc = shared("dataloader_network_bound", "launch" if mode == "launch" else "workers",
                   tmp_path_factory)
    final = t.final_findings()
    assert final.kind.iloc[0] == "dataloader_network_bound", table(final)
    assert not set(final.kind) & (DATA_WAITS - {"dataloader_network_bound"} | {"not_io_bound"})
    ev = json.loads(final.evidence.iloc[0])
    assert ev["workers_socket_pct"] >= 50 and ev["socket_read_p99_ns"] >= 64_000_000
    server = sc.argv[sc.argv.index("--data-url") + 1].removeprefix("http://")
    assert ev["peers"] == [server]  # the slow server, named from /proc
    workers = t.table("processes").query("role == 'dataloader_worker'")
    assert set(workers.peers.dropna()) == {server}  # (rows before a peer was seen have none)
    if mode == "launch":  # every sample's body came through the traced sockets, with headers
        bodies = 2 * SPECS[sc.name].n_files * SPECS[sc.name].file_kib * 1024
        assert bodies <= ev["bytes_received"] <= bodies + 2 * SPECS[sc.name].n_files * 1024
    assert "] dataloader_network_bound:" in t.stdout


@pytest.mark.parametrize("mode", ["launch", "attach"])
def test_the_loops_own_fsynced_log(mode, tmp_path_factory):
    t, sc = shared("sync_writes", "launch" if mode == "launch" else "workers", tmp_path_factory)
    final = t.final_findings()
    assert final.kind.iloc[0] == "sync_writes", table(final)
    assert not set(final.kind) & (DATA_WAITS | {"checkpoint_stall", "not_io_bound"})
    ev = json.loads(final.evidence.iloc[0])
    assert ev["file"] == str(sc.log) and ev["fsync_mean_ns"] > 0
    files = t.table("files")
    log = files[(files.path == str(sc.log)) & (files.role == "main")]
    fsyncs = log[log.op == "fsync"].ops.sum()
    steps = sum(n for _, n, _ in t.job.epochs)
    assert log[log.op == "write"].ops.sum() == fsyncs  # one line, one fsync, per step
    assert fsyncs == steps if mode == "launch" else 0 < fsyncs <= steps


@pytest.mark.parametrize("mode", ["launch", "attach"])
def test_a_background_thread_checkpoint_that_stalls(mode, tmp_path_factory):
    """The loop waits in a join for the saver thread's fsync (measured: asleep in a futex,
    woken by that thread): `checkpoint`, said to come from a background save."""
    t, _ = shared("checkpoint_thread", "launch" if mode == "launch" else "workers",
                  tmp_path_factory)
    final = t.final_findings()
    assert final.kind.iloc[0] == "checkpoint_stall", table(final)
    assert not set(final.kind) & (DATA_WAITS | {"not_io_bound"})
    ev = json.loads(final.evidence.iloc[0])
    assert ev["background"] and ev["saver"] == "thread"
    assert ev["loop_woken_by_own_ns"] > ev["loop_woken_by_timers_ns"]  # a join, not timers
    assert "in the background (another thread)" in final.summary.iloc[0]


def test_attached_while_a_background_save_is_under_way(tmp_path_factory):
    """Attached while the saver thread writes the first checkpoint and the loop sleeps in its
    join: that sleep began before the trace, no worker ends it, and the workers have nothing to
    do meanwhile, so it is not a wait for data (it was, from the wake-ups before it)."""
    t, _ = shared("checkpoint_thread", "save", tmp_path_factory)
    final = t.final_findings()
    assert final.kind.iloc[0] == "checkpoint_stall", table(final)
    assert not set(final.kind) & (DATA_WAITS | {"not_io_bound"})
    loop = t.table("loop")
    waits = loop[["data_wait_io_ns", "data_wait_cpu_ns", "data_wait_network_ns"]].sum().sum()
    assert waits < 0.02 * loop.interval_ns.sum(), loop.to_string()  # the data is warm


@pytest.mark.parametrize("mode", ["launch", "attach"])
def test_a_forked_child_checkpoint_that_does_not_stall(mode, tmp_path_factory):
    t, _ = shared("checkpoint_fork", "launch" if mode == "launch" else "workers",
                  tmp_path_factory)
    final = t.final_findings()
    assert final.kind.iloc[0] == "not_io_bound", table(final)
    assert "checkpoint_stall" not in set(final.kind)
    procs = t.table("processes")
    assert (procs.role == "child").any()  # the saver was seen
    assert "Checkpoint written in the background by pid" in t.stdout
    report = subprocess.run([sys.executable, "-m", "tracer.cli", "report", str(t.out)],
                            capture_output=True, text=True, timeout=120)
    assert "Checkpoint written in the background by pid" in report.stdout  # from the rows
