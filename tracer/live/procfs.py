"""The /proc source: `iostat -x` columns per whole disk and `dstat -cdnm` columns for the host.

Two layers, as psutil has them:

- raw parsers, pure functions from the text of one file to plain tuples and dicts
  (`parse_diskstats`, `parse_stat`, `parse_meminfo`, `parse_net_dev`); each quotes a sample line
  of its format and names its quirks;
- `ProcSampler`, which reads those files under an overridable proc root (and the list of disks
  under an overridable sys root) once per interval and turns counter deltas into the rows of
  the `devices` and `system` tables (`tracer.tracedir.schema`).

Why not psutil here. psutil reads /proc through one process-wide setting, ``psutil.PROCFS_PATH``;
pointing it at canned files would also redirect the psutil calls the rest of the tracer makes
in the same process (`tracer.live.processes`, `tracer.live.session`), so it cannot serve as a per-sampler
proc root. It also cannot give iostat's columns: `psutil.disk_io_counters` has no weighted time in
queue (iostat's aqu-sz) and no discard counters (part of iostat's await), and it reads
/sys/block itself. Its CPU times come as float seconds and its "used" memory follows `free`, not
dstat. The four files are simple; reading them here keeps every number exact and testable.

iostat -x, as sysstat 12 computes it (iostat.c `write_ext_stat`, common.c
`compute_ext_disk_stats`), from deltas of /proc/diskstats over an interval of ``itv`` seconds:

- r/s = reads / itv, w/s = writes / itv (discards and flushes are not in either);
- rkB/s = sectors read * 512 / 1024 / itv (a sector is always 512 bytes in diskstats, whatever
  the device's block size; kB is 1024 bytes), wkB/s likewise;
- r_await = read ms / reads, w_await = write ms / writes (0 when no request completed);
- await = (read + write + discard ms) / (reads + writes + discards): sysstat's combined await
  (shown by ``iostat -x -s``); flushes are excluded, as sysstat excludes them ("origin
  (unmerged) flush operations are counted as writes" by the kernel already);
- aqu-sz = weighted ms in queue / interval ms;
- %util = ms with I/O in flight / interval ms * 100; not capped at 100, as iostat does not cap it.

One deliberate difference: iostat measures the interval with /proc/uptime, in 1/100 s; here it is
the difference of the ``ts_ns`` the caller gives (`tracer.live.clock.Clock.now_ns`, which is
CLOCK_MONOTONIC shifted to UTC, so it never jumps), accurate to the nanosecond.

dstat, as dstat 0.7.4 (and its successor dool) computes the columns kept here:

- cpu: usr = user + nice + irq + softirq, sys = system, wai = iowait, idl = idle, each as a
  percent of the sum of user, nice, system, idle, iowait, irq, softirq and steal (guest time is
  already inside user and nice, so it is not added again); all 0 when no tick elapsed;
- mem: used = MemTotal - MemFree - Buffers - Cached - SReclaimable + Shmem, cached = Cached;
- net: bytes received and sent per second over all interfaces but dstat's "total" exclusions:
  ``lo``, bonding masters ``bondN`` and VLAN sub-interfaces ``name.N`` (their traffic is already
  counted on the interfaces under them);
- dsk: bytes read and written per second, summed over the whole disks of the `devices` rows
  minus the stacked ones (device-mapper, md: a disk with entries in /sys/block/NAME/slaves),
  whose I/O is already counted on the disks under them. dstat drops ``dm-N``/``mdN`` by name.

Counters that go backwards. A whole disk or an interface that was removed and added again
during an interval starts its counters from zero: when any of its 64-bit counters (requests,
merges, sectors; bytes for interfaces) is lower than at the previous sample, the previous
sample is taken as all zeros, as iostat does, so what it did since it came back is counted and
no rate is negative. The millisecond fields of diskstats are 32-bit in the kernel and wrap after
2**32 ms: a drop of more than half that range is a wrap and is unwrapped; a smaller drop (the
kernel's accounting is not atomic) counts as no time at all. A device or interface first seen
after the first sample starts from zero too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from typing import NamedTuple

SECTOR_BYTES = 512
"""Bytes per sector in /proc/diskstats, for every device (include/linux/blk_types.h SECTOR_SHIFT)."""

_U32 = 1 << 32
"""The diskstats millisecond fields are printed from `unsigned int` and wrap at 2**32."""

_NOT_A_DISK = re.compile(r"^(loop|ram)\d+$")
"""Whole block devices in /sys/block that hold no real disk: loop devices and brd ramdisks."""

_NOT_IN_NET_TOTAL = re.compile(r"^(lo|bond\d+|.+\.\d+)$")
"""dstat's `totalfilter` for /proc/net/dev (its `face` is a header word, which has no colon here)."""


