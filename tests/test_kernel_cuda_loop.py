"""The training loop's CUDA states in a traced run, without a GPU: the stand-in driver
(tests/workloads/fake_libcuda.c) called by a real process (tests/workloads/cuda_calls.c) under
`iotrace`, launched and attached. Its `threads` rows and its `loop` split show the time it
spent waiting for the GPU (synchronisations) and copying (a synchronous copy, and the
synchronisation after a large async copy, as PyTorch copies), as its own clock measured; a
replay of the trace gives the same loop rows and findings. Nothing of the kernel is mocked."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
from test_kernel_cuda import PROBE_COST_NS, fake_cuda  # noqa: F401 (a fixture)
from test_kernel_replay import check_replay

from conftest import IOTRACE, ROOT, needs_root, reap
from tracer.core import abi
from tracer.core.vocab import READY_PREFIX

pytestmark = [needs_root, pytest.mark.kernel]

# The driver is probed at the first reading after its dlopen: a first call (1 s, in flight
# then, or not yet begun) covers that; what follows is counted whole.
PREROLL = "ctx_sync:1:0:1000000"
STEPS = ("stream_sync:20:0:30000",  # 20 waits of 30 ms, asleep: gpu_wait
         "dtoh_async:1:4194304:0", "stream_sync:1:0:200000",  # a 4 MiB copy's wait: device_copy
         "dtoh:4:1048576:50000",  # synchronous copies of 50 ms: device_copy
         # a batch sent up (4 MiB) and .item()'s 4 bytes down, then the wait: gpu_wait
         "htod_async:1:4194304:0", "dtoh_async:1:4:0", "stream_sync:1:0:100000",
         "stream_sync:10:0:20000:1:spin")  # spinning waits: gpu_wait, on CPU


def parse(out: str) -> dict[str, tuple[int, int, int]]:
    """What cuda_calls printed, summed by call: (calls, ns, bytes)."""
    got: dict[str, tuple[int, int, int]] = {}
    for line in out.splitlines():
        call, *fields = line.split() or [""]
        if not fields or not all("=" in f for f in fields) or "tid=" not in line:
            continue
        f = dict(kv.split("=") for kv in fields)
        n, ns, b = got.get(call, (0, 0, 0))
        got[call] = (n + int(f["n"]), ns + int(f["ns"]), b + int(f["bytes"]))
    return got


def check(out: Path, printed: str) -> None:
    measured = parse(printed)
    threads = pd.read_parquet(out / "threads")
    threads = threads[threads.cuda_syncs.notna()]
    loop = pd.read_parquet(out / "loop")
    # the steps' calls, and the pre-roll's only when the probes were there before it began
    syncs = int(threads.cuda_syncs.sum())
    preroll = syncs == 20 + 1 + 1 + 10 + 1
    assert preroll or syncs == 20 + 1 + 1 + 10, threads
    syncs_ns = _syncs(printed)
    assert len(syncs_ns) == 4, printed
    want_wait = syncs_ns[0] + syncs_ns[2] + syncs_ns[3] + (
        measured["ctx_sync"][1] if preroll else 0)
    want_copy = measured["dtoh"][1] + syncs_ns[1]
    calls = 33 if preroll else 32
    for got, want in ((threads.gpu_wait_ns.sum(), want_wait),
                      (threads.device_copy_ns.sum(), want_copy)):
        assert want - calls * PROBE_COST_NS <= got <= want, (got, want)
    assert threads.copy_dtoh_bytes.sum() == 4 * 1048576 + 4194304 + 4
    assert threads.copy_htod_bytes.sum() == 4194304
    # launches: counted in a slice of each interval (none here), null before the first slice
    assert (threads.cuda_launches.fillna(0) == 0).all()
    # the loop: all of it in its main thread, all of it charged (but what a reading's clock
    # cut: a call that returned between the thread times' reading and the calls')
    for col in ("gpu_wait_ns", "device_copy_ns"):
        assert 0 <= threads[col].sum() - loop[col].sum() <= 2_000_000, col
    assert loop.state.astype(str).isin(["gpu_wait", "device_copy", "compute", "other"]).all()
    check_replay(out)


def _syncs(printed: str) -> list[int]:
    """The caller's time in each stream_sync step, in order: 20 waits, the wait after the
    4 MiB copy, the wait after 12 bytes, 10 spinning waits."""
    return [int(dict(kv.split("=") for kv in ln.split()[1:])["ns"])
            for ln in printed.splitlines() if ln.startswith("stream_sync tid=")]


def test_launched_loop_splits_gpu_waits_and_copies(fake_cuda, tmp_path):  # noqa: F811
    lib, caller = fake_cuda
    out = tmp_path / "trace"
    done = subprocess.run([*IOTRACE, "-i", "0.2", "--gpu", "off", "-o", str(out), "--",
                           str(caller), str(lib), "open", PREROLL, *STEPS], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    check(out, done.stdout)


def test_attached_loop_splits_gpu_waits_and_copies(fake_cuda, tmp_path):  # noqa: F811
    lib, caller = fake_cuda
    out = tmp_path / "trace"
    job = subprocess.Popen([str(caller), str(lib), "open", "wait", PREROLL, *STEPS],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    tracer = None
    try:
        assert job.stdout.readline().split()[0] == "pid"
        assert job.stdout.readline().strip() == "waiting"
        tracer = subprocess.Popen([*IOTRACE, "-i", "0.2", "--gpu", "off", "--pid", str(job.pid),
                                   "-o", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while READY_PREFIX not in tracer.stderr.readline():
            assert time.monotonic() < deadline and tracer.poll() is None
        job.stdin.write("\n")
        job.stdin.flush()
        printed = job.stdout.read()
        assert job.wait(timeout=60) == 0
        assert tracer.wait(timeout=60) == 0  # its target exited
    finally:
        reap(job, tracer)
    check(out, printed)


def test_copy_wait_threshold_is_the_headers():
    assert abi.CUDA_COPY_WAIT_BYTES == 1 << 20


def test_launches_are_counted_in_slices_and_scaled(fake_cuda, tmp_path):  # noqa: F811
    """cuLaunchKernel's uprobe is attached for 2 % of each interval only (its cost); the
    `threads` rows' launches are the slices' counts scaled to the interval: about the
    program's own, a sample's error aside."""
    lib, caller = fake_cuda
    out = tmp_path / "trace"
    done = subprocess.run([*IOTRACE, "-i", "0.2", "--gpu", "off", "-o", str(out), "--",
                           str(caller), str(lib), "open", PREROLL, "launch:6000:0:500"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = parse(done.stdout)["launch"]
    threads = pd.read_parquet(out / "threads")
    counted = threads.cuda_launches.sum()
    assert 0.6 * printed[0] <= counted <= 1.4 * printed[0], (counted, printed)
