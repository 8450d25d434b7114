"""One pure step per interval: what the session read -> the `Interval` every sink writes.

The session does the reading (the kernel's maps, /proc, NVML, iotrace's own cost); this step only
computes: the snapshot's rows (Aggregator), the training loop's states and the verdicts
(Diagnosis), the GPU idle spans and what the loop did in them, and, at the end of the run, the
whole run's verdicts and meta.json's last fields. It holds the state those need across intervals,
and does no I/O.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import TYPE_CHECKING

from tracer.core.diagnosis.feed import TABLES, feed, interval_input
from tracer.core.interval import Interval
from tracer.gpu.idle import add_gpu_evidence, confirm_host_bound

if TYPE_CHECKING:
    from collections.abc import Callable

    from tracer.core.diagnosis import Diagnosis
    from tracer.core.diagnosis.feed import Known
    from tracer.core.diagnosis.split import SplitState
    from tracer.core.selfcost import SelfCost
    from tracer.gpu.nvml import GpuMonitor
    from tracer.live.aggregate import Aggregator, Reading

FINDINGS_EVERY_S = 10.0  # during a run, verdicts over the last window are written this often
GPU_ROWS_KEPT = 500_000  # NVML samples kept in memory for the findings' GPU evidence (~1 day, 1 GPU)


class Step:
    def __init__(self, aggregator: Aggregator, diagnosis: Diagnosis,
                 gpu: GpuMonitor | None = None):
        self.aggregator, self.diagnosis, self.gpu = aggregator, diagnosis, gpu
        self._last_findings_ns = 0
        self._start_ns: int | None = None  # the first interval's start
        self.gpu_rows: deque[dict] = deque(maxlen=GPU_ROWS_KEPT)
        self.gpu_idle: list[dict] = []

    @property
    def _startup(self) -> SplitState | None:
        """What ends each loop's start-up, for the GPU's idle spans; None when attached."""
        return self.diagnosis.state if self.diagnosis.startup else None

    def interval(self, reading: Reading, ts_ns: int, *, devices: list[dict], system: dict | None,
                 gpu_rows: list[dict], cost: SelfCost, known: Known,
                 processes: list[dict] | None = None, final: bool = False,
                 memory: list[dict] | None = None,
                 fuse: Callable[[int, list[dict]], list[dict]] | None = None,
                 gpu_named: dict[int, str] | None = None,
                 stacks: list[dict] | None = None) -> Interval:
        """One interval ending at `ts_ns` (UTC ns): the maps' `reading`, the host's `devices`
        and `system` rows, the mains' `memory` rows, the GPUs' samples, iotrace's cost so far,
        the processes known (`known`: what says each one's training loop, rank and peers), the
        `processes` rows to write (None: none this interval), and the GPU each training loop's
        environment gives it (`gpu_named`), the Python stacks sampled since the last interval
        (`stacks`' rows, stamped here with its end).
        `fuse(ts_ns, files)`: the `fuse` rows of the FUSE mounts read through, given the
        interval's `files` rows (the session's sampler: tracer.live.fuse, which reads /proc).
        `final`: the run's last interval, which also gets the whole run's verdicts."""
        snap = self.aggregator.interval(reading, ts_ns, devices=devices, system=system,
                                        gpu=gpu_rows, cost=cost, memory=memory)
        if fuse is not None and (rows := fuse(snap.ts_ns, snap.files)):
            snap = dataclasses.replace(snap, fuse=rows)
        if stacks:
            for r in stacks:
                r["ts"] = snap.ts_ns
            snap = dataclasses.replace(snap, stacks=stacks)
        # the same input as a replay of the trace builds for this interval (tracer.report)
        if self._start_ns is None:
            self._start_ns = snap.ts_ns - snap.interval_ns
        inp = interval_input(snap.ts_ns, snap.interval_ns,
                             {t: getattr(snap, t) for t in TABLES}, known)
        loop = feed(self.diagnosis, inp)
        findings = self.diagnosis.findings(self.diagnosis.thresholds.window_s)
        rows: list[dict] = []
        if not self._last_findings_ns:  # the first verdicts once FINDINGS_EVERY_S have passed,
            self._last_findings_ns = snap.ts_ns - snap.interval_ns  # not after one interval
        if not final and snap.ts_ns - self._last_findings_ns >= FINDINGS_EVERY_S * 1e9:
            self._last_findings_ns = snap.ts_ns
            rows = [f.row(snap.ts_ns) for f in findings]
        idle: list[dict] = []
        notes: list[str] = []
        if self.gpu:
            idle = self.gpu.idle(snap.ts_ns, gpu_rows, loop, inp.owners, gpu_named, self._startup)
            self.gpu_rows.extend(gpu_rows)
            self.gpu_idle.extend(idle)
            notes = self.gpu.take_notes()
        run_findings: list = []
        meta: dict = {}
        if final:
            run_findings = self.diagnosis.findings()
            if self.gpu:
                last = self.gpu.finish(self._startup)  # the spans still open, or held
                idle = idle + last
                self.gpu_idle.extend(last)
                add_gpu_evidence(run_findings, self.gpu_idle, list(self.gpu_rows))
                meta["gpu"] = self.gpu.meta()
            else:  # no GPU samples: nothing says the GPU waited (as a replay decides)
                confirm_host_bound(run_findings, None)
            rows = [f.row(snap.ts_ns) for f in run_findings]
            assert snap.cost is not None
            # where the first interval began: a replay of the trace gives it the same length
            meta.update(events_lost=snap.cost.events_lost, self_cost=snap.cost.meta(),
                        intervals_start_ns=self._start_ns)
        return Interval(snap, loop, findings, rows, idle, processes, cost.events_lost, notes,
                        final, run_findings, meta)