# -- raw parsers -------------------------------------------------------------------------------


class DiskCounters(NamedTuple):
    """One line of /proc/diskstats: cumulative since the device appeared, except `in_flight`."""

    reads: int  # read requests completed
    reads_merged: int
    sectors_read: int  # 512-byte sectors
    read_ms: int  # total time of the completed reads (32-bit, wraps)
    writes: int
    writes_merged: int
    sectors_written: int
    write_ms: int  # (32-bit, wraps)
    in_flight: int  # requests in flight now: a gauge, not a counter
    io_ms: int  # time with at least one request in flight (iostat's %util) (32-bit, wraps)
    queue_ms: int  # time in flight weighted by requests in flight (iostat's aqu-sz) (32-bit)
    discards: int  # Linux >= 4.18, else 0
    discards_merged: int
    sectors_discarded: int
    discard_ms: int  # (32-bit, wraps)
    flushes: int  # Linux >= 5.5, else 0
    flush_ms: int  # (32-bit, wraps)


_DISK_FIELDS = len(DiskCounters._fields)
_DISK_MS = frozenset({"read_ms", "write_ms", "io_ms", "queue_ms", "discard_ms", "flush_ms"})
_DISK_GAUGES = frozenset({"in_flight"})
_DISK_COUNTS = tuple(
    i for i, f in enumerate(DiskCounters._fields) if f not in _DISK_MS and f not in _DISK_GAUGES
)


def parse_diskstats(text: str) -> dict[str, DiskCounters]:
    """/proc/diskstats as {kernel device name: counters}, in the kernel's order.

    A line is "major minor name" then 11, 15 or 17 numbers (Documentation/admin-guide/iostats.rst):

        " 254       0 vda 2526966 11100 24768242 153246 21845 41755 6373800 18858 0 89312 172979
        7681 68 2201160 719 3947 154"

    - 14 fields (Linux < 4.18): reads, merges, sectors, ms; the same for writes; in flight, io ms,
      weighted ms. 18 fields (4.18+) add discards, discard merges, sectors, ms. 20 fields (5.5+)
      add flushes and flush ms. Missing trailing fields are 0.
    - Linux 2.6.25 and older printed partitions with 4 numbers (7 fields: reads, sectors read,
      writes, sectors written); those lines, and any line shorter than 14 fields, are skipped:
      they are never whole disks.
    - Names may contain "/" (cciss/c0d0: /sys/block spells it "cciss!c0d0").
    - Requests and sectors are `unsigned long` (64-bit); the ms fields `unsigned int` (wrap at
      2**32); in flight is a gauge.
    """
    return {name: counters for _, _, name, counters in _diskstats_lines(text)}


def in_flight_by_devt(text: str) -> dict[int, int]:
    """Requests each device of /proc/diskstats has in flight now, by the device number as the
    kernel keeps it (major << 20 | minor: what BPF programs read from a gendisk)."""
    return {major << 20 | minor: c.in_flight for major, minor, _, c in _diskstats_lines(text)}


def disks_in_flight() -> dict[int, int]:
    """in_flight_by_devt of this host's /proc/diskstats now."""
    with open("/proc/diskstats") as f:
        return in_flight_by_devt(f.read())


