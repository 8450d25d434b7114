"""The files of a saved trace as the summary totals and names them, from its `files` rows:
what `iotrace report` shows of them, and what the live run shows at its end once it has
closed its trace, so that both print the same top files (the rows key a file by its path,
not by the inode generation the live run's totals know)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from tracer.core.model import FileTotals
from tracer.core.redact import Redactor


def grouped(df: pd.DataFrame, keys: list[str], **agg: tuple[str, str]) -> pd.DataFrame:
    """`agg` (pandas' named aggregations) per distinct `keys`, nulls a key of their own, in one
    pass over the rows: a day of trace has millions of them. The groups are in the order they
    first appear; a dictionary column's values come back as str, its nulls as NaN. Grouped by
    the dictionary's codes (null: -1): hashing each row's strings was most of the time."""
    cats = {k: df[k].cat for k in keys if isinstance(df[k].dtype, pd.CategoricalDtype)}
    out = (df.assign(**{k: c.codes for k, c in cats.items()})
           .groupby(keys, dropna=False, sort=False).agg(**agg).reset_index())
    for k, c in cats.items():
        out[k] = pd.Categorical.from_codes(out[k], c.categories).astype(object)
    return out


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


def file_totals_from_files(files: pd.DataFrame) -> tuple[dict, SavedPaths]:
    """The summary's totals per (process, file) of `files` rows, and the files' names."""
    return file_totals_from_segments([files])


def file_totals_from_segments(segments: Iterable[pd.DataFrame]) -> tuple[dict, SavedPaths]:
    """The same, added up a segment at a time (`TraceReader.segments`): sums, maxima and the
    last name of a file are what the whole table gives, with one segment's rows held at a
    time (the live run's end, after a day of tracing)."""
    totals: dict[tuple, FileTotals] = {}
    table = SavedPaths()
    for files in segments:
        _add(files, totals, table)
    return totals, table


def _add(files: pd.DataFrame, totals: dict[tuple, FileTotals], table: SavedPaths) -> None:
    # The table has no inode generation: a reused inode number's files differ by their paths
    # (each is the one the kernel sent for that generation), so the path takes its place in
    # the key.
    if files.empty:
        return
    file_key = ["device", "inode", "path"]
    # (deduplicated on the dictionaries' codes, the same rows as on their strings, then named)
    names = files.drop_duplicates(file_key, keep="last")
    names = names.astype({c: object for c in (*file_key, "path_source", "fs_type")
                          if isinstance(names[c].dtype, pd.CategoricalDtype)})
    for r in names.itertuples(index=False):
        table.by_id[(str(r.device), int(r.inode), str(r.path))] = SavedFile(
            str(r.path), str(r.path_source), str(r.fs_type), str(r.device))
    # The slowest operation is known for the rows that say it (latency_max_ns > 0), and a
    # row with operations that does not makes the maximum of its (process, op) unknown.
    known = files["latency_max_ns"] > 0
    f = files.assign(known_ops=files["ops"].where(known, 0),
                     unknown_ops=files["ops"].where(~known, 0),
                     known_max_ns=files["latency_max_ns"].where(known, 0))
    summed = grouped(f, ["pid", *file_key, "op"], bytes=("bytes", "sum"),
                      latency_sum_ns=("latency_sum_ns", "sum"), pages_missed=("pages_missed", "sum"),
                      pages_dirtied=("pages_dirtied", "sum"), known_ops=("known_ops", "sum"),
                      unknown_ops=("unknown_ops", "sum"), known_max_ns=("known_max_ns", "max"))
    for r in summed.itertuples(index=False):
        t = totals.setdefault((int(r.pid), str(r.device), int(r.inode), str(r.path)), FileTotals())
        t.add(str(r.op), int(r.known_ops), int(r.bytes), int(r.latency_sum_ns),
              int(r.pages_missed), int(r.pages_dirtied), int(r.known_max_ns))
        t.add(str(r.op), int(r.unknown_ops), 0, 0, 0, 0, 0)
