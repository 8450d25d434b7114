"""What holds the training job back: the loop's time per interval, and verdicts with advice.

Input is the rows of one interval as the trace stores them (threads, files, latency, devices),
so a live run and `iotrace report` on a finished trace reach the same verdicts. The rules and
every threshold are documented in docs/diagnosis.md; the thresholds live in THRESHOLDS below.

The training loop is the main thread of each `main` process. Its time in an interval is split,
in this order, into:
  checkpoint    it writes or fsyncs a large regular file (a checkpoint), or sleeps while a
                background saver (another thread, a child process) is blocked writing one
  sync_writes   it writes or fsyncs other files itself (logs, metrics)
  sync_loading  its process reads files itself (num_workers=0 loads batches this way)
  data_wait_*   it sleeps and a DataLoader worker or the pin-memory thread wakes it: waiting for
                a batch; split into _io, _cpu and _network by what the workers did meanwhile
                (blocked in D state on reads/page faults, on CPU, in socket reads); without
                workers, its own socket reads are data_wait_network
  compute       on CPU otherwise (or waiting on the GPU: a spinning CUDA sync is on CPU)
  other         the rest: runnable without a CPU, sleeps ended by anything else
"""

from __future__ import annotations

import functools
import json
import re
from array import array
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from tracer.core.abi import MAX_SLOTS
from tracer.core.cgroup import short_name
from tracer.core.histogram import format_bytes, format_ns, percentile_ns, slot_of
from tracer.core.model import (
    DeviceRow,
    DeviceUserRow,
    FileRow,
    FindingRow,
    LatencyRow,
    LoopRow,
    MemoryRow,
    ThreadRow,
)
from tracer.core.vocab import (
    CHILD,
    DATALOADER_WORKER,
    FINDING_KINDS,
    IO_KINDS,
    LOOP_ROLES,
    LOOP_STATES,
    MAIN,
    RANK,
)

STATES = LOOP_STATES  # the loop table's states, by this module's name for them
KINDS = FINDING_KINDS
SLOW_FS_TYPES = {"overlay", "nfs", "nfs4", "fuse", "fuseblk", "9p", "virtiofs", "cifs", "smb3",
                 "ceph", "glusterfs", "lustre"}
# Reads that are not the data set: the interpreter, libraries and the system's own files.
_PSEUDO_FS = {"proc", "sysfs", "cgroup", "cgroup2", "devtmpfs", "devpts", "debugfs", "tracefs",
              "securityfs", "bpf", "configfs", "bdev", "pipefs", "sockfs", "anon_inodefs"}
_SYSTEM_ROOTS = ("/proc/", "/sys/", "/dev/", "/run/", "/etc/", "/lib/", "/lib64/", "/usr/lib/",
                 "/usr/lib64/", "/usr/local/lib/", "/usr/share/")
_LIBRARY_PARTS = ("/site-packages/", "/dist-packages/", "/lib/python3", "/__pycache__/")
_LIBRARY_NAME = re.compile(r"(\.(py|pyc|pyi|pyd|pth|so)|\.so(\.\d+)+|/pyvenv\.cfg)$")


@dataclass(frozen=True)
class Thresholds:
    """Every number the verdicts depend on, in one place (docs/diagnosis.md explains them)."""

    loop_share: float = 0.25  # a data-wait or loading state is a finding above this share
    checkpoint_share: float = 0.10  # checkpoint writes above this share of the loop's time
    checkpoint_file_bytes: int = 8 << 20  # a written file this big (cumulative) is a checkpoint
    sync_writes_share: float = 0.10  # the loop's own writes of other files above this share
    cold_miss_ratio: float = 0.5  # an interval reading mostly from disk
    warm_miss_ratio: float = 0.1  # an interval reading mostly from the page cache
    min_read_bytes: int = 1 << 20  # an interval with fewer file reads says nothing about caching
    cold_min_intervals: int = 2  # cold intervals that the reads must start with for cold_cache
    # dataset_exceeds_cache: of the bytes read again (files read in an earlier interval), at
    # least this share missed the page cache again, of at least this many bytes
    reread_miss_ratio: float = 0.5
    min_reread_bytes: int = 16 << 20
    small_file_bytes: int = 256 << 10  # median bytes read per file below this: small files
    small_files_min_count: int = 100
    saturated_util_pct: float = 90.0
    saturated_queue_ratio: float = 4.0  # queue time / service time (block_queue vs block p50)
    slow_fs_read_share: float = 0.5  # share of read bytes on a slow file system
    contended_share: float = 0.5  # others did more than this share of the job's disk's read bytes
    contended_min_bytes: int = 1 << 20  # ... when they read at least this much of it
    window_s: float = 30.0  # findings during a run cover the last window_s seconds
    wake_window: int = 5  # intervals of wake-ups that say who ends the loop's sleeps
    # Without workers, training starts in the first interval that reads this much of the data
    # set (files or bytes): a config file or two read while importing is not yet training.
    startup_data_files: int = 16
    startup_data_bytes: int = 1 << 20
    startup_long_s: float = 5.0  # the summary says what a start-up this long waited for
    # a rank is the straggler when the others waited in collectives at least `straggler_share`
    # of their time (on average) and it waited at most `straggler_ratio` of that. Measured on
    # 2 CPUs shared with other jobs: a balanced 2-rank job's ranks waited up to 28 % and 10 %
    # (one got less CPU), one with a rank on a throttled disk 55-84 % (4 ranks: 39-47 %).
    straggler_share: float = 0.35
    straggler_ratio: float = 0.5


THRESHOLDS = Thresholds()
MAX_INTERVALS = 3600
# Files an interval's reads keep by path, the others counting in their folder's entry, and
# folders, the others counting in their parent folder's entry (_nearest): an
# ImageNet-shaped job reads 1 000 class folders every interval, which kept unbounded took
# 250-460 KiB an interval (1.6 GiB for MAX_INTERVALS of them); bounded, about 27 KiB.
MAX_READ_PATHS = 32
MAX_READ_FOLDERS = 32
MAX_READ_AHEAD = 100_000  # files whose read-ahead pages are remembered (bounded memory)
MAX_PEERS = 8  # TCP peers named per main process
MAX_DISK_USERS = 8  # other users of a disk kept per interval and named in a finding
# Threads that a process group starts, by the names PyTorch and gloo give them: a rank that has
# one runs collectives with that backend.
COLLECTIVE_THREADS = {"gloo_tcp_loop": "gloo", "pt_gloo_runloop": "gloo",
                      "pt_nccl_watchdg": "nccl", "pt_nccl_heartbt": "nccl"}

ADVICE = {
    "sync_loading": "Load batches in parallel: DataLoader(num_workers=4 or more, pin_memory=True, "
                    "prefetch_factor=2-4, persistent_workers=True); keep the training loop free "
                    "of file reads.",
    "dataloader_io_bound": "The workers wait on storage: put the dataset on local SSD or tmpfs "
                           "(or in the page cache), use fewer, larger files (shards), raise "
                           "num_workers and prefetch_factor to keep more reads in flight.",
    "dataloader_cpu_bound": "The workers are busy decoding/augmenting: raise num_workers up to "
                            "the free cores, move augmentation to the GPU, or pre-process the "
                            "dataset once; storage is not the problem.",
    "checkpoint_stall": "Checkpoint off the critical path: save asynchronously (a background "
                        "thread/process, torch.distributed.checkpoint async_save), save less "
                        "often or only what changed (e.g. LoRA weights), use safetensors, write "
                        "to local SSD and copy out later.",
    "dataloader_network_bound": "The workers wait on the network: raise num_workers or the "
                                "requests in flight per worker (threads, async I/O), fetch "
                                "larger objects (shards of many samples), cache the data set on "
                                "local disk, prefetch ahead of the loop (prefetch_factor).",
    "sync_writes": "The loop waits on its own small writes: buffer log lines and fsync far less "
                   "often (or not at all), write logs to local disk or tmpfs, or log from a "
                   "background thread.",
    "straggler_rank": "One rank holds every collective back: fix what slows it (its own finding "
                      "says what: its data, its storage, its CPU), give it the same data "
                      "placement and share of the node as the others, or balance the shards; "
                      "the waiting ranks are not the problem.",
    "not_io_bound": "I/O is not what limits this job: look at compute (the PyTorch profiler) "
                    "rather than storage.",
    "cold_cache": "The first pass read from disk and later passes from the page cache: judge "
                  "throughput in the steady state, and warm or cache the dataset (more RAM, "
                  "local SSD, tmpfs) if the first epoch matters.",
    "small_files": "Many small files: pack samples into shards (WebDataset/tar, Arrow, "
                   "TFRecord-like) so each read moves megabytes, and cache them on tmpfs.",
    "device_saturated": "The disk is saturated (busy near 100 %, requests queue far longer than "
                        "they take): spread the data over more/faster devices or cut the read "
                        "volume (smaller or compressed samples, caching).",
    "dataset_exceeds_cache": "The data set does not fit in the page cache the job may use, so "
                             "every pass reads it from disk again: give the job more memory "
                             "(a higher memory cgroup limit or a larger node), make the data "
                             "set smaller (compressed or lower-resolution samples), cache it on "
                             "a local NVMe disk, or read it as sequential shards once per epoch "
                             "(WebDataset/tar, Arrow) so that storage streams at full speed.",
    "device_contended": "Other processes take most of the disk the job reads from: move the "
                        "data set to a disk of its own (or local SSD, tmpfs), give the job its "
                        "own I/O limit or a higher weight than the neighbours (blkio/io.max, "
                        "io.weight), or schedule the noisy jobs elsewhere.",
    "slow_filesystem": "The dataset sits on a slow file system (overlay/network/FUSE): copy it "
                       "to a local disk or tmpfs, or use a bind mount instead of a volume.",
}


