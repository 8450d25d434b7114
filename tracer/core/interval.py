"""What one interval of a run produced, as every sink receives it (tracer.sinks.Sink).

Built once per interval by the step (tracer.live.step) from what the session read; sinks only
read it. The last interval of a run (`final`) also carries the run's verdicts and what meta.json
gets at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracer.core.diagnosis import Finding
    from tracer.core.model import FindingRow, GpuIdleRow, LoopRow, ProcessRow, Snapshot


@dataclass(frozen=True)
class Interval:
    snapshot: Snapshot  # the tables' rows of the interval, the host's numbers, iotrace's cost
    loop: list[LoopRow] = field(default_factory=list)  # rows of `loop`, one per training process
    # The verdicts as they stand (over the last window, most severe first): the live sinks'.
    findings: list[Finding] = field(default_factory=list)
    findings_rows: list[FindingRow] = field(default_factory=list)  # rows of `findings` due now
    gpu_idle: list[GpuIdleRow] = field(default_factory=list)  # rows of `gpu_idle`: spans that ended
    # Rows of `processes` for each process new or changed since its last row; None when not
    # taken this interval. Taken when a segment roll is due (every segment carries them) and
    # at the end of the run.
    processes: list[ProcessRow] | None = None
    events_lost: int = 0  # ring-buffer records lost so far (cumulative)
    notes: list[str] = field(default_factory=list)  # one-line notes for the user (GPU lost)
    final: bool = False  # the last, partial, interval of the run
    final_findings: list[Finding] = field(default_factory=list)  # final: the whole run's
    meta: dict = field(default_factory=dict)  # final: meta.json's fields from the run's end
