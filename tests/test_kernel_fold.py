"""Files folded in the kernel at their close (bpf/slots.bpf.h, fold_on_close): a job reading
thousands of small files whole has most of them added to their folder's row before user space
sees them, and the `files` table still holds every byte and open, the files that stand out
keep their rows, and a second pass over the files counts as re-read, byte for byte."""

from __future__ import annotations

import json
import os
import sys

import pandas as pd
import pytest

from conftest import needs_root, run_iotrace
from tracer.core.rollup import KEEP_FILES

pytestmark = [needs_root, pytest.mark.kernel]

FOLDERS, PER_FOLDER, SIZE = 30, 100, 4096
BIG = 4 << 20  # a quarter of the first pass's bytes: it stands out
# Two passes over the small files, the big one after the first, apart by more than an interval,
# and after the interpreter's start-up (which reads its modules' files whole) by as much
JOB = ("import os, sys, time\n"
       "root = sys.argv[1]\n"
       "time.sleep(2.5)\n"
       "def one_pass():\n"
       "    for d in sorted(os.listdir(root)):\n"
       "        if d == 'big': continue\n"
       "        for name in sorted(os.listdir(os.path.join(root, d))):\n"
       "            with open(os.path.join(root, d, name), 'rb') as f: f.read()\n"
       "one_pass()\n"
       "with open(os.path.join(root, 'big', 'weights'), 'rb') as f: f.read()\n"
       "time.sleep(2.5)\n"
       "one_pass()\n")


def _data(root, folders: int, per_folder: int):
    for d in range(folders):
        folder = root / f"c{d:02d}"
        folder.mkdir(parents=True)
        for i in range(per_folder):
            (folder / f"f{i:03d}").write_bytes(b"x" * SIZE)
    (root / "big").mkdir()
    (root / "big" / "weights").write_bytes(b"w" * BIG)


def _trace(tmp_path, data):
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), "-i", "1", "--", sys.executable, "-c", JOB, str(data),
                    timeout=120)
    assert r.returncode == 0, r.stderr
    cost = json.loads((out / "meta.json").read_text())["self_cost"]
    assert cost["events_lost"] == 0
    assert cost["map_full_drops"] == dict.fromkeys(cost["map_full_drops"], 0)
    procs = pd.read_parquet(out / "processes")
    job = int(procs[procs.role == "main"].pid.iloc[0])
    files = pd.read_parquet(out / "files")
    files = files[(files.pid == job) & files.path.str.startswith(str(data))]
    return out, cost, job, files


def _sharing_a_bit(root) -> int:
    """The files under `root` whose bit in the re-read bitmap is another file's too."""
    import numpy as np

    from conftest import kernel_dev
    from tracer.live.files import _generation
    from tracer.live.rereads import BITS, file_hash

    paths = [p for p in root.rglob("*") if p.is_file()]
    st = [p.stat() for p in paths]
    h = file_hash(np.array([kernel_dev(s.st_dev) for s in st], dtype=np.uint64),
                  np.array([s.st_ino for s in st], dtype=np.uint64),
                  np.array([_generation(str(p)) or 0 for p in paths], dtype=np.uint64))
    _, inverse, counts = np.unique(h >> np.uint64(64 - BITS), return_inverse=True,
                                   return_counts=True)
    return int((counts[inverse] > 1).sum())


def test_files_read_whole_are_folded_and_every_byte_counted(tmp_path):
    data = tmp_path / "data"
    _data(data, FOLDERS, PER_FOLDER)
    out, cost, job, files = _trace(tmp_path, data)
    n = FOLDERS * PER_FOLDER
    folded = cost["files_rolled_up"]["kernel_folded_files"]
    # of each interval's files, all but the first KEEP_FILES weighed are alike: nearly all folded
    assert 2 * n - 8 * KEEP_FILES <= folded <= 2 * n
    reads = files[files.op == "read"]
    assert int(reads.bytes.sum()) == 2 * n * SIZE + BIG
    assert int(files[files.op == "open"].file_count.sum()) == 2 * n + 1
    # the big file stands out: a row of its own, whole
    big = reads[reads.path == str(data / "big" / "weights")]
    assert big.path_source.tolist() != ["folder"] and big.bytes.tolist() == [BIG]
    assert (reads.groupby("ts").size() <= KEEP_FILES + FOLDERS + 2).all()
    # the second pass re-reads every small file; the first and the big file re-read nothing
    # (a first pass's file whose bit in the re-read bitmap another file set counts as re-read:
    # at 3 000 files, about one run in fifteen has such a pair)
    assert n * SIZE <= int(reads.reread_bytes.sum()) <= n * SIZE + _sharing_a_bit(data) * SIZE
    lat = pd.read_parquet(out / "latency")
    lat = lat[(lat.pid == job) & (lat.layer == "syscall") & (lat.op == "read")
              & (lat.target == "file")]
    every = pd.read_parquet(out / "files")
    every = every[(every.pid == job) & (every.op == "read")]
    assert (int(lat["count"].sum()), int(lat["bytes"].sum())) == (
        int(every.ops.sum()), int(every.bytes.sum()))