# The finding that says why a straggler's loop was slow, by its largest state.
_CAUSE_KIND = {"data_wait_io": "dataloader_io_bound", "data_wait_cpu": "dataloader_cpu_bound",
               "data_wait_network": "dataloader_network_bound", "sync_loading": "sync_loading",
               "sync_writes": "sync_writes", "checkpoint": "checkpoint_stall"}


@dataclass
class RankLoop:
    """A rank's loop over a span of a trace (`Diagnosis.rank_loops`)."""

    rank: int
    world: int
    pids: list[int]  # its processes: one, or one per attempt when the agent restarted it
    ns: dict[str, int]  # its training time by state
    pid_ns: dict[int, int]  # each process's training time


@dataclass
class LoopInterval:
    ts_ns: int
    pid: int
    interval_ns: int
    ns: dict[str, int]  # by STATES
    rank: int | None = None  # the pid's rank in a distributed job

    def row(self) -> LoopRow:
        state = max(STATES, key=lambda s: self.ns[s]) if any(self.ns.values()) else "other"
        return {"ts": self.ts_ns, "pid": self.pid, "rank": self.rank,
                "interval_ns": self.interval_ns, **{f"{s}_ns": self.ns[s] for s in STATES},
                "state": state}


@dataclass
class Finding:
    kind: str
    severity: int  # 0-100
    pid: int | None
    summary: str
    evidence: dict
    start_ns: int = 0
    end_ns: int = 0
    rank: int | None = None  # the rank of `pid` in a distributed job

    @property
    def advice(self) -> str:
        return ADVICE[self.kind]

    def row(self, ts_ns: int) -> FindingRow:
        return {"ts": ts_ns, "start": self.start_ns, "end": self.end_ns, "kind": self.kind,
                "severity": self.severity, "pid": self.pid, "rank": self.rank,
                "summary": self.summary,
                "evidence": json.dumps(self.evidence, sort_keys=True), "advice": self.advice}


