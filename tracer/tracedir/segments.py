"""Which segments of a table cannot be used, and why (shared by the loader and the exporters).

A segment is unusable when it is empty, not Parquet, cut short, written with another schema
version, or foreign (a required column missing, or a column of another type). A segment that
lacks a nullable column (written by an older iotrace of the same schema version, or an NVML
stream recorded elsewhere) is usable: `conform` fills that column with nulls. The loader skips
the unusable segments, says which, and loads the rest.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tracer.tracedir.schema import READ_VERSIONS, SCHEMA_VERSION, SCHEMA_VERSION_KEY, TABLES

COVERS_KEY = b"iotrace.covers"
"""Parquet metadata of a merged segment (sinks/parquet.MERGE_SEGMENTS): the numbers of the first
and last segments it holds ("12-71"). It has the last one's name; the others are deleted once
it is in place, and a reader skips any of them still there (a tracer killed in between)."""


def covered_segments(schema: pa.Schema) -> range:
    """The numbers of the other segments a merged segment holds (empty: it is not merged), from
    its schema's metadata."""
    covers = (schema.metadata or {}).get(COVERS_KEY)
    if not covers:
        return range(0)
    first, last = (int(n) for n in covers.decode().split("-"))
    return range(first, last)


def segment_number(name: str) -> int | None:
    """The number of segment ``part-00042.parquet`` (None for a name of another form)."""
    digits = name.removeprefix("part-").removesuffix(".parquet")
    return int(digits) if digits.isdigit() else None


def segment_problems(
    folder: str | os.PathLike[str], table: str, columns: Iterable[str] | None = None,
    read_data: bool = False,
) -> list[tuple[Path, str]]:
    """The segments (``part-*.parquet``) of table `table` in `folder` that cannot be used, and why.

    A segment is listed when it is empty, not Parquet or cut short (no readable footer), written
    with another schema version, or foreign: it lacks one of `columns` (default: every column of
    the table in `tracer.tracedir.schema.TABLES`) that is required, or has one with another type
    (dictionary-encoded and plain strings count as the same). With `read_data`, every segment
    is also read in full, which finds damaged data pages (slower: reads the whole table).
    Returns ``(path, reason)`` pairs in segment order; an empty list when all are fine.
    """
    schema = TABLES[table]
    wanted = [schema.field(c) for c in (schema.names if columns is None else columns)]
    problems: list[tuple[Path, str]] = []
    for path in sorted(Path(folder).glob("part-*.parquet")):
        reason = _segment_problem(path, wanted, read_data)
        if reason:
            problems.append((path, reason))
    return problems


def _segment_problem(path: Path, wanted: list[pa.Field], read_data: bool) -> str | None:
    try:
        size = path.stat().st_size
        if size == 0:
            return "empty file"
        found = pq.read_schema(path)
    except (pa.ArrowException, OSError) as e:
        if isinstance(e, OSError) and not isinstance(e, pa.ArrowException) and e.strerror:
            return f"cannot open: {e.strerror}"
        return _not_parquet(path, e)
    version = (found.metadata or {}).get(SCHEMA_VERSION_KEY)
    # a version it reads: an older one's missing columns are null (conform)
    if version is not None and version not in {str(v).encode() for v in READ_VERSIONS}:
        return (f"written with schema version {version.decode(errors='replace')}, "
                f"not {SCHEMA_VERSION}")
    missing = [f.name for f in wanted if f.name not in found.names and not f.nullable]
    if missing:
        return f"not an iotrace segment of this table: no column {', '.join(missing)}"
    for f in wanted:
        if f.name not in found.names:
            continue
        got = found.field(f.name).type
        if not _same_type(got, f.type):
            return f"not an iotrace segment of this table: column {f.name} is {got}, not {f.type}"
    if read_data:
        try:
            pq.read_table(path, columns=[f.name for f in wanted if f.name in found.names])
        except (pa.ArrowException, OSError) as e:
            return f"damaged data ({_first_line(e)})"
    return None


def conform(data: pa.Table, table: str, names: Iterable[str] | None = None) -> pa.Table:
    """`data`, a usable segment of `table`, with exactly the table's schema (only its columns
    `names`, by default all): its columns in order, each of the schema's type, the nullable
    ones it lacks filled with nulls, columns the schema does not know left out."""
    schema = TABLES[table]
    if names is not None:
        schema = pa.schema([schema.field(n) for n in names])
    columns = []
    for f in schema:
        if f.name in data.column_names:
            column = data.column(f.name)
            columns.append(column if column.type == f.type else column.cast(f.type))
        else:
            columns.append(pa.nulls(data.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _not_parquet(path: Path, error: BaseException) -> str:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            f.seek(max(0, path.stat().st_size - 4))
            tail = f.read(4)
    except OSError:
        return f"unreadable ({_first_line(error)})"
    if head != b"PAR1":
        return "not a Parquet file"
    if tail != b"PAR1":
        return "cut short: no Parquet footer (truncated)"
    return f"damaged Parquet footer ({_first_line(error)})"


def _first_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text[:200]


def _same_type(got: pa.DataType, want: pa.DataType) -> bool:
    def stringish(t: pa.DataType) -> bool:
        if pa.types.is_dictionary(t):
            t = t.value_type
        return pa.types.is_string(t) or pa.types.is_large_string(t)

    return got == want or (stringish(got) and stringish(want))
