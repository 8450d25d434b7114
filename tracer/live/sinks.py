"""The sinks of one run, opened in one place: which the options ask for, in what order every
interval goes to them, and what a failure to open one tells the user (and exits with).

The Prometheus endpoint is served before the traced command is released (a port in use fails
the run before the job starts); the others open once the programs are attached, when the
first interval starts (the OTLP pusher after the Prometheus sink, whose registry it reads).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from tracer.errors import EXIT_OUTPUT, EXIT_USAGE, TraceFailure

if TYPE_CHECKING:
    from tracer.live.options import TraceOptions
    from tracer.sinks import Sink
    from tracer.sinks.parquet import ParquetSink


def serve_metrics(listen: tuple[str, int], err: TextIO) -> Sink:
    """Serves /metrics on (host, port); says where on `err`."""
    from tracer.sinks.prometheus import PrometheusSink

    prometheus = PrometheusSink()
    try:
        prometheus.start(*listen)
    except OSError as e:
        raise TraceFailure(str(e), EXIT_USAGE) from None
    print(f"Serving metrics on {prometheus.url}", file=err, flush=True)
    return prometheus


def push_metrics(url: str, sinks: list[Sink], err: TextIO) -> None:
    """Pushes the series of /metrics to `url` over OTLP/HTTP (--otlp): read from the served
    Prometheus sink when there is one, else from one that serves nothing, put in `sinks` ahead
    of the pusher so that each interval is folded in before it is pushed. A receiver that fails
    gets one line on `err`; nothing here waits for it."""
    from tracer.sinks.otlp import OtlpSink
    from tracer.sinks.prometheus import PrometheusSink

    metrics = next((s for s in sinks if isinstance(s, PrometheusSink)), None)
    if metrics is None:
        metrics = PrometheusSink()
        sinks.append(metrics)
    sinks.append(OtlpSink(metrics.registry, url,
                          note=lambda line: print(line, file=err, flush=True)))
    print(f"Pushing metrics to {url} (OTLP/HTTP, every interval)", file=err, flush=True)


def open_sinks(opts: TraceOptions, sinks: list[Sink], *, meta: dict, what: str, out: TextIO,
               err: TextIO, stop_meta: Callable[[], dict], cannot_write: Callable[[OSError], None],
               stdout_failed: Callable[[OSError], None],
               on_quit: Callable[[], None]) -> ParquetSink:
    """Opens the trace directory's sink, the CSV file, the OTLP pusher and the terminal's
    output, and puts them in `sinks` (which may hold the metrics already served) in the order
    every interval goes to them: the trace first (were a later sink to fail, the trace has the
    interval already), then the others, the terminal last. Each goes into `sinks` as it
    opens, so that closing `sinks` closes what was opened before a failure. Returns the
    trace's sink.

    `meta`: meta.json's fields at the start; `what`: what is traced, for the live view's
    header; `stop_meta` gives meta.json's fields at the end, `cannot_write` hears of a segment
    that could not be written, `stdout_failed` of interval lines that could not be printed,
    `on_quit` of the live view's q key."""
    from tracer.sinks.parquet import ParquetSink, TraceWriter

    try:
        writer = TraceWriter(opts.output, meta, roll_s=opts.roll_s, merge_apart=True)
    except OSError as e:
        raise TraceFailure(cannot_write_message(e, opts.output, started=False),
                           EXIT_OUTPUT) from None
    trace = ParquetSink(writer, stop_meta, cannot_write)
    sinks.insert(0, trace)
    if opts.csv:
        from tracer.sinks.csv import CsvSink

        try:
            sinks.append(CsvSink(opts.csv, interval_s=opts.interval_s))
        except OSError as e:
            raise TraceFailure(f"cannot write --csv {opts.csv}: {e.strerror}",
                               EXIT_USAGE) from None
    if opts.otlp:  # before the live view takes the terminal, which the line would disturb
        push_metrics(opts.otlp, sinks, err)
    if opts.tui:
        from tracer.ui.live import LiveView

        view = LiveView(targets=what, interval_s=opts.interval_s, on_quit=on_quit)
        sinks.append(view.start())
    else:  # where the live view owns the terminal, it alone shows notes
        from tracer.ui.line import LinePrinter, NotePrinter

        sinks += [LinePrinter(out, opts.interval_s, on_error=stdout_failed), NotePrinter(err)]
    return trace


def cannot_write_message(error: OSError, output: Path, started: bool = True) -> str:
    """One line for a trace file that could not be written: which, why, what to do."""
    full = error.errno in (errno.ENOSPC, errno.EDQUOT)
    advice = "free space or choose another -o DIR" if full else "choose another -o DIR"
    where = f" writing {error.filename}" if error.filename else f" writing into {output}"
    text = f"{error.strerror or error}{where}: {advice}"
    if started:
        text += f"; tracing stopped, what was written before is kept in {output}"
    return text
