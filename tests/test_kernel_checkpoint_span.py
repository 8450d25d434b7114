"""A save is a span (docs/diagnosis.md, "checkpoint_stall"): a real PyTorch loop that torch.saves
40 000 small tensors every 10 steps spends ~1.5 s per save, nearly all of it pickling on the CPU
and ~20 ms writing. The loop's time from opening the file for writing to closing it is
checkpoint time: in the trace, at least 85 % of the job's own clock around its saves; the
finding leads and says what the saves' time was. Saved to a path and through a file object;
launched and attached to."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import IOTRACE, ROOT, needs_root

pytest.importorskip("torch", reason="the PyTorch scenarios need torch (pip install torch)")
from scenario_trace import shared

pytestmark = [needs_root, pytest.mark.kernel]

WRONG = {"not_io_bound", "sync_writes", "dataloader_io_bound", "dataloader_cpu_bound",
         "sync_loading"}


@pytest.mark.parametrize("mode", ["launch", "attach"])
@pytest.mark.parametrize("name", ["checkpoint_pickle", "checkpoint_pickle_file"])
def test_a_pickling_save_is_checkpoint_time(name, mode, tmp_path_factory):
    # attached once the first save is under way: it is left out of the job's clock below
    t, _ = shared(name, "launch" if mode == "launch" else "save", tmp_path_factory)
    saves = t.job.checkpoints
    assert len(saves) >= 5, saves
    counted = saves if mode == "launch" else saves[1:]
    clock_s = sum(c["seconds"] for c in counted)
    loop = t.table("loop")
    traced_s = loop.checkpoint_ns.sum() / 1e9
    assert 0.85 * clock_s <= traced_s <= 1.05 * sum(c["seconds"] for c in saves), (
        traced_s, clock_s, saves)
    final = t.final_findings()
    assert final.kind.iloc[0] == "checkpoint_stall", final[["kind", "severity", "summary"]]
    assert not set(final.kind) & WRONG, final[["kind", "summary"]].to_string()
    summary = final.summary.iloc[0]
    assert "saving checkpoints" in summary and "from opening each checkpoint file" in summary
    ev = json.loads(final.evidence.iloc[0])
    assert ev["write_ns"] < 0.2 * ev["save_ns"], ev  # pickling, not writing
    threads = t.table("threads")
    assert threads.write_open_path.dropna().str.contains("ckpt-").any()
    # `iotrace report` replays the same finding from the trace's rows
    report = subprocess.run([*IOTRACE, "report", str(t.out), "--json"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    replayed = {f["kind"]: f for f in json.loads(report.stdout)["findings"]}
    assert replayed["checkpoint_stall"]["evidence"]["loop_shares_pct"] == ev["loop_shares_pct"]


@pytest.mark.parametrize("mode", ["launch", "attach"])
@pytest.mark.parametrize("name", ["checkpoint_stall", "checkpoint_pickle_fsync"])
def test_a_saves_fsync_after_its_close_is_in_the_save(name, mode, tmp_path_factory):
    """torch.save to a path closes the file, then the loop opens it again read-only and fsyncs
    it: on a disk limited to 100 MB/s the fsync is much of each save (the scenario
    checkpoint_stall). The span reopens for an fsync of its file right after its close, so the
    fsync is checkpoint time even where it shares an interval with the next save's span."""
    t, _ = shared(name, "launch" if mode == "launch" else "save", tmp_path_factory)
    saves = t.job.checkpoints
    assert len(saves) >= 3, saves
    counted = saves if mode == "launch" else saves[1:]
    clock_s = sum(c["seconds"] for c in counted)
    # the fsync is enough of each save that one counted without it falls short of the 0.85
    # below (pickling 50 MB takes 1.1-2.3 s on a busy 2-vCPU host, the fsync 1 s)
    assert sum(c["fsync_s"] for c in counted) > 0.25 * clock_s, saves
    traced_s = t.table("loop").checkpoint_ns.sum() / 1e9
    assert 0.85 * clock_s <= traced_s <= 1.05 * sum(c["seconds"] for c in saves), (
        traced_s, clock_s, saves)
    final = t.final_findings()
    assert final.kind.iloc[0] == "checkpoint_stall", final[["kind", "severity", "summary"]]
    assert not set(final.kind) & WRONG, final[["kind", "summary"]].to_string()
