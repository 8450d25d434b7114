"""Log2 latency histograms: percentiles and text rendering (biolatency style).

A histogram is a sequence of operation counts per log2 ns slot (the slot rule: core/units).
The q-th percentile is the operation of rank ceil(q/100 * total) (nearest rank: the p50 of three
is the second, of two the first), placed inside its slot as if the slot's operations were spread
evenly, each in the middle of its share of the slot. That bounds the error by the slot's width (a
factor of two) and keeps the value in the slot of the operation of that rank, never on the bound
of the next slot up; exact values would need every sample. Where the trace knows
the slowest operation (`files.latency_max_ns` covers every file syscall of a process), the
estimate stays at or below it: four fsyncs of 2.5 s are p50 2.5 s, not the slot's middle.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Generic, TypeVar

from tracer.core.units import MAX_SLOTS, slot_bounds_ns

BAR_WIDTH = 40


OPEN_SLOT_LO_NS = slot_bounds_ns(MAX_SLOTS - 1)[0]
"""Lower bound of the last, open-ended slot (about 9 minutes and up)."""
_LO_NS = [slot_bounds_ns(slot)[0] for slot in range(MAX_SLOTS)]
_HI_NS = [slot_bounds_ns(slot)[1] for slot in range(MAX_SLOTS)]


def percentile_ns(counts: Sequence[int], q: float, max_ns: float | None = None) -> float | None:
    """The q-th percentile (0 < q <= 100) in ns of a histogram of counts per slot, or None for
    an empty one; never above `max_ns`, the slowest operation seen, when it is known."""
    n = len(counts)  # MAX_SLOTS of them, or fewer: the slots from 0 up
    return interpolate(_LO_NS[:n], _HI_NS[:n], counts, q, max_ns)


def interpolate(lo: Sequence[int], hi: Sequence[int], counts: Sequence[int], q: float,
                max_ns: float | None = None) -> float | None:
    """The q-th percentile (0 < q <= 100) in ns of the histogram whose buckets [lo, hi), sorted
    by lo, hold `counts`; None when they hold nothing.

    The operation of rank ``k = ceil(q/100 * total)`` (1-based) is the j-th of the n in its
    bucket; its value is taken as ``lo + (hi - lo) * (j - 1/2) / n``, the middle of its n-th of
    the bucket, so it lies inside that bucket (a rank at the end of a bucket is not given the
    next bucket's lower bound). The open-ended last slot gives its lower bound. Capped at
    `max_ns` when that is known and lies in the highest non-empty bucket or above (a maximum
    below it is not this histogram's).
    """
    total = sum(counts)
    if total == 0:
        return None
    rank = _nearest_rank(q, total)
    seen = 0
    value = None
    top = 0  # the highest non-empty bucket
    for i, n in enumerate(counts):
        if not n:
            continue
        top = i
        if value is None and seen + n >= rank:
            b_lo, b_hi = int(lo[i]), int(hi[i])
            if b_lo >= OPEN_SLOT_LO_NS:
                value = float(b_lo)  # open-ended: its lower bound is all we know
            else:
                value = b_lo + (b_hi - b_lo) * (rank - seen - 0.5) / n
        seen += n
    if value is None:  # (rank <= total: not reached)
        value = float(lo[top])
    if max_ns and max_ns >= int(lo[top]):
        return min(value, float(max_ns))
    return value


def _nearest_rank(q: float, total: int) -> int:
    """The 1-based rank of the q-th percentile of `total` operations, 1 to total. The product
    is rounded to 9 digits first, so that 29/100 * 100 (28.999999999999996) is rank 29."""
    return min(max(math.ceil(round(q / 100.0 * total, 9)), 1), total)


K = TypeVar("K", bound=Hashable)
J = TypeVar("J", bound=Hashable)


class MaxSeen(Generic[K]):
    """The slowest file syscall per key ((pid, op) by default), from `files` rows: known for a
    series only when those rows cover every operation of its histogram (`known`), since a file
    that was not in the kernel's per-file map, or a row whose maximum was not read, has ops the
    rows lack."""

    __slots__ = ("max_ns", "ops", "unknown")  # (one in each of the summary's file totals)

    def __init__(self) -> None:
        self.ops: dict[K, int] = {}
        self.max_ns: dict[K, int] = {}
        self.unknown: set[K] = set()

    def add(self, pid: int, op: str, ops: int, max_ns: int) -> None:
        self.add_key((pid, op), ops, max_ns)

    def add_key(self, key: K, ops: int, max_ns: int) -> None:
        """`ops` operations under `key`, the slowest `max_ns` (0 or less: not known)."""
        if not ops:
            return
        self.ops[key] = self.ops.get(key, 0) + ops
        if max_ns > 0:
            self.max_ns[key] = max(self.max_ns.get(key, 0), max_ns)
        else:
            self.unknown.add(key)

    def add_rows(self, rows: Iterable[Mapping[str, object]]) -> MaxSeen[K]:
        for r in rows:
            self.add(int(r["pid"]), str(r["op"]), int(r["ops"]), int(r["latency_max_ns"]))
        return self

    def merge(self, other: MaxSeen[J], key: Callable[[J], K]) -> None:
        """Adds `other`'s operations, each under `key` of its own key."""
        for k, n in other.ops.items():
            self.add_key(key(k), n, 0 if k in other.unknown else other.max_ns.get(k, 0))

    def known(self, series: Mapping[K, int]) -> int | None:
        """The slowest of the operations counted in `series` ((pid, op) -> ops in the
        histograms of file syscalls), or None when the rows do not cover them all."""
        out = 0
        for key, n in series.items():
            if not n:
                continue
            if key in self.unknown or self.ops.get(key) != n or key not in self.max_ns:
                return None
            out = max(out, self.max_ns[key])
        return out or None


def format_ns(ns: float | None) -> str:
    """Human duration: 850 ns, 12.3 us, 4.56 ms, 1.20 s."""
    if ns is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.0f} ns"


def format_bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _bound(ns: int) -> str:
    for unit, scale in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns} ns"


def render(counts: Sequence[int]) -> list[str]:
    """Lines of a biolatency-style table: range, count, bar; only the span of non-empty slots."""
    used = [i for i, n in enumerate(counts) if n]
    if not used:
        return []
    top = max(counts)
    lines = [f"{'latency':>25} : {'count':<9} distribution"]
    for slot in range(used[0], used[-1] + 1):
        lo, hi = slot_bounds_ns(slot)
        span = f"{_bound(lo)} -> {_bound(hi) if slot < len(counts) - 1 else 'inf'}"
        stars = "*" * (round(counts[slot] * BAR_WIDTH / top) if top else 0)
        lines.append(f"{span:>25} : {counts[slot]:<9} |{stars:<{BAR_WIDTH}}|")
    return lines
