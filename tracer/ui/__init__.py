"""The terminal views of a run: the rich live view (view.py renderables, live.py the loop and
keys) and, for non-terminal stdout or --no-tui, one dstat-like line per interval (line.py).

All of them render the same per-interval snapshot as the other sinks; `stats` holds the numbers
they derive from it (also used by the CSV sink). The names below are imported on first use: a
run without the live view (--no-tui, stdout not a terminal) never imports rich.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracer.ui.line import LinePrinter, NotePrinter, header_line, interval_line
    from tracer.ui.live import KEYS, LiveView
    from tracer.ui.view import LAYERS, SORTS, ViewState, render_view

_LAZY = {"LinePrinter": "tracer.ui.line", "NotePrinter": "tracer.ui.line",
         "header_line": "tracer.ui.line", "interval_line": "tracer.ui.line",
         "KEYS": "tracer.ui.live", "LiveView": "tracer.ui.live", "LAYERS": "tracer.ui.view",
         "SORTS": "tracer.ui.view", "ViewState": "tracer.ui.view", "render_view": "tracer.ui.view"}

__all__ = ["KEYS", "LAYERS", "SORTS", "LinePrinter", "LiveView", "NotePrinter", "ViewState",
           "header_line", "interval_line", "render_view"]


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tracer.ui' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
