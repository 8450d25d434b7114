"""Which file reads go to files already read once in this trace: the `files` rows' `reread_bytes`
and `reread_pages_missed`, from which the diagnosis tells a data set that does not fit in the
page cache (later passes miss again) from one whose first pass was cold.

Bounded at ImageNet scale (a million files and more): a file read in an earlier interval is a bit
in a fixed bitmap of 2**26 bits (8 MiB) indexed by a hash of (device, inode, generation), not an
entry of a set that grows with the files. Two files sharing a bit make the second one's first
read count as a re-read: at a million files about 1.5 % of them do, so a first pass never looks
like a pass that misses again. A per-folder counter of the bytes read could not do this: it
cannot tell the first pass over a large folder from the second pass over a small one.

A file counts as read once its reads stop, at the end of the first interval without a read of
it, or once read whole; the files read in the previous interval are kept apart (at most the
per-file table's entries). A file still read in the next interval is a shard read across
intervals, unless its reads by then add up to its size (the kernel's at the file's open, else
`size_of`, asked only for files not opened in either interval: a few shards), which begins its
next pass: a small data set read again right after its first pass. A single file read without
pause for the whole trace (a large file read at random offsets) is in its first pass
throughout: its re-reads are within a pass and are not counted.

The bitmap is the kernel's (`read_files`, given as `bitmap`): a file read whole since its open
and closed may be folded into its folder's row in the kernel (bpf/slots.bpf.h, fold_on_close),
which marks it there by the same hash, so a file read whole sets its bit at once here too.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tracer.core import abi

BITS = 26  # the bitmap's size: 2**26 bits, 8 MiB
REREAD_FIELDS = (("reread_bytes", "<u8"), ("reread_pages", "<u8"))
_MUL = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F),
        np.uint64(0x165667B19E3779F9))
_READ = next(code for code, name in abi.OPS.items() if name == "read")


def rows_dtype() -> np.dtype:
    """abi.file_counts_dtype with the two re-read counters after its fields: the dtype the
    session has the kernel's counters drained into (kernel.maps.Maps.drain_file_stats)."""
    return np.dtype(abi.file_counts_dtype().descr + list(REREAD_FIELDS))


def with_rereads(rows: np.ndarray) -> np.ndarray:
    """`rows` (abi.file_counts_dtype) with the two re-read counters, zero; rows that have
    them already, as they are."""
    if rows.dtype.names[-len(REREAD_FIELDS):] == tuple(n for n, _ in REREAD_FIELDS):
        return rows
    rows = np.ascontiguousarray(rows)
    out = np.zeros(len(rows), dtype=rows_dtype())
    # the fields of `rows` lead each row at the same offsets: copied as one block of bytes per
    # row (field by field took five times as long)
    n = rows.dtype.itemsize
    wide = out.dtype.itemsize
    out.view(np.uint8).reshape(len(rows), wide)[:, :n] = rows.view(np.uint8).reshape(len(rows), n)
    return out


