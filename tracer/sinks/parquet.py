"""Parquet sink: writes a trace directory that survives the tracer being killed.

Layout (README.md, "The trace directory")::

    DIR/meta.json                     schema version, tool version, host, command line, start/stop
    DIR/<table>/part-NNNNN.parquet    one folder per table, one file per rolled segment

Every table of the schema has a folder and at least one segment from the moment the trace
opens (an empty one, with the table's columns, until rows come), so a notebook that reads
``DIR/events`` works on every trace. Every file appears under its final name only once it is
complete: it is written in ``DIR/.tmp/`` (outside the table folders, so that no reader of a
folder ever sees a file that is not a segment), fsync'd, renamed into place with `os.replace`,
and the folder is fsync'd. A tracer killed with SIGKILL therefore leaves every finished segment
readable and never a partial ``part-*.parquet``; at worst a file in ``DIR/.tmp/``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from tracer.core.selfcost import add_helper_cpu, peak_rss_bytes
from tracer.core.version import __version__
from tracer.tracedir.private import mkdir_private, open_private
from tracer.tracedir.schema import META_FILE, SCHEMA_VERSION, TABLES, table_from_rows
from tracer.tracedir.segments import COVERS_KEY

if TYPE_CHECKING:
    from typing import Self

    from tracer.core.interval import Interval

SNAPSHOT_TABLES = ("latency", "files", "events", "threads", "devices", "device_users",
                   "cpu_waits", "fuse", "stacks")
"""The tables whose rows an interval's snapshot holds as lists (`system` is one row, `gpu` too
is the snapshot's)."""

_PART_RE = re.compile(r"part-(\d+)\.parquet")
TMP_DIR = ".tmp"
"""Where files are written before they are renamed into place, in the trace directory."""
_RESERVED_META = ("schema_version", "tool_version")


MERGE_SEGMENTS = 60
"""Segments of a table merged into one once that many were rolled (5 minutes at the default
roll of 5 s), not 17 000 files a table a day; MERGE_MERGED merges them again."""

MERGE_MERGED = 12
"""Merged segments of a table merged again into one once that many were made (an hour at the
default roll): a day's trace holds a few dozen files per table, not 288, and reading a day
opens that many (docs/benchmarks.md)."""

MERGED_ROW_GROUP_ROWS = 65536
"""Rows gathered into one row group of a merged segment: a row group per segment made a day
of 190 000 row groups, each with its own dictionaries, which took 8 times the bytes and the
time to read (docs/benchmarks.md)."""

MERGED_ROW_GROUP_BYTES = 8 << 20
"""... or fewer rows, once they take this many bytes in memory: the merge holds a row group's
rows read and the group being written, and wide rows (a path each) made 65 536 of them over
100 MiB."""


def segment_name(number: int) -> str:
    """File name of segment `number` (counted from 0 per table): ``part-00042.parquet``."""
    return f"part-{number:05d}.parquet"


