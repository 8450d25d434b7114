"""Each finding rule on its own, on hand-made windows: the finding where the window qualifies,
none where it does not (tests/test_diagnose.py judges whole diagnoses)."""

from __future__ import annotations

import pytest
from diagnosis_rows import (
    MAIN,
    MS,
    WORKER,
    S,
    add_interval,
    disk_use,
    file_row,
    kinds,
    run,
    socket_reads,
    thread,
)

from tracer.core.diagnosis import Diagnosis, Finding, Rank
from tracer.core.diagnosis import rules as registry
from tracer.core.diagnosis.rules import (
    checkpoint_stall,
    cold_cache,
    dataloader_cpu_bound,
    dataloader_io_bound,
    dataloader_network_bound,
    dataset_exceeds_cache,
    device_contended,
    device_saturated,
    not_io_bound,
    slow_filesystem,
    small_files,
    straggler_rank,
    sync_loading,
    sync_writes,
)
from tracer.core.diagnosis.rules.context import Context
from tracer.core.vocab import FINDING_KINDS


def judge(rule, d: Diagnosis, found: list[Finding] | None = None, pid: int | None = MAIN
          ) -> list[Finding]:
    """`rule` on the whole window of `d`; a loop rule (`pid`) on that main's training."""
    ivs = list(d.intervals)
    ctx = Context(d.window, d.thresholds, ivs, sorted({p for iv in ivs for p in iv.loops}),
                  list(found or []))
    return rule.judge(ctx.for_main(pid) if rule in registry.LOOP_RULES else ctx)


def io_finding(severity: int = 80) -> Finding:
    """What the storage rules need found before them: a loop that waits on its reads."""
    return Finding("dataloader_io_bound", severity, MAIN, "", {})


def workers(oncpu, iowait, sleep=0):
    return thread(WORKER, WORKER, "dataloader_worker", oncpu=oncpu * MS, iowait=iowait * MS,
                  sleep=sleep * MS)


def waiting_loop():
    """A loop that waits 800 ms a second for batches."""
    return thread(MAIN, MAIN, "main", oncpu=200 * MS, sleep=800 * MS, by_worker=800 * MS)


COMPUTE = ([thread(MAIN, MAIN, "main", oncpu=950 * MS, sleep=50 * MS)],
           [file_row(MAIN, "main", "read", 1 << 20, 5 * MS)])
IO_BOUND = ([waiting_loop(), workers(100, 900)],
            [file_row(WORKER, "dataloader_worker", "read", 4 << 20, 900 * MS)])
CPU_BOUND = ([waiting_loop(), workers(990, 10)],
             [file_row(WORKER, "dataloader_worker", "read", 4 << 20, 20 * MS)])


def test_every_kind_has_one_rule_in_the_registry():
    names = [rule.__name__.rsplit(".", 1)[1] for rule in registry.RULES]
    assert sorted(names) == sorted(FINDING_KINDS) and len(set(names)) == len(names)


def test_sync_loading():
    loading = ([thread(MAIN, MAIN, "main", oncpu=300 * MS, iowait=600 * MS, sleep=100 * MS)],
               [file_row(MAIN, "main", "read", 8 << 20, 800 * MS)])
    (f,) = judge(sync_loading, run([loading] * 5))
    assert (f.kind, f.severity, f.pid) == ("sync_loading", 80, MAIN)
    assert f.evidence["top_dir"] == "/data/train" and not f.evidence["dataloader_workers"]
    assert judge(sync_loading, run([COMPUTE] * 5)) == []


def test_dataloader_io_bound():
    (f,) = judge(dataloader_io_bound, run([IO_BOUND] * 5))
    assert f.severity == 72 and f.evidence["workers_blocked_pct"] == 90.0
    assert judge(dataloader_io_bound, run([CPU_BOUND] * 5)) == []


def test_dataloader_cpu_bound():
    (f,) = judge(dataloader_cpu_bound, run([CPU_BOUND] * 5))
    assert f.evidence["workers_oncpu_pct"] == 99.0 and "not on I/O" in f.summary
    assert judge(dataloader_cpu_bound, run([IO_BOUND] * 5)) == []


def test_dataloader_network_bound():
    d = Diagnosis()
    for i in range(1, 6):
        add_interval(d, i * S, S, [waiting_loop(), workers(100, 0, sleep=900)], [],
             [socket_reads(WORKER, "dataloader_worker", 9, 1 << 26, 9 << 20)],
             peers={MAIN: ["10.0.0.7:443"]})
    (f,) = judge(dataloader_network_bound, d)
    assert f.evidence["receive_bytes_per_s"] == 9 << 20 and f.evidence["peers"] == ["10.0.0.7:443"]
    assert judge(dataloader_network_bound, run([CPU_BOUND] * 5)) == []


