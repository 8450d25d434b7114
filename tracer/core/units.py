"""The units the kernel counts in, in one place: log2 ns latency slots and pages.

A latency histogram has MAX_SLOTS slots (bpf/iotrace.h's IOT_MAX_SLOTS; slots.bpf.h fills them):
slot 0 holds 0 and 1 ns, slot i holds [2^i, 2^(i+1)) ns, the last everything from 2^(MAX_SLOTS-1)
ns (about 9 minutes) up. Pages are this host's: the page size is read here, once.
"""

from __future__ import annotations

import os

from tracer.core.abi_layout import ENUMS

MAX_SLOTS = ENUMS["iot_limits"]["IOT_MAX_SLOTS"]
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")  # the unit of pages_missed and pages_dirtied
PAGE_SHIFT = (PAGE_SIZE - 1).bit_length()  # log2 of PAGE_SIZE (iot_config.page_shift)


def slot_bounds_ns(slot: int) -> tuple[int, int]:
    """[lo, hi) of log2 slot `slot` in ns: slot 0 holds 0 and 1 ns, slot i holds [2^i, 2^(i+1)),
    and the last slot everything from 2^(MAX_SLOTS-1) ns (about 9 minutes) up."""
    hi = (1 << 63) - 1 if slot == MAX_SLOTS - 1 else 1 << (slot + 1)
    return (0 if slot == 0 else 1 << slot), hi


def slot_of(bucket_lo_ns: int) -> int:
    """The log2 slot of a latency row from its `bucket_lo_ns` (`slot_bounds_ns` inverted).

    The rows hold 0 (slot 0, and the page cache's one slot) or 2^i for 1 <= i < MAX_SLOTS,
    which this maps to i; a bound past the last slot (no writer makes one) counts in the last.
    """
    return 0 if bucket_lo_ns <= 1 else min(int(bucket_lo_ns).bit_length() - 1, MAX_SLOTS - 1)
