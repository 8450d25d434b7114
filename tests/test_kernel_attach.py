"""Right on a running job: real PyTorch jobs traced from their start and attached to while
their DataLoader workers already run (as users attach), and a checkpoint's time counted in the
intervals where it passes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from conftest import IOTRACE, ROOT, needs_root
from tracer.core.diagnosis import STATES

torch = pytest.importorskip("torch", reason="the PyTorch scenarios need torch (pip install torch)")
from scenario_trace import Traced, attached, launched_and_attached  # noqa: E402

from tracer.workloads.scenarios import MB, prepare  # noqa: E402

pytestmark = [needs_root, pytest.mark.kernel]
MiB = 1 << 20


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("attach")


def loop_split(t: Traced, pid: int, since, until) -> dict[str, float]:
    """The loop's time by state, in % of its time from `since` to `until`. An interval that
    straddles either counts for its part inside: two tracers' intervals end at different
    times, and a window that takes whole intervals gave one trace an interval more (5 points
    of a 5 s window)."""
    loop = t.table("loop")
    loop = loop[loop.pid == pid]
    start = loop.ts - pd.to_timedelta(loop.interval_ns, unit="ns")
    inside = (loop.ts.clip(upper=until) - start.clip(lower=since)).dt.total_seconds().clip(lower=0)
    share = inside / (loop.interval_ns / 1e9)
    ns = {s: float((loop[f"{s}_ns"] * share).sum()) for s in STATES}
    total = sum(ns.values())
    assert total > 0, loop.to_string()
    return {s: 100 * n / total for s, n in ns.items()}


def main_pid(t: Traced) -> int:
    procs = t.table("processes")
    workers = procs[procs.role == "dataloader_worker"]
    return int(workers.ppid.iloc[0])


def batches_since(t: Traced, pid: int) -> pd.Timestamp:
    """1 s after the first interval in which the loop waited 0.5 s or more for its workers
    (sleeps that they ended). Before the first batches the loop's wait is not the workers' (it
    starts up, blocked in reads of its own), and the time of a sleep still going on at an
    interval's end is split as the sleeps of its last 5 intervals ended, which an attach made
    then has not all seen. (A window from 1 s after a 0.27 ms wake-up by a worker, in the
    attach's first interval, gave splits 17 points apart.)"""
    threads = t.table("threads")
    loop_thread = threads[threads.tid == pid]
    waited = loop_thread.ts[loop_thread.woken_by_worker_ns >= 500_000_000]
    return waited.min() + pd.Timedelta(seconds=1)


def epoch_tail(t: Traced, workers: pd.Series, data: Path, epoch_bytes: int) -> pd.Timestamp:
    """When the workers had read all but the last 16 MiB (two batches) of the first epoch's
    data: the epoch's tail begins (workers with no batch left, the loop taking the last ones
    without a wait). Counted in bytes read, not per interval: under load an interval can last
    20 ms, and one that read less than half as much as the most (the rule before) ended a
    window before it began."""
    files = t.table("files")
    reads = files[files.pid.isin(workers) & (files.op == "read")
                  & files.path.astype(str).str.startswith(f"{data}/")]
    read = reads.groupby("ts").bytes.sum().cumsum()
    return read.index[read >= epoch_bytes - 16 * MiB].min()


@pytest.mark.parametrize("workers", ["persistent", "per_epoch"])
def test_attached_while_workers_run_gives_the_launch_verdict(workers, tmp_path, workdir):
    """dataloader_io_bound (workers blocked on a throttled disk): attached after the workers
    run, the verdict and the loop's split (its wait on the workers within 5 points, each state
    within 8) are those of the same run traced from its start, over the same phase (the steady
    state of its first epoch's reads). One run is traced both ways at once: the split of two
    runs one after the other differed by 11 points when other jobs took the CPUs during one
    (its workers runnable up to 2.2 s a second, against 0.2 s). With persistent workers the
    PIDs are given as `$(pgrep python)` would: workers (first) and an unrelated python process
    beside the trainer; with per-epoch workers, the second epoch's start after the attach."""
    # At 12 MB/s rather than the scenario's 16 (the last --throttle-read-bps counts), the first
    # epoch's reads take ~14 s rather than ~10.5: under load the attach's first interval came
    # up to ~5 s after the workers started, which left under 4 s of steady state before the tail.
    extra = ["--epochs", "2", "--throttle-read-bps", str(12 * MB)]
    extra += ["--persistent-workers"] if workers == "persistent" else []
    sc = prepare("dataloader_io_bound", workdir)
    epoch_bytes = sc.spec.n_files * sc.spec.file_kib * 1024
    unrelated = None
    try:
        if workers == "persistent":
            unrelated = subprocess.Popen(["python3", "-c", "import time; time.sleep(600)"])
            launch, attach = launched_and_attached(
                sc, tmp_path / "launch", tmp_path / "attach", extra=extra,
                pids_of=lambda job, kids: [*kids, job], others=(unrelated.pid,))
        else:
            launch, attach = launched_and_attached(sc, tmp_path / "launch", tmp_path / "attach",
                                                   extra=extra)
    finally:
        if unrelated is not None:
            unrelated.kill()
            unrelated.wait()
        sc.cleanup()
    since = []
    for t in (launch, attach):
        procs = t.table("processes")
        pid = main_pid(t)
        assert procs.set_index("pid").role[pid] == "main"
        ours = procs[procs.ppid == pid]
        assert set(ours.role) == {"dataloader_worker"}, procs.to_string()
        final = t.final_findings()
        mine = final[final.pid.isna() | (final.pid == pid)]
        assert mine.kind.iloc[0] == "dataloader_io_bound", final[["kind", "summary"]].to_string()
        wrong = {"sync_loading", "dataloader_cpu_bound", "checkpoint_stall", "not_io_bound"}
        assert not wrong & set(mine.kind), final[["kind", "summary"]].to_string()
        since.append(batches_since(t, pid))
        if t is launch:  # (it saw the epoch's reads from the first)
            tail = epoch_tail(t, ours.pid, sc.data, epoch_bytes)
        # the kernel knew the workers: the loop's sleeps ended by them were counted
        first_worker = t.workers_started or ours.first_seen.min()
        loop_thread = t.table("threads").query("tid == @pid")
        assert loop_thread[loop_thread.ts > first_worker].woken_by_worker_ns.sum() > 0
    # The same phase of the same run in both traces, the steady state of its first epoch's
    # reads: from when both saw the workers' batches until 1 s before the epoch's tail.
    since, until = max(since), tail - pd.Timedelta(seconds=1)
    assert until - since >= pd.Timedelta(seconds=4), (since, until)
    splits = [loop_split(t, main_pid(t), since, until) for t in (launch, attach)]
    # The loop's wait on its workers within 5 points, each state within 8 (two runs apart
    # differed by up to 11 points with the load; one run traced both ways, by 2 at most): an
    # attach that missed the workers moves tens of points.
    wait = [split["data_wait_io"] + split["data_wait_cpu"] for split in splits]
    shown = f"launched, attached in % from {since} to {until}: " + ", ".join(
        f"{s} {splits[0][s]:.1f} {splits[1][s]:.1f}" for s in STATES if splits[0][s] or splits[1][s])
    assert abs(wait[0] - wait[1]) <= 5, shown
    for s in STATES:
        assert abs(splits[0][s] - splits[1][s]) <= 8, (s, shown)
    if unrelated is not None:
        procs = attach.table("processes").set_index("pid")
        assert procs.role[unrelated.pid] == "main"  # traced as given, and apart
        final = attach.final_findings()
        assert not (final.pid == unrelated.pid).any(), final[["kind", "pid", "summary"]]


def test_checkpoint_time_counts_as_it_passes(tmp_path, workdir):
    """checkpoint_stall: torch.save of 256 MB + fsync on a disk limited to 100 MB/s, each
    save ~2.5 s and so across intervals. The loop's checkpoint time in the trace is within
    15 % of the job's own clock around torch.save + fsync, no less than its fsyncs took, and
    `iotrace report` replays the same split from the trace's rows."""
    sc = prepare("checkpoint_stall", workdir)
    try:
        t = attached(sc, tmp_path / "trace")
    finally:
        sc.cleanup()
    out, job = t.out, t.job
    assert job.checkpoints and max(c["fsync_s"] for c in job.checkpoints) > 1.5, job.checkpoints
    clock_s = sum(c["seconds"] for c in job.checkpoints)
    fsync_s = sum(c["fsync_s"] for c in job.checkpoints)
    loop = pd.read_parquet(out / "loop")
    traced_s = loop.checkpoint_ns.sum() / 1e9
    # torch.save's clock includes pickling on the CPU, which is not checkpoint I/O: 0.5-0.7 s
    # of ~11.5 s alone, up to 1.4 s amid the whole suite. The fsyncs must all be in it.
    assert fsync_s * 0.98 <= traced_s <= clock_s * 1.05, (traced_s, clock_s, job.checkpoints)
    assert traced_s >= 0.85 * clock_s, (traced_s, clock_s, job.checkpoints)
    # charged while the fsync ran: intervals that are mostly checkpoint, before it returned
    threads = pd.read_parquet(out / "threads")
    during = threads[threads.syscall_op == "fsync"]
    assert len(during) >= len(job.checkpoints), during[["ts", "syscall_op", "syscall_since"]]
    # the report replays the rows: the same checkpoint share
    report = subprocess.run([*IOTRACE, "report", str(out), "--json"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    replayed = {f["kind"]: f for f in json.loads(report.stdout)["findings"]}
    live = pd.read_parquet(out / "findings")
    live = live[live.ts == live.ts.max()].set_index("kind")
    assert "checkpoint_stall" in replayed and "checkpoint_stall" in live.index
    shares = json.loads(live.evidence["checkpoint_stall"])["loop_shares_pct"]
    assert replayed["checkpoint_stall"]["evidence"]["loop_shares_pct"] == shares
