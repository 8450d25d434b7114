"""Memory pressure (`threads.reclaim_ns`, `memory_pressure`) on a real PyTorch DataLoader job
(2 workers that decode each cached sample into 16 MiB of fresh memory and keep it on local
disk, writes limited to 60 MB/s; 8 steps), launched and attached to (one run, two tracers): in
a memory cgroup (v1) of 512 MiB, smaller than what the workers touch (their memory and the
decoded samples' pages, which reclaim has to wait for as they are written), the workers reclaim
most of their busy time and iotrace says so first, with the cgroup's limit and usage; the same
job without a limit reclaims nothing and gets no such finding.

Without swap (this host has none) only files' pages can be reclaimed: the decoded samples'
(their writeback started at once; the flusher would start it in 30 s). A v1 cgroup that cannot
reclaim kills a worker, so the job's cgroup waits instead (--no-oom-kill). The cgroup is made
by the job (train.py --memory-limit-mib) and removed here too, whatever happens.

And with swap (a 1 GiB swap file made for the module where the host has none): two workers
that each keep 320 MiB of decoded samples in memory (train.py --keep-mib) in a 400 MiB cgroup
page out to swap and wait for every sample's part of it to come back in, in page faults
(`threads.fault_wait_ns`): memory_pressure leads and says so, not that the workers read
storage."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT, needs_root
from tracer.report import diagnose_trace
from tracer.tracedir.reader import load

pytestmark = [needs_root, pytest.mark.kernel]

LIMIT_MIB = 512


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("memory_pressure")


def extra(spill, limited: bool) -> tuple[str, ...]:
    return ("--transform", "none", "--epochs", "1", "--steps-per-epoch", "8",
            "--decode-mib", "16", "--spill-dir", str(spill),
            "--throttle-write-bps", "60000000", "--throttle-disk-of", str(spill),
            *(("--memory-limit-mib", str(LIMIT_MIB), "--no-oom-kill") if limited else ()))


_runs: dict[str, dict] = {}


def traced(mode: str, workdir, name: str, limited: bool, args: tuple[str, ...] | None = None):
    """The job `name` traced (`args` for train.py, else extra()'s), launched and attached to
    in one run (scenario_trace.launched_and_attached): the test of each mode reads its side."""
    from scenario_trace import launched_and_attached

    from tracer.workloads.dataset import unthrottle
    from tracer.workloads.scenarios import prepare

    if name not in _runs:
        spill = workdir / f"{name}-spill"
        spill.mkdir()
        args = extra(spill, limited) if args is None else args
        sc = prepare("dataloader_cpu_bound", workdir)
        outs = [workdir / f"{name}-{m}" for m in ("launch", "attach")]
        try:
            _runs[name] = dict(zip(("launch", "attach"),
                                   launched_and_attached(sc, *outs, extra=args), strict=True))
        finally:
            sc.cleanup()
            shutil.rmtree(spill, ignore_errors=True)  # 1 GiB of decoded samples
            for out in outs:  # a killed job leaves its cgroup
                if (out / "processes").exists():
                    for pid in set(pd.read_parquet(out / "processes").pid):
                        unthrottle(f"train-{pid}")
    return _runs[name][mode]


def final(t) -> pd.DataFrame:
    f = t.table("findings")
    return f[f.ts == f.ts.max()].sort_values("severity", ascending=False, kind="stable")


@pytest.mark.parametrize("mode", ["launch", "attach"])
def test_a_job_short_of_memory(mode, workdir):
    pytest.importorskip("torch", reason="the PyTorch scenarios need torch")
    t = traced(mode, workdir, "starved", limited=True)
    f = final(t)
    table = f[["kind", "severity", "summary"]].to_string()
    print(table)
    threads = t.table("threads")
    workers = threads[threads.role == "dataloader_worker"]
    busy = (workers.oncpu_ns + workers.runnable_ns + workers.iowait_ns).sum()
    print(f"{mode}: workers' reclaim {workers.reclaim_ns.sum() / 1e9:.2f} s of "
          f"{busy / 1e9:.2f} s busy, {int(workers.reclaims.sum())} reclaims")
    # The workers reclaimed a large part of their busy time, at the cgroup's limit
    assert workers.reclaim_ns.sum() >= 0.2 * busy, table
    m = t.table("memory")
    limited = m[m.limit_bytes == LIMIT_MIB << 20]
    assert not limited.empty and limited.usage_bytes.max() >= 0.95 * (LIMIT_MIB << 20)
    assert limited.limit_hits.sum() > 0
    assert "memory_pressure" in set(f.kind), table
    mp = f[f.kind == "memory_pressure"].iloc[0]
    ev = json.loads(mp.evidence)
    assert ev["workers_reclaim_pct"] >= 20 and mp.severity >= 10, ev
    assert ev["memory"]["limit_bytes"] == LIMIT_MIB << 20 and ev["memory"]["source"] == "cgroup_v1"
    assert f"of its {LIMIT_MIB}.0 MiB limit" in mp.summary
    # It leads: the loop waits for workers that reclaim (blocked on the writeback of the pages
    # to free), which is neither their work nor their reads of the data set
    assert f.kind.iloc[0] == "memory_pressure", table
    assert not {"dataloader_cpu_bound", "dataloader_io_bound", "sync_loading"} & set(f.kind), table
    assert "] memory_pressure:" in t.stdout
    report = subprocess.run([sys.executable, "-m", "tracer.cli", "report", str(t.out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "] memory_pressure:" in report.stdout, report.stdout  # again from the rows
    again = [x for x in diagnose_trace(load(str(t.out))).findings()
             if x.kind == "memory_pressure"]
    assert [x.summary for x in again] == [mp.summary]


@pytest.mark.parametrize("mode", ["launch", "attach"])
def test_a_roomy_job_reclaims_nothing(mode, workdir):
    pytest.importorskip("torch", reason="the PyTorch scenarios need torch")
    t = traced(mode, workdir, "roomy", limited=False)
    f = final(t)
    threads = t.table("threads")
    assert threads.reclaim_ns.sum() == 0, threads.groupby("role").reclaim_ns.sum()
    assert "memory_pressure" not in set(f.kind), f[["kind", "severity", "summary"]].to_string()


SWAP_FILE = Path("/var/tmp/iotrace-test-swap")
SWAP_LIMIT_MIB = 400


@pytest.fixture(scope="module")
def swap():
    """Swap to page out to: the host's, or a 1 GiB file made for the module, turned off and
    removed after. Skips where the kernel refuses it (a container, a file system without
    swap files)."""
    if len(Path("/proc/swaps").read_text().splitlines()) > 1:
        yield
        return
    try:
        for cmd in (["fallocate", "-l", "1G", str(SWAP_FILE)], ["chmod", "600", str(SWAP_FILE)],
                    ["mkswap", str(SWAP_FILE)], ["swapon", str(SWAP_FILE)]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                pytest.skip(f"no swap here: {' '.join(cmd)}: {r.stderr.strip()}")
        yield
    finally:
        subprocess.run(["swapoff", str(SWAP_FILE)], capture_output=True)
        SWAP_FILE.unlink(missing_ok=True)


@pytest.mark.parametrize("mode", ["launch", "attach"])
def test_a_job_that_swaps(mode, workdir, swap):
    pytest.importorskip("torch", reason="the PyTorch scenarios need torch")
    args = ("--transform", "none", "--epochs", "1", "--steps-per-epoch", "8", "--keep-mib",
            "320", "--memory-limit-mib", str(SWAP_LIMIT_MIB), "--no-oom-kill")
    t = traced(mode, workdir, "swapping", limited=True, args=args)
    f = final(t)
    table = f[["kind", "severity", "summary"]].to_string()
    print(table)
    threads = t.table("threads")
    workers = threads[(threads.role == "dataloader_worker") & (threads.pid == threads.tid)]
    busy = (workers.oncpu_ns + workers.runnable_ns + workers.iowait_ns).sum()
    faults, reclaim = workers.fault_wait_ns.sum(), workers.reclaim_ns.sum()
    print(f"{mode}: workers' page faults {faults / 1e9:.2f} s, reclaim {reclaim / 1e9:.2f} s "
          f"of {busy / 1e9:.2f} s busy")
    # The same job with memory to spare takes 0.4 s here, against about 10 s: memory is most
    # of the workers' time, and their waits for pages to come back from swap a good part
    assert faults + reclaim >= 0.5 * busy and faults >= 0.15 * busy
    assert faults <= workers.iowait_ns.sum()
    m = t.table("memory")
    limited = m[m.limit_bytes == SWAP_LIMIT_MIB << 20]
    assert not limited.empty and limited.swap_bytes.max() > 0
    mp = f[f.kind == "memory_pressure"]
    assert f.kind.iloc[0] == "memory_pressure", table
    ev = json.loads(mp.evidence.iloc[0])
    assert ev["fault_wait_s"] >= 1 and ev["workers_fault_pct"] >= 15, ev
    assert "waited in page faults for pages read back" in mp.summary.iloc[0]
    # swap-ins are neither the workers' reads of the data set nor their work
    assert not {"dataloader_io_bound", "dataloader_cpu_bound", "sync_loading"} & set(f.kind), \
        table
