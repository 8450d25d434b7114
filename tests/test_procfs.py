"""The /proc source: parsers on canned text, iostat and dstat columns from canned /proc and /sys."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tracer.live.procfs import (
    CpuTimes,
    DiskCounters,
    NetCounters,
    ProcSampler,
    in_flight_by_devt,
    parse_diskstats,
    parse_meminfo,
    parse_net_dev,
    parse_stat,
)
from tracer.tracedir.schema import TABLES, table_from_rows

T0 = 1_700_000_000_000_000_000
TWO_S = 2_000_000_000  # every canned interval below is 2 s

NET_HEADER = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs "
    "drop fifo colls carrier compressed\n"
)


def _disk(major: int, minor: int, name: str, *numbers: int) -> str:
    return f"{major:4d} {minor:7d} {name} " + " ".join(str(n) for n in numbers) + "\n"


def _net(name: str, rx: int, tx: int) -> str:
    return f"{name:>6}: {rx} 10 0 0 0 0 0 0 {tx} 20 0 0 0 0 0 0\n"


def _meminfo(total: int, free: int, buffers: int, cached: int, srecl: int, shmem: int) -> str:
    return (
        f"MemTotal:       {total} kB\nMemFree:        {free} kB\nBuffers:        {buffers} kB\n"
        f"Cached:         {cached} kB\nShmem:          {shmem} kB\n"
        f"SReclaimable:   {srecl} kB\nHugePages_Total:       0\n"
    )


class Host:
    """A canned /proc and /sys under tmp_path, rewritten before each sample."""

    def __init__(self, root: Path, disks: dict[str, list[str]]) -> None:
        self.proc = root / "proc"
        self.sys = root / "sys"
        (self.proc / "net").mkdir(parents=True)
        for name, slaves in disks.items():
            (self.sys / "block" / name / "slaves").mkdir(parents=True)
            for slave in slaves:
                (self.sys / "block" / name / "slaves" / slave).touch()
        self.sampler = ProcSampler(proc_root=self.proc, sys_root=self.sys)

    def write(self, diskstats: str, stat: str = "cpu  0 0 0 0 0 0 0 0 0 0\n",
              meminfo: str = "MemTotal: 0 kB\n", net: str = "") -> None:
        (self.proc / "diskstats").write_text(diskstats)
        (self.proc / "stat").write_text(stat + "cpu0 0 0 0 0 0 0 0 0 0 0\nintr 0\n")
        (self.proc / "meminfo").write_text(meminfo)
        (self.proc / "net" / "dev").write_text(NET_HEADER + net)


# -- parsers -----------------------------------------------------------------------------------

ELEVEN = (1000, 10, 8000, 500, 200, 5, 1600, 300, 2, 1000, 900)


def test_parse_diskstats_14_18_20_fields() -> None:
    text = (
        _disk(8, 0, "sda", *ELEVEN)  # Linux < 4.18
        + _disk(8, 16, "sdb", *ELEVEN, 10, 1, 80, 20)  # 4.18+: discards
        + _disk(259, 0, "nvme0n1", *ELEVEN, 10, 1, 80, 20, 5, 7)  # 5.5+: flushes
        + _disk(3, 1, "hda1", 100, 800, 50, 400)  # Linux <= 2.6.25 partition: 4 numbers
        + "\n"
    )
    disks = parse_diskstats(text)
    assert list(disks) == ["sda", "sdb", "nvme0n1"]
    assert disks["sda"] == DiskCounters(*ELEVEN, 0, 0, 0, 0, 0, 0)
    assert disks["sdb"] == DiskCounters(*ELEVEN, 10, 1, 80, 20, 0, 0)
    nvme = disks["nvme0n1"]
    assert nvme == DiskCounters(*ELEVEN, 10, 1, 80, 20, 5, 7)
    assert (nvme.reads, nvme.sectors_read, nvme.read_ms, nvme.in_flight) == (1000, 8000, 500, 2)
    assert (nvme.io_ms, nvme.queue_ms, nvme.discard_ms, nvme.flushes, nvme.flush_ms) == (
        1000, 900, 20, 5, 7)


def test_in_flight_by_kernel_device_number() -> None:
    """The requests in flight of each device, by major << 20 | minor (what block.bpf.c records
    for a request's disk), for the leftovers of kernel/maps.Maps.block_unseen."""
    text = _disk(8, 16, "sdb", *ELEVEN) + _disk(259, 3, "nvme0n1", *ELEVEN, 10, 1, 80, 20, 5, 7)
    assert in_flight_by_devt(text) == {8 << 20 | 16: 2, 259 << 20 | 3: 2}


def test_parse_stat() -> None:
    text = "cpu  24951 7 24229 182115 9056 1 1233 25 3 4\ncpu0 8986 0 9833 100900 1790 0 181 9 0 0\n"
    assert parse_stat(text) == CpuTimes(24951, 7, 24229, 182115, 9056, 1, 1233, 25, 3, 4)
    # Linux 2.6.0-2.6.10: no steal, guest or guest_nice column.
    assert parse_stat("cpu  1 2 3 4 5 6 7\n") == CpuTimes(1, 2, 3, 4, 5, 6, 7, 0, 0, 0)
    with pytest.raises(ValueError, match="no aggregate 'cpu' line"):
        parse_stat("cpu0 1 2 3 4 5 6 7\nintr 0\n")


def test_parse_meminfo_kb_and_counts() -> None:
    info = parse_meminfo("MemTotal:       24683652 kB\nHugePages_Total:       3\nbogus\n")
    assert info == {"MemTotal": 24683652 * 1024, "HugePages_Total": 3}


def test_parse_net_dev() -> None:
    text = NET_HEADER + _net("lo", 3193, 3193) + _net("eth0", 113411630, 156848)
    text += "  eth1:4294967296 1 0 0 0 0 0 0 77 1 0 0 0 0 0 0\n"  # old kernels: no space
    assert parse_net_dev(text) == {
        "lo": NetCounters(3193, 3193),
        "eth0": NetCounters(113411630, 156848),
        "eth1": NetCounters(4294967296, 77),
    }


# -- the sampler -------------------------------------------------------------------------------


def _two_samples(tmp_path: Path) -> tuple[list[dict], dict]:
    host = Host(tmp_path, {"sda": [], "nvme0n1": [], "dm-0": ["sda2"], "loop0": [], "ram0": []})
    idle = (0,) * 17
    host.write(
        _disk(8, 0, "sda", 1000, 10, 8000, 500, 200, 5, 1600, 300, 0, 1000, 900, 10, 0, 80, 20, 5, 7)
        + _disk(8, 1, "sda1", 900, 10, 7000, 450, 100, 5, 800, 150, 0, 500, 600, 0, 0, 0, 0, 0, 0)
        + _disk(8, 2, "sda2", 100, 0, 1000, 50, 100, 0, 800, 150, 0, 500, 300, 0, 0, 0, 0, 0, 0)
        + _disk(259, 0, "nvme0n1", *idle)
        + _disk(7, 0, "loop0", 50, 0, 400, 10, 0, 0, 0, 0, 0, 10, 10, 0, 0, 0, 0, 0, 0)
        + _disk(1, 0, "ram0", *idle)
        + _disk(253, 0, "dm-0", 100, 0, 1000, 60, 100, 0, 800, 160, 0, 500, 220, 0, 0, 0, 0, 0, 0),
        stat="cpu  1000 100 500 8000 200 30 70 100 40 0\n",
        meminfo=_meminfo(16000000, 5000000, 100000, 5000000, 400000, 50000),
        net=_net("lo", 100, 100) + _net("eth0", 1000, 500) + _net("eth1", 0, 0)
        + _net("bond0", 7000, 7000) + _net("eth0.100", 0, 0),
    )
    assert host.sampler.sample(T0) == ([], None)  # the first call only primes
    host.write(
        # sda: +400 reads of 4096 sectors in 1000 ms, +100 writes of 2048 sectors in 600 ms,
        # +100 discards in 200 ms, +10 flushes; 1500 ms busy, 3000 ms weighted, 3 in flight.
        _disk(8, 0, "sda", 1400, 12, 12096, 1500, 300, 6, 3648, 900, 3, 2500, 3900,
              110, 0, 880, 220, 15, 57)
        + _disk(8, 1, "sda1", 1200, 10, 10000, 1000, 200, 5, 2000, 500, 0, 1500, 1600,
                0, 0, 0, 0, 0, 0)
        + _disk(8, 2, "sda2", 200, 0, 1800, 100, 200, 0, 1600, 300, 0, 1000, 600, 0, 0, 0, 0, 0, 0)
        + _disk(259, 0, "nvme0n1", *idle)
        + _disk(7, 0, "loop0", 90, 0, 800, 20, 0, 0, 0, 0, 0, 20, 20, 0, 0, 0, 0, 0, 0)
        + _disk(1, 0, "ram0", *idle)
        + _disk(253, 0, "dm-0", 200, 0, 1800, 160, 200, 0, 1600, 360, 1, 1000, 520,
                0, 0, 0, 0, 0, 0),
        # +120 user, +40 nice, +100 system, +600 idle, +80 iowait, +10 irq, +30 softirq,
        # +20 steal: 1000 ticks; +40 guest is inside user already.
        stat="cpu  1120 140 600 8600 280 40 100 120 80 0\n",
        meminfo=_meminfo(16000000, 4000000, 100000, 6000000, 400000, 50000),
        # eth0 +4000/+2000, eth1 +1000/+0; lo, bond0 and the VLAN are not in the total.
        net=_net("lo", 10**6, 10**6) + _net("eth0", 5000, 2500) + _net("eth1", 1000, 0)
        + _net("bond0", 12000, 9000) + _net("eth0.100", 3000, 3000),
    )
    return host.sampler.sample(T0 + TWO_S)


def test_iostat_columns_exact(tmp_path: Path) -> None:
    rows, _ = _two_samples(tmp_path)
    # Whole disks only: no partitions (sda1, sda2), no loop0 or ram0; idle disks are kept.
    assert [r["device"] for r in rows] == ["sda", "nvme0n1", "dm-0"]
    sda, nvme, dm = rows
    assert sda == {
        "ts": T0 + TWO_S,
        "device": "sda",
        "r_s": 200.0,  # 400 reads / 2 s
        "w_s": 50.0,  # 100 writes / 2 s
        "rkb_s": 1024.0,  # 4096 sectors * 512 B / 1024 / 2 s
        "wkb_s": 512.0,  # 2048 sectors * 512 B / 1024 / 2 s
        "r_await_ms": 2.5,  # 1000 ms / 400 reads
        "w_await_ms": 6.0,  # 600 ms / 100 writes
        "await_ms": 3.0,  # (1000 + 600 + 200 ms) / (400 + 100 + 100): flushes left out
        "aqu_sz": 1.5,  # 3000 weighted ms / 2000 ms
        "util_pct": 75.0,  # 1500 busy ms / 2000 ms * 100
    }
    assert nvme == {
        "ts": T0 + TWO_S, "device": "nvme0n1", "r_s": 0.0, "w_s": 0.0, "rkb_s": 0.0, "wkb_s": 0.0,
        "r_await_ms": 0.0, "w_await_ms": 0.0, "await_ms": 0.0, "aqu_sz": 0.0, "util_pct": 0.0,
    }
    assert (dm["r_s"], dm["rkb_s"], dm["r_await_ms"], dm["w_await_ms"]) == (50.0, 200.0, 1.0, 2.0)
    assert (dm["await_ms"], dm["aqu_sz"], dm["util_pct"]) == (1.5, 0.15, 25.0)


def test_dstat_columns_exact(tmp_path: Path) -> None:
    _, system = _two_samples(tmp_path)
    assert system == {
        "ts": T0 + TWO_S,
        "cpu_user_pct": 20.0,  # (120 user + 40 nice + 10 irq + 30 softirq) / 1000 ticks
        "cpu_sys_pct": 10.0,  # 100 / 1000
        "cpu_iowait_pct": 8.0,  # 80 / 1000
        "cpu_idle_pct": 60.0,  # 600 / 1000
        # 16000000 - 4000000 free - 100000 buffers - 6000000 cached - 400000 SReclaimable
        # + 50000 Shmem = 5550000 kB
        "mem_used_bytes": 5550000 * 1024.0,
        "mem_cached_bytes": 6000000 * 1024.0,
        "net_rx_bytes_s": 2500.0,  # (4000 + 1000) B / 2 s
        "net_tx_bytes_s": 1000.0,  # 2000 B / 2 s
        # sda and nvme0n1; dm-0 sits on sda2 (slaves/) and would count its I/O twice.
        "disk_read_bytes_s": 1048576.0,  # 4096 sectors * 512 B / 2 s
        "disk_write_bytes_s": 524288.0,  # 2048 sectors * 512 B / 2 s
    }


def test_rows_have_exactly_the_table_columns(tmp_path: Path) -> None:
    rows, system = _two_samples(tmp_path)
    assert all(list(r) == TABLES["devices"].names for r in rows)
    assert list(system) == TABLES["system"].names
    devices = table_from_rows("devices", rows)
    assert devices.schema.equals(TABLES["devices"], check_metadata=True)
    assert devices.column("util_pct").to_pylist() == [75.0, 0.0, 25.0]
    table = table_from_rows("system", [system])
    assert table.column("mem_used_bytes").to_pylist() == [5683200000.0]


@pytest.mark.parametrize("extra", [(), (0, 0, 0, 0), (0, 0, 0, 0, 0, 0)], ids=["14", "18", "20"])
def test_every_diskstats_format_gives_the_same_iostat_columns(tmp_path: Path, extra: tuple) -> None:
    host = Host(tmp_path, {"sdb": []})
    host.write(_disk(8, 16, "sdb", 100, 0, 800, 100, 10, 0, 80, 20, 0, 100, 120, *extra))
    host.sampler.sample(T0)
    host.write(_disk(8, 16, "sdb", 300, 0, 2800, 500, 30, 0, 280, 100, 1, 500, 600, *extra))
    [row], _ = host.sampler.sample(T0 + TWO_S)
    assert (row["r_s"], row["w_s"], row["rkb_s"], row["wkb_s"]) == (100.0, 10.0, 500.0, 50.0)
    assert (row["r_await_ms"], row["w_await_ms"]) == (2.0, 4.0)  # 400 ms / 200, 80 ms / 20
    assert row["await_ms"] == 480 / 220
    assert (row["aqu_sz"], row["util_pct"]) == (0.24, 20.0)


def test_counters_going_backwards_give_no_negative_rate(tmp_path: Path) -> None:
    host = Host(tmp_path, {"sda": [], "sdb": []})
    host.write(
        _disk(8, 0, "sda", 1000, 10, 8000, 500, 200, 5, 1600, 300, 0, 1000, 900, 0, 0, 0, 0, 0, 0)
        + _disk(8, 16, "sdb", 10, 0, 80, 2**32 - 500, 0, 0, 0, 0, 0, 2**32 - 500, 5000,
                0, 0, 0, 0, 0, 0),
        net=_net("eth0", 10**9, 10**9),
    )
    host.sampler.sample(T0)
    host.write(
        # sda was removed and added again: it has done 50 reads since.
        _disk(8, 0, "sda", 50, 0, 400, 100, 0, 0, 0, 0, 0, 80, 100, 0, 0, 0, 0, 0, 0)
        # sdb: the 32-bit ms fields wrapped (+1500 ms), weighted time dropped a little (0 ms).
        + _disk(8, 16, "sdb", 20, 0, 160, 1000, 0, 0, 0, 0, 0, 1000, 4990, 0, 0, 0, 0, 0, 0)
        # sdc was plugged in during the interval.
        + _disk(8, 32, "sdc", 8, 0, 64, 16, 0, 0, 0, 0, 0, 16, 16, 0, 0, 0, 0, 0, 0),
        net=_net("eth0", 3000, 1000),  # the interface was re-created
    )
    (host.sys / "block" / "sdc").mkdir()
    rows, system = host.sampler.sample(T0 + TWO_S)
    sda, sdb, sdc = rows
    assert all(v >= 0 for r in rows for k, v in r.items() if k not in ("ts", "device"))
    assert (sda["r_s"], sda["rkb_s"], sda["r_await_ms"], sda["w_s"]) == (25.0, 100.0, 2.0, 0.0)
    assert (sda["util_pct"], sda["aqu_sz"]) == (4.0, 0.05)
    assert (sdb["r_s"], sdb["r_await_ms"], sdb["util_pct"], sdb["aqu_sz"]) == (5.0, 150.0, 75.0, 0.0)
    assert (sdc["device"], sdc["r_s"], sdc["rkb_s"], sdc["r_await_ms"]) == ("sdc", 4.0, 16.0, 2.0)
    assert (system["net_rx_bytes_s"], system["net_tx_bytes_s"]) == (1500.0, 500.0)
    assert system["disk_read_bytes_s"] == (400 + 80 + 64) * 512 / 2


def test_sysfs_names_with_a_bang(tmp_path: Path) -> None:
    host = Host(tmp_path, {"cciss!c0d0": []})
    host.write(_disk(104, 0, "cciss/c0d0", *(0,) * 11))
    host.sampler.sample(T0)
    host.write(_disk(104, 0, "cciss/c0d0", 2, 0, 16, 4, *(0,) * 7))
    [row], _ = host.sampler.sample(T0 + TWO_S)
    assert (row["device"], row["r_s"], row["r_await_ms"]) == ("cciss/c0d0", 1.0, 2.0)


def test_no_tick_elapsed_and_bad_timestamps(tmp_path: Path) -> None:
    host = Host(tmp_path, {"sda": []})
    host.write(_disk(8, 0, "sda", *(0,) * 11), stat="cpu  5 0 5 5 0 0 0 0 0 0\n")
    host.sampler.sample(T0)
    _, system = host.sampler.sample(T0 + 1000)
    assert system is not None
    cpu = {k: v for k, v in system.items() if k.startswith("cpu_")}
    assert cpu == dict.fromkeys(cpu, 0.0)  # as dstat: no tick, no percentage
    with pytest.raises(ValueError, match="is not after the previous sample"):
        host.sampler.sample(T0 + 1000)
    with pytest.raises(ValueError, match="monotonic"):
        host.sampler.sample(T0)
    assert host.sampler.sample(T0 + 2000)[1] is not None  # still usable


def test_missing_proc_file(tmp_path: Path) -> None:
    host = Host(tmp_path, {"sda": []})
    host.write(_disk(8, 0, "sda", *(0,) * 11))
    (host.proc / "net" / "dev").unlink()
    with pytest.raises(FileNotFoundError, match="net/dev"):
        host.sampler.sample(T0)


@pytest.mark.skipif(not os.path.exists("/proc/diskstats") or not os.path.isdir("/sys/block"),
                    reason="needs Linux /proc and /sys")
def test_real_proc() -> None:
    sampler = ProcSampler()
    assert sampler.sample(time.time_ns()) == ([], None)
    time.sleep(0.05)
    rows, system = sampler.sample(time.time_ns())
    assert system is not None and 0.0 <= system["cpu_idle_pct"] <= 100.0
    table_from_rows("devices", rows)
    table_from_rows("system", [system])
    names = {r["device"] for r in rows}
    assert not {n for n in names if n.startswith(("loop", "ram"))}
    assert names <= set(parse_diskstats(Path("/proc/diskstats").read_text()))
