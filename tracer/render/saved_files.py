"""The files of a saved trace as the summary totals and names them, from its `files` rows:
what `iotrace report` shows of them, and what the live run shows at its end once it has
closed its trace, so that both print the same top files (the rows key a file by its path,
not by the inode generation the live run's totals know).

Added up with pyarrow and numpy, without pandas: importing it was 30 MiB of the live run's
peak, at its end."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from tracer.core.model import FileTotals
from tracer.core.redact import Redactor
from tracer.tracedir.sums import Strings, ints

_STRINGS = ("device", "path", "op", "path_source", "fs_type")
_KEYS = ("device", "inode", "path", "pid", "op")  # a total's: (process, file) and op
_SUMS = ("known_ops", "bytes", "latency_sum_ns", "pages_missed", "pages_dirtied", "unknown_ops")
SAVED_COLUMNS = ["pid", "inode", *_STRINGS, "ops", "bytes", "latency_sum_ns", "latency_max_ns",
                 "pages_missed", "pages_dirtied"]
"""The `files` columns the totals and names are made of."""


@dataclass(frozen=True)
class SavedFile:
    """A file as the summary names it, from its `files` rows."""

    path: str
    path_source: str
    fs_type: str
    device: str


class SavedPaths:
    """The files of saved rows, by (device, inode, path): what render_summary names them by."""

    def __init__(self) -> None:
        self.by_id: dict[tuple[str, int, str], SavedFile] = {}
        self.redact = Redactor(False)  # the saved paths are as the trace has them

    def get(self, dev, ino, gen, pid=None, dir_ino=0) -> SavedFile:
        return self.by_id[(dev, ino, gen)]  # (every saved row has its path)


def file_totals_from_files(files) -> tuple[dict, SavedPaths]:
    """The summary's totals per (process, file) of `files` rows, and the files' names."""
    return file_totals_from_segments([files])


def file_totals_from_segments(segments: Iterable[pa.Table | pa.RecordBatch]
                              ) -> tuple[dict, SavedPaths]:
    """The same, added up a row group at a time (`TraceTables.row_groups`): sums, maxima and the
    last name of a file are what the whole table gives, with one segment's rows held at a
    time (the live run's end, after a day of tracing). A segment has the `files` schema; a
    pandas DataFrame of it is converted (by pyarrow: this module imports no pandas)."""
    return _added(segments).result()[:2]


def top_file_totals(segments: Iterable[pa.Table | pa.RecordBatch], n: int
                    ) -> tuple[dict, SavedPaths, int]:
    """Of the totals `file_totals_from_segments` gives, only the `n` pairs the summary shows
    first and their files' names, and how many pairs there are: what the live run's end
    prints."""
    return _added(segments).result(n)


def _added(segments: Iterable[pa.Table | pa.RecordBatch]) -> _Totals:
    totals = _Totals()
    for files in segments:
        if not isinstance(files, pa.RecordBatch | pa.Table):  # a DataFrame: pandas is loaded
            files = pa.Table.from_pandas(files, columns=SAVED_COLUMNS, preserve_index=False)
        # a batch at a time: a column's chunks may each have a dictionary of their own, and a
        # batch's column is one array, its indices into one dictionary
        for batch in [files] if isinstance(files, pa.RecordBatch) else (
                files.select(SAVED_COLUMNS).to_batches(max_chunksize=1 << 18)):
            totals.add(batch)
    return totals


class _Totals:
    """The (process, file, op) groups of the rows so far, as numpy arrays: a batch's rows are
    added to them vectorised, and the summary's FileTotals made once, of the groups (a day's
    segments have the same files over and over; a Python loop per segment took seconds)."""

    def __init__(self) -> None:
        # a string's number per column, the same in every segment (each has a dictionary of
        # its own)
        self.strings = {c: Strings() for c in _STRINGS}
        self.rows = 0  # rows added: a row's number is its place in the whole table
        self.groups: dict[str, np.ndarray] = {}

    def add(self, files: pa.RecordBatch) -> None:
        n = files.num_rows
        if n == 0:
            return
        rows = {c: self.strings[c].codes(files.column(c)) for c in _STRINGS}
        rows |= {c: ints(files, c) for c in ("pid", "inode", "bytes", "latency_sum_ns",
                                             "pages_missed", "pages_dirtied")}
        # The slowest operation is known for the rows that say it (latency_max_ns > 0), and a
        # row with operations that does not makes the maximum of its (process, op) unknown;
        # a row without operations has no slowest one (as FileTotals.add has it).
        ops, max_ns = ints(files, "ops"), ints(files, "latency_max_ns")
        known = (max_ns > 0) & (ops > 0)
        number = np.arange(self.rows, self.rows + n)
        rows |= {"known_ops": np.where(known, ops, 0), "unknown_ops": np.where(known, 0, ops),
                 "known_max_ns": np.where(known, max_ns, 0), "first": number, "last": number}
        self.rows += n
        # the batch's rows to its groups first: what is merged then is a few per file
        self.groups = _merge(self.groups, _reduce(rows, _KEYS))

    def result(self, top: int | None = None) -> tuple[dict[tuple, FileTotals], SavedPaths, int]:
        """The totals per (process, file) and the files' names, and how many such pairs there
        are. With `top`, only the `top` pairs the summary ranks first (`render_top_files`: most
        time in syscalls, then bytes; ties in the order the rows first have them) and their
        files: a FileTotals and a name for each of tens of thousands of pairs were most of the
        live run's end at a million files."""
        totals: dict[tuple, FileTotals] = {}
        table = SavedPaths()
        if not self.groups:
            return totals, table, 0
        groups = self.groups
        pair, count = _groups([groups[k] for k in ("pid", "device", "inode", "path")])
        if top is not None and count > top:
            time_ns = _at(np.add, pair, count, groups["latency_sum_ns"], 0)
            nbytes = _at(np.add, pair, count, groups["bytes"], 0)
            first = _at(np.minimum, pair, count, groups["first"], np.iinfo(np.int64).max)
            chosen = np.zeros(count, dtype=bool)
            chosen[np.lexsort((first, -nbytes, -time_ns))[:top]] = True
            groups = {c: v[chosen[pair]] for c, v in groups.items()}

        strings = {c: s.names for c, s in self.strings.items()}  # by number

        def in_order(groups: dict[str, np.ndarray], by: str, *columns: str) -> list[list]:
            """`columns` of `groups` as lists, in the order of column `by`, strings named."""
            order = np.argsort(groups[by])
            return [[names[i] for i in v] if (names := strings.get(c)) else v
                    for c in columns for v in [groups[c][order].tolist()]]

        # The table has no inode generation: a reused inode number's files differ by their
        # paths (each is the one the kernel sent for that generation), so the path takes its
        # place in the key. A file's name is its last row's.
        files = _reduce({c: self.groups[c] for c in ("device", "inode", "path", "path_source",
                                                     "fs_type", "last")},
                        ("device", "inode", "path"))
        # The totals' keys in the order the rows first have them (pandas' groupby gave them
        # so): the summary's ties keep it.
        for pid, dev, ino, path, op, known_ops, nbytes, lat_ns, missed, dirtied, unknown_ops, m in (
                zip(*in_order(groups, "first", "pid", "device", "inode", "path", "op",
                              *_SUMS, "known_max_ns"), strict=True)):
            t = totals.get(key := (pid, dev, ino, path))
            if t is None:
                t = totals[key] = FileTotals()
            t.add(op, known_ops, nbytes, lat_ns, missed, dirtied, m)
            t.add(op, unknown_ops, 0, 0, 0, 0, 0)
        named = {key[1:] for key in totals}
        for dev, ino, path, source, fs in zip(*in_order(
                files, "last", "device", "inode", "path", "path_source", "fs_type"), strict=True):
            if (dev, ino, path) in named:
                table.by_id[(dev, ino, path)] = SavedFile(path, source, fs, dev)
        return totals, table, count


