"""The kernel boundary's four stages, made and closed together: the one handle the live session,
the doctor and the scripts hold.

Split by concern, as cilium/ebpf keeps its ring reader, maps and links apart:
:class:`~tracer.kernel.loader.Loader` (the object: programs chosen, loaded, attached; track and
free_slot runs; pidfds), :class:`~tracer.kernel.maps.Maps` (reads into a reading),
:class:`~tracer.kernel.stats.BpfStats` (BPF statistics) and
:class:`~tracer.kernel.ring.EventRing` (the event ring). :class:`Probes` only wires them: the
maps and the ring exist once the object is loaded, so those who are made before the load (the
cost reader, the forgetter, discovery) hold this and reach a stage when they use it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tracer.kernel.loader import BPF_DIR, Loader
from tracer.kernel.maps import Maps
from tracer.kernel.ring import EventRing
from tracer.kernel.stats import BpfStats
from tracer.kernel.uprobes import CudaProbes


class Probes:
    """`loader`, and once loaded, `maps`, `ring` and `cuda` (the uprobes on the CUDA driver
    libraries the traced processes map); `stats` from the start."""

    def __init__(self, bpf_dir: Path = BPF_DIR, slow_ns: int = 0, auto_discover: bool = False,
                 map_sizes: dict[str, int] | None = None):
        """Raises loader.BadSetting when IOTRACE_MAP_SIZES is malformed (Loader)."""
        self.loader = Loader(bpf_dir, slow_ns, auto_discover, map_sizes)
        self.stats = BpfStats(self.loader)
        self.maps: Maps | None = None
        self.ring: EventRing | None = None
        self.cuda: CudaProbes | None = None
        self.cuda_launches = False  # count cuLaunchKernel too (costly: uprobes.LAUNCH_SYMBOLS)
        self.cuda_note: Callable[[str], None] | None = None  # what CudaProbes says once

    def load(self) -> None:
        """Loads the object (raises loader.HostCannotTrace), then opens its maps and ring."""
        self.loader.load()
        self.maps, self.ring = Maps(self.loader), EventRing(self.loader)
        self.cuda = CudaProbes(self.loader.obj, self.cuda_launches, self.cuda_note)

    def close(self) -> None:
        """Detaches and frees everything; safe to call twice."""
        if self.cuda is not None:
            self.cuda.close()
        self.loader.detach()
        if self.ring is not None:
            self.ring.close()
        if self.maps is not None:
            self.maps.close()
        self.loader.close()
        self.stats.pause()  # closing the fd: the kernel restores bpf_stats_enabled
