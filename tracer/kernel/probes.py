"""Loads iotrace's BPF object, attaches it, and reads its maps: the only user of libbpf.

The straight line is load -> track -> attach -> (read maps, poll events)* -> close. One
:class:`Probes` owns the object, its links and the ring buffer; closing it detaches everything
(links are fd-based, so a killed iotrace leaves nothing attached either). The stages of bpf/ are
linked into that one object at build time, so each map the stages share is one map already.
"""

from __future__ import annotations

import errno
import itertools
import mmap
import os
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tracer.core import abi
from tracer.core.units import PAGE_SHIFT
from tracer.kernel import libbpf as _libbpf
from tracer.kernel.elf import function_files
from tracer.kernel.libbpf import (
    BpfObject,
    LibbpfError,
    LibbpfMissing,
    Link,
    Map,
    MappedArray,
    Program,
    ProgStats,
    RingBuffer,
    take_rows,
)

# At the end of a trace, how long the disks of held block records are watched for a moment with
# nothing in flight (block_unseen): a job on the same disk keeps a request in flight 62 % of the
# time here (iowork --direct, queue depth 1), so one look misses a record that ended unseen.
LEFTOVER_WAIT_S = 0.5

BPF_DIR = Path(__file__).parent.parent / "bpf"
OBJECT = "iotrace.bpf.o"  # every stage of bpf/, linked by `make build`

# The block layer's table of requests in flight (block.bpf.c): a power of two of slots; the
# requests that find their slot taken go to rq_starts.
RQ_SLOTS = "rq_slots"
# Tables of counters indexed by a hash of their key, in front of `hists` and `file_stats`
# (slots.bpf.h): powers of two (file_slots: two tables of half its size, one per interval
# buffer). By enum iot_slot_table (abi.HIST_SLOTS, abi.FILE_SLOTS), with the layout of their
# slots.
SLOT_TABLES = ("hist_slots", "file_slots")
SLOT_LAYOUTS = (abi.HIST_SLOT, abi.FILE_SLOT)
POWER_OF_TWO_MAPS = (RQ_SLOTS, *SLOT_TABLES)
# The file log (slots.bpf.h): records a syscall takes in order for a key whose slot is taken,
# half of them per interval buffer. Sized 0, there is none (the map keeps one record a buffer).
FILE_LOG = "file_log"
LOG_CHUNK = 4096  # records of the log taken at a time: a drain holds a chunk's copies, not the log's
# The maps IOTRACE_MAP_SIZES can size: those whose refused inserts `map_full` counts, the
# tables of slots and the file log.
SIZABLE_MAPS = (*abi.MAP_FULL_MAPS, *POWER_OF_TWO_MAPS, FILE_LOG)
# Maps kept as one per interval buffer in the object, sized and counted under one name
BUFFERED_MAPS = {"file_stats": ("file_stats0", "file_stats1"),
                 "folder_stats": ("folder_stats0", "folder_stats1")}
STATS_SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"
# Tracepoints whose programs read the in-flight syscall from task-local storage. A tp_btf
# program gets the storage through a trylock that fails (NULL) when a syscall program holding
# it on the same CPU was preempted (syscall tracepoints are preemptible on 6.x); raw_tp
# programs take it unconditionally. So these use raw_tp even where tp_btf exists. The block
# programs are raw_tp only: they index a table by the request's address, a number in raw_tp
# and a pointer that the verifier allows no such arithmetic on in tp_btf.
RAW_TP_FIRST = frozenset({"block_io_start", "block_rq_insert", "block_rq_issue",
                          "block_rq_requeue", "block_rq_complete", "block_rq_merge",
                          "block_io_done",
                          "mm_filemap_add_to_page_cache", "sys_enter", "sys_exit"})
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
CLASSIC_ENTERS = ("sys_enter_tp", "sys_enter_pos_tp")
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
                    "sys_exit_tp": ("exit", _BY_FD + _POSITIONAL)}
# Where libbpf 1.1 looks for a classic tracepoint's id, in its order: classic tracepoints need
# tracefs mounted (raw_tp and tp_btf programs do not).
TRACEFS_DIRS = ("/sys/kernel/debug/tracing", "/sys/kernel/tracing")
# Test and debugging knob: "MAP=N[,MAP=N]" sizes maps of abi.MAP_FULL_MAPS (max_entries), e.g.
# "file_stats=1" to see refused inserts counted as map-full drops.
MAP_SIZES_ENV = "IOTRACE_MAP_SIZES"


