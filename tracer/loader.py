"""Loads iotrace's BPF objects, attaches them, and reads their maps: the only user of libbpf.

The straight line is load -> track -> attach -> (read maps, poll events)* -> close. One
:class:`Probes` owns every object, link and ring buffer; closing it detaches everything (links are
fd-based, so a killed iotrace leaves nothing attached either).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

from tracer import _libbpf, abi
from tracer._libbpf import BpfObject, LibbpfError, LibbpfMissing, Link, Map, RingBuffer

BPF_DIR = Path(__file__).parent / "bpf"
TRACEFS = "/sys/kernel/tracing"

# Syscall tracepoints of each enter program of syscall.bpf.c; one exit program takes them all.
SYSCALLS = {
    "sys_enter_read": ("read", "pread64", "readv", "preadv", "preadv2"),
    "sys_enter_write": ("write", "pwrite64", "writev", "pwritev", "pwritev2"),
    "sys_enter_fsync": ("fsync", "fdatasync"),
}
SYSCALL_EXIT = "sys_exit_io"
OBJECTS = ("proc", "syscall", "block")  # proc first: it creates the shared maps
SHARED_MAPS = ("tracked", "hists", "events", "events_lost")
# Test and debugging knob: comma-separated fallbacks to force on a kernel that has the better
# path, so the fallbacks are exercised too: "raw_tp" (no tp_btf), "no_block_io_start".
FORCE_ENV = "IOTRACE_FORCE"


class HostCannotTrace(RuntimeError):
    """This host cannot run iotrace's programs (privilege, BTF, libbpf, tracefs)."""


def ensure_tracefs() -> None:
    """Classic tracepoints need tracefs; mount it where it is missing (we are root by now)."""
    if os.path.exists(f"{TRACEFS}/events"):
        return
    rc = os.system(f"mount -t tracefs nodev {TRACEFS} 2>/dev/null")
    if rc != 0 or not os.path.exists(f"{TRACEFS}/events"):
        raise HostCannotTrace(
            f"tracefs is not mounted at {TRACEFS} and mounting it failed: "
            f"run 'mount -t tracefs nodev {TRACEFS}' (in a container: -v {TRACEFS}:{TRACEFS})"
        )


def _tracepoint_of(section: str) -> str:
    return section.split("/", 1)[1]


