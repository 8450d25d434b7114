"""Per-file counters of one interval, bounded: the files that matter most keep a row of their own,
the others are added up per folder, so that a job reading a million files writes rows by the
folder and still counts every operation and byte.

Input: the kernel's counters of one interval (arrays of `abi.file_counts_dtype()`): per (process,
file, op), and per (process, folder, op) for the operations that found the kernel's per-file
table full (their `ino` is the folder's). A file's opens count in its read or write key (struct
file_stat): a file's opens and reads keep a row or are added up together, and the rows out
give them rows of op open. Pure: numpy arrays in, numpy arrays out.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from tracer.core import abi

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

# Files per (process, op) and interval that keep a row of their own: a group of at most
# KEEP_FILES files keeps them all, so a job that reads a few files sees each of them in every
# interval. In a larger group, the files with at least KEEP_SHARE_PCT % of the group's time in
# syscalls, of its bytes or of its pages (missed and dirtied: a file mapped into memory has no
# syscall time), at most KEEP_FILES of them, the most time first (then bytes, then pages): a
# job that reads thousands of files alike (an image folder) has its folders' rows, which say as
# much, while a file that stands out still has its own.
KEEP_FILES = 64
KEEP_SHARE_PCT = 1
SUMMED = ("ops", "bytes", "latency_sum_ns", "pages_missed", "pages_dirtied", "opens",
          "open_latency_sum_ns")
# summed too where the rows carry them (tracer.live.rereads adds them before the roll-up)
SUMMED_IF_THERE = ("reread_bytes", "reread_pages")
LARGEST = ("latency_max_ns", "open_latency_max_ns", "dir_ino", "size")
# the fields a row of op open keeps of the row its opens were counted in (_opens_apart)
OPEN_KEPT = (*(name for name, _ in abi.FILE_KEY_FIELDS if name != "op"), "dir_ino",
             *abi.OPEN_FIELDS.values())
FOLDER_KEY = ("tgid", "dev", "ino", "op")  # a folder row's `ino` is the folder's
FILE_KEY = ("tgid", "dev", "ino", "gen", "op")


def _starts(columns: list[np.ndarray]) -> np.ndarray:
    """Where each run of equal values (in every one of `columns`, sorted together) starts."""
    import numpy as np

    n = len(columns[0])
    change = np.zeros(n, dtype=bool)
    change[:1] = True
    for col in columns:
        change[1:] |= col[1:] != col[:-1]
    return np.flatnonzero(change)


def take(rows: np.ndarray, index: np.ndarray) -> np.ndarray:
    """rows[index] (an array of indices or a mask), copied as whole rows: numpy copies the rows
    of a structured array a field at a time, ten times slower than as one block of bytes."""
    import numpy as np

    rows = np.ascontiguousarray(rows)
    return rows.view(np.dtype((np.void, rows.dtype.itemsize)))[index].view(rows.dtype)


def concat(parts: list[np.ndarray]) -> np.ndarray:
    """Arrays of one structured dtype as one, copied as blocks of bytes (np.concatenate copies
    them a field at a time, many times slower)."""
    import numpy as np

    dtype = parts[0].dtype
    whole = np.dtype((np.void, dtype.itemsize))
    return np.concatenate([np.ascontiguousarray(p).view(whole) for p in parts]).view(dtype)


def _hash(rows: np.ndarray | dict[str, np.ndarray], by: tuple[str, ...]) -> np.ndarray:
    """A 64-bit hash of each row's `by` fields (`rows`: rows, or their columns by name): equal
    fields, equal hashes."""
    import numpy as np

    h = np.zeros(len(rows[by[0]]), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for name in by:
            h = (h ^ rows[name].astype(np.uint64, copy=False)) * np.uint64(0x9E3779B97F4A7C15)
            h ^= h >> np.uint64(31)
    return h


# multipliers of the slot function, one per round of factorize (odd: a bijection of 64 bits)
_SLOT_MULS = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93)


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, first) of 64-bit `values`: equal values share a code, 0 .. groups - 1, and
    first[code] is the index of the group's first row. By hashing into a table rather than by
    sorting (np.unique's sort costs O(n log n) on every drain): each round scatters the rows
    still to place into a table by their slot; a row whose slot holds its own value
    (every slot holds one of its rows' values, so every round places some) takes the slot's
    code; the others go to the next round with another slot function."""
    import numpy as np

    n = len(values)
    codes = np.empty(n, dtype=np.intp)
    todo = np.arange(n)
    vals = values.astype(np.uint64, copy=False)
    base, turn = 0, 0
    while len(todo):
        # a first table small enough to stay in the CPU's cache, which places every row when
        # the groups are few (a drain's folders); then tables with most rows alone in a slot
        bits = min(max((4 * len(todo)).bit_length(), 8), 12 if turn == 0 else 20)
        with np.errstate(over="ignore"):
            slot = ((vals * np.uint64(_SLOT_MULS[turn % len(_SLOT_MULS)]))
                    >> np.uint64(64 - bits)).astype(np.intp)
        table = np.empty(1 << bits, dtype=np.intp)
        table[slot] = np.arange(len(todo))  # one of each slot's rows: which one does not matter
        placed = vals[table[slot]] == vals
        used = np.zeros(1 << bits, dtype=bool)
        used[slot[placed]] = True
        taken = np.flatnonzero(used)
        table[taken] = np.arange(base, base + len(taken))  # a slot's code
        codes[todo[placed]] = table[slot[placed]]
        base += len(taken)
        todo, vals = todo[~placed], vals[~placed]
        turn += 1
    first = np.full(base, n, dtype=np.intp)
    np.minimum.at(first, codes, np.arange(n))
    return codes, first


