"""Log2 latency histograms: percentiles and text rendering (biolatency style).

A histogram is a sequence of operation counts per log2 ns slot (see abi.slot_bounds_ns).
Percentiles interpolate linearly inside the slot where the rank falls, which bounds the error
by the slot's width (a factor of two); exact ranks would need every sample. Where the trace knows
the slowest operation (`files.latency_max_ns` covers every file syscall of a process), the
estimate stays at or below it: four fsyncs of 2.5 s are p50 2.5 s, not the slot's middle.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tracer.core.abi import slot_bounds_ns

BAR_WIDTH = 40


def percentile_ns(counts: Sequence[int], q: float, max_ns: float | None = None) -> float | None:
    """The q-th percentile (0 < q <= 100) in ns, or None for an empty histogram; never above
    `max_ns`, the slowest operation seen, when it is known."""
    total = sum(counts)
    if total == 0:
        return None
    value = _percentile(counts, q, total)
    top = max(i for i, n in enumerate(counts) if n)
    # the slowest operation lies in the highest non-empty slot; a maximum below it is not this
    # histogram's and is ignored
    if max_ns and max_ns >= slot_bounds_ns(top)[0]:
        return min(value, float(max_ns))
    return value


def _percentile(counts: Sequence[int], q: float, total: int) -> float:
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


class MaxSeen:
    """The slowest file syscall per (pid, op), from `files` rows: known for a series only when
    those rows cover every operation of its histogram (`known`), since a file that was not in
    the kernel's per-file map, or a row whose maximum was not read, has ops the rows lack."""

    def __init__(self) -> None:
        self.ops: dict[tuple[int, str], int] = {}
        self.max_ns: dict[tuple[int, str], int] = {}
        self.unknown: set[tuple[int, str]] = set()

    def add(self, pid: int, op: str, ops: int, max_ns: int) -> None:
        if not ops:
            return
        key = (pid, op)
        self.ops[key] = self.ops.get(key, 0) + ops
        if max_ns > 0:
            self.max_ns[key] = max(self.max_ns.get(key, 0), max_ns)
        else:
            self.unknown.add(key)

    def add_rows(self, rows: Iterable[dict]) -> MaxSeen:
        for r in rows:
            self.add(int(r["pid"]), str(r["op"]), int(r["ops"]), int(r["latency_max_ns"]))
        return self

    def known(self, series: dict[tuple[int, str], int]) -> int | None:
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
