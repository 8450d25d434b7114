"""Loads iotrace's BPF object and attaches it: the first stage of the kernel boundary.

The straight line is load -> track -> attach -> ... -> close. :class:`Loader` owns the object,
chooses its programs, sizes its maps and sets its config before the load, runs its SEC("syscall")
programs (track, free_slot), holds its links and the pidfds task storage is read by. Closing it
detaches everything (links are fd-based, so a killed iotrace leaves nothing attached either).
Reading the maps (maps.py), the BPF statistics (stats.py) and the event ring (ring.py) are apart.
The stages of bpf/ are linked into the one object at build time, so each map the stages share is
one map already.
"""

from __future__ import annotations

import errno
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tracer.core import abi, rollup
from tracer.core.units import PAGE_SHIFT
from tracer.kernel import libbpf as _libbpf
from tracer.kernel.elf import function_files
from tracer.kernel.libbpf import BpfObject, LibbpfError, LibbpfMissing, Link, Program

BPF_DIR = Path(__file__).parent.parent / "bpf"
OBJECT = "iotrace.bpf.o"  # every stage of bpf/, linked by `make build`

# The block layer's table of requests in flight (block.bpf.c): a power of two of slots; the
# requests that find their slot taken go to rq_starts.
RQ_SLOTS = "rq_slots"
# Tables of counters indexed by a hash of their key, in front of `hists` and `file_stats`
# (slots.bpf.h): powers of two (file_slots: two tables of half its size, one per interval
# buffer). By enum iot_slot_table (abi.HIST_SLOTS, abi.FILE_SLOTS).
SLOT_TABLES = ("hist_slots", "file_slots")
POWER_OF_TWO_MAPS = (RQ_SLOTS, *SLOT_TABLES)
# The file log (slots.bpf.h): records a syscall takes in order for a key whose slot is taken,
# half of them per interval buffer. Sized 0, there is none (the map keeps one record a buffer).
FILE_LOG = "file_log"
# The kernel asks for a drain once a buffer's log is this share full (1/2): the rest of the log
# and file_stats are the room left while the tracer drains (slots.bpf.h, ask_drain)
DRAIN_AT_LOG_SHARE = 2
# The maps IOTRACE_MAP_SIZES can size: those whose refused inserts `map_full` counts, the
# tables of slots and the file log.
SIZABLE_MAPS = (*abi.MAP_FULL_MAPS, *POWER_OF_TWO_MAPS, FILE_LOG)
# Maps kept as one per interval buffer in the object, sized and counted under one name
BUFFERED_MAPS = {"file_stats": ("file_stats0", "file_stats1"),
                 "folder_stats": ("folder_stats0", "folder_stats1"),
                 "fold_stats": ("fold_stats0", "fold_stats1")}
# Tracepoints whose programs read the in-flight syscall from task-local storage. A tp_btf
# program gets the storage through a trylock that fails (NULL) when a syscall program holding
# it on the same CPU was preempted (syscall tracepoints are preemptible on 6.x); raw_tp
# programs take it unconditionally. So these use raw_tp even where tp_btf exists. The block
# programs are raw_tp only: they index a table by the request's address, a number in raw_tp
# and a pointer that the verifier allows no such arithmetic on in tp_btf.
RAW_TP_FIRST = frozenset({"block_io_start", "block_rq_insert", "block_rq_issue",
                          "block_rq_requeue", "block_rq_complete", "block_rq_merge",
                          "block_io_done",
                          "mm_filemap_add_to_page_cache", "writeback_dirty_folio",
                          "sys_enter", "sys_exit"})
