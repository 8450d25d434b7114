"""Every number the verdicts depend on, and the bounds on what the diagnosis keeps.

docs/diagnosis.md explains each threshold and names the rule (tracer/core/diagnosis/rules/)
that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Thresholds:
    """Every number the verdicts depend on, in one place (docs/diagnosis.md explains them)."""

    # Less training-loop time than this (all loops, after their start-ups) is judged not at
    # all: a target that exits right after the attach is no healthy job
    judge_min_ns: int = 1_000_000_000
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
    contended_share: float = 0.3  # others did more than this share of the job's disk's read bytes
    contended_min_bytes: int = 1 << 20  # ... when they read at least this much of it
    # cpu_contended: the loop's (or its workers') share of time runnable, times the share of the
    # job's waits that processes outside it had the CPU for, above this; that wait at least this
    # long. Measured on 2 CPUs: a job beside 4 spinners 0.49-0.58; alone 0 in most runs, and
    # 0.26-0.42 while other test runs loaded the host (docs/diagnosis.md)
    cpu_contended_share: float = 0.3
    cpu_contended_min_ns: int = 500_000_000
    # memory_pressure: the loop's share of its time in memory reclaim, or its share waiting for
    # batches times the workers' share of their busy time in reclaim, above this; the job's
    # reclaim at least this long (docs/diagnosis.md)
    memory_reclaim_share: float = 0.05
    memory_reclaim_min_ns: int = 200_000_000
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
    other_line_share: float = 0.10  # the summary says what `other` was from this share on
    # host_bound: a loop that calls the CUDA driver spends at least `host_share` of its time on
    # the host (`compute`) and at most `host_gpu_wait_share` waiting for its GPU, and (with
    # NVML) its GPU idles at least `host_gpu_idle_pct` % of the time
    host_share: float = 0.5
    host_gpu_wait_share: float = 0.2
    host_gpu_idle_pct: float = 30.0


THRESHOLDS = Thresholds()
MAX_INTERVALS = 3600
# Files an interval's reads keep by path, the others counting in their folder's entry, and
# folders, the others counting in their parent folder's entry (reads.nearest): an
# ImageNet-shaped job reads 1 000 class folders every interval, which kept unbounded took
# 250-460 KiB an interval (1.6 GiB for MAX_INTERVALS of them); bounded, about 27 KiB.
MAX_READ_PATHS = 32
MAX_READ_FOLDERS = 32
MAX_WRITTEN_FILES = 4096  # files whose bytes written so far are kept, checkpoints first
MAX_READ_AHEAD = 100_000  # files whose read-ahead pages are remembered (bounded memory)
MAX_PEERS = 8  # TCP peers named per main process
MAX_CPU_TAKERS = 8  # processes outside a job that had its CPUs, kept per interval and named
MAX_DISK_USERS = 8  # other users of a disk kept per interval and named in a finding
