"""The `threads` rows' CUDA columns: each thread's driver calls in the interval, from the
cumulative counters that bpf/cuda.bpf.c keeps (tracer.kernel.uprobes.CudaProbes.read).

The calls are grouped as the training loop's split reads them (tracer.core.diagnosis.split):
  gpu_wait_ns      in cuStreamSynchronize, cuCtxSynchronize, cuEventSynchronize: the thread
                   waited for the work queued on its GPU
  device_copy_ns   in the synchronous copies, and in the synchronisations that waited for a
                   large async device-to-host copy (the kernel's "copy_wait": PyTorch's .cpu() and .cuda()
                   copy with the async calls, then synchronise)
  cuda_syncs, cuda_copies  the calls
  cuda_launches    kernel launches, counted in a slice of each interval and scaled to it
                   (LaunchSampler), or all of them (IOTRACE_CUDA_LAUNCHES=1); null: none
                   counted
  copy_dtoh_bytes, copy_htod_bytes, copy_other_bytes  bytes copied by direction (other:
                   device to device, and cuMemcpy's unified addresses, whose direction the
                   call does not say)
A thread without driver calls has them all null.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tracer.core import abi

if TYPE_CHECKING:
    from tracer.kernel.uprobes import CudaProbes

SYNCS = ("stream_sync", "ctx_sync", "event_sync")
COPIES = ("dtoh", "htod", "dtod", "copy")
ASYNC_COPIES = ("dtoh_async", "htod_async", "dtod_async", "copy_async")
CUDA_COLUMNS = ("gpu_wait_ns", "device_copy_ns", "cuda_syncs", "cuda_copies", "cuda_launches",
                "copy_dtoh_bytes", "copy_htod_bytes", "copy_other_bytes")
NO_CUDA: dict[str, int | None] = dict.fromkeys(CUDA_COLUMNS)


def _sums(t: abi.CudaThread) -> tuple[int, ...]:
    """A thread's counters, cumulative, in CUDA_COLUMNS' order."""
    ns, calls, nbytes = t.ns, t.calls, t.bytes
    return (sum(ns[c] for c in SYNCS), sum(ns[c] for c in (*COPIES, "copy_wait")),
            sum(calls[c] for c in (*SYNCS, "copy_wait")),
            sum(calls[c] for c in (*COPIES, *ASYNC_COPIES)), calls["launch"],
            nbytes["dtoh"] + nbytes["dtoh_async"], nbytes["htod"] + nbytes["htod_async"],
            sum(nbytes[c] for c in ("dtod", "copy", "dtod_async", "copy_async")))


class CudaDeltas:
    """Per thread, what its counters were at the last reading: the columns are the deltas."""

    def __init__(self) -> None:
        # the share of the time since the last reading in which cuLaunchKernel was counted
        # (1.0: always; None: not counted, cuda_launches is null): the launches are scaled by it
        self.launch_share: float | None = None
        self._prev: dict[int, tuple[int, tuple[int, ...]]] = {}  # tid -> (pid, sums)

    def columns(self, t: abi.CudaThread | None) -> dict[str, int | None]:
        """Thread `t`'s columns for this interval (NO_CUDA: no driver calls, ever)."""
        if t is None:
            return NO_CUDA
        cur = _sums(t)
        prev = self._prev.get(t.tid)
        if prev is None or prev[0] != t.pid:  # first seen, or its tid reused
            seen = delta = cur
        else:
            # the call in flight is counted up to the reading's clock, taken after the map: a
            # call that ended in between was counted a little long (as the thread times)
            seen = tuple(max(c, p) for c, p in zip(cur, prev[1], strict=True))
            delta = tuple(s - p for s, p in zip(seen, prev[1], strict=True))
        self._prev[t.tid] = (t.pid, seen)
        out: dict[str, int | None] = dict(zip(CUDA_COLUMNS, delta, strict=True))
        share = self.launch_share
        out["cuda_launches"] = None if not share else round(delta[4] / share)
        return out

    def forget(self, tids: Iterable[int]) -> None:
        for tid in tids:
            self._prev.pop(tid, None)


LAUNCH_SHARE = 0.02  # of each interval, kernel launches are counted (LaunchSampler)


class LaunchSampler:
    """Kernel launches, counted during LAUNCH_SHARE of each interval and scaled: a uprobe on
    cuLaunchKernel costs a launch-bound loop (10^5 launches a second) about 5 % of its time
    (docs/benchmarks.md), so the uprobes are attached at the start of each interval and
    detached after its slice; a reading's launch counts are then those of the slices since
    the last reading, and `take` says which share of that time they cover."""

    def __init__(self, interval_s: float, share: float = LAUNCH_SHARE):
        self.interval_s, self.share = interval_s, share
        self.off_at: float | None = None  # monotonic seconds: when the slice under way ends
        self._on_at = 0.0
        self._sampled_s = 0.0  # slices' time since the last reading
        self._read_at: float | None = None  # the last reading

    def start(self, cuda: CudaProbes | None) -> None:
        """An interval starts: the launches are counted from now, for its slice (from when
        the uprobes are in: attaching one resolves its name in the library, milliseconds)."""
        if cuda is None or not cuda.libraries or self.off_at is not None:
            return
        cuda.set_launches(True)
        if cuda.launching:
            self._on_at = time.monotonic()
            self.off_at = self._on_at + self.share * self.interval_s

    def stop_if_due(self, cuda: CudaProbes | None, now: float) -> None:
        if cuda is not None and self.off_at is not None and now >= self.off_at:
            # until the detach starts: it removes the breakpoints first, then waits for the
            # kernel's grace periods (tens of milliseconds, measured)
            self._sampled_s += now - self._on_at
            cuda.set_launches(False)
            self.off_at = None

    def take(self, now: float) -> float | None:
        """The share of the time since the last reading in which launches were counted; None:
        none (no slice, or the first reading)."""
        sampled = self._sampled_s + (now - self._on_at if self.off_at is not None else 0.0)
        if self.off_at is not None:
            self._on_at = now
        self._sampled_s = 0.0
        last, self._read_at = self._read_at, now
        if last is None or now <= last or sampled <= 0:
            return None
        return min(1.0, sampled / (now - last))
