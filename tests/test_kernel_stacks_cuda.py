"""The line where a loop that drives its GPU waits for it, or keeps it waiting (Python stacks):
a Python loop calling the stand-in CUDA driver (tests/workloads/cuda_loop.py, through
tests/workloads/fake_libcuda.c), launched and attached. A loop that waits in
cuStreamSynchronize is sampled for `gpu_wait` there, and `not_io_bound` names that line; one that
works in Python between short synchronisations is sampled for `host` in that work (host_bound
names it where NVML shows the GPU idle: not on this machine, so only the samples are checked)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from test_kernel_cuda import fake_cuda  # noqa: F401 (a fixture)
from test_kernel_stacks import needs_reader

from conftest import IOTRACE, ROOT, needs_root, reap
from tracer.core.vocab import READY_PREFIX

pytestmark = [needs_root, pytest.mark.kernel, needs_reader]

LOOP = ROOT / "tests/workloads/cuda_loop.py"
SOURCE = LOOP.read_text().splitlines()
SYNC = next(i for i, s in enumerate(SOURCE, 1) if s.strip() == "cuda.cuStreamSynchronize(None)")
WORK = range(next(i for i, s in enumerate(SOURCE, 1) if s.startswith("def host_work(")),
             next(i for i, s in enumerate(SOURCE, 1) if s.startswith("def main(")))
SECONDS = 10


def trace(mode: str, lib: Path, how: str, out: Path) -> None:
    job = [sys.executable, str(LOOP), str(lib), mode, str(SECONDS)]
    common = ["-i", "0.5", "--gpu", "off", "-o", str(out)]
    if how == "launch":
        done = subprocess.run([*IOTRACE, *common, "--", *job], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return
    proc = subprocess.Popen(job, stdout=subprocess.PIPE, text=True)
    tracer = None
    try:
        assert proc.stdout.readline().strip() == "looping"  # attached as it runs
        tracer = subprocess.Popen([*IOTRACE, *common, "--pid", str(proc.pid)], cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while READY_PREFIX not in tracer.stderr.readline():
            assert time.monotonic() < deadline and tracer.poll() is None
        assert proc.wait(timeout=60) == 0
        assert tracer.wait(timeout=60) == 0  # its target exited
    finally:
        reap(proc, tracer)


def samples(out: Path, reason: str) -> pd.DataFrame:
    """The user's frame of each sample taken for `reason`."""
    stacks = pd.read_parquet(out / "stacks")
    return stacks[stacks.user & (stacks.reason == reason)]


@pytest.mark.parametrize("how", ["launch", "attach"])
def test_the_line_where_the_loop_waits_for_its_gpu(fake_cuda, how, tmp_path):  # noqa: F811
    lib, _ = fake_cuda
    out = tmp_path / "trace"
    trace("gpu_wait", lib, how, out)
    waits = samples(out, "gpu_wait")
    lines = set(zip(waits.line, waits.function, strict=True))
    assert len(waits) >= 1 and lines == {(SYNC, "main")}, waits
    assert samples(out, "host").empty
    findings = pd.read_parquet(out / "findings")
    final = findings[findings.ts == findings.ts.max()].sort_values("severity", ascending=False)
    assert final.kind.iloc[0] == "not_io_bound", final[["kind", "summary"]].to_string()
    summary, ev = final.summary.iloc[0], json.loads(final.evidence.iloc[0])
    assert (ev["code"]["line"], ev["code"]["function"]) == (SYNC, "main"), ev
    assert (f" It waits for the GPU at cuda_loop.py:{SYNC} in main "
            "(`cuda.cuStreamSynchronize(None)`).") in summary, summary
    assert ev["loop_shares_pct"]["gpu_wait"] > 50, ev


@pytest.mark.parametrize("how", ["launch", "attach"])
def test_the_line_where_the_loop_works_on_the_host(fake_cuda, how, tmp_path):  # noqa: F811
    lib, _ = fake_cuda
    out = tmp_path / "trace"
    trace("host", lib, how, out)
    work = samples(out, "host")
    assert len(work) >= 1, pd.read_parquet(out / "stacks")
    # mostly in the Python work, now and then between two steps (the loop's own lines)
    in_work = work[work.function == "host_work"]
    assert len(in_work) > len(work) / 2 and set(in_work.line) <= set(WORK), work
    assert set(work.function) <= {"host_work", "main"}, work
    assert samples(out, "gpu_wait").empty
