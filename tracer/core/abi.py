"""Python side of bpf/iotrace.h: constants, names and record layouts shared with the kernel side.

None of them is written here: sizes, offsets and enum values come from `abi_layout`, which
`make build` generates from the BPF object's BTF (scripts/abi_layout.py), through `layout`;
tests/test_abi.py checks them against the object and the header, field by field. Every
constant names its twin in the C header. Decoding is pure: bytes in, values out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from tracer.core import layout
from tracer.core.units import MAX_SLOTS

if TYPE_CHECKING:
    import numpy as np

# MAX_SLOTS: IOT_MAX_SLOTS; PAGE_SIZE: the unit of pages_missed and pages_dirtied (core/units)
COMM_LEN = layout.limit("IOT_COMM_LEN")
PATH_DEPTH = layout.limit("IOT_PATH_DEPTH")
NAME_LEN = layout.limit("IOT_NAME_LEN")
PATH_BYTES = layout.limit("IOT_PATH_BYTES")
FSTYPE_LEN = layout.limit("IOT_FSTYPE_LEN")

# enum iot_layer
LAYERS = layout.enum_names("iot_layer", "IOT_LAYER_")
# enum iot_op
OPS = layout.enum_names("iot_op", "IOT_OP_")
OP_OPEN = layout.enum_value("iot_op", "IOT_OP_OPEN")
# enum iot_target (0: IOT_TARGET_NONE, not a syscall row)
TARGETS = layout.enum_names("iot_target", "IOT_TARGET_")
TARGET_FILE = layout.enum_value("iot_target", "IOT_TARGET_FILE")
# IOT_TARGET_SOCKET: a socket of another family than AF_UNIX
TARGET_SOCKET = layout.enum_value("iot_target", "IOT_TARGET_SOCKET")
# enum iot_attribution (0: IOT_ATTR_NONE, not a block row)
ATTRIBUTIONS = layout.enum_names("iot_attribution", "IOT_ATTR_")
# enum iot_event_kind
(EVENT_FORK, EVENT_EXEC, EVENT_EXIT, EVENT_FILE, EVENT_SLOW, EVENT_RENAME, EVENT_DISCOVER,
 EVENT_DRAIN) = (layout.enum_value("iot_event_kind", f"IOT_EVENT_{k}")
                 for k in ("FORK", "EXEC", "EXIT", "FILE", "SLOW", "RENAME", "DISCOVER", "DRAIN"))
# enum iot_tracked_flags
TRACKED_WORKER = layout.enum_value("iot_tracked_flags", "IOT_TRACKED_WORKER")
# enum iot_thread_state
THREAD_STATES = layout.enum_names("iot_thread_state", "IOT_THREAD_")
THREAD_IOWAIT = layout.enum_value("iot_thread_state", "IOT_THREAD_IOWAIT")
# enum iot_waker, in woken_ns order
WAKERS = tuple(layout.enum_names("iot_waker", "IOT_WAKER_").values())
# enum iot_file_flags
FILE_TRUNCATED, FILE_DELETED, FILE_FS_ROOT = (
    layout.enum_value("iot_file_flags", f"IOT_FILE_{k}") for k in ("TRUNCATED", "DELETED", "FS_ROOT"))
# enum iot_map: the maps whose refused inserts `map_full` counts, by index (IOT_MAPS of them)
MAP_FULL_MAPS = tuple(layout.enum_names("iot_map", "IOT_MAP_").values())
# file_stats' refused inserts are not lost: those operations are counted in folder_stats
MAP_ROLLED_UP = {"file_stats": "folder_stats"}

# struct iot_config: have_io_start, page_shift, auto_discover, rq_slot_bits, hist_slot_bits,
# file_slot_bits, slow_ns, file_log_entries, file_log_mark, fold_keep, fold_share_pct
CONFIG = struct.Struct(layout.struct_format("iot_config"))
# struct hist_key: tgid, dev, layer, op, target, attribution
HIST_KEY = struct.Struct(layout.struct_format("hist_key"))
# struct hist: u64 count[MAX_SLOTS]; u64 bytes[MAX_SLOTS]
HIST_SIZE = layout.size("hist")
# struct iot_proc_event: kind, pid, ppid, exit_code, ts_ns, comm, ns_pid
PROC_EVENT = struct.Struct(layout.struct_format("iot_proc_event"))
DRAIN_EVENT = struct.Struct(layout.struct_format("iot_drain_event"))
# tracked map: u32 tgid -> struct tracked_info {root, flags}
TGID = struct.Struct("<I")
TRACKED_INFO = struct.Struct(layout.struct_format("tracked_info"))
# struct track_request (proc.bpf.c's `track` program): tgid, root, flags
TRACK_REQUEST = struct.Struct(layout.struct_format("track_request"))
# struct thread_time: tgid, state, since_ns, oncpu, runnable, sleep, iowait, woken_ns[4],
# reclaim_since_ns, reclaim_iowait_at, reclaim_ns, reclaim_blocked_ns, reclaims, fault_ip,
# fault_sp, fault_wait_ns, fault_sleeps, comm
THREAD_TIME = struct.Struct(layout.struct_format("thread_time"))
# struct file_key: tgid, dev, ino, gen, op, buf
FILE_KEY = struct.Struct(layout.struct_format("file_key"))
FILE_KEY_BUF = layout.offset("file_key", "buf")
# struct file_stat: ops, bytes, latency_sum_ns, pages_missed, pages_dirtied, latency_max_ns,
# dir_ino, opens, open_latency_sum_ns, open_latency_max_ns
FILE_STAT = struct.Struct(layout.struct_format("file_stat"))
# struct fold_stat: a struct file_stat, then files, reread_bytes, reread_pages (slots.bpf.h)
FOLD_STAT = struct.Struct(layout.struct_format("fold_stat"))
# struct fold_group: files, latency_ns, bytes, pages (what the kernel weighs a file against),
# folders
FOLD_GROUP = struct.Struct(layout.struct_format("fold_group"))
# Their fields as numpy decodes a batch of them (file_counts_dtype)
FILE_KEY_FIELDS = layout.numpy_fields("file_key")
FILE_STAT_FIELDS = layout.numpy_fields("file_stat")
# What a row of op open takes from the read or write key its opens count in (rollup.split)
OPEN_FIELDS = {"ops": "opens", "latency_sum_ns": "open_latency_sum_ns",
               "latency_max_ns": "open_latency_max_ns"}
# struct hist_slot: tag, hist_key, pad (struct hist follows); struct file_slot: tag, file_key
# (struct file_stat follows)
HIST_SLOT = struct.Struct(layout.struct_format("hist_slot", whole={"key", "h"}))
FILE_SLOT = struct.Struct(layout.struct_format("file_slot", whole={"key", "st"}))
# struct sys_start (a thread's syscall in flight): ts_ns, offset, file (dev, gen, ino), op,
# target, counters_at, then last_sent (dev, gen, ino), dir_ino
SYS_START = struct.Struct(layout.struct_format("sys_start"))
# struct write_span (a thread's file open for writing): since_ns, file (dev, gen, ino), fd,
# (pad), ended_since_ns, ended_ns, ended_file (dev, gen, ino)
WRITE_SPAN = struct.Struct(layout.struct_format("write_span"))
# struct rq_start (a block request in flight): insert_ns, issue_ns, file (dev, gen, ino), tgid,
# data_len, dev, op, attribution, kthread, cgroup, comm, dir_ino; struct rq_slot: rq (0: free), then a
# struct rq_start
RQ_START = struct.Struct(layout.struct_format("rq_start"))
# struct block_user_key: dev, op, traced, kthread, rest, cgroup, comm; struct block_user:
# requests, bytes, service_ns
BLOCK_USER_KEY = struct.Struct(layout.struct_format("block_user_key"))
BLOCK_USER = struct.Struct(layout.struct_format("block_user"))
# struct cpu_wait_key: tgid, taker, cgroup, traced, rest, comm; struct cpu_wait: waits, wait_ns,
# earlier_ns
CPU_WAIT_KEY = struct.Struct(layout.struct_format("cpu_wait_key"))
CPU_WAIT = struct.Struct(layout.struct_format("cpu_wait"))
RQ_SLOT = struct.Struct(layout.struct_format("rq_slot", whole={"s"}))
# enum iot_slot_table
HIST_SLOTS, FILE_SLOTS = (layout.enum_value("iot_slot_table", f"IOT_{k}_SLOTS") for k in ("HIST", "FILE"))
# struct free_slot_request (proc.bpf.c's `free_slot` program): table, index, tag
FREE_SLOT_REQUEST = struct.Struct(layout.struct_format("free_slot_request"))
_M64 = (1 << 64) - 1
U64 = TypeVar("U64", int, "np.ndarray")  # a u64, or a numpy array of them


def slot_tag(a: U64, b: U64, c: U64 | int) -> U64:
    """iotrace.h's slot_tag(): a key's tag from its words (u64 arithmetic), for ints or for
    numpy arrays of uint64 (which wrap as the kernel's u64 do)."""
    x = (a * 0x9E3779B97F4A7C15 + b * 0xC2B2AE3D27D4EB4F + c * 0x165667B19E3779F9) & _M64
    return (x ^ (x >> 32)) | 1


def slot_tags_ok(table: int, rows: np.ndarray) -> np.ndarray:
    """Which rows of u64 words (a numpy array: slots of hist_slots or file_slots, as read) hold
    the key their tag says: the words that iotrace.h's slot_tag() takes, from each row."""
    if table == HIST_SLOTS:  # tgid | dev << 32; layer, op, target, attribution (and the pad)
        tags = slot_tag(rows[:, 1], rows[:, 2] & 0xFFFFFFFF, 0)
    else:  # tgid | dev << 32; ino; gen | op << 32 (and the pad)
        tags = slot_tag(rows[:, 1], rows[:, 2], rows[:, 3] & 0xFF_FFFFFFFF)
    return tags == rows[:, 0]


# struct iot_file_event: kind, pid, dev, fd, ino, depth, flags, gen, len, dir_ino, fstype
# (names follow, packed: only `len` bytes of them are sent)
FILE_EVENT_HEAD = struct.Struct(layout.struct_format("iot_file_event", stop="names"))
FILE_EVENT_SIZE = FILE_EVENT_HEAD.size + PATH_BYTES
# struct iot_slow_event: kind, pid, tid, dev, ino, file_dev, file_gen, layer, op, ts_ns, offset,
# bytes, latency_ns, comm, dir_ino
SLOW_EVENT = struct.Struct(layout.struct_format("iot_slow_event"))


@dataclass(frozen=True)
class HistKey:
    """Which histogram: a process, a layer, an op, and the fd kind or the disk."""

    pid: int
    dev: int  # kernel dev_t (major << 20 | minor), 0 outside block layers
    layer: str
    op: str
    target: str | None
    attribution: str | None


@dataclass(frozen=True)
class ProcEvent:
    kind: int
    pid: int
    ppid: int
    exit_code: int
    ts_ns: int  # CLOCK_MONOTONIC
    comm: str
    ns_pid: int = 0  # fork/exec: the PID in its own PID namespace; 0 when not sent


class FileEvent(NamedTuple):
    """First sight of a file: its path components, base name first. (A tuple: a record of a
    job's every batch file in /dev/shm is decoded, and a frozen dataclass is slow to make.)"""

    pid: int
    dev: int  # kernel dev_t of the file system
    ino: int
    fd: int
    fs_type: str
    names: tuple[str, ...]
    truncated: bool
    deleted: bool
    fs_root: bool = False  # path from the file system's root (seen through the page cache)
    gen: int = 0  # the inode's generation: a reused inode number has another one
    dir_ino: int = 0  # the inode number of its folder (0: unknown)

    @property
    def path(self) -> str:
        return "/" + "/".join(reversed(self.names))


@dataclass(frozen=True)
class SlowEvent:
    pid: int
    tid: int
    dev: int  # syscall: the file system's dev_t; block: the disk's
    ino: int
    file_dev: int  # dev_t of the file system the file is on, 0 when unknown
    file_gen: int  # the file's inode generation (with file_dev and ino: which file)
    layer: str
    op: str
    ts_ns: int  # CLOCK_MONOTONIC, when the operation started
    offset: int
    bytes: int
    latency_ns: int
    comm: str
    dir_ino: int  # the file's folder, 0 when unknown: names a file that sent no record


@dataclass(frozen=True)
class ThreadTime:
    """Cumulative time of one thread by state, counting the open state up to `now_ns`."""

    pid: int
    tid: int
    comm: str
    oncpu_ns: int
    runnable_ns: int
    sleep_ns: int
    iowait_ns: int
    woken_ns: tuple[int, int, int, int]  # by WAKERS
    reclaim_ns: int = 0  # in memory reclaim (memory.bpf.c), part of the four above
    reclaim_blocked_ns: int = 0  # ... of it, blocked (D)
    reclaims: int = 0
    fault_wait_ns: int = 0  # in D inside page faults from user space, part of iowait_ns
    fault_sleeps: int = 0  # ... in that many sleeps

    def as_tuple(self) -> tuple[int, ...]:
        return (self.oncpu_ns, self.runnable_ns, self.sleep_ns, self.iowait_ns, *self.woken_ns,
                self.reclaim_ns, self.reclaim_blocked_ns, self.reclaims, self.fault_wait_ns,
                self.fault_sleeps)


def decode_thread_time(tid: int, raw: bytes, now_ns: int) -> ThreadTime:
    """The kernel adds a state's time when the state ends; the open one is added here, so that
    deltas between two reads are exact (a reclaim or a sleep in a fault in progress likewise)."""
    (tgid, state, fault_sleep, since, oncpu, runnable, sleep, iowait, w0, w1, w2, w3,
     reclaim_since, reclaim_iowait_at, reclaim, blocked, reclaims, _ip, _sp, fault_wait,
     fault_sleeps, comm) = THREAD_TIME.unpack_from(raw)
    times = [oncpu, runnable, sleep, iowait]
    if THREAD_STATES.get(state, "dead") != "dead" and now_ns > since:
        times[state] += now_ns - since
        if state == THREAD_IOWAIT and fault_sleep:
            fault_wait += now_ns - since
    if reclaim_since and now_ns > reclaim_since:
        reclaim += now_ns - reclaim_since
        blocked += max(0, times[THREAD_IOWAIT] - reclaim_iowait_at)
    return ThreadTime(tgid, tid, _cstr(comm), *times, (w0, w1, w2, w3), reclaim, blocked,
                      reclaims, fault_wait, fault_sleeps)


class FileKey(NamedTuple):  # (a tuple: made for every per-file row, a third of a dataclass's cost)
    pid: int
    dev: int
    ino: int
    gen: int  # the inode's generation (dev, ino, gen: one file over time)
    op: str


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def event_kind(raw: bytes) -> int:
    """The kind of a ring-buffer record (the first u32 of every record)."""
    return int.from_bytes(raw[:4], "little")


def decode_drain_event(raw: bytes) -> tuple[int, int]:
    """(buffer, its log's records in use) of a struct iot_drain_event: the kernel asks for the
    per-file buffer to be drained before the interval ends (slots.bpf.h, ask_drain)."""
    _, buf, used = DRAIN_EVENT.unpack_from(raw)
    return buf, used


def file_event_ids(raw: bytes) -> tuple[int, int, int, int, bool]:
    """(dev, ino, gen, folder inode, whether user space must look now) of a first-sight record,
    without its names: a cut path is completed from the fd while it is open, and a path from
    the file system's root from the process's mounts while it runs."""
    _, _, dev, _, ino, _, flags, gen, _, dir_ino, _ = FILE_EVENT_HEAD.unpack_from(raw)
    return dev, ino, gen, dir_ino, bool(flags & (FILE_TRUNCATED | FILE_FS_ROOT))


def decode_file_event(raw: bytes) -> FileEvent:
    _, pid, dev, fd, ino, depth, flags, gen, size, dir_ino, fstype = (
        FILE_EVENT_HEAD.unpack_from(raw))
    base = FILE_EVENT_HEAD.size
    packed = raw[base: base + min(size, PATH_BYTES)].split(b"\0")
    names = tuple([n.decode(errors="replace") for n in packed[:min(depth, PATH_DEPTH)]])
    return FileEvent(pid, dev, ino, fd, _cstr(fstype), names, bool(flags & FILE_TRUNCATED),
                     bool(flags & FILE_DELETED), bool(flags & FILE_FS_ROOT), gen, dir_ino)


def decode_slow_event(raw: bytes) -> SlowEvent:
    (_, pid, tid, dev, ino, file_dev, file_gen, layer, op, ts, offset, nbytes, latency,
     comm, dir_ino) = SLOW_EVENT.unpack_from(raw)
    return SlowEvent(pid, tid, dev, ino, file_dev, file_gen, LAYERS.get(layer, "other"),
                     OPS.get(op, "other"), ts, offset, nbytes, latency, _cstr(comm), dir_ino)


def decode_file_key(raw: bytes) -> FileKey:
    tgid, dev, ino, gen, op, _buf = FILE_KEY.unpack(raw)
    return FileKey(tgid, dev, ino, gen, OPS.get(op, "other"))


def file_counts_dtype() -> np.dtype:
    """A struct file_key followed by its struct file_stat, as numpy reads a batch of them."""
    import numpy as np

    return np.dtype(list(FILE_KEY_FIELDS + FILE_STAT_FIELDS))


def file_counts(keys: bytes, values: bytes) -> np.ndarray:
    """Raw struct file_key and struct file_stat, n of each, as one array of file_counts_dtype."""
    import numpy as np

    out = np.empty(len(keys) // FILE_KEY.size, dtype=file_counts_dtype())
    file_counts_into(out, keys, values)
    return out


def file_counts_into(out: np.ndarray, keys: bytes, values: bytes) -> int:
    """Writes raw struct file_key and struct file_stat, n of each, into the first n rows of
    `out` (contiguous; file_counts_dtype, or a dtype that begins with its fields, whose others
    are left as they are); returns n. Each row is its key's bytes then its value's, copied as
    two blocks (a field at a time was ten copies): an interval's entries at 30 000 files/s are
    megabytes, copied once."""
    import numpy as np

    ks, vs = FILE_KEY.size, FILE_STAT.size
    n = len(keys) // ks
    rows = out[:n].view(np.uint8).reshape(n, out.dtype.itemsize)
    rows[:, :ks] = np.frombuffer(keys, dtype=np.uint8).reshape(n, ks)
    rows[:, ks:ks + vs] = np.frombuffer(values, dtype=np.uint8).reshape(n, vs)
    return n


def fold_counts_into(out: np.ndarray, files: np.ndarray, keys: bytes, values: bytes) -> int:
    """file_counts_into for raw struct file_key and struct fold_stat: the file_stat part into
    the rows, `reread_bytes` and `reread_pages` into those fields of `out` (which has them:
    tracer.live.rereads.rows_dtype), the files folded into `files`; returns n."""
    import numpy as np

    ks, vs, ss = FILE_KEY.size, FOLD_STAT.size, FILE_STAT.size
    n = len(keys) // ks
    rows = out[:n].view(np.uint8).reshape(n, out.dtype.itemsize)
    rows[:, :ks] = np.frombuffer(keys, dtype=np.uint8).reshape(n, ks)
    tail = np.frombuffer(values, dtype=np.uint8).reshape(n, vs)
    rows[:, ks:ks + ss] = tail[:, :ss]
    more = tail[:, ss:].copy().view("<u8")  # files, reread_bytes, reread_pages
    files[:n] = more[:, 0]
    out["reread_bytes"][:n] = more[:, 1]
    out["reread_pages"][:n] = more[:, 2]
    return n


def fold_group_buf(raw: bytes) -> int:
    """The interval buffer of a key of fold_groups (tgid | buf << 32)."""
    return decode_u64(raw) >> 32


def read_files_bits(buffer) -> np.ndarray:
    """The read_files bitmap (maps.bpf.h; a mapping of it) as bytes, in place: bit i of the
    map's bits is bit i % 8 of byte i // 8 (little-endian words)."""
    import numpy as np

    return np.frombuffer(buffer, dtype=np.uint8)


def decode_hist_key(raw: bytes) -> HistKey:
    tgid, dev, layer, op, target, attr = HIST_KEY.unpack(raw)
    return HistKey(tgid, dev, LAYERS.get(layer, "other"), OPS.get(op, "other"),
                   TARGETS.get(target), ATTRIBUTIONS.get(attr))


class BlockUserKey(NamedTuple):
    """Who used a disk: a traced process (`traced`; which one, the hists say) or another one,
    by cgroup and name (empty when a kernel thread started its requests: `kthread`)."""

    dev: int
    op: str
    traced: bool
    kthread: bool
    rest: bool  # the disk's requests past the map's named keys: no cgroup, no name
    cgroup: int  # the bio's cgroup: its directory's inode number (kernfs id); 0: none
    comm: str


def decode_block_user_key(raw: bytes) -> BlockUserKey:
    dev, op, traced, kthread, rest, cgroup, comm = BLOCK_USER_KEY.unpack(raw)
    return BlockUserKey(dev, OPS.get(op, "other"), bool(traced), bool(kthread), bool(rest),
                        cgroup, _cstr(comm))


class CpuWaitKey(NamedTuple):
    """Who had a CPU while a thread of traced process `pid` waited for it (sched.bpf.c's
    cpu_waits): process `taker` (0: the CPU was idle), traced or not, by cgroup and name."""

    pid: int
    taker: int
    cgroup: int  # its cgroup v2 directory's inode number (kernfs id)
    traced: bool
    rest: bool  # the process's waits past the map's named keys: no taker, cgroup or name
    comm: str


def decode_cpu_wait_key(raw: bytes) -> CpuWaitKey:
    pid, taker, cgroup, traced, rest, comm = CPU_WAIT_KEY.unpack(raw)
    return CpuWaitKey(pid, taker, cgroup, bool(traced), bool(rest), _cstr(comm))


def cpu_wait_key_pids(raw: bytes) -> tuple[int, int]:
    """(the waiting process, the process that had the CPU) of a raw struct cpu_wait_key."""
    return CPU_WAIT_KEY.unpack_from(raw)[:2]


def decode_cpu_wait(raw: bytes) -> tuple[int, int, int]:
    """A raw struct cpu_wait: (waits, wait_ns, earlier_ns)."""
    return CPU_WAIT.unpack(raw)


def decode_hist(raw: bytes) -> np.ndarray:
    """(2, MAX_SLOTS) uint64 numpy array: row 0 operation counts, row 1 bytes, per log2 ns
    slot. (numpy is imported here, not at module load: the loader imports this module before
    it attaches, and attach time counts.)"""
    import numpy as np

    return np.frombuffer(raw, dtype="<u8").reshape(2, MAX_SLOTS).copy()


def decode_proc_event(raw: bytes) -> ProcEvent:
    kind, pid, ppid, code, ts, comm, ns_pid = PROC_EVENT.unpack_from(raw)
    return ProcEvent(kind, pid, ppid, code, ts, _cstr(comm), ns_pid)


def dev_major_minor(dev: int) -> tuple[int, int]:
    """Splits a kernel-internal dev_t (MINORBITS = 20)."""
    return dev >> 20, dev & ((1 << 20) - 1)


# -- Map entries as tracer/kernel reads them. The kernel/ modules hand bytes (and the u64 words
# of mapped slot tables) to these and never unpack a layout themselves: a layout is read here only.

def decode_u32(raw: bytes) -> int:
    """A u32 key or value: a thread's id (the `threads` map's key), a tgid."""
    return TGID.unpack_from(raw)[0]


def decode_u64(raw: bytes | None) -> int:
    """A u64 value (a count, an epoch); a missing one (None) is 0."""
    return int.from_bytes(raw or b"", "little")


def percpu_u64_sum(raw: bytes | None) -> int:
    """A per-CPU array's u64 slot as a lookup returns it (one u64 per possible CPU), summed
    over the CPUs; a missing one (None) is 0."""
    raw = raw or b""
    return sum(int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw), 8))


