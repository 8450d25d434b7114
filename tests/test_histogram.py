"""Log2 histograms, deltas between intervals, and the summary text: pure logic, no kernel."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from conftest import kernel_dev
from tracer.core import abi, units
from tracer.core.histogram import percentile_ns, render
from tracer.core.model import Series
from tracer.live.aggregate import Aggregator, Reading
from tracer.live.clock import Clock
from tracer.live.processes import Process, ProcessTable
from tracer.live.rereads import with_rereads
from tracer.render.summary import render_summary
from tracer.report import totals_from_latency


def hist_bytes(counts: dict[int, int], nbytes: dict[int, int] | None = None) -> bytes:
    h = np.zeros((2, abi.MAX_SLOTS), dtype="<u8")
    for slot, n in counts.items():
        h[0, slot] = n
    for slot, n in (nbytes or {}).items():
        h[1, slot] = n
    return h.tobytes()


def test_slot_bounds():
    assert units.slot_bounds_ns(0) == (0, 2)
    assert units.slot_bounds_ns(10) == (1024, 2048)
    assert units.slot_bounds_ns(abi.MAX_SLOTS - 1)[1] == 2**63 - 1


def test_percentiles_interpolate_within_the_slot():
    counts = [0] * abi.MAX_SLOTS
    counts[10] = 100  # all in [1024, 2048): the k-th of them in the middle of its 1/100
    assert percentile_ns(counts, 50) == 1024 + 1024 * 49.5 / 100
    assert percentile_ns(counts, 100) == 1024 + 1024 * 99.5 / 100
    counts[20] = 100  # half in [1 Mi, 2 Mi): the 100th is the last of slot 10, inside it
    assert percentile_ns(counts, 50) == 1024 + 1024 * 99.5 / 100
    assert percentile_ns(counts, 75) == (1 << 20) + (1 << 20) * 49.5 / 100
    assert percentile_ns([0] * abi.MAX_SLOTS, 50) is None


def test_p50_of_a_few_operations_is_their_median():
    """Nearest rank: the p50 of 3 is the 2nd, of 2 or 4 the 2nd's or 1st's slot, not a bound of
    the slot above (the value 2^(i+1) is the next slot's)."""
    counts = [0] * abi.MAX_SLOTS
    counts[10], counts[12], counts[20] = 1, 1, 1  # 1-2 us, 4-8 us, 1-2 ms
    assert percentile_ns(counts, 50) == 4096 + 4096 * 0.5  # the middle one's slot
    assert percentile_ns(counts, 99) == (1 << 20) * 1.5
    assert percentile_ns(counts, 33) == 1024 * 1.5  # rank ceil(0.99) = 1
    counts = [0] * abi.MAX_SLOTS
    counts[10], counts[11] = 1, 1
    assert percentile_ns(counts, 50) == 1536.0  # the first: in [1024, 2048), below 2048
    counts[11] = 3  # 1 fast, 3 slow: the 2nd is slow, the first of 3 in [2048, 4096)
    assert percentile_ns(counts, 50) == 2048 + 2048 * 0.5 / 3
    counts[10], counts[11] = 3, 1  # 3 fast, 1 slow: the 2nd of 3 in [1024, 2048)
    assert percentile_ns(counts, 50) == 1024 + 1024 * 1.5 / 3
    assert percentile_ns(counts, 75) == 1024 + 1024 * 2.5 / 3  # the 3rd: still the fast slot
    one = [0] * abi.MAX_SLOTS
    one[-1] = 1  # the open-ended slot alone: its lower bound
    assert percentile_ns(one, 50) == units.slot_bounds_ns(abi.MAX_SLOTS - 1)[0]


def test_render_spans_first_to_last_non_empty_slot():
    counts = [0] * abi.MAX_SLOTS
    counts[12], counts[14] = 4, 8
    lines = render(counts)
    assert len(lines) == 1 + 3
    assert lines[1].split(":")[1].split()[0] == "4"
    assert lines[2].split(":")[1].split()[0] == "0"
    assert "|" + "*" * 40 + "|" in lines[3]


def test_aggregator_writes_exact_deltas():
    procs = ProcessTable(Clock())
    procs.add(Process(7, 1, "train", True, "python train.py", 0))
    agg = Aggregator(procs)
    key = abi.HIST_KEY.pack(7, 0, 1, 0, 1, 0)  # syscall read file
    s1 = agg.interval(Reading({key: hist_bytes({12: 5}, {12: 5 * 4096})}), ts_ns=1_000)
    assert [(r["count"], r["bytes"], r["bucket_lo_ns"], r["role"]) for r in s1.latency] == [
        (5, 20480, 4096, "main")]
    s2 = agg.interval(Reading({key: hist_bytes({12: 5, 13: 2}, {12: 5 * 4096, 13: 2 * 4096})}),
                      ts_ns=2_000)
    assert [(r["count"], r["bucket_lo_ns"]) for r in s2.latency] == [(2, 8192)]
    assert s2.interval_ns == 1_000
    s3 = agg.interval(Reading({key: hist_bytes({12: 5, 13: 2}, {12: 5 * 4096, 13: 2 * 4096})}),
                      ts_ns=3_000)
    assert s3.latency == []  # nothing new: no rows
    assert sum(r["count"] for s in (s1, s2, s3) for r in s.latency) == 7


def test_aggregator_key_recreated_counts_from_zero():
    agg = Aggregator(ProcessTable(Clock()))
    key = abi.HIST_KEY.pack(9, 0, 1, 1, 2, 0)
    agg.interval(Reading({key: hist_bytes({3: 10})}), ts_ns=1)
    snap = agg.interval(Reading({key: hist_bytes({3: 4})}), ts_ns=2)  # recreated in between
    assert [r["count"] for r in snap.latency] == [4]


def test_report_rebuilds_the_same_totals_from_rows():
    agg = Aggregator(ProcessTable(Clock()))
    k1 = abi.HIST_KEY.pack(5, 0, 1, 0, 1, 0)
    s1 = agg.interval(Reading({k1: hist_bytes({0: 1, 12: 3, 39: 2}, {12: 100})}), ts_ns=10)
    last = hist_bytes({0: 1, 12: 4, 39: 2}, {12: 150})
    s2 = agg.interval(Reading({k1: last}), ts_ns=20)
    rebuilt = totals_from_latency(pd.DataFrame(s1.latency + s2.latency))
    series = Series(5, "syscall", "read", "file", None, None)
    assert list(rebuilt) == [series]
    assert (rebuilt[series] == abi.decode_hist(last)).all()  # the kernel's running sums
    assert rebuilt[series][0, 12] == 4 and rebuilt[series][1, 12] == 150


def test_summary_names_process_layer_and_percentiles():
    procs = ProcessTable(Clock())
    procs.add(Process(5, 1, "train", True, "python train.py", 0))
    series = Series(5, "block", "read", None, "vda", "direct")
    h = np.zeros((2, abi.MAX_SLOTS), dtype=np.uint64)
    h[0, 16] = 20
    h[1, 16] = 20 * 4096
    text = render_summary({series: h}, procs, "header")
    assert "pid 5 train (main)" in text
    # ranks 10 and 20 of 20 in [65536, 131072): 65536 * (1 + 9.5/20) and 65536 * (1 + 19.5/20)
    assert "block read on vda (direct): 20 ops, 80.0 KiB, p50 96.7 us, p99 129 us" in text


def counts(*entries) -> np.ndarray:
    """An interval's per-file counters as the kernel hands them over: (pid, ino, op, ops,
    latency_sum_ns, dir_ino) per entry, 4 KiB per op."""
    keys = b"".join(abi.FILE_KEY.pack(pid, 1, ino, 0, op, 0) for pid, ino, op, *_ in entries)
    stats = b"".join(abi.FILE_STAT.pack(ops, 4096 * ops, lat, 0, 0, lat // max(ops, 1), d, 0, 0, 0,
                                     0) for *_, ops, lat, d in entries)
    return abi.file_counts(keys, stats)


def test_drains_of_one_interval_make_its_rows():
    """The kernel's buffer taken out in three drains of one interval (it filled: slots.bpf.h,
    ask_drain): each is rolled up as it comes, and the interval's rows are those of one drain
    of it all: the same files kept, the same folder rows, the kernel's folder counts with them."""
    from tracer.core.rollup import KEEP_FILES

    n = 300
    entries = [*[(7, 1000 + i, 0, 2, 1000 * (i + 1), 500) for i in range(n)],
               *[(7, 2000 + i, 0, 1, 10**9, 600) for i in range(3)],
               *[(9, 3000 + i, 0, 1, 10**6 + i, 700) for i in range(KEEP_FILES + 5)]]
    kernel = counts((7, 500, 0, 4, 4000, 500))
    whole = Aggregator(ProcessTable(Clock()))
    one = whole.interval(Reading({}, counts(*entries), kernel), ts_ns=1).files
    drained = Aggregator(ProcessTable(Clock()))
    drained.add_drain(counts(*entries[0::3]), kernel[:0])
    drained.add_drain(counts(*entries[1::3]), kernel)
    three = drained.interval(Reading({}, counts(*entries[2::3]), kernel[:0]), ts_ns=1).files

    def rows(got):
        return sorted((r["pid"], r["inode"], r["op"], r["path_source"] == "folder",
                       r["file_count"], r["ops"], r["bytes"]) for r in got)
    assert rows(three) == rows(one)
    assert drained.rolled_up == whole.rolled_up


def test_files_past_the_kept_ones_are_added_up_per_folder():
    """Per (process, op) and interval, a process's files keep their rows when it touched at most
    KEEP_FILES; of more, those with KEEP_SHARE_PCT of its time, bytes or pages, at most
    KEEP_FILES of them. The others are one row per folder, which says how many files it holds;
    the kernel's own folder counts join it. Nothing is counted twice or lost."""
    from tracer.core.rollup import KEEP_FILES, KEEP_SHARE_PCT

    assert KEEP_SHARE_PCT == 1  # the times below are chosen around it
    agg = Aggregator(ProcessTable(Clock()))
    n = 300
    # pid 7 reads n files of folder 500 (file i took i us; each far under 1 % of the pid's
    # time and bytes) and 3 of folder 600, each a third of its time; pid 9 reads KEEP_FILES + 5
    # files alike (each 1/69th of its time and bytes, over 1 %): the first KEEP_FILES are kept;
    # pid 10 reads 200 files alike (0.5 % each) and has a file mapped into memory, whose pages
    # are all it has: kept; pid 8 reads 2 files: both kept
    files = counts(*[(7, 1000 + i, 0, 2, 1000 * (i + 1), 500) for i in range(n)],
                   *[(7, 2000 + i, 0, 1, 10**9, 600) for i in range(3)],
                   *[(9, 3000 + i, 0, 1, 10**6, 700) for i in range(KEEP_FILES + 5)],
                   *[(10, 4000 + i, 0, 1, 10**6, 800) for i in range(200)],
                   (10, 5000, 0, 0, 0, 800), (8, 1, 0, 1, 5, 500), (8, 2, 0, 1, 5, 500))
    files["pages_missed"][files["ino"] == 5000] = 1000
    kernel = counts((7, 500, 0, 4, 4000, 500))  # 4 reads the kernel's file table had no room for
    rows = agg.interval(Reading({}, files, kernel), ts_ns=1).files
    own = [r for r in rows if r["file_count"] == 1 and r["path_source"] != "folder"]
    folders = [r for r in rows if r["path_source"] == "folder"]
    assert sorted(r["inode"] for r in own if r["pid"] == 7) == [2000, 2001, 2002]
    assert sorted(r["inode"] for r in own if r["pid"] == 9) == list(range(3000, 3000 + KEEP_FILES))
    assert [(r["inode"], r["pages_missed"]) for r in own if r["pid"] == 10] == [(5000, 1000)]
    assert sorted((r["pid"], r["inode"], r["file_count"], r["ops"]) for r in folders) == [
        (7, 500, n, 2 * n + 4), (9, 700, 5, 5), (10, 800, 200, 200)]
    assert sum(r["ops"] for r in rows if r["pid"] == 7) == 2 * n + 3 + 4
    assert sum(r["bytes"] for r in rows) == 4096 * (2 * n + 3 + 4 + KEEP_FILES + 5 + 200 + 2)
    assert len([r for r in own if r["pid"] == 8]) == 2
    assert (agg.rolled_up.file_rows, agg.rolled_up.folder_rows, agg.rolled_up.kernel_ops) == (
        n + 5 + 200, 3, 4)


def test_opens_counted_in_a_files_key_are_rows_of_their_own():
    """The kernel counts a file's opens in its read key (its write key when opened for
    writing): its row, or its folder's, and a row of op open with the opens, files counted in
    each for what they did. A file only opened has no row of read."""
    agg = Aggregator(ProcessTable(Clock()))
    # 200 files read once, each 0.5 % of the time, added up per folder: 150 opened in this
    # interval, 50 before; 30 more of another folder only opened, as fast; one only opened and
    # slow (10 % of the time: kept); one opened for writing and written
    n, before, fast = 200, 50, 30
    files = counts(*[(7, 1000 + i, 0, 1, 1000, 500) for i in range(n)],
                   *[(7, 8000 + i, 0, 0, 0, 510) for i in range(fast)],
                   (7, 9000, 0, 0, 0, 500), (7, 9100, 1, 1, 10, 500))
    files["opens"] = files["ino"] >= 1000 + before
    files["open_latency_sum_ns"] = files["open_latency_max_ns"] = 2000 * files["opens"]
    slow = files["ino"] == 9000
    files["open_latency_sum_ns"][slow] = files["open_latency_max_ns"][slow] = 10**5
    kernel = counts((7, 500, 0, 4, 4000, 500))
    kernel["opens"], kernel["open_latency_sum_ns"] = 2, 6000
    rows = agg.interval(Reading({}, files, kernel), ts_ns=1).files
    got = sorted((r["inode"], r["op"], r["file_count"], r["ops"], r["bytes"], r["latency_sum_ns"],
                  r["latency_max_ns"]) for r in rows)
    opened = n - before
    assert got == [(500, "open", opened, opened + 2, 0, 2000 * opened + 6000, 2000),
                   (500, "read", n, n + 4, 4096 * (n + 4), 1000 * n + 4000, 1000),
                   (510, "open", fast, fast, 0, 2000 * fast, 2000),
                   (9000, "open", 1, 1, 0, 10**5, 10**5),
                   (9100, "open", 1, 1, 0, 2000, 2000),
                   (9100, "write", 1, 1, 4096, 10, 10)]
    r = agg.rolled_up
    assert (r.file_rows, r.folder_rows, r.kernel_ops) == (n + opened + fast, 3, 4 + 2)


def test_folders_past_the_kept_ones_are_added_up_in_their_parents():
    """A job that reads its class folders in a random order has a folder row per worker, folder
    and op every interval: past KEEP_FILES per (process, op), the folders that matter least are
    added up in their parent's row, level by level; one that stands out keeps its row, one
    whose parent is not known stays. Every count is kept, and the files in each row."""
    from tracer.core import rollup

    tree = {**{500 + i: 1 for i in range(50)}, **{600 + i: 2 for i in range(50)}, 1: 9, 2: 9,
            9: 0}
    asked = []

    def parent(dev, ino):
        asked.append(ino)
        return tree.get(ino, 0)

    # 100 folders alike under 1 and 2, one that stands out (a third of the time) under 1, one
    # whose parent is not known; pid 8 reads 3 folders: theirs stay
    entries = [(7, 500 + i, 0, 1, 1000, 500 + i) for i in range(50)]
    entries += [(7, 600 + i, 0, 1, 1000, 600 + i) for i in range(50)]
    entries += [(7, 700, 0, 1, 1000, 700), (7, 550, 0, 2, 60_000, 550)]
    entries += [(8, 500 + i, 0, 1, 1000, 500 + i) for i in range(3)]
    tree[550] = 1
    rows = counts(*entries)
    n_files = np.arange(1, len(rows) + 1)
    out, n = rollup.fold_folders(rows, n_files, parent)
    got = sorted((int(r["tgid"]), int(r["ino"]), int(r["dir_ino"]), int(r["ops"]), int(f))
                 for r, f in zip(out, n, strict=True))
    files_of = dict(zip(rows["tgid"] * 10**6 + rows["ino"], n_files.tolist(), strict=True))

    def files(pid, *inos):
        return sum(files_of[pid * 10**6 + ino] for ino in inos)

    assert got == [(7, 1, 1, 50, files(7, *range(500, 550))),
                   (7, 2, 2, 50, files(7, *range(600, 650))),
                   (7, 550, 550, 2, files(7, 550)), (7, 700, 700, 1, files(7, 700)),
                   *[(8, 500 + i, 500 + i, 1, files(8, 500 + i)) for i in range(3)]]
    assert out["ops"].sum() == rows["ops"].sum() and out["bytes"].sum() == rows["bytes"].sum()
    assert n.sum() == n_files.sum()
    # once per folder, and never for one that keeps its row
    assert sorted(asked) == [*range(500, 550), *range(600, 650), 700]
    same, same_n = rollup.fold_folders(rows[-3:], n_files[-3:], parent)
    assert same.tobytes() == rows[-3:].tobytes() and same_n.tolist() == n_files[-3:].tolist()


def test_class_folders_read_in_a_random_order_are_one_row(tmp_path):
    """The aggregator names the parent of class folders from the folders' own paths: 120 class
    folders of a data set, each read a little in one interval (under 1 % of the time: none
    stands out), are one row of the data set's folder, with every file and byte in it."""
    from tracer.live.files import FOLDER

    root = tmp_path / "train"
    folders = []
    for i in range(120):
        (root / f"c{i:03}").mkdir(parents=True)
        folders.append(os.stat(root / f"c{i:03}"))
    dev = kernel_dev(folders[0].st_dev)
    agg = Aggregator(ProcessTable(Clock()))
    for i, st in enumerate(folders):
        agg.files.folders[(dev, st.st_ino)] = (str(root / f"c{i:03}"), os.getpid())
    files = counts(*[(7, 10_000 + 3 * i + k, 0, 1, 1000, st.st_ino)
                     for i, st in enumerate(folders) for k in range(3)])
    files["dev"] = dev
    rows = agg.interval(Reading({}, files, counts()), ts_ns=1).files
    assert [(r["path"], r["path_source"], r["inode"], r["file_count"], r["ops"], r["bytes"])
            for r in rows] == [(f"{root}/", FOLDER, os.stat(root).st_ino, 360, 360, 360 * 4096)]
    assert (agg.rolled_up.file_rows, agg.rolled_up.folder_rows) == (360, 1)


def test_roll_up_is_the_same_when_hashes_collide(monkeypatch):
    """The roll-up groups rows by a hash of their keys and compares the keys where two hashes
    are equal: with every hash the same (each pair a collision) it makes the same rows, in the
    same order, as with real hashes. The rows have ties (equal times: the first row wins) and
    keys found twice (added up first)."""
    from tracer.core import rollup

    entries = [(pid, ino % 97, 0, 1 + ino % 3, 1000 * (ino % 5), 500 + ino % 4)
               for pid in (7, 8) for ino in range(300)]
    files = with_rereads(counts(*entries))
    folders = with_rereads(counts((7, 501, 0, 4, 4000, 501)))
    real = rollup.split(files, folders, keep=8)
    monkeypatch.setattr(rollup, "_hash",
                        lambda rows, by: np.zeros(len(rows[by[0]]), dtype=np.uint64))
    collided = rollup.split(files, folders, keep=8)
    assert [a.tobytes() for a in real] == [b.tobytes() for b in collided]
    own, folder_rows, n_files = real
    assert len(own) == 2 * 8 and n_files.sum() == 2 * (97 - 8)
    assert own["ops"].sum() + folder_rows["ops"].sum() == sum(e[3] for e in entries) + 4


def test_summary_totals_stay_bounded():
    """The whole-trace totals keep the files with the most time; the others fold into their
    folders' totals, with every count."""
    from tracer.core.model import FOLDER_GEN
    from tracer.live import aggregate

    agg = Aggregator(ProcessTable(Clock()))
    keep, aggregate.MAX_FILE_TOTALS = aggregate.MAX_FILE_TOTALS, 10
    try:
        for t in range(5):  # 5 intervals of 8 new files each, from one folder
            agg.interval(Reading({}, counts(*[(7, 100 * t + i, 0, 1, 1 + 100 * t + i, 9)
                                              for i in range(8)])), ts_ns=t + 1)
    finally:
        aggregate.MAX_FILE_TOTALS = keep
    kept = [k for k in agg.file_totals if k[3] != FOLDER_GEN]
    assert sorted(k[2] for k in kept) == [306, 307, *range(400, 408)]  # the 10 slowest
    assert sum(t.ops["read"] for t in agg.file_totals.values()) == 40
    assert list(k for k in agg.file_totals if k[3] == FOLDER_GEN) == [(7, 1, 9, FOLDER_GEN)]


def test_folder_totals_of_exited_workers_go_to_their_loop():
    """Workers made again every epoch read the same folders under new pids: past
    MAX_FOLDER_TOTALS folders, an exited worker's folders are added to its main process's, so
    the totals stay bounded by the live processes and keep every count."""
    from tracer.core.model import FOLDER_GEN, FileTotals
    from tracer.live import aggregate

    procs = ProcessTable(Clock())
    procs.add(Process(7, 1, "python", True, "python train.py", 0))
    agg = Aggregator(procs)
    epochs, folders = 5, 30
    for epoch in range(epochs):
        for w in range(2):
            pid = 100 + 10 * epoch + w
            procs.add(Process(pid, 7, "pt_data_worker", False, "", 0,
                              exit_ns=None if epoch == epochs - 1 else 1))
            for d in range(folders):
                t = agg.file_totals[(pid, 1, 1000 + d, FOLDER_GEN)] = FileTotals(dir_ino=1000 + d)
                t.add("read", 3, 4096 * 3, 1000, 0, 0, 10)
    keep, aggregate.MAX_FOLDER_TOTALS = aggregate.MAX_FOLDER_TOTALS, 2 * folders
    try:
        agg.fold_file_totals()
    finally:
        aggregate.MAX_FOLDER_TOTALS = keep
    by_pid: dict[int, int] = {}
    for (pid, _dev, _ino, gen), t in agg.file_totals.items():
        assert gen == FOLDER_GEN
        by_pid[pid] = by_pid.get(pid, 0) + t.ops["read"]
    # the live epoch's two workers keep theirs; the 8 exited workers' are the main's
    assert by_pid == {7: 8 * folders * 3, 140: folders * 3, 141: folders * 3}
    assert len(agg.file_totals) == 3 * folders
    assert sum(t.bytes["read"] for t in agg.file_totals.values()) == 10 * folders * 3 * 4096


def test_a_state_counted_a_little_long_is_not_counted_again():
    """A thread's open state is counted up to the reading's clock, taken after the map: one that
    ended in between was counted long, and the kernel's total is then below what was counted.
    The next interval takes that back instead of counting the whole run again, and once the
    kernel's totals pass what was counted, the sums over the run are the kernel's totals."""
    agg = Aggregator(ProcessTable(Clock()))
    running, sleeping = 0, 2  # enum iot_thread_state
    ms = 10**6

    def read(at_ms, state, since_ms, oncpu_ms, sleep_ms, woken_ms):
        raw = abi.THREAD_TIME.pack(7, state, 0, since_ms * ms, oncpu_ms * ms, 0, sleep_ms * ms,
                                   0, 0, woken_ms * ms, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                   b"train")
        rows = agg.interval(Reading({}, threads={7: raw}, monotonic_ns=at_ms * ms),
                            ts_ns=at_ms).threads
        return {k: rows[0][k] // ms for k in ("oncpu_ns", "sleep_ns", "woken_by_worker_ns")}

    # read at 10 s: asleep since 4 s; the sleep ended at 9.9 s, after the map was read
    assert read(10_000, sleeping, 4_000, 4_000, 0, 0) == {
        "oncpu_ns": 4_000, "sleep_ns": 6_000, "woken_by_worker_ns": 0}
    # read at 11 s: the kernel wrote 5.9 s of sleep, ended by a worker; on CPU since 9.9 s
    assert read(11_000, running, 9_900, 4_000, 5_900, 5_900) == {
        "oncpu_ns": 1_100, "sleep_ns": 0, "woken_by_worker_ns": 5_900}
    # read at 12 s: on CPU until 11.5 s, asleep since: 0.5 s more of each
    assert read(12_000, sleeping, 11_500, 5_600, 5_900, 5_900) == {
        "oncpu_ns": 500, "sleep_ns": 400, "woken_by_worker_ns": 0}  # 6.4 s in all, as the kernel


def test_rows_of_a_process_not_registered_yet_are_valid():
    """Counters of a just-forked process can be read before its fork record: its rows say
    `child` (a traced descendant) and fit the strict schema."""
    from tracer.tracedir.schema import table_from_rows

    agg = Aggregator(ProcessTable(Clock()))
    hkey = abi.HIST_KEY.pack(99, 0, 1, 0, 1, 0)
    snap = agg.interval(Reading({hkey: hist_bytes({12: 1}, {12: 4096})},
                                counts((99, 42, 0, 1, 1000, 0))), ts_ns=1)
    assert {r["role"] for r in snap.latency + snap.files} == {"child"}
    assert table_from_rows("latency", snap.latency).num_rows == 1
    assert table_from_rows("files", snap.files).num_rows == 1


def test_percentiles_stay_at_or_below_the_slowest_operation_seen():
    from tracer.core.histogram import percentile_ns

    counts = [0] * 64
    counts[31] = 4  # four fsyncs in [2.15 s, 4.29 s), all of 2.53 s
    assert percentile_ns(counts, 50) == 2**31 * (1 + 1.5 / 4)  # the 2nd of 4 spread in the slot
    assert percentile_ns(counts, 50, 2_530_000_000) == percentile_ns(counts, 99, 2_530_000_000) \
        == 2_530_000_000
    # a maximum below the highest non-empty bucket is not this histogram's: ignored
    assert percentile_ns(counts, 50, 1_000_000_000) == percentile_ns(counts, 50)
