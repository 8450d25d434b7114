"""Turns cumulative in-kernel histograms into one immutable snapshot per interval.

The kernel keeps cumulative counts; each interval this stage subtracts what it saw last time, so
the sum of `count` over a trace's rows is exactly the number of operations completed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from tracer import abi
from tracer.devices import device_name
from tracer.processes import ProcessTable


class Series(NamedTuple):
    """One histogram series as users name it: the latency table's identifying columns."""

    pid: int
    layer: str
    op: str
    target: str | None  # syscall layer
    device: str | None  # block layers
    attribution: str | None  # block layers


def series_of(key: abi.HistKey) -> Series:
    device = device_name(key.dev) if key.layer in ("block", "block_queue") else None
    return Series(key.pid, key.layer, key.op, key.target, device, key.attribution)


@dataclass(frozen=True)
class Snapshot:
    """What happened in one interval; every sink renders this same object."""

    ts_ns: int  # end of the interval, UTC ns
    interval_ns: int
    latency: list[dict] = field(default_factory=list)  # rows of the `latency` table


class Aggregator:
    def __init__(self, processes: ProcessTable):
        self.processes = processes
        self.prev: dict[bytes, np.ndarray] = {}
        self.totals: dict[Series, np.ndarray] = {}  # whole-trace sums, for the summary
        self.last_ts_ns: int | None = None

    def interval(self, raw: dict[bytes, bytes], ts_ns: int) -> Snapshot:
        """Deltas since the previous call, as latency rows stamped `ts_ns`."""
        rows: list[dict] = []
        for rkey, rval in raw.items():
            cur = abi.decode_hist(rval)
            prev = self.prev.get(rkey)
            delta = cur if prev is None else cur - prev
            if (delta > cur).any():  # the key was recreated since: all of it is new
                delta = cur
            self.prev[rkey] = cur
            if not delta[0].any():
                continue
            series = series_of(abi.decode_hist_key(rkey))
            total = self.totals.get(series)
            self.totals[series] = delta.copy() if total is None else total + delta
            rows.extend(self._rows(series, delta, ts_ns))
        interval_ns = ts_ns - self.last_ts_ns if self.last_ts_ns else 0
        self.last_ts_ns = ts_ns
        return Snapshot(ts_ns, interval_ns, rows)

    def forget(self, raw_keys: list[bytes]) -> None:
        """Drops keys deleted from the kernel map (processes gone)."""
        for k in raw_keys:
            self.prev.pop(k, None)

    def _rows(self, key: Series, delta: np.ndarray, ts_ns: int) -> list[dict]:
        proc = self.processes.get(key.pid)
        comm = proc.comm if proc else ""
        role = proc.role if proc else None
        out = []
        for slot in np.flatnonzero(delta[0]):
            lo, hi = abi.slot_bounds_ns(int(slot))
            out.append({
                "ts": ts_ns, "pid": key.pid, "comm": comm, "role": role, "layer": key.layer,
                "op": key.op, "target": key.target, "device": key.device,
                "attribution": key.attribution, "bucket_lo_ns": lo, "bucket_hi_ns": hi,
                "count": int(delta[0, slot]), "bytes": int(delta[1, slot]),
            })
        return out
