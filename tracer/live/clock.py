"""Monotonic (bpf_ktime_get_ns) to UTC conversion, measured once at start, and how far the
host's UTC itself may be off (the kernel's NTP state), for joining the traces of several hosts."""

from __future__ import annotations

import time

from tracer.kernel.libbpf import TIME_ERROR, adjtimex


def utc_sync() -> dict:
    """Whether NTP (or chrony, PTP) keeps this host's UTC synchronised, with the kernel's
    maximum and estimated error of it; `synchronised` None where the kernel cannot be asked."""
    try:
        state, max_error_us, estimated_error_us = adjtimex()
    except OSError:
        return {"synchronised": None, "max_error_ns": None, "estimated_error_ns": None}
    return {"synchronised": state != TIME_ERROR, "max_error_ns": max_error_us * 1000,
            "estimated_error_ns": estimated_error_us * 1000}


class Clock:
    """Converts CLOCK_MONOTONIC ns (what BPF timestamps use) to UTC ns since the epoch."""

    def __init__(self) -> None:
        # The offset from the tightest of a few paired readings.
        best = None
        for _ in range(5):
            m0 = time.monotonic_ns()
            r = time.time_ns()
            m1 = time.monotonic_ns()
            if best is None or m1 - m0 < best[0]:
                best = (m1 - m0, r - (m0 + m1) // 2)
        assert best is not None
        self.offset_ns = best[1]
        self.uncertainty_ns = best[0]

    def to_utc_ns(self, monotonic_ns: int) -> int:
        return monotonic_ns + self.offset_ns

    def now_ns(self) -> int:
        return time.monotonic_ns() + self.offset_ns

    def meta(self) -> dict:
        return {"bpf_clock": "CLOCK_MONOTONIC", "monotonic_to_utc_offset_ns": self.offset_ns,
                "offset_uncertainty_ns": self.uncertainty_ns, "utc_sync": utc_sync()}
