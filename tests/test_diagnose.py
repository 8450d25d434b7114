"""The verdicts on hand-made interval rows (the same dicts the trace stores): pure logic."""

from __future__ import annotations

import json

import pytest
from diagnosis_rows import (
    MAIN,
    MS,
    OWNER,
    WORKER,
    S,
    add_interval,
    disk_use,
    file_row,
    kinds,
    socket_reads,
    thread,
)
from diagnosis_rows import run as run_diagnosis

from tracer.core.diagnosis import IO_KINDS, Diagnosis
from tracer.core.diagnosis.thresholds import MAX_WRITTEN_FILES
from tracer.core.vocab import LOOP_STATES
from tracer.render.findings import background_lines, other_lines, startup_line, startup_lines


def run(intervals, **kw) -> list:
    return run_diagnosis(intervals, **kw).findings()


def test_sync_loading_when_the_loop_reads_itself():
    iv = ([thread(MAIN, MAIN, "main", oncpu=300 * MS, iowait=600 * MS, sleep=100 * MS)],
          [file_row(MAIN, "main", "read", 8 << 20, 800 * MS)])
    f = run([iv] * 5)
    assert kinds(f)[0] == "sync_loading" and f[0].severity == 80
    assert json.loads(f[0].row(0)["evidence"])["loop_shares_pct"]["sync_loading"] == 80.0
    assert "num_workers" in f[0].advice


def test_dataloader_io_bound_when_workers_are_blocked():
    iv = ([thread(MAIN, MAIN, "main", oncpu=200 * MS, sleep=800 * MS, by_worker=800 * MS),
           thread(WORKER, WORKER, "dataloader_worker", oncpu=100 * MS, iowait=900 * MS)],
          [file_row(WORKER, "dataloader_worker", "read", 4 << 20, 900 * MS)])
    f = run([iv] * 5)
    assert kinds(f)[0] == "dataloader_io_bound"
    assert f[0].severity == 72  # 800 ms of waiting x 90 % of the workers' time blocked


def test_cpu_bound_workers_are_not_an_io_finding():
    iv = ([thread(MAIN, MAIN, "main", oncpu=200 * MS, sleep=800 * MS, by_pin=800 * MS),
           thread(WORKER, WORKER, "dataloader_worker", oncpu=990 * MS, iowait=10 * MS),
           thread(WORKER + 1, WORKER + 1, "dataloader_worker", oncpu=1000 * MS)],
          [file_row(WORKER, "dataloader_worker", "read", 4 << 20, 20 * MS)])
    f = run([iv] * 5)
    assert kinds(f)[0] == "dataloader_cpu_bound"
    assert not set(kinds(f)) & set(IO_KINDS)
    assert "not_io_bound" in kinds(f)


def test_healthy_compute_bound_job_gets_no_io_finding():
    iv = ([thread(MAIN, MAIN, "main", oncpu=950 * MS, sleep=50 * MS, by_pin=30 * MS)],
          [file_row(MAIN, "main", "read", 1 << 20, 5 * MS)])
    assert kinds(run([iv] * 10)) == ["not_io_bound"]


def test_less_than_a_second_of_training_is_not_judged():
    """A target that exits right after the attach: no verdict from 0.6 s, neither
    `not_io_bound` nor one its few reads would give."""
    waits = ([thread(MAIN, MAIN, "main", oncpu=100 * MS, sleep=500 * MS, by_worker=500 * MS),
              thread(WORKER, WORKER, "dataloader_worker", iowait=600 * MS)],
             [file_row(WORKER, "dataloader_worker", "read", 1 << 20, 600 * MS)])
    d = Diagnosis()
    add_interval(d, S, 600 * MS, *waits)
    assert d.findings() == []
    add_interval(d, 2 * S, 600 * MS, *waits)  # 1.2 s: judged
    assert kinds(d.findings())[0] == "dataloader_io_bound"


