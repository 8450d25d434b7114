"""The data model every stage passes on: one row type per trace table, and the interval snapshot.

A row is a plain dict (a `TypedDict`: no class, no conversion at run time), keyed by the columns
of its table in `tracer.tracedir.schema.TABLES`, in the same order; tests/test_model.py checks
that the two agree column by column, so a column added to one and not the other fails there.
Value types as the live run passes them: timestamps and durations are int nanoseconds (UTC for
timestamps), strings are `str`, a nullable column is ``X | None``.

Standard library only: every stage (the sinks, the UI, the diagnosis) may import this without
numpy, pandas or pyarrow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypedDict

from tracer.core.histogram import MaxSeen

if TYPE_CHECKING:
    from tracer.core.redact import Redactor
    from tracer.core.selfcost import SelfCost


class ProcessRow(TypedDict):
    pid: int
    ppid: int
    comm: str
    role: str
    cmdline: str
    first_seen: int
    exit: int | None
    exit_code: int | None
    exit_signal: int | None
    worker_generation: int | None
    worker_index: int | None
    ns_pid: int | None
    peers: str | None
    rank: int | None
    local_rank: int | None
    world_size: int | None
    cuda_device: str | None


class LatencyRow(TypedDict):
    ts: int
    pid: int
    comm: str
    role: str
    layer: str
    op: str
    target: str | None
    device: str | None
    attribution: str | None
    bucket_lo_ns: int
    bucket_hi_ns: int
    count: int
    bytes: int


class FileRow(TypedDict):
    ts: int
    pid: int
    comm: str
    role: str
    path: str
    path_source: str
    fs_type: str
    device: str
    inode: int
    op: str
    file_count: int | None  # None only in traces of an iotrace before folder rows
    ops: int
    bytes: int
    latency_sum_ns: int
    latency_max_ns: int
    pages_missed: int
    pages_dirtied: int
    cache_hit_pct: float | None
    reread_bytes: int | None  # op read only (None in older traces)
    reread_pages_missed: int | None


class EventRow(TypedDict):
    ts: int
    pid: int
    tid: int
    comm: str
    role: str | None
    layer: str
    op: str
    path: str | None
    device: str | None
    offset: int | None
    bytes: int
    latency_ns: int


class ThreadRow(TypedDict):
    ts: int
    pid: int
    tid: int
    comm: str
    role: str | None
    oncpu_ns: int
    runnable_ns: int
    sleep_ns: int
    iowait_ns: int
    woken_by_worker_ns: int
    woken_by_pin_ns: int
    woken_by_own_ns: int
    woken_by_other_ns: int
    reclaim_ns: int | None
    reclaim_blocked_ns: int | None
    reclaims: int | None
    fault_wait_ns: int | None
    fault_sleeps: int | None
    syscall_op: str | None
    syscall_path: str | None
    syscall_since: int | None
    write_open_path: str | None
    write_open_ns: int | None
    gpu_wait_ns: int | None
    device_copy_ns: int | None
    cuda_syncs: int | None
    cuda_copies: int | None
    cuda_launches: int | None
    copy_dtoh_bytes: int | None
    copy_htod_bytes: int | None
    copy_other_bytes: int | None


class LoopRow(TypedDict):
    ts: int
    pid: int
    rank: int | None
    interval_ns: int
    data_wait_io_ns: int
    data_wait_cpu_ns: int
    data_wait_network_ns: int
    sync_loading_ns: int
    sync_writes_ns: int
    checkpoint_ns: int
    collective_wait_ns: int | None
    gpu_wait_ns: int | None
    device_copy_ns: int | None
    compute_ns: int
    other_ns: int
    state: str


class DeviceRow(TypedDict):
    ts: int
    device: str
    r_s: float
    w_s: float
    rkb_s: float
    wkb_s: float
    r_await_ms: float
    w_await_ms: float
    await_ms: float
    aqu_sz: float
    util_pct: float


class DeviceUserRow(TypedDict):
    ts: int
    device: str
    op: str
    who: str
    cgroup: str | None
    container_id: str | None
    pod_uid: str | None
    comm: str | None
    requests: int
    bytes: int
    service_ns: int


class CpuWaitRow(TypedDict):
    ts: int
    pid: int
    who: str
    taker_pid: int | None
    comm: str | None
    cgroup: str | None
    container_id: str | None
    pod_uid: str | None
    waits: int
    wait_ns: int


class StackRow(TypedDict):
    ts: int
    taken: int
    pid: int
    tid: int
    role: str | None
    reason: str
    depth: int
    file: str
    line: int
    function: str
    user: bool
    text: str | None


class SystemRow(TypedDict):
    ts: int
    cpu_user_pct: float
    cpu_sys_pct: float
    cpu_iowait_pct: float
    cpu_idle_pct: float
    mem_used_bytes: float
    mem_cached_bytes: float
    net_rx_bytes_s: float
    net_tx_bytes_s: float
    disk_read_bytes_s: float
    disk_write_bytes_s: float


class MemoryRow(TypedDict):
    ts: int
    pid: int
    source: str
    cgroup: str | None
    limit_bytes: int | None
    usage_bytes: int | None
    cache_bytes: int | None
    available_bytes: int
    majfaults: int | None
    limit_hits: int | None
    swap_bytes: int | None
    psi_source: str | None
    psi_memory_some_ns: int | None
    psi_memory_full_ns: int | None
    psi_io_some_ns: int | None
    psi_cpu_some_ns: int | None


class FuseRow(TypedDict):
    ts: int
    device: str
    mount_point: str
    fs_type: str
    source: str
    daemon_pid: int | None
    daemon_comm: str | None
    found_by: str | None
    cpu_ns: int | None
    disk_read_bytes: int | None
    disk_write_bytes: int | None
    net_rx_bytes: int | None
    rtt_us: float | None
    peers: str | None


class GpuRow(TypedDict):
    ts: int
    gpu: int
    uuid: str
    name: str
    util_pct: float
    mem_util_pct: float | None
    pcie_rx_bytes_s: float | None
    pcie_tx_bytes_s: float | None
    sample_period_ns: int


class GpuIdleRow(TypedDict):
    start: int
    end: int
    duration_ns: int
    gpu: int
    pid: int | None
    cause: str
    data_wait_io_frac: float
    data_wait_cpu_frac: float
    data_wait_network_frac: float
    sync_loading_frac: float
    sync_writes_frac: float
    checkpoint_frac: float
    collective_wait_frac: float | None
    gpu_wait_frac: float | None
    device_copy_frac: float | None
    compute_frac: float
    other_frac: float
    coverage: float
    confidence: float


class FindingRow(TypedDict):
    ts: int
    start: int
    end: int
    kind: str
    severity: int
    pid: int | None
    rank: int | None
    summary: str
    evidence: str
    advice: str


ROW_TYPES: dict[str, type] = {
    "processes": ProcessRow, "latency": LatencyRow, "files": FileRow, "events": EventRow,
    "threads": ThreadRow, "loop": LoopRow, "devices": DeviceRow,
    "device_users": DeviceUserRow, "cpu_waits": CpuWaitRow, "stacks": StackRow,
    "system": SystemRow, "memory": MemoryRow, "fuse": FuseRow,
    "gpu": GpuRow, "gpu_idle": GpuIdleRow, "findings": FindingRow,
}
"""The row type of each table, by table name (the keys of `schema.TABLES`)."""


class Series(NamedTuple):
    """One histogram series as users name it: the latency table's identifying columns."""

    pid: int
    layer: str
    op: str
    target: str | None  # syscall layer
    device: str | None  # block layers
    attribution: str | None  # block layers


