"""The block requests left at the end of a trace while another job keeps the disk busy (two
iotrace instances at once: the other one's job)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import needs_root
from tracer.core import abi
from tracer.kernel.libbpf import Map
from tracer.kernel.probes import Probes
from tracer.live.procfs import disks_in_flight, in_flight_by_devt

pytestmark = [needs_root, pytest.mark.kernel]


def _disk_of(path: Path) -> int:
    """The whole disk `path` is on, as BPF programs number it (major << 20 | minor)."""
    st = os.stat(path)
    sysfs = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}").resolve()
    if (sysfs / "partition").exists():
        sysfs = sysfs.parent
    major, minor = map(int, (sysfs / "dev").read_text().split(":"))
    return major << 20 | minor


def test_leftovers_are_exact_beside_a_busy_disk(iowork, data_file):
    """Two records of requests that ended unseen, planted in the loaded maps, on the disk an
    untraced O_DIRECT reader (queue depth 1) keeps busy most of the time: every end-of-trace
    reading counts both. One look at the disk's in-flight count took the reader's request
    for one of them (2999 of 3000 with two iotrace instances at once)."""
    disk = _disk_of(data_file)
    p = Probes(map_sizes={})
    p.load()
    reader = None
    try:
        starts = Map(p.loader.map_fd("rq_starts"), 8, abi.RQ_START.size)
        for rq, nbytes in ((1, 4096), (2, 8192)):
            # issued long ago by traced pid 1234 (no kthread, cgroup or name), never ended
            rec = (0, 1, 0, 0, 0, 1234, nbytes, disk, 0, 0, 0, 0, b"", 0)
            starts.update((rq << 6).to_bytes(8, "little"), abi.RQ_START.pack(*rec))
        reader = subprocess.Popen(
            ["sh", "-c", f"while :; do {iowork} {data_file} --direct 5000; done"])
        busy = 0
        got = []
        for _ in range(20):
            busy += in_flight_by_devt(Path("/proc/diskstats").read_text()).get(disk, 0) > 0
            got.append(p.maps.block_unseen(disks_in_flight))
            time.sleep(0.01)
        assert got == [(2, 4096 + 8192)] * 20
    finally:
        if reader:
            reader.kill()
            reader.wait()
        p.close()
    assert busy, "the reader kept no request in flight when looked at: nothing was tested"


def test_each_interval_counts_what_ended_unseen_with_prometheus(data_file):
    """A record of a traced request that ended unseen, planted in the loaded maps, its disk
    idle: with /metrics each interval's reading counts it (so block counts plus these are
    exact at every scrape), not only the final one; without, only the final one does, and
    the kernel's own count (an address reused) stays apart from it."""
    from tracer.live.cost import CostReader

    disk = _disk_of(data_file)
    p = Probes(map_sizes={})
    p.load()
    try:
        starts = Map(p.loader.map_fd("rq_starts"), 8, abi.RQ_START.size)
        rec = (0, 1, 0, 0, 0, 1234, 4096, disk, 0, 0, 0, 0, b"", 0)  # issued at 1 ns, pid 1234
        starts.update((3 << 6).to_bytes(8, "little"), abi.RQ_START.pack(*rec))
        each, at_end = (CostReader(p, "off", 1.0, unseen_each_interval=flag) for flag in (True, False))
        for reader in (each, at_end):
            reader.start_stats()
            reader.start_meter()
        for _ in range(50):  # one look at the disk: idle at some point (other jobs share it)
            got = each.read()
            if got.block_unseen_requests:
                break
            time.sleep(0.02)
        assert (got.block_unseen_requests, got.block_unseen_bytes) == (1, 4096)
        assert at_end.read().block_unseen_requests == 0
        final = at_end.read(final=True)
        assert (final.block_unseen_requests, final.block_unseen_bytes) == (1, 4096)
    finally:
        p.close()
