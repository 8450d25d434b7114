"""Uprobes on the CUDA driver library that traced processes map (bpf/cuda.bpf.c's programs).

A uprobe belongs to a file, not to a process: the kernel puts its breakpoint in every mapping
of that inode, so each driver library FILE is attached once, whatever number of processes map
it, and cuda.bpf.c keeps the traced processes' calls (the tracked set) and drops the others'.
A forked worker shares its parent's mappings, so its calls are counted with nothing more to do.

:meth:`CudaProbes.scan` finds the library in the maps of processes (/proc/PID/maps) and
attaches the files it has not seen. A process is read once it maps the library; one that does
not yet (the driver is loaded at the first CUDA call, by dlopen, often seconds after start) is
read again only when the size of the executable code it maps has changed since (VmLib in
/proc/PID/status): a dlopen maps the library's code, which changes it, while the memory a
process allocates does not (a DataLoader worker's virtual size changes every second), so a
process that maps no new code costs one small read per scan, not its whole maps.

The file is opened through /proc/PID/map_files/ (the very inode the process mapped, also in a
container, under overlayfs or when the file was replaced since), else /proc/PID/root + its
path. Each exported name gets a uretprobe, then a uprobe, both with the call's kind
(enum iot_cuda_call) as the attach cookie: a call that enters after its uprobe is attached
finds its return probed. A name the library does not export is left out, said once.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tracer.core import abi
from tracer.kernel.libbpf import BpfObject, LibbpfError, Link, Map, num_possible_cpus

# The driver library's file names: libcuda.so.1 is a link to libcuda.so.<driver version>,
# and /proc/PID/maps names the file the link resolved to.
LIBRARY_NAME = re.compile(r"libcuda\.so(\.\d+)*$")
ENTER, EXIT = "cuda_enter", "cuda_exit"  # cuda.bpf.c's programs
# Exported name -> the call kind its probes count (abi.CUDA_CALLS). The "_ptsz"/"_ptds" names
# are the per-thread-default-stream twins that a program built with that option calls; they are
# probed where they exist, and their absence is not worth a note.
SYNC_SYMBOLS = {
    "cuStreamSynchronize": "stream_sync", "cuStreamSynchronize_ptsz": "stream_sync",
    "cuCtxSynchronize": "ctx_sync",
    "cuEventSynchronize": "event_sync",
    "cuMemcpyDtoH_v2": "dtoh", "cuMemcpyDtoH_v2_ptds": "dtoh",
    "cuMemcpyHtoD_v2": "htod", "cuMemcpyHtoD_v2_ptds": "htod",
    "cuMemcpyDtoD_v2": "dtod", "cuMemcpyDtoD_v2_ptds": "dtod",
    "cuMemcpy": "copy", "cuMemcpy_ptds": "copy",
    "cuMemcpyDtoHAsync_v2": "dtoh_async", "cuMemcpyDtoHAsync_v2_ptsz": "dtoh_async",
    "cuMemcpyHtoDAsync_v2": "htod_async", "cuMemcpyHtoDAsync_v2_ptsz": "htod_async",
    "cuMemcpyDtoDAsync_v2": "dtod_async", "cuMemcpyDtoDAsync_v2_ptsz": "dtod_async",
    "cuMemcpyAsync": "copy_async", "cuMemcpyAsync_ptsz": "copy_async",
}
# Kernel launches: an entry uprobe only, and only when asked for. A launch-bound loop calls
# cuLaunchKernel 10^5 times a second; each hit is a breakpoint trap into the kernel
# (docs/benchmarks.md measures it), more than the 1 % a tracer may cost such a loop.
# cuLaunchKernelEx: the launch with attributes (clusters, ...), which CUDA 12's runtime may call
# instead; older drivers lack it, which is not worth a note.
LAUNCH_SYMBOLS = {"cuLaunchKernel": "launch", "cuLaunchKernel_ptsz": "launch",
                  "cuLaunchKernelEx": "launch", "cuLaunchKernelEx_ptsz": "launch"}
OPTIONAL_SUFFIXES = ("_ptsz", "_ptds", "KernelEx")


@dataclass
class Library:
    """One driver library file, attached."""

    dev: int  # the file's device and inode, as /proc/PID/maps shows them (the kernel's)
    ino: int
    path: str  # as the first process seen with it names it
    pid: int  # that process
    links: list[Link] = field(default_factory=list)  # the uprobes on the names' entries
    returns: list[Link] = field(default_factory=list)  # and the uretprobes
    attached: list[str] = field(default_factory=list)  # exported names probed
    missing: list[str] = field(default_factory=list)  # names of the table it does not export
    opened: str | None = None  # the path its uprobes were attached by (None: could not open)
    launch_links: list[Link] = field(default_factory=list)  # sampled launches (set_launches)


@dataclass(frozen=True)
class Mapping:
    """A mapping of a driver library in a process."""

    dev: int
    ino: int
    path: str  # the process's name for the file
    span: str  # "start-end" of the mapping, its name under /proc/PID/map_files/


def _dev(text: str) -> int:
    """A "major:minor" of /proc/PID/maps (hex) as a number (major << 20 | minor, the kernel's)."""
    major, minor = text.split(":")
    return int(major, 16) << 20 | int(minor, 16)


def library_mappings(maps_text: str, name: re.Pattern[str] = LIBRARY_NAME) -> list[Mapping]:
    """The driver library files a /proc/PID/maps text maps, one Mapping per file (its first)."""
    out: dict[tuple[int, int], Mapping] = {}
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or parts[4] == "0":
            continue
        path = parts[5].removesuffix(" (deleted)")
        if not name.search(path.rsplit("/", 1)[-1]):
            continue
        key = (_dev(parts[3]), int(parts[4]))
        out.setdefault(key, Mapping(*key, path, parts[0]))
    return list(out.values())


def _code_size(pid: int) -> int | None:
    """The size of the executable code the process maps besides its program's (VmLib, kB, of
    /proc/PID/status), None when it is gone; -1 when not said (a kernel thread)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read()
    except OSError:
        return None
    at = status.find(b"\nVmLib:")
    return int(status[at + 7:status.index(b"k", at)]) if at >= 0 else -1


def _read_maps(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/maps") as f:
            return f.read()
    except OSError:
        return None


class CudaProbes:
    """The driver libraries of traced processes, each attached once, and the per-thread
    counters that cuda.bpf.c keeps for them."""

    def __init__(self, obj: BpfObject, launches: bool = False,
                 note: Callable[[str], None] | None = None,
                 name: re.Pattern[str] = LIBRARY_NAME):
        """`obj`: the loaded object (Loader.obj). `launches`: count cuLaunchKernel too (a
        uprobe per launch: LAUNCH_SYMBOLS says what it costs). `note`: where what is said
        once goes (a name a library lacks, a file that could not be probed)."""
        self._enter, self._exit = obj.program(ENTER), obj.program(EXIT)
        self.threads = Map(obj.map_fd("cuda_threads"), abi.TGID.size, abi.CUDA_THREAD.size)
        self._full = Map(obj.map_fd("cuda_full"), 4, 8 * num_possible_cpus())
        self.symbols = {**SYNC_SYMBOLS, **(LAUNCH_SYMBOLS if launches else {})}
        self.notes: list[str] = []
        self._note = note
        self._name = name
        self.libraries: dict[tuple[int, int], Library] = {}
        self._with: set[int] = set()  # processes seen mapping a driver library: not read again
        self._without: dict[int, int] = {}  # the others, by the code size they had then
        self.launching = False  # the launches' uprobes attached for a sample (set_launches)

    def _say(self, text: str) -> None:
        self.notes.append(text)
        if self._note is not None:
            self._note(text)

    # -- finding and attaching ---------------------------------------------------------------
    def scan(self, pids: Iterable[int]) -> list[Library]:
        """Attaches the driver libraries that processes `pids` map and no earlier scan found;
        returns those newly attached. Cheap for processes already seen (see the module)."""
        new = []
        for pid in pids:
            if pid in self._with:
                continue
            size = _code_size(pid)
            if size is None or self._without.get(pid) == size:
                continue
            text = _read_maps(pid)
            found = library_mappings(text, self._name) if text is not None else []
            if not found:
                self._without[pid] = size
                continue
            self._without.pop(pid, None)
            self._with.add(pid)
            for m in found:
                if (m.dev, m.ino) not in self.libraries:
                    new.append(self._attach(pid, m))
        return new

    def forget(self, pids: Iterable[int]) -> None:
        """Processes gone: their pids may come back as other processes."""
        for pid in pids:
            self._with.discard(pid)
            self._without.pop(pid, None)

    def _attach(self, pid: int, m: Mapping) -> Library:
        lib = self.libraries[m.dev, m.ino] = Library(m.dev, m.ino, m.path, pid)
        paths = [f"/proc/{pid}/map_files/{m.span}", f"/proc/{pid}/root{m.path}"]
        path = next((p for p in paths if os.access(p, os.R_OK)), None)
        if path is None:
            self._say(f"{m.path} (pid {pid}): cannot open the driver library to probe it")
            return lib
        lib.opened = path
        for sym, call in self.symbols.items():
            cookie, ret = abi.CUDA_CALL[call], None
            try:
                # the return first: a call entering once its uprobe is there has its return seen
                if call != "launch":
                    ret = self._exit.attach_uprobe(path, sym, cookie, True)
                lib.links.append(self._enter.attach_uprobe(path, sym, cookie, False))
            except LibbpfError as e:
                if ret is not None:
                    ret.destroy()
                if e.errno != errno.ENOENT:
                    self._say(f"{m.path}: cannot probe {sym}: {e}")
                elif not sym.endswith(OPTIONAL_SUFFIXES):  # (cuLaunchKernelEx too)
                    lib.missing.append(sym)
                continue
            if ret is not None:
                lib.returns.append(ret)
            lib.attached.append(sym)
        if lib.missing:
            self._say(f"{m.path}: exports no {', '.join(lib.missing)}: those calls are not counted")
        if self.launching:
            self._attach_launches(lib)
        return lib

    # -- launches, sampled -----------------------------------------------------------------------
    def set_launches(self, on: bool) -> None:
        """Counts kernel launches (on) or stops (off): attaches or detaches the cuLaunchKernel
        uprobes of every library. Sampled counting turns them on for a slice of each interval
        (tracer.live.cuda.LaunchSampler): a launch-bound loop pays their cost in that slice
        only. Without `launches` at construction; a library whose file can no longer be
        opened (its first process gone) is counted no more."""
        if on == self.launching or LAUNCH_SYMBOLS.keys() <= self.symbols.keys():
            return
        self.launching = on
        for lib in self.libraries.values():
            if on:
                self._attach_launches(lib)
            else:
                for link in lib.launch_links:
                    link.destroy()
                lib.launch_links.clear()

    def _attach_launches(self, lib: Library) -> None:
        if lib.opened is None:
            return
        for sym, call in LAUNCH_SYMBOLS.items():
            try:
                lib.launch_links.append(self._enter.attach_uprobe(
                    lib.opened, sym, abi.CUDA_CALL[call], False))
            except LibbpfError as e:
                if e.errno != errno.ENOENT and not sym.endswith(OPTIONAL_SUFFIXES):
                    self._say(f"{lib.path}: cannot probe {sym}: {e}")
                    lib.opened = None  # said once: not tried again
                    return

    def close(self) -> None:
        """Detaches every library, the uprobes before the uretprobes: a call that entered with
        its uprobe there has its return seen."""
        for lib in self.libraries.values():
            for link in lib.launch_links + lib.links + lib.returns:
                link.destroy()
            lib.launch_links.clear()
            lib.links.clear()
            lib.returns.clear()

    # -- reading ---------------------------------------------------------------------------------
    def read(self, now_ns: int = 0) -> dict[int, abi.CudaThread]:
        """Every thread's driver calls by thread id, cumulative (abi.decode_cuda_thread: with
        `now_ns`, CLOCK_MONOTONIC, the call in flight's time so far is in)."""
        return {tid: abi.decode_cuda_thread(tid, raw, now_ns)
                for tid, raw in ((abi.decode_u32(k), v) for k, v in self.threads.items())}

    def delete_threads(self, tids: Iterable[int]) -> None:
        for tid in tids:
            self.threads.delete(abi.TGID.pack(tid))

    def threads_lost(self) -> int:
        """Threads whose calls were not counted because cuda_threads was full (cumulative)."""
        return abi.percpu_u64_sum(self._full.lookup(bytes(4)))
