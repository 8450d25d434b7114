"""The set of traced processes is kept twice in the kernel: the `tracked` hash map (with each
process's root and flags) and the `tracked_bits` bitmap that the hot paths test (one bit per
PID). Both must always say the same, whoever changes them: user space (`Loader.track`),
fork and exit."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from conftest import needs_root
from tracer.core import abi
from tracer.kernel.libbpf import Map
from tracer.kernel.probes import Probes

pytestmark = [needs_root, pytest.mark.kernel]


@pytest.fixture
def probes():
    p = Probes(map_sizes={})
    p.load()
    p.loader.attach()
    try:
        yield p
    finally:
        p.close()


def tracked(probes: Probes) -> Map:
    """The `tracked` map: tgid -> struct tracked_info."""
    return Map(probes.loader.map_fd("tracked"), abi.TGID.size, abi.TRACKED_INFO.size)


def state(probes: Probes, pid: int) -> tuple[bool, int | None]:
    """(bit set, root in `tracked` or None when absent)."""
    bits = Map(probes.loader.map_fd("tracked_bits"), 4, 8)
    word = int.from_bytes(bits.lookup((pid // 64).to_bytes(4, "little")), "little")
    info = tracked(probes).lookup(abi.TGID.pack(pid))
    return bool(word >> (pid % 64) & 1), None if info is None else abi.TRACKED_INFO.unpack(info)[0]


def test_bitmap_follows_track_fork_and_exit(probes):
    shell = subprocess.Popen(["sh", "-c", "read go; sleep 0.2 & echo $!; wait; read done"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert state(probes, shell.pid) == (False, None)
        probes.loader.track(shell.pid)
        assert state(probes, shell.pid) == (True, 0)
        assert state(probes, os.getpid()) == (False, None)  # nobody else
        shell.stdin.write("go\n")
        shell.stdin.flush()
        child = int(shell.stdout.readline())
        assert state(probes, child) in ((True, shell.pid), (False, None))  # maybe gone already
        deadline = time.monotonic() + 10
        while state(probes, child) != (False, None) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state(probes, child) == (False, None)  # its exit took both away
        assert state(probes, shell.pid) == (True, 0)
    finally:
        shell.stdin.close()  # `read done` ends: the shell exits
        shell.wait(timeout=10)
    assert state(probes, shell.pid) == (False, None)


def test_child_seen_in_both_while_alive(probes):
    """The fork path, caught while the child lives: bit and entry, with the tracked root."""
    shell = subprocess.Popen(["sh", "-c", "read go; sleep 30 & echo $!; read done; kill $!"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        probes.loader.track(shell.pid)
        shell.stdin.write("go\n")
        shell.stdin.flush()
        child = int(shell.stdout.readline())
        assert state(probes, child) == (True, shell.pid)
    finally:
        shell.stdin.close()
        shell.wait(timeout=10)


def test_worker_found_at_attach_is_marked_as_the_kernel_marks_one(probes):
    """A DataLoader worker that named itself before iotrace attached: `track(worker=True)`
    flags it as the kernel's task_rename would have, so its wake-ups count as a worker's."""
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        probes.loader.track(sleeper.pid, os.getpid(), worker=True)
        info = abi.TRACKED_INFO.unpack(tracked(probes).lookup(abi.TGID.pack(sleeper.pid)))
        assert info == (os.getpid(), abi.TRACKED_WORKER)
        probes.loader.track(sleeper.pid, os.getpid())
        info = abi.TRACKED_INFO.unpack(tracked(probes).lookup(abi.TGID.pack(sleeper.pid)))
        assert info == (os.getpid(), 0)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_syscall_in_flight_is_read_through_a_pidfd(probes, tmp_path):
    """The main thread's read of a pipe that blocks: seen in flight (its start, op, fd kind)
    while it blocks, and gone once it returned."""
    r, w = os.pipe()
    # The first read is a gate: the shell may block in it before it is tracked (no record
    # then); the second is entered once tracked.
    reader = subprocess.Popen(["sh", "-c", "read gate; read line; exec sleep 30"], stdin=r)
    os.close(r)

    def blocked_read():
        call = probes.maps.syscalls_in_flight([reader.pid]).get(reader.pid)
        if call and abi.OPS[call[1]] == "read" and abi.TARGETS[call[2]] == "pipe":
            return call
        return None

    try:
        probes.loader.track(reader.pid)
        os.write(w, b"gate\n")
        deadline = time.monotonic() + 10
        while not blocked_read() and time.monotonic() < deadline:
            time.sleep(0.02)  # until the shell blocks in read(0)
        before = time.monotonic_ns()
        call = blocked_read()
        assert call is not None, probes.maps.syscalls_in_flight([reader.pid])
        start = call[0]
        assert start <= before
        os.write(w, b"go\n")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            now = probes.maps.syscalls_in_flight([reader.pid]).get(reader.pid)
            if now is None or now[0] != start:
                break  # returned (the shell may be in another traced syscall since)
            time.sleep(0.02)
        assert now is None or now[0] != start
    finally:
        os.close(w)
        reader.kill()
        reader.wait()
    assert probes.maps.syscalls_in_flight([reader.pid]) == {}  # gone: no entry, no error
