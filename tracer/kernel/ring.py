"""The event ring: the kernel boundary's stage that hands iotrace's ring-buffer records (process
lifecycle, first sight of a file, slow operations) to a callback as raw bytes, and counts the
records the kernel dropped because the ring was full."""

from __future__ import annotations

from collections.abc import Callable

from tracer.core import abi
from tracer.kernel import libbpf as _libbpf
from tracer.kernel.libbpf import Map, RingBuffer
from tracer.kernel.loader import Loader


class EventRing:
    """The `events` ring buffer of a loaded Loader, and its `events_lost` count."""

    def __init__(self, loader: Loader):
        self._fd = loader.map_fd("events")
        self._lost = Map(loader.map_fd("events_lost"), 4, 8 * _libbpf.num_possible_cpus())
        self._ring: RingBuffer | None = None

    def open(self, on_event: Callable[[bytes], None]) -> None:
        """`on_event(raw)` runs for every record during poll() (abi.event_kind says which)."""
        self._ring = RingBuffer(self._fd, on_event)

    def poll(self, timeout_ms: int) -> int:
        return self._ring.poll(timeout_ms) if self._ring else 0

    def lost(self) -> int:
        """Records dropped because the ring was full, cumulative (summed over CPUs)."""
        return abi.percpu_u64_sum(self._lost.lookup(bytes(4)))

    def close(self) -> None:
        if self._ring:
            self._ring.close()
            self._ring = None