def _codes(rows: np.ndarray | dict[str, np.ndarray], by: tuple[str, ...]
           ) -> tuple[np.ndarray, np.ndarray]:
    """factorize's (codes, first) for the rows' `by` fields (`rows`: rows, or their columns by
    name): a code per distinct key. Factorized by a hash of the fields, each row then checked
    against its group's first; where two different keys share a hash, by a sort of every
    field."""
    import numpy as np

    codes, first = factorize(_hash(rows, by))
    if all((rows[name][first][codes] == rows[name]).all() for name in by):
        return codes, first
    order = np.lexsort([rows[name] for name in reversed(by)])  # a collision
    starts = _starts([rows[name][order] for name in by])
    codes = np.empty(len(order), dtype=np.intp)
    codes[order] = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(order))))
    first = np.full(len(starts), len(order), dtype=np.intp)
    np.minimum.at(first, codes, np.arange(len(order)))
    return codes, first


def add_up(rows: np.ndarray, by: tuple[str, ...], weights: np.ndarray | None = None,
           index: np.ndarray | None = None, group_by: tuple[str, ...] | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """Rows with equal `by` fields as one, sorted by `by`: counts summed, maxima the largest,
    the other fields the first row's; and the sum of `weights` (default 1 per row; a column
    or several) of each.
    `index`: the rows to add up (positions in `rows`; default all), read in place rather than
    copied (an interval's are megabytes). `group_by`: fields whose values are those of `by`
    for every row added up here (the caller sets `by` in the rows made). A column at a time,
    each added into its group's place in one pass (np.add.at): no sort of the rows."""
    import numpy as np

    group_by = group_by or by
    n = len(rows) if index is None else len(index)
    if weights is None:
        weights = np.ones(n, dtype=np.int64)
    if not n:
        return (rows.copy() if index is None else take(rows, index)), weights[:0].copy()
    keys = {name: rows[name] if index is None else rows[name][index] for name in group_by}
    codes, first = _codes(keys, group_by)
    groups = len(first)
    # the groups in the order of their keys, as a sort of the rows by `by` gives them
    by_key = np.lexsort([keys[name][first] for name in reversed(group_by)])
    out = take(rows, first[by_key] if index is None else index[first[by_key]])
    if groups == n:  # nothing to add up (the usual case for files)
        return out, weights[first[by_key]]
    place = np.empty(groups, dtype=np.intp)
    place[by_key] = np.arange(groups)
    at = place[codes]
    if index is not None:  # every row's place, the rows not added up in one past the groups
        at_all = np.full(len(rows), groups, dtype=np.intp)
        at_all[index] = at
        at = at_all
    for name in SUMMED + tuple(n for n in SUMMED_IF_THERE if n in rows.dtype.names):
        total = np.zeros(groups + 1, dtype=rows.dtype[name])
        np.add.at(total, at, rows[name])
        out[name] = total[:groups]
    for name in LARGEST:  # (unsigned: 0 is the least)
        largest = np.zeros(groups + 1, dtype=rows.dtype[name])
        np.maximum.at(largest, at, rows[name])
        out[name] = largest[:groups]
    summed = np.zeros((groups, *weights.shape[1:]), dtype=weights.dtype)
    np.add.at(summed, place[codes], weights)
    return out, summed


def _add_up_repeats(rows: np.ndarray) -> np.ndarray:
    """`rows` with the rows of a key found several times (in a slot and in the log, or in two
    drains) added up as one, after the others; the rows as they are when there are none.
    Only the repeated rows are added up: a drain has a few of them among tens of thousands."""
    import numpy as np

    if not len(rows):
        return rows
    codes, first = _codes(rows, FILE_KEY)
    if len(first) == len(rows):
        return rows
    alone = np.bincount(codes)[codes] == 1
    again, _ = add_up(rows, FILE_KEY, index=np.flatnonzero(~alone))
    return concat([take(rows, alone), again])


def _measures(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What a file is weighed by: its time (of the op and of the opens counted in its key), its
    bytes, its pages (missed and dirtied)."""
    return (rows["latency_sum_ns"] + rows["open_latency_sum_ns"], rows["bytes"],
            rows["pages_missed"] + rows["pages_dirtied"])


def _group(rows: np.ndarray) -> np.ndarray:
    import numpy as np

    return (rows["tgid"].astype(np.uint64) << np.uint64(8)) | rows["op"]  # (exact)


def _folded_groups(folded: np.ndarray, n_files: np.ndarray) -> dict[int, list[int]]:
    """Per (tgid, op) group: [files, time, bytes, pages] of the files the kernel folded
    (exact sums: reduceat over the rows sorted by group)."""
    import numpy as np

    groups, inverse = np.unique(_group(folded), return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    starts = np.searchsorted(inverse[order], np.arange(len(groups)))
    sums = [np.add.reduceat(x.astype(np.uint64)[order], starts).tolist()
            for x in (n_files, *_measures(folded))]
    return {g: [s[i] for s in sums] for i, g in enumerate(groups.tolist())}


def _kept(files: np.ndarray, keep: int, folded: dict[int, list[int]] | None = None
          ) -> np.ndarray:
    """Indices of the rows that keep their own: per (tgid, op), all of a group of at most `keep`
    files; of a larger one, the `keep` largest by (time, bytes, pages missed + dirtied) of those
    with KEEP_SHARE_PCT of the group's time, bytes or pages (time: of the op and of the opens
    counted in its key); ties in the order of the rows. `folded`: the files of each group the
    kernel folded at their close (_folded_groups), which count in its files and totals. Listed
    by tgid, op, then largest first. Sorts only each group's candidates (the rows whose time
    is at least the group's keep-th largest), not every row of the interval."""
    import numpy as np

    folded = folded or {}
    group = _group(files)
    codes, first = factorize(group)
    # the rows by group: a stable sort of the few groups' codes (a radix sort as 16 bits)
    order = np.argsort(codes.astype(np.uint16) if len(first) <= 1 << 16 else codes,
                       kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(codes)))).tolist()
    measures = _measures(files)
    lat, pages = measures[0], measures[2]
    groups = group[first].tolist()
    picked = []
    for code, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        rows = order[lo:hi]
        more = folded.get(groups[code], (0, 0, 0, 0))
        if hi - lo + more[0] > keep:
            stands_out = np.zeros(len(rows), dtype=bool)
            for m, extra in zip(measures, more[1:], strict=True):
                values = m[rows]
                total = int(values.sum()) + extra
                if total:
                    stands_out |= values * 100 >= total * KEEP_SHARE_PCT
            rows = rows[stands_out]
            if len(rows) > keep:
                cut = np.partition(lat[rows], len(rows) - keep)[len(rows) - keep]
                rows = rows[lat[rows] >= cut]
        picked.append(rows)
    cand = np.concatenate(picked)
    c = take(files, cand)
    # largest first: the negated counts (all far below 2**63); ties: the row first in `files`
    by_rank = np.lexsort((cand, -pages[cand].astype(np.int64),
                          -c["bytes"].astype(np.int64), -lat[cand].astype(np.int64),
                          c["op"], c["tgid"]))
    group_starts = _starts([c["tgid"][by_rank], c["op"][by_rank]])
    sizes = np.diff(np.append(group_starts, len(c)))
    rank = np.arange(len(c)) - np.repeat(group_starts, sizes)  # within its (tgid, op)
    return cand[by_rank[rank < keep]]


