"""Python twin of bpf/iotrace.h: constants, names and record layouts shared with the kernel side.

Every constant names its twin in the C header; tests/test_abi.py compiles the header and checks
sizes and offsets against the struct formats here. Decoding is pure: bytes in, values out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from tracer.core.units import MAX_SLOTS
from tracer.core.units import PAGE_SIZE as PAGE_SIZE  # (public names of this module before units)
from tracer.core.units import slot_bounds_ns as slot_bounds_ns

if TYPE_CHECKING:
    import numpy as np

# MAX_SLOTS: IOT_MAX_SLOTS; PAGE_SIZE: the unit of pages_missed and pages_dirtied (core/units)
COMM_LEN = 16  # IOT_COMM_LEN
PATH_DEPTH = 32  # IOT_PATH_DEPTH
NAME_LEN = 64  # IOT_NAME_LEN
PATH_BYTES = 2048  # IOT_PATH_BYTES
FSTYPE_LEN = 16  # IOT_FSTYPE_LEN

# enum iot_layer
LAYERS = {1: "syscall", 2: "block", 3: "block_queue", 4: "pagecache"}
# enum iot_op
OPS = {0: "read", 1: "write", 2: "fsync", 3: "flush", 4: "discard", 5: "other", 6: "open"}
OP_OPEN = 6  # IOT_OP_OPEN
# enum iot_target (0: IOT_TARGET_NONE, not a syscall row)
TARGETS = {0: None, 1: "file", 2: "pipe", 3: "socket", 4: "other", 5: "unix_socket"}
TARGET_FILE = 1  # IOT_TARGET_FILE
TARGET_SOCKET = 3  # IOT_TARGET_SOCKET: a socket of another family than AF_UNIX
# enum iot_attribution (0: IOT_ATTR_NONE, not a block row)
ATTRIBUTIONS = {0: None, 1: "direct", 2: "writeback", 3: "readahead", 4: "unknown"}
# enum iot_event_kind
EVENT_FORK, EVENT_EXEC, EVENT_EXIT, EVENT_FILE, EVENT_SLOW, EVENT_RENAME, EVENT_DISCOVER = (
    1, 2, 3, 4, 5, 6, 7)
# enum iot_tracked_flags
TRACKED_WORKER = 1
# enum iot_thread_state
THREAD_STATES = {0: "oncpu", 1: "runnable", 2: "sleep", 3: "iowait", 4: "dead"}
# enum iot_waker, in woken_ns order
WAKERS = ("own", "worker", "pin", "other")
# enum iot_file_flags
FILE_TRUNCATED, FILE_DELETED, FILE_FS_ROOT = 1, 2, 4
# enum iot_map: the maps whose refused inserts `map_full` counts, by index (IOT_MAPS of them)
MAP_FULL_MAPS = ("tracked", "hists", "file_stats", "threads", "rq_starts", "folder_stats",
                 "block_users")
# file_stats' refused inserts are not lost: those operations are counted in folder_stats
MAP_ROLLED_UP = {"file_stats": "folder_stats"}

# struct iot_config: have_io_start, page_shift, auto_discover, rq_slot_bits, hist_slot_bits,
# file_slot_bits, slow_ns, file_log_entries
CONFIG = struct.Struct("<BBBBBB2xQI4x")
# struct hist_key: tgid, dev, layer, op, target, attribution
HIST_KEY = struct.Struct("<IIBBBB")
# struct hist: u64 count[MAX_SLOTS]; u64 bytes[MAX_SLOTS]
HIST_SIZE = 2 * 8 * MAX_SLOTS
# struct iot_proc_event: kind, pid, ppid, exit_code, ts_ns, comm, ns_pid
PROC_EVENT = struct.Struct(f"<IIIiQ{COMM_LEN}sI4x")
# tracked map: u32 tgid -> struct tracked_info {root, flags}
TGID = struct.Struct("<I")
TRACKED_INFO = struct.Struct("<II")
# struct track_request (proc.bpf.c's `track` program): tgid, root, flags
TRACK_REQUEST = struct.Struct("<III")
# struct thread_time: tgid, state, since_ns, oncpu, runnable, sleep, iowait, woken_ns[4], comm
THREAD_TIME = struct.Struct(f"<IB3xQ4Q4Q{COMM_LEN}s")
# struct file_key: tgid, dev, ino, gen, op, buf
FILE_KEY = struct.Struct("<IIQIBB2x")
FILE_KEY_BUF = 21  # the offset of buf
# struct file_stat: ops, bytes, latency_sum_ns, pages_missed, pages_dirtied, latency_max_ns,
# dir_ino, opens, open_latency_sum_ns, open_latency_max_ns
FILE_STAT = struct.Struct("<10Q")
# Their fields as numpy decodes a batch of them (file_counts_dtype)
FILE_KEY_FIELDS = (("tgid", "<u4"), ("dev", "<u4"), ("ino", "<u8"), ("gen", "<u4"), ("op", "u1"),
                   ("buf", "u1"), ("_pad", "V2"))
FILE_STAT_FIELDS = (("ops", "<u8"), ("bytes", "<u8"), ("latency_sum_ns", "<u8"),
                    ("pages_missed", "<u8"), ("pages_dirtied", "<u8"), ("latency_max_ns", "<u8"),
                    ("dir_ino", "<u8"), ("opens", "<u8"), ("open_latency_sum_ns", "<u8"),
                    ("open_latency_max_ns", "<u8"))
# What a row of op open takes from the read or write key its opens count in (rollup.split)
OPEN_FIELDS = {"ops": "opens", "latency_sum_ns": "open_latency_sum_ns",
               "latency_max_ns": "open_latency_max_ns"}
# struct hist_slot: tag, hist_key, pad (struct hist follows); struct file_slot: tag, file_key
# (struct file_stat follows)
HIST_SLOT = struct.Struct(f"<Q{HIST_KEY.size}s4x{HIST_SIZE}s")
FILE_SLOT = struct.Struct(f"<Q{FILE_KEY.size}s{FILE_STAT.size}s")
# struct sys_start (a thread's syscall in flight): ts_ns, offset, file (dev, gen, ino), op,
# target, counters_at, then last_sent (dev, gen, ino), dir_ino
SYS_START = struct.Struct("<QQIIQBB2xIIIQQ")
# struct rq_start (a block request in flight): insert_ns, issue_ns, file (dev, gen, ino), tgid,
# data_len, dev, op, attribution, kthread, cgroup, comm; struct rq_slot: rq (0: free), then a
# struct rq_start
RQ_START = struct.Struct(f"<QQIIQIIIBBBxQ{COMM_LEN}s")
# struct block_user_key: dev, op, traced, kthread, rest, cgroup, comm; struct block_user:
# requests, bytes, service_ns
BLOCK_USER_KEY = struct.Struct(f"<IBBBBQ{COMM_LEN}s")
BLOCK_USER = struct.Struct("<3Q")
RQ_SLOT = struct.Struct(f"<Q{RQ_START.size}s")
# enum iot_slot_table
HIST_SLOTS, FILE_SLOTS = 0, 1
# struct free_slot_request (proc.bpf.c's `free_slot` program): table, index, tag
FREE_SLOT_REQUEST = struct.Struct("<IIQ")
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
FILE_EVENT_HEAD = struct.Struct(f"<IIIiQIIIIQ{FSTYPE_LEN}s")
FILE_EVENT_SIZE = FILE_EVENT_HEAD.size + PATH_BYTES
# struct iot_slow_event: kind, pid, tid, dev, ino, file_dev, file_gen, layer, op, ts_ns, offset,
# bytes, latency_ns, comm
SLOW_EVENT = struct.Struct(f"<IIIIQIIBB6xQQQQ{COMM_LEN}s")


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


@dataclass(frozen=True)
class FileEvent:
    """First sight of a file: its path components, base name first."""

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

    def as_tuple(self) -> tuple[int, ...]:
        return (self.oncpu_ns, self.runnable_ns, self.sleep_ns, self.iowait_ns, *self.woken_ns)


def decode_thread_time(tid: int, raw: bytes, now_ns: int) -> ThreadTime:
    """The kernel adds a state's time when the state ends; the open one is added here, so that
    deltas between two reads are exact."""
    tgid, state, since, oncpu, runnable, sleep, iowait, w0, w1, w2, w3, comm = (
        THREAD_TIME.unpack_from(raw))
    times = [oncpu, runnable, sleep, iowait]
    if THREAD_STATES.get(state, "dead") != "dead" and now_ns > since:
        times[state] += now_ns - since
    return ThreadTime(tgid, tid, _cstr(comm), *times, (w0, w1, w2, w3))


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


def decode_file_event(raw: bytes) -> FileEvent:
    _, pid, dev, fd, ino, depth, flags, gen, size, dir_ino, fstype = (
        FILE_EVENT_HEAD.unpack_from(raw))
    base = FILE_EVENT_HEAD.size
    packed = raw[base: base + min(size, PATH_BYTES)].split(b"\0")
    names = tuple(n.decode(errors="replace") for n in packed[:min(depth, PATH_DEPTH, len(packed))])
    return FileEvent(pid, dev, ino, fd, _cstr(fstype), names, bool(flags & FILE_TRUNCATED),
                     bool(flags & FILE_DELETED), bool(flags & FILE_FS_ROOT), gen, dir_ino)


def decode_slow_event(raw: bytes) -> SlowEvent:
    (_, pid, tid, dev, ino, file_dev, file_gen, layer, op, ts, offset, nbytes, latency,
     comm) = SLOW_EVENT.unpack_from(raw)
    return SlowEvent(pid, tid, dev, ino, file_dev, file_gen, LAYERS.get(layer, "other"),
                     OPS.get(op, "other"), ts, offset, nbytes, latency, _cstr(comm))


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