# Tracepoints some kernels lack: without them their programs are left out, and what they count
# is null (`features` says "missing").
NOT_EVERYWHERE = frozenset({"block_io_start", "block_io_done", "page_fault_user"})
# Test and debugging knob: comma-separated fallbacks to force on a kernel that has the better
# path, so the fallbacks are exercised too: "raw_tp" (no tp_btf), "no_block_io_start"; and
# the syscall hooking to use whatever the mode: "raw_syscalls", "classic_syscalls",
# "mixed_syscalls" (SYSCALL_HOOKS).
FORCE_ENV = "IOTRACE_FORCE"
# The ways syscall.bpf.c hooks the I/O syscalls, by the programs each loads. "raw": the raw
# sys_enter/sys_exit pair, the cheaper per traced call, but a program run for every syscall of
# every process; "classic": programs on the per-syscall tracepoints of the traced syscalls
# only, so the host's other syscalls run none, at a higher price per traced call; "mixed":
# classic enters and the raw exit (measured, never chosen). --pid and -- CMD trace a few processes
# whose I/O is what they pay for: raw. --auto is a node agent, whose cost every process of the
# node pays on each of its syscalls: classic (docs/benchmarks.md, issue 17).
CLASSIC_ENTERS = ("sys_enter_tp", "sys_enter_pos_tp", "sys_enter_close_tp")
SYSCALL_HOOKS = {"raw": ("sys_enter", "sys_exit"),
                 "classic": (*CLASSIC_ENTERS, "sys_exit_tp"),
                 "mixed": (*CLASSIC_ENTERS, "sys_exit")}
SYSCALL_PROGRAMS = frozenset(p for progs in SYSCALL_HOOKS.values() for p in progs)
# The syscalls of op_of_syscall (bpf/syscalls.bpf.h), by the classic program attached to their
# syscalls:sys_enter_NAME (or sys_exit_NAME) tracepoint: the positional ones, whose offset is
# their 4th argument, apart.
_POSITIONAL = ("pread64", "preadv", "preadv2", "pwrite64", "pwritev", "pwritev2")
_BY_FD = ("read", "readv", "recvfrom", "recvmsg", "write", "writev", "fsync", "fdatasync", "openat")
CLASSIC_SYSCALLS = {"sys_enter_tp": ("enter", _BY_FD),
                    "sys_enter_pos_tp": ("enter", _POSITIONAL),
                    "sys_exit_tp": ("exit", _BY_FD + _POSITIONAL),
                    "sys_enter_close_tp": ("enter", ("close",))}
# Where libbpf 1.1 looks for a classic tracepoint's id, in its order: classic tracepoints need
# tracefs mounted (raw_tp and tp_btf programs do not).
TRACEFS_DIRS = ("/sys/kernel/debug/tracing", "/sys/kernel/tracing")
# Programs attached to a library's functions, once per library file, by tracer/kernel/uprobes.py
UPROBE_SECTIONS = frozenset({"uprobe", "uretprobe"})
# Test and debugging knob: "MAP=N[,MAP=N]" sizes maps of abi.MAP_FULL_MAPS (max_entries), e.g.
# "file_stats=1" to see refused inserts counted as map-full drops.
MAP_SIZES_ENV = "IOTRACE_MAP_SIZES"


class BadSetting(ValueError):
    """An IOTRACE_* setting of the environment is malformed (one line for the user)."""


def map_sizes_from_env(text: str | None = None) -> dict[str, int]:
    """Parses IOTRACE_MAP_SIZES ("file_stats=1,hists=64"); raises BadSetting."""
    text = os.environ.get(MAP_SIZES_ENV, "") if text is None else text
    sizes: dict[str, int] = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        name, _, n = item.partition("=")
        if name not in SIZABLE_MAPS:
            raise BadSetting(f"{MAP_SIZES_ENV}: no map {name!r} can be sized; give "
                             f"MAP=N with MAP one of {', '.join(SIZABLE_MAPS)}")
        if name == FILE_LOG and n.isdigit() and int(n) % 2:
            raise BadSetting(f"{MAP_SIZES_ENV}: {item!r}: file_log holds a log per interval "
                             "buffer: an even number of entries (0: none)")
        if not n.isdigit() or (int(n) < 1 and name != FILE_LOG):
            raise BadSetting(f"{MAP_SIZES_ENV}: {item!r}: the size must be a whole number of "
                             "entries, at least 1")
        if name in POWER_OF_TWO_MAPS and int(n) & (int(n) - 1):
            raise BadSetting(f"{MAP_SIZES_ENV}: {item!r}: the size must be a power of two")
        if name == "file_slots" and int(n) < 2:
            raise BadSetting(f"{MAP_SIZES_ENV}: {item!r}: file_slots holds a table per interval "
                             "buffer: at least 2")
        sizes[name] = int(n)
    return sizes


