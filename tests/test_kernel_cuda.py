"""CUDA driver calls seen from the kernel, without a GPU: a stand-in driver library built here
(tests/workloads/fake_libcuda.c, exporting the driver's names, each call waiting as long as
its caller asks) called by a real process (tests/workloads/cuda_calls.c, which prints what
its own clock measured), with the real BPF object loaded and bpf/cuda.bpf.c's uprobes
attached by tracer/kernel/uprobes.py. Nothing of the kernel is mocked."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT, needs_root
from tracer.core import abi
from tracer.kernel import uprobes
from tracer.kernel.probes import Probes
from tracer.kernel.uprobes import CudaProbes

pytestmark = [needs_root, pytest.mark.kernel]

WORKLOADS = ROOT / "tests/workloads"
BIN = WORKLOADS / "bin"
# What a call's probes may add to the caller's own measure of it (the uprobe's trap and the
# uretprobe's, the programs, the clock reads): measured at ~2 us a call here
# (scripts/bench_uprobes.py); 200 us leaves room for a preemption on these shared 2-CPU VMs.
PROBE_COST_NS = 200_000


def _build(out: Path, src: Path, *flags: str) -> Path:
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cc", "-O2", "-Wall", *flags, "-o", str(out), str(src)], check=True)
    return out


@pytest.fixture(scope="module")
def fake_cuda() -> tuple[Path, Path]:
    """(the stand-in libcuda.so.1, the caller), built when missing or older than their source."""
    lib = _build(BIN / "fake_cuda/libcuda.so.1", WORKLOADS / "fake_libcuda.c", "-shared", "-fPIC")
    caller = _build(BIN / "cuda_calls", WORKLOADS / "cuda_calls.c", "-pthread")
    return lib, caller


@pytest.fixture(scope="module")
def probes():
    p = Probes(map_sizes={})
    p.load()
    p.loader.attach()  # proc.bpf.c's programs: a fork of a traced process is traced
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def cuda(probes):
    notes: list[str] = []
    c = CudaProbes(probes.loader.obj, launches=True, note=notes.append)
    c.said = notes
    try:
        yield c
    finally:
        c.close()


class Caller:
    """A running cuda_calls: its pid, and what it printed, by (call, tid)."""

    def __init__(self, fake_cuda, *steps: str):
        lib, caller = fake_cuda
        self.proc = subprocess.Popen([str(caller), str(lib), *steps], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.pid = int(self.proc.stdout.readline().split()[1])
        self.measured: dict[tuple[str, int], tuple[int, int, int]] = {}

    def until_waiting(self) -> None:
        self._read_until("waiting")

    def go(self) -> None:
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def _read_until(self, stop: str | None) -> None:
        for line in self.proc.stdout:
            if line.strip() == stop:
                return
            call, *fields = line.split()
            f = dict(kv.split("=") for kv in fields)
            got = (int(f["n"]), int(f["ns"]), int(f["bytes"]))
            before = self.measured.get((call, int(f["tid"])), (0, 0, 0))  # steps add up
            self.measured[call, int(f["tid"])] = tuple(x + y for x, y in zip(before, got, strict=True))
        assert stop is None, f"cuda_calls ended before printing {stop!r}"

    def finish(self) -> dict[tuple[str, int], tuple[int, int, int]]:
        self._read_until(None)
        assert self.proc.wait(timeout=30) == 0
        return self.measured


def counted(cuda: CudaProbes, pid: int | None = None) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(calls, ns, bytes) by (call, tid) of the calls the kernel counted (of process `pid`)."""
    return {(call, tid): (t.calls[call], t.ns[call], t.bytes[call])
            for tid, t in cuda.read().items() if pid is None or t.pid == pid
            for call in abi.CUDA_CALLS.values() if t.calls[call]}