def test_checkpoint_stall_needs_a_large_file():
    small = ([thread(MAIN, MAIN, "main", oncpu=500 * MS, iowait=500 * MS)],
             [file_row(MAIN, "main", "write", 1 << 20, 500 * MS, path="/tmp/log.txt")])
    assert "checkpoint_stall" not in kinds(run([small] * 3))
    big = ([thread(MAIN, MAIN, "main", oncpu=400 * MS, iowait=600 * MS)],
           [file_row(MAIN, "main", "write", 64 << 20, 300 * MS, path="/ckpt/model.pt"),
            file_row(MAIN, "main", "fsync", 0, 300 * MS, path="/ckpt/model.pt")])
    f = run([big] * 3)
    assert kinds(f)[0] == "checkpoint_stall" and f[0].severity == 60
    assert json.loads(f[0].row(0)["evidence"])["files"] == ["/ckpt/model.pt"]


def test_small_files_written_are_forgotten_past_a_bound_checkpoints_are_not():
    """A DataLoader makes a few dozen semaphores in /dev/shm an epoch: what is kept of the files
    written stays bounded, and a checkpoint written little by little still adds up."""
    ckpt = "/ckpt/model.pt"
    d = Diagnosis()
    piece = file_row(MAIN, "main", "write", 8 << 20, MS, path=ckpt)  # 64 MiB in 8 intervals
    for i in range(1, 9):
        sems = [file_row(MAIN, "main", "write", 32, MS, path=f"/dev/shm/sem.{i}-{k}")
                for k in range(MAX_WRITTEN_FILES // 4)]
        add_interval(d, i * S, S, [thread(MAIN, MAIN, "main", oncpu=S)], [piece, *sems], [],
                     [], OWNER)
        assert len(d.written_total) <= MAX_WRITTEN_FILES + 1
        assert f"/dev/shm/sem.{i}-0" in {path for _, path in d.written_total}  # written now
    assert d.written_total[(MAIN, ckpt)] == 64 << 20


def test_cold_then_warm_reads_are_cold_cache():
    def iv(missed_pages):
        return ([thread(MAIN, MAIN, "main", oncpu=900 * MS, sleep=100 * MS)],
                [file_row(WORKER, "dataloader_worker", "read", 8 << 20, 10 * MS,
                          missed=missed_pages)])
    cold, warm = iv(2048), iv(0)  # 8 MiB read: all of it from disk, then none
    assert "cold_cache" in kinds(run([cold, cold, warm, warm, warm, warm, warm, warm]))
    assert "cold_cache" not in kinds(run([warm] * 8))
    # A library's pages faulted in through its mapping (a row with no read; traces of the
    # cold_cache scenario show torch's at exit) are no read's miss: the interval stays warm.
    fault = {**file_row(MAIN, "main", "read", 0, 0, path="/venv/torch/lib/libtorch_cpu.so",
                        missed=2048), "ops": 0}
    exiting = (warm[0], [*warm[1], fault])
    assert "cold_cache" in kinds(run([cold, cold, warm, warm, warm, warm, warm, exiting]))
    assert "cold_cache" not in kinds(run([cold, cold, warm, warm, warm, warm, warm, iv(1024)]))


def _passes(first: int, again: int, missed_again: int, **kw):
    """An I/O-bound job: `first` intervals of a first pass over /data/train, then `again` of a
    later pass whose 8 MiB per interval missed `missed_again` pages."""
    def iv(reread, missed):
        return ([thread(MAIN, MAIN, "main", oncpu=200 * MS, sleep=800 * MS, by_worker=800 * MS),
                 thread(WORKER, WORKER, "dataloader_worker", oncpu=100 * MS, iowait=900 * MS)],
                [{**file_row(WORKER, "dataloader_worker", "read", 8 << 20, 900 * MS,
                             missed=missed), "reread_bytes": reread,
                  "reread_pages_missed": missed if reread else 0}])
    memory = {"ts": 0, "pid": MAIN, "source": "cgroup_v1", "cgroup": "/job",
              "limit_bytes": 40 << 20, "usage_bytes": 40 << 20, "cache_bytes": 24 << 20,
              "available_bytes": 8 << 30, **kw}
    d = Diagnosis()
    for i, (threads, files) in enumerate([iv(0, 2048)] * first + [iv(8 << 20, missed_again)]
                                         * again, start=1):
        add_interval(d, i * S, S, threads, files, [], [], OWNER, [memory])
    return d.findings()


def test_later_passes_that_miss_again_are_dataset_exceeds_cache():
    f = _passes(6, 6, 2048 * 9 // 10)  # the second pass: 90 % from disk again
    assert kinds(f)[:2] == ["dataloader_io_bound", "dataset_exceeds_cache"]
    assert "cold_cache" not in kinds(f)
    exceeds = f[1]
    assert exceeds.severity == round(f[0].severity * 0.9)
    ev = json.loads(exceeds.row(0)["evidence"])
    assert (ev["top_dir"], ev["first_pass_bytes"], ev["reread_bytes"]) == (
        "/data/train", 48 << 20, 48 << 20)
    assert ev["reread_miss_pct"] == 90.0 and ev["limit_bytes"] == ev["usage_bytes"] == 40 << 20
    assert ("48.0 MiB read in a first pass" in exceeds.summary
            and "the 40.0 MiB that the job's memory cgroup /job allows" in exceeds.summary
            and "it kept 24.0 MiB as page cache" in exceeds.summary
            and "90 % of the 48.0 MiB read again missed" in exceeds.summary)
    assert "NVMe" in exceeds.advice
    # without a limit, the memory the host has left
    host = _passes(6, 6, 2048, limit_bytes=None, source="host", cgroup=None, cache_bytes=None)
    summary = next(x.summary for x in host if x.kind == "dataset_exceeds_cache")
    assert "(8.0 GiB available on the host)" in summary


def test_later_passes_from_the_page_cache_are_no_dataset_exceeds_cache():
    f = _passes(6, 6, 0)
    assert "dataset_exceeds_cache" not in kinds(f)
    assert "cold_cache" in kinds(f)  # a first pass that warmed the cache
    assert "dataset_exceeds_cache" not in kinds(_passes(6, 6, 2048 * 4 // 10))  # 40 %: below
    assert "dataset_exceeds_cache" not in kinds(_passes(12, 1, 2048))  # 8 MiB read again: few


def test_window_only_looks_at_recent_intervals():
    io = ([thread(MAIN, MAIN, "main", oncpu=100 * MS, iowait=900 * MS)],
          [file_row(MAIN, "main", "read", 8 << 20, 900 * MS)])
    calm = ([thread(MAIN, MAIN, "main", oncpu=1000 * MS)], [])
    d = Diagnosis()
    for i, iv in enumerate([io] * 20 + [calm] * 40, start=1):
        add_interval(d, i * S, S, *iv, [], [], OWNER)
    assert "sync_loading" in kinds(d.findings())  # 18 of 60 s: 30 %
    assert kinds(d.findings(window_s=30)) == ["not_io_bound"]


def test_loop_rows_add_up_to_the_thread_time():
    d = Diagnosis()
    rows = add_interval(d, S, S, [thread(MAIN, MAIN, "main", oncpu=300 * MS, runnable=100 * MS,
                               sleep=600 * MS, by_worker=400 * MS, by_other=200 * MS),
                        thread(WORKER, WORKER, "dataloader_worker", oncpu=500 * MS,
                               iowait=500 * MS)],
                 [file_row(MAIN, "main", "read", 4096, 100 * MS)], [], [], OWNER)
    (row,) = rows
    assert sum(row[f"{s}_ns"] for s in LOOP_STATES) == S
    assert (row["sync_loading_ns"], row["data_wait_io_ns"], row["data_wait_cpu_ns"]) == (
        100 * MS, 200 * MS, 200 * MS)
    assert row["compute_ns"] == 300 * MS and row["state"] == "compute"


def _checkpoint_split(fsync_row_at: int) -> list[int]:
    """A 2.2 s fsync of a checkpoint from 0.5 s to 2.7 s, after 0.1 s of writes: the loop's
    `threads` rows say it is in the fsync at the ends of intervals 1 and 2; the `files` row
    that counts the fsync (when it returned) comes in interval `fsync_row_at`."""
    d = Diagnosis()
    ckpt = "/ckpt/model.pt"
    in_fsync = {"syscall_op": "fsync", "syscall_path": ckpt, "syscall_since": S // 2}
    out = []
    for i in range(1, 6):
        th = thread(MAIN, MAIN, "main", oncpu=100 * MS, iowait=900 * MS)
        if i <= 2:
            th.update(in_fsync)
        files = []
        if i == 1:
            files.append(file_row(MAIN, "main", "write", 64 << 20, 100 * MS, path=ckpt))
        if i == fsync_row_at:
            files.append(file_row(MAIN, "main", "fsync", 0, 2200 * MS, path=ckpt))
        (row,) = add_interval(d, i * S, S, [th], files, [], [], OWNER)
        out.append(row["checkpoint_ns"])
    return out


def test_a_long_fsync_counts_in_the_intervals_it_spans():
    # 0.1 s of writes + 0.5 s of fsync, 1 s of fsync, the last 0.7 s: as the time passed
    assert _checkpoint_split(3) == [600 * MS, 1000 * MS, 700 * MS, 0, 0]
    # the fsync returned after its files were read: counted once all the same
    split = _checkpoint_split(4)
    assert split[:2] == [600 * MS, 1000 * MS] and sum(split) == 2300 * MS


def test_a_syscall_in_flight_on_a_small_file_is_not_a_checkpoint():
    d = Diagnosis()
    th = thread(MAIN, MAIN, "main", oncpu=100 * MS, iowait=900 * MS)
    th.update({"syscall_op": "fsync", "syscall_path": "/tmp/log.txt", "syscall_since": 0})
    (row,) = add_interval(d, S, S, [th], [file_row(MAIN, "main", "write", 1 << 20, 1 * MS,
                                          path="/tmp/log.txt")], [], [], OWNER)
    assert row["checkpoint_ns"] == 0


def lib_row(pid, role, i, nbytes=4096, missed=0):
    return file_row(pid, role, "read", nbytes, 2 * MS, missed=missed,
                    path=f"/venv/lib/python3.11/site-packages/torch/mod{i}.py")


def run_launched(intervals) -> Diagnosis:
    return run_diagnosis(intervals, startup=True)


def test_library_files_are_not_the_data_set():
    # The interpreter's imports (thousands of small .py files) beside workers reading 1 MiB
    # samples: the data set is the samples, so no small_files.
    imports = [lib_row(MAIN, "main", i) for i in range(2000)]
    io = ([thread(MAIN, MAIN, "main", oncpu=100 * MS, sleep=900 * MS, by_worker=900 * MS),
           thread(WORKER, WORKER, "dataloader_worker", oncpu=100 * MS, iowait=900 * MS)],
          [file_row(WORKER, "dataloader_worker", "read", 1 << 20, 900 * MS,
                    path=f"/data/train/{i}.bin") for i in range(4)])
    f = run([(io[0], io[1] + imports)] + [io] * 60)
    assert kinds(f)[0] == "dataloader_io_bound"
    assert "small_files" not in kinds(f)


def test_start_up_is_not_judged():
    # Launch mode: 6 s of imports, the loop blocked on reading site-packages, then 6 s of
    # CPU-bound workers. Judged on the imports, the job would be sync_loading.
    importing = ([thread(MAIN, MAIN, "main", oncpu=300 * MS, iowait=700 * MS)],
                 [lib_row(MAIN, "main", i, missed=1) for i in range(300)])
    for row in importing[1]:
        row["latency_sum_ns"] = 700 * MS // 300
    training = ([thread(MAIN, MAIN, "main", oncpu=200 * MS, sleep=800 * MS, by_worker=800 * MS),
                 thread(WORKER, WORKER, "dataloader_worker", oncpu=1000 * MS)],
                [file_row(WORKER, "dataloader_worker", "read", 1 << 20, 5 * MS)])
    d = run_launched([importing] * 6 + [training] * 6)
    f = d.findings()
    assert kinds(f)[0] == "dataloader_cpu_bound", kinds(f)
    assert not set(kinds(f)) & set(IO_KINDS)
    (s,) = d.startups()
    assert round(s.seconds) == 6 and s.site_packages == 300 and s.iowait_ns == 6 * 700 * MS
    line = startup_line(s)
    assert "its first DataLoader worker started" in line and "site-packages" in line
    assert startup_lines(d)[1] == startup_line(s)
    # Attached to a running job, nothing is start-up: the imports are judged.
    assert "sync_loading" in kinds(run([importing] * 6 + [training] * 6))


def test_start_up_without_workers_ends_at_the_first_data_reads():
    importing = ([thread(MAIN, MAIN, "main", oncpu=1000 * MS)],
                 [lib_row(MAIN, "main", i) for i in range(100)]
                 + [file_row(MAIN, "main", "read", 500, 1 * MS, path="/work/config.yaml")])
    loading = ([thread(MAIN, MAIN, "main", oncpu=300 * MS, iowait=700 * MS)],
               [file_row(MAIN, "main", "read", 1 << 20, 175 * MS, path=f"/data/{i}.bin")
                for i in range(4)])
    d = run_launched([importing] * 4 + [loading] * 4)
    assert kinds(d.findings())[0] == "sync_loading"
    assert d.findings()[0].evidence["loop_shares_pct"]["sync_loading"] == 70.0  # of 4 s, not 8
    (s,) = d.startups()
    assert "started reading its data set" in s.until and round(s.seconds) == 4
    assert startup_lines(d) == []  # 4 s is not long


def test_cold_cache_share_of_bytes_is_never_above_100_pct():
    # Readahead brings more pages than a read asks for, and a read still in progress at the
    # end of an interval has its pages missed there and its bytes in the next one.
    def iv(files):
        return ([thread(MAIN, MAIN, "main", oncpu=900 * MS, sleep=100 * MS)], files)

    def sample(i, nbytes, missed):
        return file_row(WORKER, "dataloader_worker", "read", nbytes, 10 * MS, missed=missed,
                        path=f"/data/{i}.bin")
    first = iv([sample(0, 1 << 20, 1024), sample(1, 0, 256)])  # 4 MiB read ahead; 1 MiB pending
    second = iv([sample(0, 3 << 20, 0), sample(1, 1 << 20, 0), sample(2, 2 << 20, 512)])
    warm = iv([sample(i, 1 << 20, 0) for i in range(3)])
    f = run([first, second] + [warm] * 6)
    cold = next(x for x in f if x.kind == "cold_cache")
    assert cold.evidence["early_miss_pct"] == [100.0, 100.0]


def test_p99_stays_within_the_slowest_read_seen():
    # Four reads of 2.53 s share the log2 bucket [2.15 s, 4.29 s): interpolated, p99 would be
    # 4.23 s; the files rows know that the slowest took 2.53 s.
    slow = 2_530_000_000
    bucket = {"pid": MAIN, "role": "main", "layer": "syscall", "op": "read", "target": "file",
              "bucket_lo_ns": 1 << 31, "count": 4}
    d = Diagnosis()
    for i in range(1, 4):
        add_interval(d, i * S, S, [thread(MAIN, MAIN, "main", oncpu=100 * MS, iowait=900 * MS)],
              [{**file_row(MAIN, "main", "read", 4 << 20, 4 * slow), "ops": 4,
                "latency_max_ns": slow}], [bucket], [], OWNER)
    (f,) = [x for x in d.findings() if x.kind == "sync_loading"]
    assert f.evidence["p99_read_ns"] == slow and "2.53 s" in f.summary


def test_workers_asleep_in_socket_reads_are_a_network_wait():
    """A worker asleep in recv is neither blocked nor on CPU: its socket reads' time (9 reads
    in the 64-128 ms slot: 864 ms) splits the loop's wait with its 100 ms on CPU."""
    d = Diagnosis()
    peers = [["10.0.0.7:443"], ["10.0.0.7:443", "10.0.0.8:443"]]  # each named once
    for i in range(1, 6):
        add_interval(d, i * S, S, [thread(MAIN, MAIN, "main", oncpu=200 * MS, sleep=800 * MS,
                                  by_worker=800 * MS),
                           thread(WORKER, WORKER, "dataloader_worker", oncpu=100 * MS,
                                  sleep=900 * MS)],
             [], [socket_reads(WORKER, "dataloader_worker", 9, 1 << 26, 9 << 20)], [], OWNER,
             peers={MAIN: peers[i - 1]} if i <= 2 else None)
    row = d.intervals[-1].loops[MAIN].row()
    net = round(800 * MS * 864 * (1 << 20) / (864 * (1 << 20) + 100 * MS))
    assert (row["data_wait_network_ns"], row["data_wait_cpu_ns"]) == (net, 800 * MS - net)
    f = d.findings()
    assert kinds(f)[0] == "dataloader_network_bound"
    assert not {"dataloader_cpu_bound", "not_io_bound"} & set(kinds(f))
    ev = json.loads(f[0].row(0)["evidence"])
    assert (ev["socket_reads"], ev["bytes_received"], ev["receive_bytes_per_s"]) == (
        45, 45 << 20, 9 << 20)
    assert ev["peers"] == ["10.0.0.7:443", "10.0.0.8:443"]
    assert "received from 10.0.0.7:443, 10.0.0.8:443," in f[0].summary


def test_the_loops_own_small_writes_are_sync_writes_not_checkpoints():
    log = "/run/user/metrics.log"
    iv = ([thread(MAIN, MAIN, "main", oncpu=600 * MS, iowait=400 * MS)],
          [file_row(MAIN, "main", "write", 100, 1 * MS, path=log),
           file_row(MAIN, "main", "fsync", 0, 300 * MS, path=log)])
    f = run([iv] * 5)
    assert kinds(f)[0] == "sync_writes" and f[0].severity == 30
    assert "checkpoint_stall" not in kinds(f)
    ev = json.loads(f[0].row(0)["evidence"])
    assert (ev["file"], ev["fsyncs_per_s"], ev["fsync_mean_ns"]) == (log, 1.0, 300 * MS)


def test_writes_of_a_thread_that_logs_in_the_background_are_not_the_loops():
    """The process's fsyncs go to the loop in proportion to its blocked (D) time: here the
    logging thread was the one blocked."""
    log = "/run/user/metrics.log"
    iv = ([thread(MAIN, MAIN, "main", oncpu=1000 * MS),
           thread(MAIN, MAIN + 1, "main", sleep=700 * MS, iowait=300 * MS)],
          [file_row(MAIN, "main", "fsync", 0, 300 * MS, path=log)])
    assert kinds(run([iv] * 5)) == ["not_io_bound"]


def test_a_background_saver_is_charged_for_the_loops_wait_only():
    """A saver thread writes a checkpoint (16 MiB, then an fsync blocked 900 ms a second) while
    the loop sleeps in a join that no worker ends: `checkpoint`, said to be a background save;
    its write time is the saver's, not the loop's."""
    ckpt = "/ckpt/step-100.pt"
    first = ([thread(MAIN, MAIN, "main", oncpu=1000 * MS),
              thread(MAIN, MAIN + 1, "main", oncpu=200 * MS, iowait=800 * MS)],
             [file_row(MAIN, "main", "write", 16 << 20, 800 * MS, path=ckpt)])
    wait = ([thread(MAIN, MAIN, "main", oncpu=100 * MS, sleep=900 * MS),
             thread(MAIN, MAIN + 1, "main", iowait=900 * MS)], [])
    d = Diagnosis()
    for i, (threads, files) in enumerate([first, wait, wait, wait], start=1):
        add_interval(d, i * S, S, threads, files, [], [], OWNER)
    assert [iv.loops[MAIN].ns["checkpoint"] for iv in d.intervals] == [0] + [900 * MS] * 3
    f = d.findings()
    assert kinds(f)[0] == "checkpoint_stall"
    ev = json.loads(f[0].row(0)["evidence"])
    assert ev["background"] and ev["saver"] == "thread" and ev["loop_waited_ns"] == 2700 * MS
    assert ev["bytes_written"] == 16 << 20


def test_a_background_save_the_loop_does_not_wait_for_is_a_line_not_a_finding():
    ckpt = "/ckpt/step-100.pt"
    child = {MAIN: MAIN, WORKER: MAIN, 300: MAIN}
    d = Diagnosis()
    for i in range(1, 6):
        add_interval(d, i * S, S, [thread(MAIN, MAIN, "main", oncpu=950 * MS, sleep=50 * MS),
                         thread(300, 300, "child", oncpu=100 * MS, iowait=900 * MS)],
              [file_row(300, "child", "write", 16 << 20, 900 * MS, path=ckpt)] if i == 1 else [],
              [], [], child)
    f = d.findings()
    assert kinds(f) == ["not_io_bound"]
    [line] = background_lines(d)[1:]
    assert line.startswith(f"Checkpoint written in the background by pid {MAIN}'s child process")
    assert line.endswith("the loop waited 5 % of its time.")


def test_other_is_said_in_words():
    """`other`: 200 ms runnable, 200 ms asleep woken by timers, of 1 s a second."""
    iv = ([thread(MAIN, MAIN, "main", oncpu=600 * MS, runnable=200 * MS, sleep=200 * MS,
                  by_other=200 * MS)], [])
    d = Diagnosis()
    for i in range(1, 4):
        add_interval(d, i * S, S, *iv, [], [], OWNER)
    assert other_lines(d)[1:] == [
        f"The loop of pid {MAIN} spent 40 % of its time in `other`: runnable, waiting for a CPU "
        "50 %, asleep, woken by timers or other processes 50 %."]


def test_a_long_sleep_is_no_data_wait_while_the_workers_do_nothing():
    """Attached while the loop sleeps in a join of a save already under way: its sleep ends in
    no interval, so the last intervals' wake-ups (by workers) would call it a data wait; but
    the workers do nothing meanwhile, so nothing of it can be waiting for them."""
    batches = ([thread(MAIN, MAIN, "main", oncpu=900 * MS, sleep=100 * MS, by_worker=100 * MS),
                thread(WORKER, WORKER, "dataloader_worker", oncpu=700 * MS, sleep=300 * MS)], [])
    joining = ([thread(MAIN, MAIN, "main", sleep=1000 * MS),
                thread(MAIN, MAIN + 1, "main", iowait=1000 * MS),  # the saver, in D
                thread(WORKER, WORKER, "dataloader_worker", sleep=1000 * MS)], [])
    busy = ([thread(MAIN, MAIN, "main", sleep=1000 * MS),
             thread(WORKER, WORKER, "dataloader_worker", oncpu=300 * MS, sleep=700 * MS)], [])
    d = Diagnosis()
    rows = [add_interval(d, i * S, S, *iv, [], [], OWNER)[0]
            for i, iv in enumerate([batches] * 3 + [joining] * 3 + [busy], start=1)]
    assert [r["data_wait_cpu_ns"] + r["data_wait_io_ns"] for r in rows[3:6]] == [0, 0, 0]
    assert all(r["other_ns"] == S for r in rows[3:6])
    # a worker that works while the loop sleeps: that much of the sleep may be the wait
    assert rows[6]["data_wait_cpu_ns"] == 300 * MS
    assert kinds(d.findings()) == ["not_io_bound"]  # (3 s of data wait, without the cap)


def test_an_intervals_reads_of_a_thousand_folders_stay_bounded_and_add_up():
    """An ImageNet-shaped interval: 200 files of their own and 1 000 class folders' rows. What
    the diagnosis keeps of it is bounded (paths, then folders, then the folder above them),
    and every byte and file is still counted."""
    from tracer.core.diagnosis import MAX_READ_FOLDERS, MAX_READ_PATHS

    def row(path, n=None):
        return {**file_row(WORKER, "dataloader_worker", "read", 4096 * (n or 1), MS, path=path),
                "path_source": "folder" if n else "kernel", "file_count": n}
    files = [row(f"/data/train/c{c:04d}/img{k}.jpg") for c in range(100) for k in range(2)]
    files += [row(f"/data/train/c{c:04d}/", 30) for c in range(1000)]
    d = Diagnosis()
    add_interval(d, S, S, [thread(MAIN, MAIN, "main", oncpu=S)], files, [], [], OWNER)
    reads = d.intervals[-1].data[MAIN]
    assert len(reads.files) <= MAX_READ_PATHS + MAX_READ_FOLDERS + 1
    assert len(reads.by_dir) <= MAX_READ_FOLDERS + 1
    assert sum(reads.files.values()) == reads.bytes == sum(c[0] for c in reads.by_dir.values())
    assert reads.bytes == 4096 * (200 + 30 * 1000)
    assert reads.file_count() == 200 + 30 * 1000
    assert ("/data/train/", "ext4") in reads.folder_files  # where the other folders went


def test_the_reads_an_interval_keeps_are_frozen_and_share_their_keys():
    """An hour of intervals is kept: each keeps its reads read-only in arrays, its folders'
    keys stored once for all intervals, its files' packed, and adds up as it did."""
    files = [file_row(WORKER, "dataloader_worker", "read", 4096 * (k + 1), MS,
                      path=f"/data/f{k}.bin") for k in range(40)]
    d = Diagnosis()
    for i in (1, 2):
        add_interval(d, i * S, S, [thread(MAIN, MAIN, "main", oncpu=S)], files, [], [], OWNER)
    first, second = (iv.data[MAIN] for iv in d.intervals)
    assert [k for k in first.files] == [k for k in second.files]
    assert [a for a, b in zip(first.files, second.files, strict=True) if a is b] == [
        ("/data/", "ext4")]
    assert next(iter(first.by_dir)) is next(iter(second.by_dir))
    assert len(first.files) == 33  # 32 files, then their folder as one entry
    assert sum(first.files.values()) == first.bytes == 4096 * sum(range(1, 41))
    assert dict(first.by_dir.items()) == {"/data/": (first.bytes, 0, 0)}
    assert first.file_count() == 40
    with pytest.raises(TypeError):
        first.files[("/data/f0.bin", "ext4")] = 0  # read-only

def run_with_disk(threads, files, users, n=5) -> list:
    d = Diagnosis()
    for i in range(1, n + 1):
        add_interval(d, i * S, S, threads, files, [], [], OWNER, device_users=users)
    return d.findings()


def test_other_processes_taking_the_jobs_disk_are_device_contended():
    io_bound = ([thread(MAIN, MAIN, "main", oncpu=200 * MS, sleep=800 * MS, by_worker=800 * MS),
                 thread(WORKER, WORKER, "dataloader_worker", oncpu=100 * MS, iowait=900 * MS)],
                [file_row(WORKER, "dataloader_worker", "read", 4 << 20, 900 * MS)])
    users = [disk_use("traced", 4 << 20, 4), disk_use("kernel_thread", 10 << 20, 10, "4 x dd"),
             disk_use("other", 2 << 20, 30, "cp", "/"),
             disk_use("other", 50 << 20, 50, "cp", device="vdb")]  # another disk: not counted
    f = run_with_disk(*io_bound, users)
    assert kinds(f)[0] == "dataloader_io_bound" and "device_contended" in kinds(f)
    c = next(x for x in f if x.kind == "device_contended")
    ev = c.evidence
    assert ev["device"] == "vda" and ev["other_bytes_pct"] == 75.0
    assert ev["other_requests_pct"] == round(100 * 40 / 44, 1)
    assert ev["other_bytes_s"] == 12 << 20 and ev["job_bytes_s"] == 4 << 20  # (the 4 after the 1st)
    assert ev["other_bytes"] == 5 * (12 << 20)
    assert ev["others"][0] == {"comm": "4 x dd", "cgroup": "/jobs", "container_id": None,
                               "pod_uid": None, "bytes": 5 * (10 << 20)}
    assert "75 % of vda's reads" in c.summary and "4 x dd in /jobs" in c.summary
    # a neighbour that takes 30 % or less is no finding; nor one of a job not waiting on I/O
    little = [disk_use("traced", 4 << 20, 4), disk_use("other", 1 << 20, 1, "dd")]
    assert "device_contended" not in kinds(run_with_disk(*io_bound, little))
    healthy = ([thread(MAIN, MAIN, "main", oncpu=950 * MS, sleep=50 * MS)],
               [file_row(MAIN, "main", "read", 1 << 20, 5 * MS)])
    assert kinds(run_with_disk(*healthy, users)) == ["not_io_bound"]


def test_device_contended_names_the_neighbours_container_and_pod():
    io_bound = ([thread(MAIN, MAIN, "main", oncpu=200 * MS, sleep=800 * MS, by_worker=800 * MS),
                 thread(WORKER, WORKER, "dataloader_worker", oncpu=100 * MS, iowait=900 * MS)],
                [file_row(WORKER, "dataloader_worker", "read", 4 << 20, 900 * MS)])
    cid, uid = "ab" * 32, "5e0c8b2f-1a3d-4c5e-9f7a-0b1c2d3e4f5a"
    noisy = {**disk_use("other", 12 << 20, 12, "fio", f"/kubepods/besteffort/pod{uid}/{cid}"),
             "container_id": cid, "pod_uid": uid}
    f = run_with_disk(*io_bound, [disk_use("traced", 4 << 20, 4), noisy])
    c = next(x for x in f if x.kind == "device_contended")
    assert f"fio in container {cid[:12]} of pod {uid}" in c.summary
    assert c.evidence["others"][0]["container_id"] == cid
