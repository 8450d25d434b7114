#!/usr/bin/env python3
"""The CUDA uprobes on a real driver (run by scripts/cuda_probe_check.sh on a GPU host, as root).

Loads iotrace's object (nothing attached but the CUDA uprobes), starts a tiny torch program,
tracks it, attaches the driver library it maps (tracer/kernel/uprobes.py), and while it runs a
known schedule (torch.cuda.synchronize() a few times, a .cpu() of a DTOH_FLOATS float32
tensor, a .cuda() of a HTOD_FLOATS one) reads the per-thread counters before and after. Prints
what each thread did per call kind, then PASS when the copies' bytes are the tensors' sizes and
some synchronisation was seen, FAIL otherwise (with why).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tracer.core import abi
from tracer.kernel.probes import Probes
from tracer.kernel.uprobes import CudaProbes

DTOH_FLOATS, HTOD_FLOATS, SYNCS = 1 << 20, 3 << 18, 3  # 4 MiB down, 3 MiB up
SYNC_CALLS = ("stream_sync", "ctx_sync", "event_sync", "copy_wait")  # copy_wait: after a large copy
CHILD = f"""
import sys, torch
torch.ones(1, device="cuda"); torch.cuda.synchronize()   # the driver loaded, the context made
a = torch.arange({DTOH_FLOATS}, dtype=torch.float32, device="cuda")
h = torch.ones({HTOD_FLOATS}, dtype=torch.float32)
torch.cuda.synchronize()
print("ready", flush=True); sys.stdin.readline()
for _ in range({SYNCS}):
    torch.cuda.synchronize()
b = a.cpu()
c = h.cuda()
torch.cuda.synchronize()
print("done", float(b[-1]), float(c.sum()), flush=True); sys.stdin.readline()
"""


def totals(threads: dict[int, abi.CudaThread], pid: int) -> dict[int, dict[str, tuple[int, int, int]]]:
    """{tid: {call: (calls, ns, bytes)}} of process `pid`'s threads."""
    return {tid: {c: (t.calls[c], t.ns[c], t.bytes[c]) for c in abi.CUDA_CALLS.values()}
            for tid, t in threads.items() if t.pid == pid}


def window(before, after) -> dict[int, dict[str, tuple[int, int, int]]]:
    """What each thread did between two totals() (calls kinds with none left out)."""
    out = {}
    for tid, calls in after.items():
        was = before.get(tid, {})
        diff = {c: tuple(x - y for x, y in zip(v, was.get(c, (0, 0, 0)), strict=True))
                for c, v in calls.items()}
        diff = {c: v for c, v in diff.items() if v[0] or v[2]}
        if diff:
            out[tid] = diff
    return out


def verdict(per_thread: dict[int, dict[str, tuple[int, int, int]]]) -> list[str]:
    """Why it failed; empty when it passed."""
    def total(calls, i):
        return sum(v.get(c, (0, 0, 0))[i] for v in per_thread.values() for c in calls)

    why = []
    if total(SYNC_CALLS, 0) == 0:
        why.append("no synchronising call was counted")
    down, up = total(("dtoh", "dtoh_async"), 2), total(("htod", "htod_async"), 2)
    copied = total(("dtoh", "dtoh_async", "htod", "htod_async", "dtod", "dtod_async", "copy",
                    "copy_async"), 2)
    # the .item() copies its 4-byte scalar down too (measured on the H200: 4194308 bytes)
    want_down, want_up = 4 * DTOH_FLOATS + 4, 4 * HTOD_FLOATS
    if (down, up) != (want_down, want_up) and copied != want_down + want_up:
        why.append(f"copies: {down} bytes down, {up} up, {copied} in all; expected {want_down} "
                   f"down and {want_up} up")
    return why


def main() -> int:
    probes = Probes(map_sizes={})
    probes.load()
    cuda = CudaProbes(probes.loader.obj, note=lambda s: print("note:", s))
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        probes.loader.track(child.pid)
        line = child.stdout.readline()
        if line.split()[:1] != ["ready"]:
            print(f"FAIL the torch program did not start: {line!r}")
            return 1
        t0 = time.monotonic()
        libs = cuda.scan([child.pid])
        print(f"attached in {time.monotonic() - t0:.2f} s:",
              *(f"{lib.path} (dev {lib.dev:#x} ino {lib.ino}): {len(lib.attached)} names, "
                f"missing {lib.missing or 'none'}" for lib in libs), sep="\n  ")
        before = totals(cuda.read(), child.pid)
        child.stdin.write("\n")
        child.stdin.flush()
        print("child:", child.stdout.readline().strip())
        per_thread = window(before, totals(cuda.read(), child.pid))
        for tid, calls in sorted(per_thread.items()):
            for c, (n, ns, nbytes) in sorted(calls.items()):
                print(f"  tid {tid} {c:11s} calls {n:4d}  ns {ns:12d}  bytes {nbytes}")
        child.stdin.write("\n")
        child.stdin.flush()
        child.wait(timeout=20)
        why = [] if libs else ["no driver library found in the child's maps"]
        why += verdict(per_thread)
        print("PASS" if not why else "FAIL " + "; ".join(why))
        return 1 if why else 0
    finally:
        if child.poll() is None:
            child.kill()
        cuda.close()
        probes.close()


if __name__ == "__main__":
    sys.exit(main())