def _diskstats_lines(text: str) -> Iterator[tuple[int, int, str, DiskCounters]]:
    """(major, minor, name, counters) of each line of /proc/diskstats (see parse_diskstats)."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 14:
            continue
        numbers = [int(x) for x in fields[3 : 3 + _DISK_FIELDS]]
        numbers.extend([0] * (_DISK_FIELDS - len(numbers)))
        yield int(fields[0]), int(fields[1]), fields[2], DiskCounters(*numbers)


class CpuTimes(NamedTuple):
    """The aggregate "cpu" line of /proc/stat, in USER_HZ ticks (1/100 s on every architecture)."""

    user: int  # includes guest
    nice: int  # includes guest_nice
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int  # Linux >= 2.6.11, else 0
    guest: int  # Linux >= 2.6.24, else 0
    guest_nice: int  # Linux >= 2.6.33, else 0


def parse_stat(text: str) -> CpuTimes:
    """The all-CPU times of /proc/stat.

    The first line sums every CPU; "cpuN" lines follow, then "intr", "ctxt", ...:

        "cpu  24951 0 24229 182115 9056 0 1233 25 0 0"

    - Two spaces after "cpu" (the per-CPU lines have one), so split on whitespace.
    - Older kernels print fewer columns (4 before 2.6, 7 before 2.6.11, ...): missing ones are 0.
    - guest and guest_nice are already counted in user and nice: adding them double counts.

    Raises ValueError when there is no aggregate "cpu" line.
    """
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            numbers = [int(x) for x in fields[1:11]]
            numbers.extend([0] * (len(CpuTimes._fields) - len(numbers)))
            return CpuTimes(*numbers)
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo as {field: bytes}.

        "MemTotal:       24683652 kB"
        "HugePages_Total:       0"

    - "kB" means KiB (1024 bytes): values are converted to bytes.
    - Lines without a unit (HugePages_Total, HugePages_Free, ...) are counts, returned as they are.
    - Which fields exist depends on the kernel (SReclaimable since 2.6.19, Shmem since 2.6.32).
    """
    info: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or not fields:
            continue
        value = int(fields[0])
        info[name.strip()] = value * 1024 if fields[1:2] == ["kB"] else value
    return info


class NetCounters(NamedTuple):
    """Bytes through one interface since it appeared, from /proc/net/dev."""

    rx_bytes: int
    tx_bytes: int


def parse_net_dev(text: str) -> dict[str, NetCounters]:
    """/proc/net/dev as {interface: byte counters}.

        "Inter-|   Receive                                                |  Transmit"
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets ..."
        "  eth0: 113411630    2650    0    0    0     0          0         0   156848 ..."

    - Two header lines, then one line per interface: 8 receive columns, then 8 transmit ones;
      received bytes is the first number, sent bytes the ninth.
    - Old kernels left no space after the colon once the counter was wide ("eth0:1134116300"),
      so the name ends at the colon, not at whitespace.
    """
    counters: dict[str, NetCounters] = {}
    for line in text.splitlines():
        name, sep, rest = line.rpartition(":")
        fields = rest.split()
        if not sep or len(fields) < 9 or not fields[0].isdigit():
            continue
        counters[name.strip()] = NetCounters(int(fields[0]), int(fields[8]))
    return counters


# -- deltas ------------------------------------------------------------------------------------


def _ms_delta(prev: int, cur: int) -> int:
    """cur - prev for a 32-bit millisecond field: a wrap is unwrapped, a small drop is 0."""
    delta = cur - prev
    if delta >= 0:
        return delta
    return delta + _U32 if -delta > _U32 // 2 else 0


