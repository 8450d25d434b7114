"""iotrace's own cost, for real: BPF stats held for the run and given back, per-program counts
against a workload with known I/O (iowork, as in test_kernel_exact), refused inserts of a map
made tiny counted exactly, and the same numbers in meta.json, the summary and `iotrace report`."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest
from test_kernel_exact import K, M, N, P, S, prime, workload_args

from conftest import IOTRACE, ROOT, needs_root, run_iotrace
from tracer.core.selfcost import SelfCost, render_self_cost

pytestmark = [needs_root, pytest.mark.kernel]

STATS_SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"


def sysctl() -> int:
    with open(STATS_SYSCTL) as f:
        return int(f.read())


def set_sysctl(value: int) -> None:
    with open(STATS_SYSCTL, "w") as f:
        f.write(str(value))


@pytest.fixture
def stats_sysctl(request):
    """Sets kernel.bpf_stats_enabled to the test's value for the test, restores it after. It is
    host-wide: a host where someone else turned it on is left alone (that case is skipped)."""
    want, original = request.param, sysctl()
    if original and not want:
        pytest.skip("kernel.bpf_stats_enabled is 1 on this host (someone else's): not turned off")
    set_sysctl(want)
    try:
        yield want
    finally:
        set_sysctl(original)


def summed(programs: list[dict], field: str, **where) -> int:
    return sum(p[field] for p in programs if all(where[k](p[k]) for k in where))


@pytest.mark.parametrize("stats_sysctl", [0, 1], indirect=True)
def test_own_cost_of_a_known_workload(iowork, data_file, tmp_path, stats_sysctl):
    prime(iowork, data_file)
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), "--bpf-stats", "always", "--", str(iowork),
                    *workload_args(data_file))
    assert r.returncode == 0, r.stderr
    assert sysctl() == stats_sysctl  # given back as it was: BPF_ENABLE_STATS, not the sysctl
    meta = json.loads((out / "meta.json").read_text())
    cost = meta["self_cost"]
    stats = cost["bpf_stats"]
    assert {k: stats[k] for k in ("enabled", "unavailable", "previous_sysctl", "mode")} == {
        "enabled": True, "unavailable": None, "previous_sysctl": stats_sysctl, "mode": "always"}
    # always: counted from load to the end, so at least the whole tracing time
    assert stats["seconds_counted"] >= cost["tracer"]["tracing_seconds"] > 0
    assert stats["cpu_pct"] > 0
    progs = cost["programs"]
    # Every syscall of the workload ran an enter and an exit program (and other processes'
    # syscalls run them too: they return at once for untraced ones).
    syscalls = N + M + K + 2 * P + 2 * S
    assert summed(progs, "run_cnt", object=lambda o: o == "syscall") >= 2 * syscalls
    # Each of the N + K O_DIRECT reads is one block request that completed.
    complete = summed(progs, "run_cnt", section=lambda s: s.endswith("/block_rq_complete"))
    assert complete >= N + K
    for p in progs:
        if p["run_cnt"]:
            assert p["run_time_ns"] > 0 and p["ns_per_run"] > 0, p
    assert cost["totals"]["run_cnt"] == summed(progs, "run_cnt")
    assert cost["totals"]["run_time_ns"] == summed(progs, "run_time_ns")
    assert cost["map_full_drops"] == dict.fromkeys(cost["map_full_drops"], 0)
    assert set(cost["map_full_drops"]) == {"tracked", "hists", "file_stats", "threads", "rq_starts",
                                           "folder_stats", "block_users"}
    assert cost["events_lost"] == meta["events_lost"] == 0
    tracer = cost["tracer"]
    assert tracer["cpu_seconds"] > tracer["setup_cpu_seconds"] > 0
    assert tracer["cpu_pct"] > 0 and tracer["peak_rss_bytes"] > 10 << 20
    # The summary says what meta.json holds, and `iotrace report` says it again.
    block = "\n".join(render_self_cost(SelfCost.from_meta(cost)))
    assert block in r.stdout
    rep = run_iotrace("report", str(out))
    assert rep.returncode == 0, rep.stderr
    assert block in rep.stdout
    js = run_iotrace("report", str(out), "--json")
    assert js.returncode == 0, js.stderr
    assert json.loads(js.stdout)["self_cost"] == cost


def test_sampled_stats_count_a_fiftieth_of_each_interval(tmp_path):
    """The default: the kernel counts the programs' runs during 2 % of every interval, so
    the counts cover about 2 % of the run, and the summary says so."""
    loop = ROOT / "scripts" / "bin" / "pread_loop"
    if not loop.exists():
        pytest.skip("scripts/bin/pread_loop is not built (make scripts/bin/pread_loop)")
    data = tmp_path / "data"
    data.write_bytes(os.urandom(1 << 20))
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), "-i", "0.5", "--", str(loop), str(data), "2.5")
    assert r.returncode == 0, r.stderr
    cost = json.loads((out / "meta.json").read_text())["self_cost"]
    stats, tracing_s = cost["bpf_stats"], cost["tracer"]["tracing_seconds"]
    assert stats["mode"] == "sampled" and stats["enabled"] is True
    assert 0.01 * tracing_s < stats["seconds_counted"] < 0.06 * tracing_s, (stats, tracing_s)
    sys_runs = summed(cost["programs"], "run_cnt", object=lambda o: o == "syscall")
    preads = int(r.stdout.split("ops=")[1].split()[0])
    assert 0 < sys_runs < 2 * preads  # both programs ran for some of the preads, not all
    share = round(100 * min(1.0, stats["seconds_counted"] / tracing_s))
    assert f"counted ({share} % of the run, sampled)" in r.stdout


def test_sampled_stats_leave_out_the_readings(tmp_path):
    """A job that opens thousands of new files an interval makes each reading take a while
    (every file a row): the counting starts once the reading is done, so it still covers
    about 2 % of the run, not the readings' time as well."""
    data = tmp_path / "data"
    data.mkdir()
    for i in range(4000):
        (data / f"f{i:04d}").write_bytes(b"x" * 512)
    # every interval's tables start empty: each interval, every file read is a new row
    job = ("import os, sys, time\n"
           "d = sys.argv[1]; paths = [os.path.join(d, n) for n in os.listdir(d)]\n"
           "end = time.monotonic() + 3\n"
           "while time.monotonic() < end:\n"
           "    for p in paths:\n"
           "        with open(p, 'rb') as f: f.read()\n")
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), "-i", "0.25", "--", sys.executable, "-c", job, str(data))
    assert r.returncode == 0, r.stderr
    cost = json.loads((out / "meta.json").read_text())["self_cost"]
    stats, tracing_s = cost["bpf_stats"], cost["tracer"]["tracing_seconds"]
    assert 0.01 * tracing_s < stats["seconds_counted"] < 0.06 * tracing_s, (stats, tracing_s)