def hist_key_tgid(raw: bytes) -> int:
    """The process of a raw struct hist_key (its first field)."""
    return HIST_KEY.unpack_from(raw)[0]


def hist_key_target(raw: bytes) -> tuple[int, int]:
    """(tgid, target) of a raw struct hist_key, target as enum iot_target (TARGET_SOCKET...)."""
    tgid, _dev, _layer, _op, target, _attr = HIST_KEY.unpack(raw)
    return tgid, target


def thread_time_tgid(raw: bytes) -> int:
    """The process of a raw struct thread_time (its first field)."""
    return THREAD_TIME.unpack_from(raw)[0]


def add_hists(a: bytes, b: bytes) -> bytes:
    """Two raw struct hist added up, slot by slot."""
    import numpy as np

    return (np.frombuffer(a, dtype="<u8") + np.frombuffer(b, dtype="<u8")).tobytes()


def decode_held_slots(table: int, index: np.ndarray, rows: np.ndarray
                      ) -> list[tuple[tuple[int, int], bytes, bytes]]:
    """((index, tag), raw key, raw value) of held slots of `table` (HIST_SLOTS or FILE_SLOTS),
    given as their indexes and their rows of u64 words. A slot whose tag is not its key's is
    being taken by another key right now: left out (for the next reading)."""
    ok = slot_tags_ok(table, rows)
    rows = rows[ok]
    at = zip(index[ok].tolist(), rows[:, 0].tolist(), strict=True)
    layout = HIST_SLOT if table == HIST_SLOTS else FILE_SLOT
    return [((i, tag), key, value) for (i, tag), (_, key, value)
            in zip(at, layout.iter_unpack(rows.tobytes()), strict=True)]