FileKey = tuple[int, int, int, int]
"""A file of a process over time: (pid, dev, ino, gen), as `abi.FileKey`; the rows of a folder
whose files were added up as (pid, dev, the folder's inode, FOLDER_GEN)."""
FOLDER_GEN = -1


@dataclass(frozen=True)
class Snapshot:
    """What happened in one interval; every sink renders this same object."""

    ts_ns: int  # end of the interval, UTC ns
    interval_ns: int
    latency: list[LatencyRow] = field(default_factory=list)
    files: list[FileRow] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)  # slow operations
    threads: list[ThreadRow] = field(default_factory=list)
    devices: list[DeviceRow] = field(default_factory=list)  # iostat -x
    system: SystemRow | None = None  # dstat
    gpu: list[GpuRow] = field(default_factory=list)  # NVML samples, when sampling
    cost: SelfCost | None = None  # iotrace's own cost so far (the session adds it)
    memory: list[MemoryRow] = field(default_factory=list)  # per main process: its memory cgroup
    device_users: list[DeviceUserRow] = field(default_factory=list)  # who used each disk
    cpu_waits: list[CpuWaitRow] = field(default_factory=list)  # who had the CPUs traced threads waited for
    fuse: list[FuseRow] = field(default_factory=list)  # the FUSE mounts read through, their daemons
    stacks: list[StackRow] = field(default_factory=list)  # Python stacks sampled (tracer.live.stacks)


