"""The `memory` rows (tracer.live.memory): a job's memory cgroup, v1 and v2, from canned files,
and this host's own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tracer.live.memory import MemorySampler, memory_cgroup, parse_memory_stat
from tracer.tracedir.schema import TABLES, table_from_rows

MIB = 1 << 20


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_which_line_names_the_memory_cgroup():
    v1 = "12:cpu,cpuacct:/a\n5:memory:/iotrace-train-7\n0::/user.slice\n"
    assert memory_cgroup(v1) == ("cgroup_v1", "/iotrace-train-7")
    assert memory_cgroup("0::/kubepods/pod1/c1\n") == ("cgroup_v2", "/kubepods/pod1/c1")
    assert memory_cgroup("3:blkio:/x\n") is None
    assert parse_memory_stat("cache 8192\ntotal_cache 12288\nbad\n") == {
        "cache": 8192, "total_cache": 12288}


def test_a_v1_cgroup(tmp_path):
    write(tmp_path / "proc/42/cgroup", "7:memory:/job\n0::/\n")
    cg = tmp_path / "memory/job"
    write(cg / "memory.usage_in_bytes", f"{300 * MIB}\n")
    # the limit of the hierarchy (a parent's, smaller than the cgroup's own) and the page cache
    # without shared memory (DataLoader batches in /dev/shm are in `cache` too)
    write(cg / "memory.stat", f"cache 1\ntotal_cache {200 * MIB}\ntotal_shmem {32 * MIB}\n"
                              f"hierarchical_memory_limit {320 * MIB}\n")
    rows = MemorySampler(str(tmp_path / "proc"), (tmp_path / "memory", None),
                         str(tmp_path / "no-psi")).sample(5, [42, 43])
    assert len(rows) == 1  # 43 is gone
    row = rows[0]
    assert row["available_bytes"] > 0
    assert {k: v for k, v in row.items() if k != "available_bytes"} == {
        "ts": 5, "pid": 42, "source": "cgroup_v1", "cgroup": "/job", "limit_bytes": 320 * MIB,
        "usage_bytes": 300 * MIB, "cache_bytes": 168 * MIB, "majfaults": None,
        "limit_hits": None, "swap_bytes": None, "psi_source": None, "psi_memory_some_ns": None,
        "psi_memory_full_ns": None, "psi_io_some_ns": None, "psi_cpu_some_ns": None}
    table_from_rows("memory", rows)


def test_pressure_counts_are_the_intervals(tmp_path):
    """v1: faults and limit hits from the cgroup, PSI from the host (v1 keeps none) or the job's
    v2 cgroup on a hybrid host; each the interval's part, null at first sight."""
    write(tmp_path / "proc/42/cgroup", "7:memory:/job\n0::/\n")
    write(tmp_path / "proc/43/cgroup", "7:memory:/job\n0::/sys/job\n")
    cg = tmp_path / "memory/job"
    psi = tmp_path / "pressure"
    unified = tmp_path / "unified/sys/job"

    def counters(faults, hits, swap, us):
        write(cg / "memory.usage_in_bytes", "4096\n")
        write(cg / "memory.failcnt", f"{hits}\n")
        write(cg / "memory.stat", f"total_pgmajfault {faults}\ntotal_swap {swap}\n")
        for where, name in ((psi, "{}"), (unified, "{}.pressure")):
            for r in ("memory", "io", "cpu"):
                write(where / name.format(r), f"some avg10=1.00 avg60=0.00 avg300=0.00 "
                      f"total={us}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total={us // 2}\n")

    sampler = MemorySampler(str(tmp_path / "proc"), (tmp_path / "memory", tmp_path / "unified"),
                            str(psi))
    counters(10, 3, MIB, 1000)
    first = sampler.sample(5, [42, 43])
    assert [(r["psi_source"], r["majfaults"], r["psi_memory_some_ns"], r["swap_bytes"])
            for r in first] == [("host", None, None, MIB), ("cgroup_v2", None, None, MIB)]
    counters(25, 7, 2 * MIB, 5000)
    row, _ = sampler.sample(6, [42, 43])
    assert (row["majfaults"], row["limit_hits"], row["swap_bytes"], row["psi_memory_some_ns"],
            row["psi_memory_full_ns"], row["psi_io_some_ns"], row["psi_cpu_some_ns"]) == (
        15, 4, 2 * MIB, 4_000_000, 2_000_000, 4_000_000, 4_000_000)


def test_a_v1_cgroup_without_a_limit(tmp_path):
    write(tmp_path / "proc/42/cgroup", "7:memory:/job\n")
    write(tmp_path / "memory/job/memory.usage_in_bytes", "4096\n")
    write(tmp_path / "memory/job/memory.stat", "total_cache 4096\n"
                                               "hierarchical_memory_limit 9223372036854771712\n")
    row, = MemorySampler(str(tmp_path / "proc"), (tmp_path / "memory", None)).sample(5, [42])
    assert (row["limit_bytes"], row["cache_bytes"]) == (None, 4096)


def test_a_v2_cgroup_limited_by_a_parent(tmp_path):
    write(tmp_path / "proc/42/cgroup", "0::/pod/c1\n")
    root = tmp_path / "unified"
    write(root / "pod/memory.max", f"{1024 * MIB}\n")
    write(root / "pod/c1/memory.max", "max\n")
    write(root / "pod/c1/memory.current", f"{900 * MIB}\n")
    write(root / "pod/c1/memory.stat", f"anon {100 * MIB}\nfile {800 * MIB}\nshmem {MIB}\n")
    row, = MemorySampler(str(tmp_path / "proc"), (None, root)).sample(5, [42])
    assert (row["source"], row["cgroup"], row["limit_bytes"], row["usage_bytes"],
            row["cache_bytes"]) == ("cgroup_v2", "/pod/c1", 1024 * MIB, 900 * MIB, 799 * MIB)


def test_the_root_cgroup_is_the_host(tmp_path):
    write(tmp_path / "proc/42/cgroup", "0::/\n")
    row, = MemorySampler(str(tmp_path / "proc"), (None, tmp_path)).sample(5, [42])
    assert (row["source"], row["cgroup"], row["limit_bytes"]) == ("host", None, None)


@pytest.mark.skipif(not os.path.exists("/proc/self/cgroup"), reason="no /proc/self/cgroup")
def test_this_process():
    """Whatever this host has, a row comes back for a live process, and it fits the table."""
    row, = MemorySampler().sample(5, [os.getpid()])
    assert row["source"] in ("cgroup_v1", "cgroup_v2", "host")
    assert list(row) == TABLES["memory"].names
    table_from_rows("memory", [row])
