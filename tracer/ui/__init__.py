"""The terminal views of a run: the rich live view (view.py renderables, live.py the loop and
keys) and, for non-terminal stdout or --no-tui, one dstat-like line per interval (line.py).

All of them render the same per-interval snapshot as the other sinks; `stats` holds the numbers
they derive from it (also used by the CSV sink).
"""

from tracer.ui.line import LinePrinter, NotePrinter, header_line, interval_line
from tracer.ui.live import KEYS, LiveView
from tracer.ui.view import LAYERS, SORTS, ViewState, render_view

__all__ = ["KEYS", "LAYERS", "SORTS", "LinePrinter", "LiveView", "NotePrinter", "ViewState",
           "header_line", "interval_line", "render_view"]
