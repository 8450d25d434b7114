"""The `threads` rows' CUDA columns: each thread's driver calls in the interval, from the
cumulative counters that bpf/cuda.bpf.c keeps (tracer.kernel.uprobes.CudaProbes.read).

The calls are grouped as the training loop's split reads them (tracer.core.diagnosis.split):
  gpu_wait_ns      in cuStreamSynchronize, cuCtxSynchronize, cuEventSynchronize: the thread
                   waited for the work queued on its GPU
  device_copy_ns   in the synchronous copies, and in the synchronisations that waited for a
                   large async copy (the kernel's "copy_wait": PyTorch's .cpu() and .cuda()
                   copy with the async calls, then synchronise)
  cuda_syncs, cuda_copies, cuda_launches  the calls (launches: null unless counted)
  copy_dtoh_bytes, copy_htod_bytes, copy_other_bytes  bytes copied by direction (other:
                   device to device, and cuMemcpy's unified addresses, whose direction the
                   call does not say)
A thread without driver calls has them all null.
"""

from __future__ import annotations

from collections.abc import Iterable

from tracer.core import abi

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

    def __init__(self, launches: bool = False):
        self.launches = launches  # cuLaunchKernel counted (else cuda_launches is null)
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
        if not self.launches:
            out["cuda_launches"] = None
        return out

    def forget(self, tids: Iterable[int]) -> None:
        for tid in tids:
            self._prev.pop(tid, None)
