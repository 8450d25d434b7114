"""Reading a trace directory back: ``tracer.load(DIR)`` gives every table as a pandas DataFrame.

    >>> trace = tracer.load("iotrace-20250101-120000")
    >>> trace.meta["schema_version"]
    1
    >>> trace.latency.groupby("op")["count"].sum()

Each table is read on first access with ``pd.read_parquet(DIR/<table>)`` and then cached. Timestamps
are ``datetime64[ns, UTC]``, dictionary-encoded strings are categoricals, durations are int64
nanoseconds in columns named ``*_ns`` (see `tracer.schema`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pyarrow as pa

from tracer.schema import SCHEMA_VERSION, TABLES
from tracer.sinks.parquet import META_FILE

_SEGMENT_GLOB = "part-*.parquet"


class TraceError(Exception):
    """A trace directory cannot be read; the message says what is wrong and what to do."""


class Trace:
    """The tables of one trace directory, read lazily.

    `meta` is the content of ``meta.json``; `tables` lists the tables that have data on disk.
    ``trace["latency"]`` and ``trace.latency`` return the table as a DataFrame; a table that the
    schema defines but that this trace has no data for is an empty DataFrame with its columns.
    """

    def __init__(self, directory: Path, meta: dict[str, object]) -> None:
        """Use `load` instead: it checks the directory and its schema version first."""
        self.directory = directory
        self.meta = meta
        self._cache: dict[str, pd.DataFrame] = {}

    @property
    def tables(self) -> list[str]:
        """Names of the tables with at least one finished segment on disk, sorted."""
        return sorted(
            p.name
            for p in self.directory.iterdir()
            if p.is_dir() and not p.name.startswith((".", "_")) and any(p.glob(_SEGMENT_GLOB))
        )

    def __getitem__(self, name: str) -> pd.DataFrame:
        """Table `name` as a DataFrame (read on first access, then cached)."""
        if name in self._cache:
            return self._cache[name]
        folder = self.directory / name
        present = folder.is_dir() and any(folder.glob(_SEGMENT_GLOB))
        if not present:
            if name not in TABLES:
                known = sorted(set(TABLES) | set(self.tables))
                raise TraceError(
                    f"trace {str(self.directory)!r} has no table {name!r}; "
                    f"tables: {', '.join(known)}"
                )
            frame = TABLES[name].empty_table().to_pandas()
        else:
            try:
                frame = pd.read_parquet(folder)
            except (pa.ArrowException, OSError) as e:
                raise TraceError(
                    f"cannot read table {name!r} from {str(folder)!r}: {e}; a segment may be "
                    f"damaged: move the part-*.parquet files that fail to read out of the folder"
                ) from e
        self._cache[name] = frame
        return frame

    def __getattr__(self, name: str) -> pd.DataFrame:
        """``trace.latency`` is ``trace["latency"]``."""
        if name.startswith("_") or (name not in TABLES and name not in self.tables):
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute or table {name!r}"
            )
        return self[name]

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(TABLES) | set(self.tables))

    def __repr__(self) -> str:
        return f"<Trace {str(self.directory)!r} tables={self.tables}>"


def load(directory: str | os.PathLike[str]) -> Trace:
    """Open the trace directory `directory` written by ``iotrace -o DIR``.

    Reads and checks ``meta.json`` now; tables are read when first accessed. Raises TraceError when
    the directory or its ``meta.json`` is missing or unreadable, or when the trace was written with
    a schema version this iotrace does not read.
    """
    path = Path(directory)
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
    return Trace(path, meta)


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
    if version < SCHEMA_VERSION:
        raise TraceError(
            f"trace {str(meta_path.parent)!r} uses schema version {version}, written by the older "
            f"{written_by}; this iotrace reads version {SCHEMA_VERSION} only: read it with "
            f"{written_by} (pip install 'iotrace==VERSION'), or trace the job again"
        )
