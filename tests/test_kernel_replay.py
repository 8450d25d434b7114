"""A real job traced, then its trace replayed (`iotrace report`, tracer.report.replay): the
replay's `loop` rows and final findings are the live run's, since both feed the diagnosis the
same input per interval (tracer.core.diagnosis.feed)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import deque
from pathlib import Path

import pandas as pd
import pytest

from conftest import IOTRACE, ROOT, needs_root

pytest.importorskip("torch", reason="the PyTorch jobs need torch (pip install torch)")
from scenario_trace import launched

from tracer.core.diagnosis import Diagnosis
from tracer.core.diagnosis.feed import feed
from tracer.render.findings import context_lines
from tracer.report import replay
from tracer.tracedir.reader import load
from tracer.workloads import dataset as ds
from tracer.workloads.scenarios import prepare

pytestmark = [needs_root, pytest.mark.kernel]

FINDING = ("kind", "severity", "pid", "summary", "evidence")


def replayed_loop(out: Path) -> list[dict]:
    trace = load(out)
    d = Diagnosis(startup=bool(trace.targets["command"]))
    return [row for inp in replay(trace) for row in feed(d, inp)]


def live_loop(out: Path) -> list[dict]:
    loop = pd.read_parquet(out / "loop").sort_values(["ts", "pid"])
    rows = []
    for r in loop.to_dict("records"):
        r["ts"] = int(r["ts"].value)
        rows.append({k: None if isinstance(v, float) and math.isnan(v) else
                     str(v) if k == "state" else int(v) if v is not None else None
                     for k, v in r.items()})
    return rows


def windowed(out: Path, kept: int, carried: bool) -> tuple[Diagnosis, int]:
    """The trace replayed into a diagnosis that keeps `kept` intervals, every row given
    (`carried` False) or, for the intervals it drops before the end, the rows its state needs
    (as `diagnose_trace` does); and the `files` rows the replay gave."""
    trace = load(out)
    d = Diagnosis(startup=bool(trace.targets["command"]))
    d.window.intervals = deque(maxlen=kept)
    given = 0
    for inp in replay(trace, d if carried else None):
        given += len(inp.files)
        feed(d, inp)
    return d, given


def check_carried(out: Path, fewer_rows: bool) -> None:
    """Intervals that leave the window before the end are replayed with only the rows the
    diagnosis's state carries over (a day's summary would build millions of rows into evidence
    it drops): the diagnosis ends as a replay of every row leaves it, its state, findings and
    the intervals it kept alike, with windows of a third and of two thirds of the trace.
    `fewer_rows`: the dropped intervals surely hold reads past the start-up's (until its end an
    interval's every row is given), so fewer rows are given."""
    n = len(pd.read_parquet(out / "threads")["ts"].unique())
    assert n >= 6
    for kept in (n // 3, 2 * n // 3):
        (full, every), (fast, fewer) = windowed(out, kept, False), windowed(out, kept, True)
        assert fewer < every if fewer_rows else fewer <= every
        assert fast.state == full.state
        assert fast.findings() == full.findings()
        assert context_lines(fast) == context_lines(full)
        assert [(iv.ts_ns, iv.loops, iv.read_max, iv.read_counts, iv.worker_iowait_ns,
                 {pid: (r.bytes, r.missed, list(r.files.items())) for pid, r in iv.data.items()})
                for iv in fast.intervals] == [
                (iv.ts_ns, iv.loops, iv.read_max, iv.read_counts, iv.worker_iowait_ns,
                 {pid: (r.bytes, r.missed, list(r.files.items())) for pid, r in iv.data.items()})
                for iv in full.intervals]


def check_replay(out: Path, fewer_rows: bool = False) -> None:
    """The live run's final findings (its `findings` rows at the last ts) and `loop` rows are
    what `iotrace report --json` and the replay compute from its trace."""
    replayed = sorted(replayed_loop(out), key=lambda r: (r["ts"], r["pid"]))
    live = live_loop(out)
    assert len(replayed) == len(live) and live
    for a, b in zip(live, replayed, strict=True):
        assert a == b
    report = subprocess.run([*IOTRACE, "report", str(out), "--json"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    found = [tuple(f[k] for k in FINDING) for f in json.loads(report.stdout)["findings"]]
    final = pd.read_parquet(out / "findings")
    final = final[final.ts == final.ts.max()]
    written = [(r.kind, r.severity, None if pd.isna(r.pid) else r.pid, r.summary,
                json.loads(r.evidence)) for r in final.itertuples()]
    assert found == written
    check_carried(out, fewer_rows)


def check_first_screen(out: Path, stdout: str) -> None:
    """The live run's end (after the job's and the interval lines) is the first screen of
    `iotrace report`, the same text: findings, loop split, files and disks included."""
    report = subprocess.run([*IOTRACE, "report", str(out)], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    live = stdout[stdout.index(f"Trace {out}: "):stdout.rindex(f"\n\nTrace written to {out}")]
    assert live + "\n" == report.stdout
    assert "Findings (most severe first):" in live


def test_a_dataloader_job_replays_to_its_findings(tmp_path):
    """dataloader_io_bound, traced from its start: three workers, the start-up left out."""
    sc = prepare("dataloader_io_bound", tmp_path / "work")
    try:
        t = launched(sc, tmp_path / "trace")
    finally:
        sc.cleanup()
    check_replay(t.out, fewer_rows=True)  # its workers read past the start-up
    check_first_screen(t.out, t.stdout)


def test_a_torchrun_job_replays_to_its_findings(tmp_path):
    """Two gloo ranks under torchrun's agent, each with its DataLoader workers: the ranks, their
    job and each process's loop known from the trace's `processes` rows as they were live."""
    data = tmp_path / "data"
    for r in range(2):
        ds.make_cold(ds.make_dataset(data / f"shard{r}", 16, 512))
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
            str(ROOT / "tracer" / "workloads" / "ddp_train.py"), "--data", str(data),
            "--epochs", "1"]
    out = tmp_path / "trace"
    # quarter-second intervals: the job lasts seconds, and the replay needs six or more
    r = subprocess.run([*IOTRACE, "-i", "0.25", "-o", str(out), "--", *argv], cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert set(pd.read_parquet(out / "loop")["rank"].dropna()) == {0, 1}
    check_replay(out)  # seconds long: its dropped intervals may all be start-up
    check_first_screen(out, r.stdout)
