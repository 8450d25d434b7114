"""Which reads go to files already read in an earlier interval (tracer.live.rereads): the files
read once, a shard read across intervals, a small data set read again right after its first
pass, and the counts through the roll-up per folder."""

from __future__ import annotations

import numpy as np

from tracer.core import abi, rollup
from tracer.live.rereads import Rereads, with_rereads

READ, OPEN = 0, 6
KIB = 1024


def rows(*reads: tuple) -> np.ndarray:
    """(pid, ino, bytes, pages missed[, op]) per row: one interval's per-file counters."""
    out = np.zeros(len(reads), dtype=abi.file_counts_dtype())
    for i, (pid, ino, nbytes, missed, *op) in enumerate(reads):
        out[i]["tgid"], out[i]["dev"], out[i]["ino"], out[i]["gen"] = pid, 8, ino, 1
        out[i]["op"] = op[0] if op else READ
        out[i]["ops"], out[i]["bytes"], out[i]["pages_missed"] = 1, nbytes, missed
        out[i]["dir_ino"] = 2
    return out


def reread(r: Rereads, *reads: tuple) -> list[tuple[int, int]]:
    got = r.mark(rows(*reads))
    return list(zip(got["reread_bytes"].tolist(), got["reread_pages"].tolist(), strict=True))


def sizes(**by_ino: int):
    asked = []

    def size_of(pid, dev, ino, gen, dir_ino):
        asked.append(ino)
        return by_ino.get(f"i{ino}")
    return size_of, asked


def test_a_file_read_again_in_a_later_pass():
    size_of, asked = sizes()
    r = Rereads(size_of)
    assert reread(r, (10, 1, 512 * KIB, 128), (10, 2, 512 * KIB, 128)) == [(0, 0), (0, 0)]
    assert reread(r, (10, 3, 512 * KIB, 128)) == [(0, 0)]  # 1 and 2 are read ones now
    # another process (a worker of the next epoch) reads 1 again, from disk; 3 stays new: its
    # reads went on into this interval (a file read across two), and its size is unknown
    assert reread(r, (11, 1, 512 * KIB, 100), (11, 3, 4 * KIB, 1),
                  (11, 4, 8 * KIB, 2, OPEN)) == [(512 * KIB, 100), (0, 0), (0, 0)]
    assert asked == [3]  # only a file read in two intervals in a row is asked for its size


def test_a_shard_read_across_intervals_is_one_pass_until_its_size_is_read():
    size_of, asked = sizes(i7=3 << 20)
    r = Rereads(size_of)
    for _ in range(3):
        assert reread(r, (10, 7, 1 << 20, 256)) == [(0, 0)]
    # its 3 MiB were read: what follows without a pause is its next pass
    assert reread(r, (10, 7, 1 << 20, 256)) == [(1 << 20, 256)]
    assert reread(r, (10, 7, 1 << 20, 0)) == [(1 << 20, 0)]  # and stays so
    assert asked == [7]  # asked once


def test_a_small_data_set_read_again_at_once():
    """Epoch 2 right after epoch 1: a file read at the end of one and the start of the next,
    in two intervals in a row, has been read whole: its second reads are a later pass."""
    size_of, _ = sizes(i1=512 * KIB)
    r = Rereads(size_of)
    reread(r, (10, 1, 512 * KIB, 128))
    assert reread(r, (10, 1, 512 * KIB, 0)) == [(512 * KIB, 0)]


def test_the_kernels_size_at_an_open_asks_nothing():
    """A file opened in the interval has the size the kernel saw at its open in its row: a
    data set of small files read again in the next interval (a long interval, a short epoch)
    asks user space for no file's size, where it once named and stat'ed every one."""
    size_of, asked = sizes()
    r = Rereads(size_of)
    first = rows((10, 1, 4 * KIB, 1), (10, 2, 4 * KIB, 1))
    first["size"] = 4 * KIB
    r.mark(first)
    again = rows((11, 1, 4 * KIB, 0), (11, 2, 2 * KIB, 0))
    again["size"] = [4 * KIB, 8 * KIB]  # 2 grew: its first pass goes on
    got = r.mark(again)
    assert got["reread_bytes"].tolist() == [4 * KIB, 0]
    assert asked == []


def test_two_readers_of_one_file_in_one_interval():
    size_of, _ = sizes()
    r = Rereads(size_of)
    reread(r, (10, 1, 4 * KIB, 1))
    reread(r)  # nothing read: 1 is a read file now
    assert reread(r, (10, 1, 4 * KIB, 1), (11, 1, 4 * KIB, 0)) == [(4 * KIB, 1), (4 * KIB, 0)]


def test_the_roll_up_adds_them_per_folder():
    size_of, _ = sizes()
    r = Rereads(size_of)
    first = [(10, ino, 4 * KIB, 1) for ino in range(100, 200)]
    r.mark(rows(*first))
    r.mark(rows())
    again = r.mark(rows(*first))
    own, folders, n = rollup.split(again, with_rereads(rows()))
    assert len(own) == rollup.KEEP_FILES and n.tolist() == [100 - rollup.KEEP_FILES]
    total = int(own["reread_bytes"].sum() + folders["reread_bytes"].sum())
    assert total == 100 * 4 * KIB
    assert int(folders["reread_pages"].sum()) == 100 - rollup.KEEP_FILES