def test_a_full_file_table_counts_per_folder(iowork, data_file, tmp_path):
    """The per-file counters have one slot per interval buffer (file_slots=2), no log
    (file_log=0) and one hash-map entry (file_stats): within one interval (the workload is
    short, the interval long), the workload's first key (its open of another file: opens count
    in a file's read key) takes the slot, the next (the parent's opens and reads of the data
    file, one key) the entry; every later operation on a new (process, file, op) is refused
    there, counted as such, and counted in its folder's entry instead: the child's K reads are
    in a folder row, and the files table still adds up to the latency table."""
    prime(iowork, data_file)
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), "-i", "30", "--", str(iowork), *workload_args(data_file),
                    "--also-open", str(iowork),
                    env={**os.environ, "IOTRACE_MAP_SIZES": "file_slots=2,file_log=0,file_stats=1"})
    assert r.returncode == 0, r.stderr
    cost = json.loads((out / "meta.json").read_text())["self_cost"]
    files = pd.read_parquet(out / "files")
    assert cost["map_entries"]["file_stats"] == 1
    assert cost["map_full_drops"] == {"tracked": 0, "hists": 0, "file_stats": K, "threads": 0,
                                      "rq_starts": 0, "folder_stats": 0, "block_users": 0}, (
        files.to_string())
    assert cost["files_rolled_up"]["kernel_folder_ops"] == K
    procs = pd.read_parquet(out / "processes")
    parent = int(procs[procs.role == "main"].pid.iloc[0])
    own = files[files.path_source != "folder"]
    assert set(own.op) == {"open", "read"} and set(own.pid) == {parent}
    assert own[own.op == "read"].ops.sum() == N + M
    folder = files[files.path_source == "folder"]
    assert list(folder.path) == [str(data_file.parent) + "/"] and list(folder.op) == ["read"]
    assert (folder.ops.sum(), folder.file_count.sum()) == (K, 0)  # the kernel's: no file count
    assert "0 map-full drops; files table:" in r.stdout
    assert f"{K} operations counted per folder by the kernel" in r.stdout
    lat = pd.read_parquet(out / "latency")
    reads = lat[(lat.layer == "syscall") & (lat.op == "read") & (lat.target == "file")]
    assert int(reads["count"].sum()) == N + M + K == files[files.op == "read"].ops.sum()


