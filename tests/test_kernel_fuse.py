"""Data behind FUSE: a real PyTorch DataLoader job (3 workers) reads its samples through a real
FUSE file system (tests/workloads/slow_fuse.py, mfusepy over Debian's libfuse3) whose backend
answers each read after 20 ms over TCP, as an object store's mount does; launched and
attached. The loop waits on its workers' reads, and iotrace says where they went: the mount
(its type and source), the process that serves it (found by its /dev/fuse connection) and that
process's activity meanwhile (its CPU, its TCP peer the backend, its reads from storage).

Every test mounts its own file system and unmounts it and stops its server in its teardown,
failed or not."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from conftest import ROOT, needs_root
from tracer.report import diagnose_trace
from tracer.tracedir.reader import load
from tracer.workloads import dataset as ds
from tracer.workloads.scenarios import SPECS, Scenario, argv_for

pytestmark = [needs_root, pytest.mark.kernel]

SERVER = ROOT / "tests/workloads/slow_fuse.py"
N_FILES, FILE_KIB, DELAY_MS = 128, 512, 40
# what a FUSE data set may add to the finding that leads: its file system's context; and,
# while other test runs read this machine's disk, that they did (never the daemon: its reads
# are the job's)
ALLOWED = {"dataloader_io_bound", "slow_filesystem", "device_contended"}


@dataclass
class Mounted:
    mnt: Path
    data: Path
    paths: list[Path]
    server: subprocess.Popen[str]
    port: int


def unmount(mnt: Path) -> None:
    if os.path.ismount(mnt):
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False, timeout=30)


@contextlib.contextmanager
def slow_fuse(tmp: Path) -> Iterator[Mounted]:
    if shutil.which("fusermount3") is None or not os.path.exists("/dev/fuse"):
        pytest.skip("needs fuse3 (fusermount3) and /dev/fuse")
    pytest.importorskip("mfusepy", reason="the FUSE server is written with mfusepy")
    data, mnt = tmp / "backing", tmp / "mnt"
    paths = ds.make_dataset(data, N_FILES, FILE_KIB)
    mnt.mkdir()
    server = subprocess.Popen([sys.executable, str(SERVER), str(data), str(mnt),
                               "--delay-ms", str(DELAY_MS)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()  # "ready PORT" once the mount answers
        assert line.startswith("ready "), line + server.stderr.read()
        yield Mounted(mnt, data, paths, server, int(line.split()[1]))
    finally:
        unmount(mnt)  # the server then stops its store and exits
        try:
            server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate(timeout=30)
        unmount(mnt)  # a server that failed to mount, or was killed, leaves it to take down


def scenario(m: Mounted, tmp: Path) -> Scenario:
    """The dataloader_io_bound scenario's job, unthrottled, reading the mount: its cache state
    is its backing files' (cold), which the server reads."""
    spec = replace(SPECS["dataloader_io_bound"], name="fuse_io_bound", n_files=N_FILES,
                   file_kib=FILE_KIB, read_bps=0)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return Scenario(spec=spec, workdir=tmp, data=m.mnt, paths=m.paths,
                    argv=argv_for(spec, m.mnt, None), setup=[], checkpoint_dir=None, env=env)


@pytest.mark.parametrize("mode", ["launch", "attach"])
def test_reads_through_fuse_name_the_mount_and_its_daemon(mode, tmp_path):
    pytest.importorskip("torch", reason="the PyTorch scenarios need torch")
    from scenario_trace import attached, launched

    with slow_fuse(tmp_path) as m:
        sc = scenario(m, tmp_path)
        try:
            t = (launched(sc, tmp_path / "trace") if mode == "launch"
                 else attached(sc, tmp_path / "trace", after_workers=True))
        finally:
            sc.cleanup()
        pid = m.server.pid
        st_dev = os.stat(m.mnt).st_dev
    f = t.final_findings()
    table = f[["kind", "severity", "summary"]].to_string()
    print(table)
    assert f.kind.iloc[0] == "dataloader_io_bound", table
    assert set(f.kind) <= ALLOWED, table
    assert "slow_filesystem" in set(f.kind), table  # fuse.slowfuse is FUSE
    for ev in f[f.kind == "device_contended"].evidence:
        assert not {o["comm"] for o in json.loads(ev)["others"]} & {"slowfuse",
                                                                    "slowfuse_store"}, ev
    lead = f.iloc[0]
    ev = json.loads(lead.evidence)
    fuse = ev["fuse"]
    source = f"tcp://127.0.0.1:{m.port}/backing"
    assert {k: fuse[k] for k in ("mount_point", "fs_type", "source", "daemon_pid",
                                 "daemon_comm", "found_by")} == {
        "mount_point": str(m.mnt), "fs_type": "fuse.slowfuse", "source": source,
        "daemon_pid": pid, "daemon_comm": "slowfuse", "found_by": "fdinfo"}
    # while the job waited the daemon fetched from its backend, its one TCP peer (the store,
    # another process, holds the data in memory: nothing came from storage) and worked
    assert fuse["daemon_peers"] == [f"127.0.0.1:{m.port}"], fuse
    assert fuse["daemon_net_rx_bytes_s"] > 0 and fuse["daemon_rtt_us"] > 0, fuse
    assert fuse["daemon_disk_read_bytes_s"] == 0 and fuse["daemon_cpu_pct"] > 0, fuse
    assert (f"the data comes through FUSE mount {m.mnt} (fuse.slowfuse, source {source}) served by "
            f"pid {pid} (slowfuse), which used ") in lead.summary, lead.summary
    assert f"fetched from 127.0.0.1:{m.port} (" in lead.summary, lead.summary
    # the job's files on the mount are named (the server lists no inode numbers)
    files = t.table("files")
    mine = files[files.path.str.startswith(str(m.mnt))]
    assert set(mine.fs_type) == {"fuse.slowfuse"}, set(mine.fs_type)
    assert (mine.path_source != "unknown").all(), mine.path[mine.path_source == "unknown"]
    # and the folders the kernel added the start-up's imports up in: unnamed, they were
    # taken for data (a false small_files verdict)
    unnamed = files.path[files.path.str.startswith("(folder inode")]
    assert unnamed.empty, unnamed

    rows = t.table("fuse")
    assert set(rows.device) == {f"{os.major(st_dev)}:{os.minor(st_dev)}"}
    assert set(rows.daemon_pid) == {pid} and set(rows.mount_point) == {str(m.mnt)}
    assert (mine.device == rows.device.iloc[0]).all()
    # what the daemon received is what the job read through it, in the intervals that count
    # it (the first row of a mount has nothing to count from), give or take the reads in
    # flight at their edges
    counted = rows[rows.net_rx_bytes.notna()]
    job = mine[(mine.op == "read") & mine.ts.isin(counted.ts)].bytes.sum()
    print(f"the daemon received {counted.net_rx_bytes.sum():.0f} bytes, the job read {job}")
    assert 0.8 * job <= counted.net_rx_bytes.sum() <= 1.2 * job + (1 << 20)

    # the same from the trace alone
    again = [x for x in diagnose_trace(load(str(t.out))).findings()
             if x.kind == "dataloader_io_bound"]
    assert [(x.summary, json.loads(json.dumps(x.evidence))) for x in again] == [
        (lead.summary, ev)]