def file_slots_into(out: np.ndarray, rows: np.ndarray) -> int:
    """file_counts_into for rows of u64 words of file slots (FILE_SLOT: tag, file_key,
    file_stat), those with a tag that is not their key's left out, and those with no counts
    (a file folded at its close: slots.bpf.h, fold_on_close); returns the rows written."""
    import numpy as np

    keep = slot_tags_ok(FILE_SLOTS, rows)
    counts = rows[:, _COUNT_WORDS[0]] != 0
    for word in _COUNT_WORDS[1:]:
        counts |= rows[:, word] != 0
    rows = rows[keep & counts]
    n, words = len(rows), (FILE_KEY.size + FILE_STAT.size) // 8
    # a slot is its tag then the key and the counters, as a row begins: one copy per row
    out[:n].view(np.uint8).reshape(n, out.dtype.itemsize)[:, :8 * words] = (
        rows[:, 1:1 + words].view(np.uint8))
    return n


# The words of a file slot that say it holds counts: ops, pages missed and dirtied, opens
_COUNT_WORDS = tuple(1 + (FILE_KEY.size + layout.offset("file_stat", name)) // 8
                     for name in ("ops", "pages_missed", "pages_dirtied", "opens"))


class Drain(NamedTuple):
    """One per-file buffer taken out of the kernel (kernel.maps.Maps.drain_file_stats): its
    files' counters, its folders' (operations past a full file_stats), and the files folded
    at their close per folder (`folded`, with `folded_files` files in each row)."""

    files: np.ndarray
    folders: np.ndarray
    folded: np.ndarray
    folded_files: np.ndarray