def assert_exact(seen, measured, waited_ns: dict[str, int]) -> None:
    """The kernel's counts are the caller's, call for call and byte for byte; its time is
    inside the caller's, short of it by the probes' own cost only, and at least the waits
    asked for."""
    assert {k: (n, b) for k, (n, _, b) in seen.items()} == {k: (n, b) for k, (n, _, b)
                                                            in measured.items()}
    for key, (n, ns, _) in seen.items():
        own = measured[key][1]
        assert n * waited_ns.get(key[0], 0) <= ns <= own, (key, ns, own)
        assert own - ns <= n * PROBE_COST_NS, (key, ns, own)


def test_exact_calls_bytes_and_time_per_thread(probes, cuda, fake_cuda):
    """Launched traced: 50 stream synchronisations of 2 ms on each of two threads, spinning
    and sleeping copies of known sizes, launches; every count exact, per thread and call."""
    c = Caller(fake_cuda, "wait", "open", "wait", "stream_sync:50:0:2000:2",
               "ctx_sync:20:0:1000", "event_sync:5:0:3000:1:spin", "dtoh:10:1048576:500",
               "htod:7:4096:300:1:spin", "dtod:3:65536:0", "dtoh_async:4:100:0",
               "htod_async:6:200:0", "launch:1000:0:0")
    probes.loader.track(c.pid)
    c.until_waiting()
    assert cuda.scan([c.pid]) == []  # not mapped yet
    c.go()
    c.until_waiting()
    [lib] = cuda.scan([c.pid])
    assert lib.path == str(fake_cuda[0].resolve())
    assert lib.missing == ["cuMemcpy", "cuMemcpyDtoDAsync_v2", "cuMemcpyAsync"]
    assert cuda.said == [f"{lib.path}: exports no cuMemcpy, cuMemcpyDtoDAsync_v2, cuMemcpyAsync: "
                         "those calls are not counted"]
    assert cuda.scan([c.pid]) == []  # one attach per file
    c.go()
    measured = c.finish()
    seen = counted(cuda, c.pid)
    # the launches are counted, not timed: the caller's time for them is not the kernel's
    assert seen.pop(("launch", c.pid)) == (1000, 0, 0)
    measured.pop(("launch", c.pid))
    assert len({tid for call, tid in seen if call == "stream_sync"}) == 2
    assert_exact(seen, measured, {"stream_sync": 2_000_000, "ctx_sync": 1_000_000,
                                  "event_sync": 3_000_000, "dtoh": 500_000, "htod": 300_000})
    assert cuda.threads_lost() == 0


def test_library_loaded_after_attach_is_found_by_scan(probes, cuda, fake_cuda, monkeypatch):
    """dlopen'ed after the probes were attached: the next scan finds it. Until then, a process
    whose code size has not changed is not read again; once seen with it, never again."""
    reads: list[int] = []
    read_maps = uprobes._read_maps
    monkeypatch.setattr(uprobes, "_read_maps", lambda pid: reads.append(pid) or read_maps(pid))
    c = Caller(fake_cuda, "wait", "open", "wait", "htod:3:100:0")
    probes.loader.track(c.pid)
    c.until_waiting()
    assert cuda.scan([c.pid]) == [] and cuda.scan([c.pid]) == []
    assert reads == [c.pid]
    c.go()
    c.until_waiting()
    assert len(cuda.scan([c.pid])) == 1 and reads == [c.pid, c.pid]
    assert cuda.scan([c.pid]) == [] and reads == [c.pid, c.pid]
    c.go()
    measured = c.finish()
    assert_exact(counted(cuda, c.pid), measured, {})


def test_untraced_process_adds_nothing(probes, cuda, fake_cuda):
    """The uprobes fire in every process that maps the file; only the traced one is counted."""
    traced = Caller(fake_cuda, "open", "wait", "stream_sync:20:0:1000", "dtoh:5:777:0")
    other = Caller(fake_cuda, "open", "wait", "stream_sync:20:0:1000", "dtoh:5:777:0")
    probes.loader.track(traced.pid)
    traced.until_waiting()
    other.until_waiting()
    assert len(cuda.scan([traced.pid])) == 1
    other.go()
    traced.go()
    other.finish()
    measured = traced.finish()
    assert counted(cuda, other.pid) == {}
    assert {tid for _, tid in counted(cuda)} >= {traced.pid}
    assert not {tid for _, tid in counted(cuda)} & {tid for _, tid in other.measured}
    assert_exact(counted(cuda, traced.pid), measured, {"stream_sync": 1_000_000})


