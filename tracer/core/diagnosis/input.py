"""The diagnosis's one input per interval: what a live step and a replay of a trace both give it.

Live, the step builds it from the interval's snapshot and the process table; offline, a replay
builds it from the trace directory's rows. Both go through the same builder, so a trace and the
run that wrote it reach the same findings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tracer.core.model import (
    CpuWaitRow,
    DeviceRow,
    DeviceUserRow,
    EventRow,
    FileRow,
    FuseRow,
    GpuRow,
    LatencyRow,
    MemoryRow,
    StackRow,
    ThreadRow,
)


@dataclass(frozen=True)
class Rank:
    """A process's place in a distributed job (its environment's RANK and WORLD_SIZE)."""

    rank: int
    world_size: int
    job: int  # the pid that started the job's ranks (torchrun's agent)


@dataclass(frozen=True)
class IntervalInput:
    """One interval, as the diagnosis is told it: the rows every table has for it, and what is
    known of the processes at its end."""

    ts_ns: int  # the interval's end, UTC ns
    interval_ns: int
    threads: list[ThreadRow] = field(default_factory=list)
    files: list[FileRow] = field(default_factory=list)
    latency: list[LatencyRow] = field(default_factory=list)
    devices: list[DeviceRow] = field(default_factory=list)
    memory: list[MemoryRow] = field(default_factory=list)  # each training loop's memory cgroup
    device_users: list[DeviceUserRow] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)  # slow operations
    gpu: list[GpuRow] = field(default_factory=list)  # NVML samples
    owners: dict[int, int] = field(default_factory=dict)  # traced pid -> its training loop's pid
    ranks: dict[int, Rank] = field(default_factory=dict)  # rank pid -> its place in its job
    peers: dict[int, list[str]] = field(default_factory=dict)  # loop pid -> TCP peers so far
    # who had the CPUs the traced threads waited for
    cpu_waits: list[CpuWaitRow] = field(default_factory=list)
    fuse: list[FuseRow] = field(default_factory=list)  # FUSE mounts read through, their daemons
    # Python stacks sampled from outside the processes, a row per frame (tracer.core.stacks)
    stacks: list[StackRow] = field(default_factory=list)
    # a replay's interval that leaves the window before the last one (tracer.report._Carried):
    # only what the split's state carries over matters, its evidence would be dropped unread
    carried: bool = False