def _fsync_dir(path: Path) -> None:
    """Make the entries of folder `path` (new or renamed files) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, write: Callable[[BinaryIO], object], tmp_dir: Path) -> None:
    """Create or replace `path` with what `write` writes into the open file it is given.

    Readers see the old file or the complete new one, never a part: the data goes to a file in
    `tmp_dir` (on the same file system, outside every table folder), is fsync'd, renamed over
    `path`, and the folder is fsync'd. If anything fails the temporary file is removed.
    """
    if not tmp_dir.is_dir():
        mkdir_private(tmp_dir)
    tmp = tmp_dir / f"{path.parent.name}-{path.name}.tmp"
    try:
        with open_private(tmp) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno is not None:
            # A full disk fails in write() with no file name: name the file it was for.
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise
    _fsync_dir(path.parent)


ROLLED_COMPRESSION = "snappy"
"""The codec of rolled segments: zstd took half as much CPU again as snappy to write a roll (a
dozen small tables every few seconds: docs/benchmarks.md) for a few percent fewer bytes, which
the merges, in zstd, win back a few minutes later."""


def _write_parquet(path: Path, data: pa.Table) -> None:
    """Segment `path` of a table folder holds `data`, in one row group."""
    _write_atomic(path, lambda f: pq.write_table(data, f, compression=ROLLED_COMPRESSION,
                                                 row_group_size=max(1, data.num_rows)),
                  path.parent.parent / TMP_DIR)


def _read(path: Path) -> pa.Table:
    """A segment the tracer wrote, whole. Not pq.read_table: it imports pyarrow.dataset, which
    the tracer needs nowhere else (its cost: docs/benchmarks.md, round 3 of issue 17)."""
    return pq.ParquetFile(path).read()


def _row_groups(paths: list[Path]) -> Iterator[pa.Table]:
    """The row groups of segments `paths`, one at a time: a merged segment's are
    MERGED_ROW_GROUP_ROWS rows or MERGED_ROW_GROUP_BYTES or so, so merging merged segments
    holds no more than that."""
    for path in paths:
        f = pq.ParquetFile(path)
        for g in range(f.num_row_groups):
            yield f.read_row_group(g)


def _write_group(out: pq.ParquetWriter, tables: list[pa.Table]) -> None:
    group = pa.concat_tables(tables)  # (its chunks written as they are: no copy of them)
    out.write_table(group, row_group_size=max(1, group.num_rows))


def merge_segments(folder: Path, first: int, last: int, tmp_dir: Path,
                   group_rows: int | None = None, group_bytes: int | None = None) -> None:
    """Segments first..last of the table in `folder` (those still there: rolled ones, or
    merged ones merged again) as one, under the last one's name, in row groups of `group_rows`
    (default MERGED_ROW_GROUP_ROWS) rows or so, fewer once they take `group_bytes` (default
    MERGED_ROW_GROUP_BYTES) in memory (the memory of a group, not of all); its metadata names
    the segments it holds (COVERS_KEY)."""
    group_rows = MERGED_ROW_GROUP_ROWS if group_rows is None else group_rows
    group_bytes = MERGED_ROW_GROUP_BYTES if group_bytes is None else group_bytes
    paths = [p for n in range(first, last + 1) if (p := folder / segment_name(n)).exists()]
    schema = pq.read_schema(paths[-1])
    schema = schema.with_metadata({**(schema.metadata or {}),
                                   COVERS_KEY: f"{first}-{last}".encode()})

    def write(f: BinaryIO) -> None:
        with pq.ParquetWriter(f, schema, compression="zstd") as out:
            pending: list[pa.Table] = []
            rows = size = 0
            for part in _row_groups(paths):
                if part.num_rows:
                    pending.append(part.cast(schema))
                    rows += part.num_rows
                    size += pending[-1].nbytes
                if rows >= group_rows or size >= group_bytes:
                    _write_group(out, pending)
                    pending, rows, size = [], 0, 0
            if pending:
                _write_group(out, pending)

    # the merged segment takes the last one's name; the others go once it is in place
    _write_atomic(folder / segment_name(last), write, tmp_dir)
    for p in paths[:-1]:
        p.unlink()
    _fsync_dir(folder)


class MergeChild:
    """Merges run in a child process (``python -m tracer.sinks.parquet``), while the tracer
    goes on: the tracer's loop does not wait seconds for an hour's merge, and the memory a merge
    reads with is the child's, given back when it exits, where the tracer's allocator kept some
    and its peak rose by the merge's (docs/benchmarks.md). One child at a time, its merges in
    the order they were asked for (a table's merged segments are merged again after they are
    made). The child's CPU counts as the tracer's (tracer.core.selfcost.add_helper_cpu)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory.absolute()
        root = str(Path(__file__).resolve().parent.parent.parent)  # the tracer's own package
        # pyarrow's own allocator (mimalloc) and glibc's growing mmap threshold both keep what
        # a merge freed, its peak then half as large again: the C library's malloc, every
        # large buffer mapped and given back (unless the user chose otherwise)
        self._env = {"ARROW_DEFAULT_MEMORY_POOL": "system", "MALLOC_MMAP_THRESHOLD_": "131072",
                     **os.environ, "PYTHONPATH": os.pathsep.join(
                         [root, *filter(None, [os.environ.get("PYTHONPATH")])])}
        self._proc: subprocess.Popen[bytes] | None = None
        self._jobs: list[tuple[str, int, int]] = []
        self.merges = 0  # merges done
        self.peak_rss_bytes = 0  # the largest child's peak

    def start(self, jobs: list[tuple[str, int, int]]) -> None:
        """Merge each (table, first, last) of `jobs`, in order, once the child before is done
        (its failure raised here)."""
        self.wait()
        args = [str(self.directory), str(MERGED_ROW_GROUP_ROWS),
                str(MERGED_ROW_GROUP_BYTES), *(str(x) for job in jobs for x in job)]
        # -P: not the working folder's `tracer`, which anyone could have put there (it runs as
        # root), but this one, from PYTHONPATH; a session of its own: the Ctrl-C that stops the
        # tracer must not kill its last merge
        self._proc = subprocess.Popen([sys.executable, "-P", "-m", "tracer.sinks.parquet", *args],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, env=self._env,
                                      start_new_session=True)
        self._jobs = jobs

    def running(self) -> bool:
        """True while a child merges; one that has ended is taken in (its failure raised)."""
        if self._proc is None:
            return False
        if self._proc.poll() is None:
            return True
        self.wait()
        return False

    def wait(self) -> None:
        """Until the child (if one runs) is done. A merge that failed raises OSError: the one
        it met (a full disk), or EIO with what the child said."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        out, err = proc.communicate()
        try:
            said = json.loads(out.decode().splitlines()[-1])
        except (IndexError, ValueError):
            said = {}
        add_helper_cpu(float(said.get("cpu_s", 0.0)))
        self.peak_rss_bytes = max(self.peak_rss_bytes, int(said.get("peak_rss_bytes", 0)))
        if proc.returncode == 0:
            self.merges += len(self._jobs)
            return
        if "errno" in said:
            raise OSError(said["errno"], said["strerror"], said["filename"])
        last = (err.decode(errors="replace").strip().splitlines() or ["no word from it"])[-1]
        raise OSError(errno.EIO, f"merging segments failed (exit {proc.returncode}): {last}",
                      str(self.directory))


def _merge_main(argv: list[str]) -> int:
    """The child of MergeChild: DIRECTORY GROUP_ROWS GROUP_BYTES then TABLE FIRST LAST...
    Prints one JSON line: its CPU seconds and peak memory, and the OSError it met, if one."""
    with contextlib.suppress(OSError):
        os.nice(10)  # behind the job and the tracer, on a busy host
    directory, group_rows, group_bytes = Path(argv[0]), int(argv[1]), int(argv[2])
    said: dict[str, object] = {}
    code = 0
    try:
        for i in range(3, len(argv), 3):
            merge_segments(directory / argv[i], int(argv[i + 1]), int(argv[i + 2]),
                           directory / TMP_DIR, group_rows, group_bytes)
    except OSError as e:
        said = {"errno": e.errno or errno.EIO, "strerror": e.strerror or str(e),
                "filename": e.filename if isinstance(e.filename, str) else None}
        code = 1
    t = os.times()
    said.update(cpu_s=t.user + t.system, peak_rss_bytes=peak_rss_bytes())
    print(json.dumps(said), flush=True)
    return code


def remove_tmp_dir(directory: Path) -> None:
    """Removes the trace's ``.tmp`` folder when nothing is left in it (a closed trace)."""
    with contextlib.suppress(FileNotFoundError, OSError):
        (directory / TMP_DIR).rmdir()