def _cumulative(weighted: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """(value, weights up to and with it) of sorted (value, weight) pairs."""
    total = 0
    for value, w in weighted:
        total += w
        yield value, total


@functools.lru_cache(maxsize=4096)  # every interval asks again about the same files
def is_library(path: str, fs_type: str) -> bool:
    """A file that is not the data set: the interpreter's and libraries' files (site-packages,
    .py, .pyc, .so), the system's (/etc, /usr/lib, ...) and pseudo file systems (/proc, /sys)."""
    return (fs_type in _PSEUDO_FS or path.startswith(_SYSTEM_ROOTS)
            or any(part in path for part in _LIBRARY_PARTS) or bool(_LIBRARY_NAME.search(path)))


@dataclass
class _Reads:
    """File reads of one main process and its descendants in one interval."""

    bytes: int = 0
    missed: int = 0  # bytes that came from disk: pages missed, at most the bytes read per file
    files: dict[tuple[str, str], int] = field(default_factory=dict)  # (path, fs_type) -> bytes
    opens: int = 0
    # the files of folder rows (a folder's files added up, core/rollup.py), by (path, fs_type)
    folder_files: dict[tuple[str, str], int] = field(default_factory=dict)
    # folder -> [bytes read, of them read again (files read in an earlier interval), and of
    # those the bytes that missed the page cache]
    by_dir: dict[str, list[int]] = field(default_factory=dict)

    def add(self, path: str, fs: str, nbytes: int, missed: int,
            folder_files: int | None = None, max_paths: int | None = MAX_READ_PATHS,
            reread: int = 0, reread_missed: int = 0) -> None:
        """A file's read bytes, or a folder row's (`folder_files`: how many files it adds up).
        Past `max_paths` files, a file counts in its folder's entry, as one of its files.
        `reread`: of `nbytes`, those of a later pass, `reread_missed` of which came from disk."""
        self.bytes += nbytes
        self.missed += missed
        # a folder row's path is its folder's, with a "/" at the end
        folder = path if path.endswith("/") else path.rsplit("/", 1)[0] + "/"
        if max_paths is not None:
            folder = _nearest(folder, self.by_dir.__contains__, len(self.by_dir))
        acc = self.by_dir.setdefault(folder, [0, 0, 0])
        acc[0] += nbytes
        acc[1] += reread
        acc[2] += reread_missed
        key = (path, fs)
        if (folder_files is None and max_paths is not None and key not in self.files
                and len(self.files) >= max_paths):
            key, folder_files = (path.rsplit("/", 1)[0] + "/", fs), 1
        if folder_files is not None and max_paths is not None:
            key = (_nearest(key[0], lambda p: (p, fs) in self.folder_files,
                            len(self.folder_files)), fs)
        self.files[key] = self.files.get(key, 0) + nbytes
        if folder_files is not None:
            self.folder_files[key] = self.folder_files.get(key, 0) + folder_files

    def merge(self, other: _Reads) -> None:
        self.bytes += other.bytes
        self.missed += other.missed
        self.opens += other.opens
        for key, n in other.files.items():
            self.files[key] = self.files.get(key, 0) + n
        for key, n in other.folder_files.items():
            self.folder_files[key] = self.folder_files.get(key, 0) + n
        for d, counts in other.by_dir.items():
            acc = self.by_dir.setdefault(d, [0, 0, 0])
            for i, n in enumerate(counts):
                acc[i] += n

    def file_count(self) -> int:
        """Files read: a file's row counts one, a folder row the files it adds up."""
        return len(self.files) - len(self.folder_files) + sum(self.folder_files.values())

    def frozen(self) -> _Reads:
        """These reads as an interval keeps them for an hour: read-only, in a third of the
        memory (arrays of int64 instead of dicts of ints, and the keys that repeat from
        interval to interval shared: a job reads the same files and folders again and again)."""
        self.files = _Sums(self.files)  # type: ignore[assignment]
        self.folder_files = _Sums(self.folder_files)  # type: ignore[assignment]
        self.by_dir = _Sums(self.by_dir, width=3)  # type: ignore[assignment]
        return self


NO_COUNTS = (0,) * MAX_SLOTS  # the slot counts of an interval without any, shared by all

MAX_SHARED_KEYS = 65_536
_shared_keys: dict = {}  # a key of _Sums -> the one object all intervals use for it


class _Sums:
    """A read-only mapping of a frozen `_Reads`, to ints or (width > 1) tuples of ints: what
    its readers use of a dict."""

    __slots__ = ("_keys", "_values", "_width")

    def __init__(self, d: dict, width: int = 1) -> None:
        keys = []
        for k in d:
            shared = _shared_keys.get(k)
            if shared is None:
                shared = k
                if len(_shared_keys) < MAX_SHARED_KEYS:
                    _shared_keys[k] = k
            keys.append(shared)
        self._keys, self._width = tuple(keys), width
        # (int(): a trace read back with pandas has floats where a nullable column had nulls)
        self._values = array("q", map(int, d.values() if width == 1 else
                                      (n for counts in d.values() for n in counts)))

    def values(self) -> Iterable:
        if self._width == 1:
            return self._values
        w = self._width
        return [tuple(self._values[i:i + w]) for i in range(0, len(self._values), w)]

    def items(self) -> Iterator[tuple]:
        return zip(self._keys, self.values(), strict=True)

    def __iter__(self) -> Iterator:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def _nearest(folder: str, known: Callable[[str], bool], count: int) -> str:
    """`folder` (with its "/" at the end) while fewer than MAX_READ_FOLDERS folders are known
    (`count`); past that a new folder counts in its parent's entry, past twice that a new
    parent in its own parent's, and so on up to the root."""
    limit = MAX_READ_FOLDERS
    while count >= limit and folder != "/" and not known(folder):
        folder = folder[:-1].rsplit("/", 1)[0] + "/"
        limit *= 2
    return folder


def _count(paths: Iterable[str], in_folder: dict[str, int]) -> int:
    """Files behind `paths`: one each, a folder row's path the files it adds up."""
    return sum(in_folder.get(p, 1) for p in paths)


def _folder_files(row: FileRow) -> int | None:
    """How many files a folder row adds up; None for a file's own row."""
    return row.get("file_count") or 0 if row.get("path_source") == "folder" else None


@dataclass
class StartUp:
    """A main process's start-up: from its first interval to the one where training starts."""

    pid: int
    until: str  # what ended it, in words
    seconds: float
    oncpu_ns: int  # its loop thread's time
    iowait_ns: int
    sleep_ns: int
    files: int  # files read
    library_files: int  # of them, the interpreter's and libraries' (site-packages, .py, .so)
    site_packages: int
    bytes: int
    missed: int  # bytes read from disk

    def line(self) -> str:
        what = [f"read {self.files} files ({self.library_files} libraries, "
                f"{self.site_packages} under site-packages), {format_bytes(self.bytes)}, "
                f"{format_bytes(self.missed)} of it from disk"] if self.files else []
        what.append(f"the loop was on CPU {format_ns(self.oncpu_ns)}, blocked on I/O (D) "
                    f"{format_ns(self.iowait_ns)}, asleep {format_ns(self.sleep_ns)}")
        return (f"Start-up of pid {self.pid} took {self.seconds:.1f} s (until {self.until}; "
                f"not judged by the findings): " + "; ".join(what) + ".")


@dataclass
class _Interval:
    """What the diagnosis keeps of one interval (small: a run can last days)."""

    ts_ns: int
    interval_ns: int
    loops: dict[int, LoopInterval]
    worker_oncpu_ns: dict[int, int]  # by main pid
    worker_iowait_ns: dict[int, int]
    worker_read_ns: dict[int, int]
    data: dict[int, _Reads]  # main pid -> what its processes read of the data set
    library: dict[int, _Reads]  # main pid -> library/system files read, kept during start-up
    loop_time: dict[int, tuple[int, int, int]]  # main pid -> its loop's (on CPU, D, S) ns
    written: dict[int, int]  # main pid -> bytes written to checkpoint-size files
    read_counts: dict[tuple[int, str], list[int]]  # (main pid, role) -> log2 slot counts
    read_max: dict[tuple[int, str], tuple[int, int]]  # (main pid, role) -> (reads, slowest ns)
    queue_counts: Sequence[int]  # NO_COUNTS when the interval had no block reads
    service_counts: Sequence[int]
    device_util: dict[str, float]
    worker_net_ns: dict[int, int]  # main pid -> its workers' time in socket reads (estimated)
    net_counts: dict[tuple[int, str], list[int]]  # (main, role) -> socket reads' log2 slots
    net_bytes: dict[tuple[int, str], int]  # (main, role) -> bytes of socket reads
    small_writes: dict[int, dict[str, list[int]]]  # main -> path -> [writes, fsyncs, fsync ns]
    background: dict[int, _Background]  # main pid -> a background save's cost to the loop
    other_parts: dict[int, tuple[int, int, int]]  # main -> other's (runnable, own, timers) ns
    memory: dict[int, MemoryRow] = field(default_factory=dict)  # main pid -> its memory row
    # disk -> its reads: traced [requests, bytes, service ns], the others' same, and the
    # others' bytes by (name, cgroup), at most MAX_DISK_USERS of them (device_users rows)
    disk_reads: dict[str, _DiskReads] = field(default_factory=dict)


@dataclass
class _DiskReads:
    """One disk's reads in one interval, by whom (`device_users`)."""

    traced: list[int] = field(default_factory=lambda: [0, 0, 0])  # requests, bytes, service ns
    others: list[int] = field(default_factory=lambda: [0, 0, 0])
    # (comm, cgroup, container ID, pod UID) -> bytes
    by_user: dict[tuple[str, str, str | None, str | None], int] = field(default_factory=dict)


def _disk_totals(ivs: Iterable[_Interval], dev: str) -> tuple[list[int], list[int]]:
    """Disk `dev`'s reads in `ivs`: the traced processes' and the others' [requests, bytes,
    service ns]."""
    traced, others = [0, 0, 0], [0, 0, 0]
    for iv in ivs:
        d = iv.disk_reads.get(dev)
        if d is not None:
            for i in range(3):
                traced[i] += d.traced[i]
                others[i] += d.others[i]
    return traced, others


def _others_share(traced: list[int], others: list[int]) -> tuple[float, float, float] | None:
    """The other processes' share of a disk's reads (`_disk_totals`): of the requests, the
    bytes and the service time; None when there were none of its reads."""
    if not traced[0] + others[0]:
        return None
    return tuple(o / (o + tr) if o + tr else 0.0 for o, tr in zip(others, traced, strict=True))


def _disk_reads(rows: Iterable[DeviceUserRow]) -> dict[str, _DiskReads]:
    out: dict[str, _DiskReads] = {}
    for r in rows:
        if r["op"] != "read":
            continue
        d = out.setdefault(r["device"], _DiskReads())
        counts = d.traced if r["who"] == "traced" else d.others
        for i, v in enumerate((r["requests"], r["bytes"], r["service_ns"])):
            counts[i] += v
        if r["who"] != "traced":
            who = (r["comm"] or ("others" if r["who"] == "rest" else "?"), r["cgroup"] or "",
                   r["container_id"], r["pod_uid"])
            d.by_user[who] = d.by_user.get(who, 0) + r["bytes"]
    for d in out.values():
        if len(d.by_user) > MAX_DISK_USERS:
            d.by_user = dict(sorted(d.by_user.items(), key=lambda kv: -kv[1])[:MAX_DISK_USERS])
    return out


@dataclass
class _Background:
    """A background save (another thread, a child process) in one interval."""

    blocked_ns: int  # the saver's blocked (D) time
    waited_ns: int  # the loop's sleep charged to it (`checkpoint`)
    bytes: int  # checkpoint bytes written by the saver
    woken_own_ns: int  # the loop's sleeps ended by its own threads (a join, a lock, the GIL)
    woken_other_ns: int  # ... by timers and other processes (timed waits: the GIL's)
    child: bool  # a child process saves (else a thread)


@dataclass
class Diagnosis:
    thresholds: Thresholds = THRESHOLDS
    page_size: int = 4096
    # The last MAX_INTERVALS intervals (an hour at -i 1): memory stays bounded on runs of days;
    # the verdicts at the end of a longer trace cover its last hour (`loop` has every interval).
    intervals: deque[_Interval] = field(default_factory=lambda: deque(maxlen=MAX_INTERVALS))
    written_total: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))
    workers_seen: set[int] = field(default_factory=set)  # main pids that had workers
    # per main pid, the last `wake_window` intervals' (sleep ended by a worker or the pin-memory
    # thread, sleep ended by anyone), in ns
    wakes: dict[int, deque] = field(default_factory=dict)
    # per main pid, the syscall its loop is in: (since, state charged, ns charged so far)
    in_flight: dict[int, tuple[int, str, int]] = field(default_factory=dict)
    # per (main pid, state), time charged while a syscall ran that its `files` rows, counting
    # it when it returns, still hold
    counted_early: dict[tuple[int, str], int] = field(default_factory=dict)
    # Start-up (docs/diagnosis.md), in launch mode only: per main pid, the start of the first
    # interval in which one of its DataLoader workers ran, and of the first that read its data.
    startup: bool = False
    first_worker_ns: dict[int, int] = field(default_factory=dict)
    first_data_ns: dict[int, int] = field(default_factory=dict)
    # main pid -> the TCP peers (address:port) its processes were seen talking to, bounded
    peers: dict[int, list[str]] = field(default_factory=dict)
    # rank pid -> (rank, world size, job): the ranks of one job are compared (note_rank)
    ranks: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    # rank pids whose process runs collectives, by backend (its threads' names say which)
    collective: dict[int, str] = field(default_factory=dict)
    # main pids whose checkpoints are written by another thread or a child process
    background_savers: set[int] = field(default_factory=set)
    # (pid, path) -> bytes brought in by readahead that no read has used yet
    read_ahead: dict[tuple[int, str], int] = field(default_factory=dict)

    # -- per interval -------------------------------------------------------------------------
    def note_rank(self, pid: int, rank: int, world_size: int, job: int) -> None:
        """Process `pid` is rank `rank` of `world_size` in the distributed job `job` (the pid
        that started its ranks: torchrun's agent): its loop is judged with the others'."""
        self.ranks[pid] = (rank, world_size, job)

    def note_peers(self, main: int, peers: Iterable[str]) -> None:
        """TCP peers that main `main`'s processes talk to (their `processes` rows carry them)."""
        seen = self.peers.setdefault(main, [])
        seen.extend(p for p in peers if p not in seen and len(seen) < MAX_PEERS)

    def add(self, ts_ns: int, interval_ns: int, threads: Iterable[ThreadRow],
            files: Iterable[FileRow], latency: Iterable[LatencyRow], devices: Iterable[DeviceRow],
            owner: dict[int, int], memory: Iterable[MemoryRow] = (),
            device_users: Iterable[DeviceUserRow] = ()) -> list[LoopRow]:
        """One interval's rows; `owner` maps each traced pid to its main pid; `memory`: the
        mains' memory rows; `device_users`: who used each disk. Returns the rows of the `loop`
        table for this interval."""
        t = self.thresholds
        files, threads = list(files), list(threads)
        own_read, proc_ckpt, proc_writes = defaultdict(int), defaultdict(int), defaultdict(int)
        worker_read = defaultdict(int)
        written, child_written = defaultdict(int), defaultdict(int)
        small: dict[int, dict[str, list[int]]] = defaultdict(dict)
        for f in files:
            main = owner.get(f["pid"], f["pid"])
            if f["op"] == "read":
                if f["role"] in LOOP_ROLES:
                    own_read[main] += f["latency_sum_ns"]
                elif f["role"] == DATALOADER_WORKER:
                    worker_read[main] += f["latency_sum_ns"]
            elif (f["op"] in ("write", "fsync") and f["role"] in (*LOOP_ROLES, CHILD)
                  and f.get("path_source") != "folder"):  # a checkpoint is one file
                key = (main, f["path"])
                self.written_total[key] += f["bytes"]
                ckpt = self.written_total[key] >= t.checkpoint_file_bytes
                if f["role"] == CHILD:
                    child_written[main] += f["bytes"] if ckpt else 0
                elif ckpt:
                    proc_ckpt[main] += f["latency_sum_ns"]
                    written[main] += f["bytes"]
                else:
                    proc_writes[main] += f["latency_sum_ns"]
                    w = small[main].setdefault(f["path"], [0, 0, 0])
                    if f["op"] == "write":
                        w[0] += f["ops"]
                    else:
                        w[1] += f["ops"]
                        w[2] += f["latency_sum_ns"]
        worker_cpu, worker_io, worker_runnable = defaultdict(int), defaultdict(int), defaultdict(int)
        other_io, child_io = defaultdict(int), defaultdict(int)  # D of non-loop threads, children
        loop_threads = {}
        for th in threads:
            main = owner.get(th["pid"], th["pid"])
            if th["role"] == DATALOADER_WORKER:
                worker_cpu[main] += th["oncpu_ns"]
                worker_io[main] += th["iowait_ns"]
                worker_runnable[main] += th["runnable_ns"]
                self.workers_seen.add(main)
            elif th["role"] in LOOP_ROLES and th["tid"] == th["pid"]:
                loop_threads[th["pid"]] = th
            elif th["role"] in LOOP_ROLES:
                other_io[main] += th["iowait_ns"]
                if th["role"] == RANK and th["comm"] in COLLECTIVE_THREADS:
                    self.collective[main] = COLLECTIVE_THREADS[th["comm"]]
            elif th["role"] == CHILD:
                child_io[main] += th["iowait_ns"]
        worker_net, own_net, net_counts, net_bytes = self._socket_reads(latency, owner)
        # The `files` rows are per process: the part of its writes that is the loop's own is its
        # share of the process's blocked (D) time (a saver thread blocks, a loop that keeps
        # training does not); the rest was written by its other threads.
        own_ckpt, own_writes, background = defaultdict(int), defaultdict(int), {}
        saver_bytes = defaultdict(int)
        for pid, th in loop_threads.items():
            blocked = th["iowait_ns"] + other_io[pid]
            mine = th["iowait_ns"] / blocked if blocked else 1.0
            own_ckpt[pid] = round(proc_ckpt[pid] * mine)
            own_writes[pid] = round(proc_writes[pid] * mine)
            saver_bytes[pid] = written[pid] - round(written[pid] * mine) + child_written[pid]
            written[pid] -= saver_bytes[pid] - child_written[pid]
            if proc_ckpt[pid] > own_ckpt[pid] or child_written[pid]:
                self.background_savers.add(pid)
        loops = {}
        for pid, th in loop_threads.items():
            own_ckpt[pid], own_writes[pid], own_read[pid] = self._as_it_passes(
                pid, th, ts_ns, interval_ns, own_ckpt[pid], own_writes[pid], own_read[pid])
        for pid in set(self.in_flight) - set(loop_threads):  # no row: the loop is gone
            self._ended(pid)
        other_parts = {}
        for pid, th in loop_threads.items():
            total = th["oncpu_ns"] + th["runnable_ns"] + th["sleep_ns"] + th["iowait_ns"]
            ns = dict.fromkeys(STATES, 0)
            ns["checkpoint"] = min(own_ckpt[pid], total)
            left = total - ns["checkpoint"]
            ns["sync_writes"] = min(own_writes[pid], left)
            left -= ns["sync_writes"]
            ns["sync_loading"] = min(own_read[pid], left)
            left -= ns["sync_loading"]
            sleep = th["sleep_ns"]
            if pid not in self.workers_seen:  # the loop fetches its data over the network
                ns["data_wait_network"] = min(own_net[pid], sleep, left)
                left -= ns["data_wait_network"]
                sleep -= ns["data_wait_network"]
            # A sleep is credited to its waker when it ends, perhaps an interval or more after
            # it began, while the sleep itself is counted as it passes: so the loop's sleep in
            # this interval is split by who ended its sleeps here when those cover at least
            # half of it (short waits for batches: the interval speaks for itself), else over
            # the last few intervals (a wait still in progress goes the way the last ones went;
            # an older window alone would lag behind a change, e.g. the workers' start).
            data = th["woken_by_worker_ns"] + th["woken_by_pin_ns"]
            woken = data + th["woken_by_own_ns"] + th["woken_by_other_ns"]
            recent = self.wakes.setdefault(pid, deque(maxlen=t.wake_window))
            recent.append((data, woken, th["woken_by_own_ns"]))
            speaks = woken and 2 * woken >= th["sleep_ns"]
            if speaks:
                share, own_share = data / woken, th["woken_by_own_ns"] / woken
            else:
                ended = sum(a for _, a, _ in recent)
                share = sum(d for d, _, _ in recent) / ended if ended else 0.0
                own_share = sum(o for _, _, o in recent) / ended if ended else 0.0
            # While a background saver is blocked writing, the loop's sleeps that no worker
            # ended are waits for it (a join, the GIL it holds, a lock), up to its blocked time.
            saver_ns = other_io[pid] + child_io[pid] if pid in self.background_savers else 0
            waited = 0
            if saver_ns:
                waited = min(sleep - round(sleep * share) if speaks else sleep, saver_ns, left)
                ns["checkpoint"] += waited
                left -= waited
                sleep -= waited
                background[pid] = _Background(
                    saver_ns, waited, saver_bytes[pid], th["woken_by_own_ns"],
                    th["woken_by_other_ns"], bool(child_io[pid]))
            wait = min(round(sleep * share), left)
            io, cpu, net = worker_io[pid], worker_cpu[pid], worker_net[pid]
            if not speaks:  # the window's guess: no more than the workers were doing
                wait = min(wait, io + cpu + net + worker_runnable[pid])
            busy = io + cpu + net
            io_part = round(wait * io / busy) if busy else 0
            net_part = round(wait * net / busy) if busy else 0
            ns["data_wait_io"] = io_part
            ns["data_wait_network"] += net_part
            ns["data_wait_cpu"] = wait - io_part - net_part
            left -= wait
            # A rank that runs collectives over gloo waits for its peers asleep, woken by its
            # own threads (measured: gloo's worker threads, themselves woken by its own
            # threads, and its TCP device loop, woken by the peer ranks' sends): its sleeps
            # ended by its own threads are that wait.
            if self.collective.get(pid) == "gloo":
                ns["collective_wait"] = min(round(sleep * own_share), left)
                left -= ns["collective_wait"]
            ns["compute"] = min(th["oncpu_ns"], left)
            ns["other"] = left - ns["compute"]
            # what `other` was: runnable without a CPU, then sleeps by who ended them
            runnable = min(th["runnable_ns"], ns["other"])
            rest = ns["other"] - runnable
            own_woken, timer_woken = th["woken_by_own_ns"], th["woken_by_other_ns"]
            own_part = round(rest * own_woken / (own_woken + timer_woken)) if (
                own_woken + timer_woken) else 0
            other_parts[pid] = (runnable, own_part, rest - own_part)
            loops[pid] = LoopInterval(ts_ns, pid, interval_ns, ns,
                                      self.ranks[pid][0] if pid in self.ranks else None)
        read_counts: dict[tuple[int, str], list[int]] = {}
        queue, service = [0] * MAX_SLOTS, [0] * MAX_SLOTS
        for r in latency:
            slot = slot_of(r["bucket_lo_ns"])
            if r["layer"] == "syscall" and r["op"] == "read" and r["target"] == "file":
                key = (owner.get(r["pid"], r["pid"]), r["role"])
                read_counts.setdefault(key, [0] * MAX_SLOTS)[slot] += r["count"]
            elif r["layer"] == "block_queue" and r["op"] == "read":
                queue[slot] += r["count"]
            elif r["layer"] == "block" and r["op"] == "read":
                service[slot] += r["count"]
        data, library, loop_time = self._reads(ts_ns - interval_ns, files, threads, owner)
        self.intervals.append(_Interval(
            ts_ns, interval_ns, loops, dict(worker_cpu), dict(worker_io), dict(worker_read),
            {pid: r.frozen() for pid, r in data.items()},
            {pid: r.frozen() for pid, r in library.items()}, loop_time, dict(written),
            read_counts, _read_max(files, owner),
            queue if any(queue) else NO_COUNTS, service if any(service) else NO_COUNTS,
            {d["device"]: d["util_pct"] for d in devices}, dict(worker_net), net_counts, net_bytes,
            dict(small), background, other_parts, {m["pid"]: m for m in memory},
            _disk_reads(device_users)))
        return [loop.row() for loop in loops.values()]

    def _as_it_passes(self, pid: int, th: ThreadRow, ts_ns: int, interval_ns: int, ckpt_ns: int,
                      writes_ns: int, read_ns: int) -> tuple[int, int, int]:
        """The loop's checkpoint and read time in this interval, counted as it passes: `files`
        rows count a syscall when it returns (a 2.5 s fsync all in the interval where it
        ends), while the time of the one the loop is in (its `threads` row) belongs to the
        intervals it spans. So that part is added now, and taken back from the `files` rows
        once the call has returned (in the interval where the loop is seen out of it, or the
        next: the files are read before the syscall in flight)."""
        t = self.thresholds
        op, since = th.get("syscall_op"), th.get("syscall_since")
        kind = None
        if op == "read":
            kind = "sync_loading"
        elif op in ("write", "fsync"):
            kind = ("checkpoint" if self.written_total.get((pid, th.get("syscall_path")), 0)
                    >= t.checkpoint_file_bytes else "sync_writes")
        prev = self.in_flight.get(pid)
        if prev is not None and (kind is None or prev[0] != since):
            self._ended(pid)
            prev = None
        part = 0
        if kind is not None:
            part = max(0, ts_ns - max(int(since), ts_ns - interval_ns))
            self.in_flight[pid] = (since, kind, (prev[2] if prev else 0) + part)
        out = {"checkpoint": ckpt_ns, "sync_writes": writes_ns, "sync_loading": read_ns}
        for k in out:
            owed = self.counted_early.get((pid, k), 0)
            if owed:
                paid = min(owed, out[k])
                out[k] -= paid
                self.counted_early[(pid, k)] = owed - paid
        if kind is not None:
            out[kind] += part
        return out["checkpoint"], out["sync_writes"], out["sync_loading"]

    @staticmethod
    def _socket_reads(latency: Iterable[LatencyRow], owner: dict[int, int]):
        """Per main pid: its workers' time in socket reads and its own process's, estimated
        from the histograms (each read at the middle of its log2 slot: within a third), and the
        data's socket reads (the workers', or the main's without workers) as slot counts and
        bytes."""
        worker, own = defaultdict(int), defaultdict(int)
        counts: dict[tuple[int, str], list[int]] = {}
        nbytes: dict[tuple[int, str], int] = defaultdict(int)
        for r in latency:
            if (r["layer"] != "syscall" or r["op"] != "read" or r["target"] != "socket"
                    or r["role"] not in (*LOOP_ROLES, DATALOADER_WORKER)):
                continue
            main = owner.get(r["pid"], r["pid"])
            ns = r["count"] * (r["bucket_lo_ns"] + r["bucket_hi_ns"]) // 2
            (worker if r["role"] == DATALOADER_WORKER else own)[main] += ns
            counts.setdefault((main, r["role"]), [0] * MAX_SLOTS)[slot_of(r["bucket_lo_ns"])] += (
                r["count"])
            nbytes[(main, r["role"])] += r["bytes"]
        return worker, own, counts, dict(nbytes)

    def _ended(self, pid: int) -> None:
        """The syscall the loop was in has returned: its `files` rows will count all of it,
        of which the part already charged is to be taken back."""
        _since, kind, charged = self.in_flight.pop(pid)
        self.counted_early[(pid, kind)] = self.counted_early.get((pid, kind), 0) + charged

    def _reads(self, begin_ns: int, files: list[FileRow], threads: list[ThreadRow], owner: dict[int, int]
               ) -> tuple[dict[int, _Reads], dict[int, _Reads], dict[int, tuple[int, int, int]]]:
        """Per main pid: its processes' reads of the data set and of library/system files, its
        loop's time; and the signals that its start-up ended (with the interval's start)."""
        data: dict[int, _Reads] = {}
        library: dict[int, _Reads] = {}
        for f in files:
            main = owner.get(f["pid"], f["pid"])
            lib = is_library(f["path"], f["fs_type"])
            if f["op"] == "open" and not lib:
                data.setdefault(main, _Reads()).opens += f["ops"]
            if f["op"] != "read":
                continue
            # Readahead brings whole pages ahead of the reads: counted as bytes, at most the
            # bytes read, so that a share from disk stays a share; pages not yet read count for
            # the next reads of the file. A row without bytes has pages brought in for a read
            # still in progress (its bytes come next interval) or faulted in through a mapping
            # (a library's, no read's miss): kept for the file's next reads either way.
            key = (f["pid"], f["path"])
            ahead = self.read_ahead.pop(key, 0) + f["pages_missed"] * self.page_size
            if not f["bytes"]:
                if ahead and len(self.read_ahead) < MAX_READ_AHEAD:
                    self.read_ahead[key] = ahead
                continue
            missed = min(ahead, f["bytes"])
            if ahead > missed and len(self.read_ahead) < MAX_READ_AHEAD:
                self.read_ahead[key] = ahead - missed
            # a later pass's reads: their misses at most their bytes (no carry: a share of them)
            reread = f.get("reread_bytes") or 0
            reread_missed = min((f.get("reread_pages_missed") or 0) * self.page_size, reread)
            if lib:
                if main not in self.first_worker_ns:  # kept for the start-up's summary only
                    # every path: the start-up's summary counts distinct files, and it ends
                    library.setdefault(main, _Reads()).add(f["path"], f["fs_type"], f["bytes"],
                                                           missed, _folder_files(f), None)
            else:
                data.setdefault(main, _Reads()).add(f["path"], f["fs_type"], f["bytes"], missed,
                                                    _folder_files(f), reread=reread,
                                                    reread_missed=reread_missed)
        t = self.thresholds
        for main, r in data.items():
            if (main not in self.first_data_ns and (r.file_count() >= t.startup_data_files
                                                    or r.bytes >= t.startup_data_bytes)):
                self.first_data_ns[main] = begin_ns
        loop_time = {}
        for th in threads:
            main = owner.get(th["pid"], th["pid"])
            if th["role"] == DATALOADER_WORKER:
                self.first_worker_ns.setdefault(main, begin_ns)
            elif th["role"] in LOOP_ROLES and th["tid"] == th["pid"]:
                loop_time[main] = (th["oncpu_ns"], th["iowait_ns"], th["sleep_ns"])
        return data, library, loop_time

    def training_since(self, pid: int) -> int | None:
        """Start of the first interval of main `pid` that counts as training (earlier ones are
        its start-up), or None: no start-up seen, every interval counts."""
        if not self.startup:
            return None
        return self.first_worker_ns.get(pid, self.first_data_ns.get(pid))

    def _training(self, iv: _Interval, pid: int) -> bool:
        since = self.training_since(pid)
        return since is None or iv.ts_ns > since

    def startups(self) -> list[StartUp]:
        """The start-up of every main process seen from its start, in pid order."""
        out = []
        for pid in sorted({p for iv in self.intervals for p in iv.loop_time}):
            since = self.training_since(pid)
            ivs = [iv for iv in self.intervals
                   if iv.ts_ns <= (since or 0) and (pid in iv.loop_time or pid in iv.data)]
            if not ivs:
                continue
            until = ("its first DataLoader worker started" if pid in self.first_worker_ns
                     else "it started reading its data set")
            files: dict[str, tuple[bool, int]] = {}  # path -> (library?, bytes)
            in_folder: dict[str, int] = {}  # a folder row's path -> its files
            missed = 0
            for iv in ivs:
                for lib, reads in ((True, iv.library.get(pid)), (False, iv.data.get(pid))):
                    if reads is None:
                        continue
                    missed += reads.missed
                    for (path, _fs), n in reads.files.items():
                        files[path] = (lib, files.get(path, (lib, 0))[1] + n)
                    for (path, _fs), n in reads.folder_files.items():
                        in_folder[path] = in_folder.get(path, 0) + n
            times = [iv.loop_time.get(pid, (0, 0, 0)) for iv in ivs]
            start = ivs[0].ts_ns - ivs[0].interval_ns
            out.append(StartUp(
                pid, until, (since - start) / 1e9, sum(x[0] for x in times),
                sum(x[1] for x in times), sum(x[2] for x in times), _count(files, in_folder),
                _count((p for p, (lib, _) in files.items() if lib), in_folder),
                _count((p for p in files if "/site-packages/" in p or "/dist-packages/" in p),
                       in_folder),
                sum(n for _, n in files.values()), missed))
        return out

    def loop_split(self) -> dict[int, tuple[int, int, dict[str, int]]]:
        """Per loop pid: its training time, its start-up time and its training time by state
        (ns), over the intervals kept (what `TraceReader.loop_split` gives from the rows)."""
        out: dict[int, tuple[int, int, dict[str, int]]] = {}
        for iv in self.intervals:
            for pid, loop in iv.loops.items():
                total, startup, ns = out.get(pid, (0, 0, dict.fromkeys(STATES, 0)))
                if self._training(iv, pid):
                    for s in STATES:
                        ns[s] += loop.ns[s]
                    total += sum(loop.ns.values())
                else:
                    startup += iv.interval_ns
                out[pid] = (total, startup, ns)
        return out

    def context_lines(self) -> list[str]:
        """The summary's lines before the verdicts: long start-ups, background saves that cost
        the loop little, and what its `other` time was."""
        return self.startup_lines() + self.background_lines() + self.other_lines()

    def startup_lines(self) -> list[str]:
        """The summary's lines on start-ups long enough to matter."""
        long = [s for s in self.startups() if s.seconds >= self.thresholds.startup_long_s]
        return ["", *(s.line() for s in long)] if long else []

    # -- verdicts -----------------------------------------------------------------------------
    def findings(self, window_s: float | None = None) -> list[Finding]:
        """Verdicts over the last `window_s` seconds (None: the whole trace), most severe first."""
        ivs = self.intervals
        if window_s is not None and ivs:
            since = ivs[-1].ts_ns - int(window_s * 1e9)
            ivs = [iv for iv in ivs if iv.ts_ns > since]
        if not ivs:
            return []
        start = ivs[0].ts_ns - ivs[0].interval_ns
        end = ivs[-1].ts_ns
        out: list[Finding] = []
        mains = sorted({pid for iv in ivs for pid in iv.loops})
        # Verdicts judge training: each main's start-up intervals are left out (startups()).
        for pid in mains:
            out.extend(self._loop_findings(pid, [iv for iv in ivs if self._training(iv, pid)]))
        out.extend(self._storage_findings(ivs, out))
        if not any(f.kind in IO_KINDS for f in out):
            out.append(self._healthy(ivs, mains))
        # first, so that it leads its straggler's own finding of the same severity
        out = self._straggler_findings(ivs, out) + out
        for f in out:
            f.start_ns, f.end_ns = start, end
            if f.pid in self.ranks and f.rank is None:
                f.rank = self.ranks[f.pid][0]
        return sorted(out, key=lambda f: -f.severity)

    def _straggler_findings(self, ivs: list[_Interval], found: list[Finding]) -> list[Finding]:
        """Per distributed job: the rank the others waited for in their collectives, and why
        it was slow, from its own loop's split (docs/diagnosis.md, "Ranks")."""
        out = []
        for _job, ranks in sorted(self.rank_loops(ivs).items()):
            f = self.judge_ranks(ranks, found)
            if f is not None:
                out.append(f)
        return out

    def rank_loops(self, ivs: Iterable[_Interval] | None = None, since_ns: int | None = None,
                   until_ns: int | None = None) -> dict[int, dict[int, RankLoop]]:
        """Per job, per rank: its processes (a rank the agent restarted has several), its
        world size and its loop's training time by state, over `ivs` (default: the intervals
        kept) that end in (since_ns, until_ns]."""
        jobs: dict[int, dict[int, RankLoop]] = defaultdict(dict)
        for pid, (rank, world, job) in self.ranks.items():
            r = jobs[job].setdefault(rank, RankLoop(rank, world, [], dict.fromkeys(STATES, 0), {}))
            r.pids.append(pid)
            r.world = max(r.world, world)
        ivs = self.intervals if ivs is None else ivs
        for iv in ivs:
            if (since_ns is not None and iv.ts_ns <= since_ns) or (
                    until_ns is not None and iv.ts_ns > until_ns):
                continue
            for pid, loop in iv.loops.items():
                if pid not in self.ranks or not self._training(iv, pid):
                    continue
                rank, _, job = self.ranks[pid]
                r = jobs[job][rank]
                for st in STATES:
                    r.ns[st] += loop.ns[st]
                r.pid_ns[pid] = r.pid_ns.get(pid, 0) + sum(loop.ns.values())
        return jobs

    def judge_ranks(self, ranks: dict[int, RankLoop], found: list[Finding],
                    where: dict[int, str] | None = None) -> Finding | None:
        """The straggler among the ranks of one job, if any (`straggler_rank`); `found`: the
        findings its cause is taken from; `where`: per rank, the host it ran on (a job traced
        on several nodes)."""
        t = self.thresholds
        ranks = {r: x for r, x in ranks.items() if sum(x.ns.values())}
        share = {r: x.ns["collective_wait"] / sum(x.ns.values()) for r, x in ranks.items()}
        if not share:
            return None
        world = max(x.world for x in ranks.values())
        slowest = min(share, key=lambda r: (share[r], r))
        others = [r for r in share if r != slowest]
        if not others:  # one rank traced: it can say it waited, not for whom
            if share[slowest] >= t.straggler_share and world > 1:
                return self._untraced_straggler(slowest, ranks[slowest].pids, share, world)
            return None
        waited = sum(share[r] for r in others) / len(others)
        if waited < t.straggler_share or share[slowest] > t.straggler_ratio * waited:
            return None
        return self._straggler(slowest, ranks, share, others, waited, world, found, where)

    def _straggler(self, rank: int, ranks: dict[int, RankLoop], share: dict[int, float],
                   others: list[int], waited: float, world: int, found: list[Finding],
                   where: dict[int, str] | None) -> Finding:
        me = ranks[rank]
        mine, pids = me.ns, me.pids
        total = sum(mine.values())
        shares = {s: round(100 * mine[s] / total, 1) for s in STATES}
        # its cause: the largest of its own states (what it did while the others waited)
        cause = max((s for s in STATES if s not in ("collective_wait", "other")),
                    key=lambda s: mine[s])
        pid = max(pids, key=lambda p: me.pid_ns.get(p, 0))
        # its own finding of that cause (of its last process, if the agent restarted it: the
        # most severe)
        own = max((f for f in found if f.pid in pids and f.kind == _CAUSE_KIND.get(cause)),
                  key=lambda f: f.severity, default=None)
        why = own.summary if own else f"its loop was in {cause} {shares[cause]:.0f} % of the time."
        why = why[0].lower() + why[1:] if why.startswith("The training loop") else why
        waits = ", ".join(f"rank {r} {100 * share[r]:.0f} %" for r in sorted(others))
        wait_ns = sum(ranks[r].ns["collective_wait"] for r in others)
        on = f" (on {where[rank]})" if where and rank in where else ""
        severity = max(_severity(waited), own.severity if own else 0)
        return Finding(
            "straggler_rank", severity, pid,
            f"Rank {rank}{on} is the straggler: the other ranks waited for it in collectives "
            f"{100 * waited:.0f} % of the time ({waits}; {format_ns(wait_ns)} in all), while it "
            f"waited {100 * share[rank]:.0f} %; rank {rank}: {why}",
            {"rank": rank, "world_size": world, "pids": sorted(pids),
             "others_collective_wait_pct": round(100 * waited, 1),
             "collective_wait_pct_by_rank": {str(r): round(100 * s, 1)
                                             for r, s in sorted(share.items())},
             "others_waited_ns": wait_ns, "cause": cause, "cause_pct": shares[cause],
             "cause_finding": own.kind if own else None,
             "cause_evidence": own.evidence if own else None, "loop_shares_pct": shares,
             "hosts": {str(r): h for r, h in sorted(where.items())} if where else None},
            rank=rank)

    @staticmethod
    def _untraced_straggler(rank: int, pids: list[int], share: dict[int, float],
                            world: int) -> Finding:
        return Finding(
            "straggler_rank", _severity(share[rank]), None,
            f"Rank {rank} waited for its peers in collectives {100 * share[rank]:.0f} % of the "
            f"time: another of the job's {world} ranks, not traced, is slower; trace them all "
            "(the agent's PID, or every rank's) to name it and its cause.",
            {"rank": None, "world_size": world, "traced_rank": rank, "pids": sorted(pids),
             "collective_wait_pct_by_rank": {str(rank): round(100 * share[rank], 1)},
             "cause": None})

    def _loop_findings(self, pid: int, ivs: list[_Interval]) -> list[Finding]:
        t = self.thresholds
        ns = dict.fromkeys(STATES, 0)
        for iv in ivs:
            if pid in iv.loops:
                for s in STATES:
                    ns[s] += iv.loops[pid].ns[s]
        total = sum(ns.values())
        if total <= 0:
            return []
        share = {s: ns[s] / total for s in STATES}
        secs = total / 1e9
        shares = {s: round(100 * share[s], 1) for s in STATES}
        out = []
        reads = self._merged_reads(ivs, pid)
        wcpu = sum(iv.worker_oncpu_ns.get(pid, 0) for iv in ivs)
        wio = sum(iv.worker_iowait_ns.get(pid, 0) for iv in ivs)
        blocked = 100 * wio / (wio + wcpu) if wio + wcpu else 0.0
        top = self._top_file(ivs, pid)
        wait_pct = shares["data_wait_io"] + shares["data_wait_cpu"] + shares["data_wait_network"]
        where = f" on {top[0]} ({top[1]})" if top else ""
        if share["sync_loading"] >= t.loop_share:
            me = RANK if RANK in reads else MAIN  # the loop's own process
            p99 = percentile_ns(reads.get(me, []), 99, _slowest(ivs, pid, me, reads))
            workers = "with" if pid in self.workers_seen else "without"
            out.append(Finding(
                "sync_loading", _severity(share["sync_loading"]), pid,
                f"The training loop read files itself {shares['sync_loading']:.0f} % of "
                f"{format_ns(total)} ({workers} DataLoader workers); p99 read latency "
                f"{format_ns(p99)}{where}.",
                {"loop_shares_pct": shares, "seconds": round(secs, 1),
                 "p99_read_ns": p99, "dataloader_workers": pid in self.workers_seen,
                 "top_dir": top[0] if top else None}))
        if share["data_wait_io"] >= t.loop_share:
            p99 = percentile_ns(reads.get(DATALOADER_WORKER, []), 99,
                                _slowest(ivs, pid, DATALOADER_WORKER, reads))
            out.append(Finding(
                "dataloader_io_bound", _severity(share["data_wait_io"]), pid,
                f"The training loop waited for batches {wait_pct:.0f} % "
                f"of {format_ns(total)}; the DataLoader workers were blocked on I/O {blocked:.0f} % of "
                f"their busy time; p99 read latency {format_ns(p99)}{where}.",
                {"loop_shares_pct": shares, "seconds": round(secs, 1),
                 "workers_blocked_pct": round(blocked, 1), "p99_read_ns": p99,
                 "top_dir": top[0] if top else None}))
        if share["data_wait_cpu"] >= t.loop_share:
            out.append(Finding(
                "dataloader_cpu_bound", _severity(share["data_wait_cpu"]), pid,
                f"The training loop waited for batches {wait_pct:.0f} % "
                f"of {format_ns(total)} while the DataLoader workers were on CPU "
                f"{100 - blocked:.0f} % of their busy time (decoding/augmenting), not on I/O.",
                {"loop_shares_pct": shares, "seconds": round(secs, 1),
                 "workers_oncpu_pct": round(100 - blocked, 1)}))
        if share["data_wait_network"] >= t.loop_share:
            out.append(self._network_finding(pid, ivs, share, shares, total, wait_pct))
        if share["sync_writes"] >= t.sync_writes_share:
            out.append(self._writes_finding(pid, ivs, share, shares, total))
        bg = [iv.background[pid] for iv in ivs if pid in iv.background]
        waited = sum(b.waited_ns for b in bg)
        if share["checkpoint"] >= t.checkpoint_share and 2 * waited >= ns["checkpoint"]:
            out.append(self._background_finding(pid, bg, share, shares, total))
        elif share["checkpoint"] >= t.checkpoint_share:
            nbytes = sum(iv.written.get(pid, 0) for iv in ivs)
            rate = nbytes / (ns["checkpoint"] / 1e9) if ns["checkpoint"] else 0
            ckpts = sorted({path for (p, path), n in self.written_total.items()
                            if p == pid and n >= t.checkpoint_file_bytes})
            out.append(Finding(
                "checkpoint_stall", _severity(share["checkpoint"]), pid,
                f"The training loop spent {shares['checkpoint']:.0f} % of {format_ns(total)} writing "
                f"checkpoints: {format_bytes(nbytes)} at {format_bytes(rate)}/s"
                + (f" to {ckpts[0]}" if ckpts else "") + ".",
                {"loop_shares_pct": shares, "seconds": round(secs, 1), "bytes_written": nbytes,
                 "write_bytes_per_s": round(rate), "files": ckpts[:5]}))
        return out

    def _network_finding(self, pid: int, ivs: list[_Interval], share: dict, shares: dict,
                         total: int, wait_pct: float) -> Finding:
        role = DATALOADER_WORKER if pid in self.workers_seen else (
            RANK if any((pid, RANK) in iv.net_counts for iv in ivs) else MAIN)
        counts = [0] * MAX_SLOTS
        nbytes = 0
        for iv in ivs:
            for i, c in enumerate(iv.net_counts.get((pid, role), ())):
                counts[i] += c
            nbytes += iv.net_bytes.get((pid, role), 0)
        secs = sum(iv.interval_ns for iv in ivs if pid in iv.loops) / 1e9
        p50, p99 = percentile_ns(counts, 50), percentile_ns(counts, 99)
        wnet = sum(iv.worker_net_ns.get(pid, 0) for iv in ivs)
        wbusy = wnet + sum(iv.worker_oncpu_ns.get(pid, 0) + iv.worker_iowait_ns.get(pid, 0)
                           for iv in ivs)
        rate = nbytes / secs if secs else 0
        net_pct = 100 * wnet / wbusy if wbusy else 0.0
        who = (f"the DataLoader workers spent {net_pct:.0f} % of their busy time in socket reads"
               if role == DATALOADER_WORKER
               else "the loop read the sockets itself (no DataLoader workers)")
        peers = self.peers.get(pid, [])
        where = f" from {', '.join(peers[:3])}" + (" ..." if len(peers) > 3 else "") if peers else ""
        return Finding(
            "dataloader_network_bound", _severity(share["data_wait_network"]), pid,
            f"The training loop waited for data from the network {shares['data_wait_network']:.0f} % "
            f"of {format_ns(total)}: {who}; {format_bytes(rate)}/s received{where}, socket "
            f"reads p50 {format_ns(p50)}, p99 {format_ns(p99)}.",
            {"loop_shares_pct": shares, "seconds": round(total / 1e9, 1),
             "data_wait_pct": round(wait_pct, 1),
             "workers_socket_pct": round(net_pct, 1) if wbusy else None,
             "socket_reads": sum(counts), "bytes_received": nbytes,
             "receive_bytes_per_s": round(rate), "socket_read_p50_ns": p50,
             "socket_read_p99_ns": p99, "peers": peers})

    def _writes_finding(self, pid: int, ivs: list[_Interval], share: dict, shares: dict,
                        total: int) -> Finding:
        by_path: dict[str, list[int]] = {}
        for iv in ivs:
            for path, w in iv.small_writes.get(pid, {}).items():
                acc = by_path.setdefault(path, [0, 0, 0])
                for i in range(3):
                    acc[i] += w[i]
        secs = sum(iv.interval_ns for iv in ivs if pid in iv.loops) / 1e9 or 1.0
        top = max(by_path, key=lambda p: by_path[p][0] + by_path[p][1] + by_path[p][2] / 1e9,
                  default=None)
        writes, fsyncs, fsync_ns = by_path.get(top, [0, 0, 0]) if top else (0, 0, 0)
        mean = fsync_ns // fsyncs if fsyncs else 0
        what = (f" mostly to {top} ({writes / secs:.1f} writes/s, {fsyncs / secs:.1f} fsyncs/s, "
                f"{format_ns(mean)} per fsync)") if top else ""
        return Finding(
            "sync_writes", _severity(share["sync_writes"]), pid,
            f"The training loop spent {shares['sync_writes']:.0f} % of {format_ns(total)} writing "
            f"and fsyncing files that are not checkpoints{what}.",
            {"loop_shares_pct": shares, "seconds": round(total / 1e9, 1), "file": top,
             "writes_per_s": round(writes / secs, 2), "fsyncs_per_s": round(fsyncs / secs, 2),
             "fsync_mean_ns": mean,
             "files": sorted(by_path, key=lambda p: -sum(by_path[p][:2]))[:5]})

    def _background_finding(self, pid: int, bg: list[_Background], share: dict, shares: dict,
                            total: int) -> Finding:
        waited = sum(b.waited_ns for b in bg)
        blocked = sum(b.blocked_ns for b in bg)
        nbytes = sum(b.bytes for b in bg)
        own = sum(b.woken_own_ns for b in bg)
        timers = sum(b.woken_other_ns for b in bg)
        saver = "a child process" if any(b.child for b in bg) else "another thread"
        if own >= timers:
            how = ("its sleeps were ended by its own threads: it waited on the saver (a join, "
                   "a lock, the GIL handed back)")
        elif saver == "a child process":
            how = ("its sleeps were ended by other processes: it waited for the saver (waitpid, "
                   "a pipe or a queue it holds up)")
        else:
            how = ("its sleeps were ended by timers: timed waits, such as for the GIL held by "
                   "the saver while it writes")
        return Finding(
            "checkpoint_stall", _severity(share["checkpoint"]), pid,
            f"A checkpoint saved in the background ({saver}) still held the training loop "
            f"{shares['checkpoint']:.0f} % of {format_ns(total)}: the loop slept "
            f"{format_ns(waited)} while the saver was blocked writing ({format_ns(blocked)}, "
            f"{format_bytes(nbytes)}); {how}.",
            {"loop_shares_pct": shares, "seconds": round(total / 1e9, 1), "background": True,
             "saver": "process" if saver == "a child process" else "thread",
             "loop_waited_ns": waited, "saver_blocked_ns": blocked, "bytes_written": nbytes,
             "loop_woken_by_own_ns": own, "loop_woken_by_timers_ns": timers})

    def background_lines(self) -> list[str]:
        """The summary's line on background saves that cost the loop little (below
        `checkpoint_stall`), per main process."""
        out = []
        ivs = list(self.intervals)
        for pid in sorted(self.background_savers):
            bg = [iv.background[pid] for iv in ivs if pid in iv.background]
            total = sum(sum(iv.loops[pid].ns.values()) for iv in ivs if pid in iv.loops)
            if not bg or not total:
                continue
            waited = sum(b.waited_ns for b in bg)
            if waited >= self.thresholds.checkpoint_share * total:
                continue  # a finding says it
            out.append(f"Checkpoint written in the background by pid {pid}'s "
                       f"{'child process' if any(b.child for b in bg) else 'threads'}: "
                       f"{format_bytes(sum(b.bytes for b in bg))} while the saver was blocked "
                       f"{format_ns(sum(b.blocked_ns for b in bg))}; the loop waited "
                       f"{100 * waited / total:.0f} % of its time.")
        return ["", *out] if out else []

    def other_lines(self) -> list[str]:
        """What the loop's `other` time was, per main process, when it is 10 % or more."""
        out = []
        for pid in sorted({p for iv in self.intervals for p in iv.loops}):
            ivs = [iv for iv in self.intervals if pid in iv.loops and self._training(iv, pid)]
            total = sum(sum(iv.loops[pid].ns.values()) for iv in ivs)
            other = sum(iv.loops[pid].ns["other"] for iv in ivs)
            if not total or other < 0.10 * total:
                continue
            parts = [sum(iv.other_parts.get(pid, (0, 0, 0))[i] for iv in ivs) for i in range(3)]
            words = ("runnable, waiting for a CPU", "asleep, woken by its own threads",
                     "asleep, woken by timers or other processes")
            said = ", ".join(f"{w} {100 * n / other:.0f} %" for w, n in zip(words, parts,
                                                                             strict=True) if n)
            out.append(f"The loop of pid {pid} spent {100 * other / total:.0f} % of its time in "
                       f"`other`: {said or 'nothing more is known'}.")
        return ["", *out] if out else []

    def _storage_findings(self, ivs: list[_Interval], loop: list[Finding]) -> list[Finding]:
        t = self.thresholds
        out = []
        io_bound = [f for f in loop if f.kind in ("sync_loading", "dataloader_io_bound")]
        sev = max((f.severity for f in io_bound), default=0)
        reads = [self._data_read(iv) for iv in ivs]
        training = [iv for iv, r in zip(ivs, reads, strict=True) if r is not None] or ivs
        reads = [r for r in reads if r is not None]
        # cold_cache: reads from disk first, from the page cache later. The cold part is the
        # run of cold intervals the reads start with, however long: a first epoch can be a
        # small part of a trace (8 epochs, or attached to late in the first).
        ratios = [r.missed / r.bytes for r in reads if r.bytes >= t.min_read_bytes]
        cold = next((i for i, r in enumerate(ratios) if r < t.cold_miss_ratio), len(ratios))
        k = max(1, len(ratios) // 4)
        if len(ratios) >= 4 and cold >= t.cold_min_intervals and cold + k <= len(ratios):
            early, late = ratios[:cold], ratios[-k:]
            if max(late) <= t.warm_miss_ratio:
                out.append(Finding(
                    "cold_cache", 30, None,
                    f"The first {cold} interval(s) reading the data set read "
                    f"{100 * sum(early) / cold:.0f} % of its bytes from disk, the last {k} only "
                    f"{100 * sum(late) / k:.0f} %: the first pass was cold; judge the steady "
                    "state.",
                    {"early_miss_pct": [round(100 * r, 1) for r in early],
                     "late_miss_pct": [round(100 * r, 1) for r in late]}))
        if not io_bound:
            return out
        exceeds = self._exceeds_cache(training, reads, sev)
        if exceeds is not None:
            # later passes miss as the first did: no first pass that warmed the cache
            out = [f for f in out if f.kind != "cold_cache"] + [exceeds]
        sizes, in_folder = defaultdict(int), defaultdict(int)  # path -> bytes, folder's files
        for r in reads:
            for key, n in r.files.items():
                sizes[key[0]] += n
            for key, n in r.folder_files.items():
                in_folder[key[0]] += n
        # a folder row's files count as files of its average size
        weighted = sorted((n // in_folder[p], in_folder[p]) if p in in_folder else (n, 1)
                          for p, n in sizes.items() if in_folder.get(p, 1))
        n_files = sum(w for _, w in weighted)
        if n_files >= t.small_files_min_count:
            # the size of file n_files // 2 in size order (the upper median)
            median = next(size for size, upto in _cumulative(weighted) if upto > n_files // 2)
            if median < t.small_file_bytes:
                out.append(Finding(
                    "small_files", max(20, sev // 2), None,
                    f"{n_files} files were read, half of them for under "
                    f"{format_bytes(median)} each; per-file overhead dominates.",
                    {"files": n_files, "median_bytes_per_file": median,
                     "opens": sum(r.opens for r in reads)}))
        fs_bytes = defaultdict(int)
        for r in reads:
            for (_path, fs), n in r.files.items():
                fs_bytes[fs] += n
        total = sum(fs_bytes.values())
        slow = {fs: n for fs, n in fs_bytes.items() if fs in SLOW_FS_TYPES}
        if total and sum(slow.values()) / total >= t.slow_fs_read_share:
            out.append(Finding(
                "slow_filesystem", max(20, sev // 2), None,
                f"{100 * sum(slow.values()) / total:.0f} % of the bytes read came from "
                f"{', '.join(sorted(slow))}, which add latency on top of the device.",
                {"read_bytes_by_fs": dict(fs_bytes)}))
        contended = self._contended(training, sev)
        if contended:
            out.append(contended)
        queue = [sum(iv.queue_counts[i] for iv in training) for i in range(MAX_SLOTS)]
        service = [sum(iv.service_counts[i] for iv in training) for i in range(MAX_SLOTS)]
        q50, s50 = percentile_ns(queue, 50), percentile_ns(service, 50)
        utils = defaultdict(list)
        for iv in training:
            for dev, u in iv.device_util.items():
                utils[dev].append(u)
        busy = {d: sum(u) / len(u) for d, u in utils.items() if u}
        hot = max(busy, key=busy.get) if busy else None
        if (hot and busy[hot] >= t.saturated_util_pct and q50 and s50
                and q50 >= t.saturated_queue_ratio * s50):
            share = _others_share(*_disk_totals(training, hot))
            who = (f"; other processes did {100 * share[1]:.0f} % of its reads (bytes)"
                   if share and share[1] > t.contended_share else "")
            out.append(Finding(
                "device_saturated", max(30, sev // 2), None,
                f"{hot} was busy {busy[hot]:.0f} % of the time; reads queued {format_ns(q50)} "
                f"(median) before a {format_ns(s50)} service time{who}.",
                {"device": hot, "util_pct": round(busy[hot], 1), "queue_p50_ns": q50,
                 "service_p50_ns": s50,
                 "other_bytes_pct": round(100 * share[1], 1) if share else None}))
        return out

    def _exceeds_cache(self, ivs: list[_Interval], reads: list[_Reads], sev: int
                       ) -> Finding | None:
        """dataset_exceeds_cache: the bytes read again (of files read in an earlier interval)
        missed the page cache again; with the memory the job's cgroup allows."""
        t = self.thresholds
        by_dir: dict[str, list[int]] = {}
        for r in reads:
            for d, counts in r.by_dir.items():
                acc = by_dir.setdefault(d, [0, 0, 0])
                for i, n in enumerate(counts):
                    acc[i] += n
        again = sum(c[1] for c in by_dir.values())
        missed = sum(c[2] for c in by_dir.values())
        if again < t.min_reread_bytes or missed < t.reread_miss_ratio * again:
            return None
        top = max(by_dir, key=lambda d: by_dir[d][2])
        first = by_dir[top][0] - by_dir[top][1]  # what a first pass read there
        by_dir = {d.rstrip("/") or "/": c for d, c in by_dir.items()}  # said without the "/"
        top = top.rstrip("/") or "/"
        share = missed / again
        rows = [m for iv in ivs for m in iv.memory.values()]
        limits = [m["limit_bytes"] for m in rows if m.get("limit_bytes")]
        caches = [m["cache_bytes"] for m in rows if m.get("cache_bytes") is not None]
        limit = min(limits) if limits else None
        cache = max(caches) if caches else None
        usage = max((m["usage_bytes"] for m in rows if m.get("usage_bytes") is not None),
                    default=None)
        available = min((m["available_bytes"] for m in rows), default=None)
        cgroup = next((m["cgroup"] for m in rows if m.get("limit_bytes") == limit and limit), None)
        kept = f", of which it kept {format_bytes(cache)} as page cache" if cache is not None else ""
        if limit is not None:
            room = f"the {format_bytes(limit)} that the job's memory cgroup {cgroup} allows{kept}"
        elif available is not None:
            room = (f"the memory left to the job ({format_bytes(available)} available on the "
                    "host" + (f"; its cgroup kept {format_bytes(cache)} of page cache)"
                              if cache is not None else ")"))
        else:
            room = "the page cache"
        return Finding(
            "dataset_exceeds_cache", min(sev, max(30, round(sev * share))), None,
            f"The data set under {top} ({format_bytes(first)} read in a first pass) does not "
            f"fit in {room}: {100 * share:.0f} % of the {format_bytes(again)} read again missed "
            "the page cache again.",
            {"top_dir": top, "first_pass_bytes": first, "reread_bytes": again,
             "reread_missed_bytes": missed, "reread_miss_pct": round(100 * share, 1),
             "limit_bytes": limit, "cgroup": cgroup, "cache_bytes": cache, "usage_bytes": usage,
             "available_bytes": available,
             "dirs": {d: {"bytes": c[0], "reread_bytes": c[1], "reread_missed_bytes": c[2]}
                      for d, c in sorted(by_dir.items(), key=lambda kv: -kv[1][2])[:5]}})

    def _contended(self, ivs: list[_Interval], sev: int) -> Finding | None:
        """device_contended: other processes took most of the reads of the disk the job reads
        most from."""
        t = self.thresholds
        mine: dict[str, int] = defaultdict(int)
        for iv in ivs:
            for dev, d in iv.disk_reads.items():
                mine[dev] += d.traced[1]
        if not mine or not max(mine.values()):
            return None
        dev = max(mine, key=mine.get)
        traced, others = _disk_totals(ivs, dev)
        share = _others_share(traced, others)
        if share is None:
            return None
        if share[1] <= t.contended_share or others[1] < t.contended_min_bytes:
            return None
        users: dict[tuple[str, str, str | None, str | None], int] = defaultdict(int)
        for iv in ivs:
            d = iv.disk_reads.get(dev)
            for who, n in (d.by_user.items() if d else ()):
                users[who] += n
        # Rates over the intervals after the trace's first, whose length a replay of the
        # trace knows as the live run did (the time since the interval before)
        later = [iv for iv in ivs if iv.ts_ns != self.intervals[0].ts_ns]
        secs = sum(iv.interval_ns for iv in later) / 1e9
        later_totals = _disk_totals(later, dev)
        rates = [later_totals[k][1] / secs if secs else None for k in (1, 0)]
        top = sorted(users.items(), key=lambda kv: -kv[1])[:MAX_DISK_USERS]
        names = ", ".join(comm + (f" in {short_name(cg, cid, pod)}" if cg else "")
                          for (comm, cg, cid, pod), _ in top[:3])
        pct = [round(100 * x, 1) for x in share]
        how = (f"{format_bytes(rates[0])}/s against the job's {format_bytes(rates[1])}/s"
               if secs else f"{format_bytes(others[1])} against the job's "
               f"{format_bytes(traced[1])}")
        return Finding(
            "device_contended", max(20, sev // 2), None,
            f"Other processes did {pct[1]:.0f} % of {dev}'s reads (bytes) while the job waited "
            f"on it ({names}; {how}).",
            {"device": dev, "other_requests_pct": pct[0], "other_bytes_pct": pct[1],
             "other_service_pct": pct[2], "other_bytes": others[1], "job_bytes": traced[1],
             "other_bytes_s": round(rates[0]) if secs else None,
             "job_bytes_s": round(rates[1]) if secs else None,
             "others": [{"comm": comm, "cgroup": cg or None, "container_id": cid,
                         "pod_uid": pod, "bytes": n} for (comm, cg, cid, pod), n in top]})

    def _data_read(self, iv: _Interval) -> _Reads | None:
        """The data set's reads in `iv` by the mains in training then; None when every main
        with a loop there was still starting up."""
        mains = set(iv.loops) | set(iv.data)
        if mains and not any(self._training(iv, pid) for pid in mains):
            return None
        out = _Reads()
        for pid, r in iv.data.items():
            if self._training(iv, pid):
                out.merge(r)
        return out

    def _healthy(self, ivs: list[_Interval], mains: list[int]) -> Finding:
        ns = dict.fromkeys(STATES, 0)
        for iv in ivs:
            for pid, loop in iv.loops.items():
                if not self._training(iv, pid):
                    continue
                for s in STATES:
                    ns[s] += loop.ns[s]
        total = sum(ns.values())
        if not total:
            return Finding("not_io_bound", 5, mains[0] if len(mains) == 1 else None,
                           "No I/O finding: the traced main thread(s) hardly ran, and nothing "
                           "they did waited on storage.", {"loop_shares_pct": None})
        shares = {s: round(100 * ns[s] / total, 1) for s in STATES}
        return Finding(
            "not_io_bound", 5, mains[0] if len(mains) == 1 else None,
            f"I/O is not what holds the job back: the training loop computed "
            f"{shares['compute']:.0f} % of the time, waited on its own reads "
            f"{shares['sync_loading']:.0f} % and on checkpoints {shares['checkpoint']:.0f} %.",
            {"loop_shares_pct": shares})

    def _merged_reads(self, ivs: list[_Interval], pid: int) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for iv in ivs:
            for (main, role), counts in iv.read_counts.items():
                if main == pid:
                    acc = out.setdefault(role, [0] * MAX_SLOTS)
                    for i, c in enumerate(counts):
                        acc[i] += c
        return out

    @staticmethod
    def _top_file(ivs: list[_Interval], pid: int) -> tuple[str, str] | None:
        """The directory holding most of the data set's bytes that main `pid`'s processes read
        in `ivs`, with its file system type."""
        by_dir: dict[tuple[str, str], int] = defaultdict(int)
        for iv in ivs:
            r = iv.data.get(pid)
            for (path, fs), n in (r.files.items() if r else ()):
                by_dir[(path.rsplit("/", 1)[0] or "/", fs)] += n
        if not by_dir:
            return None
        return max(by_dir, key=by_dir.get)


def _read_max(files: list[FileRow], owner: dict[int, int]) -> dict[tuple[int, str], tuple[int, int]]:
    """(main pid, role) -> (file reads, the slowest in ns; -1 when a row does not know it)."""
    out: dict[tuple[int, str], tuple[int, int]] = {}
    for f in files:
        if f["op"] == "read" and f["ops"]:
            key = (owner.get(f["pid"], f["pid"]), f["role"])
            ops, top = out.get(key, (0, 0))
            known = f["latency_max_ns"] > 0 and top >= 0
            out[key] = (ops + f["ops"], max(top, f["latency_max_ns"]) if known else -1)
    return out


def _slowest(ivs: list[_Interval], pid: int, role: str, reads: dict[str, list[int]]
             ) -> int | None:
    """The slowest file read of main `pid`'s processes of `role` in `ivs`, when the files rows
    cover every read of the histogram (a percentile stays at or below it), else None."""
    ops = top = 0
    for iv in ivs:
        n, m = iv.read_max.get((pid, role), (0, 0))
        if m < 0:
            return None
        ops, top = ops + n, max(top, m)
    return top if top and ops == sum(reads.get(role, [])) else None


def _severity(share: float) -> int:
    return max(1, min(100, round(100 * share)))


def render_findings(findings: list[Finding]) -> list[str]:
    """The findings block of the summary, most severe first."""
    if not findings:
        return []
    lines = ["", "Findings (most severe first):"]
    for f in findings:
        lines.append(f"  [{f.severity:>3}] {f.kind}: {f.summary}")
        lines.append(f"        advice: {f.advice}")
    return lines
