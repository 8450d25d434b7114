"""The typed rows of `tracer.core.model` name the columns of `tracer.tracedir.schema.TABLES`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import get_type_hints

import pyarrow as pa
import pytest

from tracer.core import model
from tracer.tracedir.schema import TABLES


def _python_type(field: pa.Field) -> object:
    t = field.type
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_timestamp(t) or pa.types.is_integer(t):
        py: type = int
    elif pa.types.is_boolean(t):
        py = bool
    elif pa.types.is_floating(t):
        py = float
    elif pa.types.is_string(t):
        py = str
    else:
        raise AssertionError(f"column {field.name!r}: no Python type for {t}")
    return py | None if field.nullable else py


def test_a_row_type_per_table() -> None:
    assert set(model.ROW_TYPES) == set(TABLES)


@pytest.mark.parametrize("table", sorted(TABLES))
def test_row_type_has_the_tables_columns_and_types(table: str) -> None:
    hints = get_type_hints(model.ROW_TYPES[table])
    schema = TABLES[table]
    assert list(hints) == schema.names  # the same columns, in the same order
    for field in schema:
        assert hints[field.name] == _python_type(field), field.name


def test_model_imports_no_numpy_pandas_or_pyarrow() -> None:
    code = ("import sys, tracer.core.model; "
            "print(sorted({'numpy', 'pandas', 'pyarrow'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parent.parent)
    assert done.stdout.strip() == "[]"
