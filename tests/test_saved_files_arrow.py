"""`tracer.render.saved_files` adds the `files` rows up with pyarrow and numpy: the same totals,
in the same order, and the same names as the pandas implementation it replaced (kept below as
the reference), whatever the segments' and batches' dictionaries; and without importing pandas
(the live run's end)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import ROOT
from tracer.core.model import FileTotals
from tracer.render import saved_files
from tracer.render.saved_files import (
    SavedFile,
    SavedPaths,
    _groups,
    file_totals_from_files,
    file_totals_from_segments,
    top_file_totals,
)
from tracer.render.summary import render_top_files
from tracer.report import grouped
from tracer.tracedir.schema import TABLES

SCHEMA = TABLES["files"]
STRINGS = ("comm", "role", "path", "path_source", "fs_type", "device", "op")


# The reference: saved_files.py's pandas implementation before it (git 12c10ba), as it was
# (its `grouped` now report.py's).

def reference_from_segments(segments: Iterable[pd.DataFrame]) -> tuple[dict, SavedPaths]:
    totals: dict[tuple, FileTotals] = {}
    table = SavedPaths()
    for files in segments:
        _add(files, totals, table)
    return totals, table


def _add(files: pd.DataFrame, totals: dict[tuple, FileTotals], table: SavedPaths) -> None:
    if files.empty:
        return
    file_key = ["device", "inode", "path"]
    names = files.drop_duplicates(file_key, keep="last")
    names = names.astype({c: object for c in (*file_key, "path_source", "fs_type")
                          if isinstance(names[c].dtype, pd.CategoricalDtype)})
    for r in names.itertuples(index=False):
        table.by_id[(str(r.device), int(r.inode), str(r.path))] = SavedFile(
            str(r.path), str(r.path_source), str(r.fs_type), str(r.device))
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


# -- building `files` rows ----------------------------------------------------------------------

def batch(rows: list[dict], rng: np.random.Generator, extra: int = 2) -> pa.RecordBatch:
    """`rows` as a RecordBatch of the files schema, each dictionary column with a dictionary of
    its own: its values shuffled, and `extra` values no row has."""
    arrays = []
    for f in SCHEMA:
        values = [r.get(f.name) for r in rows]
        if f.name in STRINGS:
            words = sorted(set(values)) + [f"unused-{f.name}-{i}" for i in range(extra)]
            words = [words[i] for i in rng.permutation(len(words))]
            at = {w: i for i, w in enumerate(words)}
            arrays.append(pa.DictionaryArray.from_arrays(
                pa.array([at[v] for v in values], pa.int32()), pa.array(words, pa.string())))
        else:
            arrays.append(pa.array(values, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


def row(pid: int, path: str, inode: int, op: str, ops: int, max_ns: int, nbytes: int = 4096,
        device: str = "259:1", ts: int = 0, source: str = "kernel", fs: str = "ext4") -> dict:
    return {"ts": ts, "pid": pid, "comm": f"c{pid}", "role": "main", "path": path,
            "path_source": source, "fs_type": fs, "device": device, "inode": inode, "op": op,
            "file_count": 1, "ops": ops, "bytes": nbytes, "latency_sum_ns": 1000 * ops + pid,
            "latency_max_ns": max_ns, "pages_missed": ops % 3, "pages_dirtied": ops % 2,
            "cache_hit_pct": None, "reread_bytes": None, "reread_pages_missed": None}


def hand_segments() -> list[pa.Table]:
    """Three segments of two or three batches each: three processes, files met again in later
    batches and segments, rows with and without their slowest operation, reads and writes, and
    inode 7 reused: /d/old (deleted) and then /d/new."""
    rng = np.random.default_rng(1)
    b = [
        [row(10, "/d/a", 1, "read", 5, 900), row(11, "/d/a", 1, "read", 2, 0),
         row(10, "/d/b", 2, "write", 1, 300), row(10, "/d/old", 7, "read", 3, 50),
         row(12, "/d/c", 3, "read", 0, 0, nbytes=0)],
        [row(10, "/d/a", 1, "read", 4, 1200, source="proc_fd"), row(10, "/d/a", 1, "write", 1, 0),
         row(11, "/d/b", 2, "read", 2, 70), row(12, "/d/c", 3, "read", 6, 0)],
        [row(10, "/d/old (deleted)", 7, "read", 1, 40), row(11, "/d/a", 1, "read", 3, 400)],
        [row(10, "/d/new", 7, "read", 2, 0), row(10, "/d/new", 7, "write", 2, 20, fs="xfs"),
         row(12, "/d/a", 1, "read", 9, 100, device="8:0")],
        [row(11, "/d/b", 2, "read", 1, 0), row(10, "/d/a", 1, "read", 1, 5000),
         row(12, "/d/a", 1, "read", 1, 0, device="8:0")],
        [row(10, "/d/new", 7, "read", 4, 60, source="sibling"), row(13, "/d/d/", 9, "read", 8, 0,
                                                                     source="folder")],
        [row(11, "/d/c", 3, "write", 2, 10), row(10, "/d/b", 2, "write", 0, 0)],
    ]
    batches = [batch(rows, rng) for rows in b]
    return [pa.Table.from_batches(batches[0:2]), pa.Table.from_batches(batches[2:5]),
            pa.Table.from_batches(batches[5:7])]


def random_segments(seed: int, segments: int = 4, batches: int = 3, rows: int = 1500
                    ) -> list[pa.Table]:
    """Many files, processes and repeats, each batch with a dictionary of its own; rows
    without operations have no slowest one, as the tracer writes them."""
    rng = np.random.default_rng(seed)
    files = [(f"/data/f{i % 180}" + ("" if i < 180 else f".v{i // 180}"), 1000 + i % 200,
              ("259:1", "8:0")[i % 2]) for i in range(260)]  # inode numbers reused by paths
    out = []
    for _ in range(segments):
        parts = []
        for _ in range(batches):
            rs = []
            for _ in range(rows):
                path, inode, dev = files[rng.integers(len(files))]
                ops = int(rng.integers(0, 4))
                max_ns = int(rng.integers(1, 10_000)) if ops and rng.random() < 0.7 else 0
                rs.append(row(int(rng.choice([100, 101, 4_000_000, 7])), path, inode,
                              str(rng.choice(["read", "write", "fsync", "open"])), ops, max_ns,
                              nbytes=int(rng.integers(0, 1 << 20)), device=dev,
                              source=str(rng.choice(["kernel", "proc_fd"])),
                              fs=str(rng.choice(["ext4", "xfs"]))))
            parts.append(batch(rs, rng, extra=int(rng.integers(0, 5))))
        out.append(pa.Table.from_batches(parts))
    return out


def assert_same(got: tuple[dict, SavedPaths], want: tuple[dict, SavedPaths]) -> None:
    totals, names = got
    want_totals, want_names = want
    assert list(totals) == list(want_totals)  # the same keys, in the same order
    for key, t in want_totals.items():
        g = totals[key]
        assert list(g.by_op.items()) == list(t.by_op.items()), key
        assert (g.latency_sum_ns, g.pages_missed, g.pages_dirtied, g.dir_ino) == (
            t.latency_sum_ns, t.pages_missed, t.pages_dirtied, t.dir_ino), key
    assert names.by_id == want_names.by_id


# -- tests --------------------------------------------------------------------------------------

def test_hand_rows_are_the_pandas_totals() -> None:
    segments = hand_segments()
    assert len({tuple(b.column("path").dictionary.to_pylist())
                for t in segments for b in t.to_batches()}) == 7
    want = reference_from_segments(t.to_pandas() for t in segments)
    got = file_totals_from_segments(segments)
    assert_same(got, want)
    totals, names = got
    # the reused inode's files are apart, each named by its last row
    assert names.by_id[("259:1", 7, "/d/new")] == SavedFile("/d/new", "sibling", "ext4", "259:1")
    assert names.by_id[("259:1", 7, "/d/old")].path_source == "kernel"
    assert (10, "259:1", 7, "/d/old (deleted)") in totals
    # a known slowest read, and one not known (a row without latency_max_ns)
    assert totals[(10, "259:1", 1, "/d/a")].by_op["read"] == [10, 3 * 4096, 5000, 0]
    assert totals[(10, "259:1", 1, "/d/a")].by_op["write"] == [1, 4096, 0, 1]
    assert totals[(12, "259:1", 3, "/d/c")].by_op["read"] == [6, 4096, 0, 1]


def test_batches_and_dataframes_are_the_same_totals() -> None:
    segments = hand_segments()
    want = file_totals_from_segments(segments)
    assert_same(file_totals_from_segments(b for t in segments for b in t.to_batches()), want)
    assert_same(file_totals_from_segments(t.to_pandas() for t in segments), want)
    assert_same(file_totals_from_files(pa.concat_tables(segments)), want)
    assert_same(file_totals_from_files(pa.concat_tables(segments).to_pandas()), want)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_rows_are_the_pandas_totals(seed: int) -> None:
    segments = random_segments(seed)
    assert_same(file_totals_from_segments(segments),
                reference_from_segments(t.to_pandas() for t in segments))
    # the whole table as one segment too
    whole = pa.concat_tables(segments)
    assert_same(file_totals_from_segments([whole]), reference_from_segments([whole.to_pandas()]))


def test_a_string_twice_in_a_dictionary_is_one_key() -> None:
    (segment, *_) = hand_segments()
    b = segment.to_batches()[0]
    path = b.column("path")
    doubled = pa.DictionaryArray.from_arrays(
        pa.array([i + len(path.dictionary) * (n % 2) for n, i in
                  enumerate(path.indices.to_pylist())], pa.int32()),
        pa.concat_arrays([path.dictionary, path.dictionary]))
    twice = b.set_column(SCHEMA.get_field_index("path"), "path", doubled)
    assert_same(file_totals_from_segments([twice]), file_totals_from_segments([b]))


def test_nothing_to_add() -> None:
    empty = SCHEMA.empty_table()
    for segments in ([], [empty], [empty, *hand_segments()[:1], empty]):
        assert_same(file_totals_from_segments(segments),
                    reference_from_segments(t.to_pandas() for t in segments))


def test_groups_of_keys_too_many_for_one_int64(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys whose spans multiply past 2**63 are numbered a few at a time: the same groups,
    numbered as they first come."""
    rng = np.random.default_rng(3)
    n, distinct = 20_000, 5_000
    keys = [rng.integers(0, n, distinct), rng.integers(0, 1 << 62, distinct),
            rng.integers(-n // 2, n // 2, distinct), rng.integers(0, n, distinct),
            rng.integers(0, n, distinct)]
    rows = rng.integers(0, distinct, n)
    keys = [k[rows] for k in keys]
    calls = []
    numbered = saved_files._numbered
    monkeypatch.setattr(saved_files, "_numbered", lambda v: calls.append(len(v)) or numbered(v))
    group, count = _groups(keys)
    assert len(calls) == 3  # the sparse key, the first four keys, and all five
    _, first, inverse = np.unique(np.stack(keys, axis=1), axis=0, return_index=True,
                                  return_inverse=True)
    assert count == len(first) <= distinct
    # the same partition, numbered by first row
    rank = np.empty(count, np.int64)
    rank[np.argsort(first)] = np.arange(count)
    assert np.array_equal(group, rank[inverse.ravel()])


def test_saved_rows_are_added_without_pandas(tmp_path) -> None:
    """The live run's end reads its trace's `files` back with pandas kept out (as the
    session keeps it out: pyarrow would import it where installed): the same totals."""
    path = tmp_path / "part-00001.parquet"
    pq.write_table(pa.concat_tables(hand_segments()), path, row_group_size=6)
    code = f"""
import sys
from tracer.live.session import NoPandas
NoPandas().install()
import pyarrow.parquet as pq
from tracer.render.saved_files import file_totals_from_segments
from tracer.tracedir.segments import conform
f = pq.ParquetFile({str(path)!r})
totals, names = file_totals_from_segments(
    conform(f.read_row_group(g), "files") for g in range(f.num_row_groups))
print(len(totals), len(names.by_id), "pandas" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    totals, names = reference_from_segments([pa.concat_tables(hand_segments()).to_pandas()])
    assert out.stdout.split() == [str(len(totals)), str(len(names.by_id)), "False"], out.stderr


@pytest.mark.parametrize("n", [1, 10, 100_000])
@pytest.mark.parametrize("seed", [0, 1])
def test_top_totals_print_as_the_whole(seed: int, n: int) -> None:
    """The live run's end keeps only the pairs it prints: the same lines as all the totals
    give (ties in the rows' order), the same count; only the printed files named."""
    segments = random_segments(seed)
    totals, names = file_totals_from_segments(segments)
    top, top_names, count = top_file_totals(segments, n)
    assert count == len(totals) and len(top) == min(n, len(totals))
    assert (render_top_files(top, top_names, n, count=count)
            == render_top_files(totals, names, n))
    assert set(top_names.by_id) == {key[1:] for key in top}


@pytest.mark.parametrize("n", [3, 5, 8])
def test_top_totals_break_ties_as_the_whole(n: int) -> None:
    """Pairs of equal time and bytes, met in a shuffled order over batches and segments: the
    top `n`, cut through the ties, are the ones the whole totals print."""
    rng = np.random.default_rng(n)
    rows = [row(10, f"/t/f{i}", 100 + i, "read", 1, 5, nbytes=4096 * (1 + i % 2))
            for i in range(12)] + [row(10, f"/t/f{i}", 100 + i, "write", 1, 5, nbytes=0)
                                   for i in range(0, 12, 3)]
    rows = [rows[i] for i in rng.permutation(len(rows))]
    segments = [pa.Table.from_batches([batch(rows[:6], rng), batch(rows[6:10], rng)]),
                pa.Table.from_batches([batch(rows[10:], rng)])]
    totals, names = file_totals_from_segments(segments)
    top, top_names, count = top_file_totals(segments, n)
    assert (render_top_files(top, top_names, n, count=count)
            == render_top_files(totals, names, n))
