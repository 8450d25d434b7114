"""Reading a trace directory back: ``tracer.load(DIR)`` gives every table as a pandas DataFrame.

    >>> trace = tracer.load("iotrace-20250101-120000")
    >>> trace.meta["schema_version"]
    2
    >>> trace.latency.groupby("op")["count"].sum()

Each table is read on first access with ``pd.read_parquet(DIR/<table>)`` and then cached. Timestamps
are ``datetime64[ns, UTC]``, dictionary-encoded strings are categoricals, durations are int64
nanoseconds in columns named ``*_ns`` (see `tracer.tracedir.schema`).

Beyond the raw tables, a `Trace` answers the usual questions directly:

    >>> trace.percentiles(layer="syscall", op="read", by="role")   # p50/p90/p99 from the histograms
    >>> trace.findings             # the final verdicts, most severe first, evidence as dicts
    >>> trace.top_files(10)        # the files the job spent most time on
    >>> print(trace.summary())     # the same text as ``iotrace report DIR``

and a notebook displays a trace as a small HTML overview (`Trace._repr_html_`).
"""

from __future__ import annotations

import html
import os

from tracer.tracedir.reader import (
    TraceError,
    TraceReader,
    describe_targets,
    role_counts,
)
from tracer.tracedir.reader import load as _load

__all__ = ["Trace", "TraceError", "TraceReader", "describe_targets", "load", "role_counts"]


class Trace(TraceReader):
    """The tables of one trace directory, read lazily (`TraceReader`), with the summary as text
    and a notebook's HTML view: rendering, which the reader below the renderers leaves out."""

    def summary(self, histograms: bool = False) -> str:
        """The text summary of the trace: exactly what ``iotrace report DIR`` prints (with
        `histograms`, what ``iotrace report DIR --histograms`` prints).

        The same renderer as the end of a live run (`tracer.report`), fed from the tables.
        Reading only: the GPU idle spans are computed in memory, where ``iotrace report``
        also writes them to DIR/gpu_idle.
        """
        from tracer.report import summary_text

        return summary_text(self, histograms=histograms)

    def _repr_html_(self) -> str:
        """A small overview for Jupyter: targets, duration, findings, the training loop's time
        by state, latency, top files."""
        from tracer.render.overview import overview_html
        from tracer.report import trace_training_since

        try:
            return overview_html(self, training_since=trace_training_since(self))
        except TraceError as e:
            return f"<div><b>iotrace trace</b> {html.escape(str(self.directory))}: " \
                   f"{html.escape(str(e))}</div>"


def load(directory: str | os.PathLike[str]) -> Trace:
    """Open the trace directory `directory` written by ``iotrace -o DIR``.

    Reads and checks ``meta.json`` now; tables are read when first accessed. Raises TraceError when
    the directory or its ``meta.json`` is missing or unreadable, or when the trace was written with
    a schema version this iotrace does not read.
    """
    reader = _load(directory)
    return Trace(reader.directory, reader.meta)
