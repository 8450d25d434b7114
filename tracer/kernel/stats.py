"""The kernel's per-program BPF statistics (BPF_ENABLE_STATS): iotrace's own cost, counted by the
kernel while they are on. A stage of the kernel boundary of its own: the statistics outlive a
load (they are turned on and off through an fd of their own) and read only the loaded programs."""

from __future__ import annotations

import errno
import os
import time

from tracer.kernel import libbpf as _libbpf
from tracer.kernel.libbpf import LibbpfError, LibbpfMissing, ProgStats
from tracer.kernel.loader import UPROBE_SECTIONS, Loader

STATS_SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"


class BpfStats:
    """Turns the statistics on and off, and reads them for the programs of `loader`."""

    def __init__(self, loader: Loader):
        self._loader = loader
        self._fd: int | None = None
        self._since: float | None = None  # monotonic time stats were last turned on
        self._s = 0.0  # seconds they were on before that
        self.before: int | None = None  # kernel.bpf_stats_enabled before enable()

    def enable(self) -> str | None:
        """Turns on the kernel's per-program run counts and times for as long as these probes
        are open (the kernel restores kernel.bpf_stats_enabled when they close, even on kill
        -9). Returns None, or why per-program cost is unavailable. Called again after
        pause() (every interval with --bpf-stats sampled), it only takes a new fd."""
        if self._fd is not None:
            return None
        if self._since is None:  # the first time: what the host had before iotrace
            try:
                with open(STATS_SYSCTL) as f:
                    self.before = int(f.read().strip() or 0)
            except (OSError, ValueError):
                self.before = None
        try:
            _libbpf.lib()
            self._fd = _libbpf.enable_stats()
            self._since = time.monotonic()
        except LibbpfMissing as e:
            return str(e)
        except LibbpfError as e:
            if e.errno == errno.EPERM:
                return "BPF_ENABLE_STATS needs CAP_SYS_ADMIN"
            if e.errno == errno.EINVAL:
                return "this kernel has no BPF_ENABLE_STATS (Linux 5.8+)"
            return str(e)
        return None

    def pause(self) -> None:
        """Turns the per-program statistics off again (enable turns them back on): the
        kernel's two clock reads per program run cost more than some of the programs do.
        Closing the fd is what turns them off: the kernel restores bpf_stats_enabled."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self._s += time.monotonic() - self._since

    @property
    def seconds(self) -> float:
        """Seconds the per-program statistics have been on so far (what the counts cover)."""
        on = time.monotonic() - self._since if self._fd is not None else 0.0
        return self._s + on

    def program_stats(self) -> list[tuple[str, str, str, ProgStats]]:
        """(stage, program name, section, cumulative stats) of every loaded program, the stage
        being the bpf/ source it came from (proc, syscall, pagecache, block, sched). Counts
        are since load, and only while stats were on (elsewhere, all 0)."""
        obj = self._loader.obj
        if obj is None:
            return []
        out = [(self._loader.stages.get(prog.name, "iotrace"), prog.name, prog.section,
                _libbpf.prog_stats(prog.fd)) for prog in obj.programs() if prog.autoload]
        # the CUDA uprobes once they ran: a job that maps no CUDA driver reads as before
        return [p for p in out if p[2] not in UPROBE_SECTIONS or p[3].run_cnt]