class HostCannotTrace(RuntimeError):
    """This host cannot run iotrace's programs (privilege, BTF, libbpf)."""


def _load_failure_reason(log: list[str]) -> str:
    """The verifier's one-line reason from libbpf's messages (the line before 'processed N insns'),
    else libbpf's last message; IOTRACE_DEBUG=1 shows everything."""
    if any("bpf_rdonly_cast" in msg for msg in log):
        return ("this kernel has no bpf_rdonly_cast kfunc, which the syscall programs read kernel "
                "memory with: iotrace needs Linux 6.2 or newer")
    for msg in reversed(log):
        lines = msg.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("processed ") and i > 0:
                return f"verifier: {lines[i - 1].strip()}"
    return log[-1].splitlines()[-1] if log else ""


def _tracepoint_of(section: str) -> str:
    return section.split("/", 1)[1]


def classic_syscalls_missing(dirs: tuple[str, ...] = TRACEFS_DIRS) -> str | None:
    """None when libbpf can attach the classic syscall tracepoints of CLASSIC_SYSCALLS here,
    else why not."""
    base = next((d for d in dirs if os.access(d, os.F_OK)), dirs[-1])
    events = Path(base) / "events" / "syscalls"
    if not events.is_dir():
        return f"no tracefs at {base} (mount -t tracefs nodev {base})"
    gone = [f"sys_{way}_{n}" for way, names in CLASSIC_SYSCALLS.values() for n in names
            if not (events / f"sys_{way}_{n}" / "id").exists()]
    return f"no tracepoint syscalls:{gone[0]} in {events}" if gone else None


def choose_syscall_hooks(auto_discover: bool, force: set[str],
                         dirs: tuple[str, ...] = TRACEFS_DIRS) -> tuple[str, str | None]:
    """(the SYSCALL_HOOKS key to load, why the one the mode or the knob wanted is not it)."""
    hooks = next((h for h in SYSCALL_HOOKS if f"{h}_syscalls" in force),
                 "classic" if auto_discover else "raw")
    why = classic_syscalls_missing(dirs) if hooks != "raw" else None
    if why:
        return "raw", f"{hooks} syscall hooks: {why}; the raw pair instead"
    return hooks, None