def _used(rows: np.ndarray) -> np.ndarray:
    """The rows with operations or pages of their own (not only opens counted in their key)."""
    return (rows["ops"] != 0) | (rows["pages_missed"] != 0) | (rows["pages_dirtied"] != 0)


def _opens_apart(rows: np.ndarray, n_files: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`rows` with the opens counted in them moved to rows of op open after the others (the
    key and dir_ino theirs, every other field zero but the opens as ops and their latency), and
    the files of each row: `n_files` has two columns, the files with ops or pages and those with
    opens. A key that was only opened keeps its row of op open only."""
    import numpy as np

    used = _used(rows)
    opened = np.flatnonzero(rows["opens"])
    out = concat([take(rows, used), take(rows, opened)])
    opens = out[int(used.sum()):]
    for name in out.dtype.names:
        if name not in OPEN_KEPT:
            opens[name] = 0
    opens["op"] = abi.OP_OPEN
    for name, source in abi.OPEN_FIELDS.items():
        opens[name] = opens[source]
    for source in abi.OPEN_FIELDS.values():
        out[source] = 0
    return out, np.concatenate([n_files[used, 0], n_files[opened, 1]])


def split(files: np.ndarray, folders: np.ndarray, keep: int = KEEP_FILES,
          folded: np.ndarray | None = None, folded_files: np.ndarray | None = None
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(own, folder rows, files per folder row). A key found twice (in a slot and in the map)
    is added up first. Per (process, op), the `keep` files that matter most are `own`; the
    others are added up per (process, folder, op), with the kernel's folder counts and the
    files it folded at their close (`folded`, `folded_files` files in each row; they count in
    the groups the rule weighs the files against). Then the opens counted in each row are a
    row of op open (_opens_apart): every row out has operations or pages."""
    import numpy as np

    if folded is None or folded_files is None:
        folded, folded_files = folders[:0], np.zeros(0, dtype=np.int64)
    files = _add_up_repeats(files)  # a key in its slot and in the log or the map
    if len(files):
        at = _kept(files, keep, _folded_groups(folded, folded_files) if len(folded) else None)
        others = np.ones(len(files), dtype=bool)
        others[at] = False
        own = take(files, at)
    else:
        own, others = files, np.zeros(0, dtype=bool)
    # (files with ops or pages, files opened) of each row: a file counts in a folder row's
    # files for each of the two rows it has a part in
    counted = np.stack([_used(files), files["opens"] != 0], axis=1).astype(np.int64)
    own, _ = _opens_apart(own, np.ones((len(own), 2), dtype=np.int64))
    if not len(folders) and not len(folded):  # the files' folders only, read in place
        index = np.flatnonzero(others)
        folder_rows, n_files = add_up(files, FOLDER_KEY, counted[index], index=index,
                                      group_by=("tgid", "dev", "dir_ino", "op"))
        folder_rows["ino"] = folder_rows["dir_ino"]
        folder_rows["gen"] = 0
        return (own, *_opens_apart(folder_rows, n_files))
    rest = take(files, others)
    rest["ino"] = rest["dir_ino"]
    rest["gen"] = 0
    kernel = folders.copy()
    kernel["gen"] = 0
    rows = concat([rest, kernel, folded])
    # a folded file was read and opened: it counts in both of its folder's rows
    weights = np.concatenate([counted[others], np.zeros((len(kernel), 2), dtype=np.int64),
                              np.repeat(folded_files.astype(np.int64)[:, None], 2, axis=1)])
    folder_rows, n_files = add_up(rows, FOLDER_KEY, weights)
    return (own, *_opens_apart(folder_rows, n_files))


def merge(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]], keep: int = KEEP_FILES
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """split's results for several drains of one interval (the kernel's buffer taken out
    before the interval's end when it filled: bpf/slots.bpf.h) as one interval's: a key's rows
    in several drains added up; per (process, op), of the files the drains kept, the `keep`
    that matter most in the interval keep their rows, the others are added up per folder with
    the drains' folder rows. Each drain is rolled up as it comes, so the tracer holds a
    drain's rows at a time, not an interval's: a file no drain kept is in its folder's row,
    and a file in a folder row of two drains counts in its file_count twice."""
    import numpy as np

    own = concat([p[0] for p in parts])
    rows = [p[1] for p in parts]
    weights = [p[2] for p in parts]
    own = _add_up_repeats(own)
    if len(own):
        at = _kept(own, keep)
        others = np.ones(len(own), dtype=bool)
        others[at] = False
        rest = take(own, others)
        own = take(own, at)
        rest["ino"] = rest["dir_ino"]
        rest["gen"] = 0
        rows.append(rest)
        weights.append(np.ones(len(rest), dtype=np.int64))
    return (own, *add_up(concat(rows), FOLDER_KEY, np.concatenate(weights)))