def decode_sys_start(raw: bytes) -> tuple[int, int, int, int, int, int, int] | None:
    """A thread's syscall in flight (struct sys_start) as (start, op, target, dev, ino, gen,
    dir_ino), start in CLOCK_MONOTONIC ns; None when the thread is in none (start 0)."""
    ts, _off, dev, gen, ino, op, target, *_, dir_ino = SYS_START.unpack(raw)
    return (ts, op, target, dev, ino, gen, dir_ino) if ts else None


class WriteSpans(NamedTuple):
    """A thread's write spans (struct write_span), CLOCK_MONOTONIC ns: the one open now (since
    0: none) and the last one closed (ended_since 0: none yet); files as (dev, ino, gen)."""

    since: int
    file: tuple[int, int, int]
    ended_since: int
    ended: int
    ended_file: tuple[int, int, int]


def decode_write_span(raw: bytes) -> WriteSpans:
    since, dev, gen, ino, _fd, e_since, e_ns, e_dev, e_gen, e_ino = WRITE_SPAN.unpack(raw)
    return WriteSpans(since, (dev, ino, gen), e_since, e_ns, (e_dev, e_ino, e_gen))


class HeldRequest(NamedTuple):
    """What the end-of-trace count of block requests that ended unseen takes of a record still
    held in rq_slots or rq_starts (struct rq_start)."""

    issue_ns: int
    tgid: int  # 0: another process's request (recorded for block_users)
    data_len: int
    dev: int


