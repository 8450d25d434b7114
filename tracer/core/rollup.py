"""Per-file counters of one interval, bounded: the files that matter most keep a row of their own,
the others are added up per folder, so that a job reading a million files writes rows by the
folder and still counts every operation and byte.

Input: the kernel's counters of one interval (arrays of `abi.file_counts_dtype()`): per (process,
file, op), and per (process, folder, op) for the operations that found the kernel's per-file
table full (their `ino` is the folder's). Pure: numpy arrays in, numpy arrays out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# Files per (process, op) and interval that keep a row of their own: the KEEP_FILES with the
# most time in syscalls (then bytes, then pages). A group of fewer files keeps them all, so a
# job that reads a few files sees each of them in every interval.
KEEP_FILES = 64
SUMMED = ("ops", "bytes", "latency_sum_ns", "pages_missed", "pages_dirtied")
# summed too where the rows carry them (tracer.live.rereads adds them before the roll-up)
SUMMED_IF_THERE = ("reread_bytes", "reread_pages")
LARGEST = ("latency_max_ns", "dir_ino")
FOLDER_KEY = ("tgid", "dev", "ino", "op")  # a folder row's `ino` is the folder's


def _starts(columns: list[np.ndarray]) -> np.ndarray:
    """Where each run of equal values (in every one of `columns`, sorted together) starts."""
    import numpy as np

    n = len(columns[0])
    change = np.zeros(n, dtype=bool)
    change[:1] = True
    for col in columns:
        change[1:] |= col[1:] != col[:-1]
    return np.flatnonzero(change)


def add_up(rows: np.ndarray, by: tuple[str, ...], weights: np.ndarray | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """Rows with equal `by` fields as one: counts summed, maxima the largest; and the sum of
    `weights` (default 1 per row) of each. Sorted a column at a time: a million rows cost a
    few of their columns of memory, not copies of the rows."""
    import numpy as np

    if weights is None:
        weights = np.ones(len(rows), dtype=np.int64)
    if not len(rows):
        return rows.copy(), weights[:0].copy()
    order = np.lexsort([rows[name] for name in reversed(by)])
    starts = _starts([rows[name][order] for name in by])
    if len(starts) == len(rows):  # nothing to add up (the usual case for files)
        return rows[order], weights[order]
    out = rows[order[starts]]
    for name in SUMMED + tuple(n for n in SUMMED_IF_THERE if n in rows.dtype.names):
        out[name] = np.add.reduceat(rows[name][order], starts)
    for name in LARGEST:
        out[name] = np.maximum.reduceat(rows[name][order], starts)
    return out, np.add.reduceat(weights[order], starts)


def split(files: np.ndarray, folders: np.ndarray, keep: int = KEEP_FILES
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(own, folder rows, files per folder row). A key found twice (in a slot and in the map)
    is added up first. Per (process, op), the `keep` files that matter most are `own`; the
    others are added up per (process, folder, op), with the kernel's folder counts."""
    import numpy as np

    key = ("tgid", "dev", "ino", "gen", "op")
    if len(files):
        order = np.lexsort([files[name] for name in reversed(key)])
        if len(_starts([files[name][order] for name in key])) < len(files):
            files, _ = add_up(files, key)  # rare: a key in its slot and in the map
    if len(files):
        # largest first: the negated counts (all far below 2**63)
        order = np.lexsort((-(files["pages_missed"] + files["pages_dirtied"]).astype(np.int64),
                            -files["bytes"].astype(np.int64),
                            -files["latency_sum_ns"].astype(np.int64),
                            files["op"], files["tgid"]))
        starts = _starts([files["tgid"][order], files["op"][order]])
        sizes = np.diff(np.append(starts, len(files)))
        rank = np.arange(len(files)) - np.repeat(starts, sizes)  # within its (tgid, op)
        own, rest = files[order[rank < keep]], files[order[rank >= keep]]
    else:
        own, rest = files, files.copy()
    rest["ino"] = rest["dir_ino"]
    rest["gen"] = 0
    rows, weights = rest, np.ones(len(rest), dtype=np.int64)
    if len(folders):
        kernel = folders.copy()
        kernel["gen"] = 0
        rows = np.concatenate([rest, kernel])
        weights = np.concatenate([weights, np.zeros(len(kernel), dtype=np.int64)])
    folder_rows, n_files = add_up(rows, FOLDER_KEY, weights)
    return own, folder_rows, n_files