def fold_folders(rows: np.ndarray, n_files: np.ndarray, parent: Callable[[int, int], int],
                 keep: int = KEEP_FILES) -> tuple[np.ndarray, np.ndarray]:
    """Folder rows (split's) and the files in each, bounded as files are: per (process, op),
    past `keep` rows, those that matter least (the rule of `keep` files) are added up in their
    parent folder's row, level by level, until each (process, op) has at most `keep` or no row
    can go up. A job that reads its class folders in a random order touches most of them in
    every interval: their rows, one per worker, folder and op, cost the tracer more than the
    files did. `parent(dev, folder inode)`: the parent folder's inode on the same device, or 0
    where it is not known (that row stays)."""
    import numpy as np

    while len(rows) > keep:
        at = _kept(rows, keep)
        if len(at) == len(rows):
            break
        others = np.ones(len(rows), dtype=bool)
        others[at] = False
        # one parent() call per folder, not per row
        dev, ino = rows["dev"][others], rows["ino"][others]
        which, firsts = _codes({"dev": dev, "ino": ino}, ("dev", "ino"))
        pairs = zip(dev[firsts].tolist(), ino[firsts].tolist(), strict=True)
        ups = np.array([parent(d, i) for d, i in pairs], dtype=rows["ino"].dtype)
        up = ups[which]
        goes = (up != 0) & (up != rows["ino"][others])
        moved = np.flatnonzero(others)[goes]
        if not len(moved):
            break
        out = rows.copy()
        out["ino"][moved] = up[goes]
        out["dir_ino"][moved] = up[goes]
        rows, n_files = add_up(out, FOLDER_KEY, n_files)
    return rows, n_files
