"""Shared fixtures: the iotrace command, the static C workload, a data file on a real disk."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tracer.workloads.dataset import Hold, hold

ROOT = Path(__file__).resolve().parent.parent
IOTRACE = [sys.executable, "-m", "tracer.cli"]
IOWORK_SRC = ROOT / "tests/workloads/iowork.c"
IOWORK = ROOT / "tests/workloads/bin/iowork"
DATA_MIB = 64

NEEDS_ROOT = "loads BPF programs: needs root"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason=NEEDS_ROOT)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keeps the split honest: `pytest -m "not kernel"` (`make unit`) must pass with no
    privileges, so a test that needs them and is not marked `kernel` fails the collection:
    one marked `needs_root`, or one in a test_kernel_*.py file (root-only files)."""
    unmarked = [item.nodeid for item in items if item.get_closest_marker("kernel") is None and (
        item.path.name.startswith("test_kernel_")
        or any(m.kwargs.get("reason") == NEEDS_ROOT for m in item.iter_markers("skipif")))]
    if unmarked:
        raise pytest.UsageError("needs root but is not marked kernel (add pytest.mark.kernel, "
                                "as for the others): " + ", ".join(unmarked))


@pytest.fixture(scope="session")
def iowork() -> Iterator[Path]:
    """The static workload binary (built here when `make test` has not built it)."""
    if not IOWORK.exists() or IOWORK.stat().st_mtime < IOWORK_SRC.stat().st_mtime:
        IOWORK.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cc", "-O2", "-static", "-o", str(IOWORK), str(IOWORK_SRC)], check=True)
    # Kept mapped for the whole session: reclaim on these VMs evicts file pages idle for a few
    # seconds, and a traced run that pages its own binary in has more block reads than it asks.
    with hold([IOWORK]):
        yield IOWORK


@pytest.fixture(scope="session")
def data_file(tmp_path_factory) -> Path:
    """A 64 MiB file on a block device (tmp_path is on the root disk here, not tmpfs)."""
    path = tmp_path_factory.mktemp("data") / "data.bin"
    with open(path, "wb") as f:
        for _ in range(DATA_MIB):
            f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())
    return path


@pytest.fixture(scope="session")
def tracefs() -> Iterator[None]:
    """tracefs mounted where libbpf looks for the classic tracepoints' ids (the classic syscall
    hooks need it; raw_tp and tp_btf programs do not): mounted for the session if it is not,
    and unmounted after."""
    from tracer.kernel.loader import TRACEFS_DIRS, classic_syscalls_missing

    mounted = None
    if classic_syscalls_missing():
        mounted = TRACEFS_DIRS[-1]
        subprocess.run(["mount", "-t", "tracefs", "nodev", mounted], check=True)
        assert classic_syscalls_missing() is None
    try:
        yield
    finally:
        if mounted:
            subprocess.run(["umount", "-l", mounted], check=False)


def kernel_dev(st_dev: int) -> int:
    """A device number as the kernel's programs read it (major << 20 | minor) from stat's."""
    return (os.major(st_dev) << 20) | os.minor(st_dev)


_WARM: list[Hold] = []


def warm(path: Path, nbytes: int = 1 << 20) -> None:
    """Keeps the first `nbytes` cached until the test ends, so that cached preads hit the page
    cache: mapped (dataset.hold), as reclaim on these VMs pages out file pages idle for a few
    seconds, but only unmapped ones (a traced run can take longer than that to start under
    load)."""
    _WARM.append(hold([path], nbytes))


@pytest.fixture(autouse=True)
def _unwarm() -> Iterator[None]:
    """Unmaps what the test warmed: a later test may want those pages cold."""
    yield
    while _WARM:
        _WARM.pop().close()


# Tests of exact counts trace with the kernel's BPF stats off, so that nothing but the programs
# themselves runs in the traced paths; the stats are tested on their own
# (test_kernel_selfcost.py). Block counts add the requests that ended unseen (unseen() below).
EXACT = ("--bpf-stats", "off")


def unseen(out: Path) -> tuple[int, int]:
    """(requests, bytes) of the trace's block requests that ended unseen: on this kernel the
    completion programs now and then do not run for a few requests, which iotrace counts apart
    (README, "Known limitations"). Exact block counts are the counted ones plus these."""
    d = json.loads((out / "meta.json").read_text())["self_cost"]["block_completions_unseen"]
    return d["requests"], d["bytes"]


def reap(*procs: subprocess.Popen | None) -> None:
    """Kills what a failed test left running of `procs` and waits for it."""
    for p in procs:
        if p is not None and p.poll() is None:
            p.kill()
            p.communicate(timeout=60)


def run_iotrace(*args: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*IOTRACE, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, **kw)


def rolled(out: Path, table: str = "latency") -> bool:
    """Whether a segment with rows of `table` is on disk (every table has an empty one from
    the start)."""
    import pyarrow.parquet as pq

    for part in out.glob(f"{table}/part-*.parquet"):
        with contextlib.suppress(OSError):  # (replaced by its first rows as we look)
            if pq.read_metadata(part).num_rows:
                return True
    return False


def kill_9_after_a_roll(out: Path, loop: str, timeout: float = 30) -> None:
    """Traces `sh -c LOOP` into `out` and kill -9s iotrace (and the job, its process group) once
    a `latency` segment has rolled: nothing of iotrace runs at exit."""
    tracer = subprocess.Popen([*IOTRACE, "-o", str(out), "-i", "0.5", "--", "sh", "-c", loop],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        assert tracer.stderr.readline().startswith("Tracing")
        deadline = time.monotonic() + timeout
        while not rolled(out) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        os.killpg(tracer.pid, signal.SIGKILL)
        tracer.wait(timeout=10)


@contextlib.contextmanager
def tracing_a_sleeper(out: Path, interval: str) -> Iterator[tuple[subprocess.Popen, subprocess.Popen]]:
    """`iotrace --pid` of a `sleep 60` into `out`, once it says it is tracing: (the sleeper,
    the tracer); both are ended afterwards whatever the test did."""
    sleeper = subprocess.Popen(["sleep", "60"])
    tracer = subprocess.Popen([*IOTRACE, "--pid", str(sleeper.pid), "-o", str(out), "-i", interval],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert tracer.stderr.readline().startswith("Tracing")
        yield sleeper, tracer
    finally:
        sleeper.kill()
        sleeper.wait()
        if tracer.poll() is None:
            tracer.kill()
            tracer.wait()
