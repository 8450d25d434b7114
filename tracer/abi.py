"""Python twin of bpf/iotrace.h: constants, names and record layouts shared with the kernel side.

Every constant names its twin in the C header; tests/test_abi.py compiles the header and checks
sizes and offsets against the struct formats here. Decoding is pure: bytes in, values out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

MAX_SLOTS = 40  # IOT_MAX_SLOTS
COMM_LEN = 16  # IOT_COMM_LEN

# enum iot_layer
LAYERS = {1: "syscall", 2: "block", 3: "block_queue"}
# enum iot_op
OPS = {0: "read", 1: "write", 2: "fsync", 3: "flush", 4: "discard", 5: "other"}
# enum iot_target (0: IOT_TARGET_NONE, not a syscall row)
TARGETS = {0: None, 1: "file", 2: "pipe", 3: "socket", 4: "other"}
# enum iot_attribution (0: IOT_ATTR_NONE, not a block row)
ATTRIBUTIONS = {0: None, 1: "direct", 2: "writeback", 3: "readahead", 4: "unknown"}
# enum iot_event_kind
EVENT_FORK, EVENT_EXEC, EVENT_EXIT = 1, 2, 3

# struct iot_config
CONFIG = struct.Struct("<B7x")
# struct hist_key: tgid, dev, layer, op, target, attribution
HIST_KEY = struct.Struct("<IIBBBB")
# struct hist: u64 count[MAX_SLOTS]; u64 bytes[MAX_SLOTS]
HIST_SIZE = 2 * 8 * MAX_SLOTS
# struct iot_proc_event: kind, pid, ppid, exit_code, ts_ns, comm
PROC_EVENT = struct.Struct(f"<IIIiQ{COMM_LEN}s")
# tracked map: u32 tgid -> u32 root tgid
TGID = struct.Struct("<I")


@dataclass(frozen=True)
class HistKey:
    """Which histogram: a process, a layer, an op, and the fd kind or the disk."""

    pid: int
    dev: int  # kernel dev_t (major << 20 | minor), 0 outside block layers
    layer: str
    op: str
    target: str | None
    attribution: str | None


@dataclass(frozen=True)
class ProcEvent:
    kind: int
    pid: int
    ppid: int
    exit_code: int
    ts_ns: int  # CLOCK_MONOTONIC
    comm: str


def decode_hist_key(raw: bytes) -> HistKey:
    tgid, dev, layer, op, target, attr = HIST_KEY.unpack(raw)
    return HistKey(tgid, dev, LAYERS.get(layer, "other"), OPS.get(op, "other"),
                   TARGETS.get(target), ATTRIBUTIONS.get(attr))


def decode_hist(raw: bytes) -> np.ndarray:
    """(2, MAX_SLOTS) uint64 array: row 0 operation counts, row 1 bytes, per log2 ns slot."""
    return np.frombuffer(raw, dtype="<u8").reshape(2, MAX_SLOTS).copy()


def decode_proc_event(raw: bytes) -> ProcEvent:
    kind, pid, ppid, code, ts, comm = PROC_EVENT.unpack_from(raw)
    return ProcEvent(kind, pid, ppid, code, ts, comm.split(b"\0", 1)[0].decode(errors="replace"))


def slot_bounds_ns(slot: int) -> tuple[int, int]:
    """[lo, hi) of log2 slot `slot` in ns: slot 0 holds 0 and 1 ns, slot i holds [2^i, 2^(i+1)),
    and the last slot everything from 2^(MAX_SLOTS-1) ns (about 9 minutes) up."""
    hi = (1 << 63) - 1 if slot == MAX_SLOTS - 1 else 1 << (slot + 1)
    return (0 if slot == 0 else 1 << slot), hi


def dev_major_minor(dev: int) -> tuple[int, int]:
    """Splits a kernel-internal dev_t (MINORBITS = 20)."""
    return dev >> 20, dev & ((1 << 20) - 1)
