"""Who else uses the disk (`device_users`, `device_contended`): untraced processes' requests
counted in the kernel by cgroup and name, checked against the kernel's own per-cgroup counters;
and on real PyTorch jobs, traced from their start and attached to once their workers run, with
four untraced `dd` neighbours started here, outside iotrace: sharing the job's throttled cgroup
(the job waits on the disk: device_contended), or in a cgroup of their own while the job
computes on cached data (no I/O finding)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from conftest import IOTRACE, ROOT, needs_root, reap
from tracer.core.vocab import IO_KINDS
from tracer.workloads.dataset import blkio_v1_root, disk_of

pytestmark = [needs_root, pytest.mark.kernel]

MB = 1_000_000
NEIGHBOURS = 4


def cgroup_reads(cg: Path, disk: tuple[int, int]) -> tuple[int, int]:
    """The kernel's count of the cgroup's reads from `disk`: (requests, bytes) that it
    submitted past its limit (blkio.throttle.io_serviced / io_service_bytes, cgroup v1)."""
    out = []
    for name in ("blkio.throttle.io_serviced", "blkio.throttle.io_service_bytes"):
        n = 0
        for line in (cg / name).read_text().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == f"{disk[0]}:{disk[1]}" and parts[1] == "Read":
                n = int(parts[2])
        out.append(n)
    return out[0], out[1]


@contextlib.contextmanager
def blkio_cgroup(name: str, path_on_disk: Path, read_bps: int = 0,
                 read_iops: int = 0) -> Iterator[Path]:
    """A cgroup v1 blkio cgroup `test-<name>` limiting reads of the disk of `path_on_disk`,
    removed afterwards (what is left in it moved to the root first). Not named like iotrace's
    throttling cgroups (`iotrace-*`), which a cleanup of crashed runs may remove."""
    root = blkio_v1_root()
    disk = disk_of(path_on_disk)
    if root is None or disk is None:
        pytest.skip("needs cgroup v1 blkio (its per-cgroup counters are the truth here)")
    cg = root / f"test-{name}"
    cg.mkdir()
    try:
        dev = f"{disk[0]}:{disk[1]}"
        (cg / "blkio.throttle.read_bps_device").write_text(f"{dev} {read_bps}\n")
        (cg / "blkio.throttle.read_iops_device").write_text(f"{dev} {read_iops}\n")
        yield cg
    finally:
        deadline = time.monotonic() + 5
        while True:
            for pid in (cg / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):  # gone meanwhile
                    (root / "cgroup.procs").write_text(f"{pid}\n")
            try:
                cg.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # exiting tasks leave a little after they are reaped


@pytest.fixture(scope="module")
def blob(tmp_path_factory) -> Iterator[Path]:
    """256 MiB that the neighbours read with O_DIRECT (no page cache: every read is the disk's)."""
    path = tmp_path_factory.mktemp("neighbours") / "blob.bin"
    with open(path, "wb") as f:
        for _ in range(256):
            f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())
    yield path
    path.unlink()