class Loader:
    """iotrace's BPF object: its programs chosen, loaded and attached."""

    def __init__(self, bpf_dir: Path = BPF_DIR, slow_ns: int = 0, auto_discover: bool = False,
                 map_sizes: dict[str, int] | None = None):
        """`map_sizes`: max_entries of maps of SIZABLE_MAPS (default: IOTRACE_MAP_SIZES,
        which raises BadSetting when malformed)."""
        self.bpf_dir = bpf_dir
        self.map_sizes = map_sizes_from_env() if map_sizes is None else map_sizes
        self.slow_ns = slow_ns
        self.auto_discover = auto_discover
        self.obj: BpfObject | None = None
        self.stages: dict[str, str] = {}  # program name -> its stage (bpf/STAGE.bpf.c)
        self.links: list[Link] = []
        self.features: dict[str, str] = {}
        # SYSCALL_HOOKS' key in use (chosen at load), and why the mode's choice was not taken
        self.syscall_hooks = ""
        self.syscall_hooks_note: str | None = None
        self.max_entries: dict[str, int] = {}  # of the maps whose refused inserts are counted
        self.read_files_words = 0
        # log2 of the entries of each POWER_OF_TWO_MAPS map (file_slots: per interval buffer)
        self.slot_bits: dict[str, int] = {}
        self.file_log_entries = 0  # records of the file log per interval buffer
        self._track: Program | None = None  # proc.bpf.c's syscall programs, run from here
        self._free_slot: Program | None = None
        self._pidfds: dict[int, int] = {}  # pid -> pidfd, for reading task storage

    # -- load ---------------------------------------------------------------------------------
    def load(self) -> None:
        """Opens and loads the object; raises HostCannotTrace with the reason."""
        try:
            _libbpf.lib()
        except LibbpfMissing as e:
            raise HostCannotTrace(
                f"{e}: install libbpf >= 1.0 (Debian: apt-get install libbpf1)"
            ) from None
        path = self.bpf_dir / OBJECT
        if not path.exists():
            raise HostCannotTrace(f"{path} is missing: build it with 'make build'")
        try:
            obj = self.obj = BpfObject(str(path))
            self._choose_programs(obj)
            _libbpf.forget_vmlinux_btf()
            self._size_maps(obj)
            obj.load()
        except LibbpfError as e:
            self.close()
            detail = _load_failure_reason(_libbpf.recent_log())
            hint = ""
            if e.errno in (errno.EPERM, errno.EACCES):
                hint = " (needs root, or CAP_BPF and CAP_PERFMON)"
            raise HostCannotTrace(f"cannot load BPF programs: {e}{hint}. {detail}".strip()) from None
        self.stages = {name: file.removesuffix(".bpf.c")
                       for name, file in function_files(path).items()}
        self._track = obj.program("track")
        self._free_slot = obj.program("free_slot")

    def _size_maps(self, obj: BpfObject) -> None:
        """Sets the maps' sizes (map_sizes) and the programs' config, before the load."""
        for m in SIZABLE_MAPS:
            if m in self.map_sizes:
                for part in BUFFERED_MAPS.get(m, (m,)):
                    size = self.map_sizes[m]
                    obj.set_max_entries(part, max(2, size) if m == FILE_LOG else size)
        bits = self.slot_bits = {m: obj.max_entries(m).bit_length() - 1 for m in POWER_OF_TWO_MAPS}
        bits["file_slots"] -= 1  # per buffer
        self.file_log_entries = self.map_sizes.get(FILE_LOG, obj.max_entries(FILE_LOG)) // 2
        have_io_start = self.features.get("block_io_start", "missing") != "missing"
        obj.set_config(abi.CONFIG.pack(int(have_io_start), PAGE_SHIFT, int(self.auto_discover),
                                       bits[RQ_SLOTS], bits["hist_slots"], bits["file_slots"],
                                       self.slow_ns, self.file_log_entries,
                                       self.file_log_entries // DRAIN_AT_LOG_SHARE,
                                       rollup.KEEP_FILES, rollup.KEEP_SHARE_PCT))
        self.max_entries = {m: obj.max_entries(BUFFERED_MAPS.get(m, (m,))[0])
                            for m in abi.MAP_FULL_MAPS}
        self.read_files_words = obj.max_entries("read_files")  # u64 words of its bitmap

    def _choose_programs(self, obj: BpfObject) -> None:
        """Keeps the tp_btf twin of each program where the kernel's BTF has the tracepoint,
        the raw_tp twin elsewhere; drops both when the tracepoint does not exist at all."""
        force = set(os.environ.get(FORCE_ENV, "").split(","))
        hooks, self.syscall_hooks_note = choose_syscall_hooks(self.auto_discover, force)
        self.syscall_hooks = hooks
        for prog in obj.programs():
            sec = prog.section
            if prog.name in SYSCALL_PROGRAMS and prog.name not in SYSCALL_HOOKS[hooks]:
                prog.autoload = False
                continue
            if not sec.startswith(("tp_btf/", "raw_tp/")):
                continue
            tp = _tracepoint_of(sec)
            btf = (_libbpf.has_btf_tracepoint(tp) and "raw_tp" not in force
                   and tp not in RAW_TP_FIRST)
            # Every tracepoint of the kernel has its btf_trace_* type in the kernel's BTF, which
            # iotrace needs anyway; only block_io_start/done are recent (6.5), and
            # page_fault_user is x86's alone.
            exists = _libbpf.has_btf_tracepoint(tp) or tp not in NOT_EVERYWHERE
            if tp.startswith("block_io_") and "no_block_io_start" in force:  # both are 6.5+
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

    def map_fd(self, name: str) -> int:
        """The fd of a map of the loaded object."""
        assert self.obj is not None
        return self.obj.map_fd(name)

    # -- the syscall programs ---------------------------------------------------------------------
    def track(self, pid: int, root: int = 0, worker: bool = False) -> None:
        """Adds a process (TGID) to the in-kernel filter; its future children follow by fork.
        `worker`: it already named itself pt_data_worker (found running at attach), so the
        kernel marks it as it marks a worker it sees rename itself."""
        assert self._track is not None
        flags = abi.TRACKED_WORKER if worker else 0
        err = self._track.run(abi.TRACK_REQUEST.pack(pid, root, flags))
        if err:
            raise LibbpfError(err, f"track {pid}: {os.strerror(err)}")

    def free_slot(self, table: int, index: int, tag: int) -> None:
        """Runs `free_slot` on a slot of a slot table (abi.HIST_SLOTS): freed when `tag` still
        held it."""
        assert self._free_slot is not None
        self._free_slot.run_ctx(abi.FREE_SLOT_REQUEST.pack(table, index, tag))

    # -- attaching ------------------------------------------------------------------------------
    def attach(self) -> None:
        """Attaches every loaded program; raises HostCannotTrace on failure (nothing stays)."""
        assert self.obj is not None
        try:
            for prog in self.obj.programs():
                if not prog.autoload or prog.section == "syscall":  # run, not attached
                    continue
                if prog.section in UPROBE_SECTIONS:  # per library file: kernel/uprobes.py
                    continue
                if prog.name in CLASSIC_SYSCALLS:  # on each of its syscalls' tracepoints
                    way, names = CLASSIC_SYSCALLS[prog.name]
                    self.links += [prog.attach_tracepoint("syscalls", f"sys_{way}_{name}")
                                   for name in names]
                    continue
                self.links.append(prog.attach())
        except LibbpfError as e:
            self.detach()
            raise HostCannotTrace(f"cannot attach: {e}") from None

    def detach(self) -> None:
        """Destroys every link. Each close waits for an RCU grace period in the kernel (about
        50 ms here), so they are closed from a few threads at once (ctypes releases the GIL):
        detaching 38 links takes one or two grace periods instead of 38. The classic syscall
        tracepoints' links do not overlap: the kernel closes perf events one at a time, about
        40 ms each here, so those 26 take about a second."""
        links, self.links = self.links, []
        if len(links) <= 1:
            for link in links:
                link.destroy()
            return
        with ThreadPoolExecutor(max_workers=min(16, len(links))) as pool:
            list(pool.map(Link.destroy, links))

    # -- pidfds -------------------------------------------------------------------------------------
    def pidfd(self, pid: int) -> int | None:
        """A pidfd of process `pid` (which names its thread-group leader), None when it is gone:
        kept while the process lives (one open per process, not per reading)."""
        fd = self._pidfds.get(pid)
        if fd is None:
            try:
                fd = self._pidfds[pid] = os.pidfd_open(pid)
            except OSError:
                return None  # gone
        return fd

    def forget_pidfds(self, pids) -> None:
        for pid in pids:
            fd = self._pidfds.pop(pid, None)
            if fd is not None:
                os.close(fd)

    def close(self) -> None:
        """Detaches and frees everything; safe to call twice."""
        self.detach()
        self.forget_pidfds(list(self._pidfds))
        self._track = self._free_slot = None
        if self.obj is not None:
            self.obj.close()
            self.obj = None
