"""Sinks: where each interval goes (Parquet segments, Prometheus, CSV, the terminal views).

Every sink takes the same `Interval` (tracer.core.interval) once per interval, the run's last
one included (`interval.final`), and is closed once at the end, or when the run fails.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tracer.core.interval import Interval


class Sink(Protocol):
    def write(self, interval: Interval) -> None:
        """One interval; after the `final` one, only close() comes."""

    def close(self) -> None:
        """Releases what the sink holds; safe to call twice, and without a final interval."""
