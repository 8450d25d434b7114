"""Synthetic snapshots for the view tests and the live-view demo: a training job (main pid 1000)
with two DataLoader workers (1001, 1002) reading shards, the main process writing a checkpoint,
and a child (1003); every number is chosen so the panes' text can be checked by hand.

Interval 1 s. Per interval `i` (0-based) the workers read `100 + i` and `50` 1 MiB blocks.
"""

from __future__ import annotations

from tracer.core.diagnosis import Finding
from tracer.core.model import Snapshot
from tracer.core.units import slot_bounds_ns

T0 = 1_700_000_000_000_000_000  # 2023-11-14 22:13:20 UTC
SEC = 1_000_000_000
MIB = 1 << 20


def lat(pid: int, comm: str, role: str | None, layer: str, op: str, slot: int, count: int,
        nbytes: int, ts: int, target: str | None = None, device: str | None = None) -> dict:
    lo, hi = slot_bounds_ns(slot)
    return {"ts": ts, "pid": pid, "comm": comm, "role": role, "layer": layer, "op": op,
            "target": target, "device": device,
            "attribution": "direct" if layer.startswith("block") else None,
            "bucket_lo_ns": lo, "bucket_hi_ns": hi, "count": count, "bytes": nbytes}


def file_row(pid: int, role: str, path: str, op: str, ops: int, nbytes: int, lat_sum: int,
             lat_max: int, missed: int, ts: int, fs: str = "ext4") -> dict:
    return {"ts": ts, "pid": pid, "comm": "x", "role": role, "path": path, "path_source": "kernel",
            "fs_type": fs, "device": "259:0", "inode": hash(path) & 0xFFFF, "op": op, "ops": ops,
            "bytes": nbytes, "latency_sum_ns": lat_sum, "latency_max_ns": lat_max,
            "pages_missed": missed, "pages_dirtied": 0, "cache_hit_pct": None}


def thread(pid: int, tid: int, comm: str, role: str, oncpu: int, sleep: int, iowait: int,
           ts: int, by_worker: int = 0) -> dict:
    return {"ts": ts, "pid": pid, "tid": tid, "comm": comm, "role": role, "oncpu_ns": oncpu,
            "runnable_ns": 0, "sleep_ns": sleep, "iowait_ns": iowait,
            "woken_by_worker_ns": by_worker, "woken_by_pin_ns": 0, "woken_by_own_ns": 0,
            "woken_by_other_ns": 0}


def snapshot(i: int = 0, interval_ns: int = SEC) -> Snapshot:
    ts = T0 + (i + 1) * SEC
    w = "dataloader_worker"
    latency = [
        lat(1001, "pt_data_worker", w, "syscall", "read", 20, 100 + i, (100 + i) * MIB, ts, "file"),
        lat(1001, "pt_data_worker", w, "syscall", "read", 22, 2, 0, ts, "file"),
        lat(1001, "pt_data_worker", w, "syscall", "write", 12, 7, 7000, ts, "socket"),
        lat(1001, "pt_data_worker", w, "block", "read", 19, 100, 100 * MIB, ts, device="nvme0n1"),
        lat(1001, "pt_data_worker", w, "block_queue", "read", 10, 100, 100 * MIB, ts,
            device="nvme0n1"),
        lat(1002, "pt_data_worker", w, "syscall", "read", 20, 50, 50 * MIB, ts, "file"),
        lat(1002, "pt_data_worker", w, "block", "read", 18, 50, 50 * MIB, ts, device="nvme0n1"),
        lat(1000, "python", "main", "syscall", "read", 12, 5, 5 * 4096, ts, "file"),
        lat(1000, "python", "main", "syscall", "write", 15, 10, 10 * MIB, ts, "file"),
        lat(1000, "python", "main", "syscall", "fsync", 24, 1, 0, ts, "file"),
        lat(1000, "python", "main", "block", "write", 21, 10, 10 * MIB, ts, device="nvme0n1"),
        lat(1003, "sh", "child", "syscall", "read", 10, 3, 300, ts, "file"),
    ]
    files = [
        file_row(1001, w, "/data/train/shard-000.tar", "read", 102 + i, (100 + i) * MIB,
                 150_000_000, 4_000_000, 12_800, ts),
        file_row(1002, w, "/data/train/shard-001.tar", "read", 50, 50 * MIB, 80_000_000,
                 3_000_000, 0, ts),
        file_row(1000, "main", "/ckpt/model.pt", "write", 10, 10 * MIB, 30_000_000, 5_000_000,
                 0, ts),
        file_row(1000, "main", "/ckpt/model.pt", "fsync", 1, 0, 20_000_000, 20_000_000, 0, ts),
        file_row(1003, "child", "/etc/hosts", "read", 3, 300, 3_000, 1_500, 0, ts, fs="overlay"),
    ]
    threads = [
        thread(1000, 1000, "python", "main", 400_000_000, 600_000_000, 0, ts, 550_000_000),
        thread(1000, 1010, "pt_data_pin", "main", 10_000_000, 990_000_000, 0, ts),
        thread(1001, 1001, "pt_data_worker", w, 300_000_000, 100_000_000, 600_000_000, ts),
        thread(1002, 1002, "pt_data_worker", w, 500_000_000, 200_000_000, 300_000_000, ts),
        thread(1003, 1003, "sh", "child", 1_000_000, 999_000_000, 0, ts),
    ]
    devices = [
        {"ts": ts, "device": "sda", "r_s": 0.0, "w_s": 2.0, "rkb_s": 0.0, "wkb_s": 8.0,
         "r_await_ms": 0.0, "w_await_ms": 0.5, "await_ms": 0.5, "aqu_sz": 0.0, "util_pct": 0.1},
        {"ts": ts, "device": "nvme0n1", "r_s": 150.0, "w_s": 10.0, "rkb_s": 153600.0,
         "wkb_s": 10240.0, "r_await_ms": 0.61, "w_await_ms": 2.5, "await_ms": 0.73,
         "aqu_sz": 0.12, "util_pct": 93.5},
    ]
    system = {"ts": ts, "cpu_user_pct": 35.2, "cpu_sys_pct": 8.4, "cpu_iowait_pct": 21.6,
              "cpu_idle_pct": 34.8, "mem_used_bytes": 6.5 * (1 << 30),
              "mem_cached_bytes": 1.25 * (1 << 30), "net_rx_bytes_s": 1500.0,
              "net_tx_bytes_s": 0.0, "disk_read_bytes_s": 150.0 * MIB,
              "disk_write_bytes_s": 10.0 * MIB + 8192}
    return Snapshot(ts, interval_ns, latency, files, [], threads, devices, system)


def loop_rows(i: int = 0) -> list[dict]:
    ts = T0 + (i + 1) * SEC
    return [{"ts": ts, "pid": 1000, "interval_ns": SEC, "data_wait_io_ns": 450_000_000,
             "data_wait_cpu_ns": 100_000_000, "data_wait_network_ns": 0, "sync_loading_ns": 0,
             "sync_writes_ns": 0, "checkpoint_ns": 0,
             "compute_ns": 400_000_000, "other_ns": 50_000_000, "state": "data_wait_io"}]


def findings() -> list[Finding]:
    return [
        Finding("dataloader_io_bound", 45, 1000,
                "The training loop waited for batches 55 % of 1 s; the DataLoader workers were "
                "blocked on I/O 53 % of their busy time; p99 read latency 2.1 ms on /data/train "
                "(ext4).", {}),
        Finding("device_saturated", 30, None, "nvme0n1 was busy 94 % of the time.", {}),
    ]