def _merge(groups: dict[str, np.ndarray], more: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The groups of `groups` and `more` (of later rows) together."""
    if not groups:
        return more
    return _reduce({c: np.concatenate((groups[c], v)) for c, v in more.items()}, _KEYS)


def _reduce(rows: dict[str, np.ndarray], keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """`rows` a row per distinct `keys`: its sums (_SUMS), maxima, first row number, and its
    last row's number and other columns (path_source, fs_type)."""
    group, count = _groups([rows[k] for k in keys])
    last = rows["last"]
    out = {"last": _at(np.maximum, group, count, last, -1)}
    at = np.empty(count, np.intp)  # each group's last row
    is_last = last == out["last"][group]  # (one per group: a row is in one group)
    at[group[is_last]] = np.flatnonzero(is_last)
    for c, v in rows.items():
        if c in _SUMS:
            out[c] = _at(np.add, group, count, v, 0)
        elif c == "known_max_ns":
            out[c] = _at(np.maximum, group, count, v, 0)
        elif c == "first":
            out[c] = _at(np.minimum, group, count, v, np.iinfo(np.int64).max)
        elif c != "last":  # the keys, path_source and fs_type
            out[c] = v[at]
    return out


def _at(ufunc: np.ufunc, group: np.ndarray, count: int, values: np.ndarray, start: int
        ) -> np.ndarray:
    """`ufunc` of each group's `values`."""
    out = np.full(count, start, np.int64)
    ufunc.at(out, group, values)
    return out


def _groups(keys: list[np.ndarray]) -> tuple[np.ndarray, int]:
    """Each row's group of equal `keys`, numbered 0.. as they first come, and how many."""
    n = len(keys[0])
    key, size = np.zeros(n, np.int64), 1
    for k in keys:
        lo = int(k.min())
        span = int(k.max()) - lo + 1
        if span > n:  # sparse (inode numbers)
            k, span = _numbered(k)
        else:
            k = k - lo
        if size * span >= 2**63:  # the keys so far numbered first: the product fits in an int64
            key, size = _numbered(key)
        key = key * span + k
        size *= span
    return _numbered(key)


def _numbered(values: np.ndarray) -> tuple[np.ndarray, int]:
    """`values` numbered 0.. as they first come, and how many distinct: hashed, by pyarrow's
    dictionary_encode (numpy's unique sorts; most of the time it took)."""
    values = np.ascontiguousarray(values, np.int64)
    encoded = pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)]
                                    ).dictionary_encode()
    return encoded.indices.to_numpy(), len(encoded.dictionary)