def write_segment(folder: Path, data: pa.Table, replace: bool = False) -> Path:
    """Writes `data` as one segment of the table in `folder` (created if missing). With
    `replace`, it becomes the table's only segment: part-00000 is written atomically over the
    first, then the other segments are removed (a reader sees the old table or the new one,
    never none; `iotrace report` rewriting `gpu_idle` uses this)."""
    if not folder.is_dir():
        mkdir_private(folder)
    parts = sorted(p for p in folder.iterdir() if _PART_RE.fullmatch(p.name))
    number = 0 if replace else (int(_PART_RE.fullmatch(parts[-1].name)[1]) + 1 if parts else 0)
    path = folder / segment_name(number)
    _write_parquet(path, data)
    if replace:
        for p in parts:
            if p != path:
                p.unlink(missing_ok=True)
        _fsync_dir(folder)
    remove_tmp_dir(folder.parent)
    return path


class TraceWriter:
    """Writes the tables of one trace as rolled Parquet segments, plus ``meta.json``.

    Every table has a segment from the start (an empty one until rows come). Rows are buffered
    per table with `add` and written by `flush`, one new segment per table that has rows;
    `maybe_roll` flushes when `roll_s` seconds have passed since the last roll. Use it as a
    context manager, or call `close`; closing twice is safe. Methods may be called from several
    threads.
    """

    def __init__(
        self, directory: str | os.PathLike[str], meta: Mapping[str, object], roll_s: float = 5.0,
        merge_apart: bool = False,
    ) -> None:
        """Open the trace in `directory`, which must exist, and write its ``meta.json`` and an
        empty segment for every table of the schema that has none.

        `meta` is any JSON-serialisable mapping (host, kernel, command line, clocks, start time, ...);
        the writer adds ``schema_version`` and ``tool_version`` and owns those two keys.
        `roll_s` is the segment roll period in seconds (monotonic clock). `merge_apart`: merges
        run in a child process (MergeChild) while writing goes on, not in the call that rolls.
        """
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise FileNotFoundError(f"trace directory {str(self.directory)!r} does not exist")
        if roll_s <= 0:
            raise ValueError(f"roll_s must be positive seconds, got {roll_s!r}")
        self.roll_s = roll_s
        self._lock = threading.RLock()
        self._buffers: dict[str, list[pa.Table]] = {}
        self._next_segment: dict[str, int] = {}
        self._unmerged: dict[str, int] = {}  # table -> its first segment not merged yet
        # table -> the first segment held by its merged segments not merged again, and how many
        self._merged: dict[str, tuple[int, int]] = {}
        self.merge_child = MergeChild(self.directory) if merge_apart else None
        self._merges_due: list[tuple[str, int, int]] = []  # for the child, at the roll's end
        self._last_roll = time.monotonic()
        self._closed = False
        self._given_up = False  # give_up(): nothing more is written
        self._meta: dict[str, object] = {}
        self._empty: set[str] = set()  # tables whose only segment is the empty one
        self._set_meta(dict(meta))
        self._write_empty_tables()

    # -- meta.json ---------------------------------------------------------------------------

    @property
    def meta(self) -> dict[str, object]:
        """A copy of what ``meta.json`` holds now."""
        with self._lock:
            return dict(self._meta)

    def update_meta(self, **fields: object) -> None:
        """Merge `fields` into ``meta.json`` and rewrite it atomically (e.g. stop time at exit)."""
        with self._lock:
            if not self._given_up:
                self._set_meta({**self._meta, **fields}, fields)

    def _set_meta(self, meta: dict[str, object], given: Mapping[str, object] | None = None) -> None:
        reserved = [k for k in _RESERVED_META if k in (meta if given is None else given)]
        if reserved:
            raise ValueError(f"meta keys {', '.join(reserved)} are set by the writer")
        meta.update(schema_version=SCHEMA_VERSION, tool_version=__version__)
        # Serialise before touching anything: a value JSON cannot hold leaves the old meta intact.
        data = (json.dumps(meta, indent=2, allow_nan=False) + "\n").encode()
        _write_atomic(self.directory / META_FILE, lambda f: f.write(data),
                      self.directory / TMP_DIR)
        self._meta = meta

    # -- tables ------------------------------------------------------------------------------

    def add(self, table: str, rows: list[Mapping[str, object]]) -> None:
        """Buffer `rows` for `table` until the next flush.

        Rows are checked against the table's schema now (see `tracer.tracedir.schema.table_from_rows`), so
        a bad row raises ValueError here, at the caller, and never at flush time.
        """
        self._check_open()
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}; tables: {', '.join(sorted(TABLES))}")
        if not rows:
            return
        batch = table_from_rows(table, rows)
        if self._given_up:
            return  # checked, but there is nowhere to write it
        with self._lock:
            self._buffers.setdefault(table, []).append(batch)

    def buffered_rows(self) -> dict[str, int]:
        """Rows waiting for the next flush, per table (tables with none are left out)."""
        with self._lock:
            return {t: sum(b.num_rows for b in bs) for t, bs in self._buffers.items() if bs}

    def roll_due(self, now: float | None = None) -> bool:
        """True when `maybe_roll` at `now` (default: the current `time.monotonic()`) writes."""
        now = time.monotonic() if now is None else now
        with self._lock:
            return now - self._last_roll >= self.roll_s

    def maybe_roll(self, now: float | None = None) -> None:
        """Flush if `roll_s` seconds have passed since the last roll.

        `now` is a `time.monotonic()` reading in seconds; it defaults to the current one.
        """
        self._check_open()
        now = time.monotonic() if now is None else now
        with self._lock:
            if now - self._last_roll >= self.roll_s:
                self.flush()
                self._last_roll = now

    def flush(self) -> None:
        """Write one new segment for each table with buffered rows; write nothing for the others
        (a table with no rows yet keeps its empty segment)."""
        self._check_open()
        self._flush()

    def _flush(self) -> None:
        with self._lock:
            if self._given_up:
                return
            if self.merge_child is not None:
                self.merge_child.running()  # a merge that failed says so at the next roll
            # `processes` first: a tracer killed in the middle of a roll leaves no rows that
            # name a process whose row is not on disk.
            for table in sorted(self._buffers, key=lambda t: (t != "processes", t)):
                batches = self._buffers[table]
                if not batches:
                    continue
                data = pa.concat_tables(batches).combine_chunks()
                self._write_segment(table, data)
                # Only once the segment is safely on disk: a failed write keeps the rows.
                del self._buffers[table]
            if self._merges_due:
                assert self.merge_child is not None
                due, self._merges_due = self._merges_due, []
                self.merge_child.start(due)

    def wait_for_merges(self) -> None:
        """Until the merges asked for so far are done (at once without `merge_apart`)."""
        if self.merge_child is not None:
            self.merge_child.wait()

    def _write_segment(self, table: str, data: pa.Table) -> None:
        folder = self.directory / table
        if not folder.is_dir():
            mkdir_private(folder)
            _fsync_dir(self.directory)
        number = self._next_segment.get(table)
        if table in self._empty:
            number = 0  # the first rows take the place of the empty segment, atomically
        elif number is None:
            # Never overwrite: continue after any segment already in the folder.
            found = [int(m[1]) for p in folder.iterdir() if (m := _PART_RE.fullmatch(p.name))]
            number = max(found, default=-1) + 1
        _write_parquet(folder / segment_name(number), data)
        self._empty.discard(table)
        self._next_segment[table] = number + 1
        first = self._unmerged.setdefault(table, number)
        if number - first + 1 < MERGE_SEGMENTS:
            return
        self._merge(table, first, number)
        since, merged = self._merged.get(table, (first, 0))
        if merged + 1 < MERGE_MERGED:
            self._merged[table] = (since, merged + 1)
            return
        self._merge(table, since, number)  # reads the merged segments, the others are gone
        self._merged.pop(table, None)

    def _merge(self, table: str, first: int, last: int) -> None:
        """merge_segments of `table`, first..last: now, or by the child once the roll is done."""
        self._unmerged.pop(table, None)
        if self.merge_child is not None:
            self._merges_due.append((table, first, last))
            return
        merge_segments(self.directory / table, first, last, self.directory / TMP_DIR)
        pa.default_memory_pool().release_unused()  # else its allocator keeps what it read

    def _write_empty_tables(self) -> None:
        """An empty segment, with its columns, for each table that has none yet."""
        for table, schema in TABLES.items():
            folder = self.directory / table
            if folder.is_dir() and any(_PART_RE.fullmatch(p.name) for p in folder.iterdir()):
                continue
            if not folder.is_dir():
                mkdir_private(folder)
            _write_parquet(folder / segment_name(0), schema.empty_table())
            self._empty.add(table)
        _fsync_dir(self.directory)

    def give_up(self) -> None:
        """Stops writing, for good (the disk is full): the rows buffered are dropped, later
        `add`, `flush`, `maybe_roll`, `compact` and `update_meta` write nothing, and `close` only
        tries to record its `final_meta`. What was written stays readable."""
        with self._lock:
            self._given_up = True
            self._buffers.clear()

    def compact(self, table: str, key: tuple[str, ...]) -> None:
        """Rewrites `table` as one segment that holds the last row for each `key`, in order.

        For tables that get a row again whenever an entity changes (``processes``): a closed
        trace has one row each. The new segment is written after the old ones and only then are
        they removed, so a reader, or a tracer killed in between, still finds the last row of
        every key last.
        """
        self._check_open()
        with self._lock:
            self._flush()
            if self._given_up:
                return
            self.wait_for_merges()  # the child may be merging this table's segments
            folder = self.directory / table
            parts = sorted(p for p in folder.glob("part-*.parquet") if _PART_RE.fullmatch(p.name))
            if len(parts) < 2:
                return
            data = pa.concat_tables([_read(p) for p in parts]).unify_dictionaries()
            columns = [data.column(k) for k in key]
            columns = [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c for c in columns]
            keys = zip(*(c.to_pylist() for c in columns), strict=True)
            last = {k: i for i, k in enumerate(keys)}
            self._write_segment(table, data.take(sorted(last.values())).combine_chunks())
            for p in parts:
                p.unlink()
            _fsync_dir(folder)

    # -- life cycle --------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once `close` has run."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"trace writer for {str(self.directory)!r} is closed")

    def close(self, **final_meta: object) -> None:
        """Flush every buffered row and merge `final_meta` into ``meta.json``.

        A second call does nothing (its `final_meta` is ignored).
        """
        with self._lock:
            if self._closed:
                return
            try:
                self._flush()
                if not self._given_up:
                    self.wait_for_merges()
            finally:
                # Even if the last flush failed, record how the trace ended (after give_up,
                # where it can: meta.json is small, and the trace is readable without it).
                self._closed = True
                if final_meta and not self._given_up:
                    self._set_meta({**self._meta, **final_meta}, final_meta)
                elif final_meta:
                    with contextlib.suppress(OSError):
                        self._set_meta({**self._meta, **final_meta}, final_meta)
                remove_tmp_dir(self.directory)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class ParquetSink:
    """The trace directory as a Sink: each interval's rows go to their tables, a segment roll
    follows when the interval carries `processes` rows (so that every segment names the
    processes its rows mention), and the final interval compacts `processes` and closes the
    trace with its meta.

    `stop_meta()` gives meta.json's `stop_ns` and `stop_reason` at the moment of closing.
    `on_error(e)` is told of a write that failed (a full disk): by then nothing more is
    written, and what was written before stays readable.
    """

    def __init__(self, writer: TraceWriter, stop_meta: Callable[[], Mapping[str, object]],
                 on_error: Callable[[OSError], None]) -> None:
        self.writer, self.stop_meta, self.on_error = writer, stop_meta, on_error

    def roll_due(self) -> bool:
        """True when a segment roll is due: the interval should carry `processes` rows."""
        return self.writer.roll_due()

    def write(self, interval: Interval) -> None:
        w, snap = self.writer, interval.snapshot
        for table in SNAPSHOT_TABLES:
            w.add(table, getattr(snap, table))
        w.add("system", [snap.system] if snap.system else [])
        w.add("memory", snap.memory)
        w.add("loop", interval.loop)
        w.add("findings", interval.findings_rows)
        w.add("gpu", snap.gpu)
        w.add("gpu_idle", interval.gpu_idle)
        if interval.processes is not None:
            w.add("processes", interval.processes)
        try:
            if interval.final:
                # While running, a process got a row each time it changed; closed, it has one.
                w.compact("processes", ("pid", "first_seen"))
                w.close(**interval.meta, **self.stop_meta())
            elif interval.processes is not None:
                w.maybe_roll()
        except OSError as e:
            self._failed(e)
            if interval.final:
                w.close(**interval.meta, **self.stop_meta())

    def _failed(self, error: OSError) -> None:
        self.writer.give_up()
        self.on_error(error)

    def close(self) -> None:
        """Closes a trace whose run never reached its final interval (an error)."""
        if not self.writer.closed:
            self.writer.close(**self.stop_meta())


if __name__ == "__main__":
    sys.exit(_merge_main(sys.argv[1:]))