def file_hash(dev: np.ndarray, ino: np.ndarray, gen: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each file's (device, inode, generation)."""
    with np.errstate(over="ignore"):
        x = (dev.astype(np.uint64) * _MUL[0] + ino.astype(np.uint64) * _MUL[1]
             + gen.astype(np.uint64) * _MUL[2])
    return x ^ (x >> np.uint64(29))


class Rereads:
    """Marks each interval's reads of files already read in an earlier one (see the module)."""

    def __init__(self, size_of: Callable[[int, int, int, int, int], int | None],
                 bitmap: Callable[[], np.ndarray] | None = None) -> None:
        # (pid, dev, ino, gen, its folder's inode) -> the file's size now; None: unknown
        self.size_of = size_of
        # the kernel's bitmap, mapped while used (kernel.maps.Maps.read_files: 2**BITS bits as
        # bytes, mapped until dropped); without one, a bitmap of its own, made at the first read
        self.bitmap = bitmap
        self._own: np.ndarray | None = None
        # the files read in the previous interval, sorted by hash: re-read?, bytes in this
        # pass, size (-1: not asked yet, -2: unknown)
        self.hashes = np.zeros(0, dtype=np.uint64)
        self.reread = np.zeros(0, dtype=bool)
        self.run = np.zeros(0, dtype=np.int64)
        self.size = np.zeros(0, dtype=np.int64)

    def mark(self, rows: np.ndarray) -> np.ndarray:
        """`rows` (one interval's per-file counters) with `reread_bytes` and `reread_pages`
        filled in for the reads of files read before."""
        out = with_rereads(rows)
        reads = np.flatnonzero((out["op"] == _READ) & (out["bytes"] > 0))
        if not len(reads) and not len(self.hashes):
            return out
        if self.bitmap is not None:
            self._mark(out, reads, self.bitmap())
        else:
            if self._own is None:
                self._own = np.zeros(1 << (BITS - 3), dtype=np.uint8)
            self._mark(out, reads, self._own)
        return out

    def _mark(self, out: np.ndarray, reads: np.ndarray, bits: np.ndarray) -> None:
        h = file_hash(out["dev"][reads], out["ino"][reads], out["gen"][reads])
        keys, first, inverse = np.unique(h, return_index=True, return_inverse=True)
        nbytes = np.bincount(inverse, weights=out["bytes"][reads]).astype(np.int64)
        at = np.searchsorted(self.hashes, keys)
        going = at < len(self.hashes)
        going[going] = self.hashes[at[going]] == keys[going]
        reread = self._bit(bits, keys)
        run = nbytes.copy()
        # the size the kernel saw at the file's open in this interval (0: not opened in it)
        size = np.zeros(len(keys), dtype=np.int64)
        np.maximum.at(size, inverse, out["size"][reads].astype(np.int64))
        size[size == 0] = -1
        going = np.flatnonzero(going)  # read in the previous interval too
        j = at[going]
        s = np.where(size[going] >= 0, size[going], self.size[j])
        for k in np.flatnonzero(s == -1):  # not opened in either: asked (a few shards)
            r = reads[first[going[k]]]
            got = self.size_of(int(out["tgid"][r]), int(out["dev"][r]), int(out["ino"][r]),
                               int(out["gen"][r]), int(out["dir_ino"][r]))
            s[k] = -2 if got is None else got
        size[going] = s
        whole = (s >= 0) & (s <= self.run[j])  # its whole size read already: the next pass
        reread[going[whole]] = True
        reread[going[~whole]] = self.reread[j][~whole]
        run[going[~whole]] += self.run[j][~whole]
        ended = np.ones(len(self.hashes), dtype=bool)
        ended[j] = False
        self._set(bits, self.hashes[ended])
        self._set(bits, keys[(size > 0) & (run >= size)])  # read whole: its later reads re-read
        self.hashes, self.reread, self.run, self.size = keys, reread, run, size
        again = reads[reread[inverse]]
        out["reread_bytes"][again] = out["bytes"][again]
        out["reread_pages"][again] = out["pages_missed"][again]

    def _index(self, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        i = h >> np.uint64(64 - BITS)
        return (i >> np.uint64(3)).astype(np.int64), (i & np.uint64(7)).astype(np.uint8)

    def _bit(self, bits: np.ndarray, h: np.ndarray) -> np.ndarray:
        byte, bit = self._index(h)
        return (bits[byte] >> bit) & 1 == 1

    def _set(self, bits: np.ndarray, h: np.ndarray) -> None:
        # Each byte is written back whole, not atomically: a bit the kernel sets in the same
        # byte in that instant is lost, and that file's next pass counts as a first one.
        if len(h):
            byte, bit = self._index(h)
            np.bitwise_or.at(bits, byte, (np.uint8(1) << bit).astype(np.uint8))