def test_a_few_files_are_never_folded(tmp_path):
    """At most KEEP_FILES files in an interval keep their rows, all of them: the kernel folds
    only once more than that have closed."""
    data = tmp_path / "data"
    _data(data, 2, 20)
    _, cost, _, files = _trace(tmp_path, data)
    assert cost["files_rolled_up"]["kernel_folded_files"] == 0
    reads = files[files.op == "read"]
    assert (reads.path_source != "folder").all()
    assert int(reads.bytes.sum()) == 2 * 40 * SIZE + BIG
    assert int(reads.reread_bytes.sum()) == 40 * SIZE


# As a DataLoader worker shares a batch (/dev/shm/torch_*): create, size, a byte at the end,
# unlink, close; then files closed before they are deleted
GONE, LEFT = 40, 3
GONE_JOB = ("import os, sys, time\n"
            "root = sys.argv[1]\n"
            "time.sleep(1.5)\n"
            f"for i in range({GONE}):\n"
            "    p = os.path.join(root, f'gone{i:02d}')\n"
            "    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)\n"
            "    os.ftruncate(fd, 4096)\n"
            "    os.pwrite(fd, b'\\0', 4095)\n"
            "    os.unlink(p)\n"
            "    os.close(fd)\n"
            f"for i in range({LEFT}):\n"
            "    p = os.path.join(root, f'left{i}')\n"
            "    with open(p, 'wb') as f: f.write(b'k' * 100)\n"
            "    os.unlink(p)\n"
            "time.sleep(1.5)\n")


