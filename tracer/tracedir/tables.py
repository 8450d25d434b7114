"""A trace directory's tables as Arrow tables, read-only and without pandas.

`open_tables(DIR)` checks ``meta.json`` and its schema version and returns a `TraceTables`:
``tables.arrow(name)`` reads a table's usable segments (skipping, and saying which, the ones
that cannot be used), ``tables.row_groups(name)`` a row group at a time. The live tracer reads
its own trace back through this at its end, where pandas' import alone would be a fifth of its
memory; `tracer.tracedir.reader.TraceReader` adds the pandas views on top.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa

from tracer.tracedir import sums
from tracer.tracedir.schema import META_FILE, READ_VERSIONS, SCHEMA_VERSION, TABLES

SEGMENT_GLOB = "part-*.parquet"


class TraceError(Exception):
    """A trace directory cannot be read; the message says what is wrong and what to do."""


class TraceTables:
    """The tables of one trace directory as Arrow tables, read when asked (not cached).

    `meta` is the content of ``meta.json``; `tables` lists the tables that have data on disk.
    """

    def __init__(self, directory: Path, meta: dict[str, object]) -> None:
        """Use `open_tables` (or `tracer.tracedir.reader.load`) instead: they check the
        directory and its schema version first."""
        self.directory = directory
        self.meta = meta
        # table -> [(segment, why it was skipped)] for the tables read so far
        self.damaged: dict[str, list[tuple[Path, str]]] = {}

    @property
    def tables(self) -> list[str]:
        """Names of the tables with at least one finished segment on disk, sorted."""
        return sorted(
            p.name
            for p in self.directory.iterdir()
            if p.is_dir() and not p.name.startswith((".", "_")) and any(p.glob(SEGMENT_GLOB))
        )

    def _has_segments(self, name: str) -> bool:
        """Whether table `name` has a finished segment on disk."""
        folder = self.directory / name
        return folder.is_dir() and any(folder.glob(SEGMENT_GLOB))

    def arrow(self, name: str, columns: Sequence[str] | None = None) -> pa.Table:
        """Table `name` (only its `columns`, by default all) from every usable segment; the
        unusable ones (damaged, cut short, foreign) are skipped, listed in
        `damaged[name]` and reported in one warning line. A table the schema defines with no
        data on disk is empty, with its columns."""
        import warnings

        import pyarrow.parquet as pq

        from tracer.tracedir.segments import conform, covered_segments, segment_number, segment_problems

        folder = self.directory / name
        if not self._has_segments(name):
            if name not in TABLES:
                known = sorted(set(TABLES) | set(self.tables))
                raise TraceError(
                    f"trace {str(self.directory)!r} has no table {name!r}; "
                    f"tables: {', '.join(known)}"
                )
            empty = TABLES[name].empty_table()
            return empty.select(list(columns)) if columns is not None else empty
        known_names = TABLES[name].names if name in TABLES else None
        bad = dict(segment_problems(folder, name, known_names)) if name in TABLES else {}
        read: list[tuple[int | None, pa.Table]] = []
        covered: set[int] = set()
        for seg in sorted(folder.glob(SEGMENT_GLOB)):
            if seg in bad:
                continue
            try:
                f = pq.ParquetFile(seg)  # read_table: a dataset per file, slower
                data = f.read(columns=_present(f, columns))
            except (pa.ArrowException, OSError) as e:
                bad[seg] = f"damaged data ({' '.join(str(e).split())[:120]})"
                continue
            read.append((segment_number(seg.name),
                         conform(data, name, columns) if name in TABLES else data))
            covered.update(covered_segments(f.schema_arrow))
        # a merged segment's parts still on disk (its writer was killed before deleting them)
        tables = [data for n, data in read if n not in covered]
        if bad:
            self.damaged[name] = sorted(bad.items())
            first, reason = self.damaged[name][0]
            msg = (f"table {name!r} of {str(self.directory)!r}: skipped {len(bad)} unusable "
                   f"segment(s) of {len(bad) + len(tables)} ({first.name}: {reason}); the rest "
                   "is loaded")
            if not tables:
                raise TraceError(msg.replace("; the rest is loaded", ": nothing left to load"))
            warnings.warn(msg, stacklevel=3)
        return pa.concat_tables(tables, promote_options="permissive")

    def row_groups(self, name: str, columns: Sequence[str] | None = None) -> Iterator[pa.Table]:
        """Table `name` (only its `columns`, by default all) a row group at a time (a rolled
        segment's rows, or about 65 536 rows of a merged one), in the order `arrow(name)` has
        its rows, for a sum over a table too large to hold whole (a day of `files`). A trace
        closed by its writer: a segment that cannot be read raises TraceError (`arrow` skips
        it)."""
        import pyarrow.parquet as pq

        from tracer.tracedir.segments import conform, covered_segments, segment_number

        segs = sorted((self.directory / name).glob(SEGMENT_GLOB))
        try:
            # a merged segment's parts still on disk (its writer was killed before deleting
            # them): known from the merged one's metadata, read before any rows
            covered = {n for seg in segs for n in covered_segments(pq.read_schema(seg))}
            for seg in segs:
                if segment_number(seg.name) not in covered:
                    f = pq.ParquetFile(seg)
                    present = _present(f, columns)
                    for g in range(f.num_row_groups):
                        data = f.read_row_group(g, columns=present)
                        yield conform(data, name, columns) if name in TABLES else data
        except (pa.ArrowException, OSError) as e:
            raise TraceError(f"table {name!r} of {str(self.directory)!r}: cannot read a "
                             f"segment ({' '.join(str(e).split())[:120]})") from e

    @property
    def start_ns(self) -> int | None:
        """When tracing started, ns since the Unix epoch (``meta.json``), or None if unknown."""
        return _int_or_none(self.meta.get("start_ns"))

    @property
    def stop_ns(self) -> int | None:
        """When tracing stopped, or None (unknown, or a tracer that was killed)."""
        return _int_or_none(self.meta.get("stop_ns"))

    @property
    def duration_s(self) -> float | None:
        """Seconds from start to stop (``meta.json``), or None if either is unknown."""
        if self.start_ns is None or self.stop_ns is None:
            return None
        return (self.stop_ns - self.start_ns) / 1e9

    @property
    def targets(self) -> dict[str, list]:
        """What was traced: ``{"pids": [...], "command": [...]}`` (from ``meta.json``)."""
        targets = self.meta.get("targets")
        if not isinstance(targets, dict):
            return {"pids": [], "command": []}
        return {"pids": list(targets.get("pids") or []),
                "command": list(targets.get("command") or [])}

    def __repr__(self) -> str:
        return f"<Trace {str(self.directory)!r} tables={self.tables}>"


def open_tables(directory: str | os.PathLike[str]) -> TraceTables:
    """Open the trace directory `directory` written by ``iotrace -o DIR``.

    Reads and checks ``meta.json`` now; tables are read when asked. Raises TraceError when
    the directory or its ``meta.json`` is missing or unreadable, or when the trace was written with
    a schema version this iotrace does not read.
    """
    path = Path(directory)
    return TraceTables(path, read_meta(path))


def read_meta(path: Path) -> dict[str, object]:
    """The checked ``meta.json`` of trace directory `path` (see `open_tables`)."""
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise TraceError(
            f"trace directory {str(path)!r} {what}; pass the folder given to 'iotrace -o'"
        )
    meta_path = path / META_FILE
    try:
        text = meta_path.read_text()
    except FileNotFoundError:
        raise TraceError(
            f"{str(path)!r} is not an iotrace trace: it has no {META_FILE}; pass the folder given "
            f"to 'iotrace -o' (a trace always has one, written when tracing starts)"
        ) from None
    except OSError as e:
        raise TraceError(f"cannot read {str(meta_path)!r}: {e.strerror or e}") from e
    try:
        meta = json.loads(text)
    except ValueError as e:
        raise TraceError(
            f"{str(meta_path)!r} is damaged (not valid JSON: {e}); restore it from a copy, or "
            f"read the tables directly with pandas.read_parquet('{path}/<table>')"
        ) from e
    if not isinstance(meta, dict):
        raise TraceError(f"{str(meta_path)!r} is damaged: it holds no JSON object")
    _check_version(meta_path, meta)
    return meta


def _check_version(meta_path: Path, meta: dict[str, object]) -> None:
    version = meta.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise TraceError(
            f"{str(meta_path)!r} has no valid schema_version (found {version!r}); it was not "
            f"written by iotrace, or is damaged"
        )
    written_by = f"iotrace {meta.get('tool_version', '(unknown version)')}"
    if version > SCHEMA_VERSION:
        raise TraceError(
            f"trace {str(meta_path.parent)!r} uses schema version {version}, written by "
            f"{written_by}; this iotrace reads version {SCHEMA_VERSION} only: upgrade iotrace "
            f"(pip install -U iotrace) to read it"
        )
    if version not in READ_VERSIONS:
        raise TraceError(
            f"trace {str(meta_path.parent)!r} uses schema version {version}, written by the older "
            f"{written_by}; this iotrace reads version {SCHEMA_VERSION} only: read it with "
            f"{written_by} (pip install 'iotrace==VERSION'), or trace the job again"
        )


def describe_targets(trace: TraceTables) -> str:
    """What was traced, in words: the command or the PIDs."""
    import shlex

    targets = trace.targets
    if targets["command"]:
        return shlex.join(str(a) for a in targets["command"])
    if targets["pids"]:
        return "PID " + " ".join(str(p) for p in targets["pids"])
    return "(unknown)"


def role_counts(trace: TraceTables) -> dict[str, int]:
    """How many processes had each role (``{"main": 1, "dataloader_worker": 8}``), most first."""
    return sums.role_counts(trace.arrow("processes", sums.COLUMNS["processes"]))


def _present(segment, columns: Sequence[str] | None) -> list[str] | None:
    """Of `columns` (None: all), those the segment (a ParquetFile) has: conform fills the
    others, nullable, with nulls."""
    return None if columns is None else [c for c in columns if c in segment.schema_arrow.names]


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
