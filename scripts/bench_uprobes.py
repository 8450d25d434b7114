#!/usr/bin/env python3
"""What a uprobe on the CUDA driver library costs per call: bpf/cuda.bpf.c's pair (entry and
return) and its entry alone (what counting cuLaunchKernel costs), for a traced process and for
one that is not (its calls trap all the same: a uprobe belongs to the file).

    .venv/bin/python scripts/bench_uprobes.py [--rounds 7] [--calls 200000] [--cpu 1]

Run as root from the repository after `make build`. It builds the stand-in driver of
tests/test_kernel_cuda.py (tests/workloads/fake_libcuda.c, tests/workloads/cuda_calls.c) and
times a tight loop of calls that return at once: cuCtxSynchronize (probed at entry and return)
and cuLaunchKernel (entry only), each call timed by the loop itself with CLOCK_MONOTONIC. Each
round runs the loop bare, then with the probes attached (tracer/kernel/uprobes.py) and the
process tracked, then attached and not tracked. A figure is the median over rounds of (probed
- bare) ns per call; the spread is the range over rounds. Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tracer.kernel.probes import Probes  # noqa: E402
from tracer.kernel.uprobes import CudaProbes  # noqa: E402

WORKLOADS = REPO / "tests/workloads"
LIB = WORKLOADS / "bin/fake_cuda/libcuda.so.1"
CALLER = WORKLOADS / "bin/cuda_calls"


def build() -> None:
    for out, src, flags in ((LIB, "fake_libcuda.c", ["-shared", "-fPIC"]),
                            (CALLER, "cuda_calls.c", ["-pthread"])):
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cc", "-O2", "-Wall", *flags, "-o", str(out), str(WORKLOADS / src)],
                       check=True)


def run_loop(call: str, n: int, cpu: int | None, before_go=None) -> float:
    """ns per call of `n` calls of `call` (cuda_calls' own measure); `before_go(pid)` runs
    once the library is mapped, before the first call."""
    cmd = [str(CALLER), str(LIB), "open", "wait", f"{call}:{n}:0:0"]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pid = int(proc.stdout.readline().split()[1])
    assert proc.stdout.readline().strip() == "waiting"
    if before_go is not None:
        before_go(pid)
    proc.stdin.write("\n")
    proc.stdin.flush()
    line = proc.stdout.readline().split()
    proc.wait()
    fields = dict(kv.split("=") for kv in line[1:])
    return int(fields["ns"]) / int(fields["n"])


def one_round(probes: Probes, call: str, n: int, cpu: int | None) -> tuple[float, float]:
    """(traced - bare, untraced - bare) ns per call."""
    bare = run_loop(call, n, cpu)
    cuda = CudaProbes(probes.loader.obj, launches=True)
    pids: list[int] = []
    try:
        def traced(pid: int) -> None:
            probes.loader.track(pid)
            cuda.scan([pid])
            pids.append(pid)

        hooked = run_loop(call, n, cpu, traced)
        other = run_loop(call, n, cpu, lambda pid: cuda.scan([pid]))
        threads = cuda.read()
        counted = sum(t.calls[call] for t in threads.values() if t.pid in pids)
        assert counted == n, f"{call}: the probes counted {counted} calls of {n}"
        assert all(t.pid in pids for t in threads.values()), "an untraced process was counted"
        cuda.delete_threads(threads)
    finally:
        cuda.close()
    return hooked - bare, other - bare


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--cpu", type=int, default=None, help="pin the loop to this CPU")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_uprobes: needs root (loads BPF programs)")
    build()
    probes = Probes(map_sizes={})
    probes.load()  # nothing else attached: the loop's cost is the uprobes' alone
    try:
        for call, what in (("ctx_sync", "entry + return (cuCtxSynchronize)"),
                           ("launch", "entry only (cuLaunchKernel)")):
            rounds = [one_round(probes, call, args.calls, args.cpu) for _ in range(args.rounds)]
            for i, who in ((0, "traced"), (1, "not traced")):
                d = [r[i] for r in rounds]
                print(f"{what}, {who}: +{statistics.median(d):.0f} ns/call "
                      f"(range {min(d):.0f}..{max(d):.0f}, {args.rounds} rounds of {args.calls})")
    finally:
        probes.close()


if __name__ == "__main__":
    main()
