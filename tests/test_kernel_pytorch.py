"""The diagnosis on real PyTorch DataLoaders (CPU): each scenario of tracer.workloads.scenarios
traced in attach mode by the real tracer, asserting the leading finding."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import needs_root, run_iotrace
from tracer.api import load
from tracer.core.diagnosis import IO_KINDS
from tracer.core.vocab import LOOP_STATES

torch = pytest.importorskip("torch", reason="the PyTorch scenarios need torch (pip install torch)")
from scenario_trace import shared  # noqa: E402

pytestmark = [needs_root, pytest.mark.kernel]


def trace_scenario(name: str, tmp_path_factory, after_workers: bool = False):
    """(final findings, findings written while it ran, processes, iotrace's stdout, the trace)
    of the scenario attached to once set up, before training; with `after_workers`, once the
    DataLoader workers run (mid first epoch). Runs other tests share (scenario_trace.shared)."""
    t, _ = shared(name, "workers" if after_workers else "before", tmp_path_factory)
    return t.final_findings(), t.findings_during(), t.table("processes"), t.stdout, t.out


def first_screen_holds(trace_dir, kind: str) -> None:
    """`iotrace report`'s first 30 lines: the duration, the verdict, and the loop's split with
    the `loop` table's shares of the training time (histograms of every worker come later)."""
    report = run_iotrace("report", str(trace_dir))
    assert report.returncode == 0, report.stderr
    head = report.stdout.splitlines()[:30]
    text = "\n".join(head)
    assert any(line.startswith("Duration: ") for line in head), text
    assert any(line.startswith("  [") and f"] {kind}:" in line for line in head), text
    trace = load(trace_dir)
    (pid,) = trace.loop_split().index  # one training loop; attached: no start-up left out
    split = trace.loop_split().loc[pid]
    top = max(LOOP_STATES, key=lambda s: split[f"{s}_pct"])
    expected = f"  pid {pid} ({split['seconds']:.1f} s): {top} {split[f'{top}_pct']:.0f} %"
    assert any(line.startswith(expected) for line in head), text


@pytest.mark.parametrize("name", ["sync_loading", "dataloader_io_bound", "checkpoint_stall"])
def test_io_bound_scenarios_lead_with_their_finding(name, tmp_path_factory):
    final, during, _, stdout, out = trace_scenario(name, tmp_path_factory)
    assert final.kind.iloc[0] == name, final[["kind", "severity", "summary"]].to_string()
    assert json.loads(final.evidence.iloc[0])  # numbers behind it
    assert f"] {name}:" in stdout  # and in the end-of-run summary
    first_screen_holds(out, name)
    # It was already there while the job ran (the 30 s window is evaluated every 10 s).
    assert name in set(during.kind), during[["ts", "kind", "severity"]].to_string()


@pytest.mark.parametrize("name", ["dataloader_cpu_bound", "not_io_bound"])
def test_healthy_storage_gets_no_io_finding(name, tmp_path_factory):
    final, *_ = trace_scenario(name, tmp_path_factory)
    assert final.kind.iloc[0] == name, final[["kind", "severity", "summary"]].to_string()
    assert not set(final.kind) & set(IO_KINDS), final[["kind", "summary"]].to_string()


def test_cold_first_epoch_then_warm(tmp_path_factory):
    """cold_cache, and the roles of re-forked workers across epochs."""
    final, _, procs, _, out = trace_scenario("cold_cache", tmp_path_factory)
    reads = pd.read_parquet(out / "files").query("op == 'read'")
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


def test_cold_first_epoch_attached_while_workers_read(tmp_path_factory):
    """cold_cache when iotrace attaches to workers already reading the cold first epoch: the
    trace's cold part is a few intervals of many."""
    final, _, _, _, out = trace_scenario("cold_cache", tmp_path_factory, after_workers=True)
    reads = pd.read_parquet(out / "files").query("op == 'read'")
    by_interval = reads.groupby("ts", observed=True)[["bytes", "pages_missed"]].sum()
    assert "cold_cache" in set(final.kind), (final[["kind", "summary"]].to_string() + "\n"
                                             + by_interval.to_string())
    cold = json.loads(final[final.kind == "cold_cache"].evidence.iloc[0])
    assert max(cold["early_miss_pct"]) <= 100  # a share, on one basis