def test_bad_map_sizes_setting_is_one_line(tmp_path):
    r = run_iotrace("-o", str(tmp_path / "t"), "--", "true",
                    env={**os.environ, "IOTRACE_MAP_SIZES": "events=4"})
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "iotrace: error: IOTRACE_MAP_SIZES: no map 'events' can be sized; give MAP=N with MAP "
        "one of tracked, hists, file_stats, threads, rq_starts, folder_stats, block_users, "
        "rq_slots, hist_slots, file_slots, file_log"]


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_without_cap_sys_admin_the_trace_goes_on(iowork, data_file, tmp_path):
    """Root without CAP_SYS_ADMIN (CAP_BPF and CAP_PERFMON are enough to trace) cannot turn
    BPF stats on: the trace carries on and says why per-program cost is missing."""
    before = sysctl()
    out = tmp_path / "trace"
    r = subprocess.run(["setpriv", "--bounding-set=-sys_admin", *IOTRACE, "-o", str(out), "--",
                        str(iowork), str(data_file), "--cached", "10"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    why = "per-program cost unavailable: BPF_ENABLE_STATS needs CAP_SYS_ADMIN"
    assert r.stderr.splitlines()[1] == f"iotrace: {why}"
    assert f"iotrace's own cost: {why}; tracer " in r.stdout
    cost = json.loads((out / "meta.json").read_text())["self_cost"]
    assert cost["bpf_stats"]["enabled"] is False and cost["programs"] == []
    assert cost["tracer"]["cpu_seconds"] > 0
    assert sysctl() == before


def test_doctor_measures_its_own_cost():
    before = sysctl()
    r = run_iotrace("doctor")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = {ln[6:21].strip(): ln[22:] for ln in r.stdout.splitlines() if ln[:4].strip()}
    assert lines["BPF stats"].startswith("per-program run counts and times")
    own = lines["own cost"]
    assert own.startswith("20000 traced page-cache pread64: ")
    assert "of BPF per call (syscall/" in own and " ns/run" in own
    assert sysctl() == before


def test_tracer_yields_to_the_job(tmp_path):
    """The tracer's threads run SCHED_BATCH at nice 10 once they trace; the traced command,
    forked by iotrace, keeps the normal policy and nice 0. /proc/PID/stat fields 19 and 41."""
    report = tmp_path / "prio"
    code = ("import os,sys,time\n"
            "time.sleep(0.5)  # the tracer lowers its priority once it says `Tracing`\n"
            "def prio(pid, tid):\n"
            "    f = open(f'/proc/{pid}/task/{tid}/stat').read().rsplit(')', 1)[1].split()\n"
            "    return int(f[16]), int(f[38])  # nice, policy (fields 19 and 41)\n"
            "me = os.getpid(); tracer = os.getppid()\n"
            "rows = [('job', *prio(me, me))]\n"
            "rows += [('tracer', *prio(tracer, t)) for t in os.listdir(f'/proc/{tracer}/task')]\n"
            "open(sys.argv[1], 'w').write(repr(rows))\n")
    r = run_iotrace("-o", str(tmp_path / "t"), "--", sys.executable, "-c", code, str(report))
    assert r.returncode == 0, r.stderr
    rows = ast.literal_eval(report.read_text())
    assert rows[0] == ("job", 0, os.SCHED_OTHER)
    tracer = rows[1:]
    assert tracer and all(row == ("tracer", 10, os.SCHED_BATCH) for row in tracer), tracer