def test_fork_counts_under_the_childs_thread(probes, cuda, fake_cuda):
    """A forked worker maps its parent's library: counted, under its own tid, with no new
    attach (the file is probed already)."""
    c = Caller(fake_cuda, "open", "wait", "ctx_sync:3:0:500", "fork/htod:4:512:1000",
               "fork/dtoh:2:64:0:2")
    probes.loader.track(c.pid)
    c.until_waiting()
    assert len(cuda.scan([c.pid])) == 1
    c.go()
    measured = c.finish()
    children = {tid for (call, tid) in measured if call != "ctx_sync"}
    assert c.pid not in children and len(children) == 3  # one child, then a child's 2 threads
    seen = {k: v for k, v in counted(cuda).items() if k[1] in children | {c.pid}}
    assert_exact(seen, measured, {"ctx_sync": 500_000, "htod": 1_000_000})
    pids = {t.pid for tid, t in cuda.read().items() if tid in children}
    assert len(pids) == 2 and c.pid not in pids  # each child its own process


def test_attach_to_a_process_already_calling(probes, cuda, fake_cuda):
    """Attached while the process is inside a 400 ms synchronisation: the calls before are not
    counted, nor the one in flight (its entry was not seen), every call after is, exactly."""
    c = Caller(fake_cuda, "open", "ctx_sync:5:0:1000", "wait", "event_sync:1:0:400000",
               "dtoh:7:1000:0", "stream_sync:4:0:2000")
    c.until_waiting()
    c.go()
    time.sleep(0.1)  # inside the long call
    probes.loader.track(c.pid)
    assert len(cuda.scan([c.pid])) == 1
    measured = c.finish()
    seen = counted(cuda, c.pid)
    assert set(seen) == {("dtoh", c.pid), ("stream_sync", c.pid)}
    assert_exact(seen, {k: measured[k] for k in seen}, {"stream_sync": 2_000_000})


def test_a_long_call_in_flight_counts_its_time_so_far(probes, cuda, fake_cuda):
    """A read during a synchronisation: its time so far is in (as a thread's open state is),
    its count is not until it returns."""
    c = Caller(fake_cuda, "open", "wait", "stream_sync:1:0:600000")
    probes.loader.track(c.pid)
    c.until_waiting()
    assert len(cuda.scan([c.pid])) == 1
    c.go()
    time.sleep(0.3)
    t = cuda.read(time.monotonic_ns())[c.pid]
    assert t.in_flight == "stream_sync" and t.calls["stream_sync"] == 0
    assert 200_000_000 <= t.ns["stream_sync"] <= 600_000_000
    c.finish()
    t = cuda.read(time.monotonic_ns())[c.pid]
    assert t.in_flight is None and t.calls["stream_sync"] == 1
    assert t.ns["stream_sync"] >= 600_000_000
    cuda.delete_threads([c.pid])
    assert c.pid not in cuda.read()


def test_self_cost_lists_the_uprobes_once_they_ran(fake_cuda):
    """The loaded but unattached uprobe programs are not in the self-cost table (a job without
    the CUDA driver reads as before); once they ran, they are, under their stage."""
    p = Probes(map_sizes={})
    p.load()
    cuda = CudaProbes(p.loader.obj)
    try:
        assert p.stats.enable() is None

        def listed():
            return {(stage, name) for stage, name, _, _ in p.stats.program_stats()}

        assert not {name for _, name in listed()} & {"cuda_enter", "cuda_exit"}
        c = Caller(fake_cuda, "open", "wait", "ctx_sync:2:0:0")
        p.loader.track(c.pid)
        c.until_waiting()
        cuda.scan([c.pid])
        c.go()
        c.finish()
        assert {("cuda", "cuda_enter"), ("cuda", "cuda_exit")} <= listed()
    finally:
        cuda.close()
        p.close()
