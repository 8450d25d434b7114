"""The findings name the user's line (Python stacks read by py-spy from outside the job): real
PyTorch scenarios whose lines are read from the workload's source, launched and attached to.

- dataloader_io_bound: the workers read cold files from a throttled disk; the leading finding
  names the worker's read (`buf = f.read()` in `FileDataset.__getitem__`) and the loop's wait
  for batches (`for x, y in loader:`);
- sync_loading (num_workers=0): the loop's own read, the same line;
- checkpoint_pickle: the loop's `torch.save` line;
- dataloader_cpu_bound: the workers' transform; dataloader_network_bound: their HTTP read;
  sync_writes: the loop's fsync of its log.

Without py-spy, iotrace says so once and traces as before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import IOTRACE, ROOT, needs_root

pytest.importorskip("torch", reason="the PyTorch scenarios need torch (pip install torch)")
from scenario_trace import Traced, shared

from tracer.live.stacks import READER_ENV, find_reader, missing_line
from tracer.workloads import train

pytestmark = [needs_root, pytest.mark.kernel]
needs_reader = pytest.mark.skipif(find_reader() is None, reason="py-spy is not installed")

SOURCE = Path(train.__file__).read_text().splitlines()


def line_of(statement: str, after: str | None = None) -> int:
    """The line of `statement` in train.py (the first after the line holding `after`)."""
    start = next(i for i, s in enumerate(SOURCE) if after in s) if after else 0
    return next(i for i, s in enumerate(SOURCE[start:], start + 1) if s.strip() == statement)


READ = line_of("buf = f.read()", after="class FileDataset")
LOOP = line_of("for x, y in loader:")
SAVE = line_of("torch.save(state, path)", after="def save_checkpoint")


def run(name: str, mode: str, tmp_path_factory) -> Traced:
    """The scenario's run that other tests share (scenario_trace.shared): launched, or attached
    to once its workers run; sync_loading (no workers) once set up, before training;
    checkpoint_pickle once its first save is under way."""
    if mode == "attach":
        mode = {"sync_loading": "before", "checkpoint_pickle": "save"}.get(name, "workers")
    return shared(name, mode, tmp_path_factory)[0]


def leading(t: Traced, kind: str) -> tuple[str, dict]:
    final = t.final_findings()
    assert final.kind.iloc[0] == kind, final[["kind", "severity", "summary"]].to_string()
    return final.summary.iloc[0], json.loads(final.evidence.iloc[0])


def assert_names(summary: str, code: dict | None, line: int, function: str, text: str) -> None:
    assert code is not None, summary
    assert (Path(code["file"]).resolve(), code["line"], code["function"], code["text"]) == (
        Path(train.__file__).resolve(), line, function, text), code
    assert f"at train.py:{line} in {function} (`{text}`)." in summary, summary


@needs_reader
@pytest.mark.parametrize("mode", ["launch", "attach"])
def test_the_workers_read_line_leads(mode, tmp_path_factory):
    t = run("dataloader_io_bound", mode, tmp_path_factory)
    summary, ev = leading(t, "dataloader_io_bound")
    assert_names(summary, ev["code"], READ, "FileDataset.__getitem__", "buf = f.read()")
    assert summary.startswith("The training loop waited for batches ")
    assert " The DataLoader workers read at " in summary
    assert_names(summary, ev["loop_code"], LOOP, "train", "for x, y in loader:")
    stacks = t.table("stacks")
    # the workers' slow reads are sampled where they read (the loop may have one of its own:
    # an import that reads a cold file on its first batch)
    reads = stacks[stacks.user & (stacks.reason == "slow_read")]
    workers = reads[reads.role == "dataloader_worker"]
    assert (workers.function.str.startswith("FileDataset.").all()
            and (workers.line == READ).any()), reads
    assert missing_line() not in t.stderr
    # the summary printed and `iotrace report` (a replay of the trace) say it too
    assert f"read at train.py:{READ} in FileDataset.__getitem__" in t.stdout
    report = subprocess.run([*IOTRACE, "report", str(t.out)], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert f"read at train.py:{READ} in FileDataset.__getitem__" in report.stdout, report.stdout
    cost = json.loads((t.out / "meta.json").read_text())["python_stacks"]
    samples = stacks.drop_duplicates(["taken", "tid"])
    assert cost["dumps"] >= len(samples) > 0 and cost["cpu_s"] > 0, cost


@needs_reader
@pytest.mark.parametrize("mode", ["launch", "attach"])
def test_the_loops_own_read_line(mode, tmp_path_factory):
    t = run("sync_loading", mode, tmp_path_factory)
    summary, ev = leading(t, "sync_loading")
    assert_names(summary, ev["code"], READ, "FileDataset.__getitem__", "buf = f.read()")
    assert " The loop reads at " in summary


@needs_reader
@pytest.mark.parametrize("mode", ["launch", "attach"])
def test_the_save_line(mode, tmp_path_factory):
    t = run("checkpoint_pickle", mode, tmp_path_factory)
    summary, ev = leading(t, "checkpoint_stall")
    assert_names(summary, ev["code"], SAVE, "save_checkpoint", "torch.save(state, path)")
    assert " The save runs at " in summary


def test_without_a_reader_it_traces_as_before_and_says_so_once(tmp_path):
    """A Python job that reads a file slowly for a few seconds, traced with no reader."""
    data = tmp_path / "data"
    data.write_bytes(b"x" * (1 << 20))
    code = (f"import os, time\nend = time.time() + 3\nwhile time.time() < end:\n"
            f"    fd = os.open({str(data)!r}, os.O_RDONLY)\n"
            "    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n"
            "    os.read(fd, 1 << 20); os.close(fd); time.sleep(0.05)\n")
    env = {"PATH": "/usr/bin:/bin", READER_ENV: ""}
    done = subprocess.run([*IOTRACE, "-o", str(tmp_path / "trace"), "--slow-ms", "0.01", "--",
                           sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("no Python stacks") == 1, done.stderr
    assert f"iotrace: {missing_line()}\n" in done.stderr
    import pandas as pd

    assert len(pd.read_parquet(tmp_path / "trace" / "events")) > 0  # traced as before
    assert len(pd.read_parquet(tmp_path / "trace" / "stacks")) == 0
    meta = json.loads((tmp_path / "trace" / "meta.json").read_text())
    assert missing_line() in meta["unavailable"] and meta["python_stacks"] is None


def lines_of(function: str, after: int = 0) -> range:
    """The lines of the first method `function` (`def function(`) in train.py after line
    `after`, its body to the next def."""
    start = next(i for i, s in enumerate(SOURCE[after:], after + 1)
                 if s.strip().startswith(f"def {function}("))
    end = next(i for i, s in enumerate(SOURCE[start:], start + 1)
               if s.strip().startswith(("def ", "class ")))
    return range(start, end)


@needs_reader
@pytest.mark.parametrize("mode", ["launch", "attach"])
def test_the_workers_transform_line(mode, tmp_path_factory):
    """dataloader_cpu_bound: the workers sampled while the loop waits are in the transform."""
    t = run("dataloader_cpu_bound", mode, tmp_path_factory)
    summary, ev = leading(t, "dataloader_cpu_bound")
    code = ev["code"]
    assert code is not None, summary
    assert code["function"] == "FileDataset._heavy" and code["line"] in lines_of("_heavy"), code
    assert f" The DataLoader workers work at train.py:{code['line']} in FileDataset._heavy" in summary


@needs_reader
def test_the_workers_http_line(tmp_path_factory):
    """dataloader_network_bound: the workers wait for a slow HTTP server in HttpDataset."""
    t = run("dataloader_network_bound", "launch", tmp_path_factory)
    summary, ev = leading(t, "dataloader_network_bound")
    code = ev["code"]
    assert code is not None, summary
    assert code["function"] == "HttpDataset.__getitem__", code
    http = next(i for i, s in enumerate(SOURCE, 1) if s.startswith("class HttpDataset"))
    assert code["line"] in lines_of("__getitem__", after=http), code
    assert " The DataLoader workers read at train.py:" in summary


@needs_reader
@pytest.mark.parametrize("mode", ["launch", "attach"])
def test_the_log_write_line(mode, tmp_path_factory):
    """sync_writes: the loop's fsync of its log, every step."""
    t = run("sync_writes", mode, tmp_path_factory)
    summary, ev = leading(t, "sync_writes")
    fsync = line_of("os.fsync(log.fileno())")
    assert_names(summary, ev["code"], fsync, "train", "os.fsync(log.fileno())")