def test_sync_writes():
    log = "/run/user/metrics.log"
    writing = ([thread(MAIN, MAIN, "main", oncpu=600 * MS, iowait=400 * MS)],
               [file_row(MAIN, "main", "write", 100, 1 * MS, path=log),
                file_row(MAIN, "main", "fsync", 0, 300 * MS, path=log)])
    (f,) = judge(sync_writes, run([writing] * 5))
    assert (f.severity, f.evidence["file"], f.evidence["fsyncs_per_s"]) == (30, log, 1.0)
    assert judge(sync_writes, run([COMPUTE] * 5)) == []


def test_checkpoint_stall_by_the_loop_and_in_the_background():
    ckpt = "/ckpt/model.pt"
    saving = ([thread(MAIN, MAIN, "main", oncpu=400 * MS, iowait=600 * MS)],
              [file_row(MAIN, "main", "write", 64 << 20, 300 * MS, path=ckpt),
               file_row(MAIN, "main", "fsync", 0, 300 * MS, path=ckpt)])
    (f,) = judge(checkpoint_stall, run([saving] * 3))
    assert f.severity == 60 and f.evidence["files"] == [ckpt] and "background" not in f.evidence
    first = ([thread(MAIN, MAIN, "main", oncpu=1000 * MS),
              thread(MAIN, MAIN + 1, "main", oncpu=200 * MS, iowait=800 * MS)],
             [file_row(MAIN, "main", "write", 16 << 20, 800 * MS, path=ckpt)])
    joining = ([thread(MAIN, MAIN, "main", oncpu=100 * MS, sleep=900 * MS),
                thread(MAIN, MAIN + 1, "main", iowait=900 * MS)], [])
    (f,) = judge(checkpoint_stall, run([first, joining, joining, joining]))
    assert f.evidence["background"] and f.evidence["saver"] == "thread"
    small = ([thread(MAIN, MAIN, "main", oncpu=500 * MS, iowait=500 * MS)],
             [file_row(MAIN, "main", "write", 1 << 20, 500 * MS, path="/tmp/log.txt")])
    assert judge(checkpoint_stall, run([small] * 3)) == []


def _reading(missed_pages: int, path: str = "/data/train/a.bin", fs: str = "ext4",
             reread: int = 0):
    """A computing loop whose worker reads 8 MiB, `missed_pages` of it from disk."""
    row = file_row(WORKER, "dataloader_worker", "read", 8 << 20, 10 * MS, path=path,
                   missed=missed_pages, fs=fs)
    row.update(reread_bytes=reread, reread_pages_missed=missed_pages if reread else 0)
    return [thread(MAIN, MAIN, "main", oncpu=900 * MS, sleep=100 * MS)], [row]


def test_cold_cache():
    cold, warm = _reading(2048), _reading(0)
    (f,) = judge(cold_cache, run([cold, cold] + [warm] * 6))
    assert f.evidence["early_miss_pct"] == [100.0, 100.0] and f.severity == 30
    assert judge(cold_cache, run([warm] * 8)) == []
    # later passes that miss again: no cold first pass to discount
    exceeds = Finding("dataset_exceeds_cache", 50, None, "", {})
    assert judge(cold_cache, run([cold, cold] + [warm] * 6), [exceeds]) == []


def test_dataset_exceeds_cache():
    first, again = _reading(2048), _reading(2048, reread=8 << 20)
    (f,) = judge(dataset_exceeds_cache, run([first] * 3 + [again] * 3), [io_finding()])
    assert f.evidence["reread_bytes"] == 24 << 20 and f.evidence["reread_miss_pct"] == 100.0
    assert f.severity == 80 and "the page cache" in f.summary
    # from the page cache the second time; or no loop waiting on its reads
    assert judge(dataset_exceeds_cache, run([first] * 3 + [_reading(0, reread=8 << 20)] * 3),
                 [io_finding()]) == []
    assert judge(dataset_exceeds_cache, run([first] * 3 + [again] * 3)) == []


def test_small_files():
    def many(size):
        return ([thread(MAIN, MAIN, "main", oncpu=S)],
                [file_row(WORKER, "dataloader_worker", "read", size, MS, path=f"/data/{k}.jpg")
                 for k in range(150)])
    (f,) = judge(small_files, run([many(64 << 10)]), [io_finding(60)])
    assert (f.severity, f.evidence["files"], f.evidence["median_bytes_per_file"]) == (
        30, 150, 64 << 10)
    assert judge(small_files, run([many(1 << 20)]), [io_finding()]) == []
    assert judge(small_files, run([many(64 << 10)])) == []


def test_slow_filesystem():
    (f,) = judge(slow_filesystem, run([_reading(0, fs="nfs4")] * 3), [io_finding()])
    assert f.evidence["read_bytes_by_fs"] == {"nfs4": 24 << 20} and "nfs4" in f.summary
    assert judge(slow_filesystem, run([_reading(0)] * 3), [io_finding()]) == []