def add_hists(a: bytes, b: bytes) -> bytes:
    """Two raw struct hist added up, slot by slot."""
    import numpy as np

    return (np.frombuffer(a, dtype="<u8") + np.frombuffer(b, dtype="<u8")).tobytes()


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


class Probes:
    """iotrace's BPF programs and maps, loaded into the kernel."""

    def __init__(self, bpf_dir: Path = BPF_DIR, slow_ns: int = 0, auto_discover: bool = False,
                 map_sizes: dict[str, int] | None = None):
        """`map_sizes`: max_entries of maps of abi.MAP_FULL_MAPS (default: IOTRACE_MAP_SIZES,
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
        self._ring: RingBuffer | None = None
        self.tracked: Map | None = None
        self.hists: Map | None = None
        # the per-file and per-folder counters, a map per interval buffer (maps.bpf.h)
        self.file_stats: tuple[Map, Map] | None = None
        self.folder_stats: tuple[Map, Map] | None = None
        self._slots: list[MappedArray] = []  # by abi.HIST_SLOTS, abi.FILE_SLOTS
        self._file_log_fd = -1  # mapped only while drained: libbpf.take_rows says why
        self._file_log_used: Map | None = None
        self._file_log_entries = 0  # per buffer
        self._track: Program | None = None  # proc.bpf.c's syscall programs, run from here
        self._free_slot: Program | None = None
        # Where the last reading found each key in a slot table: [(index, tag)], by raw key.
        self._hist_at: dict[bytes, list[tuple[int, int]]] = {}
        self.threads: Map | None = None
        self.epoch: Map | None = None
        self._lost: Map | None = None
        self._map_full: Map | None = None
        self._unseen: Map | None = None
        self._rq_slots: Map | None = None
        self._rq_starts: Map | None = None
        self._sys_starts: Map | None = None
        self._block_users: Map | None = None
        self._pidfds: dict[int, int] = {}  # pid -> pidfd, for syscalls_in_flight
        self._stats_fd: int | None = None
        self._stats_since: float | None = None  # monotonic time stats were last turned on
        self._stats_s = 0.0  # seconds they were on before that
        self.stats_before: int | None = None  # kernel.bpf_stats_enabled before enable_stats()
        self.max_entries: dict[str, int] = {}  # of the maps whose refused inserts are counted

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
            for m in SIZABLE_MAPS:
                if m in self.map_sizes:
                    for part in BUFFERED_MAPS.get(m, (m,)):
                        size = self.map_sizes[m]
                        obj.set_max_entries(part, max(2, size) if m == FILE_LOG else size)
            bits = {m: obj.max_entries(m).bit_length() - 1 for m in POWER_OF_TWO_MAPS}
            bits["file_slots"] -= 1  # per buffer
            self._file_log_entries = self.map_sizes.get(FILE_LOG, obj.max_entries(FILE_LOG)) // 2
            have_io_start = self.features.get("block_io_start", "missing") != "missing"
            obj.set_config(abi.CONFIG.pack(int(have_io_start), PAGE_SHIFT, int(self.auto_discover),
                                           bits[RQ_SLOTS], bits["hist_slots"], bits["file_slots"],
                                           self.slow_ns, self._file_log_entries))
            self.max_entries = {m: obj.max_entries(BUFFERED_MAPS.get(m, (m,))[0])
                                for m in abi.MAP_FULL_MAPS}
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
        fd = obj.map_fd
        self.tracked = Map(fd("tracked"), abi.TGID.size, abi.TRACKED_INFO.size)
        self.threads = Map(fd("threads"), abi.TGID.size, abi.THREAD_TIME.size)
        self.hists = Map(fd("hists"), abi.HIST_KEY.size, abi.HIST_SIZE)
        self.file_stats, self.folder_stats = (
            tuple(Map(fd(part), abi.FILE_KEY.size, abi.FILE_STAT.size)
                  for part in BUFFERED_MAPS[m]) for m in ("file_stats", "folder_stats"))
        self._rcu_sync = Map(fd("rcu_sync"), 4, 4)
        self._rcu_inner = fd("rcu_inner")
        self._slots = [MappedArray(fd("hist_slots"), abi.HIST_SLOT.size, 1 << bits["hist_slots"]),
                       MappedArray(fd("file_slots"), abi.FILE_SLOT.size,
                                   2 << bits["file_slots"], writable=True)]
        self._file_log_fd = fd(FILE_LOG)
        self._file_log_used = Map(fd("file_log_used"), 4, 8)
        self._track = obj.program("track")
        self._free_slot = obj.program("free_slot")
        self.epoch = Map(fd(".data.epoch"), 4, 8)
        self.max_epoch = 0
        ncpu = _libbpf.num_possible_cpus()
        self._lost = Map(fd("events_lost"), 4, 8 * ncpu)
        self._map_full = Map(fd("map_full"), 4, 8 * ncpu)
        self._unseen = Map(fd("block_unseen"), 4, 8 * ncpu)
        self._rq_slots = Map(fd(RQ_SLOTS), 4, abi.RQ_SLOT.size)
        self._rq_starts = Map(fd("rq_starts"), 8, abi.RQ_START.size)
        self._sys_starts = Map(fd("sys_starts"), abi.TGID.size, abi.SYS_START.size)
        self._block_users = Map(fd("block_users"), abi.BLOCK_USER_KEY.size, abi.BLOCK_USER.size)

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
            # iotrace needs anyway; only block_io_start/done are recent (6.5).
            exists = _libbpf.has_btf_tracepoint(tp) or not tp.startswith("block_io_")
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

    # -- tracking and attaching -----------------------------------------------------------------
    def track(self, pid: int, root: int = 0, worker: bool = False) -> None:
        """Adds a process (TGID) to the in-kernel filter; its future children follow by fork.
        `worker`: it already named itself pt_data_worker (found running at attach), so the
        kernel marks it as it marks a worker it sees rename itself."""
        assert self._track is not None
        flags = abi.TRACKED_WORKER if worker else 0
        err = self._track.run(abi.TRACK_REQUEST.pack(pid, root, flags))
        if err:
            raise LibbpfError(err, f"track {pid}: {os.strerror(err)}")

    def attach(self) -> None:
        """Attaches every loaded program; raises HostCannotTrace on failure (nothing stays)."""
        assert self.obj is not None
        try:
            for prog in self.obj.programs():
                if not prog.autoload or prog.section == "syscall":  # run, not attached
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

    # -- reading ----------------------------------------------------------------------------------
    def _slot_rows(self, table: int) -> list[tuple[tuple[int, int], bytes, bytes]]:
        """((index, tag), raw key, raw value) of each held slot of `table` (abi.HIST_SLOTS or
        abi.FILE_SLOTS). A slot whose tag is not its key's is being taken by another key right
        now: left for the next reading."""
        index, rows = self._slots[table].held()
        ok = abi.slot_tags_ok(table, rows)
        rows = rows[ok]
        at = zip(index[ok].tolist(), rows[:, 0].tolist(), strict=True)
        return [((i, tag), key, value) for (i, tag), (_, key, value)
                in zip(at, SLOT_LAYOUTS[table].iter_unpack(rows.tobytes()), strict=True)]

    def _read_both(self, m: Map, table: int, add: Callable[[bytes, bytes], bytes]
                   ) -> tuple[dict[bytes, bytes], dict[bytes, list[tuple[int, int]]]]:
        """Every key of hash map `m` and of its slot table, a key found in both added up with
        `add`; and the slots each key was found in."""
        out = dict(m.items())
        at: dict[bytes, list[tuple[int, int]]] = {}
        for where, key, value in self._slot_rows(table):
            at.setdefault(key, []).append(where)
            other = out.get(key)
            out[key] = value if other is None else add(other, value)
        return out, at

    def read_hists(self) -> dict[bytes, bytes]:
        """Cumulative histograms by raw key (see abi.decode_hist_key / abi.decode_hist): those
        of the slot table and of the `hists` map, added up for a key found in both."""
        assert self.hists is not None
        out, self._hist_at = self._read_both(self.hists, abi.HIST_SLOTS, add_hists)
        return out

    def delete_hists(self, keys: list[bytes]) -> None:
        """Frees these keys' histograms (processes gone), in the map and in the slot table."""
        assert self.hists is not None
        for k in keys:
            self.hists.delete(k)
            for i, tag in self._hist_at.pop(k, ()):
                self._free(abi.HIST_SLOTS, i, tag)

    def _free(self, table: int, index: int, tag: int) -> None:
        """Runs `free_slot` on a histogram slot: freed when `tag` still held it."""
        assert self._free_slot is not None
        self._free_slot.run_ctx(abi.FREE_SLOT_REQUEST.pack(table, index, tag))

    def read_block_users(self) -> dict[bytes, bytes]:
        """Who used each disk (block.bpf.c's block_users), cumulative, by raw key
        (abi.decode_block_user_key; values abi.BLOCK_USER): the traced processes' requests
        and every other process's, by cgroup and name."""
        assert self._block_users is not None
        return dict(self._block_users.items())

    def read_threads(self) -> dict[int, bytes]:
        """Per-thread time accounting by thread id (abi.decode_thread_time)."""
        assert self.threads is not None
        return {abi.TGID.unpack(k)[0]: v for k, v in self.threads.items()}

    def delete_threads(self, tids: list[int]) -> None:
        assert self.threads is not None
        for tid in tids:
            self.threads.delete(abi.TGID.pack(tid))

    def syscalls_in_flight(self, pids) -> dict[int, tuple[int, int, int, int, int, int]]:
        """The syscall each process's main thread is in right now, by pid: (start, op, target,
        dev, ino, gen) of its file, start in CLOCK_MONOTONIC ns, for the traced syscalls only. Task storage is
        looked up by a pidfd, which names the thread-group leader: the training loop's thread.
        Pidfds are kept while their process lives (one open per process, not per interval)."""
        assert self._sys_starts is not None
        out = {}
        for pid in pids:
            fd = self._pidfds.get(pid)
            if fd is None:
                try:
                    fd = self._pidfds[pid] = os.pidfd_open(pid)
                except OSError:
                    continue  # gone
            raw = self._sys_starts.lookup(abi.TGID.pack(fd))
            if raw is None:
                continue
            ts, _off, dev, gen, ino, op, target, *_ = abi.SYS_START.unpack(raw)
            if ts:
                out[pid] = (ts, op, target, dev, ino, gen)
        return out

    def forget_pidfds(self, pids) -> None:
        for pid in pids:
            fd = self._pidfds.pop(pid, None)
            if fd is not None:
                os.close(fd)

    def next_epoch(self) -> int:
        """Starts a new interval: the programs add to the other per-file buffer (max_epoch & 1,
        slots.bpf.h); returns the interval that ended, whose buffer drain_file_stats takes."""
        assert self.epoch is not None
        self.max_epoch += 1
        self.epoch.update(b"\0\0\0\0", self.max_epoch.to_bytes(8, "little"))
        return self.max_epoch - 1

    def drain_file_stats(self, buf: int, row_dtype=None):
        """The per-file and per-folder counters of the interval that used buffer `buf` (the
        interval next_epoch() just ended), taken out of the kernel: (files, folders), arrays
        of abi.file_counts_dtype(), or of `row_dtype`, which begins with its fields, the others
        zero (made in place: a copy to add columns was the largest array of an interval).
        First waits until no program still adds to that buffer (one that read max_epoch
        before next_epoch() changed it), so nothing comes after."""
        assert self.file_stats is not None and self.folder_stats is not None
        assert self._file_log_used is not None
        self._rcu_sync.update(b"\0\0\0\0", self._rcu_inner.to_bytes(4, "little"))
        slots = self._slots[abi.FILE_SLOTS]
        half = slots.max_entries // 2
        lo = buf * half
        _, rows = slots.held(lo, lo + half)
        slots.words[lo:lo + half] = 0  # the next interval but one starts from empty slots
        # the buffer's log: its records in use, taken in order (a count past the end: all)
        key = buf.to_bytes(4, "little")
        used = min(int.from_bytes(self._file_log_used.lookup(key) or b"", "little"),
                   self._file_log_entries)
        lo = buf * self._file_log_entries
        logged = (take_rows(self._file_log_fd, abi.FILE_SLOT.size, i, min(i + LOG_CHUNK, lo + used))
                  for i in range(lo, lo + used, LOG_CHUNK))
        dtype = row_dtype or abi.file_counts_dtype()
        files = self._drain_map(self.file_stats[buf], "file_stats", dtype,
                                itertools.chain([rows], logged), len(rows) + used)
        self._file_log_used.update(key, bytes(8))
        folders = self._drain_map(self.folder_stats[buf], "folder_stats", dtype)
        return files, folders

    def _drain_map(self, m: Map, name: str, dtype, slot_rows: Iterable = (), n_slot_rows: int = 0):
        """The entries of a file_key -> file_stat map that no program adds to any more (an
        ended interval's buffer), taken out, after those of `slot_rows` (arrays of at most
        `n_slot_rows` rows in all, as abi.FILE_SLOT's words, those with a tag that is not their
        key's left out), as rows of `dtype`. Read a chunk at a time into an array whose pages
        take memory only as rows are written (zero-filled: the fields past file_stat's are
        zero)."""
        import numpy as np

        size = (n_slot_rows + self.max_entries[name]) * dtype.itemsize
        out = np.frombuffer(mmap.mmap(-1, size, mmap.MAP_PRIVATE), dtype=dtype)
        key_words = abi.FILE_KEY.size // 8
        n = 0
        for rows in slot_rows:
            rows = rows[abi.slot_tags_ok(abi.FILE_SLOTS, rows)]
            n += abi.file_counts_into(out[n:], rows[:, 1:1 + key_words].tobytes(),
                                      rows[:, 1 + key_words:].tobytes())
        for keys, values in m.raw_chunks(delete=True):
            n += abi.file_counts_into(out[n:], keys, values)
        return out[:n]

    @staticmethod
    def _percpu_sum(m: Map, index: int) -> int:
        """Slot `index` of a per-CPU array of u64, summed over the CPUs."""
        raw = m.lookup(index.to_bytes(4, "little")) or b""
        return sum(int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw), 8))

    def events_lost(self) -> int:
        """Ring-buffer records dropped because it was full (summed over CPUs)."""
        assert self._lost is not None
        return self._percpu_sum(self._lost, 0)

    def map_full_drops(self) -> dict[str, int]:
        """Inserts the kernel refused because a map was full, by map (abi.MAP_FULL_MAPS),
        cumulative, summed over CPUs: each is an operation whose counts were lost."""
        assert self._map_full is not None
        return {name: self._percpu_sum(self._map_full, i)
                for i, name in enumerate(abi.MAP_FULL_MAPS)}

    def block_unseen(self, in_flight: Callable[[], Mapping[int, int]] | None = None
                     ) -> tuple[int, int]:
        """(requests, bytes) of traced block requests that were issued and whose end no
        completion program saw (block.bpf.c, `block_unseen`), cumulative: those found when
        their address started a new request, and with `in_flight` (at the end of a trace: the
        requests each disk has in flight now, by device number) the records still held. A
        request still in flight holds one too: of each disk's records issued before this call,
        as many as the disk has requests in flight are taken to be those, the rest ended
        unseen. The disk is read again (for up to LEFTOVER_WAIT_S) until it has none in flight:
        then every record left ended unseen, which is exact even while other processes (another
        iotrace's job) use the disk. A disk never idle in that time keeps the best lower bound seen."""
        assert self._unseen is not None and self._rq_slots is not None
        requests, nbytes = self._percpu_sum(self._unseen, 0), self._percpu_sum(self._unseen, 1)
        if in_flight is None:
            return requests, nbytes
        assert self._rq_starts is not None
        since_ns = time.monotonic_ns()  # the clock of bpf_ktime_get_ns()
        best: dict[int, tuple[int, int]] = {}  # disk -> (requests, bytes), the most found
        exact: set[int] = set()  # disks seen idle: their count is exact
        deadline = since_ns + int(LEFTOVER_WAIT_S * 1e9)
        while True:
            # in flight read before the records: a record of a request still in flight at
            # that read is held then, so records - in flight never counts one of those
            busy_now = in_flight()
            held = [rec for rq, rec in (abi.RQ_SLOT.unpack(v) for _, v in self._rq_slots.items())
                    if rq]
            held += [v for _, v in self._rq_starts.items()]
            issued: dict[int, list[int]] = {}  # disk -> data_len of records issued before since_ns
            for _, issue_ns, _, _, _, tgid, data_len, dev, *_ in map(abi.RQ_START.unpack, held):
                if 0 < issue_ns < since_ns and tgid:  # (others' requests are recorded too)
                    issued.setdefault(dev, []).append(data_len)
            for dev, lengths in issued.items():
                busy = busy_now.get(dev, len(lengths))  # unknown disk: none counted
                n = len(lengths) - busy
                if n > best.get(dev, (0, 0))[0]:
                    best[dev] = (n, sum(sorted(lengths)[:n]))  # the least it can be
                if busy == 0:
                    exact.add(dev)
            if issued.keys() <= exact or time.monotonic_ns() >= deadline:
                break
            time.sleep(0.0005)
        for n, b in best.values():
            requests, nbytes = requests + n, nbytes + b
        return requests, nbytes

    # -- own cost -------------------------------------------------------------------------------
    def enable_stats(self) -> str | None:
        """Turns on the kernel's per-program run counts and times for as long as these probes
        are open (the kernel restores kernel.bpf_stats_enabled when they close, even on kill
        -9). Returns None, or why per-program cost is unavailable. Called again after
        pause_stats() (every interval with --bpf-stats sampled), it only takes a new fd."""
        if self._stats_fd is not None:
            return None
        if self._stats_since is None:  # the first time: what the host had before iotrace
            try:
                with open(STATS_SYSCTL) as f:
                    self.stats_before = int(f.read().strip() or 0)
            except (OSError, ValueError):
                self.stats_before = None
        try:
            _libbpf.lib()
            self._stats_fd = _libbpf.enable_stats()
            self._stats_since = time.monotonic()
        except LibbpfMissing as e:
            return str(e)
        except LibbpfError as e:
            if e.errno == errno.EPERM:
                return "BPF_ENABLE_STATS needs CAP_SYS_ADMIN"
            if e.errno == errno.EINVAL:
                return "this kernel has no BPF_ENABLE_STATS (Linux 5.8+)"
            return str(e)
        return None

    def pause_stats(self) -> None:
        """Turns the per-program statistics off again (enable_stats turns them back on): the
        kernel's two clock reads per program run cost more than some of the programs do."""
        if self._stats_fd is not None:
            os.close(self._stats_fd)
            self._stats_fd = None
            self._stats_s += time.monotonic() - self._stats_since

    @property
    def stats_seconds(self) -> float:
        """Seconds the per-program statistics have been on so far (what the counts cover)."""
        on = time.monotonic() - self._stats_since if self._stats_fd is not None else 0.0
        return self._stats_s + on

    def program_stats(self) -> list[tuple[str, str, str, ProgStats]]:
        """(stage, program name, section, cumulative stats) of every loaded program, the stage
        being the bpf/ source it came from (proc, syscall, pagecache, block, sched). Counts
        are since load, and only while stats were on (elsewhere, all 0)."""
        if self.obj is None:
            return []
        return [(self.stages.get(prog.name, "iotrace"), prog.name, prog.section,
                 _libbpf.prog_stats(prog.fd))
                for prog in self.obj.programs() if prog.autoload]

    def open_events(self, on_event: Callable[[bytes], None]) -> None:
        """`on_event(raw)` runs for every ring-buffer record during poll_events()."""
        assert self.obj is not None
        fd = self.obj.map_fd("events")
        self._ring = RingBuffer(fd, on_event)

    def poll_events(self, timeout_ms: int) -> int:
        return self._ring.poll(timeout_ms) if self._ring else 0

    def close(self) -> None:
        """Detaches and frees everything; safe to call twice."""
        self.detach()
        if self._ring:
            self._ring.close()
            self._ring = None
        for slots in self._slots:
            slots.close()
        self._slots.clear()
        self.forget_pidfds(list(self._pidfds))
        self._track = self._free_slot = None
        if self.obj is not None:
            self.obj.close()
            self.obj = None
        self.pause_stats()  # closing the fd: the kernel restores bpf_stats_enabled