def disk_delta(prev: DiskCounters | None, cur: DiskCounters) -> DiskCounters:
    """What a disk did between two samples (`in_flight` is `cur`'s).

    With no previous sample, or when one of its 64-bit counters went backwards (the device was
    removed and added again), the previous sample counts as all zeros.
    """
    if prev is None or any(cur[i] < prev[i] for i in _DISK_COUNTS):
        return cur
    values = []
    for name, p, c in zip(DiskCounters._fields, prev, cur, strict=True):
        if name in _DISK_GAUGES:
            values.append(c)
        elif name in _DISK_MS:
            values.append(_ms_delta(p, c))
        else:
            values.append(c - p)
    return DiskCounters(*values)


def net_delta(prev: NetCounters | None, cur: NetCounters) -> NetCounters:
    """What an interface moved between two samples; zero-based when new or re-created."""
    if prev is None or cur.rx_bytes < prev.rx_bytes or cur.tx_bytes < prev.tx_bytes:
        return cur
    return NetCounters(cur.rx_bytes - prev.rx_bytes, cur.tx_bytes - prev.tx_bytes)


def iostat_row(ts_ns: int, device: str, d: DiskCounters, interval_ns: int) -> dict[str, object]:
    """One `devices` row: iostat -x's columns from the deltas `d` over `interval_ns`."""
    seconds = interval_ns / 1e9
    ms = interval_ns / 1e6
    ios = d.reads + d.writes + d.discards
    return {
        "ts": ts_ns,
        "device": device,
        "r_s": d.reads / seconds,
        "w_s": d.writes / seconds,
        "rkb_s": d.sectors_read * SECTOR_BYTES / 1024 / seconds,
        "wkb_s": d.sectors_written * SECTOR_BYTES / 1024 / seconds,
        "r_await_ms": d.read_ms / d.reads if d.reads else 0.0,
        "w_await_ms": d.write_ms / d.writes if d.writes else 0.0,
        "await_ms": (d.read_ms + d.write_ms + d.discard_ms) / ios if ios else 0.0,
        "aqu_sz": d.queue_ms / ms,
        "util_pct": 100.0 * d.io_ms / ms,
    }


def dstat_cpu(prev: CpuTimes, cur: CpuTimes) -> dict[str, float]:
    """dstat's usr/sys/wai/idl percentages between two /proc/stat samples."""
    d = CpuTimes(*(max(c - p, 0) for p, c in zip(prev, cur, strict=True)))
    total = d.user + d.nice + d.system + d.idle + d.iowait + d.irq + d.softirq + d.steal
    if total <= 0:  # less than one tick elapsed
        return {"cpu_user_pct": 0.0, "cpu_sys_pct": 0.0, "cpu_iowait_pct": 0.0, "cpu_idle_pct": 0.0}
    return {
        "cpu_user_pct": 100.0 * (d.user + d.nice + d.irq + d.softirq) / total,
        "cpu_sys_pct": 100.0 * d.system / total,
        "cpu_iowait_pct": 100.0 * d.iowait / total,
        "cpu_idle_pct": 100.0 * d.idle / total,
    }


def dstat_mem(meminfo: Mapping[str, int]) -> dict[str, float]:
    """dstat's used and cached memory, in bytes (fields a kernel lacks count as 0)."""
    m = meminfo.get
    used = (
        m("MemTotal", 0) - m("MemFree", 0) - m("Buffers", 0) - m("Cached", 0)
        - m("SReclaimable", 0) + m("Shmem", 0)
    )
    return {"mem_used_bytes": float(used), "mem_cached_bytes": float(m("Cached", 0))}


# -- the sampler -------------------------------------------------------------------------------


class _Reading(NamedTuple):
    ts_ns: int
    disks: dict[str, DiskCounters]
    cpu: CpuTimes
    meminfo: dict[str, int]
    net: dict[str, NetCounters]
    whole_disks: dict[str, bool]  # diskstats name -> stacked on other disks (dm, md)