def decode_rq_slot(raw: bytes) -> HeldRequest | None:
    """A slot of rq_slots (struct rq_slot): its record, None when the slot is free."""
    rq, rec = RQ_SLOT.unpack(raw)
    return decode_rq_start(rec) if rq else None


def decode_rq_start(raw: bytes) -> HeldRequest:
    _, issue_ns, _, _, _, tgid, data_len, dev, *_ = RQ_START.unpack(raw)
    return HeldRequest(issue_ns, tgid, data_len, dev)


def decode_block_user(raw: bytes) -> tuple[int, int, int]:
    """A raw struct block_user: (requests, bytes, service_ns)."""
    return BLOCK_USER.unpack(raw)


# -- CUDA driver calls (bpf/cuda.bpf.c): enum iot_cuda_call's names by value ("stream_sync",
# "dtoh", ...), without the count IOT_CUDA_CALLS; and the `cuda_threads` map's values.
CUDA_CALLS = {v: n for v, n in layout.enum_names("iot_cuda_call", "IOT_CUDA_").items()
              if v < layout.enum_value("iot_cuda_call", "IOT_CUDA_CALLS")}
CUDA_CALL = {n: v for v, n in CUDA_CALLS.items()}  # name -> the cookie of its uprobes
CUDA_THREAD = struct.Struct(layout.struct_format("cuda_thread"))
# A synchronisation after at least this many bytes of async copies on its thread is counted as
# "copy_wait" (the copies' time), not as the wait it named (bpf/iotrace.h)
CUDA_COPY_WAIT_BYTES = layout.enum_value("iot_cuda_call", "IOT_CUDA_COPY_WAIT_BYTES")


