"""Keeps the kernel's maps to what is still traced: the entries of exited processes are deleted
an interval after their exit (their last counts are in that interval's reading). Per-file
counters need nothing: every interval takes them all out of the kernel."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracer.core import abi

if TYPE_CHECKING:
    from tracer.kernel.probes import Probes
    from tracer.live.aggregate import Aggregator, Reading
    from tracer.live.processes import ProcessTable


class Forgetter:
    def __init__(self, probes: Probes, processes: ProcessTable):
        self.probes, self.processes = probes, processes
        self._next: set[int] = set()  # exited by the last reading: forgotten after this one

    def after(self, reading: Reading, aggregator: Aggregator) -> None:
        """After the sinks wrote `reading`'s interval."""
        if self._next:
            dead = self._next
            stale = [k for k in reading.hists if abi.hist_key_tgid(k) in dead]
            stale_tids = [tid for tid, raw in reading.threads.items()
                          if abi.thread_time_tgid(raw) in dead]
            # a gone process's waits, and the waits others had behind it (a loop's behind the
            # workers of an epoch before): neither counts again
            stale_waits = [k for k in reading.cpu_waits
                           if not dead.isdisjoint(abi.cpu_wait_key_pids(k))]
            self.probes.maps.delete_hists(stale)
            self.probes.maps.delete_threads(stale_tids)
            self.probes.maps.delete_cpu_waits(stale_waits)
            if self.probes.cuda is not None:
                cuda_tids = [tid for tid, t in reading.cuda.items() if t.pid in dead]
                self.probes.cuda.delete_threads(cuda_tids)
                self.probes.cuda.forget(dead)
                stale_tids += [tid for tid in cuda_tids if tid not in reading.threads]
            aggregator.forget(stale, stale_tids, stale_waits)
            self.probes.loader.forget_pidfds(dead)
            for pid in dead:
                self.processes.by_pid[pid].forgotten = True
        self._next = {p.pid for p in self.processes.exited()}
