"""Per-interval system, device and process numbers as CSV, like `dstat --output FILE` (--csv FILE).

One header line, then one row per interval, written and flushed as each interval ends (a killed
tracer leaves every finished row). Columns, in this order:

time                    end of the interval, UTC, ISO 8601 with milliseconds (2023-11-14T22:13:21.000Z)
interval_s              length of the interval, seconds
cpu_usr_pct, cpu_sys_pct, cpu_idl_pct, cpu_wai_pct
                        dstat's cpu columns, percent (the `system` table, tracer.live.procfs)
mem_used_bytes, mem_cache_bytes
                        dstat's memory used and page cache, bytes at the end of the interval
net_recv_bytes_s, net_send_bytes_s
                        all interfaces but lo, bonds and VLANs, bytes per second
dsk_read_bytes_s, dsk_writ_bytes_s
                        whole disks (stacked dm/md left out), bytes per second
<dev>_r_s, <dev>_w_s, <dev>_rkb_s, <dev>_wkb_s, <dev>_r_await_ms, <dev>_w_await_ms,
<dev>_aqu_sz, <dev>_util_pct
                        `iostat -x` for each disk of the first interval that has any (sorted by
                        name; kB is 1024 bytes); a disk that appears later is not added (the
                        header is written once), one that disappears leaves its cells empty
<role>_procs, <role>_read_bytes_s, <role>_write_bytes_s, <role>_ops_s, <role>_read_p99_ns,
<role>_iowait_pct
                        for each role, main, rank, agent, dataloader_worker and child, over its
                        processes of the interval: how many did anything, file read/write bytes through
                        syscalls per second, file syscalls of any op per second, the p99 of the
                        file read syscalls (log2 histogram, interpolated; empty without reads),
                        and the mean over its processes of the time blocked on I/O (threads' D
                        state, percent of the interval, capped at 100 per process); the
                        definitions are tracer.ui.stats's
loop_data_wait_io_pct, loop_data_wait_cpu_pct, loop_data_wait_network_pct,
loop_sync_loading_pct, loop_sync_writes_pct, loop_checkpoint_pct, loop_collective_wait_pct,
loop_gpu_wait_pct, loop_device_copy_pct, loop_compute_pct, loop_other_pct
                        the training loop's time by state, percent, over the main processes
                        and ranks (the `loop` rows of the interval); empty when no loop ran

Numbers are written with three decimals, counts and nanoseconds as integers, missing values as
empty cells.
"""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

from tracer.core.histogram import percentile_ns
from tracer.core.vocab import LOOP_STATES, ROLES
from tracer.ui import stats

if TYPE_CHECKING:
    from tracer.core.interval import Interval

SYSTEM_COLUMNS = (  # (csv column, `system` row key)
    ("cpu_usr_pct", "cpu_user_pct"), ("cpu_sys_pct", "cpu_sys_pct"),
    ("cpu_idl_pct", "cpu_idle_pct"), ("cpu_wai_pct", "cpu_iowait_pct"),
    ("mem_used_bytes", "mem_used_bytes"), ("mem_cache_bytes", "mem_cached_bytes"),
    ("net_recv_bytes_s", "net_rx_bytes_s"), ("net_send_bytes_s", "net_tx_bytes_s"),
    ("dsk_read_bytes_s", "disk_read_bytes_s"), ("dsk_writ_bytes_s", "disk_write_bytes_s"),
)
DEVICE_COLUMNS = ("r_s", "w_s", "rkb_s", "wkb_s", "r_await_ms", "w_await_ms", "aqu_sz",
                  "util_pct")
ROLE_COLUMNS = ("procs", "read_bytes_s", "write_bytes_s", "ops_s", "read_p99_ns", "iowait_pct")


def _num(v: float | None) -> str:
    if v is None:
        return ""
    if isinstance(v, int):
        return str(v)
    return f"{v:.3f}"


def _utc(ts_ns: int) -> str:
    t = dt.datetime.fromtimestamp(ts_ns // 1_000_000_000, dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + f".{ts_ns % 1_000_000_000 // 1_000_000:03d}Z"


class CsvSink:
    """Writes one CSV row per interval to `path` (see the module docstring for the columns).
    A context manager; `close` is safe to call twice."""

    def __init__(self, path: str | Path, interval_s: float = 1.0) -> None:
        self.path = Path(path)
        self.interval_s = interval_s  # stands in for the first snapshot's (it has none)
        self._file = open(self.path, "w", newline="")  # noqa: SIM115 (closed by close())
        self._writer = csv.writer(self._file)
        self.devices: list[str] | None = None
        self.closed = False

    def header(self) -> list[str]:
        cols = ["time", "interval_s", *(c for c, _ in SYSTEM_COLUMNS)]
        cols += [f"{d}_{c}" for d in self.devices or () for c in DEVICE_COLUMNS]
        cols += [f"{r}_{c}" for r in ROLES for c in ROLE_COLUMNS]
        cols += [f"loop_{s}_pct" for s in LOOP_STATES]
        return cols

    def write(self, interval: Interval) -> None:
        """One interval: its snapshot's numbers and its `loop` rows."""
        if self.closed:
            raise ValueError("CsvSink is closed")
        snapshot = interval.snapshot
        if self.devices is None:
            self.devices = sorted(d["device"] for d in snapshot.devices)
            self._writer.writerow(self.header())
        itv = stats.interval_ns(snapshot, self.interval_s)
        row = [_utc(snapshot.ts_ns), _num(itv / 1e9)]
        sysrow = snapshot.system or {}
        row += [_num(sysrow.get(key)) for _, key in SYSTEM_COLUMNS]
        by_dev = {d["device"]: d for d in snapshot.devices}
        for dev in self.devices:
            d = by_dev.get(dev, {})
            row += [_num(d.get(c)) for c in DEVICE_COLUMNS]
        procs = stats.processes(snapshot).values()
        for role in ROLES:
            mine = [p for p in procs if p.role == role]
            reads = stats.histogram(r for r in snapshot.latency if r.get("role") == role
                                    and stats.is_file_syscall(r) and r["op"] == "read")
            p99 = percentile_ns(reads, 99)
            row += [
                _num(len(mine)),
                _num(sum(p.read_bytes for p in mine) / (itv / 1e9)),
                _num(sum(p.write_bytes for p in mine) / (itv / 1e9)),
                _num(sum(p.ops for p in mine) / (itv / 1e9)),
                _num(None if p99 is None else round(p99)),
                _num(sum(stats.blocked_pct(p.iowait_ns, itv) for p in mine) / len(mine)
                     if mine else None),
            ]
        shares = stats.loop_shares(interval.loop)
        row += [_num(shares[s] if shares else None) for s in LOOP_STATES]
        self._writer.writerow(row)
        self._file.flush()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._file.close()

    def __enter__(self) -> CsvSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
