"""What the diagnosis gives: a finding, a loop's states in one interval, a rank's loop.

The data only: the rules (rules/) make findings, the words (words.py) say them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tracer.core.diagnosis.words import ADVICE
from tracer.core.model import FindingRow, LoopRow
from tracer.core.vocab import FINDING_KINDS, LOOP_STATES

STATES = LOOP_STATES  # the loop table's states, by the diagnosis's name for them
KINDS = FINDING_KINDS


@dataclass
class Finding:
    kind: str
    severity: int  # 0-100
    pid: int | None
    summary: str
    evidence: dict
    start_ns: int = 0
    end_ns: int = 0
    rank: int | None = None  # the rank of `pid` in a distributed job

    @property
    def advice(self) -> str:
        return ADVICE[self.kind]

    def row(self, ts_ns: int) -> FindingRow:
        return {"ts": ts_ns, "start": self.start_ns, "end": self.end_ns, "kind": self.kind,
                "severity": self.severity, "pid": self.pid, "rank": self.rank,
                "summary": self.summary,
                "evidence": json.dumps(self.evidence, sort_keys=True), "advice": self.advice}


@dataclass
class RankLoop:
    """A rank's loop over a span of a trace (`Diagnosis.rank_loops`)."""

    rank: int
    world: int
    pids: list[int]  # its processes: one, or one per attempt when the agent restarted it
    ns: dict[str, int]  # its training time by state
    pid_ns: dict[int, int]  # each process's training time


@dataclass(slots=True)
class LoopInterval:
    """A training loop's time in one interval, by state (its `loop` row)."""

    ts_ns: int
    pid: int
    interval_ns: int
    ns: dict[str, int]  # by STATES
    rank: int | None = None  # the pid's rank in a distributed job

    def row(self) -> LoopRow:
        state = max(STATES, key=lambda s: self.ns[s]) if any(self.ns.values()) else "other"
        return {"ts": self.ts_ns, "pid": self.pid, "rank": self.rank,
                "interval_ns": self.interval_ns, **{f"{s}_ns": self.ns[s] for s in STATES},
                "state": state}


def severity(share: float) -> int:
    """A loop finding's severity: the share of the loop's time it explains, in percent."""
    return max(1, min(100, round(100 * share)))
