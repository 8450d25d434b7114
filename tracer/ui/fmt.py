"""Formatting for narrow terminal columns (the live view, the interval line)."""

from __future__ import annotations

import time


def short_ns(ns: float | None) -> str:
    """Compact duration: 850ns, 12.3us, 4.56ms, 123ms, 1.20s; '-' for None (3 digits)."""
    if ns is None:
        return "-"
    if ns < 999.5:
        return f"{ns:.0f}ns"
    unit, v = next(((u, ns / k) for u, k in (("us", 1e3), ("ms", 1e6)) if ns / k < 999.5),
                   ("s", ns / 1e9))
    return f"{v:.0f}{unit}" if v >= 99.95 else f"{v:.1f}{unit}" if v >= 9.995 else f"{v:.2f}{unit}"


def clock(ts_ns: int) -> str:
    """Local wall-clock time of a UTC ns timestamp, HH:MM:SS (as dstat prints it)."""
    return time.strftime("%H:%M:%S", time.localtime(ts_ns / 1e9))


def elapsed(seconds: float) -> str:
    """H:MM:SS."""
    s = max(0, int(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def dstat_bytes(n: float | None) -> str:
    """dstat's byte counts in at most 5 characters: 0, 512B, 1.5k, 12k, 345M, 1.2G (1024-based)."""
    if n is None:
        return "-"
    if n < 0.5:
        return "0"
    for unit, scale in (("B", 1), ("k", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        v = n / scale
        if v < 999.5 or unit == "G":
            return f"{v:.0f}{unit}" if v >= 9.95 or unit == "B" else f"{v:.1f}{unit}"
    raise AssertionError("not reached")
