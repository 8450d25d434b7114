"""The end-of-run summary: per process and layer, biolatency-style histograms with p50/p99."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tracer.aggregate import Series
from tracer.histogram import format_bytes, format_ns, percentile_ns, render
from tracer.processes import ProcessTable

HISTOGRAM_MIN_OPS = 10  # fewer operations get their one summary line only
LAYER_ORDER = {"syscall": 0, "block_queue": 1, "block": 2}


def _what(key: Series) -> str:
    if key.layer == "syscall":
        return f"syscall {key.op} ({key.target})"
    where = key.device
    label = "block queue" if key.layer == "block_queue" else "block"
    return f"{label} {key.op} on {where} ({key.attribution})"


def render_summary(totals: Mapping[Series, np.ndarray], processes: ProcessTable,
                   header: str) -> str:
    """Text for the terminal (and `iotrace report`): one block per process, one histogram per
    layer/op/target, most operations first within a process."""
    lines = [header]
    by_pid: dict[int, list[tuple[Series, np.ndarray]]] = {}
    for key, h in totals.items():
        by_pid.setdefault(key.pid, []).append((key, h))
    if not by_pid:
        lines.append("")
        lines.append("No I/O was traced (the targets did no read/write/fsync syscalls and no block I/O).")
    for pid in sorted(by_pid):
        proc = processes.get(pid)
        name = f"{proc.comm} ({proc.role})" if proc else "?"
        parent = f", parent {proc.ppid}" if proc and not proc.is_target else ""
        lines.append("")
        lines.append(f"pid {pid} {name}{parent}")
        entries = sorted(by_pid[pid], key=lambda kh: (LAYER_ORDER.get(kh[0].layer, 9),
                                                      -int(kh[1][0].sum())))
        for key, h in entries:
            counts = [int(c) for c in h[0]]
            n, nbytes = sum(counts), int(h[1].sum())
            lines.append(
                f"  {_what(key)}: {n} ops, {format_bytes(nbytes)}, "
                f"p50 {format_ns(percentile_ns(counts, 50))}, "
                f"p99 {format_ns(percentile_ns(counts, 99))}"
            )
            if n >= HISTOGRAM_MIN_OPS:
                lines.extend("    " + row for row in render(counts))
    return "\n".join(lines)