@dataclass(frozen=True)
class CudaThread:
    """One thread's CUDA driver calls, cumulative: per call kind (CUDA_CALLS' names), how many
    returned, the ns spent in them and the bytes they copied; and the call it is in now."""

    pid: int
    tid: int
    calls: dict[str, int]
    ns: dict[str, int]  # with the call in flight's time so far (decode_cuda_thread's now_ns)
    bytes: dict[str, int]
    in_flight: str | None = None  # the call kind the thread is in, None: none
    in_flight_since_ns: int = 0  # CLOCK_MONOTONIC


def decode_cuda_thread(tid: int, raw: bytes, now_ns: int = 0) -> CudaThread:
    """A raw struct cuda_thread. With `now_ns`, the call in flight's time up to then is in its
    kind's ns (not in its count, which its return adds), as decode_thread_time adds the open
    state's: the deltas between two reads are then exact, a wait of seconds included."""
    n = len(CUDA_CALLS)
    tgid, call, start_ns, _start_bytes, _queued, *rest = CUDA_THREAD.unpack(raw)
    names = [CUDA_CALLS[i] for i in range(n)]
    ns = dict(zip(names, rest[n:2 * n], strict=True))
    flying = CUDA_CALLS.get(call) if start_ns else None
    if flying is not None and now_ns > start_ns:
        ns[flying] += now_ns - start_ns
    return CudaThread(tgid, tid, dict(zip(names, rest[:n], strict=True)), ns,
                      dict(zip(names, rest[2 * n:], strict=True)), flying, start_ns if flying else 0)