class Probes:
    """iotrace's BPF programs and maps, loaded into the kernel."""

    def __init__(self, bpf_dir: Path = BPF_DIR):
        self.bpf_dir = bpf_dir
        self.objects: dict[str, BpfObject] = {}
        self.links: list[Link] = []
        self.features: dict[str, str] = {}
        self._ring: RingBuffer | None = None
        self.tracked: Map | None = None
        self.hists: Map | None = None
        self._lost: Map | None = None

    # -- load ---------------------------------------------------------------------------------
    def load(self) -> None:
        """Opens and loads every object; raises HostCannotTrace with the reason."""
        try:
            _libbpf.lib()
        except LibbpfMissing as e:
            raise HostCannotTrace(
                f"{e}: install libbpf >= 1.0 (Debian: apt-get install libbpf1)"
            ) from None
        ensure_tracefs()
        shared: dict[str, int] = {}
        try:
            for name in OBJECTS:
                path = self.bpf_dir / f"{name}.bpf.o"
                if not path.exists():
                    raise HostCannotTrace(f"{path} is missing: build it with 'make build'")
                obj = BpfObject(str(path))
                self.objects[name] = obj
                self._choose_programs(obj)
                if name == "block":
                    obj.set_config(abi.CONFIG.pack(int(self.features["block_io_start"] != "missing")))
                for m, fd in shared.items():
                    obj.reuse_map(m, fd)
                obj.load()
                if not shared:
                    shared = {m: obj.map_fd(m) for m in SHARED_MAPS}
        except LibbpfError as e:
            self.close()
            detail = "; ".join(_libbpf.recent_log()[-3:])
            hint = ""
            if e.errno in (errno.EPERM, errno.EACCES):
                hint = " (needs root, or CAP_BPF and CAP_PERFMON)"
            raise HostCannotTrace(f"cannot load BPF programs: {e}{hint}. {detail}".strip()) from None
        self.tracked = Map(shared["tracked"], abi.TGID.size, abi.TGID.size)
        self.hists = Map(shared["hists"], abi.HIST_KEY.size, abi.HIST_SIZE)
        ncpu = _libbpf.num_possible_cpus()
        self._lost = Map(shared["events_lost"], 4, 8 * ncpu)

    def _choose_programs(self, obj: BpfObject) -> None:
        """Keeps the tp_btf twin of each program where the kernel's BTF has the tracepoint,
        the raw_tp twin elsewhere; drops both when the tracepoint does not exist at all."""
        force = set(os.environ.get(FORCE_ENV, "").split(","))
        for prog in obj.programs():
            sec = prog.section
            if not sec.startswith(("tp_btf/", "raw_tp/")):
                continue
            tp = _tracepoint_of(sec)
            btf = _libbpf.has_btf_tracepoint(tp) and "raw_tp" not in force
            exists = _libbpf.has_btf_tracepoint(tp) or os.path.exists(
                f"{TRACEFS}/events/block/{tp}") or not tp.startswith("block_io_")
            if tp == "block_io_start" and "no_block_io_start" in force:
                exists = False
            if not exists:
                self.features[tp] = "missing"
                prog.autoload = False
            elif sec.startswith("tp_btf/"):
                prog.autoload = btf
            else:
                prog.autoload = not btf
            if prog.autoload:
                self.features[tp] = sec.split("/", 1)[0]

    # -- tracking and attaching -----------------------------------------------------------------
    def track(self, pid: int, root: int = 0) -> None:
        """Adds a process (TGID) to the in-kernel filter; its future children follow by fork."""
        assert self.tracked is not None
        self.tracked.update(abi.TGID.pack(pid), abi.TGID.pack(root))

    def tracked_pids(self) -> set[int]:
        assert self.tracked is not None
        return {abi.TGID.unpack(k)[0] for k in self.tracked.all_keys()}

    def attach(self) -> None:
        """Attaches every loaded program; raises HostCannotTrace on failure (nothing stays)."""
        try:
            for name, obj in self.objects.items():
                for prog in obj.programs():
                    if not prog.autoload:
                        continue
                    if name == "syscall":
                        self._attach_syscall(prog)
                    else:
                        self.links.append(prog.attach())
        except LibbpfError as e:
            self.detach()
            raise HostCannotTrace(f"cannot attach: {e}") from None

    def _attach_syscall(self, prog) -> None:
        if prog.name == SYSCALL_EXIT:
            names = [n for group in SYSCALLS.values() for n in group]
            points = [f"sys_exit_{n}" for n in names]
        else:
            points = [f"sys_enter_{n}" for n in SYSCALLS[prog.name]]
        for tp in points:
            if os.path.exists(f"{TRACEFS}/events/syscalls/{tp}"):  # e.g. no preadv2 on old kernels
                self.links.append(prog.attach_tracepoint("syscalls", tp))

    def detach(self) -> None:
        for link in self.links:
            link.destroy()
        self.links.clear()

    # -- reading ----------------------------------------------------------------------------------
    def read_hists(self) -> dict[bytes, bytes]:
        """Cumulative histograms by raw key (see abi.decode_hist_key / abi.decode_hist)."""
        assert self.hists is not None
        return dict(self.hists.items())

    def delete_hists(self, keys: list[bytes]) -> None:
        assert self.hists is not None
        for k in keys:
            self.hists.delete(k)

    def events_lost(self) -> int:
        """Ring-buffer records dropped because it was full (summed over CPUs)."""
        assert self._lost is not None
        raw = self._lost.lookup(b"\0\0\0\0")
        return sum(int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw), 8)) if raw else 0

    def open_events(self, on_event: Callable[[abi.ProcEvent], None]) -> None:
        fd = self.objects["proc"].map_fd("events")
        self._ring = RingBuffer(fd, lambda raw: on_event(abi.decode_proc_event(raw)))

    def poll_events(self, timeout_ms: int) -> int:
        return self._ring.poll(timeout_ms) if self._ring else 0

    def close(self) -> None:
        """Detaches and frees everything; safe to call twice."""
        self.detach()
        if self._ring:
            self._ring.close()
            self._ring = None
        for obj in self.objects.values():
            obj.close()
        self.objects.clear()