def _with_disk(users, n=5, devices=(), latency=()):
    d = Diagnosis()
    for i in range(1, n + 1):
        add_interval(d, i * S, S, *IO_BOUND, latency, devices, device_users=users)
    return d


def test_device_contended():
    noisy = [disk_use("traced", 4 << 20, 4), disk_use("other", 12 << 20, 12, "dd")]
    (f,) = judge(device_contended, _with_disk(noisy), [io_finding()])
    assert f.evidence["other_bytes_pct"] == 75.0 and "dd in /jobs" in f.summary
    half = [disk_use("traced", 4 << 20, 4), disk_use("other", 4 << 20, 4, "dd")]
    (f,) = judge(device_contended, _with_disk(half), [io_finding()])
    assert f.evidence["other_bytes_pct"] == 50.0
    little = [disk_use("traced", 4 << 20, 4), disk_use("other", 1 << 20, 1, "dd")]  # 20 %
    assert judge(device_contended, _with_disk(little), [io_finding()]) == []


def test_device_saturated():
    def block(layer, lo_ns):
        return {"pid": 0, "role": None, "layer": layer, "op": "read", "target": None,
                "bucket_lo_ns": lo_ns, "bucket_hi_ns": 2 * lo_ns, "count": 10, "bytes": 0}
    latency = [block("block_queue", 1 << 24), block("block", 1 << 20)]  # queued 16x longer
    busy = _with_disk([], devices=[{"device": "vda", "util_pct": 98.0}], latency=latency)
    (f,) = judge(device_saturated, busy, [io_finding()])
    assert f.evidence["device"] == "vda" and f.evidence["util_pct"] == 98.0
    idle = _with_disk([], devices=[{"device": "vda", "util_pct": 40.0}], latency=latency)
    assert judge(device_saturated, idle, [io_finding()]) == []


def _ranks(slow_loading: bool, world: int = 2, traced=(0, 1)) -> Diagnosis:
    """Ranks of one job (pids 300, 301): each waits in gloo collectives, woken by its own
    threads, 600 ms a second; with `slow_loading`, rank 1 reads its data itself instead."""
    d = Diagnosis()
    ranks = {300 + r: Rank(r, world, 299) for r in traced}
    for i in range(1, 6):
        threads = []
        for r in traced:
            pid = 300 + r
            collective = {**thread(pid, pid + 50, "rank"), "comm": "gloo_tcp_loop"}
            if slow_loading and r == 1:
                loop = thread(pid, pid, "rank", oncpu=300 * MS, iowait=700 * MS)
            else:
                loop = {**thread(pid, pid, "rank", oncpu=400 * MS, sleep=600 * MS),
                        "woken_by_own_ns": 600 * MS}
            threads += [{**loop, "comm": "python"}, collective]
        files = [file_row(301, "rank", "read", 8 << 20, 700 * MS)] if slow_loading else []
        add_interval(d, i * S, S, threads, files, owner={p: p for p in ranks}, ranks=ranks)
    return d


def test_straggler_rank():
    d = _ranks(slow_loading=True)
    found = judge(sync_loading, d, pid=301)
    (f,) = judge(straggler_rank, d, found, pid=None)
    assert (f.rank, f.pid, f.evidence["cause"], f.evidence["cause_finding"]) == (
        1, 301, "sync_loading", "sync_loading")
    assert f.evidence["collective_wait_pct_by_rank"] == {"0": 60.0, "1": 0.0}
    assert judge(straggler_rank, _ranks(slow_loading=False), pid=None) == []
    # one rank traced of two, waiting: for a rank not traced
    (f,) = judge(straggler_rank, _ranks(slow_loading=False, traced=(0,)), pid=None)
    assert f.evidence["rank"] is None and f.evidence["traced_rank"] == 0


def test_not_io_bound():
    (f,) = judge(not_io_bound, run([COMPUTE] * 5))
    assert f.severity == 5 and f.evidence["loop_shares_pct"]["compute"] == 95.0
    assert judge(not_io_bound, run([COMPUTE] * 5), [io_finding()]) == []


@pytest.mark.parametrize("window", [[IO_BOUND] * 5, [CPU_BOUND] * 5, [COMPUTE] * 5])
def test_the_registry_says_the_rules_in_order(window):
    """The diagnosis's findings are the registry's, sorted by severity and stable: loop rules
    per main in registry order, then the window's."""
    d = run(window)
    ivs = list(d.intervals)
    out = registry.judge(Context(d.window, d.thresholds, ivs, [MAIN]))
    assert kinds(d.findings()) == kinds(sorted(out, key=lambda f: -f.severity))
    order = [r.__name__.rsplit(".", 1)[1] for r in registry.RULES]
    assert [order.index(k) for k in kinds(out)] == sorted(order.index(k) for k in kinds(out))