@contextlib.contextmanager
def neighbours(cg: Path, blob: Path, n: int = NEIGHBOURS) -> Iterator[list[int]]:
    """`n` untraced dd processes reading `blob` (O_DIRECT, 1 MiB at a time) in cgroup `cg`,
    each moved there before its first read; killed afterwards."""
    procs = [subprocess.Popen(["sh", "-c", f"echo $$ > {cg}/cgroup.procs && exec dd if={blob} "
                               "of=/dev/null bs=1M iflag=direct status=none"])
             for _ in range(n)]
    try:
        deadline = time.monotonic() + 10
        while not all(Path(f"/proc/{p.pid}/comm").read_text().strip() == "dd" for p in procs):
            assert time.monotonic() < deadline, "the neighbours did not start"
            time.sleep(0.02)
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def read_bytes(pids: list[int]) -> int:
    """The bytes these processes made the block layer read (/proc/PID/io: the kernel's count)."""
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("read_bytes:"):
                total += int(line.split()[1])
    return total


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape_device_users(port: int) -> dict[str, dict[tuple[str, ...], float]]:
    """The iotrace_device_user_* counters of /metrics: {"requests"|"bytes"|"service_seconds":
    {(device, op, who, user): value}}."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, dict[tuple[str, ...], float]] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name.startswith("iotrace_device_user_"):
            what = fam.name.removeprefix("iotrace_device_user_")
            for smp in fam.samples:
                lab = smp.labels
                out.setdefault(what, {})[
                    (lab["device"], lab["op"], lab["who"], lab["user"])] = smp.value
    return out


def test_untraced_reads_are_counted_by_cgroup_and_name(data_file, blob, tmp_path):
    """While iotrace traces a sleeper, untraced processes read the disk: dd (32 O_DIRECT reads
    of 64 KiB, in a cgroup without limits) and a Python process (40 of 4 KiB at 50 IO/s, so
    that blk-throttle's worker submits some of them). Each read is one request in its cgroup's
    rows, and the rows of each cgroup are exactly the kernel's count of its reads, under the
    reader's name, also for the requests that the kernel thread submitted; /metrics has the
    same counts by who and name."""
    disk = disk_of(data_file)
    reader = ("import mmap, os, sys, time\n"
              "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT); buf = mmap.mmap(-1, 4096)\n"
              "for i in range(40): os.preadv(fd, [buf], (3000 + 5 * i) * 4096)\n"
              "time.sleep(1.5)\n")  # alive when the kernel thread's requests are named
    tag = f"{os.getpid()}-{tmp_path.name}"
    # names of their own (links to dd and Python): /metrics names users without their cgroup,
    # and the other processes that read this disk meanwhile must not share them
    dd, python = tmp_path / f"dd{os.getpid()}"[:15], tmp_path / f"py{os.getpid()}"[:15]
    dd.symlink_to(shutil.which("dd"))
    python.symlink_to(sys.executable)
    # their programs and libraries from the page cache, so that the cgroups read the data only
    # and the sleeper reads nothing (its exec would read `sleep` where reclaim evicted it)
    subprocess.run(["dd", "if=/dev/null", "of=/dev/null", "status=none"], check=True)
    subprocess.run(["sleep", "0"], check=True)
    subprocess.run([sys.executable, "-c", "import mmap, os, sys, time"], check=True)
    out = tmp_path / "trace"
    port = free_port()
    with blkio_cgroup(f"users-a-{tag}", data_file) as free, \
            blkio_cgroup(f"users-b-{tag}", data_file, read_iops=50) as slow:
        tracer = subprocess.Popen([*IOTRACE, "-o", str(out), "-i", "0.5", "--prometheus",
                                   f"127.0.0.1:{port}", "--", "sleep", "6"],
                                  cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        try:
            line = tracer.stderr.readline()
            assert line.startswith("Serving metrics"), line + tracer.stderr.read()
            line = tracer.stderr.readline()
            assert line.startswith("Tracing"), line + tracer.stderr.read()
            subprocess.run(["sh", "-c", f"echo $$ > {free}/cgroup.procs && exec {dd} if={data_file} "
                            "of=/dev/null bs=64k count=32 skip=100 iflag=direct status=none"],
                           check=True)
            subprocess.run(["sh", "-c", f"echo $$ > {slow}/cgroup.procs && exec "
                            f"{python} -c '{reader}' {data_file}"], check=True)
            kernel = {cg: cgroup_reads(cg, disk) for cg in (free, slow)}
            time.sleep(1.2)  # two intervals: every request that ended is folded in
            metrics = scrape_device_users(port)
            _, stderr = tracer.communicate(timeout=60)
            assert tracer.returncode == 0, stderr
        finally:
            if tracer.poll() is None:
                tracer.kill()
                tracer.communicate()
    users = pd.read_parquet(out / "device_users")
    reads = users[users.op == "read"]

    def of(cg: Path) -> pd.DataFrame:
        return reads[reads.cgroup == "/" + cg.name]

    a, b = of(free), of(slow)
    # (a program file that reclaim evicted since the warm-up is read in the cgroup too, by the
    # shell before the exec or by the program)
    assert kernel[free][0] >= 32 and kernel[free][1] >= 32 * 65536
    assert (a.requests.sum(), a.bytes.sum()) == kernel[free], a.to_string()
    assert set(a.who) == {"other"} and set(a.comm) <= {dd.name, "sh"}
    assert a[a.comm == dd.name].requests.sum() >= 32
    assert kernel[slow][0] >= 40 and kernel[slow][1] >= 40 * 4096
    assert (b.requests.sum(), b.bytes.sum()) == kernel[slow], b.to_string()
    # the kernel thread's named after the cgroup's process
    assert set(b.comm) <= {python.name, "sh"} and python.name in set(b.comm), b.to_string()
    assert b[b.who == "kernel_thread"].requests.sum() > 0, b.to_string()
    assert (b.service_ns > 0).all() and (a.service_ns > 0).all()
    traced = reads[reads.who == "traced"]
    assert traced.empty, traced.to_string()  # the sleeper read nothing
    assert reads.container_id.isna().all()
    # /metrics: each reader's requests under its name, as the rows have them (scraped once
    # they were folded in; other processes of the host read the disk too, under their names)
    disk_name = str(a.device.iloc[0])
    for what, col in (("requests", "requests"), ("bytes", "bytes"),
                      ("service_seconds", "service_ns")):
        got = {(who, user): v for (dev, op, who, user), v in metrics[what].items()
               if dev == disk_name and op == "read"}
        for mine in (a[a.comm == dd.name], b[(b.who == "other") & (b.comm == python.name)]):
            name = mine.comm.iloc[0]
            want = mine[col].sum() / (1e9 if col == "service_ns" else 1)
            assert got.get(("other", name)) == pytest.approx(want, rel=1e-12), (name, got)


def job_argv(sc, cg: Path) -> list[str]:
    """The scenario's command, in cgroup `cg` (shared with the neighbours) instead of a
    throttling cgroup of its own."""
    argv, out, skip = sc.argv, [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg.startswith("--throttle-"):
            skip = True
        else:
            out.append(arg)
    return [*out, "--join-cgroup", str(cg)]


def traced_job(sc, mode: str, argv: list[str], out: Path, measure: list[int],
               cg: Path, disk: tuple[int, int]) -> tuple[str, dict]:
    """Runs `argv` traced (launch: `iotrace -- ARGV`; attach: `--pid` once its workers run);
    the kernel's counts from when iotrace starts tracing to when it exits: the bytes the
    processes `measure` read, and cgroup `cg`'s reads. (iotrace's stdout, those counts)"""
    from scenario_trace import wait_for_workers

    job = None
    if mode == "launch":
        sc.prepare_cache()
        cmd = [*IOTRACE, "-o", str(out), "--", *argv]
    else:
        r, w = os.pipe()
        job = subprocess.Popen([*argv, "--ready-fd", str(w), "--wait-signal"], env=sc.env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               pass_fds=(w,))
        os.close(w)
        with os.fdopen(r, "rb") as ready:
            assert ready.read(1) == b"r", job.communicate()[1]
        sc.prepare_cache()
        os.kill(job.pid, signal.SIGUSR1)
        wait_for_workers(job.pid)
        time.sleep(0.5)
        cmd = [*IOTRACE, "--pid", str(job.pid), "-o", str(out)]
    tracer = subprocess.Popen(cmd, cwd=ROOT, env=sc.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        line = tracer.stderr.readline()
        assert line.startswith("Tracing"), line + tracer.stderr.read()
        before = read_bytes(measure), cgroup_reads(cg, disk)[1]
        stdout, stderr = tracer.communicate(timeout=300)
        after = read_bytes(measure), cgroup_reads(cg, disk)[1]
        assert tracer.returncode == 0, stderr
        if job is not None:
            _, err = job.communicate(timeout=60)
            assert job.returncode == 0, err
    finally:
        reap(tracer, job)
    return stdout, {"neighbours": after[0] - before[0], "cgroup": after[1] - before[1]}


def findings(out: Path) -> pd.DataFrame:
    f = pd.read_parquet(out / "findings")
    return f[f.ts == f.ts.max()].sort_values("severity", ascending=False)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("device_users")


@pytest.mark.parametrize("mode", ["launch", "attach"])
def test_neighbours_in_the_jobs_throttled_cgroup(mode, blob, workdir, tmp_path):
    """3 workers read cold 1 MiB files under a 16 MB/s limit that 4 untraced dd processes share
    (the same cgroup): the workers wait on the disk, and the neighbours take more than half of
    it. iotrace's share of the cgroup's read bytes that were the neighbours' is within 5 points
    of the kernel's (their /proc/PID/io against the cgroup's io_service_bytes), and the
    finding says so, naming them."""
    pytest.importorskip("torch", reason="the PyTorch scenarios need torch")
    from tracer.workloads.scenarios import prepare

    sc = prepare("dataloader_io_bound", workdir)
    disk = disk_of(sc.data)
    try:
        with blkio_cgroup(f"shared-{os.getpid()}-{mode}", sc.data, read_bps=16 * MB) as cg, \
                neighbours(cg, blob) as dds:
            argv = [*job_argv(sc, cg), "--steps-per-epoch", "8"]  # 64 of its files
            stdout, kernel = traced_job(sc, mode, argv, tmp_path / "trace", dds, cg, disk)
    finally:
        sc.cleanup()
    out = tmp_path / "trace"
    users = pd.read_parquet(out / "device_users")
    mine = users[(users.op == "read") & (users.cgroup == "/" + cg.name)]
    assert set(mine.device) == {sc.disk}
    theirs = mine[mine.who != "traced"]
    share = theirs.bytes.sum() / mine.bytes.sum()
    truth = kernel["neighbours"] / kernel["cgroup"]
    print(f"neighbours' share of the cgroup's reads: iotrace {share:.3f}, kernel {truth:.3f}")
    assert 0.5 < truth < 0.9, kernel
    assert abs(share - truth) <= 0.05, (share, truth, mine.groupby("who").bytes.sum())
    # blk-throttle's worker submits most of their reads (named by the cgroup's processes), the
    # few that pass while the cgroup is within its limit are their own; the job's worker may
    # be named beside them (the CI pre-check saw it once): it is one of the cgroup's processes
    names = [[n.split(" x ")[-1] for n in comm.split(", ")] for comm in theirs.comm]
    assert all("dd" in n and set(n) <= {"dd", "pt_data_worker"} for n in names), theirs.to_string()
    final = findings(out)
    table = final[["kind", "severity", "summary"]].to_string()
    assert final.kind.iloc[0] == "dataloader_io_bound", table
    assert "device_contended" in set(final.kind), table
    assert not set(final.kind) & {"sync_loading", "dataloader_cpu_bound", "not_io_bound"}, table
    c = final[final.kind == "device_contended"].iloc[0]
    ev = json.loads(c.evidence)
    assert ev["device"] == sc.disk and ev["other_bytes_pct"] > 50
    assert {"comm": f"{NEIGHBOURS} x dd", "cgroup": "/" + cg.name} in [
        {k: o[k] for k in ("comm", "cgroup")} for o in ev["others"]], ev
    assert f"of {sc.disk}'s reads" in c.summary and f"{NEIGHBOURS} x dd in /{cg.name}" in c.summary
    assert "] device_contended:" in stdout
    report = subprocess.run([sys.executable, "-m", "tracer.cli", "report", str(out)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert "] device_contended:" in report.stdout, report.stdout  # again from the rows


@pytest.mark.parametrize("mode", ["launch", "attach"])
def test_a_busy_neighbour_the_job_does_not_wait_on(mode, blob, workdir, tmp_path):
    """A job computing on cached data while 4 untraced dd processes read the same disk (in a
    cgroup of their own, limited to 16 MB/s): they are most of the disk's reads, and the job
    gets no I/O finding."""
    pytest.importorskip("torch", reason="the PyTorch scenarios need torch")
    from tracer.workloads.scenarios import prepare

    sc = prepare("not_io_bound", workdir)
    disk = disk_of(sc.data)
    try:
        with blkio_cgroup(f"noisy-{os.getpid()}-{mode}", sc.data, read_bps=16 * MB) as cg, \
                neighbours(cg, blob) as dds:
            argv = [*sc.argv, "--epochs", "3"]
            _, kernel = traced_job(sc, mode, argv, tmp_path / "trace", dds, cg, disk)
    finally:
        sc.cleanup()
    out = tmp_path / "trace"
    final = findings(out)
    table = final[["kind", "severity", "summary"]].to_string()
    assert final.kind.iloc[0] == "not_io_bound", table
    assert not set(final.kind) & set(IO_KINDS), table
    users = pd.read_parquet(out / "device_users")
    theirs = users[(users.op == "read") & (users.cgroup == "/" + cg.name)]
    assert theirs.bytes.sum() >= kernel["neighbours"] // 2 > 0  # seen: busy, and not waited on
    assert set(theirs.comm) <= {f"{NEIGHBOURS} x dd", "dd"}, theirs.to_string()
