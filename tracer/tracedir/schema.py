"""The Parquet tables of a trace directory: the single source of truth for their columns.

Every table that iotrace writes is declared here, once; the writer (`tracer.sinks.parquet`) and the
reader (`tracer.tracedir.reader`) both take their schemas from `TABLES`, and `tracer.core.model`
has a row type per table that tests/test_model.py keeps equal to them. The rules (README.md, "The
trace directory"):

- timestamps are ``timestamp[ns, UTC]``; callers give them as int nanoseconds since the Unix epoch;
- durations are int64 nanoseconds and their column names end in ``_ns``;
- strings that repeat (comm, role, path, op, device, ...) are dictionary-encoded;
- a column that may be null says so (``nullable=True``); every other column is required.

Versioning (docs/trace-format.md, "Schema versions"): adding a nullable column keeps
`SCHEMA_VERSION`, since readers fill it with nulls in a segment that lacks it
(`tracer.tracedir.segments.conform`); renaming or removing a column, changing its type, unit or
meaning, or adding a required column is a new `SCHEMA_VERSION`, and readers refuse traces whose
version they do not know.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import repeat

import pyarrow as pa

SCHEMA_VERSION = 3
"""Version of the trace directory layout and of every table below. Version 3 split the loop's
`compute` into gpu_wait, device_copy and compute (the host's part); a version 2 trace reads as
before, its gpu_wait and device_copy null (its compute holds them)."""

READ_VERSIONS = (2, 3)
"""The versions this iotrace reads."""

MAX_DEVICE_USERS = 8
"""Untraced users a `device_users` interval names per disk and op; the others are one row."""

MAX_CPU_TAKERS = 10
"""Takers a `cpu_waits` interval names per traced process that waited; the others are one row."""

SCHEMA_VERSION_KEY = b"iotrace.schema_version"
"""Key of the schema version in each table schema's key-value metadata."""

META_FILE = "meta.json"
"""Name of the trace's metadata file, directly in the trace directory."""

TIMESTAMP = pa.timestamp("ns", tz="UTC")
"""Wall-clock time: nanoseconds since the Unix epoch, UTC."""

DICT_STRING = pa.dictionary(pa.int32(), pa.string())
"""A string that repeats (comm, role, path, op, device, ...): stored once per segment."""

NS = pa.int64()
"""A duration in nanoseconds (column name ends in ``_ns``)."""


def _field(name: str, type_: pa.DataType, nullable: bool = False) -> pa.Field:
    return pa.field(name, type_, nullable=nullable)


def _schema(*fields: pa.Field) -> pa.Schema:
    return pa.schema(fields, metadata={SCHEMA_VERSION_KEY: str(SCHEMA_VERSION).encode()})


TABLES: dict[str, pa.Schema] = {
    # A row per traced process when it is first seen and again whenever it changes, rolled with
    # the other tables (a killed trace names its processes); the last row for a pid wins, and a
    # finished trace keeps that one only.
    "processes": _schema(
        _field("pid", pa.int32()),
        _field("ppid", pa.int32()),
        _field("comm", DICT_STRING),
        _field("role", DICT_STRING),  # main | rank | agent | dataloader_worker | child
        _field("cmdline", pa.string()),
        _field("first_seen", TIMESTAMP),
        _field("exit", TIMESTAMP, nullable=True),  # null while the process runs
        # How it ended: the code of a normal exit, or the signal that killed it (the other null).
        _field("exit_code", pa.int32(), nullable=True),
        _field("exit_signal", pa.int32(), nullable=True),
        # DataLoader workers: which set of workers (0, 1, ... as they are re-forked every epoch
        # without persistent_workers) and the index in it (fork order); null for others.
        _field("worker_generation", pa.int32(), nullable=True),
        _field("worker_index", pa.int32(), nullable=True),
        # `pid` is the host's (what BPF sees); this is the PID inside the process's own PID
        # namespace (a container's view, from NSpid), null when it could not be read
        _field("ns_pid", pa.int32(), nullable=True),
        # the TCP peers (address:port, comma-separated) of its sockets seen so far, at most 8:
        # the servers a DataLoader worker fetches from (tracer.live.peers); null: none
        _field("peers", pa.string(), nullable=True),
        # RANK, LOCAL_RANK, WORLD_SIZE of its environment (torchrun sets them for each rank; its
        # workers inherit them); null elsewhere
        _field("rank", pa.int32(), nullable=True),
        _field("local_rank", pa.int32(), nullable=True),
        _field("world_size", pa.int32(), nullable=True),
        # the GPU its environment gives it, as CUDA_VISIBLE_DEVICES names it (an index or UUID):
        # a rank's entry at its LOCAL_RANK (tracer.core.roles.cuda_device); null: not one GPU
        _field("cuda_device", DICT_STRING, nullable=True),
    ),
    # One row per non-empty latency histogram bucket per process per interval; the sum of `count`
    # over an interval is exactly the number of operations completed in it.
    "latency": _schema(
        _field("ts", TIMESTAMP),  # end of the interval
        _field("pid", pa.int32()),
        _field("comm", DICT_STRING),
        _field("role", DICT_STRING),
        _field("layer", DICT_STRING),  # syscall | block | block_queue | pagecache
        _field("op", DICT_STRING),  # read | write | fsync | flush | discard | other
        # syscall rows: file | pipe | socket | unix_socket | other
        _field("target", DICT_STRING, nullable=True),
        _field("device", DICT_STRING, nullable=True),  # block rows: e.g. "nvme0n1"
        # block rows: direct | writeback | readahead | unknown
        _field("attribution", DICT_STRING, nullable=True),
        _field("bucket_lo_ns", NS),  # bucket covers [bucket_lo_ns, bucket_hi_ns)
        _field("bucket_hi_ns", NS),
        _field("count", pa.int64()),  # operations (pagecache layer: pages)
        _field("bytes", pa.int64()),
    ),
    # Per file per process per interval: what was read or written, and how slowly.
    "files": _schema(
        _field("ts", TIMESTAMP),  # end of the interval
        _field("pid", pa.int32()),
        _field("comm", DICT_STRING),
        _field("role", DICT_STRING),
        _field("path", DICT_STRING),  # absolute, as the process sees it; "(deleted)" appended
        # kernel (dentry walk), proc_fd, sibling (named from its folder's listing), folder (a
        # roll-up row), unknown; tracer/live/files.py has them all
        _field("path_source", DICT_STRING),
        _field("fs_type", DICT_STRING),  # ext4, xfs, overlay, nfs, fuse, tmpfs, ...
        _field("device", DICT_STRING),  # the file system's device, MAJ:MIN or disk name
        _field("inode", pa.int64()),
        _field("op", DICT_STRING),  # read, write, fsync, open
        # files the row counts: 1, or a folder's files added up (path_source "folder", the path
        # ending with "/", inode the folder's): of more than 64 files per process, op and
        # interval, those under 1 % of its time, bytes and pages (core/rollup.py); 0 for what the
        # kernel counted per folder (its per-file table full). Null in traces of iotrace before
        # it had folder rows.
        _field("file_count", pa.int64(), nullable=True),
        _field("ops", pa.int64()),
        _field("bytes", pa.int64()),
        _field("latency_sum_ns", NS),
        _field("latency_max_ns", NS),
        _field("pages_missed", pa.int64()),  # op read: pages brought into the page cache
        _field("pages_dirtied", pa.int64()),  # op write: pages dirtied
        _field("cache_hit_pct", pa.float64(), nullable=True),  # op read: 1 - missed/read bytes
        # op read: of `bytes`, those read from files already read in an earlier interval (a
        # later pass over them, tracer.live.rereads), and the pages those reads missed; null
        # for other ops and in traces of an iotrace before them
        _field("reread_bytes", pa.int64(), nullable=True),
        _field("reread_pages_missed", pa.int64(), nullable=True),
    ),
    # Individual operations slower than --slow-ms.
    "events": _schema(
        _field("ts", TIMESTAMP),  # when the operation started
        _field("pid", pa.int32()),
        _field("tid", pa.int32()),  # 0 for block requests (completed in interrupt context)
        _field("comm", DICT_STRING),
        _field("role", DICT_STRING, nullable=True),
        _field("layer", DICT_STRING),
        _field("op", DICT_STRING),
        _field("path", DICT_STRING, nullable=True),  # unknown for some block requests
        _field("device", DICT_STRING, nullable=True),  # unknown for pipes and sockets
        _field("offset", pa.int64(), nullable=True),  # bytes into the file or device
        _field("bytes", pa.int64()),
        _field("latency_ns", NS),
    ),
    # Per thread per interval: where its time went (the four add up to the interval).
    "threads": _schema(
        _field("ts", TIMESTAMP),  # end of the interval
        _field("pid", pa.int32()),
        _field("tid", pa.int32()),
        _field("comm", DICT_STRING),
        _field("role", DICT_STRING, nullable=True),  # of its process
        _field("oncpu_ns", NS),
        _field("runnable_ns", NS),  # waiting for a CPU
        _field("sleep_ns", NS),  # interruptible sleep (S)
        _field("iowait_ns", NS),  # uninterruptible sleep (D)
        # Sleep (S and D) by who ended it: a DataLoader worker, the pin-memory thread, another
        # thread of the same process, anything else.
        _field("woken_by_worker_ns", NS),
        _field("woken_by_pin_ns", NS),
        _field("woken_by_own_ns", NS),
        _field("woken_by_other_ns", NS),
        # Memory reclaim the thread did itself (memory.bpf.c: direct reclaim, the host short of
        # memory; memcg reclaim, its memory cgroup at its limit), part of the four times above,
        # of it blocked (D: waiting for writeback or a read), and how many reclaims ended; null
        # in traces from before them.
        _field("reclaim_ns", NS, nullable=True),
        _field("reclaim_blocked_ns", NS, nullable=True),
        _field("reclaims", pa.int64(), nullable=True),
        # Blocked (D) inside page faults from user space (memory.bpf.c): a page read back from
        # a mapped file or from swap, a page or mmap lock; not in a reclaim (reclaim_ns); part
        # of iowait_ns, in that many sleeps. Null in traces from before them and on kernels
        # without the page_fault_user tracepoint (x86 has it).
        _field("fault_wait_ns", NS, nullable=True),
        _field("fault_sleeps", pa.int64(), nullable=True),
        # The read/write/fsync of a regular file the thread was in when the interval ended
        # (main threads of `main` processes only), its file and when it started: a syscall
        # lasting seconds is charged in the intervals it spans (tracer.core.diagnosis.split).
        _field("syscall_op", DICT_STRING, nullable=True),
        _field("syscall_path", DICT_STRING, nullable=True),
        _field("syscall_since", TIMESTAMP, nullable=True),
        _field("write_open_path", DICT_STRING, nullable=True),
        _field("write_open_ns", NS, nullable=True),
        # Its CUDA driver calls in the interval (uprobes on libcuda, tracer.live.cuda); null:
        # none ever (no driver library, or not a thread that calls it). gpu_wait_ns: in the
        # synchronisations (stream, context, event): waiting for its GPU's queued work.
        # device_copy_ns: in the synchronous copies and in the synchronisations that waited for
        # an async copy of at least 1 MiB (how PyTorch copies).
        _field("gpu_wait_ns", NS, nullable=True),
        _field("device_copy_ns", NS, nullable=True),
        _field("cuda_syncs", pa.int64(), nullable=True),  # synchronisation calls
        _field("cuda_copies", pa.int64(), nullable=True),  # copy calls, sync and async
        _field("cuda_launches", pa.int64(), nullable=True),  # kernel launches; null: not counted
        _field("copy_dtoh_bytes", pa.int64(), nullable=True),  # device to host
        _field("copy_htod_bytes", pa.int64(), nullable=True),  # host to device
        _field("copy_other_bytes", pa.int64(), nullable=True),  # device to device, unified
    ),
    # The training loop's time per interval, classified (tracer.core.diagnosis.split has the
    # rules).
    "loop": _schema(
        _field("ts", TIMESTAMP),  # end of the interval
        _field("pid", pa.int32()),  # the main process or rank; its main thread is the loop
        _field("rank", pa.int32(), nullable=True),  # its rank (torchrun, DDP); null for a main
        _field("interval_ns", NS),
        _field("data_wait_io_ns", NS),
        _field("data_wait_cpu_ns", NS),
        _field("data_wait_network_ns", NS),
        _field("sync_loading_ns", NS),
        _field("sync_writes_ns", NS),
        _field("checkpoint_ns", NS),
        _field("collective_wait_ns", NS, nullable=True),  # null in traces from before it
        # null in traces of schema version 2, whose compute_ns holds them
        _field("gpu_wait_ns", NS, nullable=True),
        _field("device_copy_ns", NS, nullable=True),
        _field("compute_ns", NS),  # from version 3, on the host only (not the two above)
        _field("other_ns", NS),
        _field("state", DICT_STRING),  # the largest of them
    ),
    # Per whole disk per interval, the columns of `iostat -x` (tracer.live.procfs has the formulas).
    "devices": _schema(
        _field("ts", TIMESTAMP),  # end of the interval
        _field("device", DICT_STRING),  # kernel name, e.g. "nvme0n1" (node_exporter's `device`)
        _field("r_s", pa.float64()),  # reads completed per second
        _field("w_s", pa.float64()),  # writes completed per second
        _field("rkb_s", pa.float64()),  # KiB read per second
        _field("wkb_s", pa.float64()),  # KiB written per second
        _field("r_await_ms", pa.float64()),  # mean time of a read (queue + service), ms
        _field("w_await_ms", pa.float64()),  # mean time of a write, ms
        _field("await_ms", pa.float64()),  # mean time of a read, write or discard, ms
        _field("aqu_sz", pa.float64()),  # mean number of requests in flight
        _field("util_pct", pa.float64()),  # percent of the interval with a request in flight
    ),
    # Per whole disk, op and user per interval: who used the disk, from the kernel's count of
    # every request (block.bpf.c's block_users), traced or not. The traced processes' rows are
    # per cgroup; the other processes' per (cgroup, name), at most MAX_DEVICE_USERS of them per
    # disk and op (by bytes), the others added up in a `rest` row.
    "device_users": _schema(
        _field("ts", TIMESTAMP),  # end of the interval
        _field("device", DICT_STRING),  # the disk, as in `devices`
        _field("op", DICT_STRING),  # read, write, flush, discard, other
        # traced: the traced processes; other: an untraced process (comm); kernel_thread: a
        # kernel thread started them for the cgroup (blk-throttle's dispatch, writeback), comm
        # names the untraced processes in that cgroup; rest: users past the bound, added up
        _field("who", DICT_STRING),
        _field("cgroup", DICT_STRING, nullable=True),  # path in its hierarchy; null: unknown
        _field("container_id", DICT_STRING, nullable=True),  # from the path (tracer.core.cgroup)
        _field("pod_uid", DICT_STRING, nullable=True),
        _field("comm", DICT_STRING, nullable=True),  # "dd", "4 x dd"; null for traced and rest
        _field("requests", pa.int64()),  # completed in the interval
        _field("bytes", pa.int64()),
        _field("service_ns", NS),  # issue -> complete, summed over the requests
    ),
    # Per traced process and taker per interval: who had the CPU while the process's threads
    # waited for one (sched.bpf.c's cpu_waits): a wait is charged to the task the CPU switched
    # from when the thread got it, for as long as that task last ran, the rest to `earlier`.
    # At most MAX_CPU_TAKERS takers per process (by wait), the others added up in a `rest` row.
    "cpu_waits": _schema(
        _field("ts", TIMESTAMP),  # end of the interval
        _field("pid", pa.int32()),  # the traced process whose threads waited
        # traced: a traced process (taker_pid); other: an untraced one; idle: the CPU was idle
        # (a wake-up's or a migration's latency); earlier: the waits' parts before their last
        # taker ran (whoever ran then); rest: takers past the bound, added up
        _field("who", DICT_STRING),
        _field("taker_pid", pa.int32(), nullable=True),  # its tgid; null: idle, earlier, rest
        _field("comm", DICT_STRING, nullable=True),  # the taker thread's name; null: earlier, rest
        _field("cgroup", DICT_STRING, nullable=True),  # the taker's cgroup (v2) path
        _field("container_id", DICT_STRING, nullable=True),  # from the path (tracer.core.cgroup)
        _field("pod_uid", DICT_STRING, nullable=True),
        _field("waits", pa.int64()),  # waits ended by the taker giving up the CPU (earlier: 0)
        _field("wait_ns", NS),  # runnable time of those waits charged to the taker, summed
    ),
    # Python stacks of traced threads, read from outside the process (tracer.live.stacks): a
    # row per frame of each sample, the innermost first (depth 0). A sample is (taken, tid).
    "stacks": _schema(
        _field("ts", TIMESTAMP),  # end of the interval the sample came in
        _field("taken", TIMESTAMP),  # when the reader was started on the process
        _field("pid", pa.int32()),
        _field("tid", pa.int32()),
        _field("role", DICT_STRING, nullable=True),  # of its process
        _field("reason", DICT_STRING),  # what it was taken for (tracer.core.stacks.REASONS)
        _field("depth", pa.int32()),  # 0: the innermost frame
        _field("file", DICT_STRING),  # the code's path, as the process sees it
        _field("line", pa.int32()),
        _field("function", DICT_STRING),
        _field("user", pa.bool_()),  # the innermost frame of the user's own code
        _field("text", pa.string(), nullable=True),  # that frame's source line, when readable
    ),
    # Host-wide per interval, the columns of `dstat -cdnm` (tracer.live.procfs has the definitions).
    "system": _schema(
        _field("ts", TIMESTAMP),  # end of the interval
        _field("cpu_user_pct", pa.float64()),  # user + nice + irq + softirq, as dstat's usr
        _field("cpu_sys_pct", pa.float64()),
        _field("cpu_iowait_pct", pa.float64()),
        _field("cpu_idle_pct", pa.float64()),
        _field("mem_used_bytes", pa.float64()),  # at the end of the interval
        _field("mem_cached_bytes", pa.float64()),  # page cache (meminfo Cached), at the end
        _field("net_rx_bytes_s", pa.float64()),  # all interfaces but lo, bonds and VLANs
        _field("net_tx_bytes_s", pa.float64()),
        _field("disk_read_bytes_s", pa.float64()),  # whole disks, stacked ones (dm, md) left out
        _field("disk_write_bytes_s", pa.float64()),
    ),
    # Per main process per interval: the memory its job may use, from its memory cgroup (v1 or
    # v2) and the host's MemAvailable (tracer.live.memory): what the page cache can hold of its
    # data set.
    "memory": _schema(
        _field("ts", TIMESTAMP),  # end of the interval
        _field("pid", pa.int32()),  # the main process
        _field("source", DICT_STRING),  # cgroup_v1 | cgroup_v2 | host (no memory cgroup found)
        _field("cgroup", DICT_STRING, nullable=True),  # its memory cgroup, e.g. /kubepods/pod1/c1
        # the smallest limit of that cgroup and those above it; null: no limit
        _field("limit_bytes", pa.int64(), nullable=True),
        _field("usage_bytes", pa.int64(), nullable=True),  # charged to it, page cache included
        _field("cache_bytes", pa.int64(), nullable=True),  # page cache charged to it
        _field("available_bytes", pa.int64()),  # the host's MemAvailable
        # Signs of memory pressure in the interval (tracer.live.memory); null at a process's
        # first row, when its cgroup changed, or where the kernel does not count them; null
        # in traces from before them.
        _field("majfaults", pa.int64(), nullable=True),  # the cgroup's major page faults
        _field("limit_hits", pa.int64(), nullable=True),  # charges that met its limit
        _field("swap_bytes", pa.int64(), nullable=True),  # its memory in swap, at the end
        _field("psi_source", DICT_STRING, nullable=True),  # cgroup_v2 | host: whose PSI
        _field("psi_memory_some_ns", NS, nullable=True),  # some task stalled on memory
        _field("psi_memory_full_ns", NS, nullable=True),  # all non-idle tasks stalled on it
        _field("psi_io_some_ns", NS, nullable=True),
        _field("psi_cpu_some_ns", NS, nullable=True),
    ),
    # Per interval per FUSE mount the traced processes read through (tracer.live.fuse): the file
    # system, the process that serves it and that process's activity in the interval, from /proc
    # and sock_diag (it is not traced); rows from the interval after the mount's first read.
    "fuse": _schema(
        _field("ts", TIMESTAMP),  # end of the interval
        _field("device", DICT_STRING),  # the mount's device, MAJ:MIN, as `files.device`
        _field("mount_point", DICT_STRING),  # as the first process that read through it sees it
        _field("fs_type", DICT_STRING),  # fuse.<subtype>, fuse, fuseblk
        _field("source", DICT_STRING),  # mountinfo's source: a bucket, a URL, a device
        _field("daemon_pid", pa.int32(), nullable=True),  # the process serving it; null: not found
        _field("daemon_comm", DICT_STRING, nullable=True),
        # how it was found: fdinfo (its /dev/fuse file's connection is the mount's), only_holder
        # (the one process holding /dev/fuse), cmdline (the one of them naming the mount point)
        _field("found_by", DICT_STRING, nullable=True),
        _field("cpu_ns", pa.int64(), nullable=True),  # the daemon's CPU time in the interval
        _field("disk_read_bytes", pa.int64(), nullable=True),  # brought from storage for it
        _field("disk_write_bytes", pa.int64(), nullable=True),
        # received by its TCP connections (sock_diag's tcp_info), and their mean smoothed RTT now
        _field("net_rx_bytes", pa.int64(), nullable=True),
        _field("rtt_us", pa.float64(), nullable=True),
        _field("peers", DICT_STRING, nullable=True),  # its TCP peers now, "addr:port, ..."
    ),
    # NVML utilisation samples (tracer.gpu.nvml): one row per GPU per sample, covering
    # (ts - sample_period_ns, ts]. When the driver's sample buffer is empty (an idle GPU empties it),
    # one row per poll from nvmlDeviceGetUtilizationRates stands for the time since the previous row.
    "gpu": _schema(
        _field("ts", TIMESTAMP),  # end of the sample period
        _field("gpu", pa.int32()),  # NVML device index
        _field("uuid", DICT_STRING),  # GPU-xxxxxxxx-...
        _field("name", DICT_STRING),  # e.g. "NVIDIA H100 80GB HBM3"
        _field("util_pct", pa.float64()),  # percent of the period a kernel was running
        _field("mem_util_pct", pa.float64(), nullable=True),  # device memory busy, read per poll
        _field("pcie_rx_bytes_s", pa.float64(), nullable=True),  # null where NVML does not support it
        _field("pcie_tx_bytes_s", pa.float64(), nullable=True),
        _field("sample_period_ns", NS),
    ),
    # Hard idle spans of a GPU (util <= 5 % for at least 2 consecutive samples) and what the training
    # loop did during them (tracer.gpu.idle.attribute), a row per part of a span: its start-up, then
    # where the loop's leading state changes. The <state>_frac are shares of the part that loop
    # intervals cover (they add up to 1 when coverage > 0).
    "gpu_idle": _schema(
        _field("start", TIMESTAMP),
        _field("end", TIMESTAMP),
        _field("duration_ns", NS),
        _field("gpu", pa.int32()),
        _field("pid", pa.int32(), nullable=True),  # the main process using that GPU; null: unknown
        _field("cause", DICT_STRING),  # "startup", the loop state with the largest share, "unknown"
        _field("data_wait_io_frac", pa.float64()),
        _field("data_wait_cpu_frac", pa.float64()),
        _field("data_wait_network_frac", pa.float64()),
        _field("sync_loading_frac", pa.float64()),
        _field("sync_writes_frac", pa.float64()),
        _field("checkpoint_frac", pa.float64()),
        _field("collective_wait_frac", pa.float64(), nullable=True),  # null: from before it
        _field("gpu_wait_frac", pa.float64(), nullable=True),  # null: from before version 3
        _field("device_copy_frac", pa.float64(), nullable=True),
        _field("compute_frac", pa.float64()),
        _field("other_frac", pa.float64()),
        _field("coverage", pa.float64()),  # share of the span covered by loop intervals
        _field("confidence", pa.float64()),  # cause's share x coverage
    ),
    # The verdicts of the diagnosis, each with its evidence and advice.
    "findings": _schema(
        _field("ts", TIMESTAMP),  # when the verdict was reached
        _field("start", TIMESTAMP),  # the span of the trace it covers
        _field("end", TIMESTAMP),
        _field("kind", DICT_STRING),  # sync_loading, dataloader_io_bound, ... (tracer.core.diagnosis.rules)
        _field("severity", pa.int32()),  # 0-100
        _field("pid", pa.int32(), nullable=True),  # the training process it is about
        _field("rank", pa.int32(), nullable=True),  # that process's rank (torchrun, DDP)
        _field("summary", pa.string()),  # one sentence in plain words, with the key numbers
        _field("evidence", pa.string()),  # JSON object: the numbers behind the verdict
        _field("advice", pa.string()),
    ),
}


def table_from_rows(name: str, rows: list[Mapping[str, object]]) -> pa.Table:
    """Build table `name` from `rows` with exactly its schema in `TABLES`.

    Each row maps column names to Python values: timestamps as int nanoseconds since the Unix epoch,
    durations as int nanoseconds, strings as `str`. A missing key, or None, is null; that is allowed
    only in nullable columns.

    Raises ValueError for an unknown table, an unknown column, a null in a required column, or a
    value of the wrong type, naming the table and column.
    """
    schema = TABLES.get(name)
    if schema is None:
        raise ValueError(f"unknown table {name!r}; tables: {', '.join(sorted(TABLES))}")
    known = set(schema.names)
    if not known.issuperset(set().union(*rows)):  # every column any row names, in one pass
        for i, row in enumerate(rows):
            unknown = row.keys() - known
            if unknown:
                raise ValueError(
                    f"table {name!r}, row {i}: unknown column(s) {', '.join(sorted(unknown))}; "
                    f"columns: {', '.join(schema.names)}"
                )
    arrays = []
    for field in schema:
        column = field.name  # (a pyarrow property: a new str at every access)
        values = _column(rows, column)
        if not field.nullable and None in values:
            i = values.index(None)
            raise ValueError(f"table {name!r}, row {i}: column {column!r} is required")
        try:
            arrays.append(pa.array(values, type=field.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as e:
            raise ValueError(f"table {name!r}, column {column!r}: {e}") from e
    return pa.Table.from_arrays(arrays, schema=schema)


def _column(rows: list[Mapping[str, object]], column: str) -> list[object]:
    """Each row's value of `column`, None where it has none."""
    try:
        return list(map(dict.get, rows, repeat(column)))  # dict rows: the loop runs in C
    except TypeError:  # a row that is another kind of mapping
        return [row.get(column) for row in rows]
