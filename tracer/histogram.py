"""Log2 latency histograms: percentiles and text rendering (biolatency style).

A histogram is a sequence of operation counts per log2 ns slot (see abi.slot_bounds_ns).
Percentiles interpolate linearly inside the slot where the rank falls, which bounds the error
by the slot's width (a factor of two); exact ranks would need every sample.
"""

from __future__ import annotations

from collections.abc import Sequence

from tracer.abi import slot_bounds_ns

BAR_WIDTH = 40


def percentile_ns(counts: Sequence[int], q: float) -> float | None:
    """The q-th percentile (0 < q <= 100) in ns, or None for an empty histogram."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q / 100.0 * total
    seen = 0
    for slot, n in enumerate(counts):
        if n and seen + n >= rank:
            lo, hi = slot_bounds_ns(slot)
            if slot == len(counts) - 1:
                return float(lo)  # open-ended last slot: its lower bound is all we know
            return lo + (hi - lo) * max(rank - seen, 0) / n
        seen += n
    return float(slot_bounds_ns(len(counts) - 1)[0])


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
