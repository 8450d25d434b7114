"""`iotrace report DIR`: the end-of-run summary, re-rendered from a trace directory."""

from __future__ import annotations

from typing import TextIO

import numpy as np
import pandas as pd

from tracer import abi
from tracer.aggregate import Series
from tracer.api import TraceError, load
from tracer.clock import Clock
from tracer.processes import Process, ProcessTable
from tracer.session import EXIT_USAGE, TraceFailure
from tracer.summary import render_summary


def _text(v) -> str | None:
    return None if pd.isna(v) else str(v)


def totals_from_latency(latency: pd.DataFrame) -> dict[Series, np.ndarray]:
    """Whole-trace histograms per series, summed from the latency rows (bucket_lo_ns -> slot)."""
    totals: dict[Series, np.ndarray] = {}
    for r in latency.itertuples(index=False):
        key = Series(int(r.pid), str(r.layer), str(r.op), _text(r.target), _text(r.device),
                     _text(r.attribution))
        h = totals.setdefault(key, np.zeros((2, abi.MAX_SLOTS), dtype=np.uint64))
        slot = 0 if r.bucket_lo_ns == 0 else int(r.bucket_lo_ns).bit_length() - 1
        h[0, slot] += int(r.count)
        h[1, slot] += int(r.bytes)
    return totals


def report(directory: str, out: TextIO) -> int:
    try:
        trace = load(directory)
        latency, processes = trace.latency, trace.processes
    except TraceError as e:
        raise TraceFailure(str(e), EXIT_USAGE) from None
    procs = ProcessTable(Clock())
    for r in processes.itertuples(index=False):
        procs.by_pid[int(r.pid)] = Process(int(r.pid), int(r.ppid), str(r.comm),
                                           r.role == "main", str(r.cmdline), 0)
    header = f"Trace {directory}: {len(procs.by_pid)} processes, {trace.meta.get('stop_reason')}."
    print(render_summary(totals_from_latency(latency), procs, header), file=out)
    return 0
