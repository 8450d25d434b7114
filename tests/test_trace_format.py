"""docs/trace-format.md describes every table and column of `tracer.tracedir.schema.TABLES`:
the same names in the same order, the same types, the same nullable columns, each with a
meaning; so the reference cannot drift from the schema."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa

from tracer.tracedir.schema import DICT_STRING, TABLES, TIMESTAMP

DOC = Path(__file__).resolve().parent.parent / "docs" / "trace-format.md"
ROW = re.compile(r"^\| `(\w+)` \| `([^`]+)` \| (null)? *\| ([^|]*)\| ([^|]*)\|$")


def type_name(t: pa.DataType) -> str:
    if t == TIMESTAMP:
        return "timestamp"
    if t == DICT_STRING:
        return "string (dict)"
    return str(t).replace("double", "float64")


def documented() -> dict[str, list[tuple[str, str, bool, str]]]:
    """Per `## table` section: (column, type, nullable, meaning) of each row of its table."""
    tables: dict[str, list[tuple[str, str, bool, str]]] = {}
    section = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            continue
        m = ROW.match(line)
        if m and section is not None:
            name, type_, null, _unit, meaning = m.groups()
            tables.setdefault(section, []).append((name, type_, null == "null", meaning.strip()))
    return tables


def test_every_table_and_column_is_documented_as_the_schema_has_it() -> None:
    doc = documented()
    assert list(doc) == list(TABLES)
    for table, schema in TABLES.items():
        want = [(f.name, type_name(f.type), f.nullable) for f in schema]
        assert [row[:3] for row in doc[table]] == want, table


def test_what_ts_means() -> None:
    """`events.ts` is when the operation started; the interval tables' `ts` is its end."""
    doc = {t: {name: meaning for name, _, _, meaning in rows} for t, rows in documented().items()}
    assert doc["events"]["ts"] == "when the operation started"
    for table in ("latency", "files", "threads", "loop", "devices", "system"):
        assert doc[table]["ts"] == "end of the interval", table
    for table, meanings in doc.items():  # the shares of gpu_idle say it once, in the first
        for name, meaning in meanings.items():
            assert meaning or (table == "gpu_idle" and name.endswith("_frac")), (table, name)
