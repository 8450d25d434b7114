"""Exactness of the kernel side: real BPF programs tracing a workload with known I/O counts.

iowork (a static C program, so no dynamic loader reads anything) does N O_DIRECT 4 KiB reads
at distinct non-adjacent offsets, M page-cache preads, P pipe and S socket round trips, and
forks a child that does K O_DIRECT reads. The trace must show exactly those numbers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import (
    EXACT,
    IOTRACE,
    ROOT,
    kill_9_after_a_roll,
    needs_root,
    run_iotrace,
    tracing_a_sleeper,
    unseen,
    warm,
)
from tracer.core import abi
from tracer.core.histogram import format_bytes
from tracer.kernel.libbpf import Map
from tracer.kernel.probes import Probes
from tracer.live.procfs import disks_in_flight
from tracer.workloads.dataset import disk_of, throttle, throttle_cgroup, unthrottle

pytestmark = [needs_root, pytest.mark.kernel]

N, M, K, P, S = 300, 120, 70, 5, 3
PAGE = 4096


def readahead_bytes(path: str) -> int:
    """The readahead of the disk `path` is on: the most a page fault reads around its page."""
    major, minor = disk_of(path)
    return int(Path(f"/sys/dev/block/{major}:{minor}/queue/read_ahead_kb").read_text()) << 10


def workload_args(data_file) -> list[str]:
    return [str(data_file), "--direct", str(N), "--cached", str(M), "--child-direct", str(K),
            "--write-pipe", str(P), "--socket", str(S)]


def prime(iowork, data_file) -> None:
    """One untraced run: the binary, the file's extent metadata and its first MiB get cached,
    so the traced run does exactly the block reads it asks for."""
    subprocess.run([str(iowork), *workload_args(data_file)], check=True)
    warm(data_file)


def sums(lat: pd.DataFrame, pid: int, **where) -> tuple[int, int]:
    sel = lat[lat.pid == pid]
    for col, val in where.items():
        sel = sel[sel[col] == val]
    return int(sel["count"].sum()), int(sel["bytes"].sum())


def check_trace(out, parent_pid: int | None = None) -> None:
    lat = pd.read_parquet(out / "latency")
    procs = pd.read_parquet(out / "processes")
    main = procs[procs.role == "main"]
    assert len(main) == 1
    parent = int(main.pid.iloc[0])
    if parent_pid is not None:
        assert parent == parent_pid
    kids = procs[procs.ppid == parent]
    assert len(kids) == 1 and kids.role.iloc[0] == "child"
    child = int(kids.pid.iloc[0])
    assert procs.exit.notna().all()

    assert sums(lat, parent, layer="syscall", op="read", target="file") == (N + M, PAGE * (N + M))
    # Extra block reads would be page-cache misses (the binary, file system metadata): say which.
    files = pd.read_parquet(out / "files")
    missed = files[files.pages_missed > 0][["pid", "path", "pages_missed"]].to_string()
    # Fewer would be requests lost in the kernel: say what the kernel reported losing.
    cost = json.loads((out / "meta.json").read_text())["self_cost"]
    missed += (f"\nmap-full drops {cost['map_full_drops']}, recursion misses "
               f"{ {p['name']: p['recursion_misses'] for p in cost['programs'] if p['recursion_misses']} }")
    # ... or charged to someone else (a request started where its submitter is not current)
    blocks = lat[lat.layer.str.startswith("block")].groupby(["pid", "layer", "op", "attribution"])
    missed += f"\nblock rows by process:\n{blocks[['count', 'bytes']].sum().to_string()}"
    # Every block read is counted, or counted apart as ended unseen (the kernel ran no completion
    # program for it; none on most runs): exact either way.
    lost, lost_bytes = unseen(out)
    mine = sums(lat, parent, layer="block", op="read")
    theirs = sums(lat, child, layer="block", op="read")
    missed += f"\nended unseen: {lost} requests, {lost_bytes} bytes"
    assert (mine[0] + theirs[0] + lost, mine[1] + theirs[1] + lost_bytes) == (N + K, PAGE * (N + K)), missed
    assert mine[0] <= N and theirs[0] <= K, missed
    assert sums(lat, parent, layer="block", op="read", attribution="direct") == mine
    assert sums(lat, parent, layer="syscall", op="read", target="pipe") == (P, 100 * P)
    assert sums(lat, parent, layer="syscall", op="write", target="pipe") == (P, 100 * P)
    assert sums(lat, parent, layer="syscall", op="read", target="unix_socket") == (S, 100 * S)
    assert sums(lat, parent, layer="syscall", op="write", target="unix_socket") == (S, 100 * S)
    assert sums(lat, child, layer="syscall", op="read", target="file") == (K, PAGE * K)
    # Histogram rows are well formed: buckets are log2 ranges of ns.
    assert (lat.bucket_hi_ns > lat.bucket_lo_ns).all() and (lat["count"] > 0).all()
    assert str(lat.ts.dtype) == "datetime64[ns, UTC]"


@pytest.mark.parametrize("force, sizes", [
    ("", ""), ("raw_tp", ""), ("no_block_io_start", ""), ("raw_tp,no_block_io_start", ""),
    ("", "hist_slots=1,file_slots=2"), ("", "hist_slots=1,file_slots=2,file_log=0"),
    ("", "file_slots=2,file_log=2"), ("classic_syscalls", ""), ("mixed_syscalls", ""),
])
def test_command_mode_exact_counts(iowork, data_file, tmp_path, tracefs, force, sizes):
    """Also with the fallbacks older kernels take: raw_tp instead of tp_btf, and block requests
    first seen at insert/issue where block_io_start (6.5+) is missing. And with one slot in each
    slot table (slots.bpf.h): the first histogram and the first file's counters take them, every
    other key goes to the file log, or with none to the hash maps, and user space adds them up;
    with a log of one record per interval buffer, keys past it go to the hash map. And with the
    syscalls hooked on their classic tracepoints, as --auto does (loader.SYSCALL_HOOKS), or half
    so: the same counts."""
    prime(iowork, data_file)
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), *EXACT, "--", str(iowork), *workload_args(data_file),
                    env={**os.environ, "IOTRACE_FORCE": force, "IOTRACE_MAP_SIZES": sizes})
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith("Tracing")
    assert f"Trace written to {out}" in r.stdout
    meta = json.loads((out / "meta.json").read_text())
    hooks = meta["hooks"]
    syscalls = next((h for h in ("classic", "mixed") if f"{h}_syscalls" in force), "raw")
    assert meta["syscall_hooks"] == syscalls
    assert ("sys_enter" in hooks, "sys_exit" in hooks) == {
        "raw": (True, True), "mixed": (False, True), "classic": (False, False)}[syscalls]
    kind = "raw_tp" if "raw_tp" in force else "tp_btf"
    assert hooks["sched_process_fork"] == kind
    assert hooks["block_rq_issue"] == "raw_tp"  # reads task storage: raw_tp first (loader.py)
    assert hooks["block_rq_complete"] == hooks["block_rq_merge"] == hooks["block_rq_requeue"] == "raw_tp"
    assert hooks["block_io_start"] == ("missing" if "no_block_io_start" in force else "raw_tp")
    assert hooks["block_io_done"] == hooks["block_io_start"]  # both came in 6.5
    check_trace(out)
    # The live run ends with the first screen of `iotrace report`, the same text; the latency
    # histograms are the report's with --histograms only, the exact reads among them.
    rep = run_iotrace("report", str(out))
    assert rep.returncode == 0, rep.stderr
    start = r.stdout.index(f"Trace {out}: ")  # after the per-interval lines
    live = r.stdout[start:r.stdout.rindex(f"\n\nTrace written to {out}")]
    assert live + "\n" == rep.stdout
    assert "Training loop time" in live and "Devices" in live and "Traced: " in live
    assert f"Latency histograms per process and layer: iotrace report {out} --histograms" in live
    assert "Latency per process and layer:" not in live
    full = run_iotrace("report", str(out), "--histograms")
    assert full.returncode == 0, full.stderr
    assert full.stdout.startswith(live[:live.index("\nLatency histograms per process")]
                                  + "\nLatency per process and layer:")
    assert f"  syscall read (file): {N + M} ops, {format_bytes((N + M) * PAGE)}, p50 " \
        in full.stdout
    if not force and not sizes:  # --json for machines, --html with plots
        js = run_iotrace("report", str(out), "--json")
        assert js.returncode == 0, js.stderr
        assert "findings" in json.loads(js.stdout)
        html = tmp_path / "report.html"
        rh = run_iotrace("report", str(out), "--html", str(html))
        assert rh.returncode == 0, rh.stderr
        assert "<svg" in html.read_text() or "data:image" in html.read_text()
    # The /proc source rides on the same intervals: iostat and dstat columns.
    devices = pd.read_parquet(out / "devices")
    assert (devices.r_s >= 0).all() and not pd.read_parquet(out / "system").empty


def test_no_tracefs_needed(iowork, data_file, tmp_path):
    """Raw and BTF tracepoints are found by name: in a mount namespace without tracefs (and
    without debugfs, its older home), iotrace traces the same exact counts, and mounts nothing."""
    prime(iowork, data_file)
    out = tmp_path / "trace"
    argv = " ".join(map(str, [*IOTRACE, "-o", out, *EXACT, "--", iowork,
                              *workload_args(data_file)]))
    r = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         "umount -l /sys/kernel/tracing 2>/dev/null; umount -l /sys/kernel/debug 2>/dev/null; "
         f"test ! -e /sys/kernel/tracing/events || exit 99; {argv}; rc=$?; "
         "test ! -e /sys/kernel/tracing/events || exit 98; exit $rc"],
        capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    check_trace(out)


@pytest.mark.parametrize("force", ["", "classic_syscalls"])
def test_attach_mode_exact_counts(iowork, data_file, tmp_path, tracefs, force):
    prime(iowork, data_file)
    ready_r, ready_w = os.pipe()
    work = subprocess.Popen([str(iowork), *workload_args(data_file), "--wait-signal",
                             "--ready-fd", str(ready_w)], pass_fds=(ready_w,))
    os.close(ready_w)
    assert os.read(ready_r, 1) == b"r"
    out = tmp_path / "trace"
    tracer = subprocess.Popen([*IOTRACE, "--pid", str(work.pid), "-o", str(out), *EXACT], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "IOTRACE_FORCE": force})
    line = tracer.stderr.readline()
    assert line.startswith("Tracing"), line + tracer.stderr.read()
    warm(data_file)
    work.send_signal(signal.SIGUSR1)
    assert work.wait(timeout=30) == 0
    _, stderr = tracer.communicate(timeout=30)  # ends by itself: its target exited
    assert tracer.returncode == 0, stderr
    check_trace(out, parent_pid=work.pid)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["syscall_hooks"] == ("classic" if force else "raw")


def test_several_pids_all_traced(tmp_path):
    """$(pgrep ...) expanding to several PIDs: every one is a target and a `main`."""
    sleepers = [subprocess.Popen(["sleep", "30"]) for _ in range(2)]
    try:
        out = tmp_path / "trace"
        r = run_iotrace("--pid", *(str(p.pid) for p in sleepers), "-o", str(out), "-d", "0.5")
        assert r.returncode == 0, r.stderr
        procs = pd.read_parquet(out / "processes")
        assert sorted(procs[procs.role == "main"].pid) == sorted(p.pid for p in sleepers)
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


def _prog_ids() -> set[int]:
    out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True,
                         check=True).stdout
    return {p["id"] for p in json.loads(out or "[]")}


def _held_prog_ids(pid: int) -> set[int]:
    """The BPF programs a process holds (through program or link fds), from its fdinfo."""
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                for line in f:
                    if line.startswith("prog_id:"):
                        ids.add(int(line.split()[1]))
        except OSError:
            continue
    return ids


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_stop_by_signal_leaves_nothing_attached(tmp_path, how):
    stats_before = Path("/proc/sys/kernel/bpf_stats_enabled").read_text()
    out = tmp_path / "trace"
    with tracing_a_sleeper(out, "0.2") as (sleeper, tracer):
        mine = _held_prog_ids(tracer.pid)
        assert len(mine) >= 10 and mine <= _prog_ids()  # really attached
        time.sleep(0.5)
        tracer.send_signal(getattr(signal, how))
        tracer.communicate(timeout=20)
        if how == "SIGKILL":
            assert tracer.returncode == -signal.SIGKILL
        else:
            assert tracer.returncode == 0
            assert pd.read_parquet(out / "processes").pid.tolist() == [sleeper.pid]
        deadline = time.monotonic() + 5
        while mine & _prog_ids() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not (mine & _prog_ids())  # every one of its programs is gone
        # BPF stats were held by an fd, not the sysctl: the kernel gave them back, even on -9.
        assert Path("/proc/sys/kernel/bpf_stats_enabled").read_text() == stats_before
        assert (out / "meta.json").exists()


def test_interval_lines_and_csv(tmp_path):
    """Without a terminal: one dstat-like line per interval on stdout, and --csv FILE."""
    out, csv = tmp_path / "trace", tmp_path / "numbers.csv"
    r = run_iotrace("-o", str(out), "-i", "0.3", "--csv", str(csv), "--", "sh", "-c",
                    "head -c 1000000 /etc/services > /dev/null; sleep 1.2")
    assert r.returncode == 0, r.stderr
    before_summary = r.stdout[:r.stdout.index(f"Trace {out}: ")].splitlines()
    assert len(before_summary) >= 4  # a header and one line per interval
    rows = csv.read_text().splitlines()
    assert len(rows) >= 4 and rows[0].count(",") == rows[1].count(",")


def test_kill_9_keeps_every_closed_segment(tmp_path):
    """Segments roll every few seconds (5 s): after kill -9 the rolled ones are readable."""
    out = tmp_path / "trace"
    kill_9_after_a_roll(out, "while :; do head -c 4096 /etc/hostname > /dev/null; sleep 0.05; done",
                        timeout=20)
    lat = pd.read_parquet(out / "latency")
    assert len(lat), "no segment was rolled within 20 s"
    assert (lat[lat.layer == "syscall"]["count"] > 0).all()
    # the folder holds finished segments only (a write cut short is in DIR/.tmp)
    assert {p.suffix for p in (out / "latency").iterdir()} == {".parquet"}


def test_auto_discovers_jobs_started_later(tmp_path, tracefs):
    """--auto: two jobs started after iotrace are traced from the moment they start DataLoader
    workers; their workers' reads are counted exactly. A node agent hooks the syscalls on their
    classic tracepoints, which spare the host's other syscalls (loader.SYSCALL_HOOKS)."""
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(1 << 20))
    out = tmp_path / "trace"
    tracer = subprocess.Popen([*IOTRACE, "--auto", "-o", str(out), "-i", "0.5"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert tracer.stderr.readline().startswith("Tracing")
        work = ROOT / "tests/workloads/fake_job.py"
        jobs = [subprocess.Popen([sys.executable, str(work), str(data), "2", "25", "1"])
                for _ in range(2)]
        for j in jobs:
            assert j.wait(timeout=30) == 0
        tracer.send_signal(signal.SIGINT)
        _, stderr = tracer.communicate(timeout=30)
        assert tracer.returncode == 0, stderr
    finally:
        if tracer.poll() is None:
            tracer.kill()
    procs = pd.read_parquet(out / "processes")
    ours = {j.pid for j in jobs}  # (--auto also takes any other training job on this host)
    assert ours <= set(procs[procs.role == "main"].pid)
    workers = procs[(procs.role == "dataloader_worker") & procs.ppid.isin(ours)]
    assert sorted(workers.ppid) == sorted([j.pid for j in jobs] * 2)
    assert sorted(workers.worker_index) == [0, 0, 1, 1]
    files = pd.read_parquet(out / "files")
    reads = files[(files.path == str(data)) & (files.op == "read") & files.pid.isin(workers.pid)]
    assert reads.groupby("pid")["ops"].sum().tolist() == [25, 25, 25, 25]
    assert set(reads.role) == {"dataloader_worker"}
    assert json.loads((out / "meta.json").read_text())["syscall_hooks"] == "classic"


def test_prometheus_histogram_counts_the_reads(iowork, data_file, tmp_path):
    """--prometheus while tracing a workload with a known number of O_DIRECT reads: the block
    latency histogram's count plus the requests that ended unseen equals them at the scrape
    that follows the reads, and its buckets are cumulative. (A request whose end the kernel
    ran no program for is counted unseen by the interval after it ended, also the job's last,
    whose address no later request reuses: /metrics said 2 499 of 2 500 reads before.)"""
    import socket

    prime(iowork, data_file)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "trace"
    script = f"{iowork} {data_file} --direct {N} && sleep 8"  # the sleep keeps the trace open
    # --bpf-stats always: the reads take a few ms, which the sampled 2 % of an interval miss
    tracer = subprocess.Popen([*IOTRACE, "-o", str(out), "-i", "0.3", "--bpf-stats", "always",
                               "--prometheus", f"127.0.0.1:{port}", "--", "sh", "-c", script],
                              cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        assert tracer.stderr.readline().startswith("Serving metrics on http://127.0.0.1:")
        assert tracer.stderr.readline().startswith("Tracing")
        deadline, count, lost = time.monotonic() + 15, 0, 0
        while count + lost < N and time.monotonic() < deadline:
            time.sleep(0.3)
            count, buckets = _scrape_block_reads(port)
            lost = _scrape_self(port)["iotrace_self_block_completions_unseen_total"][()]
        time.sleep(1.0)  # a few more intervals: anything else read by now is in both
        count, buckets = _scrape_block_reads(port)
        own = _scrape_self(port)
    finally:
        os.killpg(tracer.pid, signal.SIGINT)
        tracer.communicate(timeout=30)
    # Exactly what the trace holds for the disk (the N reads, plus any page-in of the shell's
    # own files that reclaim had evicted), and at least the N reads.
    lat = pd.read_parquet(out / "latency")
    in_trace = lat[(lat.layer == "block") & (lat.op == "read")]["count"].sum()
    lost = own["iotrace_self_block_completions_unseen_total"][()]
    assert (count, lost) == (in_trace, unseen(out)[0])  # the trace's, at its end too
    assert count + lost >= N
    assert buckets == sorted(buckets) and buckets[-1] == count
    # iotrace's own cost: the block programs ran for each read, in measurable time.
    runs, secs = own["iotrace_self_bpf_runs_total"], own["iotrace_self_bpf_run_seconds_total"]
    assert sum(v for (obj, _), v in runs.items() if obj == "block") >= 2 * N
    assert all(secs[k] > 0 for k, v in runs.items() if v)
    assert own["iotrace_self_bpf_stats_enabled"][()] == 1
    assert set(own["iotrace_self_map_full_drops_total"].values()) == {0}
    assert own["iotrace_self_cpu_seconds_total"][()] > 0
    assert own["iotrace_self_peak_resident_memory_bytes"][()] > 10 << 20


def _scrape_self(port: int) -> dict[str, dict[tuple, float]]:
    """The iotrace_self_* samples: {name: {label values: value}}."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith("iotrace_self_"):
                out.setdefault(s.name, {})[tuple(s.labels.values())] = s.value
    return out


def _scrape_block_reads(port: int) -> tuple[float, list[float]]:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    fam = fams.get("iotrace_block_io_latency_seconds")
    reads = [s for s in (fam.samples if fam else []) if s.labels.get("op") == "read"]
    count = sum(s.value for s in reads if s.name.endswith("_count"))
    return count, [s.value for s in reads if s.name.endswith("_bucket")]


def traced_block_reads(code: str, data_file, tmp_path, env=None) -> tuple[pd.DataFrame, int]:
    """Runs Python `code` (sys.argv[1]: the data file) under iotrace, tracing into
    tmp_path/trace; (the block read rows charged to it, its /proc/PID/io read_bytes at the end)."""
    code += ("io = dict(l.split(': ') for l in open('/proc/self/io').read().splitlines())\n"
             "open(sys.argv[2], 'w').write(io['read_bytes'])\n")
    report = tmp_path / "read_bytes"
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), *EXACT, "--", sys.executable, "-c", code, str(data_file),
                    str(report), env=env)
    assert r.returncode == 0, r.stderr
    lat = pd.read_parquet(out / "latency")
    main = pd.read_parquet(out / "processes").query("role == 'main'").pid.iloc[0]
    return (lat[(lat.pid == main) & (lat.layer == "block") & (lat.op == "read")],
            int(report.read_text()))


def test_block_read_bytes_agree_with_proc_pid_io(data_file, tmp_path):
    """iotop's number: /proc/PID/io read_bytes (bytes this process made the block layer read)
    equals the block read bytes iotrace charged to it, for a process doing direct I/O."""
    code = ("import mmap,os,sys\n"
            "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT); buf = mmap.mmap(-1, 4096)\n"
            "for i in range(200): os.preadv(fd, [buf], (1000 + 5 * i) * 4096)\n")
    blk, read_bytes = traced_block_reads(code, data_file, tmp_path)
    lost, lost_bytes = unseen(tmp_path / "trace")
    assert read_bytes == blk["bytes"].sum() + lost_bytes >= 200 * 4096
    assert blk["count"].sum() + lost >= 200


@pytest.mark.parametrize("slots", ["", "rq_slots=1"])
def test_concurrent_block_reads_all_counted(data_file, tmp_path, slots):
    """Four threads keep O_DIRECT reads in flight at once. Requests in flight are kept in a table
    of slots, and in a hash map when their slot is taken (bpf/block.bpf.c): with one slot,
    almost every request takes the hash-map path. Either way the bytes iotrace charges equal
    /proc/PID/io read_bytes, and no insert was refused."""
    threads, reads = 4, 150
    code = ("import mmap,os,sys,threading\n"
            "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)\n"
            "def run(t):\n"
            "    buf = mmap.mmap(-1, 4096)\n"
            f"    for i in range({reads}): os.preadv(fd, [buf], (2000 + 7 * ({reads} * t + i)) * 4096)\n"
            f"ts = [threading.Thread(target=run, args=(t,)) for t in range({threads})]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n")
    blk, read_bytes = traced_block_reads(code, data_file, tmp_path,
                                         env={**os.environ, "IOTRACE_MAP_SIZES": slots})
    lost, lost_bytes = unseen(tmp_path / "trace")
    assert read_bytes == blk["bytes"].sum() + lost_bytes >= threads * reads * PAGE
    assert blk["count"].sum() + lost >= threads * reads
    cost = json.loads((tmp_path / "trace" / "meta.json").read_text())["self_cost"]
    assert cost["map_full_drops"]["rq_starts"] == 0


def throttled_trace(code: str, data_file, tmp_path, force: str = "", **limits) -> tuple:
    """Runs Python `code` (sys.argv[1]: the data file, sys.argv[2]: a scratch directory) under
    iotrace inside a throttled blkio cgroup (`limits`: throttle()'s), into which it moves itself
    before any I/O. blk-throttle holds the bios over the limit and a kernel worker submits them
    later: the requests are not started by the process. (the latency rows charged to it, its
    /proc/PID/io at the end, the trace directory)."""
    name = f"test-{os.getpid()}-{tmp_path.name}"
    if throttle(None, data_file, limits.pop("read_bps", None), name=name, **limits) is None:
        pytest.skip("needs a blkio (v1) or io (v2) cgroup controller and a disk under the data")
    try:
        report = tmp_path / "io"
        epilogue = ("io = dict(l.split(': ') for l in open('/proc/self/io').read().splitlines())\n"
                    f"open({str(report)!r}, 'w').write(json.dumps(io))\n")
        code = (f"import json,os,sys\nopen({str(throttle_cgroup(name))!r} + '/cgroup.procs', 'w')"
                ".write(str(os.getpid()))\n" + code + epilogue)
        # the interpreter's own files, the epilogue's code included, come from the page cache
        # in the traced run: a page read after the epilogue would be traced but not reported
        subprocess.run([sys.executable, "-c", "import json, mmap, os, sys, threading, time\n"
                        + epilogue], check=True)
        # the traced epilogue makes its report anew: truncating a file that has blocks makes
        # ext4 write it back at its close, a write the process issues (auto_da_alloc) that
        # may end after the trace and be counted with the unseen requests
        report.unlink()
        out = tmp_path / "trace"
        r = run_iotrace("-o", str(out), *EXACT, "--", sys.executable, "-c", code, str(data_file),
                        str(tmp_path), env={**os.environ, "IOTRACE_FORCE": force})
        assert r.returncode == 0, r.stderr
    finally:
        assert unthrottle(name)
    lat = pd.read_parquet(out / "latency")
    main = pd.read_parquet(out / "processes").query("role == 'main'").pid.iloc[0]
    io = {k: int(v) for k, v in json.loads(report.read_text()).items()}
    return lat[lat.pid == main], io, out


def block_rows(lat: pd.DataFrame) -> str:
    rows = lat[lat.layer.str.startswith("block")].groupby(["layer", "op", "attribution"])
    return rows[["count", "bytes"]].sum().to_string()


@pytest.mark.parametrize("force", ["", "no_block_io_start"])
def test_throttled_direct_reads_are_charged_to_their_process(data_file, tmp_path, force):
    """O_DIRECT reads of a process over its cgroup's I/O limit (4 threads, 100 reads at 50 IO/s:
    most bios are held and submitted by blk-throttle's worker): every one is charged to the
    process, as `direct`, and the bytes equal /proc/PID/io read_bytes. This VM evicts file pages
    idle for ~6 s: on a loaded host the interpreter may fault a page of its own back in, a read
    of its own too (the faulted page `direct`, readahead around it), which the trace shows as a
    sleep in a page fault (`threads.fault_sleeps`); without one, the direct reads' counts are
    exact."""
    threads, reads = 4, 25
    code = ("import mmap,threading\n"
            "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)\n"
            "def run(t):\n"
            "    buf = mmap.mmap(-1, 4096)\n"
            f"    for i in range({reads}): os.preadv(fd, [buf], (5000 + 3 * ({reads} * t + i)) * 4096)\n"
            f"ts = [threading.Thread(target=run, args=(t,)) for t in range({threads})]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n")
    lat, io, out = throttled_trace(code, data_file, tmp_path, force, read_iops=50)
    lost, lost_bytes = unseen(out)
    n = threads * reads
    pid = lat.pid.iloc[0]
    reads_ = sums(lat, pid, layer="block", op="read")
    direct = sums(lat, pid, layer="block", op="read", attribution="direct")
    threads_ = pd.read_parquet(out / "threads")
    faults = int(threads_[threads_.pid == pid].fault_sleeps.sum())
    # a page the interpreter faults back in after its epilogue read /proc/self/io is traced only
    assert io["read_bytes"] <= reads_[1] + lost_bytes, block_rows(lat)
    # One 4 KiB direct read more with no fault sleep in `threads`: seen 1 run in 12 here, most
    # likely a page of the interpreter's own that this VM paged out (cause not pinned down)
    assert n <= direct[0] + lost <= n + faults + 1, block_rows(lat)
    if not faults and direct[0] + lost == n:
        assert direct[1] + lost_bytes == n * PAGE, block_rows(lat)
        # A file of the interpreter's own that this VM paged out may be read again (readahead,
        # no fault); with none, the disk read what the process's reads asked, no more.
        if direct == reads_:
            assert reads_[1] + lost_bytes == io["read_bytes"], block_rows(lat)


@pytest.mark.parametrize("force", ["", "no_block_io_start"])
def test_throttled_cold_buffered_reads_are_charged_to_their_process(data_file, tmp_path, force):
    """Cold buffered reads (posix_fadvise DONTNEED first) of 16 MiB at 16 MB/s: readahead's
    bios are held by blk-throttle and submitted by its worker. The block bytes charged to the
    process equal /proc/PID/io read_bytes, the bytes its reads made the disk read. Readahead
    beyond the last read is still held when the reads return: the process waits until the
    limit has let every byte through (and a second more) before it exits and the trace ends.
    As in the direct reads' test, the interpreter may fault a page of its own back in after
    its epilogue read /proc/self/io (a sleep in a page fault in `threads`): traced, with the
    read-around of the fault (at most its disk's readahead), not reported."""
    rate = 16 << 20
    code = ("import time\n"
            "t0 = time.monotonic()\n"
            "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
            "os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n"
            "os.lseek(fd, 8 << 20, 0)\n"
            "for _ in range(16): os.read(fd, 1 << 20)\n"
            "sent = int(open('/proc/self/io').read().split('read_bytes: ')[1].split()[0])\n"
            f"time.sleep(max(0, t0 + sent / {rate} + 1 - time.monotonic()))\n")
    lat, io, out = throttled_trace(code, data_file, tmp_path, force, read_bps=rate)
    _, lost_bytes = unseen(out)
    pid = lat.pid.iloc[0]
    got = sums(lat, pid, layer="block", op="read")
    threads_ = pd.read_parquet(out / "threads")
    faults = int(threads_[threads_.pid == pid].fault_sleeps.sum())
    assert io["read_bytes"] >= 16 << 20
    around = faults * readahead_bytes(sys.executable)
    assert io["read_bytes"] <= got[1] + lost_bytes <= io["read_bytes"] + around, block_rows(lat)
    if not faults:
        assert got[1] + lost_bytes == io["read_bytes"], block_rows(lat)


@pytest.mark.parametrize("force", ["", "no_block_io_start"])
def test_throttled_writes_and_fsync_are_charged_to_their_process(data_file, tmp_path, force):
    """4 MiB of buffered writes and an fsync at 4 MB/s: the fsync's bios are held and submitted
    by blk-throttle's worker, and are charged through the process that dirtied the file
    (`writeback`, as for flusher threads: the worker cannot tell an fsync from the flusher).
    Every byte of the file is charged to it, and at most a little more than the process wrote
    (/proc/PID/io write_bytes): its file system's metadata where it submits that itself.
    write_bytes also counts the metadata pages it dirtied in the disk's own cache, which
    iotrace does not charge through the dirtier (the whole disk's metadata writeback would go
    to whoever dirtied a page of it last), so those may be missing below write_bytes."""
    code = ("fd = os.open(os.path.join(sys.argv[2], 'out.bin'), os.O_WRONLY | os.O_CREAT)\n"
            "for _ in range(64): os.write(fd, os.urandom(1 << 16))\n"
            "os.fsync(fd)\n")
    lat, io, out = throttled_trace(code, data_file, tmp_path, force, write_bps=4 << 20)
    _, lost_bytes = unseen(out)
    pid = lat.pid.iloc[0]
    written = sums(lat, pid, layer="block", op="write")[1] + lost_bytes
    assert io["write_bytes"] >= 4 << 20
    assert 4 << 20 <= written <= io["write_bytes"] + (64 << 10), block_rows(lat)
    assert sums(lat, pid, layer="block", op="write", attribution="writeback")[1] > 0


def test_pid_namespace_view(iowork, data_file, tmp_path):
    """A process in its own PID namespace (`unshare --pid --fork`, as in a container): BPF
    charges its host PID, and `processes` also gives the PID the container sees (NSpid)."""
    prime(iowork, data_file)
    out = tmp_path / "trace"
    script = f"{iowork} {data_file} --direct 20 && sleep 0.5"
    r = run_iotrace("-o", str(out), *EXACT, "--", "unshare", "--pid", "--fork", "sh", "-c",
                    script)
    assert r.returncode == 0, r.stderr
    procs = pd.read_parquet(out / "processes").set_index("pid")
    lat = pd.read_parquet(out / "latency")
    readers = lat[(lat.layer == "block") & (lat.op == "read")].groupby("pid")["count"].sum()
    reader = readers.idxmax()  # the iowork process, by its host PID
    assert readers[reader] + unseen(out)[0] == 20
    shell = procs.loc[reader, "ppid"]
    assert procs.loc[shell, "ns_pid"] == 1  # the namespace's first process sees itself as 1
    assert procs.loc[reader, "ns_pid"] == 2 and reader != 2


def test_requests_left_in_flight_at_the_end_count_as_unseen():
    """At the end of a trace the records of block requests still held are of requests whose end
    no program saw, less as many as their disk has in flight (kernel/maps.Maps.block_unseen).
    Records planted in the loaded (not attached) maps: two issued before the reading on an idle
    disk count; one never issued, one issued after the reading began and one on a disk that
    does not exist do not, nor one of an untraced process (tgid 0: who used the disk only)."""
    unused = [d for d in Path("/sys/block").glob("loop*") if not (d / "loop").exists()]
    if not unused:
        pytest.skip("needs a loop device without a backing file (an idle disk)")
    major, minor = map(int, (unused[0] / "dev").read_text().split(":"))
    idle, nowhere = major << 20 | minor, 4095 << 20

    def record(issue_ns: int, dev: int, nbytes: int, tgid: int = 1234) -> tuple:
        # insert_ns, issue_ns, file (dev, pad, ino), tgid, data_len, dev, op, attribution,
        # kthread, cgroup, comm, dir_ino
        return (0, issue_ns, 0, 0, 0, tgid, nbytes, dev, 0, 0, 0, 0, b"", 0)

    p = Probes(map_sizes={})
    p.load()
    try:
        block = p.loader
        starts = Map(block.map_fd("rq_starts"), 8, abi.RQ_START.size)
        later = time.monotonic_ns() + 3600 * 10**9
        planted = [record(1, idle, 4096), record(0, idle, 4096), record(later, idle, 4096),
                   record(1, nowhere, 4096), record(1, idle, 4096, tgid=0)]
        for rq, rec in enumerate(planted, start=1):
            starts.update((rq << 6).to_bytes(8, "little"), abi.RQ_START.pack(*rec))
        slots = Map(block.map_fd("rq_slots"), 4, abi.RQ_SLOT.size)
        slots.update(bytes(4), abi.RQ_SLOT.pack(99 << 6, abi.RQ_START.pack(*record(1, idle, 8192))))
        assert p.maps.block_unseen() == (0, 0)  # during the trace: only what the programs found
        assert p.maps.block_unseen(disks_in_flight) == (2, 4096 + 8192)
    finally:
        p.close()


@needs_root
@pytest.mark.parametrize("script, code, exit_code, exit_signal", [
    ("exit 7", 7, 7, None),
    ("exit 1", 1, 1, None),
    ("kill -SEGV $$", 128 + 11, None, 11),
    ("exit 0", 0, 0, None),
])
def test_command_status_is_iotrace_status(tmp_path, script, code, exit_code, exit_signal):
    """iotrace -- CMD exits as CMD did (like time and strace), and its processes row says how."""
    out = tmp_path / "t"
    r = run_iotrace("-o", str(out), *EXACT, "--", "sh", "-c", script)
    assert r.returncode == code, r.stderr
    assert "Trace written to" in r.stdout and "error" not in r.stderr
    procs = pd.read_parquet(out / "processes").drop_duplicates("pid", keep="last")
    sh = procs[procs["role"] == "main"].iloc[0]
    got_code = None if pd.isna(sh["exit_code"]) else int(sh["exit_code"])
    got_signal = None if pd.isna(sh["exit_signal"]) else int(sh["exit_signal"])
    assert (got_code, got_signal) == (exit_code, exit_signal)


def test_closed_stdout_stops_the_lines_not_the_trace(tmp_path):
    """`iotrace ... | head -2`: the reader goes after two lines; the job is still traced to
    its end and iotrace exits as the job did."""
    out, marker = tmp_path / "t", tmp_path / "done"
    p = subprocess.Popen([*IOTRACE, "-o", str(out), "-i", "0.1", *EXACT, "--", "sh", "-c",
                          f"sleep 2; echo ok > {marker}; exit 5"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    for _ in range(2):
        assert p.stdout.readline()
    p.stdout.close()  # as head does
    err = p.stderr.read()
    assert p.wait(timeout=60) == 5, err
    assert "error" not in err and "Traceback" not in err, err
    assert f"Trace written to {out}" in err
    assert marker.read_text() == "ok\n"
    meta = json.loads((out / "meta.json").read_text())
    assert meta["stop_reason"] == "targets exited"


def test_auto_match_skips_iotrace_and_its_wrappers(tmp_path):
    """--auto --match REGEX: the scripts iotrace runs under hold REGEX in their command lines;
    only the real job that matches is traced."""
    out = tmp_path / "trace"
    job = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(60)",
                            "zzmatch-job"])
    iotrace = " ".join([*IOTRACE, "--auto", "--match", "zzmatch", "-d", "2", "-i", "0.5",
                        "-o", str(out)])
    # The shell stays (a command follows), a wrapper whose command line matches.
    wrapper = subprocess.Popen(["sh", "-c", f"{iotrace}; echo wrapped zzmatch"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = wrapper.communicate(timeout=60)
        assert wrapper.returncode == 0, err
    finally:
        job.kill()
        job.wait()
    mains = set(pd.read_parquet(out / "processes").query("role == 'main'").pid)
    assert job.pid in mains
    assert wrapper.pid not in mains, err


def test_command_starts_with_the_default_signal_dispositions(tmp_path):
    """The started command ignores no signal that it would not ignore untraced (Python, which
    iotrace is, ignores SIGPIPE and SIGXFSZ, and exec keeps an ignored signal ignored)."""
    status = tmp_path / "status"
    r = run_iotrace("-o", str(tmp_path / "t"), *EXACT, "--", "sh", "-c",
                    f"grep SigIgn /proc/self/status > {status}")
    assert r.returncode == 0, r.stderr
    ignored = int(status.read_text().split()[1], 16)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM):
        assert not ignored & (1 << (sig - 1)), f"{sig.name} ignored"
