"""The diagnosis on real PyTorch DataLoaders (CPU): each scenario of tracer.workloads.scenarios
traced in attach mode by the real tracer, asserting the leading finding."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import IOTRACE, ROOT, needs_root
from tracer.diagnose import IO_KINDS

torch = pytest.importorskip("torch", reason="the PyTorch scenarios need torch (pip install torch)")
from tracer.workloads.scenarios import prepare  # noqa: E402

pytestmark = [needs_root, pytest.mark.kernel]


def _workers_running(pid: int) -> bool:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return False
    for child in children:
        try:
            if Path(f"/proc/{child}/comm").read_text().strip() == "pt_data_worker":
                return True
        except OSError:
            continue
    return False


def trace_scenario(name: str, tmp_path, workdir, after_workers: bool = False):
    """(final findings, findings written while it ran, processes, iotrace's stdout); with
    `after_workers`, iotrace attaches once the DataLoader workers run (mid first epoch)."""
    sc = prepare(name, workdir)
    out = tmp_path / "trace"
    try:
        run = sc.start(ready=True)
        if after_workers:
            run.go()
            deadline = time.monotonic() + 60
            while not _workers_running(run.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _workers_running(run.pid), "no DataLoader worker started"
        tracer = subprocess.Popen([*IOTRACE, "--pid", str(run.pid), "-o", str(out)], cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = tracer.stderr.readline()
            assert line.startswith("Tracing"), line + tracer.stderr.read()
            run.go()
            result = run.wait(timeout=240)
            assert result.returncode == 0, result.stderr[-2000:]
            stdout, stderr = tracer.communicate(timeout=60)  # ends with its target
            assert tracer.returncode == 0, stderr
        finally:
            if tracer.poll() is None:
                tracer.send_signal(signal.SIGINT)
                tracer.communicate(timeout=60)
    finally:
        sc.cleanup()
    findings = pd.read_parquet(out / "findings")
    final = findings[findings.ts == findings.ts.max()].sort_values("severity", ascending=False)
    during = findings[findings.ts < findings.ts.max()]  # written while the job ran
    return final, during, pd.read_parquet(out / "processes"), stdout


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("scenarios")


@pytest.mark.parametrize("name", ["sync_loading", "dataloader_io_bound", "checkpoint_stall"])
def test_io_bound_scenarios_lead_with_their_finding(name, tmp_path, workdir):
    final, during, _, stdout = trace_scenario(name, tmp_path, workdir)
    assert final.kind.iloc[0] == name, final[["kind", "severity", "summary"]].to_string()
    assert json.loads(final.evidence.iloc[0])  # numbers behind it
    assert f"] {name}:" in stdout  # and in the end-of-run summary
    # It was already there while the job ran (the 30 s window is evaluated every 10 s).
    assert name in set(during.kind), during[["ts", "kind", "severity"]].to_string()


@pytest.mark.parametrize("name", ["dataloader_cpu_bound", "not_io_bound"])
def test_healthy_storage_gets_no_io_finding(name, tmp_path, workdir):
    final, _, _, _ = trace_scenario(name, tmp_path, workdir)
    assert final.kind.iloc[0] == name, final[["kind", "severity", "summary"]].to_string()
    assert not set(final.kind) & set(IO_KINDS), final[["kind", "summary"]].to_string()


def test_cold_first_epoch_then_warm(tmp_path, workdir):
    """cold_cache, and the roles of re-forked workers across epochs."""
    final, _, procs, _ = trace_scenario("cold_cache", tmp_path, workdir)
    reads = pd.read_parquet(tmp_path / "trace" / "files").query("op == 'read'")
    by_interval = reads.groupby("ts", observed=True)[["bytes", "pages_missed"]].sum()
    assert "cold_cache" in set(final.kind), (final[["kind", "summary"]].to_string() + "\n"
                                             + by_interval.to_string())
    workers = procs[procs.role == "dataloader_worker"]
    main = procs[procs.role == "main"].pid.iloc[0]
    assert (workers.ppid == main).all()
    gens = workers.groupby("worker_generation").pid.apply(sorted)
    assert len(gens) >= 2  # re-forked every epoch: new PIDs, same role
    assert all(len(p) == 2 for p in gens)  # two workers each
    assert workers.pid.is_unique
    assert sorted(workers[workers.worker_generation == 0].worker_index) == [0, 1]


def test_cold_first_epoch_attached_while_workers_read(tmp_path, workdir):
    """cold_cache when iotrace attaches to workers already reading the cold first epoch: the
    trace's cold part is a few intervals of many."""
    final, _, _, _ = trace_scenario("cold_cache", tmp_path, workdir, after_workers=True)
    reads = pd.read_parquet(tmp_path / "trace" / "files").query("op == 'read'")
    by_interval = reads.groupby("ts", observed=True)[["bytes", "pages_missed"]].sum()
    assert "cold_cache" in set(final.kind), (final[["kind", "summary"]].to_string() + "\n"
                                             + by_interval.to_string())
    cold = json.loads(final[final.kind == "cold_cache"].evidence.iloc[0])
    assert max(cold["early_miss_pct"]) <= 100  # a share, on one basis