# One slot a buffer: every key past the first has its counters in the file log, as a key whose
# slots others hold does (a few in a hundred runs of GONE_JOB had one, with a slot a key)
@pytest.mark.parametrize("slots", [None, "file_slots=2"], ids=["slots", "log"])
def test_files_deleted_before_their_close_are_folded(tmp_path, slots):
    """A file unlinked while open has no name a row could show: the kernel adds it to its
    folder's row at its close, however few files the interval has, with its write, its open
    and the page its write dirtied, wherever its counters are; a file deleted after its close
    keeps its row."""
    root = tmp_path / "shm"
    root.mkdir()
    out = tmp_path / "trace"
    env = {**os.environ, "IOTRACE_MAP_SIZES": slots} if slots else None
    r = run_iotrace("-o", str(out), "-i", "1", "--", sys.executable, "-c", GONE_JOB,
                    str(root), timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    cost = json.loads((out / "meta.json").read_text())["self_cost"]
    assert cost["events_lost"] == 0
    assert cost["files_rolled_up"]["kernel_folded_files"] == GONE
    files = pd.read_parquet(out / "files")
    files = files[files.path.str.startswith(str(root))]
    folder = files[files.path_source == "folder"]
    assert folder.path.unique().tolist() == [f"{root}/"]
    assert sorted(folder.op.unique()) == ["open", "write"]
    writes = folder[folder.op == "write"]
    assert (int(writes.file_count.sum()), int(writes.ops.sum()), int(writes.bytes.sum())) == (
        GONE, GONE, GONE)
    assert int(writes.pages_dirtied.sum()) == GONE  # a page each: 4 KiB sized, its last byte
    opens = folder[folder.op == "open"]
    assert (int(opens.file_count.sum()), int(opens.ops.sum())) == (GONE, GONE)
    own = files[files.path_source != "folder"]
    assert sorted(own[own.op == "write"].path) == [f"{root}/left{i}" for i in range(LEFT)]
    assert own[own.op == "write"].bytes.tolist() == [100] * LEFT


COLD = 300
# Files read whole from the disk: each one's page dropped from the cache before its read
COLD_JOB = ("import os, sys, time\n"
            "root = sys.argv[1]\n"
            "os.sync()\n"
            "time.sleep(1)\n"
            "for name in sorted(os.listdir(root)):\n"
            "    with open(os.path.join(root, name), 'rb') as f:\n"
            "        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)\n"
            "        f.read()\n")


@pytest.mark.parametrize("slots", [None, "file_slots=2"], ids=["slots", "log"])
def test_files_read_from_the_disk_are_folded_with_their_missed_pages(tmp_path, slots):
    """A file's missed pages count where its reads do, wherever that is (a slot, or a log
    record when other keys hold its slots): a file folded at its close leaves nothing behind,
    and each file is counted once, its page with it."""
    data = tmp_path / "cold"
    data.mkdir()
    for i in range(COLD):
        (data / f"f{i:03d}").write_bytes(b"c" * SIZE)
    out = tmp_path / "trace"
    env = {**os.environ, "IOTRACE_MAP_SIZES": slots} if slots else None
    r = run_iotrace("-o", str(out), "-i", "60", "--", sys.executable, "-c", COLD_JOB, str(data),
                    timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    cost = json.loads((out / "meta.json").read_text())["self_cost"]
    assert cost["map_full_drops"] == dict.fromkeys(cost["map_full_drops"], 0)
    # (fewer than past KEEP_FILES: a disk read's time stands out among the first hundreds')
    assert cost["files_rolled_up"]["kernel_folded_files"] >= COLD // 3
    files = pd.read_parquet(out / "files")
    reads = files[files.path.str.startswith(f"{data}/") & (files.op == "read")]
    own = reads[reads.path_source != "folder"]
    assert (own.ops > 0).all(), own[["path", "ops", "pages_missed"]].to_string()
    assert (int(reads.file_count.sum()), int(reads.bytes.sum()),
            int(reads.pages_missed.sum())) == (COLD, COLD * SIZE, COLD)


AGAIN, PASSES = 2000, 3
# A small data set read whole three times over within an interval
AGAIN_JOB = ("import os, sys, time\n"
             "root = sys.argv[1]\n"
             "time.sleep(1)\n"
             f"for _ in range({PASSES}):\n"
             "    for name in sorted(os.listdir(root)):\n"
             "        with open(os.path.join(root, name), 'rb') as f: f.read()\n")


def test_files_read_again_in_an_interval_are_counted_once(tmp_path):
    """A file the kernel folded at its close and read whole again in the same interval is
    folded again into the same row, where it is one file already: the rows count each file
    once, every byte with them. Not quite for a file whose two slots other keys hold: its
    log record is found again only by the thread's next read, so a later open makes another,
    and the file counts once more each time (1-2 % more files here; 13 % with one slot a
    key, and before, every file folded was counted again at each pass)."""
    data = tmp_path / "again"
    data.mkdir()
    for i in range(AGAIN):
        (data / f"f{i:03d}").write_bytes(b"a" * SIZE)
    out = tmp_path / "trace"
    r = run_iotrace("-o", str(out), "-i", "60", "--", sys.executable, "-c", AGAIN_JOB, str(data),
                    timeout=120)
    assert r.returncode == 0, r.stderr
    cost = json.loads((out / "meta.json").read_text())["self_cost"]
    assert cost["files_rolled_up"]["kernel_folded_files"] >= AGAIN // 4
    files = pd.read_parquet(out / "files")
    reads = files[files.path.str.startswith(f"{data}/") & (files.op == "read")]
    assert (len(reads.ts.unique()), int(reads.bytes.sum())) == (1, PASSES * AGAIN * SIZE)
    assert AGAIN <= int(reads.file_count.sum()) <= AGAIN + AGAIN // 20


LIGHT, LIGHT_FILES, LATE_FILES = 100, 4, 400
# light folders first, then one of many files: every folder past the process's KEEP_FILES
FOLDERS_JOB = ("import os, sys\n"
               "root = sys.argv[1]\n"
               "for d in sorted(os.listdir(root)):\n"
               "    for name in sorted(os.listdir(os.path.join(root, d))):\n"
               "        with open(os.path.join(root, d, name), 'rb') as f: f.read()\n")


def test_folders_past_the_keep_are_folded_into_their_parent(tmp_path):
    """A process's reads past KEEP_FILES folders in an interval (a shuffled image folder
    touches every class in every interval) are added up by the kernel in their folder's
    parent: the files of a folder first read past them are in the parent's row, whatever the
    folder's share (here most of the job's bytes), but for those the kernel did not fold (one
    that stood out when it was closed), and every file and byte is in the rows of the data's
    tree."""
    data = tmp_path / "data"
    for d in range(LIGHT):
        (data / f"c{d:03d}").mkdir(parents=True)
        for i in range(LIGHT_FILES):
            (data / f"c{d:03d}" / f"f{i}").write_bytes(b"x" * SIZE)
    (data / "z_late").mkdir()
    for i in range(LATE_FILES):
        (data / "z_late" / f"f{i:03d}").write_bytes(b"x" * SIZE)
    out = tmp_path / "trace"
    # one interval, one buffer: the run is shorter than it
    r = run_iotrace("-o", str(out), "-i", "60", "--", sys.executable, "-c", FOLDERS_JOB,
                    str(data), timeout=120)
    assert r.returncode == 0, r.stderr
    cost = json.loads((out / "meta.json").read_text())["self_cost"]
    assert cost["map_full_drops"] == dict.fromkeys(cost["map_full_drops"], 0)
    n = LIGHT * LIGHT_FILES + LATE_FILES
    assert cost["files_rolled_up"]["kernel_folded_files"] >= n - KEEP_FILES
    files = pd.read_parquet(out / "files")
    reads = files[files.path.str.startswith(f"{data}/") & (files.op == "read")]
    assert (len(reads.ts.unique()), int(reads.bytes.sum())) == (1, n * SIZE)
    folders = reads[reads.path_source == "folder"]
    own = reads[reads.path_source != "folder"]
    assert int(folders.file_count.sum()) + len(own) == n
    late = int(folders[folders.path == f"{data}/z_late/"].file_count.sum())
    assert late < LATE_FILES // 4  # all of them but for the parent's fold
    assert int(folders[folders.path == f"{data}/"].file_count.sum()) >= LATE_FILES - late