class FileTotals:
    """Whole-trace sums for one (process, file) or folder, for the summary's top files.

    One list per op, [ops, bytes, slowest, slowest unknown], in one dict: the summary keeps
    thousands (an ImageNet-shaped job's workers each read a thousand folders), and a dict per
    count with a MaxSeen of three more containers took 1.3 KB an entry, twice this."""

    __slots__ = ("by_op", "dir_ino", "latency_sum_ns", "pages_dirtied", "pages_missed")

    def __init__(self, dir_ino: int = 0) -> None:
        self.by_op: dict[str, list[int]] = {}
        self.latency_sum_ns = 0
        self.pages_missed = 0
        self.pages_dirtied = 0
        self.dir_ino = dir_ino  # the folder it is in (a folder's: itself), where it folds into

    def add(self, op: str, ops: int, nbytes: int, latency_sum_ns: int, pages_missed: int,
            pages_dirtied: int, max_ns: int) -> None:
        """A row of `op`: its counts, the slowest of its `ops` operations `max_ns` (0: not known)."""
        acc = self.by_op.get(op)
        if acc is None:
            acc = self.by_op[op] = [0, 0, 0, 0]
        acc[0] += ops
        acc[1] += nbytes
        if ops:  # as MaxSeen.add_key
            if max_ns > 0:
                acc[2] = max(acc[2], max_ns)
            else:
                acc[3] = 1
        self.latency_sum_ns += latency_sum_ns
        self.pages_missed += pages_missed
        self.pages_dirtied += pages_dirtied

    def absorb(self, other: FileTotals) -> None:
        """Adds another file's totals (a file folded into its folder's)."""
        for op, (ops, nbytes, max_ns, unknown) in other.by_op.items():
            acc = self.by_op.get(op)
            if acc is None:
                acc = self.by_op[op] = [0, 0, 0, 0]
            acc[0] += ops
            acc[1] += nbytes
            acc[2] = max(acc[2], max_ns)
            acc[3] |= unknown
        self.latency_sum_ns += other.latency_sum_ns
        self.pages_missed += other.pages_missed
        self.pages_dirtied += other.pages_dirtied

    @property
    def ops(self) -> dict[str, int]:
        """Operations by op."""
        return {op: acc[0] for op, acc in self.by_op.items()}

    @property
    def bytes(self) -> dict[str, int]:
        """Bytes by op."""
        return {op: acc[1] for op, acc in self.by_op.items()}

    @property
    def slowest(self) -> MaxSeen[str]:
        """The slowest operation by op, where every operation's is known."""
        seen: MaxSeen[str] = MaxSeen()
        for op, (ops, _bytes, max_ns, unknown) in self.by_op.items():
            if ops:
                seen.ops[op] = ops
            if max_ns:
                seen.max_ns[op] = max_ns
            if unknown:
                seen.unknown.add(op)
        return seen


@dataclass
class RolledUp:
    """What the files table added up per folder so far (rollup.split), for the summary and
    meta.json: per-file rows that went into folder rows (those the kernel folded at their close
    among them), the folder rows, and the operations the kernel itself counted per folder
    because its per-file table was full."""

    file_rows: int = 0
    folder_rows: int = 0
    kernel_ops: int = 0
    kernel_folded: int = 0

    def add(self, folder_rows, n_files, kernel_folders) -> None:
        """One interval's folder rows, the files in each, and the kernel's folder counts."""
        self.file_rows += int(n_files.sum())
        self.folder_rows += len(folder_rows)
        # (a file's opens count apart in its read or write key: struct file_stat)
        self.kernel_ops += int(kernel_folders["ops"].sum() + kernel_folders["opens"].sum())


# What the renderers need of the live stage's process and file tables (`tracer.live.processes`,
# `tracer.live.files`), so that they take either without importing the live stage.


class ProcessInfo(Protocol):
    @property
    def ppid(self) -> int: ...
    @property
    def comm(self) -> str: ...
    @property
    def is_target(self) -> bool: ...
    @property
    def role(self) -> str: ...


class ProcessLookup(Protocol):
    def get(self, pid: int) -> ProcessInfo | None: ...


class FileInfo(Protocol):
    @property
    def path(self) -> str: ...


class FileLookup(Protocol):
    redact: Redactor

    # pid, dir_ino: the process that read the file and its folder, which name it again once
    # its name was forgotten (the live table keeps the last files named only)
    def get(self, dev: int, ino: int, gen: int, pid: int | None = None,
            dir_ino: int = 0) -> FileInfo: ...
