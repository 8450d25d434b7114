"""iotrace's own cost while it traces: the BPF programs' run counts (kernel statistics, on for
a share of each interval with --bpf-stats sampled), the tracer process's CPU and memory, and
what the kernel side dropped or lost."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracer.core.selfcost import STATS_SHARE, ProgramCost, SelfCost, TracerMeter
from tracer.live.procfs import disks_in_flight

if TYPE_CHECKING:
    from tracer.kernel.probes import Probes


class CostReader:
    def __init__(self, probes: Probes, mode: str, interval_s: float,
                 unseen_each_interval: bool = False) -> None:
        """`unseen_each_interval`: count the block requests that ended unseen and whose records
        are still held at every reading, not only at the end (for /metrics, whose block counts
        plus those are then exact at every scrape)."""
        self.probes, self.mode, self.interval_s = probes, mode, interval_s
        self.unseen_each_interval = unseen_each_interval
        self.unavailable: str | None = None  # why BPF programs' costs are not counted
        self.off_at: float | None = None  # --bpf-stats sampled: when to stop counting
        self.meter: TracerMeter | None = None  # the tracer's own CPU, from when tracing starts

    def start_stats(self) -> None:
        """Once the programs are loaded: can the kernel count their runs?"""
        if self.mode == "off":
            self.unavailable = "not counted (--bpf-stats off)"
        else:
            self.unavailable = self.probes.stats.enable()
            if self.mode == "sampled":
                self.probes.stats.pause()  # it could be turned on: the loop samples from here

    def start_meter(self) -> None:
        """The tracer's own CPU from here: what came before is start-up, not the steady cost
        of tracing."""
        self.meter = TracerMeter()

    def sample(self, now: float) -> None:
        """--bpf-stats sampled: an interval has started and its reading is done; the kernel
        counts the programs' runs for STATS_SHARE of an interval from now (pause_if_due turns
        the counting off again)."""
        if self.mode != "sampled" or self.unavailable is not None:
            return
        self.probes.stats.enable()
        self.off_at = now + STATS_SHARE * self.interval_s

    def pause_if_due(self, now: float) -> None:
        if self.off_at is not None and now >= self.off_at:
            self.probes.stats.pause()
            self.off_at = None

    def read(self, final: bool = False) -> SelfCost:
        """iotrace's own cost so far, where a new interval starts for the CPU share; `final`: the
        last reading, where none starts and the requests left in flight that ended unseen are
        counted too (waiting up to LEFTOVER_WAIT_S for their disks to be idle). With
        `unseen_each_interval` every reading counts those too, from one look at the disks: a
        request whose end no program saw is then counted by the interval after it ended, not
        only once its address is reused (which an idle disk may never do) or at the stop."""
        assert self.meter is not None
        stats, maps = self.probes.stats, self.probes.maps
        programs = ()
        if self.unavailable is None:
            programs = tuple(ProgramCost(obj, name, sec, st.run_cnt, st.run_time_ns,
                                         st.recursion_misses)
                             for obj, name, sec, st in stats.program_stats())
        if final:
            unseen = maps.block_unseen(disks_in_flight)
        elif self.unseen_each_interval:
            unseen = maps.block_unseen(disks_in_flight, wait_s=0)
        else:
            unseen = maps.block_unseen()
        return SelfCost(programs, self.probes.ring.lost(), maps.map_full_drops(),
                        self.meter.read(not final), self.unavailable,
                        stats.before, dict(self.probes.loader.max_entries),
                        stats.seconds, self.mode, *unseen)
