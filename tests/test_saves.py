"""A save is a span (tracer/core/diagnosis/saves.py), on hand-made rows: the loop's time with a
file open for writing is checkpoint time once that file turns out to be a checkpoint, moved
there from compute when it was counted before that was known; later saves to the same folder
count as they pass; spans of small files elsewhere change nothing."""

from __future__ import annotations

from diagnosis_rows import MAIN, MS, S, add_interval, file_row, kinds, thread

from tracer.core.diagnosis import Diagnosis

CKPT = "/ckpt/step-{}.pt"
MIB = 1 << 20


def loop(oncpu, path=None, span=0, sleep=0):
    row = thread(MAIN, MAIN, "main", oncpu=oncpu, sleep=sleep)
    row["write_open_path"], row["write_open_ns"] = (path, span) if span else (None, None)
    return row


def written(path, nbytes, latency=5 * MS):
    return file_row(MAIN, "main", "write", nbytes, latency, path=path)


def feed(intervals) -> tuple[Diagnosis, list[dict]]:
    d = Diagnosis()
    rows = []
    for i, (threads, files) in enumerate(intervals, start=1):
        rows += add_interval(d, i * S, S, threads, files, owner={MAIN: MAIN})
    return d, rows


def test_the_first_save_is_owed_then_saves_count_as_they_pass():
    first, second = CKPT.format(1), CKPT.format(2)
    d, rows = feed([
        ([loop(S)], []),  # training
        ([loop(S, first, 800 * MS)], []),  # pickling: not known to be a save yet
        # written: a checkpoint; the first 800 ms move here from compute, and the rest ...
        ([loop(S, first, 300 * MS)], [written(first, 20 * MIB)]),
        ([loop(S)], []),  # ... here
        ([loop(S, second, 600 * MS)], []),  # same folder: a save as it passes
        ([loop(S)], []),
    ])
    ckpt = [r["checkpoint_ns"] for r in rows]
    assert ckpt == [0, 0, S, 100 * MS, 600 * MS, 0]
    assert [r["compute_ns"] for r in rows] == [S, S, 0, 900 * MS, 400 * MS, S]
    f = d.findings()
    assert kinds(f)[0] == "checkpoint_stall"
    assert f[0].evidence["save_ns"] == 1700 * MS and f[0].evidence["write_ns"] == 5 * MS
    assert f[0].summary == (
        "The training loop spent 28 % of 6 s saving checkpoints: 1.7 s from opening each "
        "checkpoint file for writing to closing it, of which 5 ms writing and fsyncing 20.0 MiB "
        "at 3.9 GiB/s to /ckpt/step-1.pt; the rest is the save's own work (pickling, copying "
        "tensors off the device).")


def test_a_span_written_just_after_it_closed_still_counts():
    """The last write returned after the reading's files were taken: counted one interval
    later, when the span has closed (its 5 ms, inside the span, counted again)."""
    path = CKPT.format(1)
    _, rows = feed([([loop(S, path, 900 * MS)], []), ([loop(S)], [written(path, 20 * MIB)]),
                    ([loop(S)], [])])
    assert [r["checkpoint_ns"] for r in rows] == [0, 905 * MS, 0]


def test_small_files_and_logs_are_no_saves():
    log = "/logs/metrics.json"
    d, rows = feed([([loop(S, log, 500 * MS)], [written(log, MIB)])] * 4)
    assert all(r["checkpoint_ns"] == 0 for r in rows)
    assert "checkpoint_stall" not in kinds(d.findings())


def test_owed_time_waits_for_compute_and_other():
    """A save longer than the intervals after it can repay: what is owed carries over."""
    path = CKPT.format(1)
    _, rows = feed([
        ([loop(S, path, S)], []), ([loop(S, path, S)], []),
        ([loop(S, path, 500 * MS)], [written(path, 20 * MIB)]),
        ([loop(S // 2, sleep=S // 2)], []), ([loop(S)], []), ([loop(S)], []),
    ])
    assert [r["checkpoint_ns"] for r in rows] == [0, 0, S, S, 500 * MS, 0]
    assert rows[3]["other_ns"] == 0


def test_rows_without_the_columns_split_as_before():
    """A trace from before has no write_open columns: the split is today's."""
    path = CKPT.format(1)
    old = thread(MAIN, MAIN, "main", oncpu=S)
    _, rows = feed([([old], [written(path, 20 * MIB, latency=200 * MS)])])
    assert rows[0]["checkpoint_ns"] == 200 * MS and rows[0]["compute_ns"] == 800 * MS