class ProcSampler:
    """Reads /proc once per interval and returns the `devices` and `system` rows for it.

    `proc_root` and `sys_root` replace "/proc" and "/sys" (tests point them at canned files).
    The whole disks are the entries of SYS_ROOT/block but loopN and ramN, read again at every
    sample so that hot-plugged disks appear; partitions are not in /sys/block.
    """

    def __init__(self, proc_root: str | os.PathLike[str] = "/proc",
                 sys_root: str | os.PathLike[str] = "/sys") -> None:
        self.proc_root = os.fspath(proc_root)
        self.sys_root = os.fspath(sys_root)
        self._prev: _Reading | None = None

    def sample(self, ts_ns: int) -> tuple[list[dict[str, object]], dict[str, object] | None]:
        """Rows for the interval that ends now, stamped `ts_ns`.

        `ts_ns` is UTC nanoseconds from a clock that does not jump (`tracer.live.clock.Clock.now_ns`):
        the interval is the difference between two calls' `ts_ns`. The first call only reads
        the counters and returns ([], None). Later calls return one `devices` row per whole disk
        (columns of iostat -x, see the module docstring; rates per second, kB = 1024 bytes, times
        in ms) and the `system` row (dstat's: percentages, bytes, bytes per second).

        Raises ValueError when `ts_ns` is not after the previous call's, OSError when a file
        cannot be read, ValueError when /proc/stat has no "cpu" line.
        """
        prev = self._prev
        if prev is not None and ts_ns <= prev.ts_ns:
            raise ValueError(
                f"ts_ns {ts_ns} is not after the previous sample's {prev.ts_ns}: "
                "pass a monotonic-based time such as tracer.live.clock.Clock().now_ns()"
            )
        cur = self._read(ts_ns)
        self._prev = cur
        if prev is None:
            return [], None
        interval_ns = ts_ns - prev.ts_ns

        rows: list[dict[str, object]] = []
        sectors_read = sectors_written = 0
        for name, counters in cur.disks.items():
            if name not in cur.whole_disks:
                continue
            d = disk_delta(prev.disks.get(name), counters)
            rows.append(iostat_row(ts_ns, name, d, interval_ns))
            if not cur.whole_disks[name]:
                sectors_read += d.sectors_read
                sectors_written += d.sectors_written

        rx = tx = 0
        for name, counters in cur.net.items():
            if _NOT_IN_NET_TOTAL.match(name):
                continue
            n = net_delta(prev.net.get(name), counters)
            rx += n.rx_bytes
            tx += n.tx_bytes

        seconds = interval_ns / 1e9
        system: dict[str, object] = {
            "ts": ts_ns,
            **dstat_cpu(prev.cpu, cur.cpu),
            **dstat_mem(cur.meminfo),
            "net_rx_bytes_s": rx / seconds,
            "net_tx_bytes_s": tx / seconds,
            "disk_read_bytes_s": sectors_read * SECTOR_BYTES / seconds,
            "disk_write_bytes_s": sectors_written * SECTOR_BYTES / seconds,
        }
        return rows, system

    def _read(self, ts_ns: int) -> _Reading:
        # diskstats first: its counters are the ones whose interval matters most.
        disks = parse_diskstats(self._proc("diskstats"))
        cpu = parse_stat(self._proc("stat"))
        meminfo = parse_meminfo(self._proc("meminfo"))
        net = parse_net_dev(self._proc("net/dev"))
        return _Reading(ts_ns, disks, cpu, meminfo, net, self._whole_disks())

    def _proc(self, name: str) -> str:
        with open(os.path.join(self.proc_root, name)) as f:
            return f.read()

    def _whole_disks(self) -> dict[str, bool]:
        """{diskstats name: stacked} for the entries of SYS_ROOT/block but loopN and ramN."""
        block = os.path.join(self.sys_root, "block")
        disks: dict[str, bool] = {}
        for entry in os.listdir(block):
            if _NOT_A_DISK.match(entry):
                continue
            try:
                stacked = bool(os.listdir(os.path.join(block, entry, "slaves")))
            except OSError:  # no slaves/ folder: not a stacked device
                stacked = False
            disks[entry.replace("!", "/")] = stacked  # sysfs "cciss!c0d0" is "cciss/c0d0"
        return disks
