"""The names the trace's columns take (roles, loop states, finding kinds, latency layers), and
the line that says tracing has started.

One home for every value that more than one stage spells out (the diagnosis, the GPU idle
attribution, the sinks, the renderers), so that a new state or kind is added in one place. The
tables' columns themselves are in `tracer.tracedir.schema`; how processes get their role is
`tracer.core.roles`. README.md ("The trace directory") and docs/diagnosis.md document them.
"""

from __future__ import annotations

from collections.abc import Mapping

# `role` of processes (and of every row about one)
MAIN = "main"  # a process the user asked to trace
RANK = "rank"  # a rank of a distributed job (RANK and WORLD_SIZE in its environment)
AGENT = "agent"  # torchrun's elastic agent (pt_elastic): starts the ranks, trains nothing
DATALOADER_WORKER = "dataloader_worker"  # a descendant named pt_data_worker
CHILD = "child"  # any other descendant
ROLES = (MAIN, RANK, AGENT, DATALOADER_WORKER, CHILD)
"""Roles in display order; rows whose role is unknown (None) show as ``?``."""
LOOP_ROLES = (MAIN, RANK)
"""Roles whose main thread is a training loop (a rank's loop under torchrun, DDP)."""

# `loop.state`, the `loop.<state>_ns` columns and the `gpu_idle.<state>_frac` ones, in this order
LOOP_STATES = ("data_wait_io", "data_wait_cpu", "data_wait_network", "sync_loading", "sync_writes",
               "checkpoint", "collective_wait", "gpu_wait", "device_copy", "compute", "other")
# The states a trace of schema version 2 lacks (null columns: its `compute` holds them)
CUDA_STATES = ("gpu_wait", "device_copy")


def shown_states(ns: Mapping[str, float]) -> tuple[str, ...]:
    """The loop states a summary shows, given each one's time: the CUDA states only where the
    loop had them, so that a job without libcuda, or a trace from before them, reads as before."""
    return tuple(s for s in LOOP_STATES if s not in CUDA_STATES or (ns.get(s) or 0) > 0)

# `gpu_idle.cause`: a loop state, or these
GPU_STARTUP = "startup"  # before the loop's start-up ended (launch mode): imports, CUDA init, ...
GPU_UNKNOWN = "unknown"  # no loop interval overlaps the part, or its GPU has no known process
GPU_IDLE_CAUSES = (GPU_STARTUP, *LOOP_STATES, GPU_UNKNOWN)

# `findings.kind`: the verdicts that blame I/O, then the others
IO_KINDS = ("sync_loading", "dataloader_io_bound", "dataloader_network_bound", "sync_writes",
            "checkpoint_stall", "device_saturated", "device_contended", "small_files",
            "slow_filesystem", "dataset_exceeds_cache")
FINDING_KINDS = (*IO_KINDS, "straggler_rank", "dataloader_cpu_bound", "host_bound", "cold_cache",
                 "not_io_bound", "cpu_contended", "memory_pressure")

LATENCY_LAYERS = ("syscall", "block_queue", "block")
"""Layers whose histograms hold latencies (the pagecache layer counts missed pages)."""

READY_PREFIX = "Tracing I/O of"
"""How the line iotrace prints on stderr once its programs are attached begins (`tracer.attach`
waits for it)."""
